//! Low-water-mark receive: `setRcvlowat`, `recvAtLeast`, `recvAtLeastAsync`.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::args::{self, alloc, alloc_len, size, with_fd};
use crate::error::{Fail, OrThrow};
use crate::peek::bytes_arg;

/// Sets `SO_RCVLOWAT` to `bytes` and returns the value the kernel keeps (TCP caps it at
/// `tcp_rmem[2]/2`, or half a locked `SO_RCVBUF`; 0 is kept as 1). As the core's
/// `set_rcvlowat`. On a `net.Socket` it gates libuv's wakeups too: Node's `'data'` events then
/// come only once that many bytes are queued (or at end of stream).
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, bytes: number"
)]
pub fn set_rcvlowat(env: Env, fd: Unknown, bytes: Unknown) -> Result<f64> {
    let bytes = size(&env, &bytes, "bytes")?;
    with_fd(&env, &fd, "setRcvlowat", |fd| {
        lowcopy::set_rcvlowat(fd, bytes)
            .or_throw(&env, "setRcvlowat")
            .map(|n| n as f64)
    })
}

/// Counters of `recvAtLeast` (see the core's `RecvStats`), added to the object passed as
/// `options.stats` on every call.
#[allow(dead_code)]
#[napi(object)]
pub struct RecvStats {
    pub calls: Option<f64>,
    pub syscalls: Option<f64>,
    /// `poll` returns that found the socket ready: the wakeups.
    pub wakeups: Option<f64>,
    /// Wakeups after which fewer than `min` bytes were there.
    pub early_wakeups: Option<f64>,
    pub timeouts: Option<f64>,
    /// `SO_RCVLOWAT` changes made (restores included).
    pub lowat_changes: Option<f64>,
    pub bytes: Option<f64>,
}

/// Options of `recvAtLeast`.
#[allow(dead_code)]
#[napi(object)]
pub struct RecvOptions {
    /// Milliseconds the call may sleep: none (or negative) waits without limit, 0 returns what
    /// is queued now. The fd's `O_NONBLOCK` and `SO_RCVTIMEO` play no part.
    pub timeout_ms: Option<f64>,
    /// An object whose counters (`RecvStats` fields) the call adds to.
    pub stats: Option<RecvStats>,
}

fn add_stats(env: &Env, options: Option<&Unknown>, s: &lowcopy::RecvStats) -> Result<()> {
    let Some(o) = args::options_object(env, options)? else {
        return Ok(());
    };
    let st: Unknown = o.get_named_property("stats")?;
    if st.get_type()? != ValueType::Object {
        return Ok(());
    }
    // SAFETY: an object (checked just above).
    let mut obj: Object = unsafe { st.cast()? };
    for (k, v) in [
        ("calls", s.calls),
        ("syscalls", s.syscalls),
        ("wakeups", s.wakeups),
        ("earlyWakeups", s.early_wakeups),
        ("timeouts", s.timeouts),
        ("lowatChanges", s.lowat_changes),
        ("bytes", s.bytes),
    ] {
        let old: Option<f64> = obj.get_named_property(k).unwrap_or(None);
        obj.set_named_property(k, old.unwrap_or(0.0) + v as f64)?;
    }
    Ok(())
}

/// Receives at least `min` bytes into `buf` (its own bytes, at its `byteOffset`) with one
/// wakeup where the kernel allows, then whatever else is queued up to `buf.byteLength`;
/// returns the bytes received. It blocks the JS thread: use `recvAtLeastAsync` on the event
/// loop. As the core's `recv_atleast`: `min` is clamped to `1..=byteLength`; fewer than
/// `min` bytes come back at end of stream, on timeout after some bytes, or before an error;
/// 0 at end of stream; `ETIMEDOUT` when nothing came in time; `EINVAL` for an empty `buf`;
/// `EMSGSIZE` when the next datagram does not fit.
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, buf: ArrayBufferView, min: number, options?: RecvOptions"
)]
pub fn recv_at_least(
    env: Env,
    fd: Unknown,
    buf: Unknown,
    min: Unknown,
    options: Option<Unknown>,
) -> Result<f64> {
    let mut b = bytes_arg(&env, &buf, "buf")?;
    let min = size(&env, &min, "min")?;
    let timeout = args::timeout_opt(&env, options.as_ref())?;
    let mut stats = lowcopy::RecvStats::default();
    let r = with_fd(&env, &fd, "recvAtLeast", |fd| {
        Ok(lowcopy::recv_atleast_with_stats(
            fd,
            b.bytes_mut(),
            min,
            timeout,
            &mut stats,
        ))
    })?;
    add_stats(&env, options.as_ref(), &stats)?;
    r.or_throw(&env, "recvAtLeast").map(|n| n as f64)
}

/// `recvAtLeast` on libuv's thread pool, into a new `Buffer` of at most `length` bytes: the
/// event loop runs meanwhile. Works on a private duplicate of `fd`. It occupies a pool thread
/// (4 by default, shared with fs and dns) until it returns: give it a `timeoutMs`.
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, length: number, min: number, options?: RecvOptions",
    ts_return_type = "Promise<Buffer>"
)]
pub fn recv_at_least_async(
    env: Env,
    fd: Unknown,
    length: Unknown,
    min: Unknown,
    options: Option<Unknown>,
) -> Result<AsyncTask<RecvTask>> {
    let len = alloc_len(&env, &length, "length")?;
    let min = size(&env, &min, "min")?;
    let timeout = args::timeout_opt(&env, options.as_ref())?;
    let buf = alloc(&env, len, "recvAtLeastAsync")?;
    let fd = args::dup_fd(&env, &fd, "recvAtLeastAsync")?;
    Ok(AsyncTask::new(RecvTask {
        fd,
        buf,
        min,
        timeout,
    }))
}

/// `recvAtLeastAsync` on a pool thread.
pub struct RecvTask {
    fd: OwnedFd,
    buf: Vec<u8>,
    min: usize,
    timeout: Option<Duration>,
}

impl Task for RecvTask {
    type Output = std::result::Result<Vec<u8>, Fail>;
    type JsValue = Buffer;

    fn compute(&mut self) -> Result<Self::Output> {
        let mut buf = std::mem::take(&mut self.buf);
        Ok(
            lowcopy::recv_atleast(self.fd.as_fd(), &mut buf, self.min, self.timeout)
                .map(|n| {
                    buf.truncate(n);
                    buf
                })
                .map_err(Fail::from),
        )
    }

    fn resolve(&mut self, env: Env, out: Self::Output) -> Result<Buffer> {
        out.map(Buffer::from)
            .map_err(|f| f.into_error(&env, "recvAtLeastAsync"))
    }
}

type CoreRx = lowcopy::Receiver<OwnedFd>;

fn stats_obj(s: &lowcopy::RecvStats) -> RecvStatsOut {
    RecvStatsOut {
        calls: s.calls as f64,
        syscalls: s.syscalls as f64,
        wakeups: s.wakeups as f64,
        early_wakeups: s.early_wakeups as f64,
        timeouts: s.timeouts as f64,
        lowat_changes: s.lowat_changes as f64,
        bytes: s.bytes as f64,
    }
}

/// Counters of a `Receiver` (see the core's `RecvStats`).
#[napi(object)]
pub struct RecvStatsOut {
    pub calls: f64,
    pub syscalls: f64,
    pub wakeups: f64,
    pub early_wakeups: f64,
    pub timeouts: f64,
    pub lowat_changes: f64,
    pub bytes: f64,
}

/// `recvAtLeast` as an object over one socket (the core's `lowcopy::Receiver`, on a private
/// duplicate): the socket is learnt once, and the mark it sets is left in place between calls
/// (fewer syscalls per call); `close()` puts back the mark found at creation.
#[napi]
pub struct Receiver {
    inner: Arc<Mutex<Option<CoreRx>>>,
    fd: i32,
}

fn lock_rx(m: &Mutex<Option<CoreRx>>) -> std::sync::MutexGuard<'_, Option<CoreRx>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[napi]
impl Receiver {
    /// Over (a duplicate of) `fd`. `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a stream, datagram
    /// or seqpacket socket).
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "fd: number | import('node:net').Socket | { fd: number }"
    )]
    pub fn new(env: Env, fd: Unknown) -> Result<Self> {
        let dup = args::dup_fd(&env, &fd, "Receiver")?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&dup);
        let rx = CoreRx::new(dup).or_throw(&env, "Receiver")?;
        Ok(Receiver {
            inner: Arc::new(Mutex::new(Some(rx))),
            fd: raw,
        })
    }

    /// The receiver's own descriptor (its duplicate); -1 once closed.
    #[napi(getter, catch_unwind)]
    pub fn fd(&self) -> i32 {
        match self.inner.try_lock() {
            Ok(g) if g.is_none() => -1,
            _ => self.fd,
        }
    }

    /// As the module's `recvAtLeast`, on this receiver's socket (`options.timeoutMs`).
    /// `EBUSY` while a `recvAtLeastAsync` runs; `EBADF` once closed.
    #[napi(
        catch_unwind,
        ts_args_type = "buf: ArrayBufferView, min: number, options?: RecvOptions"
    )]
    pub fn recv_at_least(
        &self,
        env: Env,
        buf: Unknown,
        min: Unknown,
        options: Option<Unknown>,
    ) -> Result<f64> {
        let mut b = bytes_arg(&env, &buf, "buf")?;
        let min = size(&env, &min, "min")?;
        let timeout = args::timeout_opt(&env, options.as_ref())?;
        let mut g = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(crate::error::sys_error(&env, libc::EBUSY, "recvAtLeast"))
            }
        };
        let rx = g
            .as_mut()
            .ok_or_else(|| crate::error::sys_error(&env, libc::EBADF, "recvAtLeast"))?;
        rx.recv_atleast(b.bytes_mut(), min, timeout)
            .or_throw(&env, "recvAtLeast")
            .map(|n| n as f64)
    }

    /// `recvAtLeast` on libuv's thread pool into a new `Buffer` of at most `length` bytes.
    #[napi(
        catch_unwind,
        ts_args_type = "length: number, min: number, options?: RecvOptions",
        ts_return_type = "Promise<Buffer>"
    )]
    pub fn recv_at_least_async(
        &self,
        env: Env,
        length: Unknown,
        min: Unknown,
        options: Option<Unknown>,
    ) -> Result<AsyncTask<RxTask>> {
        let len = alloc_len(&env, &length, "length")?;
        let min = size(&env, &min, "min")?;
        let timeout = args::timeout_opt(&env, options.as_ref())?;
        let buf = alloc(&env, len, "recvAtLeastAsync")?;
        Ok(AsyncTask::new(RxTask {
            rx: self.inner.clone(),
            buf,
            min,
            timeout,
        }))
    }

    /// The counters so far (`new`'s syscalls included).
    #[napi(catch_unwind)]
    pub fn stats(&self, env: Env) -> Result<RecvStatsOut> {
        let g = lock_rx(&self.inner);
        let rx = g
            .as_ref()
            .ok_or_else(|| crate::error::sys_error(&env, libc::EBADF, "stats"))?;
        Ok(stats_obj(&rx.stats()))
    }

    /// Puts back the socket's mark found at creation and closes the duplicate. Waits for a
    /// running `recvAtLeastAsync` to end (it is bounded by its timeout).
    #[napi(catch_unwind)]
    pub fn close(&self) {
        lock_rx(&self.inner).take();
    }
}

/// `Receiver.recvAtLeastAsync` on a pool thread.
pub struct RxTask {
    rx: Arc<Mutex<Option<CoreRx>>>,
    buf: Vec<u8>,
    min: usize,
    timeout: Option<Duration>,
}

impl Task for RxTask {
    type Output = std::result::Result<Vec<u8>, Fail>;
    type JsValue = Buffer;

    fn compute(&mut self) -> Result<Self::Output> {
        let mut buf = std::mem::take(&mut self.buf);
        let mut g = lock_rx(&self.rx);
        let Some(rx) = g.as_mut() else {
            return Ok(Err(Fail::Errno(libc::EBADF)));
        };
        Ok(rx
            .recv_atleast(&mut buf, self.min, self.timeout)
            .map(|n| {
                buf.truncate(n);
                buf
            })
            .map_err(Fail::from))
    }

    fn resolve(&mut self, env: Env, out: Self::Output) -> Result<Buffer> {
        out.map(Buffer::from)
            .map_err(|f| f.into_error(&env, "recvAtLeastAsync"))
    }
}
