"""lowcopy from Python against what Python offers without it, side by side in one run.

Table 1, offset peek over loopback TCP (per call, median of 7 batches):
  - offset 0: Peeker.peek_into (+ seek(0) to stay at offset 0) against
    sock.recv_into(buf, n, MSG_PEEK); also the stateless lowcopy.peek_into (it duplicates
    the descriptor per call);
  - offsets 64 KiB, 1 MiB, 16 MiB: Peeker (SO_PEEK_OFF) seek + peek_into against the only
    pure-Python way, sock.recv(offset + n, MSG_PEEK) and slicing.
Table 2, zerocopy send on the tx-only path (UDP out of a dropping ifb device in network
namespaces made here: the only path on one machine where the kernel pins pages instead of
copying): MB per CPU-second of sock.send, ZeroCopySender.send_reap (error queue and
io_uring), ZeroCopySender.send_many with 8 and 32 datagrams per call (py-*-m8, -m32), and the C library's own figures (build/bin/zc_bench, same path, same loop, same
payload) from the same run. Needs root, ip(8) and build/bin/zc_bench (make examples);
skipped otherwise.

Run: python examples/python/bench.py [--seconds S] [--repeat N] [--zc-bench PATH]
"""

from __future__ import annotations

import argparse
import array
import mmap
import os
import re
import resource
import select
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import lowcopy

SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32

# ---------------------------------------------------------------- table 1: peek


def tcp_pair(queue: int) -> tuple[socket.socket, socket.socket]:
    ls = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(ls.getsockname())
    s, _ = ls.accept()
    ls.close()
    for sock, opt in ((s, SO_RCVBUFFORCE), (c, SO_SNDBUFFORCE)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, 2 * queue)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, opt - 25, 2 * queue)  # SO_RCVBUF / SO_SNDBUF
    return s, c


def fill(s: socket.socket, c: socket.socket, n: int) -> None:
    data = bytes(range(256)) * (n // 256 + 1)
    t = threading.Thread(target=c.sendall, args=(data[:n],))
    t.start()
    end = time.monotonic() + 10
    while lowcopy_inq(s) < n:
        if time.monotonic() > end:
            raise SystemExit(f"only {lowcopy_inq(s)} of {n} bytes queued: receive buffer too small")
        time.sleep(0.001)
    t.join()


def lowcopy_inq(s: socket.socket) -> int:
    import array
    import fcntl
    import termios

    b = array.array("i", [0])
    fcntl.ioctl(s.fileno(), termios.FIONREAD, b)
    return b[0]


def per_call(f: Callable[[], object], calls: int, batches: int = 7) -> float:
    """Median over batches of the time per call, in ns."""
    out = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            f()
        out.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(out)


def peek_table() -> None:
    n = 1024
    deep = 16 << 20
    s, c = tcp_pair(deep + (1 << 20))
    fill(s, c, deep + 65536)
    buf = bytearray(n)
    dontwait = socket.MSG_DONTWAIT
    rows: list[tuple[str, str, float, str, float]] = []

    offsets = ((64 << 10, 5000), (1 << 20, 5000), (deep, 3000))

    # Pure Python first: a plain MSG_PEEK must not meet a Peeker's SO_PEEK_OFF.
    def py0() -> None:
        s.recv_into(buf, n, socket.MSG_PEEK | dontwait)

    py_at0 = per_call(py0, 20000)
    py_at: dict[int, float] = {}
    for off, calls in offsets:
        def pyx(off: int = off) -> None:
            d = s.recv(off + n, socket.MSG_PEEK | dontwait)
            buf[:] = d[off : off + n]

        py_at[off] = per_call(pyx, max(10, calls // (1 + off // 65536)))
    st = per_call(lambda: lowcopy.peek_into(s, buf, 0, n, dontwait), 20000)

    with lowcopy.Peeker(s) as p:
        def lc0() -> None:
            p.peek_into(buf, n, dontwait)
            p.seek(0)

        lc = per_call(lc0, 20000)
        rows.append(("0", "Peeker.peek_into + seek(0)", lc, "sock.recv_into(MSG_PEEK)", py_at0))
        rows.append(("0", "lowcopy.peek_into (stateless)", st, "sock.recv_into(MSG_PEEK)",
                     py_at0))
        mode = p.mode.name
    with lowcopy.Peeker(s, lowcopy.PeekMode.OFFSET) as p:
        for off, calls in offsets:
            def lcx(off: int = off) -> None:
                p.seek(off)
                p.peek_into(buf, n, dontwait)

            lc = per_call(lcx, calls)
            label = f"{off >> 20} MiB" if off >= 1 << 20 else f"{off >> 10} KiB"
            rows.append((label, "Peeker seek + peek_into", lc,
                         "recv(off+n, MSG_PEEK)[off:]", py_at[off]))
    s.close()
    c.close()

    print(f"Offset peek of {n} bytes over loopback TCP (Peeker AUTO picked {mode}); "
          "ns per call, median of 7 batches")
    head = ("offset", "lowcopy", "ns", "pure Python", "ns", "python/lowcopy")
    lines = [(o, a, f"{x:.0f}", b, f"{y:.0f}", f"{y / x:.2f}x") for o, a, x, b, y in rows]
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(6)]
    for r in [head, *lines]:
        print("  " + "  ".join(v.rjust(w) if i in (2, 4, 5) else v.ljust(w)
                               for i, (v, w) in enumerate(zip(r, widths))))
    x0 = rows[0][2] / rows[0][4]
    print(f"  offset 0: Peeker.peek_into + seek(0) takes {x0:.2f}x the time of "
          f"sock.recv_into (goal: within 10%: {'yes' if x0 <= 1.10 else 'NO'})")


# ---------------------------------------------------------------- table 2: tx-only

SIZE = 65435  # the C bench's payload (IP_MAXPACKET less IPv6, TCP and options headers)


def tx_child(mode: str, dst: str, port: int, secs: float) -> None:
    """Runs inside the sender namespace: one Python send loop, the C bench's "app" loop
    (poll for POLLOUT only after EAGAIN); prints one key=value line."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((dst, port))
    s.setblocking(False)
    # As the C bench's: page-aligned and written ('a'..'z'), so that the kernel pins real
    # pages (a fresh bytes(SIZE) is calloc'd memory nobody touched: every pin then takes
    # get_user_pages' slow path).
    area = mmap.mmap(-1, SIZE)
    area[:] = (bytes(range(97, 123)) * (SIZE // 26 + 1))[:SIZE]
    payload = memoryview(area)
    pl = select.poll()
    pl.register(s, select.POLLOUT)
    dontwait = socket.MSG_DONTWAIT  # as the C bench's sendmsg
    sends = completions = copied = 0
    nbytes = 0
    tx = None
    # "py-errq-m8": send_many with batches of 8 (one Python call per 8 datagrams).
    batch = int(mode.rsplit("-m", 1)[1]) if "-m" in mode else 0
    # "py-errq-into": send_reap_into, completions written into one reused int64 array.
    into = mode.endswith("-into")
    out = array.array("q", bytes(8 * (1 + 3 * 64)))
    bufs = [payload] * batch
    uds = list(range(batch))
    if mode != "py-send":
        backend = (lowcopy.ZcBackend.ERRQUEUE if mode.startswith("py-errq")
                   else lowcopy.ZcBackend.IO_URING)
        tx = lowcopy.ZeroCopySender(s, backend)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    stop = t0 + secs
    i = 0
    while True:
        if i & 63 == 0 and time.perf_counter() >= stop:
            break
        i += 1
        try:
            if tx is None:
                n = s.send(payload, dontwait)
            elif batch:
                k, n, done = tx.send_many(bufs, uds, dontwait)
                completions += len(done)
                for c in done:
                    copied += c.copied
                sends += k
                nbytes += n
                if k < batch:  # stopped at EAGAIN: wait for room, as after a raise
                    pl.poll(500)
                continue
            elif into:
                n = tx.send_reap_into(payload, sends, out, dontwait)
                k = out[0]
                completions += k
                for j in range(k):
                    copied += out[3 + 3 * j] & 1
            else:
                n, done = tx.send_reap(payload, sends, dontwait)
                completions += len(done)
                for c in done:
                    copied += c.copied
        except BlockingIOError:
            pl.poll(500)
            continue
        sends += 1
        nbytes += n
    t_loop = time.perf_counter() - t0
    if tx is not None:
        end = time.monotonic() + 0.5
        while tx.inflight and time.monotonic() < end:
            try:
                tx.wait(0.5)
            except TimeoutError:
                break
            for c in tx.reap():
                completions += 1
                copied += c.copied
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_user = r1.ru_utime - r0.ru_utime
    cpu_sys = r1.ru_stime - r0.ru_stime
    cpu = cpu_user + cpu_sys
    ok = tx is None or completions == sends
    if tx is not None:
        tx.close()
    print(f"py tx mode={mode} sends={sends} bytes={nbytes} completions={completions} "
          f"copied={copied} secs={t_loop:.3f} cpu={cpu:.4f} cpu_user={cpu_user:.4f} "
          f"cpu_sys={cpu_sys:.4f} "
          f"mb_per_cpu_s={nbytes / 1e6 / cpu:.1f} mb_s={nbytes / 1e6 / t_loop:.1f} ok={int(ok)}")


class Namespaces:
    """The tx-only path of scripts/zc_bench.sh: ns A sends UDP to 192.168.2.2 through ns B,
    which forwards out of ifb0, an ifb device that drops every packet; 192.168.2.2 is ns C's
    (an unconnected ifb), so nothing is ever addressed outside these namespaces."""

    def __init__(self) -> None:
        tag = f"lcpyb-{os.getpid()}"
        self.a, self.b, self.c = f"{tag}-a", f"{tag}-b", f"{tag}-c"

    def ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, stderr=subprocess.DEVNULL)

    def __enter__(self) -> Namespaces:
        try:
            for ns in (self.a, self.b, self.c):
                self.ip("netns", "add", ns)
                self.ip("-n", ns, "link", "set", "lo", "up")
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                                "net.core.optmem_max=1000000"], check=True)
            self.ip("link", "add", "veth0", "mtu", "65535", "netns", self.a, "type", "veth",
                    "peer", "name", "veth0", "mtu", "65535", "netns", self.b)
            self.ip("-n", self.a, "link", "set", "veth0", "up")
            self.ip("-n", self.b, "link", "set", "veth0", "up")
            self.ip("-n", self.a, "addr", "add", "192.168.1.1/24", "dev", "veth0")
            self.ip("-n", self.b, "addr", "add", "192.168.1.2/24", "dev", "veth0")
            self.ip("-n", self.a, "route", "add", "default", "via", "192.168.1.2", "dev", "veth0")
            self.ip("link", "add", "ifb0", "mtu", "65535", "netns", self.b, "type", "ifb")
            self.ip("link", "add", "ifb1", "netns", self.c, "type", "ifb")
            self.ip("-n", self.c, "link", "set", "ifb1", "up")
            self.ip("-n", self.c, "addr", "add", "192.168.2.2/24", "dev", "ifb1")
            self.ip("-n", self.b, "link", "set", "ifb0", "up")
            self.ip("-n", self.b, "addr", "add", "192.168.2.1/24", "dev", "ifb0")
            self.ip("-n", self.b, "route", "add", "default", "via", "192.168.2.2", "dev", "ifb0")
            subprocess.run(["ip", "netns", "exec", self.b, "sysctl", "-qw",
                            "net.ipv4.ip_forward=1"], check=True)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for ns in (self.a, self.b, self.c):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def kv(line: str, key: str) -> str:
    m = re.search(rf" {key}=(\S+)", line)
    return m.group(1) if m else ""


def tx_table(zc_bench: str, secs: float, repeat: int) -> None:
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("\nzerocopy tx-only table skipped: needs root and ip(8)")
        return
    if not os.access(zc_bench, os.X_OK):
        print(f"\nzerocopy tx-only table skipped: no {zc_bench} (make examples)")
        return
    modes = [("c", "copy"), ("c", "lc-errq"), ("c", "lc-uring"),
             ("py", "py-send"), ("py", "py-errq"), ("py", "py-uring"),
             ("py", "py-errq-into"), ("py", "py-uring-into"),
             ("py", "py-errq-m8"), ("py", "py-errq-m32"), ("py", "py-uring-m32")]
    runs: dict[str, list[dict[str, float]]] = {m: [] for _, m in modes}
    port = 30000 + os.getpid() % 20000
    with Namespaces() as ns:
        for r in range(repeat):
            for kind, mode in modes:
                port += 1
                if kind == "c":
                    cmd = [zc_bench, "-4", "-t", "udp", "-p", str(port), "-T", str(secs),
                           "-D", "192.168.2.2", "-m", mode, "-L", "tx-only", "-P"]
                else:
                    cmd = [sys.executable, os.path.abspath(__file__), "--tx-child", mode,
                           "--port", str(port), "--seconds", str(secs)]
                out = subprocess.run(["ip", "netns", "exec", ns.a, *cmd], capture_output=True,
                                     text=True, timeout=60 + secs)
                line = next((ln for ln in out.stdout.splitlines() if " tx " in ln), "")
                if not line or kv(line, "ok") != "1":
                    print(f"  {mode}: run failed: {out.stdout.strip()} {out.stderr.strip()}")
                    continue
                runs[mode].append({
                    "mb_cpu": float(kv(line, "mb_per_cpu_s")),
                    "mb_s": float(kv(line, "mb_s")),
                    "sends": float(kv(line, "sends")),
                    "compl": float(kv(line, "completions") or 0),
                    "copied": float(kv(line, "copied") or 0),
                    "user": float(kv(line, "cpu_user") or 0),
                    "sys": float(kv(line, "cpu_sys") or 0),
                    "round": float(r),
                })
    print(f"\nZerocopy send, tx-only path (UDP v4 out of a dropping ifb, {SIZE}-byte datagrams, "
          f"app loop, {secs} s per run, median of {repeat}); MB per CPU-second of the sender; "
          "its user and system CPU per send in us")
    print(f"  {'who':6} {'mode':12} {'MB/CPUs':>8} {'MB/s':>7} {'sends':>8} {'copied':>7} "
          f"{'user us':>7} {'sys us':>7} {'x C lc-errq':>11} {'x py send':>9}")
    med = {m: statistics.median([r["mb_cpu"] for r in v]) for m, v in runs.items() if v}
    for kind, mode in modes:
        v = runs[mode]
        if not v:
            continue
        row = sorted(v, key=lambda x: x["mb_cpu"])[len(v) // 2]
        cop = f"{100 * row['copied'] / row['compl']:.0f}%" if row["compl"] > 0 else "-"
        xc = f"{med[mode] / med['lc-errq']:.2f}" if "lc-errq" in med else "-"
        xp = f"{med[mode] / med['py-send']:.2f}" if "py-send" in med else "-"
        us = 1e6 / row["sends"] if row["sends"] else 0.0
        print(f"  {kind:6} {mode:12} {row['mb_cpu']:8.0f} {row['mb_s']:7.0f} {row['sends']:8.0f} "
              f"{cop:>7} {row['user'] * us:7.2f} {row['sys'] * us:7.2f} {xc:>11} {xp:>9}")
    for py, c, goal in (("py-errq", "py-send", 1.0), ("py-uring", "py-send", 1.0),
                        ("py-errq-into", "py-send", 1.0), ("py-uring-into", "py-send", 1.0)):
        if py in med and c in med:
            cr = {v["round"]: v["mb_cpu"] for v in runs[c]}
            per = sorted(v["mb_cpu"] / cr[v["round"]] for v in runs[py] if v["round"] in cr)
            x = statistics.median(per) if per else med[py] / med[c]
            rng = f", per round {per[0]:.2f}-{per[-1]:.2f}" if per else ""
            print(f"  {py} = {x:.2f}x sock.send{rng} (goal >= {goal}: {'yes' if x >= goal else 'NO'})")
    for py, c in (("py-errq", "lc-errq"), ("py-uring", "lc-uring"), ("py-errq-into", "lc-errq"),
                  ("py-uring-into", "lc-uring"), ("py-errq-m8", "lc-errq"),
                  ("py-errq-m32", "lc-errq"), ("py-uring-m32", "lc-uring")):
        if py in med and c in med:
            x = med[py] / med[c]
            # The noise: the ratio in each round (C and Python alternate within a round).
            cr = {v["round"]: v["mb_cpu"] for v in runs[c]}
            per = sorted(v["mb_cpu"] / cr[v["round"]] for v in runs[py] if v["round"] in cr)
            rng = f", per round {per[0]:.2f}-{per[-1]:.2f}" if per else ""
            goal = 0.95 if "-m" not in py else 0.9
            print(f"  {py} = {x:.2f}x the C library's {c}{rng} (goal >= {goal}: "
                  f"{'yes' if x >= goal else 'NO'})")


# ---------------------------------------------------------------- table 3: loopback TCP

SINK = """
import socket, sys
ls = socket.create_server(("127.0.0.1", 0))
print(ls.getsockname()[1], flush=True)
while True:
    c, _ = ls.accept()
    while c.recv(1 << 20):
        pass
    c.close()
"""


def loop_run(port: int, mode: str, secs: float) -> float:
    """One run: 64 KiB blocking sends over loopback TCP to the sink for `secs`; MB per
    CPU-second of this process (the sink reads in a process of its own)."""
    s = socket.create_connection(("127.0.0.1", port))
    size = 65536
    bufs = [bytes([i]) * size for i in range(16)]
    out = array.array("q", bytes(8 * (1 + 3 * 16)))
    tx = None
    if mode != "sock.send":
        tx = lowcopy.ZeroCopySender(s, lowcopy.ZcBackend.AUTO, adaptive=True)
    free = list(range(16))
    nbytes = 0
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    stop = time.perf_counter() + secs
    i = 0
    while True:
        if i & 15 == 0 and time.perf_counter() >= stop:
            break
        i += 1
        if tx is None:
            nbytes += s.send(bufs[i & 15])
            continue
        if not free:
            tx.wait(1.0)
            if mode == "AUTO adaptive send_reap_into":
                while tx.reap_into(out):
                    free.extend(out[1 + 3 * j] for j in range(out[0]))
            else:
                free.extend(c.user_data for c in tx.reap())
            continue
        b = free.pop()
        if mode == "AUTO adaptive send_reap_into":
            nbytes += tx.send_reap_into(bufs[b], b, out)
            free.extend(out[1 + 3 * j] for j in range(out[0]))
        else:
            n, done = tx.send_reap(bufs[b], b)
            nbytes += n
            free.extend(c.user_data for c in done)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if tx is not None:
        tx.close()
    s.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return nbytes / 1e6 / cpu


def loopback_table(secs: float, repeat: int) -> None:
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        modes = ["sock.send", "AUTO adaptive send_reap_into", "AUTO adaptive send_reap"]
        runs: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(repeat):
            for m in modes:
                runs[m].append(loop_run(port, m, secs))
    finally:
        sink.kill()
        sink.wait()
    print(f"\nLoopback TCP, 64 KiB blocking sends to a reading process ({secs} s per run, "
          f"{repeat} rounds): MB per CPU-second of the sender; the kernel copies every send")
    for m in modes:
        v = sorted(runs[m])
        print(f"  {m:30} {statistics.median(v):8.0f}  (rounds {v[0]:.0f}..{v[-1]:.0f})")
    for m in modes[1:]:
        per = sorted(a / b for a, b in zip(runs[m], runs["sock.send"]))
        x = statistics.median(per)
        print(f"  {m} = {x:.2f}x sock.send (rounds {per[0]:.2f}-{per[-1]:.2f}; goal >= 0.95: "
              f"{'yes' if x >= 0.95 else 'NO'})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--zc-bench", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin", "zc_bench"))
    ap.add_argument("--only", choices=["peek", "tx", "loopback"])
    ap.add_argument("--tx-child")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    if a.tx_child:
        tx_child(a.tx_child, "192.168.2.2", a.port, a.seconds)
        return
    if a.only in (None, "peek"):
        peek_table()
    if a.only in (None, "loopback"):
        loopback_table(a.seconds, a.repeat)
    if a.only in (None, "tx"):
        tx_table(os.path.normpath(a.zc_bench), a.seconds, a.repeat)


if __name__ == "__main__":
    main()
