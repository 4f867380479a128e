/* harness.c - the machinery the behaviour-table runners share; see harness.h for the whole
 * story. Compiled into each runner (Makefile: build/bin/c_*scenarios). */
#define _GNU_SOURCE
#include "harness.h"

#include <lowcopy.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/net_tstamp.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    MIN_RUNS = 51,        /* as the Rust runners' `runs > 50`: fewer means the table silently
                             stopped expanding */
    WAIT_QUEUED_MS = 5000,/* common::wait_queued's deadline */
    WAIT_POLLERR_MS = 3000,/* common::wait_pollerr's deadline */
    FD_SCAN_MAX = 4096,   /* fds checked for leaks */
    STEP_SETUP = -1,      /* where a child is besides its steps (struct progress) */
    STEP_TEARDOWN = -2,
};

/* The runner being run: set once by run_table, read by the helpers that speak for it (message
 * prefix, errno names, number reading, time limit). */
static const struct runner *RUNNER;

/* ---- small utilities ------------------------------------------------------------------ */

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "%s: out of memory (%zu bytes)\n", RUNNER->prog, n);
        abort();
    }
    return q;
}

void *xmalloc(size_t n) { return xrealloc(NULL, n); }

unsigned char *room(size_t len)
{
    unsigned char *p = xmalloc(len);
    memset(p, 0, len ? len : 1);
    return p;
}

cJSON *must(cJSON *v)
{
    if (!v) {
        fprintf(stderr, "%s: cJSON out of memory\n", RUNNER->prog);
        abort();
    }
    return v;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        perror("clock_gettime");
        abort();
    }
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sleep_ms(uint64_t ms)
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

/* Consecutive pattern bytes differ by 131 mod 251: the loops below step instead of dividing
 * once per byte (rx.json streams tens of MiB). */
static unsigned pattern_next(unsigned b) { return b + 131 >= 251 ? b + 131 - 251 : b + 131; }

unsigned char *pattern(uint64_t from, size_t len)
{
    unsigned char *d = xmalloc(len ? len : 1);
    unsigned b = pattern_byte(from);
    for (size_t i = 0; i < len; i++, b = pattern_next(b))
        d[i] = (unsigned char)b;
    return d;
}

size_t pattern_mismatch(const unsigned char *d, size_t n, uint64_t from)
{
    unsigned b = pattern_byte(from);
    for (size_t i = 0; i < n; i++, b = pattern_next(b))
        if (d[i] != b)
            return i;
    return n;
}

const char *quote(const unsigned char *d, size_t n, char *out, size_t cap)
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

/* ---- errno names ----------------------------------------------------------------------- */

/* The names the tables may use, in the order the Rust runners' lists grew (ERRNOS_*): a runner
 * knows a prefix of this list, exactly the names its Rust twin can match. */
static const struct {
    const char *name;
    int value;
} ERRNOS[] = {
    {"EAGAIN", EAGAIN},         {"EBADF", EBADF},           {"EINVAL", EINVAL},
    {"ENOTSOCK", ENOTSOCK},     {"EOPNOTSUPP", EOPNOTSUPP}, {"EOVERFLOW", EOVERFLOW},
    {"EMSGSIZE", EMSGSIZE},     {"ECONNRESET", ECONNRESET}, {"EPIPE", EPIPE},
    {"ETIMEDOUT", ETIMEDOUT},   {"EBUSY", EBUSY},           {"ENOBUFS", ENOBUFS},
    {"ECONNREFUSED", ECONNREFUSED}, {"EPERM", EPERM},       {"ENOPROTOOPT", ENOPROTOOPT},
    {"ENOMEM", ENOMEM},
    {"ENOTCONN", ENOTCONN},     {"EINTR", EINTR},
    {"EPROTOTYPE", EPROTOTYPE}, {"ENOMSG", ENOMSG},
};
_Static_assert(sizeof ERRNOS / sizeof ERRNOS[0] == ERRNOS_PEEK, "ERRNOS_* count ERRNOS' entries");

const char *errno_name(int code)
{
    for (size_t i = 0; i < RUNNER->errnos; i++)
        if (ERRNOS[i].value == code)
            return ERRNOS[i].name;
    return NULL;
}

const char *errno_text(int code, char *buf, size_t cap)
{
    const char *n = errno_name(code);
    if (n)
        snprintf(buf, cap, "%s", n);
    else
        snprintf(buf, cap, "errno %d (%s)", code, strerror(code));
    return buf;
}

/* ---- JSON numbers ---------------------------------------------------------------------- */

/* With exact_numbers, every number node of the table with its literal as written (pointing
 * into the table's text, kept until the end): cJSON's double cannot tell 18446744073709551615
 * from 2^64. */
static struct literal {
    const cJSON *node;
    const char *text;
    size_t len;
} *LITERALS;
static size_t NLITERALS;

const cJSON *get(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static const struct literal *literal_of(const cJSON *v)
{
    for (size_t i = 0; i < NLITERALS; i++)
        if (LITERALS[i].node == v)
            return &LITERALS[i];
    return NULL;
}

/* The integer a literal spells, as serde_json parses it: `neg` and the magnitude; false for
 * a fraction, an exponent, or a magnitude above u64::MAX (serde_json makes those f64). */
static bool literal_integer(const struct literal *l, bool *neg, uint64_t *mag)
{
    size_t i = 0;
    *neg = l->len > 0 && l->text[0] == '-';
    if (*neg)
        i++;
    if (i == l->len)
        return false;
    uint64_t m = 0;
    for (; i < l->len; i++) {
        char c = l->text[i];
        if (c < '0' || c > '9')
            return false; /* '.', 'e', 'E': a float */
        unsigned d = (unsigned)(c - '0');
        if (m > (UINT64_MAX - d) / 10)
            return false; /* beyond u64: serde_json falls back to f64 */
        m = m * 10 + d;
    }
    *mag = m;
    return true;
}

/* The number's integer from its literal; false if it has none. */
static bool exact_integer(const cJSON *v, bool *neg, uint64_t *mag)
{
    const struct literal *l;
    return cJSON_IsNumber(v) && (l = literal_of(v)) && literal_integer(l, neg, mag);
}

/* Without exact_numbers, as the peek and zc runners have always read their tables (their
 * numbers are far below 2^53): the double, when it lies in [lo, hi) and so converts to the
 * integer type without overflow. */
static bool double_in(const cJSON *v, double lo, double hi, double *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return *out >= lo && *out < hi;
}

bool json_u64(const cJSON *v, uint64_t *out)
{
    bool neg;
    uint64_t mag;
    double d;
    if (RUNNER->exact_numbers) {
        if (!exact_integer(v, &neg, &mag) || (neg && mag != 0)) /* -0 is 0 for serde_json */
            return false;
        *out = mag;
        return true;
    }
    if (!double_in(v, 0, 18446744073709551616.0, &d) || (double)(uint64_t)d != d)
        return false; /* out of range, or a fraction */
    *out = (uint64_t)d;
    return true;
}

bool json_i64(const cJSON *v, int64_t *out)
{
    bool neg;
    uint64_t mag;
    double d;
    if (RUNNER->exact_numbers) {
        if (!exact_integer(v, &neg, &mag))
            return false;
        if (!neg && mag > (uint64_t)INT64_MAX)
            return false;
        if (neg && mag > (uint64_t)INT64_MAX + 1)
            return false;
        if (!neg)
            *out = (int64_t)mag;
        else /* -INT64_MIN does not fit in int64_t: negate through INT64_MAX */
            *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        return true;
    }
    if (!double_in(v, -9223372036854775808.0, 9223372036854775808.0, &d) ||
        (double)(int64_t)d != d)
        return false;
    *out = (int64_t)d;
    return true;
}

bool json_is(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

bool array_has_string(const cJSON *arr, const char *s)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (json_is(v, s))
            return true;
    }
    return false;
}

static bool is_number_char(char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* Number tokens of valid JSON text, in order: outside strings, a run of "-+.eE0-9" starting
 * with '-' or a digit (the characters cJSON's parse_number takes). */
static size_t lex_numbers(const char *t, size_t len, const char **at, size_t *lens, size_t cap)
{
    size_t n = 0, i = 0;
    while (i < len) {
        char c = t[i];
        if (c == '"') {
            for (i++; i < len && t[i] != '"'; i++)
                if (t[i] == '\\')
                    i++;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t s = i;
            while (i < len && is_number_char(t[i]))
                i++;
            if (n < cap) {
                at[n] = t + s;
                lens[n] = i - s;
            }
            n++;
        } else {
            i++;
        }
    }
    return n;
}

/* Appends the number nodes under `v` in document order (cJSON keeps it). */
static void number_nodes(const cJSON *v, const cJSON ***out, size_t *n, size_t *cap)
{
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            if (*n == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                *out = xrealloc(*out, *cap * sizeof **out);
            }
            (*out)[(*n)++] = v;
        }
        number_nodes(v->child, out, n, cap);
    }
}

/* Pairs each number node with its literal; false if the two walks disagree. */
static bool keep_literals(const cJSON *root, const char *text, size_t len)
{
    const cJSON **nodes = NULL;
    size_t nn = 0, cap = 0;
    number_nodes(root, &nodes, &nn, &cap);
    const char **at = xmalloc((nn ? nn : 1) * sizeof *at);
    size_t *lens = xmalloc((nn ? nn : 1) * sizeof *lens);
    size_t nl = lex_numbers(text, len, at, lens, nn);
    bool ok = nl == nn;
    if (ok) {
        LITERALS = xmalloc((nn ? nn : 1) * sizeof *LITERALS);
        NLITERALS = nn;
        for (size_t i = 0; i < nn; i++)
            LITERALS[i] = (struct literal){.node = nodes[i], .text = at[i], .len = lens[i]};
    }
    free(nodes);
    free(at);
    free(lens);
    return ok;
}

/* ---- failures and expectations --------------------------------------------------------- */

int fail(struct run *r, const char *fmt, ...)
{
    if (r->why[0])
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return -1;
}

const struct lowcopy_caps *probed_caps(void)
{
    static struct lowcopy_caps caps;
    static bool done;
    if (!done) {
        int rc = lowcopy_probe(&caps, sizeof caps);
        if (rc < 0) {
            fprintf(stderr, "%s: lowcopy_probe: %s\n", RUNNER->prog, strerror(-rc));
            exit(2);
        }
        done = true;
    }
    return &caps;
}

int skip_run(struct run *r, const char *fmt, ...)
{
    if (r->skip[0] || r->why[0])
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->skip, sizeof r->skip, fmt, ap);
    va_end(ap);
    return -1;
}

/* net.core.rmem_max or wmem_max, 0 if unreadable. */
static long core_max(const char *name)
{
    char path[64];
    long v = 0;
    snprintf(path, sizeof path, "/proc/sys/net/core/%s", name);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

int set_buf(struct run *r, int fd, bool rcv, int bytes)
{
    const char *max_name = rcv ? "rmem_max" : "wmem_max";
    long max = core_max(max_name);
    int name = bytes <= max ? (rcv ? SO_RCVBUF : SO_SNDBUF) : (rcv ? SO_RCVBUFFORCE : SO_SNDBUFFORCE);
    if (setsockopt(fd, SOL_SOCKET, name, &bytes, sizeof bytes) == 0)
        return 0;
    if (errno == EPERM)
        return skip_run(r, "a %d-byte socket buffer is above net.core.%s (%ld): SO_%sBUFFORCE needs "
                        "CAP_NET_ADMIN", bytes, max_name, max, rcv ? "RCV" : "SND");
    return sys_fail(r, rcv ? "SO_RCVBUF(FORCE)" : "SO_SNDBUF(FORCE)");
}

int sys_fail(struct run *r, const char *what)
{
    int e = errno;
    char eb[64];
    return fail(r, "%s: %s", what, errno_text(e, eb, sizeof eb));
}

int lc_fail(struct run *r, const char *what, ssize_t ret)
{
    char eb[64];
    return fail(r, "%s: %s", what, errno_text((int)-ret, eb, sizeof eb));
}

int need_u64(struct run *r, const cJSON *step, const char *key, uint64_t *out)
{
    if (!json_u64(get(step, key), out))
        return fail(r, "`%s` missing", key);
    return 0;
}

int need_size(struct run *r, const cJSON *step, const char *key, size_t *out)
{
    uint64_t v = 0;
    if (need_u64(r, step, key, &v) < 0)
        return -1;
    if (v > SIZE_MAX)
        return fail(r, "`%s` does not fit in size_t", key);
    *out = (size_t)v;
    return 0;
}

int need_str(struct run *r, const cJSON *step, const char *key, const char **out)
{
    const cJSON *v = get(step, key);
    if (!cJSON_IsString(v))
        return fail(r, "`%s` missing or not a string", key);
    *out = v->valuestring;
    return 0;
}

int need_peer(struct run *r)
{
    return r->peer >= 0 ? 0 : fail(r, "no peer");
}

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

int expect_err(struct run *r, const cJSON *want, ssize_t ret, bool lists)
{
    char eb[64], wb[256];
    if (!lists && !cJSON_IsString(want))
        return fail(r, "expect_err is not a string");
    if (ret >= 0)
        return fail(r, "want error %s, got %zd", want_text(want, wb, sizeof wb), ret);
    if (!errno_matches(want, (int)-ret))
        return fail(r, "want error %s, got %s", want_text(want, wb, sizeof wb),
                    errno_text((int)-ret, eb, sizeof eb));
    return 0;
}

int expect_bytes(struct run *r, const cJSON *want, const unsigned char *data, size_t n)
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

int expect_pattern_at(struct run *r, const unsigned char *data, size_t n, uint64_t pos)
{
    size_t i = pattern_mismatch(data, n, pos);
    if (i == n)
        return 0;
    return fail(r,
                "wrong bytes at %" PRIu64 " (first difference at stream position %" PRIu64
                ": got 0x%02x, want 0x%02x)",
                pos, pos + i, data[i], pattern_byte(pos + i));
}

/* ---- fds ------------------------------------------------------------------------------- */

int write_all(int fd, const unsigned char *d, size_t len)
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

int get_int(int fd, int level, int name, int *out)
{
    socklen_t len = sizeof *out;
    return getsockopt(fd, level, name, out, &len) < 0 ? -1 : 0;
}

int set_int(struct run *r, int fd, int level, int name, int v, const char *what)
{
    if (setsockopt(fd, level, name, &v, sizeof v) < 0)
        return sys_fail(r, what);
    return 0;
}

int set_timeval(int fd, int name, uint64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return setsockopt(fd, SOL_SOCKET, name, &tv, sizeof tv);
}

void close_owned(struct run *r, int *fd)
{
    if (*fd < 0)
        return;
    if (close(*fd) < 0)
        sys_fail(r, "close");
    *fd = -1;
}

int own(struct run *r, int fd)
{
    if (r->nowned == MAX_OWNED) {
        close_owned(r, &fd);
        return fail(r, "more than %d fds in one run", MAX_OWNED);
    }
    r->owned[r->nowned++] = fd;
    return 0;
}

/* Closes one owned fd early (a listener once its one connection is accepted). */
static void drop_owned(struct run *r, int fd)
{
    for (size_t i = 0; i < r->nowned; i++) {
        if (r->owned[i] == fd) {
            close_owned(r, &r->owned[i]);
            r->owned[i] = r->owned[--r->nowned];
            return;
        }
    }
}

/* ---- the error queue and CPU time ------------------------------------------------------ */

uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0) {
        perror("clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        abort(); /* as common::thread_cpu's unwrap: no measure, no test */
    }
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int cpu_bound(struct run *r, const cJSON *step, uint64_t cpu_ns)
{
    uint64_t ms;
    if (json_u64(get(step, "cpu_max_ms"), &ms) && cpu_ns > ms * 1000000u)
        return fail(r, "used %.1f ms of CPU, want <= %" PRIu64 " ms (spinning while it waited?)",
                    cpu_ns / 1e6, ms);
    return 0;
}

int wait_pollerr(struct run *r, int fd)
{
    uint64_t deadline = now_ns() + (uint64_t)WAIT_POLLERR_MS * 1000000u;
    struct pollfd p = {.fd = fd, .events = 0};
    int n;
    /* A signal or io_uring task work may cut the wait short: the deadline stays. */
    do {
        uint64_t now = now_ns();
        int left = now >= deadline ? 0 : (int)((deadline - now + 999999u) / 1000000u);
        p.revents = 0;
        n = poll(&p, 1, left);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return sys_fail(r, "poll");
    if (n != 1 || !(p.revents & POLLERR))
        return fail(r, "no POLLERR within %d ms (%d, revents 0x%x)", WAIT_POLLERR_MS, n,
                    (unsigned)p.revents);
    return 0;
}

int timestamping_on(struct run *r, int fd)
{
    return set_int(r, fd, SOL_SOCKET, SO_TIMESTAMPING,
                   SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE,
                   "setsockopt(SO_TIMESTAMPING)");
}

int errqueue_entry(struct run *r, int fd, const char *kind)
{
    int flags;
    if (strcmp(kind, "zerocopy") == 0) {
        if (set_int(r, fd, SOL_SOCKET, SO_ZEROCOPY, 1, "setsockopt(SO_ZEROCOPY)") < 0)
            return -1;
        flags = MSG_ZEROCOPY;
    } else if (strcmp(kind, "timestamp") == 0) {
        if (timestamping_on(r, fd) < 0)
            return -1;
        flags = 0;
    } else {
        return fail(r, "unknown error-queue entry %s", kind);
    }
    ssize_t n = send(fd, "e", 1, flags);
    if (n < 0)
        return sys_fail(r, "send (error-queue entry)");
    if (n != 1)
        return fail(r, "send (error-queue entry): %zd bytes, want 1", n);
    return wait_pollerr(r, fd);
}

/* ---- fixtures -------------------------------------------------------------------------- */

int tcp_listener(struct run *r, int family, int proto, const int *mss, const int *rcvbuf)
{
    struct sockaddr_storage ss;
    socklen_t len = loopback(family, &ss);
    int l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, proto);
    if (l < 0)
        return sys_fail(r, proto == IPPROTO_MPTCP ? "MPTCP socket" : "socket");
    if (own(r, l) < 0)
        return -1;
    if (mss && set_int(r, l, IPPROTO_TCP, TCP_MAXSEG, *mss, "TCP_MAXSEG (listener)") < 0)
        return -1;
    if (rcvbuf && set_int(r, l, SOL_SOCKET, SO_RCVBUF, *rcvbuf, "SO_RCVBUF (listener)") < 0)
        return -1;
    if (bind(l, (struct sockaddr *)&ss, len) < 0 || listen(l, 4) < 0)
        return sys_fail(r, "bind/listen");
    return l;
}

int tcp_connect(struct run *r, int l, int proto, const int *mss)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(l, (struct sockaddr *)&ss, &len) < 0)
        return sys_fail(r, "getsockname");
    close_owned(r, &r->peer); /* a new client replaces the old peer, as in Rust */
    if ((r->peer = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, proto)) < 0)
        return sys_fail(r, "socket (client)");
    if (proto != IPPROTO_MPTCP) {
        if (mss && set_int(r, r->peer, IPPROTO_TCP, TCP_MAXSEG, *mss, "TCP_MAXSEG (client)") < 0)
            return -1;
        if (set_int(r, r->peer, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY") < 0)
            return -1;
    }
    if (connect(r->peer, (struct sockaddr *)&ss, len) < 0)
        return sys_fail(r, "connect");
    return 0;
}

int accept_owned(struct run *r, int l)
{
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0)
        return sys_fail(r, "accept");
    return own(r, s) < 0 ? -1 : s;
}

/* A connected stream pair over loopback (common::tcp_pair_opts): the accepted side is r->fd,
 * the client the peer; the listener is gone once it has accepted. */
static int tcp_pair(struct run *r, int family, int proto, const int *mss, const int *rcvbuf)
{
    int l = tcp_listener(r, family, proto, mss, rcvbuf);
    if (l < 0 || tcp_connect(r, l, proto, mss) < 0)
        return -1;
    int s = accept_owned(r, l);
    if (s < 0)
        return -1;
    drop_owned(r, l);
    r->fd = s;
    return r->why[0] ? -1 : 0;
}

static int unix_pair(struct run *r)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sys_fail(r, "socketpair");
    r->peer = sv[1];
    r->fd = sv[0];
    return own(r, sv[0]);
}

int udp_pair(struct run *r, int family, bool connect_fd, struct sockaddr_storage *to,
             socklen_t *tolen)
{
    struct sockaddr_storage a;
    socklen_t la = loopback(family, &a);
    int s = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return sys_fail(r, "udp socket");
    if (own(r, s) < 0)
        return -1;
    r->fd = s;
    if ((r->peer = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        return sys_fail(r, "udp socket");
    *tolen = loopback(family, to);
    if (bind(s, (struct sockaddr *)&a, la) < 0 ||
        bind(r->peer, (struct sockaddr *)to, *tolen) < 0 ||
        getsockname(s, (struct sockaddr *)&a, &la) < 0 ||
        getsockname(r->peer, (struct sockaddr *)to, tolen) < 0)
        return sys_fail(r, "udp bind/getsockname");
    if ((connect_fd && connect(s, (struct sockaddr *)to, *tolen) < 0) ||
        connect(r->peer, (struct sockaddr *)&a, la) < 0)
        return sys_fail(r, "udp connect");
    return 0;
}

int common_fixture(struct run *r, const char *t, const int *mss, const int *rcvbuf)
{
    if (strcmp(t, "closed") == 0) {
        r->fd = CLOSED_FD;
        return 0;
    }
    if (strcmp(t, "file") == 0) {
        int f = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        if (f < 0)
            return sys_fail(r, "open /proc/self/stat");
        r->fd = f;
        return own(r, f);
    }
    if (strcmp(t, "tcp4") == 0)
        return tcp_pair(r, AF_INET, 0, mss, rcvbuf);
    if (strcmp(t, "tcp6") == 0)
        return tcp_pair(r, AF_INET6, 0, mss, rcvbuf);
    if (strcmp(t, "mptcp4") == 0)
        return tcp_pair(r, AF_INET, IPPROTO_MPTCP, NULL, NULL);
    if (strcmp(t, "unix") == 0)
        return unix_pair(r);
    return FIXTURE_UNKNOWN;
}

int reset_peer(struct run *r, uint64_t settle_ms)
{
    if (need_peer(r) < 0)
        return -1;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    if (setsockopt(r->peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0)
        sys_fail(r, "SO_LINGER");
    close_owned(r, &r->peer);
    if (r->why[0])
        return -1;
    sleep_ms(settle_ms);
    return 0;
}

static void close_fds(struct run *r)
{
    for (size_t i = 0; i < r->nowned; i++)
        close_owned(r, &r->owned[i]);
    r->nowned = 0;
    close_owned(r, &r->peer);
}

void end_fds(struct run *r, bool failed)
{
    if (!failed) {
        join_writers(r, true);
        close_fds(r);
        return;
    }
    /* Its error (ENOTCONN after a shutdown_peer, say) is not news: fail() keeps the first
     * failure. */
    if (r->peer >= 0 && shutdown(r->peer, SHUT_RDWR) < 0)
        sys_fail(r, "shutdown(peer)");
    close_fds(r);
    join_writers(r, false);
}

/* ---- writer threads -------------------------------------------------------------------- */

void writer_fail(struct writer *w, const char *fmt, ...)
{
    if (w->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

void write_later(struct writer *w)
{
    char eb[64];
    sleep_ms(w->ms);
    int e = write_all(w->fd, w->data, w->len);
    if (e)
        writer_fail(w, "write: %s", errno_text(e, eb, sizeof eb));
}

void free_writer(struct writer *w)
{
    free(w->data);
    free(w->sizes);
    free(w->before);
    free(w);
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    char eb[64];
    w->work(w);
    /* Drop the dup as soon as the work is done, as the Rust thread does: a later reset_peer
     * must really close the peer's socket. */
    if (close(w->fd) < 0)
        writer_fail(w, "close: %s", errno_text(errno, eb, sizeof eb));
    w->fd = -1;
    return NULL;
}

struct writer *new_writer(void (*work)(struct writer *), const char *what, unsigned char *data,
                          size_t len)
{
    struct writer *w = xmalloc(sizeof *w);
    *w = (struct writer){.fd = -1, .work = work, .what = what, .data = data, .len = len};
    return w;
}

int start_writer(struct run *r, struct writer *w)
{
    int fd = r->peer >= 0 ? fcntl(r->peer, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
        int e = errno;
        for (size_t i = 0; i < w->nbefore; i++) /* never happens: shutdown_peer checks */
            free_writer(w->before[i]);
        free_writer(w);
        if (r->peer < 0)
            return fail(r, "no peer");
        errno = e;
        return sys_fail(r, "dup peer");
    }
    w->fd = fd;
    int rc = pthread_create(&w->tid, NULL, writer_main, w);
    if (rc != 0) {
        if (close(fd) < 0)
            perror("close");
        free_writer(w);
        errno = rc;
        return sys_fail(r, "pthread_create");
    }
    r->writers = xrealloc(r->writers, (r->nwriters + 1) * sizeof *r->writers);
    r->writers[r->nwriters++] = w;
    return 0;
}

int join_writer(struct writer *w, char *why, size_t cap)
{
    char eb[64];
    why[0] = '\0';
    int rc = pthread_join(w->tid, NULL);
    if (rc != 0) {
        /* The thread may still use `w`: leak it (LSan will say so) rather than free it. */
        snprintf(why, cap, "pthread_join: %s", errno_text(rc, eb, sizeof eb));
        return -1;
    }
    if (w->err[0])
        snprintf(why, cap, "writer of `%s` failed: %s", w->what, w->err);
    free_writer(w);
    return 0;
}

void join_writers(struct run *r, bool report)
{
    char why[WHY_MAX];
    for (size_t i = 0; i < r->nwriters; i++) {
        /* A failed join is news even after a failure; a writer's own error only with
         * `report` (after a failure it is a consequence of the teardown). */
        int rc = join_writer(r->writers[i], why, sizeof why);
        if (why[0] && (rc < 0 || report))
            fail(r, "%s", why);
    }
    free(r->writers);
    r->writers = NULL;
    r->nwriters = 0;
}

/* ---- shared ops ------------------------------------------------------------------------ */

int op_peer_send(struct run *r, const cJSON *step)
{
    const char *d = NULL;
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

int op_peer_send_pattern(struct run *r, const cJSON *step)
{
    size_t len;
    if (need_size(r, step, "len", &len) < 0)
        return -1;
    unsigned char *d = pattern(r->sent, len);
    r->sent += len;
    return start_writer(r, new_writer(write_later, "send_pattern", d, len));
}

int op_wait_queued(struct run *r, const cJSON *step)
{
    size_t want;
    int n;
    if (need_size(r, step, "bytes", &want) < 0)
        return -1;
    uint64_t deadline = now_ns() + (uint64_t)WAIT_QUEUED_MS * 1000000u;
    for (;;) {
        if (ioctl(r->fd, FIONREAD, &n) < 0)
            return sys_fail(r, "ioctl(FIONREAD)");
        if (n >= 0 && (size_t)n >= want)
            return 0;
        if (now_ns() >= deadline)
            return fail(r, "only %d of %zu bytes arrived", n, want);
        sleep_ms(1);
    }
}

/* ---- the table ------------------------------------------------------------------------- */

struct table {
    cJSON *root;
    char *text; /* the JSON text: LITERALS point into it */
    const cJSON *scenarios;
};

cJSON *refuse_first_new(const cJSON *steps, const cJSON *err)
{
    int n = cJSON_GetArraySize(steps);
    for (int i = 0; i < n; i++) {
        const cJSON *step = cJSON_GetArrayItem(steps, i), *op = get(step, "op");
        if (!json_is(op, "new") && !json_is(op, "init"))
            continue;
        const cJSON *kind = get(step, "kind");
        cJSON *s = must(cJSON_Duplicate(steps, true));
        while (cJSON_GetArraySize(s) > i + 1)
            cJSON_DeleteItemFromArray(s, i + 1);
        cJSON *repl = must(cJSON_CreateObject());
        must(cJSON_AddStringToObject(repl, "op", op->valuestring));
        if (!cJSON_AddItemToObject(repl, "expect_err", must(cJSON_Duplicate(err, true))) ||
            (kind && !cJSON_AddItemToObject(repl, "kind", must(cJSON_Duplicate(kind, true)))) ||
            !cJSON_ReplaceItemInArray(s, i, repl))
            must(NULL);
        return s;
    }
    return NULL;
}

/* Reads the whole file; NULL (with a message) on failure. */
static char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "%s: %s: %s\n", RUNNER->prog, path, strerror(errno));
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
            fprintf(stderr, "%s: read %s: %s\n", RUNNER->prog, path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    if (close(fd) < 0)
        fprintf(stderr, "%s: close %s: %s\n", RUNNER->prog, path, strerror(errno));
    *len = n;
    return buf;
}

/* Parses the table and finds its parts; prints why and returns -1 if it is malformed. */
static int load_table(const char *path, struct table *t)
{
    const char *prog = RUNNER->prog;
    size_t len;
    t->text = read_file(path, &len);
    if (!t->text)
        return -1;
    t->root = cJSON_ParseWithLength(t->text, len);
    if (!t->root) {
        const char *at = cJSON_GetErrorPtr();
        fprintf(stderr, "%s: %s: bad JSON near byte %td\n", prog, path, at ? at - t->text : -1);
        return -1;
    }
    if (RUNNER->exact_numbers && !keep_literals(t->root, t->text, len)) {
        fprintf(stderr, "%s: %s: the number literals do not match cJSON's numbers\n", prog, path);
        return -1;
    }
    t->scenarios = get(t->root, "scenarios");
    if (!cJSON_IsArray(t->scenarios) || (RUNNER->table_ok && !RUNNER->table_ok(t->root))) {
        fprintf(stderr, "%s: %s: want %s\n", prog, path, RUNNER->table_wants);
        return -1;
    }
    return 0;
}

static void table_free(struct table *t)
{
    cJSON_Delete(t->root);
    free(t->text);
    free(LITERALS);
    t->root = NULL;
    t->text = NULL;
    LITERALS = NULL;
    NLITERALS = 0;
}

/* ---- one run (in the child) ------------------------------------------------------------ */

/* What the child tells the parent, in memory shared across the fork. The parent prints every
 * FAIL line, so that a child that fails, then hangs or crashes in teardown, still gives one
 * line with both facts. */
struct progress {
    volatile int step; /* where the child is: STEP_SETUP, a step index, or STEP_TEARDOWN */
    int failed_step;   /* where the first failure was (valid when why[0]) */
    char op[64];       /* that step's op */
    char why[WHY_MAX]; /* the first failure, "" if none */
    char skip[WHY_MAX]; /* why the run could not be made here, "" if it was */
};

/* Hands the run's first failure, at `step`, to the parent. */
static void record_failure(const struct run *r, struct progress *pg, int step, const char *op)
{
    pg->failed_step = step;
    snprintf(pg->op, sizeof pg->op, "%s", op);
    snprintf(pg->why, sizeof pg->why, "%s", r->why);
}

static int do_step(struct run *r, const cJSON *step)
{
    const cJSON *op = get(step, "op");
    if (!cJSON_IsString(op))
        return fail(r, "step has no `op`");
    for (size_t i = 0; i < RUNNER->nops; i++)
        if (strcmp(RUNNER->ops[i].name, op->valuestring) == 0)
            return RUNNER->ops[i].fn(r, step);
    return fail(r, "unknown op %s", op->valuestring);
}

/* Runs the steps until one fails; true if all passed. */
static bool run_steps(struct run *r, const struct table *t, const cJSON *sc, struct progress *pg)
{
    const cJSON *steps = get(sc, "steps"), *step;
    if (!cJSON_IsArray(steps)) {
        fail(r, "scenario has no steps");
        record_failure(r, pg, STEP_SETUP, "");
        return false;
    }
    cJSON *ruled = RUNNER->steps_for ? RUNNER->steps_for(t->root, steps, r) : NULL;
    const cJSON *todo = ruled ? ruled : steps;
    bool ok = true;
    int i = 0;
    cJSON_ArrayForEach(step, todo)
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
    cJSON_Delete(ruled);
    return ok;
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

/* Runs one scenario x transport (x variant); the first failure goes to pg->why. */
static void run_one(const struct table *t, const cJSON *sc, const char *transport,
                    const char *variant, struct progress *pg)
{
    static bool fds_before[FD_SCAN_MAX];
    struct run r = {.name = get(sc, "name")->valuestring, .transport = transport,
                    .variant = variant, .fd = -1, .peer = -1};
    r.st = memset(xmalloc(RUNNER->state_size), 0, RUNNER->state_size ? RUNNER->state_size : 1);
    pg->step = STEP_SETUP;
    if (RUNNER->check_fds && open_fds(fds_before) < 0)
        sys_fail(&r, "opendir /proc/self/fd");
    else
        RUNNER->setup(&r, sc);
    bool ok = !r.why[0];
    if (!ok)
        record_failure(&r, pg, STEP_SETUP, "");
    else if (r.skip[0])
        snprintf(pg->skip, sizeof pg->skip, "%s", r.skip);
    else
        ok = run_steps(&r, t, sc, pg);
    pg->step = STEP_TEARDOWN;
    RUNNER->teardown(&r, !ok);
    free(r.st);
    if (ok && RUNNER->check_fds)
        check_fds(&r, fds_before);
    if (ok && r.why[0])
        record_failure(&r, pg, STEP_TEARDOWN, "");
}

/* ---- the parent: one child per run ---------------------------------------------------- */

/* "[name | transport | variant]", or "[name | transport]" for a table without variants. */
static void print_label(const char *name, const char *transport, const char *variant)
{
    printf("[%s | %s", name, transport);
    if (variant)
        printf(" | %s", variant);
    printf("]");
}

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
        printf("timed out after %u s", RUNNER->timeout_s);
    else if (WIFSIGNALED(status))
        printf("killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        printf("exited with status %d (a sanitizer report on stderr?)", WEXITSTATUS(status));
}

/* One line for a failed run: the recorded failure, then how the child ended if that was
 * abnormal (e.g. it failed at step 3, then hung while tearing down). */
static void print_failure(const char *name, const char *t, const char *v, int status,
                          const struct progress *pg)
{
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("FAIL ");
    print_label(name, t, v);
    printf(" ");
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

/* A SKIP line, also appended to $LOWCOPY_SKIP_LOG for scripts/test.sh. */
static void print_skip(const char *name, const char *t, const char *v, const char *why)
{
    printf("SKIP ");
    print_label(name, t, v);
    printf(": %s\n", why);
    const char *log = getenv("LOWCOPY_SKIP_LOG");
    FILE *f = log && *log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%s: [%s | %s%s%s]: %s\n", RUNNER->prog, name, t, v ? " | " : "", v ? v : "",
                why);
        fclose(f);
    }
}

/* A FAIL line for a run the parent could not run or wait for. */
static int parent_failure(const char *name, const char *t, const char *v, const char *what)
{
    int e = errno;
    printf("FAIL ");
    print_label(name, t, v);
    printf(" %s: %s\n", what, strerror(e));
    return 1;
}

/* Forks a child for the run; returns 0 if it passed. */
static int run_forked(struct table *t, const cJSON *sc, const char *transport,
                      const char *variant, struct progress *pg)
{
    const char *name = get(sc, "name")->valuestring;
    memset(pg, 0, sizeof *pg);
    pg->step = STEP_SETUP;
    fflush(stdout); /* else the child would print the parent's buffered lines again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return parent_failure(name, transport, variant, "setup: fork");
    if (pid == 0) {
        /* The verdict travels in *pg; exit status 0 only says the child ended normally, so
         * that any other status (ASan and LSan exit with 1) is never taken for a verdict. */
        alarm(RUNNER->timeout_s);
        run_one(t, sc, transport, variant, pg);
        table_free(t); /* the child's copy: LeakSanitizer checks at exit */
        exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return parent_failure(name, transport, variant, "waitpid");
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !pg->why[0] && pg->skip[0]) {
        print_skip(name, transport, variant, pg->skip);
        return 2;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !pg->why[0])
        return 0;
    print_failure(name, transport, variant, status, pg);
    return 1;
}

struct tally {
    int runs, passed, failed, skipped;
};

/* One combination of a scenario: counted, and run if its names are strings. */
static void run_combination(struct table *t, const cJSON *sc, const cJSON *tr, const cJSON *v,
                            struct progress *pg, struct tally *n)
{
    n->runs++;
    if (!cJSON_IsString(tr) || (v && !cJSON_IsString(v))) {
        printf("FAIL [%s] a transport%s%s that is not a string\n", get(sc, "name")->valuestring,
               v ? " or " : "", v ? RUNNER->axis_one : "");
        n->failed++;
        return;
    }
    switch (run_forked(t, sc, tr->valuestring, v ? v->valuestring : NULL, pg)) {
    case 0:
        n->passed++;
        break;
    case 2:
        n->skipped++;
        break;
    default:
        n->failed++;
    }
}

/* Every transport (x every mode or backend, when the table has them) of one scenario. */
static void run_scenario(struct table *t, const cJSON *sc, struct progress *pg, struct tally *n)
{
    const char *axis = RUNNER->axis;
    const cJSON *name = get(sc, "name"), *ts = get(sc, "transports");
    const cJSON *vs = axis ? get(sc, axis) : NULL, *tr, *v;
    if (!cJSON_IsString(name) || !cJSON_IsArray(ts) || (axis && !cJSON_IsArray(vs))) {
        if (axis)
            printf("FAIL a scenario without name, transports or %s\n", axis);
        else
            printf("FAIL a scenario without name or transports\n");
        n->runs++;
        n->failed++;
        return;
    }
    cJSON_ArrayForEach(tr, ts)
    {
        if (!axis) {
            run_combination(t, sc, tr, NULL, pg, n);
            continue;
        }
        cJSON_ArrayForEach(v, vs) run_combination(t, sc, tr, v, pg, n);
    }
}

/* perror() under the runner's name. */
static void prog_error(const char *what)
{
    int e = errno;
    fprintf(stderr, "%s: %s: %s\n", RUNNER->prog, what, strerror(e));
}

/* A write to a closed peer must be EPIPE for the writer, as in Rust, not a killing SIGPIPE
 * (lowcopy's own sends use MSG_NOSIGNAL; a peer's plain write does not). */
static int ignore_sigpipe(void)
{
    struct sigaction sa = {.sa_handler = SIG_IGN};
    if (sigemptyset(&sa.sa_mask) < 0 || sigaction(SIGPIPE, &sa, NULL) < 0) {
        prog_error("sigaction(SIGPIPE)");
        return -1;
    }
    return 0;
}

static bool bad_usage(int argc)
{
    return RUNNER->default_path ? argc > 2 : argc != 2;
}

/* $LOWCOPY_SCENARIO, NULL when unset or empty. */
static const char *scenario_filter(void)
{
    const char *only = getenv("LOWCOPY_SCENARIO");
    return only && *only ? only : NULL;
}

int run_table(const struct runner *spec, int argc, char **argv)
{
    RUNNER = spec;
    if (bad_usage(argc)) {
        fprintf(stderr, spec->default_path ? "usage: %s [PATH/TO/%s]\n" : "usage: %s PATH/TO/%s\n",
                argv[0], spec->table);
        return 2;
    }
    const char *path = argc == 2 ? argv[1] : spec->default_path;
    struct table t = {0};
    struct tally n = {0};
    struct progress *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED) {
        prog_error("mmap");
        return 1;
    }
    if (ignore_sigpipe() < 0 || load_table(path, &t) < 0) {
        n.failed = 1; /* a table that cannot run is a failure, with the summary line */
    } else {
        /* LOWCOPY_SCENARIO=substring: only the scenarios whose name contains it, and then no
         * minimum number of runs (CONTRIBUTING.md). */
        const char *only = scenario_filter();
        const cJSON *sc;
        int matched = 0;
        cJSON_ArrayForEach(sc, t.scenarios)
        {
            const cJSON *nm = get(sc, "name");
            if (only && !(cJSON_IsString(nm) && strstr(nm->valuestring, only)))
                continue;
            matched++;
            run_scenario(&t, sc, pg, &n);
        }
        if (only)
            printf("LOWCOPY_SCENARIO=\"%s\": %d scenarios match, %d runs\n", only, matched,
                   n.runs);
        else if (n.runs < MIN_RUNS)
            printf("table: only %d runs, want at least %d (did the table stop expanding?)\n",
                   n.runs, MIN_RUNS);
    }
    table_free(&t);
    if (munmap(pg, sizeof *pg) < 0)
        prog_error("munmap");
    printf("%s: %d passed, %d failed, %d skipped\n", spec->prog, n.passed, n.failed, n.skipped);
    return n.failed == 0 && (n.runs >= MIN_RUNS || scenario_filter()) ? 0 : 1;
}

int elapsed_bounds(struct run *r, const cJSON *step, uint64_t took_ns)
{
    uint64_t ms;
    if (json_u64(get(step, "min_ms"), &ms) && took_ns < ms * 1000000u)
        return fail(r, "returned after %.1f ms, want >= %" PRIu64 " ms", took_ns / 1e6, ms);
    if (json_u64(get(step, "max_ms"), &ms) && took_ns > ms * 1000000u)
        return fail(r, "returned after %.1f ms, want <= %" PRIu64 " ms", took_ns / 1e6, ms);
    return 0;
}
