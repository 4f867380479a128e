#!/usr/bin/env node
// A protocol sniffer, the way proxies and tooling use offset peek: a server that looks at
// each new connection's first bytes WITHOUT consuming them (an HTTP request line, or a TLS
// ClientHello's server name), decides where the connection goes, and hands it on with every
// byte still unread in the kernel: to an in-process http.Server, or spliced to a backend
// chosen by the TLS server name (the backend then does the TLS handshake itself, from the
// ClientHello's first byte).
//
// How it shares the socket with Node: the listener is created with `pauseOnConnect`, so
// libuv does not read a new connection until `resume()` (socket.pause() would not stop it:
// libuv reads as soon as a socket flows). lowcopy.peekAtAsync peeks (MSG_PEEK, on its own
// duplicate of the fd, off the JS thread) until the sniffer has seen enough; then the
// connection is handed on and resumed, and Node reads from byte 0.
//
//   node sniffer.js [port]   listens on 127.0.0.1:port (default 8443), prints each decision
'use strict'
const http = require('node:http')
const net = require('node:net')
const lowcopy = require('lowcopy')

/// Looks at the bytes seen so far: {proto: 'tls', sni} / {proto: 'http', method, path} /
/// {proto: 'other'}, or null when more bytes are needed to decide.
function classify(b) {
  if (b.length === 0) return null
  if (b[0] === 0x16) return classifyTls(b)
  const text = b.toString('latin1')
  const m = text.match(/^([A-Z]{3,10}) (\S+) HTTP\/1\.[01]\r\n/)
  if (m) return { proto: 'http', method: m[1], path: m[2] }
  // An HTTP request line can still be arriving: wait for its end (8 KiB at most).
  if (/^[A-Z]{1,10}( \S*)?$/.test(text) || (/^[A-Z]{3,10} /.test(text) && !text.includes('\r\n') && b.length < 8192)) return null
  return { proto: 'other' }
}

/// The server name of a TLS ClientHello (RFC 8446 4.1.2, RFC 6066 3), once the whole
/// handshake message is in `b`; null while it is not.
function classifyTls(b) {
  if (b.length < 5) return null
  const recLen = b.readUInt16BE(3)
  if (b.length < 5 + Math.min(recLen, 4)) return null
  if (b[5] !== 0x01) return { proto: 'other' } // not a ClientHello
  const hsLen = b.readUIntBE(6, 3)
  if (b.length < 9 + hsLen) return null // (a ClientHello spread over records is not handled)
  let p = 9 + 2 + 32 // version, random
  p += 1 + b[p] // session id
  p += 2 + b.readUInt16BE(p) // cipher suites
  p += 1 + b[p] // compression methods
  if (p + 2 > 9 + hsLen) return { proto: 'tls', sni: null }
  const end = p + 2 + b.readUInt16BE(p)
  p += 2
  while (p + 4 <= end) {
    const type = b.readUInt16BE(p)
    const len = b.readUInt16BE(p + 2)
    if (type === 0 && len >= 5 && b[p + 6] === 0) {
      const nameLen = b.readUInt16BE(p + 7)
      return { proto: 'tls', sni: b.toString('latin1', p + 9, p + 9 + nameLen) }
    }
    p += 4 + len
  }
  return { proto: 'tls', sni: null }
}

/// Peeks `sock`'s first bytes until `classify` decides (or `max` bytes, or `timeoutMs`).
/// Nothing is consumed: every byte stays queued for whoever reads the socket next.
async function sniff(sock, { max = 16384, timeoutMs = 5000 } = {}) {
  const deadline = Date.now() + timeoutMs
  let seen = Buffer.alloc(0)
  for (;;) {
    // Waits (on the thread pool) for a byte beyond what was seen, then peeks from byte 0.
    const more = await lowcopy.peekAtAsync(sock, seen.length, 1, { timeoutMs: Math.max(1, deadline - Date.now()) })
    if (more.length === 0) return { verdict: { proto: 'other' }, seen } // the peer closed
    seen = lowcopy.peekAt(sock, 0, max, { dontWait: true })
    const verdict = classify(seen)
    if (verdict || seen.length >= max) return { verdict: verdict || { proto: 'other' }, seen }
  }
}

/// A sniffing server. `routes.http`: an http.Server the HTTP connections are handed to;
/// `routes.tls(sni)`: {host, port} of the backend for that server name (or null: closed);
/// `routes.other`: {host, port} for the rest (or none: closed). `onDecision(info)` is told of
/// each decision: {proto, sni, path, peeked}.
function createSniffer(routes, onDecision = () => {}) {
  return net.createServer({ pauseOnConnect: true }, async (sock) => {
    sock.on('error', () => {})
    let verdict, seen
    try {
      ({ verdict, seen } = await sniff(sock))
    } catch (e) {
      onDecision({ proto: 'error', error: e.code || e.message })
      sock.destroy()
      return
    }
    onDecision({ ...verdict, peeked: seen.length })
    if (verdict.proto === 'http' && routes.http) {
      routes.http.emit('connection', sock) // the http parser reads from byte 0
      sock.resume()
      return
    }
    const target = verdict.proto === 'tls' ? routes.tls && routes.tls(verdict.sni) : routes.other
    if (!target) {
      sock.destroy()
      return
    }
    const up = net.connect(target.port, target.host || '127.0.0.1')
    up.on('error', () => sock.destroy())
    sock.on('close', () => up.destroy())
    up.on('close', () => sock.destroy())
    sock.pipe(up)
    up.pipe(sock)
    sock.resume() // Node now reads the connection from its first byte, ClientHello included
  })
}

module.exports = { classify, sniff, createSniffer }

if (require.main === module) {
  const port = Number(process.argv[2] || 8443)
  const app = http.createServer((req, res) => res.end(`hello from the http route: ${req.method} ${req.url}\n`))
  const echo = net.createServer((s) => s.pipe(s)).listen(0, '127.0.0.1', () => {
    const routes = { http: app, tls: () => echo.address(), other: echo.address() }
    createSniffer(routes, (d) => console.log('sniffer:', JSON.stringify(d)))
      .listen(port, '127.0.0.1', () => console.log(`sniffer: listening on 127.0.0.1:${port}`))
  })
}
