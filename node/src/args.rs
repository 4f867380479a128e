//! Arguments from JS: descriptors (an int fd or a `net.Socket`), integers, buffers and
//! options, checked the way Node's own validators check them.

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::Env;

use crate::error::{describe_value, range_error, received_number, sys_error, type_error};

/// The descriptor `v` stands for: an int fd; a `net.Socket` (or `dgram.Socket`, or anything
/// else whose `_handle.fd` is libuv's descriptor); or an object with a numeric `fd`
/// (`fs.promises.FileHandle`). A socket without a handle (not connected yet, or destroyed) or
/// with fd -1 is `EBADF`, as Python's `fileno() == -1` is; a negative or non-integer number is
/// a `RangeError`; anything else a `TypeError`. `what` names the call in errors.
pub fn raw_fd(env: &Env, v: &Unknown, what: &str) -> Result<RawFd> {
    match v.get_type()? {
        ValueType::Number => {
            let n = v.coerce_to_number()?.get_double()?;
            fd_number(env, n, "fd")
        }
        ValueType::Object => {
            // SAFETY: `v` is an object (checked just above).
            let obj: Object = unsafe { v.cast()? };
            let handle: Unknown = obj.get_named_property("_handle")?;
            match handle.get_type()? {
                ValueType::Null => Err(sys_error(env, libc::EBADF, what)),
                ValueType::Object => {
                    // SAFETY: an object (checked just above).
                    let h: Object = unsafe { handle.cast()? };
                    let fd: Unknown = h.get_named_property("fd")?;
                    object_fd(env, &fd, what, "socket._handle.fd")
                }
                _ => {
                    let fd: Unknown = obj.get_named_property("fd")?;
                    if fd.get_type()? != ValueType::Number {
                        return Err(type_error(
                            env,
                            format!(
                                "The \"fd\" argument must be of type number or a net.Socket. \
                                 Received {}",
                                describe_value(v)
                            ),
                        ));
                    }
                    object_fd(env, &fd, what, "fd")
                }
            }
        }
        _ => Err(type_error(
            env,
            format!(
                "The \"fd\" argument must be of type number or a net.Socket. Received {}",
                describe_value(v)
            ),
        )),
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
        return Err(range_error(
            env,
            format!(
                "The value of \"{name}\" is out of range. It must be an integer >= 0 && <= \
                 2147483647. Received {}",
                received_number(n)
            ),
        ));
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
    let raw = raw_fd(env, v, what)?;
    // SAFETY: the fd is only used for the fcntl below, during which the caller's object keeps
    // it open (the JS thread is inside this call); a number no fd has gives EBADF.
    let b = unsafe { BorrowedFd::borrow_raw(raw) };
    b.try_clone_to_owned()
        .map_err(|e| sys_error(env, e.raw_os_error().unwrap_or(libc::EBADF), what))
}

/// `fd` borrowed for a synchronous call: the JS thread is inside the call, so the number
/// cannot be closed under it by JS (a worker thread closing it concurrently would make the
/// kernel answer EBADF, or reach the reused number, as any fd-taking call would).
pub fn with_fd<T>(
    env: &Env,
    v: &Unknown,
    what: &str,
    f: impl FnOnce(BorrowedFd<'_>) -> Result<T>,
) -> Result<T> {
    let raw = raw_fd(env, v, what)?;
    // SAFETY: see above; a closed number makes the kernel answer EBADF, never memory unsafety.
    let b = unsafe { BorrowedFd::borrow_raw(raw) };
    f(b)
}

/// A number argument: a `TypeError` for anything else.
pub fn number(env: &Env, v: &Unknown, name: &str) -> Result<f64> {
    // One N-API call on the data path; it fails (napi_number_expected) for anything else.
    let mut n = 0f64;
    // SAFETY: plain N-API read of a live value of this call into a local.
    if unsafe { napi::sys::napi_get_value_double(env.raw(), v.raw(), &mut n) }
        == napi::sys::Status::napi_ok
    {
        return Ok(n);
    }
    if v.get_type()? != ValueType::Number {
        // "options.x" is a property, as Node's validators word it.
        let what = if name.contains('.') {
            "property"
        } else {
            "argument"
        };
        return Err(type_error(
            env,
            format!(
                "The \"{name}\" {what} must be of type number. Received {}",
                describe_value(v)
            ),
        ));
    }
    v.coerce_to_number()?.get_double()
}

/// A non-negative integer argument (a count, offset or length in bytes): `TypeError` if not a
/// number, `RangeError` if negative or fractional. Integers above `usize::MAX` saturate (the
/// core then refuses or clamps them as it documents).
pub fn size(env: &Env, v: &Unknown, name: &str) -> Result<usize> {
    let n = number(env, v, name)?;
    size_arg(env, n, name)
}

/// [`size`] of an already-read number.
pub fn size_arg(env: &Env, v: f64, name: &str) -> Result<usize> {
    if v.is_nan() || v.fract() != 0.0 || v < 0.0 {
        return Err(range_error(
            env,
            format!(
                "The value of \"{name}\" is out of range. It must be an integer >= 0. Received {}",
                received_number(v)
            ),
        ));
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
        return Err(range_error(
            env,
            format!(
                "The value of \"{name}\" is out of range. It must be >= 0 && <= {MAX_ALLOC}. \
                 Received {}",
                received_number(n as f64)
            ),
        ));
    }
    Ok(n)
}

/// A zero-filled buffer of `n` bytes, or `ENOMEM` instead of an abort.
pub fn alloc(env: &Env, n: usize, what: &str) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| sys_error(env, libc::ENOMEM, what))?;
    v.resize(n, 0);
    Ok(v)
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
                range_error(
                    env,
                    format!(
                    "The value of \"timeoutMs\" is out of range. It must be a finite number of \
                     milliseconds. Received {}",
                    received_number(ms)
                ),
                )
            }),
    }
}

/// Reads the boolean option `name` of an options object (`undefined` is false): a
/// `TypeError` when `opts` is neither an object nor `undefined`, or the option not a boolean.
pub fn bool_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<bool> {
    let Some(obj) = options_object(env, opts)? else {
        return Ok(false);
    };
    let v: Unknown = obj.get_named_property(name)?;
    match v.get_type()? {
        ValueType::Undefined => Ok(false),
        ValueType::Boolean => v.coerce_to_bool(),
        _ => Err(type_error(
            env,
            format!(
                "The \"options.{name}\" property must be of type boolean. Received {}",
                describe_value(&v)
            ),
        )),
    }
}

/// Reads the integer option `name` (`undefined`: None); `TypeError`/`RangeError` otherwise.
pub fn int_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<Option<i32>> {
    let Some(obj) = options_object(env, opts)? else {
        return Ok(None);
    };
    let v: Unknown = obj.get_named_property(name)?;
    if v.get_type()? == ValueType::Undefined {
        return Ok(None);
    }
    let n = number(env, &v, &format!("options.{name}"))?;
    Ok(Some(int32_arg(env, n, &format!("options.{name}"))?))
}

/// An `int32` argument (Node's `validateInt32`): `TypeError` if not a number, `RangeError` if
/// not an integer or outside -2^31..2^31-1.
pub fn int32(env: &Env, v: &Unknown, name: &str) -> Result<i32> {
    let n = number(env, v, name)?;
    int32_arg(env, n, name)
}

fn int32_arg(env: &Env, n: f64, name: &str) -> Result<i32> {
    if n.fract() != 0.0 || !(i32::MIN as f64..=i32::MAX as f64).contains(&n) {
        let must = if n.is_finite() && n.fract() == 0.0 {
            ">= -2147483648 && <= 2147483647"
        } else {
            "an integer"
        };
        return Err(range_error(
            env,
            format!(
                "The value of \"{name}\" is out of range. It must be {must}. Received {}",
                received_number(n)
            ),
        ));
    }
    Ok(n as i32)
}

/// A boolean argument (Node's `validateBoolean`): a `TypeError` for anything else.
pub fn boolean(env: &Env, v: &Unknown, name: &str) -> Result<bool> {
    if v.get_type()? != ValueType::Boolean {
        return Err(type_error(
            env,
            format!(
                "The \"{name}\" argument must be of type boolean. Received {}",
                describe_value(v)
            ),
        ));
    }
    v.coerce_to_bool()
}

/// The elements of an array argument (Node's `validateArray`): a `TypeError` for anything
/// else.
pub fn array<'a>(env: &Env, v: &Unknown<'a>, name: &str) -> Result<Vec<Unknown<'a>>> {
    let mut is_array = false;
    // SAFETY: plain N-API query on a live value of this call into a local.
    unsafe { napi::sys::napi_is_array(env.raw(), v.raw(), &mut is_array) };
    if !is_array {
        return Err(type_error(
            env,
            format!(
                "The \"{name}\" argument must be an instance of Array. Received {}",
                describe_value(v)
            ),
        ));
    }
    // SAFETY: an array is an object.
    let arr: Object = unsafe { v.cast()? };
    let len = arr.get_array_length()?;
    (0..len).map(|i| arr.get_element::<Unknown>(i)).collect()
}

/// Reads the string option `name` of an options object (`undefined`/`null`: None); a
/// `TypeError` when it is anything but a string.
pub fn string_opt(env: &Env, obj: &Object, name: &str) -> Result<Option<String>> {
    let v: Unknown = obj.get_named_property(name)?;
    match v.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(None),
        ValueType::String => Ok(Some(
            v.coerce_to_string()?.into_utf8()?.as_str()?.to_owned(),
        )),
        _ => Err(type_error(
            env,
            format!(
                "The \"options.{name}\" property must be of type string. Received {}",
                describe_value(&v)
            ),
        )),
    }
}

/// Checks the object option `name` (`undefined`/`null`: absent): a `TypeError` for anything
/// but an object.
pub fn object_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<()> {
    let Some(obj) = options_object(env, opts)? else {
        return Ok(());
    };
    let v: Unknown = obj.get_named_property(name)?;
    match v.get_type()? {
        ValueType::Undefined | ValueType::Null | ValueType::Object => Ok(()),
        _ => Err(type_error(
            env,
            format!(
                "The \"options.{name}\" property must be of type object. Received {}",
                describe_value(&v)
            ),
        )),
    }
}

/// The options object (None for `undefined`/`null`), or a `TypeError` (for an array too, as
/// Node's `validateObject`).
pub fn options_object<'a>(env: &Env, opts: Option<&Unknown<'a>>) -> Result<Option<Object<'a>>> {
    let Some(o) = opts else { return Ok(None) };
    let mut is_array = false;
    // SAFETY: plain N-API query on a live value of this call into a local.
    unsafe { napi::sys::napi_is_array(env.raw(), o.raw(), &mut is_array) };
    match o.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(None),
        // SAFETY: an object (checked by the match).
        ValueType::Object if !is_array => Ok(Some(unsafe { o.cast()? })),
        _ => Err(type_error(
            env,
            format!(
                "The \"options\" argument must be of type object. Received {}",
                describe_value(o)
            ),
        )),
    }
}

/// Reads the number option `name` (`undefined`: None).
pub fn number_opt(env: &Env, opts: Option<&Unknown>, name: &str) -> Result<Option<f64>> {
    let Some(obj) = options_object(env, opts)? else {
        return Ok(None);
    };
    let v: Unknown = obj.get_named_property(name)?;
    match v.get_type()? {
        ValueType::Undefined | ValueType::Null => Ok(None),
        _ => Ok(Some(number(env, &v, &format!("options.{name}"))?)),
    }
}
