//! How a sender is set up: its backend and the options of its tables, adaptive mode and close
//! policy, and the limits they are checked against.

use std::io;
use std::time::Duration;

#[cfg(doc)]
use super::ZeroCopySender;
use crate::sys::errno;

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
    /// fallback. After 4,096 such copies zerocopy is asked for again (the path may have
    /// changed), and the next 16 completions decide anew: on a path that copies, 16 copied
    /// "zerocopy" sends in every 4,112.
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
    pub(super) fn check(&self) -> io::Result<()> {
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

/// Plain copies after which [`ZcOptions::adaptive`], having stopped asking for zerocopy, asks
/// again.
pub const ADAPTIVE_PROBE_EVERY: u32 = 4096;

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
