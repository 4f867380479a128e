//! `probe()`: what the running kernel offers.

use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

use crate::error::OrThrow;

// `Caps` and its `From<&lowcopy::Caps>`, made by build.rs from the core struct's definition
// (its fields and their docs, written once, in core).
include!(concat!(env!("OUT_DIR"), "/caps.rs"));

/// Probes the running kernel (a few throwaway sockets, one loopback connection and one
/// io_uring instance; well under a millisecond). Throws only when no socket at all can be
/// created (`EMFILE`, ...).
#[napi(catch_unwind)]
pub fn probe(env: Env) -> napi::Result<Caps> {
    let c = lowcopy::probe().or_throw(&env, "probe")?;
    Ok((&c).into())
}

/// The errno name Node uses for `errno` (positive or negative): `errnoName(11) === 'EAGAIN'`.
#[napi(catch_unwind, ts_args_type = "errno: number")]
pub fn errno_name(env: Env, errno: Unknown) -> napi::Result<String> {
    let errno = crate::args::int32(&env, &errno, "errno")?;
    let n = i32::try_from(errno.unsigned_abs()).unwrap_or(i32::MAX);
    Ok(crate::error::errno_name(n).to_string())
}
