#!/usr/bin/env python3
"""Every fenced code block of README.md and docs/*.md, compiled or run (a suite of make test).

  ```c        compiled with cc -Wall -Wextra -Werror against include/ and build/lib, then run
  ```python   run with build/venv/bin/python (the venv python/run-tests.sh install makes)
  ```js       run with node, `require('lowcopy')` resolving to the package installed in
              examples/node (node/scripts/ci.sh build, then npm ci there)
  ```rust     doctests already (core/src/lib.rs includes README.md and docs/*.md): counted here
  ```sh ```text ```toml   commands and output, not programs: counted, never run

A block that is deliberately a fragment says so in its info string (```c fragment) or in an
HTML comment on the line before it (<!-- fragment -->); it is counted and reported, not run.
Each program runs in a scratch directory with a time limit and must exit 0.

  scripts/doc_examples.py [--lang c,python,js] [--list] [FILE...]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = {"c", "python", "js"}
DOCTEST = {"rust"}
NOT_CODE = {"sh", "text", "toml", "console"}
TIMEOUT = 60


def blocks(path: Path):
    """(line, lang, info, code, fragment) for each fenced block of the file."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang, info = m.group(1), m.group(2), m.group(3)
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        fragment = "fragment" in info.split() or prev.strip() == "<!-- fragment -->"
        start = i + 1
        i += 1
        body = []
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        yield start, lang, info, "\n".join(body) + "\n", fragment


def run(cmd: list[str], cwd: str, env: dict[str, str] | None = None) -> tuple[bool, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT} s"
    out = (p.stdout + p.stderr).strip()
    return p.returncode == 0, out if p.returncode == 0 else f"exit {p.returncode}\n{out}"


def run_c(code: str, d: str) -> tuple[bool, str]:
    src = os.path.join(d, "example.c")
    Path(src).write_text(code)
    lib = str(ROOT / "build" / "lib")
    ok, out = run(["cc", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{ROOT / 'include'}", src,
                   "-o", os.path.join(d, "example"), f"-L{lib}", "-llowcopy", "-lpthread",
                   f"-Wl,-rpath,{lib}"], d)
    if not ok:
        return False, "compile: " + out
    return run([os.path.join(d, "example")], d)


def run_python(code: str, d: str) -> tuple[bool, str]:
    src = os.path.join(d, "example.py")
    Path(src).write_text(code)
    return run([str(ROOT / "build" / "venv" / "bin" / "python"), src], d)


def run_js(code: str, d: str) -> tuple[bool, str]:
    src = os.path.join(d, "example.js")
    Path(src).write_text(code)
    env = dict(os.environ, NODE_PATH=str(ROOT / "examples" / "node" / "node_modules"))
    return run(["node", src], d, env)


RUNNERS = {"c": run_c, "python": run_python, "js": run_js}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", default="c,python,js", help="languages to run (c,python,js)")
    ap.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    langs = {x for x in a.lang.split(",") if x}
    if langs - RUN:
        ap.error(f"--lang: {sorted(langs - RUN)}: not one of {sorted(RUN)}")
    files = [Path(f) for f in a.files] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if langs & {"c"} and not a.list and not (ROOT / "build" / "lib" / "liblowcopy.so").exists():
        print("doc_examples: build/lib/liblowcopy.so missing: make lib first")
        return 1
    ran = failed = fragments = doctests = not_code = other_lang = 0
    bad: list[str] = []
    for f in files:
        rel = f.resolve().relative_to(ROOT)
        for line, lang, info, code, fragment in blocks(f):
            where = f"{rel}:{line}"
            if lang == "":
                bad.append(f"{where}: a block without a language (rustdoc would take it for Rust)")
                continue
            if lang in DOCTEST:
                doctests += 1
                continue
            if lang in NOT_CODE:
                not_code += 1
                continue
            if lang not in RUN:
                bad.append(f"{where}: ```{lang}: no runner for this language (mark it ```text?)")
                continue
            if fragment:
                fragments += 1
                print(f"fragment  {where} ({lang}): not run")
                continue
            if lang not in langs:
                other_lang += 1
                continue
            if a.list:
                print(f"block     {where} ({lang})")
                continue
            with tempfile.TemporaryDirectory(prefix="lowcopy-doc-") as d:
                ok, out = RUNNERS[lang](code, d)
            ran += 1
            if ok:
                print(f"ok        {where} ({lang})")
            else:
                failed += 1
                print(f"FAIL      {where} ({lang}): {out}")
    for b in bad:
        print(f"FAIL      {b}")
    print(f"doc examples: {ran} run, {failed} failed, {fragments} fragments skipped, "
          f"{doctests} rust blocks (doctests), {not_code} sh/text/toml blocks not run, "
          f"{other_lang} of other languages left to their tier")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
