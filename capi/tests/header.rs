//! The checked-in include/lowcopy.h must be exactly what the pinned cbindgen generates now.
//! Regenerate with `make header` (or `LOWCOPY_BLESS=1 cargo test -p lowcopy-capi`).

use std::path::Path;

/// include/lowcopy.h as the pinned cbindgen writes it from the sources now.
fn generate_header() -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut generated);
    String::from_utf8(generated).unwrap()
}

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../include/lowcopy.h");
    let generated = generate_header();
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

/// include/lowcopy_syscalls.h is the data form of the "Syscalls:" line that every function's
/// documentation in include/lowcopy.h has: one X-macro list per function, and their union.
/// Regenerated with the header (`make header`); this test fails when it is stale or when a
/// function has no such line.
#[test]
fn syscalls_header_is_up_to_date() {
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include");
    // From the sources, not the file: the other test may be rewriting it meanwhile.
    let header = generate_header();
    let (table, missing) = syscall_table(&header);
    assert!(
        missing.is_empty(),
        "functions without a \"Syscalls:\" line in their documentation: {missing:?}"
    );
    assert!(table.len() > 40, "only {} functions found", table.len());
    let uses = use_lists(&table);
    let generated = syscalls_header(&table, &uses);
    let path = inc.join("lowcopy_syscalls.h");
    let lists = inc.join("syscalls");
    if std::env::var_os("LOWCOPY_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        std::fs::create_dir_all(&lists).unwrap();
        for u in &uses {
            std::fs::write(lists.join(u.file()), u.list()).unwrap();
        }
        return;
    }
    for u in &uses {
        let cur = std::fs::read_to_string(lists.join(u.file())).unwrap_or_default();
        assert!(
            cur == u.list(),
            "include/syscalls/{} is stale: run `make header` and commit it",
            u.file()
        );
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "include/lowcopy_syscalls.h is stale: run `make header` and commit it"
    );
}

/// (function, syscalls) in header order, and the functions whose comment has no such line.
fn syscall_table(header: &str) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let mut table = Vec::new();
    let mut missing = Vec::new();
    let mut comment: Vec<&str> = Vec::new();
    let mut in_comment = false;
    let mut last_comment: Vec<&str> = Vec::new();
    for line in header.lines() {
        let t = line.trim();
        if t.starts_with("/**") {
            in_comment = true;
            comment.clear();
            continue;
        }
        if in_comment {
            if t.starts_with("*/") {
                in_comment = false;
                last_comment = std::mem::take(&mut comment);
            } else {
                comment.push(t.trim_start_matches('*').trim());
            }
            continue;
        }
        // A function declaration: `type lowcopy_name(` at the start of a line.
        let Some(name) = t
            .split('(')
            .next()
            .and_then(|head| head.split_whitespace().last())
            .map(|n| n.trim_start_matches('*'))
            .filter(|n| n.starts_with("lowcopy_") && t.contains('('))
        else {
            if !t.is_empty() && !t.starts_with('#') {
                last_comment.clear();
            }
            continue;
        };
        if t.starts_with("typedef") {
            continue;
        }
        // The line may continue over several comment lines: join them.
        let text = last_comment.join(" ");
        match text.split("Syscalls:").nth(1) {
            Some(rest) => {
                let list = rest.split('.').next().unwrap_or("");
                let calls: Vec<String> = list
                    .split(',')
                    .map(|s| s.split('(').next().unwrap().trim().to_string())
                    .filter(|s| !s.is_empty() && s != "none")
                    .collect();
                assert!(
                    calls.iter().all(|c| c
                        .chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')),
                    "{name}: syscall names must be bare names: {calls:?}"
                );
                table.push((name.to_string(), calls));
            }
            None => missing.push(name.to_string()),
        }
        last_comment.clear();
    }
    (table, missing)
}

/// The C library's allocator's syscalls (malloc, free): in the lists of the functions that
/// allocate or free, never made by the calls on a peeker in caller memory.
const MEMORY: &[&str] = &[
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    "getrandom",
    "futex",
];

/// The calls on a peeker made by `lowcopy_peeker_init` (any mode), its release included.
const PEEKER_CALLS: &[&str] = &[
    "lowcopy_peeker_init",
    "lowcopy_peeker_peek",
    "lowcopy_peeker_peekv",
    "lowcopy_peeker_peek_at",
    "lowcopy_peeker_peekv_at",
    "lowcopy_peeker_seek",
    "lowcopy_peeker_consume",
    "lowcopy_peeker_note_consumed",
    "lowcopy_peeker_offset",
    "lowcopy_peeker_mode",
    "lowcopy_peeker_stats",
    "lowcopy_peeker_set_lowat_armed",
    "lowcopy_peeker_release",
];

/// `SO_PEEK_OFF` alone (no discard prefix but AUTO's, which is one `recvmsg`): peeks are
/// `recv`/`recvmsg`, moves and the low-water mark `setsockopt`, the kind's check and the
/// mark's set-up `getsockopt`, consume `recv` (TCP, `MSG_TRUNC`) or `recvmsg` (AF_UNIX, which
/// closes the descriptors it drops) and `ioctl(SIOCATMARK)` after a short one.
const OFFSET_ONLY: &[&str] = &[
    "getsockopt",
    "setsockopt",
    "recvfrom",
    "recvmsg",
    "ioctl",
    "close",
];

/// One way of using the API and the syscalls it can make.
struct Use {
    name: &'static str,
    what: &'static str,
    calls: Vec<String>,
}

impl Use {
    fn file(&self) -> String {
        format!("{}.list", self.name.to_ascii_lowercase())
    }
    fn list(&self) -> String {
        let mut s = format!(
            "# {}\n# Generated by capi/tests/header.rs (`make header`); one syscall a line.\n",
            self.what
        );
        for c in &self.calls {
            s.push_str(c);
            s.push('\n');
        }
        s
    }
}

fn union_of(table: &[(String, Vec<String>)], fns: &[&str], drop: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in fns {
        let (_, calls) = table
            .iter()
            .find(|(n, _)| n == f)
            .unwrap_or_else(|| panic!("{f}: no such function in the header"));
        for c in calls {
            if !drop.contains(&c.as_str()) && !out.contains(c) {
                out.push(c.clone());
            }
        }
    }
    out.sort_unstable();
    out
}

/// The per-use lists: each a union of its functions' lists, less what the use never makes.
/// tests/seccomp/uses.c runs each use under a filter of exactly its list.
fn use_lists(table: &[(String, Vec<String>)]) -> Vec<Use> {
    let peeker = union_of(table, PEEKER_CALLS, MEMORY);
    let mut offset: Vec<String> = OFFSET_ONLY.iter().map(|s| s.to_string()).collect();
    offset.sort_unstable();
    assert!(
        offset.iter().all(|c| peeker.contains(c)),
        "OFFSET_ONLY must be part of the peeker's list"
    );
    let stateless = [
        "lowcopy_peek_supported",
        "lowcopy_peek_at",
        "lowcopy_peekv_at",
        "lowcopy_consume",
    ];
    vec![
        Use {
            name: "USE_PEEKER_INIT",
            what: "a peeker made by lowcopy_peeker_init in caller memory, any mode, every call on \
                   it, released by lowcopy_peeker_release (0 or LOWCOPY_RELEASE_CLOSING)",
            calls: peeker.clone(),
        },
        Use {
            name: "USE_PEEKER_INIT_CLOSING",
            what: "a peeker made by lowcopy_peeker_init in caller memory, any mode, every call on \
                   it, released with LOWCOPY_RELEASE_CLOSING (which makes no syscall)",
            calls: peeker,
        },
        Use {
            name: "USE_PEEKER_INIT_OFFSET",
            what: "a peeker made by lowcopy_peeker_init whose mode is SO_PEEK_OFF \
                   (lowcopy_peeker_mode says LOWCOPY_PEEK_OFFSET: OFFSET, or AUTO with or \
                   without its shortcut, or OFFSET_OR_DISCARD, on a socket that has it), every \
                   call on it, released either way",
            calls: offset,
        },
        zc_use(
            table,
            "USE_ZC_ERRQUEUE",
            "a zerocopy sender on the error queue (lowcopy_zc_new or _new_opts with \
             LOWCOPY_ZC_ERRQUEUE, or AUTO where lowcopy_zc_backend says so), every call on it, \
             closed by lowcopy_zc_free or lowcopy_zc_close",
            &["io_uring_setup", "io_uring_register", "io_uring_enter"],
        ),
        zc_use(
            table,
            "USE_ZC_IO_URING",
            "a zerocopy sender on io_uring (LOWCOPY_ZC_IO_URING, or AUTO where \
             lowcopy_zc_backend says so), every call on it, closed by lowcopy_zc_free or \
             lowcopy_zc_close, and lowcopy_zc_ring_close",
            &["recvmmsg"],
        ),
        zc_use(
            table,
            "USE_ZC_COPY",
            "a sender on the copy path (LOWCOPY_ZC_COPY, or AUTO where lowcopy_zc_backend says \
             so), every call on it, closed by lowcopy_zc_free or lowcopy_zc_close",
            &[
                "io_uring_setup",
                "io_uring_register",
                "io_uring_enter",
                "recvmmsg",
            ],
        ),
        Use {
            name: "USE_STATELESS",
            what: "the stateless calls: lowcopy_peek_supported, lowcopy_peek_at, \
                   lowcopy_peekv_at, lowcopy_consume",
            calls: union_of(table, &stateless, &[]),
        },
    ]
}

/// The calls on a zerocopy sender, its creation and end included (`lowcopy_zc_pollfd`, which
/// makes an eventfd, is not among them: a program that asks for it adds its list).
const ZC_CALLS: &[&str] = &[
    "lowcopy_zc_new",
    "lowcopy_zc_options_default",
    "lowcopy_zc_new_opts",
    "lowcopy_zc_send",
    "lowcopy_zc_sendv",
    "lowcopy_zc_sendmsg",
    "lowcopy_zc_send_reap",
    "lowcopy_zc_send_batch",
    "lowcopy_zc_reap",
    "lowcopy_zc_wait",
    "lowcopy_zc_inflight",
    "lowcopy_zc_backend",
    "lowcopy_zc_stats",
    "lowcopy_zc_free",
    "lowcopy_zc_close",
];

/// A zerocopy sender's use on one backend: the union of [`ZC_CALLS`]' lists less what that
/// backend never makes (`drop`): the error queue enters no ring, io_uring and the copy path
/// never read the error queue (io_uring's notifications come as CQEs), the copy path has no
/// ring. `lowcopy_zc_ring_close` belongs to io_uring's use.
fn zc_use(
    table: &[(String, Vec<String>)],
    name: &'static str,
    what: &'static str,
    drop: &[&str],
) -> Use {
    let mut fns = ZC_CALLS.to_vec();
    if name == "USE_ZC_IO_URING" {
        fns.push("lowcopy_zc_ring_close");
    }
    Use {
        name,
        what,
        calls: union_of(table, &fns, drop),
    }
}

fn syscalls_header(table: &[(String, Vec<String>)], uses: &[Use]) -> String {
    let mut s = String::from(
        "/*
 * lowcopy_syscalls.h: the syscalls each lowcopy function may make, as data for a seccomp
 * allowlist. SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * Generated from the \"Syscalls:\" line of each function's documentation in lowcopy.h by
 * capi/tests/header.rs: do not edit. Regenerate with `make header`.
 *
 * LOWCOPY_SYSCALLS_<function>(X) expands to X(name) for each syscall that the function may
 * make, on every path (errors, waits, fallbacks) but a panic inside the library (a bug, which
 * may write(2) to stderr first). LOWCOPY_SYSCALLS_ALL(X) is their union. A daemon allows the
 * lists of the functions it calls, e.g.
 *
 *     #define LC_ALLOW(name) BPF_ALLOW(__NR_##name)
 *     LOWCOPY_SYSCALLS_lowcopy_peeker_init(LC_ALLOW)
 *     LOWCOPY_SYSCALLS_lowcopy_peeker_peekv_at(LC_ALLOW)
 *
 * (examples/c/peek_relay.c --sandbox does so). Names are the kernel's on x86_64 with glibc:
 * recv(2) is the recvfrom syscall. Where an architecture has no poll or epoll_wait (arm64,
 * riscv64), the C library makes ppoll and epoll_pwait instead: map those names there.
 * brk, mmap, munmap, mremap, mprotect, madvise, getrandom and futex in the list of a function
 * that allocates or frees (each *_new and *_free, lowcopy_probe) are the C library's malloc
 * and free (glibc's: a new arena, a trim, the first malloc's getrandom, a contended arena
 * lock); the calls on a peeker made by lowcopy_peeker_init never allocate.
 * clock_gettime is served by the vDSO and reaches the kernel only where the clock source has
 * no vDSO path. io_uring operations (the zerocopy sender's IO_URING backend) are not
 * syscalls: a filter sees only io_uring_enter for them.
 */
#ifndef LOWCOPY_SYSCALLS_H
#define LOWCOPY_SYSCALLS_H
",
    );
    let mut all: Vec<&str> = Vec::new();
    for (name, calls) in table {
        s.push_str(&format!("\n#define LOWCOPY_SYSCALLS_{name}(X)"));
        for c in calls {
            s.push_str(&format!(" X({c})"));
            if !all.contains(&c.as_str()) {
                all.push(c);
            }
        }
    }
    all.sort_unstable();
    s.push_str("\n\n#define LOWCOPY_SYSCALLS_ALL(X)");
    for c in all {
        s.push_str(&format!(" \\\n    X({c})"));
    }
    s.push_str(
        "\n\n/*
 * Per use: LOWCOPY_SYSCALLS_USE_<use>(X), the exact set one way of using the API can make
 * (every path but a panic), for a filter that allows that use and no more; the same lists, one
 * syscall name a line, are include/syscalls/<use>.list for a seccomp generator.
 * tests/seccomp/uses.c runs each use under a filter of exactly its list. A peeker in caller
 * memory never allocates, so none of these lists has the allocator's syscalls (brk, mmap, ...)
 * that lowcopy_peeker_release's own list names for a peeker made by lowcopy_peeker_new.
 */",
    );
    for u in uses {
        s.push_str(&format!(
            "\n/* {} */\n#define LOWCOPY_SYSCALLS_{}(X)",
            u.what, u.name
        ));
        for c in &u.calls {
            s.push_str(&format!(" X({c})"));
        }
    }
    s.push_str("\n\n#endif /* LOWCOPY_SYSCALLS_H */\n");
    s
}
