//! Replays saved fuzz inputs through the same checks as the libFuzzer targets, on stable
//! Rust: `replay tracker=DIR zcrx=DIR capi=DIR` (make fuzz-replay). Exit status 1 if any input
//! fails (a panic names it); prints the inputs run per target.
use std::panic::AssertUnwindSafe;

fn main() {
    let mut failed = 0;
    for arg in std::env::args().skip(1) {
        let (target, dir) = arg.split_once('=').expect("TARGET=DIR");
        let f: fn(&[u8]) = match target {
            "tracker" => lowcopy_fuzz::tracker,
            "zcrx" => lowcopy_fuzz::zcrx,
            "capi" => lowcopy_fuzz::capi,
            t => panic!("unknown target {t}"),
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        let mut bad = 0;
        for p in &files {
            let data = std::fs::read(p).unwrap();
            if std::panic::catch_unwind(AssertUnwindSafe(|| f(&data))).is_err() {
                eprintln!("FAIL {target}: {}", p.display());
                bad += 1;
            }
        }
        println!(
            "fuzz replay {target}: {} inputs, {} failed",
            files.len(),
            bad
        );
        if files.is_empty() {
            eprintln!("FAIL {target}: no saved inputs in {dir}");
            bad += 1;
        }
        failed += bad;
    }
    std::process::exit(if failed > 0 { 1 } else { 0 });
}
