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

use crate::args::{self, size};
use crate::error::{sys_error, OrThrow};
use crate::peek::flags;

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
    pub bytes_mapped: f64,
    pub bytes_copied: f64,
    pub bytes_copybuf: f64,
    pub chunks_mapped: f64,
    pub chunks_copied: f64,
    pub syscalls: f64,
    pub zc_calls: f64,
    pub zc_calls_unmapped: f64,
    pub wakeups: f64,
    pub peek_off_fixups: f64,
}

/// Zero-copy receive over one connected TCP socket (a private duplicate): `mmap` +
/// `TCP_ZEROCOPY_RECEIVE` with a copy path for what cannot be mapped. Nobody else may read the
/// socket meanwhile.
#[napi]
pub struct ZeroCopyReceiver {
    inner: RefCell<Option<Core>>,
    fd: i32,
}

#[napi]
impl ZeroCopyReceiver {
    /// Maps a `window`-byte receive window (rounded up to pages; 1 byte to 1 GiB) of (a
    /// duplicate of) `fd`. `EINVAL` (window), `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not TCP),
    /// `ENOTCONN` (not connected), `ENOMEM`.
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
        if self.inner.borrow().is_some() {
            self.fd
        } else {
            -1
        }
    }

    /// The next piece of the stream (as the core's `recv`): blocking until the socket's mark
    /// is met (`SO_RCVLOWAT`; `SO_RCVTIMEO` bounds it: `EAGAIN`), or with `dontWait` what is
    /// queued (`EAGAIN` if nothing). Errors: `EAGAIN`, `EINTR`, `ECONNRESET` (after every byte
    /// before it).
    #[napi(catch_unwind, ts_args_type = "options?: PeekOptions")]
    pub fn recv(&self, env: Env, options: Option<Unknown>) -> Result<ZcrxChunk> {
        let f = flags(&env, options.as_ref(), "recv")?;
        let mut g = self.inner.borrow_mut();
        let core = g
            .as_mut()
            .ok_or_else(|| sys_error(&env, libc::EBADF, "recv"))?;
        let c = core.recv(f).or_throw(&env, "recv")?;
        Ok(ZcrxChunk {
            eof: c.is_eof(),
            mapped: c.mapped,
            data: Buffer::from(c.data.to_vec()),
        })
    }

    /// Gives the receiver its own wait limit in place of the socket's `O_NONBLOCK` and
    /// `SO_RCVTIMEO` (as the core's `set_timeout`): milliseconds, `-1`/`null` for no limit,
    /// 0 never to wait. A wait then costs one `poll`.
    #[napi(catch_unwind, ts_args_type = "timeoutMs: number | null")]
    pub fn set_timeout(&self, env: Env, timeout_ms: Unknown) -> Result<()> {
        let t = args::timeout_ms(&env, Some(&timeout_ms))?;
        let mut g = self.inner.borrow_mut();
        let core = g
            .as_mut()
            .ok_or_else(|| sys_error(&env, libc::EBADF, "setTimeout"))?;
        core.set_timeout(t);
        Ok(())
    }

    /// Whether each zero-copy call keeps a peeker's `SO_PEEK_OFF` right (on by default): off
    /// saves a `getsockopt` per chunk when no `Peeker` shares the socket.
    #[napi(catch_unwind)]
    pub fn set_peek_off_tracking(&self, env: Env, on: bool) -> Result<()> {
        let mut g = self.inner.borrow_mut();
        let core = g
            .as_mut()
            .ok_or_else(|| sys_error(&env, libc::EBADF, "setPeekOffTracking"))?;
        core.set_peek_off_tracking(on);
        Ok(())
    }

    /// The counters so far.
    #[napi(catch_unwind)]
    pub fn stats(&self, env: Env) -> Result<ZcrxStats> {
        let g = self.inner.borrow();
        let s = g
            .as_ref()
            .ok_or_else(|| sys_error(&env, libc::EBADF, "stats"))?
            .stats();
        Ok(ZcrxStats {
            bytes_mapped: s.bytes_mapped as f64,
            bytes_copied: s.bytes_copied as f64,
            bytes_copybuf: s.bytes_copybuf as f64,
            chunks_mapped: s.chunks_mapped as f64,
            chunks_copied: s.chunks_copied as f64,
            syscalls: s.syscalls as f64,
            zc_calls: s.zc_calls as f64,
            zc_calls_unmapped: s.zc_calls_unmapped as f64,
            wakeups: s.wakeups as f64,
            peek_off_fixups: s.peek_off_fixups as f64,
        })
    }

    /// Unmaps the window and closes the duplicate. Calling it again does nothing.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        self.inner.borrow_mut().take();
    }
}
