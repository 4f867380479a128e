#!/usr/bin/env python3
"""Resident memory of examples/c/peek_relay per pair in use and per pair freed.

Usage: scripts/relay_rss.py [-n CONNS] [-b BYTES] [--bin DIR] [MODE...]   (default: copy offset)

For each mode, one relay (its defaults: 4096 pairs, 128 KiB buffers) in front of a loopback
echo server; its VmRSS (/proc/PID/status) is read
  start   listening, no connection yet
  open    with CONNS connections open, each having sent BYTES and read them back
  one     after all but one closed (a load that never drops to zero: no pool trim)
  closed  after the last closed too (the relay idle again)
and printed with (open - start) / CONNS as KiB per pair in use and (one - start) / CONNS as
KiB per pair freed while others run.  The relay's own memory only: socket buffers are the
kernel's, not in VmRSS.
"""

import argparse
import os
import re
import resource
import selectors
import socket
import subprocess
import threading
import time


def vmrss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


def echo_server():
    """A loopback echo server in a thread; returns its port."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4096)
    ls.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ)

    def loop():
        while True:
            for key, _ in sel.select():
                s = key.fileobj
                if s is ls:
                    c, _ = ls.accept()
                    c.setblocking(True)
                    sel.register(c, selectors.EVENT_READ)
                    continue
                try:
                    data = s.recv(1 << 20)
                except OSError:
                    data = b""
                if data:
                    s.sendall(data)      # small enough to go out at once on loopback
                else:
                    sel.unregister(s)
                    s.close()

    threading.Thread(target=loop, daemon=True).start()
    return ls.getsockname()[1]


def settle(pid, seconds=0.5):
    time.sleep(seconds)
    return vmrss_kib(pid)


def measure(binary, mode, n, nbytes):
    port = echo_server()
    args = [binary, "--listen", "127.0.0.1:0", "--connect", "127.0.0.1:%d" % port]
    args += ["--copy"] if mode == "copy" else ["--peek", mode]
    relay = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        line = relay.stderr.readline()
        rport = int(re.search(r"listening on 127\.0\.0\.1:(\d+)", line).group(1))
        start = settle(relay.pid)
        payload = os.urandom(nbytes)
        conns = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", rport), timeout=10)
            s.sendall(payload)
            got = 0
            while got < nbytes:
                b = s.recv(1 << 20)
                if not b:
                    raise RuntimeError("relay closed a connection")
                got += len(b)
            conns.append(s)
        opened = settle(relay.pid)
        for s in conns[1:]:
            s.close()
        one = settle(relay.pid)
        conns[0].close()
        closed = settle(relay.pid)
    finally:
        relay.terminate()
        relay.wait(10)
    print("%-7s %6d conns x %7d B: VmRSS KiB start %6d, open %7d, one left %6d, closed %6d"
          " | KiB per pair in use %6.1f, per pair freed %5.2f"
          % (mode, n, nbytes, start, opened, one, closed, (opened - start) / n,
             (one - start) / n), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("-b", type=int, action="append")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("modes", nargs="*", default=["copy", "offset"])
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # 2 x CONNS descriptors here
    for mode in a.modes:
        for nbytes in a.b or [64, 256 * 1024]:
            measure(os.path.join(a.bin, "peek_relay"), mode, a.n, nbytes)


if __name__ == "__main__":
    main()
