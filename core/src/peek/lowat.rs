//! The peeker's `SO_RCVLOWAT` arming: one wakeup when the bytes beyond the cursor arrive.

use super::*;

/// State of the armed low-water mark.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lowat {
    /// `SO_RCVLOWAT` before arming, restored on disarm and drop.
    pub(super) original: c_int,
    /// The value last asked of the kernel (it may keep less: it caps at `tcp_rmem[2]/2`).
    /// `SO_RCVLOWAT` is an `int`: a cursor + 1 above it is refused before it is asked
    /// (`u32`: the peeker's storage, issue 22.2).
    pub(super) requested: u32,
}

impl<F: AsFd> Peeker<F> {
    /// Arms (`true`) or disarms the low-water mark.
    ///
    // doc-source: lowat_armed.kernel
    /// While armed, `SO_RCVLOWAT` is kept at cursor + 1 bytes so that poll/epoll report the
    /// socket readable only when a byte beyond the cursor is queued (they ignore
    /// `SO_PEEK_OFF`), and level-triggered loops do not spin. Blocking peeks still return as
    /// soon as one new byte is there.
    ///
    /// The mark follows seek and consume at once; after peeks it is raised lazily, when a peek
    /// finds nothing beyond the cursor (`EAGAIN`), so the data path costs no extra syscall. The
    /// kernel caps `SO_RCVLOWAT` at `tcp_rmem[2]/2` (16 MiB by default; `SO_RCVBUF/2` when
    /// locked; net/ipv4/tcp.c `tcp_set_rcvlowat`): past that cursor poll cannot be kept quiet.
    /// Nor can it when the receive queue, full of peeked but unconsumed bytes, puts the socket
    /// under memory pressure (more than 7/8 of `SO_RCVBUF` in kernel memory, which small
    /// segments reach with a few KiB of payload) or shrinks its window to one MSS: TCP then
    /// reports `EPOLLIN` whatever the mark (`tcp_epollin_ready`, net/ipv4/tcp.c). A
    /// level-triggered loop that gets `EAGAIN` from the peek should stop listening for
    /// `EPOLLIN` until it consumes. Setting the mark grows an unlocked receive buffer to about
    /// twice the mark. Disarming, and releasing the peeker, restore the value found when
    /// arming.
    // doc-end
    ///
    /// # Errors
    // doc-source: lowat_armed.errors
    /// `EOPNOTSUPP` on AF_UNIX (its poll ignores `SO_RCVLOWAT`, net/unix/af_unix.c), and
    /// `getsockopt`/`setsockopt` errors.
    // doc-end
    pub fn set_lowat_armed(&mut self, on: bool) -> io::Result<()> {
        match (on, self.lowat) {
            (true, None) => {
                if self.transport == Transport::Unix {
                    return Err(errno(libc::EOPNOTSUPP));
                }
                self.stats.syscalls += 1;
                let original =
                    sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT)?;
                self.lowat = Some(Lowat {
                    original,
                    requested: original.max(1) as u32,
                });
                self.follow_lowat()
            }
            (false, Some(l)) => {
                self.lowat = None;
                self.set_rcvlowat(l.original)
            }
            _ => Ok(()),
        }
    }

    /// Whether the low-water mark is armed.
    pub fn lowat_armed(&self) -> bool {
        self.lowat.is_some()
    }

    pub(super) fn want_lowat(&self) -> u32 {
        self.cursor.saturating_add(1).min(i32::MAX as usize) as u32
    }

    /// Sets the armed mark to exactly cursor + 1 (after seek and consume).
    pub(super) fn follow_lowat(&mut self) -> io::Result<()> {
        let want = self.want_lowat();
        match self.lowat {
            Some(l) if l.requested != want => self.request_lowat(want),
            _ => Ok(()),
        }
    }

    /// Raises the armed mark to cursor + 1 if it is below (after a peek found nothing).
    pub(super) fn raise_lowat(&mut self) -> io::Result<()> {
        let want = self.want_lowat();
        match self.lowat {
            Some(l) if l.requested < want => self.request_lowat(want),
            _ => Ok(()),
        }
    }

    pub(super) fn lower_lowat_to_one(&mut self) -> io::Result<()> {
        match self.lowat {
            Some(l) if l.requested > 1 => self.request_lowat(1),
            _ => Ok(()),
        }
    }

    pub(super) fn request_lowat(&mut self, v: u32) -> io::Result<()> {
        self.set_rcvlowat(v as c_int)?;
        self.stats.rcvlowat_updates += 1;
        if let Some(l) = self.lowat.as_mut() {
            l.requested = v;
        }
        Ok(())
    }

    pub(super) fn set_rcvlowat(&mut self, v: c_int) -> io::Result<()> {
        self.stats.syscalls += 1;
        sys::setsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)
    }
}
