//! `ZeroCopyReceiver` and its `Chunk` views.
//!
//! A chunk exposes the receiver's memory through the buffer protocol: mapped pages of the
//! socket (read-only), or the copy buffer. The next `recv` releases those pages
//! (`madvise(MADV_DONTNEED)`; reading a released page of a socket mapping is SIGBUS) and
//! reuses the copy buffer, and `close` unmaps. So the rule is: while a view of a chunk is
//! exported (a `memoryview`, a numpy array ...), `recv` and `close` raise `BufferError`
//! (as `mmap.close` does), and once the receiver moved on, a chunk refuses new views
//! (`BufferError`). Copy with `bytes(chunk)` to keep data.

use std::ffi::c_int;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::util::{
    count, dup_of, flags_of, guard, is_eintr, record, timeout_of, Handle, IoResultExt,
};

record! {
    /// Counters of a `ZeroCopyReceiver`. `bytes_mapped + bytes_copied` is exactly the number
    /// of stream bytes it returned.
    ZcrxStats from lowcopy::ZcrxStats {
        // doc-copy: zcrx_stats.bytes_mapped
        /// Bytes delivered as pages mapped into the window.
        // doc-end
        bytes_mapped,
        // doc-copy: zcrx_stats.bytes_copied
        /// Bytes delivered by copy (both kinds below).
        // doc-end
        bytes_copied,
        // doc-copy: zcrx_stats.bytes_copybuf
        /// Of `bytes_copied`: bytes the kernel copied into the copy buffer within the zero-copy
        /// call (stragglers, and small queues). The rest were read with `recv`.
        // doc-end
        bytes_copybuf,
        // doc-copy: zcrx_stats.chunks_mapped
        /// Chunks returned that were mapped pages.
        // doc-end
        chunks_mapped,
        // doc-copy: zcrx_stats.chunks_copied
        /// Chunks returned that were copies.
        // doc-end
        chunks_copied,
        // doc-copy: zcrx_stats.syscalls
        /// Syscalls made (including failed ones).
        // doc-end
        syscalls,
        // doc-copy: zcrx_stats.zc_calls
        /// `TCP_ZEROCOPY_RECEIVE` calls.
        // doc-end
        zc_calls,
        // doc-copy: zcrx_stats.zc_calls_unmapped
        /// `TCP_ZEROCOPY_RECEIVE` calls that mapped nothing (queue empty or not mappable).
        // doc-end
        zc_calls_unmapped,
        // doc-copy: zcrx_stats.wakeups
        /// `poll` returns that reported the socket ready, when `recv` had to wait.
        // doc-end
        wakeups,
        // doc-copy: zcrx_stats.peek_off_fixups
        /// `SO_PEEK_OFF` corrections: the kernel does not lower it for bytes it maps or copies as
        /// stragglers, so the receiver does, as a read would have.
        // doc-end
        peek_off_fixups,
    }
}

/// A zero-copy receiver over one connected TCP socket: received pages mapped read-only into
/// a window of the process (`mmap` + `TCP_ZEROCOPY_RECEIVE`), with a copy path for every
/// byte that cannot be mapped; every byte arrives exactly once, in stream order.
///
/// Works on its own duplicate of the socket's descriptor.
// doc-copy: zcrx.exclusive
/// Nobody else may read from the socket meanwhile (a peeker may peek: the receiver keeps its
/// `SO_PEEK_OFF` right).
// doc-end
/// `recv` returns a `Chunk` valid until the next `recv` or `close`; while a view of it is
/// exported those raise `BufferError`.
#[pyclass(frozen, module = "lowcopy._lowcopy")]
pub struct ZeroCopyReceiver {
    h: Handle<lowcopy::ZeroCopyReceiver<OwnedFd>>,
    /// Bumped whenever the memory behind the last chunk goes (next recv, close).
    gen: AtomicU64,
    /// Buffer views of the current chunk still exported.
    exports: AtomicUsize,
}

/// One piece of the stream returned by `ZeroCopyReceiver.recv`: a read-only bytes-like
/// object (`memoryview(chunk)`, `bytes(chunk)`, `len(chunk)`). Empty at end of stream.
#[pyclass(frozen, module = "lowcopy._lowcopy")]
pub struct Chunk {
    owner: Py<ZeroCopyReceiver>,
    gen: u64,
    ptr: usize,
    len: usize,
    /// True when the bytes are pages mapped from the socket, False when they were copied.
    #[pyo3(get)]
    mapped: bool,
}

static EMPTY: [u8; 1] = [0];

#[pymethods]
impl Chunk {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Whether the chunk's memory is still there (the receiver has not moved on).
    #[getter]
    fn valid(&self, py: Python<'_>) -> bool {
        self.owner.bind(py).get().gen.load(Ordering::Acquire) == self.gen
    }

    /// # Safety
    /// Called by CPython with a `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let me = slf.get();
        let owner = me.owner.bind(slf.py()).get();
        if owner.gen.load(Ordering::Acquire) != me.gen {
            return Err(PyBufferError::new_err(
                "this chunk is gone: the receiver moved on (next recv or close); copy with bytes(chunk) to keep data",
            ));
        }
        let ptr = if me.len == 0 {
            EMPTY.as_ptr() as usize
        } else {
            me.ptr
        };
        owner.exports.fetch_add(1, Ordering::AcqRel);
        // SAFETY: `view` is CPython's to fill; the memory (`len` bytes at `ptr`) stays mapped
        // and unchanged while the export count is above 0 (recv and close refuse to run);
        // read-only, so a writable request is refused with BufferError.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr as *mut _,
                me.len as ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if rc != 0 {
            owner.exports.fetch_sub(1, Ordering::AcqRel);
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// # Safety
    /// Called by CPython once per successful `__getbuffer__`.
    unsafe fn __releasebuffer__(slf: Bound<'_, Self>, _view: *mut ffi::Py_buffer) {
        let owner = slf.get().owner.bind(slf.py()).get();
        owner.exports.fetch_sub(1, Ordering::AcqRel);
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if self.valid(py) { "" } else { " gone" };
        format!(
            "<lowcopy.Chunk len={} mapped={}{state}>",
            self.len, self.mapped
        )
    }
}

impl ZeroCopyReceiver {
    fn check_no_export(&self, what: &str) -> PyResult<()> {
        if self.exports.load(Ordering::Acquire) > 0 {
            return Err(PyBufferError::new_err(format!(
                "cannot {what}: a view of the last chunk is still exported (release the memoryview first)"
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl ZeroCopyReceiver {
    /// Maps a `window`-byte receive window of the TCP socket `sock` (over a duplicate of its
    /// descriptor) and allocates the copy buffer (the window's size, 64 KiB to 1 MiB).
    ///
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
    /// Set the receive low-water mark (`set_rcvlowat`) to about the window's size so that each
    /// wakeup finds a window's worth of bytes. Pages map only where the kernel holds whole,
    /// page-aligned payload pages (a header-splitting NIC; on loopback, a page-aligned
    /// `MSG_ZEROCOPY` sender); every other byte arrives by copy.
    // doc-end
    ///
    /// Errors (`OSError`):
    // doc-copy: zcrx_new.errors
    /// The socket is checked before the window: `EINVAL` (`window` 0 or above 1 GiB), `EBADF`,
    /// `ENOTSOCK`, `EOPNOTSUPP` (not TCP over IPv4/IPv6, e.g. UDP, AF_UNIX, MPTCP; or a kernel
    /// without `TCP_ZEROCOPY_RECEIVE`), `ENOTCONN` (not connected: listening, never connected,
    /// still connecting, or reset), `ENOMEM`, and `mmap` errors.
    // doc-end
    #[new]
    fn new(py: Python<'_>, sock: &Bound<'_, PyAny>, window: &Bound<'_, PyAny>) -> PyResult<Self> {
        guard(|| {
            let window = count(window, "window")?;
            let fd = dup_of(sock)?;
            let r = py
                .detach(|| lowcopy::ZeroCopyReceiver::new(fd, window))
                .py()?;
            Ok(ZeroCopyReceiver {
                h: Handle::new("ZeroCopyReceiver", r),
                gen: AtomicU64::new(0),
                exports: AtomicUsize::new(0),
            })
        })
    }

    /// Returns the next piece of the stream (`Chunk`): mapped pages or copied bytes, in
    /// stream order; an empty chunk at end of stream (and again at later calls).
    ///
    // doc-copy: zcrx_recv.release
    /// The chunk stays valid until the next call on the receiver (or its release): the pages of a
    /// mapped chunk are released (`madvise(MADV_DONTNEED)`) at the start of the next call, before
    /// the window is reused, and the copy buffer is reused.
    // doc-end
    /// `BufferError` if a view of the previous chunk is still exported.
    ///
    /// A socket with a timeout is non-blocking; the GIL is released while the call waits.
    // doc-copy: zcrx_recv.wait
    /// Blocking (no `MSG_DONTWAIT`, fd without `O_NONBLOCK`), like a blocking `recv` with
    /// `SO_RCVLOWAT`: once the bytes queued at the last wakeup are all delivered, the receiver
    /// waits in `poll` until the socket's mark is met, then returns them chunk by chunk without
    /// waiting again (one wakeup per mark's worth, however many chunks it takes; the kernel may
    /// wake below the mark under memory pressure: those bytes are returned, not waited past). The
    /// socket's `SO_RCVTIMEO` (read when a wait starts) bounds the wait; when it runs out the bytes
    /// queued below the mark are returned, or `EAGAIN` when there are none, as `recv` does.
    /// Non-blocking (`MSG_DONTWAIT` or `O_NONBLOCK`): whatever is queued, mark or not (the caller's
    /// poll/epoll honoured the mark), or `EAGAIN`.
    // doc-end
    ///
    // doc-copy: zcrx_recv.errqueue
    /// Entries on the socket's error queue (zerocopy notifications of a sender on the same socket,
    /// `IP_RECVERR` or `SO_TIMESTAMPING` reports) are never read and never end a wait: a blocking
    /// receive sleeps past them (as `recv_atleast` does), a non-blocking one returns `EAGAIN` when
    /// nothing else is there.
    // doc-end
    ///
    /// Errors (`OSError`; `EAGAIN` is `BlockingIOError`, `ECONNRESET` `ConnectionResetError`):
    /// `EINVAL` (flags other than `MSG_DONTWAIT`),
    // doc-copy: zcrx_recv.errors
    /// `EAGAIN`, `EINTR`, `ECONNRESET` and the socket's other errors (reported after every byte
    /// received before them); an `EINVAL` from the kernel (a bug in lowcopy, or someone unmapped
    /// the window) is reported as such, never taken as end of stream.
    // doc-end
    #[pyo3(signature = (flags = 0))]
    fn recv(slf: &Bound<'_, Self>, flags: i32) -> PyResult<Chunk> {
        guard(|| {
            let py = slf.py();
            let me = slf.get();
            let flags = flags_of(flags)?;
            me.check_no_export("recv")?;
            let got = me.h.with(|r| {
                // From here the previous chunk refuses new views: its memory is about to go.
                me.gen.fetch_add(1, Ordering::AcqRel);
                let mut once = || {
                    r.recv(flags)
                        .map(|c| (c.data.as_ptr() as usize, c.data.len(), c.mapped))
                };
                if flags.dontwait() {
                    return once().py();
                }
                loop {
                    match py.detach(&mut once) {
                        Err(e) if is_eintr(&e) => py.check_signals()?,
                        r => return r.py(),
                    }
                }
            })?;
            Ok(Chunk {
                owner: slf.clone().unbind(),
                gen: me.gen.load(Ordering::Acquire),
                ptr: got.0,
                len: got.1,
                mapped: got.2,
            })
        })
    }

    /// Makes blocking receives wait at most `timeout` seconds (None: without limit) in place
    /// of the socket's `SO_RCVTIMEO`. There is no way back to the socket's settings.
    // doc-copy: zcrx_timeout.kernel
    /// The fd's `O_NONBLOCK` then plays no part either (only `MSG_DONTWAIT` makes a receive
    /// non-blocking), as in `recv_atleast`. When it runs out the result is what `SO_RCVTIMEO`
    /// gives: the bytes queued below the mark, or `EAGAIN`. Why: with the socket's settings, each
    /// wait first looks without sleeping (`poll` with 0), then reads `O_NONBLOCK` and
    /// `SO_RCVTIMEO`, then sleeps: 3 or 4 syscalls where tcp_mmap's loop makes 1. With its own
    /// timeout the receiver sleeps in one `poll`.
    // doc-end
    #[pyo3(signature = (timeout))]
    fn set_timeout(&self, timeout: Option<f64>) -> PyResult<()> {
        guard(|| {
            let t = timeout_of(timeout)?;
            self.h.with(|r| {
                r.set_timeout(t);
                Ok(())
            })
        })
    }

    /// Whether each zero-copy call keeps a peeker's `SO_PEEK_OFF` right (on by default: the
    /// kernel does not lower the peek offset for bytes it maps, the receiver does).
    // doc-copy: zcrx_peek_off_tracking.kernel
    /// Off saves the `getsockopt(SO_PEEK_OFF)` made before each zero-copy call (one syscall per
    /// chunk): turn it off only when no peeker uses `SO_PEEK_OFF` on this socket while the receiver
    /// lives, or its cursor will point past the bytes it meant after mapped chunks.
    // doc-end
    fn set_peek_off_tracking(&self, on: bool) -> PyResult<()> {
        guard(|| {
            self.h.with(|r| {
                r.set_peek_off_tracking(on);
                Ok(())
            })
        })
    }

    /// The window's size in bytes (the requested size rounded up to pages).
    #[getter]
    fn window(&self) -> PyResult<usize> {
        guard(|| self.h.with(|r| Ok(r.window())))
    }

    /// Bytes of `struct tcp_zerocopy_receive` in use (64 on Linux 5.12 and later).
    #[getter]
    fn struct_size(&self) -> PyResult<usize> {
        guard(|| self.h.with(|r| Ok(r.struct_size())))
    }

    /// The counters so far (`ZcrxStats`).
    fn stats(&self) -> PyResult<ZcrxStats> {
        guard(|| self.h.with(|r| Ok(r.stats().into())))
    }

    /// The receiver's own duplicate of the socket's descriptor.
    fn fileno(&self) -> PyResult<i32> {
        guard(|| self.h.with(|r| Ok(r.get_ref().as_raw_fd())))
    }

    /// Unmaps the window and closes the duplicate descriptor. `BufferError` while a view of
    /// the last chunk is exported. Idempotent; later calls other than `close` raise
    /// `ValueError`.
    fn close(&self) -> PyResult<()> {
        guard(|| {
            self.check_no_export("close")?;
            self.gen.fetch_add(1, Ordering::AcqRel);
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
        match self.h.with(|r| Ok((r.get_ref().as_raw_fd(), r.window()))) {
            Ok((fd, w)) => format!("<lowcopy.ZeroCopyReceiver fd={fd} window={w}>"),
            Err(_) if self.h.is_closed() => "<lowcopy.ZeroCopyReceiver [closed]>".to_string(),
            Err(_) => "<lowcopy.ZeroCopyReceiver [in use]>".to_string(),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ZcrxStats>()?;
    m.add_class::<ZeroCopyReceiver>()?;
    m.add_class::<Chunk>()?;
    Ok(())
}
