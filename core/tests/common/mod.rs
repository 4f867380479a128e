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
        _ => "E?",
    }
}
