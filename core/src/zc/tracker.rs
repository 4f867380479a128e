//! Bookkeeping that maps kernel zerocopy notifications back to the caller's requests.
//!
//! Pure logic, no I/O: the error-queue backend feeds it the kernel's inclusive id ranges
//! `[ee_info, ee_data]` (coalesced, possibly out of order, wrapping at 2^32), the io_uring
//! backend feeds it one notification per request slot.
//!
//! Memory follows the requests held (in flight, or completed and not yet reaped). The slot
//! table starts at the caller's reserve, grows by doubling up to the sender's limit when more
//! requests are held, and goes back to the reserve when the sender holds none: nothing is
//! allocated or freed while the requests held fit the reserve. A request is one 32-byte slot,
//! which also links it into the free list or the ready queue (so a send touches one slot
//! and nothing else of the tables: with thousands of senders on a thread, each table line is
//! a cache miss); a quarter more slots are kept for failed requests still waiting for a
//! notification; the error-queue backend adds a window of two 4-byte ids per request (a
//! power of two). [`Tracker::heap_bytes`] gives the exact figure.
//!
//! The kernel keeps one u32 counter per socket and gives each `MSG_ZEROCOPY` send that
//! returns > 0 the next value (Documentation/networking/msg_zerocopy.rst, "Notification
//! Parsing"); failed and zero-length sends take none. We mirror that counter in `next_id`.

use std::io;

/// One completed send, as the sender's reap calls hand it back: the kernel no longer needs
/// the buffers that send used, which may be reused.
///
/// Shared with C as `lowcopy_zc_completion` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The caller's own value given with the send.
    pub user_data: u64,
    // doc-source: completion.result
    /// Bytes the send accepted: always > 0. Every backend learns a send's outcome before the
    /// send call returns, so a failed send reports its error there and gets no completion; a
    /// completion never carries an error.
    // doc-end
    pub result: i64,
    /// [`COPIED`] and [`FALLBACK`] bits (C: `LOWCOPY_ZC_COPIED`, `LOWCOPY_ZC_FALLBACK`).
    pub flags: u32,
}

/// Completion flag:
// doc-source: completion.copied
/// the data was copied, not pinned: by the kernel (a deferred copy: loopback, veth, devices
/// without scatter-gather; `SO_EE_CODE_ZEROCOPY_COPIED` or `IORING_NOTIF_USAGE_ZC_COPIED`), or
/// by a plain send.
// doc-end
pub const COPIED: u32 = 1;
/// Completion flag:
// doc-source: completion.fallback
/// some or all of the request went out as a plain copied send because zerocopy was not
/// possible (`ENOBUFS`, io_uring `ENOMEM`, adaptive mode, full id window). The copy backend
/// sets only the copied flag: copying is what it was asked to do.
// doc-end
pub const FALLBACK: u32 = 2;

/// Index of a request slot.
pub type SlotId = u32;

/// No slot: the end of the free list or of the ready queue.
const NIL: SlotId = SlotId::MAX;

/// A request: 32 bytes.
#[derive(Clone, Copy, Debug)]
struct Slot {
    user_data: u64,
    bytes: u64,
    /// Notifications still expected (zerocopy ids, or io_uring notification CQEs).
    remaining: u32,
    /// A free slot: the next free one; a ready one: the next ready one; else NIL.
    next: SlotId,
    /// [`COPIED`] and [`FALLBACK`].
    flags: u8,
    /// The send that fills this slot is still running: do not complete it yet.
    open: bool,
    in_use: bool,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            user_data: 0,
            bytes: 0,
            remaining: 0,
            next: NIL,
            flags: 0,
            open: false,
            in_use: false,
        }
    }
}

/// An id in flight: the slot of its request, with [`DONE`] once notified.
type IdEntry = u32;
const DONE: u32 = 1 << 31;

/// What a notification range did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeOutcome {
    /// Ids that completed a pending send.
    pub matched: u32,
    /// Ids outside the window in flight, or notified twice: ignored.
    pub unexpected: u32,
}

/// Slots for `requests` requests: a quarter more for failed requests still waiting for a
/// notification (see the `ghosts` field).
fn slots_for(requests: usize) -> usize {
    requests + requests.div_ceil(4)
}

/// The id window for `requests` requests: twice as many ids (out-of-order completions keep
/// finished ids in the window behind an unfinished one), a power of two.
fn ids_for(requests: usize) -> usize {
    if requests == 0 {
        0
    } else {
        (2 * requests).next_power_of_two()
    }
}

fn enomem<E>(_: E) -> io::Error {
    io::Error::from_raw_os_error(libc::ENOMEM)
}

/// `len` items of `T`, or `ENOMEM`.
fn alloc<T: Clone>(len: usize, value: T) -> io::Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(enomem)?;
    v.resize(len, value);
    Ok(v)
}

/// `len` free slots, linked in order (slot 0 first).
fn free_slots(len: usize) -> io::Result<Vec<Slot>> {
    let mut v = alloc(len, Slot::default())?;
    for (i, s) in v.iter_mut().enumerate() {
        s.next = if i + 1 < len { i as SlotId + 1 } else { NIL };
    }
    Ok(v)
}

/// Request slots, the id window in flight, and the ready queue.
#[derive(Debug)]
pub struct Tracker {
    slots: Vec<Slot>,
    /// Free slots, most recently freed first (its line is likely still cached).
    free_head: SlotId,
    n_free: usize,
    /// Slots whose completion is ready, oldest first, linked through `next`.
    ready_head: SlotId,
    ready_tail: SlotId,
    n_ready: usize,
    /// Ring of ids in flight, oldest first: `ids[(head + k) & mask]` is id `base + k`.
    ids: Vec<IdEntry>,
    head: usize,
    n_ids: usize,
    /// Oldest id in flight (or the next id when none is).
    base: u32,
    /// Closed requests that accepted bytes and still wait for notifications.
    inflight: usize,
    /// Requests not yet reaped, counting neither free slots nor ghosts.
    live: usize,
    /// Closed requests that accepted nothing but still wait for a notification: io_uring
    /// posts one even for a failed SEND_ZC, and on TCP it can be chained to the notification
    /// of earlier data still unacknowledged (io_link_skb, io_uring/notif.c), so it may come
    /// only when the peer acks. Invisible to the caller; they hold a slot of the spare room.
    ghosts: usize,
    max_live: usize,
    /// The tables are larger than the reserve: shrink them when nothing is held.
    grown: bool,
    /// Table sizes to shrink back to (the reserve's, or more: [`Tracker::keep_after_growth`])
    /// and at most.
    min_slots: usize,
    max_slots: usize,
    min_ids: usize,
    max_ids: usize,
    /// Tables made since the first (grown or shrunk).
    #[cfg(test)]
    pub resizes: u32,
}

impl Tracker {
    /// A tracker that holds up to `max_requests` requests not yet reaped (in flight or ready),
    /// with slots for `reserve` of them allocated now and kept (`reserve <= max_requests`).
    /// Up to `2 * max_requests` zerocopy ids (rounded up to a power of two) may be in flight;
    /// `ids`: keep a window for the reserve's ids too (the error-queue backend), else it is
    /// made at the first id.
    ///
    /// # Errors
    /// `ENOMEM`.
    pub fn new(reserve: usize, max_requests: usize, ids: bool) -> io::Result<Self> {
        let min_ids = if ids { ids_for(reserve) } else { 0 };
        Self::build(reserve, max_requests, min_ids, ids_for(max_requests))
    }

    fn build(
        reserve: usize,
        max_requests: usize,
        min_ids: usize,
        max_ids: usize,
    ) -> io::Result<Self> {
        debug_assert!(reserve <= max_requests && max_requests < DONE as usize / 2);
        let (min_slots, min_ids) = (slots_for(reserve), min_ids.min(max_ids));
        Ok(Tracker {
            slots: free_slots(min_slots)?,
            free_head: if min_slots > 0 { 0 } else { NIL },
            n_free: min_slots,
            ready_head: NIL,
            ready_tail: NIL,
            n_ready: 0,
            ids: alloc(min_ids, 0)?,
            head: 0,
            n_ids: 0,
            base: 0,
            inflight: 0,
            live: 0,
            ghosts: 0,
            max_live: max_requests,
            grown: false,
            min_slots,
            max_slots: slots_for(max_requests),
            min_ids,
            max_ids,
            #[cfg(test)]
            resizes: 0,
        })
    }

    /// Once the tables had to grow past the reserve, shrink them back to room for `requests`
    /// (at most the limit) rather than to the reserve: for a sender that holds that many
    /// between two collections as a rule (the error queue's `send_reap`, [`super::REAP_EVERY`]
    /// sends), so that it does not reallocate and copy its tables at every batch. The tables
    /// made now stay the reserve's. `ids`: the id window too (the error queue's).
    pub fn keep_after_growth(&mut self, requests: usize, ids: bool) {
        let requests = requests.min(self.max_live);
        self.min_slots = self.min_slots.max(slots_for(requests));
        if ids {
            self.min_ids = self.min_ids.max(ids_for(requests)).min(self.max_ids);
        }
    }

    /// Bytes the tables hold on the heap now.
    #[cfg(test)]
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.slots.capacity() * size_of::<Slot>() + self.ids.capacity() * size_of::<IdEntry>()
    }

    /// A tracker whose first send takes kernel id `first` (the fuzzer starts near 2^32 to
    /// cross the wrap without 4 billion sends), with a window of `max_ids` ids (rounded up
    /// to a power of two) and half of `max_requests` reserved, so that the tables grow and
    /// shrink under the fuzzer.
    #[cfg(feature = "fuzzing")]
    pub fn starting_at(max_requests: usize, max_ids: usize, first: u32) -> Self {
        let max_ids = max_ids.next_power_of_two();
        let mut t = Self::build(max_requests / 2, max_requests, 0, max_ids)
            .expect("a fuzzer's tracker is a few bytes");
        t.base = first;
        t
    }

    /// The id the kernel will give the next successful `MSG_ZEROCOPY` send.
    pub fn next_id(&self) -> u32 {
        self.base.wrapping_add(self.n_ids as u32)
    }

    /// Requests sent that accepted bytes and whose completion has not arrived.
    pub fn inflight(&self) -> usize {
        self.inflight
    }

    /// Failed requests still waiting for a notification (see the `ghosts` field).
    #[cfg(test)]
    pub fn ghosts(&self) -> usize {
        self.ghosts
    }

    /// Nothing in flight and nothing ready: a completion made now is the next one out.
    #[inline]
    pub fn idle(&self) -> bool {
        self.n_ready == 0 && self.inflight == 0
    }

    /// Completions ready to reap.
    pub fn ready(&self) -> usize {
        self.n_ready
    }

    /// Zerocopy ids in flight.
    pub fn ids_inflight(&self) -> usize {
        self.n_ids
    }

    /// Requests that can still begin before [`Tracker::begin`] says no (a request counts
    /// until it is reaped).
    #[inline]
    pub fn room(&self) -> usize {
        (self.max_live - self.live).min(self.n_free + self.max_slots - self.slots.len())
    }

    /// Whether a quarter or less of the room is left, or three quarters of the id window are
    /// in flight: time to collect.
    #[inline]
    pub fn low(&self) -> bool {
        self.room() < self.max_live / 4 || self.n_ids > self.max_ids * 3 / 4
    }

    /// Notifications still expected for requests not yet completed: what a sender that goes
    /// away leaves the kernel to post.
    pub fn notifs_expected(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.in_use)
            .map(|s| s.remaining as u64)
            .sum()
    }

    /// Whether one more id can be tracked, growing the window if it is full and below its
    /// limit (false also when that allocation fails).
    #[inline]
    pub fn id_room(&mut self) -> bool {
        self.n_ids < self.ids.len() || self.grow_ids()
    }

    /// [`Tracker::id_room`] when the window is full.
    #[cold]
    #[inline(never)]
    fn grow_ids(&mut self) -> bool {
        if self.ids.len() >= self.max_ids {
            return false;
        }
        let len = (self.ids.len() * 2).max(8).min(self.max_ids);
        let Ok(mut v) = alloc(len, 0) else {
            return false;
        };
        let mask = self.ids.len().wrapping_sub(1);
        for (k, e) in v.iter_mut().take(self.n_ids).enumerate() {
            *e = self.ids[(self.head + k) & mask];
        }
        self.ids = v;
        self.head = 0;
        #[cfg(test)]
        {
            self.resizes += 1;
        }
        self.grown |= self.ids.len() > self.min_ids;
        true
    }

    /// Opens a request; `Ok(None)` when `max_requests` are unreaped (or, rarely, when failed
    /// requests waiting for their notification fill the spare room too).
    ///
    /// # Errors
    /// `ENOMEM` when the slots must grow and cannot.
    #[inline]
    pub fn begin(&mut self, user_data: u64) -> io::Result<Option<SlotId>> {
        if self.live >= self.max_live {
            return Ok(None);
        }
        if self.free_head == NIL && !self.grow_slots()? {
            return Ok(None);
        }
        let s = self.free_head;
        let slot = &mut self.slots[s as usize];
        self.free_head = slot.next;
        self.n_free -= 1;
        self.live += 1;
        *slot = Slot {
            user_data,
            open: true,
            in_use: true,
            ..Slot::default()
        };
        Ok(Some(s))
    }

    /// Doubles the slots (at least 8, at most `max_slots`), all free; false at the limit.
    #[cold]
    #[inline(never)]
    fn grow_slots(&mut self) -> io::Result<bool> {
        let old = self.slots.len();
        if old >= self.max_slots {
            return Ok(false);
        }
        let len = (old * 2).max(8).min(self.max_slots);
        self.slots.try_reserve_exact(len - old).map_err(enomem)?;
        self.slots.resize(len, Slot::default());
        // Called with no free slot: the new ones become the free list, in order.
        for i in old..len {
            self.slots[i].next = if i + 1 < len { i as SlotId + 1 } else { NIL };
        }
        self.free_head = old as SlotId;
        self.n_free = len - old;
        self.grown |= len > self.min_slots;
        #[cfg(test)]
        {
            self.resizes += 1;
        }
        Ok(true)
    }

    /// Back to the reserve once nothing is held: no request, ghost or id in flight.
    #[inline]
    fn maybe_shrink(&mut self) {
        if self.grown && self.live == 0 && self.ghosts == 0 && self.n_ids == 0 {
            self.shrink();
        }
    }

    #[cold]
    #[inline(never)]
    fn shrink(&mut self) {
        let (Ok(slots), Ok(ids)) = (free_slots(self.min_slots), alloc(self.min_ids, 0)) else {
            return; // keep the larger tables
        };
        (self.slots, self.ids, self.head) = (slots, ids, 0);
        self.free_head = if self.min_slots > 0 { 0 } else { NIL };
        self.n_free = self.min_slots;
        self.grown = false;
        #[cfg(test)]
        {
            self.resizes += 1;
        }
    }

    /// Records `bytes` accepted by a zerocopy send of `slot` that took the next kernel id;
    /// returns the id. The caller checked [`Tracker::id_room`].
    #[inline]
    pub fn add_id(&mut self, slot: SlotId, bytes: usize) -> u32 {
        assert!(self.n_ids < self.ids.len(), "id window full");
        let id = self.next_id();
        let mask = self.ids.len() - 1;
        self.ids[(self.head + self.n_ids) & mask] = slot;
        self.n_ids += 1;
        let s = &mut self.slots[slot as usize];
        s.remaining += 1;
        s.bytes += bytes as u64;
        id
    }

    /// Records `bytes` accepted by a send of `slot` that will be followed by one notification
    /// of its own (io_uring `IORING_CQE_F_MORE`).
    #[inline]
    pub fn add_notif(&mut self, slot: SlotId, bytes: usize) {
        let s = &mut self.slots[slot as usize];
        s.remaining += 1;
        s.bytes += bytes as u64;
    }

    /// Records `bytes` accepted by a send of `slot` that needs no notification (a copy), with
    /// completion flags `flags`.
    #[inline]
    pub fn add_done(&mut self, slot: SlotId, bytes: usize, flags: u32) {
        let s = &mut self.slots[slot as usize];
        s.bytes += bytes as u64;
        s.flags |= flags as u8;
    }

    /// Closes the request: it completes when its last notification arrives (at once if it
    /// expects none). A request that accepted no bytes is dropped without a completion once
    /// its notifications (io_uring may post one after a failed send) have arrived.
    #[inline]
    pub fn finish(&mut self, slot: SlotId) {
        let s = &mut self.slots[slot as usize];
        s.open = false;
        let (bytes, remaining) = (s.bytes, s.remaining);
        if remaining == 0 {
            self.complete(slot);
        } else if bytes == 0 {
            self.live -= 1;
            self.ghosts += 1;
        } else {
            self.inflight += 1;
        }
        self.maybe_shrink();
    }

    /// Applies the kernel's inclusive range `[lo, hi]` of completed ids, wrap-safe.
    /// `copied` is the range's `SO_EE_CODE_ZEROCOPY_COPIED` bit.
    pub fn complete_range(&mut self, lo: u32, hi: u32, copied: bool) -> RangeOutcome {
        let mut out = RangeOutcome::default();
        // Work in offsets from the oldest id in flight, so a range that wraps past 2^32 is
        // just consecutive offsets; then visit only its overlap with the window, so a bogus
        // range costs no more than the window.
        let len = hi.wrapping_sub(lo) as u64 + 1;
        let start = lo.wrapping_sub(self.base) as u64;
        let window = self.n_ids as u64;
        let mut spans = [(0u64, 0u64); 2];
        if start < window {
            spans[0] = (start, (start + len).min(window));
        }
        if start + len > 1 << 32 {
            // The range wraps back to offset 0 (it starts "before" the window).
            spans[1] = (0, (start + len - (1 << 32)).min(window).min(start));
        }
        let mask = self.ids.len().wrapping_sub(1);
        let mut visited = 0u64;
        // Oldest first: the wrapped part (offsets from 0) lies below `start`, so requests
        // become ready in the order they were sent, as for any other range (found by the
        // tracker fuzzer: a range of all 2^32 ids made the newest ready first).
        for (from, to) in [spans[1], spans[0]] {
            for off in from..to {
                visited += 1;
                let e = &mut self.ids[(self.head + off as usize) & mask];
                if *e & DONE != 0 {
                    out.unexpected += 1;
                    continue;
                }
                *e |= DONE;
                let slot = *e & !DONE;
                out.matched += 1;
                self.notified(slot, copied);
            }
        }
        out.unexpected = out
            .unexpected
            .saturating_add((len - visited).min(u32::MAX as u64) as u32);
        // Retire the done prefix so the window moves on.
        while self.n_ids > 0 && self.ids[self.head] & DONE != 0 {
            self.head = (self.head + 1) & mask;
            self.n_ids -= 1;
            self.base = self.base.wrapping_add(1);
        }
        self.maybe_shrink();
        out
    }

    /// One io_uring notification for `slot` arrived.
    #[inline]
    pub fn complete_notif(&mut self, slot: SlotId, copied: bool) -> bool {
        match self.slots.get(slot as usize) {
            Some(s) if s.in_use && s.remaining > 0 => {
                self.notified(slot, copied);
                self.maybe_shrink();
                true
            }
            _ => false,
        }
    }

    fn notified(&mut self, slot: SlotId, copied: bool) {
        let s = &mut self.slots[slot as usize];
        s.remaining -= 1;
        if copied {
            s.flags |= COPIED as u8;
        }
        self.maybe_complete(slot);
    }

    /// The last notification of a closed request arrived.
    fn maybe_complete(&mut self, slot: SlotId) {
        let s = self.slots[slot as usize];
        if s.open || s.remaining > 0 {
            return;
        }
        if s.bytes == 0 {
            self.ghosts -= 1;
            self.release(slot);
            return;
        }
        self.inflight -= 1;
        self.complete(slot);
    }

    /// A closed request with nothing more to wait for: ready, or gone if it sent nothing.
    #[inline]
    fn complete(&mut self, slot: SlotId) {
        if self.slots[slot as usize].bytes == 0 {
            self.live -= 1;
            self.release(slot);
            return;
        }
        self.slots[slot as usize].next = NIL;
        if self.n_ready == 0 {
            self.ready_head = slot;
        } else {
            self.slots[self.ready_tail as usize].next = slot;
        }
        self.ready_tail = slot;
        self.n_ready += 1;
    }

    #[inline]
    fn release(&mut self, slot: SlotId) {
        let s = &mut self.slots[slot as usize];
        s.in_use = false;
        s.next = self.free_head;
        self.free_head = slot;
        self.n_free += 1;
    }

    /// Moves up to `out.len()` ready completions into `out`, oldest first; returns how many.
    #[inline]
    pub fn pop_ready(&mut self, out: &mut [Completion]) -> usize {
        let mut it = out.iter_mut();
        self.pop_ready_with(it.len(), |_, c| {
            if let Some(o) = it.next() {
                *o = c;
            }
        })
    }

    /// Hands up to `max` ready completions to `f` with their slot, oldest first; returns how
    /// many. The slot is free again when `f` sees it (the owner of a buffer kept per slot
    /// takes it out there).
    #[inline]
    pub fn pop_ready_with(&mut self, max: usize, mut f: impl FnMut(SlotId, Completion)) -> usize {
        let k = max.min(self.n_ready);
        for _ in 0..k {
            let slot = self.ready_head;
            let s = self.slots[slot as usize];
            self.ready_head = s.next;
            self.n_ready -= 1;
            self.live -= 1;
            self.release(slot);
            f(
                slot,
                Completion {
                    user_data: s.user_data,
                    result: s.bytes as i64,
                    flags: s.flags as u32,
                },
            );
        }
        if k > 0 {
            self.maybe_shrink();
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(t: &mut Tracker, user: u64, ids: usize) -> (SlotId, Vec<u32>) {
        let s = t.begin(user).unwrap().unwrap();
        let got = (0..ids)
            .map(|_| {
                assert!(t.id_room(), "id window full");
                t.add_id(s, 100)
            })
            .collect();
        t.finish(s);
        (s, got)
    }

    fn drain(t: &mut Tracker) -> Vec<(u64, i64, u32)> {
        let mut out = [Completion::default(); 64];
        let n = t.pop_ready(&mut out);
        out[..n]
            .iter()
            .map(|c| (c.user_data, c.result, c.flags))
            .collect()
    }

    /// A tracker whose kernel counter sits just below the wrap.
    fn near_wrap(start: u32) -> Tracker {
        let mut t = Tracker::build(8, 8, 8, 8).unwrap();
        t.base = start;
        t
    }

    #[test]
    fn ids_follow_the_kernel_counter() {
        let mut t = Tracker::build(4, 4, 4, 4).unwrap();
        assert_eq!(send(&mut t, 1, 1).1, [0]);
        assert_eq!(send(&mut t, 2, 2).1, [1, 2]);
        assert_eq!(t.next_id(), 3);
        assert_eq!(t.inflight(), 2);
    }

    #[test]
    fn coalesced_range_completes_many() {
        let mut t = Tracker::build(8, 8, 8, 8).unwrap();
        for u in 10..15 {
            send(&mut t, u, 1);
        }
        let o = t.complete_range(0, 4, true);
        assert_eq!(
            o,
            RangeOutcome {
                matched: 5,
                unexpected: 0
            }
        );
        let got = drain(&mut t);
        assert_eq!(got.len(), 5);
        assert!(got.iter().all(|&(_, r, f)| r == 100 && f == COPIED));
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            [10, 11, 12, 13, 14]
        );
        assert_eq!((t.inflight(), t.ids_inflight(), t.room()), (0, 0, 8));
    }

    #[test]
    fn out_of_order_ranges() {
        let mut t = Tracker::build(8, 8, 8, 8).unwrap();
        for u in 0..4 {
            send(&mut t, u, 1);
        }
        t.complete_range(2, 3, false);
        assert_eq!(drain(&mut t), [(2, 100, 0), (3, 100, 0)]);
        // The window cannot move past the unfinished ids 0 and 1.
        assert_eq!(t.ids_inflight(), 4);
        t.complete_range(0, 1, false);
        assert_eq!(drain(&mut t).len(), 2);
        assert_eq!(t.ids_inflight(), 0);
        assert_eq!(t.next_id(), 4);
    }

    #[test]
    fn ranges_wrap_past_u32_max() {
        let mut t = near_wrap(u32::MAX - 1);
        let ids: Vec<u32> = (0..4).flat_map(|u| send(&mut t, u, 1).1).collect();
        assert_eq!(ids, [u32::MAX - 1, u32::MAX, 0, 1]);
        let o = t.complete_range(u32::MAX, 0, true);
        assert_eq!(o.matched, 2);
        assert_eq!(drain(&mut t), [(1, 100, COPIED), (2, 100, COPIED)]);
        let o = t.complete_range(u32::MAX - 1, 1, false);
        assert_eq!(
            o,
            RangeOutcome {
                matched: 2,
                unexpected: 2
            }
        );
        assert_eq!(drain(&mut t), [(0, 100, 0), (3, 100, 0)]);
        assert_eq!(t.next_id(), 2);
        assert_eq!(t.ids_inflight(), 0);
    }

    #[test]
    fn id_zero_is_an_ordinary_id_after_wrap() {
        let mut t = near_wrap(u32::MAX);
        let (_, ids) = send(&mut t, 7, 2);
        assert_eq!(ids, [u32::MAX, 0]);
        t.complete_range(0, 0, false);
        assert!(drain(&mut t).is_empty(), "request needs both ids");
        t.complete_range(u32::MAX, u32::MAX, false);
        assert_eq!(drain(&mut t), [(7, 200, 0)]);
    }

    #[test]
    fn a_request_over_several_ids_completes_with_its_last() {
        let mut t = Tracker::build(4, 4, 8, 8).unwrap();
        let s = t.begin(99).unwrap().unwrap();
        t.add_id(s, 10);
        t.add_done(s, 5, FALLBACK | COPIED);
        t.add_id(s, 10);
        t.finish(s);
        t.complete_range(1, 1, false);
        assert!(drain(&mut t).is_empty());
        t.complete_range(0, 0, false);
        assert_eq!(drain(&mut t), [(99, 25, FALLBACK | COPIED)]);
    }

    #[test]
    fn completions_arriving_while_the_send_is_open_wait_for_finish() {
        let mut t = Tracker::build(4, 4, 8, 8).unwrap();
        let s = t.begin(5).unwrap().unwrap();
        t.add_id(s, 10);
        t.complete_range(0, 0, false);
        assert!(drain(&mut t).is_empty());
        t.finish(s);
        assert_eq!(drain(&mut t), [(5, 10, 0)]);
    }

    #[test]
    fn stray_and_duplicate_ids_are_ignored() {
        let mut t = Tracker::build(4, 4, 4, 4).unwrap();
        send(&mut t, 1, 1);
        assert_eq!(t.complete_range(5, 9, false).unexpected, 5);
        assert_eq!(t.complete_range(0, 0, false).matched, 1);
        assert_eq!(t.complete_range(0, 0, false).unexpected, 1);
        assert_eq!(drain(&mut t).len(), 1);
        // A bogus range of 2^32 ids costs no more than the window, and matches only it.
        send(&mut t, 2, 1);
        let o = t.complete_range(100, 99, false);
        assert_eq!(o.matched, 1);
        assert_eq!(o.unexpected, u32::MAX);
        assert_eq!(drain(&mut t), [(2, 100, 0)]);
    }

    #[test]
    fn copies_complete_at_once_and_empty_requests_vanish() {
        let mut t = Tracker::build(2, 2, 2, 2).unwrap();
        let s = t.begin(1).unwrap().unwrap();
        t.add_done(s, 42, COPIED);
        t.finish(s);
        let e = t.begin(2).unwrap().unwrap();
        t.finish(e);
        assert_eq!(drain(&mut t), [(1, 42, COPIED)]);
        assert_eq!(t.room(), 2);
    }

    /// io_uring: a SEND_ZC that failed (EAGAIN on a full socket) still posts a notification,
    /// which the kernel may chain to unacknowledged data and post only much later. Such
    /// requests are neither in flight for the caller nor counted against `max_requests`.
    #[test]
    fn failed_requests_awaiting_a_notification_are_invisible() {
        let mut t = Tracker::build(4, 4, 4, 4).unwrap();
        let real = t.begin(1).unwrap().unwrap();
        t.add_notif(real, 10);
        t.finish(real);
        let mut ghosts = vec![];
        for u in 0..5 {
            if let Some(g) = t.begin(100 + u).unwrap() {
                t.add_notif(g, 0);
                t.finish(g);
                ghosts.push(g);
            }
        }
        // 4 live + 1 spare slot: the ghosts fill the spare room and never count as live.
        assert_eq!(
            ghosts.len(),
            4,
            "5 slots (4 + a quarter): 1 real request, 4 ghosts"
        );
        assert_eq!((t.inflight(), t.ghosts()), (1, 4));
        assert!(t.begin(9).unwrap().is_none(), "every slot is taken");
        assert!(t.complete_notif(ghosts[0], false));
        assert_eq!((t.inflight(), t.ghosts(), t.room()), (1, 3, 1));
        // Four real requests can be open at once again as ghosts go away.
        for g in &ghosts[1..] {
            assert!(t.complete_notif(*g, false));
        }
        assert_eq!(t.room(), 3);
        for u in 0..3 {
            let s = t.begin(10 + u).unwrap().unwrap();
            t.add_notif(s, 1);
            t.finish(s);
        }
        assert!(t.begin(20).unwrap().is_none(), "max_requests live");
        assert_eq!((t.inflight(), t.ghosts()), (4, 0));
        assert!(t.complete_notif(real, false));
        assert_eq!(drain(&mut t), [(1, 10, 0)]);
    }

    #[test]
    fn io_uring_style_notifications() {
        let mut t = Tracker::build(2, 2, 2, 2).unwrap();
        let s = t.begin(3).unwrap().unwrap();
        t.add_notif(s, 64);
        t.finish(s);
        // A failed send that still posts a notification: no completion for the caller.
        let f = t.begin(4).unwrap().unwrap();
        t.add_notif(f, 0);
        t.finish(f);
        assert!(t.complete_notif(f, false));
        assert!(t.complete_notif(s, true));
        assert!(!t.complete_notif(s, true), "second notification for a slot");
        assert_eq!(drain(&mut t), [(3, 64, COPIED)]);
        assert_eq!(t.inflight(), 0);
    }

    #[test]
    fn slots_are_held_until_reaped() {
        let mut t = Tracker::build(2, 2, 4, 4).unwrap();
        send(&mut t, 1, 1);
        send(&mut t, 2, 1);
        assert!(t.begin(3).unwrap().is_none());
        t.complete_range(0, 1, false);
        assert!(t.begin(3).unwrap().is_none(), "ready but unreaped");
        let mut one = [Completion::default(); 1];
        assert_eq!(t.pop_ready(&mut one), 1);
        assert!(t.begin(3).unwrap().is_some());
    }

    #[test]
    fn window_full_is_reported() {
        let mut t = Tracker::build(8, 8, 2, 2).unwrap();
        send(&mut t, 1, 2);
        assert!(!t.id_room());
        t.complete_range(0, 0, false);
        assert!(t.id_room());
    }
    /// The tables grow with the requests held, up to the limit, and go back to the reserve
    /// once nothing is held; while the requests fit the reserve nothing is reallocated.
    #[test]
    fn tables_follow_the_requests_held() {
        let mut t = Tracker::new(16, 4096, true).unwrap();
        let idle = t.heap_bytes();
        // 20 slots x 32 + 32 ids x 4.
        assert_eq!(idle, 20 * 32 + 32 * 4);
        assert_eq!(Tracker::new(16, 4096, false).unwrap().heap_bytes(), 20 * 32);
        let slots_ptr = t.slots.as_ptr();
        for round in 0..3 {
            for u in 0..16 {
                send(&mut t, u, 1);
            }
            assert_eq!(t.heap_bytes(), idle, "16 fit the reserve (round {round})");
            assert_eq!(t.slots.as_ptr(), slots_ptr, "no reallocation");
            t.complete_range(t.base, t.next_id().wrapping_sub(1), false);
            assert_eq!(drain(&mut t).len(), 16);
        }
        // A burst of 1000 grows the tables; they shrink back once it is reaped.
        for u in 0..1000 {
            send(&mut t, u, 1);
        }
        assert_eq!(t.inflight(), 1000);
        assert!(t.heap_bytes() > 1000 * 24, "{}", t.heap_bytes());
        let o = t.complete_range(t.base, t.next_id().wrapping_sub(1), true);
        assert_eq!(o.matched, 1000);
        let mut out = vec![Completion::default(); 1000];
        assert_eq!(t.pop_ready(&mut out[..999]), 999);
        assert!(t.heap_bytes() > idle, "one still unreaped");
        assert_eq!(t.pop_ready(&mut out[999..]), 1);
        assert!(out.iter().enumerate().all(|(i, c)| c.user_data == i as u64));
        assert_eq!(t.heap_bytes(), idle);
        // And still works: ids follow the kernel's counter across the shrink.
        assert_eq!(send(&mut t, 7, 1).1, [1048]);
    }

    #[test]
    fn the_limit_holds_whatever_the_reserve() {
        for reserve in [0, 1, 5, 100] {
            let mut t = Tracker::new(reserve, 100, true).unwrap();
            for u in 0..100 {
                assert!(
                    t.begin(u).unwrap().is_some(),
                    "reserve {reserve}: request {u}"
                );
            }
            assert!(t.begin(100).unwrap().is_none(), "reserve {reserve}");
            assert_eq!(t.room(), 0);
        }
        let t = Tracker::new(0, 4096, true).unwrap();
        assert_eq!(t.heap_bytes(), 0, "reserve 0: nothing");
        assert_eq!(t.room(), 4096);
    }

    /// A reserve equal to the limit: every table is allocated at creation and never again.
    #[test]
    fn a_full_reserve_never_allocates() {
        let mut t = Tracker::new(64, 64, true).unwrap();
        let (bytes, slots, ids) = (t.heap_bytes(), t.slots.as_ptr(), t.ids.as_ptr());
        for round in 0..4u64 {
            for u in 0..64 {
                send(&mut t, round * 100 + u, 1);
            }
            assert!(t.begin(1).unwrap().is_none());
            t.complete_range(t.base, t.next_id().wrapping_sub(1), false);
            assert_eq!(drain(&mut t).len(), 64);
        }
        assert_eq!(
            (t.heap_bytes(), t.slots.as_ptr(), t.ids.as_ptr()),
            (bytes, slots, ids)
        );
    }

    /// The id window grows with out-of-order completions up to twice the requests.
    #[test]
    fn the_id_window_grows_to_its_limit() {
        let mut t = Tracker::new(2, 8, true).unwrap();
        assert_eq!(t.ids.len(), 4);
        for u in 0..8 {
            assert!(t.id_room());
            send(&mut t, u, 1);
        }
        assert_eq!(t.ids.len(), 8);
        // Ids 1..7 complete, id 0 holds the window; their slots are reaped.
        t.complete_range(1, 7, false);
        assert_eq!(drain(&mut t).len(), 7);
        for u in 0..7 {
            assert!(t.id_room(), "{u}");
            send(&mut t, 10 + u, 1);
        }
        assert_eq!(t.ids.len(), 16);
        t.complete_range(8, 14, false);
        assert_eq!(drain(&mut t).len(), 7);
        send(&mut t, 20, 1);
        assert_eq!(t.ids_inflight(), 16);
        assert!(!t.id_room(), "16 ids: the limit for 8 requests");
        t.complete_range(0, 15, false);
        assert_eq!(drain(&mut t), [(0, 100, 0), (20, 100, 0)]);
        assert_eq!(t.ids.len(), 4, "back to the reserve");
    }

    #[test]
    fn notifications_expected_are_counted() {
        let mut t = Tracker::new(4, 4, false).unwrap();
        let a = t.begin(1).unwrap().unwrap();
        t.add_notif(a, 10);
        t.add_notif(a, 10);
        t.finish(a);
        let g = t.begin(2).unwrap().unwrap();
        t.add_notif(g, 0);
        t.finish(g);
        assert_eq!(t.notifs_expected(), 3);
        t.complete_notif(a, false);
        assert_eq!(t.notifs_expected(), 2);
    }
}
