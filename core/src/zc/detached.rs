//! A sender's wait for completions, made on another thread than the sender's own.

use std::os::fd::OwnedFd;

use super::*;
use crate::wait::{AbortHandle, Interest, Wakeup};

/// What [`ZeroCopySender::detached_wait`] hands to a waiting thread: the sender's completion
/// descriptor (a duplicate) and how to wait on it, so that a binding's thread pool or event
/// loop sleeps off the sender's thread while the sender stays with it (an io_uring sender
/// belongs to its thread). After [`Wakeup::Ready`] the sender's thread calls
/// [`ZeroCopySender::wait`] with a zero timeout for the count ready (a wake-up is not a
/// promise: it may find none).
#[derive(Debug)]
pub struct DetachedWait {
    fd: OwnedFd,
    interest: Interest,
    /// Nothing can come: no send in flight, or the copy backend (completions are ready at
    /// the send).
    nothing: bool,
}

impl<F: AsFd, B: ZcBuf> ZeroCopySender<F, B> {
    /// A wait for this sender's completions that another thread can make ([`DetachedWait`]).
    ///
    /// # Errors
    /// `EMFILE` (no descriptor for the duplicate).
    pub fn detached_wait(&self) -> io::Result<DetachedWait> {
        Ok(DetachedWait {
            fd: self.completion_fd().try_clone_to_owned()?,
            interest: if self.backend() == ZcBackend::IoUring {
                Interest::Readable // the ring's eventfd
            } else {
                Interest::Errors // the socket's error queue
            },
            nothing: self.inflight() == 0 || self.backend() == ZcBackend::Copy,
        })
    }
}

impl DetachedWait {
    /// Sleeps until a completion may be ready, `abort` fires or `timeout` passes (`None`: no
    /// limit); [`Wakeup::Ready`] at once when nothing was in flight.
    ///
    /// # Errors
    /// The wait's own (`poll`, `epoll_wait`).
    pub fn wait(
        &self,
        abort: Option<&AbortHandle>,
        timeout: Option<Duration>,
    ) -> io::Result<Wakeup> {
        if self.nothing {
            return Ok(Wakeup::Ready);
        }
        Waiter::new().wait_ready(&self.fd, self.interest, abort, timeout)
    }
}
