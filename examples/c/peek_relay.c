/* peek_relay.c - a TCP relay that keeps unacknowledged data in the kernel.
 *
 * Each accepted connection is forwarded to --connect.  In the peek modes the
 * relay works the way passt (the user-mode network stack) handles a socket:
 * the bytes of one direction stay in the SOURCE socket's receive queue until
 * the destination's peer has acknowledged them.  Per direction:
 *
 *   - a lowcopy_peeker on the source fd; peeking copies the bytes after the
 *     cursor straight into one shared buffer, and write() passes them to the
 *     destination at once.  Nothing is queued in user space: what the
 *     destination does not take is given back by seeking the cursor back
 *     over it, and peeked again later.
 *   - acknowledged = bytes written to dst - ioctl(dst, SIOCOUTQ); the newly
 *     acknowledged bytes are dropped from the source with
 *     lowcopy_peeker_consume().  Only then does the source's receive window
 *     open again, so the client is paced by the far peer's ACKs.
 *   - the bytes in flight are bounded by the destination's send buffer (we
 *     write until it says EAGAIN, then wait for EPOLLOUT) and by the source's
 *     receive buffer (unconsumed bytes close the client's window).
 *   - at end of stream after the cursor (peek returns 0), FIN goes to dst only
 *     once everything before it was acknowledged and consumed.
 *
 * --copy is the baseline every proxy uses: read() into a per-direction user
 * buffer, write() it out, same epoll structure.
 *
 * Urgent data (TCP MSG_OOB) is carried inline in every mode: the urgent byte
 * reaches the far peer as an ordinary byte where the sender put it in the
 * stream, and the connection is neither reset nor cut at the mark.  Urgency
 * itself is not forwarded (RFC 6093: applications should not rely on it).
 *
 * Wakeups.  The loop is level-triggered epoll.  poll/epoll ignore the peek
 * offset (KERNEL-FACTS 0.5), so a source whose queued bytes are all peeked
 * would stay EPOLLIN forever; lowcopy_peeker_set_lowat_armed() keeps
 * SO_RCVLOWAT at cursor + 1 so that EPOLLIN means "a byte beyond the cursor".
 * TCP still reports EPOLLIN under receive-memory pressure or a nearly closed
 * receive window whatever SO_RCVLOWAT says (tcp_epollin_ready), which is
 * exactly the state of a source full of unconsumed bytes: such an EPOLLIN
 * that finds nothing to peek mutes the source until a consume makes room.
 *
 * What tells us that the destination's peer acknowledged data?  EPOLLOUT
 * only fires after a write found the send buffer full (SOCK_NOSPACE); new data
 * on the source wakes us too.  When neither happens - the destination's send
 * buffer has room, and the source's window is closed because its receive
 * queue is full of peeked, unconsumed bytes - no event would ever come.  So
 * while some direction has unacknowledged bytes the loop also sweeps those
 * directions every --ack-poll-ms (default 1 ms): one SIOCOUTQ per direction
 * with bytes in flight (plus the consume it enables), no work at all when
 * every direction is idle or fully acknowledged (epoll_wait then blocks
 * without a timeout).  A direction whose far peer stops reading backs off to
 * a sweep every 16 periods.  The sweep runs on its own clock, so a busy
 * connection that keeps epoll_wait returning early cannot starve a stalled
 * one.  (Precise alternatives - SO_TIMESTAMPING TX_ACK notifications on
 * dst's error queue - cost a notification per write; in practice most ACKs
 * are collected on the data path anyway, see sweep_consumed in the summary.)
 *
 * Capacity.  At most --max-pairs (4096) connections are relayed at once; then the relay
 * stops accepting and the next ones wait in the kernel's accept queue until a pair frees
 * (on_listen): a connection is never accepted only to be closed.  The pairs are reserved
 * at start-up and cost memory only while used (pool_init).
 *
 * On SIGINT/SIGTERM, or after --max-conns connections finished, one summary
 * line goes to stdout:
 *   relay mode=offset effective=offset conns=N bytes=... cpu_s=...
 *         peek_syscalls=... bytes_peeked=... bytes_skipped_copied=...
 *         bytes_consumed=... (and more counters)
 *
 * Build: gcc -Wall -Wextra -Werror -O2 $(pkg-config --cflags lowcopy) \
 *            peek_relay.c $(pkg-config --libs lowcopy)
 * Usage: peek_relay --listen HOST:PORT --connect HOST:PORT
 *                   [--peek auto|offset|discard | --copy] [--max-conns N]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <lowcopy.h>
#include <lowcopy_syscalls.h>

#define KIB ((size_t)1024)
#define DEFAULT_BUF (128 * KIB)
#define MAX_EVENTS 64
#define DEFAULT_PAIRS 4096     /* connections relayed at once (--max-pairs), see pool_init() */
#define FD_RESERVE 16          /* descriptors besides the pairs' two each: stdio, epoll, ... */
#define WARM_BYTES (1024 * KIB)   /* freed pairs' copy buffers kept resident for reuse */
#define TRIM_STATE_BYTES (64 * KIB)   /* idle, give back the pairs' state beyond this */
#define ACK_BACKOFF_MAX 4      /* an idle direction is swept every 1, 2, 4, 8, 16 periods */

/* ---------------------------------------------------------------- types */

struct opts {
    const char *listen;
    const char *connect;
    bool copy;
    uint32_t peek_mode;        /* LOWCOPY_PEEK_* */
    const char *mode_name;
    uint64_t max_conns;        /* 0 = run until a signal */
    size_t buflen;
    int sndbuf;                /* SO_SNDBUF for both sockets of a pair; 0 = autotune */
    int ack_poll_ms;
    size_t max_pairs;          /* the pair pool, reserved at start-up */
    bool sandbox;              /* seccomp after start-up: documented syscalls, no allocation */
    bool verbose;
};

/* Counters for the summary line. */
struct totals {
    uint64_t conns, bytes, resets, connect_failures;
    uint64_t syscalls, peeks, bytes_peeked, bytes_skipped_copied, bytes_consumed;
    uint64_t rcvlowat_updates;
    uint64_t rewinds, bytes_rewound;   /* dst took less than we peeked */
    uint64_t wakeups, sweeps, sweep_consumed, muted;
    uint64_t pairs_peak;       /* most pairs in use at once */
    uint64_t listen_pauses;    /* times accept() stopped: pool full or out of descriptors */
    uint64_t pool_trims;       /* times the idle pool's memory was given back (pool_trim) */
};

struct pair;

/* One direction: bytes from src (a fd of the pair) to dst (the other one). */
struct dir {
    struct pair *pair;
    int src, dst;
    lowcopy_peeker *pk;      /* peek modes: made in pk_mem, never on the heap */
    lowcopy_peeker_storage pk_mem;
    char *cbuf;              /* copy mode: pending bytes are cbuf[chead, ctail) */
    size_t chead, ctail;
    size_t ctouched;         /* copy mode: most of cbuf ever filled, i.e. its resident part;
                              * kept across reuse of a warm pair (pool_get) */
    uint64_t written;        /* bytes written to dst */
    uint64_t consumed;       /* peek modes: acknowledged bytes dropped from src */
    bool src_eof;            /* nothing more will come from src */
    bool dst_blocked;        /* dst's send buffer was full: wait for EPOLLOUT */
    bool muted;              /* EPOLLIN off: it fired with nothing to peek */
    bool fin_sent;           /* shutdown(dst, SHUT_WR) done: direction finished */
    bool on_ack_list;
    struct dir *ack_prev, *ack_next;
    int64_t ack_due_ns;      /* when the sweep looks at it next */
    unsigned ack_idle;       /* sweeps in a row that saw no ACK progress */
    uint64_t consumed_at_sweep;
};

enum ep_kind { EP_LISTEN, EP_SIGNAL, EP_SOCK };

/* What epoll_event.data.ptr points at. */
struct endpoint {
    enum ep_kind kind;
    struct pair *pair;
    int side;
};

struct pair {
    int fd[2];               /* [0] accepted (client side), [1] connected (server side) */
    uint32_t events[2];      /* mask currently registered in epoll */
    bool parked[2];          /* removed from epoll after a hangup, see on_hangup() */
    struct endpoint ep[2];
    struct dir d[2];         /* d[i] moves fd[i] -> fd[i ^ 1] */
    bool connecting;
    bool dead;               /* closed; freed after the current epoll batch */
    struct pair *next_zombie;
    struct pair *live_prev, *live_next;   /* relay.live: every open pair */
    struct pair *next_free;  /* relay.warm_pairs or relay.cold_pairs */
    int family[2];           /* of fd[0] and fd[1], for lowcopy_peeker_init */
};

struct relay {
    struct opts o;
    int epfd, lfd, sigfd;
    bool listen_paused;      /* pool full or out of fds: accept() resumes when a pair frees */
    bool stop;
    char *buf;               /* peek modes: the only data buffer, shared by all (page-aligned) */
    struct sockaddr_storage dst_addr;
    socklen_t dst_len;
    struct dir *ack_head;    /* directions with unacknowledged bytes */
    struct dir *sweep_next;  /* iterator of sweep(), kept valid by ack_list_del */
    int64_t next_sweep_ns;
    struct pair *zombies;
    struct pair *live;
    struct pair *pool;       /* max_pairs pairs, reserved at start-up (pool_init) */
    size_t pool_fresh;       /* pool[pool_fresh..] never used since start or the last trim */
    struct pair *warm_pairs; /* freed, copy buffers still resident: reused first (LIFO) */
    struct pair *cold_pairs; /* freed, copy buffers given back to the kernel */
    size_t warm_bytes;       /* copy-buffer bytes the warm pairs keep resident */
    size_t live_pairs;       /* pairs in use (on r->live or zombies) */
    char *cbufs;             /* copy mode: 2 x max_pairs buffers, reserved at start-up */
    size_t cstride;          /* bytes from one copy buffer to the next: buflen, page-rounded */
    size_t page;             /* the page size */
    size_t buf_map, cbufs_map, pool_map;   /* mapped lengths (munmap at exit) */
    uint32_t effective_mode; /* mechanism of the first peeker, for the summary */
    bool have_effective;
    struct totals t;
    struct endpoint listen_ep, signal_ep;
    int listen_family;
};

/* ---------------------------------------------------------------- utilities */

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("peek_relay: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static bool g_verbose;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    if (!g_verbose)
        return;
    fputs("peek_relay: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail with a valid pointer; the vDSO makes it cheap. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int sock_error(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return errno;
    return err;
}

/* Split "host:port", "[v6]:port" or ":port" and resolve it. */
static void resolve(const char *spec, bool passive, struct sockaddr_storage *ss,
                    socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec + strlen(spec) - 1)
        die("'%s': expected HOST:PORT", spec);
    size_t hl = (size_t)(colon - spec);
    if (hl >= sizeof(host))
        die("'%s': host too long", spec);
    memcpy(host, spec, hl);
    host[hl] = '\0';
    char *h = host;
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        h = host + 1;
    }
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP,
                              .ai_flags = passive ? AI_PASSIVE : 0 };
    struct addrinfo *res;
    int rc = getaddrinfo(*h ? h : NULL, colon + 1, &hints, &res);
    if (rc != 0)
        die("'%s': %s", spec, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
}

static void format_addr(const struct sockaddr *sa, socklen_t len, char *out, size_t n)
{
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, n, "?");
        return;
    }
    snprintf(out, n, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

/* ---------------------------------------------------------------- ack list */

/* Directions with bytes written but not yet acknowledged: the ones a sweep
 * has to look at.  A doubly linked list, so that entering and leaving it is
 * O(1) on the data path. */
static void ack_list_add(struct relay *r, struct dir *d)
{
    if (d->on_ack_list)
        return;
    d->on_ack_list = true;
    d->ack_idle = 0;
    d->consumed_at_sweep = d->consumed;
    d->ack_due_ns = now_ns() + (int64_t)r->o.ack_poll_ms * 1000000;
    if (!r->ack_head || d->ack_due_ns < r->next_sweep_ns)
        r->next_sweep_ns = d->ack_due_ns;
    d->ack_prev = NULL;
    d->ack_next = r->ack_head;
    if (r->ack_head)
        r->ack_head->ack_prev = d;
    r->ack_head = d;
}

static void ack_list_del(struct relay *r, struct dir *d)
{
    if (!d->on_ack_list)
        return;
    if (r->sweep_next == d)       /* closing a pair during a sweep */
        r->sweep_next = d->ack_next;
    if (d->ack_prev)
        d->ack_prev->ack_next = d->ack_next;
    else
        r->ack_head = d->ack_next;
    if (d->ack_next)
        d->ack_next->ack_prev = d->ack_prev;
    d->on_ack_list = false;
    d->ack_prev = d->ack_next = NULL;
}

static void ack_list_update(struct relay *r, struct dir *d)
{
    if (d->pk && !d->fin_sent && d->written > d->consumed)
        ack_list_add(r, d);
    else
        ack_list_del(r, d);
}

/* ---------------------------------------------------------------- epoll interest */

/* What fd[side] must be watched for.  It is the source of d[side] and the
 * destination of d[side ^ 1].  EPOLLERR and EPOLLHUP are always reported. */
static uint32_t wanted_events(const struct pair *p, int side)
{
    if (p->connecting)
        return side == 1 ? EPOLLOUT : 0;
    const struct dir *out = &p->d[side];
    const struct dir *in = &p->d[side ^ 1];
    uint32_t ev = 0;
    /* A blocked destination means more peeking or reading is pointless. */
    if (!out->src_eof && !out->dst_blocked && !out->muted)
        ev |= EPOLLIN;
    if (in->dst_blocked && !in->fin_sent)
        ev |= EPOLLOUT;
    return ev;
}

static int update_events(struct relay *r, struct pair *p)
{
    for (int s = 0; s < 2; s++) {
        uint32_t want = wanted_events(p, s);
        if (p->parked[s] || want == p->events[s])
            continue;
        struct epoll_event ev = { .events = want, .data.ptr = &p->ep[s] };
        if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, p->fd[s], &ev) < 0)
            return -errno;
        p->events[s] = want;
    }
    return 0;
}

/* ---------------------------------------------------------------- pair lifetime */

static void dir_collect_stats(struct relay *r, struct dir *d)
{
    r->t.bytes += d->written;
    if (!d->pk)
        return;
    lowcopy_peek_stats st;
    int rc = lowcopy_peeker_stats(d->pk, &st, sizeof(lowcopy_peek_stats));
    if (rc < 0) {
        fprintf(stderr, "peek_relay: lowcopy_peeker_stats: %s\n", strerror(-rc));
        return;
    }
    r->t.syscalls += st.syscalls;
    r->t.peeks += st.peeks;
    r->t.bytes_peeked += st.bytes_peeked;
    r->t.bytes_skipped_copied += st.bytes_skipped_copied;
    r->t.bytes_consumed += st.bytes_consumed;
    r->t.rcvlowat_updates += st.rcvlowat_updates;
}

static int listen_resume(struct relay *r);

/* Close both sockets; with err != 0 reset them (SO_LINGER 0) so that each peer
 * learns that its connection is gone rather than seeing a clean FIN.  The
 * pair itself is freed after the epoll batch: later events of the same
 * batch may still point at it. */
static void pair_close(struct relay *r, struct pair *p, int err)
{
    if (p->dead)
        return;
    p->dead = true;
    for (int i = 0; i < 2; i++) {
        struct dir *d = &p->d[i];
        dir_collect_stats(r, d);
        ack_list_del(r, d);
        /* The fd is closed next: nothing to restore, no syscall. */
        if (d->pk && lowcopy_peeker_release(d->pk, LOWCOPY_RELEASE_CLOSING) < 0)
            note("lowcopy_peeker_release failed");
        d->pk = NULL;
        d->cbuf = NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (p->fd[i] < 0)
            continue;
        if (err) {
            struct linger lg = { .l_onoff = 1, .l_linger = 0 };
            if (setsockopt(p->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
                note("SO_LINGER: %s", strerror(errno));
        }
        /* close() also drops it from the epoll set (no dup()s exist). */
        if (close(p->fd[i]) < 0)
            note("close: %s", strerror(errno));
        p->fd[i] = -1;
    }
    if (p->live_prev)
        p->live_prev->live_next = p->live_next;
    else
        r->live = p->live_next;
    if (p->live_next)
        p->live_next->live_prev = p->live_prev;
    r->t.conns++;
    if (err) {
        r->t.resets++;
        note("connection reset: %s", strerror(err));
    }
    p->next_zombie = r->zombies;
    r->zombies = p;
}

/* ---------------------------------------------------------------- pair pool */

/* The pool is reserved at start-up (pool_init) and costs resident memory only where it is
 * used: a pair that never ran was never touched.  Freed pairs are reused last-in first-out,
 * so that a steady load keeps reusing the same few pairs and pages.  In copy mode each pair
 * owns two buffers of --buf bytes; a freed pair keeps its buffers' touched pages only while
 * all warm pairs together keep at most WARM_BYTES (reuse then costs no page fault), beyond
 * that they are given back (MADV_DONTNEED) and the pair joins the cold list, used after the
 * warm one.  Peek modes have no per-pair buffers. */

static size_t page_round(const struct relay *r, size_t n)
{
    return (n + r->page - 1) / r->page * r->page;
}

/* Tell the kernel that [addr, addr + len) may go: the next touch finds a zero page. */
static void give_back(void *addr, size_t len)
{
    if (len && madvise(addr, len, MADV_DONTNEED) < 0)
        note("madvise: %s", strerror(errno));
}

/* Resident bytes of the pair's copy buffers (0 in the peek modes). */
static size_t pair_buf_bytes(const struct relay *r, const struct pair *p)
{
    return page_round(r, p->d[0].ctouched) + page_round(r, p->d[1].ctouched);
}

static char *pair_cbuf(const struct relay *r, const struct pair *p, int i)
{
    return r->cbufs + ((size_t)(p - r->pool) * 2 + (size_t)i) * r->cstride;
}

static bool pool_has_free(const struct relay *r)
{
    return r->warm_pairs || r->cold_pairs || r->pool_fresh < r->o.max_pairs;
}

/* A pair for a new connection, zeroed but for what its buffers hold; NULL if all are in use. */
static struct pair *pool_get(struct relay *r)
{
    struct pair *p;
    if (r->warm_pairs) {
        p = r->warm_pairs;
        r->warm_pairs = p->next_free;
        r->warm_bytes -= pair_buf_bytes(r, p);
    } else if (r->cold_pairs) {
        p = r->cold_pairs;
        r->cold_pairs = p->next_free;
    } else if (r->pool_fresh < r->o.max_pairs) {
        p = &r->pool[r->pool_fresh++];
    } else {
        return NULL;
    }
    size_t touched[2] = { p->d[0].ctouched, p->d[1].ctouched };
    memset(p, 0, sizeof *p);
    p->d[0].ctouched = touched[0];
    p->d[1].ctouched = touched[1];
    if (++r->live_pairs > r->t.pairs_peak)
        r->t.pairs_peak = r->live_pairs;
    return p;
}

/* A closed pair back to the pool: warm, or cold once WARM_BYTES are kept. */
static void pool_put(struct relay *r, struct pair *p)
{
    size_t bytes = pair_buf_bytes(r, p);
    r->live_pairs--;
    if (bytes && r->warm_bytes + bytes > WARM_BYTES) {
        /* One call for both buffers (adjacent): the untouched pages between cost nothing. */
        char *end = p->d[1].ctouched ? pair_cbuf(r, p, 1) + page_round(r, p->d[1].ctouched)
                                     : pair_cbuf(r, p, 0) + page_round(r, p->d[0].ctouched);
        give_back(pair_cbuf(r, p, 0), (size_t)(end - pair_cbuf(r, p, 0)));
        p->d[0].ctouched = p->d[1].ctouched = 0;
        p->next_free = r->cold_pairs;
        r->cold_pairs = p;
        return;
    }
    r->warm_bytes += bytes;
    p->next_free = r->warm_pairs;
    r->warm_pairs = p;
}

/* With no pair in use, give the whole touched pool back once the pairs' own state (872
 * bytes each) keeps more than TRIM_STATE_BYTES resident, about 75 pairs: after a burst of
 * connections the relay returns to its start-up footprint, while a small steady load (whose
 * few pairs stay under the bound) never pays for faulting them in again.  The buffers go
 * too, warm ones included: a fresh pair's must be zero pages (its ctouched is 0).  Under a
 * load that never drops to zero, freed pairs' state stays, their buffers do not (pool_put). */
static void pool_trim(struct relay *r)
{
    size_t state = page_round(r, r->pool_fresh * sizeof *r->pool);
    if (r->live_pairs || state <= TRIM_STATE_BYTES)
        return;
    give_back(r->pool, state);
    if (r->cbufs)
        give_back(r->cbufs, r->pool_fresh * 2 * r->cstride);
    r->pool_fresh = 0;
    r->warm_pairs = r->cold_pairs = NULL;
    r->warm_bytes = 0;
    r->t.pool_trims++;
}

/* Closed pairs go back to the pool after the epoll batch; a listener paused for want of a
 * pair (or of descriptors, which closing them freed) accepts again. */
static void free_zombies(struct relay *r)
{
    if (!r->zombies)
        return;
    while (r->zombies) {
        struct pair *p = r->zombies;
        r->zombies = p->next_zombie;
        pool_put(r, p);
    }
    pool_trim(r);
    if (r->listen_paused && listen_resume(r) < 0)
        die("epoll_ctl(listener): %s", strerror(errno));
}

static bool pair_done(const struct pair *p)
{
    return p->d[0].fin_sent && p->d[1].fin_sent;
}

/* ---------------------------------------------------------------- peek direction */


/* Drop from src what dst's peer acknowledged, and send FIN once the source
 * ended and nothing is left unacknowledged.  Returns bytes consumed or -errno. */
static ssize_t collect_acks(struct relay *r, struct dir *d)
{
    ssize_t got = 0;
    if (d->fin_sent)
        return 0;
    if (d->written > d->consumed) {
        int outq;
        /* SIOCOUTQ = write_seq - snd_una: sent-or-queued bytes not yet ACKed.
         * Every byte of dst's send queue belongs to this direction. */
        if (ioctl(d->dst, SIOCOUTQ, &outq) < 0)
            return -errno;
        uint64_t inflight = d->written - d->consumed;
        if (outq >= 0 && (uint64_t)outq < inflight) {
            got = lowcopy_peeker_consume(d->pk, (size_t)(inflight - (uint64_t)outq));
            if (got < 0)
                return got;
            /* The bytes were peeked from the queue and are still in it,
             * unless the socket lost them: do not wait for them forever. */
            if (got == 0)
                return -EPIPE;
            d->consumed += (uint64_t)got;
            /* The window of src may reopen: listen to it again. */
            if (got > 0)
                d->muted = false;
        }
    }
    if (d->src_eof && d->consumed == d->written) {
        if (shutdown(d->dst, SHUT_WR) < 0)
            return -errno;
        d->fin_sent = true;
        note("fd %d -> fd %d finished after %" PRIu64 " bytes", d->src, d->dst, d->written);
    }
    ack_list_update(r, d);
    return got;
}

/* src of d was taken out of epoll after its hangup (on_hangup): no event will
 * call us for it again. */
static bool src_parked(const struct dir *d)
{
    return d->pair->parked[d - d->pair->d];
}

/* Peek new bytes at the cursor and write them to dst until src has no more,
 * dst's send buffer is full, or the stream ended.  `by_epollin`: called for an
 * EPOLLIN event on src, so that one with nothing to peek is recognised. */
static int pump_peek(struct relay *r, struct dir *d, bool by_epollin)
{
    bool got = false;
again:
    while (!d->src_eof && !d->dst_blocked) {
        /* The relay's own arithmetic, as passt's: the bytes after the ones written to dst
         * and not yet acknowledged (still queued in src) are at written - consumed. Bytes
         * dst did not take are simply peeked again from there: no seek. */
        lowcopy_peek_result res;
        size_t off = (size_t)(d->written - d->consumed);
        ssize_t n = lowcopy_peeker_peek_at(d->pk, off, r->buf, r->o.buflen, MSG_DONTWAIT, &res,
                                           sizeof res);
        if (n == -EAGAIN)
            break;
        if (n < 0)
            return (int)n;
        /* What was peeked from where: the stream position of `off` must be the next byte
         * dst is owed, or the offset arithmetic went wrong. */
        if (res.stream_pos != d->written) {
            note("peek at %zu gave stream position %" PRIu64 ", expected %" PRIu64, off,
                 res.stream_pos, d->written);
            return -EIO;
        }
        if (n == 0) {
            d->src_eof = true;
            break;
        }
        got = true;
        ssize_t w = send(d->dst, r->buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return -errno;
            w = 0;
        }
        d->written += (uint64_t)w;
        if (w < n) {
            /* A short write set SOCK_NOSPACE: EPOLLOUT will come when ACKs
             * free half of dst's send buffer. The rest stays in src, peeked again
             * from written - consumed then. */
            r->t.rewinds++;
            r->t.bytes_rewound += (uint64_t)(n - w);
            d->dst_blocked = true;
        }
    }
    /* Readable, yet nothing beyond the cursor: TCP's rmem-pressure or
     * small-window rule fired (or the kernel's SO_RCVLOWAT cap was reached).
     * Level-triggered, it would fire again at once; mute src until a consume
     * makes room.  Only with bytes in flight, which guarantees that the
     * sweep or a consume unmutes it. */
    if (by_epollin && !got && !d->src_eof && !d->dst_blocked && d->written > d->consumed) {
        d->muted = true;
        r->t.muted++;
    }
    ssize_t acked = collect_acks(r, d);
    if (acked < 0)
        return (int)acked;
    /* A consume can make bytes peekable that were not (a discard peek cannot pass
     * TCP's urgent mark until the bytes before it are consumed, where the socket
     * has no SO_PEEK_OFF).  Epoll reports that for a source it still watches; a
     * parked one must be peeked again here. */
    if (acked > 0 && src_parked(d) && !d->src_eof && !d->dst_blocked) {
        by_epollin = false;
        goto again;
    }
    return 0;
}

/* ---------------------------------------------------------------- copy direction */

/* The classic relay: drain the user buffer into dst, refill it from src. */
static int pump_copy(struct relay *r, struct dir *d)
{
    for (;;) {
        if (d->chead < d->ctail) {
            ssize_t w = send(d->dst, d->cbuf + d->chead, d->ctail - d->chead,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w < 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                    return -errno;
                d->dst_blocked = true;
                break;
            }
            d->chead += (size_t)w;
            d->written += (uint64_t)w;
            if (d->chead < d->ctail) {
                d->dst_blocked = true;
                break;
            }
        }
        d->chead = d->ctail = 0;
        if (d->src_eof)
            break;
        ssize_t n = read(d->src, d->cbuf, r->o.buflen);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -errno;
        }
        if (n == 0) {
            d->src_eof = true;
            break;
        }
        d->ctail = (size_t)n;
        if (d->ctail > d->ctouched)
            d->ctouched = d->ctail;
    }
    if (d->src_eof && d->chead == d->ctail && !d->fin_sent) {
        if (shutdown(d->dst, SHUT_WR) < 0)
            return -errno;
        d->fin_sent = true;
    }
    return 0;
}

static int pump(struct relay *r, struct dir *d, bool by_epollin)
{
    if (d->fin_sent)
        return 0;
    return r->o.copy ? pump_copy(r, d) : pump_peek(r, d, by_epollin);
}

/* ---------------------------------------------------------------- connection setup */

static int dir_init(struct relay *r, struct pair *p, int i)
{
    struct dir *d = &p->d[i];
    if (r->o.copy) {
        d->cbuf = pair_cbuf(r, p, i);
        return 0;
    }
    /* In the pair's own memory, the socket's kind stated: no allocation, no getsockopt. */
    int rc = lowcopy_peeker_init(&d->pk_mem, sizeof d->pk_mem, d->src, r->o.peek_mode,
                                 p->family[i], IPPROTO_TCP, &d->pk);
    if (rc < 0)
        return rc;
    if (!r->have_effective) {
        r->effective_mode = lowcopy_peeker_mode(d->pk);
        r->have_effective = true;
    }
    return lowcopy_peeker_set_lowat_armed(d->pk, 1);
}

/* The relay writes whatever it has at once; Nagle would hold a tail segment
 * back until earlier data is ACKed, delaying exactly the ACKs we wait for. */
static int set_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        return -errno;
    return 0;
}

/* A fixed send buffer bounds the bytes in flight per direction (peek modes)
 * or queued in the kernel (copy mode); the default is the kernel's autotuning. */
static int set_sndbuf(int fd, int bytes)
{
    if (bytes && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) < 0)
        return -errno;
    return 0;
}

/* The outgoing connection is up (or failed): start relaying. */
static int finish_connect(struct relay *r, struct pair *p)
{
    int err = sock_error(p->fd[1]);
    if (err) {
        r->t.connect_failures++;
        return -err;
    }
    p->connecting = false;
    for (int i = 0; i < 2; i++) {
        int rc = set_nodelay(p->fd[i]);
        if (rc < 0)
            return rc;
        rc = dir_init(r, p, i);
        if (rc < 0)
            return rc;
    }
    /* Bytes the client sent meanwhile are already queued; level-triggered
     * epoll would report them, but there is no reason to wait for that. */
    for (int i = 0; i < 2; i++) {
        int rc = pump(r, &p->d[i], false);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static struct pair *pair_new(struct relay *r, int cfd)
{
    struct pair *p = pool_get(r);
    if (!p)
        return NULL;
    p->family[0] = r->listen_family;
    p->family[1] = r->dst_addr.ss_family;
    p->fd[0] = cfd;
    p->fd[1] = -1;
    p->connecting = true;
    for (int i = 0; i < 2; i++) {
        p->ep[i] = (struct endpoint){ .kind = EP_SOCK, .pair = p, .side = i };
        p->d[i].pair = p;
    }
    return p;
}

static int pair_register(struct relay *r, struct pair *p)
{
    for (int s = 0; s < 2; s++) {
        /* fd[0] is registered with no events while connecting: that still
         * reports EPOLLERR/EPOLLHUP, i.e. a client that resets meanwhile. */
        uint32_t want = wanted_events(p, s);
        struct epoll_event ev = { .events = want, .data.ptr = &p->ep[s] };
        if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, p->fd[s], &ev) < 0)
            return -errno;
        p->events[s] = want;
    }
    return 0;
}

/* Urgent data (TCP MSG_OOB) is relayed inline, as an ordinary byte where the peer put
 * it in the stream (RFC 6093's advice; urgency itself is not forwarded). The peek modes'
 * peekers set SO_OOBINLINE themselves (lowcopy's policy: peeks then deliver what reads do);
 * the copy mode's reads need it as much, or they would drop the urgent byte. Set from the
 * start (the listener's is inherited by accepted sockets), so that no urgent byte arrives
 * while it is off: with it off the kernel may drop an earlier urgent byte from the stream
 * when a later one comes (tcp_check_urg). */
static int set_oobinline(int fd)
{
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof(one)) < 0)
        return -errno;
    return 0;
}

/* Open fd[1] and start a non-blocking connect to the destination. */
static int open_outgoing(struct relay *r, struct pair *p)
{
    p->fd[1] = socket(r->dst_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      IPPROTO_TCP);
    if (p->fd[1] < 0)
        return -errno;
    p->d[0].src = p->d[1].dst = p->fd[0];
    p->d[1].src = p->d[0].dst = p->fd[1];
    int rc = set_sndbuf(p->fd[0], r->o.sndbuf);
    if (rc == 0)
        rc = set_sndbuf(p->fd[1], r->o.sndbuf);
    if (rc == 0)
        rc = set_oobinline(p->fd[1]);
    if (rc < 0)
        return rc;
    if (connect(p->fd[1], (struct sockaddr *)&r->dst_addr, r->dst_len) < 0 &&
        errno != EINPROGRESS)
        return -errno;
    return pair_register(r, p);
}

/* A client arrived: start relaying it once the outgoing connection is up.  There is a
 * free pair: on_listen() accepts only then. */
static void start_pair(struct relay *r, int cfd)
{
    struct pair *p = pair_new(r, cfd);
    if (!p)
        die("no free pair for an accepted connection");
    p->live_next = r->live;
    if (r->live)
        r->live->live_prev = p;
    r->live = p;
    int rc = open_outgoing(r, p);
    if (rc < 0) {
        r->t.connect_failures++;
        note("connect: %s", strerror(-rc));
        pair_close(r, p, -rc);
    }
}

static int listen_resume(struct relay *r)
{
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &r->listen_ep };
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->lfd, &ev) < 0)
        return -1;
    r->listen_paused = false;
    return 0;
}

/* Stop accepting until free_zombies() returns a pair.  Level-triggered, a pending
 * connection would otherwise wake us for nothing on every epoll_wait. */
static void listen_pause(struct relay *r, const char *why)
{
    note("%s: pausing accept() until a pair frees", why);
    if (epoll_ctl(r->epfd, EPOLL_CTL_DEL, r->lfd, NULL) < 0)
        die("epoll_ctl(listener): %s", strerror(errno));
    r->listen_paused = true;
    r->t.listen_pauses++;
}

/* Accept what the pool has pairs for.  At capacity a connection is never accepted only to
 * be closed: it stays in the kernel's accept queue (listen(SOMAXCONN), see make_listener),
 * its handshake done and its first bytes queued, until a pair frees.  The client sees a
 * delay, not a refusal. */
static void on_listen(struct relay *r)
{
    while (!r->listen_paused) {     /* a stale event of this batch finds it paused */
        if (!pool_has_free(r)) {
            listen_pause(r, "all pairs in use");
            return;
        }
        int cfd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd >= 0) {
            start_pair(r, cfd);
            continue;
        }
        switch (errno) {
        case EAGAIN:
            return;
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
        case EPERM:
            continue;
        case EMFILE:
        case ENFILE:
        case ENOBUFS:
        case ENOMEM:
            /* Until a pair closes and frees resources. */
            listen_pause(r, strerror(errno));
            return;
        default:
            die("accept: %s", strerror(errno));
        }
    }
}

/* ---------------------------------------------------------------- events */

/* EPOLLHUP: both directions of fd[s] are shut.  If we never shut our sending
 * side, the peer reset the connection.  Otherwise its FIN came and ours went
 * out: this fd has nothing left to tell us, but level-triggered EPOLLHUP
 * cannot be masked and would be reported on every epoll_wait while we still
 * wait for the other peer's ACKs.  Stop watching it; the rest of its data is
 * moved when its destination becomes writable or by the sweep. */
static int on_hangup(struct relay *r, struct pair *p, int s)
{
    if (!p->d[s ^ 1].fin_sent) {
        int err = sock_error(p->fd[s]);
        return -(err ? err : ECONNRESET);
    }
    if (p->parked[s])
        return 0;
    if (epoll_ctl(r->epfd, EPOLL_CTL_DEL, p->fd[s], NULL) < 0)
        return -errno;
    p->parked[s] = true;
    /* The pump before this may have consumed what made more bytes peekable (past an
     * urgent mark): from now on only we look, so look once more. */
    struct dir *d = &p->d[s];
    if (d->pk && !d->src_eof && !d->dst_blocked)
        return pump(r, d, false);
    return 0;
}

static int on_sock_events(struct relay *r, struct pair *p, int s, uint32_t ev)
{
    if (p->connecting) {
        if (s == 1 && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return finish_connect(r, p);
        if (ev & (EPOLLERR | EPOLLHUP)) {      /* the client gave up meanwhile */
            int err = sock_error(p->fd[s]);
            return -(err ? err : ECONNRESET);
        }
        return 0;
    }
    if (ev & EPOLLERR) {
        int err = sock_error(p->fd[s]);
        if (err)
            return -err;
    }
    int rc = 0;
    if (ev & EPOLLOUT) {
        p->d[s ^ 1].dst_blocked = false;
        rc = pump(r, &p->d[s ^ 1], false);
    }
    if (rc == 0 && (ev & (EPOLLIN | EPOLLHUP)))
        rc = pump(r, &p->d[s], (ev & EPOLLIN) != 0);
    if (rc == 0 && (ev & EPOLLHUP))
        rc = on_hangup(r, p, s);
    return rc;
}

/* After any progress: close a finished pair, else refresh its epoll masks. */
static void pair_settle(struct relay *r, struct pair *p, int rc)
{
    if (p->dead)
        return;
    if (rc == 0 && pair_done(p)) {
        pair_close(r, p, 0);
        return;
    }
    if (rc == 0)
        rc = update_events(r, p);
    if (rc < 0)
        pair_close(r, p, -rc);
}

static void on_signal(struct relay *r)
{
    struct signalfd_siginfo si;
    ssize_t n = read(r->sigfd, &si, sizeof(si));
    if (n < 0 && errno != EAGAIN)
        die("read(signalfd): %s", strerror(errno));
    r->stop = true;
}

/* Sweep one direction that is due: consume what was ACKed meanwhile (and send
 * a pending FIN); a consume makes room in the source and unmutes it (see
 * collect_acks).  Without progress a muted source stays muted: it went quiet
 * because TCP's rmem-pressure rule keeps it EPOLLIN while its queue is full of
 * unconsumed bytes, and listening again would only repeat a useless wakeup
 * and peek (the discard mechanism re-copying the whole prefix) every sweep,
 * for as long as the far peer does not read.  A direction that keeps making
 * no progress (its far peer is not reading) is looked at less and less often,
 * down to every ACK_BACKOFF_MAX doublings of the period, so that a stalled
 * connection costs little; any progress brings it back to every period. */
static int sweep_dir(struct relay *r, struct dir *d, int64_t now)
{
    uint64_t before = d->consumed;
    ssize_t got = collect_acks(r, d);
    if (got < 0)
        return (int)got;
    /* A parked source gets no events: peek what the consume made reachable. */
    if (got > 0 && src_parked(d) && !d->src_eof && !d->dst_blocked) {
        int rc = pump_peek(r, d, false);
        if (rc < 0)
            return rc;
    }
    r->t.sweep_consumed += d->consumed - before;
    bool progress = d->consumed != d->consumed_at_sweep;
    d->consumed_at_sweep = d->consumed;
    if (progress)
        d->ack_idle = 0;
    else if (d->ack_idle < ACK_BACKOFF_MAX)
        d->ack_idle++;
    d->ack_due_ns = now + ((int64_t)r->o.ack_poll_ms * 1000000 << d->ack_idle);
    return 0;
}

/* The ACK sweep; see the comment at the top. */
static void sweep(struct relay *r)
{
    int64_t now = now_ns();
    if (!r->ack_head || now < r->next_sweep_ns)
        return;
    r->t.sweeps++;
    int64_t next = INT64_MAX;
    for (struct dir *d = r->ack_head; d; d = r->sweep_next) {
        r->sweep_next = d->ack_next;
        if (d->ack_due_ns <= now) {
            struct pair *p = d->pair;
            pair_settle(r, p, sweep_dir(r, d, now));
        }
        if (d->on_ack_list && d->ack_due_ns < next)
            next = d->ack_due_ns;
    }
    r->sweep_next = NULL;
    r->next_sweep_ns = next;
}

/* epoll_wait's timeout: until the next direction is due, or none. */
static int sweep_timeout_ms(const struct relay *r)
{
    if (!r->ack_head)
        return -1;
    int64_t left = r->next_sweep_ns - now_ns();
    if (left <= 0)
        return 0;
    return (int)((left + 999999) / 1000000);
}

/* ---------------------------------------------------------------- setup */

static int make_listener(const char *spec)
{
    struct sockaddr_storage ss;
    socklen_t len;
    resolve(spec, true, &ss, &len);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
        die("SO_REUSEADDR: %s", strerror(errno));
    if (set_oobinline(fd) < 0)
        die("SO_OOBINLINE: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&ss, len) < 0)
        die("bind %s: %s", spec, strerror(errno));
    /* The accept queue is where connections wait while every pair is in use (on_listen):
     * as long as the kernel allows.  It caps the backlog at net.core.somaxconn (4096 by
     * default since Linux 5.4; SOMAXCONN is 4096 in glibc 2.36's headers too). */
    if (listen(fd, SOMAXCONN) < 0)
        die("listen: %s", strerror(errno));
    return fd;
}

static int make_signalfd(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    /* Blocked signals go to the signalfd: no handler races epoll_wait. */
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        die("sigprocmask: %s", strerror(errno));
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        die("signalfd: %s", strerror(errno));
    return fd;
}

/* ---------------------------------------------------------------- sandbox */

/* The relay's own syscalls once it runs (accepting, connecting, relaying, the summary). */
#define RELAY_SYSCALLS(X) X(epoll_wait) X(epoll_ctl) X(accept4) X(socket) X(connect) \
    X(setsockopt) X(getsockopt) X(ioctl) X(sendto) X(read) X(shutdown) X(close) X(write) \
    X(clock_gettime) X(getrusage) X(exit_group) X(exit) X(rt_sigreturn)
/* lowcopy's, from the data it ships (lowcopy_syscalls.h): the calls this relay makes. */
#define LOWCOPY_USED(X) LOWCOPY_SYSCALLS_lowcopy_peeker_init(X) \
    LOWCOPY_SYSCALLS_lowcopy_peeker_peek_at(X) LOWCOPY_SYSCALLS_lowcopy_peeker_consume(X) \
    LOWCOPY_SYSCALLS_lowcopy_peeker_set_lowat_armed(X) LOWCOPY_SYSCALLS_lowcopy_peeker_mode(X) \
    LOWCOPY_SYSCALLS_lowcopy_peeker_stats(X) LOWCOPY_SYSCALLS_lowcopy_peeker_release(X)
#define AS_NR(name) __NR_##name,

/* Memory is never allocated or freed after start-up (pairs and buffers come from the pools,
 * peekers live in the pairs), so the allocator's syscalls are refused even where a lowcopy
 * list names them (lowcopy_peeker_release frees a heap peeker; ours are not).  The pool's
 * own madvise(MADV_DONTNEED) is let through by sandbox() on its own terms. */
static bool alloc_syscall(int nr)
{
    return nr == __NR_brk || nr == __NR_mmap || nr == __NR_munmap || nr == __NR_mremap ||
           nr == __NR_mprotect || nr == __NR_madvise;
}

/* passt's way: after start-up, a seccomp filter allowing only the syscalls listed above;
 * anything else kills the process (SIGSYS). */
static void sandbox(void)
{
    static const int want[] = { RELAY_SYSCALLS(AS_NR) LOWCOPY_USED(AS_NR) };
    int nrs[sizeof want / sizeof want[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        bool dup = false;
        for (size_t k = 0; k < n; k++)
            dup |= nrs[k] == want[i];
        if (!dup && !alloc_syscall(want[i]))
            nrs[n++] = want[i];
    }
    struct sock_filter f[4 + 2 * (sizeof want / sizeof want[0]) + 4 + 1];
    size_t k = 0;
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, arch));
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, nr));
    for (size_t i = 0; i < n; i++) {
        f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nrs[i], 0, 1);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    /* madvise(MADV_DONTNEED) alone: the pair pool gives pages back with it (pool_put,
     * pool_trim); it frees and never allocates.  Any other advice is refused. */
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 3);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, args[2]));
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_DONTNEED, 0, 1);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    struct sock_fprog prog = { .len = (unsigned short)k, .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        die("prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
        die("prctl(PR_SET_SECCOMP): %s", strerror(errno));
    note("sandboxed: %zu syscalls allowed", n);
}

/* Address space for `len` bytes, zero-filled, that costs memory only where touched.
 * MAP_NORESERVE: no commit charge for the whole (4096 pairs' copy buffers are 1 GiB under
 * the defaults), which strict overcommit (vm.overcommit_memory=2) would refuse up front. */
static void *reserve(size_t len)
{
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

/* `n` buffers of `len` bytes, each starting on a page boundary, in one anonymous mapping made
 * at start-up (its pages are faulted in when first used: nothing is allocated later).
 * *map_len gets the mapping's length, *stride (if not NULL) the distance between buffers.
 *
 * Why not malloc: glibc serves a block this large from its own mmap and returns it 16 bytes
 * into the page (the chunk header), so every buffer began at page offset 16.  The kernel
 * copies socket data between the user buffer and skb page fragments whose data starts on a
 * page boundary, so a copy's destination ran 16 bytes ahead of its source modulo 4 KiB (or
 * behind: the send copy).  On the AMD Zen 3 this was measured on, the kernel's copy
 * (_copy_to_iter, `rep movsb` with FSRM) then takes ~1.5x the time, most likely 4K aliasing:
 * loads that look as if they depend on the stores just issued (the VM has no hardware
 * counters to confirm it).  At offset 0, 32, 48, 64, 128 or 2048 it does not; at 16 and 4080
 * it does (relay CPU per GB 1.5x and 2x, copy mode, iperf3).  Before the
 * pools, the copy buffers came from malloc per connection and, after a first connection had
 * closed, from the brk heap at other offsets, by chance.  A read() drains whole skbs, so its
 * source starts on a page; a peek at an offset starts anywhere, and the peek buffer's
 * alignment measured no different (it is page-aligned all the same). */
static char *page_buffers(size_t n, size_t len, size_t *map_len, size_t *stride)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    if (len > SIZE_MAX - page)
        die("--buf %zu: too large", len);
    size_t step = (len + page - 1) / page * page;
    if (step > SIZE_MAX / n)
        die("%zu buffers of %zu bytes: too large", n, len);
    void *m = reserve(n * step);
    if (!m)
        die("out of memory for %zu buffers of %zu bytes: %s", n, len, strerror(errno));
    *map_len = n * step;
    if (stride)
        *stride = step;
    return m;
}

/* Each pair holds two descriptors.  Raise the soft RLIMIT_NOFILE to the hard one (1024 soft
 * is common; 4096 pairs need 8192 and more); where even the hard limit is too low, relay
 * fewer pairs at once and say so: a pair whose outgoing socket() failed with EMFILE would
 * reset a connection it had accepted. */
static void fit_fd_limit(struct opts *o)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        die("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    rlim_t need = (rlim_t)o->max_pairs * 2 + FD_RESERVE;
    if (rl.rlim_cur < need && rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = { .rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max };
        /* An infinite hard limit is still capped by fs.nr_open: then ask for what we need. */
        if (setrlimit(RLIMIT_NOFILE, &up) < 0) {
            up.rlim_cur = need < rl.rlim_max ? need : rl.rlim_max;
            if (setrlimit(RLIMIT_NOFILE, &up) < 0)
                up.rlim_cur = rl.rlim_cur;
        }
        rl.rlim_cur = up.rlim_cur;
    }
    if (rl.rlim_cur >= need)
        return;
    if (rl.rlim_cur < FD_RESERVE + 2)
        die("RLIMIT_NOFILE %llu: too few descriptors", (unsigned long long)rl.rlim_cur);
    size_t fit = (size_t)(rl.rlim_cur - FD_RESERVE) / 2;
    fprintf(stderr, "peek_relay: RLIMIT_NOFILE %llu: %zu pairs at once, not %zu\n",
            (unsigned long long)rl.rlim_cur, fit, o->max_pairs);
    o->max_pairs = fit;
}

/* The pair pool and, in copy mode, its buffers: reserved now for the no-allocation rule,
 * resident only where pairs run (see the pair pool section).  VmRSS in KiB with the
 * defaults (4096 pairs, 128 KiB buffers), 2000 connections each echoing its bytes, measured
 * by scripts/relay_rss.py (2026-12-02, Linux 6.18):
 *
 *                          start     open  1 left  closed   KiB per pair in use / freed
 *   copy,   64 B            1968    19672    4704    1968     8.9 / 1.37
 *   copy,   256 KiB         2200   509900    5184    2200   253.8 / 1.49
 *   offset, 64 B            2020     3728    3728    2024     0.9 / 0.85
 *   offset, 256 KiB         2088     3920    3920    2216     0.9 / 0.92
 *
 * A pair in use costs its state (872 bytes) and, in copy mode, the pages of its two buffers
 * that it filled; a freed pair, while others run ("1 left"), its state and its share of the
 * 1 MiB of warm buffers; none once the relay is idle (pool_trim).  The peek modes' one
 * shared buffer is resident once used (the 128 KiB of "closed" after 256 KiB).  Before,
 * the pool came from calloc and its free list touched every pair: 5.4 MB at start with
 * --max-pairs 4096, and copy mode kept 514 MB after those 2000 connections had closed. */
static void pool_init(struct relay *r)
{
    long pg = sysconf(_SC_PAGESIZE);
    r->page = pg > 0 ? (size_t)pg : 4096;
    r->pool_map = page_round(r, r->o.max_pairs * sizeof *r->pool);
    r->pool = reserve(r->pool_map);
    if (!r->pool)
        die("out of memory for %zu pairs: %s", r->o.max_pairs, strerror(errno));
    if (r->o.copy)
        r->cbufs = page_buffers(2 * r->o.max_pairs, r->o.buflen, &r->cbufs_map, &r->cstride);
}

static void relay_init(struct relay *r)
{
    /* Belt and braces: every send uses MSG_NOSIGNAL already. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        die("signal(SIGPIPE): %s", strerror(errno));
    fit_fd_limit(&r->o);
    resolve(r->o.connect, false, &r->dst_addr, &r->dst_len);
    r->lfd = make_listener(r->o.listen);
    r->sigfd = make_signalfd();
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (r->epfd < 0)
        die("epoll_create1: %s", strerror(errno));
    r->listen_ep = (struct endpoint){ .kind = EP_LISTEN };
    r->signal_ep = (struct endpoint){ .kind = EP_SIGNAL };
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &r->signal_ep };
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->sigfd, &ev) < 0)
        die("epoll_ctl(signalfd): %s", strerror(errno));
    if (listen_resume(r) < 0)
        die("epoll_ctl(listener): %s", strerror(errno));
    /* Data buffers start on page boundaries, each copy buffer on its own (see page_buffers). */
    if (!r->o.copy)
        r->buf = page_buffers(1, r->o.buflen, &r->buf_map, NULL);
    /* Every connection's state, up front: nothing is allocated once relaying starts. */
    pool_init(r);
    /* stdout's buffer, given now: stdio would allocate it at the summary. */
    static char outbuf[4096];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);

    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char a[INET6_ADDRSTRLEN + 16], b[INET6_ADDRSTRLEN + 16];
    if (getsockname(r->lfd, (struct sockaddr *)&ss, &len) < 0)
        die("getsockname: %s", strerror(errno));
    r->listen_family = ss.ss_family;
    format_addr((struct sockaddr *)&ss, len, a, sizeof(a));
    format_addr((struct sockaddr *)&r->dst_addr, r->dst_len, b, sizeof(b));
    /* Tests read the port from this line (--listen HOST:0 picks a free one). */
    if (r->o.sandbox)
        sandbox();
    fprintf(stderr, "peek_relay: listening on %s, forwarding to %s, mode %s%s\n", a, b,
            r->o.mode_name, r->o.sandbox ? ", sandboxed" : "");
}

static const char *mode_str(uint32_t m)
{
    switch (m) {
    case LOWCOPY_PEEK_AUTO: return "auto";
    case LOWCOPY_PEEK_OFFSET: return "offset";
    case LOWCOPY_PEEK_DISCARD: return "discard";
    default: return "?";
    }
}

static void print_summary(struct relay *r)
{
    struct rusage ru;
    double cpu = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    else
        fprintf(stderr, "peek_relay: getrusage: %s\n", strerror(errno));
    const struct totals *t = &r->t;
    const char *eff = r->o.copy ? "copy"
                      : r->have_effective ? mode_str(r->effective_mode) : "none";
    printf("relay mode=%s effective=%s conns=%" PRIu64 " bytes=%" PRIu64 " cpu_s=%.3f"
           " peek_syscalls=%" PRIu64 " bytes_peeked=%" PRIu64
           " bytes_skipped_copied=%" PRIu64 " bytes_consumed=%" PRIu64
           " peeks=%" PRIu64 " rcvlowat_updates=%" PRIu64
           " rewinds=%" PRIu64 " bytes_rewound=%" PRIu64
           " wakeups=%" PRIu64 " sweeps=%" PRIu64 " sweep_consumed=%" PRIu64
           " muted=%" PRIu64 " resets=%" PRIu64 " connect_failures=%" PRIu64
           " pairs_peak=%" PRIu64 " listen_pauses=%" PRIu64 " pool_trims=%" PRIu64 "\n",
           r->o.mode_name, eff, t->conns, t->bytes, cpu, t->syscalls, t->bytes_peeked,
           t->bytes_skipped_copied, t->bytes_consumed, t->peeks, t->rcvlowat_updates,
           t->rewinds, t->bytes_rewound, t->wakeups, t->sweeps, t->sweep_consumed, t->muted,
           t->resets, t->connect_failures, t->pairs_peak, t->listen_pauses, t->pool_trims);
    fflush(stdout);
}

/* Close what is still open (on a signal), so its counters are summed too. */
static void close_all(struct relay *r)
{
    while (r->live)
        pair_close(r, r->live, ECONNRESET);
}

/* ---------------------------------------------------------------- main loop */

static void dispatch(struct relay *r, const struct epoll_event *e)
{
    struct endpoint *ep = e->data.ptr;
    switch (ep->kind) {
    case EP_LISTEN:
        on_listen(r);
        break;
    case EP_SIGNAL:
        on_signal(r);
        break;
    case EP_SOCK:
        if (!ep->pair->dead)
            pair_settle(r, ep->pair, on_sock_events(r, ep->pair, ep->side, e->events));
        break;
    }
}

static void run(struct relay *r)
{
    struct epoll_event evs[MAX_EVENTS];
    while (!r->stop && !(r->o.max_conns && r->t.conns >= r->o.max_conns)) {
        int n = epoll_wait(r->epfd, evs, MAX_EVENTS, sweep_timeout_ms(r));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait: %s", strerror(errno));
        }
        r->t.wakeups++;
        for (int i = 0; i < n; i++)
            dispatch(r, &evs[i]);
        sweep(r);
        free_zombies(r);
    }
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
"Usage: %s --listen HOST:PORT --connect HOST:PORT [options]\n"
"\n"
"TCP relay.  Peek modes keep each direction's data in the source socket's\n"
"receive queue until the destination's peer acknowledged it (lowcopy offset\n"
"peek, the way passt does); --copy is a plain read()/write() relay.\n"
"\n"
"  --listen HOST:PORT    address to accept on (port 0: pick one; the chosen\n"
"                        address is printed on stderr)\n"
"  --connect HOST:PORT   where to forward each accepted connection\n"
"  --peek MODE           auto | offset | discard (default auto)\n"
"  --copy                plain read()/write() relay with a user-space buffer\n"
"  --max-conns N         exit after N connections finished (default: never)\n"
"  --buf BYTES           bytes per peek/read (default %zu)\n"
"  --ack-poll-ms MS      ACK sweep period while bytes are unacknowledged (default 1)\n"
"  --sndbuf BYTES        SO_SNDBUF of every relayed socket (default: autotuned);\n"
"                        in peek modes it bounds the bytes in flight\n"
"  --max-pairs N         connections relayed at once (default %d); more wait in\n"
"                        the listen backlog (up to net.core.somaxconn) until a pair\n"
"                        frees, never accepted and closed.  Reserved at start-up,\n"
"                        resident only while used: about 1 KiB per pair in use,\n"
"                        in copy mode plus the filled pages of its 2 buffers\n"
"  --sandbox             after start-up, a seccomp filter allows only the relay's\n"
"                        syscalls and lowcopy's documented ones (lowcopy_syscalls.h),\n"
"                        none that allocates: anything else kills it (SIGSYS)\n"
"  -v, --verbose         log connection events on stderr\n"
"  -h, --help            this text\n"
"\n"
"On SIGINT/SIGTERM or after --max-conns, prints one line to stdout:\n"
"  relay mode=M effective=M conns=N bytes=B cpu_s=S peek_syscalls=.. bytes_peeked=..\n"
"        bytes_skipped_copied=.. bytes_consumed=.. (and more counters)\n",
            argv0, DEFAULT_BUF, DEFAULT_PAIRS);
}

static uint64_t parse_u64(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-')
        die("bad %s '%s'", what, s);
    return v;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        { "listen", required_argument, NULL, 'l' },
        { "connect", required_argument, NULL, 'c' },
        { "peek", required_argument, NULL, 'p' },
        { "copy", no_argument, NULL, 'C' },
        { "max-conns", required_argument, NULL, 'n' },
        { "buf", required_argument, NULL, 'b' },
        { "ack-poll-ms", required_argument, NULL, 'a' },
        { "sndbuf", required_argument, NULL, 's' },
        { "max-pairs", required_argument, NULL, 'P' },
        { "sandbox", no_argument, NULL, 'S' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    *o = (struct opts){ .peek_mode = LOWCOPY_PEEK_AUTO, .mode_name = "auto",
                        .buflen = DEFAULT_BUF, .ack_poll_ms = 1,
                        .max_pairs = DEFAULT_PAIRS };
    bool peek_given = false;
    int c;
    while ((c = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
        switch (c) {
        case 'l': o->listen = optarg; break;
        case 'c': o->connect = optarg; break;
        case 'p':
            peek_given = true;
            if (!strcmp(optarg, "auto"))
                o->peek_mode = LOWCOPY_PEEK_AUTO;
            else if (!strcmp(optarg, "offset"))
                o->peek_mode = LOWCOPY_PEEK_OFFSET;
            else if (!strcmp(optarg, "discard"))
                o->peek_mode = LOWCOPY_PEEK_DISCARD;
            else
                die("--peek: expected auto, offset or discard, got '%s'", optarg);
            o->mode_name = mode_str(o->peek_mode);
            break;
        case 'C': o->copy = true; break;
        case 'n': o->max_conns = parse_u64(optarg, "--max-conns"); break;
        case 'b':
            o->buflen = (size_t)parse_u64(optarg, "--buf");
            if (o->buflen == 0 || o->buflen > SSIZE_MAX / 2)
                die("--buf: out of range");
            break;
        case 'a': {
            uint64_t ms = parse_u64(optarg, "--ack-poll-ms");
            if (ms == 0 || ms > 1000)
                die("--ack-poll-ms: 1..1000");
            o->ack_poll_ms = (int)ms;
            break;
        }
        case 's': {
            uint64_t v = parse_u64(optarg, "--sndbuf");
            if (v > INT_MAX / 2)
                die("--sndbuf: out of range");
            o->sndbuf = (int)v;
            break;
        }
        case 'P':
            o->max_pairs = (size_t)parse_u64(optarg, "--max-pairs");
            if (o->max_pairs == 0 || o->max_pairs > 1000000)
                die("--max-pairs: 1..1000000");
            break;
        case 'S': o->sandbox = true; break;
        case 'v': o->verbose = true; break;
        case 'h': usage(stdout, argv[0]); exit(0);
        default: usage(stderr, argv[0]); exit(2);
        }
    }
    if (optind < argc || !o->listen || !o->connect) {
        usage(stderr, argv[0]);
        exit(2);
    }
    if (o->copy && peek_given)
        die("--copy and --peek exclude each other");
    if (o->copy)
        o->mode_name = "copy";
}

int main(int argc, char **argv)
{
    static struct relay r;   /* static: zeroed, and large */
    parse_opts(argc, argv, &r.o);
    g_verbose = r.o.verbose;
    relay_init(&r);
    run(&r);
    close_all(&r);
    free_zombies(&r);
    print_summary(&r);
    if (!r.o.sandbox) {       /* sandboxed, the allocator may not run again: exit frees */
        if (r.buf && munmap(r.buf, r.buf_map) < 0)
            note("munmap: %s", strerror(errno));
        if (r.cbufs && munmap(r.cbufs, r.cbufs_map) < 0)
            note("munmap: %s", strerror(errno));
        if (munmap(r.pool, r.pool_map) < 0)
            note("munmap: %s", strerror(errno));
    }
    return 0;
}
