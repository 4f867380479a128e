//! Thin wrappers over the syscalls lowcopy makes (sockets, mmap, the zerocopy error queue).
//!
//! Every `unsafe` block of the crate that calls into libc lives here; each wrapper turns
//! `-1/errno` into an [`io::Error`] that keeps the errno, so callers above are safe code.

use core::cell::UnsafeCell;
use core::mem::size_of;
use core::ptr;
#[cfg(feature = "std")]
use std::os::fd::{FromRawFd, OwnedFd};

use crate::compat::{io, AsFd, AsRawFd, BorrowedFd, RawFd};

use libc::{c_int, c_void, iovec, msghdr, socklen_t};

/// `SO_PEEK_OFF` (include/uapi/asm-generic/socket.h).
pub const SO_PEEK_OFF: c_int = 42;
/// `TCP_INQ` (include/uapi/linux/tcp.h, Linux 4.18): each `recvmsg` brings a `TCP_CM_INQ`
/// control message with the bytes queued (the same number, as level and type).
pub const TCP_INQ: c_int = 36;
/// `IOV_MAX` / `UIO_MAXIOV`: the most iovecs one `recvmsg` takes (include/uapi/linux/uio.h).
pub const IOV_MAX: usize = 1024;
/// `TCP_ZEROCOPY_RECEIVE` (include/uapi/linux/tcp.h, 4.18).
pub const TCP_ZEROCOPY_RECEIVE: c_int = 35;

/// The syscalls a lowcopy call can block in or that glibc makes cancellation points
/// (`recvmsg`, `sendmsg`, `recv`, `recvmmsg`, `poll`, `epoll_wait`, `read`, `write`,
/// `connect`, `close`), entered with `syscall(2)` rather than through glibc's wrappers.
///
/// Why: a `pthread_cancel` acting inside a glibc wrapper starts a forced unwind through
/// lowcopy's Rust frames, which the C ABI's panic guard stops and glibc then aborts the
/// process ("exception not rethrown"). Entered this way no lowcopy call is a cancellation
/// point, without the two `pthread_setcancelstate` calls per call that holding cancellation
/// off cost (about 100 instructions on a 400-instruction peek). The syscall numbers are the
/// ones glibc's wrappers use on x86_64 (`recv` is `recvfrom`), so a seccomp allowlist written
/// for the wrappers still holds; where the architecture lacks `poll` and `epoll_wait`
/// (aarch64), `ppoll` and `epoll_pwait`, as glibc does there. Each function has the libc
/// signature of its namesake and the same `-1`/errno convention.
pub(crate) mod raw {
    use libc::{c_int, c_long, c_void, msghdr, size_t, sockaddr, socklen_t, ssize_t};

    /// `recvmsg(2)`. Safety: as `libc::recvmsg`.
    #[inline]
    pub unsafe fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
        // SAFETY: the caller's guarantee on `msg`; integers widened to the kernel's longs.
        unsafe { libc::syscall(libc::SYS_recvmsg, fd as c_long, msg, flags as c_long) as ssize_t }
    }

    /// `sendmsg(2)`. Safety: as `libc::sendmsg`.
    #[inline]
    pub unsafe fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
        // SAFETY: the caller's guarantee on `msg`.
        unsafe { libc::syscall(libc::SYS_sendmsg, fd as c_long, msg, flags as c_long) as ssize_t }
    }

    /// `recv(2)`, as glibc makes it: `recvfrom` without an address. Safety: as `libc::recv`.
    #[inline]
    pub unsafe fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
        let none: *mut c_void = core::ptr::null_mut();
        // SAFETY: the caller's guarantee on `buf`; no address is written (NULL).
        unsafe {
            libc::syscall(
                libc::SYS_recvfrom,
                fd as c_long,
                buf,
                len,
                flags as c_long,
                none,
                none,
            ) as ssize_t
        }
    }

    /// `recvmmsg(2)` without a timeout. Safety: as `libc::recvmmsg`.
    #[inline]
    pub unsafe fn recvmmsg(fd: c_int, v: *mut libc::mmsghdr, n: u32, flags: c_int) -> c_int {
        let none: *mut c_void = core::ptr::null_mut();
        // SAFETY: the caller's guarantee on `v`; no timeout (NULL).
        unsafe {
            libc::syscall(
                libc::SYS_recvmmsg,
                fd as c_long,
                v,
                n as c_long,
                flags as c_long,
                none,
            ) as c_int
        }
    }

    /// `poll(2)`. Safety: as `libc::poll`.
    #[inline]
    pub unsafe fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout_ms: c_int) -> c_int {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's guarantee on `fds`.
        return unsafe { libc::syscall(libc::SYS_poll, fds, n, timeout_ms as c_long) as c_int };
        #[cfg(not(target_arch = "x86_64"))]
        {
            let ts = libc::timespec {
                tv_sec: (timeout_ms / 1000) as _,
                tv_nsec: ((timeout_ms % 1000) * 1_000_000) as _,
            };
            let tsp: *const libc::timespec = if timeout_ms < 0 {
                core::ptr::null()
            } else {
                &ts
            };
            let mask: *const c_void = core::ptr::null();
            // SAFETY: the caller's guarantee on `fds`; `ts` lives across the call.
            unsafe { libc::syscall(libc::SYS_ppoll, fds, n, tsp, mask, 8 as c_long) as c_int }
        }
    }

    /// `epoll_wait(2)`. Safety: as `libc::epoll_wait`.
    #[inline]
    pub unsafe fn epoll_wait(ep: c_int, ev: *mut libc::epoll_event, n: c_int, ms: c_int) -> c_int {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's guarantee on `ev`.
        return unsafe {
            libc::syscall(
                libc::SYS_epoll_wait,
                ep as c_long,
                ev,
                n as c_long,
                ms as c_long,
            ) as c_int
        };
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mask: *const c_void = core::ptr::null();
            // SAFETY: the caller's guarantee on `ev`; no signal mask (NULL).
            unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait,
                    ep as c_long,
                    ev,
                    n as c_long,
                    ms as c_long,
                    mask,
                    8 as c_long,
                ) as c_int
            }
        }
    }

    /// `read(2)`. Safety: as `libc::read`.
    #[inline]
    pub unsafe fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
        // SAFETY: the caller's guarantee on `buf`.
        unsafe { libc::syscall(libc::SYS_read, fd as c_long, buf, len) as ssize_t }
    }

    /// `write(2)`. Safety: as `libc::write`.
    #[inline]
    pub unsafe fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
        // SAFETY: the caller's guarantee on `buf`.
        unsafe { libc::syscall(libc::SYS_write, fd as c_long, buf, len) as ssize_t }
    }

    /// `connect(2)`. Safety: as `libc::connect`.
    #[inline]
    pub unsafe fn connect(fd: c_int, sa: *const sockaddr, len: socklen_t) -> c_int {
        // SAFETY: the caller's guarantee on `sa`.
        unsafe { libc::syscall(libc::SYS_connect, fd as c_long, sa, len as c_long) as c_int }
    }

    /// `close(2)`. Safety: `fd` must be owned by the caller and not used afterwards.
    #[inline]
    pub unsafe fn close(fd: c_int) -> c_int {
        // SAFETY: the caller owns `fd` and gives it up.
        unsafe { libc::syscall(libc::SYS_close, fd as c_long) as c_int }
    }
}

/// `PTHREAD_CANCEL_DISABLE` of glibc and musl (the `libc` crate has no binding on Linux).
const PTHREAD_CANCEL_DISABLE: c_int = 1;

extern "C" {
    fn pthread_setcancelstate(state: c_int, oldstate: *mut c_int) -> c_int;
}

/// Thread cancellation held off while it lives. For the few places where lowcopy makes a
/// syscall that glibc makes a cancellation point and [`raw`] does not cover (closing what
/// another crate owns: a probe's sockets, an io_uring ring): a `pthread_cancel` acting there
/// would unwind through Rust frames, which the C ABI's panic guard stops and glibc then
/// aborts the process. Held off, the cancel stays pending and acts at the thread's next
/// cancellation point after the lowcopy call returns. Two `pthread_setcancelstate` calls (no
/// syscall), so never on a hot path.
#[doc(hidden)]
#[derive(Debug)]
pub struct CancelOff(c_int);

impl CancelOff {
    /// Holds cancellation off until the value is dropped.
    #[inline]
    #[must_use]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        let mut old = 0;
        // SAFETY: sets the calling thread's cancel state; `old` is a valid out-pointer.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        CancelOff(old)
    }
}

impl Drop for CancelOff {
    #[inline]
    fn drop(&mut self) {
        let mut prev = 0;
        // SAFETY: as in `new`, restoring the state found there.
        unsafe { pthread_setcancelstate(self.0, &mut prev) };
    }
}

/// Sleeps `d` (whole milliseconds, rounded up) in [`raw::poll`] with no descriptors: unlike
/// `std::thread::sleep` (glibc's `nanosleep`), not a cancellation point.
pub fn nap(d: core::time::Duration) {
    let ms = d.as_nanos().div_ceil(1_000_000).min(c_int::MAX as u128) as c_int;
    // SAFETY: no descriptors to read or write.
    unsafe { raw::poll(ptr::null_mut(), 0, ms) };
}

/// A descriptor lowcopy made for itself (an eventfd, an epoll instance), closed on drop with
/// [`raw::close`]: `OwnedFd`'s drop calls glibc's `close`, a cancellation point.
#[derive(Debug)]
pub struct Fd(RawFd);

impl Fd {
    /// Takes ownership of `fd`, which must be a new descriptor nobody else owns.
    fn owned(fd: c_int) -> Fd {
        Fd(fd)
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is open for as long as `self` lives (closed only in drop).
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: owned by `self`, which is going away.
        unsafe { raw::close(self.0) };
    }
}

/// `CLOCK_MONOTONIC` now, as a duration since an unspecified start (what `std::time::Instant`
/// reads on Linux, without std).
pub fn monotonic() -> core::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    core::time::Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

pub fn errno(code: c_int) -> io::Error {
    io::Error::from_raw_os_error(code)
}

pub(crate) fn cvt(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub(crate) fn cvt_size(ret: isize) -> io::Result<usize> {
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

/// `getpeername` for its answer only: `ENOTCONN` unless the socket is connected (a listening,
/// never-connected, still-connecting or reset TCP socket).
pub fn check_connected(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut addr: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: `addr` and `len` are live locals; the kernel writes at most `len` bytes.
    let ret = unsafe {
        libc::getpeername(
            fd.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    cvt(ret).map(drop)
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
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: msghdr points at `iov`, whose buffers the caller vouches for.
    cvt_size(unsafe { raw::recvmsg(fd.as_raw_fd(), &mut msg, flags) })
}

/// [`recvmsg_iov`], also returning the `msg_flags` the kernel set (no control buffer: an
/// AF_UNIX peek that reached a message with control data, descriptors or credentials, sets
/// `MSG_CTRUNC` and installs nothing).
///
/// # Safety
/// As [`recvmsg_iov`].
pub unsafe fn recvmsg_iov_flags(
    fd: BorrowedFd<'_>,
    iov: &[iovec],
    flags: c_int,
) -> io::Result<(usize, c_int)> {
    // SAFETY: all-zero is a valid msghdr (no name, no control).
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: msghdr points at `iov`, whose buffers the caller vouches for.
    let n = cvt_size(unsafe { raw::recvmsg(fd.as_raw_fd(), &mut msg, flags) })?;
    Ok((n, msg.msg_flags))
}

/// [`recvmsg_iov`] on a socket with `TCP_INQ` set: also returns the kernel's hint of the
/// bytes queued after the call (net/ipv4/tcp.c `tcp_inq_hint`: from the head of the queue, a
/// received FIN counted as one byte more), when the kernel sent one.
///
/// # Safety
/// As [`recvmsg_iov`].
pub unsafe fn recvmsg_inq(
    fd: BorrowedFd<'_>,
    iov: &[iovec],
    flags: c_int,
) -> io::Result<(usize, Option<usize>)> {
    let mut control = core::mem::MaybeUninit::<[u64; 4]>::uninit();
    // SAFETY: all-zero is a valid msghdr (no name).
    let mut msg: msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut iovec;
    msg.msg_iovlen = iov.len() as _;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 4]>() as _;
    // SAFETY: msghdr points at `iov` (the caller's guarantee) and at the live, writable
    // control buffer of the length given.
    let len = cvt_size(unsafe { raw::recvmsg(fd.as_raw_fd(), &mut msg, flags) })?;
    let mut hint = None;
    // SAFETY: the kernel wrote msg_controllen bytes of control messages into the buffer; the
    // CMSG_* walkers stay within them.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: `c` is a header inside the written control data (CMSG_FIRSTHDR/NXTHDR).
        let h = unsafe { &*c };
        // SAFETY: CMSG_LEN is arithmetic on its argument.
        let want = unsafe { libc::CMSG_LEN(size_of::<c_int>() as u32) } as usize;
        if h.cmsg_level == libc::IPPROTO_TCP
            && h.cmsg_type == TCP_INQ
            && h.cmsg_len as usize >= want
        {
            // SAFETY: the data of this cmsg holds one int (checked above), maybe unaligned.
            let v = unsafe { core::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>()) };
            hint = usize::try_from(v).ok();
        }
        // SAFETY: as above.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    Ok((len, hint))
}

/// `recv(fd, NULL, n, flags | MSG_TRUNC)`: drops up to `n` bytes (TCP, MPTCP) without copying.
pub fn recv_trunc(fd: BorrowedFd<'_>, n: usize, flags: c_int) -> io::Result<usize> {
    // SAFETY: with MSG_TRUNC on TCP the kernel skips the copy and never touches the NULL buffer
    // (net/ipv4/tcp.c tcp_recvmsg_locked: `if (!(flags & MSG_TRUNC))` guards the copy).
    cvt_size(unsafe { raw::recv(fd.as_raw_fd(), ptr::null_mut(), n, flags | libc::MSG_TRUNC) })
}

/// `TCP_INFO`'s first byte, `tcpi_state` (include/uapi/linux/tcp.h; the kernel copies no
/// more than the length asked, net/ipv4/tcp.c `do_tcp_getsockopt`): the socket's TCP state
/// (`TCP_LISTEN` = 10). Only TCP and MPTCP sockets answer; UDP, raw and AF_UNIX sockets fail
/// (`EOPNOTSUPP`, `ENOPROTOOPT`).
pub fn tcp_state(fd: BorrowedFd<'_>) -> io::Result<u8> {
    let mut st = [0u8; 1];
    getsockopt_bytes(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut st).map(|_| st[0])
}

/// `TCP_LISTEN` (include/net/tcp_states.h), as `TCP_INFO` reports it.
pub const TCP_LISTEN: u8 = 10;

/// `SCM_PIDFD` (include/linux/socket.h, Linux 6.5): the sender's pidfd, which `SO_PASSPIDFD`
/// makes the kernel attach to every AF_UNIX read that passes a control buffer.
pub const SCM_PIDFD: c_int = 4;

/// `SCM_MAX_FD` (include/net/scm.h): the most descriptors one message carries.
pub const SCM_MAX_FD: usize = 253;

/// Control buffer of [`recvmsg_closing_fds`], in 8-byte words: 4 KiB, room for a message's
/// [`SCM_MAX_FD`] descriptors (1032 bytes), credentials (32), a pidfd (24) and a security
/// label.
const FD_CONTROL_WORDS: usize = 512;
// SAFETY: CMSG_SPACE is arithmetic on its argument.
const _: () = assert!(
    FD_CONTROL_WORDS * 8
        >= unsafe { libc::CMSG_SPACE((SCM_MAX_FD * size_of::<c_int>()) as u32) } as usize + 256
);

/// What one [`recvmsg_closing_fds`] read.
#[derive(Clone, Copy, Debug, Default)]
pub struct FdRead {
    /// Bytes read.
    pub len: usize,
    /// Descriptors the kernel passed with them (`SCM_RIGHTS`, `SCM_PIDFD`), all closed.
    pub fds_closed: u64,
    /// The kernel passed control data (descriptors, credentials, a label) or truncated it
    /// (`MSG_CTRUNC`): on an AF_UNIX stream, a read that ends short may have ended at the
    /// boundary of a message carrying such data rather than at the end of the queue.
    pub control: bool,
}

/// `recvmsg(fd, iov, flags | MSG_CMSG_CLOEXEC)` with a control buffer, for AF_UNIX stream
/// bytes being dropped: every descriptor the kernel passes with them is closed before this
/// returns, so none outlives the call (close-on-exec meanwhile: a concurrent exec inherits
/// none). With `MSG_CTRUNC` the kernel has itself closed those that did not fit
/// (net/core/scm.c `scm_detach_fds`); the buffer holds a whole message's worth.
///
/// # Safety
/// Every iovec must describe memory valid for writes of its length during the call.
pub unsafe fn recvmsg_closing_fds(
    fd: BorrowedFd<'_>,
    iov: &[iovec],
    flags: c_int,
) -> io::Result<FdRead> {
    let mut control = core::mem::MaybeUninit::<[u64; FD_CONTROL_WORDS]>::uninit();
    // SAFETY: all-zero is a valid msghdr (no name).
    let mut msg: msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut iovec;
    msg.msg_iovlen = iov.len() as _;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; FD_CONTROL_WORDS]>() as _;
    // SAFETY: msghdr points at `iov` (the caller's guarantee) and at the live, writable
    // control buffer of the length given.
    let len = cvt_size(unsafe {
        raw::recvmsg(fd.as_raw_fd(), &mut msg, flags | libc::MSG_CMSG_CLOEXEC)
    })?;
    let mut out = FdRead {
        len,
        fds_closed: 0,
        control: msg.msg_flags & libc::MSG_CTRUNC != 0,
    };
    // SAFETY: the kernel wrote msg_controllen bytes of control messages into the buffer; the
    // CMSG_* walkers stay within them.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        out.control = true;
        // SAFETY: `c` is a header inside the written control data (CMSG_FIRSTHDR/NXTHDR).
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_SOCKET
            && (h.cmsg_type == libc::SCM_RIGHTS || h.cmsg_type == SCM_PIDFD)
        {
            // SAFETY: CMSG_LEN is arithmetic on its argument.
            let head = unsafe { libc::CMSG_LEN(0) } as usize;
            let n = (h.cmsg_len as usize).saturating_sub(head) / size_of::<c_int>();
            // SAFETY: the data of this cmsg holds `n` ints, maybe unaligned.
            let data = unsafe { libc::CMSG_DATA(c) }.cast::<c_int>();
            for i in 0..n {
                // SAFETY: `i < n`, within the cmsg's data (see above).
                let raw = unsafe { core::ptr::read_unaligned(data.add(i)) };
                // SAFETY: the kernel just installed `raw` in this process for this call
                // alone: nothing else knows the number, so closing it closes nobody's fd.
                unsafe { raw::close(raw) };
                out.fds_closed += 1;
            }
        }
        // SAFETY: as above.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    Ok(out)
}

/// `ioctl(SIOCINQ)`: bytes queued for reading (TCP: not counting a received FIN).
pub fn inq(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: SIOCINQ (FIONREAD) writes one int to the live local.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n.max(0) as usize)
}

/// include/uapi/asm-generic/sockios.h (libc does not define it for Linux).
const SIOCATMARK: c_int = 0x8905;

/// `ioctl(SIOCATMARK)`: whether the next byte to read is an urgent byte (TCP; AF_UNIX since
/// 5.15). False where the socket cannot tell.
pub fn at_mark(fd: BorrowedFd<'_>) -> bool {
    let mut n: c_int = 0;
    // SAFETY: SIOCATMARK writes one int to the live local.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCATMARK as _, &mut n) };
    r == 0 && n != 0
}

/// `poll` on one fd; returns the revents.
pub fn poll_one(fd: BorrowedFd<'_>, events: i16, timeout_ms: c_int) -> io::Result<i16> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    cvt(unsafe { raw::poll(&mut pfd, 1, timeout_ms) }).map(|_| pfd.revents)
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> io::Result<Fd> {
    // SAFETY: no pointers; the descriptor is owned at once.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    Ok(Fd::owned(fd))
}

/// Reads (and so resets) an eventfd's counter without blocking; `EAGAIN` (zero) is fine.
pub fn eventfd_reset(fd: BorrowedFd<'_>) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a live u64.
    let _ = unsafe { raw::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

/// `poll` on `fd` for `events` and on `other` for `POLLIN`; returns `fd`'s revents and
/// whether `other` was readable.
pub fn poll_two(
    fd: BorrowedFd<'_>,
    events: i16,
    other: BorrowedFd<'_>,
    timeout_ms: c_int,
) -> io::Result<(i16, bool)> {
    let mut pfd = [
        libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: other.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: a live array of two pollfds.
    cvt(unsafe { raw::poll(pfd.as_mut_ptr(), 2, timeout_ms) })?;
    Ok((pfd[0].revents, pfd[1].revents != 0))
}

/// Adds 1 to an eventfd's counter (making it readable).
pub fn eventfd_add(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: the kernel reads 8 bytes from a live local.
    let n = unsafe { raw::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A new epoll instance (`EPOLL_CLOEXEC`), owned.
pub fn epoll_create() -> io::Result<Fd> {
    // SAFETY: epoll_create1 takes no pointers; on success we own the new fd.
    let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    Ok(Fd::owned(fd))
}

/// `EPOLL_CTL_ADD` of `fd` to `ep` with `events` (the kernel adds `EPOLLERR | EPOLLHUP`).
pub fn epoll_add(ep: BorrowedFd<'_>, fd: BorrowedFd<'_>, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: 0 };
    // SAFETY: one live epoll_event, read by the kernel during the call only.
    cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) })
        .map(drop)
}

/// `epoll_wait` for one event on `ep`; returns its events, 0 when the time ran out.
pub fn epoll_wait_one(ep: BorrowedFd<'_>, timeout_ms: c_int) -> io::Result<u32> {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: room for exactly the one event the kernel is told it may write.
    let n = cvt(unsafe { raw::epoll_wait(ep.as_raw_fd(), &mut ev, 1, timeout_ms) })?;
    Ok(if n == 0 { 0 } else { ev.events })
}

/// `connect(fd, AF_UNSPEC)`: dissolves the socket's association. On TCP the kernel resets
/// the connection (`tcp_disconnect`: a RST to the peer, the send and retransmit queues
/// purged, which releases the pages zerocopy sends left in them); the descriptor stays open.
pub fn disconnect(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: all-zero is a valid sockaddr; only the family is read for AF_UNSPEC.
    let mut sa: libc::sockaddr = unsafe { core::mem::zeroed() };
    sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    // SAFETY: `sa` is a live sockaddr of the length given.
    cvt(unsafe {
        raw::connect(
            fd.as_raw_fd(),
            &sa,
            size_of::<libc::sockaddr>() as socklen_t,
        )
    })?;
    Ok(())
}

/// True when the fd has `O_NONBLOCK`.
pub fn is_nonblocking(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no pointer argument.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(fl & libc::O_NONBLOCK != 0)
}

/// A new socket, owned (closed on drop). Used only by the capability probe.
#[cfg(feature = "std")]
pub fn socket(domain: c_int, ty: c_int, protocol: c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; on success we own the new fd.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A TCP socket pair over IPv4 loopback (client, accepted server side). Probe helper.
#[cfg(feature = "std")]
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
    cvt(unsafe { raw::connect(c.as_raw_fd(), sa, alen) })?;
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
/// contents; only its address is handed to the kernel. Page-aligned, as the raw loops' scratch
/// in peek_sweep is: the kernel's copies into it start on a page whatever the linker does.
#[repr(C, align(4096))]
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

/// `recv(fd, buf, len, flags)` into raw memory.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes for the duration of the call.
#[inline]
pub unsafe fn recv_raw(
    fd: BorrowedFd<'_>,
    buf: *mut u8,
    len: usize,
    flags: c_int,
) -> io::Result<usize> {
    // SAFETY: the caller vouches for `len` writable bytes at `buf`.
    cvt_size(unsafe { raw::recv(fd.as_raw_fd(), buf.cast(), len, flags) })
}

/// Length of the next datagram without consuming it:
/// `recv(fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT)` (UDP and AF_UNIX datagram sockets
/// return the real length with `MSG_TRUNC`).
pub fn next_datagram_len(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let flags = libc::MSG_PEEK | libc::MSG_TRUNC | libc::MSG_DONTWAIT;
    // SAFETY: a zero-length buffer: the kernel writes nothing to the NULL pointer.
    cvt_size(unsafe { raw::recv(fd.as_raw_fd(), ptr::null_mut(), 0, flags) })
}

/// `getsockopt` of a `struct timeval` option (`SO_RCVTIMEO`); `None` when it is zero (no limit).
pub fn getsockopt_timeval(
    fd: BorrowedFd<'_>,
    name: c_int,
) -> io::Result<Option<core::time::Duration>> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = size_of::<libc::timeval>() as socklen_t;
    // SAFETY: `tv` and `len` are live locals of the sizes the kernel is told.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
        )
    };
    cvt(ret)?;
    let d = core::time::Duration::new(tv.tv_sec.max(0) as u64, tv.tv_usec.max(0) as u32 * 1000);
    Ok((!d.is_zero()).then_some(d))
}

/// The page size (`sysconf(_SC_PAGESIZE)`).
pub fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// `mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0)` of a TCP socket: the empty, read-only
/// window that `TCP_ZEROCOPY_RECEIVE` fills with received pages (net/ipv4/tcp.c `tcp_mmap`).
pub fn mmap_socket(fd: BorrowedFd<'_>, len: usize) -> io::Result<ptr::NonNull<u8>> {
    // SAFETY: a new mapping chosen by the kernel (no MAP_FIXED): it cannot alias Rust memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    ptr::NonNull::new(p.cast()).ok_or_else(|| errno(libc::ENOMEM))
}

/// `munmap(addr, len)`.
///
/// # Safety
/// `addr..addr+len` must be a mapping made by [`mmap_socket`] that nothing references any more.
pub unsafe fn munmap(addr: ptr::NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller owns the mapping and no reference into it is live.
    cvt(unsafe { libc::munmap(addr.as_ptr().cast(), len) }).map(drop)
}

/// `madvise(addr, len, MADV_DONTNEED)`: drops pages mapped by `TCP_ZEROCOPY_RECEIVE`.
///
/// # Safety
/// `addr..addr+len` must lie in a mapping made by [`mmap_socket`] that nothing references.
pub unsafe fn madvise_dontneed(addr: ptr::NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the caller vouches that no reference into the range is live.
    cvt(unsafe { libc::madvise(addr.as_ptr().cast(), len, libc::MADV_DONTNEED) }).map(drop)
}

/// `struct tcp_zerocopy_receive` (include/uapi/linux/tcp.h) as of Linux 5.12: 64 bytes. Older
/// kernels know a prefix of it (16 bytes on 4.18, 24 on 5.7, 40 on 5.11).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpZerocopyReceive {
    /// In: page-aligned address in a mapping of the socket.
    pub address: u64,
    /// In: bytes to map; out: bytes mapped (a multiple of the page size).
    pub length: u32,
    /// Out: bytes to read by copy before mapping can resume.
    pub recv_skip_hint: u32,
    /// Out: bytes left in the receive queue (1 after a FIN with nothing left; 5.7).
    pub inq: u32,
    /// Out: pending socket error, negative (`sock_error`; 5.7).
    pub err: i32,
    /// In: buffer for bytes that cannot be mapped (5.11).
    pub copybuf_address: u64,
    /// In: its size; out: bytes copied there, or a negative errno.
    pub copybuf_len: i32,
    /// In: `TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT`.
    pub flags: u32,
    /// Receive timestamps (5.12); unused by lowcopy.
    pub msg_control: u64,
    pub msg_controllen: u64,
    pub msg_flags: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT`: the range is already unmapped, do not zap it.
pub const TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT: u32 = 1;

/// `getsockopt(IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE)` passing the first `len` bytes of `zc`
/// (`len <= size_of::<TcpZerocopyReceive>()`). Returns the call's result and the optlen the
/// kernel left: it lowers it to the size it knows when given more (5.7 and later).
///
/// # Safety
/// `zc.copybuf_address` must be 0 or valid for writes of `zc.copybuf_len` bytes, and the pages
/// of the socket mapping at `zc.address` must not be referenced (the kernel replaces them).
pub unsafe fn tcp_zerocopy_receive(
    fd: BorrowedFd<'_>,
    zc: &mut TcpZerocopyReceive,
    len: usize,
) -> (io::Result<()>, usize) {
    debug_assert!(len <= size_of::<TcpZerocopyReceive>());
    let mut optlen = len.min(size_of::<TcpZerocopyReceive>()) as socklen_t;
    // SAFETY: the kernel reads and writes at most `optlen` bytes of `zc`; the buffers it
    // points at are the caller's to vouch for.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            TCP_ZEROCOPY_RECEIVE,
            (zc as *mut TcpZerocopyReceive).cast(),
            &mut optlen,
        )
    };
    (cvt(ret).map(drop), optlen as usize)
}

// ---- The zerocopy send path: sendmsg, the error queue and its control messages. ----

/// `SO_EE_ORIGIN_ZEROCOPY` (include/uapi/linux/errqueue.h, 4.14).
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (include/uapi/linux/errqueue.h): the kernel copied the data.
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// `sendmsg(2)`.
///
/// # Safety
/// `msg` must describe valid memory: name, iovecs and control, for the duration of the call.
pub unsafe fn sendmsg(fd: BorrowedFd<'_>, msg: &msghdr, flags: c_int) -> io::Result<usize> {
    // SAFETY: forwarded caller guarantee on `msg`.
    let r = unsafe { raw::sendmsg(fd.as_raw_fd(), msg, flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `recvmmsg(2)` without a timeout; returns the number of messages received.
///
/// # Safety
/// Each `msgvec` entry must describe valid writable memory (iovecs, control) for the call.
pub unsafe fn recvmmsg(
    fd: BorrowedFd<'_>,
    msgvec: &mut [libc::mmsghdr],
    flags: c_int,
) -> io::Result<usize> {
    // SAFETY: forwarded caller guarantee on `msgvec`.
    let r = unsafe {
        raw::recvmmsg(
            fd.as_raw_fd(),
            msgvec.as_mut_ptr(),
            msgvec.len() as libc::c_uint,
            flags,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// A zerocopy notification found in an error-queue message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZcNotice {
    /// First id of the inclusive range (`ee_info`).
    pub lo: u32,
    /// Last id of the inclusive range (`ee_data`).
    pub hi: u32,
    /// `SO_EE_CODE_ZEROCOPY_COPIED`.
    pub copied: bool,
}

/// Scans the control messages of one received error-queue message.
///
/// Returns the zerocopy notification if the message carries one: a `sock_extended_err` in an
/// `IP_RECVERR` (SOL_IP) or `IPV6_RECVERR` (SOL_IPV6) cmsg with `ee_origin ==
/// SO_EE_ORIGIN_ZEROCOPY` and `ee_errno == 0`. Anything else (timestamps, ICMP errors,
/// local errors) is not a notification: `None`.
///
/// # Safety
/// `msg.msg_control`/`msg_controllen` must describe the control data the kernel wrote.
pub unsafe fn zerocopy_notice(msg: &msghdr) -> Option<ZcNotice> {
    // SAFETY: the CMSG_* walkers stay within msg_control/msg_controllen per the caller.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: `c` is a header inside the control buffer (CMSG_FIRSTHDR/NXTHDR checked).
        let h = unsafe { &*c };
        let recverr = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
            || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
        // SAFETY: CMSG_LEN is arithmetic on its argument.
        let need = unsafe { libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) };
        if recverr && h.cmsg_len as usize >= need as usize {
            // SAFETY: the cmsg holds at least a sock_extended_err (length checked); it may be
            // unaligned in the buffer, so read it unaligned.
            let ee = unsafe {
                core::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::sock_extended_err>())
            };
            if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                return Some(ZcNotice {
                    lo: ee.ee_info,
                    hi: ee.ee_data,
                    copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                });
            }
        }
        // SAFETY: as above.
        c = unsafe { libc::CMSG_NXTHDR(msg, c) };
    }
    None
}
