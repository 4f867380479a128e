/* burst.c - many concurrent connections through examples/c/peek_relay, some reset by their
 * clients mid-transfer; every other one must get its full, byte-exact echo.
 * Built by `make examples` as build/bin/relay_burst; tests/relay/burst.sh runs it in every
 * mode, plain and sandboxed (scripts/test.sh: "relay: 2,000 concurrent connections ...").
 *
 * Usage: relay_burst [-n CONNS] [-r PERCENT] [-b BYTES] [-t SECONDS] [-s SEED] [-6]
 *                    RELAY [RELAY ARGS...]
 * One process: a loopback echo server (a thread, epoll), RELAY --listen 127.0.0.1:0
 * --connect <server> RELAY ARGS (a child, killed with us: PR_SET_PDEATHSIG), and the
 * clients (the main thread, epoll).  All CONNS (2000) clients connect at once; each sends a
 * pseudo-random 1..BYTES (65536) bytes, shuts down its sending side, and reads the echo to
 * end of stream, comparing every byte.  PERCENT (10) of them instead close with
 * SO_LINGER {1, 0} (an RST) at a random point: before sending, after sending part, or after
 * reading part of the echo.  -6: over ::1.  Everything must end within SECONDS (30).
 *
 * A client that did not reset and did not get exactly its bytes back, then end of stream,
 * is lost: refused, reset by the relay, cut short, corrupted, or still waiting at the
 * deadline.  Prints one line:
 *   burst conns=N ok=O reset=R lost=L refused=.. relay_reset=.. short=.. corrupt=.. stuck=..
 *         seconds=S relay_status=W <the relay's pairs_peak, listen_pauses, resets, ...>
 * Exits 0 if nothing was lost and the relay exited cleanly on SIGTERM (W = 0; a sandboxed
 * relay killed by SIGSYS is W = 31), 1 otherwise, 2 on bad usage.
 *
 * RLIMIT_NOFILE: the clients and the server's sockets take 2 x CONNS descriptors; the soft
 * limit is raised to the hard one (the relay raises its own, see its fit_fd_limit()).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { CHUNK = 16384, MAX_EVENTS = 256, SERVER_BUF = 8192 };

static pid_t relay_pid;             /* killed at exit if still running */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void kill_relay(void)
{
    if (relay_pid > 0) {
        kill(relay_pid, SIGKILL);
        waitpid(relay_pid, NULL, 0);
        relay_pid = 0;
    }
}

static void fail(const char *what)
{
    fprintf(stderr, "relay_burst: %s: %s\n", what, strerror(errno));
    exit(1);                          /* atexit: kill_relay */
}

static uint64_t mix(uint64_t z)       /* splitmix64's finaliser */
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Byte `pos` onwards of connection `id`'s stream: random access, so that the sender never
 * keeps what it could not write and the reader computes what it should see. */
static void fill(uint64_t key, uint64_t pos, uint8_t *b, size_t n)
{
    uint64_t w = mix(key ^ (pos >> 3));
    for (size_t k = 0; k < n; k++, pos++) {
        if (k && (pos & 7) == 0)
            w = mix(key ^ (pos >> 3));
        b[k] = (uint8_t)(w >> (8 * (pos & 7)));
    }
}

static uint64_t rng_state;
static uint64_t rnd(uint64_t n)       /* 0..n-1 */
{
    return mix(rng_state += 0x9e3779b97f4a7c15ULL) % n;
}

static void raise_nofile(rlim_t need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        fail("getrlimit");
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            fail("setrlimit(RLIMIT_NOFILE)");
    }
    if (rl.rlim_cur < need) {
        fprintf(stderr, "relay_burst: RLIMIT_NOFILE hard limit %llu < %llu needed\n",
                (unsigned long long)rl.rlim_max, (unsigned long long)need);
        exit(1);
    }
}

static void add_fd(int ep, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = { .events = events, .data.ptr = ptr };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        fail("epoll_ctl");
}

/* ---------------------------------------------------------------- echo server */

struct sconn {
    int fd;
    size_t head, tail;                /* pending echo: buf[head, tail) */
    bool eof;
    uint8_t buf[SERVER_BUF];
};

static int server_lfd;

/* Echo what is pending, read more once it is out; at the client's end of stream, close
 * (the FIN goes back through the relay).  Errors (the relay's reset) just close. */
static void server_pump(int ep, struct sconn *c)
{
    for (;;) {
        if (c->head < c->tail) {
            ssize_t w = send(c->fd, c->buf + c->head, c->tail - c->head, MSG_NOSIGNAL);
            if (w < 0 && errno == EAGAIN) {
                struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                return;
            }
            if (w < 0)
                break;
            c->head += (size_t)w;
            continue;
        }
        if (c->eof)
            break;
        ssize_t n = read(c->fd, c->buf, sizeof c->buf);
        if (n < 0 && errno == EAGAIN) {
            struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        if (n <= 0) {
            if (n < 0)
                break;
            c->eof = true;
            continue;
        }
        c->head = 0;
        c->tail = (size_t)n;
    }
    close(c->fd);                     /* also leaves the epoll set */
    free(c);
}

static void *server(void *arg)
{
    (void)arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        fail("epoll_create1");
    static int listen_tag;
    add_fd(ep, server_lfd, EPOLLIN, &listen_tag);
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr != &listen_tag) {
                server_pump(ep, evs[i].data.ptr);
                continue;
            }
            int fd;
            while ((fd = accept4(server_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                struct sconn *c = calloc(1, sizeof *c);
                if (!c)
                    fail("calloc");
                c->fd = fd;
                add_fd(ep, fd, EPOLLIN, c);
            }
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- the relay */

/* The relay's stderr after its "listening" line, copied to ours as it comes. */
static void *drain(void *arg)
{
    FILE *f = arg;
    char line[512];
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    return NULL;
}

static FILE *relay_out;

/* Start RELAY --listen LOOPBACK:0 --connect <server> ARGS; returns the port it listens on. */
static int start_relay(char **argv, int argc, bool v6, int server_port)
{
    char conn[64], listen_at[32];
    snprintf(conn, sizeof conn, v6 ? "[::1]:%d" : "127.0.0.1:%d", server_port);
    snprintf(listen_at, sizeof listen_at, v6 ? "[::1]:0" : "127.0.0.1:0");
    char **args = calloc((size_t)argc + 6, sizeof *args);
    int errp[2], outp[2];
    if (!args || pipe2(errp, O_CLOEXEC) || pipe2(outp, O_CLOEXEC))
        fail("start_relay");
    int k = 0;
    args[k++] = argv[0];
    args[k++] = "--listen";
    args[k++] = listen_at;
    args[k++] = "--connect";
    args[k++] = conn;
    for (int i = 1; i < argc; i++)
        args[k++] = argv[i];
    pid_t parent = getpid();
    relay_pid = fork();
    if (relay_pid < 0)
        fail("fork");
    if (relay_pid == 0) {
        /* Dies with us, whatever way we end. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(127);
        dup2(errp[1], 2);
        dup2(outp[1], 1);
        execv(argv[0], args);
        _exit(127);
    }
    free(args);
    close(errp[1]);
    close(outp[1]);
    FILE *ef = fdopen(errp[0], "r");
    relay_out = fdopen(outp[0], "r");
    if (!ef || !relay_out)
        fail("fdopen");
    const char *tag = v6 ? "listening on [::1]:" : "listening on 127.0.0.1:";
    char line[512];
    int port = 0;
    while (!port && fgets(line, sizeof line, ef)) {
        char *p = strstr(line, tag);
        if (p)
            port = atoi(p + strlen(tag));
        else
            fputs(line, stderr);
    }
    if (!port) {
        fprintf(stderr, "relay_burst: relay did not start\n");
        exit(1);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, drain, ef))
        fail("pthread_create");
    return port;
}

/* SIGTERM, its summary line, its exit status (-1: it did not exit within 10 s). */
static int stop_relay(char *summary, size_t len)
{
    kill(relay_pid, SIGTERM);
    summary[0] = '\0';
    struct pollfd pf = { .fd = fileno(relay_out), .events = POLLIN };
    char line[1024];
    /* poll() bounds the wait; the summary line comes whole with the relay's exit. */
    if (poll(&pf, 1, 10000) > 0 && fgets(line, sizeof line, relay_out))
        snprintf(summary, len, "%s", line);
    int status = -1;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(relay_pid, &status, WNOHANG) == relay_pid) {
            relay_pid = 0;
            return status;
        }
        usleep(10000);
    }
    return -1;                        /* atexit kills it */
}

/* ---------------------------------------------------------------- clients */

enum outcome { PENDING, OK, RESET, REFUSED, RELAY_RESET, SHORT, CORRUPT, STUCK, N_OUTCOMES };
static const char *const outcome_name[N_OUTCOMES] = {
    "pending", "ok", "reset", "refused", "relay_reset", "short", "corrupt", "stuck",
};

struct client {
    int fd;
    uint32_t id;
    uint64_t key;
    size_t total, sent, got;
    bool connected, shut;
    int reset_when;                   /* 0: never; 1: on connect; 2: after sent; 3: after got */
    size_t reset_at;
    enum outcome out;
};

static unsigned long counts[N_OUTCOMES];
static unsigned long finished;
static int reports;

static void finish(struct client *c, enum outcome o, int err)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->out = o;
    counts[o]++;
    finished++;
    if (o != OK && o != RESET && reports++ < 5)
        fprintf(stderr, "relay_burst: client %u: %s after %zu of %zu bytes sent, %zu echoed%s%s\n",
                c->id, outcome_name[o], c->sent, c->total, c->got, err ? ": " : "",
                err ? strerror(err) : "");
}

static void reset_close(struct client *c)
{
    struct linger lg = { .l_onoff = 1, .l_linger = 0 };
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    finish(c, RESET, 0);
}

static bool reset_due(const struct client *c)
{
    return (c->reset_when == 1 && c->connected) ||
           (c->reset_when == 2 && c->sent >= c->reset_at) ||
           (c->reset_when == 3 && c->got >= c->reset_at);
}

/* Write what the socket takes; after the last byte, shut down the sending side. */
static int client_send(struct client *c)
{
    uint8_t b[CHUNK];
    while (c->sent < c->total) {
        size_t n = c->total - c->sent;
        if (n > sizeof b)
            n = sizeof b;
        if (c->reset_when == 2 && c->reset_at > c->sent && c->reset_at - c->sent < n)
            n = c->reset_at - c->sent;
        fill(c->key, c->sent, b, n);
        ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL);
        if (w < 0)
            return errno == EAGAIN ? 0 : -errno;
        c->sent += (size_t)w;
        if (reset_due(c))
            return 1;
    }
    if (!c->shut) {
        if (shutdown(c->fd, SHUT_WR) < 0)
            return -errno;
        c->shut = true;
    }
    return 0;
}

/* Read and check the echo; returns 1 at a verdict (the client finished), else 0. */
static int client_recv(struct client *c)
{
    uint8_t b[CHUNK], want[CHUNK];
    for (;;) {
        ssize_t n = read(c->fd, b, sizeof b);
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n < 0) {
            int err = errno;
            finish(c, err == ECONNREFUSED ? REFUSED : RELAY_RESET, err);
            return 1;
        }
        if (n == 0) {
            finish(c, c->got == c->total && c->sent == c->total ? OK : SHORT, 0);
            return 1;
        }
        if (c->got + (size_t)n > c->total) {
            finish(c, CORRUPT, 0);
            return 1;
        }
        fill(c->key, c->got, want, (size_t)n);
        if (memcmp(b, want, (size_t)n)) {
            finish(c, CORRUPT, 0);
            return 1;
        }
        c->got += (size_t)n;
        if (reset_due(c)) {
            reset_close(c);
            return 1;
        }
    }
}

static void client_event(struct client *c, uint32_t ev)
{
    if (!c->connected) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            finish(c, err == ECONNREFUSED ? REFUSED : RELAY_RESET, err);
            return;
        }
        c->connected = true;
        if (reset_due(c)) {
            reset_close(c);
            return;
        }
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (client_recv(c))
            return;
    }
    int rc = client_send(c);
    if (rc == 1) {
        reset_close(c);
        return;
    }
    if (rc < 0) {
        /* The relay reset us (EPIPE, ECONNRESET): the read says which, or the error is it. */
        if (!client_recv(c))
            finish(c, RELAY_RESET, -rc);
        return;
    }
}

static void client_start(int ep, struct client *c, const struct sockaddr *sa, socklen_t len)
{
    c->fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        fail("socket");
    if (connect(c->fd, sa, len) < 0 && errno != EINPROGRESS) {
        finish(c, REFUSED, errno);
        return;
    }
    /* Edge-triggered: every handler works until EAGAIN or a verdict. */
    add_fd(ep, c->fd, EPOLLIN | EPOLLOUT | EPOLLET, c);
}

static void usage(void)
{
    fprintf(stderr, "usage: relay_burst [-n CONNS] [-r PERCENT] [-b BYTES] [-t SECONDS] "
                    "[-s SEED] [-6] RELAY [RELAY ARGS...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long nconns = 2000, percent = 10, maxbytes = 65536;
    double deadline_s = 30;
    uint64_t seed = 1;
    bool v6 = false;
    int opt;
    /* '+': options end at RELAY, whose own arguments follow. */
    while ((opt = getopt(argc, argv, "+n:r:b:t:s:6")) != -1) {
        switch (opt) {
        case 'n': nconns = strtol(optarg, NULL, 10); break;
        case 'r': percent = strtol(optarg, NULL, 10); break;
        case 'b': maxbytes = strtol(optarg, NULL, 10); break;
        case 't': deadline_s = strtod(optarg, NULL); break;
        case 's': seed = strtoull(optarg, NULL, 0); break;
        case '6': v6 = true; break;
        default: usage();
        }
    }
    if (optind >= argc || nconns < 1 || nconns > 100000 || percent < 0 || percent > 100 ||
        maxbytes < 1 || !(deadline_s > 0))
        usage();
    rng_state = seed;
    signal(SIGPIPE, SIG_IGN);
    raise_nofile((rlim_t)nconns * 2 + 64);
    atexit(kill_relay);

    /* The echo server's listener, before the fork: the relay needs its port. */
    struct sockaddr_storage ss = { 0 };
    socklen_t sl;
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof *a;
    }
    server_lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (server_lfd < 0 || bind(server_lfd, (struct sockaddr *)&ss, sl) < 0 ||
        listen(server_lfd, SOMAXCONN) < 0 || getsockname(server_lfd, (struct sockaddr *)&ss, &sl) < 0)
        fail("server socket");
    int sport = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                         : ((struct sockaddr_in *)&ss)->sin_port);
    int rport = start_relay(argv + optind, argc - optind, v6, sport);
    pthread_t st;
    if (pthread_create(&st, NULL, server, NULL))
        fail("pthread_create");

    /* The relay's address: the server's, with the relay's port. */
    if (v6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)rport);
    else
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)rport);
    struct client *cl = calloc((size_t)nconns, sizeof *cl);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!cl || ep < 0)
        fail("setup");
    double t0 = now();
    for (long i = 0; i < nconns; i++) {
        struct client *c = &cl[i];
        c->id = (uint32_t)i;
        c->key = mix(seed * 0x100000001b3ULL + (uint64_t)i) << 20;
        c->total = 1 + (size_t)rnd((uint64_t)maxbytes);
        if ((long)rnd(100) < percent) {
            c->reset_when = 1 + (int)rnd(3);
            c->reset_at = (size_t)rnd(c->total);
        }
        client_start(ep, c, (struct sockaddr *)&ss, sl);
    }
    struct epoll_event evs[MAX_EVENTS];
    while (finished < (unsigned long)nconns) {
        double left = deadline_s - (now() - t0);
        if (left <= 0)
            break;
        int n = epoll_wait(ep, evs, MAX_EVENTS, (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR)
            fail("epoll_wait");
        for (int i = 0; i < n; i++) {
            struct client *c = evs[i].data.ptr;
            if (c->fd >= 0)
                client_event(c, evs[i].events);
        }
    }
    double el = now() - t0;
    for (long i = 0; i < nconns; i++)
        if (cl[i].fd >= 0)
            finish(&cl[i], STUCK, 0);

    char summary[1024];
    int status = stop_relay(summary, sizeof summary);
    unsigned long lost = counts[REFUSED] + counts[RELAY_RESET] + counts[SHORT] +
                         counts[CORRUPT] + counts[STUCK];
    /* The relay's counters that say how it coped. */
    char extra[512] = "";
    static const char *const keys[] = { "pairs_peak=", "listen_pauses=", "pool_trims=",
                                        "resets=", "conns=", "effective=" };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *p = strstr(summary, keys[k]);
        if (p && (p == summary || p[-1] == ' ')) {
            size_t l = strcspn(p, " \n");
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " relay_%.*s",
                     (int)l, p);
        }
    }
    printf("burst conns=%ld ok=%lu reset=%lu lost=%lu refused=%lu relay_reset=%lu short=%lu "
           "corrupt=%lu stuck=%lu seconds=%.2f relay_status=%d%s\n",
           nconns, counts[OK], counts[RESET], lost, counts[REFUSED], counts[RELAY_RESET],
           counts[SHORT], counts[CORRUPT], counts[STUCK], el, status, extra);
    fflush(stdout);
    return lost == 0 && status == 0 ? 0 : 1;
}
