//! Offset peek (API.md section 1): `SO_PEEK_OFF` and the discard prefix.

use std::io::IoSliceMut;

use std::os::fd::BorrowedFd;

use libc::{c_int, c_void, iovec, size_t, ssize_t, EINVAL, ENOTRECOVERABLE};
use lowcopy::{Flags, PeekMode, PeekStats, Peeker};

use crate::{
    borrow, free_handle, guard, iov_slice, neg, new_handle, out_sized, ret_size, ret_unit,
    with_handle, with_handle_ref, Guarded,
};

/// Peek mechanism: `SO_PEEK_OFF` where the socket family has it, else `LOWCOPY_PEEK_DISCARD`.
/// Probed once per (family, protocol) and cached for the process. With `SO_PEEK_OFF`, a cursor
/// of at most 4096 bytes that the kernel's offset is not already at is peeked with a discard
/// prefix instead: one syscall and at most 4 KiB copied, rather than a `setsockopt` more.
pub const LOWCOPY_PEEK_AUTO: u32 = 0;
/// Peek mechanism: the kernel's `SO_PEEK_OFF` (TCP/IPv4 since Linux 6.9, TCP/IPv6 since 6.12,
/// AF_UNIX stream since 3.4; never MPTCP). Peeks cost the same at any offset.
pub const LOWCOPY_PEEK_OFFSET: u32 = 1;
/// Peek mechanism: `MSG_PEEK` with a leading scratch prefix that swallows the bytes before the
/// offset. Works on every stream socket; the kernel copies the prefix again on every peek.
pub const LOWCOPY_PEEK_DISCARD: u32 = 2;

// Literal values so that cbindgen can write them; they must equal the core's.
const _: () = {
    assert!(LOWCOPY_PEEK_AUTO == PeekMode::Auto as u32);
    assert!(LOWCOPY_PEEK_OFFSET == PeekMode::Offset as u32);
    assert!(LOWCOPY_PEEK_DISCARD == PeekMode::Discard as u32);
};

/// A peek cursor over one stream socket (opaque). Created by `lowcopy_peeker_new`, released
/// by `lowcopy_peeker_free`.
pub struct lowcopy_peeker(Guarded<CPeeker>);
crate::handle!(lowcopy_peeker, CPeeker);

/// The core's peeker over a caller-owned fd.
type CPeeker = Peeker<BorrowedFd<'static>>;

/// 1 if `SO_PEEK_OFF` works on this stream socket, 0 if not (MPTCP, kernels before 6.9 for
/// TCP/IPv4 or 6.12 for TCP/IPv6). Leaves the socket's `SO_PEEK_OFF` as it was.
///
/// Errors: `-EBADF` (not an open fd), `-ENOTSOCK`, `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX
/// stream socket; UDP and other datagram sockets are not covered by lowcopy's peek).
#[no_mangle]
pub extern "C" fn lowcopy_peek_supported(fd: c_int) -> c_int {
    guard(-ENOTRECOVERABLE, || {
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e,
        };
        match lowcopy::peek_supported(fd) {
            Ok(b) => b.into(),
            Err(e) => neg(e),
        }
    })
}

/// Copies up to `len` bytes that sit `offset` bytes after the head of the socket's receive
/// queue into `buf`, without consuming anything.
///
/// Returns bytes copied (> 0); 0 when the peer shut down and nothing lies beyond `offset`;
/// `-EAGAIN` when nothing lies beyond `offset` yet and `flags` has `MSG_DONTWAIT` or the fd is
/// non-blocking (a blocking call waits for one byte beyond `offset`).
///
/// Stateless: uses `SO_PEEK_OFF` where the socket has it (set, peek, set back to -1), else the
/// discard prefix. Requires `SO_PEEK_OFF` disabled (-1, the default) on the socket: do not mix
/// with a live `lowcopy_peeker` on the same fd. Costs 2-3 `getsockopt` besides the peek; use a
/// `lowcopy_peeker` on the data path.
///
/// Errors: `-EINVAL` (`buf` NULL, `len` 0 or above `SSIZE_MAX`, flags other than
/// `MSG_DONTWAIT`), `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream
/// socket), `-EOVERFLOW` (`offset` above `INT_MAX` for `SO_PEEK_OFF`, or above 1023 x 64 KiB
/// for the discard prefix: never truncated), `-ECONNRESET` and other `recvmsg` errors.
///
/// # Safety
/// `buf` must be NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peek_at(
    fd: c_int,
    offset: size_t,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    if buf.is_null() {
        return -EINVAL as ssize_t;
    }
    let iov = iovec {
        iov_base: buf,
        iov_len: len,
    };
    // SAFETY: one iovec over the caller's buffer, valid per the contract above.
    unsafe { lowcopy_peekv_at(fd, offset, &iov, 1, flags) }
}

/// `lowcopy_peek_at` into `iovcnt` iovecs (1 to `IOV_MAX` = 1024). Errors as
/// `lowcopy_peek_at`, plus `-EINVAL` for NULL `iov` or `iovcnt <= 0`, `-EMSGSIZE` for
/// `iovcnt > IOV_MAX`.
///
/// # Safety
/// `iov` must be NULL or point to `iovcnt` iovecs, each describing writable memory.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peekv_at(
    fd: c_int,
    offset: size_t,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
) -> ssize_t {
    guard(-ENOTRECOVERABLE as ssize_t, || {
        // SAFETY: forwarded caller contract.
        let iov = match unsafe { iov_slice(iov, iovcnt) } {
            Ok(v) => v,
            Err(e) => return e as ssize_t,
        };
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e as ssize_t,
        };
        // SAFETY: IoSliceMut is ABI-compatible with struct iovec on Unix; the buffers are
        // writable per the caller's contract and only the kernel writes to them.
        let bufs = unsafe {
            std::slice::from_raw_parts_mut(iov.as_ptr() as *mut IoSliceMut<'_>, iov.len())
        };
        ret_size(Flags::from_raw(flags).and_then(|f| lowcopy::peek_at(fd, offset, bufs, f)))
    })
}

/// Drops up to `n` bytes from the head of the receive queue, without copying them where the
/// protocol allows (TCP and MPTCP: `MSG_TRUNC`; AF_UNIX reads them into a scratch buffer).
/// Returns bytes dropped (0 for `n == 0` or at end of stream); `-EAGAIN` when nothing is
/// queued and the call may not block. The kernel lowers `SO_PEEK_OFF` by the bytes dropped.
///
/// Errors: `-EINVAL` (flags other than `MSG_DONTWAIT`), `-EBADF`, `-ENOTSOCK`,
/// `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), `recv` errors.
#[no_mangle]
pub extern "C" fn lowcopy_consume(fd: c_int, n: size_t, flags: c_int) -> ssize_t {
    guard(-ENOTRECOVERABLE as ssize_t, || {
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e as ssize_t,
        };
        ret_size(Flags::from_raw(flags).and_then(|f| lowcopy::consume(fd, n, f)))
    })
}

/// Creates a peek cursor over the stream socket `fd`, at offset 0, and writes it to `*out`.
///
/// `mode`: `LOWCOPY_PEEK_AUTO`, `LOWCOPY_PEEK_OFFSET` or `LOWCOPY_PEEK_DISCARD`. OFFSET (and
/// AUTO when it picks it) sets the socket's `SO_PEEK_OFF` to 0; DISCARD makes sure it is -1.
/// The fd stays owned by the caller and must stay open until `lowcopy_peeker_free`; do not
/// read from it meanwhile except through `lowcopy_peeker_consume`.
///
/// Urgent data: sets `SO_OOBINLINE` and leaves it set, so a TCP urgent byte (`MSG_OOB`) or an
/// AF_UNIX out-of-band byte is an ordinary stream byte where the peer sent it: peeks deliver
/// byte for byte what reads deliver, `lowcopy_peeker_consume(n)` drops exactly n, none is
/// peeked twice or skipped. A peek that reaches the urgent mark returns short and the next
/// continues after it; a DISCARD peek on a socket without `SO_PEEK_OFF` cannot pass a mark
/// ahead of the head and returns `-EAGAIN` (blocking or not) until the bytes before the mark
/// are consumed.
///
/// Errors: `-EINVAL` (`out` NULL, unknown mode), `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a
/// TCP, MPTCP or AF_UNIX stream socket, or OFFSET on a socket without `SO_PEEK_OFF`),
/// `-ENOMEM`.
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_new(
    fd: c_int,
    mode: u32,
    out: *mut *mut lowcopy_peeker,
) -> c_int {
    let mode = PeekMode::try_from(mode);
    // SAFETY: `out` is NULL or writable for one pointer per the caller's contract.
    unsafe { new_handle(fd, out, lowcopy_peeker, |fd| Peeker::new(fd, mode?)) }
}

/// Copies up to `len` bytes at the cursor into `buf`; the cursor advances by the result.
///
/// Returns bytes copied (> 0); 0 at end of stream after the cursor (the peer shut down; the
/// bytes before the cursor are still queued and readable); `-EAGAIN` when nothing lies beyond
/// the cursor and `flags` has `MSG_DONTWAIT` or the fd is non-blocking. A blocking peek
/// returns as soon as one byte beyond the cursor arrives (armed or not; but a socket whose own
/// `SO_RCVLOWAT` is above 1 makes the kernel wait for that many bytes beyond the cursor, as
/// recv does), or with `-EINTR` on a signal and `-EAGAIN` when `SO_RCVTIMEO` runs out (on a
/// socket without `SO_PEEK_OFF`, MPTCP or a kernel before 6.9, a signal in the last 10 ms
/// before the timeout reads as `-EAGAIN`: the kernel keeps the timeout in jiffies). Peeked bytes stay in the receive
/// buffer: when they fill it (small segments cost far more kernel memory than their payload)
/// the peer's window is closed and a blocking peek waits until something is consumed, so a
/// caller that may block there sets `SO_RCVTIMEO` or consumes acknowledged bytes first.
///
/// Errors: `-EINVAL` (`p` or `buf` NULL, `len` 0 or above `SSIZE_MAX`, flags other than
/// `MSG_DONTWAIT`), `-EOVERFLOW` (cursor beyond the mechanism's reach), `-ECONNRESET`, `-EINTR`
/// and other `recvmsg` errors.
///
/// # Safety
/// `p` must be NULL or a live peeker; `buf` NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_peek(
    p: *mut lowcopy_peeker,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    if buf.is_null() {
        return -EINVAL as ssize_t;
    }
    let iov = iovec {
        iov_base: buf,
        iov_len: len,
    };
    // SAFETY: forwarded caller contract.
    unsafe { lowcopy_peeker_peekv(p, &iov, 1, flags) }
}

/// `lowcopy_peeker_peek` into `iovcnt` iovecs (1 to 1024; with the discard mechanism the
/// prefix shares that budget). Errors as `lowcopy_peeker_peek`, plus `-EINVAL` for NULL `iov`
/// or `iovcnt <= 0` and `-EMSGSIZE` for `iovcnt > 1024`.
///
/// # Safety
/// `p` must be NULL or a live peeker; `iov` NULL or `iovcnt` iovecs over writable memory.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_peekv(
    p: *mut lowcopy_peeker,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
) -> ssize_t {
    let run = |p: &mut CPeeker| {
        // SAFETY: forwarded caller contract.
        let iov = match unsafe { iov_slice(iov, iovcnt) } {
            Ok(v) => v,
            Err(e) => return e as ssize_t,
        };
        let flags = match Flags::from_raw(flags) {
            Ok(f) => f,
            Err(e) => return neg(e) as ssize_t,
        };
        // SAFETY: the iovecs describe writable memory per the caller's contract.
        ret_size(unsafe { p.peek_raw(iov, flags) })
    };
    // SAFETY: `p` is NULL or a live, unaliased peeker per the caller's contract.
    unsafe { with_handle(p, run) }
}

/// Moves the cursor to `offset` bytes after the head of the receive queue: back to
/// retransmit, ahead to skip without copying (OFFSET; DISCARD copies them at the next peek).
/// No syscall unless the low-water mark is armed. Returns 0.
///
/// Errors: `-EINVAL` (`p` NULL), `-EOVERFLOW` (`offset` above `INT_MAX` with OFFSET, above
/// 1023 x 64 KiB with DISCARD; the cursor is unchanged).
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_seek(p: *mut lowcopy_peeker, offset: size_t) -> c_int {
    let run = |p: &mut CPeeker| ret_unit(p.seek(offset));
    // SAFETY: `p` is NULL or a live, unaliased peeker per the caller's contract.
    unsafe { with_handle(p, run) }
}

/// Drops up to `n` acknowledged bytes from the head of the receive queue and moves the cursor
/// back by the bytes dropped (never below 0). Never blocks. Returns bytes dropped (fewer when
/// fewer are queued; 0 for `n == 0` or at end of stream).
///
/// Errors: `-EINVAL` (`p` NULL), `-EAGAIN` (nothing queued), `recv` errors.
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_consume(p: *mut lowcopy_peeker, n: size_t) -> ssize_t {
    let run = |p: &mut CPeeker| ret_size(p.consume(n));
    // SAFETY: `p` is NULL or a live, unaliased peeker per the caller's contract.
    unsafe { with_handle(p, run) }
}

/// Tells the peeker that `n` bytes left the head of the receive queue by another path
/// (`lowcopy_zcrx_recv` or a plain read on the same fd): the cursor moves back by `n` (never
/// below 0), as `lowcopy_peeker_consume` would move it, without a syscall (unless the
/// low-water mark is armed: it follows the cursor). Returns 0; `-EINVAL` for NULL.
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_note_consumed(p: *mut lowcopy_peeker, n: size_t) -> c_int {
    let run = |p: &mut CPeeker| ret_unit(p.note_consumed(n));
    // SAFETY: `p` is NULL or a live, unaliased peeker per the caller's contract.
    unsafe { with_handle(p, run) }
}

/// The cursor, in bytes after the head of the receive queue; 0 for NULL.
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_offset(p: *const lowcopy_peeker) -> size_t {
    // SAFETY: NULL or a live peeker per the caller's contract.
    unsafe { with_handle_ref(p, 0, 0, |p| p.offset()) }
}

/// The mechanism in use: `LOWCOPY_PEEK_OFFSET` or `LOWCOPY_PEEK_DISCARD` (never AUTO);
/// `LOWCOPY_PEEK_AUTO` (0) for NULL.
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_mode(p: *const lowcopy_peeker) -> u32 {
    // SAFETY: NULL or a live peeker per the caller's contract.
    unsafe { with_handle_ref(p, 0, 0, |p| p.mode() as u32) }
}

/// Arms (`on` != 0) or disarms the low-water mark: while armed the peeker keeps `SO_RCVLOWAT`
/// at cursor + 1 bytes, so poll/epoll report the fd readable only when a byte beyond the
/// cursor is queued (they ignore `SO_PEEK_OFF`) and level-triggered loops do not spin.
/// Blocking peeks still return as soon as one new byte is there.
///
/// The mark follows seek and consume at once and is raised after peeks lazily, when a peek
/// finds nothing beyond the cursor (`-EAGAIN`): the data path pays no extra syscall. The
/// kernel caps `SO_RCVLOWAT` at `tcp_rmem[2]/2` (16 MiB by default; `SO_RCVBUF/2` when locked;
/// net/ipv4/tcp.c `tcp_set_rcvlowat`): past that cursor poll cannot be kept quiet. Nor can it
/// when the receive queue, full of peeked but unconsumed bytes, puts the socket under memory
/// pressure (more than 7/8 of `SO_RCVBUF` in kernel memory, which small segments reach with a
/// few KiB of payload) or shrinks its window to one MSS: TCP then reports `EPOLLIN` whatever
/// the mark (`tcp_epollin_ready`, net/ipv4/tcp.c). A level-triggered loop that gets `-EAGAIN`
/// from the peek should stop listening for `EPOLLIN` until it consumes (examples/c/peek_relay.c
/// does). Setting the mark grows an unlocked receive buffer to about twice the mark. Disarming, and
/// `lowcopy_peeker_free`, restore the value found when arming. Returns 0.
///
/// Errors: `-EINVAL` (`p` NULL), `-EOPNOTSUPP` (AF_UNIX: its poll ignores `SO_RCVLOWAT`),
/// `setsockopt` errors.
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_set_lowat_armed(
    p: *mut lowcopy_peeker,
    on: c_int,
) -> c_int {
    let run = |p: &mut CPeeker| ret_unit(p.set_lowat_armed(on != 0));
    // SAFETY: `p` is NULL or a live, unaliased peeker per the caller's contract.
    unsafe { with_handle(p, run) }
}

/// Writes the peeker's counters to `*out` (`size` = `sizeof(lowcopy_peek_stats)`, the growth
/// rule); returns 0.
///
/// Errors: `-EINVAL` (`p` or `out` NULL, `size` out of range).
///
/// # Safety
/// `p` must be NULL or a live peeker; `out` NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_stats(
    p: *const lowcopy_peeker,
    out: *mut PeekStats,
    size: size_t,
) -> c_int {
    // SAFETY: `out` is NULL or writable for `size` bytes per the caller's contract.
    let run = |p: &CPeeker| unsafe { out_sized(out, size, || p.stats()) };
    // SAFETY: NULL or a live peeker per the caller's contract.
    unsafe { with_handle_ref(p, -EINVAL, -ENOTRECOVERABLE, run) }
}
crate::versions::default_version!("lowcopy_peeker_stats", "LOWCOPY_0.2");

/// Releases a peeker: restores `SO_RCVLOWAT` if the mark was armed and leaves the socket's
/// `SO_PEEK_OFF` disabled (-1). Does not close the fd; call it before closing the fd. NULL is
/// a no-op.
///
/// # Safety
/// `p` must be NULL or a peeker from `lowcopy_peeker_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_free(p: *mut lowcopy_peeker) {
    // SAFETY: NULL or a peeker from lowcopy_peeker_new not yet freed, per the caller.
    unsafe { free_handle(p, (), (), |_| ()) };
}
