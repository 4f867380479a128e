#!/usr/bin/env node
// The source build: the native addon from the Rust sources with cargo (crates come from
// crates.io; nothing else is downloaded), put where the loader (index.js) looks first:
// lowcopy.linux-x64-gnu.node beside this package.json. No install script runs it: the prebuilt
// platform package (lowcopy-linux-x64-gnu) is used where it matches, and scripts/load.js runs
// this at the first require() only where no binary loads. By hand: `npm run build-from-source`
// in node_modules/lowcopy (or `node node_modules/lowcopy/scripts/install.js`).
//
// In the lowcopy repository the crate is a workspace member and builds into the workspace's
// target/. A packed package (npm pack) carries the core crate in vendor/ and is its own
// workspace; its target/ is removed after the build (hundreds of MB), unless
// LOWCOPY_KEEP_TARGET=1. LOWCOPY_DEBUG=1 builds without --release.
'use strict'
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const out = path.join(root, 'lowcopy.linux-x64-gnu.node')
const packed = fs.existsSync(path.join(root, 'vendor', 'lowcopy', 'Cargo.toml'))

function die(msg) {
  console.error(`lowcopy: ${msg}`)
  process.exit(1)
}

if (process.platform !== 'linux') die(`Linux only (this is ${process.platform})`)
const cargo = process.env.CARGO || 'cargo'
const args = ['build', '--lib', '--message-format=json-render-diagnostics',
  '--manifest-path', path.join(root, 'Cargo.toml')]
if (process.env.LOWCOPY_DEBUG !== '1') args.splice(1, 0, '--release')
const t0 = Date.now()
console.error(`lowcopy: ${cargo} ${args.join(' ')}`)
const r = spawnSync(cargo, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 28 })
if (r.error) die(`cannot run ${cargo} (${r.error.code}): the Rust toolchain is needed to build this package (https://rustup.rs)`)
if (r.status !== 0) die(`cargo build failed (exit ${r.status})`)
let lib = null
for (const line of r.stdout.toString().split('\n')) {
  if (!line.startsWith('{')) continue
  const m = JSON.parse(line)
  if (m.reason === 'compiler-artifact' && m.target.name === 'lowcopy_node' &&
      m.target.kind.includes('cdylib')) {
    lib = m.filenames.find((f) => f.endsWith('.so'))
  }
}
if (!lib) die('cargo built no liblowcopy_node.so')
// Copy then rename: a process that has the old addon loaded keeps its mapping intact.
const tmp = `${out}.tmp${process.pid}`
fs.copyFileSync(lib, tmp)
fs.renameSync(tmp, out)
if (packed && process.env.LOWCOPY_KEEP_TARGET !== '1') {
  fs.rmSync(path.join(root, 'target'), { recursive: true, force: true })
}
console.error(`lowcopy: built ${path.relative(process.cwd(), out) || out} in ${((Date.now() - t0) / 1000).toFixed(1)} s`)
