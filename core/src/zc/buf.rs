//! Buffers a zerocopy send owns until its completion.
//!
//! A zerocopy send lets the kernel read the caller's pages after the call returns, until the
//! send's completion; whatever the program writes there before then goes on the wire, and
//! memory freed and reused by the allocator would put other data (heap contents, pointers) on
//! the wire. So the safe send calls take the buffer by value and give it back only with its
//! completion ([`ZeroCopySender::reap_with`](super::ZeroCopySender::reap_with)), as
//! completion-based I/O does elsewhere (tokio-uring, compio's `send_zerocopy`); borrowing
//! forms are `unsafe fn`s.

use std::fmt;
use std::io;
use std::ops::{Bound, Deref, RangeBounds};
use std::rc::Rc;
use std::sync::Arc;

/// Bytes that stay where they are, unchanged, for as long as the value lives.
///
/// A [`ZeroCopySender`](super::ZeroCopySender) holds the value from the send until the send's
/// completion is reaped, and the kernel reads [`ZcBuf::as_bytes`] until then. Implemented for
/// `Vec<u8>`, `Box<[u8]>`, `String`, `Box<str>`, `Arc<[u8]>`, `Arc<Vec<u8>>`, `Arc<str>`,
/// `&'static [u8]`, `&'static str` and [`Slice`] of any of these; a buffer pool implements it
/// for its own handle type (whose `Drop` returns the buffer to the pool).
///
/// # Safety
/// For as long as the value lives, moved or not, `as_bytes` must return the same address and
/// length every time, and nothing may change those bytes except through `&mut self` (which
/// lowcopy never takes while a send holds the value). A heap allocation the value owns or
/// shares immutably qualifies; an array stored inline in the value (which moves with it), or
/// bytes behind a `Cell`, a lock or a raw pointer that others write through, do not.
pub unsafe trait ZcBuf: 'static {
    /// The bytes to send.
    fn as_bytes(&self) -> &[u8];
}

// SAFETY: a Vec's heap buffer does not move when the Vec moves, and only `&mut Vec` changes it.
unsafe impl ZcBuf for Vec<u8> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: as Vec<u8>: the boxed slice lives on the heap, changed only through `&mut`.
unsafe impl ZcBuf for Box<[u8]> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: a String is a Vec<u8>.
unsafe impl ZcBuf for String {
    fn as_bytes(&self) -> &[u8] {
        str::as_bytes(self)
    }
}

// SAFETY: as Box<[u8]>.
unsafe impl ZcBuf for Box<str> {
    fn as_bytes(&self) -> &[u8] {
        str::as_bytes(self)
    }
}

// SAFETY: an Arc's allocation never moves, and its contents are shared immutably (get_mut
// needs the only reference, which the sender's copy denies while it holds it).
unsafe impl ZcBuf for Arc<[u8]> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: as Arc<[u8]>: the Vec inside cannot be changed while the Arc is shared.
unsafe impl ZcBuf for Arc<Vec<u8>> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: as Arc<[u8]>.
unsafe impl ZcBuf for Arc<str> {
    fn as_bytes(&self) -> &[u8] {
        str::as_bytes(self)
    }
}

// SAFETY: 'static data is never freed; shared references never change it.
unsafe impl ZcBuf for &'static [u8] {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: as &'static [u8].
unsafe impl ZcBuf for &'static str {
    fn as_bytes(&self) -> &[u8] {
        str::as_bytes(self)
    }
}

// An Rc is not Send, but a sender is not required to be either; the allocation is as stable
// as an Arc's.
// SAFETY: as Arc<[u8]>.
unsafe impl ZcBuf for Rc<[u8]> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

#[cfg(feature = "bytes")]
// SAFETY: `Bytes` points at immutable shared (or static) storage that does not move.
unsafe impl ZcBuf for bytes::Bytes {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

/// A range of a [`ZcBuf`]: to send part of a buffer (the rest of a stream send that went part
/// way, a header cut from a larger block) while the sender holds the whole of it.
///
/// ```
/// use std::sync::Arc;
/// use lowcopy::zc::{Slice, ZcBuf};
///
/// let block: Arc<[u8]> = Arc::from(&b"header:payload"[..]);
/// let rest = Slice::new(block.clone(), 7..);
/// assert_eq!(rest.as_bytes(), b"payload");
/// assert!(Arc::ptr_eq(rest.get_ref(), &block));
/// ```
#[derive(Clone)]
pub struct Slice<B> {
    buf: B,
    begin: usize,
    end: usize,
}

impl<B: ZcBuf> Slice<B> {
    /// The bytes of `buf` in `range`.
    ///
    /// # Panics
    /// If `range` is out of `buf`'s bounds or decreasing, as slicing would.
    pub fn new(buf: B, range: impl RangeBounds<usize>) -> Self {
        let len = buf.as_bytes().len();
        let begin = match range.start_bound() {
            Bound::Included(&b) => b,
            Bound::Excluded(&b) => b.checked_add(1).expect("range start overflows"),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1).expect("range end overflows"),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => len,
        };
        assert!(
            begin <= end && end <= len,
            "range {begin}..{end} out of a buffer of {len} bytes"
        );
        Slice { buf, begin, end }
    }

    /// The whole buffer.
    pub fn get_ref(&self) -> &B {
        &self.buf
    }

    /// The whole buffer, given back.
    pub fn into_inner(self) -> B {
        self.buf
    }

    /// Where the range starts and ends in the buffer.
    pub fn bounds(&self) -> (usize, usize) {
        (self.begin, self.end)
    }
}

// SAFETY: a fixed range of a buffer that keeps its bytes in place.
unsafe impl<B: ZcBuf> ZcBuf for Slice<B> {
    fn as_bytes(&self) -> &[u8] {
        &self.buf.as_bytes()[self.begin..self.end]
    }
}

impl<B> fmt::Debug for Slice<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slice")
            .field("begin", &self.begin)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// What a send owned, handed back with its completion: one buffer, or the buffers of a
/// vectored send in their order.
#[derive(Debug, PartialEq, Eq)]
pub enum Owned<B> {
    /// From [`send`](super::ZeroCopySender::send), [`send_msg`](super::ZeroCopySender::send_msg),
    /// [`send_reap`](super::ZeroCopySender::send_reap).
    One(B),
    /// From [`send_vectored`](super::ZeroCopySender::send_vectored).
    Many(Vec<B>),
}

impl<B> Owned<B> {
    /// The buffers, in their order.
    pub fn into_vec(self) -> Vec<B> {
        match self {
            Owned::One(b) => vec![b],
            Owned::Many(v) => v,
        }
    }
}

/// A failed owned send: the error, and the buffer given back (the kernel took none of it).
///
/// Derefs to the [`io::Error`] (`e.raw_os_error()`), and converts into it, so `?` works in a
/// function returning `io::Result`.
pub struct SendError<B> {
    error: io::Error,
    buf: B,
}

impl<B> SendError<B> {
    pub(crate) fn new(error: io::Error, buf: B) -> Self {
        SendError { error, buf }
    }

    /// The error.
    pub fn error(&self) -> &io::Error {
        &self.error
    }

    /// The buffer, given back.
    pub fn into_buf(self) -> B {
        self.buf
    }

    /// The error and the buffer.
    pub fn into_parts(self) -> (io::Error, B) {
        (self.error, self.buf)
    }
}

impl<B> Deref for SendError<B> {
    type Target = io::Error;
    fn deref(&self) -> &io::Error {
        &self.error
    }
}

impl<B> From<SendError<B>> for io::Error {
    fn from(e: SendError<B>) -> io::Error {
        e.error
    }
}

impl<B> fmt::Debug for SendError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<B> fmt::Display for SendError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<B> std::error::Error for SendError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
