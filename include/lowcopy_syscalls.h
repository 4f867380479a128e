/*
 * lowcopy_syscalls.h: the syscalls each lowcopy function may make, as data for a seccomp
 * allowlist. SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * Generated from the "Syscalls:" line of each function's documentation in lowcopy.h by
 * capi/tests/header.rs: do not edit. Regenerate with `make header`.
 *
 * LOWCOPY_SYSCALLS_<function>(X) expands to X(name) for each syscall that the function may
 * make, on every path (errors, waits, fallbacks) but a panic inside the library (a bug, which
 * may write(2) to stderr first). LOWCOPY_SYSCALLS_ALL(X) is their union. A daemon allows the
 * lists of the functions it calls, e.g.
 *
 *     #define LC_ALLOW(name) BPF_ALLOW(__NR_##name)
 *     LOWCOPY_SYSCALLS_lowcopy_peeker_init(LC_ALLOW)
 *     LOWCOPY_SYSCALLS_lowcopy_peeker_peekv_at(LC_ALLOW)
 *
 * (examples/c/peek_relay.c --sandbox does so). Names are the kernel's on x86_64 with glibc:
 * recv(2) is the recvfrom syscall. Where an architecture has no poll or epoll_wait (arm64,
 * riscv64), the C library makes ppoll and epoll_pwait instead: map those names there.
 * brk, mmap, munmap, mremap, mprotect, madvise, getrandom and futex in the list of a function
 * that allocates or frees (each *_new and *_free, lowcopy_probe) are the C library's malloc
 * and free (glibc's: a new arena, a trim, the first malloc's getrandom, a contended arena
 * lock); the calls on a peeker made by lowcopy_peeker_init never allocate.
 * clock_gettime is served by the vDSO and reaches the kernel only where the clock source has
 * no vDSO path. io_uring operations (the zerocopy sender's IO_URING backend) are not
 * syscalls: a filter sees only io_uring_enter for them.
 */
#ifndef LOWCOPY_SYSCALLS_H
#define LOWCOPY_SYSCALLS_H

#define LOWCOPY_SYSCALLS_lowcopy_version(X)
#define LOWCOPY_SYSCALLS_lowcopy_probe(X) X(socket) X(setsockopt) X(getsockopt) X(bind) X(listen) X(getsockname) X(connect) X(accept) X(close) X(io_uring_setup) X(io_uring_register) X(mmap) X(munmap) X(brk) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex) X(clone3) X(clone) X(rt_sigprocmask) X(rt_sigaction) X(sigaltstack) X(set_robust_list) X(rseq) X(exit)
#define LOWCOPY_SYSCALLS_lowcopy_peek_supported(X) X(getsockopt) X(setsockopt)
#define LOWCOPY_SYSCALLS_lowcopy_peek_at(X) X(recvfrom) X(recvmsg) X(setsockopt) X(getsockopt) X(poll) X(fcntl) X(clock_gettime) X(ioctl)
#define LOWCOPY_SYSCALLS_lowcopy_peekv_at(X) X(recvfrom) X(recvmsg) X(setsockopt) X(getsockopt) X(poll) X(fcntl) X(clock_gettime) X(ioctl)
#define LOWCOPY_SYSCALLS_lowcopy_consume(X) X(getsockopt) X(recvfrom) X(recvmsg) X(ioctl) X(close)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_new(X) X(getsockopt) X(setsockopt) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_peek(X) X(recvfrom) X(recvmsg) X(setsockopt) X(getsockopt) X(poll) X(fcntl) X(clock_gettime) X(ioctl)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_peekv(X) X(recvfrom) X(recvmsg) X(setsockopt) X(getsockopt) X(poll) X(fcntl) X(clock_gettime) X(ioctl)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_seek(X) X(setsockopt)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_consume(X) X(recvfrom) X(recvmsg) X(setsockopt) X(ioctl) X(close)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_note_consumed(X) X(setsockopt)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_offset(X)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_mode(X)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_set_lowat_armed(X) X(getsockopt) X(setsockopt)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_stats(X)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_free(X) X(setsockopt) X(brk) X(munmap) X(madvise) X(futex) X(mmap) X(mremap) X(mprotect) X(getrandom)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_size(X)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_init(X) X(getsockopt) X(setsockopt)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_release(X) X(setsockopt) X(brk) X(munmap) X(madvise) X(futex) X(mmap) X(mremap) X(mprotect) X(getrandom)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_peek_at(X) X(recvfrom) X(recvmsg) X(setsockopt) X(getsockopt) X(poll) X(fcntl) X(clock_gettime) X(ioctl)
#define LOWCOPY_SYSCALLS_lowcopy_peeker_peekv_at(X) X(recvfrom) X(recvmsg) X(setsockopt) X(getsockopt) X(poll) X(fcntl) X(clock_gettime) X(ioctl)
#define LOWCOPY_SYSCALLS_lowcopy_set_rcvlowat(X) X(setsockopt) X(getsockopt)
#define LOWCOPY_SYSCALLS_lowcopy_recv_atleast(X) X(getsockopt) X(setsockopt) X(recvfrom) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(close) X(clock_gettime)
#define LOWCOPY_SYSCALLS_lowcopy_recv_atleast_stats(X) X(getsockopt) X(setsockopt) X(recvfrom) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(close) X(clock_gettime)
#define LOWCOPY_SYSCALLS_lowcopy_receiver_new(X) X(getsockopt) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_receiver_recv(X) X(getsockopt) X(setsockopt) X(recvfrom) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(close) X(clock_gettime)
#define LOWCOPY_SYSCALLS_lowcopy_receiver_stats(X)
#define LOWCOPY_SYSCALLS_lowcopy_receiver_free(X) X(setsockopt) X(close) X(brk) X(munmap) X(madvise) X(futex) X(mmap) X(mremap) X(mprotect) X(getrandom)
#define LOWCOPY_SYSCALLS_lowcopy_zcrx_new(X) X(getsockopt) X(getpeername) X(mmap) X(munmap) X(brk) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zcrx_recv(X) X(getsockopt) X(setsockopt) X(madvise) X(recvfrom) X(poll) X(fcntl) X(clock_gettime) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(close)
#define LOWCOPY_SYSCALLS_lowcopy_zcrx_set_timeout(X)
#define LOWCOPY_SYSCALLS_lowcopy_zcrx_set_peek_off_tracking(X)
#define LOWCOPY_SYSCALLS_lowcopy_zcrx_window(X)
#define LOWCOPY_SYSCALLS_lowcopy_zcrx_stats(X)
#define LOWCOPY_SYSCALLS_lowcopy_zcrx_free(X) X(munmap) X(brk) X(madvise) X(futex) X(mmap) X(mremap) X(mprotect) X(getrandom) X(close)
#define LOWCOPY_SYSCALLS_lowcopy_zc_new(X) X(getsockopt) X(setsockopt) X(io_uring_setup) X(io_uring_register) X(mmap) X(munmap) X(close) X(brk) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_options_default(X)
#define LOWCOPY_SYSCALLS_lowcopy_zc_new_opts(X) X(getsockopt) X(setsockopt) X(io_uring_setup) X(io_uring_register) X(mmap) X(munmap) X(close) X(brk) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_send(X) X(sendmsg) X(io_uring_enter) X(recvmmsg) X(read) X(fcntl) X(getsockopt) X(setsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(io_uring_setup) X(io_uring_register) X(close) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_sendv(X) X(sendmsg) X(io_uring_enter) X(recvmmsg) X(read) X(fcntl) X(getsockopt) X(setsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(io_uring_setup) X(io_uring_register) X(close) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_sendmsg(X) X(sendmsg) X(io_uring_enter) X(recvmmsg) X(read) X(fcntl) X(getsockopt) X(setsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(io_uring_setup) X(io_uring_register) X(close) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_send_reap(X) X(sendmsg) X(io_uring_enter) X(recvmmsg) X(read) X(fcntl) X(getsockopt) X(setsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(io_uring_setup) X(io_uring_register) X(close) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_send_batch(X) X(sendmsg) X(io_uring_enter) X(recvmmsg) X(read) X(fcntl) X(getsockopt) X(setsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(io_uring_setup) X(io_uring_register) X(close) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_reap(X) X(recvmmsg) X(io_uring_enter) X(read) X(getsockopt) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_wait(X) X(io_uring_enter) X(recvmmsg) X(read) X(getsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(close) X(clock_gettime) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_inflight(X)
#define LOWCOPY_SYSCALLS_lowcopy_zc_pollfd(X) X(io_uring_setup) X(io_uring_register) X(eventfd2) X(close) X(brk) X(mmap) X(munmap) X(mremap) X(mprotect) X(madvise) X(getrandom) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_ring_close(X) X(munmap) X(close) X(brk) X(madvise) X(futex)
#define LOWCOPY_SYSCALLS_lowcopy_zc_backend(X)
#define LOWCOPY_SYSCALLS_lowcopy_zc_stats(X)
#define LOWCOPY_SYSCALLS_lowcopy_zc_free(X) X(io_uring_enter) X(recvmmsg) X(read) X(getsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(connect) X(close) X(clock_gettime) X(munmap) X(brk) X(madvise) X(futex) X(mmap) X(mremap) X(mprotect) X(getrandom)
#define LOWCOPY_SYSCALLS_lowcopy_zc_close(X) X(io_uring_enter) X(recvmmsg) X(read) X(getsockopt) X(poll) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(connect) X(close) X(clock_gettime) X(munmap) X(brk) X(madvise) X(futex) X(mmap) X(mremap) X(mprotect) X(getrandom)

#define LOWCOPY_SYSCALLS_ALL(X) \
    X(accept) \
    X(bind) \
    X(brk) \
    X(clock_gettime) \
    X(clone) \
    X(clone3) \
    X(close) \
    X(connect) \
    X(epoll_create1) \
    X(epoll_ctl) \
    X(epoll_wait) \
    X(eventfd2) \
    X(exit) \
    X(fcntl) \
    X(futex) \
    X(getpeername) \
    X(getrandom) \
    X(getsockname) \
    X(getsockopt) \
    X(io_uring_enter) \
    X(io_uring_register) \
    X(io_uring_setup) \
    X(ioctl) \
    X(listen) \
    X(madvise) \
    X(mmap) \
    X(mprotect) \
    X(mremap) \
    X(munmap) \
    X(poll) \
    X(read) \
    X(recvfrom) \
    X(recvmmsg) \
    X(recvmsg) \
    X(rseq) \
    X(rt_sigaction) \
    X(rt_sigprocmask) \
    X(sendmsg) \
    X(set_robust_list) \
    X(setsockopt) \
    X(sigaltstack) \
    X(socket)

/*
 * Per use: LOWCOPY_SYSCALLS_USE_<use>(X), the exact set one way of using the API can make
 * (every path but a panic), for a filter that allows that use and no more; the same lists, one
 * syscall name a line, are include/syscalls/<use>.list for a seccomp generator.
 * tests/seccomp/uses.c runs each use under a filter of exactly its list. A peeker in caller
 * memory never allocates, so none of these lists has the allocator's syscalls (brk, mmap, ...)
 * that lowcopy_peeker_release's own list names for a peeker made by lowcopy_peeker_new.
 */
/* a peeker made by lowcopy_peeker_init in caller memory, any mode, every call on it, released by lowcopy_peeker_release (0 or LOWCOPY_RELEASE_CLOSING) */
#define LOWCOPY_SYSCALLS_USE_PEEKER_INIT(X) X(clock_gettime) X(close) X(fcntl) X(getsockopt) X(ioctl) X(poll) X(recvfrom) X(recvmsg) X(setsockopt)
/* a peeker made by lowcopy_peeker_init in caller memory, any mode, every call on it, released with LOWCOPY_RELEASE_CLOSING (which makes no syscall) */
#define LOWCOPY_SYSCALLS_USE_PEEKER_INIT_CLOSING(X) X(clock_gettime) X(close) X(fcntl) X(getsockopt) X(ioctl) X(poll) X(recvfrom) X(recvmsg) X(setsockopt)
/* a peeker made by lowcopy_peeker_init whose mode is SO_PEEK_OFF (lowcopy_peeker_mode says LOWCOPY_PEEK_OFFSET: OFFSET, or AUTO with or without its shortcut, or OFFSET_OR_DISCARD, on a socket that has it), every call on it, released either way */
#define LOWCOPY_SYSCALLS_USE_PEEKER_INIT_OFFSET(X) X(close) X(getsockopt) X(ioctl) X(recvfrom) X(recvmsg) X(setsockopt)
/* a zerocopy sender on the error queue (lowcopy_zc_new or _new_opts with LOWCOPY_ZC_ERRQUEUE, or AUTO where lowcopy_zc_backend says so), every call on it, closed by lowcopy_zc_free or lowcopy_zc_close */
#define LOWCOPY_SYSCALLS_USE_ZC_ERRQUEUE(X) X(brk) X(clock_gettime) X(close) X(connect) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(fcntl) X(futex) X(getrandom) X(getsockopt) X(madvise) X(mmap) X(mprotect) X(mremap) X(munmap) X(poll) X(read) X(recvmmsg) X(sendmsg) X(setsockopt)
/* a zerocopy sender on io_uring (LOWCOPY_ZC_IO_URING, or AUTO where lowcopy_zc_backend says so), every call on it, closed by lowcopy_zc_free or lowcopy_zc_close, and lowcopy_zc_ring_close */
#define LOWCOPY_SYSCALLS_USE_ZC_IO_URING(X) X(brk) X(clock_gettime) X(close) X(connect) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(fcntl) X(futex) X(getrandom) X(getsockopt) X(io_uring_enter) X(io_uring_register) X(io_uring_setup) X(madvise) X(mmap) X(mprotect) X(mremap) X(munmap) X(poll) X(read) X(sendmsg) X(setsockopt)
/* a sender on the copy path (LOWCOPY_ZC_COPY, or AUTO where lowcopy_zc_backend says so), every call on it, closed by lowcopy_zc_free or lowcopy_zc_close */
#define LOWCOPY_SYSCALLS_USE_ZC_COPY(X) X(brk) X(clock_gettime) X(close) X(connect) X(epoll_create1) X(epoll_ctl) X(epoll_wait) X(fcntl) X(futex) X(getrandom) X(getsockopt) X(madvise) X(mmap) X(mprotect) X(mremap) X(munmap) X(poll) X(read) X(sendmsg) X(setsockopt)
/* the stateless calls: lowcopy_peek_supported, lowcopy_peek_at, lowcopy_peekv_at, lowcopy_consume */
#define LOWCOPY_SYSCALLS_USE_STATELESS(X) X(clock_gettime) X(close) X(fcntl) X(getsockopt) X(ioctl) X(poll) X(recvfrom) X(recvmsg) X(setsockopt)

#endif /* LOWCOPY_SYSCALLS_H */
