//! The C ABI of lowcopy (`include/lowcopy.h`, generated from this file by cbindgen).
//!
//! Conventions for every function (the contract: API.md in the workspace's shared/ folder):
//! - failure returns a negative errno (`-EINVAL`, `-EAGAIN`, ...), success returns >= 0;
//! - out-parameters are written only on success;
//! - NULL where a pointer is required is `-EINVAL`, never a crash;
//! - sockets are caller-owned fds that lowcopy never closes;
//! - a Rust panic never crosses the boundary: it becomes `-EIO` (or NULL/0 where a function
//!   has no error code);
//! - handles are opaque, created by `*_new` and released once by `*_free` (NULL is a no-op);
//!   one handle must not be used by two threads at once.
#![allow(non_camel_case_types)]

mod peek;
mod rx;
mod zc;
pub use peek::*;
pub use rx::*;
pub use zc::*;

use std::io;
use std::os::fd::BorrowedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::{c_int, iovec, ssize_t, EBADF, EINVAL, EIO};

/// Major version: changes when the ABI breaks (and with it the SONAME, liblowcopy.so.N).
pub const LOWCOPY_VERSION_MAJOR: u32 = 0;
/// Minor version: new functions or struct fields appended.
pub const LOWCOPY_VERSION_MINOR: u32 = 1;
/// Patch version.
pub const LOWCOPY_VERSION_PATCH: u32 = 0;

/// What the running kernel offers, found by trying (`lowcopy_probe`). Flags are 0 or 1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lowcopy_caps {
    /// `SO_PEEK_OFF` on TCP over IPv4 (Linux 6.9).
    pub peek_off_tcp4: u32,
    /// `SO_PEEK_OFF` on TCP over IPv6 (Linux 6.12).
    pub peek_off_tcp6: u32,
    /// `SO_PEEK_OFF` on AF_UNIX stream (Linux 3.4).
    pub peek_off_unix: u32,
    /// `SO_PEEK_OFF` on MPTCP (absent in every kernel so far).
    pub peek_off_mptcp: u32,
    /// `SO_ZEROCOPY` on TCP (Linux 4.14).
    pub zerocopy_tcp: u32,
    /// `SO_ZEROCOPY` on UDP (Linux 5.0).
    pub zerocopy_udp: u32,
    /// io_uring `IORING_OP_SEND_ZC` (Linux 6.0), 0 when io_uring is disabled or filtered.
    pub uring_send_zc: u32,
    /// io_uring `IORING_OP_SENDMSG_ZC` (Linux 6.1).
    pub uring_sendmsg_zc: u32,
    /// Bytes of `struct tcp_zerocopy_receive` the kernel knows (16 on 4.18 ... 64 since
    /// 5.12); 0 when `TCP_ZEROCOPY_RECEIVE` is absent.
    pub tcp_zerocopy_receive_size: u32,
}

/// Runs `f`, turning a panic into `fail`: no unwinding crosses the C boundary.
pub(crate) fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fail)
}

pub(crate) fn neg(e: io::Error) -> c_int {
    -e.raw_os_error().unwrap_or(EIO)
}

pub(crate) fn ret_size(r: io::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => neg(e) as ssize_t,
    }
}

pub(crate) fn ret_unit(r: io::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => neg(e),
    }
}

/// The common shape of an export on a handle: the panic guard, and `-EINVAL` for NULL.
///
/// # Safety
/// `h` must be NULL or point to a live handle that nothing else uses during the call.
pub(crate) unsafe fn with_handle<H, R: NegErrno>(h: *mut H, f: impl FnOnce(&mut H) -> R) -> R {
    guard(R::neg(EIO), || {
        // SAFETY: NULL or a live, unaliased handle per the caller's contract.
        match unsafe { h.as_mut() } {
            Some(h) => f(h),
            None => R::neg(EINVAL),
        }
    })
}

/// The return types of exports (`int`, `ssize_t`): a failure is `-errno` in either.
pub(crate) trait NegErrno {
    fn neg(code: c_int) -> Self;
}

impl NegErrno for c_int {
    fn neg(code: c_int) -> Self {
        -code
    }
}

impl NegErrno for ssize_t {
    fn neg(code: c_int) -> Self {
        -(code as ssize_t)
    }
}

/// Borrows a caller-owned fd for the duration of a call (or of a handle).
pub(crate) fn borrow(fd: c_int) -> Result<BorrowedFd<'static>, c_int> {
    if fd < 0 {
        return Err(-EBADF);
    }
    // SAFETY: the C contract: the caller owns `fd` and keeps it open while lowcopy uses it.
    // lowcopy never closes it; if it is not open, the kernel answers EBADF.
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// Views a caller's iovec array; `-EINVAL` for NULL or a negative count.
///
/// # Safety
/// `iov` must point to `iovcnt` iovecs that stay valid during the call.
pub(crate) unsafe fn iov_slice<'a>(iov: *const iovec, iovcnt: c_int) -> Result<&'a [iovec], c_int> {
    if iov.is_null() || iovcnt <= 0 {
        return Err(-EINVAL);
    }
    // SAFETY: non-null, and the caller guarantees `iovcnt` readable iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) })
}

/// The library version: `(major << 16) | (minor << 8) | patch`.
#[no_mangle]
pub extern "C" fn lowcopy_version() -> u32 {
    (LOWCOPY_VERSION_MAJOR << 16) | (LOWCOPY_VERSION_MINOR << 8) | LOWCOPY_VERSION_PATCH
}

/// Probes what the running kernel offers, by trying on throwaway sockets (never by parsing the
/// kernel version). Writes `*out` and returns 0; `-EINVAL` if `out` is NULL; `-EMFILE`,
/// `-ENFILE`, `-ENOMEM` when no socket can be created.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one `lowcopy_caps`.
#[no_mangle]
pub unsafe extern "C" fn lowcopy_probe(out: *mut lowcopy_caps) -> c_int {
    guard(-EIO, || {
        if out.is_null() {
            return -EINVAL;
        }
        match lowcopy::probe() {
            Ok(c) => {
                let caps = lowcopy_caps {
                    peek_off_tcp4: c.peek_off_tcp4.into(),
                    peek_off_tcp6: c.peek_off_tcp6.into(),
                    peek_off_unix: c.peek_off_unix.into(),
                    peek_off_mptcp: c.peek_off_mptcp.into(),
                    zerocopy_tcp: c.zerocopy_tcp.into(),
                    zerocopy_udp: c.zerocopy_udp.into(),
                    uring_send_zc: c.uring_send_zc.into(),
                    uring_sendmsg_zc: c.uring_sendmsg_zc.into(),
                    tcp_zerocopy_receive_size: c.tcp_zerocopy_receive_size,
                };
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { out.write(caps) };
                0
            }
            Err(e) => neg(e),
        }
    })
}
