//! Socket addresses as the kernel takes them.

use std::net::SocketAddr;

/// A `SocketAddr` as the kernel takes it.
pub(super) enum RawAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl From<&SocketAddr> for RawAddr {
    fn from(a: &SocketAddr) -> Self {
        match a {
            SocketAddr::V4(a) => RawAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => RawAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }
}

impl RawAddr {
    pub(super) fn as_ptr(&self) -> *const libc::c_void {
        match self {
            RawAddr::V4(a) => (a as *const libc::sockaddr_in).cast(),
            RawAddr::V6(a) => (a as *const libc::sockaddr_in6).cast(),
        }
    }

    pub(super) fn len(&self) -> libc::socklen_t {
        (match self {
            RawAddr::V4(_) => std::mem::size_of::<libc::sockaddr_in>(),
            RawAddr::V6(_) => std::mem::size_of::<libc::sockaddr_in6>(),
        }) as libc::socklen_t
    }
}
