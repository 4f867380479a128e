/* uses.c - runs each way of using the peek and zerocopy APIs (include/lowcopy_syscalls.h, "Per
 * use") under a seccomp filter that allows exactly that use's list and the exit_group(2) that
 * ends the run. Zerocopy: a sender per backend over UDP loopback, each kind of send, reaps,
 * waits, stats, closed by lowcopy_zc_close and by lowcopy_zc_free.
 *
 * Each run is a child process: the connection is made and its bytes queued before the filter,
 * then the child installs the filter and drives the use through its paths (peeks at and away
 * from the kernel's offset, a rewind, AUTO's skip ahead, several iovecs, an empty non-blocking
 * peek, an empty blocking one that SO_RCVTIMEO ends, the low-water mark, seek, consume,
 * note_consumed, the end of the stream, release). Any syscall outside the list kills the child
 * with SIGSYS (SECCOMP_RET_KILL_PROCESS), which fails the run. x86_64 only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lowcopy.h>
#include <lowcopy_syscalls.h>

#if !defined(__x86_64__)
#error "tests/seccomp/uses.c builds an x86_64 filter"
#endif

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

#define NR(name) __NR_##name,
static const int use_init[] = {LOWCOPY_SYSCALLS_USE_PEEKER_INIT(NR) - 1};
static const int use_closing[] = {LOWCOPY_SYSCALLS_USE_PEEKER_INIT_CLOSING(NR) - 1};
static const int use_offset[] = {LOWCOPY_SYSCALLS_USE_PEEKER_INIT_OFFSET(NR) - 1};
static const int use_stateless[] = {LOWCOPY_SYSCALLS_USE_STATELESS(NR) - 1};
static const int use_zc_errqueue[] = {LOWCOPY_SYSCALLS_USE_ZC_ERRQUEUE(NR) - 1};
static const int use_zc_io_uring[] = {LOWCOPY_SYSCALLS_USE_ZC_IO_URING(NR) - 1};
static const int use_zc_copy[] = {LOWCOPY_SYSCALLS_USE_ZC_COPY(NR) - 1};

static void install(const int *allowed)
{
    struct sock_filter f[128];
    unsigned n = 0;
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, nr));
    for (const int *a = allowed; *a >= 0; a++) {
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)*a, 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_exit_group, 0, 1);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        _exit(3);
    }
}

/* A connected pair: *s is the side peeked, *peer the writer. 0 on success. */
static int pair(int domain, int proto, int *s, int *peer)
{
    if (domain == AF_UNIX) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
            return -1;
        *s = sv[0];
        *peer = sv[1];
        return 0;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, proto);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &len))
        return -1;
    *peer = socket(AF_INET, SOCK_STREAM, proto);
    if (*peer < 0 || connect(*peer, (struct sockaddr *)&a, sizeof a))
        return -1;
    *s = accept(l, NULL, NULL);
    close(l);
    return *s < 0 ? -1 : 0;
}

/* Exit codes of a child: 0 ok, 2 a wrong result (the line says which), 3 set-up. */
#define WANT(cond)                                                                    \
    do {                                                                              \
        if (!(cond)) {                                                                \
            /* write(2) is not in the list: the exit code says it, the line is lost */ \
            _exit(2);                                                                 \
        }                                                                             \
    } while (0)

static const char DATA[] = "0123456789abcdefghij"; /* 20 bytes */

static void peeker_use(int s, int domain, int proto, uint32_t mode, const int *allowed,
                       uint32_t release_flags, int need_offset)
{
    static lowcopy_peeker_storage mem;
    lowcopy_peeker *p;
    char a[32], b[32];
    struct iovec two[2] = {{a, 3}, {b, 3}};
    lowcopy_peek_result res;
    install(allowed);
    int made = lowcopy_peeker_init(&mem, sizeof mem, s, mode, domain,
                                   domain == AF_UNIX ? 0 : proto, &p);
    if (made == -EOPNOTSUPP && mode == LOWCOPY_PEEK_OFFSET)
        _exit(4); /* no SO_PEEK_OFF on this socket: not applicable */
    WANT(made == 0);
    WANT((void *)p == (void *)&mem);
    WANT(mem.opaque[0] == LOWCOPY_PEEKER_LIVE);
    if (need_offset && lowcopy_peeker_mode(p) != LOWCOPY_PEEK_OFFSET)
        _exit(4); /* not applicable here */
    WANT(lowcopy_peeker_peek_at(p, 0, a, 4, MSG_DONTWAIT, &res, sizeof res) == 4);
    WANT(lowcopy_peeker_peek_at(p, 6, a, 4, MSG_DONTWAIT, &res, sizeof res) == 4); /* ahead */
    WANT(memcmp(a, "6789", 4) == 0);
    WANT(lowcopy_peeker_peek_at(p, 2, a, 4, 0, &res, sizeof res) == 4); /* a rewind */
    WANT(lowcopy_peeker_peekv_at(p, 8, two, 2, MSG_DONTWAIT, &res, sizeof res) == 6);
    WANT(lowcopy_peeker_peek(p, a, sizeof a, MSG_DONTWAIT) == 6);
    WANT(lowcopy_peeker_peek(p, a, sizeof a, MSG_DONTWAIT) == -EAGAIN); /* empty */
    WANT(lowcopy_peeker_peek(p, a, sizeof a, 0) == -EAGAIN); /* SO_RCVTIMEO ends the wait */
    int armed = lowcopy_peeker_set_lowat_armed(p, 1);
    WANT(armed == 0 || (domain == AF_UNIX && armed == -EOPNOTSUPP));
    WANT(lowcopy_peeker_peek_at(p, 20, a, 4, MSG_DONTWAIT, &res, sizeof res) == -EAGAIN);
    WANT(lowcopy_peeker_seek(p, 3) == 0);
    WANT(lowcopy_peeker_consume(p, 5) == 5);
    WANT(lowcopy_peeker_note_consumed(p, 0) == 0);
    WANT(lowcopy_peeker_offset(p) == 0);
    lowcopy_peek_stats st;
    WANT(lowcopy_peeker_stats(p, &st, sizeof st) == 0);
    WANT(lowcopy_peeker_set_lowat_armed(p, 0) == 0 || domain == AF_UNIX);
    ssize_t end;
    do /* blocking, each wait ended by SO_RCVTIMEO until the peer's FIN */
        end = lowcopy_peeker_peek_at(p, 15, a, 4, 0, &res, sizeof res);
    while (end == -EAGAIN);
    WANT(end == 0); /* the peer ended */
    WANT(lowcopy_peeker_release(p, release_flags) == 0);
    WANT(mem.opaque[0] == LOWCOPY_PEEKER_RELEASED);
    _exit(0);
}

static void stateless_use(int s)
{
    char a[32], b[32];
    struct iovec two[2] = {{a, 3}, {b, 3}};
    install(use_stateless);
    WANT(lowcopy_peek_supported(s) >= 0);
    WANT(lowcopy_peek_at(s, 0, a, 4, MSG_DONTWAIT) == 4);
    WANT(lowcopy_peek_at(s, 6, a, 4, 0) == 4 && memcmp(a, "6789", 4) == 0);
    WANT(lowcopy_peekv_at(s, 8, two, 2, MSG_DONTWAIT) == 6);
    WANT(lowcopy_consume(s, 5, MSG_DONTWAIT) == 5);
    WANT(lowcopy_peek_at(s, 15, a, 4, MSG_DONTWAIT) == 0); /* the peer ended */
    _exit(0);
}

/* A connected UDP pair over loopback: the kernel copies every zerocopy send there and
 * completes it at once, so completions come without a reader. 0 on success. */
static int udp_pair(int *tx, int *rx)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    *rx = socket(AF_INET, SOCK_DGRAM, 0);
    *tx = socket(AF_INET, SOCK_DGRAM, 0);
    if (*rx < 0 || *tx < 0 || bind(*rx, (struct sockaddr *)&a, sizeof a) ||
        getsockname(*rx, (struct sockaddr *)&a, &len) ||
        connect(*tx, (struct sockaddr *)&a, sizeof a))
        return -1;
    return 0;
}

static char zc_payload[8][512];

/* A zerocopy sender's whole life on one backend under exactly its use's list: made with
 * options, every kind of send, reaps, waits until nothing is in flight, stats, then closed
 * by lowcopy_zc_close (with counters) or lowcopy_zc_free; for io_uring the thread's ring is
 * closed last. */
static void zc_use(int tx, uint32_t backend, const int *allowed, int by_close)
{
    lowcopy_zc_options o;
    lowcopy_zc *z;
    lowcopy_zc_completion c[16];
    size_t k, bytes;
    uint64_t ud[4] = {100, 101, 102, 103};
    struct iovec one = {zc_payload[0], 512}, many[4];
    struct msghdr m = {.msg_iov = &one, .msg_iovlen = 1};
    long got = 0, sent = 0;
    for (int i = 0; i < 4; i++)
        many[i] = (struct iovec){zc_payload[i + 1], 256};
    install(allowed);
    WANT(lowcopy_zc_options_default(&o, sizeof o) == 0);
    o.backend = backend;
    int made = lowcopy_zc_new_opts(tx, &o, sizeof o, &z);
    if (made == -EOPNOTSUPP)
        _exit(4); /* this backend does not work here */
    WANT(made == 0);
    WANT(lowcopy_zc_backend(z) == backend);
    for (int i = 0; i < 40; i++, sent++) {
        WANT(lowcopy_zc_send_reap(z, &one, 1, 0, (uint64_t)i, c, 16, sizeof c[0], &k) == 512);
        got += (long)k;
    }
    WANT(lowcopy_zc_send(z, zc_payload[5], 100, MSG_DONTWAIT, 50) == 100);
    WANT(lowcopy_zc_sendv(z, many, 2, 0, 51) == 512);
    WANT(lowcopy_zc_sendmsg(z, &m, 0, 52) == 512);
    WANT(lowcopy_zc_send_batch(z, many, 4, ud, 0, c, 16, sizeof c[0], &k, &bytes) == 4);
    got += (long)k;
    sent += 7;
    for (int tries = 0; got < sent && tries < 100; tries++) {
        int w = lowcopy_zc_wait(z, 100);
        WANT(w >= 0 || w == -ETIMEDOUT);
        ssize_t n = lowcopy_zc_reap(z, c, 16, sizeof c[0]);
        WANT(n >= 0);
        got += n;
    }
    WANT(got == sent); /* every send one completion */
    WANT(lowcopy_zc_inflight(z) == 0);
    lowcopy_zc_send_stats st;
    WANT(lowcopy_zc_stats(z, &st, sizeof st) == 0);
    WANT(st.completions == (uint64_t)sent);
    if (by_close)
        WANT(lowcopy_zc_close(z, &st, sizeof st) == 0);
    else
        WANT(lowcopy_zc_free(z) == 0);
    if (backend == LOWCOPY_ZC_IO_URING)
        WANT(lowcopy_zc_ring_close() >= 0);
    _exit(0);
}

static int zc_runs(int *passed, int *failed, int *skipped)
{
    static const struct {
        const char *use, *backend_name;
        uint32_t backend;
        const int *allowed;
    } zc[] = {{"USE_ZC_ERRQUEUE", "errqueue", LOWCOPY_ZC_ERRQUEUE, use_zc_errqueue},
              {"USE_ZC_IO_URING", "io_uring", LOWCOPY_ZC_IO_URING, use_zc_io_uring},
              {"USE_ZC_COPY", "copy", LOWCOPY_ZC_COPY, use_zc_copy}};
    for (size_t b = 0; b < sizeof zc / sizeof zc[0]; b++) {
        for (int by_close = 0; by_close < 2; by_close++) {
            int tx, rx;
            if (udp_pair(&tx, &rx)) {
                perror("udp set-up");
                return 1;
            }
            pid_t pid = fork();
            if (pid == 0)
                zc_use(tx, zc[b].backend, zc[b].allowed, by_close);
            int st = 0;
            waitpid(pid, &st, 0);
            close(tx);
            close(rx);
            const char *end = by_close ? "lowcopy_zc_close" : "lowcopy_zc_free";
            if (WIFEXITED(st) && WEXITSTATUS(st) == 4) {
                (*skipped)++;
            } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                (*passed)++;
            } else {
                (*failed)++;
                if (WIFSIGNALED(st))
                    printf("FAIL %s udp4 %s %s: killed by signal %d (a syscall outside the "
                           "list)\n",
                           zc[b].use, zc[b].backend_name, end, WTERMSIG(st));
                else
                    printf("FAIL %s udp4 %s %s: exit %d (a wrong result)\n", zc[b].use,
                           zc[b].backend_name, end, WEXITSTATUS(st));
            }
        }
    }
    return 0;
}

struct run {
    const char *use;
    const int *allowed;
    uint32_t release;
    int need_offset;
};

int main(void)
{
    static const struct {
        const char *name;
        int domain, proto;
    } transports[] = {
        {"tcp4", AF_INET, IPPROTO_TCP}, {"unix", AF_UNIX, 0}, {"mptcp4", AF_INET, IPPROTO_MPTCP}};
    static const struct {
        const char *name;
        uint32_t mode;
    } modes[] = {{"auto", LOWCOPY_PEEK_AUTO},
                 {"offset", LOWCOPY_PEEK_OFFSET},
                 {"discard", LOWCOPY_PEEK_DISCARD},
                 {"offset_or_discard", LOWCOPY_PEEK_OFFSET_OR_DISCARD}};
    static const struct run runs[] = {
        {"USE_PEEKER_INIT", use_init, 0, 0},
        {"USE_PEEKER_INIT_CLOSING", use_closing, LOWCOPY_RELEASE_CLOSING, 0},
        {"USE_PEEKER_INIT_OFFSET", use_offset, LOWCOPY_RELEASE_CLOSING, 1},
        {"USE_PEEKER_INIT_OFFSET", use_offset, 0, 1},
        {"USE_STATELESS", use_stateless, 0, 0},
    };
    int passed = 0, failed = 0, skipped = 0;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        for (size_t t = 0; t < sizeof transports / sizeof transports[0]; t++) {
            int stateless = runs[r].allowed == use_stateless;
            for (size_t m = 0; m < (stateless ? 1 : sizeof modes / sizeof modes[0]); m++) {
                int s, peer;
                if (pair(transports[t].domain, transports[t].proto, &s, &peer)) {
                    skipped++; /* MPTCP disabled here */
                    continue;
                }
                struct timeval tv = {.tv_usec = 50000};
                if (write(peer, DATA, 20) != 20 || shutdown(peer, SHUT_RD) ||
                    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv)) {
                    perror("set-up");
                    return 1;
                }
                usleep(20000); /* loopback: all 20 bytes queued */
                pid_t pid = fork();
                if (pid == 0) {
                    if (stateless) {
                        /* the stateless end of stream: the peer shuts down before the filter */
                        if (shutdown(peer, SHUT_WR))
                            _exit(3);
                        usleep(20000);
                        stateless_use(s);
                    }
                    /* the end of stream comes while the peeker runs: before the last peek */
                    if (fork() == 0) {
                        usleep(300000);
                        shutdown(peer, SHUT_WR);
                        _exit(0);
                    }
                    peeker_use(s, transports[t].domain, transports[t].proto, modes[m].mode,
                               runs[r].allowed, runs[r].release, runs[r].need_offset);
                }
                int st = 0;
                waitpid(pid, &st, 0);
                close(s);
                close(peer);
                const char *what = stateless ? "-" : modes[m].name;
                if (WIFEXITED(st) && WEXITSTATUS(st) == 4) {
                    skipped++;
                } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                    passed++;
                } else {
                    failed++;
                    if (WIFSIGNALED(st))
                        printf("FAIL %s %s %s%s: killed by signal %d (a syscall outside the "
                               "list)\n",
                               runs[r].use, transports[t].name, what,
                               runs[r].release ? " closing" : "", WTERMSIG(st));
                    else
                        printf("FAIL %s %s %s%s: exit %d (a wrong result)\n", runs[r].use,
                               transports[t].name, what, runs[r].release ? " closing" : "",
                               WEXITSTATUS(st));
                }
            }
        }
    }
    if (zc_runs(&passed, &failed, &skipped))
        return 1;
    printf("seccomp-uses: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
