"""Python-only cases of ZeroCopyReceiver: views of mapped pages never outlive the mapping
(recv and close refuse while a view is exported; a chunk refuses views once the receiver
moved on), so reading a released page (SIGBUS) cannot happen; collection; signals."""

from __future__ import annotations

import errno
import gc
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

import lowcopy
from fixtures import Pair, Writers, pattern, send_zerocopy, tcp_pair, wait_queued


@pytest.fixture
def tcp() -> Iterator[Pair]:
    p = tcp_pair()
    yield p
    p.close()


def test_an_exported_view_blocks_the_next_recv_and_close(tcp: Pair) -> None:
    assert tcp.peer is not None
    tcp.peer.sendall(b"hello")
    wait_queued(tcp.sock, 5)
    z = lowcopy.ZeroCopyReceiver(tcp.sock, 65536)
    c = z.recv()
    assert bytes(c) == b"hello" and len(c) == 5 and not c.mapped and c.valid
    m = memoryview(c)
    assert m.readonly
    with pytest.raises(BufferError):
        z.recv(socket.MSG_DONTWAIT)
    with pytest.raises(BufferError):
        z.close()
    assert c.valid and m.tobytes() == b"hello"  # untouched by the refused calls
    m.release()
    with pytest.raises(BlockingIOError):
        z.recv(socket.MSG_DONTWAIT)
    assert not c.valid
    z.close()
    assert z.closed
    with pytest.raises(ValueError):
        z.recv()


def test_a_chunk_refuses_views_once_the_receiver_moved_on(tcp: Pair) -> None:
    assert tcp.peer is not None
    with lowcopy.ZeroCopyReceiver(tcp.sock, 65536) as z:
        tcp.peer.sendall(b"one")
        wait_queued(tcp.sock, 3)
        c1 = z.recv()
        tcp.peer.sendall(b"two")
        wait_queued(tcp.sock, 3)
        c2 = z.recv()
        assert bytes(c2) == b"two"
        assert not c1.valid and len(c1) == 3
        with pytest.raises(BufferError):
            memoryview(c1)
        with pytest.raises(BufferError):
            bytes(c1)
        assert "gone" in repr(c1)
    with pytest.raises(BufferError):
        bytes(c2)  # close took its memory too


def test_mapped_pages_are_read_only_and_never_read_after_release() -> None:
    """Pages mapped from a page-aligned MSG_ZEROCOPY sender (TCP_MAXSEG 4108 on both ends):
    a view is read-only, blocks the next recv, and is refused once the pages are gone."""
    ls = socket.socket()
    ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 4108)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 4108)
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    ls.close()
    w = Writers()
    try:
        assert lowcopy.set_rcvlowat(s, 262144) == 262144
        z = lowcopy.ZeroCopyReceiver(s, 262144)
        total = 4 << 20
        w.spawn(c, lambda fd: send_zerocopy(fd, pattern(0, total), [65536]))
        got, mapped_chunk = 0, None
        while got < total:
            ch = z.recv()
            n = len(ch)
            assert n > 0
            with memoryview(ch) as m:
                assert m == pattern(got, n)
                if ch.mapped and mapped_chunk is None:
                    assert m.readonly
                    with pytest.raises(TypeError):
                        m[0] = 0  # type: ignore[index]
                    view = memoryview(ch)  # kept past the next recv attempt
                    with pytest.raises(BufferError):
                        z.recv()
                    assert view[:4] == pattern(got, 4)  # still mapped: still readable
                    view.release()
                    mapped_chunk = ch
            got += n
        assert mapped_chunk is not None, f"nothing mapped: {z.stats()!r}"
        with pytest.raises(BufferError):
            memoryview(mapped_chunk)  # its pages were released by a later recv
        assert z.stats().bytes_mapped > 0
        z.close()
    finally:
        w.join()
        s.close()
        c.close()


def test_a_chunk_keeps_its_receiver_alive(tcp: Pair) -> None:
    assert tcp.peer is not None
    tcp.peer.sendall(b"data")
    wait_queued(tcp.sock, 4)
    z = lowcopy.ZeroCopyReceiver(tcp.sock, 4096)
    dup = z.fileno()
    ch = z.recv()
    del z
    gc.collect()
    assert bytes(ch) == b"data"  # the receiver (and its memory) lives as long as the chunk
    del ch
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(dup)  # then it is collected and its duplicate closed


def test_end_of_stream_and_errors(tcp: Pair) -> None:
    assert tcp.peer is not None
    with pytest.raises(ValueError):
        lowcopy.ZeroCopyReceiver(tcp.sock, -1)
    with pytest.raises(TypeError):
        lowcopy.ZeroCopyReceiver(tcp.sock, "64k")  # type: ignore[arg-type]
    with pytest.raises(OSError) as ei:
        lowcopy.ZeroCopyReceiver(tcp.sock, 0)
    assert ei.value.errno == errno.EINVAL
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with u, pytest.raises(OSError) as ei:
        lowcopy.ZeroCopyReceiver(u, 4096)
    assert ei.value.errno == errno.EOPNOTSUPP
    with lowcopy.ZeroCopyReceiver(tcp.sock, 5000) as z:
        assert z.window == 8192 and z.struct_size in (16, 24, 36, 40, 48, 56, 64)
        with pytest.raises(OSError) as ei:
            z.recv(socket.MSG_PEEK)
        assert ei.value.errno == errno.EINVAL
        tcp.peer.sendall(b"last")
        tcp.peer.shutdown(socket.SHUT_WR)
        assert bytes(z.recv()) == b"last"
        eof = z.recv()
        assert len(eof) == 0 and bytes(eof) == b""
        assert len(z.recv()) == 0  # and again
        s = z.stats()
        assert s.bytes_copied == 4 and s.bytes_mapped == 0
        assert "ZeroCopyReceiver" in repr(z)


def test_ctrl_c_ends_a_blocking_recv_promptly(tcp: Pair) -> None:
    with lowcopy.ZeroCopyReceiver(tcp.sock, 65536) as z:
        main = threading.main_thread().ident
        assert main is not None
        threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT)).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            z.recv()
        assert time.monotonic() - t0 < 2
