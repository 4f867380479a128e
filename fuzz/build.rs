//! The capi target calls the real C ABI: it links liblowcopy.so from $LOWCOPY_LIB_DIR (the
//! Makefile passes build/lib; `make lib` builds it) and finds it there at run time (rpath).
fn main() {
    let dir = std::env::var("LOWCOPY_LIB_DIR").unwrap_or_else(|_| {
        let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
        format!("{manifest}/../build/lib")
    });
    println!("cargo:rerun-if-env-changed=LOWCOPY_LIB_DIR");
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=dylib=lowcopy");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
}
