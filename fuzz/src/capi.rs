//! The C ABI through liblowcopy.so (linked by build.rs): calls with arguments the input
//! chooses. The contract (docs/abi.md, include/lowcopy.h): NULL where a pointer is required is -EINVAL, never a
//! crash; a bad fd, socket type, enum, flag or size is a negative errno; out-parameters are
//! written only on success. Pointers passed are NULL or valid for the size passed (a pointer
//! shorter than its size is the caller's bug, not a library input to survive), except data
//! lengths, which may be anything: the kernel writes only what is queued.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use libc::{c_int, iovec, msghdr, size_t, ssize_t};

use crate::Input;

type H = *mut c_void;

extern "C" {
    fn lowcopy_probe(out: *mut c_void, size: size_t) -> c_int;
    fn lowcopy_peek_supported(fd: c_int) -> c_int;
    fn lowcopy_peek_at(
        fd: c_int,
        off: size_t,
        buf: *mut c_void,
        len: size_t,
        flags: c_int,
    ) -> ssize_t;
    fn lowcopy_peekv_at(
        fd: c_int,
        off: size_t,
        iov: *const iovec,
        n: c_int,
        flags: c_int,
    ) -> ssize_t;
    fn lowcopy_consume(fd: c_int, n: size_t, flags: c_int) -> ssize_t;
    fn lowcopy_peeker_new(fd: c_int, mode: u32, out: *mut H) -> c_int;
    fn lowcopy_peeker_peek(p: H, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
    fn lowcopy_peeker_peekv(p: H, iov: *const iovec, n: c_int, flags: c_int) -> ssize_t;
    fn lowcopy_peeker_seek(p: H, off: size_t) -> c_int;
    fn lowcopy_peeker_consume(p: H, n: size_t) -> ssize_t;
    fn lowcopy_peeker_note_consumed(p: H, n: size_t) -> c_int;
    fn lowcopy_peeker_offset(p: H) -> size_t;
    fn lowcopy_peeker_mode(p: H) -> u32;
    fn lowcopy_peeker_set_lowat_armed(p: H, on: c_int) -> c_int;
    fn lowcopy_peeker_stats(p: H, out: *mut c_void, size: size_t) -> c_int;
    fn lowcopy_peeker_free(p: H);
    fn lowcopy_set_rcvlowat(fd: c_int, bytes: size_t, eff: *mut size_t) -> c_int;
    fn lowcopy_recv_atleast(
        fd: c_int,
        buf: *mut c_void,
        len: size_t,
        min: size_t,
        ms: c_int,
    ) -> ssize_t;
    fn lowcopy_recv_atleast_stats(
        fd: c_int,
        buf: *mut c_void,
        len: size_t,
        min: size_t,
        ms: c_int,
        st: *mut c_void,
        size: size_t,
    ) -> ssize_t;
    fn lowcopy_receiver_new(fd: c_int, out: *mut H) -> c_int;
    fn lowcopy_receiver_recv(
        r: H,
        buf: *mut c_void,
        len: size_t,
        min: size_t,
        ms: c_int,
    ) -> ssize_t;
    fn lowcopy_receiver_stats(r: H, out: *mut c_void, size: size_t) -> c_int;
    fn lowcopy_receiver_free(r: H);
    fn lowcopy_zcrx_new(fd: c_int, window: size_t, out: *mut H) -> c_int;
    fn lowcopy_zcrx_recv(r: H, out: *mut c_void, size: size_t, flags: c_int) -> ssize_t;
    fn lowcopy_zcrx_set_timeout(r: H, ms: c_int) -> c_int;
    fn lowcopy_zcrx_set_peek_off_tracking(r: H, on: c_int) -> c_int;
    fn lowcopy_zcrx_window(r: H) -> size_t;
    fn lowcopy_zcrx_stats(r: H, out: *mut c_void, size: size_t) -> c_int;
    fn lowcopy_zcrx_free(r: H);
    fn lowcopy_zc_new(fd: c_int, backend: u32, flags: u32, out: *mut H) -> c_int;
    fn lowcopy_zc_send(z: H, buf: *const c_void, len: size_t, flags: c_int, ud: u64) -> ssize_t;
    fn lowcopy_zc_sendv(z: H, iov: *const iovec, n: c_int, flags: c_int, ud: u64) -> ssize_t;
    fn lowcopy_zc_sendmsg(z: H, msg: *const msghdr, flags: c_int, ud: u64) -> ssize_t;
    fn lowcopy_zc_send_reap(
        z: H,
        iov: *const iovec,
        n: c_int,
        flags: c_int,
        ud: u64,
        out: *mut c_void,
        cap: size_t,
        size: size_t,
        n_out: *mut size_t,
    ) -> ssize_t;
    fn lowcopy_zc_reap(z: H, out: *mut c_void, cap: size_t, size: size_t) -> ssize_t;
    fn lowcopy_zc_wait(z: H, ms: c_int) -> c_int;
    fn lowcopy_zc_inflight(z: H) -> size_t;
    fn lowcopy_zc_pollfd(z: H) -> c_int;
    fn lowcopy_zc_backend(z: H) -> u32;
    fn lowcopy_zc_stats(z: H, out: *mut c_void, size: size_t) -> c_int;
    fn lowcopy_zc_free(z: H) -> c_int;
}

/// The memory pointers point into: allocated once, never freed (zerocopy sends may still
/// read it after their sender is gone), 1 MiB.
const MEM: usize = 1 << 20;
fn mem() -> *mut u8 {
    static M: OnceLock<usize> = OnceLock::new();
    *M.get_or_init(|| Box::leak(vec![0u8; MEM].into_boxed_slice()).as_mut_ptr() as usize) as *mut u8
}

/// A failure is a negative errno (the kernel's range), success >= 0.
fn check(what: &str, r: i64) {
    assert!(r >= -4095, "{what} returned {r}: not 0.. nor -errno");
}

fn sock(domain: c_int, ty: c_int, proto: c_int) -> Option<OwnedFd> {
    // SAFETY: plain socket(); owned at once.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, proto) };
    // SAFETY: a fresh fd nobody else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Connected loopback stream pair of `proto` (TCP or MPTCP), both non-blocking.
fn stream_pair(proto: c_int) -> Option<(OwnedFd, OwnedFd)> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    let addr = l.local_addr().ok()?;
    if proto == libc::IPPROTO_TCP {
        let c = std::net::TcpStream::connect(addr).ok()?;
        let (s, _) = l.accept().ok()?;
        c.set_nonblocking(true).ok()?;
        s.set_nonblocking(true).ok()?;
        return Some((s.into(), c.into()));
    }
    None
}

/// Fds of every kind the ABI may be handed. Index 0 is -1, 1 a number no fd has.
struct Fds {
    owned: Vec<OwnedFd>,
    raw: Vec<c_int>,
}

impl Fds {
    fn new() -> Fds {
        let mut f = Fds {
            owned: Vec::new(),
            raw: vec![-1, 900_000],
        };
        let add = |f: &mut Fds, o: Option<OwnedFd>| {
            if let Some(o) = o {
                f.raw.push(o.as_raw_fd());
                f.owned.push(o);
            }
        };
        add(
            &mut f,
            std::fs::File::open("/dev/null").ok().map(OwnedFd::from),
        );
        let mut p = [0; 2];
        // SAFETY: a live array of two ints.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0 {
            // SAFETY: fresh fds.
            unsafe {
                add(&mut f, Some(OwnedFd::from_raw_fd(p[0])));
                add(&mut f, Some(OwnedFd::from_raw_fd(p[1])));
            }
        }
        // SAFETY: plain epoll_create1; owned at once.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        // SAFETY: a fresh fd.
        add(
            &mut f,
            (ep >= 0).then(|| unsafe { OwnedFd::from_raw_fd(ep) }),
        );
        add(&mut f, sock(libc::AF_INET, libc::SOCK_DGRAM, 0));
        add(&mut f, sock(libc::AF_INET, libc::SOCK_STREAM, 0)); // never connected
        add(&mut f, sock(libc::AF_INET6, libc::SOCK_STREAM, 0));
        add(&mut f, sock(libc::AF_UNIX, libc::SOCK_DGRAM, 0));
        add(
            &mut f,
            sock(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
        );
        if let Ok(l) = std::net::TcpListener::bind("127.0.0.1:0") {
            add(&mut f, Some(l.into()));
        }
        for _ in 0..2 {
            if let Some((s, c)) = stream_pair(libc::IPPROTO_TCP) {
                // SAFETY: a live buffer; queued bytes for the peeks and receives to find.
                unsafe { libc::send(c.as_raw_fd(), mem().cast(), 3000, libc::MSG_DONTWAIT) };
                add(&mut f, Some(s));
                add(&mut f, Some(c));
            }
        }
        if let Ok((a, b)) = std::os::unix::net::UnixStream::pair() {
            let _ = a.set_nonblocking(true);
            let _ = b.set_nonblocking(true);
            // SAFETY: a live buffer.
            unsafe { libc::send(b.as_raw_fd(), mem().cast(), 3000, libc::MSG_DONTWAIT) };
            add(&mut f, Some(a.into()));
            add(&mut f, Some(b.into()));
        }
        f
    }

    fn pick(&self, inp: &mut Input) -> c_int {
        self.raw[inp.below(self.raw.len())]
    }
}

/// NULL, or a pointer into `mem()` with room for `need` bytes.
fn ptr(inp: &mut Input, need: usize) -> *mut c_void {
    if inp.u8() % 5 == 0 || need > MEM {
        std::ptr::null_mut()
    } else {
        let at = inp.below(MEM - need + 1) & !7;
        // SAFETY: `at + need <= MEM`.
        unsafe { mem().add(at).cast() }
    }
}

/// A size: small, around struct sizes, or anything (`any`: data lengths the kernel bounds).
fn size(inp: &mut Input, any: bool) -> usize {
    match inp.u8() % 6 {
        0 => 0,
        1 => inp.below(80),
        2 => inp.below(70_000),
        3 if any => [
            usize::MAX,
            isize::MAX as usize,
            isize::MAX as usize + 1,
            u32::MAX as usize,
        ][inp.below(4)],
        _ => inp.below(4096),
    }
}

fn flags(inp: &mut Input) -> c_int {
    match inp.u8() % 4 {
        0 => 0,
        1 => libc::MSG_DONTWAIT,
        2 => libc::MSG_DONTWAIT | libc::MSG_MORE,
        _ => inp.u32() as c_int,
    }
}

/// Iovecs in `mem()`: NULL, or `n` entries each NULL or valid for its (small) length.
fn iovecs(inp: &mut Input) -> (*const iovec, c_int) {
    let n = match inp.u8() % 5 {
        0 => inp.u32() as c_int, // any count, negative or above IOV_MAX included
        _ => inp.below(8) as c_int,
    };
    let k = (n.clamp(0, 1100)) as usize;
    let room = k * std::mem::size_of::<iovec>();
    if inp.u8() % 6 == 0 || room > MEM / 2 {
        return (std::ptr::null(), n);
    }
    // The iovec array at the start of mem(), buffers in its second half.
    let arr = mem().cast::<iovec>();
    for i in 0..k {
        let len = inp.below(5000);
        let base = if inp.u8() % 7 == 0 {
            std::ptr::null_mut()
        } else {
            // SAFETY: within mem()'s second half.
            unsafe { mem().add(MEM / 2 + inp.below(MEM / 2 - 5000)).cast() }
        };
        // SAFETY: `i < k` iovecs fit in the first half.
        unsafe {
            arr.add(i).write(iovec {
                iov_base: base,
                iov_len: len,
            })
        };
    }
    (arr, n)
}

/// Handles alive, by kind; freed at the end.
#[derive(Default)]
struct Handles {
    peekers: Vec<H>,
    zcs: Vec<H>,
    zcrxs: Vec<H>,
    receivers: Vec<H>,
}

fn pick(inp: &mut Input, v: &[H]) -> H {
    if v.is_empty() || inp.u8() % 8 == 0 {
        std::ptr::null_mut()
    } else {
        v[inp.below(v.len())]
    }
}

/// A timeout that never blocks the fuzzer for long: 0 to 3 ms (-1 would wait forever on a
/// socket whose peer never writes; waiting is tested by the tables).
fn ms(inp: &mut Input) -> c_int {
    inp.below(4) as c_int
}

/// See the crate docs.
pub fn capi(data: &[u8]) {
    let mut inp = Input::new(data);
    let fds = Fds::new();
    let mut h = Handles::default();
    let sentinel = 0x5a5a_5a5a_5a5a_5a5a_usize as H;
    let mut steps = 0;
    while !inp.done() && steps < 64 {
        steps += 1;
        let op = inp.u8() % 40;
        // SAFETY: every pointer passed is NULL or valid for the size passed (see the module
        // docs); handles are ones lowcopy gave and has not freed, or NULL.
        unsafe {
            match op {
                0 => check(
                    "probe",
                    lowcopy_probe(ptr(&mut inp, 256), size(&mut inp, false).min(256)) as i64,
                ),
                1 => check(
                    "peek_supported",
                    lowcopy_peek_supported(fds.pick(&mut inp)) as i64,
                ),
                2 => {
                    let (fd, off, len) = (
                        fds.pick(&mut inp),
                        size(&mut inp, true),
                        size(&mut inp, true),
                    );
                    let b = ptr(&mut inp, len.min(8192));
                    // Only lengths the buffer holds, or anything with NULL.
                    let len = if b.is_null() { len } else { len.min(8192) };
                    check(
                        "peek_at",
                        lowcopy_peek_at(fd, off, b, len, flags(&mut inp)) as i64,
                    );
                }
                3 => {
                    let fd = fds.pick(&mut inp);
                    let off = size(&mut inp, true);
                    let (iov, n) = iovecs(&mut inp);
                    let n = if iov.is_null() { n } else { n.min(1100) };
                    check(
                        "peekv_at",
                        lowcopy_peekv_at(fd, off, iov, n, flags(&mut inp)) as i64,
                    );
                }
                4 => check(
                    "consume",
                    lowcopy_consume(fds.pick(&mut inp), size(&mut inp, true), flags(&mut inp))
                        as i64,
                ),
                5 | 6 => {
                    let (fd, mode) = (fds.pick(&mut inp), inp.u8() as u32 % 5);
                    let mut out = sentinel;
                    let outp = if inp.u8() % 6 == 0 {
                        std::ptr::null_mut()
                    } else {
                        &mut out as *mut H
                    };
                    let r = lowcopy_peeker_new(fd, mode, outp);
                    check("peeker_new", r as i64);
                    if r == 0 {
                        assert!(!out.is_null() && out != sentinel);
                        h.peekers.push(out);
                    } else if !outp.is_null() {
                        assert_eq!(out, sentinel, "peeker_new wrote *out on failure");
                    }
                }
                7 => {
                    let p = pick(&mut inp, &h.peekers);
                    let len = size(&mut inp, true);
                    let b = ptr(&mut inp, len.min(8192));
                    let len = if b.is_null() { len } else { len.min(8192) };
                    check(
                        "peeker_peek",
                        lowcopy_peeker_peek(p, b, len, flags(&mut inp)) as i64,
                    );
                }
                8 => {
                    let p = pick(&mut inp, &h.peekers);
                    let (iov, n) = iovecs(&mut inp);
                    let n = if iov.is_null() { n } else { n.min(1100) };
                    check(
                        "peeker_peekv",
                        lowcopy_peeker_peekv(p, iov, n, flags(&mut inp)) as i64,
                    );
                }
                9 => check(
                    "peeker_seek",
                    lowcopy_peeker_seek(pick(&mut inp, &h.peekers), size(&mut inp, true)) as i64,
                ),
                10 => check(
                    "peeker_consume",
                    lowcopy_peeker_consume(pick(&mut inp, &h.peekers), size(&mut inp, true)) as i64,
                ),
                11 => check(
                    "peeker_note_consumed",
                    lowcopy_peeker_note_consumed(pick(&mut inp, &h.peekers), size(&mut inp, true))
                        as i64,
                ),
                12 => {
                    let p = pick(&mut inp, &h.peekers);
                    let _ = (lowcopy_peeker_offset(p), lowcopy_peeker_mode(p));
                    check(
                        "peeker_set_lowat_armed",
                        lowcopy_peeker_set_lowat_armed(p, inp.u32() as c_int) as i64,
                    );
                }
                13 => {
                    let sz = size(&mut inp, false).min(4096);
                    check(
                        "peeker_stats",
                        lowcopy_peeker_stats(pick(&mut inp, &h.peekers), ptr(&mut inp, sz), sz)
                            as i64,
                    );
                }
                14 => {
                    if !h.peekers.is_empty() {
                        let p = h.peekers.swap_remove(inp.below(h.peekers.len()));
                        lowcopy_peeker_free(p);
                    } else {
                        lowcopy_peeker_free(std::ptr::null_mut());
                    }
                }
                15 => {
                    let mut eff = 77usize;
                    let e = if inp.bool() {
                        &mut eff as *mut usize
                    } else {
                        std::ptr::null_mut()
                    };
                    let r = lowcopy_set_rcvlowat(fds.pick(&mut inp), size(&mut inp, true), e);
                    check("set_rcvlowat", r as i64);
                    if r < 0 && !e.is_null() {
                        assert_eq!(eff, 77, "set_rcvlowat wrote *effective on failure");
                    }
                }
                16 | 17 => {
                    let fd = fds.pick(&mut inp);
                    let len = size(&mut inp, true);
                    let b = ptr(&mut inp, len.min(8192));
                    let len = if b.is_null() { len } else { len.min(8192) };
                    let min = size(&mut inp, true);
                    if op == 16 {
                        check(
                            "recv_atleast",
                            lowcopy_recv_atleast(fd, b, len, min, ms(&mut inp)) as i64,
                        );
                    } else {
                        let sz = size(&mut inp, false).min(4096);
                        let st = ptr(&mut inp, sz);
                        check(
                            "recv_atleast_stats",
                            lowcopy_recv_atleast_stats(fd, b, len, min, ms(&mut inp), st, sz)
                                as i64,
                        );
                    }
                }
                18 => {
                    let mut out = sentinel;
                    let outp = if inp.u8() % 6 == 0 {
                        std::ptr::null_mut()
                    } else {
                        &mut out as *mut H
                    };
                    let r = lowcopy_receiver_new(fds.pick(&mut inp), outp);
                    check("receiver_new", r as i64);
                    if r == 0 {
                        h.receivers.push(out);
                    } else if !outp.is_null() {
                        assert_eq!(out, sentinel, "receiver_new wrote *out on failure");
                    }
                }
                19 => {
                    let r = pick(&mut inp, &h.receivers);
                    let len = size(&mut inp, true);
                    let b = ptr(&mut inp, len.min(8192));
                    let len = if b.is_null() { len } else { len.min(8192) };
                    check(
                        "receiver_recv",
                        lowcopy_receiver_recv(r, b, len, size(&mut inp, true), ms(&mut inp)) as i64,
                    );
                    let sz = size(&mut inp, false).min(4096);
                    check(
                        "receiver_stats",
                        lowcopy_receiver_stats(r, ptr(&mut inp, sz), sz) as i64,
                    );
                }
                20 => {
                    if !h.receivers.is_empty() {
                        lowcopy_receiver_free(
                            h.receivers.swap_remove(inp.below(h.receivers.len())),
                        );
                    }
                }
                21 => {
                    let mut out = sentinel;
                    let outp = if inp.u8() % 6 == 0 {
                        std::ptr::null_mut()
                    } else {
                        &mut out as *mut H
                    };
                    let window = match inp.u8() % 3 {
                        0 => size(&mut inp, true),
                        _ => 4096 * inp.below(64),
                    };
                    let r = lowcopy_zcrx_new(fds.pick(&mut inp), window, outp);
                    check("zcrx_new", r as i64);
                    if r == 0 {
                        h.zcrxs.push(out);
                        // Its own timeout: blocking receives give up within 3 ms.
                        assert_eq!(lowcopy_zcrx_set_timeout(out, ms(&mut inp)), 0);
                    } else if !outp.is_null() {
                        assert_eq!(out, sentinel, "zcrx_new wrote *out on failure");
                    }
                }
                22 => {
                    let r = pick(&mut inp, &h.zcrxs);
                    let sz = size(&mut inp, false).min(4096);
                    check(
                        "zcrx_recv",
                        lowcopy_zcrx_recv(r, ptr(&mut inp, sz), sz, flags(&mut inp)) as i64,
                    );
                }
                23 => {
                    let r = pick(&mut inp, &h.zcrxs);
                    // Any timeout on NULL; on a live receiver a short one (-1, no limit,
                    // would block on a quiet peer; below -1 is -EINVAL and changes nothing).
                    let t = if r.is_null() || inp.bool() {
                        inp.u32() as c_int
                    } else {
                        ms(&mut inp)
                    };
                    let t = if !r.is_null() && t == -1 { 0 } else { t };
                    check("zcrx_set_timeout", lowcopy_zcrx_set_timeout(r, t) as i64);
                    check(
                        "zcrx_set_peek_off_tracking",
                        lowcopy_zcrx_set_peek_off_tracking(r, inp.u32() as c_int) as i64,
                    );
                    let _ = lowcopy_zcrx_window(r);
                    let sz = size(&mut inp, false).min(4096);
                    check(
                        "zcrx_stats",
                        lowcopy_zcrx_stats(r, ptr(&mut inp, sz), sz) as i64,
                    );
                }
                24 => {
                    if !h.zcrxs.is_empty() {
                        lowcopy_zcrx_free(h.zcrxs.swap_remove(inp.below(h.zcrxs.len())));
                    }
                }
                25 | 26 => {
                    let mut out = sentinel;
                    let outp = if inp.u8() % 6 == 0 {
                        std::ptr::null_mut()
                    } else {
                        &mut out as *mut H
                    };
                    let backend = inp.u8() as u32 % 6;
                    let fl = if inp.bool() { inp.u32() } else { inp.u32() & 1 };
                    let r = lowcopy_zc_new(fds.pick(&mut inp), backend, fl, outp);
                    check("zc_new", r as i64);
                    if r == 0 {
                        h.zcs.push(out);
                    } else if !outp.is_null() {
                        assert_eq!(out, sentinel, "zc_new wrote *out on failure");
                    }
                }
                27 => {
                    let z = pick(&mut inp, &h.zcs);
                    let len = size(&mut inp, true);
                    let b = ptr(&mut inp, len.min(65536));
                    let len = if b.is_null() { len } else { len.min(65536) };
                    let f = flags(&mut inp) | libc::MSG_DONTWAIT;
                    check("zc_send", lowcopy_zc_send(z, b, len, f, inp.u64()) as i64);
                }
                28 => {
                    let z = pick(&mut inp, &h.zcs);
                    let (iov, n) = iovecs(&mut inp);
                    let n = if iov.is_null() { n } else { n.min(1100) };
                    let f = flags(&mut inp) | libc::MSG_DONTWAIT;
                    check("zc_sendv", lowcopy_zc_sendv(z, iov, n, f, inp.u64()) as i64);
                }
                29 => {
                    let z = pick(&mut inp, &h.zcs);
                    let (iov, n) = iovecs(&mut inp);
                    // SAFETY: all-zero is a valid msghdr.
                    let mut m: msghdr = std::mem::zeroed();
                    m.msg_iov = iov as *mut iovec;
                    m.msg_iovlen = if iov.is_null() {
                        n as usize
                    } else {
                        n.clamp(0, 1100) as usize
                    };
                    let nl = inp.below(200);
                    m.msg_name = ptr(&mut inp, nl);
                    m.msg_namelen = if inp.bool() || m.msg_name.is_null() {
                        nl as u32
                    } else {
                        0
                    };
                    let cl = inp.below(200);
                    m.msg_control = ptr(&mut inp, cl);
                    m.msg_controllen = if m.msg_control.is_null() && inp.bool() {
                        0
                    } else {
                        cl
                    };
                    let mp = if inp.u8() % 6 == 0 {
                        std::ptr::null()
                    } else {
                        &m as *const msghdr
                    };
                    let f = flags(&mut inp) | libc::MSG_DONTWAIT;
                    check("zc_sendmsg", lowcopy_zc_sendmsg(z, mp, f, inp.u64()) as i64);
                }
                30 => {
                    let z = pick(&mut inp, &h.zcs);
                    let (iov, n) = iovecs(&mut inp);
                    let n = if iov.is_null() { n } else { n.min(1100) };
                    let f = flags(&mut inp) | libc::MSG_DONTWAIT;
                    let (cap, sz) = (inp.below(64), inp.below(64));
                    // The completions after the iovec array and before the buffers.
                    let out = if inp.u8() % 5 == 0 {
                        std::ptr::null_mut()
                    } else {
                        mem().add(MEM / 4).cast()
                    };
                    let mut n_out = 77usize;
                    let no = if inp.u8() % 6 == 0 {
                        std::ptr::null_mut()
                    } else {
                        &mut n_out as *mut usize
                    };
                    check(
                        "zc_send_reap",
                        lowcopy_zc_send_reap(z, iov, n, f, inp.u64(), out, cap, sz, no) as i64,
                    );
                }
                31 => {
                    let z = pick(&mut inp, &h.zcs);
                    let (cap, sz) = (inp.below(64), inp.below(64));
                    let out = if inp.u8() % 5 == 0 {
                        std::ptr::null_mut()
                    } else {
                        mem().add(MEM / 4).cast()
                    };
                    check("zc_reap", lowcopy_zc_reap(z, out, cap, sz) as i64);
                }
                32 => {
                    let z = pick(&mut inp, &h.zcs);
                    let t = ms(&mut inp) - if inp.u8() % 4 == 0 { 5 } else { 0 };
                    check("zc_wait", lowcopy_zc_wait(z, t) as i64);
                    let _ = (lowcopy_zc_inflight(z), lowcopy_zc_backend(z));
                    check("zc_pollfd", lowcopy_zc_pollfd(z) as i64);
                    let sz = size(&mut inp, false).min(4096);
                    check(
                        "zc_stats",
                        lowcopy_zc_stats(z, ptr(&mut inp, sz), sz) as i64,
                    );
                }
                33 => {
                    if !h.zcs.is_empty() {
                        check(
                            "zc_free",
                            lowcopy_zc_free(h.zcs.swap_remove(inp.below(h.zcs.len()))) as i64,
                        );
                    } else {
                        check("zc_free", lowcopy_zc_free(std::ptr::null_mut()) as i64);
                    }
                }
                _ => {
                    // The peer side makes news: more bytes, a FIN or a reset on a pair.
                    let fd = fds.pick(&mut inp);
                    match inp.u8() % 3 {
                        0 => {
                            libc::send(
                                fd,
                                mem().cast(),
                                inp.below(5000),
                                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                            );
                        }
                        1 => {
                            libc::shutdown(fd, libc::SHUT_WR);
                        }
                        _ => {
                            let n = inp.below(3000);
                            libc::recv(fd, mem().add(MEM / 2).cast(), n, libc::MSG_DONTWAIT);
                        }
                    }
                }
            }
        }
    }
    // Handles first (they restore options on their fds), then the fds.
    // SAFETY: each handle once, all from lowcopy.
    unsafe {
        for p in h.peekers {
            lowcopy_peeker_free(p);
        }
        for r in h.receivers {
            lowcopy_receiver_free(r);
        }
        for r in h.zcrxs {
            lowcopy_zcrx_free(r);
        }
        for z in h.zcs {
            check("zc_free", lowcopy_zc_free(z) as i64);
        }
    }
    drop(fds);
}
