//! capi/src/glue.rs and capi/src/peek.rs are shared with the full library, which sets
//! `lowcopy_full` (capi/build.rs); this crate does not.
fn main() {
    println!("cargo:rustc-check-cfg=cfg(lowcopy_full)");
}
