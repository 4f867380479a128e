//! Arguments from JS: descriptors (an int fd or a `net.Socket`), integers, buffers and
//! options, checked the way Node's own validators check them.

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use lowcopy::Flags;
use napi::bindgen_prelude::*;
use napi::Env;

use crate::error::{arg_type_error, out_of_range, received_number, sys_error, OrThrow};

/// The descriptor `v` stands for: an int fd; a `net.Socket` (or `dgram.Socket`, or anything
/// else whose `_handle.fd` is libuv's descriptor); or an object with a numeric `fd`
/// (`fs.promises.FileHandle`). A socket without a handle (not connected yet, or destroyed) or
/// with fd -1 is `EBADF`, as Python's `fileno() == -1` is; a negative or non-integer number is
/// a `RangeError`; anything else a `TypeError`. `what` names the call in errors.
pub fn raw_fd(env: &Env, v: &Unknown, what: &str) -> Result<RawFd> {
    let not_fd = || arg_type_error(env, "fd", "of type number or a net.Socket", v);
    match v.get_type()? {
        ValueType::Number => fd_number(env, v.coerce_to_number()?.get_double()?, "fd"),
        ValueType::Object => {
            // SAFETY: `v` is an object (checked just above).
            let obj: Object = unsafe { v.cast()? };
            let handle: Unknown = obj.get_named_property("_handle")?;
            match handle.get_type()? {
                ValueType::Null => Err(sys_error(env, libc::EBADF, what)),
                ValueType::Object => {
                    // SAFETY: an object (checked just above).
                    let h: Object = unsafe { handle.cast()? };
                    object_fd(env, &h.get_named_property("fd")?, what, "socket._handle.fd")
                }
                _ => {
                    let fd: Unknown = obj.get_named_property("fd")?;
                    if fd.get_type()? != ValueType::Number {
                        return Err(not_fd());
                    }
                    object_fd(env, &fd, what, "fd")
                }
            }
        }
        _ => Err(not_fd()),
    }
}

/// An fd held by an object: -1 (closed: libuv and FileHandle say so) and other negatives are
/// `EBADF`.
fn object_fd(env: &Env, fd: &Unknown, what: &str, name: &str) -> Result<RawFd> {
    if fd.get_type()? != ValueType::Number {
        return Err(sys_error(env, libc::EBADF, what));
    }
    let n = fd.coerce_to_number()?.get_double()?;
    if n < 0.0 {
        return Err(sys_error(env, libc::EBADF, what));
    }
    fd_number(env, n, name)
}

fn fd_number(env: &Env, n: f64, name: &str) -> Result<RawFd> {
    if n.fract() != 0.0 || !(0.0..=i32::MAX as f64).contains(&n) {
        let must = "an integer >= 0 && <= 2147483647";
        return Err(out_of_range(env, name, must, received_number(n)));
    }
    Ok(n as RawFd)
}

/// Whether `v` is a libuv stream or socket (an object with a `_handle`): lowcopy must then
/// never leave notifications on its error queue (libuv polls it level-triggered).
pub fn is_libuv_handle(v: &Unknown) -> Result<bool> {
    if v.get_type()? != ValueType::Object {
        return Ok(false);
    }
    // SAFETY: an object (checked just above).
    let obj: Object = unsafe { v.cast()? };
    let handle: Unknown = obj.get_named_property("_handle")?;
    Ok(matches!(handle.get_type()?, ValueType::Object))
}

/// A private duplicate of the descriptor `v` stands for (`F_DUPFD_CLOEXEC`): every native
/// object works on its own, so a number closed and reused elsewhere is never touched.
/// `EBADF` for a closed fd, `EMFILE` when the process is out of descriptors.
pub fn dup_fd(env: &Env, v: &Unknown, what: &str) -> Result<OwnedFd> {
    with_fd(env, v, what, |b| b.try_clone_to_owned())
}

/// `fd` borrowed for a synchronous call: the JS thread is inside the call, so the number
/// cannot be closed under it by JS (a worker thread closing it concurrently would make the
/// kernel answer EBADF, or reach the reused number, as any fd-taking call would). `f`'s error
/// is thrown as a system error of `what`.
pub fn with_fd<T>(
    env: &Env,
    v: &Unknown,
    what: &str,
    f: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<T>,
) -> Result<T> {
    f(borrowed_fd(env, v, what)?).or_throw(env, what)
}

/// [`raw_fd`] borrowed for a synchronous call, as [`with_fd`] does: for a call that resolves
/// its descriptor (whose getters can run JS) before it takes a buffer's bytes.
pub fn borrowed_fd<'a>(env: &Env, v: &Unknown<'a>, what: &str) -> Result<BorrowedFd<'a>> {
    let raw = raw_fd(env, v, what)?;
    // SAFETY: see `with_fd`; a closed number makes the kernel answer EBADF, never memory
    // unsafety.
    Ok(unsafe { BorrowedFd::borrow_raw(raw) })
}

/// An element pointer N-API gave for `len` elements: dangling (aligned, never read) when
/// `len` is 0, where N-API may give null, which a slice must not be made from.
pub fn nonnull<T>(data: *mut std::ffi::c_void, len: usize) -> *mut T {
    if len == 0 {
        std::ptr::NonNull::dangling().as_ptr()
    } else {
        data.cast()
    }
}

/// `v` if it is a number (a primitive: no conversion). One N-API call on the data path; it
/// fails (napi_number_expected) for anything else.
pub fn as_number(env: &Env, v: napi::sys::napi_value) -> Option<f64> {
    let mut n = 0f64;
    // SAFETY: plain N-API read of a live value of this call into a local.
    let st = unsafe { napi::sys::napi_get_value_double(env.raw(), v, &mut n) };
    (st == napi::sys::Status::napi_ok).then_some(n)
}

/// A number argument: a `TypeError` for anything else.
pub fn number(env: &Env, v: &Unknown, name: &str) -> Result<f64> {
    as_number(env, v.raw()).ok_or_else(|| arg_type_error(env, name, "of type number", v))
}

/// A non-negative integer argument (a count, offset or length in bytes): `TypeError` if not a
/// number, `RangeError` if negative or fractional. Integers above `usize::MAX` saturate (the
/// core then refuses or clamps them as it documents).
pub fn size(env: &Env, v: &Unknown, name: &str) -> Result<usize> {
    let v = number(env, v, name)?;
    if v.is_nan() || v.fract() != 0.0 || v < 0.0 {
        let must = "an integer >= 0";
        return Err(out_of_range(env, name, must, received_number(v)));
    }
    Ok(v as usize)
}

/// Largest length a call allocates a Buffer for: Node's `buffer.constants.MAX_LENGTH` on 64-bit
/// Node 20 is 2^32; one peek or receive never returns more than `INT_MAX` anyway.
pub const MAX_ALLOC: usize = i32::MAX as usize;

/// A length to allocate: a `RangeError` above [`MAX_ALLOC`].
pub fn alloc_len(env: &Env, v: &Unknown, name: &str) -> Result<usize> {
    let n = size(env, v, name)?;
    if n > MAX_ALLOC {
        let must = format!(">= 0 && <= {MAX_ALLOC}");
        return Err(out_of_range(env, name, &must, received_number(n as f64)));
    }
    Ok(n)
}

/// A zero-filled buffer of `n` bytes, or `ENOMEM` instead of an abort.
pub fn try_alloc(n: usize) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
    v.resize(n, 0);
    Ok(v)
}

/// The `n` bytes received into `buf` as a `Buffer`, its spare capacity given back when large.
pub fn into_buffer(mut buf: Vec<u8>, n: usize) -> Buffer {
    buf.truncate(n);
    if buf.capacity() > 2 * n.max(4096) {
        buf.shrink_to_fit();
    }
    buf.into()
}

/// A timeout in milliseconds: `undefined`/`null`/negative (-1) is no limit, 0 does not wait.
pub fn timeout_ms(env: &Env, v: Option<&Unknown>) -> Result<Option<Duration>> {
    let v = match v {
        Some(u) if !matches!(u.get_type()?, ValueType::Undefined | ValueType::Null) => {
            Some(number(env, u, "timeoutMs")?)
        }
        _ => None,
    };
    timeout_of(env, v)
}

/// The `timeoutMs` option of `opts` (see [`timeout_of`]).
pub fn timeout_opt(env: &Env, opts: Option<&Unknown>) -> Result<Option<Duration>> {
    let v = number_opt(env, opts, "timeoutMs")?;
    timeout_of(env, v)
}

/// A timeout in milliseconds: None or negative is no limit, 0 does not wait.
pub fn timeout_of(env: &Env, v: Option<f64>) -> Result<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(ms) if ms < 0.0 => Ok(None),
        // NaN, Infinity, and milliseconds beyond what a `Duration` holds (about 5.8e14 years).
        Some(ms) => Duration::try_from_secs_f64(ms / 1000.0)
            .map(Some)
            .map_err(|_| {
                let must = "a finite number of milliseconds";
                out_of_range(env, "timeoutMs", must, received_number(ms))
            }),
    }
}

/// The property `name` of the options object `opts` read by `read` (which names it
/// `options.<name>` in its errors): None without one ([`options_object`]), or when it is
/// `undefined` (or, if `nullable`, `null`).
fn opt<'a, T>(
    env: &Env,
    opts: Option<&Unknown<'a>>,
    name: &str,
    nullable: bool,
    read: impl FnOnce(&Env, &Unknown<'a>, &str) -> Result<T>,
) -> Result<Option<T>> {
    let Some(o) = options_object(env, opts)? else {
        return Ok(None);
    };
    let v: Unknown = o.get_named_property(name)?;
    match v.get_type()? {
        ValueType::Undefined => Ok(None),
        ValueType::Null if nullable => Ok(None),
        _ => read(env, &v, &format!("options.{name}")).map(Some),
    }
}

/// Reads the boolean option `name` of an options object (`undefined`: `default`): a
/// `TypeError` when `opts` is neither an object nor `undefined`, or the option not a boolean.
pub fn bool_opt(env: &Env, opts: Option<&Unknown>, name: &str, default: bool) -> Result<bool> {
    Ok(opt(env, opts, name, false, boolean)?.unwrap_or(default))
}

/// Reads the integer option `name` (`undefined`: None); `TypeError`/`RangeError` otherwise.
pub fn int_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<Option<i32>> {
    opt(env, opts, name, false, int32)
}

/// The per-call flags of `options` (`dontWait`; for a send, `more`; or raw `flags`); `EINVAL`
/// (as a system error of `what`) for C bits a call does not take (a send ignores
/// `MSG_NOSIGNAL`, which lowcopy always sets).
pub fn flags(env: &Env, options: Option<&Unknown>, what: &str, send: bool) -> Result<Flags> {
    if options.is_none() {
        return Ok(Flags::NONE);
    }
    let mut f = Flags::NONE;
    if bool_opt(env, options, "dontWait", false)? {
        f |= Flags::DONTWAIT;
    }
    if send && bool_opt(env, options, "more", false)? {
        f |= Flags::MORE;
    }
    if let Some(raw) = int_opt(env, options, "flags")? {
        let raw = if send { raw & !libc::MSG_NOSIGNAL } else { raw };
        f |= Flags::from_raw(raw).or_throw(env, what)?;
    }
    Ok(f)
}

/// An `int32` argument (Node's `validateInt32`): `TypeError` if not a number, `RangeError` if
/// not an integer or outside -2^31..2^31-1.
pub fn int32(env: &Env, v: &Unknown, name: &str) -> Result<i32> {
    let n = number(env, v, name)?;
    if n.fract() != 0.0 || !(i32::MIN as f64..=i32::MAX as f64).contains(&n) {
        let must = if n.is_finite() && n.fract() == 0.0 {
            ">= -2147483648 && <= 2147483647"
        } else {
            "an integer"
        };
        return Err(out_of_range(env, name, must, received_number(n)));
    }
    Ok(n as i32)
}

/// A boolean argument (Node's `validateBoolean`): a `TypeError` for anything else.
pub fn boolean(env: &Env, v: &Unknown, name: &str) -> Result<bool> {
    if v.get_type()? != ValueType::Boolean {
        return Err(arg_type_error(env, name, "of type boolean", v));
    }
    v.coerce_to_bool()
}

/// The elements of an array argument (Node's `validateArray`): a `TypeError` for anything
/// else.
pub fn array<'a>(env: &Env, v: &Unknown<'a>, name: &str) -> Result<Vec<Unknown<'a>>> {
    if !v.is_array()? {
        return Err(arg_type_error(env, name, "an instance of Array", v));
    }
    // SAFETY: an array is an object.
    let arr: Object = unsafe { v.cast()? };
    let len = arr.get_array_length()?;
    // Sized at once: collecting `Result`s grows the vector from nothing (three reallocations
    // for 16 elements).
    let mut v = Vec::with_capacity(len as usize);
    for i in 0..len {
        v.push(arr.get_element::<Unknown>(i)?);
    }
    Ok(v)
}

/// Reads the string option `name` of an options object (`undefined`/`null`: None); a
/// `TypeError` when it is anything but a string.
pub fn string_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<Option<String>> {
    opt(env, opts, name, true, |env, v, name| {
        if v.get_type()? != ValueType::String {
            return Err(arg_type_error(env, name, "of type string", v));
        }
        let s = v.coerce_to_string()?.into_utf8()?;
        s.as_str().map(str::to_owned)
    })
}

/// The string option `name`, one of the names of `choices` (`undefined`/`null`: None): a
/// `TypeError` for a non-string, `ERR_INVALID_ARG_VALUE` for another string.
pub fn one_of<T: Copy>(
    env: &Env,
    opts: Option<&Unknown>,
    name: &str,
    choices: &[(&str, T)],
) -> Result<Option<T>> {
    let Some(s) = string_opt(env, opts, name)? else {
        return Ok(None);
    };
    if let Some(&(_, v)) = choices.iter().find(|c| c.0 == s) {
        return Ok(Some(v));
    }
    let names: Vec<String> = choices.iter().map(|c| format!("'{}'", c.0)).collect();
    let msg = format!(
        "The property 'options.{name}' must be one of: {}. Received '{s}'",
        names.join(", ")
    );
    Err(crate::error::value_error(env, msg))
}

/// The name `v` has in `choices` (the table of a [`one_of`] option; every value has one).
pub fn name_of<T: PartialEq>(choices: &[(&'static str, T)], v: T) -> &'static str {
    choices.iter().find(|c| c.1 == v).map_or("", |c| c.0)
}

/// Checks the object option `name` (`undefined`/`null`: absent): a `TypeError` for anything
/// but an object.
pub fn object_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<()> {
    let check = |env: &Env, v: &Unknown, name: &str| match v.get_type()? {
        ValueType::Object => Ok(()),
        _ => Err(arg_type_error(env, name, "of type object", v)),
    };
    opt(env, opts, name, true, check).map(drop)
}

/// The options object (None for `undefined`/`null`), or a `TypeError` (for an array too, as
/// Node's `validateObject`).
pub fn options_object<'a>(env: &Env, opts: Option<&Unknown<'a>>) -> Result<Option<Object<'a>>> {
    let Some(o) = opts else { return Ok(None) };
    match o.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(None),
        // SAFETY: an object (checked by the match).
        ValueType::Object if !o.is_array()? => Ok(Some(unsafe { o.cast()? })),
        _ => Err(arg_type_error(env, "options", "of type object", o)),
    }
}

/// Reads the number option `name` (`undefined`: None).
pub fn number_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<Option<f64>> {
    opt(env, opts, name, true, number)
}
