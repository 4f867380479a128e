// tests/scenarios/rx.json (low-water mark, recvAtLeast, ZeroCopyReceiver) against the Node
// binding (see harness.js; the Rust runner is core/tests/rx_scenarios.rs).
'use strict'
const assert = require('node:assert/strict')
const { performance } = require('node:perf_hooks')
const { native: lc, caps, testing, sleepMs, attempt, check, runTable } = require('./harness.js')

const ZSTATS = {
  bytes_mapped: 'bytesMapped', bytes_copied: 'bytesCopied', bytes_copybuf: 'bytesCopybuf',
  chunks_mapped: 'chunksMapped', chunks_copied: 'chunksCopied', zc_calls: 'zcCalls',
  zc_calls_unmapped: 'zcCallsUnmapped', wakeups: 'wakeups', peek_off_fixups: 'peekOffFixups',
}

function runOne(sc, transport) {
  const ctx0 = `[${sc.name} | ${transport}]`
  const mss = sc.mss
  const rcvbuf = sc.rcvbuf_lock
  const tcpOpts = { mss, listenerRcvbuf: rcvbuf }
  const fds = []
  let fd = 1000000
  let listener = null
  let peer = null
  let zcrx = null
  let receiver = null
  let sent = 0
  let received = 0
  const v6 = transport.endsWith('6')
  const setup = () => {
    if (transport === 'tcp4' || transport === 'tcp6') {
      const p = testing.pair(transport, tcpOpts)
      fds.push(fd = p.sock)
      peer = p.peer
    } else if (transport === 'listener4' || transport === 'listener6') {
      fds.push(fd = listener = testing.listener(v6, tcpOpts))
    } else if (transport === 'unix' || transport === 'mptcp4' || transport === 'udp4') {
      const p = testing.pair(transport)
      fds.push(fd = p.sock)
      peer = p.peer
      if (rcvbuf) testing.setsockopt(fd, 'SO_RCVBUF', rcvbuf)
    } else if (transport === 'file') {
      fds.push(fd = testing.fileFd())
    } else if (transport === 'tcp4_unconnected') {
      fds.push(fd = testing.tcpSocket())
    } else if (transport !== 'closed') {
      throw new Error(`unknown transport ${transport}`)
    }
    if (transport !== 'file' && transport !== 'closed') testing.setRcvtimeo(fd, 3000)
  }
  const resolve = (v) => {
    if (typeof v === 'number') return v
    if (v === 'rmem_cap') return testing.rmemCap()
    if (v === 'rcvbuf_half') return Math.floor(testing.getsockopt(fd, 'SO_RCVBUF') / 2)
    throw new Error(`bad number ${v}`)
  }
  const peerFd = () => {
    assert.ok(peer !== null, 'no peer')
    return peer
  }
  const bounds = (step, ms, cpu, ctx) => {
    if (step.min_ms !== undefined) assert.ok(ms >= step.min_ms, `${ctx}: returned after ${ms.toFixed(1)} ms, want >= ${step.min_ms}`)
    if (step.max_ms !== undefined) assert.ok(ms <= step.max_ms, `${ctx}: returned after ${ms.toFixed(1)} ms, want <= ${step.max_ms}`)
    if (step.cpu_max_ms !== undefined) assert.ok(cpu <= step.cpu_max_ms, `${ctx}: used ${cpu.toFixed(1)} ms of CPU, want <= ${step.cpu_max_ms}`)
  }
  const expectData = (step, r, data, ctx) => {
    const s = { ...step }
    if (typeof s.expect_ret === 'string') s.expect_ret = resolve(s.expect_ret)
    received += check(s, r, data, ctx, received)
  }
  const timed = (fn) => {
    const t0 = performance.now()
    const c0 = testing.threadCpuMs()
    const r = attempt(fn)
    return [r, performance.now() - t0, testing.threadCpuMs() - c0]
  }
  setup()
  try {
    sc.steps.forEach((step, i) => {
      const ctx = `${ctx0} step ${i} ${step.op}`
      switch (step.op) {
        case 'set_rcvlowat': {
          const s = { ...step }
          if (typeof s.expect_ret === 'string') s.expect_ret = resolve(s.expect_ret)
          return void check(s, attempt(() => lc.setRcvlowat(fd, step.bytes)), null, ctx)
        }
        case 'expect_rcvlowat':
          return void assert.equal(testing.getsockopt(fd, 'SO_RCVLOWAT'), resolve(step.value), `${ctx}: SO_RCVLOWAT`)
        case 'expect_rcvbuf_min': {
          const v = testing.getsockopt(fd, 'SO_RCVBUF')
          return void assert.ok(v >= resolve(step.value), `${ctx}: SO_RCVBUF ${v}`)
        }
        case 'accept': {
          assert.ok(listener !== null, 'not a listener')
          peer = testing.connect(listener, { mss })
          const s = testing.accept(listener)
          testing.setRcvtimeo(s, 3000)
          fds.push(fd = s)
          return
        }
        case 'send':
          testing.writeAllSync(peerFd(), Buffer.from(step.data, 'latin1'))
          sent += step.data.length
          return
        case 'send_pattern':
          testing.spawnWriter(peerFd(), testing.pattern(sent, step.len))
          sent += step.len
          return
        case 'send_trickle':
          testing.spawnWriter(peerFd(), testing.pattern(sent, step.len), { pieces: step.pieces, pieceMs: step.ms })
          sent += step.len
          return
        case 'send_later': {
          const data = step.data !== undefined ? Buffer.from(step.data, 'latin1') : testing.pattern(sent, step.len)
          testing.spawnWriter(peerFd(), data, { delayMs: step.ms })
          sent += data.length
          return
        }
        case 'send_zc_pattern':
          testing.spawnWriter(peerFd(), testing.pattern(sent, step.len), { zerocopySizes: step.sizes })
          sent += step.len
          return
        case 'send_datagrams':
          return void testing.sendDatagrams(peerFd(), step.list)
        case 'wait_queued':
          return void testing.waitQueued(fd, step.bytes)
        case 'errqueue':
          if (step.kind === 'icmp') {
            // The peer goes away first: our datagram then draws an ICMP port unreachable.
            testing.close(peerFd())
            peer = null
          }
          return void testing.errqueueEntry(fd, step.kind)
        case 'sleep':
          return void sleepMs(step.ms)
        case 'shutdown_peer':
          // After the bytes still being written, without waiting here for a reader.
          return void testing.spawnWriter(peerFd(), Buffer.alloc(0), { shutdown: true, afterOthers: true })
        case 'reset_peer':
          testing.joinWriters()
          testing.reset(peerFd())
          peer = null
          sleepMs(20)
          return
        case 'receiver_new': {
          if (receiver) receiver.close()
          receiver = null
          const r = attempt(() => new lc.Receiver(fd))
          if (step.expect_err !== undefined) return void check(step, r, null, ctx)
          if (r[1]) throw r[1]
          receiver = r[0]
          return
        }
        case 'receiver_free':
          receiver.close()
          receiver = null
          return
        case 'recv_atleast':
        case 'receiver_recv': {
          const buf = Buffer.alloc(step.len)
          let stats = {}
          const timeoutMs = step.timeout_ms < 0 ? undefined : step.timeout_ms
          let call = () => lc.recvAtLeast(fd, buf, step.min, { timeoutMs, stats })
          let before = null
          if (step.op === 'receiver_recv') {
            assert.ok(receiver, 'receiver_recv before receiver_new')
            before = receiver.stats()
            call = () => receiver.recvAtLeast(buf, step.min, { timeoutMs })
          }
          const [r, ms, cpu] = timed(call)
          if (before) {
            // The call's own counters: the receiver's after minus before.
            const after = receiver.stats()
            stats = Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - before[k]]))
          }
          if (step.syscalls !== undefined) assert.equal(stats.syscalls, step.syscalls, `${ctx}: syscalls of the call: ${JSON.stringify(stats)}`)
          expectData(step, r, buf, ctx)
          bounds(step, ms, cpu, ctx)
          if (step.wakeups_max !== undefined) assert.ok(stats.wakeups <= step.wakeups_max, `${ctx}: ${stats.wakeups} wakeups, want <= ${step.wakeups_max}`)
          if (step.wakeups_min !== undefined) assert.ok(stats.wakeups >= step.wakeups_min, `${ctx}: ${stats.wakeups} wakeups, want >= ${step.wakeups_min}`)
          if (step.lowat_changes !== undefined) assert.equal(stats.lowatChanges, step.lowat_changes, `${ctx}: SO_RCVLOWAT changes`)
          return
        }
        case 'read': {
          const r = attempt(() => testing.read(fd, step.len))
          return void expectData(step, r[1] ? r : [r[0].length, null], r[0] || Buffer.alloc(0), ctx)
        }
        case 'set_rcvtimeo_ms':
          return void testing.setRcvtimeo(fd, step.ms)
        case 'set_nonblocking':
          return void testing.setNonblocking(fd)
        case 'set_peek_off':
          return void testing.setsockopt(fd, 'SO_PEEK_OFF', step.value)
        case 'expect_peek_off':
          return void assert.equal(testing.getsockopt(fd, 'SO_PEEK_OFF'), resolve(step.value), `${ctx}: SO_PEEK_OFF`)
        case 'peek': {
          const b = testing.peekRaw(fd, step.len)
          assert.equal(b.length, step.len, `${ctx}: peek`)
          return void assert.ok(b.equals(testing.pattern(step.expect_pattern_at, step.len)), `${ctx}: peeked bytes are not stream bytes ${step.expect_pattern_at}..`)
        }
        case 'zcrx_new': {
          if (zcrx) zcrx.close()
          zcrx = null
          const r = attempt(() => new lc.ZeroCopyReceiver(fd, step.window))
          if (step.expect_err !== undefined) return void check(step, r, null, ctx)
          if (r[1]) throw r[1]
          zcrx = r[0]
          if (step.expect_window !== undefined) assert.equal(zcrx.window, step.expect_window, `${ctx}: window`)
          return
        }
        case 'zcrx_free':
          zcrx.close()
          zcrx = null
          return
        case 'zcrx_recv': {
          assert.ok(zcrx, 'zcrx_recv before zcrx_new')
          const [r, ms, cpu] = timed(() => zcrx.recv(step.dontwait ? { dontWait: true } : undefined))
          const chunk = r[0]
          const data = chunk ? Buffer.from(chunk.data) : Buffer.alloc(0)
          if (step.expect_eof) {
            assert.ok(!r[1] && data.length === 0 && chunk.eof, `${ctx}: want end of stream, got ${r[1] ? r[1].code : data.length + ' bytes'}`)
          }
          if (chunk && data.length > 0 && step.expect_mapped !== undefined) {
            assert.equal(chunk.mapped, step.expect_mapped, `${ctx}: mapped`)
          }
          expectData(step, r[1] ? r : [data.length, null], data, ctx)
          return void bounds(step, ms, cpu, ctx)
        }
        case 'zcrx_set_timeout':
          return void zcrx.setTimeout(step.ms)
        case 'zcrx_peek_off_tracking':
          return void zcrx.setPeekOffTracking(step.on)
        case 'zcrx_drain':
          return void zcrxDrain(step, ctx)
        case 'zcrx_stat': {
          const s = zcrx.stats()
          const got = s[ZSTATS[step.field]]
          assert.notEqual(got, undefined, `${ctx}: unknown stat ${step.field}`)
          // A kernel whose struct tcp_zerocopy_receive has no copy buffer (before 5.11: under
          // 36 bytes, per the probe) reads every copied byte with recv.
          const value = step.value_no_copybuf !== undefined && caps.tcpZerocopyReceiveSize < 36 ? step.value_no_copybuf : step.value
          if (value !== undefined) assert.equal(got, value, `${ctx}: ${JSON.stringify(s)}`)
          if (step.min !== undefined) assert.ok(got >= step.min, `${ctx}: ${JSON.stringify(s)}`)
          if (step.max !== undefined) assert.ok(got <= step.max, `${ctx}: ${JSON.stringify(s)}`)
          return
        }
        default:
          throw new Error(`${ctx}: unknown op ${step.op}`)
      }
    })
  } finally {
    if (zcrx) zcrx.close()
    if (receiver) receiver.close()
    testing.joinWriters()
    if (peer !== null) testing.close(peer)
    for (const f of fds) testing.close(f)
  }

  // Receives `bytes` bytes, checking each against the pattern; mapped + copied must equal
  // what the receiver delivered.
  function zcrxDrain(step, ctx) {
    assert.ok(zcrx, 'zcrx_drain before zcrx_new')
    const before = zcrx.stats()
    const t0 = performance.now()
    let got = 0
    while (got < step.bytes) {
      const c = zcrx.recv()
      assert.ok(!c.eof, `${ctx}: end of stream after ${got} of ${step.bytes} bytes`)
      const n = c.data.length
      assert.ok(Buffer.from(c.data).equals(testing.pattern(received + got, n)), `${ctx}: wrong bytes at stream position ${received + got} (mapped ${c.mapped})`)
      got += n
    }
    assert.equal(got, step.bytes, `${ctx}: more bytes than expected`)
    if (step.expect_eof) {
      const c = zcrx.recv()
      assert.ok(c.eof, `${ctx}: want end of stream, got ${c.data.length} bytes`)
    }
    bounds(step, performance.now() - t0, 0, ctx)
    const s = zcrx.stats()
    assert.equal(s.bytesMapped + s.bytesCopied - before.bytesMapped - before.bytesCopied, step.bytes, `${ctx}: mapped + copied != received`)
    received += step.bytes
  }
}

runTable('rx.json', null, 51, (_t, sc, transport) => runOne(sc, transport))
