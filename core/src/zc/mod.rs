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
//!   the request's own user_data. With `IORING_SETUP_DEFER_TASKRUN` notifications are posted
//!   while the next send enters the ring (no syscall of their own) and never interrupt the
//!   thread's other syscalls; the first thread that sends owns the ring (`EEXIST` elsewhere).
//! - `Copy`: a plain `sendmsg`; the completion is ready when the send returns.
//!
//! A notification means "the buffer may be reused", not "the data was delivered": TCP
//! notifies only after the peer acknowledged, so never block a send on completions.

mod tracker;
mod uring;

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use libc::{c_int, iovec, msghdr};

use crate::sys::{self, errno, getsockopt_int, poll_one, setsockopt_int, IOV_MAX};
use crate::wait::Waiter;
pub use tracker::{Completion, COPIED, FALLBACK};
use tracker::{SlotId, Tracker};

/// Which mechanism sends (`LOWCOPY_ZC_*` in C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ZcBackend {
    /// io_uring where SEND_ZC works on this socket, else the error queue where
    /// `SO_ZEROCOPY` works, else copy.
    Auto = 0,
    /// `SO_ZEROCOPY` + `MSG_ZEROCOPY`, completions from `MSG_ERRQUEUE`.
    ErrQueue = 1,
    /// io_uring `SEND_ZC` / `SENDMSG_ZC`.
    IoUring = 2,
    /// Plain copying `sendmsg`.
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

/// Option flag for [`ZeroCopySender::new`]: stop asking for zerocopy after
/// [`ADAPTIVE_AFTER`] consecutive completions that the kernel copied anyway (loopback, veth,
/// devices without scatter-gather), the way msg_zerocopy.rst suggests. Sends in flight are
/// still reaped; later sends are plain copies whose completion is ready at once.
pub const ADAPTIVE: u32 = 1;
/// Consecutive copied completions after which [`ADAPTIVE`] stops asking for zerocopy.
pub const ADAPTIVE_AFTER: u32 = 16;
/// Requests that may be held at once: in flight or ready but not yet reaped.
pub const MAX_PENDING: usize = 4096;
/// Zerocopy ids (error-queue backend) that may be in flight at once; past that, sends fall
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
/// Flags a send accepts from the caller. `MSG_NOSIGNAL` is always added: a library must not
/// raise SIGPIPE; `EPIPE` is returned instead.
const SEND_FLAGS: c_int = libc::MSG_DONTWAIT | libc::MSG_MORE | libc::MSG_NOSIGNAL;

/// Counters of a [`ZeroCopySender`]. Byte counts in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZcStats {
    /// Send calls that returned > 0.
    pub sends: u64,
    /// Bytes those sends accepted.
    pub bytes: u64,
    /// Kernel sends that asked for zerocopy (`MSG_ZEROCOPY` or SEND_ZC).
    pub zerocopy_sends: u64,
    /// Kernel sends that copied (copy backend, fallbacks, adaptive mode).
    pub copy_sends: u64,
    /// Completions handed to the caller.
    pub completions: u64,
    /// Of those, completions with [`COPIED`].
    pub completions_copied: u64,
    /// `ENOBUFS` from a zerocopy send (optmem or locked-pages limit), each answered by a copy.
    pub enobufs: u64,
    /// Sends that fell back to a copy because the id window was full.
    pub window_full: u64,
    /// Syscalls made to send (sendmsg, io_uring_enter for a send).
    pub syscalls_send: u64,
    /// Syscalls made to collect completions (error-queue reads, waits).
    pub syscalls_reap: u64,
    /// Error-queue entries that were not zerocopy notifications (timestamps, ICMP), skipped.
    pub errqueue_other: u64,
    /// Notified ids that matched no send in flight, ignored.
    pub unexpected_ids: u64,
    /// 1 once [`ADAPTIVE`] stopped asking for zerocopy.
    pub zerocopy_off: u64,
}

/// Buffers for reading the error queue, allocated once.
struct ErrQueue {
    msgs: Vec<libc::mmsghdr>,
    control: Vec<[u8; ERRQ_CONTROL]>,
}

// SAFETY: the raw pointers in `msgs` only ever point into `control`, which moves with it,
// and they are rewritten before every use; nothing is shared with another thread.
unsafe impl Send for ErrQueue {}

impl ErrQueue {
    fn new() -> Self {
        ErrQueue {
            // SAFETY: all-zero is a valid mmsghdr (null pointers, zero lengths).
            msgs: vec![unsafe { std::mem::zeroed() }; ERRQ_BATCH],
            control: vec![[0; ERRQ_CONTROL]; ERRQ_BATCH],
        }
    }
}

enum Engine {
    ErrQueue(ErrQueue),
    IoUring(Box<uring::Uring>),
    Copy,
}

/// Zerocopy sends over one socket, with per-send `user_data` completions.
///
/// The socket is borrowed, never closed; it must stay open while the sender lives. Create
/// one sender per socket, before any other `MSG_ZEROCOPY` send on it: the kernel's id
/// counter cannot be read back. Not for concurrent use; distinct senders are independent.
pub struct ZeroCopySender<'fd> {
    fd: BorrowedFd<'fd>,
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
}

impl std::fmt::Debug for ZeroCopySender<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroCopySender")
            .field("backend", &self.backend())
            .field("inflight", &self.inflight())
            .finish()
    }
}

/// Whether MSG_ZEROCOPY / SEND_ZC can apply: TCP or UDP over IPv4/IPv6 (net/core/sock.c
/// `SO_ZEROCOPY` check; io_uring needs the socket's SOCK_SUPPORT_ZC, set by TCP and UDP).
fn zerocopy_capable(fd: BorrowedFd<'_>) -> io::Result<(bool, bool)> {
    let domain = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    let ty = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)?;
    let stream = ty == libc::SOCK_STREAM;
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

fn enable_so_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
    // Read it back: a filter (seccomp, BPF sockopt) could have swallowed the request.
    match getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY)? {
        1 => Ok(()),
        _ => Err(errno(libc::EOPNOTSUPP)),
    }
}

impl<'fd> ZeroCopySender<'fd> {
    /// Creates a sender on `fd` with `backend` and option `flags` ([`ADAPTIVE`]).
    ///
    /// Allocates everything the data path needs (tracking for [`MAX_PENDING`] requests, the
    /// io_uring ring or the error-queue buffers). The error-queue backend sets `SO_ZEROCOPY`
    /// on the socket (left set afterwards; it only matters to `MSG_ZEROCOPY` sends).
    ///
    /// Errors: `EINVAL` (unknown flags), `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (an explicit
    /// zerocopy backend on a socket that has none: AF_UNIX, MPTCP, raw, packet), io_uring setup
    /// errors for an explicit `IoUring` (`EPERM` when `kernel.io_uring_disabled`, `ENOSYS`,
    /// `ENOMEM`).
    pub fn new(fd: BorrowedFd<'fd>, backend: ZcBackend, flags: u32) -> io::Result<Self> {
        if flags & !ADAPTIVE != 0 {
            return Err(errno(libc::EINVAL));
        }
        let (capable, stream) = zerocopy_capable(fd)?;
        let engine = match backend {
            ZcBackend::Copy => Engine::Copy,
            ZcBackend::ErrQueue | ZcBackend::IoUring if !capable => {
                return Err(errno(libc::EOPNOTSUPP))
            }
            ZcBackend::ErrQueue => {
                enable_so_zerocopy(fd)?;
                Engine::ErrQueue(ErrQueue::new())
            }
            ZcBackend::IoUring => Engine::IoUring(Box::new(uring::Uring::new(MAX_PENDING)?)),
            ZcBackend::Auto => Self::auto_engine(fd, capable),
        };
        Ok(ZeroCopySender {
            fd,
            stream,
            engine,
            tracker: Tracker::new(MAX_PENDING, MAX_IDS),
            adaptive: Adaptive {
                enabled: flags & ADAPTIVE != 0,
                ..Adaptive::default()
            },
            sends_since_reap: 0,
            uring_full: false,
            waiter: Waiter::default(),
            stats: ZcStats::default(),
        })
    }

    fn auto_engine(fd: BorrowedFd<'_>, capable: bool) -> Engine {
        if !capable {
            return Engine::Copy;
        }
        if let Ok(u) = uring::Uring::new(MAX_PENDING) {
            return Engine::IoUring(Box::new(u));
        }
        match enable_so_zerocopy(fd) {
            Ok(()) => Engine::ErrQueue(ErrQueue::new()),
            Err(_) => Engine::Copy,
        }
    }

    /// The backend in use (never `Auto`).
    pub fn backend(&self) -> ZcBackend {
        match self.engine {
            Engine::ErrQueue(_) => ZcBackend::ErrQueue,
            Engine::IoUring(_) => ZcBackend::IoUring,
            Engine::Copy => ZcBackend::Copy,
        }
    }

    /// Sends whose completion has not arrived yet.
    pub fn inflight(&self) -> usize {
        self.tracker.inflight()
    }

    /// The counters so far.
    pub fn stats(&self) -> ZcStats {
        let mut s = self.stats;
        s.zerocopy_off = self.adaptive.off as u64;
        s
    }

    /// The fd to watch for completions: the socket for the error queue (`EPOLLERR` is always
    /// reported), the ring for io_uring (`EPOLLIN`). Copy completions are ready when the send
    /// returns; for the copy backend this is the socket, which never needs watching.
    pub fn pollfd(&self) -> RawFd {
        match &self.engine {
            Engine::IoUring(u) => u.fd(),
            _ => self.fd.as_raw_fd(),
        }
    }

    /// Sends `bufs` with `flags` (`MSG_DONTWAIT`, `MSG_MORE`, `MSG_NOSIGNAL`); returns bytes
    /// accepted. Exactly one completion carrying `user_data` follows every send that returned
    /// > 0; none follows a failed or zero-byte send.
    ///
    /// As `send(2)`: a blocking send on a stream socket accepts everything unless a signal or
    /// `SO_SNDTIMEO` stops it part way (then the part sent is returned: send the rest), a
    /// non-blocking one accepts what fits, a datagram is one send. (The io_uring backend
    /// cancels its request on a signal, returning what went or `EINTR`; it does not honour
    /// `SO_SNDTIMEO`.) `ENOBUFS` from a zerocopy
    /// send (optmem or locked-pages limit) is never returned: completions are collected and
    /// the send is retried, then made by copy. The caller must not modify the buffers until
    /// the completion is reaped.
    ///
    /// Errors: `EINVAL` (flags), `EBUSY` ([`MAX_PENDING`] requests unreaped: reap first),
    /// `EMSGSIZE` (more than `IOV_MAX` iovecs, or a datagram too large), and the socket's own
    /// send errors (`EAGAIN`, `EPIPE`, `ECONNRESET`, `EDESTADDRREQ`, ...).
    pub fn send(
        &mut self,
        bufs: &[IoSlice<'_>],
        flags: c_int,
        user_data: u64,
    ) -> io::Result<usize> {
        // SAFETY: IoSlice is ABI-compatible with struct iovec (std documents it for Unix);
        // the kernel only reads the buffers.
        let iov = unsafe { std::slice::from_raw_parts(bufs.as_ptr().cast::<iovec>(), bufs.len()) };
        // SAFETY: the iovecs describe the caller's readable buffers.
        unsafe { self.send_iov(iov, flags, user_data) }
    }

    /// [`ZeroCopySender::send`] over raw iovecs (the C ABI's `sendv` entry point); results and
    /// errors as [`ZeroCopySender::send`].
    ///
    /// # Safety
    /// The iovecs must describe readable memory that stays unmodified until the completion.
    pub unsafe fn send_iov(
        &mut self,
        iov: &[iovec],
        flags: c_int,
        user_data: u64,
    ) -> io::Result<usize> {
        let null = std::ptr::null();
        // SAFETY: forwarded caller guarantees; no name, no control data.
        unsafe { self.send_msg(iov, null, 0, null, 0, flags, user_data) }
    }

    /// [`ZeroCopySender::send`] with a destination address and control messages, from raw
    /// parts (the C ABI's `sendmsg` entry point); results and errors as
    /// [`ZeroCopySender::send`] (a bad address: the kernel's `EINVAL`, `EAFNOSUPPORT`, ...).
    ///
    /// # Safety
    /// The iovecs must describe readable memory that stays unmodified until the completion;
    /// `name` (`namelen` bytes) and `control` (`controllen` bytes) must be valid for the call
    /// (or null with length 0).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send_msg(
        &mut self,
        iov: &[iovec],
        name: *const libc::c_void,
        namelen: libc::socklen_t,
        control: *const libc::c_void,
        controllen: usize,
        flags: c_int,
        user_data: u64,
    ) -> io::Result<usize> {
        if flags & !SEND_FLAGS != 0 {
            return Err(errno(libc::EINVAL));
        }
        // What sendmsg(2) answers (move_addr_to_kernel, ____sys_sendmsg); io_uring's
        // SENDMSG_ZC would take a NULL control buffer with a length and send anyway.
        if name.is_null() && namelen > 0 || control.is_null() && controllen > 0 {
            return Err(errno(libc::EFAULT));
        }
        if iov.len() > IOV_MAX {
            return Err(errno(libc::EMSGSIZE));
        }
        let flags = flags | libc::MSG_NOSIGNAL;
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
        if matches!(r, Ok(n) if n > 0) {
            self.stats.sends += 1;
            self.stats.bytes += *r.as_ref().unwrap() as u64;
        }
        r
    }

    fn begin(&mut self, user_data: u64) -> io::Result<SlotId> {
        if let Some(s) = self.tracker.begin(user_data) {
            return Ok(s);
        }
        // Every slot is in flight or unreaped: collect what has completed, then retry.
        self.collect()?;
        self.tracker
            .begin(user_data)
            .ok_or_else(|| errno(libc::EBUSY))
    }

    /// Error-queue and copy sends: one `sendmsg`, as `send(2)` would make it; after `ENOBUFS`
    /// (zerocopy state in flight exhausted optmem or `RLIMIT_MEMLOCK`) completions are
    /// collected, since they release it, and the send retried once, then made by copy.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_msg`].
    unsafe fn send_plain(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        iov: &[iovec],
        flags: c_int,
    ) -> io::Result<usize> {
        msg.msg_iov = iov.as_ptr() as *mut iovec;
        msg.msg_iovlen = iov.len() as _;
        let errqueue = matches!(self.engine, Engine::ErrQueue(_));
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
            match unsafe { sys::sendmsg(self.fd, msg, flags | libc::MSG_ZEROCOPY) } {
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
        let n = unsafe { sys::sendmsg(self.fd, msg, flags) }?;
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
    /// As [`ZeroCopySender::send_msg`].
    unsafe fn send_uring(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        user: &[iovec],
        flags: c_int,
    ) -> io::Result<usize> {
        let blocking = flags & libc::MSG_DONTWAIT == 0;
        let flags = flags | libc::MSG_DONTWAIT;
        if let Engine::IoUring(u) = &self.engine {
            u.check_owner()?; // before any wait: another thread is refused at once
        }
        if self.uring_full {
            // A SEND_ZC that fails still posts a notification, and on TCP the kernel can
            // chain it to the notification of unacknowledged data (io_link_skb), holding a
            // slot until the peer acks. So after an EAGAIN, ask poll before the next request:
            // a caller retrying a full socket gets EAGAIN from poll, not a held slot.
            let ms = if blocking { -1 } else { 0 };
            let waiter = &mut self.waiter;
            if waiter.wait(self.fd, libc::POLLOUT, ms, &mut self.stats.syscalls_send)? == 0 {
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
        let (mut sent, mut first) = (0usize, 0usize);
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
                    advance(iov, &mut first, n);
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    self.uring_full = true;
                    if !blocking {
                        return Err(e); // (a non-blocking call returns after its first request)
                    }
                }
                // After partial progress the error is the next call's, as with send(2).
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => return Err(e),
            }
            // A non-empty error queue (ICMP errors, timestamps: this backend does not read
            // it) does not end this sleep (crate::wait).
            match self
                .waiter
                .wait(self.fd, libc::POLLOUT, -1, &mut self.stats.syscalls_send)
            {
                Ok(_) => self.uring_full = false,
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => return Err(e),
            }
        }
    }

    /// One SEND_ZC / SENDMSG_ZC request for `slot`, waiting for its result (not for its
    /// notification); records what the kernel accepted and whether a notification follows.
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_msg`].
    unsafe fn uring_once(
        &mut self,
        slot: SlotId,
        msg: &mut msghdr,
        flags: c_int,
    ) -> io::Result<usize> {
        let Engine::IoUring(u) = &mut self.engine else {
            unreachable!()
        };
        let (tracker, adaptive) = (&mut self.tracker, &mut self.adaptive);
        let unexpected = &mut self.stats.unexpected_ids;
        let mut on_notif = |n| apply_notif(tracker, adaptive, unexpected, n);
        let syscalls = &mut self.stats.syscalls_send;
        // SAFETY: forwarded caller guarantees on msg and the buffers.
        let sr = unsafe { u.send(self.fd, msg, flags, slot, syscalls, &mut on_notif) }?;
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
    pub fn collect(&mut self) -> io::Result<()> {
        self.collect_with(true)
    }

    /// `enter`: may the io_uring backend make a syscall to post deferred notifications?
    /// (`send_reap` says no: the next send's own `io_uring_enter` posts them.)
    fn collect_with(&mut self, enter: bool) -> io::Result<()> {
        self.sends_since_reap = 0;
        match &mut self.engine {
            Engine::ErrQueue(_) => self.read_errqueue(),
            Engine::IoUring(u) => {
                let (tracker, adaptive) = (&mut self.tracker, &mut self.adaptive);
                let unexpected = &mut self.stats.unexpected_ids;
                u.drain(
                    &mut |n| apply_notif(tracker, adaptive, unexpected, n),
                    enter,
                    &mut self.stats.syscalls_reap,
                )
            }
            Engine::Copy => Ok(()),
        }
    }

    /// Drains the error queue in batches of [`ERRQ_BATCH`] with `recvmmsg`.
    fn read_errqueue(&mut self) -> io::Result<()> {
        let Engine::ErrQueue(q) = &mut self.engine else {
            return Ok(());
        };
        while self.tracker.ids_inflight() > 0 {
            for (m, c) in q.msgs.iter_mut().zip(q.control.iter_mut()) {
                // SAFETY: all-zero is a valid mmsghdr.
                *m = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = c.len() as _;
            }
            self.stats.syscalls_reap += 1;
            // SAFETY: each message points at its own control buffer and has no iovecs.
            let r = unsafe {
                sys::recvmmsg(
                    self.fd,
                    &mut q.msgs,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                )
            };
            let n = match r {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(()),
                Err(e) => return Err(e),
            };
            for m in &q.msgs[..n] {
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
    /// first). Errors: error-queue read errors; `EEXIST` on io_uring from a thread other than
    /// the first that sent.
    pub fn reap(&mut self, out: &mut [Completion]) -> io::Result<usize> {
        if self.tracker.ready() < out.len() && self.tracker.inflight() > 0 {
            self.collect()?;
        }
        Ok(self.pop(out))
    }

    fn pop(&mut self, out: &mut [Completion]) -> usize {
        let n = self.tracker.pop_ready(out);
        self.stats.completions += n as u64;
        self.stats.completions_copied +=
            out[..n].iter().filter(|c| c.flags & COPIED != 0).count() as u64;
        n
    }

    /// Sends like [`ZeroCopySender::send`], then moves completions that are ready into
    /// `out` in the same call: the "user argument" of the MSG_ZEROCOPY_UARG proposal. Reads
    /// the error queue at most once per [`REAP_EVERY`] sends (or when the tracking table
    /// runs low); io_uring completions cost no syscall. Returns (bytes accepted, completions
    /// written). Errors as [`ZeroCopySender::send`], and then nothing is written to `out`.
    /// Once the send went out its bytes are reported whatever happens next: a failure to
    /// collect completions after it is left to the next [`ZeroCopySender::reap`] or
    /// [`ZeroCopySender::wait`], which meet it again.
    pub fn send_reap(
        &mut self,
        bufs: &[IoSlice<'_>],
        flags: c_int,
        user_data: u64,
        out: &mut [Completion],
    ) -> io::Result<(usize, usize)> {
        let n = self.send(bufs, flags, user_data)?;
        Ok((n, self.after_send_reap(out)))
    }

    /// [`ZeroCopySender::send_reap`] over raw iovecs (the C ABI's entry point); results and
    /// errors as [`ZeroCopySender::send_reap`].
    ///
    /// # Safety
    /// As [`ZeroCopySender::send_msg`].
    pub unsafe fn send_reap_iov(
        &mut self,
        iov: &[iovec],
        flags: c_int,
        user_data: u64,
        out: &mut [Completion],
    ) -> io::Result<(usize, usize)> {
        // SAFETY: forwarded caller guarantees.
        let n = unsafe { self.send_iov(iov, flags, user_data) }?;
        Ok((n, self.after_send_reap(out)))
    }

    fn after_send_reap(&mut self, out: &mut [Completion]) -> usize {
        self.sends_since_reap += 1;
        let low =
            self.tracker.room() < MAX_PENDING / 4 || self.tracker.ids_inflight() > MAX_IDS * 3 / 4;
        let due = match self.engine {
            Engine::ErrQueue(_) => self.sends_since_reap >= REAP_EVERY || low,
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

    /// Waits up to `timeout_ms` (-1: no limit, 0: just check; below -1: `EINVAL`) until a
    /// completion is ready. A signal ends the wait with `EINTR` (poll is never restarted).
    /// Returns the number ready to reap; `Ok(0)` at once when nothing is in flight (it never
    /// waits for a notification that cannot come). Errors: `ETIMEDOUT` when sends are in
    /// flight and none completed in time; a pending socket error (`ECONNRESET`, ...) when the
    /// socket reports one instead of a completion.
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<usize> {
        if timeout_ms < -1 {
            return Err(errno(libc::EINVAL));
        }
        let deadline = (timeout_ms >= 0).then(|| {
            std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms as u64)
        });
        loop {
            if self.tracker.ready() == 0 && self.tracker.inflight() > 0 {
                self.collect()?;
            }
            if self.tracker.ready() > 0 || self.tracker.inflight() == 0 {
                return Ok(self.tracker.ready());
            }
            let left = match deadline {
                None => -1,
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(l) if !l.is_zero() => l.as_millis().max(1).min(i32::MAX as u128) as i32,
                    _ => return Err(errno(libc::ETIMEDOUT)),
                },
            };
            match &mut self.engine {
                Engine::IoUring(u) => {
                    if !u.wait(left, &mut self.stats.syscalls_reap)? {
                        return Err(errno(libc::ETIMEDOUT));
                    }
                }
                Engine::ErrQueue(_) => {
                    self.stats.syscalls_reap += 1;
                    // POLLERR is reported for a non-empty error queue whatever we ask for.
                    let ev = poll_one(self.fd, 0, left)?;
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
        match getsockopt_int(self.fd, libc::SOL_SOCKET, libc::SO_ERROR)? {
            0 if ev & libc::POLLHUP != 0 => Err(errno(libc::EPIPE)),
            0 => Ok(()),
            e => Err(errno(e)),
        }
    }
}

impl Drop for ZeroCopySender<'_> {
    /// Collects what already completed and forgets the rest: their buffers stay pinned by
    /// the kernel (memory-safe), but the caller is no longer told when they are reusable.
    fn drop(&mut self) {
        let _ = self.collect();
    }
}

/// The [`ADAPTIVE`] option's state: consecutive copied completions, and whether zerocopy
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
