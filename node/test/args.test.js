// Every wrong argument is an error shaped like Node's own (README: "wrong arguments are
// TypeError/RangeError with Node's ERR_* codes"): the walk below calls every function the package
// exports and every method, getter and setter of every class it exports (found on the module
// object and the prototypes, so a new export is walked too: it fails until ARGS gives it valid
// base arguments) with each argument in turn replaced by values of the wrong type or range.
//
// Each throw (or rejection) must be a TypeError or RangeError whose `code` starts with ERR_, or,
// where the type is right but the value is a number no open descriptor has, a system error as
// Node makes them (`errno`, a `code` such as 'EBADF' that util.getSystemErrorName agrees with,
// `syscall`). A value of a wrong type must throw a TypeError, whose message ends as Node's own
// validators end theirs ("Received type string ('x')"); a wrong number where an integer, size or
// descriptor is expected (fraction, negative, NaN) a RangeError; a huge one a RangeError or a
// system error, or it may be accepted where the call documents a clamp (setRcvlowat). Every
// call runs on a fresh TCP pair whose peer sent 8 bytes and shut down, so nothing blocks.
'use strict'
const assert = require('node:assert/strict')
const path = require('node:path')
const util = require('node:util')
const { test } = require('node:test')

const lc = require('../lowcopy.js')
const { testing } = require('../index.js')

// Values of the wrong type or range, each with its category.
const BAD = [
  ['string', 'x', 'type'],
  ['numeric string', '3', 'type'],
  ['empty string', '', 'type'],
  ['long string', 'a'.repeat(40), 'type'],
  ['true', true, 'type'],
  ['false', false, 'type'],
  ['object', {}, 'type'],
  ['empty array', [], 'array'],
  ['array of numbers', [1, 2], 'type'],
  ['null', null, 'nullish'],
  ['undefined', undefined, 'nullish'],
  ['symbol', Symbol('s'), 'type'],
  ['bigint', 5n, 'type'],
  ['function', function f() {}, 'type'],
  ['float', 1.5, 'fraction'],
  ['negative', -1, 'negative'],
  ['negative float', -0.5, 'negative'],
  ['-Infinity', -Infinity, 'negative'],
  ['NaN', NaN, 'nan'],
  ['2**31', 2 ** 31, 'huge'],
  ['2**31 - 1 (no such fd)', 2 ** 31 - 1, 'big'],
  ['2**53', 2 ** 53, 'huge'],
  ['2**64', 2 ** 64, 'huge'],
  ['Infinity', Infinity, 'huge'],
  ['Number.MAX_VALUE', Number.MAX_VALUE, 'huge'],
]

// Argument kinds: a valid base value, whether it may be left out (undefined/null), the
// categories of BAD a call may accept (succeed with), and whether it is numeric (a wrong number
// is then a RangeError, not a TypeError). `fields`: an options object's own properties, walked
// the same way.
const KINDS = {
  fd: { base: (c) => c.sock, numeric: true, accepts: [] },
  size: { base: () => 0, numeric: true, accepts: ['big', 'huge'] },
  length: { base: () => 16, numeric: true, accepts: ['big'] }, // a size to allocate (<= INT_MAX)
  count: { base: () => 1, numeric: true, accepts: ['big', 'huge'] },
  window: { base: () => 65536, numeric: true, accepts: [] },
  port: { base: () => 9, numeric: true, accepts: [] },
  int32: { base: () => 11, numeric: true, accepts: ['negative', 'big'] },
  bool: { base: () => false, accepts: [], ok: (v) => typeof v === 'boolean' },
  address: { base: () => '127.0.0.1', accepts: [] },
  buf: { base: () => Buffer.alloc(16), accepts: [] },
  bufs: { base: () => [Buffer.alloc(8), Buffer.alloc(8)], accepts: ['array'], elements: 'buf' },
  data: { base: () => Buffer.from('ab'), accepts: ['array'], elements: 'buf' },
  batch: { base: () => [Buffer.from('ab'), Buffer.from('cd')], accepts: ['array'], elements: 'buf' },
  uds: { base: () => [1, 2], optional: true, accepts: ['array'], ok: (v) => Array.isArray(v) },
  timeout: { base: () => 0, optional: true, numeric: true, accepts: ['fraction', 'negative', 'big', 'huge-ms'] },
  any: { base: () => 1, optional: true, skip: true },
  number: { base: () => 1, accepts: ['fraction', 'negative', 'nan', 'huge', 'big'] }, // numeric userData: any number
  f64out: { base: () => new Float64Array(7), accepts: [] },
}
const bool = { kind: 'bool', optional: true }
const FIELDS = {
  peek: { dontWait: bool, flags: { kind: 'flags' } },
  async: { timeoutMs: { kind: 'timeout' } },
  recv: { timeoutMs: { kind: 'timeout' }, stats: { kind: 'object' } },
  send: { dontWait: bool, more: bool, flags: { kind: 'flags' } },
  peeker: { mode: { kind: 'enum' }, kind: { kind: 'enum' } },
  close: { restore: bool },
  sender: { backend: { kind: 'enum' }, adaptive: bool },
}
// Option field kinds: what a wrong value may do besides throwing a TypeError.
const isObject = (v) => typeof v === 'object' && v !== null
const FIELD_KINDS = {
  bool: { accepts: [], ok: (v) => typeof v === 'boolean' },
  flags: { numeric: true, accepts: [], sysOk: true }, // a negative or unknown bit: the kernel's EINVAL
  timeout: { numeric: true, nullOk: true, accepts: ['fraction', 'negative', 'big', 'huge-ms'] },
  enum: { nullOk: true, accepts: [] },
  object: { nullOk: true, accepts: [], ok: isObject },
}
const opts = (fields, base = {}) => ({ kind: 'options', fields: FIELDS[fields], base })

// The valid base arguments of every call: [kind or options spec, ...].
const ARGS = {
  consume: ['fd', 'size', opts('peek', { dontWait: true })],
  peekAt: ['fd', 'size', 'length', opts('peek', { dontWait: true })],
  peekInto: ['fd', 'size', 'buf', opts('peek', { dontWait: true })],
  peekAtAsync: ['fd', 'size', 'length', opts('async', { timeoutMs: 1000 })],
  peekSupported: ['fd'],
  setRcvlowat: ['fd', 'count'],
  recvAtLeast: ['fd', 'buf', 'count', opts('recv', { timeoutMs: 0 })],
  recvAtLeastAsync: ['fd', 'length', 'count', opts('recv', { timeoutMs: 0 })],
  probe: [],
  errnoName: ['int32'],
  'new Peeker': ['fd', opts('peeker')],
  'Peeker.close': [opts('close')],
  'Peeker.consume': ['size'],
  'Peeker.noteConsumed': ['size'],
  'Peeker.peek': ['length', opts('peek', { dontWait: true })],
  'Peeker.peekAsync': ['length', opts('async', { timeoutMs: 1000 })],
  'Peeker.peekAtInto': ['size', 'buf', opts('peek', { dontWait: true })],
  'Peeker.peekInto': ['buf', opts('peek', { dontWait: true })],
  'Peeker.peekv': ['bufs', opts('peek', { dontWait: true })],
  'Peeker.peekvAt': ['size', 'bufs', opts('peek', { dontWait: true })],
  'Peeker.seek': ['size'],
  'Peeker.setLowatArmed': ['bool'],
  'Peeker.stats': [],
  'new ZeroCopySender': ['fd', opts('sender', { backend: 'copy' })],
  'ZeroCopySender.close': [],
  'ZeroCopySender.reap': [],
  'ZeroCopySender.reapInto': ['f64out'],
  'ZeroCopySender.sendReapInto': ['data', 'number', 'f64out', opts('send', { dontWait: true })],
  'ZeroCopySender.send': ['data', 'any', opts('send', { dontWait: true })],
  'ZeroCopySender.trySend': ['data', 'any', opts('send')],
  'ZeroCopySender.sendReap': ['data', 'any', opts('send', { dontWait: true })],
  'ZeroCopySender.sendBatch': ['batch', 'uds', opts('send', { dontWait: true })],
  'ZeroCopySender.sendTo': ['data', 'port', 'address', 'any', opts('send', { dontWait: true })],
  'ZeroCopySender.stats': [],
  'ZeroCopySender.wait': ['timeout'],
  'ZeroCopySender.waitAsync': ['timeout'],
  'new ZeroCopyReceiver': ['fd', 'window'],
  'ZeroCopyReceiver.close': [],
  'ZeroCopyReceiver.recv': [opts('peek', { dontWait: true })],
  'ZeroCopyReceiver.setPeekOffTracking': ['bool'],
  'ZeroCopyReceiver.setTimeout': ['timeout'],
  'ZeroCopyReceiver.stats': [],
  'new Receiver': ['fd'],
  'Receiver.close': [],
  'Receiver.recvAtLeast': ['buf', 'count', opts('recv', { timeoutMs: 0 })],
  'Receiver.recvAtLeastAsync': ['length', 'count', opts('recv', { timeoutMs: 0 })],
  'Receiver.stats': [],
}
// How to make the instance a method runs on (a class's constructor arguments).
const INSTANCE = {
  Peeker: (c) => new lc.Peeker(c.sock),
  ZeroCopySender: (c) => new lc.ZeroCopySender(c.sock, { backend: 'copy' }),
  ZeroCopyReceiver: (c) => new lc.ZeroCopyReceiver(c.sock, 65536),
  Receiver: (c) => new lc.Receiver(c.sock),
}

function isClass(v) {
  return typeof v === 'function' && v.prototype &&
    Object.getOwnPropertyNames(v.prototype).some((k) => k !== 'constructor')
}

// The calls to walk, from the module object and the prototypes.
function calls() {
  const out = []
  for (const [name, v] of Object.entries(lc)) {
    if (typeof v !== 'function') continue
    if (!isClass(v)) {
      out.push({ name, type: 'function', fn: v })
      continue
    }
    out.push({ name: `new ${name}`, type: 'constructor', cls: v })
    for (const key of Object.getOwnPropertyNames(v.prototype)) {
      if (key === 'constructor') continue
      const d = Object.getOwnPropertyDescriptor(v.prototype, key)
      if (typeof d.value === 'function') out.push({ name: `${name}.${key}`, type: 'method', cls: name, key })
      if (d.get) out.push({ name: `${name}.${key} (getter)`, type: 'getter', cls: name, get: d.get })
      if (d.set) out.push({ name: `${name}.${key} (setter)`, type: 'setter', cls: name, set: d.set })
    }
  }
  return out
}

// A fresh connection per call: the peer's 8 bytes queued, then its FIN.
function context() {
  const p = testing.pair('tcp4')
  testing.writeAllSync(p.peer, Buffer.from('abcdefgh'))
  testing.shutdownWrite(p.peer)
  testing.waitQueued(p.sock, 8)
  return { sock: p.sock, peer: p.peer, objects: [] }
}

function release(c) {
  for (const o of c.objects) {
    try { o.close() } catch { /* closed */ }
  }
  testing.close(c.sock)
  testing.close(c.peer)
}

// What Node's validators say of a received value ("Received ..."), for the same value.
function nodeReceived(v) {
  try {
    if (typeof v === 'string') Buffer.alloc(v) // validateNumber
    else path.join(v) // validateString
  } catch (e) {
    if (e.code === 'ERR_INVALID_ARG_TYPE') return e.message.slice(e.message.indexOf('Received ') + 9)
  }
  return null
}

// One line for an error: its class, code and message.
function brief(e) {
  if (!(e instanceof Error)) return util.inspect(e)
  return `${e.constructor.name} ${e.code}${e.errno !== undefined ? ` (errno ${e.errno}, syscall ${e.syscall})` : ''}: ${e.message}`
}

function isSystemError(e) {
  return e instanceof Error && typeof e.errno === 'number' && e.errno < 0 &&
    typeof e.code === 'string' && /^E[A-Z0-9]+$/.test(e.code) &&
    util.getSystemErrorName(e.errno) === e.code && typeof e.syscall === 'string'
}

function isArgError(e) {
  return (e instanceof TypeError || e instanceof RangeError) &&
    typeof e.code === 'string' && e.code.startsWith('ERR_')
}

// Runs `fn` and returns [threw, error]; a promise it returns is awaited (a rejection counts
// as a throw), and an object it makes is closed with its context.
async function outcome(fn, c) {
  let r
  try {
    r = fn()
  } catch (e) {
    return [true, e]
  }
  if (r && typeof r.then === 'function') {
    try {
      await r
    } catch (e) {
      return [true, e]
    }
  } else if (r && typeof r.close === 'function') {
    c.objects.push(r)
  }
  return [false, undefined]
}

// Checks one outcome: a failure message, or null.
function judge(what, threw, e, cat, spec, value) {
  const show = () => (threw ? brief(e) : 'no throw')
  if (threw) {
    if (!isArgError(e) && !isSystemError(e)) return `${what}: not a Node-shaped error: ${brief(e)}`
  }
  if (spec.skip) return null
  const accepted = (cat === 'nullish' && (spec.optional || spec.nullOk)) || (spec.ok && spec.ok(value)) ||
    spec.accepts.includes(cat) ||
    (cat === 'huge' && spec.accepts.includes('huge-ms') && value !== Infinity && value !== Number.MAX_VALUE)
  if (accepted) return null
  if (!threw) return `${what}: no throw, want ${wantName(cat, spec)}`
  if (cat === 'type' || cat === 'nullish' || cat === 'array' || !spec.numeric) {
    if (!(e instanceof TypeError) || !['ERR_INVALID_ARG_TYPE', 'ERR_INVALID_ARG_VALUE'].includes(e.code)) {
      return `${what}: want a TypeError, got ${show()}`
    }
    // The value itself, or for an array the element refused ("data[0]").
    const tails = [value, ...(Array.isArray(value) ? value : [])].map(nodeReceived).filter((t) => t !== null)
    if (e.code === 'ERR_INVALID_ARG_TYPE' && tails.length && !tails.some((t) => e.message.endsWith(`Received ${t}`))) {
      return `${what}: message ${JSON.stringify(e.message)} does not end as Node's: "Received ${tails[0]}"`
    }
    return null
  }
  // A wrong number: RangeError, or the kernel's answer (EBADF for no such fd, EOVERFLOW, EINVAL).
  if (e instanceof RangeError && e.code === 'ERR_OUT_OF_RANGE') return null
  if (isSystemError(e) && (cat === 'big' || cat === 'huge' || spec.sysOk)) return null
  return `${what}: want a RangeError, got ${show()}`
}

function wantName(cat, spec) {
  if (cat === 'type' || cat === 'nullish' || cat === 'array' || !spec.numeric) return 'a TypeError'
  return 'a RangeError or a system error'
}

// The wrong argument lists of one call: { label, cat, spec, value, build(context) }.
function* mutations(call) {
  const specs = ARGS[call.name]
  for (let i = 0; i < specs.length; i++) {
    const s = specs[i]
    // An options object: any object but an array (as Node's validateObject).
    const spec = typeof s === 'string' ? KINDS[s] : { optional: true, accepts: [], ok: (v) => isObject(v) && !Array.isArray(v) }
    const at = (v) => (c) => {
      const args = baseArgs(call, c)
      args[i] = typeof v === 'function' && v.field ? v(args[i]) : v
      return args
    }
    for (const [label, value, cat] of BAD) {
      yield { label: `arg ${i} = ${label}`, cat, spec, value, build: at(value) }
      if (spec.elements && cat !== 'nullish' && cat !== 'array') {
        const list = [Buffer.alloc(4), value]
        yield { label: `arg ${i} = [buffer, ${label}]`, cat: 'type', spec: KINDS[spec.elements], value, build: at(list) }
      }
    }
    if (typeof s !== 'string') {
      for (const [field, f] of Object.entries(s.fields)) {
        const fk = { ...FIELD_KINDS[f.kind], optional: false }
        for (const [label, value, cat] of BAD) {
          if (value === undefined) continue // an absent option
          const set = Object.assign((o) => ({ ...o, [field]: value }), { field: true })
          yield { label: `arg ${i} = { ${field}: ${label} }`, cat, spec: fk, value, build: at(set) }
        }
      }
    }
  }
}

test('every export, method, getter and setter: wrong arguments are Node-shaped errors', async () => {
  const failures = []
  let n = 0
  const all = calls()
  for (const call of all) {
    if (call.type === 'getter' || call.type === 'setter') continue
    if (!ARGS[call.name]) {
      failures.push(`${call.name}: a new export or method: give it valid base arguments in ARGS`)
      continue
    }
    // The base call itself must work (or fail as the socket answers), else the walk proves nothing.
    const base = { label: 'base', cat: 'base', build: (c) => baseArgs(call, c) }
    for (const m of [base, ...mutations(call)]) {
      const c = context()
      try {
        const args = m.build(c)
        let fn
        if (call.type === 'function') fn = () => call.fn(...args)
        else if (call.type === 'constructor') fn = () => new call.cls(...args)
        else {
          const obj = INSTANCE[call.cls](c)
          c.objects.push(obj)
          fn = () => obj[call.key](...args)
        }
        const [threw, e] = await outcome(fn, c)
        n++
        if (m === base) {
          if (threw && !isSystemError(e)) failures.push(`${call.name}(base): ${brief(e)}`)
          continue
        }
        const f = judge(`${call.name}: ${m.label}`, threw, e, m.cat, m.spec, m.value)
        if (f) failures.push(f)
      } finally {
        release(c)
      }
    }
  }
  // Getters and setters: on a live object and on a closed one, never anything but a value or
  // a Node-shaped error; setters with every wrong value.
  for (const call of all) {
    if (call.type !== 'getter' && call.type !== 'setter') continue
    for (const closed of [false, true]) {
      const c = context()
      try {
        const obj = INSTANCE[call.cls](c)
        c.objects.push(obj)
        if (closed) obj.close()
        const values = call.type === 'getter' ? [['get', undefined, 'base']] : BAD
        for (const [label, value, cat] of values) {
          const [threw, e] = await outcome(() => (call.type === 'getter' ? call.get.call(obj) : call.set.call(obj, value)), c)
          n++
          if (threw && !isArgError(e) && !isSystemError(e)) {
            failures.push(`${call.name}${closed ? ' (closed)' : ''} ${label}: ${brief(e)}`)
          } else if (call.type === 'setter' && !threw && cat !== 'base') {
            failures.push(`${call.name} ${label}: no throw`)
          }
        }
      } finally {
        release(c)
      }
    }
  }
  for (const name of Object.keys(ARGS)) {
    if (!all.some((c) => c.name === name)) failures.push(`ARGS names ${name}, which the package does not export`)
  }
  assert.ok(n > 1000, `walked ${n} calls`)
  assert.deepEqual(failures, [], `${failures.length} of ${n} calls:\n${failures.join('\n')}`)
})

// The base arguments of `call` on context `c`.
function baseArgs(call, c) {
  return ARGS[call.name].map((s) => (typeof s === 'string' ? KINDS[s].base(c) : { ...s.base }))
}

// Calls that allocate their result from a length: sized by what the socket can hold
// (lowcopy::recv_buffer_len), not by the length asked for. Each runs in a process of its own,
// so that its peak RSS is the call's: before, peekAt(fd, 0, 1e9) zero-filled a 1 GB Buffer to
// return 11 bytes.
test('a huge length returns what is queued without allocating it (peak RSS)', async () => {
  const { execFileSync } = require('node:child_process')
  const script = `
    const lc = require(${JSON.stringify(require.resolve('../lowcopy.js'))})
    const { testing } = require(${JSON.stringify(require.resolve('../index.js'))})
    const p = testing.pair('tcp4')
    testing.writeAllSync(p.peer, Buffer.from('hello world'))
    testing.waitQueued(p.sock, 11)
    const call = process.argv[1]
    const before = process.resourceUsage().maxRSS * 1024
    const run = {
      peekAt: () => lc.peekAt(p.sock, 0, 1e9),
      peekAtAsync: () => lc.peekAtAsync(p.sock, 0, 1e9, { timeoutMs: 5000 }),
      'Peeker.peek': () => new lc.Peeker(p.sock).peek(1e9),
      'Peeker.peekAsync': () => new lc.Peeker(p.sock).peekAsync(1e9, { timeoutMs: 5000 }),
      recvAtLeastAsync: () => lc.recvAtLeastAsync(p.sock, 1e9, 1, { timeoutMs: 5000 }),
      'Receiver.recvAtLeastAsync': () => new lc.Receiver(p.sock).recvAtLeastAsync(1e9, 1, { timeoutMs: 5000 }),
    }[call]
    Promise.resolve(run()).then((b) => {
      const grew = process.resourceUsage().maxRSS * 1024 - before
      console.log(JSON.stringify({ got: b.toString(), grew }))
    })`
  const calls = ['peekAt', 'peekAtAsync', 'Peeker.peek', 'Peeker.peekAsync', 'recvAtLeastAsync', 'Receiver.recvAtLeastAsync']
  const bad = []
  for (const call of calls) {
    const out = JSON.parse(execFileSync(process.execPath, ['-e', script, call], { encoding: 'utf8', timeout: 60000 }))
    assert.equal(out.got, 'hello world', call)
    // At most the socket's receive buffer (autotuned up to tcp_rmem[2]: 6-32 MiB).
    if (out.grew >= 64 << 20) bad.push(`${call}(1e9): peak RSS grew by ${out.grew} bytes`)
  }
  assert.deepEqual(bad, [])
})
