//! The stateless calls: a peek at an offset and a consume, each a call of its own, and the
//! consume that every mode shares (the urgent mark, descriptor-carrying messages).

use super::*;

/// Whether `SO_PEEK_OFF` works on this stream socket: `Ok(true)`/`Ok(false)`.
///
// doc-source: peek_supported.kernel
/// TCP over IPv4 has it since Linux 6.9, over IPv6 since 6.12, AF_UNIX stream since 3.4;
/// MPTCP never. Leaves the socket's `SO_PEEK_OFF` value as it was (reads it, writes it back).
// doc-end
///
/// # Errors
// doc-source: peek_supported.errors
/// `EBADF` (not an open fd), `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream
/// socket: lowcopy's peek does not apply; UDP and other datagram sockets neither).
// doc-end
pub fn peek_supported(fd: impl AsFd) -> io::Result<bool> {
    let fd = fd.as_fd();
    let info = classify(fd, &mut 0, false)?;
    let cur = match sys::getsockopt_int(fd, libc::SOL_SOCKET, SO_PEEK_OFF) {
        Ok(v) => v,
        Err(e) if is_eopnotsupp(&e) => return Ok(false),
        Err(e) => return Err(e),
    };
    match sys::setsockopt_int(fd, libc::SOL_SOCKET, SO_PEEK_OFF, cur) {
        Ok(()) => {
            peek_off_cache(info.family).store(1, Ordering::Relaxed);
            Ok(true)
        }
        Err(e) if is_eopnotsupp(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Stateless peek of the bytes `offset` bytes after the head of the receive queue.
///
// doc-source: peek_at.returns
/// Returns bytes copied (> 0); 0 when the peer shut down and nothing lies beyond `offset`;
/// `EAGAIN` when nothing lies beyond `offset` yet and the call may not wait
/// ([`Flags::DONTWAIT`], or a non-blocking fd).
// doc-end
// doc-source: peek_at.kernel
/// A blocking call waits for one byte beyond `offset`. Stateless: uses `SO_PEEK_OFF` where the
/// socket has it (set, peek, set back to -1), else the discard prefix.
// doc-end
///
// doc-source: peek_at.cost
/// Precondition: `SO_PEEK_OFF` is disabled (-1, the default) on the socket, so no live peeker
/// may use it; this call leaves it disabled. Cost: 2-3 `getsockopt` to classify the socket, one
/// `recvmsg`, and with `offset > 0` on a socket with `SO_PEEK_OFF` two `setsockopt` (and on TCP
/// a `poll` for urgent data: with an urgent byte pending out of the stream, a `getsockopt` and
/// one or two `ioctl` find its mark, so that offsets past it count the bytes reads deliver).
/// Use a peeker on the data path.
// doc-end
///
/// ```
/// use std::io::{IoSliceMut, Write};
/// use std::net::{TcpListener, TcpStream};
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let mut client = TcpStream::connect(listener.local_addr()?)?;
/// let (server, _) = listener.accept()?;
/// client.write_all(b"header:body")?;
///
/// let mut buf = [0u8; 4];
/// let n = lowcopy::peek_at(&server, 7, &mut [IoSliceMut::new(&mut buf)], lowcopy::Flags::NONE)?;
/// assert_eq!(&buf[..n], b"body"); // the 11 bytes are all still queued
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// `EINVAL` ([`Flags::MORE`], or no room in `bufs`), `EMSGSIZE` (more than `IOV_MAX` iovecs),
/// and:
// doc-source: peek_at.errors
/// `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream socket), `EOVERFLOW`
/// (`offset` beyond what the mechanism can represent: `INT_MAX` for `SO_PEEK_OFF`, 1023 x 64
/// KiB for the discard prefix, whose peek into more iovecs than fit beside it is split into
/// several `recvmsg`; never truncated), `ECONNRESET` and other
/// `recvmsg` errors.
// doc-end
#[cfg(feature = "std")]
pub fn peek_at(
    fd: impl AsFd,
    offset: usize,
    bufs: &mut [IoSliceMut<'_>],
    flags: Flags,
) -> io::Result<usize> {
    let fd = fd.as_fd();
    let info = classify(fd, &mut 0, false)?;
    let mode = if offset == 0 {
        // A prefix of nothing: a plain MSG_PEEK, no SO_PEEK_OFF round trip.
        Mechanism::Discard
    } else {
        Mechanism::resolve_auto(info)
    };
    // SO_PEEK_OFF counts an urgent byte out of the stream that reads skip: past its mark the
    // kernel's offset is one more than the stream's.
    let offset = match mode {
        Mechanism::Offset if info.transport == Transport::Tcp => offset + urgent_hole(fd, offset)?,
        _ => offset,
    };
    let mut p = match Peeker::open(fd, info, mode, offset, false) {
        Err(e) if is_eopnotsupp(&e) => Peeker::open(fd, info, Mechanism::Discard, offset, false)?,
        r => r?,
    };
    p.peek(bufs, flags)
    // Dropping `p` disables SO_PEEK_OFF again if it set it.
}

/// 1 when the kernel's `SO_PEEK_OFF` for the stream offset `offset` of a TCP socket counts a
/// byte that reads skip: an urgent byte not read yet (`POLLPRI`) and out of the stream (no
/// `SO_OOBINLINE`), whose mark lies at or before `offset`. The bytes before the mark are those
/// `SIOCATMARK` and `SIOCINQ` tell: none when the mark is at the head, else what `SIOCINQ`
/// counts (`tcp_inq`, include/net/tcp.h, stops at a mark ahead). A peek before the mark needs
/// nothing: the kernel ends it at the mark. 0 otherwise (MPTCP has no urgent data), after one
/// `poll` when no urgent byte is pending.
fn urgent_hole(fd: BorrowedFd<'_>, offset: usize) -> io::Result<usize> {
    if sys::poll_one(fd, libc::POLLPRI, 0)? & libc::POLLPRI == 0 {
        return Ok(0);
    }
    if sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_OOBINLINE)? != 0 {
        return Ok(0);
    }
    let before_mark = if sys::at_mark(fd) { 0 } else { sys::inq(fd)? };
    Ok(usize::from(offset >= before_mark))
}

/// Drops up to `n` bytes from the head of the receive queue; returns bytes dropped.
///
// doc-source: consume.kernel
/// TCP and MPTCP use `recv(NULL, n, MSG_TRUNC)`, which copies nothing; AF_UNIX stream has no
/// such path and reads them into a scratch buffer, on past messages that carry descriptors,
/// and closes the descriptors that came with the bytes dropped. The kernel lowers `SO_PEEK_OFF` by the bytes dropped. Returns 0 for `n` 0 or at end of
/// stream.
// doc-end
///
/// # Errors
/// `EINVAL` for [`Flags::MORE`], and:
// doc-source: consume.errors
/// `EAGAIN` when nothing is queued and the call may not block ([`Flags::DONTWAIT`] or a
/// non-blocking fd); `EBADF`, `ENOTSOCK`, `EOPNOTSUPP` (not a TCP, MPTCP or AF_UNIX stream
/// socket), and `recv` errors (`ECONNRESET`, `EINTR`, ...).
// doc-end
pub fn consume(fd: impl AsFd, n: usize, flags: Flags) -> io::Result<usize> {
    let flags = peek_flags(flags)?;
    let fd = fd.as_fd();
    let info = classify(fd, &mut 0, false)?;
    let (mut syscalls, mut copied, mut fds_closed) = (0, 0, 0);
    let counts = ConsumeCounts {
        syscalls: &mut syscalls,
        copied: &mut copied,
        fds_closed: &mut fds_closed,
    };
    consume_raw(fd, info.transport, n, flags, counts)
}

/// The `recv` flags of a peek or consume: `MSG_DONTWAIT` or nothing.
pub(super) fn peek_flags(flags: Flags) -> io::Result<c_int> {
    if flags.contains(Flags::MORE) {
        return Err(errno(libc::EINVAL));
    }
    Ok(flags.to_raw())
}

/// A peek's flags and iovecs: `EINVAL` for `MORE` or no room, `EMSGSIZE` beyond `IOV_MAX`.
pub(super) fn check_peek_args(iov: &[iovec], flags: Flags) -> io::Result<c_int> {
    let flags = peek_flags(flags)?;
    if iov.len() > IOV_MAX {
        return Err(errno(libc::EMSGSIZE));
    }
    // No room at all would read as end of stream; a total beyond SSIZE_MAX is what
    // recvmsg refuses (lib/iov_iter.c) while recv would silently clamp it.
    let total = iov.iter().try_fold(0usize, |t, v| t.checked_add(v.iov_len));
    if !matches!(total, Some(t) if t > 0 && t <= isize::MAX as usize) {
        return Err(errno(libc::EINVAL));
    }
    Ok(flags)
}

/// Counters a consume adds to: syscalls made, bytes copied only to be dropped (AF_UNIX), and
/// descriptors that came with the dropped bytes and were closed (AF_UNIX).
pub(super) struct ConsumeCounts<'a> {
    pub(super) syscalls: &'a mut u64,
    pub(super) copied: &'a mut u64,
    pub(super) fds_closed: &'a mut u64,
}

pub(super) fn consume_raw(
    fd: BorrowedFd<'_>,
    transport: Transport,
    n: usize,
    flags: c_int,
    counts: ConsumeCounts<'_>,
) -> io::Result<usize> {
    if n == 0 {
        return Ok(0);
    }
    // TCP and MPTCP: MSG_TRUNC drops without copying. AF_UNIX: MSG_TRUNC on a stream socket
    // still copies (and faults on NULL), so read into the scratch buffer, with a control
    // buffer: the descriptors that came with the bytes are received and closed at once
    // (sys::recvmsg_closing_fds), never left open nor kept. Only the first read may block;
    // after it, take what is queued. The kernel ends a read early in two places, and a short
    // read that stopped at one is read on, non-blocking, for the bytes after it are n's too:
    // at an urgent mark (SIOCATMARK), and on AF_UNIX after a message that carried control
    // data (descriptors; credentials of another writer with SO_PASSCRED: net/unix/af_unix.c
    // `unix_stream_read_generic`). Any other short read means nothing more is queued.
    let mut done = 0;
    while done < n {
        let f = if done == 0 {
            flags
        } else {
            flags | libc::MSG_DONTWAIT
        };
        *counts.syscalls += 1;
        let asked = if transport == Transport::Tcp {
            n - done
        } else {
            (n - done).min(SCRATCH_LEN)
        };
        let r = if transport == Transport::Tcp {
            sys::recv_trunc(fd, asked, f).map(|len| sys::FdRead {
                len,
                ..Default::default()
            })
        } else {
            // SAFETY: the iovec covers the shared scratch buffer, valid for writes.
            unsafe { sys::recvmsg_closing_fds(fd, &[sys::scratch_iov(asked)], f) }
        };
        match r {
            Ok(got) if got.len == 0 => break,
            Ok(got) => {
                let k = got.len;
                done += k;
                *counts.fds_closed += got.fds_closed;
                if transport == Transport::Unix {
                    *counts.copied += k as u64;
                }
                if k < asked && !got.control {
                    *counts.syscalls += 1;
                    if !sys::at_mark(fd) {
                        break;
                    }
                }
            }
            // Past a mark there may be nothing yet, or a reset: recv reports that next time.
            Err(e) if done > 0 && e.raw_os_error() == Some(libc::EAGAIN) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Lays out, in `space`, scratch iovecs covering `skip` bytes followed by the caller's
/// iovecs, and returns them. Only the entries used are written (no 16 KiB memset per peek).
/// `EOVERFLOW` when they do not fit in `IOV_MAX`.
pub(super) fn discard_iov<'a>(
    space: &'a mut [MaybeUninit<iovec>; IOV_MAX],
    skip: usize,
    user: &[iovec],
) -> io::Result<&'a [iovec]> {
    let prefix = skip.div_ceil(SCRATCH_LEN);
    let total = prefix + user.len();
    if total > IOV_MAX {
        return Err(errno(libc::EOVERFLOW));
    }
    for (i, v) in space[..prefix].iter_mut().enumerate() {
        v.write(sys::scratch_iov((skip - i * SCRATCH_LEN).min(SCRATCH_LEN)));
    }
    for (v, u) in space[prefix..total].iter_mut().zip(user) {
        v.write(*u);
    }
    // SAFETY: the first `total` entries were written just above.
    Ok(unsafe { core::slice::from_raw_parts(space.as_ptr().cast::<iovec>(), total) })
}
