//! `probe()`: what the running kernel offers.

use napi::Env;
use napi_derive::napi;

use crate::error::OrThrow;

/// Capabilities of the running kernel, found by trying on throwaway sockets (see the core's
/// `lowcopy::Caps`).
#[napi(object)]
pub struct Caps {
    /// `SO_PEEK_OFF` on TCP over IPv4 (Linux 6.9).
    pub peek_off_tcp4: bool,
    /// `SO_PEEK_OFF` on TCP over IPv6 (Linux 6.12).
    pub peek_off_tcp6: bool,
    /// `SO_PEEK_OFF` on AF_UNIX stream sockets (Linux 3.4).
    pub peek_off_unix: bool,
    /// `SO_PEEK_OFF` on MPTCP (no kernel so far).
    pub peek_off_mptcp: bool,
    /// `SO_ZEROCOPY` on TCP (Linux 4.14).
    pub zerocopy_tcp: bool,
    /// `SO_ZEROCOPY` on UDP (Linux 5.0).
    pub zerocopy_udp: bool,
    /// io_uring `IORING_OP_SEND_ZC` (Linux 6.0); false when io_uring is disabled or filtered.
    pub uring_send_zc: bool,
    /// io_uring `IORING_OP_SENDMSG_ZC` (Linux 6.1).
    pub uring_sendmsg_zc: bool,
    /// Bytes of `struct tcp_zerocopy_receive` the kernel knows (64 since 5.12); 0 without
    /// `TCP_ZEROCOPY_RECEIVE`.
    pub tcp_zerocopy_receive_size: u32,
}

/// Probes the running kernel (a few throwaway sockets, one loopback connection and one
/// io_uring instance; well under a millisecond). Throws only when no socket at all can be
/// created (`EMFILE`, ...).
#[napi(catch_unwind)]
pub fn probe(env: Env) -> napi::Result<Caps> {
    let c = lowcopy::probe().or_throw(&env, "probe")?;
    Ok(Caps {
        peek_off_tcp4: c.peek_off_tcp4,
        peek_off_tcp6: c.peek_off_tcp6,
        peek_off_unix: c.peek_off_unix,
        peek_off_mptcp: c.peek_off_mptcp,
        zerocopy_tcp: c.zerocopy_tcp,
        zerocopy_udp: c.zerocopy_udp,
        uring_send_zc: c.uring_send_zc,
        uring_sendmsg_zc: c.uring_sendmsg_zc,
        tcp_zerocopy_receive_size: c.tcp_zerocopy_receive_size,
    })
}

/// The errno name Node uses for `errno` (positive or negative): `errnoName(11) === 'EAGAIN'`.
#[napi(catch_unwind)]
pub fn errno_name(errno: i32) -> String {
    crate::error::errno_name(errno.abs()).to_string()
}
