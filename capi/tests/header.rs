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

/// The header compiles as C and as C++ on its own (no name clashes, no missing includes).
#[test]
fn header_compiles_as_c_and_cxx() {
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include");
    let src = "#include <lowcopy.h>\nint main(void) { return 0; }\n";
    for (cc, lang, std) in [("cc", "c", "-std=c11"), ("c++", "c++", "-std=c++17")] {
        let dir = std::env::temp_dir().join(format!("lowcopy-hdr-{}-{lang}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.src");
        std::fs::write(&file, src).unwrap();
        let out = std::process::Command::new(cc)
            .args([
                "-fsyntax-only",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                std,
                "-x",
                lang,
                "-I",
            ])
            .arg(&inc)
            .arg(&file)
            .output()
            .expect("run the C compiler");
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            out.status.success(),
            "{cc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
