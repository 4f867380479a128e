//! lowcopy: Linux socket primitives that stop network daemons from copying bytes and waking
//! up for nothing.
//!
//! - [`peek`]: read received stream data at an offset without consuming it (`SO_PEEK_OFF`,
//!   with a discard-prefix fallback), and a [`Peeker`] cursor for user-mode network stacks
//!   that keep unacknowledged data in the kernel.
//! - [`zc`]: zerocopy send with a user argument: every send carries a 64-bit `user_data` that
//!   comes back in exactly one [`Completion`] when its buffers may be reused
//!   ([`ZeroCopySender`] over the error queue, io_uring `SEND_ZC`, or plain copies).
//! - [`lowat`]: low-water-mark receive: [`set_rcvlowat`], [`recv_atleast`] and the stateful
//!   [`Receiver`] (one wakeup for `min` bytes, `SO_RCVLOWAT` + poll, without the
//!   blocking-recv trap).
//! - [`zcrx`]: zero-copy TCP receive ([`ZeroCopyReceiver`]: `mmap` + `TCP_ZEROCOPY_RECEIVE`,
//!   with a copy path for every byte that cannot be mapped).
//! - [`probe()`]: what the running kernel offers, found by trying.
//! - [`wait`]: sleeping on a socket without spinning on its error queue, abortable from
//!   another thread ([`Waiter`], [`AbortHandle`], [`wait_beyond`]): the waits lowcopy's own
//!   calls make, for code that waits elsewhere (a binding's worker thread).
//! - [`recv_buffer_len`]: how large a fresh buffer for one receive needs to be (what the socket
//!   can hold), for code that allocates a receive's result from a caller's size (the bindings).
//!
//! The same primitives are the C ABI (`liblowcopy.so.0`, `include/lowcopy.h`) and the Python
//! and Node packages: they are thin adapters over this crate, and every behaviour documented
//! here is theirs too.
//!
//! # Conventions
//!
//! - **Descriptors.** Each handle ([`Peeker`], [`ZeroCopySender`], [`Receiver`],
//!   [`ZeroCopyReceiver`]) is generic over the descriptor it holds, `F: AsFd`: a
//!   [`BorrowedFd`](std::os::fd::BorrowedFd), an [`OwnedFd`](std::os::fd::OwnedFd), a
//!   `&TcpStream`, a `TcpStream`... It implements [`AsFd`](std::os::fd::AsFd) itself, and
//!   has `get_ref()` and `into_inner()`. Dropping a handle first restores what it changed on
//!   the socket (socket options, mappings), then drops `F`: lowcopy closes a socket only when
//!   it was given an owned one. Free functions take `impl AsFd`.
//! - **Blocking.** Calls block as the descriptor's `O_NONBLOCK` says, unless given
//!   [`Flags::DONTWAIT`] (peeks, consumes, sends, zero-copy receives); where a call has a
//!   time limit it is an `Option<Duration>` (`None`: no limit; `Some(Duration::ZERO)`: just
//!   look).
//! - **Errors.** Every error is a [`std::io::Error`] that keeps the kernel's errno
//!   (`raw_os_error()`): lowcopy's own refusals use errno values too (`EINVAL`, `EOVERFLOW`,
//!   `EBUSY`...), so the C, Python and Node bindings report the same code. Each call's
//!   `# Errors` section says which and when.
//! - **Threads.** Handles are `Send` (and `Sync`) when `F` is; their methods that change
//!   state take `&mut self`. A [`ZeroCopySender`] on io_uring belongs to the first thread that
//!   sends, waits or asks for its completion fd, and shares that thread's one ring with the
//!   thread's other senders ([`zc`] module: "The shared ring").
//! - **`unsafe`.** The only `unsafe fn`s are the `*_raw` entry points that take raw memory
//!   (iovecs, a `msghdr`, a pointer and length) for the C ABI; their `# Safety` sections are
//!   about memory only.
//!
//! # Example
//!
//! A relay's two halves on loopback: peek what arrived without consuming it, send it with a
//! zerocopy completion, and consume it once the completion says the bytes are out.
//!
//! ```
//! use std::io::{IoSlice, IoSliceMut, Read, Write};
//! use std::net::{TcpListener, TcpStream};
//! use std::time::Duration;
//! use lowcopy::{Completion, Flags, PeekMode, Peeker, ZeroCopySender};
//!
//! let pair = || -> std::io::Result<(TcpStream, TcpStream)> {
//!     let l = TcpListener::bind("127.0.0.1:0")?;
//!     let c = TcpStream::connect(l.local_addr()?)?;
//!     Ok((c, l.accept()?.0))
//! };
//! let (mut client, inbound) = pair()?;
//! let (outbound, mut server) = pair()?;
//!
//! client.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
//! let mut peeker = Peeker::new(&inbound, PeekMode::Auto)?;
//! let mut zc = ZeroCopySender::new(&outbound)?;
//!
//! let mut buf = [0u8; 64];
//! let n = peeker.peek(&mut [IoSliceMut::new(&mut buf)], Flags::NONE)?;
//! assert_eq!(zc.send(buf[..n].to_vec(), Flags::NONE, 1)?, n); // the sender owns the copy
//!
//! let mut got = vec![0u8; n];
//! server.read_exact(&mut got)?;
//! assert_eq!(&got, b"GET / HTTP/1.0\r\n\r\n");
//!
//! let mut done = [Completion::default(); 1];
//! while zc.reap(&mut done)? == 0 {
//!     zc.wait(Some(Duration::from_secs(5)))?;
//! }
//! assert_eq!(done[0].user_data, 1);
//! assert_eq!(peeker.consume(n)?, n); // now drop it from the inbound queue
//! assert_eq!(peeker.offset(), 0);
//! # Ok::<(), std::io::Error>(())
//! ```

#![cfg_attr(not(feature = "std"), no_std)]
// Without std only the peek engine is built: what else sys.rs holds is left unused.
#![cfg_attr(not(feature = "std"), allow(dead_code))]
#![deny(missing_docs, missing_debug_implementations)]
#![deny(clippy::missing_errors_doc, clippy::missing_safety_doc)]

mod compat;
mod errno;
mod flags;
#[cfg(feature = "std")]
pub mod lowat;
pub mod peek;
#[cfg(feature = "std")]
pub mod probe;
#[cfg(feature = "std")]
mod recvlen;
mod sys;
#[doc(hidden)]
/// For the C ABI crates only: not part of the API.
pub mod __private {
    /// The descriptor type and errors the `no_std` build's API takes (std's own with std).
    pub use crate::compat::{io, BorrowedFd};
    #[cfg(feature = "std")]
    pub use crate::sys::CancelOff;
}
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "std")]
pub mod wait;
#[cfg(feature = "std")]
pub mod zc;
#[cfg(feature = "std")]
pub mod zcrx;

pub use errno::errno_name;
pub use flags::Flags;
#[cfg(feature = "std")]
pub use lowat::{
    recv_atleast, recv_atleast_abortable, recv_atleast_with_stats, set_rcvlowat, Receiver,
    RecvStats,
};
pub use peek::{
    consume, peek_supported, PeekMode, PeekResult, PeekStats, Peeker, PeekerOptions, StreamKind,
    Urgent,
};
#[cfg(feature = "std")]
pub use peek::{peek_at, peek_at_abortable};
#[cfg(feature = "std")]
pub use probe::{probe, Caps};
#[cfg(feature = "std")]
pub use recvlen::{recv_buffer_len, RECV_BUFFER_FLOOR};
#[cfg(feature = "std")]
pub use wait::{wait_beyond, AbortHandle, Interest, Waiter, Wakeup};
#[cfg(feature = "std")]
pub use zc::{Batch, Completion, ZcBackend, ZcOptions, ZcStats, ZeroCopySender};

/// Internals for fuzz/ (cargo feature `fuzzing`, test-only).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use zc::fuzzing;
#[cfg(feature = "std")]
pub use zcrx::{Chunk, ZcrxStats, ZeroCopyReceiver};

/// `IOV_MAX`: the most iovecs one call takes.
pub const IOV_MAX: usize = sys::IOV_MAX;

/// The Rust code blocks of the repository's README (core/README.md links to it, and the
/// packaged crate carries it), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The Rust code blocks of docs/*.md, the same way (only compiled for doctests: the packaged
/// crate, which has no docs/, never evaluates these paths). scripts/doc_examples.py runs the
/// other languages' blocks and counts these.
#[cfg(doctest)]
#[doc = include_str!("../../docs/rust.md")]
struct DocsRustDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/c.md")]
struct DocsCDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/python.md")]
struct DocsPythonDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/node.md")]
struct DocsNodeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/abi.md")]
struct DocsAbiDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/kernel.md")]
struct DocsKernelDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/benchmarks.md")]
struct DocsBenchmarksDoctests;

#[cfg(test)]
mod tests {
    use std::os::fd::{BorrowedFd, OwnedFd};

    /// What the bindings rely on: a handle holding its own descriptor can move between
    /// threads and be shared behind a lock.
    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Peeker<OwnedFd>>();
        check::<crate::ZeroCopySender<OwnedFd>>();
        check::<crate::Receiver<OwnedFd>>();
        check::<crate::ZeroCopyReceiver<OwnedFd>>();
        check::<crate::ZeroCopyReceiver<BorrowedFd<'static>>>();
        check::<crate::Flags>();
    }
}
