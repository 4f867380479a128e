//! What a socket is: one classification at creation (its transport, whether it listens, whether
//! the stated kind is true), so that no byte is read from a socket of the wrong kind.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transport {
    /// TCP or MPTCP over IPv4/IPv6: `MSG_TRUNC` drops without copying, `MSG_WAITALL` peeks wait.
    Tcp,
    /// AF_UNIX stream.
    Unix,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct SockInfo {
    pub(super) transport: Transport,
    /// Index into the per-family `SO_PEEK_OFF` cache.
    pub(super) family: usize,
}

/// The socket's kind, from 2 or 3 `getsockopt` (SO_DOMAIN, then SO_TYPE on AF_UNIX or
/// SO_PROTOCOL on IPv4/IPv6, then TCP's `TCP_INFO` state; with `refuse_listening`,
/// `SO_ACCEPTCONN` on AF_UNIX and MPTCP): `calls` counts them, failed ones included.
///
/// `refuse_listening` (a peeker's constructor): a listening socket fails with the errno its
/// own `recv` gives (`ENOTCONN` on TCP and MPTCP, `EINVAL` on AF_UNIX). The stateless calls
/// leave that to their `recv`.
pub(super) fn classify(
    fd: BorrowedFd<'_>,
    calls: &mut u64,
    refuse_listening: bool,
) -> io::Result<SockInfo> {
    // SO_DOMAIN first: it is what turns a closed fd into EBADF and a file into ENOTSOCK.
    *calls += 1;
    let domain = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    // Datagram peeks have per-datagram semantics that an offset cursor does not model.
    let family = match domain {
        libc::AF_UNIX => {
            *calls += 1;
            if sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)? != libc::SOCK_STREAM {
                return Err(errno(libc::EOPNOTSUPP));
            }
            if refuse_listening {
                refuse_listener(fd, calls, libc::EINVAL)?;
            }
            return Ok(StreamKind::Unix.info());
        }
        libc::AF_INET => 0,
        libc::AF_INET6 => 1,
        _ => return Err(errno(libc::EOPNOTSUPP)),
    };
    *calls += 1;
    match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? {
        libc::IPPROTO_TCP => {
            // TCP_INFO answers only on a TCP socket (not on a raw one of protocol 6), and says
            // whether it listens: the one call proves both.
            *calls += 1;
            let state = sys::tcp_state(fd).map_err(|_| errno(libc::EOPNOTSUPP))?;
            if refuse_listening && state == sys::TCP_LISTEN {
                return Err(errno(libc::ENOTCONN));
            }
            Ok(SockInfo {
                transport: Transport::Tcp,
                family,
            })
        }
        // MPTCP sockets are stream sockets only.
        libc::IPPROTO_MPTCP => {
            if refuse_listening {
                refuse_listener(fd, calls, libc::ENOTCONN)?;
            }
            Ok(SockInfo {
                transport: Transport::Tcp,
                family: family + 2,
            })
        }
        _ => Err(errno(libc::EOPNOTSUPP)),
    }
}

/// `SO_ACCEPTCONN`: `Err(code)` for a listening socket.
pub(super) fn refuse_listener(fd: BorrowedFd<'_>, calls: &mut u64, code: c_int) -> io::Result<()> {
    *calls += 1;
    match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN)? {
        0 => Ok(()),
        _ => Err(errno(code)),
    }
}

/// The check of a stated kind ([`Peeker::with_kind`]): that the socket is a stream the
/// peeker's reads cannot lose bytes of, and not a listening one. TCP: one `getsockopt`
/// (`TCP_INFO`'s state, which only TCP and MPTCP sockets answer); MPTCP: `SO_PROTOCOL` (TCP
/// or MPTCP) and `SO_ACCEPTCONN`; AF_UNIX: `SO_TYPE` (a stream) and `SO_ACCEPTCONN`.
/// `EPROTOTYPE` for a socket that is not what was stated; a listening one fails as in
/// [`classify`]. `EBADF` and `ENOTSOCK` come through.
pub(super) fn check_stated(
    fd: BorrowedFd<'_>,
    kind: StreamKind,
    calls: &mut u64,
) -> io::Result<()> {
    let wrong = || errno(libc::EPROTOTYPE);
    let pass = |e: io::Error| match e.raw_os_error() {
        Some(libc::EBADF | libc::ENOTSOCK) => e,
        _ => wrong(),
    };
    match kind {
        StreamKind::Tcp4 | StreamKind::Tcp6 => {
            *calls += 1;
            match sys::tcp_state(fd).map_err(pass)? {
                sys::TCP_LISTEN => Err(errno(libc::ENOTCONN)),
                _ => Ok(()),
            }
        }
        StreamKind::Mptcp4 | StreamKind::Mptcp6 => {
            *calls += 1;
            // An MPTCP listener may hand out plain TCP sockets (a peer without MPTCP).
            match sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? {
                libc::IPPROTO_TCP | libc::IPPROTO_MPTCP => {}
                _ => return Err(wrong()),
            }
            refuse_listener(fd, calls, libc::ENOTCONN)
        }
        StreamKind::Unix => {
            *calls += 1;
            if sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)? != libc::SOCK_STREAM {
                return Err(wrong());
            }
            refuse_listener(fd, calls, libc::EINVAL)
        }
    }
}

pub(super) fn is_eopnotsupp(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EOPNOTSUPP)
}
