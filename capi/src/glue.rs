//! The C conventions every export follows (capi/src/lib.rs's list): `-errno`, the panic guard
//! on handles, the growth rule (`write_sized`). Shared by the full library (this crate) and
//! `liblowcopy_peek.a` (capi/peek, which includes this file and capi/src/peek.rs): there
//! `lowcopy_full` is not set, nothing allocates, and a panic aborts (nothing to catch).

use core::cell::Cell;

use libc::{c_int, iovec, ssize_t, EBADF, EINVAL, EIO, ENOTRECOVERABLE};
use lowcopy::__private::{io, BorrowedFd};

#[cfg(lowcopy_full)]
use crate::NoCancel;
use crate::{fault_point, LOWCOPY_STRUCT_SIZE_MAX, LOWCOPY_STRUCT_SIZE_MIN};

/// Runs `f`, turning a panic into `fail`: no unwinding crosses the C boundary. For calls
/// without a handle (stateless calls, `*_new`): nothing is left half-updated but the panic's
/// own call, whose outputs are not written. No lowcopy call is a cancellation point: see
/// [`guard_held`] for the ones that hold cancellation off.
pub(crate) fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    catch(|| {
        fault_point();
        f()
    })
    .unwrap_or(fail)
}

/// Runs `f`; `Err` if it panicked. The full library catches the unwind; `liblowcopy_peek.a`
/// (panic=abort, `no_std`) never sees one: a panic there aborts the process.
#[cfg(lowcopy_full)]
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, ()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(drop)
}

/// Runs `f`; `Err` if it panicked. The full library catches the unwind; `liblowcopy_peek.a`
/// (panic=abort, `no_std`) never sees one: a panic there aborts the process.
#[cfg(not(lowcopy_full))]
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, ()> {
    Ok(f())
}

/// [`guard`] with thread cancellation held off ([`NoCancel`]).
#[cfg(lowcopy_full)]
pub(crate) fn guard_held<T>(fail: T, f: impl FnOnce() -> T) -> T {
    let _no_cancel = NoCancel::new();
    guard(fail, f)
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

/// An opaque C handle over a core object, and whether a call on it panicked.
pub(crate) struct Guarded<T> {
    pub(crate) inner: T,
    panicked: Cell<bool>,
}

impl<T> Guarded<T> {
    pub(crate) fn new(inner: T) -> Self {
        Guarded {
            inner,
            panicked: Cell::new(false),
        }
    }

    /// A call on this handle panicked: its state may be half-updated.
    pub(crate) fn panicked(&self) -> bool {
        self.panicked.get()
    }
}

/// The opaque handle types: each wraps a [`Guarded`] core object.
pub(crate) trait Handle {
    type Inner;
    fn guarded(&self) -> &Guarded<Self::Inner>;
    fn guarded_mut(&mut self) -> &mut Guarded<Self::Inner>;
}

/// Implements [`Handle`] for an opaque handle type `$name(Guarded<$inner>)`.
#[cfg(lowcopy_full)]
macro_rules! handle {
    ($name:ident, $inner:ty) => {
        impl $crate::Handle for $name {
            type Inner = $inner;
            fn guarded(&self) -> &$crate::Guarded<$inner> {
                &self.0
            }
            fn guarded_mut(&mut self) -> &mut $crate::Guarded<$inner> {
                &mut self.0
            }
        }
    };
}
#[cfg(lowcopy_full)]
pub(crate) use handle;

/// The common shape of `*_new`: `-EINVAL` for NULL `out`, the caller's fd borrowed, the core
/// object made by `make` and written to `*out` as a new handle (nothing written on failure).
///
/// # Safety
/// `out` must be NULL or writable for one pointer.
#[cfg(lowcopy_full)]
pub(crate) unsafe fn new_handle<H: Handle>(
    fd: c_int,
    out: *mut *mut H,
    wrap: fn(Guarded<H::Inner>) -> H,
    make: impl FnOnce(BorrowedFd<'static>) -> io::Result<H::Inner>,
) -> c_int {
    guard_held(-ENOTRECOVERABLE, || {
        if out.is_null() {
            return -EINVAL;
        }
        let fd = match borrow(fd) {
            Ok(fd) => fd,
            Err(e) => return e,
        };
        match make(fd) {
            Ok(inner) => {
                let h = Box::into_raw(Box::new(wrap(Guarded::new(inner))));
                // SAFETY: non-null and writable per the caller's contract.
                unsafe { out.write(h) };
                0
            }
            Err(e) => neg(e),
        }
    })
}

/// The common shape of an export on a handle: `-EINVAL` for NULL, `-ENOTRECOVERABLE` for a
/// handle on which a call panicked before, and the panic guard, which marks the handle.
///
/// # Safety
/// `h` must be NULL or point to a live handle that nothing else uses during the call.
pub(crate) unsafe fn with_handle<H: Handle, R: NegErrno>(
    h: *mut H,
    f: impl FnOnce(&mut H::Inner) -> R,
) -> R {
    // SAFETY: NULL or a live, unaliased handle per the caller's contract.
    let Some(h) = (unsafe { h.as_mut() }) else {
        return R::neg(EINVAL);
    };
    let g = h.guarded_mut();
    if g.panicked() {
        return R::neg(ENOTRECOVERABLE);
    }
    let inner = &mut g.inner;
    match catch(|| {
        let r = f(inner);
        fault_point();
        r
    }) {
        Ok(r) => r,
        Err(_) => {
            g.panicked.set(true);
            R::neg(ENOTRECOVERABLE)
        }
    }
}

/// [`with_handle`] for the read-only exports (`const` handle): `null` for NULL; `broken` for a
/// handle on which a call panicked before, and for a panic now (which marks the handle).
///
/// # Safety
/// `h` must be NULL or point to a live handle that no call modifies meanwhile.
pub(crate) unsafe fn with_handle_ref<H: Handle, R>(
    h: *const H,
    null: R,
    broken: R,
    f: impl FnOnce(&H::Inner) -> R,
) -> R {
    // SAFETY: NULL or a live handle per the caller's contract.
    let Some(h) = (unsafe { h.as_ref() }) else {
        return null;
    };
    let g = h.guarded();
    if g.panicked() {
        return broken;
    }
    match catch(|| {
        let r = f(&g.inner);
        fault_point();
        r
    }) {
        Ok(r) => r,
        Err(_) => {
            g.panicked.set(true);
            broken
        }
    }
}

/// Releases a handle made by `Box::into_raw`, returning `null` for NULL. A handle on which a
/// call panicked is dropped without `before_drop` and gives `broken`: its memory, mapping and
/// socket options are still released (Rust keeps the object memory-safe across a panic, only
/// its bookkeeping may be half-updated). A panic here gives `broken` too.
///
/// # Safety
/// `h` must be NULL or a handle from `Box::into_raw` not yet freed.
#[cfg(lowcopy_full)]
pub(crate) unsafe fn free_handle<H: Handle, R>(
    h: *mut H,
    null: R,
    broken: R,
    before_drop: impl FnOnce(&mut H::Inner) -> R,
) -> R {
    if h.is_null() {
        return null;
    }
    // SAFETY: allocated by Box::into_raw in the handle's *_new, freed only here, once.
    let mut b = unsafe { Box::from_raw(h) };
    let panicked = b.guarded().panicked();
    let run = move || {
        let r = (!panicked).then(|| before_drop(&mut b.guarded_mut().inner));
        drop(b);
        r
    };
    let _no_cancel = NoCancel::new();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
        .ok()
        .flatten()
        .unwrap_or(broken)
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
    Ok(unsafe { core::slice::from_raw_parts(iov, iovcnt as usize) })
}

/// Views a caller's array of `n` items (for `n` 0 an empty one, `p` may then be NULL);
/// `-EINVAL` for NULL with `n > 0`, or a count no array in memory can have (more than
/// `isize::MAX` bytes: a slice over it would be undefined behaviour, and reading it would run
/// past the caller's array).
///
/// # Safety
/// `p` must point to `n` items that stay valid during the call.
#[cfg(lowcopy_full)]
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize) -> Result<&'a [T], c_int> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() || n > isize::MAX as usize / core::mem::size_of::<T>().max(1) {
        return Err(-EINVAL);
    }
    // SAFETY: non-null, at most isize::MAX bytes, and the caller guarantees `n` readable items.
    Ok(unsafe { core::slice::from_raw_parts(p, n) })
}

/// The growth rule's check of a caller's `sizeof`: `-EINVAL` outside
/// [`LOWCOPY_STRUCT_SIZE_MIN`]..=[`LOWCOPY_STRUCT_SIZE_MAX`].
pub(crate) fn check_size(size: usize) -> Result<(), c_int> {
    if (LOWCOPY_STRUCT_SIZE_MIN..=LOWCOPY_STRUCT_SIZE_MAX).contains(&size) {
        Ok(())
    } else {
        Err(-EINVAL)
    }
}

/// Writes `value` to the caller's struct of `size` bytes (the caller's `sizeof`, checked by
/// [`check_size`]): the first `min(size, size_of::<T>())` bytes of it, then zeros up to
/// `size`. A caller built against an older header (a shorter struct) gets the fields it knows
/// and nothing past them; a newer one sees 0 in fields this library does not know.
///
/// # Safety
/// `out` must be writable for `size` bytes (any alignment).
pub(crate) unsafe fn write_sized<T: Copy>(out: *mut u8, size: usize, value: &T) {
    let ours = core::mem::size_of::<T>();
    let n = size.min(ours);
    // SAFETY: `value` is readable for `ours` >= n bytes; `out` is writable for `size` >= n
    // bytes per the caller; a byte copy needs no alignment. (Padding bytes of T, if any, are
    // copied as they are: C never reads them as a field.)
    unsafe { core::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out, n) };
    if size > ours {
        // SAFETY: bytes ours..size of the caller's struct, writable per the caller.
        unsafe { core::ptr::write_bytes(out.add(ours), 0, size - ours) };
    }
}

/// Reads the caller's struct of `size` bytes into a `T` (in/out structs): the first
/// `min(size, size_of::<T>())` bytes; the fields past the caller's struct start as in
/// `T::default()`.
///
/// # Safety
/// `src` must be readable for `size` bytes (any alignment); every bit pattern must be a valid
/// `T` (plain integers).
#[cfg(lowcopy_full)]
pub(crate) unsafe fn read_sized<T: Copy + Default>(src: *const u8, size: usize) -> T {
    let mut v = T::default();
    let n = size.min(core::mem::size_of::<T>());
    // SAFETY: `src` readable for n bytes, `v` writable for size_of::<T>() >= n; T is plain
    // integers per the caller, so any bytes make a valid value.
    unsafe { core::ptr::copy_nonoverlapping(src, (&mut v as *mut T).cast::<u8>(), n) };
    v
}

/// Writes `value` to a caller's struct after the NULL and size checks; 0 or `-EINVAL`.
///
/// # Safety
/// `out` must be NULL or writable for `size` bytes.
pub(crate) unsafe fn out_sized<T: Copy>(
    out: *mut T,
    size: usize,
    value: impl FnOnce() -> T,
) -> c_int {
    if out.is_null() {
        return -EINVAL;
    }
    if let Err(e) = check_size(size) {
        return e;
    }
    // SAFETY: non-null and writable for `size` bytes per the caller's contract.
    unsafe { write_sized(out.cast::<u8>(), size, &value()) };
    0
}
