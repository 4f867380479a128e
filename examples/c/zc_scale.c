/* zc_scale.c - what a zerocopy sender costs when a process holds many
 * connections: resident memory, heap and descriptors per lowcopy_zc sender,
 * idle and with sends held, per backend, at 1, 100, 1,000 and 10,000
 * connections.
 *
 * Each (backend, connections) cell runs in a child process of its own, so
 * that every cell starts from the same heap and with no io_uring ring:
 *
 *   1. opens N loopback TCP connections (the accepting ends are held, unread,
 *      by a process of their own) and measures the process (baseline);
 *   2. creates one sender on each connection (lowcopy_zc_new_opts, or
 *      lowcopy_zc_new with -O or against a library without it) and measures
 *      again: "idle";
 *   3. makes -i sends (16) of -s bytes (256) on each, reaping nothing, and
 *      measures: "held" (each request is in flight or completed but not yet
 *      reaped: both hold the sender's tables; on loopback the kernel copies
 *      at delivery, so notifications come as soon as the bytes reach the
 *      peer's receive queue);
 *   4. reaps every completion (each user_data must come back exactly once
 *      with its byte count) and measures: "after" (what an idle sender keeps
 *      after a burst);
 *   5. frees the senders.
 *
 * Per sender = (measure - baseline) / N, in bytes, for: RSS (resident set,
 * /proc/self/statm: what the issue counts), heap (bytes malloc has handed
 * out, mallinfo2: the sender's own allocations, exact where RSS moves in
 * pages) and descriptors (/proc/self/fd). The io_uring backend's ring is one
 * per thread: its pages are part of the RSS delta, shared by the N senders.
 *
 * Runs in a network namespace of its own when it can (unshare, root): the
 * 20,000 loopback sockets of the largest cell then disturb nobody else, and
 * vanish with the process. Raises RLIMIT_NOFILE to what the largest cell
 * needs (one descriptor per connection here, one per peer in the holder); a
 * cell that would not fit is skipped with a note.
 *
 * One key=value line per cell on stdout ("zc_scale cell ..."), then the
 * table (-q: lines only). Exit status 1 if any cell lost or duplicated a
 * completion or failed.
 *
 * Build: cc -Wall -Wextra -Werror -O2 $(pkg-config --cflags lowcopy) \
 *           zc_scale.c $(pkg-config --libs lowcopy)
 * Usage: zc_scale [-n 1,100,1000,10000] [-b errqueue,io_uring,copy,auto]
 *                 [-i sends] [-s bytes] [-r reserve] [-H] [-O] [-q]
 *   -r  lowcopy_zc_options.reserve (default LOWCOPY_ZC_DEFAULT_RESERVE)
 *   -H  stay in this network namespace      -O  lowcopy_zc_new (older ABI)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lowcopy.h>

#define MAX_CELLS 64
#define MAX_BACKENDS 4

static const char *const backend_names[] = { "auto", "errqueue", "io_uring", "copy" };

static long cfg_counts[MAX_CELLS];
static int cfg_ncounts;
static uint32_t cfg_backends[MAX_BACKENDS];
static int cfg_nbackends;
static int cfg_sends = 16;
static int cfg_size = 256;
static bool cfg_host_ns;
static bool cfg_old_new;
static bool cfg_quiet;
static long cfg_reserve = -1;   /* -r: lowcopy_zc_options.reserve; -1: the default */

static char payload[1 << 16];

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("zc_scale: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

/* ---------------------------------------------------------------- measures */

struct measure {
    long long rss;   /* bytes resident */
    long long heap;  /* bytes malloc has handed out and not had back */
    long long fds;   /* open descriptors */
};

static long long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    long long n = 0;
    struct dirent *e;

    if (!d)
        die("opendir /proc/self/fd: %s", strerror(errno));
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static struct measure measure_now(void)
{
    struct measure m;
    long size, resident;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2)
        die("/proc/self/statm: %s", strerror(errno));
    fclose(f);
    m.rss = (long long)resident * sysconf(_SC_PAGESIZE);
    struct mallinfo2 mi = mallinfo2();
    /* Small blocks from the arenas plus blocks large enough to get mmaps of their own. */
    m.heap = (long long)(mi.uordblks + mi.hblkhd);
    m.fds = count_fds();
    return m;
}

/* ---------------------------------------------------------------- connections */

static int listener(struct sockaddr_in *addr)
{
    socklen_t len = sizeof(*addr);
    int l = socket(AF_INET, SOCK_STREAM, 0);

    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l < 0 || bind(l, (struct sockaddr *)addr, sizeof(*addr)) < 0 || listen(l, 4096) < 0 ||
        getsockname(l, (struct sockaddr *)addr, &len) < 0)
        die("listener: %s", strerror(errno));
    return l;
}

/* The peers live in a process of their own (the holder), which accepts the n connections and
 * keeps them open, reading nothing, until its pipe closes: this process then holds one
 * descriptor per connection, as a daemon's sending side does (20,000 sockets would not fit
 * the descriptor limit in one process), and its RSS is its own. */
static pid_t hold_peers(int l, long n, int *stop_fd)
{
    int p[2];
    pid_t pid;

    if (pipe(p) < 0)
        die("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        char c;
        close(p[1]);
        for (long i = 0; i < n; i++)
            if (accept(l, NULL, NULL) < 0)
                _exit(1);
        while (read(p[0], &c, 1) > 0)
            ;
        _exit(0);
    }
    close(p[0]);
    *stop_fd = p[1];
    return pid;
}

/* N connections: tx[i] sends; the accepted peers are the holder's. */
static pid_t connect_all(long n, int *tx, int *stop_fd)
{
    struct sockaddr_in addr;
    int l = listener(&addr);
    pid_t holder = hold_peers(l, n, stop_fd);

    close(l);
    for (long i = 0; i < n; i++) {
        tx[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (tx[i] < 0 || connect(tx[i], (struct sockaddr *)&addr, sizeof(addr)) < 0)
            die("connection %ld: %s", i, strerror(errno));
    }
    return holder;
}

/* ---------------------------------------------------------------- one cell */

struct cell_result {
    struct measure base, idle, held, after;
    long long completions, missing, dup, wrong, errors;
    uint32_t backend_used;
};

static int new_sender(int fd, uint32_t backend, lowcopy_zc **z)
{
#ifdef LOWCOPY_ZC_DEFAULT_RESERVE
    if (!cfg_old_new) {
        lowcopy_zc_options o;
        int e = lowcopy_zc_options_default(&o, sizeof(o));
        if (e < 0)
            return e;
        o.backend = backend;
        if (cfg_reserve >= 0)
            o.reserve = (uint64_t)cfg_reserve;
        return lowcopy_zc_new_opts(fd, &o, sizeof(o), z);
    }
#endif
    return lowcopy_zc_new(fd, backend, 0, z);
}

/* Reaps sender i until nothing is in flight (5 s at most); checks each user_data. */
static void reap_all(lowcopy_zc *z, long i, uint8_t *seen, struct cell_result *r)
{
    lowcopy_zc_completion out[64];

    for (int tries = 0; tries < 100; tries++) {
        ssize_t k = lowcopy_zc_reap(z, out, 64, sizeof(lowcopy_zc_completion));
        if (k < 0) {
            r->errors++;
            return;
        }
        for (ssize_t j = 0; j < k; j++) {
            uint64_t ud = out[j].user_data;
            if (ud / cfg_sends != (uint64_t)i || seen[ud]) {
                r->dup++;
                continue;
            }
            seen[ud] = 1;
            r->completions++;
            if (out[j].result != cfg_size)
                r->wrong++;
        }
        if (k == 0 && lowcopy_zc_inflight(z) == 0)
            return;
        if (k == 0) {
            int w = lowcopy_zc_wait(z, 50);
            if (w < 0 && w != -ETIMEDOUT && w != -EINTR) {
                r->errors++;
                return;
            }
        }
    }
}

static void run_cell(uint32_t backend, long n, struct cell_result *r)
{
    int *tx = calloc(n, sizeof(int)), stop_holder;
    lowcopy_zc **z = calloc(n, sizeof(*z));
    uint8_t *seen = calloc((size_t)n * cfg_sends, 1);
    pid_t holder;

    if (!tx || !z || !seen)
        die("out of memory");
    memset(r, 0, sizeof(*r));
    holder = connect_all(n, tx, &stop_holder);
    r->base = measure_now();
    for (long i = 0; i < n; i++) {
        int e = new_sender(tx[i], backend, &z[i]);
        if (e < 0)
            die("lowcopy_zc_new on connection %ld: %s", i, strerror(-e));
    }
    r->backend_used = lowcopy_zc_backend(z[0]);
    r->idle = measure_now();
    for (long i = 0; i < n; i++)
        for (int k = 0; k < cfg_sends; k++) {
            ssize_t s = lowcopy_zc_send(z[i], payload, cfg_size, MSG_DONTWAIT,
                                        (uint64_t)i * cfg_sends + k);
            if (s != cfg_size) {
                r->errors++;
                fprintf(stderr, "zc_scale: send on %ld: %zd\n", i, s);
            }
        }
    r->held = measure_now();
    for (long i = 0; i < n; i++)
        reap_all(z[i], i, seen, r);
    r->after = measure_now();
    r->missing = (long long)n * cfg_sends - r->completions;
    for (long i = 0; i < n; i++) {
        if (lowcopy_zc_free(z[i]) != 0)
            r->errors++;
        close(tx[i]);
    }
    close(stop_holder);
    waitpid(holder, NULL, 0);
    free(tx);
    free(z);
    free(seen);
}

static const char *backend_name(uint32_t b)
{
    return b < MAX_BACKENDS ? backend_names[b] : "?";
}

/* Runs one cell in a child; its result comes back through a pipe. */
static bool cell(uint32_t backend, long n, struct cell_result *r)
{
    int p[2];
    pid_t pid;
    int status;

    if (pipe(p) < 0)
        die("pipe: %s", strerror(errno));
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        run_cell(backend, n, r);
        if (write(p[1], r, sizeof(*r)) != (ssize_t)sizeof(*r))
            _exit(3);
        _exit(0);
    }
    close(p[1]);
    ssize_t got = read(p[0], r, sizeof(*r));
    close(p[0]);
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        got != (ssize_t)sizeof(*r)) {
        fprintf(stderr, "zc_scale: cell %s x %ld failed (status %d)\n", backend_name(backend), n,
                status);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- setup */

/* A network namespace of our own with lo up; false if not allowed. */
static bool own_netns(void)
{
    struct ifreq ifr = { 0 };
    int s;

    if (unshare(CLONE_NEWNET) < 0)
        return false;
    s = socket(AF_INET, SOCK_DGRAM, 0);
    strcpy(ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        die("lo: %s", strerror(errno));
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        die("lo up: %s", strerror(errno));
    close(s);
    return true;
}

/* Room for `want` descriptors; returns the limit now in force. */
static long raise_nofile(long want)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        die("getrlimit: %s", strerror(errno));
    if ((long)rl.rlim_cur >= want)
        return (long)rl.rlim_cur;
    struct rlimit up = { (rlim_t)want, rl.rlim_max > (rlim_t)want ? rl.rlim_max : (rlim_t)want };
    if (setrlimit(RLIMIT_NOFILE, &up) == 0)
        return want;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    return (long)rl.rlim_max;
}

static void parse_list(const char *s, bool backends)
{
    char *dup = strdup(s), *tok, *save = NULL;

    for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (backends) {
            uint32_t b;
            for (b = 0; b < MAX_BACKENDS && strcmp(tok, backend_names[b]); b++)
                ;
            if (b == MAX_BACKENDS || cfg_nbackends == MAX_BACKENDS)
                die("unknown backend %s", tok);
            cfg_backends[cfg_nbackends++] = b;
        } else {
            if (cfg_ncounts == MAX_CELLS)
                die("too many counts");
            cfg_counts[cfg_ncounts] = atol(tok);
            if (cfg_counts[cfg_ncounts] <= 0)
                die("bad count %s", tok);
            cfg_ncounts++;
        }
    }
    free(dup);
}

static double per(long long a, long long b, long n)
{
    return (double)(a - b) / n;
}

int main(int argc, char **argv)
{
    static struct cell_result res[MAX_BACKENDS][MAX_CELLS];
    static bool ok_cell[MAX_BACKENDS][MAX_CELLS];
    long max_n = 0, limit;
    bool netns = false, all_ok = true;
    int c;

    while ((c = getopt(argc, argv, "n:b:i:s:r:HOq")) != -1) {
        switch (c) {
        case 'n': parse_list(optarg, false); break;
        case 'b': parse_list(optarg, true); break;
        case 'i': cfg_sends = atoi(optarg); break;
        case 's': cfg_size = atoi(optarg); break;
        case 'r': cfg_reserve = atol(optarg); break;
        case 'H': cfg_host_ns = true; break;
        case 'O': cfg_old_new = true; break;
        case 'q': cfg_quiet = true; break;
        default:
            fprintf(stderr, "usage: zc_scale [-n 1,100,1000,10000] [-b errqueue,io_uring,copy,auto]"
                            " [-i sends] [-s bytes] [-r reserve] [-H] [-O] [-q]\n");
            return 2;
        }
    }
    if (!cfg_ncounts)
        parse_list("1,100,1000,10000", false);
    if (!cfg_nbackends)
        parse_list("errqueue,io_uring,copy", true);
    if (cfg_sends < 1 || cfg_sends > 4096 || cfg_size < 1 || cfg_size > (int)sizeof(payload))
        die("bad -i or -s");
    memset(payload, 'z', sizeof(payload));
    for (int i = 0; i < cfg_ncounts; i++)
        max_n = cfg_counts[i] > max_n ? cfg_counts[i] : max_n;
    limit = raise_nofile(max_n + 256);
    if (!cfg_host_ns)
        netns = own_netns();
    setvbuf(stdout, NULL, _IOLBF, 0);

    for (int b = 0; b < cfg_nbackends; b++)
        for (int i = 0; i < cfg_ncounts; i++) {
            long n = cfg_counts[i];
            struct cell_result *r = &res[b][i];
            if (n + 64 > limit) {
                fprintf(stderr, "zc_scale: %ld connections need %ld descriptors, limit %ld: skipped\n",
                        n, n + 64, limit);
                continue;
            }
            ok_cell[b][i] = cell(cfg_backends[b], n, r);
            if (!ok_cell[b][i]) {
                all_ok = false;
                continue;
            }
            bool good = !r->missing && !r->dup && !r->wrong && !r->errors;
            all_ok &= good;
            printf("zc_scale cell backend=%s used=%s n=%ld sends=%d size=%d "
                   "rss_idle=%.0f heap_idle=%.0f fds_idle=%.2f "
                   "rss_held=%.0f heap_held=%.0f fds_held=%.2f "
                   "rss_after=%.0f heap_after=%.0f fds_after=%.2f "
                   "completions=%lld missing=%lld dup=%lld wrong_len=%lld errors=%lld ok=%d\n",
                   backend_names[cfg_backends[b]], backend_name(r->backend_used), n, cfg_sends,
                   cfg_size, per(r->idle.rss, r->base.rss, n), per(r->idle.heap, r->base.heap, n),
                   per(r->idle.fds, r->base.fds, n), per(r->held.rss, r->base.rss, n),
                   per(r->held.heap, r->base.heap, n), per(r->held.fds, r->base.fds, n),
                   per(r->after.rss, r->base.rss, n), per(r->after.heap, r->base.heap, n),
                   per(r->after.fds, r->base.fds, n), r->completions, r->missing, r->dup,
                   r->wrong, r->errors, good);
        }
    if (cfg_quiet)
        return all_ok ? 0 : 1;

    printf("\nZerocopy senders at scale: loopback TCP, one thread, %s; per sender, in bytes\n"
           "(measure minus the baseline with the connections open, divided by the senders;\n"
           " held = %d sends of %d bytes each, none reaped; after = every completion reaped)\n",
           netns ? "own network namespace" : "host network namespace", cfg_sends, cfg_size);
    printf("%-9s %8s | %9s %9s %5s | %9s %9s %5s | %9s %9s | %s\n", "backend", "senders",
           "RSS idle", "heap idle", "fds", "RSS held", "heap held", "fds", "RSS after",
           "heap after", "check");
    for (int b = 0; b < cfg_nbackends; b++)
        for (int i = 0; i < cfg_ncounts; i++) {
            struct cell_result *r = &res[b][i];
            long n = cfg_counts[i];
            if (!ok_cell[b][i]) {
                printf("%-9s %8ld | %s\n", backend_names[cfg_backends[b]], n, "(not run or failed)");
                continue;
            }
            char check[96] = "ok";
            if (r->missing || r->dup || r->wrong || r->errors)
                snprintf(check, sizeof(check), "FAIL missing=%lld dup=%lld wrong=%lld errors=%lld",
                         r->missing, r->dup, r->wrong, r->errors);
            printf("%-9s %8ld | %9.0f %9.0f %5.2f | %9.0f %9.0f %5.2f | %9.0f %9.0f | %s\n",
                   r->backend_used == cfg_backends[b] ? backend_names[cfg_backends[b]]
                                                      : backend_name(r->backend_used),
                   n, per(r->idle.rss, r->base.rss, n), per(r->idle.heap, r->base.heap, n),
                   per(r->idle.fds, r->base.fds, n), per(r->held.rss, r->base.rss, n),
                   per(r->held.heap, r->base.heap, n), per(r->held.fds, r->base.fds, n),
                   per(r->after.rss, r->base.rss, n), per(r->after.heap, r->base.heap, n), check);
        }
    return all_ok ? 0 : 1;
}
