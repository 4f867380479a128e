//! The adaptive option: stop asking for zerocopy once the kernel has copied a streak of sends,
//! and ask again, rarely, in case the path changed (a route over a device that does
//! scatter-gather, a peer that moved off loopback).

use super::{ADAPTIVE_AFTER, ADAPTIVE_PROBE_EVERY};

/// The [`ZcOptions::adaptive`](super::ZcOptions::adaptive) option's state: consecutive copied
/// completions, whether zerocopy is no longer asked for, and the plain copies sent since.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Adaptive {
    pub(super) enabled: bool,
    pub(super) streak: u32,
    pub(super) off: bool,
    /// Plain copies sent since zerocopy was turned off.
    pub(super) copies: u32,
}

impl Adaptive {
    /// `matched` completions with this copied bit arrived.
    pub(super) fn note(&mut self, copied: bool, matched: u32) {
        if matched == 0 {
            return;
        }
        if !copied {
            self.streak = 0;
            return;
        }
        self.streak = self.streak.saturating_add(matched);
        if self.enabled && self.streak >= ADAPTIVE_AFTER {
            self.off = true;
        }
    }

    /// A plain copy went out because zerocopy is off: after [`ADAPTIVE_PROBE_EVERY`] of them
    /// zerocopy is asked for again, and the next [`ADAPTIVE_AFTER`] completions decide anew.
    #[inline]
    pub(super) fn note_copy_send(&mut self) {
        if !self.off {
            return;
        }
        self.copies += 1;
        if self.copies >= ADAPTIVE_PROBE_EVERY {
            self.off = false;
            self.copies = 0;
            self.streak = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_off_after_a_copied_streak_and_probes_again() {
        let mut a = Adaptive {
            enabled: true,
            ..Adaptive::default()
        };
        a.note(true, ADAPTIVE_AFTER - 1);
        a.note(false, 1); // one real zerocopy completion breaks the streak
        a.note(true, ADAPTIVE_AFTER - 1);
        assert!(!a.off);
        a.note(true, 1);
        assert!(a.off);
        for _ in 0..ADAPTIVE_PROBE_EVERY - 1 {
            a.note_copy_send();
        }
        assert!(a.off);
        a.note_copy_send();
        assert!(!a.off, "zerocopy is asked for again");
        a.note(true, ADAPTIVE_AFTER);
        assert!(a.off, "and the path still copies: off again");
    }

    #[test]
    fn disabled_never_turns_off() {
        let mut a = Adaptive::default();
        a.note(true, 10 * ADAPTIVE_AFTER);
        assert!(!a.off, "only with the ADAPTIVE flag");
        a.note_copy_send();
        assert!(!a.off);
    }
}
