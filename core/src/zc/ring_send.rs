//! The io_uring engine's sends: SEND_ZC / SENDMSG_ZC requests on the thread's ring (see
//! `uring.rs` for the ring itself), their copy fallback, and the notifications they bring.

use super::*;

/// An io_uring sender's place in a thread's ring: joined at its first use (send, wait,
/// `completion_fd`), on that thread; an error there is kept (an AUTO sender then falls back).
pub(super) struct Ring {
    pub(super) joined: OnceLock<Result<uring::Binding, c_int>>,
    /// Picked by AUTO: may fall back to the error queue if no ring can be joined.
    pub(super) auto: bool,
    /// Inbox room the route keeps (the sender's reserve).
    pub(super) keep: usize,
}

impl Ring {
    pub(super) fn new(auto: bool, keep: usize) -> Self {
        Ring {
            joined: OnceLock::new(),
            auto,
            keep,
        }
    }

    /// The ring joined, joining the calling thread's if none yet.
    pub(super) fn join(&self) -> io::Result<&uring::Binding> {
        let r = self.joined.get_or_init(|| {
            uring::Binding::new(self.keep).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
        });
        r.as_ref().map_err(|&e| errno(e))
    }

    /// The ring joined, if any.
    pub(super) fn joined(&self) -> Option<&uring::Binding> {
        self.joined.get().and_then(|r| r.as_ref().ok())
    }
}

/// One io_uring notification: to its request, and to the adaptive count; a notification
/// for no request in flight is counted in `unexpected` and ignored.
pub(super) fn apply_notif(
    tracker: &mut Tracker,
    adaptive: &mut Adaptive,
    unexpected: &mut u64,
    n: uring::Notif,
) {
    if tracker.complete_notif(n.slot, n.copied) {
        adaptive.note(n.copied, 1);
    } else {
        *unexpected += 1;
    }
}

/// Drops `n` bytes from the front of `iov[*first..]` (partial progress of a stream send).
pub(super) fn advance(iov: &mut [iovec], first: &mut usize, mut n: usize) {
    while n > 0 && *first < iov.len() {
        let v = &mut iov[*first];
        if n >= v.iov_len {
            n -= v.iov_len;
            *first += 1;
        } else {
            // SAFETY: stays within the same buffer (n < iov_len).
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n) }.cast();
            v.iov_len -= n;
            n = 0;
        }
    }
    while *first < iov.len() && iov[*first].iov_len == 0 {
        *first += 1;
    }
}

impl<F: AsFd, B: ZcBuf> ZeroCopySender<F, B> {
    /// io_uring: joins the calling thread's ring if the sender has none yet; if it cannot, an
    /// AUTO sender falls back to the error queue (or copies), any other fails.
    pub(super) fn join_ring(&mut self) -> io::Result<()> {
        let failed = match &self.engine {
            Engine::IoUring(r) => r.join().err().map(|e| (e, r.auto)),
            _ => None,
        };
        match failed {
            None => Ok(()),
            Some((_, true)) => {
                self.engine = plain_engine(self.fd.as_fd());
                if matches!(self.engine, Engine::ErrQueue) {
                    self.tracker.keep_after_growth(REAP_EVERY as usize, true);
                }
                Ok(())
            }
            Some((e, false)) => Err(e),
        }
    }

    /// The ring this io_uring sender joined; `EIO` if none (the send path joins first).
    pub(super) fn ring(&self) -> io::Result<&uring::Binding> {
        match &self.engine {
            Engine::IoUring(r) => r.joined().ok_or_else(|| errno(libc::EIO)),
            _ => Err(errno(libc::EIO)),
        }
    }

    /// io_uring SEND_ZC / SENDMSG_ZC. io_uring itself is never asked to wait for socket
    /// space (`MSG_DONTWAIT` on every request): a request waiting in the kernel cannot be
    /// interrupted by a signal. A blocking send waits in `poll(POLLOUT)` instead, which a
    /// signal interrupts, and sends the rest as further requests of the same completion.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    pub(super) unsafe fn send_uring(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        user: &[iovec],
        flags: c_int,
    ) -> io::Result<usize> {
        let (blocking, caller_flags) = (flags & libc::MSG_DONTWAIT == 0, flags);
        let flags = flags | libc::MSG_DONTWAIT;
        self.ring()?.check_owner()?; // before any wait: another thread is refused at once
        if self.uring_full {
            // A SEND_ZC that fails still posts a notification, and on TCP the kernel can
            // chain it to the notification of unacknowledged data (io_link_skb), holding a
            // slot until the peer acks. So after an EAGAIN, ask poll before the next request:
            // a caller retrying a full socket gets EAGAIN from poll, not a held slot.
            // The socket's O_NONBLOCK is read only here, where a blocking call would sleep:
            // io_uring itself ignores it (only MSG_DONTWAIT in the request counts).
            let ms = if blocking && !self.fd_nonblocking()? {
                -1
            } else {
                0
            };
            let waiter = &mut self.waiter;
            if waiter.wait(
                self.fd.as_fd(),
                libc::POLLOUT,
                ms,
                &mut self.stats.syscalls_send,
            )? == 0
            {
                return Err(errno(libc::EAGAIN));
            }
            self.uring_full = false;
        }
        let total: usize = user.iter().map(|v| v.iov_len).sum();
        // The caller's iovecs as they are (the kernel only reads them, and is done with them
        // when the request's result is in); a copy to advance only after partial progress of
        // a blocking stream send. (A copy on the stack, IOV_MAX of them, cost every send a
        // 16 KiB frame and its stack probe.)
        let mut rest: Option<Vec<iovec>> = None;
        let (mut sent, mut first, mut nomem) = (0usize, 0usize, false);
        loop {
            let iov: &[iovec] = rest.as_deref().map_or(user, |v| &v[first..]);
            msg.msg_iov = iov.as_ptr() as *mut iovec;
            msg.msg_iovlen = iov.len() as _;
            // SAFETY: msg points at the caller's name and control and at their iovecs (or our
            // copy of them, advanced past what was sent).
            match unsafe { self.uring_once(slot, msg, flags) } {
                Ok(n) => {
                    sent += n;
                    if !blocking || !self.stream || sent >= total || n == 0 {
                        return Ok(sent);
                    }
                    // Part went: the socket is full. A blocking call waits below for room, on
                    // an O_NONBLOCK socket it returns what went (as send(2)).
                    if self.fd_nonblocking().unwrap_or(true) {
                        return Ok(sent);
                    }
                    advance(rest.get_or_insert_with(|| user.to_vec()), &mut first, n);
                }
                // The locked-pages limit: a ring made by a thread without CAP_IPC_LOCK charges
                // each SEND_ZC's pages to the user's RLIMIT_MEMLOCK until its notification
                // (io_uring/notif.h io_notif_account_mem), and says ENOMEM past it; or no
                // kernel memory. As ENOBUFS on the error queue: collect (notifications give
                // the pages back) and retry once, then send the rest by copy.
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
                    self.stats.enobufs += 1;
                    if !nomem {
                        nomem = true;
                        self.collect()?;
                        continue;
                    }
                    // SAFETY: msg points at the caller's name and control and at the iovecs
                    // not yet sent (set at the top of this round).
                    return match unsafe { self.uring_copy(slot, msg, caller_flags) } {
                        Ok(n) => Ok(sent + n),
                        Err(_) if sent > 0 => Ok(sent),
                        Err(e) => Err(e),
                    };
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    self.uring_full = true;
                    // (a non-blocking call returns after its first request; a blocking one on
                    // an O_NONBLOCK socket, as send(2) does, with what went or EAGAIN)
                    if !blocking || self.fd_nonblocking().unwrap_or(true) {
                        return if sent > 0 { Ok(sent) } else { Err(e) };
                    }
                }
                // After partial progress the error is the next call's, as with send(2).
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => return Err(e),
            }
            // A non-empty error queue (ICMP errors, timestamps: this backend does not read
            // it) does not end this sleep (crate::wait).
            match self.waiter.wait(
                self.fd.as_fd(),
                libc::POLLOUT,
                -1,
                &mut self.stats.syscalls_send,
            ) {
                Ok(_) => self.uring_full = false,
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => return Err(e),
            }
        }
    }

    /// The socket's `O_NONBLOCK` (one `fcntl`, counted as a send syscall): read only where a
    /// blocking io_uring send would sleep, since io_uring does not look at it.
    pub(super) fn fd_nonblocking(&mut self) -> io::Result<bool> {
        self.stats.syscalls_send += 1;
        sys::is_nonblocking(self.fd.as_fd())
    }

    /// The io_uring backend's copy fallback: one plain `sendmsg` of `msg` for `slot`, whose
    /// completion (flagged [`COPIED`] | [`FALLBACK`]) waits for nothing more than the
    /// notifications its earlier requests still expect.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    pub(super) unsafe fn uring_copy(
        &mut self,
        slot: SlotId,
        msg: &msghdr,
        flags: c_int,
    ) -> io::Result<usize> {
        self.stats.syscalls_send += 1;
        // SAFETY: msg points at the caller's name, control and iovecs.
        let n = unsafe { sys::sendmsg(self.fd.as_fd(), msg, flags) }?;
        if n > 0 {
            self.stats.copy_sends += 1;
            self.tracker.add_done(slot, n, COPIED | FALLBACK);
        }
        Ok(n)
    }

    /// One SEND_ZC / SENDMSG_ZC request for `slot`, waiting for its result (not for its
    /// notification); records what the kernel accepted and whether a notification follows.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    pub(super) unsafe fn uring_once(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        flags: c_int,
    ) -> io::Result<usize> {
        let Engine::IoUring(r) = &self.engine else {
            return Err(errno(libc::EIO));
        };
        let u = r.joined().ok_or_else(|| errno(libc::EIO))?;
        let (tracker, adaptive) = (&mut self.tracker, &mut self.adaptive);
        let unexpected = &mut self.stats.unexpected_ids;
        let mut on_notif = |n| apply_notif(tracker, adaptive, unexpected, n);
        let syscalls = &mut self.stats.syscalls_send;
        // SAFETY: forwarded caller guarantees on msg and the buffers.
        let sr = unsafe { u.send(self.fd.as_fd(), msg, flags, slot, syscalls, &mut on_notif) }?;
        self.stats.zerocopy_sends += 1;
        let (res, bytes) = (sr.res, sr.res.max(0) as usize);
        if sr.more {
            self.tracker.add_notif(slot, bytes);
        } else {
            self.tracker.add_done(slot, bytes, 0);
        }
        // Notifications for this slot that came with the result: this request's, or an
        // earlier request's of the same send (one that got EAGAIN still posts one).
        for _ in 0..sr.own_notifs {
            let n = uring::Notif {
                slot,
                copied: sr.own_copied,
            };
            apply_notif(
                &mut self.tracker,
                &mut self.adaptive,
                &mut self.stats.unexpected_ids,
                n,
            );
        }
        if res < 0 {
            return Err(errno(-res));
        }
        Ok(bytes)
    }
}
