//! The Node.js binding of lowcopy (napi-rs v3): the npm package `lowcopy`.
//!
//! Every export is `#[napi(catch_unwind)]`: a panic becomes a thrown `Error` (code
//! `'GenericFailure'`) instead of aborting the process. Errors from the kernel are Node-style
//! system errors ([`error`]); descriptors are taken as an int fd or a `net.Socket`
//! ([`args`]) and every native object works on its own duplicate.
//!
//! The behaviour of each call is the core's (`lowcopy` crate, `core/`): its rustdoc gives the
//! units, errors and kernel behaviour; the doc comments here say what the JS form adds.

#![deny(clippy::undocumented_unsafe_blocks)]

mod args;
mod error;
mod peek;
mod probe;
mod rx;
mod zc;
mod sys;
pub mod testing;

pub use error::errno_name;
