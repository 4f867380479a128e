//! Zerocopy send with a user argument.

use std::mem::{align_of, size_of};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use libc::{c_int, c_void, iovec, msghdr, size_t, ssize_t, EINVAL, ENOTRECOVERABLE};
use lowcopy::zc::{self, Completion, ZcBackend, ZcOptions, ZcStats, ZeroCopySender};
use lowcopy::Flags;

use crate::{
    array, check_size, free_handle, guard, iov_slice, neg, new_handle, out_sized, read_sized,
    ret_size, with_handle, with_handle_ref, write_sized, Guarded,
};

/// Backend:
// doc-copy: zc_backend.auto
/// io_uring `SEND_ZC` where it works on this socket, else `MSG_ZEROCOPY` with the error queue where
/// `SO_ZEROCOPY` works, else plain copies. Sockets with no zerocopy at all (AF_UNIX, MPTCP) get the
/// copy backend. With io_uring the sender belongs to the first thread that sends: a daemon that
/// hands a connection to another thread mid-stream should choose the error queue.
// doc-end
pub const LOWCOPY_ZC_AUTO: u32 = 0;
/// Backend:
// doc-copy: zc_backend.errqueue
/// `SO_ZEROCOPY` + `MSG_ZEROCOPY` (TCP since Linux 4.14, UDP since 5.0); completions read from
/// `MSG_ERRQUEUE` and mapped from the kernel's 32-bit id ranges back to user_data. The sender owns
/// the socket's error queue: other entries on it (ICMP errors with `IP_RECVERR`, `SO_TIMESTAMPING`
/// reports) are read, counted in `errqueue_other` and dropped, and reading an ICMP entry also
/// clears the `SO_ERROR` it set (net/core/skbuff.c `sock_dequeue_err_skb`). An application that
/// needs those entries should use io_uring, whose notifications do not go through the error queue.
// doc-end
pub const LOWCOPY_ZC_ERRQUEUE: u32 = 1;
/// Backend:
// doc-copy: zc_backend.iouring
/// io_uring `IORING_OP_SEND_ZC` (Linux 6.0) / `SENDMSG_ZC` (6.1); user_data comes back in the
/// notification CQE. One ring per thread serves every sender used on that thread (8192 completion
/// entries, made with the thread's first sender, kept until the thread exits): a sender owns no
/// descriptor. The ring is set up with `IORING_SETUP_DEFER_TASKRUN` (6.1) so that notifications
/// never interrupt the thread's other syscalls with `-EINTR`; they are posted during the next send
/// (no syscall of their own). Its price, `SINGLE_ISSUER`: a sender belongs to the first thread that
/// sends on it, waits on it or asks for its completion descriptor (it joins that thread's ring),
/// and calls from any other thread fail with `-EEXIST`.
// doc-end
/// (`LOWCOPY_ZC_RING_CQ_ENTRIES` is the ring's size; the completion descriptor is
/// `lowcopy_zc_pollfd`.)
pub const LOWCOPY_ZC_IO_URING: u32 = 2;
/// Backend:
// doc-copy: zc_backend.copy
/// Plain copying `sendmsg`; the completion is ready when the send returns.
// doc-end
pub const LOWCOPY_ZC_COPY: u32 = 3;

/// `lowcopy_zc_new` flag (`LOWCOPY_ZC_ADAPTIVE_AFTER` is the count):
// doc-copy: zc_options.adaptive
/// Stop asking for zerocopy after 16 consecutive completions that the kernel copied anyway
/// (loopback, veth, devices without scatter-gather), the way msg_zerocopy.rst suggests: a copied
/// "zerocopy" send costs more than a plain copy. Sends in flight are still reaped; later sends are
/// plain copies whose completion is ready at once, flagged copied and fallback. After 4,096 such
/// copies zerocopy is asked for again (the path may have changed), and the next 16 completions
/// decide anew: on a path that copies, 16 copied "zerocopy" sends in every 4,112.
// doc-end
pub const LOWCOPY_ZC_ADAPTIVE: u32 = 1;
/// Consecutive copied completions after which `LOWCOPY_ZC_ADAPTIVE` stops asking for zerocopy.
pub const LOWCOPY_ZC_ADAPTIVE_AFTER: u32 = 16;
/// Completion flag:
// doc-copy: completion.copied
/// the data was copied, not pinned: by the kernel (a deferred copy: loopback, veth, devices without
/// scatter-gather; `SO_EE_CODE_ZEROCOPY_COPIED` or `IORING_NOTIF_USAGE_ZC_COPIED`), or by a plain
/// send.
// doc-end
pub const LOWCOPY_ZC_COPIED: u32 = 1;
/// Completion flag:
// doc-copy: completion.fallback
/// some or all of the request went out as a plain copied send because zerocopy was not possible
/// (`-ENOBUFS`, io_uring `-ENOMEM`, adaptive mode, full id window). The copy backend sets only the
/// copied flag: copying is what it was asked to do.
// doc-end
pub const LOWCOPY_ZC_FALLBACK: u32 = 2;
/// `lowcopy_zc_send_reap` reads the error queue at most once per this many sends, as the
/// kernel's msg_zerocopy selftest does at its best setting (-l 32).
pub const LOWCOPY_ZC_REAP_EVERY: u32 = 32;
/// Requests a sender holds at once by default (`lowcopy_zc_options.max_pending`), in flight or
/// ready but not reaped. Past that, sends return `-EBUSY` until completions are reaped.
pub const LOWCOPY_ZC_MAX_PENDING: u32 = 4096;
/// Requests a sender keeps room for when idle by default (`lowcopy_zc_options.reserve`).
pub const LOWCOPY_ZC_DEFAULT_RESERVE: u32 = 16;
/// The largest `lowcopy_zc_options.max_pending`.
pub const LOWCOPY_ZC_PENDING_LIMIT: u32 = 1 << 20;
/// Completion-queue entries of each thread's io_uring ring (16 bytes each), shared by the
/// thread's senders.
pub const LOWCOPY_ZC_RING_CQ_ENTRIES: u32 = 8192;

/// How `lowcopy_zc_new_opts` sets up a sender. Start from `lowcopy_zc_options_default` and
/// change what you need: a zeroed struct has `max_pending` 0, which is `-EINVAL`. Passed
/// with its `sizeof` (the growth rule): fields past the caller's size take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lowcopy_zc_options {
    /// `LOWCOPY_ZC_AUTO`, `_ERRQUEUE`, `_IO_URING` or `_COPY`.
    pub backend: u32,
    /// 0 or `LOWCOPY_ZC_ADAPTIVE`.
    pub flags: u32,
    /// Requests whose tracking is allocated at creation and kept (32 bytes each plus a
    /// quarter, 8 more each for the error queue); nothing is allocated or freed while the
    /// sender holds no more. Beyond, the
    /// tables grow, and shrink back to this once the sender holds nothing. 0 to
    /// `max_pending`; default `LOWCOPY_ZC_DEFAULT_RESERVE`. Equal to `max_pending`: nothing
    /// is allocated after `lowcopy_zc_new_opts`.
    pub reserve: u64,
    /// Requests held at once at most (past it, sends are `-EBUSY`): 1 to
    /// `LOWCOPY_ZC_PENDING_LIMIT`; default `LOWCOPY_ZC_MAX_PENDING`.
    pub max_pending: u64,
    /// Milliseconds `lowcopy_zc_free` and `lowcopy_zc_close` wait for the completions of sends
    /// in flight before they reset a stream connection (the close policy, at
    /// `lowcopy_zc_close`); 0: the default, `LOWCOPY_ZC_CLOSE_TIMEOUT_MS`. (Since 0.4.)
    pub close_timeout_ms: u64,
}

/// The default close timeout, in milliseconds (`lowcopy_zc_options.close_timeout_ms`).
pub const LOWCOPY_ZC_CLOSE_TIMEOUT_MS: u64 = 1000;

impl Default for lowcopy_zc_options {
    fn default() -> Self {
        let o = ZcOptions::new();
        lowcopy_zc_options {
            backend: o.backend as u32,
            flags: 0,
            reserve: o.reserve as u64,
            max_pending: o.max_pending as u64,
            close_timeout_ms: LOWCOPY_ZC_CLOSE_TIMEOUT_MS,
        }
    }
}

/// Zerocopy sends over one socket with per-send user_data completions (opaque). Created by
/// `lowcopy_zc_new`, released by `lowcopy_zc_free`.
pub struct lowcopy_zc(Guarded<CSender>);
crate::handle!(lowcopy_zc, CSender);

/// The core's sender over a caller-owned fd.
type CSender = ZeroCopySender<BorrowedFd<'static>>;

// Literal values so that cbindgen can write them; they must equal the core's.
const _: () = {
    assert!(LOWCOPY_ZC_ADAPTIVE_AFTER == zc::ADAPTIVE_AFTER);
    assert!(LOWCOPY_ZC_ADAPTIVE == zc::ADAPTIVE);
    assert!(LOWCOPY_ZC_COPIED == zc::COPIED);
    assert!(LOWCOPY_ZC_FALLBACK == zc::FALLBACK);
    assert!(LOWCOPY_ZC_MAX_PENDING as usize == zc::MAX_PENDING);
    assert!(LOWCOPY_ZC_DEFAULT_RESERVE as usize == zc::DEFAULT_RESERVE);
    assert!(LOWCOPY_ZC_PENDING_LIMIT as usize == zc::PENDING_LIMIT);
    assert!(LOWCOPY_ZC_RING_CQ_ENTRIES == zc::RING_CQ_ENTRIES);
    assert!(LOWCOPY_ZC_REAP_EVERY == zc::REAP_EVERY);
    assert!(LOWCOPY_ZC_CLOSE_TIMEOUT_MS as u128 == zc::DEFAULT_CLOSE_TIMEOUT.as_millis());
    assert!(LOWCOPY_ZC_AUTO == ZcBackend::Auto as u32);
    assert!(LOWCOPY_ZC_ERRQUEUE == ZcBackend::ErrQueue as u32);
    assert!(LOWCOPY_ZC_IO_URING == ZcBackend::IoUring as u32);
    assert!(LOWCOPY_ZC_COPY == ZcBackend::Copy as u32);
};

/// Creates a zerocopy sender on the socket `fd` and writes it to `*out`.
///
/// `backend`: `LOWCOPY_ZC_AUTO`, `_ERRQUEUE`, `_IO_URING` or `_COPY`; `flags`: 0 or
/// `LOWCOPY_ZC_ADAPTIVE`; the default reserve and limit (`lowcopy_zc_new_opts` chooses them).
/// Allocates the handle and tables for `LOWCOPY_ZC_DEFAULT_RESERVE` requests (about 1 KiB in
/// all); they grow while more requests are held and shrink back when none is.
// doc-copy: zc_new.kernel
/// An io_uring sender (explicit, or picked by AUTO) makes sure the calling thread has its ring
/// (made on the thread's first sender, kept until the thread exits) but joins a ring only at its
/// first use. The error-queue backend sets `SO_ZEROCOPY` on the socket (left set afterwards; it
/// only matters to `MSG_ZEROCOPY` sends), after a `getsockopt` that finds it unset.
// doc-end
// doc-copy: zc.one_per_socket
/// Create one sender per socket, before any other `MSG_ZEROCOPY` send on it, and keep it for the
/// socket's life: the kernel's id counter cannot be read back, so on the error queue a second
/// sender on the same socket (beside the first, after it was closed, or in a forked child) would
/// number its sends from 0 while the kernel goes on from where the first left off, and take the
/// first sender's notifications for its own: a completion could hand a buffer back before the
/// kernel sent it. So an error-queue sender is refused (`-EBUSY`) on a socket whose `SO_ZEROCOPY`
/// is set already, and AUTO picks io_uring or copies there; the io_uring backend has no such
/// counter.
// doc-end
/// The fd stays the caller's and must stay open until `lowcopy_zc_free`.
///
/// Errors: `-EINVAL` (`out` NULL, unknown backend or flags),
// doc-copy: zc_new.errors
/// `-EBADF`, `-ENOTSOCK`, `-ENOTCONN` (a listening socket: one `getsockopt(SO_ACCEPTCONN)` tells,
/// on stream and seqpacket sockets), `-EOPNOTSUPP` (an explicit zerocopy backend on a socket that
/// has none: AF_UNIX, MPTCP, raw, packet; or io_uring without SEND_ZC), io_uring setup errors for
/// an explicit io_uring backend when the calling thread has no ring yet (`-EPERM` when
/// `kernel.io_uring_disabled` forbids it, `-ENOSYS`, `-ENOMEM`, `-EMFILE`), `-EBUSY` (an explicit
/// error-queue backend on a socket whose `SO_ZEROCOPY` is set already: see the sender's
/// one-per-socket rule).
// doc-end
///
/// Syscalls: getsockopt, setsockopt, io_uring_setup, io_uring_register, mmap, munmap, close, brk,
/// mremap, mprotect, madvise, getrandom, futex.
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_new(
    fd: c_int,
    backend: u32,
    flags: u32,
    out: *mut *mut lowcopy_zc,
) -> c_int {
    let opts = ZcOptions::from_raw(backend, flags);
    let make = |fd| ZeroCopySender::with_options(fd, opts?);
    // SAFETY: `out` is NULL or writable for one pointer per the caller's contract.
    unsafe { new_handle(fd, out, lowcopy_zc, make) }
}

/// Writes the default options to `*out` (`size` = `sizeof(lowcopy_zc_options)`, the growth
/// rule): `LOWCOPY_ZC_AUTO`, no flags, `LOWCOPY_ZC_DEFAULT_RESERVE`,
/// `LOWCOPY_ZC_MAX_PENDING`. Returns 0; `-EINVAL` for NULL `out` or `size` out of range.
///
/// Syscalls: none.
///
/// # Safety
/// `out` must be NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_options_default(
    out: *mut lowcopy_zc_options,
    size: size_t,
) -> c_int {
    // SAFETY: `out` is NULL or writable for `size` bytes per the caller's contract.
    guard(-ENOTRECOVERABLE, || unsafe {
        out_sized(out, size, lowcopy_zc_options::default)
    })
}
crate::versions::default_version!("lowcopy_zc_options_default", "LOWCOPY_0.3");

/// `lowcopy_zc_new` with every option (`opts`, `size` = `sizeof(lowcopy_zc_options)`, the
/// growth rule: fields past the caller's size take their defaults): the backend and flags,
/// and the requests whose tables are allocated now and kept (`reserve`) and held at most
/// (`max_pending`). With `reserve` equal to `max_pending` nothing is allocated after this
/// call, once an io_uring sender joined its ring (its first send, wait or
/// `lowcopy_zc_pollfd`: call that during setup; the thread's first sender makes the ring). Errors
/// as `lowcopy_zc_new`, plus `-EINVAL` for NULL `opts`, `size` out of range, `max_pending` 0 or
/// above `LOWCOPY_ZC_PENDING_LIMIT`, or `reserve` above `max_pending`, `-E2BIG` for a non-zero byte
/// past this library's `sizeof(lowcopy_zc_options)` (a field of a newer library, which this one
/// cannot honour), and `-ENOMEM` for the tables.
///
/// Syscalls: getsockopt, setsockopt, io_uring_setup, io_uring_register, mmap, munmap, close, brk,
/// mremap, mprotect, madvise, getrandom, futex.
///
/// # Safety
/// `opts` must be NULL or readable for `size` bytes; `out` NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_new_opts(
    fd: c_int,
    opts: *const lowcopy_zc_options,
    size: size_t,
    out: *mut *mut lowcopy_zc,
) -> c_int {
    let make = |fd| {
        // SAFETY: `opts` is NULL or readable for `size` bytes per the caller's contract.
        let o = unsafe { read_options(opts, size) }?;
        ZeroCopySender::with_options(fd, o)
    };
    // SAFETY: `out` is NULL or writable for one pointer per the caller's contract.
    unsafe { new_handle(fd, out, lowcopy_zc, make) }
}

/// The caller's `lowcopy_zc_options` (`size` bytes, the growth rule) as the core's options:
/// `EINVAL` for NULL or a size out of range, `E2BIG` for a non-zero byte past ours.
///
/// # Safety
/// `opts` must be NULL or readable for `size` bytes.
unsafe fn read_options(
    opts: *const lowcopy_zc_options,
    size: size_t,
) -> std::io::Result<ZcOptions> {
    let einval = || std::io::Error::from_raw_os_error(EINVAL);
    if opts.is_null() || check_size(size).is_err() {
        return Err(einval());
    }
    // A newer program's fields this library does not know must be 0 (unset): else it asks
    // for something this library cannot do (openat2's rule).
    for i in size_of::<lowcopy_zc_options>()..size {
        // SAFETY: byte i < size of the caller's struct, readable per the contract.
        if unsafe { opts.cast::<u8>().add(i).read() } != 0 {
            return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
        }
    }
    // SAFETY: readable for `size` bytes per the caller's contract; plain integers.
    let o: lowcopy_zc_options = unsafe { read_sized(opts.cast(), size) };
    let (Ok(reserve), Ok(max_pending)) =
        (usize::try_from(o.reserve), usize::try_from(o.max_pending))
    else {
        return Err(einval());
    };
    let close_ms = match o.close_timeout_ms {
        0 => LOWCOPY_ZC_CLOSE_TIMEOUT_MS,
        ms => ms,
    };
    Ok(ZcOptions::from_raw(o.backend, o.flags)?
        .reserve(reserve)
        .max_pending(max_pending)
        .close_timeout(Duration::from_millis(close_ms)))
}
crate::versions::default_version!("lowcopy_zc_new_opts", "LOWCOPY_0.3");

/// Sends `len` bytes from `buf`; returns bytes accepted.
// doc-copy: zc_send.completion
/// Exactly one completion carrying `user_data` follows every send that returned > 0; none follows a
/// failed or zero-byte send.
// doc-end
// doc-copy: zc.buffers
/// The memory of a send must stay allocated and unmodified until its completion is reaped: the
/// kernel may read it until then (a zerocopy send pins the pages and transmits from them, also when
/// TCP retransmits), so whatever the program writes there goes on the wire, and memory freed and
/// reused carries other data (heap contents, pointers) to the peer. A completion means "the buffer
/// may be reused", not "the data was delivered": TCP notifies only after the peer acknowledged, so
/// never block a send on completions.
// doc-end
// doc-copy: zc.borrowed_safety
/// The memory of `bufs` must stay allocated and unmodified from the call until this send's
/// completion is reaped (a zerocopy send pins the pages and the kernel transmits from them until
/// then, also when TCP retransmits: whatever the program writes there goes on the wire, and memory
/// freed and reused carries other data). If the sender is closed first, until the close returns, or
/// for ever for a send the close abandoned (counted in `close_abandoned`).
// doc-end
///
/// `flags`: `MSG_DONTWAIT`, `MSG_MORE`, `MSG_NOSIGNAL`.
// doc-copy: zc_send.kernel
/// `MSG_NOSIGNAL` is always added: a closed connection is `-EPIPE`, never `SIGPIPE`. As `send(2)`:
/// a blocking send on a stream socket accepts everything unless a signal or `SO_SNDTIMEO` stops it
/// part way (then the part sent is returned: send the rest), a non-blocking one (`MSG_DONTWAIT`, or
/// a socket with `O_NONBLOCK`) accepts what fits, a datagram is one send (a zero-length datagram
/// too: it returns 0 and gets no completion). Never waits for a completion. The io_uring backend
/// cancels its request on a signal (returning what went, or `-EINTR`) and does not honour
/// `SO_SNDTIMEO`; io_uring ignores `O_NONBLOCK`, so it reads the flag (one `fcntl`) where a send
/// without `MSG_DONTWAIT` would sleep; after an `-EAGAIN` it asks `poll(POLLOUT)` before queueing
/// the next request (a failed SEND_ZC still posts a notification, which the kernel may hold until
/// the peer acks earlier data), so retrying a full socket costs a poll and no request slot.
/// `-ENOBUFS` from a zerocopy send (optmem or locked-pages limit), and on io_uring `-ENOMEM` (the
/// pages of its sends in flight are charged to `RLIMIT_MEMLOCK` when the thread that made the ring
/// lacks `CAP_IPC_LOCK`), is never returned: completions are collected and the send is retried
/// once, then made by copy (its completion flagged copied and fallback).
// doc-end
///
/// Errors: `-EINVAL` (`z` or `buf` NULL, flags, `len` above `SSIZE_MAX`),
// doc-copy: zc_send.errors
/// `-EBUSY` (as many requests held as the sender's limit, 4096 by default: reap first), `-ENOMEM`
/// (the tables could not grow past the reserve), `-EEXIST` (io_uring backend called from a thread
/// other than the one the sender belongs to), `-EIO` (the thread's io_uring ring was retired after
/// it failed to take a request: every sender on it gets `-EIO`; new senders get a new ring), the
/// ring's setup errors at an io_uring sender's first send on a thread without a ring (`-EMFILE`,
/// `-ENOMEM`; an AUTO sender falls back to the error queue instead), `-EMSGSIZE` (more than
/// `IOV_MAX` iovecs, or a datagram too large), and the socket's own send errors (`-EAGAIN`,
/// `-EINTR`, `-EPIPE`, `-ECONNRESET`, `-EDESTADDRREQ`, ...).
// doc-end
///
/// Syscalls: sendmsg, io_uring_enter, recvmmsg, read, fcntl, getsockopt, setsockopt, poll,
/// epoll_create1, epoll_ctl, epoll_wait, io_uring_setup, io_uring_register, close, brk, mmap,
/// munmap, mremap, mprotect, madvise, getrandom, futex. setsockopt: an AUTO sender falling
/// back to the error queue; io_uring_setup and io_uring_register: the first io_uring use on a
/// thread, which makes its ring; read: the ring's eventfd, once asked for; the memory calls:
/// tables growing past the reserve, and joining a ring.
///
/// # Safety
/// `z` must be NULL or a live sender; `buf` NULL or readable for `len` bytes until the
/// completion.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_send(
    z: *mut lowcopy_zc,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    user_data: u64,
) -> ssize_t {
    if buf.is_null() {
        return -EINVAL as ssize_t;
    }
    let iov = iovec {
        iov_base: buf as *mut c_void,
        iov_len: len,
    };
    // SAFETY: forwarded caller contract.
    unsafe { lowcopy_zc_sendv(z, &iov, 1, flags, user_data) }
}

/// `lowcopy_zc_send` from `iovcnt` iovecs (1 to 1024). Errors as `lowcopy_zc_send`, plus
/// `-EINVAL` for NULL `iov` or `iovcnt <= 0` and `-EMSGSIZE` for `iovcnt > 1024`.
///
/// Syscalls: sendmsg, io_uring_enter, recvmmsg, read, fcntl, getsockopt, setsockopt, poll,
/// epoll_create1, epoll_ctl, epoll_wait, io_uring_setup, io_uring_register, close, brk, mmap,
/// munmap, mremap, mprotect, madvise, getrandom, futex. setsockopt: an AUTO sender falling
/// back to the error queue; io_uring_setup and io_uring_register: the first io_uring use on a
/// thread, which makes its ring; read: the ring's eventfd, once asked for; the memory calls:
/// tables growing past the reserve, and joining a ring.
///
/// # Safety
/// `z` must be NULL or a live sender; `iov` NULL or `iovcnt` iovecs over readable memory that
/// stays unmodified until the completion.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_sendv(
    z: *mut lowcopy_zc,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
    user_data: u64,
) -> ssize_t {
    let run = |z: &mut CSender| {
        // SAFETY: forwarded caller contract.
        let iov = match unsafe { iov_slice(iov, iovcnt) } {
            Ok(v) => v,
            Err(e) => return e as ssize_t,
        };
        let flags = match send_flags(flags) {
            Ok(f) => f,
            Err(e) => return e,
        };
        // SAFETY: the iovecs describe readable memory per the caller's contract.
        ret_size(unsafe { z.send_raw(iov, flags, user_data) })
    };
    // SAFETY: `z` is NULL or a live, unaliased sender per the caller's contract.
    unsafe { with_handle(z, run) }
}

/// `lowcopy_zc_send` from a `struct msghdr`: a destination address (`msg_name`, for UDP),
/// iovecs, and control messages (for example `UDP_SEGMENT`). `msg_flags` is ignored. Errors
/// as `lowcopy_zc_sendv`, plus `-EINVAL` for NULL `msg`, `-EFAULT` for a NULL `msg_name` or
/// `msg_control` with a non-zero length (as `sendmsg(2)`, whatever the backend), and the
/// kernel's address errors:
// doc-copy: zc_send_msg.errors
/// the kernel's answers to the address and control data: `-EAFNOSUPPORT` (an address of the other
/// family), `-EINVAL` (an address of the wrong length, malformed control messages), `-EISCONN` (an
/// address on a connected AF_UNIX stream socket), ... A connected TCP socket ignores the address
/// (the send goes to its peer).
// doc-end
///
/// Syscalls: sendmsg, io_uring_enter, recvmmsg, read, fcntl, getsockopt, setsockopt, poll,
/// epoll_create1, epoll_ctl, epoll_wait, io_uring_setup, io_uring_register, close, brk, mmap,
/// munmap, mremap, mprotect, madvise, getrandom, futex. setsockopt: an AUTO sender falling
/// back to the error queue; io_uring_setup and io_uring_register: the first io_uring use on a
/// thread, which makes its ring; read: the ring's eventfd, once asked for; the memory calls:
/// tables growing past the reserve, and joining a ring.
///
/// # Safety
/// `z` must be NULL or a live sender; `msg` NULL or a valid msghdr whose iovecs stay readable
/// and unmodified until the completion.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_sendmsg(
    z: *mut lowcopy_zc,
    msg: *const msghdr,
    flags: c_int,
    user_data: u64,
) -> ssize_t {
    let run = |z: &mut CSender| {
        // SAFETY: NULL or a valid msghdr per the caller's contract.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return -EINVAL as ssize_t;
        };
        if m.msg_iovlen > c_int::MAX as usize {
            return -libc::EMSGSIZE as ssize_t;
        }
        // NULL or no iovecs: -EINVAL, as for lowcopy_zc_sendv.
        // SAFETY: forwarded caller contract on the msghdr's iovecs.
        if let Err(e) = unsafe { iov_slice(m.msg_iov, m.msg_iovlen as c_int) } {
            return e as ssize_t;
        }
        let flags = match send_flags(flags) {
            Ok(f) => f,
            Err(e) => return e,
        };
        // SAFETY: name, control and iovecs are valid per the caller's contract.
        ret_size(unsafe { z.send_msg_raw(m, flags, user_data) })
    };
    // SAFETY: `z` is NULL or a live, unaliased sender per the caller's contract.
    unsafe { with_handle(z, run) }
}

/// Sends like `lowcopy_zc_sendv`, then writes up to `cap` completions that are ready to
/// `out` (entries of `size` bytes: `sizeof(lowcopy_zc_completion)`, the growth rule) and their
/// count to `*n_out`, in the same call: the "user argument" of the MSG_ZEROCOPY_UARG
/// proposal. The cheapest correct path (`LOWCOPY_ZC_REAP_EVERY` is the 32):
// doc-copy: zc_send_reap.kernel
/// The error-queue backend reads the queue at most once per 32 sends (sooner when the tracking
/// table runs low), so completions may come back up to 32 sends late (a reap gets them sooner);
/// io_uring completions cost no syscall (they are posted by the sends' own `io_uring_enter`).
// doc-end
/// With a `size` other than this library's `sizeof(lowcopy_zc_completion)` at most 64 come
/// back per call. Returns bytes accepted; on error neither `out` nor `*n_out` is written.
///
/// Errors: `-EINVAL` for NULL `n_out`, NULL `out` with `cap > 0`, or `size` out of range;
/// the others as `lowcopy_zc_sendv`, where:
// doc-copy: zc_send_reap.errors
/// As a send, and then no completion is handed out. Once the send went out its bytes are reported
/// whatever happens next: a failure to collect completions after it is left to the next reap or
/// wait, which meet it again.
// doc-end
/// (`*n_out` then counts what was ready.)
///
/// Syscalls: sendmsg, io_uring_enter, recvmmsg, read, fcntl, getsockopt, setsockopt, poll,
/// epoll_create1, epoll_ctl, epoll_wait, io_uring_setup, io_uring_register, close, brk, mmap,
/// munmap, mremap, mprotect, madvise, getrandom, futex. setsockopt: an AUTO sender falling
/// back to the error queue; io_uring_setup and io_uring_register: the first io_uring use on a
/// thread, which makes its ring; read: the ring's eventfd, once asked for; the memory calls:
/// tables growing past the reserve, and joining a ring.
///
/// # Safety
/// As `lowcopy_zc_sendv`; `out` NULL or writable for `cap` entries of `size` bytes; `n_out`
/// NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lowcopy_zc_send_reap(
    z: *mut lowcopy_zc,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
    user_data: u64,
    out: *mut Completion,
    cap: size_t,
    size: size_t,
    n_out: *mut size_t,
) -> ssize_t {
    let run = |z: &mut CSender| {
        if n_out.is_null() {
            return -EINVAL as ssize_t;
        }
        // SAFETY: `out` is NULL or writable for `cap` entries of `size` bytes.
        let mut out = match unsafe { CompletionOut::new(out, cap, size) } {
            Ok(o) => o,
            Err(e) => return e as ssize_t,
        };
        // SAFETY: forwarded caller contract.
        let iov = match unsafe { iov_slice(iov, iovcnt) } {
            Ok(v) => v,
            Err(e) => return e as ssize_t,
        };
        let flags = match send_flags(flags) {
            Ok(f) => f,
            Err(e) => return e,
        };
        // SAFETY: the iovecs describe readable memory per the caller's contract.
        let send = |c: &mut [Completion]| unsafe { z.send_reap_raw(iov, flags, user_data, c) };
        // SAFETY: `out` was checked by CompletionOut::new.
        match unsafe { out.once(send) } {
            Ok((n, k)) => {
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { n_out.write(k) };
                n as ssize_t
            }
            Err(e) => neg(e) as ssize_t,
        }
    };
    // SAFETY: `z` is NULL or a live, unaliased sender per the caller's contract.
    unsafe { with_handle(z, run) }
}
crate::versions::default_version!("lowcopy_zc_send_reap", "LOWCOPY_0.2");

/// Sends each of the `n` buffers `bufs[i]` as a send of its own with `user_data[i]` and its
/// own completion, in order, and writes up to `cap` completions that are ready to `out` (as
/// `lowcopy_zc_send_reap`: entries of `size` bytes) and their count to `*n_out`; the bytes
/// accepted go to `*bytes_out`. Returns the sends made (from `bufs[0]` on; each that accepted
/// bytes has one completion to come), or `-errno` if the first one failed.
// doc-copy: zc_send_batch.kernel
/// Partial progress as `sendmmsg(2)`: the batch stops after a send that took less than its whole
/// buffer (a stream socket that filled up: what follows would skip the rest), or at an error once
/// at least one send went (the error is dropped: a lasting one meets the next call); only an error
/// of the first send is returned. Each send follows the send rules (a blocking stream send waits
/// for room, `MSG_DONTWAIT` does not), one syscall each as today's kernels have no batched zerocopy
/// send that keeps one completion per buffer.
// doc-end
/// The buffers are kept as `lowcopy_zc_sendv` says, each until its own completion.
///
/// Errors: `-EINVAL` for NULL `n_out` or `bytes_out`, NULL `bufs` or `user_data` with `n > 0`,
/// `n` more iovecs than memory can hold, NULL `out` with `cap > 0`, or `size` out of range; the
/// first send's errors as `lowcopy_zc_sendv`.
///
/// Syscalls: sendmsg, io_uring_enter, recvmmsg, read, fcntl, getsockopt, setsockopt, poll,
/// epoll_create1, epoll_ctl, epoll_wait, io_uring_setup, io_uring_register, close, brk, mmap,
/// munmap, mremap, mprotect, madvise, getrandom, futex. setsockopt: an AUTO sender falling
/// back to the error queue; io_uring_setup and io_uring_register: the first io_uring use on a
/// thread, which makes its ring; read: the ring's eventfd, once asked for; the memory calls:
/// tables growing past the reserve, and joining a ring.
///
/// # Safety
/// `bufs` NULL or readable for `n` iovecs, each describing memory kept as `lowcopy_zc_sendv`
/// says; `user_data` NULL or readable for `n` values; `out` NULL or writable for `cap` entries
/// of `size` bytes; `n_out` and `bytes_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn lowcopy_zc_send_batch(
    z: *mut lowcopy_zc,
    bufs: *const iovec,
    n: size_t,
    user_data: *const u64,
    flags: c_int,
    out: *mut Completion,
    cap: size_t,
    size: size_t,
    n_out: *mut size_t,
    bytes_out: *mut size_t,
) -> ssize_t {
    let run = |z: &mut CSender| {
        if n_out.is_null() || bytes_out.is_null() {
            return -EINVAL as ssize_t;
        }
        // SAFETY: the caller's arrays of `n` iovecs and `n` user data.
        let (bufs, uds) = match unsafe { (array(bufs, n), array(user_data, n)) } {
            (Ok(b), Ok(u)) => (b, u),
            (Err(e), _) | (_, Err(e)) => return e as ssize_t,
        };
        // SAFETY: `out` is NULL or writable for `cap` entries of `size` bytes.
        let mut out = match unsafe { CompletionOut::new(out, cap, size) } {
            Ok(o) => o,
            Err(e) => return e as ssize_t,
        };
        let flags = match send_flags(flags) {
            Ok(f) => f,
            Err(e) => return e,
        };
        // SAFETY: the iovecs describe memory kept as the caller's contract says.
        let send = |c: &mut [Completion]| unsafe {
            z.send_batch_raw(bufs, uds, flags, c)
                .map(|b| ((b.sends, b.bytes), b.completions))
        };
        // SAFETY: `out` was checked by CompletionOut::new.
        match unsafe { out.once(send) } {
            Ok(((sends, bytes), k)) => {
                // SAFETY: non-null and writable per the caller's contract.
                unsafe {
                    n_out.write(k);
                    bytes_out.write(bytes);
                }
                sends as ssize_t
            }
            Err(e) => neg(e) as ssize_t,
        }
    };
    // SAFETY: `z` is NULL or a live, unaliased sender per the caller's contract.
    unsafe { with_handle(z, run) }
}
crate::versions::default_version!("lowcopy_zc_send_batch", "LOWCOPY_0.4");

/// A send's C flags as the core's: `MSG_DONTWAIT`, `MSG_MORE`, and `MSG_NOSIGNAL`, which the
/// core always adds; anything else is `-EINVAL`.
fn send_flags(flags: c_int) -> Result<Flags, ssize_t> {
    Flags::from_raw(flags & !libc::MSG_NOSIGNAL).map_err(|e| neg(e) as ssize_t)
}

/// Completions ready per core call when the caller's entries are not this library's size.
const STRIDED_BATCH: usize = 64;

/// A caller's completion array: `cap` entries of `size` bytes, the caller's
/// `sizeof(lowcopy_zc_completion)` (the growth rule).
struct CompletionOut {
    out: *mut u8,
    cap: usize,
    size: usize,
}

impl CompletionOut {
    /// `-EINVAL` for NULL `out` with `cap > 0`, `size` out of range, or an array larger than
    /// memory can hold.
    ///
    /// # Safety
    /// `out` must be NULL or writable for `cap` entries of `size` bytes.
    unsafe fn new(out: *mut Completion, cap: usize, size: usize) -> Result<Self, c_int> {
        check_size(size)?;
        let too_big = cap
            .checked_mul(size)
            .map_or(true, |n| n > isize::MAX as usize);
        if out.is_null() && cap > 0 || too_big {
            return Err(-EINVAL);
        }
        Ok(CompletionOut {
            out: out.cast(),
            cap,
            size,
        })
    }

    /// The array as the core's own type, when the caller's layout is this library's (the
    /// common case: the core writes in place, no copy).
    fn direct(&mut self) -> Option<&mut [Completion]> {
        if self.cap == 0 {
            return Some(&mut []);
        }
        let aligned = self.out as usize % align_of::<Completion>() == 0;
        // SAFETY: writable for `cap` entries of our size (checked by the constructor's
        // caller); aligned; every bit pattern is a valid Completion.
        (self.size == size_of::<Completion>() && aligned)
            .then(|| unsafe { std::slice::from_raw_parts_mut(self.out.cast(), self.cap) })
    }

    /// Writes `done` completions to entries `at..`, each cut or zero-filled to `size`.
    ///
    /// # Safety
    /// `at + done.len() <= cap`.
    unsafe fn store(&self, at: usize, done: &[Completion]) {
        for (i, c) in done.iter().enumerate() {
            // SAFETY: entry at + i < cap lies inside the caller's array.
            unsafe { write_sized(self.out.add((at + i) * self.size), self.size, c) };
        }
    }

    /// One core call `f` that fills a slice of completions and reports `(T, filled)`.
    ///
    /// # Safety
    /// The array must be as the constructor's contract says.
    unsafe fn once<T>(
        &mut self,
        f: impl FnOnce(&mut [Completion]) -> std::io::Result<(T, usize)>,
    ) -> std::io::Result<(T, usize)> {
        // One call site for `f`, so that it is inlined (send_reap's hot path); the bounce
        // buffer is filled only for a strided array.
        let mut space = std::mem::MaybeUninit::<[Completion; STRIDED_BATCH]>::uninit();
        let cap = self.cap.min(STRIDED_BATCH);
        let (out, strided) = match self.direct() {
            Some(all) => (all, false),
            None => (
                &mut space.write([Completion::default(); STRIDED_BATCH])[..cap],
                true,
            ),
        };
        let (t, k) = f(out)?;
        if strided {
            // SAFETY: written above (strided); k <= cap entries.
            unsafe { self.store(0, &space.assume_init_ref()[..k]) };
        }
        Ok((t, k))
    }

    /// Reaps up to `cap` completions from `z`.
    ///
    /// # Safety
    /// The array must be as the constructor's contract says.
    unsafe fn reap(&mut self, z: &mut CSender) -> std::io::Result<usize> {
        if let Some(all) = self.direct() {
            return z.reap(all);
        }
        let mut buf = [Completion::default(); STRIDED_BATCH];
        let mut done = 0;
        while done < self.cap {
            let want = (self.cap - done).min(STRIDED_BATCH);
            let k = z.reap(&mut buf[..want])?;
            // SAFETY: done + k <= cap.
            unsafe { self.store(done, &buf[..k]) };
            done += k;
            if k < want {
                break;
            }
        }
        Ok(done)
    }
}

/// Writes up to `cap` ready completions to `out` (entries of `size` bytes:
/// `sizeof(lowcopy_zc_completion)`, the growth rule); returns how many (0 when none; fewer
/// than `cap` means none is left), the oldest first.
// doc-copy: zc_reap.kernel
/// Never blocks. Collects what the kernel has reported first: one error-queue read while sends are
/// in flight; no syscall for io_uring (unless the kernel deferred notifications or the completion
/// queue overflowed) and copy. On io_uring this also takes in the other senders' notifications that
/// have arrived on the thread's ring, keeping them for those senders.
// doc-end
///
/// Errors: `-EINVAL` (`z` NULL, `out` NULL with `cap > 0`, `size` out of range),
// doc-copy: zc_reap.errors
/// Error-queue read errors; `-EEXIST` on io_uring from a thread other than the one the sender
/// belongs to (once it joined a ring); `-EIO` when its ring was retired.
// doc-end
///
/// Syscalls: recvmmsg, io_uring_enter, read, getsockopt, brk, mmap, munmap, mremap, mprotect,
/// madvise, getrandom, futex. read: the ring's eventfd, once asked for; the memory calls:
/// tables going back to the reserve.
///
/// # Safety
/// `z` must be NULL or a live sender; `out` NULL or writable for `cap` entries of `size`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_reap(
    z: *mut lowcopy_zc,
    out: *mut Completion,
    cap: size_t,
    size: size_t,
) -> ssize_t {
    let run = |z: &mut CSender| {
        // SAFETY: `out` is NULL or writable for `cap` entries of `size` bytes.
        match unsafe { CompletionOut::new(out, cap, size) } {
            // SAFETY: checked by CompletionOut::new.
            Ok(mut out) => ret_size(unsafe { out.reap(z) }),
            Err(e) => e as ssize_t,
        }
    };
    // SAFETY: `z` is NULL or a live, unaliased sender per the caller's contract.
    unsafe { with_handle(z, run) }
}
crate::versions::default_version!("lowcopy_zc_reap", "LOWCOPY_0.2");

/// Waits up to `timeout_ms` milliseconds (-1: no limit; 0: just check) until a completion is
/// ready.
// doc-copy: zc_wait.kernel
/// Returns the number ready to reap; 0 at once when nothing is in flight (it never waits for a
/// notification that cannot come).
// doc-end
///
/// Errors: `-EINVAL` (`z` NULL, `timeout_ms` below -1),
// doc-copy: zc_wait.errors
/// `-ETIMEDOUT` when sends are in flight and none completed in time (TCP notifies only once the
/// peer acknowledged, so a peer that stops reading delays completions without bound); `-EINTR` on a
/// signal (the wait is a poll or `io_uring_enter`, which the kernel never restarts); `-EEXIST`
/// (io_uring backend from a thread other than the one the sender belongs to); `-EIO` (its ring was
/// retired); a pending socket error (`-ECONNRESET`, ...) when the socket reports one instead of a
/// completion; error-queue read errors.
// doc-end
///
/// Syscalls: io_uring_enter, recvmmsg, read, getsockopt, poll, epoll_create1, epoll_ctl,
/// epoll_wait, close, clock_gettime, brk, mmap, munmap, mremap, mprotect, madvise, getrandom,
/// futex. read: the ring's eventfd, once asked for; the memory calls: tables going back to
/// the reserve.
///
/// # Safety
/// `z` must be NULL or a live sender.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_wait(z: *mut lowcopy_zc, timeout_ms: c_int) -> c_int {
    let run = |z: &mut CSender| match wait_timeout(timeout_ms).and_then(|t| z.wait(t)) {
        Ok(n) => n.min(c_int::MAX as usize) as c_int,
        Err(e) => neg(e),
    };
    // SAFETY: `z` is NULL or a live, unaliased sender per the caller's contract.
    unsafe { with_handle(z, run) }
}

/// `timeout_ms` as the core's time: -1 no limit, 0 just check, below -1 `EINVAL`.
fn wait_timeout(timeout_ms: c_int) -> std::io::Result<Option<Duration>> {
    match timeout_ms {
        -1 => Ok(None),
        t if t < -1 => Err(std::io::Error::from_raw_os_error(EINVAL)),
        t => Ok(Some(Duration::from_millis(t as u64))),
    }
}

// doc-copy: zc_inflight
/// Sends that accepted bytes and whose completion has not arrived yet (ready but unreaped
/// completions are not counted; failed sends never are).
// doc-end
/// 0 for NULL and for a sender on which a call panicked.
///
/// Syscalls: none.
///
/// # Safety
/// `z` must be NULL or a live sender.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_inflight(z: *const lowcopy_zc) -> size_t {
    // SAFETY: NULL or a live sender per the caller's contract.
    unsafe { with_handle_ref(z, 0, 0, |z: &CSender| z.inflight()) }
}

// doc-copy: zc_pollfd.kernel
/// The descriptor to watch (poll, epoll) for completions: the socket for the error queue
/// (`-EPOLLERR` is always reported), for io_uring an eventfd of the thread's ring (`-EPOLLIN`).
/// Copy completions are ready when the send returns; for the copy backend this is the socket, which
/// never needs watching.
///
/// io_uring: the ring is the calling thread's, shared by every sender used on that thread; asking
/// for this joins the sender to that thread's ring if it joined none yet (the sender then belongs
/// to this thread). The first call on a thread makes an eventfd and registers it with the ring
/// (`IORING_REGISTER_EVENTFD`; one more descriptor per thread, and from then on a reap, wait or
/// collect resets it with one `read` if the ring was entered since the last reset or new
/// notifications show, so that reaping all of a thread's senders after a wakeup costs one or two
/// `read`s, not one each): the kernel signals it when it queues a notification for any sender of
/// the thread. (The ring's own descriptor does not do: with `DEFER_TASKRUN` notifications wait as
/// task work, which epoll does not report.) Any call on one of the thread's senders that enters or
/// drains the ring (send, reap, wait) takes every notification in and keeps the others' for them,
/// where the eventfd no longer shows them. So an event loop reaps every sender of the thread that
/// has sends in flight after a wakeup and before it sleeps again, not only the one it was woken
/// for. The descriptor stays open while any sender joined to the ring exists; lowcopy closes it,
/// never the caller. If the calling thread cannot have a ring (its setup fails: `-EMFILE`,
/// `-ENOMEM`), this is the socket, and the sender never uses a ring: an AUTO sender falls back to
/// the error queue, an io_uring one fails every send with that error.
// doc-end
///
/// `-EINVAL` for NULL. Add it to epoll once per thread; the senders with sends in flight are
/// those with a non-zero `lowcopy_zc_inflight`. lowcopy closes it when the thread has exited and
/// no sender joined to its ring is left, or at `lowcopy_zc_ring_close`: never close it yourself.
///
/// Syscalls: io_uring_setup, io_uring_register, eventfd2, close, brk, mmap, munmap, mremap,
/// mprotect, madvise, getrandom, futex. Only an io_uring sender makes any: joining a ring (the
/// thread's first io_uring use makes it) and the ring's eventfd (the thread's first call).
///
/// # Safety
/// `z` must be NULL or a live sender.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_pollfd(z: *const lowcopy_zc) -> c_int {
    let fd = |z: &CSender| z.completion_fd().as_raw_fd();
    // SAFETY: NULL or a live sender per the caller's contract.
    unsafe { with_handle_ref(z, -EINVAL, -ENOTRECOVERABLE, fd) }
}

/// Closes the calling thread's io_uring ring now rather than when the thread exits, if no
/// sender is joined to it (every sender that sent, waited or gave its `lowcopy_zc_pollfd` on
/// this thread was freed). Returns 1 when it closed it, 0 when the thread had none.
// doc-copy: close_thread_ring.kernel
/// The thread's next io_uring sender makes a new ring. Senders released with sends in flight do not
/// count: the kernel finishes those on its own (pages stay pinned until then). Closing a ring makes
/// the kernel run task work on this thread (io_uring/io_uring.c `io_ring_exit_work`), so its next
/// blocking syscall may return `-EINTR` once.
// doc-end
///
/// Errors:
// doc-copy: close_thread_ring.errors
/// `-EBUSY` while a sender is joined to the ring (one that sent, waited or gave its completion
/// descriptor on this thread and is not yet released).
// doc-end
///
/// Syscalls: munmap, close, brk, madvise, futex.
#[no_mangle]
pub extern "C" fn lowcopy_zc_ring_close() -> c_int {
    crate::guard_held(-ENOTRECOVERABLE, || match zc::close_thread_ring() {
        Ok(closed) => closed as c_int,
        Err(e) => neg(e),
    })
}
crate::versions::default_version!("lowcopy_zc_ring_close", "LOWCOPY_0.3");

/// The backend in use (`LOWCOPY_ZC_ERRQUEUE`, `_IO_URING` or `_COPY`, never AUTO);
/// `LOWCOPY_ZC_AUTO` (0) for NULL and for a sender on which a call panicked.
///
/// Syscalls: none.
///
/// # Safety
/// `z` must be NULL or a live sender.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_backend(z: *const lowcopy_zc) -> u32 {
    // SAFETY: NULL or a live sender per the caller's contract.
    unsafe { with_handle_ref(z, 0, 0, |z: &CSender| z.backend() as u32) }
}

/// Writes the sender's counters to `*out` (`size` = `sizeof(lowcopy_zc_send_stats)`, the
/// growth rule); returns 0.
///
/// Errors: `-EINVAL` (`z` or `out` NULL, `size` out of range).
///
/// Syscalls: none.
///
/// # Safety
/// `z` must be NULL or a live sender; `out` NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_stats(
    z: *const lowcopy_zc,
    out: *mut ZcStats,
    size: size_t,
) -> c_int {
    // SAFETY: `out` is NULL or writable for `size` bytes per the caller's contract.
    let run = |z: &CSender| unsafe { out_sized(out, size, || z.stats()) };
    // SAFETY: NULL or a live sender per the caller's contract.
    unsafe { with_handle_ref(z, -EINVAL, -ENOTRECOVERABLE, run) }
}
crate::versions::default_version!("lowcopy_zc_stats", "LOWCOPY_0.2");

/// Closes and releases a sender, by the close policy (`lowcopy_zc_close` without its counters).
// doc-copy: zc_close.policy
/// Closing never lets the kernel read memory the program has given up. The sender first waits for
/// the completions of its sends in flight, up to its close timeout (1 s by default). If some are
/// still missing (TCP notifies only once the peer acknowledged: a peer that stopped reading holds
/// them) and the socket is a stream, it resets the connection (`connect` with `AF_UNSPEC`: the
/// kernel sends a RST and purges its send queues, releasing their pages; the peer sees a reset,
/// never wrong bytes) and waits up to 1 s more for the completions that follow. A datagram socket
/// is not reset: its sends complete once the device has sent them. Sends still in flight after that
/// are abandoned: the memory of each stays in use by the kernel for ever (an owned buffer is
/// leaked, never freed). The counters say what happened: `close_completed`, `close_resets`,
/// `close_abandoned`. An io_uring sender closed on another thread than the one whose ring it joined
/// cannot wait: it resets a stream at once and abandons what is still in flight. Closing waits in
/// `poll` or `io_uring_enter`; a signal does not cut it short.
// doc-end
// doc-copy: zc_drop.kernel
/// An io_uring sender leaves its thread's ring open (the ring outlives its senders); the
/// notifications still to come for an abandoned send are counted off there and delivered to nobody.
/// A ring is closed when its thread exits and no sender joined to it is left (then the kernel runs
/// task work on the closing thread, io_uring/io_uring.c `io_ring_exit_work`, so that thread's next
/// blocking syscall may return `-EINTR` once).
// doc-end
/// Returns the number of sends the close abandoned (0 unless completions did not come even
/// after a reset, or the sender was released on another thread than its io_uring ring's): the
/// memory of those must stay valid for ever. Completions ready but not reaped are dropped. Does
/// not close the fd. NULL: 0. A sender on which a call panicked is released at once and gives
/// `-ENOTRECOVERABLE`: treat every buffer it was given as in use by the kernel for ever.
///
/// Syscalls: io_uring_enter, recvmmsg, read, getsockopt, poll, epoll_create1, epoll_ctl,
/// epoll_wait, connect, close, clock_gettime, munmap, brk, madvise, futex, mmap,
/// mremap, mprotect, getrandom.
///
/// # Safety
/// `z` must be NULL or a sender from `lowcopy_zc_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_free(z: *mut lowcopy_zc) -> c_int {
    // SAFETY: NULL or a sender from lowcopy_zc_new not yet freed, per the caller.
    unsafe { close_handle(z, std::ptr::null_mut(), 0, 0) }
}

/// Closes and releases a sender by the close policy, and writes its final counters to `*out`
/// (`size` bytes, the growth rule; `out` may be NULL with `size` 0): `close_completed`,
/// `close_resets` and `close_abandoned` say what the policy did.
// doc-copy: zc_close.policy
/// Closing never lets the kernel read memory the program has given up. The sender first waits for
/// the completions of its sends in flight, up to its close timeout (1 s by default). If some are
/// still missing (TCP notifies only once the peer acknowledged: a peer that stopped reading holds
/// them) and the socket is a stream, it resets the connection (`connect` with `AF_UNSPEC`: the
/// kernel sends a RST and purges its send queues, releasing their pages; the peer sees a reset,
/// never wrong bytes) and waits up to 1 s more for the completions that follow. A datagram socket
/// is not reset: its sends complete once the device has sent them. Sends still in flight after that
/// are abandoned: the memory of each stays in use by the kernel for ever (an owned buffer is
/// leaked, never freed). The counters say what happened: `close_completed`, `close_resets`,
/// `close_abandoned`. An io_uring sender closed on another thread than the one whose ring it joined
/// cannot wait: it resets a stream at once and abandons what is still in flight. Closing waits in
/// `poll` or `io_uring_enter`; a signal does not cut it short.
// doc-end
///
/// Returns the number of sends abandoned (as `lowcopy_zc_free`), or `-EINVAL` for a NULL `z`
/// or a bad `size` (the sender is released all the same when `z` is not NULL).
///
/// Syscalls: io_uring_enter, recvmmsg, read, getsockopt, poll, epoll_create1, epoll_ctl,
/// epoll_wait, connect, close, clock_gettime, munmap, brk, madvise, futex, mmap,
/// mremap, mprotect, getrandom.
///
/// # Safety
/// `z` must be NULL or a sender from `lowcopy_zc_new` not yet freed; `out` NULL or writable
/// for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zc_close(
    z: *mut lowcopy_zc,
    out: *mut ZcStats,
    size: size_t,
) -> c_int {
    // SAFETY: forwarded caller guarantees.
    unsafe { close_handle(z, out, size, -EINVAL) }
}

/// `lowcopy_zc_close`'s work; `null`: the answer for a NULL `z`.
///
/// # Safety
/// As `lowcopy_zc_close`.
unsafe fn close_handle(z: *mut lowcopy_zc, out: *mut ZcStats, size: size_t, null: c_int) -> c_int {
    let before_drop = |z: &mut CSender| {
        let st = z.close_in_place(z.close_timeout(), |_, _| {});
        let abandoned = st.close_abandoned.min(c_int::MAX as u64) as c_int;
        if out.is_null() && size == 0 {
            return abandoned;
        }
        // SAFETY: `out` is NULL or writable for `size` bytes per the caller's contract.
        match unsafe { out_sized(out, size, || st) } {
            0 => abandoned,
            e => e,
        }
    };
    // SAFETY: NULL or a sender from lowcopy_zc_new not yet freed, per the caller.
    unsafe { free_handle(z, null, -ENOTRECOVERABLE, before_drop) }
}
crate::versions::default_version!("lowcopy_zc_close", "LOWCOPY_0.4");
