//! The adaptive option: stop asking for zerocopy once the kernel has copied a streak of sends.

use super::ADAPTIVE_AFTER;

/// The [`ZcOptions::adaptive`] option's state: consecutive copied completions, and whether zerocopy
/// is no longer asked for.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Adaptive {
    pub(super) enabled: bool,
    pub(super) streak: u32,
    pub(super) off: bool,
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
}
