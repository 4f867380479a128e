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

mod args;
mod error;
mod peek;
mod probe;
mod rx;
mod teardown;
pub mod testing;
mod zc;
mod zcrx;

pub use error::errno_name;
