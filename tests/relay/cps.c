/* cps.c - connections per second through examples/c/peek_relay: many short connections.
 *
 * Usage: cps SECONDS CLIENTS RELAY [RELAY ARGS...]
 * Starts a loopback server (one thread: accept, read the 64-byte request, write a 64-byte
 * reply, close), runs RELAY --listen 127.0.0.1:0 --connect <server> RELAY ARGS, and CLIENTS
 * threads that each connect through the relay, send 64 bytes, read the reply to end of stream
 * and close, for SECONDS. Then SIGTERM to the relay, whose summary line gives its CPU time.
 * Prints one line: "cps conns=N seconds=S conns_per_s=X relay_cpu_us_per_conn=Y errors=E".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
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

static volatile int stop;
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
    while (!stop) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0 || write(c, b, MSG) != MSG) {
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
        if (got == MSG)
            __atomic_add_fetch(&done_conns, 1, __ATOMIC_RELAXED);
        else
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: cps SECONDS CLIENTS RELAY [ARGS...]\n");
        return 2;
    }
    double secs = atof(argv[1]);
    int nclients = atoi(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 1024) ||
        getsockname(l, (struct sockaddr *)&sa, &len)) {
        perror("cps: server");
        return 1;
    }
    pthread_t st;
    pthread_create(&st, NULL, server, &l);
    int errp[2], outp[2];
    if (pipe(errp) || pipe(outp))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        char conn[64];
        snprintf(conn, sizeof conn, "127.0.0.1:%d", ntohs(sa.sin_port));
        char **args = calloc((size_t)argc + 6, sizeof *args);
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
    close(errp[1]);
    close(outp[1]);
    FILE *ef = fdopen(errp[0], "r");
    char line[512];
    while (fgets(line, sizeof line, ef)) {
        char *p = strstr(line, "listening on 127.0.0.1:");
        if (p) {
            relay_port = atoi(p + strlen("listening on 127.0.0.1:"));
            break;
        }
    }
    if (!relay_port) {
        fprintf(stderr, "cps: relay did not start\n");
        return 1;
    }
    pthread_t *ct = calloc((size_t)nclients, sizeof *ct);
    double t0 = now();
    for (int i = 0; i < nclients; i++)
        pthread_create(&ct[i], NULL, client, NULL);
    usleep((useconds_t)(secs * 1e6));
    stop = 1;
    for (int i = 0; i < nclients; i++)
        pthread_join(ct[i], NULL);
    double el = now() - t0;
    usleep(200000); /* the relay closes its last pairs */
    kill(pid, SIGTERM);
    FILE *of = fdopen(outp[0], "r");
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
    int status;
    waitpid(pid, &status, 0);
    printf("cps conns=%lu seconds=%.2f conns_per_s=%.0f relay_cpu_us_per_conn=%.1f errors=%lu "
           "relay_conns=%lu relay_status=%d\n",
           done_conns, el, done_conns / el, rconns ? cpu * 1e6 / rconns : -1.0, errors, rconns,
           status);
    return 0;
}
