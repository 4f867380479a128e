/* scenarios.c - runs the behaviour table tests/scenarios/peek.json against the C ABI.
 *
 * The Rust runner (core/tests/scenarios.rs, fixtures in core/tests/common/mod.rs) runs the
 * very same table against the Rust core. Every op here must mean exactly what it means
 * there, so that a table that passes both proves the C ABI behaves like the core.
 *
 * Each scenario x transport x mode runs in a forked child (harness.c): a failing step, a crash
 * or a hang ends that run only, and its first failure is listed. Output: one "FAIL [...]" line
 * per failed run, then "c-scenarios: N passed, M failed"; exit status 0 only when every run
 * passed and there were more than 50 of them.
 *
 * Build: make c-tests (this file with harness.c; see tests/c/README.md).
 * Usage: c_scenarios PATH/TO/peek.json
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <lowcopy.h>

#include "harness.h"

enum {
    RUN_TIMEOUT_S = 20,   /* a run still going after this is a hang: SIGALRM ends it */
    RCVTIMEO_S = 3,       /* blocking steps that wait wrongly fail with EAGAIN, not hang */
    RESET_SETTLE_MS = 20, /* reset_peer: time for the RST to arrive */
};

/* ---- modes ---------------------------------------------------------------------------- */

static int mode_of(const char *s, uint32_t *out)
{
    if (strcmp(s, "auto") == 0)
        *out = LOWCOPY_PEEK_AUTO;
    else if (strcmp(s, "offset") == 0)
        *out = LOWCOPY_PEEK_OFFSET;
    else if (strcmp(s, "discard") == 0)
        *out = LOWCOPY_PEEK_DISCARD;
    else if (strcmp(s, "offset_or_discard") == 0)
        *out = LOWCOPY_PEEK_OFFSET_OR_DISCARD;
    else
        return -1;
    return 0;
}

/* A step's "urgent": "caller" adds LOWCOPY_PEEK_URGENT_CALLER to the mode. */
static int urgent_of(struct run *r, const cJSON *step, uint32_t *mode)
{
    const cJSON *u = get(step, "urgent");
    if (!u)
        return 0;
    if (json_is(u, "caller"))
        *mode |= LOWCOPY_PEEK_URGENT_CALLER;
    else if (!json_is(u, "inline"))
        return fail(r, "unknown urgent value");
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
    case LOWCOPY_PEEK_OFFSET_OR_DISCARD:
        return "offset_or_discard";
    default:
        return "unknown";
    }
}

/* The peek runner's part of a run. */
struct state {
    uint32_t mode; /* the run's mode: `new` uses it unless the step names another */
    lowcopy_peeker *peeker;
    lowcopy_peeker_storage mem; /* the caller memory of every `init` in the run */
    long fds_marked;            /* open descriptors counted by fds_mark; -1 before */
};

static int need_peeker(struct run *r)
{
    return r->st->peeker ? 0 : fail(r, "scenario uses a peeker before `new`");
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

/* ---- expectations ---------------------------------------------------------------------- */

/* "expect_pattern": pos, the stream position the bytes must start at. */
static int expect_pattern(struct run *r, const cJSON *step, const unsigned char *data, size_t n)
{
    uint64_t pos;
    if (need_u64(r, step, "expect_pattern", &pos) < 0)
        return -1;
    if (n == 0)
        return fail(r, "no data");
    return expect_pattern_at(r, data, n, pos);
}

/* common's expect_result: `ret` is a lowcopy return (bytes, or -errno); `data` holds what an
 * op copied (`cap` bytes of room; NULL for ops without data). */
static int expect_result(struct run *r, const cJSON *step, ssize_t ret, const unsigned char *data,
                         size_t cap)
{
    char eb[64];
    const cJSON *e = get(step, "expect_err");
    if (e)
        return expect_err(r, e, ret, false);
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
    lowcopy_peeker_free(r->st->peeker);
    r->st->peeker = NULL;
    uint32_t mode = r->st->mode;
    const cJSON *m = get(step, "mode");
    if (cJSON_IsString(m) && mode_of(m->valuestring, &mode) < 0)
        return fail(r, "unknown mode %s", m->valuestring);
    if (urgent_of(r, step, &mode) < 0)
        return -1;
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
    r->st->peeker = p;
    const cJSON *want = get(step, "expect_mode");
    if (want) {
        const char *got = mode_name(lowcopy_peeker_mode(p));
        if (!json_is(want, got))
            return fail(r, "mode %s, want %s", got,
                        cJSON_IsString(want) ? want->valuestring : "(not a string)");
    }
    return 0;
}

/* `init`'s stated kind (the step's "kind", else the transport's) as socket(2) numbers. */
static int kind_of(struct run *r, const cJSON *step, int *domain, int *protocol)
{
    const cJSON *k = get(step, "kind");
    const char *kind = k ? (cJSON_IsString(k) ? k->valuestring : "") : r->transport;
    static const struct {
        const char *name;
        int domain, protocol;
    } KINDS[] = {
        {"tcp4", AF_INET, IPPROTO_TCP},
        {"tcp6", AF_INET6, IPPROTO_TCP},
        {"mptcp4", AF_INET, IPPROTO_MPTCP},
        {"unix", AF_UNIX, 0},
    };
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) {
        if (strcmp(kind, KINDS[i].name) == 0) {
            *domain = KINDS[i].domain;
            *protocol = KINDS[i].protocol;
            return 0;
        }
    }
    return fail(r, "no kind for %s: the step must state one", kind);
}

/* init: a peeker in the run's own memory (r->st->mem), the socket's kind stated. */
static int op_init(struct run *r, const cJSON *step)
{
    lowcopy_peeker_free(r->st->peeker);
    r->st->peeker = NULL;
    uint32_t mode = r->st->mode;
    const cJSON *m = get(step, "mode");
    int domain = AF_UNSPEC, protocol = 0;
    if (cJSON_IsString(m) && mode_of(m->valuestring, &mode) < 0)
        return fail(r, "unknown mode %s", m->valuestring);
    if (kind_of(r, step, &domain, &protocol) < 0 || urgent_of(r, step, &mode) < 0)
        return -1;
    lowcopy_peeker *p = NULL;
    int rc = lowcopy_peeker_init(&r->st->mem, sizeof r->st->mem, r->fd, mode, domain, protocol,
                                 &p);
    if (get(step, "expect_err")) {
        if (rc == 0)
            lowcopy_peeker_free(p);
        return expect_result(r, step, rc < 0 ? rc : 0, NULL, 0);
    }
    char eb[64];
    if (rc < 0)
        return fail(r, "init: %s", errno_text(-rc, eb, sizeof eb));
    r->st->peeker = p;
    if ((void *)p != (void *)&r->st->mem)
        return fail(r, "init: the handle %p is not the caller's memory %p", (void *)p,
                    (void *)&r->st->mem);
    const cJSON *want = get(step, "expect_mode");
    if (want) {
        const char *got = mode_name(lowcopy_peeker_mode(p));
        if (!json_is(want, got))
            return fail(r, "mode %s, want %s", got,
                        cJSON_IsString(want) ? want->valuestring : "(not a string)");
    }
    return 0;
}

/* release [closing]: lowcopy_peeker_release, which must return 0. */
static int op_release(struct run *r, const cJSON *step)
{
    char eb[64];
    if (need_peeker(r) < 0)
        return -1;
    uint32_t flags = cJSON_IsTrue(get(step, "closing")) ? LOWCOPY_RELEASE_CLOSING : 0;
    int rc = lowcopy_peeker_release(r->st->peeker, flags);
    r->st->peeker = NULL;
    return rc == 0 ? 0 : fail(r, "release: %s", errno_text(-rc, eb, sizeof eb));
}

static int op_free(struct run *r, const cJSON *step)
{
    (void)step;
    lowcopy_peeker_free(r->st->peeker);
    r->st->peeker = NULL;
    return 0;
}

/* Starts a writer that sends the string `s` after `ms` (the Rust runner's thread::spawn). */
static int write_string_later(struct run *r, const char *what, uint64_t ms, const char *s)
{
    size_t len = strlen(s);
    unsigned char *d = xmalloc(len);
    memcpy(d, s, len);
    r->sent += len;
    struct writer *w = new_writer(write_later, what, d, len);
    w->ms = ms;
    return start_writer(r, w);
}

static int op_send_later(struct run *r, const cJSON *step)
{
    const char *s;
    uint64_t ms;
    if (need_str(r, step, "data", &s) < 0 || need_u64(r, step, "ms", &ms) < 0)
        return -1;
    return write_string_later(r, "send_later", ms, s);
}

static int op_peek(struct run *r, const cJSON *step)
{
    size_t len;
    if (need_size(r, step, "len", &len) < 0 || need_peeker(r) < 0)
        return -1;
    unsigned char *buf = room(len);
    uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
    ssize_t n = lowcopy_peeker_peek(r->st->peeker, buf, len, step_flags(step));
    uint64_t took = now_ns() - t0, cpu = thread_cpu_ns() - cpu0;
    int rc = expect_result(r, step, n, buf, len);
    free(buf);
    if (rc < 0 || elapsed_bounds(r, step, took) < 0 || cpu_bound(r, step, cpu) < 0)
        return -1;
    return 0;
}

/* errqueue kind: an entry on the socket's error queue (harness errqueue_entry). */
static int op_errqueue(struct run *r, const cJSON *step)
{
    const char *kind;
    if (need_str(r, step, "kind", &kind) < 0)
        return -1;
    return errqueue_entry(r, r->fd, kind);
}

static int op_set_rcvtimeo_ms(struct run *r, const cJSON *step)
{
    uint64_t ms;
    if (need_u64(r, step, "ms", &ms) < 0)
        return -1;
    if (set_timeval(r->fd, SO_RCVTIMEO, ms) < 0)
        return sys_fail(r, "SO_RCVTIMEO");
    return 0;
}

/* peekv len: `len` iovecs of one byte each (1024 = IOV_MAX: no room for a prefix iovec). */
static int op_peekv(struct run *r, const cJSON *step)
{
    size_t len;
    if (need_size(r, step, "len", &len) < 0 || need_peeker(r) < 0)
        return -1;
    if (len == 0 || len > INT_MAX)
        return fail(r, "peekv: len must be 1 .. INT_MAX");
    unsigned char *buf = room(len);
    struct iovec *iov = calloc(len, sizeof(*iov));
    if (!iov)
        abort();
    for (size_t i = 0; i < len; i++)
        iov[i] = (struct iovec){.iov_base = buf + i, .iov_len = 1};
    ssize_t n = lowcopy_peeker_peekv(r->st->peeker, iov, (int)len, step_flags(step));
    int rc = expect_result(r, step, n, buf, len);
    free(iov);
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

/* The step's "result": each field it names must be what the call reported. */
static int expect_peek_result(struct run *r, const cJSON *step, const lowcopy_peek_result *res)
{
    const cJSON *want = get(step, "result"), *f;
    if (!want)
        return 0;
    cJSON_ArrayForEach(f, want) {
        uint64_t got;
        bool is_flag = true;
        if (strcmp(f->string, "moved") == 0)
            got = (res->flags & LOWCOPY_PEEK_MOVED) != 0;
        else if (strcmp(f->string, "prefixed") == 0)
            got = (res->flags & LOWCOPY_PEEK_PREFIXED) != 0;
        else {
            is_flag = false;
            if (strcmp(f->string, "len") == 0)
                got = res->len;
            else if (strcmp(f->string, "offset") == 0)
                got = res->offset;
            else if (strcmp(f->string, "stream_pos") == 0)
                got = res->stream_pos;
            else if (strcmp(f->string, "syscalls") == 0)
                got = res->syscalls;
            else
                return fail(r, "unknown result field %s", f->string);
        }
        uint64_t w;
        if (is_flag ? !cJSON_IsBool(f) : !json_u64(f, &w))
            return fail(r, "result.%s has the wrong type", f->string);
        if (is_flag)
            w = cJSON_IsTrue(f);
        if (got != w)
            return fail(r, "result.%s %" PRIu64 ", want %" PRIu64 " (len %" PRIu64 " offset %" PRIu64
                        " stream_pos %" PRIu64 " syscalls %u flags %u)",
                        f->string, got, w, res->len, res->offset, res->stream_pos, res->syscalls,
                        res->flags);
    }
    return 0;
}

/* peeker_peek_at / peeker_peekv_at offset len: the offset peek on the handle, into one
 * buffer or `len` one-byte iovecs. */
static int peeker_peek_at(struct run *r, const cJSON *step, bool vectored)
{
    size_t off, len;
    if (need_size(r, step, "offset", &off) < 0 || need_size(r, step, "len", &len) < 0 ||
        need_peeker(r) < 0)
        return -1;
    if (vectored && (len == 0 || len > INT_MAX))
        return fail(r, "peeker_peekv_at: len must be 1 .. INT_MAX");
    unsigned char *buf = room(len);
    lowcopy_peek_result res;
    memset(&res, 0xa5, sizeof res);
    ssize_t n;
    if (vectored) {
        struct iovec *iov = calloc(len, sizeof(*iov));
        if (!iov)
            abort();
        for (size_t i = 0; i < len; i++)
            iov[i] = (struct iovec){.iov_base = buf + i, .iov_len = 1};
        n = lowcopy_peeker_peekv_at(r->st->peeker, off, iov, (int)len, step_flags(step), &res,
                                    sizeof res);
        free(iov);
    } else {
        n = lowcopy_peeker_peek_at(r->st->peeker, off, buf, len, step_flags(step), &res,
                                   sizeof res);
    }
    int rc = expect_result(r, step, n, buf, len);
    if (rc == 0 && n >= 0) {
        if (res.len != (uint64_t)n)
            rc = fail(r, "result.len %" PRIu64 " but the call returned %zd", res.len, n);
        else
            rc = expect_peek_result(r, step, &res);
    }
    free(buf);
    return rc;
}

static int op_peeker_peek_at(struct run *r, const cJSON *step)
{
    return peeker_peek_at(r, step, false);
}

static int op_peeker_peekv_at(struct run *r, const cJSON *step)
{
    return peeker_peek_at(r, step, true);
}

static int op_consume(struct run *r, const cJSON *step)
{
    size_t n;
    if (need_size(r, step, "n", &n) < 0 || need_peeker(r) < 0)
        return -1;
    return expect_result(r, step, lowcopy_peeker_consume(r->st->peeker, n), NULL, 0);
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
    return expect_result(r, step, lowcopy_peeker_seek(r->st->peeker, off), NULL, 0);
}

/* send_fds data fds: the peer sends `data` in one sendmsg with `fds` copies of one descriptor
 * (of /dev/null, closed right after: the queue holds the only references) as SCM_RIGHTS. */
static int op_send_fds(struct run *r, const cJSON *step)
{
    const char *s;
    uint64_t n;
    if (need_str(r, step, "data", &s) < 0 || need_u64(r, step, "fds", &n) < 0 || need_peer(r) < 0)
        return -1;
    if (n == 0 || n > 253)
        return fail(r, "send_fds: fds must be 1 .. 253 (SCM_MAX_FD)");
    int pass = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (pass < 0)
        return sys_fail(r, "open /dev/null");
    size_t len = strlen(s), bytes = n * sizeof(int);
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(253 * sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {.iov_base = (void *)s, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = CMSG_SPACE(bytes)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(bytes);
    for (uint64_t i = 0; i < n; i++)
        memcpy(CMSG_DATA(c) + i * sizeof(int), &pass, sizeof(int));
    ssize_t k = sendmsg(r->peer, &msg, MSG_NOSIGNAL);
    int rc = 0;
    if (k < 0)
        rc = sys_fail(r, "sendmsg SCM_RIGHTS");
    else if ((size_t)k != len)
        rc = fail(r, "sent %zd of %zu", k, len);
    close(pass);
    r->sent += len;
    return rc;
}

/* Open descriptors of the process (entries of /proc/self/fd, the listing's own included). */
static long fd_count(struct run *r)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return sys_fail(r, "opendir /proc/self/fd");
    long n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static int op_fds_mark(struct run *r, const cJSON *step)
{
    (void)step;
    r->st->fds_marked = fd_count(r);
    return r->st->fds_marked < 0 ? -1 : 0;
}

static int op_expect_fds_marked(struct run *r, const cJSON *step)
{
    (void)step;
    if (r->st->fds_marked < 0)
        return fail(r, "expect_fds_marked before fds_mark");
    long n = fd_count(r);
    if (n < 0)
        return -1;
    return n == r->st->fds_marked
               ? 0
               : fail(r, "%ld descriptors open, want %ld as at fds_mark", n, r->st->fds_marked);
}

static int op_expect_offset(struct run *r, const cJSON *step)
{
    size_t want;
    if (need_peeker(r) < 0 || need_size(r, step, "value", &want) < 0)
        return -1;
    size_t got = lowcopy_peeker_offset(r->st->peeker);
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
    return reset_peer(r, RESET_SETTLE_MS);
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

/* send_oob data: the peer's send(MSG_OOB); its last byte is the urgent byte. */
static int op_send_oob(struct run *r, const cJSON *step)
{
    const char *d = NULL;
    if (need_str(r, step, "data", &d) < 0 || need_peer(r) < 0)
        return -1;
    size_t len = strlen(d);
    if (send(r->peer, d, len, MSG_OOB) != (ssize_t)len)
        return sys_fail(r, "send(MSG_OOB)");
    r->sent += len;
    return 0;
}

/* wait_urgent: the urgent byte has arrived (POLLPRI), within 3 s. */
static int op_wait_urgent(struct run *r, const cJSON *step)
{
    (void)step;
    struct pollfd p = {.fd = r->fd, .events = POLLPRI};
    int n = poll(&p, 1, 3000);
    if (n < 0)
        return sys_fail(r, "poll(POLLPRI)");
    return n == 1 && (p.revents & POLLPRI) ? 0 : fail(r, "no urgent byte within 3 s");
}

/* recv_oob expect|expect_err: recv(MSG_OOB) of one byte on the peeked socket. */
static int op_recv_oob(struct run *r, const cJSON *step)
{
    unsigned char b[1] = {0};
    ssize_t n = recv(r->fd, b, 1, MSG_OOB);
    return expect_result(r, step, n < 0 ? -errno : n, b, sizeof b);
}

static int op_arm(struct run *r, const cJSON *step)
{
    const cJSON *on = get(step, "on");
    int arm = cJSON_IsBool(on) ? cJSON_IsTrue(on) : 1;
    if (need_peeker(r) < 0)
        return -1;
    return expect_result(r, step, lowcopy_peeker_set_lowat_armed(r->st->peeker, arm), NULL, 0);
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
    else if (strcmp(f, "syscalls") == 0)
        *out = s->syscalls;
    else if (strcmp(f, "fds_closed") == 0)
        *out = s->fds_closed;
    else
        return fail(r, "unknown stat %s", f);
    return 0;
}

/* The expectation is keyed by the mechanism actually in use ("offset" / "discard"). */
static int op_expect_stat(struct run *r, const cJSON *step)
{
    lowcopy_peek_stats s;
    const char *field;
    uint64_t want, got = 0;
    char eb[64];
    if (need_peeker(r) < 0)
        return -1;
    int rc = lowcopy_peeker_stats(r->st->peeker, &s, sizeof(lowcopy_peek_stats));
    if (rc < 0)
        return fail(r, "stats: %s", errno_text(-rc, eb, sizeof eb));
    const char *key = mode_name(lowcopy_peeker_mode(r->st->peeker));
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
        ssize_t k = lowcopy_peeker_peek(r->st->peeker, buf, sizeof buf, MSG_DONTWAIT);
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

/* Defined (1) by tests/seccomp/sandbox.c, whose calls each cost a thread and a filter (about
 * 2 ms): too slow for a loop to show its spin rate, so "min" is not checked there. */
extern const int lowcopy_test_calls_are_slow __attribute__((weak));

static int check_wakeups(struct run *r, const cJSON *step, uint64_t wakeups, const struct bytes *got)
{
    uint64_t max, min;
    bool has_max, has_min;
    char gb[256];
    if (bound(r, step, "max", &has_max, &max) < 0 || bound(r, step, "min", &has_min, &min) < 0)
        return -1;
    if (has_max && wakeups > max)
        return fail(r, "%" PRIu64 " wakeups, want <= %" PRIu64, wakeups, max);
    if (has_min && wakeups < min && !&lowcopy_test_calls_are_slow)
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
        if (write_string_later(r, "wakeups", after, s) < 0)
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

static const struct op OPS[] = {
    {"new", op_new},
    {"init", op_init},
    {"free", op_free},
    {"release", op_release},
    {"send", op_peer_send},
    {"send_oob", op_send_oob},
    {"wait_urgent", op_wait_urgent},
    {"recv_oob", op_recv_oob},
    {"send_pattern", op_peer_send_pattern},
    {"send_later", op_send_later},
    {"wait_queued", op_wait_queued},
    {"peek", op_peek},
    {"errqueue", op_errqueue},
    {"set_rcvtimeo_ms", op_set_rcvtimeo_ms},
    {"peekv", op_peekv},
    {"peek_at", op_peek_at},
    {"peeker_peek_at", op_peeker_peek_at},
    {"peeker_peekv_at", op_peeker_peekv_at},
    {"consume", op_consume},
    {"consume_fd", op_consume_fd},
    {"seek", op_seek},
    {"send_fds", op_send_fds},
    {"fds_mark", op_fds_mark},
    {"expect_fds_marked", op_expect_fds_marked},
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

/* ---- the run --------------------------------------------------------------------------- */

/* "unix_dgram": a datagram socketpair (common::pair). */
static int unix_dgram_pair(struct run *r)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sys_fail(r, "socketpair(SOCK_DGRAM)");
    r->fd = sv[0];
    r->peer = sv[1];
    return own(r, sv[0]);
}

/* "listen_unix": an AF_UNIX stream socket listening on an abstract address of its own. */
static int unix_listener(struct run *r)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int len = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "lowcopy-c-%d", (int)getpid());
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        return sys_fail(r, "unix socket");
    r->fd = l;
    if (own(r, l) < 0)
        return -1;
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    if (bind(l, (struct sockaddr *)&a, alen) < 0 || listen(l, 4) < 0)
        return sys_fail(r, "unix bind/listen");
    return 0;
}

/* The transports only this table has: the datagram pairs udp4 and unix_dgram (the peer's
 * send is a datagram), and listening sockets (no peer). 1: not one of them. */
static int peek_fixture(struct run *r)
{
    const char *t = r->transport;
    if (strcmp(t, "udp4") == 0) {
        struct sockaddr_storage to;
        socklen_t tolen;
        return udp_pair(r, AF_INET, true, &to, &tolen);
    }
    if (strcmp(t, "unix_dgram") == 0)
        return unix_dgram_pair(r);
    if (strcmp(t, "listen_unix") == 0)
        return unix_listener(r);
    int family = strcmp(t, "listen_tcp6") == 0 ? AF_INET6 : AF_INET;
    int proto = strcmp(t, "listen_mptcp4") == 0 ? IPPROTO_MPTCP : 0;
    if (strcmp(t, "listen_tcp4") == 0 || strcmp(t, "listen_tcp6") == 0 ||
        strcmp(t, "listen_mptcp4") == 0) {
        int l = tcp_listener(r, family, proto, NULL, NULL);
        if (l < 0)
            return -1;
        r->fd = l;
        return 0;
    }
    return 1;
}

static bool probe_has_peek_off(const char *t);

/* The fd under test; for a pair, the scenario's buffer sizes and the 3 s receive timeout. */
static int setup(struct run *r, const cJSON *sc)
{
    if (mode_of(r->variant, &r->st->mode) < 0)
        return fail(r, "unknown mode %s", r->variant);
    r->st->fds_marked = -1;
    int rc = peek_fixture(r);
    if (rc <= 0)
        return rc;
    rc = common_fixture(r, r->transport, NULL, NULL);
    if (rc == FIXTURE_UNKNOWN)
        return fail(r, "unknown transport %s", r->transport);
    if (rc < 0 || r->peer < 0) /* failed, or "closed" / "file": nothing to tune */
        return rc;
    /* peek.json's kernel rules: a scenario about SO_PEEK_OFF itself does not apply where this
     * kernel lacks it for the family (the table's own no_peek_off transports are not listed in
     * such scenarios). */
    if (json_is(get(sc, "needs"), "peek_off") && !probe_has_peek_off(r->transport))
        return skip_run(r, "not applicable: no SO_PEEK_OFF for this family here (probe)");
    int64_t sz;
    if (json_i64(get(sc, "socket_rcvbuf"), &sz)) {
        if (set_buf(r, r->fd, true, (int)sz) < 0 || set_buf(r, r->peer, false, (int)sz) < 0)
            return -1;
    }
    /* A blocking step that waits wrongly fails with EAGAIN instead of hanging the suite. */
    if (set_timeval(r->fd, SO_RCVTIMEO, (uint64_t)RCVTIMEO_S * 1000) < 0)
        return sys_fail(r, "SO_RCVTIMEO");
    return 0;
}

/* Whether this kernel has SO_PEEK_OFF for the transport's family (lowcopy_probe, as the Rust
 * runner's probe_has_peek_off); true for fds that are not peekable streams. */
static bool probe_has_peek_off(const char *t)
{
    const struct lowcopy_caps *c = probed_caps();
    if (strcmp(t, "tcp4") == 0)
        return c->peek_off_tcp4;
    if (strcmp(t, "tcp6") == 0)
        return c->peek_off_tcp6;
    if (strcmp(t, "unix") == 0)
        return c->peek_off_unix;
    if (strcmp(t, "mptcp4") == 0)
        return c->peek_off_mptcp;
    return true;
}

/* An auto run on a family without SO_PEEK_OFF: AUTO uses discard, peek_supported answers 0. */
static cJSON *auto_without_peek_off(const cJSON *steps)
{
    cJSON *s = must(cJSON_Duplicate(steps, true)), *step;
    cJSON_ArrayForEach(step, s)
    {
        if ((json_is(get(step, "op"), "new") || json_is(get(step, "op"), "init")) &&
            json_is(get(step, "expect_mode"), "offset") &&
            !cJSON_ReplaceItemInObjectCaseSensitive(step, "expect_mode",
                                                    must(cJSON_CreateString("discard"))))
            must(NULL);
        int64_t v;
        if (json_is(get(step, "op"), "peek_supported") && json_i64(get(step, "expect_ret"), &v) &&
            v == 1 &&
            !cJSON_ReplaceItemInObjectCaseSensitive(step, "expect_ret", must(cJSON_CreateNumber(0))))
            must(NULL);
    }
    return s;
}

/* The no_peek_off rule, on the table's transports and on those this kernel lacks it for
 * (probe): in mode "offset" the first `new` or `init` must fail with the rule's errno and the run ends;
 * an auto run on a family the kernel lacks it for expects the discard mechanism. */
static cJSON *steps_for(const cJSON *root, const cJSON *steps, const struct run *r)
{
    const cJSON *rule = get(root, "no_peek_off");
    bool listed = array_has_string(get(rule, "transports"), r->transport);
    if (!listed && probe_has_peek_off(r->transport))
        return NULL;
    if (strcmp(r->variant, "offset") == 0)
        return refuse_first_new(steps, get(rule, "errno"));
    if (!listed && strcmp(r->variant, "auto") == 0)
        return auto_without_peek_off(steps);
    return NULL;
}

static bool table_ok(const cJSON *root)
{
    const cJSON *rule = get(root, "no_peek_off");
    return cJSON_IsArray(get(rule, "transports")) && get(rule, "errno");
}

/* Ends the run as the Rust runner does: the peeker freed first, then the writers and fds. */
static void teardown(struct run *r, bool failed)
{
    lowcopy_peeker_free(r->st->peeker);
    r->st->peeker = NULL;
    end_fds(r, failed);
}

static const struct runner PEEK = {
    .prog = "c-scenarios",
    .table = "peek.json",
    .axis = "modes",
    .axis_one = "mode",
    .table_wants = "`scenarios` and `no_peek_off` {transports, errno}",
    .table_ok = table_ok,
    .timeout_s = RUN_TIMEOUT_S,
    .errnos = ERRNOS_PEEK,
    .check_fds = true,
    .state_size = sizeof(struct state),
    .setup = setup,
    .steps_for = steps_for,
    .teardown = teardown,
    .ops = OPS,
    .nops = sizeof OPS / sizeof OPS[0],
};

int main(int argc, char **argv) { return run_table(&PEEK, argc, argv); }
