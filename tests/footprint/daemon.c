/*
 * daemon.c - a test that is a sandboxed daemon (issue 22.7): what a user-mode network stack
 * keeping unacknowledged data in the kernel does with lowcopy, linked from the archive
 * (`pkg-config --static --libs lowcopy-static`, and `lowcopy-peek`: liblowcopy_peek.a, the
 * peek path alone) and run under its own seccomp filter.
 *
 * - A static table of connection entries, each holding its peeker's storage
 *   (lowcopy_peeker_storage, LOWCOPY_PEEKER_SIZE bytes) and one offset of its own (the bytes
 *   peeked and not yet acknowledged); no pointer beside the storage (*out == mem is checked),
 *   no heap.
 * - Its filter: the syscalls of include/syscalls/use_peeker_init_closing.list (read from the
 *   file named by argv[1], the plain list a seccomp generator reads), plus the daemon's own
 *   (poll for its event loop, write for its report, exit_group). Anything else kills it (SECCOMP_RET_KILL_PROCESS).
 *   The peekers are made after the filter is in: init is held to the list too.
 * - Peers (a child process, forked before the filter) write a pattern stream per connection
 *   and shut down; the daemon peeks at its own offset (lowcopy_peeker_peekv_at, two iovecs),
 *   checks each byte against the pattern at lowcopy_peek_result.stream_pos, re-peeks earlier
 *   bytes now and then (a retransmission: a rewind), acknowledges with lowcopy_peeker_consume,
 *   hashes the stream (FNV-1a) and at the end compares hash and length with the pattern's;
 *   then lowcopy_peeker_release(..., LOWCOPY_RELEASE_CLOSING) and close.
 *
 * Exit status 0 when every stream arrived exact; 1 a wrong result (the line says which); 2 a
 * set-up failure. tests/footprint/check.sh runs it and checks the footprint bounds. x86_64.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <lowcopy.h>

#if !defined(__x86_64__)
#error "tests/footprint/daemon.c builds an x86_64 filter"
#endif

enum {
    NCONN = 8,
    STREAM = 3 << 20,     /* bytes per connection */
    ACK_AT = 48 << 10,    /* acknowledge once this much is unacknowledged */
    REWIND_EVERY = 7,     /* every 7th peek re-peeks earlier bytes first */
};

struct conn {
    int fd;
    int peer;
    uint32_t mode;
    uint32_t off;          /* the daemon's own offset: peeked, not acknowledged */
    uint64_t acked;        /* bytes consumed (acknowledged) */
    uint64_t hash;         /* FNV-1a of the bytes in order, each once */
    unsigned peeks;
    int done;
    lowcopy_peeker_storage pk; /* the peeker lives here: *out == &pk */
};

static struct conn table[NCONN];

static unsigned char pattern_byte(uint64_t p)
{
    return (unsigned char)((p * 131 + 7) % 251);
}

static uint64_t fnv(uint64_t h, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The report: write(2) is one of the daemon's own syscalls. */
static void say(const char *s)
{
    if (write(1, s, strlen(s)) < 0)
        _exit(2);
}

static void fail(const char *what, int c, long v)
{
    char b[160];
    snprintf(b, sizeof b, "daemon: FAIL conn %d: %s (%ld)\n", c, what, v);
    say(b);
    _exit(1);
}

/* The syscall names a per-use list may hold, and their numbers. A name not here fails the
 * run: the table must grow with the lists. */
static const struct {
    const char *name;
    int nr;
} NAMES[] = {
    {"clock_gettime", __NR_clock_gettime}, {"close", __NR_close},
    {"fcntl", __NR_fcntl},                 {"getsockopt", __NR_getsockopt},
    {"ioctl", __NR_ioctl},                 {"poll", __NR_poll},
    {"recvfrom", __NR_recvfrom},           {"recvmsg", __NR_recvmsg},
    {"setsockopt", __NR_setsockopt},       {"sendmsg", __NR_sendmsg},
    {"sendto", __NR_sendto},               {"epoll_wait", __NR_epoll_wait},
    {"epoll_ctl", __NR_epoll_ctl},         {"epoll_create1", __NR_epoll_create1},
    {"futex", __NR_futex},                 {"mmap", __NR_mmap},
    {"munmap", __NR_munmap},               {"brk", __NR_brk},
};

/* Reads the list (one name a line, '#' comments) into nrs; returns how many. */
static int read_list(const char *path, int *nrs, int max)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    if (!f) {
        perror(path);
        exit(2);
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || line[0] == '#')
            continue;
        size_t i;
        for (i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
            if (strcmp(line, NAMES[i].name) == 0)
                break;
        if (i == sizeof NAMES / sizeof NAMES[0] || n == max) {
            fprintf(stderr, "daemon: %s: unknown syscall %s (extend NAMES)\n", path, line);
            exit(2);
        }
        nrs[n++] = NAMES[i].nr;
    }
    fclose(f);
    return n;
}

static void install(const int *nrs, int n)
{
    static const int own[] = {__NR_poll, __NR_write, __NR_exit_group};
    struct sock_filter f[96];
    unsigned k = 0;
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, arch));
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, nr));
    for (int i = 0; i < n + 3; i++) {
        int nr = i < n ? nrs[i] : own[i - n];
        f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    struct sock_fprog prog = {.len = (unsigned short)k, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        exit(2);
    }
}

static void tcp_pair(int *s, int *peer)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &len))
        exit(2);
    *peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*peer < 0 || connect(*peer, (struct sockaddr *)&a, sizeof a))
        exit(2);
    *s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    close(l);
    if (*s < 0)
        exit(2);
}

/* The peers: every stream written in 61 KiB pieces, round robin, then shut down. */
static void write_streams(void)
{
    static unsigned char buf[61 << 10];
    uint64_t pos[NCONN] = {0};
    int left = NCONN;
    while (left) {
        left = 0;
        for (int c = 0; c < NCONN; c++) {
            if (pos[c] == STREAM)
                continue;
            size_t n = STREAM - pos[c] < sizeof buf ? STREAM - pos[c] : sizeof buf;
            for (size_t i = 0; i < n; i++)
                buf[i] = pattern_byte(pos[c] + i);
            for (size_t w = 0; w < n;) {
                ssize_t r = write(table[c].peer, buf + w, n - w);
                if (r < 0)
                    _exit(2);
                w += (size_t)r;
            }
            pos[c] += n;
            if (pos[c] == STREAM)
                shutdown(table[c].peer, SHUT_WR);
            else
                left++;
        }
    }
    _exit(0);
}

/* Bytes peeked at stream position `pos` must be the pattern's. */
static void check(int c, const unsigned char *b, size_t n, uint64_t pos)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern_byte(pos + i))
            fail("a byte differs from the stream sent", c, (long)(pos + i));
}

static void ack(struct conn *k, int c, uint32_t n)
{
    lowcopy_peeker *p = (lowcopy_peeker *)&k->pk;
    ssize_t d = lowcopy_peeker_consume(p, n);
    if (d != (ssize_t)n)
        fail("consume", c, (long)d);
    k->off -= n;
    k->acked += n;
}

/* One readable connection: peek at the daemon's own offset, sometimes rewind first. */
static void serve(int c)
{
    struct conn *k = &table[c];
    lowcopy_peeker *p = (lowcopy_peeker *)&k->pk;
    static unsigned char a[1500], b[7000];
    struct iovec iov[2] = {{a, sizeof a}, {b, sizeof b}};
    lowcopy_peek_result res;
    if (++k->peeks % REWIND_EVERY == 0 && k->off > 0) {
        /* A retransmission: the bytes from an earlier offset again, checked again. */
        uint32_t back = k->off < 3000 ? k->off : 3000;
        uint32_t at = k->off - back;
        ssize_t n = lowcopy_peeker_peekv_at(p, at, iov, 2, MSG_DONTWAIT, &res, sizeof res);
        if (n <= 0)
            fail("rewind peek", c, (long)n);
        if (res.stream_pos != k->acked + at)
            fail("stream_pos after a rewind", c, (long)res.stream_pos);
        size_t na = (size_t)n < sizeof a ? (size_t)n : sizeof a;
        check(c, a, na, k->acked + at);
        check(c, b, (size_t)n - na, k->acked + at + na);
    }
    ssize_t n = lowcopy_peeker_peekv_at(p, k->off, iov, 2, MSG_DONTWAIT, &res, sizeof res);
    if (n == -EAGAIN) {
        /* Nothing past the offset: the peer acknowledges all (the level-triggered poll then
         * stops reporting the peeked bytes). */
        if (k->off)
            ack(k, c, k->off);
        return;
    }
    if (n < 0)
        fail("peek", c, (long)n);
    if (n == 0) {
        if (k->off)
            ack(k, c, k->off);
        if (k->acked != STREAM)
            fail("the stream ended short", c, (long)k->acked);
        uint64_t want = 0xcbf29ce484222325ull;
        for (uint64_t q = 0; q < STREAM; q++) {
            unsigned char x = pattern_byte(q);
            want = fnv(want, &x, 1);
        }
        if (k->hash != want)
            fail("the stream's hash differs", c, 0);
        if (lowcopy_peeker_release(p, LOWCOPY_RELEASE_CLOSING) != 0)
            fail("release", c, 0);
        if (*(const uint64_t *)&k->pk != LOWCOPY_PEEKER_RELEASED)
            fail("the storage does not read released", c, 0);
        close(k->fd);
        k->done = 1;
        return;
    }
    if (res.stream_pos != k->acked + k->off || res.len != (uint64_t)n)
        fail("lowcopy_peek_result", c, (long)res.stream_pos);
    size_t na = (size_t)n < sizeof a ? (size_t)n : sizeof a;
    check(c, a, na, res.stream_pos);
    check(c, b, (size_t)n - na, res.stream_pos + na);
    k->hash = fnv(k->hash, a, na);
    k->hash = fnv(k->hash, b, (size_t)n - na);
    k->off += (uint32_t)n;
    if (k->off >= ACK_AT)
        ack(k, c, k->off / 2);
}

int main(int argc, char **argv)
{
    int nrs[64];
    if (argc != 2) {
        fprintf(stderr, "usage: daemon include/syscalls/use_peeker_init_closing.list\n");
        return 2;
    }
    int nn = read_list(argv[1], nrs, 64);
    for (int c = 0; c < NCONN; c++) {
        struct conn *k = &table[c];
        if (c < 6) {
            tcp_pair(&k->fd, &k->peer);
        } else {
            int sv[2];
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
                return 2;
            k->fd = sv[0];
            k->peer = sv[1];
        }
        static const uint32_t modes[] = {
            LOWCOPY_PEEK_OFFSET_OR_DISCARD, LOWCOPY_PEEK_DISCARD,
            LOWCOPY_PEEK_DISCARD | LOWCOPY_PEEK_URGENT_CALLER, LOWCOPY_PEEK_AUTO};
        k->mode = c < 6 ? modes[c % 4] : (c == 6 ? LOWCOPY_PEEK_OFFSET_OR_DISCARD
                                                 : LOWCOPY_PEEK_DISCARD);
        k->hash = 0xcbf29ce484222325ull;
    }
    signal(SIGPIPE, SIG_IGN);
    pid_t w = fork();
    if (w < 0)
        return 2;
    if (w == 0)
        write_streams();
    for (int c = 0; c < NCONN; c++)
        close(table[c].peer);
    install(nrs, nn);
    /* From here on every syscall is the list's or the daemon's own. */
    for (int c = 0; c < NCONN; c++) {
        struct conn *k = &table[c];
        lowcopy_peeker *p = NULL;
        int rc = lowcopy_peeker_init(&k->pk, sizeof k->pk, k->fd, k->mode,
                                     c < 6 ? AF_INET : AF_UNIX, c < 6 ? IPPROTO_TCP : 0, &p);
        if (rc)
            fail("init", c, rc);
        if ((void *)p != (void *)&k->pk)
            fail("*out is not the storage", c, 0);
        if (*(const uint64_t *)&k->pk != LOWCOPY_PEEKER_LIVE)
            fail("the storage does not read live", c, 0);
    }
    int live = NCONN;
    while (live) {
        struct pollfd pf[NCONN];
        int idx[NCONN], n = 0;
        for (int c = 0; c < NCONN; c++)
            if (!table[c].done) {
                pf[n] = (struct pollfd){.fd = table[c].fd, .events = POLLIN};
                idx[n++] = c;
            }
        int r = poll(pf, (nfds_t)n, 10000);
        if (r <= 0)
            fail("poll: no progress in 10 s", -1, r < 0 ? -errno : 0);
        for (int i = 0; i < n; i++)
            if (pf[i].revents)
                serve(idx[i]);
        live = 0;
        for (int c = 0; c < NCONN; c++)
            live += !table[c].done;
    }
    char b[320];
    snprintf(b, sizeof b,
             "daemon: %d streams of %d bytes exact (hash, length, every byte at its stream "
             "position, rewinds re-checked) under a filter of %d listed syscalls + poll, "
             "write, exit_group; peeker storage %zu bytes\n",
             NCONN, STREAM, nn, sizeof(lowcopy_peeker_storage));
    say(b);
    return 0;
}
