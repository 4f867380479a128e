//! What the peek engine takes from the standard library, or the same names without it.
//!
//! With the cargo feature `std` (the default) these are std's own: `io::Error`,
//! `io::Result`, `AsFd`, `BorrowedFd`, and the engine's API is exactly std's. Without it (the
//! `no_std` build of the peek engine, for `capi/peek`'s `liblowcopy_peek.a`) they are the
//! small types below with the methods the engine uses: an error is its errno, a descriptor a
//! plain `c_int` borrowed for a lifetime. One source for both builds: the engine's code
//! names `io::Error` and `BorrowedFd` and compiles against either.

#[cfg(feature = "std")]
pub use std::io;
#[cfg(feature = "std")]
pub use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

#[cfg(not(feature = "std"))]
pub use nostd::*;

#[cfg(not(feature = "std"))]
mod nostd {
    use core::marker::PhantomData;

    use libc::c_int;

    /// A file descriptor number.
    pub type RawFd = c_int;

    /// Errors as their errno (the `no_std` build of [`std::io`]'s two names the engine uses).
    pub mod io {
        use libc::c_int;

        /// An errno.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Error(c_int);

        /// A result with an errno.
        pub type Result<T> = core::result::Result<T, Error>;

        impl Error {
            /// The error of errno `code`.
            pub fn from_raw_os_error(code: c_int) -> Error {
                Error(code)
            }

            /// The calling thread's errno, as the failed call left it.
            pub fn last_os_error() -> Error {
                // SAFETY: glibc's and musl's errno location is the calling thread's, always
                // valid.
                Error(unsafe { *libc::__errno_location() })
            }

            /// The errno (always `Some`, as std's for an OS error).
            pub fn raw_os_error(&self) -> Option<c_int> {
                Some(self.0)
            }
        }
    }

    /// A descriptor borrowed for `'fd` (std's `BorrowedFd` without std).
    #[derive(Clone, Copy, Debug)]
    pub struct BorrowedFd<'fd> {
        fd: RawFd,
        _life: PhantomData<&'fd ()>,
    }

    impl BorrowedFd<'_> {
        /// Borrows `fd`.
        ///
        /// # Safety
        /// `fd` must stay open for the borrow's lifetime.
        pub const unsafe fn borrow_raw(fd: RawFd) -> Self {
            BorrowedFd {
                fd,
                _life: PhantomData,
            }
        }
    }

    /// Borrows a descriptor (std's `AsFd`).
    pub trait AsFd {
        /// The descriptor, borrowed.
        fn as_fd(&self) -> BorrowedFd<'_>;
    }

    impl AsFd for BorrowedFd<'_> {
        fn as_fd(&self) -> BorrowedFd<'_> {
            *self
        }
    }

    impl<T: AsFd + ?Sized> AsFd for &T {
        fn as_fd(&self) -> BorrowedFd<'_> {
            (**self).as_fd()
        }
    }

    /// A descriptor's number (std's `AsRawFd`).
    pub trait AsRawFd {
        /// The number.
        fn as_raw_fd(&self) -> RawFd;
    }

    impl AsRawFd for BorrowedFd<'_> {
        fn as_raw_fd(&self) -> RawFd {
            self.fd
        }
    }
}
