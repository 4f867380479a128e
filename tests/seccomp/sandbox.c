/* sandbox.c - runs every lowcopy call of a behaviour-table runner under a seccomp filter that
 * allows exactly the syscalls its documentation names (include/lowcopy_syscalls.h).
 *
 * Linked into a runner (tests/c/<x>scenarios.c + harness.c) with -Wl,--wrap=<function> for
 * every lowcopy function: each call lands in __wrap_<function> below, which runs the real
 * function in a thread of its own. That thread installs a filter of its own (seccomp filters
 * are per thread; without TSYNC the runner's other threads keep theirs) allowing the
 * function's documented syscalls and the one raw exit(2) that ends the thread, then calls the
 * function and exits. So each call is held to its own list, not to the union of every
 * function the table uses, and the harness's own syscalls (fixtures, peers, fork, writers)
 * run outside any filter, in the runner's main and writer threads.
 *
 * The zerocopy sender's calls are the exception: an io_uring sender belongs to the thread that
 * first submits on it, so they run in one long-lived thread whose filter allows the union of
 * the lowcopy_zc_* lists (and futex, for the hand-over).
 *
 * Any other syscall traps (SECCOMP_RET_TRAP): the SIGSYS handler writes one line naming the
 * function and the syscall to stderr (the filter allows exactly that write: fd 2, MSG_LEN
 * bytes), then makes a syscall no list has; the kernel, finding SIGSYS blocked in its own
 * handler, kills the process with it. The harness forks a child per run and reports the run
 * "killed by signal 31 (Bad system call)", so an undocumented syscall fails the table.
 *
 * The wrappers pass ten integer-register-sized arguments through unchanged: on x86_64 (the
 * only architecture the filter accepts) the first six travel in registers and the rest on
 * the stack, so a function of fewer arguments receives exactly its own, whatever their C
 * types (every lowcopy function takes integers and pointers and returns an integer, a pointer
 * or nothing).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <lowcopy_syscalls.h>

#if !defined(__x86_64__)
#error "tests/seccomp/sandbox.c passes arguments the x86_64 way"
#endif

/* tests/c/scenarios.c: a spin rate is not measured under the sandbox. */
extern const int lowcopy_test_calls_are_slow;
const int lowcopy_test_calls_are_slow = 1;

typedef long (*fn10)(long, long, long, long, long, long, long, long, long, long);

enum { MSG_LEN = 200, MAX_ALLOWED = 64 };

struct call {
    const char *name;
    const int *allowed; /* ends with -1 */
    fn10 fn;
    long a[10];
    long ret;
    int err;            /* a failure of the sandbox itself */
};

static __thread const struct call *current;

/* Names for the message; any other number is printed as it is. */
static const char *syscall_name(int nr)
{
#define N(x) case __NR_##x: return #x;
    switch (nr) {
    N(read) N(write) N(close) N(poll) N(ppoll) N(fcntl) N(mmap) N(munmap) N(mprotect)
    N(madvise) N(brk) N(mremap) N(socket) N(connect) N(accept) N(accept4) N(sendto)
    N(recvfrom) N(sendmsg) N(recvmsg) N(recvmmsg) N(sendmmsg) N(shutdown) N(bind) N(listen)
    N(getsockname) N(getpeername) N(setsockopt) N(getsockopt) N(epoll_wait) N(epoll_pwait)
    N(epoll_ctl) N(epoll_create1) N(clock_gettime) N(clock_nanosleep) N(nanosleep) N(futex)
    N(getrandom) N(ioctl) N(io_uring_setup) N(io_uring_enter) N(io_uring_register)
    N(writev) N(rt_sigprocmask) N(rt_sigaction) N(sigaltstack) N(exit) N(exit_group)
    N(gettid) N(getpid) N(tgkill) N(openat) N(dup) N(pipe2) N(eventfd2) N(sched_yield)
    N(rseq) N(set_robust_list) N(prctl) N(seccomp)
    default: return NULL;
    }
#undef N
}

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    static char msg[MSG_LEN];
    const char *name = syscall_name(si->si_syscall);
    char num[16];
    if (!name) {
        snprintf(num, sizeof num, "%d", si->si_syscall);
        name = num;
    }
    memset(msg, ' ', sizeof msg);
    int n = snprintf(msg, sizeof msg, "seccomp: %s made syscall %d (%s), not in its "
                     "documented set (include/lowcopy_syscalls.h)",
                     current ? current->name : "?", si->si_syscall, name);
    if (n > 0 && n < MSG_LEN)
        msg[n] = ' ';
    msg[MSG_LEN - 1] = '\n';
    ssize_t w = syscall(__NR_write, 2, msg, (size_t)MSG_LEN);
    (void)w;
    /* Not allowed: trapped again with SIGSYS blocked here, which the kernel turns into death
     * by SIGSYS. */
    syscall(__NR_getpid);
    _exit(127); /* never reached */
}

/* Call threads: 256 KiB of stack (a discard peek puts 16 KiB of iovecs there), which glibc
 * keeps in its stack cache from one call to the next. */
static pthread_attr_t call_attr;

__attribute__((constructor)) static void install_sigsys_handler(void)
{
    if (pthread_attr_init(&call_attr) != 0 || pthread_attr_setstacksize(&call_attr, 256 << 10)) {
        fputs("sandbox: pthread_attr\n", stderr);
        exit(2);
    }
    struct sigaction sa = {.sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, NULL) < 0) {
        perror("sandbox: sigaction(SIGSYS)");
        exit(2);
    }
}

#define ALLOW_NR(nr) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* The calling thread's filter: `allowed`, exit, and the handler's one write. */
static int install_filter(const int *allowed)
{
    struct sock_filter f[8 + 2 * MAX_ALLOWED + 16];
    size_t n = 0;
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, nr));
    size_t k = 0;
    for (; allowed[k] >= 0; k++) {
        if (k == MAX_ALLOWED)
            return -E2BIG;
        struct sock_filter a[] = {ALLOW_NR((unsigned)allowed[k])};
        f[n++] = a[0];
        f[n++] = a[1];
    }
    struct sock_filter tail[] = {
        ALLOW_NR(__NR_exit),
        /* write(2, msg, MSG_LEN): the SIGSYS handler's message, nothing else. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_write, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MSG_LEN, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
    };
    memcpy(f + n, tail, sizeof tail);
    n += sizeof tail / sizeof tail[0];
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return -errno;
    return 0;
}

static void *call_thread(void *arg)
{
    struct call *c = arg;
    current = c;
    int rc = install_filter(c->allowed);
    if (rc < 0) {
        c->err = -rc;
        return NULL;
    }
    c->ret = c->fn(c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5], c->a[6], c->a[7],
                   c->a[8], c->a[9]);
    /* The raw exit: glibc's thread exit would make syscalls of its own (the kernel still
     * clears the tid and wakes pthread_join). */
    syscall(__NR_exit, 0);
    return NULL;
}

/* The zerocopy sender's calls run in one thread per process instead: an io_uring sender
 * belongs to the thread that first submits on it (IORING_SETUP_SINGLE_ISSUER; another thread
 * gets EEXIST). That thread's filter allows the union of the lowcopy_zc_* lists, and futex
 * for the hand-over (the harness's own). */
static int zc_allowed[MAX_ALLOWED + 1] = {-1};
static pthread_mutex_t zc_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t zc_cv = PTHREAD_COND_INITIALIZER;
static struct call *zc_req;
static bool zc_started;

static void add_allowed(int *set, const int *more)
{
    for (; *more >= 0; more++) {
        size_t i = 0;
        while (set[i] >= 0 && set[i] != *more)
            i++;
        if (set[i] < 0 && i < MAX_ALLOWED) {
            set[i] = *more;
            set[i + 1] = -1;
        }
    }
}

static void *zc_thread(void *arg)
{
    (void)arg;
    int rc = install_filter(zc_allowed);
    pthread_mutex_lock(&zc_mu);
    for (;;) {
        while (!zc_req || zc_req->ret != LONG_MIN)
            pthread_cond_wait(&zc_cv, &zc_mu);
        struct call *c = zc_req;
        pthread_mutex_unlock(&zc_mu);
        current = c;
        long ret = 0;
        if (rc < 0)
            c->err = -rc;
        else
            ret = c->fn(c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5], c->a[6], c->a[7],
                        c->a[8], c->a[9]);
        pthread_mutex_lock(&zc_mu);
        c->ret = ret == LONG_MIN ? LONG_MIN + 1 : ret; /* LONG_MIN: "pending" (never returned) */
        zc_req = NULL;
        pthread_cond_broadcast(&zc_cv);
    }
    return NULL;
}

static long run_in_zc_thread(struct call *c)
{
    pthread_mutex_lock(&zc_mu);
    if (!zc_started) {
        static const int futex[] = {__NR_futex, -1};
        add_allowed(zc_allowed, futex);
        sigset_t all, old;
        pthread_t t;
        sigfillset(&all);
        sigdelset(&all, SIGSYS);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int rc = pthread_create(&t, NULL, zc_thread, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            fprintf(stderr, "sandbox: zc thread: %s\n", strerror(rc));
            abort();
        }
        zc_started = true;
    }
    c->ret = LONG_MIN;
    zc_req = c;
    pthread_cond_broadcast(&zc_cv);
    while (c->ret == LONG_MIN)
        pthread_cond_wait(&zc_cv, &zc_mu);
    pthread_mutex_unlock(&zc_mu);
    if (c->err) {
        fprintf(stderr, "sandbox: seccomp filter for %s: %s\n", c->name, strerror(c->err));
        abort();
    }
    return c->ret;
}

static long run_sandboxed(const char *name, const int *allowed, fn10 fn, const long a[10])
{
    struct call c = {.name = name, .allowed = allowed, .fn = fn};
    memcpy(c.a, a, sizeof c.a);
    if (!strncmp(name, "lowcopy_zc_", 11))
        return run_in_zc_thread(&c);
    sigset_t all, old;
    pthread_t t;
    /* Signals go to the runner's threads, never to the filtered one. */
    sigfillset(&all);
    sigdelset(&all, SIGSYS);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&t, &call_attr, call_thread, &c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0 || (rc = pthread_join(t, NULL)) != 0) {
        fprintf(stderr, "sandbox: thread for %s: %s\n", name, strerror(rc));
        abort();
    }
    if (c.err) {
        fprintf(stderr, "sandbox: seccomp filter for %s: %s\n", name, strerror(c.err));
        abort();
    }
    return c.ret;
}

#define NR(name) __NR_##name,
#define WRAP(fname)                                                                          \
    long __real_##fname(long, long, long, long, long, long, long, long, long, long);         \
    static const int allowed_##fname[] = {LOWCOPY_SYSCALLS_##fname(NR) - 1};                 \
    long __wrap_##fname(long, long, long, long, long, long, long, long, long, long);         \
    long __wrap_##fname(long a0, long a1, long a2, long a3, long a4, long a5, long a6,       \
                        long a7, long a8, long a9)                                           \
    {                                                                                        \
        const long a[10] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9};                         \
        return run_sandboxed(#fname, allowed_##fname, __real_##fname, a);                    \
    }

/* WRAP(lowcopy_...) for every function of include/lowcopy_syscalls.h (the Makefile lists
 * them, and links with the matching --wrap flags). */
#include "functions.h"

/* The zc thread's list: every lowcopy_zc_* function's. */
#undef WRAP
#define WRAP(fname)                                                                          \
    if (!strncmp(#fname, "lowcopy_zc_", 11))                                                 \
        add_allowed(zc_allowed, allowed_##fname);
__attribute__((constructor)) static void zc_union(void)
{
#include "functions.h"
}
