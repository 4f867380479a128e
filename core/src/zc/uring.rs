//! io_uring backend: `IORING_OP_SEND_ZC` (Linux 6.0) and `IORING_OP_SENDMSG_ZC` (6.1) on one
//! ring per thread, shared by every sender that thread uses.
//!
//! # The shared ring
//!
//! io_uring is built around one ring serving many sockets (liburing's model); a ring per
//! connection would multiply its memory, locked pages and descriptor by the connection count.
//! So each thread has at most one ring, made the first time a sender is created or used on that
//! thread and kept until the thread exits (and, past that, until the last sender bound to it is
//! gone): [`RING_CQ_ENTRIES`] completion entries and [`RING_SQ_ENTRIES`] submission entries,
//! about 130 KiB of kernel memory mapped into the process, set once per thread whatever the
//! number of senders. A sender joins a ring when it is first used (its first send, wait, or
//! `completion_fd`) and belongs to that thread from then on.
//!
//! The ring is set up with `IORING_SETUP_DEFER_TASKRUN` (6.1): notifications are posted only
//! when the owning thread enters the ring (each send does), never by interrupting it. Without
//! it the kernel delivers them as task work that makes the thread's unrelated blocking
//! syscalls (a `recv` with `SO_RCVTIMEO`, `epoll_wait`) fail with `EINTR`. Its price,
//! `IORING_SETUP_SINGLE_ISSUER`: only the thread that made the ring may enter it, hence one
//! ring per thread and a sender that belongs to one thread (`EEXIST` from any other).
//!
//! Routing. Each sender bound to a ring has a route: a 24-bit index into the thread's route
//! table and an 8-bit generation. A request's `user_data` is `generation << 56 | route << 32 |
//! slot` (the sender's request slot), and its notification CQE carries the same value back. A
//! thread makes one request at a time (each send waits for its result CQE), so any result CQE
//! is the current send's; notifications may be anyone's. Whoever drains the completion queue
//! hands its own notifications to its tracker and parks the others' in their route's inbox
//! (4 bytes each: slot and a copied bit), which their sender empties when it next collects.
//! A route is one 64-byte cache line with room for 4 notifications inside; more go to the heap, where it
//! keeps room for its sender's reserve and lets go of the rest once emptied.
//!
//! A sender that goes away (drop, `into_inner`) with notifications still to come leaves its
//! route "dead" with that count: the kernel keeps those pages pinned until it is done (memory
//! safe), and the notifications are counted off as they arrive and never delivered to anyone.
//! The route index is reused only when the count reaches zero, with the next generation, so a
//! late notification can never reach a newer sender. A sender dropped on another thread hands
//! its route back through a queue that the owning thread empties on its next use of the ring.
//!
//! Whether a notification will follow a send is decided by `IORING_CQE_F_MORE` on the result
//! CQE, never by the sign of the result: failed and cancelled sends can still post one
//! (io_uring_prep_send_zc(3)).

use std::cell::{RefCell, UnsafeCell};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};

use io_uring::{cqueue, opcode, types, IoUring};
use libc::{c_int, msghdr};

use super::tracker::SlotId;

/// Completion-queue entries of a thread's ring (16 bytes each): room for the notifications of
/// every request one sender may hold at the default limit ([`super::MAX_PENDING`]) twice
/// over. Notifications beyond it wait in the kernel's overflow list (`IORING_FEAT_NODROP`,
/// 5.5) until the queue is drained, which every send and collect does.
pub const RING_CQ_ENTRIES: u32 = 8192;
/// Submission-queue entries of a thread's ring: a send and its cancel at most.
pub const RING_SQ_ENTRIES: u32 = 8;

/// `IORING_SEND_ZC_REPORT_USAGE` (include/uapi/linux/io_uring.h, 6.2): the notification
/// reports whether the kernel copied.
const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: bit 31 of the notification's res.
const IORING_NOTIF_USAGE_ZC_COPIED: i32 = 1 << 31;
/// user_data of our cancel SQEs: route `MAX_ROUTES` is never handed out.
const CANCEL_TAG: u64 = u64::MAX;
/// `IORING_ENTER_GETEVENTS`.
const IORING_ENTER_GETEVENTS: u32 = 1;
/// Routes per ring (24 bits of user_data; the last value is the cancel tag's).
const MAX_ROUTES: u32 = (1 << 24) - 1;
/// An inbox entry's copied bit (slots are below 2^31).
const INBOX_COPIED: u32 = 1 << 31;

/// What one send's result CQE said.
pub struct SendResult {
    /// Bytes sent, or -errno.
    pub res: i32,
    /// A notification CQE follows (`IORING_CQE_F_MORE`).
    pub more: bool,
    /// Notifications for this slot that came while waiting for the result: how many (an
    /// earlier request of the same send may have posted one too) and whether any copied.
    pub own_notifs: u32,
    pub own_copied: bool,
}

/// A notification that arrived: which slot, and whether the kernel copied.
pub struct Notif {
    pub slot: SlotId,
    pub copied: bool,
}

fn err(e: c_int) -> io::Error {
    io::Error::from_raw_os_error(e)
}

fn tag(gen: u8, route: u32, slot: SlotId) -> u64 {
    (gen as u64) << 56 | (route as u64) << 32 | slot as u64
}

fn untag(t: u64) -> (u8, u32, SlotId) {
    ((t >> 56) as u8, (t >> 32) as u32 & MAX_ROUTES, t as u32)
}

/// Whether this kernel's io_uring has SEND_ZC and SENDMSG_ZC: 0 unknown, 1 yes, 2 no.
static SUPPORT: AtomicU8 = AtomicU8::new(0);

/// `fork()`s this process has gone through (counted in the child): a ring made before the
/// last one belongs to the parent's thread (`IORING_SETUP_SINGLE_ISSUER`: the child's
/// submissions would be `EEXIST`), however the thread-local state was copied.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn forked_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Counts forks from the first ring on.
fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
}

/// What every sender bound to a ring shares with it, on any thread.
struct Shared {
    /// Touched only by the owning thread, through its [`Local`] (see `Local::ring`).
    ring: UnsafeCell<IoUring>,
    /// The ring's descriptor, open as long as this lives (the `IoUring` closes it on drop).
    fd: RawFd,
    /// The thread that made the ring and alone may enter it, and the process's fork count
    /// then.
    owner: u64,
    forks: u64,
    /// An SQE could not be submitted and cannot be taken back: never enter the ring again.
    poisoned: AtomicBool,
    /// The eventfd registered with the ring (`IORING_REGISTER_EVENTFD`) once a completion fd
    /// was asked for: the kernel signals it when it queues a notification (as task work, with
    /// `DEFER_TASKRUN`), which the ring's own descriptor does not show to epoll. Set once, by
    /// the owning thread.
    efd: OnceLock<crate::sys::Fd>,
    /// Routes of senders dropped on other threads, for the owner to release.
    released: Mutex<Vec<Released>>,
    any_released: AtomicBool,
}

impl Shared {
    /// Neither retired nor the parent process's.
    fn usable(&self) -> bool {
        !self.poisoned.load(Ordering::Relaxed) && self.forks == FORKS.load(Ordering::Relaxed)
    }
}

// SAFETY: `ring` is only ever dereferenced by the owning thread, through the `Local` in that
// thread's `LOCAL` and while its `RefCell` is borrowed (one reference at a time); other
// threads read only `fd` and `owner` (immutable) and the atomics and mutex. The `IoUring`
// itself is Send + Sync, and dropping it (the last `Arc`) needs no thread.
unsafe impl Sync for Shared {}
// SAFETY: as above; moving the Arc's contents between threads moves an `IoUring` (Send).
unsafe impl Send for Shared {}

/// A route handed back from another thread.
struct Released {
    route: u32,
    gen: u8,
    expected: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RouteState {
    Free,
    Live,
    /// The sender went away; this many notifications are still to come.
    Dead(u64),
}

/// Parked notifications a route holds in itself (past that, on the heap).
const INLINE: usize = 4;

/// One sender's place in its thread's ring: one 64-byte cache line.
#[repr(align(64))]
struct Route {
    /// Notifications for the sender that another sender drained (slot | copied bit), oldest
    /// first: the first [`INLINE`] here, in the route's own cache line, the rest in `spill`.
    inline: [u32; INLINE],
    spill: Vec<u32>,
    n_inline: u8,
    /// `spill` capacity kept when empty: the sender's reserve beyond [`INLINE`].
    keep: u32,
    gen: u8,
    state: RouteState,
}

impl Route {
    fn parked(&self) -> usize {
        self.n_inline as usize + self.spill.len()
    }
}

/// The route table of a thread's ring.
#[derive(Default)]
struct Routes {
    routes: Vec<Route>,
    free: Vec<u32>,
}

/// A thread's ring and its route table (in the thread's `LOCAL`).
struct Local {
    shared: Arc<Shared>,
    routes: Routes,
    /// The eventfd was reset since the ring was last entered: whatever signalled it then was
    /// drained, and a later signal comes with work the completion queue's flags show. Lets
    /// the reaps of a thread's other senders after a wakeup skip the eventfd `read` (one per
    /// sender: with a thousand senders reaped after a wakeup, a thousand syscalls).
    efd_clean: bool,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// A number unique to the calling thread for the life of the process (never reused, unlike
/// a thread-local's address), read from a thread-local: `thread::current().id()` costs an
/// `Arc` clone, about 22 ns, on every send (measured with rustc 1.95 here).
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TOKEN.with(|t| *t)
}

impl Local {
    /// A new ring for the calling thread.
    fn new() -> io::Result<Local> {
        if SUPPORT.load(Ordering::Relaxed) == 2 {
            return Err(err(libc::EOPNOTSUPP));
        }
        // Made inside a send, a ring that fails below is closed (the io-uring crate's
        // OwnedFd: glibc's close, a cancellation point). Once per thread.
        let _held = crate::sys::CancelOff::new();
        watch_forks();
        let ring = IoUring::builder()
            .setup_cqsize(RING_CQ_ENTRIES)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(RING_SQ_ENTRIES)?;
        if SUPPORT.load(Ordering::Relaxed) == 0 {
            // Probed once per process, on a ring that is kept: closing a ring runs task work
            // on the closing thread, which makes its next blocking syscall fail with EINTR.
            let mut probe = io_uring::Probe::new();
            ring.submitter().register_probe(&mut probe)?;
            let ok = probe.is_supported(opcode::SendZc::CODE)
                && probe.is_supported(opcode::SendMsgZc::CODE);
            SUPPORT.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            if !ok {
                return Err(err(libc::EOPNOTSUPP));
            }
        }
        let fd = ring.as_raw_fd();
        Ok(Local {
            shared: Arc::new(Shared {
                ring: UnsafeCell::new(ring),
                fd,
                owner: thread_token(),
                forks: FORKS.load(Ordering::Relaxed),
                poisoned: AtomicBool::new(false),
                efd: OnceLock::new(),
                released: Mutex::new(Vec::new()),
                any_released: AtomicBool::new(false),
            }),
            routes: Routes::default(),
            efd_clean: false,
        })
    }

    /// The ring itself.
    ///
    /// # Safety
    /// `shared` must be the `shared` of a `Local` reached through the calling thread's LOCAL
    /// while it is mutably borrowed, and the reference must not outlive that borrow nor be
    /// taken twice at once: then it is the only reference to the ring (see `Shared`'s Sync).
    #[allow(clippy::mut_from_ref)]
    unsafe fn ring(shared: &Shared) -> &mut IoUring {
        // SAFETY: the caller's contract.
        unsafe { &mut *shared.ring.get() }
    }

    /// Releases the routes that senders dropped on other threads handed back.
    #[inline]
    fn take_released(&mut self) {
        // A load first: the swap, a locked instruction, only when there is something.
        let flag = &self.shared.any_released;
        if flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::Acquire) {
            self.release_queued();
        }
    }

    #[cold]
    #[inline(never)]
    fn release_queued(&mut self) {
        let list = std::mem::take(
            &mut *self
                .shared
                .released
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for r in list {
            self.routes.release(r);
        }
    }
}

impl Routes {
    /// A route for a new sender that keeps room for `keep` parked notifications.
    fn add(&mut self, keep: usize) -> io::Result<(u32, u8)> {
        let keep = keep.saturating_sub(INLINE).min(u32::MAX as usize);
        let mut spill = Vec::new();
        spill
            .try_reserve_exact(keep)
            .map_err(|_| err(libc::ENOMEM))?;
        let keep = keep as u32;
        if let Some(i) = self.free.pop() {
            let r = &mut self.routes[i as usize];
            (r.spill, r.n_inline, r.keep, r.state) = (spill, 0, keep, RouteState::Live);
            return Ok((i, r.gen));
        }
        if self.routes.len() >= MAX_ROUTES as usize {
            return Err(err(libc::ENOSPC));
        }
        self.routes
            .try_reserve(1)
            .and_then(|()| {
                self.free
                    .try_reserve(self.routes.len() + 1 - self.free.len())
            })
            .map_err(|_| err(libc::ENOMEM))?;
        self.routes.push(Route {
            inline: [0; INLINE],
            spill,
            n_inline: 0,
            keep,
            gen: 0,
            state: RouteState::Live,
        });
        Ok((self.routes.len() as u32 - 1, 0))
    }

    /// The sender of route `r` went away expecting `expected` more notifications, of which
    /// those parked in its inbox already came.
    fn release(&mut self, r: Released) {
        let Some(route) = self.routes.get_mut(r.route as usize) else {
            return;
        };
        if route.gen != r.gen || route.state != RouteState::Live {
            return;
        }
        let left = r.expected.saturating_sub(route.parked() as u64);
        (route.spill, route.n_inline) = (Vec::new(), 0);
        route.state = RouteState::Dead(left);
        if left == 0 {
            self.free_route(r.route);
        }
    }

    fn free_route(&mut self, i: u32) {
        let r = &mut self.routes[i as usize];
        r.state = RouteState::Free;
        r.gen = r.gen.wrapping_add(1);
        self.free.push(i);
    }

    /// A notification for someone else: to its inbox, or counted off a dead route.
    fn park(&mut self, gen: u8, route: u32, slot: SlotId, copied: bool) {
        let Some(r) = self.routes.get_mut(route as usize) else {
            return;
        };
        if r.gen != gen {
            return; // an earlier sender's, already counted off: never delivered
        }
        let e = slot | if copied { INBOX_COPIED } else { 0 };
        match r.state {
            RouteState::Live if r.spill.is_empty() && (r.n_inline as usize) < INLINE => {
                r.inline[r.n_inline as usize] = e;
                r.n_inline += 1;
            }
            RouteState::Live => r.spill.push(e),
            RouteState::Dead(n) if n > 1 => r.state = RouteState::Dead(n - 1),
            RouteState::Dead(_) => self.free_route(route),
            RouteState::Free => {}
        }
    }

    /// Hands the sender of `route` its parked notifications.
    fn unpark(&mut self, route: u32, notif: &mut dyn FnMut(Notif)) {
        let r = &mut self.routes[route as usize];
        if r.n_inline == 0 {
            return; // (the spill fills only after the inline entries)
        }
        for &e in r.inline[..r.n_inline as usize].iter().chain(&r.spill) {
            notif(Notif {
                slot: e & !INBOX_COPIED,
                copied: e & INBOX_COPIED != 0,
            });
        }
        r.n_inline = 0;
        r.spill.clear();
        if r.spill.capacity() > r.keep as usize {
            r.spill.shrink_to(r.keep as usize);
        }
    }
}

/// A notification CQE's copied bit.
fn copied(cqe: &cqueue::Entry) -> bool {
    cqe.result() & IORING_NOTIF_USAGE_ZC_COPIED != 0
}

/// Runs `f` on the calling thread's ring, made if it has none.
fn with_thread_ring<R>(f: impl FnOnce(&mut Local) -> io::Result<R>) -> io::Result<R> {
    LOCAL
        .try_with(|cell| {
            let mut g = cell.try_borrow_mut().map_err(|_| err(libc::EDEADLK))?;
            let fresh = match g.as_ref() {
                Some(l) => !l.shared.usable(),
                None => true,
            };
            if fresh {
                // A poisoned ring is let go (its senders get EIO, new ones a new ring), and so
                // is a ring of the parent process copied by fork.
                *g = None;
                *g = Some(Local::new()?);
            }
            f(g.as_mut().expect("just made"))
        })
        .unwrap_or_else(|_| Err(err(libc::ESRCH))) // the thread is exiting
}

/// Closes the calling thread's ring if no sender is joined to it: `Ok(true)` (the thread has
/// no ring now); `Ok(false)` if it had none.
///
/// # Errors
/// `EBUSY` while a sender is joined to it.
pub fn close_thread_ring() -> io::Result<bool> {
    LOCAL
        .try_with(|cell| {
            let mut g = cell.try_borrow_mut().map_err(|_| err(libc::EDEADLK))?;
            let Some(l) = g.as_mut() else {
                return Ok(false);
            };
            // A retired ring, or the parent process's, is only let go of.
            if l.shared.usable() {
                l.take_released();
                if Arc::strong_count(&l.shared) > 1 {
                    return Err(err(libc::EBUSY));
                }
            }
            *g = None; // the last reference: unmaps and closes the ring
            Ok(true)
        })
        .unwrap_or(Ok(false))
}

/// Makes sure the calling thread has a ring with SEND_ZC, making it if needed.
///
/// # Errors
/// io_uring setup errors (`EPERM` when `kernel.io_uring_disabled`, `ENOSYS`, `ENOMEM`,
/// `EMFILE`), `EOPNOTSUPP` without SEND_ZC / SENDMSG_ZC.
pub fn thread_ring() -> io::Result<()> {
    with_thread_ring(|_| Ok(()))
}

/// A sender's place in a thread's ring.
pub struct Binding {
    shared: Arc<Shared>,
    route: u32,
    gen: u8,
    /// Notifications still to come when the sender goes away (set just before the drop).
    pub expected: u64,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("ring", &self.shared.fd)
            .field("route", &self.route)
            .finish()
    }
}

impl Binding {
    /// Joins the calling thread's ring (made if it has none), keeping room for `keep`
    /// parked notifications.
    ///
    /// # Errors
    /// As [`thread_ring`], and `ENOSPC` past 2^24 - 1 senders on one thread.
    pub fn new(keep: usize) -> io::Result<Binding> {
        with_thread_ring(|l| {
            l.take_released();
            let (route, gen) = l.routes.add(keep)?;
            Ok(Binding {
                shared: l.shared.clone(),
                route,
                gen,
                expected: 0,
            })
        })
    }

    /// The descriptor to watch for this thread's notifications: the ring's eventfd, made and
    /// registered on the first call (on the ring's thread; elsewhere, or if that fails, the
    /// ring's own descriptor, which shows posted completions only).
    pub fn fd(&self) -> BorrowedFd<'_> {
        if let Some(e) = self.shared.efd.get() {
            return e.as_fd();
        }
        let _ = self.with(|l| {
            let e = crate::sys::eventfd()?;
            // SAFETY: see `Local::ring`: `l` is this thread's Local, borrowed for the closure.
            let ring = unsafe { Local::ring(&l.shared) };
            ring.submitter().register_eventfd(e.as_raw_fd())?;
            let _ = l.shared.efd.set(e);
            Ok(())
        });
        match self.shared.efd.get() {
            Some(e) => e.as_fd(),
            // SAFETY: the ring's fd stays open as long as `Shared` lives, which our Arc
            // ensures for at least the borrow of `self`.
            None => unsafe { BorrowedFd::borrow_raw(self.shared.fd) },
        }
    }

    /// `EIO` for a retired ring, `EEXIST` on a thread other than the ring's (a child of
    /// `fork` included: the thread that made the ring is the parent's).
    #[inline]
    pub fn check_owner(&self) -> io::Result<()> {
        if self.shared.poisoned.load(Ordering::Relaxed) {
            return Err(err(libc::EIO));
        }
        if self.shared.owner != thread_token() || self.shared.forks != FORKS.load(Ordering::Relaxed)
        {
            return Err(err(libc::EEXIST));
        }
        Ok(())
    }

    /// Runs `f` on this binding's ring: only on its thread.
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut Local) -> io::Result<R>) -> io::Result<R> {
        self.check_owner()?;
        LOCAL
            .try_with(|cell| {
                let mut g = cell.try_borrow_mut().map_err(|_| err(libc::EDEADLK))?;
                match g.as_mut() {
                    Some(l) if Arc::ptr_eq(&l.shared, &self.shared) => f(l),
                    _ => Err(err(libc::EIO)), // let go after it was poisoned
                }
            })
            .unwrap_or_else(|_| Err(err(libc::EIO)))
    }

    /// Submits one zerocopy send for `slot` and waits for its result CQE (not for the
    /// notification). Returns the send's result (bytes or -errno), whether a notification
    /// CQE will follow (`IORING_CQE_F_MORE`), and that notification if it already came (it
    /// can arrive in the same batch as the result; the caller applies it once it has
    /// recorded the send). This sender's other notifications go to `notif`, other senders'
    /// to their inboxes; `syscalls` counts the `io_uring_enter` calls.
    ///
    /// # Safety
    /// `msg`, its name, control data and iovecs, and the memory the iovecs describe must be
    /// valid for reads until this returns: it waits for the request's result, after which the
    /// kernel reads only pages it has pinned.
    pub unsafe fn send(
        &self,
        fd: BorrowedFd<'_>,
        msg: &msghdr,
        flags: c_int,
        slot: SlotId,
        syscalls: &mut u64,
        notif: &mut dyn FnMut(Notif),
    ) -> io::Result<SendResult> {
        let fd = types::Fd(fd.as_raw_fd());
        let me = tag(self.gen, self.route, slot);
        // One plain buffer: SEND_ZC, which skips SENDMSG_ZC's msghdr and iovec import.
        // SAFETY: msg_iov points at msg_iovlen iovecs per the caller's contract.
        let single = (msg.msg_iovlen == 1 && msg.msg_name.is_null() && msg.msg_control.is_null())
            .then(|| unsafe { *msg.msg_iov })
            .filter(|v| v.iov_len <= u32::MAX as usize)
            .map(|v| (v.iov_base as *const u8, v.iov_len as u32));
        let sqe = match single {
            Some((buf, len)) => opcode::SendZc::new(fd, buf, len)
                .flags(flags)
                .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                .build(),
            None => opcode::SendMsgZc::new(fd, msg)
                .flags(flags as u32)
                .ioprio(IORING_SEND_ZC_REPORT_USAGE)
                .build(),
        }
        .user_data(me);
        self.with(|l| {
            l.take_released();
            // SAFETY: `l` is the thread's Local, borrowed for this closure; `ring` lives in it.
            let ring = unsafe { Local::ring(&l.shared) };
            // SAFETY: the SQE points at `msg`/`buf`, valid until we have seen its result CQE,
            // which this function waits for before returning.
            unsafe { ring.submission().push(&sqe) }.map_err(|_| err(libc::EBUSY))?;
            let (mut result, mut own_notifs, mut own_copied) = (None, 0u32, false);
            let mut interrupted = false;
            loop {
                *syscalls += 1;
                l.efd_clean = false; // entering may take in what signalled the eventfd
                if let Err(e) = ring.submit_and_wait(1) {
                    match e.raw_os_error() {
                        // A signal: the send, once submitted, runs on. Cancel it, as a signal
                        // interrupts send(2), and wait for its (possibly partial) result.
                        Some(libc::EINTR) if !interrupted && ring.submission().is_empty() => {
                            interrupted = true;
                            let cancel = opcode::AsyncCancel::new(me).build().user_data(CANCEL_TAG);
                            // SAFETY: a cancel SQE points at no memory.
                            unsafe { ring.submission().push(&cancel) }
                                .map_err(|_| err(libc::EBUSY))?;
                        }
                        Some(libc::EINTR) => {}
                        // No room yet (CQ overflow, memory): collect CQEs below and try again.
                        Some(libc::EBUSY | libc::EAGAIN) => {}
                        _ => {
                            // An SQE left in the ring would go out with the next submit, long
                            // after the caller was told this send failed: retire the ring.
                            if !ring.submission().is_empty() {
                                l.shared.poisoned.store(true, Ordering::Relaxed);
                            }
                            return Err(e);
                        }
                    }
                }
                for cqe in ring.completion() {
                    let ud = cqe.user_data();
                    if ud == CANCEL_TAG {
                        continue;
                    }
                    if !cqueue::notif(cqe.flags()) {
                        // One request at a time per thread: a result is the current send's.
                        if ud == me && result.is_none() {
                            result = Some((cqe.result(), cqueue::more(cqe.flags())));
                        }
                        continue;
                    }
                    let (gen, route, s) = untag(ud);
                    if ud == me {
                        own_notifs += 1;
                        own_copied |= copied(&cqe);
                    } else if (gen, route) == (self.gen, self.route) {
                        notif(Notif {
                            slot: s,
                            copied: copied(&cqe),
                        });
                    } else {
                        l.routes.park(gen, route, s, copied(&cqe));
                    }
                }
                if let Some((mut res, more)) = result {
                    if interrupted && res == -libc::ECANCELED {
                        res = -libc::EINTR;
                    }
                    return Ok(SendResult {
                        res,
                        more,
                        own_notifs,
                        own_copied,
                    });
                }
            }
        })
    }

    /// Hands every notification of this sender that has arrived to `notif` (parking the other
    /// senders'). With `enter`, deferred work the kernel flagged (`IORING_SQ_TASKRUN`) and
    /// entries waiting in the overflow list (`IORING_SQ_CQ_OVERFLOW`) are first posted by
    /// `io_uring_enter`; without, they wait for the next send, whose own `io_uring_enter`
    /// posts them: no syscall.
    pub fn drain(
        &self,
        notif: &mut dyn FnMut(Notif),
        enter: bool,
        syscalls: &mut u64,
    ) -> io::Result<()> {
        self.with(|l| {
            l.take_released();
            // SAFETY: `l` is the thread's Local, borrowed for this closure; `ring` lives in it.
            let ring = unsafe { Local::ring(&l.shared) };
            if enter {
                // Before draining: a notification queued after this read signals it again.
                // Not again while nothing entered the ring since the last reset and nothing
                // new shows (deferred work, overflow, posted entries): then the eventfd holds
                // no signal whose work was taken in without a reset after it.
                if let Some(e) = l.shared.efd.get() {
                    let fresh = {
                        let sq = ring.submission();
                        sq.taskrun() || sq.cq_overflow()
                    } || !ring.completion().is_empty();
                    if !l.efd_clean || fresh {
                        *syscalls += 1;
                        crate::sys::eventfd_reset(e.as_fd());
                        l.efd_clean = true;
                    }
                }
            }
            // Bounded: each round moves up to a queue's worth out of the overflow list.
            for _ in 0..64 {
                let flagged = {
                    let sq = ring.submission();
                    sq.taskrun() || sq.cq_overflow()
                };
                if enter && flagged {
                    *syscalls += 1;
                    // What signals the eventfd between its reset and this may be taken in now.
                    l.efd_clean = false;
                    // SAFETY: no SQEs to submit and no argument: GETEVENTS only runs the task
                    // work and flushes the overflow list.
                    let r = unsafe {
                        ring.submitter()
                            .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
                    };
                    match r {
                        Ok(_) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                        Err(e) => return Err(e),
                    }
                }
                for cqe in ring.completion() {
                    if !cqueue::notif(cqe.flags()) {
                        continue;
                    }
                    let (gen, route, slot) = untag(cqe.user_data());
                    if (gen, route) == (self.gen, self.route) {
                        notif(Notif {
                            slot,
                            copied: copied(&cqe),
                        });
                    } else {
                        l.routes.park(gen, route, slot, copied(&cqe));
                    }
                }
                // More in the overflow list: only a syscall brings it in.
                if !enter || !ring.submission().cq_overflow() {
                    break;
                }
            }
            l.routes.unpark(self.route, notif);
            Ok(())
        })
    }

    /// Waits up to `timeout_ms` (-1: no limit) for at least one CQE (any sender's: the caller
    /// drains and looks again). `Ok(false)` on timeout.
    pub fn wait(&self, timeout_ms: i32, syscalls: &mut u64) -> io::Result<bool> {
        self.with(|l| {
            // SAFETY: `l` is the thread's Local, borrowed for this closure; `ring` lives in it.
            let ring = unsafe { Local::ring(&l.shared) };
            *syscalls += 1;
            l.efd_clean = false;
            let r = if timeout_ms < 0 {
                ring.submit_and_wait(1)
            } else {
                let ts = types::Timespec::new()
                    .sec(timeout_ms as u64 / 1000)
                    .nsec((timeout_ms as u32 % 1000) * 1_000_000);
                let args = types::SubmitArgs::new().timespec(&ts);
                ring.submitter().submit_with_args(1, &args)
            };
            match r {
                Ok(_) => Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(false),
                // EINTR goes to the caller, as poll's would: a signal must be able to end a
                // wait.
                Err(e) => Err(e),
            }
        })
    }
}

impl Drop for Binding {
    /// Hands the route back: at once on the ring's thread, else through the ring's queue.
    fn drop(&mut self) {
        let r = Released {
            route: self.route,
            gen: self.gen,
            expected: self.expected,
        };
        let mut r = Some(r);
        let _ = self.with(|l| {
            l.routes.release(r.take().expect("once"));
            Ok(())
        });
        if let Some(r) = r {
            if !self.shared.poisoned.load(Ordering::Relaxed) {
                let mut q = self
                    .shared
                    .released
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                q.push(r);
                self.shared.any_released.store(true, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for (g, r, s) in [
            (0, 0, 0),
            (255, MAX_ROUTES - 1, u32::MAX >> 1),
            (7, 12345, 99),
        ] {
            assert_eq!(untag(tag(g, r, s)), (g, r, s));
            assert_ne!(tag(g, r, s), CANCEL_TAG);
        }
    }

    /// Routes: parked notifications go to their sender; a dead route counts its notifications
    /// off and is reused only then, with a new generation that the old ones do not match.
    #[test]
    fn routes_deliver_count_off_and_reuse() {
        let Ok(()) = thread_ring() else {
            return; // no io_uring here: nothing to route
        };
        LOCAL.with(|cell| {
            let mut g = cell.borrow_mut();
            let l = g.as_mut().unwrap();
            let l = &mut l.routes;
            let (a, ga) = l.add(2).unwrap();
            let (b, gb) = l.add(2).unwrap();
            assert_eq!(std::mem::size_of::<Route>(), 64);
            l.park(ga, a, 5, true);
            l.park(ga, a, 6, false);
            l.park(ga, a, 7, false);
            let mut got = vec![];
            l.unpark(a, &mut |n| got.push((n.slot, n.copied)));
            assert_eq!(got, [(5, true), (6, false), (7, false)]);
            // Past the inline room, on the heap, in order; the heap room goes back to the keep.
            for s in 0..10 {
                l.park(ga, a, s, s % 3 == 0);
            }
            let mut got = vec![];
            l.unpark(a, &mut |n| got.push((n.slot, n.copied)));
            assert_eq!(got, (0..10).map(|s| (s, s % 3 == 0)).collect::<Vec<_>>());
            assert_eq!(
                l.routes[a as usize].spill.capacity(),
                0,
                "keep 2: all inline"
            );
            // b goes away expecting 3, one of which is parked already.
            l.park(gb, b, 1, false);
            l.release(Released {
                route: b,
                gen: gb,
                expected: 3,
            });
            assert_eq!(l.routes[b as usize].state, RouteState::Dead(2));
            l.park(gb, b, 2, false);
            assert!(!l.free.contains(&b));
            l.park(gb, b, 3, false);
            assert!(l.free.contains(&b), "reusable once every notification came");
            let (b2, gb2) = l.add(0).unwrap();
            assert_eq!((b2, gb2), (b, gb.wrapping_add(1)));
            // A straggler of the old generation reaches nobody.
            l.park(gb, b, 4, false);
            assert_eq!(l.routes[b as usize].parked(), 0);
            l.release(Released {
                route: a,
                gen: ga,
                expected: 0,
            });
            l.release(Released {
                route: b2,
                gen: gb2,
                expected: 0,
            });
        });
    }
}
