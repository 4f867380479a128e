/*
 * calls.c - every export of liblowcopy_peek.a, called the same way against it and against the
 * full liblowcopy.a (tests/footprint/check.sh builds it twice and compares the two transcripts:
 * same symbols, same semantics).
 *
 * Over a TCP loopback connection and an AF_UNIX stream pair, in every mode: lowcopy_peeker_size,
 * init (and its argument errors), mode, peek, peekv, seek, peek_at, peekv_at, offset, consume,
 * note_consumed, set_lowat_armed, stats, release (both ways, and its errors), the NULL-handle
 * results. Each result is printed as one line; the values the header promises are also checked
 * here. Exit status 0 when every check held; 1 a wrong result (the line says which); 2 a set-up
 * failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <lowcopy.h>

static int failed;

static void expect(const char *what, long long got, long long want)
{
    printf("%s: %lld\n", what, got);
    if (got != want) {
        printf("  FAIL: %s is %lld, expected %lld\n", what, got, want);
        failed = 1;
    }
}

static void show(const char *what, long long got)
{
    printf("%s: %lld\n", what, got);
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void tcp_pair(int fds[2])
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &len))
        die("listen");
    fds[1] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[1] < 0 || connect(fds[1], (struct sockaddr *)&a, sizeof a))
        die("connect");
    fds[0] = accept(l, NULL, NULL);
    if (fds[0] < 0)
        die("accept");
    close(l);
}

static void one(int unix_pair, uint32_t mode)
{
    int fds[2];
    if (unix_pair) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds))
            die("socketpair");
    } else {
        tcp_pair(fds);
    }
    printf("== %s, mode %u\n", unix_pair ? "AF_UNIX" : "TCP", mode);
    static const char msg[] = "hello world";
    if (write(fds[1], msg, 11) != 11)
        die("write");

    lowcopy_peeker_storage st;
    lowcopy_peeker *p = NULL;
    expect("init NULL mem", lowcopy_peeker_init(NULL, sizeof st, fds[0], mode, 0, 0, &p), -EINVAL);
    expect("init short", lowcopy_peeker_init(&st, 8, fds[0], mode, 0, 0, &p), -EINVAL);
    expect("init bad mode", lowcopy_peeker_init(&st, sizeof st, fds[0], 99, 0, 0, &p), -EINVAL);
    expect("init", lowcopy_peeker_init(&st, sizeof st, fds[0], mode, 0, 0, &p), 0);
    expect("*out == mem", (void *)p == (void *)&st, 1);
    expect("live tag", *(uint64_t *)&st == LOWCOPY_PEEKER_LIVE, 1);
    show("mode", lowcopy_peeker_mode(p));

    char b[16] = {0};
    expect("peek 5", lowcopy_peeker_peek(p, b, 5, 0), 5);
    expect("peek bytes", memcmp(b, "hello", 5) == 0, 1);
    expect("offset", (long long)lowcopy_peeker_offset(p), 5);
    char x[3], y[3];
    struct iovec iov[2] = {{x, 3}, {y, 3}};
    expect("peekv 3+3", lowcopy_peeker_peekv(p, iov, 2, 0), 6);
    expect("peekv bytes", memcmp(x, " wo", 3) == 0 && memcmp(y, "rld", 3) == 0, 1);
    expect("peek nothing beyond", lowcopy_peeker_peek(p, b, 5, MSG_DONTWAIT), -EAGAIN);
    expect("peek NULL buf", lowcopy_peeker_peek(p, NULL, 5, 0), -EINVAL);
    expect("peekv 0 iovecs", lowcopy_peeker_peekv(p, iov, 0, 0), -EINVAL);
    expect("seek 6", lowcopy_peeker_seek(p, 6), 0);
    expect("offset after seek", (long long)lowcopy_peeker_offset(p), 6);

    lowcopy_peek_result r;
    memset(&r, 0xa5, sizeof r);
    expect("peek_at 0", lowcopy_peeker_peek_at(p, 0, b, 5, 0, &r, sizeof r), 5);
    expect("peek_at len", (long long)r.len, 5);
    expect("peek_at offset", (long long)r.offset, 0);
    expect("peek_at stream_pos", (long long)r.stream_pos, 0);
    show("peek_at syscalls", r.syscalls);
    show("peek_at flags", r.flags);
    expect("peek_at bad size", lowcopy_peeker_peek_at(p, 0, b, 5, 0, &r, 4), -EINVAL);
    memset(x, 0, 3);
    memset(y, 0, 3);
    expect("peekv_at 6", lowcopy_peeker_peekv_at(p, 6, iov, 2, 0, NULL, 0), 5);
    expect("peekv_at bytes", memcmp(x, "wor", 3) == 0 && memcmp(y, "ld", 2) == 0, 1);

    expect("consume 6", lowcopy_peeker_consume(p, 6), 6);
    expect("offset after consume", (long long)lowcopy_peeker_offset(p), 5);
    expect("note_consumed 0", lowcopy_peeker_note_consumed(p, 0), 0);
    expect("peek_at after consume", lowcopy_peeker_peek_at(p, 0, b, 5, 0, &r, sizeof r), 5);
    expect("stream_pos after consume", (long long)r.stream_pos, 6);
    expect("peek_at bytes", memcmp(b, "world", 5) == 0, 1);

    expect("lowat arm", lowcopy_peeker_set_lowat_armed(p, 1), unix_pair ? -EOPNOTSUPP : 0);
    expect("lowat disarm", lowcopy_peeker_set_lowat_armed(p, 0), 0);

    if (shutdown(fds[1], SHUT_WR))
        die("shutdown");
    expect("peek_at the end", lowcopy_peeker_peek_at(p, 5, b, 5, 0, &r, sizeof r), 0);

    lowcopy_peek_stats s;
    expect("stats", lowcopy_peeker_stats(p, &s, sizeof s), 0);
    show("stats syscalls", (long long)s.syscalls);
    expect("stats peeks", (long long)s.peeks, 5);
    expect("stats bytes_peeked", (long long)s.bytes_peeked, 26);
    show("stats bytes_skipped_copied", (long long)s.bytes_skipped_copied);
    expect("stats bytes_consumed", (long long)s.bytes_consumed, 6);
    expect("stats fds_closed", (long long)s.fds_closed, 0);
    expect("stats NULL out", lowcopy_peeker_stats(p, NULL, sizeof s), -EINVAL);

    expect("release bad flags", lowcopy_peeker_release(p, 2), -EINVAL);
    expect("release", lowcopy_peeker_release(p, mode % 2 ? LOWCOPY_RELEASE_CLOSING : 0), 0);
    expect("released tag", *(uint64_t *)&st == LOWCOPY_PEEKER_RELEASED, 1);
    close(fds[0]);
    close(fds[1]);
}

int main(void)
{
    expect("size", (long long)lowcopy_peeker_size(), LOWCOPY_PEEKER_SIZE);
    expect("peek NULL", lowcopy_peeker_peek(NULL, NULL, 0, 0), -EINVAL);
    expect("offset NULL", (long long)lowcopy_peeker_offset(NULL), 0);
    expect("mode NULL", lowcopy_peeker_mode(NULL), 0);
    expect("consume NULL", lowcopy_peeker_consume(NULL, 1), -EINVAL);
    expect("release NULL", lowcopy_peeker_release(NULL, 0), -EINVAL);
    uint32_t modes[] = {LOWCOPY_PEEK_AUTO, LOWCOPY_PEEK_OFFSET, LOWCOPY_PEEK_DISCARD,
                        LOWCOPY_PEEK_OFFSET_OR_DISCARD};
    for (int u = 0; u < 2; u++)
        for (unsigned m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            int fds[2];
            /* OFFSET where the socket has no SO_PEEK_OFF: init's -EOPNOTSUPP, shown once. */
            if (modes[m] == LOWCOPY_PEEK_OFFSET && !u) {
                tcp_pair(fds);
                lowcopy_peeker_storage st;
                lowcopy_peeker *p;
                int rc = lowcopy_peeker_init(&st, sizeof st, fds[0], modes[m], 0, 0, &p);
                if (rc == 0)
                    lowcopy_peeker_release(p, 0);
                close(fds[0]);
                close(fds[1]);
                if (rc == -EOPNOTSUPP) {
                    printf("== TCP, mode %u: no SO_PEEK_OFF here (-EOPNOTSUPP)\n", modes[m]);
                    continue;
                }
            }
            one(u, modes[m]);
        }
    puts(failed ? "calls: FAILED" : "calls: every result as expected");
    return failed;
}
