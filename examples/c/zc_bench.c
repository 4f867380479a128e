/* zc_bench.c - zerocopy send: plain copy, raw MSG_ZEROCOPY and lowcopy,
 * measured the way the kernel's msg_zerocopy selftest measures them
 * (tools/testing/selftests/net/msg_zerocopy.c).
 *
 * Two processes: a receiver (-r) and a sender (default), TCP or UDP, IPv4 or
 * IPv6.  The sender loop is the selftest's for every mode, so that the modes
 * differ only in how they send and collect completions:
 *
 *     do {
 *         sendmsg(fd, payload, MSG_DONTWAIT [| MSG_ZEROCOPY]);
 *         [read the error queue if N sends since the last read]
 *         while (!poll(fd, POLLOUT, 500 ms)) [read the error queue];
 *     } while (now < stop);
 *     [wait up to 500 ms for the remaining completions]
 *
 * With -P ("app" loop) every mode polls only after a send that sent nothing
 * (EAGAIN), as an application would: one syscall less per send for all.
 *
 * With -N n (UDP) the sender opens n sockets, each
 * connected to the destination from a port of its own and (lowcopy) with a
 * sender of its own, all on this one thread, and sends round-robin: send i
 * goes out on socket i % n, and the loop above runs on that socket. With
 * io_uring the n senders share the thread's one ring; the figures are those
 * of the whole thread. Every send must still get exactly one completion.
 * Payload (-s) as the selftest's default: IP_MAXPACKET less IPv6, TCP and
 * TCP option headers (65435 bytes), for TCP writes and UDP datagrams alike.
 *
 * Modes (-m):
 *   copy      plain send (the selftest without -z)
 *   zc-l1     SO_ZEROCOPY + MSG_ZEROCOPY, draining MSG_ERRQUEUE with recvmsg
 *   zc-l8     after every 1, 8 or 32 sends, exactly as the selftest's -z -l N
 *   zc-l32    (its default); id ranges tracked here
 *   lc-errq   lowcopy_zc_new(LOWCOPY_ZC_ERRQUEUE) + lowcopy_zc_send_reap
 *   lc-uring  lowcopy_zc_new(LOWCOPY_ZC_IO_URING) + lowcopy_zc_send_reap
 *   lc-auto   lowcopy_zc_new(LOWCOPY_ZC_AUTO, LOWCOPY_ZC_ADAPTIVE) + send_reap
 *   ur-raw    io_uring SEND_ZC without lowcopy, as lowcopy's io_uring backend
 *             makes it: one ring for the thread (8192 CQEs, SINGLE_ISSUER,
 *             DEFER_TASKRUN), MSG_DONTWAIT, one request at a time, waiting in
 *             io_uring_enter for its result; notifications (REPORT_USAGE) are
 *             taken whenever the completion queue is looked at. The io_uring
 *             rows' baseline, as zc-l32 is the error queue's: what the kernel's
 *             own path costs, over one socket or many.
 *
 * Measured by the sender: its own CPU (getrusage(RUSAGE_SELF) user+sys, from
 * the first send to the last completion), its own syscalls (counted here for
 * raw modes; lowcopy_zc_stats syscalls_send + syscalls_reap plus this loop's
 * polls for lowcopy), completions, and how many the kernel marked COPIED.
 * Every send must get exactly one completion: raw modes check that the id
 * ranges cover 0..sends-1 once each; lowcopy modes pass the send index as
 * user_data and check that every index comes back once with the byte count
 * that send accepted.  A failed check makes the exit status 1.
 *
 * One line per run on stdout, key=value, for scripts/zc_bench.sh:
 *   zc_bench tx path=... proto=udp family=4 mode=lc-errq ... ok=1
 *   zc_bench rx proto=udp family=4 pkts=... bytes=...
 *
 * Build: cc -Wall -Wextra -Werror -O2 $(pkg-config --cflags lowcopy) \
 *           zc_bench.c $(pkg-config --libs lowcopy)
 * Usage: zc_bench -r [-4|-6] [-t tcp|udp] [-D addr] [-p port] [-T secs]
 *        zc_bench    [-4|-6] [-t tcp|udp] -D addr [-p port] [-s size]
 *                    [-T secs] [-m mode] [-w wait_ms] [-C cpu] [-L label] [-P]
 *                    [-N senders] [-v]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/errqueue.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <lowcopy.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif
/* The selftest's payload: IP_MAXPACKET less the largest headers. */
#define MAX_PAYLOAD (IP_MAXPACKET - (int)sizeof(struct ip6_hdr) - (int)sizeof(struct tcphdr) - 40)
#define REAP_CAP 1024           /* lowcopy completions handed back per call */
#define RX_BATCH 64             /* datagrams per recvmmsg */
#define RX_PEEK 64              /* bytes of each datagram verified */

enum mode { M_COPY, M_ZC_L1, M_ZC_L8, M_ZC_L32, M_LC_ERRQ, M_LC_URING, M_LC_AUTO, M_UR_RAW, M_COUNT };

static const char *const mode_names[M_COUNT] = {
    "copy", "zc-l1", "zc-l8", "zc-l32", "lc-errq", "lc-uring", "lc-auto", "ur-raw",
};

/* ---------------------------------------------------------------- config */

static int cfg_family = AF_INET;
static int cfg_type = SOCK_STREAM;
static const char *cfg_dst;
static int cfg_port = 8000;
static int cfg_size = MAX_PAYLOAD;
static double cfg_secs = 1.0;
static enum mode cfg_mode = M_COPY;
static int cfg_wait_ms = 500;
static int cfg_cpu = -1;
static bool cfg_rx;
static bool cfg_app_loop;       /* -P: poll only after EAGAIN, not after every send */
static int cfg_senders = 1;     /* -N: sockets (and senders) sending round-robin */
static int cfg_verbose;
static const char *cfg_label = "-";

static char payload[IP_MAXPACKET] __attribute__((aligned(4096)));

/* ---------------------------------------------------------------- errors */

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("zc_bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static void warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warnx(const char *fmt, ...)
{
    va_list ap;
    fputs("zc_bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void setsockopt_int(int fd, int level, int name, int val, const char *what)
{
    if (setsockopt(fd, level, name, &val, sizeof(val)) < 0)
        die("setsockopt %s=%d: %s", what, val, strerror(errno));
}

/* ---------------------------------------------------------------- time */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct cpu {
    double user, sys;
    long csw;
};

static struct cpu cpu_now(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        die("getrusage: %s", strerror(errno));
    return (struct cpu){
        .user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6,
        .sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6,
        .csw = ru.ru_nvcsw + ru.ru_nivcsw,
    };
}

/* ---------------------------------------------------------------- addresses */

static socklen_t make_addr(const char *host, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (cfg_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(cfg_port);
        if (host && inet_pton(AF_INET, host, &a->sin_addr) != 1)
            die("not an IPv4 address: %s", host);
        return sizeof(*a);
    }
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(cfg_port);
    if (host && inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
        die("not an IPv6 address: %s", host);
    return sizeof(*a);
}

static void pin_cpu(void)
{
    cpu_set_t set;
    if (cfg_cpu < 0)
        return;
    CPU_ZERO(&set);
    CPU_SET(cfg_cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) < 0)
        warnx("cannot pin to cpu %d: %s", cfg_cpu, strerror(errno));
}

/* ---------------------------------------------------------------- receiver */

static volatile sig_atomic_t stop_rx;

static void on_signal(int sig)
{
    (void)sig;
    stop_rx = 1;
}

/* Until the sender closes (TCP), a signal, 1 s without a datagram once some
 * came (UDP), or the time limit: cfg_secs + 10 s. */
static int do_rx(void)
{
    struct sockaddr_storage ss;
    socklen_t alen = make_addr(cfg_dst, &ss);
    struct sigaction sa = { .sa_handler = on_signal };
    long long pkts = 0, bytes = 0, bad = 0;
    double t_end = now_s() + cfg_secs + 10.0, t_last = 0;
    int fd;

    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    fd = socket(cfg_family, cfg_type, 0);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    setsockopt_int(fd, SOL_SOCKET, SO_RCVBUF, 1 << 21, "SO_RCVBUF");
    setsockopt_int(fd, SOL_SOCKET, SO_RCVLOWAT, 1 << 16, "SO_RCVLOWAT");
    setsockopt_int(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT");
    setsockopt_int(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
    if (bind(fd, (struct sockaddr *)&ss, alen) < 0)
        die("bind: %s", strerror(errno));
    if (cfg_type == SOCK_STREAM) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (listen(fd, 1) < 0)
            die("listen: %s", strerror(errno));
        while (!stop_rx && poll(&p, 1, 100) <= 0 && now_s() < t_end)
            ;
        if (!(p.revents & POLLIN)) {
            warnx("rx: no connection");
            close(fd);
            return 1;
        }
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            die("accept: %s", strerror(errno));
        close(fd);
        fd = c;
    }

    static char bufs[RX_BATCH][RX_PEEK];
    struct mmsghdr msgs[RX_BATCH];
    struct iovec iovs[RX_BATCH];
    bool eof = false;

    while (!stop_rx && !eof && now_s() < t_end) {
        if (cfg_type == SOCK_STREAM) {
            /* MSG_TRUNC on TCP drops up to len bytes without copying them. */
            ssize_t r = recv(fd, NULL, 1 << 21, MSG_TRUNC | MSG_DONTWAIT);
            if (r > 0) {
                pkts++;
                bytes += r;
                continue;
            }
            if (r == 0) {
                eof = true;
                break;
            }
            if (errno != EAGAIN && errno != EINTR)
                die("recv: %s", strerror(errno));
        } else {
            for (int i = 0; i < RX_BATCH; i++) {
                iovs[i] = (struct iovec){ bufs[i], RX_PEEK };
                memset(&msgs[i], 0, sizeof(msgs[i]));
                msgs[i].msg_hdr.msg_iov = &iovs[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            int n = recvmmsg(fd, msgs, RX_BATCH, MSG_TRUNC | MSG_DONTWAIT, NULL);
            if (n > 0) {
                for (int i = 0; i < n; i++) {
                    unsigned len = msgs[i].msg_len;
                    unsigned chk = len < RX_PEEK ? len : RX_PEEK;
                    if (len != (unsigned)cfg_size || memcmp(bufs[i], payload, chk))
                        bad++;
                    pkts++;
                    bytes += len;
                }
                t_last = now_s();
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                die("recvmmsg: %s", strerror(errno));
            if (t_last > 0 && now_s() - t_last > 1.0)
                break;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        poll(&p, 1, 100);
    }
    close(fd);
    printf("zc_bench rx proto=%s family=%d pkts=%lld bytes=%lld mb=%.1f bad=%lld eof=%d\n",
           cfg_type == SOCK_STREAM ? "tcp" : "udp", cfg_family == AF_INET ? 4 : 6, pkts,
           bytes, bytes / 1e6, bad, eof);
    if (bad)
        warnx("rx: %lld datagrams with the wrong length or content", bad);
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------- sender state */

/* One socket of the sender and its lowcopy sender; for raw zerocopy, the global send index
 * of each of the socket's zerocopy ids (the kernel numbers each socket's sends apart). */
struct conn {
    int fd;
    lowcopy_zc *z;
    uint32_t sends_since_notify;
    long long *idx;
    size_t nidx, capidx;
};

struct tx {
    int fd;                     /* the connection in use: conns[cur] */
    lowcopy_zc *z;
    struct conn *conns;         /* -N of them */
    int nconns, cur;
    enum mode mode;
    int limit;                  /* zc-lN: read the error queue every N sends */
    /* counts */
    long long sends, bytes, eagain, enobufs, ebusy;
    long long sys_send, sys_reap, sys_poll;
    long long reap_loop;        /* reap syscalls during the send loop */
    long long reap_wait;        /* of those, made while waiting for POLLOUT */
    long long completions, copied, errq_other;
    /* checking: per send, bytes accepted (lowcopy) or seen-bit (both) */
    uint32_t *sent_len;
    uint8_t *seen;
    size_t cap;
    long long dup, stray, wrong_len;
};

static void tx_grow(struct tx *t)
{
    if ((size_t)t->sends < t->cap)
        return;
    size_t n = t->cap ? t->cap * 2 : 1 << 16;
    t->sent_len = realloc(t->sent_len, n * sizeof(*t->sent_len));
    t->seen = realloc(t->seen, n);
    if (!t->sent_len || !t->seen)
        die("out of memory");
    memset(t->seen + t->cap, 0, n - t->cap);
    t->cap = n;
}

static void record_send(struct tx *t, ssize_t n)
{
    tx_grow(t);
    t->sent_len[t->sends] = (uint32_t)n;
    t->sends++;
    t->bytes += n;
}

/* One completion for send index `idx`. */
static void complete_one(struct tx *t, uint64_t idx, int64_t result, bool copied, bool check_len)
{
    if (idx >= (uint64_t)t->sends) {
        t->stray++;
        if (cfg_verbose)
            warnx("completion for send %llu, only %lld sent", (unsigned long long)idx, t->sends);
        return;
    }
    if (t->seen[idx]) {
        t->dup++;
        if (cfg_verbose)
            warnx("second completion for send %llu", (unsigned long long)idx);
        return;
    }
    t->seen[idx] = 1;
    t->completions++;
    if (copied)
        t->copied++;
    if (check_len && result != (int64_t)t->sent_len[idx]) {
        t->wrong_len++;
        if (cfg_verbose)
            warnx("send %llu: completion says %lld bytes, send accepted %u",
                  (unsigned long long)idx, (long long)result, t->sent_len[idx]);
    }
}

/* ---------------------------------------------------------------- raw error queue */

/* One recvmsg(MSG_ERRQUEUE), as the selftest's do_recv_completion(). */
static bool raw_recv_completion(struct tx *t)
{
    char control[100];
    struct msghdr msg = { .msg_control = control, .msg_controllen = sizeof(control) };

    t->sys_reap++;
    if (recvmsg(t->fd, &msg, MSG_ERRQUEUE) < 0) {
        if (errno == EAGAIN)
            return false;
        die("recvmsg(MSG_ERRQUEUE): %s", strerror(errno));
    }
    if (msg.msg_flags & MSG_CTRUNC)
        die("recvmsg(MSG_ERRQUEUE): control truncated");
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
              (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)))
            continue;
        struct sock_extended_err ee;
        memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
        if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY || ee.ee_errno != 0)
            break;
        /* Inclusive [ee_info, ee_data]; ids are send indexes here since every
         * send of a raw zerocopy mode is a MSG_ZEROCOPY send. */
        uint32_t lo = ee.ee_info, hi = ee.ee_data;
        bool copied = ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED;
        for (uint32_t id = lo;; id++) {
            struct conn *c = &t->conns[t->cur];
            if (id < c->nidx)
                complete_one(t, (uint64_t)c->idx[id], 0, copied, false);
            else
                t->stray++;
            if (id == hi)
                break;
        }
        return true;
    }
    t->errq_other++;
    return true;
}

static void raw_recv_completions(struct tx *t)
{
    while (raw_recv_completion(t))
        ;
    t->conns[t->cur].sends_since_notify = 0;
}

/* ---------------------------------------------------------------- lowcopy */

static lowcopy_zc_completion lc_out[REAP_CAP];

static void lc_take(struct tx *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        complete_one(t, lc_out[i].user_data, lc_out[i].result,
                     lc_out[i].flags & LOWCOPY_ZC_COPIED, true);
}

static void lc_reap(struct tx *t)
{
    ssize_t n;
    while ((n = lowcopy_zc_reap(t->z, lc_out, REAP_CAP, sizeof(lowcopy_zc_completion))) > 0)
        lc_take(t, (size_t)n);
    if (n < 0)
        die("lowcopy_zc_reap: %s", strerror((int)-n));
}

/* ---------------------------------------------------------------- raw io_uring */

/* The thread's ring (ur-raw), set up by hand: no liburing, no lowcopy. */
static struct {
    int fd;
    unsigned *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    long long *idx;             /* request (user_data) -> send index; -1: it sent nothing */
    size_t capidx;
    uint64_t next;              /* the next request's user_data */
} ur = { .fd = -1 };

static void *ur_map(size_t len, off_t off)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ur.fd, off);
    if (p == MAP_FAILED)
        die("mmap io_uring: %s", strerror(errno));
    return p;
}

static void ur_setup(void)
{
    struct io_uring_params p = {
        .flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        .cq_entries = 8192,
    };
    ur.fd = (int)syscall(__NR_io_uring_setup, 8, &p);
    if (ur.fd < 0)
        die("io_uring_setup: %s", strerror(errno));
    if (!(p.features & IORING_FEAT_SINGLE_MMAP))
        die("io_uring without IORING_FEAT_SINGLE_MMAP");
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *rings = ur_map(sq_len > cq_len ? sq_len : cq_len, IORING_OFF_SQ_RING);
    ur.sqes = ur_map(p.sq_entries * sizeof(struct io_uring_sqe), IORING_OFF_SQES);
    ur.sq_tail = (unsigned *)(rings + p.sq_off.tail);
    ur.sq_mask = (unsigned *)(rings + p.sq_off.ring_mask);
    ur.sq_array = (unsigned *)(rings + p.sq_off.array);
    ur.cq_head = (unsigned *)(rings + p.cq_off.head);
    ur.cq_tail = (unsigned *)(rings + p.cq_off.tail);
    ur.cq_mask = (unsigned *)(rings + p.cq_off.ring_mask);
    ur.cqes = (struct io_uring_cqe *)(rings + p.cq_off.cqes);
}

/* Takes every CQE posted: the result of request `want` (its res in *res, true returned),
 * notifications of any request. A result that accepted bytes is recorded as a send here,
 * before a notification of it that follows in the same batch. */
static bool ur_drain(struct tx *t, uint64_t want, int *res)
{
    bool got = false;
    unsigned head = *ur.cq_head, tail = __atomic_load_n(ur.cq_tail, __ATOMIC_ACQUIRE);
    for (; head != tail; head++) {
        const struct io_uring_cqe *c = &ur.cqes[head & *ur.cq_mask];
        if (c->flags & IORING_CQE_F_NOTIF) {
            long long i = ur.idx[c->user_data];
            if (i >= 0)
                complete_one(t, (uint64_t)i, 0, (unsigned)c->res & IORING_NOTIF_USAGE_ZC_COPIED, false);
        } else if (c->user_data == want) {
            *res = c->res;
            got = true;
            if (c->res > 0) {
                record_send(t, c->res);
                ur.idx[want] = t->sends - 1;
            }
        }
    }
    __atomic_store_n(ur.cq_head, head, __ATOMIC_RELEASE);
    return got;
}

/* io_uring_enter: submit `n`, then run deferred work and wait for `wait` CQEs. */
static int ur_enter(unsigned n, unsigned wait)
{
    return (int)syscall(__NR_io_uring_enter, ur.fd, n, wait, IORING_ENTER_GETEVENTS, NULL, 0);
}

/* One SEND_ZC of the payload on the connection in use, waiting for its result. */
static ssize_t ur_send(struct tx *t, const void *buf, size_t len)
{
    uint64_t me = ur.next++;
    if (me >= ur.capidx) {
        ur.capidx = ur.capidx ? 2 * ur.capidx : 1 << 16;
        ur.idx = realloc(ur.idx, ur.capidx * sizeof(*ur.idx));
        if (!ur.idx)
            die("out of memory");
    }
    ur.idx[me] = -1;
    unsigned tail = *ur.sq_tail, i = tail & *ur.sq_mask;
    struct io_uring_sqe *e = &ur.sqes[i];
    memset(e, 0, sizeof(*e));
    e->opcode = IORING_OP_SEND_ZC;
    e->fd = t->fd;
    e->addr = (uintptr_t)buf;
    e->len = (unsigned)len;
    e->msg_flags = MSG_DONTWAIT;
    e->ioprio = IORING_SEND_ZC_REPORT_USAGE;
    e->user_data = me;
    ur.sq_array[i] = i;
    __atomic_store_n(ur.sq_tail, tail + 1, __ATOMIC_RELEASE);
    unsigned submit = 1;
    int res = 0;
    for (;;) {
        t->sys_send++;
        int r = ur_enter(submit, 1);
        if (r < 0 && errno != EINTR && errno != EAGAIN && errno != EBUSY)
            die("io_uring_enter: %s", strerror(errno));
        if (r > 0)
            submit = 0;
        if (ur_drain(t, me, &res))
            break;
    }
    return res;
}

/* After the loop: notifications still missing, up to `stop`. */
static void ur_wait_rest(struct tx *t, double stop)
{
    int res;
    while (t->completions < t->sends && now_s() < stop) {
        t->sys_reap++;
        if (ur_enter(0, 0) < 0 && errno != EINTR)
            die("io_uring_enter: %s", strerror(errno));
        ur_drain(t, UINT64_MAX, &res);
        if (t->completions < t->sends)
            usleep(1000);
    }
}

/* ---------------------------------------------------------------- sender */

static bool is_lc(enum mode m)
{
    return m == M_LC_ERRQ || m == M_LC_URING || m == M_LC_AUTO;
}

static bool is_raw_zc(enum mode m)
{
    return m == M_ZC_L1 || m == M_ZC_L8 || m == M_ZC_L32;
}

/* The selftest's do_poll(): poll for `events` up to cfg_wait_ms. */
static bool do_poll(struct tx *t, short events)
{
    struct pollfd p = { .fd = t->fd, .events = events };
    t->sys_poll++;
    int r = poll(&p, 1, cfg_wait_ms);
    if (r < 0 && errno != EINTR)
        die("poll: %s", strerror(errno));
    return r > 0 && (p.revents & events);
}

/* Makes connection k the one in use. */
static void use_conn(struct tx *t, int k)
{
    t->cur = k;
    t->fd = t->conns[k].fd;
    t->z = t->conns[k].z;
}

/* The lowcopy counters of every sender, summed. */
static lowcopy_zc_send_stats lc_stats(const struct tx *t)
{
    lowcopy_zc_send_stats sum = { 0 }, st;
    for (int k = 0; k < t->nconns; k++) {
        if (lowcopy_zc_stats(t->conns[k].z, &st, sizeof(lowcopy_zc_send_stats)) < 0)
            die("lowcopy_zc_stats");
        sum.sends += st.sends;
        sum.completions += st.completions;
        sum.zerocopy_sends += st.zerocopy_sends;
        sum.copy_sends += st.copy_sends;
        sum.enobufs += st.enobufs;
        sum.window_full += st.window_full;
        sum.syscalls_send += st.syscalls_send;
        sum.syscalls_reap += st.syscalls_reap;
        sum.unexpected_ids += st.unexpected_ids;
        sum.zerocopy_off |= st.zerocopy_off;
    }
    return sum;
}

/* Reap syscalls so far (lowcopy counts its own). */
static long long reap_syscalls(const struct tx *t)
{
    if (!is_lc(t->mode))
        return t->sys_reap;
    if (t->nconns == 1) { /* (one stats call, as before -N) */
        lowcopy_zc_send_stats st;
        if (lowcopy_zc_stats(t->z, &st, sizeof(lowcopy_zc_send_stats)) < 0)
            die("lowcopy_zc_stats");
        return (long long)st.syscalls_reap;
    }
    return (long long)lc_stats(t).syscalls_reap;
}

/* Completions collected while the socket is not writable (the selftest's
 * "while (!do_poll(fd, POLLOUT))" body), counted apart from the reads that
 * the send path makes by itself. */
static void collect(struct tx *t)
{
    long long before = reap_syscalls(t);
    if (is_raw_zc(t->mode))
        raw_recv_completions(t);
    else if (is_lc(t->mode))
        lc_reap(t);
    else if (t->mode == M_UR_RAW) {
        int res;
        ur_drain(t, UINT64_MAX, &res); /* (no syscall) */
    }
    t->reap_wait += reap_syscalls(t) - before;
}

/* One send attempt; false when it sent nothing: EAGAIN (and ENOBUFS for raw
 * zerocopy, EBUSY for lowcopy), which are not errors. */
__attribute__((noinline)) static bool send_one(struct tx *t)
{
    struct iovec iov = { payload, (size_t)cfg_size };
    ssize_t r;

    if (is_lc(t->mode)) {
        size_t n = 0;
        r = lowcopy_zc_send_reap(t->z, &iov, 1, MSG_DONTWAIT, (uint64_t)t->sends, lc_out,
                                 REAP_CAP, sizeof(lowcopy_zc_completion), &n);
        if (r == -EAGAIN) {
            t->eagain++;
            return false;
        }
        if (r == -EBUSY) {
            /* LOWCOPY_ZC_MAX_PENDING requests unreaped: cannot happen while
             * every completion comes back, as we reap after every send. */
            t->ebusy++;
            lc_reap(t);
            return false;
        }
        if (r < 0)
            die("lowcopy_zc_send_reap: %s", strerror((int)-r));
        if (r > 0)
            record_send(t, r);
        lc_take(t, n);
        return r > 0;
    }

    if (t->mode == M_UR_RAW) {
        r = ur_send(t, payload, (size_t)cfg_size); /* (records the send itself) */
        if (r == -EAGAIN) {
            t->eagain++;
            return false;
        }
        if (r < 0)
            die("io_uring SEND_ZC: %s", strerror((int)-r));
        return r > 0;
    }

    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    int flags = MSG_DONTWAIT | (is_raw_zc(t->mode) ? MSG_ZEROCOPY : 0);
    t->sys_send++;
    r = sendmsg(t->fd, &msg, flags);
    if (r < 0) {
        if (errno == EAGAIN) {
            t->eagain++;
            return false;
        }
        if (errno == ENOBUFS && is_raw_zc(t->mode)) {
            /* optmem or locked-pages limit: notifications release it */
            t->enobufs++;
            raw_recv_completions(t);
            return false;
        }
        die("sendmsg: %s", strerror(errno));
    }
    if (r > 0) {
        record_send(t, r);
        struct conn *c = &t->conns[t->cur];
        c->sends_since_notify++;
        if (is_raw_zc(t->mode)) { /* this socket's next zerocopy id is this send */
            if (c->nidx == c->capidx) {
                c->capidx = c->capidx ? 2 * c->capidx : 1024;
                c->idx = realloc(c->idx, c->capidx * sizeof(*c->idx));
                if (!c->idx)
                    die("out of memory");
            }
            c->idx[c->nidx++] = t->sends - 1;
        }
    }
    return r > 0;
}

/* After the loop: up to cfg_wait_ms for the completions still missing, on every socket. */
static void wait_rest_one(struct tx *t, double stop);

static void wait_rest(struct tx *t)
{
    double stop = now_s() + cfg_wait_ms / 1000.0;

    if (t->mode == M_UR_RAW) {
        ur_wait_rest(t, stop);
        return;
    }

    if (is_raw_zc(t->mode) && t->nconns > 1) {
        /* Every socket's error queue in turn (reads never block) until all came. */
        while (t->completions < t->sends && now_s() < stop) {
            for (int k = 0; k < t->nconns; k++) {
                use_conn(t, k);
                raw_recv_completions(t);
            }
            if (t->completions < t->sends)
                usleep(1000);
        }
        return;
    }
    for (int k = 0; k < t->nconns; k++) {
        use_conn(t, k);
        wait_rest_one(t, stop);
    }
}

static void wait_rest_one(struct tx *t, double stop)
{
    if (is_raw_zc(t->mode)) {
        while (t->completions < t->sends && now_s() < stop)
            if (do_poll(t, POLLERR))
                raw_recv_completions(t);
        return;
    }
    if (!is_lc(t->mode))
        return;
    lc_reap(t);
    while (lowcopy_zc_inflight(t->z) > 0) {
        int left = (int)((stop - now_s()) * 1000);
        if (left <= 0)
            break;
        int r = lowcopy_zc_wait(t->z, left);
        if (r < 0 && r != -ETIMEDOUT)
            die("lowcopy_zc_wait: %s", strerror(-r));
        lc_reap(t);
        if (r == -ETIMEDOUT)
            break;
    }
    lc_reap(t);
}

static int connect_retry(const struct sockaddr_storage *ss, socklen_t alen)
{
    double stop = now_s() + 3.0;
    int fd;

    for (;;) {
        fd = socket(cfg_family, cfg_type, 0);
        if (fd < 0)
            die("socket: %s", strerror(errno));
        setsockopt_int(fd, SOL_SOCKET, SO_SNDBUF, 1 << 21, "SO_SNDBUF");
        if (connect(fd, (const struct sockaddr *)ss, alen) == 0)
            return fd;
        if (errno != ECONNREFUSED || now_s() > stop)
            die("connect %s port %d: %s", cfg_dst, cfg_port, strerror(errno));
        close(fd);
        usleep(20000);
    }
}

static const char *backend_name(const struct tx *t)
{
    if (t->mode == M_UR_RAW)
        return "uring_raw";
    if (!is_lc(t->mode))
        return t->mode == M_COPY ? "sendmsg" : "msg_zerocopy";
    switch (lowcopy_zc_backend(t->z)) {
    case LOWCOPY_ZC_ERRQUEUE: return "errqueue";
    case LOWCOPY_ZC_IO_URING: return "io_uring";
    case LOWCOPY_ZC_COPY: return "copy";
    default: return "?";
    }
}

static int do_tx(void)
{
    struct sockaddr_storage ss;
    socklen_t alen;
    struct tx t = { .mode = cfg_mode };
    lowcopy_zc_send_stats st = { 0 };
    const char *backend;

    if (!cfg_dst)
        die("sender needs -D address");
    alen = make_addr(cfg_dst, &ss);
    t.nconns = cfg_senders;
    t.conns = calloc(cfg_senders, sizeof(*t.conns));
    if (!t.conns)
        die("out of memory");
    for (int k = 0; k < cfg_senders; k++) {
        struct conn *c = &t.conns[k];
        c->fd = connect_retry(&ss, alen);
        if (is_raw_zc(cfg_mode))
            setsockopt_int(c->fd, SOL_SOCKET, SO_ZEROCOPY, 1, "SO_ZEROCOPY");
        if (is_lc(cfg_mode)) {
            uint32_t backend_id = cfg_mode == M_LC_ERRQ    ? LOWCOPY_ZC_ERRQUEUE
                                  : cfg_mode == M_LC_URING ? LOWCOPY_ZC_IO_URING
                                                           : LOWCOPY_ZC_AUTO;
            uint32_t flags = cfg_mode == M_LC_AUTO ? LOWCOPY_ZC_ADAPTIVE : 0;
            int r = lowcopy_zc_new(c->fd, backend_id, flags, &c->z);
            if (r < 0)
                die("lowcopy_zc_new on socket %d: %s", k, strerror(-r));
        }
    }
    if (cfg_mode == M_UR_RAW)
        ur_setup();
    use_conn(&t, 0);
    t.limit = cfg_mode == M_ZC_L1 ? 1 : cfg_mode == M_ZC_L8 ? 8 : 32;
    tx_grow(&t);
    backend = backend_name(&t);

    struct cpu c0 = cpu_now();
    double t0 = now_s(), tstop = t0 + cfg_secs;
    double t_loop;
    do {
        if (t.nconns > 1)
            use_conn(&t, t.cur + 1 == t.nconns ? 0 : t.cur + 1);
        bool sent = send_one(&t);
        if (is_raw_zc(t.mode) && t.conns[t.cur].sends_since_notify >= (uint32_t)t.limit)
            raw_recv_completions(&t);
        if (!cfg_app_loop || !sent)
            while (!do_poll(&t, POLLOUT))
                collect(&t);
    } while (now_s() < tstop);
    t_loop = now_s() - t0;
    t.reap_loop = reap_syscalls(&t);
    wait_rest(&t);
    struct cpu c1 = cpu_now();

    if (is_lc(cfg_mode)) {
        st = lc_stats(&t);
        t.sys_send = (long long)st.syscalls_send;
        t.sys_reap = (long long)st.syscalls_reap;
        t.enobufs = (long long)st.enobufs;
    }
    for (int k = 0; k < t.nconns; k++) {
        if (is_lc(cfg_mode)) {
            int left = lowcopy_zc_free(t.conns[k].z);
            if (left != 0)
                warnx("lowcopy_zc_free: %d sends still in flight", left);
        }
        close(t.conns[k].fd);
        free(t.conns[k].idx);
    }
    free(t.conns);

    long long missing = 0;
    bool want_compl = t.mode != M_COPY;
    if (want_compl)
        for (long long i = 0; i < t.sends; i++)
            missing += !t.seen[i];
    if (is_lc(cfg_mode) && (st.sends != (uint64_t)t.sends || st.completions != (uint64_t)t.completions))
        warnx("lowcopy stats disagree: sends %llu vs %lld, completions %llu vs %lld",
              (unsigned long long)st.sends, t.sends, (unsigned long long)st.completions,
              t.completions);
    bool ok = !want_compl || (missing == 0 && t.dup == 0 && t.stray == 0 && t.wrong_len == 0);
    if (!ok)
        warnx("%s: %lld sends, %lld completions: %lld missing, %lld duplicate, %lld stray, "
              "%lld wrong length",
              mode_names[t.mode], t.sends, t.completions, missing, t.dup, t.stray, t.wrong_len);

    double cpu = (c1.user - c0.user) + (c1.sys - c0.sys);
    double mb = t.bytes / 1e6;
    printf("zc_bench tx path=%s proto=%s family=%d mode=%s senders=%d backend=%s loop=%s size=%d secs=%.3f "
           "bytes=%lld sends=%lld eagain=%lld ebusy=%lld enobufs=%lld completions=%lld copied=%lld "
           "missing=%lld dup=%lld stray=%lld wrong_len=%lld errq_other=%lld "
           "sys_send=%lld sys_reap=%lld reap_loop=%lld reap_wait=%lld sys_poll=%lld "
           "zc_sends=%llu copy_sends=%llu zc_off=%llu window_full=%llu unexpected_ids=%llu "
           "cpu_user=%.4f cpu_sys=%.4f csw=%ld mb=%.1f mb_s=%.1f mb_per_cpu_s=%.1f "
           "cpu_s_per_gb=%.4f ok=%d\n",
           cfg_label, cfg_type == SOCK_STREAM ? "tcp" : "udp", cfg_family == AF_INET ? 4 : 6,
           mode_names[t.mode], t.nconns, backend, cfg_app_loop ? "app" : "selftest", cfg_size, t_loop, t.bytes, t.sends, t.eagain, t.ebusy,
           t.enobufs, want_compl ? t.completions : -1, want_compl ? t.copied : -1, missing,
           t.dup, t.stray, t.wrong_len, t.errq_other, t.sys_send, t.sys_reap, t.reap_loop, t.reap_wait, t.sys_poll,
           (unsigned long long)st.zerocopy_sends, (unsigned long long)st.copy_sends,
           (unsigned long long)st.zerocopy_off, (unsigned long long)st.window_full,
           (unsigned long long)st.unexpected_ids,
           c1.user - c0.user, c1.sys - c0.sys, c1.csw - c0.csw, mb, mb / t_loop,
           cpu > 0 ? mb / cpu : 0.0, mb > 0 ? cpu / (mb / 1e3) : 0.0, ok);
    free(t.sent_len);
    free(t.seen);
    return ok ? 0 : 1;
}

/* ---------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr,
            "usage: zc_bench -r [-4|-6] [-t tcp|udp] [-D addr] [-p port] [-T secs]\n"
            "       zc_bench [-4|-6] [-t tcp|udp] -D addr [-p port] [-s size] [-T secs]\n"
            "                [-m copy|zc-l1|zc-l8|zc-l32|lc-errq|lc-uring|lc-auto]\n"
            "                [-w wait_ms] [-C cpu] [-L label] [-P] [-N senders] [-v]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int c;

    while ((c = getopt(argc, argv, "46rt:D:p:s:T:m:w:C:L:PN:v")) != -1) {
        switch (c) {
        case '4': cfg_family = AF_INET; break;
        case '6': cfg_family = AF_INET6; break;
        case 'r': cfg_rx = true; break;
        case 't':
            if (!strcmp(optarg, "tcp"))
                cfg_type = SOCK_STREAM;
            else if (!strcmp(optarg, "udp"))
                cfg_type = SOCK_DGRAM;
            else
                usage();
            break;
        case 'D': cfg_dst = optarg; break;
        case 'p': cfg_port = atoi(optarg); break;
        case 's': cfg_size = atoi(optarg); break;
        case 'T': cfg_secs = atof(optarg); break;
        case 'm': {
            int m;
            for (m = 0; m < M_COUNT && strcmp(optarg, mode_names[m]); m++)
                ;
            if (m == M_COUNT)
                usage();
            cfg_mode = (enum mode)m;
            break;
        }
        case 'w': cfg_wait_ms = atoi(optarg); break;
        case 'C': cfg_cpu = atoi(optarg); break;
        case 'L': cfg_label = optarg; break;
        case 'P': cfg_app_loop = true; break;
        case 'N': cfg_senders = atoi(optarg); break;
        case 'v': cfg_verbose++; break;
        default: usage();
        }
    }
    if (optind != argc || cfg_size <= 0 || cfg_size > MAX_PAYLOAD || cfg_secs <= 0 ||
        cfg_senders < 1)
        usage();
    if (cfg_senders > 1 && !cfg_rx && cfg_type != SOCK_DGRAM)
        die("-N above 1 is for UDP");
    for (int i = 0; i < IP_MAXPACKET; i++)
        payload[i] = 'a' + (i % 26);
    pin_cpu();
    setvbuf(stdout, NULL, _IOLBF, 0);
    return cfg_rx ? do_rx() : do_tx();
}
