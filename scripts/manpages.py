#!/usr/bin/env python3
"""The C man pages, generated from include/lowcopy.h (its doc comments are the one source of
text; the header itself is generated from capi/src by `make header`):

  scripts/manpages.py OUTDIR      OUTDIR/man3/<function>.3 for every function the header
                                  declares, OUTDIR/man7/lowcopy.7 (the header's overview, the
                                  types, the constants and an index of the calls)
  scripts/manpages.py --check OUTDIR
                                  fails unless every exported lowcopy_* function
                                  (capi/abi/lowcopy.symbols) has its page in OUTDIR and every
                                  page is clean under `mandoc -Tlint`

man(7) roff. A doc comment's paragraphs become DESCRIPTION, except those that open with
"Errors:" (ERRORS), "Syscalls:" (SYSCALLS) and a "# Safety" heading (SAFETY); `code` is bold,
a lowcopy_* name it mentions is listed under SEE ALSO. The page's date is SOURCE_DATE_EPOCH's,
else the header's last commit's, else its mtime: the same tree gives the same pages.
"""
import datetime
import os
import re
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "include", "lowcopy.h")
SYMBOLS = os.path.join(ROOT, "capi", "abi", "lowcopy.symbols")


def version():
    text = open(os.path.join(ROOT, "Cargo.toml")).read()
    m = re.search(r'\[workspace\.package\][^\[]*?\nversion\s*=\s*"([^"]+)"', text)
    return m.group(1)


def page_date():
    if os.environ.get("SOURCE_DATE_EPOCH"):
        t = int(os.environ["SOURCE_DATE_EPOCH"])
    else:
        try:
            out = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%ct", "--", HEADER],
                                 capture_output=True, text=True, check=True).stdout.strip()
            t = int(out)
        except (OSError, subprocess.CalledProcessError, ValueError):
            t = int(os.stat(HEADER).st_mtime)
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d")


def doc_lines(block):
    """The text of a /** ... */ or /* ... */ comment, one string per line, stars stripped."""
    lines = []
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("/**"):
            line = line[3:]
        elif line.startswith("/*"):
            line = line[2:]
        if line.endswith("*/"):
            line = line[:-2]
        line = line.strip()
        if line.startswith("* ") or line == "*":
            line = line[2:]
        lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def parse(text):
    """(overview lines, [(name, prototype, doc lines)], [(name, doc, body)], [(name, value, doc)])"""
    overview = doc_lines(text[:text.index("*/") + 2])
    funcs, types, macros = [], [], []
    # A doc comment and the declaration after it.
    for m in re.finditer(r"(/\*\*(?:(?!\*/).)*?\*/)\s*\n((?:(?!/\*\*).)*?)(?=\n\s*\n|\n/\*\*|\Z)",
                         text, re.S):
        doc, decl = doc_lines(m.group(1)), m.group(2).strip()
        f = re.match(r"^[a-z_][\w\s\*]*?\b(lowcopy_\w+)\(.*?\);", decl, re.S)
        if f and m.start() > text.index('extern "C"'):
            funcs.append((f.group(1), " ".join(decl.split()).replace("( ", "(").replace(" )", ")"),
                          doc))
            continue
        d = re.match(r"^#define (LOWCOPY_\w+) (.+)$", decl)
        if d:
            macros.append((d.group(1), d.group(2), doc))
            continue
        t = re.match(r"^typedef struct (lowcopy_\w+)", decl)
        if t:
            body = re.sub(r"/\*\*(?:(?!\*/).)*\*/\s*", "", decl, flags=re.S)
            body = "\n".join(l for l in body.splitlines() if l.strip())
            types.append((t.group(1), doc, body))
    return overview, funcs, types, macros


def esc(s):
    """Escapes a run of text for roff; `code` and [`link`] become bold."""
    s = s.replace("\\", "\\e")
    s = re.sub(r"\[`([^`]+)`\](?:\([^)]*\))?", r"`\1`", s)
    s = re.sub(r"`([^`]+)`", lambda m: "\\fB" + m.group(1) + "\\fR", s)
    return s


def roff_line(s):
    s = esc(s)
    if s.startswith((".", "'")):
        s = "\\&" + s
    return s


def roff_text(lines):
    """A paragraph's lines, refilled to at most 78 bytes a line (mandoc's style limit is 80)."""
    text = esc(" ".join(l.strip() for l in lines))
    out = []
    for l in textwrap.wrap(text, width=78, break_long_words=False, break_on_hyphens=False):
        out.append("\\&" + l if l.startswith((".", "'")) else l)
    return out


def paragraphs(lines):
    """Splits doc lines into (kind, [lines]) paragraphs: 'text', 'item' (a '- ' list item),
    'heading' (a '# Heading' line)."""
    out, cur, kind = [], [], "text"

    def flush():
        nonlocal cur
        if cur:
            out.append((kind, cur))
        cur = []

    for line in lines:
        if not line:
            flush()
            kind = "text"
        elif line.startswith("# "):
            flush()
            out.append(("heading", [line[2:]]))
            kind = "text"
        elif line.startswith("- "):
            flush()
            kind = "item"
            cur = [line[2:]]
        elif kind == "item" and cur and not line.startswith(" ") and re.match(r"^[A-Z]", line) \
                and cur[-1].endswith("."):
            # A sentence after a list ends the list.
            flush()
            kind = "text"
            cur = [line]
        else:
            cur.append(line)
    flush()
    return out


def body(paras):
    """roff for paragraphs of one section."""
    out = []
    for i, (kind, lines) in enumerate(paras):
        if kind == "item":
            out.append(".IP \\(bu 2")
        elif i > 0:
            out.append(".PP")
        out.extend(roff_text(lines))
    return out


def proto_lines(proto):
    """A prototype in lines of at most 78 bytes: broken after a comma, aligned on the '('."""
    if len(proto) <= 78:
        return [roff_line(proto)]
    head, args = proto.split("(", 1)
    parts = [a.strip() for a in args.split(",")]
    pad = " " * (len(head) + 1)
    lines, cur = [], head + "(" + parts[0]
    for a in parts[1:]:
        if len(cur) + 2 + len(a) > 78:
            lines.append(cur + ",")
            cur = pad + a
        else:
            cur += ", " + a
    lines.append(cur)
    return [roff_line(l) for l in lines]


def sections(doc):
    """{'DESCRIPTION': [...], 'ERRORS': [...], 'SYSCALLS': [...], 'SAFETY': [...]}"""
    secs = {"DESCRIPTION": [], "ERRORS": [], "SYSCALLS": [], "SAFETY": []}
    cur = "DESCRIPTION"
    for kind, lines in paragraphs(doc):
        if kind == "heading":
            cur = "SAFETY" if lines[0].strip().lower() == "safety" else "DESCRIPTION"
            continue
        first = lines[0]
        if first.startswith("Errors:"):
            cur = "ERRORS"
            rest = first[len("Errors:"):].strip()
            lines = ([rest] if rest else []) + lines[1:]
        elif first.startswith("Syscalls:"):
            cur = "SYSCALLS"
            rest = first[len("Syscalls:"):].strip()
            lines = ([rest] if rest else []) + lines[1:]
        elif cur in ("ERRORS", "SYSCALLS"):
            cur = "DESCRIPTION" if cur == "ERRORS" else "NOTES_SYSCALLS"
            if cur == "NOTES_SYSCALLS":
                cur = "SYSCALLS"
        if lines:
            secs[cur].append((kind, lines))
    return secs


def mentioned(doc, names, me):
    text = " ".join(doc)
    return sorted({n for n in re.findall(r"\blowcopy_\w+", text) if n in names and n != me})


def versions():
    """{name: [(node, default?)]} from capi/abi/lowcopy.symbols."""
    out = {}
    for line in open(SYMBOLS):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "@@" in line:
            n, node = line.split("@@")
            out.setdefault(n, []).append((node, True))
        else:
            n, node = line.split("@")
            out.setdefault(n, []).append((node, False))
    return out


def th(name, sec, ver, date):
    return [f'.TH {name.upper()} {sec} {date} "lowcopy {ver}" "lowcopy Manual"']


def one_line(doc):
    """The first sentence of a doc, for NAME and the index."""
    text = " ".join(l for l in doc if l)
    text = re.sub(r"\s+", " ", text)
    depth, end = 0, len(text)
    for i, c in enumerate(text):
        depth += c == "(" or c == "["
        depth -= c == ")" or c == "]"
        if c == "." and depth <= 0 and (i + 1 == len(text) or text[i + 1] == " "):
            end = i
            break
    s = text[:end].rstrip(".:; ")
    if len(s) > 110:
        s = s[:107].rsplit(" ", 1)[0] + " ..."
    return s


def function_page(name, proto, doc, names, vers, ver, date):
    secs = sections(doc)
    out = th(name, 3, ver, date)
    out += [".SH NAME"] + roff_text([f"{name} \x00 " + one_line(doc)])
    out = [l.replace("\x00", "\\-") for l in out]
    out += [".SH LIBRARY", "lowcopy (liblowcopy, \\-llowcopy; pkg-config lowcopy)"]
    out += [".SH SYNOPSIS", ".nf", ".B #include <lowcopy.h>", ".PP"] + proto_lines(proto) + [".fi"]
    out += [".SH DESCRIPTION"] + body(secs["DESCRIPTION"])
    if secs["ERRORS"]:
        out += [".SH ERRORS", "Errors are returned as negative errno values."] + \
            [".PP"] + body(secs["ERRORS"])
    if secs["SYSCALLS"]:
        out += [".SH SYSCALLS",
                "The system calls this function may make (the same list is the",
                ".B LOWCOPY_SYSCALLS_" + name,
                "X-macro of",
                ".IR lowcopy_syscalls.h ):",
                ".PP"] + body(secs["SYSCALLS"])
    if secs["SAFETY"]:
        out += [".SH SAFETY"] + body(secs["SAFETY"])
    if name in vers:
        out += [".SH VERSIONS"]
        parts = []
        for node, default in sorted(vers[name]):
            if default:
                parts.append(f"The default version of this symbol is `{name}@@{node}`, "
                             "which programs built now link against.")
            else:
                parts.append(f"`{name}@{node}` is kept for programs built against that "
                             "version of the ABI: it writes that version's struct layouts.")
        out += roff_text(parts)
    see = ["lowcopy(7)"] + [f"{n}(3)" for n in mentioned(doc, names, name)]
    out += [".SH SEE ALSO"]
    out += [", ".join(f"\\fB{s.split('(')[0]}\\fR({s.split('(')[1]}" for s in see)]
    return "\n".join(out) + "\n"


def overview_page(overview, funcs, types, macros, ver, date):
    out = th("lowcopy", 7, ver, date)
    out += [".SH NAME", "lowcopy \\- Linux socket primitives without needless copies or wakeups"]
    out += [".SH SYNOPSIS", ".nf", ".B #include <lowcopy.h>", ".PP",
            "cc prog.c $(pkg-config \\-\\-cflags \\-\\-libs lowcopy)", ".fi"]
    lines = [l for l in overview if not l.startswith("SPDX-License-Identifier")]
    if lines and lines[0].startswith("lowcopy:"):
        lines = lines[1:]
    out += [".SH DESCRIPTION"] + body(paragraphs(lines))
    out += [".SH FUNCTIONS", "Each has its own page in section 3."]
    for name, _proto, doc in funcs:
        out += [".TP", f".BR {name} (3)"] + roff_text([one_line(doc)])
    out += [".SH TYPES"]
    for i, (name, doc, decl) in enumerate(types):
        out += [".SS " + name]
        out += body(paragraphs(doc))
        out += [".PP", ".EX"] + [roff_line(l) for l in decl.splitlines()] + [".EE"]
    out += [".SH CONSTANTS"]
    for name, value, doc in macros:
        out += [".TP", f".B {name}"] + roff_text(["(" + value + ") " + " ".join(doc)])
    out += [".SH FILES", ".TP", ".I lowcopy.h", "this interface", ".TP", ".I lowcopy_syscalls.h",
            "the system calls each function may make, as X-macros",
            ".TP", ".I liblowcopy.so.0"] + roff_text([
                "the shared library; every symbol carries a version node (LOWCOPY_0.1, "
                "LOWCOPY_0.2, ...)"]) + [
            ".TP", ".I liblowcopy.a", "the static library (pkg-config \\-\\-static for its "
            "dependencies)"]
    out += [".SH SEE ALSO"]
    see = [f"\\fB{n}\\fR(3)" for n, _, _ in funcs]
    out += [", ".join(see[i:i + 2]) + ("," if i + 2 < len(see) else "") for i in range(0, len(see), 2)]
    return "\n".join(out) + "\n"


def generate(outdir):
    text = open(HEADER).read()
    overview, funcs, types, macros = parse(text)
    ver, date, vers = version(), page_date(), versions()
    names = {n for n, _, _ in funcs}
    os.makedirs(os.path.join(outdir, "man3"), exist_ok=True)
    os.makedirs(os.path.join(outdir, "man7"), exist_ok=True)
    for name, proto, doc in funcs:
        write(os.path.join(outdir, "man3", name + ".3"),
              function_page(name, proto, doc, names, vers, ver, date))
    write(os.path.join(outdir, "man7", "lowcopy.7"),
          overview_page(overview, funcs, types, macros, ver, date))
    print(f"man: {len(funcs)} pages in {outdir}/man3, lowcopy.7 in {outdir}/man7")


def write(path, content):
    if os.path.exists(path) and open(path).read() == content:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(content)
    os.replace(tmp, path)


def check(outdir):
    fail = 0
    exported = sorted(versions())
    for n in exported:
        if not os.path.exists(os.path.join(outdir, "man3", n + ".3")):
            print(f"man: no page for the exported function {n}")
            fail = 1
    pages = [os.path.join(outdir, "man7", "lowcopy.7")] + sorted(
        os.path.join(outdir, "man3", p) for p in os.listdir(os.path.join(outdir, "man3")))
    # -W all: every message, style included; mandoc exits non-zero on any of them.
    r = subprocess.run(["mandoc", "-Tlint", "-W", "all"] + pages, capture_output=True, text=True)
    msgs = [l for l in (r.stdout + r.stderr).splitlines()
            # mandoc cannot know the pages are not installed yet.
            if "referenced manual not found" not in l]
    if msgs:
        print("\n".join(msgs))
        fail = 1
    if fail:
        print("man: check failed")
        return 1
    print(f"man: {len(pages)} pages lint-clean (mandoc -Tlint -W all), "
          f"one for each of the {len(exported)} exported functions")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--check":
        return check(argv[2])
    if len(argv) == 2 and not argv[1].startswith("-"):
        generate(argv[1])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
