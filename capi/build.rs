//! Gives liblowcopy.so its SONAME and symbol versions, and exports only `lowcopy_*`.
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let map = dir.join("lowcopy.map");
    println!("cargo:rerun-if-changed={}", map.display());
    // The full library: capi/src/glue.rs and capi/src/peek.rs are also built into
    // liblowcopy_peek.a (capi/peek), without this cfg: no heap, no std, no unwinding.
    println!("cargo:rustc-check-cfg=cfg(lowcopy_full)");
    println!("cargo:rustc-cfg=lowcopy_full");
    // SONAME follows the ABI major version: bump it only when the C ABI breaks.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblowcopy.so.0");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
