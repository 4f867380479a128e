//! The boundaries a peek stops at as a read would: the urgent mark, the end of the stream, a
//! pending error, and the waits beyond the cursor.

use super::*;

/// Where [`Peeker::caller_mark`] found the urgent mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CallerMark {
    /// No mark that cut the peek.
    None,
    /// At the head of the queue: the peek skipped the urgent byte there.
    AtHead,
    /// Ahead of the head, where the peek stopped: at or before the cursor.
    Ahead,
}

impl<F: AsFd> Peeker<F> {
    /// After a discard peek that reached `n` bytes, no further than the cursor: whether more
    /// bytes are queued than it reached, twice at the same `n` (the kernel ended both peeks at
    /// an urgent mark; once may be bytes arriving meanwhile, which sets `cut_at` to `n` for
    /// the caller to peek again). MPTCP has no urgent data (and its `SIOCINQ` is a hint).
    pub(super) fn cut_by_mark(&mut self, n: usize, cut_at: &mut Option<usize>) -> io::Result<bool> {
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
    pub(super) unsafe fn peek_past_mark(
        &mut self,
        user: &[iovec],
        flags: c_int,
    ) -> io::Result<usize> {
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

    /// [`Urgent::Caller`], after a discard peek that reached `n` bytes, no further than the
    /// cursor, with `TCP_INQ`'s hint `h` (every byte queued, the urgent byte and a FIN
    /// counted): where the urgent mark is. Without `SO_OOBINLINE` the kernel skips an urgent
    /// byte at the head in reads and peeks, and its `SIOCINQ` counts only the bytes before a
    /// mark ahead of the head (`tcp_inq`, include/net/tcp.h); so a mark ahead that this peek
    /// stopped at shows as `SIOCINQ` == `n` with more than `n` queued (more than `n` + 1, or
    /// `n` + 1 with the peer not ended: a FIN is the other one byte).
    pub(super) fn caller_mark(&mut self, n: usize, h: usize) -> io::Result<CallerMark> {
        if h <= n {
            return Ok(CallerMark::None);
        }
        self.stats.syscalls += 1;
        if sys::at_mark(self.fd.as_fd()) {
            return Ok(CallerMark::AtHead);
        }
        self.stats.syscalls += 1;
        if sys::inq(self.fd.as_fd())? != n {
            return Ok(CallerMark::None); // more came meanwhile: the caller peeks again
        }
        if h == n + 1 && self.peer_ended()? {
            return Ok(CallerMark::None); // the one byte more is the FIN
        }
        // MPTCP has no urgent data (and its counts are hints).
        self.stats.syscalls += 1;
        let proto = sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL)?;
        Ok(if proto == libc::IPPROTO_MPTCP {
            CallerMark::None
        } else {
            CallerMark::Ahead
        })
    }

    /// Blocks until more than `skip` bytes are queued, the peer shuts down, or an error.
    /// `seq_extra`: bytes at the head that reads skip but `SO_PEEK_OFF` counts (an urgent
    /// byte without `SO_OOBINLINE`, [`Urgent::Caller`]).
    pub(super) fn wait_beyond(&mut self, skip: usize, seq_extra: usize) -> io::Result<()> {
        // Where the socket has SO_PEEK_OFF (AF_UNIX since 3.4, TCP/IPv4 since 6.9, TCP/IPv6
        // since 6.12) a one-byte peek at the cursor sleeps for a byte past it, and the kernel
        // itself reports a signal (EINTR) or SO_RCVTIMEO (EAGAIN): it has copied nothing.
        if skip + seq_extra <= OFFSET_MAX {
            match self.set_peek_off((skip + seq_extra) as c_int) {
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
        let t0 = sys::monotonic();
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
            Some(t) if sys::monotonic().saturating_sub(t0) + JIFFY_MAX >= t => {
                Err(errno(libc::EAGAIN))
            }
            _ => Err(errno(libc::EINTR)),
        }
    }

    /// Whether the peer ended the stream: shut down its sending side, or reset (which shuts
    /// down both ways: POLLHUP). An error on a connection that lives on (an ICMP error with
    /// IP_RECVERR) is returned as the error, as recv would return it with nothing to copy.
    /// POLLERR alone is also a non-empty error queue (MSG_ZEROCOPY notifications): no end.
    pub(super) fn peer_ended(&mut self) -> io::Result<bool> {
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
    pub(super) fn end_of_stream(&mut self) -> io::Result<usize> {
        self.take_socket_error().map(|()| 0)
    }

    /// `SO_ERROR`, which reading clears: `Err` with it if one was pending.
    pub(super) fn take_socket_error(&mut self) -> io::Result<()> {
        self.stats.syscalls += 1;
        match sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_ERROR)? {
            0 => Ok(()),
            e => Err(errno(e)),
        }
    }

    pub(super) fn fd_nonblocking(&mut self) -> io::Result<bool> {
        self.stats.syscalls += 1;
        sys::is_nonblocking(self.fd.as_fd())
    }
}
