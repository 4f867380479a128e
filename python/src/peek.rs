//! Offset peek: `peek_at`, `peek_into`, `consume`, `peek_supported` and the `Peeker` cursor.

use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::util::{
    blocking, count, dup_of, flags_of, guard, peek_mode, read_bytes, record, result_size, Handle,
    IoResultExt, WriteBuf,
};

/// Peeks up to `nbytes` bytes lying `offset` bytes after the head of the socket's receive
/// queue, without consuming anything; returns them (at least one byte).
///
/// `OverflowError` for `nbytes` above 2147483647 (`INT_MAX`, the most one receive returns).
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
/// `b""` when the peer shut down and nothing lies beyond `offset`; `BlockingIOError`
/// (`EAGAIN`) when nothing lies beyond `offset` yet and `flags` has `MSG_DONTWAIT` or the
/// socket is non-blocking (a socket with a timeout is non-blocking: `settimeout` sets
/// `O_NONBLOCK`). The GIL is released while the call waits.
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
/// Errors (`OSError`): `EINVAL` (flags other than `MSG_DONTWAIT`, or `nbytes` 0),
// doc-copy: peek_at.errors
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), `EOVERFLOW`
/// (`offset` beyond what the mechanism can represent: `INT_MAX` for `SO_PEEK_OFF`, 1023 x 64 KiB
/// for the discard prefix, whose peek into more iovecs than fit beside it is split into several
/// `recvmsg`; never truncated), `ECONNRESET` and other `recvmsg` errors.
// doc-end
#[pyfunction]
#[pyo3(signature = (sock, offset, nbytes, flags = 0))]
fn peek_at(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    offset: &Bound<'_, PyAny>,
    nbytes: &Bound<'_, PyAny>,
    flags: i32,
) -> PyResult<Py<PyBytes>> {
    guard(|| {
        let (offset, nbytes) = (count(offset, "offset")?, result_size(nbytes, "nbytes")?);
        let flags = flags_of(flags)?;
        let fd = dup_of(sock)?;
        let len = lowcopy::recv_buffer_len(&fd, nbytes);
        read_bytes(py, len, true, |p, n| {
            // SAFETY: `read_bytes` hands out `n` zero-filled bytes it owns for this call.
            let buf = unsafe { std::slice::from_raw_parts_mut(p.get(), n) };
            lowcopy::peek_at(&fd, offset, &mut [IoSliceMut::new(buf)], flags)
        })
    })
}

/// `peek_at` into a writable buffer (`bytearray`, `memoryview`, `array`, mmap ...):
/// `nbytes` of it (0: all of it); returns the bytes written. Results and errors as
/// `peek_at`.
#[pyfunction]
#[pyo3(signature = (sock, buffer, offset = None, nbytes = 0, flags = 0))]
fn peek_into(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    buffer: &Bound<'_, PyAny>,
    offset: Option<&Bound<'_, PyAny>>,
    nbytes: i64,
    flags: i32,
) -> PyResult<usize> {
    guard(|| {
        let offset = offset.map_or(Ok(0), |o| count(o, "offset"))?;
        let flags = flags_of(flags)?;
        let fd = dup_of(sock)?;
        let b = WriteBuf::get(buffer, nbytes)?;
        let (ptr, len) = (b.ptr, b.len);
        let r = blocking(py, || {
            // SAFETY: the export keeps `len` writable bytes at `ptr` alive and un-resizable
            // until it is released below.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr.get(), len) };
            lowcopy::peek_at(&fd, offset, &mut [IoSliceMut::new(buf)], flags)
        });
        b.release(py);
        r
    })
}

/// Drops up to `nbytes` bytes from the head of the socket's receive queue; returns how many
/// were dropped.
// doc-copy: consume.kernel
/// TCP and MPTCP use `recv(NULL, n, MSG_TRUNC)`, which copies nothing; AF_UNIX stream has no such
/// path and reads them into a scratch buffer, on past messages that carry descriptors, and closes
/// the descriptors that came with the bytes dropped. The kernel lowers `SO_PEEK_OFF` by the bytes
/// dropped. Returns 0 for `nbytes` 0 or at end of stream.
// doc-end
///
/// Errors (`OSError`; `EAGAIN` is `BlockingIOError`): `EINVAL` (`flags` other than
/// `MSG_DONTWAIT`),
// doc-copy: consume.errors
/// `EAGAIN` when nothing is queued and the call may not block (`MSG_DONTWAIT` or a non-blocking
/// fd); `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), and `recv`
/// errors (`ECONNRESET`, `EINTR`, ...).
// doc-end
#[pyfunction]
#[pyo3(signature = (sock, nbytes, flags = 0))]
fn consume(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    nbytes: &Bound<'_, PyAny>,
    flags: i32,
) -> PyResult<usize> {
    guard(|| {
        let n = count(nbytes, "nbytes")?;
        let flags = flags_of(flags)?;
        let fd = dup_of(sock)?;
        blocking(py, || lowcopy::consume(&fd, n, flags))
    })
}

/// Whether `SO_PEEK_OFF` works on this stream socket.
// doc-copy: peek_supported.kernel
/// TCP over IPv4 has it since Linux 6.9, over IPv6 since 6.12, AF_UNIX stream since 3.4; MPTCP
/// never. Leaves the socket's `SO_PEEK_OFF` value as it was (reads it, writes it back).
// doc-end
///
/// Errors (`OSError`):
// doc-copy: peek_supported.errors
/// `EBADF` (not an open fd), `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket:
/// lowcopy's peek does not apply; UDP and other datagram sockets neither).
// doc-end
#[pyfunction]
fn peek_supported(sock: &Bound<'_, PyAny>) -> PyResult<bool> {
    guard(|| {
        let fd = dup_of(sock)?;
        lowcopy::peek_supported(&fd).py()
    })
}

record! {
    /// Counters of a `Peeker`. All byte counts are in bytes.
    PeekStats from lowcopy::PeekStats {
        // doc-copy: peek_stats.syscalls
        /// Syscalls the peeker made, failed ones included, its constructor's too: 2 to 4 setting
        /// the socket up (`SO_PEEK_OFF`; `TCP_INQ` for the discard mechanism on TCP and MPTCP;
        /// `SO_OOBINLINE`), and before them the 3 `getsockopt` of `Peeker` without a `family` that
        /// learn what the socket is, or the 1 (TCP) or 2 (MPTCP, AF_UNIX) of `Peeker` with a
        /// `family` that check the kind stated.
        // doc-end
        syscalls,
        // doc-copy: peek_stats.peeks
        /// Peeks that returned data.
        // doc-end
        peeks,
        // doc-copy: peek_stats.bytes_peeked
        /// Bytes delivered to the caller by peeks.
        // doc-end
        bytes_peeked,
        // doc-copy: peek_stats.bytes_skipped_copied
        /// Bytes the kernel copied to user space only for lowcopy to throw them away: the discard
        /// prefix, and consumed bytes on protocols without a copy-free `MSG_TRUNC` (AF_UNIX).
        /// Always 0 with `PeekMode.OFFSET` on TCP; at most 4096 (4096) per peek with
        /// `PeekMode.AUTO` over `SO_PEEK_OFF`.
        // doc-end
        bytes_skipped_copied,
        // doc-copy: peek_stats.bytes_consumed
        /// Bytes dropped from the head of the receive queue by the peeker's consume.
        // doc-end
        bytes_consumed,
        // doc-copy: peek_stats.rcvlowat_updates
        /// `SO_RCVLOWAT` changes made by the armed low-water mark.
        // doc-end
        rcvlowat_updates,
        // doc-copy: peek_stats.fds_closed
        /// Descriptors that came with bytes the peeker's consume dropped (AF_UNIX `SCM_RIGHTS`, and
        /// the pidfd `SO_PASSPIDFD` attaches), received close-on-exec and closed at once.
        // doc-end
        fds_closed,
    }
}

/// A peek cursor over one stream socket (TCP, MPTCP, AF_UNIX): peek at the cursor, seek
/// back to retransmit, consume what the peer acknowledged; unacknowledged data stays in the
/// kernel's receive queue.
///
/// Works on its own duplicate of the socket's descriptor: close it with `close()` (or use
/// `with`), which also restores the socket's `SO_RCVLOWAT` if armed and disables
/// `SO_PEEK_OFF` again. One peeker per socket; not for use by two threads at once
/// (`RuntimeError`).
// doc-copy: peeker.exclusive
/// Other code must not read from the socket or change `SO_PEEK_OFF` while the peeker lives: reads
/// through `Peeker.consume` keep the cursor right, and a read by another path must be reported with
/// `Peeker.note_consumed`.
// doc-end
#[pyclass(frozen, module = "lowcopy._lowcopy")]
pub struct Peeker {
    h: Handle<lowcopy::Peeker<OwnedFd>>,
}

/// What one `Peeker.peek_at_into` or `Peeker.peekv_at` peeked, and from where: compare
/// `stream_pos` with your own position of `offset` to catch an offset that went wrong.
#[pyclass(frozen, eq, module = "lowcopy._lowcopy")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeekResult {
    // doc-copy: peek_result.len
    /// Bytes copied (the call's return value); 0 at end of stream after `offset`.
    // doc-end
    #[pyo3(get)]
    pub len: u64,
    // doc-copy: peek_result.offset
    /// Where they came from: bytes after the head of the receive queue (the offset asked for).
    // doc-end
    #[pyo3(get)]
    pub offset: u64,
    // doc-copy: peek_result.stream_pos
    /// The same place as a position in the stream: the bytes that left the head of the queue
    /// through this peeker (`Peeker.consume`, `Peeker.note_consumed`) plus `offset`. For a peeker
    /// made before any byte was read from the socket, the stream position of the first byte peeked.
    // doc-end
    #[pyo3(get)]
    pub stream_pos: u64,
    // doc-copy: peek_result.syscalls
    /// Syscalls this call made: 1 when the kernel's `SO_PEEK_OFF` already was at `offset` (or the
    /// discard prefix was used), 2 when it had to be moved first; more only on the paths documented
    /// at `Peeker.peek_at_into`.
    // doc-end
    #[pyo3(get)]
    pub syscalls: u32,
    /// `SO_PEEK_OFF` was written before the peek (the kernel's offset was elsewhere).
    #[pyo3(get)]
    pub moved: bool,
    /// The peek went through a discard prefix (the kernel copied `offset` bytes to skip them).
    #[pyo3(get)]
    pub prefixed: bool,
}

impl From<lowcopy::PeekResult> for PeekResult {
    fn from(r: lowcopy::PeekResult) -> Self {
        PeekResult {
            len: r.len,
            offset: r.offset,
            stream_pos: r.stream_pos,
            syscalls: r.syscalls,
            moved: r.flags & lowcopy::peek::PEEK_MOVED != 0,
            prefixed: r.flags & lowcopy::peek::PEEK_PREFIXED != 0,
        }
    }
}

#[pymethods]
impl PeekResult {
    fn __repr__(&self) -> String {
        format!(
            "PeekResult(len={}, offset={}, stream_pos={}, syscalls={}, moved={}, prefixed={})",
            self.len,
            self.offset,
            self.stream_pos,
            self.syscalls,
            if self.moved { "True" } else { "False" },
            if self.prefixed { "True" } else { "False" },
        )
    }
}

impl Peeker {
    /// The offset peek of `peek_at_into`/`peekv_at`: GIL kept with `MSG_DONTWAIT`, released
    /// for a call that may wait.
    fn peek_at_iov(
        &self,
        py: Python<'_>,
        offset: usize,
        iov: &[libc::iovec],
        flags: i32,
    ) -> PyResult<PeekResult> {
        let flags = flags_of(flags)?;
        self.h.with(|p| {
            if flags.dontwait() {
                // SAFETY: every iovec describes a live, writable buffer export owned by the
                // caller for this whole call.
                return unsafe { p.peek_at_raw(offset, iov, flags) }
                    .py()
                    .map(PeekResult::from);
            }
            let iov = Iovecs(iov);
            blocking(py, || {
                // SAFETY: as above; the GIL is released but the exports stay held.
                unsafe { p.peek_at_raw(offset, iov.get(), flags) }
            })
            .map(PeekResult::from)
        })
    }

    fn peek_iov(&self, py: Python<'_>, iov: &[libc::iovec], flags: i32) -> PyResult<usize> {
        let flags = flags_of(flags)?;
        self.h.with(|p| {
            if flags.dontwait() {
                // Never waits: keep the GIL (no thread switch on the fast path).
                // SAFETY: every iovec describes a live, writable buffer export (or a Vec)
                // owned by the caller for this whole call.
                return unsafe { p.peek_raw(iov, flags) }.py();
            }
            let iov = Iovecs(iov);
            blocking(py, || {
                // SAFETY: as above; the GIL is released but the exports stay held.
                unsafe { p.peek_raw(iov.get(), flags) }
            })
        })
    }
}

/// Iovecs that may cross into a detached closure: they point at buffers the caller keeps
/// exported (alive, un-resizable) until the call returns.
#[derive(Clone, Copy)]
pub struct Iovecs<'a>(pub &'a [libc::iovec]);
// SAFETY: see the type's doc; only the calling thread's kernel call reads or writes them.
unsafe impl Send for Iovecs<'_> {}
// SAFETY: as above.
unsafe impl Sync for Iovecs<'_> {}

impl<'a> Iovecs<'a> {
    /// The iovecs (a method, so that closures capture the whole wrapper).
    pub fn get(self) -> &'a [libc::iovec] {
        self.0
    }
}

#[pymethods]
impl Peeker {
    /// Makes a peeker over a duplicate of `sock`'s descriptor with `mode` (`PeekMode`).
    ///
    /// The cursor starts at 0, the head of the receive queue.
    // doc-copy: peeker_new.kernel
    /// `PeekMode.OFFSET` (and `PeekMode.AUTO` or `PeekMode.OFFSET_OR_DISCARD` when they pick
    /// `SO_PEEK_OFF`) sets the socket's `SO_PEEK_OFF` to 0; the discard mechanism makes sure it is
    /// disabled (-1) and, on TCP and MPTCP, sets `TCP_INQ` (one `setsockopt`), whose hint lets an
    /// empty peek cost one `recvmsg`; a caller's own `recvmsg` with a control buffer then also
    /// receives a `TCP_CM_INQ` message. Dropping the peeker turns it off.
    // doc-end
    ///
    /// `family` and `proto` state what the socket is, as `socket.socket(family, SOCK_STREAM,
    /// proto)` made it (`sock.family`, `sock.proto`): `AF_INET` or `AF_INET6` with 0,
    /// `IPPROTO_TCP` or `IPPROTO_MPTCP`, or `AF_UNIX` with 0. The peeker then checks the kind
    /// (one `getsockopt` on TCP, two on MPTCP and AF_UNIX, below) instead of learning it
    /// (three). The default `family` 0 asks the socket.
    ///
    /// Urgent data (a TCP urgent byte, `MSG_OOB`, or an AF_UNIX out-of-band byte):
    // doc-copy: peeker.urgent
    /// making a peeker sets `SO_OOBINLINE` on the socket and leaves it set. Every urgent byte is
    /// then an ordinary byte of the stream, where the peer sent it: peeks deliver byte for byte
    /// what reads of the socket deliver, a consume of `nbytes` bytes drops exactly `nbytes` of them
    /// (it reads on past the mark), and no byte is peeked twice or skipped. Urgency itself is not
    /// reported (`recv(MSG_OOB)` then fails with errno EINVAL; `SIOCATMARK` still tells where the
    /// mark is).
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
    /// (close-on-exec) and closes them at once, counted in `PeekStats.fds_closed`: none is left
    /// open, none is kept. The kernel hands over a message's descriptors with its first byte read,
    /// so a consume that ends inside a message takes all of them. It ends every read and every peek
    /// after a message that carried descriptors (net/unix/af_unix.c `unix_stream_read_generic`): a
    /// peek that reaches one returns short, as a read does, and the next continues after it, so
    /// peeks deliver byte for byte what reads deliver; a consume reads on until it has dropped
    /// `nbytes` bytes. A discard peek whose prefix reaches such a message peeks once with
    /// `SO_PEEK_OFF` at the cursor, as past an urgent mark (AF_UNIX has it since 3.4). The
    /// consume's control buffer holds the most descriptors one message carries (253, `SCM_MAX_FD`),
    /// so the kernel never closes any for lack of room (`MSG_CTRUNC`). A caller that wants the
    /// descriptors reads those bytes itself, with `recvmsg` and a control buffer, and reports them
    /// with `Peeker.note_consumed`.
    // doc-end
    ///
    // doc-copy: peeker_kind.wrong
    /// Stating the kind wrong loses nothing: the kind is checked before any byte is read, and a
    /// socket that is not of it fails with `EPROTOTYPE` (a datagram socket, whose consume would
    /// drop a whole datagram; an AF_UNIX stream stated as TCP or MPTCP). The check costs one
    /// syscall per peeker on TCP, `getsockopt(TCP_INFO)` (only TCP and MPTCP sockets answer it,
    /// with their state), and two on MPTCP (`SO_PROTOCOL` is TCP or MPTCP: an MPTCP listener hands
    /// out TCP sockets to peers without MPTCP) and AF_UNIX (`SO_TYPE` is a stream): each also tells
    /// a listening socket, refused as by `Peeker` without a `family`. It does not tell IPv4 from
    /// IPv6 or TCP from MPTCP, nor a TCP socket stated as AF_UNIX: stated wrong among those, a
    /// peeker peeks and consumes right, but may cost more (a TCP consume copies, as on AF_UNIX) or
    /// fail where the real socket does (`EOPNOTSUPP` for `PeekMode.OFFSET` on MPTCP), and
    /// `PeekMode.AUTO` may note the answer of `SO_PEEK_OFF` for the family stated, not the
    /// socket's.
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
    /// `urgent=Urgent.CALLER`:
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
    /// `PeekMode.OFFSET`, `EOPNOTSUPP` on AF_UNIX (its out-of-band byte is delivered by peeks that
    /// reads skip, and has no mark a peek stops at).
    // doc-end
    ///
    /// Errors: `ValueError` for a mode that is not a `PeekMode`, an `urgent` that is not an
    /// `Urgent`, or a `family`/`proto` pair other than those above; `OSError`:
    // doc-copy: peeker_new.errors
    /// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket; or
    /// `PeekMode.OFFSET` on a socket without `SO_PEEK_OFF`), `ENOTCONN` (a listening TCP or MPTCP
    /// socket) and `EINVAL` (a listening AF_UNIX socket): a listening socket is no connection,
    /// refused with the errno its `recv` gives; `EPROTOTYPE` (a stated kind that is not the
    /// socket's); `setsockopt`/`getsockopt` errors.
    // doc-end
    #[new]
    #[pyo3(signature = (sock, mode = 0, *, family = 0, proto = 0, urgent = 0))]
    fn new(
        sock: &Bound<'_, PyAny>,
        mode: u32,
        family: i32,
        proto: i32,
        urgent: u32,
    ) -> PyResult<Self> {
        guard(|| {
            let mode = lowcopy::PeekMode::try_from(mode)
                .map_err(|_| PyValueError::new_err(format!("unknown PeekMode {mode}")))?;
            let kind = lowcopy::StreamKind::from_raw(family, proto).map_err(|_| {
                PyValueError::new_err(format!(
                    "family {family} with proto {proto} is not a stream socket lowcopy peeks"
                ))
            })?;
            let urgent = match urgent {
                0 => lowcopy::Urgent::Inline,
                1 => lowcopy::Urgent::Caller,
                u => return Err(PyValueError::new_err(format!("unknown Urgent {u}"))),
            };
            let mut opts = lowcopy::PeekerOptions::new(mode).urgent(urgent);
            opts.kind = kind;
            let fd = dup_of(sock)?;
            let p = sock
                .py()
                .detach(|| lowcopy::Peeker::with_options(fd, opts))
                .py()?;
            Ok(Peeker {
                h: Handle::new("Peeker", p),
            })
        })
    }

    /// Peeks up to `nbytes` bytes at the cursor and returns them (at least one); the cursor
    /// advances by their number. The buffer is sized as `peek_at`'s, by what the socket can
    /// hold (`OverflowError` above 2147483647).
    ///
    /// `b""` at end of stream after the cursor (the peer shut down; bytes before the
    /// cursor stay queued). `BlockingIOError` (`EAGAIN`) when nothing lies beyond the
    /// cursor and `flags` has `MSG_DONTWAIT` or the socket is non-blocking (a socket with a
    /// timeout is). A blocking peek releases the GIL; a signal runs the Python handlers and
    /// the peek goes on if they do not raise.
    // doc-copy: peek.wait
    /// A blocking peek returns as soon as one byte beyond the cursor is there (with the armed
    /// low-water mark too; a socket's own `SO_RCVLOWAT` above 1 makes the kernel wait for that many
    /// bytes beyond the cursor, as recv does), or with `EAGAIN` when `SO_RCVTIMEO` runs out.
    // doc-end
    // doc-copy: peek.window
    /// Peeked bytes stay in the receive buffer: when they fill it (small segments cost far more
    /// kernel memory than their payload) the peer's window is closed and a blocking peek waits
    /// until something is consumed, so a caller that may block there sets `SO_RCVTIMEO` or consumes
    /// acknowledged bytes first.
    // doc-end
    ///
    /// Errors (`OSError`; `ECONNRESET` is `ConnectionResetError`): `EINVAL` (flags other than
    /// `MSG_DONTWAIT`, `nbytes` 0),
    // doc-copy: peek.errors
    /// `EOVERFLOW` (cursor beyond what the mechanism can represent), `ECONNRESET`, `EINTR` and
    /// other `recvmsg` errors.
    // doc-end
    #[pyo3(signature = (nbytes, flags = 0))]
    fn peek(&self, py: Python<'_>, nbytes: &Bound<'_, PyAny>, flags: i32) -> PyResult<Py<PyBytes>> {
        guard(|| {
            let nbytes = result_size(nbytes, "nbytes")?;
            let nbytes = self
                .h
                .with(|p| Ok(lowcopy::recv_buffer_len(p.as_fd(), nbytes)))?;
            let mut v: Vec<u8> = Vec::new();
            v.try_reserve_exact(nbytes.max(1))
                .map_err(|_| pyo3::exceptions::PyMemoryError::new_err(()))?;
            let iov = [libc::iovec {
                iov_base: v.as_mut_ptr().cast(),
                iov_len: nbytes,
            }];
            let n = self.peek_iov(py, &iov, flags)?;
            assert!(
                n <= nbytes,
                "the core reported more bytes than the buffer holds"
            );
            // SAFETY: the kernel wrote the first `n <= capacity` bytes.
            unsafe { v.set_len(n) };
            Ok(PyBytes::new(py, &v).unbind())
        })
    }

    /// `peek` into a writable buffer: `nbytes` of it (0: all of it); returns the bytes
    /// written. Results and errors as `peek`. The data path: no allocation, and with
    /// `MSG_DONTWAIT` the GIL is kept (the call never waits).
    #[pyo3(signature = (buffer, nbytes = 0, flags = 0))]
    fn peek_into(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        nbytes: i64,
        flags: i32,
    ) -> PyResult<usize> {
        guard(|| {
            let b = WriteBuf::get(buffer, nbytes)?;
            let r = self.peek_iov(py, &[b.iovec()], flags);
            b.release(py);
            r
        })
    }

    /// `peek_into` scattering into several writable buffers in order (as
    /// `socket.recvmsg_into`); returns the bytes written in all. At most `IOV_MAX` (1024)
    /// buffers, else `EMSGSIZE`; the discard mechanism splits a peek into more buffers than
    /// fit beside its own prefix into several `recvmsg` (see `peek_at_into`).
    #[pyo3(signature = (buffers, flags = 0))]
    fn peekv(&self, py: Python<'_>, buffers: &Bound<'_, PyAny>, flags: i32) -> PyResult<usize> {
        guard(|| {
            let mut held = Vec::new();
            for b in buffers.try_iter()? {
                match WriteBuf::get(&b?, 0) {
                    Ok(w) => held.push(w),
                    Err(e) => {
                        held.into_iter().for_each(|w| w.release(py));
                        return Err(e);
                    }
                }
            }
            let iov: Vec<libc::iovec> = held.iter().map(WriteBuf::iovec).collect();
            let r = self.peek_iov(py, &iov, flags);
            held.into_iter().for_each(|w| w.release(py));
            r
        })
    }

    /// Peeks into `buffer` (`nbytes` of it; 0: all of it) at `offset` bytes after the head of
    /// the receive queue: your own stream arithmetic, with no `seek` to keep in step. The
    /// cursor ends at `offset` + the bytes peeked. Returns a `PeekResult` saying what was
    /// peeked from where (`len` 0 at end of stream after `offset`).
    ///
    // doc-copy: peek_at_cursor.cost
    /// Cost with `SO_PEEK_OFF` (`PeekMode.OFFSET`, and `PeekMode.AUTO` when it picked it): one
    /// `recv`/`recvmsg` when the kernel's offset is already at `offset` (after a peek that ended
    /// there, or a consume that moved both back), a `setsockopt` and the `recv` when it must be
    /// moved (so a rewind writes `SO_PEEK_OFF` once); never a classification. `PeekMode.AUTO` peeks
    /// an `offset` at most 4096 bytes ahead of the kernel's offset from there, with a discard
    /// prefix over the bytes between (one `recvmsg`, no `setsockopt`); `PeekMode.OFFSET_OR_DISCARD`
    /// never does. The discard mechanism: one `recvmsg` per peek that finds bytes, and on TCP and
    /// MPTCP one per peek that finds nothing past `offset` with `MSG_DONTWAIT` (`TCP_INQ`'s hint
    /// says no more is queued and the peer has not ended), and on AF_UNIX two (the `recvmsg` and a
    /// `poll`: a stream peek from the head tells neither the peer's shutdown nor an out-of-band
    /// byte ahead, which `POLLRDHUP` and `POLLPRI` do; a message with control data shows as
    /// `MSG_CTRUNC`; the offset mechanism costs one there); more iovecs than fit beside the prefix
    /// below `IOV_MAX` split the peek into several `recvmsg`, each into as many as fit, until one
    /// comes back short. Beyond those: with the low-water mark armed, a blocking call lowers it
    /// first (a `setsockopt`) and one that finds nothing sets it to `offset` + 1 (a `setsockopt`);
    /// the discard mechanism, finding nothing past `offset` where neither settles it (an urgent
    /// mark or out-of-band byte, control data, which credentials with `SO_PASSCRED` add to every
    /// message, bytes arriving meanwhile, a blocking call), asks `ioctl(FIONREAD)` about a mark,
    /// `poll` whether the peer ended and `fcntl` whether the fd blocks, and waits as a peek at the
    /// cursor does. A reset (or a connection error) that leaves bytes queued before `offset` is not
    /// seen by that one `recvmsg`: a non-blocking peek there returns `EAGAIN` (`poll` reports
    /// `POLLHUP`/`POLLERR`) until a blocking peek or a consume reports it.
    // doc-end
    /// A moved offset shows as `moved`, a discard prefix as `prefixed`. With `MSG_DONTWAIT`
    /// the GIL is kept (the call never waits); the data path allocates nothing.
    ///
    /// Errors:
    // doc-copy: peek_at_cursor.errors
    /// As a peek at the cursor (the cursor is then at `offset`); `EOVERFLOW` (`offset` beyond what
    /// the mechanism can represent: `INT_MAX` with `SO_PEEK_OFF`, 1023 x 64 KiB with the discard
    /// prefix, for any number of iovecs up to `IOV_MAX`; the cursor is then unchanged).
    // doc-end
    #[pyo3(signature = (offset, buffer, nbytes = 0, flags = 0))]
    fn peek_at_into(
        &self,
        py: Python<'_>,
        offset: &Bound<'_, PyAny>,
        buffer: &Bound<'_, PyAny>,
        nbytes: i64,
        flags: i32,
    ) -> PyResult<PeekResult> {
        guard(|| {
            let off = count(offset, "offset")?;
            let b = WriteBuf::get(buffer, nbytes)?;
            let r = self.peek_at_iov(py, off, &[b.iovec()], flags);
            b.release(py);
            r
        })
    }

    /// `peek_at_into` scattering into several writable buffers in order, as `peekv` does;
    /// returns the `PeekResult`.
    #[pyo3(signature = (offset, buffers, flags = 0))]
    fn peekv_at(
        &self,
        py: Python<'_>,
        offset: &Bound<'_, PyAny>,
        buffers: &Bound<'_, PyAny>,
        flags: i32,
    ) -> PyResult<PeekResult> {
        guard(|| {
            let off = count(offset, "offset")?;
            let mut held = Vec::new();
            for b in buffers.try_iter()? {
                match WriteBuf::get(&b?, 0) {
                    Ok(w) => held.push(w),
                    Err(e) => {
                        held.into_iter().for_each(|w| w.release(py));
                        return Err(e);
                    }
                }
            }
            let iov: Vec<libc::iovec> = held.iter().map(WriteBuf::iovec).collect();
            let r = self.peek_at_iov(py, off, &iov, flags);
            held.into_iter().for_each(|w| w.release(py));
            r
        })
    }

    // doc-copy: seek.kernel
    /// Moves the cursor to `offset` bytes after the head of the receive queue: back to retransmit,
    /// or ahead to skip bytes without copying them (offset mechanism; the discard one copies them
    /// at the next peek). Makes no syscall unless the low-water mark is armed.
    // doc-end
    ///
    /// Errors (`OSError`):
    // doc-copy: seek.errors
    /// `EOVERFLOW` if the mechanism cannot represent the offset (`INT_MAX` for `SO_PEEK_OFF`, 1023
    /// x 64 KiB for the discard prefix); with the low-water mark armed, its `setsockopt` errors.
    /// The cursor is then unchanged.
    // doc-end
    fn seek(&self, offset: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            let o = count(offset, "offset")?;
            self.h.with(|p| p.seek(o).py())
        })
    }

    // doc-copy: peeker_consume.kernel
    /// Drops up to `nbytes` acknowledged bytes from the head of the receive queue and moves the
    /// cursor back by the bytes dropped (never below 0). Never blocks. Returns bytes dropped: fewer
    /// than `nbytes` when fewer are queued, 0 for `nbytes` 0 or at end of stream. TCP and MPTCP
    /// drop them without copying (`MSG_TRUNC`); AF_UNIX reads them into a scratch buffer, on past
    /// messages that carry descriptors, and closes the descriptors that came with them
    /// (`PeekStats.fds_closed`).
    // doc-end
    ///
    /// Errors (`OSError`; `EAGAIN` is `BlockingIOError`):
    // doc-copy: peeker_consume.errors
    /// `EAGAIN` when nothing is queued; `recv` errors (`ECONNRESET`, ...); with the low-water mark
    /// armed, its `setsockopt` errors (the bytes were dropped and the cursor moved).
    // doc-end
    fn consume(&self, nbytes: &Bound<'_, PyAny>) -> PyResult<usize> {
        guard(|| {
            let n = count(nbytes, "nbytes")?;
            self.h.with(|p| p.consume(n).py())
        })
    }

    /// Tells the peeker that `nbytes` bytes left the head of the receive queue by another
    /// path (a `ZeroCopyReceiver`, a plain `recv` on the socket).
    // doc-copy: note_consumed.kernel
    /// The cursor moves back by `nbytes` (never below 0), as `Peeker.consume` would move it, with
    /// no syscall unless the low-water mark is armed (it follows the cursor): both of those paths
    /// lower the kernel's `SO_PEEK_OFF` by what they take (the zero-copy receiver corrects the
    /// kernel, which forgets to for mapped bytes), so cursor and kernel stay together.
    // doc-end
    /// Errors: only with the low-water mark armed, its `setsockopt` errors.
    fn note_consumed(&self, nbytes: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            let n = count(nbytes, "nbytes")?;
            self.h.with(|p| p.note_consumed(n).py())
        })
    }

    /// The cursor: bytes between the head of the receive queue and the next peek.
    #[getter]
    fn offset(&self) -> PyResult<usize> {
        guard(|| self.h.with(|p| Ok(p.offset())))
    }

    /// The mechanism in use: `PeekMode.OFFSET` or `PeekMode.DISCARD`, never `AUTO`.
    #[getter]
    fn mode(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let m = self.h.with(|p| Ok(p.mode() as u32))?;
            peek_mode(py, m)
        })
    }

    /// Whether the low-water mark is armed; setting it arms (True) or disarms (False) it
    /// (asyncio's selectors obey the mark too).
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
    /// Errors on setting (`OSError`):
    // doc-copy: lowat_armed.errors
    /// `EOPNOTSUPP` on AF_UNIX (its poll ignores `SO_RCVLOWAT`, net/unix/af_unix.c), and
    /// `getsockopt`/`setsockopt` errors.
    // doc-end
    #[getter]
    fn lowat_armed(&self) -> PyResult<bool> {
        guard(|| self.h.with(|p| Ok(p.lowat_armed())))
    }

    #[setter]
    fn set_lowat_armed(&self, on: bool) -> PyResult<()> {
        guard(|| self.h.with(|p| p.set_lowat_armed(on).py()))
    }

    /// The counters so far (`PeekStats`).
    fn stats(&self) -> PyResult<PeekStats> {
        guard(|| self.h.with(|p| Ok(p.stats().into())))
    }

    /// The peeker's own duplicate of the socket's descriptor (for `select`/asyncio
    /// `add_reader`); valid until `close()`.
    fn fileno(&self) -> PyResult<i32> {
        guard(|| self.h.with(|p| Ok(p.get_ref().as_raw_fd())))
    }

    /// Closes the duplicate descriptor.
    // doc-copy: peeker_drop.kernel
    /// Restores `SO_RCVLOWAT` if the mark was armed, leaves `SO_PEEK_OFF` disabled (-1) if this
    /// peeker used it, and `TCP_INQ` off (0) if it set it (the discard mechanism on TCP).
    // doc-end
    /// `restore=False` for a socket you close next: the options stay as the peeker left them (no
    /// syscall but the `close` of the duplicate). Idempotent; later calls other than `close` raise `ValueError`.
    #[pyo3(signature = (restore = true))]
    fn close(&self, restore: bool) -> PyResult<()> {
        guard(|| {
            match self.h.take()? {
                Some(p) if !restore => drop(p.into_inner_unrestored()),
                p => drop(p),
            }
            Ok(())
        })
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.h.is_closed()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(true)
    }

    fn __repr__(&self) -> String {
        match self
            .h
            .with(|p| Ok((p.get_ref().as_raw_fd(), p.mode(), p.offset())))
        {
            Ok((fd, m, o)) => format!("<lowcopy.Peeker fd={fd} mode={m:?} offset={o}>"),
            Err(_) if self.h.is_closed() => "<lowcopy.Peeker [closed]>".to_string(),
            Err(_) => "<lowcopy.Peeker [in use]>".to_string(),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PeekStats>()?;
    m.add_class::<Peeker>()?;
    m.add_class::<PeekResult>()?;
    m.add_function(wrap_pyfunction!(peek_at, m)?)?;
    m.add_function(wrap_pyfunction!(peek_into, m)?)?;
    m.add_function(wrap_pyfunction!(consume, m)?)?;
    m.add_function(wrap_pyfunction!(peek_supported, m)?)?;
    Ok(())
}
