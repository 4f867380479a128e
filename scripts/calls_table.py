#!/usr/bin/env python3
"""docs/calls.md: every call in Rust, C, Python and Node side by side, checked against the code.

The table in docs/calls.md (between the ``<!-- calls: begin -->`` and ``<!-- calls: end -->``
lines) is written by hand, one row per call, its cells the call's names in backticks (several
in one cell when a language spells the call several ways, e.g. C's ``lowcopy_zc_send``,
``lowcopy_zc_sendv``). A language without the call says so in its cell: ``n/a: why``.

``--check`` (run by ``make check``) extracts the calls each language exports and fails unless
each one is in exactly one row of its language's column, every name in the table still exists,
and no row leaves a cell empty. So a call added in one language fails the check until its row
says what the other three languages do. The exports read:

- C: ``capi/abi/lowcopy.symbols`` (every exported symbol, without its version);
- Python: ``python/python/lowcopy/_lowcopy.pyi`` (stubtest holds it to the module): its public
  module functions as ``name``, constructors as ``Class()``, methods and properties as
  ``Class.name``, for the classes that have a method (the result and stats classes, whose
  members are all properties, are values, not calls);
- Node: ``node/index.d.ts`` (generated from the addon): its public functions (not the
  ``testing`` namespace), constructors as ``new Class()``, methods and getters as
  ``Class.name``;
- Rust: the Rust column is checked for existence only: ``Type::name`` or ``name`` needs a
  ``pub fn name`` (or ``pub struct``/``pub enum`` for a constructor ``Type::new``) in
  ``core/src``; the core's public items are not enumerated (many serve the adapters).

    python3 scripts/calls_table.py --check   # the check
    python3 scripts/calls_table.py --missing # the exports that no row lists yet
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "calls.md"
COLS = ["Rust", "C", "Python", "Node"]


def c_calls():
    names = set()
    for line in (ROOT / "capi/abi/lowcopy.symbols").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.split("@")[0])
    return names


def python_calls():
    text = (ROOT / "python/python/lowcopy/_lowcopy.pyi").read_text()
    names = set()
    cls = None
    members = {}
    prop = False
    for line in text.splitlines():
        m = re.match(r"class (\w+)", line)
        if m:
            cls = m.group(1)
            members[cls] = []
            continue
        m = re.match(r"def (\w+)", line)
        if m:
            cls = None
            if not m.group(1).startswith("_"):
                names.add(m.group(1))
            continue
        if cls is None:
            continue
        if re.match(r"    @property", line):
            prop = True
            continue
        m = re.match(r"    (?:async )?def (\w+)", line)
        if m:
            members[cls].append((m.group(1), prop))
            prop = False
    for cls, ms in members.items():
        if not any(not p for n, p in ms if n != "as_dict" and not n.startswith("_")):
            continue  # a value class: properties only
        for n, _ in ms:
            if n in ("__new__", "__init__"):
                names.add(f"{cls}()")
            elif not n.startswith("_"):
                names.add(f"{cls}.{n}")
    return names


def node_calls():
    text = (ROOT / "node/index.d.ts").read_text()
    names = set()
    cls = None
    for line in text.splitlines():
        m = re.match(r"export declare class (\w+)", line)
        if m:
            cls = m.group(1)
            continue
        if re.match(r"export declare namespace", line) or re.match(r"^}", line):
            cls = None
            continue
        m = re.match(r"export declare function (\w+)", line)
        if m:
            if not m.group(1).startswith("_"):
                names.add(m.group(1))
            continue
        if cls is None:
            continue
        if re.match(r"  constructor\(", line):
            names.add(f"new {cls}()")
            continue
        m = re.match(r"  (?:get |set )?([a-zA-Z]\w*)\(", line)
        if m:
            names.add(f"{cls}.{m.group(1)}")
    return names


def rust_exists(name, core_text):
    base = name.rstrip("()").split("::")[-1]
    if base == "new" or name.endswith("()"):
        return True
    return re.search(rf"pub(\([^)]*\))? (const )?(unsafe )?fn {re.escape(base)}\b", core_text) is not None


def parse_table():
    text = DOC.read_text()
    m = re.search(r"<!-- calls: begin -->\n(.*?)<!-- calls: end -->", text, re.S)
    if not m:
        raise SystemExit(f"{DOC}: no <!-- calls: begin --> ... <!-- calls: end --> table")
    rows = []
    header = None
    for n, line in enumerate(m.group(1).splitlines()):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|-: "):
            continue
        rows.append(dict(zip(header, cells)))
    for c in COLS:
        if header is None or c not in header:
            raise SystemExit(f"{DOC}: the table needs the columns {COLS}")
    return rows


def names_in(cell):
    return re.findall(r"`([^`]+)`", cell)


def check():
    rows = parse_table()
    core_text = "\n".join(p.read_text() for p in (ROOT / "core/src").rglob("*.rs"))
    have = {"C": c_calls(), "Python": python_calls(), "Node": node_calls()}
    errors = []
    seen = {c: {} for c in COLS}
    for i, r in enumerate(rows, 1):
        for c in COLS:
            cell = r.get(c, "")
            ns = names_in(cell)
            if not ns and not cell.startswith("n/a"):
                errors.append(f"row {i} ({r}): the {c} cell is empty (names in backticks, or 'n/a: why')")
            if cell.startswith("n/a") and len(cell) < 6:
                errors.append(f"row {i}: the {c} cell says n/a without why")
            if cell.startswith("n/a"):
                continue
            for n in ns:
                if n in seen[c]:
                    errors.append(f"{c} `{n}` is in rows {seen[c][n]} and {i}")
                seen[c][n] = i
                if c == "Rust":
                    if not rust_exists(n, core_text):
                        errors.append(f"row {i}: Rust `{n}`: no `pub fn` of that name in core/src")
                elif n not in have[c]:
                    errors.append(f"row {i}: {c} `{n}` is not exported (any more)")
    for c, names in have.items():
        for n in sorted(names - set(seen[c])):
            errors.append(f"{c} exports `{n}`, which no row of {DOC.relative_to(ROOT)} lists")
    return errors


def main():
    if "--missing" in sys.argv:
        rows = parse_table() if DOC.exists() else []
        listed = {c: {n for r in rows for n in names_in(r.get(c, ""))} for c in COLS}
        for c, names in (("C", c_calls()), ("Python", python_calls()), ("Node", node_calls())):
            for n in sorted(names - listed[c]):
                print(f"{c}\t{n}")
        return 0
    errors = check()
    for e in errors:
        print(f"calls_table: {e}", file=sys.stderr)
    if errors:
        print(f"calls_table: {len(errors)} problems in docs/calls.md (see scripts/calls_table.py)", file=sys.stderr)
        return 1
    print(f"calls_table: docs/calls.md lists every call of C, Python and Node ({len(parse_table())} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
