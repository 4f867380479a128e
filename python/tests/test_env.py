"""The package as a user gets it: the installed wheel (never the source tree), importable with
nothing but the standard library and its declared dependencies; and calls that allocate their
result from a caller's size (`peek_at(sock, 0, 10**9)`) sized by what the socket can hold."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import lowcopy
import lowcopy.asyncio
from fixtures import Pair, tcp_pair, wait_queued

SOURCE_TREE = Path(__file__).resolve().parent.parent / "python"

# Every module of the package (found by walking it, so a new one is checked too), imported
# in an isolated interpreter (-I: no PYTHONPATH, no user site, no script directory) where any
# top-level import outside the standard library, the package and its declared dependencies
# fails, whatever else the environment happens to hold (mypy brings typing_extensions into
# the test venv, for one).
IMPORT_CHECK = textwrap.dedent(
    """
    import importlib, importlib.abc, importlib.metadata, json, pkgutil, re, sys

    declared = set()
    for req in importlib.metadata.requires("lowcopy") or []:
        if "extra ==" in req:
            continue  # optional (the test tools)
        name = re.split(r"[ ;<>=!~\\[]", req, maxsplit=1)[0]
        declared.add(name.lower().replace("-", "_"))
    allowed = set(sys.stdlib_module_names) | {"lowcopy"} | declared

    class Undeclared(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top not in allowed and not top.startswith("_"):
                raise ImportError(f"lowcopy imports {name!r}, which it does not declare")
            return None

    sys.meta_path.insert(0, Undeclared())
    import lowcopy
    mods = ["lowcopy"]
    for m in pkgutil.walk_packages(lowcopy.__path__, "lowcopy."):
        if m.name != "lowcopy.__main__":  # runs the CLI; imports only what lowcopy does
            importlib.import_module(m.name)
            mods.append(m.name)
    print(json.dumps({"modules": mods, "declared": sorted(declared)}))
    """
)


def test_every_module_imports_with_only_declared_dependencies() -> None:
    r = subprocess.run(
        [sys.executable, "-I", "-c", IMPORT_CHECK],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "lowcopy.asyncio" in out["modules"], out


def test_the_tests_import_the_installed_wheel() -> None:
    assert sys.prefix != sys.base_prefix, "not in a venv"
    where = Path(lowcopy.__file__).resolve()
    site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    assert any(s in where.parents for s in site), f"{where} is not in {site}"
    assert SOURCE_TREE not in where.parents, f"imported from the source tree: {where}"
    assert not any(
        Path(p or ".").resolve() == SOURCE_TREE for p in sys.path
    ), f"the source tree is on sys.path: {sys.path}"
    assert "PYTHONPATH" not in os.environ, os.environ["PYTHONPATH"]


@pytest.fixture
def tcp() -> Iterator[Pair]:
    p = tcp_pair()
    yield p
    p.close()


# ---- result buffers sized by what the socket can hold -----------------------------------------

# One process per check, so that its peak RSS is this call's: before the fix peek_at zero-filled
# a 1 GB buffer to return 11 bytes.
RSS_CHECK = textwrap.dedent(
    """
    import json, resource, socket, sys
    import lowcopy

    def pair():
        ls = socket.create_server(("127.0.0.1", 0))
        c = socket.create_connection(ls.getsockname())
        s, _ = ls.accept()
        ls.close()
        c.sendall(b"hello world")
        while lowcopy.peek_at(s, 0, 64) != b"hello world":
            pass
        return c, s

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    c, s = pair()
    call = sys.argv[1]
    before = peak()
    if call == "peek_at":
        got = lowcopy.peek_at(s, 0, 10**9)
    elif call == "Peeker.peek":
        got = lowcopy.Peeker(s).peek(10**9)
    elif call == "recv_atleast":
        got = lowcopy.recv_atleast(s, 10**9, 1, timeout=5)
    elif call == "Receiver.recv_atleast":
        got = lowcopy.Receiver(s).recv_atleast(10**9, 1, timeout=5)
    elif call == "AsyncReceiver.recv_atleast":
        import asyncio
        import lowcopy.asyncio as la

        async def main():
            async with la.AsyncReceiver(s) as r:
                return await r.recv_atleast(10**9, 1)
        got = asyncio.run(main())
    print(json.dumps({"got": got.decode(), "grew": peak() - before}))
    """
)


@pytest.mark.parametrize(
    "call", ["peek_at", "Peeker.peek", "recv_atleast", "Receiver.recv_atleast", "AsyncReceiver.recv_atleast"]
)
def test_a_huge_size_returns_what_is_queued_without_allocating_it(call: str) -> None:
    r = subprocess.run(
        [sys.executable, "-I", "-c", RSS_CHECK, call], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["got"] == "hello world"
    # A buffer of what the socket can hold: at most its receive buffer (autotuned up to
    # tcp_rmem[2], 6-32 MiB), far below the 1 GB asked for.
    assert out["grew"] < 64 << 20, f"{call}(10**9): peak RSS grew by {out['grew']} bytes"


def test_a_size_above_int_max_is_a_clear_overflow_error(tcp: Pair) -> None:
    assert tcp.peer is not None
    tcp.peer.sendall(b"hello world")
    wait_queued(tcp.sock, 11)
    too_big = r"nbytes is 1099511627776: at most 2147483647 \(INT_MAX"
    with pytest.raises(OverflowError, match=too_big):
        lowcopy.peek_at(tcp.sock, 0, 2**40)
    with pytest.raises(OverflowError, match=too_big):
        lowcopy.recv_atleast(tcp.sock, 2**40, 1, timeout=0)
    with lowcopy.Peeker(tcp.sock) as p, pytest.raises(OverflowError, match=too_big):
        p.peek(2**40)
    with lowcopy.Receiver(tcp.sock) as r, pytest.raises(OverflowError, match=too_big):
        r.recv_atleast(2**40, 1, 0)

    async def receive() -> bytes:
        async with lowcopy.asyncio.AsyncReceiver(tcp.sock) as r:
            return await r.recv_atleast(2**40, 1)

    with pytest.raises(OverflowError, match=too_big):
        asyncio.run(receive())
    # Nothing was consumed; INT_MAX itself is a size like any other: what is queued.
    assert lowcopy.peek_at(tcp.sock, 0, 2**31 - 1) == b"hello world"
    with lowcopy.Peeker(tcp.sock) as p:
        assert p.peek(2**31 - 1, socket.MSG_DONTWAIT) == b"hello world"
