#!/usr/bin/env python3
"""Writes a variant of include/lowcopy.h (stdin -> stdout) whose structs have another length,
for the growth-rule test (tests/c/layout_growth.c):

  older  every struct loses its last field: the header of an older library version
  newer  every struct gains a last field `uint64_t lowcopy_test_later;`: a newer version's

Only the struct bodies change; the functions are the same. Every struct in the header is one
`typedef struct lowcopy_x {` ... `} lowcopy_x;` block whose fields are single lines ending in
`;`, each after its doc comment. `lowcopy_peeker_storage` is no such struct (caller memory of
LOWCOPY_PEEKER_SIZE bytes for a peeker, not a struct the library fills) and stays as it is.
"""
import re
import sys


def main() -> None:
    mode = sys.argv[1]
    out, body = [], None
    for line in sys.stdin:
        if body is None:
            out.append(line)
            if re.match(r"typedef struct lowcopy_\w+ \{$", line) and "_storage " not in line:
                body = []
            continue
        if not line.startswith("}"):
            body.append(line)
            continue
        fields = [i for i, l in enumerate(body) if re.match(r"  [A-Za-z_].*;$", l)]
        if not fields:
            sys.exit(f"no fields before {line!r}")
        if mode == "older":
            # Drop the last field and its doc comment (the lines after the field before it).
            body = body[: fields[-2] + 1] if len(fields) > 1 else sys.exit("one-field struct")
        elif mode == "newer":
            body.append("  uint64_t lowcopy_test_later;\n")
        else:
            sys.exit("usage: layout_header.py older|newer < lowcopy.h")
        out += body + [line]
        body = None
    sys.stdout.write("".join(out))


main()
