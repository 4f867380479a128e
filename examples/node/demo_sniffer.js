#!/usr/bin/env node
// The sniffer (sniffer.js) on show: an HTTP request and two TLS ClientHellos go through it;
// each decision is printed with how many bytes were peeked, and where the bytes went.
'use strict'
const http = require('node:http')
const net = require('node:net')
const tls = require('node:tls')
const { createSniffer } = require('./sniffer.js')

async function main() {
  const app = http.createServer((req, res) => res.end(`hello from the http route: ${req.url}`))
  const seen = {}
  const backend = (name) => net.createServer((s) => {
    s.once('data', (d) => {
      seen[name] = d.length
      s.destroy()
    })
    s.on('error', () => {})
  }).listen(0, '127.0.0.1')
  const a = backend('a.example')
  const b = backend('b.example')
  await Promise.all([a, b].map((s) => new Promise((r) => s.once('listening', r))))
  const decisions = []
  const sniffer = createSniffer({
    http: app,
    tls: (sni) => ({ 'a.example': a.address(), 'b.example': b.address() })[sni] || null,
  }, (d) => decisions.push(d))
  await new Promise((r) => sniffer.listen(0, '127.0.0.1', r))
  const port = sniffer.address().port
  const body = await new Promise((resolve, reject) => {
    http.get({ port, host: '127.0.0.1', path: '/index.html', agent: false }, (res) => {
      let t = ''
      res.on('data', (d) => (t += d))
      res.on('end', () => resolve(t))
    }).on('error', reject)
  })
  console.log(`sniffer demo: HTTP GET /index.html -> ${JSON.stringify(decisions[0])} -> answered "${body}"`)
  for (const sni of ['a.example', 'b.example']) {
    const c = tls.connect({ port, host: '127.0.0.1', servername: sni })
    c.on('error', () => {})
    while (!seen[sni]) await new Promise((r) => setTimeout(r, 10))
    c.destroy()
    console.log(`sniffer demo: TLS ClientHello for ${sni} -> ${JSON.stringify(decisions[decisions.length - 1])} -> backend ${sni} got ${seen[sni]} bytes from byte 0`)
  }
  sniffer.close()
  a.close()
  b.close()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
