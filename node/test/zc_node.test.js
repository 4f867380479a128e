// ZeroCopySender cases only Node has: any JS value as userData, buffers kept alive under GC
// pressure until reaped, pooled Buffers (byteOffset) and transfers, sockets libuv polls, and an
// idle event loop with sends in flight.
'use strict'
const assert = require('node:assert/strict')
const net = require('node:net')
const { test } = require('node:test')
const { once } = require('node:events')
const { native: lc, testing, pattern, forceBuf } = require('./harness.js')

const backends = ['io_uring', 'errqueue', 'copy']

test('userData is any JS value, handed back unchanged (same object)', () => {
  const p = testing.pair('tcp4')
  const z = new lc.ZeroCopySender(p.sock, { backend: 'io_uring' })
  try {
    const obj = { tag: 'x' }
    const fn = () => 1
    const values = [obj, 'str', 42n, undefined, null, 3.5, fn, Symbol.for('s')]
    values.forEach((v) => z.send(Buffer.from('abc'), v))
    z.send(Buffer.from('xyz')) // no userData: undefined
    testing.waitQueued(p.peer, 3 * values.length + 3)
    testing.read(p.peer, 100)
    const got = []
    const deadline = Date.now() + 3000
    while (got.length < values.length + 1 && Date.now() < deadline) {
      if (z.wait(100) > 0) got.push(...z.reap())
    }
    assert.equal(got.length, values.length + 1)
    assert.equal(got[0].userData, obj, 'the very object')
    assert.deepEqual(got.map((c) => c.userData), [...values, undefined])
    assert.ok(got.every((c) => c.result === 3))
    assert.equal(z.held, 0)
  } finally {
    z.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

for (const backend of backends) {
  test(`${backend}: a sent Buffer stays alive and intact under GC pressure until its completion is reaped`, async () => {
    assert.equal(typeof global.gc, 'function', 'run with --expose-gc')
    const p = testing.pair('tcp4')
    const z = new lc.ZeroCopySender(p.sock, { backend })
    let collected = 0
    const reg = new FinalizationRegistry(() => collected++)
    try {
      const sizes = [65536, 100000, 4096, 300000]
      let pos = 0
      const sendOne = (from, n) => {
        const b = pattern(from, n) // only the sender references it once this returns
        reg.register(b, n)
        return z.send(b, n, { dontWait: true })
      }
      for (const n of sizes) {
        assert.equal(sendOne(pos, n), n)
        pos += n
      }
      // The peer has not read: on TCP the completions wait for its ACKs, which come as its
      // kernel queues the bytes; drop every other reference and press the GC meanwhile.
      for (let i = 0; i < 10; i++) {
        global.gc()
        const junk = []
        for (let k = 0; k < 200; k++) junk.push(Buffer.alloc(16384, 0xee))
        await new Promise((r) => setImmediate(r))
      }
      assert.equal(z.held, sizes.length, 'the sender holds every buffer not reaped')
      assert.equal(testing.drainPattern(p.peer, 0, pos, 3000), pos, 'the peer got the caller\'s bytes')
      const got = []
      const deadline = Date.now() + 3000
      while (got.length < sizes.length && Date.now() < deadline) {
        if (z.wait(100) > 0) got.push(...z.reap())
      }
      assert.deepEqual(got.map((c) => c.userData).sort((a, b) => a - b), [...sizes].sort((a, b) => a - b))
      assert.equal(z.held, 0)
      for (let i = 0; i < 20 && collected < sizes.length; i++) {
        global.gc()
        await new Promise((r) => setTimeout(r, 10))
      }
      assert.equal(collected, sizes.length, 'released once reaped: the GC can take them')
    } finally {
      z.close()
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })

  test(`${backend}: any TypedArray or DataView goes out as its own bytes (byteOffset, byteLength)`, () => {
    const p = testing.pair('tcp4')
    const z = new lc.ZeroCopySender(p.sock, { backend })
    try {
      const ab = new ArrayBuffer(24)
      new Uint8Array(ab).forEach((_, i, a) => { a[i] = i })
      const views = [new Uint16Array(ab, 2, 3), new DataView(ab, 1, 5), new Float64Array(ab, 16, 1), new Int8Array(ab, 23)]
      views.forEach((v, i) => assert.equal(z.send(v, i), v.byteLength))
      const want = Buffer.concat(views.map((v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength)))
      testing.waitQueued(p.peer, want.length)
      assert.deepEqual(testing.read(p.peer, 100), want)
    } finally {
      z.close()
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })

  test(`${backend}: pooled Buffer slices go out from their byteOffset, nothing of the pool around them`, () => {
    const p = testing.pair('tcp4')
    const z = new lc.ZeroCopySender(p.sock, { backend })
    try {
      const a = Buffer.from('first-')
      const b = Buffer.from('second')
      assert.equal(a.buffer, b.buffer, 'both are slices of the 8 KiB pool')
      assert.ok(b.byteOffset > 0)
      z.send(b, 1)
      z.send([a, b.subarray(0, 3)], 2)
      assert.equal(testing.read(p.peer, 100).toString() + (testing.inq(p.peer) ? testing.read(p.peer, 100).toString() : ''), 'secondfirst-sec')
    } finally {
      z.close()
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })
}

test('a transfer cannot detach a buffer with a zerocopy send in flight: it copies, the wire gets the caller\'s bytes', () => {
  const p = testing.pair('tcp4')
  const z = new lc.ZeroCopySender(p.sock, { backend: 'io_uring' })
  try {
    const b = Buffer.from(pattern(0, 200000)) // JS-owned memory, transferable until sent
    z.send(b, 'big', { dontWait: true })
    const moved = structuredClone(b.buffer, { transfer: [b.buffer] })
    assert.equal(b.length, 200000, 'still attached: the transfer made a copy')
    assert.equal(moved.byteLength, b.buffer.byteLength)
    new Uint8Array(moved).fill(0) // the copy's owner scribbles on its memory
    assert.equal(testing.drainPattern(p.peer, 0, 200000, 3000), 200000)
  } finally {
    z.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

test('a resizable ArrayBuffer is refused by zerocopy sends (it could shrink under the kernel), copied by the copy backend', () => {
  const p = testing.pair('tcp4')
  const rab = new ArrayBuffer(1 << 16, { maxByteLength: 1 << 20 })
  new Uint8Array(rab).fill(0x42)
  for (const backend of ['errqueue', 'io_uring']) {
    const z = new lc.ZeroCopySender(p.sock, { backend })
    try {
      assert.throws(() => z.send(new Uint8Array(rab), 1, { dontWait: true }),
        (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE', backend)
      assert.equal(z.inflight, 0, `${backend}: nothing sent`)
    } finally {
      z.close()
    }
  }
  const c = new lc.ZeroCopySender(p.sock, { backend: 'copy' })
  try {
    assert.equal(c.send(new Uint8Array(rab), 2, { dontWait: true }), 1 << 16)
    rab.resize(0) // the bytes went in the call
    let got = 0
    while (got < 1 << 16) {
      const b = testing.read(p.peer, (1 << 16) - got)
      assert.ok(b.length > 0 && b.every((x) => x === 0x42), 'the caller\'s bytes')
      got += b.length
    }
  } finally {
    c.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

for (const backend of ['io_uring', 'errqueue']) {
  test(`${backend}: more ArrayBuffers in flight than the sender remembers (sends, a batch, one buffer in two sends): each kept alive until reaped, every one collectable after`, async () => {
    // A sender holds a one-view send's ArrayBuffer through its entry in the table of buffers
    // the transfer guard accepted (64 entries): 140 buffers in flight replace entries that
    // sends still hold, in sendBatch too (an earlier buffer's entry replaced by a later one's
    // in the same call), and ten are sent twice (two holds on one entry).
    assert.equal(typeof global.gc, 'function', 'run with --expose-gc')
    const p = testing.pair('tcp4')
    const z = new lc.ZeroCopySender(p.sock, { backend })
    const got = [] // completions, in sendBatch's result too
    const collected = new Set()
    const reg = new FinalizationRegistry((i) => collected.add(i))
    const [n, distinct, twice] = [3000, 140, 10]
    // Buffer i went out with userData i, and the first ten again with distinct + i: collected
    // only once every send of it was reaped.
    const reaped = (i) => got.some((c) => c.userData === i) && (i >= twice || got.some((c) => c.userData === distinct + i))
    try {
      ;(() => { // the buffers are unreachable once this returns
        const bufs = Array.from({ length: distinct }, (_, i) => new Uint8Array(pattern(i * n, n)))
        bufs.forEach((b, i) => reg.register(b.buffer, i))
        const half = distinct / 2
        for (let i = 0; i < half; i++) assert.equal(z.send(bufs[i], i, { dontWait: true }), n)
        const ids = Float64Array.from({ length: half }, (_, i) => half + i)
        const r = z.sendBatch(bufs.slice(half), ids, { dontWait: true })
        assert.equal(r.sends, half)
        got.push(...r.completions)
        for (let i = 0; i < twice; i++) assert.equal(z.send(bufs[i], distinct + i, { dontWait: true }), n)
      })()
      for (let i = 0; i < 10; i++) {
        global.gc()
        const junk = []
        for (let k = 0; k < 200; k++) junk.push(Buffer.alloc(16384, 0xee))
        await new Promise((r) => setImmediate(r))
      }
      assert.deepEqual([...collected].filter((i) => !reaped(i)), [], 'no buffer of a send not reaped was collected')
      assert.equal(z.held + got.length, distinct + twice)
      assert.equal(testing.drainPattern(p.peer, 0, distinct * n, 3000), distinct * n, 'the caller\'s bytes')
      assert.equal(testing.drainPattern(p.peer, 0, twice * n, 3000), twice * n, 'and the ten again')
      const deadline = Date.now() + 3000
      while (got.length < distinct + twice && Date.now() < deadline) {
        if (z.wait(100) > 0) got.push(...z.reap())
      }
      assert.deepEqual(got.map((c) => c.userData).sort((a, b) => a - b), Array.from({ length: distinct + twice }, (_, i) => i))
      assert.equal(z.held, 0)
      for (let i = 0; i < 40 && collected.size < distinct; i++) {
        global.gc()
        await new Promise((r) => setTimeout(r, 10))
      }
      assert.equal(collected.size, distinct, 'released once reaped, replaced entries too: the GC can take every one')
    } finally {
      z.close()
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })
}

test('the transfer guard runs once per ArrayBuffer (its mark lasts), again under a new guard; a second send is still guarded', () => {
  const { markAsUntransferable } = require('node:worker_threads')
  const native = require('../index.js')
  const calls = []
  const counting = (tag) => (ab) => {
    calls.push([tag, ab])
    markAsUntransferable(ab)
  }
  const p = testing.pair('tcp4')
  const z = new lc.ZeroCopySender(p.sock, { backend: 'io_uring' })
  try {
    native._setTransferGuard(counting('first'))
    const a = Buffer.from(pattern(0, 5000)) // each its own ArrayBuffer (not the 8 KiB pool)
    const b = Buffer.from(pattern(5000, 5000))
    z.send(a, 1)
    z.send(a, 2)
    z.send(a.subarray(10, 20), 3) // another view of the same ArrayBuffer
    z.send(b, 4)
    assert.deepEqual(calls.map(([t, ab]) => [t, ab === a.buffer ? 'a' : ab === b.buffer ? 'b' : '?']), [['first', 'a'], ['first', 'b']])
    // A new guard is asked again, once per ArrayBuffer: one the old guard marked too (its
    // type tag cannot be replaced; the sender remembers the buffers the guard accepted).
    native._setTransferGuard(counting('second'))
    const c = Buffer.from(pattern(10010, 5000))
    z.send(a, 5)
    z.send(a, 6)
    z.send(c, 7)
    z.send(c, 8)
    assert.deepEqual(calls.slice(2).map(([t, ab]) => [t, ab === a.buffer ? 'a' : ab === c.buffer ? 'c' : '?']), [['second', 'a'], ['second', 'c']])
    // Marked for good: a transfer still copies rather than detaching the memory in flight.
    structuredClone(a.buffer, { transfer: [a.buffer] })
    assert.equal(a.length, 5000, 'still attached')
    // A guard that refuses: never remembered, every send asks it again.
    let refusals = 0
    native._setTransferGuard(() => {
      refusals++
      throw new TypeError('refused')
    })
    assert.throws(() => z.send(b, 7), { message: 'refused' })
    assert.throws(() => z.send(b, 8), { message: 'refused' })
    assert.equal(refusals, 2)
    const want = 5000 * 2 + 10 + 5000 + 5000 * 4
    testing.waitQueued(p.peer, want)
    assert.equal(testing.read(p.peer, want + 1).length, want)
  } finally {
    native._setTransferGuard(testing.transferGuard) // lowcopy.js's own
    z.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

test('a fresh ArrayBuffer is guarded even where a collected one it replaces lay (the sender remembers buffers by object, not address)', async () => {
  assert.equal(typeof global.gc, 'function', 'run with --expose-gc')
  const { markAsUntransferable } = require('node:worker_threads')
  const native = require('../index.js')
  let calls = 0
  native._setTransferGuard((ab) => {
    calls++
    markAsUntransferable(ab)
  })
  const p = testing.pair('tcp4')
  const z = new lc.ZeroCopySender(p.sock, { backend: 'io_uring' })
  const rounds = 20
  try {
    for (let i = 0; i < rounds; i++) {
      // A new ArrayBuffer of the same size each round, the last one unreachable and collected:
      // the allocator tends to hand its memory out again.
      z.send(Buffer.from(pattern(i * 4096, 4096)), i)
      assert.equal(testing.drainPattern(p.peer, i * 4096, 4096, 3000), 4096)
      while (z.inflight > 0) if (z.wait(1000) > 0) z.reap()
      global.gc()
      await new Promise((r) => setImmediate(r))
    }
    assert.equal(calls, rounds, 'every fresh ArrayBuffer went through the guard')
  } finally {
    native._setTransferGuard(testing.transferGuard) // lowcopy.js's own
    z.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

test('the copy backend needs no guard: a transfer after the send detaches, the bytes were copied already', () => {
  const p = testing.pair('tcp4')
  const z = new lc.ZeroCopySender(p.sock, { backend: 'copy' })
  try {
    const b = Buffer.from(pattern(0, 100000)) // JS-owned memory (an addon's is untransferable)
    z.send(b, 1)
    structuredClone(b.buffer, { transfer: [b.buffer] })
    assert.equal(b.length, 0, 'detached')
    assert.equal(testing.drainPattern(p.peer, 0, 100000, 3000), 100000)
    const c = z.reap()
    assert.equal(c.length, 1)
    assert.equal(c[0].copied, true)
    // A detached buffer sends nothing and gets no completion.
    assert.equal(z.send(b, 2), 0)
    assert.deepEqual(z.reap(), [])
  } finally {
    z.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

async function nodePair(serverOpts = {}) {
  const srv = net.createServer({ pauseOnConnect: true, ...serverOpts })
  srv.listen(0, '127.0.0.1')
  await once(srv, 'listening')
  const client = net.connect(srv.address().port, '127.0.0.1')
  const [[sock]] = await Promise.all([once(srv, 'connection'), once(client, 'connect')])
  return { srv, client, sock }
}

test('on a net.Socket: auto never picks the error queue, errqueue is refused, io_uring works beside Node\'s own writes', async () => {
  const { srv, client, sock } = await nodePair()
  try {
    assert.throws(() => new lc.ZeroCopySender(client, { backend: 'errqueue' }), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' })
    const z = new lc.ZeroCopySender(client)
    assert.ok(['io_uring', 'copy'].includes(z.backend), z.backend)
    // Ordering: Node writes only once nothing of lowcopy's is queued before it, and v.v.
    client.write('node-1;')
    await new Promise((r) => client.write('', r))
    z.send(Buffer.from('lowcopy-2;'), 'x')
    client.write('node-3;')
    sock.setEncoding('latin1')
    let got = ''
    sock.on('data', (d) => (got += d))
    sock.resume()
    while (got.length < 'node-1;lowcopy-2;node-3;'.length) await once(sock, 'data')
    assert.equal(got, 'node-1;lowcopy-2;node-3;')
    assert.equal(await z.waitAsync(3000), 1, 'the number ready, as wait returns')
    assert.deepEqual(z.reap().map((x) => x.userData), ['x'])
    z.close()
  } finally {
    client.destroy()
    sock.destroy()
    srv.close()
  }
})

// CPU time of the whole process over `ms` of an idle event loop.
async function idleCpuMs(ms) {
  const u0 = process.cpuUsage()
  await new Promise((r) => setTimeout(r, ms))
  const u = process.cpuUsage(u0)
  return (u.user + u.system) / 1000
}

test('no spin: an idle process with zerocopy sends in flight on a net.Socket uses ~0% CPU (and the error queue would spin)', async () => {
  const { srv, client, sock } = await nodePair()
  let z
  try {
    // The server side never reads: the client's sends stay in flight (unacknowledged data
    // beyond the peer's window), their completions pending.
    z = new lc.ZeroCopySender(client, { backend: 'io_uring' })
    const chunk = Buffer.alloc(65536, 0x61)
    let n = 0
    while (z.trySend(chunk, n) > 0) n++
    assert.ok(n > 0)
    await new Promise((r) => setTimeout(r, 100)) // let ACKs and notifications arrive
    const cpu = await idleCpuMs(1000)
    assert.ok(z.inflight + z.held > 0, 'sends are still held')
    assert.ok(cpu < 50, `idle with sends in flight used ${cpu.toFixed(1)} ms of CPU in 1000 ms`)
    console.log(`# io_uring on a net.Socket, ${n} sends held: ${cpu.toFixed(1)} ms CPU per idle second`)

    // Control: the error-queue backend on the same socket, given as an int fd (which lowcopy
    // cannot tell from one libuv does not poll). Its notifications keep EPOLLERR up and libuv
    // wakes for them on every loop iteration until they are reaped.
    const fd = client._handle.fd
    const eq = new lc.ZeroCopySender(fd, { backend: 'errqueue' })
    const small = Buffer.alloc(1000, 0x62)
    for (let i = 0; i < 4; i++) eq.trySend(small, i)
    sock.resume() // let the peer read, so the kernel acknowledges and notifies
    await new Promise((r) => setTimeout(r, 100))
    const spin = await idleCpuMs(500)
    console.log(`# control: errqueue notifications left unreaped on a socket libuv polls: ${spin.toFixed(1)} ms CPU per 500 ms`)
    // (On a loaded machine the spinning process gets only its share of a core.)
    assert.ok(spin > 40 && spin > 5 * cpu / 2, `the control did not spin (${spin.toFixed(1)} ms vs ${cpu.toFixed(1)} ms idle per second): the test would not see a spin`)
    eq.reap()
    eq.close()
  } finally {
    if (z) z.close()
    client.destroy()
    sock.destroy()
    srv.close()
  }
})

test('close() with sends in flight follows the close policy (a peer that never reads: reset, none abandoned); waitAsync then rejects', async () => {
  const p = testing.pair('tcp4')
  assert.equal(forceBuf(p.peer, true, 65536, 'zc_node close()'), null) // within rmem_max: no privilege
  const z = new lc.ZeroCopySender(p.sock, { backend: 'io_uring' })
  try {
    const b = Buffer.alloc(65536, 1)
    let n = 0
    while (z.trySend(b, n) > 0) n++
    const pending = z.waitAsync(5000)
    assert.ok(z.inflight > 0, 'sends in flight')
    const abandoned = z.close()
    assert.equal(abandoned, 0, 'the reset let the kernel give every page back')
    const s = z.stats()
    assert.equal(s.closeResets, 1)
    assert.equal(s.closeAbandoned, 0)
    assert.equal(z.held, 0, 'every buffer released as its completion came')
    await assert.rejects(pending, { name: 'AbortError' })
    assert.equal(z.closed, true)
    assert.throws(() => z.send(b), { code: 'EBADF' })
    assert.equal(z.close(), 0)
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

test('waitAsync resolves with the number ready, reaped on the JS thread (io_uring stays with its thread)', async () => {
  const p = testing.pair('tcp4')
  const z = new lc.ZeroCopySender(p.sock, { backend: 'io_uring' })
  try {
    z.send(pattern(0, 5000), 'a')
    testing.spawnReader(p.peer, 0, 5000, 50)
    const got = []
    while (got.length < 1) {
      const n = await z.waitAsync(3000)
      assert.equal(typeof n, 'number')
      got.push(...z.reap())
    }
    assert.equal(got[0].userData, 'a')
    assert.equal(await z.waitAsync(10), 0, 'nothing in flight: at once')
    assert.equal(z.wait(10), 0, 'wait too: 0 at once')
    assert.equal(testing.joinReaders(), 5000)
  } finally {
    z.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

for (const backend of backends) {
  test(`sendReapInto/reapInto write completions into a reused Float64Array (${backend})`, () => {
    const p = testing.pair('tcp4')
    const z = new lc.ZeroCopySender(p.sock, { backend })
    const out = new Float64Array(1 + 3 * 2) // room for two a call
    const got = new Map()
    const take = () => {
      assert.ok(out[0] <= 2)
      for (let j = 0; j < out[0]; j++) {
        assert.ok(!got.has(out[1 + 3 * j]))
        got.set(out[1 + 3 * j], [out[2 + 3 * j], out[3 + 3 * j]])
      }
    }
    try {
      let pos = 0
      for (let i = 0; i < 5; i++) {
        const n = z.sendReapInto(pattern(pos, 100 + i), 1000 + i + 0.5, out)
        assert.equal(n, 100 + i)
        take()
        pos += n
      }
      z.send(pattern(pos, 7), 'not a number')
      pos += 7
      assert.equal(testing.drainPattern(p.peer, 0, pos, 3000), pos)
      const deadline = Date.now() + 3000
      while (got.size < 6 && Date.now() < deadline) {
        const k = z.reapInto(out)
        assert.equal(k, out[0])
        take()
        if (k === 0) z.wait(100)
      }
      assert.equal(got.size, 6)
      for (let i = 0; i < 5; i++) assert.equal(got.get(1000 + i + 0.5)[0], 100 + i, 'numbers kept exactly')
      assert.ok([...got.keys()].some(Number.isNaN), 'a userData that is not a number: NaN')
      if (backend === 'copy') assert.ok([...got.values()].every(([, fl]) => fl & 1), 'COPIED')
      assert.equal(z.held, 0)
      assert.throws(() => z.reapInto(new Float64Array(3)), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' })
      assert.throws(() => z.reapInto(new Uint8Array(64)), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
      // Without options, sendReapInto is the function bound to the sender (lowcopy.js): the
      // same checks as the class method.
      assert.throws(() => z.sendReapInto(Buffer.from('x'), 'u', out), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
      assert.throws(() => z.sendReapInto(Buffer.from('x'), 1, new Uint8Array(64)), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
      assert.throws(() => z.sendReapInto('x', 1, out), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
      assert.throws(() => z.sendReapInto(Buffer.from('x'), 1, out, { flags: 1 << 30 }), { code: 'EINVAL' })
      assert.equal(z.held, 0)
      z.close()
      assert.throws(() => z.sendReapInto(Buffer.from('x'), 1, out), { code: 'EBADF' })
      assert.throws(() => z.sendReapInto(Buffer.from('x'), 1, out, {}), { code: 'EBADF' })
      // reapInto is bound too: closed is EBADF, and a `this` that is not this sender (a plain
      // object, an object made from it) is a TypeError, never a reap of some other sender.
      assert.throws(() => z.reapInto(out), { code: 'EBADF' })
      assert.throws(() => lc.ZeroCopySender.prototype.reapInto.call({}, out), TypeError)
      assert.throws(() => Object.create(z).reapInto(out), TypeError)
      const { reapInto } = z
      assert.throws(() => reapInto(out), TypeError)
    } finally {
      z.close()
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })
}

for (const backend of backends) {
  test(`sendBatch: numbers in a Float64Array or any values in an array, bound (no options) and class method alike (${backend})`, () => {
    const p = testing.pair('tcp4')
    const z = new lc.ZeroCopySender(p.sock, { backend })
    try {
      const obj = { tag: 'x' }
      let pos = 0
      const batch = (lens) => lens.map((n) => { const b = pattern(pos, n); pos += n; return b })
      const got = []
      const runs = [
        [batch([10, 11]), new Float64Array([1.5, -0]), undefined], // bound, numbers
        [batch([12, 13]), [obj, 'two'], undefined], // bound, any values
        [batch([14]), new Float64Array([7]), {}], // the class method (options)
        [batch([15]), undefined, { dontWait: true }],
      ]
      for (const [bufs, uds, options] of runs) {
        const r = z.sendBatch(bufs, uds, options)
        assert.deepEqual(Object.keys(r), ['sends', 'bytes', 'completions'])
        assert.equal(r.sends, bufs.length)
        assert.equal(r.bytes, bufs.reduce((a, b) => a + b.length, 0))
        got.push(...r.completions)
      }
      assert.equal(testing.drainPattern(p.peer, 0, pos, 3000), pos)
      const deadline = Date.now() + 3000
      while (got.length < 6 && Date.now() < deadline) {
        if (z.wait(100) > 0) got.push(...z.reap())
      }
      const byResult = new Map(got.map((c) => [c.result, c.userData]))
      assert.equal(byResult.size, 6)
      assert.equal(byResult.get(10), 1.5)
      assert.ok(Object.is(byResult.get(11), -0), 'numbers kept exactly (-0)')
      assert.equal(byResult.get(12), obj, 'the very object')
      assert.equal(byResult.get(13), 'two')
      assert.equal(byResult.get(14), 7)
      assert.equal(byResult.get(15), undefined)
      assert.equal(z.held, 0)
      // Up to 32 buffers go to the native call as arguments of their own, more as the array:
      // the same sends, completions and errors either way.
      for (const count of [32, 33]) {
        const uds = Float64Array.from({ length: count }, (_, i) => 1000 * count + i)
        const start = pos
        const r = z.sendBatch(batch(Array(count).fill(20)), uds)
        assert.deepEqual([r.sends, r.bytes], [count, 20 * count])
        const done = [...r.completions]
        assert.equal(testing.drainPattern(p.peer, start, pos - start, 3000), pos - start)
        while (done.length < count && z.wait(1000) > 0) done.push(...z.reap())
        assert.deepEqual(done.map((c) => c.userData).sort((x, y) => x - y), [...uds])
        const bad = Array.from({ length: count }, () => Buffer.from('a'))
        bad[count - 2] = 7
        assert.throws(() => z.sendBatch(bad), { name: 'TypeError', message: new RegExp(`"buffers\\[${count - 2}\\]"`) })
        assert.throws(() => z.sendBatch(bad.slice(0, 3), [1, 2]), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' })
      }
      assert.equal(z.held, 0)
      for (const options of [undefined, {}]) {
        const two = [Buffer.from('a'), Buffer.from('b')]
        assert.throws(() => z.sendBatch(two, new Float64Array(3), options), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' })
        assert.throws(() => z.sendBatch(two, [1], options), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' })
        assert.throws(() => z.sendBatch(two, new Uint8Array(2), options), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /Array or Float64Array/ })
        assert.throws(() => z.sendBatch([two[0], 'x'], undefined, options), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /"buffers\[1\]"/ })
        assert.equal(z.held, 0, 'a refused batch holds nothing')
      }
      assert.throws(() => lc.ZeroCopySender.prototype.sendBatch.call({}, [Buffer.from('a')]), TypeError)
      assert.throws(() => Object.create(z).sendBatch([Buffer.from('a')]), TypeError)
      z.close()
      assert.throws(() => z.sendBatch([Buffer.from('a')]), { code: 'EBADF' })
      assert.throws(() => z.sendBatch([Buffer.from('a')], undefined, {}), { code: 'EBADF' })
    } finally {
      z.close()
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })
}

for (const backend of backends) {
  test(`sendReap and reap hand out the same objects bound (no options) as the class methods do (${backend})`, () => {
    const p = testing.pair('tcp4')
    const z = new lc.ZeroCopySender(p.sock, { backend })
    try {
      const obj = { tag: 'x' }
      const values = [obj, 'str', 2.5, undefined, null, -0]
      const got = []
      let pos = 0
      values.forEach((v, i) => {
        // Even sends bound, odd ones through the class method (an options object).
        const r = i % 2 === 0 ? z.sendReap(pattern(pos, 10 + i), v) : z.sendReap(pattern(pos, 10 + i), v, {})
        assert.deepEqual(Object.keys(r), ['bytes', 'completions'])
        assert.equal(r.bytes, 10 + i)
        got.push(...r.completions)
        pos += r.bytes
      })
      assert.equal(testing.drainPattern(p.peer, 0, pos, 3000), pos)
      const deadline = Date.now() + 3000
      let round = 0
      while (got.length < values.length && Date.now() < deadline) {
        if (z.wait(100) > 0) got.push(...(round++ % 2 === 0 ? z.reap() : testing.classReap.call(z)))
      }
      assert.equal(got.length, values.length)
      for (const c of got) {
        assert.deepEqual(Object.keys(c), ['userData', 'result', 'copied', 'fallback'])
        assert.equal(typeof c.copied, 'boolean')
        assert.equal(typeof c.fallback, 'boolean')
      }
      const byResult = new Map(got.map((c) => [c.result, c.userData]))
      values.forEach((v, i) => assert.ok(Object.is(byResult.get(10 + i), v), `userData of send ${i}`))
      if (backend === 'copy') assert.ok(got.every((c) => c.copied && !c.fallback))
      assert.equal(z.held, 0)
      assert.deepEqual(z.reap(), [])
      assert.throws(() => lc.ZeroCopySender.prototype.reap.call({}), TypeError)
      assert.throws(() => Object.create(z).sendReap(Buffer.from('a')), TypeError)
      assert.throws(() => z.sendReap('x'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
      z.close()
      assert.throws(() => z.sendReap(Buffer.from('a')), { code: 'EBADF' })
      assert.throws(() => z.reap(), { code: 'EBADF' })
    } finally {
      z.close()
      testing.close(p.sock)
      testing.close(p.peer)
    }
  })
}
