"""A zerocopy sender loop with completions.

A fixed pool of buffers is sent over and over; a buffer is refilled only once its
completion came back (its `user_data` is the buffer's index), which is the contract: the
kernel may read a zerocopy send's memory until then (a `bytearray` cannot even be resized
meanwhile: `BufferError`). `send_reap` sends and collects ready completions in one call.
Run: `python examples/python/zc_sender.py [MiB]`.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import lowcopy

CHUNK = 64 * 1024
POOL = 16


def sink(listener: socket.socket, total: int, got: list[int]) -> None:
    conn, _ = listener.accept()
    with conn:
        n = 0
        while n < total:
            data = conn.recv(1 << 20)
            if not data:
                break
            n += len(data)
        got.append(n)


def main(mib: int = 256) -> None:
    total = mib << 20
    listener = socket.create_server(("127.0.0.1", 0))
    got: list[int] = []
    reader = threading.Thread(target=sink, args=(listener, total, got))
    reader.start()
    sock = socket.create_connection(listener.getsockname())
    pool = [bytearray(CHUNK) for _ in range(POOL)]
    free = list(range(POOL))
    sent = completions = copied = 0
    t0 = time.perf_counter()
    with sock, listener, lowcopy.ZeroCopySender(sock) as tx:
        while sent < total:
            if not free:
                tx.wait()  # every buffer is in flight: sleep until one comes back
                done = tx.reap()
            else:
                i = free.pop()
                pool[i][:8] = sent.to_bytes(8, "little")  # refill: the buffer is ours again
                n, done = tx.send_reap(memoryview(pool[i])[: min(CHUNK, total - sent)], i)
                sent += n
            for c in done:
                free.append(c.user_data)
                completions += 1
                copied += c.copied
        while tx.inflight:
            tx.wait()
            for c in tx.reap():
                completions += 1
                copied += c.copied
        backend = tx.backend.name
        stats = tx.stats()
        sock.shutdown(socket.SHUT_WR)
        reader.join()
    secs = time.perf_counter() - t0
    assert got == [total], got
    print(f"{mib} MiB in {secs:.2f} s ({total / secs / 1e9:.2f} GB/s) over loopback, backend "
          f"{backend}: {completions} completions ({copied} copied by the kernel: loopback "
          f"copies), {stats.syscalls_send} send and {stats.syscalls_reap} reap syscalls")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 256)
