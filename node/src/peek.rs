//! Offset peek: `peekAt`, `peekInto`, `consume`, `peekSupported` (one-off calls on any
//! descriptor) and the `Peeker` cursor.

use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr;
use std::sync::Arc;

use lowcopy::{Flags, PeekMode};
use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::args::{self, alloc_len, size, with_fd};
use crate::error::{Fail, OrThrow};
use crate::teardown::BufferTask;

/// Options of a peek or consume.
// Read field by field by the calls (for their TypeErrors); here for the types.
#[allow(dead_code)]
#[napi(object)]
pub struct PeekOptions {
    /// Do not wait (`MSG_DONTWAIT`): `EAGAIN` instead of sleeping when nothing lies beyond the
    /// offset. Sockets Node created are non-blocking anyway (libuv sets `O_NONBLOCK`, which a
    /// duplicate shares), so every call on them behaves so.
    pub dont_wait: Option<bool>,
    /// The C flag bits instead (`MSG_DONTWAIT` = 0x40), for code ported from C: any other bit
    /// is `EINVAL`.
    pub flags: Option<i32>,
}

/// A writable byte view of a `Buffer`/`TypedArray`/`DataView` argument (its own bytes:
/// `byteOffset` and `byteLength` are honoured, so a pooled `Buffer` slice is written only where
/// it lies), or a `TypeError`.
pub(crate) fn bytes_arg<'a>(env: &Env, v: &Unknown<'a>, name: &str) -> Result<View<'a>> {
    view(env, v).ok_or_else(|| bytes_error(env, name, v))
}

fn bytes_error(env: &Env, name: &str, v: &Unknown) -> Error {
    let must = "an instance of Buffer, TypedArray, or DataView";
    crate::error::arg_type_error(env, name, must, v)
}

/// `v`'s bytes if it is an `ArrayBufferView`, with its ArrayBuffer (which a send's transfer
/// guard needs: asked in the same query, about 220 instructions less than a query of its own).
fn view<'a>(env: &Env, v: &Unknown<'a>) -> Option<View<'a>> {
    use napi::sys::{self as ns, Status::napi_ok as OK, TypedarrayType::uint8_array as U8};
    let (e, mut ty, mut n) = (env.raw(), U8, 0);
    let (mut data, mut ab, no) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: plain N-API queries on a live value of this call into locals: a TypedArray's
    // elements (a `Buffer`'s are bytes; other types are asked for their bytes), a DataView's.
    let ok = unsafe {
        if ns::napi_get_typedarray_info(e, v.raw(), &mut ty, &mut n, &mut data, &mut ab, no) == OK {
            ty == U8 || ns::napi_get_buffer_info(e, v.raw(), &mut data, &mut n) == OK
        } else {
            ns::napi_get_dataview_info(e, v.raw(), &mut n, &mut data, &mut ab, no) == OK
        }
    };
    ok.then(|| View {
        ptr: args::nonnull(data, n),
        len: n,
        ab,
        _scope: std::marker::PhantomData,
    })
}

/// [`bytes_arg`] of each element of the array argument `name` (`name[i]` in errors).
pub(crate) fn views_arg<'a>(env: &Env, v: &Unknown<'a>, name: &str) -> Result<Vec<View<'a>>> {
    views_of(env, &args::array(env, v, name)?, name)
}

/// [`bytes_arg`] of each of `items`, the elements of the array argument `name`.
pub(crate) fn views_of<'a>(env: &Env, items: &[Unknown<'a>], name: &str) -> Result<Vec<View<'a>>> {
    // The element's name is made only for an error (a `format!` per element cost 870
    // instructions a buffer in `sendBatch`).
    let mut v = Vec::with_capacity(items.len());
    for (i, b) in items.iter().enumerate() {
        v.push(view(env, b).ok_or_else(|| bytes_error(env, &format!("{name}[{i}]"), b))?);
    }
    Ok(v)
}

/// The bytes of an `ArrayBufferView` argument, for the call it was passed to (the value is
/// alive for the callback's scope: `'a`). Raw, not a `&mut [u8]`: JS can pass one buffer
/// twice (`peekv([b, b])`), and two live `&mut` over one memory would be undefined behaviour.
///
/// The address is good only until JS runs: a getter of an options object or of `{ fd }`, an
/// array element's getter, a `valueOf`, can transfer the ArrayBuffer (which frees or moves its
/// bytes) or let the GC have it. So a call takes its views after every argument read that can
/// run JS, and runs none until the syscall is done: the transfer guard of a zerocopy send runs
/// no code of the caller's (`lowcopy.js`), and a send's buffers are held before it.
pub(crate) struct View<'a> {
    ptr: *mut u8,
    len: usize,
    /// Its ArrayBuffer.
    ab: napi::sys::napi_value,
    _scope: std::marker::PhantomData<&'a mut [u8]>,
}

impl View<'_> {
    /// The bytes, to read (a send): shared borrows may alias.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes (or dangling with len 0) while the value is
        // alive, which `'a` covers; nothing writes through it during the borrow (the JS thread
        // is inside this call).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, to write, for a call that takes exactly one buffer (so no other view of
    /// the same memory exists in the call).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`; the caller holds the only view of this memory in the call.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// An iovec over the bytes, for the core's raw entry points.
    pub(crate) fn iovec(&self) -> libc::iovec {
        libc::iovec {
            iov_base: self.ptr.cast(),
            iov_len: self.len,
        }
    }

    /// Its ArrayBuffer.
    pub(crate) fn array_buffer(&self) -> napi::sys::napi_value {
        self.ab
    }
}

/// Peeks up to `length` bytes lying `offset` bytes after the head of `fd`'s receive queue,
/// without consuming them; returns them as a new `Buffer` (empty at end of stream).
///
/// `length` above 2147483647 (`INT_MAX`, the most one receive returns) is a `RangeError`.
// doc-copy: recv_buffer_len.kernel
/// A call that allocates its result sizes it by what the socket can hold rather than by the size
/// asked for alone: up to 256 KiB the size asked for; above that, at least 256 KiB and otherwise
/// the larger of the bytes queued now (`SIOCINQ`) and the socket's receive buffer (`SO_RCVBUF` as
/// the kernel reports it), never more than asked. Everything queued at the call fits; bytes that
/// arrive while the call waits fit too on TCP (its window keeps the queue within about
/// `SO_RCVBUF`), and on AF_UNIX streams (bounded by the sender's `SO_SNDBUF`) may be more, left
/// queued for the next call: the result is then shorter than the size asked for, as any receive may
/// be. Cost: a `getsockopt` and an `ioctl` when the size asked for is above 256 KiB, none
/// otherwise.
// doc-end
///
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
/// Errors: `EAGAIN` when nothing lies beyond `offset` and the call may not wait;
// doc-copy: peek_at.errors
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), `EOVERFLOW`
/// (`offset` beyond what the mechanism can represent: `INT_MAX` for `SO_PEEK_OFF`, 1023 x 64 KiB
/// for the discard prefix, whose peek into more iovecs than fit beside it is split into several
/// `recvmsg`; never truncated), `ECONNRESET` and other `recvmsg` errors.
// doc-end
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, offset: number, length: number, options?: PeekOptions"
)]
pub fn peek_at(
    env: Env,
    fd: Unknown,
    offset: Unknown,
    length: Unknown,
    options: Option<Unknown>,
) -> Result<Buffer> {
    let offset = size(&env, &offset, "offset")?;
    let len = alloc_len(&env, &length, "length")?;
    let flags = args::flags(&env, options.as_ref(), "peekAt", false)?;
    let mut buf = Vec::new();
    let n = with_fd(&env, &fd, "peekAt", |fd| {
        buf = args::try_alloc(lowcopy::recv_buffer_len(fd, len))?;
        lowcopy::peek_at(fd, offset, &mut [IoSliceMut::new(&mut buf)], flags)
    })?;
    Ok(args::into_buffer(buf, n))
}

/// [`peek_at`] into the caller's `buf` (its own `byteLength` bytes at its `byteOffset`); returns
/// the bytes written, 0 at end of stream.
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, offset: number, buf: ArrayBufferView, options?: PeekOptions"
)]
pub fn peek_into(
    env: Env,
    fd: Unknown,
    offset: Unknown,
    buf: Unknown,
    options: Option<Unknown>,
) -> Result<u32> {
    let offset = size(&env, &offset, "offset")?;
    let flags = args::flags(&env, options.as_ref(), "peekInto", false)?;
    let fd = args::borrowed_fd(&env, &fd, "peekInto")?;
    let mut b = bytes_arg(&env, &buf, "buf")?; // last: see `View`
    let n = lowcopy::peek_at(fd, offset, &mut [IoSliceMut::new(b.bytes_mut())], flags);
    Ok(n.or_throw(&env, "peekInto")? as u32)
}

/// Drops up to `n` bytes from the head of `fd`'s receive queue; returns the bytes dropped.
// doc-copy: consume.kernel
/// TCP and MPTCP use `recv(NULL, n, MSG_TRUNC)`, which copies nothing; AF_UNIX stream has no such
/// path and reads them into a scratch buffer, on past messages that carry descriptors, and closes
/// the descriptors that came with the bytes dropped. The kernel lowers `SO_PEEK_OFF` by the bytes
/// dropped. Returns 0 for `n` 0 or at end of stream.
// doc-end
///
/// Errors:
// doc-copy: consume.errors
/// `EAGAIN` when nothing is queued and the call may not block (`dontWait` or a non-blocking fd);
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), and `recv` errors
/// (`ECONNRESET`, `EINTR`, ...).
// doc-end
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, n: number, options?: PeekOptions"
)]
pub fn consume(env: Env, fd: Unknown, n: Unknown, options: Option<Unknown>) -> Result<f64> {
    let n = size(&env, &n, "n")?;
    let flags = args::flags(&env, options.as_ref(), "consume", false)?;
    let r = with_fd(&env, &fd, "consume", |fd| lowcopy::consume(fd, n, flags))?;
    Ok(r as f64)
}

/// Whether `SO_PEEK_OFF` works on this stream socket.
// doc-copy: peek_supported.kernel
/// TCP over IPv4 has it since Linux 6.9, over IPv6 since 6.12, AF_UNIX stream since 3.4; MPTCP
/// never. Leaves the socket's `SO_PEEK_OFF` value as it was (reads it, writes it back).
// doc-end
///
/// Errors:
// doc-copy: peek_supported.errors
/// `EBADF` (not an open fd), `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket:
/// lowcopy's peek does not apply; UDP and other datagram sockets neither).
// doc-end
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }"
)]
pub fn peek_supported(env: Env, fd: Unknown) -> Result<bool> {
    with_fd(&env, &fd, "peekSupported", |fd| lowcopy::peek_supported(fd))
}

type Core = lowcopy::Peeker<OwnedFd>;

/// The core peeker behind a JS `Peeker`: shared with a `peekAsync` running on its own thread.
type Shared = crate::shared::Shared<Core>;

impl Shared {
    /// `Peeker.peekInto`'s work (the class method's, which read the options into `f` first, and
    /// the bound function's, which takes none).
    fn peek_into(&self, env: &Env, buf: &Unknown, f: Flags) -> Result<u32> {
        // The memory stays valid for the call: the argument keeps its ArrayBuffer alive, and no
        // JS runs from here until we return (no transfer, detach or resize in between).
        let iov = [bytes_arg(env, buf, "buf")?.iovec()];
        // SAFETY: the iovec covers the caller's view, writable and alive for this call.
        let n = self.with(env, "peekInto", |p| unsafe { p.peek_raw(&iov, f) })?;
        Ok(n as u32)
    }

    /// `Peeker.seek`'s work (the class method's and the bound function's).
    fn seek(&self, env: &Env, offset: &Unknown) -> Result<()> {
        let off = size(env, offset, "offset")?;
        self.with(env, "seek", |p| p.seek(off))
    }
}

/// The names of the `mode` option, in the order its error lists them.
const MODES: &[(&str, PeekMode)] = &[
    ("auto", PeekMode::Auto),
    ("offset", PeekMode::Offset),
    ("discard", PeekMode::Discard),
    ("offset_or_discard", PeekMode::OffsetOrDiscard),
];

/// Counters of a `Peeker` (bytes in bytes); see the core's `PeekStats`.
#[napi(object)]
pub struct PeekStats {
    // doc-copy: peek_stats.syscalls
    /// Syscalls the peeker made, failed ones included, its constructor's too: 2 to 4 setting the
    /// socket up (`SO_PEEK_OFF`; `TCP_INQ` for the discard mechanism on TCP and MPTCP;
    /// `SO_OOBINLINE`), and before them the 3 `getsockopt` of `new Peeker` without a `kind` that
    /// learn what the socket is, or the 1 (TCP) or 2 (MPTCP, AF_UNIX) of `new Peeker` with a `kind`
    /// that check the kind stated.
    // doc-end
    pub syscalls: f64,
    // doc-copy: peek_stats.peeks
    /// Peeks that returned data.
    // doc-end
    pub peeks: f64,
    // doc-copy: peek_stats.bytes_peeked
    /// Bytes delivered to the caller by peeks.
    // doc-end
    pub bytes_peeked: f64,
    // doc-copy: peek_stats.bytes_skipped_copied
    /// Bytes the kernel copied to user space only for lowcopy to throw them away: the discard
    /// prefix, and consumed bytes on protocols without a copy-free `MSG_TRUNC` (AF_UNIX). Always 0
    /// with `'offset'` on TCP; at most 4096 (4096) per peek with `'auto'` over `SO_PEEK_OFF`.
    // doc-end
    pub bytes_skipped_copied: f64,
    // doc-copy: peek_stats.bytes_consumed
    /// Bytes dropped from the head of the receive queue by the peeker's consume.
    // doc-end
    pub bytes_consumed: f64,
    // doc-copy: peek_stats.rcvlowat_updates
    /// `SO_RCVLOWAT` changes made by the armed low-water mark.
    // doc-end
    pub rcvlowat_updates: f64,
    // doc-copy: peek_stats.fds_closed
    /// Descriptors that came with bytes the peeker's consume dropped (AF_UNIX `SCM_RIGHTS`, and the
    /// pidfd `SO_PASSPIDFD` attaches), received close-on-exec and closed at once.
    // doc-end
    pub fds_closed: f64,
}

mirror!(PeekStats from lowcopy::PeekStats { syscalls, peeks, bytes_peeked, bytes_skipped_copied,
    bytes_consumed, rcvlowat_updates, fds_closed });

/// Options of `new Peeker`.
// Read field by field by the calls (for their TypeErrors); here for the types.
#[allow(dead_code)]
#[napi(object)]
pub struct PeekerOptions {
    /// `'auto'` (default: `SO_PEEK_OFF` where the socket family has it, else the discard
    /// prefix), `'offset'` (`SO_PEEK_OFF`; `EOPNOTSUPP` where missing) or `'discard'`.
    pub mode: Option<String>,
    /// What the socket is, as the code that made it knows: `'tcp4'`, `'tcp6'` (TCP over
    /// IPv4/IPv6; every `net.Socket` of a TCP server), `'mptcp4'`, `'mptcp6'` or `'unix'` (a
    /// stream socket). The peeker then checks it (one `getsockopt` on TCP, two on MPTCP and
    /// AF_UNIX) instead of learning it (three); a socket that is not of the kind stated is
    /// refused with `EPROTOTYPE` before any byte is read (see `new Peeker`). Default: ask the
    /// socket.
    #[napi(ts_type = "'tcp4' | 'tcp6' | 'mptcp4' | 'mptcp6' | 'unix'")]
    pub kind: Option<String>,
    /// Who owns TCP urgent data (`MSG_OOB`): `'inline'` (default: the peeker sets
    /// `SO_OOBINLINE`, urgent bytes are stream bytes) or `'caller'`:
    // doc-copy: urgent.caller
    /// The caller owns the urgent-data policy: the peeker leaves `SO_OOBINLINE` as it is (no
    /// `setsockopt`) and uses the discard mechanism (the kernel's `SO_PEEK_OFF` counts an urgent
    /// byte that reads skip, so its offsets would drift from the caller's), on TCP and MPTCP only.
    /// Peeks still deliver byte for byte what reads deliver: the kernel ends every read and every
    /// peek at the urgent mark, so a peek whose bytes reach the mark returns short, ending just
    /// before the mark, and a peek at or past the mark fails with `ENOMSG` (blocking or not;
    /// nothing is copied, the cursor stays) for as long as the mark lies ahead of the head of the
    /// queue. The caller deals with the urgent byte in its own way (`recv(MSG_OOB)` for it,
    /// `SIOCATMARK` for where it is) and consumes the bytes before the mark; from then on peeks
    /// pass the mark again. Without `SO_OOBINLINE` the urgent byte is not part of what reads
    /// deliver (the kernel skips it), so neither peeks nor offsets count it; with `SO_OOBINLINE`
    /// set by the caller it is an ordinary byte after the mark. Errors at creation: `EINVAL` with
    /// `'offset'`, `EOPNOTSUPP` on AF_UNIX (its out-of-band byte is delivered by peeks that reads
    /// skip, and has no mark a peek stops at).
    // doc-end
    #[napi(ts_type = "'inline' | 'caller'")]
    pub urgent: Option<String>,
}

/// Options of `Peeker.close`.
// Read field by field by the call (for its TypeErrors); here for the types.
#[allow(dead_code)]
#[napi(object)]
pub struct PeekerCloseOptions {
    /// `false` for a socket closed next: `SO_PEEK_OFF` and an armed `SO_RCVLOWAT` stay as the
    /// peeker left them (no syscall but the duplicate's `close`). Default `true`: restored.
    pub restore: Option<bool>,
}

/// What one `Peeker.peekAtInto`/`peekvAt` peeked, and from where (the core's `PeekResult`):
/// compare `streamPos` with your own position of `offset` to catch an offset that went wrong.
#[napi(object)]
pub struct PeekResult {
    // doc-copy: peek_result.len
    /// Bytes copied (the call's return value); 0 at end of stream after `offset`.
    // doc-end
    pub len: u32,
    // doc-copy: peek_result.offset
    /// Where they came from: bytes after the head of the receive queue (the offset asked for).
    // doc-end
    pub offset: f64,
    // doc-copy: peek_result.stream_pos
    /// The same place as a position in the stream: the bytes that left the head of the queue
    /// through this peeker (`Peeker.consume`, `Peeker.noteConsumed`) plus `offset`. For a peeker
    /// made before any byte was read from the socket, the stream position of the first byte peeked.
    // doc-end
    pub stream_pos: f64,
    // doc-copy: peek_result.syscalls
    /// Syscalls this call made: 1 when the kernel's `SO_PEEK_OFF` already was at `offset` (or the
    /// discard prefix was used), 2 when it had to be moved first; more only on the paths documented
    /// at `Peeker.peekAtInto`.
    // doc-end
    pub syscalls: u32,
    /// `SO_PEEK_OFF` was written before the peek (the kernel's offset was elsewhere).
    pub moved: bool,
    /// The peek went through a discard prefix (the kernel copied `offset` bytes to skip them).
    pub prefixed: bool,
}

impl From<lowcopy::PeekResult> for PeekResult {
    fn from(r: lowcopy::PeekResult) -> Self {
        PeekResult {
            len: r.len as u32,
            offset: r.offset as f64,
            stream_pos: r.stream_pos as f64,
            syscalls: r.syscalls,
            moved: r.flags & lowcopy::peek::PEEK_MOVED != 0,
            prefixed: r.flags & lowcopy::peek::PEEK_PREFIXED != 0,
        }
    }
}

/// Options of `peekAsync`.
// Read field by field by the calls (for their TypeErrors); here for the types.
#[allow(dead_code)]
#[napi(object)]
pub struct PeekAsyncOptions {
    /// Give up after this many milliseconds (rejects with `ETIMEDOUT`); none by default.
    pub timeout_ms: Option<f64>,
}

/// A peek cursor over one stream socket (TCP, MPTCP, AF_UNIX): read received bytes at the
/// cursor without consuming them, seek back to read them again, consume what is done with.
/// The core's `lowcopy::Peeker`, over a private duplicate of the descriptor.
///
/// Works on its own duplicate (`F_DUPFD_CLOEXEC`): closing the `net.Socket` or fd given does
/// not end the connection while the peeker is open (the socket closes with its last
/// descriptor), so call `close()` (or use `using`). Socket options belong to the socket and are
/// shared: the peeker sets `SO_PEEK_OFF` (and `SO_RCVLOWAT` when armed) and `close()` restores
/// them.
// doc-copy: peeker.exclusive
/// Other code must not read from the socket or change `SO_PEEK_OFF` while the peeker lives: reads
/// through `Peeker.consume` keep the cursor right, and a read by another path must be reported with
/// `Peeker.noteConsumed`.
// doc-end
/// On a `net.Socket`, peek only while Node is not reading it (a server with `pauseOnConnect`,
/// before `resume()`).
#[napi]
pub struct Peeker {
    shared: Arc<Shared>,
    fd: i32,
}

#[napi]
impl Peeker {
    /// Creates a peeker over (a duplicate of) `fd`, cursor at 0 (the head of the receive
    /// queue); `options.kind` states what the socket is, sparing the 2-3 `getsockopt` that ask
    /// it.
    // doc-copy: peeker_new.kernel
    /// `'offset'` (and `'auto'` or `'offset_or_discard'` when they pick `SO_PEEK_OFF`) sets the
    /// socket's `SO_PEEK_OFF` to 0; the discard mechanism makes sure it is disabled (-1) and, on
    /// TCP and MPTCP, sets `TCP_INQ` (one `setsockopt`), whose hint lets an empty peek cost one
    /// `recvmsg`; a caller's own `recvmsg` with a control buffer then also receives a `TCP_CM_INQ`
    /// message. Dropping the peeker turns it off.
    // doc-end
    // doc-copy: peeker_new.cost
    /// Cost: 3 `getsockopt` to learn what the socket is and that it does not listen (`SO_DOMAIN`,
    /// then on TCP `SO_PROTOCOL` and `TCP_INFO`, on MPTCP `SO_PROTOCOL` and `SO_ACCEPTCONN`, on
    /// AF_UNIX `SO_TYPE` and `SO_ACCEPTCONN`; 1 or 2 to check the kind when the caller states it),
    /// then one `setsockopt` (`SO_PEEK_OFF`), or for the discard mechanism one `getsockopt` (a
    /// `setsockopt` more if `SO_PEEK_OFF` was on) and on TCP and MPTCP the `setsockopt` of
    /// `TCP_INQ`, and the `setsockopt` of `SO_OOBINLINE`.
    // doc-end
    ///
    /// Urgent data (a TCP urgent byte, `MSG_OOB`, or an AF_UNIX out-of-band byte):
    // doc-copy: peeker.urgent
    /// making a peeker sets `SO_OOBINLINE` on the socket and leaves it set. Every urgent byte is
    /// then an ordinary byte of the stream, where the peer sent it: peeks deliver byte for byte
    /// what reads of the socket deliver, a consume of `n` bytes drops exactly `n` of them (it reads
    /// on past the mark), and no byte is peeked twice or skipped. Urgency itself is not reported
    /// (`recv(MSG_OOB)` then fails with errno EINVAL; `SIOCATMARK` still tells where the mark is).
    ///
    /// The kernel ends every read and every peek at the urgent mark (net/ipv4/tcp.c
    /// `tcp_recvmsg_locked`, net/unix/af_unix.c `manage_oob`): a peek that reaches it returns
    /// short, and the next continues at the urgent byte. A discard peek starts at the head of the
    /// queue, so it cannot pass a mark that lies ahead of the head: there the peeker peeks once
    /// with `SO_PEEK_OFF` at the cursor where the socket has it; where it has not (TCP before 6.9,
    /// IPv6 before 6.12) the peek returns `EAGAIN`, blocking or not, until the bytes before the
    /// mark are consumed (poll still reports the socket readable meanwhile).
    // doc-end
    ///
    /// Descriptors (an AF_UNIX peer's `SCM_RIGHTS`):
    // doc-copy: peeker.descriptors
    /// a peeker never hands them over. Its peeks pass no control buffer, so the descriptors stay
    /// queued with their bytes; its consume receives those that came with the bytes it drops
    /// (close-on-exec) and closes them at once, counted in `PeekStats.fdsClosed`: none is left
    /// open, none is kept. The kernel hands over a message's descriptors with its first byte read,
    /// so a consume that ends inside a message takes all of them. It ends every read and every peek
    /// after a message that carried descriptors (net/unix/af_unix.c `unix_stream_read_generic`): a
    /// peek that reaches one returns short, as a read does, and the next continues after it, so
    /// peeks deliver byte for byte what reads deliver; a consume reads on until it has dropped `n`
    /// bytes. A discard peek whose prefix reaches such a message peeks once with `SO_PEEK_OFF` at
    /// the cursor, as past an urgent mark (AF_UNIX has it since 3.4). The consume's control buffer
    /// holds the most descriptors one message carries (253, `SCM_MAX_FD`), so the kernel never
    /// closes any for lack of room (`MSG_CTRUNC`). A caller that wants the descriptors reads those
    /// bytes itself, with `recvmsg` and a control buffer, and reports them with
    /// `Peeker.noteConsumed`.
    // doc-end
    ///
    // doc-copy: peeker_kind.wrong
    /// Stating the kind wrong loses nothing: the kind is checked before any byte is read, and a
    /// socket that is not of it fails with `EPROTOTYPE` (a datagram socket, whose consume would
    /// drop a whole datagram; an AF_UNIX stream stated as TCP or MPTCP). The check costs one
    /// syscall per peeker on TCP, `getsockopt(TCP_INFO)` (only TCP and MPTCP sockets answer it,
    /// with their state), and two on MPTCP (`SO_PROTOCOL` is TCP or MPTCP: an MPTCP listener hands
    /// out TCP sockets to peers without MPTCP) and AF_UNIX (`SO_TYPE` is a stream): each also tells
    /// a listening socket, refused as by `new Peeker` without a `kind`. It does not tell IPv4 from
    /// IPv6 or TCP from MPTCP, nor a TCP socket stated as AF_UNIX: stated wrong among those, a
    /// peeker peeks and consumes right, but may cost more (a TCP consume copies, as on AF_UNIX) or
    /// fail where the real socket does (`EOPNOTSUPP` for `'offset'` on MPTCP), and `'auto'` may
    /// note the answer of `SO_PEEK_OFF` for the family stated, not the socket's.
    // doc-end
    ///
    /// Errors: `EMFILE` (no descriptor for the duplicate); `TypeError` for a bad `mode` or
    /// `kind`;
    // doc-copy: peeker_new.errors
    /// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket; or `'offset'`
    /// on a socket without `SO_PEEK_OFF`), `ENOTCONN` (a listening TCP or MPTCP socket) and
    /// `EINVAL` (a listening AF_UNIX socket): a listening socket is no connection, refused with the
    /// errno its `recv` gives; `EPROTOTYPE` (a stated kind that is not the socket's);
    /// `setsockopt`/`getsockopt` errors.
    // doc-end
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, options?: PeekerOptions"
    )]
    pub fn new(env: Env, fd: Unknown, options: Option<Unknown>) -> Result<Self> {
        use lowcopy::{StreamKind as K, Urgent as U};
        let o = options.as_ref();
        let kinds = [
            ("tcp4", K::Tcp4),
            ("tcp6", K::Tcp6),
            ("mptcp4", K::Mptcp4),
            ("mptcp6", K::Mptcp6),
            ("unix", K::Unix),
        ];
        let kind = args::one_of(&env, o, "kind", &kinds)?;
        let urgents = [("inline", U::Inline), ("caller", U::Caller)];
        let urgent = args::one_of(&env, o, "urgent", &urgents)?;
        let mode = args::one_of(&env, o, "mode", MODES)?.unwrap_or(PeekMode::Auto);
        let dup = args::dup_fd(&env, &fd, "Peeker")?;
        let raw = dup.as_raw_fd();
        let mut o = lowcopy::PeekerOptions::new(mode).urgent(urgent.unwrap_or(U::Inline));
        o.kind = kind;
        let p = Core::with_options(dup, o).or_throw(&env, "Peeker")?;
        Ok(Peeker {
            shared: Shared::new(p),
            fd: raw,
        })
    }

    /// The peeker's own descriptor (its duplicate), e.g. to watch it with epoll; -1 once closed.
    #[napi(getter, catch_unwind)]
    pub fn fd(&self) -> i32 {
        if self.closed() {
            -1
        } else {
            self.fd
        }
    }

    /// Whether `close()` was called.
    #[napi(getter, catch_unwind)]
    pub fn closed(&self) -> bool {
        self.shared.closed()
    }

    /// The mechanism in use: `'offset'` (`SO_PEEK_OFF`) or `'discard'`, never `'auto'`.
    #[napi(getter, catch_unwind)]
    pub fn mode(&self, env: Env) -> Result<&'static str> {
        self.shared
            .with(&env, "mode", |p| Ok(args::name_of(MODES, p.mode())))
    }

    /// The cursor: bytes between the head of the receive queue and the next peek.
    #[napi(getter, catch_unwind)]
    pub fn offset(&self, env: Env) -> Result<f64> {
        self.shared.with(&env, "offset", |p| Ok(p.offset() as f64))
    }

    /// Whether the low-water mark is armed (`setLowatArmed`).
    #[napi(getter, catch_unwind)]
    pub fn lowat_armed(&self, env: Env) -> Result<bool> {
        self.shared
            .with(&env, "lowatArmed", |p| Ok(p.lowat_armed()))
    }

    /// Peeks up to `length` bytes at the cursor into a new `Buffer`; the cursor advances by
    /// its length. Empty at end of stream (the bytes before the cursor stay queued). Results
    /// and errors as `peekInto`. The `Buffer` is sized as `peekAt`'s, by what the socket can
    /// hold (a `RangeError` above 2147483647).
    #[napi(catch_unwind, ts_args_type = "length: number, options?: PeekOptions")]
    pub fn peek(&self, env: Env, length: Unknown, options: Option<Unknown>) -> Result<Buffer> {
        let len = alloc_len(&env, &length, "length")?;
        let f = args::flags(&env, options.as_ref(), "peek", false)?;
        let mut buf = Vec::new();
        let n = self.shared.with(&env, "peek", |p| {
            buf = args::try_alloc(lowcopy::recv_buffer_len(p.as_fd(), len))?;
            p.peek(&mut [IoSliceMut::new(&mut buf)], f)
        })?;
        Ok(args::into_buffer(buf, n))
    }

    /// Peeks at the cursor into `buf` (its own `byteLength` bytes at its `byteOffset`); the
    /// cursor advances by the bytes written.
    ///
    // doc-copy: peek.returns
    /// Returns bytes copied (> 0); 0 at end of stream after the cursor (the peer shut down; the
    /// bytes before the cursor are still queued and readable); `EAGAIN` when nothing lies beyond
    /// the cursor and the call may not wait (`dontWait`, or a non-blocking fd).
    // doc-end
    // doc-copy: peek.wait
    /// A blocking peek returns as soon as one byte beyond the cursor is there (with the armed
    /// low-water mark too; a socket's own `SO_RCVLOWAT` above 1 makes the kernel wait for that many
    /// bytes beyond the cursor, as recv does), or with `EAGAIN` when `SO_RCVTIMEO` runs out.
    // doc-end
    ///
    /// Errors: `EINVAL` (a `length` of 0, bad options);
    // doc-copy: peek.errors
    /// `EOVERFLOW` (cursor beyond what the mechanism can represent), `ECONNRESET`, `EINTR` and
    /// other `recvmsg` errors.
    // doc-end
    #[napi(
        catch_unwind,
        ts_args_type = "buf: ArrayBufferView, options?: PeekOptions"
    )]
    pub fn peek_into(&self, env: Env, buf: Unknown, options: Option<Unknown>) -> Result<u32> {
        let f = args::flags(&env, options.as_ref(), "peekInto", false)?;
        self.shared.peek_into(&env, &buf, f)
    }

    /// Peeks at the cursor into `buffers` in order, as one call (scatter, like `fs.readvSync`;
    /// at most `IOV_MAX` = 1024 buffers, else `EMSGSIZE`); returns the bytes written.
    #[napi(
        catch_unwind,
        ts_args_type = "buffers: ArrayBufferView[], options?: PeekOptions"
    )]
    pub fn peekv(&self, env: Env, buffers: Unknown, options: Option<Unknown>) -> Result<u32> {
        let f = args::flags(&env, options.as_ref(), "peekv", false)?;
        let views = views_arg(&env, &buffers, "buffers")?; // last: see `View`
        let iov: Vec<libc::iovec> = views.iter().map(View::iovec).collect();
        let n = self.shared.with(&env, "peekv", |p| {
            // SAFETY: the iovecs cover the caller's views, writable and alive for this call
            // (one buffer given twice is written twice, as readv would).
            unsafe { p.peek_raw(&iov, f) }
        })?;
        Ok(n as u32)
    }

    /// Peeks into `buf` (its own `byteLength` bytes at its `byteOffset`) at `offset` bytes
    /// after the head of the receive queue: your own stream arithmetic, with no `seek` to keep
    /// in step; the cursor ends at `offset` + the bytes peeked. Returns what was peeked from
    /// where (`len` 0 at end of stream after `offset`; `moved` when the kernel's offset was
    /// moved, `prefixed` when a discard prefix was used).
    ///
    // doc-copy: peek_at_cursor.cost
    /// Cost with `SO_PEEK_OFF` (`'offset'`, and `'auto'` when it picked it): one `recv`/`recvmsg`
    /// when the kernel's offset is already at `offset` (after a peek that ended there, or a consume
    /// that moved both back), a `setsockopt` and the `recv` when it must be moved (so a rewind
    /// writes `SO_PEEK_OFF` once); never a classification. `'auto'` peeks an `offset` at most 4096
    /// bytes ahead of the kernel's offset from there, with a discard prefix over the bytes between
    /// (one `recvmsg`, no `setsockopt`); `'offset_or_discard'` never does. The discard mechanism:
    /// one `recvmsg` per peek that finds bytes, and on TCP and MPTCP one per peek that finds
    /// nothing past `offset` with `dontWait` (`TCP_INQ`'s hint says no more is queued and the peer
    /// has not ended), and on AF_UNIX two (the `recvmsg` and a `poll`: a stream peek from the head
    /// tells neither the peer's shutdown nor an out-of-band byte ahead, which `POLLRDHUP` and
    /// `POLLPRI` do; a message with control data shows as `MSG_CTRUNC`; the offset mechanism costs
    /// one there); more iovecs than fit beside the prefix below `IOV_MAX` split the peek into
    /// several `recvmsg`, each into as many as fit, until one comes back short. Beyond those: with
    /// the low-water mark armed, a blocking call lowers it first (a `setsockopt`) and one that
    /// finds nothing sets it to `offset` + 1 (a `setsockopt`); the discard mechanism, finding
    /// nothing past `offset` where neither settles it (an urgent mark or out-of-band byte, control
    /// data, which credentials with `SO_PASSCRED` add to every message, bytes arriving meanwhile, a
    /// blocking call), asks `ioctl(FIONREAD)` about a mark, `poll` whether the peer ended and
    /// `fcntl` whether the fd blocks, and waits as a peek at the cursor does. A reset (or a
    /// connection error) that leaves bytes queued before `offset` is not seen by that one
    /// `recvmsg`: a non-blocking peek there returns `EAGAIN` (`poll` reports `POLLHUP`/`POLLERR`)
    /// until a blocking peek or a consume reports it.
    // doc-end
    ///
    /// Errors:
    // doc-copy: peek_at_cursor.errors
    /// As a peek at the cursor (the cursor is then at `offset`); `EOVERFLOW` (`offset` beyond what
    /// the mechanism can represent: `INT_MAX` with `SO_PEEK_OFF`, 1023 x 64 KiB with the discard
    /// prefix, for any number of iovecs up to `IOV_MAX`; the cursor is then unchanged).
    // doc-end
    #[napi(
        catch_unwind,
        ts_args_type = "offset: number, buf: ArrayBufferView, options?: PeekOptions"
    )]
    pub fn peek_at_into(
        &self,
        env: Env,
        offset: Unknown,
        buf: Unknown,
        options: Option<Unknown>,
    ) -> Result<PeekResult> {
        let off = size(&env, &offset, "offset")?;
        let f = args::flags(&env, options.as_ref(), "peekAtInto", false)?;
        let iov = [bytes_arg(&env, &buf, "buf")?.iovec()]; // last: see `View`
        self.shared.with(&env, "peekAtInto", |p| {
            // SAFETY: the iovec covers the caller's view, writable and alive for this call.
            unsafe { p.peek_at_raw(off, &iov, f) }.map(PeekResult::from)
        })
    }

    /// `peekAtInto` scattering into `buffers` in order (as `peekv`; at most `IOV_MAX` = 1024).
    #[napi(
        catch_unwind,
        ts_args_type = "offset: number, buffers: ArrayBufferView[], options?: PeekOptions"
    )]
    pub fn peekv_at(
        &self,
        env: Env,
        offset: Unknown,
        buffers: Unknown,
        options: Option<Unknown>,
    ) -> Result<PeekResult> {
        let off = size(&env, &offset, "offset")?;
        let f = args::flags(&env, options.as_ref(), "peekvAt", false)?;
        let views = views_arg(&env, &buffers, "buffers")?; // last: see `View`
        let iov: Vec<libc::iovec> = views.iter().map(View::iovec).collect();
        self.shared.with(&env, "peekvAt", |p| {
            // SAFETY: the iovecs cover the caller's views, writable and alive for this call.
            unsafe { p.peek_at_raw(off, &iov, f) }.map(PeekResult::from)
        })
    }

    /// `peek` that waits off the JS thread (on a thread of its own) until a byte beyond the
    /// cursor arrives, the stream ends (resolves with an empty `Buffer`), `timeoutMs` passes
    /// (rejects `ETIMEDOUT`) or `close()` is called (rejects with an `AbortError`). Works on
    /// non-blocking sockets (every `net.Socket`): it never relies on a blocking `recv`. The
    /// wait sleeps in an edge-triggered epoll, so bytes before the cursor or error-queue
    /// entries do not make it spin. While it is pending, the other calls on this peeker throw
    /// `EBUSY`. A worker's `terminate()` (or exit) ends it. The `Buffer` is sized as
    /// `peekAt`'s, by what the socket can hold.
    // doc-copy: peek.window
    /// Peeked bytes stay in the receive buffer: when they fill it (small segments cost far more
    /// kernel memory than their payload) the peer's window is closed and a blocking peek waits
    /// until something is consumed, so a caller that may block there sets `SO_RCVTIMEO` or consumes
    /// acknowledged bytes first.
    // doc-end
    #[napi(
        catch_unwind,
        ts_args_type = "length: number, options?: PeekAsyncOptions",
        ts_return_type = "Promise<Buffer>"
    )]
    pub fn peek_async<'e>(
        &self,
        env: &'e Env,
        length: Unknown,
        options: Option<Unknown>,
    ) -> Result<Object<'e>> {
        let len = alloc_len(env, &length, "length")?;
        let timeout = args::timeout_opt(env, options.as_ref())?;
        let until = deadline(timeout);
        self.shared.spawn(env, "peekAsync", move |p, cancel| {
            // Sized by what the socket can hold (`recv_buffer_len`), not by `length` alone.
            let mut buf = args::try_alloc(lowcopy::recv_buffer_len(p.as_fd(), len))?;
            let bufs = &mut [IoSliceMut::new(&mut buf)];
            let n = p
                .peek_abortable(bufs, cancel, left(until))
                .map_err(aborted)?;
            buf.truncate(n);
            Ok(buf)
        })
    }

    // doc-copy: seek.kernel
    /// Moves the cursor to `offset` bytes after the head of the receive queue: back to retransmit,
    /// or ahead to skip bytes without copying them (offset mechanism; the discard one copies them
    /// at the next peek). Makes no syscall unless the low-water mark is armed.
    // doc-end
    ///
    /// Errors:
    // doc-copy: seek.errors
    /// `EOVERFLOW` if the mechanism cannot represent the offset (`INT_MAX` for `SO_PEEK_OFF`, 1023
    /// x 64 KiB for the discard prefix); with the low-water mark armed, its `setsockopt` errors.
    /// The cursor is then unchanged.
    // doc-end
    #[napi(catch_unwind, ts_args_type = "offset: number")]
    pub fn seek(&self, env: Env, offset: Unknown) -> Result<()> {
        self.shared.seek(&env, &offset)
    }

    // doc-copy: peeker_consume.kernel
    /// Drops up to `n` acknowledged bytes from the head of the receive queue and moves the cursor
    /// back by the bytes dropped (never below 0). Never blocks. Returns bytes dropped: fewer than
    /// `n` when fewer are queued, 0 for `n` 0 or at end of stream. TCP and MPTCP drop them without
    /// copying (`MSG_TRUNC`); AF_UNIX reads them into a scratch buffer, on past messages that carry
    /// descriptors, and closes the descriptors that came with them (`PeekStats.fdsClosed`).
    // doc-end
    ///
    /// Errors:
    // doc-copy: peeker_consume.errors
    /// `EAGAIN` when nothing is queued; `recv` errors (`ECONNRESET`, ...); with the low-water mark
    /// armed, its `setsockopt` errors (the bytes were dropped and the cursor moved).
    // doc-end
    #[napi(catch_unwind, ts_args_type = "n: number")]
    pub fn consume(&self, env: Env, n: Unknown) -> Result<f64> {
        let n = size(&env, &n, "n")?;
        self.shared
            .with(&env, "consume", |p| p.consume(n).map(|d| d as f64))
    }

    /// Tells the peeker that `n` bytes left the head of the queue by another path (a read, a
    /// `ZeroCopyReceiver`).
    // doc-copy: note_consumed.kernel
    /// The cursor moves back by `n` (never below 0), as `Peeker.consume` would move it, with no
    /// syscall unless the low-water mark is armed (it follows the cursor): both of those paths
    /// lower the kernel's `SO_PEEK_OFF` by what they take (the zero-copy receiver corrects the
    /// kernel, which forgets to for mapped bytes), so cursor and kernel stay together.
    // doc-end
    #[napi(catch_unwind, ts_args_type = "n: number")]
    pub fn note_consumed(&self, env: Env, n: Unknown) -> Result<()> {
        let n = size(&env, &n, "n")?;
        self.shared
            .with(&env, "noteConsumed", |p| p.note_consumed(n))
    }

    /// Arms (`true`) or disarms the low-water mark (libuv's poll obeys it too).
    ///
    // doc-copy: lowat_armed.kernel
    /// While armed, `SO_RCVLOWAT` is kept at cursor + 1 bytes so that poll/epoll report the socket
    /// readable only when a byte beyond the cursor is queued (they ignore `SO_PEEK_OFF`), and
    /// level-triggered loops do not spin. Blocking peeks still return as soon as one new byte is
    /// there.
    ///
    /// The mark follows seek and consume at once; after peeks it is raised lazily, when a peek
    /// finds nothing beyond the cursor (`EAGAIN`), so the data path costs no extra syscall. The
    /// kernel caps `SO_RCVLOWAT` at `tcp_rmem[2]/2` (16 MiB by default; `SO_RCVBUF/2` when locked;
    /// net/ipv4/tcp.c `tcp_set_rcvlowat`): past that cursor poll cannot be kept quiet. Nor can it
    /// when the receive queue, full of peeked but unconsumed bytes, puts the socket under memory
    /// pressure (more than 7/8 of `SO_RCVBUF` in kernel memory, which small segments reach with a
    /// few KiB of payload) or shrinks its window to one MSS: TCP then reports `EPOLLIN` whatever
    /// the mark (`tcp_epollin_ready`, net/ipv4/tcp.c). A level-triggered loop that gets `EAGAIN`
    /// from the peek should stop listening for `EPOLLIN` until it consumes. Setting the mark grows
    /// an unlocked receive buffer to about twice the mark. Disarming, and releasing the peeker,
    /// restore the value found when arming.
    // doc-end
    ///
    /// Errors:
    // doc-copy: lowat_armed.errors
    /// `EOPNOTSUPP` on AF_UNIX (its poll ignores `SO_RCVLOWAT`, net/unix/af_unix.c), and
    /// `getsockopt`/`setsockopt` errors.
    // doc-end
    #[napi(catch_unwind, ts_args_type = "on: boolean")]
    pub fn set_lowat_armed(&self, env: Env, on: Unknown) -> Result<()> {
        let on = args::boolean(&env, &on, "on")?;
        self.shared
            .with(&env, "setLowatArmed", |p| p.set_lowat_armed(on))
    }

    /// The counters so far.
    #[napi(catch_unwind)]
    pub fn stats(&self, env: Env) -> Result<PeekStats> {
        self.shared.with(&env, "stats", |p| Ok((&p.stats()).into()))
    }

    /// Closes the peeker's duplicate; queued bytes stay queued for the next reader.
    // doc-copy: peeker_drop.kernel
    /// Restores `SO_RCVLOWAT` if the mark was armed, leaves `SO_PEEK_OFF` disabled (-1) if this
    /// peeker used it, and `TCP_INQ` off (0) if it set it (the discard mechanism on TCP).
    // doc-end
    /// `{ restore: false }` for a socket closed next: nothing is restored. A pending `peekAsync`
    /// ends first and rejects with an `AbortError`: the socket is restored when `close()` returns,
    /// so a new peeker over it can be made at once. Calling it again does nothing.
    #[napi(catch_unwind, ts_args_type = "options?: PeekerCloseOptions")]
    pub fn close(&self, env: Env, options: Option<Unknown>) -> Result<()> {
        let restore = args::bool_opt(&env, options.as_ref(), "restore", true)?;
        // A pending async peek ends first (it lets go of the peeker at the abort).
        match self.shared.close() {
            Some(p) if !restore => drop(p.into_inner_unrestored()),
            p => drop(p),
        }
        Ok(())
    }
}

// The per-call hot paths of a `Peeker` (`peekInto(buf)` without options, `seek(offset)`) as
// plain native functions bound to one peeker: the package's JS entry point (lowcopy.js) calls
// them in place of the class methods, which pay napi-rs's per-call work (a type-tag check and
// an unwrap of `this`, each a V8 private-property lookup, and a native-borrow registration in
// a hash map) before any of ours. Here the peeker comes in as the function's own data pointer
// (an `Arc<Shared>`, dropped by the function's finalizer), the arguments as raw `napi_value`s
// (the buffer read with one `napi_get_buffer_info`), and the result is a Smi or `undefined`:
// no Rust wrapper objects, no allocation on success. Behaviour and errors are the class
// methods'.
/// The hot methods of `peeker` (`peekInto` without options, `seek`) as functions bound to it
/// (done by `lowcopy.js`: the same calls without napi-rs's per-call class-method work).
/// Internal.
#[napi(
    js_name = "_peekerBind",
    catch_unwind,
    ts_return_type = "{ peekInto(buf: ArrayBufferView): number; seek(offset: number): void }"
)]
pub fn peeker_bind<'a>(env: &'a Env, peeker: &Peeker) -> Result<Object<'a>> {
    bound_fns!(env, peeker.shared, Arc<Shared>, {
        "peekInto" => |env: &Env, shared: &Arc<Shared>, [buf]: [Unknown; 1]| {
            shared.peek_into(env, &buf, Flags::NONE)
        },
        "seek" => |env: &Env, shared: &Arc<Shared>, [offset]: [Unknown; 1]| {
            shared.seek(env, &offset)
        },
    })
}

/// A JS function named `name` calling `cb` with `shared` as its data (the peeker's state, or
/// a sender's: `node/src/zc.rs`), boxed into the function and dropped by its finalizer.
pub(crate) fn bound_fn<D: 'static>(
    env: &Env,
    shared: D,
    name: &str,
    cb: napi::sys::napi_callback,
) -> Result<napi::sys::napi_value> {
    use napi::sys::{self as ns, Status as St};
    let data = Box::into_raw(Box::new(shared)).cast::<std::ffi::c_void>();
    let mut f = std::ptr::null_mut();
    // SAFETY: N-API calls on this call's env; `data` is leaked above, handed to the finalizer
    // (which drops it) once the function is collected, or dropped here if the finalizer
    // cannot be attached (the function is then unreachable and never called).
    unsafe {
        let len = name.len() as isize;
        let mut st =
            ns::napi_create_function(env.raw(), name.as_ptr().cast(), len, cb, data, &mut f);
        if st == St::napi_ok {
            let (hint, result) = (std::ptr::null_mut(), std::ptr::null_mut());
            st = ns::napi_add_finalizer(env.raw(), f, data, Some(drop_bound::<D>), hint, result);
        }
        if st != St::napi_ok {
            drop(Box::from_raw(data.cast::<D>()));
            return Err(Error::from_reason(format!("{name}: napi_create_function")));
        }
    }
    Ok(f)
}

/// Finalizer of a bound function: drops its data.
unsafe extern "C" fn drop_bound<D>(
    _env: napi::sys::napi_env,
    data: *mut std::ffi::c_void,
    _hint: *mut std::ffi::c_void,
) {
    // SAFETY: `data` is the `Box<D>` `bound_fn` leaked for this function, dropped once (N-API
    // calls a finalizer once).
    drop(unsafe { Box::from_raw(data.cast::<D>()) });
}

/// The body of a bound function: its data (what [`bound_fn`] was given, a `T`) and `N`
/// arguments (missing ones `undefined`) in, its result out; an `Err` (or a panic, as an
/// `Error`) is thrown.
///
/// # Safety
/// `env` and `info` are those of a call of a function made by `bound_fn` with a `T`.
pub(crate) unsafe fn bound_call<T, R: ToNapiValue, const N: usize>(
    env: napi::sys::napi_env,
    info: napi::sys::napi_callback_info,
    what: &str,
    body: impl FnOnce(&Env, &T, [Unknown<'_>; N]) -> Result<R>,
) -> napi::sys::napi_value {
    let run = || -> Result<napi::sys::napi_value> {
        let (mut argc, mut argv) = (N, [ptr::null_mut(); N]);
        let (this, mut data) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: N-API reads at most `argc` (N) arguments into `argv` (missing ones are
        // `undefined`) from the live `info` of this call.
        let st = unsafe {
            napi::sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), this, &mut data)
        };
        if st != napi::sys::Status::napi_ok || data.is_null() {
            return Err(Error::from_reason(format!("{what}: napi_get_cb_info")));
        }
        // SAFETY: `data` is the function's `T` (boxed), kept by the function (its finalizer
        // drops it), which is alive while it is being called.
        let shared = unsafe { &*data.cast::<T>() };
        // SAFETY: live values of this call.
        let args = argv.map(|a| unsafe { Unknown::from_raw_unchecked(env, a) });
        let r = body(&Env::from_raw(env), shared, args)?;
        // SAFETY: a value made in this call's env.
        unsafe { R::to_napi_value(env, r) }
    };
    let e = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(_) => Error::from_reason(format!("panic in {what}")),
    };
    // SAFETY: `env` is live (inside the callback).
    unsafe { napi::JsError::from(e).throw_into(env) };
    std::ptr::null_mut()
}

/// The deadline `timeout` from now (`None`: no limit, or one beyond what an `Instant` holds).
pub(crate) fn deadline(timeout: Option<std::time::Duration>) -> Option<std::time::Instant> {
    timeout.and_then(|t| std::time::Instant::now().checked_add(t))
}

/// The time left until `deadline` (`None`: no limit).
pub(crate) fn left(deadline: Option<std::time::Instant>) -> Option<std::time::Duration> {
    deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()))
}

/// core's `ECANCELED` (the abort handle ended the wait) as the `AbortError` it is in JS.
pub(crate) fn aborted(e: std::io::Error) -> Fail {
    match e.raw_os_error() {
        Some(libc::ECANCELED) => Fail::Aborted,
        _ => e.into(),
    }
}

/// `peekAt` that waits off the JS thread until a byte lies beyond `offset` (as
/// `Peeker.peekAsync`, on a private duplicate of `fd`): resolves with the bytes (empty at end
/// of stream), rejects with `ETIMEDOUT` after `timeoutMs`. The protocol sniffer's call: peek a
/// new connection's first bytes before Node reads them (`pauseOnConnect`). The `Buffer` is sized
/// as `peekAt`'s, by what the socket can hold.
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, offset: number, length: number, options?: PeekAsyncOptions",
    ts_return_type = "Promise<Buffer>"
)]
pub fn peek_at_async<'e>(
    env: &'e Env,
    fd: Unknown,
    offset: Unknown,
    length: Unknown,
    options: Option<Unknown>,
) -> Result<Object<'e>> {
    let offset = size(env, &offset, "offset")?;
    let len = alloc_len(env, &length, "length")?;
    let timeout = args::timeout_opt(env, options.as_ref())?;
    let dup = args::dup_fd(env, &fd, "peekAtAsync")?;
    // When the wait ends (`None`: no limit), counted from the call.
    let until = deadline(timeout);
    crate::teardown::spawn(env, "peekAtAsync", |cancel| {
        BufferTask("peekAtAsync", move || {
            // Sized by what the socket can hold (`recv_buffer_len`), not by `length` alone.
            let mut buf = args::try_alloc(lowcopy::recv_buffer_len(dup.as_fd(), len))?;
            let bufs = &mut [IoSliceMut::new(&mut buf)];
            let n = lowcopy::peek_at_abortable(&dup, offset, bufs, &cancel, left(until));
            buf.truncate(n.map_err(aborted)?);
            Ok(buf)
        })
    })
}
