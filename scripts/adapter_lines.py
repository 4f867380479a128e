#!/usr/bin/env python3
"""Adapter code per exported call, per binding (issue 19's measure).

Counting rule:

- lines: every line of every ``*.rs`` file under the binding's ``src/`` that is neither blank
  nor a comment (``//``, ``///``, ``//!`` lines and ``/* ... */`` blocks; a line with code
  before a trailing comment counts). Attribute lines (``#[napi(...)]``) and ``use`` lines count:
  they are code the adapter carries.
- exported calls: what a user of the language can call, counted from the source:
  - python/src: each ``#[pyfunction]``, and each ``fn`` of a ``#[pymethods]`` block (methods,
    ``#[new]``, ``#[getter]``/``#[setter]``, ``#[staticmethod]``/``#[classmethod]``, dunders);
  - node/src: each ``fn`` with a ``#[napi...]`` attribute (functions, constructors, methods,
    getters) and each ``pub fn`` of a ``#[napi]`` impl block without one (napi-rs exports
    those too);
  - capi/src: each ``#[no_mangle]`` ``extern "C" fn`` (capi is the reference, not a target).
- lines per call = lines / exported calls. The ``without testing`` column leaves out
  ``node/src/testing.rs`` (the addon's test and benchmark fixtures, exported as ``testing``)
  from both counts.

    python3 scripts/adapter_lines.py            # the table
    python3 scripts/adapter_lines.py --json     # the same figures as JSON
"""

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BINDINGS = [("python", "python/src"), ("node", "node/src"), ("capi", "capi/src")]


def code_lines(text):
    """The non-blank, non-comment lines of a Rust source, comments stripped."""
    out = []
    in_block = 0
    for raw in text.splitlines():
        line = raw
        s = ""
        i = 0
        in_str = False
        while i < len(line):
            if in_block:
                if line.startswith("*/", i):
                    in_block -= 1
                    i += 2
                elif line.startswith("/*", i):
                    in_block += 1
                    i += 2
                else:
                    i += 1
                continue
            c = line[i]
            if in_str:
                s += c
                if c == "\\":
                    s += line[i + 1 : i + 2]
                    i += 2
                    continue
                if c == '"':
                    in_str = False
                i += 1
                continue
            if c == '"':
                in_str = True
                s += c
                i += 1
                continue
            if line.startswith("//", i):
                break
            if line.startswith("/*", i):
                in_block += 1
                i += 2
                continue
            s += c
            i += 1
        if s.strip():
            out.append(s)
    return out


def exported(lang, lines):
    """The number of exported calls in one file's code lines."""
    n = 0
    depth = 0
    block = None  # (depth at which the exporting impl block's body sits)
    pending_attr = False  # an export attribute seen, waiting for its item
    impl_kind = None  # the kind of the next impl: 'napi' / 'pymethods'
    for line in lines:
        t = line.strip()
        if lang == "python":
            if t.startswith("#[pyfunction"):
                pending_attr = True
            elif t.startswith("#[pymethods"):
                impl_kind = "export-all"
        elif lang == "node":
            if re.match(r"#\[napi\b", t):
                if re.match(r"#\[napi(\s*\]|\s*\(\s*\)\s*\])", t) or "impl" in t:
                    impl_kind = "export-pub"  # may be `#[napi] impl`, or a plain fn
                pending_attr = True
        elif lang == "capi":
            if t.startswith("#[no_mangle]") or t.startswith("#[unsafe(no_mangle)]"):
                pending_attr = True
        is_fn = re.match(r"(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s", t)
        if t.startswith("impl") or re.match(r"unsafe\s+impl", t):
            if impl_kind and pending_attr and lang == "node":
                block = (depth + 1, "export-pub")
            elif impl_kind == "export-all":
                block = (depth + 1, "export-all")
            pending_attr = False
            impl_kind = None
        elif is_fn:
            in_block = block is not None and depth == block[0]
            if pending_attr:
                n += 1
            elif in_block and block[1] == "export-all":
                n += 1
            elif in_block and block[1] == "export-pub" and t.startswith("pub"):
                n += 1
            pending_attr = False
            impl_kind = None
        elif re.match(r"(pub(\([^)]*\))?\s+)?(struct|enum|mod|const|static|type|trait)\b", t):
            pending_attr = False
            impl_kind = None
        depth += line.count("{") - line.count("}")
        if block is not None and depth < block[0]:
            block = None
    return n


def measure():
    rows = []
    for lang, d in BINDINGS:
        tot_l = tot_c = 0
        ex_l = ex_c = 0
        files = {}
        for f in sorted((ROOT / d).rglob("*.rs")):
            lines = code_lines(f.read_text())
            c = exported(lang, lines)
            files[str(f.relative_to(ROOT))] = {"lines": len(lines), "calls": c}
            tot_l += len(lines)
            tot_c += c
            if not (lang == "node" and f.name == "testing.rs"):
                ex_l += len(lines)
                ex_c += c
        rows.append(
            {
                "binding": lang,
                "dir": d,
                "lines": tot_l,
                "calls": tot_c,
                "per_call": tot_l / tot_c if tot_c else 0.0,
                "lines_no_testing": ex_l,
                "calls_no_testing": ex_c,
                "per_call_no_testing": ex_l / ex_c if ex_c else 0.0,
                "files": files,
            }
        )
    return rows


def main():
    rows = measure()
    if "--json" in sys.argv:
        print(json.dumps(rows, indent=2))
        return
    verbose = "-v" in sys.argv
    hdr = f"{'binding':8} | {'dir':10} | {'lines':>6} | {'calls':>5} | {'lines/call':>10} | {'without testing':>15}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        wo = f"{r['lines_no_testing']}/{r['calls_no_testing']} = {r['per_call_no_testing']:.1f}"
        print(
            f"{r['binding']:8} | {r['dir']:10} | {r['lines']:6} | {r['calls']:5} | "
            f"{r['per_call']:10.1f} | {wo:>15}"
        )
        if verbose:
            for f, v in r["files"].items():
                print(f"    {f:32} {v['lines']:5} lines {v['calls']:4} calls")
    print("(goal, issue 19: at most 28 lines per exported call in python and node)")


if __name__ == "__main__":
    main()
