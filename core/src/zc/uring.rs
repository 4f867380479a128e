//! io_uring backend: `IORING_OP_SEND_ZC` (Linux 6.0) and `IORING_OP_SENDMSG_ZC` (6.1).
//!
//! The request's `user_data` comes back in the notification CQE (`IORING_CQE_F_NOTIF`), so
//! no id ranges need mapping; we carry our request slot there. Whether a notification will
//! follow is decided by `IORING_CQE_F_MORE` on the result CQE, never by the sign of the
//! result: failed and cancelled sends can still post one (io_uring_prep_send_zc(3)).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use io_uring::{cqueue, opcode, types, IoUring};
use libc::{c_int, msghdr};

use super::tracker::SlotId;

/// `IORING_SEND_ZC_REPORT_USAGE` (include/uapi/linux/io_uring.h, 6.2): the notification
/// reports whether the kernel copied.
const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: bit 31 of the notification's res.
const IORING_NOTIF_USAGE_ZC_COPIED: i32 = 1 << 31;
/// user_data of our cancel SQEs: never a request slot (those are below MAX_PENDING).
const CANCEL_TAG: u64 = u64::MAX;
/// `IORING_ENTER_GETEVENTS`.
const IORING_ENTER_GETEVENTS: u32 = 1;

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

/// The ring of one sender.
///
/// Set up with `IORING_SETUP_DEFER_TASKRUN` (6.1): notifications are posted only when the
/// owning thread enters the ring (each send does), never by interrupting it. Without it the
/// kernel delivers them as task work that makes the sending thread's unrelated blocking
/// syscalls (a `recv` with `SO_RCVTIMEO`, `epoll_wait`) fail with `EINTR`. Its price,
/// `IORING_SETUP_SINGLE_ISSUER`: one thread owns the ring. We create it disabled
/// (`IORING_SETUP_R_DISABLED`) and enable it at the first send, so the owner is the first
/// thread that sends, not the one that created the sender.
pub struct Uring {
    ring: IoUring,
    /// The thread that enabled the ring and alone may enter it.
    owner: Option<u64>,
    /// An SQE could not be submitted and cannot be taken back: never enter the ring again.
    poisoned: bool,
}

impl Uring {
    /// A ring sized so that every request the tracker can hold fits its notification in the
    /// completion queue (the kernel also keeps overflow, IORING_FEAT_NODROP, 5.5).
    pub fn new(max_requests: usize) -> io::Result<Self> {
        let ring = IoUring::builder()
            .setup_cqsize((2 * max_requests).next_power_of_two() as u32)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_r_disabled()
            .build(8)?;
        // Probe on this ring rather than on a throwaway one: closing a ring runs task work
        // on the closing thread, which makes its next blocking syscall fail with EINTR.
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::SendZc::CODE) || !probe.is_supported(opcode::SendMsgZc::CODE)
        {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        Ok(Uring {
            ring,
            owner: None,
            poisoned: false,
        })
    }

    /// Enables the ring on its first use: the calling thread becomes its only submitter.
    /// Checked before every use: another thread gets `EEXIST` (what the kernel would answer,
    /// but before an SQE is queued that could then never be taken back).
    fn enable(&mut self) -> io::Result<()> {
        if self.poisoned {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let me = thread_token();
        match self.owner {
            Some(o) if o == me => Ok(()),
            Some(_) => Err(io::Error::from_raw_os_error(libc::EEXIST)),
            None => {
                self.ring.submitter().register_enable_rings()?;
                self.owner = Some(me);
                Ok(())
            }
        }
    }

    /// `EEXIST` when a thread other than the ring's owner calls (no owner yet: anyone may).
    pub fn check_owner(&self) -> io::Result<()> {
        match self.owner {
            Some(o) if o != thread_token() => Err(io::Error::from_raw_os_error(libc::EEXIST)),
            _ => Ok(()),
        }
    }

    /// The ring's descriptor, readable when a CQE is waiting.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ring.as_fd()
    }

    /// Submits one zerocopy send for `slot` and waits for its result CQE (not for the
    /// notification). Returns the send's result (bytes or -errno), whether a notification
    /// CQE will follow (`IORING_CQE_F_MORE`), and that notification if it already came (it
    /// can arrive in the same batch as the result; the caller applies it once it has
    /// recorded the send). Other requests' notifications go to `notif`; `syscalls` counts
    /// the `io_uring_enter` calls.
    ///
    /// # Safety
    /// `msg`, its name, control data and iovecs, and the memory the iovecs describe must be
    /// valid for reads until this returns: it waits for the request's result, after which the
    /// kernel reads only pages it has pinned.
    pub unsafe fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        msg: &msghdr,
        flags: c_int,
        slot: SlotId,
        syscalls: &mut u64,
        notif: &mut dyn FnMut(Notif),
    ) -> io::Result<SendResult> {
        let fd = types::Fd(fd.as_raw_fd());
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
        .user_data(slot as u64);
        self.enable()?;
        // SAFETY: the SQE points at `msg`/`buf`, valid until we have seen its result CQE,
        // which this function waits for before returning.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
        let (mut result, mut own_notifs, mut own_copied) = (None, 0u32, false);
        let mut interrupted = false;
        loop {
            *syscalls += 1;
            if let Err(e) = self.ring.submit_and_wait(1) {
                match e.raw_os_error() {
                    // A signal: the send, once submitted, runs on. Cancel it, as a signal
                    // interrupts send(2), and wait for its (possibly partial) result.
                    Some(libc::EINTR) if !interrupted && self.ring.submission().is_empty() => {
                        interrupted = true;
                        let cancel = opcode::AsyncCancel::new(slot as u64)
                            .build()
                            .user_data(CANCEL_TAG);
                        // SAFETY: a cancel SQE points at no memory.
                        unsafe { self.ring.submission().push(&cancel) }
                            .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
                    }
                    Some(libc::EINTR) => {}
                    // No room yet (CQ overflow, memory): collect CQEs below and try again.
                    Some(libc::EBUSY | libc::EAGAIN) => {}
                    _ => {
                        // An SQE left in the ring would go out with the next submit, long
                        // after the caller was told this send failed: retire the ring.
                        self.poisoned |= !self.ring.submission().is_empty();
                        return Err(e);
                    }
                }
            }
            for cqe in self.ring.completion() {
                if cqe.user_data() == CANCEL_TAG {
                    continue;
                }
                let s = cqe.user_data() as SlotId;
                if cqueue::notif(cqe.flags()) {
                    let copied = cqe.result() & IORING_NOTIF_USAGE_ZC_COPIED != 0;
                    if s == slot {
                        own_notifs += 1;
                        own_copied |= copied;
                    } else {
                        notif(Notif { slot: s, copied });
                    }
                } else if s == slot && result.is_none() {
                    result = Some((cqe.result(), cqueue::more(cqe.flags())));
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
    }

    /// Hands every notification that has arrived to `notif`. With `enter`, deferred work the
    /// kernel flagged (`IORING_SQ_TASKRUN`) is first posted by one `io_uring_enter`; without,
    /// it waits for the next send, whose own `io_uring_enter` posts it: no syscall.
    pub fn drain(
        &mut self,
        notif: &mut dyn FnMut(Notif),
        enter: bool,
        syscalls: &mut u64,
    ) -> io::Result<()> {
        // Only the owner may run the ring, also when no syscall is needed this time.
        self.check_owner()?;
        if enter && self.owner.is_some() && self.ring.submission().taskrun() {
            self.enable()?;
            *syscalls += 1;
            // SAFETY: no SQEs to submit and no argument: GETEVENTS only runs the task work.
            let r = unsafe {
                self.ring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
            };
            match r {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
        for cqe in self.ring.completion() {
            if cqueue::notif(cqe.flags()) {
                notif(Notif {
                    slot: cqe.user_data() as SlotId,
                    copied: cqe.result() & IORING_NOTIF_USAGE_ZC_COPIED != 0,
                });
            }
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` (-1: no limit) for at least one CQE. `Ok(false)` on timeout.
    pub fn wait(&mut self, timeout_ms: i32, syscalls: &mut u64) -> io::Result<bool> {
        self.enable()?;
        *syscalls += 1;
        let r = if timeout_ms < 0 {
            self.ring.submit_and_wait(1)
        } else {
            let ts = types::Timespec::new()
                .sec(timeout_ms as u64 / 1000)
                .nsec((timeout_ms as u32 % 1000) * 1_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            self.ring.submitter().submit_with_args(1, &args)
        };
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(false),
            // EINTR goes to the caller, as poll's would: a signal must be able to end a wait.
            Err(e) => Err(e),
        }
    }
}

/// A number unique to the calling thread for the life of the process (never reused, unlike
/// a thread-local's address), read from a thread-local: `thread::current().id()` costs an
/// `Arc` clone, about 22 ns, on every send (measured with rustc 1.95 here).
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TOKEN.with(|t| *t)
}
