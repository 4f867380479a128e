//! The peek API's values: modes, stream kinds, counters, results.

use super::*;

/// Which peek mechanism to use (`LOWCOPY_PEEK_*` in C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PeekMode {
    // doc-source: peek_mode.auto
    /// `SO_PEEK_OFF` where this socket family has it, else [`PeekMode::Discard`]. The answer is
    /// probed once per (family, protocol) and cached for the process. With `SO_PEEK_OFF`, a
    /// cursor of at most [`AUTO_DISCARD_MAX`] bytes that the kernel's offset is not already at
    /// is peeked with a discard prefix instead, which saves a `setsockopt` for a copy of at
    /// most 4 KiB (counted in [`PeekStats::bytes_skipped_copied`]).
    // doc-end
    Auto = 0,
    // doc-source: peek_mode.offset
    /// The kernel's `SO_PEEK_OFF`: TCP over IPv4 since Linux 6.9, over IPv6 since 6.12, AF_UNIX
    /// stream since 3.4; never MPTCP (`EOPNOTSUPP` on sockets without it). Peeks cost the same
    /// at any offset.
    // doc-end
    Offset = 1,
    // doc-source: peek_mode.discard
    /// `MSG_PEEK` with a leading scratch prefix that swallows the `offset` bytes before the
    /// cursor. Works on every stream socket, but the kernel copies the prefix again on every
    /// peek (counted in [`PeekStats::bytes_skipped_copied`]).
    // doc-end
    Discard = 2,
    // doc-source: peek_mode.offset_or_discard
    /// `SO_PEEK_OFF` where this socket family has it, else [`PeekMode::Discard`], as
    /// [`PeekMode::Auto`] picks (probed once per family and cached), but with no small-offset
    /// shortcut: every peek goes through the mechanism picked, so the only `SO_PEEK_OFF` write
    /// is the one that moves the kernel's offset to a cursor it is not at (a rewind, a skip).
    // doc-end
    OffsetOrDiscard = 3,
}

impl TryFrom<u32> for PeekMode {
    type Error = io::Error;
    /// Unknown values are `EINVAL`.
    fn try_from(v: u32) -> io::Result<Self> {
        match v {
            0 => Ok(Self::Auto),
            1 => Ok(Self::Offset),
            2 => Ok(Self::Discard),
            3 => Ok(Self::OffsetOrDiscard),
            _ => Err(errno(libc::EINVAL)),
        }
    }
}

/// Counters kept by a [`Peeker`]. Byte counts are in bytes.
///
/// Shared with C as `lowcopy_peek_stats` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeekStats {
    // doc-source: peek_stats.syscalls
    /// Syscalls the peeker made, failed ones included, its constructor's too: 2 to 4 setting
    /// the socket up (`SO_PEEK_OFF`; `TCP_INQ` for the discard mechanism on TCP and MPTCP;
    /// `SO_OOBINLINE`), and before them the 3 `getsockopt` of
    /// [`Peeker::new`] that learn what the socket is, or the 1 (TCP) or 2 (MPTCP, AF_UNIX) of
    /// [`Peeker::with_kind`] that check the kind stated.
    // doc-end
    pub syscalls: u64,
    // doc-source: peek_stats.peeks
    /// Peeks that returned data.
    // doc-end
    pub peeks: u64,
    // doc-source: peek_stats.bytes_peeked
    /// Bytes delivered to the caller by peeks.
    // doc-end
    pub bytes_peeked: u64,
    // doc-source: peek_stats.bytes_skipped_copied
    /// Bytes the kernel copied to user space only for lowcopy to throw them away: the discard
    /// prefix, and consumed bytes on protocols without a copy-free `MSG_TRUNC` (AF_UNIX).
    /// Always 0 with [`PeekMode::Offset`] on TCP; at most [`AUTO_DISCARD_MAX`] (4096) per
    /// peek with [`PeekMode::Auto`] over `SO_PEEK_OFF`.
    // doc-end
    pub bytes_skipped_copied: u64,
    // doc-source: peek_stats.bytes_consumed
    /// Bytes dropped from the head of the receive queue by the peeker's consume.
    // doc-end
    pub bytes_consumed: u64,
    // doc-source: peek_stats.rcvlowat_updates
    /// `SO_RCVLOWAT` changes made by the armed low-water mark.
    // doc-end
    pub rcvlowat_updates: u64,
    // doc-source: peek_stats.fds_closed
    /// Descriptors that came with bytes the peeker's consume dropped (AF_UNIX `SCM_RIGHTS`,
    /// and the pidfd `SO_PASSPIDFD` attaches), received close-on-exec and closed at once.
    // doc-end
    pub fds_closed: u64,
}

/// What a stream socket is, as the code that created it knows: lets [`Peeker::with_kind`]
/// check it with 1 or 2 `getsockopt` instead of the 3 that [`Peeker::new`] makes to learn it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// `socket(AF_INET, SOCK_STREAM, IPPROTO_TCP)` (or protocol 0).
    Tcp4,
    /// `socket(AF_INET6, SOCK_STREAM, IPPROTO_TCP)` (or protocol 0).
    Tcp6,
    /// `socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)`: never has `SO_PEEK_OFF`.
    Mptcp4,
    /// `socket(AF_INET6, SOCK_STREAM, IPPROTO_MPTCP)`.
    Mptcp6,
    /// `socket(AF_UNIX, SOCK_STREAM, 0)`.
    Unix,
}

impl StreamKind {
    /// The kind of `socket(domain, SOCK_STREAM, protocol)`; `Ok(None)` for `AF_UNSPEC` (0),
    /// which means "not stated: ask the socket".
    ///
    /// # Errors
    /// `EINVAL` for any other pair (a datagram protocol, an unknown family, AF_UNIX with a
    /// protocol): the C ABI's check of the numbers it is given.
    pub fn from_raw(domain: c_int, protocol: c_int) -> io::Result<Option<Self>> {
        Ok(Some(match (domain, protocol) {
            (libc::AF_UNSPEC, 0) => return Ok(None),
            (libc::AF_INET, 0 | libc::IPPROTO_TCP) => Self::Tcp4,
            (libc::AF_INET6, 0 | libc::IPPROTO_TCP) => Self::Tcp6,
            (libc::AF_INET, libc::IPPROTO_MPTCP) => Self::Mptcp4,
            (libc::AF_INET6, libc::IPPROTO_MPTCP) => Self::Mptcp6,
            (libc::AF_UNIX, 0) => Self::Unix,
            _ => return Err(errno(libc::EINVAL)),
        }))
    }

    pub(super) fn info(self) -> SockInfo {
        let (transport, family) = match self {
            Self::Tcp4 => (Transport::Tcp, 0),
            Self::Tcp6 => (Transport::Tcp, 1),
            Self::Mptcp4 => (Transport::Tcp, 2),
            Self::Mptcp6 => (Transport::Tcp, 3),
            Self::Unix => (Transport::Unix, 4),
        };
        SockInfo { transport, family }
    }
}

/// What one [`Peeker::peek_at`] peeked, and from where: a caller that keeps its own stream
/// arithmetic compares `stream_pos` with its own position of `offset`, so that an offset that
/// went wrong (a consume or a read it did not account for) shows at once rather than as
/// silently wrong bytes.
///
/// Shared with C as `lowcopy_peek_result` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeekResult {
    // doc-source: peek_result.len
    /// Bytes copied (the call's return value); 0 at end of stream after `offset`.
    // doc-end
    pub len: u64,
    // doc-source: peek_result.offset
    /// Where they came from: bytes after the head of the receive queue (the offset asked for).
    // doc-end
    pub offset: u64,
    // doc-source: peek_result.stream_pos
    /// The same place as a position in the stream: the bytes that left the head of the queue
    /// through this peeker ([`Peeker::consume`], [`Peeker::note_consumed`]) plus `offset`.
    /// For a peeker made before any byte was read from the socket, the stream position of
    /// the first byte peeked.
    // doc-end
    pub stream_pos: u64,
    // doc-source: peek_result.syscalls
    /// Syscalls this call made: 1 when the kernel's `SO_PEEK_OFF` already was at `offset` (or
    /// the discard prefix was used), 2 when it had to be moved first; more only on the paths
    /// documented at [`Peeker::peek_at`].
    // doc-end
    pub syscalls: u32,
    /// `PEEK_MOVED` (the kernel's offset was written) and `PEEK_PREFIXED` (peeked through a
    /// discard prefix: the kernel copied `offset` bytes to skip them) bits.
    pub flags: u32,
}

/// Who owns TCP urgent data (`MSG_OOB`) on a peeker's socket ([`PeekerOptions::urgent`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Urgent {
    /// The peeker sets `SO_OOBINLINE`: urgent bytes are ordinary stream bytes (module docs,
    /// "Urgent data"). The default, and what [`Peeker::new`] does.
    #[default]
    Inline,
    // doc-source: urgent.caller
    /// The caller owns the urgent-data policy: the peeker leaves `SO_OOBINLINE` as it is (no
    /// `setsockopt`) and uses the discard mechanism (the kernel's `SO_PEEK_OFF` counts an
    /// urgent byte that reads skip, so its offsets would drift from the caller's), on TCP and
    /// MPTCP only. Peeks still deliver byte for byte what reads deliver: the kernel ends every
    /// read and every peek at the urgent mark, so a peek whose bytes reach the mark returns
    /// short, ending just before the mark, and a peek at or past the mark fails with `ENOMSG`
    /// (blocking or not; nothing is copied, the cursor stays) for as long as the mark lies
    /// ahead of the head of the queue. The caller deals with the urgent byte in its own way
    /// (`recv(MSG_OOB)` for it, `SIOCATMARK` for where it is) and consumes the bytes before
    /// the mark; from then on peeks pass the mark again. Without `SO_OOBINLINE` the urgent
    /// byte is not part of what reads deliver (the kernel skips it), so neither peeks nor
    /// offsets count it; with `SO_OOBINLINE` set by the caller it is an ordinary byte after
    /// the mark. Errors at creation: `EINVAL` with [`PeekMode::Offset`], `EOPNOTSUPP` on
    /// AF_UNIX (its out-of-band byte is delivered by peeks that reads skip, and has no mark a
    /// peek stops at).
    // doc-end
    Caller,
}

/// How to make a [`Peeker`] ([`Peeker::with_options`]): the mode, the socket's kind if the
/// caller knows it, and who owns urgent data.
///
/// ```
/// use lowcopy::{PeekMode, PeekerOptions, StreamKind, Urgent};
/// let o = PeekerOptions::new(PeekMode::Discard).kind(StreamKind::Tcp4).urgent(Urgent::Caller);
/// assert_eq!(o.urgent, Urgent::Caller);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeekerOptions {
    /// The mechanism ([`PeekMode`]).
    pub mode: PeekMode,
    /// The socket's kind as the caller states it ([`Peeker::with_kind`]); `None`: ask the
    /// socket ([`Peeker::new`]).
    pub kind: Option<StreamKind>,
    /// Who owns urgent data ([`Urgent`]).
    pub urgent: Urgent,
}

impl PeekerOptions {
    /// `mode`, the kind asked of the socket, urgent bytes inline.
    pub const fn new(mode: PeekMode) -> Self {
        Self {
            mode,
            kind: None,
            urgent: Urgent::Inline,
        }
    }

    /// States the socket's kind.
    pub const fn kind(mut self, kind: StreamKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// Who owns urgent data.
    pub const fn urgent(mut self, urgent: Urgent) -> Self {
        self.urgent = urgent;
        self
    }
}
