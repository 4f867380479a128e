//! Sleeping until a socket is ready, whatever its error queue holds.
//!
//! `poll` and `epoll` report `POLLERR` for a socket whose error queue is not empty, whatever
//! events were asked for: `MSG_ZEROCOPY` completion notifications, ICMP errors queued with
//! `IP_RECVERR`/`IPV6_RECVERR`, `SO_TIMESTAMPING` reports (net/ipv4/tcp.c `tcp_poll`,
//! net/core/datagram.c `datagram_poll`). Such an entry stays until someone reads the error
//! queue, and a receive call must not: it belongs to the sender, or to whoever asked for the
//! reports. A wait loop that takes `POLLERR` for readiness then returns at once, forever: a
//! receive that never sleeps, ignores its timeout and burns a core.
//!
//! [`Waiter`] sleeps correctly in that state. It polls as usual; when `poll` says `POLLERR`
//! and nothing else it hands that back once, so that the caller's non-blocking read reports
//! a real socket error (`SO_ERROR`, which the read returns and clears, as `recv` does). When
//! `POLLERR` alone comes back again the error queue is the cause: the waiter then sleeps in
//! an edge-triggered epoll instance watching the socket, which wakes only for something new
//! (bytes, a hang-up, a new error or error-queue entry), each at most once. It cannot spin:
//! every return from that sleep is a wakeup the kernel made for a new event, or the timeout.
//! The epoll instance (one descriptor) is made the first time it is needed and lives as long
//! as the waiter; a waiter that never meets a busy error queue makes exactly one `poll` per
//! wait, as before.
//!
//! # Waiting from another thread, abortably
//!
//! The same waiter is public for code that sleeps on a socket somewhere other than in a
//! lowcopy call: a binding's wait on a worker thread (Node's thread pool), a daemon's helper
//! thread. [`Waiter::wait_ready`] sleeps until a socket is readable or writable (or has a
//! new error-queue entry, a hang-up or an error), a time limit passes, or another thread
//! calls [`AbortHandle::abort`]; [`wait_beyond`] sleeps until a stream socket holds more than
//! a given number of bytes, the way a peek at an offset needs. Both are restarted after a
//! signal: only their time limit or an abort ends them early.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::sys;

/// What [`Waiter::wait_ready`] waits for on a socket (or any pollable descriptor: an io_uring
/// ring, an eventfd).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interest {
    /// Bytes to read, or the end of the stream (`POLLIN`).
    Readable,
    /// Room to write (`POLLOUT`).
    Writable,
    /// Nothing but what `poll` always reports: an error-queue entry or a pending error
    /// (`POLLERR`), a hang-up (`POLLHUP`). The wait of a `MSG_ZEROCOPY` sender for its
    /// notifications.
    Errors,
}

impl Interest {
    fn events(self) -> i16 {
        match self {
            Interest::Readable => libc::POLLIN,
            Interest::Writable => libc::POLLOUT,
            Interest::Errors => 0,
        }
    }
}

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// The descriptor has something to look at: the event waited for, a hang-up, an error, or
    /// a new error-queue entry. Not a promise: the call made next (a non-blocking read, say)
    /// may still find nothing (`EAGAIN`) and wait again.
    Ready,
    /// [`AbortHandle::abort`] was called (before or during the wait).
    Aborted,
    /// The time limit passed first.
    TimedOut,
}

/// Ends waits from another thread: an eventfd that every abortable wait polls beside its
/// socket. Once aborted it stays aborted; make one per operation that may be cancelled.
/// Holds one descriptor, closed on drop.
#[derive(Debug)]
pub struct AbortHandle {
    fd: sys::Fd,
}

impl AbortHandle {
    /// A new handle, not aborted.
    ///
    /// # Errors
    /// `EMFILE`/`ENFILE` (out of descriptors), `ENOMEM`.
    ///
    /// # Syscalls
    /// One `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)`.
    pub fn new() -> io::Result<Self> {
        Ok(AbortHandle {
            fd: sys::eventfd()?,
        })
    }

    /// Aborts: every wait given this handle, pending or later, returns [`Wakeup::Aborted`].
    /// Safe from any thread, any number of times.
    ///
    /// # Syscalls
    /// One `write` of 1 to the eventfd (it cannot fail short of 2^64 - 2 aborts, which would
    /// leave it readable anyway).
    pub fn abort(&self) {
        let _ = sys::eventfd_add(self.fd.as_fd());
    }

    /// Whether [`abort`](Self::abort) was called.
    ///
    /// # Syscalls
    /// One `poll` with timeout 0.
    pub fn is_aborted(&self) -> bool {
        matches!(sys::poll_one(self.fd.as_fd(), libc::POLLIN, 0), Ok(ev) if ev != 0)
    }
}

impl AsFd for AbortHandle {
    /// The eventfd: readable (`POLLIN`) once aborted. For an event loop that watches it
    /// itself; reading it would clear the abort for every waiter.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The deadline `timeout` from now; `None` for no limit or one beyond what an `Instant` holds.
fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// Milliseconds left until `deadline` (-1: none), rounded up: a wait never ends before it.
fn ms_left(deadline: Option<Instant>) -> c_int {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            left.as_micros().div_ceil(1000).min(c_int::MAX as u128) as c_int
        }
    }
}

fn is_eintr(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINTR)
}

/// `poll` on `fd`, and on `abort` too when there is one: `None` when `abort` is readable.
fn poll_or_abort(
    fd: BorrowedFd<'_>,
    events: i16,
    abort: Option<BorrowedFd<'_>>,
    timeout_ms: c_int,
) -> io::Result<Option<i16>> {
    match abort {
        None => sys::poll_one(fd, events, timeout_ms).map(Some),
        Some(a) => {
            let (ev, aborted) = sys::poll_two(fd, events, a, timeout_ms)?;
            Ok((!aborted).then_some(ev))
        }
    }
}

/// A socket's waits; see the module documentation. One per socket (or per wait): its state
/// is what keeps a busy error queue from waking it again and again, so a loop of waits on one
/// socket uses one waiter. Holds an epoll instance (one descriptor) once it met a busy error
/// queue, closed on drop.
#[derive(Debug, Default)]
pub struct Waiter {
    /// The last wait ended with `POLLERR` and nothing else.
    err_only: bool,
    /// The socket registered edge-triggered, once `POLLERR` alone came twice in a row.
    ep: Option<sys::Fd>,
}

impl Waiter {
    /// A waiter that has not waited yet (no descriptor).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleeps until `fd` has something for `interest` ([`Wakeup::Ready`]), `abort` is aborted
    /// ([`Wakeup::Aborted`], which wins when both happened), or `timeout` passed
    /// ([`Wakeup::TimedOut`]; `None`: no limit, `Some(Duration::ZERO)`: just look). Never
    /// spins on a non-empty error queue: `POLLERR` alone is `Ready` once, so that the caller
    /// looks at the socket (its pending error, or the queue entry if it reads the error
    /// queue); when it comes back alone to the next wait of this waiter, the waiter sleeps until
    /// something new happens on the socket (module documentation). After a wait that timed
    /// out, the next one says `Ready` once again for a `POLLERR` still there (the caller may
    /// have left its loop; it looks once more). A signal does not end the
    /// wait: it is restarted with the time left.
    ///
    /// `fd` must be the same socket from one wait of a waiter to the next (the epoll instance
    /// it may hold watches that socket); use a waiter per socket.
    ///
    /// # Errors
    /// `EBADF` when `fd` is not open (`POLLNVAL`); `ENOMEM`; `EMFILE` when the epoll
    /// instance cannot be made.
    ///
    /// # Syscalls
    /// One `poll` (of `fd`, with the abort eventfd when given) per wait; with a busy error
    /// queue, a `poll` of the epoll instance and one `epoll_wait` with timeout 0 per wakeup,
    /// plus `epoll_create1`, `epoll_ctl` and an `epoll_wait` with timeout 0 once per waiter.
    pub fn wait_ready(
        &mut self,
        fd: impl AsFd,
        interest: Interest,
        abort: Option<&AbortHandle>,
        timeout: Option<Duration>,
    ) -> io::Result<Wakeup> {
        let deadline = deadline(timeout);
        let abort = abort.map(|a| a.fd.as_fd());
        let mut calls = 0u64;
        loop {
            let ms = if timeout == Some(Duration::ZERO) {
                0
            } else {
                ms_left(deadline)
            };
            match self.wait_abortable(fd.as_fd(), interest.events(), ms, abort, &mut calls) {
                Ok(None) => return Ok(Wakeup::Aborted),
                Ok(Some(ev)) if ev & libc::POLLNVAL != 0 => return Err(sys::errno(libc::EBADF)),
                Ok(Some(0)) if ms == 0 || deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(Wakeup::TimedOut)
                }
                Ok(Some(0)) => {}
                Ok(Some(_)) => return Ok(Wakeup::Ready),
                Err(e) if is_eintr(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits up to `timeout_ms` (-1: no limit, 0: just look) for `events` on `fd`; returns
    /// the `poll` revents, 0 when the time ran out. `POLLERR` without any other event means
    /// "look at the socket": its pending error, or a new error-queue entry. Counts its
    /// syscalls in `syscalls`.
    pub(crate) fn wait(
        &mut self,
        fd: BorrowedFd<'_>,
        events: i16,
        timeout_ms: c_int,
        syscalls: &mut u64,
    ) -> io::Result<i16> {
        self.wait_abortable(fd, events, timeout_ms, None, syscalls)
            .map(|ev| ev.unwrap_or(0))
    }

    /// [`wait`](Self::wait) that also ends, with `None`, when `abort` becomes readable.
    pub(crate) fn wait_abortable(
        &mut self,
        fd: BorrowedFd<'_>,
        events: i16,
        timeout_ms: c_int,
        abort: Option<BorrowedFd<'_>>,
        syscalls: &mut u64,
    ) -> io::Result<Option<i16>> {
        let wanted = events | libc::POLLHUP | libc::POLLNVAL;
        *syscalls += 1;
        // With the edge-triggered instance in place, look without sleeping first: it reports
        // only what is new, not what is already there.
        let first = if self.ep.is_some() { 0 } else { timeout_ms };
        let Some(ev) = poll_or_abort(fd, events, abort, first)? else {
            return Ok(None);
        };
        if ev & wanted != 0 || (ev == 0 && first == timeout_ms) {
            self.err_only = false;
            return Ok(Some(ev));
        }
        if ev == 0 {
            // The error queue was emptied meanwhile: an ordinary sleep.
            *syscalls += 1;
            let Some(ev) = poll_or_abort(fd, events, abort, timeout_ms)? else {
                return Ok(None);
            };
            self.err_only = ev != 0 && ev & wanted == 0;
            return Ok(Some(ev));
        }
        // POLLERR alone: once for the caller to look, then it is the error queue's.
        if !std::mem::replace(&mut self.err_only, true) {
            return Ok(Some(ev));
        }
        if timeout_ms == 0 {
            return Ok(Some(0)); // nothing new
        }
        let ep = match &self.ep {
            Some(ep) => ep,
            None => {
                *syscalls += 3;
                let ep = sys::epoll_create()?;
                sys::epoll_add(ep.as_fd(), fd, events as u16 as u32 | libc::EPOLLET as u32)?;
                // Registering reports the state already there (the POLLERR just seen) once:
                // take it now, so that the sleep below wakes for something new only.
                let ev = sys::epoll_wait_one(ep.as_fd(), 0)? as u16 as i16;
                let ep = self.ep.insert(ep);
                if ev & wanted != 0 {
                    self.err_only = false;
                    return Ok(Some(ev));
                }
                ep
            }
        };
        // Sleep in poll on the epoll instance (readable when the socket has a new event),
        // then fetch the event without waiting. Not in epoll_wait: it fails with EINTR when
        // io_uring task work (a ring of this thread being torn down) interrupts it, where
        // poll is restarted by the kernel; a real signal ends both with EINTR.
        *syscalls += 1;
        match poll_or_abort(ep.as_fd(), libc::POLLIN, abort, timeout_ms)? {
            None => return Ok(None),
            Some(0) => {
                self.err_only = false;
                return Ok(Some(0));
            }
            Some(_) => {}
        }
        *syscalls += 1;
        // EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP and EPOLLRDHUP have poll's values.
        let ev = sys::epoll_wait_one(ep.as_fd(), 0)? as u16 as i16;
        if ev == 0 {
            // Nothing after all (the socket's state changed back between the two calls):
            // "look" rather than a timeout; the caller's next wait sleeps again.
            self.err_only = true;
            return Ok(Some(libc::POLLERR));
        }
        self.err_only = ev & wanted == 0;
        Ok(Some(ev))
    }
}

/// Sleeps until more than `offset` bytes are queued on the stream socket `fd`
/// ([`Wakeup::Ready`]; a peek at `offset` then finds a byte), or the peer ended the stream
/// (shut down its side or reset: `Ready` too, and the peek reports the end or the error),
/// `abort` is aborted ([`Wakeup::Aborted`]), or `timeout` passed ([`Wakeup::TimedOut`];
/// `None`: no limit). A signal does not end it.
///
/// `poll` cannot wait for this: it ignores `SO_PEEK_OFF` and reports `POLLIN` while any byte
/// is queued, so a loop of peeks and polls with bytes before `offset` would spin, and raising
/// `SO_RCVLOWAT` changes the socket for everyone who shares it (a duplicate's owner, an event
/// loop). This wait leaves the socket as it is: it sleeps in an edge-triggered epoll instance
/// of its own, which wakes once per new arrival (or error-queue entry, or error), and counts
/// the queue with `SIOCINQ` after each. Made for `SOCK_STREAM` sockets (TCP, MPTCP, AF_UNIX),
/// where `SIOCINQ` counts the bytes queued.
///
/// # Errors
/// `EBADF` (not open), `ENOTTY`/`EINVAL`/`EOPNOTSUPP` from `SIOCINQ` on a descriptor that
/// is not such a socket, `EPERM` from `epoll_ctl` (a regular file), `EMFILE`, `ENOMEM`.
///
/// # Syscalls
/// `epoll_create1` and `epoll_ctl` (the instance lives for the call: one descriptor); then
/// per look an `ioctl(SIOCINQ)` and a `poll` with timeout 0 (has the peer ended?), and per
/// sleep a `poll` of the epoll instance (with the abort eventfd) and an `epoll_wait` with
/// timeout 0 that takes the event.
pub fn wait_beyond(
    fd: impl AsFd,
    offset: usize,
    abort: Option<&AbortHandle>,
    timeout: Option<Duration>,
) -> io::Result<Wakeup> {
    let fd = fd.as_fd();
    let abort = abort.map(|a| a.fd.as_fd());
    let deadline = deadline(timeout);
    let ep = sys::epoll_create()?;
    let events = libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET;
    sys::epoll_add(ep.as_fd(), fd, events as u32)?;
    loop {
        if sys::inq(fd)? > offset {
            return Ok(Wakeup::Ready);
        }
        let ev = sys::poll_one(fd, libc::POLLRDHUP, 0)?;
        if ev & libc::POLLNVAL != 0 {
            return Err(sys::errno(libc::EBADF));
        }
        if ev & (libc::POLLRDHUP | libc::POLLHUP) != 0 {
            return Ok(Wakeup::Ready);
        }
        let ms = ms_left(deadline);
        if ms == 0 {
            return Ok(Wakeup::TimedOut);
        }
        match poll_or_abort(ep.as_fd(), libc::POLLIN, abort, ms) {
            Ok(None) => return Ok(Wakeup::Aborted),
            // Take the event off the ready list: edge-triggered, it comes once per change.
            Ok(Some(ev)) if ev != 0 => {
                sys::epoll_wait_one(ep.as_fd(), 0)?;
            }
            Ok(Some(_)) => {}
            Err(e) if is_eintr(&e) => {}
            Err(e) => return Err(e),
        }
    }
}
