"""Smoke check of the installed wheel (scripts/dist_test.sh): each primitive once over a
loopback TCP connection. Prints one line per check and exits non-zero on a failure."""
import socket
import sys

import lowcopy
import lowcopy.asyncio  # noqa: F401  (imports typing_extensions: a declared dependency)

assert ".venv" in lowcopy.__file__ or "site-packages" in lowcopy.__file__, lowcopy.__file__
srv = socket.create_server(("127.0.0.1", 0))
tx = socket.create_connection(srv.getsockname())
rx, _ = srv.accept()
msg = b"hello lowcopy, from an installed wheel"

zc = lowcopy.ZeroCopySender(tx)
assert zc.send(msg, user_data="first") == len(msg)
done = []
while not done:
    zc.wait(5.0)
    done += zc.reap()
assert done[0].user_data == "first" and done[0].result == len(msg), done
print(f"zerocopy send: completion user_data={done[0].user_data!r} result={done[0].result} "
      f"({zc.backend.name})")

got = lowcopy.peek_at(rx, 6, 7)
assert got == msg[6:13], got
print(f"peek at offset 6: {got!r}")

data = lowcopy.recv_atleast(rx, 4096, len(msg), timeout=5.0)
assert data == msg, data
print(f"recv_atleast {len(msg)}: {len(data)} bytes")
zc.close()
print(f"python smoke: ok (lowcopy {lowcopy.__version__} from {lowcopy.__file__})")
sys.exit(0)
