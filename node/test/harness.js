// The behaviour tables of tests/scenarios/*.json, run against this package the way
// core/tests/*scenarios.rs (Rust) and tests/c/*scenarios.c (C) run them: each scenario once per
// transport (and mode or backend), the same steps, the same expected results. Each run is one
// node:test test; a run closes every descriptor it opened (checked).
'use strict'
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const util = require('node:util')
const { test } = require('node:test')

const native = require('../lowcopy.js')
const { testing } = require('../index.js')

const TABLES = path.resolve(__dirname, '..', '..', 'tests', 'scenarios')

function loadTable(file) {
  return JSON.parse(fs.readFileSync(path.join(TABLES, file), 'utf8'))
}

/// Sleeps the JS thread (the peer's writers run on native threads meanwhile).
const sleeper = new Int32Array(new SharedArrayBuffer(4))
function sleepMs(ms) {
  Atomics.wait(sleeper, 0, 0, ms)
}

/// Checks that `e` is a lowcopy system error for `name` (or any of a list of names): Node's
/// shape, code/errno agreeing with util.getSystemErrorName (or, where libuv has no name for
/// the errno, with os.constants.errno).
function assertSysError(e, names, ctx) {
  const list = Array.isArray(names) ? names : [names]
  assert.ok(e instanceof Error, `${ctx}: want ${list.join('|')}, got ${util.inspect(e)}`)
  assert.equal(typeof e.errno, 'number', `${ctx}: not a system error: ${util.inspect(e)}`)
  const want = list.map((n) => -os.constants.errno[n])
  assert.ok(want.includes(e.errno), `${ctx}: want ${list.join('|')}, got ${e.code} (${e.errno}): ${e.message}`)
  // libuv names most errnos; for the rest (ENOMSG) the code is the kernel's name.
  const uv = util.getSystemErrorName(e.errno)
  const name = uv.startsWith('Unknown')
    ? Object.keys(os.constants.errno).find((k) => os.constants.errno[k] === -e.errno)
    : uv
  assert.equal(e.code, name, `${ctx}: code`)
  assert.equal(typeof e.syscall, 'string', `${ctx}: syscall`)
}

/// A socket buffer of `size` bytes as SO_RCVBUFFORCE / SO_SNDBUFFORCE would set it: the plain
/// option within net.core.{r,w}mem_max (the kernel then does the same), the forced one above
/// it. Returns null, or why it cannot be done here (no CAP_NET_ADMIN), which is also appended
/// to $LOWCOPY_SKIP_LOG for scripts/test.sh.
function forceBuf(fd, rcv, size, part) {
  const fs = require('node:fs')
  const name = rcv ? 'rmem_max' : 'wmem_max'
  let limit = 0
  try { limit = Number(fs.readFileSync(`/proc/sys/net/core/${name}`, 'utf8')) } catch { /* 0 */ }
  const opt = rcv ? (size <= limit ? 'SO_RCVBUF' : 'SO_RCVBUFFORCE') : (size <= limit ? 'SO_SNDBUF' : 'SO_SNDBUFFORCE')
  const [, e] = attempt(() => testing.setsockopt(fd, opt, size))
  if (!e) return null
  if (e.code !== 'EPERM') throw e
  const why = `a ${size}-byte socket buffer is above net.core.${name} (${limit}): SO_${rcv ? 'RCV' : 'SND'}BUFFORCE needs CAP_NET_ADMIN`
  if (process.env.LOWCOPY_SKIP_LOG) fs.appendFileSync(process.env.LOWCOPY_SKIP_LOG, `node ${part}: ${why}\n`)
  return why
}

/// Runs `fn()` and returns [value, error].
function attempt(fn) {
  try {
    return [fn(), null]
  } catch (e) {
    return [undefined, e]
  }
}

/// Expected results of a step: expect_err (a name or a list), expect_ret, expect (a string),
/// expect_pattern (a stream position, or true: where the last receive ended, `pos`).
function check(step, [ret, err], data, ctx, pos) {
  if (step.expect_err !== undefined) {
    assertSysError(err, step.expect_err, ctx)
    return 0
  }
  if (err) throw new Error(`${ctx}: unexpected error ${err.code || ''}: ${err.message}`, { cause: err })
  const n = typeof ret === 'boolean' ? Number(ret) : ret
  if (step.expect_ret !== undefined && typeof step.expect_ret === 'number') {
    assert.equal(n, step.expect_ret, `${ctx}: return value`)
  }
  if (step.expect !== undefined) {
    assert.equal(Buffer.from(data.subarray(0, n)).toString('latin1'), step.expect, `${ctx}: bytes`)
  }
  if (step.expect_pattern !== undefined && step.expect_pattern !== false) {
    const at = step.expect_pattern === true ? pos : step.expect_pattern
    assert.ok(n > 0 || step.expect_pattern === true, `${ctx}: no data`)
    assert.ok(Buffer.from(data.subarray(0, n)).equals(pattern(at, n)), `${ctx}: wrong bytes at stream position ${at}`)
  }
  return n
}

/// One node:test test per run of every scenario: transports x (axis values). `runOne(table,
/// scenario, transport, value)` does the run; the descriptors open afterwards must be those
/// open before. At least `minRuns` runs (a table that stopped expanding fails).
/// What this kernel offers (lowcopy's probe): the tables' kernel rules read it, never a
/// kernel's facts written in a table.
const caps = native.probe()

/// A run that does not apply here: logged for the suite's skip count ($LOWCOPY_SKIP_LOG, as
/// the Rust and C runners do), and reported skipped. The caller returns at once.
function skipPart(tc, part, reason) {
  const log = process.env.LOWCOPY_SKIP_LOG
  if (log) require('node:fs').appendFileSync(log, `node ${part}: ${reason}\n`)
  tc.skip(reason)
}

/// runOne(table, scenario, transport, axisValue, skip): skip(part, reason) marks the run not
/// applicable here (the caller returns after it).
function runTable(file, axis, minRuns, runOne) {
  const table = loadTable(file)
  // LOWCOPY_SCENARIO=substring: only the scenarios whose name contains it (CONTRIBUTING.md);
  // the minimum number of runs then does not apply.
  const only = process.env.LOWCOPY_SCENARIO || ''
  let runs = 0
  for (const sc of table.scenarios) {
    if (only && !sc.name.includes(only)) continue
    const values = axis ? sc[axis] : ['']
    for (const t of sc.transports) {
      for (const v of values) {
        runs++
        test(`${file} | ${sc.name} | ${t}${v ? ' | ' + v : ''}`, (tc) => {
          const before = testing.openFds()
          try {
            runOne(table, sc, t, v, (part, reason) => skipPart(tc, part, reason))
          } finally {
            try { testing.joinWriters() } catch { /* the run's own error matters more */ }
          }
          assert.equal(testing.openFds(), before, 'descriptors leaked by the run')
        })
      }
    }
  }
  if (only) {
    console.log(`${file}: LOWCOPY_SCENARIO=${JSON.stringify(only)}: ${runs} runs`)
    return
  }
  test(`${file}: at least ${minRuns} runs`, () => {
    assert.ok(runs >= minRuns, `${file}: only ${runs} runs`)
  })
}

/// `len` bytes of the tables' test pattern from stream position `from`: (p*131+7) % 251. Small
/// ones are made in JS (cheaper than a native call, which matters in tight send loops).
function pattern(from, len) {
  if (len > 4096) return testing.pattern(from, len)
  const b = Buffer.allocUnsafe(len)
  for (let i = 0; i < len; i++) b[i] = ((from + i) * 131 + 7) % 251
  return b
}

module.exports = { native, caps, testing, pattern, loadTable, sleepMs, assertSysError, attempt, check, runTable, forceBuf }
