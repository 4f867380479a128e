/* peek_cost.c - the user-space work of one seek + 64 KiB peek, counted by callgrind
 * (scripts/hot_cost.sh): the same loop as peek_sweep's batches, each mechanism in a
 * function of its own (cost_*) called ITERS times, so that callgrind's inclusive
 * instruction count of cost_X divided by ITERS is what one seek + peek costs in user
 * space (the kernel's work is not counted by valgrind, and is the same for all).
 *
 * A TCP loopback connection with `off` + 128 KiB queued and never consumed; each
 * mechanism peeks the 64 KiB at `off` again and again, checked once against the pattern.
 * Run without callgrind it only checks that every mechanism delivers the right bytes.
 *
 * Usage: peek_cost [offset bytes (default 0)] [iterations (default 2000)]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <lowcopy.h>

#ifndef SO_PEEK_OFF
#define SO_PEEK_OFF 42
#endif

#define PEEK_LEN (64 * 1024)
#define SCRATCH_LEN (64 * 1024)
#define MAX_IOV 1024

static uint8_t dst[PEEK_LEN];
static uint8_t scratch[SCRATCH_LEN];
static struct iovec disc_iov[MAX_IOV];
static int disc_n;

static void die(const char *what)
{
    fprintf(stderr, "peek_cost: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint8_t pattern(uint64_t i) { return (uint8_t)((i * 131 + 7) % 251); }

static void check(uint64_t off, const char *who)
{
    for (size_t i = 0; i < PEEK_LEN; i++)
        if (dst[i] != pattern(off + i)) {
            fprintf(stderr, "peek_cost: %s: byte %zu of the peek at %llu is wrong\n", who, i,
                    (unsigned long long)off);
            exit(1);
        }
    memset(dst, 0, sizeof dst);
}

static void conn(int *rx, int *tx, size_t queue)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int big = (int)(queue * 2 + (1 << 20));
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || setsockopt(l, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
        die("listener (SO_RCVBUFFORCE needs root)");
    if (bind(l, (struct sockaddr *)&a, alen) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &alen) < 0)
        die("listen");
    *tx = socket(AF_INET, SOCK_STREAM, 0);
    if (*tx < 0 || setsockopt(*tx, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0 ||
        connect(*tx, (struct sockaddr *)&a, alen) < 0)
        die("connect");
    *rx = accept(l, NULL, NULL);
    if (*rx < 0)
        die("accept");
    close(l);
    uint8_t *buf = malloc(queue);
    if (!buf)
        die("malloc");
    for (size_t i = 0; i < queue; i++)
        buf[i] = pattern(i);
    for (size_t done = 0; done < queue;) {
        ssize_t n = send(*tx, buf + done, queue - done, 0);
        if (n < 0)
            die("send");
        done += (size_t)n;
    }
    free(buf);
    for (int tries = 0;; tries++) {
        int q = 0;
        if (ioctl(*rx, FIONREAD, &q) < 0)
            die("FIONREAD");
        if ((size_t)q >= queue)
            break;
        if (tries > 5000) {
            errno = ETIMEDOUT;
            die("waiting for the queue to fill");
        }
        poll(NULL, 0, 1);
    }
}

__attribute__((noinline)) static void cost_raw_offset(int fd, int off, long iters)
{
    for (long i = 0; i < iters; i++) {
        if (setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off) < 0)
            die("SO_PEEK_OFF");
        if (recv(fd, dst, PEEK_LEN, MSG_PEEK | MSG_DONTWAIT) != PEEK_LEN)
            die("raw recv");
    }
}

__attribute__((noinline)) static void cost_raw_discard(int fd, long iters)
{
    struct msghdr m = {.msg_iov = disc_iov, .msg_iovlen = (size_t)disc_n};
    for (long i = 0; i < iters; i++)
        if (recvmsg(fd, &m, MSG_PEEK | MSG_DONTWAIT) < 0)
            die("raw recvmsg");
}

/* The lowcopy loop, one copy per mode so that callgrind names each. */
#define LC_COST(name)                                                                          \
    __attribute__((noinline)) static void name(lowcopy_peeker *p, size_t off, long iters)   \
    {                                                                                          \
        for (long i = 0; i < iters; i++) {                                                     \
            if (lowcopy_peeker_seek(p, off) < 0 ||                                             \
                lowcopy_peeker_peek(p, dst, PEEK_LEN, MSG_DONTWAIT) != PEEK_LEN)               \
                die(#name);                                                                    \
        }                                                                                      \
    }
LC_COST(cost_lowcopy_offset)
LC_COST(cost_lowcopy_auto)
LC_COST(cost_lowcopy_discard)

static void run_lc(int fd, uint32_t mode, size_t off, long iters,
                   void (*f)(lowcopy_peeker *, size_t, long), const char *who)
{
    lowcopy_peeker *p;
    int r = lowcopy_peeker_new(fd, mode, &p);
    if (r < 0) {
        errno = -r;
        die(who);
    }
    f(p, off, 1);
    check(off, who);
    f(p, off, iters);
    lowcopy_peeker_free(p);
}

int main(int argc, char **argv)
{
    size_t off = argc > 1 ? strtoull(argv[1], NULL, 0) : 0;
    long iters = argc > 2 ? atol(argv[2]) : 2000;
    int rx, tx;
    conn(&rx, &tx, off + 2 * PEEK_LEN);

    cost_raw_offset(rx, (int)off, 1);
    check(off, "raw SO_PEEK_OFF");
    cost_raw_offset(rx, (int)off, iters);
    int minus = -1;
    setsockopt(rx, SOL_SOCKET, SO_PEEK_OFF, &minus, sizeof minus);

    for (size_t left = off; left > 0; disc_n++) {
        size_t n = left < SCRATCH_LEN ? left : SCRATCH_LEN;
        disc_iov[disc_n] = (struct iovec){scratch, n};
        left -= n;
    }
    if (disc_n + 1 > MAX_IOV) {
        errno = EOVERFLOW;
        die("offset too far for one discard recvmsg");
    }
    disc_iov[disc_n++] = (struct iovec){dst, PEEK_LEN};
    cost_raw_discard(rx, 1);
    check(off, "raw discard");
    cost_raw_discard(rx, iters);

    run_lc(rx, LOWCOPY_PEEK_OFFSET, off, iters, cost_lowcopy_offset, "lowcopy OFFSET");
    run_lc(rx, LOWCOPY_PEEK_AUTO, off, iters, cost_lowcopy_auto, "lowcopy AUTO");
    run_lc(rx, LOWCOPY_PEEK_DISCARD, off, iters, cost_lowcopy_discard, "lowcopy DISCARD");
    printf("peek_cost offset=%zu iters=%ld ok=1\n", off, iters);
    close(rx);
    close(tx);
    return 0;
}
