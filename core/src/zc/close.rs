//! The close policy: what closing or dropping a sender does with its sends in flight.

use super::*;

impl<F: AsFd, B: ZcBuf> Drop for ZeroCopySender<F, B> {
    /// Closes the sender by the close policy (see [`ZeroCopySender::close`]), then drops `F`.
    // doc-source: zc_drop.kernel
    /// An io_uring sender leaves its thread's ring open (the ring outlives its senders); the
    /// notifications still to come for an abandoned send are counted off there and delivered to
    /// nobody. A ring is closed when its thread exits and no sender joined to it is left (then
    /// the kernel runs task work on the closing thread, io_uring/io_uring.c
    /// `io_ring_exit_work`, so that thread's next blocking syscall may return `EINTR` once).
    // doc-end
    fn drop(&mut self) {
        let t = self.close_timeout;
        self.settle(t, true, &mut |_, _| {});
        self.leave();
    }
}

impl<F: AsFd, B: ZcBuf> ZeroCopySender<F, B> {
    /// Closes the sender by the close policy, with its own close timeout, and returns its
    /// counters (`close_completed`, `close_resets`, `close_abandoned` say what the policy did).
    /// Completions still to be reaped are dropped with their buffers. Dropping the sender does
    /// the same. The socket itself is closed only by dropping `F`, after all of this.
    // doc-source: zc_close.policy
    /// Closing never lets the kernel read memory the program has given up. The sender first
    /// waits for the completions of its sends in flight, up to its close timeout (1 s by
    /// default). If some are still missing (TCP notifies only once the peer acknowledged: a
    /// peer that stopped reading holds them) and the socket is a stream, it resets the
    /// connection (`connect` with `AF_UNSPEC`: the kernel sends a RST and purges its send
    /// queues, releasing their pages; the peer sees a reset, never wrong bytes) and waits up to
    /// 1 s more for the completions that follow. A datagram socket is not reset: its sends
    /// complete once the device has sent them. Sends still in flight after that are abandoned:
    /// the memory of each stays in use by the kernel for ever (an owned buffer is leaked, never
    /// freed). The counters say what happened: `close_completed`, `close_resets`,
    /// `close_abandoned`. An io_uring sender closed on another thread than the one whose ring
    /// it joined cannot wait: it resets a stream at once and abandons what is still in flight.
    /// Closing waits in `poll` or `io_uring_enter`; a signal does not cut it short.
    // doc-end
    pub fn close(self) -> ZcStats {
        let t = self.close_timeout;
        self.close_with(t, |_, _| {})
    }

    /// [`ZeroCopySender::close`] with a close timeout of `timeout`, handing every completion
    /// it takes in (ready ones, and those that arrive while it waits) to `f` with what its send
    /// owned, so that a caller releases each buffer as its completion comes.
    pub fn close_with(
        mut self,
        timeout: Duration,
        f: impl FnMut(Completion, Option<Owned<B>>),
    ) -> ZcStats {
        self.close_in_place(timeout, f)
    }

    /// [`ZeroCopySender::close_with`] for an owner that cannot give the sender up (a handle
    /// behind a pointer, as the C ABI's): the sender is closed when this returns, and every
    /// later send fails with `EPIPE`; dropping it then does nothing more. A second call only
    /// returns the counters.
    pub fn close_in_place(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(Completion, Option<Owned<B>>),
    ) -> ZcStats {
        self.settle(timeout, true, &mut f);
        self.stats()
    }

    /// The close policy (see [`ZeroCopySender::close`]); runs once.
    pub(super) fn settle(
        &mut self,
        timeout: Duration,
        reset: bool,
        f: &mut dyn FnMut(Completion, Option<Owned<B>>),
    ) {
        if self.settled {
            return;
        }
        self.settled = true;
        // `f` is the caller's and may panic: then every buffer still held is leaked (the kernel
        // may yet read it) before the panic goes on, as if the policy had abandoned them.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.settle_held(timeout, reset, f)
        }));
        if let Err(panic) = r {
            for owned in self.held.drain(..).flatten() {
                std::mem::forget(owned);
            }
            std::panic::resume_unwind(panic);
        }
    }

    /// [`ZeroCopySender::settle`]'s work, once `settled` is set.
    fn settle_held(
        &mut self,
        timeout: Duration,
        reset: bool,
        f: &mut dyn FnMut(Completion, Option<Owned<B>>),
    ) {
        let mut taken = 0;
        if self.tracker.inflight() > 0 {
            let here = self.check_thread().is_ok();
            if here {
                taken += self.wait_out(timeout, f);
            }
            if self.tracker.inflight() > 0 && reset && self.stream {
                self.stats.syscalls_reap += 1;
                if sys::disconnect(self.fd.as_fd()).is_ok() {
                    self.stats.close_resets += 1;
                    if here {
                        taken += self.wait_out(RESET_WAIT, f);
                    }
                }
            }
        }
        taken += self.pop_with(usize::MAX, f) as u64;
        self.stats.close_completed += taken;
        self.stats.close_abandoned += self.tracker.inflight() as u64;
        // What is left is in flight: the kernel may read it for ever.
        for owned in self.held.drain(..).flatten() {
            std::mem::forget(owned);
        }
    }

    /// Waits up to `timeout` until nothing is in flight, handing completions to `f`; returns
    /// how many. Signals and socket errors do not end it (a peer's reset makes the kernel
    /// purge the queues: their notifications follow).
    pub(super) fn wait_out(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(Completion, Option<Owned<B>>),
    ) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        let mut n = 0;
        loop {
            n += self.pop_with(usize::MAX, f) as u64;
            if self.tracker.inflight() == 0 {
                return n;
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return n,
                },
            };
            match self.wait(left) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => {}
                // A pending socket error or a hang-up that carries no notification: look again
                // shortly rather than spin on it.
                Err(_) => {
                    let nap = left.map_or(Duration::from_millis(10), |l| {
                        l.min(Duration::from_millis(10))
                    });
                    crate::sys::nap(nap);
                    let _ = self.collect();
                }
            }
        }
    }
}
