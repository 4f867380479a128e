"""lowcopy.asyncio: awaitable peeks, sends and completions; the loop idles (wakes counted)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

import lowcopy
from fixtures import Pair, errqueue_entry, pattern, stream_pair, tcp_pair
from lowcopy import Completion
from lowcopy.asyncio import AsyncPeeker, AsyncReceiver, AsyncSender


@pytest.fixture
def tcp() -> Iterator[Pair]:
    p = tcp_pair()
    yield p
    p.close()


def later(delay: float, f: object, *args: object) -> threading.Timer:
    t = threading.Timer(delay, f, args)  # type: ignore[arg-type]
    t.start()
    return t


@pytest.mark.asyncio
async def test_peek_waits_for_bytes_beyond_the_cursor_without_waking(tcp: Pair) -> None:
    assert tcp.peer is not None
    tcp.peer.sendall(b"head")
    async with AsyncPeeker(tcp.sock) as ap:
        assert await ap.peek(10) == b"head"
        # Bytes before the cursor stay queued: with the mark armed they do not wake the loop.
        task = asyncio.create_task(ap.peek(10))
        await asyncio.sleep(0.5)
        assert not task.done()
        assert ap.callbacks == 0
        tcp.peer.sendall(b"tail")
        assert await asyncio.wait_for(task, 3) == b"tail"
        assert ap.callbacks == 1
        buf = bytearray(8)
        ap.peeker.seek(0)
        assert await ap.peek_into(buf) == 8 and buf == b"headtail"
        tcp.peer.shutdown(socket.SHUT_WR)
        assert await asyncio.wait_for(ap.peek(10), 3) == b""


@pytest.mark.asyncio
async def test_unix_futile_wakes_back_off() -> None:
    """AF_UNIX's poll ignores the mark: bytes before the cursor keep the socket readable, so
    wakes find nothing new; they back off to 100 ms instead of spinning."""
    p = stream_pair("unix")
    assert p.peer is not None
    try:
        async with AsyncPeeker(p.sock) as ap:
            p.peer.sendall(b"x")
            assert await ap.peek(1) == b"x"
            task = asyncio.create_task(ap.peek(1))
            await asyncio.sleep(1.0)
            assert not task.done()
            assert ap.callbacks <= 25, ap.callbacks  # a spin would be tens of thousands
            p.peer.sendall(b"y")
            assert await asyncio.wait_for(task, 3) == b"y"
    finally:
        p.close()


@pytest.mark.asyncio
async def test_an_error_queue_entry_nobody_reads_does_not_spin_a_peek(tcp: Pair) -> None:
    assert tcp.peer is not None
    async with AsyncPeeker(tcp.sock) as ap:
        errqueue_entry(tcp.sock, "timestamp", "test")  # EPOLLERR stays up
        task = asyncio.create_task(ap.peek(4))
        await asyncio.sleep(1.0)
        assert ap.callbacks <= 25, ap.callbacks
        tcp.peer.sendall(b"data")
        assert await asyncio.wait_for(task, 3) == b"data"


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", [lowcopy.ZcBackend.ERRQUEUE, lowcopy.ZcBackend.IO_URING,
                                     lowcopy.ZcBackend.COPY], ids=lambda b: b.name)
async def test_request_response_with_a_peeker_and_a_sender_idles(tcp: Pair,
                                                                  backend: lowcopy.ZcBackend) -> None:
    """A peeker and a zerocopy sender on one socket: completions are reaped when the kernel
    reports them, peeks wake for replies, and between rounds the loop sleeps."""
    assert tcp.peer is not None
    peer = tcp.peer
    async with AsyncPeeker(tcp.sock) as ap, AsyncSender(tcp.sock, backend) as tx:

        def answer(n: int) -> None:
            got = b""
            while len(got) < n:
                got += peer.recv(n - len(got))
            peer.sendall(b"reply")

        pos = 0
        for i in range(5):
            req = pattern(pos, 3000)
            t = threading.Thread(target=answer, args=(3000,))
            t.start()
            assert await asyncio.wait_for(tx.sendall(req), 5) == 3000
            pos += 3000
            assert await asyncio.wait_for(ap.peek(5), 5) == b"reply"
            assert ap.peeker.consume(5) == 5
            t.join()
        assert tx.sender.inflight == 0
        before = (ap.callbacks, tx.callbacks)
        await asyncio.sleep(0.5)  # idle: nothing waits, nothing wakes
        assert (ap.callbacks, tx.callbacks) == before
        assert tx.callbacks <= 20


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", [lowcopy.ZcBackend.ERRQUEUE, lowcopy.ZcBackend.IO_URING],
                         ids=lambda b: b.name)
async def test_sendall_returns_when_the_buffer_is_free(backend: lowcopy.ZcBackend) -> None:
    # A peer with a small window that starts reading after 0.3 s.
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    c.connect(ls.getsockname())
    s, _ = ls.accept()
    ls.close()
    total = 4 << 20
    got = bytearray()

    reading: list[float] = []

    def reader() -> None:
        time.sleep(0.3)
        reading.append(time.monotonic())
        while len(got) < total:
            d = c.recv(1 << 20)
            assert d
            got.extend(d)

    t = threading.Thread(target=reader)
    t.start()
    try:
        buf = bytearray(pattern(0, total))
        async with AsyncSender(s, backend) as tx:
            assert await asyncio.wait_for(tx.sendall(buf), 10) == total
            # Not before the peer began to read: most of the 4 MiB was still unsent then.
            assert reading and time.monotonic() > reading[0]
            buf.extend(b"x")  # free again: no BufferError
            assert tx.callbacks < 200, tx.callbacks
        t.join(10)
        assert bytes(got) == pattern(0, total)
    finally:
        s.close()
        c.close()


@pytest.mark.asyncio
async def test_completions_carry_user_data(tcp: Pair) -> None:
    assert tcp.peer is not None
    async with AsyncSender(tcp.sock, lowcopy.ZcBackend.IO_URING) as tx:
        sent = 0
        for i in range(3):
            sent += await tx.send(pattern(sent, 1000), ("req", i))
        peer = tcp.peer
        reader = later(0.1, lambda: peer.recv(1 << 20))
        seen: list[object] = []
        while len(seen) < 3:
            seen += [c.user_data for c in await asyncio.wait_for(tx.completions(), 5)]
        reader.join()
        assert sorted(seen) == [("req", 0), ("req", 1), ("req", 2)]  # type: ignore[type-var]


def fill(sender: lowcopy.ZeroCopySender, tag: str) -> int:
    """Sends until the socket is full (the peer reads nothing yet), so the last sends'
    completions wait for the peer; returns the bytes sent."""
    big = bytes(65536)
    sent = 0
    while True:
        try:
            sent += sender.send(big, (tag, sent), socket.MSG_DONTWAIT)
        except BlockingIOError:
            return sent


def drain_later(peer: socket.socket, n: int, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        got = 0
        while got < n:
            d = peer.recv(1 << 20)
            assert d
            got += len(d)

    t = threading.Thread(target=run)
    t.start()
    return t


async def all_completions(tx: AsyncSender) -> list[Completion]:
    out: list[Completion] = []
    while tx.sender.inflight > 0:
        out += await tx.completions()
    return out


@pytest.mark.asyncio
async def test_two_io_uring_senders_share_the_thread_ring_descriptor() -> None:
    """The io_uring senders of a thread share one ring and one completion descriptor: one
    watch serves both, every wake (and every reap) reaps both, so neither waits for
    notifications the other's reap took in, and the idle loop sleeps."""
    p, q = tcp_pair(), tcp_pair()
    assert p.peer is not None and q.peer is not None
    try:
        async with AsyncSender(p.sock, lowcopy.ZcBackend.IO_URING) as a, AsyncSender(
            q.sock, lowcopy.ZcBackend.IO_URING
        ) as b:
            fd = a.sender.completion_fd()
            assert b.sender.completion_fd() == fd and fd != a.sender.fileno()
            # Round 1: both wait; the peers read later, the loop is woken.
            na, nb = fill(a.sender, "a"), fill(b.sender, "b")
            ra, rb = drain_later(p.peer, na, 0.2), drain_later(q.peer, nb, 0.2)
            ca, cb = await asyncio.wait_for(
                asyncio.gather(all_completions(a), all_completions(b)), 5
            )
            ra.join()
            rb.join()
            assert sum(c.result for c in ca) == na and {c.user_data[0] for c in ca} == {"a"}
            assert sum(c.result for c in cb) == nb and {c.user_data[0] for c in cb} == {"b"}
            assert a.callbacks == b.callbacks > 0  # one watch
            # Round 2: b waits; a's reap, outside any wake, drains the ring and takes b's
            # notifications in: b is reaped with it (not left to whether the kernel signals
            # the descriptor again).
            na, nb = fill(a.sender, "a"), fill(b.sender, "b")
            tb = asyncio.create_task(all_completions(b))
            await asyncio.sleep(0.05)
            assert not tb.done()
            ra, rb = drain_later(p.peer, na, 0), drain_later(q.peer, nb, 0)
            ra.join()
            rb.join()
            time.sleep(0.2)  # the loop is held: the notifications wait in the ring
            ca = await asyncio.wait_for(all_completions(a), 5)
            cb = await asyncio.wait_for(tb, 5)
            assert sum(c.result for c in ca) == na and {c.user_data[0] for c in ca} == {"a"}
            assert sum(c.result for c in cb) == nb and {c.user_data[0] for c in cb} == {"b"}
            assert a.sender.inflight == b.sender.inflight == 0
            before = a.callbacks
            await asyncio.sleep(0.5)  # idle: nothing in flight, nothing watched
            assert a.callbacks == before
            assert before <= 50, before
    finally:
        p.close()
        q.close()


@pytest.mark.asyncio
async def test_one_failing_io_uring_sender_does_not_starve_the_others() -> None:
    """A sender of the shared ring whose reap fails (here: its ZeroCopySender closed behind
    the AsyncSender's back) does not keep the ring's other senders from their completions,
    and its error is not theirs."""
    p, q = tcp_pair(), tcp_pair()
    assert p.peer is not None and q.peer is not None
    errors: list[BaseException] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, ctx: errors.append(ctx.get("exception")))
    try:
        async with AsyncSender(p.sock, lowcopy.ZcBackend.IO_URING) as a, AsyncSender(
            q.sock, lowcopy.ZcBackend.IO_URING
        ) as b:
            nb = fill(b.sender, "b")
            await asyncio.sleep(0.1)
            while b.sender.reap():  # what completed already; the last sends wait for q.peer
                pass
            tb = asyncio.create_task(b.completions())  # b waits: watched
            await asyncio.sleep(0.05)
            assert not tb.done() and b.sender.inflight > 0
            b.sender.close()  # b's watch entry stays: its reaps now raise ValueError
            na = fill(a.sender, "a")
            ra = drain_later(p.peer, na, 0.1)
            rb = drain_later(q.peer, nb, 0.1)
            ca = await asyncio.wait_for(all_completions(a), 5)
            ra.join()
            rb.join()
            assert sum(c.result for c in ca) == na
            assert all(isinstance(e, ValueError) for e in errors), errors
            tb.cancel()
            a_wakes = a.callbacks
            await asyncio.sleep(0.3)
            assert a.callbacks - a_wakes <= 10, "a failing sender's wakes back off"
    finally:
        loop.set_exception_handler(None)
        p.close()
        q.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", ["tcp4", "unix"])
async def test_a_cancelled_receive_keeps_the_bytes_it_took(transport: str) -> None:
    p = stream_pair(transport)
    assert p.peer is not None
    try:
        async with AsyncReceiver(p.sock) as rx:
            p.peer.sendall(b"abc")  # fewer than min: the receive takes them and waits on
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await rx.recv_atleast(100, 10)
            buf = bytearray(2)  # the next receive gets them first, as much as its buffer holds
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await rx.recv_atleast_into(buf, 2)  # both from the kept bytes: no wait
                    await rx.recv_atleast_into(bytearray(8), 8)  # cancelled again
            assert buf == b"ab"
            p.peer.sendall(b"defghijklm")
            got = await asyncio.wait_for(rx.recv_atleast(100, 11), 5)
            assert got == b"cdefghijklm"
    finally:
        p.close()


@pytest.mark.asyncio
async def test_recv_atleast_wakes_once_for_min_bytes(tcp: Pair) -> None:
    assert tcp.peer is not None
    peer = tcp.peer
    total = 65536
    data = pattern(0, total)

    def trickle() -> None:
        for i in range(0, total, total // 8):
            time.sleep(0.02)
            peer.sendall(data[i : i + total // 8])

    t = threading.Thread(target=trickle)
    async with AsyncReceiver(tcp.sock) as rx:
        t.start()
        got = await asyncio.wait_for(rx.recv_atleast(2 * total, total), 5)
        t.join()
        assert got == data
        assert rx.callbacks <= 3, rx.callbacks  # one wakeup for the lot, not eight
        peer.sendall(b"tail")
        peer.shutdown(socket.SHUT_WR)
        assert await asyncio.wait_for(rx.recv_atleast(100, 50), 5) == b"tail"  # end of stream
        assert await asyncio.wait_for(rx.recv_atleast(100, 50), 5) == b""
