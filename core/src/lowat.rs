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
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use libc::c_int;

use crate::sys::{self, errno};
use crate::wait::Waiter;

/// Sets `SO_RCVLOWAT` to `bytes` and returns the value the kernel keeps, in bytes.
///
/// TCP caps it at `tcp_rmem[2] / 2` (16 MiB with the default 32 MiB maximum), or at
/// `SO_RCVBUF / 2` when the application locked the receive buffer with `SO_RCVBUF`; values
/// above `INT_MAX` are passed as `INT_MAX` and capped the same way; 0 is kept as 1. Setting
/// it on TCP also grows an unlocked receive buffer to about twice the mark (never shrunk
/// again) and, when it lowers the mark, wakes pollers whose data now suffices.
///
/// On a listening TCP socket the value is reported the same way and copied into each
/// connection when its handshake completes (not at `accept`): connections already waiting in
/// the accept queue keep the old value. tcp_mmap sets its mark this way. On kernels before
/// 21b29e74ffe5 (Oct 2025) a large inherited mark also clamped the window scale the listener
/// advertised, so there prefer setting it after `accept`. AF_UNIX and UDP store the value,
/// but their poll ignores it.
///
/// Errors: `EBADF`, `ENOTSOCK`, and other `setsockopt`/`getsockopt` errors.
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    let v = bytes.min(i32::MAX as usize) as c_int;
    sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)?;
    let kept = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT)?;
    Ok(kept.max(0) as usize)
}

/// Counters of [`recv_atleast_with_stats`], added to on every call (failed calls included,
/// since their syscalls happened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// Calls made.
    pub calls: u64,
    /// Syscalls made (including failed ones).
    pub syscalls: u64,
    /// `poll` returns that reported the socket ready: the wakeups.
    pub wakeups: u64,
    /// Wakeups after which the call still had fewer than `min` bytes (the kernel woke below
    /// the mark, the mark was capped, or datagrams were small); the call waited again.
    pub early_wakeups: u64,
    /// Calls that ran out of time (they returned what had come, or `ETIMEDOUT`).
    pub timeouts: u64,
    /// `SO_RCVLOWAT` changes made, restores included.
    pub lowat_changes: u64,
    /// Bytes returned.
    pub bytes: u64,
}

/// Receives at least `min` bytes into `buf` with one wakeup where the kernel allows, then
/// whatever else is queued up to `buf.len()`; returns the bytes received.
///
/// Equivalent to [`recv_atleast_with_stats`] without the counters: results, units (bytes;
/// `timeout` as a [`Duration`]) and errors as documented there.
pub fn recv_atleast(
    fd: BorrowedFd<'_>,
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
/// - `Ok(n)` with `min <= n <= buf.len()` when `min` bytes came in time;
/// - `Ok(n)` with `0 < n < min` when the peer shut down after `n` bytes, when time ran out
///   after `n` bytes came, when the connection was reset after `n` bytes (the error is left
///   pending and the next call reports it), when a signal arrived after `n` bytes, or on a
///   datagram socket when the next datagram does not fit in what is left of `buf`;
/// - `Ok(0)` at end of stream with nothing received;
/// - `ETIMEDOUT` when nothing came in time.
///
/// TCP and MPTCP: the socket's `SO_RCVLOWAT` is set to the bytes still missing while the call
/// waits (capped by the kernel as in [`set_rcvlowat`]) and restored to the value found on entry
/// before it returns: no change when the socket already holds the mark the call needs, so
/// setting the mark once with [`set_rcvlowat`] saves two syscalls per call. An unlocked receive
/// buffer grows to about twice the mark and stays so. Early wakeups below the mark are read
/// and waited past, never lost.
///
/// AF_UNIX stream and other streams: their poll ignores `SO_RCVLOWAT`, so the call wakes on
/// every arrival and loops until `min`; the result is the same, the wakeups are not saved.
///
/// Datagram sockets (UDP, AF_UNIX datagram and seqpacket): whole datagrams are appended to
/// `buf` while they fit, until `min` bytes; a datagram is never truncated. `EMSGSIZE` when the
/// first datagram is larger than `buf` (it stays queued). Zero-length datagrams are consumed
/// and add nothing.
///
/// The error queue: the call never reads it. Its entries (the completion notifications of
/// a [`crate::ZeroCopySender`] on the same socket, ICMP reports queued with `IP_RECVERR`,
/// `SO_TIMESTAMPING` reports) stay for their owner, and neither wake the call nor end it:
/// while one is queued, `poll` reports `POLLERR` at once on every call, so the call then
/// sleeps on an edge-triggered epoll instance of its own (one descriptor for the call's
/// duration, 2-3 syscalls more per wait) that wakes only for new events. A socket error
/// (`SO_ERROR`: a reset, an ICMP error with `IP_RECVERR`) is returned as `recv` returns
/// it, at once when nothing was received; one that arrives after some bytes is left for
/// the next call, and ends this one early only when the connection is reset or hung up.
///
/// Errors: `EINVAL` (`buf` empty or longer than `isize::MAX`), `EBADF`, `ENOTSOCK`,
/// `EOPNOTSUPP` (not a stream, datagram or seqpacket socket), `ETIMEDOUT`, `EMSGSIZE`,
/// `EINTR` (a signal before any byte), and the socket's own errors (`ECONNRESET`, ...).
pub fn recv_atleast_with_stats(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    min: usize,
    timeout: Option<Duration>,
    stats: &mut RecvStats,
) -> io::Result<usize> {
    // SAFETY: `buf` is a live, exclusively borrowed slice of `buf.len()` bytes.
    unsafe { recv_atleast_raw(fd, buf.as_mut_ptr(), buf.len(), min, timeout, stats) }
}

/// [`recv_atleast_with_stats`] into raw memory (the C ABI path: the caller's buffer may be
/// uninitialised, so no `&mut [u8]` is formed over it); results and errors as there, plus
/// `EINVAL` for a null `buf`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes for the duration of the call.
pub unsafe fn recv_atleast_raw(
    fd: BorrowedFd<'_>,
    buf: *mut u8,
    len: usize,
    min: usize,
    timeout: Option<Duration>,
    stats: &mut RecvStats,
) -> io::Result<usize> {
    if len == 0 || len > isize::MAX as usize || buf.is_null() {
        return Err(errno(libc::EINVAL));
    }
    stats.calls += 1;
    let mut rx = Rx {
        fd,
        buf,
        len,
        min: min.clamp(1, len),
        got: 0,
        deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
        no_wait: timeout == Some(Duration::ZERO),
        waiter: Waiter::default(),
        stats,
    };
    let r = match rx.classify()? {
        Kind::Marked => {
            rx.stats.syscalls += 1;
            let orig = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT)?;
            let mut mark = Some(Mark { orig, cur: orig });
            let r = rx.stream(&mut mark);
            if let Some(m) = mark.filter(|m| m.cur != m.orig) {
                // Put back the caller's mark. This cannot fail where setting it worked; if it
                // somehow does, the data already received must still be returned.
                rx.stats.syscalls += 1;
                rx.stats.lowat_changes += 1;
                let _ = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, m.orig);
            }
            r
        }
        Kind::Stream => rx.stream(&mut None),
        Kind::Datagram => rx.datagrams(),
    };
    if let Ok(n) = r {
        rx.stats.bytes += n as u64;
    }
    r
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
    waiter: Waiter,
    stats: &'a mut RecvStats,
}

/// What happened when the call waited for the socket.
enum Woken {
    Ready(i16),
    TimedOut,
}

impl Rx<'_, '_> {
    fn classify(&mut self) -> io::Result<Kind> {
        // SO_TYPE first: it turns a closed fd into EBADF and a file into ENOTSOCK.
        self.stats.syscalls += 1;
        let ty = sys::getsockopt_int(self.fd, libc::SOL_SOCKET, libc::SO_TYPE)?;
        match ty {
            libc::SOCK_STREAM => {
                self.stats.syscalls += 1;
                match sys::getsockopt_int(self.fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? {
                    libc::IPPROTO_TCP | libc::IPPROTO_MPTCP => Ok(Kind::Marked),
                    _ => Ok(Kind::Stream),
                }
            }
            libc::SOCK_DGRAM | libc::SOCK_SEQPACKET => Ok(Kind::Datagram),
            _ => Err(errno(libc::EOPNOTSUPP)),
        }
    }

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
        match self
            .waiter
            .wait(self.fd, events, ms, &mut self.stats.syscalls)?
        {
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
