//! What every binding module shares: errors, socket arguments, timeouts, GIL release with
//! PEP 475 retries, Python buffers, and the facade's enums.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{
    PyBufferError, PyMemoryError, PyOSError, PySystemError, PyTypeError, PyValueError,
};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyInt};

/// The name of `obj`'s type, for error messages ("... not 'int'").
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// `OSError(errno, strerror)`: CPython picks the subclass (`BlockingIOError` for `EAGAIN`,
/// `TimeoutError` for `ETIMEDOUT`, ...) and sets `.errno` (pyo3's own `From<io::Error>`
/// would leave `.errno` unset).
pub fn os_error(e: io::Error) -> PyErr {
    match e.raw_os_error() {
        Some(n) => errno_error(n),
        None => PyOSError::new_err(e.to_string()),
    }
}

pub fn errno_error(n: i32) -> PyErr {
    // The text of common errnos is made once: raising EAGAIN in a retry loop is a hot path.
    static TEXT: [PyOnceLock<Py<pyo3::types::PyString>>; 140] = [const { PyOnceLock::new() }; 140];
    match usize::try_from(n).ok().and_then(|i| TEXT.get(i)) {
        Some(cell) => Python::attach(|py| {
            let s = cell.get_or_init(py, || pyo3::types::PyString::new(py, &strerror(n)).unbind());
            PyOSError::new_err((n, s.clone_ref(py)))
        }),
        None => PyOSError::new_err((n, strerror(n))),
    }
}

/// The C library's text for `n`, as `os.strerror` gives it.
pub fn strerror(n: i32) -> String {
    let mut buf = [0 as libc::c_char; 256];
    // SAFETY: the buffer is writable for its length; the XSI strerror_r (what the libc crate
    // binds) writes a NUL-terminated string into it.
    let rc = unsafe { libc::strerror_r(n, buf.as_mut_ptr(), buf.len()) };
    if rc != 0 {
        return format!("Unknown error {n}");
    }
    // SAFETY: NUL-terminated by strerror_r on success.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

pub trait IoResultExt<T> {
    /// `?`-able: an io error as `OSError(errno, strerror)`.
    fn py(self) -> PyResult<T>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(os_error)
    }
}

/// Runs a method body, turning a Rust panic into `SystemError` (an `Exception`).
pub fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(PySystemError::new_err(format!(
            "lowcopy internal error (a Rust panic; please report it): {msg}"
        )))
    })
}

/// The fd of a socket argument: an int, or an object whose `fileno()` returns one (what
/// `PyObject_AsFileDescriptor` accepts, with its messages).
pub fn fd_of(obj: &Bound<'_, PyAny>) -> PyResult<RawFd> {
    let n = if obj.is_instance_of::<PyInt>() {
        obj.clone()
    } else if let Ok(m) = obj.getattr("fileno") {
        let r = m.call0()?;
        if !r.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err("fileno() returned a non-integer"));
        }
        r
    } else {
        return Err(PyTypeError::new_err(format!(
            "argument must be an int, or have a fileno() method, not '{}'",
            obj.get_type().name()?
        )));
    };
    let v: i64 = n
        .extract()
        .map_err(|_| PyValueError::new_err("file descriptor out of range"))?;
    if v < 0 {
        return Err(PyValueError::new_err(format!(
            "file descriptor cannot be a negative integer ({v})"
        )));
    }
    RawFd::try_from(v).map_err(|_| PyValueError::new_err("file descriptor out of range"))
}

/// Our own duplicate of `fd` (`F_DUPFD_CLOEXEC`): `EBADF` when `fd` is not open.
pub fn dup(fd: RawFd) -> PyResult<OwnedFd> {
    // SAFETY: the number (never negative: `fd_of` refuses those) is used only for the
    // F_DUPFD_CLOEXEC that try_clone_to_owned makes, as the fcntl it replaces: a number that
    // is not open is answered with EBADF, and no memory is reached through it.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    b.try_clone_to_owned().map_err(os_error)
}

/// Our own duplicate of a socket argument.
pub fn dup_of(obj: &Bound<'_, PyAny>) -> PyResult<OwnedFd> {
    dup(fd_of(obj)?)
}

/// A timeout in seconds (`None`: no limit) as a `Duration`; negative or NaN is `ValueError`.
pub fn timeout_of(t: Option<f64>) -> PyResult<Option<Duration>> {
    match t {
        None => Ok(None),
        Some(s) if s.is_nan() || s < 0.0 => Err(PyValueError::new_err(
            "timeout must be None or a non-negative number of seconds",
        )),
        Some(s) => Ok(Some(
            Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX),
        )),
    }
}

/// A point in time `t` from now (`None`: never, or too far to represent).
pub fn deadline_of(t: Option<Duration>) -> Option<Instant> {
    t.and_then(|t| Instant::now().checked_add(t))
}

/// Time left until `deadline` (zero once passed).
pub fn left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

pub fn is_eintr(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINTR)
}

/// Runs `f` with the GIL released. On `EINTR` (a signal arrived) the Python signal handlers
/// run; if one raises (`KeyboardInterrupt`), that is the result, else `f` runs again
/// (PEP 475): `f` must recompute any time it waits from its own deadline.
pub fn blocking<T: Send>(
    py: Python<'_>,
    mut f: impl FnMut() -> io::Result<T> + Send,
) -> PyResult<T> {
    loop {
        match py.detach(&mut f) {
            Err(e) if is_eintr(&e) => py.check_signals()?,
            r => return r.py(),
        }
    }
}

/// A negative count is `ValueError` (as `socket.recv(-1)` is), not `OverflowError`.
pub fn size_of_arg(v: i64, what: &str) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| PyValueError::new_err(format!("negative {what}")))
}

/// A byte count or offset: any non-negative int up to 2**64-1 (the core clamps or refuses
/// what it cannot use); negative is `ValueError`, larger `OverflowError`, not an int
/// `TypeError`.
/// The most bytes a call that allocates its result takes as its size: `INT_MAX`, the most one
/// receive returns (the kernel's `MAX_RW_COUNT` is below it), as the Node package's limit.
pub const MAX_RESULT: usize = i32::MAX as usize;

/// The size of a result a call allocates ([`count`]): above [`MAX_RESULT`] an
/// `OverflowError` that says so, never a bare `MemoryError`.
pub fn result_size(v: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let n = count(v, what)?;
    if n > MAX_RESULT {
        return Err(pyo3::exceptions::PyOverflowError::new_err(format!(
            "{what} is {n}: at most {MAX_RESULT} (INT_MAX, the most one receive returns)"
        )));
    }
    Ok(n)
}

pub fn count(v: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    if !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not '{}'",
            v.get_type().name()?
        )));
    }
    match v.extract::<u64>() {
        Ok(n) => Ok(n as usize),
        Err(e) => match v.extract::<i64>() {
            Ok(n) if n < 0 => Err(PyValueError::new_err(format!("negative {what}: {n}"))),
            _ => Err(e),
        },
    }
}

/// A raw pointer that may cross into a detached closure: the memory it points at is kept
/// alive and un-resizable by the caller for the closure's duration (a buffer export or a
/// local Vec).
#[derive(Clone, Copy)]
pub struct SendPtr(pub *mut u8);

impl SendPtr {
    /// The pointer (a method, so that closures capture the whole `SendPtr`, not its field).
    pub fn get(self) -> *mut u8 {
        self.0
    }
}
// SAFETY: see the type's doc: the pointee outlives every use, and only one thread uses it.
unsafe impl Send for SendPtr {}
// SAFETY: sharing a `&SendPtr` only shares the pointer value, never the pointee.
unsafe impl Sync for SendPtr {}

/// A writable, C-contiguous buffer export (`bytearray`, `memoryview`, `array`, mmap, numpy
/// ...), held for one call: it cannot be resized or freed until released.
pub struct WriteBuf {
    buf: Option<PyUntypedBuffer>,
    pub ptr: SendPtr,
    pub len: usize,
}

impl WriteBuf {
    /// `nbytes` 0 means the whole buffer; more than the buffer is `ValueError`.
    pub fn get(obj: &Bound<'_, PyAny>, nbytes: i64) -> PyResult<WriteBuf> {
        let nbytes = size_of_arg(nbytes, "buffersize")?;
        let buf = PyUntypedBuffer::get(obj).map_err(|_| {
            let name = crate::util::type_name(obj);
            PyTypeError::new_err(format!(
                "a writable bytes-like object is required, not '{name}'"
            ))
        })?;
        if buf.readonly() {
            let name = obj.get_type().name()?.to_string();
            buf.release(obj.py());
            return Err(PyTypeError::new_err(format!(
                "a writable bytes-like object is required, not '{name}'"
            )));
        }
        if !buf.is_c_contiguous() {
            buf.release(obj.py());
            return Err(PyBufferError::new_err("the buffer is not C-contiguous"));
        }
        let total = buf.len_bytes();
        let len = match nbytes {
            0 => total,
            n if n <= total => n,
            _ => {
                buf.release(obj.py());
                return Err(PyValueError::new_err(
                    "nbytes is greater than the length of the buffer",
                ));
            }
        };
        Ok(WriteBuf {
            ptr: SendPtr(buf.buf_ptr().cast()),
            len,
            buf: Some(buf),
        })
    }

    /// Releases the export on this (attached) thread.
    pub fn release(mut self, py: Python<'_>) {
        if let Some(b) = self.buf.take() {
            b.release(py);
        }
    }

    pub fn iovec(&self) -> libc::iovec {
        libc::iovec {
            iov_base: self.ptr.0.cast(),
            iov_len: self.len,
        }
    }
}

/// Room for one buffer export (`Py_buffer`, 80 bytes), on the heap: the exporter may keep
/// the view's address until it is released, so a view never moves. A sender keeps a few
/// spare ones, so that a send does not allocate.
pub struct ViewSlot(Box<MaybeUninit<ffi::Py_buffer>>);

// SAFETY: a slot is plain memory; the export it may hold is only read or released with the
// interpreter attached (as pyo3's own `PyUntypedBuffer`, which is Send and Sync).
unsafe impl Send for ViewSlot {}
// SAFETY: as above; shared references only read the view's fields.
unsafe impl Sync for ViewSlot {}

/// Spare [`ViewSlot`]s a sender keeps at most.
pub const SPARE_VIEWS: usize = 64;

/// A read-only buffer kept for as long as the kernel may read it: `bytes` by reference (it
/// is immutable; no export needed), anything else as a C-contiguous buffer export, which
/// stops a `bytearray`, `array` or mmap from being resized or closed (`BufferError`) until
/// [`ReadBuf::release`].
pub enum ReadBuf {
    Bytes(Py<PyBytes>),
    Export(Export),
}

/// A buffer export (`PyObject_GetBuffer`, `PyBUF_FULL_RO`), released by
/// [`Export::release`] on an attached thread, or, if dropped unreleased, by attaching.
pub struct Export(Option<ViewSlot>);

impl Export {
    /// The exported view (initialised while `self.0` is `Some`).
    fn view(&self) -> Option<&ffi::Py_buffer> {
        // SAFETY: the slot was filled by a successful PyObject_GetBuffer and is released only
        // when taken out of the Option.
        self.0.as_ref().map(|b| unsafe { b.0.assume_init_ref() })
    }

    /// Releases the export here (attached) and hands back its slot for reuse.
    pub fn release(mut self, _py: Python<'_>) -> Option<ViewSlot> {
        let mut slot = self.0.take()?;
        // SAFETY: an exported view, released exactly once (the Option is now empty).
        unsafe { ffi::PyBuffer_Release(slot.0.as_mut_ptr()) };
        Some(slot)
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        if let Some(mut slot) = self.0.take() {
            // SAFETY: as in `release`, with the interpreter attached for the call.
            Python::attach(|_| unsafe { ffi::PyBuffer_Release(slot.0.as_mut_ptr()) });
        }
    }
}

// The pointers inside are only dereferenced by the kernel, and only while the owner holds
// this value.
impl ReadBuf {
    /// `obj` pinned: `bytes` by reference, else exported into a slot from `spare` (or a
    /// new one). `TypeError` for an object without the buffer protocol, `BufferError` for
    /// a buffer that is not C-contiguous.
    pub fn get(obj: &Bound<'_, PyAny>, spare: &mut Vec<ViewSlot>) -> PyResult<ReadBuf> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(ReadBuf::Bytes(b.clone().unbind()));
        }
        let mut slot = spare.pop().unwrap_or_else(|| ViewSlot(Box::new_uninit()));
        // A C-contiguous export asked for at once (the exporter checks, and no
        // PyBuffer_IsContiguous follows); only when it is refused does a second, full request
        // tell an object without the buffer protocol (TypeError) from a buffer that is not
        // C-contiguous (BufferError), as one full request and a check did.
        // SAFETY: `slot` is writable room for one Py_buffer, which the call fills on success
        // (and leaves unexported on failure).
        let r = unsafe {
            ffi::PyObject_GetBuffer(obj.as_ptr(), slot.0.as_mut_ptr(), ffi::PyBUF_C_CONTIGUOUS)
        };
        if r == 0 {
            return Ok(ReadBuf::Export(Export(Some(slot))));
        }
        // (The exporter's own error is replaced, as socket.send does.)
        drop(PyErr::take(obj.py()));
        // SAFETY: as above.
        let r = unsafe {
            ffi::PyObject_GetBuffer(obj.as_ptr(), slot.0.as_mut_ptr(), ffi::PyBUF_FULL_RO)
        };
        if r != 0 {
            spare.push(slot);
            let name = crate::util::type_name(obj);
            drop(PyErr::take(obj.py()));
            return Err(PyTypeError::new_err(format!(
                "a bytes-like object is required, not '{name}'"
            )));
        }
        if let Some(slot) = Export(Some(slot)).release(obj.py()) {
            spare.push(slot);
        }
        Err(PyBufferError::new_err("the buffer is not C-contiguous"))
    }

    pub fn iovec(&self, py: Python<'_>) -> libc::iovec {
        match self {
            ReadBuf::Bytes(b) => {
                let s = b.as_bytes(py);
                libc::iovec {
                    iov_base: s.as_ptr() as *mut _,
                    iov_len: s.len(),
                }
            }
            ReadBuf::Export(e) => match e.view() {
                Some(v) => libc::iovec {
                    iov_base: v.buf,
                    iov_len: usize::try_from(v.len).unwrap_or(0),
                },
                None => libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
            },
        }
    }

    /// Releases the export (or the reference) on this attached thread; the export's slot
    /// goes back to `spare` (up to [`SPARE_VIEWS`]).
    pub fn release(self, py: Python<'_>, spare: &mut Vec<ViewSlot>) {
        match self {
            ReadBuf::Bytes(b) => drop(b),
            ReadBuf::Export(e) => {
                if let Some(slot) = e.release(py) {
                    if spare.len() < SPARE_VIEWS {
                        spare.push(slot);
                    }
                }
            }
        }
    }
}

/// Fresh `bytes` of up to `nbytes` filled by `fill` (with the GIL released), which returns
/// how many it wrote; `MemoryError` when `nbytes` cannot be allocated. `zeroed`: the memory
/// is zero-filled first (for calls that take `&mut [u8]`); else `fill` gets uninitialised
/// memory it may only write to.
pub fn read_bytes(
    py: Python<'_>,
    nbytes: usize,
    zeroed: bool,
    fill: impl FnMut(SendPtr, usize) -> io::Result<usize> + Send,
) -> PyResult<Py<PyBytes>> {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(nbytes.max(1))
        .map_err(|_| PyMemoryError::new_err(()))?;
    if zeroed {
        v.resize(nbytes, 0);
    }
    let ptr = SendPtr(v.as_mut_ptr());
    let mut fill = fill;
    let n = blocking(py, || fill(ptr, nbytes))?;
    assert!(
        n <= nbytes,
        "the core reported more bytes than the buffer holds"
    );
    if zeroed {
        v.truncate(n);
    } else {
        // SAFETY: the kernel wrote the first `n <= capacity` bytes.
        unsafe { v.set_len(n) };
    }
    Ok(PyBytes::new(py, &v).unbind())
}

/// The enums and flags of the facade (`lowcopy._types`), imported once.
struct Types {
    peek_mode: Py<PyAny>,
    zc_backend: Py<PyAny>,
    /// `ZcFlag` members for values 0..=3 (every combination of COPIED and FALLBACK).
    zc_flags: [Py<PyAny>; 4],
}

static TYPES: PyOnceLock<Types> = PyOnceLock::new();

fn types(py: Python<'_>) -> PyResult<&Types> {
    TYPES.get_or_try_init(py, || {
        let m = py.import("lowcopy._types")?;
        let flag = m.getattr("ZcFlag")?;
        let f = |v: u32| flag.call1((v,)).map(Bound::unbind);
        Ok(Types {
            peek_mode: m.getattr("PeekMode")?.unbind(),
            zc_backend: m.getattr("ZcBackend")?.unbind(),
            zc_flags: [f(0)?, f(1)?, f(2)?, f(3)?],
        })
    })
}

pub fn peek_mode(py: Python<'_>, v: u32) -> PyResult<Py<PyAny>> {
    Ok(types(py)?.peek_mode.bind(py).call1((v,))?.unbind())
}

pub fn zc_backend(py: Python<'_>, v: u32) -> PyResult<Py<PyAny>> {
    Ok(types(py)?.zc_backend.bind(py).call1((v,))?.unbind())
}

pub fn zc_flags(py: Python<'_>, v: u32) -> PyResult<Py<PyAny>> {
    let t = types(py)?;
    match t.zc_flags.get(v as usize) {
        Some(m) => Ok(m.clone_ref(py)),
        None => Ok(py
            .import("lowcopy._types")?
            .getattr("ZcFlag")?
            .call1((v,))?
            .unbind()),
    }
}

/// Defines a frozen record class of `u64` counters converted from a core stats struct, with
/// a `repr` listing every field and `as_dict()`.
macro_rules! record {
    ($(#[$doc:meta])* $name:ident from $core:ty { $($(#[$fdoc:meta])* $field:ident),* $(,)? }) => {
        $(#[$doc])*
        #[pyclass(frozen, eq, module = "lowcopy._lowcopy")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fdoc])* #[pyo3(get)] pub $field: u64,)*
        }

        impl From<$core> for $name {
            fn from(s: $core) -> Self {
                $name { $($field: s.$field,)* }
            }
        }

        #[pymethods]
        impl $name {
            fn __repr__(&self) -> String {
                let fields: Vec<String> = vec![$(format!("{}={}", stringify!($field), self.$field)),*];
                format!("{}({})", stringify!($name), fields.join(", "))
            }

            /// The counters as a dict, field name to value, in declaration order.
            fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
                let d = pyo3::types::PyDict::new(py);
                $(d.set_item(stringify!($field), self.$field)?;)*
                Ok(d)
            }
        }
    };
}
pub(crate) use record;

/// The state of a native object: `None` once closed. Calls lock it without waiting: a
/// second thread calling while the first is inside (a blocking call with the GIL released)
/// gets `RuntimeError` rather than a wait of unknown length; the core objects are not for
/// concurrent use.
pub struct Handle<T> {
    inner: std::sync::Mutex<Option<T>>,
    name: &'static str,
}

impl<T> Handle<T> {
    pub fn new(name: &'static str, v: T) -> Self {
        Handle {
            inner: std::sync::Mutex::new(Some(v)),
            name,
        }
    }

    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Option<T>>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            // A panic inside a call was turned into SystemError; the object's memory is
            // intact (the core keeps its invariants per syscall), so it stays usable.
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                    "{} is in use by another thread",
                    self.name
                )))
            }
        }
    }

    /// Runs `f` on the open object; `ValueError` after `close()`.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> PyResult<R>) -> PyResult<R> {
        let mut g = self.lock()?;
        match g.as_mut() {
            Some(v) => f(v),
            None => Err(PyValueError::new_err(format!(
                "I/O operation on closed {}",
                self.name
            ))),
        }
    }

    /// Takes the object out (closing the handle); `None` if already closed.
    pub fn take(&self) -> PyResult<Option<T>> {
        Ok(self.lock()?.take())
    }

    /// Takes the object out whatever happens (for `Drop`: no other reference exists).
    pub fn take_now(&mut self) -> Option<T> {
        match self.inner.get_mut() {
            Ok(v) => v.take(),
            Err(p) => p.into_inner().take(),
        }
    }

    pub fn is_closed(&self) -> bool {
        match self.inner.try_lock() {
            Ok(g) => g.is_none(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().is_none(),
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }
}

/// Call flags from Python's int (`socket.MSG_DONTWAIT`, `MSG_MORE` for sends): other bits
/// are `EINVAL`, as in C.
pub fn flags_of(raw: i32) -> PyResult<lowcopy::Flags> {
    lowcopy::Flags::from_raw(raw).py()
}
