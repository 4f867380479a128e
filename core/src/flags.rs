//! [`Flags`]: what a single call may do, as a Rust value instead of `MSG_*` integers.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use libc::c_int;

use crate::compat::io;
use crate::sys::errno;

/// Per-call flags of peeks, consumes, zerocopy sends and zero-copy receives.
///
/// The default, [`Flags::NONE`], behaves as the same call without flags does in C: it blocks
/// unless the descriptor is non-blocking (`O_NONBLOCK`). Combine flags with `|`.
///
/// ```
/// use lowcopy::Flags;
///
/// let f = Flags::DONTWAIT | Flags::MORE;
/// assert!(f.contains(Flags::DONTWAIT));
/// assert_eq!(f.to_raw(), libc::MSG_DONTWAIT | libc::MSG_MORE);
/// assert_eq!(Flags::from_raw(libc::MSG_DONTWAIT).unwrap(), Flags::DONTWAIT);
/// assert_eq!(Flags::from_raw(libc::MSG_PEEK).unwrap_err().raw_os_error(), Some(libc::EINVAL));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(c_int);

impl Flags {
    /// No flag: the call blocks as the descriptor's `O_NONBLOCK` says.
    pub const NONE: Flags = Flags(0);
    /// This call never waits, whatever the descriptor's mode (`MSG_DONTWAIT`): where it would
    /// wait it fails with `EAGAIN` instead.
    pub const DONTWAIT: Flags = Flags(libc::MSG_DONTWAIT);
    /// Sends only: more data follows, so the kernel may hold this data back to fill a segment
    /// (`MSG_MORE`; TCP corks until a send without it, UDP appends to one datagram). Calls
    /// that do not send answer `EINVAL` to it.
    pub const MORE: Flags = Flags(libc::MSG_MORE);

    const ALL: c_int = libc::MSG_DONTWAIT | libc::MSG_MORE;

    /// The flags from their C values (`MSG_DONTWAIT`, `MSG_MORE`), for bindings that take
    /// integers.
    ///
    /// # Errors
    /// `EINVAL` for any other bit.
    pub fn from_raw(raw: c_int) -> io::Result<Flags> {
        if raw & !Self::ALL != 0 {
            return Err(errno(libc::EINVAL));
        }
        Ok(Flags(raw))
    }

    /// The C value: `MSG_DONTWAIT` and `MSG_MORE` bits.
    pub const fn to_raw(self) -> c_int {
        self.0
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` with the flags of `other` added (the `const` form of `|`).
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Whether [`Flags::DONTWAIT`] is set.
    pub const fn dontwait(self) -> bool {
        self.contains(Self::DONTWAIT)
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.union(rhs)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = match (self.contains(Self::DONTWAIT), self.contains(Self::MORE)) {
            (true, true) => "DONTWAIT | MORE",
            (true, false) => "DONTWAIT",
            (false, true) => "MORE",
            (false, false) => "NONE",
        };
        write!(f, "Flags({names})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip_and_refusal() {
        for f in [
            Flags::NONE,
            Flags::DONTWAIT,
            Flags::MORE,
            Flags::DONTWAIT | Flags::MORE,
        ] {
            assert_eq!(Flags::from_raw(f.to_raw()).unwrap(), f);
        }
        for bad in [libc::MSG_PEEK, libc::MSG_NOSIGNAL, libc::MSG_WAITALL, -1] {
            let e = Flags::from_raw(bad).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{bad:#x}");
        }
        assert_eq!(format!("{:?}", Flags::default()), "Flags(NONE)");
        assert_eq!(
            format!("{:?}", Flags::MORE | Flags::DONTWAIT),
            "Flags(DONTWAIT | MORE)"
        );
        assert!(!Flags::MORE.dontwait());
    }
}
