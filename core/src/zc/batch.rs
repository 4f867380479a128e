//! Batched sends: one send and one completion per buffer, with `sendmmsg(2)`'s rules.

use super::*;

impl<F: AsFd, B: ZcBuf> ZeroCopySender<F, B> {
    /// Sends each buffer of `items` as a send of its own, in order, with its own `user_data`
    /// and its own completion (what `sendmmsg(2)` is to `sendmsg`), reaping completions into
    /// `out` as [`ZeroCopySender::send_reap`] does; returns what went and the items not sent,
    /// in order (the sender owns the others until their completions).
    // doc-source: zc_send_batch.kernel
    /// Partial progress as `sendmmsg(2)`: the batch stops after a send that took less than its
    /// whole buffer (a stream socket that filled up: what follows would skip the rest), or at an
    /// error once at least one send went (the error is dropped: a lasting one meets the next
    /// call); only an error of the first send is returned. Each send follows the send rules
    /// (a blocking stream send waits for room, `MSG_DONTWAIT` does not), one syscall each as
    /// today's kernels have no batched zerocopy send that keeps one completion per buffer.
    // doc-end
    ///
    /// # Errors
    /// The first send's error (as [`ZeroCopySender::send`]), with every item given back.
    #[allow(clippy::type_complexity)]
    pub fn send_batch(
        &mut self,
        items: Vec<(B, u64)>,
        flags: Flags,
        out: &mut [Completion],
    ) -> Result<(Batch, Vec<(B, u64)>), SendError<Vec<(B, u64)>>> {
        let mut left: Vec<Option<(B, u64)>> = items.into_iter().map(Some).collect();
        let n = left.len();
        let r = self.batch(n, out, |z, i| {
            let (b, ud) = left[i].take().expect("each item is sent once");
            let len = b.as_bytes().len();
            match z.send(b, flags, ud) {
                Ok(k) => Ok((k, len)),
                Err(e) => {
                    let (e, b) = e.into_parts();
                    left[i] = Some((b, ud));
                    Err(e)
                }
            }
        });
        let rest = left.into_iter().flatten().collect();
        match r {
            Ok(done) => Ok((done, rest)),
            Err(e) => Err(SendError::new(e, rest)),
        }
    }

    /// [`ZeroCopySender::send_batch`] over raw buffers: one send of `bufs[i]` with
    /// `user_data[i]` each (the C ABI's `lowcopy_zc_send_batch`).
    ///
    /// # Errors
    /// `EINVAL` when `bufs` and `user_data` differ in length; else as
    /// [`ZeroCopySender::send_batch`].
    ///
    /// # Safety
    /// Every iovec must describe memory valid for reads of its length, kept as
    /// [`ZeroCopySender::send_borrowed`] says.
    pub unsafe fn send_batch_raw(
        &mut self,
        bufs: &[iovec],
        user_data: &[u64],
        flags: Flags,
        out: &mut [Completion],
    ) -> io::Result<Batch> {
        if bufs.len() != user_data.len() {
            return Err(errno(libc::EINVAL));
        }
        self.batch(bufs.len(), out, |z, i| {
            let one = std::slice::from_ref(&bufs[i]);
            // SAFETY: forwarded caller guarantees on bufs[i].
            let k = unsafe { z.send_raw(one, flags, user_data[i]) }?;
            Ok((k, bufs[i].iov_len))
        })
    }

    /// The batch rules over `n` sends made by `send(self, i)` -> (accepted, length).
    pub(super) fn batch(
        &mut self,
        n: usize,
        out: &mut [Completion],
        mut send: impl FnMut(&mut Self, usize) -> io::Result<(usize, usize)>,
    ) -> io::Result<Batch> {
        let mut done = Batch::default();
        while done.sends < n {
            match send(self, done.sends) {
                Ok((k, len)) => {
                    done.completions += self.after_send_reap(&mut out[done.completions..]);
                    if k == 0 && len > 0 {
                        break; // nothing accepted: no completion follows
                    }
                    done.sends += 1;
                    done.bytes += k;
                    if k < len {
                        break; // a short stream send: what follows would skip the rest
                    }
                }
                Err(e) if done.sends == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }
}

impl Batch {
    /// Whether buffer `i` of the batch, `len` bytes long, has a completion to come: it was sent
    /// (`i < sends`) and accepted bytes (a zero-length buffer is a send that gets none). The
    /// bindings hold a buffer for exactly these, and release the others when the call returns.
    pub fn completes(&self, i: usize, len: usize) -> bool {
        i < self.sends && len > 0
    }
}

#[cfg(test)]
mod batch_tests {
    use super::Batch;

    #[test]
    fn completes_names_the_sent_buffers_that_took_bytes() {
        let b = Batch {
            sends: 2,
            bytes: 10,
            completions: 0,
        };
        assert!(b.completes(0, 5));
        assert!(!b.completes(1, 0), "a zero-length send gets no completion");
        assert!(b.completes(1, 9), "the last send, short, has one");
        assert!(!b.completes(2, 5), "not sent");
    }
}
