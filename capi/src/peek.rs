//! Offset peek: `SO_PEEK_OFF` and the discard prefix.

#[cfg(lowcopy_full)]
use std::io::IoSliceMut;

use libc::{c_int, c_void, iovec, size_t, ssize_t, EINVAL, ENOTRECOVERABLE};
use lowcopy::peek::{PEEK_MOVED, PEEK_PREFIXED};
use lowcopy::{Flags, PeekMode, PeekResult, PeekStats, Peeker, PeekerOptions, StreamKind, Urgent};

use lowcopy::__private::{io, BorrowedFd};

#[cfg(lowcopy_full)]
use crate::new_handle;
use crate::{
    borrow, catch, check_size, guard, iov_slice, neg, out_sized, ret_size, ret_unit, with_handle,
    with_handle_ref, write_sized, Guarded,
};

/// Peek mechanism:
// doc-copy: peek_mode.auto
/// `SO_PEEK_OFF` where this socket family has it, else `LOWCOPY_PEEK_DISCARD`. The answer is probed
/// once per (family, protocol) and cached for the process. With `SO_PEEK_OFF`, a cursor of at most
/// 4096 bytes that the kernel's offset is not already at is peeked with a discard prefix instead,
/// which saves a `setsockopt` for a copy of at most 4 KiB (counted in
/// `lowcopy_peek_stats.bytes_skipped_copied`).
// doc-end
pub const LOWCOPY_PEEK_AUTO: u32 = 0;
/// Peek mechanism:
// doc-copy: peek_mode.offset
/// The kernel's `SO_PEEK_OFF`: TCP over IPv4 since Linux 6.9, over IPv6 since 6.12, AF_UNIX stream
/// since 3.4; never MPTCP (`-EOPNOTSUPP` on sockets without it). Peeks cost the same at any offset.
// doc-end
pub const LOWCOPY_PEEK_OFFSET: u32 = 1;
/// Peek mechanism:
// doc-copy: peek_mode.discard
/// `MSG_PEEK` with a leading scratch prefix that swallows the `offset` bytes before the cursor.
/// Works on every stream socket, but the kernel copies the prefix again on every peek (counted in
/// `lowcopy_peek_stats.bytes_skipped_copied`).
// doc-end
pub const LOWCOPY_PEEK_DISCARD: u32 = 2;
/// Peek mechanism:
// doc-copy: peek_mode.offset_or_discard
/// `SO_PEEK_OFF` where this socket family has it, else `LOWCOPY_PEEK_DISCARD`, as
/// `LOWCOPY_PEEK_AUTO` picks (probed once per family and cached), but with no small-offset
/// shortcut: every peek goes through the mechanism picked, so the only `SO_PEEK_OFF` write is the
/// one that moves the kernel's offset to a cursor it is not at (a rewind, a skip).
// doc-end
pub const LOWCOPY_PEEK_OFFSET_OR_DISCARD: u32 = 3;
/// Mode bit, OR'd into the `mode` of `lowcopy_peeker_new` or `lowcopy_peeker_init` with
/// `LOWCOPY_PEEK_AUTO`, `LOWCOPY_PEEK_DISCARD` or `LOWCOPY_PEEK_OFFSET_OR_DISCARD` (any of
/// them then means the discard mechanism): the caller owns urgent data.
// doc-copy: urgent.caller
/// The caller owns the urgent-data policy: the peeker leaves `SO_OOBINLINE` as it is (no
/// `setsockopt`) and uses the discard mechanism (the kernel's `SO_PEEK_OFF` counts an urgent byte
/// that reads skip, so its offsets would drift from the caller's), on TCP and MPTCP only. Peeks
/// still deliver byte for byte what reads deliver: the kernel ends every read and every peek at the
/// urgent mark, so a peek whose bytes reach the mark returns short, ending just before the mark,
/// and a peek at or past the mark fails with `-ENOMSG` (blocking or not; nothing is copied, the
/// cursor stays) for as long as the mark lies ahead of the head of the queue. The caller deals with
/// the urgent byte in its own way (`recv(MSG_OOB)` for it, `SIOCATMARK` for where it is) and
/// consumes the bytes before the mark; from then on peeks pass the mark again. Without
/// `SO_OOBINLINE` the urgent byte is not part of what reads deliver (the kernel skips it), so
/// neither peeks nor offsets count it; with `SO_OOBINLINE` set by the caller it is an ordinary byte
/// after the mark. Errors at creation: `-EINVAL` with `LOWCOPY_PEEK_OFFSET`, `-EOPNOTSUPP` on
/// AF_UNIX (its out-of-band byte is delivered by peeks that reads skip, and has no mark a peek
/// stops at).
// doc-end
pub const LOWCOPY_PEEK_URGENT_CALLER: u32 = 0x100;

/// The C `mode` argument: a `LOWCOPY_PEEK_*` mechanism, optionally with
/// `LOWCOPY_PEEK_URGENT_CALLER`. Unknown values and bits are `EINVAL`.
fn c_mode(mode: u32) -> io::Result<PeekerOptions> {
    let urgent = if mode & LOWCOPY_PEEK_URGENT_CALLER != 0 {
        Urgent::Caller
    } else {
        Urgent::Inline
    };
    let m = PeekMode::try_from(mode & !LOWCOPY_PEEK_URGENT_CALLER)?;
    if urgent == Urgent::Caller && m == PeekMode::Offset {
        return Err(io::Error::from_raw_os_error(EINVAL));
    }
    Ok(PeekerOptions::new(m).urgent(urgent))
}

// Literal values so that cbindgen can write them; they must equal the core's.
const _: () = {
    assert!(LOWCOPY_PEEK_AUTO == PeekMode::Auto as u32);
    assert!(LOWCOPY_PEEK_OFFSET == PeekMode::Offset as u32);
    assert!(LOWCOPY_PEEK_DISCARD == PeekMode::Discard as u32);
    assert!(LOWCOPY_PEEK_OFFSET_OR_DISCARD == PeekMode::OffsetOrDiscard as u32);
};

/// `lowcopy_peek_result.flags`: the kernel's `SO_PEEK_OFF` was written before the peek (it
/// was not at the offset asked for): the call made a `setsockopt` besides the peek.
pub const LOWCOPY_PEEK_MOVED: u32 = 1;
/// `lowcopy_peek_result.flags`: the peek went through a discard prefix (the kernel copied
/// `offset` bytes only to skip them).
pub const LOWCOPY_PEEK_PREFIXED: u32 = 2;
/// `lowcopy_peeker_release` flag: the caller closes the fd right after, so the peeker does not
/// restore `SO_PEEK_OFF` and `SO_RCVLOWAT` (no syscall).
pub const LOWCOPY_RELEASE_CLOSING: u32 = 1;

/// Bytes of caller memory for `lowcopy_peeker_init` in this version of the header (the size of
/// `lowcopy_peeker_storage`): exactly what the library needs, `lowcopy_peeker_size()` (64-bit
/// Linux; a compile-time assertion holds the two equal). A later version may only grow it
/// together with a new symbol version of `lowcopy_peeker_init` (docs/abi.md, "Peeker
/// storage"): a program built with this header keeps getting a library that fits its memory,
/// and `size` below `lowcopy_peeker_size()` is `-EINVAL`, never an overrun.
///
/// Why 128 and not 64: the seven `uint64_t` counters of `lowcopy_peek_stats` (56 bytes, 64-bit
/// by the ABI: byte counts pass 2^32 within seconds at 10 Gb/s), the stream position of
/// `lowcopy_peek_result.stream_pos` (8) and the live tag (8) are 72 bytes before any state.
/// The state takes what the kernel's limits allow: the kernel's `SO_PEEK_OFF` and the armed
/// `SO_RCVLOWAT` in 32 bits (both are `int`s in the kernel), the cursor (8), the fd (4), the
/// mechanism and flags (one byte each), the panic guard's flag; heap or caller memory is told by
/// the tag. 0.3 headers said 256: programs built with them still work (their `size` is larger).
pub const LOWCOPY_PEEKER_SIZE: usize = 128;
/// The `uint64_t` at the start of a peeker's storage while the peeker lives: from a
/// successful `lowcopy_peeker_init` until its release. A daemon with a table of
/// `lowcopy_peeker_storage` tells a live entry by it, with no flag of its own; storage never
/// initialised (a zeroed static table) reads 0.
pub const LOWCOPY_PEEKER_LIVE: u64 = 0x6c63_7065_656b_6572;
/// The `uint64_t` at the start of a peeker's storage once `lowcopy_peeker_release` (or
/// `lowcopy_peeker_free`) has released the peeker made there: the memory is the caller's again.
pub const LOWCOPY_PEEKER_RELEASED: u64 = 0x6c63_7065_6572_6564;
/// The tag of a peeker made by `lowcopy_peeker_new` (its memory the library's, freed by
/// release): the tag tells who owns the memory, so no flag beside it is needed.
#[cfg(lowcopy_full)]
const TAG_HEAP: u64 = 0x6c63_7065_6865_6170;

/// Alignment that `lowcopy_peeker_init` requires of its memory (`lowcopy_peeker_storage` has
/// it).
pub const LOWCOPY_PEEKER_ALIGN: usize = 8;

const _: () = {
    assert!(LOWCOPY_PEEK_MOVED == PEEK_MOVED);
    assert!(LOWCOPY_PEEK_PREFIXED == PEEK_PREFIXED);
    // The header promises exactly what the library needs (the storage the size of what it
    // holds, issue 22.2); growing it takes a new symbol version (docs/abi.md).
    assert!(core::mem::size_of::<lowcopy_peeker>() == LOWCOPY_PEEKER_SIZE);
    assert!(core::mem::align_of::<lowcopy_peeker>() <= LOWCOPY_PEEKER_ALIGN);
    assert!(core::mem::size_of::<lowcopy_peeker_storage>() == LOWCOPY_PEEKER_SIZE);
    // LOWCOPY_PEEKER_LIVE is the uint64_t at `mem`: `tag` is first in the #[repr(C)] Tagged,
    // and Tagged, the handle's one field, at its start (checked for this compiler's layout).
    assert!(core::mem::offset_of!(lowcopy_peeker, t) == 0);
    assert!(core::mem::align_of::<lowcopy_peeker_storage>() == LOWCOPY_PEEKER_ALIGN);
};

/// Caller memory for one peeker (`LOWCOPY_PEEKER_SIZE` bytes, aligned for it): declare one per
/// connection direction, statically or inside the caller's own structs, and hand it to
/// `lowcopy_peeker_init`. Its contents are the library's; do not copy or move it while the
/// peeker lives.
#[repr(C)]
pub struct lowcopy_peeker_storage {
    pub opaque: [u64; 16],
}

/// A peek cursor over one stream socket (opaque). Created by `lowcopy_peeker_new` (heap) or
/// `lowcopy_peeker_init` (caller memory), released by `lowcopy_peeker_free` or
/// `lowcopy_peeker_release`.
pub struct lowcopy_peeker {
    t: Tagged,
}

/// The peeker's fields, the tag first at a fixed place (`#[repr(C)]`), so that it is the
/// `uint64_t` at `mem`; the handle around it stays opaque to C.
#[repr(C)]
struct Tagged {
    /// `LOWCOPY_PEEKER_LIVE` while a peeker made by `lowcopy_peeker_init` in the caller's
    /// memory lives (never freed by lowcopy), `LOWCOPY_PEEKER_RELEASED` once it is released;
    /// `TAG_HEAP` for one made by `lowcopy_peeker_new`.
    tag: u64,
    g: Guarded<CPeeker>,
}

impl crate::Handle for lowcopy_peeker {
    type Inner = CPeeker;
    fn guarded(&self) -> &Guarded<CPeeker> {
        &self.t.g
    }
    fn guarded_mut(&mut self) -> &mut Guarded<CPeeker> {
        &mut self.t.g
    }
}

/// The core's peeker over a caller-owned fd.
type CPeeker = Peeker<BorrowedFd<'static>>;

/// 1 if `SO_PEEK_OFF` works on this stream socket, 0 if not.
// doc-copy: peek_supported.kernel
/// TCP over IPv4 has it since Linux 6.9, over IPv6 since 6.12, AF_UNIX stream since 3.4; MPTCP
/// never. Leaves the socket's `SO_PEEK_OFF` value as it was (reads it, writes it back).
// doc-end
///
/// Errors:
// doc-copy: peek_supported.errors
/// `-EBADF` (not an open fd), `-ENOTSOCK`, `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream
/// socket: lowcopy's peek does not apply; UDP and other datagram sockets neither).
// doc-end
///
/// Syscalls: getsockopt, setsockopt.
#[cfg(lowcopy_full)]
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
// doc-copy: peek_at.returns
/// Returns bytes copied (> 0); 0 when the peer shut down and nothing lies beyond `offset`;
/// `-EAGAIN` when nothing lies beyond `offset` yet and the call may not wait (`MSG_DONTWAIT`, or a
/// non-blocking fd).
// doc-end
// doc-copy: peek_at.kernel
/// A blocking call waits for one byte beyond `offset`. Stateless: uses `SO_PEEK_OFF` where the
/// socket has it (set, peek, set back to -1), else the discard prefix.
// doc-end
///
// doc-copy: peek_at.cost
/// Precondition: `SO_PEEK_OFF` is disabled (-1, the default) on the socket, so no live peeker may
/// use it; this call leaves it disabled. Cost: 2-3 `getsockopt` to classify the socket, one
/// `recvmsg`, and with `offset > 0` on a socket with `SO_PEEK_OFF` two `setsockopt` (and on TCP a
/// `poll` for urgent data: with an urgent byte pending out of the stream, a `getsockopt` and one or
/// two `ioctl` find its mark, so that offsets past it count the bytes reads deliver). Use a peeker
/// on the data path.
// doc-end
///
/// Errors: `-EINVAL` (`buf` NULL, `len` 0 or above `SSIZE_MAX`, flags other than
/// `MSG_DONTWAIT`),
// doc-copy: peek_at.errors
/// `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), `-EOVERFLOW`
/// (`offset` beyond what the mechanism can represent: `INT_MAX` for `SO_PEEK_OFF`, 1023 x 64 KiB
/// for the discard prefix, whose peek into more iovecs than fit beside it is split into several
/// `recvmsg`; never truncated), `-ECONNRESET` and other `recvmsg` errors.
// doc-end
///
/// Syscalls: recvfrom, recvmsg, setsockopt, getsockopt, poll, fcntl, clock_gettime, ioctl.
///
/// # Safety
/// `buf` must be NULL or writable for `len` bytes.
#[cfg(lowcopy_full)]
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
/// Syscalls: recvfrom, recvmsg, setsockopt, getsockopt, poll, fcntl, clock_gettime, ioctl.
///
/// # Safety
/// `iov` must be NULL or point to `iovcnt` iovecs, each describing writable memory.
#[cfg(lowcopy_full)]
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

/// Drops up to `n` bytes from the head of the receive queue; returns bytes dropped.
// doc-copy: consume.kernel
/// TCP and MPTCP use `recv(NULL, n, MSG_TRUNC)`, which copies nothing; AF_UNIX stream has no such
/// path and reads them into a scratch buffer, on past messages that carry descriptors, and closes
/// the descriptors that came with the bytes dropped. The kernel lowers `SO_PEEK_OFF` by the bytes
/// dropped. Returns 0 for `n` 0 or at end of stream.
// doc-end
///
/// Errors: `-EINVAL` (flags other than `MSG_DONTWAIT`),
// doc-copy: consume.errors
/// `-EAGAIN` when nothing is queued and the call may not block (`MSG_DONTWAIT` or a non-blocking
/// fd); `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), and
/// `recv` errors (`-ECONNRESET`, `-EINTR`, ...).
// doc-end
///
/// Syscalls: getsockopt, recvfrom, recvmsg, ioctl, close (descriptors that came with the bytes).
#[cfg(lowcopy_full)]
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
/// `mode`: `LOWCOPY_PEEK_AUTO`, `LOWCOPY_PEEK_OFFSET` or `LOWCOPY_PEEK_DISCARD`.
// doc-copy: peeker_new.kernel
/// `LOWCOPY_PEEK_OFFSET` (and `LOWCOPY_PEEK_AUTO` or `LOWCOPY_PEEK_OFFSET_OR_DISCARD` when they
/// pick `SO_PEEK_OFF`) sets the socket's `SO_PEEK_OFF` to 0; the discard mechanism makes sure it is
/// disabled (-1) and, on TCP and MPTCP, sets `TCP_INQ` (one `setsockopt`), whose hint lets an empty
/// peek cost one `recvmsg`; a caller's own `recvmsg` with a control buffer then also receives a
/// `TCP_CM_INQ` message. Dropping the peeker turns it off.
// doc-end
// doc-copy: peeker_new.cost
/// Cost: 3 `getsockopt` to learn what the socket is and that it does not listen (`SO_DOMAIN`, then
/// on TCP `SO_PROTOCOL` and `TCP_INFO`, on MPTCP `SO_PROTOCOL` and `SO_ACCEPTCONN`, on AF_UNIX
/// `SO_TYPE` and `SO_ACCEPTCONN`; 1 or 2 to check the kind when the caller states it), then one
/// `setsockopt` (`SO_PEEK_OFF`), or for the discard mechanism one `getsockopt` (a `setsockopt` more
/// if `SO_PEEK_OFF` was on) and on TCP and MPTCP the `setsockopt` of `TCP_INQ`, and the
/// `setsockopt` of `SO_OOBINLINE`.
// doc-end
///
/// Urgent data (a TCP urgent byte, `MSG_OOB`, or an AF_UNIX out-of-band byte):
// doc-copy: peeker.urgent
/// making a peeker sets `SO_OOBINLINE` on the socket and leaves it set. Every urgent byte is then
/// an ordinary byte of the stream, where the peer sent it: peeks deliver byte for byte what reads
/// of the socket deliver, a consume of `n` bytes drops exactly `n` of them (it reads on past the
/// mark), and no byte is peeked twice or skipped. Urgency itself is not reported (`recv(MSG_OOB)`
/// then fails with errno EINVAL; `SIOCATMARK` still tells where the mark is).
///
/// The kernel ends every read and every peek at the urgent mark (net/ipv4/tcp.c
/// `tcp_recvmsg_locked`, net/unix/af_unix.c `manage_oob`): a peek that reaches it returns short,
/// and the next continues at the urgent byte. A discard peek starts at the head of the queue, so it
/// cannot pass a mark that lies ahead of the head: there the peeker peeks once with `SO_PEEK_OFF`
/// at the cursor where the socket has it; where it has not (TCP before 6.9, IPv6 before 6.12) the
/// peek returns `-EAGAIN`, blocking or not, until the bytes before the mark are consumed (poll
/// still reports the socket readable meanwhile).
// doc-end
///
/// Descriptors (an AF_UNIX peer's `SCM_RIGHTS`):
// doc-copy: peeker.descriptors
/// a peeker never hands them over. Its peeks pass no control buffer, so the descriptors stay queued
/// with their bytes; its consume receives those that came with the bytes it drops (close-on-exec)
/// and closes them at once, counted in `lowcopy_peek_stats.fds_closed`: none is left open, none is
/// kept. The kernel hands over a message's descriptors with its first byte read, so a consume that
/// ends inside a message takes all of them. It ends every read and every peek after a message that
/// carried descriptors (net/unix/af_unix.c `unix_stream_read_generic`): a peek that reaches one
/// returns short, as a read does, and the next continues after it, so peeks deliver byte for byte
/// what reads deliver; a consume reads on until it has dropped `n` bytes. A discard peek whose
/// prefix reaches such a message peeks once with `SO_PEEK_OFF` at the cursor, as past an urgent
/// mark (AF_UNIX has it since 3.4). The consume's control buffer holds the most descriptors one
/// message carries (253, `SCM_MAX_FD`), so the kernel never closes any for lack of room
/// (`MSG_CTRUNC`). A caller that wants the descriptors reads those bytes itself, with `recvmsg` and
/// a control buffer, and reports them with `lowcopy_peeker_note_consumed`.
// doc-end
///
/// The fd stays owned by the caller and must stay open until `lowcopy_peeker_free`.
// doc-copy: peeker.exclusive
/// Other code must not read from the socket or change `SO_PEEK_OFF` while the peeker lives: reads
/// through `lowcopy_peeker_consume` keep the cursor right, and a read by another path must be
/// reported with `lowcopy_peeker_note_consumed`.
// doc-end
///
/// Errors: `-EINVAL` (`out` NULL, unknown mode or mode bit, `LOWCOPY_PEEK_OFFSET` with
/// `LOWCOPY_PEEK_URGENT_CALLER`), `-EOPNOTSUPP` (`LOWCOPY_PEEK_URGENT_CALLER` on AF_UNIX),
/// `-ENOMEM`,
// doc-copy: peeker_new.errors
/// `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket; or
/// `LOWCOPY_PEEK_OFFSET` on a socket without `SO_PEEK_OFF`), `-ENOTCONN` (a listening TCP or MPTCP
/// socket) and `-EINVAL` (a listening AF_UNIX socket): a listening socket is no connection, refused
/// with the errno its `recv` gives; `-EPROTOTYPE` (a stated kind that is not the socket's);
/// `setsockopt`/`getsockopt` errors.
// doc-end
///
/// Syscalls: getsockopt, setsockopt, brk, mmap, munmap, mremap, mprotect, madvise, getrandom,
/// futex.
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
#[cfg(lowcopy_full)]
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_new(
    fd: c_int,
    mode: u32,
    out: *mut *mut lowcopy_peeker,
) -> c_int {
    let opts = c_mode(mode);
    let wrap = |g| lowcopy_peeker {
        t: Tagged { tag: TAG_HEAP, g },
    };
    // SAFETY: `out` is NULL or writable for one pointer per the caller's contract.
    unsafe { new_handle(fd, out, wrap, |fd| Peeker::with_options(fd, opts?)) }
}

/// Copies up to `len` bytes at the cursor into `buf`; the cursor advances by the result.
///
// doc-copy: peek.returns
/// Returns bytes copied (> 0); 0 at end of stream after the cursor (the peer shut down; the bytes
/// before the cursor are still queued and readable); `-EAGAIN` when nothing lies beyond the cursor
/// and the call may not wait (`MSG_DONTWAIT`, or a non-blocking fd).
// doc-end
// doc-copy: peek.wait
/// A blocking peek returns as soon as one byte beyond the cursor is there (with the armed low-water
/// mark too; a socket's own `SO_RCVLOWAT` above 1 makes the kernel wait for that many bytes beyond
/// the cursor, as recv does), or with `-EAGAIN` when `SO_RCVTIMEO` runs out.
// doc-end
// doc-copy: peek.eintr
/// A signal ends it with `-EINTR` (on a socket without `SO_PEEK_OFF`, MPTCP or a kernel before 6.9,
/// a signal in the last 10 ms before the timeout reads as `-EAGAIN`: the kernel keeps the timeout
/// in jiffies).
// doc-end
// doc-copy: peek.window
/// Peeked bytes stay in the receive buffer: when they fill it (small segments cost far more kernel
/// memory than their payload) the peer's window is closed and a blocking peek waits until something
/// is consumed, so a caller that may block there sets `SO_RCVTIMEO` or consumes acknowledged bytes
/// first.
// doc-end
///
/// Errors: `-EINVAL` (`p` or `buf` NULL, `len` 0 or above `SSIZE_MAX`, flags other than
/// `MSG_DONTWAIT`),
// doc-copy: peek.errors
/// `-EOVERFLOW` (cursor beyond what the mechanism can represent), `-ECONNRESET`, `-EINTR` and other
/// `recvmsg` errors.
// doc-end
///
/// Syscalls: recvfrom, recvmsg, setsockopt, getsockopt, poll, fcntl, clock_gettime, ioctl.
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
/// Syscalls: recvfrom, recvmsg, setsockopt, getsockopt, poll, fcntl, clock_gettime, ioctl.
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

// doc-copy: seek.kernel
/// Moves the cursor to `offset` bytes after the head of the receive queue: back to retransmit, or
/// ahead to skip bytes without copying them (offset mechanism; the discard one copies them at the
/// next peek). Makes no syscall unless the low-water mark is armed.
// doc-end
/// Returns 0.
///
/// Errors: `-EINVAL` (`p` NULL),
// doc-copy: seek.errors
/// `-EOVERFLOW` if the mechanism cannot represent the offset (`INT_MAX` for `SO_PEEK_OFF`, 1023 x
/// 64 KiB for the discard prefix); with the low-water mark armed, its `setsockopt` errors. The
/// cursor is then unchanged.
// doc-end
///
/// Syscalls: setsockopt.
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_seek(p: *mut lowcopy_peeker, offset: size_t) -> c_int {
    let run = |p: &mut CPeeker| ret_unit(p.seek(offset));
    // SAFETY: `p` is NULL or a live, unaliased peeker per the caller's contract.
    unsafe { with_handle(p, run) }
}

// doc-copy: peeker_consume.kernel
/// Drops up to `n` acknowledged bytes from the head of the receive queue and moves the cursor back
/// by the bytes dropped (never below 0). Never blocks. Returns bytes dropped: fewer than `n` when
/// fewer are queued, 0 for `n` 0 or at end of stream. TCP and MPTCP drop them without copying
/// (`MSG_TRUNC`); AF_UNIX reads them into a scratch buffer, on past messages that carry
/// descriptors, and closes the descriptors that came with them (`lowcopy_peek_stats.fds_closed`).
// doc-end
///
/// Errors: `-EINVAL` (`p` NULL),
// doc-copy: peeker_consume.errors
/// `-EAGAIN` when nothing is queued; `recv` errors (`-ECONNRESET`, ...); with the low-water mark
/// armed, its `setsockopt` errors (the bytes were dropped and the cursor moved).
// doc-end
///
/// Syscalls: recvfrom, recvmsg, setsockopt, ioctl, close (descriptors that came with the bytes).
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
/// (`lowcopy_zcrx_recv` or a plain read on the same fd).
// doc-copy: note_consumed.kernel
/// The cursor moves back by `n` (never below 0), as `lowcopy_peeker_consume` would move it, with no
/// syscall unless the low-water mark is armed (it follows the cursor): both of those paths lower
/// the kernel's `SO_PEEK_OFF` by what they take (the zero-copy receiver corrects the kernel, which
/// forgets to for mapped bytes), so cursor and kernel stay together.
// doc-end
/// Returns 0; `-EINVAL` for NULL, and with the low-water mark armed its `setsockopt` errors
/// (the cursor moved).
///
/// Syscalls: setsockopt.
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
/// Syscalls: none.
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
/// Syscalls: none.
///
/// # Safety
/// `p` must be NULL or a live peeker.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_mode(p: *const lowcopy_peeker) -> u32 {
    // SAFETY: NULL or a live peeker per the caller's contract.
    unsafe { with_handle_ref(p, 0, 0, |p| p.mode() as u32) }
}

/// Arms (`on` != 0) or disarms the low-water mark. Returns 0.
///
// doc-copy: lowat_armed.kernel
/// While armed, `SO_RCVLOWAT` is kept at cursor + 1 bytes so that poll/epoll report the socket
/// readable only when a byte beyond the cursor is queued (they ignore `SO_PEEK_OFF`), and
/// level-triggered loops do not spin. Blocking peeks still return as soon as one new byte is there.
///
/// The mark follows seek and consume at once; after peeks it is raised lazily, when a peek finds
/// nothing beyond the cursor (`-EAGAIN`), so the data path costs no extra syscall. The kernel caps
/// `SO_RCVLOWAT` at `tcp_rmem[2]/2` (16 MiB by default; `SO_RCVBUF/2` when locked; net/ipv4/tcp.c
/// `tcp_set_rcvlowat`): past that cursor poll cannot be kept quiet. Nor can it when the receive
/// queue, full of peeked but unconsumed bytes, puts the socket under memory pressure (more than 7/8
/// of `SO_RCVBUF` in kernel memory, which small segments reach with a few KiB of payload) or
/// shrinks its window to one MSS: TCP then reports `-EPOLLIN` whatever the mark
/// (`tcp_epollin_ready`, net/ipv4/tcp.c). A level-triggered loop that gets `-EAGAIN` from the peek
/// should stop listening for `-EPOLLIN` until it consumes. Setting the mark grows an unlocked
/// receive buffer to about twice the mark. Disarming, and releasing the peeker, restore the value
/// found when arming.
// doc-end
/// (examples/c/peek_relay.c stops listening so.)
///
/// Errors: `-EINVAL` (`p` NULL),
// doc-copy: lowat_armed.errors
/// `-EOPNOTSUPP` on AF_UNIX (its poll ignores `SO_RCVLOWAT`, net/unix/af_unix.c), and
/// `getsockopt`/`setsockopt` errors.
// doc-end
///
/// Syscalls: getsockopt, setsockopt.
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
/// Syscalls: none.
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

/// Releases a peeker.
// doc-copy: peeker_drop.kernel
/// Restores `SO_RCVLOWAT` if the mark was armed, leaves `SO_PEEK_OFF` disabled (-1) if this peeker
/// used it, and `TCP_INQ` off (0) if it set it (the discard mechanism on TCP).
// doc-end
/// Does not close the fd; call it before closing the fd. NULL is a no-op. A peeker made by `lowcopy_peeker_init` is released in place: its memory stays the
/// caller's (it may be reused for another `lowcopy_peeker_init`), its `uint64_t` at the start
/// then `LOWCOPY_PEEKER_RELEASED`.
///
/// Syscalls: setsockopt, brk, munmap, madvise, futex, mmap, mremap, mprotect, getrandom.
///
/// # Safety
/// `p` must be NULL or a live peeker not yet released.
#[cfg(lowcopy_full)]
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_free(p: *mut lowcopy_peeker) {
    // SAFETY: NULL or a live peeker not yet released, per the caller.
    unsafe { release(p, false) };
}

/// Size of caller memory `lowcopy_peeker_init` needs, in bytes (at most `LOWCOPY_PEEKER_SIZE`
/// for this header's library). No syscall.
///
/// Syscalls: none.
#[no_mangle]
pub extern "C" fn lowcopy_peeker_size() -> size_t {
    core::mem::size_of::<lowcopy_peeker>()
}
crate::versions::default_version!("lowcopy_peeker_size", "LOWCOPY_0.3");

/// Creates a peek cursor over the stream socket `fd` in caller memory `mem` (`size` bytes,
/// aligned to `LOWCOPY_PEEKER_ALIGN`; a `lowcopy_peeker_storage` will do) and writes the
/// handle to `*out`. Allocates nothing, then or later: every call on the handle runs in that
/// memory, the stack (at most 16 KiB, for a discard prefix's iovecs) and, for the discard
/// mechanism, one static 64 KiB scratch buffer shared by the process.
///
/// `domain` and `protocol` state what the socket is, as given to `socket(2)`: `AF_INET` or
/// `AF_INET6` with `IPPROTO_TCP` (or 0) or `IPPROTO_MPTCP`, or `AF_UNIX` with 0. The peeker
/// then checks the kind (one `getsockopt` on TCP, two on MPTCP and AF_UNIX, below) instead of
/// learning it (three): `SO_PEEK_OFF` then costs two `setsockopt`s (`SO_PEEK_OFF` and
/// `SO_OOBINLINE`), the discard mechanism a `getsockopt`, on TCP and MPTCP the `TCP_INQ`
/// `setsockopt` and the `SO_OOBINLINE` `setsockopt` (and a `setsockopt` more if `SO_PEEK_OFF`
/// was on). `AF_UNSPEC` (0) with 0 asks the socket instead
/// (3 `getsockopt`, as `lowcopy_peeker_new`).
// doc-copy: peeker_kind.wrong
/// Stating the kind wrong loses nothing: the kind is checked before any byte is read, and a socket
/// that is not of it fails with `-EPROTOTYPE` (a datagram socket, whose consume would drop a whole
/// datagram; an AF_UNIX stream stated as TCP or MPTCP). The check costs one syscall per peeker on
/// TCP, `getsockopt(TCP_INFO)` (only TCP and MPTCP sockets answer it, with their state), and two on
/// MPTCP (`SO_PROTOCOL` is TCP or MPTCP: an MPTCP listener hands out TCP sockets to peers without
/// MPTCP) and AF_UNIX (`SO_TYPE` is a stream): each also tells a listening socket, refused as by
/// `lowcopy_peeker_new`. It does not tell IPv4 from IPv6 or TCP from MPTCP, nor a TCP socket stated
/// as AF_UNIX: stated wrong among those, a peeker peeks and consumes right, but may cost more (a
/// TCP consume copies, as on AF_UNIX) or fail where the real socket does (`-EOPNOTSUPP` for
/// `LOWCOPY_PEEK_OFFSET` on MPTCP), and `LOWCOPY_PEEK_AUTO` may note the answer of `SO_PEEK_OFF`
/// for the family stated, not the socket's.
// doc-end
///
/// `mode` as in `lowcopy_peeker_new`. The fd stays the caller's and must stay open until the
/// peeker is released (`lowcopy_peeker_release` or `lowcopy_peeker_free`, which leave `mem`
/// to the caller). `mem` must not be moved, copied or reused while the peeker lives.
///
/// Errors: `-EINVAL` (`mem` or `out` NULL, `size` below `lowcopy_peeker_size()`, `mem` not
/// aligned, unknown `mode` or mode bit, `LOWCOPY_PEEK_OFFSET` with
/// `LOWCOPY_PEEK_URGENT_CALLER`, a `domain`/`protocol` pair other than those above),
/// `-EOPNOTSUPP` (`LOWCOPY_PEEK_URGENT_CALLER` on AF_UNIX),
// doc-copy: peeker_new.errors
/// `-EBADF`, `-ENOTSOCK`, `-EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket; or
/// `LOWCOPY_PEEK_OFFSET` on a socket without `SO_PEEK_OFF`), `-ENOTCONN` (a listening TCP or MPTCP
/// socket) and `-EINVAL` (a listening AF_UNIX socket): a listening socket is no connection, refused
/// with the errno its `recv` gives; `-EPROTOTYPE` (a stated kind that is not the socket's);
/// `setsockopt`/`getsockopt` errors.
// doc-end
/// On success `*out` is `mem` itself: the handle is the caller's memory, so a table of
/// `lowcopy_peeker_storage` needs no pointer beside each entry. Nothing is written to `*out` or
/// `mem` on error.
///
/// Syscalls: getsockopt, setsockopt.
///
/// # Safety
/// `mem` must be NULL or writable for `size` bytes; `out` NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_init(
    mem: *mut c_void,
    size: size_t,
    fd: c_int,
    mode: u32,
    domain: c_int,
    protocol: c_int,
    out: *mut *mut lowcopy_peeker,
) -> c_int {
    guard(-ENOTRECOVERABLE, || {
        let at = mem.cast::<lowcopy_peeker>();
        if mem.is_null()
            || out.is_null()
            || size < core::mem::size_of::<lowcopy_peeker>()
            || !at.is_aligned()
        {
            return -EINVAL;
        }
        let opts = match c_mode(mode) {
            Ok(o) => o,
            Err(e) => return neg(e),
        };
        let kind = match StreamKind::from_raw(domain, protocol) {
            Ok(k) => k,
            Err(e) => return neg(e),
        };
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e,
        };
        let made = Peeker::with_options(fd, PeekerOptions { kind, ..opts });
        match made {
            Ok(inner) => {
                let h = lowcopy_peeker {
                    t: Tagged {
                        tag: LOWCOPY_PEEKER_LIVE,
                        g: Guarded::new(inner),
                    },
                };
                // SAFETY: `mem` is non-null, aligned and writable for `size` >= the handle's
                // size per the checks above and the caller's contract; whatever it held is
                // overwritten, not dropped (it is the caller's raw memory).
                unsafe { at.write(h) };
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { out.write(at) };
                0
            }
            Err(e) => neg(e),
        }
    })
}
crate::versions::default_version!("lowcopy_peeker_init", "LOWCOPY_0.3");

/// Releases a peeker, made by `lowcopy_peeker_new` (freed) or `lowcopy_peeker_init` (its
/// memory left to the caller). `flags` 0: as `lowcopy_peeker_free`, restoring the socket's
/// options (a `setsockopt` for `SO_PEEK_OFF` if the peeker used it, one for `SO_RCVLOWAT` if
/// the mark was armed, one for `TCP_INQ` if the discard mechanism set it).
/// `LOWCOPY_RELEASE_CLOSING`: the caller closes the fd next, so nothing is restored and no
/// syscall is made. The `uint64_t` at a released peeker's caller memory then reads
/// `LOWCOPY_PEEKER_RELEASED` (it read `LOWCOPY_PEEKER_LIVE` while the peeker lived).
///
/// Returns 0; `-EINVAL` for NULL or unknown flags (the peeker is then not released);
/// `-ENOTRECOVERABLE` when a call on the peeker panicked before (it is released all the same).
///
/// Syscalls: setsockopt, brk, munmap, madvise, futex, mmap, mremap, mprotect, getrandom (none with
/// `LOWCOPY_RELEASE_CLOSING`).
///
/// # Safety
/// `p` must be NULL or a live peeker not yet released.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_release(p: *mut lowcopy_peeker, flags: u32) -> c_int {
    if p.is_null() || flags & !LOWCOPY_RELEASE_CLOSING != 0 {
        return -EINVAL;
    }
    // SAFETY: a live peeker not yet released, per the caller.
    unsafe { release(p, flags & LOWCOPY_RELEASE_CLOSING != 0) }
}
crate::versions::default_version!("lowcopy_peeker_release", "LOWCOPY_0.3");

/// Takes the peeker out of its memory (the heap's, freed; or the caller's, left as it is) and
/// drops it: restoring the socket's options unless `closing` or a call on it panicked.
/// 0, or `-ENOTRECOVERABLE` for a peeker on which a call panicked (or a panic now).
///
/// # Safety
/// `p` must be NULL or a live peeker not yet released.
unsafe fn release(p: *mut lowcopy_peeker, closing: bool) -> c_int {
    if p.is_null() {
        return 0;
    }
    // SAFETY: a live peeker per the caller: readable, and its tag says who owns its memory.
    let h = if unsafe { (*p).t.tag } == LOWCOPY_PEEKER_LIVE {
        // SAFETY: moved out of the caller's memory exactly once; the memory is not freed.
        let h = unsafe { p.read() };
        // SAFETY: the caller's memory, writable and aligned (init checked), now holds no
        // peeker: the tag tells the caller so.
        unsafe { (&raw mut (*p).t.tag).write(LOWCOPY_PEEKER_RELEASED) };
        h
    } else {
        #[cfg(lowcopy_full)]
        // SAFETY: allocated by Box::into_raw in lowcopy_peeker_new, freed only here, once.
        let h = *unsafe { Box::from_raw(p) };
        // liblowcopy_peek.a has no lowcopy_peeker_new: memory not tagged live holds no peeker.
        #[cfg(not(lowcopy_full))]
        return -EINVAL;
        #[cfg(lowcopy_full)]
        h
    };
    let panicked = h.t.g.panicked();
    let run = move || {
        if closing {
            // Not restored: the socket is about to be closed.
            let _ = h.t.g.inner.into_inner_unrestored();
        } else {
            drop(h);
        }
    };
    #[cfg(lowcopy_full)]
    let _no_cancel = crate::NoCancel::new();
    match catch(run) {
        Ok(()) if !panicked => 0,
        _ => -ENOTRECOVERABLE,
    }
}

/// Copies up to `len` bytes at `offset` (bytes after the head of the receive queue: the
/// caller's own stream arithmetic) into `buf`, and says what it peeked from where in `*res`
/// (`res_size` = `sizeof(lowcopy_peek_result)`, the growth rule; `res` may be NULL). The
/// cursor ends at `offset` + the bytes peeked, as after `lowcopy_peeker_seek` and
/// `lowcopy_peeker_peek`.
///
/// Returns bytes copied (> 0); 0 at end of stream after `offset`; `-EAGAIN` when nothing lies
/// beyond `offset` and `flags` has `MSG_DONTWAIT` or the fd is non-blocking; blocking as
/// `lowcopy_peeker_peek`.
///
// doc-copy: peek_at_cursor.cost
/// Cost with `SO_PEEK_OFF` (`LOWCOPY_PEEK_OFFSET`, and `LOWCOPY_PEEK_AUTO` when it picked it): one
/// `recv`/`recvmsg` when the kernel's offset is already at `offset` (after a peek that ended there,
/// or a consume that moved both back), a `setsockopt` and the `recv` when it must be moved (so a
/// rewind writes `SO_PEEK_OFF` once); never a classification. `LOWCOPY_PEEK_AUTO` peeks an `offset`
/// at most 4096 bytes ahead of the kernel's offset from there, with a discard prefix over the bytes
/// between (one `recvmsg`, no `setsockopt`); `LOWCOPY_PEEK_OFFSET_OR_DISCARD` never does. The
/// discard mechanism: one `recvmsg` per peek that finds bytes, and on TCP and MPTCP one per peek
/// that finds nothing past `offset` with `MSG_DONTWAIT` (`TCP_INQ`'s hint says no more is queued
/// and the peer has not ended), and on AF_UNIX two (the `recvmsg` and a `poll`: a stream peek from
/// the head tells neither the peer's shutdown nor an out-of-band byte ahead, which `POLLRDHUP` and
/// `POLLPRI` do; a message with control data shows as `MSG_CTRUNC`; the offset mechanism costs one
/// there); more iovecs than fit beside the prefix below `IOV_MAX` split the peek into several
/// `recvmsg`, each into as many as fit, until one comes back short. Beyond those: with the
/// low-water mark armed, a blocking call lowers it first (a `setsockopt`) and one that finds
/// nothing sets it to `offset` + 1 (a `setsockopt`); the discard mechanism, finding nothing past
/// `offset` where neither settles it (an urgent mark or out-of-band byte, control data, which
/// credentials with `SO_PASSCRED` add to every message, bytes arriving meanwhile, a blocking call),
/// asks `ioctl(FIONREAD)` about a mark, `poll` whether the peer ended and `fcntl` whether the fd
/// blocks, and waits as a peek at the cursor does. A reset (or a connection error) that leaves
/// bytes queued before `offset` is not seen by that one `recvmsg`: a non-blocking peek there
/// returns `-EAGAIN` (`poll` reports `POLLHUP`/`POLLERR`) until a blocking peek or a consume
/// reports it.
// doc-end
/// A moved offset sets `LOWCOPY_PEEK_MOVED` in `res->flags`, a discard prefix
/// `LOWCOPY_PEEK_PREFIXED`.
///
/// `res->stream_pos` is the stream position of `offset`: the bytes this peeker dropped
/// (`lowcopy_peeker_consume`, `lowcopy_peeker_note_consumed`) plus `offset`. A caller that
/// keeps its own sequence numbers compares it with its own: an offset that missed a consume
/// shows there rather than as wrong bytes. `res` is written only on success.
///
/// Errors: `-EINVAL` also for `res_size` out of range with a non-NULL `res`;
// doc-copy: peek_at_cursor.errors
/// As a peek at the cursor (the cursor is then at `offset`); `-EOVERFLOW` (`offset` beyond what the
/// mechanism can represent: `INT_MAX` with `SO_PEEK_OFF`, 1023 x 64 KiB with the discard prefix,
/// for any number of iovecs up to `IOV_MAX`; the cursor is then unchanged).
// doc-end
///
/// Syscalls: recvfrom, recvmsg, setsockopt, getsockopt, poll, fcntl, clock_gettime, ioctl.
///
/// # Safety
/// `p` must be NULL or a live peeker; `buf` NULL or writable for `len` bytes; `res` NULL or
/// writable for `res_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_peek_at(
    p: *mut lowcopy_peeker,
    offset: size_t,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    res: *mut PeekResult,
    res_size: size_t,
) -> ssize_t {
    if buf.is_null() {
        return -EINVAL as ssize_t;
    }
    let iov = iovec {
        iov_base: buf,
        iov_len: len,
    };
    // SAFETY: forwarded caller contract.
    unsafe { lowcopy_peeker_peekv_at(p, offset, &iov, 1, flags, res, res_size) }
}
crate::versions::default_version!("lowcopy_peeker_peek_at", "LOWCOPY_0.3");

/// `lowcopy_peeker_peek_at` into `iovcnt` iovecs (1 to 1024; with a discard prefix the prefix
/// shares that budget). Errors as `lowcopy_peeker_peek_at`, plus `-EINVAL` for NULL `iov` or
/// `iovcnt <= 0` and `-EMSGSIZE` for `iovcnt > 1024`.
///
/// Syscalls: recvfrom, recvmsg, setsockopt, getsockopt, poll, fcntl, clock_gettime, ioctl.
///
/// # Safety
/// `p` must be NULL or a live peeker; `iov` NULL or `iovcnt` iovecs over writable memory;
/// `res` NULL or writable for `res_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_peeker_peekv_at(
    p: *mut lowcopy_peeker,
    offset: size_t,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
    res: *mut PeekResult,
    res_size: size_t,
) -> ssize_t {
    let run = |p: &mut CPeeker| {
        if !res.is_null() {
            if let Err(e) = check_size(res_size) {
                return e as ssize_t;
            }
        }
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
        match unsafe { p.peek_at_raw(offset, iov, flags) } {
            Ok(r) => {
                if !res.is_null() {
                    // SAFETY: non-null and writable for `res_size` (checked) bytes.
                    unsafe { write_sized(res.cast::<u8>(), res_size, &r) };
                }
                r.len as ssize_t
            }
            Err(e) => neg(e) as ssize_t,
        }
    };
    // SAFETY: `p` is NULL or a live, unaliased peeker per the caller's contract.
    unsafe { with_handle(p, run) }
}
crate::versions::default_version!("lowcopy_peeker_peekv_at", "LOWCOPY_0.3");
