/*
 * faultrun - run one program as if on an older or locked-down kernel, by per-process fault
 * injection: a seccomp filter sends the calls below to this supervisor (SECCOMP_RET_USER_NOTIF),
 * which answers with the error such a kernel gives, or lets the call through. Only the program
 * (and what it starts) is affected; no sysctl or global state changes, and no privilege is
 * needed (PR_SET_NO_NEW_PRIVS). The way libpathrs runs its fallbacks on a new kernel.
 *
 * Usage: faultrun FAULT[,FAULT...] -- PROGRAM [ARG...]
 *
 * Faults (each as the kernels named answer it):
 *   no-peek-off-tcp   setsockopt/getsockopt(SOL_SOCKET, SO_PEEK_OFF) on a TCP socket:
 *                     EOPNOTSUPP (TCP before 6.9, TCP/IPv6 before 6.12: no set_peek_off in the
 *                     proto ops, net/core/sock.c). AF_UNIX and UDP keep theirs.
 *   no-io-uring       io_uring_setup: EPERM (kernel.io_uring_disabled = 2, or 1 for a user
 *                     outside io_uring_group; also a container's seccomp profile).
 *   no-so-zerocopy    setsockopt/getsockopt(SOL_SOCKET, SO_ZEROCOPY): ENOPROTOOPT (before
 *                     4.14: an option the kernel does not know).
 *   zcrx-16           getsockopt(IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE) with *optlen != 16:
 *                     EINVAL (4.18 to 5.6 accept exactly the 16-byte struct); 16 goes through.
 *
 * The supervisor looks at the caller's socket (pidfd_getfd) and memory (process_vm_readv),
 * which needs ptrace access to it: a parent over its child has it (Yama ptrace_scope <= 1).
 * On exit it prints, on stderr, how often each fault answered ("faultrun: no-io-uring: 3
 * calls refused"), and exits with the program's status; with status 3 instead when a fault
 * named was never hit (the program did not exercise it: a run that proves nothing), unless
 * FAULTRUN_ALLOW_UNUSED=1. Exit status 2: the fault could not be set up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SO_PEEK_OFF
#define SO_PEEK_OFF 42
#endif
#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef TCP_ZEROCOPY_RECEIVE
#define TCP_ZEROCOPY_RECEIVE 35
#endif
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif
#ifndef SECCOMP_USER_NOTIF_FLAG_CONTINUE
#define SECCOMP_USER_NOTIF_FLAG_CONTINUE (1UL << 0)
#endif

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "faultrun: add this architecture's AUDIT_ARCH"
#endif

enum fault { F_PEEK_OFF_TCP, F_IO_URING, F_SO_ZEROCOPY, F_ZCRX_16, F_COUNT };

static const char *const fault_names[F_COUNT] = {
    "no-peek-off-tcp", "no-io-uring", "no-so-zerocopy", "zcrx-16",
};

static const char *const fault_effect[F_COUNT] = {
    "SO_PEEK_OFF on TCP refused (EOPNOTSUPP)",
    "io_uring_setup refused (EPERM)",
    "SO_ZEROCOPY refused (ENOPROTOOPT)",
    "TCP_ZEROCOPY_RECEIVE with a struct other than 16 bytes refused (EINVAL)",
};

static bool active[F_COUNT];
static unsigned long hits[F_COUNT];
static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t child;

static void die(const char *what)
{
    fprintf(stderr, "faultrun: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* The filter: the calls any fault may concern go to the supervisor, everything else runs. */
#define LD_ARG(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
static int install_filter(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 11, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setsockopt, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getsockopt, 0, 8),
        LD_ARG(1), /* level */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOL_SOCKET, 0, 3),
        LD_ARG(2), /* optname */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SO_PEEK_OFF, 5, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SO_ZEROCOPY, 4, 3),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, 2),
        LD_ARG(2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TCP_ZEROCOPY_RECEIVE, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    };
    struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        die("PR_SET_NO_NEW_PRIVS");
    int fd = (int)syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER,
                          SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (fd < 0)
        die("seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER)");
    return fd;
}

/* The protocol of the caller's socket `fd` (IPPROTO_TCP, ...), or -1. */
static int socket_protocol(pid_t tid, int fd)
{
    int pidfd = (int)syscall(__NR_pidfd_open, tid, PIDFD_THREAD);
    if (pidfd < 0)
        pidfd = (int)syscall(__NR_pidfd_open, tid, 0);
    if (pidfd < 0)
        return -1;
    int dup = (int)syscall(__NR_pidfd_getfd, pidfd, fd, 0);
    close(pidfd);
    if (dup < 0)
        return -1;
    int proto = -1, domain = -1;
    socklen_t len = sizeof(proto);
    if (getsockopt(dup, SOL_SOCKET, SO_PROTOCOL, &proto, &len) < 0)
        proto = -1;
    len = sizeof(domain);
    if (getsockopt(dup, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
        (domain != AF_INET && domain != AF_INET6))
        proto = -1;
    close(dup);
    return proto;
}

/* *optlen in the caller's memory, or -1. */
static long read_optlen(pid_t tid, uint64_t addr)
{
    socklen_t v;
    struct iovec local = { &v, sizeof(v) }, remote = { (void *)(uintptr_t)addr, sizeof(v) };
    if (process_vm_readv(tid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof(v))
        return -1;
    return (long)v;
}

/* The answer to one call: 0 = let it through, else the errno to fail it with. */
static int decide(const struct seccomp_notif *req)
{
    const __u64 *a = req->data.args;
    int nr = req->data.nr;
    enum fault f = F_COUNT;
    int err = 0;

    if (nr == __NR_io_uring_setup) {
        f = F_IO_URING;
        err = EPERM;
    } else if ((int)a[1] == SOL_SOCKET && (int)a[2] == SO_ZEROCOPY) {
        f = F_SO_ZEROCOPY;
        err = ENOPROTOOPT;
    } else if ((int)a[1] == SOL_SOCKET && (int)a[2] == SO_PEEK_OFF) {
        f = F_PEEK_OFF_TCP;
        if (active[f] && socket_protocol(req->pid, (int)a[0]) == IPPROTO_TCP)
            err = EOPNOTSUPP;
    } else if (nr == __NR_getsockopt && (int)a[1] == IPPROTO_TCP &&
               (int)a[2] == TCP_ZEROCOPY_RECEIVE) {
        f = F_ZCRX_16;
        /* An unreadable optlen is the kernel's EFAULT to give: let it through. */
        long len = active[f] ? read_optlen(req->pid, a[4]) : -1;
        if (len >= 0 && len != 16)
            err = EINVAL;
    }
    if (f == F_COUNT || !active[f] || !err)
        return 0;
    pthread_mutex_lock(&hits_lock);
    hits[f]++;
    pthread_mutex_unlock(&hits_lock);
    return err;
}

static void *supervise(void *arg)
{
    int lfd = *(int *)arg;
    struct seccomp_notif_sizes sz;
    if (syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0)
        die("SECCOMP_GET_NOTIF_SIZES");
    struct seccomp_notif *req = calloc(1, sz.seccomp_notif > sizeof(*req) ? sz.seccomp_notif
                                                                          : sizeof(*req));
    struct seccomp_notif_resp *resp =
        calloc(1, sz.seccomp_notif_resp > sizeof(*resp) ? sz.seccomp_notif_resp : sizeof(*resp));
    if (!req || !resp)
        die("calloc");
    for (;;) {
        memset(req, 0, sz.seccomp_notif);
        if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, req) < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ENOENT) /* the caller was killed meanwhile */
                continue;
            return NULL; /* every filtered task has gone */
        }
        int err = decide(req);
        memset(resp, 0, sz.seccomp_notif_resp);
        resp->id = req->id;
        if (err) {
            resp->error = -err;
        } else {
            resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        }
        /* ENOENT: the call was interrupted (a signal) or its task died; nothing to answer. */
        if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, resp) < 0 && errno != ENOENT)
            die("SECCOMP_IOCTL_NOTIF_SEND");
    }
}

static void send_fd(int sock, int fd)
{
    char c = 0;
    struct iovec iov = { &c, 1 };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    if (sendmsg(sock, &m, 0) != 1)
        die("sendmsg(listener)");
}

static int recv_fd(int sock)
{
    char c;
    struct iovec iov = { &c, 1 };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf) };
    if (recvmsg(sock, &m, 0) != 1)
        return -1;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (!cm || cm->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    return fd;
}

static void usage(void)
{
    fprintf(stderr, "usage: faultrun FAULT[,FAULT...] -- PROGRAM [ARG...]\nfaults:");
    for (int i = 0; i < F_COUNT; i++)
        fprintf(stderr, "\n  %-16s %s", fault_names[i], fault_effect[i]);
    fputc('\n', stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 4 || strcmp(argv[2], "--") != 0)
        usage();
    char *list = strdup(argv[1]);
    for (char *save, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int i = 0;
        while (i < F_COUNT && strcmp(t, fault_names[i]) != 0)
            i++;
        if (i == F_COUNT) {
            fprintf(stderr, "faultrun: unknown fault '%s'\n", t);
            usage();
        }
        active[i] = true;
    }
    free(list);

    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
        die("socketpair");
    child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) {
        close(sp[0]);
        int lfd = install_filter();
        send_fd(sp[1], lfd);
        close(lfd);
        close(sp[1]);
        execvp(argv[3], argv + 3);
        fprintf(stderr, "faultrun: exec %s: %s\n", argv[3], strerror(errno));
        _exit(127);
    }
    close(sp[1]);
    int lfd = recv_fd(sp[0]);
    close(sp[0]);
    if (lfd < 0) {
        int st;
        waitpid(child, &st, 0);
        fprintf(stderr, "faultrun: the child could not install the filter\n");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, supervise, &lfd) != 0)
        die("pthread_create");
    int st;
    while (waitpid(child, &st, 0) < 0)
        if (errno != EINTR)
            die("waitpid");
    /* Grandchildren the program left behind may still hold the filter; they are not ours
     * to wait for. Report and go. */
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    bool unused = false;
    pthread_mutex_lock(&hits_lock);
    for (int i = 0; i < F_COUNT; i++) {
        if (!active[i])
            continue;
        fprintf(stderr, "faultrun: %s: %lu calls refused (%s)\n", fault_names[i], hits[i],
                fault_effect[i]);
        if (!hits[i])
            unused = true;
    }
    pthread_mutex_unlock(&hits_lock);
    if (unused && rc == 0) {
        const char *allow = getenv("FAULTRUN_ALLOW_UNUSED");
        if (!allow || strcmp(allow, "1") != 0) {
            fprintf(stderr, "faultrun: a fault was never hit: the program did not exercise it\n");
            rc = 3;
        }
    }
    return rc;
}
