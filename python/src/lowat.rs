//! Low-water-mark receive: `set_rcvlowat`, `recv_atleast`, `recv_atleast_into`, `Receiver`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::util::{
    blocking, count, deadline_of, dup_of, guard, left, read_bytes, record, result_size, timeout_of,
    Handle, IoResultExt, SendPtr, WriteBuf,
};

record! {
    /// Counters of low-water-mark receives (`recv_atleast`), added to on every call, failed
    /// ones included.
    RecvStats from lowcopy::RecvStats {
        // doc-copy: recv_stats.calls
        /// Calls made.
        // doc-end
        calls,
        // doc-copy: recv_stats.syscalls
        /// Syscalls made (including failed ones).
        // doc-end
        syscalls,
        // doc-copy: recv_stats.wakeups
        /// `poll` returns that reported the socket ready: the wakeups.
        // doc-end
        wakeups,
        // doc-copy: recv_stats.early_wakeups
        /// Wakeups after which the call still had fewer than `min` bytes (the kernel woke below the
        /// mark, the mark was capped, or datagrams were small); the call waited again.
        // doc-end
        early_wakeups,
        // doc-copy: recv_stats.timeouts
        /// Calls that ran out of time (they returned what had come, or `ETIMEDOUT`).
        // doc-end
        timeouts,
        // doc-copy: recv_stats.lowat_changes
        /// `SO_RCVLOWAT` changes made, restores included.
        // doc-end
        lowat_changes,
        // doc-copy: recv_stats.bytes
        /// Bytes returned.
        // doc-end
        bytes,
    }
}

/// Sets `SO_RCVLOWAT` to `nbytes` and returns the value the kernel keeps, in bytes.
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
/// Errors (`OSError`):
// doc-copy: set_rcvlowat.errors
/// `EBADF`, `ENOTSOCK`, and other `setsockopt`/`getsockopt` errors.
// doc-end
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
/// The buffer holds at least `min` bytes (within `nbytes`);
/// `OverflowError` for `nbytes` above 2147483647 (`INT_MAX`, the most one receive returns).
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
///
/// Returns the bytes as `bytes` (`b""` at end of stream; "the buffer" below is the one sized
/// so):
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
/// The GIL is released while the call waits; a signal before any byte runs the Python
/// handlers and the call goes on with the time left.
///
// doc-copy: recv_atleast.kernel
/// TCP and MPTCP: the socket's `SO_RCVLOWAT` is set to the bytes still missing while the call waits
/// (capped by the kernel as in `set_rcvlowat`) and restored to the value found on entry before it
/// returns: no change when the socket already holds the mark the call needs, so setting the mark
/// once with `set_rcvlowat` saves two syscalls per call. An unlocked receive buffer grows to about
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
/// Errors (`OSError`; `ETIMEDOUT` is `TimeoutError`, `ECONNRESET` `ConnectionResetError`):
/// `EINVAL` (`nbytes` 0),
// doc-copy: recv_atleast.errors
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a stream, datagram or seqpacket socket), `ETIMEDOUT`
/// (nothing came in time), `EMSGSIZE` (the first datagram is larger than the buffer; it stays
/// queued), `EINTR` (a signal before any byte), and the socket's own errors (`ECONNRESET`, ...).
// doc-end
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
        let (nbytes, min) = (result_size(nbytes, "nbytes")?, count(min, "min")?);
        let deadline = deadline_of(timeout_of(timeout)?);
        let fd = dup_of(sock)?;
        let mut stats = lowcopy::RecvStats::default();
        // What the socket can hold, and never less than `min` (within `nbytes`).
        let len = lowcopy::recv_buffer_len(&fd, nbytes).max(min.min(nbytes));
        read_bytes(py, len, false, |p, n| {
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
/// written. Results and errors as `recv_atleast`.
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
    guard(|| Ok(recv_into_counted(py, sock, buffer, min, timeout, nbytes)?.0))
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
        let (n, stats) = recv_into_counted(py, sock, buffer, min, timeout, nbytes)?;
        Ok((n, stats.into()))
    })
}

/// The stateless receive into a caller's buffer, with the GIL released while it waits; the
/// buffer's export is released on this thread before returning.
fn recv_into_counted(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    buffer: &Bound<'_, PyAny>,
    min: &Bound<'_, PyAny>,
    timeout: Option<f64>,
    nbytes: i64,
) -> PyResult<(usize, lowcopy::RecvStats)> {
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
    Ok((r?, stats))
}

/// A receiver of `min`-byte chunks on one socket: `recv_atleast` that learns the socket
/// once (its type, protocol and `SO_RCVLOWAT`, in the constructor). The stateless receive is
/// `recv_atleast`; the release, `close()`.
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
///
/// Works on its own duplicate of the socket's descriptor; not for use by two threads at once
/// (`RuntimeError`).
#[pyclass(frozen, module = "lowcopy._lowcopy")]
pub struct Receiver {
    h: Handle<lowcopy::Receiver<OwnedFd>>,
}

impl Receiver {
    fn recv_raw(
        &self,
        py: Python<'_>,
        ptr: SendPtr,
        len: usize,
        min: usize,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let deadline = deadline_of(timeout_of(timeout)?);
        self.h.with(|r| {
            blocking(py, || {
                // SAFETY: the caller owns `len` writable bytes at `ptr` (a buffer export or
                // a Vec) for this whole call.
                unsafe { r.recv_atleast_raw(ptr.get(), len, min, time(deadline, timeout)) }
            })
        })
    }
}

#[pymethods]
impl Receiver {
    /// Learns the socket (over a duplicate of its descriptor): 2 or 3 `getsockopt`.
    ///
    /// Errors (`OSError`):
    // doc-copy: receiver_new.errors
    /// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a stream, datagram or seqpacket socket).
    // doc-end
    #[new]
    fn new(sock: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            let fd = dup_of(sock)?;
            let r = lowcopy::Receiver::new(fd).py()?;
            Ok(Receiver {
                h: Handle::new("Receiver", r),
            })
        })
    }

    /// `recv_atleast(sock, nbytes, min, timeout)` on this receiver's socket; returns the
    /// bytes. Results, errors and the buffer's size as `recv_atleast`.
    #[pyo3(signature = (nbytes, min, timeout = None))]
    fn recv_atleast(
        &self,
        py: Python<'_>,
        nbytes: &Bound<'_, PyAny>,
        min: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyBytes>> {
        guard(|| {
            let (nbytes, min) = (result_size(nbytes, "nbytes")?, count(min, "min")?);
            // What the socket can hold, and never less than `min` (within `nbytes`).
            let nbytes = self.h.with(|r| {
                Ok(lowcopy::recv_buffer_len(r.get_ref().as_fd(), nbytes).max(min.min(nbytes)))
            })?;
            let mut v: Vec<u8> = Vec::new();
            v.try_reserve_exact(nbytes.max(1))
                .map_err(|_| pyo3::exceptions::PyMemoryError::new_err(()))?;
            let n = self.recv_raw(py, SendPtr(v.as_mut_ptr()), nbytes, min, timeout)?;
            assert!(
                n <= nbytes,
                "the core reported more bytes than the buffer holds"
            );
            // SAFETY: the kernel wrote the first `n <= capacity` bytes.
            unsafe { v.set_len(n) };
            Ok(PyBytes::new(py, &v).unbind())
        })
    }

    /// `recv_atleast` into a writable buffer: `nbytes` of it (0: all of it); returns the
    /// bytes written. No allocation: the data path.
    #[pyo3(signature = (buffer, min, timeout = None, nbytes = 0))]
    fn recv_atleast_into(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        min: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        nbytes: i64,
    ) -> PyResult<usize> {
        guard(|| {
            let min = count(min, "min")?;
            let b = WriteBuf::get(buffer, nbytes)?;
            let r = self.recv_raw(py, b.ptr, b.len, min, timeout);
            b.release(py);
            r
        })
    }

    /// The counters so far (`RecvStats`; the constructor's syscalls included).
    fn stats(&self) -> PyResult<RecvStats> {
        guard(|| self.h.with(|r| Ok(r.stats().into())))
    }

    /// The receiver's own duplicate of the socket's descriptor.
    fn fileno(&self) -> PyResult<i32> {
        guard(|| self.h.with(|r| Ok(r.get_ref().as_raw_fd())))
    }

    /// Puts back the socket's `SO_RCVLOWAT` found at creation and closes the duplicate.
    /// Idempotent; later calls other than `close` raise `ValueError`.
    fn close(&self) -> PyResult<()> {
        guard(|| {
            drop(self.h.take()?);
            Ok(())
        })
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.h.is_closed()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close()
    }

    /// The length of the buffer `recv_atleast(nbytes, min)` allocates (what the socket can
    /// hold, at least `min` within `nbytes`; `OverflowError` above 2147483647), for
    /// `lowcopy.asyncio`, whose receive fills a buffer of its own. Internal.
    fn _buffer_len(&self, nbytes: &Bound<'_, PyAny>, min: &Bound<'_, PyAny>) -> PyResult<usize> {
        guard(|| {
            let (nbytes, min) = (result_size(nbytes, "nbytes")?, count(min, "min")?);
            self.h.with(|r| {
                Ok(lowcopy::recv_buffer_len(r.get_ref().as_fd(), nbytes).max(min.min(nbytes)))
            })
        })
    }

    fn __repr__(&self) -> String {
        match self.h.with(|r| Ok(r.get_ref().as_raw_fd())) {
            Ok(fd) => format!("<lowcopy.Receiver fd={fd}>"),
            Err(_) if self.h.is_closed() => "<lowcopy.Receiver [closed]>".to_string(),
            Err(_) => "<lowcopy.Receiver [in use]>".to_string(),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Receiver>()?;
    m.add_function(wrap_pyfunction!(recv_atleast_stats, m)?)?;
    m.add_class::<RecvStats>()?;
    m.add_function(wrap_pyfunction!(set_rcvlowat, m)?)?;
    m.add_function(wrap_pyfunction!(recv_atleast, m)?)?;
    m.add_function(wrap_pyfunction!(recv_atleast_into, m)?)?;
    Ok(())
}
