//! `Completion`, made for every reaped send: a small type of its own (`PyType_FromSpec`)
//! rather than a `#[pyclass]`, because it is on the hot path. pyo3 makes each instance through
//! `object.__new__` and a locked free list, and frees it through a trampoline, which cost more
//! than the send's own work in the library (about 1,100 instructions per completion, against
//! about 250 here): the user-space work per `send_reap` is what keeps a Python sender loop
//! behind the C library's.
//!
//! Instances are immutable and hold the send's `user_data` object, its result and its flag
//! bits; they are not garbage-collector containers (as the `#[pyclass]` before, whose traverse
//! visited nothing), so a reference cycle through a completion's `user_data` is freed only
//! when broken. The type cannot be instantiated or subclassed from Python.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use pyo3::exceptions::PySystemError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::util::zc_flags;

/// The instance layout.
#[repr(C)]
struct Raw {
    ob_base: ffi::PyObject,
    /// Owned reference, never NULL in an instance made by [`new`].
    user_data: *mut ffi::PyObject,
    result: i64,
    flags: u32,
}

static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const DOC: &std::ffi::CStr = c"One completed send: its `user_data` (the very object given to the send), the bytes the send accepted (`result`), and `flags` (`ZcFlag`: `COPIED`, `FALLBACK`). Once it is returned, the send's buffer may be reused or resized.";

/// Runs an FFI callback body: a Rust panic becomes `SystemError` (never an unwind into C).
fn ffi_guard(f: impl FnOnce(Python<'_>) -> PyResult<*mut ffi::PyObject>) -> *mut ffi::PyObject {
    // SAFETY: CPython calls these slots with the interpreter attached.
    let py = unsafe { Python::assume_attached() };
    let r = catch_unwind(AssertUnwindSafe(|| f(py))).unwrap_or_else(|_| {
        Err(PySystemError::new_err(
            "lowcopy internal error (a Rust panic in Completion; please report it)",
        ))
    });
    match r {
        Ok(p) => p,
        Err(e) => {
            e.restore(py);
            ptr::null_mut()
        }
    }
}

/// `o` as the instance it is (a slot of our type is only called with one).
fn raw<'a>(o: *mut ffi::PyObject) -> &'a Raw {
    // SAFETY: slots of this type receive instances of it, whose layout is `Raw`, alive for
    // the call.
    unsafe { &*o.cast::<Raw>() }
}

unsafe extern "C" fn dealloc(o: *mut ffi::PyObject) {
    // SAFETY: `o` is an instance of our heap type at refcount 0: its user_data reference
    // is ours to drop, its memory came from PyObject_Malloc ([`new`]), and the instance
    // holds a reference to its heap type (PyObject_Init's).
    unsafe {
        let tp = ffi::Py_TYPE(o);
        let c = o.cast::<Raw>();
        let ud = (*c).user_data;
        (*c).user_data = ptr::null_mut();
        ffi::Py_XDECREF(ud);
        ffi::PyObject_Free(o.cast());
        ffi::Py_DECREF(tp.cast());
    }
}

unsafe extern "C" fn get_flags(o: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    ffi_guard(|py| Ok(zc_flags(py, raw(o).flags)?.into_ptr()))
}

unsafe extern "C" fn get_copied(o: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    let copied = raw(o).flags & lowcopy::zc::COPIED != 0;
    // SAFETY: PyBool_FromLong returns a new reference to True or False.
    unsafe { ffi::PyBool_FromLong(c_int::from(copied).into()) }
}

unsafe extern "C" fn repr(o: *mut ffi::PyObject) -> *mut ffi::PyObject {
    ffi_guard(|py| {
        let c = raw(o);
        // SAFETY: an instance's user_data is a live reference it owns.
        let ud = unsafe { Bound::from_borrowed_ptr(py, c.user_data) };
        let flags = zc_flags(py, c.flags)?;
        let s = format!(
            "Completion(user_data={}, result={}, flags={})",
            ud.repr()?,
            c.result,
            flags.bind(py).repr()?
        );
        Ok(pyo3::types::PyString::new(py, &s).into_ptr())
    })
}

fn make_type(py: Python<'_>) -> PyResult<Py<PyType>> {
    // The tables must outlive the type: leaked once, at module initialisation.
    let members = Box::leak(Box::new([
        ffi::PyMemberDef {
            name: c"user_data".as_ptr(),
            type_code: ffi::Py_T_OBJECT_EX,
            offset: std::mem::offset_of!(Raw, user_data) as ffi::Py_ssize_t,
            flags: ffi::Py_READONLY,
            doc: c"The object given as `user_data` with the send, unchanged.".as_ptr(),
        },
        ffi::PyMemberDef {
            name: c"result".as_ptr(),
            type_code: ffi::Py_T_LONGLONG,
            offset: std::mem::offset_of!(Raw, result) as ffi::Py_ssize_t,
            flags: ffi::Py_READONLY,
            doc: c"Bytes the send accepted (> 0).".as_ptr(),
        },
        // SAFETY: all-NULL is the sentinel that ends the table (a valid value of it).
        unsafe { std::mem::zeroed() },
    ]));
    let getset = Box::leak(Box::new([
        ffi::PyGetSetDef {
            name: c"flags".as_ptr(),
            get: Some(get_flags),
            set: None,
            doc: c"`ZcFlag` bits: `COPIED` (the kernel or a plain send copied the data), `FALLBACK` (zerocopy was not possible for some of it).".as_ptr(),
            closure: ptr::null_mut(),
        },
        ffi::PyGetSetDef {
            name: c"copied".as_ptr(),
            get: Some(get_copied),
            set: None,
            doc: c"Whether the data was copied rather than sent from the pinned buffer."
                .as_ptr(),
            closure: ptr::null_mut(),
        },
        // SAFETY: all-NULL is the sentinel that ends the table (a valid value of it).
        unsafe { std::mem::zeroed() },
    ]));
    let slots = Box::leak(Box::new([
        ffi::PyType_Slot {
            slot: ffi::Py_tp_dealloc,
            pfunc: dealloc as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_repr,
            pfunc: repr as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_members,
            pfunc: members.as_mut_ptr().cast(),
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_getset,
            pfunc: getset.as_mut_ptr().cast(),
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc: DOC.as_ptr() as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: ptr::null_mut(),
        },
    ]));
    let spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: c"lowcopy._lowcopy.Completion".as_ptr() as *const c_char,
        basicsize: std::mem::size_of::<Raw>() as c_int,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT
            | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION
            | ffi::Py_TPFLAGS_IMMUTABLETYPE) as _,
        slots: slots.as_mut_ptr(),
    }));
    // SAFETY: the spec and its tables are 'static (leaked above) and well formed: each slot
    // has the signature CPython expects for it, both tables end with a sentinel.
    let t = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec))? };
    Ok(t.cast_into::<PyType>()?.unbind())
}

/// The type, made on first use (module initialisation).
pub fn completion_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    Ok(TYPE.get_or_try_init(py, || make_type(py))?.bind(py))
}

/// A new completion holding `user_data` (the reference is moved in).
pub fn new(py: Python<'_>, user_data: Py<PyAny>, result: i64, flags: u32) -> PyResult<Py<PyAny>> {
    let tp = completion_type(py)?;
    // SAFETY: room for one `Raw` from the object allocator (what `dealloc` frees), or NULL
    // (then `MemoryError`); PyObject_Init sets its type, takes a reference to our heap type
    // (dropped by `dealloc`) and its refcount of 1; every field is then written once, before
    // anyone else sees the object. (PyType_GenericAlloc did the same plus a zero fill of
    // what is written here anyway: about 60 instructions more per completion.)
    unsafe {
        let o = ffi::PyObject_Malloc(std::mem::size_of::<Raw>()).cast::<ffi::PyObject>();
        if o.is_null() {
            return Err(pyo3::exceptions::PyMemoryError::new_err(()));
        }
        ffi::PyObject_Init(o, tp.as_type_ptr());
        let c = o.cast::<Raw>();
        (*c).user_data = user_data.into_ptr();
        (*c).result = result;
        (*c).flags = flags;
        Ok(Bound::from_owned_ptr(py, o).unbind())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Completion", completion_type(m.py())?)
}
