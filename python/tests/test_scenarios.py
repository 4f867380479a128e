"""Runs the behaviour tables tests/scenarios/*.json through the Python package.

The Rust (core/tests/*scenarios.rs) and C (tests/c/*scenarios.c) runners execute the very
same tables against their layers; each scenario run here is one pytest case, and a run must
end as it ends there. Every run has a hard deadline (SIGALRM): a hang fails that run instead
of the suite.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lowcopy
from fixtures import (
    IP_RECVERR,
    SO_PEEK_OFF,
    SO_TIMESTAMPING,
    SOF_TIMESTAMPING_SOFTWARE,
    SOF_TIMESTAMPING_TX_SOFTWARE,
    OddFd,
    Pair,
    Writers,
    errno_is,
    errqueue_entry,
    force_buf,
    inq,
    pattern,
    read_pattern,
    reset,
    send_zerocopy,
    set_rcvtimeo,
    skip_part,
    stream_pair,
    tcp_connect,
    tcp_listener,
    tcp_pair,
    udp_pair,
    wait_pollerr,
    wait_queued,
    write_all,
)

TABLES = Path(__file__).resolve().parents[2] / "tests" / "scenarios"
RUN_DEADLINE = 90.0  # seconds; the tables' longest wait is a 30 s recv_atleast timeout
MIN_RUNS = 51  # as the Rust runners: a table that silently stopped expanding fails


def load(name: str) -> dict[str, Any]:
    with open(TABLES / name) as f:
        return json.load(f)  # type: ignore[no-any-return]


def expand(name: str, axis: str | None) -> list[tuple[dict[str, Any], dict[str, Any], str, str]]:
    table = load(name)
    runs = []
    for sc in table["scenarios"]:
        values = sc[axis] if axis else [""]
        for t in sc["transports"]:
            for v in values:
                runs.append((table, sc, t, v))
    return runs


def only(runs: list[tuple[dict[str, Any], dict[str, Any], str, str]]
         ) -> list[tuple[dict[str, Any], dict[str, Any], str, str]]:
    """LOWCOPY_SCENARIO=substring: only the runs of scenarios whose name contains it
    (CONTRIBUTING.md); test_tables_expand still counts the whole tables."""
    want = os.environ.get("LOWCOPY_SCENARIO")
    return [r for r in runs if want in r[1]["name"]] if want else runs


def ids(runs: list[tuple[dict[str, Any], dict[str, Any], str, str]]) -> list[str]:
    return [f"{sc['name']} | {t}" + (f" | {v}" if v else "") for _, sc, t, v in runs]


class Hang(Exception):
    """A scenario run passed its deadline."""


@pytest.fixture
def deadline() -> Iterator[None]:
    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"the run took longer than {RUN_DEADLINE} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, RUN_DEADLINE)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---- kernel rules: what this kernel offers comes from lowcopy.probe(), never from the tables ----

CAPS = lowcopy.probe()


def probe_has_peek_off(transport: str) -> bool:
    """SO_PEEK_OFF for the transport's family here; true where the question does not arise."""
    return {
        "tcp4": CAPS.peek_off_tcp4,
        "tcp6": CAPS.peek_off_tcp6,
        "unix": CAPS.peek_off_unix,
        "mptcp4": CAPS.peek_off_mptcp,
    }.get(transport, True)


def auto_without_peek_off(steps: list[dict[str, Any]]) -> None:
    """peek.json's rule for an auto run on a family without SO_PEEK_OFF: AUTO uses the
    discard mechanism, and peek_supported answers 0."""
    for s in steps:
        if s["op"] in ("new", "init") and s.get("expect_mode") == "offset":
            s["expect_mode"] = "discard"
        if s["op"] == "peek_supported" and s.get("expect_ret") == 1:
            s["expect_ret"] = 0


def zc_kernel_rules(sc: dict[str, Any], steps: list[dict[str, Any]], transport: str,
                    backend: str, ctx: str) -> list[dict[str, Any]]:
    """zc.json's kernel_rules, as core/tests/zc_scenarios.rs applies them."""
    if not transport.startswith(("tcp", "udp")):
        return steps
    so_zerocopy = CAPS.zerocopy_udp if transport.startswith("udp") else CAPS.zerocopy_tcp
    if backend == "auto" and sc.get("needs") == "zerocopy" and not CAPS.uring_send_zc \
            and not so_zerocopy:
        skip_part(f"zc.json: {ctx}",
                  "not applicable: AUTO has no zerocopy backend here (probe: no SEND_ZC, no SO_ZEROCOPY)")
    i = next((i for i, s in enumerate(steps) if s["op"] == "new"), None)
    if i is None:
        return steps
    refuse: list[str] | None = None
    if backend == "io_uring" and not CAPS.uring_send_zc:
        refuse = ["EPERM", "EOPNOTSUPP", "ENOMEM"]
    elif backend == "errqueue" and not so_zerocopy:
        refuse = ["ENOPROTOOPT", "EOPNOTSUPP"]
    if refuse is not None:
        return steps[:i] + [{"op": "new", "expect_err": refuse}]
    if backend == "auto":
        steps[i]["expect_backend"] = ("io_uring" if CAPS.uring_send_zc
                                      else "errqueue" if so_zerocopy else "copy")
    return steps


def check_err(step: dict[str, Any], e: BaseException | None, ctx: str) -> None:
    want = step["expect_err"]
    assert errno_is(e, want), f"{ctx}: want error {want}, got {e!r}"


def cpu_bound(step: dict[str, Any], cpu: float, ctx: str) -> None:
    """`cpu_max_ms`: the CPU time a call may use (one that spins while it waits uses all)."""
    if "cpu_max_ms" in step:
        assert cpu * 1000 <= step["cpu_max_ms"], \
            f"{ctx}: used {cpu*1000:.1f} ms of CPU, want <= {step['cpu_max_ms']} (spinning?)"


def elapsed_bounds(step: dict[str, Any], t: float, ctx: str) -> None:
    if "min_ms" in step:
        assert t * 1000 >= step["min_ms"], f"{ctx}: returned after {t*1000:.1f} ms"
    if "max_ms" in step:
        assert t * 1000 <= step["max_ms"], f"{ctx}: returned after {t*1000:.1f} ms"


def flags_of(step: dict[str, Any]) -> int:
    f = int(step.get("flags", 0))
    if step.get("dontwait"):
        f |= socket.MSG_DONTWAIT
    return f


# =========================================================================================
# peek.json
# =========================================================================================

PEEK = expand("peek.json", "modes")
MODES = {"auto": lowcopy.PeekMode.AUTO, "offset": lowcopy.PeekMode.OFFSET,
         "discard": lowcopy.PeekMode.DISCARD,
         "offset_or_discard": lowcopy.PeekMode.OFFSET_OR_DISCARD}
# `init`'s stated kinds as Peeker(family=, proto=): Python cannot hand the library memory, so
# `init` is the binding's own object with the socket's kind stated (the table's about says so).
KINDS = {"tcp4": (socket.AF_INET, socket.IPPROTO_TCP),
         "tcp6": (socket.AF_INET6, socket.IPPROTO_TCP),
         "mptcp4": (socket.AF_INET, 262),  # IPPROTO_MPTCP
         "unix": (socket.AF_UNIX, 0)}


class PeekRun:
    def __init__(self, fd: int, peer: socket.socket | None, mode: str, transport: str) -> None:
        self.fd = fd
        self.peer = peer
        self.mode = mode
        self.transport = transport
        self.peeker: lowcopy.Peeker | None = None
        self.sent = 0
        self.writers = Writers()
        self.fds_marked: int | None = None

    def p(self) -> lowcopy.Peeker:
        assert self.peeker is not None, "scenario uses a peeker before `new`"
        return self.peeker

    def result(self, step: dict[str, Any], call: Any, ctx: str) -> None:
        """Runs `call() -> (n, data)` and checks it as expect_result does in Rust."""
        try:
            n, data = call()
        except OSError as e:
            if "expect_err" in step:
                check_err(step, e, ctx)
                return
            raise AssertionError(f"{ctx}: unexpected error {e!r}") from e
        assert "expect_err" not in step, f"{ctx}: want {step['expect_err']}, got {n}"
        if "expect_ret" in step:
            assert n == step["expect_ret"], f"{ctx}: return value {n}"
        if "expect" in step:
            assert data[:n] == step["expect"].encode(), f"{ctx}: got {bytes(data[:n])!r}"
        if "expect_pattern" in step:
            assert n > 0, f"{ctx}: no data"
            assert bytes(data[:n]) == pattern(step["expect_pattern"], n), f"{ctx}: wrong bytes"

    def step(self, step: dict[str, Any], ctx: str) -> None:
        op = step["op"]
        flags = flags_of(step)
        if op in ("new", "init"):
            if self.peeker is not None:
                self.peeker.close()
                self.peeker = None
            mode = MODES[step.get("mode", self.mode)]
            urgent = {"inline": lowcopy.Urgent.INLINE, "caller": lowcopy.Urgent.CALLER}[
                step.get("urgent", "inline")]
            try:
                if op == "init":
                    family, proto = KINDS[step.get("kind", self.transport)]
                    p = lowcopy.Peeker(self.fd, mode, family=family, proto=proto, urgent=urgent)
                else:
                    p = lowcopy.Peeker(self.fd, mode, urgent=urgent)
            except OSError as e:
                if "expect_err" in step:
                    check_err(step, e, ctx)
                    return
                raise
            assert "expect_err" not in step, f"{ctx}: want {step['expect_err']}"
            assert p.mode in (lowcopy.PeekMode.OFFSET, lowcopy.PeekMode.DISCARD)
            if "expect_mode" in step:
                assert p.mode.name.lower() == step["expect_mode"], f"{ctx}: mode {p.mode!r}"
            self.peeker = p
        elif op == "free":
            self.p().close()
            self.peeker = None
        elif op == "release":
            self.p().close(restore=not step.get("closing", False))
            self.peeker = None
        elif op == "send":
            assert self.peer is not None
            self.peer.sendall(step["data"].encode())
            self.sent += len(step["data"])
        elif op == "send_pattern":
            assert self.peer is not None
            data = pattern(self.sent, step["len"])
            self.sent += len(data)
            self.writers.spawn(self.peer, lambda fd: write_all(fd, data))
        elif op == "send_later":
            assert self.peer is not None
            d = step["data"].encode()
            self.sent += len(d)
            ms = step["ms"]

            def later(fd: int) -> None:
                time.sleep(ms / 1000)
                write_all(fd, d)

            self.writers.spawn(self.peer, later)
        elif op == "wait_queued":
            wait_queued(self.fd, step["bytes"])
        elif op == "peek":
            buf = bytearray(step["len"])
            t0, c0 = time.monotonic(), time.thread_time()
            try:
                self.result(step, lambda: (self.p().peek_into(buf, flags=flags), buf), ctx)
            finally:
                t, cpu = time.monotonic() - t0, time.thread_time() - c0
            elapsed_bounds(step, t, ctx)
            cpu_bound(step, cpu, ctx)
        elif op == "errqueue":
            with socket.socket(fileno=os.dup(self.fd)) as s:
                errqueue_entry(s, step["kind"], ctx)
        elif op == "set_rcvtimeo_ms":
            with socket.socket(fileno=os.dup(self.fd)) as s:
                set_rcvtimeo(s, step["ms"] / 1000)
        elif op == "peekv":
            # `len` one-byte buffers (1024 = IOV_MAX: no room for a prefix iovec).
            n = step["len"]
            bufs = [bytearray(1) for _ in range(n)]

            def peekv() -> tuple[int, bytes]:
                got = self.p().peekv(bufs, flags=flags)
                return got, b"".join(bufs)

            self.result(step, peekv, ctx)
        elif op == "peek_at":
            def at() -> tuple[int, bytes]:
                d = lowcopy.peek_at(self.fd, step["offset"], step["len"], flags)
                return len(d), d

            self.result(step, at, ctx)
        elif op in ("peeker_peek_at", "peeker_peekv_at"):
            # peekv: `len` one-byte buffers.
            buf = bytearray(step["len"])
            bufs = [bytearray(1) for _ in range(step["len"])]
            got: list[lowcopy.PeekResult] = []

            def peek_at() -> tuple[int, bytes]:
                if op == "peeker_peekv_at":
                    r = self.p().peekv_at(step["offset"], bufs, flags)
                    got.append(r)
                    return r.len, b"".join(bufs)
                r = self.p().peek_at_into(step["offset"], buf, flags=flags)
                got.append(r)
                return r.len, bytes(buf)

            self.result(step, peek_at, ctx)
            if got:
                for k, want in step.get("result", {}).items():
                    assert getattr(got[0], k) == want, f"{ctx}: result.{k} of {got[0]!r}"
        elif op == "consume":
            self.result(step, lambda: (self.p().consume(step["n"]), b""), ctx)
        elif op == "consume_fd":
            self.result(step, lambda: (lowcopy.consume(self.fd, step["n"], flags), b""), ctx)
        elif op == "seek":
            self.result(step, lambda: (self.p().seek(step["offset"]) or 0, b""), ctx)
        elif op == "send_fds":
            # The peer sends `data` with `fds` copies of one descriptor (SCM_RIGHTS), then
            # closes its own: the queue holds the only references.
            assert self.peer is not None
            with open("/dev/null", "rb") as f:
                d = step["data"].encode()
                n = socket.send_fds(self.peer, [d], [f.fileno()] * step["fds"])
            assert n == len(d), f"{ctx}: sent {n}"
            self.sent += len(d)
        elif op == "fds_mark":
            self.fds_marked = len(os.listdir("/proc/self/fd"))
        elif op == "expect_fds_marked":
            assert self.fds_marked is not None, f"{ctx}: expect_fds_marked before fds_mark"
            n = len(os.listdir("/proc/self/fd"))
            assert n == self.fds_marked, f"{ctx}: {n} descriptors open, {self.fds_marked} at fds_mark"
        elif op == "expect_offset":
            assert self.p().offset == step["value"], f"{ctx}: cursor {self.p().offset}"
        elif op == "shutdown_peer":
            assert self.peer is not None
            self.peer.shutdown(socket.SHUT_WR)
        elif op == "reset_peer":
            assert self.peer is not None
            reset(self.peer)
            self.peer = None
            time.sleep(0.02)
        elif op == "read":
            def read() -> tuple[int, bytes]:
                d = os.read(self.fd, step["len"])
                return len(d), d

            self.result(step, read, ctx)
        elif op == "send_oob":
            assert self.peer is not None
            d = step["data"].encode()
            assert self.peer.send(d, socket.MSG_OOB) == len(d), f"{ctx}: short send"
        elif op == "wait_urgent":
            po = select.poll()
            po.register(self.fd, select.POLLPRI)
            assert any(ev & select.POLLPRI for _, ev in po.poll(3000)), f"{ctx}: no urgent byte"
        elif op == "recv_oob":
            def recv_oob() -> tuple[int, bytes]:
                with socket.socket(fileno=os.dup(self.fd)) as s:
                    d = s.recv(1, socket.MSG_OOB)
                return len(d), d

            self.result(step, recv_oob, ctx)
        elif op == "arm":
            on = step.get("on", True)

            def arm() -> tuple[int, bytes]:
                self.p().lowat_armed = on
                return 0, b""

            self.result(step, arm, ctx)
        elif op == "expect_rcvlowat":
            s = socket.socket(fileno=os.dup(self.fd))
            with s:
                v = s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
            assert v == step["value"], f"{ctx}: SO_RCVLOWAT {v}"
        elif op == "expect_peek_off":
            s = socket.socket(fileno=os.dup(self.fd))
            with s:
                try:
                    v = s.getsockopt(socket.SOL_SOCKET, SO_PEEK_OFF)
                except OSError as e:
                    if e.errno != errno.EOPNOTSUPP:
                        raise
                    v = -1  # sockets without SO_PEEK_OFF (MPTCP): disabled by definition
            assert v == step["value"], f"{ctx}: SO_PEEK_OFF {v}"
        elif op == "expect_stat":
            p = self.p()
            want = step[p.mode.name.lower()]
            got = getattr(p.stats(), step["field"])
            assert got == want, f"{ctx}: stat {step['field']} = {got}, want {want}"
        elif op == "peek_supported":
            self.result(step, lambda: (int(lowcopy.peek_supported(self.fd)), b""), ctx)
        elif op == "wakeups":
            self.wakeups(step, ctx)
        else:
            raise AssertionError(f"{ctx}: unknown op {op}")

    def wakeups(self, step: dict[str, Any], ctx: str) -> None:
        """A level-triggered epoll loop: wait for EPOLLIN, peek with MSG_DONTWAIT, count."""
        if "send_after_ms" in step:
            assert self.peer is not None
            d = step["data"].encode()
            self.sent += len(d)
            after = step["send_after_ms"]

            def later(fd: int) -> None:
                time.sleep(after / 1000)
                write_all(fd, d)

            self.writers.spawn(self.peer, later)
        ep = select.epoll()
        ep.register(self.fd, select.EPOLLIN)
        end = time.monotonic() + step["ms"] / 1000
        wakeups, got = 0, bytearray()
        buf = bytearray(4096)
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    break
                if not ep.poll(max(left, 0.001)):
                    continue
                wakeups += 1
                try:
                    n = self.p().peek_into(buf, flags=socket.MSG_DONTWAIT)
                    got += buf[:n]
                except BlockingIOError:
                    pass
        finally:
            ep.close()
        if "max" in step:
            assert wakeups <= step["max"], f"{ctx}: {wakeups} wakeups, want <= {step['max']}"
        if "min" in step:
            assert wakeups >= step["min"], f"{ctx}: {wakeups} wakeups, want >= {step['min']}"
        if "data" in step:
            assert got.endswith(step["data"].encode()), f"{ctx}: the loop missed the byte: {got!r}"


@pytest.mark.parametrize("table,sc,transport,mode", only(PEEK), ids=ids(only(PEEK)))
def test_peek_table(deadline: None, table: dict[str, Any], sc: dict[str, Any], transport: str,
                    mode: str) -> None:
    ctx = f"[{sc['name']} | {transport} | {mode}]"
    steps = [dict(s) for s in sc["steps"]]
    rule = table["no_peek_off"]
    listed = transport in rule["transports"]
    # The kernel's answer (probe), never the table's: TCP before 6.9/6.12 has none.
    no_peek_off = listed or not probe_has_peek_off(transport)
    if no_peek_off and not listed:
        if sc.get("needs") == "peek_off":
            skip_part(f"peek.json: {ctx}", "not applicable: no SO_PEEK_OFF for this family here (probe)")
        if mode == "auto":
            auto_without_peek_off(steps)
    if no_peek_off and mode == "offset":
        # The peeker cannot exist: its `new` (or `init`) must fail, and the run ends there.
        i = next((i for i, s in enumerate(steps) if s["op"] in ("new", "init")), None)
        if i is not None:
            steps = steps[: i + 1]
            refused = {"op": steps[i]["op"], "expect_err": rule["errno"]}
            if "kind" in steps[i]:
                refused["kind"] = steps[i]["kind"]
            steps[i] = refused
    odd = transport in ("closed", "file") or transport.startswith("listen_")
    pair: Pair | None = None
    oddfd: OddFd | None = None
    if odd:
        oddfd = OddFd(transport)
        fd, peer = oddfd.fd, None
    else:
        pair = stream_pair(transport)
        if "socket_rcvbuf" in sc:
            assert pair.peer is not None
            why = force_buf(pair.sock, True, sc["socket_rcvbuf"]) or force_buf(
                pair.peer, False, sc["socket_rcvbuf"]
            )
            if why:
                skip_part(f"peek.json [{sc['name']} | {transport} | {mode}]", why)
        # A blocking step that waits wrongly fails with EAGAIN instead of hanging.
        set_rcvtimeo(pair.sock, 3.0)
        fd, peer = pair.sock.fileno(), pair.peer
    run = PeekRun(fd, peer, mode, transport)
    try:
        for i, step in enumerate(steps):
            run.step(step, f"{ctx} step {i} {step['op']}")
    finally:
        if run.peeker is not None:
            run.peeker.close()
        run.writers.join()
        if pair is not None:
            if run.peer is None:
                pair.peer = None
            pair.close()
        if oddfd is not None:
            oddfd.close()


# =========================================================================================
# zc.json
# =========================================================================================

ZC = expand("zc.json", "backends")
BACKENDS = {"auto": lowcopy.ZcBackend.AUTO, "errqueue": lowcopy.ZcBackend.ERRQUEUE,
            "io_uring": lowcopy.ZcBackend.IO_URING, "copy": lowcopy.ZcBackend.COPY}


class ZcRun:
    def __init__(self, fd: int, pair: Pair | None, dest: tuple[str, int] | None,
                 datagram: bool, backend: str) -> None:
        self.fd = fd
        self.pair = pair
        self.dest = dest
        self.datagram = datagram
        self.backend = backend
        self.zc: lowcopy.ZeroCopySender | None = None
        self.sent: dict[int, int] = {}  # bytes each send accepted, by user_data (> 0 only)
        self.got: list[lowcopy.Completion] = []
        self.stream_pos = 0
        self.received = 0
        self.timestamping = False
        self.readers = Writers()
        self.reader_result: list[int] | None = None

    def z(self) -> lowcopy.ZeroCopySender:
        assert self.zc is not None, "scenario sends before `new`"
        return self.zc

    def check(self, step: dict[str, Any], call: Any, ctx: str) -> int:
        try:
            n: int = call()
        except OSError as e:
            if "expect_err" in step:
                check_err(step, e, ctx)
                return 0
            raise AssertionError(f"{ctx}: unexpected error {e!r}") from e
        assert "expect_err" not in step, f"{ctx}: want {step['expect_err']}, got {n}"
        if "expect_ret" in step:
            assert n == step["expect_ret"], f"{ctx}: return value {n}"
        return n

    def send(self, lens: list[int], ud: int, flags: int, to: bool = False) -> int:
        """One buffer continuing the pattern, cut into the buffers asked for. The buffers are
        not kept here: the binding must keep them alive until their completion."""
        data = pattern(self.stream_pos, sum(lens))
        parts, at = [], 0
        for n in lens:
            parts.append(data[at : at + n])
            at += n
        z = self.z()
        if to:
            assert self.dest is not None, "sendto needs unconnected UDP"
            n = z.sendmsg(parts, user_data=ud, flags=flags, address=self.dest)
        elif len(parts) == 1:
            n = z.send(parts[0], user_data=ud, flags=flags)
        else:
            n = z.sendmsg(parts, user_data=ud, flags=flags)
        if n > 0:
            assert ud not in self.sent, f"user_data {ud} used twice by the scenario"
            self.sent[ud] = n
        # A datagram is all or nothing; a stream send may be partial.
        self.stream_pos += sum(lens) if self.datagram else n
        return n

    def send_batch(self, count: int, n_len: int, base: int, flags: int) -> int:
        """One send_many of `count` buffers continuing the pattern, user_data base + i;
        returns the sends made."""
        bufs = [pattern(self.stream_pos + i * n_len, n_len) for i in range(count)]
        sent, nbytes, done = self.z().send_many(bufs, [base + i for i in range(count)], flags)
        left = nbytes
        for i in range(sent):
            took = min(n_len, left)  # all but a short last one took n_len
            left -= took
            if took > 0:
                assert base + i not in self.sent, f"user_data {base + i} used twice"
                self.sent[base + i] = took
        self.stream_pos += sent * n_len if self.datagram else nbytes
        self.got.extend(done)
        return int(sent)

    def reap(self) -> int:
        c = self.z().reap()
        self.got.extend(c)
        return len(c)

    def step(self, step: dict[str, Any], ctx: str) -> None:
        op = step["op"]
        flags = flags_of(step)
        if op == "new":
            b = BACKENDS[step.get("backend", self.backend)]
            try:
                z = lowcopy.ZeroCopySender(self.fd, b, adaptive=bool(step.get("adaptive")))
            except OSError as e:
                if "expect_err" in step:
                    check_err(step, e, ctx)
                    return
                raise
            assert "expect_err" not in step, f"{ctx}: want {step['expect_err']}"
            if "expect_backend" in step:
                assert z.backend.name.lower() == step["expect_backend"], f"{ctx}: {z.backend!r}"
            self.zc = z
        elif op == "send":
            t0, c0 = time.monotonic(), time.thread_time()
            self.check(step, lambda: self.send([step["len"]], step["user_data"], flags), ctx)
            t, cpu = time.monotonic() - t0, time.thread_time() - c0
            if "min_ms" in step:
                assert t * 1000 >= step["min_ms"], f"{ctx}: returned after {t*1000:.1f} ms"
            cpu_bound(step, cpu, ctx)
        elif op == "timestamping":
            # Software transmit reports: every later send puts one on the error queue, which
            # only the error-queue backend reads.
            assert self.pair is not None
            self.pair.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING,
                                      SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE)
            self.timestamping = True
        elif op == "request_response":
            self.request_response(step, ctx)
        elif op == "drain_peer_later":
            # The peer reads everything sent so far plus `plus` more bytes, starting after
            # `ms`, from a thread; `completions` joins it.
            assert self.pair is not None and self.pair.peer is not None
            want = self.stream_pos + step["plus"]
            start, ms = self.received, step["ms"]
            result: list[int] = []

            def reader(fd: int) -> None:
                time.sleep(ms / 1000)
                result.append(read_pattern(fd, start, want))

            self.readers.spawn(self.pair.peer, reader)
            self.reader_result = result
        elif op == "sendv":
            self.check(step, lambda: self.send(step["lens"], step["user_data"], flags), ctx)
        elif op == "sendto":
            self.check(step, lambda: self.send([step["len"]], step["user_data"], flags, True),
                       ctx)
        elif op == "send_batch":
            self.check(step, lambda: self.send_batch(step["count"], step["len"], step["base"],
                                                     flags), ctx)
        elif op == "send_many":
            for i in range(step["count"]):
                self.send([step["len"]], 1_000_000 + i, 0)
        elif op == "send_reap_loop":
            n_len, base = step["len"], step["base"]
            for i in range(step["count"]):
                data = pattern(self.stream_pos, n_len)
                n, done = self.z().send_reap(data, user_data=base + i)
                assert n == n_len, f"{ctx}: send_reap short: {n}"
                self.sent[base + i] = n
                self.stream_pos += n
                self.got.extend(done)
        elif op == "fill_window":
            n_len, base = step["len"], step["base"]
            for i in range(10_001):
                try:
                    self.send([n_len], base + i, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                assert i < 10_000, f"{ctx}: the window never filled"
        elif op == "retry_full":
            # A full socket retried without waiting for POLLOUT: every try is EAGAIN (never
            # EBUSY: a failed send must not hold a request slot). The loop is kept tight (one
            # buffer: failed sends do not move the stream) so that it ends, as the Rust
            # runner's does, before the peer's delayed ACK frees socket space.
            # A try may also go through (the peer's kernel collapsed its queue and made room):
            # a send like any other, recorded for `completions`; but at least half must meet
            # the full socket (the table's rule, as the Rust and C runners apply it).
            z = self.z()
            data = pattern(self.stream_pos, step["len"])
            dontwait = socket.MSG_DONTWAIT
            full = 0
            for i in range(step["count"]):
                try:
                    r = z.send(data, 2_000_000 + i, dontwait)
                except BlockingIOError:
                    full += 1
                    continue
                assert r > 0, f"{ctx}: retry {i} of a full socket returned {r}"
                self.sent[2_000_000 + i] = r
                self.stream_pos += r
                data = pattern(self.stream_pos, step["len"])
                # Reaped at once: the window's sends, acked now, complete with it, and must
                # not fill the sender's 4096 slots.
                self.reap()
            assert full * 2 >= step["count"], f"{ctx}: only {full} of {step['count']} tries found it full"
        elif op == "reap":
            self.reap()
        elif op == "wait":
            t0 = time.monotonic()
            ms = step["timeout_ms"]
            timeout = None if ms < 0 else ms / 1000
            # Every wait states what it may return (zc.json): expect_ret_min with expect_err
            # is "that error, or a return >= min".
            if "expect_ret_min" in step:
                try:
                    n = self.z().wait(timeout)
                except OSError as e:
                    check_err(step, e, ctx)
                else:
                    want = step["expect_ret_min"]
                    assert n >= want, f"{ctx}: wait returned {n}, want >= {want}"
            else:
                assert "expect_err" in step or "expect_ret" in step, (
                    f"{ctx}: a wait step needs expect_ret, expect_ret_min or expect_err"
                )
                self.check(step, lambda: self.z().wait(timeout), ctx)
            if "max_ms" in step:
                took = (time.monotonic() - t0) * 1000
                assert took <= step["max_ms"], f"{ctx}: waited {took:.0f} ms"
        elif op == "collect_all":
            end = time.monotonic() + step["timeout_ms"] / 1000
            while True:
                self.reap()
                if self.z().inflight == 0:
                    break
                assert time.monotonic() < end, f"{ctx}: {self.z().inflight} never completed"
                try:
                    self.z().wait(0.05)
                except (TimeoutError, ConnectionResetError):
                    pass
        elif op == "drain_peer":
            self.drain_peer(ctx)
        elif op == "reset_peer":
            assert self.pair is not None and self.pair.peer is not None
            reset(self.pair.peer)
            self.pair.peer = None
            time.sleep(0.05)
        elif op == "expect_inflight":
            n = self.z().inflight
            if "value" in step:
                assert n == step["value"], f"{ctx}: inflight {n}"
            if "min" in step:
                assert n >= step["min"], f"{ctx}: inflight {n}"
        elif op == "completions":
            self.completions(step, ctx)
        elif op == "completions_flagged":
            self.reap()
            assert step["flag"] == "FALLBACK", f"{ctx}: only FALLBACK is counted"
            n = sum(1 for c in self.got if c.flags & lowcopy.ZcFlag.FALLBACK)
            assert n >= step["min"], f"{ctx}: {n} completions with FALLBACK"
        elif op == "expect_stat":
            got = getattr(self.z().stats(), step["field"])
            if "value" in step:
                assert got == step["value"], f"{ctx}: {step['field']} = {got}"
            if "min" in step:
                assert got >= step["min"], f"{ctx}: {step['field']} = {got}"
            if "max" in step:
                assert got <= step["max"], f"{ctx}: {step['field']} = {got}"
        elif op == "free":
            # The close policy, as lowcopy_zc_free: expect_ret is the sends abandoned.
            z = self.z()
            self.got.extend(z.reap())
            st = z.close()
            assert st is not None
            self.zc = None
            if "expect_ret" in step:
                assert st.close_abandoned == step["expect_ret"], f"{ctx}: abandoned {st}"
            if "expect_resets" in step:
                assert st.close_resets == step["expect_resets"], f"{ctx}: resets {st}"
        else:
            raise AssertionError(f"{ctx}: unknown op {op}")

    def drain_peer(self, ctx: str) -> None:
        """The peer reads everything sent so far and checks it against the pattern."""
        assert self.pair is not None and self.pair.peer is not None
        peer = self.pair.peer
        peer.settimeout(3.0)
        while self.received < self.stream_pos:
            try:
                d = peer.recv(1 << 20)
            except TimeoutError:
                d = b""
            assert d, f"{ctx}: peer got {self.received} of {self.stream_pos} bytes"
            assert d == pattern(self.received, len(d)), f"{ctx}: wrong bytes at {self.received}"
            self.received += len(d)

    def request_response(self, step: dict[str, Any], ctx: str) -> None:
        """Per round: a blocking zerocopy send, then (error-queue backend, or timestamping
        on) until poll says POLLERR, the peer reads the request and answers 50 ms later;
        recv_atleast on the sending socket must sleep until the answer."""
        n_len, reply, base = step["len"], step["reply_len"], step["base"]
        assert self.pair is not None and self.pair.peer is not None
        for i in range(step["rounds"]):
            rctx = f"{ctx} round {i}"
            assert self.send([n_len], base + i, 0) == n_len, f"{rctx}: request"
            if self.z().backend == lowcopy.ZcBackend.ERRQUEUE or self.timestamping:
                wait_pollerr(self.fd, rctx)  # the receive below starts with it pending
            self.drain_peer(rctx)
            answer = Writers()

            def respond(fd: int) -> None:
                time.sleep(0.05)
                write_all(fd, b"r" * reply)

            # The clock starts before the answering thread does: on a loaded machine starting
            # it can take longer than its 50 ms sleep.
            t0, c0 = time.monotonic(), time.thread_time()
            answer.spawn(self.pair.peer, respond)
            try:
                got = lowcopy.recv_atleast(self.fd, reply, reply, 3.0)
            finally:
                t, cpu = time.monotonic() - t0, time.thread_time() - c0
                answer.join()
            assert got == b"r" * reply, f"{rctx}: reply {got!r}"
            assert t >= 0.03, f"{rctx}: answered after {t*1000:.1f} ms"
            cpu_bound(step, cpu, rctx)

    def completions(self, step: dict[str, Any], ctx: str) -> None:
        if self.reader_result is not None:
            self.readers.join()
            self.received = self.reader_result[0]
            self.reader_result = None
        self.reap()
        ud = step["user_data"]
        want = sorted(self.sent) if ud == "all" else list(ud)
        got = sorted(c.user_data for c in self.got)
        assert got == want, f"{ctx}: completions (each user_data exactly once)"
        for c in self.got:
            assert c.result == self.sent[c.user_data], f"{ctx}: result of {c.user_data}"
            assert isinstance(c.flags, lowcopy.ZcFlag)
            if "copied" in step:
                assert bool(c.flags & lowcopy.ZcFlag.COPIED) == step["copied"], \
                    f"{ctx}: COPIED on {c.user_data}: {c.flags!r}"
            if step.get("flag") == "FALLBACK":
                assert c.flags & lowcopy.ZcFlag.FALLBACK, f"{ctx}: FALLBACK on {c.user_data}"


@pytest.mark.parametrize("table,sc,transport,backend", only(ZC), ids=ids(only(ZC)))
def test_zc_table(deadline: None, table: dict[str, Any], sc: dict[str, Any], transport: str,
                  backend: str) -> None:
    ctx = f"[{sc['name']} | {transport} | {backend}]"
    steps = [dict(s) for s in sc["steps"]]
    rule = table["no_zerocopy"]
    if transport not in rule["transports"]:
        steps = zc_kernel_rules(sc, steps, transport, backend, ctx)
    if transport in rule["transports"]:
        # No zerocopy on this socket: explicit zerocopy backends are refused at `new` (the
        # run ends there); AUTO must pick the copy backend.
        i = next((i for i, s in enumerate(steps) if s["op"] == "new"), None)
        if i is not None:
            if backend in ("errqueue", "io_uring"):
                steps = steps[: i + 1]
                steps[i] = {"op": "new", "expect_err": rule["errno"]}
            elif backend == "auto":
                steps[i]["expect_backend"] = rule["auto_backend"]
    pair: Pair | None = None
    oddfd: OddFd | None = None
    dest = None
    datagram = False
    if transport in ("closed", "file", "listen_tcp4", "listen_tcp6"):
        oddfd = OddFd(transport)
        fd = oddfd.fd
    else:
        if transport in ("udp4", "udp6", "udp4_unconnected"):
            pair, dest = udp_pair(transport == "udp6", transport != "udp4_unconnected")
            datagram = True
        else:
            pair = stream_pair(transport)
        if sc.get("needs") == "memlock" and os.geteuid() != 0:
            import resource

            if resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] != resource.RLIM_INFINITY:
                skip_part(
                    f"zc.json [{sc['name']} | {transport} | {backend}]",
                    "zerocopy pages in flight count against RLIMIT_MEMLOCK without CAP_IPC_LOCK; "
                    "this scenario fills a socket with them",
                )
        if "socket_rcvbuf" in sc:
            assert pair.peer is not None
            why = force_buf(pair.peer, True, sc["socket_rcvbuf"])
            if why:
                skip_part(f"zc.json [{sc['name']} | {transport} | {backend}]", why)
        fd = pair.sock.fileno()
    run = ZcRun(fd, pair, dest, datagram, backend)
    try:
        for i, step in enumerate(steps):
            run.step(step, f"{ctx} step {i} {step['op']}")
    finally:
        if run.zc is not None:
            run.zc.close()
        run.readers.join()
        if pair is not None:
            pair.close()
        if oddfd is not None:
            oddfd.close()


# =========================================================================================
# rx.json
# =========================================================================================

RX = expand("rx.json", None)


class Counters:
    """RecvStats-like counters of one call (a receiver's after minus before)."""

    def __init__(self, d: dict[str, int]) -> None:
        self.d = d

    def __getattr__(self, k: str) -> int:
        return self.d[k]

    def __repr__(self) -> str:
        return f"Counters({self.d})"


def rmem_cap() -> int:
    with open("/proc/sys/net/ipv4/tcp_rmem") as f:
        return int(f.read().split()[2]) // 2


class RxRun:
    def __init__(self, sock: socket.socket | None, fd: int, peer: socket.socket | None,
                 listener: socket.socket | None, mss: int | None, keep: list[Any]) -> None:
        self.sock = sock
        self.fd = fd
        self.peer = peer
        self.listener = listener
        self.mss = mss
        self.keep = keep
        self.zcrx: lowcopy.ZeroCopyReceiver | None = None
        self.receiver: lowcopy.Receiver | None = None
        self.sent = 0
        self.received = 0
        self.writers = Writers()

    def resolve(self, v: Any) -> int:
        if isinstance(v, int):
            return v
        if v == "rmem_cap":
            return rmem_cap()
        if v == "rcvbuf_half":
            assert self.sock is not None
            return self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
        raise AssertionError(f"bad number {v}")

    def expect(self, step: dict[str, Any], call: Any, ctx: str) -> int:
        """Runs `call() -> (n, data)`, checks it; returns the bytes received (0 on error)."""
        try:
            n, data = call()
        except OSError as e:
            if "expect_err" in step:
                check_err(step, e, ctx)
                return 0
            raise AssertionError(f"{ctx}: unexpected error {e!r}") from e
        assert "expect_err" not in step, f"{ctx}: want {step['expect_err']}, got {n}"
        if "expect_ret" in step:
            assert n == self.resolve(step["expect_ret"]), f"{ctx}: return value {n}"
        if "expect" in step:
            assert bytes(data[:n]) == step["expect"].encode(), f"{ctx}: got {bytes(data[:n])!r}"
        if step.get("expect_pattern") is True:
            assert bytes(data[:n]) == pattern(self.received, n), \
                f"{ctx}: wrong bytes at stream position {self.received}"
        return int(n)

    def expect_data(self, step: dict[str, Any], call: Any, ctx: str) -> None:
        self.received += self.expect(step, call, ctx)

    @staticmethod
    def elapsed(step: dict[str, Any], t: float, ctx: str) -> None:
        if "min_ms" in step:
            assert t * 1000 >= step["min_ms"], f"{ctx}: returned after {t*1000:.1f} ms"
        if "max_ms" in step:
            assert t * 1000 <= step["max_ms"], f"{ctx}: returned after {t*1000:.1f} ms"

    def spawn(self, job: Any) -> None:
        assert self.peer is not None, "no peer"
        self.writers.spawn(self.peer, job)

    def step(self, step: dict[str, Any], ctx: str) -> None:
        op = step["op"]
        if op == "set_rcvlowat":
            self.expect(step, lambda: (lowcopy.set_rcvlowat(self.fd, step["bytes"]), b""), ctx)
        elif op == "expect_rcvlowat":
            assert self.sock is not None
            v = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
            assert v == self.resolve(step["value"]), f"{ctx}: SO_RCVLOWAT {v}"
        elif op == "expect_rcvbuf_min":
            assert self.sock is not None
            v = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            assert v >= self.resolve(step["value"]), f"{ctx}: SO_RCVBUF {v}"
        elif op == "accept":
            assert self.listener is not None, "not a listener"
            # The client connects now: a socket takes the listener's options when its
            # handshake completes, not at accept().
            self.peer = tcp_connect(self.listener, self.mss)
            s, _ = self.listener.accept()
            set_rcvtimeo(s, 3.0)
            self.keep.append(s)
            self.sock, self.fd = s, s.fileno()
        elif op == "send":
            assert self.peer is not None
            d = step["data"].encode()
            self.peer.sendall(d)
            self.sent += len(d)
        elif op == "send_pattern":
            data = pattern(self.sent, step["len"])
            self.sent += len(data)
            self.spawn(lambda fd: write_all(fd, data))
        elif op == "send_trickle":
            n, pieces, ms = step["len"], step["pieces"], step["ms"]
            data = pattern(self.sent, n)
            self.sent += n
            size = -(-n // pieces)

            def trickle(fd: int) -> None:
                for at in range(0, n, size):
                    write_all(fd, data[at : at + size])
                    time.sleep(ms / 1000)

            self.spawn(trickle)
        elif op == "send_later":
            d = step["data"].encode() if "data" in step else pattern(self.sent, step["len"])
            self.sent += len(d)
            ms = step["ms"]

            def later(fd: int) -> None:
                time.sleep(ms / 1000)
                write_all(fd, d)

            self.spawn(later)
        elif op == "send_zc_pattern":
            data = pattern(self.sent, step["len"])
            self.sent += len(data)
            sizes = list(step["sizes"])
            self.spawn(lambda fd: send_zerocopy(fd, data, sizes))
        elif op == "send_datagrams":
            assert self.peer is not None
            for d in step["list"]:
                assert self.peer.send(d.encode()) == len(d), f"{ctx}: send datagram"
        elif op == "wait_queued":
            wait_queued(self.fd, step["bytes"])
        elif op == "sleep":
            time.sleep(step["ms"] / 1000)
        elif op == "errqueue":
            assert self.sock is not None
            if step["kind"] == "icmp":
                # UDP: the peer goes away, our next datagram draws an ICMP port unreachable:
                # ECONNREFUSED pending (SO_ERROR) and, with IP_RECVERR, an error-queue entry.
                self.sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
                assert self.peer is not None
                self.peer.close()
                self.peer = None
                assert self.sock.send(b"e") == 1, f"{ctx}: send"
                wait_pollerr(self.fd, ctx)
            else:
                errqueue_entry(self.sock, step["kind"], ctx)
        elif op == "shutdown_peer":
            # After the bytes still being written, without waiting here for a reader.
            before = self.writers.take()

            def shut(fd: int) -> None:
                for t in before:
                    t.join()
                with socket.socket(fileno=os.dup(fd)) as s:
                    s.shutdown(socket.SHUT_WR)

            self.spawn(shut)
        elif op == "reset_peer":
            self.writers.join()
            assert self.peer is not None
            reset(self.peer)
            self.peer = None
            time.sleep(0.02)
        elif op == "recv_atleast" or op == "receiver_recv":
            self.recv_atleast(step, ctx)
        elif op == "receiver_new":
            if self.receiver is not None:
                self.receiver.close()
                self.receiver = None
            try:
                self.receiver = lowcopy.Receiver(self.fd)
            except OSError as e:
                if "expect_err" in step:
                    check_err(step, e, ctx)
                    return
                raise
            assert "expect_err" not in step, f"{ctx}: want {step['expect_err']}"
        elif op == "receiver_free":
            if self.receiver is not None:
                self.receiver.close()
            self.receiver = None
        elif op == "read":
            def read() -> tuple[int, bytes]:
                d = os.read(self.fd, step["len"])
                return len(d), d

            self.expect_data(step, read, ctx)
        elif op == "set_rcvtimeo_ms":
            assert self.sock is not None
            set_rcvtimeo(self.sock, step["ms"] / 1000)
        elif op == "set_nonblocking":
            os.set_blocking(self.fd, False)
        elif op == "set_peek_off":
            assert self.sock is not None
            self.sock.setsockopt(socket.SOL_SOCKET, SO_PEEK_OFF, step["value"])
        elif op == "expect_peek_off":
            assert self.sock is not None
            v = self.sock.getsockopt(socket.SOL_SOCKET, SO_PEEK_OFF)
            assert v == self.resolve(step["value"]), f"{ctx}: SO_PEEK_OFF {v}"
        elif op == "peek":
            assert self.sock is not None
            n = step["len"]
            b = self.sock.recv(n, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            assert len(b) == n, f"{ctx}: peek"
            at = step["expect_pattern_at"]
            assert b == pattern(at, n), f"{ctx}: peeked bytes are not stream bytes {at}.."
        elif op == "zcrx_new":
            if self.zcrx is not None:
                self.zcrx.close()
                self.zcrx = None
            try:
                z = lowcopy.ZeroCopyReceiver(self.fd, step["window"])
            except OSError as e:
                if "expect_err" in step:
                    check_err(step, e, ctx)
                    return
                raise
            assert "expect_err" not in step, f"{ctx}: want {step['expect_err']}"
            if "expect_window" in step:
                assert z.window == step["expect_window"], f"{ctx}: window {z.window}"
            self.zcrx = z
        elif op == "zcrx_free":
            if self.zcrx is not None:
                self.zcrx.close()
            self.zcrx = None
        elif op == "zcrx_recv":
            self.zcrx_recv(step, ctx)
        elif op == "zcrx_set_timeout":
            assert self.zcrx is not None, "no receiver"
            ms = step["ms"]
            self.zcrx.set_timeout(None if ms < 0 else ms / 1000)
        elif op == "zcrx_peek_off_tracking":
            assert self.zcrx is not None, "no receiver"
            self.zcrx.set_peek_off_tracking(step["on"])
        elif op == "zcrx_drain":
            self.zcrx_drain(step, step["bytes"], ctx)
        elif op == "zcrx_stat":
            assert self.zcrx is not None, "no receiver"
            s = self.zcrx.stats()
            got = getattr(s, step["field"])
            # A kernel whose struct tcp_zerocopy_receive has no copy buffer (before 5.11:
            # under 36 bytes, per the probe) reads every copied byte with recv.
            value = step.get("value")
            if "value_no_copybuf" in step and CAPS.tcp_zerocopy_receive_size < 36:
                value = step["value_no_copybuf"]
            if value is not None:
                assert got == value, f"{ctx}: {s!r}"
            if "min" in step:
                assert got >= step["min"], f"{ctx}: {s!r}"
            if "max" in step:
                assert got <= step["max"], f"{ctx}: {s!r}"
        else:
            raise AssertionError(f"{ctx}: unknown op {op}")

    def recv_atleast(self, step: dict[str, Any], ctx: str) -> None:
        buf = bytearray(step["len"])
        ms = step["timeout_ms"]
        timeout = None if ms < 0 else ms / 1000
        stats: list[lowcopy.RecvStats | Counters] = []

        def call() -> tuple[int, bytearray]:
            if step["op"] == "recv_atleast":
                n, s = lowcopy.recv_atleast_stats(self.fd, buf, step["min"], timeout)
                stats.append(s)
                return n, buf
            # The call's own counters: the receiver's after minus before.
            rx = self.receiver
            assert rx is not None, "receiver_recv before receiver_new"
            before = rx.stats().as_dict()
            try:
                n = rx.recv_atleast_into(buf, step["min"], timeout)
            finally:
                after = rx.stats().as_dict()
                stats.append(Counters({k: after[k] - before[k] for k in after}))
            return n, buf

        t0, c0 = time.monotonic(), time.thread_time()
        try:
            self.expect_data(step, call, ctx)
        finally:
            t, cpu = time.monotonic() - t0, time.thread_time() - c0
        self.elapsed(step, t, ctx)
        cpu_bound(step, cpu, ctx)
        if stats:
            s = stats[0]
            if "syscalls" in step:
                assert s.syscalls == step["syscalls"], f"{ctx}: syscalls of the call: {s!r}"
            if "wakeups_max" in step:
                assert s.wakeups <= step["wakeups_max"], f"{ctx}: {s!r}"
            if "wakeups_min" in step:
                assert s.wakeups >= step["wakeups_min"], f"{ctx}: {s!r}"
            if "lowat_changes" in step:
                assert s.lowat_changes == step["lowat_changes"], f"{ctx}: {s!r}"

    def zcrx_recv(self, step: dict[str, Any], ctx: str) -> None:
        z = self.zcrx
        assert z is not None, "zcrx_recv before zcrx_new"
        flags = socket.MSG_DONTWAIT if step.get("dontwait") else 0
        mapped: list[bool] = []

        def call() -> tuple[int, bytes]:
            c = z.recv(flags)
            mapped.append(c.mapped)
            d = bytes(c)
            return len(d), d

        t0, c0 = time.monotonic(), time.thread_time()
        try:
            n, _ = call()
            err: OSError | None = None
        except OSError as e:
            n, err = -1, e
        t, cpu = time.monotonic() - t0, time.thread_time() - c0
        cpu_bound(step, cpu, ctx)
        if step.get("expect_eof"):
            assert err is None and n == 0, f"{ctx}: want end of stream, got {n} / {err!r}"
        if err is None and n > 0 and "expect_mapped" in step:
            assert mapped[0] == step["expect_mapped"], f"{ctx}: mapped {mapped[0]}"
        # Re-check the outcome through the common path (the call already happened).
        outcome = (n, _) if err is None else None

        def replay() -> tuple[int, bytes]:
            if outcome is None:
                assert err is not None
                raise err
            return outcome

        self.expect_data(step, replay, ctx)
        self.elapsed(step, t, ctx)

    def zcrx_drain(self, step: dict[str, Any], nbytes: int, ctx: str) -> None:
        z = self.zcrx
        assert z is not None, "zcrx_drain before zcrx_new"
        before = z.stats()
        t0 = time.monotonic()
        got = 0
        while got < nbytes:
            try:
                c = z.recv()
            except OSError as e:
                raise AssertionError(f"{ctx}: after {got} of {nbytes} bytes: {e!r}") from e
            n = len(c)
            assert n > 0, f"{ctx}: end of stream after {got} of {nbytes} bytes"
            with memoryview(c) as m:
                assert m == pattern(self.received + got, n), \
                    f"{ctx}: wrong bytes at stream position {self.received + got} (mapped {c.mapped})"
            got += n
        assert got == nbytes, f"{ctx}: more bytes than expected"
        if step.get("expect_eof"):
            c = z.recv()
            assert len(c) == 0, f"{ctx}: want end of stream, got {len(c)} bytes"
        self.elapsed(step, time.monotonic() - t0, ctx)
        s = z.stats()
        delivered = s.bytes_mapped + s.bytes_copied - before.bytes_mapped - before.bytes_copied
        assert delivered == nbytes, f"{ctx}: mapped + copied != received: {s!r}"
        self.received += nbytes


@pytest.mark.parametrize("table,sc,transport,_", only(RX), ids=ids(only(RX)))
def test_rx_table(deadline: None, table: dict[str, Any], sc: dict[str, Any], transport: str,
                  _: str) -> None:
    ctx = f"[{sc['name']} | {transport}]"
    mss = sc.get("mss")
    rcvbuf = sc.get("rcvbuf_lock")
    keep: list[Any] = []
    sock: socket.socket | None = None
    peer: socket.socket | None = None
    listener: socket.socket | None = None
    fd = 1_000_000
    if transport in ("tcp4", "tcp6"):
        p = tcp_pair(transport == "tcp6", mss=mss, rcvbuf=rcvbuf)
        sock, peer = p.sock, p.peer
    elif transport in ("listener4", "listener6"):
        listener = tcp_listener(transport == "listener6", mss=mss, rcvbuf=rcvbuf)
        keep.append(listener)
        fd = listener.fileno()
    elif transport in ("unix", "mptcp4"):
        p = stream_pair(transport)
        sock, peer = p.sock, p.peer
    elif transport == "udp4":
        p, _d = udp_pair()
        sock, peer = p.sock, p.peer
    elif transport in ("closed", "file"):
        odd = OddFd(transport)
        keep.append(odd)
        fd = odd.fd
    elif transport == "tcp4_unconnected":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    else:
        raise AssertionError(f"unknown transport {transport}")
    if sock is not None:
        if transport not in ("tcp4", "tcp6") and rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        # A wrong blocking wait fails with EAGAIN instead of hanging the suite.
        set_rcvtimeo(sock, 3.0)
        keep.append(sock)
        fd = sock.fileno()
    if peer is not None:
        keep.append(peer)
    run = RxRun(sock, fd, peer, listener, mss, keep)
    try:
        for i, step in enumerate(sc["steps"]):
            run.step(step, f"{ctx} step {i} {step['op']}")
    finally:
        if run.zcrx is not None:
            run.zcrx.close()
        if run.receiver is not None:
            run.receiver.close()
        run.writers.join()
        for k in run.keep:
            k.close()
        if run.peer is not None:
            run.peer.close()


def test_tables_expand() -> None:
    """Every table still expands to at least as many runs as the Rust runners require."""
    for name, runs in (("peek.json", PEEK), ("zc.json", ZC), ("rx.json", RX)):
        assert len(runs) >= MIN_RUNS, f"{name}: only {len(runs)} runs"
