//! The napi-rs build setup, and the Node mirror of core's `Caps` (`node/src/probe.rs` includes
//! it): made from the core struct's definition, so its fields and their docs are written once,
//! in core.

use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    napi_build::setup();
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    // The repository's core crate, or the copy a packed npm package carries (scripts/pack.js).
    let src = ["../core/src/probe.rs", "vendor/lowcopy/src/probe.rs"]
        .iter()
        .map(|p| dir.join(p))
        .find(|p| p.exists())
        .expect("the core crate's src/probe.rs");
    println!("cargo:rerun-if-changed={}", src.display());
    let text = fs::read_to_string(&src).expect("core's src/probe.rs is readable");
    let body = text
        .split_once("pub struct Caps {")
        .and_then(|(_, rest)| rest.split_once("\n}"))
        .expect("core's src/probe.rs defines `pub struct Caps { ... }`")
        .0;
    let (mut fields, mut names) = (String::new(), Vec::new());
    for line in body.lines().map(str::trim) {
        if line.starts_with("///") {
            fields += &format!("    {line}\n");
        } else if let Some(f) = line.strip_prefix("pub ") {
            fields += &format!("    pub {f}\n");
            names.push(f.split(':').next().expect("a field").trim().to_string());
        }
    }
    let from: Vec<String> = names.iter().map(|n| format!("{n}: c.{n}")).collect();
    let out = format!(
        "/// Capabilities of the running kernel, found by trying on throwaway sockets (see the \
         core's\n/// `lowcopy::Caps`).\n#[napi(object)]\npub struct Caps {{\n{fields}}}\n\n\
         impl From<&lowcopy::Caps> for Caps {{\n    fn from(c: &lowcopy::Caps) -> Self {{\n        \
         Caps {{ {} }}\n    }}\n}}\n",
        from.join(", ")
    );
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    fs::write(out_dir.join("caps.rs"), out).expect("OUT_DIR is writable");
}
