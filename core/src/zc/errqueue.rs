//! The error-queue engine: `SO_ZEROCOPY` + `MSG_ZEROCOPY` sends (and plain copies), and the
//! notifications read back from `MSG_ERRQUEUE`.

use super::*;

/// Error-queue messages read per `recvmmsg`.
pub(super) const ERRQ_BATCH: usize = 16;

/// Control buffer per error-queue message: a `sock_extended_err` plus the offender address
/// (44 bytes on IPv6) with room for a timestamp cmsg beside it.
pub(super) const ERRQ_CONTROL: usize = 256;

/// The error queue where `SO_ZEROCOPY` works, else copies.
pub(super) fn plain_engine(fd: BorrowedFd<'_>) -> Engine {
    match enable_so_zerocopy(fd) {
        Ok(()) => Engine::ErrQueue,
        Err(_) => Engine::Copy,
    }
}

/// Sets `SO_ZEROCOPY` for a new error-queue sender: `EBUSY` where it is set already. Then
/// another sender (or the program itself) may have made `MSG_ZEROCOPY` sends on the socket,
/// and the kernel's notification ids go on from where those left off, where this sender would
/// count from 0: it would take their notifications for its own sends' and hand buffers back
/// before the kernel sent them. The counter cannot be read back, so such a socket gets no
/// second error-queue sender (AUTO picks io_uring or copies there).
pub(super) fn enable_so_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    if getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY)? != 0 {
        return Err(errno(libc::EBUSY));
    }
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
    // Read it back: a filter (seccomp, BPF sockopt) could have swallowed the request.
    match getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY)? {
        1 => Ok(()),
        _ => Err(errno(libc::EOPNOTSUPP)),
    }
}

impl<F: AsFd, B: ZcBuf> ZeroCopySender<F, B> {
    /// Error-queue and copy sends: one `sendmsg`, as `send(2)` would make it; after `ENOBUFS`
    /// (zerocopy state in flight exhausted optmem or `RLIMIT_MEMLOCK`) completions are
    /// collected, since they release it, and the send retried once, then made by copy.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    #[inline]
    pub(super) unsafe fn send_plain(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        iov: &[iovec],
        flags: c_int,
    ) -> io::Result<usize> {
        msg.msg_iov = iov.as_ptr() as *mut iovec;
        msg.msg_iovlen = iov.len() as _;
        let errqueue = matches!(self.engine, Engine::ErrQueue);
        let mut zc = errqueue && !self.adaptive.off;
        if zc && !self.tracker.id_room() {
            self.collect()?;
            if !self.tracker.id_room() {
                self.stats.window_full += 1;
                zc = false;
            }
        }
        for _attempt in 0..2 {
            if !zc {
                break;
            }
            self.stats.syscalls_send += 1;
            // SAFETY: msg points at the caller's name, control and iovecs.
            let r = unsafe { sys::sendmsg(self.fd.as_fd(), msg, flags | libc::MSG_ZEROCOPY) };
            // TCP numbers only sends that queued data; a datagram takes an id even with no
            // payload (its header goes out through the zerocopy path: observed on 6.18), unless
            // it appends nothing to a pending corked datagram (no header then, no id).
            let empty_append = self.corked;
            self.note_cork(&r, flags);
            match r {
                Ok(n) if n > 0 || (!self.stream && !empty_append) => {
                    self.stats.zerocopy_sends += 1;
                    self.tracker.add_id(slot, n);
                    return Ok(n);
                }
                Ok(n) => return Ok(n),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.stats.enobufs += 1;
                    self.collect()?;
                }
                Err(e) => return Err(e),
            }
        }
        self.stats.syscalls_send += 1;
        // SAFETY: as above.
        let r = unsafe { sys::sendmsg(self.fd.as_fd(), msg, flags) };
        self.note_cork(&r, flags);
        let n = r?;
        if n > 0 {
            self.stats.copy_sends += 1;
            let fallback = if errqueue || self.adaptive.off {
                FALLBACK
            } else {
                0
            };
            self.adaptive.note_copy_send();
            self.tracker.add_done(slot, n, COPIED | fallback);
        }
        Ok(n)
    }

    /// After a send on a datagram socket: whether a corked datagram is now pending (the send
    /// went with `MSG_MORE`) or was sent (without).
    fn note_cork(&mut self, r: &io::Result<usize>, flags: c_int) {
        if !self.stream && r.is_ok() {
            self.corked = flags & libc::MSG_MORE != 0;
        }
    }

    /// Drains the error queue in batches of [`ERRQ_BATCH`] with `recvmmsg`, into buffers on
    /// the stack (5 KiB): an idle sender keeps none.
    pub(super) fn read_errqueue(&mut self) -> io::Result<()> {
        let mut control = [MaybeUninit::<[u8; ERRQ_CONTROL]>::uninit(); ERRQ_BATCH];
        // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
        let mut msgs: [libc::mmsghdr; ERRQ_BATCH] = unsafe { std::mem::zeroed() };
        while self.tracker.ids_inflight() > 0 {
            for (m, c) in msgs.iter_mut().zip(control.iter_mut()) {
                // SAFETY: all-zero is a valid mmsghdr.
                *m = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = ERRQ_CONTROL as _;
            }
            self.stats.syscalls_reap += 1;
            // SAFETY: each message points at its own control buffer (written by the kernel,
            // read only up to the msg_controllen it sets) and has no iovecs.
            let r = unsafe {
                sys::recvmmsg(
                    self.fd.as_fd(),
                    &mut msgs,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                )
            };
            let n = match r {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(()),
                Err(e) => return Err(e),
            };
            for m in &msgs[..n] {
                // SAFETY: the kernel wrote msg_controllen bytes of control data.
                match unsafe { sys::zerocopy_notice(&m.msg_hdr) } {
                    Some(z) => {
                        let o = self.tracker.complete_range(z.lo, z.hi, z.copied);
                        self.stats.unexpected_ids += o.unexpected as u64;
                        self.adaptive.note(z.copied, o.matched);
                    }
                    // Timestamps, ICMP errors: not ours to interpret. A truncated control
                    // buffer (MSG_CTRUNC) cannot hold a notification we could miss: ours
                    // needs 64 bytes of the 256.
                    None => self.stats.errqueue_other += 1,
                }
            }
            if n < ERRQ_BATCH {
                return Ok(());
            }
        }
        Ok(())
    }
}
