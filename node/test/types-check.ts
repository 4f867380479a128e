// Compiled by `tsc --noEmit --strict` in scripts/ci.sh build: the published types accept the API as documented.
import * as net from 'node:net'
import { Peeker, PeekResult, ZeroCopySender, peekAtAsync, probe, ZcCompletion } from '../lowcopy'
const caps = probe()
const b: boolean = caps.peekOffTcp4
const s = new net.Socket()
const p = new Peeker(s, { mode: 'offset' })
const n: number = p.peekInto(Buffer.alloc(10), { dontWait: true })
p[Symbol.dispose]()
const d = new Peeker(3, { mode: 'offset', kind: 'tcp4' })
const r: PeekResult = d.peekAtInto(100, Buffer.alloc(10), { dontWait: true })
const pos: number = r.streamPos + d.peekvAt(0, [Buffer.alloc(1)]).len
d.close({ restore: false })
const z = new ZeroCopySender(3, { backend: 'io_uring' })
z.send(Buffer.from('x'), { any: 1 })
z.waitAsync(100).then((n: number) => n > 0 && z.reap().map((c: ZcCompletion) => c.userData))
peekAtAsync(s, 0, 16, { timeoutMs: 10 }).then((buf: Buffer) => buf.length)
void b; void n; void pos
