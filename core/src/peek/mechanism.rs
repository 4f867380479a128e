//! The two mechanisms of a peeker: `SO_PEEK_OFF` (the kernel keeps the offset) and the discard
//! prefix (the bytes before the offset are peeked into a scratch buffer), and how AUTO picks.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mechanism {
    Offset,
    Discard,
}

impl Mechanism {
    /// AUTO without touching the socket when the family's answer is cached; callers that
    /// get `Offset` still handle `EOPNOTSUPP` from the first `setsockopt`.
    pub(super) fn resolve_auto(info: SockInfo) -> Self {
        match PEEK_OFF_CACHE[info.family].load(Ordering::Relaxed) {
            2 => Self::Discard,
            _ => Self::Offset,
        }
    }
}

/// What the kernel's `SO_PEEK_OFF` holds, as far as the peeker knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KernelOff {
    Unknown,
    /// -1: peeks start at the head of the queue.
    Disabled,
    At(usize),
}

impl<F: AsFd> Peeker<F> {
    /// Largest cursor the mechanism can represent.
    pub(super) fn max_offset(&self) -> usize {
        match self.mech {
            Mechanism::Offset => OFFSET_MAX,
            Mechanism::Discard => discard_max(1),
        }
    }

    /// The peek at the cursor after the argument checks; the cursor advances by the result.
    ///
    /// # Safety
    /// As [`Peeker::peek_raw`].
    pub(super) unsafe fn peek_checked(&mut self, iov: &[iovec], flags: c_int) -> io::Result<usize> {
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
    pub(super) unsafe fn peek_offset(&mut self, iov: &[iovec], flags: c_int) -> io::Result<usize> {
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
    pub(super) unsafe fn peek_discard(
        &mut self,
        user: &[iovec],
        flags: c_int,
    ) -> io::Result<usize> {
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

    /// AUTO's discard path: the kernel must not shift the peek by an offset of its own.
    pub(super) fn disable_peek_off(&mut self) -> io::Result<()> {
        if self.kernel_off != KernelOff::Disabled {
            self.set_peek_off(-1)?;
            self.kernel_off = KernelOff::Disabled;
        }
        Ok(())
    }

    pub(super) fn set_peek_off(&mut self, v: c_int) -> io::Result<()> {
        self.stats.syscalls += 1;
        self.moves += 1;
        sys::setsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, SO_PEEK_OFF, v)
    }
}
