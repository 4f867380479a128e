//! Offset peek: `peek_at`, `peek_into`, `consume`, `peek_supported` and the `Peeker` cursor.

use std::io::IoSliceMut;
use std::os::fd::AsFd;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::util::{blocking, count, dup_of, guard, read_bytes, IoResultExt, WriteBuf};

/// Peeks up to `nbytes` bytes lying `offset` bytes after the head of the socket's receive
/// queue, without consuming anything; returns them (at least one byte).
///
/// `b""` when the peer shut down and nothing lies beyond `offset`; `BlockingIOError`
/// (`EAGAIN`) when nothing lies beyond `offset` yet and `flags` has `MSG_DONTWAIT` or the
/// socket is non-blocking (a socket with a timeout is non-blocking: `settimeout` sets
/// `O_NONBLOCK`). A blocking call waits (GIL released) for a byte beyond `offset`.
///
/// Precondition: no `Peeker` is using `SO_PEEK_OFF` on this socket; this call leaves it
/// disabled. Costs 2-3 `getsockopt` to classify the socket, one `recvmsg`, and with
/// `offset > 0` on a socket with `SO_PEEK_OFF` two `setsockopt`: use a `Peeker` on the
/// data path.
///
/// Errors (`OSError`): `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream
/// socket), `EINVAL` (flags other than `MSG_DONTWAIT`, or `nbytes` 0), `EOVERFLOW` (offset
/// beyond what the mechanism can represent: 2**31-1 with `SO_PEEK_OFF`, about 64 MiB with
/// the discard prefix), and `recvmsg` errors (`ECONNRESET` ...).
#[pyfunction]
#[pyo3(signature = (sock, offset, nbytes, flags = 0))]
fn peek_at(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    offset: &Bound<'_, PyAny>,
    nbytes: &Bound<'_, PyAny>,
    flags: i32,
) -> PyResult<Py<PyBytes>> {
    guard(|| {
        let (offset, nbytes) = (count(offset, "offset")?, count(nbytes, "nbytes")?);
        let fd = dup_of(sock)?;
        read_bytes(py, nbytes, true, |p, n| {
            // SAFETY: `read_bytes` hands out `n` zero-filled bytes it owns for this call.
            let buf = unsafe { std::slice::from_raw_parts_mut(p.get(), n) };
            lowcopy::peek_at(fd.as_fd(), offset, &mut [IoSliceMut::new(buf)], flags)
        })
    })
}

/// `peek_at` into a writable buffer (`bytearray`, `memoryview`, `array`, mmap ...):
/// `nbytes` of it (0: all of it); returns the bytes written. Results and errors as
/// `peek_at`.
#[pyfunction]
#[pyo3(signature = (sock, buffer, offset = None, nbytes = 0, flags = 0))]
fn peek_into(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    buffer: &Bound<'_, PyAny>,
    offset: Option<&Bound<'_, PyAny>>,
    nbytes: i64,
    flags: i32,
) -> PyResult<usize> {
    guard(|| {
        let offset = offset.map_or(Ok(0), |o| count(o, "offset"))?;
        let fd = dup_of(sock)?;
        let b = WriteBuf::get(buffer, nbytes)?;
        let (ptr, len) = (b.ptr, b.len);
        let r = blocking(py, || {
            // SAFETY: the export keeps `len` writable bytes at `ptr` alive and un-resizable
            // until it is released below.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr.get(), len) };
            lowcopy::peek_at(fd.as_fd(), offset, &mut [IoSliceMut::new(buf)], flags)
        });
        b.release(py);
        r
    })
}

/// Drops up to `nbytes` bytes from the head of the socket's receive queue; returns how many
/// were dropped. TCP and MPTCP copy nothing (`recv(MSG_TRUNC)`); AF_UNIX reads them into a
/// scratch buffer. 0 for `nbytes` 0 or at end of stream; `BlockingIOError` when nothing is
/// queued and the call may not block. `flags`: `MSG_DONTWAIT` only, else `EINVAL`. The
/// kernel lowers `SO_PEEK_OFF` by the bytes dropped.
#[pyfunction]
#[pyo3(signature = (sock, nbytes, flags = 0))]
fn consume(
    py: Python<'_>,
    sock: &Bound<'_, PyAny>,
    nbytes: &Bound<'_, PyAny>,
    flags: i32,
) -> PyResult<usize> {
    guard(|| {
        let n = count(nbytes, "nbytes")?;
        let fd = dup_of(sock)?;
        blocking(py, || lowcopy::consume(fd.as_fd(), n, flags))
    })
}

/// Whether `SO_PEEK_OFF` works on this stream socket (TCP over IPv4 since Linux 6.9, IPv6
/// since 6.12, AF_UNIX since 3.4, never MPTCP). Leaves the socket's `SO_PEEK_OFF` as it
/// was. Errors: `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream).
#[pyfunction]
fn peek_supported(sock: &Bound<'_, PyAny>) -> PyResult<bool> {
    guard(|| {
        let fd = dup_of(sock)?;
        lowcopy::peek_supported(fd.as_fd()).py()
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(peek_at, m)?)?;
    m.add_function(wrap_pyfunction!(peek_into, m)?)?;
    m.add_function(wrap_pyfunction!(consume, m)?)?;
    m.add_function(wrap_pyfunction!(peek_supported, m)?)?;
    Ok(())
}
