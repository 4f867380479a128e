//! The checked-in include/lowcopy.h must be exactly what the pinned cbindgen generates now.
//! Regenerate with `make header` (or `LOWCOPY_BLESS=1 cargo test -p lowcopy-capi`).

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../include/lowcopy.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    if std::env::var_os("LOWCOPY_BLESS").is_some() {
        std::fs::write(&header, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        current == generated,
        "include/lowcopy.h is stale: run `make header` and commit it"
    );
}
