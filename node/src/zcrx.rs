//! `ZeroCopyReceiver`: zero-copy TCP receive (the core's `lowcopy::ZeroCopyReceiver`).
//!
//! The core hands out chunks that are valid until its next call: read-only pages mapped from
//! the socket, or its copy buffer. JavaScript cannot be given read-only memory (a write through
//! a `Uint8Array` over it would crash the process) nor memory whose life it does not control,
//! so each chunk is copied once into a new `Buffer`: the stream arrives with the receiver's
//! wakeups and syscalls (one mark's worth per wakeup), at the cost of that copy.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, OwnedFd};

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::args::{self, flags, size};
use crate::error::{sys_error, OrThrow};

type Core = lowcopy::ZeroCopyReceiver<OwnedFd>;

/// One piece of the stream.
#[napi(object)]
pub struct ZcrxChunk {
    /// The bytes (a copy), right after the previous chunk's in stream order; empty at end of
    /// stream.
    pub data: Buffer,
    /// The kernel mapped these bytes (page flipping) rather than copying them.
    pub mapped: bool,
    /// End of stream: the peer shut down and every byte came.
    pub eof: bool,
}

/// Counters of a `ZeroCopyReceiver` (see the core's `ZcrxStats`).
#[napi(object)]
pub struct ZcrxStats {
    // doc-copy: zcrx_stats.bytes_mapped
    /// Bytes delivered as pages mapped into the window.
    // doc-end
    pub bytes_mapped: f64,
    // doc-copy: zcrx_stats.bytes_copied
    /// Bytes delivered by copy (both kinds below).
    // doc-end
    pub bytes_copied: f64,
    // doc-copy: zcrx_stats.bytes_copybuf
    /// Of `bytes_copied`: bytes the kernel copied into the copy buffer within the zero-copy call
    /// (stragglers, and small queues). The rest were read with `recv`.
    // doc-end
    pub bytes_copybuf: f64,
    // doc-copy: zcrx_stats.chunks_mapped
    /// Chunks returned that were mapped pages.
    // doc-end
    pub chunks_mapped: f64,
    // doc-copy: zcrx_stats.chunks_copied
    /// Chunks returned that were copies.
    // doc-end
    pub chunks_copied: f64,
    // doc-copy: zcrx_stats.syscalls
    /// Syscalls made (including failed ones).
    // doc-end
    pub syscalls: f64,
    // doc-copy: zcrx_stats.zc_calls
    /// `TCP_ZEROCOPY_RECEIVE` calls.
    // doc-end
    pub zc_calls: f64,
    // doc-copy: zcrx_stats.zc_calls_unmapped
    /// `TCP_ZEROCOPY_RECEIVE` calls that mapped nothing (queue empty or not mappable).
    // doc-end
    pub zc_calls_unmapped: f64,
    // doc-copy: zcrx_stats.wakeups
    /// `poll` returns that reported the socket ready, when `recv` had to wait.
    // doc-end
    pub wakeups: f64,
    // doc-copy: zcrx_stats.peek_off_fixups
    /// `SO_PEEK_OFF` corrections: the kernel does not lower it for bytes it maps or copies as
    /// stragglers, so the receiver does, as a read would have.
    // doc-end
    pub peek_off_fixups: f64,
}

mirror!(ZcrxStats from lowcopy::ZcrxStats { bytes_mapped, bytes_copied, bytes_copybuf,
    chunks_mapped, chunks_copied, syscalls, zc_calls, zc_calls_unmapped, wakeups,
    peek_off_fixups });

/// Zero-copy receive over one connected TCP socket (a private duplicate): `mmap` +
/// `TCP_ZEROCOPY_RECEIVE` with a copy path for what cannot be mapped. Each chunk's bytes are
/// copied into a new `Buffer`, so they stay valid.
// doc-copy: zcrx.exclusive
/// Nobody else may read from the socket meanwhile (a peeker may peek: the receiver keeps its
/// `SO_PEEK_OFF` right).
// doc-end
#[napi]
pub struct ZeroCopyReceiver {
    inner: RefCell<Option<Core>>,
    fd: i32,
}

impl ZeroCopyReceiver {
    /// The core receiver: `EBADF` once closed.
    fn core(&self, env: &Env, what: &str) -> Result<std::cell::RefMut<'_, Core>> {
        std::cell::RefMut::filter_map(self.inner.borrow_mut(), Option::as_mut)
            .map_err(|_| sys_error(env, libc::EBADF, what))
    }
}

#[napi]
impl ZeroCopyReceiver {
    /// Maps a `window`-byte receive window of (a duplicate of) `fd`.
    // doc-copy: zcrx_new.memory
    /// `window` is rounded up to a multiple of the page size (W); it must be 1 byte to 1 GiB.
    /// Memory, all of it made here: the copy buffer, one heap block of W bytes clamped to 64 KiB
    /// ..= 1 MiB (256 KiB for a 256 KiB window), never written by lowcopy, so that only the pages
    /// the kernel copies into become resident; and W bytes of address space for the window (a
    /// read-only mapping of the socket: the pages it shows are the socket's receive buffer, not
    /// memory of its own). Nothing is allocated afterwards; the first wait that meets a busy error
    /// queue makes an epoll instance (a descriptor) kept until the receiver is released.
    // doc-end
    ///
    // doc-copy: zcrx_new.rcvlowat
    /// Set the receive low-water mark (`setRcvlowat`) to about the window's size so that each
    /// wakeup finds a window's worth of bytes. Pages map only where the kernel holds whole,
    /// page-aligned payload pages (a header-splitting NIC; on loopback, a page-aligned
    /// `MSG_ZEROCOPY` sender); every other byte arrives by copy.
    // doc-end
    ///
    /// Errors: `EMFILE` (no descriptor for the duplicate);
    // doc-copy: zcrx_new.errors
    /// The socket is checked before the window: `EINVAL` (`window` 0 or above 1 GiB), `EBADF`,
    /// `ENOTSOCK`, `EOPNOTSUPP` (not TCP over IPv4/IPv6, e.g. UDP, AF_UNIX, MPTCP; or a kernel
    /// without `TCP_ZEROCOPY_RECEIVE`), `ENOTCONN` (not connected: listening, never connected,
    /// still connecting, or reset), `ENOMEM`, and `mmap` errors.
    // doc-end
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, window: number"
    )]
    pub fn new(env: Env, fd: Unknown, window: Unknown) -> Result<Self> {
        let window = size(&env, &window, "window")?;
        let dup = args::dup_fd(&env, &fd, "ZeroCopyReceiver")?;
        let raw = dup.as_raw_fd();
        let core = Core::new(dup, window).or_throw(&env, "ZeroCopyReceiver")?;
        Ok(ZeroCopyReceiver {
            inner: RefCell::new(Some(core)),
            fd: raw,
        })
    }

    /// The window's size in bytes.
    #[napi(getter, catch_unwind)]
    pub fn window(&self) -> f64 {
        self.inner
            .borrow()
            .as_ref()
            .map_or(0.0, |c| c.window() as f64)
    }

    /// The receiver's own descriptor (its duplicate); -1 once closed.
    #[napi(getter, catch_unwind)]
    pub fn fd(&self) -> i32 {
        self.inner.borrow().as_ref().map_or(-1, |_| self.fd)
    }

    /// The next piece of the stream: mapped pages or copied bytes, in stream order (`eof` at
    /// end of stream).
    // doc-copy: zcrx_recv.wait
    /// Blocking (no `dontWait`, fd without `O_NONBLOCK`), like a blocking `recv` with
    /// `SO_RCVLOWAT`: once the bytes queued at the last wakeup are all delivered, the receiver
    /// waits in `poll` until the socket's mark is met, then returns them chunk by chunk without
    /// waiting again (one wakeup per mark's worth, however many chunks it takes; the kernel may
    /// wake below the mark under memory pressure: those bytes are returned, not waited past). The
    /// socket's `SO_RCVTIMEO` (read when a wait starts) bounds the wait; when it runs out the bytes
    /// queued below the mark are returned, or `EAGAIN` when there are none, as `recv` does.
    /// Non-blocking (`dontWait` or `O_NONBLOCK`): whatever is queued, mark or not (the caller's
    /// poll/epoll honoured the mark), or `EAGAIN`.
    // doc-end
    ///
    // doc-copy: zcrx_recv.errqueue
    /// Entries on the socket's error queue (zerocopy notifications of a sender on the same socket,
    /// `IP_RECVERR` or `SO_TIMESTAMPING` reports) are never read and never end a wait: a blocking
    /// receive sleeps past them (as `recvAtLeast` does), a non-blocking one returns `EAGAIN` when
    /// nothing else is there.
    // doc-end
    ///
    /// Errors: `EINVAL` (bad options);
    // doc-copy: zcrx_recv.errors
    /// `EAGAIN`, `EINTR`, `ECONNRESET` and the socket's other errors (reported after every byte
    /// received before them); an `EINVAL` from the kernel (a bug in lowcopy, or someone unmapped
    /// the window) is reported as such, never taken as end of stream.
    // doc-end
    #[napi(catch_unwind, ts_args_type = "options?: PeekOptions")]
    pub fn recv(&self, env: Env, options: Option<Unknown>) -> Result<ZcrxChunk> {
        let f = flags(&env, options.as_ref(), "recv", false)?;
        let mut core = self.core(&env, "recv")?;
        let c = core.recv(f).or_throw(&env, "recv")?;
        Ok(ZcrxChunk {
            eof: c.is_eof(),
            mapped: c.mapped,
            data: Buffer::from(c.data.to_vec()),
        })
    }

    /// Gives the receiver its own wait limit in place of the socket's `O_NONBLOCK` and
    /// `SO_RCVTIMEO`: milliseconds, `-1`/`null` for no limit, 0 never to wait.
    // doc-copy: zcrx_timeout.kernel
    /// The fd's `O_NONBLOCK` then plays no part either (only `dontWait` makes a receive
    /// non-blocking), as in `recvAtLeast`. When it runs out the result is what `SO_RCVTIMEO` gives:
    /// the bytes queued below the mark, or `EAGAIN`. Why: with the socket's settings, each wait
    /// first looks without sleeping (`poll` with 0), then reads `O_NONBLOCK` and `SO_RCVTIMEO`,
    /// then sleeps: 3 or 4 syscalls where tcp_mmap's loop makes 1. With its own timeout the
    /// receiver sleeps in one `poll`.
    // doc-end
    #[napi(catch_unwind, ts_args_type = "timeoutMs: number | null")]
    pub fn set_timeout(&self, env: Env, timeout_ms: Unknown) -> Result<()> {
        let t = args::timeout_ms(&env, Some(&timeout_ms))?;
        self.core(&env, "setTimeout")?.set_timeout(t);
        Ok(())
    }

    /// Whether each zero-copy call keeps a peeker's `SO_PEEK_OFF` right (on by default).
    // doc-copy: zcrx_peek_off_tracking.kernel
    /// Off saves the `getsockopt(SO_PEEK_OFF)` made before each zero-copy call (one syscall per
    /// chunk): turn it off only when no peeker uses `SO_PEEK_OFF` on this socket while the receiver
    /// lives, or its cursor will point past the bytes it meant after mapped chunks.
    // doc-end
    #[napi(catch_unwind, ts_args_type = "on: boolean")]
    pub fn set_peek_off_tracking(&self, env: Env, on: Unknown) -> Result<()> {
        let on = args::boolean(&env, &on, "on")?;
        self.core(&env, "setPeekOffTracking")?
            .set_peek_off_tracking(on);
        Ok(())
    }

    /// The counters so far.
    #[napi(catch_unwind)]
    pub fn stats(&self, env: Env) -> Result<ZcrxStats> {
        Ok((&self.core(&env, "stats")?.stats()).into())
    }

    /// Unmaps the window and closes the duplicate. Calling it again does nothing.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        self.inner.borrow_mut().take();
    }
}
