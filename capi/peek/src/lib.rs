//! `liblowcopy_peek.a`: the peeker's C functions of `include/lowcopy.h` (those that work on the
//! caller's storage: `lowcopy_peeker_init` ... `lowcopy_peeker_release`), with the same symbols
//! and semantics as `liblowcopy.a`'s, over the same engine: core's peek code built without
//! `std` (`lowcopy` with `default-features = false`) and the full library's own C glue
//! (capi/src/glue.rs and capi/src/peek.rs, included here as modules).
//!
//! What it does not have: the heap peeker (`lowcopy_peeker_new`, `lowcopy_peeker_free`), the
//! stateless calls, zerocopy and receive. What it differs in: no panic guard, since nothing
//! unwinds (panic=abort); a panic, which no call is meant to reach, ends the process with
//! `SIGABRT` made by a raw syscall, where the full library returns `-ENOTRECOVERABLE`.
//!
//! It references from libc only `syscall`, `getsockopt`, `setsockopt`, `ioctl`, `fcntl`,
//! `clock_gettime`, `__errno_location` and `mem*` (docs/c.md; tests/footprint/check.sh holds
//! it to that list with `nm`).
#![no_std]
#![allow(non_camel_case_types)]

#[path = "../../src/glue.rs"]
mod glue;
#[path = "../../src/peek.rs"]
mod peek;

pub(crate) use glue::*;
pub use peek::*;

// The header's values (capi/src/lib.rs), which the growth rule's checks use.
pub(crate) const LOWCOPY_STRUCT_SIZE_MIN: usize = 8;
pub(crate) const LOWCOPY_STRUCT_SIZE_MAX: usize = 4096;

/// The full library's fault-injection point: none here.
#[inline(always)]
pub(crate) fn fault_point() {}

/// The archive's symbols carry no versions (capi/src/versions.rs gives the shared library's).
mod versions {
    macro_rules! default_version {
        ($name:literal, $ver:literal) => {};
    }
    pub(crate) use default_version;
}

/// A panic aborts the process: `SIGABRT` to itself, by raw syscalls (a handler that returns
/// is followed by `exit_group(134)`). Nothing to unwind or print.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: kill(getpid(), SIGABRT) and exit_group take no pointers.
    unsafe {
        let pid = libc::syscall(libc::SYS_getpid);
        libc::syscall(libc::SYS_kill, pid, libc::SIGABRT);
        loop {
            libc::syscall(libc::SYS_exit_group, 134);
        }
    }
}
