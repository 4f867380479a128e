"""Socket fixtures shared by the Python tests (the counterpart of core/tests/common/mod.rs)."""

from __future__ import annotations

import array
import errno
import fcntl
import mmap
import os
import select
import signal
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SO_PEEK_OFF = 42
SO_ZEROCOPY = 60
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
SO_TIMESTAMPING = 37
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
IP_RECVERR = 11
MSG_ZEROCOPY = 0x4000000
IPPROTO_MPTCP = 262

# ---- the stream pattern: byte at stream position p = (p*131+7) % 251 (period 251) ----

_PERIOD = bytes((p * 131 + 7) % 251 for p in range(251))


def pattern(start: int, n: int) -> bytes:
    """`n` pattern bytes from stream position `start`."""
    if n <= 0:
        return b""
    off = start % 251
    reps = (off + n) // 251 + 1
    return (_PERIOD * reps)[off : off + n]


# ---- socket pairs ----


@dataclass
class Pair:
    """A connected pair: `sock` is what lowcopy works on, `peer` the other end."""

    sock: socket.socket
    peer: socket.socket | None
    extra: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        for s in (self.sock, self.peer, *self.extra):
            if s is not None:
                s.close()


def tcp_listener(v6: bool = False, mss: int | None = None, lowat: int | None = None,
                 rcvbuf: int | None = None) -> socket.socket:
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    ls = socket.socket(fam, socket.SOCK_STREAM)
    if mss is not None:
        ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    if lowat is not None:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
    if rcvbuf is not None:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    ls.bind(("::1" if v6 else "127.0.0.1", 0))
    ls.listen(8)
    return ls


def tcp_connect(ls: socket.socket, mss: int | None = None) -> socket.socket:
    c = socket.socket(ls.family, socket.SOCK_STREAM)
    if mss is not None:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.connect(ls.getsockname()[:2])
    return c


def tcp_pair(v6: bool = False, mss: int | None = None, rcvbuf: int | None = None) -> Pair:
    """Loopback TCP: `sock` is the accepted side, `peer` the client."""
    with tcp_listener(v6, mss=mss, rcvbuf=rcvbuf) as ls:
        c = tcp_connect(ls, mss)
        s, _ = ls.accept()
    return Pair(s, c)


def mptcp_pair() -> Pair:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP) as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
        c.connect(ls.getsockname())
        s, _ = ls.accept()
    return Pair(s, c)


def stream_pair(transport: str) -> Pair:
    if transport == "tcp4":
        return tcp_pair(False)
    if transport == "tcp6":
        return tcp_pair(True)
    if transport == "mptcp4":
        return mptcp_pair()
    if transport == "unix":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return Pair(a, b)
    # Datagram pairs, for the tables' cases about sockets that are no stream.
    if transport == "unix_dgram":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        return Pair(a, b)
    if transport == "udp4":
        return udp_pair(False)[0]
    raise ValueError(f"unknown transport {transport}")


def udp_pair(v6: bool = False, connect: bool = True) -> tuple[Pair, tuple[str, int] | None]:
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    host = "::1" if v6 else "127.0.0.1"
    a = socket.socket(fam, socket.SOCK_DGRAM)
    b = socket.socket(fam, socket.SOCK_DGRAM)
    a.bind((host, 0))
    b.bind((host, 0))
    dest = b.getsockname()[:2]
    if connect:
        a.connect(dest)
        b.connect(a.getsockname()[:2])
        return Pair(a, b), None
    return Pair(a, b), dest


class OddFd:
    """An fd that is not a peekable stream: `closed` (a number no fd has), `file`, `udp4`, and
    the listening sockets `listen_tcp4`, `listen_tcp6`, `listen_mptcp4`, `listen_unix`."""

    def __init__(self, kind: str) -> None:
        self.keep: object | None = None
        if kind == "closed":
            self.fd = 1_000_000
        elif kind == "file":
            f = open("/proc/self/stat", "rb")
            self.keep = f
            self.fd = f.fileno()
        elif kind == "udp4":
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.bind(("127.0.0.1", 0))
            self.keep = u
            self.fd = u.fileno()
        elif kind in ("listen_tcp4", "listen_tcp6", "listen_mptcp4"):
            v6 = kind == "listen_tcp6"
            proto = 262 if kind == "listen_mptcp4" else 0  # IPPROTO_MPTCP
            ls = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM, proto)
            ls.bind(("::1" if v6 else "127.0.0.1", 0))
            ls.listen(4)
            self.keep = ls
            self.fd = ls.fileno()
        elif kind == "listen_unix":
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ls.bind(f"\0lowcopy-py-{os.getpid()}-{id(ls)}")
            ls.listen(4)
            self.keep = ls
            self.fd = ls.fileno()
        else:
            raise ValueError(kind)

    def close(self) -> None:
        if self.keep is not None:
            self.keep.close()  # type: ignore[attr-defined]


# ---- small socket helpers ----


def inq(sock: socket.socket | int) -> int:
    """Bytes queued for reading (SIOCINQ)."""
    fd = sock if isinstance(sock, int) else sock.fileno()
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def wait_queued(sock: socket.socket | int, n: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while inq(sock) < n:
        assert time.monotonic() < deadline, f"only {inq(sock)} of {n} bytes arrived"
        time.sleep(0.001)


def set_rcvtimeo(sock: socket.socket, seconds: float) -> None:
    sec = int(seconds)
    usec = int(round((seconds - sec) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", sec, usec))


def reset(sock: socket.socket) -> None:
    """Closes with SO_LINGER 0: the peer gets a RST."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Blocking write of all of `data` to `fd` (a dup the caller owns)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            import select

            select.select([], [fd], [], 1.0)
            continue
        view = view[n:]


class Writers:
    """Threads that write to a peer through their own dup of it; joined at the end of a run."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def spawn(self, peer: socket.socket, job: Callable[[int], None]) -> None:
        fd = os.dup(peer.fileno())

        def run() -> None:
            # The runner's per-run deadline (SIGALRM) must interrupt the main thread.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            try:
                job(fd)
            except BaseException as e:  # reported by join()
                self.errors.append(e)
            finally:
                os.close(fd)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def take(self) -> list[threading.Thread]:
        t, self.threads = self.threads, []
        return t

    def join(self, timeout: float = 60.0) -> None:
        for t in self.take():
            t.join(timeout)
            assert not t.is_alive(), "a writer thread never finished"
        if self.errors:
            raise self.errors[0]


def send_zerocopy(fd: int, data: bytes, sizes: list[int]) -> None:
    """MSG_ZEROCOPY sends of `data` from a page-aligned private copy, in sends whose sizes
    cycle through `sizes`; drains the error queue as it goes (blocking)."""
    s = socket.socket(fileno=os.dup(fd))
    with s:
        s.setblocking(True)
        s.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
        m = mmap.mmap(-1, max(len(data), 1))
        m[: len(data)] = data
        view = memoryview(m)
        off, i = 0, 0
        while off < len(data):
            n = min(sizes[i % len(sizes)], len(data) - off)
            try:
                r = s.send(view[off : off + n], MSG_ZEROCOPY)
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    drain_errqueue(s)
                    time.sleep(0.001)
                    continue
                raise
            off += r
            i += 1
            if i % 16 == 0:
                drain_errqueue(s)
        drain_errqueue(s)
        view.release()
        m.close()  # the kernel keeps its own references to pages in flight


def drain_errqueue(s: socket.socket) -> None:
    while True:
        try:
            s.recvmsg(0, 256, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return


def wait_pollerr(fd: int, ctx: str) -> None:
    """Waits until poll reports POLLERR on `fd` (an error-queue entry or a socket error),
    3 s at most."""
    p = select.poll()
    p.register(fd, 0)
    ev = p.poll(3000)
    assert ev and ev[0][1] & select.POLLERR, f"{ctx}: no POLLERR within 3 s ({ev})"


def errqueue_entry(sock: socket.socket, kind: str, ctx: str) -> None:
    """Puts an entry on `sock`'s error queue as an application would, by sending one byte to
    the peer: `zerocopy` (its MSG_ZEROCOPY completion notification) or `timestamp` (with
    SO_TIMESTAMPING software transmit reports on, left on). Returns once poll says POLLERR."""
    flags = 0
    if kind == "zerocopy":
        sock.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
        flags = MSG_ZEROCOPY
    elif kind == "timestamp":
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING,
                        SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE)
    else:
        raise AssertionError(f"{ctx}: unknown error-queue entry {kind}")
    assert sock.send(b"e", flags) == 1, f"{ctx}: send"
    wait_pollerr(sock.fileno(), ctx)


def read_pattern(fd: int, start: int, end: int) -> int:
    """Reads stream positions start..end from `fd` (a dup), checking the pattern."""
    with socket.socket(fileno=os.dup(fd)) as s:
        s.settimeout(5.0)
        while start < end:
            d = s.recv(min(1 << 20, end - start))
            assert d, f"peer read at {start} of {end}: end of stream"
            assert d == pattern(start, len(d)), f"wrong bytes at {start}"
            start += len(d)
    return end


def errno_name(e: BaseException | None) -> str | None:
    if isinstance(e, OSError) and e.errno is not None:
        return errno.errorcode.get(e.errno, f"E{e.errno}")
    return None


def errno_is(e: BaseException | None, names: str | list[str]) -> bool:
    if not isinstance(e, OSError) or e.errno is None:
        return False
    names = [names] if isinstance(names, str) else names
    return any(getattr(errno, n) == e.errno for n in names)


def force_buf(sock: socket.socket, rcv: bool, size: int) -> str | None:
    """A socket buffer of `size` bytes as SO_RCVBUFFORCE / SO_SNDBUFFORCE would set it: the
    plain option within net.core.{r,w}mem_max (the kernel then does the same), the forced one
    above it. Returns None, or why it cannot be done here (no CAP_NET_ADMIN)."""
    name = "rmem_max" if rcv else "wmem_max"
    try:
        with open(f"/proc/sys/net/core/{name}") as f:
            limit = int(f.read())
    except OSError:
        limit = 0
    plain, force = (socket.SO_RCVBUF, SO_RCVBUFFORCE) if rcv else (socket.SO_SNDBUF, SO_SNDBUFFORCE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, plain if size <= limit else force, size)
    except PermissionError:
        kind = "RCV" if rcv else "SND"
        return (f"a {size}-byte socket buffer is above net.core.{name} ({limit}): "
                f"SO_{kind}BUFFORCE needs CAP_NET_ADMIN")
    return None


def skip_part(part: str, reason: str) -> None:
    """Logs a part that cannot run here for scripts/test.sh ($LOWCOPY_SKIP_LOG), then skips."""
    import os

    import pytest

    log = os.environ.get("LOWCOPY_SKIP_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"python {part}: {reason}\n")
    pytest.skip(reason)
