//! Zerocopy send with a user argument: every send carries the caller's 64-bit `user_data`,
//! and exactly one [`Completion`] with that value comes back when the kernel no longer
//! needs the send's buffer, whichever backend did the work.
//!
//! Backends ([`ZcBackend`]):
//! - `ErrQueue`: `SO_ZEROCOPY` + `MSG_ZEROCOPY` (Linux 4.14 TCP, 5.0 UDP). The kernel numbers
//!   each zerocopy send with a per-socket u32 counter and reports inclusive, coalesced,
//!   possibly out-of-order ranges of those numbers on the socket's error queue
//!   (Documentation/networking/msg_zerocopy.rst); an internal tracker maps them back.
//!   This is what the never-merged MSG_ZEROCOPY_UARG / SCM_ZC_NOTIFICATION proposal (2024)
//!   wanted the kernel to do.
//! - `IoUring`: `IORING_OP_SEND_ZC` / `SENDMSG_ZC` (6.0 / 6.1), whose notification CQE carries
//!   the request's own user_data. One ring per thread serves every sender used on that thread
//!   (see "The shared ring" below). With `IORING_SETUP_DEFER_TASKRUN` notifications are posted
//!   while the next send enters the ring (no syscall of their own) and never interrupt the
//!   thread's other syscalls; a sender belongs to the first thread that sends, waits or asks
//!   for its [`completion_fd`](ZeroCopySender::completion_fd) (`EEXIST` elsewhere).
//! - `Copy`: a plain `sendmsg`; the completion is ready when the send returns.
//!
//! A notification means "the buffer may be reused", not "the data was delivered": TCP
//! notifies only after the peer acknowledged, so never block a send on completions.
//!
//! # Memory: it follows the sends held
//!
//! The kernel keeps no per-send state until a send happens, and neither does a sender beyond a
//! small reserve. A sender tracks each request it holds (in flight, or completed and not yet
//! reaped) in a table that starts with room for [`ZcOptions::reserve`] requests
//! ([`DEFAULT_RESERVE`] = 16), grows by doubling while more are held, up to
//! [`ZcOptions::max_pending`] ([`MAX_PENDING`] = 4096; past it a send is `EBUSY`), and goes back
//! to the reserve as soon as the sender holds nothing (an error-queue sender whose tables grew
//! goes back to room for [`REAP_EVERY`] requests if that is more: `send_reap` holds that many
//! between two reads of the error queue, and shrinking below it made a sender that keeps
//! sending reallocate and copy its tables every 32 sends; 1.5 KiB of tables by default). A
//! request is one 32-byte slot, which
//! also links it into the free list or the ready queue (a send touches one slot of the
//! table: with thousands of senders on a thread, every line touched is a cache miss); a
//! quarter more slots are kept for failed io_uring requests whose notification is still to
//! come; the error-queue backend adds a window of two 4-byte zerocopy ids per request,
//! rounded up to a power of two. Exactly, for the default reserve: 640 bytes of slots (768
//! with the error queue's ids); an idle sender is those and the sender itself (344 bytes),
//! and an io_uring sender that joined a ring also has its 64-byte route there with room for
//! 12 parked notifications (48 bytes): about 1.1 KiB in all on every backend. Nothing is
//! allocated or freed while the requests held fit the reserve: a caller that must not
//! allocate after setup sets `reserve` to `max_pending` (1024 requests: 40 KiB, 48 KiB with
//! the error queue) and joins the ring during setup (an io_uring sender joins at its first
//! send, wait or [`completion_fd`](ZeroCopySender::completion_fd); the thread's first sender
//! makes the ring). The error-queue backend reads notifications into a buffer on the stack
//! (5 KiB); the copy backend needs nothing more.
//!
//! # The shared ring
//!
//! io_uring is meant to be used with one ring serving many sockets; a ring per sender
//! multiplied its memory (130 KiB), its locked pages and its descriptor by the connection
//! count. Each thread has one ring ([`RING_CQ_ENTRIES`] completion entries, set once for the
//! thread), made the first time a sender is created or used there and kept until the thread
//! exits (longer if a sender bound to it outlives the thread). A sender owns no descriptor: it
//! joins the ring of the first thread that uses it, and its requests carry its route on that
//! ring and its request slot in their user_data. An event loop watches the ring's eventfd
//! ([`ZeroCopySender::completion_fd`], made on the thread's first call: a second descriptor
//! per thread). Whoever drains the ring's completions hands
//! each sender's notifications to that sender, at once if it is the caller, else through a
//! small inbox (4 bytes per notification) that the sender empties when it next collects. The
//! ring outlives its senders: a sender dropped with sends in flight leaves the kernel to
//! finish them (the pages stay pinned until then: memory safe), and their notifications are
//! counted off and dropped, never delivered to a later sender (the route is reused only after
//! the last one came, with a new generation number).

mod buf;
mod tracker;
mod uring;

use std::fmt;
use std::io::{self, IoSlice};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libc::{c_int, iovec, msghdr};

use crate::sys::{self, errno, getsockopt_int, poll_one, setsockopt_int, IOV_MAX};
use crate::wait::Waiter;
use crate::Flags;
pub use buf::{Owned, SendError, Slice, ZcBuf};
pub use tracker::{Completion, COPIED, FALLBACK};
use tracker::{SlotId, Tracker};
pub use uring::{RING_CQ_ENTRIES, RING_SQ_ENTRIES};

/// The completion tracker, for fuzz/ only (cargo feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use super::tracker::{RangeOutcome, SlotId, Tracker};
}

/// Which mechanism sends (`LOWCOPY_ZC_*` in C).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u32)]
pub enum ZcBackend {
    // doc-source: zc_backend.auto
    /// io_uring `SEND_ZC` where it works on this socket, else `MSG_ZEROCOPY` with the error
    /// queue where `SO_ZEROCOPY` works, else plain copies. Sockets with no zerocopy at all
    /// (AF_UNIX, MPTCP) get the copy backend. With io_uring the sender belongs to the first
    /// thread that sends: a daemon that hands a connection to another thread mid-stream should
    /// choose the error queue.
    // doc-end
    #[default]
    Auto = 0,
    // doc-source: zc_backend.errqueue
    /// `SO_ZEROCOPY` + `MSG_ZEROCOPY` (TCP since Linux 4.14, UDP since 5.0); completions read
    /// from `MSG_ERRQUEUE` and mapped from the kernel's 32-bit id ranges back to user_data. The
    /// sender owns the socket's error queue: other entries on it (ICMP errors with
    /// `IP_RECVERR`, `SO_TIMESTAMPING` reports) are read, counted in `errqueue_other` and
    /// dropped, and reading an ICMP entry also clears the `SO_ERROR` it set (net/core/skbuff.c
    /// `sock_dequeue_err_skb`). An application that needs those entries should use io_uring,
    /// whose notifications do not go through the error queue.
    // doc-end
    ErrQueue = 1,
    // doc-source: zc_backend.iouring
    /// io_uring `IORING_OP_SEND_ZC` (Linux 6.0) / `SENDMSG_ZC` (6.1); user_data comes back in
    /// the notification CQE. One ring per thread serves every sender used on that thread (8192
    /// completion entries, made with the thread's first sender, kept until the thread exits): a
    /// sender owns no descriptor. The ring is set up with `IORING_SETUP_DEFER_TASKRUN` (6.1) so
    /// that notifications never interrupt the thread's other syscalls with `EINTR`; they are
    /// posted during the next send (no syscall of their own). Its price, `SINGLE_ISSUER`: a
    /// sender belongs to the first thread that sends on it, waits on it or asks for its
    /// completion descriptor (it joins that thread's ring), and calls from any other thread
    /// fail with `EEXIST`.
    // doc-end
    IoUring = 2,
    // doc-source: zc_backend.copy
    /// Plain copying `sendmsg`; the completion is ready when the send returns.
    // doc-end
    Copy = 3,
}

impl TryFrom<u32> for ZcBackend {
    type Error = io::Error;
    /// Unknown values are `EINVAL`.
    fn try_from(v: u32) -> io::Result<Self> {
        match v {
            0 => Ok(Self::Auto),
            1 => Ok(Self::ErrQueue),
            2 => Ok(Self::IoUring),
            3 => Ok(Self::Copy),
            _ => Err(errno(libc::EINVAL)),
        }
    }
}

/// How a [`ZeroCopySender`] is set up: its backend, whether it turns zerocopy off when the
/// kernel copies anyway, and the requests its tables hold. `Default`: [`ZcBackend::Auto`], not
/// adaptive, a reserve of [`DEFAULT_RESERVE`] and a limit of [`MAX_PENDING`] requests.
///
/// ```
/// use lowcopy::{ZcBackend, ZcOptions};
///
/// let opts = ZcOptions::new().backend(ZcBackend::ErrQueue).adaptive(true);
/// assert_eq!((opts.backend, opts.adaptive), (ZcBackend::ErrQueue, true));
/// assert_eq!(ZcOptions::from_raw(1, lowcopy::zc::ADAPTIVE).unwrap(), opts);
/// // A daemon that allocates nothing after setup: room for 256 requests, made now.
/// let fixed = ZcOptions::new().reserve(256).max_pending(256);
/// assert_eq!((fixed.reserve, fixed.max_pending), (256, 256));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZcOptions {
    /// The mechanism that sends ([`ZcBackend::Auto`] picks one).
    pub backend: ZcBackend,
    // doc-source: zc_options.adaptive
    /// Stop asking for zerocopy after 16 consecutive completions that the kernel copied anyway
    /// (loopback, veth, devices without scatter-gather), the way msg_zerocopy.rst suggests: a
    /// copied "zerocopy" send costs more than a plain copy. Sends in flight are still reaped;
    /// later sends are plain copies whose completion is ready at once, flagged copied and
    /// fallback.
    // doc-end
    pub adaptive: bool,
    /// Requests (sends held in flight or completed and not yet reaped) whose tracking is
    /// allocated when the sender is created and kept for its life: 32 bytes each plus a
    /// quarter, and 8 more each for the error queue's ids (see the module documentation). While the
    /// sender holds no more than this, nothing is allocated or freed; beyond, its tables grow, and
    /// they shrink back to this once it holds nothing. 0 to `max_pending`; [`DEFAULT_RESERVE`] by
    /// default.
    pub reserve: usize,
    /// Requests held at once at most: a send beyond it is `EBUSY` until completions are
    /// reaped. 1 to [`PENDING_LIMIT`]; [`MAX_PENDING`] by default. Also bounds the error-queue
    /// backend's window of zerocopy ids in flight (twice this, rounded up to a power of two).
    pub max_pending: usize,
    /// How long closing the sender waits for the completions of sends in flight before it
    /// resets a stream connection (see [`ZeroCopySender::close`]); [`DEFAULT_CLOSE_TIMEOUT`]
    /// by default.
    pub close_timeout: Duration,
}

impl Default for ZcOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ZcOptions {
    /// The defaults: [`ZcBackend::Auto`], not adaptive, [`DEFAULT_RESERVE`],
    /// [`MAX_PENDING`].
    pub const fn new() -> Self {
        ZcOptions {
            backend: ZcBackend::Auto,
            adaptive: false,
            reserve: DEFAULT_RESERVE,
            max_pending: MAX_PENDING,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
        }
    }

    /// These options with [`ZcOptions::close_timeout`] set to `timeout`.
    pub const fn close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// These options with [`ZcOptions::reserve`] set to `requests`.
    pub const fn reserve(mut self, requests: usize) -> Self {
        self.reserve = requests;
        self
    }

    /// These options with [`ZcOptions::max_pending`] set to `requests`.
    pub const fn max_pending(mut self, requests: usize) -> Self {
        self.max_pending = requests;
        self
    }

    /// `EINVAL` unless `reserve <= max_pending` and `max_pending` is 1 to [`PENDING_LIMIT`].
    fn check(&self) -> io::Result<()> {
        if self.max_pending == 0
            || self.max_pending > PENDING_LIMIT
            || self.reserve > self.max_pending
        {
            return Err(errno(libc::EINVAL));
        }
        Ok(())
    }

    /// These options with `backend`.
    pub const fn backend(mut self, backend: ZcBackend) -> Self {
        self.backend = backend;
        self
    }

    /// These options with [`ZcOptions::adaptive`] set to `on`.
    pub const fn adaptive(mut self, on: bool) -> Self {
        self.adaptive = on;
        self
    }

    /// The options from the C ABI's numbers: a backend value (`ZcBackend as u32`) and a flags
    /// word of [`ADAPTIVE`].
    ///
    /// # Errors
    /// `EINVAL` for an unknown backend or flag bit.
    pub fn from_raw(backend: u32, flags: u32) -> io::Result<Self> {
        if flags & !ADAPTIVE != 0 {
            return Err(errno(libc::EINVAL));
        }
        Ok(ZcOptions::new()
            .backend(ZcBackend::try_from(backend)?)
            .adaptive(flags & ADAPTIVE != 0))
    }
}

/// The flag bit of [`ZcOptions::adaptive`] in the C ABI's flags word (`LOWCOPY_ZC_ADAPTIVE`);
/// see [`ZcOptions::from_raw`].
pub const ADAPTIVE: u32 = 1;
/// Consecutive copied completions after which [`ZcOptions::adaptive`] stops asking for
/// zerocopy.
pub const ADAPTIVE_AFTER: u32 = 16;
/// The default [`ZcOptions::max_pending`]: requests that may be held at once (in flight or
/// ready but not yet reaped).
pub const MAX_PENDING: usize = 4096;
/// The default [`ZcOptions::reserve`]: requests a sender keeps room for when idle (a typical
/// connection's sends in flight): 640 bytes of tables, 768 with the error queue.
pub const DEFAULT_RESERVE: usize = 16;
/// The default [`ZcOptions::close_timeout`].
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long closing waits, after it reset a connection, for the completions that follow (the
/// kernel frees the purged queues at once; a device may still hold some packets briefly).
pub const RESET_WAIT: Duration = Duration::from_secs(1);
/// The largest [`ZcOptions::max_pending`].
pub const PENDING_LIMIT: usize = 1 << 20;
/// Zerocopy ids (error-queue backend) that may be in flight at once at the default
/// [`MAX_PENDING`] (twice `max_pending`, rounded up to a power of two); past that, sends fall
/// back to copies until completions arrive.
pub const MAX_IDS: usize = 8192;
/// `send_reap` reads the error queue at most once per this many sends (sooner when the
/// tracking table runs low). At 32, as the kernel's msg_zerocopy selftest's best (-l 32),
/// the read costs about 0.5% of a 64 KiB UDP send; at 8 it cost 2-3% more throughput on a
/// path with real zerocopy (examples/c/zc_bench.c, tx-only). Completions then come back up to
/// 32 sends late: call `reap` for them sooner.
pub const REAP_EVERY: u32 = 32;
/// Error-queue messages read per `recvmmsg`.
const ERRQ_BATCH: usize = 16;
/// Control buffer per error-queue message: a `sock_extended_err` plus the offender address
/// (44 bytes on IPv6) with room for a timestamp cmsg beside it.
const ERRQ_CONTROL: usize = 256;

/// Counters of a [`ZeroCopySender`]. Byte counts in bytes.
///
/// Shared with C as `lowcopy_zc_send_stats` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZcStats {
    // doc-source: zc_stats.sends
    /// Send calls that returned > 0.
    // doc-end
    pub sends: u64,
    // doc-source: zc_stats.bytes
    /// Bytes those sends accepted.
    // doc-end
    pub bytes: u64,
    // doc-source: zc_stats.zerocopy_sends
    /// Kernel sends that asked for zerocopy (`MSG_ZEROCOPY` or SEND_ZC).
    // doc-end
    pub zerocopy_sends: u64,
    // doc-source: zc_stats.copy_sends
    /// Kernel sends that copied (copy backend, fallbacks, adaptive mode).
    // doc-end
    pub copy_sends: u64,
    // doc-source: zc_stats.completions
    /// Completions handed to the caller.
    // doc-end
    pub completions: u64,
    // doc-source: zc_stats.completions_copied
    /// Of those, completions with the [`COPIED`] flag.
    // doc-end
    pub completions_copied: u64,
    // doc-source: zc_stats.enobufs
    /// `ENOBUFS` from error-queue zerocopy sends (optmem or locked-pages limit) and
    /// `ENOMEM` from io_uring ones (`RLIMIT_MEMLOCK`, for a thread without `CAP_IPC_LOCK`),
    /// each answered by a retry and then a copy; never returned to the caller.
    // doc-end
    pub enobufs: u64,
    // doc-source: zc_stats.window_full
    /// Sends that fell back to a copy because the id window was full (twice the sender's
    /// limit of requests held in flight: 8192 ids by default).
    // doc-end
    pub window_full: u64,
    // doc-source: zc_stats.syscalls_send
    /// Syscalls made to send (sendmsg, io_uring_enter for a send).
    // doc-end
    pub syscalls_send: u64,
    // doc-source: zc_stats.syscalls_reap
    /// Syscalls made to collect completions (error-queue reads, waits).
    // doc-end
    pub syscalls_reap: u64,
    // doc-source: zc_stats.errqueue_other
    /// Error-queue entries that were not zerocopy notifications (timestamps, ICMP): read and
    /// dropped.
    // doc-end
    pub errqueue_other: u64,
    // doc-source: zc_stats.unexpected_ids
    /// Notified ids that matched no send in flight: ignored.
    // doc-end
    pub unexpected_ids: u64,
    // doc-source: zc_stats.zerocopy_off
    /// 1 once [`ZcOptions::adaptive`] stopped asking for zerocopy.
    // doc-end
    pub zerocopy_off: u64,
    // doc-source: zc_stats.close_completed
    /// Completions that closing the sender took in (ready ones and those that arrived while it
    /// waited); see the close policy.
    // doc-end
    pub close_completed: u64,
    // doc-source: zc_stats.close_resets
    /// 1 when closing reset the connection because completions did not come in time.
    // doc-end
    pub close_resets: u64,
    // doc-source: zc_stats.close_abandoned
    /// Sends still in flight when closing gave up waiting: their memory stays in use by the
    /// kernel (an owned buffer is leaked, never freed; a borrowed one must stay valid for ever).
    // doc-end
    pub close_abandoned: u64,
}

enum Engine {
    ErrQueue,
    IoUring(Ring),
    Copy,
}

/// An io_uring sender's place in a thread's ring: joined at its first use (send, wait,
/// `completion_fd`), on that thread; an error there is kept (an AUTO sender then falls back).
struct Ring {
    joined: OnceLock<Result<uring::Binding, c_int>>,
    /// Picked by AUTO: may fall back to the error queue if no ring can be joined.
    auto: bool,
    /// Inbox room the route keeps (the sender's reserve).
    keep: usize,
}

impl Ring {
    fn new(auto: bool, keep: usize) -> Self {
        Ring {
            joined: OnceLock::new(),
            auto,
            keep,
        }
    }

    /// The ring joined, joining the calling thread's if none yet.
    fn join(&self) -> io::Result<&uring::Binding> {
        let r = self.joined.get_or_init(|| {
            uring::Binding::new(self.keep).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
        });
        r.as_ref().map_err(|&e| errno(e))
    }

    /// The ring joined, if any.
    fn joined(&self) -> Option<&uring::Binding> {
        self.joined.get().and_then(|r| r.as_ref().ok())
    }
}

/// Zerocopy sends over one socket, with per-send `user_data` completions.
///
/// The sender holds the socket as `F`: a [`BorrowedFd`], an [`OwnedFd`](std::os::fd::OwnedFd),
/// a `&TcpStream`, a `UdpSocket`, anything that implements [`AsFd`]; lowcopy closes it only by
/// dropping `F`.
// doc-source: zc.one_per_socket
/// Create one sender per socket, before any other `MSG_ZEROCOPY` send on it, and keep it for
/// the socket's life: the kernel's id counter cannot be read back, so on the error queue a
/// second sender on the same socket (after the first was closed, or in a forked child) never
/// matches its completions (they count as unexpected ids) and its sends stay in flight.
// doc-end
/// Not for concurrent use (methods take `&mut self`); distinct senders are independent. With [`ZcBackend::IoUring`] the sender
/// belongs to the first thread that sends on it, waits on it or asks for its
/// [`completion_fd`](ZeroCopySender::completion_fd): it joins that thread's ring (see the
/// module documentation), and calls from other threads fail with `EEXIST`. Any thread may
/// create it, ask for its `inflight`, `stats` and `backend`, reap it before it joined a ring,
/// and drop it.
///
// doc-source: zc.buffers
/// The memory of a send must stay allocated and unmodified until its completion is reaped: the
/// kernel may read it until then (a zerocopy send pins the pages and transmits from them, also
/// when TCP retransmits), so whatever the program writes there goes on the wire, and memory
/// freed and reused carries other data (heap contents, pointers) to the peer. A completion
/// means "the buffer may be reused", not "the data was delivered": TCP notifies only after the
/// peer acknowledged, so never block a send on completions.
// doc-end
/// So the safe sends take their buffer by value (any [`ZcBuf`]: `Vec<u8>` by default, see
/// [`ZeroCopySender::for_buffers`]) and hand it back with its completion
/// ([`ZeroCopySender::reap_with`]) or drop it then; only the `unsafe` `*_borrowed` and `*_raw`
/// forms borrow. Closing or dropping the sender follows the close policy
/// ([`ZeroCopySender::close`]).
///
/// ```
/// use std::io::Read;
/// use std::net::{TcpListener, TcpStream};
/// use std::time::Duration;
/// use lowcopy::{Completion, Flags, ZcBackend, ZcOptions, ZeroCopySender};
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let client = TcpStream::connect(listener.local_addr()?)?;
/// let (mut server, _) = listener.accept()?;
///
/// let mut zc = ZeroCopySender::with_options(&client, ZcOptions::new().backend(ZcBackend::Auto))?;
/// let payload = vec![7u8; 64 * 1024];
/// assert_eq!(zc.send(payload, Flags::NONE, 42)?, 65536); // the sender owns it now
///
/// let mut got = vec![0u8; 65536];
/// server.read_exact(&mut got)?; // loopback acknowledges what the peer receives
///
/// let mut done = [Completion::default(); 4];
/// let mut n = 0;
/// while n == 0 {
///     zc.wait(Some(Duration::from_secs(5)))?;
///     n = zc.reap(&mut done)?; // drops the buffer: the kernel is done with it
/// }
/// assert_eq!((done[0].user_data, done[0].result), (42, 65536));
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// Safe code cannot touch a buffer the kernel may still read. Changing it after the send does
/// not compile (the sender owns it):
///
/// ```compile_fail,E0382
/// # use std::net::{TcpListener, TcpStream};
/// # use lowcopy::{Flags, ZeroCopySender};
/// # let listener = TcpListener::bind("127.0.0.1:0").unwrap();
/// # let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
/// let mut zc = ZeroCopySender::new(&client).unwrap();
/// let mut v = vec![b'a'; 1 << 20];
/// zc.send(v, Flags::NONE, 1).unwrap();
/// v.fill(b'b');
/// ```
///
/// nor does sending a borrowed buffer that does not live for ever:
///
/// ```compile_fail,E0597
/// # use std::net::{TcpListener, TcpStream};
/// # use lowcopy::ZeroCopySender;
/// # use lowcopy::Flags;
/// # let listener = TcpListener::bind("127.0.0.1:0").unwrap();
/// # let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
/// let mut zc: ZeroCopySender<_, &'static [u8]> =
///     ZeroCopySender::for_buffers(&client, Default::default()).unwrap();
/// let v = vec![b'a'; 1 << 20];
/// zc.send(&v[..], Flags::NONE, 1).unwrap();
/// drop(v);
/// ```
///
/// and the borrowing form needs `unsafe`:
///
/// ```compile_fail,E0133
/// # use std::io::IoSlice;
/// # use std::net::{TcpListener, TcpStream};
/// # use lowcopy::{Flags, ZeroCopySender};
/// # let listener = TcpListener::bind("127.0.0.1:0").unwrap();
/// # let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
/// let mut zc = ZeroCopySender::new(&client).unwrap();
/// let v = vec![b'a'; 1 << 20];
/// zc.send_borrowed(&[IoSlice::new(&v)], Flags::NONE, 1).unwrap();
/// drop(v);
/// ```
pub struct ZeroCopySender<F: AsFd, B: ZcBuf = Vec<u8>> {
    fd: F,
    /// The buffers of owned sends, by request slot, until their completion is reaped.
    held: Vec<Option<Owned<B>>>,
    /// The close policy's bound on each of its waits.
    close_timeout: Duration,
    stream: bool,
    engine: Engine,
    tracker: Tracker,
    adaptive: Adaptive,
    sends_since_reap: u32,
    /// io_uring: the last request found the socket full; poll before queueing another.
    uring_full: bool,
    /// io_uring: waits for socket space that a non-empty error queue does not end.
    waiter: Waiter,
    stats: ZcStats,
    /// The close policy ran (close, into_inner): drop does not run it again.
    settled: bool,
}

impl<F: AsFd, B: ZcBuf> fmt::Debug for ZeroCopySender<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZeroCopySender")
            .field("fd", &self.fd.as_fd())
            .field("backend", &self.backend())
            .field("inflight", &self.inflight())
            .finish()
    }
}

impl<F: AsFd, B: ZcBuf> AsFd for ZeroCopySender<F, B> {
    /// The socket the sender sends on (see [`ZeroCopySender::completion_fd`] for the one to
    /// watch for completions).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Closes the calling thread's io_uring ring (see the module documentation) now rather than
/// when the thread exits, if no sender is joined to it: returns `true` when it was closed,
/// `false` when the thread had none.
// doc-source: close_thread_ring.kernel
/// The thread's next io_uring sender makes a new ring. Senders released with sends in flight
/// do not count: the kernel finishes those on its own (pages stay pinned until then). Closing
/// a ring makes the kernel run task work on this thread (io_uring/io_uring.c
/// `io_ring_exit_work`), so its next blocking syscall may return `EINTR` once.
// doc-end
///
/// # Errors
// doc-source: close_thread_ring.errors
/// `EBUSY` while a sender is joined to the ring (one that sent, waited or gave its completion
/// descriptor on this thread and is not yet released).
// doc-end
pub fn close_thread_ring() -> io::Result<bool> {
    uring::close_thread_ring()
}

/// Whether MSG_ZEROCOPY / SEND_ZC can apply: TCP or UDP over IPv4/IPv6 (net/core/sock.c
/// `SO_ZEROCOPY` check; io_uring needs the socket's SOCK_SUPPORT_ZC, set by TCP and UDP).
fn zerocopy_capable(fd: BorrowedFd<'_>) -> io::Result<(bool, bool)> {
    let domain = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    let ty = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)?;
    let stream = ty == libc::SOCK_STREAM;
    // A listening socket carries no data: refused here rather than at every send.
    if (stream || ty == libc::SOCK_SEQPACKET)
        && getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN)? != 0
    {
        return Err(errno(libc::ENOTCONN));
    }
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Ok((false, stream));
    }
    let proto = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)?;
    let capable = matches!(
        (ty, proto),
        (libc::SOCK_STREAM, libc::IPPROTO_TCP) | (libc::SOCK_DGRAM, libc::IPPROTO_UDP)
    );
    Ok((capable, stream))
}

fn auto_engine(fd: BorrowedFd<'_>, capable: bool, keep: usize) -> Engine {
    if !capable {
        return Engine::Copy;
    }
    if uring::thread_ring().is_ok() {
        return Engine::IoUring(Ring::new(true, keep));
    }
    plain_engine(fd)
}

/// The error queue where `SO_ZEROCOPY` works, else copies.
fn plain_engine(fd: BorrowedFd<'_>) -> Engine {
    match enable_so_zerocopy(fd) {
        Ok(()) => Engine::ErrQueue,
        Err(_) => Engine::Copy,
    }
}

fn enable_so_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
    // Read it back: a filter (seccomp, BPF sockopt) could have swallowed the request.
    match getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY)? {
        1 => Ok(()),
        _ => Err(errno(libc::EOPNOTSUPP)),
    }
}

impl<F: AsFd> ZeroCopySender<F> {
    /// Creates a sender on the socket `fd` with the default [`ZcOptions`] (backend
    /// [`ZcBackend::Auto`], not adaptive). See [`ZeroCopySender::with_options`].
    ///
    /// # Errors
    /// As [`ZeroCopySender::with_options`].
    pub fn new(fd: F) -> io::Result<Self> {
        Self::with_options(fd, ZcOptions::new())
    }

    /// Creates a sender on the socket `fd` set up as `opts` says.
    ///
    /// Allocates the tables for [`ZcOptions::reserve`] requests (32 bytes each plus a quarter,
    /// and 8 more each for the error queue; see the module documentation); nothing else.
    // doc-source: zc_new.kernel
    /// An io_uring sender (explicit, or picked by AUTO) makes sure the calling thread has its
    /// ring (made on the thread's first sender, kept until the thread exits) but joins a ring
    /// only at its first use. The error-queue backend sets `SO_ZEROCOPY` on the socket (left
    /// set afterwards; it only matters to `MSG_ZEROCOPY` sends).
    // doc-end
    ///
    /// # Errors
    /// `EINVAL` (options out of range: see [`ZcOptions::reserve`] and
    /// [`ZcOptions::max_pending`]), `ENOMEM` for the tables, and:
    // doc-source: zc_new.errors
    /// `EBADF`, `ENOTSOCK`, `ENOTCONN` (a listening socket: one `getsockopt(SO_ACCEPTCONN)`
    /// tells, on stream and seqpacket sockets), `EOPNOTSUPP` (an explicit zerocopy backend on a
    /// socket that has none: AF_UNIX, MPTCP, raw, packet; or io_uring without SEND_ZC), io_uring
    /// setup errors
    /// for an explicit io_uring backend when the calling thread has no ring yet (`EPERM` when
    /// `kernel.io_uring_disabled` forbids it, `ENOSYS`, `ENOMEM`, `EMFILE`).
    // doc-end
    /// `fd` is dropped on error.
    pub fn with_options(fd: F, opts: ZcOptions) -> io::Result<Self> {
        Self::for_buffers(fd, opts)
    }
}

impl<F: AsFd, B: ZcBuf> ZeroCopySender<F, B> {
    /// [`ZeroCopySender::with_options`] for a sender whose owned sends take buffers of type
    /// `B` (`new` and `with_options` make senders of `Vec<u8>`): for example
    /// `ZeroCopySender::<_, Arc<[u8]>>::for_buffers(&sock, opts)`.
    ///
    /// # Errors
    /// As [`ZeroCopySender::with_options`].
    pub fn for_buffers(fd: F, opts: ZcOptions) -> io::Result<Self> {
        opts.check()?;
        let b = fd.as_fd();
        let (capable, stream) = zerocopy_capable(b)?;
        let engine = match opts.backend {
            ZcBackend::Copy => Engine::Copy,
            ZcBackend::ErrQueue | ZcBackend::IoUring if !capable => {
                return Err(errno(libc::EOPNOTSUPP))
            }
            ZcBackend::ErrQueue => {
                enable_so_zerocopy(b)?;
                Engine::ErrQueue
            }
            ZcBackend::IoUring => {
                uring::thread_ring()?;
                Engine::IoUring(Ring::new(false, opts.reserve))
            }
            ZcBackend::Auto => auto_engine(b, capable, opts.reserve),
        };
        // Only the error queue needs the id window made now (io_uring makes it if AUTO falls
        // back to the error queue).
        let ids = matches!(engine, Engine::ErrQueue);
        let mut tracker = Tracker::new(opts.reserve, opts.max_pending, ids)?;
        if ids {
            // send_reap holds REAP_EVERY requests between two reads of the error queue.
            tracker.keep_after_growth(REAP_EVERY as usize, true);
        }
        Ok(ZeroCopySender {
            fd,
            held: Vec::new(),
            close_timeout: opts.close_timeout,
            stream,
            engine,
            tracker,
            adaptive: Adaptive {
                enabled: opts.adaptive,
                ..Adaptive::default()
            },
            sends_since_reap: 0,
            uring_full: false,
            waiter: Waiter::default(),
            stats: ZcStats::default(),
            settled: false,
        })
    }

    /// The socket, as given to [`ZeroCopySender::new`].
    pub fn get_ref(&self) -> &F {
        &self.fd
    }

    /// Returns the socket after the first part of the close policy (see
    /// [`ZeroCopySender::close`]): it waits up to the close timeout for the sends in flight
    /// (their completions and buffers are dropped), but never resets the connection, which is
    /// the caller's again; sends still in flight then are abandoned (counted nowhere: reap and
    /// check [`ZeroCopySender::inflight`] first if they matter). The socket keeps the kernel's
    /// zerocopy id counter where this sender left it, which a new error-queue sender cannot
    /// read back: do not make another error-queue sender on it.
    pub fn into_inner(self) -> F {
        let mut me = ManuallyDrop::new(self);
        let t = me.close_timeout;
        me.settle(t, false, &mut |_, _| {});
        me.leave();
        // Every field by name: a new one must be handled below.
        let ZeroCopySender {
            fd: _,
            held: _,
            close_timeout: _,
            stream: _,
            engine: _,
            tracker: _,
            adaptive: _,
            sends_since_reap: _,
            uring_full: _,
            waiter: _,
            stats: _,
            settled: _,
        } = &*me;
        // SAFETY: `me` is never used or dropped again: `fd` is moved out once, and each field
        // that owns something is dropped in place once (the others are `Copy`).
        unsafe {
            std::ptr::drop_in_place(&mut me.held);
            std::ptr::drop_in_place(&mut me.engine);
            std::ptr::drop_in_place(&mut me.tracker);
            std::ptr::drop_in_place(&mut me.waiter);
            std::ptr::read(&me.fd)
        }
    }

    /// Closes the sender by the close policy, with its own close timeout, and returns its
    /// counters (`close_completed`, `close_resets`, `close_abandoned` say what the policy did).
    /// Completions still to be reaped are dropped with their buffers. Dropping the sender does
    /// the same. The socket itself is closed only by dropping `F`, after all of this.
    // doc-source: zc_close.policy
    /// Closing never lets the kernel read memory the program has given up. The sender first
    /// waits for the completions of its sends in flight, up to its close timeout (1 s by
    /// default). If some are still missing (TCP notifies only once the peer acknowledged: a
    /// peer that stopped reading holds them) and the socket is a stream, it resets the
    /// connection (`connect` with `AF_UNSPEC`: the kernel sends a RST and purges its send
    /// queues, releasing their pages; the peer sees a reset, never wrong bytes) and waits up to
    /// 1 s more for the completions that follow. A datagram socket is not reset: its sends
    /// complete once the device has sent them. Sends still in flight after that are abandoned:
    /// the memory of each stays in use by the kernel for ever (an owned buffer is leaked, never
    /// freed). The counters say what happened: `close_completed`, `close_resets`,
    /// `close_abandoned`. An io_uring sender closed on another thread than the one whose ring
    /// it joined cannot wait: it resets a stream at once and abandons what is still in flight.
    /// Closing waits in `poll` or `io_uring_enter`; a signal does not cut it short.
    // doc-end
    pub fn close(self) -> ZcStats {
        let t = self.close_timeout;
        self.close_with(t, |_, _| {})
    }

    /// [`ZeroCopySender::close`] with a close timeout of `timeout`, handing every completion
    /// it takes in (ready ones, and those that arrive while it waits) to `f` with what its send
    /// owned, so that a caller releases each buffer as its completion comes.
    pub fn close_with(
        mut self,
        timeout: Duration,
        f: impl FnMut(Completion, Option<Owned<B>>),
    ) -> ZcStats {
        self.close_in_place(timeout, f)
    }

    /// [`ZeroCopySender::close_with`] for an owner that cannot give the sender up (a handle
    /// behind a pointer, as the C ABI's): the sender is closed when this returns, and every
    /// later send fails with `EPIPE`; dropping it then does nothing more. A second call only
    /// returns the counters.
    pub fn close_in_place(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(Completion, Option<Owned<B>>),
    ) -> ZcStats {
        self.settle(timeout, true, &mut f);
        self.stats()
    }

    /// The close policy (see [`ZeroCopySender::close`]); runs once.
    fn settle(
        &mut self,
        timeout: Duration,
        reset: bool,
        f: &mut dyn FnMut(Completion, Option<Owned<B>>),
    ) {
        if self.settled {
            return;
        }
        self.settled = true;
        let mut taken = 0;
        if self.tracker.inflight() > 0 {
            let here = self.check_thread().is_ok();
            if here {
                taken += self.wait_out(timeout, f);
            }
            if self.tracker.inflight() > 0 && reset && self.stream {
                self.stats.syscalls_reap += 1;
                if sys::disconnect(self.fd.as_fd()).is_ok() {
                    self.stats.close_resets += 1;
                    if here {
                        taken += self.wait_out(RESET_WAIT, f);
                    }
                }
            }
        }
        taken += self.pop_with(usize::MAX, f) as u64;
        self.stats.close_completed += taken;
        self.stats.close_abandoned += self.tracker.inflight() as u64;
        // What is left is in flight: the kernel may read it for ever.
        for owned in self.held.drain(..).flatten() {
            std::mem::forget(owned);
        }
    }

    /// Waits up to `timeout` until nothing is in flight, handing completions to `f`; returns
    /// how many. Signals and socket errors do not end it (a peer's reset makes the kernel
    /// purge the queues: their notifications follow).
    fn wait_out(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(Completion, Option<Owned<B>>),
    ) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        let mut n = 0;
        loop {
            n += self.pop_with(usize::MAX, f) as u64;
            if self.tracker.inflight() == 0 {
                return n;
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return n,
                },
            };
            match self.wait(left) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => {}
                // A pending socket error or a hang-up that carries no notification: look again
                // shortly rather than spin on it.
                Err(_) => {
                    let nap = left.map_or(Duration::from_millis(10), |l| {
                        l.min(Duration::from_millis(10))
                    });
                    std::thread::sleep(nap);
                    let _ = self.collect();
                }
            }
        }
    }

    /// What dropping the sender does before its fields go: collects what completed, and tells
    /// the ring how many notifications are still to come for it (they are counted off there).
    fn leave(&mut self) {
        let _ = self.collect();
        let expected = self.tracker.notifs_expected();
        if let Engine::IoUring(r) = &mut self.engine {
            if let Some(Ok(b)) = r.joined.get_mut() {
                b.expected = expected;
            }
        }
    }

    /// The close policy's bound on each of its waits ([`ZcOptions::close_timeout`]).
    pub fn close_timeout(&self) -> Duration {
        self.close_timeout
    }

    /// The backend in use (never `Auto`).
    pub fn backend(&self) -> ZcBackend {
        match self.engine {
            Engine::ErrQueue => ZcBackend::ErrQueue,
            Engine::IoUring(_) => ZcBackend::IoUring,
            Engine::Copy => ZcBackend::Copy,
        }
    }

    // doc-source: zc_inflight
    /// Sends that accepted bytes and whose completion has not arrived yet (ready but unreaped
    /// completions are not counted; failed sends never are).
    // doc-end
    pub fn inflight(&self) -> usize {
        self.tracker.inflight()
    }

    /// The counters so far.
    pub fn stats(&self) -> ZcStats {
        let mut s = self.stats;
        s.zerocopy_off = self.adaptive.off as u64;
        s
    }

    // doc-source: zc_pollfd.kernel
    /// The descriptor to watch (poll, epoll) for completions: the socket for the error queue
    /// (`EPOLLERR` is always reported), for io_uring an eventfd of the thread's ring
    /// (`EPOLLIN`). Copy completions are ready when the send returns; for the copy backend
    /// this is the socket, which never needs watching.
    ///
    /// io_uring: the ring is the calling thread's, shared by every sender used on that thread;
    /// asking for this joins the sender to that thread's ring if it joined none yet (the
    /// sender then belongs to this thread). The first call on a thread makes an eventfd and
    /// registers it with the ring (`IORING_REGISTER_EVENTFD`; one more descriptor per thread,
    /// and from then on a reap, wait or collect resets it with one `read` if the ring was
    /// entered since the last reset or new notifications show, so that reaping all of a
    /// thread's senders after a wakeup costs one or two `read`s, not one each): the kernel
    /// signals it when it queues a notification for any sender of the thread. (The ring's own
    /// descriptor does not do: with `DEFER_TASKRUN` notifications wait as task work, which
    /// epoll does not report.) Any call on one of the thread's senders that enters or drains
    /// the ring (send, reap, wait) takes every notification in and keeps the others' for them,
    /// where the eventfd no longer shows them. So an event loop reaps every sender of the
    /// thread that has sends in flight after a wakeup and
    /// before it sleeps again, not only the one it was woken for. The descriptor stays open
    /// while any sender joined to the ring exists; lowcopy closes it, never the caller. If the
    /// calling thread cannot have a ring (its setup fails: `EMFILE`, `ENOMEM`), this is the
    /// socket, and the sender never uses a ring: an AUTO sender falls back to the error queue,
    /// an io_uring one fails every send with that error.
    // doc-end
    pub fn completion_fd(&self) -> BorrowedFd<'_> {
        match &self.engine {
            Engine::IoUring(r) => match r.join() {
                Ok(b) => b.fd(),
                Err(_) => self.fd.as_fd(),
            },
            _ => self.fd.as_fd(),
        }
    }

    /// Sends `buf`, which the sender keeps until the send's completion is reaped; returns
    /// bytes accepted.
    // doc-source: zc_send.completion
    /// Exactly one completion carrying `user_data` follows every send that returned > 0; none
    /// follows a failed or zero-byte send.
    // doc-end
    /// The buffer comes back with that completion ([`ZeroCopySender::reap_with`]; `reap` and
    /// `send_reap` drop it), or inside the [`SendError`] of a send that failed. A zero-byte
    /// send accepted nothing and is dropped at once. A stream send that went part way (a
    /// non-blocking socket, a signal) holds the whole buffer until its completion: send the
    /// rest from a buffer that shares it ([`Slice`] of an `Arc<[u8]>`, for example).
    ///
    /// `flags`: [`Flags::DONTWAIT`], [`Flags::MORE`].
    // doc-source: zc_send.kernel
    /// `MSG_NOSIGNAL` is always added: a closed connection is `EPIPE`, never `SIGPIPE`. As
    /// `send(2)`: a blocking send on a stream socket accepts everything unless a signal or
    /// `SO_SNDTIMEO` stops it part way (then the part sent is returned: send the rest), a
    /// non-blocking one (`MSG_DONTWAIT`, or a socket with `O_NONBLOCK`) accepts what fits, a
    /// datagram is one send (a zero-length datagram too: it returns 0 and gets no completion).
    /// Never waits for a completion. The io_uring backend cancels its request on a signal
    /// (returning what went, or `EINTR`) and does not honour `SO_SNDTIMEO`; io_uring ignores
    /// `O_NONBLOCK`, so it reads the flag (one `fcntl`) where a send without `MSG_DONTWAIT`
    /// would sleep; after an `EAGAIN` it asks `poll(POLLOUT)` before queueing the next
    /// request (a failed SEND_ZC still posts a notification, which the kernel may hold until
    /// the peer acks earlier data), so retrying a full socket costs a poll and no request slot.
    /// `ENOBUFS` from a zerocopy send (optmem or locked-pages limit), and on io_uring `ENOMEM`
    /// (the pages of its sends in flight are charged to `RLIMIT_MEMLOCK` when the thread that
    /// made the ring lacks `CAP_IPC_LOCK`), is never returned: completions are collected and
    /// the send is retried once, then made by copy (its completion flagged copied and
    /// fallback).
    // doc-end
    ///
    /// # Errors
    // doc-source: zc_send.errors
    /// `EBUSY` (as many requests held as the sender's limit, 4096 by default: reap first),
    /// `ENOMEM` (the tables could not grow past the reserve), `EEXIST` (io_uring backend called
    /// from a thread other than the one the sender belongs to), `EIO` (the thread's io_uring
    /// ring was retired after it failed to take a request: every sender on it gets `EIO`; new
    /// senders get a new ring), the ring's setup errors at an io_uring sender's first send on a
    /// thread without a ring (`EMFILE`, `ENOMEM`; an AUTO sender falls back to the error queue
    /// instead), `EMSGSIZE` (more than `IOV_MAX` iovecs, or a datagram too large), and the
    /// socket's own send errors (`EAGAIN`, `EINTR`, `EPIPE`, `ECONNRESET`, `EDESTADDRREQ`,
    /// ...).
    // doc-end
    pub fn send(&mut self, buf: B, flags: Flags, user_data: u64) -> Result<usize, SendError<B>> {
        self.send_owned(buf, None, &[], flags, user_data)
    }

    /// [`ZeroCopySender::send`] of several buffers as one send (one `sendmsg` iovec each, one
    /// completion for all); they come back together, in order, as [`Owned::Many`].
    ///
    /// # Errors
    /// As [`ZeroCopySender::send`]; `EMSGSIZE` for more than [`IOV_MAX`](crate::IOV_MAX)
    /// buffers.
    pub fn send_vectored(
        &mut self,
        bufs: Vec<B>,
        flags: Flags,
        user_data: u64,
    ) -> Result<usize, SendError<Vec<B>>> {
        if bufs.len() > IOV_MAX {
            return Err(SendError::new(errno(libc::EMSGSIZE), bufs));
        }
        let iov: Vec<iovec> = bufs.iter().map(|b| iovec_of(b.as_bytes())).collect();
        let null = std::ptr::null();
        // SAFETY: the iovecs point into `bufs`, whose bytes ZcBuf keeps in place and unchanged
        // while they live; `hold` keeps them until the completion is reaped.
        match unsafe { self.send_parts(&iov, null, 0, null, 0, flags, user_data) } {
            Ok((n, slot)) => {
                self.hold(slot, n, Owned::Many(bufs));
                Ok(n)
            }
            Err(e) => Err(SendError::new(e, bufs)),
        }
    }

    /// [`ZeroCopySender::send`] to a destination address (`addr`, for unconnected datagram
    /// sockets; `None`: the connected peer) with control messages (`control`: the bytes of
    /// `cmsghdr`s as `sendmsg(2)` takes them, for example `UDP_SEGMENT`; empty for none; read
    /// during the call only).
    ///
    /// # Errors
    /// As [`ZeroCopySender::send`], plus:
    // doc-source: zc_send_msg.errors
    /// the kernel's answers to the address and control data: `EAFNOSUPPORT` (an address of the
    /// other family), `EINVAL` (an address of the wrong length, malformed control messages),
    /// `EISCONN` (an address on a connected AF_UNIX stream socket), ... A connected TCP
    /// socket ignores the address (the send goes to its peer).
    // doc-end
    pub fn send_msg(
        &mut self,
        buf: B,
        addr: Option<&SocketAddr>,
        control: &[u8],
        flags: Flags,
        user_data: u64,
    ) -> Result<usize, SendError<B>> {
        self.send_owned(buf, addr, control, flags, user_data)
    }

    fn send_owned(
        &mut self,
        buf: B,
        addr: Option<&SocketAddr>,
        control: &[u8],
        flags: Flags,
        user_data: u64,
    ) -> Result<usize, SendError<B>> {
        let iov = [iovec_of(buf.as_bytes())];
        let name = addr.map(RawAddr::from);
        let (np, nl) = name
            .as_ref()
            .map_or((std::ptr::null(), 0), |n| (n.as_ptr(), n.len()));
        let cp = if control.is_empty() {
            std::ptr::null()
        } else {
            control.as_ptr().cast()
        };
        // SAFETY: the iovec points into `buf`, whose bytes ZcBuf keeps in place and unchanged
        // while it lives, and `hold` keeps it until the completion is reaped; `name` and
        // `control` are alive for the call.
        match unsafe { self.send_parts(&iov, np, nl, cp, control.len(), flags, user_data) } {
            Ok((n, slot)) => {
                self.hold(slot, n, Owned::One(buf));
                Ok(n)
            }
            Err(e) => Err(SendError::new(e, buf)),
        }
    }

    /// Keeps what a send that accepted `n` bytes owns until its completion is popped (nothing
    /// follows a zero-byte send: dropped now).
    #[inline]
    fn hold(&mut self, slot: SlotId, n: usize, owned: Owned<B>) {
        if n == 0 {
            return;
        }
        let i = slot as usize;
        if self.held.len() <= i {
            self.held
                .resize_with((i + 1).next_power_of_two().max(8), || None);
        }
        self.held[i] = Some(owned);
    }

    /// [`ZeroCopySender::send`] of borrowed buffers (the form the C ABI and the bindings use,
    /// with memory they pin themselves).
    ///
    /// # Errors
    /// As [`ZeroCopySender::send`].
    ///
    /// # Safety
    // doc-source: zc.borrowed_safety
    /// The memory of `bufs` must stay allocated and unmodified from the call until this send's
    /// completion is reaped (a zerocopy send pins the pages and the kernel transmits from them
    /// until then, also when TCP retransmits: whatever the program writes there goes on the
    /// wire, and memory freed and reused carries other data). If the sender is closed first,
    /// until the close returns, or for ever for a send the close abandoned (counted in
    /// `close_abandoned`).
    // doc-end
    pub unsafe fn send_borrowed(
        &mut self,
        bufs: &[IoSlice<'_>],
        flags: Flags,
        user_data: u64,
    ) -> io::Result<usize> {
        // SAFETY: IoSlice is ABI-compatible with struct iovec (std documents it for Unix);
        // the kernel only reads the buffers.
        let iov = unsafe { std::slice::from_raw_parts(bufs.as_ptr().cast::<iovec>(), bufs.len()) };
        // SAFETY: the iovecs describe the caller's readable buffers; the caller keeps them
        // until the completion.
        unsafe { self.send_raw(iov, flags, user_data) }
    }

    /// [`ZeroCopySender::send_msg`] of borrowed buffers.
    ///
    /// # Errors
    /// As [`ZeroCopySender::send_msg`].
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_borrowed`].
    pub unsafe fn send_msg_borrowed(
        &mut self,
        bufs: &[IoSlice<'_>],
        addr: Option<&SocketAddr>,
        control: &[u8],
        flags: Flags,
        user_data: u64,
    ) -> io::Result<usize> {
        let name = addr.map(RawAddr::from);
        // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
        let mut msg: msghdr = unsafe { std::mem::zeroed() };
        if let Some(n) = &name {
            msg.msg_name = n.as_ptr().cast_mut();
            msg.msg_namelen = n.len();
        }
        if !control.is_empty() {
            msg.msg_control = control.as_ptr().cast_mut().cast();
            msg.msg_controllen = control.len() as _;
        }
        msg.msg_iov = bufs.as_ptr().cast::<iovec>().cast_mut();
        msg.msg_iovlen = bufs.len() as _;
        // SAFETY: the msghdr points at `name`, `control` and `bufs` (IoSlice is
        // ABI-compatible with struct iovec), all alive and readable for the call; the caller
        // keeps the buffers until the completion; lowcopy never writes through these pointers.
        unsafe { self.send_msg_raw(&msg, flags, user_data) }
    }

    /// [`ZeroCopySender::send`] over raw iovecs (the C ABI's `sendv` entry point); results and
    /// errors as [`ZeroCopySender::send`].
    ///
    /// # Errors
    /// As [`ZeroCopySender::send`].
    ///
    /// # Safety
    /// Every iovec must describe memory valid for reads of its length, kept as
    /// [`ZeroCopySender::send_borrowed`] says.
    pub unsafe fn send_raw(
        &mut self,
        iov: &[iovec],
        flags: Flags,
        user_data: u64,
    ) -> io::Result<usize> {
        let null = std::ptr::null();
        // SAFETY: forwarded caller guarantees; no name, no control data.
        unsafe { self.send_parts(iov, null, 0, null, 0, flags, user_data) }.map(|(n, _)| n)
    }

    /// [`ZeroCopySender::send_msg`] from a `struct msghdr` (the C ABI's `sendmsg` entry
    /// point): its name, iovecs and control data; `msg_flags` is ignored.
    ///
    /// # Errors
    /// As [`ZeroCopySender::send_msg`], plus `EFAULT` for a null `msg_name`, `msg_control` or
    /// `msg_iov` with a non-zero length (what `sendmsg(2)` answers, whatever the backend), and
    /// `EMSGSIZE` for `msg_iovlen` above [`IOV_MAX`](crate::IOV_MAX).
    ///
    /// # Safety
    /// `msg_name` (`msg_namelen` bytes), `msg_control` (`msg_controllen` bytes), `msg_iov`
    /// (`msg_iovlen` iovecs) must be valid for reads during the call, or null with a zero
    /// length; the memory each iovec describes is kept as
    /// [`ZeroCopySender::send_borrowed`] says.
    pub unsafe fn send_msg_raw(
        &mut self,
        msg: &msghdr,
        flags: Flags,
        user_data: u64,
    ) -> io::Result<usize> {
        let (name, control) = (msg.msg_name.cast_const(), msg.msg_control.cast_const());
        // The kernel's order: the address and control buffer are checked before the iovecs.
        if name.is_null() && msg.msg_namelen > 0 || control.is_null() && msg.msg_controllen > 0 {
            return Err(errno(libc::EFAULT));
        }
        let iov: &[iovec] = match (msg.msg_iov.is_null(), msg.msg_iovlen) {
            (_, 0) => &[],
            (true, _) => return Err(errno(libc::EFAULT)),
            (false, n) if n > IOV_MAX => return Err(errno(libc::EMSGSIZE)),
            // SAFETY: the caller vouches for `msg_iovlen` readable iovecs at `msg_iov`.
            (false, n) => unsafe { std::slice::from_raw_parts(msg.msg_iov, n) },
        };
        // SAFETY: forwarded caller guarantees.
        unsafe {
            self.send_parts(
                iov,
                name,
                msg.msg_namelen,
                control,
                msg.msg_controllen,
                flags,
                user_data,
            )
        }
        .map(|(n, _)| n)
    }

    /// The one send path: `iov` with an optional name and control data; returns the bytes
    /// accepted and the request's slot (free again at once if they were 0).
    ///
    /// # Safety
    /// The iovecs must describe memory valid for reads during the call; `name` (`namelen`
    /// bytes) and `control` (`controllen` bytes) must be valid for reads during the call (or
    /// null with length 0).
    #[allow(clippy::too_many_arguments)]
    unsafe fn send_parts(
        &mut self,
        iov: &[iovec],
        name: *const libc::c_void,
        namelen: libc::socklen_t,
        control: *const libc::c_void,
        controllen: usize,
        flags: Flags,
        user_data: u64,
    ) -> io::Result<(usize, SlotId)> {
        // What sendmsg(2) answers (move_addr_to_kernel, ____sys_sendmsg); io_uring's
        // SENDMSG_ZC would take a NULL control buffer with a length and send anyway.
        if name.is_null() && namelen > 0 || control.is_null() && controllen > 0 {
            return Err(errno(libc::EFAULT));
        }
        if iov.len() > IOV_MAX {
            return Err(errno(libc::EMSGSIZE));
        }
        if self.settled {
            return Err(errno(libc::EPIPE)); // closed in place
        }
        // A library must not raise SIGPIPE: EPIPE is returned instead.
        let flags = flags.to_raw() | libc::MSG_NOSIGNAL;
        self.join_ring()?;
        let slot = self.begin(user_data)?;
        // SAFETY: all-zero is a valid msghdr; the pointers set below are the caller's.
        let mut msg: msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = name as *mut _;
        msg.msg_namelen = namelen;
        msg.msg_control = control as *mut _;
        msg.msg_controllen = controllen as _;
        let r = match self.engine {
            // SAFETY: forwarded caller guarantees.
            Engine::IoUring(_) if !self.adaptive.off => unsafe {
                self.send_uring(slot, &mut msg, iov, flags)
            },
            // SAFETY: forwarded caller guarantees.
            _ => unsafe { self.send_plain(slot, &mut msg, iov, flags) },
        };
        self.tracker.finish(slot);
        let n = r?;
        if n > 0 {
            self.stats.sends += 1;
            self.stats.bytes += n as u64;
        }
        Ok((n, slot))
    }

    fn begin(&mut self, user_data: u64) -> io::Result<SlotId> {
        if let Some(s) = self.tracker.begin(user_data)? {
            return Ok(s);
        }
        // Every slot is in flight or unreaped: collect what has completed, then retry.
        self.collect()?;
        self.tracker
            .begin(user_data)?
            .ok_or_else(|| errno(libc::EBUSY))
    }

    /// io_uring: joins the calling thread's ring if the sender has none yet; if it cannot, an
    /// AUTO sender falls back to the error queue (or copies), any other fails.
    fn join_ring(&mut self) -> io::Result<()> {
        let failed = match &self.engine {
            Engine::IoUring(r) => r.join().err().map(|e| (e, r.auto)),
            _ => None,
        };
        match failed {
            None => Ok(()),
            Some((_, true)) => {
                self.engine = plain_engine(self.fd.as_fd());
                if matches!(self.engine, Engine::ErrQueue) {
                    self.tracker.keep_after_growth(REAP_EVERY as usize, true);
                }
                Ok(())
            }
            Some((e, false)) => Err(e),
        }
    }

    /// `EEXIST` (`EIO`) for an io_uring sender joined to another thread's (a retired) ring:
    /// the same answer whether or not the call would need the ring this time.
    fn check_thread(&self) -> io::Result<()> {
        match &self.engine {
            Engine::IoUring(r) => r.joined().map_or(Ok(()), |b| b.check_owner()),
            _ => Ok(()),
        }
    }

    /// The ring this io_uring sender joined; `EIO` if none (the send path joins first).
    fn ring(&self) -> io::Result<&uring::Binding> {
        match &self.engine {
            Engine::IoUring(r) => r.joined().ok_or_else(|| errno(libc::EIO)),
            _ => Err(errno(libc::EIO)),
        }
    }

    /// Error-queue and copy sends: one `sendmsg`, as `send(2)` would make it; after `ENOBUFS`
    /// (zerocopy state in flight exhausted optmem or `RLIMIT_MEMLOCK`) completions are
    /// collected, since they release it, and the send retried once, then made by copy.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    unsafe fn send_plain(
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
            match unsafe { sys::sendmsg(self.fd.as_fd(), msg, flags | libc::MSG_ZEROCOPY) } {
                // TCP numbers only sends that queued data; a datagram takes an id even with no
                // payload (its header goes out through the zerocopy path: observed on 6.18).
                Ok(n) if n > 0 || !self.stream => {
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
        let n = unsafe { sys::sendmsg(self.fd.as_fd(), msg, flags) }?;
        if n > 0 {
            self.stats.copy_sends += 1;
            let fallback = if errqueue || self.adaptive.off {
                FALLBACK
            } else {
                0
            };
            self.tracker.add_done(slot, n, COPIED | fallback);
        }
        Ok(n)
    }

    /// io_uring SEND_ZC / SENDMSG_ZC. io_uring itself is never asked to wait for socket
    /// space (`MSG_DONTWAIT` on every request): a request waiting in the kernel cannot be
    /// interrupted by a signal. A blocking send waits in `poll(POLLOUT)` instead, which a
    /// signal interrupts, and sends the rest as further requests of the same completion.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    unsafe fn send_uring(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        user: &[iovec],
        flags: c_int,
    ) -> io::Result<usize> {
        let (blocking, caller_flags) = (flags & libc::MSG_DONTWAIT == 0, flags);
        let flags = flags | libc::MSG_DONTWAIT;
        self.ring()?.check_owner()?; // before any wait: another thread is refused at once
        if self.uring_full {
            // A SEND_ZC that fails still posts a notification, and on TCP the kernel can
            // chain it to the notification of unacknowledged data (io_link_skb), holding a
            // slot until the peer acks. So after an EAGAIN, ask poll before the next request:
            // a caller retrying a full socket gets EAGAIN from poll, not a held slot.
            // The socket's O_NONBLOCK is read only here, where a blocking call would sleep:
            // io_uring itself ignores it (only MSG_DONTWAIT in the request counts).
            let ms = if blocking && !self.fd_nonblocking()? {
                -1
            } else {
                0
            };
            let waiter = &mut self.waiter;
            if waiter.wait(
                self.fd.as_fd(),
                libc::POLLOUT,
                ms,
                &mut self.stats.syscalls_send,
            )? == 0
            {
                return Err(errno(libc::EAGAIN));
            }
            self.uring_full = false;
        }
        let mut space = [MaybeUninit::<iovec>::uninit(); IOV_MAX];
        for (d, s) in space.iter_mut().zip(user) {
            d.write(*s);
        }
        // SAFETY: the first user.len() entries were written just above.
        let iov = unsafe {
            std::slice::from_raw_parts_mut(space.as_mut_ptr().cast::<iovec>(), user.len())
        };
        let total: usize = user.iter().map(|v| v.iov_len).sum();
        let (mut sent, mut first, mut nomem) = (0usize, 0usize, false);
        loop {
            msg.msg_iov = iov[first..].as_mut_ptr();
            msg.msg_iovlen = (iov.len() - first) as _;
            // SAFETY: msg points at the caller's name and control and at our copy of their
            // iovecs, advanced past what was sent.
            match unsafe { self.uring_once(slot, msg, flags) } {
                Ok(n) => {
                    sent += n;
                    if !blocking || !self.stream || sent >= total || n == 0 {
                        return Ok(sent);
                    }
                    // Part went: the socket is full. A blocking call waits below for room, on
                    // an O_NONBLOCK socket it returns what went (as send(2)).
                    if self.fd_nonblocking().unwrap_or(true) {
                        return Ok(sent);
                    }
                    advance(iov, &mut first, n);
                }
                // The locked-pages limit: a ring made by a thread without CAP_IPC_LOCK charges
                // each SEND_ZC's pages to the user's RLIMIT_MEMLOCK until its notification
                // (io_uring/notif.h io_notif_account_mem), and says ENOMEM past it; or no
                // kernel memory. As ENOBUFS on the error queue: collect (notifications give
                // the pages back) and retry once, then send the rest by copy.
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
                    self.stats.enobufs += 1;
                    if !nomem {
                        nomem = true;
                        self.collect()?;
                        continue;
                    }
                    // SAFETY: msg points at the caller's name and control and at the iovecs
                    // not yet sent (set at the top of this round).
                    return match unsafe { self.uring_copy(slot, msg, caller_flags) } {
                        Ok(n) => Ok(sent + n),
                        Err(_) if sent > 0 => Ok(sent),
                        Err(e) => Err(e),
                    };
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    self.uring_full = true;
                    // (a non-blocking call returns after its first request; a blocking one on
                    // an O_NONBLOCK socket, as send(2) does, with what went or EAGAIN)
                    if !blocking || self.fd_nonblocking().unwrap_or(true) {
                        return if sent > 0 { Ok(sent) } else { Err(e) };
                    }
                }
                // After partial progress the error is the next call's, as with send(2).
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => return Err(e),
            }
            // A non-empty error queue (ICMP errors, timestamps: this backend does not read
            // it) does not end this sleep (crate::wait).
            match self.waiter.wait(
                self.fd.as_fd(),
                libc::POLLOUT,
                -1,
                &mut self.stats.syscalls_send,
            ) {
                Ok(_) => self.uring_full = false,
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => return Err(e),
            }
        }
    }

    /// The socket's `O_NONBLOCK` (one `fcntl`, counted as a send syscall): read only where a
    /// blocking io_uring send would sleep, since io_uring does not look at it.
    fn fd_nonblocking(&mut self) -> io::Result<bool> {
        self.stats.syscalls_send += 1;
        sys::is_nonblocking(self.fd.as_fd())
    }

    /// The io_uring backend's copy fallback: one plain `sendmsg` of `msg` for `slot`, whose
    /// completion (flagged [`COPIED`] | [`FALLBACK`]) waits for nothing more than the
    /// notifications its earlier requests still expect.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    unsafe fn uring_copy(&mut self, slot: SlotId, msg: &msghdr, flags: c_int) -> io::Result<usize> {
        self.stats.syscalls_send += 1;
        // SAFETY: msg points at the caller's name, control and iovecs.
        let n = unsafe { sys::sendmsg(self.fd.as_fd(), msg, flags) }?;
        if n > 0 {
            self.stats.copy_sends += 1;
            self.tracker.add_done(slot, n, COPIED | FALLBACK);
        }
        Ok(n)
    }

    /// One SEND_ZC / SENDMSG_ZC request for `slot`, waiting for its result (not for its
    /// notification); records what the kernel accepted and whether a notification follows.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_parts`].
    unsafe fn uring_once(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        flags: c_int,
    ) -> io::Result<usize> {
        let Engine::IoUring(r) = &self.engine else {
            return Err(errno(libc::EIO));
        };
        let u = r.joined().ok_or_else(|| errno(libc::EIO))?;
        let (tracker, adaptive) = (&mut self.tracker, &mut self.adaptive);
        let unexpected = &mut self.stats.unexpected_ids;
        let mut on_notif = |n| apply_notif(tracker, adaptive, unexpected, n);
        let syscalls = &mut self.stats.syscalls_send;
        // SAFETY: forwarded caller guarantees on msg and the buffers.
        let sr = unsafe { u.send(self.fd.as_fd(), msg, flags, slot, syscalls, &mut on_notif) }?;
        self.stats.zerocopy_sends += 1;
        let (res, bytes) = (sr.res, sr.res.max(0) as usize);
        if sr.more {
            self.tracker.add_notif(slot, bytes);
        } else {
            self.tracker.add_done(slot, bytes, 0);
        }
        // Notifications for this slot that came with the result: this request's, or an
        // earlier request's of the same send (one that got EAGAIN still posts one).
        for _ in 0..sr.own_notifs {
            let n = uring::Notif {
                slot,
                copied: sr.own_copied,
            };
            apply_notif(
                &mut self.tracker,
                &mut self.adaptive,
                &mut self.stats.unexpected_ids,
                n,
            );
        }
        if res < 0 {
            return Err(errno(-res));
        }
        Ok(bytes)
    }

    /// Collects every completion already reported, without blocking: reads the error queue
    /// (only while zerocopy ids are in flight) or the io_uring completion queue (a syscall only
    /// if the kernel flagged deferred notifications). [`ZeroCopySender::reap`] calls it when
    /// it needs to.
    ///
    /// # Errors
    /// As [`ZeroCopySender::reap`].
    pub fn collect(&mut self) -> io::Result<()> {
        self.collect_with(true)
    }

    /// `enter`: may the io_uring backend make a syscall to post deferred notifications?
    /// (`send_reap` says no: the next send's own `io_uring_enter` posts them.)
    fn collect_with(&mut self, enter: bool) -> io::Result<()> {
        self.sends_since_reap = 0;
        match &self.engine {
            Engine::ErrQueue => self.read_errqueue(),
            // Not joined yet: nothing was sent through a ring.
            Engine::IoUring(r) => match r.joined() {
                Some(u) => {
                    let (tracker, adaptive) = (&mut self.tracker, &mut self.adaptive);
                    let unexpected = &mut self.stats.unexpected_ids;
                    u.drain(
                        &mut |n| apply_notif(tracker, adaptive, unexpected, n),
                        enter,
                        &mut self.stats.syscalls_reap,
                    )
                }
                None => Ok(()),
            },
            Engine::Copy => Ok(()),
        }
    }

    /// Drains the error queue in batches of [`ERRQ_BATCH`] with `recvmmsg`, into buffers on
    /// the stack (5 KiB): an idle sender keeps none.
    fn read_errqueue(&mut self) -> io::Result<()> {
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

    /// Moves ready completions into `out` without blocking; returns how many (the oldest
    /// first; 0 when none).
    // doc-source: zc_reap.kernel
    /// Never blocks. Collects what the kernel has reported first: one error-queue read while
    /// sends are in flight; no syscall for io_uring (unless the kernel deferred notifications
    /// or the completion queue overflowed) and copy. On io_uring this also takes in the other
    /// senders' notifications that have arrived on the thread's ring, keeping them for those
    /// senders.
    // doc-end
    ///
    /// # Errors
    // doc-source: zc_reap.errors
    /// Error-queue read errors; `EEXIST` on io_uring from a thread other than the one the
    /// sender belongs to (once it joined a ring); `EIO` when its ring was retired.
    // doc-end
    pub fn reap(&mut self, out: &mut [Completion]) -> io::Result<usize> {
        self.check_thread()?;
        if self.tracker.ready() < out.len() && self.tracker.inflight() > 0 {
            self.collect()?;
        }
        Ok(self.pop(out))
    }

    /// [`ZeroCopySender::reap`] that hands each completion to `f` with what its send owned
    /// (`None` for a borrowed or raw send), at most `max`; returns how many.
    ///
    /// ```
    /// use std::io::Read;
    /// use std::net::{TcpListener, TcpStream};
    /// use std::time::Duration;
    /// use lowcopy::zc::Owned;
    /// use lowcopy::{Flags, ZeroCopySender};
    ///
    /// let listener = TcpListener::bind("127.0.0.1:0")?;
    /// let client = TcpStream::connect(listener.local_addr()?)?;
    /// let (mut server, _) = listener.accept()?;
    /// let mut zc = ZeroCopySender::new(&client)?;
    /// zc.send(vec![1u8; 4096], Flags::NONE, 1)?;
    /// server.read_exact(&mut [0u8; 4096])?;
    ///
    /// let mut pool = Vec::new(); // buffers to use again
    /// while pool.is_empty() {
    ///     zc.wait(Some(Duration::from_secs(5)))?;
    ///     zc.reap_with(usize::MAX, |c, owned| {
    ///         assert_eq!((c.user_data, c.result), (1, 4096));
    ///         if let Some(Owned::One(buf)) = owned {
    ///             pool.push(buf);
    ///         }
    ///     })?;
    /// }
    /// assert_eq!(pool[0].len(), 4096);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`ZeroCopySender::reap`].
    pub fn reap_with(
        &mut self,
        max: usize,
        mut f: impl FnMut(Completion, Option<Owned<B>>),
    ) -> io::Result<usize> {
        self.check_thread()?;
        if self.tracker.ready() < max && self.tracker.inflight() > 0 {
            self.collect()?;
        }
        Ok(self.pop_with(max, &mut f))
    }

    fn pop(&mut self, out: &mut [Completion]) -> usize {
        let mut it = out.iter_mut();
        self.pop_with(it.len(), &mut |c, _| {
            if let Some(o) = it.next() {
                *o = c;
            }
        })
    }

    /// Pops up to `max` ready completions to `f`, each with what its send owned.
    #[inline]
    fn pop_with(&mut self, max: usize, f: &mut dyn FnMut(Completion, Option<Owned<B>>)) -> usize {
        let (held, stats) = (&mut self.held, &mut self.stats);
        self.tracker.pop_ready_with(max, |slot, c| {
            stats.completions += 1;
            stats.completions_copied += (c.flags & COPIED != 0) as u64;
            f(c, held.get_mut(slot as usize).and_then(Option::take));
        })
    }

    /// Sends like [`ZeroCopySender::send`], then moves completions that are ready into
    /// `out` in the same call: the "user argument" of the MSG_ZEROCOPY_UARG proposal.
    // doc-source: zc_send_reap.kernel
    /// The error-queue backend reads the queue at most once per 32 sends (sooner when the
    /// tracking table runs low), so completions may come back up to 32 sends late (a reap gets
    /// them sooner); io_uring completions cost no syscall (they are posted by the sends' own
    /// `io_uring_enter`).
    // doc-end
    /// Returns (bytes accepted, completions written).
    ///
    /// # Errors
    // doc-source: zc_send_reap.errors
    /// As a send, and then no completion is handed out. Once the send went out its bytes are
    /// reported whatever happens next: a failure to collect completions after it is left to the
    /// next reap or wait, which meet it again.
    // doc-end
    ///
    /// The buffers of the completions handed out are dropped ([`ZeroCopySender::reap_with`]
    /// gives them back).
    pub fn send_reap(
        &mut self,
        buf: B,
        flags: Flags,
        user_data: u64,
        out: &mut [Completion],
    ) -> Result<(usize, usize), SendError<B>> {
        let n = self.send(buf, flags, user_data)?;
        Ok((n, self.after_send_reap(out)))
    }

    /// [`ZeroCopySender::send_reap`] of borrowed buffers.
    ///
    /// # Errors
    /// As [`ZeroCopySender::send_reap`].
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_borrowed`].
    pub unsafe fn send_reap_borrowed(
        &mut self,
        bufs: &[IoSlice<'_>],
        flags: Flags,
        user_data: u64,
        out: &mut [Completion],
    ) -> io::Result<(usize, usize)> {
        // SAFETY: forwarded caller guarantees.
        let n = unsafe { self.send_borrowed(bufs, flags, user_data) }?;
        Ok((n, self.after_send_reap(out)))
    }

    /// [`ZeroCopySender::send_reap`] over raw iovecs (the C ABI's entry point); results as
    /// [`ZeroCopySender::send_reap`].
    ///
    /// # Errors
    /// As [`ZeroCopySender::send_reap`].
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_raw`].
    pub unsafe fn send_reap_raw(
        &mut self,
        iov: &[iovec],
        flags: Flags,
        user_data: u64,
        out: &mut [Completion],
    ) -> io::Result<(usize, usize)> {
        // SAFETY: forwarded caller guarantees.
        let n = unsafe { self.send_raw(iov, flags, user_data) }?;
        Ok((n, self.after_send_reap(out)))
    }

    fn after_send_reap(&mut self, out: &mut [Completion]) -> usize {
        self.sends_since_reap += 1;
        let low = self.tracker.low();
        let due = match self.engine {
            Engine::ErrQueue => self.sends_since_reap >= REAP_EVERY || low,
            Engine::IoUring(_) => true,
            Engine::Copy => false,
        };
        if due && self.tracker.inflight() > 0 && !out.is_empty() {
            // The send went out: reporting a collect error now would tell the caller it did
            // not (and invite a duplicate send). reap and wait collect again and report it.
            let _ = self.collect_with(false);
        }
        self.pop(out)
    }

    /// Waits until a completion is ready, at most `timeout` (`None`: no limit;
    /// `Some(Duration::ZERO)`: just check).
    // doc-source: zc_wait.kernel
    /// Returns the number ready to reap; 0 at once when nothing is in flight (it never waits
    /// for a notification that cannot come).
    // doc-end
    ///
    /// # Errors
    // doc-source: zc_wait.errors
    /// `ETIMEDOUT` when sends are in flight and none completed in time (TCP notifies only once
    /// the peer acknowledged, so a peer that stops reading delays completions without bound);
    /// `EINTR` on a signal (the wait is a poll or `io_uring_enter`, which the kernel never
    /// restarts); `EEXIST` (io_uring backend from a thread other than the one the sender
    /// belongs to); `EIO` (its ring was retired); a pending socket error (`ECONNRESET`, ...)
    /// when the socket reports one instead of a completion; error-queue read errors.
    // doc-end
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let deadline = match (timeout, deadline) {
            // Beyond what an Instant holds: as good as no limit.
            (Some(_), None) => None,
            (_, d) => d,
        };
        self.check_thread()?;
        loop {
            if self.tracker.ready() == 0 && self.tracker.inflight() > 0 {
                self.collect()?;
            }
            if self.tracker.ready() > 0 || self.tracker.inflight() == 0 {
                return Ok(self.tracker.ready());
            }
            let left = match deadline {
                None => -1,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => l.as_millis().max(1).min(i32::MAX as u128) as i32,
                    _ => return Err(errno(libc::ETIMEDOUT)),
                },
            };
            match &self.engine {
                Engine::IoUring(r) => {
                    if !r.join()?.wait(left, &mut self.stats.syscalls_reap)? {
                        return Err(errno(libc::ETIMEDOUT));
                    }
                }
                Engine::ErrQueue => {
                    self.stats.syscalls_reap += 1;
                    // POLLERR is reported for a non-empty error queue whatever we ask for.
                    let ev = poll_one(self.fd.as_fd(), 0, left)?;
                    if ev == 0 {
                        return Err(errno(libc::ETIMEDOUT));
                    }
                    self.collect()?;
                    if self.tracker.ready() == 0 {
                        self.socket_error(ev)?;
                    }
                }
                Engine::Copy => return Ok(self.tracker.ready()),
            }
        }
    }

    /// POLLERR/POLLHUP with no notification: return the socket's pending error rather than
    /// spin on it.
    fn socket_error(&mut self, ev: i16) -> io::Result<()> {
        if ev & libc::POLLNVAL != 0 {
            return Err(errno(libc::EBADF));
        }
        self.stats.syscalls_reap += 1;
        match getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, libc::SO_ERROR)? {
            0 if ev & libc::POLLHUP != 0 => Err(errno(libc::EPIPE)),
            0 => Ok(()),
            e => Err(errno(e)),
        }
    }
}

impl<F: AsFd, B: ZcBuf> Drop for ZeroCopySender<F, B> {
    /// Closes the sender by the close policy (see [`ZeroCopySender::close`]), then drops `F`.
    // doc-source: zc_drop.kernel
    /// An io_uring sender leaves its thread's ring open (the ring outlives its senders); the
    /// notifications still to come for an abandoned send are counted off there and delivered to
    /// nobody. A ring is closed when its thread exits and no sender joined to it is left (then
    /// the kernel runs task work on the closing thread, io_uring/io_uring.c
    /// `io_ring_exit_work`, so that thread's next blocking syscall may return `EINTR` once).
    // doc-end
    fn drop(&mut self) {
        let t = self.close_timeout;
        self.settle(t, true, &mut |_, _| {});
        self.leave();
    }
}

/// The [`ZcOptions::adaptive`] option's state: consecutive copied completions, and whether zerocopy
/// is no longer asked for.
#[derive(Clone, Copy, Debug, Default)]
struct Adaptive {
    enabled: bool,
    streak: u32,
    off: bool,
}

impl Adaptive {
    /// `matched` completions with this copied bit arrived.
    fn note(&mut self, copied: bool, matched: u32) {
        if matched == 0 {
            return;
        }
        if !copied {
            self.streak = 0;
            return;
        }
        self.streak = self.streak.saturating_add(matched);
        if self.enabled && self.streak >= ADAPTIVE_AFTER {
            self.off = true;
        }
    }
}

/// One io_uring notification: to its request, and to the adaptive count; a notification
/// for no request in flight is counted in `unexpected` and ignored.
fn apply_notif(
    tracker: &mut Tracker,
    adaptive: &mut Adaptive,
    unexpected: &mut u64,
    n: uring::Notif,
) {
    if tracker.complete_notif(n.slot, n.copied) {
        adaptive.note(n.copied, 1);
    } else {
        *unexpected += 1;
    }
}

/// A `SocketAddr` as the kernel takes it.
enum RawAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl From<&SocketAddr> for RawAddr {
    fn from(a: &SocketAddr) -> Self {
        match a {
            SocketAddr::V4(a) => RawAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => RawAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }
}

impl RawAddr {
    fn as_ptr(&self) -> *const libc::c_void {
        match self {
            RawAddr::V4(a) => (a as *const libc::sockaddr_in).cast(),
            RawAddr::V6(a) => (a as *const libc::sockaddr_in6).cast(),
        }
    }

    fn len(&self) -> libc::socklen_t {
        (match self {
            RawAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>(),
            RawAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>(),
        }) as libc::socklen_t
    }
}

/// The iovec of a byte slice.
fn iovec_of(b: &[u8]) -> iovec {
    iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    }
}

/// Drops `n` bytes from the front of `iov[*first..]` (partial progress of a stream send).
fn advance(iov: &mut [iovec], first: &mut usize, mut n: usize) {
    while n > 0 && *first < iov.len() {
        let v = &mut iov[*first];
        if n >= v.iov_len {
            n -= v.iov_len;
            *first += 1;
        } else {
            // SAFETY: stays within the same buffer (n < iov_len).
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n) }.cast();
            v.iov_len -= n;
            n = 0;
        }
    }
    while *first < iov.len() && iov[*first].iov_len == 0 {
        *first += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket};
    use std::os::fd::{AsRawFd, OwnedFd};

    const BACKENDS: [ZcBackend; 3] = [ZcBackend::Copy, ZcBackend::ErrQueue, ZcBackend::IoUring];

    fn drain(zc: &mut ZeroCopySender<impl AsFd>) -> Vec<Completion> {
        let mut out = [Completion::default(); 16];
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while zc.inflight() > 0 && Instant::now() < deadline {
            let _ = zc.wait(Some(Duration::from_millis(100)));
            let n = zc.reap(&mut out).unwrap();
            got.extend_from_slice(&out[..n]);
        }
        let n = zc.reap(&mut out).unwrap();
        got.extend_from_slice(&out[..n]);
        got
    }

    /// The safe `send_msg`: an IPv4 and an IPv6 destination, and a control message
    /// (`UDP_SEGMENT`: one 3000-byte send leaves as three 1000-byte datagrams), on every
    /// backend; an address of the other family is the kernel's `EAFNOSUPPORT`.
    #[test]
    fn send_msg_with_an_address_and_control_data() {
        const SOL_UDP: c_int = 17;
        const UDP_SEGMENT: c_int = 103;
        let mut cmsg = vec![0u8; 24];
        let hdr = libc::cmsghdr {
            cmsg_len: 18,
            cmsg_level: SOL_UDP,
            cmsg_type: UDP_SEGMENT,
        };
        // SAFETY: cmsghdr is plain data; its 16 bytes are viewed as bytes to copy them.
        let hdr_bytes =
            unsafe { std::slice::from_raw_parts((&hdr as *const libc::cmsghdr).cast::<u8>(), 16) };
        cmsg[..16].copy_from_slice(hdr_bytes);
        cmsg[16..18].copy_from_slice(&1000u16.to_ne_bytes());
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        for backend in BACKENDS {
            for v6 in [false, true] {
                let ip = |v6| -> std::net::IpAddr {
                    if v6 {
                        Ipv6Addr::LOCALHOST.into()
                    } else {
                        Ipv4Addr::LOCALHOST.into()
                    }
                };
                let rx = UdpSocket::bind((ip(v6), 0)).unwrap();
                rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let tx = UdpSocket::bind((ip(v6), 0)).unwrap();
                let opts = ZcOptions::new().backend(backend);
                let mut zc = ZeroCopySender::with_options(&tx, opts).unwrap();
                let to = rx.local_addr().unwrap();
                let n = zc
                    .send_msg(payload.clone(), Some(&to), &cmsg, Flags::NONE, 7)
                    .unwrap();
                assert_eq!(n, 3000, "{backend:?} v6={v6}");
                let mut got = Vec::new();
                let mut d = [0u8; 4000];
                for _ in 0..3 {
                    let (k, from) = rx.recv_from(&mut d).unwrap();
                    assert_eq!((k, from), (1000, tx.local_addr().unwrap()), "{backend:?}");
                    got.extend_from_slice(&d[..k]);
                }
                assert_eq!(got, payload, "{backend:?} v6={v6}");
                let c = drain(&mut zc);
                assert_eq!(c.len(), 1, "{backend:?}");
                assert_eq!((c[0].user_data, c[0].result), (7, 3000));
                // Without control data: one datagram.
                let n = zc
                    .send_msg(payload.clone(), Some(&to), &[], Flags::NONE, 8)
                    .unwrap();
                assert_eq!(n, 3000);
                assert_eq!(rx.recv(&mut d).unwrap(), 3000);
                let other: SocketAddr = if v6 {
                    (Ipv4Addr::LOCALHOST, to.port()).into()
                } else {
                    (Ipv6Addr::LOCALHOST, to.port()).into()
                };
                if !v6 {
                    let e = zc.send_msg(payload.clone(), Some(&other), &[], Flags::NONE, 9);
                    let e = e.unwrap_err().raw_os_error();
                    assert_eq!(e, Some(libc::EAFNOSUPPORT), "{backend:?}");
                }
                assert_eq!(drain(&mut zc).len(), 1);
                assert_eq!(zc.inflight(), 0);
            }
        }
    }

    /// `send_msg_raw`: null pointers with lengths are `EFAULT` before anything is sent.
    #[test]
    fn send_msg_raw_refuses_null_parts() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut zc =
            ZeroCopySender::with_options(&tx, ZcOptions::new().backend(ZcBackend::Copy)).unwrap();
        let buf = [1u8; 4];
        let iov = [iovec {
            iov_base: buf.as_ptr() as *mut _,
            iov_len: 4,
        }];
        for which in 0..3 {
            // SAFETY: all-zero is a valid msghdr.
            let mut m: msghdr = unsafe { std::mem::zeroed() };
            m.msg_iov = iov.as_ptr() as *mut _;
            m.msg_iovlen = 1;
            match which {
                0 => m.msg_namelen = 16,
                1 => m.msg_controllen = 24,
                _ => m.msg_iov = std::ptr::null_mut(),
            }
            // SAFETY: the non-null parts point at live memory of their lengths.
            let r = unsafe { zc.send_msg_raw(&m, Flags::NONE, 1) };
            assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EFAULT), "{which}");
        }
        assert_eq!(zc.stats().syscalls_send, 0);
    }

    /// The sender holds any `AsFd`: an owned descriptor (the bindings' dup) or a borrowed
    /// stream; `into_inner` hands it back; `completion_fd` is the ring only for io_uring.
    #[test]
    fn senders_hold_owned_or_borrowed_sockets() {
        for backend in BACKENDS {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let dup: OwnedFd = c.as_fd().try_clone_to_owned().unwrap();
            let raw = dup.as_raw_fd();
            let opts = ZcOptions::new().backend(backend);
            let mut zc = ZeroCopySender::with_options(dup, opts).unwrap();
            assert_eq!(zc.as_fd().as_raw_fd(), raw);
            assert_eq!(zc.get_ref().as_raw_fd(), raw);
            let ring = zc.completion_fd().as_raw_fd();
            assert_eq!(ring != raw, backend == ZcBackend::IoUring, "{backend:?}");
            let data = [5u8; 1000];
            assert_eq!(zc.send(data.to_vec(), Flags::MORE, 1).unwrap(), 1000);
            assert_eq!(zc.send(data.to_vec(), Flags::NONE, 2).unwrap(), 1000);
            let mut got = [0u8; 2000];
            std::io::Read::read_exact(&mut s, &mut got).unwrap();
            assert_eq!(drain(&mut zc).len(), 2, "{backend:?}");
            let back: OwnedFd = zc.into_inner();
            assert_eq!(back.as_raw_fd(), raw);
            // Still the same connection.
            let mut f = std::fs::File::from(back);
            std::io::Write::write_all(&mut f, b"x").unwrap();
            let mut one = [0u8; 1];
            std::io::Read::read_exact(&mut s, &mut one).unwrap();
            assert_eq!(&one, b"x");

            // A borrowed stream, on a new connection: the kernel's zerocopy id counter of the
            // first one has moved on, and a new sender cannot read it back.
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut zc = ZeroCopySender::with_options(&c, opts).unwrap();
            assert_eq!(zc.send(data.to_vec(), Flags::DONTWAIT, 3).unwrap(), 1000);
            std::io::Read::read_exact(&mut s, &mut got[..1000]).unwrap();
            assert_eq!(drain(&mut zc)[0].user_data, 3);
        }
    }

    #[test]
    fn senders_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ZeroCopySender<OwnedFd>>();
        check::<ZeroCopySender<BorrowedFd<'static>>>();
    }

    /// The environment variable that makes `uring_enomem_falls_back_to_copies` run its body
    /// (in a child process of its own).
    const MEMLOCK_CHILD: &str = "LOWCOPY_TEST_MEMLOCK_CHILD";

    /// io_uring under the locked-pages limit: a ring made by a thread without `CAP_IPC_LOCK`
    /// charges each SEND_ZC's pages to `RLIMIT_MEMLOCK` and answers `ENOMEM` past it
    /// (io_uring/notif.h). As with `ENOBUFS` on the error queue, the send is retried once and
    /// then made by copy: the caller never sees the error, every send gets exactly one
    /// completion with its user data (`COPIED | FALLBACK` for the copies), and the stats
    /// count each `ENOMEM` and each copy. How: the test runs itself again as a child process
    /// (this test binary, this test only), which drops `CAP_IPC_LOCK` from its capability
    /// sets (capset(2); root has it, and with it no limit applies) and lowers
    /// `RLIMIT_MEMLOCK` before its first ring is made; the parent only checks the child's
    /// verdict, so this process keeps its capabilities and limits.
    #[test]
    fn uring_enomem_falls_back_to_copies() {
        if std::env::var_os(MEMLOCK_CHILD).is_some() {
            memlock_child();
            return;
        }
        if uring::thread_ring().is_err() {
            return; // no io_uring SEND_ZC here
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "zc::tests::uring_enomem_falls_back_to_copies",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(MEMLOCK_CHILD, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed:\n{text}");
        assert!(
            text.contains("memlock child: ok") || text.contains("memlock child: skipped"),
            "the child ran no test:\n{text}"
        );
    }

    /// Drops `CAP_IPC_LOCK` from the effective and permitted sets of the calling process.
    fn drop_ipc_lock() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: c_int,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const VERSION_3: u32 = 0x2008_0522; // _LINUX_CAPABILITY_VERSION_3
        const CAP_IPC_LOCK: u32 = 14;
        let mut h = Header {
            version: VERSION_3,
            pid: 0,
        };
        let mut d = [Data::default(); 2];
        // SAFETY: capget writes two Data for version 3 into `d`.
        let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
        assert_eq!(r, 0, "capget: {}", io::Error::last_os_error());
        d[0].effective &= !(1 << CAP_IPC_LOCK);
        d[0].permitted &= !(1 << CAP_IPC_LOCK);
        // SAFETY: capset reads the header and two Data.
        let r = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) };
        assert_eq!(r, 0, "capset: {}", io::Error::last_os_error());
    }

    /// Sets the soft `RLIMIT_MEMLOCK` (the one the kernel checks), below the hard one.
    fn set_memlock(bytes: u64) {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut l) }, 0);
        l.rlim_cur = bytes.min(l.rlim_max);
        // SAFETY: a valid rlimit; a soft limit up to the hard one needs no privilege.
        let r = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &l) };
        assert_eq!(r, 0, "setrlimit: {}", io::Error::last_os_error());
    }

    /// The body of `uring_enomem_falls_back_to_copies`, in the child process.
    fn memlock_child() {
        drop_ipc_lock();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let opts = ZcOptions::new().backend(ZcBackend::IoUring);
        // The thread's ring, made now: without CAP_IPC_LOCK its own pages are charged too.
        let mut zc = match ZeroCopySender::with_options(&tx, opts) {
            Ok(z) => z,
            Err(e) => {
                println!("memlock child: skipped (no io_uring: {e})");
                return;
            }
        };
        // What the user has locked already (the ring's own pages, at least) is not shown
        // anywhere: find the smallest limit under which a 4 KiB send (1 + 2 pages charged,
        // io_notif_account_mem) goes zerocopy.
        let mut got = [0u8; 40000];
        let mut zerocopy_under = |zc: &mut ZeroCopySender<&UdpSocket>, limit: u64| {
            set_memlock(limit);
            let before = zc.stats().enobufs;
            assert_eq!(
                zc.send([1; 4096].to_vec(), Flags::NONE, 1000).unwrap(),
                4096
            );
            assert_eq!(rx.recv(&mut got).unwrap(), 4096);
            assert_eq!(drain(zc).len(), 1);
            zc.stats().enobufs == before
        };
        let (mut lo, mut hi) = (0u64, 64 << 20);
        assert!(
            zerocopy_under(&mut zc, hi),
            "64 MiB of locked memory is not enough"
        );
        while hi - lo > 4096 {
            let mid = (lo + hi) / 2 / 4096 * 4096;
            if zerocopy_under(&mut zc, mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let used = hi - 3 * 4096;
        // Room for 6 pages: a 16 KiB datagram (4 + 2) goes zerocopy, a 32 KiB one (8 + 2)
        // is refused twice and copied. Loopback notifies before the send returns, so each
        // send finds the room free again.
        set_memlock(used + 6 * 4096);
        let st = zc.stats();
        let (probe_sends, probe_copies, probe_enobufs) = (st.sends, st.copy_sends, st.enobufs);
        let size = |i: u64| if i % 2 == 0 { 16384 } else { 32768 };
        let mut seen = vec![0u32; 200];
        let take = |zc: &mut ZeroCopySender<&UdpSocket>, seen: &mut Vec<u32>| {
            let mut fallbacks = vec![];
            let mut all = drain(zc);
            let mut out = [Completion::default(); 16];
            while let Ok(n @ 1..) = zc.reap(&mut out) {
                all.extend_from_slice(&out[..n]);
            }
            for c in all {
                assert_eq!(c.result, size(c.user_data), "{c:?}");
                seen[c.user_data as usize] += 1;
                if c.flags & FALLBACK != 0 {
                    assert_ne!(c.flags & COPIED, 0, "{c:?}");
                    fallbacks.push(c.user_data);
                }
            }
            fallbacks
        };
        let mut send = |zc: &mut ZeroCopySender<&UdpSocket>, i: u64| {
            let data = vec![i as u8; size(i) as usize];
            assert_eq!(zc.send(data.to_vec(), Flags::NONE, i).unwrap(), data.len());
            assert_eq!(rx.recv(&mut got).unwrap(), data.len());
            assert!(
                got[..data.len()].iter().all(|&b| b == i as u8),
                "datagram {i}"
            );
        };
        for i in 0..100u64 {
            send(&mut zc, i);
        }
        // Other processes of this user that lock memory meanwhile (another run of this test)
        // move the limit's room: the pattern is exact only on a quiet machine, so only
        // a mix of both is asserted, and the counts that follow from it.
        let fallbacks = take(&mut zc, &mut seen);
        let st = zc.stats();
        assert!(
            !fallbacks.is_empty() && fallbacks.len() < 100,
            "{fallbacks:?}"
        );
        let copies = fallbacks.len() as u64;
        if fallbacks != (1..100).step_by(2).collect::<Vec<_>>() {
            println!("memlock child: other lockers meanwhile; copied {fallbacks:?}");
        }
        assert_eq!(st.copy_sends - probe_copies, copies, "{st:?}");
        assert_eq!(st.enobufs - probe_enobufs, 2 * copies, "{st:?}");
        // No room at all: every send is refused twice, then copied.
        set_memlock(0);
        for i in 100..200u64 {
            send(&mut zc, i);
        }
        assert_eq!(take(&mut zc, &mut seen), (100..200).collect::<Vec<_>>());
        let st = zc.stats();
        assert!(
            seen.iter().all(|&n| n == 1),
            "one completion per send: {seen:?}"
        );
        assert_eq!(st.enobufs - probe_enobufs, 2 * copies + 200, "{st:?}");
        assert_eq!(st.copy_sends - probe_copies, copies + 100, "{st:?}");
        assert_eq!(st.sends - probe_sends, 200, "{st:?}");
        assert_eq!(st.completions, st.sends, "{st:?}");
        assert_eq!(zc.inflight(), 0);

        // A blocking TCP send of 1 MiB: refused, then sent whole by one copy.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = vec![0u8; 1 << 20];
            std::io::Read::read_exact(&mut s, &mut all).unwrap();
            all
        });
        let mut zc = ZeroCopySender::with_options(&c, opts).unwrap();
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        assert_eq!(zc.send(data.to_vec(), Flags::NONE, 7).unwrap(), 1 << 20);
        assert_eq!(reader.join().unwrap(), data);
        let c = drain(&mut zc);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].user_data, c[0].result), (7, 1 << 20));
        assert_eq!(c[0].flags, COPIED | FALLBACK);
        let st = zc.stats();
        assert_eq!((st.enobufs, st.copy_sends), (2, 1), "{st:?}");
        println!(
            "memlock child: ok ({} KiB locked before the sends)",
            used / 1024
        );
    }

    /// An event loop that watches the thread's eventfd reaps every sender with sends in flight
    /// after a wakeup: the first reap resets the eventfd and takes in every notification (the
    /// others' go to their inboxes); the others find nothing new and make no syscall (they
    /// made one `read` each: 64 or more here).
    #[test]
    fn reaping_many_senders_after_a_wakeup_resets_the_eventfd_once() {
        if uring::thread_ring().is_err() {
            return; // no io_uring SEND_ZC here
        }
        // 64 MiB of zerocopy pages in flight: without CAP_IPC_LOCK they count against a
        // finite RLIMIT_MEMLOCK, io_uring says ENOMEM and the sends fall back to copies,
        // which complete at once (as zc.json's "needs": "memlock").
        // SAFETY: all-zero is a valid rlimit; getrlimit writes one.
        let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: a live rlimit; geteuid has no preconditions.
        let bound = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } == 0
            && r.rlim_cur != libc::RLIM_INFINITY
            && unsafe { libc::geteuid() } != 0;
        if bound {
            let why = "zerocopy pages in flight count against RLIMIT_MEMLOCK without CAP_IPC_LOCK; this test keeps 64 MiB of them";
            eprintln!("SKIP {why}");
            if let Some(path) = std::env::var_os("LOWCOPY_SKIP_LOG") {
                use std::io::Write;
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                {
                    let _ = writeln!(f, "zc::tests::reaping_many_senders_after_a_wakeup_resets_the_eventfd_once: {why}");
                }
            }
            return;
        }
        const N: usize = 64;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut clients, mut peers) = (Vec::new(), Vec::new());
        for _ in 0..N {
            clients.push(TcpStream::connect(l.local_addr().unwrap()).unwrap());
            peers.push(l.accept().unwrap().0);
        }
        let opts = ZcOptions::new().backend(ZcBackend::IoUring);
        let mut zcs: Vec<_> = clients
            .iter()
            .map(|c| ZeroCopySender::with_options(c, opts).unwrap())
            .collect();
        let efd = zcs[0].completion_fd().as_raw_fd(); // registers the ring's eventfd
                                                      // More than the connection holds: each send's notification waits until the peer has
                                                      // read and acknowledged all of it.
        let data = vec![3u8; 1 << 20];
        let mut sent = Vec::new();
        for (i, zc) in zcs.iter_mut().enumerate() {
            let n = zc.send(data.to_vec(), Flags::DONTWAIT, i as u64).unwrap();
            assert!(n > 0);
            sent.push(n);
        }
        assert!(
            zcs.iter().all(|z| z.inflight() == 1),
            "notified before the peer read"
        );
        let mut got = vec![0u8; 1 << 20];
        for (s, &n) in peers.iter_mut().zip(&sent) {
            std::io::Read::read_exact(s, &mut got[..n]).unwrap();
        }
        // The acks came and the notifications wait (deferred): the eventfd says so.
        let mut p = libc::pollfd {
            fd: efd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut p, 1, 5000) };
        assert_eq!(ready, 1, "the eventfd was not signalled");
        std::thread::sleep(Duration::from_millis(50)); // the other acks
        let before: u64 = zcs.iter().map(|z| z.stats().syscalls_reap).sum();
        let mut out = [Completion::default(); 4];
        let mut got = 0;
        for zc in zcs.iter_mut().filter(|z| z.inflight() > 0) {
            got += zc.reap(&mut out).unwrap();
        }
        let reap_syscalls = zcs.iter().map(|z| z.stats().syscalls_reap).sum::<u64>() - before;
        // About 3 (a reset, an io_uring_enter for the deferred notifications, a reset after
        // it); more when acks still arrive meanwhile, each wave of them one enter and resets.
        assert!(
            reap_syscalls <= N as u64 / 4,
            "{reap_syscalls} syscalls to reap {N} senders"
        );
        for zc in &mut zcs {
            got += drain(zc).len();
        }
        assert_eq!(got, N);
    }

    /// An idle sender is small on every backend: the struct and its reserve's tables. A burst
    /// of 1000 requests held grows the tables; reaping them brings them back to the reserve.
    #[test]
    fn idle_senders_are_small_and_shrink_back_after_a_burst() {
        let base = std::mem::size_of::<ZeroCopySender<OwnedFd>>();
        assert!(base <= 512, "the sender itself: {base} bytes");
        for backend in BACKENDS {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let opts = ZcOptions::new().backend(backend);
            let mut zc =
                ZeroCopySender::with_options(c.as_fd().try_clone_to_owned().unwrap(), opts)
                    .unwrap();
            let idle = zc.tracker.heap_bytes();
            // 20 slots of 32 bytes, and for the error queue 32 ids of 4.
            let want = if backend == ZcBackend::ErrQueue {
                768
            } else {
                640
            };
            assert_eq!(idle, want, "{backend:?}: the default reserve's tables");
            assert!(
                base + idle <= 1536,
                "{backend:?}: {} bytes idle",
                base + idle
            );
            let data = [9u8; 10];
            for i in 0..1000 {
                assert_eq!(zc.send(data.to_vec(), Flags::NONE, i).unwrap(), 10);
            }
            assert!(zc.tracker.heap_bytes() >= 1000 * 32, "{backend:?}: grown");
            let mut got = vec![0u8; 10_000];
            std::io::Read::read_exact(&mut s, &mut got).unwrap();
            let mut n = drain(&mut zc).len();
            let mut out = [Completion::default(); 64];
            loop {
                let k = zc.reap(&mut out).unwrap();
                if k == 0 {
                    break;
                }
                n += k;
            }
            assert_eq!(n, 1000, "{backend:?}");
            // The error queue keeps room for REAP_EVERY requests once it grew (what send_reap
            // holds between two reads): 40 slots and 64 ids.
            let back = if backend == ZcBackend::ErrQueue {
                40 * 32 + 64 * 4
            } else {
                idle
            };
            assert_eq!(
                zc.tracker.heap_bytes(),
                back,
                "{backend:?}: back to the reserve"
            );
            assert!(base + back <= 2048, "{backend:?}: {} bytes", base + back);
        }
    }

    /// An error-queue sender that keeps sending through send_reap holds up to REAP_EVERY
    /// requests between two reads, more than the default reserve: its tables grow once and
    /// then stay, rather than being reallocated (and copied) at every batch.
    #[test]
    fn send_reap_batches_do_not_reallocate_the_tables() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let opts = ZcOptions::new().backend(ZcBackend::ErrQueue);
        let mut zc = ZeroCopySender::with_options(&tx, opts).unwrap();
        let mut out = [Completion::default(); 64];
        let mut got = 0;
        let mut d = [0u8; 100];
        for i in 0..10 * REAP_EVERY as u64 {
            let (n, k) = zc
                .send_reap([1; 100].to_vec(), Flags::NONE, i, &mut out)
                .unwrap();
            assert_eq!(n, 100);
            assert_eq!(rx.recv(&mut d).unwrap(), 100);
            got += k;
        }
        assert!(got >= 9 * REAP_EVERY as usize, "{got}");
        // The slots grew once (20 to 40; the reserve's 32 ids hold a batch), then stayed:
        // shrinking back to the reserve after each read made 20 tables here.
        assert!(zc.tracker.resizes <= 2, "{} tables", zc.tracker.resizes);
    }

    #[test]
    fn options_are_checked() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let bad = [
            ZcOptions::new().max_pending(0),
            ZcOptions::new().reserve(0).max_pending(PENDING_LIMIT + 1),
            ZcOptions::new().reserve(17).max_pending(16),
        ];
        for o in bad {
            let e = ZeroCopySender::with_options(&c, o).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{o:?}");
        }
        let o = ZcOptions::new()
            .reserve(PENDING_LIMIT)
            .max_pending(PENDING_LIMIT);
        let z = ZeroCopySender::with_options(&c, o.backend(ZcBackend::Copy)).unwrap();
        // 1,310,720 slots of 32 bytes (2^20 and a quarter); the copy backend makes no ids.
        assert_eq!(z.tracker.heap_bytes(), 1310720 * 32);
        let d = ZcOptions::default();
        assert_eq!((d.reserve, d.max_pending), (DEFAULT_RESERVE, MAX_PENDING));
    }

    #[test]
    fn options_from_raw() {
        let o = ZcOptions::from_raw(2, 0).unwrap();
        assert_eq!(o, ZcOptions::new().backend(ZcBackend::IoUring));
        assert!(ZcOptions::from_raw(0, ADAPTIVE).unwrap().adaptive);
        for (b, f) in [(4, 0), (0, 2), (0, u32::MAX)] {
            let e = ZcOptions::from_raw(b, f).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        }
        assert_eq!(ZcOptions::default(), ZcOptions::new());
    }

    #[test]
    fn backend_from_u32() {
        assert_eq!(ZcBackend::try_from(2).unwrap(), ZcBackend::IoUring);
        assert_eq!(
            ZcBackend::try_from(4).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn advance_walks_iovecs() {
        let (a, b) = ([0u8; 4], [0u8; 6]);
        let mut iov = [
            iovec {
                iov_base: a.as_ptr() as *mut _,
                iov_len: 4,
            },
            iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: 6,
            },
        ];
        let mut first = 0;
        advance(&mut iov, &mut first, 5);
        assert_eq!((first, iov[1].iov_len), (1, 5));
        advance(&mut iov, &mut first, 5);
        assert_eq!(first, 2);
    }

    #[test]
    fn adaptive_needs_a_streak() {
        let mut a = Adaptive {
            enabled: true,
            ..Adaptive::default()
        };
        a.note(true, ADAPTIVE_AFTER - 1);
        a.note(false, 1);
        assert!(!a.off);
        a.note(true, ADAPTIVE_AFTER);
        assert!(a.off);
        let mut a = Adaptive::default();
        a.note(true, 100);
        assert!(!a.off, "only with the ADAPTIVE flag");
    }
}
