#!/usr/bin/env node
// npm pack / npm publish: make the package build on its own, outside this repository.
//   prepack:  vendor/lowcopy/ = the core crate (Cargo.toml with workspace fields resolved,
//             src/); Cargo.toml points there and is its own workspace; Cargo.lock = the
//             workspace's lock (same crate versions as the repository's build).
//             package.json gets the exact-version optionalDependencies on the platform
//             packages (npm/*/package.json), as napi's prepublish writes them; the licence
//             texts are copied in.
//   postpack: puts the repository's Cargo.toml and package.json back and removes vendor/,
//             Cargo.lock and the licence copies.
'use strict'
const fs = require('node:fs')
const path = require('node:path')

const here = path.resolve(__dirname, '..')
const repo = path.resolve(here, '..')
const saved = path.join(here, '.Cargo.toml.repo')
const savedPkg = path.join(here, '.package.json.repo')
const licences = ['LICENSE-MIT', 'LICENSE-APACHE']

// The [workspace.package] and [workspace.dependencies] values of the root Cargo.toml.
function workspaceValues() {
  const text = fs.readFileSync(path.join(repo, 'Cargo.toml'), 'utf8')
  const vals = { package: {}, dependencies: {} }
  let section = ''
  for (const line of text.split('\n')) {
    const s = line.match(/^\[(.+)\]\s*$/)
    if (s) { section = s[1]; continue }
    const kv = line.match(/^([A-Za-z0-9_-]+)\s*=\s*(.+)$/)
    if (section === 'workspace.package' && kv) vals.package[kv[1]] = kv[2]
    if (section === 'workspace.dependencies' && kv) vals.dependencies[kv[1]] = kv[2]
  }
  const prof = text.match(/\n(\[profile\.[\s\S]*?)(?=\n\[(?!profile)|$)/)
  vals.profile = prof ? prof[1].trimEnd() + '\n' : ''
  return vals
}

// Replaces `x.workspace = true` lines with the workspace's values, and drops a `[lints]
// workspace = true` section (lints matter to the repository's own checks, not to a build).
function resolve(toml, ws) {
  toml = toml.replace(/^\[lints\]\s*\nworkspace\s*=\s*true\s*$/m, '')
  return toml.replace(/^([A-Za-z0-9_-]+)\.workspace\s*=\s*true\s*$/gm, (line, key) => {
    if (key in ws.package) return `${key} = ${ws.package[key]}`
    if (key in ws.dependencies) return `${key} = ${ws.dependencies[key]}`
    throw new Error(`no workspace value for ${key}`)
  })
}

function copyDir(from, to) {
  fs.mkdirSync(to, { recursive: true })
  for (const e of fs.readdirSync(from, { withFileTypes: true })) {
    const a = path.join(from, e.name)
    const b = path.join(to, e.name)
    if (e.isDirectory()) copyDir(a, b)
    else fs.copyFileSync(a, b)
  }
}

function prepack() {
  if (fs.existsSync(saved)) postpack() // an earlier pack stopped half way
  const ws = workspaceValues()
  const vendor = path.join(here, 'vendor', 'lowcopy')
  fs.rmSync(path.join(here, 'vendor'), { recursive: true, force: true })
  copyDir(path.join(repo, 'core', 'src'), path.join(vendor, 'src'))
  let core = resolve(fs.readFileSync(path.join(repo, 'core', 'Cargo.toml'), 'utf8'), ws)
  core = core.replace(/\n\[dev-dependencies\][\s\S]*?(?=\n\[|$)/, '\n')
  fs.writeFileSync(path.join(vendor, 'Cargo.toml'), core)
  const mine = fs.readFileSync(path.join(here, 'Cargo.toml'), 'utf8')
  fs.writeFileSync(saved, mine)
  let packed = resolve(mine, ws).replace('path = "../core"', 'path = "vendor/lowcopy"')
  packed += `\n# Packed by scripts/pack.js: this package is its own workspace.\n[workspace]\n\n${ws.profile}`
  fs.writeFileSync(path.join(here, 'Cargo.toml'), packed)
  fs.copyFileSync(path.join(repo, 'Cargo.lock'), path.join(here, 'Cargo.lock'))
  const pkgText = fs.readFileSync(path.join(here, 'package.json'), 'utf8')
  fs.writeFileSync(savedPkg, pkgText)
  const pkg = JSON.parse(pkgText)
  pkg.optionalDependencies = {}
  for (const d of fs.readdirSync(path.join(here, 'npm')).sort()) {
    const plat = JSON.parse(fs.readFileSync(path.join(here, 'npm', d, 'package.json'), 'utf8'))
    if (plat.version !== pkg.version) throw new Error(`npm/${d}: version ${plat.version}, not ${pkg.version}`)
    pkg.optionalDependencies[plat.name] = pkg.version
  }
  fs.writeFileSync(path.join(here, 'package.json'), JSON.stringify(pkg, null, 2) + '\n')
  for (const l of licences) fs.copyFileSync(path.join(repo, l), path.join(here, l))
}

function postpack() {
  if (fs.existsSync(saved)) {
    fs.copyFileSync(saved, path.join(here, 'Cargo.toml'))
    fs.rmSync(saved)
  }
  if (fs.existsSync(savedPkg)) {
    fs.copyFileSync(savedPkg, path.join(here, 'package.json'))
    fs.rmSync(savedPkg)
  }
  fs.rmSync(path.join(here, 'vendor'), { recursive: true, force: true })
  fs.rmSync(path.join(here, 'Cargo.lock'), { force: true })
  for (const l of licences) fs.rmSync(path.join(here, l), { force: true })
}

const cmd = process.argv[2]
if (cmd === 'prepack') prepack()
else if (cmd === 'postpack') postpack()
else { console.error('usage: pack.js prepack|postpack'); process.exit(2) }
