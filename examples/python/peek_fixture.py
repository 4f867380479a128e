"""What a Python test script does with lowcopy: inspect a server's reply at an offset
without disturbing the stream.

A pytest fixture hands the test a `Peeker` over the client's connection. The test looks at
the status line and at a header deep in the reply (peeks copy, never consume), while the
code under test later reads the very same bytes, untouched. Run it as a script
(`python examples/python/peek_fixture.py`) or with pytest.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

import lowcopy

BODY = b"x" * 100_000
REPLY = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\n"
    b"X-Trace: 7f3a\r\n"
    b"\r\n" + BODY
)


def serve_once(listener: socket.socket) -> None:
    """The server under test: one request, one reply."""
    conn, _ = listener.accept()
    with conn:
        conn.recv(1024)
        conn.sendall(REPLY)


def read_reply(sock: socket.socket) -> bytes:
    """The client code under test: reads the whole reply from byte 0."""
    chunks = []
    while data := sock.recv(65536):
        chunks.append(data)
    return b"".join(chunks)


def open_connection() -> Iterator[tuple[socket.socket, lowcopy.Peeker]]:
    """A connected client with a request sent, and a Peeker over it."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = threading.Thread(target=serve_once, args=(listener,))
    server.start()
    client = socket.create_connection(listener.getsockname())
    client.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
    with client, listener, lowcopy.Peeker(client) as peeker:
        yield client, peeker
    server.join()


def header_block(peeker: lowcopy.Peeker) -> bytes:
    """Peeks until the end of the headers, without consuming anything."""
    seen = b""
    while b"\r\n\r\n" not in seen:
        chunk = peeker.peek(4096)  # waits for the bytes; the cursor moves, the queue does not
        if not chunk:
            raise AssertionError("connection closed inside the headers")
        seen += chunk
    return seen[: seen.index(b"\r\n\r\n") + 4]


def check(client: socket.socket, peeker: lowcopy.Peeker) -> None:
    headers = header_block(peeker)
    assert headers.startswith(b"HTTP/1.1 200 OK\r\n"), headers
    assert b"X-Trace: 7f3a\r\n" in headers
    # The last body bytes, at an offset far into the stream, still without consuming.
    body_at = len(headers)
    peeker.seek(body_at + len(BODY) - 10)
    tail = b""
    while len(tail) < 10:
        tail += peeker.peek(10 - len(tail))
    assert tail == BODY[-10:]
    print(f"peeked {len(headers)} header bytes and the body's tail at offset "
          f"{body_at + len(BODY) - 10} ({peeker.mode.name}); stats: {peeker.stats()}")
    peeker.close()  # SO_PEEK_OFF disabled again before the code under test reads
    # The code under test sees the stream from byte 0, byte-exact.
    client.shutdown(socket.SHUT_WR)
    assert read_reply(client) == REPLY
    print(f"the client then read all {len(REPLY)} bytes, untouched")


@pytest.fixture
def connection() -> Iterator[tuple[socket.socket, lowcopy.Peeker]]:
    """The fixture: `open_connection` for each test that names it."""
    yield from open_connection()


def test_reply(connection: tuple[socket.socket, lowcopy.Peeker]) -> None:
    """The pytest form: `pytest examples/python/peek_fixture.py`."""
    check(*connection)


if __name__ == "__main__":
    for conn in open_connection():
        check(*conn)
