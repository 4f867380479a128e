"""``python -m lowcopy``: what the running kernel offers, as a table an operator can read."""

from __future__ import annotations

import os
import sys

from . import __version__, probe

ROWS = [
    # (field, what it enables, first kernel with it, what lowcopy does without it)
    ("peek_off_tcp4", "SO_PEEK_OFF, TCP over IPv4", "6.9", "Peeker uses the discard prefix"),
    ("peek_off_tcp6", "SO_PEEK_OFF, TCP over IPv6", "6.12", "Peeker uses the discard prefix"),
    ("peek_off_unix", "SO_PEEK_OFF, AF_UNIX stream", "3.4", "Peeker uses the discard prefix"),
    ("peek_off_mptcp", "SO_PEEK_OFF, MPTCP", "none yet", "Peeker uses the discard prefix"),
    ("zerocopy_tcp", "MSG_ZEROCOPY, TCP", "4.14", "ZeroCopySender copies"),
    ("zerocopy_udp", "MSG_ZEROCOPY, UDP", "5.0", "ZeroCopySender copies"),
    ("uring_send_zc", "io_uring SEND_ZC", "6.0", "AUTO uses the error queue"),
    ("uring_sendmsg_zc", "io_uring SENDMSG_ZC (addresses)", "6.1", "sendmsg by error queue"),
    ("tcp_zerocopy_receive_size", "TCP_ZEROCOPY_RECEIVE", "4.18", "ZeroCopyReceiver unavailable"),
]


def main() -> int:
    caps = probe()
    u = os.uname()
    print(f"lowcopy {__version__} on {u.sysname} {u.release} ({u.machine})")
    print()
    head = ("feature", "here", "since Linux", "without it")
    table = []
    for field, what, since, without in ROWS:
        v = getattr(caps, field)
        if isinstance(v, bool):
            here = "yes" if v else "no"
        else:
            here = f"yes ({v}-byte struct)" if v else "no"
        table.append((what, here, since, "-" if here != "no" else without))
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(4)]
    for r in [head, tuple("-" * w for w in widths), *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
