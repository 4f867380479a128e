//! Runs the receive-side behaviour table tests/scenarios/rx.json against the Rust core
//! (low-water mark, recv_atleast, zero-copy receive). The other bindings run the same table.

mod common;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use common::*;
use lowcopy::{Flags, RecvStats, ZeroCopyReceiver};
use serde_json::Value;

/// tcp_rmem[2] / 2: the most SO_RCVLOWAT TCP keeps on an unlocked buffer.
fn rmem_cap() -> u64 {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").unwrap();
    s.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap() / 2
}

fn ename(code: i32) -> &'static str {
    match code {
        libc::ENOTCONN => "ENOTCONN",
        libc::EINTR => "EINTR",
        c => errno_name(c),
    }
}

/// One scenario run. Every fd lives in `fds` until the run ends; the receiver borrows the
/// current one and is dropped first.
struct Run {
    fd: libc::c_int,
    fds: Vec<OwnedFd>,
    listener: Option<OwnedFd>,
    peer: Option<OwnedFd>,
    zcrx: Option<ZeroCopyReceiver<BorrowedFd<'static>>>,
    receiver: Option<lowcopy::Receiver<BorrowedFd<'static>>>,
    /// Options for the clients `accept` connects.
    opts: TcpOpts,
    sent: usize,
    received: usize,
    writers: Vec<std::thread::JoinHandle<()>>,
}

impl Run {
    fn fd(&self) -> BorrowedFd<'static> {
        // SAFETY: `self.fd` is one of `self.fds` (open until the run ends, after the receiver
        // is dropped), or for the "closed" case a number no fd has (the kernel says EBADF).
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }

    fn peer(&self) -> BorrowedFd<'_> {
        self.peer.as_ref().expect("no peer").as_fd()
    }

    fn resolve(&self, v: &Value, ctx: &str) -> u64 {
        match v {
            Value::Number(n) => n.as_u64().unwrap(),
            Value::String(s) if s == "rmem_cap" => rmem_cap(),
            Value::String(s) if s == "rcvbuf_half" => {
                get_int(self.fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap() as u64 / 2
            }
            v => panic!("{ctx}: bad number {v}"),
        }
    }

    fn spawn_writer(&mut self, f: impl FnOnce(BorrowedFd<'_>) + Send + 'static) {
        let peer = self.peer().try_clone_to_owned().unwrap();
        self.writers
            .push(std::thread::spawn(move || f(peer.as_fd())));
    }

    /// Checks a result and the bytes against the step's expectations; returns the bytes
    /// received (0 on an expected error).
    fn expect(&mut self, step: &Value, r: io::Result<usize>, data: &[u8], ctx: &str) -> usize {
        if let Some(e) = step.get("expect_err") {
            let got = r.as_ref().err().and_then(|e| e.raw_os_error()).map(ename);
            assert_eq!(got, e.as_str(), "{ctx}: want error {e}, got {r:?}");
            return 0;
        }
        let n = r.unwrap_or_else(|e| panic!("{ctx}: unexpected error {e}"));
        if let Some(want) = step.get("expect_ret") {
            assert_eq!(n as u64, self.resolve(want, ctx), "{ctx}: return value");
        }
        if let Some(want) = step.get("expect") {
            let want = want.as_str().unwrap().as_bytes();
            assert_eq!(
                &data[..n],
                want,
                "{ctx}: got {:?}",
                String::from_utf8_lossy(&data[..n])
            );
        }
        if step.get("expect_pattern").and_then(Value::as_bool) == Some(true) {
            assert!(
                data[..n] == pattern(self.received, n)[..],
                "{ctx}: wrong bytes at stream position {}",
                self.received
            );
        }
        n
    }

    /// `expect` for a receive: the bytes move the stream position on.
    fn expect_data(&mut self, step: &Value, r: io::Result<usize>, data: &[u8], ctx: &str) {
        self.received += self.expect(step, r, data, ctx);
    }

    /// `cpu_max_ms`: the CPU time the call may use. A call that sleeps while it waits uses
    /// almost none; one that spins uses its whole wait.
    fn cpu_bound(step: &Value, cpu: Duration, ctx: &str) {
        if let Some(ms) = step.get("cpu_max_ms").and_then(Value::as_u64) {
            assert!(
                cpu <= Duration::from_millis(ms),
                "{ctx}: used {cpu:?} of CPU, want <= {ms} ms (spinning while it waited?)"
            );
        }
    }

    fn elapsed_bounds(step: &Value, t: Duration, ctx: &str) {
        if let Some(ms) = step.get("min_ms").and_then(Value::as_u64) {
            assert!(
                t >= Duration::from_millis(ms),
                "{ctx}: returned after {t:?}, want >= {ms} ms"
            );
        }
        if let Some(ms) = step.get("max_ms").and_then(Value::as_u64) {
            assert!(
                t <= Duration::from_millis(ms),
                "{ctx}: returned after {t:?}, want <= {ms} ms"
            );
        }
    }

    fn step(&mut self, step: &Value, ctx: &str) {
        let op = step["op"].as_str().unwrap();
        let u = |k: &str| {
            step[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{ctx}: `{k}` missing")) as usize
        };
        match op {
            "set_rcvlowat" => {
                let r = lowcopy::set_rcvlowat(self.fd(), u("bytes"));
                self.expect(step, r, &[], ctx);
            }
            "expect_rcvlowat" => {
                let v = get_int(self.fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap();
                assert_eq!(
                    v as u64,
                    self.resolve(&step["value"], ctx),
                    "{ctx}: SO_RCVLOWAT"
                );
            }
            "expect_rcvbuf_min" => {
                let v = get_int(self.fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
                assert!(
                    v as u64 >= self.resolve(&step["value"], ctx),
                    "{ctx}: SO_RCVBUF {v}"
                );
            }
            "accept" => {
                let l = self.listener.as_ref().expect("not a listener");
                // The client connects now: a socket takes the listener's options when its
                // handshake completes, not at accept().
                self.peer = Some(tcp_connect(l.as_fd(), self.opts));
                // SAFETY: accept with NULL address is allowed; the fd is owned right away.
                let s = check(unsafe {
                    libc::accept(l.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut())
                })
                .unwrap();
                // SAFETY: fresh fd from accept.
                let s = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(s) };
                set_timeval(s.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(3));
                self.fd = s.as_raw_fd();
                self.fds.push(s);
            }
            "send" => {
                let d = step["data"].as_str().unwrap().as_bytes();
                write_all(self.peer(), d);
                self.sent += d.len();
            }
            "send_pattern" => {
                let data = pattern(self.sent, u("len"));
                self.sent += data.len();
                self.spawn_writer(move |fd| write_all(fd, &data));
            }
            "send_trickle" => {
                let (len, pieces, ms) = (u("len"), u("pieces"), u("ms") as u64);
                let data = pattern(self.sent, len);
                self.sent += len;
                self.spawn_writer(move |fd| {
                    for c in data.chunks(len.div_ceil(pieces)) {
                        write_all(fd, c);
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                });
            }
            "send_later" => {
                let data = match step.get("data") {
                    Some(d) => d.as_str().unwrap().as_bytes().to_vec(),
                    None => pattern(self.sent, u("len")),
                };
                self.sent += data.len();
                let ms = u("ms") as u64;
                self.spawn_writer(move |fd| {
                    std::thread::sleep(Duration::from_millis(ms));
                    write_all(fd, &data);
                });
            }
            "send_zc_pattern" => {
                let data = pattern(self.sent, u("len"));
                self.sent += data.len();
                let sizes: Vec<usize> = step["sizes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize)
                    .collect();
                self.spawn_writer(move |fd| send_zerocopy(fd, &data, &sizes));
            }
            "send_datagrams" => {
                for d in step["list"].as_array().unwrap() {
                    let d = d.as_str().unwrap().as_bytes();
                    // SAFETY: `d` is readable for its length.
                    let n = unsafe {
                        libc::send(self.peer().as_raw_fd(), d.as_ptr().cast(), d.len(), 0)
                    };
                    assert_eq!(n, d.len() as isize, "{ctx}: send datagram");
                }
            }
            "wait_queued" => wait_queued(self.fd(), u("bytes")),
            "errqueue" => match step["kind"].as_str().unwrap() {
                "icmp" => {
                    // UDP: the peer goes away, our next datagram draws an ICMP port
                    // unreachable: ECONNREFUSED pending (SO_ERROR) and, with IP_RECVERR,
                    // an error-queue entry that stays.
                    set_int(self.fd(), libc::IPPROTO_IP, libc::IP_RECVERR, 1);
                    self.peer = None;
                    // SAFETY: one readable byte.
                    let n = unsafe { libc::send(self.fd, b"e".as_ptr().cast(), 1, 0) };
                    assert_eq!(n, 1, "{ctx}: send: {}", io::Error::last_os_error());
                    wait_pollerr(self.fd(), ctx);
                }
                kind => errqueue_entry(self.fd(), kind, ctx),
            },
            "sleep" => std::thread::sleep(Duration::from_millis(u("ms") as u64)),
            "shutdown_peer" => {
                // After the bytes still being written, without waiting here for a reader.
                let before: Vec<_> = self.writers.drain(..).collect();
                self.spawn_writer(move |fd| {
                    for w in before {
                        w.join().unwrap();
                    }
                    shutdown_write(fd);
                });
            }
            "reset_peer" => {
                self.join_writers();
                reset(self.peer.take().unwrap());
                std::thread::sleep(Duration::from_millis(20));
            }
            "receiver_new" => {
                let r = lowcopy::Receiver::new(self.fd());
                if step.get("expect_err").is_some() {
                    self.expect(step, r.map(|_| 0), &[], ctx);
                } else {
                    self.receiver = Some(r.unwrap_or_else(|e| panic!("{ctx}: {e}")));
                }
            }
            "receiver_free" => self.receiver = None,
            "recv_atleast" | "receiver_recv" => {
                let len = u("len");
                let mut buf = vec![0u8; len];
                let timeout = match step["timeout_ms"].as_i64().unwrap() {
                    -1 => None,
                    ms => Some(Duration::from_millis(ms as u64)),
                };
                let mut s = RecvStats::default();
                let (t0, cpu0) = (Instant::now(), thread_cpu());
                let r = if op == "recv_atleast" {
                    lowcopy::recv_atleast_with_stats(self.fd(), &mut buf, u("min"), timeout, &mut s)
                } else {
                    // The call's own counters: the receiver's after minus before.
                    let rx = self
                        .receiver
                        .as_mut()
                        .expect("receiver_recv before receiver_new");
                    let before = rx.stats();
                    let r = rx.recv_atleast(&mut buf, u("min"), timeout);
                    let after = rx.stats();
                    s = RecvStats {
                        calls: after.calls - before.calls,
                        syscalls: after.syscalls - before.syscalls,
                        wakeups: after.wakeups - before.wakeups,
                        early_wakeups: after.early_wakeups - before.early_wakeups,
                        timeouts: after.timeouts - before.timeouts,
                        lowat_changes: after.lowat_changes - before.lowat_changes,
                        bytes: after.bytes - before.bytes,
                    };
                    r
                };
                let (t, cpu) = (t0.elapsed(), thread_cpu() - cpu0);
                if let Some(v) = step.get("syscalls").and_then(Value::as_u64) {
                    assert_eq!(s.syscalls, v, "{ctx}: syscalls of the call: {s:?}");
                }
                self.expect_data(step, r, &buf, ctx);
                Self::elapsed_bounds(step, t, ctx);
                Self::cpu_bound(step, cpu, ctx);
                if let Some(max) = step.get("wakeups_max").and_then(Value::as_u64) {
                    assert!(
                        s.wakeups <= max,
                        "{ctx}: {} wakeups, want <= {max}: {s:?}",
                        s.wakeups
                    );
                }
                if let Some(min) = step.get("wakeups_min").and_then(Value::as_u64) {
                    assert!(
                        s.wakeups >= min,
                        "{ctx}: {} wakeups, want >= {min}: {s:?}",
                        s.wakeups
                    );
                }
                if let Some(v) = step.get("lowat_changes").and_then(Value::as_u64) {
                    assert_eq!(s.lowat_changes, v, "{ctx}: SO_RCVLOWAT changes: {s:?}");
                }
            }
            "read" => {
                let mut buf = vec![0u8; u("len")];
                let fd = self.fd().try_clone_to_owned().unwrap();
                let r = io::Read::read(&mut std::fs::File::from(fd), &mut buf);
                self.expect_data(step, r, &buf, ctx);
            }
            "set_rcvtimeo_ms" => set_timeval(
                self.fd(),
                libc::SO_RCVTIMEO,
                Duration::from_millis(u("ms") as u64),
            ),
            "set_nonblocking" => {
                // SAFETY: F_GETFL/F_SETFL take no pointers.
                let fl = check(unsafe { libc::fcntl(self.fd, libc::F_GETFL) }).unwrap();
                // SAFETY: as above.
                check(unsafe { libc::fcntl(self.fd, libc::F_SETFL, fl | libc::O_NONBLOCK) })
                    .unwrap();
            }
            "set_peek_off" => set_int(self.fd(), libc::SOL_SOCKET, 42, u("value") as i32),
            "expect_peek_off" => {
                let v = get_int(self.fd(), libc::SOL_SOCKET, 42).unwrap();
                assert_eq!(
                    v as u64,
                    self.resolve(&step["value"], ctx),
                    "{ctx}: SO_PEEK_OFF"
                );
            }
            "peek" => {
                let len = u("len");
                let mut b = vec![0u8; len];
                // SAFETY: `b` is writable for `len` bytes.
                let n = unsafe {
                    libc::recv(
                        self.fd,
                        b.as_mut_ptr().cast(),
                        len,
                        libc::MSG_PEEK | libc::MSG_DONTWAIT,
                    )
                };
                assert_eq!(n, len as isize, "{ctx}: peek");
                let at = u("expect_pattern_at");
                assert!(
                    b == pattern(at, len),
                    "{ctx}: peeked bytes are not stream bytes {at}.."
                );
            }
            "zcrx_new" => {
                self.zcrx = None;
                let r = ZeroCopyReceiver::new(self.fd(), u("window"));
                if step.get("expect_err").is_some() {
                    self.expect(step, r.map(|_| 0), &[], ctx);
                    return;
                }
                let z = r.unwrap_or_else(|e| panic!("{ctx}: zcrx_new: {e}"));
                if let Some(w) = step.get("expect_window") {
                    assert_eq!(z.window() as u64, w.as_u64().unwrap(), "{ctx}: window");
                }
                self.zcrx = Some(z);
            }
            "zcrx_free" => self.zcrx = None,
            "zcrx_set_timeout" => {
                let ms = step["ms"].as_i64().unwrap();
                let t = (ms >= 0).then(|| Duration::from_millis(ms as u64));
                self.zcrx.as_mut().expect("no receiver").set_timeout(t);
            }
            "zcrx_peek_off_tracking" => {
                let on = step["on"].as_bool().unwrap();
                self.zcrx
                    .as_mut()
                    .expect("no receiver")
                    .set_peek_off_tracking(on);
            }
            "zcrx_recv" => {
                let flags = if step.get("dontwait").and_then(Value::as_bool) == Some(true) {
                    Flags::DONTWAIT
                } else {
                    Flags::NONE
                };
                let z = self.zcrx.as_mut().expect("zcrx_recv before zcrx_new");
                let (t0, cpu0) = (Instant::now(), thread_cpu());
                let (r, data, mapped) = match z.recv(flags) {
                    Ok(c) => (Ok(c.data.len()), c.data.to_vec(), c.mapped),
                    Err(e) => (Err(e), Vec::new(), false),
                };
                let (t, cpu) = (t0.elapsed(), thread_cpu() - cpu0);
                Self::cpu_bound(step, cpu, ctx);
                if step.get("expect_eof").and_then(Value::as_bool) == Some(true) {
                    assert!(matches!(r, Ok(0)), "{ctx}: want end of stream, got {r:?}");
                }
                if r.as_ref().is_ok_and(|&n| n > 0) {
                    if let Some(m) = step.get("expect_mapped").and_then(Value::as_bool) {
                        assert_eq!(mapped, m, "{ctx}: mapped");
                    }
                }
                self.expect_data(step, r, &data, ctx);
                Self::elapsed_bounds(step, t, ctx);
            }
            "zcrx_drain" => self.zcrx_drain(step, u("bytes"), ctx),
            "zcrx_stat" => {
                let s = self.zcrx.as_ref().expect("no receiver").stats();
                let got = match step["field"].as_str().unwrap() {
                    "bytes_mapped" => s.bytes_mapped,
                    "bytes_copied" => s.bytes_copied,
                    "bytes_copybuf" => s.bytes_copybuf,
                    "chunks_mapped" => s.chunks_mapped,
                    "chunks_copied" => s.chunks_copied,
                    "zc_calls" => s.zc_calls,
                    "zc_calls_unmapped" => s.zc_calls_unmapped,
                    "wakeups" => s.wakeups,
                    "peek_off_fixups" => s.peek_off_fixups,
                    f => panic!("{ctx}: unknown stat {f}"),
                };
                // A kernel whose struct tcp_zerocopy_receive has no copy buffer (before 5.11:
                // under 36 bytes, per the probe) reads every copied byte with recv.
                let no_copybuf = lowcopy::probe().unwrap().tcp_zerocopy_receive_size < 36;
                let value = match step.get("value_no_copybuf") {
                    Some(v) if no_copybuf => Some(v),
                    _ => step.get("value"),
                };
                if let Some(v) = value {
                    assert_eq!(got, v.as_u64().unwrap(), "{ctx}: {s:?}");
                }
                if let Some(v) = step.get("min") {
                    assert!(got >= v.as_u64().unwrap(), "{ctx}: {s:?}");
                }
                if let Some(v) = step.get("max") {
                    assert!(got <= v.as_u64().unwrap(), "{ctx}: {s:?}");
                }
            }
            o => panic!("{ctx}: unknown op {o}"),
        }
    }

    /// Receives `bytes` bytes (checking each against the pattern), then optionally end of
    /// stream; mapped + copied must equal what the receiver delivered.
    fn zcrx_drain(&mut self, step: &Value, bytes: usize, ctx: &str) {
        let z = self.zcrx.as_mut().expect("zcrx_drain before zcrx_new");
        let before = z.stats();
        let t0 = Instant::now();
        let mut got = 0;
        while got < bytes {
            let c = z
                .recv(Flags::NONE)
                .unwrap_or_else(|e| panic!("{ctx}: after {got} of {bytes} bytes: {e}"));
            assert!(
                !c.is_eof(),
                "{ctx}: end of stream after {got} of {bytes} bytes"
            );
            let n = c.data.len();
            assert!(
                c.data == &pattern(self.received + got, n)[..],
                "{ctx}: wrong bytes at stream position {} (mapped {})",
                self.received + got,
                c.mapped
            );
            got += n;
        }
        assert_eq!(got, bytes, "{ctx}: more bytes than expected");
        if step.get("expect_eof").and_then(Value::as_bool) == Some(true) {
            let c = z
                .recv(Flags::NONE)
                .unwrap_or_else(|e| panic!("{ctx}: want end of stream: {e}"));
            assert!(
                c.is_eof(),
                "{ctx}: want end of stream, got {} bytes",
                c.data.len()
            );
        }
        Self::elapsed_bounds(step, t0.elapsed(), ctx);
        let s = z.stats();
        let delivered = s.bytes_mapped + s.bytes_copied - before.bytes_mapped - before.bytes_copied;
        assert_eq!(
            delivered, bytes as u64,
            "{ctx}: mapped + copied != received: {s:?}"
        );
        self.received += bytes;
    }

    fn join_writers(&mut self) {
        for w in self.writers.drain(..) {
            w.join().unwrap();
        }
    }
}

fn run_one(sc: &Value, transport: &str) {
    let ctx = format!("[{} | {transport}]", sc["name"].as_str().unwrap());
    let mss = sc.get("mss").and_then(Value::as_i64).map(|v| v as i32);
    let rcvbuf = sc
        .get("rcvbuf_lock")
        .and_then(Value::as_i64)
        .map(|v| v as i32);
    let tcp = |v6| {
        tcp_pair_opts(TcpOpts {
            v6,
            mss,
            listener_rcvbuf: rcvbuf,
            ..Default::default()
        })
    };
    let (sock, peer, listener) = match transport {
        "tcp4" | "tcp6" => {
            let p = tcp(transport == "tcp6");
            (Some(p.sock), Some(p.peer), None)
        }
        "listener4" | "listener6" => {
            let l = tcp_listener(TcpOpts {
                v6: transport == "listener6",
                mss,
                listener_rcvbuf: rcvbuf,
                ..Default::default()
            });
            (None, None, Some(l))
        }
        "unix" | "mptcp4" => {
            let p = pair(transport);
            (Some(p.sock), Some(p.peer), None)
        }
        "udp4" => {
            let p = udp_pair();
            (Some(p.sock), Some(p.peer), None)
        }
        "closed" | "file" => {
            let (keep, _) = odd_fd(transport);
            (keep, None, None)
        }
        "tcp4_unconnected" => {
            // SAFETY: plain socket(2); the result is checked before it is owned.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
            // SAFETY: a fresh fd that nothing else owns.
            (
                Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }),
                None,
                None,
            )
        }
        t => panic!("unknown transport {t}"),
    };
    let mut run = Run {
        fd: 1_000_000,
        fds: Vec::new(),
        listener: None,
        peer,
        zcrx: None,
        receiver: None,
        opts: TcpOpts {
            v6: transport.ends_with('6'),
            mss,
            ..Default::default()
        },
        sent: 0,
        received: 0,
        writers: Vec::new(),
    };
    if let Some(l) = listener {
        run.fd = l.as_raw_fd();
        run.listener = Some(l.try_clone().unwrap());
        run.fds.push(l);
    }
    if let Some(s) = sock {
        if transport == "tcp4" || transport == "tcp6" || transport == "file" {
            // The buffer was locked on the listener (before the handshake) for TCP.
        } else if let Some(b) = rcvbuf {
            set_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, b);
        }
        if transport != "file" {
            // A wrong blocking wait fails with EAGAIN instead of hanging the suite.
            set_timeval(s.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(3));
        }
        run.fd = s.as_raw_fd();
        run.fds.push(s);
    }
    for (i, step) in sc["steps"].as_array().unwrap().iter().enumerate() {
        run.step(step, &format!("{ctx} step {i} {}", step["op"]));
    }
    run.zcrx = None;
    run.receiver = None;
    run.join_writers();
}

#[test]
fn rx_scenarios() {
    run_table("rx.json", None, 51, |_, sc, t, _| run_one(sc, t));
}
