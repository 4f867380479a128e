/* peek_sweep.c - what does one 64 KiB peek cost when it sits `offset` bytes
 * behind the head of a TCP receive queue?
 *
 * For each offset (default 0, 4 KiB, 64 KiB, 1 MiB, 4 MiB, 16 MiB of queued,
 * unconsumed bytes before the cursor) it times five mechanisms:
 *   raw SO_PEEK_OFF   setsockopt(SO_PEEK_OFF, off) + recv(MSG_PEEK|MSG_DONTWAIT)
 *   raw discard       one recvmsg(MSG_PEEK|MSG_DONTWAIT) whose iovecs start with
 *                     `off` bytes of a repeated 64 KiB scratch buffer, then the
 *                     64 KiB destination (the library's own discard strategy)
 *   lowcopy OFFSET    lowcopy_peeker_seek + lowcopy_peeker_peek, SO_PEEK_OFF mode
 *   lowcopy DISCARD   same calls, discard-prefix mode
 *   lowcopy AUTO      same calls, mode chosen by the library
 *
 * Nothing is ever consumed: the sender tops the queue up to off + 128 KiB, we
 * wait until SIOCINQ shows every byte queued, then peek the same bytes again
 * and again.  Every mechanism's result is checked once per offset against the
 * sender's pattern.  Timing interleaves the mechanisms in rounds (a batch of
 * each per round, batches auto-sized to ~30 ms) and reports medians, so slow
 * drift or a noisy neighbour hits all mechanisms alike.
 *
 * Build: gcc -Wall -Wextra -Werror -O2 $(pkg-config --cflags lowcopy) \
 *            peek_sweep.c $(pkg-config --libs lowcopy)
 * Usage: peek_sweep [-n rounds] [-6] [-c cpu] [--offsets 0,4K,64K,1M,4M,16M]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include <lowcopy.h>

#ifndef SO_PEEK_OFF
#define SO_PEEK_OFF 42
#endif

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
#define PEEK_LEN (64 * KIB)      /* bytes delivered per peek */
#define SCRATCH_LEN (64 * KIB)   /* discard sink, repeated across iovecs */
#define TAIL_SLACK (64 * KIB)    /* queued beyond off + PEEK_LEN */
#define FILL_CHUNK (1 * MIB)     /* sender staging buffer */
#define MAX_OFFSETS 32
#define MAX_ROUNDS 101
#define BATCH_MIN_NS 20e6        /* calibration stops once a batch is this long */
#define BATCH_TARGET_NS 30e6     /* timed batches aim at this length */
#define WARM_FRACTION 4          /* untimed warm-up = 1/4 batch */
#define FILL_TIMEOUT_MS 5000

enum { M_RAW_OFF, M_LC_OFF, M_RAW_DISC, M_LC_DISC, M_LC_AUTO, M_COUNT };

/* ---------------------------------------------------------------- errors */

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("peek_sweep: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* libc style: -1 and errno. */
static void check_sys(long ret, const char *what)
{
    if (ret < 0)
        die("%s: %s", what, strerror(errno));
}

/* lowcopy style: a negative errno is returned. */
static void check_lc(long ret, const char *what)
{
    if (ret < 0)
        die("%s: %s", what, strerror((int)-ret));
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

/* Page-aligned peek buffers, so runs are comparable: copy_to_user into a
 * destination at malloc's 16-byte alignment costs ~6% more per 64 KiB than
 * into a page-aligned one.  Raw calls and lowcopy share the destination;
 * the discard scratch is not shared (lowcopy has its own), and its placement
 * alone moves discard costs by up to ~4% at 1 MiB: read discard overheads
 * at large offsets with that floor in mind. */
static void *xmalloc_page(size_t n)
{
    void *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

/* ---------------------------------------------------------------- time */

static double now_ns(void)
{
    struct timespec ts;
    check_sys(clock_gettime(CLOCK_MONOTONIC, &ts), "clock_gettime");
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0)
        if (errno != EINTR)
            die("nanosleep: %s", strerror(errno));
}

/* ---------------------------------------------------------------- pattern */

/* Byte i of the stream.  A multiplicative hash rather than i & 0xff, so
 * that a peek landing at the wrong offset (off by a page, a segment, an
 * iovec) cannot accidentally match. */
static inline uint8_t pattern_byte(uint64_t i)
{
    return (uint8_t)(((uint32_t)i * 2654435761u) >> 24);
}

static void pattern_fill(uint8_t *buf, uint64_t pos, size_t n)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = pattern_byte(pos + k);
}

/* Poison with the complement so every byte must be overwritten to pass. */
static void poison(uint8_t *buf, uint64_t pos, size_t n)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = (uint8_t)~pattern_byte(pos + k);
}

static void verify(const uint8_t *buf, uint64_t pos, size_t n, const char *who)
{
    for (size_t k = 0; k < n; k++)
        if (buf[k] != pattern_byte(pos + k))
            die("%s: wrong data at offset %llu + %zu: got 0x%02x, want 0x%02x",
                who, (unsigned long long)pos, k, buf[k], pattern_byte(pos + k));
}

/* ---------------------------------------------------------------- socket setup */

struct conn {
    int rx;            /* receiver: every peek happens here */
    int tx;            /* sender */
    uint64_t sent;     /* stream bytes written so far */
    uint8_t *chunk;    /* sender staging buffer */
};

static void set_int(int fd, int level, int name, int val, const char *what)
{
    check_sys(setsockopt(fd, level, name, &val, sizeof(val)), what);
}

static int get_int(int fd, int level, int name, const char *what)
{
    int val = 0;
    socklen_t len = sizeof(val);
    check_sys(getsockopt(fd, level, name, &val, &len), what);
    return val;
}

static socklen_t loopback_addr(int family, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        return sizeof(*a);
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sizeof(*a);
}

/* The receive buffer must hold the largest offset plus the peeked bytes
 * without the reader consuming anything.  SO_RCVBUF is capped by
 * net.core.rmem_max; SO_RCVBUFFORCE (root) is not.  It is set on the
 * listener before connect() because the window scale is fixed by the SYN. */
static void conn_open(struct conn *c, int family, int rcvbuf)
{
    struct sockaddr_storage ss;
    socklen_t alen = loopback_addr(family, &ss);

    int l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check_sys(l, "socket(listener)");
    set_int(l, SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf, "setsockopt(SO_RCVBUFFORCE) (needs root)");
    check_sys(bind(l, (struct sockaddr *)&ss, alen), "bind");
    check_sys(listen(l, 1), "listen");
    check_sys(getsockname(l, (struct sockaddr *)&ss, &alen), "getsockname");

    c->tx = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check_sys(c->tx, "socket(sender)");
    check_sys(connect(c->tx, (struct sockaddr *)&ss, alen), "connect");
    c->rx = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    check_sys(c->rx, "accept4");
    check_sys(close(l), "close(listener)");

    /* Inherited from the listener, but set again so the value is certain. */
    set_int(c->rx, SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf, "setsockopt(SO_RCVBUFFORCE)");
    /* The last partial segment of a fill must leave at once, not wait for
     * a (delayed) ACK from a receiver that never reads. */
    set_int(c->tx, IPPROTO_TCP, TCP_NODELAY, 1, "setsockopt(TCP_NODELAY)");
    c->sent = 0;
    c->chunk = xmalloc(FILL_CHUNK);
}

static void conn_close(struct conn *c)
{
    check_sys(close(c->rx), "close(rx)");
    check_sys(close(c->tx), "close(tx)");
    free(c->chunk);
}

static int queued(int fd)
{
    int n = 0;
    check_sys(ioctl(fd, SIOCINQ, &n), "ioctl(SIOCINQ)");
    return n;
}

static void wait_writable(const struct conn *c, uint64_t target)
{
    struct pollfd pfd = { .fd = c->tx, .events = POLLOUT };
    int r = poll(&pfd, 1, FILL_TIMEOUT_MS);
    check_sys(r, "poll(sender)");
    if (r == 0)
        die("sender stuck: %d of %llu bytes queued at the receiver "
            "(receive window too small for this offset?)",
            queued(c->rx), (unsigned long long)target);
}

/* Loopback delivery is asynchronous to send(): poll SIOCINQ until the
 * receiver really holds every byte, so no timed peek races the fill. */
static void wait_queued(const struct conn *c, uint64_t target)
{
    for (int ms = 0; (uint64_t)queued(c->rx) < target; ms++) {
        if (ms >= FILL_TIMEOUT_MS)
            die("only %d of %llu bytes reached the receive queue",
                queued(c->rx), (unsigned long long)target);
        sleep_ms(1);
    }
}

/* Send the pattern until `target` stream bytes exist, then wait for them.
 * MSG_MORE on all but the last chunk lets the sender build full segments,
 * as a bulk sender does.  Without it each NODELAY send of 64 KiB leaves as
 * one loopback MSS (65483 B) plus a 53-byte tail, and the receive queue
 * coalesces far less (measured: ~6x the per-skb overhead in skmem): the
 * SO_PEEK_OFF skb walk at 16 MiB then costs 2-3x more than for a queue
 * a bulk sender filled. */
static void fill_to(struct conn *c, uint64_t target)
{
    while (c->sent < target) {
        size_t n = target - c->sent < FILL_CHUNK ? (size_t)(target - c->sent) : FILL_CHUNK;
        int more = c->sent + n < target ? MSG_MORE : 0;
        pattern_fill(c->chunk, c->sent, n);
        ssize_t w = send(c->tx, c->chunk, n, MSG_DONTWAIT | MSG_NOSIGNAL | more);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            wait_writable(c, target);
            continue;
        }
        check_sys(w, "send");
        c->sent += (uint64_t)w;
    }
    wait_queued(c, target);
}

/* ---------------------------------------------------------------- mechanisms */

/* Everything a batch needs for one offset; built once per offset so that
 * no batch allocates or computes anything but the peeks themselves. */
struct ctx {
    int fd;
    size_t off;
    uint8_t *dst;             /* PEEK_LEN destination */
    uint8_t *scratch;         /* SCRATCH_LEN sink for the raw discard */
    struct iovec *iov;        /* raw discard: scratch prefix + dst */
    int iovcnt;               /* 0: the prefix needs more than IOV_MAX iovecs */
    lowcopy_peeker *p;        /* live only between begin and end of a batch */
    lowcopy_peek_stats st0;   /* stats right after peeker_new */
    uint64_t lc_syscalls;     /* accumulated over timed lowcopy batches */
    uint64_t lc_peeks;
    uint32_t auto_mode;       /* mechanism the AUTO peeker picked */
};

struct mech {
    const char *name;
    uint32_t mode;                         /* lowcopy mode, if a peeker */
    int (*begin)(const struct mech *, struct ctx *); /* 0 ok, 1 n/a */
    void (*batch)(struct ctx *, long iters);
    void (*end)(const struct mech *, struct ctx *);
};

/* Discard peeks assume the kernel's offset is off; SO_PEEK_OFF = -1 is
 * also what lowcopy_peeker_free() promises to leave behind. */
static void check_peek_off_disabled(int fd, const char *after)
{
    int v = get_int(fd, SOL_SOCKET, SO_PEEK_OFF, "getsockopt(SO_PEEK_OFF)");
    if (v != -1)
        die("SO_PEEK_OFF is %d after %s, expected -1", v, after);
}

static void expect_peek(ssize_t got, size_t want, const char *who)
{
    if (got < 0)
        die("%s: %s", who, strerror(errno));
    if ((size_t)got != want)
        die("%s: short peek, %zd of %zu bytes", who, got, want);
}

/* raw SO_PEEK_OFF ------------------------------------------------ */

static int raw_off_begin(const struct mech *m, struct ctx *c)
{
    (void)m;
    /* Probe: EOPNOTSUPP on kernels/families without TCP SO_PEEK_OFF. */
    int zero = 0;
    if (setsockopt(c->fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof(zero)) < 0) {
        if (errno == EOPNOTSUPP)
            return 1;
        die("setsockopt(SO_PEEK_OFF, 0): %s", strerror(errno));
    }
    return 0;
}

static void raw_off_batch(struct ctx *c, long iters)
{
    int off = (int)c->off;
    for (long i = 0; i < iters; i++) {
        /* The previous peek moved the kernel offset past what it read. */
        if (setsockopt(c->fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof(off)) < 0)
            die("setsockopt(SO_PEEK_OFF, %d): %s", off, strerror(errno));
        ssize_t r = recv(c->fd, c->dst, PEEK_LEN, MSG_PEEK | MSG_DONTWAIT);
        expect_peek(r, PEEK_LEN, "raw SO_PEEK_OFF recv");
    }
}

static void raw_off_end(const struct mech *m, struct ctx *c)
{
    (void)m;
    /* Leave the socket as discard peeks expect it. */
    set_int(c->fd, SOL_SOCKET, SO_PEEK_OFF, -1, "setsockopt(SO_PEEK_OFF, -1)");
}

/* raw discard ---------------------------------------------------- */

/* iov[0..k-1] all point at the one scratch buffer (the last one partial),
 * iov[k] is the destination.  Returns the count, or 0 when it would exceed
 * IOV_MAX (a single recvmsg cannot skip that far with 64 KiB of scratch). */
static int build_discard_iov(struct ctx *c, long iov_max)
{
    size_t prefix = (c->off + SCRATCH_LEN - 1) / SCRATCH_LEN;
    if (prefix + 1 > (size_t)iov_max)
        return 0;
    c->iov = xmalloc((prefix + 1) * sizeof(*c->iov));
    size_t left = c->off;
    for (size_t k = 0; k < prefix; k++) {
        size_t n = left < SCRATCH_LEN ? left : SCRATCH_LEN;
        c->iov[k] = (struct iovec){ .iov_base = c->scratch, .iov_len = n };
        left -= n;
    }
    c->iov[prefix] = (struct iovec){ .iov_base = c->dst, .iov_len = PEEK_LEN };
    return (int)(prefix + 1);
}

static int raw_disc_begin(const struct mech *m, struct ctx *c)
{
    (void)m;
    if (c->iovcnt == 0)
        return 1;
    check_peek_off_disabled(c->fd, "the previous batch");
    return 0;
}

static void raw_disc_batch(struct ctx *c, long iters)
{
    struct msghdr msg = { .msg_iov = c->iov, .msg_iovlen = (size_t)c->iovcnt };
    for (long i = 0; i < iters; i++) {
        ssize_t r = recvmsg(c->fd, &msg, MSG_PEEK | MSG_DONTWAIT);
        expect_peek(r, c->off + PEEK_LEN, "raw discard recvmsg");
    }
}

static void raw_disc_end(const struct mech *m, struct ctx *c)
{
    (void)m;
    (void)c;
}

/* lowcopy peekers ------------------------------------------------ */

/* One peeker per batch: OFFSET and AUTO own the socket's SO_PEEK_OFF while
 * they live, and free() hands it back disabled.  Creation is untimed. */
static int lc_begin(const struct mech *m, struct ctx *c)
{
    int r = lowcopy_peeker_new(c->fd, m->mode, &c->p);
    if (r == -EOPNOTSUPP)
        return 1;
    check_lc(r, "lowcopy_peeker_new");
    /* The discard prefix reaches only (IOV_MAX - 1) x 64 KiB: beyond it the
     * library refuses the seek, which makes the cell n/a, not an error. */
    r = lowcopy_peeker_seek(c->p, c->off);
    if (r == -EOVERFLOW) {
        lowcopy_peeker_free(c->p);
        c->p = NULL;
        return 1;
    }
    check_lc(r, "lowcopy_peeker_seek");
    if (m->mode == LOWCOPY_PEEK_AUTO)
        c->auto_mode = lowcopy_peeker_mode(c->p);
    check_lc(lowcopy_peeker_stats(c->p, &c->st0, sizeof(lowcopy_peek_stats)), "lowcopy_peeker_stats");
    return 0;
}

static void lc_batch(struct ctx *c, long iters)
{
    for (long i = 0; i < iters; i++) {
        int r = lowcopy_peeker_seek(c->p, c->off);
        if (r < 0)
            die("lowcopy_peeker_seek(%zu): %s", c->off, strerror(-r));
        ssize_t n = lowcopy_peeker_peek(c->p, c->dst, PEEK_LEN, MSG_DONTWAIT);
        if (n < 0)
            die("lowcopy_peeker_peek at %zu: %s", c->off, strerror((int)-n));
        if ((size_t)n != PEEK_LEN)
            die("lowcopy_peeker_peek at %zu: short peek, %zd bytes", c->off, n);
    }
}

static void lc_end(const struct mech *m, struct ctx *c)
{
    (void)m;
    lowcopy_peek_stats st;
    check_lc(lowcopy_peeker_stats(c->p, &st, sizeof(lowcopy_peek_stats)), "lowcopy_peeker_stats");
    c->lc_syscalls += st.syscalls - c->st0.syscalls;
    c->lc_peeks += st.peeks - c->st0.peeks;
    lowcopy_peeker_free(c->p);
    c->p = NULL;
    check_peek_off_disabled(c->fd, "lowcopy_peeker_free");
}

static const struct mech MECHS[M_COUNT] = {
    [M_RAW_OFF]  = { "raw SO_PEEK_OFF", 0, raw_off_begin, raw_off_batch, raw_off_end },
    [M_LC_OFF]   = { "lowcopy OFFSET", LOWCOPY_PEEK_OFFSET, lc_begin, lc_batch, lc_end },
    [M_RAW_DISC] = { "raw discard", 0, raw_disc_begin, raw_disc_batch, raw_disc_end },
    [M_LC_DISC]  = { "lowcopy DISCARD", LOWCOPY_PEEK_DISCARD, lc_begin, lc_batch, lc_end },
    [M_LC_AUTO]  = { "lowcopy AUTO", LOWCOPY_PEEK_AUTO, lc_begin, lc_batch, lc_end },
};

/* ---------------------------------------------------------------- measuring */

/* ns for `iters` peeks, or NAN if the mechanism is unavailable.
 * `warm` untimed peeks go first: whatever the previous batch left in the
 * caches, prefetchers and clocks favours the second of two back-to-back
 * discard batches by ~9% at 16 MiB; a quarter batch of warm-up brings that
 * order bias down to ~1%. */
static double time_batch(const struct mech *m, struct ctx *c, long warm, long iters)
{
    if (m->begin(m, c))
        return NAN;
    m->batch(c, warm);
    double t0 = now_ns();
    m->batch(c, iters);
    double t = now_ns() - t0;
    m->end(m, c);
    return t;
}

/* One peek into a poisoned buffer, checked byte for byte. */
static int verify_mech(const struct mech *m, struct ctx *c)
{
    poison(c->dst, c->off, PEEK_LEN);
    if (isnan(time_batch(m, c, 0, 1)))
        return 1;
    verify(c->dst, c->off, PEEK_LEN, m->name);
    return 0;
}

/* Grow the batch until it lasts BATCH_MIN_NS, then size it for
 * BATCH_TARGET_NS.  Doubles as warm-up (caches, skb walk, branch state). */
static long calibrate(const struct mech *m, struct ctx *c)
{
    long iters = 1;
    for (;;) {
        double t = time_batch(m, c, 0, iters);
        if (t >= BATCH_MIN_NS || iters >= LONG_MAX / 128) {
            double per = t / iters;
            long n = (long)(BATCH_TARGET_NS / per);
            return n > 0 ? n : 1;
        }
        long guess = t > 0 ? (long)(iters * BATCH_TARGET_NS / t) : iters * 64;
        iters = guess > iters * 64 ? iters * 64 : guess > iters ? guess : iters * 2;
    }
}

struct results {
    size_t nrounds;
    /* per offset, per mechanism, per round: ns per peek */
    double ns[MAX_OFFSETS][M_COUNT][MAX_ROUNDS];
    int na[MAX_OFFSETS][M_COUNT];
    uint32_t auto_mode[MAX_OFFSETS];
    double syscalls_per_peek[MAX_OFFSETS][M_COUNT];
};

static void measure_offset(struct ctx *c, struct results *res, size_t oi)
{
    long iters[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) {
        res->na[oi][m] = verify_mech(&MECHS[m], c);
        iters[m] = res->na[oi][m] ? 0 : calibrate(&MECHS[m], c);
    }
    res->auto_mode[oi] = c->auto_mode;
    uint64_t sys[M_COUNT] = { 0 }, peeks[M_COUNT] = { 0 };
    for (size_t r = 0; r < res->nrounds; r++) {
        /* Rotate the order so no mechanism always runs first/last. */
        for (int k = 0; k < M_COUNT; k++) {
            int m = (int)((r + (size_t)k) % M_COUNT);
            if (res->na[oi][m]) {
                res->ns[oi][m][r] = NAN;
                continue;
            }
            c->lc_syscalls = c->lc_peeks = 0;
            long warm = iters[m] / WARM_FRACTION + 1;
            res->ns[oi][m][r] = time_batch(&MECHS[m], c, warm, iters[m]) / iters[m];
            sys[m] += c->lc_syscalls;
            peeks[m] += c->lc_peeks;
        }
    }
    for (int m = 0; m < M_COUNT; m++)
        res->syscalls_per_peek[oi][m] = peeks[m] ? (double)sys[m] / peeks[m] : NAN;
}

/* ---------------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The measured values of v (NaN: not measured) into tmp, sorted; returns how many. */
static size_t sorted_measured(const double *v, size_t n, double tmp[MAX_ROUNDS])
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            tmp[k++] = v[i];
    qsort(tmp, k, sizeof(tmp[0]), cmp_double);
    return k;
}

static double median(const double *v, size_t n)
{
    double tmp[MAX_ROUNDS];
    size_t k = sorted_measured(v, n, tmp);
    if (k == 0)
        return NAN;
    return k % 2 ? tmp[k / 2] : (tmp[k / 2 - 1] + tmp[k / 2]) / 2;
}

/* Interquartile range as % of the median: how far to trust a cell. */
static double spread_pct(const double *v, size_t n)
{
    double tmp[MAX_ROUNDS];
    size_t k = sorted_measured(v, n, tmp);
    if (k == 0)
        return NAN;
    double q1 = tmp[(k - 1) / 4], q3 = tmp[(3 * (k - 1) + 3) / 4];
    return (q3 - q1) / median(tmp, k) * 100;
}

static double med_ns(const struct results *res, size_t oi, int m)
{
    return median(res->ns[oi][m], res->nrounds);
}

/* Percent by which `a` exceeds `b`, median of the per-round ratios: both
 * batches of a round ran back to back, so pairing cancels drift. */
static double paired_pct(const struct results *res, size_t oi, int a, int b)
{
    double q[MAX_ROUNDS];
    for (size_t r = 0; r < res->nrounds; r++)
        q[r] = res->ns[oi][a][r] / res->ns[oi][b][r];
    return (median(q, res->nrounds) - 1) * 100;
}

/* The cheaper lowcopy fixed mode at this offset (by median). */
static int best_fixed(const struct results *res, size_t oi)
{
    double o = med_ns(res, oi, M_LC_OFF), d = med_ns(res, oi, M_LC_DISC);
    if (isnan(o))
        return M_LC_DISC;
    if (isnan(d))
        return M_LC_OFF;
    return o <= d ? M_LC_OFF : M_LC_DISC;
}

/* ---------------------------------------------------------------- output */

static const char *fmt_size(size_t n, char *buf, size_t len)
{
    if (n >= MIB && n % MIB == 0)
        snprintf(buf, len, "%zu MiB", n / MIB);
    else if (n >= KIB && n % KIB == 0)
        snprintf(buf, len, "%zu KiB", n / KIB);
    else
        snprintf(buf, len, "%zu B", n);
    return buf;
}

/* Print a number or "n/a" in a fixed-width column. */
static void cell(int width, int prec, double v, const char *suffix)
{
    char tmp[32];
    if (isnan(v) || isinf(v))
        snprintf(tmp, sizeof(tmp), "n/a");
    else
        snprintf(tmp, sizeof(tmp), "%.*f%s", prec, v, suffix);
    printf(" %*s |", width, tmp);
}

static const char *mode_name(uint32_t mode)
{
    switch (mode) {
    case LOWCOPY_PEEK_OFFSET: return "OFFSET";
    case LOWCOPY_PEEK_DISCARD: return "DISCARD";
    case LOWCOPY_PEEK_AUTO: return "AUTO";
    default: return "?";
    }
}

static void print_main_table(const struct results *res, const size_t *offs, size_t n)
{
    char sz[32];
    printf("\nns per 64 KiB peek (median of %zu rounds; overhead %% = median of per-round "
           "lowcopy/raw ratios;\nAUTO vs best %% = against the cheaper of lowcopy "
           "OFFSET / DISCARD at that offset)\n\n", res->nrounds);
    printf("%8s | %15s | %14s | %8s | %11s | %15s | %8s | %12s | %9s | %12s |\n",
           "offset", "raw SO_PEEK_OFF", "lowcopy OFFSET", "overhead", "raw discard",
           "lowcopy DISCARD", "overhead", "disc/offset", "AUTO", "AUTO vs best");
    printf("%8s | %15s | %14s | %8s | %11s | %15s | %8s | %12s | %9s | %12s |\n",
           "", "ns", "ns", "%", "ns", "ns", "%", "ratio", "ns", "%");
    for (size_t i = 0; i < n; i++) {
        printf("%8s |", fmt_size(offs[i], sz, sizeof(sz)));
        cell(15, 0, med_ns(res, i, M_RAW_OFF), "");
        cell(14, 0, med_ns(res, i, M_LC_OFF), "");
        cell(8, 1, paired_pct(res, i, M_LC_OFF, M_RAW_OFF), "");
        cell(11, 0, med_ns(res, i, M_RAW_DISC), "");
        cell(15, 0, med_ns(res, i, M_LC_DISC), "");
        cell(8, 1, paired_pct(res, i, M_LC_DISC, M_RAW_DISC), "");
        cell(12, 2, med_ns(res, i, M_RAW_DISC) / med_ns(res, i, M_RAW_OFF), "");
        cell(9, 0, med_ns(res, i, M_LC_AUTO), "");
        cell(12, 1, paired_pct(res, i, M_LC_AUTO, best_fixed(res, i)), "");
        putchar('\n');
    }
}

static void print_growth_table(const struct results *res, const size_t *offs, size_t n)
{
    char sz[32], base[32];
    printf("\ncost growth relative to offset %s (ratio of medians)\n\n",
           fmt_size(offs[0], base, sizeof(base)));
    printf("%8s | %12s | %12s | %12s | %12s |\n", "offset", "raw offset",
           "lc OFFSET", "raw discard", "lc DISCARD");
    for (size_t i = 0; i < n; i++) {
        printf("%8s |", fmt_size(offs[i], sz, sizeof(sz)));
        cell(12, 2, med_ns(res, i, M_RAW_OFF) / med_ns(res, 0, M_RAW_OFF), "x");
        cell(12, 2, med_ns(res, i, M_LC_OFF) / med_ns(res, 0, M_LC_OFF), "x");
        cell(12, 2, med_ns(res, i, M_RAW_DISC) / med_ns(res, 0, M_RAW_DISC), "x");
        cell(12, 2, med_ns(res, i, M_LC_DISC) / med_ns(res, 0, M_LC_DISC), "x");
        putchar('\n');
    }
}

/* Delivered bandwidth: only the 64 KiB that reached the caller count. */
static void print_gbps_table(const struct results *res, const size_t *offs, size_t n)
{
    char sz[32];
    printf("\ndelivered GB/s (64 KiB / median ns)\n\n");
    printf("%8s |", "offset");
    for (int m = 0; m < M_COUNT; m++)
        printf(" %15s |", MECHS[m].name);
    putchar('\n');
    for (size_t i = 0; i < n; i++) {
        printf("%8s |", fmt_size(offs[i], sz, sizeof(sz)));
        for (int m = 0; m < M_COUNT; m++)
            cell(15, 2, (double)PEEK_LEN / med_ns(res, i, m), "");
        putchar('\n');
    }
}

/* The machine is shared and noisy in bursts: show how much each cell
 * moved between rounds, so a 5% verdict is not read off a 10% wobble. */
static void print_spread_table(const struct results *res, const size_t *offs, size_t n)
{
    char sz[32];
    double worst = 0;
    printf("\nround-to-round spread (IQR as %% of median)\n\n%8s |", "offset");
    for (int m = 0; m < M_COUNT; m++)
        printf(" %15s |", MECHS[m].name);
    putchar('\n');
    for (size_t i = 0; i < n; i++) {
        printf("%8s |", fmt_size(offs[i], sz, sizeof(sz)));
        for (int m = 0; m < M_COUNT; m++) {
            double sp = spread_pct(res->ns[i][m], res->nrounds);
            cell(15, 1, sp, "");
            if (sp > worst)
                worst = sp;
        }
        putchar('\n');
    }
    if (worst > 5)
        printf("warning: some cells moved by more than 5%% between rounds (worst %.1f%%): "
               "the machine was noisy; rerun, or raise -n\n", worst);
}

/* What the library did per seek+peek (its own stats), and AUTO's pick. */
static void print_lib_notes(const struct results *res, const size_t *offs, size_t n)
{
    char sz[32];
    printf("\nlowcopy syscalls per seek+peek (peeker stats) and AUTO's mechanism\n\n");
    printf("%8s | %10s | %10s | %10s | %8s |\n", "offset", "OFFSET", "DISCARD", "AUTO",
           "AUTO is");
    for (size_t i = 0; i < n; i++) {
        printf("%8s |", fmt_size(offs[i], sz, sizeof(sz)));
        cell(10, 2, res->syscalls_per_peek[i][M_LC_OFF], "");
        cell(10, 2, res->syscalls_per_peek[i][M_LC_DISC], "");
        cell(10, 2, res->syscalls_per_peek[i][M_LC_AUTO], "");
        printf(" %8s |\n", res->na[i][M_LC_AUTO] ? "n/a" : mode_name(res->auto_mode[i]));
    }
}

/* ---------------------------------------------------------------- options */

struct opts {
    size_t rounds;
    int family;
    int cpu;
    size_t offs[MAX_OFFSETS];
    size_t noffs;
};

static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        die("bad size '%s'", s);
    switch (*end) {
    case 'k': case 'K': v *= KIB; end++; break;
    case 'm': case 'M': v *= MIB; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I')   /* accept KiB / MiB spelling */
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    /* The receive buffer is forced to 4x the largest offset, in an int. */
    if (*end || v > 256 * MIB)
        die("bad size '%s' (at most 256M)", s);
    return (size_t)v;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

static void parse_offsets(struct opts *o, const char *list)
{
    char *copy = strdup(list);
    if (!copy)
        die("out of memory");
    o->noffs = 0;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->noffs == MAX_OFFSETS)
            die("at most %d offsets", MAX_OFFSETS);
        o->offs[o->noffs++] = parse_size(t);
    }
    free(copy);
    if (o->noffs == 0)
        die("--offsets: empty list");
    /* Ascending, so the queue only ever grows between offsets. */
    qsort(o->offs, o->noffs, sizeof(o->offs[0]), cmp_size);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: peek_sweep [-n rounds] [-6] [-c cpu] [--offsets LIST]\n"
               "  -n rounds      timed rounds per offset (default 9, 3..%d)\n"
               "  -6             IPv6 loopback instead of IPv4\n"
               "  -c cpu         pin to this CPU\n"
               "  --offsets LIST comma list with K/M suffixes "
               "(default 0,4K,64K,1M,4M,16M)\n", MAX_ROUNDS);
}

static void parse_opts(struct opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "offsets", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    *o = (struct opts){ .rounds = 9, .family = AF_INET, .cpu = -1 };
    parse_offsets(o, "0,4K,64K,1M,4M,16M");
    int ch;
    while ((ch = getopt_long(argc, argv, "n:6c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'n': o->rounds = (size_t)strtoul(optarg, NULL, 10); break;
        case '6': o->family = AF_INET6; break;
        case 'c': o->cpu = atoi(optarg); break;
        case 'o': parse_offsets(o, optarg); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind != argc || o->rounds < 3 || o->rounds > MAX_ROUNDS) {
        usage(stderr);
        exit(2);
    }
}

static void pin_cpu(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    check_sys(sched_setaffinity(0, sizeof(set), &set), "sched_setaffinity");
}

/* ---------------------------------------------------------------- main */

/* Enough for the largest offset, the peek and the slack, with room for the
 * kernel's per-skb overhead; the kernel doubles the value again. */
static int rcvbuf_for(size_t max_off)
{
    size_t want = 4 * (max_off + PEEK_LEN + TAIL_SLACK);
    if (want < 64 * MIB)
        want = 64 * MIB;
    return want > INT_MAX / 2 ? INT_MAX / 2 : (int)want;
}

static void run_sweep(const struct opts *o, struct results *res)
{
    struct conn conn;
    conn_open(&conn, o->family, rcvbuf_for(o->offs[o->noffs - 1]));

    long iov_max = sysconf(_SC_IOV_MAX);
    if (iov_max <= 0)
        iov_max = 1024;   /* UIO_MAXIOV, when libc cannot tell */

    struct ctx c = { .fd = conn.rx };
    c.dst = xmalloc_page(PEEK_LEN);
    c.scratch = xmalloc_page(SCRATCH_LEN);
    /* A fresh TCP socket starts at -1; the contract below depends on it. */
    check_peek_off_disabled(c.fd, "accept");

    char sz[32];
    for (size_t i = 0; i < o->noffs; i++) {
        c.off = o->offs[i];
        fill_to(&conn, c.off + PEEK_LEN + TAIL_SLACK);
        c.iovcnt = build_discard_iov(&c, iov_max);
        fprintf(stderr, "offset %-8s: %d bytes queued, measuring...\n",
                fmt_size(c.off, sz, sizeof(sz)), queued(c.fd));
        measure_offset(&c, res, i);
        free(c.iov);
        c.iov = NULL;
    }
    free(c.dst);
    free(c.scratch);
    conn_close(&conn);
}

int main(int argc, char **argv)
{
    struct opts o;
    parse_opts(&o, argc, argv);
    if (o.cpu >= 0)
        pin_cpu(o.cpu);

    struct results *res = calloc(1, sizeof(*res));
    if (!res)
        die("out of memory");
    res->nrounds = o.rounds;

    uint32_t v = lowcopy_version();
    printf("peek_sweep: lowcopy %u.%u.%u, TCP %s loopback, %zu rounds, %.0f ms batches\n",
           v >> 16, (v >> 8) & 0xff, v & 0xff, o.family == AF_INET6 ? "IPv6" : "IPv4",
           o.rounds, BATCH_TARGET_NS / 1e6);

    run_sweep(&o, res);
    print_main_table(res, o.offs, o.noffs);
    print_growth_table(res, o.offs, o.noffs);
    print_gbps_table(res, o.offs, o.noffs);
    print_spread_table(res, o.offs, o.noffs);
    print_lib_notes(res, o.offs, o.noffs);
    free(res);
    return 0;
}
