#!/usr/bin/env python3
"""Carries the core crate's documented behaviour into the adapters' documentation.

Each behavioural sentence (errors, ownership, lifetime, what the kernel does) is written once,
in a doc comment of the core crate (core/src), between two plain comment lines:

    /// Drops up to `n` bytes from the head of the receive queue.
    // doc-source: consume.kernel
    /// TCP and MPTCP use `recv(NULL, n, MSG_TRUNC)`, which copies nothing; ...
    // doc-end

Plain `//` lines are invisible to rustdoc, cbindgen, napi and pyo3. An adapter (capi/src,
node/src, python/src) carries the text in a block of the same form,

    // doc-copy: consume.kernel
    /// (written by this script)
    // doc-end

whose `///` lines this script writes from the source: re-indented, reflowed to 100 columns,
intra-doc links reduced to their text, and rendered for the adapter's language (capi: an errno
`EAGAIN` is returned as `-EAGAIN`; Rust item names map through RENAMES below). cbindgen then
copies capi's text into include/lowcopy.h, napi build node's into node/index.d.ts, pyo3
python's into the docstrings.

    scripts/docgen.py            rewrite every doc-copy block from core
    scripts/docgen.py --check    exit 1 if any block is stale or hand-edited, names an unknown
                                 source, or a source is carried by no adapter
    scripts/docgen.py --stats    list the sources, their sentences and where they are carried

Standard library only (runs on the CI machine's python3 before anything is installed).
"""

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ["core/src"]
# Adapter directory -> language of its documentation.
COPY_DIRS = {"capi/src": "c", "node/src": "node", "python/src": "python"}
# Python sources whose docstrings carry core's text: a `# doc-copy: ID` line right before a
# docstring (an enum member's, for example) makes the whole docstring the copy.
PY_COPY_DIRS = {"python/python": "python"}
PY_COPY_RE = re.compile(r"^(\s*)# doc-copy: ([a-z0-9_.]+)\s*$")
WIDTH = 100

SOURCE_RE = re.compile(r"^(\s*)// doc-source: ([a-z0-9_.]+)\s*$")
COPY_RE = re.compile(r"^(\s*)// doc-copy: ([a-z0-9_.]+)\s*$")
END_RE = re.compile(r"^\s*// doc-end\s*$")
DOC_RE = re.compile(r"^\s*//[/!]( ?)(.*)$")  # `//!`: a source in module docs

# Rust item names a shared sentence may use, as each adapter's users know them. A name with
# `::` that is not here fails the check for C, Node and Python (their users cannot follow it).
RENAMES = {
    # Parameter names: the count of bytes is `n` in C, Rust and Node, `nbytes` in Python.
    "n": {"c": "`n`", "node": "`n`", "python": "`nbytes`"},
    "user_data": {"c": "`user_data`", "node": "`userData`", "python": "`user_data`"},
    "Peeker::with_kind": {
        "c": "`lowcopy_peeker_init` with a `domain`",
        "node": "`new Peeker` with a `kind`",
        "python": "`Peeker` with a `family`",
    },
    "Peeker::new": {
        "c": "`lowcopy_peeker_new`",
        "node": "`new Peeker` without a `kind`",
        "python": "`Peeker` without a `family`",
    },
    "Peeker::peek_at": {
        "c": "`lowcopy_peeker_peek_at`",
        "node": "`Peeker.peekAtInto`",
        "python": "`Peeker.peek_at_into`",
    },
    "ZcOptions::adaptive": {
        "c": "`LOWCOPY_ZC_ADAPTIVE`",
        "node": "the `adaptive` option",
        "python": "the `adaptive` option",
    },
    "PeekStats::bytes_skipped_copied": {
        "c": "`lowcopy_peek_stats.bytes_skipped_copied`",
        "node": "`PeekStats.bytesSkippedCopied`",
        "python": "`PeekStats.bytes_skipped_copied`",
    },
    "Flags::DONTWAIT": {"c": "`MSG_DONTWAIT`", "node": "`dontWait`", "python": "`MSG_DONTWAIT`"},
    "Peeker::consume": {
        "c": "`lowcopy_peeker_consume`",
        "node": "`Peeker.consume`",
        "python": "`Peeker.consume`",
    },
    "PeekStats::fds_closed": {
        "c": "`lowcopy_peek_stats.fds_closed`",
        "node": "`PeekStats.fdsClosed`",
        "python": "`PeekStats.fds_closed`",
    },
    "Peeker::note_consumed": {
        "c": "`lowcopy_peeker_note_consumed`",
        "node": "`Peeker.noteConsumed`",
        "python": "`Peeker.note_consumed`",
    },
    "Peeker::seek": {
        "c": "`lowcopy_peeker_seek`",
        "node": "`Peeker.seek`",
        "python": "`Peeker.seek`",
    },
    "PeekMode::Offset": {
        "c": "`LOWCOPY_PEEK_OFFSET`",
        "node": "`'offset'`",
        "python": "`PeekMode.OFFSET`",
    },
    "PeekMode::Discard": {
        "c": "`LOWCOPY_PEEK_DISCARD`",
        "node": "`'discard'`",
        "python": "`PeekMode.DISCARD`",
    },
    "PeekMode::OffsetOrDiscard": {
        "c": "`LOWCOPY_PEEK_OFFSET_OR_DISCARD`",
        "node": "`'offset_or_discard'`",
        "python": "`PeekMode.OFFSET_OR_DISCARD`",
    },
    "PeekMode::Auto": {"c": "`LOWCOPY_PEEK_AUTO`", "node": "`'auto'`", "python": "`PeekMode.AUTO`"},
    "set_rcvlowat": {
        "c": "`lowcopy_set_rcvlowat`",
        "node": "`setRcvlowat`",
        "python": "`set_rcvlowat`",
    },
    "crate::set_rcvlowat": {
        "c": "`lowcopy_set_rcvlowat`",
        "node": "`setRcvlowat`",
        "python": "`set_rcvlowat`",
    },
    "crate::recv_atleast": {
        "c": "`lowcopy_recv_atleast`",
        "node": "`recvAtLeast`",
        "python": "`recv_atleast`",
    },
    "Flags::MORE": {"c": "`MSG_MORE`", "node": "`more`", "python": "`MSG_MORE`"},
    "AUTO_DISCARD_MAX": {"c": "4096", "node": "4096", "python": "4096"},
    "Urgent::Caller": {
        "c": "`LOWCOPY_PEEK_URGENT_CALLER`",
        "node": "`urgent: 'caller'`",
        "python": "`Urgent.CALLER`",
    },
}

ERRNO_RE = re.compile(r"`(E[A-Z0-9]{2,})`")


class DocError(Exception):
    pass


def rust_files(rel_dir):
    return sorted((ROOT / rel_dir).rglob("*.rs"))


def read_sources():
    """{id: (path, line, [markdown lines])} from every doc-source block of core."""
    sources = {}
    for d in SOURCE_DIRS:
        for path in rust_files(d):
            lines = path.read_text().splitlines()
            i = 0
            while i < len(lines):
                m = SOURCE_RE.match(lines[i])
                if not m:
                    if COPY_RE.match(lines[i]):
                        raise DocError(f"{rel(path)}:{i + 1}: doc-copy in core (core is the source)")
                    i += 1
                    continue
                sid, start = m.group(2), i
                body, i = block_body(path, lines, i + 1)
                if sid in sources:
                    raise DocError(f"{rel(path)}:{start + 1}: doc-source {sid} defined twice")
                if not any(s.strip() for s in body):
                    raise DocError(f"{rel(path)}:{start + 1}: doc-source {sid} is empty")
                sources[sid] = (path, start + 1, body)
    return sources


def block_body(path, lines, i):
    """The `///` text of a block from line i to its `// doc-end`, and the index after that."""
    body = []
    while i < len(lines):
        if END_RE.match(lines[i]):
            return body, i + 1
        m = DOC_RE.match(lines[i])
        if not m:
            raise DocError(f"{rel(path)}:{i + 1}: a doc block holds only `///` lines: {lines[i]!r}")
        body.append(m.group(2))
        i += 1
    raise DocError(f"{rel(path)}: a doc block has no `// doc-end`")


def rel(path):
    return str(path.relative_to(ROOT))


def delink(text):
    """Rustdoc links reduced to their text: [`a`] and [`a`](b) -> `a`; [t](b) -> t."""
    text = re.sub(r"\[(`[^`]+`)\](\([^)]*\)|\[[^\]]*\])?", r"\1", text)
    return re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)


def render(body, lang, sid):
    text = delink("\n".join(body))

    def rename(m):
        name = m.group(1)
        short = name.split("(")[0]
        if short in RENAMES:
            return RENAMES[short][lang]
        if "::" in short:
            raise DocError(f"doc-source {sid} names the Rust item `{name}`: add it to RENAMES "
                           f"in scripts/docgen.py or phrase the sentence without it")
        return m.group(0)

    text = re.sub(r"`([^`]+)`", rename, text)
    if lang == "c":
        text = ERRNO_RE.sub(r"`-\1`", text)
    return text.split("\n")


def reflow(lines, indent):
    """Paragraphs (and `- ` list items) refilled to WIDTH at this indent, as `///` lines."""
    prefix = indent + "/// "
    width = WIDTH - len(prefix)
    out, para = [], []

    def flush():
        if not para:
            return
        first = para[0]
        hang = "  " if first.startswith("- ") else ""
        words = " ".join(p.strip() for p in para)
        wrapped = textwrap.wrap(words, width=width, subsequent_indent=hang,
                                break_long_words=False, break_on_hyphens=False)
        out.extend(prefix + w for w in wrapped)
        para.clear()

    for line in lines:
        if not line.strip():
            flush()
            out.append(indent + "///")
        elif line.startswith("- "):
            flush()
            para.append(line)
        else:
            para.append(line)
    flush()
    return out


def copy_text(where, sid, lang, have, layout, ctx):
    """The lines a copy of source `sid` should hold (`have` if it cannot be rendered); notes
    the copy as used, and as a problem when checking and it differs."""
    sources, write, problems, used = ctx
    used[sid].append(f"{where} ({lang})")
    try:
        want = layout(render(sources[sid][2], lang, sid))
    except DocError as e:
        problems.append(f"{where}: {e}")
        return have
    if have != want and not write:
        problems.append(f"{where}: doc-copy {sid} differs from core ({rel(sources[sid][0])}:"
                        f"{sources[sid][1]}): run scripts/docgen.py")
    return want


def finish(path, out, changed, write):
    if changed and write:
        path.write_text("\n".join(out) + "\n")
        print(f"docgen: wrote {rel(path)}")


def process(sources, write):
    """Rewrites (or checks) every doc-copy block; returns (problems, {id: [where]})."""
    problems, used = [], {sid: [] for sid in sources}
    ctx = (sources, write, problems, used)
    for d, lang in COPY_DIRS.items():
        for path in rust_files(d):
            lines = path.read_text().splitlines()
            out, i, changed = [], 0, False
            while i < len(lines):
                line = lines[i]
                if SOURCE_RE.match(line):
                    problems.append(f"{rel(path)}:{i + 1}: doc-source outside core")
                m = COPY_RE.match(line)
                if not m:
                    out.append(line)
                    i += 1
                    continue
                indent, sid = m.group(1), m.group(2)
                out.append(line)
                try:
                    body, after = block_body(path, lines, i + 1)
                except DocError as e:
                    problems.append(str(e))
                    out.extend(lines[i + 1:])
                    break
                if sid not in sources:
                    problems.append(f"{rel(path)}:{i + 1}: doc-copy of unknown source {sid}")
                    out.extend(lines[i + 1:after])
                    i = after
                    continue
                want = copy_text(f"{rel(path)}:{i + 1}", sid, lang, lines[i + 1:after - 1],
                                 lambda text, ind=indent: reflow(text, ind), ctx)
                changed |= want != lines[i + 1:after - 1]
                out.extend(want)
                out.append(lines[after - 1])
                i = after
            finish(path, out, changed, write)
    for d, lang in PY_COPY_DIRS.items():
        for path in sorted((ROOT / d).rglob("*.py*")):
            if path.suffix not in (".py", ".pyi"):
                continue
            process_py(path, lang, ctx)
    for sid, where in used.items():
        if not where:
            p, n, _ = sources[sid]
            problems.append(f"{rel(p)}:{n}: doc-source {sid} is carried by no adapter")
    return problems, used


def docstring(lines, indent):
    """Rendered markdown as the lines of a reST docstring at this indent (``code`` spans)."""
    text = "\n".join(lines)
    text = re.sub(r"`([^`]+)`", r"``\1``", text)
    text = text[:1].upper() + text[1:]  # a source may continue a sentence begun outside it
    width = WIDTH - 3  # room for the closing quotes
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    out = []
    for k, para in enumerate(paras):
        words = " ".join(w.strip() for w in para.split("\n"))
        first = indent + ('"""' if k == 0 else "")
        wrapped = textwrap.wrap(words, width=width, initial_indent=first, subsequent_indent=indent,
                                break_long_words=False, break_on_hyphens=False)
        if k:
            out.append("")
        out.extend(wrapped)
    out[-1] += '"""'
    return out


def process_py(path, lang, ctx):
    """Rewrites (or checks) the docstring after each `# doc-copy: ID` line of a Python file."""
    sources, problems = ctx[0], ctx[2]
    lines = path.read_text().splitlines()
    out, i, changed = [], 0, False
    while i < len(lines):
        m = PY_COPY_RE.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        indent, sid = m.group(1), m.group(2)
        where = f"{rel(path)}:{i}"
        if i >= len(lines) or not lines[i].strip().startswith('"""'):
            problems.append(f"{where}: doc-copy {sid} is not followed by a docstring")
            continue
        end = i
        while end < len(lines) and not (lines[end].rstrip().endswith('"""')
                                        and (end > i or len(lines[end].strip()) > 3)):
            end += 1
        have = lines[i:end + 1]
        if sid not in sources:
            problems.append(f"{where}: doc-copy of unknown source {sid}")
            out.extend(have)
            i = end + 1
            continue
        want = copy_text(where, sid, lang, have, lambda text: docstring(text, indent), ctx)
        changed |= want != have
        out.extend(want)
        i = end + 1
    finish(path, out, changed, ctx[1])


def sentences(body):
    text = " ".join(s.strip() for s in body if s.strip())
    # A sentence ends at . ! ? followed by a space and a capital, a backtick or a paren.
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", text) if s]


def main(argv):
    mode = argv[1] if len(argv) > 1 else "--write"
    if mode not in ("--write", "--check", "--stats"):
        print(__doc__)
        return 2
    try:
        sources = read_sources()
    except DocError as e:
        print(f"docgen: {e}")
        return 1
    problems, used = process(sources, write=(mode == "--write"))
    if mode == "--stats":
        total = 0
        for sid, (p, n, body) in sorted(sources.items()):
            k = len(sentences(body))
            total += k
            langs = sorted({w.rsplit("(", 1)[1].rstrip(")") for w in used[sid]})
            print(f"{sid:40} {k:2} sentence(s)  {rel(p)}:{n}  -> {', '.join(langs) or '-'}")
        print(f"docgen: {len(sources)} sources, {total} sentences, "
              f"{sum(len(w) for w in used.values())} copies")
    for p in problems:
        print(f"docgen: {p}")
    if problems:
        return 1
    if mode == "--check":
        print(f"docgen: {len(sources)} shared doc sources, "
              f"{sum(len(w) for w in used.values())} adapter copies, all up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
