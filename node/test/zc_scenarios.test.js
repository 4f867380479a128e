// tests/scenarios/zc.json against the Node binding (see harness.js; the Rust runner is
// core/tests/zc_scenarios.rs). userData here is the table's number; the Node-only tests use
// other values.
'use strict'
const assert = require('node:assert/strict')
const { performance } = require('node:perf_hooks')
const { native: lc, caps, testing, pattern, sleepMs, attempt, check, runTable, forceBuf } = require('./harness.js')

// The core keeps one io_uring ring per thread, made the first time a sender uses io_uring on
// it and kept for the thread's life (core/src/zc/uring.rs): make the JS thread's now, so that
// the runs' descriptor counts (harness.js) see it before and after; a ring more would be a leak.
{
  const p = testing.pair('tcp4')
  try {
    new lc.ZeroCopySender(p.sock, { backend: 'io_uring' }).close()
  } catch { /* no io_uring here: the runs expect its errors */ } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
}

const STATS = {
  completions: 'completions', syscalls_reap: 'syscallsReap', zerocopy_off: 'zerocopyOff',
  copy_sends: 'copySends', zerocopy_sends: 'zerocopySends',
}

/// zc.json's kernel_rules, as core/tests/zc_scenarios.rs applies them: an explicit backend
/// this kernel lacks is refused at `new` (the run ends there), AUTO picks io_uring where
/// SEND_ZC works, else the error queue where SO_ZEROCOPY does, else copies. Returns the steps,
/// or null when the run does not apply here.
function kernelRules(sc, steps, transport, backend, ctx0, skip) {
  if (!transport.startsWith('tcp') && !transport.startsWith('udp')) return steps
  const soZerocopy = transport.startsWith('udp') ? caps.zerocopyUdp : caps.zerocopyTcp
  if (backend === 'auto' && sc.needs === 'zerocopy' && !caps.uringSendZc && !soZerocopy) {
    skip(`zc.json: ${ctx0}`, 'not applicable: AUTO has no zerocopy backend here (probe: no SEND_ZC, no SO_ZEROCOPY)')
    return null
  }
  const i = steps.findIndex((s) => s.op === 'new')
  if (i < 0) return steps
  let refuse = null
  if (backend === 'io_uring' && !caps.uringSendZc) refuse = ['EPERM', 'EOPNOTSUPP', 'ENOMEM']
  else if (backend === 'errqueue' && !soZerocopy) refuse = ['ENOPROTOOPT', 'EOPNOTSUPP']
  if (refuse) return [...steps.slice(0, i), { op: 'new', expect_err: refuse }]
  if (backend === 'auto') steps[i] = { ...steps[i], expect_backend: caps.uringSendZc ? 'io_uring' : soZerocopy ? 'errqueue' : 'copy' }
  return steps
}

/// RLIMIT_MEMLOCK binds this process: not root (CAP_IPC_LOCK) and a finite limit.
function memlockBound() {
  if (process.getuid() === 0) return false
  const m = require('node:fs').readFileSync('/proc/self/limits', 'utf8').match(/^Max locked memory\s+(\S+)/m)
  return !m || m[1] !== 'unlimited'
}

function runOne(table, sc, transport, backend, skip) {
  const ctx0 = `[${sc.name} | ${transport} | ${backend}]`
  let steps = sc.steps.map((s) => ({ ...s }))
  if (sc.needs === 'memlock' && memlockBound()) {
    return skip(`zc.json: ${ctx0}`, 'zerocopy pages in flight count against RLIMIT_MEMLOCK without CAP_IPC_LOCK; this scenario fills a socket with them')
  }
  const rule = table.no_zerocopy
  if (!rule.transports.includes(transport)) {
    steps = kernelRules(sc, steps, transport, backend, ctx0, skip)
    if (!steps) return
  }
  if (rule.transports.includes(transport)) {
    const i = steps.findIndex((s) => s.op === 'new')
    if (i >= 0) {
      if (backend === 'errqueue' || backend === 'io_uring') steps = [...steps.slice(0, i), { op: 'new', expect_err: rule.errno }]
      else if (backend === 'auto') steps[i] = { ...steps[i], expect_backend: rule.auto_backend }
    }
  }
  const owned = []
  let fd = 1000000
  let peer = null
  let peerPort = null
  let datagram = false
  if (transport === 'file') owned.push(fd = testing.fileFd())
  else if (transport.startsWith('listen_')) owned.push(fd = testing.listening(transport.slice('listen_'.length)))
  else if (transport !== 'closed') {
    const p = testing.pair(transport)
    owned.push(fd = p.sock)
    peer = p.peer
    peerPort = p.peerPort
    datagram = transport.startsWith('udp')
    if (sc.socket_rcvbuf && forceBuf(peer, true, sc.socket_rcvbuf, `zc.json [${sc.name} | ${transport} | ${backend}]`)) {
      testing.close(peer) // a part this process cannot run (logged): nothing to test
      for (const f of owned) testing.close(f)
      return
    }
  }
  let zc = null
  const sent = new Map() // userData -> bytes accepted
  const got = [] // completions
  let pos = 0 // stream position of the next send
  let received = 0 // what the peer has read and checked
  let timestamping = false
  let reader = false
  const Z = () => {
    assert.ok(zc, 'scenario sends before `new`')
    return zc
  }
  const opts = (step, dontWait) => {
    const o = {}
    if (step.dontwait || dontWait) o.dontWait = true
    if (step.flags !== undefined) o.flags = step.flags
    return o
  }
  // One send of `lens` bytes continuing the pattern (as one buffer per length), to the peer's
  // address for sendto.
  const send = (lens, ud, o, to, trySend) => {
    const total = lens.reduce((a, b) => a + b, 0)
    const data = pattern(pos, total)
    const views = []
    let at = 0
    for (const l of lens) {
      views.push(data.subarray(at, at + l))
      at += l
    }
    const arg = views.length === 1 ? views[0] : views
    const r = attempt(() => (to ? Z().sendTo(arg, peerPort, '127.0.0.1', ud, o) : trySend ? Z().trySend(arg, ud, o) : Z().send(arg, ud, o)))
    if (!r[1] && r[0] >= 0) {
      if (r[0] > 0) {
        assert.ok(!sent.has(ud), `user_data ${ud} used twice by the scenario`)
        sent.set(ud, r[0])
      }
      pos += datagram ? total : r[0]
    }
    return r
  }
  const reap = () => {
    for (;;) {
      const c = Z().reap()
      got.push(...c)
      if (c.length === 0) return
    }
  }
  const drainPeer = () => {
    if (pos > received) received += testing.drainPattern(peer, received, pos - received, 3000)
  }
  const cpuBound = (step, cpu, ctx) => {
    if (step.cpu_max_ms !== undefined) assert.ok(cpu <= step.cpu_max_ms, `${ctx}: used ${cpu.toFixed(1)} ms of CPU, want <= ${step.cpu_max_ms} (spinning while it waited?)`)
  }
  try {
    steps.forEach((step, i) => {
      const ctx = `${ctx0} step ${i} ${step.op}`
      switch (step.op) {
        case 'new': {
          const o = { backend: step.backend || backend }
          if (step.adaptive) o.adaptive = true
          const r = attempt(() => new lc.ZeroCopySender(fd, o))
          if (step.expect_err !== undefined) return void check(step, r, null, ctx)
          if (r[1]) throw r[1]
          zc = r[0]
          if (step.expect_backend) assert.equal(zc.backend, step.expect_backend, `${ctx}: backend`)
          return
        }
        case 'send': {
          const t0 = performance.now()
          const c0 = testing.threadCpuMs()
          const r = send([step.len], step.user_data, opts(step))
          const ms = performance.now() - t0
          check(step, r, null, ctx)
          if (step.min_ms !== undefined) assert.ok(ms >= step.min_ms, `${ctx}: returned after ${ms} ms`)
          return void cpuBound(step, testing.threadCpuMs() - c0, ctx)
        }
        case 'sendv':
          return void check(step, send(step.lens, step.user_data, opts(step)), null, ctx)
        case 'sendto':
          return void check(step, send([step.len], step.user_data, opts(step), true), null, ctx)
        case 'send_many':
          for (let k = 0; k < step.count; k++) {
            const r = send([step.len], 1000000 + k, {})
            if (r[1]) throw new Error(`${ctx}: send ${k}: ${r[1].message}`)
          }
          return
        case 'send_batch': {
          // One sendBatch of `count` buffers continuing the pattern, user_data base + i.
          const bufs = []
          for (let k = 0; k < step.count; k++) bufs.push(pattern(pos + k * step.len, step.len))
          const uds = bufs.map((_, k) => step.base + k)
          const r = attempt(() => {
            const b = Z().sendBatch(bufs, uds, opts(step))
            let left = b.bytes
            for (let k = 0; k < b.sends; k++) {
              const took = Math.min(step.len, left) // all but a short last one took len
              left -= took
              if (took > 0) {
                assert.ok(!sent.has(step.base + k), `user_data ${step.base + k} used twice`)
                sent.set(step.base + k, took)
              }
            }
            pos += datagram ? b.sends * step.len : b.bytes
            got.push(...b.completions)
            return b.sends
          })
          return void check(step, r, null, ctx)
        }
        case 'send_reap_loop':
          for (let k = 0; k < step.count; k++) {
            const data = pattern(pos, step.len)
            const r = Z().sendReap(data, step.base + k)
            assert.equal(r.bytes, step.len, `${ctx}: sendReap short`)
            sent.set(step.base + k, r.bytes)
            pos += r.bytes
            got.push(...r.completions)
          }
          return
        case 'timestamping':
          testing.setTimestamping(fd)
          timestamping = true
          return
        case 'request_response':
          return void requestResponse(step, ctx)
        case 'drain_peer_later':
          testing.spawnReader(peer, received, pos + step.plus, step.ms)
          reader = true
          return
        case 'fill_window':
          // These two loops race the kernel (a delayed ACK frees room within ~40 ms): they use
          // trySend, which reports a full socket as -EAGAIN instead of throwing (an exception
          // costs more than the send).
          for (let k = 0; ; k++) {
            const r = send([step.len], step.base + k, { dontWait: true }, false, true)
            if (r[0] === -11) break
            if (r[1]) throw new Error(`${ctx}: fill: ${r[1].message}`)
            assert.ok(k < 10000, `${ctx}: the window never filled`)
          }
          return
        case 'retry_full': {
          // A full socket retried without waiting: never EBUSY (a failed send holds no
          // request slot: 6000 tries exceed the 4096 slots). One difference from the Rust and
          // C runners: a JS call costs ~10x theirs, so the tries outlast the peer's delayed ACK
          // and the kernel makes room again part way. Such a try is a normal send: it is reaped
          // at once (so that it holds no slot either) and its completion is checked by
          // `completions all`. At least half must be refused with EAGAIN (the table's rule).
          let refused = 0
          for (let k = 0; k < step.count; k++) {
            const r = send([step.len], 2000000 + k, { dontWait: true }, false, true)
            assert.ok(!r[1], `${ctx}: retry ${k} of a full socket: ${r[1] && r[1].code}, not EAGAIN`)
            if (r[0] === -11) refused++
            else reap()
          }
          return void assert.ok(refused * 2 >= step.count, `${ctx}: only ${refused} of ${step.count} tries found it full`)
        }
        case 'reap':
          return void reap()
        case 'wait': {
          const t0 = performance.now()
          const timeoutMs = step.timeout_ms < 0 ? undefined : step.timeout_ms
          const r = attempt(() => {
            const n = Z().wait(timeoutMs)
            const c = Z().reap()
            got.push(...c)
            assert.ok(c.length >= n, `${ctx}: wait said ${n} ready, reap gave ${c.length}`)
            return n
          })
          // Every wait states what it may return (zc.json): expect_ret_min with expect_err is
          // "that error, or a return >= min".
          if (step.expect_ret_min !== undefined) {
            if (r[1]) check(step, r, null, ctx)
            else assert.ok(r[0] >= step.expect_ret_min, `${ctx}: wait returned ${r[0]}, want >= ${step.expect_ret_min}`)
          } else {
            assert.ok(step.expect_err !== undefined || step.expect_ret !== undefined, `${ctx}: a wait step needs expect_ret, expect_ret_min or expect_err`)
            check(step, r, null, ctx)
          }
          if (step.max_ms !== undefined) assert.ok(performance.now() - t0 <= step.max_ms, `${ctx}: waited ${performance.now() - t0} ms`)
          return
        }
        case 'collect_all': {
          const deadline = Date.now() + step.timeout_ms
          for (;;) {
            reap()
            if (Z().inflight === 0) break
            assert.ok(Date.now() < deadline, `${ctx}: ${Z().inflight} sends never completed`)
            const [, e] = attempt(() => Z().wait(50))
            if (e && !['ETIMEDOUT', 'ECONNRESET'].includes(e.code)) throw new Error(`${ctx}: wait: ${e.message}`)
          }
          return
        }
        case 'drain_peer':
          return void drainPeer()
        case 'reset_peer':
          testing.reset(peer)
          peer = null
          sleepMs(50)
          return
        case 'expect_inflight': {
          const n = Z().inflight
          if (step.value !== undefined) assert.equal(n, step.value, `${ctx}: inflight`)
          if (step.min !== undefined) assert.ok(n >= step.min, `${ctx}: inflight ${n}`)
          return
        }
        case 'completions':
          return void completions(step, ctx)
        case 'completions_flagged': {
          reap()
          assert.equal(step.flag, 'FALLBACK', `${ctx}: only FALLBACK is counted`)
          const n = got.filter((c) => c.fallback).length
          return void assert.ok(n >= step.min, `${ctx}: ${n} completions with FALLBACK`)
        }
        case 'expect_stat': {
          const s = Z().stats()
          const v = s[STATS[step.field]]
          assert.notEqual(v, undefined, `unknown stat ${step.field}`)
          if (step.value !== undefined) assert.equal(v, step.value, `${ctx}: ${step.field}`)
          if (step.min !== undefined) assert.ok(v >= step.min, `${ctx}: ${step.field} = ${v}`)
          if (step.max !== undefined) assert.ok(v <= step.max, `${ctx}: ${step.field} = ${v}`)
          return
        }
        case 'free': {
          const left = Z().close()
          zc = null
          if (step.expect_ret !== undefined) assert.equal(left, step.expect_ret, `${ctx}: left in flight`)
          return
        }
        default:
          throw new Error(`${ctx}: unknown op ${step.op}`)
      }
    })
  } finally {
    if (zc) zc.close()
    try { testing.joinReaders() } catch { /* reported by completions */ }
    testing.joinWriters()
    if (peer !== null) testing.close(peer)
    for (const f of owned) testing.close(f)
  }

  function completions(step, ctx) {
    if (reader) {
      received = testing.joinReaders()
      reader = false
    }
    reap()
    const want = step.user_data === 'all' ? [...sent.keys()].sort((a, b) => a - b) : step.user_data
    const ids = got.map((c) => c.userData).sort((a, b) => a - b)
    assert.deepEqual(ids, want, `${ctx}: completions (each user_data exactly once)`)
    for (const c of got) {
      assert.equal(c.result, sent.get(c.userData), `${ctx}: result of ${c.userData}`)
      if (step.copied !== undefined) assert.equal(c.copied, step.copied, `${ctx}: COPIED on ${c.userData}`)
      if (step.flag === 'FALLBACK') assert.ok(c.fallback, `${ctx}: FALLBACK on ${c.userData}`)
    }
  }

  function requestResponse(step, ctx0) {
    for (let k = 0; k < step.rounds; k++) {
      const ctx = `${ctx0} round ${k}`
      const r = send([step.len], step.base + k, {})
      if (r[1]) throw r[1]
      assert.equal(r[0], step.len, `${ctx}: request`)
      if (Z().backend === 'errqueue' || timestamping) testing.waitPollerr(fd)
      drainPeer()
      // The clock starts before the answer's writer does: on a loaded machine this thread
      // can lose the CPU for longer than the answer's 50 ms between the two.
      const t0 = performance.now()
      testing.spawnWriter(peer, Buffer.alloc(step.reply_len, 'r'), { delayMs: 50 })
      const buf = Buffer.alloc(step.reply_len)
      const c0 = testing.threadCpuMs()
      const [n, e] = attempt(() => lc.recvAtLeast(fd, buf, step.reply_len, { timeoutMs: 3000 }))
      const ms = performance.now() - t0
      const cpu = testing.threadCpuMs() - c0
      testing.joinWriters()
      assert.equal(n, step.reply_len, `${ctx}: reply: ${e ? e.message : n}`)
      assert.ok(buf.every((b) => b === 0x72), `${ctx}: reply bytes`)
      assert.ok(ms >= 30, `${ctx}: answered after ${ms} ms`)
      cpuBound(step, cpu, ctx)
    }
  }
}

runTable('zc.json', 'backends', 51, runOne)
