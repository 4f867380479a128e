// Smoke check of the installed npm packages (scripts/dist_test.sh): each primitive once over a
// loopback TCP pair (the package's own socket fixture). Exits non-zero on a failure.
'use strict'
const assert = require('node:assert')
const lc = require('lowcopy')
const { testing } = require('lowcopy/index.js')

const where = require.resolve('lowcopy-linux-x64-gnu')
const p = testing.pair('tcp4')
const msg = Buffer.from('hello lowcopy, from the npm tarballs')
const zc = new lc.ZeroCopySender(p.peer)
assert.strictEqual(zc.send(msg, 'first'), msg.length)
let done = []
while (done.length === 0) {
  zc.wait(5000) // the number ready to reap
  done = zc.reap()
}
assert.strictEqual(done[0].userData, 'first')
assert.strictEqual(done[0].result, msg.length)
console.log(`zerocopy send: completion userData=${done[0].userData} result=${done[0].result} (${zc.backend})`)
const got = lc.peekAt(p.sock, 6, 7)
assert.strictEqual(got.toString(), msg.subarray(6, 13).toString())
console.log(`peek at offset 6: ${JSON.stringify(got.toString())}`)
const buf = Buffer.alloc(4096)
const n = lc.recvAtLeast(p.sock, buf, msg.length, { timeoutMs: 5000 })
assert.strictEqual(buf.subarray(0, n).toString(), msg.toString())
console.log(`recvAtLeast ${msg.length}: ${n} bytes`)
zc.close()
testing.close(p.sock)
testing.close(p.peer)
console.log(`node smoke: ok (addon from ${where})`)
