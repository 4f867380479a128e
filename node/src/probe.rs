//! `probe()`: what the running kernel offers.

use napi::bindgen_prelude::Unknown;
use napi::Env;
use napi_derive::napi;

use crate::error::OrThrow;

/// Capabilities of the running kernel, found by trying on throwaway sockets (see the core's
/// `lowcopy::Caps`).
#[napi(object)]
pub struct Caps {
    // doc-copy: caps.peek_off_tcp4
    /// `SO_PEEK_OFF` on TCP over IPv4 (Linux 6.9, 05ea491641d3).
    // doc-end
    pub peek_off_tcp4: bool,
    // doc-copy: caps.peek_off_tcp6
    /// `SO_PEEK_OFF` on TCP over IPv6 (Linux 6.12, be9a4fb831b8).
    // doc-end
    pub peek_off_tcp6: bool,
    // doc-copy: caps.peek_off_unix
    /// `SO_PEEK_OFF` on AF_UNIX stream (Linux 3.4).
    // doc-end
    pub peek_off_unix: bool,
    // doc-copy: caps.peek_off_mptcp
    /// `SO_PEEK_OFF` on MPTCP (not in any kernel so far).
    // doc-end
    pub peek_off_mptcp: bool,
    // doc-copy: caps.zerocopy_tcp
    /// `SO_ZEROCOPY` accepted on a TCP socket (Linux 4.14).
    // doc-end
    pub zerocopy_tcp: bool,
    // doc-copy: caps.zerocopy_udp
    /// `SO_ZEROCOPY` accepted on a UDP socket (Linux 5.0).
    // doc-end
    pub zerocopy_udp: bool,
    // doc-copy: caps.uring_send_zc
    /// io_uring `IORING_OP_SEND_ZC` (Linux 6.0); false when io_uring is disabled or filtered.
    // doc-end
    pub uring_send_zc: bool,
    // doc-copy: caps.uring_sendmsg_zc
    /// io_uring `IORING_OP_SENDMSG_ZC` (Linux 6.1).
    // doc-end
    pub uring_sendmsg_zc: bool,
    // doc-copy: caps.tcp_zerocopy_receive_size
    /// Bytes of `struct tcp_zerocopy_receive` the kernel knows (16 on 4.18, 64 since 5.12); 0 when
    /// `TCP_ZEROCOPY_RECEIVE` is absent.
    // doc-end
    pub tcp_zerocopy_receive_size: u32,
}

mirror!(Caps from lowcopy::Caps { peek_off_tcp4, peek_off_tcp6, peek_off_unix, peek_off_mptcp,
    zerocopy_tcp, zerocopy_udp, uring_send_zc, uring_sendmsg_zc, tcp_zerocopy_receive_size });

/// Probes the running kernel (a few throwaway sockets, one loopback connection and one
/// io_uring instance; well under a millisecond). Throws only when no socket at all can be
/// created (`EMFILE`, ...).
#[napi(catch_unwind)]
pub fn probe(env: Env) -> napi::Result<Caps> {
    let c = lowcopy::probe().or_throw(&env, "probe")?;
    Ok((&c).into())
}

/// The errno name Node uses for `errno` (positive or negative): `errnoName(11) === 'EAGAIN'`.
#[napi(catch_unwind, ts_args_type = "errno: number")]
pub fn errno_name(env: Env, errno: Unknown) -> napi::Result<String> {
    let errno = crate::args::int32(&env, &errno, "errno")?;
    let n = i32::try_from(errno.unsigned_abs()).unwrap_or(i32::MAX);
    Ok(crate::error::errno_name(n).to_string())
}
