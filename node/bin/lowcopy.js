#!/usr/bin/env node
// `npx lowcopy probe`: what the running kernel offers lowcopy.
'use strict'
const lowcopy = require('..')

const rows = [
  ['peekOffTcp4', 'SO_PEEK_OFF on TCP/IPv4 (offset peek without re-copying; Linux 6.9)'],
  ['peekOffTcp6', 'SO_PEEK_OFF on TCP/IPv6 (Linux 6.12)'],
  ['peekOffUnix', 'SO_PEEK_OFF on AF_UNIX stream (Linux 3.4)'],
  ['peekOffMptcp', 'SO_PEEK_OFF on MPTCP (none so far: discard-prefix fallback)'],
  ['zerocopyTcp', 'SO_ZEROCOPY on TCP (MSG_ZEROCOPY; Linux 4.14)'],
  ['zerocopyUdp', 'SO_ZEROCOPY on UDP (Linux 5.0)'],
  ['uringSendZc', 'io_uring IORING_OP_SEND_ZC (Linux 6.0)'],
  ['uringSendmsgZc', 'io_uring IORING_OP_SENDMSG_ZC (Linux 6.1)'],
  ['tcpZerocopyReceiveSize', 'TCP_ZEROCOPY_RECEIVE struct bytes (0: absent; 64 since 5.12)'],
]

function main(argv) {
  const cmd = argv[0]
  if (cmd !== 'probe' || argv.length > 2 || (argv[1] && argv[1] !== '--json')) {
    console.error('usage: lowcopy probe [--json]')
    return 2
  }
  const caps = lowcopy.probe()
  if (argv[1] === '--json') {
    console.log(JSON.stringify(caps, null, 2))
    return 0
  }
  const os = require('node:os')
  console.log(`lowcopy probe: Linux ${os.release()}, Node ${process.version}`)
  for (const [k, what] of rows) {
    const v = caps[k]
    const shown = typeof v === 'boolean' ? (v ? 'yes' : 'no') : String(v)
    console.log(`  ${shown.padEnd(4)} ${k.padEnd(24)} ${what}`)
  }
  return 0
}

process.exitCode = main(process.argv.slice(2))
