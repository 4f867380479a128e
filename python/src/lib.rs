//! `lowcopy._lowcopy`: the native module of the `lowcopy` Python package (pyo3 over the Rust
//! core crate, not over the C ABI).
//!
//! Conventions, shared by every function and class here:
//! - a socket argument is a `socket.socket`, any object with `fileno()`, or an int fd;
//!   objects work on their own `F_DUPFD_CLOEXEC` duplicate of it (closed by `close()`), and
//!   calls that may block work on a duplicate made for the call, so that a descriptor closed
//!   by another thread and its number reused is never touched;
//! - kernel and core errors raise `OSError(errno, strerror)`, which CPython turns into
//!   `BlockingIOError`, `TimeoutError`, `ConnectionResetError`, ... with `.errno` set;
//!   wrong Python types raise `TypeError`, values no call could take (negative sizes, NaN
//!   timeouts) `ValueError`, use after `close()` `ValueError`;
//! - a Rust panic becomes `SystemError`, never pyo3's `PanicException` (a `BaseException`
//!   that `except Exception` would miss);
//! - the GIL is released around every call that can block; a signal that interrupts one runs
//!   the Python handlers (`KeyboardInterrupt` ...) and, if they do not raise, the call goes on
//!   with the time it has left (PEP 475).

mod completion;
mod lowat;
mod peek;
mod probe;
mod util;
mod zc;
mod zcrx;

use pyo3::prelude::*;

/// Panics inside the panic guard: the test suite checks that a panic reaches Python as
/// `SystemError` (an `Exception`), not as pyo3's `PanicException` (a `BaseException`).
#[pyfunction]
fn _panic_for_test() -> PyResult<()> {
    util::guard(|| panic!("forced by the test suite"))
}

/// The native half of `lowcopy`; import `lowcopy` instead.
#[pymodule]
fn _lowcopy(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("IOV_MAX", lowcopy::IOV_MAX)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    probe::register(m)?;
    peek::register(m)?;
    lowat::register(m)?;
    zc::register(m)?;
    zcrx::register(m)?;
    Ok(())
}
