//! lowcopy: Linux socket primitives that stop network daemons from copying bytes and waking
//! up for nothing.
//!
//! - [`peek`]: read received stream data at an offset without consuming it (`SO_PEEK_OFF`,
//!   with a discard-prefix fallback), and a [`Peeker`] cursor for user-mode network stacks.
//! - [`zc`]: zerocopy send with a user argument: every send carries a 64-bit `user_data` that
//!   comes back in exactly one [`Completion`] when its buffers may be reused
//!   ([`ZeroCopySender`] over the error queue, io_uring `SEND_ZC`, or plain copies).
//! - [`lowat`]: low-water-mark receive: [`set_rcvlowat`] and [`recv_atleast`] (one wakeup
//!   for `min` bytes, `SO_RCVLOWAT` + poll, without the blocking-recv trap).
//! - [`zcrx`]: zero-copy TCP receive ([`ZeroCopyReceiver`]: `mmap` + `TCP_ZEROCOPY_RECEIVE`,
//!   with a copy path for every byte that cannot be mapped).
//! - [`probe()`]: what the running kernel offers, found by trying.
//!
//! Sockets are borrowed ([`std::os::fd::BorrowedFd`]); lowcopy never closes them. Errors are
//! [`std::io::Error`]s that keep the kernel's errno (`raw_os_error()`), so the C, Python and
//! Node bindings report the same `-errno`.

#![deny(missing_docs, missing_debug_implementations)]

mod flags;
pub mod lowat;
pub mod peek;
pub mod probe;
mod sys;
mod wait;
pub mod zc;
pub mod zcrx;

pub use flags::Flags;
pub use lowat::{recv_atleast, recv_atleast_with_stats, set_rcvlowat, RecvStats};
pub use peek::{consume, peek_at, peek_supported, PeekMode, PeekStats, Peeker};
pub use probe::{probe, Caps};
pub use zc::{Completion, ZcBackend, ZcOptions, ZcStats, ZeroCopySender};
pub use zcrx::{Chunk, ZcrxStats, ZeroCopyReceiver};

/// `IOV_MAX`: the most iovecs one call takes.
pub const IOV_MAX: usize = sys::IOV_MAX;
