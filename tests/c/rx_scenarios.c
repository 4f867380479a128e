/* rx_scenarios.c - runs the behaviour table tests/scenarios/rx.json (low-water-mark receive and
 * zero-copy receive) against the C ABI (lowcopy_set_rcvlowat, lowcopy_recv_atleast_stats,
 * lowcopy_zcrx_*).
 *
 * The Rust runner (core/tests/rx_scenarios.rs, fixtures in core/tests/common/mod.rs) runs the
 * very same table against the Rust core. Every op here must mean exactly what it means there,
 * so that a table that passes both proves the C ABI behaves like the core. The ops map onto
 * the C functions: set_rcvlowat -> lowcopy_set_rcvlowat, recv_atleast ->
 * lowcopy_recv_atleast_stats, zcrx_new / zcrx_recv / zcrx_stat / zcrx_free ->
 * lowcopy_zcrx_new / _recv / _stats / _free; zcrx_drain loops lowcopy_zcrx_recv.
 *
 * expect_window is lowcopy_zcrx_window.
 * Numbers: cJSON keeps numbers as doubles, which cannot hold u64::MAX (the table passes
 *   18446744073709551615). This runner has the harness keep every number's literal as
 *   written (exact_numbers) and read integers from it exactly as serde_json's as_u64 / as_i64
 *   do (a fraction or exponent is not an integer; out of range is not one either).
 * Besides the table's expectations, each receive checks the C contract the Rust types make
 * implicit: the return equals chunk.len, and end of stream is {NULL, 0, 0}.
 *
 * Each scenario x transport runs in a forked child (harness.c): a failing step, a crash or a
 * hang ends that run only, and its first failure is listed. After teardown the child also
 * checks that every fd opened during the run is closed again. Output: one "FAIL [...]" line
 * per failed run, then "c-rx-scenarios: N passed, M failed"; exit status 0 only when every run
 * passed and there were more than 50 of them (the Rust runner's floor; the table expands to 74
 * runs today).
 *
 * Build: make c-tests (this file with harness.c; see tests/c/README.md).
 * Usage: c_rx_scenarios [PATH/TO/rx.json]   (default: tests/scenarios/rx.json)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <lowcopy.h>

#include "harness.h"

enum {
    RUN_TIMEOUT_S = 60,   /* a run still going after this is a hang: SIGALRM ends it (the
                             table's longest wait is a 30 s recv_atleast timeout) */
    RCVTIMEO_S = 3,       /* blocking steps that wait wrongly fail with EAGAIN, not hang */
    RESET_SETTLE_MS = 20, /* reset_peer: time for the RST to arrive, as the Rust runner */
    ZC_ALIGN = 4096,      /* common::send_zerocopy rounds its copy to this */
    ZC_DRAIN_EVERY = 16,  /* ... and reads the error queue once per this many sends */
};

/* The rx runner's part of a run. */
struct state {
    int listener;         /* one of the run's owned fds, or -1 */
    bool has_mss;         /* TCP_MAXSEG for the clients `accept` connects */
    int mss;
    lowcopy_zcrx *zcrx;
    lowcopy_receiver *rcv; /* receiver_new .. receiver_free */
    uint64_t received;    /* stream bytes received and checked */
};

/* `v.as_bool() == Some(true)`. */
static bool json_true(const cJSON *v) { return cJSON_IsTrue(v); }

static int need_zcrx(struct run *r, const char *op)
{
    return r->st->zcrx ? 0 : fail(r, "%s before zcrx_new (or after zcrx_free)", op);
}

/* ---- writer works: what the peer's threads do (harness.h: struct writer) --------------- */

/* common::drain_errqueue: reads and discards MSG_ZEROCOPY notifications, never blocking. */
static void drain_errqueue(int fd)
{
    uint64_t control[16];
    for (;;) {
        struct msghdr msg = {.msg_control = control, .msg_controllen = sizeof control};
        if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            return;
    }
}

/* common::send_zerocopy: MSG_ZEROCOPY sends from a page-aligned private copy, sizes cycling;
 * ENOBUFS and EINTR are retried after draining the error queue. */
static void send_zerocopy(struct writer *w)
{
    char eb[64];
    int one = 1;
    if (w->nsizes == 0) {
        writer_fail(w, "send_zerocopy: no sizes");
        return;
    }
    if (setsockopt(w->fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) < 0) {
        writer_fail(w, "SO_ZEROCOPY: %s", errno_text(errno, eb, sizeof eb));
        return;
    }
    size_t maplen = ((w->len ? w->len : 1) + ZC_ALIGN - 1) / ZC_ALIGN * ZC_ALIGN;
    unsigned char *base =
        mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        writer_fail(w, "mmap: %s", errno_text(errno, eb, sizeof eb));
        return;
    }
    if (w->len)
        memcpy(base, w->data, w->len);
    size_t off = 0, i = 0;
    while (off < w->len) {
        size_t n = w->sizes[i % w->nsizes];
        if (n > w->len - off)
            n = w->len - off;
        ssize_t k = send(w->fd, base + off, n, MSG_ZEROCOPY);
        if (k < 0) {
            int e = errno;
            if (e == ENOBUFS || e == EINTR) {
                drain_errqueue(w->fd);
                sleep_ms(1);
                continue;
            }
            writer_fail(w, "zerocopy send after %zu of %zu bytes: %s", off, w->len,
                        errno_text(e, eb, sizeof eb));
            break;
        }
        off += (size_t)k;
        i++;
        if (i % ZC_DRAIN_EVERY == 0)
            drain_errqueue(w->fd);
    }
    drain_errqueue(w->fd);
    /* The kernel holds its own page references for data in flight. */
    if (munmap(base, maplen) < 0)
        writer_fail(w, "munmap: %s", errno_text(errno, eb, sizeof eb));
}

/* send_trickle's work: data.chunks(piece), each piece written, then a pause of ms (after the
 * last one too). */
static void trickle(struct writer *w)
{
    char eb[64];
    int e;
    for (size_t off = 0; off < w->len; off += w->piece) {
        size_t n = w->len - off < w->piece ? w->len - off : w->piece;
        if ((e = write_all(w->fd, w->data + off, n))) {
            writer_fail(w, "write after %zu bytes: %s", off, errno_text(e, eb, sizeof eb));
            break;
        }
        sleep_ms(w->ms);
    }
}

/* shutdown_peer's work: after the bytes still being written (their writers, w->before, joined
 * first), the peer's sending side shut down. */
static void shutdown_after(struct writer *w)
{
    char eb[64], why[sizeof w->err];
    for (size_t i = 0; i < w->nbefore; i++) {
        join_writer(w->before[i], why, sizeof why);
        if (why[0])
            writer_fail(w, "%s", why);
    }
    /* A writer before it failed: the Rust thread panics at its join, before shutting down. */
    if (!w->err[0] && shutdown(w->fd, SHUT_WR) < 0)
        writer_fail(w, "shutdown(peer, SHUT_WR): %s", errno_text(errno, eb, sizeof eb));
}

/* ---- the fd under test ----------------------------------------------------------------- */

static bool is_tcp(const char *t) { return strcmp(t, "tcp4") == 0 || strcmp(t, "tcp6") == 0; }

static bool is_listener(const char *t)
{
    return strcmp(t, "listener4") == 0 || strcmp(t, "listener6") == 0;
}

/* common::set_timeval for SO_RCVTIMEO. */
static int set_rcvtimeo(struct run *r, int fd, uint64_t ms)
{
    if (set_timeval(fd, SO_RCVTIMEO, ms) < 0)
        return sys_fail(r, "setsockopt(SO_RCVTIMEO)");
    return 0;
}

/* The Rust runner's run_one setup: the fd under test, the scenario's options, and the 3 s
 * receive timeout on every socket under test (not on a listener, nor on a file). */
static int setup(struct run *r, const cJSON *sc)
{
    struct state *st = r->st;
    const char *t = r->transport;
    int64_t v;
    int rcvbuf = 0;
    const int *pmss = NULL, *prcvbuf = NULL;
    st->listener = -1;
    if (json_i64(get(sc, "mss"), &v)) {
        st->mss = (int)v;
        st->has_mss = true;
        pmss = &st->mss;
    }
    if (json_i64(get(sc, "rcvbuf_lock"), &v)) {
        rcvbuf = (int)v;
        prcvbuf = &rcvbuf;
    }
    if (is_listener(t)) {
        int l = tcp_listener(r, strcmp(t, "listener6") == 0 ? AF_INET6 : AF_INET, 0, pmss, prcvbuf);
        if (l < 0)
            return -1;
        st->listener = r->fd = l;
        return 0;
    }
    int rc = common_fixture(r, t, pmss, prcvbuf);
    if (rc == FIXTURE_UNKNOWN && strcmp(t, "tcp4_unconnected") == 0) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return sys_fail(r, "socket");
        r->fd = s;
        return own(r, s);
    }
    if (rc == FIXTURE_UNKNOWN && strcmp(t, "udp4") == 0) {
        struct sockaddr_storage to; /* connected: sends need no address */
        socklen_t tolen;
        rc = udp_pair(r, AF_INET, true, &to, &tolen);
    }
    if (rc == FIXTURE_UNKNOWN)
        return fail(r, "unknown transport %s", t);
    if (rc < 0 || r->peer < 0) /* failed, or "closed" / "file": nothing to tune */
        return rc;
    /* TCP had the buffer locked on the listener, before the handshake. */
    if (!is_tcp(t) && prcvbuf &&
        set_int(r, r->fd, SOL_SOCKET, SO_RCVBUF, rcvbuf, "SO_RCVBUF") < 0)
        return -1;
    /* A wrong blocking wait fails with EAGAIN instead of hanging the suite. */
    return set_rcvtimeo(r, r->fd, (uint64_t)RCVTIMEO_S * 1000);
}

/* ---- expectations ---------------------------------------------------------------------- */

/* tcp_rmem[2] / 2: the most SO_RCVLOWAT TCP keeps on an unlocked buffer. */
static int rmem_cap(struct run *r, uint64_t *out)
{
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_rmem", "re");
    if (!f)
        return sys_fail(r, "open /proc/sys/net/ipv4/tcp_rmem");
    unsigned long long a, b, c;
    int n = fscanf(f, "%llu %llu %llu", &a, &b, &c);
    fclose(f);
    if (n != 3)
        return fail(r, "cannot parse /proc/sys/net/ipv4/tcp_rmem");
    *out = c / 2;
    return 0;
}

/* Run::resolve: a number, or 'rmem_cap', or 'rcvbuf_half' (SO_RCVBUF as read back / 2). */
static int resolve(struct run *r, const cJSON *v, uint64_t *out)
{
    if (cJSON_IsNumber(v)) {
        if (!json_u64(v, out))
            return fail(r, "bad number (not a u64)");
        return 0;
    }
    if (json_is(v, "rmem_cap"))
        return rmem_cap(r, out);
    if (json_is(v, "rcvbuf_half")) {
        int b;
        if (get_int(r->fd, SOL_SOCKET, SO_RCVBUF, &b) < 0)
            return sys_fail(r, "getsockopt(SO_RCVBUF)");
        *out = (uint64_t)(int64_t)b / 2;
        return 0;
    }
    return fail(r, "bad number %s", cJSON_IsString(v) ? v->valuestring : "(not a string)");
}

/* Run::expect: `ret` is a lowcopy return (>= 0, or -errno); `data` holds the `cap` bytes the
 * op got (NULL and 0 for ops without data). With "expect_err" the call must have failed with
 * that errno, and nothing else is checked. Else: "expect_ret" (a number, rmem_cap or
 * rcvbuf_half), "expect" (the bytes), "expect_pattern": true (the bytes continue the stream
 * where the last receive ended). *n gets the bytes received (0 on an expected error). */
static int expect(struct run *r, const cJSON *step, ssize_t ret, const unsigned char *data,
                  size_t cap, size_t *n)
{
    *n = 0;
    const cJSON *e = get(step, "expect_err");
    if (e)
        return expect_err(r, e, ret, false);
    if (ret < 0)
        return lc_fail(r, "unexpected error", ret);
    size_t got = (size_t)ret;
    const cJSON *w = get(step, "expect_ret");
    if (w) {
        uint64_t want;
        if (resolve(r, w, &want) < 0)
            return -1;
        if ((uint64_t)got != want)
            return fail(r, "returned %zu, want %" PRIu64, got, want);
    }
    const cJSON *want = get(step, "expect");
    bool pat = json_true(get(step, "expect_pattern"));
    /* The Rust runner slices data[..n]: more than the op got is a failure there too. */
    if ((want || pat) && got > cap)
        return fail(r, "returned %zu, more than the %zu bytes the op got", got, cap);
    if (want && expect_bytes(r, want, data, got) < 0)
        return -1;
    if (pat) {
        size_t i = pattern_mismatch(data, got, r->st->received);
        if (i < got)
            return fail(r,
                        "wrong bytes at stream position %" PRIu64 " (%zu bytes; first "
                        "difference at %" PRIu64 ": got 0x%02x, want 0x%02x)",
                        r->st->received, got, r->st->received + i, data[i],
                        pattern_byte(r->st->received + i));
    }
    *n = got;
    return 0;
}

/* expect for a receive: the bytes move the stream position on. */
static int expect_data(struct run *r, const cJSON *step, ssize_t ret, const unsigned char *data,
                       size_t cap)
{
    size_t n;
    if (expect(r, step, ret, data, cap, &n) < 0)
        return -1;
    r->st->received += n;
    return 0;
}

/* ---- ops: the mark --------------------------------------------------------------------- */

static int op_set_rcvlowat(struct run *r, const cJSON *step)
{
    uint64_t bytes;
    size_t n;
    if (need_u64(r, step, "bytes", &bytes) < 0)
        return -1;
    size_t eff = 0;
    int rc = lowcopy_set_rcvlowat(r->fd, (size_t)bytes, &eff);
    if (rc > 0)
        return fail(r, "lowcopy_set_rcvlowat returned %d (0 or -errno expected)", rc);
    if (rc == 0 && eff > SSIZE_MAX)
        return fail(r, "effective mark %zu", eff);
    return expect(r, step, rc < 0 ? rc : (ssize_t)eff, NULL, 0, &n);
}

/* A socket option compared with the step's "value" (resolved). */
static int expect_sockopt(struct run *r, const cJSON *step, int name, const char *what,
                          bool at_least)
{
    int v;
    uint64_t want;
    if (get_int(r->fd, SOL_SOCKET, name, &v) < 0) {
        char m[64];
        snprintf(m, sizeof m, "getsockopt(%s)", what);
        return sys_fail(r, m);
    }
    if (resolve(r, get(step, "value"), &want) < 0)
        return -1;
    uint64_t got = (uint64_t)(int64_t)v; /* `v as u64` */
    if (at_least ? got < want : got != want)
        return fail(r, "%s %d, want %s%" PRIu64, what, v, at_least ? ">= " : "", want);
    return 0;
}

static int op_expect_rcvlowat(struct run *r, const cJSON *step)
{
    return expect_sockopt(r, step, SO_RCVLOWAT, "SO_RCVLOWAT", false);
}

static int op_expect_rcvbuf_min(struct run *r, const cJSON *step)
{
    return expect_sockopt(r, step, SO_RCVBUF, "SO_RCVBUF", true);
}

static int op_expect_peek_off(struct run *r, const cJSON *step)
{
    return expect_sockopt(r, step, SO_PEEK_OFF, "SO_PEEK_OFF", false);
}

/* accept: a client connects now (a socket takes the listener's options when its handshake
 * completes, not at accept()), becomes the peer, and the accepted socket becomes the fd. */
static int op_accept(struct run *r, const cJSON *step)
{
    (void)step;
    if (r->st->listener < 0)
        return fail(r, "not a listener");
    if (tcp_connect(r, r->st->listener, 0, r->st->has_mss ? &r->st->mss : NULL) < 0)
        return -1;
    int s = accept_owned(r, r->st->listener);
    if (s < 0)
        return -1;
    if (set_rcvtimeo(r, s, (uint64_t)RCVTIMEO_S * 1000) < 0)
        return -1;
    r->fd = s;
    return 0;
}

/* ---- ops: the peer --------------------------------------------------------------------- */

/* len pattern bytes in `pieces` pieces (ceil(len / pieces) bytes each), `ms` apart. */
static int op_send_trickle(struct run *r, const cJSON *step)
{
    size_t len, pieces;
    uint64_t ms;
    if (need_size(r, step, "len", &len) < 0 || need_size(r, step, "pieces", &pieces) < 0 ||
        need_u64(r, step, "ms", &ms) < 0)
        return -1;
    /* The Rust writer panics on these (div_ceil by 0, chunks(0)). */
    if (pieces == 0 || len == 0)
        return fail(r, "send_trickle needs len > 0 and pieces > 0");
    unsigned char *d = pattern(r->sent, len);
    r->sent += len;
    struct writer *w = new_writer(trickle, "send_trickle", d, len);
    w->piece = len / pieces + (len % pieces != 0);
    w->ms = ms;
    return start_writer(r, w);
}

/* send_later ms data|len: the string, or len pattern bytes, after ms. */
static int op_send_later(struct run *r, const cJSON *step)
{
    uint64_t ms;
    size_t len;
    unsigned char *d;
    const cJSON *s = get(step, "data");
    if (s) {
        if (!cJSON_IsString(s))
            return fail(r, "`data` is not a string");
        len = strlen(s->valuestring);
        d = xmalloc(len ? len : 1);
        memcpy(d, s->valuestring, len);
    } else {
        if (need_size(r, step, "len", &len) < 0)
            return -1;
        d = pattern(r->sent, len);
    }
    r->sent += len;
    if (need_u64(r, step, "ms", &ms) < 0) {
        free(d);
        return -1;
    }
    struct writer *w = new_writer(write_later, "send_later", d, len);
    w->ms = ms;
    return start_writer(r, w);
}

static int op_send_zc_pattern(struct run *r, const cJSON *step)
{
    size_t len;
    const cJSON *ss = get(step, "sizes"), *v;
    if (need_size(r, step, "len", &len) < 0)
        return -1;
    if (!cJSON_IsArray(ss))
        return fail(r, "`sizes` missing");
    size_t k = (size_t)cJSON_GetArraySize(ss), i = 0;
    size_t *sizes = xmalloc((k ? k : 1) * sizeof *sizes);
    cJSON_ArrayForEach(v, ss)
    {
        uint64_t s;
        if (!json_u64(v, &s) || s > SIZE_MAX) {
            free(sizes);
            return fail(r, "`sizes` holds a value that is not a size");
        }
        sizes[i++] = (size_t)s;
    }
    unsigned char *d = pattern(r->sent, len);
    r->sent += len;
    struct writer *w = new_writer(send_zerocopy, "send_zc_pattern", d, len);
    w->sizes = sizes;
    w->nsizes = k;
    return start_writer(r, w);
}

static int op_send_datagrams(struct run *r, const cJSON *step)
{
    const cJSON *list = get(step, "list"), *v;
    if (!cJSON_IsArray(list))
        return fail(r, "`list` missing");
    if (need_peer(r) < 0)
        return -1;
    cJSON_ArrayForEach(v, list)
    {
        if (!cJSON_IsString(v))
            return fail(r, "`list` holds a value that is not a string");
        size_t len = strlen(v->valuestring);
        ssize_t n = send(r->peer, v->valuestring, len, 0);
        if (n < 0)
            return sys_fail(r, "send datagram");
        if ((size_t)n != len)
            return fail(r, "send datagram: %zd of %zu bytes", n, len);
    }
    return 0;
}

static int op_sleep(struct run *r, const cJSON *step)
{
    uint64_t ms;
    if (need_u64(r, step, "ms", &ms) < 0)
        return -1;
    sleep_ms(ms);
    return 0;
}

/* shutdown_peer: after the bytes still being written, without waiting here for a reader: a
 * thread joins the writers so far, then shuts the peer's sending side down. */
static int op_shutdown_peer(struct run *r, const cJSON *step)
{
    (void)step;
    if (need_peer(r) < 0)
        return -1;
    struct writer *w = new_writer(shutdown_after, "shutdown_peer", NULL, 0);
    w->before = r->writers;
    w->nbefore = r->nwriters;
    r->writers = NULL;
    r->nwriters = 0;
    return start_writer(r, w);
}

/* reset_peer: every writer joined, then the peer closed with SO_LINGER 0 so that our socket
 * gets a RST (common::reset), then 20 ms for it to arrive. */
static int op_reset_peer(struct run *r, const cJSON *step)
{
    (void)step;
    join_writers(r, true);
    if (r->why[0])
        return -1;
    return reset_peer(r, RESET_SETTLE_MS);
}

/* ---- ops: the error queue --------------------------------------------------------------- */

/* errqueue kind: an entry on the fd's error queue, then until poll reports POLLERR.
 * "zerocopy" and "timestamp" as common::errqueue_entry (harness.c); "icmp" (UDP): IP_RECVERR
 * on, the peer closed, one datagram sent, which draws an ICMP port unreachable: ECONNREFUSED
 * pending (SO_ERROR) and an error-queue entry that stays. */
static int op_errqueue(struct run *r, const cJSON *step)
{
    const char *kind;
    if (need_str(r, step, "kind", &kind) < 0)
        return -1;
    if (strcmp(kind, "icmp") != 0)
        return errqueue_entry(r, r->fd, kind);
    if (set_int(r, r->fd, IPPROTO_IP, IP_RECVERR, 1, "setsockopt(IP_RECVERR)") < 0)
        return -1;
    close_owned(r, &r->peer); /* the Rust runner's `self.peer = None` */
    if (r->why[0])
        return -1;
    ssize_t n = send(r->fd, "e", 1, 0);
    if (n < 0)
        return sys_fail(r, "send");
    if (n != 1)
        return fail(r, "send: %zd bytes, want 1", n);
    return wait_pollerr(r, r->fd);
}

/* ---- ops: plain socket calls ----------------------------------------------------------- */

static int op_set_rcvtimeo_ms(struct run *r, const cJSON *step)
{
    uint64_t ms;
    if (need_u64(r, step, "ms", &ms) < 0)
        return -1;
    return set_rcvtimeo(r, r->fd, ms);
}

static int op_set_nonblocking(struct run *r, const cJSON *step)
{
    (void)step;
    int fl = fcntl(r->fd, F_GETFL);
    if (fl < 0 || fcntl(r->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return sys_fail(r, "fcntl(O_NONBLOCK)");
    return 0;
}

static int op_set_peek_off(struct run *r, const cJSON *step)
{
    uint64_t v;
    if (need_u64(r, step, "value", &v) < 0)
        return -1;
    return set_int(r, r->fd, SOL_SOCKET, SO_PEEK_OFF, (int)v, "setsockopt(SO_PEEK_OFF)");
}

/* peek len expect_pattern_at: recv(MSG_PEEK | MSG_DONTWAIT) must give len bytes, the stream
 * bytes from position expect_pattern_at. */
static int op_peek(struct run *r, const cJSON *step)
{
    size_t len;
    uint64_t at;
    if (need_size(r, step, "len", &len) < 0 || need_u64(r, step, "expect_pattern_at", &at) < 0)
        return -1;
    unsigned char *b = room(len);
    ssize_t n = recv(r->fd, b, len, MSG_PEEK | MSG_DONTWAIT);
    int rc = 0;
    char eb[64];
    if (n < 0)
        rc = fail(r, "peek: %s, want %zu bytes", errno_text(errno, eb, sizeof eb), len);
    else if ((size_t)n != len)
        rc = fail(r, "peek: %zd bytes, want %zu", n, len);
    else if (pattern_mismatch(b, len, at) < len)
        rc = fail(r, "peeked bytes are not stream bytes %" PRIu64 "..", at);
    free(b);
    return rc;
}

/* read len: a plain read(2) on (a dup of) the fd, bypassing lowcopy. */
static int op_read(struct run *r, const cJSON *step)
{
    size_t len;
    if (need_size(r, step, "len", &len) < 0)
        return -1;
    int fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return sys_fail(r, "dup");
    unsigned char *buf = room(len);
    ssize_t n = read(fd, buf, len);
    int e = errno;
    close_owned(r, &fd);
    int rc = expect_data(r, step, n < 0 ? -e : n, buf, len);
    free(buf);
    return rc;
}

/* ---- ops: recv_atleast ----------------------------------------------------------------- */

/* receiver_new [expect_err]: a lowcopy_receiver on the fd as it is now. */
static int op_receiver_new(struct run *r, const cJSON *step)
{
    size_t n;
    lowcopy_receiver_free(r->st->rcv);
    r->st->rcv = NULL;
    lowcopy_receiver *x = NULL;
    int rc = lowcopy_receiver_new(r->fd, &x);
    if (get(step, "expect_err")) {
        if (rc == 0)
            lowcopy_receiver_free(x);
        return expect(r, step, rc, NULL, 0, &n);
    }
    if (rc < 0)
        return lc_fail(r, "receiver_new", rc);
    r->st->rcv = x;
    return 0;
}

static int op_receiver_free(struct run *r, const cJSON *step)
{
    (void)step;
    lowcopy_receiver_free(r->st->rcv);
    r->st->rcv = NULL;
    return 0;
}

/* recv_atleast, and receiver_recv: the same through the receiver, with that call's counters
 * (the receiver's after minus before). */
static int op_recv_atleast(struct run *r, const cJSON *step)
{
    size_t len, min;
    int64_t timeout;
    uint64_t v;
    bool via_receiver = json_is(get(step, "op"), "receiver_recv");
    if (via_receiver && !r->st->rcv)
        return fail(r, "receiver_recv before receiver_new");
    if (need_size(r, step, "len", &len) < 0 || need_size(r, step, "min", &min) < 0)
        return -1;
    if (!json_i64(get(step, "timeout_ms"), &timeout))
        return fail(r, "`timeout_ms` missing");
    /* -1: no limit (None); ms >= 0: Some(ms). Nothing else can be said through the C int. */
    if (timeout < -1 || timeout > INT_MAX)
        return fail(r, "timeout_ms %" PRId64 " cannot be passed as the C int", timeout);
    unsigned char *buf = room(len);
    lowcopy_recv_stats s;
    memset(&s, 0, sizeof s);
    lowcopy_recv_stats before, after;
    memset(&before, 0, sizeof before);
    memset(&after, 0, sizeof after);
    if (via_receiver)
        lowcopy_receiver_stats(r->st->rcv, &before, sizeof(lowcopy_recv_stats));
    uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
    ssize_t n = via_receiver
                    ? lowcopy_receiver_recv(r->st->rcv, buf, len, min, (int)timeout)
                    : lowcopy_recv_atleast_stats(r->fd, buf, len, min, (int)timeout, &s, sizeof(lowcopy_recv_stats));
    uint64_t took = now_ns() - t0, cpu = thread_cpu_ns() - cpu0;
    if (via_receiver) {
        lowcopy_receiver_stats(r->st->rcv, &after, sizeof(lowcopy_recv_stats));
        s.calls = after.calls - before.calls;
        s.syscalls = after.syscalls - before.syscalls;
        s.wakeups = after.wakeups - before.wakeups;
        s.early_wakeups = after.early_wakeups - before.early_wakeups;
        s.timeouts = after.timeouts - before.timeouts;
        s.lowat_changes = after.lowat_changes - before.lowat_changes;
        s.bytes = after.bytes - before.bytes;
    }
    int rc = expect_data(r, step, n, buf, len);
    free(buf);
    if (rc < 0 || elapsed_bounds(r, step, took) < 0 || cpu_bound(r, step, cpu) < 0)
        return -1;
#define STATS_FMT                                                                              \
    "{calls %" PRIu64 ", syscalls %" PRIu64 ", wakeups %" PRIu64 ", early_wakeups %" PRIu64     \
    ", timeouts %" PRIu64 ", lowat_changes %" PRIu64 ", bytes %" PRIu64 "}"
#define STATS_ARGS                                                                             \
    s.calls, s.syscalls, s.wakeups, s.early_wakeups, s.timeouts, s.lowat_changes, s.bytes
    if (json_u64(get(step, "wakeups_max"), &v) && s.wakeups > v)
        return fail(r, "%" PRIu64 " wakeups, want <= %" PRIu64 ": " STATS_FMT, s.wakeups, v,
                    STATS_ARGS);
    if (json_u64(get(step, "wakeups_min"), &v) && s.wakeups < v)
        return fail(r, "%" PRIu64 " wakeups, want >= %" PRIu64 ": " STATS_FMT, s.wakeups, v,
                    STATS_ARGS);
    if (json_u64(get(step, "syscalls"), &v) && s.syscalls != v)
        return fail(r, "%" PRIu64 " syscalls, want %" PRIu64 ": " STATS_FMT, s.syscalls, v,
                    STATS_ARGS);
    if (json_u64(get(step, "lowat_changes"), &v) && s.lowat_changes != v)
        return fail(r, "SO_RCVLOWAT changes %" PRIu64 ", want %" PRIu64 ": " STATS_FMT,
                    s.lowat_changes, v, STATS_ARGS);
#undef STATS_FMT
#undef STATS_ARGS
    return 0;
}

/* ---- ops: zero-copy receive ------------------------------------------------------------ */

static int op_zcrx_new(struct run *r, const cJSON *step)
{
    uint64_t window;
    size_t n;
    lowcopy_zcrx_free(r->st->zcrx); /* the old receiver goes first, as `self.zcrx = None` */
    r->st->zcrx = NULL;
    if (need_u64(r, step, "window", &window) < 0)
        return -1;
    lowcopy_zcrx *z = NULL;
    int rc = lowcopy_zcrx_new(r->fd, (size_t)window, &z);
    if (rc > 0)
        return fail(r, "lowcopy_zcrx_new returned %d (0 or -errno expected)", rc);
    if (get(step, "expect_err")) {
        /* A receiver made despite the expected error does not outlive the step. */
        if (rc == 0)
            lowcopy_zcrx_free(z);
        return expect(r, step, rc, NULL, 0, &n);
    }
    if (rc < 0)
        return lc_fail(r, "zcrx_new", rc);
    if (!z)
        return fail(r, "zcrx_new returned 0 but wrote no receiver");
    r->st->zcrx = z;
    const cJSON *w = get(step, "expect_window");
    if (w) {
        uint64_t want, got = lowcopy_zcrx_window(r->st->zcrx);
        if (!json_u64(w, &want))
            return fail(r, "expect_window is not a u64");
        if (got != want)
            return fail(r, "window %" PRIu64 ", want %" PRIu64, got, want);
    }
    return 0;
}

static int op_zcrx_free(struct run *r, const cJSON *step)
{
    (void)step;
    lowcopy_zcrx_free(r->st->zcrx);
    r->st->zcrx = NULL;
    return 0;
}

/* zcrx_set_timeout ms: the receiver's own timeout (-1: no limit). */
static int op_zcrx_set_timeout(struct run *r, const cJSON *step)
{
    int64_t ms;
    if (need_zcrx(r, "zcrx_set_timeout") < 0)
        return -1;
    if (!json_i64(get(step, "ms"), &ms) || ms < -1 || ms > INT_MAX)
        return fail(r, "`ms` missing or not a C int >= -1");
    int rc = lowcopy_zcrx_set_timeout(r->st->zcrx, (int)ms);
    return rc ? lc_fail(r, "zcrx_set_timeout", rc) : 0;
}

/* zcrx_peek_off_tracking on: true|false. */
static int op_zcrx_peek_off_tracking(struct run *r, const cJSON *step)
{
    const cJSON *on = get(step, "on");
    if (need_zcrx(r, "zcrx_peek_off_tracking") < 0)
        return -1;
    if (!cJSON_IsBool(on))
        return fail(r, "`on` missing or not a boolean");
    int rc = lowcopy_zcrx_set_peek_off_tracking(r->st->zcrx, cJSON_IsTrue(on) ? 1 : 0);
    return rc ? lc_fail(r, "zcrx_peek_off_tracking", rc) : 0;
}

/* The C contract of a receive: the return is chunk.len; end of stream is {NULL, 0, 0}. */
static int check_chunk(struct run *r, ssize_t rc, const lowcopy_zcrx_chunk *c)
{
    if (rc > 0 && ((size_t)rc != c->len || !c->data))
        return fail(r, "zcrx_recv returned %zd, chunk {%p, %zu, %u}", rc, (const void *)c->data,
                    c->len, c->mapped);
    if (rc == 0 && (c->data || c->len || c->mapped))
        return fail(r, "zcrx_recv returned 0 (end of stream), chunk {%p, %zu, %u}, want "
                       "{NULL, 0, 0}",
                    (const void *)c->data, c->len, c->mapped);
    return 0;
}

static int zcrx_stats(struct run *r, lowcopy_zcrx_recv_stats *s)
{
    int rc = lowcopy_zcrx_stats(r->st->zcrx, s, sizeof(lowcopy_zcrx_recv_stats));
    return rc < 0 ? lc_fail(r, "zcrx_stats", rc) : 0;
}

#define ZSTATS_FMT                                                                             \
    "{bytes_mapped %" PRIu64 ", bytes_copied %" PRIu64 ", bytes_copybuf %" PRIu64              \
    ", chunks_mapped %" PRIu64 ", chunks_copied %" PRIu64 ", syscalls %" PRIu64                \
    ", zc_calls %" PRIu64 ", zc_calls_unmapped %" PRIu64 ", wakeups %" PRIu64                  \
    ", peek_off_fixups %" PRIu64 "}"
#define ZSTATS_ARGS(s)                                                                         \
    (s).bytes_mapped, (s).bytes_copied, (s).bytes_copybuf, (s).chunks_mapped,                  \
        (s).chunks_copied, (s).syscalls, (s).zc_calls, (s).zc_calls_unmapped, (s).wakeups,     \
        (s).peek_off_fixups

/* zcrx_recv [dontwait]: one receive; expect_eof, expect_mapped (when bytes came), and the
 * usual expect/expect_ret/expect_err/expect_pattern, min_ms/max_ms, cpu_max_ms. */
static int op_zcrx_recv(struct run *r, const cJSON *step)
{
    char eb[64];
    int flags = json_true(get(step, "dontwait")) ? MSG_DONTWAIT : 0;
    if (need_zcrx(r, "zcrx_recv") < 0)
        return -1;
    lowcopy_zcrx_chunk c;
    memset(&c, 0xa5, sizeof c); /* written only on success */
    uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
    ssize_t rc = lowcopy_zcrx_recv(r->st->zcrx, &c, sizeof(lowcopy_zcrx_chunk), flags);
    uint64_t took = now_ns() - t0, cpu = thread_cpu_ns() - cpu0;
    if (cpu_bound(r, step, cpu) < 0 || check_chunk(r, rc, &c) < 0)
        return -1;
    if (json_true(get(step, "expect_eof")) && rc != 0) {
        if (rc < 0)
            return fail(r, "want end of stream, got %s", errno_text((int)-rc, eb, sizeof eb));
        return fail(r, "want end of stream, got %zd bytes", rc);
    }
    const cJSON *m = get(step, "expect_mapped");
    if (rc > 0 && cJSON_IsBool(m) && (c.mapped != 0) != (bool)cJSON_IsTrue(m))
        return fail(r, "mapped %u, want %s (%zd bytes)", c.mapped,
                    cJSON_IsTrue(m) ? "true" : "false", rc);
    if (expect_data(r, step, rc, rc > 0 ? c.data : NULL, rc > 0 ? c.len : 0) < 0)
        return -1;
    return elapsed_bounds(r, step, took);
}

/* zcrx_drain bytes [expect_eof]: blocking receives until that many bytes came, each checked
 * against the pattern, then end of stream if asked; min_ms/max_ms bound the whole drain, and
 * the bytes counted mapped + copied must be exactly the bytes delivered. */
static int op_zcrx_drain(struct run *r, const cJSON *step)
{
    char eb[64];
    uint64_t bytes, got = 0;
    lowcopy_zcrx_recv_stats before, after;
    lowcopy_zcrx_chunk c;
    if (need_u64(r, step, "bytes", &bytes) < 0 || need_zcrx(r, "zcrx_drain") < 0 ||
        zcrx_stats(r, &before) < 0)
        return -1;
    uint64_t t0 = now_ns();
    while (got < bytes) {
        ssize_t rc = lowcopy_zcrx_recv(r->st->zcrx, &c, sizeof(lowcopy_zcrx_chunk), 0);
        if (rc < 0)
            return fail(r, "after %" PRIu64 " of %" PRIu64 " bytes: %s", got, bytes,
                        errno_text((int)-rc, eb, sizeof eb));
        if (check_chunk(r, rc, &c) < 0)
            return -1;
        if (rc == 0)
            return fail(r, "end of stream after %" PRIu64 " of %" PRIu64 " bytes", got, bytes);
        uint64_t at = r->st->received + got;
        size_t i = pattern_mismatch(c.data, c.len, at);
        if (i < c.len)
            return fail(r,
                        "wrong bytes at stream position %" PRIu64 " (mapped %u, %zu bytes; first "
                        "difference at %" PRIu64 ": got 0x%02x, want 0x%02x)",
                        at, c.mapped, c.len, at + i, c.data[i], pattern_byte(at + i));
        got += c.len;
    }
    if (got != bytes)
        return fail(r, "more bytes than expected: %" PRIu64 " of %" PRIu64, got, bytes);
    if (json_true(get(step, "expect_eof"))) {
        ssize_t rc = lowcopy_zcrx_recv(r->st->zcrx, &c, sizeof(lowcopy_zcrx_chunk), 0);
        if (rc < 0)
            return fail(r, "want end of stream: %s", errno_text((int)-rc, eb, sizeof eb));
        if (check_chunk(r, rc, &c) < 0)
            return -1;
        if (rc > 0)
            return fail(r, "want end of stream, got %zd bytes", rc);
    }
    if (elapsed_bounds(r, step, now_ns() - t0) < 0 || zcrx_stats(r, &after) < 0)
        return -1;
    uint64_t delivered = after.bytes_mapped + after.bytes_copied - before.bytes_mapped -
                         before.bytes_copied;
    if (delivered != bytes)
        return fail(r, "mapped + copied != received: %" PRIu64 " counted, %" PRIu64
                       " received: " ZSTATS_FMT,
                    delivered, bytes, ZSTATS_ARGS(after));
    r->st->received += bytes;
    return 0;
}

static int op_zcrx_stat(struct run *r, const cJSON *step)
{
    lowcopy_zcrx_recv_stats s;
    const char *f;
    uint64_t got, v;
    const cJSON *w;
    if (need_zcrx(r, "zcrx_stat") < 0 || need_str(r, step, "field", &f) < 0 ||
        zcrx_stats(r, &s) < 0)
        return -1;
    if (strcmp(f, "bytes_mapped") == 0)
        got = s.bytes_mapped;
    else if (strcmp(f, "bytes_copied") == 0)
        got = s.bytes_copied;
    else if (strcmp(f, "bytes_copybuf") == 0)
        got = s.bytes_copybuf;
    else if (strcmp(f, "chunks_mapped") == 0)
        got = s.chunks_mapped;
    else if (strcmp(f, "chunks_copied") == 0)
        got = s.chunks_copied;
    else if (strcmp(f, "zc_calls") == 0)
        got = s.zc_calls;
    else if (strcmp(f, "zc_calls_unmapped") == 0)
        got = s.zc_calls_unmapped;
    else if (strcmp(f, "wakeups") == 0)
        got = s.wakeups;
    else if (strcmp(f, "peek_off_fixups") == 0)
        got = s.peek_off_fixups;
    else
        return fail(r, "unknown stat %s", f);
    /* A kernel whose struct tcp_zerocopy_receive has no copy buffer (before 5.11: under 36
     * bytes, per the probe) reads every copied byte with recv: value_no_copybuf applies. */
    bool no_copybuf = probed_caps()->tcp_zerocopy_receive_size < 36;
    static const char *const KEYS[] = {"value", "min", "max"};
    for (int k = 0; k < 3; k++) {
        if (!(w = get(step, KEYS[k])))
            continue;
        if (k == 0 && no_copybuf && get(step, "value_no_copybuf"))
            w = get(step, "value_no_copybuf");
        if (!json_u64(w, &v))
            return fail(r, "`%s` is not a u64", KEYS[k]);
        bool bad = k == 0 ? got != v : k == 1 ? got < v : got > v;
        if (bad)
            return fail(r, "%s %" PRIu64 ", want %s%" PRIu64 ": " ZSTATS_FMT, f, got,
                        k == 0 ? "" : k == 1 ? ">= " : "<= ", v, ZSTATS_ARGS(s));
    }
    return 0;
}

static const struct op OPS[] = {
    {"set_rcvlowat", op_set_rcvlowat},
    {"expect_rcvlowat", op_expect_rcvlowat},
    {"expect_rcvbuf_min", op_expect_rcvbuf_min},
    {"accept", op_accept},
    {"send", op_peer_send},
    {"send_pattern", op_peer_send_pattern},
    {"send_trickle", op_send_trickle},
    {"send_later", op_send_later},
    {"send_zc_pattern", op_send_zc_pattern},
    {"send_datagrams", op_send_datagrams},
    {"wait_queued", op_wait_queued},
    {"errqueue", op_errqueue},
    {"sleep", op_sleep},
    {"shutdown_peer", op_shutdown_peer},
    {"reset_peer", op_reset_peer},
    {"recv_atleast", op_recv_atleast},
    {"receiver_new", op_receiver_new},
    {"receiver_recv", op_recv_atleast},
    {"receiver_free", op_receiver_free},
    {"read", op_read},
    {"set_rcvtimeo_ms", op_set_rcvtimeo_ms},
    {"set_nonblocking", op_set_nonblocking},
    {"set_peek_off", op_set_peek_off},
    {"expect_peek_off", op_expect_peek_off},
    {"peek", op_peek},
    {"zcrx_new", op_zcrx_new},
    {"zcrx_free", op_zcrx_free},
    {"zcrx_set_timeout", op_zcrx_set_timeout},
    {"zcrx_peek_off_tracking", op_zcrx_peek_off_tracking},
    {"zcrx_recv", op_zcrx_recv},
    {"zcrx_drain", op_zcrx_drain},
    {"zcrx_stat", op_zcrx_stat},
};

/* Ends the run as the Rust runner does: the receiver goes first, then the writers and fds. */
static void teardown(struct run *r, bool failed)
{
    lowcopy_zcrx_free(r->st->zcrx);
    r->st->zcrx = NULL;
    lowcopy_receiver_free(r->st->rcv);
    r->st->rcv = NULL;
    end_fds(r, failed);
}

static const struct runner RX = {
    .prog = "c-rx-scenarios",
    .table = "rx.json",
    .default_path = "tests/scenarios/rx.json",
    .table_wants = "`scenarios`",
    .timeout_s = RUN_TIMEOUT_S,
    .errnos = ERRNOS_RX,
    .exact_numbers = true,
    .check_fds = true,
    .state_size = sizeof(struct state),
    .setup = setup,
    .teardown = teardown,
    .ops = OPS,
    .nops = sizeof OPS / sizeof OPS[0],
};

int main(int argc, char **argv) { return run_table(&RX, argc, argv); }
