//! `ZeroCopySender`: zerocopy sends whose `Buffer`s stay alive until their completion is
//! reaped, with any JS value as `userData`.
//!
//! Each send in flight has a slot, whose number is the `user_data` the core carries: the slot
//! holds a strong reference to the send's data (`napi_create_reference`) and its `userData`
//! (a number in Rust, any other value in a JS array the sender references, the "slab"). So the
//! garbage collector cannot free a buffer the kernel may still read, and every reference is
//! taken and dropped on the JS thread (in `send`/`reap`/`wait`).
//!
//! Detaching: a transfer (`postMessage`, `structuredClone`) moves an ArrayBuffer's memory to
//! a new owner, who may free it while the kernel reads it; a reference does not prevent that.
//! Before a zerocopy-capable send, each buffer's ArrayBuffer goes through the package's guard
//! (`lowcopy.js`: `worker_threads.markAsUntransferable`, after which a transfer copies), or the
//! send is refused when no guard can stop transfers on this runtime. The copy backend copies in
//! the send call and needs no guard. Pooled `Buffer`s (slices of Node's shared 8 KiB pool) are
//! sent from their own `byteOffset`; the pool is untransferable already.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use lowcopy::zc::{Completion, COPIED, FALLBACK};
use lowcopy::{AbortHandle, Flags, Wakeup, ZcBackend, ZcOptions};
use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::args::{self, is_libuv_handle, size};
use crate::error::{
    arg_type_error, out_of_range, sys_error, type_error, value_error, Fail, OrThrow,
};
use crate::peek::{bytes_arg, View};

type Core = lowcopy::ZeroCopySender<OwnedFd>;

/// A send's bytes accepted and completions reaped, or the kernel's error.
type IoPair = std::io::Result<(usize, usize)>;

thread_local! {
    /// The transfer guard the package entry installed on this JS thread (a function taking an
    /// ArrayBuffer; it throws where transfers cannot be stopped).
    static GUARD: RefCell<Option<ObjectRef<false>>> = const { RefCell::new(None) };
    /// Bumped by each `_setTransferGuard`: part of the type tag that marks an ArrayBuffer as
    /// passed through this guard.
    static GUARD_GEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The type tag put on an ArrayBuffer once the current guard accepted it. The guard's effect
/// (`markAsUntransferable`) lasts for the ArrayBuffer's life, so later sends of the same memory
/// check the tag (one V8 private-property lookup) instead of calling into JS again.
fn guarded_tag() -> napi::sys::napi_type_tag {
    napi::sys::napi_type_tag {
        lower: 0x6c6f_7763_6f70_7947, // "lowcopyG"
        upper: GUARD_GEN.with(|g| g.get()),
    }
}

/// Installs the function called with each ArrayBuffer before a zerocopy-capable send (done by
/// `lowcopy.js`: `markAsUntransferable`). Internal.
#[napi(
    catch_unwind,
    js_name = "_setTransferGuard",
    ts_args_type = "guard: (buf: ArrayBufferLike) => void"
)]
pub fn set_transfer_guard(env: Env, guard: Unknown) -> Result<()> {
    if guard.get_type()? != ValueType::Function {
        let msg = "The \"guard\" argument must be a function";
        return Err(type_error(&env, msg.into()));
    }
    // SAFETY: a function is an object.
    let obj: Object = unsafe { guard.cast()? };
    let r = obj.create_ref::<false>()?;
    GUARD.with(|g| {
        if let Some(old) = g.borrow_mut().replace(r) {
            let _ = old.unref(&env);
        }
    });
    GUARD_GEN.with(|g| g.set(g.get() + 1));
    Ok(())
}

/// The backends' names, in the order the `backend` option's error lists them.
const BACKENDS: &[(&str, ZcBackend)] = &[
    ("auto", ZcBackend::Auto),
    ("io_uring", ZcBackend::IoUring),
    ("errqueue", ZcBackend::ErrQueue),
    ("copy", ZcBackend::Copy),
];

/// Options of `new ZeroCopySender`.
#[allow(dead_code)]
#[napi(object)]
pub struct ZcSenderOptions {
    /// `'auto'` (default), `'io_uring'`, `'errqueue'` or `'copy'`. On a `net.Socket` (which
    /// libuv polls) `'auto'` never picks `'errqueue'` and `'errqueue'` is refused: its
    /// notifications keep `EPOLLERR` up and would spin Node's event loop until reaped.
    ///
    /// `'auto'`:
    // doc-copy: zc_backend.auto
    /// io_uring `SEND_ZC` where it works on this socket, else `MSG_ZEROCOPY` with the error queue
    /// where `SO_ZEROCOPY` works, else plain copies. Sockets with no zerocopy at all (AF_UNIX,
    /// MPTCP) get the copy backend. With io_uring the sender belongs to the first thread that
    /// sends: a daemon that hands a connection to another thread mid-stream should choose the error
    /// queue.
    // doc-end
    ///
    /// `'errqueue'`:
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
    /// `'io_uring'`:
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
    /// `'copy'`:
    // doc-copy: zc_backend.copy
    /// Plain copying `sendmsg`; the completion is ready when the send returns.
    // doc-end
    pub backend: Option<String>,
    // doc-copy: zc_options.adaptive
    /// Stop asking for zerocopy after 16 consecutive completions that the kernel copied anyway
    /// (loopback, veth, devices without scatter-gather), the way msg_zerocopy.rst suggests: a
    /// copied "zerocopy" send costs more than a plain copy. Sends in flight are still reaped; later
    /// sends are plain copies whose completion is ready at once, flagged copied and fallback. After
    /// 4,096 such copies zerocopy is asked for again (the path may have changed), and the next 16
    /// completions decide anew: on a path that copies, 16 copied "zerocopy" sends in every 4,112.
    // doc-end
    pub adaptive: Option<bool>,
}

/// Options of a send.
#[allow(dead_code)]
#[napi(object)]
pub struct ZcSendOptions {
    /// `MSG_DONTWAIT`: `EAGAIN` instead of waiting for room in the socket.
    pub dont_wait: Option<bool>,
    /// `MSG_MORE`: more data follows (TCP corks, UDP appends to one datagram).
    pub more: Option<bool>,
    /// The C bits instead (`MSG_DONTWAIT` 0x40, `MSG_MORE` 0x8000; `MSG_NOSIGNAL` is implied
    /// and accepted); others are `EINVAL`.
    pub flags: Option<i32>,
}

/// One finished send.
#[napi(object)]
pub struct ZcCompletion {
    /// The value given with the send, unchanged.
    pub user_data: Unknown<'static>,
    // doc-copy: completion.result
    /// Bytes the send accepted: always > 0. Every backend learns a send's outcome before the send
    /// call returns, so a failed send reports its error there and gets no completion; a completion
    /// never carries an error.
    // doc-end
    pub result: f64,
    /// True when
    // doc-copy: completion.copied
    /// the data was copied, not pinned: by the kernel (a deferred copy: loopback, veth, devices
    /// without scatter-gather; `SO_EE_CODE_ZEROCOPY_COPIED` or `IORING_NOTIF_USAGE_ZC_COPIED`), or
    /// by a plain send.
    // doc-end
    pub copied: bool,
    /// True when
    // doc-copy: completion.fallback
    /// some or all of the request went out as a plain copied send because zerocopy was not possible
    /// (`ENOBUFS`, io_uring `ENOMEM`, adaptive mode, full id window). The copy backend sets only
    /// the copied flag: copying is what it was asked to do.
    // doc-end
    pub fallback: bool,
}

/// Counters of a sender (see the core's `ZcStats`).
#[napi(object)]
pub struct ZcStats {
    // doc-copy: zc_stats.sends
    /// Send calls that returned > 0.
    // doc-end
    pub sends: f64,
    // doc-copy: zc_stats.bytes
    /// Bytes those sends accepted.
    // doc-end
    pub bytes: f64,
    // doc-copy: zc_stats.zerocopy_sends
    /// Kernel sends that asked for zerocopy (`MSG_ZEROCOPY` or SEND_ZC).
    // doc-end
    pub zerocopy_sends: f64,
    // doc-copy: zc_stats.copy_sends
    /// Kernel sends that copied (copy backend, fallbacks, adaptive mode).
    // doc-end
    pub copy_sends: f64,
    // doc-copy: zc_stats.completions
    /// Completions handed to the caller.
    // doc-end
    pub completions: f64,
    // doc-copy: zc_stats.completions_copied
    /// Of those, completions with the `COPIED` flag.
    // doc-end
    pub completions_copied: f64,
    // doc-copy: zc_stats.enobufs
    /// `ENOBUFS` from error-queue zerocopy sends (optmem or locked-pages limit) and `ENOMEM` from
    /// io_uring ones (`RLIMIT_MEMLOCK`, for a thread without `CAP_IPC_LOCK`), each answered by a
    /// retry and then a copy; never returned to the caller.
    // doc-end
    pub enobufs: f64,
    // doc-copy: zc_stats.window_full
    /// Sends that fell back to a copy because the id window was full (twice the sender's limit of
    /// requests held in flight: 8192 ids by default).
    // doc-end
    pub window_full: f64,
    // doc-copy: zc_stats.syscalls_send
    /// Syscalls made to send (sendmsg, io_uring_enter for a send).
    // doc-end
    pub syscalls_send: f64,
    // doc-copy: zc_stats.syscalls_reap
    /// Syscalls made to collect completions (error-queue reads, waits).
    // doc-end
    pub syscalls_reap: f64,
    // doc-copy: zc_stats.errqueue_other
    /// Error-queue entries that were not zerocopy notifications (timestamps, ICMP): read and
    /// dropped.
    // doc-end
    pub errqueue_other: f64,
    // doc-copy: zc_stats.unexpected_ids
    /// Notified ids that matched no send in flight: ignored.
    // doc-end
    pub unexpected_ids: f64,
    // doc-copy: zc_stats.zerocopy_off
    /// 1 while the adaptive option has stopped asking for zerocopy (it asks again after 4,096 plain
    /// copies).
    // doc-end
    pub zerocopy_off: f64,
    // doc-copy: zc_stats.close_completed
    /// Completions that closing the sender took in (ready ones and those that arrived while it
    /// waited); see the close policy.
    // doc-end
    pub close_completed: f64,
    // doc-copy: zc_stats.close_resets
    /// 1 when closing reset the connection because completions did not come in time.
    // doc-end
    pub close_resets: f64,
    // doc-copy: zc_stats.close_abandoned
    /// Sends still in flight when closing gave up waiting: their memory stays in use by the kernel
    /// (an owned buffer is leaked, never freed; a borrowed one must stay valid for ever).
    // doc-end
    pub close_abandoned: f64,
}

mirror!(ZcStats from lowcopy::ZcStats { sends, bytes, zerocopy_sends, copy_sends, completions,
    completions_copied, enobufs, window_full, syscalls_send, syscalls_reap, errqueue_other,
    unexpected_ids, zerocopy_off, close_completed, close_resets, close_abandoned });

/// Zerocopy sends over one socket (the core's `lowcopy::ZeroCopySender`, over a private
/// duplicate of the descriptor), each followed by exactly one completion carrying its
/// `userData`, when the kernel no longer needs the buffer.
///
/// Each buffer sent is kept alive (and its ArrayBuffer made untransferable) until its
/// completion is reaped by `reap`, `sendReap`, `wait` or `waitAsync`.
// doc-copy: zc.buffers
/// The memory of a send must stay allocated and unmodified until its completion is reaped: the
/// kernel may read it until then (a zerocopy send pins the pages and transmits from them, also when
/// TCP retransmits), so whatever the program writes there goes on the wire, and memory freed and
/// reused carries other data (heap contents, pointers) to the peer. A completion means "the buffer
/// may be reused", not "the data was delivered": TCP notifies only after the peer acknowledged, so
/// never block a send on completions.
// doc-end
// doc-copy: zc.one_per_socket
/// Create one sender per socket, before any other `MSG_ZEROCOPY` send on it, and keep it for the
/// socket's life: the kernel's id counter cannot be read back, so on the error queue a second
/// sender on the same socket (beside the first, after it was closed, or in a forked child) would
/// number its sends from 0 while the kernel goes on from where the first left off, and take the
/// first sender's notifications for its own: a completion could hand a buffer back before the
/// kernel sent it. So an error-queue sender is refused (`EBUSY`) on a socket whose `SO_ZEROCOPY` is
/// set already, and AUTO picks io_uring or copies there; the io_uring backend has no such counter.
// doc-end
/// Sends and reaps run on the JS thread
/// (the io_uring backend belongs to the first thread that sends); `waitAsync` only waits on
/// a thread of its own.
#[napi(custom_finalize)]
pub struct ZeroCopySender {
    /// Every method takes `&self` (a pending `waitAsync` must not block `close()`): the state
    /// is borrowed for the length of one call, on the JS thread. Shared (weakly) with the
    /// environment's registry, whose cleanup hook closes the sender before the heap goes.
    inner: Rc<RefCell<Inner>>,
}

/// The state of a `ZeroCopySender`.
pub struct Inner {
    core: Option<Core>,
    /// The JS array holding each slot's user value when it is not a number (element `slot`).
    slab: Option<ObjectRef<false>>,
    /// How each slot holds its send's data while the send is in flight or unreaped. A
    /// reference costs about a fifth of the two array stores (set, then clear) that held it
    /// before (callgrind).
    data: Vec<Hold>,
    /// Each slot's user value when it is a number, kept here; `None`: the slab's element
    /// (`undefined` when none was given).
    nums: Vec<Option<f64>>,
    /// ArrayBuffers the transfer guard accepted, by the address of the bytes sent
    /// (direct-mapped, `MARKED` entries): a buffer sent again is known by two N-API calls
    /// (`marked_again`) instead of its type tag, a V8 private-property read of about 1,000
    /// instructions per send (callgrind). The guard's effect lasts for the ArrayBuffer's life.
    marked: [Marked; MARKED],
    free: Vec<u32>,
    next: u32,
    /// Sends whose buffers are held (in flight or completed, not reaped).
    held: usize,
    /// Abort handles of pending `waitAsync`s, aborted by `close()`.
    waiters: Vec<Arc<AbortHandle>>,
    backend: ZcBackend,
    fd: i32,
    /// The bound on each phase of closing with sends in flight (the core's close timeout).
    close_timeout: Duration,
    /// The counters as closing left them (`stats()` after `close()`).
    last: Option<lowcopy::ZcStats>,
    out: Vec<Completion>,
}

/// An ArrayBuffer the transfer guard accepted (`Inner::marked`).
#[derive(Clone, Copy)]
struct Marked {
    /// The address of the bytes sent from it.
    key: usize,
    /// The guard's generation (`GUARD_GEN`) then.
    gen: u64,
    /// A weak reference to it (null: an empty entry), strong while `busy > 0`.
    r: napi::sys::napi_ref,
    /// Sends holding the ArrayBuffer through `r` (`Hold::Marked`). An entry replaced while
    /// busy is left to them: the last one's release deletes `r`.
    busy: u32,
}

/// How a slot holds its send's data until the completion is reaped.
#[derive(Clone)]
enum Hold {
    /// Nothing: a free slot.
    None,
    /// A strong reference of its own to the data (an `ArrayBufferView`).
    Own(napi::sys::napi_ref),
    /// A strong reference to each ArrayBuffer of an array of views.
    Many(Box<[napi::sys::napi_ref]>),
    /// A count on the reference of the `marked` entry of the bytes at the key (`.1`) to the one
    /// view's ArrayBuffer: no reference made and deleted per send (about 450 instructions;
    /// counting one up and down costs about 150, callgrind).
    Marked(napi::sys::napi_ref, usize),
}

/// Entries of `Inner::marked` (a pool of buffers sent in turn stays in them), in sets of
/// `MARKED_WAYS` by address: direct-mapped, a pool of 16 buffers lost about one in six sends
/// to collisions (each then paying the type-tag check and a new weak reference).
const MARKED: usize = 64;
const MARKED_WAYS: usize = 8;

/// An empty entry of `Inner::marked`.
const UNMARKED: Marked = Marked {
    key: 0,
    gen: 0,
    r: std::ptr::null_mut(),
    busy: 0,
};

/// The set of `Inner::marked` for the bytes at `key` (its first entry's index).
fn marked_set(key: usize) -> usize {
    let sets = (MARKED / MARKED_WAYS).trailing_zeros();
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - sets)) * MARKED_WAYS
}

/// A released slot's user value: a number kept in Rust, or the JS value from the slab.
#[derive(Clone, Copy)]
enum Ud {
    Num(f64),
    Js(napi::sys::napi_value),
}

impl ObjectFinalize for ZeroCopySender {
    fn finalize(self, env: Env) -> Result<()> {
        // Collected by the GC without close(): close now, as close() does (nothing left to do
        // when the environment's teardown closed it already).
        self.close(env);
        Ok(())
    }
}

/// A JS array of `items`.
fn js_array(env: &Env, items: &[napi::sys::napi_value]) -> Result<Unknown<'static>> {
    use napi::{check_status as ok, sys as ns};
    let (e, mut arr) = (env.raw(), std::ptr::null_mut());
    // SAFETY: N-API calls on this env with live values of this call; the array goes back to
    // JS within the call ('static only names the callback's scope).
    unsafe {
        ok!(ns::napi_create_array_with_length(e, items.len(), &mut arr))?;
        for (i, &v) in items.iter().enumerate() {
            ok!(ns::napi_set_element(e, arr, i as u32, v))?;
        }
        Ok(Unknown::from_raw_unchecked(e, arr))
    }
}

/// The sender's open core: `EBADF` once closed.
fn open<'c>(core: &'c mut Option<Core>, env: &Env, what: &str) -> Result<&'c mut Core> {
    core.as_mut()
        .ok_or_else(|| sys_error(env, libc::EBADF, what))
}

impl Inner {
    fn slab<'e>(&self, env: &'e Env) -> Result<Object<'e>> {
        match &self.slab {
            Some(r) => r.get_value(env),
            None => Err(sys_error(env, libc::EBADF, "ZeroCopySender")),
        }
    }

    /// A free slot holding `data` (whose bytes are `views`, the transfer guard run on each),
    /// taken before the send (a send that goes out always has its data held): one view through
    /// its ArrayBuffer's `marked` entry where it has one, else by a strong reference of its own.
    fn take_slot(&mut self, env: &Env, data: &Unknown, views: &[View]) -> Result<u32> {
        let hold = match views {
            [one] => match self.guard_one(env, one)? {
                Some(h) => h,
                None => Hold::Own(strong_ref(env, data.raw())?),
            },
            // Not the caller's array, which the caller may empty or refill while the kernel
            // reads (and not an array of the sender's own, whose stores a setter on
            // `Array.prototype` could swallow): a reference to each view's ArrayBuffer.
            many => {
                many.iter()
                    .try_for_each(|v| self.marked(env, v).map(drop))?;
                let mut refs = Vec::with_capacity(many.len());
                for v in many {
                    match strong_ref(env, v.array_buffer()) {
                        Ok(r) => refs.push(r),
                        Err(e) => {
                            drop_refs(env, &refs);
                            return Err(e);
                        }
                    }
                }
                Hold::Many(refs.into())
            }
        };
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                own_element(env, self.slab(env)?, self.next)?;
                self.next += 1;
                self.next - 1
            }
        };
        let i = slot as usize;
        if self.data.len() <= i {
            self.data.resize(i + 1, Hold::None);
            self.nums.resize(i + 1, None);
        }
        self.data[i] = hold;
        Ok(slot)
    }

    /// Lets go of the slot's data.
    fn drop_hold(&mut self, env: &Env, slot: u32) {
        use napi::sys as ns;
        match std::mem::replace(&mut self.data[slot as usize], Hold::None) {
            Hold::None => {}
            // The references `take_slot` made for this slot, deleted once (taken above).
            Hold::Own(r) => drop_refs(env, &[r]),
            Hold::Many(refs) => drop_refs(env, &refs),
            Hold::Marked(r, key) => {
                let mut n = 0;
                // SAFETY: the entry's reference, alive while this hold counts on it.
                unsafe { ns::napi_reference_unref(env.raw(), r, &mut n) };
                match self.marked[marked_set(key)..][..MARKED_WAYS]
                    .iter_mut()
                    .find(|m| m.r == r)
                {
                    Some(m) => m.busy -= 1,
                    // SAFETY: its entry was replaced and this was the last hold on it.
                    None if n == 0 => unsafe {
                        ns::napi_delete_reference(env.raw(), r);
                    },
                    None => {}
                }
            }
        }
    }

    /// Frees a slot whose send took nothing (no completion comes for it).
    fn unhold(&mut self, env: &Env, slot: u32) {
        self.drop_hold(env, slot);
        self.free.push(slot);
    }

    /// Drops the slot's hold on its data and hands back its user value.
    fn release(&mut self, env: &Env, slot: u32) -> Result<Ud> {
        let i = slot as usize;
        self.drop_hold(env, slot);
        let ud = match self.nums[i].take() {
            Some(x) => Ud::Num(x),
            None => {
                let slab = self.slab(env)?;
                let ud: Unknown = slab.get_element(slot)?;
                set_element(env, &slab, slot, ())?;
                Ud::Js(ud.raw())
            }
        };
        self.free.push(slot);
        self.held -= 1;
        Ok(ud)
    }

    /// `release`, the user value as a JS value (a number kept in Rust made one).
    fn release_value(&mut self, env: &Env, slot: u32) -> Result<napi::sys::napi_value> {
        match self.release(env, slot)? {
            Ud::Js(v) => Ok(v),
            // SAFETY: creates a number in this env.
            Ud::Num(x) => unsafe { f64::to_napi_value(env.raw(), x) },
        }
    }

    /// Turns the completions in `self.out` into JS objects, releasing their buffers.
    fn completions(&mut self, env: &Env, n: usize) -> Result<Vec<ZcCompletion>> {
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let c = self.out[i];
            let raw = self.release_value(env, c.user_data as u32)?;
            v.push(ZcCompletion {
                // SAFETY: a live value of this call, returned to JS within it ('static here
                // only names the callback's scope).
                user_data: unsafe { Unknown::from_raw_unchecked(env.raw(), raw) },
                result: c.result as f64,
                copied: c.flags & COPIED != 0,
                fallback: c.flags & FALLBACK != 0,
            });
        }
        Ok(v)
    }

    /// Writes the first `n` completions of `self.out` into `out[1..]` as (userData, result,
    /// flags) triples and `n` into `out[0]`, releasing their buffers; a user value that is not
    /// a number is written as NaN.
    fn completions_into(&mut self, env: &Env, n: usize, out: &mut [f64]) -> Result<()> {
        for i in 0..n {
            let c = self.out[i];
            let ud = match self.release(env, c.user_data as u32)? {
                Ud::Num(x) => x,
                // SAFETY: a live value of this call; fails (NaN) for a non-number.
                Ud::Js(v) => unsafe { f64::from_napi_value(env.raw(), v) }.unwrap_or(f64::NAN),
            };
            out[1 + 3 * i] = ud;
            out[2 + 3 * i] = c.result as f64;
            out[3 + 3 * i] = c.flags as f64;
        }
        out[0] = n as f64;
        Ok(())
    }

    /// Reaps every completion that is ready, `self.out` at a time, handing each batch's count
    /// to `take` (which releases them).
    fn reap_chunks(
        &mut self,
        env: &Env,
        what: &str,
        mut take: impl FnMut(&mut Self, usize) -> Result<()>,
    ) -> Result<()> {
        loop {
            let n = open(&mut self.core, env, what)?.reap(&mut self.out);
            let n = n.or_throw(env, what)?;
            take(self, n)?;
            if n < self.out.len() {
                return Ok(());
            }
        }
    }

    /// The data argument as byte views: one `ArrayBufferView` or an array of them.
    fn views<'a>(&self, env: &Env, data: &Unknown<'a>) -> Result<Few<View<'a>>> {
        if !data.is_array()? {
            return Ok(Few::One([bytes_arg(env, data, "data")?]));
        }
        // SAFETY: an array is an object.
        let arr: Object = unsafe { data.cast()? };
        if arr.get_array_length()? as usize > lowcopy::IOV_MAX {
            return Err(sys_error(env, libc::EMSGSIZE, "send"));
        }
        crate::peek::views_arg(env, data, "data").map(Few::Many)
    }

    /// [`Inner::marked`] (the transfer guard) of one view, then a hold on its ArrayBuffer through
    /// its `marked` entry (counted up: strong until the last hold lets go); `None` without an
    /// entry to hold it by.
    fn guard_one(&mut self, env: &Env, v: &View) -> Result<Option<Hold>> {
        let Some(i) = self.marked(env, v)? else {
            return Ok(None);
        };
        let (m, mut n) = (&mut self.marked[i], 0);
        // SAFETY: the entry's reference (not deleted: it is in the table), counted up once.
        let st = unsafe { napi::sys::napi_reference_ref(env.raw(), m.r, &mut n) };
        if st != napi::sys::Status::napi_ok {
            return Ok(None);
        }
        m.busy += 1;
        Ok(Some(Hold::Marked(m.r, v.bytes().as_ptr() as usize)))
    }

    /// Runs the transfer guard on the view's ArrayBuffer unless its `marked` entry says it did;
    /// the entry's index (`None`: the copy backend, no ArrayBuffer, or no reference made).
    fn marked(&mut self, env: &Env, v: &View) -> Result<Option<usize>> {
        let ab = v.array_buffer();
        if self.backend == ZcBackend::Copy || ab.is_null() {
            return Ok(None);
        }
        let key = v.bytes().as_ptr() as usize;
        let i = match self.marked_again(env, key, ab) {
            Some(i) => i,
            None => {
                run_guard(env, ab)?;
                self.remember_marked(env, key, ab)
            }
        };
        Ok((!self.marked[i].r.is_null()).then_some(i))
    }

    /// The entry remembering `ab` for the bytes at `key` under the current guard: the very
    /// object (`napi_strict_equals` on the weak reference's value, null once collected), so a
    /// new ArrayBuffer at a freed one's address is never taken for it.
    fn marked_again(&self, env: &Env, key: usize, ab: napi::sys::napi_value) -> Option<usize> {
        let (set, gen) = (marked_set(key), GUARD_GEN.with(|g| g.get()));
        let w = self.marked[set..set + MARKED_WAYS]
            .iter()
            .position(|m| m.key == key && m.gen == gen && !m.r.is_null())?;
        let (mut v, mut same) = (std::ptr::null_mut(), false);
        // SAFETY: a reference of this sender, not deleted; plain N-API queries into locals.
        let same = unsafe {
            napi::sys::napi_get_reference_value(env.raw(), self.marked[set + w].r, &mut v);
            !v.is_null()
                && napi::sys::napi_strict_equals(env.raw(), v, ab, &mut same)
                    == napi::sys::Status::napi_ok
                && same
        };
        same.then_some(set + w)
    }

    /// Remembers that the guard accepted `ab` (a weak reference: it keeps nothing alive), first
    /// in its set (its index returned); the entry it replaces is the one for the same address,
    /// else the set's last.
    fn remember_marked(&mut self, env: &Env, key: usize, ab: napi::sys::napi_value) -> usize {
        let first = marked_set(key);
        let set = &mut self.marked[first..][..MARKED_WAYS];
        let old = set
            .iter()
            .position(|m| m.key == key)
            .unwrap_or(MARKED_WAYS - 1);
        set[..=old].rotate_right(1);
        let m = &mut set[0];
        let mut r = std::ptr::null_mut();
        // SAFETY: N-API calls on this env: the entry's old reference (deleted once, replaced
        // below; one that sends still hold is theirs to delete: `drop_hold`) and a weak
        // reference to a live object of this call.
        unsafe {
            if !m.r.is_null() && m.busy == 0 {
                napi::sys::napi_delete_reference(env.raw(), m.r);
            }
            napi::sys::napi_create_reference(env.raw(), ab, 0, &mut r);
        }
        (m.key, m.gen, m.r, m.busy) = (key, GUARD_GEN.with(|g| g.get()), r, 0);
        first
    }

    /// One send of `data` for the call `what` (the sender open, the transfer guard run, a slot
    /// holding `data`: `take_slot`), made by `send` on the core with the views' iovecs, the
    /// slot's number and `self.out`; returns the bytes accepted and the completions `send`
    /// reaped, the kernel's error as such. A send that took bytes keeps its slot with
    /// `user_data` until its completion (`settle`).
    fn send_with(
        &mut self,
        env: &Env,
        what: &str,
        (data, views): (&Unknown, Few<View>),
        user_data: Ud,
        send: impl FnOnce(&mut Core, &[libc::iovec], u64, &mut [Completion]) -> IoPair,
    ) -> Result<IoPair> {
        open(&mut self.core, env, what)?;
        let slot = self.take_slot(env, data, &views)?;
        let iov = views.map(View::iovec);
        let core = self.core.as_mut().expect("checked above");
        let r = send(core, &iov, slot as u64, &mut self.out);
        let keep = matches!(r, Ok((n, _)) if n > 0);
        self.settle(env, slot, keep, Some(user_data))?;
        Ok(r)
    }

    /// After a send from `slot`: one that took bytes (`keep`) stays held, with `user_data`,
    /// until its completion is reaped; one that took none, or failed, frees the slot and its
    /// reference. Returns `keep`.
    fn settle(&mut self, env: &Env, slot: u32, keep: bool, user_data: Option<Ud>) -> Result<bool> {
        if !keep {
            self.unhold(env, slot);
            return Ok(false);
        }
        // Held from here on, whatever happens to the user value (its completion will come).
        self.held += 1;
        match user_data {
            Some(Ud::Num(x)) => self.nums[slot as usize] = Some(x),
            // A number stays in Rust whichever call brought it: the slab's element store and
            // clear cost about 1,500 instructions a send (callgrind), a number's read 40.
            Some(Ud::Js(v)) => match args::as_number(env, v) {
                Some(x) => self.nums[slot as usize] = Some(x),
                None => set_element(env, &self.slab(env)?, slot, v)?,
            },
            None => {} // the slab's element is undefined (a released slot's is cleared)
        }
        Ok(true)
    }

    /// A send; the kernel's error is returned as such.
    fn send(
        &mut self,
        env: &Env,
        what: &str,
        (data, user_data): (Unknown, Unknown),
        addr: Option<SocketAddr>,
        flags: Flags,
    ) -> Result<std::io::Result<usize>> {
        let ud = Ud::Js(user_data.raw());
        let data = (&data, self.views(env, &data)?);
        let r = self.send_with(env, what, data, ud, |core, iov, slot, _| {
            // SAFETY: the views' buffers are held (`take_slot`) until the completion is
            // reaped, or by the close policy's abandoned sends for ever.
            unsafe { core.send_raw_to(iov, addr.as_ref(), flags, slot) }.map(|n| (n, 0))
        })?;
        Ok(r.map(|(n, _)| n))
    }

    /// `sendReap`'s send: the bytes accepted and the completions ready, in `self.out`.
    fn send_reap(
        &mut self,
        env: &Env,
        data: Unknown,
        ud: Unknown,
        f: Flags,
    ) -> Result<(usize, usize)> {
        let ud = Ud::Js(ud.raw());
        let data = (&data, self.views(env, &data)?);
        let r = self.send_with(env, "sendReap", data, ud, |core, iov, slot, out| {
            // SAFETY: as `send`'s: the buffers are held (`take_slot`) until their completion.
            unsafe { core.send_reap_raw(iov, f, slot, out) }
        })?;
        r.or_throw(env, "sendReap")
    }

    /// A JS array of the numbers `head`, then the completions of `self.out[..n]` as
    /// (userData, result, flags), releasing their buffers: the bound functions' results, made
    /// into objects by `lowcopy.js` (one made with N-API costs about 7,000 instructions and a
    /// result object with two properties 5,000, callgrind).
    fn flat(&mut self, env: &Env, head: &[f64], n: usize) -> Result<Unknown<'static>> {
        let mut v = Vec::with_capacity(head.len() + 3 * n);
        for &x in head {
            // SAFETY: creates a number in this env.
            v.push(unsafe { f64::to_napi_value(env.raw(), x)? });
        }
        self.push_flat(env, &mut v, n)?;
        js_array(env, &v)
    }

    /// Appends the (userData, result, flags) of `self.out[..n]` to `v`, releasing them.
    fn push_flat(&mut self, env: &Env, v: &mut Vec<napi::sys::napi_value>, n: usize) -> Result<()> {
        for i in 0..n {
            let c = self.out[i];
            v.push(self.release_value(env, c.user_data as u32)?);
            // SAFETY: create numbers in this env.
            unsafe {
                v.push(f64::to_napi_value(env.raw(), c.result as f64)?);
                v.push(u32::to_napi_value(env.raw(), c.flags)?);
            }
        }
        Ok(())
    }

    /// The bound on each phase of closing (the environment's teardown shares one deadline
    /// among its senders, bounded by each one's own).
    pub(crate) fn close_timeout(&self) -> Duration {
        self.close_timeout
    }

    /// The environment is going away (its cleanup hook): close under the core's policy within
    /// `timeout`, before V8 frees the heap that holds the buffers. No N-API call can run now
    /// (the environment no longer calls into JS), so the references and the slab are left to
    /// the environment's teardown, which frees them with the heap once the kernel is done.
    pub(crate) fn close_at_teardown(&mut self, timeout: Duration) {
        self.shut(None, timeout);
    }

    /// Closes under the core's close policy (`close_with`): aborts pending `waitAsync`s, waits
    /// up to `timeout` for the sends in flight (releasing each buffer as its completion comes;
    /// with `env` only: without one the environment is being torn down), and keeps the buffers
    /// of the sends the core abandoned for the life of the process (the kernel may still read
    /// them). Returns the sends abandoned.
    fn shut(&mut self, env: Option<&Env>, timeout: Duration) -> usize {
        for w in self.waiters.drain(..) {
            w.abort();
        }
        let Some(core) = self.core.take() else {
            return 0;
        };
        // The sends are borrowed (their references hold their buffers): no `Owned` comes back.
        let last = core.close_with(timeout, |c, _| {
            if let Some(env) = env {
                let _ = self.release(env, c.user_data as u32);
            }
        });
        let abandoned = last.close_abandoned as usize;
        self.last = Some(last);
        for m in std::mem::replace(&mut self.marked, [UNMARKED; MARKED]) {
            // One that abandoned sends hold stays (strong) for the life of the process.
            if let (Some(env), false) = (env, m.r.is_null() || m.busy > 0) {
                // SAFETY: a reference of this sender, deleted once (the table is emptied).
                unsafe { napi::sys::napi_delete_reference(env.raw(), m.r) };
            }
        }
        // Abandoned sends: the kernel may still read these pages (and TCP may resend from
        // them), so the memory must never be reused: leak the slab and the references of the
        // sends still held (never deleted, they keep their buffers for the life of the
        // process). At teardown the environment frees them itself.
        match (self.slab.take(), env) {
            (Some(slab), Some(env)) if self.held == 0 => drop(slab.unref(env)),
            (slab, _) => std::mem::forget(slab),
        }
        abandoned
    }
}

/// Runs the package's transfer guard on `ab`, unless its type tag says this guard did before
/// (its mark lasts for the ArrayBuffer's life); tags it then (which fails harmlessly when
/// another tag is on it already: the guard then runs again when the sender forgot it).
fn run_guard(env: &Env, ab: napi::sys::napi_value) -> Result<()> {
    use napi::sys as ns;
    let (tag, mut tagged) = (guarded_tag(), false);
    // SAFETY: a plain N-API query on a live object of this call into a local.
    let st = unsafe { ns::napi_check_object_type_tag(env.raw(), ab, &tag, &mut tagged) };
    if st == ns::Status::napi_ok && tagged {
        return Ok(());
    }
    let Some(f) = GUARD.with(|g| g.borrow().as_ref().map(|f| f.get_value(env))) else {
        let msg = "lowcopy's transfer guard is not installed: load the package through its entry \
                   point (require('lowcopy')), or use the 'copy' backend";
        return Err(value_error(env, msg.into()));
    };
    let (f, mut undef, mut ret) = (f?, std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: calling a JS function of this env with one live argument; tagging a live object.
    unsafe {
        ns::napi_get_undefined(env.raw(), &mut undef);
        if ns::napi_call_function(env.raw(), undef, f.raw(), 1, &ab, &mut ret)
            != ns::Status::napi_ok
        {
            return Err(Error::new(Status::PendingException, "transfer guard threw"));
        }
        ns::napi_type_tag_object(env.raw(), ab, &tag);
    }
    Ok(())
}

/// A send's views or iovecs: one without an allocation (the usual case), or an array's.
enum Few<T> {
    One([T; 1]),
    Many(Vec<T>),
}

impl<T> std::ops::Deref for Few<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Few::One(x) => x,
            Few::Many(v) => v,
        }
    }
}

impl<T> Few<T> {
    fn map<'s, U>(&'s self, mut f: impl FnMut(&'s T) -> U) -> Few<U> {
        match self {
            Few::One([x]) => Few::One([f(x)]),
            Few::Many(v) => Few::Many(v.iter().map(f).collect()),
        }
    }
}

/// A strong reference to `v`, a live object of this call (deleted by [`drop_refs`]).
fn strong_ref(env: &Env, v: napi::sys::napi_value) -> Result<napi::sys::napi_ref> {
    let mut r = std::ptr::null_mut();
    // SAFETY: an N-API call on this env with a live value, into a local.
    let st = unsafe { napi::sys::napi_create_reference(env.raw(), v, 1, &mut r) };
    napi::check_status!(st, "napi_create_reference failed")?;
    Ok(r)
}

/// Deletes references [`strong_ref`] made, each once.
fn drop_refs(env: &Env, refs: &[napi::sys::napi_ref]) {
    for &r in refs {
        // SAFETY: a reference of this sender's, not deleted before (the caller's promise).
        unsafe { napi::sys::napi_delete_reference(env.raw(), r) };
    }
}

/// Makes `slab[i]` an own data property (`undefined`) of the slab, as `CreateDataProperty` does,
/// before any store or load of it: a store into a hole, and a load of one, would meet a setter
/// or getter on `Array.prototype` (the caller's code, which could detach the buffers of the call
/// that reaps), where an own element's never do.
fn own_element(env: &Env, mut slab: Object, i: u32) -> Result<()> {
    use napi::{Property, PropertyAttributes as A};
    let p = Property::new().with_utf8_name(&i.to_string())?;
    let p = p
        .with_napi_value(env, ())?
        .with_property_attributes(A::Writable | A::Configurable);
    slab.define_properties(&[p])
}

/// `slab[i] = v` (a JS value, or `()`: `undefined`).
fn set_element(env: &Env, slab: &Object, i: u32, v: impl ToNapiValue) -> Result<()> {
    // SAFETY: N-API calls on this env with its live values.
    unsafe {
        let v = ToNapiValue::to_napi_value(env.raw(), v)?;
        let st = napi::sys::napi_set_element(env.raw(), slab.raw(), i, v);
        napi::check_status!(st, "napi_set_element failed")
    }
}

/// The elements of a `Float64Array` argument of at least 4 (one completion), for the call.
fn f64_out<'a>(env: &Env, v: &Unknown<'a>) -> Result<&'a mut [f64]> {
    let Some(out) = float64s(env, v) else {
        return Err(arg_type_error(env, "out", "an instance of Float64Array", v));
    };
    if out.len() < 4 {
        return Err(out_of_range(env, "out.length", ">= 4", out.len()));
    }
    Ok(out)
}

/// The elements of `v` if it is a `Float64Array`, for the call.
fn float64s<'a>(env: &Env, v: &Unknown<'a>) -> Option<&'a mut [f64]> {
    use napi::sys::{self as ns, TypedarrayType as Ty};
    use std::ptr::null_mut as no; // an output not asked for
    let (mut ty, mut len, mut data) = (Ty::int8_array, 0, no());
    // SAFETY: plain N-API query on a live value of this call into locals.
    let st = unsafe {
        ns::napi_get_typedarray_info(env.raw(), v.raw(), &mut ty, &mut len, &mut data, no(), no())
    };
    if st != ns::Status::napi_ok || ty != Ty::float64_array {
        return None;
    }
    // SAFETY: a Float64Array's elements, aligned and alive for the call ('a); the JS thread is
    // inside this call, and no other view of them is made in it.
    Some(unsafe { std::slice::from_raw_parts_mut(args::nonnull(data, len), len) })
}

#[napi]
impl ZeroCopySender {
    /// Creates a sender on (a duplicate of) `fd`: a TCP or UDP socket for zerocopy; any other
    /// socket works with the `'copy'` backend (`'auto'` picks it).
    // doc-copy: zc_new.kernel
    /// An io_uring sender (explicit, or picked by AUTO) makes sure the calling thread has its ring
    /// (made on the thread's first sender, kept until the thread exits) but joins a ring only at
    /// its first use. The error-queue backend sets `SO_ZEROCOPY` on the socket (left set
    /// afterwards; it only matters to `MSG_ZEROCOPY` sends), after a `getsockopt` that finds it
    /// unset.
    // doc-end
    ///
    /// Errors: `TypeError` for a bad option, and for `'errqueue'` on a `net.Socket`; `EMFILE`
    /// (no descriptor for the duplicate);
    // doc-copy: zc_new.errors
    /// `EBADF`, `ENOTSOCK`, `ENOTCONN` (a listening socket: one `getsockopt(SO_ACCEPTCONN)` tells,
    /// on stream and seqpacket sockets), `EOPNOTSUPP` (an explicit zerocopy backend on a socket
    /// that has none: AF_UNIX, MPTCP, raw, packet; or io_uring without SEND_ZC), io_uring setup
    /// errors for an explicit io_uring backend when the calling thread has no ring yet (`EPERM`
    /// when `kernel.io_uring_disabled` forbids it, `ENOSYS`, `ENOMEM`, `EMFILE`), `EBUSY` (an
    /// explicit error-queue backend on a socket whose `SO_ZEROCOPY` is set already: see the
    /// sender's one-per-socket rule).
    // doc-end
    #[napi(
        constructor,
        catch_unwind,
        ts_args_type = "fd: number | import('node:net').Socket | { fd: number }, options?: ZcSenderOptions"
    )]
    pub fn new(env: Env, fd: Unknown, options: Option<Unknown>) -> Result<Self> {
        let libuv = is_libuv_handle(&fd)?;
        let o = options.as_ref();
        let backend = args::one_of(&env, o, "backend", BACKENDS)?.unwrap_or_default();
        if libuv && backend == ZcBackend::ErrQueue {
            let msg = "The 'errqueue' backend is refused on a net.Socket: libuv polls it \
                       level-triggered and every unreaped notification would wake Node's event \
                       loop (use 'io_uring', 'copy' or 'auto')";
            return Err(value_error(&env, msg.into()));
        }
        let adaptive = args::bool_opt(&env, o, "adaptive", false)?;
        let opts = ZcOptions::new().backend(backend).adaptive(adaptive);
        let dup = args::dup_fd(&env, &fd, "ZeroCopySender")?;
        let raw = dup.as_raw_fd();
        let core = if libuv {
            Core::with_options_polled(dup, opts) // never the error queue on a socket libuv polls
        } else {
            Core::with_options(dup, opts)
        }
        .or_throw(&env, "ZeroCopySender")?;
        let arr = Object::from_raw(env.raw(), env.create_array(0)?.raw());
        let st = crate::teardown::state(&env)?;
        let inner = Rc::new(RefCell::new(Inner {
            backend: core.backend(),
            core: Some(core),
            slab: Some(arr.create_ref::<false>()?),
            free: Vec::new(),
            next: 0,
            held: 0,
            waiters: Vec::new(),
            fd: raw,
            close_timeout: lowcopy::zc::DEFAULT_CLOSE_TIMEOUT,
            last: None,
            out: vec![Completion::default(); 256],
            data: Vec::new(),
            nums: Vec::new(),
            marked: [UNMARKED; MARKED],
        }));
        st.add_sender(&inner);
        Ok(ZeroCopySender { inner })
    }

    /// The backend in use: `'io_uring'`, `'errqueue'` or `'copy'` (never `'auto'`).
    #[napi(getter, catch_unwind)]
    pub fn backend(&self) -> &'static str {
        args::name_of(BACKENDS, self.inner.borrow().backend)
    }

    /// The sender's own descriptor (its duplicate); -1 once closed.
    #[napi(getter, catch_unwind)]
    pub fn fd(&self) -> i32 {
        let this = self.inner.borrow();
        this.core.as_ref().map_or(-1, |_| this.fd)
    }

    /// Whether `close()` was called.
    #[napi(getter, catch_unwind)]
    pub fn closed(&self) -> bool {
        self.inner.borrow().core.is_none()
    }

    // doc-copy: zc_inflight
    /// Sends that accepted bytes and whose completion has not arrived yet (ready but unreaped
    /// completions are not counted; failed sends never are).
    // doc-end
    #[napi(getter, catch_unwind)]
    pub fn inflight(&self) -> u32 {
        let this = self.inner.borrow();
        this.core.as_ref().map_or(0, |c| c.inflight() as u32)
    }

    /// Buffers held for sends not yet reaped (in flight or completed).
    #[napi(getter, catch_unwind)]
    pub fn held(&self) -> u32 {
        self.inner.borrow().held as u32
    }

    /// Sends `data` (an `ArrayBufferView`, or an array of them sent as one, like `writev`);
    /// returns the bytes accepted. `userData` is any value, handed back unchanged; the buffers
    /// are held until the completion. Blocking unless `dontWait` or the socket is non-blocking
    /// (every `net.Socket` is: then `EAGAIN` when it is full).
    // doc-copy: zc_send.completion
    /// Exactly one completion carrying `userData` follows every send that returned > 0; none
    /// follows a failed or zero-byte send.
    // doc-end
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
    /// Errors: `EINVAL` (flags);
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
    #[napi(
        catch_unwind,
        ts_args_type = "data: ArrayBufferView | ArrayBufferView[], userData?: unknown, options?: ZcSendOptions"
    )]
    pub fn send(
        &self,
        env: Env,
        data: Unknown,
        user_data: Unknown,
        options: Option<Unknown>,
    ) -> Result<f64> {
        let mut this = self.inner.borrow_mut();
        let flags = args::flags(&env, options.as_ref(), "send", true)?;
        let r = this.send(&env, "send", (data, user_data), None, flags)?;
        r.or_throw(&env, "send").map(|n| n as f64)
    }

    /// `send` that never waits and does not throw when the socket is full: returns the bytes
    /// accepted, or -11 (`-EAGAIN`) when there is no room (no completion follows then). Other
    /// errors throw as `send`'s do. For event-loop code that retries on `'drain'`-like
    /// readiness: an exception per full socket costs more than the send.
    #[napi(
        catch_unwind,
        ts_args_type = "data: ArrayBufferView | ArrayBufferView[], userData?: unknown, options?: ZcSendOptions"
    )]
    pub fn try_send(
        &self,
        env: Env,
        data: Unknown,
        user_data: Unknown,
        options: Option<Unknown>,
    ) -> Result<f64> {
        let mut this = self.inner.borrow_mut();
        let flags = args::flags(&env, options.as_ref(), "trySend", true)? | Flags::DONTWAIT;
        match this.send(&env, "trySend", (data, user_data), None, flags)? {
            Ok(n) => Ok(n as f64),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(-(libc::EAGAIN as f64)),
            Err(e) => Err(e).or_throw(&env, "trySend"),
        }
    }

    /// `send` to `address`:`port` (an unconnected UDP socket; IPv4 or IPv6 text), as
    /// `dgram`'s `send(msg, port, address)`. Errors as `send`, and
    // doc-copy: zc_send_msg.errors
    /// the kernel's answers to the address and control data: `EAFNOSUPPORT` (an address of the
    /// other family), `EINVAL` (an address of the wrong length, malformed control messages),
    /// `EISCONN` (an address on a connected AF_UNIX stream socket), ... A connected TCP socket
    /// ignores the address (the send goes to its peer).
    // doc-end
    #[napi(
        catch_unwind,
        ts_args_type = "data: ArrayBufferView | ArrayBufferView[], port: number, address: string, userData?: unknown, options?: ZcSendOptions"
    )]
    pub fn send_to(
        &self,
        env: Env,
        data: Unknown,
        port: Unknown,
        address: Unknown,
        user_data: Unknown,
        options: Option<Unknown>,
    ) -> Result<f64> {
        let mut this = self.inner.borrow_mut();
        let port = size(&env, &port, "port")?;
        if port > 65535 {
            return Err(out_of_range(&env, "port", ">= 0 && <= 65535", port));
        }
        if address.get_type()? != ValueType::String {
            return Err(arg_type_error(&env, "address", "of type string", &address));
        }
        let text = address.coerce_to_string()?.into_utf8()?.into_owned()?;
        let Ok(ip) = text.parse::<IpAddr>() else {
            let msg = format!("The argument 'address' must be an IP address. Received '{text}'");
            return Err(value_error(&env, msg));
        };
        let addr = Some(SocketAddr::new(ip, port as u16));
        let flags = args::flags(&env, options.as_ref(), "sendTo", true)?;
        let r = this.send(&env, "sendTo", (data, user_data), addr, flags)?;
        r.or_throw(&env, "sendTo").map(|n| n as f64)
    }

    /// `send`, then the completions that are ready. Returns `{ bytes, completions }`.
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
    #[napi(
        catch_unwind,
        ts_args_type = "data: ArrayBufferView | ArrayBufferView[], userData?: unknown, options?: ZcSendOptions",
        ts_return_type = "{ bytes: number, completions: ZcCompletion[] }"
    )]
    pub fn send_reap<'e>(
        &self,
        env: &'e Env,
        data: Unknown,
        user_data: Unknown,
        options: Option<Unknown>,
    ) -> Result<Object<'e>> {
        let this = &mut *self.inner.borrow_mut();
        let flags = args::flags(env, options.as_ref(), "sendReap", true)?;
        let (n, k) = this.send_reap(env, data, user_data, flags)?;
        let done = this.completions(env, k)?;
        let mut obj = Object::new(env)?;
        obj.set_named_property("bytes", n as f64)?;
        obj.set_named_property("completions", done)?;
        Ok(obj)
    }

    /// `sendReap` without objects: `userData` is a number, kept by the sender (no JS value
    /// held), and the completions that are ready are written into `out` (a `Float64Array`
    /// reused from call to call) as `reapInto` writes them: their count in `out[0]`, then a
    /// (userData, result, flags) triple each from `out[1]`, at most `(out.length - 1) / 3`
    /// (the rest stay for the next call). Returns the bytes accepted, as `send`. `flags` are
    /// the `ZcFlag` bits (`COPIED` 1, `FALLBACK` 2).
    ///
    /// Errors: `TypeError` for a `userData` that is not a number or an `out` that is not a
    /// `Float64Array`, `RangeError` for an `out` shorter than 4; as `sendReap`.
    #[napi(
        catch_unwind,
        ts_args_type = "data: ArrayBufferView | ArrayBufferView[], userData: number, out: Float64Array, options?: ZcSendOptions"
    )]
    pub fn send_reap_into(
        &self,
        env: Env,
        data: Unknown,
        user_data: Unknown,
        out: Unknown,
        options: Option<Unknown>,
    ) -> Result<f64> {
        send_reap_into(&env, &self.inner, data, user_data, out, options)
    }

    /// `reap` without objects: writes the completions that are ready into `out` (a
    /// `Float64Array`, reused from call to call): their count in `out[0]`, then a (userData,
    /// result, flags) triple each from `out[1]`, at most `(out.length - 1) / 3` (call again
    /// when it was full). A `userData` that is not a number is written as NaN (`reap` hands
    /// such values out). Returns the count. `flags` are the `ZcFlag` bits (`COPIED` 1,
    /// `FALLBACK` 2).
    ///
    /// Errors: `TypeError` for an `out` that is not a `Float64Array`, `RangeError` for one
    /// shorter than 4; as `reap`.
    #[napi(catch_unwind, ts_args_type = "out: Float64Array")]
    pub fn reap_into(&self, env: Env, out: Unknown) -> Result<u32> {
        reap_into(&env, &self.inner, out)
    }

    /// Sends each buffer of `buffers` as a send of its own, with `userDatas[i]` (or
    /// `undefined`) and its own completion, in order; then the completions that are ready.
    /// Returns `{ sends, bytes, completions }`: the sends made (from `buffers[0]` on), the bytes
    /// they accepted, the completions. Each buffer sent is kept as `send` keeps it. Numeric
    /// user data is cheapest in a `Float64Array` (no property read per element).
    // doc-copy: zc_send_batch.kernel
    /// Partial progress as `sendmmsg(2)`: the batch stops after a send that took less than its
    /// whole buffer (a stream socket that filled up: what follows would skip the rest), or at an
    /// error once at least one send went (the error is dropped: a lasting one meets the next call);
    /// only an error of the first send is returned. Each send follows the send rules (a blocking
    /// stream send waits for room, `MSG_DONTWAIT` does not), one syscall each as today's kernels
    /// have no batched zerocopy send that keeps one completion per buffer.
    // doc-end
    ///
    /// Errors: `TypeError` for a `buffers` that is not an array of `ArrayBufferView`s or a
    /// `userDatas` that is not an array or a `Float64Array`, `RangeError` for one of another
    /// length; the first send's errors as `send`.
    #[napi(
        catch_unwind,
        ts_args_type = "buffers: ArrayBufferView[], userDatas?: unknown[] | Float64Array, options?: ZcSendOptions",
        ts_return_type = "{ sends: number, bytes: number, completions: ZcCompletion[] }"
    )]
    pub fn send_batch<'e>(
        &self,
        env: &'e Env,
        buffers: Unknown,
        user_datas: Option<Unknown>,
        options: Option<Unknown>,
    ) -> Result<Object<'e>> {
        let flags = args::flags(env, options.as_ref(), "sendBatch", true)?;
        let items = args::array(env, &buffers, "buffers")?;
        let (sends, bytes, k) = send_batch(env, &self.inner, &items, user_datas, flags)?;
        let list = self.inner.borrow_mut().completions(env, k)?;
        let mut obj = Object::new(env)?;
        obj.set_named_property("sends", sends)?;
        obj.set_named_property("bytes", bytes)?;
        obj.set_named_property("completions", list)?;
        Ok(obj)
    }

    /// The completions that are ready, releasing their buffers.
    // doc-copy: zc_reap.kernel
    /// Never blocks. Collects what the kernel has reported first: one error-queue read while sends
    /// are in flight; no syscall for io_uring (unless the kernel deferred notifications or the
    /// completion queue overflowed) and copy. On io_uring this also takes in the other senders'
    /// notifications that have arrived on the thread's ring, keeping them for those senders.
    // doc-end
    ///
    /// Errors:
    // doc-copy: zc_reap.errors
    /// Error-queue read errors; `EEXIST` on io_uring from a thread other than the one the sender
    /// belongs to (once it joined a ring); `EIO` when its ring was retired.
    // doc-end
    #[napi(catch_unwind)]
    pub fn reap(&self, env: Env) -> Result<Vec<ZcCompletion>> {
        let mut all = Vec::new();
        self.inner.borrow_mut().reap_chunks(&env, "reap", |s, n| {
            all.extend(s.completions(&env, n)?);
            Ok(())
        })?;
        Ok(all)
    }

    /// Waits (blocking the JS thread) until a completion is ready, at most `timeoutMs` (none:
    /// no limit); `reap` then hands the completions out.
    // doc-copy: zc_wait.kernel
    /// Returns the number ready to reap; 0 at once when nothing is in flight (it never waits for a
    /// notification that cannot come).
    // doc-end
    ///
    /// Errors:
    // doc-copy: zc_wait.errors
    /// `ETIMEDOUT` when sends are in flight and none completed in time (TCP notifies only once the
    /// peer acknowledged, so a peer that stops reading delays completions without bound); `EINTR`
    /// on a signal (the wait is a poll or `io_uring_enter`, which the kernel never restarts);
    /// `EEXIST` (io_uring backend from a thread other than the one the sender belongs to); `EIO`
    /// (its ring was retired); a pending socket error (`ECONNRESET`, ...) when the socket reports
    /// one instead of a completion; error-queue read errors.
    // doc-end
    #[napi(catch_unwind, ts_args_type = "timeoutMs?: number")]
    pub fn wait(&self, env: Env, timeout_ms: Option<Unknown>) -> Result<u32> {
        let mut this = self.inner.borrow_mut();
        let t = args::timeout_ms(&env, timeout_ms.as_ref())?;
        let n = open(&mut this.core, &env, "wait")?.wait(t);
        Ok(n.or_throw(&env, "wait")? as u32)
    }

    /// `wait` whose sleep runs off the JS thread (on a thread of its own: it polls the
    /// completion descriptor, the io_uring ring or the socket), then collects on the JS thread, so
    /// the io_uring backend stays with its thread. Resolves with the number of completions
    /// ready to reap, as `wait` returns (0 when nothing is in flight); rejects `ETIMEDOUT`, or
    /// with an `AbortError` when `close()` is called meanwhile. A worker's `terminate()` (or
    /// exit) ends it.
    #[napi(
        catch_unwind,
        ts_args_type = "timeoutMs?: number",
        ts_return_type = "Promise<number>"
    )]
    pub fn wait_async<'e>(&self, env: &'e Env, timeout_ms: Option<Unknown>) -> Result<Object<'e>> {
        let mut this = self.inner.borrow_mut();
        let t = args::timeout_ms(env, timeout_ms.as_ref())?;
        let wait = open(&mut this.core, env, "waitAsync")?.detached_wait();
        let wait = wait.or_throw(env, "waitAsync")?;
        crate::teardown::spawn(env, "waitAsync", |cancel| {
            this.waiters.retain(|w| Arc::strong_count(w) > 1);
            this.waiters.push(cancel.clone());
            ZcWaitTask {
                this: self as *const ZeroCopySender,
                wait,
                cancel,
                deadline: crate::peek::deadline(t),
            }
        })
    }

    /// The counters so far; after `close()`, as closing left them (with its `close*` counters).
    #[napi(catch_unwind)]
    pub fn stats(&self, env: Env) -> Result<ZcStats> {
        let this = self.inner.borrow();
        let s = match (&this.core, this.last) {
            (Some(core), _) => core.stats(),
            (None, Some(last)) => last,
            (None, None) => return Err(sys_error(&env, libc::EBADF, "stats")),
        };
        Ok((&s).into())
    }

    /// Closes the sender by the core's close policy (`ZeroCopySender::close_with`), releasing
    /// each buffer as its completion comes (those completions are dropped: their `userData` is
    /// not handed back), and returns the sends abandoned, whose buffers are then kept for the
    /// life of the process; `stats()` keeps answering, with the counters below. A pending
    /// `waitAsync` rejects with an `AbortError`. Calling it again returns 0. It blocks the JS
    /// thread while closing waits. The same happens to a sender collected without `close()`,
    /// and to every live sender of a worker (or the main thread) when it ends.
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
    #[napi(catch_unwind)]
    pub fn close(&self, env: Env) -> u32 {
        if let Some(st) = crate::teardown::existing(&env) {
            st.remove_sender(&self.inner);
        }
        let mut this = self.inner.borrow_mut();
        let t = this.close_timeout;
        this.shut(Some(&env), t) as u32
    }
}

/// `ZeroCopySender.sendBatch`'s work (the class method and the bound function's): the sends
/// made, the bytes they accepted, the completions ready (in `out`).
fn send_batch(
    env: &Env,
    inner: &RefCell<Inner>,
    items: &[Unknown],
    user_datas: Option<Unknown>,
    flags: Flags,
) -> Result<(f64, f64, usize)> {
    let this = &mut *inner.borrow_mut();
    let uds = user_datas.filter(|u| !matches!(u.get_type(), Ok(ValueType::Undefined)));
    // A Float64Array's numbers are read without a property access each (about 600
    // instructions an element, callgrind).
    let uds: Option<Vec<Ud>> = match uds.map(|u| (float64s(env, &u), u)) {
        None => None,
        Some((Some(x), _)) => Some(x.iter().map(|&x| Ud::Num(x)).collect()),
        Some((None, u)) if u.is_array()? => {
            let items = args::array(env, &u, "userDatas")?;
            Some(items.iter().map(|u| Ud::Js(u.raw())).collect())
        }
        Some((None, u)) => {
            let must = "an instance of Array or Float64Array";
            return Err(arg_type_error(env, "userDatas", must, &u));
        }
    };
    if let Some(n) = uds.as_ref().map(Vec::len).filter(|&n| n != items.len()) {
        let must = format!("have {} items", items.len());
        return Err(out_of_range(env, "userDatas", &must, n));
    }
    let views = crate::peek::views_of(env, items, "buffers")?;
    open(&mut this.core, env, "sendBatch")?;
    let mut slots = Vec::with_capacity(items.len());
    for (item, view) in items.iter().zip(&views) {
        match this.take_slot(env, item, std::slice::from_ref(view)) {
            Ok(s) => slots.push(s as u64),
            Err(e) => {
                slots.iter().for_each(|&s| this.unhold(env, s as u32));
                return Err(e);
            }
        }
    }
    let iov: Vec<libc::iovec> = views.iter().map(View::iovec).collect();
    let core = this.core.as_mut().expect("checked above");
    // SAFETY: each buffer is held (`take_slot`) until its completion is reaped, or by
    // the close policy's abandoned sends for ever.
    let r = unsafe { core.send_batch_raw(&iov, &slots, flags, &mut this.out) };
    let done = match r {
        Ok(b) => b,
        Err(e) => {
            slots.iter().for_each(|&s| this.unhold(env, s as u32));
            return Err(e).or_throw(env, "sendBatch");
        }
    };
    // Sends that accepted bytes keep their buffer until their completion; the others
    // (not sent, or zero-length) none.
    for (i, &slot) in slots.iter().enumerate() {
        let keep = done.completes(i, iov[i].iov_len);
        this.settle(env, slot as u32, keep, uds.as_ref().map(|u| u[i]))?;
    }
    Ok((done.sends as f64, done.bytes as f64, done.completions))
}

/// `ZeroCopySender.sendReapInto`'s work (the class method and the bound function's).
fn send_reap_into(
    env: &Env,
    inner: &RefCell<Inner>,
    data: Unknown,
    user_data: Unknown,
    out: Unknown,
    options: Option<Unknown>,
) -> Result<f64> {
    let this = &mut *inner.borrow_mut();
    let flags = args::flags(env, options.as_ref(), "sendReapInto", true)?;
    // The user value is a number the sender keeps (no JS value held).
    let ud = Ud::Num(args::number(env, &user_data, "userData")?);
    // The data's views (an array's elements are read first: their getters can run JS), then
    // `out`'s: no JS runs from there on (see `View`).
    let data = (&data, this.views(env, &data)?);
    let dst = f64_out(env, &out)?;
    let room = ((dst.len() - 1) / 3).min(this.out.len());
    let r = this.send_with(env, "sendReapInto", data, ud, |core, iov, slot, out| {
        // SAFETY: the views' buffers are held (`take_slot`) until the completion is
        // reaped, or by the close policy's abandoned sends for ever.
        unsafe { core.send_reap_raw(iov, flags, slot, &mut out[..room]) }
    })?;
    let (n, k) = r.or_throw(env, "sendReapInto")?;
    this.completions_into(env, k, dst)?;
    Ok(n as f64)
}

// `sendReapInto` without options as a function bound to its sender (`lowcopy.js` calls it in
// place of the class method), skipping what a napi-rs class method does on every call before
// any of lowcopy's work (a type-tag check and an unwrap of `this`, each a V8 private-property
// lookup, and a native-borrow registration), as `Peeker.peekInto` does (`node/src/peek.rs`).
/// `sender`'s `sendReapInto`, `sendReap` and `sendBatch` (without options), `reapInto` and
/// `reap` as functions bound to it. Internal.
#[napi(
    js_name = "_senderBind",
    catch_unwind,
    ts_return_type = "{ sendReapInto(data: ArrayBufferView | ArrayBufferView[], userData: number, out: Float64Array): number, reapInto(out: Float64Array): number, sendReap(data: ArrayBufferView | ArrayBufferView[], userData?: unknown): unknown[], reap(): unknown[], sendBatch(buffers: ArrayBufferView[], userDatas?: unknown[] | Float64Array): unknown[], sendBatchOf(userDatas: unknown[] | Float64Array | undefined, n: number, ...buffers: ArrayBufferView[]): unknown[] }"
)]
pub fn sender_bind<'a>(env: &'a Env, sender: &ZeroCopySender) -> Result<Object<'a>> {
    bound_fns!(env, sender.inner, Rc<RefCell<Inner>>, {
        "sendReapInto" => |env: &Env, inner: &Rc<RefCell<Inner>>, [data, ud, out]: [Unknown; 3]| {
            send_reap_into(env, inner, data, ud, out, None)
        },
        "reapInto" => |env: &Env, inner: &Rc<RefCell<Inner>>, [out]: [Unknown; 1]| {
            reap_into(env, inner, out)
        },
        // The calls that return objects, as [values..., then (userData, result, flags) each]
        // (`Inner::flat`): `lowcopy.js` makes the objects.
        "sendReap" => |env: &Env, inner: &Rc<RefCell<Inner>>, [data, ud]: [Unknown; 2]| {
            let this = &mut *inner.borrow_mut();
            let flags = args::flags(env, None, "sendReap", true)?;
            let (n, k) = this.send_reap(env, data, ud, flags)?;
            this.flat(env, &[n as f64], k)
        },
        "reap" => |env: &Env, inner: &Rc<RefCell<Inner>>, []: [Unknown; 0]| {
            let mut v = Vec::new();
            let take = |s: &mut Inner, n| s.push_flat(env, &mut v, n);
            inner.borrow_mut().reap_chunks(env, "reap", take)?;
            js_array(env, &v)
        },
        "sendBatch" => |env: &Env, inner: &Rc<RefCell<Inner>>, [bufs, uds]: [Unknown; 2]| {
            let items = args::array(env, &bufs, "buffers")?;
            let (sends, bytes, k) = send_batch(env, inner, &items, Some(uds), Flags::NONE)?;
            inner.borrow_mut().flat(env, &[sends, bytes], k)
        },
        // `sendBatch(userDatas, n, ...buffers)` of an array of at most `SPREAD` buffers, spread
        // by `lowcopy.js`: the arguments come in one N-API call, where reading an array costs
        // one (napi_get_element, about 600 instructions) per element (callgrind).
        "sendBatchOf" => |env: &Env, inner: &Rc<RefCell<Inner>>, a: [Unknown; 2 + SPREAD]| {
            let n = args::size(env, &a[1], "n")?.min(SPREAD);
            let (sends, bytes, k) = send_batch(env, inner, &a[2..2 + n], Some(a[0]), Flags::NONE)?;
            inner.borrow_mut().flat(env, &[sends, bytes], k)
        },
    })
}

/// The most buffers `lowcopy.js` passes to `sendBatchOf` as arguments of their own.
const SPREAD: usize = 32;

/// `ZeroCopySender.reapInto`'s work (the class method and the bound function's).
fn reap_into(env: &Env, inner: &RefCell<Inner>, out: Unknown) -> Result<u32> {
    let this = &mut *inner.borrow_mut();
    let dst = f64_out(env, &out)?;
    let room = ((dst.len() - 1) / 3).min(this.out.len());
    let k = open(&mut this.core, env, "reapInto")?.reap(&mut this.out[..room]);
    let k = k.or_throw(env, "reapInto")?;
    this.completions_into(env, k, dst)?;
    Ok(k as u32)
}

/// `waitAsync`: polls on its own thread, reaps in `resolve` on the JS thread.
pub struct ZcWaitTask {
    /// The sender, used only in `resolve` (JS thread), where the JS object is alive: the
    /// promise's task keeps no reference, so `resolve` checks `closed` through `cancel`.
    this: *const ZeroCopySender,
    wait: lowcopy::zc::DetachedWait,
    cancel: Arc<AbortHandle>,
    /// When the wait ends (`None`: no limit), counted from the call.
    deadline: Option<std::time::Instant>,
}

// SAFETY: `this` is dereferenced only in `resolve`, on the JS thread that owns the object; the
// waiting thread touches only the owned descriptors.
unsafe impl Send for ZcWaitTask {}

impl Task for ZcWaitTask {
    type Output = std::result::Result<(), Fail>;
    type JsValue = u32;

    fn compute(&mut self) -> Result<Self::Output> {
        let left = crate::peek::left(self.deadline);
        Ok(match self.wait.wait(Some(&self.cancel), left) {
            Ok(Wakeup::Ready) => Ok(()),
            Ok(Wakeup::Aborted) => Err(Fail::Aborted),
            Ok(Wakeup::TimedOut) => Err(Fail::Errno(libc::ETIMEDOUT)),
            Err(e) => Err(e.into()),
        })
    }

    fn resolve(&mut self, env: Env, out: Self::Output) -> Result<u32> {
        out.map_err(|f| f.into_error(&env, "waitAsync"))?;
        if self.cancel.is_aborted() {
            return Err(Fail::Aborted.into_error(&env, "waitAsync"));
        }
        // SAFETY: not closed (`close()` would have aborted `cancel`), so the JS object that
        // `close()` needs is alive; on the JS thread, no other borrow of it is live.
        let this = unsafe { &*self.this };
        let mut this = this.inner.borrow_mut();
        let Some(c) = this.core.as_mut() else {
            return Ok(0);
        };
        // Post deferred io_uring notifications / read the error queue: the count ready. A wake
        // that found none ready (an error-queue entry that was no completion) is 0.
        match c.wait(Some(std::time::Duration::ZERO)) {
            Ok(n) => Ok(n as u32),
            Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => Ok(0),
            Err(e) => Err(e).or_throw(&env, "waitAsync"),
        }
    }
}
