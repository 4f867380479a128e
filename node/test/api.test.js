// Error shape, argument checking, descriptors (int fd, net.Socket, private duplicates), panics,
// Symbol.dispose, probe and the CLI.
'use strict'
const assert = require('node:assert/strict')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const util = require('node:util')
const { execFileSync } = require('node:child_process')
const { test } = require('node:test')
const { once } = require('node:events')
const { native: lc, testing, assertSysError } = require('./harness.js')

test('system errors look like Node\'s own: code, negative errno, syscall, message', () => {
  const p = testing.pair('tcp4')
  try {
    const e = (() => { try { lc.peekAt(p.sock, 0, 8, { dontWait: true }) } catch (x) { return x } })()
    assert.ok(e instanceof Error)
    assert.equal(e.code, 'EAGAIN')
    assert.equal(e.errno, -os.constants.errno.EAGAIN)
    assert.equal(util.getSystemErrorName(e.errno), e.code)
    assert.equal(e.syscall, 'peekAt')
    assert.match(e.message, /^EAGAIN: resource temporarily unavailable, peekAt$/)
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
  assert.throws(() => lc.peekAt(1000000, 0, 1), { code: 'EBADF', errno: -9, syscall: 'peekAt' })
  const f = testing.fileFd()
  try {
    assert.throws(() => new lc.Peeker(f), { code: 'ENOTSOCK', errno: -88, syscall: 'Peeker' })
  } finally {
    testing.close(f)
  }
})

test('every errno name agrees with util.getSystemErrorName', () => {
  for (let n = 1; n <= 133; n++) {
    let want
    try { want = util.getSystemErrorName(-n) } catch { continue }
    if (want.startsWith('Unknown')) continue
    assert.equal(lc.errnoName(n), want, `errno ${n}`)
    assert.equal(lc.errnoName(-n), want)
  }
  assert.equal(lc.errnoName(95), 'ENOTSUP') // EOPNOTSUPP's number, as Node names it
})

test('wrong argument types are TypeErrors, values out of range RangeErrors (ERR_* codes)', () => {
  const p = testing.pair('tcp4')
  const peeker = new lc.Peeker(p.sock)
  const z = new lc.ZeroCopySender(p.sock, { backend: 'copy' })
  try {
    const T = { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' }
    const R = { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' }
    const V = { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' }
    assert.throws(() => lc.peekAt('3', 0, 1), T)
    assert.throws(() => lc.peekAt({}, 0, 1), T)
    assert.throws(() => lc.peekAt(null, 0, 1), T)
    assert.throws(() => lc.peekAt(undefined, 0, 1), T)
    assert.throws(() => lc.peekAt(-1, 0, 1), R)
    assert.throws(() => lc.peekAt(1.5, 0, 1), R)
    assert.throws(() => lc.peekAt(2 ** 31, 0, 1), R)
    assert.throws(() => lc.peekAt(p.sock, 'x', 1), T)
    assert.throws(() => lc.peekAt(p.sock, -1, 1), R)
    assert.throws(() => lc.peekAt(p.sock, 0, 2 ** 40), R) // never an allocation abort
    assert.throws(() => lc.peekAt(p.sock, 0, NaN), R)
    assert.throws(() => lc.peekAt(p.sock, 0, 1, 'dontWait'), T)
    assert.throws(() => lc.peekAt(p.sock, 0, 1, { dontWait: 1 }), T)
    assert.throws(() => lc.peekInto(p.sock, 0, 'not a buffer'), T)
    assert.throws(() => lc.peekInto(p.sock, 0, [1, 2, 3]), T)
    assert.throws(() => peeker.peekInto(new ArrayBuffer(8)), T)
    assert.throws(() => peeker.seek(-5), R)
    assert.throws(() => peeker.consume('1'), T)
    assert.throws(() => new lc.Peeker(p.sock, { mode: 'fast' }), V)
    assert.throws(() => new lc.ZeroCopySender(p.sock, { backend: 'tcp' }), V)
    assert.throws(() => z.send('a string', 1), T)
    assert.throws(() => z.send([Buffer.from('a'), 7], 1), T)
    assert.throws(() => z.sendTo(Buffer.from('a'), 70000, '127.0.0.1'), R)
    assert.throws(() => z.sendTo(Buffer.from('a'), 9, 'localhost'), V)
    assert.throws(() => lc.recvAtLeast(p.sock, Buffer.alloc(4), 1, { timeoutMs: 'soon' }), T)
    // Flags the call does not take: the kernel's own EINVAL, as in C.
    assert.throws(() => peeker.peekInto(Buffer.alloc(4), { flags: 0x20 }), { code: 'EINVAL', errno: -22 })
    // Any typed array or DataView is bytes.
    testing.writeAllSync(p.peer, Buffer.from('abcdefgh'))
    testing.waitQueued(p.sock, 8)
    const u16 = new Uint16Array(2)
    assert.equal(peeker.peekInto(u16), 4)
    assert.equal(Buffer.from(u16.buffer).toString(), 'abcd')
    const dv = new DataView(new ArrayBuffer(10), 2, 4)
    assert.equal(lc.peekInto(p.sock, 4, dv), 4)
    assert.equal(Buffer.from(dv.buffer, 2, 4).toString(), 'efgh')
  } finally {
    peeker.close()
    z.close()
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

test('a panic inside the addon is a thrown Error, never an abort', () => {
  assert.throws(() => testing.panic(), (e) => e instanceof Error && /testing\.panic/.test(e.message))
  assert.equal(lc.errnoName(11), 'EAGAIN', 'the addon works on after it')
})

test('every object works on its own duplicate: closing the fd given, and reusing its number, do not reach it', () => {
  const p = testing.pair('tcp4')
  const peeker = new lc.Peeker(p.sock)
  assert.notEqual(peeker.fd, p.sock)
  testing.close(p.sock) // the caller's number is gone...
  const reused = testing.fileFd() // ...and most likely handed out again at once
  try {
    testing.writeAllSync(p.peer, Buffer.from('still here'))
    testing.waitQueued(peeker.fd, 10)
    assert.equal(peeker.peek(100).toString(), 'still here', 'the connection lives in the duplicate')
    assert.throws(() => lc.peekAt(reused, 0, 1), { code: 'ENOTSOCK' }) // the number is a file now
  } finally {
    const fd = peeker.fd
    peeker.close()
    assert.equal(testing.isOpen(fd), false, 'close() closes the duplicate')
    assert.equal(peeker.fd, -1)
    peeker.close() // twice: nothing
    testing.close(reused)
    testing.close(p.peer)
  }
})

test('net.Socket arguments: the handle\'s fd; not connected or destroyed is EBADF; FileHandle-like {fd}', async () => {
  assert.throws(() => lc.peekSupported(new net.Socket()), { code: 'EBADF', syscall: 'peekSupported' })
  const srv = net.createServer({ pauseOnConnect: true })
  srv.listen(0, '127.0.0.1')
  await once(srv, 'listening')
  const c = net.connect(srv.address().port, '127.0.0.1')
  const [[s]] = await Promise.all([once(srv, 'connection'), once(c, 'connect')])
  try {
    assert.equal(lc.peekSupported(s), true)
    assert.equal(lc.peekSupported({ fd: s._handle.fd }), true)
    assert.throws(() => lc.peekSupported({ fd: -1 }), { code: 'EBADF' })
    c.destroy()
    s.destroy()
    await once(s, 'close')
    assert.throws(() => lc.peekSupported(s), { code: 'EBADF' })
    assert.throws(() => new lc.Peeker(s), { code: 'EBADF', syscall: 'Peeker' })
  } finally {
    srv.close()
  }
})

test('Symbol.dispose closes the object (using / explicit)', () => {
  const p = testing.pair('tcp4')
  try {
    const peeker = new lc.Peeker(p.sock)
    const z = new lc.ZeroCopySender(p.sock, { backend: 'copy' })
    assert.equal(typeof peeker[Symbol.dispose], 'function')
    peeker[Symbol.dispose]()
    z[Symbol.dispose]()
    assert.equal(peeker.closed, true)
    assert.equal(z.closed, true)
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
})

test('probe() and npx lowcopy probe', () => {
  const c = lc.probe()
  for (const k of ['peekOffTcp4', 'peekOffTcp6', 'peekOffUnix', 'peekOffMptcp', 'zerocopyTcp', 'zerocopyUdp', 'uringSendZc', 'uringSendmsgZc']) {
    assert.equal(typeof c[k], 'boolean', k)
  }
  assert.equal(c.peekOffMptcp, false)
  assert.ok([0, 16, 64].includes(c.tcpZerocopyReceiveSize) || c.tcpZerocopyReceiveSize > 0)
  const bin = path.join(__dirname, '..', 'bin', 'lowcopy.js')
  const out = execFileSync(process.execPath, [bin, 'probe'], { encoding: 'utf8' })
  assert.match(out, /peekOffTcp4/)
  const json = JSON.parse(execFileSync(process.execPath, [bin, 'probe', '--json'], { encoding: 'utf8' }))
  assert.deepEqual(json, c)
  assert.throws(() => execFileSync(process.execPath, [bin, 'nope'], { stdio: 'pipe' }), (e) => e.status === 2)
})

test('the package entry is what package.json names, with the types beside it', () => {
  const pkg = require('../package.json')
  assert.equal(require(path.join(__dirname, '..', pkg.main)), lc)
  assert.ok(require('node:fs').existsSync(path.join(__dirname, '..', pkg.types)))
  assert.equal(lc._setTransferGuard, undefined, 'internal hook not exported')
  assert.equal(lc.testing, undefined, 'test fixtures not exported')
})

void assertSysError
