//! A native object a JS object shares with its one pending async call (a `Peeker`'s peeker, a
//! `Receiver`'s receiver): the call runs on one of lowcopy's threads ([`crate::teardown`])
//! while the JS thread goes on, and the object's other calls are `EBUSY` until it is over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use lowcopy::AbortHandle;
use napi::bindgen_prelude::*;
use napi::Env;

use crate::error::{sys_error, Fail, OrThrow};
use crate::teardown::BufferTask;

/// The object, its pending async call's abort handle and the flags between them.
pub struct Shared<C> {
    obj: Mutex<Option<C>>,
    /// `close()` was called: an async call that has not taken the object yet never will.
    close_requested: AtomicBool,
    /// The pending async call's abort handle: `close()` aborts it to wake it.
    waiter: Mutex<Option<Arc<AbortHandle>>>,
    /// An async call is pending, from the call that made it until its task is gone (its
    /// promise settled, or no thread ran it): the other calls are `EBUSY` meanwhile, before
    /// its thread took the lock too, and after it let go until the caller has its result.
    busy: AtomicBool,
}

impl<C: Send + 'static> Shared<C> {
    pub fn new(obj: C) -> Arc<Self> {
        Arc::new(Shared {
            obj: Mutex::new(Some(obj)),
            close_requested: AtomicBool::new(false),
            waiter: Mutex::new(None),
            busy: AtomicBool::new(false),
        })
    }

    /// Runs `f` on the object: `EBUSY` while an async call is pending, `EBADF` once closed,
    /// both as system errors of `what`, as is `f`'s error.
    pub fn with<T>(
        &self,
        env: &Env,
        what: &str,
        f: impl FnOnce(&mut C) -> std::io::Result<T>,
    ) -> Result<T> {
        let busy = || sys_error(env, libc::EBUSY, what);
        let mut g = match self.obj.try_lock() {
            _ if self.busy.load(Ordering::Acquire) => return Err(busy()),
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(busy()),
        };
        let c = g
            .as_mut()
            .ok_or_else(|| sys_error(env, libc::EBADF, what))?;
        f(c).or_throw(env, what)
    }

    /// Whether `close()` was called.
    pub fn closed(&self) -> bool {
        self.close_requested.load(Ordering::Acquire)
    }

    /// Closes: aborts the pending async call (it rejects with an `AbortError`, or resolves with
    /// what it had taken), waits for it to let go of the object (at once: its waits end on the
    /// abort) and hands the object back, so the socket is as the object found it when `close()`
    /// returns (a new object over it is not undone later by the old call ending).
    pub fn close(&self) -> Option<C> {
        self.close_requested.store(true, Ordering::Release);
        if let Some(w) = self.waiter().as_ref() {
            w.abort();
        }
        self.obj
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The async call `what`: `f` on the object on one of lowcopy's threads, its `AbortHandle`
    /// aborted by `close()` or the environment's teardown; its promise resolves with the bytes
    /// `f` returns. `EBADF` once closed, `EBUSY` while another is pending.
    pub fn spawn<'e>(
        self: &Arc<Self>,
        env: &'e Env,
        what: &'static str,
        f: impl FnOnce(&mut C, &AbortHandle) -> std::result::Result<Vec<u8>, Fail> + Send + 'static,
    ) -> Result<Object<'e>> {
        if self.closed() {
            return Err(sys_error(env, libc::EBADF, what));
        }
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(sys_error(env, libc::EBUSY, what));
        }
        let claim = Claim(self.clone());
        // The task keeps the claim until it is dropped, on the JS thread once the promise is
        // settled: a call made when the work is done but before the caller saw its result is
        // still EBUSY. So `f` is taken out of an Option by the task's (FnMut) closure, which
        // keeps the claim.
        let mut f = Some(f);
        crate::teardown::spawn(env, what, move |abort| {
            *claim.0.waiter() = Some(abort.clone());
            BufferTask(what, move || {
                let f = f.take().ok_or(Fail::Errno(libc::EINVAL))?; // a task runs once
                claim.0.run(&abort, f)
            })
        })
    }

    /// The async call's work on its thread.
    fn run<T>(
        &self,
        abort: &AbortHandle,
        f: impl FnOnce(&mut C, &AbortHandle) -> std::result::Result<T, Fail>,
    ) -> std::result::Result<T, Fail> {
        let mut g = self.obj.lock().unwrap_or_else(PoisonError::into_inner);
        // The object is there until close(), which spawn() checked for.
        let r = match g.as_mut() {
            Some(c) if !self.closed() => f(c, abort),
            _ => Err(Fail::Aborted),
        };
        drop(g); // close(), waiting for it, takes the object
        self.waiter().take();
        r
    }

    fn waiter(&self) -> MutexGuard<'_, Option<Arc<AbortHandle>>> {
        self.waiter.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An async call's claim on its object (`busy`), dropped with the call's task.
struct Claim<C>(Arc<Shared<C>>);

impl<C> Drop for Claim<C> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}
