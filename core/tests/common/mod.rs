//! Socket fixtures shared by the integration tests.
#![allow(dead_code)]

use std::fs::File;
use std::io::{self, Write};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A connected stream pair: `sock` is peeked, `peer` writes.
pub struct Pair {
    pub sock: OwnedFd,
    pub peer: OwnedFd,
}

pub fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn tcp_pair(v6: bool) -> Pair {
    let l = if v6 {
        TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).unwrap()
    } else {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()
    };
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    c.set_nodelay(true).unwrap();
    Pair {
        sock: s.into(),
        peer: c.into(),
    }
}

/// MPTCP over IPv4 loopback, with raw socket calls (std has no MPTCP).
fn mptcp_pair() -> Pair {
    let mk = || {
        // SAFETY: plain socket() call; the fd is owned right away.
        let fd =
            check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP) })
                .expect("MPTCP socket");
        // SAFETY: fresh fd owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    let l = mk();
    let mut sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as _,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let p = (&mut sa as *mut libc::sockaddr_in).cast::<libc::sockaddr>();
    // SAFETY: `p` points at a live sockaddr_in of `len` bytes.
    unsafe {
        check(libc::bind(l.as_raw_fd(), p, len)).unwrap();
        check(libc::listen(l.as_raw_fd(), 4)).unwrap();
        check(libc::getsockname(l.as_raw_fd(), p, &mut len)).unwrap();
    }
    let c = mk();
    // SAFETY: as above.
    check(unsafe { libc::connect(c.as_raw_fd(), p, len) }).unwrap();
    // SAFETY: accept with NULL address is allowed; the fd is owned right away.
    let s =
        check(unsafe { libc::accept(l.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) })
            .unwrap();
    Pair {
        // SAFETY: fresh fd from accept.
        sock: unsafe { OwnedFd::from_raw_fd(s) },
        peer: c,
    }
}

pub fn pair(transport: &str) -> Pair {
    match transport {
        "tcp4" => tcp_pair(false),
        "tcp6" => tcp_pair(true),
        "mptcp4" => mptcp_pair(),
        "unix" => {
            let (a, b) = UnixStream::pair().unwrap();
            Pair {
                sock: a.into(),
                peer: b.into(),
            }
        }
        t => panic!("unknown transport {t}"),
    }
}

/// An fd that is not a peekable stream: `closed` (a number no fd has), `file`, `udp4`.
pub fn odd_fd(kind: &str) -> (Option<OwnedFd>, libc::c_int) {
    match kind {
        "closed" => (None, 1_000_000),
        "file" => {
            let f: OwnedFd = File::open("/proc/self/stat").unwrap().into();
            let raw = f.as_raw_fd();
            (Some(f), raw)
        }
        "udp4" => {
            let u: OwnedFd = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
                .unwrap()
                .into();
            let raw = u.as_raw_fd();
            (Some(u), raw)
        }
        k => panic!("unknown fd kind {k}"),
    }
}

pub fn get_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: live local of the stated size.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

pub fn set_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    // SAFETY: live local of the stated size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as _,
        )
    })
    .unwrap();
}

pub fn set_timeval(fd: BorrowedFd<'_>, name: libc::c_int, d: Duration) {
    let tv = libc::timeval {
        tv_sec: d.as_secs() as _,
        tv_usec: d.subsec_micros() as _,
    };
    // SAFETY: live local of the stated size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as _,
        )
    })
    .unwrap();
}

/// Bytes queued for reading (SIOCINQ).
pub fn inq(fd: BorrowedFd<'_>) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCINQ writes one int.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) }).unwrap();
    n as usize
}

pub fn wait_queued(fd: BorrowedFd<'_>, bytes: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while inq(fd) < bytes {
        assert!(
            Instant::now() < deadline,
            "only {} of {bytes} bytes arrived",
            inq(fd)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Byte at stream position `p` of the test pattern.
pub fn pattern_byte(p: usize) -> u8 {
    ((p * 131 + 7) % 251) as u8
}

pub fn pattern(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(pattern_byte).collect()
}

/// Writes all of `data` to `fd` (blocking).
pub fn write_all(fd: BorrowedFd<'_>, data: &[u8]) {
    let dup = fd.try_clone_to_owned().unwrap();
    let mut f = File::from(dup);
    f.write_all(data).unwrap();
}

pub fn shutdown_write(fd: BorrowedFd<'_>) {
    // SAFETY: no pointers.
    check(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) }).unwrap();
}

/// Closes with SO_LINGER 0 so the peer gets a RST.
pub fn reset(fd: OwnedFd) {
    let lg = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: live local of the stated size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&lg as *const libc::linger).cast(),
            size_of::<libc::linger>() as _,
        )
    })
    .unwrap();
    drop(fd);
}

pub fn errno_name(code: i32) -> &'static str {
    match code {
        libc::EAGAIN => "EAGAIN",
        libc::EBADF => "EBADF",
        libc::EINVAL => "EINVAL",
        libc::ENOTSOCK => "ENOTSOCK",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::ECONNRESET => "ECONNRESET",
        libc::EPIPE => "EPIPE",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EBUSY => "EBUSY",
        libc::ENOBUFS => "ENOBUFS",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EPERM => "EPERM",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::ENOMEM => "ENOMEM",
        _ => "E?",
    }
}

// ---- Receive-side fixtures (low-water mark, zero-copy receive) ----

use std::os::fd::AsFd;

fn raw_socket(family: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> OwnedFd {
    // SAFETY: plain socket() call; the fd is owned right away.
    let fd = check(unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, proto) }).unwrap();
    // SAFETY: fresh fd owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Options applied while a TCP pair is built.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpOpts {
    pub v6: bool,
    /// TCP_MAXSEG on the listener (inherited by the accepted socket) and on the client,
    /// before connect: 4108 makes loopback segments carry exactly one 4 KiB page.
    pub mss: Option<i32>,
    /// SO_RCVLOWAT on the listener, before accept.
    pub listener_lowat: Option<i32>,
    /// SO_RCVBUF (locked) on the listener, before accept.
    pub listener_rcvbuf: Option<i32>,
}

/// A loopback TCP pair built with raw calls so that options can be set before connect.
/// `sock` is the accepted side, `peer` the client.
pub fn tcp_pair_opts(o: TcpOpts) -> Pair {
    let (l, peer) = tcp_listener_and_client(o);
    // SAFETY: accept with NULL address is allowed; the fd is owned right away.
    let s =
        check(unsafe { libc::accept(l.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) })
            .unwrap();
    Pair {
        // SAFETY: fresh fd from accept.
        sock: unsafe { OwnedFd::from_raw_fd(s) },
        peer,
    }
}

/// A listening socket with the options of `o` applied, and a client connected to it (the
/// connection waits in the accept queue).
pub fn tcp_listener_and_client(o: TcpOpts) -> (OwnedFd, OwnedFd) {
    let l = tcp_listener(o);
    let c = tcp_connect(l.as_fd(), o);
    (l, c)
}

/// A listening loopback TCP socket with the listener options of `o` applied.
pub fn tcp_listener(o: TcpOpts) -> OwnedFd {
    let family = if o.v6 { libc::AF_INET6 } else { libc::AF_INET };
    let l = raw_socket(family, libc::SOCK_STREAM, 0);
    if let Some(m) = o.mss {
        set_int(l.as_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m);
    }
    if let Some(v) = o.listener_lowat {
        set_int(l.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, v);
    }
    if let Some(v) = o.listener_rcvbuf {
        set_int(l.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, v);
    }
    let mut ss: libc::sockaddr_storage = unsafe_zeroed_storage();
    let len = if o.v6 {
        // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
        let a =
            unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
        a.sin6_family = libc::AF_INET6 as _;
        a.sin6_addr.s6_addr = Ipv6Addr::LOCALHOST.octets();
        size_of::<libc::sockaddr_in6>()
    } else {
        // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
        let a =
            unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        a.sin_family = libc::AF_INET as _;
        a.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
        size_of::<libc::sockaddr_in>()
    } as libc::socklen_t;
    let p = (&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: `p` points at a live sockaddr_storage holding `len` meaningful bytes.
    unsafe {
        check(libc::bind(l.as_raw_fd(), p, len)).unwrap();
        check(libc::listen(l.as_raw_fd(), 4)).unwrap();
    }
    l
}

/// A client connected to the listener `l` (TCP_MAXSEG of `o` set before connect, NODELAY).
pub fn tcp_connect(l: BorrowedFd<'_>, o: TcpOpts) -> OwnedFd {
    let mut ss: libc::sockaddr_storage = unsafe_zeroed_storage();
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: `p` points at a live sockaddr_storage of `len` bytes.
    check(unsafe { libc::getsockname(l.as_raw_fd(), p, &mut len) }).unwrap();
    let c = raw_socket(ss.ss_family as libc::c_int, libc::SOCK_STREAM, 0);
    if let Some(m) = o.mss {
        set_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m);
    }
    set_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    // SAFETY: as above.
    check(unsafe { libc::connect(c.as_raw_fd(), p, len) }).unwrap();
    c
}

fn unsafe_zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    unsafe { std::mem::zeroed() }
}

/// A connected UDP pair over IPv4 loopback: (`sock`, `peer`).
pub fn udp_pair() -> Pair {
    let a = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    Pair {
        sock: a.into(),
        peer: b.into(),
    }
}

/// Sends `data` with MSG_ZEROCOPY from a page-aligned private copy, in sends whose sizes
/// cycle through `sizes` (a size that is not a page multiple shifts later sends off page
/// alignment, which is what makes stragglers). Blocking; drains the error queue as it goes.
/// The copy is unmapped at the end: the kernel keeps its own references to pages in flight.
pub fn send_zerocopy(fd: BorrowedFd<'_>, data: &[u8], sizes: &[usize]) {
    assert!(!sizes.is_empty());
    set_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1);
    let len = data.len().max(1).next_multiple_of(4096);
    // SAFETY: a new private anonymous mapping, owned by this function.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    // SAFETY: the mapping is `len >= data.len()` bytes long and writable.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base.cast::<u8>(), data.len()) };
    let (mut off, mut i) = (0usize, 0usize);
    while off < data.len() {
        let n = sizes[i % sizes.len()].min(data.len() - off);
        // SAFETY: `base + off .. + n` lies in the mapping.
        let r = unsafe {
            libc::send(
                fd.as_raw_fd(),
                base.cast::<u8>().add(off).cast(),
                n,
                libc::MSG_ZEROCOPY,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                    drain_errqueue(fd);
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                _ => panic!("zerocopy send: {e}"),
            }
        }
        off += r as usize;
        i += 1;
        if i % 16 == 0 {
            drain_errqueue(fd);
        }
    }
    drain_errqueue(fd);
    // SAFETY: our own mapping; the kernel holds its own page references for data in flight.
    unsafe { libc::munmap(base, len) };
}

/// Reads and discards pending MSG_ZEROCOPY notifications (never blocks).
pub fn drain_errqueue(fd: BorrowedFd<'_>) {
    let mut control = [0u64; 16];
    loop {
        // SAFETY: all-zero is a valid msghdr; it points at a live control buffer only.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the msghdr describes live memory.
        let r = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return;
        }
    }
}

/// FNV-1a, 64 bits: the stream hash the zero-copy tests compare.
pub fn fnv1a(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

pub const FNV_INIT: u64 = 0xcbf2_9ce4_8422_2325;

/// A network namespace for one test: a unique name, removed on drop even when the test fails.
pub struct Netns {
    pub name: String,
}

fn ip(args: &[&str]) {
    let st = std::process::Command::new("ip")
        .args(args)
        .status()
        .expect("run ip");
    assert!(st.success(), "ip {args:?} failed");
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lowcopy-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NAME ARGS...`
    pub fn ip(&self, args: &[&str]) {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend_from_slice(args);
        ip(&a);
    }

    pub fn sysctl(&self, key: &str, val: &str) {
        let kv = format!("{key}={val}");
        let st = std::process::Command::new("ip")
            .args(["netns", "exec", &self.name, "sysctl", "-qw", &kv])
            .status()
            .unwrap();
        assert!(st.success(), "sysctl {kv} in {}", self.name);
    }

    /// Runs `f` on a thread that has entered this namespace: sockets it creates live there.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = File::open(&path).unwrap();
                // SAFETY: setns on this thread only; the fd is open for the call.
                check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).unwrap();
                f()
            })
            .join()
            .unwrap()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Two namespaces joined by a veth pair: `a` has 10.77.0.1 and fd77::1, `b` .2 and ::2.
pub fn veth_pair(tag: &str) -> (Netns, Netns) {
    let (a, b) = (
        Netns::new(&format!("{tag}a")),
        Netns::new(&format!("{tag}b")),
    );
    ip(&[
        "link", "add", "lcv0", "netns", &a.name, "type", "veth", "peer", "name", "lcv1", "netns",
        &b.name,
    ]);
    for (ns, dev, v4, v6) in [
        (&a, "lcv0", "10.77.0.1/24", "fd77::1/64"),
        (&b, "lcv1", "10.77.0.2/24", "fd77::2/64"),
    ] {
        ns.ip(&["addr", "add", v4, "dev", dev]);
        ns.ip(&["addr", "add", v6, "dev", dev, "nodad"]);
        ns.ip(&["link", "set", dev, "up"]);
    }
    (a, b)
}

/// Loads `tests/scenarios/<file>` and runs every scenario once per transport and, with an
/// `axis` ("modes", "backends"), once per value of that list too: `run(table, scenario,
/// transport, value)` (value "" without an axis). Every run goes ahead whatever failed
/// before; then the test fails listing all failed runs, or when fewer than `min_runs` ran
/// (a table that silently stopped expanding). A run that calls [`skip`] and returns counts
/// as skipped, not passed.
pub fn run_table(
    file: &str,
    axis: Option<&str>,
    min_runs: usize,
    run: impl Fn(&serde_json::Value, &serde_json::Value, &str, &str) + std::panic::RefUnwindSafe,
) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/scenarios")
        .join(file);
    let table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut runs, mut failed, mut skipped) = (0, Vec::new(), 0);
    let none = vec![serde_json::Value::from("")];
    for sc in table["scenarios"].as_array().unwrap() {
        let values = axis.map_or(&none, |a| sc[a].as_array().unwrap());
        for t in sc["transports"].as_array().unwrap() {
            for v in values {
                let (t, v) = (t.as_str().unwrap(), v.as_str().unwrap());
                runs += 1;
                let name = format!("{file}: {} | {t} | {v}", sc["name"].as_str().unwrap());
                let _dog = Watchdog::arm(name, Duration::from_secs(60));
                RUN_SKIPPED.with(|s| s.set(false));
                if std::panic::catch_unwind(|| run(&table, sc, t, v)).is_err() {
                    failed.push(format!("{} | {t} | {v}", sc["name"].as_str().unwrap()));
                } else if RUN_SKIPPED.with(|s| s.get()) {
                    skipped += 1;
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{file}: {} of {runs} runs failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    assert!(runs >= min_runs, "{file}: only {runs} runs");
    eprintln!(
        "{file}: {} scenario runs passed, {skipped} skipped",
        runs - skipped
    );
}

extern "C" fn on_signal(_: libc::c_int) {}

/// Sends SIGUSR1 (handled by an empty function, without SA_RESTART) to this thread after
/// `ms`, as a signal would interrupt a daemon's blocking call, and again every 100 ms until
/// [`Signaller::stop`]: a test thread delayed past the first signal on a loaded machine
/// still gets one inside its blocking call instead of blocking forever.
pub fn signal_me_after(ms: u64) -> Signaller {
    // SAFETY: installs an async-signal-safe empty handler; the struct is fully initialised.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        check(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut())).unwrap();
    }
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        while !flag.load(std::sync::atomic::Ordering::Acquire) {
            // SAFETY: `me` is the test thread, alive until it stops and joins this one.
            unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    Signaller { stop, thread }
}

/// The thread [`signal_me_after`] started.
pub struct Signaller {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Signaller {
    /// No more signals; waits for the signalling thread to end.
    pub fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.join().unwrap();
    }
}

/// CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`): a call that sleeps uses
/// almost none, one that spins uses about its wall time.
pub fn thread_cpu() -> Duration {
    // SAFETY: all-zero is a valid timespec; clock_gettime writes one.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a live timespec.
    check(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }).unwrap();
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Waits until poll reports POLLERR on `fd` (an error-queue entry or a socket error), 3 s at
/// most.
pub fn wait_pollerr(fd: BorrowedFd<'_>, ctx: &str) {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 3000) };
    assert!(
        n == 1 && pfd.revents & libc::POLLERR != 0,
        "{ctx}: no POLLERR within 3 s ({n}, {:#x})",
        pfd.revents
    );
}

/// Puts an entry on `fd`'s error queue the way an application would, by sending one byte
/// to the peer: `zerocopy`, a `MSG_ZEROCOPY` send (its completion notification);
/// `timestamp`, a send with `SO_TIMESTAMPING` software transmit reports on (left on, so
/// every later send adds one). Returns once poll reports POLLERR.
pub fn errqueue_entry(fd: BorrowedFd<'_>, kind: &str, ctx: &str) {
    let flags = match kind {
        "zerocopy" => {
            set_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1);
            libc::MSG_ZEROCOPY
        }
        "timestamp" => {
            let v = libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
            set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, v as i32);
            0
        }
        k => panic!("{ctx}: unknown error-queue entry {k}"),
    };
    // SAFETY: one readable byte.
    let n = unsafe { libc::send(fd.as_raw_fd(), b"e".as_ptr().cast(), 1, flags) };
    assert_eq!(n, 1, "{ctx}: send: {}", io::Error::last_os_error());
    wait_pollerr(fd, ctx);
}

/// Ends the process when a run takes longer than `limit`: a hang is a failure with a
/// name, not a stuck suite. Dropping the guard disarms it.
pub struct Watchdog(Option<std::sync::mpsc::Sender<()>>);

impl Watchdog {
    pub fn arm(what: String, limit: Duration) -> Watchdog {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!("HANG: {what} still running after {limit:?}");
                std::process::exit(70);
            }
        });
        Watchdog(Some(tx))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.take(); // the watchdog's recv ends with Disconnected
    }
}

// ---- Skipped parts and privilege ----

/// Records that a part of a test did not run here, and why: printed, and appended to the
/// file named by `$LOWCOPY_SKIP_LOG` (scripts/test.sh lists and counts them; the output of
/// passing tests is captured, the file is not). Also marks the current table run as skipped
/// (see [`run_table`]).
pub fn skip(part: &str, reason: &str) {
    eprintln!("SKIP {part}: {reason}");
    if let Some(path) = std::env::var_os("LOWCOPY_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{part}: {reason}");
        }
    }
    RUN_SKIPPED.with(|s| s.set(true));
}

thread_local! {
    static RUN_SKIPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Root: what network namespaces (`ip netns add`: CAP_SYS_ADMIN and CAP_NET_ADMIN) need.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Sets a socket buffer to `bytes` as `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` would: with the
/// plain option when `bytes` is within `net.core.{r,w}mem_max` (the kernel then does exactly
/// the same: twice the value, locked), with the forced one otherwise, which needs
/// CAP_NET_ADMIN. `Err(reason)` when neither can be done here.
pub fn force_buf(fd: BorrowedFd<'_>, rcv: bool, bytes: i32) -> Result<(), String> {
    let (plain, force, max) = if rcv {
        (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE, "rmem_max")
    } else {
        (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE, "wmem_max")
    };
    let limit: i64 = std::fs::read_to_string(format!("/proc/sys/net/core/{max}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let name = if i64::from(bytes) <= limit {
        plain
    } else {
        force
    };
    let v: libc::c_int = bytes;
    // SAFETY: live local of the stated size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as _,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EPERM) => Err(format!(
            "a {bytes}-byte socket buffer is above net.core.{max} ({limit}): SO_{}BUFFORCE needs CAP_NET_ADMIN",
            if rcv { "RCV" } else { "SND" }
        )),
        _ => panic!("setsockopt buffer {bytes}: {e}"),
    }
}
