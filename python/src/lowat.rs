//! Low-water-mark receive: `set_rcvlowat`, `recv_atleast`, `recv_atleast_into`.

use std::os::fd::AsFd;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::util::{
    blocking, count, deadline_of, dup_of, guard, left, read_bytes, record, timeout_of, IoResultExt,
    SendPtr, WriteBuf,
};

record! {
    /// Counters of low-water-mark receives (`recv_atleast`), added to on every call, failed
    /// ones included.
    RecvStats from lowcopy::RecvStats {
        /// Calls made.
        calls,
        /// Syscalls made (including failed ones).
        syscalls,
        /// `poll` returns that reported the socket ready: the wakeups.
        wakeups,
        /// Wakeups after which the call still had fewer than `min` bytes; it waited again.
        early_wakeups,
        /// Calls that ran out of time.
        timeouts,
        /// `SO_RCVLOWAT` changes made, restores included.
        lowat_changes,
        /// Bytes returned.
        bytes,
    }
}

/// Sets `SO_RCVLOWAT` to `nbytes` and returns the value the kernel keeps, in bytes.
///
/// TCP caps it at `tcp_rmem[2] / 2` (16 MiB by default), or at `SO_RCVBUF / 2` when the
/// receive buffer is locked; values above 2**31-1 are passed as 2**31-1 and capped the same
/// way; 0 is kept as 1. Setting it on TCP also grows an unlocked receive buffer to about
/// twice the mark. On a listening socket each connection gets the value when its handshake
/// completes. AF_UNIX and UDP store the value, but their poll ignores it.
///
/// Errors (`OSError`): `EBADF`, `ENOTSOCK`, and other `setsockopt`/`getsockopt` errors.
#[pyfunction]
fn set_rcvlowat(sock: &Bound<'_, PyAny>, nbytes: &Bound<'_, PyAny>) -> PyResult<usize> {
    guard(|| {
        let n = count(nbytes, "nbytes")?;
        let fd = dup_of(sock)?;
        lowcopy::set_rcvlowat(fd.as_fd(), n).py()
    })
}

/// Receives at least `min` bytes with one wakeup where the kernel allows (the socket's
/// `SO_RCVLOWAT` raised to what is still missing while it sleeps in `poll`, then restored),
/// then whatever else is queued, up to `nbytes`; returns them.
///
/// `min` is clamped to 1..nbytes. `timeout` in seconds: None waits without limit, 0 returns
/// what is queued now. The socket's `O_NONBLOCK` and `SO_RCVTIMEO` play no part.
///
/// Returns at least `min` bytes when they came in time; fewer (but some) when the peer shut
/// down, time ran out, or an error or signal came after them (the error is left for the next
/// call); `b""` at end of stream. Datagram sockets: whole datagrams are appended while they
/// fit. The GIL is released while the call waits; a signal before any byte runs the Python
/// handlers and the call goes on with the time left.
///
/// Errors (`OSError`): `TimeoutError` (`ETIMEDOUT`: nothing came in time), `EINVAL`
/// (`nbytes` 0), `EBADF`, `ENOTSOCK`, `EOPNOTSUPP`, `EMSGSIZE` (the next datagram is larger
/// than `nbytes`; it stays queued), and the socket's errors (`ConnectionResetError` ...).
#[pyfunction]
#[pyo3(signature = (sock, nbytes, min, timeout = None))]
fn recv_atleast(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    nbytes: &Bound<'_, PyAny>,
    min: &Bound<'_, PyAny>,
    timeout: Option<f64>,
) -> PyResult<Py<PyBytes>> {
    guard(|| {
        let (nbytes, min) = (count(nbytes, "nbytes")?, count(min, "min")?);
        let deadline = deadline_of(timeout_of(timeout)?);
        let fd = dup_of(sock)?;
        let mut stats = lowcopy::RecvStats::default();
        read_bytes(py, nbytes, false, |p, n| {
            // SAFETY: `read_bytes` owns `n` writable bytes at `p` for this call.
            unsafe {
                lowcopy::lowat::recv_atleast_raw(
                    fd.as_fd(),
                    p.get(),
                    n,
                    min,
                    time(deadline, timeout),
                    &mut stats,
                )
            }
        })
    })
}

/// The timeout for one try: what is left of the caller's (0 stays 0: "do not wait").
fn time(deadline: Option<std::time::Instant>, asked: Option<f64>) -> Option<Duration> {
    match asked {
        Some(0.0) => Some(Duration::ZERO),
        _ => left(deadline),
    }
}

/// `recv_atleast` into a writable buffer: `nbytes` of it (0: all of it); returns the bytes
/// written. Results and errors as `recv_atleast`. With `stats`, the call's counters are
/// added to that `RecvCounters`.
#[pyfunction]
#[pyo3(signature = (sock, buffer, min, timeout = None, nbytes = 0))]
fn recv_atleast_into(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    buffer: &Bound<'_, PyAny>,
    min: &Bound<'_, PyAny>,
    timeout: Option<f64>,
    nbytes: i64,
) -> PyResult<usize> {
    guard(|| {
        let min = count(min, "min")?;
        let deadline = deadline_of(timeout_of(timeout)?);
        let fd = dup_of(sock)?;
        let b = WriteBuf::get(buffer, nbytes)?;
        let (ptr, len): (SendPtr, usize) = (b.ptr, b.len);
        let mut stats = lowcopy::RecvStats::default();
        let r = blocking(py, || {
            // SAFETY: the export keeps `len` writable bytes at `ptr` alive and un-resizable
            // until it is released below.
            unsafe {
                lowcopy::lowat::recv_atleast_raw(
                    fd.as_fd(),
                    ptr.get(),
                    len,
                    min,
                    time(deadline, timeout),
                    &mut stats,
                )
            }
        });
        b.release(py);
        r
    })
}

/// `recv_atleast_into`, also returning the call's counters: `(bytes written, RecvStats)`
/// (wakeups, early wakeups, `SO_RCVLOWAT` changes, syscalls). Results and errors as
/// `recv_atleast`.
#[pyfunction]
#[pyo3(signature = (sock, buffer, min, timeout = None, nbytes = 0))]
fn recv_atleast_stats(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    buffer: &Bound<'_, PyAny>,
    min: &Bound<'_, PyAny>,
    timeout: Option<f64>,
    nbytes: i64,
) -> PyResult<(usize, RecvStats)> {
    guard(|| {
        let min = count(min, "min")?;
        let deadline = deadline_of(timeout_of(timeout)?);
        let fd = dup_of(sock)?;
        let b = WriteBuf::get(buffer, nbytes)?;
        let (ptr, len): (SendPtr, usize) = (b.ptr, b.len);
        let mut stats = lowcopy::RecvStats::default();
        let r = blocking(py, || {
            // SAFETY: the export keeps `len` writable bytes at `ptr` alive and un-resizable
            // until it is released below.
            unsafe {
                lowcopy::lowat::recv_atleast_raw(
                    fd.as_fd(),
                    ptr.get(),
                    len,
                    min,
                    time(deadline, timeout),
                    &mut stats,
                )
            }
        });
        b.release(py);
        Ok((r?, stats.into()))
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(recv_atleast_stats, m)?)?;
    m.add_class::<RecvStats>()?;
    m.add_function(wrap_pyfunction!(set_rcvlowat, m)?)?;
    m.add_function(wrap_pyfunction!(recv_atleast, m)?)?;
    m.add_function(wrap_pyfunction!(recv_atleast_into, m)?)?;
    Ok(())
}
