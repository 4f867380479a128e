// Compiled by `tsc --noEmit --strict` in scripts/ci.sh build: the published types accept the API as documented.
import * as net from 'node:net'
import { Peeker, ZeroCopySender, peekAtAsync, probe, ZcCompletion } from '../lowcopy'
const caps = probe()
const b: boolean = caps.peekOffTcp4
const s = new net.Socket()
const p = new Peeker(s, { mode: 'offset' })
const n: number = p.peekInto(Buffer.alloc(10), { dontWait: true })
p[Symbol.dispose]()
const z = new ZeroCopySender(3, { backend: 'io_uring' })
z.send(Buffer.from('x'), { any: 1 })
z.waitAsync(100).then((cs: ZcCompletion[]) => cs.map((c) => c.userData))
peekAtAsync(s, 0, 16, { timeoutMs: 10 }).then((buf: Buffer) => buf.length)
void b; void n
