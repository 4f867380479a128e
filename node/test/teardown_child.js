// A child process for teardown.test.js (run as `node teardown_child.js <case> [backend]`; does
// nothing when loaded without a case, as `node --test test/` loads every file here). Each case
// prints one JSON line and then lets the process end by itself: the parent checks that it does.
//   pending <kind>     a worker with one pending async call of <kind> and no timeout
//                      (peekAsync, peekAtAsync, recvAtLeastAsync, receiverRecvAtLeastAsync,
//                      waitAsync): the worker is terminated; prints { ms } (terminate's time)
//   mainexit <port> <backend>
//                      the main thread sends to 127.0.0.1:<port> (a peer that does not read)
//                      until the socket is full, then ends with the sends in flight; prints
//                      { sent } (bytes accepted)
//   mainpending        the main thread calls process.exit() with a peekAtAsync pending
//                      (Node's exit joins libuv's pool threads: a wait there never let it end)
'use strict'
const path = require('node:path')
const { Worker } = require('node:worker_threads')

const PKG = path.resolve(__dirname, '..', 'lowcopy.js')
const INDEX = path.resolve(__dirname, '..', 'index.js')

// The worker's side of `pending`: makes the call and says so (the call never settles).
const PENDING_WORKER = `
'use strict'
const { workerData, parentPort } = require('node:worker_threads')
const lc = require(workerData.pkg)
const { testing } = require(workerData.index)
const { kind, sock, peer } = workerData
let settled = false
const done = () => { settled = true }
switch (kind) {
  case 'peekAsync': new lc.Peeker(sock).peekAsync(16).then(done, done); break
  case 'peekAtAsync': lc.peekAtAsync(sock, 0, 16).then(done, done); break
  case 'recvAtLeastAsync': lc.recvAtLeastAsync(sock, 16, 16).then(done, done); break
  case 'receiverRecvAtLeastAsync': new lc.Receiver(sock).recvAtLeastAsync(16, 16).then(done, done); break
  case 'waitAsync': {
    // Sends in flight to a peer that does not read: their completions never come.
    const z = new lc.ZeroCopySender(sock, { backend: workerData.backend })
    const chunk = new Uint8Array(65536).fill(7)
    while (z.trySend(chunk) > 0) {}
    // Take what completed already (the bytes the peer's kernel queued), until nothing comes.
    for (;;) {
      try {
        if (z.wait(200) === 0 || z.reap().length === 0) break
      } catch (e) {
        if (e.code === 'ETIMEDOUT') break
        throw e
      }
    }
    if (z.inflight === 0) throw new Error('no send in flight')
    z.waitAsync().then(done, done)
    break
  }
  default: throw new Error('unknown kind ' + kind)
}
setTimeout(() => parentPort.postMessage({ pending: !settled }), 100)
`

async function pending(kind, backend) {
  const { testing } = require(INDEX)
  const p = testing.pair('tcp4')
  const w = new Worker(PENDING_WORKER, {
    eval: true,
    workerData: { pkg: PKG, index: INDEX, kind, backend, sock: p.sock, peer: p.peer },
  })
  const [msg] = await Promise.race([
    require('node:events').once(w, 'message'),
    require('node:events').once(w, 'error').then(([e]) => { throw e }),
  ])
  if (!msg.pending) throw new Error(`${kind} settled before terminate()`)
  const t0 = Date.now()
  await w.terminate()
  const ms = Date.now() - t0
  testing.close(p.sock)
  testing.close(p.peer)
  console.log(JSON.stringify({ ms }))
}

function mainexit(port, backend) {
  const lc = require(PKG)
  const { testing } = require(INDEX)
  const fd = testing.connectPort(Number(port))
  testing.setNonblocking(fd)
  const z = new lc.ZeroCopySender(fd, { backend })
  let sent = 0
  for (;;) {
    const b = new Uint8Array(262144)
    b.set(testing.pattern(sent, b.length))
    const n = z.trySend(b)
    if (n <= 0) break
    sent += n
  }
  console.log(JSON.stringify({ sent, inflight: z.inflight }))
  // The sender, its buffers and the socket stay as they are: the main thread ends here.
  globalThis.keep = z
}

function mainpending() {
  const lc = require(PKG)
  const { testing } = require(INDEX)
  const p = testing.pair('tcp4')
  lc.peekAtAsync(p.sock, 0, 16).catch(() => {})
  setTimeout(() => {
    console.log(JSON.stringify({ exiting: true }))
    process.exit(0)
  }, 100)
}

if (require.main === module && process.argv[2]) {
  const [, , what, a, b] = process.argv
  if (what === 'pending') {
    pending(a, b || 'io_uring').catch((e) => {
      console.error(e)
      process.exitCode = 1
    })
  } else if (what === 'mainexit') {
    mainexit(a, b)
  } else if (what === 'mainpending') {
    mainpending()
  } else {
    console.error('unknown case ' + what)
    process.exitCode = 2
  }
}
