//! Offset peek: `peek_at`, `peek_into`, `consume`, `peek_supported` and the `Peeker` cursor.

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, OwnedFd};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::util::{
    blocking, count, dup_of, flags_of, guard, peek_mode, read_bytes, record, Handle, IoResultExt,
    WriteBuf,
};

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
        let flags = flags_of(flags)?;
        let fd = dup_of(sock)?;
        read_bytes(py, nbytes, true, |p, n| {
            // SAFETY: `read_bytes` hands out `n` zero-filled bytes it owns for this call.
            let buf = unsafe { std::slice::from_raw_parts_mut(p.get(), n) };
            lowcopy::peek_at(&fd, offset, &mut [IoSliceMut::new(buf)], flags)
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
        let flags = flags_of(flags)?;
        let fd = dup_of(sock)?;
        let b = WriteBuf::get(buffer, nbytes)?;
        let (ptr, len) = (b.ptr, b.len);
        let r = blocking(py, || {
            // SAFETY: the export keeps `len` writable bytes at `ptr` alive and un-resizable
            // until it is released below.
            let buf = unsafe { std::slice::from_raw_parts_mut(ptr.get(), len) };
            lowcopy::peek_at(&fd, offset, &mut [IoSliceMut::new(buf)], flags)
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
        let flags = flags_of(flags)?;
        let fd = dup_of(sock)?;
        blocking(py, || lowcopy::consume(&fd, n, flags))
    })
}

/// Whether `SO_PEEK_OFF` works on this stream socket (TCP over IPv4 since Linux 6.9, IPv6
/// since 6.12, AF_UNIX since 3.4, never MPTCP). Leaves the socket's `SO_PEEK_OFF` as it
/// was. Errors: `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream).
#[pyfunction]
fn peek_supported(sock: &Bound<'_, PyAny>) -> PyResult<bool> {
    guard(|| {
        let fd = dup_of(sock)?;
        lowcopy::peek_supported(&fd).py()
    })
}

record! {
    /// Counters of a `Peeker`. All byte counts are in bytes.
    PeekStats from lowcopy::PeekStats {
        /// Syscalls the peeker made (including failed ones).
        syscalls,
        /// Peeks that returned data.
        peeks,
        /// Bytes delivered to the caller by peeks.
        bytes_peeked,
        /// Bytes the kernel copied to user space only for lowcopy to throw away: the discard
        /// prefix, and consumed bytes on AF_UNIX (no copy-free `MSG_TRUNC` there).
        bytes_skipped_copied,
        /// Bytes dropped from the head of the receive queue by consume.
        bytes_consumed,
        /// `SO_RCVLOWAT` changes made by the armed low-water mark.
        rcvlowat_updates,
    }
}

/// A peek cursor over one stream socket (TCP, MPTCP, AF_UNIX): peek at the cursor, seek
/// back to retransmit, consume what the peer acknowledged; unacknowledged data stays in the
/// kernel's receive queue.
///
/// Works on its own duplicate of the socket's descriptor: close it with `close()` (or use
/// `with`), which also restores the socket's `SO_RCVLOWAT` if armed and disables
/// `SO_PEEK_OFF` again. One peeker per socket; not for use by two threads at once
/// (`RuntimeError`).
#[pyclass(frozen, module = "lowcopy._lowcopy")]
pub struct Peeker {
    h: Handle<lowcopy::Peeker<OwnedFd>>,
}

impl Peeker {
    fn peek_iov(&self, py: Python<'_>, iov: &[libc::iovec], flags: i32) -> PyResult<usize> {
        let flags = flags_of(flags)?;
        self.h.with(|p| {
            if flags.dontwait() {
                // Never waits: keep the GIL (no thread switch on the fast path).
                // SAFETY: every iovec describes a live, writable buffer export (or a Vec)
                // owned by the caller for this whole call.
                return unsafe { p.peek_raw(iov, flags) }.py();
            }
            let iov = Iovecs(iov);
            blocking(py, || {
                // SAFETY: as above; the GIL is released but the exports stay held.
                unsafe { p.peek_raw(iov.get(), flags) }
            })
        })
    }
}

/// Iovecs that may cross into a detached closure: they point at buffers the caller keeps
/// exported (alive, un-resizable) until the call returns.
#[derive(Clone, Copy)]
pub struct Iovecs<'a>(pub &'a [libc::iovec]);
// SAFETY: see the type's doc; only the calling thread's kernel call reads or writes them.
unsafe impl Send for Iovecs<'_> {}
// SAFETY: as above.
unsafe impl Sync for Iovecs<'_> {}

impl<'a> Iovecs<'a> {
    /// The iovecs (a method, so that closures capture the whole wrapper).
    pub fn get(self) -> &'a [libc::iovec] {
        self.0
    }
}

#[pymethods]
impl Peeker {
    /// Makes a peeker over a duplicate of `sock`'s descriptor with `mode` (`PeekMode`).
    ///
    /// `OFFSET` (and `AUTO` where the family has it) sets `SO_PEEK_OFF` on the socket; a
    /// cursor starts at 0, the head of the receive queue.
    ///
    /// Errors (`OSError`): `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX
    /// stream; or `OFFSET` where the kernel has no `SO_PEEK_OFF` for this family), and
    /// `setsockopt` errors. `ValueError` for a mode that is not a `PeekMode`.
    #[new]
    #[pyo3(signature = (sock, mode = 0))]
    fn new(sock: &Bound<'_, PyAny>, mode: u32) -> PyResult<Self> {
        guard(|| {
            let mode = lowcopy::PeekMode::try_from(mode)
                .map_err(|_| PyValueError::new_err(format!("unknown PeekMode {mode}")))?;
            let fd = dup_of(sock)?;
            let p = sock.py().detach(|| lowcopy::Peeker::new(fd, mode)).py()?;
            Ok(Peeker {
                h: Handle::new("Peeker", p),
            })
        })
    }

    /// Peeks up to `nbytes` bytes at the cursor and returns them (at least one); the cursor
    /// advances by their number.
    ///
    /// `b""` at end of stream after the cursor (the peer shut down; bytes before the
    /// cursor stay queued). `BlockingIOError` (`EAGAIN`) when nothing lies beyond the
    /// cursor and `flags` has `MSG_DONTWAIT` or the socket is non-blocking (a socket with a
    /// timeout is). A blocking peek (GIL released) returns once a byte beyond the cursor is
    /// there; the socket's `SO_RCVTIMEO` ends it with `EAGAIN`, a signal runs the Python
    /// handlers and the peek goes on if they do not raise.
    ///
    /// Errors (`OSError`): `EINVAL` (flags other than `MSG_DONTWAIT`, `nbytes` 0),
    /// `EOVERFLOW` (cursor beyond what the mechanism can represent: 2**31-1 with
    /// `SO_PEEK_OFF`, about 64 MiB with the discard prefix), `recvmsg` errors
    /// (`ConnectionResetError` ...).
    #[pyo3(signature = (nbytes, flags = 0))]
    fn peek(&self, py: Python<'_>, nbytes: &Bound<'_, PyAny>, flags: i32) -> PyResult<Py<PyBytes>> {
        guard(|| {
            let nbytes = count(nbytes, "nbytes")?;
            let mut v: Vec<u8> = Vec::new();
            v.try_reserve_exact(nbytes.max(1))
                .map_err(|_| pyo3::exceptions::PyMemoryError::new_err(()))?;
            let iov = [libc::iovec {
                iov_base: v.as_mut_ptr().cast(),
                iov_len: nbytes,
            }];
            let n = self.peek_iov(py, &iov, flags)?;
            assert!(
                n <= nbytes,
                "the core reported more bytes than the buffer holds"
            );
            // SAFETY: the kernel wrote the first `n <= capacity` bytes.
            unsafe { v.set_len(n) };
            Ok(PyBytes::new(py, &v).unbind())
        })
    }

    /// `peek` into a writable buffer: `nbytes` of it (0: all of it); returns the bytes
    /// written. Results and errors as `peek`. The data path: no allocation, and with
    /// `MSG_DONTWAIT` the GIL is kept (the call never waits).
    #[pyo3(signature = (buffer, nbytes = 0, flags = 0))]
    fn peek_into(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        nbytes: i64,
        flags: i32,
    ) -> PyResult<usize> {
        guard(|| {
            let b = WriteBuf::get(buffer, nbytes)?;
            let r = self.peek_iov(py, &[b.iovec()], flags);
            b.release(py);
            r
        })
    }

    /// `peek_into` scattering into several writable buffers in order (as
    /// `socket.recvmsg_into`); returns the bytes written in all. At most `IOV_MAX` (1024)
    /// buffers, else `EMSGSIZE`; the discard mechanism needs room for its own prefix
    /// buffers among them (`EOVERFLOW` past offset 0 with 1024).
    #[pyo3(signature = (buffers, flags = 0))]
    fn peekv(&self, py: Python<'_>, buffers: &Bound<'_, PyAny>, flags: i32) -> PyResult<usize> {
        guard(|| {
            let mut held = Vec::new();
            for b in buffers.try_iter()? {
                match WriteBuf::get(&b?, 0) {
                    Ok(w) => held.push(w),
                    Err(e) => {
                        held.into_iter().for_each(|w| w.release(py));
                        return Err(e);
                    }
                }
            }
            let iov: Vec<libc::iovec> = held.iter().map(WriteBuf::iovec).collect();
            let r = self.peek_iov(py, &iov, flags);
            held.into_iter().for_each(|w| w.release(py));
            r
        })
    }

    /// Moves the cursor to `offset` bytes after the head of the receive queue: back to
    /// retransmit, or ahead to skip bytes (copied by the discard mechanism at the next peek,
    /// not by `SO_PEEK_OFF`). No syscall unless the low-water mark is armed.
    ///
    /// Errors: `EOVERFLOW` (beyond what the mechanism can represent; the cursor is then
    /// unchanged), and with the mark armed its `setsockopt` errors.
    fn seek(&self, offset: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            let o = count(offset, "offset")?;
            self.h.with(|p| p.seek(o).py())
        })
    }

    /// Drops up to `nbytes` acknowledged bytes from the head of the receive queue and moves
    /// the cursor back by the bytes dropped (never below 0); returns them. Never blocks: 0
    /// for `nbytes` 0 or at end of stream, `BlockingIOError` when nothing is queued.
    fn consume(&self, nbytes: &Bound<'_, PyAny>) -> PyResult<usize> {
        guard(|| {
            let n = count(nbytes, "nbytes")?;
            self.h.with(|p| p.consume(n).py())
        })
    }

    /// Tells the peeker that `nbytes` bytes left the head of the receive queue by another
    /// path (a `ZeroCopyReceiver`, a plain `recv` on the socket): the cursor moves back by
    /// `nbytes` (never below 0) with no syscall. Errors: only with the low-water mark armed,
    /// its `setsockopt` errors.
    fn note_consumed(&self, nbytes: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(|| {
            let n = count(nbytes, "nbytes")?;
            self.h.with(|p| p.note_consumed(n).py())
        })
    }

    /// The cursor: bytes between the head of the receive queue and the next peek.
    #[getter]
    fn offset(&self) -> PyResult<usize> {
        guard(|| self.h.with(|p| Ok(p.offset())))
    }

    /// The mechanism in use: `PeekMode.OFFSET` or `PeekMode.DISCARD`, never `AUTO`.
    #[getter]
    fn mode(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let m = self.h.with(|p| Ok(p.mode() as u32))?;
            peek_mode(py, m)
        })
    }

    /// Whether the low-water mark is armed. Setting it True keeps `SO_RCVLOWAT` at cursor
    /// + 1 bytes, so that poll/epoll/asyncio report the socket readable only when a byte
    /// beyond the cursor is queued (they ignore `SO_PEEK_OFF`) and level-triggered loops do
    /// not spin; False restores the value found when arming. The kernel caps the mark at
    /// `tcp_rmem[2]/2` (beyond that cursor it cannot keep poll quiet).
    ///
    /// Errors on setting: `EOPNOTSUPP` on AF_UNIX (its poll ignores `SO_RCVLOWAT`), and
    /// `setsockopt` errors.
    #[getter]
    fn lowat_armed(&self) -> PyResult<bool> {
        guard(|| self.h.with(|p| Ok(p.lowat_armed())))
    }

    #[setter]
    fn set_lowat_armed(&self, on: bool) -> PyResult<()> {
        guard(|| self.h.with(|p| p.set_lowat_armed(on).py()))
    }

    /// The counters so far (`PeekStats`).
    fn stats(&self) -> PyResult<PeekStats> {
        guard(|| self.h.with(|p| Ok(p.stats().into())))
    }

    /// The peeker's own duplicate of the socket's descriptor (for `select`/asyncio
    /// `add_reader`); valid until `close()`.
    fn fileno(&self) -> PyResult<i32> {
        guard(|| self.h.with(|p| Ok(p.get_ref().as_raw_fd())))
    }

    /// Restores the socket's `SO_RCVLOWAT` if armed, disables `SO_PEEK_OFF` if this peeker
    /// used it, and closes the duplicate descriptor. Idempotent; later calls other than
    /// `close` raise `ValueError`.
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

    fn __repr__(&self) -> String {
        match self
            .h
            .with(|p| Ok((p.get_ref().as_raw_fd(), p.mode(), p.offset())))
        {
            Ok((fd, m, o)) => format!("<lowcopy.Peeker fd={fd} mode={m:?} offset={o}>"),
            Err(_) if self.h.is_closed() => "<lowcopy.Peeker [closed]>".to_string(),
            Err(_) => "<lowcopy.Peeker [in use]>".to_string(),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PeekStats>()?;
    m.add_class::<Peeker>()?;
    m.add_function(wrap_pyfunction!(peek_at, m)?)?;
    m.add_function(wrap_pyfunction!(peek_into, m)?)?;
    m.add_function(wrap_pyfunction!(consume, m)?)?;
    m.add_function(wrap_pyfunction!(peek_supported, m)?)?;
    Ok(())
}
