#!/usr/bin/env node
// The Node benchmark tables, side by side in one run (figures on a shared machine move from
// run to run: each cell is the median of REPEAT runs, 3 by default).
//
// 1. Per-call cost of Peeker.peekInto against the same peek made by the C library
//    (peek_bench, built from peek_bench.c against liblowcopy): a loopback TCP pair with 64 KiB
//    queued, (seek 0, peek SIZE bytes) per iteration, minus the same loop with the seek alone
//    (so each side's peek call is priced alone; the Node seek column is what one napi-rs
//    method call costs by itself). Goal: Node's peek at most 1 microsecond more than C's.
// 2. ZeroCopySender against socket.write, TCP over loopback: 64 KiB sends for SECONDS to a
//    child process that reads and discards. The sender process's throughput and CPU per GB.
//    Loopback copies every "zerocopy" send anyway (completions say COPIED): the io_uring row
//    measures what the API costs, not what zerocopy saves (that needs a real NIC; see the C
//    zc_bench's tx-only table).
//
//   node bench.js [PEEK_BENCH_BINARY]     env: REPEAT=3 SECONDS=2
'use strict'
const { execFileSync, fork } = require('node:child_process')
const net = require('node:net')
const path = require('node:path')
const lowcopy = require('lowcopy')
const { testing } = require('lowcopy/index.js') // loopback pairs without Node's net layer

const REPEAT = Number(process.env.REPEAT || 3)
const SECONDS = Number(process.env.SECONDS || 2)
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

function nodePeek(size, iters, seekOnly) {
  const p = testing.pair('tcp4')
  try {
    testing.writeAllSync(p.peer, Buffer.alloc(65536, 0x78))
    testing.waitQueued(p.sock, 65536)
    const peeker = new lowcopy.Peeker(p.sock)
    const buf = Buffer.alloc(size)
    for (let i = 0; i < 1000; i++) { peeker.seek(0); peeker.peekInto(buf) } // warm up
    const t0 = process.hrtime.bigint()
    if (seekOnly) {
      for (let i = 0; i < iters; i++) peeker.seek(0)
    } else {
      for (let i = 0; i < iters; i++) {
        peeker.seek(0)
        if (peeker.peekInto(buf) !== size) throw new Error('short peek')
      }
    }
    const ns = Number(process.hrtime.bigint() - t0) / iters
    peeker.close()
    return ns
  } finally {
    testing.close(p.sock)
    testing.close(p.peer)
  }
}

function peekTable(cbin) {
  console.log('Per-call cost of one peek: Peeker.peekInto vs lowcopy_peeker_peek (TCP loopback, 64 KiB queued, ns per call, median of ' + REPEAT + ')')
  const hdr = `${'size'.padStart(8)} | ${'C peek'.padStart(8)} | ${'Node peekInto'.padStart(13)} | ${'Node - C'.padStart(9)} | ${'Node seek'.padStart(9)} | <= 1 us more`
  console.log(hdr)
  console.log('-'.repeat(hdr.length))
  for (const size of [64, 1024, 16384, 65536]) {
    const iters = size >= 16384 ? 20000 : 100000
    const c = []
    const n = []
    const seeks = []
    const cOf = (extra) => Number(execFileSync(cbin, [String(size), String(iters), ...extra], { encoding: 'utf8' }).split(' ')[1])
    for (let r = 0; r < REPEAT; r++) {
      c.push(cOf([]) - cOf(['seek']))
      const seek = nodePeek(size, iters, true)
      seeks.push(seek)
      n.push(nodePeek(size, iters, false) - seek)
    }
    const [cm, nm] = [median(c), median(n)]
    console.log(`${String(size).padStart(8)} | ${cm.toFixed(0).padStart(8)} | ${nm.toFixed(0).padStart(13)} | ${(nm - cm).toFixed(0).padStart(9)} | ${median(seeks).toFixed(0).padStart(9)} | ${nm - cm <= 1000 ? 'yes' : 'NO'}`)
  }
}

// A child that accepts one connection at a time and reads everything, discarding it.
function sink() {
  return new Promise((resolve) => {
    const child = fork(__filename, ['--sink'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    child.once('message', (port) => resolve({ child, port }))
  })
}

function cpuNow() {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1e6
}

const CHUNK = 65536
const NBUF = 16

async function viaSocketWrite(port) {
  const s = net.connect(port, '127.0.0.1')
  await new Promise((r) => s.once('connect', r))
  const bufs = Array.from({ length: NBUF }, (_, i) => Buffer.alloc(CHUNK, i))
  let bytes = 0
  const t0 = performance.now()
  const c0 = cpuNow()
  const end = t0 + SECONDS * 1000
  let i = 0
  await new Promise((resolve) => {
    const pump = () => {
      while (performance.now() < end) {
        bytes += CHUNK
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

async function viaSender(port, backend) {
  const fd = testing.connectPort(port)
  const z = new lowcopy.ZeroCopySender(fd, { backend })
  const bufs = Array.from({ length: NBUF }, (_, i) => Buffer.alloc(CHUNK, i))
  const free = Array.from({ length: NBUF }, (_, i) => i)
  let bytes = 0
  let copied = 0
  let done = 0
  const collect = (cs) => {
    for (const c of cs) {
      free.push(c.userData)
      done++
      if (c.copied) copied++
    }
  }
  const t0 = performance.now()
  const c0 = cpuNow()
  const end = t0 + SECONDS * 1000
  while (performance.now() < end) {
    if (free.length === 0) {
      collect(z.wait(1000)) // every buffer in flight: wait for one to come back
      continue
    }
    const i = free.pop()
    const r = z.sendReap(bufs[i], i) // blocking send: the socket is ours alone
    bytes += r.bytes
    if (r.bytes === 0) free.push(i)
    collect(r.completions)
  }
  while (z.inflight > 0) collect(z.wait(1000))
  collect(z.reap())
  const secs = (performance.now() - t0) / 1000
  const backendUsed = z.backend
  z.close()
  testing.close(fd)
  return { bytes, secs, cpu: cpuNow() - c0, copied: done ? `${Math.round((100 * copied) / done)}%` : '-', backendUsed }
}

async function throughputTable() {
  const { child, port } = await sink()
  const rows = [
    ['socket.write', () => viaSocketWrite(port)],
    ['ZeroCopySender copy', () => viaSender(port, 'copy')],
    ['ZeroCopySender errqueue', () => viaSender(port, 'errqueue')],
    ['ZeroCopySender io_uring', () => viaSender(port, 'io_uring')],
  ]
  const results = {}
  for (let r = 0; r < REPEAT; r++) {
    for (const [name, run] of rows) { // interleaved: drift on the machine hits all alike
      (results[name] ||= []).push(await run())
    }
  }
  child.kill()
  console.log(`\nThroughput: TCP over loopback, ${CHUNK / 1024} KiB sends for ${SECONDS} s to a reading child process (median of ${REPEAT} by Gbit/s)`)
  const hdr = `${'mode'.padEnd(24)} | ${'Gbit/s'.padStart(7)} | ${'CPU s/GB'.padStart(8)} | ${'x write'.padStart(7)} | ${'CPU x'.padStart(6)} | copied`
  console.log(hdr)
  console.log('-'.repeat(hdr.length))
  let base = null
  for (const [name] of rows) {
    const runs = results[name].map((x) => ({ ...x, gbps: (x.bytes * 8) / x.secs / 1e9, cpuGb: x.cpu / (x.bytes / 1e9) }))
    runs.sort((a, b) => a.gbps - b.gbps)
    const m = runs[runs.length >> 1]
    base ||= m
    console.log(`${name.padEnd(24)} | ${m.gbps.toFixed(2).padStart(7)} | ${m.cpuGb.toFixed(3).padStart(8)} | ${(m.gbps / base.gbps).toFixed(2).padStart(7)} | ${(m.cpuGb / base.cpuGb).toFixed(2).padStart(6)} | ${m.copied}`)
  }
}

if (process.argv[2] === '--sink') {
  const srv = net.createServer((s) => {
    s.on('data', () => {})
    s.on('error', () => {})
  })
  srv.listen(0, '127.0.0.1', () => process.send(srv.address().port))
} else {
  const cbin = process.argv[2] || path.join(__dirname, '..', '..', 'build', 'bin', 'node_peek_bench')
  peekTable(cbin)
  throughputTable().catch((e) => {
    console.error(e)
    process.exit(1)
  })
}
