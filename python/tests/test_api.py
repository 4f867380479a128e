"""Python-only cases: exception classes and errno, argument types, descriptor duplication,
non-blocking sockets, signals and the GIL, records, probe and `python -m lowcopy`."""

from __future__ import annotations

import errno
import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import lowcopy
from fixtures import Pair, stream_pair, tcp_pair


@pytest.fixture
def tcp() -> Iterator[Pair]:
    p = tcp_pair()
    yield p
    p.close()


@pytest.fixture
def unix() -> Iterator[Pair]:
    p = stream_pair("unix")
    yield p
    p.close()


# ---- errors ------------------------------------------------------------------------------


def test_eagain_is_blocking_io_error_with_errno(tcp: Pair) -> None:
    with pytest.raises(BlockingIOError) as ei:
        lowcopy.peek_at(tcp.sock, 0, 10, socket.MSG_DONTWAIT)
    assert ei.value.errno == errno.EAGAIN
    assert ei.value.strerror == os.strerror(errno.EAGAIN)
    assert str(ei.value) == f"[Errno {errno.EAGAIN}] {os.strerror(errno.EAGAIN)}"


def test_etimedout_is_timeout_error(tcp: Pair) -> None:
    with pytest.raises(TimeoutError) as ei:
        lowcopy.recv_atleast(tcp.sock, 10, 1, timeout=0.05)
    assert ei.value.errno == errno.ETIMEDOUT


def test_reset_is_connection_reset_error(tcp: Pair) -> None:
    import struct

    tcp.peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # type: ignore[union-attr]
    tcp.peer.close()  # type: ignore[union-attr]
    tcp.peer = None
    time.sleep(0.05)
    with lowcopy.Peeker(tcp.sock) as p:
        with pytest.raises(ConnectionResetError) as ei:
            p.peek(10)
        assert ei.value.errno == errno.ECONNRESET


def test_bad_fds_and_non_sockets() -> None:
    with pytest.raises(OSError) as ei:
        lowcopy.Peeker(1_000_000)
    assert ei.value.errno == errno.EBADF and type(ei.value) is OSError
    with open("/proc/self/stat", "rb") as f:
        with pytest.raises(OSError) as ei:
            lowcopy.Peeker(f)
        assert ei.value.errno == errno.ENOTSOCK
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with u, pytest.raises(OSError) as ei:
        lowcopy.Peeker(u)
    assert ei.value.errno == errno.EOPNOTSUPP


def test_a_closed_socket_object_is_value_error() -> None:
    s = socket.socket()
    s.close()
    with pytest.raises(ValueError):  # its fileno() is -1, as os.fstat(s) says
        lowcopy.peek_supported(s)


def test_wrong_python_types_and_values(tcp: Pair) -> None:
    with pytest.raises(TypeError):
        lowcopy.peek_at("not a socket", 0, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lowcopy.peek_at(tcp.sock, "0", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lowcopy.peek_at(tcp.sock, 0, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        lowcopy.peek_at(tcp.sock, -1, 1)
    with pytest.raises(ValueError):
        lowcopy.consume(tcp.sock, -5)
    with pytest.raises(OverflowError):
        lowcopy.peek_at(tcp.sock, 2**64, 1)
    with pytest.raises(ValueError):
        lowcopy.recv_atleast(tcp.sock, 10, 1, timeout=-1)
    with pytest.raises(ValueError):
        lowcopy.recv_atleast(tcp.sock, 10, 1, timeout=float("nan"))
    with pytest.raises(TypeError):
        lowcopy.peek_into(tcp.sock, b"read-only bytes")
    with pytest.raises(TypeError):
        lowcopy.peek_into(tcp.sock, "str")  # type: ignore[arg-type]
    with pytest.raises(BufferError):
        lowcopy.peek_into(tcp.sock, memoryview(bytearray(10))[::2])
    with pytest.raises(ValueError):
        lowcopy.peek_into(tcp.sock, bytearray(4), nbytes=5)
    with pytest.raises(ValueError):
        lowcopy.Peeker(tcp.sock, 7)
    with lowcopy.Peeker(tcp.sock) as p, pytest.raises(TypeError):
        p.peek_into(bytes(10))
    # A result size above INT_MAX is a clear OverflowError, never a bare MemoryError or a crash
    # (test_env.py: sizes below it are sized by what the socket can hold).
    with pytest.raises(OverflowError, match="at most 2147483647"):
        lowcopy.peek_at(tcp.sock, 0, 2**62)
    # Flags the call does not take are the kernel's EINVAL, as in C.
    with pytest.raises(OSError) as ei:
        lowcopy.peek_at(tcp.sock, 0, 1, socket.MSG_PEEK)
    assert ei.value.errno == errno.EINVAL


def test_overflow_error_on_huge_peek(tcp: Pair) -> None:
    with lowcopy.Peeker(tcp.sock) as p, pytest.raises(OverflowError, match="at most 2147483647"):
        p.peek(2**62, socket.MSG_DONTWAIT)


def test_panic_is_an_exception_not_base_exception() -> None:
    try:
        lowcopy._lowcopy._panic_for_test()  # type: ignore[attr-defined]
    except Exception as e:  # a BaseException would fly past this
        assert isinstance(e, SystemError)
        assert "panic" in str(e)
    else:
        raise AssertionError("no exception")


# ---- descriptors -------------------------------------------------------------------------


def test_objects_work_on_their_own_dup(tcp: Pair) -> None:
    assert tcp.peer is not None
    fd = tcp.sock.fileno()
    p = lowcopy.Peeker(tcp.sock)
    assert p.fileno() != fd
    tcp.peer.sendall(b"hello")
    time.sleep(0.02)
    tcp.sock.close()  # the caller's socket goes; its number can be reused
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # likely takes `fd` again
    try:
        assert p.peek(5) == b"hello"  # still the connection, never the new socket
        p.close()
        assert p.closed
        with pytest.raises(ValueError, match="closed"):
            p.peek(1)
        p.close()  # idempotent
    finally:
        other.close()


def test_int_fd_and_fileno_objects(tcp: Pair) -> None:
    assert tcp.peer is not None
    tcp.peer.sendall(b"abc")
    time.sleep(0.02)

    class HasFileno:
        def fileno(self) -> int:
            return tcp.sock.fileno()

    assert lowcopy.peek_at(tcp.sock.fileno(), 1, 10) == b"bc"
    assert lowcopy.peek_at(HasFileno(), 0, 1) == b"a"


def test_peeker_close_restores_socket_options(tcp: Pair) -> None:
    with lowcopy.Peeker(tcp.sock, lowcopy.PeekMode.OFFSET) as p:
        p.lowat_armed = True
        p.seek(100)
        assert tcp.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 101
    assert tcp.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
    assert tcp.sock.getsockopt(socket.SOL_SOCKET, 42) == -1  # SO_PEEK_OFF disabled again


def test_peeker_collected_without_close_closes_its_dup(tcp: Pair) -> None:
    p = lowcopy.Peeker(tcp.sock)
    dup = p.fileno()
    del p
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(dup)


# ---- non-blocking sockets, signals, the GIL ----------------------------------------------


def test_socket_with_timeout_is_non_blocking(tcp: Pair) -> None:
    tcp.sock.settimeout(5.0)  # sets O_NONBLOCK on the open file, which the dup shares
    with lowcopy.Peeker(tcp.sock) as p:
        t0 = time.monotonic()
        with pytest.raises(BlockingIOError):
            p.peek(10)
        assert time.monotonic() - t0 < 1.0
    # recv_atleast has its own timeout: O_NONBLOCK plays no part.
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        lowcopy.recv_atleast(tcp.sock, 10, 1, timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 2.0


def _interrupt_main_after(delay: float, sig: int = signal.SIGINT) -> threading.Thread:
    main = threading.main_thread().ident
    assert main is not None

    def kick() -> None:
        time.sleep(delay)
        signal.pthread_kill(main, sig)

    t = threading.Thread(target=kick, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("call", ["peek", "recv_atleast", "consume"])
def test_ctrl_c_ends_a_blocking_call_promptly(tcp: Pair, call: str) -> None:
    assert threading.current_thread() is threading.main_thread()
    p = lowcopy.Peeker(tcp.sock)
    try:
        t = _interrupt_main_after(0.2)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            if call == "peek":
                p.peek(10)
            elif call == "recv_atleast":
                lowcopy.recv_atleast(tcp.sock, 10, 5)
            else:
                lowcopy.consume(tcp.sock, 10)
        took = time.monotonic() - t0
        t.join()
        assert 0.15 < took < 2.0, took
    finally:
        p.close()


def test_a_handler_that_does_not_raise_lets_the_call_go_on(tcp: Pair) -> None:
    """PEP 475: the signal interrupts the wait, the handler runs, the call goes on."""
    assert tcp.peer is not None
    seen: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))
    try:
        _interrupt_main_after(0.1, signal.SIGUSR1)
        peer = tcp.peer

        def later() -> None:
            time.sleep(0.4)
            peer.sendall(b"0123456789")

        threading.Thread(target=later, daemon=True).start()
        t0 = time.monotonic()
        got = lowcopy.recv_atleast(tcp.sock, 10, 10, timeout=3.0)
        assert got == b"0123456789"
        assert seen == [signal.SIGUSR1]
        assert time.monotonic() - t0 >= 0.35
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_the_gil_is_released_while_a_call_waits(tcp: Pair) -> None:
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.01)
        before = ticks
        with pytest.raises(TimeoutError):
            lowcopy.recv_atleast(tcp.sock, 10, 1, timeout=0.3)
        # With the GIL held for 0.3 s the other thread could not have counted at all.
        assert ticks - before > 1000
    finally:
        stop.set()
        t.join()


def test_a_second_thread_gets_runtime_error_not_a_wait(tcp: Pair) -> None:
    assert tcp.peer is not None
    p = lowcopy.Peeker(tcp.sock)
    errors: list[BaseException] = []
    started = threading.Event()

    def blocked() -> None:
        started.set()
        try:
            p.peek(10)  # blocks until the peer sends
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=blocked)
    t.start()
    started.wait()
    time.sleep(0.1)
    with pytest.raises(RuntimeError, match="in use"):
        p.seek(0)
    tcp.peer.sendall(b"x")
    t.join(5)
    assert not errors
    p.close()


def test_bytearray_cannot_be_resized_during_a_blocking_peek_into(tcp: Pair) -> None:
    assert tcp.peer is not None
    buf = bytearray(16)
    p = lowcopy.Peeker(tcp.sock)
    done = threading.Event()

    def blocked() -> None:
        p.peek_into(buf)
        done.set()

    t = threading.Thread(target=blocked)
    t.start()
    time.sleep(0.1)
    with pytest.raises(BufferError):
        buf.extend(b"more")  # exported to the kernel call: never freed under it
    tcp.peer.sendall(b"data")
    t.join(5)
    assert done.is_set() and buf[:4] == b"data"
    buf.extend(b"more")  # released once the call returned
    p.close()


# ---- Peeker details ----------------------------------------------------------------------


def test_peeker_api(unix: Pair) -> None:
    assert unix.peer is not None
    unix.peer.sendall(b"0123456789")
    with lowcopy.Peeker(unix.sock, lowcopy.PeekMode.AUTO) as p:
        assert p.mode is lowcopy.PeekMode.OFFSET  # AF_UNIX has SO_PEEK_OFF since 3.4
        assert isinstance(p.mode, lowcopy.PeekMode)
        assert p.peek(3) == b"012"
        a, b = bytearray(2), bytearray(3)
        assert p.peekv([a, b]) == 5 and (a, b) == (b"34", b"567")
        assert p.offset == 8
        p.seek(1)
        m = memoryview(bytearray(4))
        assert p.peek_into(m, nbytes=2) == 2 and m[:2] == b"12"
        assert p.consume(4) == 4 and p.offset == 0
        p.note_consumed(0)
        s = p.stats()
        assert isinstance(s, lowcopy.PeekStats)
        assert s.bytes_consumed == 4 and s.peeks == 3
        assert s.as_dict()["bytes_consumed"] == 4
        assert "bytes_consumed=4" in repr(s)
        assert s == p.stats()
        with pytest.raises(OSError) as ei:
            p.lowat_armed = True  # AF_UNIX's poll ignores SO_RCVLOWAT
        assert ei.value.errno == errno.EOPNOTSUPP
        assert "Peeker" in repr(p)
    assert "closed" in repr(p)


def test_peeker_for_a_daemon(tcp: Pair) -> None:
    """The socket's kind stated, the offset peek on the handle, close without restore."""
    assert tcp.peer is not None
    tcp.peer.sendall(b"0123456789")
    time.sleep(0.02)
    with pytest.raises(ValueError, match="family"):
        lowcopy.Peeker(tcp.sock, family=socket.AF_INET, proto=socket.IPPROTO_UDP)
    with pytest.raises(ValueError, match="family"):
        lowcopy.Peeker(tcp.sock, family=socket.AF_UNIX, proto=socket.IPPROTO_TCP)
    p = lowcopy.Peeker(tcp.sock, lowcopy.PeekMode.OFFSET, family=tcp.sock.family,
                       proto=tcp.sock.proto)
    # TCP_INFO (the stated kind checked), SO_PEEK_OFF = 0, SO_OOBINLINE: no classification
    assert p.stats().syscalls == 3
    buf = bytearray(4)
    r = p.peek_at_into(2, buf, flags=socket.MSG_DONTWAIT)
    assert isinstance(r, lowcopy.PeekResult) and buf == b"2345"
    assert (r.len, r.offset, r.stream_pos, r.syscalls, r.moved, r.prefixed) == (4, 2, 2, 2, True,
                                                                             False)
    assert repr(r) == ("PeekResult(len=4, offset=2, stream_pos=2, syscalls=2, moved=True, "
                       "prefixed=False)")
    a, b = bytearray(1), bytearray(2)
    r2 = p.peekv_at(6, [a, b])
    assert (a, b) == (b"6", b"78") and (r2.syscalls, r2.moved) == (1, False)
    assert r2 != r and p.offset == 9
    with pytest.raises(ValueError):
        p.peek_at_into(-1, buf)
    p.close(restore=False)
    assert tcp.sock.getsockopt(socket.SOL_SOCKET, 42) == 9  # SO_PEEK_OFF left where it was
    p.close()  # idempotent
    with pytest.raises(ValueError):
        p.peek_at_into(0, buf)


def test_stateless_calls(tcp: Pair) -> None:
    assert tcp.peer is not None
    assert lowcopy.peek_supported(tcp.sock) is True
    tcp.peer.sendall(b"abcdef")
    time.sleep(0.02)
    assert lowcopy.peek_at(tcp.sock, 2, 2) == b"cd"
    buf = bytearray(3)
    assert lowcopy.peek_into(tcp.sock, buf, 3) == 3 and buf == b"def"
    assert lowcopy.consume(tcp.sock, 2) == 2
    assert lowcopy.set_rcvlowat(tcp.sock, 0) == 1
    assert lowcopy.recv_atleast(tcp.sock, 100, 4, timeout=1) == b"cdef"
    tcp.peer.sendall(b"xyz")
    n, st = lowcopy.recv_atleast_stats(tcp.sock, bytearray(10), 3, timeout=1)
    assert n == 3 and st.calls == 1 and st.bytes == 3


# ---- probe and python -m lowcopy ---------------------------------------------------------


def test_probe() -> None:
    c = lowcopy.probe()
    assert isinstance(c, lowcopy.Caps)
    d = c.as_dict()
    assert list(d) == [
        "peek_off_tcp4", "peek_off_tcp6", "peek_off_unix", "peek_off_mptcp", "zerocopy_tcp",
        "zerocopy_udp", "uring_send_zc", "uring_sendmsg_zc", "tcp_zerocopy_receive_size",
    ]
    assert c.peek_off_unix is True  # Linux 3.4
    assert c.tcp_zerocopy_receive_size in (0, 16, 24, 36, 40, 48, 56, 64)
    assert c == lowcopy.probe()


def test_python_m_lowcopy_prints_the_table() -> None:
    out = subprocess.run([sys.executable, "-m", "lowcopy"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.startswith("lowcopy ")
    assert "SO_PEEK_OFF, TCP over IPv4" in out and "TCP_ZEROCOPY_RECEIVE" in out
    assert "since Linux" in out


def test_receiver_learns_the_socket_once_and_restores_its_mark(tcp: Pair) -> None:
    assert tcp.peer is not None
    tcp.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 7)
    with lowcopy.Receiver(tcp.sock) as rx:
        assert rx.fileno() != tcp.sock.fileno()
        for i in range(3):
            tcp.peer.sendall(b"x" * 1000)
            buf = bytearray(4096)
            assert rx.recv_atleast_into(buf, 1000, timeout=3) == 1000
        # Between calls the socket keeps the mark of the last call (min = 1000).
        assert tcp.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1000
        tcp.peer.sendall(b"tail")
        assert rx.recv_atleast(100, 4, timeout=3) == b"tail"
        s = rx.stats()
        assert s.calls == 4 and s.bytes == 3004
        with pytest.raises(TimeoutError):
            rx.recv_atleast(10, 1, timeout=0.05)
        with pytest.raises(TypeError):
            rx.recv_atleast_into(b"read-only", 1)
    assert tcp.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 7  # put back
    with pytest.raises(ValueError):
        rx.recv_atleast(1, 1)
    with open("/proc/self/stat", "rb") as f, pytest.raises(OSError) as ei:
        lowcopy.Receiver(f)
    assert ei.value.errno == errno.ENOTSOCK
