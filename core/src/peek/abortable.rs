//! Peeks that wait off an event loop's thread and that another thread can end: what a
//! binding's thread pool runs for an async peek (Node's `peekAsync`/`peekAtAsync`), written
//! once here rather than as a loop in each binding.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use super::{peek_at, Peeker};
use crate::sys::errno;
use crate::wait::{wait_beyond, AbortHandle, Wakeup};
use crate::Flags;

impl<F: AsFd> Peeker<F> {
    /// Peeks at the cursor, waiting until a byte lies beyond it, at most `timeout` (`None`: no
    /// limit), or until `abort` is aborted from another thread.
    ///
    /// Each round is a non-blocking peek, then, when it finds nothing (`EAGAIN`), a sleep in an
    /// edge-triggered epoll of the socket beside the abort handle's eventfd until the queue
    /// holds more than the offset, the peer ends, or the time runs out ([`wait_beyond`]); the
    /// socket's own `SO_RCVTIMEO` and `O_NONBLOCK` do not count. Returns what the peek returns:
    /// the bytes copied, 0 at end of stream after the offset.
    ///
    /// # Errors
    /// `ETIMEDOUT` when the time ran out with nothing beyond the offset; `ECANCELED` once the
    /// handle is aborted (checked before every peek: an aborted handle ends the call without
    /// peeking); the peek's and the wait's errors.
    pub fn peek_abortable(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        abort: &AbortHandle,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if abort.is_aborted() {
                return Err(errno(libc::ECANCELED));
            }
            match self.peek(bufs, Flags::DONTWAIT) {
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                r => return r,
            }
            let offset = self.offset();
            wait_round(self.as_fd(), offset, abort, deadline)?;
        }
    }
}

/// [`peek_at`] that waits as [`Peeker::peek_abortable`] does, on the socket's bytes beyond
/// `offset`.
///
/// # Errors
/// As [`Peeker::peek_abortable`].
pub fn peek_at_abortable(
    fd: impl AsFd,
    offset: usize,
    bufs: &mut [IoSliceMut<'_>],
    abort: &AbortHandle,
    timeout: Option<Duration>,
) -> io::Result<usize> {
    let fd = fd.as_fd();
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if abort.is_aborted() {
            return Err(errno(libc::ECANCELED));
        }
        match peek_at(fd, offset, bufs, Flags::DONTWAIT) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            r => return r,
        }
        wait_round(fd, offset, abort, deadline)?;
    }
}

/// One sleep until a byte lies beyond `offset`: `Ok` to peek again.
fn wait_round(
    fd: BorrowedFd<'_>,
    offset: usize,
    abort: &AbortHandle,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    match wait_beyond(fd, offset, Some(abort), left)? {
        Wakeup::Aborted => Err(errno(libc::ECANCELED)),
        Wakeup::TimedOut => Err(errno(libc::ETIMEDOUT)),
        _ => Ok(()),
    }
}
