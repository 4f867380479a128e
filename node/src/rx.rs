//! Low-water-mark receive: `setRcvlowat`, `recvAtLeast`, `recvAtLeastAsync`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::args::{self, alloc_len, size, with_fd};
use crate::error::OrThrow;
use crate::peek::bytes_arg;
use crate::shared::Shared;
use crate::teardown::BufferTask;

/// Sets `SO_RCVLOWAT` to `bytes` and returns the value the kernel keeps, in bytes. On a
/// `net.Socket` it gates libuv's wakeups too: Node's `'data'` events then come only once that
/// many bytes are queued (or at end of stream).
///
// doc-copy: set_rcvlowat.kernel
/// TCP caps it at `tcp_rmem[2] / 2` (16 MiB with the default 32 MiB maximum), or at half of
/// `SO_RCVBUF` as read back (the kernel doubles what was set) once the application locked the
/// receive buffer with `SO_RCVBUF`; values above `INT_MAX` are passed as `INT_MAX` and capped the
/// same way; 0 is kept as 1. Setting it on TCP also grows an unlocked receive buffer to about twice
/// the mark (never shrunk again) and, when it lowers the mark, wakes pollers whose data now
/// suffices.
///
/// On a listening TCP socket the value is reported the same way and copied into each connection
/// when its handshake completes (not at `accept`): connections already waiting in the accept queue
/// keep the old value. tcp_mmap sets its mark this way. On kernels before 21b29e74ffe5 (Oct 2025) a
/// large inherited mark also clamped the window scale the listener advertised, so there prefer
/// setting it after `accept`. AF_UNIX and UDP store the value, but their poll ignores it.
// doc-end
///
/// Errors:
// doc-copy: set_rcvlowat.errors
/// `EBADF`, `ENOTSOCK`, and other `setsockopt`/`getsockopt` errors.
// doc-end
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, bytes: number"
)]
pub fn set_rcvlowat(env: Env, fd: Unknown, bytes: Unknown) -> Result<f64> {
    let bytes = size(&env, &bytes, "bytes")?;
    with_fd(&env, &fd, "setRcvlowat", |fd| {
        lowcopy::set_rcvlowat(fd, bytes).map(|n| n as f64)
    })
}

/// Counters of `recvAtLeast` (see the core's `RecvStats`), added to the object passed as
/// `options.stats` on every call.
#[allow(dead_code)]
#[napi(object)]
pub struct RecvStats {
    pub calls: Option<f64>,
    pub syscalls: Option<f64>,
    // doc-copy: recv_stats.wakeups
    /// `poll` returns that reported the socket ready: the wakeups.
    // doc-end
    pub wakeups: Option<f64>,
    // doc-copy: recv_stats.early_wakeups
    /// Wakeups after which the call still had fewer than `min` bytes (the kernel woke below the
    /// mark, the mark was capped, or datagrams were small); the call waited again.
    // doc-end
    pub early_wakeups: Option<f64>,
    pub timeouts: Option<f64>,
    // doc-copy: recv_stats.lowat_changes
    /// `SO_RCVLOWAT` changes made, restores included.
    // doc-end
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
/// loop. `min` is clamped to `1..=byteLength`.
///
/// Returns:
// doc-copy: recv_atleast.returns
/// - `min` to the buffer's length in bytes when `min` bytes came in time;
/// - fewer than `min` (but more than 0) when the peer shut down after them, when time ran out after
///   they came, when the connection was reset after them (the error is left pending and the next
///   call reports it), when a signal arrived after them, or on a datagram socket when the next
///   datagram does not fit in what is left of the buffer;
/// - 0 at end of stream with nothing received;
/// - `ETIMEDOUT` when nothing came in time.
// doc-end
///
// doc-copy: recv_atleast.kernel
/// TCP and MPTCP: the socket's `SO_RCVLOWAT` is set to the bytes still missing while the call waits
/// (capped by the kernel as in `setRcvlowat`) and restored to the value found on entry before it
/// returns: no change when the socket already holds the mark the call needs, so setting the mark
/// once with `setRcvlowat` saves two syscalls per call. An unlocked receive buffer grows to about
/// twice the mark and stays so. Early wakeups below the mark (memory pressure, a window down to one
/// MSS) are read and waited past, never lost. Never a blocking `recv`, so never the trap where a
/// read shorter than the mark sleeps until the mark.
///
/// AF_UNIX stream and other streams: their poll ignores `SO_RCVLOWAT`, so the call wakes on every
/// arrival and loops until `min`; the result is the same, the wakeups are not saved.
///
/// Datagram sockets (UDP, AF_UNIX datagram and seqpacket): whole datagrams are appended to the
/// buffer while they fit, until `min` bytes; a datagram is never truncated. `EMSGSIZE` when the
/// first datagram is larger than the buffer (it stays queued). Zero-length datagrams are consumed
/// and add nothing.
// doc-end
///
// doc-copy: recv_atleast.errqueue
/// The error queue: the call never reads it. Its entries (the completion notifications of a
/// zero-copy sender on the same socket, ICMP reports queued with `IP_RECVERR`, `SO_TIMESTAMPING`
/// reports) stay for their owner, and neither wake the call nor end it: while one is queued, `poll`
/// reports `POLLERR` at once on every call, so the call then sleeps on an edge-triggered epoll
/// instance of its own (one descriptor for the call's duration, 2-3 syscalls more per wait) that
/// wakes only for new events. A socket error (`SO_ERROR`: a reset, an ICMP error with `IP_RECVERR`)
/// is returned as `recv` returns it, at once when nothing was received; one that arrives after some
/// bytes is left for the next call, and ends this one early only when the connection is reset or
/// hung up.
// doc-end
///
/// Errors: `EINVAL` (an empty `buf`),
// doc-copy: recv_atleast.errors
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a stream, datagram or seqpacket socket), `ETIMEDOUT`
/// (nothing came in time), `EMSGSIZE` (the first datagram is larger than the buffer; it stays
/// queued), `EINTR` (a signal before any byte), and the socket's own errors (`ECONNRESET`, ...).
// doc-end
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
    let (min, timeout) = recv_opts(&env, &min, options.as_ref())?;
    let fd = args::borrowed_fd(&env, &fd, "recvAtLeast")?;
    // After every read that can run JS (the options' and `{ fd }`'s getters): see `View`.
    let mut b = bytes_arg(&env, &buf, "buf")?;
    let mut stats = lowcopy::RecvStats::default();
    let r = lowcopy::recv_atleast_with_stats(fd, b.bytes_mut(), min, timeout, &mut stats);
    add_stats(&env, options.as_ref(), &stats)?;
    r.or_throw(&env, "recvAtLeast").map(|n| n as f64)
}

/// `recvAtLeast` off the JS thread (on a thread of its own), into a new `Buffer` of at most
/// `length` bytes: the event loop runs meanwhile. Works on a private duplicate of `fd`. A
/// worker's `terminate()` (or exit) aborts it (the bytes it took are dropped with the worker;
/// what is still queued stays in the socket).
///
/// The `Buffer` holds at least `min` bytes (within `length`);
/// `length` above 2147483647 (`INT_MAX`, the most one receive returns) is a `RangeError`.
// doc-copy: recv_buffer_len.kernel
/// A call that allocates its result sizes it by what the socket can hold rather than by the size
/// asked for alone: up to 256 KiB the size asked for; above that, at least 256 KiB and otherwise
/// the larger of the bytes queued now (`SIOCINQ`) and the socket's receive buffer (`SO_RCVBUF` as
/// the kernel reports it), never more than asked. Everything queued at the call fits; bytes that
/// arrive while the call waits fit too on TCP (its window keeps the queue within about
/// `SO_RCVBUF`), and on AF_UNIX streams (bounded by the sender's `SO_SNDBUF`) may be more, left
/// queued for the next call: the result is then shorter than the size asked for, as any receive may
/// be. Cost: a `getsockopt` and an `ioctl` when the size asked for is above 256 KiB, none
/// otherwise.
// doc-end

#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, length: number, min: number, options?: RecvOptions",
    ts_return_type = "Promise<Buffer>"
)]
pub fn recv_at_least_async<'e>(
    env: &'e Env,
    fd: Unknown,
    length: Unknown,
    min: Unknown,
    options: Option<Unknown>,
) -> Result<Object<'e>> {
    let len = alloc_len(env, &length, "length")?;
    let (min, timeout) = recv_opts(env, &min, options.as_ref())?;
    let fd = args::dup_fd(env, &fd, "recvAtLeastAsync")?;
    // On a thread of its own, aborted by the environment's teardown.
    crate::teardown::spawn(env, "recvAtLeastAsync", |abort| {
        BufferTask("recvAtLeastAsync", move || {
            let mut buf = buffer_for(fd.as_fd(), len, min)?;
            let mut st = lowcopy::RecvStats::default();
            let n = lowcopy::recv_atleast_abortable(&fd, &mut buf, min, timeout, &abort, &mut st);
            buf.truncate(n?);
            Ok(buf)
        })
    })
}

/// The buffer of an async receive of up to `len` bytes, at least `min` of them: sized by what
/// the socket can hold (`lowcopy::recv_buffer_len`), never below `min` (within `len`).
fn buffer_for(fd: BorrowedFd<'_>, len: usize, min: usize) -> std::io::Result<Vec<u8>> {
    args::try_alloc(lowcopy::recv_buffer_len(fd, len).max(min.min(len)))
}

type CoreRx = lowcopy::Receiver<OwnedFd>;

/// Counters of a `Receiver` (see the core's `RecvStats`).
#[napi(object)]
pub struct RecvStatsOut {
    // doc-copy: recv_stats.calls
    /// Calls made.
    // doc-end
    pub calls: f64,
    // doc-copy: recv_stats.syscalls
    /// Syscalls made (including failed ones).
    // doc-end
    pub syscalls: f64,
    // doc-copy: recv_stats.wakeups
    /// `poll` returns that reported the socket ready: the wakeups.
    // doc-end
    pub wakeups: f64,
    // doc-copy: recv_stats.early_wakeups
    /// Wakeups after which the call still had fewer than `min` bytes (the kernel woke below the
    /// mark, the mark was capped, or datagrams were small); the call waited again.
    // doc-end
    pub early_wakeups: f64,
    // doc-copy: recv_stats.timeouts
    /// Calls that ran out of time (they returned what had come, or `ETIMEDOUT`).
    // doc-end
    pub timeouts: f64,
    // doc-copy: recv_stats.lowat_changes
    /// `SO_RCVLOWAT` changes made, restores included.
    // doc-end
    pub lowat_changes: f64,
    // doc-copy: recv_stats.bytes
    /// Bytes returned.
    // doc-end
    pub bytes: f64,
}

mirror!(RecvStatsOut from lowcopy::RecvStats { calls, syscalls, wakeups, early_wakeups, timeouts,
    lowat_changes, bytes });

/// `recvAtLeast` as an object over one socket (the core's `lowcopy::Receiver`, on a private
/// duplicate). The stateless receive is `recvAtLeast`; the release, `close()`.
///
// doc-copy: receiver.kernel
/// The stateless receive asks the kernel on every call what kind of socket it has (2 `getsockopt`)
/// and what mark it holds (1 more), and puts the mark back when it returns. A receiver does that
/// once, when it is made, and leaves the mark of its last call in place between calls, so a loop
/// receiving chunks of the same size makes exactly the raw loop's syscalls per chunk: `poll` and
/// `recv` (one `setsockopt` more when `min` changes). Releasing it puts back the mark found at
/// creation.
///
/// Results, errors and the behaviour of each call (early wakeups, end of stream, datagrams, the
/// error queue) are those of the stateless receive. While the receiver lives, the socket's
/// `SO_RCVLOWAT` is the bytes its last call still missed when it returned (usually `min`): a poll
/// or epoll of the caller's on the same socket sees that mark. After it is made it allocates
/// nothing; the first wait that meets a non-empty error queue makes an epoll instance (one
/// descriptor), kept until the receiver is released.
// doc-end
#[napi]
pub struct Receiver {
    inner: Arc<Shared<CoreRx>>,
    fd: i32,
}

#[napi]
impl Receiver {
    /// Over (a duplicate of) `fd`: learns the socket (2 or 3 `getsockopt`).
    ///
    /// Errors: `EMFILE` (no descriptor for the duplicate),
    // doc-copy: receiver_new.errors
    /// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a stream, datagram or seqpacket socket).
    // doc-end
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
            inner: Shared::new(rx),
            fd: raw,
        })
    }

    /// The receiver's own descriptor (its duplicate); -1 once closed.
    #[napi(getter, catch_unwind)]
    pub fn fd(&self) -> i32 {
        if self.inner.closed() {
            -1
        } else {
            self.fd
        }
    }

    /// As the module's `recvAtLeast`, on this receiver's socket (`options.timeoutMs`).
    /// `EBUSY` while a `recvAtLeastAsync` is pending; `EBADF` once closed.
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
        let (min, timeout) = recv_opts(&env, &min, options.as_ref())?;
        // After every read that can run JS (the options' getters): see `View`.
        let mut b = bytes_arg(&env, &buf, "buf")?;
        self.inner.with(&env, "recvAtLeast", |rx| {
            rx.recv_atleast(b.bytes_mut(), min, timeout)
                .map(|n| n as f64)
        })
    }

    /// `recvAtLeast` off the JS thread (as the module's `recvAtLeastAsync`) into a new
    /// `Buffer` of at most `length` bytes, sized as the module's `recvAtLeastAsync`'s (what the
    /// socket can hold, at least `min`).
    #[napi(
        catch_unwind,
        ts_args_type = "length: number, min: number, options?: RecvOptions",
        ts_return_type = "Promise<Buffer>"
    )]
    pub fn recv_at_least_async<'e>(
        &self,
        env: &'e Env,
        length: Unknown,
        min: Unknown,
        options: Option<Unknown>,
    ) -> Result<Object<'e>> {
        let len = alloc_len(env, &length, "length")?;
        let (min, timeout) = recv_opts(env, &min, options.as_ref())?;
        self.inner.spawn(env, "recvAtLeastAsync", move |rx, abort| {
            let mut buf = buffer_for(rx.get_ref().as_fd(), len, min)?;
            let n = rx.recv_atleast_abortable(&mut buf, min, timeout, abort);
            buf.truncate(n.map_err(crate::peek::aborted)?);
            Ok(buf)
        })
    }

    /// The counters so far (`new`'s syscalls included).
    #[napi(catch_unwind)]
    pub fn stats(&self, env: Env) -> Result<RecvStatsOut> {
        self.inner
            .with(&env, "stats", |rx| Ok((&rx.stats()).into()))
    }

    /// Puts back the socket's mark found at creation and closes the duplicate. A pending
    /// `recvAtLeastAsync` ends at once: it resolves with the bytes it had received, or rejects
    /// with an `AbortError` when it had none (nothing it took is lost).
    #[napi(catch_unwind)]
    pub fn close(&self) {
        self.inner.close();
    }
}

/// A receive's `min` and `options.timeoutMs` (its `stats` checked to be an object, if given).
fn recv_opts(env: &Env, min: &Unknown, o: Option<&Unknown>) -> Result<(usize, Option<Duration>)> {
    let min = size(env, min, "min")?;
    let timeout = args::timeout_opt(env, o)?;
    args::object_opt(env, o, "stats")?;
    Ok((min, timeout))
}
