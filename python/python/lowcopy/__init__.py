"""lowcopy: Linux socket primitives that avoid needless copies and wakeups.

- Offset peek: read received stream data at an offset without consuming it
  (:func:`peek_at`, :func:`peek_into`, :func:`consume`, :class:`Peeker`), with the kernel's
  ``SO_PEEK_OFF`` where it exists and a discard-prefix fallback elsewhere.
- Zerocopy send with completions (:class:`ZeroCopySender`): every send carries a
  ``user_data`` object that comes back in exactly one :class:`Completion` when the kernel no
  longer reads the buffer; the buffer is kept alive and un-resizable until then.
- Low-water-mark receive (:func:`set_rcvlowat`, :func:`recv_atleast`): one wakeup for
  ``min`` bytes instead of one per segment.
- Zero-copy TCP receive (:class:`ZeroCopyReceiver`): received pages mapped read-only.
- :func:`probe`: what the running kernel offers (``python -m lowcopy`` prints it).

Every call takes a ``socket.socket`` (or anything with ``fileno()``) or an int fd. Objects
work on their own duplicate of the descriptor (close them with ``close()`` or ``with``).
Errors are ``OSError(errno, strerror)``, so CPython raises ``BlockingIOError``,
``TimeoutError``, ``ConnectionResetError``, ... with ``.errno`` set.
"""

from __future__ import annotations

import socket as _socket

from ._lowcopy import (
    IOV_MAX,
    Caps,
    Chunk,
    Completion,
    Peeker,
    PeekResult,
    PeekStats,
    Receiver,
    RecvStats,
    ZcrxStats,
    ZcStats,
    ZeroCopyReceiver,
    ZeroCopySender,
    __version__,
    consume,
    peek_at,
    peek_into,
    peek_supported,
    probe,
    recv_atleast,
    recv_atleast_into,
    recv_atleast_stats,
    set_rcvlowat,
)
from ._types import PeekMode, Urgent, ZcBackend, ZcFlag

#: Flags the calls take, re-exported from :mod:`socket` for convenience.
MSG_DONTWAIT: int = _socket.MSG_DONTWAIT
MSG_MORE: int = _socket.MSG_MORE
MSG_NOSIGNAL: int = _socket.MSG_NOSIGNAL

__all__ = [
    "IOV_MAX",
    "MSG_DONTWAIT",
    "MSG_MORE",
    "MSG_NOSIGNAL",
    "Caps",
    "Chunk",
    "Completion",
    "PeekMode",
    "Urgent",
    "PeekResult",
    "PeekStats",
    "Peeker",
    "Receiver",
    "RecvStats",
    "ZcBackend",
    "ZcFlag",
    "ZcStats",
    "ZcrxStats",
    "ZeroCopyReceiver",
    "ZeroCopySender",
    "__version__",
    "consume",
    "peek_at",
    "peek_into",
    "peek_supported",
    "probe",
    "recv_atleast",
    "recv_atleast_into",
    "recv_atleast_stats",
    "set_rcvlowat",
]
