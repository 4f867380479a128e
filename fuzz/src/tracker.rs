//! The zerocopy completion tracker (core/src/zc/tracker.rs) against a model.

use std::collections::VecDeque;

use lowcopy::fuzzing::{SlotId, Tracker};
use lowcopy::zc::{Completion, COPIED, FALLBACK};

use crate::Input;

/// One request as the model sees it.
#[derive(Debug)]
struct Req {
    user_data: u64,
    slot: SlotId,
    bytes: u64,
    /// Ids it took, and io_uring notifications it still expects.
    ids_left: u32,
    notifs_left: u32,
    flags: u32,
    finished: bool,
    /// Completed (handed to the ready queue), popped, or gone without a completion.
    completed: bool,
    popped: bool,
    released: bool,
}

struct Model {
    reqs: Vec<Req>,
    /// Issued ids in order: (id, request index, done); `retired` of them left the window.
    issued: Vec<(u32, usize, bool)>,
    retired: usize,
    ready: VecDeque<usize>,
    max_req: usize,
    n_slots: usize,
}

impl Model {
    fn live(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| !r.released && !r.popped && !(r.finished && r.bytes == 0))
            .count()
    }

    fn slots_in_use(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| !r.released && !r.popped)
            .count()
    }

    fn inflight(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| r.finished && r.bytes > 0 && !r.completed)
            .count()
    }

    /// After any change to `i`: complete it if nothing more is due (the tracker's
    /// maybe_complete / complete).
    fn settle(&mut self, i: usize) {
        let r = &mut self.reqs[i];
        if !r.finished || r.completed || r.released || r.ids_left > 0 || r.notifs_left > 0 {
            return;
        }
        if r.bytes == 0 {
            r.released = true; // gone, no completion
        } else {
            r.completed = true;
            self.ready.push_back(i);
        }
    }

    fn req_of_slot(&self, slot: SlotId) -> Option<usize> {
        self.reqs
            .iter()
            .position(|r| r.slot == slot && !r.released && !r.popped)
    }
}

/// See the crate docs.
pub fn tracker(data: &[u8]) {
    let mut inp = Input::new(data);
    let uring = inp.bool(); // io_uring notifications, else error-queue ids
    let max_req = 1 + inp.below(8);
    let max_ids = 1 + inp.below(16);
    let first = match inp.u8() % 3 {
        0 => 0,
        1 => u32::MAX - inp.u8() as u32,
        _ => inp.u32(),
    };
    let mut t = Tracker::starting_at(max_req, max_ids, first);
    let mut m = Model {
        reqs: Vec::new(),
        issued: Vec::new(),
        retired: 0,
        ready: VecDeque::new(),
        max_req,
        n_slots: max_req + max_req.div_ceil(4),
    };
    let mut open: Option<usize> = None;
    let mut next_ud = 1000u64;
    let mut steps = 0;
    while !inp.done() && steps < 2000 {
        steps += 1;
        match inp.u8() % 8 {
            0 if open.is_none() => {
                let ud = next_ud;
                next_ud += 1;
                let got = t.begin(ud).expect("slots for a few requests: no ENOMEM");
                let full = m.live() >= m.max_req || m.slots_in_use() >= m.n_slots;
                match got {
                    Some(slot) => {
                        assert!(
                            !full,
                            "begin succeeded with {} live of {}",
                            m.live(),
                            m.max_req
                        );
                        m.reqs.push(Req {
                            user_data: ud,
                            slot,
                            bytes: 0,
                            ids_left: 0,
                            notifs_left: 0,
                            flags: 0,
                            finished: false,
                            completed: false,
                            popped: false,
                            released: false,
                        });
                        open = Some(m.reqs.len() - 1);
                    }
                    None => assert!(
                        full,
                        "begin refused with {} live of {}",
                        m.live(),
                        m.max_req
                    ),
                }
            }
            1 if !uring => {
                if let Some(i) = open {
                    let bytes = 1 + inp.below(70000);
                    let window = m.issued.len() - m.retired;
                    assert_eq!(t.id_room(), window < max_ids.next_power_of_two());
                    if t.id_room() {
                        let want = first.wrapping_add(m.issued.len() as u32);
                        let id = t.add_id(m.reqs[i].slot, bytes);
                        assert_eq!(id, want, "the kernel's next id");
                        m.issued.push((id, i, false));
                        m.reqs[i].ids_left += 1;
                        m.reqs[i].bytes += bytes as u64;
                    }
                }
            }
            2 if uring => {
                if let Some(i) = open {
                    // 0 bytes: a failed SEND_ZC that still posts a notification.
                    let bytes = if inp.u8() % 4 == 0 {
                        0
                    } else {
                        1 + inp.below(70000)
                    };
                    t.add_notif(m.reqs[i].slot, bytes);
                    m.reqs[i].notifs_left += 1;
                    m.reqs[i].bytes += bytes as u64;
                }
            }
            3 => {
                if let Some(i) = open {
                    let bytes = inp.below(70000);
                    let flags = [0, COPIED, COPIED | FALLBACK][inp.below(3)];
                    t.add_done(m.reqs[i].slot, bytes, flags);
                    m.reqs[i].bytes += bytes as u64;
                    m.reqs[i].flags |= flags;
                }
            }
            4 => {
                if let Some(i) = open.take() {
                    t.finish(m.reqs[i].slot);
                    m.reqs[i].finished = true;
                    m.settle(i);
                }
            }
            5 if !uring => {
                let base = if m.issued.is_empty() {
                    first
                } else {
                    m.issued[inp.below(m.issued.len())].0
                };
                let lo = base.wrapping_add(inp.u8() as i8 as i32 as u32);
                let len: u64 = match inp.u8() % 8 {
                    0 => inp.u32() as u64 + 1, // anything up to all 2^32 ids
                    _ => 1 + inp.below(24) as u64,
                };
                let hi = lo.wrapping_add((len - 1) as u32);
                let copied = inp.bool();
                let out = t.complete_range(lo, hi, copied);
                let mut matched = 0u64;
                for k in 0..m.issued.len() {
                    let (id, i, done) = m.issued[k];
                    if done || (id.wrapping_sub(lo) as u64) >= len {
                        continue;
                    }
                    matched += 1;
                    m.issued[k].2 = true;
                    m.reqs[i].ids_left -= 1;
                    if copied {
                        m.reqs[i].flags |= COPIED;
                    }
                    m.settle(i);
                }
                while m.retired < m.issued.len() && m.issued[m.retired].2 {
                    m.retired += 1;
                }
                assert_eq!(out.matched as u64, matched, "range [{lo}, {hi}]: matched");
                assert_eq!(
                    out.unexpected as u64,
                    (len - matched).min(u32::MAX as u64),
                    "range [{lo}, {hi}]: unexpected"
                );
            }
            6 if uring => {
                let pending: Vec<usize> = (0..m.reqs.len())
                    .filter(|&i| m.reqs[i].notifs_left > 0 && !m.reqs[i].released)
                    .collect();
                let slot = if !pending.is_empty() && inp.u8() % 4 != 0 {
                    m.reqs[pending[inp.below(pending.len())]].slot
                } else {
                    inp.u8() as SlotId // any slot: in use or not, waiting or not
                };
                let copied = inp.bool();
                let want = m.req_of_slot(slot).filter(|&i| m.reqs[i].notifs_left > 0);
                assert_eq!(
                    t.complete_notif(slot, copied),
                    want.is_some(),
                    "notification for slot {slot}"
                );
                if let Some(i) = want {
                    m.reqs[i].notifs_left -= 1;
                    if copied {
                        m.reqs[i].flags |= COPIED;
                    }
                    m.settle(i);
                }
            }
            7 => pop(&mut t, &mut m, inp.below(9)),
            _ => {}
        }
        assert_eq!(t.inflight(), m.inflight(), "sends in flight");
        assert_eq!(t.ready(), m.ready.len(), "completions ready");
        assert_eq!(
            t.ids_inflight(),
            m.issued.len() - m.retired,
            "ids in flight"
        );
        assert_eq!(
            t.next_id(),
            first.wrapping_add(m.issued.len() as u32),
            "next id"
        );
    }
    // The end: close the open request, let every notification arrive, reap everything.
    if let Some(i) = open.take() {
        t.finish(m.reqs[i].slot);
        m.reqs[i].finished = true;
        m.settle(i);
    }
    for k in 0..m.issued.len() {
        let (id, i, done) = m.issued[k];
        if !done {
            let out = t.complete_range(id, id, false);
            assert_eq!(
                (out.matched, out.unexpected),
                (1, 0),
                "last notification of id {id}"
            );
            m.issued[k].2 = true;
            m.reqs[i].ids_left -= 1;
            m.settle(i);
        }
    }
    for i in 0..m.reqs.len() {
        while m.reqs[i].notifs_left > 0 && !m.reqs[i].released {
            assert!(t.complete_notif(m.reqs[i].slot, false));
            m.reqs[i].notifs_left -= 1;
            m.settle(i);
        }
    }
    pop(&mut t, &mut m, usize::MAX);
    assert_eq!(t.inflight(), 0);
    assert_eq!(t.ready(), 0);
    for r in &m.reqs {
        assert_eq!(
            r.popped,
            r.bytes > 0,
            "user_data {}: {} bytes, completed {}",
            r.user_data,
            r.bytes,
            r.popped
        );
    }
}

/// Reaps up to `k` completions and checks each against the model's ready queue: the oldest
/// first, each once, with its bytes and flags, none early.
fn pop(t: &mut Tracker, m: &mut Model, k: usize) {
    let mut out = vec![Completion::default(); k.min(m.reqs.len() + 1)];
    let n = t.pop_ready(&mut out);
    assert_eq!(n, out.len().min(m.ready.len()), "completions reaped");
    for c in &out[..n] {
        let i = m.ready.pop_front().unwrap();
        let r = &mut m.reqs[i];
        assert_eq!(c.user_data, r.user_data, "completion order");
        assert!(
            r.finished && r.ids_left == 0 && r.notifs_left == 0,
            "early: {r:?}"
        );
        assert!(!r.popped, "twice: {r:?}");
        assert_eq!(c.result as u64, r.bytes, "result of {}", r.user_data);
        assert_eq!(c.flags, r.flags, "flags of {}", r.user_data);
        r.popped = true;
    }
}
