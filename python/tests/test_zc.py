"""Python-only cases of ZeroCopySender: buffer pinning, user_data round trip, senders closed or
collected with sends in flight, waits and signals, threads, wrong arguments."""

from __future__ import annotations

import errno
import gc
import signal
import socket
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

import lowcopy
from fixtures import Pair, pattern, tcp_pair, udp_pair

ZC_BACKENDS = [lowcopy.ZcBackend.ERRQUEUE, lowcopy.ZcBackend.IO_URING]
ALL_BACKENDS = [*ZC_BACKENDS, lowcopy.ZcBackend.COPY]


class Buf(bytearray):
    """A bytearray that can be watched with a weak reference."""


def stalled_pair() -> Pair:
    """TCP whose peer does not read and has a small locked receive buffer (64 KiB, 1400-byte
    segments, set before connecting): bytes a send accepted beyond it stay in the sender's
    queue, so zerocopy completions do not come until the peer reads."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1400)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1400)
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    ls.close()
    # Room for a send far larger than the peer can take.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    return Pair(s, c)


@pytest.fixture
def stalled() -> Iterator[Pair]:
    p = stalled_pair()
    yield p
    p.close()


def drain(peer: socket.socket, n: int, start: int = 0) -> None:
    peer.settimeout(5)
    got = 0
    while got < n:
        d = peer.recv(1 << 20)
        assert d, f"peer got {got} of {n}"
        assert d == pattern(start + got, len(d)), f"wrong bytes at {start + got}"
        got += len(d)


def reap_until_idle(z: lowcopy.ZeroCopySender, timeout: float = 5.0) -> list[lowcopy.Completion]:
    got: list[lowcopy.Completion] = []
    end = time.monotonic() + timeout
    while True:
        got += z.reap()
        if z.inflight == 0:
            return got
        assert time.monotonic() < end, f"{z.inflight} sends never completed"
        try:
            z.wait(0.05)
        except TimeoutError:
            pass


def send_in_flight(z: lowcopy.ZeroCopySender, buf: bytearray | bytes, ud: object) -> int:
    """A non-blocking send that the stalled peer cannot take in full: its completion waits
    until the peer reads."""
    n = z.send(buf, ud, socket.MSG_DONTWAIT)
    assert 0 < n
    time.sleep(0.05)
    z.reap()
    assert z.inflight >= 1, "the send completed at once: the peer is not stalled"
    return n


@pytest.mark.parametrize("backend", ZC_BACKENDS, ids=lambda b: b.name)
def test_a_buffer_in_flight_is_pinned_until_reaped(stalled: Pair, backend: lowcopy.ZcBackend) -> None:
    assert stalled.peer is not None
    buf = Buf(pattern(0, 1 << 20))
    ref = weakref.ref(buf)
    with lowcopy.ZeroCopySender(stalled.sock, backend) as z:
        n = send_in_flight(z, buf, "first")
        with pytest.raises(BufferError):
            buf.extend(b"x")  # resizing would free memory the kernel still reads
        with pytest.raises(BufferError):
            buf.clear()
        del buf
        gc.collect()
        assert ref() is not None, "the sender must keep the buffer alive"
        drain(stalled.peer, n)
        done = reap_until_idle(z)
        assert [c.user_data for c in done] == ["first"] and done[0].result == n
        gc.collect()
        assert ref() is None, "released at the reap"


@pytest.mark.parametrize("backend", ALL_BACKENDS, ids=lambda b: b.name)
def test_user_data_comes_back_unchanged(backend: lowcopy.ZcBackend) -> None:
    p = tcp_pair()
    assert p.peer is not None
    objs: list[object] = [None, 7, "str", {"a": [1, 2]}, (1, "x"), object()]
    objs.append(objs[3])  # the same object twice
    try:
        with lowcopy.ZeroCopySender(p.sock, backend) as z:
            pos = 0
            for i, ud in enumerate(objs):
                pos += z.send(pattern(pos, 100 + i), ud)
            drain(p.peer, pos)
            done = reap_until_idle(z)
            assert len(done) == len(objs)
            got = sorted(done, key=lambda c: c.result)
            for c, ud in zip(got, objs):
                assert c.user_data is ud
                assert isinstance(c.flags, lowcopy.ZcFlag)
                assert c.copied == bool(c.flags & lowcopy.ZcFlag.COPIED)
                assert "Completion(user_data=" in repr(c)
            assert z.stats().completions == len(objs)
    finally:
        p.close()


class Tag:
    """A user_data object that can be watched with a weak reference."""


@pytest.mark.parametrize("backend", ALL_BACKENDS, ids=lambda b: b.name)
def test_completion_is_a_read_only_record_that_frees_its_user_data(
    backend: lowcopy.ZcBackend,
) -> None:
    p = tcp_pair()
    assert p.peer is not None
    try:
        with lowcopy.ZeroCopySender(p.sock, backend) as z:
            tag = Tag()
            ref = weakref.ref(tag)
            n, done = z.send_reap(pattern(0, 100), tag)
            del tag
            drain(p.peer, n)
            done += reap_until_idle(z)
            assert len(done) == 1
            c = done[0]
            assert type(c) is lowcopy.Completion and c.user_data is ref() and c.result == 100
            assert repr(c) == f"Completion(user_data={ref()!r}, result=100, flags={c.flags!r})"
            for name in ("user_data", "result", "flags", "copied", "other"):
                with pytest.raises(AttributeError):
                    setattr(c, name, 1)
            with pytest.raises(TypeError):
                lowcopy.Completion()  # type: ignore[call-arg]
            with pytest.raises(TypeError):
                type("Sub", (lowcopy.Completion,), {})
            assert ref() is not None
            del c, done
            assert ref() is None, "the last completion held the last reference"
    finally:
        p.close()


@pytest.mark.parametrize("backend", ZC_BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("how", ["close", "collect"])
def test_closed_or_collected_with_sends_in_flight(stalled: Pair, backend: lowcopy.ZcBackend,
                                                 how: str) -> None:
    """The close policy (core's, as in every language): the sender waits for the sends in
    flight (1 s), then resets the stuck connection; the peer sees what was sent and the reset,
    never other bytes, and each buffer is released once the kernel is done with it."""
    assert stalled.peer is not None
    buf = Buf(pattern(0, 1 << 20))
    ref = weakref.ref(buf)
    z = lowcopy.ZeroCopySender(stalled.sock, backend)
    send_in_flight(z, buf, "x")
    del buf
    gc.collect()
    assert ref() is not None, "pinned while in flight"
    t0 = time.monotonic()
    if how == "close":
        st = z.close()
        assert z.closed and st is not None
        assert (st.close_resets, st.close_abandoned) == (1, 0), st
        assert st.close_completed >= 1
        assert z.close() is None
        with pytest.raises(ValueError):
            z.reap()
    else:
        del z
        gc.collect()
    assert 0.9 < time.monotonic() - t0 < 6
    gc.collect()
    assert ref() is None, "released after its completion"
    got = 0
    stalled.peer.settimeout(5)
    with pytest.raises(ConnectionResetError):
        while True:
            d = stalled.peer.recv(1 << 20)
            assert d, "the peer sees the reset, not an orderly end"
            assert d == pattern(got, len(d)), f"wrong bytes at {got}"
            got += len(d)


def test_close_with_a_timeout_waits_for_sends_in_flight(stalled: Pair) -> None:
    assert stalled.peer is not None
    z = lowcopy.ZeroCopySender(stalled.sock, lowcopy.ZcBackend.ERRQUEUE)
    n = send_in_flight(z, bytearray(pattern(0, 1 << 20)), None)
    peer = stalled.peer
    t = threading.Thread(target=lambda: (time.sleep(0.2), drain(peer, n)))
    t.start()
    t0 = time.monotonic()
    st = z.close(timeout=5)
    t.join()
    assert 0.1 < time.monotonic() - t0 < 4
    assert st is not None and (st.close_resets, st.close_abandoned) == (0, 0), st


def test_close_with_timeout_zero_resets_at_once(stalled: Pair) -> None:
    assert stalled.peer is not None
    z = lowcopy.ZeroCopySender(stalled.sock, lowcopy.ZcBackend.ERRQUEUE)
    send_in_flight(z, bytearray(pattern(0, 1 << 20)), None)
    t0 = time.monotonic()
    st = z.close(timeout=0)
    assert time.monotonic() - t0 < 1.5
    assert st is not None and st.close_resets == 1 and st.close_abandoned == 0, st


def test_wait(stalled: Pair) -> None:
    assert stalled.peer is not None
    with lowcopy.ZeroCopySender(stalled.sock, lowcopy.ZcBackend.ERRQUEUE) as z:
        assert z.wait(5) == 0  # nothing in flight: at once
        n = send_in_flight(z, bytearray(pattern(0, 1 << 20)), None)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            z.wait(0.2)
        assert time.monotonic() - t0 >= 0.15
        with pytest.raises(TimeoutError):
            z.wait(0)
        drain(stalled.peer, n)
        assert z.wait(5) >= 1
        assert len(z.reap()) == 1


def test_ctrl_c_ends_a_wait_promptly(stalled: Pair) -> None:
    assert stalled.peer is not None
    with lowcopy.ZeroCopySender(stalled.sock, lowcopy.ZcBackend.IO_URING) as z:
        n = send_in_flight(z, bytearray(pattern(0, 1 << 20)), None)
        main = threading.main_thread().ident
        assert main is not None
        threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT)).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            z.wait(None)
        assert time.monotonic() - t0 < 2
        drain(stalled.peer, n)
        reap_until_idle(z)


def test_io_uring_belongs_to_the_first_thread_that_sends() -> None:
    p = tcp_pair()
    assert p.peer is not None
    try:
        with lowcopy.ZeroCopySender(p.sock, lowcopy.ZcBackend.IO_URING) as z:
            z.send(pattern(0, 3), 1)
            errs: list[BaseException] = []

            def other() -> None:
                try:
                    z.send(pattern(3, 3), 2)
                except BaseException as e:
                    errs.append(e)

            t = threading.Thread(target=other)
            t.start()
            t.join()
            assert len(errs) == 1 and isinstance(errs[0], FileExistsError)
            assert errs[0].errno == errno.EEXIST
            drain(p.peer, 3)
            assert [c.user_data for c in reap_until_idle(z)] == [1]
    finally:
        p.close()


def test_send_arguments() -> None:
    p = tcp_pair()
    assert p.peer is not None
    try:
        with lowcopy.ZeroCopySender(p.sock, lowcopy.ZcBackend.COPY) as z:
            assert z.backend is lowcopy.ZcBackend.COPY
            with pytest.raises(TypeError):
                z.send("str")  # type: ignore[arg-type]
            with pytest.raises(BufferError):
                z.send(memoryview(b"abcdef")[::2])
            with pytest.raises(OSError) as ei:
                z.send(b"x", None, socket.MSG_PEEK)
            assert ei.value.errno == errno.EINVAL
            with pytest.raises(OSError) as ei:
                z.sendmsg([b"x"] * 1025)
            assert ei.value.errno == errno.EMSGSIZE
            assert z.inflight == 0 and z.reap() == []
            # MSG_NOSIGNAL is accepted (and always applied).
            assert z.send(b"ab", "nosig", socket.MSG_NOSIGNAL) == 2
            # Any buffer: memoryview slices, array, mmap.
            import array
            import mmap

            m = mmap.mmap(-1, 4096)
            m[:3] = b"mmm"
            assert z.sendmsg([memoryview(b"xyz")[1:], array.array("B", b"ar"),
                              memoryview(m)[:3]], "v") == 7
            done = z.reap()
            assert [c.user_data for c in done] == ["nosig", "v"]
            m.close()  # released at the reap: the mmap can close
            assert p.peer.recv(100) == b"abyzarmmm"
        with pytest.raises(ValueError):
            lowcopy.ZeroCopySender(p.sock, 9)
    finally:
        p.close()


def test_a_reset_peer_is_connection_reset_or_broken_pipe() -> None:
    import struct

    p = tcp_pair()
    assert p.peer is not None
    p.peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    p.peer.close()
    p.peer = None
    time.sleep(0.05)
    try:
        with lowcopy.ZeroCopySender(p.sock, lowcopy.ZcBackend.ERRQUEUE) as z:
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                z.send(b"x" * 100)
                z.send(b"x" * 100)
            assert z.inflight == 0
    finally:
        p.close()


def test_sendmsg_to_an_address() -> None:
    pair, dest = udp_pair(connect=False)
    assert dest is not None and pair.peer is not None
    try:
        with lowcopy.ZeroCopySender(pair.sock, lowcopy.ZcBackend.ERRQUEUE) as z:
            assert z.sendmsg([b"hello ", b"world"], "u", address=dest) == 11
            assert z.sendmsg([b"by name"], "n", address=("localhost", dest[1])) == 7
            pair.peer.settimeout(3)
            assert pair.peer.recv(100) == b"hello world"
            assert pair.peer.recv(100) == b"by name"
            done = reap_until_idle(z)
            assert sorted(c.user_data for c in done) == ["n", "u"]
            with pytest.raises(TypeError):
                z.sendmsg([b"x"], address="127.0.0.1")  # type: ignore[arg-type]
            with pytest.raises(OSError) as ei:
                z.sendmsg([b"x"], address=("::1", dest[1]))  # IPv6 to an IPv4 socket
            assert ei.value.errno in (errno.EAFNOSUPPORT, errno.EINVAL)
            with pytest.raises(OSError) as ei:
                z.send(b"no destination")
            assert ei.value.errno == errno.EDESTADDRREQ
    finally:
        pair.close()


def test_send_reap_and_ebusy() -> None:
    p = tcp_pair()
    assert p.peer is not None
    p.peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    try:
        with lowcopy.ZeroCopySender(p.sock, lowcopy.ZcBackend.COPY) as z:
            n, done = z.send_reap(b"abc", "sr")
            assert n == 3 and [c.user_data for c in done] == ["sr"]
            for i in range(4096):
                z.send(b"y", i)
            with pytest.raises(OSError) as ei:
                z.send(b"z", "busy")
            assert ei.value.errno == errno.EBUSY  # 4096 completions unreaped
            assert len(z.reap()) == 4096
            assert z.send(b"z", "ok") == 1
            assert z.stats().sends == 4098
    finally:
        p.close()


def test_repr_fileno_completion_fd() -> None:
    p = tcp_pair()
    try:
        z = lowcopy.ZeroCopySender(p.sock, lowcopy.ZcBackend.IO_URING)
        assert z.fileno() != p.sock.fileno()
        assert z.completion_fd() not in (z.fileno(), p.sock.fileno())  # the ring
        assert "IoUring" in repr(z)
        z.close()
        z.close()
        assert "closed" in repr(z)
        e = lowcopy.ZeroCopySender(p.sock, lowcopy.ZcBackend.ERRQUEUE)
        assert e.completion_fd() == e.fileno()  # the socket's error queue
        e.close()
    finally:
        p.close()


# ---- send_many: several sends in one call ----


@pytest.mark.parametrize("backend", ALL_BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("kind", ["udp", "tcp"])
def test_send_many_gives_each_user_data_exactly_once(backend: lowcopy.ZcBackend, kind: str) -> None:
    p = udp_pair()[0] if kind == "udp" else tcp_pair()
    assert p.peer is not None
    # Room for all 40 datagrams (a zerocopy skb's truesize is large: the default drops some).
    p.peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    sizes = [100 + 37 * i for i in range(40)]
    sizes[5] = 0  # an empty datagram (or TCP send): sent, but no completion
    bufs: list[bytes] = []
    pos = 0
    for n in sizes:
        bufs.append(pattern(pos, n))
        pos += n
    tags = [Tag() for _ in sizes]
    try:
        with lowcopy.ZeroCopySender(p.sock, backend) as z:
            got: list[lowcopy.Completion] = []
            sent, nbytes, done = z.send_many(bufs[:8], tags[:8])
            assert (sent, nbytes) == (8, sum(sizes[:8]))
            got += done
            # Any iterables: a generator of buffers, a tuple of user_datas.
            sent, nbytes, done = z.send_many((b for b in bufs[8:]), tuple(tags[8:]))
            assert (sent, nbytes) == (32, sum(sizes[8:]))
            got += done
            p.peer.settimeout(5)
            if kind == "udp":
                for n in sizes:
                    assert len(p.peer.recv(65536)) == n
            else:
                drain(p.peer, pos)
            got += reap_until_idle(z)
            want = [t for t, n in zip(tags, sizes) if n > 0]
            assert sorted(map(id, (c.user_data for c in got))) == sorted(map(id, want))
            by_tag = {id(c.user_data): c.result for c in got}
            assert all(by_tag[id(t)] == n for t, n in zip(tags, sizes) if n > 0)
            st = z.stats()
            assert st.completions == 39 and st.bytes == pos
            # Without user_datas every completion carries None.
            sent, nbytes, done = z.send_many([b"a", b"bc"])
            assert (sent, nbytes) == (2, 3)
            if kind == "udp":
                assert (p.peer.recv(10), p.peer.recv(10)) == (b"a", b"bc")
            else:
                got_b = b""
                while len(got_b) < 3:
                    got_b += p.peer.recv(10)
                assert got_b == b"abc"
            assert [c.user_data for c in done + reap_until_idle(z)] == [None, None]
    finally:
        p.close()


@pytest.mark.parametrize("backend", ZC_BACKENDS, ids=lambda b: b.name)
def test_send_many_pins_each_buffer_until_its_completion(stalled: Pair,
                                                       backend: lowcopy.ZcBackend) -> None:
    assert stalled.peer is not None
    a, b = Buf(pattern(0, 1 << 19)), Buf(pattern(1 << 19, 1 << 19))
    refs = [weakref.ref(a), weakref.ref(b)]
    with lowcopy.ZeroCopySender(stalled.sock, backend) as z:
        sent, nbytes, _ = z.send_many([a, b], ["a", "b"], socket.MSG_DONTWAIT)
        assert sent >= 1 and nbytes > 0
        time.sleep(0.05)
        z.reap()
        assert z.inflight >= 1, "completed at once: the peer is not stalled"
        for buf in [a, b][:sent]:
            with pytest.raises(BufferError):
                buf.extend(b"x")
        del a, b, buf
        gc.collect()
        assert all(r() is not None for r in refs[:sent]), "kept alive until reaped"
        drain(stalled.peer, nbytes)
        done = reap_until_idle(z)
        assert sorted(c.user_data for c in done) == ["a", "b"][:sent]
        assert sum(c.result for c in done) == nbytes
        gc.collect()
        assert all(r() is None for r in refs), "released at the reap"


@pytest.mark.parametrize("how", ["MSG_DONTWAIT", "settimeout(0)"])
@pytest.mark.parametrize("backend", ALL_BACKENDS, ids=lambda b: b.name)
def test_send_many_reports_partial_progress_on_a_full_socket(
        stalled: Pair, backend: lowcopy.ZcBackend, how: str) -> None:
    assert stalled.peer is not None
    flags = socket.MSG_DONTWAIT if how == "MSG_DONTWAIT" else 0
    if flags == 0:
        stalled.sock.settimeout(0)  # the sender's duplicate shares O_NONBLOCK
    size = 1 << 20
    bufs = [Buf(pattern(i * size, size)) for i in range(64)]  # far beyond the send buffer
    queue: list[tuple[bytes | Buf, object]] = [(b, i) for i, b in enumerate(bufs)]
    made: list[object] = []
    got: list[lowcopy.Completion] = []
    nbytes_total = 0
    first_call = True
    with lowcopy.ZeroCopySender(stalled.sock, backend) as z:
        # Send until the full socket makes the first send of a call fail: only that raises.
        for _ in range(100):
            before = z.stats().sends
            try:
                sent, nbytes, done = z.send_many([b for b, _ in queue], [u for _, u in queue],
                                                 flags)
            except BlockingIOError:
                assert z.stats().sends == before, "a call that raised sent nothing"
                break
            assert sent >= 1, "a call that returns made progress"
            if first_call:
                assert sent < 64, "the socket never filled"
                first_call = False
            lens = [len(b) for b, _ in queue[:sent]]
            assert sum(lens[:-1]) < nbytes <= sum(lens)
            got += done
            made += [u for _, u in queue[:sent]]
            nbytes_total += nbytes
            # A short stream send: its tail goes first in the next call (documented).
            short = sum(lens) - nbytes
            tail = [(bytes(queue[sent - 1][0])[-short:], ("tail", len(made)))] if short else []
            queue = tail + queue[sent:]
            # Buffers not sent are released at once: resizable again.
            for b, _ in queue:
                if isinstance(b, Buf):
                    b.extend(b"x")
                    del b[-1:]
        else:
            pytest.fail("the socket never stayed full")
        # Every send made completes exactly once, with its bytes; the stream is intact.
        drain(stalled.peer, nbytes_total)
        got += reap_until_idle(z, 20)
        assert sorted(map(repr, (c.user_data for c in got))) == sorted(map(repr, made))
        assert sum(c.result for c in got) == nbytes_total


def test_send_many_arguments() -> None:
    p = tcp_pair()
    assert p.peer is not None
    try:
        with lowcopy.ZeroCopySender(p.sock, lowcopy.ZcBackend.ERRQUEUE) as z:
            for one in (b"abc", bytearray(b"abc"), memoryview(b"abc"), "abc"):
                with pytest.raises(TypeError, match="iterable of bytes-like"):
                    z.send_many(one)  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                z.send_many(5)  # type: ignore[arg-type]
            first = Buf(b"first")
            with pytest.raises(TypeError, match="bytes-like object is required"):
                z.send_many([first, "str"])  # type: ignore[list-item]
            with pytest.raises(BufferError):
                z.send_many([first, memoryview(b"abcdef")[::2]])
            first.extend(b"!")  # released: nothing was sent
            assert z.inflight == 0 and z.stats().sends == 0
            with pytest.raises(TypeError):
                z.send_many([b"a"], 5)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="2 items for 1 buffers"):
                z.send_many([b"a"], ["x", "y"])
            with pytest.raises(ValueError):
                z.send_many([b"a", b"b"], ["x"])
            with pytest.raises(OSError) as ei:
                z.send_many([b"a"], None, socket.MSG_PEEK)
            assert ei.value.errno == errno.EINVAL
            assert z.send_many([]) == (0, 0, [])
            assert z.stats().sends == 0
        with pytest.raises(ValueError):
            z.send_many([b"a"])
    finally:
        p.close()


@pytest.mark.parametrize("how", ["exit", "os._exit"])
def test_process_exit_with_sends_in_flight(stalled: Pair, how: str) -> None:
    """A process that exits with zerocopy sends in flight: an orderly exit closes its senders
    by the close policy (a wait, then a reset of the stuck connection), os._exit leaves the
    pinned pages to the kernel, which sends them as they were. Either way the peer reads a
    prefix of what was sent, never other bytes."""
    import subprocess
    import sys

    assert stalled.peer is not None
    code = (
        "import os, socket, sys, lowcopy\n"
        "s = socket.socket(fileno=int(sys.argv[1]))\n"
        "z = lowcopy.ZeroCopySender(s, lowcopy.ZcBackend.ERRQUEUE)\n"
        "buf = bytearray(bytes((i * 131 + 7) % 251 for i in range(251)) * 4177)\n"
        "n = z.send(buf, None, socket.MSG_DONTWAIT)\n"
        "assert z.inflight >= 1\n"
        "print(n, flush=True)\n"
        + ("os._exit(0)\n" if how == "os._exit" else "sys.exit(0)\n")
    )
    fd = stalled.sock.fileno()
    r = subprocess.run([sys.executable, "-c", code, str(fd)], pass_fds=(fd,), capture_output=True,
                       timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    sent = int(r.stdout)
    stalled.sock.close()  # the child's duplicate is gone with it
    stalled.peer.settimeout(5)
    got = 0
    expected = bytes((i * 131 + 7) % 251 for i in range(251)) * 4177
    while True:
        try:
            d = stalled.peer.recv(1 << 20)
        except ConnectionResetError:
            assert how == "exit", "only the close policy resets"
            break
        if not d:
            break
        assert d == expected[got : got + len(d)], f"wrong bytes at {got}"
        got += len(d)
    assert 0 < got <= sent
    if how == "os._exit":
        assert got == sent, "the kernel sent every pinned byte"


@pytest.mark.parametrize("backend", ALL_BACKENDS, ids=lambda b: b.name)
def test_send_reap_into_and_reap_into_write_a_reused_int64_array(backend: lowcopy.ZcBackend) -> None:
    import array

    p = tcp_pair()
    assert p.peer is not None
    out = array.array("q", bytes(8 * (1 + 3 * 2)))  # room for two completions a call
    try:
        with lowcopy.ZeroCopySender(p.sock, backend) as z:
            pos = 0
            got: dict[int, tuple[int, int]] = {}

            def take() -> None:
                for j in range(out[0]):
                    ud, res, fl = out[1 + 3 * j : 4 + 3 * j]
                    assert ud not in got
                    got[ud] = (res, fl)

            for i in range(5):
                n = z.send_reap_into(pattern(pos, 100 + i), 1000 + i, out)
                assert n == 100 + i
                assert 0 <= out[0] <= 2
                take()
                pos += n
            z.send(pattern(pos, 7), "not an int")
            pos += 7
            drain(p.peer, pos)
            end = time.monotonic() + 5
            while len(got) < 6:
                assert time.monotonic() < end, f"completions: {got}"
                k = z.reap_into(out)
                assert k == out[0] and k <= 2
                take()
                if k == 0:
                    try:
                        z.wait(0.05)
                    except TimeoutError:
                        pass
            assert {ud: r for ud, (r, _) in got.items()} == {
                **{1000 + i: 100 + i for i in range(5)}, -1: 7}, "a user_data not an int: -1"
            if backend == lowcopy.ZcBackend.COPY:
                assert all(fl & lowcopy.ZcFlag.COPIED for _, fl in got.values())
            with pytest.raises(TypeError):
                z.send_reap_into(b"x", "ud", out)
            with pytest.raises(TypeError):
                z.reap_into(bytearray(64))  # not int64
            with pytest.raises(TypeError):
                z.reap_into(bytes(64))  # read-only
            with pytest.raises(ValueError):
                z.reap_into(array.array("q", [0, 0, 0]))  # no room for one completion
            assert z.inflight == 0
    finally:
        p.close()
