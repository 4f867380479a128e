"""Awaitable peeks, sends and completions on a running asyncio loop.

- :class:`AsyncPeeker`: ``await peek(n)`` / ``peek_into(buf)``; on TCP the peeker's low-water
  mark is armed, so the loop is woken only when a byte beyond the cursor arrives (bytes
  already peeked do not wake it again).
- :class:`AsyncReceiver`: ``await recv_atleast(n, min)``: one wakeup for ``min`` bytes on
  TCP (the socket's low-water mark is left at the bytes still missing, so the loop is woken
  once they are there, not per segment).
- :class:`AsyncSender`: ``await send(data)`` (waits for socket space), ``await
  sendall(data)`` (returns once the kernel no longer reads ``data``: every part's completion
  came), ``await completions()`` (completions of ``send`` calls, with their ``user_data``).

How it waits: every socket (and the io_uring ring of the loop's thread) is watched through one
private epoll instance whose descriptor is the only one added to the loop (``loop.add_reader``),
and only while something waits. The io_uring senders of a thread share one ring, and so one
completion descriptor (the ring's eventfd); a reap of any of them takes in the others'
notifications too (kept for them, no longer shown by the descriptor), so every wake and every
reap made here reaps all of that loop's io_uring senders with sends in flight. So lowcopy never registers the socket's own descriptor (no clash with
an asyncio transport on it, no second ``add_reader`` replacing the first), and the events it
watches are exactly those it needs: ``EPOLLIN`` while a peek waits, and for the error-queue
backend only ``EPOLLERR`` (its completion notifications), drained by reaping. A wake that
finds nothing to do (a pending socket error, an error-queue entry nobody here reads) backs off
(1 ms, doubling to 100 ms) instead of spinning. ``callbacks`` on each object counts its wakes.

Use all of an object's coroutines from the loop's thread (the io_uring backend belongs to the
thread that sends first). Do not use the error-queue backend on a socket an asyncio
transport also polls: its pending notifications raise ``EPOLLERR`` for every poller of the
socket, the transport's included; prefer ``ZcBackend.IO_URING`` or ``COPY`` there.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import select
import socket
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    # Only for annotations (strings here: `from __future__ import annotations`): Python 3.11
    # has no collections.abc.Buffer (3.12), and the package declares no dependency on
    # typing_extensions. mypy reads it from the stubs it ships.
    from typing_extensions import Buffer

from ._lowcopy import Completion, Peeker, Receiver, ZeroCopySender
from ._types import PeekMode, ZcBackend

__all__ = ["AsyncPeeker", "AsyncReceiver", "AsyncSender"]

_IN = select.EPOLLIN | select.EPOLLRDHUP
_BACKOFF_MAX = 0.1


class _Watch:
    """One descriptor watched through a private epoll instance, registered with the loop only
    while interest is declared; shared by every lowcopy object on the same socket."""

    _by_key: dict[tuple[int, ...], _Watch] = {}

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        key: tuple[int, ...],
        base: int = 0,
        ring: bool = False,
    ) -> None:
        self.loop = loop
        self.key = key
        self.fd = os.dup(fd)
        self.ep = select.epoll()
        self.base = base
        self.mask = base
        self.ep.register(self.fd, base)  # EPOLLERR and EPOLLHUP are always reported
        self.users = 1
        self.added = False
        self.paused: asyncio.TimerHandle | None = None
        self.want_in = 0
        # The senders watched here with sends in flight, reaped on a wake: for a socket only
        # when its events include EPOLLERR or EPOLLHUP (the error queue), for a ring (the
        # eventfd of the thread's shared io_uring ring) on every wake, all of them.
        self.ring = ring
        self.senders: dict[AsyncSender, None] = {}
        self.waiters: list[asyncio.Future[int]] = []
        self.futile = 0
        self.callbacks = 0

    @classmethod
    def for_socket(cls, loop: asyncio.AbstractEventLoop, fd: int) -> _Watch:
        st = os.fstat(fd)
        key = (id(loop), st.st_dev, st.st_ino)
        w = cls._by_key.get(key)
        if w is not None:
            w.users += 1
            return w
        w = cls(loop, fd, key)
        cls._by_key[key] = w
        return w

    @classmethod
    def for_ring(cls, loop: asyncio.AbstractEventLoop, fd: int) -> _Watch:
        """The watch of the thread's io_uring completion descriptor ``fd`` (the same for every
        io_uring sender of the thread; it stays open while any of them exists, and so while
        this watch does). Keyed by number: eventfds share one anonymous inode."""
        key = (id(loop), -1, fd)
        w = cls._by_key.get(key)
        if w is not None:
            w.users += 1
            return w
        w = cls(loop, fd, key, select.EPOLLIN, ring=True)
        cls._by_key[key] = w
        return w

    def release(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        _Watch._by_key.pop(self.key, None)
        self._remove()
        for f in self.waiters:
            if not f.done():
                f.cancel()
        self.ep.close()
        os.close(self.fd)

    # -- registration ------------------------------------------------------------------------

    def update(self) -> None:
        mask = (_IN if self.want_in else 0) | self.base
        if mask != self.mask:
            self.ep.modify(self.fd, mask)
            self.mask = mask
        wanted = self.want_in > 0 or bool(self.senders)
        if wanted and not self.added and self.paused is None:
            self.loop.add_reader(self.ep.fileno(), self._ready)
            self.added = True
        elif not wanted:
            self._remove()

    def _remove(self) -> None:
        if self.paused is not None:
            self.paused.cancel()
            self.paused = None
        if self.added:
            self.loop.remove_reader(self.ep.fileno())
            self.added = False

    def _ready(self) -> None:
        self.callbacks += 1
        ready = self.ep.poll(0)
        ev = ready[0][1] if ready else 0
        if self.senders and (self.ring or ev & (select.EPOLLERR | select.EPOLLHUP)):
            made, err = self.reap_all(ev)
            self.progress(made)
            if err is not None:
                # For the loop's exception handler; a wake that keeps failing backs off.
                self.update()
                raise err
        if ev and self.waiters:
            waiters, self.waiters = self.waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(ev)
            # One shot: the woken peeks retry (draining to EAGAIN) and wait again, which
            # registers again; a level-triggered socket is not polled in between.
            self._remove()
            return
        self.update()

    def reap_all(
        self, ev: int = 0, skip: AsyncSender | None = None
    ) -> tuple[bool, Exception | None]:
        """Reaps every sender watched here with sends in flight (but ``skip``): whether any
        completion came, and the first error met (one sender's error does not keep the
        others from being reaped; each meets its own again in its own calls). Each drops out
        of ``senders`` once it has nothing in flight."""
        made = False
        err: Exception | None = None
        for s in list(self.senders):
            if s is skip:
                continue
            try:
                made = s._reap(ev) or made
            except Exception as e:  # noqa: BLE001 (reported once all were reaped)
                err = err or e
        return made, err

    def progress(self, made: bool) -> None:
        """A waiter or handler reports whether its wake did anything: futile wakes back off."""
        if made:
            self.futile = 0
            return
        self.futile += 1
        if self.futile >= 2 and self.paused is None:
            self._remove()
            delay = min(_BACKOFF_MAX, 0.001 * 2 ** min(self.futile - 2, 10))
            self.paused = self.loop.call_later(delay, self._resume)

    def _resume(self) -> None:
        self.paused = None
        self.update()

    async def wait_in(self) -> int:
        """Waits until the socket is readable (or has an error / hang-up)."""
        f: asyncio.Future[int] = self.loop.create_future()
        self.waiters.append(f)
        self.want_in += 1
        self.update()
        try:
            return await f
        finally:
            self.want_in -= 1
            if f in self.waiters:
                self.waiters.remove(f)
            if not self.ep.closed:
                self.update()


class AsyncPeeker:
    """A :class:`~lowcopy.Peeker` with awaitable peeks; other calls (``seek``, ``consume``,
    ``offset``, ``stats`` ...) are the peeker's own, reached through :attr:`peeker`."""

    def __init__(self, sock: Any, mode: PeekMode | int = PeekMode.AUTO) -> None:
        self.peeker = Peeker(sock, mode)
        try:
            # Wake only for bytes beyond the cursor (TCP, MPTCP). AF_UNIX's poll ignores the
            # mark: there, bytes before the cursor keep the socket readable, and futile wakes
            # back off.
            self.peeker.lowat_armed = True
        except OSError:
            pass
        self._watch = _Watch.for_socket(asyncio.get_running_loop(), self.peeker.fileno())

    @property
    def callbacks(self) -> int:
        """Wakes of this socket's watch so far (shared with an AsyncSender on the socket)."""
        return self._watch.callbacks

    async def peek(self, nbytes: int) -> bytes:
        """Peeks up to ``nbytes`` at the cursor, waiting until at least one byte is there;
        ``b""`` at end of stream. Errors as :meth:`lowcopy.Peeker.peek`."""
        woken = False
        while True:
            try:
                data = self.peeker.peek(nbytes, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if woken:
                    self._watch.progress(False)
                await self._watch.wait_in()
                woken = True
                continue
            if woken:
                self._watch.progress(True)
            return data

    async def peek_into(self, buffer: Buffer, nbytes: int = 0) -> int:
        """:meth:`peek` into a writable buffer; returns the bytes written."""
        woken = False
        while True:
            try:
                n = self.peeker.peek_into(buffer, nbytes, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if woken:
                    self._watch.progress(False)
                await self._watch.wait_in()
                woken = True
                continue
            if woken:
                self._watch.progress(True)
            return n

    def close(self) -> None:
        """Stops watching and closes the peeker (restoring the socket's options)."""
        if not self.peeker.closed:
            self._watch.release()
            self.peeker.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        t: type[BaseException] | None,
        v: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncReceiver:
    """A :class:`~lowcopy.Receiver` with awaitable receives: at least ``min`` bytes with one
    wakeup where the kernel allows it (TCP, MPTCP), whatever else is queued up to the
    buffer's length; every call is non-blocking underneath (``timeout=0``), the loop does the
    waiting."""

    def __init__(self, sock: Any) -> None:
        self.receiver = Receiver(sock)
        self._watch = _Watch.for_socket(asyncio.get_running_loop(), self.receiver.fileno())
        # Bytes a cancelled receive had taken off the socket: the next receive's first.
        self._held = b""

    @property
    def callbacks(self) -> int:
        """Wakes of this socket's watch so far."""
        return self._watch.callbacks

    async def recv_atleast(self, nbytes: int, min: int) -> bytes:
        """At least ``min`` (clamped to 1..nbytes) of up to ``nbytes`` bytes; fewer only at
        end of stream (``b""`` when nothing came) or before an error (left for the next
        call). Errors as :func:`lowcopy.recv_atleast`, less ``TimeoutError`` (the loop
        waits; use ``asyncio.timeout``). A receive cancelled (``asyncio.timeout``,
        ``wait_for``, a task's ``cancel()``) after it took bytes keeps them: the next receive
        on this object returns them first, so nothing the socket delivered is lost."""
        # Sized as Receiver.recv_atleast's buffer: by what the socket can hold (so 10**9 does
        # not zero-fill 1 GB), OverflowError above INT_MAX.
        buf = bytearray(self.receiver._buffer_len(nbytes, min))
        n = await self.recv_atleast_into(buf, min)
        del buf[n:]
        return bytes(buf)

    async def recv_atleast_into(self, buffer: Buffer, min: int, nbytes: int = 0) -> int:
        """:meth:`recv_atleast` into a writable buffer (``nbytes`` of it, 0: all); returns
        the bytes written."""
        view = memoryview(buffer).cast("B")
        if nbytes:
            view = view[:nbytes]
        want = max(1, builtins.min(min, len(view)))
        got = 0
        if self._held:  # a cancelled receive's bytes first
            got = builtins.min(len(self._held), len(view))
            view[:got], self._held = self._held[:got], self._held[got:]
        woken = False
        while got < want:
            try:
                n = self.receiver.recv_atleast_into(view[got:], want - got, 0)
            except TimeoutError:
                n = -1  # nothing queued (the mark now asks for what is missing)
            except OSError:
                if got:
                    return got  # the error is the next call's, as recv_atleast does
                raise
            if woken:
                self._watch.progress(n != -1)
            if n == 0:
                return got  # end of stream
            if n > 0:
                got += n
                if got >= want:
                    break
            try:
                await self._watch.wait_in()
            except asyncio.CancelledError:
                self._held = bytes(view[:got])  # all of them: self._held was empty here
                raise
            woken = True
        return got

    def close(self) -> None:
        """Stops watching and closes the receiver (putting back the socket's mark)."""
        if not self.receiver.closed:
            self._watch.release()
            self.receiver.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        t: type[BaseException] | None,
        v: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()



class _Part:
    """user_data of one part of a sendall: resolves its future when the last part is done."""

    __slots__ = ("state",)

    def __init__(self, state: list[Any]) -> None:
        self.state = state  # [future, parts left, bytes]


class AsyncSender:
    """A :class:`~lowcopy.ZeroCopySender` driven by the loop: sends wait for socket space,
    completions are reaped when the kernel reports them (the ring for io_uring, the error
    queue's ``EPOLLERR`` for the error-queue backend), never by polling."""

    def __init__(
        self, sock: Any, backend: ZcBackend | int = ZcBackend.AUTO, *, adaptive: bool = False
    ) -> None:
        loop = asyncio.get_running_loop()
        self.sender = ZeroCopySender(sock, backend, adaptive=adaptive)
        self._loop = loop
        self._ready: deque[Completion] = deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._space: asyncio.Future[None] | None = None
        b = self.sender.backend
        self._done: _Watch | None = None
        if b == ZcBackend.IO_URING:
            self._done = _Watch.for_ring(loop, self.sender.completion_fd())
        elif b == ZcBackend.ERRQUEUE:
            self._done = _Watch.for_socket(loop, self.sender.fileno())
        # (copies complete when the send returns: nothing to watch)
        self._closed = False

    @property
    def callbacks(self) -> int:
        """Wakes of the completion watch so far."""
        return self._done.callbacks if self._done is not None else 0

    # -- completions -------------------------------------------------------------------------

    def _pump(self) -> None:
        """Reaps what is ready. On io_uring this drains the thread's ring for every sender on
        it, so every sender of the loop's ring with sends in flight is reaped too: what it
        took in for them would otherwise wait, unannounced, until their next call."""
        w = self._done
        self._reap(0)  # this sender's errors are its caller's
        if w is not None and w.ring:
            w.reap_all(skip=self)
            w.update()

    def _reap(self, ev: int) -> bool:
        """Reaps this sender; routes sendall parts to their futures and wakes waiters. With
        ``ev`` (a wake's events) holding EPOLLERR/EPOLLHUP and nothing reaped, consumes a
        pending socket error. True if any completion came."""
        got = self.sender.reap()
        for c in got:
            ud = c.user_data
            if isinstance(ud, _Part):
                st = ud.state
                st[1] -= 1
                if st[1] == 0 and not st[0].done():
                    st[0].set_result(st[2])
            else:
                self._ready.append(c)
        if self._ready and self._waiters:
            waiters, self._waiters = self._waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(None)
        if not got and ev & (select.EPOLLERR | select.EPOLLHUP) and self.sender.inflight > 0:
            try:
                self.sender.wait(0)  # reports a pending socket error (and consumes it)
            except OSError:
                pass
        self._watch_completions()
        return bool(got)

    def _watch_completions(self) -> None:
        w = self._done
        if w is None:
            return
        if not self._closed and self.sender.inflight > 0:
            w.senders[self] = None
        else:
            w.senders.pop(self, None)
        w.update()

    async def completions(self) -> list[Completion]:
        """Waits until at least one completion of a :meth:`send` is there; returns all that
        are (their buffers may be reused). Never returns while nothing is in flight and none
        is ready: check ``sender.inflight`` first."""
        while True:
            self._pump()
            if self._ready:
                out = list(self._ready)
                self._ready.clear()
                return out
            f: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(f)
            await f

    # -- sends -------------------------------------------------------------------------------

    async def _writable(self) -> None:
        """Waits (one registration of a private epoll) until the socket takes data."""
        loop = self._loop
        ep = select.epoll()
        fd = os.dup(self.sender.fileno())
        f: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not f.done():
                f.set_result(None)

        try:
            ep.register(fd, select.EPOLLOUT)
            loop.add_reader(ep.fileno(), ready)
            try:
                await f
            finally:
                loop.remove_reader(ep.fileno())
        finally:
            ep.close()
            os.close(fd)

    async def send(self, data: Buffer, user_data: Any = None, flags: int = 0) -> int:
        """Sends once, waiting for socket space if there is none; returns the bytes accepted
        (a stream may take part). Its completion, with ``user_data``, comes from
        :meth:`completions`. Errors as :meth:`lowcopy.ZeroCopySender.send`."""
        while True:
            try:
                n = self.sender.send(data, user_data, flags | socket.MSG_DONTWAIT)
            except BlockingIOError:
                await self._writable()
                continue
            self._watch_completions()
            if self._done is None:
                self._pump()
            return n

    async def sendall(self, data: Buffer) -> int:
        """Sends all of ``data`` and returns (its length) once the kernel no longer reads it:
        every part's completion came, so ``data`` may be reused or changed."""
        view = memoryview(data).cast("B")
        total = len(view)
        if total == 0:
            return 0
        fut: asyncio.Future[int] = self._loop.create_future()
        state: list[Any] = [fut, 1, total]  # one extra part until the last send went out
        at = 0
        while at < total:
            try:
                n = self.sender.send(view[at:], _Part(state), socket.MSG_DONTWAIT)
            except BlockingIOError:
                await self._writable()
                continue
            if n > 0:
                state[1] += 1
            at += n
            self._watch_completions()
        state[1] -= 1
        if state[1] == 0:
            fut.set_result(total)
        self._pump()
        return await fut

    def close(self, timeout: float | None = None) -> None:
        """Stops watching and closes the sender by the close policy (see
        :meth:`lowcopy.ZeroCopySender.close`: it waits up to ``timeout`` seconds, 1 by default,
        for sends in flight, blocking the loop, then resets a stuck stream)."""
        if self._closed:
            return
        self._closed = True
        if self._done is not None:
            self._done.senders.pop(self, None)
            self._done.update()
            self._done.release()
        self.sender.close(timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        t: type[BaseException] | None,
        v: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
