// Peeker.peekInto(buf) without options and Peeker.seek(offset): lowcopy.js routes them to
// native functions bound to the peeker (native._peekerBind) instead of the napi-rs class
// methods. They must behave exactly as the class methods do: the same bytes and cursor, the
// same errors (shape, code, syscall), the same refusals of wrong arguments and wrong `this`,
// and they must stay memory-safe when the peeker is closed, busy, frozen or collected.
'use strict'
const assert = require('node:assert/strict')
const { test } = require('node:test')
const { native: lc, testing, assertSysError } = require('./harness.js')

const { classPeekInto, classSeek } = testing

function withPair(fn) {
  const p = testing.pair('tcp4')
  try {
    return fn(p)
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
}

const thrown = (f) => {
  try {
    f()
  } catch (e) {
    return e
  }
  assert.fail('did not throw')
}

test('the bound path gives the class method\'s bytes and cursor, and is used without options', () => withPair((p) => {
  testing.writeAllSync(p.peer, Buffer.from('0123456789abcdef'))
  testing.waitQueued(p.sock, 16)
  const peeker = new lc.Peeker(p.sock)
  try {
    assert.equal(typeof classPeekInto, 'function')
    assert.notEqual(lc.Peeker.prototype.peekInto, classPeekInto, 'lowcopy.js installed its own peekInto')
    const a = Buffer.alloc(4)
    assert.equal(peeker.peekInto(a), 4)
    assert.equal(a.toString(), '0123')
    assert.equal(peeker.offset, 4)
    // After the first call the peeker holds its bound functions (a symbol, not enumerable).
    assert.deepEqual(Object.keys(peeker), [])
    const syms = Object.getOwnPropertySymbols(peeker)
    assert.equal(syms.length, 1)
    assert.equal(typeof peeker[syms[0]].peekInto, 'function')
    assert.equal(typeof peeker[syms[0]].seek, 'function')
    // The class method and the options path move the same cursor.
    const b = Buffer.alloc(4)
    assert.equal(classPeekInto.call(peeker, b), 4)
    assert.equal(b.toString(), '4567')
    assert.equal(peeker.peekInto(b, {}), 4)
    assert.equal(b.toString(), '89ab')
    assert.equal(peeker.peekInto(b, { dontWait: true }), 4)
    assert.equal(b.toString(), 'cdef')
    // Nothing beyond the cursor: with dontWait, EAGAIN from the class method.
    assertSysError(thrown(() => peeker.peekInto(b, { dontWait: true })), 'EAGAIN', 'dontWait at the end')
    // seek: the bound one and the class method move the same cursor.
    assert.equal(peeker.seek(8), undefined)
    assert.equal(peeker.offset, 8)
    assert.equal(classSeek.call(peeker, 1), undefined)
    assert.equal(peeker.offset, 1)
    peeker.seek(2)
    // A pooled Buffer slice (byteOffset in Node's shared pool) is written only where it lies.
    const pool = Buffer.from('xxxxxxxx')
    const slice = pool.subarray(2, 5)
    assert.equal(peeker.peekInto(slice), 3)
    assert.equal(pool.toString(), 'xx234xxx')
    // Any ArrayBufferView: a Uint16Array is its bytes, a DataView its window.
    const u16 = new Uint16Array(2)
    assert.equal(peeker.peekInto(u16), 4)
    assert.equal(Buffer.from(u16.buffer).toString(), '5678')
    const dv = new DataView(new ArrayBuffer(6), 1, 3)
    assert.equal(peeker.peekInto(dv), 3)
    assert.equal(Buffer.from(dv.buffer, 1, 3).toString(), '9ab')
    assert.equal(peeker.stats().bytesPeeked, 4 + 4 + 4 + 4 + 3 + 4 + 3)
  } finally {
    peeker.close()
  }
}))

test('the bound path refuses what the class method refuses, with the same errors', () => withPair((p) => {
  testing.writeAllSync(p.peer, Buffer.from('abcd'))
  testing.waitQueued(p.sock, 4)
  const peeker = new lc.Peeker(p.sock)
  try {
    for (const bad of ['str', [1, 2], new ArrayBuffer(4), null, undefined, 7, {}]) {
      const e1 = thrown(() => peeker.peekInto(bad))
      const e2 = thrown(() => classPeekInto.call(peeker, bad))
      assert.equal(e1.name, 'TypeError')
      assert.equal(e1.code, 'ERR_INVALID_ARG_TYPE')
      assert.equal(e1.message, e2.message)
    }
    // An empty view and a detached one (a transfer emptied it): the core's EINVAL, never a
    // write through a stale pointer.
    const e0 = thrown(() => peeker.peekInto(Buffer.alloc(0)))
    assertSysError(e0, 'EINVAL', 'empty buffer')
    assert.equal(e0.syscall, 'peekInto')
    const ab = new ArrayBuffer(8)
    const u8 = new Uint8Array(ab)
    structuredClone(ab, { transfer: [ab] })
    assert.equal(u8.byteLength, 0, 'detached')
    assertSysError(thrown(() => peeker.peekInto(u8)), 'EINVAL', 'detached buffer')
    // seek: Node's validators' errors, as the class method throws them.
    for (const [bad, name, code] of [['1', 'TypeError', 'ERR_INVALID_ARG_TYPE'], [undefined, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [-1, 'RangeError', 'ERR_OUT_OF_RANGE'], [1.5, 'RangeError', 'ERR_OUT_OF_RANGE'], [NaN, 'RangeError', 'ERR_OUT_OF_RANGE']]) {
      const e1 = thrown(() => peeker.seek(bad))
      const e2 = thrown(() => classSeek.call(peeker, bad))
      assert.equal(e1.name, name, `seek(${bad})`)
      assert.equal(e1.code, code, `seek(${bad})`)
      assert.equal(e1.message, e2.message)
    }
    // Beyond what SO_PEEK_OFF represents (an int): EOVERFLOW, cursor unchanged.
    const eo = thrown(() => peeker.seek(2 ** 40))
    assertSysError(eo, 'EOVERFLOW', 'seek(2^40)')
    assert.equal(eo.syscall, 'seek')
    assert.equal(peeker.offset, 0, 'no refused call moved the cursor')
  } finally {
    peeker.close()
  }
}))

test('a `this` that is not a Peeker is a TypeError, never a call on some other peeker', () => withPair((p) => {
  const peeker = new lc.Peeker(p.sock)
  try {
    const buf = Buffer.alloc(4)
    const { peekInto } = peeker
    assert.throws(() => peekInto(buf), TypeError)
    assert.throws(() => lc.Peeker.prototype.peekInto.call({}, buf), TypeError)
    assert.throws(() => lc.Peeker.prototype.peekInto.call(7, buf), TypeError)
    assert.throws(() => lc.Peeker.prototype.peekInto.call(Object.create(lc.Peeker.prototype), buf), TypeError)
    assert.throws(() => lc.Peeker.prototype.peekInto.call(null, buf), TypeError)
    const { seek } = peeker
    assert.throws(() => seek(0), TypeError)
    assert.throws(() => lc.Peeker.prototype.seek.call({}, 0), TypeError)
    assert.throws(() => lc.Peeker.prototype.seek.call(Object.create(lc.Peeker.prototype), 0), TypeError)
  } finally {
    peeker.close()
  }
}))

test('closed, busy and frozen peekers: EBADF, EBUSY; a frozen one still peeks', async () => {
  const p = testing.pair('tcp4')
  const peeker = new lc.Peeker(p.sock)
  const frozen = Object.freeze(new lc.Peeker(p.sock))
  try {
    const buf = Buffer.alloc(4)
    // Busy: a peekAsync waits (nothing queued yet) holding the peeker.
    const pending = peeker.peekAsync(4, { timeoutMs: 5000 })
    const busy = thrown(() => peeker.peekInto(buf))
    assertSysError(busy, 'EBUSY', 'while peekAsync waits')
    assert.equal(busy.syscall, 'peekInto')
    const busySeek = thrown(() => peeker.seek(0))
    assertSysError(busySeek, 'EBUSY', 'seek while peekAsync waits')
    assert.equal(busySeek.syscall, 'seek')
    testing.writeAllSync(p.peer, Buffer.from('wxyz'))
    assert.equal((await pending).toString(), 'wxyz')
    peeker.seek(0)
    assert.equal(peeker.peekInto(buf), 4)
    assert.equal(buf.toString(), 'wxyz')
    // Frozen: no property can be added, so the function is bound again on each call.
    for (let i = 0; i < 2; i++) {
      frozen.seek(1)
      assert.equal(frozen.peekInto(buf), 3)
      assert.equal(buf.subarray(0, 3).toString(), 'xyz')
    }
    const bound = peeker[Object.getOwnPropertySymbols(peeker)[0]]
    peeker.close()
    for (const call of [() => peeker.peekInto(buf), () => classPeekInto.call(peeker, buf), () => bound.peekInto(buf)]) {
      const e = thrown(call)
      assertSysError(e, 'EBADF', 'closed')
      assert.equal(e.syscall, 'peekInto')
      assert.match(e.message, /^EBADF: bad file descriptor, peekInto$/)
    }
    for (const call of [() => peeker.seek(0), () => classSeek.call(peeker, 0), () => bound.seek(0)]) {
      const e = thrown(call)
      assertSysError(e, 'EBADF', 'closed')
      assert.equal(e.syscall, 'seek')
    }
  } finally {
    peeker.close()
    frozen.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

test('the bound functions keep their peeker alive past the Peeker object; collected, they close the duplicate', { skip: typeof global.gc !== 'function' && 'needs --expose-gc' }, async () => {
  const p = testing.pair('tcp4')
  try {
    testing.writeAllSync(p.peer, Buffer.from('kept'))
    testing.waitQueued(p.sock, 4)
    const before = testing.openFds()
    const buf = Buffer.alloc(4)
    let bound = (() => {
      const q = new lc.Peeker(p.sock)
      q.peekInto(buf)
      return q[Object.getOwnPropertySymbols(q)[0]].peekInto
    })()
    assert.equal(testing.openFds(), before + 1, 'the peeker\'s duplicate')
    const settle = async () => {
      for (let i = 0; i < 10; i++) {
        global.gc()
        await new Promise((r) => setImmediate(r))
      }
    }
    await settle() // the Peeker object is garbage now; the function still refers to its state
    assert.equal(testing.openFds(), before + 1, 'still open: the bound functions hold it')
    testing.writeAllSync(p.peer, Buffer.from('more'))
    testing.waitQueued(p.sock, 8)
    assert.equal(bound(buf), 4, 'peeks on at the cursor the peeker left')
    assert.equal(buf.toString(), 'more')
    bound = null
    await settle()
    assert.equal(testing.openFds(), before, 'closed once the functions were collected')
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
})
