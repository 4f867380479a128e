//! Offset peek: read received stream data at an offset without consuming it.
//!
//! Two mechanisms:
//! - [`PeekMode::Offset`]: the kernel's `SO_PEEK_OFF`. The kernel keeps the offset, each
//!   `MSG_PEEK` starts there and moves it forward, each read moves it back
//!   (net/ipv4/tcp.c `tcp_recvmsg_locked`, include/net/sock.h `sk_peek_offset_fwd/bwd`).
//!   TCP over IPv4 since Linux 6.9 (05ea491641d3), IPv6 since 6.12 (be9a4fb831b8),
//!   AF_UNIX stream since 3.4; never MPTCP.
//! - [`PeekMode::Discard`]: `MSG_PEEK` with a leading scratch iovec that swallows the first
//!   `offset` bytes. Works everywhere, but the kernel copies those `offset` bytes again on
//!   every peek ([`PeekStats::bytes_skipped_copied`] counts them).
//!
//! The [`Peeker`] is the stateful cursor a user-mode network stack keeps over a socket whose
//! unacknowledged data stays in the kernel (passt's `tcp_buf.c`): peek at the cursor, seek back
//! to retransmit, consume what the peer acknowledged.
//!
//! # Urgent data
//!
//! A peer may send TCP urgent data (`MSG_OOB`), or on AF_UNIX stream sockets an out-of-band
//! byte (Linux 5.15). Without `SO_OOBINLINE` the kernel takes that byte out of the stream for
//! reads but not for every peek: an `SO_PEEK_OFF` peek skips it on TCP without counting it in
//! the offset (the next peek returns a byte twice), and on AF_UNIX delivers it while reads do
//! not. So a [`Peeker`] keeps urgent bytes **inline**, as RFC 6093 advises applications to
//! do ([`Peeker::new`]):
// doc-source: peeker.urgent
//! making a peeker sets `SO_OOBINLINE` on the socket and leaves it set. Every urgent byte is
//! then an ordinary byte of the stream, where the peer sent it: peeks deliver byte for byte
//! what reads of the socket deliver, a consume of `n` bytes drops exactly `n` of them (it reads
//! on past the mark), and no byte is peeked twice or skipped. Urgency itself is not reported
//! (`recv(MSG_OOB)` then fails with errno EINVAL; `SIOCATMARK` still tells where the mark is).
//!
//! The kernel ends every read and every peek at the urgent mark (net/ipv4/tcp.c
//! `tcp_recvmsg_locked`, net/unix/af_unix.c `manage_oob`): a peek that reaches it returns
//! short, and the next continues at the urgent byte. A discard peek starts at the head of the
//! queue, so it cannot pass a mark that lies ahead of the head: there the peeker peeks once
//! with `SO_PEEK_OFF` at the cursor where the socket has it; where it has not (TCP before
//! 6.9, IPv6 before 6.12) the peek returns `EAGAIN`, blocking or not, until the bytes before
//! the mark are consumed (poll still reports the socket readable meanwhile).
// doc-end
//!
//! The stateless [`peek_at`] and [`consume`] see the stream as the socket's `SO_OOBINLINE`
//! says: set it on sockets that may receive urgent data.
//!
//! # Descriptors (AF_UNIX)
//!
//! A peer on an AF_UNIX stream socket may pass descriptors (`SCM_RIGHTS`) with the bytes it
//! sends:
// doc-source: peeker.descriptors
//! a peeker never hands them over. Its peeks pass no control buffer, so the descriptors stay
//! queued with their bytes; its consume receives those that came with the bytes it drops
//! (close-on-exec) and closes them at once, counted in [`PeekStats::fds_closed`]: none is
//! left open, none is kept. The kernel hands over a message's descriptors with its first byte
//! read, so a consume that ends inside a message takes all of them. It ends every read and
//! every peek after a message that carried descriptors (net/unix/af_unix.c
//! `unix_stream_read_generic`): a peek that reaches one returns short, as a read does, and the
//! next continues after it, so peeks deliver byte for byte what reads deliver; a consume reads
//! on until it has dropped `n` bytes. A discard peek whose prefix reaches such a message peeks
//! once with `SO_PEEK_OFF` at the cursor, as past an urgent mark (AF_UNIX has it since 3.4).
//! The consume's control buffer holds the most descriptors one message carries (253,
//! `SCM_MAX_FD`), so the kernel never closes any for lack of room (`MSG_CTRUNC`). A caller
//! that wants the descriptors reads those bytes itself, with `recvmsg` and a control buffer,
//! and reports them with [`Peeker::note_consumed`].
// doc-end
//!
//! The stateless [`consume`] does the same, without counting.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::mem::ManuallyDrop;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU8, Ordering};

use libc::{c_int, iovec};

use crate::sys::{self, errno, IOV_MAX, SCRATCH_LEN, SO_PEEK_OFF};
use crate::Flags;

/// Which peek mechanism to use (`LOWCOPY_PEEK_*` in C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PeekMode {
    // doc-source: peek_mode.auto
    /// `SO_PEEK_OFF` where this socket family has it, else [`PeekMode::Discard`]. The answer is
    /// probed once per (family, protocol) and cached for the process. With `SO_PEEK_OFF`, a
    /// cursor of at most [`AUTO_DISCARD_MAX`] bytes that the kernel's offset is not already at
    /// is peeked with a discard prefix instead, which saves a `setsockopt` for a copy of at
    /// most 4 KiB (counted in [`PeekStats::bytes_skipped_copied`]).
    // doc-end
    Auto = 0,
    // doc-source: peek_mode.offset
    /// The kernel's `SO_PEEK_OFF`: TCP over IPv4 since Linux 6.9, over IPv6 since 6.12, AF_UNIX
    /// stream since 3.4; never MPTCP (`EOPNOTSUPP` on sockets without it). Peeks cost the same
    /// at any offset.
    // doc-end
    Offset = 1,
    // doc-source: peek_mode.discard
    /// `MSG_PEEK` with a leading scratch prefix that swallows the `offset` bytes before the
    /// cursor. Works on every stream socket, but the kernel copies the prefix again on every
    /// peek (counted in [`PeekStats::bytes_skipped_copied`]).
    // doc-end
    Discard = 2,
}

impl TryFrom<u32> for PeekMode {
    type Error = io::Error;
    /// Unknown values are `EINVAL`.
    fn try_from(v: u32) -> io::Result<Self> {
        match v {
            0 => Ok(Self::Auto),
            1 => Ok(Self::Offset),
            2 => Ok(Self::Discard),
            _ => Err(errno(libc::EINVAL)),
        }
    }
}

/// Counters kept by a [`Peeker`]. Byte counts are in bytes.
///
/// Shared with C as `lowcopy_peek_stats` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeekStats {
    // doc-source: peek_stats.syscalls
    /// Syscalls the peeker made, failed ones included, its constructor's too: 2 or 3 setting
    /// the socket up (`SO_PEEK_OFF`, `SO_OOBINLINE`), and before them the 3 `getsockopt` of
    /// [`Peeker::new`] that learn what the socket is, or the 1 (TCP) or 2 (MPTCP, AF_UNIX) of
    /// [`Peeker::with_kind`] that check the kind stated.
    // doc-end
    pub syscalls: u64,
    // doc-source: peek_stats.peeks
    /// Peeks that returned data.
    // doc-end
    pub peeks: u64,
    // doc-source: peek_stats.bytes_peeked
    /// Bytes delivered to the caller by peeks.
    // doc-end
    pub bytes_peeked: u64,
    // doc-source: peek_stats.bytes_skipped_copied
    /// Bytes the kernel copied to user space only for lowcopy to throw them away: the discard
    /// prefix, and consumed bytes on protocols without a copy-free `MSG_TRUNC` (AF_UNIX).
    /// Always 0 with [`PeekMode::Offset`] on TCP; at most [`AUTO_DISCARD_MAX`] (4096) per
    /// peek with [`PeekMode::Auto`] over `SO_PEEK_OFF`.
    // doc-end
    pub bytes_skipped_copied: u64,
    // doc-source: peek_stats.bytes_consumed
    /// Bytes dropped from the head of the receive queue by the peeker's consume.
    // doc-end
    pub bytes_consumed: u64,
    // doc-source: peek_stats.rcvlowat_updates
    /// `SO_RCVLOWAT` changes made by the armed low-water mark.
    // doc-end
    pub rcvlowat_updates: u64,
    // doc-source: peek_stats.fds_closed
    /// Descriptors that came with bytes the peeker's consume dropped (AF_UNIX `SCM_RIGHTS`,
    /// and the pidfd `SO_PASSPIDFD` attaches), received close-on-exec and closed at once.
    // doc-end
    pub fds_closed: u64,
}

/// What a stream socket is, as the code that created it knows: lets [`Peeker::with_kind`]
/// check it with 1 or 2 `getsockopt` instead of the 3 that [`Peeker::new`] makes to learn it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// `socket(AF_INET, SOCK_STREAM, IPPROTO_TCP)` (or protocol 0).
    Tcp4,
    /// `socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP)` (or protocol 0).
    Tcp6,
    /// `socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)`: never has `SO_PEEK_OFF`.
    Mptcp4,
    /// `socket(AF_INET6, SOCK_STREAM, IPPROTO_MPTCP)`.
    Mptcp6,
    /// `socket(AF_UNIX, SOCK_STREAM, 0)`.
    Unix,
}

impl StreamKind {
    /// The kind of `socket(domain, SOCK_STREAM, protocol)`; `Ok(None)` for `AF_UNSPEC` (0),
    /// which means "not stated: ask the socket".
    ///
    /// # Errors
    /// `EINVAL` for any other pair (a datagram protocol, an unknown family, AF_UNIX with a
    /// protocol): the C ABI's check of the numbers it is given.
    pub fn from_raw(domain: c_int, protocol: c_int) -> io::Result<Option<Self>> {
        Ok(Some(match (domain, protocol) {
            (libc::AF_UNSPEC, 0) => return Ok(None),
            (libc::AF_INET, 0 | libc::IPPROTO_TCP) => Self::Tcp4,
            (libc::AF_INET6, 0 | libc::IPPROTO_TCP) => Self::Tcp6,
            (libc::AF_INET, libc::IPPROTO_MPTCP) => Self::Mptcp4,
            (libc::AF_INET6, libc::IPPROTO_MPTCP) => Self::Mptcp6,
            (libc::AF_UNIX, 0) => Self::Unix,
            _ => return Err(errno(libc::EINVAL)),
        }))
    }

    fn info(self) -> SockInfo {
        let (transport, family) = match self {
            Self::Tcp4 => (Transport::Tcp, 0),
            Self::Tcp6 => (Transport::Tcp, 1),
            Self::Mptcp4 => (Transport::Tcp, 2),
            Self::Mptcp6 => (Transport::Tcp, 3),
            Self::Unix => (Transport::Unix, 4),
        };
        SockInfo { transport, family }
    }
}

/// What one [`Peeker::peek_at`] peeked, and from where: a caller that keeps its own stream
/// arithmetic compares `stream_pos` with its own position of `offset`, so that an offset that
/// went wrong (a consume or a read it did not account for) shows at once rather than as
/// silently wrong bytes.
///
/// Shared with C as `lowcopy_peek_result` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeekResult {
    // doc-source: peek_result.len
    /// Bytes copied (the call's return value); 0 at end of stream after `offset`.
    // doc-end
    pub len: u64,
    // doc-source: peek_result.offset
    /// Where they came from: bytes after the head of the receive queue (the offset asked for).
    // doc-end
    pub offset: u64,
    // doc-source: peek_result.stream_pos
    /// The same place as a position in the stream: the bytes that left the head of the queue
    /// through this peeker ([`Peeker::consume`], [`Peeker::note_consumed`]) plus `offset`.
    /// For a peeker made before any byte was read from the socket, the stream position of
    /// the first byte peeked.
    // doc-end
    pub stream_pos: u64,
    // doc-source: peek_result.syscalls
    /// Syscalls this call made: 1 when the kernel's `SO_PEEK_OFF` already was at `offset` (or
    /// the discard prefix was used), 2 when it had to be moved first; more only on the paths
    /// documented at [`Peeker::peek_at`].
    // doc-end
    pub syscalls: u32,
    /// `PEEK_MOVED` (the kernel's offset was written) and `PEEK_PREFIXED` (peeked through a
    /// discard prefix: the kernel copied `offset` bytes to skip them) bits.
    pub flags: u32,
}

/// [`PeekResult::flags`]: `SO_PEEK_OFF` was written before the peek (the kernel's offset was
/// elsewhere).
pub const PEEK_MOVED: u32 = 1;
/// [`PeekResult::flags`]: the peek went through a discard prefix of `offset` bytes.
pub const PEEK_PREFIXED: u32 = 2;

/// Largest offset `SO_PEEK_OFF` can hold: the kernel keeps it in an `int` (`sk_peek_off`).
pub const OFFSET_MAX: usize = i32::MAX as usize;

/// Largest offset the discard mechanism reaches with `iovcnt` caller iovecs: the scratch
/// buffer repeated over the iovecs left below `IOV_MAX`.
pub const fn discard_max(iovcnt: usize) -> usize {
    IOV_MAX.saturating_sub(iovcnt) * SCRATCH_LEN
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// TCP or MPTCP over IPv4/IPv6: `MSG_TRUNC` drops without copying, `MSG_WAITALL` peeks wait.
    Tcp,
    /// AF_UNIX stream.
    Unix,
}

#[derive(Clone, Copy, Debug)]
struct SockInfo {
    transport: Transport,
    /// Index into the per-family `SO_PEEK_OFF` cache.
    family: usize,
}

/// What [`PeekMode::Auto`] learnt per family: 0 unknown, 1 has `SO_PEEK_OFF`, 2 has not.
/// Index: tcp4, tcp6, mptcp4, mptcp6, unix.
static PEEK_OFF_CACHE: [AtomicU8; 5] = [const { AtomicU8::new(0) }; 5];

/// The socket's kind, from 2 or 3 `getsockopt` (SO_DOMAIN, then SO_TYPE on AF_UNIX or
/// SO_PROTOCOL on IPv4/IPv6, then TCP's `TCP_INFO` state; with `refuse_listening`,
/// `SO_ACCEPTCONN` on AF_UNIX and MPTCP): `calls` counts them, failed ones included.
///
/// `refuse_listening` (a peeker's constructor): a listening socket fails with the errno its
/// own `recv` gives (`ENOTCONN` on TCP and MPTCP, `EINVAL` on AF_UNIX). The stateless calls
/// leave that to their `recv`.
fn classify(fd: BorrowedFd<'_>, calls: &mut u64, refuse_listening: bool) -> io::Result<SockInfo> {
    // SO_DOMAIN first: it is what turns a closed fd into EBADF and a file into ENOTSOCK.
    *calls += 1;
    let domain = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    // Datagram peeks have per-datagram semantics that an offset cursor does not model.
    let family = match domain {
        libc::AF_UNIX => {
            *calls += 1;
            if sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)? != libc::SOCK_STREAM {
                return Err(errno(libc::EOPNOTSUPP));
            }
            if refuse_listening {
                refuse_listener(fd, calls, libc::EINVAL)?;
            }
            return Ok(StreamKind::Unix.info());
        }
        libc::AF_INET => 0,
        libc::AF_INET6 => 1,
        _ => return Err(errno(libc::EOPNOTSUPP)),
    };
    *calls += 1;
    match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? {
        libc::IPPROTO_TCP => {
            // TCP_INFO answers only on a TCP socket (not on a raw one of protocol 6), and says
            // whether it listens: the one call proves both.
            *calls += 1;
            let state = sys::tcp_state(fd).map_err(|_| errno(libc::EOPNOTSUPP))?;
            if refuse_listening && state == sys::TCP_LISTEN {
                return Err(errno(libc::ENOTCONN));
            }
            Ok(SockInfo {
                transport: Transport::Tcp,
                family,
            })
        }
        // MPTCP sockets are stream sockets only.
        libc::IPPROTO_MPTCP => {
            if refuse_listening {
                refuse_listener(fd, calls, libc::ENOTCONN)?;
            }
            Ok(SockInfo {
                transport: Transport::Tcp,
                family: family + 2,
            })
        }
        _ => Err(errno(libc::EOPNOTSUPP)),
    }
}

/// `SO_ACCEPTCONN`: `Err(code)` for a listening socket.
fn refuse_listener(fd: BorrowedFd<'_>, calls: &mut u64, code: c_int) -> io::Result<()> {
    *calls += 1;
    match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN)? {
        0 => Ok(()),
        _ => Err(errno(code)),
    }
}

/// The check of a stated kind ([`Peeker::with_kind`]): that the socket is a stream the
/// peeker's reads cannot lose bytes of, and not a listening one. TCP: one `getsockopt`
/// (`TCP_INFO`'s state, which only TCP and MPTCP sockets answer); MPTCP: `SO_PROTOCOL` (TCP
/// or MPTCP) and `SO_ACCEPTCONN`; AF_UNIX: `SO_TYPE` (a stream) and `SO_ACCEPTCONN`.
/// `EPROTOTYPE` for a socket that is not what was stated; a listening one fails as in
/// [`classify`]. `EBADF` and `ENOTSOCK` come through.
fn check_stated(fd: BorrowedFd<'_>, kind: StreamKind, calls: &mut u64) -> io::Result<()> {
    let wrong = || errno(libc::EPROTOTYPE);
    let pass = |e: io::Error| match e.raw_os_error() {
        Some(libc::EBADF | libc::ENOTSOCK) => e,
        _ => wrong(),
    };
    match kind {
        StreamKind::Tcp4 | StreamKind::Tcp6 => {
            *calls += 1;
            match sys::tcp_state(fd).map_err(pass)? {
                sys::TCP_LISTEN => Err(errno(libc::ENOTCONN)),
                _ => Ok(()),
            }
        }
        StreamKind::Mptcp4 | StreamKind::Mptcp6 => {
            *calls += 1;
            // An MPTCP listener may hand out plain TCP sockets (a peer without MPTCP).
            match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? {
                libc::IPPROTO_TCP | libc::IPPROTO_MPTCP => {}
                _ => return Err(wrong()),
            }
            refuse_listener(fd, calls, libc::ENOTCONN)
        }
        StreamKind::Unix => {
            *calls += 1;
            if sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)? != libc::SOCK_STREAM {
                return Err(wrong());
            }
            refuse_listener(fd, calls, libc::EINVAL)
        }
    }
}

fn is_eopnotsupp(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Whether `SO_PEEK_OFF` works on this stream socket: `Ok(true)`/`Ok(false)`.
///
// doc-source: peek_supported.kernel
/// TCP over IPv4 has it since Linux 6.9, over IPv6 since 6.12, AF_UNIX stream since 3.4;
/// MPTCP never. Leaves the socket's `SO_PEEK_OFF` value as it was (reads it, writes it back).
// doc-end
///
/// # Errors
// doc-source: peek_supported.errors
/// `EBADF` (not an open fd), `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream
/// socket: lowcopy's peek does not apply; UDP and other datagram sockets neither).
// doc-end
pub fn peek_supported(fd: impl AsFd) -> io::Result<bool> {
    let fd = fd.as_fd();
    let info = classify(fd, &mut 0, false)?;
    let cur = match sys::getsockopt_int(fd, libc::SOL_SOCKET, SO_PEEK_OFF) {
        Ok(v) => v,
        Err(e) if is_eopnotsupp(&e) => return Ok(false),
        Err(e) => return Err(e),
    };
    match sys::setsockopt_int(fd, libc::SOL_SOCKET, SO_PEEK_OFF, cur) {
        Ok(()) => {
            PEEK_OFF_CACHE[info.family].store(1, Ordering::Relaxed);
            Ok(true)
        }
        Err(e) if is_eopnotsupp(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Stateless peek of the bytes `offset` bytes after the head of the receive queue.
///
// doc-source: peek_at.returns
/// Returns bytes copied (> 0); 0 when the peer shut down and nothing lies beyond `offset`;
/// `EAGAIN` when nothing lies beyond `offset` yet and the call may not wait
/// ([`Flags::DONTWAIT`], or a non-blocking fd).
// doc-end
// doc-source: peek_at.kernel
/// A blocking call waits for one byte beyond `offset`. Stateless: uses `SO_PEEK_OFF` where the
/// socket has it (set, peek, set back to -1), else the discard prefix.
// doc-end
///
// doc-source: peek_at.cost
/// Precondition: `SO_PEEK_OFF` is disabled (-1, the default) on the socket, so no live peeker
/// may use it; this call leaves it disabled. Cost: 2-3 `getsockopt` to classify the socket, one
/// `recvmsg`, and with `offset > 0` on a socket with `SO_PEEK_OFF` two `setsockopt`. Use a
/// peeker on the data path.
// doc-end
///
/// ```
/// use std::io::{IoSliceMut, Write};
/// use std::net::{TcpListener, TcpStream};
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let mut client = TcpStream::connect(listener.local_addr()?)?;
/// let (server, _) = listener.accept()?;
/// client.write_all(b"header:body")?;
///
/// let mut buf = [0u8; 4];
/// let n = lowcopy::peek_at(&server, 7, &mut [IoSliceMut::new(&mut buf)], lowcopy::Flags::NONE)?;
/// assert_eq!(&buf[..n], b"body"); // the 11 bytes are all still queued
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// `EINVAL` ([`Flags::MORE`], or no room in `bufs`), `EMSGSIZE` (more than `IOV_MAX` iovecs),
/// and:
// doc-source: peek_at.errors
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), `EOVERFLOW`
/// (`offset` beyond what the mechanism can represent: `INT_MAX` for `SO_PEEK_OFF`, 64 KiB per
/// iovec left below 1024 for the discard prefix; never truncated), `ECONNRESET` and other
/// `recvmsg` errors.
// doc-end
pub fn peek_at(
    fd: impl AsFd,
    offset: usize,
    bufs: &mut [IoSliceMut<'_>],
    flags: Flags,
) -> io::Result<usize> {
    let fd = fd.as_fd();
    let info = classify(fd, &mut 0, false)?;
    let mode = if offset == 0 {
        // A prefix of nothing: a plain MSG_PEEK, no SO_PEEK_OFF round trip.
        Mechanism::Discard
    } else {
        Mechanism::resolve_auto(info)
    };
    let mut p = match Peeker::open(fd, info, mode, offset, false) {
        Err(e) if is_eopnotsupp(&e) => Peeker::open(fd, info, Mechanism::Discard, offset, false)?,
        r => r?,
    };
    p.peek(bufs, flags)
    // Dropping `p` disables SO_PEEK_OFF again if it set it.
}

/// Drops up to `n` bytes from the head of the receive queue; returns bytes dropped.
///
// doc-source: consume.kernel
/// TCP and MPTCP use `recv(NULL, n, MSG_TRUNC)`, which copies nothing; AF_UNIX stream has no
/// such path and reads them into a scratch buffer, on past messages that carry descriptors,
/// and closes the descriptors that came with the bytes dropped. The kernel lowers `SO_PEEK_OFF` by the bytes dropped. Returns 0 for `n` 0 or at end of
/// stream.
// doc-end
///
/// # Errors
/// `EINVAL` for [`Flags::MORE`], and:
// doc-source: consume.errors
/// `EAGAIN` when nothing is queued and the call may not block ([`Flags::DONTWAIT`] or a
/// non-blocking fd); `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream
/// socket), and `recv` errors (`ECONNRESET`, `EINTR`, ...).
// doc-end
pub fn consume(fd: impl AsFd, n: usize, flags: Flags) -> io::Result<usize> {
    let flags = peek_flags(flags)?;
    let fd = fd.as_fd();
    let info = classify(fd, &mut 0, false)?;
    let (mut syscalls, mut copied, mut fds_closed) = (0, 0, 0);
    let counts = ConsumeCounts {
        syscalls: &mut syscalls,
        copied: &mut copied,
        fds_closed: &mut fds_closed,
    };
    consume_raw(fd, info.transport, n, flags, counts)
}

/// The `recv` flags of a peek or consume: `MSG_DONTWAIT` or nothing.
fn peek_flags(flags: Flags) -> io::Result<c_int> {
    if flags.contains(Flags::MORE) {
        return Err(errno(libc::EINVAL));
    }
    Ok(flags.to_raw())
}

/// A peek's flags and iovecs: `EINVAL` for `MORE` or no room, `EMSGSIZE` beyond `IOV_MAX`.
fn check_peek_args(iov: &[iovec], flags: Flags) -> io::Result<c_int> {
    let flags = peek_flags(flags)?;
    if iov.len() > IOV_MAX {
        return Err(errno(libc::EMSGSIZE));
    }
    // No room at all would read as end of stream; a total beyond SSIZE_MAX is what
    // recvmsg refuses (lib/iov_iter.c) while recv would silently clamp it.
    let total = iov.iter().try_fold(0usize, |t, v| t.checked_add(v.iov_len));
    if !matches!(total, Some(t) if t > 0 && t <= isize::MAX as usize) {
        return Err(errno(libc::EINVAL));
    }
    Ok(flags)
}

/// Counters a consume adds to: syscalls made, bytes copied only to be dropped (AF_UNIX), and
/// descriptors that came with the dropped bytes and were closed (AF_UNIX).
struct ConsumeCounts<'a> {
    syscalls: &'a mut u64,
    copied: &'a mut u64,
    fds_closed: &'a mut u64,
}

fn consume_raw(
    fd: BorrowedFd<'_>,
    transport: Transport,
    n: usize,
    flags: c_int,
    counts: ConsumeCounts<'_>,
) -> io::Result<usize> {
    if n == 0 {
        return Ok(0);
    }
    // TCP and MPTCP: MSG_TRUNC drops without copying. AF_UNIX: MSG_TRUNC on a stream socket
    // still copies (and faults on NULL), so read into the scratch buffer, with a control
    // buffer: the descriptors that came with the bytes are received and closed at once
    // (sys::recvmsg_closing_fds), never left open nor kept. Only the first read may block;
    // after it, take what is queued. The kernel ends a read early in two places, and a short
    // read that stopped at one is read on, non-blocking, for the bytes after it are n's too:
    // at an urgent mark (SIOCATMARK), and on AF_UNIX after a message that carried control
    // data (descriptors; credentials of another writer with SO_PASSCRED: net/unix/af_unix.c
    // `unix_stream_read_generic`). Any other short read means nothing more is queued.
    let mut done = 0;
    while done < n {
        let f = if done == 0 {
            flags
        } else {
            flags | libc::MSG_DONTWAIT
        };
        *counts.syscalls += 1;
        let asked = if transport == Transport::Tcp {
            n - done
        } else {
            (n - done).min(SCRATCH_LEN)
        };
        let r = if transport == Transport::Tcp {
            sys::recv_trunc(fd, asked, f).map(|len| sys::FdRead {
                len,
                ..Default::default()
            })
        } else {
            // SAFETY: the iovec covers the shared scratch buffer, valid for writes.
            unsafe { sys::recvmsg_closing_fds(fd, &[sys::scratch_iov(asked)], f) }
        };
        match r {
            Ok(got) if got.len == 0 => break,
            Ok(got) => {
                let k = got.len;
                done += k;
                *counts.fds_closed += got.fds_closed;
                if transport == Transport::Unix {
                    *counts.copied += k as u64;
                }
                if k < asked && !got.control {
                    *counts.syscalls += 1;
                    if !sys::at_mark(fd) {
                        break;
                    }
                }
            }
            // Past a mark there may be nothing yet, or a reset: recv reports that next time.
            Err(e) if done > 0 && e.raw_os_error() == Some(libc::EAGAIN) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mechanism {
    Offset,
    Discard,
}

impl Mechanism {
    /// AUTO without touching the socket when the family's answer is cached; callers that
    /// get `Offset` still handle `EOPNOTSUPP` from the first `setsockopt`.
    fn resolve_auto(info: SockInfo) -> Self {
        match PEEK_OFF_CACHE[info.family].load(Ordering::Relaxed) {
            2 => Self::Discard,
            _ => Self::Offset,
        }
    }
}

/// What the kernel's `SO_PEEK_OFF` holds, as far as the peeker knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KernelOff {
    Unknown,
    /// -1: peeks start at the head of the queue.
    Disabled,
    At(usize),
}

/// The longest kernel tick (CONFIG_HZ=100): timeouts kept in jiffies may end this much early.
const JIFFY_MAX: std::time::Duration = std::time::Duration::from_millis(10);

/// AUTO peeks a cursor up to this many bytes with a discard prefix when the kernel's offset
/// is elsewhere: copying 4 KiB costs about what the `setsockopt` it saves does (measured by
/// examples/c/peek_sweep.c: 2119 ns vs 2203 ns for a 64 KiB peek at 0, even at 4 KiB).
pub const AUTO_DISCARD_MAX: usize = 4096;

/// One `recv` for a single buffer (the kernel imports one iovec faster than a msghdr),
/// `recvmsg` otherwise.
///
/// # Safety
/// Every iovec must describe memory valid for writes of its length during the call.
unsafe fn recv_iov(fd: BorrowedFd<'_>, iov: &[iovec], flags: c_int) -> io::Result<usize> {
    match iov {
        // SAFETY: forwarded caller guarantee.
        [one] => unsafe { sys::recv_raw(fd, one.iov_base.cast(), one.iov_len, flags) },
        // SAFETY: forwarded caller guarantee.
        _ => unsafe { sys::recvmsg_iov(fd, iov, flags) },
    }
}

/// State of the armed low-water mark.
#[derive(Clone, Copy, Debug)]
struct Lowat {
    /// `SO_RCVLOWAT` before arming, restored on disarm and drop.
    original: c_int,
    /// The value last asked of the kernel (it may keep less: it caps at `tcp_rmem[2]/2`).
    requested: usize,
}

/// A peek cursor over one stream socket: the way a user-mode network stack keeps
/// unacknowledged data in the kernel.
///
/// The peeker holds the socket as `F`: a [`BorrowedFd`], an [`OwnedFd`](std::os::fd::OwnedFd),
/// a `&TcpStream`, a `TcpStream`, anything that implements [`AsFd`]. Lowcopy closes it only by
/// dropping `F` (an owned descriptor is closed after the peeker has restored the socket's
/// options).
// doc-source: peeker.exclusive
/// Other code must not read from the socket or change `SO_PEEK_OFF` while the peeker lives:
/// reads through [`Peeker::consume`] keep the cursor right, and a read by another path must be
/// reported with [`Peeker::note_consumed`].
// doc-end
/// Not for concurrent use: methods that change the cursor take `&mut self`.
///
/// ```
/// use std::io::{IoSliceMut, Write};
/// use std::net::{TcpListener, TcpStream};
/// use lowcopy::{Flags, PeekMode, Peeker};
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let mut client = TcpStream::connect(listener.local_addr()?)?;
/// let (server, _) = listener.accept()?;
/// client.write_all(b"hello world")?;
///
/// let mut p = Peeker::new(&server, PeekMode::Auto)?;
/// let mut buf = [0u8; 5];
/// assert_eq!(p.peek(&mut [IoSliceMut::new(&mut buf)], Flags::NONE)?, 5);
/// assert_eq!(&buf, b"hello");
/// p.seek(6)?; // skip the space
/// assert_eq!(p.peek(&mut [IoSliceMut::new(&mut buf)], Flags::DONTWAIT)?, 5);
/// assert_eq!(&buf, b"world");
/// // The peer acknowledged "hello ": drop it from the kernel's queue; the cursor follows.
/// assert_eq!(p.consume(6)?, 6);
/// assert_eq!(p.offset(), 5);
/// let e = p.peek(&mut [IoSliceMut::new(&mut buf)], Flags::DONTWAIT).unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock); // nothing beyond the cursor yet
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Peeker<F: AsFd> {
    fd: F,
    transport: Transport,
    mech: Mechanism,
    cursor: usize,
    /// `SO_PEEK_OFF` as the kernel holds it (offset mechanism). A seek only moves `cursor`;
    /// the next peek writes it to the kernel if they differ.
    kernel_off: KernelOff,
    /// Picked by AUTO: small cursors the kernel's offset is not at are peeked with a discard
    /// prefix (see [`AUTO_DISCARD_MAX`]).
    auto: bool,
    lowat: Option<Lowat>,
    stats: PeekStats,
    /// Bytes that left the head of the queue through this peeker (consume, note_consumed):
    /// the stream position of offset 0 ([`PeekResult::stream_pos`]).
    head_pos: u64,
    /// `SO_PEEK_OFF` writes made so far (for [`PeekResult::flags`]).
    moves: u64,
}

impl<F: AsFd> fmt::Debug for Peeker<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peeker")
            .field("fd", &self.fd.as_fd())
            .field("mode", &self.mode())
            .field("offset", &self.cursor)
            .field("lowat_armed", &self.lowat.is_some())
            .finish()
    }
}

impl<F: AsFd> AsFd for Peeker<F> {
    /// The socket being peeked.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<F: AsFd> Peeker<F> {
    /// Creates a peeker over the stream socket `fd` with the cursor at 0 (the head of the
    /// receive queue).
    ///
    // doc-source: peeker_new.kernel
    /// [`PeekMode::Offset`] (and [`PeekMode::Auto`] when it picks `SO_PEEK_OFF`) sets the
    /// socket's `SO_PEEK_OFF` to 0; [`PeekMode::Discard`] makes sure it is disabled (-1).
    // doc-end
    /// Sets `SO_OOBINLINE` and leaves it set: urgent bytes are stream bytes to a peeker (module
    /// docs, "Urgent data").
    ///
    // doc-source: peeker_new.cost
    /// Cost: 3 `getsockopt` to learn what the socket is and that it does not listen
    /// (`SO_DOMAIN`, then on TCP `SO_PROTOCOL` and `TCP_INFO`, on MPTCP `SO_PROTOCOL` and
    /// `SO_ACCEPTCONN`, on AF_UNIX `SO_TYPE` and `SO_ACCEPTCONN`; 1 or 2 to check the kind when
    /// the caller states it), then one `setsockopt` ([`PeekMode::Offset`], [`PeekMode::Auto`])
    /// or one `getsockopt` ([`PeekMode::Discard`]; a `setsockopt` more if `SO_PEEK_OFF` was on),
    /// and the `setsockopt` of `SO_OOBINLINE`.
    // doc-end
    /// All of them are counted in [`PeekStats::syscalls`]. Allocates nothing: the peeker is a
    /// plain value (about 150 bytes) wherever the caller puts it; the discard mechanism's 64
    /// KiB scratch buffer is one static buffer shared by the process.
    ///
    /// # Errors
    // doc-source: peeker_new.errors
    /// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket; or
    /// [`PeekMode::Offset`] on a socket without `SO_PEEK_OFF`), `ENOTCONN` (a listening TCP or
    /// MPTCP socket) and `EINVAL` (a listening AF_UNIX socket): a listening socket is no
    /// connection, refused with the errno its `recv` gives; `EPROTOTYPE` (a stated kind that is
    /// not the socket's); `setsockopt`/`getsockopt` errors.
    // doc-end
    /// `fd` is dropped on error.
    pub fn new(fd: F, mode: PeekMode) -> io::Result<Self> {
        let mut calls = 0;
        let info = classify(fd.as_fd(), &mut calls, true)?;
        let mut p = Self::build(fd, info, mode)?;
        p.stats.syscalls += calls;
        Ok(p)
    }

    /// [`Peeker::new`] for a socket whose kind the caller states: a check of one `getsockopt`
    /// (TCP) or two (MPTCP, AF_UNIX) instead of the classification's three, then one
    /// `setsockopt` (`Offset`, `Auto`) or one `getsockopt` (`Discard`), and the `setsockopt` of
    /// `SO_OOBINLINE` (module docs, "Urgent data").
    ///
    // doc-source: peeker_kind.wrong
    /// Stating the kind wrong loses nothing: the kind is checked before any byte is read, and a
    /// socket that is not of it fails with `EPROTOTYPE` (a datagram socket, whose consume would
    /// drop a whole datagram; an AF_UNIX stream stated as TCP or MPTCP). The check costs one
    /// syscall per peeker on TCP, `getsockopt(TCP_INFO)` (only TCP and MPTCP sockets answer
    /// it, with their state), and two on MPTCP (`SO_PROTOCOL` is TCP or MPTCP: an MPTCP
    /// listener hands out TCP sockets to peers without MPTCP) and AF_UNIX (`SO_TYPE` is a
    /// stream): each also tells a listening socket, refused as by [`Peeker::new`]. It does not
    /// tell IPv4 from IPv6 or TCP from MPTCP, nor a TCP socket stated as AF_UNIX: stated wrong
    /// among those, a peeker peeks and consumes right, but may cost more (a TCP consume
    /// copies, as on AF_UNIX) or fail where the real socket does (`EOPNOTSUPP` for
    /// [`PeekMode::Offset`] on MPTCP), and [`PeekMode::Auto`] may note the answer of
    /// `SO_PEEK_OFF` for the family stated, not the socket's.
    // doc-end
    ///
    /// # Errors
    /// As [`Peeker::new`] (`EBADF` and `ENOTSOCK` from the check), and `EPROTOTYPE` (see
    /// above). `fd` is dropped on error.
    pub fn with_kind(fd: F, mode: PeekMode, kind: StreamKind) -> io::Result<Self> {
        let mut calls = 0;
        check_stated(fd.as_fd(), kind, &mut calls)?;
        let mut p = Self::build(fd, kind.info(), mode)?;
        p.stats.syscalls += calls;
        Ok(p)
    }

    fn build(fd: F, info: SockInfo, mode: PeekMode) -> io::Result<Self> {
        let b = fd.as_fd();
        let mut stats = PeekStats::default();
        let (mech, kernel_off) = match mode {
            PeekMode::Offset => {
                let m = Mechanism::Offset;
                (m, setup(b, info, m, 0, true, &mut stats)?)
            }
            PeekMode::Discard => {
                let m = Mechanism::Discard;
                (m, setup(b, info, m, 0, true, &mut stats)?)
            }
            PeekMode::Auto => {
                let m = Mechanism::resolve_auto(info);
                match setup(b, info, m, 0, true, &mut stats) {
                    Err(e) if is_eopnotsupp(&e) => {
                        let m = Mechanism::Discard;
                        (m, setup(b, info, m, 0, true, &mut stats)?)
                    }
                    r => (m, r?),
                }
            }
        };
        // Urgent bytes stay in the stream (module docs: "Urgent data"). MPTCP refuses the
        // option: it has no urgent data. Last: on error the socket is as it was before
        // (SO_PEEK_OFF is only ever restored to -1, as here).
        stats.syscalls += 1;
        match sys::setsockopt_int(b, libc::SOL_SOCKET, libc::SO_OOBINLINE, 1) {
            Err(e) if !is_eopnotsupp(&e) => {
                let mut p = Self::assemble(fd, info, mech, 0, kernel_off, false, stats);
                p.restore();
                return Err(e);
            }
            _ => {}
        }
        // AUTO may peek small cursors with a discard prefix (only when it chose SO_PEEK_OFF).
        let auto = mode == PeekMode::Auto;
        Ok(Self::assemble(fd, info, mech, 0, kernel_off, auto, stats))
    }

    fn assemble(
        fd: F,
        info: SockInfo,
        mech: Mechanism,
        cursor: usize,
        kernel_off: KernelOff,
        auto: bool,
        stats: PeekStats,
    ) -> Self {
        Peeker {
            fd,
            transport: info.transport,
            mech,
            cursor,
            kernel_off,
            auto,
            lowat: None,
            stats,
            head_pos: 0,
            moves: 0,
        }
    }

    /// The socket, as given to [`Peeker::new`].
    pub fn get_ref(&self) -> &F {
        &self.fd
    }

    /// Restores the socket as dropping the peeker would (`SO_RCVLOWAT` if armed, `SO_PEEK_OFF`
    /// disabled if this peeker used it) and returns it. Queued bytes stay queued.
    pub fn into_inner(self) -> F {
        let mut me = ManuallyDrop::new(self);
        me.restore();
        // SAFETY: `me` is never used or dropped again, so `fd` is moved out exactly once.
        // Every other field is `Copy` (nothing else to drop): see `_fields_are_copy` below.
        unsafe { std::ptr::read(&me.fd) }
    }

    /// Returns the socket *without* restoring its options (`SO_PEEK_OFF` stays where the
    /// peeker left it, an armed `SO_RCVLOWAT` stays at the mark): no syscall. For a socket
    /// that is about to be closed, where restoring them would be a wasted `setsockopt` or
    /// two per connection. Queued bytes stay queued.
    pub fn into_inner_unrestored(self) -> F {
        let me = ManuallyDrop::new(self);
        // SAFETY: as in `into_inner`: `me` is never used or dropped again.
        unsafe { std::ptr::read(&me.fd) }
    }
}

/// Compile-time proof for [`Peeker::into_inner`]: besides `fd`, every field is `Copy`.
#[allow(dead_code)]
fn _fields_are_copy(p: &Peeker<BorrowedFd<'_>>) {
    fn copy<T: Copy>(_: &T) {}
    let Peeker {
        fd: _,
        transport,
        mech,
        cursor,
        kernel_off,
        auto,
        lowat,
        stats,
        head_pos,
        moves,
    } = p;
    copy(transport);
    copy(mech);
    copy(cursor);
    copy(kernel_off);
    copy(auto);
    copy(lowat);
    copy(stats);
    copy(head_pos);
    copy(moves);
}

impl<'fd> Peeker<BorrowedFd<'fd>> {
    /// A peeker for one stateless call ([`peek_at`]) with the cursor at `cursor`.
    /// `own_peek_off` is false: the caller's precondition is that `SO_PEEK_OFF` is disabled.
    fn open(
        fd: BorrowedFd<'fd>,
        info: SockInfo,
        mech: Mechanism,
        cursor: usize,
        own_peek_off: bool,
    ) -> io::Result<Self> {
        let mut stats = PeekStats::default();
        let kernel_off = setup(fd, info, mech, cursor, own_peek_off, &mut stats)?;
        Ok(Self::assemble(
            fd, info, mech, cursor, kernel_off, false, stats,
        ))
    }
}

/// Prepares the socket for `mech` with the cursor at `cursor` and returns what the kernel's
/// `SO_PEEK_OFF` then holds. On error the socket is as it was (each path makes at most one
/// change, and makes it last). `own_peek_off`: a peeker (true) makes sure a discard peek is not
/// shifted by a live `SO_PEEK_OFF`; the stateless calls (false) take that as their
/// precondition.
fn setup(
    fd: BorrowedFd<'_>,
    info: SockInfo,
    mech: Mechanism,
    cursor: usize,
    own_peek_off: bool,
    stats: &mut PeekStats,
) -> io::Result<KernelOff> {
    match mech {
        Mechanism::Offset => {
            if cursor > OFFSET_MAX {
                return Err(errno(libc::EOVERFLOW));
            }
            stats.syscalls += 1;
            let r = sys::setsockopt_int(fd, libc::SOL_SOCKET, SO_PEEK_OFF, cursor as c_int);
            let cache = &PEEK_OFF_CACHE[info.family];
            match r {
                Ok(()) => cache.store(1, Ordering::Relaxed),
                Err(ref e) if is_eopnotsupp(e) => cache.store(2, Ordering::Relaxed),
                Err(_) => {}
            }
            r.map(|()| KernelOff::At(cursor))
        }
        Mechanism::Discard if own_peek_off => {
            stats.syscalls += 1;
            match sys::getsockopt_int(fd, libc::SOL_SOCKET, SO_PEEK_OFF) {
                Ok(v) if v >= 0 => {
                    stats.syscalls += 1;
                    sys::setsockopt_int(fd, libc::SOL_SOCKET, SO_PEEK_OFF, -1)?;
                    Ok(KernelOff::Disabled)
                }
                Ok(_) => Ok(KernelOff::Disabled),
                Err(e) if is_eopnotsupp(&e) => Ok(KernelOff::Unknown),
                Err(e) => Err(e),
            }
        }
        Mechanism::Discard => Ok(KernelOff::Unknown),
    }
}

impl<F: AsFd> Peeker<F> {
    /// The mechanism in use: [`PeekMode::Offset`] or [`PeekMode::Discard`], never `Auto`.
    pub fn mode(&self) -> PeekMode {
        match self.mech {
            Mechanism::Offset => PeekMode::Offset,
            Mechanism::Discard => PeekMode::Discard,
        }
    }

    /// The cursor: bytes between the head of the receive queue and the next peek.
    pub fn offset(&self) -> usize {
        self.cursor
    }

    /// The counters so far.
    pub fn stats(&self) -> PeekStats {
        self.stats
    }

    /// Peeks bytes at the cursor into `bufs`; the cursor advances by the result.
    ///
    // doc-source: peek.returns
    /// Returns bytes copied (> 0); 0 at end of stream after the cursor (the peer shut down; the
    /// bytes before the cursor are still queued and readable); `EAGAIN` when nothing lies
    /// beyond the cursor and the call may not wait ([`Flags::DONTWAIT`], or a non-blocking
    /// fd).
    // doc-end
    // doc-source: peek.wait
    /// A blocking peek returns as soon as one byte beyond the cursor is there (with the armed
    /// low-water mark too; a socket's own `SO_RCVLOWAT` above 1 makes the kernel wait for that
    /// many bytes beyond the cursor, as recv does), or with `EAGAIN` when `SO_RCVTIMEO` runs
    /// out.
    // doc-end
    // doc-source: peek.eintr
    /// A signal ends it with `EINTR` (on a socket without `SO_PEEK_OFF`, MPTCP or a kernel
    /// before 6.9, a signal in the last 10 ms before the timeout reads as `EAGAIN`: the kernel
    /// keeps the timeout in jiffies).
    // doc-end
    // doc-source: peek.window
    /// Peeked bytes stay in the receive buffer: when they fill it (small segments cost far more
    /// kernel memory than their payload) the peer's window is closed and a blocking peek waits
    /// until something is consumed, so a caller that may block there sets `SO_RCVTIMEO` or
    /// consumes acknowledged bytes first.
    // doc-end
    ///
    /// # Errors
    /// `EAGAIN` (see above), `EINVAL` ([`Flags::MORE`], no room in `bufs`), `EMSGSIZE` (more
    /// than [`IOV_MAX`](crate::IOV_MAX) iovecs), and:
    // doc-source: peek.errors
    /// `EOVERFLOW` (cursor beyond what the mechanism can represent), `ECONNRESET`, `EINTR` and
    /// other `recvmsg` errors.
    // doc-end
    pub fn peek(&mut self, bufs: &mut [IoSliceMut<'_>], flags: Flags) -> io::Result<usize> {
        // SAFETY: IoSliceMut is ABI-compatible with struct iovec (std documents this for
        // Unix), and each one describes memory borrowed mutably for this call.
        let iov = unsafe { std::slice::from_raw_parts(bufs.as_ptr().cast::<iovec>(), bufs.len()) };
        // SAFETY: `iov` describes the caller's writable buffers, borrowed for this call.
        unsafe { self.peek_raw(iov, flags) }
    }

    /// [`Peeker::peek`] over raw iovecs (the C ABI's entry point: its buffers may be
    /// uninitialised, so no `&mut [u8]` is formed over them); results as [`Peeker::peek`].
    ///
    /// # Errors
    /// As [`Peeker::peek`].
    ///
    /// # Safety
    /// Every iovec must describe memory valid for writes of its length during the call.
    pub unsafe fn peek_raw(&mut self, iov: &[iovec], flags: Flags) -> io::Result<usize> {
        let flags = check_peek_args(iov, flags)?;
        // SAFETY: forwarded caller guarantee on `iov`.
        let r = unsafe { self.peek_checked(iov, flags) };
        if matches!(r, Err(ref e) if e.raw_os_error() == Some(libc::EAGAIN)) {
            self.raise_lowat()?;
        }
        r
    }

    /// Peeks bytes at `offset` (bytes after the head of the receive queue) into `bufs`: the
    /// daemon's own stream arithmetic, with no [`Peeker::seek`] to keep in step. Afterwards
    /// the cursor is at `offset` + the bytes peeked, as if [`Peeker::seek`] and
    /// [`Peeker::peek`] had run.
    ///
    /// The result says what was peeked from where ([`PeekResult`]): bytes copied (0 at end of
    /// stream after `offset`), the offset, its stream position, the syscalls made and whether
    /// the kernel's offset had to be moved. Errors and blocking as [`Peeker::peek`].
    ///
    // doc-source: peek_at_cursor.cost
    /// Cost with `SO_PEEK_OFF` ([`PeekMode::Offset`], and [`PeekMode::Auto`] when it picked
    /// it): one `recv`/`recvmsg` when the kernel's offset is already at `offset` (after a peek
    /// that ended there, or a consume that moved both back), a `setsockopt` and the `recv` when
    /// it must be moved; never a classification. [`PeekMode::Auto`] peeks an `offset` of at
    /// most [`AUTO_DISCARD_MAX`] bytes that the kernel's offset is not at with a discard prefix
    /// instead (one `recvmsg`, a `setsockopt` more the first time it must switch `SO_PEEK_OFF`
    /// off). [`PeekMode::Discard`]: one `recvmsg` per peek that finds bytes. Beyond those: with
    /// the low-water mark armed, a blocking call lowers it first (a `setsockopt`) and one that
    /// finds nothing sets it to `offset` + 1 (a `setsockopt`); the discard mechanism, finding
    /// nothing past `offset`, asks `poll` whether the peer ended and `fcntl` whether the fd
    /// blocks, and waits as a peek at the cursor does.
    // doc-end
    ///
    /// # Errors
    // doc-source: peek_at_cursor.errors
    /// As a peek at the cursor (the cursor is then at `offset`); `EOVERFLOW` (`offset` beyond
    /// what the mechanism can represent: `INT_MAX` with `SO_PEEK_OFF`, 1023 x 64 KiB with the
    /// discard prefix; the cursor is then unchanged).
    // doc-end
    pub fn peek_at(
        &mut self,
        offset: usize,
        bufs: &mut [IoSliceMut<'_>],
        flags: Flags,
    ) -> io::Result<PeekResult> {
        // SAFETY: IoSliceMut is ABI-compatible with struct iovec (std documents this for
        // Unix), and each one describes memory borrowed mutably for this call.
        let iov = unsafe { std::slice::from_raw_parts(bufs.as_ptr().cast::<iovec>(), bufs.len()) };
        // SAFETY: `iov` describes the caller's writable buffers, borrowed for this call.
        unsafe { self.peek_at_raw(offset, iov, flags) }
    }

    /// [`Peeker::peek_at`] over raw iovecs (the C ABI's entry point).
    ///
    /// # Errors
    /// As [`Peeker::peek_at`].
    ///
    /// # Safety
    /// Every iovec must describe memory valid for writes of its length during the call.
    pub unsafe fn peek_at_raw(
        &mut self,
        offset: usize,
        iov: &[iovec],
        flags: Flags,
    ) -> io::Result<PeekResult> {
        let flags = check_peek_args(iov, flags)?;
        if offset > self.max_offset() {
            return Err(errno(libc::EOVERFLOW));
        }
        let (calls, moves, skipped) = (
            self.stats.syscalls,
            self.moves,
            self.stats.bytes_skipped_copied,
        );
        self.cursor = offset;
        // SAFETY: forwarded caller guarantee on `iov`.
        let r = unsafe { self.peek_checked(iov, flags) };
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    // Exactly offset + 1: the mark may be above it after a peek further on.
                    self.follow_lowat()?;
                }
                return Err(e);
            }
        };
        let mut f = 0;
        if self.moves != moves {
            f |= PEEK_MOVED;
        }
        if offset > 0 && self.stats.bytes_skipped_copied != skipped {
            f |= PEEK_PREFIXED;
        }
        Ok(PeekResult {
            len: n as u64,
            offset: offset as u64,
            stream_pos: self.head_pos.wrapping_add(offset as u64),
            syscalls: (self.stats.syscalls - calls).min(u32::MAX as u64) as u32,
            flags: f,
        })
    }

    /// Largest cursor the mechanism can represent.
    fn max_offset(&self) -> usize {
        match self.mech {
            Mechanism::Offset => OFFSET_MAX,
            Mechanism::Discard => discard_max(1),
        }
    }

    /// The peek at the cursor after the argument checks; the cursor advances by the result.
    ///
    /// # Safety
    /// As [`Peeker::peek_raw`].
    unsafe fn peek_checked(&mut self, iov: &[iovec], flags: c_int) -> io::Result<usize> {
        let r = match self.mech {
            // AUTO: a small cursor the kernel's offset is not at costs less as a discard
            // prefix (one recvmsg copying <= 4 KiB more) than as setsockopt + recvmsg, when
            // the prefix's iovec fits beside the caller's.
            Mechanism::Offset
                if self.auto
                    && self.cursor <= AUTO_DISCARD_MAX.min(discard_max(iov.len()))
                    && self.kernel_off != KernelOff::At(self.cursor) =>
            {
                self.disable_peek_off()?;
                // SAFETY: forwarded caller guarantee on `iov`.
                unsafe { self.peek_discard(iov, flags) }
            }
            // SAFETY: forwarded caller guarantee on `iov`.
            Mechanism::Offset => unsafe { self.peek_offset(iov, flags) },
            // SAFETY: forwarded caller guarantee on `iov`.
            Mechanism::Discard => unsafe { self.peek_discard(iov, flags) },
        };
        if let Ok(n) = r {
            if n > 0 {
                self.cursor += n;
                self.stats.peeks += 1;
                self.stats.bytes_peeked += n as u64;
            }
        }
        r
    }

    /// # Safety
    /// As [`Peeker::peek_raw`].
    unsafe fn peek_offset(&mut self, iov: &[iovec], flags: c_int) -> io::Result<usize> {
        if self.cursor > OFFSET_MAX {
            return Err(errno(libc::EOVERFLOW));
        }
        if self.kernel_off != KernelOff::At(self.cursor) {
            self.set_peek_off(self.cursor as c_int)?;
            self.kernel_off = KernelOff::At(self.cursor);
        }
        if flags & libc::MSG_DONTWAIT == 0 {
            // A blocking TCP peek waits for min(SO_RCVLOWAT, len) bytes *beyond the offset*;
            // an armed mark of cursor+1 would make it wait for far more than one byte.
            self.lower_lowat_to_one()?;
        }
        self.stats.syscalls += 1;
        // SAFETY: forwarded caller guarantee on `iov`.
        let n = unsafe { recv_iov(self.fd.as_fd(), iov, flags | libc::MSG_PEEK) }?;
        self.kernel_off = KernelOff::At(self.cursor + n);
        Ok(n)
    }

    /// # Safety
    /// As [`Peeker::peek_raw`].
    unsafe fn peek_discard(&mut self, user: &[iovec], flags: c_int) -> io::Result<usize> {
        let skip = self.cursor;
        let mut space = [MaybeUninit::<iovec>::uninit(); IOV_MAX];
        let iov = discard_iov(&mut space, skip, user)?;
        // Set once the peer's FIN or reset was seen *before* a peek: only a peek made after it
        // shows the final queue. Bytes can arrive between a peek and the check, followed by
        // the FIN or RST; calling that the end lost them (the relay test caught it on CI).
        let mut ended_before_peek = false;
        // Where the last peek ended while more bytes were queued (an urgent mark, or arrivals).
        let mut cut_at = None;
        loop {
            self.stats.syscalls += 1;
            // SAFETY: scratch iovecs are always writable; the rest is the caller's guarantee.
            let n = unsafe { recv_iov(self.fd.as_fd(), iov, flags | libc::MSG_PEEK) }?;
            if n > skip {
                self.stats.bytes_skipped_copied += skip as u64;
                return Ok(n - skip);
            }
            self.stats.bytes_skipped_copied += n as u64;
            if n == 0 {
                // Only a blocking recv returns 0 on an empty queue: end of stream.
                return Ok(0);
            }
            if self.mech == Mechanism::Offset {
                // AUTO's discard shortcut found nothing beyond the cursor: the socket has
                // SO_PEEK_OFF, whose peek waits, ends, or passes an urgent mark by itself.
                // SAFETY: forwarded caller guarantee on `user`.
                return unsafe { self.peek_offset(user, flags) };
            }
            if self.cut_by_mark(n, &mut cut_at)? {
                // SAFETY: forwarded caller guarantee on `user`.
                return unsafe { self.peek_past_mark(user, flags) };
            }
            if cut_at == Some(n) {
                continue; // more bytes came meanwhile: peek them
            }
            if ended_before_peek {
                return self.end_of_stream();
            }
            #[cfg(test)]
            tests::after_discard_peek();
            // Everything queued lies before the cursor. End of stream, or wait for more.
            if self.peer_ended()? {
                ended_before_peek = true;
                continue; // peek once more: what came in before the FIN or RST is still due
            }
            if flags & libc::MSG_DONTWAIT != 0 || self.fd_nonblocking()? {
                return Err(errno(libc::EAGAIN));
            }
            self.wait_beyond(skip)?;
        }
    }

    /// After a discard peek that reached `n` bytes, no further than the cursor: whether more
    /// bytes are queued than it reached, twice at the same `n` (the kernel ended both peeks at
    /// an urgent mark; once may be bytes arriving meanwhile, which sets `cut_at` to `n` for
    /// the caller to peek again). MPTCP has no urgent data (and its `SIOCINQ` is a hint).
    fn cut_by_mark(&mut self, n: usize, cut_at: &mut Option<usize>) -> io::Result<bool> {
        if *cut_at == Some(usize::MAX) {
            return Ok(false); // MPTCP, found out earlier in this peek
        }
        self.stats.syscalls += 1;
        if sys::inq(self.fd.as_fd()).unwrap_or(0) <= n {
            *cut_at = None;
            return Ok(false);
        }
        if *cut_at != Some(n) {
            *cut_at = Some(n);
            return Ok(false);
        }
        self.stats.syscalls += 1;
        let proto = sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL)?;
        if proto == libc::IPPROTO_MPTCP {
            *cut_at = Some(usize::MAX);
            return Ok(false);
        }
        Ok(true)
    }

    /// A discard peek cannot pass an urgent mark ahead of the head of the queue (module docs,
    /// "Urgent data"): one peek at the cursor with `SO_PEEK_OFF`, set back to -1 after, where
    /// the socket has it; else `EAGAIN` until the bytes before the mark are consumed.
    ///
    /// # Safety
    /// As [`Peeker::peek_raw`].
    unsafe fn peek_past_mark(&mut self, user: &[iovec], flags: c_int) -> io::Result<usize> {
        let skip = self.cursor;
        if skip <= OFFSET_MAX {
            match self.set_peek_off(skip as c_int) {
                Ok(()) => {
                    self.stats.syscalls += 1;
                    // SAFETY: forwarded caller guarantee on `user`.
                    let r = unsafe { recv_iov(self.fd.as_fd(), user, flags | libc::MSG_PEEK) };
                    self.set_peek_off(-1)?;
                    return r;
                }
                Err(e) if is_eopnotsupp(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Err(errno(libc::EAGAIN))
    }

    /// Blocks until more than `skip` bytes are queued, the peer shuts down, or an error.
    fn wait_beyond(&mut self, skip: usize) -> io::Result<()> {
        // Where the socket has SO_PEEK_OFF (AF_UNIX since 3.4, TCP/IPv4 since 6.9, TCP/IPv6
        // since 6.12) a one-byte peek at the cursor sleeps for a byte past it, and the kernel
        // itself reports a signal (EINTR) or SO_RCVTIMEO (EAGAIN): it has copied nothing.
        if skip <= OFFSET_MAX {
            match self.set_peek_off(skip as c_int) {
                Ok(()) => {
                    self.stats.syscalls += 1;
                    // SAFETY: the iovec covers the shared scratch buffer.
                    let r = unsafe {
                        sys::recvmsg_iov(self.fd.as_fd(), &[sys::scratch_iov(1)], libc::MSG_PEEK)
                    };
                    self.set_peek_off(-1)?;
                    return r.map(drop);
                }
                Err(e) if is_eopnotsupp(&e) && self.transport == Transport::Tcp => {}
                Err(e) => return Err(e),
            }
        }
        if self.transport == Transport::Unix {
            return Err(errno(libc::EOVERFLOW));
        }
        // MPTCP, older kernels: MSG_WAITALL makes a TCP peek wait for skip + 1 bytes.
        let mut space = [MaybeUninit::<iovec>::uninit(); IOV_MAX];
        let iov = discard_iov(&mut space, skip + 1, &[])?;
        self.stats.syscalls += 1;
        let f = libc::MSG_PEEK | libc::MSG_WAITALL;
        let t0 = std::time::Instant::now();
        // SAFETY: the iovecs all cover the shared scratch buffer.
        let n = unsafe { sys::recvmsg_iov(self.fd.as_fd(), iov, f) }?;
        self.stats.bytes_skipped_copied += n as u64;
        if n > skip || self.peer_ended()? {
            return Ok(()); // a byte beyond the cursor, or end of stream: peek again
        }
        // Short without end of stream: the peek was cut by SO_RCVTIMEO or a signal, which a
        // blocking recv would report as EAGAIN or EINTR; this one returns the bytes it
        // peeked, so tell them apart by the time spent. SO_RCVTIMEO is kept in jiffies,
        // rounded up (sock_set_timeout), and read back so; the sleep, restarted by every
        // wakeup of the socket's wait queue (ACKs of our own sends), can end up to a jiffy
        // before it. A jiffy is at most 10 ms (HZ >= 100): within that, it is the timeout.
        self.stats.syscalls += 1;
        let timeo = sys::getsockopt_timeval(self.fd.as_fd(), libc::SO_RCVTIMEO)?;
        match timeo {
            Some(t) if t0.elapsed() + JIFFY_MAX >= t => Err(errno(libc::EAGAIN)),
            _ => Err(errno(libc::EINTR)),
        }
    }

    /// Whether the peer ended the stream: shut down its sending side, or reset (which shuts
    /// down both ways: POLLHUP). An error on a connection that lives on (an ICMP error with
    /// IP_RECVERR) is returned as the error, as recv would return it with nothing to copy.
    /// POLLERR alone is also a non-empty error queue (MSG_ZEROCOPY notifications): no end.
    fn peer_ended(&mut self) -> io::Result<bool> {
        self.stats.syscalls += 1;
        let ev = sys::poll_one(self.fd.as_fd(), libc::POLLRDHUP, 0)?;
        if ev & (libc::POLLRDHUP | libc::POLLHUP) != 0 {
            return Ok(true);
        }
        if ev & libc::POLLERR != 0 {
            self.take_socket_error()?;
        }
        Ok(false)
    }

    /// The end, after a peek made once the peer had ended found nothing past the cursor: the
    /// error a reset left pending (reported once, as recv does: after the bytes), else 0.
    fn end_of_stream(&mut self) -> io::Result<usize> {
        self.take_socket_error().map(|()| 0)
    }

    /// `SO_ERROR`, which reading clears: `Err` with it if one was pending.
    fn take_socket_error(&mut self) -> io::Result<()> {
        self.stats.syscalls += 1;
        match sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_ERROR)? {
            0 => Ok(()),
            e => Err(errno(e)),
        }
    }

    fn fd_nonblocking(&mut self) -> io::Result<bool> {
        self.stats.syscalls += 1;
        sys::is_nonblocking(self.fd.as_fd())
    }

    // doc-source: seek.kernel
    /// Moves the cursor to `offset` bytes after the head of the receive queue: back to
    /// retransmit, or ahead to skip bytes without copying them (offset mechanism; the discard
    /// one copies them at the next peek). Makes no syscall unless the low-water mark is armed.
    // doc-end
    ///
    /// # Errors
    // doc-source: seek.errors
    /// `EOVERFLOW` if the mechanism cannot represent the offset (`INT_MAX` for `SO_PEEK_OFF`,
    /// 1023 x 64 KiB for the discard prefix); with the low-water mark armed, its `setsockopt`
    /// errors. The cursor is then unchanged.
    // doc-end
    pub fn seek(&mut self, offset: usize) -> io::Result<()> {
        if offset > self.max_offset() {
            return Err(errno(libc::EOVERFLOW));
        }
        let before = std::mem::replace(&mut self.cursor, offset);
        // All or nothing: a mark that could not follow leaves the cursor where it was.
        self.follow_lowat().inspect_err(|_| self.cursor = before)
    }

    // doc-source: peeker_consume.kernel
    /// Drops up to `n` acknowledged bytes from the head of the receive queue and moves the
    /// cursor back by the bytes dropped (never below 0). Never blocks. Returns bytes dropped:
    /// fewer than `n` when fewer are queued, 0 for `n` 0 or at end of stream. TCP and MPTCP
    /// drop them without copying (`MSG_TRUNC`); AF_UNIX reads them into a scratch buffer, on
    /// past messages that carry descriptors, and closes the descriptors that came with them
    /// ([`PeekStats::fds_closed`]).
    // doc-end
    ///
    /// # Errors
    // doc-source: peeker_consume.errors
    /// `EAGAIN` when nothing is queued; `recv` errors (`ECONNRESET`, ...); with the low-water
    /// mark armed, its `setsockopt` errors (the bytes were dropped and the cursor moved).
    // doc-end
    pub fn consume(&mut self, n: usize) -> io::Result<usize> {
        let counts = ConsumeCounts {
            syscalls: &mut self.stats.syscalls,
            copied: &mut self.stats.bytes_skipped_copied,
            fds_closed: &mut self.stats.fds_closed,
        };
        let d = consume_raw(
            self.fd.as_fd(),
            self.transport,
            n,
            libc::MSG_DONTWAIT,
            counts,
        )?;
        self.stats.bytes_consumed += d as u64;
        self.head_pos = self.head_pos.wrapping_add(d as u64);
        self.cursor = self.cursor.saturating_sub(d);
        // The kernel lowers SO_PEEK_OFF by the bytes read, clamping at 0 (sk_peek_offset_bwd).
        if let KernelOff::At(k) = self.kernel_off {
            self.kernel_off = KernelOff::At(k.saturating_sub(d));
        }
        self.follow_lowat()?;
        Ok(d)
    }

    /// Tells the peeker that `n` bytes left the head of the receive queue by another path: a
    /// [`crate::ZeroCopyReceiver`] or a plain read on the same socket.
    // doc-source: note_consumed.kernel
    /// The cursor moves back by `n` (never below 0), as [`Peeker::consume`] would move it, with
    /// no syscall unless the low-water mark is armed (it follows the cursor): both of those
    /// paths lower the kernel's `SO_PEEK_OFF` by what they take (the zero-copy receiver
    /// corrects the kernel, which forgets to for mapped bytes), so cursor and kernel stay
    /// together.
    // doc-end
    ///
    /// # Errors
    /// Only with the low-water mark armed: its `setsockopt` errors (the cursor moved).
    pub fn note_consumed(&mut self, n: usize) -> io::Result<()> {
        self.head_pos = self.head_pos.wrapping_add(n as u64);
        self.cursor = self.cursor.saturating_sub(n);
        if let KernelOff::At(k) = self.kernel_off {
            self.kernel_off = KernelOff::At(k.saturating_sub(n));
        }
        self.follow_lowat()
    }

    /// Arms (`true`) or disarms the low-water mark.
    ///
    // doc-source: lowat_armed.kernel
    /// While armed, `SO_RCVLOWAT` is kept at cursor + 1 bytes so that poll/epoll report the
    /// socket readable only when a byte beyond the cursor is queued (they ignore
    /// `SO_PEEK_OFF`), and level-triggered loops do not spin. Blocking peeks still return as
    /// soon as one new byte is there.
    ///
    /// The mark follows seek and consume at once; after peeks it is raised lazily, when a peek
    /// finds nothing beyond the cursor (`EAGAIN`), so the data path costs no extra syscall. The
    /// kernel caps `SO_RCVLOWAT` at `tcp_rmem[2]/2` (16 MiB by default; `SO_RCVBUF/2` when
    /// locked; net/ipv4/tcp.c `tcp_set_rcvlowat`): past that cursor poll cannot be kept quiet.
    /// Nor can it when the receive queue, full of peeked but unconsumed bytes, puts the socket
    /// under memory pressure (more than 7/8 of `SO_RCVBUF` in kernel memory, which small
    /// segments reach with a few KiB of payload) or shrinks its window to one MSS: TCP then
    /// reports `EPOLLIN` whatever the mark (`tcp_epollin_ready`, net/ipv4/tcp.c). A
    /// level-triggered loop that gets `EAGAIN` from the peek should stop listening for
    /// `EPOLLIN` until it consumes. Setting the mark grows an unlocked receive buffer to about
    /// twice the mark. Disarming, and releasing the peeker, restore the value found when
    /// arming.
    // doc-end
    ///
    /// # Errors
    // doc-source: lowat_armed.errors
    /// `EOPNOTSUPP` on AF_UNIX (its poll ignores `SO_RCVLOWAT`, net/unix/af_unix.c), and
    /// `getsockopt`/`setsockopt` errors.
    // doc-end
    pub fn set_lowat_armed(&mut self, on: bool) -> io::Result<()> {
        match (on, self.lowat) {
            (true, None) => {
                if self.transport == Transport::Unix {
                    return Err(errno(libc::EOPNOTSUPP));
                }
                self.stats.syscalls += 1;
                let original =
                    sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT)?;
                self.lowat = Some(Lowat {
                    original,
                    requested: original.max(1) as usize,
                });
                self.follow_lowat()
            }
            (false, Some(l)) => {
                self.lowat = None;
                self.set_rcvlowat(l.original)
            }
            _ => Ok(()),
        }
    }

    /// Whether the low-water mark is armed.
    pub fn lowat_armed(&self) -> bool {
        self.lowat.is_some()
    }

    fn want_lowat(&self) -> usize {
        self.cursor.saturating_add(1).min(i32::MAX as usize)
    }

    /// Sets the armed mark to exactly cursor + 1 (after seek and consume).
    fn follow_lowat(&mut self) -> io::Result<()> {
        let want = self.want_lowat();
        match self.lowat {
            Some(l) if l.requested != want => self.request_lowat(want),
            _ => Ok(()),
        }
    }

    /// Raises the armed mark to cursor + 1 if it is below (after a peek found nothing).
    fn raise_lowat(&mut self) -> io::Result<()> {
        let want = self.want_lowat();
        match self.lowat {
            Some(l) if l.requested < want => self.request_lowat(want),
            _ => Ok(()),
        }
    }

    fn lower_lowat_to_one(&mut self) -> io::Result<()> {
        match self.lowat {
            Some(l) if l.requested > 1 => self.request_lowat(1),
            _ => Ok(()),
        }
    }

    fn request_lowat(&mut self, v: usize) -> io::Result<()> {
        self.set_rcvlowat(v as c_int)?;
        self.stats.rcvlowat_updates += 1;
        if let Some(l) = self.lowat.as_mut() {
            l.requested = v;
        }
        Ok(())
    }

    fn set_rcvlowat(&mut self, v: c_int) -> io::Result<()> {
        self.stats.syscalls += 1;
        sys::setsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)
    }

    /// AUTO's discard path: the kernel must not shift the peek by an offset of its own.
    fn disable_peek_off(&mut self) -> io::Result<()> {
        if self.kernel_off != KernelOff::Disabled {
            self.set_peek_off(-1)?;
            self.kernel_off = KernelOff::Disabled;
        }
        Ok(())
    }

    fn set_peek_off(&mut self, v: c_int) -> io::Result<()> {
        self.stats.syscalls += 1;
        self.moves += 1;
        sys::setsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, SO_PEEK_OFF, v)
    }

    /// What dropping does: the socket's options as they were before the peeker.
    fn restore(&mut self) {
        if let Some(l) = self.lowat.take() {
            let _ = self.set_rcvlowat(l.original);
        }
        if self.mech == Mechanism::Offset && self.kernel_off != KernelOff::Disabled {
            let _ = self.set_peek_off(-1);
            self.kernel_off = KernelOff::Disabled;
        }
    }
}

impl<F: AsFd> Drop for Peeker<F> {
    // doc-source: peeker_drop.kernel
    /// Restores `SO_RCVLOWAT` if the mark was armed and leaves `SO_PEEK_OFF` disabled (-1) if
    /// this peeker used it.
    // doc-end
    /// Then drops `F`. Errors are ignored: there is nobody to report them to.
    fn drop(&mut self) {
        self.restore();
    }
}

/// Lays out, in `space`, scratch iovecs covering `skip` bytes followed by the caller's
/// iovecs, and returns them. Only the entries used are written (no 16 KiB memset per peek).
/// `EOVERFLOW` when they do not fit in `IOV_MAX`.
fn discard_iov<'a>(
    space: &'a mut [MaybeUninit<iovec>; IOV_MAX],
    skip: usize,
    user: &[iovec],
) -> io::Result<&'a [iovec]> {
    let prefix = skip.div_ceil(SCRATCH_LEN);
    let total = prefix + user.len();
    if total > IOV_MAX {
        return Err(errno(libc::EOVERFLOW));
    }
    for (i, v) in space[..prefix].iter_mut().enumerate() {
        v.write(sys::scratch_iov((skip - i * SCRATCH_LEN).min(SCRATCH_LEN)));
    }
    for (v, u) in space[prefix..total].iter_mut().zip(user) {
        v.write(*u);
    }
    // SAFETY: the first `total` entries were written just above.
    Ok(unsafe { std::slice::from_raw_parts(space.as_ptr().cast::<iovec>(), total) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    thread_local! {
        /// Runs in `peek_discard` between a peek that found nothing past the cursor and the
        /// shutdown check: the window a peer's last bytes and FIN can fall into.
        static AFTER_DISCARD_PEEK: RefCell<Option<Box<dyn FnMut()>>> = RefCell::new(None);
    }

    pub(super) fn after_discard_peek() {
        AFTER_DISCARD_PEEK.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f();
            }
        });
    }

    fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    /// Peeks "head" at the cursor, then makes the peer write "tail" and `end` the connection
    /// in the window between a discard peek that finds nothing past the cursor and the
    /// peeker's check for the peer's end; returns the peeker's next peek.
    fn race_the_end(
        server: &TcpStream,
        mut client: TcpStream,
        end: fn(TcpStream),
    ) -> (io::Result<usize>, [u8; 64], Peeker<&TcpStream>) {
        client.write_all(b"head").unwrap();
        let mut p = Peeker::new(server, PeekMode::Discard).unwrap();
        let mut buf = [0u8; 64];
        let dontwait = Flags::DONTWAIT;
        assert_eq!(
            p.peek(&mut [IoSliceMut::new(&mut buf)], dontwait).unwrap(),
            4
        );
        let mut peer = Some(client);
        AFTER_DISCARD_PEEK.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                if let Some(mut c) = peer.take() {
                    c.write_all(b"tail").unwrap();
                    end(c);
                    // Loopback delivers both in these calls; leave them time anyway.
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }))
        });
        let r = p.peek(&mut [IoSliceMut::new(&mut buf)], dontwait);
        AFTER_DISCARD_PEEK.with(|h| *h.borrow_mut() = None);
        (r, buf, p)
    }

    /// The last bytes and the FIN land in that window: the bytes, then end of stream.
    #[test]
    fn bytes_arriving_with_the_fin_after_an_empty_discard_peek_are_not_lost() {
        let (client, server) = tcp_pair();
        let (r, buf, mut p) = race_the_end(&server, client, |c| {
            c.shutdown(std::net::Shutdown::Write).unwrap()
        });
        assert_eq!(r.unwrap(), 4, "the bytes that came with the FIN");
        assert_eq!(&buf[..4], b"tail");
        let mut more = [0u8; 8];
        assert_eq!(
            p.peek(&mut [IoSliceMut::new(&mut more)], Flags::NONE)
                .unwrap(),
            0
        );
        assert_eq!(p.offset(), 8);
    }

    /// The last bytes and a reset land in that window: the bytes, then ECONNRESET once (as
    /// recv reports it), then end of stream.
    #[test]
    fn bytes_arriving_with_a_reset_after_an_empty_discard_peek_are_not_lost() {
        let (client, server) = tcp_pair();
        let (r, buf, mut p) = race_the_end(&server, client, |c| {
            let l = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: a live socket and a linger struct of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    c.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&l as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
            drop(c); // close with linger 0: RST
        });
        assert_eq!(r.unwrap(), 4, "the bytes that came before the RST");
        assert_eq!(&buf[..4], b"tail");
        let mut more = [0u8; 8];
        let e = p
            .peek(&mut [IoSliceMut::new(&mut more)], Flags::NONE)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
        assert_eq!(
            p.peek(&mut [IoSliceMut::new(&mut more)], Flags::NONE)
                .unwrap(),
            0
        );
        assert_eq!(p.offset(), 8);
    }

    fn get_int(fd: BorrowedFd<'_>, name: c_int) -> c_int {
        sys::getsockopt_int(fd, libc::SOL_SOCKET, name).unwrap()
    }

    /// A peeker owning its descriptor (a dup, as the bindings hold it) restores the socket's
    /// options when dropped; `into_inner` restores them too and hands the descriptor back.
    #[test]
    fn owned_and_borrowed_peekers_restore_the_socket() {
        let (mut client, server) = tcp_pair();
        client.write_all(b"abcdef").unwrap();
        let lowat = get_int(server.as_fd(), libc::SO_RCVLOWAT);
        let dup = server.as_fd().try_clone_to_owned().unwrap();
        let mut p = Peeker::new(dup, PeekMode::Offset).unwrap();
        p.set_lowat_armed(true).unwrap();
        p.seek(3).unwrap();
        assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), 0);
        assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), 4);
        let mut buf = [0u8; 8];
        let n = p.peek(&mut [IoSliceMut::new(&mut buf)], Flags::DONTWAIT);
        assert_eq!(n.unwrap(), 3);
        assert_eq!(&buf[..3], b"def");
        assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), 6);
        drop(p);
        assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), -1);
        assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), lowat);

        let mut p = Peeker::new(&server, PeekMode::Offset).unwrap();
        p.set_lowat_armed(true).unwrap();
        p.seek(2).unwrap();
        assert_eq!(p.get_ref().as_raw_fd(), server.as_raw_fd());
        assert_eq!(p.as_fd().as_raw_fd(), server.as_raw_fd());
        let back: &TcpStream = p.into_inner();
        assert_eq!(back.as_raw_fd(), server.as_raw_fd());
        assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), -1);
        assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), lowat);
        // Nothing was consumed.
        assert_eq!(
            peek_at(&server, 0, &mut [IoSliceMut::new(&mut buf)], Flags::NONE).unwrap(),
            6
        );
    }

    /// A stated kind costs one check, no classification; peek_at costs one recv when the
    /// kernel's offset is there, a setsockopt more when it is not; the result says where the
    /// bytes came from, in the stream too after a consume.
    #[test]
    fn peek_at_on_a_handle_costs_what_a_hand_written_loop_does() {
        let (mut client, server) = tcp_pair();
        client.write_all(b"0123456789abcdef").unwrap();
        let mut p = Peeker::with_kind(&server, PeekMode::Offset, StreamKind::Tcp4).unwrap();
        assert_eq!(
            p.stats().syscalls,
            3,
            "only TCP_INFO (the kind's check), SO_PEEK_OFF = 0 and SO_OOBINLINE"
        );
        let mut buf = [0u8; 4];
        let dw = Flags::DONTWAIT;
        let r = p.peek_at(0, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
        assert_eq!(&buf, b"0123");
        assert_eq!(
            (r.len, r.offset, r.stream_pos, r.syscalls, r.flags),
            (4, 0, 0, 1, 0)
        );
        // Where the last peek ended: one syscall.
        let r = p.peek_at(4, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
        assert_eq!(&buf, b"4567");
        assert_eq!((r.offset, r.syscalls, r.flags), (4, 1, 0));
        // Back to 2 (a retransmission): the kernel's offset moves first.
        let r = p.peek_at(2, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
        assert_eq!(&buf, b"2345");
        assert_eq!((r.offset, r.syscalls, r.flags), (2, 2, PEEK_MOVED));
        assert_eq!(p.offset(), 6);
        // Consume 3: the kernel lowers its offset by 3 (to 3), the daemon's offset of the
        // same byte is 6 - 3 = 3: one syscall, and the stream position says byte 6.
        assert_eq!(p.consume(3).unwrap(), 3);
        let r = p.peek_at(3, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
        assert_eq!(&buf, b"6789");
        assert_eq!((r.offset, r.stream_pos, r.syscalls), (3, 6, 1));
        // A daemon that forgot the consume asks for offset 6: stream position 9, not 6.
        let r = p.peek_at(6, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
        assert_eq!((r.stream_pos, r.flags), (9, PEEK_MOVED));
        assert_eq!(&buf, b"9abc");
        // Nothing beyond: EAGAIN, the cursor at the offset asked.
        let e = p
            .peek_at(13, &mut [IoSliceMut::new(&mut buf)], dw)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        assert_eq!(p.offset(), 13);
        let e = p
            .peek_at(OFFSET_MAX + 1, &mut [IoSliceMut::new(&mut buf)], dw)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOVERFLOW));
        assert_eq!(p.offset(), 13);
        let e = p
            .peek_at(0, &mut [IoSliceMut::new(&mut [])], dw)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    /// The discard mechanism and AUTO's small offsets: a prefix, flagged; end of stream is 0.
    #[test]
    fn peek_at_through_a_discard_prefix() {
        let (mut client, server) = tcp_pair();
        client.write_all(b"hello world").unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let mut p = Peeker::with_kind(&server, PeekMode::Discard, StreamKind::Tcp4).unwrap();
        let mut buf = [0u8; 5];
        let r = p
            .peek_at(6, &mut [IoSliceMut::new(&mut buf)], Flags::NONE)
            .unwrap();
        assert_eq!(&buf, b"world");
        assert_eq!((r.len, r.syscalls, r.flags), (5, 1, PEEK_PREFIXED));
        let r = p
            .peek_at(11, &mut [IoSliceMut::new(&mut buf)], Flags::NONE)
            .unwrap();
        assert_eq!(r.len, 0, "end of stream after the offset");
        let mut a = Peeker::with_kind(&server, PeekMode::Auto, StreamKind::Tcp4).unwrap();
        let r = a
            .peek_at(6, &mut [IoSliceMut::new(&mut buf)], Flags::NONE)
            .unwrap();
        assert_eq!(&buf, b"world");
        assert_ne!(
            r.flags & PEEK_PREFIXED,
            0,
            "AUTO peeks 6 bytes in with a prefix"
        );
    }

    #[test]
    fn stated_kinds_from_raw() {
        use libc::{AF_INET, AF_INET6, AF_UNIX, AF_UNSPEC, IPPROTO_MPTCP, IPPROTO_TCP};
        assert_eq!(StreamKind::from_raw(AF_UNSPEC, 0).unwrap(), None);
        assert_eq!(
            StreamKind::from_raw(AF_INET, 0).unwrap(),
            Some(StreamKind::Tcp4)
        );
        assert_eq!(
            StreamKind::from_raw(AF_INET6, IPPROTO_TCP).unwrap(),
            Some(StreamKind::Tcp6)
        );
        assert_eq!(
            StreamKind::from_raw(AF_INET, IPPROTO_MPTCP).unwrap(),
            Some(StreamKind::Mptcp4)
        );
        assert_eq!(
            StreamKind::from_raw(AF_UNIX, 0).unwrap(),
            Some(StreamKind::Unix)
        );
        for (d, p) in [
            (AF_INET, libc::IPPROTO_UDP),
            (AF_UNIX, IPPROTO_TCP),
            (99, 0),
            (0, 6),
        ] {
            let e = StreamKind::from_raw(d, p).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        }
    }

    /// into_inner_unrestored leaves the options as they are: no syscall for a socket about
    /// to be closed.
    #[test]
    fn unrestored_release_leaves_the_options() {
        let (mut client, server) = tcp_pair();
        client.write_all(b"abc").unwrap();
        let mut p = Peeker::with_kind(&server, PeekMode::Offset, StreamKind::Tcp4).unwrap();
        p.set_lowat_armed(true).unwrap();
        let mut buf = [0u8; 2];
        p.peek(&mut [IoSliceMut::new(&mut buf)], Flags::DONTWAIT)
            .unwrap();
        p.seek(2).unwrap();
        let _ = p.into_inner_unrestored();
        assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), 2);
        assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), 3);
    }

    #[test]
    fn peekers_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Peeker<std::os::fd::OwnedFd>>();
        check::<Peeker<BorrowedFd<'static>>>();
        check::<Peeker<TcpStream>>();
    }

    #[test]
    fn more_is_refused_by_peeks_and_consume() {
        let (mut client, server) = tcp_pair();
        client.write_all(b"x").unwrap();
        let mut p = Peeker::new(&server, PeekMode::Auto).unwrap();
        let mut buf = [0u8; 4];
        let e = p
            .peek(&mut [IoSliceMut::new(&mut buf)], Flags::MORE)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let e = consume(&server, 1, Flags::MORE | Flags::DONTWAIT).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(p.offset(), 0);
        assert_eq!(consume(&server, 1, Flags::DONTWAIT).unwrap(), 1);
    }

    #[test]
    fn mode_from_u32() {
        assert_eq!(PeekMode::try_from(0).unwrap(), PeekMode::Auto);
        assert_eq!(PeekMode::try_from(1).unwrap(), PeekMode::Offset);
        assert_eq!(PeekMode::try_from(2).unwrap(), PeekMode::Discard);
        assert_eq!(
            PeekMode::try_from(3).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn discard_prefix_covers_exactly_then_caller_iovecs() {
        let mut space = [MaybeUninit::<iovec>::uninit(); IOV_MAX];
        let user = [iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 7,
        }];
        assert_eq!(discard_iov(&mut space, 0, &user).unwrap().len(), 1);
        let v = discard_iov(&mut space, 1, &user).unwrap();
        assert_eq!((v.len(), v[0].iov_len, v[1].iov_len), (2, 1, 7));
        let v = discard_iov(&mut space, 2 * SCRATCH_LEN + 5, &user).unwrap();
        let lens: Vec<usize> = v.iter().map(|v| v.iov_len).collect();
        assert_eq!(lens, [SCRATCH_LEN, SCRATCH_LEN, 5, 7]);
        let v = discard_iov(&mut space, 3 * SCRATCH_LEN, &[]).unwrap();
        assert_eq!(v.iter().map(|v| v.iov_len).sum::<usize>(), 3 * SCRATCH_LEN);
        let reach = discard_max(1);
        assert_eq!(
            discard_iov(&mut space, reach, &user).unwrap().len(),
            IOV_MAX
        );
        let e = discard_iov(&mut space, reach + 1, &user).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOVERFLOW));
    }

    #[test]
    fn discard_reach_leaves_room_for_caller_iovecs() {
        assert_eq!(discard_max(1), 1023 * SCRATCH_LEN);
        assert!(
            discard_max(1) >= 32 << 20,
            "must reach tcp_rmem max (32 MiB)"
        );
        assert_eq!(discard_max(IOV_MAX), 0);
    }
}
