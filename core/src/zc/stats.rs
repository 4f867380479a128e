//! What a sender counts, and what a batched send did.

#[cfg(doc)]
use super::{ZcOptions, ZeroCopySender, COPIED};

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
    /// 1 while the adaptive option has stopped asking for zerocopy (it asks again after
    /// 4,096 plain copies).
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

/// What a batched send did ([`ZeroCopySender::send_batch`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Sends made, from the first buffer on: each that accepted bytes has one completion to
    /// come (a zero-length buffer is a send of its own that gets none).
    pub sends: usize,
    /// Bytes they accepted.
    pub bytes: usize,
    /// Completions written to `out`.
    pub completions: usize,
}
