//! Thin wrappers over the socket syscalls lowcopy makes.
//!
//! Every `unsafe` block of the crate that calls into libc lives here; each wrapper turns
//! `-1/errno` into an [`io::Error`] that keeps the errno, so callers above are safe code.

use std::cell::UnsafeCell;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

use libc::{c_int, c_void, iovec, socklen_t};

/// `SO_PEEK_OFF` (include/uapi/asm-generic/socket.h).
pub const SO_PEEK_OFF: c_int = 42;
/// `IOV_MAX` / `UIO_MAXIOV`: the most iovecs one `recvmsg` takes (include/uapi/linux/uio.h).
pub const IOV_MAX: usize = 1024;
/// `TCP_ZEROCOPY_RECEIVE` (include/uapi/linux/tcp.h, 4.18).
pub const TCP_ZEROCOPY_RECEIVE: c_int = 35;

pub fn errno(code: c_int) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn cvt(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_size(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

pub fn getsockopt_int(fd: BorrowedFd<'_>, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut val: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: `val` and `len` are live locals of the sizes the kernel is told.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut val as *mut c_int).cast(),
            &mut len,
        )
    };
    cvt(ret).map(|_| val)
}

pub fn setsockopt_int(fd: BorrowedFd<'_>, level: c_int, name: c_int, val: c_int) -> io::Result<()> {
    // SAFETY: the kernel reads exactly size_of::<c_int>() bytes from a live local.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&val as *const c_int).cast(),
            size_of::<c_int>() as socklen_t,
        )
    };
    cvt(ret).map(drop)
}

/// `getsockopt` into a caller-provided byte buffer; returns the length the kernel wrote.
pub fn getsockopt_bytes(
    fd: BorrowedFd<'_>,
    level: c_int,
    name: c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = buf.len() as socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf`, which is that long.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    cvt(ret).map(|_| len as usize)
}

/// `recvmsg` with only an iovec array (no address, no control data).
///
/// # Safety
/// Every iovec must describe memory that is valid for writes of its length for the
/// duration of the call.
pub unsafe fn recvmsg_iov(fd: BorrowedFd<'_>, iov: &[iovec], flags: c_int) -> io::Result<usize> {
    // SAFETY: all-zero is a valid msghdr (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: msghdr points at `iov`, whose buffers the caller vouches for.
    cvt_size(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) })
}

/// `recv(fd, NULL, n, flags | MSG_TRUNC)`: drops up to `n` bytes (TCP, MPTCP) without copying.
pub fn recv_trunc(fd: BorrowedFd<'_>, n: usize, flags: c_int) -> io::Result<usize> {
    // SAFETY: with MSG_TRUNC on TCP the kernel skips the copy and never touches the NULL buffer
    // (net/ipv4/tcp.c tcp_recvmsg_locked: `if (!(flags & MSG_TRUNC))` guards the copy).
    cvt_size(unsafe { libc::recv(fd.as_raw_fd(), ptr::null_mut(), n, flags | libc::MSG_TRUNC) })
}

/// `poll` on one fd; returns the revents.
pub fn poll_one(fd: BorrowedFd<'_>, events: i16, timeout_ms: c_int) -> io::Result<i16> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    cvt(unsafe { libc::poll(&mut pfd, 1, timeout_ms) }).map(|_| pfd.revents)
}

/// True when the fd has `O_NONBLOCK`.
pub fn is_nonblocking(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no pointer argument.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(fl & libc::O_NONBLOCK != 0)
}

/// A new socket, owned (closed on drop). Used only by the capability probe.
pub fn socket(domain: c_int, ty: c_int, protocol: c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; on success we own the new fd.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A TCP socket pair over IPv4 loopback (client, accepted server side). Probe helper.
pub fn tcp_loopback_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let l = socket(libc::AF_INET, libc::SOCK_STREAM, 0)?;
    let mut addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    let mut alen = size_of::<libc::sockaddr_in>() as socklen_t;
    let sa = (&mut addr as *mut libc::sockaddr_in).cast::<libc::sockaddr>();
    // SAFETY: `sa` points at a live sockaddr_in of `alen` bytes for each call below.
    unsafe {
        cvt(libc::bind(l.as_raw_fd(), sa, alen))?;
        cvt(libc::listen(l.as_raw_fd(), 1))?;
        cvt(libc::getsockname(l.as_raw_fd(), sa, &mut alen))?;
    }
    let c = socket(libc::AF_INET, libc::SOCK_STREAM, 0)?;
    // SAFETY: as above.
    cvt(unsafe { libc::connect(c.as_raw_fd(), sa, alen) })?;
    // SAFETY: accept with NULL address pointers is allowed.
    let s = cvt(unsafe { libc::accept(l.as_raw_fd(), ptr::null_mut(), ptr::null_mut()) })?;
    // SAFETY: `s` is a new fd returned by accept() and owned by nobody else.
    Ok((c, unsafe { OwnedFd::from_raw_fd(s) }))
}

/// Size of the shared discard buffer that the discard-prefix peek repeats across iovecs.
pub const SCRATCH_LEN: usize = 64 * 1024;

/// A write-only sink: the kernel copies skipped bytes here and nobody ever reads them.
///
/// It is shared by every thread on purpose (as passt's `tcp_buf_discard`): concurrent
/// kernel writes into it are harmless because Rust code never reads or references its
/// contents; only its address is handed to the kernel.
struct Scratch(UnsafeCell<[u8; SCRATCH_LEN]>);
// SAFETY: see the type's comment: the contents are never read, only written by the kernel.
unsafe impl Sync for Scratch {}
static SCRATCH: Scratch = Scratch(UnsafeCell::new([0; SCRATCH_LEN]));

/// An iovec over (a prefix of) the shared discard buffer.
pub fn scratch_iov(len: usize) -> iovec {
    debug_assert!(len <= SCRATCH_LEN);
    iovec {
        iov_base: SCRATCH.0.get().cast::<c_void>(),
        iov_len: len.min(SCRATCH_LEN),
    }
}
