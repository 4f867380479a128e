//! `probe()`: what the running kernel offers.

use pyo3::prelude::*;

use crate::util::{guard, IoResultExt};

/// What the running kernel offers, as `probe()` found it by trying on throwaway sockets
/// (never by parsing the kernel version: seccomp, sysctls and backports make versions lie).
#[pyclass(frozen, eq, module = "lowcopy._lowcopy")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    // doc-copy: caps.peek_off_tcp4
    /// `SO_PEEK_OFF` on TCP over IPv4 (Linux 6.9, 05ea491641d3).
    // doc-end
    #[pyo3(get)]
    peek_off_tcp4: bool,
    // doc-copy: caps.peek_off_tcp6
    /// `SO_PEEK_OFF` on TCP over IPv6 (Linux 6.12, be9a4fb831b8).
    // doc-end
    #[pyo3(get)]
    peek_off_tcp6: bool,
    // doc-copy: caps.peek_off_unix
    /// `SO_PEEK_OFF` on AF_UNIX stream (Linux 3.4).
    // doc-end
    #[pyo3(get)]
    peek_off_unix: bool,
    // doc-copy: caps.peek_off_mptcp
    /// `SO_PEEK_OFF` on MPTCP (not in any kernel so far).
    // doc-end
    #[pyo3(get)]
    peek_off_mptcp: bool,
    // doc-copy: caps.zerocopy_tcp
    /// `SO_ZEROCOPY` accepted on a TCP socket (Linux 4.14).
    // doc-end
    #[pyo3(get)]
    zerocopy_tcp: bool,
    // doc-copy: caps.zerocopy_udp
    /// `SO_ZEROCOPY` accepted on a UDP socket (Linux 5.0).
    // doc-end
    #[pyo3(get)]
    zerocopy_udp: bool,
    // doc-copy: caps.uring_send_zc
    /// io_uring `IORING_OP_SEND_ZC` (Linux 6.0); false when io_uring is disabled or filtered.
    // doc-end
    #[pyo3(get)]
    uring_send_zc: bool,
    // doc-copy: caps.uring_sendmsg_zc
    /// io_uring `IORING_OP_SENDMSG_ZC` (Linux 6.1).
    // doc-end
    #[pyo3(get)]
    uring_sendmsg_zc: bool,
    // doc-copy: caps.tcp_zerocopy_receive_size
    /// Bytes of `struct tcp_zerocopy_receive` the kernel knows (16 on 4.18, 64 since 5.12); 0 when
    /// `TCP_ZEROCOPY_RECEIVE` is absent.
    // doc-end
    #[pyo3(get)]
    tcp_zerocopy_receive_size: u32,
}

const FIELDS: [&str; 9] = [
    "peek_off_tcp4",
    "peek_off_tcp6",
    "peek_off_unix",
    "peek_off_mptcp",
    "zerocopy_tcp",
    "zerocopy_udp",
    "uring_send_zc",
    "uring_sendmsg_zc",
    "tcp_zerocopy_receive_size",
];

#[pymethods]
impl Caps {
    fn __repr__(&self) -> String {
        let v = self.values();
        let parts: Vec<String> = FIELDS
            .iter()
            .zip(v.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("Caps({})", parts.join(", "))
    }

    /// The capabilities as a dict, field name to value, in declaration order.
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("peek_off_tcp4", self.peek_off_tcp4)?;
        d.set_item("peek_off_tcp6", self.peek_off_tcp6)?;
        d.set_item("peek_off_unix", self.peek_off_unix)?;
        d.set_item("peek_off_mptcp", self.peek_off_mptcp)?;
        d.set_item("zerocopy_tcp", self.zerocopy_tcp)?;
        d.set_item("zerocopy_udp", self.zerocopy_udp)?;
        d.set_item("uring_send_zc", self.uring_send_zc)?;
        d.set_item("uring_sendmsg_zc", self.uring_sendmsg_zc)?;
        d.set_item("tcp_zerocopy_receive_size", self.tcp_zerocopy_receive_size)?;
        Ok(d)
    }
}

impl Caps {
    fn values(&self) -> [String; 9] {
        let b = |v: bool| if v { "True" } else { "False" }.to_string();
        [
            b(self.peek_off_tcp4),
            b(self.peek_off_tcp6),
            b(self.peek_off_unix),
            b(self.peek_off_mptcp),
            b(self.zerocopy_tcp),
            b(self.zerocopy_udp),
            b(self.uring_send_zc),
            b(self.uring_sendmsg_zc),
            self.tcp_zerocopy_receive_size.to_string(),
        ]
    }
}

impl From<lowcopy::Caps> for Caps {
    fn from(c: lowcopy::Caps) -> Self {
        Caps {
            peek_off_tcp4: c.peek_off_tcp4,
            peek_off_tcp6: c.peek_off_tcp6,
            peek_off_unix: c.peek_off_unix,
            peek_off_mptcp: c.peek_off_mptcp,
            zerocopy_tcp: c.zerocopy_tcp,
            zerocopy_udp: c.zerocopy_udp,
            uring_send_zc: c.uring_send_zc,
            uring_sendmsg_zc: c.uring_sendmsg_zc,
            tcp_zerocopy_receive_size: c.tcp_zerocopy_receive_size,
        }
    }
}

/// Probes the running kernel: creates and closes a few sockets (and a loopback TCP
/// connection for `TCP_ZEROCOPY_RECEIVE`) and one io_uring instance; well under a
/// millisecond. Raises `OSError` only when no socket at all can be created (`EMFILE`, ...).
#[pyfunction]
fn probe(py: Python<'_>) -> PyResult<Caps> {
    guard(|| Ok(py.detach(lowcopy::probe).py()?.into()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Caps>()?;
    m.add_function(wrap_pyfunction!(probe, m)?)?;
    Ok(())
}
