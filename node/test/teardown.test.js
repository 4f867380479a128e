// Environment teardown (issue 17): a worker terminated, or ending by itself, with zerocopy
// sends in flight must not leave the kernel reading memory its heap gave back (the next worker
// fills that memory; the peer then checks every byte); terminate() with each kind of pending
// async call resolves within a bound and the process exits; close() with a peer that never reads
// resets the connection within a bound, and the peer sees no wrong byte.
'use strict'
const assert = require('node:assert/strict')
const net = require('node:net')
const path = require('node:path')
const { execFileSync } = require('node:child_process')
const { once } = require('node:events')
const { test } = require('node:test')
const { Worker } = require('node:worker_threads')
const { native: lc, testing } = require('./harness.js')

const PKG = path.resolve(__dirname, '..', 'lowcopy.js')
const INDEX = path.resolve(__dirname, '..', 'index.js')
const CHILD = path.join(__dirname, 'teardown_child.js')
const BOUND_MS = 10000 // generous: a loaded 2-core machine
const CHUNK = 65536

// Worker 1: sends the test pattern in CHUNK-byte buffers of its own heap until the socket is
// full (the peer does not read), reports, then waits to be terminated or ends by itself.
const SENDER = `
'use strict'
const { workerData, parentPort } = require('node:worker_threads')
const lc = require(workerData.pkg)
const { testing } = require(workerData.index)
const z = new lc.ZeroCopySender(workerData.sock, { backend: workerData.backend })
let sent = 0
for (;;) {
  const b = new Uint8Array(workerData.chunk)
  b.set(testing.pattern(sent, b.length))
  const n = z.trySend(b)
  if (n <= 0) break
  sent += n
}
globalThis.keep = z // the sender stays reachable: only the teardown ends it
parentPort.postMessage({ sent, inflight: z.inflight })
if (workerData.stay) setInterval(() => {}, 1000)
`

// Worker 2: allocates and fills as much memory again, in the same sizes, with another pattern,
// and keeps it while the peer reads.
const REUSER = `
'use strict'
const { workerData, parentPort } = require('node:worker_threads')
const keep = []
for (let i = 0; i < workerData.count; i++) keep.push(new Uint8Array(workerData.chunk).fill(0xa5))
globalThis.keep = keep
parentPort.postMessage('filled')
setInterval(() => {}, 1000)
`

const sleeper = new Int32Array(new SharedArrayBuffer(4))

/// Reads `fd` until the end of the stream, a reset or 2 s of silence, checking every byte
/// against the test pattern. Returns { got, wrong, firstWrong, end }.
function readChecked(fd) {
  testing.setRcvtimeo(fd, 2000)
  let got = 0
  let wrong = 0
  let firstWrong = -1
  let end = 'timeout'
  let last = Date.now()
  for (;;) {
    let b
    try {
      b = testing.read(fd, 1 << 20)
    } catch (e) {
      if (e.code === 'EAGAIN' && Date.now() - last < 2000) {
        // A non-blocking fd (a net.Socket's), or SO_RCVTIMEO ran out: look again a little later.
        Atomics.wait(sleeper, 0, 0, 20)
        continue
      }
      end = e.code === 'EAGAIN' ? 'timeout' : e.code
      break
    }
    last = Date.now()
    if (b.length === 0) {
      end = 'eof'
      break
    }
    const want = testing.pattern(got, b.length)
    if (!b.equals(want)) {
      for (let i = 0; i < b.length; i++) {
        if (b[i] !== want[i]) {
          if (firstWrong < 0) firstWrong = got + i
          wrong++
        }
      }
    }
    got += b.length
  }
  return { got, wrong, firstWrong, end }
}

async function sendersHeapGoes(backend, how) {
  const p = testing.pair('tcp4')
  try {
    const w1 = new Worker(SENDER, {
      eval: true,
      workerData: { pkg: PKG, index: INDEX, sock: p.sock, backend, chunk: CHUNK, stay: how === 'terminate' },
    })
    const [r] = await once(w1, 'message')
    assert.ok(r.inflight > 0, `sends in flight when the worker goes (${JSON.stringify(r)})`)
    const t0 = Date.now()
    if (how === 'terminate') await w1.terminate()
    else await once(w1, 'exit')
    const ms = Date.now() - t0
    assert.ok(ms < BOUND_MS, `the worker went within the bound (${ms} ms)`)
    const w2 = new Worker(REUSER, { eval: true, workerData: { count: Math.ceil(r.sent / CHUNK) + 8, chunk: CHUNK } })
    await once(w2, 'message')
    const seen = readChecked(p.peer)
    await w2.terminate()
    console.log(`# ${backend}, worker ${how}: ${r.sent} bytes sent, ${r.inflight} sends in flight; ` +
      `peer got ${seen.got} bytes, ${seen.wrong} wrong, then ${seen.end}; worker gone in ${ms} ms`)
    assert.equal(seen.wrong, 0, `no byte on the wire differs from what the worker sent (first wrong at ${seen.firstWrong})`)
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
}

for (const backend of ['io_uring', 'errqueue']) {
  test(`${backend}: a worker terminated with zerocopy sends in flight: the next worker's memory never reaches the wire`, () =>
    sendersHeapGoes(backend, 'terminate'))
  test(`${backend}: a worker that ends by itself with zerocopy sends in flight: the next worker's memory never reaches the wire`, () =>
    sendersHeapGoes(backend, 'exit'))
}

// Four senders, each with sends in flight to a peer that never reads, in one worker: the
// teardown closes them under one deadline (the first waits the close timeout, 1 s, the others
// reset at once), so terminate() takes about one close timeout, not four.
const STUCK = `
'use strict'
const { workerData, parentPort } = require('node:worker_threads')
const lc = require(workerData.pkg)
globalThis.keep = workerData.socks.map((fd) => {
  const z = new lc.ZeroCopySender(fd, { backend: 'io_uring' })
  const b = new Uint8Array(${CHUNK}).fill(3)
  while (z.trySend(b) > 0) {}
  return z
})
parentPort.postMessage(globalThis.keep.map((z) => z.inflight))
setInterval(() => {}, 1000)
`

test('terminate() of a worker with four stuck senders costs about one close timeout, not four', async () => {
  const pairs = [0, 1, 2, 3].map(() => testing.pair('tcp4'))
  try {
    const w = new Worker(STUCK, { eval: true, workerData: { pkg: PKG, socks: pairs.map((p) => p.sock) } })
    const [inflight] = await once(w, 'message')
    assert.ok(inflight.every((n) => n > 0), `sends in flight on every sender (${inflight})`)
    const t0 = Date.now()
    await w.terminate()
    const ms = Date.now() - t0
    console.log(`# four stuck senders: terminate() in ${ms} ms`)
    assert.ok(ms >= 900, `the teardown waited for the completions (${ms} ms)`)
    assert.ok(ms < 3500, `one shared deadline, not one close timeout per sender (${ms} ms)`)
    for (const p of pairs) {
      const seen = readChecked(p.peer)
      assert.equal(seen.end, 'ECONNRESET', 'each stuck connection was reset')
    }
  } finally {
    for (const p of pairs) {
      testing.close(p.sock)
      testing.close(p.peer)
    }
  }
})

for (const kind of ['peekAsync', 'peekAtAsync', 'recvAtLeastAsync', 'receiverRecvAtLeastAsync', 'waitAsync']) {
  test(`terminate() of a worker with a pending ${kind} (no timeout) resolves within ${BOUND_MS} ms and the process exits`, () => {
    let out
    try {
      // The child terminates its worker, then must end by itself: a hang is killed here.
      out = execFileSync(process.execPath, [CHILD, 'pending', kind], { timeout: 3 * BOUND_MS, encoding: 'utf8' })
    } catch (e) {
      assert.fail(`the child did not exit by itself (${e.signal || e.status}): ${e.stdout || ''}${e.stderr || ''}`)
    }
    const { ms } = JSON.parse(out.trim().split('\n').pop())
    assert.ok(ms < BOUND_MS, `terminate() took ${ms} ms`)
  })
}

test('process.exit() on the main thread with a pending peekAtAsync (no timeout) exits', () => {
  try {
    execFileSync(process.execPath, [CHILD, 'mainpending'], { timeout: BOUND_MS, encoding: 'utf8' })
  } catch (e) {
    assert.fail(`the child did not exit (${e.signal || e.status}): ${e.stdout || ''}${e.stderr || ''}`)
  }
})

for (const backend of ['io_uring', 'errqueue']) {
  test(`${backend}: close() with a peer that never reads returns within the bound, resets, and the peer sees no wrong byte`, () => {
    const p = testing.pair('tcp4')
    try {
      const z = new lc.ZeroCopySender(p.sock, { backend })
      let sent = 0
      for (;;) {
        const b = new Uint8Array(CHUNK)
        b.set(testing.pattern(sent, b.length))
        const n = z.trySend(b)
        if (n <= 0) break
        sent += n
      }
      assert.ok(z.inflight > 0)
      const t0 = Date.now()
      const abandoned = z.close()
      const ms = Date.now() - t0
      const s = z.stats()
      assert.ok(ms < BOUND_MS, `close() took ${ms} ms`)
      assert.equal(s.closeResets, 1, 'the stuck connection was reset')
      assert.equal(s.closeAbandoned, 0)
      assert.equal(abandoned, 0)
      assert.ok(s.closeCompleted > 0)
      assert.equal(z.held, 0, 'every buffer released')
      const seen = readChecked(p.peer)
      console.log(`# ${backend}: close() in ${ms} ms, ${sent} bytes sent, peer got ${seen.got} then ${seen.end}; ` +
        `closeCompleted ${s.closeCompleted}`)
      assert.equal(seen.wrong, 0)
      assert.ok(['ECONNRESET', 'eof'].includes(seen.end), `the peer sees the reset (${seen.end})`)
      assert.ok(seen.got < sent, 'the bytes still queued at the reset never arrive')
    } finally {
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })
}

test('the main thread ends with zerocopy sends in flight: the process exits within the bound, no wrong byte', async () => {
  const srv = net.createServer({ pauseOnConnect: true })
  srv.listen(0, '127.0.0.1')
  await once(srv, 'listening')
  const conn = once(srv, 'connection')
  try {
    const t0 = Date.now()
    const child = require('node:child_process').spawn(process.execPath, [CHILD, 'mainexit', String(srv.address().port), 'io_uring'], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    const killer = setTimeout(() => child.kill('SIGKILL'), 3 * BOUND_MS)
    const [code, signal] = await once(child, 'exit')
    clearTimeout(killer)
    const ms = Date.now() - t0
    assert.equal(signal, null, 'the child exited by itself')
    assert.equal(code, 0)
    assert.ok(ms < BOUND_MS, `exit took ${ms} ms`)
    const [sock] = await conn
    const fd = sock._handle.fd
    const seen = readChecked(fd)
    const r = JSON.parse(out.trim())
    console.log(`# main thread exit: ${r.sent} bytes sent, ${r.inflight} in flight; peer got ${seen.got} then ${seen.end}`)
    assert.equal(seen.wrong, 0)
    sock.destroy()
  } finally {
    srv.close()
  }
})
