"""Enums and flags of lowcopy (the native module takes and returns their int values).

Kept apart from ``__init__`` so that the native module can import them without importing
the package facade.
"""

from __future__ import annotations

import enum

__all__ = ["PeekMode", "ZcBackend", "ZcFlag"]


class PeekMode(enum.IntEnum):
    """Which peek mechanism a :class:`~lowcopy.Peeker` uses."""

    AUTO = 0
    """``SO_PEEK_OFF`` where the socket family has it, else ``DISCARD`` (probed once per
    family and cached). Small cursors (at most 4 KiB) the kernel's offset is not already at
    are peeked with a discard prefix, which saves a ``setsockopt``."""
    OFFSET = 1
    """The kernel's ``SO_PEEK_OFF``: TCP/IPv4 since Linux 6.9, TCP/IPv6 since 6.12,
    AF_UNIX stream since 3.4, never MPTCP (``EOPNOTSUPP`` there)."""
    DISCARD = 2
    """``MSG_PEEK`` into a scratch prefix of ``offset`` bytes: works everywhere, but the
    kernel copies those bytes again on every peek (``PeekStats.bytes_skipped_copied``)."""


class ZcBackend(enum.IntEnum):
    """Which mechanism a :class:`~lowcopy.ZeroCopySender` sends with."""

    AUTO = 0
    """io_uring where ``SEND_ZC`` works on the socket, else the error queue where
    ``SO_ZEROCOPY`` works, else copy."""
    ERRQUEUE = 1
    """``SO_ZEROCOPY`` + ``MSG_ZEROCOPY``; completions read from ``MSG_ERRQUEUE``
    (Linux 4.14 TCP, 5.0 UDP). Never on a socket an event loop's transport polls."""
    IO_URING = 2
    """io_uring ``SEND_ZC`` / ``SENDMSG_ZC`` (Linux 6.0 / 6.1). The first thread that sends
    owns the ring (``EEXIST`` from any other)."""
    COPY = 3
    """Plain copying ``sendmsg``; each completion is ready when the send returns."""


class ZcFlag(enum.IntFlag):
    """Flags of a :class:`~lowcopy.Completion`."""

    COPIED = 1
    """The data was copied, not pinned: by the kernel (a deferred copy on loopback, veth,
    devices without scatter-gather) or by a plain send."""
    FALLBACK = 2
    """Some or all of the request went out as a plain copied send because zerocopy was not
    possible (``ENOBUFS``, adaptive mode, full id window)."""
