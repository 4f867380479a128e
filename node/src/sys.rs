//! The few raw syscalls the binding makes itself (waits for the Promise variants, the test
//! fixtures), each turning -1/errno into an `io::Error`.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// -1 into the thread's errno.
pub fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `getsockopt` of an int option.
pub fn getsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live locals of the stated size.
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

/// `setsockopt` of an int option.
pub fn setsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: `v` is a live local of the stated size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Bytes queued for reading (`SIOCINQ`).
pub fn inq(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCINQ (FIONREAD) writes one int.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n.max(0) as usize)
}

/// An eventfd (non-blocking, close-on-exec): the way `close()` and an `AbortSignal` wake a
/// Promise variant's wait on a pool thread.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned right away.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes an eventfd readable (wakes every poller; it stays readable).
pub fn eventfd_signal(fd: BorrowedFd<'_>) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local; an error (counter full) leaves it readable.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// What a wait ended with.
#[derive(Debug, PartialEq, Eq)]
pub enum Woken {
    /// `fd` reported these events.
    Ready(i16),
    /// The cancel eventfd fired (close() or an AbortSignal).
    Cancelled,
    TimedOut,
}

/// Polls `fd` for `events` and `cancel` for readability until `deadline` (None: forever),
/// restarting after signals (EINTR).
pub fn poll_until(
    fd: BorrowedFd<'_>,
    events: i16,
    cancel: Option<BorrowedFd<'_>>,
    deadline: Option<Instant>,
) -> io::Result<Woken> {
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up: a wait must not end before its deadline.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        let mut fds = [
            libc::pollfd {
                fd: fd.as_raw_fd(),
                events,
                revents: 0,
            },
            libc::pollfd {
                fd: cancel.map_or(-1, |c| c.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a live array of two pollfds (a negative fd is ignored by poll).
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(Woken::Cancelled);
        }
        if fds[0].revents != 0 {
            return Ok(Woken::Ready(fds[0].revents));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Woken::TimedOut);
        }
    }
}

/// `deadline` for a timeout (None: no limit).
pub fn deadline(t: Option<Duration>) -> Option<Instant> {
    t.and_then(|t| Instant::now().checked_add(t))
}

/// Sleeps until more than `offset` bytes are queued on the stream socket `fd`, or the peer
/// ended the stream (then a peek reports the end or the error), `cancel` fired, or `deadline`
/// passed. Never spins: the socket sits in an edge-triggered epoll instance, which wakes once
/// per new arrival, so bytes queued before `offset` (which keep `POLLIN` up, since poll ignores
/// `SO_PEEK_OFF`) and error-queue entries (which keep `POLLERR` up) cost one look, not a loop.
pub fn wait_beyond(
    fd: BorrowedFd<'_>,
    offset: usize,
    cancel: BorrowedFd<'_>,
    deadline: Option<Instant>,
) -> io::Result<Woken> {
    // SAFETY: plain syscall; the fd is owned right away.
    let ep = unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
    let add = |f: BorrowedFd<'_>, events: u32, tag: u64| {
        let mut ev = libc::epoll_event { events, u64: tag };
        // SAFETY: `ev` is a live epoll_event.
        check(unsafe {
            libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, f.as_raw_fd(), &mut ev)
        })
    };
    add(
        fd,
        (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
        0,
    )?;
    add(cancel, libc::EPOLLIN as u32, 1)?;
    loop {
        if inq(fd)? > offset {
            return Ok(Woken::Ready(libc::POLLIN));
        }
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one live pollfd; timeout 0.
        check(unsafe { libc::poll(&mut p, 1, 0) })?;
        if p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLNVAL) != 0 {
            return Ok(Woken::Ready(p.revents));
        }
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(Woken::TimedOut);
                }
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        };
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
        // SAFETY: room for two events.
        let n = unsafe { libc::epoll_wait(ep.as_raw_fd(), evs.as_mut_ptr(), 2, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if evs[..n as usize].iter().any(|e| e.u64 == 1) {
            return Ok(Woken::Cancelled);
        }
    }
}

/// Whether an eventfd made by [`eventfd`] was signalled (it stays readable once signalled).
pub fn is_signalled(fd: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd; timeout 0.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}
