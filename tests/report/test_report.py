#!/usr/bin/env python3
"""make demo's report (scripts/report.py): every chart present and drawn from the data.

Runs the report on tests/report/fixtures/ (the demo programs' own output), then checks that
each chart of scripts/report.py's CHARTS is in the page, has one bar per data point, and
carries the figures of the tables it was drawn from; that the page needs no network; and that
a run without tables still writes every chart, each saying it has no data.
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import report  # noqa: E402

FIX = ROOT / "tests" / "report" / "fixtures"
# (chart, label, series, value): figures read off the fixture tables by hand.
EXPECT = [
    ("relay-throughput", "copy", "Gbit/s", 13.05),
    ("relay-cpu", "discard", "CPU s/GB", 6.035),
    ("peek-cost", "16 MiB", "lowcopy DISCARD", 1010151),
    ("peek-cost", "1 MiB", "raw SO_PEEK_OFF", 2403),
    ("zc-mb-per-cpu", "tx-only UDP v4: lc-errq", "MB/CPU-s", 11243),
    ("zc-scale-rss", "io_uring x 1,000", "RSS idle", 1778),
    ("rx-wakeups", "paced: lowat lowcopy", "wake/MB", 2.01),
    ("rx-wakeups", "saturated: zcrx lowcopy (zc+mss4108)", "wake/MB", 1.55),
    ("node-vs-c", "C lowcopy errqueue (lc-errq)", "MB/CPU-s", 9786),
]


def figures(page: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in
            re.finditer(r'<figure id="([^"]+)".*?</figure>', page, re.S)}


def main() -> int:
    fails = []
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "index.html"
        subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), str(FIX),
                        "--out", str(out)], check=True)
        page = out.read_text()
        figs = figures(page)
        for cid in report.CHARTS:
            f = figs.get(cid)
            if f is None:
                fails.append(f"{cid}: no chart")
                continue
            points = int(re.search(r'data-points="(\d+)"', f).group(1))
            bars = len(re.findall(r"<rect [^>]*data-value=", f))
            if points == 0 or bars != points:
                fails.append(f"{cid}: {points} data points, {bars} bars")
        for cid, label, series, value in EXPECT:
            f = figs.get(cid, "")
            got = re.search(rf'data-label="{re.escape(label)}" data-series="{re.escape(series)}" '
                            r'data-value="([^"]+)"', f)
            if not got or abs(float(got.group(1)) - value) > 1e-9 * max(1.0, value):
                fails.append(f"{cid}: {label} / {series}: want {value}, got "
                             f"{got.group(1) if got else 'no bar'}")
        # Self-contained: no script, stylesheet, image or font fetched from anywhere.
        if re.search(r"<(script|link|img|iframe)\b|url\(|@import|\bsrc=", page):
            fails.append("the page loads something")
        if [u for u in re.findall(r"https?://[^\"' )]+", page) if u != "http://www.w3.org/2000/svg"]:
            fails.append("the page names a network address")
        # docs/charts/ (embedded by docs/benchmarks.md) is what the script draws from the fixtures.
        charts = Path(d) / "charts"
        subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), str(FIX),
                        "--out", str(Path(d) / "c.html"), "--svg-dir", str(charts)],
                       check=True, capture_output=True)
        docs = ROOT / "docs" / "charts"
        for cid in report.CHARTS:
            want = (charts / f"{cid}.svg").read_text()
            have = (docs / f"{cid}.svg").read_text() if (docs / f"{cid}.svg").exists() else ""
            if want != have:
                fails.append(f"docs/charts/{cid}.svg: not what scripts/report.py draws from "
                             "tests/report/fixtures (rerun it with --svg-dir docs/charts)")
        bench = (ROOT / "docs" / "benchmarks.md").read_text()
        for cid in report.CHARTS:
            if f"(charts/{cid}.svg)" not in bench:
                fails.append(f"docs/benchmarks.md does not embed charts/{cid}.svg")
        # Without tables: every chart still there, each saying it has no data.
        empty = Path(d) / "empty"
        empty.mkdir()
        subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), str(empty)],
                       check=True, capture_output=True)
        e = figures((empty / "index.html").read_text())
        if sorted(e) != sorted(report.CHARTS) or any("no data" not in f for f in e.values()):
            fails.append("a run without tables does not list every chart as without data")
    for f in fails:
        print("FAIL", f)
    print(f"report: {len(report.CHARTS)} charts, {len(EXPECT)} figures checked, "
          f"{len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
