//! Symbol versions of liblowcopy.so.0 (the nodes are defined in capi/lowcopy.map).
//!
//! rustc links a cdylib with its own export list, which leaves every `#[no_mangle]` export in
//! the base (unversioned) version whatever lowcopy.map says; a symbol gets a version node only
//! from a `.symver` directive: [`default_version!`] beside the export, [`old_version!`] here.
//! The 0.1 library had no symbol versions, and programs built against it reference its
//! exports unversioned: the dynamic linker binds such a reference to the oldest version of a
//! name, `LOWCOPY_0.1` (glibc `elf/dl-lookup.c`, `check_match`: a definition of version index 1
//! or 2, the base or the first node). So every call of 0.1 is in LOWCOPY_0.1: one whose
//! signature never changed as its default version (`name@@LOWCOPY_0.1`, the list below), one
//! whose signature changed keeps its old symbol there (`name@LOWCOPY_0.1`), implemented by the
//! function below, and the new one becomes the default version (`name@@LOWCOPY_0.2`) that
//! programs built now link against; functions new in 0.2 are `@@LOWCOPY_0.2` too. No export
//! is left in the base version: capi/abi/lowcopy.symbols lists each with its node, and
//! scripts/abi_check.sh fails when the library differs from it.
//! `, remove` drops the plain name from the object, so that the static library defines each
//! name once.
//!
//! The 0.1 calls are the same calls with the sizes of the 0.1 structs, frozen here: the
//! library writes exactly the layout those programs were built with, whatever it grows.

use libc::{c_int, c_void, iovec, size_t, ssize_t, EINVAL};
use lowcopy::{Caps, Completion};

use crate::{
    lowcopy_peeker, lowcopy_peeker_stats, lowcopy_probe, lowcopy_recv_atleast_stats, lowcopy_zc,
    lowcopy_zc_reap, lowcopy_zc_send_reap, lowcopy_zc_stats, lowcopy_zcrx, lowcopy_zcrx_chunk,
    lowcopy_zcrx_recv, lowcopy_zcrx_stats,
};

/// Binds the private function `$f` to `$name@$node` (a non-default, older version).
macro_rules! old_version {
    ($f:path, $name:literal, $node:literal) => {
        std::arch::global_asm!(
            ".globl {f}",
            concat!(".symver {f}, ", $name, "@", $node),
            f = sym $f,
        );
    };
}

/// Makes the export `$name` the default version `$node` (`$name@@$node`). The assembler
/// wants the symbol defined in the same object: the crate is built as one codegen unit (the
/// workspace Cargo.toml's profiles), and each invocation sits beside its export.
macro_rules! default_version {
    ($name:literal, $node:literal) => {
        std::arch::global_asm!(concat!(
            ".symver ", $name, ", ", $name, "@@", $node, ", remove"
        ));
    };
}
pub(crate) use default_version;

// The calls of 0.1 whose signatures never changed: their one symbol is the default version of
// the first node (`name@@LOWCOPY_0.1`), so that every export carries a version (capi/abi/
// lowcopy.symbols lists them; scripts/abi_check.sh checks the library against it). A program
// of 0.1 references them unversioned, and the dynamic linker binds such a reference to a
// definition in the first version node as to one in the base version (`check_match`: version
// index 1 or 2). Here rather than beside each export: the crate is one codegen unit, so the
// directives are assembled in the object that defines the functions all the same.
default_version!("lowcopy_consume", "LOWCOPY_0.1");
default_version!("lowcopy_peek_at", "LOWCOPY_0.1");
default_version!("lowcopy_peek_supported", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_consume", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_free", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_mode", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_new", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_note_consumed", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_offset", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_peek", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_peekv", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_seek", "LOWCOPY_0.1");
default_version!("lowcopy_peeker_set_lowat_armed", "LOWCOPY_0.1");
default_version!("lowcopy_peekv_at", "LOWCOPY_0.1");
default_version!("lowcopy_recv_atleast", "LOWCOPY_0.1");
default_version!("lowcopy_set_rcvlowat", "LOWCOPY_0.1");
default_version!("lowcopy_version", "LOWCOPY_0.1");
default_version!("lowcopy_zc_backend", "LOWCOPY_0.1");
default_version!("lowcopy_zc_free", "LOWCOPY_0.1");
default_version!("lowcopy_zc_inflight", "LOWCOPY_0.1");
default_version!("lowcopy_zc_new", "LOWCOPY_0.1");
default_version!("lowcopy_zc_pollfd", "LOWCOPY_0.1");
default_version!("lowcopy_zc_send", "LOWCOPY_0.1");
default_version!("lowcopy_zc_sendmsg", "LOWCOPY_0.1");
default_version!("lowcopy_zc_sendv", "LOWCOPY_0.1");
default_version!("lowcopy_zc_wait", "LOWCOPY_0.1");
default_version!("lowcopy_zcrx_free", "LOWCOPY_0.1");
default_version!("lowcopy_zcrx_new", "LOWCOPY_0.1");
default_version!("lowcopy_zcrx_window", "LOWCOPY_0.1");

old_version!(probe_0_1, "lowcopy_probe", "LOWCOPY_0.1");
old_version!(peeker_stats_0_1, "lowcopy_peeker_stats", "LOWCOPY_0.1");
old_version!(
    recv_atleast_stats_0_1,
    "lowcopy_recv_atleast_stats",
    "LOWCOPY_0.1"
);
old_version!(zcrx_recv_0_1, "lowcopy_zcrx_recv", "LOWCOPY_0.1");
old_version!(zcrx_stats_0_1, "lowcopy_zcrx_stats", "LOWCOPY_0.1");
old_version!(zc_reap_0_1, "lowcopy_zc_reap", "LOWCOPY_0.1");
old_version!(zc_send_reap_0_1, "lowcopy_zc_send_reap", "LOWCOPY_0.1");
old_version!(zc_stats_0_1, "lowcopy_zc_stats", "LOWCOPY_0.1");

/// Sizes of the 0.1 structs (13, 6, 10 and 7 counters; user_data, result, flags; data, len,
/// mapped), for ever.
const PEEK_STATS_0_1: usize = 48;
const ZC_STATS_0_1: usize = 104;
const ZCRX_STATS_0_1: usize = 80;
const RECV_STATS_0_1: usize = 56;
const COMPLETION_0_1: usize = 24;
const CHUNK_0_1: usize = 24;

// Today's structs begin with the 0.1 layouts (fields are only appended).
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<lowcopy::PeekStats>() >= PEEK_STATS_0_1);
    assert!(size_of::<lowcopy::ZcStats>() >= ZC_STATS_0_1);
    assert!(size_of::<lowcopy::ZcrxStats>() >= ZCRX_STATS_0_1);
    assert!(size_of::<lowcopy::RecvStats>() >= RECV_STATS_0_1);
    assert!(size_of::<Completion>() >= COMPLETION_0_1);
    assert!(size_of::<lowcopy_zcrx_chunk>() >= CHUNK_0_1);
};

/// 0.1's `lowcopy_caps`: nine `uint32_t` (each capability 0 or 1, then
/// `tcp_zerocopy_receive_size`), where 0.2's is the core's `Caps` (C `bool`s).
unsafe extern "C" fn probe_0_1(out: *mut [u32; 9]) -> c_int {
    let mut c = Caps::default();
    // SAFETY: a live local of the full size.
    let r = unsafe { lowcopy_probe(&mut c, std::mem::size_of::<Caps>()) };
    if r != 0 || out.is_null() {
        return if r != 0 { r } else { -EINVAL };
    }
    let v = [
        c.peek_off_tcp4.into(),
        c.peek_off_tcp6.into(),
        c.peek_off_unix.into(),
        c.peek_off_mptcp.into(),
        c.zerocopy_tcp.into(),
        c.zerocopy_udp.into(),
        c.uring_send_zc.into(),
        c.uring_sendmsg_zc.into(),
        c.tcp_zerocopy_receive_size,
    ];
    // SAFETY: non-null and writable for the 0.1 struct per that version's contract.
    unsafe { out.write_unaligned(v) };
    0
}

unsafe extern "C" fn peeker_stats_0_1(p: *const lowcopy_peeker, out: *mut c_void) -> c_int {
    // SAFETY: the 0.1 contract: `out` NULL or writable for the 0.1 struct.
    unsafe { lowcopy_peeker_stats(p, out.cast(), PEEK_STATS_0_1) }
}

unsafe extern "C" fn zc_stats_0_1(z: *const lowcopy_zc, out: *mut c_void) -> c_int {
    // SAFETY: the 0.1 contract: `out` NULL or writable for the 0.1 struct.
    unsafe { lowcopy_zc_stats(z, out.cast(), ZC_STATS_0_1) }
}

unsafe extern "C" fn zcrx_stats_0_1(r: *const lowcopy_zcrx, out: *mut c_void) -> c_int {
    // SAFETY: the 0.1 contract: `out` NULL or writable for the 0.1 struct.
    unsafe { lowcopy_zcrx_stats(r, out.cast(), ZCRX_STATS_0_1) }
}

unsafe extern "C" fn recv_atleast_stats_0_1(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    min: size_t,
    timeout_ms: c_int,
    stats: *mut c_void,
) -> ssize_t {
    // SAFETY: the 0.1 contract: `buf` writable for `len`, `stats` the 0.1 struct (or NULL).
    unsafe {
        lowcopy_recv_atleast_stats(fd, buf, len, min, timeout_ms, stats.cast(), RECV_STATS_0_1)
    }
}

unsafe extern "C" fn zcrx_recv_0_1(
    r: *mut lowcopy_zcrx,
    out: *mut c_void,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the 0.1 contract: `out` NULL or writable for the 0.1 chunk.
    unsafe { lowcopy_zcrx_recv(r, out.cast(), CHUNK_0_1, flags) }
}

unsafe extern "C" fn zc_reap_0_1(z: *mut lowcopy_zc, out: *mut c_void, cap: size_t) -> ssize_t {
    // SAFETY: the 0.1 contract: `out` NULL or writable for `cap` 0.1 completions.
    unsafe { lowcopy_zc_reap(z, out.cast(), cap, COMPLETION_0_1) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn zc_send_reap_0_1(
    z: *mut lowcopy_zc,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
    user_data: u64,
    out: *mut c_void,
    cap: size_t,
    n_out: *mut size_t,
) -> ssize_t {
    // SAFETY: the 0.1 contract: `out` NULL or writable for `cap` 0.1 completions.
    unsafe {
        lowcopy_zc_send_reap(
            z,
            iov,
            iovcnt,
            flags,
            user_data,
            out.cast(),
            cap,
            COMPLETION_0_1,
            n_out,
        )
    }
}
