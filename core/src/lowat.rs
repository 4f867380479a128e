//! Low-water-mark receive: one wakeup for `min` bytes instead of one per segment.
//!
//! - [`set_rcvlowat`]: sets `SO_RCVLOWAT` and reports the value the kernel keeps. TCP caps it
//!   silently at `tcp_rmem[2] / 2`, or at `SO_RCVBUF / 2` when the receive buffer is locked
//!   (net/ipv4/tcp.c `tcp_set_rcvlowat`).
//! - [`recv_atleast`]: arms the mark for the bytes still missing, sleeps in `poll` until the
//!   kernel reports them, then reads up to the buffer's length without blocking.
//!
//! Why not a blocking `recv` with `SO_RCVLOWAT`: TCP wakes a sleeping reader only when
//! `SO_RCVLOWAT` bytes are queued, whatever the read's length, so a blocking `recv` shorter
//! than the mark sleeps until the mark is reached (include/net/tcp.h `tcp_epollin_ready`; seen
//! on 6.18: `recv(500)` with a mark of 1000 returned after 1.5 s with 600 bytes queued since
//! 0.1 s). lowcopy never reads in blocking mode: `poll`, then `recv(MSG_DONTWAIT)`.
//!
//! The kernel may wake `poll` below the mark: when the receive buffer is under memory
//! pressure (`tcp_rmem_pressure`, 24adbc1676af) or the receive window is down to one MSS
//! (435ccfa894e3). [`recv_atleast`] takes such early wakeups as normal: it reads what is there,
//! lowers the mark to what is still missing and waits again. That is also why it never hangs
//! when `min` exceeds what the kernel can queue.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::sys::{self, errno};
use crate::wait::{AbortHandle, Waiter};

/// Sets `SO_RCVLOWAT` to `bytes` and returns the value the kernel keeps, in bytes.
///
// doc-source: set_rcvlowat.kernel
/// TCP caps it at `tcp_rmem[2] / 2` (16 MiB with the default 32 MiB maximum), or at half of
/// `SO_RCVBUF` as read back (the kernel doubles what was set) once the application locked the
/// receive buffer with `SO_RCVBUF`; values above `INT_MAX` are passed as `INT_MAX` and capped
/// the same way; 0 is kept as 1. Setting it on TCP also grows an unlocked receive buffer to
/// about twice the mark (never shrunk again) and, when it lowers the mark, wakes pollers whose
/// data now suffices.
///
/// On a listening TCP socket the value is reported the same way and copied into each
/// connection when its handshake completes (not at `accept`): connections already waiting in
/// the accept queue keep the old value. tcp_mmap sets its mark this way. On kernels before
/// 21b29e74ffe5 (Oct 2025) a large inherited mark also clamped the window scale the listener
/// advertised, so there prefer setting it after `accept`. AF_UNIX and UDP store the value,
/// but their poll ignores it.
// doc-end
///
/// ```
/// use std::net::{TcpListener, TcpStream};
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let _client = TcpStream::connect(listener.local_addr()?)?;
/// let (sock, _) = listener.accept()?;
/// assert_eq!(lowcopy::set_rcvlowat(&sock, 64 * 1024)?, 64 * 1024);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
// doc-source: set_rcvlowat.errors
/// `EBADF`, `ENOTSOCK`, and other `setsockopt`/`getsockopt` errors.
// doc-end
pub fn set_rcvlowat(fd: impl AsFd, bytes: usize) -> io::Result<usize> {
    let fd = fd.as_fd();
    let v = bytes.min(i32::MAX as usize) as c_int;
    sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)?;
    let kept = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT)?;
    Ok(kept.max(0) as usize)
}

/// Counters of [`recv_atleast_with_stats`], added to by every call (failed calls too: their
/// syscalls happened). Zero it once, then pass it to each call.
///
/// Shared with C as `lowcopy_recv_stats` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvStats {
    // doc-source: recv_stats.calls
    /// Calls made.
    // doc-end
    pub calls: u64,
    // doc-source: recv_stats.syscalls
    /// Syscalls made (including failed ones).
    // doc-end
    pub syscalls: u64,
    // doc-source: recv_stats.wakeups
    /// `poll` returns that reported the socket ready: the wakeups.
    // doc-end
    pub wakeups: u64,
    // doc-source: recv_stats.early_wakeups
    /// Wakeups after which the call still had fewer than `min` bytes (the kernel woke below
    /// the mark, the mark was capped, or datagrams were small); the call waited again.
    // doc-end
    pub early_wakeups: u64,
    // doc-source: recv_stats.timeouts
    /// Calls that ran out of time (they returned what had come, or `ETIMEDOUT`).
    // doc-end
    pub timeouts: u64,
    // doc-source: recv_stats.lowat_changes
    /// `SO_RCVLOWAT` changes made, restores included.
    // doc-end
    pub lowat_changes: u64,
    // doc-source: recv_stats.bytes
    /// Bytes returned.
    // doc-end
    pub bytes: u64,
}

/// Receives at least `min` bytes into `buf` with one wakeup where the kernel allows, then
/// whatever else is queued up to `buf.len()`; returns the bytes received.
///
/// Equivalent to [`recv_atleast_with_stats`] without the counters: results, units (bytes;
/// `timeout` as a [`Duration`]) as documented there. For a socket read call after call, a
/// [`Receiver`] learns the socket once and saves the syscalls that find out its type and
/// mark each time.
///
/// # Errors
/// As [`recv_atleast_with_stats`].
pub fn recv_atleast(
    fd: impl AsFd,
    buf: &mut [u8],
    min: usize,
    timeout: Option<Duration>,
) -> io::Result<usize> {
    let mut stats = RecvStats::default();
    recv_atleast_with_stats(fd, buf, min, timeout, &mut stats)
}

/// [`recv_atleast`], adding what it did to `stats`.
///
/// - `min` is clamped to `1..=buf.len()`.
/// - `timeout`: `None` waits without limit; `Some(Duration::ZERO)` does not wait: it returns
///   what is queued now, even fewer than `min`. The fd's `O_NONBLOCK` and `SO_RCVTIMEO` play
///   no part: `timeout` alone decides how long the call may sleep.
///
/// Returns:
// doc-source: recv_atleast.returns
/// - `min` to the buffer's length in bytes when `min` bytes came in time;
/// - fewer than `min` (but more than 0) when the peer shut down after them, when time ran out
///   after they came, when the connection was reset after them (the error is left pending and
///   the next call reports it), when a signal arrived after them, or on a datagram socket when
///   the next datagram does not fit in what is left of the buffer;
/// - 0 at end of stream with nothing received;
/// - `ETIMEDOUT` when nothing came in time.
// doc-end
///
// doc-source: recv_atleast.kernel
/// TCP and MPTCP: the socket's `SO_RCVLOWAT` is set to the bytes still missing while the call
/// waits (capped by the kernel as in [`set_rcvlowat`]) and restored to the value found on entry
/// before it returns: no change when the socket already holds the mark the call needs, so
/// setting the mark once with [`set_rcvlowat`] saves two syscalls per call. An unlocked receive
/// buffer grows to about twice the mark and stays so. Early wakeups below the mark (memory
/// pressure, a window down to one MSS) are read and waited past, never lost. Never a blocking
/// `recv`, so never the trap where a read shorter than the mark sleeps until the mark.
///
/// AF_UNIX stream and other streams: their poll ignores `SO_RCVLOWAT`, so the call wakes on
/// every arrival and loops until `min`; the result is the same, the wakeups are not saved.
///
/// Datagram sockets (UDP, AF_UNIX datagram and seqpacket): whole datagrams are appended to the
/// buffer while they fit, until `min` bytes; a datagram is never truncated. `EMSGSIZE` when the
/// first datagram is larger than the buffer (it stays queued). Zero-length datagrams are
/// consumed and add nothing.
// doc-end
///
// doc-source: recv_atleast.errqueue
/// The error queue: the call never reads it. Its entries (the completion notifications of a
/// zero-copy sender on the same socket, ICMP reports queued with `IP_RECVERR`,
/// `SO_TIMESTAMPING` reports) stay for their owner, and neither wake the call nor end it: while
/// one is queued, `poll` reports `POLLERR` at once on every call, so the call then sleeps on an
/// edge-triggered epoll instance of its own (one descriptor for the call's duration, 2-3
/// syscalls more per wait) that wakes only for new events. A socket error (`SO_ERROR`: a
/// reset, an ICMP error with `IP_RECVERR`) is returned as `recv` returns it, at once when
/// nothing was received; one that arrives after some bytes is left for the next call, and ends
/// this one early only when the connection is reset or hung up.
// doc-end
///
/// # Errors
/// `EINVAL` (`buf` empty or longer than `isize::MAX`), and:
// doc-source: recv_atleast.errors
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a stream, datagram or seqpacket socket), `ETIMEDOUT`
/// (nothing came in time), `EMSGSIZE` (the first datagram is larger than the buffer; it stays
/// queued), `EINTR` (a signal before any byte), and the socket's own errors (`ECONNRESET`,
/// ...).
// doc-end
pub fn recv_atleast_with_stats(
    fd: impl AsFd,
    buf: &mut [u8],
    min: usize,
    timeout: Option<Duration>,
    stats: &mut RecvStats,
) -> io::Result<usize> {
    // SAFETY: `buf` is a live, exclusively borrowed slice of `buf.len()` bytes.
    unsafe { recv_atleast_raw(fd, buf.as_mut_ptr(), buf.len(), min, timeout, stats) }
}

/// [`recv_atleast_with_stats`] into raw memory (the C ABI path: the caller's buffer may be
/// uninitialised, so no `&mut [u8]` is formed over it); results as there.
///
/// # Errors
/// As [`recv_atleast_with_stats`], plus `EINVAL` for a null `buf`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes for the duration of the call.
pub unsafe fn recv_atleast_raw(
    fd: impl AsFd,
    buf: *mut u8,
    len: usize,
    min: usize,
    timeout: Option<Duration>,
    stats: &mut RecvStats,
) -> io::Result<usize> {
    // SAFETY: forwarded caller contract on `buf`.
    unsafe { recv_atleast_inner(fd.as_fd(), buf, len, min, timeout, None, stats) }
}

/// [`recv_atleast_with_stats`] whose sleeps [`AbortHandle::abort`] ends from another thread:
/// then it returns the bytes received so far, or `ECANCELED` when there are none (what an
/// event loop's thread pool runs, so that a closing environment can end it).
///
/// # Errors
/// As [`recv_atleast_with_stats`], plus `ECANCELED`.
pub fn recv_atleast_abortable(
    fd: impl AsFd,
    buf: &mut [u8],
    min: usize,
    timeout: Option<Duration>,
    abort: &AbortHandle,
    stats: &mut RecvStats,
) -> io::Result<usize> {
    let (p, n) = (buf.as_mut_ptr(), buf.len());
    // SAFETY: `buf` is a live, exclusively borrowed slice of `n` bytes.
    unsafe { recv_atleast_inner(fd.as_fd(), p, n, min, timeout, Some(abort), stats) }
}

/// The one-call receive: learn the socket, receive, restore its mark.
///
/// # Safety
/// As [`recv_atleast_raw`].
unsafe fn recv_atleast_inner(
    fd: BorrowedFd<'_>,
    buf: *mut u8,
    len: usize,
    min: usize,
    timeout: Option<Duration>,
    abort: Option<&AbortHandle>,
    stats: &mut RecvStats,
) -> io::Result<usize> {
    stats.calls += 1;
    let kind = classify(fd, stats)?;
    let mut mark = match kind {
        Kind::Marked => Some(Mark::read(fd, stats)?),
        _ => None,
    };
    let mut waiter = Waiter::default();
    // SAFETY: forwarded caller contract on `buf`.
    let r = unsafe {
        receive(
            fd,
            buf,
            len,
            min,
            timeout,
            kind,
            &mut mark,
            &mut waiter,
            abort,
            stats,
        )
    };
    if let Some(m) = mark {
        m.restore(fd, stats);
    }
    r
}

/// A receiver of `min`-byte chunks on one socket: [`recv_atleast`] that learns the socket
/// once.
///
// doc-source: receiver.kernel
/// The stateless receive asks the kernel on every call what kind of socket it has (2
/// `getsockopt`) and what mark it holds (1 more), and puts the mark back when it returns. A
/// receiver does that once, when it is made, and leaves the mark of its last call in place
/// between calls, so a loop receiving chunks of the same size makes exactly the raw loop's
/// syscalls per chunk: `poll` and `recv` (one `setsockopt` more when `min` changes). Releasing
/// it puts back the mark found at creation.
///
/// Results, errors and the behaviour of each call (early wakeups, end of stream, datagrams,
/// the error queue) are those of the stateless receive. While the receiver lives, the socket's
/// `SO_RCVLOWAT` is the bytes its last call still missed when it returned (usually `min`): a
/// poll or epoll of the caller's on the same socket sees that mark. After it is made it
/// allocates nothing; the first wait that meets a non-empty error queue makes an epoll
/// instance (one descriptor), kept until the receiver is released.
// doc-end
/// Dropping it (or [`Receiver::into_inner`]) is the release.
///
/// ```
/// use std::io::Write;
/// use std::net::{TcpListener, TcpStream};
/// use std::time::Duration;
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let mut peer = TcpStream::connect(listener.local_addr()?)?;
/// let (sock, _) = listener.accept()?;
/// peer.write_all(&[7u8; 3000])?;
///
/// let mut rx = lowcopy::Receiver::new(&sock)?;
/// let mut buf = [0u8; 4096];
/// let n = rx.recv_atleast(&mut buf, 3000, Some(Duration::from_secs(5)))?;
/// assert_eq!(n, 3000);
/// assert_eq!(rx.stats().calls, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Receiver<F: AsFd> {
    fd: F,
    kind: Kind,
    /// TCP: the mark found at creation, and the mark as last set.
    mark: Option<Mark>,
    waiter: Waiter,
    stats: RecvStats,
}

impl<F: AsFd> Receiver<F> {
    /// Learns the socket `fd` (its type and protocol, and on TCP its `SO_RCVLOWAT`): 2 or 3
    /// `getsockopt`. Allocates nothing.
    ///
    /// # Errors
    // doc-source: receiver_new.errors
    /// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a stream, datagram or seqpacket socket).
    // doc-end
    pub fn new(fd: F) -> io::Result<Self> {
        let mut stats = RecvStats::default();
        let kind = classify(fd.as_fd(), &mut stats)?;
        let mark = match kind {
            Kind::Marked => Some(Mark::read(fd.as_fd(), &mut stats)?),
            _ => None,
        };
        Ok(Receiver {
            fd,
            kind,
            mark,
            waiter: Waiter::default(),
            stats,
        })
    }

    /// [`recv_atleast`] on this receiver's socket, without learning the socket again and
    /// without restoring its mark (see the type's documentation). Adds what it did to
    /// [`Receiver::stats`].
    ///
    /// # Errors
    /// As [`recv_atleast_with_stats`].
    pub fn recv_atleast(
        &mut self,
        buf: &mut [u8],
        min: usize,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        // SAFETY: `buf` is a live, exclusively borrowed slice of `buf.len()` bytes.
        unsafe { self.recv_atleast_raw(buf.as_mut_ptr(), buf.len(), min, timeout) }
    }

    /// [`Receiver::recv_atleast`] into raw memory (the C ABI path: the caller's buffer may be
    /// uninitialised).
    ///
    /// # Errors
    /// As [`recv_atleast_with_stats`], plus `EINVAL` for a null `buf`.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes for the duration of the call.
    pub unsafe fn recv_atleast_raw(
        &mut self,
        buf: *mut u8,
        len: usize,
        min: usize,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        self.stats.calls += 1;
        let (fd, kind) = (self.fd.as_fd(), self.kind);
        let (mark, waiter, stats) = (&mut self.mark, &mut self.waiter, &mut self.stats);
        // SAFETY: forwarded caller contract on `buf`.
        unsafe { receive(fd, buf, len, min, timeout, kind, mark, waiter, None, stats) }
    }

    /// [`Receiver::recv_atleast`] whose sleeps [`AbortHandle::abort`] ends from another thread:
    /// then it returns the bytes received so far, or `ECANCELED` when there are none (what an
    /// event loop's thread pool runs, so that a closing environment can end it).
    ///
    /// # Errors
    /// As [`recv_atleast_with_stats`], plus `ECANCELED`.
    pub fn recv_atleast_abortable(
        &mut self,
        buf: &mut [u8],
        min: usize,
        timeout: Option<Duration>,
        abort: &AbortHandle,
    ) -> io::Result<usize> {
        self.stats.calls += 1;
        let (fd, kind) = (self.fd.as_fd(), self.kind);
        let (mark, waiter, stats) = (&mut self.mark, &mut self.waiter, &mut self.stats);
        let (p, n) = (buf.as_mut_ptr(), buf.len());
        // SAFETY: `buf` is a live, exclusively borrowed slice of `n` bytes.
        unsafe {
            receive(
                fd,
                p,
                n,
                min,
                timeout,
                kind,
                mark,
                waiter,
                Some(abort),
                stats,
            )
        }
    }

    /// The counters so far (the syscalls of [`Receiver::new`] included).
    pub fn stats(&self) -> RecvStats {
        self.stats
    }

    /// The descriptor the receiver holds.
    pub fn get_ref(&self) -> &F {
        &self.fd
    }

    /// Puts back the socket's mark found at creation and returns the descriptor.
    pub fn into_inner(mut self) -> F {
        self.restore();
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; `fd` is read out exactly once, and
        // the other fields (the waiter's epoll fd) are dropped in place right after.
        unsafe {
            let fd = std::ptr::read(&me.fd);
            let mut me = me;
            std::ptr::drop_in_place(&mut me.waiter);
            fd
        }
    }

    fn restore(&mut self) {
        if let Some(m) = self.mark.take() {
            m.restore(self.fd.as_fd(), &mut self.stats);
        }
    }
}

impl<F: AsFd> AsFd for Receiver<F> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<F: AsFd> Drop for Receiver<F> {
    /// Puts back the socket's mark found at creation (one `setsockopt` when it differs).
    fn drop(&mut self) {
        self.restore();
    }
}

/// One call of either form: validates, then waits and reads as `kind` requires.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes for the duration of the call.
#[allow(clippy::too_many_arguments)]
unsafe fn receive(
    fd: BorrowedFd<'_>,
    buf: *mut u8,
    len: usize,
    min: usize,
    timeout: Option<Duration>,
    kind: Kind,
    mark: &mut Option<Mark>,
    waiter: &mut Waiter,
    abort: Option<&AbortHandle>,
    stats: &mut RecvStats,
) -> io::Result<usize> {
    if len == 0 || len > isize::MAX as usize || buf.is_null() {
        return Err(errno(libc::EINVAL));
    }
    let mut rx = Rx {
        fd,
        buf,
        len,
        min: min.clamp(1, len),
        got: 0,
        deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
        no_wait: timeout == Some(Duration::ZERO),
        waiter,
        abort,
        stats,
    };
    let r = match kind {
        Kind::Datagram => rx.datagrams(),
        Kind::Marked | Kind::Stream => rx.stream(mark),
    };
    if let Ok(n) = r {
        rx.stats.bytes += n as u64;
    }
    r
}

/// What kind of socket `fd` is. `SO_TYPE` first: it turns a closed fd into `EBADF` and a
/// file into `ENOTSOCK`.
fn classify(fd: BorrowedFd<'_>, stats: &mut RecvStats) -> io::Result<Kind> {
    stats.syscalls += 1;
    match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)? {
        libc::SOCK_STREAM => {
            stats.syscalls += 1;
            match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? {
                libc::IPPROTO_TCP | libc::IPPROTO_MPTCP => Ok(Kind::Marked),
                _ => Ok(Kind::Stream),
            }
        }
        libc::SOCK_DGRAM | libc::SOCK_SEQPACKET => Ok(Kind::Datagram),
        _ => Err(errno(libc::EOPNOTSUPP)),
    }
}

impl Mark {
    /// The socket's mark as it is now.
    fn read(fd: BorrowedFd<'_>, stats: &mut RecvStats) -> io::Result<Mark> {
        stats.syscalls += 1;
        let orig = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT)?;
        Ok(Mark { orig, cur: orig })
    }

    /// Puts back the mark found by [`Mark::read`], if it was changed. This cannot fail
    /// where setting it worked; if it somehow does, the data already received must still be
    /// returned, so the error is dropped.
    fn restore(self, fd: BorrowedFd<'_>, stats: &mut RecvStats) {
        if self.cur != self.orig {
            stats.syscalls += 1;
            stats.lowat_changes += 1;
            let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, self.orig);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// TCP and MPTCP: poll honours `SO_RCVLOWAT`.
    Marked,
    /// Other byte streams (AF_UNIX): poll wakes on any byte.
    Stream,
    /// Message sockets: UDP, AF_UNIX datagram and seqpacket.
    Datagram,
}

/// The socket's `SO_RCVLOWAT` on entry, and the value last set.
#[derive(Clone, Copy, Debug)]
struct Mark {
    orig: c_int,
    cur: c_int,
}

/// One call's state.
struct Rx<'a, 'fd> {
    fd: BorrowedFd<'fd>,
    buf: *mut u8,
    len: usize,
    min: usize,
    got: usize,
    deadline: Option<Instant>,
    no_wait: bool,
    waiter: &'a mut Waiter,
    /// Ends the call's sleeps from another thread (`ECANCELED`, or the bytes received).
    abort: Option<&'a AbortHandle>,
    stats: &'a mut RecvStats,
}

/// What happened when the call waited for the socket.
enum Woken {
    Ready(i16),
    TimedOut,
}

impl Rx<'_, '_> {
    /// Milliseconds `poll` may sleep: -1 without a deadline, rounded up otherwise.
    fn poll_ms(&self) -> c_int {
        if self.no_wait {
            return 0;
        }
        match self.deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as c_int
            }
        }
    }

    /// Sleeps until the socket is readable (the mark met), shut down, or in error, or the
    /// time runs out. A non-empty error queue alone does not end the sleep (crate::wait).
    fn wait(&mut self) -> io::Result<Woken> {
        let events = libc::POLLIN | libc::POLLRDHUP;
        let ms = self.poll_ms();
        let abort = self.abort.map(AsFd::as_fd);
        let ev =
            self.waiter
                .wait_abortable(self.fd, events, ms, abort, &mut self.stats.syscalls)?;
        match ev.ok_or_else(|| errno(libc::ECANCELED))? {
            0 => {
                self.stats.timeouts += 1;
                Ok(Woken::TimedOut)
            }
            ev => {
                self.stats.wakeups += 1;
                Ok(Woken::Ready(ev))
            }
        }
    }

    /// `recv(MSG_DONTWAIT)` into the rest of the buffer, at most `max` bytes.
    fn read_some(&mut self, max: usize) -> io::Result<usize> {
        self.stats.syscalls += 1;
        let n = max.min(self.len - self.got);
        // SAFETY: `got < len`, and the caller of `recv_atleast_raw` vouched for `len`
        // writable bytes at `buf`.
        unsafe { sys::recv_raw(self.fd, self.buf.add(self.got), n, libc::MSG_DONTWAIT) }
    }

    /// The result once data came: what is there, or the error when nothing is.
    fn done(&self, e: io::Error) -> io::Result<usize> {
        if self.got > 0 {
            Ok(self.got)
        } else {
            Err(e)
        }
    }

    /// Sets the mark to the bytes still missing, if a mark is in use and differs.
    fn arm(&mut self, mark: &mut Option<Mark>) -> io::Result<()> {
        let Some(m) = mark.as_mut() else {
            return Ok(());
        };
        let want = (self.min - self.got).min(i32::MAX as usize) as c_int;
        if m.cur == want {
            return Ok(());
        }
        self.stats.syscalls += 1;
        match sys::setsockopt_int(self.fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, want) {
            Ok(()) => {
                self.stats.lowat_changes += 1;
                m.cur = want;
                Ok(())
            }
            // A stream without the option (MPTCP on older kernels): poll without a mark.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOPROTOOPT)) => {
                *mark = None;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn stream(&mut self, mark: &mut Option<Mark>) -> io::Result<usize> {
        loop {
            if let Err(e) = self.arm(mark) {
                return self.done(e);
            }
            let ev = match self.wait() {
                Ok(Woken::Ready(ev)) => ev,
                Ok(Woken::TimedOut) => {
                    // Out of time: take what is queued, even below the mark.
                    return match self.read_some(usize::MAX) {
                        Ok(n) => Ok(self.got + n),
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                            self.done(errno(libc::ETIMEDOUT))
                        }
                        Err(e) => self.done(e),
                    };
                }
                Err(e) => return self.done(e),
            };
            if self.got > 0 && hung_up_in_error(ev) {
                return Ok(self.got);
            }
            if self.got > 0 && ev == libc::POLLERR {
                continue;
            }
            match self.read_some(usize::MAX) {
                Ok(0) => return Ok(self.got), // end of stream
                Ok(n) => {
                    self.got += n;
                    if self.got >= self.min {
                        return Ok(self.got);
                    }
                    self.stats.early_wakeups += 1;
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) => return self.done(e),
            }
        }
    }

    fn datagrams(&mut self) -> io::Result<usize> {
        loop {
            let ev = match self.wait() {
                Ok(Woken::Ready(ev)) => ev,
                Ok(Woken::TimedOut) => {
                    return match self.drain(0)? {
                        Some(n) => Ok(n),
                        None => self.done(errno(libc::ETIMEDOUT)),
                    }
                }
                Err(e) => return self.done(e),
            };
            if self.got > 0 && hung_up_in_error(ev) {
                return Ok(self.got);
            }
            if self.got > 0 && ev == libc::POLLERR {
                continue;
            }
            if let Some(n) = self.drain(ev)? {
                return Ok(n);
            }
            self.stats.early_wakeups += 1;
        }
    }

    /// Appends queued datagrams while they fit. `Some(result)` when the call is over, `None`
    /// when it must wait for more.
    fn drain(&mut self, ev: i16) -> io::Result<Option<usize>> {
        let shut = ev & (libc::POLLRDHUP | libc::POLLHUP) != 0;
        loop {
            self.stats.syscalls += 1;
            let size = match sys::next_datagram_len(self.fd) {
                Ok(s) => s,
                // Shut down for reading with nothing queued: poll will keep saying "readable",
                // and nothing more will come (UDP, AF_UNIX datagram after SHUT_RD).
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && shut => {
                    return Ok(Some(self.got))
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(None),
                Err(e) => return self.done(e).map(Some),
            };
            if size == 0 && shut {
                return Ok(Some(self.got)); // shut down for reading: nothing more will come
            }
            if size > self.len - self.got {
                return self.done(errno(libc::EMSGSIZE)).map(Some);
            }
            let n = match self.read_some(size) {
                Ok(n) => n,
                Err(e) => return self.done(e).map(Some),
            };
            self.got += n;
            if self.got >= self.min {
                return Ok(Some(self.got));
            }
        }
    }
}

/// With bytes already received, whether the wakeup `ev` ends the call, leaving the
/// socket's error for the next call (a read now would consume it and return nothing):
/// a reset or hang-up. `POLLERR` alone does not end it: it is an error-queue entry
/// (`MSG_ZEROCOPY` notifications, `IP_RECVERR` reports, timestamps) or a soft error on a
/// connection that lives on; the call waits on for its bytes, and a pending error is
/// still there for the next call.
fn hung_up_in_error(ev: i16) -> bool {
    ev & libc::POLLERR != 0 && ev & libc::POLLHUP != 0
}
