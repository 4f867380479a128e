// A caller's own code that runs inside a call (an options getter, `{ get fd() }`, an array
// element's getter, an own `resizable` property) cannot make lowcopy write into, or send from,
// memory the caller gave up; an array of buffers sent is held by its buffers, not by the array;
// an async call makes the object's other calls EBUSY from the moment it is made.
'use strict'
const assert = require('node:assert/strict')
const { test } = require('node:test')
const { native: lc, testing, pattern } = require('./harness.js')

const SZ = 65536

function withPair(kind, fn) {
  const p = testing.pair(kind)
  try {
    return fn(p)
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
}

// `buf` filled with 0x11, and a function that detaches it (a transfer: its memory now belongs to
// the ArrayBuffer returned, kept so that a write through a stale address would show in it).
function detachable() {
  const buf = Buffer.alloc(SZ, 0x11)
  const moved = []
  const detach = () => {
    if (buf.length) moved.push(structuredClone(buf.buffer, { transfer: [buf.buffer] }))
  }
  const intact = () => moved.every((ab) => new Uint8Array(ab).every((x) => x === 0x11))
  return { buf, moved, detach, intact }
}

function peeking(fd, fn) {
  const pk = new lc.Peeker(fd)
  try {
    return fn(pk)
  } finally {
    pk.close()
  }
}

const calls = {
  'peekInto(fd, offset, buf, options)': (fd, d, o) => lc.peekInto(fd, 0, d.buf, o),
  'peekInto({ get fd() }, ...)': (fd, d) => lc.peekInto({ get fd() { d.detach(); return fd } }, 0, d.buf),
  'Peeker.peekInto(buf, options)': (fd, d, o) => peeking(fd, (pk) => pk.peekInto(d.buf, o)),
  'Peeker.peekAtInto(offset, buf, options)': (fd, d, o) => peeking(fd, (pk) => pk.peekAtInto(0, d.buf, o).len),
  'Peeker.peekv([buf], options)': (fd, d, o) => peeking(fd, (pk) => pk.peekv([d.buf], o)),
  'Peeker.peekvAt(offset, [buf], options)': (fd, d, o) => peeking(fd, (pk) => pk.peekvAt(0, [d.buf], o).len),
  'Peeker.peekv([buf, getter element])': (fd, d) => peeking(fd, (pk) => {
    const arr = [d.buf, null]
    Object.defineProperty(arr, 1, { get() { d.detach(); return Buffer.alloc(8) } })
    return pk.peekv(arr)
  }),
  'recvAtLeast(fd, buf, min, options)': (fd, d, o) => lc.recvAtLeast(fd, d.buf, 1, o),
  'recvAtLeast({ get fd() }, ...)': (fd, d) => lc.recvAtLeast({ get fd() { d.detach(); return fd } }, d.buf, 1),
  'Receiver.recvAtLeast(buf, min, options)': (fd, d, o) => { const r = new lc.Receiver(fd); try { return r.recvAtLeast(d.buf, 1, o) } finally { r.close() } },
}

for (const [name, call] of Object.entries(calls)) {
  test(`${name}: a getter that detaches the buffer mid-call: nothing is written into the memory it gave up`, () => {
    withPair('tcp4', (p) => {
      testing.writeAllSync(p.peer, Buffer.alloc(SZ, 0x50))
      testing.waitQueued(p.sock, SZ)
      const d = detachable()
      let ran = 0
      const options = { get timeoutMs() { ran++; d.detach(); return 1000 }, get dontWait() { ran++; d.detach(); return true } }
      let r
      try {
        r = call(p.sock, d, options)
      } catch (e) {
        r = e
      }
      assert.ok(ran > 0 || d.moved.length > 0, 'the getter ran')
      assert.equal(d.buf.length, 0, 'the buffer was detached')
      assert.ok(d.intact(), `the detached memory holds only its own bytes (result ${r})`)
      // The bytes queued are all still there: the call took nothing it did not deliver.
      const rest = testing.read(p.sock, SZ)
      assert.equal(rest.length, SZ, 'nothing was consumed')
    })
  })
}

test('the transfer guard reads the engine\'s own `resizable`: an own property neither hides a resizable buffer nor runs', () => {
  withPair('tcp4', (p) => {
    for (const backend of ['errqueue', 'io_uring']) {
      const z = new lc.ZeroCopySender(p.sock, { backend })
      try {
        const rab = new ArrayBuffer(SZ, { maxByteLength: 1 << 20 })
        Object.defineProperty(rab, 'resizable', { value: false })
        assert.throws(() => z.send(new Uint8Array(rab), 1, { dontWait: true }),
          (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE', backend)
        let ran = false
        const fixed = new Uint8Array(16)
        Object.defineProperty(fixed.buffer, 'resizable', { get() { ran = true; return false } })
        const out = new Float64Array(16)
        assert.equal(z.sendReapInto(fixed, 7, out), 16, backend)
        assert.equal(ran, false, `${backend}: the caller's getter never ran inside the send`)
        let ud = out[0] ? out[1] : undefined // io_uring's may come with the send
        if (ud === undefined) {
          z.wait(2000)
          assert.equal(z.reapInto(out), 1)
          ud = out[1]
        }
        assert.equal(ud, 7)
        assert.equal(testing.read(p.peer, 16).length, 16)
      } finally {
        z.close()
      }
    }
  })
})

test('sendReapInto: an element getter of the data array that detaches `out` runs before `out` is taken (RangeError, nothing sent)', () => {
  withPair('tcp4', (p) => {
    const z = new lc.ZeroCopySender(p.sock, { backend: 'errqueue' })
    try {
      const out = new Float64Array(64)
      const arr = [Buffer.alloc(8, 1), null]
      Object.defineProperty(arr, 1, {
        get() { structuredClone(out.buffer, { transfer: [out.buffer] }); return Buffer.alloc(8, 2) },
      })
      assert.throws(() => z.sendReapInto(arr, 1, out), (e) => e instanceof RangeError && e.code === 'ERR_OUT_OF_RANGE')
      assert.equal(z.inflight, 0, 'nothing sent')
    } finally {
      z.close()
    }
  })
})

// Queues sends of two-buffer arrays (each through `send`) until the socket is full, the peer
// not reading; `after` runs once they are queued (the caller drops or empties its arrays); then
// every byte on the wire must be the caller's pattern, with the freed memory reused meanwhile.
function arraysHeldByTheirBuffers(backend, send, after) {
  withPair('tcp4', (p) => {
    testing.setsockopt(p.peer, 'SO_RCVBUF', 65536) // the peer does not read yet: sends stay queued
    const z = new lc.ZeroCopySender(p.sock, { backend })
    try {
      const arrays = []
      let sent = 0
      for (;;) {
        const parts = [Buffer.from(pattern(sent, 32768)), Buffer.from(pattern(sent + 32768, 32768))]
        let n
        try {
          n = send(z, parts, sent)
        } catch (e) {
          if (e.code === 'EAGAIN') break
          throw e
        }
        sent += n
        arrays.push(parts)
        if (n < 65536) break
      }
      assert.ok(sent > 65536 && z.inflight > 1, `sends are queued (${sent} bytes)`)
      after(arrays)
      for (let i = 0; i < 5; i++) global.gc()
      const junk = []
      for (let i = 0; i < 500; i++) junk.push(Buffer.allocUnsafe(32768).fill(0xee))
      assert.equal(testing.drainPattern(p.peer, 0, sent, 5000), sent, 'the caller\'s bytes, in order')
      assert.ok(junk.length)
    } finally {
      z.close()
    }
  })
}

for (const backend of ['io_uring', 'errqueue']) {
  test(`${backend}: an array of buffers sent is held by its buffers: emptying the array and a GC put nothing foreign on the wire`, () => {
    arraysHeldByTheirBuffers(backend, (z, parts, sent) => z.send(parts, sent, { dontWait: true }),
      (arrays) => { for (const a of arrays) a.length = 0 }) // the caller reuses its iovec lists
  })
}

// A tcp4 pair whose accepted side has `data` queued.
async function withQueued(data, fn) {
  const p = testing.pair('tcp4')
  try {
    testing.writeAllSync(p.peer, Buffer.from(data))
    testing.waitQueued(p.sock, data.length)
    await fn(p)
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
}

test('Peeker.peekAsync: the peeker\'s other calls are EBUSY from the call on (before its thread starts), and work once it settled', async () => {
  await withQueued('abcdefgh', async (p) => {
    for (let i = 0; i < 20; i++) {
      const pk = new lc.Peeker(p.sock)
      const pending = pk.peekAsync(4, { timeoutMs: 1000 })
      for (const call of [() => pk.consume(4), () => pk.seek(2), () => pk.peek(4, { dontWait: true }), () => pk.peekAsync(4)]) {
        assert.throws(call, (e) => e.code === 'EBUSY' && e.errno === -16)
      }
      assert.equal((await pending).toString(), 'abcd')
      assert.equal(pk.peek(4, { dontWait: true }).toString(), 'efgh', 'the cursor moved by the async peek only')
      pk.close()
    }
  })
})

test('Receiver.recvAtLeastAsync: recvAtLeast and stats are EBUSY while it is pending; close() ends it at once, nothing lost', async () => {
  const p = testing.pair('tcp4')
  try {
    const r = new lc.Receiver(p.sock)
    const pending = r.recvAtLeastAsync(SZ, 100) // no timeout: only data or close() ends it
    assert.throws(() => r.recvAtLeast(Buffer.alloc(8), 1, { timeoutMs: 0 }), (e) => e.code === 'EBUSY')
    assert.throws(() => r.stats(), (e) => e.code === 'EBUSY')
    const t = Date.now()
    r.close()
    await assert.rejects(pending, (e) => e.name === 'AbortError')
    assert.ok(Date.now() - t < 2000, 'close() did not wait for data that never comes')
    for (let i = 0; i < 20; i++) { // close() before or after the wait's thread started
      const ri = new lc.Receiver(p.sock)
      const w = ri.recvAtLeastAsync(SZ, 100)
      ri.close()
      await assert.rejects(w, (e) => e.name === 'AbortError')
      assert.throws(() => ri.recvAtLeastAsync(SZ, 100), (e) => e.code === 'EBADF')
    }
    // The bytes that come later stay queued for whoever reads next.
    testing.writeAllSync(p.peer, Buffer.from('xyz'))
    testing.waitQueued(p.sock, 3)
    assert.equal(testing.read(p.sock, 8).toString(), 'xyz')
    const r2 = new lc.Receiver(p.sock)
    const got = r2.recvAtLeastAsync(64, 2, { timeoutMs: 2000 })
    testing.writeAllSync(p.peer, Buffer.from('hello'))
    assert.equal((await got).toString(), 'hello')
    assert.equal(r2.stats().calls >= 1, true)
    r2.close()
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

// Index accessors on Array.prototype: what the sender keeps of its own (the buffers of an array
// sent, the user values that are not numbers) is never in a JS array whose stores or loads could
// fall through to them.
function withIndexHooks(get, fn) {
  for (const i of [0, 1]) Object.defineProperty(Array.prototype, i, { configurable: true, get, set() {} })
  try {
    return fn()
  } finally {
    delete Array.prototype[0]
    delete Array.prototype[1]
  }
}

for (const backend of ['io_uring', 'errqueue']) {
  test(`${backend}: with setters on Array.prototype[0] and [1] that swallow stores, an array sent is still held by its buffers`, () => {
    arraysHeldByTheirBuffers(backend,
      (z, parts, sent) => withIndexHooks(() => undefined, () => z.send(parts, sent, { dontWait: true })),
      (arrays) => { arrays.length = 0 }) // the caller keeps none of them
  })

  test(`${backend}: reapInto and sendReapInto with a getter on Array.prototype[0] that detaches \`out\`: it never runs, \`out\` gets the completions`, () => {
    withPair('tcp4', (p) => {
      const z = new lc.ZeroCopySender(p.sock, { backend })
      try {
        for (const how of ['reapInto', 'sendReapInto']) {
          const out = new Float64Array(64).fill(-7)
          let ran = 0
          const ud = { any: 'object' } // not a number: kept by the sender as a JS value
          withIndexHooks(() => { ran++; structuredClone(out.buffer, { transfer: [out.buffer] }) }, () => {
            z.send(Buffer.alloc(100, 1), ud)
            testing.read(p.peer, 100)
            z.wait(2000)
            if (how === 'reapInto') z.reapInto(out)
            else z.sendReapInto(Buffer.alloc(10, 2), 5, out)
          })
          assert.equal(ran, 0, `${how}: no caller code ran`)
          assert.equal(out.length, 64)
          assert.ok(out[0] >= 1 && Number.isNaN(out[1]), `${how}: the object's completion (NaN: not a number)`)
          if (how === 'sendReapInto') {
            assert.equal(testing.read(p.peer, 10).length, 10)
            z.wait(2000)
            z.reap()
          }
        }
      } finally {
        z.close()
      }
    })
  })
}

test('Peeker.close() with a peekAsync pending: the socket is restored when it returns, so a new peeker over it works at once', async () => {
  await withQueued('abcdefgh', async (p) => {
    for (let i = 0; i < 50; i++) {
      const old = new lc.Peeker(p.sock)
      old.peek(8) // the cursor at the end: the async peek waits
      const pending = old.peekAsync(4)
      old.close()
      const pk = new lc.Peeker(p.sock)
      assert.equal(pk.peek(4).toString(), 'abcd')
      assert.equal(pk.peek(4).toString(), 'efgh', 'the new peeker\'s cursor is its own')
      await assert.rejects(pending, (e) => e.name === 'AbortError')
      assert.throws(() => pk.peek(4, { dontWait: true }), (e) => e.code === 'EAGAIN')
      pk.close()
    }
  })
})
