//! What this kernel offers, found by trying on throwaway sockets, never by parsing the
//! kernel version (seccomp, sysctls and backports make version numbers lie).

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use libc::c_int;

use crate::sys::{self, SO_PEEK_OFF, TCP_ZEROCOPY_RECEIVE};

/// Capabilities of the running kernel, as [`probe`] found them.
///
/// Shared with C as `lowcopy_caps` (`#[repr(C)]`; a `bool` is C's `bool`); fields are only
/// ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    // doc-source: caps.peek_off_tcp4
    /// `SO_PEEK_OFF` on TCP over IPv4 (Linux 6.9, 05ea491641d3).
    // doc-end
    pub peek_off_tcp4: bool,
    // doc-source: caps.peek_off_tcp6
    /// `SO_PEEK_OFF` on TCP over IPv6 (Linux 6.12, be9a4fb831b8).
    // doc-end
    pub peek_off_tcp6: bool,
    // doc-source: caps.peek_off_unix
    /// `SO_PEEK_OFF` on AF_UNIX stream (Linux 3.4).
    // doc-end
    pub peek_off_unix: bool,
    // doc-source: caps.peek_off_mptcp
    /// `SO_PEEK_OFF` on MPTCP (not in any kernel so far).
    // doc-end
    pub peek_off_mptcp: bool,
    // doc-source: caps.zerocopy_tcp
    /// `SO_ZEROCOPY` accepted on a TCP socket (Linux 4.14).
    // doc-end
    pub zerocopy_tcp: bool,
    // doc-source: caps.zerocopy_udp
    /// `SO_ZEROCOPY` accepted on a UDP socket (Linux 5.0).
    // doc-end
    pub zerocopy_udp: bool,
    // doc-source: caps.uring_send_zc
    /// io_uring `IORING_OP_SEND_ZC` (Linux 6.0); false when io_uring is disabled or filtered.
    // doc-end
    pub uring_send_zc: bool,
    // doc-source: caps.uring_sendmsg_zc
    /// io_uring `IORING_OP_SENDMSG_ZC` (Linux 6.1).
    // doc-end
    pub uring_sendmsg_zc: bool,
    // doc-source: caps.tcp_zerocopy_receive_size
    /// Bytes of `struct tcp_zerocopy_receive` the kernel knows (16 on 4.18, 64 since 5.12);
    /// 0 when `TCP_ZEROCOPY_RECEIVE` is absent.
    // doc-end
    pub tcp_zerocopy_receive_size: u32,
}

/// Probes the running kernel. Creates and closes a few sockets (and a loopback TCP
/// connection for `TCP_ZEROCOPY_RECEIVE`) and one io_uring instance; takes well under a
/// millisecond. A capability that cannot be tried (its socket cannot be made, io_uring is
/// disabled) reads as absent.
///
/// ```
/// let caps = lowcopy::probe()?;
/// println!("SO_PEEK_OFF on TCP/IPv4: {}", caps.peek_off_tcp4);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// Only when no socket at all can be created: `EMFILE`, `ENFILE`, `ENOMEM`.
pub fn probe() -> io::Result<Caps> {
    let tcp4 = sys::socket(libc::AF_INET, libc::SOCK_STREAM, 0)?;
    // On a thread of its own: tearing the probe's ring down queues io_uring task work on the
    // thread that made it, which ends that thread's next blocking socket call with EINTR
    // when the socket has a timeout (SO_RCVTIMEO: sock_intr_errno), though no signal came.
    // Found by the behaviour tables: every blocking peek after a probe failed so.
    let (uring_send_zc, uring_sendmsg_zc) = std::thread::scope(
        |s| match std::thread::Builder::new().spawn_scoped(s, probe_uring) {
            Ok(t) => t.join().unwrap_or((false, false)),
            Err(_) => probe_uring(),
        },
    );
    Ok(Caps {
        peek_off_tcp4: accepts(&Some(tcp4), SO_PEEK_OFF, 0),
        peek_off_tcp6: accepts(&fresh(libc::AF_INET6, libc::SOCK_STREAM, 0), SO_PEEK_OFF, 0),
        peek_off_unix: accepts(&fresh(libc::AF_UNIX, libc::SOCK_STREAM, 0), SO_PEEK_OFF, 0),
        peek_off_mptcp: accepts(
            &fresh(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
            SO_PEEK_OFF,
            0,
        ),
        zerocopy_tcp: accepts(
            &fresh(libc::AF_INET, libc::SOCK_STREAM, 0),
            libc::SO_ZEROCOPY,
            1,
        ),
        zerocopy_udp: accepts(
            &fresh(libc::AF_INET, libc::SOCK_DGRAM, 0),
            libc::SO_ZEROCOPY,
            1,
        ),
        uring_send_zc,
        uring_sendmsg_zc,
        tcp_zerocopy_receive_size: probe_zerocopy_receive(),
    })
}

fn fresh(domain: c_int, ty: c_int, proto: c_int) -> Option<OwnedFd> {
    sys::socket(domain, ty, proto).ok()
}

fn accepts(fd: &Option<OwnedFd>, name: c_int, val: c_int) -> bool {
    fd.as_ref()
        .is_some_and(|fd| sys::setsockopt_int(fd.as_fd(), libc::SOL_SOCKET, name, val).is_ok())
}

pub(crate) fn probe_uring() -> (bool, bool) {
    let Ok(ring) = io_uring::IoUring::new(2) else {
        return (false, false);
    };
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_err() {
        return (false, false);
    }
    (
        probe.is_supported(io_uring::opcode::SendZc::CODE),
        probe.is_supported(io_uring::opcode::SendMsgZc::CODE),
    )
}

/// Asks for a zero-length mapping on a connected socket: the kernel validates the request,
/// maps nothing and reports in the returned optlen how much of the struct it knows. Kernels
/// 4.18 to 5.6 take exactly the 16-byte struct and refuse any other size with EINVAL: asked
/// again with 16.
fn probe_zerocopy_receive() -> u32 {
    let Ok((_client, server)) = sys::tcp_loopback_pair() else {
        return 0;
    };
    let mut zc = [0u8; 64];
    for len in [64, 16] {
        match sys::getsockopt_bytes(
            server.as_fd(),
            libc::IPPROTO_TCP,
            TCP_ZEROCOPY_RECEIVE,
            &mut zc[..len],
        ) {
            Ok(got) => return got as u32,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => continue,
            Err(_) => return 0,
        }
    }
    0
}
