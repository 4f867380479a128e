//! Low-water-mark receive and zero-copy receive: `SO_RCVLOWAT` + poll,
//! and `mmap` + `TCP_ZEROCOPY_RECEIVE` with a copy path.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use libc::{c_int, c_void, size_t, ssize_t, EINVAL, ENOTRECOVERABLE};
use lowcopy::{RecvStats, ZcrxStats, ZeroCopyReceiver};

use crate::{
    borrow, check_size, free_handle, guard, neg, new_handle, out_sized, read_sized, ret_size,
    with_handle, with_handle_ref, write_sized, Guarded,
};

/// Sets `SO_RCVLOWAT` to `bytes` and writes the value the kernel keeps to `*effective`;
/// returns 0.
///
// doc-copy: set_rcvlowat.kernel
/// TCP caps it at `tcp_rmem[2] / 2` (16 MiB with the default 32 MiB maximum), or at half of
/// `SO_RCVBUF` as read back (the kernel doubles what was set) once the application locked the
/// receive buffer with `SO_RCVBUF`; values above `INT_MAX` are passed as `INT_MAX` and capped the
/// same way; 0 is kept as 1. Setting it on TCP also grows an unlocked receive buffer to about twice
/// the mark (never shrunk again) and, when it lowers the mark, wakes pollers whose data now
/// suffices.
///
/// On a listening TCP socket the value is reported the same way and copied into each connection
/// when its handshake completes (not at `accept`): connections already waiting in the accept queue
/// keep the old value. tcp_mmap sets its mark this way. On kernels before 21b29e74ffe5 (Oct 2025) a
/// large inherited mark also clamped the window scale the listener advertised, so there prefer
/// setting it after `accept`. AF_UNIX and UDP store the value, but their poll ignores it.
// doc-end
///
/// Errors: `-EINVAL` (`effective` NULL),
// doc-copy: set_rcvlowat.errors
/// `-EBADF`, `-ENOTSOCK`, and other `setsockopt`/`getsockopt` errors.
// doc-end
///
/// Syscalls: setsockopt, getsockopt.
///
/// # Safety
/// `effective` must be NULL or writable for one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_set_rcvlowat(
    fd: c_int,
    bytes: size_t,
    effective: *mut size_t,
) -> c_int {
    guard(-ENOTRECOVERABLE, || {
        if effective.is_null() {
            return -EINVAL;
        }
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e,
        };
        match lowcopy::set_rcvlowat(fd, bytes) {
            Ok(v) => {
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { effective.write(v) };
                0
            }
            Err(e) => neg(e),
        }
    })
}

/// Receives at least `min` bytes into `buf` with one wakeup where the kernel allows
/// (`SO_RCVLOWAT` + poll), then whatever else is queued, up to `len`; returns bytes received.
///
/// - `min` is clamped to 1..`len`.
/// - `timeout_ms`: -1 waits without limit; 0 does not wait (returns what is queued now, even
///   fewer than `min`, or `-ETIMEDOUT` when nothing is); > 0 waits at most that long. The fd's
///   `O_NONBLOCK` and `SO_RCVTIMEO` play no part.
///
/// Returns (the buffer is `buf`, `len` bytes):
// doc-copy: recv_atleast.returns
/// - `min` to the buffer's length in bytes when `min` bytes came in time;
/// - fewer than `min` (but more than 0) when the peer shut down after them, when time ran out after
///   they came, when the connection was reset after them (the error is left pending and the next
///   call reports it), when a signal arrived after them, or on a datagram socket when the next
///   datagram does not fit in what is left of the buffer;
/// - 0 at end of stream with nothing received;
/// - `-ETIMEDOUT` when nothing came in time.
// doc-end
///
// doc-copy: recv_atleast.kernel
/// TCP and MPTCP: the socket's `SO_RCVLOWAT` is set to the bytes still missing while the call waits
/// (capped by the kernel as in `lowcopy_set_rcvlowat`) and restored to the value found on entry
/// before it returns: no change when the socket already holds the mark the call needs, so setting
/// the mark once with `lowcopy_set_rcvlowat` saves two syscalls per call. An unlocked receive
/// buffer grows to about twice the mark and stays so. Early wakeups below the mark (memory
/// pressure, a window down to one MSS) are read and waited past, never lost. Never a blocking
/// `recv`, so never the trap where a read shorter than the mark sleeps until the mark.
///
/// AF_UNIX stream and other streams: their poll ignores `SO_RCVLOWAT`, so the call wakes on every
/// arrival and loops until `min`; the result is the same, the wakeups are not saved.
///
/// Datagram sockets (UDP, AF_UNIX datagram and seqpacket): whole datagrams are appended to the
/// buffer while they fit, until `min` bytes; a datagram is never truncated. `-EMSGSIZE` when the
/// first datagram is larger than the buffer (it stays queued). Zero-length datagrams are consumed
/// and add nothing.
// doc-end
///
// doc-copy: recv_atleast.errqueue
/// The error queue: the call never reads it. Its entries (the completion notifications of a
/// zero-copy sender on the same socket, ICMP reports queued with `IP_RECVERR`, `SO_TIMESTAMPING`
/// reports) stay for their owner, and neither wake the call nor end it: while one is queued, `poll`
/// reports `POLLERR` at once on every call, so the call then sleeps on an edge-triggered epoll
/// instance of its own (one descriptor for the call's duration, 2-3 syscalls more per wait) that
/// wakes only for new events. A socket error (`SO_ERROR`: a reset, an ICMP error with `IP_RECVERR`)
/// is returned as `recv` returns it, at once when nothing was received; one that arrives after some
/// bytes is left for the next call, and ends this one early only when the connection is reset or
/// hung up.
// doc-end
///
/// Errors: `-EINVAL` (`buf` NULL, `len` 0 or above `SSIZE_MAX`, `timeout_ms` < -1),
// doc-copy: recv_atleast.errors
/// `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a stream, datagram or seqpacket socket), `-ETIMEDOUT`
/// (nothing came in time), `-EMSGSIZE` (the first datagram is larger than the buffer; it stays
/// queued), `-EINTR` (a signal before any byte), and the socket's own errors (`-ECONNRESET`, ...).
// doc-end
///
/// Syscalls: getsockopt, setsockopt, recvfrom, poll, epoll_create1, epoll_ctl, epoll_wait, close,
/// clock_gettime.
///
/// # Safety
/// `buf` must be NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_recv_atleast(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    min: size_t,
    timeout_ms: c_int,
) -> ssize_t {
    // SAFETY: forwarded caller contract.
    unsafe { recv_atleast(fd, buf, len, min, timeout_ms, &mut RecvStats::default()) }
}

/// `lowcopy_recv_atleast`, adding what the call did to `*stats` (wakeups, early wakeups,
/// syscalls...). `size` is `sizeof(lowcopy_recv_stats)` (the growth rule; the counters past
/// this library's struct are left as they are). Errors as `lowcopy_recv_atleast`, plus
/// `-EINVAL` for a NULL `stats` or `size` out of range.
///
/// Syscalls: getsockopt, setsockopt, recvfrom, poll, epoll_create1, epoll_ctl, epoll_wait, close,
/// clock_gettime.
///
/// # Safety
/// `buf` must be NULL or writable for `len` bytes; `stats` NULL or readable and writable for
/// `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_recv_atleast_stats(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    min: size_t,
    timeout_ms: c_int,
    stats: *mut RecvStats,
    size: size_t,
) -> ssize_t {
    if stats.is_null() || check_size(size).is_err() {
        return -EINVAL as ssize_t;
    }
    // SAFETY: readable for `size` bytes per the caller's contract; RecvStats is plain u64s.
    let mut s: RecvStats = unsafe { read_sized(stats.cast(), size) };
    // SAFETY: forwarded caller contract.
    let r = unsafe { recv_atleast(fd, buf, len, min, timeout_ms, &mut s) };
    let ours = std::mem::size_of::<RecvStats>();
    // SAFETY: writable for `size` bytes; only the caller's part of our struct is written.
    unsafe { write_sized(stats.cast(), size.min(ours), &s) };
    r
}
crate::versions::default_version!("lowcopy_recv_atleast_stats", "LOWCOPY_0.2");

/// The body of both receive calls, with the core's counters.
///
/// # Safety
/// `buf` must be NULL or writable for `len` bytes.
unsafe fn recv_atleast(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    min: size_t,
    timeout_ms: c_int,
    stats: &mut RecvStats,
) -> ssize_t {
    guard(-ENOTRECOVERABLE as ssize_t, || {
        if buf.is_null() || timeout_ms < -1 {
            return -EINVAL as ssize_t;
        }
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e as ssize_t,
        };
        let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        // SAFETY: `buf` is writable for `len` bytes per the caller's contract; the core
        // refuses `len` above isize::MAX before touching it.
        ret_size(unsafe {
            lowcopy::lowat::recv_atleast_raw(fd, buf.cast(), len, min, timeout, stats)
        })
    })
}

/// A receiver of `min`-byte chunks over one socket (opaque): `lowcopy_recv_atleast` that
/// learns the socket once. Created by `lowcopy_receiver_new`, released by
/// `lowcopy_receiver_free`.
pub struct lowcopy_receiver(Guarded<CLowatReceiver>);
crate::handle!(lowcopy_receiver, CLowatReceiver);

/// The core's receiver over a caller-owned fd.
type CLowatReceiver = lowcopy::Receiver<BorrowedFd<'static>>;

/// Creates a receiver over `fd` and writes it to `*out`: learns the socket's type and
/// protocol, and on TCP its `SO_RCVLOWAT` (2 or 3 `getsockopt`), once. Allocates the handle
/// (one small heap block).
///
// doc-copy: receiver.kernel
/// The stateless receive asks the kernel on every call what kind of socket it has (2 `getsockopt`)
/// and what mark it holds (1 more), and puts the mark back when it returns. A receiver does that
/// once, when it is made, and leaves the mark of its last call in place between calls, so a loop
/// receiving chunks of the same size makes exactly the raw loop's syscalls per chunk: `poll` and
/// `recv` (one `setsockopt` more when `min` changes). Releasing it puts back the mark found at
/// creation.
///
/// Results, errors and the behaviour of each call (early wakeups, end of stream, datagrams, the
/// error queue) are those of the stateless receive. While the receiver lives, the socket's
/// `SO_RCVLOWAT` is the bytes its last call still missed when it returned (usually `min`): a poll
/// or epoll of the caller's on the same socket sees that mark. After it is made it allocates
/// nothing; the first wait that meets a non-empty error queue makes an epoll instance (one
/// descriptor), kept until the receiver is released.
// doc-end
/// The stateless receive is `lowcopy_recv_atleast`; the release, `lowcopy_receiver_free`.
/// `fd` stays the caller's: it must stay open until the receiver is freed, and is never
/// closed by lowcopy.
///
/// Errors: `-EINVAL` (`out` NULL), `-ENOMEM`,
// doc-copy: receiver_new.errors
/// `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a stream, datagram or seqpacket socket).
// doc-end
///
/// Syscalls: getsockopt, brk, mmap, munmap, mremap, mprotect, madvise, getrandom, futex.
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_receiver_new(fd: c_int, out: *mut *mut lowcopy_receiver) -> c_int {
    // SAFETY: `out` is NULL or writable for one pointer per the caller's contract.
    unsafe { new_handle(fd, out, lowcopy_receiver, lowcopy::Receiver::new) }
}
crate::versions::default_version!("lowcopy_receiver_new", "LOWCOPY_0.2");

/// `lowcopy_recv_atleast` on the receiver's socket (same arguments, results and errors),
/// without learning the socket again and without putting its mark back after the call.
///
/// Syscalls: getsockopt, setsockopt, recvfrom, poll, epoll_create1, epoll_ctl, epoll_wait, close,
/// clock_gettime.
///
/// # Safety
/// `r` must be NULL or a live receiver not used by another thread meanwhile; `buf` NULL or
/// writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_receiver_recv(
    r: *mut lowcopy_receiver,
    buf: *mut c_void,
    len: size_t,
    min: size_t,
    timeout_ms: c_int,
) -> ssize_t {
    let run = |r: &mut CLowatReceiver| {
        if buf.is_null() || timeout_ms < -1 {
            return -EINVAL as ssize_t;
        }
        let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        // SAFETY: `buf` is writable for `len` bytes per the caller's contract; the core
        // refuses `len` above isize::MAX before touching it.
        ret_size(unsafe { r.recv_atleast_raw(buf.cast(), len, min, timeout) })
    };
    // SAFETY: `r` is NULL or a live, unaliased receiver per the caller's contract.
    unsafe { with_handle(r, run) }
}
crate::versions::default_version!("lowcopy_receiver_recv", "LOWCOPY_0.2");

/// Writes the receiver's counters (since `lowcopy_receiver_new`, whose syscalls count) to
/// `*out` (`size` = `sizeof(lowcopy_recv_stats)`, the growth rule); returns 0.
///
/// Errors: `-EINVAL` (`r` or `out` NULL, `size` out of range).
///
/// Syscalls: none.
///
/// # Safety
/// `r` must be NULL or a live receiver; `out` NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_receiver_stats(
    r: *const lowcopy_receiver,
    out: *mut RecvStats,
    size: size_t,
) -> c_int {
    // SAFETY: `out` is NULL or writable for `size` bytes per the caller's contract.
    let run = |r: &CLowatReceiver| unsafe { out_sized(out, size, || r.stats()) };
    // SAFETY: NULL or a live receiver per the caller's contract.
    unsafe { with_handle_ref(r, -EINVAL, -ENOTRECOVERABLE, run) }
}
crate::versions::default_version!("lowcopy_receiver_stats", "LOWCOPY_0.2");

/// Puts back the socket's `SO_RCVLOWAT` found by `lowcopy_receiver_new` (one `setsockopt`
/// when it differs) and frees the receiver. NULL is a no-op. `fd` is not closed. A receiver
/// on which a call panicked is released the same way.
///
/// Syscalls: setsockopt, close, brk, munmap, madvise, futex, mmap, mremap, mprotect, getrandom.
///
/// # Safety
/// `r` must be NULL or a live receiver, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_receiver_free(r: *mut lowcopy_receiver) {
    // SAFETY: NULL or a receiver from lowcopy_receiver_new not yet freed, per the caller.
    unsafe { free_handle(r, (), (), |_| ()) }
}
crate::versions::default_version!("lowcopy_receiver_free", "LOWCOPY_0.2");

/// A zero-copy receiver over one TCP socket (opaque): a read-only mapping of the socket and a
/// copy buffer. Created by `lowcopy_zcrx_new`, released by `lowcopy_zcrx_free`.
pub struct lowcopy_zcrx(Guarded<CReceiver>);
crate::handle!(lowcopy_zcrx, CReceiver);

/// The core's zero-copy receiver over a caller-owned fd.
type CReceiver = ZeroCopyReceiver<BorrowedFd<'static>>;

/// One piece of the stream from `lowcopy_zcrx_recv`, valid until the next call on the same
/// receiver (or its free): reading `data` after that may fault (the pages are unmapped).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lowcopy_zcrx_chunk {
    /// The bytes, in stream order right after the previous chunk's; NULL at end of stream.
    pub data: *const u8,
    /// Number of bytes at `data`; 0 at end of stream.
    pub len: size_t,
    /// 1 when `data` are pages mapped from the socket (read-only memory), 0 when they were
    /// copied into the receiver's copy buffer.
    pub mapped: u32,
}

/// Creates a zero-copy receiver over the connected TCP socket `fd` and writes it to `*out`.
///
/// Maps a `window`-byte read-only window of the socket and allocates, on the heap, the handle
/// (about 210 bytes) and the copy buffer. The release is `lowcopy_zcrx_free`.
// doc-copy: zcrx_new.memory
/// `window` is rounded up to a multiple of the page size (W); it must be 1 byte to 1 GiB. Memory,
/// all of it made here: the copy buffer, one heap block of W bytes clamped to 64 KiB ..= 1 MiB (256
/// KiB for a 256 KiB window), never written by lowcopy, so that only the pages the kernel copies
/// into become resident; and W bytes of address space for the window (a read-only mapping of the
/// socket: the pages it shows are the socket's receive buffer, not memory of its own). Nothing is
/// allocated afterwards; the first wait that meets a busy error queue makes an epoll instance (a
/// descriptor) kept until the receiver is released.
// doc-end
///
// doc-copy: zcrx_new.rcvlowat
/// Set the receive low-water mark (`lowcopy_set_rcvlowat`) to about the window's size so that each
/// wakeup finds a window's worth of bytes. Pages map only where the kernel holds whole,
/// page-aligned payload pages (a header-splitting NIC; on loopback, a page-aligned `MSG_ZEROCOPY`
/// sender); every other byte arrives by copy.
// doc-end
///
// doc-copy: zcrx_new.probe
/// The first receiver of the process probes which size of `struct tcp_zerocopy_receive` the kernel
/// accepts (64 bytes since 5.12, 16 exactly on 4.18-5.6) with a zero-length request on the socket,
/// which maps and consumes nothing; the answer is cached.
// doc-end
// doc-copy: zcrx.exclusive
/// Nobody else may read from the socket meanwhile (a peeker may peek: the receiver keeps its
/// `SO_PEEK_OFF` right).
// doc-end
///
/// Errors: `-EINVAL` also for `out` NULL;
// doc-copy: zcrx_new.errors
/// The socket is checked before the window: `-EINVAL` (`window` 0 or above 1 GiB), `-EBADF`,
/// `-ENOTSOCK`, `-EOPNOTSUPP` (not TCP over IPv4/IPv6, e.g. UDP, AF_UNIX, MPTCP; or a kernel
/// without `TCP_ZEROCOPY_RECEIVE`), `-ENOTCONN` (not connected: listening, never connected, still
/// connecting, or reset), `-ENOMEM`, and `mmap` errors.
// doc-end
///
/// Syscalls: getsockopt, getpeername, mmap, munmap, brk, mremap, mprotect, madvise, getrandom,
/// futex.
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_new(
    fd: c_int,
    window: size_t,
    out: *mut *mut lowcopy_zcrx,
) -> c_int {
    let make = |fd| ZeroCopyReceiver::new(fd, window);
    // SAFETY: `out` is NULL or writable for one pointer per the caller's contract.
    unsafe { new_handle(fd, out, lowcopy_zcrx, make) }
}

/// Receives the next piece of the stream into `*out` (`size` = `sizeof(lowcopy_zcrx_chunk)`,
/// the growth rule): pages mapped from the socket, or bytes copied (stragglers the kernel
/// cannot map, and `recv_skip_hint` bytes), in stream order.
/// Returns the chunk's length (> 0); 0 at end of stream (`*out` is then `{NULL, 0, 0}`, and
/// later calls return 0 again).
// doc-copy: zcrx_recv.release
/// The chunk stays valid until the next call on the receiver (or its release): the pages of a
/// mapped chunk are released (`madvise(MADV_DONTNEED)`) at the start of the next call, before the
/// window is reused, and the copy buffer is reused.
// doc-end
///
/// `flags`: 0 or `MSG_DONTWAIT`.
// doc-copy: zcrx_recv.wait
/// Blocking (no `MSG_DONTWAIT`, fd without `O_NONBLOCK`), like a blocking `recv` with
/// `SO_RCVLOWAT`: once the bytes queued at the last wakeup are all delivered, the receiver waits in
/// `poll` until the socket's mark is met, then returns them chunk by chunk without waiting again
/// (one wakeup per mark's worth, however many chunks it takes; the kernel may wake below the mark
/// under memory pressure: those bytes are returned, not waited past). The socket's `SO_RCVTIMEO`
/// (read when a wait starts) bounds the wait; when it runs out the bytes queued below the mark are
/// returned, or `-EAGAIN` when there are none, as `recv` does. Non-blocking (`MSG_DONTWAIT` or
/// `O_NONBLOCK`): whatever is queued, mark or not (the caller's poll/epoll honoured the mark), or
/// `-EAGAIN`.
// doc-end
///
// doc-copy: zcrx_recv.errqueue
/// Entries on the socket's error queue (zerocopy notifications of a sender on the same socket,
/// `IP_RECVERR` or `SO_TIMESTAMPING` reports) are never read and never end a wait: a blocking
/// receive sleeps past them (as `lowcopy_recv_atleast` does), a non-blocking one returns `-EAGAIN`
/// when nothing else is there.
// doc-end
///
// doc-copy: zcrx_recv.peek_off
/// `SO_PEEK_OFF`: reads lower a socket's peek offset by the bytes they consume; the kernel forgets
/// to for bytes it maps or copies as stragglers (6.18), so the receiver lowers it itself when a
/// peeker has it enabled: a peek cursor keeps pointing at the same stream byte (or at the head once
/// that byte has been received).
// doc-end
///
/// Errors: `-EINVAL` (`r` or `out` NULL, `size` out of range, flags other than `MSG_DONTWAIT`),
// doc-copy: zcrx_recv.errors
/// `-EAGAIN`, `-EINTR`, `-ECONNRESET` and the socket's other errors (reported after every byte
/// received before them); an `-EINVAL` from the kernel (a bug in lowcopy, or someone unmapped the
/// window) is reported as such, never taken as end of stream.
// doc-end
///
/// Syscalls: getsockopt, setsockopt, madvise, recvfrom, poll, fcntl, clock_gettime, epoll_create1,
/// epoll_ctl, epoll_wait, close.
///
/// # Safety
/// `r` must be NULL or a live receiver; `out` NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_recv(
    r: *mut lowcopy_zcrx,
    out: *mut lowcopy_zcrx_chunk,
    size: size_t,
    flags: c_int,
) -> ssize_t {
    let run = |r: &mut CReceiver| {
        if out.is_null() || check_size(size).is_err() {
            return -EINVAL as ssize_t;
        }
        match lowcopy::Flags::from_raw(flags).and_then(|f| r.recv(f)) {
            Ok(c) => {
                let chunk = lowcopy_zcrx_chunk {
                    data: if c.is_eof() {
                        std::ptr::null()
                    } else {
                        c.data.as_ptr()
                    },
                    len: c.data.len(),
                    mapped: c.mapped.into(),
                };
                // SAFETY: non-null and writable for `size` bytes per the caller's contract.
                unsafe { write_sized(out.cast(), size, &chunk) };
                chunk.len as ssize_t
            }
            Err(e) => neg(e) as ssize_t,
        }
    };
    // SAFETY: `r` is NULL or a live, unaliased receiver per the caller's contract.
    unsafe { with_handle(r, run) }
}
crate::versions::default_version!("lowcopy_zcrx_recv", "LOWCOPY_0.2");

/// Makes blocking receives on `r` wait at most `timeout_ms` (-1: without limit) in place of
/// the socket's `SO_RCVTIMEO`. Returns 0.
// doc-copy: zcrx_timeout.kernel
/// The fd's `O_NONBLOCK` then plays no part either (only `MSG_DONTWAIT` makes a receive
/// non-blocking), as in `lowcopy_recv_atleast`. When it runs out the result is what `SO_RCVTIMEO`
/// gives: the bytes queued below the mark, or `-EAGAIN`. Why: with the socket's settings, each wait
/// first looks without sleeping (`poll` with 0), then reads `O_NONBLOCK` and `SO_RCVTIMEO`, then
/// sleeps: 3 or 4 syscalls where tcp_mmap's loop makes 1. With its own timeout the receiver sleeps
/// in one `poll`.
// doc-end
///
/// Errors: `-EINVAL` (`r` NULL, `timeout_ms` < -1), `-ENOTRECOVERABLE` (a call on `r`
/// panicked).
///
/// Syscalls: none.
///
/// # Safety
/// `r` must be NULL or a live receiver not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_set_timeout(
    r: *mut lowcopy_zcrx,
    timeout_ms: c_int,
) -> c_int {
    let run = |r: &mut CReceiver| {
        if timeout_ms < -1 {
            return -EINVAL;
        }
        r.set_timeout((timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64)));
        0
    };
    // SAFETY: `r` is NULL or a live, unaliased receiver per the caller's contract.
    unsafe { with_handle(r, run) }
}
crate::versions::default_version!("lowcopy_zcrx_set_timeout", "LOWCOPY_0.2");

/// `on` = 0: each zero-copy call no longer reads `SO_PEEK_OFF` to keep a peeker's offset
/// right; 1 (the default): it does. Returns 0.
// doc-copy: zcrx_peek_off_tracking.kernel
/// Off saves the `getsockopt(SO_PEEK_OFF)` made before each zero-copy call (one syscall per chunk):
/// turn it off only when no peeker uses `SO_PEEK_OFF` on this socket while the receiver lives, or
/// its cursor will point past the bytes it meant after mapped chunks.
// doc-end
///
/// Errors: `-EINVAL` (`r` NULL, `on` not 0 or 1), `-ENOTRECOVERABLE` (a call on `r`
/// panicked).
///
/// Syscalls: none.
///
/// # Safety
/// `r` must be NULL or a live receiver not used by another thread meanwhile.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_set_peek_off_tracking(
    r: *mut lowcopy_zcrx,
    on: c_int,
) -> c_int {
    let run = |r: &mut CReceiver| match on {
        0 | 1 => {
            r.set_peek_off_tracking(on == 1);
            0
        }
        _ => -EINVAL,
    };
    // SAFETY: `r` is NULL or a live, unaliased receiver per the caller's contract.
    unsafe { with_handle(r, run) }
}
crate::versions::default_version!("lowcopy_zcrx_set_peek_off_tracking", "LOWCOPY_0.2");

/// The receiver's window in bytes: the size given to `lowcopy_zcrx_new` rounded up to whole
/// pages, the most one mapped chunk can hold; 0 for NULL and for a receiver on which a call
/// panicked.
///
/// Syscalls: none.
///
/// # Safety
/// `r` must be NULL or a live receiver.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_window(r: *const lowcopy_zcrx) -> size_t {
    // SAFETY: NULL or a live receiver per the caller's contract.
    unsafe { with_handle_ref(r, 0, 0, |r: &CReceiver| r.window()) }
}

/// Writes the receiver's counters to `*out` (`size` = `sizeof(lowcopy_zcrx_recv_stats)`, the
/// growth rule); returns 0.
///
/// Errors: `-EINVAL` (`r` or `out` NULL, `size` out of range).
///
/// Syscalls: none.
///
/// # Safety
/// `r` must be NULL or a live receiver; `out` NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_stats(
    r: *const lowcopy_zcrx,
    out: *mut ZcrxStats,
    size: size_t,
) -> c_int {
    // SAFETY: `out` is NULL or writable for `size` bytes per the caller's contract.
    let run = |r: &CReceiver| unsafe { out_sized(out, size, || r.stats()) };
    // SAFETY: NULL or a live receiver per the caller's contract.
    unsafe { with_handle_ref(r, -EINVAL, -ENOTRECOVERABLE, run) }
}
crate::versions::default_version!("lowcopy_zcrx_stats", "LOWCOPY_0.2");

/// Releases a receiver.
// doc-copy: zcrx_drop.kernel
/// Unmaps the window (releasing any mapped pages) and frees the copy buffer: a chunk from the
/// receiver is invalid afterwards.
// doc-end
/// Does not close the fd. NULL is a no-op.
/// A receiver on which a call panicked is released the same way.
///
/// Syscalls: munmap, brk, madvise, futex, mmap, mremap, mprotect, getrandom, close.
///
/// # Safety
/// `r` must be NULL or a receiver from `lowcopy_zcrx_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_free(r: *mut lowcopy_zcrx) {
    // SAFETY: NULL or a receiver from lowcopy_zcrx_new not yet freed, per the caller.
    unsafe { free_handle(r, (), (), |_| ()) }
}
