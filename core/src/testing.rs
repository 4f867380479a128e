//! Socket fixtures for lowcopy's own test suites (cargo feature `testing`, off by default):
//! the Rust integration tests (core/tests) and the Node package's `testing` export use these,
//! so that the socket calls a test makes live in this crate like every other syscall of the
//! project. Not part of the API: names and shapes follow the tests and may change with them.
//!
//! Every function returns the kernel's error as an [`io::Error`] keeping its errno; the
//! descriptors made here are close-on-exec and owned by the caller.

use std::fs::File;
use std::io::{self, Write};
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use libc::c_int;

use crate::sys::{cvt, cvt_size, errno};

/// A connected pair: `sock` is the socket under test, `peer` the other end.
#[derive(Debug)]
pub struct Pair {
    /// The socket under test (the accepted side of a TCP pair).
    pub sock: OwnedFd,
    /// The other end (the client of a TCP pair).
    pub peer: OwnedFd,
}

/// Options applied while a TCP pair is built.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpOpts {
    /// IPv6 loopback (`::1`) rather than 127.0.0.1.
    pub v6: bool,
    /// `IPPROTO_MPTCP` sockets (no `TCP_NODELAY` on the client).
    pub mptcp: bool,
    /// `TCP_MAXSEG` on the listener (inherited by the accepted socket) and on the client,
    /// before connect: 4108 makes loopback segments carry exactly one 4 KiB page.
    pub mss: Option<i32>,
    /// `SO_RCVLOWAT` on the listener, before accept.
    pub listener_lowat: Option<i32>,
    /// `SO_RCVBUF` (locked) on the listener, before the handshake.
    pub listener_rcvbuf: Option<i32>,
}

/// `socket(family, ty | SOCK_CLOEXEC, proto)`.
///
/// # Errors
/// The kernel's (`EAFNOSUPPORT`, `EPROTONOSUPPORT` for MPTCP where it is off, `EMFILE`...).
pub fn socket(family: c_int, ty: c_int, proto: c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; on success we own the new fd.
    let fd = cvt(unsafe { libc::socket(family, ty | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `sockaddr_storage` holding `addr`, and its length.
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr.ip() {
        IpAddr::V6(ip) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            let a = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            a.sin6_family = libc::AF_INET6 as _;
            a.sin6_addr.s6_addr = ip.octets();
            a.sin6_port = addr.port().to_be();
            size_of::<libc::sockaddr_in6>()
        }
        IpAddr::V4(ip) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let a = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            a.sin_family = libc::AF_INET as _;
            a.sin_addr.s_addr = u32::from(ip).to_be();
            a.sin_port = addr.port().to_be();
            size_of::<libc::sockaddr_in>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn loopback(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        (Ipv6Addr::LOCALHOST, port).into()
    } else {
        (Ipv4Addr::LOCALHOST, port).into()
    }
}

fn bind(fd: BorrowedFd<'_>, addr: SocketAddr) -> io::Result<()> {
    let (ss, len) = sockaddr(addr);
    // SAFETY: `ss` holds `len` meaningful bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })
    .map(drop)
}

/// `connect(fd, addr)`.
///
/// # Errors
/// The kernel's (`ECONNREFUSED`, `EAFNOSUPPORT` for the wrong family...).
pub fn connect(fd: BorrowedFd<'_>, addr: SocketAddr) -> io::Result<()> {
    let (ss, len) = sockaddr(addr);
    // SAFETY: `ss` holds `len` meaningful bytes.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })
    .map(drop)
}

/// The address `fd` is bound to (`getsockname`).
///
/// # Errors
/// `EBADF`, `ENOTSOCK`; `EAFNOSUPPORT` for a socket that is neither IPv4 nor IPv6.
pub fn local_addr(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `ss` is live and `len` bytes long.
    cvt(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    match ss.ss_family as c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family checked).
            let a = unsafe { *(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Ok((ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 (family checked).
            let a = unsafe { *(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Ok((ip, u16::from_be(a.sin6_port)).into())
        }
        _ => Err(errno(libc::EAFNOSUPPORT)),
    }
}

/// A listening loopback TCP (or MPTCP) socket, port chosen by the kernel, with the listener
/// options of `o` applied before `listen(16)`.
///
/// # Errors
/// From `socket`, `setsockopt`, `bind`, `listen`.
pub fn tcp_listener(o: &TcpOpts) -> io::Result<OwnedFd> {
    let family = if o.v6 { libc::AF_INET6 } else { libc::AF_INET };
    let proto = if o.mptcp { libc::IPPROTO_MPTCP } else { 0 };
    let l = socket(family, libc::SOCK_STREAM, proto)?;
    if let Some(m) = o.mss {
        set_int(l.as_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m)?;
    }
    if let Some(v) = o.listener_lowat {
        set_int(l.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)?;
    }
    if let Some(v) = o.listener_rcvbuf {
        set_int(l.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, v)?;
    }
    bind(l.as_fd(), loopback(o.v6, 0))?;
    // SAFETY: listen takes no pointers.
    cvt(unsafe { libc::listen(l.as_raw_fd(), 16) })?;
    Ok(l)
}

/// A client connected to the listener `l` (blocking connect; `TCP_MAXSEG` of `o` first, and
/// `TCP_NODELAY` unless MPTCP). The connection waits in `l`'s accept queue.
///
/// # Errors
/// From `getsockname` on `l`, `socket`, `setsockopt`, `connect`.
pub fn tcp_connect(l: BorrowedFd<'_>, o: &TcpOpts) -> io::Result<OwnedFd> {
    let addr = local_addr(l)?;
    let family = if addr.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    let proto = if o.mptcp { libc::IPPROTO_MPTCP } else { 0 };
    let c = socket(family, libc::SOCK_STREAM, proto)?;
    if let Some(m) = o.mss {
        set_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m)?;
    }
    if !o.mptcp {
        set_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    }
    connect(c.as_fd(), addr)?;
    Ok(c)
}

/// `accept4(l, NULL, NULL, SOCK_CLOEXEC)`.
///
/// # Errors
/// The kernel's (`EAGAIN` on a non-blocking listener with nothing queued, `EINVAL` when `l`
/// is not listening...).
pub fn accept(l: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: accept4 with NULL address pointers is allowed.
    let s = cvt(unsafe {
        libc::accept4(
            l.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: `s` was just returned by accept4 and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(s) })
}

/// A loopback TCP pair built with `o` (listener closed again): `sock` is the accepted side,
/// `peer` the client.
///
/// # Errors
/// As [`tcp_listener`], [`tcp_connect`], [`accept`].
pub fn tcp_pair(o: &TcpOpts) -> io::Result<Pair> {
    let l = tcp_listener(o)?;
    let peer = tcp_connect(l.as_fd(), o)?;
    let sock = accept(l.as_fd())?;
    Ok(Pair { sock, peer })
}

/// Two UDP sockets bound to loopback ports, `peer` connected to `sock`, and `sock` connected
/// to `peer` when `connect_sock`; returns the pair and `peer`'s port.
///
/// # Errors
/// From `socket`, `bind`, `connect`.
pub fn udp_pair(v6: bool, connect_sock: bool) -> io::Result<(Pair, u16)> {
    let a = UdpSocket::bind(loopback(v6, 0))?;
    let b = UdpSocket::bind(loopback(v6, 0))?;
    let pb = b.local_addr()?;
    if connect_sock {
        a.connect(pb)?;
    }
    b.connect(a.local_addr()?)?;
    let pair = Pair {
        sock: a.into(),
        peer: b.into(),
    };
    Ok((pair, pb.port()))
}

/// A connected pair of the named transport: `tcp4`, `tcp6`, `mptcp4` (loopback, `sock` the
/// accepted side, client `TCP_NODELAY` except MPTCP), `unix` (stream `socketpair`),
/// `unix_dgram` (datagram `socketpair`), `udp4`, `udp6` (connected both ways).
///
/// # Errors
/// `EINVAL` for another name; the fixtures' errors.
pub fn pair(transport: &str) -> io::Result<Pair> {
    let tcp = |v6, mptcp| {
        tcp_pair(&TcpOpts {
            v6,
            mptcp,
            ..TcpOpts::default()
        })
    };
    match transport {
        "tcp4" => tcp(false, false),
        "tcp6" => tcp(true, false),
        "mptcp4" => tcp(false, true),
        "unix" => {
            let (a, b) = UnixStream::pair()?;
            Ok(Pair {
                sock: a.into(),
                peer: b.into(),
            })
        }
        "unix_dgram" => {
            let (a, b) = std::os::unix::net::UnixDatagram::pair()?;
            Ok(Pair {
                sock: a.into(),
                peer: b.into(),
            })
        }
        "udp4" => udp_pair(false, true).map(|p| p.0),
        "udp6" => udp_pair(true, true).map(|p| p.0),
        _ => Err(errno(libc::EINVAL)),
    }
}

/// A listening socket of the named family: `tcp4`, `tcp6`, `mptcp4` (loopback, port chosen by
/// the kernel), `unix` (bound to an abstract address of its own).
///
/// # Errors
/// `EINVAL` for another name; the fixtures' errors.
pub fn listening(transport: &str) -> io::Result<OwnedFd> {
    let tcp = |v6, mptcp| {
        tcp_listener(&TcpOpts {
            v6,
            mptcp,
            ..TcpOpts::default()
        })
    };
    match transport {
        "tcp4" => tcp(false, false),
        "tcp6" => tcp(true, false),
        "mptcp4" => tcp(false, true),
        "unix" => {
            use std::os::linux::net::SocketAddrExt;
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let name = format!(
                "lowcopy-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            );
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            Ok(std::os::unix::net::UnixListener::bind_addr(&addr)?.into())
        }
        _ => Err(errno(libc::EINVAL)),
    }
}

/// `send(fd, data, MSG_OOB)`: TCP urgent data; its last byte is the urgent byte. Returns the
/// bytes sent.
///
/// # Errors
/// The kernel's (`EOPNOTSUPP` on AF_UNIX stream sockets).
pub fn send_oob(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    // SAFETY: a live buffer of its length.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_OOB,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Whether an urgent byte is there to read (`poll` for `POLLPRI`), waiting at most `ms`.
///
/// # Errors
/// `poll`'s.
pub fn wait_urgent(fd: BorrowedFd<'_>, ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n == 1 && pfd.revents & libc::POLLPRI != 0)
}

/// `recv(fd, 1 byte, MSG_OOB)`: the urgent byte (`EINVAL` when there is none, or it was
/// read already; `EAGAIN` while it has not arrived).
///
/// # Errors
/// The kernel's.
pub fn recv_oob(fd: BorrowedFd<'_>) -> io::Result<u8> {
    let mut b = 0u8;
    // SAFETY: a live one-byte buffer.
    let n = unsafe { libc::recv(fd.as_raw_fd(), (&mut b as *mut u8).cast(), 1, libc::MSG_OOB) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(b)
}

/// Sends `data` on the AF_UNIX socket `fd` in one `sendmsg` with `count` copies of the
/// descriptor `pass` in an `SCM_RIGHTS` message (at most 253, the kernel's `SCM_MAX_FD`): the
/// receiver gets `count` new descriptors of the same file. Returns the bytes sent.
///
/// # Errors
/// `EINVAL` for `count` 0 or above 253; the kernel's (`EPERM` where the receiver refuses
/// descriptors, `ETOOMANYREFS`...).
pub fn send_fds(
    fd: BorrowedFd<'_>,
    data: &[u8],
    pass: BorrowedFd<'_>,
    count: usize,
) -> io::Result<usize> {
    if count == 0 || count > 253 {
        return Err(errno(libc::EINVAL));
    }
    let fds = vec![pass.as_raw_fd(); count];
    let bytes = count * size_of::<c_int>();
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer is `space` bytes, room for one cmsg of `bytes` data.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<c_int>(), count);
    }
    // SAFETY: the msghdr describes live memory: `data` (read only) and the control buffer.
    cvt_size(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) })
}

/// Descriptors open in this process (entries of /proc/self/fd, the listing's own included:
/// the same one every time).
///
/// # Errors
/// From reading the directory.
pub fn open_fd_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count())
}

/// A socket of type `ty` (`SOCK_STREAM`, `SOCK_DGRAM`) connected to `addr`, with
/// `SO_SNDBUF` `sndbuf` set first when given.
///
/// # Errors
/// From `socket`, `setsockopt`, `connect`.
pub fn connect_to(addr: SocketAddr, ty: c_int, sndbuf: Option<i32>) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    let s = socket(family, ty, 0)?;
    if let Some(b) = sndbuf {
        set_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, b)?;
    }
    connect(s.as_fd(), addr)?;
    Ok(s)
}

/// `getsockopt` of an int option.
///
/// # Errors
/// The kernel's (`ENOPROTOOPT`, `EBADF`, `ENOTSOCK`...).
pub fn get_int(fd: BorrowedFd<'_>, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut v: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live locals of the sizes the kernel is told.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut c_int).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// `setsockopt` of an int option.
///
/// # Errors
/// The kernel's (`EINVAL`, `ENOPROTOOPT`, `EPERM` for the `*FORCE` options without
/// `CAP_NET_ADMIN`...).
pub fn set_int(fd: BorrowedFd<'_>, level: c_int, name: c_int, v: c_int) -> io::Result<()> {
    // SAFETY: the kernel reads exactly size_of::<c_int>() bytes from a live local.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const c_int).cast(),
            size_of::<c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `setsockopt(SOL_SOCKET, name)` of a `struct timeval` (`SO_RCVTIMEO`, `SO_SNDTIMEO`; zero
/// means no limit).
///
/// # Errors
/// The kernel's (`EDOM` beyond its range, `EBADF`, `ENOTSOCK`).
pub fn set_timeval(fd: BorrowedFd<'_>, name: c_int, d: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_usec: d.subsec_micros() as _,
    };
    // SAFETY: the kernel reads one timeval from a live local.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Sets `O_NONBLOCK` on the open file description (shared by every duplicate of `fd`).
///
/// # Errors
/// `EBADF`.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL takes no pointer argument.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: F_SETFL takes an int.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(drop)
}

/// Bytes queued for reading (`SIOCINQ`).
///
/// # Errors
/// `EBADF`; `ENOTTY`/`EINVAL` for a descriptor without a receive queue.
pub fn inq(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: SIOCINQ writes one int into a live local.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n.max(0) as usize)
}

/// Waits, sleeping 1 ms at a time, until at least `bytes` are queued on `fd`.
///
/// # Errors
/// `ETIMEDOUT` when fewer are queued after `timeout`; [`inq`]'s errors.
pub fn wait_queued(fd: BorrowedFd<'_>, bytes: usize, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    while inq(fd)? < bytes {
        if Instant::now() >= deadline {
            return Err(errno(libc::ETIMEDOUT));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Writes all of `data` to `fd` (through a duplicate; blocking unless `fd` is non-blocking).
///
/// # Errors
/// The write's (`EPIPE`, `EAGAIN` on a non-blocking socket that is full...).
pub fn write_all(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<()> {
    File::from(fd.try_clone_to_owned()?).write_all(data)
}

/// `shutdown(fd, SHUT_WR)`.
///
/// # Errors
/// `ENOTCONN`, `EBADF`, `ENOTSOCK`.
pub fn shutdown_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown takes no pointers.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) }).map(drop)
}

/// `SO_LINGER` 0 on: closing the socket then sends a RST to a TCP peer.
///
/// # Errors
/// From `setsockopt` (`EBADF`, `ENOTSOCK`).
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> io::Result<()> {
    let lg = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the kernel reads one linger from a live local.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&lg as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Closes `fd` with `SO_LINGER` 0: the peer of a TCP socket gets a RST. The descriptor is
/// closed even when the option cannot be set.
///
/// # Errors
/// From [`set_linger_zero`].
pub fn reset(fd: OwnedFd) -> io::Result<()> {
    set_linger_zero(fd.as_fd())
}

/// `close(fd)` of a bare number (a test's own descriptor).
///
/// # Errors
/// `EBADF` when `fd` is not open.
pub fn close(fd: RawFd) -> io::Result<()> {
    // SAFETY: close takes no pointers; the number is the caller's to give up (a number that
    // is not open is answered with EBADF).
    cvt(unsafe { libc::close(fd) }).map(drop)
}

/// Whether the number `fd` is an open descriptor (`fcntl(F_GETFD)`).
pub fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD takes no pointers.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// `recv(fd, buf, flags)`.
///
/// # Errors
/// The kernel's (`EAGAIN`, `EINTR`, `ECONNRESET`...).
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], flags: c_int) -> io::Result<usize> {
    // SAFETY: `buf` is writable for its length.
    cvt_size(unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) })
}

/// `send(fd, buf, flags)`.
///
/// # Errors
/// The kernel's (`EAGAIN`, `EPIPE`, `EMSGSIZE`...).
pub fn send(fd: BorrowedFd<'_>, buf: &[u8], flags: c_int) -> io::Result<usize> {
    // SAFETY: `buf` is readable for its length.
    cvt_size(unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) })
}

/// Byte `p` of the tests' stream pattern: `(p * 131 + 7) % 251` (251 is prime, so no
/// power-of-two shift lines it up with itself).
pub fn pattern_byte(p: usize) -> u8 {
    ((p as u64 * 131 + 7) % 251) as u8
}

/// Receives stream positions `from..to` of the pattern from `fd` (retrying `EINTR`, in reads
/// of up to 1 MiB), checking every byte.
///
/// # Errors
/// What went wrong, with the position: an end of stream or a receive error (`SO_RCVTIMEO`
/// running out is `EAGAIN`) before `to`, or the first wrong byte.
pub fn read_pattern(fd: BorrowedFd<'_>, from: usize, to: usize) -> Result<(), String> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let want = buf.len().min(to - at);
        let n = match recv(fd, &mut buf[..want], 0) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Ok(0) => {
                return Err(format!(
                    "got {} of {} bytes (end of stream)",
                    at - from,
                    to - from
                ))
            }
            Err(e) => return Err(format!("got {} of {} bytes ({e})", at - from, to - from)),
            Ok(n) => n,
        };
        if let Some(i) = (0..n).find(|&i| buf[i] != pattern_byte(at + i)) {
            return Err(format!("wrong byte at stream position {}", at + i));
        }
        at += n;
    }
    Ok(())
}

/// Reads and discards whatever the error queue holds (never blocks).
pub fn drain_errqueue(fd: BorrowedFd<'_>) {
    let mut control = [0u64; 16];
    loop {
        // SAFETY: all-zero is a valid msghdr; it points at a live control buffer only.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let flags = libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT;
        // SAFETY: the msghdr describes live memory.
        if unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) } < 0 {
            return;
        }
    }
}

/// A private anonymous mapping, unmapped on drop.
struct Mapping {
    base: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping; nothing references it any more (the kernel holds its own
        // page references for zerocopy data in flight).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Sends `data` with `MSG_ZEROCOPY` (`SO_ZEROCOPY` set first) from a page-aligned private
/// copy, in sends whose sizes cycle through `sizes` (a size that is not a page multiple
/// shifts later sends off page alignment, which is what makes stragglers). Blocking unless
/// `fd` is non-blocking; drains the error queue as it goes, and retries after `ENOBUFS` and
/// `EINTR`.
///
/// # Errors
/// `EINVAL` for empty `sizes` or a zero size; `ENOMEM` from `mmap`; the sends' other errors.
pub fn send_zerocopy(fd: BorrowedFd<'_>, data: &[u8], sizes: &[usize]) -> io::Result<()> {
    if sizes.is_empty() || sizes.contains(&0) {
        return Err(errno(libc::EINVAL));
    }
    set_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
    let len = data.len().max(1).next_multiple_of(4096);
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: a new private anonymous mapping chosen by the kernel: it aliases nothing.
    let base = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let map = Mapping { base, len };
    // SAFETY: the mapping is `len >= data.len()` bytes long and writable.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), map.base.cast::<u8>(), data.len()) };
    let (mut off, mut i) = (0usize, 0usize);
    while off < data.len() {
        let n = sizes[i % sizes.len()].min(data.len() - off);
        // SAFETY: `base + off .. + n` lies in the mapping.
        let r = unsafe {
            libc::send(
                fd.as_raw_fd(),
                map.base.cast::<u8>().add(off).cast(),
                n,
                libc::MSG_ZEROCOPY,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if matches!(e.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::EINTR)) {
                drain_errqueue(fd);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            drain_errqueue(fd);
            return Err(e);
        }
        off += r as usize;
        i += 1;
        if i % 16 == 0 {
            drain_errqueue(fd);
        }
    }
    drain_errqueue(fd);
    Ok(())
}

/// Waits until `poll` reports `POLLERR` on `fd` (an error-queue entry or a socket error).
///
/// # Errors
/// `ETIMEDOUT` when none came within `timeout`; `poll`'s errors (`EINTR`).
pub fn wait_pollerr(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    let ms = timeout.as_millis().min(c_int::MAX as u128) as c_int;
    // SAFETY: one live pollfd.
    let n = cvt(unsafe { libc::poll(&mut p, 1, ms) })?;
    if n == 1 && p.revents & libc::POLLERR != 0 {
        Ok(())
    } else {
        Err(errno(libc::ETIMEDOUT))
    }
}

/// `SO_TIMESTAMPING` software transmit reports on: every later send queues one on the error
/// queue.
///
/// # Errors
/// From `setsockopt`.
pub fn set_timestamping(fd: BorrowedFd<'_>) -> io::Result<()> {
    let v = libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
    set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, v as c_int)
}

/// Puts an entry on `fd`'s error queue the way an application would, by sending one byte to
/// the peer: `zerocopy` (a `MSG_ZEROCOPY` send: its notification), `timestamp`
/// (`SO_TIMESTAMPING` software transmit reports, left on, so every later send adds one),
/// `icmp` (UDP: `IP_RECVERR` on, then one datagram to a peer the caller closed first:
/// `ECONNREFUSED` pending and an ICMP report queued). Returns once poll reports `POLLERR`
/// (3 s at most).
///
/// # Errors
/// `EINVAL` for another kind; `ETIMEDOUT` when no `POLLERR` came; the calls' errors.
pub fn errqueue_entry(fd: BorrowedFd<'_>, kind: &str) -> io::Result<()> {
    let flags = match kind {
        "zerocopy" => {
            set_int(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
            libc::MSG_ZEROCOPY
        }
        "timestamp" => {
            set_timestamping(fd)?;
            0
        }
        "icmp" => {
            set_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
            0
        }
        _ => return Err(errno(libc::EINVAL)),
    };
    if send(fd, b"e", flags)? != 1 {
        return Err(errno(libc::EIO));
    }
    wait_pollerr(fd, Duration::from_secs(3))
}

/// A level-triggered epoll instance watching `fd` for `EPOLLIN`.
///
/// # Errors
/// From `epoll_create1`, `epoll_ctl` (`EPERM` for a regular file, `EBADF`).
pub fn epoll_in(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers; on success we own the new fd.
    let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: `ep` was just returned by epoll_create1 and is owned by nobody else.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    let op = libc::EPOLL_CTL_ADD;
    // SAFETY: one live epoll_event, read during the call only.
    cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) })?;
    Ok(ep)
}

/// `epoll_wait` for one event, `ms` at most (-1: no limit): whether one came.
///
/// # Errors
/// `EINTR` on a signal; `EBADF`, `EINVAL` for a descriptor that is not an epoll instance.
pub fn epoll_wait(ep: BorrowedFd<'_>, ms: c_int) -> io::Result<bool> {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: room for the one event the kernel is told it may write.
    let n = cvt(unsafe { libc::epoll_wait(ep.as_raw_fd(), &mut ev, 1, ms) })?;
    Ok(n > 0)
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): a call that sleeps uses
/// almost none, one that spins about its wall time.
///
/// # Errors
/// From `clock_gettime` (none on Linux).
pub fn thread_cpu() -> io::Result<Duration> {
    // SAFETY: all-zero is a valid timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes one timespec into a live local.
    cvt(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) })?;
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// How a test peer writes (`write_as`): after `delay`, `data` in `pieces` writes `gap` apart,
/// or with `MSG_ZEROCOPY` in sends of `zerocopy_sizes` (cycling); then `shutdown` of the write
/// side.
#[derive(Clone, Debug, Default)]
pub struct Writer {
    /// Before the first write.
    pub delay: Duration,
    /// Writes the data is split into (0 counts as 1).
    pub pieces: usize,
    /// After each write.
    pub gap: Duration,
    /// `MSG_ZEROCOPY` sends of these sizes (from page-aligned memory) instead of writes.
    pub zerocopy_sizes: Option<Vec<usize>>,
    /// Shut the write side down after the data.
    pub shutdown: bool,
}

/// Writes `data` to `fd` as `w` says, on the calling thread.
///
/// # Errors
/// The first write, zerocopy send or shutdown that failed, named with its errno.
pub fn write_as(fd: BorrowedFd<'_>, data: &[u8], w: &Writer) -> Result<(), String> {
    std::thread::sleep(w.delay);
    if let Some(sizes) = &w.zerocopy_sizes {
        send_zerocopy(fd, data, sizes).map_err(|e| format!("zerocopy send: {e}"))?;
    } else if !data.is_empty() {
        for c in data.chunks(data.len().div_ceil(w.pieces.max(1))) {
            write_all(fd, c).map_err(|e| format!("write: {e}"))?;
            std::thread::sleep(w.gap);
        }
    }
    if w.shutdown {
        shutdown_write(fd).map_err(|e| format!("shutdown: {e}"))?;
    }
    Ok(())
}

/// What one (seek 0, peek `size` bytes) costs on a peeker over a duplicate of `fd` (a stream
/// with at least `size` bytes queued), less the seek alone, per iteration of `iters` (after
/// 1,000 to warm up): (wall ns, this thread's CPU ns).
///
/// # Errors
/// `EIO` if a peek comes back short; the peeker's and the peeks' errors.
pub fn peek_loop_cost(fd: BorrowedFd<'_>, size: usize, iters: u32) -> io::Result<(f64, f64)> {
    let mut p = crate::Peeker::new(fd.try_clone_to_owned()?, crate::PeekMode::Auto)?;
    let mut buf = vec![0u8; size];
    let mut round = |n: u32, peek: bool| -> io::Result<(f64, f64)> {
        let (w0, c0) = (Instant::now(), thread_cpu()?);
        for _ in 0..n {
            p.seek(0)?;
            if peek && p.peek(&mut [io::IoSliceMut::new(&mut buf)], crate::Flags::NONE)? != size {
                return Err(errno(libc::EIO));
            }
        }
        let cpu = (thread_cpu()? - c0).as_nanos() as f64;
        Ok((w0.elapsed().as_nanos() as f64, cpu))
    };
    round(1000, true)?;
    let (w1, c1) = round(iters, true)?;
    let (w2, c2) = round(iters, false)?;
    Ok(((w1 - w2) / iters as f64, (c1 - c2) / iters as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_as_writes_every_byte_in_pieces_then_shuts_down() {
        let p = pair("unix").unwrap();
        let data: Vec<u8> = (0..10_000).map(pattern_byte).collect();
        let w = Writer {
            pieces: 3,
            shutdown: true,
            ..Writer::default()
        };
        write_as(p.peer.as_fd(), &data, &w).unwrap();
        read_pattern(p.sock.as_fd(), 0, data.len()).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(
            recv(p.sock.as_fd(), &mut b, 0).unwrap(),
            0,
            "end of stream after the data"
        );
    }

    #[test]
    fn peek_loop_cost_peeks_and_refuses_a_short_queue() {
        let p = pair("tcp4").unwrap();
        write_all(p.peer.as_fd(), &[7u8; 4096]).unwrap();
        wait_queued(p.sock.as_fd(), 4096, Duration::from_secs(3)).unwrap();
        let (wall, cpu) = peek_loop_cost(p.sock.as_fd(), 4096, 100).unwrap();
        assert!(wall.is_finite() && cpu.is_finite());
        let e = peek_loop_cost(p.sock.as_fd(), 8192, 10).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn pairs_carry_bytes() {
        for t in ["tcp4", "tcp6", "unix", "udp4", "udp6"] {
            let p = pair(t).unwrap();
            assert_eq!(send(p.peer.as_fd(), b"hi", 0).unwrap(), 2, "{t}");
            wait_queued(p.sock.as_fd(), 2, Duration::from_secs(5)).unwrap();
            let mut b = [0u8; 4];
            assert_eq!(recv(p.sock.as_fd(), &mut b, 0).unwrap(), 2, "{t}");
            assert_eq!(&b[..2], b"hi");
        }
        assert_eq!(pair("sctp").unwrap_err().raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn options_and_errors() {
        let p = pair("tcp4").unwrap();
        assert_eq!(
            get_int(p.peer.as_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY).unwrap(),
            1
        );
        set_int(p.sock.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, 7).unwrap();
        let lowat = get_int(p.sock.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap();
        assert_eq!(lowat, 7);
        set_nonblocking(p.sock.as_fd()).unwrap();
        let mut b = [0u8; 1];
        let e = recv(p.sock.as_fd(), &mut b, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        let e = wait_queued(p.sock.as_fd(), 1, Duration::from_millis(5)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
        assert_eq!(
            close(1 << 20).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        assert!(!is_open(1 << 20));
        assert!(is_open(p.sock.as_raw_fd()));
    }

    #[test]
    fn read_pattern_checks_every_byte() {
        let p = pair("unix").unwrap();
        let data: Vec<u8> = (10..3000).map(pattern_byte).collect();
        write_all(p.peer.as_fd(), &data).unwrap();
        read_pattern(p.sock.as_fd(), 10, 1000).unwrap();
        write_all(p.peer.as_fd(), &[pattern_byte(3000) ^ 1]).unwrap();
        let e = read_pattern(p.sock.as_fd(), 1000, 3001).unwrap_err();
        assert_eq!(e, "wrong byte at stream position 3000");
        shutdown_write(p.peer.as_fd()).unwrap();
        let e = read_pattern(p.sock.as_fd(), 3001, 3002).unwrap_err();
        assert_eq!(e, "got 0 of 1 bytes (end of stream)");
    }

    #[test]
    fn zerocopy_send_arrives_and_queues_nothing() {
        let p = pair("tcp4").unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        send_zerocopy(p.peer.as_fd(), &data, &[4096, 1000]).unwrap();
        let mut got = vec![0u8; data.len()];
        let mut at = 0;
        set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(5)).unwrap();
        while at < got.len() {
            let n = recv(p.sock.as_fd(), &mut got[at..], 0).unwrap();
            assert!(n > 0);
            at += n;
        }
        assert_eq!(got, data);
        let e = send_zerocopy(p.peer.as_fd(), &data, &[]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
