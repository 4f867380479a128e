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
 * Two things the Rust runner reads directly have no C function, so they are observed here:
 * - expect_window (ZeroCopyReceiver::window): the C ABI has no accessor. The window is the
 *   receiver's read-only MAP_SHARED mapping of the socket, so it is read from /proc/self/maps
 *   (the one mapping whose device and inode are the socket's).
 * - numbers: cJSON keeps numbers as doubles, which cannot hold u64::MAX (the table passes
 *   18446744073709551615). The runner keeps every number's literal as written and reads
 *   integers from it exactly as serde_json's as_u64 / as_i64 do (a fraction or exponent is
 *   not an integer; out of range is not one either).
 * Besides the table's expectations, each receive checks the C contract the Rust types make
 * implicit: the return equals chunk.len, and end of stream is {NULL, 0, 0}.
 *
 * Each scenario x transport runs in a forked child: a failing step, a crash or a hang (alarm)
 * ends that run only, and the next run starts from a clean process. The child hands its first
 * failure to the parent through shared memory; the parent prints it, with how the child ended
 * if it crashed or hung after that. After teardown the child also checks that every fd opened
 * during the run is closed again.
 * Output: one "FAIL [...]" line per failed run, then "c-rx-scenarios: N passed, M failed";
 * exit status 0 only when every run passed and there were more than 50 of them (the Rust
 * runner's floor; the table expands to 61 runs today).
 *
 * Build (from the repository root, after `make lib`):
 *   PKG_CONFIG_PATH=build/lib/pkgconfig gcc -Wall -Wextra -Werror -O1 -g \
 *     -fsanitize=address,undefined $(pkg-config --cflags lowcopy libcjson) \
 *     tests/c/rx_scenarios.c -o build/bin/c_rx_scenarios \
 *     $(pkg-config --libs lowcopy libcjson) -lpthread -Wl,-rpath,$PWD/build/lib
 * Usage: c_rx_scenarios [PATH/TO/rx.json]   (default: tests/scenarios/rx.json)
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
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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
#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

enum {
    RUN_TIMEOUT_S = 60,   /* a run still going after this is a hang: SIGALRM ends it (the
                             table's longest wait is a 30 s recv_atleast timeout) */
    RCVTIMEO_S = 3,       /* blocking steps that wait wrongly fail with EAGAIN, not hang */
    WAIT_QUEUED_MS = 5000,/* common::wait_queued's deadline */
    RESET_SETTLE_MS = 20, /* reset_peer: time for the RST to arrive, as the Rust runner */
    ZC_ALIGN = 4096,      /* common::send_zerocopy rounds its copy to this */
    ZC_DRAIN_EVERY = 16,  /* ... and reads the error queue once per this many sends */
    MIN_RUNS = 51,        /* as the Rust runner's `runs > 50`: the table still expands */
    CLOSED_FD = 1000000,  /* "closed": a number no fd has, the kernel answers EBADF */
    MAX_OWNED = 16,       /* fds a run owns at once (pair socket, listener, accepted ones) */
    FD_SCAN_MAX = 4096,   /* fds checked for leaks */
    STEP_SETUP = -1,
    STEP_TEARDOWN = -2,
};

/* ---- small utilities ------------------------------------------------------------------ */

/* Allocation failure in a test runner is not a behaviour to report: stop loudly. */
static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "c-rx-scenarios: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

static void *xmalloc(size_t n) { return xrealloc(NULL, n); }

/* Zeroed room for `len` bytes (the Rust runner's vec![0; len]); never NULL, so that len 0
 * tests lowcopy's length check, not its NULL check. */
static unsigned char *room(size_t len)
{
    unsigned char *p = calloc(len ? len : 1, 1);
    if (!p) {
        fprintf(stderr, "c-rx-scenarios: out of memory (%zu bytes)\n", len);
        abort();
    }
    return p;
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

/* Byte at stream position p of the test pattern (as common::pattern_byte). Consecutive bytes
 * differ by 131 mod 251, which the loops below use instead of a division per byte. */
static unsigned pattern_byte(uint64_t p) { return (unsigned)((p * 131 + 7) % 251); }

static unsigned pattern_next(unsigned b) { return b + 131 >= 251 ? b + 131 - 251 : b + 131; }

/* `len` pattern bytes from stream position `from` (common::pattern); never NULL. */
static unsigned char *pattern(uint64_t from, size_t len)
{
    unsigned char *d = xmalloc(len ? len : 1);
    unsigned b = pattern_byte(from);
    for (size_t i = 0; i < len; i++, b = pattern_next(b))
        d[i] = (unsigned char)b;
    return d;
}

/* Index of the first byte of `d` that is not the pattern from stream position `from`, or n. */
static size_t pattern_mismatch(const unsigned char *d, size_t n, uint64_t from)
{
    unsigned b = pattern_byte(from);
    for (size_t i = 0; i < n; i++, b = pattern_next(b))
        if (d[i] != b)
            return i;
    return n;
}

/* The errno names the table may use: exactly the Rust runner's ename (common::errno_name's
 * list plus ENOTCONN and EINTR), so that a name the Rust runner cannot match fails here too. */
static const struct {
    const char *name;
    int value;
} ERRNOS[] = {
    {"EAGAIN", EAGAIN},         {"EBADF", EBADF},           {"EINVAL", EINVAL},
    {"ENOTSOCK", ENOTSOCK},     {"EOPNOTSUPP", EOPNOTSUPP}, {"EOVERFLOW", EOVERFLOW},
    {"EMSGSIZE", EMSGSIZE},     {"ECONNRESET", ECONNRESET}, {"EPIPE", EPIPE},
    {"ETIMEDOUT", ETIMEDOUT},   {"EBUSY", EBUSY},           {"ENOBUFS", ENOBUFS},
    {"ECONNREFUSED", ECONNREFUSED}, {"ENOTCONN", ENOTCONN}, {"EINTR", EINTR},
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

/* Every number node of the table with its literal as written (pointing into the table's text,
 * kept until the end): cJSON's double cannot tell 18446744073709551615 from 2^64. */
static struct literal {
    const cJSON *node;
    const char *text;
    size_t len;
} *LITERALS;
static size_t NLITERALS;

static const cJSON *get(const cJSON *obj, const char *key)
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

/* Value::as_u64: a non-negative integer (-0 included: serde_json makes it 0). */
static bool json_u64(const cJSON *v, uint64_t *out)
{
    const struct literal *l;
    bool neg;
    uint64_t mag;
    if (!cJSON_IsNumber(v) || !(l = literal_of(v)) || !literal_integer(l, &neg, &mag))
        return false;
    if (neg && mag != 0)
        return false;
    *out = mag;
    return true;
}

/* Value::as_i64. */
static bool json_i64(const cJSON *v, int64_t *out)
{
    const struct literal *l;
    bool neg;
    uint64_t mag;
    if (!cJSON_IsNumber(v) || !(l = literal_of(v)) || !literal_integer(l, &neg, &mag))
        return false;
    if (!neg) {
        if (mag > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX + 1)
            return false;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    }
    return true;
}

/* `v.as_bool() == Some(true)`. */
static bool json_true(const cJSON *v) { return cJSON_IsTrue(v); }

static bool json_is(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
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

/* ---- one run's state ------------------------------------------------------------------- */

enum wkind { W_WRITE, W_TRICKLE, W_ZEROCOPY, W_SHUTDOWN };

/* A writer thread: the Rust runner's std::thread that owns a dup of the peer. */
struct writer {
    pthread_t tid;
    enum wkind kind;
    int fd;                  /* the thread's own dup of the peer; the thread closes it */
    uint64_t ms;             /* W_WRITE: delay first; W_TRICKLE: pause after each piece */
    size_t piece;            /* W_TRICKLE: bytes per piece */
    unsigned char *data;
    size_t len;
    size_t *sizes, nsizes;   /* W_ZEROCOPY: send sizes, cycling */
    struct writer **before;  /* W_SHUTDOWN: the writers it joins first (owned) */
    size_t nbefore;
    const char *what;        /* the op that started it, for messages */
    char err[256];           /* why it failed, "" if it did not */
};

struct run {
    const char *name, *transport; /* the run's context, for messages */
    int fd;                 /* the fd under test (CLOSED_FD for "closed", never closed here) */
    int owned[MAX_OWNED];   /* fds the run owns besides the peer (the Rust runner's `fds`) */
    size_t nowned;
    int listener;           /* one of `owned`, or -1 */
    int peer;               /* the writing end; -1 if none or after reset_peer */
    bool has_mss;           /* TCP_MAXSEG for the clients `accept` connects */
    int mss;
    lowcopy_zcrx *zcrx;
    uint64_t sent;          /* stream bytes the peer was given to send */
    uint64_t received;      /* stream bytes received and checked */
    struct writer **writers;
    size_t nwriters;
    char why[1024];         /* the first failure, empty while all is well */
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

/* The Rust runner's u(k): `step[k].as_u64()`, a failure when missing. */
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

static int need_peer(struct run *r)
{
    return r->peer >= 0 ? 0 : fail(r, "no peer");
}

static int need_zcrx(struct run *r, const char *op)
{
    return r->zcrx ? 0 : fail(r, "%s before zcrx_new (or after zcrx_free)", op);
}

/* ---- fd helpers ------------------------------------------------------------------------ */

/* Writes all of `d`; returns 0 or the errno that stopped it (std's write_all). */
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

/* common::set_timeval for SO_RCVTIMEO. */
static int set_rcvtimeo(struct run *r, int fd, uint64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
        return sys_fail(r, "setsockopt(SO_RCVTIMEO)");
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

/* Takes `fd` into the run (closed at teardown); -1 and closes it if there is no room. */
static int own(struct run *r, int fd)
{
    if (r->nowned == MAX_OWNED) {
        close_owned(r, &fd);
        return fail(r, "more than %d fds in one run", MAX_OWNED);
    }
    r->owned[r->nowned++] = fd;
    return 0;
}

/* ---- writer threads -------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static void werr(struct writer *w, const char *fmt, ...)
{
    if (w->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

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
        werr(w, "send_zerocopy: no sizes");
        return;
    }
    if (setsockopt(w->fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) < 0) {
        werr(w, "SO_ZEROCOPY: %s", errno_text(errno, eb, sizeof eb));
        return;
    }
    size_t maplen = ((w->len ? w->len : 1) + ZC_ALIGN - 1) / ZC_ALIGN * ZC_ALIGN;
    unsigned char *base =
        mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        werr(w, "mmap: %s", errno_text(errno, eb, sizeof eb));
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
            werr(w, "zerocopy send after %zu of %zu bytes: %s", off, w->len,
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
        werr(w, "munmap: %s", errno_text(errno, eb, sizeof eb));
}

static void free_writer(struct writer *w)
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
    int e;
    switch (w->kind) {
    case W_WRITE:
        sleep_ms(w->ms);
        if ((e = write_all(w->fd, w->data, w->len)))
            werr(w, "write: %s", errno_text(e, eb, sizeof eb));
        break;
    case W_TRICKLE:
        /* data.chunks(piece): each piece written, then a pause (after the last one too). */
        for (size_t off = 0; off < w->len; off += w->piece) {
            size_t n = w->len - off < w->piece ? w->len - off : w->piece;
            if ((e = write_all(w->fd, w->data + off, n))) {
                werr(w, "write after %zu bytes: %s", off, errno_text(e, eb, sizeof eb));
                break;
            }
            sleep_ms(w->ms);
        }
        break;
    case W_ZEROCOPY:
        send_zerocopy(w);
        break;
    case W_SHUTDOWN:
        /* After the bytes still being written: join their writers first. */
        for (size_t i = 0; i < w->nbefore; i++) {
            struct writer *b = w->before[i];
            int rc = pthread_join(b->tid, NULL);
            if (rc != 0) {
                werr(w, "pthread_join: %s", errno_text(rc, eb, sizeof eb));
                continue; /* the thread may still use `b`: leak it */
            }
            if (b->err[0])
                werr(w, "writer of `%s` failed: %s", b->what, b->err);
            free_writer(b);
        }
        /* A writer before it failed: the Rust thread panics at its join, before shutting
         * down. */
        if (!w->err[0] && shutdown(w->fd, SHUT_WR) < 0)
            werr(w, "shutdown(peer, SHUT_WR): %s", errno_text(errno, eb, sizeof eb));
        break;
    }
    /* Drop the dup as soon as the work is done, as the Rust thread does: a later reset_peer
     * must really close the peer's socket. */
    if (close(w->fd) < 0)
        werr(w, "close: %s", errno_text(errno, eb, sizeof eb));
    w->fd = -1;
    return NULL;
}

/* Starts `w` (taken over) on a dup of the peer; on failure frees it. */
static int start_writer(struct run *r, struct writer *w)
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

static struct writer *new_writer(enum wkind kind, const char *what, unsigned char *data,
                                 size_t len)
{
    struct writer *w = xmalloc(sizeof *w);
    *w = (struct writer){.kind = kind, .fd = -1, .data = data, .len = len, .what = what};
    return w;
}

/* Joins every writer; with `report`, a writer's failure fails the run (the Rust runner's
 * join().unwrap()). */
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
        if (report && w->err[0])
            fail(r, "writer of `%s` failed: %s", w->what, w->err);
        free_writer(w);
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

/* common::tcp_listener: TCP_MAXSEG and a locked SO_RCVBUF on the listener (before the
 * handshake, so that accepted sockets have them from the start), bound to loopback, listen(4).
 * Owned by the run; returns it or -1. */
static int tcp_listener(struct run *r, int family, int proto, const int *mss, const int *rcvbuf)
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

/* common::tcp_connect: a client of the listener `l` (TCP_MAXSEG before connect, NODELAY on
 * TCP; MPTCP gets neither, as common::mptcp_pair). Becomes the run's peer. */
static int tcp_connect(struct run *r, int l, int proto, const int *mss)
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

/* accept(2) on `l`; the socket is owned by the run. Returns it or -1. */
static int accept_owned(struct run *r, int l)
{
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0)
        return sys_fail(r, "accept");
    return own(r, s) < 0 ? -1 : s;
}

/* Drops the listener once its one connection is accepted (common::tcp_pair_opts). */
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

/* A connected stream pair over loopback (tcp4, tcp6, mptcp4): the accepted side is the fd. */
static int inet_pair(struct run *r, int family, int proto, const int *mss, const int *rcvbuf)
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

/* common::udp_pair: two connected UDP sockets on IPv4 loopback. */
static int udp_pair(struct run *r)
{
    struct sockaddr_storage a, b;
    socklen_t la, lb;
    int sa = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sa < 0)
        return sys_fail(r, "udp socket");
    if (own(r, sa) < 0)
        return -1;
    if ((r->peer = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        return sys_fail(r, "udp socket");
    la = loopback(AF_INET, &a);
    lb = loopback(AF_INET, &b);
    if (bind(sa, (struct sockaddr *)&a, la) < 0 || bind(r->peer, (struct sockaddr *)&b, lb) < 0 ||
        getsockname(sa, (struct sockaddr *)&a, &la) < 0 ||
        getsockname(r->peer, (struct sockaddr *)&b, &lb) < 0)
        return sys_fail(r, "udp bind/getsockname");
    if (connect(sa, (struct sockaddr *)&b, lb) < 0 ||
        connect(r->peer, (struct sockaddr *)&a, la) < 0)
        return sys_fail(r, "udp connect");
    r->fd = sa;
    return 0;
}

static bool is_tcp(const char *t) { return strcmp(t, "tcp4") == 0 || strcmp(t, "tcp6") == 0; }

static bool is_listener(const char *t)
{
    return strcmp(t, "listener4") == 0 || strcmp(t, "listener6") == 0;
}

/* The Rust runner's run_one setup: the fd under test, the scenario's options, and the 3 s
 * receive timeout on every socket under test (not on a listener, nor on a file). */
static int setup_fds(struct run *r, const cJSON *sc)
{
    const char *t = r->transport;
    int64_t v;
    int mss = 0, rcvbuf = 0;
    const int *pmss = NULL, *prcvbuf = NULL;
    if (json_i64(get(sc, "mss"), &v)) {
        mss = (int)v;
        pmss = &mss;
    }
    if (json_i64(get(sc, "rcvbuf_lock"), &v)) {
        rcvbuf = (int)v;
        prcvbuf = &rcvbuf;
    }
    r->has_mss = pmss != NULL;
    r->mss = mss;
    if (strcmp(t, "closed") == 0) {
        r->fd = CLOSED_FD;
        return 0;
    }
    if (strcmp(t, "file") == 0) {
        int f = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        if (f < 0)
            return sys_fail(r, "open /proc/self/stat");
        if (own(r, f) < 0)
            return -1;
        r->fd = f;
        return 0;
    }
    if (is_listener(t)) {
        int family = strcmp(t, "listener6") == 0 ? AF_INET6 : AF_INET;
        int l = tcp_listener(r, family, 0, pmss, prcvbuf);
        if (l < 0)
            return -1;
        r->listener = l;
        r->fd = l;
        return 0;
    }
    int rc;
    if (is_tcp(t))
        rc = inet_pair(r, strcmp(t, "tcp6") == 0 ? AF_INET6 : AF_INET, 0, pmss, prcvbuf);
    else if (strcmp(t, "mptcp4") == 0)
        rc = inet_pair(r, AF_INET, IPPROTO_MPTCP, NULL, NULL);
    else if (strcmp(t, "unix") == 0) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
            return sys_fail(r, "socketpair");
        r->peer = sv[1];
        rc = own(r, sv[0]);
        r->fd = sv[0];
    } else if (strcmp(t, "udp4") == 0)
        rc = udp_pair(r);
    else
        return fail(r, "unknown transport %s", t);
    if (rc < 0)
        return -1;
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
    char eb[64], gb[256], wb[256];
    *n = 0;
    const cJSON *e = get(step, "expect_err");
    if (e) {
        if (!cJSON_IsString(e))
            return fail(r, "expect_err is not a string");
        if (ret >= 0)
            return fail(r, "want error %s, got %zd", e->valuestring, ret);
        const char *got = errno_name((int)-ret);
        if (!got || strcmp(got, e->valuestring) != 0)
            return fail(r, "want error %s, got %s", e->valuestring,
                        errno_text((int)-ret, eb, sizeof eb));
        return 0;
    }
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
    if (want) {
        if (!cJSON_IsString(want))
            return fail(r, "expect is not a string");
        size_t wl = strlen(want->valuestring);
        if (got != wl || (got > 0 && memcmp(data, want->valuestring, got) != 0))
            return fail(r, "got %s, want %s", quote(data, got, gb, sizeof gb),
                        quote((const unsigned char *)want->valuestring, wl, wb, sizeof wb));
    }
    if (pat) {
        size_t i = pattern_mismatch(data, got, r->received);
        if (i < got)
            return fail(r,
                        "wrong bytes at stream position %" PRIu64 " (%zu bytes; first "
                        "difference at %" PRIu64 ": got 0x%02x, want 0x%02x)",
                        r->received, got, r->received + i, data[i],
                        pattern_byte(r->received + i));
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
    r->received += n;
    return 0;
}

/* Run::elapsed_bounds: "min_ms" / "max_ms" (ignored unless u64, as `as_u64`). */
static int elapsed_bounds(struct run *r, const cJSON *step, uint64_t took_ns)
{
    uint64_t ms;
    if (json_u64(get(step, "min_ms"), &ms) && took_ns < ms * 1000000u)
        return fail(r, "returned after %.1f ms, want >= %" PRIu64 " ms", took_ns / 1e6, ms);
    if (json_u64(get(step, "max_ms"), &ms) && took_ns > ms * 1000000u)
        return fail(r, "returned after %.1f ms, want <= %" PRIu64 " ms", took_ns / 1e6, ms);
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
    if (r->listener < 0)
        return fail(r, "not a listener");
    if (tcp_connect(r, r->listener, 0, r->has_mss ? &r->mss : NULL) < 0)
        return -1;
    int s = accept_owned(r, r->listener);
    if (s < 0)
        return -1;
    if (set_rcvtimeo(r, s, (uint64_t)RCVTIMEO_S * 1000) < 0)
        return -1;
    r->fd = s;
    return 0;
}

/* ---- ops: the peer --------------------------------------------------------------------- */

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
    return start_writer(r, new_writer(W_WRITE, "send_pattern", d, len));
}

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
    struct writer *w = new_writer(W_TRICKLE, "send_trickle", d, len);
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
    struct writer *w = new_writer(W_WRITE, "send_later", d, len);
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
    struct writer *w = new_writer(W_ZEROCOPY, "send_zc_pattern", d, len);
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

/* common::wait_queued: until SIOCINQ on the fd says `bytes` are queued, 5 s at most. */
static int op_wait_queued(struct run *r, const cJSON *step)
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
    struct writer *w = new_writer(W_SHUTDOWN, "shutdown_peer", NULL, 0);
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
    if (need_peer(r) < 0)
        return -1;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    if (setsockopt(r->peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0)
        sys_fail(r, "SO_LINGER");
    close_owned(r, &r->peer);
    if (r->why[0])
        return -1;
    sleep_ms(RESET_SETTLE_MS);
    return 0;
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

static int op_recv_atleast(struct run *r, const cJSON *step)
{
    size_t len, min;
    int64_t timeout;
    uint64_t v;
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
    uint64_t t0 = now_ns();
    ssize_t n = lowcopy_recv_atleast_stats(r->fd, buf, len, min, (int)timeout, &s);
    uint64_t took = now_ns() - t0;
    int rc = expect_data(r, step, n, buf, len);
    free(buf);
    if (rc < 0 || elapsed_bounds(r, step, took) < 0)
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
    if (json_u64(get(step, "lowat_changes"), &v) && s.lowat_changes != v)
        return fail(r, "SO_RCVLOWAT changes %" PRIu64 ", want %" PRIu64 ": " STATS_FMT,
                    s.lowat_changes, v, STATS_ARGS);
#undef STATS_FMT
#undef STATS_ARGS
    return 0;
}

/* ---- ops: zero-copy receive ------------------------------------------------------------ */

/* The size of the receiver's window, read from /proc/self/maps: the one mapping of the
 * socket `fd` (same device and inode). There is no lowcopy_zcrx_window(). */
static int socket_window(struct run *r, int fd, uint64_t *out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sys_fail(r, "fstat");
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return sys_fail(r, "open /proc/self/maps");
    char *line = NULL;
    size_t cap = 0, found = 0;
    uint64_t size = 0;
    while (getline(&line, &cap, f) > 0) {
        unsigned long long lo, hi, off, ino;
        unsigned maj, mnr;
        if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu", &lo, &hi, &off, &maj, &mnr, &ino) != 6)
            continue;
        if (ino != (unsigned long long)st.st_ino || makedev(maj, mnr) != st.st_dev)
            continue;
        found++;
        size = hi - lo;
    }
    free(line);
    fclose(f);
    if (found != 1)
        return fail(r, "%zu mappings of the socket in /proc/self/maps, want the receiver's one",
                    found);
    *out = size;
    return 0;
}

static int op_zcrx_new(struct run *r, const cJSON *step)
{
    uint64_t window;
    size_t n;
    lowcopy_zcrx_free(r->zcrx); /* the old receiver goes first, as `self.zcrx = None` */
    r->zcrx = NULL;
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
    r->zcrx = z;
    const cJSON *w = get(step, "expect_window");
    if (w) {
        uint64_t want, got;
        if (!json_u64(w, &want))
            return fail(r, "expect_window is not a u64");
        if (socket_window(r, r->fd, &got) < 0)
            return -1;
        if (got != want)
            return fail(r, "window %" PRIu64 " (mapped), want %" PRIu64, got, want);
    }
    return 0;
}

static int op_zcrx_free(struct run *r, const cJSON *step)
{
    (void)step;
    lowcopy_zcrx_free(r->zcrx);
    r->zcrx = NULL;
    return 0;
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
    int rc = lowcopy_zcrx_stats(r->zcrx, s);
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
 * usual expect/expect_ret/expect_err/expect_pattern, min_ms/max_ms. */
static int op_zcrx_recv(struct run *r, const cJSON *step)
{
    char eb[64];
    int flags = json_true(get(step, "dontwait")) ? MSG_DONTWAIT : 0;
    if (need_zcrx(r, "zcrx_recv") < 0)
        return -1;
    lowcopy_zcrx_chunk c;
    memset(&c, 0xa5, sizeof c); /* written only on success */
    uint64_t t0 = now_ns();
    ssize_t rc = lowcopy_zcrx_recv(r->zcrx, &c, flags);
    uint64_t took = now_ns() - t0;
    if (check_chunk(r, rc, &c) < 0)
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
        ssize_t rc = lowcopy_zcrx_recv(r->zcrx, &c, 0);
        if (rc < 0)
            return fail(r, "after %" PRIu64 " of %" PRIu64 " bytes: %s", got, bytes,
                        errno_text((int)-rc, eb, sizeof eb));
        if (check_chunk(r, rc, &c) < 0)
            return -1;
        if (rc == 0)
            return fail(r, "end of stream after %" PRIu64 " of %" PRIu64 " bytes", got, bytes);
        size_t i = pattern_mismatch(c.data, c.len, r->received + got);
        if (i < c.len)
            return fail(r,
                        "wrong bytes at stream position %" PRIu64 " (mapped %u, %zu bytes; first "
                        "difference at %" PRIu64 ": got 0x%02x, want 0x%02x)",
                        r->received + got, c.mapped, c.len, r->received + got + i, c.data[i],
                        pattern_byte(r->received + got + i));
        got += c.len;
    }
    if (got != bytes)
        return fail(r, "more bytes than expected: %" PRIu64 " of %" PRIu64, got, bytes);
    if (json_true(get(step, "expect_eof"))) {
        ssize_t rc = lowcopy_zcrx_recv(r->zcrx, &c, 0);
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
    r->received += bytes;
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
    static const char *const KEYS[] = {"value", "min", "max"};
    for (int k = 0; k < 3; k++) {
        if (!(w = get(step, KEYS[k])))
            continue;
        if (!json_u64(w, &v))
            return fail(r, "`%s` is not a u64", KEYS[k]);
        bool bad = k == 0 ? got != v : k == 1 ? got < v : got > v;
        if (bad)
            return fail(r, "%s %" PRIu64 ", want %s%" PRIu64 ": " ZSTATS_FMT, f, got,
                        k == 0 ? "" : k == 1 ? ">= " : "<= ", v, ZSTATS_ARGS(s));
    }
    return 0;
}

typedef int (*op_fn)(struct run *, const cJSON *);

static const struct {
    const char *name;
    op_fn fn;
} OPS[] = {
    {"set_rcvlowat", op_set_rcvlowat},
    {"expect_rcvlowat", op_expect_rcvlowat},
    {"expect_rcvbuf_min", op_expect_rcvbuf_min},
    {"accept", op_accept},
    {"send", op_send},
    {"send_pattern", op_send_pattern},
    {"send_trickle", op_send_trickle},
    {"send_later", op_send_later},
    {"send_zc_pattern", op_send_zc_pattern},
    {"send_datagrams", op_send_datagrams},
    {"wait_queued", op_wait_queued},
    {"sleep", op_sleep},
    {"shutdown_peer", op_shutdown_peer},
    {"reset_peer", op_reset_peer},
    {"recv_atleast", op_recv_atleast},
    {"read", op_read},
    {"set_rcvtimeo_ms", op_set_rcvtimeo_ms},
    {"set_nonblocking", op_set_nonblocking},
    {"set_peek_off", op_set_peek_off},
    {"expect_peek_off", op_expect_peek_off},
    {"peek", op_peek},
    {"zcrx_new", op_zcrx_new},
    {"zcrx_free", op_zcrx_free},
    {"zcrx_recv", op_zcrx_recv},
    {"zcrx_drain", op_zcrx_drain},
    {"zcrx_stat", op_zcrx_stat},
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
    char *text; /* the JSON text: LITERALS point into it */
    const cJSON *scenarios;
};

/* Hands the run's first failure, at `step`, to the parent. */
static void record_failure(const struct run *r, struct progress *pg, int step, const char *op)
{
    pg->failed_step = step;
    snprintf(pg->op, sizeof pg->op, "%s", op);
    snprintf(pg->why, sizeof pg->why, "%s", r->why);
}

/* Runs the steps until one fails; true if all passed. */
static bool run_steps(struct run *r, const cJSON *sc, struct progress *pg)
{
    const cJSON *steps = get(sc, "steps"), *step;
    if (!cJSON_IsArray(steps)) {
        fail(r, "scenario has no steps");
        record_failure(r, pg, STEP_SETUP, "");
        return false;
    }
    int i = 0;
    cJSON_ArrayForEach(step, steps)
    {
        pg->step = i;
        if (do_step(r, step) < 0 && !r->why[0])
            fail(r, "failed without saying why (a runner bug)");
        if (r->why[0]) {
            const cJSON *op = get(step, "op");
            record_failure(r, pg, i, cJSON_IsString(op) ? op->valuestring : "?");
            return false;
        }
        i++;
    }
    return true;
}

/* Ends the run as the Rust runner does: the receiver goes first, then the writers are joined
 * (a writer's failure fails the run), then the fds are closed. After a failure the fds go
 * before the join, so that a writer blocked on a full queue gets an error instead of hanging
 * it; shutting the peer's socket down wakes such a writer on every transport (closing our
 * end alone does not wake one on MPTCP). */
static void teardown(struct run *r, bool failed)
{
    lowcopy_zcrx_free(r->zcrx);
    r->zcrx = NULL;
    if (failed) {
        /* Its error (ENOTCONN after a shutdown_peer, say) is not news: fail() keeps the
         * first failure. */
        if (r->peer >= 0 && shutdown(r->peer, SHUT_RDWR) < 0)
            sys_fail(r, "shutdown(peer)");
        for (size_t i = 0; i < r->nowned; i++)
            close_owned(r, &r->owned[i]);
        close_owned(r, &r->peer);
        join_writers(r, false);
    } else {
        join_writers(r, true);
        for (size_t i = 0; i < r->nowned; i++)
            close_owned(r, &r->owned[i]);
        close_owned(r, &r->peer);
    }
    r->nowned = 0;
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

/* Runs one scenario x transport; the first failure goes to pg->why. */
static void run_one(const cJSON *sc, const char *transport, struct progress *pg)
{
    static bool fds_before[FD_SCAN_MAX];
    struct run r = {.name = get(sc, "name")->valuestring, .transport = transport,
                    .fd = CLOSED_FD, .listener = -1, .peer = -1};
    pg->step = STEP_SETUP;
    if (open_fds(fds_before) < 0)
        sys_fail(&r, "opendir /proc/self/fd");
    else
        setup_fds(&r, sc);
    bool ok = !r.why[0];
    if (!ok)
        record_failure(&r, pg, STEP_SETUP, "");
    else
        ok = run_steps(&r, sc, pg);
    pg->step = STEP_TEARDOWN;
    teardown(&r, !ok);
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
static void print_failure(const char *name, const char *t, int status, const struct progress *pg)
{
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("FAIL [%s | %s] ", name, t);
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

/* Forks a child for the run; returns 0 if it passed. */
static int run_forked(struct table *t, const cJSON *sc, const char *transport,
                      struct progress *pg)
{
    const char *name = get(sc, "name")->valuestring;
    memset(pg, 0, sizeof *pg);
    pg->step = STEP_SETUP;
    fflush(stdout); /* else the child would print the parent's buffered lines again */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL [%s | %s] setup: fork: %s\n", name, transport, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        /* The verdict travels in *pg; exit status 0 only says the child ended normally, so
         * that any other status (ASan and LSan exit with 1) is never taken for a verdict. */
        alarm(RUN_TIMEOUT_S);
        run_one(sc, transport, pg);
        table_free(t); /* the child's copy: LeakSanitizer checks at exit */
        exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            printf("FAIL [%s | %s] waitpid: %s\n", name, transport, strerror(errno));
            return 1;
        }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !pg->why[0])
        return 0;
    print_failure(name, transport, status, pg);
    return 1;
}

/* Reads the whole file; NULL (with a message) on failure. */
static char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "c-rx-scenarios: %s: %s\n", path, strerror(errno));
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
            fprintf(stderr, "c-rx-scenarios: read %s: %s\n", path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    if (close(fd) < 0)
        fprintf(stderr, "c-rx-scenarios: close %s: %s\n", path, strerror(errno));
    *len = n;
    return buf;
}

/* Parses the table and finds its parts; prints why and returns -1 if it is malformed. */
static int load_table(const char *path, struct table *t)
{
    size_t len;
    t->text = read_file(path, &len);
    if (!t->text)
        return -1;
    t->root = cJSON_ParseWithLength(t->text, len);
    if (!t->root) {
        const char *at = cJSON_GetErrorPtr();
        fprintf(stderr, "c-rx-scenarios: %s: bad JSON near byte %td\n", path,
                at ? at - t->text : -1);
        return -1;
    }
    if (!keep_literals(t->root, t->text, len)) {
        fprintf(stderr, "c-rx-scenarios: %s: the number literals do not match cJSON's numbers\n",
                path);
        return -1;
    }
    t->scenarios = get(t->root, "scenarios");
    if (!cJSON_IsArray(t->scenarios)) {
        fprintf(stderr, "c-rx-scenarios: %s: want `scenarios`\n", path);
        return -1;
    }
    return 0;
}

struct tally {
    int runs, passed, failed;
};

/* Every transport of one scenario (the table expands over nothing else). */
static void run_scenario(struct table *t, const cJSON *sc, struct progress *pg, struct tally *n)
{
    const cJSON *name = get(sc, "name"), *ts = get(sc, "transports"), *tr;
    if (!cJSON_IsString(name) || !cJSON_IsArray(ts)) {
        printf("FAIL a scenario without name or transports\n");
        n->runs++;
        n->failed++;
        return;
    }
    cJSON_ArrayForEach(tr, ts)
    {
        n->runs++;
        if (!cJSON_IsString(tr)) {
            printf("FAIL [%s] a transport that is not a string\n", name->valuestring);
            n->failed++;
            continue;
        }
        if (run_forked(t, sc, tr->valuestring, pg) == 0)
            n->passed++;
        else
            n->failed++;
    }
}

/* A write to a closed peer must be EPIPE for the writer, as in Rust, not a killing SIGPIPE. */
static int ignore_sigpipe(void)
{
    struct sigaction sa = {.sa_handler = SIG_IGN};
    if (sigemptyset(&sa.sa_mask) < 0 || sigaction(SIGPIPE, &sa, NULL) < 0) {
        perror("c-rx-scenarios: sigaction(SIGPIPE)");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "usage: %s [PATH/TO/rx.json]\n", argv[0]);
        return 2;
    }
    const char *path = argc == 2 ? argv[1] : "tests/scenarios/rx.json";
    struct table t = {0};
    struct tally n = {0};
    struct progress *pg = mmap(NULL, sizeof *pg, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pg == MAP_FAILED) {
        perror("c-rx-scenarios: mmap");
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
    table_free(&t);
    if (munmap(pg, sizeof *pg) < 0)
        perror("c-rx-scenarios: munmap");
    printf("c-rx-scenarios: %d passed, %d failed\n", n.passed, n.failed);
    return n.failed == 0 && n.runs >= MIN_RUNS ? 0 : 1;
}
