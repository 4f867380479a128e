/* scenarios.c - runs the behaviour table tests/scenarios/peek.json against the C ABI.
 *
 * The Rust runner (core/tests/scenarios.rs, fixtures in core/tests/common/mod.rs) runs the
 * very same table against the Rust core. Every op here must mean exactly what it means
 * there, so that a table that passes both proves the C ABI behaves like the core.
 *
 * Each scenario x transport x mode runs in a forked child: a failing step, a crash or a hang
 * (alarm) ends that run only, and the next run starts from a clean process. The child hands
 * its first failure to the parent through shared memory; the parent prints it, with how the
 * child ended if it crashed or hung after that.
 * Output: one "FAIL [...]" line per failed run, then "c-scenarios: N passed, M failed";
 * exit status 0 only when every run passed and there were more than 50 of them.
 *
 * Build (see tests/c/README.md):
 *   PKG_CONFIG_PATH=build/lib/pkgconfig gcc -Wall -Wextra -Werror -O1 -g \
 *     -fsanitize=address,undefined $(pkg-config --cflags lowcopy libcjson) scenarios.c \
 *     $(pkg-config --libs lowcopy libcjson) -lpthread -Wl,-rpath,$PWD/build/lib
 * Usage: scenarios PATH/TO/peek.json
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <lowcopy.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef SO_PEEK_OFF
#define SO_PEEK_OFF 42
#endif

enum {
    RUN_TIMEOUT_S = 20,   /* a run still going after this is a hang: SIGALRM ends it */
    RCVTIMEO_S = 3,       /* blocking steps that wait wrongly fail with EAGAIN, not hang */
    WAIT_QUEUED_MS = 5000,
    MIN_RUNS = 51,        /* fewer runs means the table silently stopped expanding */
    CLOSED_FD = 1000000,  /* "closed": a number no fd has, the kernel answers EBADF */
    STEP_SETUP = -1,
    STEP_TEARDOWN = -2,
};

/* ---- small utilities ------------------------------------------------------------------ */

/* Allocation failure in a test runner is not a behaviour to report: stop loudly. */
static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "c-scenarios: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

static void *xmalloc(size_t n) { return xrealloc(NULL, n); }

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

static unsigned char *pattern(uint64_t from, size_t len)
{
    unsigned char *d = xmalloc(len);
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
    {"EAGAIN", EAGAIN},         {"EBADF", EBADF},         {"EINVAL", EINVAL},
    {"ENOTSOCK", ENOTSOCK},     {"EOPNOTSUPP", EOPNOTSUPP}, {"EOVERFLOW", EOVERFLOW},
    {"EMSGSIZE", EMSGSIZE},     {"ECONNRESET", ECONNRESET}, {"EPIPE", EPIPE},
    {"ETIMEDOUT", ETIMEDOUT},
};

static const char *errno_name(int code)
{
    for (size_t i = 0; i < sizeof ERRNOS / sizeof ERRNOS[0]; i++)
        if (ERRNOS[i].value == code)
            return ERRNOS[i].name;
    return NULL;
}

/* 0 for a name not in the list (no errno is 0). */
static int errno_value(const char *name)
{
    for (size_t i = 0; i < sizeof ERRNOS / sizeof ERRNOS[0]; i++)
        if (strcmp(ERRNOS[i].name, name) == 0)
            return ERRNOS[i].value;
    return 0;
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

/* Quotes bytes for a one-line message: printable ASCII as is, the rest as \xNN, cut long. */
static const char *quote(const unsigned char *d, size_t n, char *out, size_t cap)
{
    size_t o = 0, shown = n < 48 ? n : 48;
    out[o++] = '"';
    for (size_t i = 0; i < shown && o + 8 < cap; i++) {
        unsigned char c = d[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o++] = '"';
    out[o] = '\0';
    if (shown < n)
        snprintf(out + o, cap - o, "... (%zu bytes)", n);
    return out;
}

/* ---- JSON access, with serde_json's meanings --------------------------------------------- */

static const cJSON *get(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* Value::as_u64: a non-negative integral number, else false. cJSON keeps numbers as doubles,
 * exact up to 2^53: the table's largest (4294967299) fits. */
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

static int mode_of(const char *s, uint32_t *out)
{
    if (strcmp(s, "auto") == 0)
        *out = LOWCOPY_PEEK_AUTO;
    else if (strcmp(s, "offset") == 0)
        *out = LOWCOPY_PEEK_OFFSET;
    else if (strcmp(s, "discard") == 0)
        *out = LOWCOPY_PEEK_DISCARD;
    else
        return -1;
    return 0;
}

static const char *mode_name(uint32_t m)
{
    switch (m) {
    case LOWCOPY_PEEK_AUTO:
        return "auto";
    case LOWCOPY_PEEK_OFFSET:
        return "offset";
    case LOWCOPY_PEEK_DISCARD:
        return "discard";
    default:
        return "unknown";
    }
}

/* ---- one run's state ------------------------------------------------------------------- */

/* A writer thread: the Rust runner's std::thread that owns a dup of the peer. */
struct writer {
    pthread_t tid;
    int fd;               /* the thread's own dup of the peer; the thread closes it */
    uint64_t delay_ms;
    unsigned char *data;
    size_t len;
    int err;              /* errno of a failed write or close, 0 if all went well */
    const char *what;     /* the op that started it, for messages */
};

struct run {
    const char *name, *transport, *mode_str; /* the run's context, for messages */
    int fd;               /* the fd under test (CLOSED_FD for "closed", never closed here) */
    int sock;             /* fd owned by the run: the peeked socket, or the odd fd; -1 if none */
    int peer;             /* the writing end of a pair; -1 if none or after reset_peer */
    uint32_t mode;
    lowcopy_peeker *peeker;
    uint64_t sent;        /* bytes the peer sent so far: the stream position of the next */
    struct writer **writers;
    size_t nwriters;
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

static int need_str(struct run *r, const cJSON *step, const char *key, const char **out)
{
    const cJSON *v = get(step, key);
    if (!cJSON_IsString(v))
        return fail(r, "`%s` missing or not a string", key);
    *out = v->valuestring;
    return 0;
}

static int need_peeker(struct run *r)
{
    return r->peeker ? 0 : fail(r, "scenario uses a peeker before `new`");
}

static int need_peer(struct run *r)
{
    return r->peer >= 0 ? 0 : fail(r, "no peer");
}

/* The step's recv flags: MSG_DONTWAIT for "dontwait": true, else "flags" (raw), else 0. */
static int step_flags(const cJSON *step)
{
    int64_t f;
    if (cJSON_IsTrue(get(step, "dontwait")))
        return MSG_DONTWAIT;
    if (json_i64(get(step, "flags"), &f))
        return (int)f;
    return 0;
}

/* ---- fd helpers ------------------------------------------------------------------------ */

/* Writes all of `d`; returns 0 or the errno that stopped it. */
static int write_all(int fd, const unsigned char *d, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, d, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            return EIO; /* std's write_all: WriteZero */
        d += n;
        len -= (size_t)n;
    }
    return 0;
}

static int get_int(int fd, int level, int name, int *out)
{
    socklen_t len = sizeof *out;
    return getsockopt(fd, level, name, out, &len) < 0 ? -1 : 0;
}

static int set_int(struct run *r, int fd, int level, int name, int v, const char *what)
{
    if (setsockopt(fd, level, name, &v, sizeof v) < 0)
        return sys_fail(r, what);
    return 0;
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

/* Bytes queued for reading (FIONREAD = SIOCINQ). */
static int inq(struct run *r, int *out)
{
    if (ioctl(r->fd, FIONREAD, out) < 0)
        return sys_fail(r, "ioctl(FIONREAD)");
    return 0;
}

/* ---- writer threads -------------------------------------------------------------------- */

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    sleep_ms(w->delay_ms);
    w->err = write_all(w->fd, w->data, w->len);
    /* Drop the dup as soon as the data is out, as the Rust thread does: a later reset_peer
     * must really close the peer's socket. */
    if (close(w->fd) < 0 && w->err == 0)
        w->err = errno;
    w->fd = -1;
    return NULL;
}

/* Starts a thread that writes `data` (taken over) to a dup of the peer after `delay_ms`. */
static int start_writer(struct run *r, const char *what, uint64_t delay_ms, unsigned char *data,
                        size_t len)
{
    if (need_peer(r) < 0) {
        free(data);
        return -1;
    }
    int fd = fcntl(r->peer, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        free(data);
        return sys_fail(r, "dup peer");
    }
    struct writer *w = xmalloc(sizeof *w);
    *w = (struct writer){.fd = fd, .delay_ms = delay_ms, .data = data, .len = len, .what = what};
    int rc = pthread_create(&w->tid, NULL, writer_main, w);
    if (rc != 0) {
        if (close(fd) < 0)
            perror("close");
        free(data);
        free(w);
        errno = rc;
        return sys_fail(r, "pthread_create");
    }
    r->writers = xrealloc(r->writers, (r->nwriters + 1) * sizeof *r->writers);
    r->writers[r->nwriters++] = w;
    return 0;
}

/* Joins every writer; with `report`, a writer's failed write fails the run. */
static void join_writers(struct run *r, bool report)
{
    char eb[64];
    for (size_t i = 0; i < r->nwriters; i++) {
        struct writer *w = r->writers[i];
        int rc = pthread_join(w->tid, NULL);
        if (rc != 0) {
            /* The thread may still use `w`: leak it (LSan will say so) rather than free it. */
            fail(r, "pthread_join: %s", errno_text(rc, eb, sizeof eb));
            continue;
        }
        if (report && w->err)
            fail(r, "writer of `%s` failed: %s", w->what, errno_text(w->err, eb, sizeof eb));
        free(w->data);
        free(w);
    }
    free(r->writers);
    r->writers = NULL;
    r->nwriters = 0;
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

/* A listener on loopback port 0; writes its address. Returns the fd or -1. */
static int listen_loopback(struct run *r, int family, int proto, struct sockaddr_storage *ss,
                           socklen_t *len)
{
    int l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, proto);
    if (l < 0) {
        sys_fail(r, proto == IPPROTO_MPTCP ? "MPTCP socket" : "socket");
        return -1;
    }
    *len = loopback(family, ss);
    if (bind(l, (struct sockaddr *)ss, *len) < 0 || listen(l, 4) < 0 ||
        getsockname(l, (struct sockaddr *)ss, len) < 0) {
        sys_fail(r, "bind/listen/getsockname");
        if (close(l) < 0)
            perror("close");
        return -1;
    }
    return l;
}

/* A connected pair over loopback (tcp4, tcp6, mptcp4): r->sock accepted, r->peer connected.
 * Fds go into the run as soon as they exist, so teardown closes them on every path. */
static int inet_pair(struct run *r, int family, int proto, bool nodelay)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int l = listen_loopback(r, family, proto, &ss, &len);
    if (l < 0)
        return -1;
    int rc = 0;
    r->peer = socket(family, SOCK_STREAM | SOCK_CLOEXEC, proto);
    if (r->peer < 0)
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

/* An fd that is not a peekable stream: closed, file, udp4 (common::odd_fd). */
static int odd_fd(struct run *r, const char *kind)
{
    if (strcmp(kind, "closed") == 0) {
        r->fd = CLOSED_FD;
        return 0;
    }
    if (strcmp(kind, "file") == 0) {
        if ((r->sock = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)) < 0)
            return sys_fail(r, "open /proc/self/stat");
    } else {
        struct sockaddr_storage ss;
        socklen_t len = loopback(AF_INET, &ss);
        if ((r->sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
            return sys_fail(r, "udp socket");
        if (bind(r->sock, (struct sockaddr *)&ss, len) < 0)
            return sys_fail(r, "udp bind");
    }
    r->fd = r->sock;
    return 0;
}

static bool is_odd(const char *t)
{
    return strcmp(t, "closed") == 0 || strcmp(t, "file") == 0 || strcmp(t, "udp4") == 0;
}

static int stream_pair(struct run *r, const char *t)
{
    if (strcmp(t, "tcp4") == 0)
        return inet_pair(r, AF_INET, 0, true);
    if (strcmp(t, "tcp6") == 0)
        return inet_pair(r, AF_INET6, 0, true);
    if (strcmp(t, "mptcp4") == 0)
        return inet_pair(r, AF_INET, IPPROTO_MPTCP, false);
    if (strcmp(t, "unix") == 0)
        return unix_pair(r);
    return fail(r, "unknown transport %s", t);
}

/* The fd under test, with the scenario's buffer sizes and the 3 s receive timeout. */
static int setup_fds(struct run *r, const cJSON *sc)
{
    if (is_odd(r->transport))
        return odd_fd(r, r->transport);
    if (stream_pair(r, r->transport) < 0)
        return -1;
    r->fd = r->sock;
    int64_t sz;
    if (json_i64(get(sc, "socket_rcvbuf"), &sz)) {
        if (set_int(r, r->sock, SOL_SOCKET, SO_RCVBUFFORCE, (int)sz, "SO_RCVBUFFORCE") < 0 ||
            set_int(r, r->peer, SOL_SOCKET, SO_SNDBUFFORCE, (int)sz, "SO_SNDBUFFORCE") < 0)
            return -1;
    }
    /* A blocking step that waits wrongly fails with EAGAIN instead of hanging the suite. */
    struct timeval tv = {.tv_sec = RCVTIMEO_S, .tv_usec = 0};
    if (setsockopt(r->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
        return sys_fail(r, "SO_RCVTIMEO");
    return 0;
}

/* ---- expectations ---------------------------------------------------------------------- */

static int expect_error(struct run *r, const cJSON *want, ssize_t ret)
{
    char eb[64];
    if (!cJSON_IsString(want))
        return fail(r, "expect_err is not a string");
    if (ret >= 0)
        return fail(r, "want error %s, got %zd", want->valuestring, ret);
    int w = errno_value(want->valuestring);
    if (w == 0 || -ret != w)
        return fail(r, "want error %s, got %s", want->valuestring,
                    errno_text((int)-ret, eb, sizeof eb));
    return 0;
}

static int expect_bytes(struct run *r, const cJSON *want, const unsigned char *data, size_t n)
{
    char gb[256], wb[256];
    if (!cJSON_IsString(want))
        return fail(r, "expect is not a string");
    size_t wl = strlen(want->valuestring);
    if (n != wl || (n > 0 && memcmp(data, want->valuestring, n) != 0))
        return fail(r, "got %s, want %s", quote(data, n, gb, sizeof gb),
                    quote((const unsigned char *)want->valuestring, wl, wb, sizeof wb));
    return 0;
}

static int expect_pattern(struct run *r, const cJSON *step, const unsigned char *data, size_t n)
{
    uint64_t pos;
    if (need_u64(r, step, "expect_pattern", &pos) < 0)
        return -1;
    if (n == 0)
        return fail(r, "no data");
    for (size_t i = 0; i < n; i++)
        if (data[i] != pattern_byte(pos + i))
            return fail(r, "wrong bytes at %" PRIu64 " (first difference at stream position %" PRIu64
                           ": got 0x%02x, want 0x%02x)",
                        pos, pos + i, data[i], pattern_byte(pos + i));
    return 0;
}

/* common's expect_result: `ret` is a lowcopy return (bytes, or -errno); `data` holds what an
 * op copied (`cap` bytes of room; NULL for ops without data). */
static int expect_result(struct run *r, const cJSON *step, ssize_t ret, const unsigned char *data,
                         size_t cap)
{
    char eb[64];
    const cJSON *e = get(step, "expect_err");
    if (e)
        return expect_error(r, e, ret);
    if (ret < 0)
        return fail(r, "unexpected error %s", errno_text((int)-ret, eb, sizeof eb));
    size_t n = (size_t)ret;
    const cJSON *want_ret = get(step, "expect_ret"), *want = get(step, "expect");
    uint64_t wr;
    if (want_ret && !json_u64(want_ret, &wr))
        return fail(r, "expect_ret is not a non-negative integer");
    if (want_ret && n != wr)
        return fail(r, "returned %zu, want %" PRIu64, n, wr);
    /* The Rust runner slices data[..n]: more than the buffer holds is a failure there too. */
    if ((want || get(step, "expect_pattern")) && n > (data ? cap : 0))
        return fail(r, "returned %zu, more than the %zu bytes of room", n, data ? cap : 0);
    if (want && expect_bytes(r, want, data, n) < 0)
        return -1;
    if (get(step, "expect_pattern"))
        return expect_pattern(r, step, data, n);
    return 0;
}

/* ---- ops ------------------------------------------------------------------------------- */

static int op_new(struct run *r, const cJSON *step)
{
    lowcopy_peeker_free(r->peeker);
    r->peeker = NULL;
    uint32_t mode = r->mode;
    const cJSON *m = get(step, "mode");
    if (cJSON_IsString(m) && mode_of(m->valuestring, &mode) < 0)
        return fail(r, "unknown mode %s", m->valuestring);
    lowcopy_peeker *p = NULL;
    int rc = lowcopy_peeker_new(r->fd, mode, &p);
    if (get(step, "expect_err")) {
        /* A peeker made despite the expected error must not outlive the step. */
        if (rc == 0)
            lowcopy_peeker_free(p);
        return expect_result(r, step, rc < 0 ? rc : 0, NULL, 0);
    }
    char eb[64];
    if (rc < 0)
        return fail(r, "new: %s", errno_text(-rc, eb, sizeof eb));
    r->peeker = p;
    const cJSON *want = get(step, "expect_mode");
    if (want) {
        const char *got = mode_name(lowcopy_peeker_mode(p));
        if (!json_is(want, got))
            return fail(r, "mode %s, want %s", got,
                        cJSON_IsString(want) ? want->valuestring : "(not a string)");
    }
    return 0;
}

static int op_free(struct run *r, const cJSON *step)
{
    (void)step;
    lowcopy_peeker_free(r->peeker);
    r->peeker = NULL;
    return 0;
}

static int op_send(struct run *r, const cJSON *step)
{
    const char *d;
    char eb[64];
    if (need_str(r, step, "data", &d) < 0 || need_peer(r) < 0)
        return -1;
    size_t len = strlen(d);
    int e = write_all(r->peer, (const unsigned char *)d, len);
    if (e)
        return fail(r, "write to peer: %s", errno_text(e, eb, sizeof eb));
    r->sent += len;
    return 0;
}

/* Pattern bytes at the next stream positions, from a thread: they may exceed the buffers. */
static int op_send_pattern(struct run *r, const cJSON *step)
{
    size_t len;
    if (need_size(r, step, "len", &len) < 0)
        return -1;
    unsigned char *d = pattern(r->sent, len);
    r->sent += len;
    return start_writer(r, "send_pattern", 0, d, len);
}

/* Copies a JSON string for a writer thread to own. */
static unsigned char *dup_bytes(const char *s, size_t len)
{
    unsigned char *d = xmalloc(len);
    memcpy(d, s, len);
    return d;
}

static int op_send_later(struct run *r, const cJSON *step)
{
    const char *s;
    uint64_t ms;
    if (need_str(r, step, "data", &s) < 0 || need_u64(r, step, "ms", &ms) < 0)
        return -1;
    size_t len = strlen(s);
    r->sent += len;
    return start_writer(r, "send_later", ms, dup_bytes(s, len), len);
}

static int op_wait_queued(struct run *r, const cJSON *step)
{
    size_t want;
    int n;
    if (need_size(r, step, "bytes", &want) < 0)
        return -1;
    uint64_t deadline = now_ns() + (uint64_t)WAIT_QUEUED_MS * 1000000u;
    for (;;) {
        if (inq(r, &n) < 0)
            return -1;
        if ((size_t)n >= want)
            return 0;
        if (now_ns() >= deadline)
            return fail(r, "only %d of %zu bytes arrived", n, want);
        sleep_ms(1);
    }
}

/* Room for `len` bytes; never NULL, so that len 0 tests lowcopy's len check, not its NULL one. */
static unsigned char *room(size_t len) { return xmalloc(len ? len : 1); }

static int op_peek(struct run *r, const cJSON *step)
{
    size_t len;
    if (need_size(r, step, "len", &len) < 0 || need_peeker(r) < 0)
        return -1;
    unsigned char *buf = room(len);
    ssize_t n = lowcopy_peeker_peek(r->peeker, buf, len, step_flags(step));
    int rc = expect_result(r, step, n, buf, len);
    free(buf);
    return rc;
}

static int op_peek_at(struct run *r, const cJSON *step)
{
    size_t off, len;
    if (need_size(r, step, "offset", &off) < 0 || need_size(r, step, "len", &len) < 0)
        return -1;
    unsigned char *buf = room(len);
    ssize_t n = lowcopy_peek_at(r->fd, off, buf, len, step_flags(step));
    int rc = expect_result(r, step, n, buf, len);
    free(buf);
    return rc;
}

static int op_consume(struct run *r, const cJSON *step)
{
    size_t n;
    if (need_size(r, step, "n", &n) < 0 || need_peeker(r) < 0)
        return -1;
    return expect_result(r, step, lowcopy_peeker_consume(r->peeker, n), NULL, 0);
}

static int op_consume_fd(struct run *r, const cJSON *step)
{
    size_t n;
    if (need_size(r, step, "n", &n) < 0)
        return -1;
    return expect_result(r, step, lowcopy_consume(r->fd, n, step_flags(step)), NULL, 0);
}

static int op_seek(struct run *r, const cJSON *step)
{
    size_t off;
    if (need_size(r, step, "offset", &off) < 0 || need_peeker(r) < 0)
        return -1;
    return expect_result(r, step, lowcopy_peeker_seek(r->peeker, off), NULL, 0);
}

static int op_expect_offset(struct run *r, const cJSON *step)
{
    size_t want;
    if (need_peeker(r) < 0 || need_size(r, step, "value", &want) < 0)
        return -1;
    size_t got = lowcopy_peeker_offset(r->peeker);
    return got == want ? 0 : fail(r, "cursor %zu, want %zu", got, want);
}

static int op_shutdown_peer(struct run *r, const cJSON *step)
{
    (void)step;
    if (need_peer(r) < 0)
        return -1;
    if (shutdown(r->peer, SHUT_WR) < 0)
        return sys_fail(r, "shutdown(peer, SHUT_WR)");
    return 0;
}

/* Closes the peer with SO_LINGER 0 so that our socket gets a RST (common::reset). */
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
    sleep_ms(20); /* let the RST arrive */
    return 0;
}

/* A plain read(2) on the socket, bypassing lowcopy. */
static int op_read(struct run *r, const cJSON *step)
{
    size_t len;
    if (need_size(r, step, "len", &len) < 0)
        return -1;
    unsigned char *buf = room(len);
    ssize_t n = read(r->fd, buf, len);
    int rc = expect_result(r, step, n < 0 ? -errno : n, buf, len);
    free(buf);
    return rc;
}

static int op_arm(struct run *r, const cJSON *step)
{
    const cJSON *on = get(step, "on");
    int arm = cJSON_IsBool(on) ? cJSON_IsTrue(on) : 1;
    if (need_peeker(r) < 0)
        return -1;
    return expect_result(r, step, lowcopy_peeker_set_lowat_armed(r->peeker, arm), NULL, 0);
}

static int expect_sockopt(struct run *r, const cJSON *step, const char *what, int got)
{
    int64_t want;
    if (!json_i64(get(step, "value"), &want))
        return fail(r, "`value` missing");
    return got == want ? 0 : fail(r, "%s %d, want %" PRId64, what, got, want);
}

static int op_expect_rcvlowat(struct run *r, const cJSON *step)
{
    int v;
    if (get_int(r->fd, SOL_SOCKET, SO_RCVLOWAT, &v) < 0)
        return sys_fail(r, "getsockopt(SO_RCVLOWAT)");
    return expect_sockopt(r, step, "SO_RCVLOWAT", v);
}

static int op_expect_peek_off(struct run *r, const cJSON *step)
{
    int v;
    if (get_int(r->fd, SOL_SOCKET, SO_PEEK_OFF, &v) < 0) {
        /* Sockets without SO_PEEK_OFF (MPTCP) have it disabled by definition. */
        if (errno != EOPNOTSUPP)
            return sys_fail(r, "getsockopt(SO_PEEK_OFF)");
        v = -1;
    }
    return expect_sockopt(r, step, "SO_PEEK_OFF", v);
}

static int stat_field(struct run *r, const lowcopy_peek_stats *s, const char *f, uint64_t *out)
{
    if (strcmp(f, "bytes_skipped_copied") == 0)
        *out = s->bytes_skipped_copied;
    else if (strcmp(f, "bytes_peeked") == 0)
        *out = s->bytes_peeked;
    else if (strcmp(f, "bytes_consumed") == 0)
        *out = s->bytes_consumed;
    else if (strcmp(f, "peeks") == 0)
        *out = s->peeks;
    else
        return fail(r, "unknown stat %s", f);
    return 0;
}

/* The expectation is keyed by the mechanism actually in use ("offset" / "discard"). */
static int op_expect_stat(struct run *r, const cJSON *step)
{
    lowcopy_peek_stats s;
    const char *field;
    uint64_t want, got;
    char eb[64];
    if (need_peeker(r) < 0)
        return -1;
    int rc = lowcopy_peeker_stats(r->peeker, &s);
    if (rc < 0)
        return fail(r, "stats: %s", errno_text(-rc, eb, sizeof eb));
    const char *key = mode_name(lowcopy_peeker_mode(r->peeker));
    if (need_u64(r, step, key, &want) < 0 || need_str(r, step, "field", &field) < 0 ||
        stat_field(r, &s, field, &got) < 0)
        return -1;
    return got == want ? 0 : fail(r, "stat %s %" PRIu64 ", want %" PRIu64, field, got, want);
}

static int op_peek_supported(struct run *r, const cJSON *step)
{
    return expect_result(r, step, lowcopy_peek_supported(r->fd), NULL, 0);
}

/* Bytes the wakeup loop got, appended as they come. */
struct bytes {
    unsigned char *d;
    size_t len;
};

static void bytes_add(struct bytes *b, const unsigned char *d, size_t n)
{
    if (n == 0)
        return;
    b->d = xrealloc(b->d, b->len + n);
    memcpy(b->d + b->len, d, n);
    b->len += n;
}

/* Level-triggered epoll loop for `ms`: each wakeup peeks with MSG_DONTWAIT. */
static int wakeup_loop(struct run *r, int ep, uint64_t ms, uint64_t *wakeups, struct bytes *got)
{
    char eb[64];
    uint64_t deadline = now_ns() + ms * 1000000u;
    for (;;) {
        uint64_t now = now_ns();
        if (now >= deadline)
            return 0;
        uint64_t left = (deadline - now) / 1000000u;
        int timeout = left == 0 ? 1 : left > INT_MAX ? INT_MAX : (int)left;
        struct epoll_event ev;
        int n = epoll_wait(ep, &ev, 1, timeout);
        if (n < 0 && errno != EINTR)
            return sys_fail(r, "epoll_wait");
        if (n <= 0)
            continue;
        (*wakeups)++;
        if (need_peeker(r) < 0)
            return -1;
        unsigned char buf[4096];
        ssize_t k = lowcopy_peeker_peek(r->peeker, buf, sizeof buf, MSG_DONTWAIT);
        if (k >= 0)
            bytes_add(got, buf, (size_t)k);
        else if (k != -EAGAIN)
            return fail(r, "peek in loop: %s", errno_text((int)-k, eb, sizeof eb));
    }
}

/* A bound ("max" / "min") the step may set; -1 if set but not a non-negative integer. */
static int bound(struct run *r, const cJSON *step, const char *key, bool *set, uint64_t *v)
{
    *set = get(step, key) != NULL;
    if (*set && !json_u64(get(step, key), v))
        return fail(r, "`%s` is not a non-negative integer", key);
    return 0;
}

static int check_wakeups(struct run *r, const cJSON *step, uint64_t wakeups, const struct bytes *got)
{
    uint64_t max, min;
    bool has_max, has_min;
    char gb[256];
    if (bound(r, step, "max", &has_max, &max) < 0 || bound(r, step, "min", &has_min, &min) < 0)
        return -1;
    if (has_max && wakeups > max)
        return fail(r, "%" PRIu64 " wakeups, want <= %" PRIu64, wakeups, max);
    if (has_min && wakeups < min)
        return fail(r, "%" PRIu64 " wakeups, want >= %" PRIu64, wakeups, min);
    const cJSON *d = get(step, "data");
    if (!d)
        return 0;
    if (!cJSON_IsString(d))
        return fail(r, "`data` is not a string");
    size_t dl = strlen(d->valuestring);
    if (got->len < dl || memcmp(got->d + got->len - dl, d->valuestring, dl) != 0)
        return fail(r, "the loop did not wake for the new byte (got %s)",
                    quote(got->d, got->len, gb, sizeof gb));
    return 0;
}

static int epoll_for(struct run *r, int *ep)
{
    *ep = epoll_create1(EPOLL_CLOEXEC);
    if (*ep < 0)
        return sys_fail(r, "epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (epoll_ctl(*ep, EPOLL_CTL_ADD, r->fd, &ev) < 0) {
        sys_fail(r, "epoll_ctl");
        close_owned(r, ep);
        return -1;
    }
    return 0;
}

/* wakeups ms max|min [send_after_ms data]: counts the wakeups of a level-triggered loop. */
static int op_wakeups(struct run *r, const cJSON *step)
{
    uint64_t ms, after, wakeups = 0;
    const char *s;
    int ep;
    if (need_u64(r, step, "ms", &ms) < 0)
        return -1;
    if (get(step, "send_after_ms")) {
        if (need_str(r, step, "data", &s) < 0 || need_u64(r, step, "send_after_ms", &after) < 0)
            return -1;
        size_t len = strlen(s);
        r->sent += len;
        if (start_writer(r, "wakeups", after, dup_bytes(s, len), len) < 0)
            return -1;
    }
    if (epoll_for(r, &ep) < 0)
        return -1;
    struct bytes got = {0};
    int rc = wakeup_loop(r, ep, ms, &wakeups, &got);
    close_owned(r, &ep);
    if (rc == 0 && !r->why[0])
        rc = check_wakeups(r, step, wakeups, &got);
    free(got.d);
    return r->why[0] ? -1 : rc;
}

typedef int (*op_fn)(struct run *, const cJSON *);

static const struct {
    const char *name;
    op_fn fn;
} OPS[] = {
    {"new", op_new},
    {"free", op_free},
    {"send", op_send},
    {"send_pattern", op_send_pattern},
    {"send_later", op_send_later},
    {"wait_queued", op_wait_queued},
    {"peek", op_peek},
    {"peek_at", op_peek_at},
    {"consume", op_consume},
    {"consume_fd", op_consume_fd},
    {"seek", op_seek},
    {"expect_offset", op_expect_offset},
    {"shutdown_peer", op_shutdown_peer},
    {"reset_peer", op_reset_peer},
    {"read", op_read},
    {"arm", op_arm},
    {"expect_rcvlowat", op_expect_rcvlowat},
    {"expect_peek_off", op_expect_peek_off},
    {"expect_stat", op_expect_stat},
    {"peek_supported", op_peek_supported},
    {"wakeups", op_wakeups},
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
    const cJSON *npo_transports; /* no_peek_off rule */
    const cJSON *npo_errno;
};

/* The no_peek_off rule: on such a transport in mode "offset" the first `new` must fail with
 * the rule's errno and the run ends there. Returns the replacement step (to cJSON_Delete), or
 * NULL when the rule does not apply; sets *limit and *at. */
static cJSON *no_peek_off_step(const struct table *t, const cJSON *steps, const char *transport,
                               const char *mode, int *limit, int *at)
{
    *limit = cJSON_GetArraySize(steps);
    *at = -1;
    if (!array_has_string(t->npo_transports, transport) || strcmp(mode, "offset") != 0)
        return NULL;
    for (int i = 0; i < *limit; i++) {
        if (json_is(get(cJSON_GetArrayItem(steps, i), "op"), "new")) {
            cJSON *s = cJSON_CreateObject();
            cJSON *e = cJSON_Duplicate(t->npo_errno, true);
            if (!s || !e || !cJSON_AddStringToObject(s, "op", "new") ||
                !cJSON_AddItemToObject(s, "expect_err", e)) {
                fprintf(stderr, "c-scenarios: cJSON out of memory\n");
                abort();
            }
            *limit = i + 1;
            *at = i;
            return s;
        }
    }
    return NULL;
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
    const cJSON *steps = get(sc, "steps");
    if (!cJSON_IsArray(steps)) {
        fail(r, "scenario has no steps");
        record_failure(r, pg, STEP_SETUP, "");
        return false;
    }
    int limit, at;
    cJSON *repl = no_peek_off_step(t, steps, r->transport, r->mode_str, &limit, &at);
    bool ok = true;
    for (int i = 0; i < limit && ok; i++) {
        const cJSON *step = i == at ? repl : cJSON_GetArrayItem(steps, i);
        pg->step = i;
        if (do_step(r, step) < 0 && !r->why[0])
            fail(r, "failed without saying why (a runner bug)");
        if (r->why[0]) {
            const cJSON *op = get(step, "op");
            record_failure(r, pg, i, cJSON_IsString(op) ? op->valuestring : "?");
            ok = false;
        }
    }
    cJSON_Delete(repl);
    return ok;
}

/* Ends the run as the Rust runner does: peeker freed, writers joined, then the fds closed.
 * After a failure the fds go first, so that a writer blocked on a full queue gets an error
 * instead of hanging the join. */
static void teardown(struct run *r, bool failed)
{
    lowcopy_peeker_free(r->peeker);
    r->peeker = NULL;
    if (failed) {
        /* Closing our socket alone does not wake a writer blocked on a full MPTCP peer;
         * shutting the peer's socket down does, on every transport. Its error (ENOTCONN after
         * a shutdown_peer, say) is not news: the run has failed already, fail() keeps the
         * first failure. */
        if (r->peer >= 0 && shutdown(r->peer, SHUT_RDWR) < 0)
            sys_fail(r, "shutdown(peer)");
        close_owned(r, &r->sock);
        close_owned(r, &r->peer);
        join_writers(r, false);
        return;
    }
    join_writers(r, true);
    close_owned(r, &r->peer);
    close_owned(r, &r->sock);
}

/* Runs one scenario x transport x mode; the first failure goes to pg->why. */
static void run_one(const struct table *t, const cJSON *sc, const char *transport,
                    const char *mode, struct progress *pg)
{
    struct run r = {.name = get(sc, "name")->valuestring, .transport = transport,
                    .mode_str = mode, .fd = -1, .sock = -1, .peer = -1};
    pg->step = STEP_SETUP;
    if (mode_of(mode, &r.mode) < 0)
        fail(&r, "unknown mode %s", mode);
    else
        setup_fds(&r, sc);
    bool ok = !r.why[0];
    if (!ok)
        record_failure(&r, pg, STEP_SETUP, "");
    else
        ok = run_steps(&r, t, sc, pg);
    pg->step = STEP_TEARDOWN;
    teardown(&r, !ok);
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
 * abnormal (e.g. it failed at step 3, then hung while tearing down). */
static void print_failure(const char *name, const char *t, const char *m, int status,
                          const struct progress *pg)
{
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("FAIL [%s | %s | %s] ", name, t, m);
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
static int run_forked(struct table *t, const cJSON *sc, const char *transport, const char *mode,
                      struct progress *pg)
{
    const char *name = get(sc, "name")->valuestring;
    memset(pg, 0, sizeof *pg);
    pg->step = STEP_SETUP;
    fflush(stdout); /* else the child would print the parent's buffered lines again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL [%s | %s | %s] setup: fork: %s\n", name, transport, mode, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        /* The verdict travels in *pg; exit status 0 only says the child ended normally, so
         * that any other status (ASan and LSan exit with 1) is never taken for a verdict. */
        alarm(RUN_TIMEOUT_S);
        run_one(t, sc, transport, mode, pg);
        cJSON_Delete(t->root); /* the child's copy: LeakSanitizer checks at exit */
        exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            printf("FAIL [%s | %s | %s] waitpid: %s\n", name, transport, mode, strerror(errno));
            return 1;
        }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !pg->why[0])
        return 0;
    print_failure(name, transport, mode, status, pg);
    return 1;
}

/* Reads the whole file; NULL (with a message) on failure. */
static char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "c-scenarios: %s: %s\n", path, strerror(errno));
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
            fprintf(stderr, "c-scenarios: read %s: %s\n", path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    if (close(fd) < 0)
        fprintf(stderr, "c-scenarios: close %s: %s\n", path, strerror(errno));
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
        fprintf(stderr, "c-scenarios: %s: bad JSON near byte %td\n", path, at ? at - text : -1);
        free(text);
        return -1;
    }
    free(text);
    const cJSON *rule = get(t->root, "no_peek_off");
    t->scenarios = get(t->root, "scenarios");
    t->npo_transports = get(rule, "transports");
    t->npo_errno = get(rule, "errno");
    if (!cJSON_IsArray(t->scenarios) || !cJSON_IsArray(t->npo_transports) || !t->npo_errno) {
        fprintf(stderr, "c-scenarios: %s: want `scenarios` and `no_peek_off` {transports, errno}\n",
                path);
        return -1;
    }
    return 0;
}

struct tally {
    int runs, passed, failed;
};

/* Every transport x mode of one scenario. */
static void run_scenario(struct table *t, const cJSON *sc, struct progress *pg, struct tally *n)
{
    const cJSON *name = get(sc, "name"), *ts = get(sc, "transports"), *ms = get(sc, "modes");
    const cJSON *tr, *m;
    if (!cJSON_IsString(name) || !cJSON_IsArray(ts) || !cJSON_IsArray(ms)) {
        printf("FAIL a scenario without name, transports or modes\n");
        n->runs++;
        n->failed++;
        return;
    }
    cJSON_ArrayForEach(tr, ts)
    {
        cJSON_ArrayForEach(m, ms)
        {
            n->runs++;
            if (!cJSON_IsString(tr) || !cJSON_IsString(m)) {
                printf("FAIL [%s] a transport or mode that is not a string\n", name->valuestring);
                n->failed++;
                continue;
            }
            if (run_forked(t, sc, tr->valuestring, m->valuestring, pg) == 0)
                n->passed++;
            else
                n->failed++;
        }
    }
}

/* A write to a closed peer must be EPIPE for the writer, as in Rust, not a killing SIGPIPE. */
static int ignore_sigpipe(void)
{
    struct sigaction sa = {.sa_handler = SIG_IGN};
    if (sigemptyset(&sa.sa_mask) < 0 || sigaction(SIGPIPE, &sa, NULL) < 0) {
        perror("c-scenarios: sigaction(SIGPIPE)");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/TO/peek.json\n", argv[0]);
        return 2;
    }
    struct table t = {0};
    struct tally n = {0};
    struct progress *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED) {
        perror("c-scenarios: mmap");
        return 1;
    }
    if (ignore_sigpipe() < 0 || load_table(argv[1], &t) < 0) {
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
        perror("c-scenarios: munmap");
    printf("c-scenarios: %d passed, %d failed\n", n.passed, n.failed);
    return n.failed == 0 && n.runs >= MIN_RUNS ? 0 : 1;
}
