//! Socket fixtures shared by the integration tests.
#![allow(dead_code)]

use std::fs::File;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use lowcopy::testing as t;
pub use lowcopy::testing::{Pair, TcpOpts};

pub fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A connected pair: streams `tcp4`, `tcp6`, `mptcp4`, `unix`; datagrams `udp4`, `unix_dgram`
/// (`sock` is peeked, `peer` writes).
pub fn pair(transport: &str) -> Pair {
    match transport {
        "tcp4" | "tcp6" | "mptcp4" | "unix" | "udp4" | "unix_dgram" => {
            t::pair(transport).unwrap_or_else(|e| panic!("{transport} pair: {e}"))
        }
        t => panic!("unknown transport {t}"),
    }
}

/// An fd that is not a peekable stream: `closed` (a number no fd has), `file`, `udp4`, and the
/// listening sockets `listen_tcp4`, `listen_tcp6`, `listen_mptcp4`, `listen_unix`.
pub fn odd_fd(kind: &str) -> (Option<OwnedFd>, libc::c_int) {
    match kind {
        "closed" => (None, 1_000_000),
        "file" => {
            let f: OwnedFd = File::open("/proc/self/stat").unwrap().into();
            let raw = f.as_raw_fd();
            (Some(f), raw)
        }
        "listen_tcp4" | "listen_tcp6" | "listen_mptcp4" | "listen_unix" => {
            let l = t::listening(&kind["listen_".len()..]).unwrap();
            let raw = l.as_raw_fd();
            (Some(l), raw)
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
    t::get_int(fd, level, name)
}

pub fn set_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    t::set_int(fd, level, name, v).unwrap();
}

pub fn set_timeval(fd: BorrowedFd<'_>, name: libc::c_int, d: Duration) {
    t::set_timeval(fd, name, d).unwrap();
}

/// Bytes queued for reading (SIOCINQ).
pub fn inq(fd: BorrowedFd<'_>) -> usize {
    t::inq(fd).unwrap()
}

pub fn wait_queued(fd: BorrowedFd<'_>, bytes: usize) {
    if t::wait_queued(fd, bytes, Duration::from_secs(5)).is_err() {
        panic!("only {} of {bytes} bytes arrived", inq(fd));
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
    t::write_all(fd, data).unwrap();
}

pub fn shutdown_write(fd: BorrowedFd<'_>) {
    t::shutdown_write(fd).unwrap();
}

/// Closes with SO_LINGER 0 so the peer gets a RST.
pub fn reset(fd: OwnedFd) {
    t::reset(fd).unwrap();
}

pub fn errno_name(code: i32) -> &'static str {
    lowcopy::errno_name(code).unwrap_or("E?")
}

// ---- Receive-side fixtures (low-water mark, zero-copy receive) ----

/// A loopback TCP pair built with raw calls so that options can be set before connect.
/// `sock` is the accepted side, `peer` the client.
pub fn tcp_pair_opts(o: TcpOpts) -> Pair {
    t::tcp_pair(&o).unwrap()
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
    t::tcp_listener(&o).unwrap()
}

/// A client connected to the listener `l` (TCP_MAXSEG of `o` set before connect, NODELAY).
pub fn tcp_connect(l: BorrowedFd<'_>, o: TcpOpts) -> OwnedFd {
    t::tcp_connect(l, &o).unwrap()
}

/// A connected UDP pair over IPv4 loopback: (`sock`, `peer`).
pub fn udp_pair() -> Pair {
    t::udp_pair(false, true).unwrap().0
}

/// Sends `data` with MSG_ZEROCOPY from a page-aligned private copy, in sends whose sizes
/// cycle through `sizes` (a size that is not a page multiple shifts later sends off page
/// alignment, which is what makes stragglers). Blocking; drains the error queue as it goes.
pub fn send_zerocopy(fd: BorrowedFd<'_>, data: &[u8], sizes: &[usize]) {
    t::send_zerocopy(fd, data, sizes).unwrap_or_else(|e| panic!("zerocopy send: {e}"));
}

/// Reads and discards pending MSG_ZEROCOPY notifications (never blocks).
pub fn drain_errqueue(fd: BorrowedFd<'_>) {
    t::drain_errqueue(fd);
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
    // LOWCOPY_SCENARIO=substring runs only the scenarios whose name contains it (CONTRIBUTING.md);
    // the table's minimum number of runs then does not apply.
    let only = std::env::var("LOWCOPY_SCENARIO")
        .ok()
        .filter(|s| !s.is_empty());
    let mut matched = 0;
    for sc in table["scenarios"].as_array().unwrap() {
        if let Some(o) = &only {
            if !sc["name"].as_str().unwrap().contains(o.as_str()) {
                continue;
            }
            matched += 1;
        }
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
    if let Some(o) = &only {
        eprintln!("{file}: LOWCOPY_SCENARIO={o:?}: {matched} scenarios match, {runs} runs");
    } else {
        assert!(runs >= min_runs, "{file}: only {runs} runs");
    }
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
    t::thread_cpu().unwrap()
}

/// Waits until poll reports POLLERR on `fd` (an error-queue entry or a socket error), 3 s at
/// most.
pub fn wait_pollerr(fd: BorrowedFd<'_>, ctx: &str) {
    if let Err(e) = t::wait_pollerr(fd, Duration::from_secs(3)) {
        panic!("{ctx}: no POLLERR within 3 s ({e})");
    }
}

/// Puts an entry on `fd`'s error queue the way an application would, by sending one byte
/// to the peer: `zerocopy`, a `MSG_ZEROCOPY` send (its completion notification);
/// `timestamp`, a send with `SO_TIMESTAMPING` software transmit reports on (left on, so
/// every later send adds one). Returns once poll reports POLLERR.
pub fn errqueue_entry(fd: BorrowedFd<'_>, kind: &str, ctx: &str) {
    if let Err(e) = t::errqueue_entry(fd, kind) {
        panic!("{ctx}: error-queue entry {kind}: {e}");
    }
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
/// Whether this kernel has `SO_PEEK_OFF` for a stream transport's family (`lowcopy::probe`);
/// false for any other transport.
pub fn has_peek_off(transport: &str) -> bool {
    let caps = lowcopy::probe().unwrap();
    match transport {
        "tcp4" => caps.peek_off_tcp4,
        "tcp6" => caps.peek_off_tcp6,
        "unix" => caps.peek_off_unix,
        "mptcp4" => caps.peek_off_mptcp,
        _ => false,
    }
}

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
    let Err(e) = t::set_int(fd, libc::SOL_SOCKET, name, bytes) else {
        return Ok(());
    };
    match e.raw_os_error() {
        Some(libc::EPERM) => Err(format!(
            "a {bytes}-byte socket buffer is above net.core.{max} ({limit}): SO_{}BUFFORCE needs CAP_NET_ADMIN",
            if rcv { "RCV" } else { "SND" }
        )),
        _ => panic!("setsockopt buffer {bytes}: {e}"),
    }
}
