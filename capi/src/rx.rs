//! Low-water-mark receive and zero-copy receive (API.md section 3): `SO_RCVLOWAT` + poll,
//! and `mmap` + `TCP_ZEROCOPY_RECEIVE` with a copy path.

use std::time::Duration;

use libc::{c_int, c_void, size_t, ssize_t, EINVAL, EIO};
use lowcopy::{RecvStats, ZeroCopyReceiver};

use crate::{borrow, guard, neg, ret_size, with_handle};

/// Counters of `lowcopy_recv_atleast_stats`, added to by every call (failed calls too: their
/// syscalls happened). Zero it once, then pass it to each call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lowcopy_recv_stats {
    /// Calls made.
    pub calls: u64,
    /// Syscalls made, failed ones included.
    pub syscalls: u64,
    /// `poll` returns that reported the socket ready: the wakeups.
    pub wakeups: u64,
    /// Wakeups after which the call still had fewer than `min` bytes and waited again (the
    /// kernel woke below the mark, the mark was capped, or datagrams were small).
    pub early_wakeups: u64,
    /// Calls that ran out of time.
    pub timeouts: u64,
    /// `SO_RCVLOWAT` changes made, restores included.
    pub lowat_changes: u64,
    /// Bytes returned.
    pub bytes: u64,
}

/// Sets `SO_RCVLOWAT` to `bytes` and writes the value the kernel keeps to `*effective`;
/// returns 0.
///
/// TCP caps the mark at `tcp_rmem[2] / 2` (16 MiB with the default 32 MiB), or at half of
/// `SO_RCVBUF` as read back (the kernel doubles what was set) once the application locked the
/// receive buffer with `SO_RCVBUF`. `bytes` above `INT_MAX` is passed as `INT_MAX` and capped
/// the same way; 0 is kept as 1. On TCP it also grows an unlocked receive buffer to about
/// twice the mark, for good. On a listening socket the mark is copied into each connection
/// when its handshake completes (connections already in the accept queue keep the old value),
/// as tcp_mmap uses it. AF_UNIX and UDP keep the value but their poll ignores it.
///
/// Errors: `-EINVAL` (`effective` NULL), `-EBADF`, `-ENOTSOCK`, `setsockopt` errors.
///
/// # Safety
/// `effective` must be NULL or writable for one `size_t`.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_set_rcvlowat(
    fd: c_int,
    bytes: size_t,
    effective: *mut size_t,
) -> c_int {
    guard(-EIO, || {
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
/// Returns `min` to `len` bytes when they came in time; fewer (but > 0) when the peer shut
/// down, time ran out, the connection was reset or a signal arrived after some bytes came
/// (the error is left for the next call), or on a datagram socket when the next datagram does
/// not fit; 0 at end of stream with nothing received; `-ETIMEDOUT` when nothing came in time.
///
/// The error queue is never read: its entries (the notifications of a `lowcopy_zc` on the
/// same socket, `IP_RECVERR` and `SO_TIMESTAMPING` reports) stay for their owner and neither
/// wake nor end the call. While one is queued poll reports `POLLERR` at once, so the call
/// sleeps on an edge-triggered epoll instance of its own instead (one fd for the call's
/// duration). A socket error (`SO_ERROR`) is returned as `recv` returns it.
///
/// TCP: the socket's `SO_RCVLOWAT` is set to the bytes still missing while the call waits and
/// restored before it returns (no change, and two syscalls fewer, when it already holds that
/// value: set it once with `lowcopy_set_rcvlowat`). Early wakeups below the mark (memory
/// pressure, a window down to one MSS) are read and waited past. Never a blocking `recv`, so
/// never the trap where a read shorter than the mark sleeps until the mark. AF_UNIX stream:
/// the same result, without the saved wakeups (its poll ignores the mark). UDP and other
/// datagram sockets: whole datagrams appended while they fit, never truncated.
///
/// Errors: `-EINVAL` (`buf` NULL, `len` 0 or above `SSIZE_MAX`, `timeout_ms` < -1), `-EBADF`,
/// `-ENOTSOCK`, `-EOPNOTSUPP` (not a stream, datagram or seqpacket socket), `-ETIMEDOUT`,
/// `-EMSGSIZE` (the first datagram is larger than `len`; it stays queued), `-EINTR`,
/// `-ECONNRESET` and other socket errors.
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
    let mut stats = lowcopy_recv_stats::default();
    // SAFETY: forwarded caller contract; `stats` is a live local.
    unsafe { lowcopy_recv_atleast_stats(fd, buf, len, min, timeout_ms, &mut stats) }
}

/// `lowcopy_recv_atleast`, adding what the call did to `*stats` (wakeups, early wakeups,
/// syscalls...). Errors as `lowcopy_recv_atleast`, plus `-EINVAL` for a NULL `stats`.
///
/// # Safety
/// `buf` must be NULL or writable for `len` bytes; `stats` NULL or a valid
/// `lowcopy_recv_stats`.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_recv_atleast_stats(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    min: size_t,
    timeout_ms: c_int,
    stats: *mut lowcopy_recv_stats,
) -> ssize_t {
    guard(-EIO as ssize_t, || {
        // SAFETY: NULL or a valid, unaliased struct per the caller's contract.
        let Some(out) = (unsafe { stats.as_mut() }) else {
            return -EINVAL as ssize_t;
        };
        if buf.is_null() || timeout_ms < -1 {
            return -EINVAL as ssize_t;
        }
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e as ssize_t,
        };
        let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        let mut s = RecvStats {
            calls: out.calls,
            syscalls: out.syscalls,
            wakeups: out.wakeups,
            early_wakeups: out.early_wakeups,
            timeouts: out.timeouts,
            lowat_changes: out.lowat_changes,
            bytes: out.bytes,
        };
        // SAFETY: `buf` is writable for `len` bytes per the caller's contract; the core
        // refuses `len` above isize::MAX before touching it.
        let r =
            unsafe { lowcopy::lowat::recv_atleast_raw(fd, buf.cast(), len, min, timeout, &mut s) };
        *out = lowcopy_recv_stats {
            calls: s.calls,
            syscalls: s.syscalls,
            wakeups: s.wakeups,
            early_wakeups: s.early_wakeups,
            timeouts: s.timeouts,
            lowat_changes: s.lowat_changes,
            bytes: s.bytes,
        };
        ret_size(r)
    })
}

/// A zero-copy receiver over one TCP socket (opaque): a read-only mapping of the socket and a
/// copy buffer. Created by `lowcopy_zcrx_new`, released by `lowcopy_zcrx_free`.
pub struct lowcopy_zcrx {
    inner: ZeroCopyReceiver<std::os::fd::BorrowedFd<'static>>,
}

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

/// Counters of a `lowcopy_zcrx`. `bytes_mapped + bytes_copied` is exactly the number of stream
/// bytes the receiver returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lowcopy_zcrx_recv_stats {
    /// Bytes delivered as mapped pages.
    pub bytes_mapped: u64,
    /// Bytes delivered by copy.
    pub bytes_copied: u64,
    /// Of `bytes_copied`: bytes the kernel copied into the copy buffer within
    /// `TCP_ZEROCOPY_RECEIVE` (stragglers, small queues); the rest were read with `recv`.
    pub bytes_copybuf: u64,
    /// Chunks returned that were mapped pages.
    pub chunks_mapped: u64,
    /// Chunks returned that were copies.
    pub chunks_copied: u64,
    /// Syscalls made, failed ones included.
    pub syscalls: u64,
    /// `TCP_ZEROCOPY_RECEIVE` calls.
    pub zc_calls: u64,
    /// `TCP_ZEROCOPY_RECEIVE` calls that mapped nothing.
    pub zc_calls_unmapped: u64,
    /// `poll` returns that reported the socket ready, when a receive had to wait.
    pub wakeups: u64,
    /// `SO_PEEK_OFF` corrections (the kernel does not lower it for mapped bytes; lowcopy does).
    pub peek_off_fixups: u64,
}

/// Creates a zero-copy receiver over the connected TCP socket `fd` and writes it to `*out`.
///
/// Maps a `window`-byte read-only window of the socket (`window` rounded up to a multiple of
/// the page size; 1 byte to 1 GiB) and allocates the copy buffer (the window's size, between
/// 64 KiB and 1 MiB); nothing is allocated after this. Set `SO_RCVLOWAT` to about the window
/// (`lowcopy_set_rcvlowat`) so that each wakeup brings a window's worth. Pages map only where
/// the kernel holds whole, page-aligned payload pages (a header-splitting NIC; on loopback, a
/// page-aligned `MSG_ZEROCOPY` sender); every other byte arrives by copy.
///
/// The first receiver of the process finds which size of `struct tcp_zerocopy_receive` the
/// kernel accepts (64 bytes since 5.12; exactly 16 on 4.18-5.6) with a zero-length request on
/// `fd` that consumes nothing, and caches it.
///
/// Errors (the socket is checked before the window): `-EINVAL` (`out` NULL, `window` 0 or
/// above 1 GiB), `-EBADF`, `-ENOTSOCK`,
/// `-EOPNOTSUPP` (not TCP over IPv4/IPv6: UDP, AF_UNIX, MPTCP...; or no
/// `TCP_ZEROCOPY_RECEIVE` in this kernel), `-ENOTCONN` (not connected: listening, never
/// connected, still connecting, or reset), `-ENOMEM`, and `mmap` errors.
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_new(
    fd: c_int,
    window: size_t,
    out: *mut *mut lowcopy_zcrx,
) -> c_int {
    guard(-EIO, || {
        if out.is_null() {
            return -EINVAL;
        }
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e,
        };
        match ZeroCopyReceiver::new(fd, window) {
            Ok(inner) => {
                let r = Box::into_raw(Box::new(lowcopy_zcrx { inner }));
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { out.write(r) };
                0
            }
            Err(e) => neg(e),
        }
    })
}

/// Receives the next piece of the stream into `*out`: pages mapped from the socket, or bytes
/// copied (stragglers the kernel cannot map, and `recv_skip_hint` bytes), in stream order.
/// Returns the chunk's length (> 0); 0 at end of stream (`*out` is then `{NULL, 0, 0}`, and
/// later calls return 0 again). The previous chunk's pages are released
/// (`madvise(MADV_DONTNEED)`) at the start of this call, before the window is reused.
///
/// `flags`: 0 or `MSG_DONTWAIT`. Blocking (no `MSG_DONTWAIT`, fd without `O_NONBLOCK`), like a
/// blocking `recv` with `SO_RCVLOWAT`: once the bytes queued at the last wakeup are delivered,
/// waits in poll until the socket's mark is met, then returns them chunk by chunk without
/// waiting again: one wakeup per mark's worth (bytes the kernel wakes for early are returned,
/// not waited past). The socket's `SO_RCVTIMEO` bounds the wait; when it runs out the bytes
/// queued below the mark are returned, or `-EAGAIN` when there are none, as `recv` does.
/// Non-blocking (`MSG_DONTWAIT` or `O_NONBLOCK`): whatever is queued, or `-EAGAIN`. Entries
/// on the socket's error queue are never read and never end a wait (as in
/// `lowcopy_recv_atleast`).
///
/// If a peeker uses `SO_PEEK_OFF` on the same socket, the receiver lowers it by the bytes the
/// kernel mapped or copied without lowering it itself, so the peek cursor stays on the same
/// stream byte, as after a read.
///
/// Errors: `-EINVAL` (`r` or `out` NULL, flags other than `MSG_DONTWAIT`; an `EINVAL` from the
/// kernel is reported as such, never as end of stream), `-EAGAIN`, `-EINTR`, `-ECONNRESET`
/// and other socket errors (after every byte that came before them).
///
/// # Safety
/// `r` must be NULL or a live receiver; `out` NULL or writable for one `lowcopy_zcrx_chunk`.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_recv(
    r: *mut lowcopy_zcrx,
    out: *mut lowcopy_zcrx_chunk,
    flags: c_int,
) -> ssize_t {
    let run = |r: &mut lowcopy_zcrx| {
        if out.is_null() {
            return -EINVAL as ssize_t;
        }
        match lowcopy::Flags::from_raw(flags).and_then(|f| r.inner.recv(f)) {
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
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { out.write(chunk) };
                chunk.len as ssize_t
            }
            Err(e) => neg(e) as ssize_t,
        }
    };
    // SAFETY: `r` is NULL or a live, unaliased receiver per the caller's contract.
    unsafe { with_handle(r, run) }
}

/// The receiver's window in bytes: the size given to `lowcopy_zcrx_new` rounded up to whole
/// pages, the most one mapped chunk can hold; 0 for NULL.
///
/// # Safety
/// `r` must be NULL or a live receiver.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_window(r: *const lowcopy_zcrx) -> size_t {
    // SAFETY: NULL or a live receiver per the caller's contract.
    guard(0, || unsafe { r.as_ref() }.map_or(0, |r| r.inner.window()))
}

/// Writes the receiver's counters to `*out`; returns 0, or `-EINVAL` if either pointer is NULL.
///
/// # Safety
/// `r` must be NULL or a live receiver; `out` NULL or writable for one
/// `lowcopy_zcrx_recv_stats`.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_stats(
    r: *const lowcopy_zcrx,
    out: *mut lowcopy_zcrx_recv_stats,
) -> c_int {
    guard(-EIO, || {
        // SAFETY: NULL or a live receiver per the caller's contract.
        let Some(r) = (unsafe { r.as_ref() }) else {
            return -EINVAL;
        };
        if out.is_null() {
            return -EINVAL;
        }
        let s = r.inner.stats();
        let stats = lowcopy_zcrx_recv_stats {
            bytes_mapped: s.bytes_mapped,
            bytes_copied: s.bytes_copied,
            bytes_copybuf: s.bytes_copybuf,
            chunks_mapped: s.chunks_mapped,
            chunks_copied: s.chunks_copied,
            syscalls: s.syscalls,
            zc_calls: s.zc_calls,
            zc_calls_unmapped: s.zc_calls_unmapped,
            wakeups: s.wakeups,
            peek_off_fixups: s.peek_off_fixups,
        };
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { out.write(stats) };
        0
    })
}

/// Releases a receiver: unmaps the window (and any pages still mapped there) and frees the
/// copy buffer; a chunk from it is invalid afterwards. Does not close the fd. NULL is a no-op.
///
/// # Safety
/// `r` must be NULL or a receiver from `lowcopy_zcrx_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_zcrx_free(r: *mut lowcopy_zcrx) {
    guard((), || {
        if !r.is_null() {
            // SAFETY: allocated by Box::into_raw in lowcopy_zcrx_new, freed only here once.
            drop(unsafe { Box::from_raw(r) });
        }
    })
}
