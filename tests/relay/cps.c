/* cps.c - connections per second through examples/c/peek_relay: many short connections.
 * Built by `make examples` as build/bin/relay_cps; scripts/relay_cps.sh makes the table.
 *
 * Usage: relay_cps SECONDS CLIENTS RELAY [RELAY ARGS...]
 * Starts a loopback server (one thread: accept, read the 64-byte request, write a 64-byte
 * reply, close), runs RELAY --listen 127.0.0.1:0 --connect <server> RELAY ARGS, and CLIENTS
 * threads that each connect through the relay, send 64 bytes, read the reply to end of stream
 * and close, for SECONDS. Then SIGTERM to the relay, whose summary line gives its CPU time.
 * Prints one line: "cps conns=N seconds=S conns_per_s=X relay_cpu_us_per_conn=Y errors=E
 * relay_conns=R relay_status=W" (W: the wait status, 0 for a clean exit).
 * Exits 1 if any connection failed (no full reply within 5 s, reset, refused) or the relay did
 * not exit cleanly (a sandboxed relay killed by SIGSYS included), 2 on bad usage.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MSG = 64 };

enum { IO_TIMEOUT_S = 5 };   /* a stuck relay fails the client, never hangs it */

static int stop;             /* __atomic: set by main, read by the clients */
static int relay_port;
static unsigned long done_conns, errors;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *server(void *arg)
{
    int l = *(int *)arg;
    char b[MSG];
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0)
            continue;
        size_t got = 0;
        while (got < MSG) {
            ssize_t n = read(c, b + got, MSG - got);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        if (got == MSG && write(c, b, MSG) != MSG)
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
        close(c);
    }
    return NULL;
}

static void *client(void *arg)
{
    (void)arg;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)relay_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char b[MSG];
    memset(b, 'x', sizeof b);
    struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
            setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
            connect(c, (struct sockaddr *)&a, sizeof a) < 0 || write(c, b, MSG) != MSG) {
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
            if (c >= 0)
                close(c);
            continue;
        }
        size_t got = 0;
        ssize_t n;
        while ((n = read(c, b, sizeof b)) > 0)
            got += (size_t)n;
        close(c);
        if (n == 0 && got == MSG)
            __atomic_add_fetch(&done_conns, 1, __ATOMIC_RELAXED);
        else
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* The relay's stderr after its "listening" line, copied to ours as it comes: a relay that
 * writes many notes (e.g. "all pairs in use") must never block on a full pipe. */
static void *drain(void *arg)
{
    FILE *f = arg;
    char line[512];
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: relay_cps SECONDS CLIENTS RELAY [ARGS...]\n");
        return 2;
    }
    char *end;
    double secs = strtod(argv[1], &end);
    if (*end || !(secs > 0 && secs <= 3600)) {
        fprintf(stderr, "relay_cps: SECONDS: 0 < s <= 3600\n");
        return 2;
    }
    long nclients = strtol(argv[2], &end, 10);
    if (*end || nclients < 1 || nclients > 1000) {
        fprintf(stderr, "relay_cps: CLIENTS: 1..1000\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 1024) ||
        getsockname(l, (struct sockaddr *)&sa, &len)) {
        perror("relay_cps: server");
        return 1;
    }
    /* The relay's argv, made before fork (the child of a threaded process only execs). */
    char conn[64];
    snprintf(conn, sizeof conn, "127.0.0.1:%d", ntohs(sa.sin_port));
    char **args = calloc((size_t)argc + 6, sizeof *args);
    if (!args)
        return 1;
    pthread_t st;
    if (pthread_create(&st, NULL, server, &l)) {
        fprintf(stderr, "relay_cps: pthread_create failed\n");
        return 1;
    }
    int errp[2], outp[2];
    if (pipe2(errp, O_CLOEXEC) || pipe2(outp, O_CLOEXEC)) {
        perror("relay_cps: pipe");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("relay_cps: fork");
        return 1;
    }
    if (pid == 0) {
        int k = 0;
        args[k++] = argv[3];
        args[k++] = "--listen";
        args[k++] = "127.0.0.1:0";
        args[k++] = "--connect";
        args[k++] = conn;
        for (int i = 4; i < argc; i++)
            args[k++] = argv[i];
        dup2(errp[1], 2);
        dup2(outp[1], 1);
        execv(argv[3], args);
        _exit(127);
    }
    free(args);
    close(errp[1]);
    close(outp[1]);
    FILE *ef = fdopen(errp[0], "r");
    FILE *of = fdopen(outp[0], "r");
    if (!ef || !of) {
        perror("relay_cps: fdopen");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    char line[512];
    while (fgets(line, sizeof line, ef)) {
        char *p = strstr(line, "listening on 127.0.0.1:");
        if (p) {
            relay_port = atoi(p + strlen("listening on 127.0.0.1:"));
            break;
        }
    }
    if (!relay_port) {
        fprintf(stderr, "relay_cps: relay did not start\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    pthread_t dt;
    if (pthread_create(&dt, NULL, drain, ef)) {
        fprintf(stderr, "relay_cps: pthread_create failed\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    pthread_t *ct = calloc((size_t)nclients, sizeof *ct);
    if (!ct)
        return 1;
    long started = 0;
    double t0 = now();
    while (started < nclients && !pthread_create(&ct[started], NULL, client, NULL))
        started++;
    struct timespec nap = {.tv_sec = (time_t)secs,
                           .tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9)};
    while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
        ;
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (long i = 0; i < started; i++)
        pthread_join(ct[i], NULL);
    double el = now() - t0;
    if (started < nclients) {
        fprintf(stderr, "relay_cps: only %ld of %ld client threads started\n", started, nclients);
        __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
    }
    usleep(200000); /* the relay closes its last pairs */
    kill(pid, SIGTERM);
    double cpu = -1;
    unsigned long rconns = 0;
    while (fgets(line, sizeof line, of)) {
        char *p = strstr(line, "cpu_s=");
        char *q = strstr(line, " conns=");
        if (p)
            cpu = atof(p + 6);
        if (q)
            rconns = strtoul(q + 7, NULL, 10);
    }
    int status = -1;
    if (waitpid(pid, &status, 0) < 0)
        perror("relay_cps: waitpid");
    pthread_join(dt, NULL);
    printf("cps conns=%lu seconds=%.2f conns_per_s=%.0f relay_cpu_us_per_conn=%.1f errors=%lu "
           "relay_conns=%lu relay_status=%d\n",
           done_conns, el, done_conns / el, rconns ? cpu * 1e6 / rconns : -1.0, errors, rconns,
           status);
    free(ct);
    return errors == 0 && status == 0 ? 0 : 1;
}
