// Loads the native addon. napi's generated loader (index.js) takes the prebuilt binary: the
// platform package (lowcopy-linux-x64-gnu, an optional dependency that npm installs where os,
// cpu and libc match), or lowcopy.linux-x64-gnu.node beside package.json (a local build:
// `napi build` in the repository, or an earlier source build). Only when none loads does this
// build one from the package's own sources with cargo (scripts/install.js; the Rust toolchain
// is then needed), saying so, and load that. LOWCOPY_NO_BUILD=1 refuses the build and
// throws the loader's error instead. No install script runs at `npm install`.
'use strict'
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')

try {
  module.exports = require('../index.js')
} catch (err) {
  const sources = fs.existsSync(path.join(root, 'src', 'lib.rs'))
  if (!sources || process.platform !== 'linux' || process.env.LOWCOPY_NO_BUILD === '1') throw err
  const what = `${process.platform}-${process.arch}`
  console.error(`lowcopy: no prebuilt binary loads on ${what} (${err.message.split('\n')[0]}); ` +
    'building it from source with cargo, once (set LOWCOPY_NO_BUILD=1 to fail instead)')
  const r = spawnSync(process.execPath, [path.join(__dirname, 'install.js')],
    { stdio: ['ignore', 'inherit', 'inherit'] })
  if (r.status !== 0) {
    err.message += `\nlowcopy: the source build failed (exit ${r.status}); see above`
    throw err
  }
  module.exports = require('../index.js')
}
