// Sharing a socket with libuv: the pauseOnConnect sniffer (examples/node/sniffer.js) end to
// end, what a peek of a paused connection leaves behind, and what happens on a socket Node
// already reads.
'use strict'
const assert = require('node:assert/strict')
const http = require('node:http')
const net = require('node:net')
const tls = require('node:tls')
const { test } = require('node:test')
const { once } = require('node:events')
const { native: lc, testing } = require('./harness.js')
const { createSniffer, classify } = require('../../examples/node/sniffer.js')

const listen = async (srv) => {
  srv.listen(0, '127.0.0.1')
  await once(srv, 'listening')
  return srv.address().port
}

test('sniffer: an HTTP request is peeked, routed to the http.Server and answered from byte 0', async () => {
  const decisions = []
  const app = http.createServer((req, res) => res.end(`route http ${req.method} ${req.url}`))
  const sniffer = createSniffer({ http: app }, (d) => decisions.push(d))
  const port = await listen(sniffer)
  try {
    const body = await new Promise((resolve, reject) => {
      http.get({ port, host: '127.0.0.1', path: '/some/path?x=1', agent: false }, (res) => {
        let b = ''
        res.setEncoding('utf8')
        res.on('data', (c) => (b += c))
        res.on('end', () => resolve(b))
      }).on('error', reject)
    })
    assert.equal(body, 'route http GET /some/path?x=1')
    assert.equal(decisions.length, 1)
    assert.equal(decisions[0].proto, 'http')
    assert.equal(decisions[0].path, '/some/path?x=1')
    assert.ok(decisions[0].peeked >= 'GET /some/path?x=1 HTTP/1.1\r\n'.length)
  } finally {
    sniffer.close()
    app.close()
  }
})

test('sniffer: a TLS ClientHello is routed by its server name, and the backend gets every byte', async () => {
  const got = { a: [], b: [] }
  const backend = (name) => net.createServer((s) => {
    s.on('data', (d) => got[name].push(d))
    s.on('error', () => {})
  })
  const a = backend('a')
  const b = backend('b')
  const pa = await listen(a)
  const pb = await listen(b)
  const decisions = []
  const sniffer = createSniffer({
    tls: (sni) => (sni === 'a.example' ? { port: pa } : sni === 'b.example' ? { port: pb } : null),
  }, (d) => decisions.push(d))
  const port = await listen(sniffer)
  try {
    for (const [sni, name] of [['b.example', 'b'], ['a.example', 'a']]) {
      // A real TLS client: its ClientHello carries the server name. The backend is no TLS
      // server, so the handshake never completes: the test looks at what the backend got.
      const c = tls.connect({ port, host: '127.0.0.1', servername: sni, rejectUnauthorized: false })
      c.on('error', () => {})
      const deadline = Date.now() + 5000
      while (got[name].length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
      c.destroy()
      const bytes = Buffer.concat(got[name])
      assert.ok(bytes.length > 0, `backend ${name} got nothing`)
      assert.equal(bytes[0], 0x16, 'the backend sees the TLS record from its first byte')
      assert.deepEqual(classify(bytes), { proto: 'tls', sni }, 'the backend got the whole ClientHello')
    }
    assert.deepEqual(decisions.map((d) => d.sni), ['b.example', 'a.example'])
  } finally {
    sniffer.close()
    a.close()
    b.close()
  }
})

test('pauseOnConnect: a peeked connection keeps its bytes for Node, SO_PEEK_OFF and SO_RCVLOWAT back to normal', async () => {
  const srv = net.createServer({ pauseOnConnect: true })
  const port = await listen(srv)
  const client = net.connect(port, '127.0.0.1')
  const [sock] = await once(srv, 'connection')
  try {
    const fd = sock._handle.fd
    assert.equal(sock._handle.reading, false, 'libuv does not read a paused new connection')
    client.write('hello world, this is the whole message')
    // A Peeker with the armed low-water mark, as a long-lived sniffer might use.
    const p = new lc.Peeker(sock)
    p.setLowatArmed(true)
    const head = await p.peekAsync(5, { timeoutMs: 3000 })
    assert.equal(head.toString(), 'hello')
    const rest = await p.peekAsync(100, { timeoutMs: 3000 })
    assert.equal(rest.toString().slice(0, 6), ' world')
    assert.ok(testing.getsockopt(fd, 'SO_PEEK_OFF') >= 0, 'the peeker uses SO_PEEK_OFF meanwhile')
    p.close()
    assert.equal(testing.getsockopt(fd, 'SO_PEEK_OFF'), -1, 'SO_PEEK_OFF disabled again')
    assert.equal(testing.getsockopt(fd, 'SO_RCVLOWAT'), 1, 'SO_RCVLOWAT restored')
    // Node reads everything, from byte 0.
    sock.setEncoding('latin1')
    let data = ''
    sock.on('data', (d) => (data += d))
    sock.resume()
    client.end()
    await once(sock, 'end')
    assert.equal(data, 'hello world, this is the whole message')
  } finally {
    client.destroy()
    sock.destroy()
    srv.close()
  }
})

test('peekAtAsync waits off the JS thread: timers keep running while it waits', async () => {
  const srv = net.createServer({ pauseOnConnect: true })
  const port = await listen(srv)
  const client = net.connect(port, '127.0.0.1')
  const [sock] = await once(srv, 'connection')
  try {
    let ticks = 0
    const t = setInterval(() => ticks++, 10)
    setTimeout(() => client.write('late'), 200)
    const b = await lc.peekAtAsync(sock, 0, 16, { timeoutMs: 3000 })
    clearInterval(t)
    assert.equal(b.toString(), 'late')
    assert.ok(ticks >= 10, `the event loop ran while the peek waited (${ticks} ticks)`)
    await assert.rejects(lc.peekAtAsync(sock, 4, 16, { timeoutMs: 50 }), { code: 'ETIMEDOUT', errno: -110, syscall: 'peekAtAsync' })
  } finally {
    client.destroy()
    sock.destroy()
    srv.close()
  }
})

test('a socket Node already reads: its bytes are gone from the kernel, a peek finds nothing (the documented misuse)', async () => {
  const srv = net.createServer() // no pauseOnConnect: libuv reads at once
  const port = await listen(srv)
  const client = net.connect(port, '127.0.0.1')
  const [sock] = await once(srv, 'connection')
  try {
    sock.pause() // does not stop libuv reading (lib/net.js)
    client.write('abc')
    const deadline = Date.now() + 3000
    while (sock.readableLength < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5))
    assert.equal(sock.readableLength, 3, 'Node pulled the bytes into its own buffer while paused')
    assert.throws(() => lc.peekAt(sock, 0, 16, { dontWait: true }), { code: 'EAGAIN' })
  } finally {
    client.destroy()
    sock.destroy()
    srv.close()
  }
})

test('Peeker.close() rejects a pending peekAsync with an AbortError', async () => {
  const srv = net.createServer({ pauseOnConnect: true })
  const port = await listen(srv)
  const client = net.connect(port, '127.0.0.1')
  const [sock] = await once(srv, 'connection')
  try {
    const p = new lc.Peeker(sock)
    const pending = p.peekAsync(10)
    setTimeout(() => p.close(), 50)
    await assert.rejects(pending, { name: 'AbortError', code: 'ABORT_ERR' })
    assert.equal(p.closed, true)
    assert.throws(() => p.peek(1), { code: 'EBADF' })
  } finally {
    client.destroy()
    sock.destroy()
    srv.close()
  }
})
