//! `testing.*`: socket fixtures for lowcopy's own test suite (node/test/), which runs the
//! behaviour tables of tests/scenarios/ the way the Rust and C runners do: connected pairs of
//! every transport, socket options read back, peer writers on their own threads (a blocking
//! call on the JS thread must still see bytes arrive). Not part of the API: names and shapes
//! may change with the tables. Descriptors returned here belong to the caller, who closes
//! them with `testing.close`.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use lowcopy::testing as t;
use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::error::{sys_error, value_error, OrThrow};

/// Peer writers started by `spawnWriter` and not joined yet.
static WRITERS: Mutex<Vec<JoinHandle<std::result::Result<(), String>>>> = Mutex::new(Vec::new());

/// A descriptor made for JS, as its number (JS closes it with `testing.close`).
fn raw_fd(r: std::io::Result<OwnedFd>, env: &Env, what: &str) -> Result<i32> {
    r.map(IntoRawFd::into_raw_fd).or_throw(env, what)
}

fn borrow(fd: i32) -> BorrowedFd<'static> {
    // SAFETY: test fixtures act on numbers the test owns (or on purpose on closed ones, which
    // the kernel answers with EBADF); no memory is reached through the number.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// A duplicate of the test's `fd`, for a thread (or a `File`) of the fixture's own.
fn dup_of(env: &Env, fd: i32, what: &str) -> Result<OwnedFd> {
    borrow(fd).try_clone_to_owned().or_throw(env, what)
}

/// Options of the TCP fixtures.
#[derive(Default)]
#[napi(object, namespace = "testing")]
pub struct TcpOpts {
    /// TCP_MAXSEG on the listener and the client, before connect.
    pub mss: Option<i32>,
    /// SO_RCVBUF (locked) on the listener, before the handshake.
    pub listener_rcvbuf: Option<i32>,
}

impl TcpOpts {
    fn core(&self, v6: bool, mptcp: bool) -> t::TcpOpts {
        t::TcpOpts {
            v6,
            mptcp,
            mss: self.mss,
            listener_rcvbuf: self.listener_rcvbuf,
            ..t::TcpOpts::default()
        }
    }
}

/// A connected pair of descriptors: `sock` is the one under test, `peer` the other end.
#[napi(object, namespace = "testing")]
pub struct Pair {
    pub sock: i32,
    pub peer: i32,
    /// For unconnected UDP: the peer's port on 127.0.0.1.
    pub peer_port: Option<u32>,
}

/// A connected stream pair: `tcp4`, `tcp6`, `mptcp4` (loopback; `sock` is the accepted side),
/// `unix` (socketpair); datagram pairs `unix_dgram` (socketpair), `udp4`, `udp6` (connected both ways) and
/// `udp4_unconnected` (`sock` not connected: sends name `peerPort`).
#[napi(catch_unwind, namespace = "testing")]
pub fn pair(env: Env, transport: String, opts: Option<TcpOpts>) -> Result<Pair> {
    let o = opts.unwrap_or_default();
    let r = (|| -> std::io::Result<Pair> {
        let (p, peer_port) = match transport.as_str() {
            "tcp4" => (t::tcp_pair(&o.core(false, false))?, None),
            "tcp6" => (t::tcp_pair(&o.core(true, false))?, None),
            "mptcp4" => (t::tcp_pair(&o.core(false, true))?, None),
            "unix" | "unix_dgram" => (t::pair(&transport)?, None),
            "udp4" | "udp6" | "udp4_unconnected" => {
                let (p, port) = t::udp_pair(transport == "udp6", transport != "udp4_unconnected")?;
                (p, Some(port as u32))
            }
            _ => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
        };
        Ok(Pair {
            sock: p.sock.into_raw_fd(),
            peer: p.peer.into_raw_fd(),
            peer_port,
        })
    })();
    r.or_throw(&env, "testing.pair")
}

/// A listening loopback TCP socket (`v6`), options applied before listen.
#[napi(catch_unwind, namespace = "testing")]
pub fn listener(env: Env, v6: bool, opts: Option<TcpOpts>) -> Result<i32> {
    let o = opts.unwrap_or_default();
    let r = t::tcp_listener(&o.core(v6, false));
    raw_fd(r, &env, "testing.listener")
}

/// A listening socket: `tcp4`, `tcp6`, `mptcp4` (loopback) or `unix` (an abstract address).
#[napi(catch_unwind, namespace = "testing")]
pub fn listening(env: Env, transport: String) -> Result<i32> {
    raw_fd(t::listening(&transport), &env, "testing.listening")
}

/// Sends `data` on the AF_UNIX socket `fd` in one sendmsg with `count` copies of a descriptor
/// of /dev/null as SCM_RIGHTS (closed here after: the queue holds the only references).
/// Returns the bytes sent.
#[napi(catch_unwind, namespace = "testing")]
pub fn send_fds(env: Env, fd: i32, data: &[u8], count: u32) -> Result<u32> {
    let r = (|| -> std::io::Result<usize> {
        let pass = std::fs::File::open("/dev/null")?;
        t::send_fds(borrow(fd), data, pass.as_fd(), count as usize)
    })();
    Ok(r.or_throw(&env, "testing.sendFds")? as u32)
}

/// `send(fd, data, MSG_OOB)`: TCP urgent data, its last byte the urgent byte; bytes sent.
#[napi(catch_unwind, namespace = "testing")]
pub fn send_oob(env: Env, fd: i32, data: &[u8]) -> Result<u32> {
    Ok(t::send_oob(borrow(fd), data).or_throw(&env, "testing.sendOob")? as u32)
}

/// Whether an urgent byte is there (`poll` for `POLLPRI`), waiting at most `ms`.
#[napi(catch_unwind, namespace = "testing")]
pub fn wait_urgent(env: Env, fd: i32, ms: i32) -> Result<bool> {
    t::wait_urgent(borrow(fd), ms).or_throw(&env, "testing.waitUrgent")
}

/// `recv(fd, 1 byte, MSG_OOB)`: the urgent byte, as a one-byte Buffer.
#[napi(catch_unwind, namespace = "testing")]
pub fn recv_oob(env: Env, fd: i32) -> Result<Buffer> {
    let b = t::recv_oob(borrow(fd)).or_throw(&env, "testing.recvOob")?;
    Ok(vec![b].into())
}

/// A client connected to the listener `fd` (TCP_MAXSEG of `opts` before connect).
#[napi(catch_unwind, namespace = "testing")]
pub fn connect(env: Env, fd: i32, opts: Option<TcpOpts>) -> Result<i32> {
    let o = opts.unwrap_or_default();
    let r = t::tcp_connect(borrow(fd), &o.core(false, false));
    raw_fd(r, &env, "testing.connect")
}

/// `accept4` on the listener `fd`.
#[napi(catch_unwind, namespace = "testing")]
pub fn accept(env: Env, fd: i32) -> Result<i32> {
    raw_fd(t::accept(borrow(fd)), &env, "testing.accept")
}

/// An unconnected TCP/IPv4 socket.
#[napi(catch_unwind, namespace = "testing")]
pub fn tcp_socket(env: Env) -> Result<i32> {
    let r = t::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
    raw_fd(r, &env, "testing.tcpSocket")
}

/// A regular file open for reading (not a socket).
#[napi(catch_unwind, namespace = "testing")]
pub fn file_fd(env: Env) -> Result<i32> {
    let f = std::fs::File::open("/proc/self/stat").or_throw(&env, "testing.fileFd")?;
    Ok(f.into_raw_fd())
}

/// close(2).
#[napi(catch_unwind, namespace = "testing")]
pub fn close(env: Env, fd: i32) -> Result<()> {
    t::close(fd).or_throw(&env, "testing.close")
}

/// The (level, option) of the int option named `name`; `ERR_INVALID_ARG_VALUE` for another.
fn opt_name(env: &Env, name: &str) -> Result<(i32, i32)> {
    Ok(match name {
        "SO_RCVLOWAT" => (libc::SOL_SOCKET, libc::SO_RCVLOWAT),
        "SO_RCVBUF" => (libc::SOL_SOCKET, libc::SO_RCVBUF),
        "SO_SNDBUF" => (libc::SOL_SOCKET, libc::SO_SNDBUF),
        "SO_RCVBUFFORCE" => (libc::SOL_SOCKET, libc::SO_RCVBUFFORCE),
        "SO_SNDBUFFORCE" => (libc::SOL_SOCKET, libc::SO_SNDBUFFORCE),
        "SO_PEEK_OFF" => (libc::SOL_SOCKET, 42),
        "SO_ZEROCOPY" => (libc::SOL_SOCKET, libc::SO_ZEROCOPY),
        "SO_ERROR" => (libc::SOL_SOCKET, libc::SO_ERROR),
        "TCP_NODELAY" => (libc::IPPROTO_TCP, libc::TCP_NODELAY),
        _ => return Err(value_error(env, format!("unknown option {name}"))),
    })
}

/// getsockopt of the int option named `name` (`'SO_RCVLOWAT'`, `'SO_PEEK_OFF'`, ...).
#[napi(catch_unwind, namespace = "testing")]
pub fn getsockopt(env: Env, fd: i32, name: String) -> Result<i32> {
    let (l, n) = opt_name(&env, &name)?;
    t::get_int(borrow(fd), l, n).or_throw(&env, "testing.getsockopt")
}

/// setsockopt of the int option named `name`.
#[napi(catch_unwind, namespace = "testing")]
pub fn setsockopt(env: Env, fd: i32, name: String, value: i32) -> Result<()> {
    let (l, n) = opt_name(&env, &name)?;
    t::set_int(borrow(fd), l, n, value).or_throw(&env, "testing.setsockopt")
}

/// SO_RCVTIMEO in milliseconds (0: none).
#[napi(catch_unwind, namespace = "testing")]
pub fn set_rcvtimeo(env: Env, fd: i32, ms: u32) -> Result<()> {
    let d = Duration::from_millis(ms as u64);
    t::set_timeval(borrow(fd), libc::SO_RCVTIMEO, d).or_throw(&env, "testing.setRcvtimeo")
}

/// Sets O_NONBLOCK on the open file (shared by every duplicate).
#[napi(catch_unwind, namespace = "testing")]
pub fn set_nonblocking(env: Env, fd: i32) -> Result<()> {
    t::set_nonblocking(borrow(fd)).or_throw(&env, "testing.setNonblocking")
}

/// Bytes queued for reading (SIOCINQ).
#[napi(catch_unwind, namespace = "testing")]
pub fn inq(env: Env, fd: i32) -> Result<u32> {
    Ok(t::inq(borrow(fd)).or_throw(&env, "testing.inq")? as u32)
}

/// Waits (sleeping 1 ms at a time, at most `timeoutMs`) until `bytes` are queued; throws
/// ETIMEDOUT otherwise.
#[napi(catch_unwind, namespace = "testing")]
pub fn wait_queued(env: Env, fd: i32, bytes: u32, timeout_ms: Option<u32>) -> Result<()> {
    let limit = Duration::from_millis(timeout_ms.unwrap_or(5000) as u64);
    t::wait_queued(borrow(fd), bytes as usize, limit).or_throw(&env, "testing.waitQueued")
}

/// Writes all of `data` to `fd` now (blocking).
#[napi(catch_unwind, namespace = "testing")]
pub fn write_all_sync(env: Env, fd: i32, data: &[u8]) -> Result<()> {
    t::write_all(borrow(fd), data).or_throw(&env, "testing.writeAllSync")
}

/// How a spawned writer sends.
#[derive(Default)]
#[napi(object, namespace = "testing")]
pub struct WriterOpts {
    /// Sleep this long first.
    pub delay_ms: Option<u32>,
    /// Send in this many pieces, `pieceMs` apart.
    pub pieces: Option<u32>,
    pub piece_ms: Option<u32>,
    /// Send with MSG_ZEROCOPY from page-aligned memory, send sizes cycling through these.
    pub zerocopy_sizes: Option<Vec<u32>>,
    /// Shut the write side down after the data.
    pub shutdown: Option<bool>,
    /// First wait for every writer started before (their bytes go first).
    pub after_others: Option<bool>,
}

/// Starts a thread that writes `data` to (a duplicate of) `fd` as `opts` say; `joinWriters`
/// waits for every such thread and reports the first failure.
#[napi(catch_unwind, namespace = "testing")]
pub fn spawn_writer(env: Env, fd: i32, data: Buffer, opts: Option<WriterOpts>) -> Result<()> {
    let dup = dup_of(&env, fd, "testing.spawnWriter")?;
    let data = data.to_vec();
    let o = opts.unwrap_or_default();
    let before: Vec<_> = if o.after_others.unwrap_or(false) {
        std::mem::take(&mut *WRITERS.lock().unwrap_or_else(|p| p.into_inner()))
    } else {
        Vec::new()
    };
    let w = t::Writer {
        delay: Duration::from_millis(o.delay_ms.unwrap_or(0) as u64),
        pieces: o.pieces.unwrap_or(1) as usize,
        gap: Duration::from_millis(o.piece_ms.unwrap_or(0) as u64),
        zerocopy_sizes: o
            .zerocopy_sizes
            .map(|v| v.iter().map(|&s| s as usize).collect()),
        shutdown: o.shutdown.unwrap_or(false),
    };
    let h = std::thread::spawn(move || -> std::result::Result<(), String> {
        for b in before {
            b.join().unwrap_or_else(|_| Err("writer panicked".into()))?;
        }
        t::write_as(dup.as_fd(), &data, &w)
    });
    WRITERS.lock().unwrap_or_else(|p| p.into_inner()).push(h);
    Ok(())
}

/// Waits for every writer `spawnWriter` started; throws the first one's failure.
#[napi(catch_unwind, namespace = "testing")]
pub fn join_writers() -> Result<()> {
    let hs: Vec<_> = std::mem::take(&mut *WRITERS.lock().unwrap_or_else(|p| p.into_inner()));
    let each = |h: JoinHandle<_>| h.join().unwrap_or_else(|_| Err("writer panicked".into()));
    let all: Vec<std::result::Result<(), String>> = hs.into_iter().map(each).collect();
    all.into_iter()
        .collect::<std::result::Result<(), String>>()
        .map_err(Error::from_reason)
}

/// shutdown(SHUT_WR).
#[napi(catch_unwind, namespace = "testing")]
pub fn shutdown_write(env: Env, fd: i32) -> Result<()> {
    t::shutdown_write(borrow(fd)).or_throw(&env, "testing.shutdownWrite")
}

/// Closes `fd` with SO_LINGER 0: the peer gets a RST.
#[napi(catch_unwind, namespace = "testing")]
pub fn reset(env: Env, fd: i32) -> Result<()> {
    t::set_linger_zero(borrow(fd))
        .and_then(|()| t::close(fd))
        .or_throw(&env, "testing.reset")
}

/// One read(2) of up to `len` bytes (blocking unless the fd is non-blocking).
#[napi(catch_unwind, namespace = "testing")]
pub fn read(env: Env, fd: i32, len: u32) -> Result<Buffer> {
    let mut f = std::fs::File::from(dup_of(&env, fd, "testing.read")?);
    let mut b = vec![0u8; len as usize];
    let n = f.read(&mut b).or_throw(&env, "testing.read")?;
    b.truncate(n);
    Ok(b.into())
}

/// One recv(MSG_PEEK | MSG_DONTWAIT) of up to `len` bytes.
#[napi(catch_unwind, namespace = "testing")]
pub fn peek_raw(env: Env, fd: i32, len: u32) -> Result<Buffer> {
    let mut b = vec![0u8; len as usize];
    let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT;
    let n = t::recv(borrow(fd), &mut b, flags).or_throw(&env, "testing.peekRaw")?;
    b.truncate(n);
    Ok(b.into())
}

/// send(2) of each datagram in `list` (connected socket).
#[napi(catch_unwind, namespace = "testing")]
pub fn send_datagrams(env: Env, fd: i32, list: Vec<String>) -> Result<()> {
    for d in list {
        if !matches!(t::send(borrow(fd), d.as_bytes(), 0), Ok(n) if n == d.len()) {
            return Err(sys_error(&env, libc::EIO, "testing.sendDatagrams"));
        }
    }
    Ok(())
}

/// A level-triggered epoll instance watching `fd` for EPOLLIN; returns its fd.
#[napi(catch_unwind, namespace = "testing")]
pub fn epoll_in(env: Env, fd: i32) -> Result<i32> {
    raw_fd(t::epoll_in(borrow(fd)), &env, "testing.epollIn")
}

/// epoll_wait for one event, `ms` at most: whether one came.
#[napi(catch_unwind, namespace = "testing")]
pub fn epoll_wait(env: Env, epfd: i32, ms: i32) -> Result<bool> {
    match t::epoll_wait(borrow(epfd), ms) {
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(false),
        r => r.or_throw(&env, "testing.epollWait"),
    }
}

/// Reads from `fd` until `bytes` arrived (SO_RCVTIMEO `timeoutMs` per read, EINTR retried) and
/// checks them against the test pattern from stream position `from`; returns the bytes read.
/// Throws on a short stream or a wrong byte.
#[napi(catch_unwind, namespace = "testing")]
pub fn drain_pattern(env: Env, fd: i32, from: f64, bytes: f64, timeout_ms: u32) -> Result<f64> {
    set_rcvtimeo(env, fd, timeout_ms)?;
    let (from, bytes) = (from as usize, bytes as usize);
    let r = t::read_pattern(borrow(fd), from, from + bytes);
    r.map_err(|e| Error::from_reason(format!("peer {e}")))?;
    Ok(bytes as f64)
}

/// `len` bytes of the test pattern from stream position `from`.
#[napi(catch_unwind, namespace = "testing")]
pub fn pattern(from: f64, len: u32) -> Buffer {
    let from = from as usize;
    (from..from + len as usize)
        .map(t::pattern_byte)
        .collect::<Vec<u8>>()
        .into()
}

/// Open descriptors of this process (entries of /proc/self/fd), for leak checks.
#[napi(catch_unwind, namespace = "testing")]
pub fn open_fds(env: Env) -> Result<u32> {
    // The thread's io_uring ring (and its eventfd) outlives the senders that used it: closed
    // here when none is left joined to it (EBUSY otherwise, and the count shows it).
    let _ = lowcopy::zc::close_thread_ring();
    Ok(t::open_fd_count().or_throw(&env, "testing.openFds")? as u32)
}

/// Whether `fd` is open (fcntl F_GETFD).
#[napi(catch_unwind, namespace = "testing")]
pub fn is_open(fd: i32) -> bool {
    t::is_open(fd)
}

/// Puts an entry on `fd`'s error queue by sending one byte to the peer: `'zerocopy'` (a
/// MSG_ZEROCOPY send: its notification), `'timestamp'` (SO_TIMESTAMPING software transmit
/// reports, left on), `'icmp'` (UDP: IP_RECVERR on, then one datagram to a peer the caller
/// closed first: ECONNREFUSED pending and an ICMP report queued). Returns once poll reports
/// POLLERR (3 s at most, else ETIMEDOUT).
#[napi(catch_unwind, namespace = "testing")]
pub fn errqueue_entry(env: Env, fd: i32, kind: String) -> Result<()> {
    t::errqueue_entry(borrow(fd), &kind).or_throw(&env, "testing.errqueueEntry")
}

/// CPU time this thread has used, in milliseconds (CLOCK_THREAD_CPUTIME_ID).
#[napi(catch_unwind, namespace = "testing")]
pub fn thread_cpu_ms() -> f64 {
    t::thread_cpu().unwrap_or_default().as_secs_f64() * 1e3
}

/// `tcp_rmem[2] / 2`: the most SO_RCVLOWAT TCP keeps on an unlocked buffer.
#[napi(catch_unwind, namespace = "testing")]
pub fn rmem_cap(env: Env) -> Result<f64> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem");
    let s = s.or_throw(&env, "testing.rmemCap")?;
    let max: f64 = s
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Ok((max / 2.0).floor())
}

/// Readers started by `spawnReader`, not joined yet.
static READERS: Mutex<Vec<JoinHandle<std::result::Result<f64, String>>>> = Mutex::new(Vec::new());

/// Starts a thread that, after `delayMs`, reads `fd` from stream position `from` up to `to`,
/// checking the test pattern; `joinReaders` returns where it ended.
#[napi(catch_unwind, namespace = "testing")]
pub fn spawn_reader(env: Env, fd: i32, from: f64, to: f64, delay_ms: u32) -> Result<()> {
    let dup = dup_of(&env, fd, "testing.spawnReader")?;
    let h = std::thread::spawn(move || -> std::result::Result<f64, String> {
        std::thread::sleep(Duration::from_millis(delay_ms as u64));
        t::set_timeval(dup.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(5))
            .map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
        let to = to as usize;
        t::read_pattern(dup.as_fd(), from as usize, to).map_err(|e| format!("peer read: {e}"))?;
        Ok(to as f64)
    });
    READERS.lock().unwrap_or_else(|p| p.into_inner()).push(h);
    Ok(())
}

/// Waits for the readers `spawnReader` started; returns the last one's end position (-1 when
/// there was none); throws the first failure.
#[napi(catch_unwind, namespace = "testing")]
pub fn join_readers() -> Result<f64> {
    let hs: Vec<_> = std::mem::take(&mut *READERS.lock().unwrap_or_else(|p| p.into_inner()));
    let each = |h: JoinHandle<_>| h.join().unwrap_or_else(|_| Err("reader panicked".into()));
    let last = hs.into_iter().map(each).try_fold(-1.0, |_, r| r);
    last.map_err(Error::from_reason)
}

/// SO_TIMESTAMPING software transmit reports on (every later send queues one on the error
/// queue).
#[napi(catch_unwind, namespace = "testing")]
pub fn set_timestamping(env: Env, fd: i32) -> Result<()> {
    t::set_timestamping(borrow(fd)).or_throw(&env, "testing.setTimestamping")
}

/// Waits (3 s at most, else ETIMEDOUT) until poll reports POLLERR on `fd`.
#[napi(catch_unwind, namespace = "testing", js_name = "waitPollerr")]
pub fn wait_pollerr_js(env: Env, fd: i32) -> Result<()> {
    t::wait_pollerr(borrow(fd), Duration::from_secs(3)).or_throw(&env, "testing.waitPollerr")
}

/// Panics inside an export: it must come back as a thrown Error, never abort the process.
#[napi(catch_unwind, namespace = "testing")]
pub fn panic() -> Result<()> {
    panic!("lowcopy testing.panic()")
}

/// A blocking TCP connection to 127.0.0.1:`port` (TCP_NODELAY off), for benchmarks.
#[napi(catch_unwind, namespace = "testing")]
pub fn connect_port(env: Env, port: u32) -> Result<i32> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port as u16));
    let r = t::connect_to(addr, libc::SOCK_STREAM, None);
    raw_fd(r, &env, "testing.connectPort")
}

/// This thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`), for benchmarks that
/// price a call by the CPU it takes rather than by wall time (which, on a shared machine,
/// counts the time other processes ran).
#[napi(catch_unwind, namespace = "testing")]
pub fn thread_cpu_ns(env: Env) -> Result<f64> {
    Ok(t::thread_cpu()
        .or_throw(&env, "testing.threadCpuNs")?
        .as_nanos() as f64)
}

/// Per-iteration cost of a native loop.
#[napi(object, namespace = "testing")]
pub struct LoopCost {
    /// Wall time, ns.
    pub wall: f64,
    /// This thread's CPU time, ns.
    pub cpu: f64,
}

/// examples/node/peek_bench.c's loop, run natively inside this Node process: a core `Peeker`
/// (auto) over a duplicate of `fd`, `iters` x (seek to 0, peek `size` bytes) less the same loop
/// with the seeks alone. Against the C program it shows what being inside Node's process costs
/// a peek (a multi-threaded process, V8's cache footprint) apart from the call from JS.
#[napi(catch_unwind, namespace = "testing")]
pub fn peek_loop(env: Env, fd: i32, size: u32, iters: u32) -> Result<LoopCost> {
    let r = t::peek_loop_cost(borrow(fd), size as usize, iters);
    let (wall, cpu) = r.or_throw(&env, "testing.peekLoop")?;
    Ok(LoopCost { wall, cpu })
}

/// A blocking UDP socket connected to `host` (an IPv4 or IPv6 literal) port `port`, with
/// `SO_SNDBUF` `sndbuf` bytes if given (the C zc_bench sets 2 MiB), for the tx-only benchmark
/// (examples/node/bench.js, inside the network namespaces scripts/zc_bench.sh makes).
#[napi(catch_unwind, namespace = "testing")]
pub fn udp_connect(env: Env, host: String, port: u32, sndbuf: Option<u32>) -> Result<i32> {
    let bad = |_| {
        value_error(
            &env,
            format!("testing.udpConnect: not an IP literal: {host}"),
        )
    };
    let ip: IpAddr = host.parse().map_err(bad)?;
    let addr = SocketAddr::new(ip, port as u16);
    let sndbuf = sndbuf.map(|b| b.min(i32::MAX as u32) as i32);
    let r = t::connect_to(addr, libc::SOCK_DGRAM, sndbuf);
    raw_fd(r, &env, "testing.udpConnect")
}
