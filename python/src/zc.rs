//! `ZeroCopySender`: zerocopy sends whose buffers stay pinned until their completion.
//!
//! Every send passes a binding-made token as the core's `user_data`; the token indexes a
//! slab entry holding the caller's `user_data` object and the send's buffers (a `bytes`
//! reference, or a buffer export that keeps a `bytearray`/`array`/mmap from being resized
//! or closed). A completion maps back through the token; its entry is released there, on
//! the thread that reaps (attached), never on another thread.
//!
//! A sender closed (or collected) with sends in flight does not free what the kernel may
//! still read: it moves, with its descriptor and entries, to a list of closing senders that
//! later sender calls on any thread (`ZeroCopySender(...)`, `reap`, `wait`, `close`) drain
//! without blocking; each is dropped once its last completion came.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

use crate::completion;
use crate::util::{
    blocking, deadline_of, dup_of, flags_of, guard, left, record, timeout_of, zc_backend, Handle,
    IoResultExt, ReadBuf, ViewSlot,
};
use lowcopy::zc::Completion as CoreCompletion;

record! {
    /// Counters of a `ZeroCopySender`. Byte counts in bytes.
    ZcStats from lowcopy::ZcStats {
        // doc-copy: zc_stats.sends
        /// Send calls that returned > 0.
        // doc-end
        sends,
        // doc-copy: zc_stats.bytes
        /// Bytes those sends accepted.
        // doc-end
        bytes,
        // doc-copy: zc_stats.zerocopy_sends
        /// Kernel sends that asked for zerocopy (`MSG_ZEROCOPY` or SEND_ZC).
        // doc-end
        zerocopy_sends,
        // doc-copy: zc_stats.copy_sends
        /// Kernel sends that copied (copy backend, fallbacks, adaptive mode).
        // doc-end
        copy_sends,
        // doc-copy: zc_stats.completions
        /// Completions handed to the caller.
        // doc-end
        completions,
        // doc-copy: zc_stats.completions_copied
        /// Of those, completions with the `COPIED` flag.
        // doc-end
        completions_copied,
        // doc-copy: zc_stats.enobufs
        /// `ENOBUFS` from error-queue zerocopy sends (optmem or locked-pages limit) and `ENOMEM`
        /// from io_uring ones (`RLIMIT_MEMLOCK`, for a thread without `CAP_IPC_LOCK`), each
        /// answered by a retry and then a copy; never returned to the caller.
        // doc-end
        enobufs,
        // doc-copy: zc_stats.window_full
        /// Sends that fell back to a copy because the id window was full (twice the sender's limit
        /// of requests held in flight: 8192 ids by default).
        // doc-end
        window_full,
        // doc-copy: zc_stats.syscalls_send
        /// Syscalls made to send (sendmsg, io_uring_enter for a send).
        // doc-end
        syscalls_send,
        // doc-copy: zc_stats.syscalls_reap
        /// Syscalls made to collect completions (error-queue reads, waits).
        // doc-end
        syscalls_reap,
        // doc-copy: zc_stats.errqueue_other
        /// Error-queue entries that were not zerocopy notifications (timestamps, ICMP): read and
        /// dropped.
        // doc-end
        errqueue_other,
        // doc-copy: zc_stats.unexpected_ids
        /// Notified ids that matched no send in flight: ignored.
        // doc-end
        unexpected_ids,
        // doc-copy: zc_stats.zerocopy_off
        /// 1 while the adaptive option has stopped asking for zerocopy (it asks again after 4,096
        /// plain copies).
        // doc-end
        zerocopy_off,
        // doc-copy: zc_stats.close_completed
        /// Completions that closing the sender took in (ready ones and those that arrived while it
        /// waited); see the close policy.
        // doc-end
        close_completed,
        // doc-copy: zc_stats.close_resets
        /// 1 when closing reset the connection because completions did not come in time.
        // doc-end
        close_resets,
        // doc-copy: zc_stats.close_abandoned
        /// Sends still in flight when closing gave up waiting: their memory stays in use by the
        /// kernel (an owned buffer is leaked, never freed; a borrowed one must stay valid for
        /// ever).
        // doc-end
        close_abandoned,
    }
}

/// What a send pins until its completion.
enum Pins {
    One(ReadBuf),
    Many(Vec<ReadBuf>),
}

impl Pins {
    fn release(self, py: Python<'_>, spare: &mut Vec<ViewSlot>) {
        match self {
            Pins::One(b) => b.release(py, spare),
            Pins::Many(v) => v.into_iter().for_each(|b| b.release(py, spare)),
        }
    }
}

struct Entry {
    user_data: Py<PyAny>,
    pins: Pins,
}

/// In-flight sends by token: `slot index | generation << 32` (a token is never reused while
/// its completion could still arrive).
#[derive(Default)]
struct Slab {
    slots: Vec<(u32, Option<Entry>)>,
    free: Vec<u32>,
}

impl Slab {
    fn insert(&mut self, e: Entry) -> u64 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[i as usize];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(e);
        (u64::from(slot.0) << 32) | u64::from(i)
    }

    fn remove(&mut self, token: u64) -> Option<Entry> {
        let (i, gen) = ((token & 0xffff_ffff) as usize, (token >> 32) as u32);
        let slot = self.slots.get_mut(i)?;
        if slot.0 != gen || slot.1.is_none() {
            return None;
        }
        self.free.push(i as u32);
        slot.1.take()
    }
}

struct Sender {
    zc: lowcopy::ZeroCopySender<OwnedFd>,
    slab: Slab,
    out: Vec<CoreCompletion>,
    /// Export slots of released buffers, reused by the next sends (no allocation per send).
    spare: Vec<ViewSlot>,
}

/// Completions handed out per core reap call.
const REAP_BATCH: usize = 64;

impl Sender {
    /// Maps core completions back to Python ones, releasing their pins here.
    fn convert(&mut self, py: Python<'_>, n: usize, into: &mut Vec<Py<PyAny>>) -> PyResult<()> {
        for c in &self.out[..n] {
            let Some(e) = self.slab.remove(c.user_data) else {
                // Cannot happen: every token sent is in the slab until its completion.
                continue;
            };
            e.pins.release(py, &mut self.spare);
            into.push(completion::new(py, e.user_data, c.result, c.flags)?);
        }
        Ok(())
    }

    /// The first `n` core completions as a new list of Python ones, releasing their pins
    /// (`send_reap`'s: no intermediate vector). If a completion cannot be made (memory), the
    /// rest are still released, and the error is returned.
    fn completion_list<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyList>> {
        // SAFETY: PyList_New returns a new reference (or NULL with an exception set); its
        // items start NULL, each set at most once below (PyList_SetItem steals the reference).
        let list = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyList_New(n as ffi::Py_ssize_t))?
                .cast_into_unchecked::<PyList>()
        };
        let mut filled = 0;
        let mut err = None;
        for c in &self.out[..n] {
            let Some(e) = self.slab.remove(c.user_data) else {
                continue; // cannot happen: every token sent is in the slab until reaped
            };
            e.pins.release(py, &mut self.spare);
            if err.is_some() {
                continue;
            }
            match completion::new(py, e.user_data, c.result, c.flags) {
                Ok(obj) => {
                    // SAFETY: `filled < n`, an index of the list not set yet.
                    unsafe { ffi::PyList_SetItem(list.as_ptr(), filled, obj.into_ptr()) };
                    filled += 1;
                }
                Err(e) => err = Some(e),
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        if (filled as usize) < n {
            list.del_slice(filled as usize, n)?;
        }
        Ok(list)
    }

    /// Writes the first `n` core completions into `out[1..]` as (user_data, result, flags)
    /// triples and `n` into `out[0]`, releasing their pins; a user_data that is not an int of
    /// 64 bits is written as -1.
    fn completions_into(&mut self, py: Python<'_>, n: usize, out: &mut [i64]) {
        let mut k = 0;
        for c in &self.out[..n] {
            let Some(e) = self.slab.remove(c.user_data) else {
                continue; // cannot happen: every token sent is in the slab until reaped
            };
            e.pins.release(py, &mut self.spare);
            // SAFETY: attached; a failed conversion's error is cleared (-1 stands for it).
            let ud = unsafe {
                let x = ffi::PyLong_AsLongLong(e.user_data.as_ptr());
                if x == -1 && !ffi::PyErr_Occurred().is_null() {
                    ffi::PyErr_Clear();
                }
                x
            };
            out[1 + 3 * k] = ud;
            out[2 + 3 * k] = c.result;
            out[3 + 3 * k] = i64::from(c.flags);
            k += 1;
        }
        out[0] = k as i64;
    }

    /// Every completion ready now. An error after some were taken is left for the next
    /// call (it recurs), so none is lost.
    fn reap_all(&mut self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let mut got = Vec::new();
        loop {
            let n = match self.zc.reap(&mut self.out) {
                Ok(n) => n,
                Err(_) if !got.is_empty() => return Ok(got),
                Err(e) => return Err(crate::util::os_error(e)),
            };
            self.convert(py, n, &mut got)?;
            if n < self.out.len() {
                return Ok(got);
            }
        }
    }

    /// `send_many`'s work: pins every buffer (a wrong one fails the call before anything is
    /// sent), sends them one by one in order, each with its own entry, stopping at the first
    /// error or short send, and collects the completions ready as `send_reap` does. Returns
    /// (sends made, bytes accepted, completions); an error only when the first send failed.
    fn send_many<'py>(
        &mut self,
        py: Python<'py>,
        bufs: &Bound<'py, PyTuple>,
        uds: Option<&Bound<'py, PyTuple>>,
        flags: lowcopy::Flags,
    ) -> PyResult<(usize, usize, Bound<'py, PyList>)> {
        let n = bufs.len();
        let mut pins = Vec::with_capacity(n);
        for b in bufs.iter() {
            match ReadBuf::get(&b, &mut self.spare) {
                Ok(p) => pins.push(p),
                Err(e) => {
                    pins.into_iter()
                        .for_each(|p| p.release(py, &mut self.spare));
                    return Err(e);
                }
            }
        }
        let iovs: Vec<libc::iovec> = pins.iter().map(|p| p.iovec(py)).collect();
        let mut tokens = Vec::with_capacity(n);
        for (i, p) in pins.into_iter().enumerate() {
            let user_data = match uds {
                // A tuple as long as `bufs` (checked by the caller): never out of range.
                Some(u) => u.get_item(i).map_or_else(|_| py.None(), Bound::unbind),
                None => py.None(),
            };
            tokens.push(self.slab.insert(Entry {
                user_data,
                pins: Pins::One(p),
            }));
        }
        // Room for every completion this call can collect: those of earlier sends and one
        // per send of the batch (a full `out` would stop the collecting).
        if self.out.len() < n + REAP_BATCH {
            self.out.resize(n + REAP_BATCH, CoreCompletion::default());
        }
        let r = {
            let iov = PinnedIov(&iovs);
            let (toks, zc, out) = (&tokens[..], &mut self.zc, &mut self.out[..]);
            // SAFETY: each iovec describes a buffer pinned in the slab entry of its token until
            // its completion is reaped (or kept for ever if the close policy abandons it).
            let mut run = || unsafe { zc.send_batch_raw(iov.get(), toks, flags, out) };
            // Non-blocking sends return at once: the GIL stays held. (The batch fails only when
            // its first send did, so running it again after EINTR sends nothing twice.)
            if flags.dontwait() {
                run().py()
            } else {
                blocking(py, &mut run)
            }
        };
        let (sent, bytes, got) = match &r {
            Ok(b) => (b.sends, b.bytes, b.completions),
            Err(_) => (0, 0, 0),
        };
        // Entries of buffers not sent, and of zero-byte sends: no completion comes for them.
        for (i, &t) in tokens.iter().enumerate() {
            if !r.as_ref().is_ok_and(|b| b.completes(i, iovs[i].iov_len)) {
                if let Some(e) = self.slab.remove(t) {
                    e.pins.release(py, &mut self.spare);
                }
            }
        }
        r?;
        let list = self.completion_list(py, got)?;
        Ok((sent, bytes, list))
    }
}

/// Closes `s` by core's close policy (waiting up to `timeout`, None: the sender's own, with the
/// GIL released), releasing the pins of the sends that completed. What is left in the slab
/// then was abandoned: the kernel may read those buffers for ever, so their pins are never
/// released (leaked on purpose).
fn close_sender(
    py: Python<'_>,
    s: Sender,
    timeout: Option<std::time::Duration>,
) -> lowcopy::ZcStats {
    let Sender {
        zc,
        mut slab,
        mut spare,
        ..
    } = s;
    let t = timeout.unwrap_or(zc.close_timeout());
    let mut done = Vec::new();
    let st = py.detach(|| zc.close_with(t, |c, _| done.push(c.user_data)));
    for token in done {
        if let Some(e) = slab.remove(token) {
            e.pins.release(py, &mut spare);
        }
    }
    std::mem::forget(slab);
    st
}

/// Send flags: `MSG_DONTWAIT`, `MSG_MORE`; `MSG_NOSIGNAL` is accepted and always applied (a
/// library never raises SIGPIPE: `BrokenPipeError` instead); other bits are `EINVAL`.
fn send_flags(raw: i32) -> PyResult<lowcopy::Flags> {
    flags_of(raw & !libc::MSG_NOSIGNAL)
}

/// A socket address from a Python address tuple: `(host, port)` for IPv4,
/// `(host, port[, flowinfo[, scope_id]])` for IPv6; `host` an IP literal or a name resolved
/// with `socket.getaddrinfo`.
fn address_of(a: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    let t = a
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err("address must be a tuple (host, port)"))?;
    if t.len() < 2 || t.len() > 4 {
        return Err(PyTypeError::new_err("address must be a tuple (host, port)"));
    }
    let host_obj = t.get_item(0)?;
    let host: String = host_obj
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("address host must be a str"))?
        .to_string();
    let port: u16 = t
        .get_item(1)?
        .extract()
        .map_err(|_| PyValueError::new_err("port must be 0-65535"))?;
    let ip: IpAddr = match host.parse() {
        Ok(ip) => ip,
        Err(_) => {
            let socket = a.py().import("socket")?;
            let infos = socket.call_method1("getaddrinfo", (host.as_str(), port))?;
            let first = infos
                .try_iter()?
                .next()
                .ok_or_else(|| PyValueError::new_err("host did not resolve"))??;
            let sa = first.get_item(4)?;
            sa.get_item(0)?.extract::<String>()?.parse().map_err(|_| {
                PyValueError::new_err("getaddrinfo returned an address that is not IP")
            })?
        }
    };
    Ok(match ip {
        IpAddr::V4(v4) => SocketAddr::from((v4, port)),
        IpAddr::V6(v6) => {
            let flow: u32 = if t.len() > 2 {
                t.get_item(2)?.extract()?
            } else {
                0
            };
            let scope: u32 = if t.len() > 3 {
                t.get_item(3)?.extract()?
            } else {
                0
            };
            SocketAddr::V6(std::net::SocketAddrV6::new(v6, port, flow, scope))
        }
    })
}

/// Iovecs over pinned buffers, for a detached closure.
#[derive(Clone, Copy)]
struct PinnedIov<'a>(&'a [libc::iovec]);
// SAFETY: the iovecs point at buffers pinned in the slab until the send's completion; only
// the calling thread's kernel call reads them.
unsafe impl Send for PinnedIov<'_> {}
// SAFETY: as above.
unsafe impl Sync for PinnedIov<'_> {}

impl<'a> PinnedIov<'a> {
    fn get(self) -> &'a [libc::iovec] {
        self.0
    }
}

/// Zerocopy sends over one socket: every send's buffer stays alive and un-resizable until
/// its completion is reaped, and the completion hands back the send's `user_data` object.
///
// doc-copy: zc.buffers
/// The memory of a send must stay allocated and unmodified until its completion is reaped: the
/// kernel may read it until then (a zerocopy send pins the pages and transmits from them, also when
/// TCP retransmits), so whatever the program writes there goes on the wire, and memory freed and
/// reused carries other data (heap contents, pointers) to the peer. A completion means "the buffer
/// may be reused", not "the data was delivered": TCP notifies only after the peer acknowledged, so
/// never block a send on completions.
// doc-end
///
/// Works on its own duplicate of the socket's descriptor.
// doc-copy: zc.one_per_socket
/// Create one sender per socket, before any other `MSG_ZEROCOPY` send on it, and keep it for the
/// socket's life: the kernel's id counter cannot be read back, so on the error queue a second
/// sender on the same socket (beside the first, after it was closed, or in a forked child) would
/// number its sends from 0 while the kernel goes on from where the first left off, and take the
/// first sender's notifications for its own: a completion could hand a buffer back before the
/// kernel sent it. So an error-queue sender is refused (`EBUSY`) on a socket whose `SO_ZEROCOPY` is
/// set already, and AUTO picks io_uring or copies there; the io_uring backend has no such counter.
// doc-end
/// Not for use by two threads at once (`RuntimeError`); the io_uring backend belongs to the
/// first thread that sends (`EEXIST` elsewhere).
#[pyclass(frozen, module = "lowcopy._lowcopy")]
pub struct ZeroCopySender {
    h: Handle<Sender>,
}

/// What a send pins: one buffer (exported under the sender's lock, into one of its spare
/// export slots) or several already exported.
enum Data<'a, 'py> {
    One(&'a Bound<'py, PyAny>),
    Many(Vec<ReadBuf>),
}

impl ZeroCopySender {
    /// Pins `data` and sends it with the token of a new slab entry; on failure or a
    /// zero-byte send (no completion follows) the entry is released at once. With `reap`,
    /// also returns the completions ready now (`send_reap`), as a new list.
    fn send_pinned<'py>(
        &self,
        py: Python<'py>,
        data: Data<'_, 'py>,
        user_data: Py<PyAny>,
        flags: lowcopy::Flags,
        addr: Option<SocketAddr>,
        reap: Reap<'_>,
    ) -> PyResult<(usize, Option<Bound<'py, PyList>>)> {
        // How many completions the core may hand back: all it has room for, or what `out`
        // holds.
        let room = match &reap {
            Reap::Into(o) => out_room(o),
            _ => usize::MAX,
        };
        self.h.with(|s| {
            let pins = match data {
                Data::One(obj) => Pins::One(ReadBuf::get(obj, &mut s.spare)?),
                Data::Many(v) => Pins::Many(v),
            };
            // One buffer (every send_reap): its iovec on the stack, no allocation.
            let one: [libc::iovec; 1];
            let many: Vec<libc::iovec>;
            let iov: &[libc::iovec] = match &pins {
                Pins::One(b) => {
                    one = [b.iovec(py)];
                    &one
                }
                Pins::Many(v) => {
                    many = v.iter().map(|b| b.iovec(py)).collect();
                    &many
                }
            };
            let token = s.slab.insert(Entry { user_data, pins });
            let iov = PinnedIov(iov);
            let zc = &mut s.zc;
            let room = room.min(s.out.len());
            let out = &mut s.out[..room];
            let want = !matches!(reap, Reap::No);
            let mut call = || -> io::Result<(usize, usize)> {
                // SAFETY: the iovecs describe buffers pinned in the slab entry `token` until
                // its completion is reaped (or the sender is retired with it).
                unsafe {
                    match (addr, want) {
                        (Some(a), _) => zc
                            .send_raw_to(iov.get(), Some(&a), flags, token)
                            .map(|n| (n, 0)),
                        (None, true) => zc.send_reap_raw(iov.get(), flags, token, out),
                        (None, false) => zc.send_raw(iov.get(), flags, token).map(|n| (n, 0)),
                    }
                }
            };
            // A non-blocking send returns at once: the GIL stays held.
            let r = if flags.dontwait() {
                call().py()
            } else {
                blocking(py, &mut call)
            };
            match r {
                Ok((n, k)) => {
                    if n == 0 {
                        if let Some(e) = s.slab.remove(token) {
                            e.pins.release(py, &mut s.spare);
                        }
                    }
                    let got = match reap {
                        Reap::List => Some(s.completion_list(py, k)?),
                        Reap::Into(o) => {
                            s.completions_into(py, k, o);
                            None
                        }
                        Reap::No => None,
                    };
                    Ok((n, got))
                }
                Err(e) => {
                    if let Some(e) = s.slab.remove(token) {
                        e.pins.release(py, &mut s.spare);
                    }
                    Err(e)
                }
            }
        })
    }
}

/// Where a send's ready completions go.
enum Reap<'a> {
    No,
    /// A new list of `Completion`s.
    List,
    /// Into a caller's int64 buffer (`out_i64`).
    Into(&'a mut [i64]),
}

/// The completions an `out` buffer holds: `out[0]` the count, then a triple each.
fn out_room(out: &[i64]) -> usize {
    (out.len() - 1) / 3
}

/// Runs `f` on the elements of `obj`, a writable C-contiguous buffer of int64 (`array('q')`,
/// a `memoryview` cast to `'q'`, ...) of at least 4, exported for the call alone (on the
/// stack: no allocation).
fn with_out_i64<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&mut [i64]) -> PyResult<R>,
) -> PyResult<R> {
    let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
    // SAFETY: `view` is room for one export, released below before it goes out of scope.
    let rc = unsafe {
        ffi::PyObject_GetBuffer(
            obj.as_ptr(),
            view.as_mut_ptr(),
            ffi::PyBUF_WRITABLE | ffi::PyBUF_FORMAT | ffi::PyBUF_C_CONTIGUOUS,
        )
    };
    let bad = || {
        let name = crate::util::type_name(obj);
        PyTypeError::new_err(format!(
            "out must be a writable buffer of int64 ('q'), such as array.array('q', ...), not '{name}'"
        ))
    };
    if rc != 0 {
        // SAFETY: attached; the error GetBuffer set is replaced by ours.
        unsafe { ffi::PyErr_Clear() };
        return Err(bad());
    }
    // SAFETY: GetBuffer filled the view.
    let v = unsafe { view.assume_init_mut() };
    let fmt = if v.format.is_null() {
        b"B".as_slice()
    } else {
        // SAFETY: a NUL-terminated format string of the export.
        unsafe { std::ffi::CStr::from_ptr(v.format) }.to_bytes()
    };
    let fmt = fmt
        .strip_prefix(b"@")
        .or(fmt.strip_prefix(b"="))
        .or(fmt.strip_prefix(b"<"))
        .unwrap_or(fmt);
    let r = if v.itemsize != 8 || !(fmt == b"q" || fmt == b"l") {
        Err(bad())
    } else if v.len < 32 {
        Err(PyValueError::new_err(format!(
            "out must hold at least 4 int64 (one completion), it holds {}",
            v.len / 8
        )))
    } else {
        // SAFETY: a writable, C-contiguous export of `len` bytes of int64, aligned (its
        // format is a native 'q'), alive until released below; attached, so no Python code
        // touches it meanwhile.
        f(unsafe { std::slice::from_raw_parts_mut(v.buf.cast::<i64>(), v.len as usize / 8) })
    };
    // SAFETY: the export made above, released once.
    unsafe { ffi::PyBuffer_Release(v) };
    r
}

/// `obj` as a tuple: itself, a list's copy, or an iterable's items; `TypeError` for what
/// is not iterable.
fn tuple_of<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyTuple>> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Ok(t.clone());
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return Ok(l.to_tuple());
    }
    let it = obj.try_iter().map_err(|_| {
        let name = crate::util::type_name(obj);
        PyTypeError::new_err(format!("{what} must be iterable, not '{name}'"))
    })?;
    let items = it.collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(obj.py(), items)
}

/// `(n, list)` as a new tuple.
fn pair<'py>(py: Python<'py>, n: usize, list: Bound<'py, PyList>) -> PyResult<Bound<'py, PyTuple>> {
    let n = n.into_pyobject(py)?;
    // SAFETY: PyTuple_New returns a new reference (or NULL with an exception set); each of
    // its two items is set once, with a reference it steals.
    unsafe {
        let t = Bound::from_owned_ptr_or_err(py, ffi::PyTuple_New(2))?;
        ffi::PyTuple_SetItem(t.as_ptr(), 0, n.into_ptr());
        ffi::PyTuple_SetItem(t.as_ptr(), 1, list.into_ptr());
        Ok(t.cast_into_unchecked::<PyTuple>())
    }
}

#[pymethods]
impl ZeroCopySender {
    /// Makes a sender over a duplicate of `sock`'s descriptor with `backend` (`ZcBackend`).
    ///
    /// `ERRQUEUE`:
    // doc-copy: zc_backend.errqueue
    /// `SO_ZEROCOPY` + `MSG_ZEROCOPY` (TCP since Linux 4.14, UDP since 5.0); completions read from
    /// `MSG_ERRQUEUE` and mapped from the kernel's 32-bit id ranges back to user_data. The sender
    /// owns the socket's error queue: other entries on it (ICMP errors with `IP_RECVERR`,
    /// `SO_TIMESTAMPING` reports) are read, counted in `errqueue_other` and dropped, and reading an
    /// ICMP entry also clears the `SO_ERROR` it set (net/core/skbuff.c `sock_dequeue_err_skb`). An
    /// application that needs those entries should use io_uring, whose notifications do not go
    /// through the error queue.
    // doc-end
    ///
    /// `IO_URING`:
    // doc-copy: zc_backend.iouring
    /// io_uring `IORING_OP_SEND_ZC` (Linux 6.0) / `SENDMSG_ZC` (6.1); user_data comes back in the
    /// notification CQE. One ring per thread serves every sender used on that thread (8192
    /// completion entries, made with the thread's first sender, kept until the thread exits): a
    /// sender owns no descriptor. The ring is set up with `IORING_SETUP_DEFER_TASKRUN` (6.1) so
    /// that notifications never interrupt the thread's other syscalls with `EINTR`; they are posted
    /// during the next send (no syscall of their own). Its price, `SINGLE_ISSUER`: a sender belongs
    /// to the first thread that sends on it, waits on it or asks for its completion descriptor (it
    /// joins that thread's ring), and calls from any other thread fail with `EEXIST`.
    // doc-end
    ///
    /// `adaptive=True`:
    // doc-copy: zc_options.adaptive
    /// Stop asking for zerocopy after 16 consecutive completions that the kernel copied anyway
    /// (loopback, veth, devices without scatter-gather), the way msg_zerocopy.rst suggests: a
    /// copied "zerocopy" send costs more than a plain copy. Sends in flight are still reaped; later
    /// sends are plain copies whose completion is ready at once, flagged copied and fallback. After
    /// 4,096 such copies zerocopy is asked for again (the path may have changed), and the next 16
    /// completions decide anew: on a path that copies, 16 copied "zerocopy" sends in every 4,112.
    // doc-end
    ///
    /// Allocates everything the data path needs.
    // doc-copy: zc_new.kernel
    /// An io_uring sender (explicit, or picked by AUTO) makes sure the calling thread has its ring
    /// (made on the thread's first sender, kept until the thread exits) but joins a ring only at
    /// its first use. The error-queue backend sets `SO_ZEROCOPY` on the socket (left set
    /// afterwards; it only matters to `MSG_ZEROCOPY` sends), after a `getsockopt` that finds it
    /// unset.
    // doc-end
    ///
    /// Errors: `ValueError` for a backend that is not a `ZcBackend`; `OSError`:
    // doc-copy: zc_new.errors
    /// `EBADF`, `ENOTSOCK`, `ENOTCONN` (a listening socket: one `getsockopt(SO_ACCEPTCONN)` tells,
    /// on stream and seqpacket sockets), `EOPNOTSUPP` (an explicit zerocopy backend on a socket
    /// that has none: AF_UNIX, MPTCP, raw, packet; or io_uring without SEND_ZC), io_uring setup
    /// errors for an explicit io_uring backend when the calling thread has no ring yet (`EPERM`
    /// when `kernel.io_uring_disabled` forbids it, `ENOSYS`, `ENOMEM`, `EMFILE`), `EBUSY` (an
    /// explicit error-queue backend on a socket whose `SO_ZEROCOPY` is set already: see the
    /// sender's one-per-socket rule).
    // doc-end
    #[new]
    #[pyo3(signature = (sock, backend = 0, *, adaptive = false))]
    fn new(
        py: Python<'_>,
        sock: &Bound<'_, PyAny>,
        backend: u32,
        adaptive: bool,
    ) -> PyResult<Self> {
        guard(|| {
            let b = lowcopy::ZcBackend::try_from(backend)
                .map_err(|_| PyValueError::new_err(format!("unknown ZcBackend {backend}")))?;
            let opts = lowcopy::ZcOptions::new().backend(b).adaptive(adaptive);
            let fd = dup_of(sock)?;
            let zc = py
                .detach(|| lowcopy::ZeroCopySender::with_options(fd, opts))
                .py()?;
            Ok(ZeroCopySender {
                h: Handle::new(
                    "ZeroCopySender",
                    Sender {
                        zc,
                        slab: Slab::default(),
                        out: vec![CoreCompletion::default(); REAP_BATCH],
                        spare: Vec::new(),
                    },
                ),
            })
        })
    }

    /// Sends `data` (any C-contiguous bytes-like object) and returns the bytes accepted.
    ///
    // doc-copy: zc_send.completion
    /// Exactly one completion carrying `user_data` follows every send that returned > 0; none
    /// follows a failed or zero-byte send.
    // doc-end
    /// `user_data` is any object, returned unchanged. Until that completion is reaped the
    /// sender keeps `data` alive, and a `bytearray`, `array` or mmap cannot be resized or
    /// closed (`BufferError`).
    ///
    /// A socket with a timeout is non-blocking. The GIL is released while it may block.
    /// `flags`: `MSG_DONTWAIT`, `MSG_MORE`, `MSG_NOSIGNAL`.
    // doc-copy: zc_send.kernel
    /// `MSG_NOSIGNAL` is always added: a closed connection is `EPIPE`, never `SIGPIPE`. As
    /// `send(2)`: a blocking send on a stream socket accepts everything unless a signal or
    /// `SO_SNDTIMEO` stops it part way (then the part sent is returned: send the rest), a
    /// non-blocking one (`MSG_DONTWAIT`, or a socket with `O_NONBLOCK`) accepts what fits, a
    /// datagram is one send (a zero-length datagram too: it returns 0 and gets no completion).
    /// Never waits for a completion. The io_uring backend cancels its request on a signal
    /// (returning what went, or `EINTR`) and does not honour `SO_SNDTIMEO`; io_uring ignores
    /// `O_NONBLOCK`, so it reads the flag (one `fcntl`) where a send without `MSG_DONTWAIT` would
    /// sleep; after an `EAGAIN` it asks `poll(POLLOUT)` before queueing the next request (a failed
    /// SEND_ZC still posts a notification, which the kernel may hold until the peer acks earlier
    /// data), so retrying a full socket costs a poll and no request slot. `ENOBUFS` from a zerocopy
    /// send (optmem or locked-pages limit), and on io_uring `ENOMEM` (the pages of its sends in
    /// flight are charged to `RLIMIT_MEMLOCK` when the thread that made the ring lacks
    /// `CAP_IPC_LOCK`), is never returned: completions are collected and the send is retried once,
    /// then made by copy (its completion flagged copied and fallback).
    // doc-end
    ///
    /// Errors (`OSError`; `EAGAIN` is `BlockingIOError`, `EPIPE` `BrokenPipeError`,
    /// `ECONNRESET` `ConnectionResetError`): `EINVAL` (other flags),
    // doc-copy: zc_send.errors
    /// `EBUSY` (as many requests held as the sender's limit, 4096 by default: reap first), `ENOMEM`
    /// (the tables could not grow past the reserve), `EEXIST` (io_uring backend called from a
    /// thread other than the one the sender belongs to), `EIO` (the thread's io_uring ring was
    /// retired after it failed to take a request: every sender on it gets `EIO`; new senders get a
    /// new ring), the ring's setup errors at an io_uring sender's first send on a thread without a
    /// ring (`EMFILE`, `ENOMEM`; an AUTO sender falls back to the error queue instead), `EMSGSIZE`
    /// (more than `IOV_MAX` iovecs, or a datagram too large), and the socket's own send errors
    /// (`EAGAIN`, `EINTR`, `EPIPE`, `ECONNRESET`, `EDESTADDRREQ`, ...).
    // doc-end
    #[pyo3(signature = (data, user_data = None, flags = 0))]
    fn send(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        user_data: Option<Py<PyAny>>,
        flags: i32,
    ) -> PyResult<usize> {
        guard(|| {
            let flags = send_flags(flags)?;
            let ud = user_data.unwrap_or_else(|| py.None());
            Ok(self
                .send_pinned(py, Data::One(data), ud, flags, None, Reap::No)?
                .0)
        })
    }

    /// Sends several buffers as one send (gathered, as `socket.sendmsg`), optionally to
    /// `address` (unconnected UDP: `(host, port)`, IPv6 `(host, port, flowinfo, scope_id)`);
    /// returns the bytes accepted. One completion for the whole send; every buffer is pinned
    /// until it. At most `IOV_MAX` (1024) buffers (`EMSGSIZE`). Results and errors as
    /// `send`, plus
    // doc-copy: zc_send_msg.errors
    /// the kernel's answers to the address and control data: `EAFNOSUPPORT` (an address of the
    /// other family), `EINVAL` (an address of the wrong length, malformed control messages),
    /// `EISCONN` (an address on a connected AF_UNIX stream socket), ... A connected TCP socket
    /// ignores the address (the send goes to its peer).
    // doc-end
    #[pyo3(signature = (buffers, user_data = None, flags = 0, address = None))]
    fn sendmsg(
        &self,
        py: Python<'_>,
        buffers: &Bound<'_, PyAny>,
        user_data: Option<Py<PyAny>>,
        flags: i32,
        address: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        guard(|| {
            let flags = send_flags(flags)?;
            let addr = address.map(address_of).transpose()?;
            // Exported before the sender is locked: iterating may run Python code.
            let mut pins = Vec::new();
            let mut spare = Vec::new();
            let mut fail = None;
            for b in buffers.try_iter()? {
                match b.and_then(|b| ReadBuf::get(&b, &mut spare)) {
                    Ok(p) => pins.push(p),
                    Err(e) => {
                        fail = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = fail {
                pins.into_iter().for_each(|p| p.release(py, &mut spare));
                return Err(e);
            }
            let ud = user_data.unwrap_or_else(|| py.None());
            Ok(self
                .send_pinned(py, Data::Many(pins), ud, flags, addr, Reap::No)?
                .0)
        })
    }

    /// `send`, then the completions ready now in the same call: returns
    /// `(bytes accepted, [Completion, ...])`: the cheapest way to keep a sender loop's
    /// completions flowing.
    // doc-copy: zc_send_reap.kernel
    /// The error-queue backend reads the queue at most once per 32 sends (sooner when the tracking
    /// table runs low), so completions may come back up to 32 sends late (a reap gets them sooner);
    /// io_uring completions cost no syscall (they are posted by the sends' own `io_uring_enter`).
    // doc-end
    ///
    /// Errors:
    // doc-copy: zc_send_reap.errors
    /// As a send, and then no completion is handed out. Once the send went out its bytes are
    /// reported whatever happens next: a failure to collect completions after it is left to the
    /// next reap or wait, which meet it again.
    // doc-end
    #[pyo3(signature = (data, user_data = None, flags = 0))]
    fn send_reap(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        user_data: Option<Py<PyAny>>,
        flags: i32,
    ) -> PyResult<Py<PyTuple>> {
        guard(|| {
            let flags = send_flags(flags)?;
            let ud = user_data.unwrap_or_else(|| py.None());
            let (n, got) = self.send_pinned(py, Data::One(data), ud, flags, None, Reap::List)?;
            let got = match got {
                Some(l) => l,
                None => PyList::empty(py),
            };
            Ok(pair(py, n, got)?.unbind())
        })
    }

    /// `send_reap` without objects: `user_data` is an int (of 64 bits), and the completions
    /// that are ready are written into `out`, a writable buffer of int64 reused from call to
    /// call (`array.array('q', bytes(8 * (1 + 3 * n)))`), as `reap_into` writes them: their
    /// count in `out[0]`, then a (user_data, result, flags) triple each from `out[1]`, at most
    /// `(len(out) - 1) // 3` (the rest stay for the next call). Returns the bytes accepted, as
    /// `send`.
    ///
    /// Errors: `TypeError` for a `user_data` that is not an int or an `out` that is not a
    /// writable int64 buffer, `ValueError` for one shorter than 4; as `send_reap`.
    #[pyo3(signature = (data, user_data, out, flags = 0))]
    fn send_reap_into(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        user_data: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        flags: i32,
    ) -> PyResult<usize> {
        guard(|| {
            let flags = send_flags(flags)?;
            user_data.extract::<i64>()?;
            with_out_i64(out, |o| {
                let ud = user_data.clone().unbind();
                let (n, _) =
                    self.send_pinned(py, Data::One(data), ud, flags, None, Reap::Into(o))?;
                Ok(n)
            })
        })
    }

    /// `reap` without objects: writes the completions that are ready into `out`, a writable
    /// buffer of int64 reused from call to call: their count in `out[0]`, then a (user_data,
    /// result, flags) triple each from `out[1]`, at most `(len(out) - 1) // 3` (call again
    /// when it was full). A `user_data` that is not an int of 64 bits is written as -1 (`reap`
    /// hands such objects out). Returns the count. `flags` are the `ZcFlag` bits.
    ///
    /// Errors: `TypeError` for an `out` that is not a writable int64 buffer, `ValueError` for
    /// one shorter than 4; as `reap`.
    fn reap_into(&self, py: Python<'_>, out: &Bound<'_, PyAny>) -> PyResult<usize> {
        guard(|| {
            with_out_i64(out, |o| {
                self.h.with(|s| {
                    let room = out_room(o).min(s.out.len());
                    let k = s.zc.reap(&mut s.out[..room]).py()?;
                    s.completions_into(py, k, o);
                    Ok(k)
                })
            })
        })
    }

    /// Sends each buffer of `buffers` as a send of its own (one datagram on UDP, one `send` on
    /// TCP), in order, in one call: what `sendmmsg(2)` is to `sendmsg(2)`, to spare a sender
    /// loop one Python call per datagram. Returns `(sent, nbytes, completions)`: how many of
    /// the buffers were sent (the first `sent`), the bytes they accepted, and the completions
    /// ready now (of these sends or earlier ones) as `send_reap` gives them.
    ///
    /// `buffers`: any iterable of C-contiguous bytes-like objects (a single bytes-like object
    /// is `TypeError`); `user_datas`: None (every completion carries None) or an iterable of
    /// objects as long as `buffers` (else `ValueError`), `user_datas[i]` handed back unchanged
    /// in buffer i's completion. Every buffer is checked and pinned before the first send (a
    /// buffer that is not bytes-like is `TypeError`, a non-contiguous one `BufferError`, and
    /// nothing is sent).
    ///
    /// Each of the first `sent` buffers that accepted bytes gets exactly one completion; an
    /// empty buffer (a zero-length datagram) gets none, as with `send`. Each stays alive and
    /// un-resizable (`BufferError`) until its own completion is reaped; buffers not sent are
    /// released before the call returns.
    ///
    // doc-copy: zc_send_batch.kernel
    /// Partial progress as `sendmmsg(2)`: the batch stops after a send that took less than its
    /// whole buffer (a stream socket that filled up: what follows would skip the rest), or at an
    /// error once at least one send went (the error is dropped: a lasting one meets the next call);
    /// only an error of the first send is returned. Each send follows the send rules (a blocking
    /// stream send waits for room, `MSG_DONTWAIT` does not), one syscall each as today's kernels
    /// have no batched zerocopy send that keeps one completion per buffer.
    // doc-end
    /// (The rest of a short `buffers[sent - 1]` starts at byte
    /// `nbytes - sum(len(b) for b in buffers[:sent - 1])`.)
    ///
    /// Flags as `send`, applied to every send. The GIL is released for the whole batch
    /// unless `MSG_DONTWAIT` is given (a socket with a timeout is non-blocking, but the GIL
    /// is still released, as by `send`). A signal during the first send runs the Python
    /// handlers and, if they do not raise, the send goes on; during a later one the call
    /// returns its progress and the handlers run right after.
    ///
    /// Errors (`OSError`, from the first send): as `send`.
    #[pyo3(signature = (buffers, user_datas = None, flags = 0))]
    fn send_many(
        &self,
        py: Python<'_>,
        buffers: &Bound<'_, PyAny>,
        user_datas: Option<&Bound<'_, PyAny>>,
        flags: i32,
    ) -> PyResult<Py<PyTuple>> {
        guard(|| {
            let flags = send_flags(flags)?;
            if buffers.is_instance_of::<PyBytes>()
                || buffers.is_instance_of::<PyByteArray>()
                || buffers.is_instance_of::<PyMemoryView>()
                || buffers.is_instance_of::<PyString>()
            {
                return Err(PyTypeError::new_err(format!(
                    "buffers must be an iterable of bytes-like objects (one per send), not '{}'",
                    buffers.get_type().name()?
                )));
            }
            // Tuples, taken before the sender is locked (iterating may run Python code);
            // immutable, so no buffer can vanish from under the sends.
            let bufs = tuple_of(buffers, "buffers")?;
            let uds = user_datas
                .filter(|u| !u.is_none())
                .map(|u| tuple_of(u, "user_datas"))
                .transpose()?;
            if let Some(u) = &uds {
                if u.len() != bufs.len() {
                    return Err(PyValueError::new_err(format!(
                        "user_datas has {} items for {} buffers",
                        u.len(),
                        bufs.len()
                    )));
                }
            }
            let (sent, bytes, got) = self
                .h
                .with(|s| s.send_many(py, &bufs, uds.as_ref(), flags))?;
            Ok((sent, bytes, got).into_pyobject(py)?.unbind())
        })
    }

    /// Every completion ready now, oldest first, without blocking (an empty list when none
    /// is); releases their buffers.
    // doc-copy: zc_reap.kernel
    /// Never blocks. Collects what the kernel has reported first: one error-queue read while sends
    /// are in flight; no syscall for io_uring (unless the kernel deferred notifications or the
    /// completion queue overflowed) and copy. On io_uring this also takes in the other senders'
    /// notifications that have arrived on the thread's ring, keeping them for those senders.
    // doc-end
    ///
    /// Errors (`OSError`):
    // doc-copy: zc_reap.errors
    /// Error-queue read errors; `EEXIST` on io_uring from a thread other than the one the sender
    /// belongs to (once it joined a ring); `EIO` when its ring was retired.
    // doc-end
    fn reap(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        guard(|| {
            let got = self.h.with(|s| s.reap_all(py))?;
            Ok(PyList::new(py, got)?.unbind())
        })
    }

    /// Waits up to `timeout` seconds (None: no limit, 0: just check) until a completion is
    /// ready.
    // doc-copy: zc_wait.kernel
    /// Returns the number ready to reap; 0 at once when nothing is in flight (it never waits for a
    /// notification that cannot come).
    // doc-end
    ///
    /// The GIL is released while waiting; a signal runs the Python handlers and, if they do
    /// not raise, the wait goes on with the time left (the `EINTR` below never reaches Python).
    ///
    /// Errors (`OSError`; `ETIMEDOUT` is `TimeoutError`):
    // doc-copy: zc_wait.errors
    /// `ETIMEDOUT` when sends are in flight and none completed in time (TCP notifies only once the
    /// peer acknowledged, so a peer that stops reading delays completions without bound); `EINTR`
    /// on a signal (the wait is a poll or `io_uring_enter`, which the kernel never restarts);
    /// `EEXIST` (io_uring backend from a thread other than the one the sender belongs to); `EIO`
    /// (its ring was retired); a pending socket error (`ECONNRESET`, ...) when the socket reports
    /// one instead of a completion; error-queue read errors.
    // doc-end
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        guard(|| {
            let deadline = deadline_of(timeout_of(timeout)?);
            let zero = timeout == Some(0.0);
            self.h.with(|s| {
                let zc = &mut s.zc;
                blocking(py, || {
                    let t = if zero {
                        Some(std::time::Duration::ZERO)
                    } else {
                        left(deadline)
                    };
                    zc.wait(t)
                })
            })
        })
    }

    // doc-copy: zc_inflight
    /// Sends that accepted bytes and whose completion has not arrived yet (ready but unreaped
    /// completions are not counted; failed sends never are).
    // doc-end
    #[getter]
    fn inflight(&self) -> PyResult<usize> {
        guard(|| self.h.with(|s| Ok(s.zc.inflight())))
    }

    /// The backend in use (`ZcBackend`, never `AUTO`).
    #[getter]
    fn backend(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let b = self.h.with(|s| Ok(s.zc.backend() as u32))?;
            zc_backend(py, b)
        })
    }

    /// The counters so far (`ZcStats`).
    fn stats(&self) -> PyResult<ZcStats> {
        guard(|| self.h.with(|s| Ok(s.zc.stats().into())))
    }

    /// The sender's own duplicate of the socket's descriptor.
    fn fileno(&self) -> PyResult<i32> {
        guard(|| self.h.with(|s| Ok(s.zc.get_ref().as_raw_fd())))
    }

    /// The descriptor to watch for completions, then `reap()`: for the io_uring backend the
    /// eventfd of the ring of the thread the sender belongs to, whichever thread asks
    /// (readable when a notification was queued for any io_uring sender of that thread: the
    /// same descriptor for all of them, made and
    /// registered on the thread's first call; `reap` and `wait` reset it), else the socket
    /// (its error queue raises `EPOLLERR`, which every poller reports). A reap of one sender
    /// takes in the ring's other notifications and keeps them for their senders, where the
    /// descriptor no longer shows them: after a wake, reap every io_uring sender of the
    /// thread that has sends in flight (`lowcopy.asyncio` does). Remove it from any event
    /// loop before the last sender of the thread is closed; lowcopy closes it, never the
    /// caller.
    fn completion_fd(&self) -> PyResult<i32> {
        guard(|| self.h.with(|s| Ok(s.zc.completion_fd().as_raw_fd())))
    }

    /// Closes the sender by the close policy and returns its final counters (`ZcStats`;
    /// None when it was closed already). Completions not reaped are discarded, their buffers
    /// released.
    // doc-copy: zc_close.policy
    /// Closing never lets the kernel read memory the program has given up. The sender first waits
    /// for the completions of its sends in flight, up to its close timeout (1 s by default). If
    /// some are still missing (TCP notifies only once the peer acknowledged: a peer that stopped
    /// reading holds them) and the socket is a stream, it resets the connection (`connect` with
    /// `AF_UNSPEC`: the kernel sends a RST and purges its send queues, releasing their pages; the
    /// peer sees a reset, never wrong bytes) and waits up to 1 s more for the completions that
    /// follow. A datagram socket is not reset: its sends complete once the device has sent them.
    /// Sends still in flight after that are abandoned: the memory of each stays in use by the
    /// kernel for ever (an owned buffer is leaked, never freed). The counters say what happened:
    /// `close_completed`, `close_resets`, `close_abandoned`. An io_uring sender closed on another
    /// thread than the one whose ring it joined cannot wait: it resets a stream at once and
    /// abandons what is still in flight. Closing waits in `poll` or `io_uring_enter`; a signal does
    /// not cut it short.
    // doc-end
    ///
    /// `timeout`: seconds to wait before a stuck stream is reset (None: the sender's default,
    /// 1 s; 0: at once). The GIL is released while it waits. The buffers of abandoned sends stay
    /// pinned for ever. A sender collected without `close()` does the same with the default.
    /// Idempotent; later calls other than `close` raise `ValueError`.
    #[pyo3(signature = (timeout = None))]
    fn close(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<ZcStats>> {
        guard(|| {
            let t = timeout_of(timeout)?;
            let Some(s) = self.h.take()? else {
                return Ok(None);
            };
            Ok(Some(close_sender(py, s, t).into()))
        })
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.h.is_closed()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py, None).map(drop)
    }

    fn __repr__(&self) -> String {
        match self
            .h
            .with(|s| Ok((s.zc.get_ref().as_raw_fd(), s.zc.backend(), s.zc.inflight())))
        {
            Ok((fd, b, n)) => {
                format!("<lowcopy.ZeroCopySender fd={fd} backend={b:?} inflight={n}>")
            }
            Err(_) if self.h.is_closed() => "<lowcopy.ZeroCopySender [closed]>".to_string(),
            Err(_) => "<lowcopy.ZeroCopySender [in use]>".to_string(),
        }
    }
}

impl Drop for ZeroCopySender {
    /// Collected without `close()`: as `close()`.
    fn drop(&mut self) {
        if let Some(s) = self.h.take_now() {
            Python::attach(|py| close_sender(py, s, None));
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ZcStats>()?;
    crate::completion::register(m)?;
    m.add_class::<ZeroCopySender>()?;
    Ok(())
}
