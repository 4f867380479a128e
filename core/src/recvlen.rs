//! [`recv_buffer_len`]: how large a fresh buffer for one receive or peek needs to be, for the
//! bindings' calls that allocate their result (Python's `peek_at(sock, 0, 10**9)`, Node's
//! `peekAt(fd, 0, 1e9)`): sized by what the socket can hold, not by the size asked for.

use std::os::fd::AsFd;

use crate::sys;

/// Sizes up to which [`recv_buffer_len`] asks the socket nothing: 256 KiB, more than the
/// receive buffer a TCP (128 KiB, `tcp_rmem[1]`) or AF_UNIX (208 KiB, `rmem_default`) socket
/// starts with, so that asking would rarely make the buffer smaller.
pub const RECV_BUFFER_FLOOR: usize = 256 * 1024;

/// The length in bytes of a buffer for one receive or peek of up to `asked` bytes on `fd`.
///
// doc-source: recv_buffer_len.kernel
/// A call that allocates its result sizes it by what the socket can hold rather than by the size
/// asked for alone: up to 256 KiB the size asked for; above that, at least 256 KiB and otherwise
/// the larger of the bytes queued now (`SIOCINQ`) and the socket's receive buffer (`SO_RCVBUF` as
/// the kernel reports it), never more than asked. Everything queued at the call fits; bytes that
/// arrive while the call waits fit too on TCP (its window keeps the queue within about
/// `SO_RCVBUF`), and on AF_UNIX streams (bounded by the sender's `SO_SNDBUF`) may be more, left
/// queued for the next call: the result is then shorter than the size asked for, as any receive
/// may be. Cost: a `getsockopt` and an `ioctl` when the size asked for is above 256 KiB, none
/// otherwise.
// doc-end
///
/// Never fails: where the socket cannot answer (not a socket, closed: `EBADF`, `ENOTSOCK`)
/// the length is `asked` capped at [`RECV_BUFFER_FLOOR`], and the receive that follows reports
/// the error; an `SIOCINQ` the socket refuses (a listening TCP socket: `EINVAL`) counts as
/// nothing queued.
pub fn recv_buffer_len(fd: impl AsFd, asked: usize) -> usize {
    if asked <= RECV_BUFFER_FLOOR {
        return asked;
    }
    let fd = fd.as_fd();
    let Ok(rcvbuf) = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF) else {
        return RECV_BUFFER_FLOOR;
    };
    let queued = sys::inq(fd).unwrap_or(0);
    let holds = (rcvbuf.max(0) as usize).max(queued).max(RECV_BUFFER_FLOOR);
    asked.min(holds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn write_all(fd: impl AsFd, mut data: &[u8]) {
        while !data.is_empty() {
            // SAFETY: `data` is a live slice of its length.
            let n =
                unsafe { libc::write(fd.as_fd().as_raw_fd(), data.as_ptr().cast(), data.len()) };
            assert!(n > 0, "write: {}", std::io::Error::last_os_error());
            data = &data[n as usize..];
        }
    }

    #[test]
    fn small_sizes_are_kept_large_ones_capped_by_the_socket() {
        let (c, s) = sys::tcp_loopback_pair().unwrap();
        assert_eq!(recv_buffer_len(&s, 0), 0);
        assert_eq!(recv_buffer_len(&s, 4096), 4096);
        assert_eq!(recv_buffer_len(&s, RECV_BUFFER_FLOOR), RECV_BUFFER_FLOOR);
        write_all(&c, b"hello world");
        let rcvbuf = sys::getsockopt_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
        let n = recv_buffer_len(&s, 1_000_000_000);
        assert_eq!(
            n,
            (rcvbuf as usize).max(RECV_BUFFER_FLOOR),
            "rcvbuf {rcvbuf}"
        );
        assert!(n < 1_000_000_000);
        assert_eq!(recv_buffer_len(&s, usize::MAX), n);
        // Never above what was asked, never below the floor.
        let m = recv_buffer_len(&s, RECV_BUFFER_FLOOR + 1);
        assert!(
            (RECV_BUFFER_FLOOR..=RECV_BUFFER_FLOOR + 1).contains(&m),
            "{m}"
        );
    }

    #[test]
    fn what_is_queued_always_fits() {
        // AF_UNIX: the queue is bounded by the sender's SO_SNDBUF, not the receiver's
        // SO_RCVBUF; a small receive buffer must not cut what is already queued.
        use std::io::Write;
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        sys::setsockopt_int(a.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20).unwrap();
        sys::setsockopt_int(b.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4096).unwrap();
        a.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 1 << 20];
        let mut sent = 0;
        // As much as the sender's buffer takes.
        while let Ok(n) = a.write(&chunk) {
            sent += n;
        }
        let queued = sys::inq(b.as_fd()).unwrap();
        assert_eq!(queued, sent);
        let n = recv_buffer_len(&b, 1 << 30);
        assert!(n >= queued, "{n} < {queued} queued");
        assert!(n >= RECV_BUFFER_FLOOR);
    }

    #[test]
    fn a_descriptor_that_cannot_answer_gets_the_floor() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(recv_buffer_len(&f, 1 << 40), RECV_BUFFER_FLOOR);
        assert_eq!(recv_buffer_len(&f, 10), 10);
    }
}
