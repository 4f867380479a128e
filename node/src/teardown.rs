//! What lowcopy holds in one Node environment (the main thread's, or a worker's), and how it
//! lets go of it when the environment ends: a worker's `terminate()`, `process.exit()` in a
//! worker, a worker or the main thread whose event loop ran out of work.
//!
//! # When Node tears an environment down
//!
//! `FreeEnvironment` (node/src/env.cc `Environment::RunCleanup`) first closes the environment's
//! handles and then spins its event loop until every queued thread-pool request is done
//! (`CleanupHandles`, which waits while `request_waiting_ != 0`); only then does it run the
//! cleanup hooks, newest first. `napi_add_env_cleanup_hook` and `napi_add_async_cleanup_hook`
//! both go into that one hook queue, so neither runs before that wait: a `napi_async_work`
//! (napi-rs `AsyncTask`) sleeping in a wait without a timeout holds `terminate()` back for ever,
//! and no hook of ours ever runs to abort it (tried on Node 20: a worker with a pending
//! `peekAtAsync` whose hooks print nothing and whose `terminate()` never resolves; the same
//! worker without the pending call prints both hooks' lines). After the hooks, the `napi_env`
//! goes (its finalizers run: references, wrapped objects) and then the isolate is disposed,
//! which frees the environment's heap and every `ArrayBuffer` in it.
//!
//! So lowcopy's waits (`peekAsync`, `peekAtAsync`, `recvAtLeastAsync`, `waitAsync`) do not run
//! as thread-pool requests: each runs on one of lowcopy's own threads ([`spawn`], a small pool)
//! and settles its promise through a `JsDeferred` (a thread-safe function, which keeps the
//! event loop alive as a pending request did, and which Node does not wait for at teardown).
//! Nothing of lowcopy's then holds `CleanupHandles` back, and the sync cleanup hook is enough
//! (an async one would only keep the loop spinning while it waits; closing waits in the core,
//! synchronously): [`teardown`], registered with the environment's [`EnvState`] the first time
//! lowcopy is used in it, runs before the `napi_env`'s finalizers and before the heap is freed,
//! and:
//!
//! 1. aborts every pending wait of the environment at once (their `AbortHandle`s): their
//!    threads go back to the pool, and their promises are dropped with the environment
//!    (`recvAtLeastAsync` through the core's `recv_atleast_abortable`, which hands back any
//!    bytes it took and leaves the rest queued);
//! 2. closes every live `ZeroCopySender` of the environment with the core's close policy
//!    (`ZeroCopySender::close_with`: wait for the sends in flight, reset a stream whose
//!    completions do not come), all under one deadline, so that N stuck senders cost about one
//!    close timeout, not N (the first waits out the deadline, the others then have 0 left and
//!    reset at once); after that the kernel no longer reads any page of the heap that is about
//!    to be freed. The one exception is a send the core abandons (still in flight after the
//!    reset and its short wait: pages held by a device queue, or a datagram socket, which is
//!    not reset): an ArrayBuffer cannot outlive its isolate, so its memory goes with the heap;
//!    `close()` before the worker ends keeps such buffers for the life of the process.
//!
//! The registry lives in the environment's instance data (`napi_set_instance_data`); it is
//! touched only on the environment's JS thread (calls, promise settlements, the hook).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowcopy::AbortHandle;
use napi::bindgen_prelude::*;
use napi::{Env, JsDeferred};

use crate::error::{Fail, OrThrow};
use crate::zc::Inner as SenderInner;

/// One environment's live senders and pending waits.
#[derive(Default)]
pub(crate) struct EnvState {
    /// Pending async waits, by the address of their handle.
    pending: RefCell<HashMap<usize, std::sync::Weak<AbortHandle>>>,
    /// Live `ZeroCopySender`s, by the address of their state.
    senders: RefCell<HashMap<usize, Weak<RefCell<SenderInner>>>>,
    /// The cleanup hook ran: the environment is going away.
    gone: Cell<bool>,
}

/// The environment's state, made (with its cleanup hook) on first use.
pub(crate) fn state(env: &Env) -> Result<Rc<EnvState>> {
    if let Some(st) = env.get_instance_data::<Rc<EnvState>>()? {
        return Ok(st.clone());
    }
    let st = Rc::new(EnvState::default());
    env.set_instance_data(st.clone(), (), |_| {})?;
    // The hook is registered before any of this environment's promises (each `JsDeferred`
    // registers a hook of its own when it is made), so it runs after theirs: by then their
    // thread-safe functions are released and a wait that ends now drops its result.
    env.add_env_cleanup_hook(st.clone(), teardown)?;
    Ok(st)
}

/// The environment's state if lowcopy made one (never makes one: for finalizers and `close()`,
/// which may run while the environment is being torn down).
pub(crate) fn existing(env: &Env) -> Option<Rc<EnvState>> {
    let st = env.get_instance_data::<Rc<EnvState>>().ok()??;
    Some(st.clone())
}

impl EnvState {
    /// Registers a pending wait: the hook aborts it.
    pub(crate) fn add_wait(&self, h: &Arc<AbortHandle>) {
        self.pending
            .borrow_mut()
            .insert(Arc::as_ptr(h) as usize, Arc::downgrade(h));
    }

    fn remove_wait(&self, key: usize) {
        self.pending.borrow_mut().remove(&key);
    }

    /// Registers a live sender: the hook closes it.
    pub(crate) fn add_sender(&self, s: &Rc<RefCell<SenderInner>>) {
        self.senders
            .borrow_mut()
            .insert(Rc::as_ptr(s) as usize, Rc::downgrade(s));
    }

    /// A sender closed or finalized.
    pub(crate) fn remove_sender(&self, s: &Rc<RefCell<SenderInner>>) {
        self.senders.borrow_mut().remove(&(Rc::as_ptr(s) as usize));
    }
}

/// The environment's cleanup hook: see the module documentation.
fn teardown(st: Rc<EnvState>) {
    st.gone.set(true);
    let pending: Vec<_> = st.pending.borrow_mut().drain().collect();
    for (_, w) in pending {
        if let Some(h) = w.upgrade() {
            h.abort();
        }
    }
    let senders: Vec<_> = st
        .senders
        .borrow_mut()
        .drain()
        .filter_map(|(_, w)| w.upgrade())
        .collect();
    // One deadline for all: each sender gets the time left of it, bounded by its own timeout.
    let budget = senders
        .iter()
        .map(|s| s.borrow().close_timeout())
        .max()
        .unwrap_or(Duration::ZERO);
    let deadline = Instant::now() + budget;
    for s in senders {
        let left = deadline.saturating_duration_since(Instant::now());
        s.borrow_mut().close_at_teardown(left);
    }
}

type Resolver<V> = Box<dyn FnOnce(Env) -> Result<V>>;

/// A promise to settle: rejected when dropped unsettled (its thread could not be made), so that
/// its thread-safe function, which keeps the event loop alive, is always released.
struct Settle<V: ToNapiValue>(Option<JsDeferred<V, Resolver<V>>>, &'static str);

impl<V: ToNapiValue> Drop for Settle<V> {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let msg = format!("{}: no thread could be started for the wait", self.1);
            d.reject(Error::from_reason(msg));
        }
    }
}

/// The task `make` builds run on a thread of its own; settles the promise returned.
///
/// `make` is given the task's abort handle, which `close()` may abort to end its wait; it is
/// registered with the environment for the task's life, so that the cleanup hook ends the
/// wait too.
pub(crate) fn spawn<'e, T>(
    env: &'e Env,
    what: &'static str,
    make: impl FnOnce(Arc<AbortHandle>) -> T,
) -> Result<Object<'e>>
where
    T: Task + Send + 'static,
    T::Output: Send + 'static,
{
    let abort = Arc::new(AbortHandle::new().or_throw(env, what)?);
    let mut task = make(abort.clone());
    let st = state(env)?;
    if st.gone.get() {
        return Err(crate::error::sys_error(env, libc::ECANCELED, what));
    }
    let (deferred, promise) = env.create_deferred::<T::JsValue, Resolver<T::JsValue>>()?;
    st.add_wait(&abort);
    let key = Arc::as_ptr(&abort) as usize;
    let mut settle = Settle(Some(deferred), what);
    let run = move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.compute()));
        let Some(deferred) = settle.0.take() else {
            return;
        };
        deferred.resolve(Box::new(move |env: Env| {
            if let Ok(Some(st)) = env.get_instance_data::<Rc<EnvState>>() {
                st.remove_wait(key);
            }
            match out {
                Ok(Ok(out)) => task.resolve(env, out),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(Error::from_reason(format!("panic in {what}"))),
            }
        }));
    };
    // When no thread can be had, the closure is dropped unrun and `Settle` rejects the promise.
    if !pool::run(Box::new(run)) {
        st.remove_wait(key);
    }
    Ok(promise)
}

/// A wait whose result is a `Buffer` (the async peeks and receives): `run` (the second field)
/// on the wait's thread; its failure rejects as an error of the call named by the first.
pub(crate) struct BufferTask<F>(pub &'static str, pub F);

impl<F> Task for BufferTask<F>
where
    F: FnMut() -> std::result::Result<Vec<u8>, Fail> + Send,
{
    type Output = std::result::Result<Vec<u8>, Fail>;
    type JsValue = Buffer;

    fn compute(&mut self) -> Result<Self::Output> {
        Ok((self.1)())
    }

    fn resolve(&mut self, env: Env, out: Self::Output) -> Result<Buffer> {
        out.map(Buffer::from)
            .map_err(|f| f.into_error(&env, self.0))
    }
}

/// The threads the waits run on: process-wide, made on demand, each kept for a while once idle
/// (a new thread per call would cost tens of microseconds). Node neither knows nor waits for
/// them: every wait is aborted at teardown, and none holds anything of its environment.
mod pool {
    use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
    use std::sync::Mutex;
    use std::time::Duration;

    type Job = Box<dyn FnOnce() + Send>;

    /// How long an idle thread waits for work before it ends.
    const IDLE: Duration = Duration::from_secs(10);

    /// The idle threads, each by its id and the sender of its job channel.
    static IDLE_THREADS: Mutex<Vec<(u64, Sender<Job>)>> = Mutex::new(Vec::new());
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    fn idle() -> std::sync::MutexGuard<'static, Vec<(u64, Sender<Job>)>> {
        IDLE_THREADS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `job` on an idle thread, or on a new one; false (and `job` dropped) when no thread
    /// could be made.
    pub(super) fn run(mut job: Job) -> bool {
        loop {
            let Some((_, tx)) = idle().pop() else { break };
            match tx.send(job) {
                Ok(()) => return true,
                // That thread is gone (it cannot be: an idle thread leaves the list before it
                // ends); try the next one.
                Err(e) => job = e.0,
            }
        }
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The waits need little stack: the core's calls, and buffers on the heap.
        std::thread::Builder::new()
            .name("lowcopy wait".into())
            .stack_size(256 << 10)
            .spawn(move || serve(id, job))
            .is_ok()
    }

    /// A pool thread: runs its first job, then whatever it is handed while idle, until it has
    /// been idle for `IDLE`.
    fn serve(id: u64, first: Job) {
        let (tx, rx) = channel::<Job>();
        first();
        loop {
            idle().push((id, tx.clone()));
            let job = match rx.recv_timeout(IDLE) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    let mut list = idle();
                    if let Some(i) = list.iter().position(|(w, _)| *w == id) {
                        list.swap_remove(i);
                        return;
                    }
                    // Taken off the list meanwhile: a job is on its way.
                    drop(list);
                    match rx.recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            job();
        }
    }
}
