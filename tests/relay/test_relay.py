#!/usr/bin/env python3
"""Byte-exact transfers through examples/c/peek_relay in every mode.

Usage: python3 tests/relay/test_relay.py BUILD_BIN_DIR [MODE...]

The relay runs with --sandbox: after start-up a seccomp filter allows only its own syscalls
and lowcopy's documented ones, none that allocates (any other kills it with SIGSYS).

For each mode (copy, auto, offset, discard) one relay process is started with
--max-conns set to the number of connections the test makes, in front of an
in-process server.  Every connection begins with a header telling the server
what to do; then:

  phase 1, concurrently:
    up       64 MiB client -> server
    down     64 MiB server -> client
    both     16 MiB each way at once, both readers stall first and then read
             slowly (fills every buffer: short writes, rewinds, closed windows)
    small    12345 B up, 54321 B down, odd sizes
    empty    no payload either way: the FINs alone
    urgent   8 MiB each way, the last byte of every chunk sent as TCP urgent data
             (MSG_OOB): the far end gets every byte inline, in place, no reset
  phase 2, concurrently:
    client-reset  the client closes with SO_LINGER 0 mid-stream
    server-reset  the server closes with SO_LINGER 0 mid-stream
    (the other end must see the connection end, not hang; the relay lives)
  phase 3:
    after-reset   8 MiB each way: the relay still serves
  summary: the relay exits by itself after the last connection and prints
  its summary line (offset peeks copy no byte only to skip it, discard does).

The streams come from random.Random(seed); sender and receiver each compute
sha256 and the test compares them.  Every socket has a timeout and every
wait a deadline; the relay is killed in a finally.  The last line is
"relay: N passed, M failed"; the exit status is non-zero on any failure.
"""

import ctypes
import errno
import hashlib
import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1 << 20
IO_TIMEOUT = 30.0          # any single socket operation
PHASE_TIMEOUT = 90.0       # a whole phase
START_TIMEOUT = 5.0        # relay prints its listening address
EXIT_TIMEOUT = 20.0        # relay exits after --max-conns

MAGIC = b"LCRT"
HDR = struct.Struct("!4sIQQQQI")   # magic, id, seed, up, down, reset_at, flags
F_SLOW = 1                         # reader stalls, then reads slowly
F_URGENT = 2                       # senders send the last byte of every chunk as MSG_OOB

MODES = ["copy", "auto", "offset", "discard"]


def stream_chunks(seed, total):
    """Pseudo-random bytes in pseudo-random chunk sizes (1 B .. 256 KiB)."""
    data = random.Random(seed)
    sizes = random.Random(seed ^ 0x5EED5EED)
    left = total
    while left:
        n = min(left, sizes.randrange(1, 256 * 1024))
        yield data.randbytes(n)
        left -= n


def send_stream(sock, seed, total, stop_after=None, urgent=False):
    """Send `total` bytes (or the first `stop_after`); return (sha256 hex, sent).
    With `urgent`, the last byte of every chunk goes as TCP urgent data (MSG_OOB): it is
    part of the stream the far end must receive, in place."""
    h = hashlib.sha256()
    sent = 0
    for chunk in stream_chunks(seed, total):
        if stop_after is not None and sent + len(chunk) > stop_after:
            chunk = chunk[: stop_after - sent]
        h.update(chunk)
        if urgent and chunk:
            sock.sendall(chunk[:-1])
            sock.sendall(chunk[-1:], socket.MSG_OOB)
        else:
            sock.sendall(chunk)
        sent += len(chunk)
        if stop_after is not None and sent >= stop_after:
            break
    return h.hexdigest(), sent


TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8      # tcpi_state values (include/net/tcp_states.h)


def tcp_state(sock):
    """The connection's TCP state (first byte of struct tcp_info)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def recv_stream(sock, slow=False, stop_after=None, res=None):
    """Read to end of stream (or `stop_after` bytes); return (sha256 hex, got). At end of
    stream, res["eof_state"] is the TCP state then: CLOSE_WAIT after a FIN, CLOSE after a
    reset whose error another thread's call on the socket already took (the kernel reports
    a reset's ECONNRESET to one call only)."""
    h = hashlib.sha256()
    buf = bytearray(256 * 1024)
    view = memoryview(buf)
    got = 0
    if slow:
        time.sleep(0.3)          # let every queue and window on the path fill
    while True:
        want = len(buf)
        if slow and got < 4 * MIB:
            want = 64 * 1024
        n = sock.recv_into(view[:want])
        if n == 0:
            if res is not None:
                res["eof_state"] = tcp_state(sock)
            break
        h.update(view[:n])
        got += n
        if slow and got < 4 * MIB:
            time.sleep(0.001)
        if stop_after is not None and got >= stop_after:
            break
    return h.hexdigest(), got


def recv_exact(sock, n):
    out = bytearray()
    while len(out) < n:
        b = sock.recv(n - len(out))
        if not b:
            raise ConnectionError("EOF inside header")
        out += b
    return bytes(out)


def reset_close(sock):
    """Close with SO_LINGER {1, 0}: the kernel sends RST."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def spawn(target, *args):
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


class Server:
    """Accepts the relay's outgoing connections; one handler thread each."""

    def __init__(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.results = {}            # conn id -> dict
        self.done = {}               # conn id -> threading.Event
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = spawn(self.accept_loop)

    def expect(self, cid):
        with self.lock:
            self.done[cid] = threading.Event()
            self.results[cid] = {}

    def accept_loop(self):
        while not self.stopping:
            try:
                s, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            spawn(self.handle, s)

    def handle(self, s):
        s.settimeout(IO_TIMEOUT)
        cid = None
        res = {}
        try:
            magic, cid, seed, up, down, reset_at, flags = HDR.unpack(recv_exact(s, HDR.size))
            if magic != MAGIC:
                raise ValueError("bad magic")
            with self.lock:
                res = self.results.setdefault(cid, {})
            slow = bool(flags & F_SLOW)

            def sender():
                try:
                    res["down_hash"], res["down_len"] = send_stream(
                        s, seed ^ 0xD0D0, down, urgent=bool(flags & F_URGENT))
                    if not reset_at:
                        s.shutdown(socket.SHUT_WR)
                except OSError as e:
                    res["send_error"] = e.errno or str(e)

            t = spawn(sender)
            try:
                res["up_hash"], res["up_len"] = recv_stream(
                    s, slow=slow, stop_after=reset_at or None, res=res)
            except OSError as e:
                res["recv_error"] = e.errno or str(e)
            if reset_at:
                reset_close(s)
                s = None
            t.join(IO_TIMEOUT + 5)
            res["sender_hung"] = t.is_alive()
        except (OSError, ValueError, struct.error) as e:
            res["error"] = str(e)
        finally:
            if s is not None:
                s.close()
            res["finished"] = True
            if cid is not None:
                with self.lock:
                    ev = self.done.get(cid)
                if ev:
                    ev.set()

    def wait(self, cid, deadline):
        ev = self.done[cid]
        return ev.wait(max(0.0, deadline - time.monotonic()))

    def close(self):
        self.stopping = True
        self.lsock.close()


class Conn:
    """One client connection through the relay, described by its header."""

    def __init__(self, name, cid, up, down, flags=0, client_reset_at=0, server_reset_at=0):
        self.name, self.cid = name, cid
        self.up, self.down, self.flags = up, down, flags
        self.client_reset_at = client_reset_at
        self.server_reset_at = server_reset_at
        self.seed = random.Random(cid * 7919 + up + down).getrandbits(63)
        self.res = {}
        self.thread = None

    def header(self):
        return HDR.pack(MAGIC, self.cid, self.seed, self.up, self.down,
                        self.server_reset_at, self.flags)

    def run(self, port):
        res = self.res
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
            s.settimeout(IO_TIMEOUT)
        except OSError as e:
            res["error"] = "connect: %s" % e
            return
        try:
            s.sendall(self.header())
            if self.client_reset_at:
                # Never read: the server's stream backs up everywhere, then RST.
                send_stream(s, self.seed, self.up, stop_after=self.client_reset_at)
                reset_close(s)
                s = None
                return

            def reader():
                try:
                    res["down_hash"], res["down_len"] = recv_stream(
                        s, slow=bool(self.flags & F_SLOW), res=res)
                except OSError as e:
                    res["recv_error"] = e.errno or str(e)

            t = spawn(reader)
            try:
                res["up_hash"], res["up_len"] = send_stream(
                    s, self.seed, self.up, urgent=bool(self.flags & F_URGENT))
                s.shutdown(socket.SHUT_WR)
            except OSError as e:
                res["send_error"] = e.errno or str(e)
            t.join(IO_TIMEOUT + 5)
            res["reader_hung"] = t.is_alive()
        except OSError as e:
            res["error"] = str(e)
        finally:
            if s is not None:
                s.close()
            res["finished"] = True

    def start(self, port):
        self.thread = spawn(self.run, port)


def check_transfer(c, srv):
    """Both directions arrived complete and identical; both ends saw a clean EOF."""
    cr, sr = c.res, srv.results.get(c.cid, {})
    problems = []
    for side, r in (("client", cr), ("server", sr)):
        for k in ("error", "send_error", "recv_error"):
            if k in r:
                problems.append("%s %s=%s" % (side, k, r[k]))
        if r.get("reader_hung") or r.get("sender_hung"):
            problems.append("%s thread hung" % side)
    if cr.get("up_len") != c.up or sr.get("up_len") != c.up:
        problems.append("up: sent %s of %d, received %s"
                        % (cr.get("up_len"), c.up, sr.get("up_len")))
    elif cr.get("up_hash") != sr.get("up_hash"):
        problems.append("up: sha256 mismatch")
    if sr.get("down_len") != c.down or cr.get("down_len") != c.down:
        problems.append("down: sent %s of %d, received %s"
                        % (sr.get("down_len"), c.down, cr.get("down_len")))
    elif cr.get("down_hash") != sr.get("down_hash"):
        problems.append("down: sha256 mismatch")
    return problems


def reader_saw_reset(r):
    """The reader of a surviving end learnt of the reset: ECONNRESET itself, or end of stream
    on a connection already closed by a reset whose ECONNRESET the concurrent sender took.
    A relay that turned the reset into a FIN leaves the reader a clean end of stream in
    CLOSE_WAIT."""
    if r.get("recv_error") == errno.ECONNRESET:
        return True
    return r.get("eof_state") == TCP_CLOSE and r.get("send_error") == errno.ECONNRESET


def check_reset(c, srv, who):
    """The side that did not reset saw its connection end by a reset on its receiving
    direction: the relay resets the other side too (SO_LINGER 0). A clean end of stream there
    would be a reset turned into a FIN, a truncated stream passed off as complete; a send
    error alone proves nothing (a relay that sends FIN and stops reading makes the
    survivor's sends fail or time out too)."""
    cr, sr = c.res, srv.results.get(c.cid, {})
    if who == "client":
        # Server: both its threads ended; it must not have got the full stream.
        if not sr.get("finished"):
            return ["server end still open after the client's reset"]
        if sr.get("sender_hung"):
            return ["server sender hung after the client's reset"]
        if sr.get("up_len") == c.up and "recv_error" not in sr:
            return ["server received the full stream although the client reset"]
        if not reader_saw_reset(sr):
            return ["server's reader ended with %s (TCP state %s), not a reset (send error: %s)"
                    % (sr.get("recv_error", "end of stream"), sr.get("eof_state"),
                       sr.get("send_error"))]
        return []
    if not cr.get("finished"):
        return ["client end still open after the server's reset"]
    if cr.get("reader_hung"):
        return ["client reader hung after the server's reset"]
    if not reader_saw_reset(cr):
        return ["client's reader ended with %s (TCP state %s), not a reset (send error: %s)"
                % (cr.get("recv_error", "end of stream"), cr.get("eof_state"),
                   cr.get("send_error"))]
    return []


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def record(self, name, problems):
        if problems:
            self.failed += 1
            print("FAIL %s: %s" % (name, "; ".join(problems)), flush=True)
        else:
            self.passed += 1
            print("ok   %s" % name, flush=True)


def start_relay(binary, mode, server_port, max_conns, extra, errfile):
    # --sandbox: after start-up the relay runs under a seccomp filter allowing only its own
    # syscalls and lowcopy's documented ones (lowcopy_syscalls.h), none that allocates; an
    # undocumented syscall kills it with SIGSYS (exit status -31 here).
    args = [binary, "--listen", "127.0.0.1:0", "--connect", "127.0.0.1:%d" % server_port,
            "--max-conns", str(max_conns), "--sandbox"] + extra
    args += ["--copy"] if mode == "copy" else ["--peek", mode]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errfile,
                            stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        with open(errfile.name) as f:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError("relay did not start (exit %s)" % proc.returncode)


def run_phase(conns, port, srv):
    for c in conns:
        srv.expect(c.cid)
    for c in conns:
        c.start(port)
    deadline = time.monotonic() + PHASE_TIMEOUT
    for c in conns:
        c.thread.join(max(0.0, deadline - time.monotonic()))
    for c in conns:
        srv.wait(c.cid, deadline)


def parse_summary(out):
    lines = [l for l in out.splitlines() if l.startswith("relay ")]
    if len(lines) != 1:
        return None
    return dict(kv.split("=", 1) for kv in lines[0].split()[1:])


def probe_peek_off_tcp4(bindir):
    """SO_PEEK_OFF on TCP/IPv4 here, as lowcopy_probe finds it (the library next to the relay):
    what AUTO must pick, and whether the offset mode applies at all."""
    lib = ctypes.CDLL(os.path.join(bindir, "..", "lib", "liblowcopy.so.0"))
    caps = (ctypes.c_ubyte * 64)()
    rc = lib.lowcopy_probe(caps, ctypes.c_size_t(len(caps)))
    if rc < 0:
        raise OSError(-rc, "lowcopy_probe")
    return bool(caps[0])              # lowcopy_caps.peek_off_tcp4, its first field


def skip(part, reason):
    """A part that does not apply here: printed, and logged for scripts/test.sh."""
    print("SKIP %s: %s" % (part, reason), flush=True)
    log = os.environ.get("LOWCOPY_SKIP_LOG")
    if log:
        with open(log, "a") as f:
            f.write("relay %s: %s\n" % (part, reason))


PEEK_OFF_TCP4 = True                  # set by main() from the probe


def check_summary(mode, summ, expect_bytes, nconns):
    if summ is None:
        return ["no summary line on stdout"]
    p = []
    if summ.get("mode") != mode:
        p.append("mode=%s" % summ.get("mode"))
    if int(summ.get("conns", -1)) != nconns:
        p.append("conns=%s, expected %d" % (summ.get("conns"), nconns))
    if int(summ.get("bytes", 0)) < expect_bytes:
        p.append("bytes=%s < %d" % (summ.get("bytes"), expect_bytes))
    skipped = int(summ.get("bytes_skipped_copied", -1))
    eff = summ.get("effective")
    if mode == "copy":
        if int(summ.get("peek_syscalls", -1)) != 0:
            p.append("copy mode made peek syscalls")
    elif mode == "offset":
        if eff != "offset":
            p.append("effective=%s, expected offset" % eff)
        if skipped != 0:
            p.append("bytes_skipped_copied=%d, expected 0" % skipped)
    elif mode == "auto" and not PEEK_OFF_TCP4:
        if eff != "discard":
            p.append("effective=%s, expected discard (the probe finds no SO_PEEK_OFF for "
                     "TCP/IPv4 here)" % eff)
        if skipped <= 0:
            p.append("auto over discard skipped no bytes?")
    elif mode == "auto":
        if eff != "offset":
            p.append("effective=%s, expected offset (the probe finds SO_PEEK_OFF for TCP/IPv4)"
                     % eff)
        # AUTO may peek a small cursor (<= AUTO_DISCARD_MAX = 4 KiB) that the
        # kernel's offset is not at with a discard prefix, to save a setsockopt
        # after a seek: at most 4 KiB copied to skip per syscall, never a whole
        # unacknowledged prefix.
        limit = 4096 * int(summ.get("peek_syscalls", 0))
        if skipped > limit:
            p.append("bytes_skipped_copied=%d > 4 KiB x %s peek syscalls"
                     % (skipped, summ.get("peek_syscalls")))
    else:
        if eff != "discard":
            p.append("effective=%s" % eff)
        if skipped <= 0:
            p.append("discard mode skipped no bytes?")
    if mode != "copy" and int(summ.get("bytes_consumed", 0)) < expect_bytes:
        p.append("bytes_consumed=%s < %d" % (summ.get("bytes_consumed"), expect_bytes))
    # A level-triggered loop that spins (an EPOLLIN or EPOLLHUP it cannot act on)
    # shows as wakeups out of proportion to the bytes moved; ACK sweeps are
    # timer wakeups and do not count.  Healthy runs stay far below this bound.
    busy = int(summ.get("wakeups", 0)) - int(summ.get("sweeps", 0))
    bound = int(summ.get("bytes", 0)) // (16 * 1024) + 5000
    if busy > bound:
        p.append("busy loop: %d event wakeups for %s bytes (bound %d)"
                 % (busy, summ.get("bytes"), bound))
    return p


def scenario_default(port, proc, srv, mode, results, cid):
    """Phases 1-3 of the module docstring; returns (connections, payload bytes)."""
    transfers = [
        Conn("up 64MiB", cid + 1, 64 * MIB, 0),
        Conn("down 64MiB", cid + 2, 0, 64 * MIB),
        Conn("both 16MiB slow readers", cid + 3, 16 * MIB, 16 * MIB, flags=F_SLOW),
        Conn("small odd sizes", cid + 4, 12345, 54321),
        Conn("empty", cid + 5, 0, 0),
        Conn("urgent bytes both ways 8MiB", cid + 9, 8 * MIB, 8 * MIB, flags=F_URGENT),
    ]
    client_reset = Conn("client reset", cid + 6, 64 * MIB, 64 * MIB, client_reset_at=6 * MIB)
    server_reset = Conn("server reset", cid + 7, 64 * MIB, 0, server_reset_at=4 * MIB)
    after = Conn("after resets 8MiB", cid + 8, 8 * MIB, 8 * MIB)
    run_phase(transfers, port, srv)
    for c in transfers:
        results.record("%s: %s" % (mode, c.name), check_transfer(c, srv))
    run_phase([client_reset, server_reset], port, srv)
    results.record("%s: client reset" % mode, check_reset(client_reset, srv, "client"))
    results.record("%s: server reset" % mode, check_reset(server_reset, srv, "server"))
    if proc.poll() is None:
        run_phase([after], port, srv)
        p = check_transfer(after, srv)
    else:
        p = ["relay exited (status %s) after the resets" % proc.returncode]
    results.record("%s: %s" % (mode, after.name), p)
    return len(transfers) + 3, sum(c.up + c.down for c in transfers + [after])


def scenario_small_sndbuf(port, proc, srv, mode, results, cid):
    """Small relay send buffers: dst fills before src's window closes, so
    writes come up short and the peek cursor is seeked back."""
    del proc
    conns = [
        Conn("sndbuf 64K: up 32MiB", cid + 11, 32 * MIB, 0),
        Conn("sndbuf 64K: both 16MiB slow readers", cid + 12, 16 * MIB, 16 * MIB,
             flags=F_SLOW),
    ]
    run_phase(conns, port, srv)
    for c in conns:
        results.record("%s: %s" % (mode, c.name), check_transfer(c, srv))
    return 2, sum(c.up + c.down for c in conns)


INSTANCES = [
    ("default", [], scenario_default),
    ("small-sndbuf", ["--sndbuf", "65536"], scenario_small_sndbuf),
]
NCONNS = {"default": 9, "small-sndbuf": 2}


def run_instance(binary, mode, label, extra, scenario, results, cid):
    srv = Server()
    errfile = tempfile.NamedTemporaryFile("w+", prefix="relay-%s-" % mode, suffix=".err")
    proc = None
    t0 = time.monotonic()
    name = "%s: summary (%s)" % (mode, label)
    try:
        proc, port = start_relay(binary, mode, srv.port, NCONNS[label], extra, errfile)
        nconns, expect = scenario(port, proc, srv, mode, results, cid)
        try:
            out, _ = proc.communicate(timeout=EXIT_TIMEOUT)
            summ = parse_summary(out)
            p = check_summary(mode, summ, expect, nconns)
        except subprocess.TimeoutExpired:
            summ = None
            p = ["relay did not exit within %ds of its last connection" % EXIT_TIMEOUT]
        if summ and label == "small-sndbuf" and mode != "copy" and int(summ["rewinds"]) == 0:
            p.append("no short write was rewound: the scenario missed its point")
        errfile.seek(0)
        err = errfile.read()
        if "Sanitizer" in err or "runtime error" in err:
            p.append("sanitizer report on stderr")
        if proc.returncode == -31:
            p.append("killed by SIGSYS: a syscall outside the sandbox's allowlist")
        elif proc.returncode not in (None, 0):
            p.append("exit status %s" % proc.returncode)
        results.record(name, p)
        if p:
            sys.stdout.write(err[-4000:])
        if summ:
            print("     %.1fs, relay %s" % (time.monotonic() - t0, " ".join(
                "%s=%s" % (k, summ[k]) for k in (
                    "effective", "bytes", "cpu_s", "bytes_skipped_copied", "rewinds", "wakeups",
                    "muted", "sweeps", "resets") if k in summ)), flush=True)
    except Exception as e:  # noqa: BLE001 - any failure is a test failure
        results.record(name, ["%s: %s" % (type(e).__name__, e)])
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.close()
        errfile.close()


def test_mode(binary, mode, results, cid_base):
    for label, extra, scenario in INSTANCES:
        run_instance(binary, mode, label, extra, scenario, results, cid_base)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    binary = os.path.join(sys.argv[1], "peek_relay")
    if not os.access(binary, os.X_OK):
        print("no executable %s" % binary, file=sys.stderr)
        return 2
    modes = sys.argv[2:] or MODES
    results = Results()
    global PEEK_OFF_TCP4
    PEEK_OFF_TCP4 = probe_peek_off_tcp4(sys.argv[1])
    for i, mode in enumerate(modes):
        if mode not in MODES:
            results.record(mode, ["unknown mode"])
            continue
        if mode == "offset" and not PEEK_OFF_TCP4:
            skip("offset mode", "not applicable: no SO_PEEK_OFF for TCP/IPv4 here (probe)")
            continue
        test_mode(binary, mode, results, cid_base=100 * (i + 1))
    print("relay: %d passed, %d failed" % (results.passed, results.failed), flush=True)
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
