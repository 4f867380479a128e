#!/usr/bin/env node
// The Node benchmark tables, side by side in one run. Figures on a shared machine move from run
// to run: each cell is the median of REPEAT rounds (5 by default), the rounds interleaved so
// that drift hits every row alike, with the spread of the rounds beside it.
//
// 1. Per-call cost of Peeker.peekInto against the same peek made by the C library (peek_bench,
//    built from peek_bench.c against liblowcopy): a loopback TCP pair with 64 KiB queued,
//    (seek 0, peek SIZE bytes) per iteration, less the same loop with the seek alone, so each
//    side's peek call is priced alone. In this thread's CPU time (what the call costs) and in
//    wall time (which on a loaded machine also counts the time other processes ran). Node
//    "before" is the napi-rs class method, "now" Peeker.peekInto as lowcopy.js defines it (a
//    native function bound to the peeker); the Node seek column is what one napi-rs method
//    call costs by itself. Goal: Node's peek at most 1 microsecond more than C's.
// 2. Throughput, TCP over loopback: socket.write against ZeroCopySender (AUTO with the
//    adaptive copy policy, copy, errqueue, io_uring) on a descriptor of its own, 64 KiB sends for SECONDS to a child process that
//    reads and discards. Loopback copies every "zerocopy" send anyway (completions COPIED):
//    these rows price the API, not what zerocopy saves.
// 3. Throughput, UDP tx-only: dgram's socket.send against ZeroCopySender, beside the C
//    library's figures (examples/c/zc_bench) from the same run, 65435-byte datagrams routed out
//    of an ifb device that drops them: the only path on one machine where the kernel sends from
//    the pinned pages (completions not COPIED). Runs inside the network namespaces
//    scripts/zc_bench.sh makes and removes (root only; skipped otherwise).
// 4. Instructions per call (callgrind: the user-space instructions inside one call, the
//    kernel's not counted; the same figure on a loaded machine): ZeroCopySender.sendReapInto
//    over UDP loopback (error queue) against the C library's lowcopy_zc_send_reap in
//    examples/c/zc_bench's lc-errq mode, to the same socket. Needs valgrind (skipped otherwise).
// MB/CPU-s is megabytes sent per second of the sender process's CPU (user + system, all
// threads), the selftest's and zc_bench's measure.
//
//   node bench.js [PEEK_BENCH_BINARY]   env: REPEAT=5 SECONDS=2 TABLES="peek loopback txonly cost"
'use strict'
const { execFileSync, fork, spawnSync } = require('node:child_process')
const dgram = require('node:dgram')
const net = require('node:net')
const path = require('node:path')
const lowcopy = require('lowcopy')
const { testing } = require('lowcopy/index.js') // loopback pairs without Node's net layer

const REPEAT = Number(process.env.REPEAT || 5)
// (NODE_BENCH_SECONDS: how the tx-only child, run by a bash script, gets it: bash owns SECONDS.)
const SECONDS = Number(process.env.NODE_BENCH_SECONDS || process.env.SECONDS || 2)
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

// One round of the Node side: the loops of peek_bench.c (seek alone; seek + peek), made two
// ways: with the napi-rs class methods as they were (before), and with Peeker.prototype.seek
// and .peekInto as the package now defines them (native functions bound to the peeker; see
// node/lowcopy.js). Each peek less its own way's seeks. Returns { before, now, seekBefore,
// seekNow, inNode } per call, each { wall, cpu } in ns.
function nodePeekRound(size, iters) {
  const p = testing.pair('tcp4')
  try {
    testing.writeAllSync(p.peer, Buffer.alloc(65536, 0x78))
    testing.waitQueued(p.sock, 65536)
    const peeker = new lowcopy.Peeker(p.sock)
    const buf = Buffer.alloc(size)
    const { classPeekInto, classSeek } = testing
    for (let i = 0; i < 1000; i++) { // warm up (and JIT) every loop
      peeker.seek(0); peeker.peekInto(buf)
      classSeek.call(peeker, 0); classPeekInto.call(peeker, buf)
    }
    const time = (loop) => {
      const w0 = process.hrtime.bigint()
      const c0 = testing.threadCpuNs()
      loop()
      const c1 = testing.threadCpuNs()
      const w1 = process.hrtime.bigint()
      return { wall: Number(w1 - w0) / iters, cpu: (c1 - c0) / iters }
    }
    const seekBefore = time(() => {
      for (let i = 0; i < iters; i++) classSeek.call(peeker, 0)
    })
    const before = time(() => {
      for (let i = 0; i < iters; i++) {
        classSeek.call(peeker, 0)
        if (classPeekInto.call(peeker, buf) !== size) throw new Error('short peek')
      }
    })
    const seekNow = time(() => {
      for (let i = 0; i < iters; i++) peeker.seek(0)
    })
    const now = time(() => {
      for (let i = 0; i < iters; i++) {
        peeker.seek(0)
        if (peeker.peekInto(buf) !== size) throw new Error('short peek')
      }
    })
    peeker.close()
    // The C loop again, natively inside this process (its own peeker over the same socket).
    const inNode = testing.peekLoop(p.sock, size, iters)
    const less = (a, s) => ({ wall: a.wall - s.wall, cpu: a.cpu - s.cpu })
    return { before: less(before, seekBefore), now: less(now, seekNow), seekBefore, seekNow, inNode }
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
}

const fmt = (x) => x.toFixed(0)
const range = (xs) => `${fmt(Math.min(...xs))}..${fmt(Math.max(...xs))}`

function peekTable(cbin) {
  const sizes = [64, 1024, 16384, 65536]
  const rounds = Number(process.env.PEEK_ROUNDS || 2 * REPEAT - 1)
  const res = {}
  for (let r = 0; r < rounds; r++) {
    for (const size of sizes) { // rounds interleaved: drift on the machine hits all alike
      const iters = size >= 16384 ? 20000 : 50000
      const out = execFileSync(cbin, [String(size), String(iters)], { encoding: 'utf8' })
      const m = /wall_ns ([\d.-]+) cpu_ns ([\d.-]+)/.exec(out)
      if (!m) throw new Error(`peek_bench: ${out}`)
      const n = nodePeekRound(size, iters)
      const c = { wall: Number(m[1]), cpu: Number(m[2]) }
      ;(res[size] ||= []).push({ c, ...n })
    }
  }
  console.log(`Per-call cost of one peek (TCP loopback, 64 KiB queued; ns per call, median of ${rounds} rounds, min..max of the rounds)`)
  console.log('  C: lowcopy_peeker_peek (peek_bench); C in Node: the same loop run natively inside this Node process;')
  console.log('  Node before: the napi-rs class methods; Node now: Peeker.seek/peekInto as shipped (native functions bound to the peeker);')
  console.log('  each peek less its own seeks; now - C and before - C: per round, then the median; seek: one seek call alone, before/now')
  for (const [clock, title] of [['cpu', 'CPU time of the calling thread'], ['wall', 'wall time (also counts other processes running)']]) {
    console.log(`\n${title}`)
    const cell = (xs) => `${fmt(median(xs))} ${range(xs)}`
    const hdr = `${'size'.padStart(6)} | ${'C'.padStart(14)} | ${'C in Node'.padStart(14)} | ${'Node before'.padStart(15)} | ${'Node now'.padStart(15)} | ${'now - C'.padStart(15)} | ${'before - C'.padStart(10)} | ${'seek'.padStart(9)} | <= 1 us more`
    console.log(hdr)
    console.log('-'.repeat(hdr.length))
    for (const size of sizes) {
      const rs = res[size]
      const col = (f, w) => cell(rs.map(f)).padStart(w)
      const d = rs.map((x) => x.now[clock] - x.c[clock]) // per round: same minute, same load
      console.log([
        String(size).padStart(6),
        col((x) => x.c[clock], 14),
        col((x) => x.inNode[clock], 14),
        col((x) => x.before[clock], 15),
        col((x) => x.now[clock], 15),
        col((x) => x.now[clock] - x.c[clock], 15),
        fmt(median(rs.map((x) => x.before[clock] - x.c[clock]))).padStart(10),
        `${fmt(median(rs.map((x) => x.seekBefore[clock])))}/${fmt(median(rs.map((x) => x.seekNow[clock])))}`.padStart(9),
        median(d) <= 1000 ? 'yes' : 'NO',
      ].join(' | '))
    }
  }
}

// A child that accepts one connection at a time and reads everything, discarding it.
function sink() {
  return new Promise((resolve) => {
    const child = fork(__filename, ['--sink'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    child.once('message', (port) => resolve({ child, port }))
  })
}

// The process's CPU time (user + system, every thread: io_uring's workers count too, as in the
// C zc_bench's getrusage(RUSAGE_SELF)), in seconds.
function cpuNow() {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1e6
}

const NBUF = 16

async function viaSocketWrite(port, size) {
  const s = net.connect(port, '127.0.0.1')
  await new Promise((r) => s.once('connect', r))
  const bufs = Array.from({ length: NBUF }, (_, i) => Buffer.alloc(size, i))
  let bytes = 0
  const t0 = performance.now()
  const c0 = cpuNow()
  const end = t0 + SECONDS * 1000
  let i = 0
  await new Promise((resolve) => {
    const pump = () => {
      while (performance.now() < end) {
        bytes += size
        // socket.write copies nothing either: it hands the Buffer to libuv, which writes it;
        // the Buffer must not change until the write callback (Node keeps it referenced).
        if (!s.write(bufs[i++ % NBUF])) return s.once('drain', pump)
      }
      resolve()
    }
    pump()
  })
  await new Promise((r) => s.end(r))
  const secs = (performance.now() - t0) / 1000
  s.destroy()
  return { bytes, secs, cpu: cpuNow() - c0, copied: '-' }
}

// Node's own datagram send, `nbuf` sends in flight at most (Node's dgram has no backpressure
// signal but the send callbacks): dgram.Socket.send of `size`-byte datagrams on a connected
// socket with the C zc_bench's 2 MiB SO_SNDBUF.
async function viaDgram(dst, port, size) {
  const s = dgram.createSocket({ type: dst.includes(':') ? 'udp6' : 'udp4', sendBufferSize: 1 << 21 })
  await new Promise((resolve, reject) => {
    s.once('error', reject)
    s.connect(port, dst, resolve)
  })
  const bufs = Array.from({ length: NBUF }, (_, i) => Buffer.alloc(size, i))
  let bytes = 0
  let errors = 0
  let inflight = 0
  let i = 0
  const t0 = performance.now()
  const c0 = cpuNow()
  const end = t0 + SECONDS * 1000
  await new Promise((resolve) => {
    const pump = () => {
      while (inflight < NBUF && performance.now() < end) {
        inflight++
        s.send(bufs[i++ % NBUF], sent)
      }
      if (inflight === 0) resolve()
    }
    const sent = (err) => {
      inflight--
      if (err) errors++
      else bytes += size
      pump()
    }
    pump()
  })
  const secs = (performance.now() - t0) / 1000
  const cpu = cpuNow() - c0
  await new Promise((r) => s.close(r))
  if (errors) throw new Error(`dgram: ${errors} sends failed`)
  return { bytes, secs, cpu, copied: '-' }
}

// ZeroCopySender on a descriptor of its own (so every backend is allowed, the error queue
// too): blocking sends of NBUF `size`-byte buffers taking turns, each sent again once its
// completion came back; `copied` is the share of completions the kernel marked COPIED.
// `how`: 'into' (sendReapInto/reapInto: numeric userData, completions written into one
// reused Float64Array: no object per send or completion), 'objects' (sendReap/reap: a result
// object and one object per completion), 'batch' (sendBatch of every free buffer in one call,
// the completions it returns, and reapInto for those a wait brings).
// `opts`: the sender's options ({ backend, adaptive }).
async function viaSender(fd, opts, size, how = 'into') {
  const z = new lowcopy.ZeroCopySender(fd, opts)
  const bufs = Array.from({ length: NBUF }, (_, i) => Buffer.alloc(size, i))
  const free = Array.from({ length: NBUF }, (_, i) => i)
  const out = new Float64Array(1 + 3 * NBUF)
  let bytes = 0
  let copied = 0
  let done = 0
  let sends = 0
  const collect = (cs) => {
    for (const c of cs) {
      free.push(c.userData)
      done++
      if (c.copied) copied++
    }
  }
  const collectInto = () => {
    const k = out[0]
    for (let j = 0; j < k; j++) {
      free.push(out[1 + 3 * j])
      done++
      if (out[3 + 3 * j] & 1) copied++
    }
  }
  const reapAll = () => {
    if (how !== 'objects') {
      while (z.reapInto(out) > 0) collectInto()
    } else collect(z.reap())
  }
  const t0 = performance.now()
  const c0 = cpuNow()
  const end = t0 + SECONDS * 1000
  while (performance.now() < end) {
    if (free.length === 0) {
      z.wait(1000) // every buffer in flight: wait for one to come back
      reapAll()
      continue
    }
    if (how === 'batch') {
      const ids = free.splice(0, free.length)
      const r = z.sendBatch(ids.map((i) => bufs[i]), Float64Array.from(ids))
      bytes += r.bytes
      sends += r.sends
      for (let j = r.sends; j < ids.length; j++) free.push(ids[j])
      collect(r.completions)
      continue
    }
    const i = free.pop()
    let n
    if (how === 'into') {
      n = z.sendReapInto(bufs[i], i, out) // blocking send: the socket is ours alone
      collectInto()
    } else {
      const r = z.sendReap(bufs[i], i)
      n = r.bytes
      collect(r.completions)
    }
    bytes += n
    if (n === 0) free.push(i)
    else sends++
  }
  while (z.inflight > 0) {
    z.wait(1000)
    reapAll()
  }
  reapAll()
  const secs = (performance.now() - t0) / 1000
  const cpu = cpuNow() - c0
  z.close()
  testing.close(fd)
  if (done !== sends) throw new Error(`ZeroCopySender ${JSON.stringify(opts)} ${how}: ${sends} sends, ${done} completions`)
  return { bytes, secs, cpu, copied: done ? `${Math.round((100 * copied) / done)}%` : '-' }
}

// The C library's figure from the same run: examples/c/zc_bench (the binary scripts/zc_bench.sh
// runs), one run of `mode` to the same destination, its "app" loop (poll only after EAGAIN).
function viaC(cbin, dst, port, mode, size) {
  const args = [dst.includes(':') ? '-6' : '-4', '-t', 'udp', '-p', String(port), '-T', String(SECONDS),
    '-D', dst, '-s', String(size), '-m', mode, '-L', 'tx-only', '-P']
  const out = execFileSync(cbin, args, { encoding: 'utf8' })
  const kv = Object.fromEntries(out.split(/\s+/).filter((w) => w.includes('=')).map((w) => w.split('=')))
  if (kv.ok !== '1') throw new Error(`zc_bench ${mode}: check failed: ${out}`)
  const compl = Number(kv.completions)
  return {
    bytes: Number(kv.bytes),
    secs: Number(kv.secs),
    cpu: Number(kv.cpu_user) + Number(kv.cpu_sys),
    copied: compl > 0 ? `${Math.round((100 * Number(kv.copied)) / compl)}%` : '-',
  }
}

// Runs `rows` ([name, async () => run]) REPEAT times, interleaved (drift on the machine hits all
// alike), and prints one line per row: the median run by MB per CPU-second; "x first" is the
// median of per-round ratios against the first row (run seconds apart, so other load on the
// machine disturbs it less than a ratio of medians); spread is (max - min) / median of MB/CPU-s.
async function throughputRows(title, rows, goals = []) {
  const results = {}
  for (let r = 0; r < REPEAT; r++) {
    for (const [name, run] of rows) (results[name] ||= []).push(await run())
  }
  console.log(`\n${title} (${SECONDS} s per run, median of ${REPEAT} by MB per CPU-second)`)
  const hdr = `${'mode'.padEnd(36)} | ${'MB/s'.padStart(7)} | ${'MB/CPU-s'.padStart(8)} | ${'CPU s/GB'.padStart(8)} | ${'x first'.padStart(7)} | ${'spread'.padStart(6)} | copied`
  console.log(hdr)
  console.log('-'.repeat(hdr.length))
  const eff = (x) => x.bytes / 1e6 / x.cpu
  const base = results[rows[0][0]]
  for (const [name] of rows) {
    const runs = results[name]
    const sorted = [...runs].sort((a, b) => eff(a) - eff(b))
    const m = sorted[sorted.length >> 1]
    const ratios = runs.map((x, i) => eff(x) / eff(base[i]))
    const spread = (eff(sorted[sorted.length - 1]) - eff(sorted[0])) / eff(m)
    console.log(`${name.padEnd(36)} | ${(m.bytes / 1e6 / m.secs).toFixed(0).padStart(7)} | ${eff(m).toFixed(0).padStart(8)} | ${(m.cpu / (m.bytes / 1e9)).toFixed(3).padStart(8)} | ${median(ratios).toFixed(2).padStart(7)} | ${`${(100 * spread).toFixed(0)}%`.padStart(6)} | ${m.copied}`)
  }
  // The issue's rows as ratios of MB per CPU-second: [row, against, goal]; the median of the
  // per-round ratios (rows of one round run seconds apart), with the rounds' range.
  for (const [a, b, goal] of goals) {
    if (!results[a] || !results[b]) continue
    const rs = results[a].map((x, i) => eff(x) / eff(results[b][i])).sort((p, q) => p - q)
    const x = median(rs)
    console.log(`  ${a} / ${b} = ${x.toFixed(2)}x (rounds ${rs[0].toFixed(2)}..${rs[rs.length - 1].toFixed(2)}; goal >= ${goal}: ${x >= goal ? 'yes' : 'NO'})`)
  }
}

async function loopbackTable() {
  const { child, port } = await sink()
  const size = 65536
  try {
    await throughputRows(`Throughput: TCP over loopback, ${size / 1024} KiB sends to a reading child process; the kernel copies every "zerocopy" send here`, [
      ['socket.write', () => viaSocketWrite(port, size)],
      ['ZeroCopySender AUTO adaptive', () => viaSender(testing.connectPort(port), { adaptive: true }, size)],
      ['ZeroCopySender AUTO adaptive objects', () => viaSender(testing.connectPort(port), { adaptive: true }, size, 'objects')],
      ['ZeroCopySender copy', () => viaSender(testing.connectPort(port), { backend: 'copy' }, size)],
      ['ZeroCopySender errqueue', () => viaSender(testing.connectPort(port), { backend: 'errqueue' }, size)],
      ['ZeroCopySender io_uring', () => viaSender(testing.connectPort(port), { backend: 'io_uring' }, size)],
    ], [
      ['ZeroCopySender AUTO adaptive', 'socket.write', 0.95],
      ['ZeroCopySender AUTO adaptive objects', 'socket.write', 0.95],
    ])
  } finally {
    child.kill()
  }
}

// The tx-only table, inside the sender's namespace of scripts/zc_bench.sh (which set
// ZC_TXONLY_DST4 and ZC_BENCH_BIN): UDP datagrams routed out of an ifb device that drops them,
// so the kernel really sends from the pinned pages (completions not COPIED), beside the C
// library's figures from the same run.
async function txonlyTable() {
  const dst = process.env.ZC_TXONLY_DST4
  const cbin = process.env.ZC_BENCH_BIN
  if (!dst || !cbin) throw new Error('--txonly runs inside scripts/zc_bench.sh (ZC_BENCH_TXONLY_CMD)')
  const size = 65435 // the C zc_bench's payload (and the kernel selftest's)
  const port = 20000
  const fd = () => testing.udpConnect(dst, port, 1 << 21)
  await throughputRows(`Throughput: UDP tx-only (routed out of a dropping ifb device: true zerocopy), ${size}-byte datagrams to ${dst}`, [
    ['dgram socket.send', () => viaDgram(dst, port, size)],
    ['ZeroCopySender errqueue', () => viaSender(fd(), { backend: 'errqueue' }, size)],
    ['ZeroCopySender io_uring', () => viaSender(fd(), { backend: 'io_uring' }, size)],
    ['ZeroCopySender errqueue objects', () => viaSender(fd(), { backend: 'errqueue' }, size, 'objects')],
    ['ZeroCopySender errqueue sendBatch', () => viaSender(fd(), { backend: 'errqueue' }, size, 'batch')],
    ['ZeroCopySender copy', () => viaSender(fd(), { backend: 'copy' }, size)],
    ['C zc_bench copy (sendmsg)', () => viaC(cbin, dst, port, 'copy', size)],
    ['C lowcopy errqueue (lc-errq)', () => viaC(cbin, dst, port, 'lc-errq', size)],
    ['C lowcopy io_uring (lc-uring)', () => viaC(cbin, dst, port, 'lc-uring', size)],
  ], [
    ['ZeroCopySender errqueue', 'dgram socket.send', 1.0],
    ['ZeroCopySender io_uring', 'dgram socket.send', 1.0],
    ['ZeroCopySender errqueue objects', 'dgram socket.send', 1.0],
    ['ZeroCopySender errqueue', 'C lowcopy errqueue (lc-errq)', 0.9],
    ['ZeroCopySender errqueue sendBatch', 'C lowcopy errqueue (lc-errq)', 0.9],
    ['ZeroCopySender io_uring', 'C lowcopy io_uring (lc-uring)', 0.9],
  ])
}

// Runs the tx-only table in network namespaces made (and removed, even on failure) by
// scripts/zc_bench.sh, which needs root, ip(8) and an ifb device.
function txonlyViaScript() {
  const script = path.join(__dirname, '..', '..', 'scripts', 'zc_bench.sh')
  const cmd = `exec ${JSON.stringify(process.execPath)} ${JSON.stringify(__filename)} --txonly`
  const r = spawnSync(script, [], {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, ZC_BENCH_TXONLY_CMD: cmd, ZC_BENCH_REPEAT: String(REPEAT), NODE_BENCH_SECONDS: String(SECONDS) },
  })
  if (r.status === 3) console.log('\nThroughput tx-only: skipped (no ifb device)')
  else if (r.status !== 0) throw new Error(`tx-only table: ${script} exited with ${r.status ?? r.signal}`)
}

// The callgrind table's Node side (a child run under valgrind): `n` blocking sendReapInto of
// 16 buffers taking turns (as viaSender's 'into' loop) to 127.0.0.1:`port`, or (`how`
// 'batch') sendBatch of every free buffer with their numbers in a Float64Array (as its
// 'batch' loop), or (`how` 'objects') sendReap and reap, which hand out objects; prints the
// sends.
function costChild(port, n, how) {
  const fd = testing.udpConnect('127.0.0.1', port, 1 << 21)
  const z = new lowcopy.ZeroCopySender(fd, { backend: 'errqueue' })
  const bufs = Array.from({ length: 16 }, (_, i) => Buffer.alloc(65435, i))
  const free = bufs.map((_, i) => i)
  const out = new Float64Array(1 + 3 * 16)
  const collect = () => { for (let j = 0; j < out[0]; j++) free.push(out[1 + 3 * j]) }
  let sends = 0
  while (sends < n) {
    if (free.length === 0) {
      z.wait(1000)
      if (how === 'objects') for (const c of z.reap()) free.push(c.userData)
      else while (z.reapInto(out) > 0) collect()
      continue
    }
    if (how === 'batch') {
      const ids = free.splice(0, free.length)
      const r = z.sendBatch(ids.map((i) => bufs[i]), Float64Array.from(ids))
      sends += r.sends
      for (let j = r.sends; j < ids.length; j++) free.push(ids[j])
      for (const c of r.completions) free.push(c.userData)
      continue
    }
    const i = free.pop()
    if (how === 'objects') {
      const r = z.sendReap(bufs[i], i)
      if (r.bytes > 0) sends++
      else free.push(i)
      for (const c of r.completions) free.push(c.userData)
      continue
    }
    if (z.sendReapInto(bufs[i], i, out) > 0) sends++
    else free.push(i)
    collect()
  }
  z.close()
  testing.close(fd)
  console.log(`sends=${sends}`)
}

// Runs `cmd` under callgrind counting only inside the functions `fns` (and what they call);
// returns the instructions per send (the run prints sends=N).
function instructionsPer(fns, cmd, args) {
  const out = path.join(require('node:os').tmpdir(), `lowcopy-bench-cg.${process.pid}`)
  try {
    const toggles = fns.map((f) => `--toggle-collect=${f}`)
    const r = spawnSync('valgrind', ['-q', '--tool=callgrind', '--collect-atstart=no', ...toggles,
      `--callgrind-out-file=${out}`, cmd, ...args], { encoding: 'utf8' })
    const sends = Number((/sends=(\d+)/.exec(r.stdout) || [])[1])
    if (r.status !== 0 || !(sends > 0)) throw new Error(`callgrind ${cmd}: exit ${r.status}: ${r.stdout}${r.stderr}`)
    const ir = Number(/^summary: (\d+)/m.exec(require('node:fs').readFileSync(out, 'utf8'))[1])
    return ir / sends
  } finally {
    require('node:fs').rmSync(out, { force: true })
  }
}

async function costTable(cdir) {
  if (spawnSync('valgrind', ['--version']).status !== 0) {
    console.log('\nInstructions per call: skipped (no valgrind)')
    return
  }
  const rx = dgram.createSocket('udp4') // never read: the datagrams are dropped once it is full
  await new Promise((r) => rx.bind(0, '127.0.0.1', r))
  const port = String(rx.address().port)
  try {
    // The sends and the reaps of completions that a wait brought (waits not counted).
    const c = instructionsPer(['lowcopy_zc_send_reap', 'lowcopy_zc_reap'], path.join(cdir, 'zc_bench'),
      ['-4', '-t', 'udp', '-D', '127.0.0.1', '-p', port, '-m', 'lc-errq', '-T', '0.5', '-P'])
    // The sender's bound functions (lowcopy.js: sendReapInto, reapInto, sendBatch) and the
    // class methods a call without them would take.
    const fns = ['lowcopy_node::zc::sender_bind::cb', '*::reap_into_c_callback', '*::send_batch_c_callback',
      '*::send_reap_into_c_callback', '*::send_reap_c_callback', '*::reap_c_callback']
    const node = instructionsPer(fns, process.execPath, [__filename, '--cost-child', port, '20000', 'into'])
    const batch = instructionsPer(fns, process.execPath, [__filename, '--cost-child', port, '20000', 'batch'])
    const objects = instructionsPer(fns, process.execPath, [__filename, '--cost-child', port, '20000', 'objects'])
    console.log('\nInstructions per send (callgrind: user space inside the send and reap calls, waits not counted; UDP loopback, error queue)')
    console.log(`${'calls'.padEnd(42)} | instr | x C`)
    console.log('-'.repeat(58))
    console.log(`${'C lowcopy_zc_send_reap + lowcopy_zc_reap'.padEnd(42)} | ${fmt(c).padStart(5)} | 1.00`)
    console.log(`${'Node sendReapInto + reapInto'.padEnd(42)} | ${fmt(node).padStart(5)} | ${(node / c).toFixed(2)}`)
    console.log(`${'Node sendBatch (Float64Array) + reapInto'.padEnd(42)} | ${fmt(batch).padStart(5)} | ${(batch / c).toFixed(2)}`)
    console.log(`${'Node sendReap + reap (objects; natively)'.padEnd(42)} | ${fmt(objects).padStart(5)} | ${(objects / c).toFixed(2)}`)
  } finally {
    rx.close()
  }
}

async function main() {
  const tables = (process.env.TABLES || 'peek loopback txonly cost').split(/\s+/)
  if (process.argv[2] === '--txonly') return txonlyTable()
  if (process.argv[2] === '--cost-child') return costChild(Number(process.argv[3]), Number(process.argv[4]), process.argv[5])
  const cbin = process.argv[2] || path.join(__dirname, '..', '..', 'build', 'bin', 'node_peek_bench')
  if (tables.includes('peek')) peekTable(cbin)
  if (tables.includes('loopback')) await loopbackTable()
  if (tables.includes('txonly')) {
    if (process.getuid() !== 0) console.log('\nThroughput tx-only: skipped (needs root: network namespaces)')
    else txonlyViaScript()
  }
  if (tables.includes('cost')) await costTable(path.dirname(cbin))
}

if (process.argv[2] === '--sink') {
  const srv = net.createServer((s) => {
    s.on('data', () => {})
    s.on('error', () => {})
  })
  srv.listen(0, '127.0.0.1', () => process.send(srv.address().port))
} else {
  main().catch((e) => {
    console.error(e)
    process.exit(1)
  })
}
