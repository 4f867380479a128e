//! A sender for a socket that another event loop polls level-triggered.

use std::os::fd::OwnedFd;

use super::*;

impl ZeroCopySender<OwnedFd> {
    /// [`ZeroCopySender::with_options`] for a socket that another event loop also polls,
    /// level-triggered (libuv's, for a Node `net.Socket`): the error queue's notifications
    /// keep `EPOLLERR` up until reaped and would wake that loop again and again, so the error
    /// queue is never used. AUTO tries io_uring, else copies; an explicit `ErrQueue` is
    /// `EINVAL`; other backends as [`ZeroCopySender::with_options`].
    ///
    /// # Errors
    /// As [`ZeroCopySender::with_options`] (for AUTO, the copy backend's); `EINVAL` for
    /// `ErrQueue`; `EMFILE` when the descriptor cannot be duplicated for the second try.
    pub fn with_options_polled(fd: OwnedFd, opts: ZcOptions) -> io::Result<Self> {
        match opts.backend {
            ZcBackend::ErrQueue => Err(errno(libc::EINVAL)),
            ZcBackend::Auto => {
                let again = fd.try_clone()?;
                Self::with_options(fd, opts.backend(ZcBackend::IoUring))
                    .or_else(|_| Self::with_options(again, opts.backend(ZcBackend::Copy)))
            }
            _ => Self::with_options(fd, opts),
        }
    }
}
