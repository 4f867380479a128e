//! Errors shaped like Node's own system errors, and argument errors like Node's validators.
//!
//! A system error is an `Error` with `code` (`'EAGAIN'`), `errno` (negative, `-11`) and
//! `syscall` (the lowcopy call that failed), as Node's `ErrnoException`/`UVException` build
//! them (lib/internal/errors.js); the message is `'EAGAIN: resource temporarily unavailable,
//! peekInto'`, the form of Node's fs errors. `code` is what `util.getSystemErrorName(errno)`
//! answers. Wrong argument types are `TypeError` with `code: 'ERR_INVALID_ARG_TYPE'`, values out
//! of range `RangeError` with `code: 'ERR_OUT_OF_RANGE'` (or `'ERR_INVALID_ARG_VALUE'`).

use std::io;

use napi::bindgen_prelude::*;
use napi::{Env, JsRangeError, JsTypeError};

/// The name Node gives `errno` (`"EAGAIN"`): the kernel's (the core's `errno_name`), but
/// `ENOTSUP` for 95 as libuv (`util.getSystemErrorName`) calls it, and `"UNKNOWN"` for a number
/// without a name, as Node names errors it cannot map.
pub fn errno_name(errno: i32) -> &'static str {
    match lowcopy::errno_name(errno) {
        _ if errno == libc::EOPNOTSUPP => "ENOTSUP",
        Some(s) => s,
        None => "UNKNOWN",
    }
}

/// The kernel's description of `errno`, first letter lowered as libuv prints it.
fn describe(errno: i32) -> String {
    let s = io::Error::from_raw_os_error(errno).to_string();
    // std appends " (os error N)".
    let s = s.split(" (os error").next().unwrap_or_default();
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => format!("error {errno}"),
    }
}

/// A JS `Error` with `code`, negative `errno` and `syscall`, as Node's system errors carry.
pub fn sys_error(env: &Env, errno: i32, syscall: &str) -> Error {
    let code = errno_name(errno);
    let msg = format!("{code}: {}, {syscall}", describe(errno));
    js_error(env, msg, |o| {
        o.set_named_property("code", code)?;
        o.set_named_property("errno", -errno)?;
        o.set_named_property("syscall", syscall)
    })
}

/// A JS `Error` of `msg` with the properties `set` gives it (or the error making it failed
/// with).
fn js_error(env: &Env, msg: String, set: impl FnOnce(&mut Object) -> Result<()>) -> Error {
    let build = || -> Result<Error> {
        let mut obj = env.create_error(Error::new(Status::GenericFailure, msg))?;
        set(&mut obj)?;
        Ok(Error::from(obj.to_unknown()))
    };
    build().unwrap_or_else(|e| e)
}

/// The errno of an `io::Error` from the core (which always keeps the kernel's); `EIO` for one
/// without (never made by lowcopy).
pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// `?`-friendly conversion of core results into thrown system errors.
pub trait OrThrow<T> {
    /// Turns an `io::Error` into the system error of `syscall`.
    fn or_throw(self, env: &Env, syscall: &str) -> Result<T>;
}

impl<T> OrThrow<T> for io::Result<T> {
    fn or_throw(self, env: &Env, syscall: &str) -> Result<T> {
        self.map_err(|e| sys_error(env, errno_of(&e), syscall))
    }
}

/// A `RangeError` (else a `TypeError`) of `msg` with `code`.
fn with_code(env: &Env, code: &str, msg: String, range: bool) -> Error {
    let e = Error::new(code.to_string(), msg);
    Error::from(if range {
        JsRangeError::from(e).into_unknown(*env)
    } else {
        JsTypeError::from(e).into_unknown(*env)
    })
}

/// `TypeError` with `code: 'ERR_INVALID_ARG_TYPE'`.
pub fn type_error(env: &Env, msg: String) -> Error {
    with_code(env, "ERR_INVALID_ARG_TYPE", msg, false)
}

/// `RangeError` with `code: 'ERR_OUT_OF_RANGE'`.
pub fn range_error(env: &Env, msg: String) -> Error {
    with_code(env, "ERR_OUT_OF_RANGE", msg, true)
}

/// `TypeError` with `code: 'ERR_INVALID_ARG_VALUE'` (a value of the right type that makes no
/// sense: an unknown backend name).
pub fn value_error(env: &Env, msg: String) -> Error {
    with_code(env, "ERR_INVALID_ARG_VALUE", msg, false)
}

/// The `TypeError` of Node's validators for `v` given as `name`: `The "name" argument must be
/// {must}. Received ...` (a "property" for `options.x`).
pub fn arg_type_error(env: &Env, name: &str, must: &str, v: &Unknown) -> Error {
    let what = ["argument", "property"][name.contains('.') as usize];
    let got = describe_value(v);
    let msg = format!("The \"{name}\" {what} must be {must}. Received {got}");
    type_error(env, msg)
}

/// The `RangeError` of Node's validators: `The value of "name" is out of range. It must be
/// {must}. Received {got}`.
pub fn out_of_range(env: &Env, name: &str, must: &str, got: impl std::fmt::Display) -> Error {
    let msg = format!("The value of \"{name}\" is out of range. It must be {must}. Received {got}");
    range_error(env, msg)
}

/// How Node's validators describe a received value at the end of their messages ("Received
/// type string ('x')", "Received an instance of Array", "Received null": Node's
/// `determineSpecificType`, lib/internal/errors.js).
pub fn describe_value(v: &Unknown) -> String {
    match v.get_type() {
        Ok(ValueType::Undefined) => "undefined".into(),
        Ok(ValueType::Null) => "null".into(),
        Ok(ValueType::Number) => match v.coerce_to_number().and_then(|n| n.get_double()) {
            Ok(n) if n == 0.0 && n.is_sign_negative() => "type number (-0)".into(),
            Ok(n) => format!("type number ({})", js_number(n)),
            Err(_) => "type number".into(),
        },
        Ok(ValueType::String) => match js_string(v) {
            Some(mut s) => {
                if s.encode_utf16().count() > 28 {
                    s = format!("{}...", s.chars().take(25).collect::<String>());
                }
                if s.contains('\'') {
                    format!("type string ({})", json_quote(&s))
                } else {
                    format!("type string ('{s}')")
                }
            }
            None => "type string".into(),
        },
        Ok(ValueType::Boolean) => match v.coerce_to_bool() {
            Ok(b) => format!("type boolean ({b})"),
            Err(_) => "type boolean".into(),
        },
        Ok(ValueType::BigInt) => match js_string(v) {
            Some(s) => format!("type bigint ({s}n)"),
            None => "type bigint".into(),
        },
        Ok(ValueType::Symbol) => match js_string(v) {
            Some(s) => format!("type symbol ({s})"),
            None => "type symbol".into(),
        },
        Ok(ValueType::Function) => {
            let name = property(v, "name").and_then(|n| js_string(&n));
            format!("function {}", name.unwrap_or_default())
        }
        Ok(ValueType::Object) => {
            let name = property(v, "constructor")
                .and_then(|c| property(&c, "name"))
                .and_then(|n| js_string(&n))
                .filter(|n| !n.is_empty());
            match name {
                Some(n) => format!("an instance of {n}"),
                None => "[Object: null prototype] {}".into(),
            }
        }
        _ => "a value".into(),
    }
}

/// `String(v)` (a primitive: never throws for strings, numbers, bigints, symbols); `None` when
/// anything fails (a pending exception is cleared).
fn js_string(v: &Unknown) -> Option<String> {
    let env = Env::from_raw(v.value().env);
    let string = || -> Result<String> {
        let f: Function<Unknown, Unknown> = env.get_global()?.get_named_property("String")?;
        f.call(*v)?.coerce_to_string()?.into_utf8()?.into_owned()
    };
    string().map_err(|_| clear_exception(env.raw())).ok()
}

/// `v[name]` (a getter may throw: `None`, the exception cleared).
fn property<'a>(v: &Unknown<'a>, name: &str) -> Option<Unknown<'a>> {
    // SAFETY: only wraps the value: napi_get_named_property takes any (it converts it to an
    // object, failing for undefined and null).
    let o: Object = unsafe { v.cast() }.ok()?;
    let r = o.get_named_property(name);
    r.map_err(|_| clear_exception(v.value().env)).ok()
}

fn clear_exception(env: napi::sys::napi_env) {
    let (mut pending, mut e) = (false, std::ptr::null_mut());
    // SAFETY: N-API calls on this call's env into locals.
    unsafe {
        if napi::sys::napi_is_exception_pending(env, &mut pending) == napi::sys::Status::napi_ok
            && pending
        {
            napi::sys::napi_get_and_clear_last_exception(env, &mut e);
        }
    }
}

/// `JSON.stringify` of a string.
fn json_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as JavaScript's `String(n)` writes it (`1.5`, `1e+21`, `NaN`, `Infinity`).
pub fn js_number(n: f64) -> String {
    if n.is_nan() {
        return "NaN".into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if n == 0.0 {
        return "0".into();
    }
    let a = n.abs();
    if (1e-7..1e21).contains(&a) {
        // Rust's shortest round-trip digits, as JavaScript's, without an exponent.
        return format!("{n}");
    }
    let e = format!("{n:e}"); // "1e21", "1.5e-7"
    match e.split_once('e') {
        Some((m, x)) if !x.starts_with('-') => format!("{m}e+{x}"),
        _ => e,
    }
}

/// A number as Node's `ERR_OUT_OF_RANGE` shows it after "Received": integers beyond 2^32 with
/// `_` between thousands (`1_099_511_627_776`), others as `util.inspect` does.
pub fn received_number(n: f64) -> String {
    if n == 0.0 && n.is_sign_negative() {
        return "-0".into();
    }
    let s = js_number(n);
    if !(n.is_finite() && n.fract() == 0.0 && n.abs() > 4_294_967_296.0) {
        return s;
    }
    // Node's addNumericalSeparator, on the string.
    let b = s.as_bytes();
    let start = usize::from(b.first() == Some(&b'-'));
    let mut i = b.len();
    let mut res = String::new();
    while i >= start + 4 {
        res = format!("_{}{res}", &s[i - 3..i]);
        i -= 3;
    }
    format!("{}{res}", &s[..i])
}

/// An `Error` named `AbortError` with `code: 'ABORT_ERR'`, as Node rejects an aborted operation
/// (`lib/internal/errors.js` `AbortError`).
pub fn abort_error(env: &Env, msg: &str) -> Error {
    js_error(env, msg.to_string(), |o| {
        o.set_named_property("name", "AbortError")?;
        o.set_named_property("code", "ABORT_ERR")
    })
}

/// Why an operation that ran off the JS thread failed; turned into a JS error on the JS thread
/// (errors are JS objects, made only there).
#[derive(Debug, Clone, Copy)]
pub enum Fail {
    /// The kernel's errno, as a system error of the call.
    Errno(i32),
    /// `close()` or the environment's teardown ended the wait.
    Aborted,
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Self {
        Fail::Errno(errno_of(&e))
    }
}

impl Fail {
    /// The JS error, for `syscall`.
    pub fn into_error(self, env: &Env, syscall: &str) -> Error {
        match self {
            Fail::Errno(e) => sys_error(env, e, syscall),
            Fail::Aborted => abort_error(env, &format!("The operation was aborted ({syscall})")),
        }
    }
}
