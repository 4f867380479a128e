//! Bookkeeping that maps kernel zerocopy notifications back to the caller's requests.
//!
//! Pure logic, no I/O: the error-queue backend feeds it the kernel's inclusive id ranges
//! `[ee_info, ee_data]` (coalesced, possibly out of order, wrapping at 2^32), the io_uring
//! backend feeds it one notification per request slot. Everything is allocated in
//! [`Tracker::new`]; nothing allocates afterwards.
//!
//! The kernel keeps one u32 counter per socket and gives each `MSG_ZEROCOPY` send that
//! returns > 0 the next value (Documentation/networking/msg_zerocopy.rst, "Notification
//! Parsing"); failed and zero-length sends take none. We mirror that counter in `next_id`.

/// One completed send, as the sender's reap calls hand it back: the kernel no longer needs
/// the buffers that send used, which may be reused.
///
/// Shared with C as `lowcopy_zc_completion` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The caller's own value given with the send.
    pub user_data: u64,
    /// Bytes the send accepted: always > 0. Every backend learns a send's outcome before the
    /// send call returns, so a failed send reports its error there and gets no completion;
    /// a completion never carries an error.
    pub result: i64,
    /// [`COPIED`] and [`FALLBACK`] bits (C: `LOWCOPY_ZC_COPIED`, `LOWCOPY_ZC_FALLBACK`).
    pub flags: u32,
}

/// Completion flag: the data was copied, not pinned: by the kernel (a deferred copy: loopback,
/// veth, devices without scatter-gather; `SO_EE_CODE_ZEROCOPY_COPIED` or
/// `IORING_NOTIF_USAGE_ZC_COPIED`), or by a plain send.
pub const COPIED: u32 = 1;
/// Completion flag: some or all of the request went out as a plain copied send because
/// zerocopy was not possible (`ENOBUFS`, adaptive mode, full id window). The copy backend
/// sets only [`COPIED`]: copying is what it was asked to do.
pub const FALLBACK: u32 = 2;

/// Index of a request slot.
pub type SlotId = u32;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    user_data: u64,
    bytes: u64,
    /// Notifications still expected (zerocopy ids, or io_uring notification CQEs).
    remaining: u32,
    flags: u32,
    /// The send that fills this slot is still running: do not complete it yet.
    open: bool,
    in_use: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct IdEntry {
    slot: SlotId,
    done: bool,
}

/// What a notification range did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeOutcome {
    /// Ids that completed a pending send.
    pub matched: u32,
    /// Ids outside the window in flight, or notified twice: ignored.
    pub unexpected: u32,
}

/// Request slots, the id window in flight, and the ready queue.
#[derive(Debug)]
pub struct Tracker {
    slots: Vec<Slot>,
    free: Vec<SlotId>,
    /// Ring of ids in flight, oldest first: `ids[(head + k) & mask]` is id `base + k`.
    ids: Vec<IdEntry>,
    head: usize,
    n_ids: usize,
    /// Oldest id in flight (or the next id when none is).
    base: u32,
    /// Ring of slots whose completion is ready, oldest first.
    ready: Vec<SlotId>,
    ready_head: usize,
    n_ready: usize,
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
}

impl Tracker {
    /// A tracker for up to `max_requests` requests not yet reaped (in flight or ready) and up
    /// to `max_ids` zerocopy ids in flight; `max_ids` is rounded up to a power of two. A
    /// quarter more slots are kept for failed requests still waiting for a notification.
    pub fn new(max_requests: usize, max_ids: usize) -> Self {
        let max_ids = max_ids.next_power_of_two();
        let n_slots = max_requests + max_requests.div_ceil(4);
        Tracker {
            slots: vec![Slot::default(); n_slots],
            free: (0..n_slots as SlotId).rev().collect(),
            ids: vec![IdEntry::default(); max_ids],
            head: 0,
            n_ids: 0,
            base: 0,
            // A power of two: the ring index is a mask, not a division, twice per send.
            ready: vec![0; n_slots.next_power_of_two()],
            ready_head: 0,
            n_ready: 0,
            inflight: 0,
            live: 0,
            ghosts: 0,
            max_live: max_requests,
        }
    }

    /// A tracker whose first send takes kernel id `first` (the fuzzer starts near 2^32 to
    /// cross the wrap without 4 billion sends).
    #[cfg(feature = "fuzzing")]
    pub fn starting_at(max_requests: usize, max_ids: usize, first: u32) -> Self {
        let mut t = Self::new(max_requests, max_ids);
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
    pub fn room(&self) -> usize {
        (self.max_live - self.live).min(self.free.len())
    }

    /// Whether one more id can be tracked.
    pub fn id_room(&self) -> bool {
        self.n_ids < self.ids.len()
    }

    /// Opens a request; `None` when `max_requests` are unreaped (or, rarely, when failed
    /// requests waiting for their notification fill the spare room too).
    pub fn begin(&mut self, user_data: u64) -> Option<SlotId> {
        if self.live >= self.max_live {
            return None;
        }
        let s = self.free.pop()?;
        self.live += 1;
        self.slots[s as usize] = Slot {
            user_data,
            open: true,
            in_use: true,
            ..Slot::default()
        };
        Some(s)
    }

    /// Records `bytes` accepted by a zerocopy send of `slot` that took the next kernel id;
    /// returns the id. The caller checked [`Tracker::id_room`].
    pub fn add_id(&mut self, slot: SlotId, bytes: usize) -> u32 {
        assert!(self.id_room(), "id window full");
        let id = self.next_id();
        let mask = self.ids.len() - 1;
        self.ids[(self.head + self.n_ids) & mask] = IdEntry { slot, done: false };
        self.n_ids += 1;
        let s = &mut self.slots[slot as usize];
        s.remaining += 1;
        s.bytes += bytes as u64;
        id
    }

    /// Records `bytes` accepted by a send of `slot` that will be followed by one notification
    /// of its own (io_uring `IORING_CQE_F_MORE`).
    pub fn add_notif(&mut self, slot: SlotId, bytes: usize) {
        let s = &mut self.slots[slot as usize];
        s.remaining += 1;
        s.bytes += bytes as u64;
    }

    /// Records `bytes` accepted by a send of `slot` that needs no notification (a copy), with
    /// completion flags `flags`.
    pub fn add_done(&mut self, slot: SlotId, bytes: usize, flags: u32) {
        let s = &mut self.slots[slot as usize];
        s.bytes += bytes as u64;
        s.flags |= flags;
    }

    /// Closes the request: it completes when its last notification arrives (at once if it
    /// expects none). A request that accepted no bytes is dropped without a completion once
    /// its notifications (io_uring may post one after a failed send) have arrived.
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
        let mask = self.ids.len() - 1;
        let mut visited = 0u64;
        for (from, to) in spans {
            for off in from..to {
                visited += 1;
                let e = &mut self.ids[(self.head + off as usize) & mask];
                if e.done {
                    out.unexpected += 1;
                    continue;
                }
                e.done = true;
                let slot = e.slot;
                out.matched += 1;
                self.notified(slot, copied);
            }
        }
        out.unexpected = out
            .unexpected
            .saturating_add((len - visited).min(u32::MAX as u64) as u32);
        // Retire the done prefix so the window moves on.
        while self.n_ids > 0 && self.ids[self.head].done {
            self.head = (self.head + 1) & mask;
            self.n_ids -= 1;
            self.base = self.base.wrapping_add(1);
        }
        out
    }

    /// One io_uring notification for `slot` arrived.
    pub fn complete_notif(&mut self, slot: SlotId, copied: bool) -> bool {
        match self.slots.get(slot as usize) {
            Some(s) if s.in_use && s.remaining > 0 => {
                self.notified(slot, copied);
                true
            }
            _ => false,
        }
    }

    fn notified(&mut self, slot: SlotId, copied: bool) {
        let s = &mut self.slots[slot as usize];
        s.remaining -= 1;
        if copied {
            s.flags |= COPIED;
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
    fn complete(&mut self, slot: SlotId) {
        if self.slots[slot as usize].bytes == 0 {
            self.live -= 1;
            self.release(slot);
            return;
        }
        let mask = self.ready.len() - 1;
        self.ready[(self.ready_head + self.n_ready) & mask] = slot;
        self.n_ready += 1;
    }

    fn release(&mut self, slot: SlotId) {
        self.slots[slot as usize].in_use = false;
        self.free.push(slot);
    }

    /// Moves up to `out.len()` ready completions into `out`, oldest first; returns how many.
    pub fn pop_ready(&mut self, out: &mut [Completion]) -> usize {
        let k = out.len().min(self.n_ready);
        let mask = self.ready.len() - 1;
        for c in out.iter_mut().take(k) {
            let slot = self.ready[self.ready_head];
            self.ready_head = (self.ready_head + 1) & mask;
            self.n_ready -= 1;
            let s = self.slots[slot as usize];
            *c = Completion {
                user_data: s.user_data,
                result: s.bytes as i64,
                flags: s.flags,
            };
            self.live -= 1;
            self.release(slot);
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(t: &mut Tracker, user: u64, ids: usize) -> (SlotId, Vec<u32>) {
        let s = t.begin(user).unwrap();
        let got = (0..ids).map(|_| t.add_id(s, 100)).collect();
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
        let mut t = Tracker::new(8, 8);
        t.base = start;
        t
    }

    #[test]
    fn ids_follow_the_kernel_counter() {
        let mut t = Tracker::new(4, 4);
        assert_eq!(send(&mut t, 1, 1).1, [0]);
        assert_eq!(send(&mut t, 2, 2).1, [1, 2]);
        assert_eq!(t.next_id(), 3);
        assert_eq!(t.inflight(), 2);
    }

    #[test]
    fn coalesced_range_completes_many() {
        let mut t = Tracker::new(8, 8);
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
        let mut t = Tracker::new(8, 8);
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
        let mut t = Tracker::new(4, 8);
        let s = t.begin(99).unwrap();
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
        let mut t = Tracker::new(4, 8);
        let s = t.begin(5).unwrap();
        t.add_id(s, 10);
        t.complete_range(0, 0, false);
        assert!(drain(&mut t).is_empty());
        t.finish(s);
        assert_eq!(drain(&mut t), [(5, 10, 0)]);
    }

    #[test]
    fn stray_and_duplicate_ids_are_ignored() {
        let mut t = Tracker::new(4, 4);
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
        let mut t = Tracker::new(2, 2);
        let s = t.begin(1).unwrap();
        t.add_done(s, 42, COPIED);
        t.finish(s);
        let e = t.begin(2).unwrap();
        t.finish(e);
        assert_eq!(drain(&mut t), [(1, 42, COPIED)]);
        assert_eq!(t.room(), 2);
    }

    /// io_uring: a SEND_ZC that failed (EAGAIN on a full socket) still posts a notification,
    /// which the kernel may chain to unacknowledged data and post only much later. Such
    /// requests are neither in flight for the caller nor counted against `max_requests`.
    #[test]
    fn failed_requests_awaiting_a_notification_are_invisible() {
        let mut t = Tracker::new(4, 4);
        let real = t.begin(1).unwrap();
        t.add_notif(real, 10);
        t.finish(real);
        let mut ghosts = vec![];
        for u in 0..5 {
            if let Some(g) = t.begin(100 + u) {
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
        assert!(t.begin(9).is_none(), "every slot is taken");
        assert!(t.complete_notif(ghosts[0], false));
        assert_eq!((t.inflight(), t.ghosts(), t.room()), (1, 3, 1));
        // Four real requests can be open at once again as ghosts go away.
        for g in &ghosts[1..] {
            assert!(t.complete_notif(*g, false));
        }
        assert_eq!(t.room(), 3);
        for u in 0..3 {
            let s = t.begin(10 + u).unwrap();
            t.add_notif(s, 1);
            t.finish(s);
        }
        assert!(t.begin(20).is_none(), "max_requests live");
        assert_eq!((t.inflight(), t.ghosts()), (4, 0));
        assert!(t.complete_notif(real, false));
        assert_eq!(drain(&mut t), [(1, 10, 0)]);
    }

    #[test]
    fn io_uring_style_notifications() {
        let mut t = Tracker::new(2, 2);
        let s = t.begin(3).unwrap();
        t.add_notif(s, 64);
        t.finish(s);
        // A failed send that still posts a notification: no completion for the caller.
        let f = t.begin(4).unwrap();
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
        let mut t = Tracker::new(2, 4);
        send(&mut t, 1, 1);
        send(&mut t, 2, 1);
        assert!(t.begin(3).is_none());
        t.complete_range(0, 1, false);
        assert!(t.begin(3).is_none(), "ready but unreaped");
        let mut one = [Completion::default(); 1];
        assert_eq!(t.pop_ready(&mut one), 1);
        assert!(t.begin(3).is_some());
    }

    #[test]
    fn window_full_is_reported() {
        let mut t = Tracker::new(8, 2);
        send(&mut t, 1, 2);
        assert!(!t.id_room());
        t.complete_range(0, 0, false);
        assert!(t.id_room());
    }
}
