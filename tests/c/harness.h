/* harness.h - what the behaviour-table runners (scenarios.c, zc_scenarios.c, rx_scenarios.c)
 * share.
 *
 * A runner describes itself in a `struct runner` (its name, what each scenario expands over,
 * its setup, teardown and ops) and hands it to run_table(), which does the rest the same way
 * for every table: it loads the JSON, expands each scenario over its transports (and modes or
 * backends), runs each combination in a forked child with a time limit, collects the child's
 * first failure through shared memory, prints one FAIL line per failed run and the summary
 * "<runner>: N passed, M failed", and exits 0 only when every run passed and the table still
 * expanded to more than 50 runs.
 *
 * Inside a run every helper records the run's first failure in r->why and returns -1, so ops
 * read as `if (need_u64(r, step, "len", &len) < 0) return -1;`. Each op must mean exactly what
 * the same op means in the Rust runner of the same table (core/tests/), whose fixtures live in
 * core/tests/common/mod.rs: the helpers here name their Rust counterpart where there is one.
 */
#ifndef LOWCOPY_TESTS_HARNESS_H
#define LOWCOPY_TESTS_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cJSON.h>

#include "common.h"

enum {
    CLOSED_FD = 1000000, /* "closed": a number no fd has, the kernel answers EBADF */
    MAX_OWNED = 16,      /* fds a run owns at once (pair socket, listener, accepted ones) */
    WHY_MAX = 1024,      /* room for the first failure's text */
};

/* How many names of the errno list (harness.c) a runner knows. The list grew table by table,
 * and a runner must not accept a name that its Rust twin cannot produce. */
enum {

    ERRNOS_COMMON = 17, /* common::errno_name today (ENOTCONN: listening sockets) */
    ERRNOS_RX = 18,     /* rx_scenarios.rs's ename: common's and EINTR */
    ERRNOS_PEEK = 20,   /* scenarios.rs's ename: rx's, EPROTOTYPE and ENOMSG */
};

/* ---- small utilities ------------------------------------------------------------------ */

/* Allocation failure in a test runner is not a behaviour to report: these abort loudly. */
void *xrealloc(void *p, size_t n);
void *xmalloc(size_t n);
/* Zeroed room for `len` bytes; never NULL, so that len 0 tests lowcopy's length check, not
 * its NULL check. */
unsigned char *room(size_t len);
/* cJSON's allocating calls, NULL only when out of memory: abort as xmalloc does. */
cJSON *must(cJSON *v);

uint64_t now_ns(void);
/* Sleeps the whole time even when a signal interrupts it. */
void sleep_ms(uint64_t ms);

/* `len` pattern bytes from stream position `from` (common::pattern); never NULL. */
unsigned char *pattern(uint64_t from, size_t len);
/* Index of the first byte of `d` that is not the pattern from stream position `from`, or n. */
size_t pattern_mismatch(const unsigned char *d, size_t n, uint64_t from);
/* Quotes bytes for a one-line message: printable ASCII as is, the rest as \xNN, cut long. */
const char *quote(const unsigned char *d, size_t n, char *out, size_t cap);

/* The runner's name for `code` (NULL outside its list: see ERRNOS_*). */
const char *errno_name(int code);
/* "EAGAIN", or "errno 5 (Input/output error)" for codes outside the runner's list. */
const char *errno_text(int code, char *buf, size_t cap);

/* ---- JSON access, with serde_json's meanings ------------------------------------------- */

const cJSON *get(const cJSON *obj, const char *key);
/* Value::as_u64 and Value::as_i64: an integer in range, else false. */
bool json_u64(const cJSON *v, uint64_t *out);
bool json_i64(const cJSON *v, int64_t *out);
bool json_is(const cJSON *v, const char *s);
bool array_has_string(const cJSON *arr, const char *s);

/* ---- one run --------------------------------------------------------------------------- */

struct state;  /* each runner's own part of a run (its lowcopy object, what it counted) */
struct writer; /* a thread writing on the peer, below */

struct run {
    const char *name, *transport;
    const char *variant;    /* the mode or backend; NULL when the table has none */
    int fd;                 /* the fd under test (CLOSED_FD for "closed"; never closed as such) */
    int owned[MAX_OWNED];   /* fds the run owns besides the peer (the Rust runner's `fds`) */
    size_t nowned;
    int peer;               /* the other end of a pair; -1 if none or after reset_peer */
    uint64_t sent;          /* stream bytes the peer was given to send so far */
    struct writer **writers;
    size_t nwriters;
    struct state *st;       /* zeroed before the runner's setup */
    char why[WHY_MAX];      /* the first failure, empty while all is well */
    char skip[WHY_MAX];     /* why this run cannot be made here (skip_run), or empty */
};

/* Records the first failure of the run; returns -1 so callers can `return fail(...)`. */
__attribute__((format(printf, 2, 3))) int fail(struct run *r, const char *fmt, ...);
/* A failed syscall: `what: ERRNO`. Reads errno first, before anything can change it. */
int sys_fail(struct run *r, const char *what);
/* A failed lowcopy call (`ret` = -errno). */
int lc_fail(struct run *r, const char *what, ssize_t ret);
/* lowcopy_probe's answer, asked once per process: what this kernel offers (tables never
 * hold facts of one kernel; the runners derive them from this). */
struct lowcopy_caps;
const struct lowcopy_caps *probed_caps(void);
/* Marks the run as one that cannot be made here (a privilege this process lacks), with the
 * reason; setup returns -1 after it. The run is counted as skipped, listed with its reason,
 * and appended to $LOWCOPY_SKIP_LOG when set (scripts/test.sh counts those). */
__attribute__((format(printf, 2, 3))) int skip_run(struct run *r, const char *fmt, ...);
/* A socket buffer of `bytes` as SO_RCVBUFFORCE / SO_SNDBUFFORCE would set it (`rcv` picks
 * which): with the plain option when within net.core.{r,w}mem_max (the kernel then does the
 * same), the forced one above it; without CAP_NET_ADMIN for that, the run is skipped. */
int set_buf(struct run *r, int fd, bool rcv, int bytes);

/* The step's value under `key`, a failure when missing or of the wrong kind (the Rust
 * runner's unwrap of as_u64 / as_str). */
int need_u64(struct run *r, const cJSON *step, const char *key, uint64_t *out);
int need_size(struct run *r, const cJSON *step, const char *key, size_t *out);
int need_str(struct run *r, const cJSON *step, const char *key, const char **out);
int need_peer(struct run *r);

/* "expect_err": `ret` (a lowcopy return, >= 0 or -errno) must be that error. A name, or with
 * `lists` also a list of names, any of which will do (zc.json's [ECONNRESET, EPIPE]). */
int expect_err(struct run *r, const cJSON *want, ssize_t ret, bool lists);
/* "expect": the `n` bytes of `data` must be the string `want`. */
int expect_bytes(struct run *r, const cJSON *want, const unsigned char *data, size_t n);
/* The `n` bytes of `data` must be the pattern from stream position `pos`. */
int expect_pattern_at(struct run *r, const unsigned char *data, size_t n, uint64_t pos);

/* ---- fds ------------------------------------------------------------------------------- */

/* Writes all of `d`; returns 0 or the errno that stopped it (std's write_all). */
int write_all(int fd, const unsigned char *d, size_t len);
int get_int(int fd, int level, int name, int *out);
int set_int(struct run *r, int fd, int level, int name, int v, const char *what);
/* common::set_timeval: SO_RCVTIMEO or SO_SNDTIMEO in ms; -1 with errno on failure. */
int set_timeval(int fd, int name, uint64_t ms);
/* Closes an fd the run owns and forgets it; a failed close is a failure of the run. */
void close_owned(struct run *r, int *fd);
/* Takes `fd` into the run (closed at teardown); -1 and closes it if there is no room. */
int own(struct run *r, int fd);

/* ---- the error queue and CPU time (issue 12: a receive must sleep past an entry) -------- */

/* common::thread_cpu: CPU time the calling thread has used, in ns (CLOCK_THREAD_CPUTIME_ID). A
 * call that sleeps while it waits uses almost none, one that spins about its wall time. */
uint64_t thread_cpu_ns(void);
/* "cpu_max_ms" (ignored unless a u64): `cpu_ns`, the CPU time of the call, must not exceed it
 * (the Rust runners' cpu_bound). */
int cpu_bound(struct run *r, const cJSON *step, uint64_t cpu_ns);
/* min_ms / max_ms: the call's elapsed time (the Rust runners' elapsed_bounds). */
int elapsed_bounds(struct run *r, const cJSON *step, uint64_t took_ns);
/* common::wait_pollerr: until poll reports POLLERR on `fd` (an error-queue entry or a socket
 * error), 3 s at most. */
int wait_pollerr(struct run *r, int fd);
/* common::errqueue_entry: puts an entry on `fd`'s error queue as an application would, by
 * sending the peer one byte: "zerocopy", a MSG_ZEROCOPY send (its completion notification);
 * "timestamp", a send with SO_TIMESTAMPING software transmit reports on (left on, so every
 * later send adds one). Returns once poll reports POLLERR. */
int errqueue_entry(struct run *r, int fd, const char *kind);
/* SO_TIMESTAMPING software transmit reports on `fd` (each later send queues one). */
int timestamping_on(struct run *r, int fd);

/* ---- fixtures: the fd under test and its peer ------------------------------------------ */

/* common::tcp_listener: TCP_MAXSEG and a locked SO_RCVBUF when given (on the listener, before
 * any handshake, so that accepted sockets have them from the start), bound to loopback,
 * listen(4). Owned by the run; returns it or -1. */
int tcp_listener(struct run *r, int family, int proto, const int *mss, const int *rcvbuf);
/* common::tcp_connect: a client of the listener `l` becomes the peer (TCP_MAXSEG before
 * connect and TCP_NODELAY on TCP; MPTCP gets neither, as common::mptcp_pair). */
int tcp_connect(struct run *r, int l, int proto, const int *mss);
/* accept(2) on `l`; the socket is owned by the run. Returns it or -1. */
int accept_owned(struct run *r, int l);
/* Two UDP sockets on loopback: r->fd (owned) and r->peer, the peer connected to r->fd. r->fd
 * is connected to the peer too unless `connect_fd` is false: then a send names the peer's
 * address, written to *to. */
int udp_pair(struct run *r, int family, bool connect_fd, struct sockaddr_storage *to,
             socklen_t *tolen);

enum { FIXTURE_UNKNOWN = 1 };
/* The fixtures every table means the same by (common::pair, common::odd_fd): "closed", "file"
 * (/proc/self/stat), and the stream pairs "tcp4", "tcp6", "mptcp4", "unix", whose accepted
 * side is r->fd. `mss` and `rcvbuf` (NULL: none) go to TCP's listener. Returns 0, -1 on
 * failure, or FIXTURE_UNKNOWN for a transport the runner makes itself. */
int common_fixture(struct run *r, const char *t, const int *mss, const int *rcvbuf);

/* common::reset: the peer closed with SO_LINGER 0, so that our socket gets a RST, then
 * `settle_ms` for it to arrive. */
int reset_peer(struct run *r, uint64_t settle_ms);

/* Ends the fds as the Rust runner's drop order does: the writers are joined (a writer's
 * failure fails the run), then the fds are closed. After a failure the fds go before the join,
 * so that a writer blocked on a full queue gets an error instead of hanging it; shutting the
 * peer's socket down wakes such a writer on every transport (closing our end alone does not
 * wake one on MPTCP). */
void end_fds(struct run *r, bool failed);

/* ---- writer threads: the Rust runners' std::threads that own a dup of the peer --------- */

struct writer {
    pthread_t tid;
    int fd;                 /* the thread's own dup of the peer; closed when `work` returns */
    void (*work)(struct writer *w); /* what the thread does; writer_fail() says why it failed */
    const char *what;       /* the op that started it, for messages */
    unsigned char *data;    /* the bytes to send (owned) */
    size_t len;
    uint64_t ms;            /* write_later: the delay; other works: what they say */
    size_t piece;           /* for works that write in pieces */
    size_t *sizes, nsizes;  /* for works that cycle through send sizes (owned) */
    struct writer **before; /* writers the work joins first (the array is owned) */
    size_t nbefore;
    char err[256];          /* why it failed, "" if it did not */
};

/* The work of most writers: waits `ms`, then writes all of data. */
void write_later(struct writer *w);
/* A writer that will do `work` with `data` (taken over); start it with start_writer. */
struct writer *new_writer(void (*work)(struct writer *), const char *what, unsigned char *data,
                          size_t len);
/* Starts `w` (taken over) on a dup of the peer; on failure frees it. */
int start_writer(struct run *r, struct writer *w);
/* Joins `w` and frees it; `why` gets what went wrong, "" if nothing. -1 if the join itself
 * failed: then `w` is left alone, its thread may still use it. */
int join_writer(struct writer *w, char *why, size_t cap);
/* Joins every writer; with `report`, a writer's failure fails the run (join().unwrap()). */
void join_writers(struct run *r, bool report);
void free_writer(struct writer *w);
/* Records the writer's first failure, for the run to report at the join. */
__attribute__((format(printf, 2, 3))) void writer_fail(struct writer *w, const char *fmt, ...);

/* ---- ops more than one table has ------------------------------------------------------- */

/* send data: the peer writes the string now. */
int op_peer_send(struct run *r, const cJSON *step);
/* send_pattern len: pattern bytes at the next stream positions, from a thread: they may exceed
 * what the buffers hold. */
int op_peer_send_pattern(struct run *r, const cJSON *step);
/* wait_queued bytes (common::wait_queued): until SIOCINQ on the fd says that many bytes are
 * queued, 5 s at most. */
int op_wait_queued(struct run *r, const cJSON *step);

/* ---- the runner ------------------------------------------------------------------------ */

typedef int (*op_fn)(struct run *r, const cJSON *step);

struct op {
    const char *name;
    op_fn fn;
};

struct runner {
    const char *prog;         /* "c-zc-scenarios": the summary's and messages' prefix */
    const char *table;        /* "zc.json", for the usage line */
    const char *default_path; /* the table without an argument; NULL: the argument is required */
    const char *axis;         /* "backends": the scenario's list each transport runs with */
    const char *axis_one;     /* "backend", for messages; both NULL: transports only */
    const char *table_wants;  /* what a table must have, for the message when it has not */
    bool (*table_ok)(const cJSON *root); /* the rules besides `scenarios` (NULL: none) */
    unsigned timeout_s;       /* a run still going after this is a hang: SIGALRM ends it */
    size_t errnos;            /* ERRNOS_*: the errno names the runner knows */
    bool exact_numbers;       /* read integers from their literals: cJSON's doubles lose
                                 precision above 2^53 (rx.json has u64::MAX) */
    bool check_fds;           /* fail a run that leaves an fd open (lowcopy's rings, say) */
    size_t state_size;        /* sizeof (struct state) */
    /* The fds of the run from r->transport and r->variant, and the scenario's options. */
    int (*setup)(struct run *r, const cJSON *sc);
    /* The steps as this run must take them (the table's rules), to cJSON_Delete; NULL: the
     * scenario's steps as written. */
    cJSON *(*steps_for)(const cJSON *root, const cJSON *steps, const struct run *r);
    /* Ends the run: frees what setup and the ops made (r->st itself is freed after it). */
    void (*teardown)(struct run *r, bool failed);
    const struct op *ops;
    size_t nops;
};

/* The steps up to the first `new` or `init`, that one replaced by {"op": <the same>,
 * "expect_err": errno} (keeping its "kind"): a table rule for transports that refuse a mode
 * or backend; NULL if there is no such step. */
cJSON *refuse_first_new(const cJSON *steps, const cJSON *err);

/* The runner's main: runs the table named by argv (or spec->default_path). */
int run_table(const struct runner *spec, int argc, char **argv);

#endif
