//! The Node.js binding of lowcopy (napi-rs v3): the npm package `lowcopy`.
//!
//! Every export is `#[napi(catch_unwind)]`: a panic becomes a thrown `Error` (code
//! `'GenericFailure'`) instead of aborting the process. Errors from the kernel are Node-style
//! system errors (module `error`); descriptors are taken as an int fd or a `net.Socket`
//! (module `args`) and every native object works on its own duplicate.
//!
//! The behaviour of each call is the core's (`lowcopy` crate, `core/`): its rustdoc gives the
//! units, errors and kernel behaviour; the doc comments here say what the JS form adds.

#![deny(clippy::undocumented_unsafe_blocks)]
// napi-derive registers the exports only outside `cfg(test)` (clippy --all-targets builds that too).
#![cfg_attr(test, allow(dead_code))]

/// `From<&core struct>` for the `#[napi(object)]` mirror `$js` of a core struct, field by field
/// with `as` (a counter becomes a JS number). The mirror is written out (napi-derive reads its
/// doc comments for index.d.ts).
macro_rules! mirror {
    ($js:ident from $core:ty { $($f:ident),* $(,)? }) => {
        impl From<&$core> for $js {
            fn from(s: &$core) -> Self {
                $js { $($f: s.$f as _),* }
            }
        }
    };
}

/// An object of native functions bound to `$shared` (a `$T`, boxed into each function): each
/// `"name" => body`, where `body` is a closure `|env, shared: &$T, [args]: [Unknown; N]|`
/// run by `peek::bound_call` (arguments in, result or thrown error out). The hot calls of
/// `lowcopy.js`, without napi-rs's class-method work on `this` per call.
macro_rules! bound_fns {
    ($env:expr, $shared:expr, $T:ty, { $($name:literal => $body:expr),* $(,)? }) => {{
        let mut obj = Object::new($env)?;
        $({
            unsafe extern "C" fn cb(
                env: napi::sys::napi_env,
                info: napi::sys::napi_callback_info,
            ) -> napi::sys::napi_value {
                let body = $body; // outside the unsafe block: its own unsafe is checked
                // SAFETY: called by N-API as the callback of the function made below by
                // `bound_fn` with a `$T`.
                unsafe { $crate::peek::bound_call::<$T, _, _>(env, info, $name, body) }
            }
            let f = $crate::peek::bound_fn($env, $shared.clone(), $name, Some(cb))?;
            // SAFETY: a live value of this call.
            obj.set_named_property($name, unsafe { Unknown::from_raw_unchecked($env.raw(), f) })?;
        })*
        Ok(obj)
    }};
}

mod args;
mod error;
mod peek;
mod probe;
mod rx;
mod shared;
mod teardown;
pub mod testing;
mod zc;
mod zcrx;

pub use error::errno_name;
