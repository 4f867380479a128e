//! Test-only panic injection: built with the cargo feature `fault-injection` (the library that
//! tests/c/fault_panic.c runs against), never in the release library.

use std::sync::atomic::{AtomicU32, Ordering};

/// Guarded calls left until the injected panic; 0: none armed.
static COUNTDOWN: AtomicU32 = AtomicU32::new(0);

/// The `n`-th guarded call from now panics inside the library (1: the next one; a call on a
/// handle panics after its work, leaving the handle's state changed); 0 disarms.
///
/// Syscalls: none.
#[no_mangle]
pub extern "C" fn lowcopy_test_panic_after(n: u32) {
    COUNTDOWN.store(n, Ordering::Relaxed);
}

/// Counts one guarded call, and panics when the countdown reaches it.
pub(crate) fn point() {
    let left = COUNTDOWN.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1));
    if left == Ok(1) {
        panic!("lowcopy: panic injected by lowcopy_test_panic_after (fault-injection build)");
    }
}
