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

mod adaptive;
mod addr;
mod batch;
mod buf;
mod close;
mod detached;
mod errqueue;
mod options;
mod polled;
mod ring_send;
mod stats;
#[cfg(test)]
mod tests;
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
use adaptive::Adaptive;
use addr::RawAddr;
pub use buf::{Owned, SendError, Slice, ZcBuf};
pub use detached::DetachedWait;
use errqueue::{enable_so_zerocopy, plain_engine};
pub use options::*;
use ring_send::{apply_notif, Ring};
pub use stats::{Batch, ZcStats};
pub use tracker::{Completion, COPIED, FALLBACK};
use tracker::{SlotId, Tracker};
pub use uring::{RING_CQ_ENTRIES, RING_SQ_ENTRIES};

/// The completion tracker, for fuzz/ only (cargo feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use super::tracker::{RangeOutcome, SlotId, Tracker};
}

enum Engine {
    ErrQueue,
    IoUring(Ring),
    Copy,
}

/// Zerocopy sends over one socket, with per-send `user_data` completions.
///
/// The sender holds the socket as `F`: a [`BorrowedFd`], an [`OwnedFd`](std::os::fd::OwnedFd),
/// a `&TcpStream`, a `UdpSocket`, anything that implements [`AsFd`]; lowcopy closes it only by
/// dropping `F`.
// doc-source: zc.one_per_socket
/// Create one sender per socket, before any other `MSG_ZEROCOPY` send on it, and keep it for
/// the socket's life: the kernel's id counter cannot be read back, so on the error queue a
/// second sender on the same socket (beside the first, after it was closed, or in a forked
/// child) would number its sends from 0 while the kernel goes on from where the first left
/// off, and take the first sender's notifications for its own: a completion could hand a
/// buffer back before the kernel sent it. So an error-queue sender is refused (`EBUSY`) on a
/// socket whose `SO_ZEROCOPY` is set already, and AUTO picks io_uring or copies there; the
/// io_uring backend has no such counter.
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
    /// A datagram socket's last send was `MSG_MORE`: a datagram is pending (corked), and an
    /// empty send appends nothing to it, so the kernel numbers no notification for it.
    corked: bool,
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
    /// set afterwards; it only matters to `MSG_ZEROCOPY` sends), after a `getsockopt` that
    /// finds it unset.
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
    /// `kernel.io_uring_disabled` forbids it, `ENOSYS`, `ENOMEM`, `EMFILE`), `EBUSY` (an
    /// explicit error-queue backend on a socket whose `SO_ZEROCOPY` is set already: see the
    /// sender's one-per-socket rule).
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
            corked: false,
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
            corked: _,
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
        self.send_msg(buf, None, &[], flags, user_data)
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

    /// [`ZeroCopySender::send_raw`] to a destination address (`None`: the connected peer):
    /// the raw entry point for callers that keep their own iovecs and have the address as a
    /// [`SocketAddr`] (the bindings); results and errors as [`ZeroCopySender::send_msg`].
    ///
    /// # Errors
    /// As [`ZeroCopySender::send_msg`].
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_raw`].
    pub unsafe fn send_raw_to(
        &mut self,
        iov: &[iovec],
        addr: Option<&SocketAddr>,
        flags: Flags,
        user_data: u64,
    ) -> io::Result<usize> {
        let name = addr.map(RawAddr::from);
        let (np, nl) = name
            .as_ref()
            .map_or((std::ptr::null(), 0), |n| (n.as_ptr(), n.len()));
        // SAFETY: forwarded caller guarantees; `name` lives for the call; no control data.
        unsafe { self.send_parts(iov, np, nl, std::ptr::null(), 0, flags, user_data) }
            .map(|(n, _)| n)
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
    #[inline]
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

    /// `EEXIST` (`EIO`) for an io_uring sender joined to another thread's (a retired) ring:
    /// the same answer whether or not the call would need the ring this time.
    fn check_thread(&self) -> io::Result<()> {
        match &self.engine {
            Engine::IoUring(r) => r.joined().map_or(Ok(()), |b| b.check_owner()),
            _ => Ok(()),
        }
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

    #[inline]
    fn pop(&mut self, out: &mut [Completion]) -> usize {
        if !self.held.is_empty() {
            let mut it = out.iter_mut();
            return self.pop_with(it.len(), &mut |c, _| {
                if let Some(o) = it.next() {
                    *o = c;
                }
            });
        }
        // No send of this sender ever owned a buffer (the C ABI's, the bindings'): the plain
        // copy out of the ready queue, no lookup per completion.
        let n = self.tracker.pop_ready(out);
        self.stats.completions += n as u64;
        self.stats.completions_copied +=
            out[..n].iter().filter(|c| c.flags & COPIED != 0).count() as u64;
        n
    }

    /// Pops up to `max` ready completions to `f`, each with what its send owned.
    #[inline]
    fn pop_with(
        &mut self,
        max: usize,
        f: &mut (impl FnMut(Completion, Option<Owned<B>>) + ?Sized),
    ) -> usize {
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
        // SAFETY: IoSlice is ABI-compatible with struct iovec (std documents it for Unix);
        // the kernel only reads the buffers.
        let iov = unsafe { std::slice::from_raw_parts(bufs.as_ptr().cast::<iovec>(), bufs.len()) };
        // SAFETY: forwarded caller guarantees.
        unsafe { self.send_reap_raw(iov, flags, user_data, out) }
    }

    /// [`ZeroCopySender::send_reap`] over raw iovecs (the C ABI's entry point); results as
    /// [`ZeroCopySender::send_reap`].
    ///
    /// # Errors
    /// As [`ZeroCopySender::send_reap`].
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_raw`].
    #[inline]
    pub unsafe fn send_reap_raw(
        &mut self,
        iov: &[iovec],
        flags: Flags,
        user_data: u64,
        out: &mut [Completion],
    ) -> io::Result<(usize, usize)> {
        // SAFETY: forwarded caller guarantees.
        if let Some(r) = unsafe { self.copy_reap(iov, flags, user_data, out) } {
            return r;
        }
        // SAFETY: forwarded caller guarantees.
        let n = unsafe { self.send_raw(iov, flags, user_data) }?;
        Ok((n, self.after_send_reap(out)))
    }

    /// `send_reap`'s path for a send that will be a plain copy (the copy backend, or the
    /// adaptive option has stopped asking for zerocopy) while nothing is in flight or ready:
    /// its completion is the next one out, so it goes to `out[0]` without passing through
    /// the tracker. The same send, completion, stats and errors as the general path (the
    /// zc.json tables run both); `None` when the general path must run.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_raw`].
    #[inline]
    unsafe fn copy_reap(
        &mut self,
        iov: &[iovec],
        flags: Flags,
        user_data: u64,
        out: &mut [Completion],
    ) -> Option<io::Result<(usize, usize)>> {
        let copies = match &self.engine {
            Engine::Copy => true,
            Engine::ErrQueue => self.adaptive.off,
            // The thread check answers as the general path does; a sender that never joined
            // a ring has never sent zerocopy, so it cannot be off.
            Engine::IoUring(r) => self.adaptive.off && r.joined().is_some(),
        };
        if !copies || out.is_empty() || !self.tracker.idle() || self.settled || iov.len() > IOV_MAX
        {
            return None;
        }
        // SAFETY: forwarded caller guarantees.
        Some(unsafe { self.copy_reap_now(iov, flags, user_data, out) })
    }

    /// # Safety
    /// As [`ZeroCopySender::send_raw`].
    #[inline(never)]
    unsafe fn copy_reap_now(
        &mut self,
        iov: &[iovec],
        flags: Flags,
        user_data: u64,
        out: &mut [Completion],
    ) -> io::Result<(usize, usize)> {
        self.check_thread()?;
        // SAFETY: all-zero is a valid msghdr (no name, no control).
        let mut msg: msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut iovec;
        msg.msg_iovlen = iov.len() as _;
        self.stats.syscalls_send += 1;
        // A library must not raise SIGPIPE: EPIPE is returned instead.
        let raw = flags.to_raw() | libc::MSG_NOSIGNAL;
        // SAFETY: msg points at the caller's iovecs (forwarded guarantee).
        let n = unsafe { sys::sendmsg(self.fd.as_fd(), &msg, raw) }?;
        self.sends_since_reap += 1;
        if n == 0 {
            return Ok((0, 0)); // no bytes, no completion
        }
        let fallback = if matches!(self.engine, Engine::Copy) && !self.adaptive.off {
            0
        } else {
            FALLBACK
        };
        self.adaptive.note_copy_send();
        self.stats.copy_sends += 1;
        self.stats.sends += 1;
        self.stats.bytes += n as u64;
        self.stats.completions += 1;
        self.stats.completions_copied += 1;
        out[0] = Completion {
            user_data,
            result: n as i64,
            flags: COPIED | fallback,
        };
        Ok((n, 1))
    }

    #[inline]
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

/// The iovec of a byte slice.
fn iovec_of(b: &[u8]) -> iovec {
    iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    }
}
