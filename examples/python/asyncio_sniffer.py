"""An asyncio server that routes each connection by its first bytes without consuming them.

`AsyncPeeker` waits (on the loop, no thread) until enough bytes are there, peeks them, and
leaves the stream untouched for the handler, which reads from byte 0. Replies go out through
an `AsyncSender` (io_uring zerocopy), whose `sendall` returns once the kernel no longer reads
the buffer. Run: `python examples/python/asyncio_sniffer.py`.
"""

from __future__ import annotations

import asyncio
import socket

import lowcopy
from lowcopy.asyncio import AsyncPeeker, AsyncSender


async def sniff(conn: socket.socket) -> str:
    """The protocol, from the first bytes, peeked (nothing consumed)."""
    async with AsyncPeeker(conn) as p:
        head = b""
        while len(head) < 4:
            more = await p.peek(4 - len(head))
            if not more:
                return "closed"
            head += more
    if head[0] == 0x16:
        return "tls"
    if head in (b"GET ", b"POST", b"HEAD"):
        return "http"
    return "other"


async def handle(conn: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    kind = await sniff(conn)
    request = b""  # the handler still sees the stream from byte 0, up to the client's end
    while chunk := await loop.sock_recv(conn, 4096):
        request += chunk
    reply = f"{kind}: got {len(request)} bytes starting {request[:4]!r}\n".encode()
    async with AsyncSender(conn, lowcopy.ZcBackend.IO_URING) as tx:
        await tx.sendall(reply)
    conn.close()


async def serve(listener: socket.socket, n: int) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(n):
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        await handle(conn)


async def client(addr: tuple[str, int], data: bytes) -> bytes:
    loop = asyncio.get_running_loop()
    with socket.socket() as s:
        s.setblocking(False)
        await loop.sock_connect(s, addr)
        for i in range(0, len(data), 2):  # in pieces: the peek waits for four bytes
            await loop.sock_sendall(s, data[i : i + 2])
            await asyncio.sleep(0.01)
        s.shutdown(socket.SHUT_WR)
        return await loop.sock_recv(s, 4096)


async def main() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    addr = listener.getsockname()
    requests = [b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00\x05hello", b"SSH-2.0-x\r\n"]
    server = asyncio.create_task(serve(listener, len(requests)))
    for r in requests:
        print((await client(addr, r)).decode().strip())
    await server
    listener.close()


if __name__ == "__main__":
    asyncio.run(main())
