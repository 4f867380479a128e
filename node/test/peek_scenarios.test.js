// tests/scenarios/peek.json against the Node binding (see harness.js; the Rust runner is
// core/tests/scenarios.rs, the C one tests/c/scenarios.c).
'use strict'
const assert = require('node:assert/strict')
const { performance } = require('node:perf_hooks')
const { native: lc, caps, testing, sleepMs, attempt, check, runTable, forceBuf } = require('./harness.js')

const STATS = {
  bytes_skipped_copied: 'bytesSkippedCopied',
  bytes_peeked: 'bytesPeeked',
  bytes_consumed: 'bytesConsumed',
  peeks: 'peeks',
  syscalls: 'syscalls',
  fds_closed: 'fdsClosed',
}
const RESULT = {
  len: 'len', offset: 'offset', stream_pos: 'streamPos', syscalls: 'syscalls', moved: 'moved', prefixed: 'prefixed',
}
// `init`'s stated kind: Node cannot hand the library memory, so `init` is the binding's own
// object with the socket's kind stated (the table's about says so).
const KINDS = new Set(['tcp4', 'tcp6', 'mptcp4', 'unix'])

function opts(step) {
  if (step.dontwait) return { dontWait: true }
  if (step.flags !== undefined) return { flags: step.flags }
  return undefined
}

/// SO_PEEK_OFF for the transport's family on this kernel (probe); true where the question
/// does not arise.
function probeHasPeekOff(transport) {
  const has = { tcp4: caps.peekOffTcp4, tcp6: caps.peekOffTcp6, unix: caps.peekOffUnix, mptcp4: caps.peekOffMptcp }[transport]
  return has === undefined ? true : has
}

function runOne(table, sc, transport, mode, skip) {
  const ctx0 = `[${sc.name} | ${transport} | ${mode}]`
  let steps = sc.steps.map((s) => ({ ...s }))
  const rule = table.no_peek_off
  const listed = rule.transports.includes(transport)
  // The kernel's answer (probe), never the table's: TCP before 6.9/6.12 has none.
  const noPeekOff = listed || !probeHasPeekOff(transport)
  if (noPeekOff && !listed) {
    if (sc.needs === 'peek_off') return skip(`peek.json: ${ctx0}`, 'not applicable: no SO_PEEK_OFF for this family here (probe)')
    if (mode === 'auto') {
      // AUTO uses the discard mechanism, and peek_supported answers 0.
      for (const s of steps) {
        if ((s.op === 'new' || s.op === 'init') && s.expect_mode === 'offset') s.expect_mode = 'discard'
        if (s.op === 'peek_supported' && s.expect_ret === 1) s.expect_ret = 0
      }
    }
  }
  if (noPeekOff && mode === 'offset') {
    const i = steps.findIndex((s) => s.op === 'new' || s.op === 'init')
    if (i >= 0) {
      const refused = { op: steps[i].op, expect_err: rule.errno }
      if (steps[i].kind !== undefined) refused.kind = steps[i].kind
      steps = [...steps.slice(0, i), refused]
    }
  }
  let sock, peer = null
  const owned = []
  if (transport === 'closed') sock = 1000000
  else if (transport === 'file') owned.push(sock = testing.fileFd())
  else if (transport.startsWith('listen_')) owned.push(sock = testing.listening(transport.slice('listen_'.length)))
  else if (transport === 'udp4' || transport === 'unix_dgram') {
    // Datagram pairs: the peer's send is a datagram.
    const p = testing.pair(transport)
    sock = p.sock
    peer = p.peer
    owned.push(sock)
  } else {
    const p = testing.pair(transport)
    sock = p.sock
    peer = p.peer
    owned.push(sock)
    if (sc.socket_rcvbuf) {
      const why = forceBuf(sock, true, sc.socket_rcvbuf, `peek.json ${ctx0}`) ||
        forceBuf(peer, false, sc.socket_rcvbuf, `peek.json ${ctx0}`)
      if (why) { // a part this process cannot run (logged): nothing to test
        testing.close(peer)
        for (const f of owned) testing.close(f)
        return
      }
    }
    testing.setRcvtimeo(sock, 3000)
  }
  let peeker = null
  let sent = 0
  let fdsMarked = null
  const peerFd = () => {
    assert.ok(peer !== null, 'no peer')
    return peer
  }
  const P = () => {
    assert.ok(peeker, 'scenario uses a peeker before `new`')
    return peeker
  }
  try {
    steps.forEach((step, i) => {
      const ctx = `${ctx0} step ${i} ${step.op}`
      switch (step.op) {
        case 'new':
        case 'init': {
          if (peeker) peeker.close()
          peeker = null
          const o = { mode: step.mode || mode }
          if (step.urgent !== undefined) o.urgent = step.urgent
          if (step.op === 'init') {
            o.kind = step.kind || transport
            assert.ok(KINDS.has(o.kind), `${ctx}: no kind for ${o.kind}`)
          }
          const r = attempt(() => new lc.Peeker(sock, o))
          if (step.expect_err !== undefined) return void check(step, r, null, ctx)
          if (r[1]) throw r[1]
          peeker = r[0]
          if (step.expect_mode) assert.equal(peeker.mode, step.expect_mode, `${ctx}: mode`)
          return
        }
        case 'free':
          P().close()
          peeker = null
          return
        case 'release':
          P().close({ restore: !step.closing })
          peeker = null
          return
        case 'send': {
          testing.writeAllSync(peerFd(), Buffer.from(step.data, 'latin1'))
          sent += step.data.length
          return
        }
        case 'send_pattern':
          testing.spawnWriter(peerFd(), testing.pattern(sent, step.len))
          sent += step.len
          return
        case 'send_later':
          testing.spawnWriter(peerFd(), Buffer.from(step.data, 'latin1'), { delayMs: step.ms })
          sent += step.data.length
          return
        case 'wait_queued':
          return void testing.waitQueued(sock, step.bytes)
        case 'peek': {
          const buf = Buffer.alloc(step.len)
          const t0 = performance.now()
          const c0 = testing.threadCpuMs()
          const r = attempt(() => P().peekInto(buf, opts(step)))
          const [ms, cpu] = [performance.now() - t0, testing.threadCpuMs() - c0]
          check(step, r, buf, ctx)
          if (step.min_ms !== undefined) assert.ok(ms >= step.min_ms, `${ctx}: returned after ${ms.toFixed(1)} ms, want >= ${step.min_ms}`)
          if (step.max_ms !== undefined) assert.ok(ms <= step.max_ms, `${ctx}: returned after ${ms.toFixed(1)} ms, want <= ${step.max_ms}`)
          if (step.cpu_max_ms !== undefined) assert.ok(cpu <= step.cpu_max_ms, `${ctx}: used ${cpu.toFixed(1)} ms of CPU, want <= ${step.cpu_max_ms}`)
          return
        }
        case 'errqueue':
          return void testing.errqueueEntry(sock, step.kind)
        case 'set_rcvtimeo_ms':
          return void testing.setRcvtimeo(sock, step.ms)
        case 'peekv': {
          const buf = Buffer.alloc(step.len)
          const views = []
          for (let k = 0; k < step.len; k++) views.push(buf.subarray(k, k + 1))
          return void check(step, attempt(() => P().peekv(views, opts(step))), buf, ctx)
        }
        case 'peek_at': {
          const buf = Buffer.alloc(step.len)
          return void check(step, attempt(() => lc.peekInto(sock, step.offset, buf, opts(step))), buf, ctx)
        }
        case 'peeker_peek_at':
        case 'peeker_peekv_at': {
          const buf = Buffer.alloc(step.len)
          const r = attempt(() => {
            if (step.op === 'peeker_peek_at') return P().peekAtInto(step.offset, buf, opts(step))
            const views = []
            for (let k = 0; k < step.len; k++) views.push(buf.subarray(k, k + 1))
            return P().peekvAt(step.offset, views, opts(step))
          })
          check(step, [r[0] && r[0].len, r[1]], buf, ctx)
          if (r[0]) {
            for (const [k, want] of Object.entries(step.result || {})) {
              assert.ok(RESULT[k], `${ctx}: unknown result field ${k}`)
              assert.equal(r[0][RESULT[k]], want, `${ctx}: result.${k} of ${JSON.stringify(r[0])}`)
            }
          }
          return
        }
        case 'consume':
          return void check(step, attempt(() => P().consume(step.n)), null, ctx)
        case 'consume_fd':
          return void check(step, attempt(() => lc.consume(sock, step.n, opts(step))), null, ctx)
        case 'seek':
          return void check(step, attempt(() => { P().seek(step.offset); return 0 }), null, ctx)
        case 'send_fds': {
          const d = Buffer.from(step.data, 'latin1')
          assert.equal(testing.sendFds(peerFd(), d, step.fds), d.length, `${ctx}: sent`)
          sent += d.length
          return
        }
        case 'fds_mark':
          fdsMarked = testing.openFds()
          return
        case 'expect_fds_marked':
          assert.ok(fdsMarked !== null, `${ctx}: expect_fds_marked before fds_mark`)
          return void assert.equal(testing.openFds(), fdsMarked, `${ctx}: open descriptors, want as at fds_mark`)
        case 'expect_offset':
          return void assert.equal(P().offset, step.value, `${ctx}: cursor`)
        case 'shutdown_peer':
          return void testing.shutdownWrite(peerFd())
        case 'reset_peer':
          testing.reset(peerFd())
          peer = null
          sleepMs(20)
          return
        case 'read': {
          const r = attempt(() => testing.read(sock, step.len))
          return void check(step, r[1] ? r : [r[0].length, null], r[0] || Buffer.alloc(0), ctx)
        }
        case 'send_oob': {
          const d = Buffer.from(step.data, 'latin1')
          assert.equal(testing.sendOob(peerFd(), d), d.length, `${ctx}: send(MSG_OOB)`)
          sent += d.length
          return
        }
        case 'wait_urgent':
          return void assert.ok(testing.waitUrgent(sock, 3000), `${ctx}: no urgent byte within 3 s`)
        case 'recv_oob': {
          const r = attempt(() => testing.recvOob(sock))
          return void check(step, r[1] ? r : [1, null], r[0] || Buffer.alloc(0), ctx)
        }
        case 'arm':
          return void check(step, attempt(() => { P().setLowatArmed(step.on ?? true); return 0 }), null, ctx)
        case 'expect_rcvlowat':
          return void assert.equal(testing.getsockopt(sock, 'SO_RCVLOWAT'), step.value, `${ctx}: SO_RCVLOWAT`)
        case 'expect_peek_off': {
          const [v, e] = attempt(() => testing.getsockopt(sock, 'SO_PEEK_OFF'))
          const got = e && e.code === 'ENOTSUP' ? -1 : v
          if (e && e.code !== 'ENOTSUP') throw e
          return void assert.equal(got, step.value, `${ctx}: SO_PEEK_OFF`)
        }
        case 'expect_stat': {
          const s = P().stats()
          const field = STATS[step.field]
          assert.ok(field, `unknown stat ${step.field}`)
          return void assert.equal(s[field], step[P().mode], `${ctx}: stat ${step.field}`)
        }
        case 'peek_supported':
          return void check(step, attempt(() => lc.peekSupported(sock)), null, ctx)
        case 'wakeups':
          return void wakeups(step, ctx)
        default:
          throw new Error(`${ctx}: unknown op ${step.op}`)
      }
    })

    // A level-triggered epoll loop: wait for EPOLLIN, peek with dontWait, count wakeups.
    function wakeups(step, ctx) {
      if (step.send_after_ms !== undefined) {
        testing.spawnWriter(peerFd(), Buffer.from(step.data, 'latin1'), { delayMs: step.send_after_ms })
        sent += step.data.length
      }
      const ep = testing.epollIn(sock)
      let n = 0
      let got = Buffer.alloc(0)
      const buf = Buffer.alloc(4096)
      // Each empty wakeup throws EAGAIN; without stack traces that costs a few microseconds,
      // not tens (the unarmed control must show hundreds of wakeups in 100 ms).
      const limit = Error.stackTraceLimit
      Error.stackTraceLimit = 0
      try {
        const deadline = Date.now() + step.ms
        for (;;) {
          const left = deadline - Date.now()
          if (left <= 0) break
          if (!testing.epollWait(ep, Math.max(1, left))) continue
          n++
          const [k, e] = attempt(() => P().peekInto(buf, { dontWait: true }))
          if (e && e.code !== 'EAGAIN') throw e
          if (!e) got = Buffer.concat([got, buf.subarray(0, k)])
        }
      } finally {
        Error.stackTraceLimit = limit
        testing.close(ep)
      }
      if (step.max !== undefined) assert.ok(n <= step.max, `${ctx}: ${n} wakeups, want <= ${step.max}`)
      if (step.min !== undefined) assert.ok(n >= step.min, `${ctx}: ${n} wakeups, want >= ${step.min}`)
      if (step.data !== undefined) {
        assert.ok(got.toString('latin1').endsWith(step.data), `${ctx}: the loop did not wake for the new byte (got ${JSON.stringify(got.toString('latin1'))})`)
      }
    }
  } finally {
    if (peeker) peeker.close()
    testing.joinWriters()
    if (peer !== null) testing.close(peer)
    for (const fd of owned) testing.close(fd)
  }
}

runTable('peek.json', 'modes', 51, runOne)
