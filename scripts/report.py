#!/usr/bin/env python3
"""make demo's report: build/report/index.html, self-contained (inline SVG, no network), with
charts drawn from the tables the demo's programs printed (captured by the Makefile's demo
target into DIR/*.txt):

  relay.txt       scripts/demo.sh           relay throughput and CPU per GB, per mode
  peek_sweep.txt  build/bin/peek_sweep      ns per 64 KiB peek against the offset
  zc_bench.txt    scripts/zc_bench.sh       zerocopy MB per CPU-second per path and mode
  zc_scale.txt    scripts/zc_scale.sh       RSS per idle sender at scale, per backend
  rx_bench.txt    build/bin/rx_bench        wakeups per MB per receive mode
  node_bench.txt  node/scripts/demo.sh      the Node package against C, tx-only MB per CPU-second

  scripts/report.py DIR [--out FILE] [--svg-dir DIR2]    (default DIR/index.html; --svg-dir
  also writes each chart as DIR2/<chart>.svg: docs/charts/ holds those of the recorded run in
  tests/report/fixtures/, embedded by docs/benchmarks.md)

Only the standard library. A table that is missing or unparsable gives a chart that says so
(and the exit status stays 0: the demo reports, it does not assert); tests/report/test_report.py
checks every chart is present and drawn from the data.
"""
from __future__ import annotations

import argparse
import html
import math
import re
import sys
from pathlib import Path

Bars = list[tuple[str, float]]


def read(d: Path, name: str) -> str:
    p = d / name
    return p.read_text(errors="replace") if p.exists() else ""


def relay(text: str) -> tuple[Bars, Bars]:
    """mode | peek | Gbit/s | CPU s/GB | ... (scripts/demo.sh's table)."""
    gbit, cpu = [], []
    for m in re.finditer(r"^(\w+)\s*\|\s*(\S+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+|-)\s*\|", text, re.M):
        label = m.group(1) if m.group(2) in ("-", m.group(1)) else f"{m.group(1)} ({m.group(2)})"
        gbit.append((label, float(m.group(3))))
        if m.group(4) != "-":
            cpu.append((label, float(m.group(4))))
    return gbit, cpu


def peek_sweep(text: str) -> dict[str, Bars]:
    """offset | raw SO_PEEK_OFF | lowcopy OFFSET | overhead | raw discard | lowcopy DISCARD |"""
    series: dict[str, Bars] = {"raw SO_PEEK_OFF": [], "lowcopy OFFSET": [], "raw discard": [],
                               "lowcopy DISCARD": []}
    row = re.compile(r"^\s*(\d+ [KMG]?i?B)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*\S+\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|",
                     re.M)
    for m in row.finditer(text):
        off = m.group(1)
        for name, v in zip(series, m.groups()[1:]):
            series[name].append((off, float(v)))
    return series


def zc_bench(text: str) -> Bars:
    """Sections '<path> <PROTO> IPv<n> (...)' and rows 'mode backend MB MB/s sends compl copied
    sys/s reap/s MB/CPUs ...' (scripts/zc_bench.sh)."""
    out: Bars = []
    cell = None
    row = re.compile(r"^(\S+)\s+(\S+)\s+\d+\s+\d+\s+\d+\s+\S+\s+\S+\s+[\d.]+\s+[\d.]+\s+(\d+)\s")
    for line in text.splitlines():
        h = re.match(r"^(\S+) (TCP|UDP) IPv(\d) \(", line)
        if h:
            cell = f"{h.group(1)} {h.group(2)} v{h.group(3)}"
            continue
        m = row.match(line)
        if cell and m and m.group(1) != "mode":
            out.append((f"{cell}: {m.group(1)}", float(m.group(3))))
    return out


def zc_scale(text: str) -> Bars:
    """'backend senders | RSS idle heap idle fds | ...' (scripts/zc_scale.sh)."""
    out: Bars = []
    for m in re.finditer(r"^(\S+)\s+(\d+)\s*\|\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*\|", text, re.M):
        out.append((f"{m.group(1)} x {int(m.group(2)):,}", float(m.group(3))))
    return out


def rx_bench(text: str) -> Bars:
    """build/bin/rx_bench's tables: a heading per sender ('saturated: ...', 'paced: ...'), then
    'mode  sender  MB  mapped%  us/MB  csw/MB  wake/MB  sysc/MB  Gbit/s  vs raw  verify'."""
    out: Bars = []
    part = ""
    row = re.compile(r"^(\S.*?)\s{2,}(copy|zc\S*)\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s")
    for line in text.splitlines():
        h = re.match(r"^(saturated|paced)\b", line)
        if h:
            part = h.group(1)
            continue
        m = row.match(line)
        if m and part:
            mode, sender = m.group(1).strip(), m.group(2)
            label = mode if sender == "copy" else f"{mode} ({sender})"
            out.append((f"{part}: {label}", float(m.group(3))))
    return out


def node_bench(text: str) -> Bars:
    """The tx-only table of examples/node/bench.js: 'mode | MB/s | MB/CPU-s | ...'."""
    out: Bars = []
    i = text.find("Throughput: UDP tx-only")
    if i < 0:
        return out
    for line in text[i:].splitlines()[1:]:
        if line.startswith("Throughput:") or (out and not line.strip()):
            break
        m = re.match(r"^(.+?)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", line)
        if m:
            out.append((m.group(1).strip(), float(m.group(3))))
    return out


def svg_bars(cid: str, title: str, unit: str, series: dict[str, Bars], log: bool = False) -> str:
    """A horizontal bar chart; several series are drawn as groups of bars per label."""
    labels: list[str] = []
    for bars in series.values():
        for lab, _ in bars:
            if lab not in labels:
                labels.append(lab)
    values = [v for bars in series.values() for _, v in bars]
    if not values:
        return (f'<figure id="{cid}" data-chart="{cid}" data-points="0"><figcaption>{html.escape(title)}'
                "</figcaption><p class=\"nodata\">no data: the table was not produced by this run"
                "</p></figure>")
    colours = ["#3366aa", "#dd7722", "#339955", "#aa3344", "#7755aa"]
    ns = len(series)
    bar_h, gap, left, width = 14, 8, 330, 420
    height = len(labels) * (ns * bar_h + gap) + 40 + 18 * ns
    vmax = max(values)
    lo = min(v for v in values if v > 0) if log else 0.0

    def scale(v: float) -> float:
        if v <= 0:
            return 0.0
        if log:
            a, b = math.log10(lo) - 0.3, math.log10(vmax)
            return width * (math.log10(v) - a) / (b - a) if b > a else width
        return width * v / vmax

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">']
    y = 10
    for i, lab in enumerate(labels):
        parts.append(f'<text x="{left - 6}" y="{y + ns * bar_h / 2 + 4}" text-anchor="end">'
                     f"{html.escape(lab)}</text>")
        for j, (name, bars) in enumerate(series.items()):
            v = dict(bars).get(lab)
            if v is None:
                continue
            w = max(scale(v), 1.0)
            parts.append(f'<rect x="{left}" y="{y + j * bar_h}" width="{w:.1f}" height="{bar_h - 2}" '
                         f'fill="{colours[j % len(colours)]}" data-label="{html.escape(lab)}" '
                         f'data-series="{html.escape(name)}" data-value="{v:.10g}"><title>'
                         f"{html.escape(lab)} {html.escape(name)}: {v:.10g} {html.escape(unit)}</title></rect>")
            parts.append(f'<text x="{left + w + 4}" y="{y + j * bar_h + bar_h - 4}">{v:.10g}</text>')
        y += ns * bar_h + gap
    if ns > 1:
        for j, name in enumerate(series):
            parts.append(f'<rect x="{left}" y="{y + 8 + 18 * j}" width="12" height="12" '
                         f'fill="{colours[j % len(colours)]}"/><text x="{left + 18}" y="{y + 18 + 18 * j}">'
                         f"{html.escape(name)}</text>")
    parts.append("</svg>")
    scale_note = ", log scale" if log else ""
    return (f'<figure id="{cid}" data-chart="{cid}" data-points="{len(values)}"><figcaption>'
            f"{html.escape(title)} ({html.escape(unit)}{scale_note})</figcaption>{''.join(parts)}</figure>")


def svgs(page: str) -> dict[str, str]:
    """Each chart's <svg> element, by chart id, standalone (white background, font set)."""
    out = {}
    for m in re.finditer(r'<figure id="([^"]+)"[^>]*><figcaption>.*?</figcaption>(<svg .*?</svg>)',
                         page, re.S):
        svg = m.group(2).replace(">", '><rect width="100%" height="100%" fill="white"/>', 1)
        out[m.group(1)] = svg.replace("<text ", '<text font-family="sans-serif" font-size="12" ')
    return out


CHARTS = ["relay-throughput", "relay-cpu", "peek-cost", "zc-mb-per-cpu", "zc-scale-rss",
          "rx-wakeups", "node-vs-c"]


def build(d: Path) -> str:
    gbit, cpu = relay(read(d, "relay.txt"))
    figs = [
        svg_bars("relay-throughput", "iperf3 through the relay, per mode", "Gbit/s", {"Gbit/s": gbit}),
        svg_bars("relay-cpu", "Relay CPU per GB relayed, per mode", "CPU s/GB", {"CPU s/GB": cpu}),
        svg_bars("peek-cost", "Cost of one 64 KiB peek against the bytes before the cursor", "ns",
                 peek_sweep(read(d, "peek_sweep.txt")), log=True),
        svg_bars("zc-mb-per-cpu", "Zerocopy send, MB per sender CPU-second, per path and mode",
                 "MB/CPU-s", {"MB/CPU-s": zc_bench(read(d, "zc_bench.txt"))}),
        svg_bars("zc-scale-rss", "Memory per idle zerocopy sender at scale", "bytes RSS",
                 {"RSS idle": zc_scale(read(d, "zc_scale.txt"))}),
        svg_bars("rx-wakeups", "Receive: wakeups per MB", "wake/MB",
                 {"wake/MB": rx_bench(read(d, "rx_bench.txt"))}),
        svg_bars("node-vs-c", "UDP tx-only: the Node package beside C", "MB/CPU-s",
                 {"MB/CPU-s": node_bench(read(d, "node_bench.txt"))}),
    ]
    style = ("body{font:14px sans-serif;margin:2em;max-width:900px}figure{margin:2em 0}"
             "figcaption{font-weight:bold;margin-bottom:.5em}svg text{font:12px sans-serif}"
             ".nodata{color:#a33}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>lowcopy demo report</title><style>{style}</style></head><body>"
            "<h1>lowcopy: make demo</h1><p>Every chart is drawn from the tables this run's "
            "programs printed (the .txt files beside this page). Speed is reported, never "
            "asserted; docs/benchmarks.md explains each table.</p>"
            + "\n".join(figs) + "</body></html>\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--svg-dir", type=Path)
    a = ap.parse_args()
    out = a.out or a.dir / "index.html"
    page = build(a.dir)
    out.write_text(page)
    if a.svg_dir:
        a.svg_dir.mkdir(parents=True, exist_ok=True)
        for cid, svg in svgs(page).items():
            (a.svg_dir / f"{cid}.svg").write_text(svg + "\n")
    drawn = len(re.findall(r'data-points="[1-9]', page))
    print(f"report: {out}: {drawn} of {len(CHARTS)} charts drawn from data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
