/* zc_scenarios.c - runs the behaviour table tests/scenarios/zc.json (zerocopy sends) against
 * the C ABI (lowcopy_zc_*).
 *
 * The Rust runner (core/tests/zc_scenarios.rs, fixtures in core/tests/common/mod.rs) runs the
 * very same table against the Rust core. Every op here must mean exactly what it means there,
 * so that a table that passes both proves the C ABI behaves like the core. The ops map onto
 * the C functions: send -> lowcopy_zc_send, sendv -> lowcopy_zc_sendv, sendto ->
 * lowcopy_zc_sendmsg (with msg_name), send_reap_loop -> lowcopy_zc_send_reap, and reap, wait,
 * inflight, stats, free as named; request_response receives its answers with
 * lowcopy_recv_atleast on the sending socket (issue 12: not spinning on the error queue).
 * cpu_max_ms is the CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID) around the call.
 *
 * Each scenario x transport x backend runs in a forked child (harness.c): a failing step, a
 * crash or a hang ends that run only, and its first failure is listed. After teardown the
 * child also checks that every fd it (or lowcopy, e.g. an io_uring ring) opened during the run
 * is closed again. Output: one "FAIL [...]" line per failed run, then
 * "c-zc-scenarios: N passed, M failed"; exit status 0 only when every run passed and there
 * were more than 50 of them.
 *
 * Build: make c-tests (this file with harness.c; see tests/c/README.md).
 * Usage: c_zc_scenarios [PATH/TO/zc.json]   (default: tests/scenarios/zc.json)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <lowcopy.h>

#include "harness.h"

enum {
    RUN_TIMEOUT_S = 30,       /* a run still going after this is a hang: SIGALRM ends it */
    PEER_RCVTIMEO_S = 3,      /* drain_peer: a peer that gets too little fails, not hangs */
    READER_RCVTIMEO_S = 5,    /* drain_peer_later's reader, as the Rust runner's read_pattern */
    ANSWER_DELAY_MS = 50,     /* request_response: the peer answers this long after the request */
    ANSWER_MIN_MS = 30,       /* ... and the receive must have waited at least this long */
    REPLY_TIMEOUT_MS = 3000,  /* ... for at most this long */
    RESET_SETTLE_MS = 50,     /* reset_peer: time for the RST to arrive */
    DRAIN_BUF = 1 << 20,      /* drain_peer reads up to this much at a time */
    REAP_BATCH = 256,         /* reap: completions per lowcopy_zc_reap call */
    SEND_REAP_CAP = 64,       /* send_reap_loop: completions room per call */
    FILL_MAX = 10000,         /* fill_window: sends before "the window never filled" */
    SEND_MANY_BASE = 1000000, /* send_many: user_data of send i is this + i */
    RETRY_FULL_BASE = 2000000, /* retry_full: user_data of try i is this + i */
    CROWD_BASE = 3000000,     /* crowd: user_data of crowd sender i's send is this + i */
    CROWD_MAX = 256,          /* crowd: senders at most */
    CROWD_WAIT_MS = 3000,     /* crowd: each sender's completion comes within this */
    CROWD_SETTLE_MS = 20,     /* crowd: then a second send each, after this long ... */
    CROWD_AGAIN = 100000,     /* ... with user_data CROWD_BASE + this + i */
};

/* ---- the zc runner's part of a run ----------------------------------------------------- */

/* Bytes a send accepted, by user_data (only sends that returned > 0). */
struct sent {
    uint64_t user_data;
    size_t n;
};

struct state {
    bool datagram;        /* UDP: a send is all or nothing */
    bool has_dest;        /* unconnected UDP: sendto names the peer's address */
    struct sockaddr_storage dest;
    socklen_t destlen;
    uint32_t backend;
    lowcopy_zc *zc;
    struct sent *sends;
    size_t nsends, capsends;
    lowcopy_zc_completion *got; /* every completion reaped during the run */
    size_t ngot, capgot;
    unsigned char **bufs; /* every buffer handed to a send: alive, unmodified, until the end */
    size_t nbufs, capbufs;
    uint64_t stream_pos;  /* bytes sent so far (datagrams: whole datagrams) */
    uint64_t received;    /* bytes the peer read and checked */
    bool timestamping;    /* SO_TIMESTAMPING reports on: sends leave entries on the error queue */
    bool reader;          /* drain_peer_later's reader is running (one of r->writers) ... */
    uint64_t reader_to;   /* ... and has read up to this stream position when joined */
};

/* ---- backends -------------------------------------------------------------------------- */

static int backend_of(const char *s, uint32_t *out)
{
    if (strcmp(s, "auto") == 0)
        *out = LOWCOPY_ZC_AUTO;
    else if (strcmp(s, "errqueue") == 0)
        *out = LOWCOPY_ZC_ERRQUEUE;
    else if (strcmp(s, "io_uring") == 0)
        *out = LOWCOPY_ZC_IO_URING;
    else if (strcmp(s, "copy") == 0)
        *out = LOWCOPY_ZC_COPY;
    else
        return -1;
    return 0;
}

static const char *backend_name(uint32_t b)
{
    switch (b) {
    case LOWCOPY_ZC_AUTO:
        return "auto";
    case LOWCOPY_ZC_ERRQUEUE:
        return "errqueue";
    case LOWCOPY_ZC_IO_URING:
        return "io_uring";
    case LOWCOPY_ZC_COPY:
        return "copy";
    default:
        return "unknown";
    }
}

/* `arr` (room for *cap elements of `size` bytes) grown to hold at least `need`. */
static void *grow(void *arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return arr;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    *cap = c;
    return xrealloc(arr, c * size);
}

static int need_zc(struct run *r)
{
    return r->st->zc ? 0 : fail(r, "scenario uses the sender before `new` (or after `free`)");
}

/* The step's send flags: "flags" (raw, as i32) | MSG_DONTWAIT for "dontwait": true. */
static int step_flags(const cJSON *step)
{
    int64_t f = 0;
    if (!json_i64(get(step, "flags"), &f))
        f = 0;
    return (int)f | (cJSON_IsTrue(get(step, "dontwait")) ? MSG_DONTWAIT : 0);
}

/* ---- what the run remembers ------------------------------------------------------------ */

static struct sent *sent_find(struct run *r, uint64_t ud)
{
    struct state *st = r->st;
    for (size_t i = 0; i < st->nsends; i++)
        if (st->sends[i].user_data == ud)
            return &st->sends[i];
    return NULL;
}

/* HashMap::insert: replaces an earlier entry; with `must_be_new`, an earlier entry is a
 * failure (the Rust runner's "user_data used twice" assertion). */
static int sent_put(struct run *r, uint64_t ud, size_t n, bool must_be_new)
{
    struct state *st = r->st;
    struct sent *s = sent_find(r, ud);
    if (s) {
        s->n = n;
        if (must_be_new)
            return fail(r, "user_data %" PRIu64 " used twice by the scenario", ud);
        return 0;
    }
    st->sends = grow(st->sends, &st->capsends, st->nsends + 1, sizeof *st->sends);
    st->sends[st->nsends++] = (struct sent){.user_data = ud, .n = n};
    return 0;
}

static void got_add(struct run *r, const lowcopy_zc_completion *c, size_t n)
{
    struct state *st = r->st;
    if (n == 0)
        return;
    st->got = grow(st->got, &st->capgot, st->ngot + n, sizeof *st->got);
    memcpy(st->got + st->ngot, c, n * sizeof *c);
    st->ngot += n;
}

/* Keeps a send buffer until the run ends (the Rust runner's `bufs`). */
static unsigned char *keep_buf(struct run *r, unsigned char *b)
{
    struct state *st = r->st;
    st->bufs = grow(st->bufs, &st->capbufs, st->nbufs + 1, sizeof *st->bufs);
    st->bufs[st->nbufs++] = b;
    return b;
}

/* ---- expectations ---------------------------------------------------------------------- */

/* Run::check: `ret` is a lowcopy return (>= 0, or -errno). With "expect_err" the call must
 * have failed with (one of) that errno; else it must have succeeded, with "expect_ret" if
 * given. */
static int check(struct run *r, const cJSON *step, ssize_t ret)
{
    const cJSON *e = get(step, "expect_err");
    if (e)
        return expect_err(r, e, ret, true);
    if (ret < 0)
        return lc_fail(r, "unexpected error", ret);
    const cJSON *w = get(step, "expect_ret");
    if (w) {
        int64_t want;
        if (!json_i64(w, &want))
            return fail(r, "expect_ret is not an integer");
        if ((int64_t)ret != want)
            return fail(r, "returned %zd, want %" PRId64, ret, want);
    }
    return 0;
}

/* ---- sends ----------------------------------------------------------------------------- */

enum via { VIA_SEND, VIA_SENDV, VIA_SENDMSG };

/* Run::send: one buffer continuing the pattern, cut into the iovecs asked for, handed to
 * lowcopy through `via`. Records what a send that returned > 0 accepted, and advances the
 * stream (a datagram by its whole length; a stream send by what was accepted, so that the
 * next buffer continues the pattern from there). Returns lowcopy's return value; a failure of
 * the runner itself (no sender, ...) is recorded in r->why. */
static ssize_t do_send(struct run *r, enum via via, const size_t *lens, size_t k, uint64_t ud,
                       int flags)
{
    size_t total = 0;
    for (size_t i = 0; i < k; i++)
        total += lens[i];
    unsigned char *buf = keep_buf(r, pattern(r->st->stream_pos, total));
    if (need_zc(r) < 0)
        return -EINVAL;
    struct iovec *iov = xmalloc(k * sizeof *iov);
    unsigned char *at = buf;
    for (size_t i = 0; i < k; i++) {
        iov[i] = (struct iovec){.iov_base = at, .iov_len = lens[i]};
        at += lens[i];
    }
    ssize_t n;
    switch (via) {
    case VIA_SEND:
        n = lowcopy_zc_send(r->st->zc, buf, total, flags, ud);
        break;
    case VIA_SENDV:
        n = lowcopy_zc_sendv(r->st->zc, iov, (int)k, flags, ud);
        break;
    default: {
        if (!r->st->has_dest) {
            free(iov);
            fail(r, "sendto needs unconnected UDP");
            return -EINVAL;
        }
        struct msghdr msg = {.msg_name = &r->st->dest, .msg_namelen = r->st->destlen,
                             .msg_iov = iov, .msg_iovlen = k};
        n = lowcopy_zc_sendmsg(r->st->zc, &msg, flags, ud);
        break;
    }
    }
    free(iov); /* lowcopy needs the iovecs only during the call; the bytes stay in bufs */
    if (n >= 0) {
        if (n > 0)
            sent_put(r, ud, (size_t)n, true);
        r->st->stream_pos += r->st->datagram ? total : (uint64_t)n;
    }
    return n;
}

/* send len user_data [flags] [dontwait] [min_ms] [cpu_max_ms]: one lowcopy_zc_send; min_ms
 * and cpu_max_ms bound its elapsed and CPU time. */
static int op_send(struct run *r, const cJSON *step)
{
    size_t len;
    uint64_t ud, ms;
    if (need_size(r, step, "len", &len) < 0 || need_u64(r, step, "user_data", &ud) < 0)
        return -1;
    uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
    ssize_t n = do_send(r, VIA_SEND, &len, 1, ud, step_flags(step));
    uint64_t took = now_ns() - t0, cpu = thread_cpu_ns() - cpu0;
    if (r->why[0] || check(r, step, n) < 0)
        return -1;
    if (json_u64(get(step, "min_ms"), &ms) && took < ms * 1000000u)
        return fail(r, "returned after %.1f ms, want >= %" PRIu64 " ms", took / 1e6, ms);
    return cpu_bound(r, step, cpu);
}

static int op_sendto(struct run *r, const cJSON *step)
{
    size_t len;
    uint64_t ud;
    if (need_size(r, step, "len", &len) < 0 || need_u64(r, step, "user_data", &ud) < 0)
        return -1;
    ssize_t n = do_send(r, VIA_SENDMSG, &len, 1, ud, step_flags(step));
    return r->why[0] ? -1 : check(r, step, n);
}

static int op_sendv(struct run *r, const cJSON *step)
{
    const cJSON *ls = get(step, "lens"), *v;
    uint64_t ud;
    if (!cJSON_IsArray(ls))
        return fail(r, "`lens` missing");
    if (need_u64(r, step, "user_data", &ud) < 0)
        return -1;
    size_t k = (size_t)cJSON_GetArraySize(ls), i = 0;
    size_t *lens = xmalloc((k ? k : 1) * sizeof *lens);
    cJSON_ArrayForEach(v, ls)
    {
        uint64_t l;
        if (!json_u64(v, &l) || l > SIZE_MAX) {
            free(lens);
            return fail(r, "`lens` holds a value that is not a size");
        }
        lens[i++] = (size_t)l;
    }
    ssize_t n = do_send(r, VIA_SENDV, lens, k, ud, step_flags(step));
    free(lens);
    return r->why[0] ? -1 : check(r, step, n);
}

/* send_many count len: `count` blocking sends, user_data 1000000 + i, all must succeed. (The
 * table's "about" also names [expect_err_after]; the Rust runner ignores it, and so does
 * this one.) */
static int op_send_many(struct run *r, const cJSON *step)
{
    uint64_t count;
    size_t len;
    if (need_u64(r, step, "count", &count) < 0 || need_size(r, step, "len", &len) < 0)
        return -1;
    for (uint64_t i = 0; i < count; i++) {
        ssize_t n = do_send(r, VIA_SEND, &len, 1, SEND_MANY_BASE + i, 0);
        if (r->why[0])
            return -1;
        if (n < 0) {
            char what[64];
            snprintf(what, sizeof what, "send %" PRIu64, i);
            return lc_fail(r, what, n);
        }
    }
    return 0;
}

/* send_reap_loop count len base: lowcopy_zc_send_reap, one buffer each, user_data base + i;
 * every send must accept all `len` bytes; completions handed back join the run's. */
static int op_send_reap_loop(struct run *r, const cJSON *step)
{
    uint64_t count, base;
    size_t len;
    if (need_u64(r, step, "count", &count) < 0 || need_size(r, step, "len", &len) < 0 ||
        need_u64(r, step, "base", &base) < 0 || need_zc(r) < 0)
        return -1;
    lowcopy_zc_completion out[SEND_REAP_CAP];
    for (uint64_t i = 0; i < count; i++) {
        unsigned char *b = keep_buf(r, pattern(r->st->stream_pos, len));
        struct iovec iov = {.iov_base = b, .iov_len = len};
        size_t k = SIZE_MAX;
        ssize_t n = lowcopy_zc_send_reap(r->st->zc, &iov, 1, 0, base + i, out, SEND_REAP_CAP, sizeof(lowcopy_zc_completion), &k);
        if (n < 0) {
            char what[64];
            snprintf(what, sizeof what, "send_reap %" PRIu64, i);
            return lc_fail(r, what, n);
        }
        if ((size_t)n != len)
            return fail(r, "send_reap %" PRIu64 " short: %zd of %zu bytes", i, n, len);
        if (k > SEND_REAP_CAP)
            return fail(r, "send_reap %" PRIu64 ": *n_out %zu, more than cap %d", i, k,
                        SEND_REAP_CAP);
        sent_put(r, base + i, (size_t)n, false);
        r->st->stream_pos += (uint64_t)n;
        got_add(r, out, k);
    }
    return 0;
}

/* send_batch count len base [dontwait] [expect_ret|expect_err]: one lowcopy_zc_send_batch of
 * `count` buffers of `len` bytes continuing the pattern, user_data base + i; returns the sends
 * made (the sendmmsg rules: a short last one, or an error after some, ends the batch). */
static int op_send_batch(struct run *r, const cJSON *step)
{
    uint64_t count, base;
    size_t len;
    if (need_u64(r, step, "count", &count) < 0 || need_size(r, step, "len", &len) < 0 ||
        need_u64(r, step, "base", &base) < 0 || need_zc(r) < 0)
        return -1;
    if (count > 4096)
        return fail(r, "send_batch count %" PRIu64 ": at most 4096", count);
    struct iovec *iov = xmalloc((count ? count : 1) * sizeof *iov);
    uint64_t *uds = xmalloc((count ? count : 1) * sizeof *uds);
    for (uint64_t i = 0; i < count; i++) {
        unsigned char *b = keep_buf(r, pattern(r->st->stream_pos + i * len, len));
        iov[i] = (struct iovec){.iov_base = b, .iov_len = len};
        uds[i] = base + i;
    }
    lowcopy_zc_completion out[SEND_REAP_CAP];
    size_t k = SIZE_MAX, bytes = SIZE_MAX;
    ssize_t n = lowcopy_zc_send_batch(r->st->zc, iov, (size_t)count, uds, step_flags(step), out,
                                      SEND_REAP_CAP, sizeof(lowcopy_zc_completion), &k, &bytes);
    free(iov);
    free(uds);
    if (n >= 0) {
        if (k > SEND_REAP_CAP)
            return fail(r, "send_batch: *n_out %zu, more than cap %d", k, SEND_REAP_CAP);
        size_t left = bytes;
        for (ssize_t i = 0; i < n; i++) {
            size_t took = len < left ? len : left; /* all but a short last one took len */
            left -= took;
            if (took > 0)
                sent_put(r, base + (uint64_t)i, took, true);
        }
        r->st->stream_pos += r->st->datagram ? (uint64_t)n * len : (uint64_t)bytes;
        got_add(r, out, k);
    }
    return check(r, step, n);
}

/* fill_window len base: non-blocking sends, user_data base, base+1, ..., until EAGAIN. */
static int op_fill_window(struct run *r, const cJSON *step)
{
    uint64_t base;
    size_t len;
    if (need_size(r, step, "len", &len) < 0 || need_u64(r, step, "base", &base) < 0)
        return -1;
    for (uint64_t i = 0;; i++) {
        ssize_t n = do_send(r, VIA_SEND, &len, 1, base + i, MSG_DONTWAIT);
        if (r->why[0])
            return -1;
        if (n == -EAGAIN)
            return 0;
        if (n < 0)
            return lc_fail(r, "fill", n);
        if (i >= FILL_MAX)
            return fail(r, "the window never filled (%" PRIu64 " sends)", i + 1);
    }
}

static int do_reap(struct run *r);

/* retry_full count len: non-blocking sends to a full socket; each must be -EAGAIN (never
 * -EBUSY: a failed send must not hold a request slot). */
static int op_retry_full(struct run *r, const cJSON *step)
{
    uint64_t count;
    size_t len;
    if (need_u64(r, step, "count", &count) < 0 || need_size(r, step, "len", &len) < 0)
        return -1;
    /* A try may also go through: the peer's kernel collapses a receive queue of tiny
     * segments and acks, which frees room here (more so on a loaded machine). It is a send
     * like any other, reaped at once (the window's sends, now acked, complete with it: the
     * sender's 4096 slots must not fill with them); but at least half must meet the full
     * socket. */
    uint64_t full = 0;
    for (uint64_t i = 0; i < count; i++) {
        ssize_t n = do_send(r, VIA_SEND, &len, 1, RETRY_FULL_BASE + i, MSG_DONTWAIT);
        if (r->why[0])
            return -1;
        if (n == -EAGAIN)
            full++;
        else if (n <= 0)
            return fail(r, "retry %" PRIu64 " of a full socket: %zd, not -EAGAIN (%zu in flight)", i,
                        n, lowcopy_zc_inflight(r->st->zc));
        else if (do_reap(r) < 0) /* a try that went through holds a slot until reaped */
            return -1;
    }
    if (full * 2 < count)
        return fail(r, "only %" PRIu64 " of %" PRIu64 " tries found it full", full, count);
    return 0;
}

/* Joins drain_peer_later's reader (the run's only writer thread then): the peer has read up
 * to where it was told. */
static int join_reader(struct run *r)
{
    if (!r->st->reader)
        return 0;
    r->st->reader = false;
    join_writers(r, true);
    if (r->why[0])
        return -1;
    r->st->received = r->st->reader_to;
    return 0;
}

/* ---- completions ----------------------------------------------------------------------- */

/* Run::reap: lowcopy_zc_reap until it returns fewer than asked for. */
static int do_reap(struct run *r)
{
    lowcopy_zc_completion out[REAP_BATCH];
    if (need_zc(r) < 0)
        return -1;
    for (;;) {
        ssize_t n = lowcopy_zc_reap(r->st->zc, out, REAP_BATCH, sizeof(lowcopy_zc_completion));
        if (n < 0)
            return lc_fail(r, "reap", n);
        if ((size_t)n > REAP_BATCH)
            return fail(r, "reap returned %zd, more than cap %d", n, REAP_BATCH);
        got_add(r, out, (size_t)n);
        if ((size_t)n < REAP_BATCH)
            return 0;
    }
}

static int op_reap(struct run *r, const cJSON *step)
{
    (void)step;
    return do_reap(r);
}

static int op_wait(struct run *r, const cJSON *step)
{
    int64_t timeout;
    if (!json_i64(get(step, "timeout_ms"), &timeout))
        return fail(r, "`timeout_ms` missing");
    if (need_zc(r) < 0)
        return -1;
    uint64_t t0 = now_ns();
    int rc = lowcopy_zc_wait(r->st->zc, (int)timeout);
    uint64_t took = now_ns() - t0;
    /* Every wait states what it may return: a result is never taken on trust. */
    const cJSON *min = get(step, "expect_ret_min");
    if (min) {
        uint64_t want;
        if (!json_u64(min, &want))
            return fail(r, "`expect_ret_min` is not a non-negative integer");
        if (rc < 0 && !get(step, "expect_err"))
            return lc_fail(r, "unexpected error", rc);
        if (rc < 0 && expect_err(r, get(step, "expect_err"), rc, true) < 0)
            return -1;
        if (rc >= 0 && (uint64_t)rc < want)
            return fail(r, "wait returned %d, want >= %" PRIu64, rc, want);
    } else if (!get(step, "expect_err") && !get(step, "expect_ret")) {
        return fail(r, "a wait step needs expect_ret, expect_ret_min or expect_err");
    } else if (check(r, step, rc) < 0) {
        return -1;
    }
    const cJSON *m = get(step, "max_ms");
    if (m) {
        uint64_t max;
        if (!json_u64(m, &max))
            return fail(r, "`max_ms` is not a non-negative integer");
        if (took > max * 1000000u)
            return fail(r, "waited %.1f ms, want <= %" PRIu64 " ms (returned %d)", took / 1e6,
                        max, rc);
    }
    return 0;
}

/* collect_all timeout_ms: reap, wait(50), ... until nothing is in flight. */
static int op_collect_all(struct run *r, const cJSON *step)
{
    uint64_t ms;
    char eb[64];
    if (need_u64(r, step, "timeout_ms", &ms) < 0 || need_zc(r) < 0)
        return -1;
    uint64_t deadline = now_ns() + ms * 1000000u;
    for (;;) {
        if (do_reap(r) < 0)
            return -1;
        size_t left = lowcopy_zc_inflight(r->st->zc);
        if (left == 0)
            return 0;
        if (now_ns() >= deadline)
            return fail(r, "%zu sends never completed", left);
        int rc = lowcopy_zc_wait(r->st->zc, 50);
        if (rc < 0 && rc != -ETIMEDOUT && rc != -ECONNRESET)
            return fail(r, "wait: %s", errno_text(-rc, eb, sizeof eb));
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Appends up to 8 values to a message, then "...". */
static size_t list_text(char *buf, size_t cap, const uint64_t *v, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i == 0 ? "%" PRIu64 : " %" PRIu64, v[i]);
    return o;
}

/* Why the sorted `got` differs from the sorted `want`: what is missing, what is extra (a
 * second completion for one user_data counts as extra). */
static int diff_fail(struct run *r, const uint64_t *got, size_t ng, const uint64_t *want,
                     size_t nw)
{
    uint64_t missing[8] = {0}, extra[8] = {0};
    size_t nm = 0, ne = 0, tm = 0, te = 0, i = 0, j = 0;
    while (i < ng || j < nw) {
        if (j == nw || (i < ng && got[i] < want[j])) {
            if (ne < 8)
                extra[ne++] = got[i];
            te++;
            i++;
        } else if (i == ng || want[j] < got[i]) {
            if (nm < 8)
                missing[nm++] = want[j];
            tm++;
            j++;
        } else {
            i++;
            j++;
        }
    }
    char mb[256], xb[256];
    mb[0] = xb[0] = '\0';
    list_text(mb, sizeof mb, missing, nm);
    list_text(xb, sizeof xb, extra, ne);
    return fail(r,
                "completions (each user_data exactly once): got %zu, want %zu; "
                "%zu missing [%s%s], %zu extra or repeated [%s%s]",
                ng, nw, tm, mb, tm > nm ? " ..." : "", te, xb, te > ne ? " ..." : "");
}

/* completions user_data [copied] [flag]: after drain_peer_later's reader is joined and a reap, exactly the listed user_data came back
 * once each ('all': every send that returned > 0), each with result == bytes its send
 * accepted, and the flags asked for. */
static int op_completions(struct run *r, const cJSON *step)
{
    if (join_reader(r) < 0 || do_reap(r) < 0)
        return -1;
    const cJSON *u = get(step, "user_data");
    uint64_t *want, *got;
    size_t nw;
    if (json_is(u, "all")) {
        nw = r->st->nsends;
        want = xmalloc((nw ? nw : 1) * sizeof *want);
        for (size_t i = 0; i < nw; i++)
            want[i] = r->st->sends[i].user_data;
        qsort(want, nw, sizeof *want, cmp_u64);
    } else if (cJSON_IsArray(u)) {
        /* As listed: the Rust runner compares its sorted completions with the list as is. */
        const cJSON *v;
        nw = (size_t)cJSON_GetArraySize(u);
        want = xmalloc((nw ? nw : 1) * sizeof *want);
        size_t i = 0;
        cJSON_ArrayForEach(v, u)
        {
            if (!json_u64(v, &want[i++])) {
                free(want);
                return fail(r, "`user_data` holds a value that is not a u64");
            }
        }
    } else {
        return fail(r, "`user_data` is neither \"all\" nor a list");
    }
    got = xmalloc((r->st->ngot ? r->st->ngot : 1) * sizeof *got);
    for (size_t i = 0; i < r->st->ngot; i++)
        got[i] = r->st->got[i].user_data;
    qsort(got, r->st->ngot, sizeof *got, cmp_u64);
    bool same = r->st->ngot == nw && (nw == 0 || memcmp(got, want, nw * sizeof *got) == 0);
    if (!same) {
        qsort(want, nw, sizeof *want, cmp_u64);
        diff_fail(r, got, r->st->ngot, want, nw);
    }
    free(got);
    free(want);
    if (!same)
        return -1;

    const cJSON *copied = get(step, "copied");
    bool want_fallback = json_is(get(step, "flag"), "FALLBACK");
    for (size_t i = 0; i < r->st->ngot; i++) {
        const lowcopy_zc_completion *c = &r->st->got[i];
        const struct sent *s = sent_find(r, c->user_data);
        if (!s)
            return fail(r, "result of %" PRIu64 ": no send with this user_data returned > 0",
                        c->user_data);
        if (c->result < 0 || (uint64_t)c->result != (uint64_t)s->n)
            return fail(r, "result of %" PRIu64 ": %" PRId64 ", the send accepted %zu",
                        c->user_data, c->result, s->n);
        if (cJSON_IsBool(copied) &&
            ((c->flags & LOWCOPY_ZC_COPIED) != 0) != (bool)cJSON_IsTrue(copied))
            return fail(r, "COPIED on %" PRIu64 ": flags 0x%x, want COPIED %s", c->user_data,
                        c->flags, cJSON_IsTrue(copied) ? "set" : "clear");
        if (want_fallback && !(c->flags & LOWCOPY_ZC_FALLBACK))
            return fail(r, "FALLBACK on %" PRIu64 ": flags 0x%x, want FALLBACK set",
                        c->user_data, c->flags);
    }
    return 0;
}

/* completions_flagged flag min: after a reap, at least `min` completions carry the flag
 * (only FALLBACK is named by the table). */
static int op_completions_flagged(struct run *r, const cJSON *step)
{
    uint64_t min, n = 0;
    if (do_reap(r) < 0)
        return -1;
    if (!json_is(get(step, "flag"), "FALLBACK"))
        return fail(r, "only FALLBACK is counted");
    if (!json_u64(get(step, "min"), &min))
        return fail(r, "`min` missing");
    for (size_t i = 0; i < r->st->ngot; i++)
        n += (r->st->got[i].flags & LOWCOPY_ZC_FALLBACK) != 0;
    if (n < min)
        return fail(r, "%" PRIu64 " completions with FALLBACK, want >= %" PRIu64, n, min);
    return 0;
}

/* ---- the peer -------------------------------------------------------------------------- */

/* The peer reads and checks the pattern: everything sent so far, or (until_reset) up to the
 * reset of its connection, which must come (never an orderly end, never other bytes). */
static int read_peer(struct run *r, bool until_reset)
{
    if (need_peer(r) < 0)
        return -1;
    if (set_timeval(r->peer, SO_RCVTIMEO, (uint64_t)PEER_RCVTIMEO_S * 1000) < 0)
        return sys_fail(r, "SO_RCVTIMEO");
    unsigned char *buf = xmalloc(DRAIN_BUF);
    int rc = 0;
    char eb[64];
    while (until_reset || r->st->received < r->st->stream_pos) {
        ssize_t n = recv(r->peer, buf, DRAIN_BUF, 0);
        /* The io_uring backend delivers SEND_ZC notifications as task work to this thread
         * (the ring's submitter), which interrupts the thread's blocking syscalls; a receive
         * with SO_RCVTIMEO is not restarted and fails with EINTR. The peer stands for another
         * process, so this says nothing about the sends: read again. */
        if (n < 0 && errno == EINTR)
            continue;
        if (until_reset && n < 0 && errno == ECONNRESET)
            break;
        if (n <= 0) {
            int e = errno;
            rc = fail(r, "peer got %" PRIu64 " of %" PRIu64 " bytes (%s)%s", r->st->received,
                      r->st->stream_pos, n == 0 ? "end of stream" : errno_text(e, eb, sizeof eb),
                      until_reset ? ", not a reset" : "");
            break;
        }
        if ((rc = expect_pattern_at(r, buf, (size_t)n, r->st->received)) < 0)
            break;
        r->st->received += (uint64_t)n;
    }
    free(buf);
    return rc;
}

/* drain_peer: the peer reads everything sent so far and checks it against the pattern. */
static int op_drain_peer(struct run *r, const cJSON *step)
{
    (void)step;
    return read_peer(r, false);
}

/* peer_sees_reset: the peer reads until its connection is reset: a prefix of the stream,
 * then ECONNRESET. */
static int op_peer_sees_reset(struct run *r, const cJSON *step)
{
    (void)step;
    return read_peer(r, true);
}

/* drain_peer_later's work: after w->ms, reads w->len bytes from the peer, which must be
 * w->data (the pattern from where the peer had read). */
static void read_later(struct writer *w)
{
    char eb[64];
    sleep_ms(w->ms);
    if (set_timeval(w->fd, SO_RCVTIMEO, (uint64_t)READER_RCVTIMEO_S * 1000) < 0) {
        writer_fail(w, "SO_RCVTIMEO: %s", errno_text(errno, eb, sizeof eb));
        return;
    }
    unsigned char *buf = xmalloc(DRAIN_BUF);
    for (size_t got = 0; got < w->len;) {
        size_t want = w->len - got < DRAIN_BUF ? w->len - got : DRAIN_BUF;
        ssize_t n = recv(w->fd, buf, want, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            writer_fail(w, "peer read %zu of %zu bytes (%s)", got, w->len,
                        n == 0 ? "end of stream" : errno_text(e, eb, sizeof eb));
            break;
        }
        if (memcmp(buf, w->data + got, (size_t)n) != 0) {
            writer_fail(w, "wrong bytes %zu bytes into the read", got);
            break;
        }
        got += (size_t)n;
    }
    free(buf);
}

/* drain_peer_later ms plus: from a thread, after ms, the peer reads everything sent so far plus
 * `plus` more bytes, checking the pattern; `completions` joins it. */
static int op_drain_peer_later(struct run *r, const cJSON *step)
{
    uint64_t ms, plus;
    struct state *st = r->st;
    if (need_u64(r, step, "ms", &ms) < 0 || need_u64(r, step, "plus", &plus) < 0 ||
        need_peer(r) < 0)
        return -1;
    if (st->reader)
        return fail(r, "drain_peer_later while its reader still runs");
    uint64_t to = st->stream_pos + plus;
    struct writer *w = new_writer(read_later, "drain_peer_later",
                                  pattern(st->received, (size_t)(to - st->received)),
                                  (size_t)(to - st->received));
    w->ms = ms;
    if (start_writer(r, w) < 0)
        return -1;
    st->reader = true;
    st->reader_to = to;
    return 0;
}

/* reset_peer: closes the peer with SO_LINGER 0 so that our socket gets a RST (common::reset),
 * then gives the RST 50 ms to arrive. */
static int op_reset_peer(struct run *r, const cJSON *step)
{
    (void)step;
    return reset_peer(r, RESET_SETTLE_MS);
}

/* ---- the error queue ------------------------------------------------------------------- */

/* timestamping: SO_TIMESTAMPING software transmit reports on the sending socket; every later
 * send puts one on the error queue, which only the error-queue backend reads. */
static int op_timestamping(struct run *r, const cJSON *step)
{
    (void)step;
    if (timestamping_on(r, r->fd) < 0)
        return -1;
    r->st->timestamping = true;
    return 0;
}

/* One round of request_response; its failures say which round. */
static int request_round(struct run *r, const cJSON *step, size_t len, size_t reply, uint64_t ud)
{
    ssize_t n = do_send(r, VIA_SEND, &len, 1, ud, 0);
    if (r->why[0])
        return -1;
    if (n < 0)
        return lc_fail(r, "request", n);
    if ((size_t)n != len)
        return fail(r, "request: %zd of %zu bytes", n, len);
    /* The receive below starts with the request's notification (or report) pending. */
    if ((lowcopy_zc_backend(r->st->zc) == LOWCOPY_ZC_ERRQUEUE || r->st->timestamping) &&
        wait_pollerr(r, r->fd) < 0)
        return -1;
    if (op_drain_peer(r, step) < 0)
        return -1;
    unsigned char *answer = xmalloc(reply ? reply : 1);
    memset(answer, 'r', reply);
    struct writer *w = new_writer(write_later, "request_response", answer, reply);
    w->ms = ANSWER_DELAY_MS;
    /* The clock starts before the answer's writer does: on a loaded machine this thread can
     * lose the CPU for longer than the answer's delay between the two. */
    uint64_t t0 = now_ns();
    if (start_writer(r, w) < 0)
        return -1;
    unsigned char *buf = room(reply);
    uint64_t cpu0 = thread_cpu_ns();
    ssize_t got = lowcopy_recv_atleast(r->fd, buf, reply, reply, REPLY_TIMEOUT_MS);
    uint64_t took = now_ns() - t0, cpu = thread_cpu_ns() - cpu0;
    join_writers(r, true); /* the answer's writer, the run's only thread here */
    int rc = 0;
    if (r->why[0])
        rc = -1;
    else if (got < 0)
        rc = lc_fail(r, "reply", got);
    else if ((size_t)got != reply)
        rc = fail(r, "reply: %zd bytes, want %zu", got, reply);
    else if (reply && (buf[0] != 'r' || memcmp(buf, buf + 1, reply - 1) != 0))
        rc = fail(r, "reply bytes are not the answer's");
    else if (took < (uint64_t)ANSWER_MIN_MS * 1000000u)
        rc = fail(r, "answered after %.1f ms, want >= %d ms", took / 1e6, ANSWER_MIN_MS);
    else
        rc = cpu_bound(r, step, cpu);
    free(buf);
    return rc;
}

/* request_response rounds len reply_len base [cpu_max_ms]: per round, a blocking send of len
 * bytes (user_data base + i); with the error-queue backend, or timestamping on, until poll
 * reports POLLERR; the peer reads the request and answers reply_len bytes 50 ms later, and
 * lowcopy_recv_atleast(reply_len) on the sending socket must return them after sleeping,
 * using at most cpu_max_ms of CPU. */
static int op_request_response(struct run *r, const cJSON *step)
{
    uint64_t rounds, base;
    size_t len, reply;
    if (need_u64(r, step, "rounds", &rounds) < 0 || need_size(r, step, "len", &len) < 0 ||
        need_size(r, step, "reply_len", &reply) < 0 || need_u64(r, step, "base", &base) < 0 ||
        need_zc(r) < 0 || need_peer(r) < 0)
        return -1;
    if (r->st->reader)
        return fail(r, "request_response while drain_peer_later's reader runs");
    for (uint64_t i = 0; i < rounds; i++) {
        if (request_round(r, step, len, reply, base + i) < 0) {
            char why[WHY_MAX];
            snprintf(why, sizeof why, "round %" PRIu64 ": %.990s", i, r->why);
            snprintf(r->why, sizeof r->why, "%s", why);
            return -1;
        }
    }
    return 0;
}

/* ---- the sender ------------------------------------------------------------------------ */

static int op_new(struct run *r, const cJSON *step)
{
    uint32_t backend = r->st->backend;
    const cJSON *b = get(step, "backend");
    if (cJSON_IsString(b) && backend_of(b->valuestring, &backend) < 0)
        return fail(r, "unknown backend %s", b->valuestring);
    uint32_t flags = cJSON_IsTrue(get(step, "adaptive")) ? LOWCOPY_ZC_ADAPTIVE : 0;
    lowcopy_zc *z = NULL;
    const cJSON *reserve = get(step, "reserve"), *max = get(step, "max_pending");
    int rc;
    if (reserve || max) {
        lowcopy_zc_options o;
        if ((rc = lowcopy_zc_options_default(&o, sizeof o)) < 0)
            return lc_fail(r, "options_default", rc);
        o.backend = backend;
        o.flags = flags;
        if ((reserve && !json_u64(reserve, &o.reserve)) || (max && !json_u64(max, &o.max_pending)))
            return fail(r, "`reserve` or `max_pending` is not a non-negative integer");
        rc = lowcopy_zc_new_opts(r->fd, &o, sizeof o, &z);
    } else {
        rc = lowcopy_zc_new(r->fd, backend, flags, &z);
    }
    if (get(step, "expect_err")) {
        /* A sender made despite the expected error must not outlive the step. */
        if (rc == 0)
            lowcopy_zc_free(z);
        return check(r, step, rc < 0 ? rc : 0);
    }
    if (rc < 0)
        return lc_fail(r, "new", rc);
    if (!z)
        return fail(r, "new returned 0 but wrote no sender");
    lowcopy_zc_free(r->st->zc); /* a second `new` replaces the sender, as in Rust */
    r->st->zc = z;
    const cJSON *want = get(step, "expect_backend");
    if (want) {
        const char *got = backend_name(lowcopy_zc_backend(z));
        if (!json_is(want, got))
            return fail(r, "backend %s, want %s", got,
                        cJSON_IsString(want) ? want->valuestring : "(not a string)");
    }
    return 0;
}

static int op_expect_inflight(struct run *r, const cJSON *step)
{
    if (need_zc(r) < 0)
        return -1;
    uint64_t n = lowcopy_zc_inflight(r->st->zc), v;
    const cJSON *w;
    if ((w = get(step, "value"))) {
        if (!json_u64(w, &v))
            return fail(r, "`value` is not a non-negative integer");
        if (n != v)
            return fail(r, "inflight %" PRIu64 ", want %" PRIu64, n, v);
    }
    if ((w = get(step, "min"))) {
        if (!json_u64(w, &v))
            return fail(r, "`min` is not a non-negative integer");
        if (n < v)
            return fail(r, "inflight %" PRIu64 ", want >= %" PRIu64, n, v);
    }
    return 0;
}

static int op_expect_stat(struct run *r, const cJSON *step)
{
    lowcopy_zc_send_stats s;
    const cJSON *f = get(step, "field"), *w;
    uint64_t got, v;
    if (need_zc(r) < 0)
        return -1;
    if (!cJSON_IsString(f))
        return fail(r, "`field` missing or not a string");
    int rc = lowcopy_zc_stats(r->st->zc, &s, sizeof(lowcopy_zc_send_stats));
    if (rc < 0)
        return lc_fail(r, "stats", rc);
    const char *name = f->valuestring;
    if (strcmp(name, "completions") == 0)
        got = s.completions;
    else if (strcmp(name, "syscalls_reap") == 0)
        got = s.syscalls_reap;
    else if (strcmp(name, "zerocopy_off") == 0)
        got = s.zerocopy_off;
    else if (strcmp(name, "copy_sends") == 0)
        got = s.copy_sends;
    else if (strcmp(name, "zerocopy_sends") == 0)
        got = s.zerocopy_sends;
    else
        return fail(r, "unknown stat %s", name);
    if ((w = get(step, "value"))) {
        if (!json_u64(w, &v))
            return fail(r, "`value` is not a non-negative integer");
        if (got != v)
            return fail(r, "stat %s %" PRIu64 ", want %" PRIu64, name, got, v);
    }
    if ((w = get(step, "min"))) {
        if (!json_u64(w, &v))
            return fail(r, "`min` is not a non-negative integer");
        if (got < v)
            return fail(r, "stat %s %" PRIu64 ", want >= %" PRIu64, name, got, v);
    }
    if ((w = get(step, "max"))) {
        if (!json_u64(w, &v))
            return fail(r, "`max` is not a non-negative integer");
        if (got > v)
            return fail(r, "stat %s %" PRIu64 ", want <= %" PRIu64, name, got, v);
    }
    return 0;
}

/* ---- crowd: many senders on one thread ------------------------------------------------ */

/* A connection of the run's transport made for the crowd: *tx sends, *rx is its peer (both
 * the caller's to close). tcp4/tcp6: a listener on loopback, connect, accept; udp4/udp6: two
 * sockets connected to each other. */
static int crowd_pair(struct run *r, int *tx, int *rx)
{
    const char *t = r->transport;
    bool udp = strncmp(t, "udp", 3) == 0;
    int family = strcmp(t, "tcp6") == 0 || strcmp(t, "udp6") == 0 ? AF_INET6 : AF_INET;
    struct sockaddr_storage a, b;
    socklen_t la = loopback(family, &a), lb = loopback(family, &b);
    *tx = *rx = -1;
    if (strcmp(t, "tcp4") && strcmp(t, "tcp6") && strcmp(t, "udp4") && strcmp(t, "udp6"))
        return fail(r, "crowd on transport %s", t);
    int type = (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC;
    int l = socket(family, type, 0);
    *tx = socket(family, type, 0);
    if (l < 0 || *tx < 0 || bind(l, (struct sockaddr *)&a, la) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &la) < 0)
        goto err;
    if (udp) {
        if (bind(*tx, (struct sockaddr *)&b, lb) < 0 ||
            getsockname(*tx, (struct sockaddr *)&b, &lb) < 0 ||
            connect(*tx, (struct sockaddr *)&a, la) < 0 ||
            connect(l, (struct sockaddr *)&b, lb) < 0)
            goto err;
        *rx = l;
        return 0;
    }
    if (listen(l, 1) < 0 || connect(*tx, (struct sockaddr *)&a, la) < 0 ||
        (*rx = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0)
        goto err;
    close(l);
    return 0;
err:
    sys_fail(r, "crowd socket");
    if (l >= 0 && l != *rx)
        close(l);
    if (*tx >= 0)
        close(*tx);
    *tx = -1;
    return -1;
}

/* Crowd sender i: exactly one completion (`ud`, `len` bytes), and on io_uring the thread's
 * ring as its pollfd (`ring`, -1: not known). */
static int crowd_check(struct run *r, lowcopy_zc *z, int tx, uint64_t i, uint64_t ud, size_t len,
                       int ring)
{
    lowcopy_zc_completion out[4];
    size_t ngot = 0;
    uint64_t deadline = now_ns() + (uint64_t)CROWD_WAIT_MS * 1000000u;
    if (lowcopy_zc_backend(z) == LOWCOPY_ZC_IO_URING) {
        int fd = lowcopy_zc_pollfd(z);
        if (fd < 0 || fd == tx)
            return fail(r, "crowd %" PRIu64 ": pollfd %d is not a ring", i, fd);
        if (ring >= 0 && fd != ring)
            return fail(r, "crowd %" PRIu64 ": ring %d, the thread's is %d", i, fd, ring);
    }
    while (lowcopy_zc_inflight(z) > 0 || ngot == 0) {
        if (now_ns() >= deadline)
            return fail(r, "crowd %" PRIu64 ": never completed", i);
        int w = lowcopy_zc_wait(z, 50);
        if (w < 0 && w != -ETIMEDOUT)
            return lc_fail(r, "crowd wait", w);
        ssize_t k = lowcopy_zc_reap(z, out, 4, sizeof(lowcopy_zc_completion));
        if (k < 0)
            return lc_fail(r, "crowd reap", k);
        for (ssize_t j = 0; j < k; j++, ngot++)
            if (out[j].user_data != ud || out[j].result != (int64_t)len)
                return fail(r, "crowd %" PRIu64 ": completion (%" PRIu64 ", %" PRId64 ")", i,
                            out[j].user_data, out[j].result);
    }
    if (lowcopy_zc_reap(z, out, 4, sizeof(lowcopy_zc_completion)) != 0 || ngot != 1)
        return fail(r, "crowd %" PRIu64 ": %zu completions or more, want 1", i, ngot + 1);
    return 0;
}

/* Crowd sender i's second send (after the settling time; it makes the ring post whatever the
 * kernel still held): accepted whole. */
static int crowd_again(struct run *r, lowcopy_zc *z, uint64_t i, const void *buf, size_t len)
{
    ssize_t s = lowcopy_zc_send(z, buf, len, 0, CROWD_BASE + CROWD_AGAIN + i);
    if (s != (ssize_t)len)
        return s < 0 ? lc_fail(r, "crowd send", s) : fail(r, "crowd send %zd of %zu", s, len);
    return 0;
}

/* No notification that was not this sender's (an earlier sender's on a reused route would
 * complete a request early or count as unexpected). */
static int crowd_quiet(struct run *r, lowcopy_zc *z, uint64_t i)
{
    lowcopy_zc_send_stats st;
    int rc = lowcopy_zc_stats(z, &st, sizeof st);
    if (rc < 0)
        return lc_fail(r, "crowd stats", rc);
    if (st.unexpected_ids)
        return fail(r, "crowd %" PRIu64 ": %" PRIu64 " unexpected notifications", i,
                    st.unexpected_ids);
    return 0;
}

/* crowd count len: see zc.json's `about`. */
static int op_crowd(struct run *r, const cJSON *step)
{
    uint64_t count;
    size_t len;
    if (need_u64(r, step, "count", &count) < 0 || need_size(r, step, "len", &len) < 0)
        return -1;
    if (count > CROWD_MAX)
        return fail(r, "crowd of %" PRIu64 ", at most %d", count, CROWD_MAX);
    lowcopy_zc *z[CROWD_MAX] = {0};
    int tx[CROWD_MAX], rx[CROWD_MAX], rc = 0;
    unsigned char *buf = malloc(len ? len : 1);
    uint64_t n = 0;
    if (!buf)
        return fail(r, "out of memory");
    for (size_t p = 0; p < len; p++)
        buf[p] = pattern_byte(p);
    for (; n < count && rc == 0; n++) {
        if (crowd_pair(r, &tx[n], &rx[n]) < 0) {
            rc = -1;
            break;
        }
        int e = lowcopy_zc_new(tx[n], r->st->backend, 0, &z[n]);
        if (e < 0) {
            rc = lc_fail(r, "crowd new", e);
            n++;
            break;
        }
        ssize_t s = lowcopy_zc_send(z[n], buf, len, 0, CROWD_BASE + n);
        if (s != (ssize_t)len)
            rc = s < 0 ? lc_fail(r, "crowd send", s) : fail(r, "crowd send %zd of %zu", s, len);
    }
    if (rc == 0 && cJSON_IsTrue(get(step, "drain_peer")))
        rc = op_drain_peer(r, step);
    int ring = -1;
    if (rc == 0 && r->st->zc) {
        rc = do_reap(r);
        if (lowcopy_zc_backend(r->st->zc) == LOWCOPY_ZC_IO_URING)
            ring = lowcopy_zc_pollfd(r->st->zc);
    }
    for (uint64_t i = 0; i < n && rc == 0; i++)
        rc = crowd_check(r, z[i], tx[i], i, CROWD_BASE + i, len, ring);
    if (rc == 0)
        sleep_ms(CROWD_SETTLE_MS);
    for (uint64_t i = 0; i < n && rc == 0; i++)
        rc = crowd_again(r, z[i], i, buf, len);
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        rc = crowd_check(r, z[i], tx[i], i, CROWD_BASE + CROWD_AGAIN + i, len, ring);
        if (rc == 0)
            rc = crowd_quiet(r, z[i], i);
    }
    for (uint64_t i = 0; i < n; i++) {
        lowcopy_zc_free(z[i]);
        if (tx[i] >= 0)
            close(tx[i]);
        if (rx[i] >= 0)
            close(rx[i]);
    }
    free(buf);
    return rc;
}

/* free [expect_ret]: lowcopy_zc_free; its return (sends still in flight) checked. */
static int op_free(struct run *r, const cJSON *step)
{
    if (need_zc(r) < 0)
        return -1;
    /* The close policy; lowcopy_zc_free would do the same without the counters. */
    lowcopy_zc_send_stats st;
    int left = lowcopy_zc_close(r->st->zc, &st, sizeof st);
    r->st->zc = NULL;
    if (left < 0)
        return lc_fail(r, "free", left);
    const cJSON *w = get(step, "expect_ret");
    if (w) {
        uint64_t v;
        if (!json_u64(w, &v))
            return fail(r, "expect_ret is not a non-negative integer");
        if ((uint64_t)left != v)
            return fail(r, "abandoned %d, want %" PRIu64, left, v);
    }
    if ((w = get(step, "expect_resets"))) {
        uint64_t v;
        if (!json_u64(w, &v))
            return fail(r, "expect_resets is not a non-negative integer");
        if (st.close_resets != v)
            return fail(r, "close_resets %" PRIu64 ", want %" PRIu64, st.close_resets, v);
    }
    return 0;
}

static const struct op OPS[] = {
    {"new", op_new},
    {"send", op_send},
    {"sendv", op_sendv},
    {"sendto", op_sendto},
    {"send_many", op_send_many},
    {"send_batch", op_send_batch},
    {"retry_full", op_retry_full},
    {"send_reap_loop", op_send_reap_loop},
    {"fill_window", op_fill_window},
    {"reap", op_reap},
    {"wait", op_wait},
    {"collect_all", op_collect_all},
    {"drain_peer", op_drain_peer},
    {"peer_sees_reset", op_peer_sees_reset},
    {"drain_peer_later", op_drain_peer_later},
    {"timestamping", op_timestamping},
    {"request_response", op_request_response},
    {"reset_peer", op_reset_peer},
    {"expect_inflight", op_expect_inflight},
    {"completions", op_completions},
    {"completions_flagged", op_completions_flagged},
    {"expect_stat", op_expect_stat},
    {"free", op_free},
    {"crowd", op_crowd},
};

/* ---- the run --------------------------------------------------------------------------- */

/* udp4, udp6 (connected) and udp4_unconnected (sendto names the peer): the peer receives. */
static int udp_fixture(struct run *r, const char *t)
{
    struct state *st = r->st;
    bool connected = strcmp(t, "udp4_unconnected") != 0;
    if (connected && strcmp(t, "udp4") != 0 && strcmp(t, "udp6") != 0)
        return fail(r, "unknown transport %s", t);
    st->datagram = true;
    st->has_dest = !connected;
    return udp_pair(r, strcmp(t, "udp6") == 0 ? AF_INET6 : AF_INET, connected, &st->dest,
                    &st->destlen);
}

/* The fds of the run, and the scenario's receive buffer on the peer. */
static int setup(struct run *r, const cJSON *sc)
{
    if (backend_of(r->variant, &r->st->backend) < 0)
        return fail(r, "unknown backend %s", r->variant);
    int rc = common_fixture(r, r->transport, NULL, NULL);
    if (rc == FIXTURE_UNKNOWN && strncmp(r->transport, "listen_tcp", 10) == 0) {
        /* A listening socket (no peer): a sender refuses it. */
        int l = tcp_listener(r, strcmp(r->transport, "listen_tcp6") == 0 ? AF_INET6 : AF_INET,
                             0, NULL, NULL);
        if (l < 0)
            return -1;
        r->fd = l;
        return 0;
    }
    if (rc == FIXTURE_UNKNOWN)
        rc = udp_fixture(r, r->transport);
    if (rc < 0 || r->peer < 0) /* failed, or "closed" / "file": nothing to tune */
        return rc;
    /* zc.json's "needs": "memlock": pinned pages beyond RLIMIT_MEMLOCK without CAP_IPC_LOCK. */
    struct rlimit ml;
    if (json_is(get(sc, "needs"), "memlock") && geteuid() != 0 &&
        (getrlimit(RLIMIT_MEMLOCK, &ml) != 0 || ml.rlim_cur != RLIM_INFINITY))
        return skip_run(r, "zerocopy pages in flight count against RLIMIT_MEMLOCK without "
                           "CAP_IPC_LOCK; this scenario fills a socket with them");
    /* zc.json's kernel_rules: a scenario that needs zerocopy does not apply to an auto run
     * where AUTO can only pick copies. */
    if (json_is(get(sc, "needs"), "zerocopy") && strcmp(r->variant, "auto") == 0 &&
        (strncmp(r->transport, "tcp", 3) == 0 || strncmp(r->transport, "udp", 3) == 0)) {
        const struct lowcopy_caps *caps = probed_caps();
        bool zc = strncmp(r->transport, "udp", 3) == 0 ? caps->zerocopy_udp : caps->zerocopy_tcp;
        if (!caps->uring_send_zc && !zc)
            return skip_run(r, "not applicable: AUTO has no zerocopy backend here (probe: no "
                               "SEND_ZC, no SO_ZEROCOPY)");
    }
    int64_t sz;
    if (json_i64(get(sc, "socket_rcvbuf"), &sz))
        return set_buf(r, r->peer, true, (int)sz);
    return 0;
}

/* The steps with the first `new` told which backend "auto" must pick there. */
static cJSON *auto_picks(const cJSON *steps, const cJSON *backend)
{
    cJSON *s = must(cJSON_Duplicate(steps, true)), *step;
    cJSON_ArrayForEach(step, s)
    {
        if (!json_is(get(step, "op"), "new"))
            continue;
        cJSON *want = must(cJSON_Duplicate(backend, true));
        if (get(step, "expect_backend")) {
            if (!cJSON_ReplaceItemInObjectCaseSensitive(step, "expect_backend", want))
                must(NULL);
        } else if (!cJSON_AddItemToObject(step, "expect_backend", want)) {
            must(NULL);
        }
        break;
    }
    return s;
}

/* zc.json's kernel_rules, as core/tests/zc_scenarios.rs applies them: what this kernel offers
 * (lowcopy_probe) decides whether an explicit backend is refused at `new` and what AUTO picks. */
static cJSON *kernel_rules(const cJSON *steps, const struct run *r)
{
    if (strncmp(r->transport, "tcp", 3) != 0 && strncmp(r->transport, "udp", 3) != 0)
        return NULL; /* closed, file: no socket to send zerocopy on */
    const struct lowcopy_caps *caps = probed_caps();
    bool so_zerocopy = strncmp(r->transport, "udp", 3) == 0 ? caps->zerocopy_udp
                                                             : caps->zerocopy_tcp;
    if (strcmp(r->variant, "io_uring") == 0 && !caps->uring_send_zc) {
        cJSON *errs = must(cJSON_CreateArray());
        cJSON_AddItemToArray(errs, must(cJSON_CreateString("EPERM")));
        cJSON_AddItemToArray(errs, must(cJSON_CreateString("EOPNOTSUPP")));
        /* io_uring_setup under RLIMIT_MEMLOCK pressure (a normal user's pinned pages). */
        cJSON_AddItemToArray(errs, must(cJSON_CreateString("ENOMEM")));
        cJSON *s = refuse_first_new(steps, errs);
        cJSON_Delete(errs);
        return s;
    }
    if (strcmp(r->variant, "errqueue") == 0 && !so_zerocopy) {
        cJSON *errs = must(cJSON_CreateArray());
        cJSON_AddItemToArray(errs, must(cJSON_CreateString("ENOPROTOOPT")));
        cJSON_AddItemToArray(errs, must(cJSON_CreateString("EOPNOTSUPP")));
        cJSON *s = refuse_first_new(steps, errs);
        cJSON_Delete(errs);
        return s;
    }
    if (strcmp(r->variant, "auto") == 0) {
        const char *picks = caps->uring_send_zc ? "io_uring" : so_zerocopy ? "errqueue" : "copy";
        cJSON *want = must(cJSON_CreateString(picks));
        cJSON *s = auto_picks(steps, want);
        cJSON_Delete(want);
        return s;
    }
    return NULL;
}

/* The no_zerocopy rule, on its transports from the first `new`: errqueue and io_uring must be
 * refused with the rule's errno and the run ends there; auto must pick the rule's backend;
 * copy runs as written. */
static cJSON *steps_for(const cJSON *root, const cJSON *steps, const struct run *r)
{
    const cJSON *rule = get(root, "no_zerocopy");
    if (!array_has_string(get(rule, "transports"), r->transport))
        return kernel_rules(steps, r);
    if (strcmp(r->variant, "errqueue") == 0 || strcmp(r->variant, "io_uring") == 0)
        return refuse_first_new(steps, get(rule, "errno"));
    if (strcmp(r->variant, "auto") == 0)
        return auto_picks(steps, get(rule, "auto_backend"));
    return NULL;
}

static bool table_ok(const cJSON *root)
{
    const cJSON *rule = get(root, "no_zerocopy");
    return cJSON_IsArray(get(rule, "transports")) && get(rule, "errno") &&
           get(rule, "auto_backend");
}

/* Ends the run as the Rust runner does: the sender goes first, then the sockets, then the
 * buffers (kept alive and unmodified until here). */
static void teardown(struct run *r, bool failed)
{
    struct state *st = r->st;
    lowcopy_zc_free(st->zc);
    st->zc = NULL;
    /* The thread's io_uring ring (kept for the thread's senders) is closed here, so that the
     * fd check after the run proves no sender was left joined to it: -EBUSY otherwise. */
    int rc = lowcopy_zc_ring_close();
    if (rc < 0 && !failed) {
        char eb[64];
        fail(r, "lowcopy_zc_ring_close: %s (a sender still joined to the ring)",
             errno_text(-rc, eb, sizeof eb));
    }
    end_fds(r, failed); /* after a failure, a reader blocked on the peer is woken first */
    for (size_t i = 0; i < st->nbufs; i++)
        free(st->bufs[i]);
    free(st->bufs);
    free(st->sends);
    free(st->got);
}

static const struct runner ZC = {
    .prog = "c-zc-scenarios",
    .table = "zc.json",
    .default_path = "tests/scenarios/zc.json",
    .axis = "backends",
    .axis_one = "backend",
    .table_wants = "`scenarios` and `no_zerocopy` {transports, errno, auto_backend}",
    .table_ok = table_ok,
    .timeout_s = RUN_TIMEOUT_S,
    .errnos = ERRNOS_COMMON,
    .check_fds = true,
    .state_size = sizeof(struct state),
    .setup = setup,
    .steps_for = steps_for,
    .teardown = teardown,
    .ops = OPS,
    .nops = sizeof OPS / sizeof OPS[0],
};

int main(int argc, char **argv) { return run_table(&ZC, argc, argv); }
