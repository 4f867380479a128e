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
//! The stateless [`peek_at`] and [`consume`] see the stream as reads of the socket do, as its
//! `SO_OOBINLINE` says: without it, `peek_at` finds an urgent byte not read yet (`POLLPRI`)
//! and counts its offsets past the mark without that byte. Once the byte was taken with
//! `recv(MSG_OOB)` the kernel no longer reports it, yet `SO_PEEK_OFF` still counts it until
//! the bytes before its mark are read: from then until those bytes are consumed, `peek_at`
//! past the mark starts one byte early. Set `SO_OOBINLINE` on sockets that may receive urgent
//! data, or use a peeker.
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

use core::fmt;
use core::mem::ManuallyDrop;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, Ordering};
#[cfg(feature = "std")]
use std::io::IoSliceMut;

use libc::{c_int, iovec};

use crate::compat::{io, AsFd, BorrowedFd};
use crate::sys::{self, errno, IOV_MAX, SCRATCH_LEN, SO_PEEK_OFF};
use crate::Flags;

#[cfg(feature = "std")]
mod abortable;
mod boundary;
mod classify;
mod lowat;
mod mechanism;
mod stateless;
#[cfg(test)]
mod tests;
mod types;

#[cfg(feature = "std")]
pub use abortable::peek_at_abortable;
use classify::{check_stated, classify, is_eopnotsupp, SockInfo, Transport};
use lowat::Lowat;
use mechanism::{InqHint, KernelOff, Mechanism};
#[cfg(feature = "std")]
pub use stateless::peek_at;
use stateless::{check_peek_args, consume_raw, discard_iov, ConsumeCounts};
pub use stateless::{consume, peek_supported};
pub use types::{PeekMode, PeekResult, PeekStats, PeekerOptions, StreamKind, Urgent};

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

/// What [`PeekMode::Auto`] learnt per family: 0 unknown, 1 has `SO_PEEK_OFF`, 2 has not.
/// Index: tcp4, tcp6, mptcp4, mptcp6, unix.
static PEEK_OFF_CACHE: [AtomicU8; 5] = [const { AtomicU8::new(0) }; 5];

/// The entry of [`PEEK_OFF_CACHE`] for `family` (below 5: `SockInfo`). Clamped rather than
/// indexed as it is: no bounds check, so the `no_std` build is left with no panic at all
/// (tests/footprint/check.sh looks for one in liblowcopy_peek.a).
fn peek_off_cache(family: usize) -> &'static AtomicU8 {
    &PEEK_OFF_CACHE[family.min(PEEK_OFF_CACHE.len() - 1)]
}

/// The longest kernel tick (CONFIG_HZ=100): timeouts kept in jiffies may end this much early.
const JIFFY_MAX: core::time::Duration = core::time::Duration::from_millis(10);

/// AUTO peeks a cursor up to this many bytes with a discard prefix when the kernel's offset
/// is elsewhere: copying 4 KiB costs about what the `setsockopt` it saves does (measured by
/// examples/c/peek_sweep.c: 2119 ns vs 2203 ns for a 64 KiB peek at 0, even at 4 KiB).
pub const AUTO_DISCARD_MAX: usize = 4096;

/// One `recv` for a single buffer (the kernel imports one iovec faster than a msghdr),
/// `recvmsg` otherwise.
///
/// # Safety
/// Every iovec must describe memory valid for writes of its length during the call.
#[inline]
unsafe fn recv_iov(fd: BorrowedFd<'_>, iov: &[iovec], flags: c_int) -> io::Result<usize> {
    match iov {
        // SAFETY: forwarded caller guarantee.
        [one] => unsafe { sys::recv_raw(fd, one.iov_base.cast(), one.iov_len, flags) },
        // SAFETY: forwarded caller guarantee.
        _ => unsafe { sys::recvmsg_iov(fd, iov, flags) },
    }
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
    /// `SO_PEEK_OFF` writes made so far, wrapping (for [`PeekResult::flags`]: only a
    /// call's difference is read, and one call makes at most a few).
    moves: u32,
    /// `TCP_INQ` as this peeker set it.
    inq_hint: InqHint,
    /// [`Urgent::Caller`]: no `SO_OOBINLINE`; a peek at or past a mark ahead of the head
    /// fails with `ENOMSG`.
    urgent_caller: bool,
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
    /// [`PeekMode::Offset`] (and [`PeekMode::Auto`] or [`PeekMode::OffsetOrDiscard`] when they
    /// pick `SO_PEEK_OFF`) sets the socket's `SO_PEEK_OFF` to 0; the discard mechanism makes
    /// sure it is disabled (-1) and, on TCP and MPTCP, sets `TCP_INQ` (one `setsockopt`), whose
    /// hint lets an empty peek cost one `recvmsg`; a caller's own `recvmsg` with a control
    /// buffer then also receives a `TCP_CM_INQ` message. Dropping the peeker turns it off.
    // doc-end
    /// Sets `SO_OOBINLINE` and leaves it set: urgent bytes are stream bytes to a peeker (module
    /// docs, "Urgent data").
    ///
    // doc-source: peeker_new.cost
    /// Cost: 3 `getsockopt` to learn what the socket is and that it does not listen
    /// (`SO_DOMAIN`, then on TCP `SO_PROTOCOL` and `TCP_INFO`, on MPTCP `SO_PROTOCOL` and
    /// `SO_ACCEPTCONN`, on AF_UNIX `SO_TYPE` and `SO_ACCEPTCONN`; 1 or 2 to check the kind when
    /// the caller states it), then one `setsockopt` (`SO_PEEK_OFF`), or for the discard
    /// mechanism one `getsockopt` (a `setsockopt` more if `SO_PEEK_OFF` was on) and on TCP and
    /// MPTCP the `setsockopt` of `TCP_INQ`, and the `setsockopt` of `SO_OOBINLINE`.
    // doc-end
    /// All of them are counted in [`PeekStats::syscalls`]. Allocates nothing: the peeker is a
    /// plain value (112 bytes on 64-bit Linux with a `BorrowedFd`) wherever the caller puts
    /// it; the discard mechanism's 64 KiB scratch buffer is one static buffer shared by the
    /// process.
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
        let mut p = Self::build(fd, info, mode, Urgent::Inline)?;
        p.stats.syscalls += calls;
        Ok(p)
    }

    /// [`Peeker::new`] for a socket whose kind the caller states: a check of one `getsockopt`
    /// (TCP) or two (MPTCP, AF_UNIX) instead of the classification's three, then one
    /// `setsockopt` (`SO_PEEK_OFF`) or for the discard mechanism one `getsockopt` and on TCP
    /// and MPTCP the `setsockopt` of `TCP_INQ`, and the `setsockopt` of `SO_OOBINLINE` (module
    /// docs, "Urgent data").
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
        let mut p = Self::build(fd, kind.info(), mode, Urgent::Inline)?;
        p.stats.syscalls += calls;
        Ok(p)
    }

    /// [`Peeker::new`] or [`Peeker::with_kind`] (when `opts.kind` is set), with who owns
    /// urgent data chosen ([`Urgent`]): [`Urgent::Inline`] is exactly those constructors;
    /// [`Urgent::Caller`] sets no `SO_OOBINLINE` (one `setsockopt` less) and always uses the
    /// discard mechanism.
    ///
    /// # Errors
    /// As [`Peeker::new`]; with [`Urgent::Caller`], `EINVAL` for [`PeekMode::Offset`] (checked
    /// before any syscall) and `EOPNOTSUPP` on AF_UNIX. `fd` is dropped on error.
    pub fn with_options(fd: F, opts: PeekerOptions) -> io::Result<Self> {
        if opts.urgent == Urgent::Caller && opts.mode == PeekMode::Offset {
            return Err(errno(libc::EINVAL));
        }
        let mut calls = 0;
        let info = match opts.kind {
            Some(k) => {
                check_stated(fd.as_fd(), k, &mut calls)?;
                k.info()
            }
            None => classify(fd.as_fd(), &mut calls, true)?,
        };
        let mut p = Self::build(fd, info, opts.mode, opts.urgent)?;
        p.stats.syscalls += calls;
        Ok(p)
    }

    fn build(fd: F, info: SockInfo, mode: PeekMode, urgent: Urgent) -> io::Result<Self> {
        let b = fd.as_fd();
        let mut stats = PeekStats::default();
        let urgent_caller = urgent == Urgent::Caller;
        if urgent_caller && info.transport == Transport::Unix {
            return Err(errno(libc::EOPNOTSUPP));
        }
        // The caller's urgent policy: discard whatever the mode (Offset was refused before).
        let mode = if urgent_caller {
            PeekMode::Discard
        } else {
            mode
        };
        let (mech, kernel_off) = match mode {
            PeekMode::Offset => {
                let m = Mechanism::Offset;
                (m, setup(b, info, m, 0, true, &mut stats)?)
            }
            PeekMode::Discard => {
                let m = Mechanism::Discard;
                (m, setup(b, info, m, 0, true, &mut stats)?)
            }
            PeekMode::Auto | PeekMode::OffsetOrDiscard => {
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
        // The discard mechanism on TCP and MPTCP: TCP_INQ's hint with every peek tells an empty
        // peek from the end of the stream without asking again (PeekStats::syscalls). A kernel
        // without it (before 4.18) costs the checks it saves, nothing more.
        let mut inq_hint = InqHint::Off;
        if mech == Mechanism::Discard && info.transport == Transport::Tcp {
            stats.syscalls += 1;
            if sys::setsockopt_int(b, libc::IPPROTO_TCP, sys::TCP_INQ, 1).is_ok() {
                inq_hint = InqHint::On;
            }
        }
        // Urgent bytes stay in the stream (module docs: "Urgent data"), unless the caller owns
        // them. MPTCP refuses the option: it has no urgent data. Last: on error the socket is
        // as it was before (SO_PEEK_OFF is only ever restored to -1, as here).
        let oob = if urgent_caller {
            Ok(())
        } else {
            stats.syscalls += 1;
            sys::setsockopt_int(b, libc::SOL_SOCKET, libc::SO_OOBINLINE, 1)
        };
        match oob {
            Err(e) if !is_eopnotsupp(&e) => {
                let mut p = Self::assemble(fd, info, mech, 0, kernel_off, false, stats);
                p.inq_hint = inq_hint;
                p.restore();
                return Err(e);
            }
            _ => {}
        }
        // AUTO may peek small cursors with a discard prefix (only when it chose SO_PEEK_OFF).
        let auto = mode == PeekMode::Auto;
        let mut p = Self::assemble(fd, info, mech, 0, kernel_off, auto, stats);
        p.inq_hint = inq_hint;
        p.urgent_caller = urgent_caller;
        Ok(p)
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
            inq_hint: InqHint::Off,
            urgent_caller: false,
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
        unsafe { core::ptr::read(&me.fd) }
    }

    /// Returns the socket *without* restoring its options (`SO_PEEK_OFF` stays where the
    /// peeker left it, an armed `SO_RCVLOWAT` stays at the mark): no syscall. For a socket
    /// that is about to be closed, where restoring them would be a wasted `setsockopt` or
    /// two per connection. Queued bytes stay queued.
    pub fn into_inner_unrestored(self) -> F {
        let me = ManuallyDrop::new(self);
        // SAFETY: as in `into_inner`: `me` is never used or dropped again.
        unsafe { core::ptr::read(&me.fd) }
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
        inq_hint,
        urgent_caller,
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
    copy(inq_hint);
    copy(urgent_caller);
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
            let cache = peek_off_cache(info.family);
            match r {
                Ok(()) => cache.store(1, Ordering::Relaxed),
                Err(ref e) if is_eopnotsupp(e) => cache.store(2, Ordering::Relaxed),
                Err(_) => {}
            }
            r.map(|()| KernelOff::at(cursor))
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
    #[cfg(feature = "std")]
    pub fn peek(&mut self, bufs: &mut [IoSliceMut<'_>], flags: Flags) -> io::Result<usize> {
        // SAFETY: IoSliceMut is ABI-compatible with struct iovec (std documents this for
        // Unix), and each one describes memory borrowed mutably for this call.
        let iov = unsafe { core::slice::from_raw_parts(bufs.as_ptr().cast::<iovec>(), bufs.len()) };
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
    #[inline]
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
    /// it must be moved (so a rewind writes `SO_PEEK_OFF` once); never a classification.
    /// [`PeekMode::Auto`] peeks an `offset` at most [`AUTO_DISCARD_MAX`] bytes ahead of the
    /// kernel's offset from there, with a discard prefix over the bytes between (one `recvmsg`,
    /// no `setsockopt`); [`PeekMode::OffsetOrDiscard`] never does. The discard mechanism: one
    /// `recvmsg` per peek that finds bytes, and on TCP and MPTCP one per peek that finds
    /// nothing past `offset` with [`Flags::DONTWAIT`] (`TCP_INQ`'s hint says no more is queued
    /// and the peer has not ended), and on AF_UNIX two (the `recvmsg` and a `poll`: a stream
    /// peek from the head tells neither the peer's shutdown nor an out-of-band byte ahead,
    /// which `POLLRDHUP` and `POLLPRI` do; a message with control data shows as
    /// `MSG_CTRUNC`; the offset mechanism costs one there); more iovecs than fit beside the
    /// prefix below `IOV_MAX`
    /// split the peek into several `recvmsg`, each into as many as fit, until one comes back
    /// short. Beyond those: with the low-water mark armed, a blocking call lowers it first (a
    /// `setsockopt`) and one that finds nothing sets it to `offset` + 1 (a `setsockopt`); the
    /// discard mechanism, finding nothing past `offset` where neither settles it (an urgent
    /// mark or out-of-band byte, control data, which credentials with `SO_PASSCRED` add to
    /// every message, bytes arriving meanwhile, a blocking call), asks `ioctl(FIONREAD)`
    /// about a mark, `poll` whether the peer ended and `fcntl` whether the fd blocks, and waits
    /// as a peek at the cursor does. A reset (or a connection error) that leaves bytes queued
    /// before `offset` is not seen by that one `recvmsg`: a non-blocking peek there returns
    /// `EAGAIN` (`poll` reports `POLLHUP`/`POLLERR`) until a blocking peek or a consume reports
    /// it.
    // doc-end
    ///
    /// # Errors
    // doc-source: peek_at_cursor.errors
    /// As a peek at the cursor (the cursor is then at `offset`); `EOVERFLOW` (`offset` beyond
    /// what the mechanism can represent: `INT_MAX` with `SO_PEEK_OFF`, 1023 x 64 KiB with the
    /// discard prefix, for any number of iovecs up to `IOV_MAX`; the cursor is then unchanged).
    // doc-end
    #[cfg(feature = "std")]
    pub fn peek_at(
        &mut self,
        offset: usize,
        bufs: &mut [IoSliceMut<'_>],
        flags: Flags,
    ) -> io::Result<PeekResult> {
        // SAFETY: IoSliceMut is ABI-compatible with struct iovec (std documents this for
        // Unix), and each one describes memory borrowed mutably for this call.
        let iov = unsafe { core::slice::from_raw_parts(bufs.as_ptr().cast::<iovec>(), bufs.len()) };
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
        let before = core::mem::replace(&mut self.cursor, offset);
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
            self.kernel_off = KernelOff::at((k as usize).saturating_sub(d));
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
            self.kernel_off = KernelOff::at((k as usize).saturating_sub(n));
        }
        self.follow_lowat()
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
        if core::mem::replace(&mut self.inq_hint, InqHint::Off) != InqHint::Off {
            self.stats.syscalls += 1;
            let _ = sys::setsockopt_int(self.fd.as_fd(), libc::IPPROTO_TCP, sys::TCP_INQ, 0);
        }
    }
}

impl<F: AsFd> Drop for Peeker<F> {
    // doc-source: peeker_drop.kernel
    /// Restores `SO_RCVLOWAT` if the mark was armed, leaves `SO_PEEK_OFF` disabled (-1) if
    /// this peeker used it, and `TCP_INQ` off (0) if it set it (the discard mechanism on TCP).
    // doc-end
    /// Then drops `F`. Errors are ignored: there is nobody to report them to.
    fn drop(&mut self) {
        self.restore();
    }
}
