"""Enums and flags of lowcopy (the native module takes and returns their int values).

Kept apart from ``__init__`` so that the native module can import them without importing
the package facade.
"""

from __future__ import annotations

import enum

__all__ = ["PeekMode", "Urgent", "ZcBackend", "ZcFlag"]


class PeekMode(enum.IntEnum):
    """Which peek mechanism a :class:`~lowcopy.Peeker` uses."""

    AUTO = 0
    # doc-copy: peek_mode.auto
    """``SO_PEEK_OFF`` where this socket family has it, else ``PeekMode.DISCARD``. The answer is
    probed once per (family, protocol) and cached for the process. With ``SO_PEEK_OFF``, a cursor
    of at most 4096 bytes that the kernel's offset is not already at is peeked with a discard
    prefix instead, which saves a ``setsockopt`` for a copy of at most 4 KiB (counted in
    ``PeekStats.bytes_skipped_copied``)."""
    OFFSET = 1
    # doc-copy: peek_mode.offset
    """The kernel's ``SO_PEEK_OFF``: TCP over IPv4 since Linux 6.9, over IPv6 since 6.12, AF_UNIX
    stream since 3.4; never MPTCP (``EOPNOTSUPP`` on sockets without it). Peeks cost the same at
    any offset."""
    DISCARD = 2
    # doc-copy: peek_mode.discard
    """``MSG_PEEK`` with a leading scratch prefix that swallows the ``offset`` bytes before the
    cursor. Works on every stream socket, but the kernel copies the prefix again on every peek
    (counted in ``PeekStats.bytes_skipped_copied``)."""
    OFFSET_OR_DISCARD = 3
    # doc-copy: peek_mode.offset_or_discard
    """``SO_PEEK_OFF`` where this socket family has it, else ``PeekMode.DISCARD``, as
    ``PeekMode.AUTO`` picks (probed once per family and cached), but with no small-offset
    shortcut: every peek goes through the mechanism picked, so the only ``SO_PEEK_OFF`` write is
    the one that moves the kernel's offset to a cursor it is not at (a rewind, a skip)."""


class Urgent(enum.IntEnum):
    """Who owns TCP urgent data (``MSG_OOB``) on a :class:`~lowcopy.Peeker`'s socket
    (``Peeker(sock, mode, urgent=...)``)."""

    INLINE = 0
    """The peeker sets ``SO_OOBINLINE``: urgent bytes are ordinary stream bytes. The default."""
    CALLER = 1
    # doc-copy: urgent.caller
    """The caller owns the urgent-data policy: the peeker leaves ``SO_OOBINLINE`` as it is (no
    ``setsockopt``) and uses the discard mechanism (the kernel's ``SO_PEEK_OFF`` counts an urgent
    byte that reads skip, so its offsets would drift from the caller's), on TCP and MPTCP only.
    Peeks still deliver byte for byte what reads deliver: the kernel ends every read and every
    peek at the urgent mark, so a peek whose bytes reach the mark returns short, ending just
    before the mark, and a peek at or past the mark fails with ``ENOMSG`` (blocking or not;
    nothing is copied, the cursor stays) for as long as the mark lies ahead of the head of the
    queue. The caller deals with the urgent byte in its own way (``recv(MSG_OOB)`` for it,
    ``SIOCATMARK`` for where it is) and consumes the bytes before the mark; from then on peeks
    pass the mark again. Without ``SO_OOBINLINE`` the urgent byte is not part of what reads
    deliver (the kernel skips it), so neither peeks nor offsets count it; with ``SO_OOBINLINE``
    set by the caller it is an ordinary byte after the mark. Errors at creation: ``EINVAL`` with
    ``PeekMode.OFFSET``, ``EOPNOTSUPP`` on AF_UNIX (its out-of-band byte is delivered by peeks
    that reads skip, and has no mark a peek stops at)."""


class ZcBackend(enum.IntEnum):
    """Which mechanism a :class:`~lowcopy.ZeroCopySender` sends with.

    ``ERRQUEUE`` never on a socket an event loop's transport polls (``lowcopy.asyncio``): its
    notifications keep ``EPOLLERR`` up for every poller of the socket.
    """

    AUTO = 0
    # doc-copy: zc_backend.auto
    """Io_uring ``SEND_ZC`` where it works on this socket, else ``MSG_ZEROCOPY`` with the error
    queue where ``SO_ZEROCOPY`` works, else plain copies. Sockets with no zerocopy at all
    (AF_UNIX, MPTCP) get the copy backend. With io_uring the sender belongs to the first thread
    that sends: a daemon that hands a connection to another thread mid-stream should choose the
    error queue."""
    ERRQUEUE = 1
    # doc-copy: zc_backend.errqueue
    """``SO_ZEROCOPY`` + ``MSG_ZEROCOPY`` (TCP since Linux 4.14, UDP since 5.0); completions read
    from ``MSG_ERRQUEUE`` and mapped from the kernel's 32-bit id ranges back to user_data. The
    sender owns the socket's error queue: other entries on it (ICMP errors with ``IP_RECVERR``,
    ``SO_TIMESTAMPING`` reports) are read, counted in ``errqueue_other`` and dropped, and reading
    an ICMP entry also clears the ``SO_ERROR`` it set (net/core/skbuff.c
    ``sock_dequeue_err_skb``). An application that needs those entries should use io_uring, whose
    notifications do not go through the error queue."""
    IO_URING = 2
    # doc-copy: zc_backend.iouring
    """Io_uring ``IORING_OP_SEND_ZC`` (Linux 6.0) / ``SENDMSG_ZC`` (6.1); user_data comes back in
    the notification CQE. One ring per thread serves every sender used on that thread (8192
    completion entries, made with the thread's first sender, kept until the thread exits): a
    sender owns no descriptor. The ring is set up with ``IORING_SETUP_DEFER_TASKRUN`` (6.1) so
    that notifications never interrupt the thread's other syscalls with ``EINTR``; they are
    posted during the next send (no syscall of their own). Its price, ``SINGLE_ISSUER``: a sender
    belongs to the first thread that sends on it, waits on it or asks for its completion
    descriptor (it joins that thread's ring), and calls from any other thread fail with
    ``EEXIST``."""
    COPY = 3
    # doc-copy: zc_backend.copy
    """Plain copying ``sendmsg``; the completion is ready when the send returns."""


class ZcFlag(enum.IntFlag):
    """Flags of a :class:`~lowcopy.Completion`."""

    COPIED = 1
    # doc-copy: completion.copied
    """The data was copied, not pinned: by the kernel (a deferred copy: loopback, veth, devices
    without scatter-gather; ``SO_EE_CODE_ZEROCOPY_COPIED`` or ``IORING_NOTIF_USAGE_ZC_COPIED``),
    or by a plain send."""
    FALLBACK = 2
    # doc-copy: completion.fallback
    """Some or all of the request went out as a plain copied send because zerocopy was not
    possible (``ENOBUFS``, io_uring ``ENOMEM``, adaptive mode, full id window). The copy backend
    sets only the copied flag: copying is what it was asked to do."""
