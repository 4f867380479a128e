//! `testing.*`: socket fixtures for lowcopy's own test suite (node/test/), which runs the
//! behaviour tables of tests/scenarios/ the way the Rust and C runners do: connected pairs of
//! every transport, socket options read back, peer writers on their own threads (a blocking
//! call on the JS thread must still see bytes arrive). Not part of the API: names and shapes
//! may change with the tables. Descriptors returned here belong to the caller, who closes
//! them with `testing.close`.

use std::io::{Read, Write};
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;

use crate::error::{sys_error, value_error, OrThrow};
use crate::sys::{self, check};

/// Peer writers started by `spawnWriter` and not joined yet.
static WRITERS: Mutex<Vec<JoinHandle<std::result::Result<(), String>>>> = Mutex::new(Vec::new());

fn borrow(fd: i32) -> BorrowedFd<'static> {
    // SAFETY: test fixtures act on numbers the test owns (or on purpose on closed ones, which
    // the kernel answers with EBADF); no memory is reached through the number.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: called only on fresh fds returned by socket/accept/open.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn raw_socket(family: i32, ty: i32, proto: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = check(unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, proto) })?;
    Ok(owned(fd))
}

/// A sockaddr_storage for loopback of the family, port 0 (or `port`).
fn loopback(v6: bool, port: u16) -> (libc::sockaddr_storage, libc::socklen_t) {
    let ip = if v6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    sockaddr(ip, port)
}

fn sockaddr(ip: IpAddr, port: u16) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match ip {
        IpAddr::V6(ip) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            let a = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            a.sin6_family = libc::AF_INET6 as _;
            a.sin6_addr.s6_addr = ip.octets();
            a.sin6_port = port.to_be();
            size_of::<libc::sockaddr_in6>()
        }
        IpAddr::V4(ip) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let a = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            a.sin_family = libc::AF_INET as _;
            a.sin_addr.s_addr = u32::from(ip).to_be();
            a.sin_port = port.to_be();
            size_of::<libc::sockaddr_in>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn sockname(fd: BorrowedFd<'_>) -> std::io::Result<(libc::sockaddr_storage, libc::socklen_t)> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `ss` is live and `len` bytes long.
    check(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    Ok((ss, len))
}

/// Options of the TCP fixtures.
#[napi(object, namespace = "testing")]
pub struct TcpOpts {
    /// TCP_MAXSEG on the listener and the client, before connect.
    pub mss: Option<i32>,
    /// SO_RCVBUF (locked) on the listener, before the handshake.
    pub listener_rcvbuf: Option<i32>,
}

/// A listening loopback socket: `proto` 0 (TCP) or IPPROTO_MPTCP.
fn listener_raw(v6: bool, proto: i32, o: &TcpOpts) -> std::io::Result<OwnedFd> {
    let l = raw_socket(
        if v6 { libc::AF_INET6 } else { libc::AF_INET },
        libc::SOCK_STREAM,
        proto,
    )?;
    if let Some(m) = o.mss {
        sys::setsockopt_int(l.as_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m)?;
    }
    if let Some(b) = o.listener_rcvbuf {
        sys::setsockopt_int(l.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, b)?;
    }
    let (ss, len) = loopback(v6, 0);
    // SAFETY: `ss` holds `len` meaningful bytes.
    check(unsafe {
        libc::bind(
            l.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    // SAFETY: no pointers.
    check(unsafe { libc::listen(l.as_raw_fd(), 16) })?;
    Ok(l)
}

fn connect_raw(l: BorrowedFd<'_>, proto: i32, o: &TcpOpts) -> std::io::Result<OwnedFd> {
    let (ss, len) = sockname(l)?;
    let c = raw_socket(ss.ss_family as i32, libc::SOCK_STREAM, proto)?;
    if let Some(m) = o.mss {
        sys::setsockopt_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m)?;
    }
    if proto == 0 {
        sys::setsockopt_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    }
    // SAFETY: `ss` holds `len` meaningful bytes.
    check(unsafe {
        libc::connect(
            c.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    Ok(c)
}

fn accept_raw(l: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    // SAFETY: accept4 with NULL address is allowed.
    let s = check(unsafe {
        libc::accept4(
            l.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    })?;
    Ok(owned(s))
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
/// `unix` (socketpair); datagram pairs `udp4`, `udp6` (connected both ways) and
/// `udp4_unconnected` (`sock` not connected: sends name `peerPort`).
#[napi(catch_unwind, namespace = "testing")]
pub fn pair(env: Env, transport: String, opts: Option<TcpOpts>) -> Result<Pair> {
    let o = opts.unwrap_or(TcpOpts {
        mss: None,
        listener_rcvbuf: None,
    });
    let r = (|| -> std::io::Result<Pair> {
        let tcp = |v6: bool, proto: i32| -> std::io::Result<Pair> {
            let l = listener_raw(v6, proto, &o)?;
            let c = connect_raw(l.as_fd(), proto, &o)?;
            let s = accept_raw(l.as_fd())?;
            Ok(Pair {
                sock: s.into_raw_fd(),
                peer: c.into_raw_fd(),
                peer_port: None,
            })
        };
        match transport.as_str() {
            "tcp4" => tcp(false, 0),
            "tcp6" => tcp(true, 0),
            "mptcp4" => tcp(false, libc::IPPROTO_MPTCP),
            "unix" => {
                let mut sv = [0; 2];
                // SAFETY: `sv` has room for two fds.
                check(unsafe {
                    libc::socketpair(
                        libc::AF_UNIX,
                        libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                        0,
                        sv.as_mut_ptr(),
                    )
                })?;
                Ok(Pair {
                    sock: sv[0],
                    peer: sv[1],
                    peer_port: None,
                })
            }
            "udp4" | "udp6" | "udp4_unconnected" => {
                let v6 = transport == "udp6";
                let fam = if v6 { libc::AF_INET6 } else { libc::AF_INET };
                let (a, b) = (
                    raw_socket(fam, libc::SOCK_DGRAM, 0)?,
                    raw_socket(fam, libc::SOCK_DGRAM, 0)?,
                );
                for s in [&a, &b] {
                    let (ss, len) = loopback(v6, 0);
                    // SAFETY: `ss` holds `len` meaningful bytes.
                    check(unsafe {
                        libc::bind(
                            s.as_raw_fd(),
                            (&ss as *const libc::sockaddr_storage).cast(),
                            len,
                        )
                    })?;
                }
                let (sa, la) = sockname(a.as_fd())?;
                let (sb, lb) = sockname(b.as_fd())?;
                // SAFETY: ports sit at the same offset in sockaddr_in and sockaddr_in6.
                let port_b = u16::from_be(unsafe {
                    (*(&sb as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>()).sin_port
                });
                if transport != "udp4_unconnected" {
                    // SAFETY: addresses of `len` meaningful bytes.
                    check(unsafe {
                        libc::connect(
                            a.as_raw_fd(),
                            (&sb as *const libc::sockaddr_storage).cast(),
                            lb,
                        )
                    })?;
                }
                // SAFETY: as above.
                check(unsafe {
                    libc::connect(
                        b.as_raw_fd(),
                        (&sa as *const libc::sockaddr_storage).cast(),
                        la,
                    )
                })?;
                Ok(Pair {
                    sock: a.into_raw_fd(),
                    peer: b.into_raw_fd(),
                    peer_port: Some(port_b as u32),
                })
            }
            _ => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
        }
    })();
    r.or_throw(&env, "testing.pair")
}

/// A listening loopback TCP socket (`v6`), options applied before listen.
#[napi(catch_unwind, namespace = "testing")]
pub fn listener(env: Env, v6: bool, opts: Option<TcpOpts>) -> Result<i32> {
    let o = opts.unwrap_or(TcpOpts {
        mss: None,
        listener_rcvbuf: None,
    });
    Ok(listener_raw(v6, 0, &o)
        .or_throw(&env, "testing.listener")?
        .into_raw_fd())
}

/// A client connected to the listener `fd` (TCP_MAXSEG of `opts` before connect).
#[napi(catch_unwind, namespace = "testing")]
pub fn connect(env: Env, fd: i32, opts: Option<TcpOpts>) -> Result<i32> {
    let o = opts.unwrap_or(TcpOpts {
        mss: None,
        listener_rcvbuf: None,
    });
    Ok(connect_raw(borrow(fd), 0, &o)
        .or_throw(&env, "testing.connect")?
        .into_raw_fd())
}

/// `accept4` on the listener `fd`.
#[napi(catch_unwind, namespace = "testing")]
pub fn accept(env: Env, fd: i32) -> Result<i32> {
    Ok(accept_raw(borrow(fd))
        .or_throw(&env, "testing.accept")?
        .into_raw_fd())
}

/// An unconnected TCP/IPv4 socket.
#[napi(catch_unwind, namespace = "testing")]
pub fn tcp_socket(env: Env) -> Result<i32> {
    Ok(raw_socket(libc::AF_INET, libc::SOCK_STREAM, 0)
        .or_throw(&env, "testing.tcpSocket")?
        .into_raw_fd())
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
    // SAFETY: the test owns `fd`.
    check(unsafe { libc::close(fd) })
        .map(drop)
        .or_throw(&env, "testing.close")
}

fn opt_name(name: &str) -> Option<(i32, i32)> {
    Some(match name {
        "SO_RCVLOWAT" => (libc::SOL_SOCKET, libc::SO_RCVLOWAT),
        "SO_RCVBUF" => (libc::SOL_SOCKET, libc::SO_RCVBUF),
        "SO_SNDBUF" => (libc::SOL_SOCKET, libc::SO_SNDBUF),
        "SO_RCVBUFFORCE" => (libc::SOL_SOCKET, libc::SO_RCVBUFFORCE),
        "SO_SNDBUFFORCE" => (libc::SOL_SOCKET, libc::SO_SNDBUFFORCE),
        "SO_PEEK_OFF" => (libc::SOL_SOCKET, 42),
        "SO_ZEROCOPY" => (libc::SOL_SOCKET, libc::SO_ZEROCOPY),
        "SO_ERROR" => (libc::SOL_SOCKET, libc::SO_ERROR),
        "TCP_NODELAY" => (libc::IPPROTO_TCP, libc::TCP_NODELAY),
        _ => return None,
    })
}

/// getsockopt of the int option named `name` (`'SO_RCVLOWAT'`, `'SO_PEEK_OFF'`, ...).
#[napi(catch_unwind, namespace = "testing")]
pub fn getsockopt(env: Env, fd: i32, name: String) -> Result<i32> {
    let (l, n) =
        opt_name(&name).ok_or_else(|| value_error(&env, format!("unknown option {name}")))?;
    sys::getsockopt_int(borrow(fd), l, n).or_throw(&env, "testing.getsockopt")
}

/// setsockopt of the int option named `name`.
#[napi(catch_unwind, namespace = "testing")]
pub fn setsockopt(env: Env, fd: i32, name: String, value: i32) -> Result<()> {
    let (l, n) =
        opt_name(&name).ok_or_else(|| value_error(&env, format!("unknown option {name}")))?;
    sys::setsockopt_int(borrow(fd), l, n, value).or_throw(&env, "testing.setsockopt")
}

/// SO_RCVTIMEO in milliseconds (0: none).
#[napi(catch_unwind, namespace = "testing")]
pub fn set_rcvtimeo(env: Env, fd: i32, ms: u32) -> Result<()> {
    let d = Duration::from_millis(ms as u64);
    let tv = libc::timeval {
        tv_sec: d.as_secs() as _,
        tv_usec: d.subsec_micros() as _,
    };
    // SAFETY: `tv` is a live local of the stated size.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as _,
        )
    })
    .map(drop)
    .or_throw(&env, "testing.setRcvtimeo")
}

/// Sets O_NONBLOCK on the open file (shared by every duplicate).
#[napi(catch_unwind, namespace = "testing")]
pub fn set_nonblocking(env: Env, fd: i32) -> Result<()> {
    let r = (|| {
        // SAFETY: F_GETFL/F_SETFL take no pointers.
        let fl = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
        // SAFETY: as above.
        check(unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(drop)
    })();
    r.or_throw(&env, "testing.setNonblocking")
}

/// Bytes queued for reading (SIOCINQ).
#[napi(catch_unwind, namespace = "testing")]
pub fn inq(env: Env, fd: i32) -> Result<u32> {
    Ok(sys::inq(borrow(fd)).or_throw(&env, "testing.inq")? as u32)
}

/// Waits (sleeping 1 ms at a time, at most `timeoutMs`) until `bytes` are queued; throws
/// ETIMEDOUT otherwise.
#[napi(catch_unwind, namespace = "testing")]
pub fn wait_queued(env: Env, fd: i32, bytes: u32, timeout_ms: Option<u32>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.unwrap_or(5000) as u64);
    loop {
        let n = sys::inq(borrow(fd)).or_throw(&env, "testing.waitQueued")?;
        if n >= bytes as usize {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(sys_error(&env, libc::ETIMEDOUT, "testing.waitQueued"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn write_all(fd: BorrowedFd<'_>, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::from(fd.try_clone_to_owned()?);
    f.write_all(data)
}

/// Writes all of `data` to `fd` now (blocking).
#[napi(catch_unwind, namespace = "testing")]
pub fn write_all_sync(env: Env, fd: i32, data: &[u8]) -> Result<()> {
    write_all(borrow(fd), data).or_throw(&env, "testing.writeAllSync")
}

/// How a spawned writer sends.
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
    let dup = borrow(fd)
        .try_clone_to_owned()
        .or_throw(&env, "testing.spawnWriter")?;
    let data = data.to_vec();
    let o = opts.unwrap_or(WriterOpts {
        delay_ms: None,
        pieces: None,
        piece_ms: None,
        zerocopy_sizes: None,
        shutdown: None,
        after_others: None,
    });
    let before: Vec<_> = if o.after_others.unwrap_or(false) {
        std::mem::take(&mut *WRITERS.lock().unwrap_or_else(|p| p.into_inner()))
    } else {
        Vec::new()
    };
    let (delay, pieces, piece_ms) = (
        o.delay_ms.unwrap_or(0),
        o.pieces.unwrap_or(1).max(1),
        o.piece_ms.unwrap_or(0),
    );
    let zc = o.zerocopy_sizes;
    let shut = o.shutdown.unwrap_or(false);
    let h = std::thread::spawn(move || -> std::result::Result<(), String> {
        for b in before {
            b.join().unwrap_or_else(|_| Err("writer panicked".into()))?;
        }
        std::thread::sleep(Duration::from_millis(delay as u64));
        if let Some(sizes) = zc {
            send_zerocopy(dup.as_fd(), &data, &sizes).map_err(|e| format!("zerocopy send: {e}"))?;
        } else if !data.is_empty() {
            let chunk = data.len().div_ceil(pieces as usize);
            for c in data.chunks(chunk) {
                write_all(dup.as_fd(), c).map_err(|e| format!("write: {e}"))?;
                std::thread::sleep(Duration::from_millis(piece_ms as u64));
            }
        }
        if shut {
            // SAFETY: no pointers.
            check(unsafe { libc::shutdown(dup.as_raw_fd(), libc::SHUT_WR) })
                .map_err(|e| format!("shutdown: {e}"))?;
        }
        Ok(())
    });
    WRITERS.lock().unwrap_or_else(|p| p.into_inner()).push(h);
    Ok(())
}

/// Waits for every writer `spawnWriter` started; throws the first one's failure.
#[napi(catch_unwind, namespace = "testing")]
pub fn join_writers() -> Result<()> {
    let hs: Vec<_> = std::mem::take(&mut *WRITERS.lock().unwrap_or_else(|p| p.into_inner()));
    let mut first = None;
    for h in hs {
        let r = h.join().unwrap_or_else(|_| Err("writer panicked".into()));
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    match first {
        None => Ok(()),
        Some(e) => Err(Error::from_reason(e)),
    }
}

fn drain_errqueue(fd: BorrowedFd<'_>) {
    let mut control = [0u64; 16];
    loop {
        // SAFETY: all-zero is a valid msghdr; it points at a live control buffer only.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the msghdr describes live memory.
        if unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        } < 0
        {
            return;
        }
    }
}

/// MSG_ZEROCOPY sends from a page-aligned private copy (as core/tests/common `send_zerocopy`).
fn send_zerocopy(fd: BorrowedFd<'_>, data: &[u8], sizes: &[u32]) -> std::io::Result<()> {
    sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
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
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the mapping is `len >= data.len()` bytes long and writable.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base.cast::<u8>(), data.len()) };
    let (mut off, mut i) = (0usize, 0usize);
    let mut res = Ok(());
    while off < data.len() {
        let n = (sizes[i % sizes.len()] as usize).min(data.len() - off);
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
            let e = std::io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::EINTR)) {
                drain_errqueue(fd);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            res = Err(e);
            break;
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
    res
}

/// shutdown(SHUT_WR).
#[napi(catch_unwind, namespace = "testing")]
pub fn shutdown_write(env: Env, fd: i32) -> Result<()> {
    // SAFETY: no pointers.
    check(unsafe { libc::shutdown(fd, libc::SHUT_WR) })
        .map(drop)
        .or_throw(&env, "testing.shutdownWrite")
}

/// Closes `fd` with SO_LINGER 0: the peer gets a RST.
#[napi(catch_unwind, namespace = "testing")]
pub fn reset(env: Env, fd: i32) -> Result<()> {
    let lg = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `lg` is a live local of the stated size; then the test's own fd is closed.
    let r = check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&lg as *const libc::linger).cast(),
            size_of::<libc::linger>() as _,
        )
    })
    // SAFETY: the test owns `fd`.
    .and_then(|_| check(unsafe { libc::close(fd) }));
    r.map(drop).or_throw(&env, "testing.reset")
}

/// One read(2) of up to `len` bytes (blocking unless the fd is non-blocking).
#[napi(catch_unwind, namespace = "testing")]
pub fn read(env: Env, fd: i32, len: u32) -> Result<Buffer> {
    let mut f = std::fs::File::from(
        borrow(fd)
            .try_clone_to_owned()
            .or_throw(&env, "testing.read")?,
    );
    let mut b = vec![0u8; len as usize];
    let n = f.read(&mut b).or_throw(&env, "testing.read")?;
    b.truncate(n);
    Ok(b.into())
}

/// One recv(MSG_PEEK | MSG_DONTWAIT) of up to `len` bytes.
#[napi(catch_unwind, namespace = "testing")]
pub fn peek_raw(env: Env, fd: i32, len: u32) -> Result<Buffer> {
    let mut b = vec![0u8; len as usize];
    // SAFETY: `b` is writable for `len` bytes.
    let n = unsafe {
        libc::recv(
            fd,
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(sys_error(
            &env,
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
            "testing.peekRaw",
        ));
    }
    b.truncate(n as usize);
    Ok(b.into())
}

/// send(2) of each datagram in `list` (connected socket).
#[napi(catch_unwind, namespace = "testing")]
pub fn send_datagrams(env: Env, fd: i32, list: Vec<String>) -> Result<()> {
    for d in list {
        // SAFETY: `d` is readable for its length.
        let n = unsafe { libc::send(fd, d.as_ptr().cast(), d.len(), 0) };
        if n != d.len() as isize {
            return Err(sys_error(&env, libc::EIO, "testing.sendDatagrams"));
        }
    }
    Ok(())
}

/// A level-triggered epoll instance watching `fd` for EPOLLIN; returns its fd.
#[napi(catch_unwind, namespace = "testing")]
pub fn epoll_in(env: Env, fd: i32) -> Result<i32> {
    let r = (|| {
        // SAFETY: no pointers; the fd is owned right away.
        let ep = owned(check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?);
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: `ev` is a live epoll_event.
        check(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(ep.into_raw_fd())
    })();
    r.or_throw(&env, "testing.epollIn")
}

/// epoll_wait for one event, `ms` at most: whether one came.
#[napi(catch_unwind, namespace = "testing")]
pub fn epoll_wait(env: Env, epfd: i32, ms: i32) -> Result<bool> {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: room for one event.
    let n = unsafe { libc::epoll_wait(epfd, &mut ev, 1, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(false);
        }
        return Err(sys_error(
            &env,
            e.raw_os_error().unwrap_or(libc::EIO),
            "testing.epollWait",
        ));
    }
    Ok(n > 0)
}

/// Reads from `fd` until `bytes` arrived (SO_RCVTIMEO `timeoutMs` per read, EINTR retried) and
/// checks them against the test pattern from stream position `from`; returns the bytes read.
/// Throws on a short stream or a wrong byte.
#[napi(catch_unwind, namespace = "testing")]
pub fn drain_pattern(env: Env, fd: i32, from: f64, bytes: f64, timeout_ms: u32) -> Result<f64> {
    set_rcvtimeo(env, fd, timeout_ms)?;
    let (from, bytes) = (from as usize, bytes as usize);
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    while got < bytes {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len().min(bytes - got), 0) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            return Err(Error::from_reason(format!(
                "peer got {got} of {bytes} bytes ({})",
                if n == 0 {
                    "end of stream".to_string()
                } else {
                    std::io::Error::last_os_error().to_string()
                }
            )));
        }
        for (i, &b) in buf[..n as usize].iter().enumerate() {
            let p = from + got + i;
            if b != pattern_byte(p) {
                return Err(Error::from_reason(format!(
                    "wrong byte at stream position {p}"
                )));
            }
        }
        got += n as usize;
    }
    Ok(got as f64)
}

/// Byte at stream position `p` of the tables' test pattern: (p*131+7) % 251.
pub fn pattern_byte(p: usize) -> u8 {
    ((p as u64 * 131 + 7) % 251) as u8
}

/// `len` bytes of the test pattern from stream position `from`.
#[napi(catch_unwind, namespace = "testing")]
pub fn pattern(from: f64, len: u32) -> Buffer {
    let from = from as usize;
    (from..from + len as usize)
        .map(pattern_byte)
        .collect::<Vec<u8>>()
        .into()
}

/// Open descriptors of this process (entries of /proc/self/fd), for leak checks.
#[napi(catch_unwind, namespace = "testing")]
pub fn open_fds(env: Env) -> Result<u32> {
    // The thread's io_uring ring (and its eventfd) outlives the senders that used it: closed
    // here when none is left joined to it (EBUSY otherwise, and the count shows it).
    let _ = lowcopy::zc::close_thread_ring();
    let n = std::fs::read_dir("/proc/self/fd")
        .or_throw(&env, "testing.openFds")?
        .count();
    Ok(n as u32)
}

/// Whether `fd` is open (fcntl F_GETFD).
#[napi(catch_unwind, namespace = "testing")]
pub fn is_open(fd: i32) -> bool {
    // SAFETY: no pointers.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

fn wait_pollerr(fd: i32) -> std::io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = check(unsafe { libc::poll(&mut p, 1, 3000) })?;
    if n == 1 && p.revents & libc::POLLERR != 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT))
    }
}

/// Puts an entry on `fd`'s error queue by sending one byte to the peer: `'zerocopy'` (a
/// MSG_ZEROCOPY send: its notification), `'timestamp'` (SO_TIMESTAMPING software transmit
/// reports, left on), `'icmp'` (UDP: IP_RECVERR on, then one datagram to a peer the caller
/// closed first: ECONNREFUSED pending and an ICMP report queued). Returns once poll reports
/// POLLERR (3 s at most, else ETIMEDOUT).
#[napi(catch_unwind, namespace = "testing")]
pub fn errqueue_entry(env: Env, fd: i32, kind: String) -> Result<()> {
    let b = borrow(fd);
    let r = (|| {
        let flags = match kind.as_str() {
            "zerocopy" => {
                sys::setsockopt_int(b, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
                libc::MSG_ZEROCOPY
            }
            "timestamp" => {
                let v = libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
                sys::setsockopt_int(b, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, v as i32)?;
                0
            }
            "icmp" => {
                sys::setsockopt_int(b, libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
                0
            }
            _ => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
        };
        // SAFETY: one readable byte.
        let n = unsafe { libc::send(fd, b"e".as_ptr().cast(), 1, flags) };
        if n != 1 {
            return Err(std::io::Error::last_os_error());
        }
        wait_pollerr(fd)
    })();
    r.or_throw(&env, "testing.errqueueEntry")
}

/// CPU time this thread has used, in milliseconds (CLOCK_THREAD_CPUTIME_ID).
#[napi(catch_unwind, namespace = "testing")]
pub fn thread_cpu_ms() -> f64 {
    // SAFETY: all-zero is a valid timespec; clock_gettime writes one.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// `tcp_rmem[2] / 2`: the most SO_RCVLOWAT TCP keeps on an unlocked buffer.
#[napi(catch_unwind, namespace = "testing")]
pub fn rmem_cap(env: Env) -> Result<f64> {
    let s =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").or_throw(&env, "testing.rmemCap")?;
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
    let dup = borrow(fd)
        .try_clone_to_owned()
        .or_throw(&env, "testing.spawnReader")?;
    let h = std::thread::spawn(move || -> std::result::Result<f64, String> {
        std::thread::sleep(Duration::from_millis(delay_ms as u64));
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a live local of the stated size.
        unsafe {
            libc::setsockopt(
                dup.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as _,
            )
        };
        let (mut at, to) = (from as usize, to as usize);
        let mut buf = vec![0u8; 1 << 20];
        while at < to {
            let want = buf.len().min(to - at);
            // SAFETY: `buf` is writable for `want` bytes.
            let n = unsafe { libc::recv(dup.as_raw_fd(), buf.as_mut_ptr().cast(), want, 0) };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if n <= 0 {
                return Err(format!(
                    "peer read at {at} of {to}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            for (i, &b) in buf[..n as usize].iter().enumerate() {
                if b != pattern_byte(at + i) {
                    return Err(format!("wrong byte at {}", at + i));
                }
            }
            at += n as usize;
        }
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
    let mut last = -1.0;
    for h in hs {
        last = h
            .join()
            .unwrap_or_else(|_| Err("reader panicked".into()))
            .map_err(Error::from_reason)?;
    }
    Ok(last)
}

/// SO_TIMESTAMPING software transmit reports on (every later send queues one on the error
/// queue).
#[napi(catch_unwind, namespace = "testing")]
pub fn set_timestamping(env: Env, fd: i32) -> Result<()> {
    let v = libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
    sys::setsockopt_int(
        borrow(fd),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        v as i32,
    )
    .or_throw(&env, "testing.setTimestamping")
}

/// Waits (3 s at most, else ETIMEDOUT) until poll reports POLLERR on `fd`.
#[napi(catch_unwind, namespace = "testing", js_name = "waitPollerr")]
pub fn wait_pollerr_js(env: Env, fd: i32) -> Result<()> {
    wait_pollerr(fd).or_throw(&env, "testing.waitPollerr")
}

/// Panics inside an export: it must come back as a thrown Error, never abort the process.
#[napi(catch_unwind, namespace = "testing")]
pub fn panic() -> Result<()> {
    panic!("lowcopy testing.panic()")
}

/// A blocking TCP connection to 127.0.0.1:`port` (TCP_NODELAY off), for benchmarks.
#[napi(catch_unwind, namespace = "testing")]
pub fn connect_port(env: Env, port: u32) -> Result<i32> {
    let r = (|| {
        let c = raw_socket(libc::AF_INET, libc::SOCK_STREAM, 0)?;
        let (ss, len) = loopback(false, port as u16);
        // SAFETY: `ss` holds `len` meaningful bytes.
        check(unsafe {
            libc::connect(
                c.as_raw_fd(),
                (&ss as *const libc::sockaddr_storage).cast(),
                len,
            )
        })?;
        Ok(c.into_raw_fd())
    })();
    r.or_throw(&env, "testing.connectPort")
}

fn thread_cpu() -> std::io::Result<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    check(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) })?;
    Ok(ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64)
}

/// This thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`), for benchmarks that
/// price a call by the CPU it takes rather than by wall time (which, on a shared machine,
/// counts the time other processes ran).
#[napi(catch_unwind, namespace = "testing")]
pub fn thread_cpu_ns(env: Env) -> Result<f64> {
    thread_cpu().or_throw(&env, "testing.threadCpuNs")
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
    let r = (|| -> std::io::Result<LoopCost> {
        let mut p =
            lowcopy::Peeker::new(borrow(fd).try_clone_to_owned()?, lowcopy::PeekMode::Auto)?;
        let mut buf = vec![0u8; size as usize];
        for _ in 0..1000 {
            p.seek(0)?;
            p.peek(
                &mut [std::io::IoSliceMut::new(&mut buf)],
                lowcopy::Flags::NONE,
            )?;
        }
        let mut wall = [0f64; 2];
        let mut cpu = [0f64; 2];
        for (k, seek_only) in [false, true].into_iter().enumerate() {
            let w0 = Instant::now();
            let c0 = thread_cpu()?;
            for _ in 0..iters {
                p.seek(0)?;
                if !seek_only {
                    let n = p.peek(
                        &mut [std::io::IoSliceMut::new(&mut buf)],
                        lowcopy::Flags::NONE,
                    )?;
                    if n != size as usize {
                        return Err(std::io::Error::from_raw_os_error(libc::EIO));
                    }
                }
            }
            cpu[k] = thread_cpu()? - c0;
            wall[k] = w0.elapsed().as_nanos() as f64;
        }
        Ok(LoopCost {
            wall: (wall[0] - wall[1]) / iters as f64,
            cpu: (cpu[0] - cpu[1]) / iters as f64,
        })
    })();
    r.or_throw(&env, "testing.peekLoop")
}

/// A blocking UDP socket connected to `host` (an IPv4 or IPv6 literal) port `port`, with
/// `SO_SNDBUF` `sndbuf` bytes if given (the C zc_bench sets 2 MiB), for the tx-only benchmark
/// (examples/node/bench.js, inside the network namespaces scripts/zc_bench.sh makes).
#[napi(catch_unwind, namespace = "testing")]
pub fn udp_connect(env: Env, host: String, port: u32, sndbuf: Option<u32>) -> Result<i32> {
    let ip: IpAddr = host.parse().map_err(|_| {
        value_error(
            &env,
            format!("testing.udpConnect: not an IP literal: {host}"),
        )
    })?;
    let r = (|| {
        let fam = if ip.is_ipv6() {
            libc::AF_INET6
        } else {
            libc::AF_INET
        };
        let s = raw_socket(fam, libc::SOCK_DGRAM, 0)?;
        if let Some(b) = sndbuf {
            sys::setsockopt_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, b as i32)?;
        }
        let (ss, len) = sockaddr(ip, port as u16);
        // SAFETY: `ss` holds `len` meaningful bytes.
        check(unsafe {
            libc::connect(
                s.as_raw_fd(),
                (&ss as *const libc::sockaddr_storage).cast(),
                len,
            )
        })?;
        Ok(s.into_raw_fd())
    })();
    r.or_throw(&env, "testing.udpConnect")
}
