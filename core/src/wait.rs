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

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use libc::c_int;

use crate::sys;

/// A socket's waits; see the module documentation. One per call, or one per handle.
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    /// The last wait ended with `POLLERR` and nothing else.
    err_only: bool,
    /// The socket registered edge-triggered, once `POLLERR` alone came twice in a row.
    ep: Option<OwnedFd>,
}

impl Waiter {
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
        let wanted = events | libc::POLLHUP | libc::POLLNVAL;
        *syscalls += 1;
        // With the edge-triggered instance in place, look without sleeping first: it reports
        // only what is new, not what is already there.
        let first = if self.ep.is_some() { 0 } else { timeout_ms };
        let ev = sys::poll_one(fd, events, first)?;
        if ev & wanted != 0 || (ev == 0 && first == timeout_ms) {
            self.err_only = false;
            return Ok(ev);
        }
        if ev == 0 {
            // The error queue was emptied meanwhile: an ordinary sleep.
            *syscalls += 1;
            let ev = sys::poll_one(fd, events, timeout_ms)?;
            self.err_only = ev != 0 && ev & wanted == 0;
            return Ok(ev);
        }
        // POLLERR alone: once for the caller to look, then it is the error queue's.
        if !std::mem::replace(&mut self.err_only, true) {
            return Ok(ev);
        }
        if timeout_ms == 0 {
            return Ok(0); // nothing new
        }
        let ep = match &self.ep {
            Some(ep) => ep,
            None => {
                *syscalls += 2;
                let ep = sys::epoll_create()?;
                sys::epoll_add(ep.as_fd(), fd, events as u16 as u32 | libc::EPOLLET as u32)?;
                self.ep.insert(ep)
            }
        };
        // Sleep in poll on the epoll instance (readable when the socket has a new event),
        // then fetch the event without waiting. Not in epoll_wait: it fails with EINTR when
        // io_uring task work (a ring of this thread being torn down) interrupts it, where
        // poll is restarted by the kernel; a real signal ends both with EINTR.
        *syscalls += 1;
        if sys::poll_one(ep.as_fd(), libc::POLLIN, timeout_ms)? == 0 {
            self.err_only = false;
            return Ok(0);
        }
        *syscalls += 1;
        // EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP and EPOLLRDHUP have poll's values.
        let ev = sys::epoll_wait_one(ep.as_fd(), 0)? as u16 as i16;
        if ev == 0 {
            // Nothing after all (the socket's state changed back between the two calls):
            // "look" rather than a timeout; the caller's next wait sleeps again.
            self.err_only = true;
            return Ok(libc::POLLERR);
        }
        self.err_only = ev & wanted == 0;
        Ok(ev)
    }
}
