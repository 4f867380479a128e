#!/usr/bin/env python3
"""relay_ab.py - compare peek_relay binaries on the same traffic, counted by perf stat.

Usage: scripts/relay_ab.py [-r ROUNDS] [-n BYTES | -t SECONDS] [--no-probe] BIN... -- RELAY ARGS
  e.g. scripts/relay_ab.py -r 13 -n 1G old/peek_relay build/bin/peek_relay -- --copy

Each round runs iperf3 -P 2 through a fresh relay of every binary (order rotated per round, so
that drift on a shared machine hits all alike), the relay under `perf stat` (software events
and syscall tracepoints: a VM may have no hardware counters). Before iperf3, one bare
connection goes through the relay, as scripts/demo.sh's wait_listening makes (the allocator's
state then differs from a fresh start; --no-probe leaves it out). Prints, per GB relayed, the
median of every count over the rounds, the ratios to the first binary, and the task-clock
range. Needs perf, iperf3, root or perf_event_paranoid <= 1 for the tracepoints.
"""
import argparse, json, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

EVENTS = ("task-clock,page-faults,context-switches,cpu-migrations,raw_syscalls:sys_enter,"
          "syscalls:sys_enter_read,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,"
          "syscalls:sys_enter_epoll_wait")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(binary, relay_args, server_port, amount, probe, tmp):
    perf_out = os.path.join(tmp, "perf.csv")
    conns = 3 + (1 if probe else 0)   # iperf3 -P 2: a control and two data connections
    relay = subprocess.Popen(
        ["perf", "stat", "-x,", "-o", perf_out, "-e", EVENTS, "--", binary,
         "--listen", "127.0.0.1:0", "--connect", "127.0.0.1:%d" % server_port,
         "--max-conns", str(conns)] + relay_args,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in relay.stderr:
            if "listening on 127.0.0.1:" in line:
                port = int(line.split("listening on 127.0.0.1:")[1].split(",")[0])
                break
        if port is None:
            sys.exit("relay_ab: %s did not start" % binary)
        if probe:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            time.sleep(0.2)
        for _ in range(5):   # the server may still be closing the previous test ("busy")
            ip = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", "2", "-J"]
                                + amount, capture_output=True, text=True, timeout=120)
            if ip.returncode == 0:
                break
            time.sleep(1)
        else:
            sys.exit("relay_ab: iperf3 failed: %s" % ip.stdout[:300])
        out, err = relay.communicate(timeout=60)
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    if relay.returncode != 0:
        sys.exit("relay_ab: %s exited with %s: %s" % (binary, relay.returncode, err[-300:]))
    summary = [l for l in out.splitlines() if l.startswith("relay ")][-1]
    s = dict(kv.split("=", 1) for kv in summary.split()[1:])
    gb = int(s["bytes"]) / 1e9
    row = {"Gbit/s": json.loads(ip.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9,
           "cpu_s (getrusage)": float(s["cpu_s"]) / gb}
    with open(perf_out) as f:
        for line in f:
            fields = line.strip().split(",")
            if len(fields) > 3 and fields[0][:1].isdigit():
                row[fields[2]] = float(fields[0]) / gb
    return row


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("-r", "--rounds", type=int, default=9)
    ap.add_argument("-n", "--bytes", default=None)
    ap.add_argument("-t", "--seconds", default=None)
    ap.add_argument("--no-probe", action="store_true")
    ap.add_argument("bins", nargs="+")
    o = ap.parse_args(argv[:cut])
    relay_args = argv[cut + 1:]
    amount = ["-t", o.seconds] if o.seconds else ["-n", o.bytes or "1G"]
    bins = [os.path.abspath(b) for b in o.bins]
    names = [str(i) for i in range(len(bins))]
    # SIGTERM/SIGINT end the run through the finally blocks: nothing it started outlives it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("relay_ab: terminated"))
    tmp = tempfile.mkdtemp(prefix="relay_ab.")
    server_port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-p", str(server_port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    rows = {b: [] for b in bins}
    try:
        for r in range(o.rounds):
            for b in bins[r % len(bins):] + bins[:r % len(bins)]:
                rows[b].append(one_run(b, relay_args, server_port, amount, not o.no_probe, tmp))
            print("relay_ab: round %d of %d done" % (r + 1, o.rounds), file=sys.stderr)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("per GB relayed, median of %d alternated rounds (iperf3 %s -P 2; relay %s; "
          "load average %s)" % (o.rounds, " ".join(amount), " ".join(relay_args),
                                open("/proc/loadavg").read().split()[0]))
    for n, b in zip(names, bins):
        print("  %s = %s" % (n, b))
    keys = list(rows[bins[0]][0])
    print("%-26s" % "count" + "".join("%12s" % n for n in names)
          + "".join("%9s" % (n + "/0") for n in names[1:]))
    for k in keys:
        med = [statistics.median(x.get(k, 0.0) for x in rows[b]) for b in bins]
        print("%-26s" % k + "".join("%12.4g" % m for m in med)
              + "".join("%9.3f" % (m / med[0] if med[0] else float("nan")) for m in med[1:]))
    for n, b in zip(names, bins):
        v = sorted(x["task-clock"] for x in rows[b])
        print("task-clock ms/GB of %s: %.1f-%.1f" % (n, v[0], v[-1]))


if __name__ == "__main__":
    main()
