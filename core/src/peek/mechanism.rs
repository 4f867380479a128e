//! The two mechanisms of a peeker: `SO_PEEK_OFF` (the kernel keeps the offset) and the discard
//! prefix (the bytes before the offset are peeked into a scratch buffer), and how AUTO picks.

use super::*;

/// `TCP_INQ` as a peeker set it (discard mechanism on TCP and MPTCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum InqHint {
    /// Not set (another mechanism, AF_UNIX, a kernel without it).
    Off,
    /// Set: each discard peek's `recvmsg` brings the kernel's count of queued bytes, a
    /// received FIN counted as one more.
    On,
    /// Set, but a peek found the end of the stream or a reset, which the hint does not show:
    /// it no longer settles an empty peek.
    Ended,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mechanism {
    Offset,
    Discard,
}

impl Mechanism {
    /// AUTO without touching the socket when the family's answer is cached; callers that
    /// get `Offset` still handle `EOPNOTSUPP` from the first `setsockopt`.
    pub(super) fn resolve_auto(info: SockInfo) -> Self {
        match peek_off_cache(info.family).load(Ordering::Relaxed) {
            2 => Self::Discard,
            _ => Self::Offset,
        }
    }
}

/// What the kernel's `SO_PEEK_OFF` holds, as far as the peeker knows.
///
/// `At` holds a `u32`: the kernel keeps the offset in an `int` (at most [`OFFSET_MAX`]), and one
/// peek past it moves it by at most `MAX_RW_COUNT` (< 2^31) more; 4 bytes where a `usize` took 8
/// (the peeker's storage, issue 22.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KernelOff {
    Unknown,
    /// -1: peeks start at the head of the queue.
    Disabled,
    At(u32),
}

impl KernelOff {
    /// `At(v)`, `v` below 2^32 (see above: the caller's offsets are checked against
    /// [`OFFSET_MAX`] first).
    pub(super) fn at(v: usize) -> Self {
        debug_assert!(v <= u32::MAX as usize);
        Self::At(v.min(u32::MAX as usize) as u32)
    }
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
    #[inline]
    pub(super) unsafe fn peek_checked(&mut self, iov: &[iovec], flags: c_int) -> io::Result<usize> {
        let r = match self.mech {
            // AUTO: a cursor a little ahead of the kernel's offset costs less as a discard
            // prefix from there (one recvmsg copying <= 4 KiB more) than as setsockopt +
            // recvmsg, when the prefix's iovec fits beside the caller's.
            Mechanism::Offset if self.auto => match self.kernel_off {
                KernelOff::At(k)
                    if (k as usize) < self.cursor
                        && self.cursor - k as usize <= AUTO_DISCARD_MAX
                        && iov.len() < IOV_MAX =>
                {
                    // SAFETY: forwarded caller guarantee on `iov`.
                    unsafe { self.peek_ahead(k as usize, iov, flags) }
                }
                // SAFETY: forwarded caller guarantee on `iov`.
                _ => unsafe { self.peek_offset(iov, flags) },
            },
            // SAFETY: forwarded caller guarantee on `iov`.
            Mechanism::Offset => unsafe { self.peek_offset(iov, flags) },
            Mechanism::Discard if iov.len() + self.cursor.div_ceil(SCRATCH_LEN) > IOV_MAX => {
                // SAFETY: forwarded caller guarantee on `iov`.
                unsafe { self.peek_discard_split(iov, flags) }
            }
            // SAFETY: forwarded caller guarantee on `iov`.
            Mechanism::Discard => unsafe { self.peek_discard(iov, flags) },
        };
        match r {
            Ok(0) => self.note_ended(),
            Ok(n) => {
                self.cursor += n;
                self.stats.peeks += 1;
                self.stats.bytes_peeked += n as u64;
            }
            Err(ref e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => {
                self.note_ended();
            }
            Err(_) => {}
        }
        r
    }

    /// AUTO's shortcut: a peek from the kernel's offset `k`, a little behind the cursor, with
    /// a discard prefix over the bytes between; the kernel's offset moves past all it copied.
    /// When nothing lies beyond the cursor (or the peek stopped at an urgent mark), the peek
    /// at the cursor that follows finds the kernel's offset already there.
    ///
    /// # Safety
    /// As [`Peeker::peek_raw`].
    // Out of line: its 16 KiB iovec array on the stack would otherwise give every peek a
    // stack probe, the offset mechanism's too.
    #[inline(never)]
    unsafe fn peek_ahead(&mut self, k: usize, iov: &[iovec], flags: c_int) -> io::Result<usize> {
        let skip = self.cursor - k;
        let mut space = [MaybeUninit::<iovec>::uninit(); IOV_MAX];
        let prefixed = discard_iov(&mut space, skip, iov)?;
        if flags & libc::MSG_DONTWAIT == 0 {
            // As in peek_offset: the armed mark must not make the kernel wait for more.
            self.lower_lowat_to_one()?;
        }
        self.stats.syscalls += 1;
        // SAFETY: scratch iovecs are always writable; the rest is the caller's guarantee.
        let n = unsafe { recv_iov(self.fd.as_fd(), prefixed, flags | libc::MSG_PEEK) }?;
        self.kernel_off = KernelOff::at(k + n);
        if n > skip {
            self.stats.bytes_skipped_copied += skip as u64;
            return Ok(n - skip);
        }
        self.stats.bytes_skipped_copied += n as u64;
        if n == 0 {
            return Ok(0); // end of stream before the cursor's bytes
        }
        // SAFETY: forwarded caller guarantee on `iov`.
        unsafe { self.peek_offset(iov, flags) }
    }

    /// A discard peek into more iovecs than fit beside the prefix below `IOV_MAX`: several
    /// `recvmsg`, each into as many of the caller's iovecs as fit beside its prefix, until one
    /// comes back short. The first may wait and report errors as any peek; the rest never wait
    /// and end the peek on an error (the bytes peeked so far are returned; a peek loses none).
    ///
    /// # Safety
    /// As [`Peeker::peek_raw`].
    // Out of line: its 16 KiB iovec array on the stack would otherwise give every peek a
    // stack probe, the offset mechanism's too.
    #[inline(never)]
    unsafe fn peek_discard_split(&mut self, iov: &[iovec], flags: c_int) -> io::Result<usize> {
        let base = self.cursor;
        let mut got = 0usize;
        let mut rest = iov;
        let mut first = true;
        while !rest.is_empty() {
            let at = base + got;
            let room = IOV_MAX.saturating_sub(at.div_ceil(SCRATCH_LEN));
            if room == 0 {
                break;
            }
            let (chunk, more) = rest.split_at(room.min(rest.len()));
            let cap = chunk
                .iter()
                .fold(0usize, |a, v| a.saturating_add(v.iov_len));
            self.cursor = at;
            let f = if first {
                flags
            } else {
                flags | libc::MSG_DONTWAIT
            };
            // SAFETY: forwarded caller guarantee on `iov`, of which `chunk` is a part.
            let r = unsafe { self.peek_discard(chunk, f) };
            self.cursor = base;
            let n = match r {
                Ok(n) => n,
                Err(e) if first => return Err(e),
                Err(_) => break,
            };
            got += n;
            if n < cap {
                break;
            }
            first = false;
            rest = more;
        }
        if got == 0 && first {
            return Err(errno(libc::EOVERFLOW));
        }
        Ok(got)
    }

    /// # Safety
    /// As [`Peeker::peek_raw`].
    #[inline]
    pub(super) unsafe fn peek_offset(&mut self, iov: &[iovec], flags: c_int) -> io::Result<usize> {
        if self.cursor > OFFSET_MAX {
            return Err(errno(libc::EOVERFLOW));
        }
        if self.kernel_off != KernelOff::at(self.cursor) {
            self.set_peek_off(self.cursor as c_int)?;
            self.kernel_off = KernelOff::at(self.cursor);
        }
        if flags & libc::MSG_DONTWAIT == 0 {
            // A blocking TCP peek waits for min(SO_RCVLOWAT, len) bytes *beyond the offset*;
            // an armed mark of cursor+1 would make it wait for far more than one byte.
            self.lower_lowat_to_one()?;
        }
        self.stats.syscalls += 1;
        // SAFETY: forwarded caller guarantee on `iov`.
        let n = unsafe { recv_iov(self.fd.as_fd(), iov, flags | libc::MSG_PEEK) }?;
        self.kernel_off = KernelOff::at(self.cursor + n);
        Ok(n)
    }

    /// # Safety
    /// As [`Peeker::peek_raw`].
    // Out of line: its 16 KiB iovec array on the stack would otherwise give every peek a
    // stack probe, the offset mechanism's too.
    #[inline(never)]
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
        let mut hint_used = false;
        // Urgent::Caller: an urgent byte at the head that this peek skipped (cut_by_mark).
        let mut head_urgent = false;
        // AF_UNIX: whether the one poll that settles an empty peek was made (once per call:
        // after a wait, the slow path below settles what the wait ended on).
        let mut unix_polled = false;
        loop {
            self.stats.syscalls += 1;
            let mut ctrunc = false;
            let (n, hint) = if self.inq_hint != InqHint::Off {
                // SAFETY: scratch iovecs are always writable; the rest is the caller's guarantee.
                unsafe { sys::recvmsg_inq(self.fd.as_fd(), iov, flags | libc::MSG_PEEK) }?
            } else if self.transport == Transport::Unix && iov.len() > 1 {
                // SAFETY: as above.
                let (n, f) = unsafe {
                    sys::recvmsg_iov_flags(self.fd.as_fd(), iov, flags | libc::MSG_PEEK)
                }?;
                ctrunc = f & libc::MSG_CTRUNC != 0;
                (n, None)
            } else {
                // SAFETY: as above.
                (
                    unsafe { recv_iov(self.fd.as_fd(), iov, flags | libc::MSG_PEEK) }?,
                    None,
                )
            };
            if n > skip {
                self.stats.bytes_skipped_copied += skip as u64;
                return Ok(n - skip);
            }
            self.stats.bytes_skipped_copied += n as u64;
            if n == 0 {
                // Only a blocking recv returns 0 on an empty queue: end of stream.
                return Ok(0);
            }
            // Once only: after a wait the slow path below settles what the wait ended on.
            if hint == Some(n)
                && !core::mem::replace(&mut hint_used, true)
                && self.inq_hint == InqHint::On
            {
                // TCP_INQ's hint counts every byte queued, a FIN as one more and an urgent
                // byte a peek skips: equal to the bytes peeked, nothing lies beyond them, the
                // peer has not ended, no urgent mark cut the peek. (A reset or a connection
                // error leaves no trace here: it is reported by the next peek that waits, a
                // consume that reaches it, and poll's POLLHUP/POLLERR.)
                if flags & libc::MSG_DONTWAIT != 0 || self.fd_nonblocking()? {
                    return Err(errno(libc::EAGAIN));
                }
                self.wait_beyond(skip, 0)?;
                continue;
            }
            if self.urgent_caller && self.inq_hint == InqHint::On {
                if let Some(h) = hint {
                    match self.caller_mark(n, h)? {
                        // The caller owns urgent data: a peek at or past a mark ahead of the
                        // head is refused until the bytes before it are consumed.
                        boundary::CallerMark::Ahead => return Err(errno(libc::ENOMSG)),
                        boundary::CallerMark::AtHead => {
                            head_urgent = true;
                            if h == n + 1 {
                                // Only the skipped urgent byte is queued beyond the bytes
                                // peeked: nothing lies beyond the cursor.
                                if flags & libc::MSG_DONTWAIT != 0 || self.fd_nonblocking()? {
                                    return Err(errno(libc::EAGAIN));
                                }
                                self.wait_beyond(skip, 1)?;
                                continue;
                            }
                        }
                        boundary::CallerMark::None => {}
                    }
                }
            }
            if self.transport == Transport::Unix
                && !ctrunc
                && !core::mem::replace(&mut unix_polled, true)
            {
                // An AF_UNIX stream peek ends early at a message with control data (it then
                // sets MSG_CTRUNC: no control buffer) and at an out-of-band byte (poll then
                // reports POLLPRI, since 5.15); neither, so nothing lies beyond the bytes
                // peeked, and the same poll tells the peer's shutdown: one syscall where
                // FIONREAD's question and a poll were two.
                self.stats.syscalls += 1;
                let ev = sys::poll_one(self.fd.as_fd(), libc::POLLRDHUP | libc::POLLPRI, 0)?;
                if ev & libc::POLLPRI == 0 {
                    if ev & (libc::POLLRDHUP | libc::POLLHUP) != 0 {
                        ended_before_peek = true;
                        continue; // peek once more: what came in before the shutdown is due
                    }
                    if ev & libc::POLLERR != 0 {
                        self.take_socket_error()?;
                    }
                    if flags & libc::MSG_DONTWAIT != 0 || self.fd_nonblocking()? {
                        return Err(errno(libc::EAGAIN));
                    }
                    self.wait_beyond(skip, 0)?;
                    continue;
                }
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
            self.wait_beyond(skip, head_urgent as usize)?;
        }
    }

    fn note_ended(&mut self) {
        if self.inq_hint == InqHint::On {
            self.inq_hint = InqHint::Ended;
        }
    }

    pub(super) fn set_peek_off(&mut self, v: c_int) -> io::Result<()> {
        self.stats.syscalls += 1;
        self.moves = self.moves.wrapping_add(1);
        sys::setsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, SO_PEEK_OFF, v)
    }
}
