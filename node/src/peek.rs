//! Offset peek: `peekAt`, `peekInto`, `consume`, `peekSupported` (one-off calls on any
//! descriptor) and the `Peeker` cursor.

use std::io::IoSliceMut;

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::args::{alloc, alloc_len, bool_opt, size, with_fd};
use crate::error::{type_error, OrThrow};

/// Options of a peek or consume.
#[napi(object)]
pub struct PeekOptions {
    /// Do not wait (`MSG_DONTWAIT`): `EAGAIN` instead of sleeping when nothing lies beyond the
    /// offset. Sockets Node created are non-blocking anyway (libuv sets `O_NONBLOCK`, which a
    /// duplicate shares), so every call on them behaves so.
    pub dont_wait: Option<bool>,
}

pub(crate) fn flags(env: &Env, options: Option<&Unknown>) -> Result<i32> {
    Ok(if bool_opt(env, options, "dontWait")? {
        libc::MSG_DONTWAIT
    } else {
        0
    })
}

/// A writable byte view of a `Buffer`/`TypedArray`/`DataView` argument (its own bytes:
/// `byteOffset` and `byteLength` are honoured, so a pooled `Buffer` slice is written only where
/// it lies), or a `TypeError`.
pub(crate) fn bytes_arg<'a>(env: &Env, v: &Unknown<'a>, name: &str) -> Result<BufferSlice<'a>> {
    let mut is_view = false;
    // SAFETY: plain N-API query on a live value of this call.
    let st = unsafe { napi::sys::napi_is_buffer(env.raw(), v.raw(), &mut is_view) };
    if st != napi::sys::Status::napi_ok || !is_view {
        return Err(type_error(
            env,
            format!(
                "The \"{name}\" argument must be an instance of Buffer, TypedArray, or DataView. \
                 Received {}",
                crate::error::describe_value(v)
            ),
        ));
    }
    // SAFETY: `v` is an ArrayBufferView (checked above); the slice lives for this call only.
    unsafe { BufferSlice::from_napi_value(env.raw(), v.raw()) }
}

/// Peeks up to `length` bytes lying `offset` bytes after the head of `fd`'s receive queue,
/// without consuming them; returns them as a new `Buffer` (empty at end of stream).
///
/// As the core's `peek_at`: `SO_PEEK_OFF` must be disabled on the socket (no live `Peeker`);
/// `EAGAIN` when nothing lies beyond `offset` and the call may not wait; `EBADF`, `ENOTSOCK`,
/// `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream), `EOVERFLOW`.
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, offset: number, length: number, options?: PeekOptions"
)]
pub fn peek_at(
    env: Env,
    fd: Unknown,
    offset: Unknown,
    length: Unknown,
    options: Option<Unknown>,
) -> Result<Buffer> {
    let offset = size(&env, &offset, "offset")?;
    let len = alloc_len(&env, &length, "length")?;
    let flags = flags(&env, options.as_ref())?;
    let mut buf = alloc(&env, len, "peekAt")?;
    let n = with_fd(&env, &fd, "peekAt", |fd| {
        lowcopy::peek_at(fd, offset, &mut [IoSliceMut::new(&mut buf)], flags).or_throw(&env, "peekAt")
    })?;
    buf.truncate(n);
    if buf.capacity() > 2 * n.max(4096) {
        buf.shrink_to_fit();
    }
    Ok(buf.into())
}

/// [`peek_at`] into the caller's `buf` (its own `byteLength` bytes at its `byteOffset`); returns
/// the bytes written, 0 at end of stream.
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, offset: number, buf: ArrayBufferView, options?: PeekOptions"
)]
pub fn peek_into(
    env: Env,
    fd: Unknown,
    offset: Unknown,
    buf: Unknown,
    options: Option<Unknown>,
) -> Result<u32> {
    let offset = size(&env, &offset, "offset")?;
    let mut b = bytes_arg(&env, &buf, "buf")?;
    let flags = flags(&env, options.as_ref())?;
    let n = with_fd(&env, &fd, "peekInto", |fd| {
        lowcopy::peek_at(fd, offset, &mut [IoSliceMut::new(&mut b)], flags)
            .or_throw(&env, "peekInto")
    })?;
    Ok(n as u32)
}

/// Drops up to `n` bytes from the head of `fd`'s receive queue (TCP: without copying them);
/// returns the bytes dropped, 0 at end of stream or for `n` 0. As the core's `consume`.
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, n: number, options?: PeekOptions"
)]
pub fn consume(env: Env, fd: Unknown, n: Unknown, options: Option<Unknown>) -> Result<f64> {
    let n = size(&env, &n, "n")?;
    let flags = flags(&env, options.as_ref())?;
    let r = with_fd(&env, &fd, "consume", |fd| {
        lowcopy::consume(fd, n, flags).or_throw(&env, "consume")
    })?;
    Ok(r as f64)
}

/// Whether `SO_PEEK_OFF` works on this stream socket (leaves its value unchanged).
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream).
#[napi(
    catch_unwind,
    ts_args_type = "fd: number | import('node:net').Socket | { fd: number }"
)]
pub fn peek_supported(env: Env, fd: Unknown) -> Result<bool> {
    with_fd(&env, &fd, "peekSupported", |fd| {
        lowcopy::peek_supported(fd).or_throw(&env, "peekSupported")
    })
}

