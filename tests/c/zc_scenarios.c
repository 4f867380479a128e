/* zc_scenarios.c - runs the behaviour table tests/scenarios/zc.json (zerocopy sends) against
 * the C ABI (lowcopy_zc_*).
 *
 * The Rust runner (core/tests/zc_scenarios.rs, fixtures in core/tests/common/mod.rs) runs the
 * very same table against the Rust core. Every op here must mean exactly what it means there,
 * so that a table that passes both proves the C ABI behaves like the core. The ops map onto
 * the C functions: send -> lowcopy_zc_send, sendv -> lowcopy_zc_sendv, sendto ->
 * lowcopy_zc_sendmsg (with msg_name), send_reap_loop -> lowcopy_zc_send_reap, and reap, wait,
 * inflight, stats, free as named.
 *
 * Each scenario x transport x backend runs in a forked child: a failing step, a crash or a
 * hang (alarm) ends that run only, and the next run starts from a clean process. The child
 * hands its first failure to the parent through shared memory; the parent prints it, with how
 * the child ended if it crashed or hung after that. After teardown the child also checks that
 * every fd it (or lowcopy, e.g. an io_uring ring) opened during the run is closed again.
 * Output: one "FAIL [...]" line per failed run, then "c-zc-scenarios: N passed, M failed";
 * exit status 0 only when every run passed and there were more than 50 of them.
 *
 * Build (from the repository root, after `make lib`):
 *   PKG_CONFIG_PATH=build/lib/pkgconfig gcc -Wall -Wextra -Werror -O1 -g \
 *     -fsanitize=address,undefined $(pkg-config --cflags lowcopy libcjson) \
 *     tests/c/zc_scenarios.c -o build/bin/c_zc_scenarios \
 *     $(pkg-config --libs lowcopy libcjson) -lpthread -Wl,-rpath,$PWD/build/lib
 * Usage: c_zc_scenarios [PATH/TO/zc.json]   (default: tests/scenarios/zc.json)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <lowcopy.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

enum {
    RUN_TIMEOUT_S = 30,       /* a run still going after this is a hang: SIGALRM ends it */
    PEER_RCVTIMEO_S = 3,      /* drain_peer: a peer that gets too little fails, not hangs */
    DRAIN_BUF = 1 << 20,      /* drain_peer reads up to this much at a time */
    REAP_BATCH = 256,         /* reap: completions per lowcopy_zc_reap call */
    SEND_REAP_CAP = 64,       /* send_reap_loop: completions room per call */
    FILL_MAX = 10000,         /* fill_window: sends before "the window never filled" */
    SEND_MANY_BASE = 1000000, /* send_many: user_data of send i is this + i */
    MIN_RUNS = 51,            /* as the Rust runner's `runs > 50`: the table still expands */
    CLOSED_FD = 1000000,      /* "closed": a number no fd has, the kernel answers EBADF */
    FD_SCAN_MAX = 4096,       /* fds checked for leaks */
    STEP_SETUP = -1,
    STEP_TEARDOWN = -2,
};

/* ---- small utilities ------------------------------------------------------------------ */

/* Allocation failure in a test runner is not a behaviour to report: stop loudly. */
static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "c-zc-scenarios: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

static void *xmalloc(size_t n) { return xrealloc(NULL, n); }

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

static uint64_t now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        perror("clock_gettime");
        abort();
    }
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleeps the whole time even when a signal interrupts it. */
static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    int rc;
    while ((rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts)) == EINTR) {
    }
    if (rc != 0) {
        fprintf(stderr, "clock_nanosleep: %s\n", strerror(rc));
        abort();
    }
}

/* Byte at stream position p of the test pattern (as common::pattern_byte). */
static unsigned char pattern_byte(uint64_t p) { return (unsigned char)((p * 131 + 7) % 251); }

/* `len` pattern bytes from stream position `from`; never NULL (len 0 gets 1 byte of room), so
 * that a zero-length send tests lowcopy's length handling, not its NULL check. */
static unsigned char *pattern(uint64_t from, size_t len)
{
    unsigned char *d = xmalloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        d[i] = pattern_byte(from + i);
    return d;
}

/* The errno names the table may use: exactly common::errno_name's list, so that a name the
 * Rust runner cannot match fails here too. */
static const struct {
    const char *name;
    int value;
} ERRNOS[] = {
    {"EAGAIN", EAGAIN},         {"EBADF", EBADF},           {"EINVAL", EINVAL},
    {"ENOTSOCK", ENOTSOCK},     {"EOPNOTSUPP", EOPNOTSUPP}, {"EOVERFLOW", EOVERFLOW},
    {"EMSGSIZE", EMSGSIZE},     {"ECONNRESET", ECONNRESET}, {"EPIPE", EPIPE},
    {"ETIMEDOUT", ETIMEDOUT},   {"EBUSY", EBUSY},           {"ENOBUFS", ENOBUFS},
    {"ECONNREFUSED", ECONNREFUSED},
};

static const char *errno_name(int code)
{
    for (size_t i = 0; i < sizeof ERRNOS / sizeof ERRNOS[0]; i++)
        if (ERRNOS[i].value == code)
            return ERRNOS[i].name;
    return NULL;
}

/* "EAGAIN", or "errno 5 (Input/output error)" for codes outside the list. */
static const char *errno_text(int code, char *buf, size_t cap)
{
    const char *n = errno_name(code);
    if (n)
        snprintf(buf, cap, "%s", n);
    else
        snprintf(buf, cap, "errno %d (%s)", code, strerror(code));
    return buf;
}

/* ---- JSON access, with serde_json's meanings --------------------------------------------- */

static const cJSON *get(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* Value::as_u64: a non-negative integral number, else false. cJSON keeps numbers as doubles,
 * exact up to 2^53: the table's numbers are far below. */
static bool json_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < 18446744073709551616.0))
        return false;
    uint64_t u = (uint64_t)d;
    if ((double)u != d)
        return false;
    *out = u;
    return true;
}

/* Value::as_i64. */
static bool json_i64(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return false;
    int64_t i = (int64_t)d;
    if ((double)i != d)
        return false;
    *out = i;
    return true;
}

static bool json_is(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

static bool array_has_string(const cJSON *arr, const char *s)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (json_is(v, s))
            return true;
    }
    return false;
}

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

/* ---- one run's state ------------------------------------------------------------------- */

/* Bytes a send accepted, by user_data (only sends that returned > 0). */
struct sent {
    uint64_t user_data;
    size_t n;
};

struct run {
    const char *name, *transport, *backend_str; /* the run's context, for messages */
    int fd;               /* the fd under test (CLOSED_FD for "closed", never closed here) */
    int sock;             /* fd owned by the run: the sending socket, or the file; -1 if none */
    int peer;             /* the receiving end; -1 if none or after reset_peer */
    bool datagram;        /* UDP: a send is all or nothing */
    bool has_dest;        /* unconnected UDP: sendto names the peer's address */
    struct sockaddr_storage dest;
    socklen_t destlen;
    uint32_t backend;
    lowcopy_zc *zc;
    struct sent *sent;
    size_t nsent, capsent;
    lowcopy_zc_completion *got; /* every completion reaped during the run */
    size_t ngot, capgot;
    unsigned char **bufs; /* every buffer handed to a send: alive, unmodified, until the end */
    size_t nbufs, capbufs;
    uint64_t stream_pos;  /* bytes sent so far (datagrams: whole datagrams) */
    uint64_t received;    /* bytes the peer read and checked */
    char why[1024];       /* the first failure, empty while all is well */
};

/* Records the first failure of the run; returns -1 so callers can `return fail(...)`. */
__attribute__((format(printf, 2, 3))) static int fail(struct run *r, const char *fmt, ...)
{
    if (r->why[0])
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return -1;
}

/* A failed syscall: `what: ERRNO`. Reads errno first, before anything can change it. */
static int sys_fail(struct run *r, const char *what)
{
    int e = errno;
    char eb[64];
    return fail(r, "%s: %s", what, errno_text(e, eb, sizeof eb));
}

/* A failed lowcopy call (`ret` = -errno). */
static int lc_fail(struct run *r, const char *what, ssize_t ret)
{
    char eb[64];
    return fail(r, "%s: %s", what, errno_text((int)-ret, eb, sizeof eb));
}

static int need_u64(struct run *r, const cJSON *step, const char *key, uint64_t *out)
{
    if (!json_u64(get(step, key), out))
        return fail(r, "`%s` missing", key);
    return 0;
}

static int need_size(struct run *r, const cJSON *step, const char *key, size_t *out)
{
    uint64_t v;
    if (need_u64(r, step, key, &v) < 0)
        return -1;
    if (v > SIZE_MAX)
        return fail(r, "`%s` does not fit in size_t", key);
    *out = (size_t)v;
    return 0;
}

static int need_zc(struct run *r)
{
    return r->zc ? 0 : fail(r, "scenario uses the sender before `new` (or after `free`)");
}

static int need_peer(struct run *r)
{
    return r->peer >= 0 ? 0 : fail(r, "no peer");
}

/* The step's send flags: "flags" (raw, as i32) | MSG_DONTWAIT for "dontwait": true. */
static int step_flags(const cJSON *step)
{
    int64_t f = 0;
    if (!json_i64(get(step, "flags"), &f))
        f = 0;
    return (int)f | (cJSON_IsTrue(get(step, "dontwait")) ? MSG_DONTWAIT : 0);
}

/* Closes an fd the run owns and forgets it; a failed close is a failure of the run. */
static void close_owned(struct run *r, int *fd)
{
    if (*fd < 0)
        return;
    if (close(*fd) < 0)
        sys_fail(r, "close");
    *fd = -1;
}

static int set_int(struct run *r, int fd, int level, int name, int v, const char *what)
{
    if (setsockopt(fd, level, name, &v, sizeof v) < 0)
        return sys_fail(r, what);
    return 0;
}

/* ---- what the run remembers ------------------------------------------------------------ */

static struct sent *sent_find(struct run *r, uint64_t ud)
{
    for (size_t i = 0; i < r->nsent; i++)
        if (r->sent[i].user_data == ud)
            return &r->sent[i];
    return NULL;
}

/* HashMap::insert: replaces an earlier entry; with `must_be_new`, an earlier entry is a
 * failure (the Rust runner's "user_data used twice" assertion). */
static int sent_put(struct run *r, uint64_t ud, size_t n, bool must_be_new)
{
    struct sent *s = sent_find(r, ud);
    if (s) {
        s->n = n;
        if (must_be_new)
            return fail(r, "user_data %" PRIu64 " used twice by the scenario", ud);
        return 0;
    }
    r->sent = grow(r->sent, &r->capsent, r->nsent + 1, sizeof *r->sent);
    r->sent[r->nsent++] = (struct sent){.user_data = ud, .n = n};
    return 0;
}

static void got_add(struct run *r, const lowcopy_zc_completion *c, size_t n)
{
    if (n == 0)
        return;
    r->got = grow(r->got, &r->capgot, r->ngot + n, sizeof *r->got);
    memcpy(r->got + r->ngot, c, n * sizeof *c);
    r->ngot += n;
}

/* Keeps a send buffer until the run ends (the Rust runner's `bufs`). */
static unsigned char *keep_buf(struct run *r, unsigned char *b)
{
    r->bufs = grow(r->bufs, &r->capbufs, r->nbufs + 1, sizeof *r->bufs);
    r->bufs[r->nbufs++] = b;
    return b;
}

/* ---- fixtures: the fd under test ------------------------------------------------------- */

static socklen_t loopback(int family, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        return sizeof *a;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sizeof *a;
}

/* A connected pair over loopback (tcp4, tcp6, mptcp4), as common::pair: r->sock is the
 * accepted side (it sends), r->peer the client (it receives; TCP_NODELAY on TCP). Fds go into
 * the run as soon as they exist, so teardown closes them on every path. */
static int inet_pair(struct run *r, int family, int proto, bool nodelay)
{
    struct sockaddr_storage ss;
    socklen_t len = loopback(family, &ss);
    int l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, proto);
    if (l < 0)
        return sys_fail(r, proto == IPPROTO_MPTCP ? "MPTCP socket" : "socket");
    int rc = 0;
    if (bind(l, (struct sockaddr *)&ss, len) < 0 || listen(l, 4) < 0 ||
        getsockname(l, (struct sockaddr *)&ss, &len) < 0)
        rc = sys_fail(r, "bind/listen/getsockname");
    else if ((r->peer = socket(family, SOCK_STREAM | SOCK_CLOEXEC, proto)) < 0)
        rc = sys_fail(r, "socket");
    else if (connect(r->peer, (struct sockaddr *)&ss, len) < 0)
        rc = sys_fail(r, "connect");
    else if ((r->sock = accept4(l, NULL, NULL, SOCK_CLOEXEC)) < 0)
        rc = sys_fail(r, "accept");
    close_owned(r, &l);
    if (rc == 0 && nodelay)
        rc = set_int(r, r->peer, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
    return r->why[0] ? -1 : rc;
}

static int unix_pair(struct run *r)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sys_fail(r, "socketpair");
    r->sock = sv[0];
    r->peer = sv[1];
    return 0;
}

/* Two UDP sockets on loopback: r->sock sends (connected to the peer unless `connect_it` is
 * false, then sendto names r->dest), r->peer receives. */
static int udp_pair(struct run *r, int family, bool connect_it)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if ((r->sock = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0 ||
        (r->peer = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        return sys_fail(r, "udp socket");
    len = loopback(family, &ss);
    if (bind(r->sock, (struct sockaddr *)&ss, len) < 0)
        return sys_fail(r, "udp bind");
    len = loopback(family, &r->dest);
    if (bind(r->peer, (struct sockaddr *)&r->dest, len) < 0 ||
        getsockname(r->peer, (struct sockaddr *)&r->dest, &len) < 0)
        return sys_fail(r, "udp bind/getsockname (peer)");
    r->destlen = len;
    r->datagram = true;
    if (connect_it) {
        if (connect(r->sock, (struct sockaddr *)&r->dest, r->destlen) < 0)
            return sys_fail(r, "udp connect");
    } else {
        r->has_dest = true;
    }
    return 0;
}

/* An fd that is not a socket: closed, file (common::odd_fd). */
static int odd_fd(struct run *r, const char *kind)
{
    if (strcmp(kind, "closed") == 0) {
        r->fd = CLOSED_FD;
        return 0;
    }
    if ((r->sock = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)) < 0)
        return sys_fail(r, "open /proc/self/stat");
    r->fd = r->sock;
    return 0;
}

/* The fds of the run, and the scenario's receive buffer on the peer. */
static int setup_fds(struct run *r, const cJSON *sc)
{
    const char *t = r->transport;
    int rc;
    if (strcmp(t, "closed") == 0 || strcmp(t, "file") == 0)
        return odd_fd(r, t);
    if (strcmp(t, "tcp4") == 0)
        rc = inet_pair(r, AF_INET, 0, true);
    else if (strcmp(t, "tcp6") == 0)
        rc = inet_pair(r, AF_INET6, 0, true);
    else if (strcmp(t, "mptcp4") == 0)
        rc = inet_pair(r, AF_INET, IPPROTO_MPTCP, false);
    else if (strcmp(t, "unix") == 0)
        rc = unix_pair(r);
    else if (strcmp(t, "udp4") == 0)
        rc = udp_pair(r, AF_INET, true);
    else if (strcmp(t, "udp6") == 0)
        rc = udp_pair(r, AF_INET6, true);
    else if (strcmp(t, "udp4_unconnected") == 0)
        rc = udp_pair(r, AF_INET, false);
    else
        rc = fail(r, "unknown transport %s", t);
    if (rc < 0)
        return -1;
    r->fd = r->sock;
    int64_t sz;
    if (json_i64(get(sc, "socket_rcvbuf"), &sz))
        return set_int(r, r->peer, SOL_SOCKET, SO_RCVBUFFORCE, (int)sz, "SO_RCVBUFFORCE");
    return 0;
}

/* ---- expectations ---------------------------------------------------------------------- */

/* Whether `code` is the errno `want` names (a string), or one of them (a list). */
static bool errno_matches(const cJSON *want, int code)
{
    const char *got = errno_name(code);
    if (!got)
        return false;
    if (cJSON_IsString(want))
        return strcmp(want->valuestring, got) == 0;
    if (cJSON_IsArray(want))
        return array_has_string(want, got);
    return false;
}

/* The expected error(s) as text: EBUSY, or [ECONNRESET|EPIPE]. */
static const char *want_text(const cJSON *want, char *buf, size_t cap)
{
    if (cJSON_IsString(want)) {
        snprintf(buf, cap, "%s", want->valuestring);
        return buf;
    }
    size_t o = 0;
    const cJSON *v;
    buf[0] = '\0';
    o += (size_t)snprintf(buf + o, cap - o, "[");
    cJSON_ArrayForEach(v, want)
    {
        if (o >= cap)
            break;
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", v == want->child ? "" : "|",
                              cJSON_IsString(v) ? v->valuestring : "?");
    }
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
    return buf;
}

/* Run::check: `ret` is a lowcopy return (>= 0, or -errno). With "expect_err" the call must
 * have failed with (one of) that errno; else it must have succeeded, with "expect_ret" if
 * given. */
static int check(struct run *r, const cJSON *step, ssize_t ret)
{
    char eb[64], wb[256];
    const cJSON *e = get(step, "expect_err");
    if (e) {
        if (ret >= 0)
            return fail(r, "want error %s, got %zd", want_text(e, wb, sizeof wb), ret);
        if (!errno_matches(e, (int)-ret))
            return fail(r, "want error %s, got %s", want_text(e, wb, sizeof wb),
                        errno_text((int)-ret, eb, sizeof eb));
        return 0;
    }
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
    unsigned char *buf = keep_buf(r, pattern(r->stream_pos, total));
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
        n = lowcopy_zc_send(r->zc, buf, total, flags, ud);
        break;
    case VIA_SENDV:
        n = lowcopy_zc_sendv(r->zc, iov, (int)k, flags, ud);
        break;
    default: {
        if (!r->has_dest) {
            free(iov);
            fail(r, "sendto needs unconnected UDP");
            return -EINVAL;
        }
        struct msghdr msg = {.msg_name = &r->dest, .msg_namelen = r->destlen,
                             .msg_iov = iov, .msg_iovlen = k};
        n = lowcopy_zc_sendmsg(r->zc, &msg, flags, ud);
        break;
    }
    }
    free(iov); /* lowcopy needs the iovecs only during the call; the bytes stay in bufs */
    if (n >= 0) {
        if (n > 0)
            sent_put(r, ud, (size_t)n, true);
        r->stream_pos += r->datagram ? total : (uint64_t)n;
    }
    return n;
}

static int op_send(struct run *r, const cJSON *step)
{
    size_t len;
    uint64_t ud;
    if (need_size(r, step, "len", &len) < 0 || need_u64(r, step, "user_data", &ud) < 0)
        return -1;
    ssize_t n = do_send(r, VIA_SEND, &len, 1, ud, step_flags(step));
    return r->why[0] ? -1 : check(r, step, n);
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
        unsigned char *b = keep_buf(r, pattern(r->stream_pos, len));
        struct iovec iov = {.iov_base = b, .iov_len = len};
        size_t k = SIZE_MAX;
        ssize_t n = lowcopy_zc_send_reap(r->zc, &iov, 1, 0, base + i, out, SEND_REAP_CAP, &k);
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
        r->stream_pos += (uint64_t)n;
        got_add(r, out, k);
    }
    return 0;
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

/* ---- completions ----------------------------------------------------------------------- */

/* Run::reap: lowcopy_zc_reap until it returns fewer than asked for. */
static int do_reap(struct run *r)
{
    lowcopy_zc_completion out[REAP_BATCH];
    if (need_zc(r) < 0)
        return -1;
    for (;;) {
        ssize_t n = lowcopy_zc_reap(r->zc, out, REAP_BATCH);
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
    int rc = lowcopy_zc_wait(r->zc, (int)timeout);
    uint64_t took = now_ns() - t0;
    if ((get(step, "expect_err") || get(step, "expect_ret")) && check(r, step, rc) < 0)
        return -1;
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
        size_t left = lowcopy_zc_inflight(r->zc);
        if (left == 0)
            return 0;
        if (now_ns() >= deadline)
            return fail(r, "%zu sends never completed", left);
        int rc = lowcopy_zc_wait(r->zc, 50);
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

/* completions user_data [copied] [flag]: after a reap, exactly the listed user_data came back
 * once each ('all': every send that returned > 0), each with result == bytes its send
 * accepted, and the flags asked for. */
static int op_completions(struct run *r, const cJSON *step)
{
    if (do_reap(r) < 0)
        return -1;
    const cJSON *u = get(step, "user_data");
    uint64_t *want, *got;
    size_t nw;
    if (json_is(u, "all")) {
        nw = r->nsent;
        want = xmalloc((nw ? nw : 1) * sizeof *want);
        for (size_t i = 0; i < nw; i++)
            want[i] = r->sent[i].user_data;
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
    got = xmalloc((r->ngot ? r->ngot : 1) * sizeof *got);
    for (size_t i = 0; i < r->ngot; i++)
        got[i] = r->got[i].user_data;
    qsort(got, r->ngot, sizeof *got, cmp_u64);
    bool same = r->ngot == nw && (nw == 0 || memcmp(got, want, nw * sizeof *got) == 0);
    if (!same) {
        qsort(want, nw, sizeof *want, cmp_u64);
        diff_fail(r, got, r->ngot, want, nw);
    }
    free(got);
    free(want);
    if (!same)
        return -1;

    const cJSON *copied = get(step, "copied");
    bool want_fallback = json_is(get(step, "flag"), "FALLBACK");
    for (size_t i = 0; i < r->ngot; i++) {
        const lowcopy_zc_completion *c = &r->got[i];
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
    for (size_t i = 0; i < r->ngot; i++)
        n += (r->got[i].flags & LOWCOPY_ZC_FALLBACK) != 0;
    if (n < min)
        return fail(r, "%" PRIu64 " completions with FALLBACK, want >= %" PRIu64, n, min);
    return 0;
}

/* ---- the peer -------------------------------------------------------------------------- */

/* drain_peer: the peer reads everything sent so far and checks it against the pattern. */
static int op_drain_peer(struct run *r, const cJSON *step)
{
    (void)step;
    if (need_peer(r) < 0)
        return -1;
    struct timeval tv = {.tv_sec = PEER_RCVTIMEO_S, .tv_usec = 0};
    if (setsockopt(r->peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
        return sys_fail(r, "SO_RCVTIMEO");
    unsigned char *buf = xmalloc(DRAIN_BUF);
    int rc = 0;
    char eb[64];
    while (r->received < r->stream_pos) {
        ssize_t n = recv(r->peer, buf, DRAIN_BUF, 0);
        /* The io_uring backend delivers SEND_ZC notifications as task work to this thread
         * (the ring's submitter), which interrupts the thread's blocking syscalls; a receive
         * with SO_RCVTIMEO is not restarted and fails with EINTR. The peer stands for another
         * process, so this says nothing about the sends: read again. */
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            rc = fail(r, "peer got %" PRIu64 " of %" PRIu64 " bytes (%s)", r->received,
                      r->stream_pos, n == 0 ? "end of stream" : errno_text(e, eb, sizeof eb));
            break;
        }
        for (size_t i = 0; i < (size_t)n; i++) {
            if (buf[i] != pattern_byte(r->received + i)) {
                rc = fail(r,
                          "wrong bytes at %" PRIu64 " (first difference at stream position %" PRIu64
                          ": got 0x%02x, want 0x%02x)",
                          r->received, r->received + i, buf[i], pattern_byte(r->received + i));
                break;
            }
        }
        if (rc < 0)
            break;
        r->received += (uint64_t)n;
    }
    free(buf);
    return rc;
}

/* reset_peer: closes the peer with SO_LINGER 0 so that our socket gets a RST (common::reset),
 * then gives the RST 50 ms to arrive. */
static int op_reset_peer(struct run *r, const cJSON *step)
{
    (void)step;
    if (need_peer(r) < 0)
        return -1;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    if (setsockopt(r->peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0)
        sys_fail(r, "SO_LINGER");
    close_owned(r, &r->peer);
    if (r->why[0])
        return -1;
    sleep_ms(50);
    return 0;
}

/* ---- the sender ------------------------------------------------------------------------ */

static int op_new(struct run *r, const cJSON *step)
{
    uint32_t backend = r->backend;
    const cJSON *b = get(step, "backend");
    if (cJSON_IsString(b) && backend_of(b->valuestring, &backend) < 0)
        return fail(r, "unknown backend %s", b->valuestring);
    uint32_t flags = cJSON_IsTrue(get(step, "adaptive")) ? LOWCOPY_ZC_ADAPTIVE : 0;
    lowcopy_zc *z = NULL;
    int rc = lowcopy_zc_new(r->fd, backend, flags, &z);
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
    lowcopy_zc_free(r->zc); /* a second `new` replaces the sender, as in Rust */
    r->zc = z;
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
    uint64_t n = lowcopy_zc_inflight(r->zc), v;
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
    int rc = lowcopy_zc_stats(r->zc, &s);
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

/* free [expect_ret]: lowcopy_zc_free; its return (sends still in flight) checked. */
static int op_free(struct run *r, const cJSON *step)
{
    if (need_zc(r) < 0)
        return -1;
    int left = lowcopy_zc_free(r->zc);
    r->zc = NULL;
    if (left < 0)
        return lc_fail(r, "free", left);
    const cJSON *w = get(step, "expect_ret");
    if (w) {
        uint64_t v;
        if (!json_u64(w, &v))
            return fail(r, "expect_ret is not a non-negative integer");
        if ((uint64_t)left != v)
            return fail(r, "left in flight %d, want %" PRIu64, left, v);
    }
    return 0;
}

typedef int (*op_fn)(struct run *, const cJSON *);

static const struct {
    const char *name;
    op_fn fn;
} OPS[] = {
    {"new", op_new},
    {"send", op_send},
    {"sendv", op_sendv},
    {"sendto", op_sendto},
    {"send_many", op_send_many},
    {"send_reap_loop", op_send_reap_loop},
    {"fill_window", op_fill_window},
    {"reap", op_reap},
    {"wait", op_wait},
    {"collect_all", op_collect_all},
    {"drain_peer", op_drain_peer},
    {"reset_peer", op_reset_peer},
    {"expect_inflight", op_expect_inflight},
    {"completions", op_completions},
    {"completions_flagged", op_completions_flagged},
    {"expect_stat", op_expect_stat},
    {"free", op_free},
};

static int do_step(struct run *r, const cJSON *step)
{
    const cJSON *op = get(step, "op");
    if (!cJSON_IsString(op))
        return fail(r, "step has no `op`");
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (strcmp(OPS[i].name, op->valuestring) == 0)
            return OPS[i].fn(r, step);
    return fail(r, "unknown op %s", op->valuestring);
}

/* ---- one run (in the child) ------------------------------------------------------------ */

/* What the child tells the parent, in memory shared across the fork. The parent prints every
 * FAIL line, so that a child that fails, then hangs or crashes in teardown, still gives one
 * line with both facts. */
struct progress {
    volatile int step; /* where the child is: STEP_SETUP, a step index, or STEP_TEARDOWN */
    int failed_step;   /* where the first failure was (valid when why[0]) */
    char op[64];       /* that step's op */
    char why[1024];    /* the first failure, "" if none */
};

struct table {
    cJSON *root;
    const cJSON *scenarios;
    const cJSON *nz_transports; /* the no_zerocopy rule */
    const cJSON *nz_errno;
    const cJSON *nz_auto_backend;
};

static cJSON *must(cJSON *v)
{
    if (!v) {
        fprintf(stderr, "c-zc-scenarios: cJSON out of memory\n");
        abort();
    }
    return v;
}

/* The steps of one run, to cJSON_Delete. On a no_zerocopy transport, from the first `new`:
 * errqueue and io_uring must be refused with the rule's errno and the run ends there; auto
 * must pick the rule's backend; copy runs as written. */
static cJSON *steps_for(const struct table *t, const cJSON *steps, const char *transport,
                        const char *backend)
{
    cJSON *s = must(cJSON_Duplicate(steps, true));
    if (!array_has_string(t->nz_transports, transport))
        return s;
    int n = cJSON_GetArraySize(s);
    for (int i = 0; i < n; i++) {
        cJSON *step = cJSON_GetArrayItem(s, i);
        if (!json_is(get(step, "op"), "new"))
            continue;
        if (strcmp(backend, "errqueue") == 0 || strcmp(backend, "io_uring") == 0) {
            while (cJSON_GetArraySize(s) > i + 1)
                cJSON_DeleteItemFromArray(s, i + 1);
            cJSON *repl = must(cJSON_CreateObject());
            must(cJSON_AddStringToObject(repl, "op", "new"));
            if (!cJSON_AddItemToObject(repl, "expect_err",
                                       must(cJSON_Duplicate(t->nz_errno, true))) ||
                !cJSON_ReplaceItemInArray(s, i, repl))
                must(NULL);
        } else if (strcmp(backend, "auto") == 0) {
            cJSON *want = must(cJSON_Duplicate(t->nz_auto_backend, true));
            if (get(step, "expect_backend")) {
                if (!cJSON_ReplaceItemInObjectCaseSensitive(step, "expect_backend", want))
                    must(NULL);
            } else if (!cJSON_AddItemToObject(step, "expect_backend", want)) {
                must(NULL);
            }
        }
        break;
    }
    return s;
}

/* Hands the run's first failure, at `step`, to the parent. */
static void record_failure(const struct run *r, struct progress *pg, int step, const char *op)
{
    pg->failed_step = step;
    snprintf(pg->op, sizeof pg->op, "%s", op);
    snprintf(pg->why, sizeof pg->why, "%s", r->why);
}

/* Runs the steps until one fails; true if all passed. */
static bool run_steps(struct run *r, const struct table *t, const cJSON *sc, struct progress *pg)
{
    const cJSON *raw = get(sc, "steps");
    if (!cJSON_IsArray(raw)) {
        fail(r, "scenario has no steps");
        record_failure(r, pg, STEP_SETUP, "");
        return false;
    }
    cJSON *steps = steps_for(t, raw, r->transport, r->backend_str);
    bool ok = true;
    int i = 0;
    const cJSON *step;
    cJSON_ArrayForEach(step, steps)
    {
        pg->step = i;
        if (do_step(r, step) < 0 && !r->why[0])
            fail(r, "failed without saying why (a runner bug)");
        if (r->why[0]) {
            const cJSON *op = get(step, "op");
            record_failure(r, pg, i, cJSON_IsString(op) ? op->valuestring : "?");
            ok = false;
            break;
        }
        i++;
    }
    cJSON_Delete(steps);
    return ok;
}

/* Ends the run as the Rust runner does: the sender goes first, then the sockets, then the
 * buffers (kept alive and unmodified until here). */
static void teardown(struct run *r)
{
    lowcopy_zc_free(r->zc);
    r->zc = NULL;
    close_owned(r, &r->sock);
    close_owned(r, &r->peer);
    for (size_t i = 0; i < r->nbufs; i++)
        free(r->bufs[i]);
    free(r->bufs);
    free(r->sent);
    free(r->got);
    r->bufs = NULL;
    r->sent = NULL;
    r->got = NULL;
}

/* Which fds below FD_SCAN_MAX are open (the directory's own fd excluded). */
static int open_fds(bool *open_now)
{
    memset(open_now, 0, FD_SCAN_MAX * sizeof *open_now);
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd < 0 || fd >= FD_SCAN_MAX || fd == dirfd(d))
            continue;
        open_now[fd] = true;
    }
    closedir(d);
    return 0;
}

/* Fails the run for every fd open now that was not open before it. */
static void check_fds(struct run *r, const bool *before)
{
    static bool after[FD_SCAN_MAX];
    if (open_fds(after) < 0) {
        sys_fail(r, "opendir /proc/self/fd");
        return;
    }
    for (int fd = 0; fd < FD_SCAN_MAX; fd++) {
        if (after[fd] && !before[fd]) {
            char link[64], target[256];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, target, sizeof target - 1);
            target[n < 0 ? 0 : n] = '\0';
            fail(r, "fd %d (%s) still open after the run", fd, target);
            return;
        }
    }
}

/* Runs one scenario x transport x backend; the first failure goes to pg->why. */
static void run_one(const struct table *t, const cJSON *sc, const char *transport,
                    const char *backend, struct progress *pg)
{
    static bool fds_before[FD_SCAN_MAX];
    struct run r = {.name = get(sc, "name")->valuestring, .transport = transport,
                    .backend_str = backend, .fd = -1, .sock = -1, .peer = -1};
    pg->step = STEP_SETUP;
    if (open_fds(fds_before) < 0)
        sys_fail(&r, "opendir /proc/self/fd");
    else if (backend_of(backend, &r.backend) < 0)
        fail(&r, "unknown backend %s", backend);
    else
        setup_fds(&r, sc);
    bool ok = !r.why[0];
    if (!ok)
        record_failure(&r, pg, STEP_SETUP, "");
    else
        ok = run_steps(&r, t, sc, pg);
    pg->step = STEP_TEARDOWN;
    teardown(&r);
    if (ok)
        check_fds(&r, fds_before);
    if (ok && r.why[0])
        record_failure(&r, pg, STEP_TEARDOWN, "");
}

/* ---- the parent: one child per run ---------------------------------------------------- */

static void print_where(int step, const char *op)
{
    if (step == STEP_SETUP)
        printf("setup");
    else if (step == STEP_TEARDOWN)
        printf("after the last step");
    else if (op)
        printf("step %d (%s)", step, op);
    else
        printf("step %d", step);
}

/* How the child ended when not by its own exit(0): a hang, a crash, or a sanitizer's exit. */
static void print_abnormal_end(int status)
{
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        printf("timed out after %d s", RUN_TIMEOUT_S);
    else if (WIFSIGNALED(status))
        printf("killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        printf("exited with status %d (a sanitizer report on stderr?)", WEXITSTATUS(status));
}

/* One line for a failed run: the recorded failure, then how the child ended if that was
 * abnormal (e.g. it failed at step 3, then crashed while tearing down). */
static void print_failure(const char *name, const char *t, const char *b, int status,
                          const struct progress *pg)
{
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("FAIL [%s | %s | %s] ", name, t, b);
    if (pg->why[0]) {
        print_where(pg->failed_step, pg->op);
        printf(": %s", pg->why);
        if (!clean) {
            printf("; then ");
            print_abnormal_end(status);
        }
    } else {
        print_where(pg->step, NULL);
        printf(": ");
        print_abnormal_end(status);
    }
    printf("\n");
}

/* Forks a child for the run; returns 0 if it passed. */
static int run_forked(struct table *t, const cJSON *sc, const char *transport,
                      const char *backend, struct progress *pg)
{
    const char *name = get(sc, "name")->valuestring;
    memset(pg, 0, sizeof *pg);
    pg->step = STEP_SETUP;
    fflush(stdout); /* else the child would print the parent's buffered lines again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL [%s | %s | %s] setup: fork: %s\n", name, transport, backend,
               strerror(errno));
        return 1;
    }
    if (pid == 0) {
        /* The verdict travels in *pg; exit status 0 only says the child ended normally, so
         * that any other status (ASan and LSan exit with 1) is never taken for a verdict. */
        alarm(RUN_TIMEOUT_S);
        run_one(t, sc, transport, backend, pg);
        cJSON_Delete(t->root); /* the child's copy: LeakSanitizer checks at exit */
        exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            printf("FAIL [%s | %s | %s] waitpid: %s\n", name, transport, backend,
                   strerror(errno));
            return 1;
        }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !pg->why[0])
        return 0;
    print_failure(name, transport, backend, status, pg);
    return 1;
}

/* Reads the whole file; NULL (with a message) on failure. */
static char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "c-zc-scenarios: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap)
            buf = xrealloc(buf, cap *= 2);
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            fprintf(stderr, "c-zc-scenarios: read %s: %s\n", path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    if (close(fd) < 0)
        fprintf(stderr, "c-zc-scenarios: close %s: %s\n", path, strerror(errno));
    *len = n;
    return buf;
}

/* Parses the table and finds its parts; prints why and returns -1 if it is malformed. */
static int load_table(const char *path, struct table *t)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text)
        return -1;
    t->root = cJSON_ParseWithLength(text, len);
    if (!t->root) {
        const char *at = cJSON_GetErrorPtr();
        fprintf(stderr, "c-zc-scenarios: %s: bad JSON near byte %td\n", path,
                at ? at - text : -1);
        free(text);
        return -1;
    }
    free(text);
    const cJSON *rule = get(t->root, "no_zerocopy");
    t->scenarios = get(t->root, "scenarios");
    t->nz_transports = get(rule, "transports");
    t->nz_errno = get(rule, "errno");
    t->nz_auto_backend = get(rule, "auto_backend");
    if (!cJSON_IsArray(t->scenarios) || !cJSON_IsArray(t->nz_transports) || !t->nz_errno ||
        !t->nz_auto_backend) {
        fprintf(stderr,
                "c-zc-scenarios: %s: want `scenarios` and `no_zerocopy` {transports, errno, "
                "auto_backend}\n",
                path);
        return -1;
    }
    return 0;
}

struct tally {
    int runs, passed, failed;
};

/* Every transport x backend of one scenario. */
static void run_scenario(struct table *t, const cJSON *sc, struct progress *pg, struct tally *n)
{
    const cJSON *name = get(sc, "name"), *ts = get(sc, "transports"), *bs = get(sc, "backends");
    const cJSON *tr, *b;
    if (!cJSON_IsString(name) || !cJSON_IsArray(ts) || !cJSON_IsArray(bs)) {
        printf("FAIL a scenario without name, transports or backends\n");
        n->runs++;
        n->failed++;
        return;
    }
    cJSON_ArrayForEach(tr, ts)
    {
        cJSON_ArrayForEach(b, bs)
        {
            n->runs++;
            if (!cJSON_IsString(tr) || !cJSON_IsString(b)) {
                printf("FAIL [%s] a transport or backend that is not a string\n",
                       name->valuestring);
                n->failed++;
                continue;
            }
            if (run_forked(t, sc, tr->valuestring, b->valuestring, pg) == 0)
                n->passed++;
            else
                n->failed++;
        }
    }
}

/* lowcopy always sends with MSG_NOSIGNAL; this keeps any other write from killing a run. */
static int ignore_sigpipe(void)
{
    struct sigaction sa = {.sa_handler = SIG_IGN};
    if (sigemptyset(&sa.sa_mask) < 0 || sigaction(SIGPIPE, &sa, NULL) < 0) {
        perror("c-zc-scenarios: sigaction(SIGPIPE)");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "usage: %s [PATH/TO/zc.json]\n", argv[0]);
        return 2;
    }
    const char *path = argc == 2 ? argv[1] : "tests/scenarios/zc.json";
    struct table t = {0};
    struct tally n = {0};
    struct progress *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED) {
        perror("c-zc-scenarios: mmap");
        return 1;
    }
    if (ignore_sigpipe() < 0 || load_table(path, &t) < 0) {
        n.failed = 1; /* a table that cannot run is a failure, with the summary line */
    } else {
        const cJSON *sc;
        cJSON_ArrayForEach(sc, t.scenarios) run_scenario(&t, sc, pg, &n);
        if (n.runs < MIN_RUNS)
            printf("table: only %d runs, want at least %d (did the table stop expanding?)\n",
                   n.runs, MIN_RUNS);
    }
    cJSON_Delete(t.root);
    if (munmap(pg, sizeof *pg) < 0)
        perror("c-zc-scenarios: munmap");
    printf("c-zc-scenarios: %d passed, %d failed\n", n.passed, n.failed);
    return n.failed == 0 && n.runs >= MIN_RUNS ? 0 : 1;
}
