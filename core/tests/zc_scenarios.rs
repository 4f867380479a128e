//! Runs tests/scenarios/zc.json against the Rust core (the C, Python and Node runners run the
//! same table against their bindings), and tests/scenarios/zc_scale.json (the C runner runs it
//! too: its options and ops are the Rust and C APIs').

mod common;

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, Ipv6Addr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use common::*;
use lowcopy::zc::{Completion, ZcBackend, ZcOptions, ZeroCopySender, FALLBACK};
use lowcopy::Flags;
use serde_json::Value;

fn backend_of(s: &str) -> ZcBackend {
    match s {
        "auto" => ZcBackend::Auto,
        "errqueue" => ZcBackend::ErrQueue,
        "io_uring" => ZcBackend::IoUring,
        "copy" => ZcBackend::Copy,
        b => panic!("unknown backend {b}"),
    }
}

fn backend_name(b: ZcBackend) -> &'static str {
    match b {
        ZcBackend::Auto => "auto",
        ZcBackend::ErrQueue => "errqueue",
        ZcBackend::IoUring => "io_uring",
        ZcBackend::Copy => "copy",
    }
}

/// The sending socket, the receiving peer, and for unconnected UDP the peer's address.
struct Fds {
    sock: OwnedFd,
    peer: Option<OwnedFd>,
    dest: Option<std::net::SocketAddr>,
    datagram: bool,
}

fn fds(transport: &str) -> Fds {
    let udp = |v6: bool, connect: bool| {
        let (a, b) = if v6 {
            (
                UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap(),
                UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap(),
            )
        } else {
            (
                UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap(),
                UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap(),
            )
        };
        let dest = b.local_addr().unwrap();
        if connect {
            a.connect(dest).unwrap();
        }
        Fds {
            sock: a.into(),
            peer: Some(b.into()),
            dest: (!connect).then_some(dest),
            datagram: true,
        }
    };
    match transport {
        "udp4" => udp(false, true),
        "udp6" => udp(true, true),
        "udp4_unconnected" => udp(false, false),
        t => {
            let p = pair(t);
            Fds {
                sock: p.sock,
                peer: Some(p.peer),
                dest: None,
                datagram: false,
            }
        }
    }
}

struct Run<'a> {
    fd: BorrowedFd<'a>,
    transport: String,
    fds: Option<Fds>,
    backend: ZcBackend,
    zc: Option<ZeroCopySender<BorrowedFd<'a>>>,
    /// Bytes each send accepted, by user_data (only sends that returned > 0).
    sent: HashMap<u64, usize>,
    got: Vec<Completion>,
    /// Every buffer handed to a send stays alive and unmodified until the run ends.
    bufs: Vec<Vec<u8>>,
    stream_pos: usize,
    received: usize,
    /// SO_TIMESTAMPING reports are on: sends leave entries on the error queue.
    timestamping: bool,
    /// `drain_peer_later`'s reader: the stream position it reached.
    reader: Option<std::thread::JoinHandle<usize>>,
}

/// `cpu_max_ms`: the CPU time a call may use (one that spins while it waits uses it all).
fn cpu_bound(step: &Value, cpu: Duration, ctx: &str) {
    if let Some(ms) = step.get("cpu_max_ms").and_then(Value::as_u64) {
        assert!(
            cpu <= Duration::from_millis(ms),
            "{ctx}: used {cpu:?} of CPU, want <= {ms} ms (spinning while it waited?)"
        );
    }
}

/// Reads the stream on `fd` from position `from` up to `to`, checking the pattern; returns
/// `to`.
fn read_pattern(fd: BorrowedFd<'_>, mut from: usize, to: usize) -> usize {
    set_timeval(fd, libc::SO_RCVTIMEO, Duration::from_secs(5));
    let mut buf = vec![0u8; 1 << 20];
    while from < to {
        let want = buf.len().min(to - from);
        // SAFETY: buf is writable for `want` bytes.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), want, 0) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        assert!(
            n > 0,
            "peer read at {from} of {to}: {}",
            io::Error::last_os_error()
        );
        let n = n as usize;
        assert!(buf[..n] == pattern(from, n)[..], "wrong bytes at {from}");
        from += n;
    }
    to
}

fn errno_matches(step: &Value, r: &io::Result<usize>) -> bool {
    let got = r
        .as_ref()
        .err()
        .and_then(|e| e.raw_os_error())
        .map(errno_name);
    match &step["expect_err"] {
        Value::String(s) => got == Some(s.as_str()),
        Value::Array(a) => a.iter().any(|s| got == s.as_str()),
        _ => false,
    }
}

impl<'a> Run<'a> {
    fn zc(&mut self) -> &mut ZeroCopySender<BorrowedFd<'a>> {
        self.zc.as_mut().expect("scenario sends before `new`")
    }

    fn check(&self, step: &Value, r: io::Result<usize>, ctx: &str) -> usize {
        if step.get("expect_err").is_some() {
            assert!(
                errno_matches(step, &r),
                "{ctx}: want error {}, got {r:?}",
                step["expect_err"]
            );
            return 0;
        }
        let n = r.unwrap_or_else(|e| panic!("{ctx}: unexpected error {e}"));
        if let Some(w) = step.get("expect_ret") {
            assert_eq!(n as i64, w.as_i64().unwrap(), "{ctx}: return value");
        }
        n
    }

    /// A buffer of the stream pattern at the current position; kept alive for the run.
    fn data(&mut self, len: usize) -> usize {
        self.bufs.push(pattern(self.stream_pos, len));
        self.bufs.len() - 1
    }

    /// Iovecs over buffers kept in `self.bufs` (alive and unmodified until the run ends).
    fn iovs(&self, idx: &[usize]) -> Vec<libc::iovec> {
        idx.iter()
            .map(|&i| libc::iovec {
                iov_base: self.bufs[i].as_ptr() as *mut _,
                iov_len: self.bufs[i].len(),
            })
            .collect()
    }

    /// `flags`: the table's C value; `MSG_NOSIGNAL` is what Rust sends always do, anything
    /// but `MSG_DONTWAIT`/`MSG_MORE` is EINVAL from `Flags::from_raw`.
    fn send(&mut self, lens: &[usize], ud: u64, flags: i32, to: bool) -> io::Result<usize> {
        let flags = Flags::from_raw(flags & !libc::MSG_NOSIGNAL)?;
        // One buffer continuing the pattern, cut into the slices asked for.
        let b = self.data(lens.iter().sum());
        let buf = &self.bufs[b];
        let mut iov = Vec::new();
        let mut at = 0;
        for &l in lens {
            iov.push(IoSlice::new(&buf[at..at + l]));
            at += l;
        }
        let dest = to.then(|| {
            let fds = self.fds.as_ref().unwrap();
            fds.dest.expect("sendto needs unconnected UDP")
        });
        let zc = self.zc.as_mut().expect("no sender");
        // The owned forms (each send owns a copy of its bytes until its completion), and the
        // borrowed one where no owned form fits (several buffers to an address).
        let pieces = || iov.iter().map(|v| v.to_vec()).collect::<Vec<_>>();
        let r = match (dest, iov.len()) {
            (Some(d), 1) => zc
                .send_msg(iov[0].to_vec(), Some(&d), &[], flags, ud)
                .map_err(io::Error::from),
            // SAFETY: `self.bufs` keeps every buffer of the scenario until its end, after the
            // sender is closed.
            (Some(d), _) => unsafe { zc.send_msg_borrowed(&iov, Some(&d), &[], flags, ud) },
            (None, 1) => zc.send(iov[0].to_vec(), flags, ud).map_err(io::Error::from),
            (None, _) => zc
                .send_vectored(pieces(), flags, ud)
                .map_err(io::Error::from),
        };
        if let Ok(n) = r {
            if n > 0 {
                assert!(
                    self.sent.insert(ud, n).is_none(),
                    "user_data {ud} used twice by the scenario"
                );
            }
            // A datagram is all or nothing; a stream send may be partial, and the next buffer
            // continues the pattern from what was accepted.
            let datagram = self.fds.as_ref().unwrap().datagram;
            self.stream_pos += if datagram { lens.iter().sum() } else { n };
        }
        r
    }

    /// One batched send of `count` buffers of `len` bytes continuing the pattern, user_data
    /// `base + i` (the owned form: each item its own copy); returns the sends made.
    fn send_batch(&mut self, count: u64, len: usize, base: u64, flags: i32) -> io::Result<usize> {
        let flags = Flags::from_raw(flags & !libc::MSG_NOSIGNAL)?;
        let datagram = self.fds.as_ref().unwrap().datagram;
        let items: Vec<(Vec<u8>, u64)> = (0..count)
            .map(|i| (pattern(self.stream_pos + i as usize * len, len), base + i))
            .collect();
        let mut out = [Completion::default(); 64];
        let zc = self.zc.as_mut().expect("no sender");
        let (done, _rest) = zc
            .send_batch(items, flags, &mut out)
            .map_err(io::Error::from)?;
        self.got.extend_from_slice(&out[..done.completions]);
        let mut bytes = done.bytes;
        for i in 0..done.sends as u64 {
            // Every send but a short last one took its whole buffer.
            let n = len.min(bytes);
            bytes -= n;
            if n > 0 {
                assert!(
                    self.sent.insert(base + i, n).is_none(),
                    "user_data {} twice",
                    base + i
                );
            }
        }
        self.stream_pos += if datagram {
            done.sends * len
        } else {
            done.bytes
        };
        Ok(done.sends)
    }

    fn reap(&mut self) -> usize {
        let mut out = [Completion::default(); 256];
        let mut total = 0;
        loop {
            let n = self.zc().reap(&mut out).unwrap();
            self.got.extend_from_slice(&out[..n]);
            total += n;
            if n < out.len() {
                return total;
            }
        }
    }

    fn step(&mut self, step: &Value, ctx: &str) {
        let op = step["op"].as_str().unwrap();
        let u = |k: &str| {
            step[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{ctx}: `{k}` missing"))
        };
        let flags = step.get("flags").and_then(Value::as_i64).unwrap_or(0) as i32
            | if step.get("dontwait").and_then(Value::as_bool) == Some(true) {
                libc::MSG_DONTWAIT
            } else {
                0
            };
        match op {
            "new" => {
                let backend = step
                    .get("backend")
                    .and_then(Value::as_str)
                    .map_or(self.backend, backend_of);
                let adaptive = step.get("adaptive").and_then(Value::as_bool) == Some(true);
                let mut opts = ZcOptions::new().backend(backend).adaptive(adaptive);
                if let Some(n) = step.get("reserve").and_then(Value::as_u64) {
                    opts = opts.reserve(n as usize);
                }
                if let Some(n) = step.get("max_pending").and_then(Value::as_u64) {
                    opts = opts.max_pending(n as usize);
                }
                let r = ZeroCopySender::with_options(self.fd, opts);
                if step.get("expect_err").is_some() {
                    self.check(step, r.map(|_| 0), ctx);
                    return;
                }
                let z = r.unwrap_or_else(|e| panic!("{ctx}: new: {e}"));
                if let Some(b) = step.get("expect_backend") {
                    assert_eq!(
                        backend_name(z.backend()),
                        b.as_str().unwrap(),
                        "{ctx}: backend"
                    );
                }
                self.zc = Some(z);
            }
            "send" => {
                let (t0, cpu0) = (Instant::now(), thread_cpu());
                let r = self.send(&[u("len") as usize], u("user_data"), flags, false);
                let (t, cpu) = (t0.elapsed(), thread_cpu() - cpu0);
                self.check(step, r, ctx);
                if let Some(ms) = step.get("min_ms").and_then(Value::as_u64) {
                    assert!(
                        t >= Duration::from_millis(ms),
                        "{ctx}: returned after {t:?}"
                    );
                }
                cpu_bound(step, cpu, ctx);
            }
            "sendv" => {
                let lens: Vec<usize> = step["lens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize)
                    .collect();
                let r = self.send(&lens, u("user_data"), flags, false);
                self.check(step, r, ctx);
            }
            "sendto" => {
                let r = self.send(&[u("len") as usize], u("user_data"), flags, true);
                self.check(step, r, ctx);
            }
            "send_batch" => {
                let r = self.send_batch(u("count"), u("len") as usize, u("base"), flags);
                self.check(step, r, ctx);
            }
            "send_many" => {
                for i in 0..u("count") {
                    let r = self.send(&[u("len") as usize], 1_000_000 + i, 0, false);
                    r.unwrap_or_else(|e| panic!("{ctx}: send {i}: {e}"));
                }
            }
            "send_reap_loop" => {
                let (len, base) = (u("len") as usize, u("base"));
                let mut out = [Completion::default(); 64];
                for i in 0..u("count") {
                    let iov = {
                        let b = self.data(len);
                        self.iovs(&[b])
                    };
                    let zc = self.zc.as_mut().unwrap();
                    // SAFETY: the buffer lives in self.bufs until the run ends.
                    let r = unsafe { zc.send_reap_raw(&iov, Flags::NONE, base + i, &mut out) };
                    let (n, k) = r.unwrap();
                    assert_eq!(n, len, "{ctx}: send_reap short");
                    self.sent.insert(base + i, n);
                    self.stream_pos += n;
                    self.got.extend_from_slice(&out[..k]);
                }
            }
            "timestamping" => {
                // SO_TIMESTAMPING software transmit reports: every later send puts one on the
                // error queue, which only the error-queue backend reads.
                let v = libc::SOF_TIMESTAMPING_TX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
                set_int(self.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, v as i32);
                self.timestamping = true;
            }
            "request_response" => self.request_response(step, ctx),
            "crowd" => {
                let drain = step.get("drain_peer").and_then(Value::as_bool) == Some(true);
                self.crowd(u("count") as usize, u("len") as usize, drain, ctx)
            }
            "drain_peer_later" => {
                // The peer reads everything sent so far plus `plus` more bytes, starting after
                // `ms`, from a thread; `completions` joins it.
                let want = self.stream_pos + u("plus") as usize;
                let peer = self.fds.as_ref().unwrap().peer.as_ref().unwrap();
                let peer = peer.try_clone().unwrap();
                let (from, ms) = (self.received, u("ms"));
                self.reader = Some(std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    read_pattern(peer.as_fd(), from, want)
                }));
            }
            "fill_window" => {
                let (len, base) = (u("len") as usize, u("base"));
                for i in 0.. {
                    match self.send(&[len], base + i, libc::MSG_DONTWAIT, false) {
                        Ok(_) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                        Err(e) => panic!("{ctx}: fill: {e}"),
                    }
                    assert!(i < 10_000, "{ctx}: the window never filled");
                }
            }
            "retry_full" => {
                // A full socket retried without waiting for POLLOUT: every try is EAGAIN
                // (never EBUSY: a failed send must not hold a request slot).
                // A try may also go through: the peer's kernel collapses a receive queue of
                // tiny segments to reclaim memory and acks, which frees room here (more so on
                // a loaded machine, where the retries take longer). It is a send like any
                // other (its completion is checked); but at least half must meet the full
                // socket, or the step tested nothing.
                let count = u("count");
                let mut full = 0;
                for i in 0..count {
                    match self.send(
                        &[u("len") as usize],
                        2_000_000 + i,
                        libc::MSG_DONTWAIT,
                        false,
                    ) {
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => full += 1,
                        // Reaped at once: the window's sends, acked now, complete with it,
                        // and must not fill the sender's 4096 slots.
                        Ok(n) if n > 0 => {
                            self.reap();
                        }
                        r => panic!("{ctx}: retry {i} of a full socket: {r:?}, not EAGAIN"),
                    }
                }
                assert!(
                    full * 2 >= count,
                    "{ctx}: only {full} of {count} tries found it full"
                );
            }
            "reap" => {
                self.reap();
            }
            "wait" => {
                let t0 = Instant::now();
                let r = match step["timeout_ms"].as_i64().unwrap() {
                    -1 => self.zc().wait(None),
                    t => self.zc().wait(Some(Duration::from_millis(t as u64))),
                };
                // Every wait states what it may return: a result is never taken on trust.
                match step.get("expect_ret_min") {
                    Some(min) => match &r {
                        Ok(n) => assert!(
                            *n as u64 >= min.as_u64().unwrap(),
                            "{ctx}: wait returned {n}, want >= {min}"
                        ),
                        Err(_) => assert!(
                            errno_matches(step, &r),
                            "{ctx}: want >= {min} or error {}, got {r:?}",
                            step["expect_err"]
                        ),
                    },
                    None => {
                        assert!(
                            step.get("expect_err").is_some() || step.get("expect_ret").is_some(),
                            "{ctx}: a wait step needs expect_ret, expect_ret_min or expect_err"
                        );
                        self.check(step, r, ctx);
                    }
                }
                if let Some(m) = step.get("max_ms") {
                    assert!(
                        t0.elapsed() <= Duration::from_millis(m.as_u64().unwrap()),
                        "{ctx}: waited {:?}",
                        t0.elapsed()
                    );
                }
            }
            "collect_all" => {
                let deadline = Instant::now() + Duration::from_millis(u("timeout_ms"));
                loop {
                    self.reap();
                    if self.zc().inflight() == 0 {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{ctx}: {} sends never completed",
                        self.zc().inflight()
                    );
                    match self.zc().wait(Some(Duration::from_millis(50))) {
                        Ok(_) => {}
                        Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => {}
                        Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => {}
                        Err(e) => panic!("{ctx}: wait: {e}"),
                    }
                }
            }
            "drain_peer" => self.drain_peer(ctx),
            "reset_peer" => {
                let p = self.fds.as_mut().unwrap().peer.take().unwrap();
                reset(p);
                std::thread::sleep(Duration::from_millis(50));
            }
            "expect_inflight" => {
                let n = self.zc().inflight() as u64;
                if let Some(v) = step.get("value") {
                    assert_eq!(n, v.as_u64().unwrap(), "{ctx}: inflight");
                }
                if let Some(m) = step.get("min") {
                    assert!(n >= m.as_u64().unwrap(), "{ctx}: inflight {n}");
                }
            }
            "completions" => self.completions(step, ctx),
            "completions_flagged" => {
                self.reap();
                assert_eq!(step["flag"], "FALLBACK", "{ctx}: only FALLBACK is counted");
                let n = self.got.iter().filter(|c| c.flags & FALLBACK != 0).count() as u64;
                assert!(n >= u("min"), "{ctx}: {n} completions with FALLBACK");
            }
            "expect_stat" => {
                let s = self.zc().stats();
                let got = match step["field"].as_str().unwrap() {
                    "completions" => s.completions,
                    "syscalls_reap" => s.syscalls_reap,
                    "zerocopy_off" => s.zerocopy_off,
                    "copy_sends" => s.copy_sends,
                    "zerocopy_sends" => s.zerocopy_sends,
                    f => panic!("unknown stat {f}"),
                };
                if let Some(v) = step.get("value") {
                    assert_eq!(got, v.as_u64().unwrap(), "{ctx}: {}", step["field"]);
                }
                if let Some(v) = step.get("min") {
                    assert!(
                        got >= v.as_u64().unwrap(),
                        "{ctx}: {} = {got}",
                        step["field"]
                    );
                }
                if let Some(v) = step.get("max") {
                    assert!(
                        got <= v.as_u64().unwrap(),
                        "{ctx}: {} = {got}",
                        step["field"]
                    );
                }
            }
            "free" => {
                // The close policy: as lowcopy_zc_free, which returns the sends abandoned.
                let st = self.zc.take().unwrap().close();
                if let Some(v) = step.get("expect_ret") {
                    assert_eq!(st.close_abandoned, v.as_u64().unwrap(), "{ctx}: abandoned");
                }
                if let Some(v) = step.get("expect_resets") {
                    assert_eq!(st.close_resets, v.as_u64().unwrap(), "{ctx}: close_resets");
                }
            }
            "peer_sees_reset" => self.peer_sees_reset(ctx),
            o => panic!("{ctx}: unknown op {o}"),
        }
    }

    /// `count` more connections of the run's transport, each with a sender of the run's
    /// backend made on this thread, each sending one `len`-byte send (user_data 3_000_000 +
    /// i). With `drain_peer`, the run's peer then reads everything sent so far. The run's
    /// sender (if any) reaps first: on io_uring it takes the crowd's notifications in from
    /// the thread's ring. Then each crowd sender must collect exactly its own completion;
    /// 20 ms later each sends once more (user_data + 100_000), which makes the ring post
    /// whatever the kernel still held, and must collect exactly that one, with no unexpected
    /// notification; io_uring senders all give the same completion fd (the thread's ring).
    fn crowd(&mut self, count: usize, len: usize, drain_peer: bool, ctx: &str) {
        let buf = pattern(0, len);
        let mut crowd = Vec::new();
        for i in 0..count {
            let f = fds(&self.transport);
            let opts = ZcOptions::new().backend(self.backend);
            let mut z = ZeroCopySender::with_options(f.sock.try_clone().unwrap(), opts)
                .unwrap_or_else(|e| panic!("{ctx}: crowd sender {i}: {e}"));
            let ud = 3_000_000 + i as u64;
            let n = z.send(buf.to_vec(), Flags::NONE, ud);
            assert_eq!(n.unwrap(), len, "{ctx}: crowd send {i}");
            crowd.push((z, f, ud));
        }
        if drain_peer {
            self.drain_peer(ctx);
        }
        if self.zc.is_some() {
            self.reap();
        }
        let ring = self
            .zc
            .as_ref()
            .filter(|z| z.backend() == ZcBackend::IoUring)
            .map(|z| z.completion_fd().as_raw_fd());
        for (i, (z, _f, ud)) in crowd.iter_mut().enumerate() {
            if z.backend() == ZcBackend::IoUring {
                let fd = z.completion_fd().as_raw_fd();
                assert_ne!(fd, z.as_fd().as_raw_fd(), "{ctx}: crowd {i} has a ring");
                if let Some(r) = ring {
                    assert_eq!(fd, r, "{ctx}: crowd {i} shares the thread's ring");
                }
            }
            crowd_collect(z, *ud, len, &format!("{ctx}: crowd {i}"));
        }
        // Then a second send each, which makes the ring post whatever the kernel still had:
        // a notification meant for another sender (an earlier one's, on a reused route)
        // would show as a completion or an unexpected id.
        std::thread::sleep(Duration::from_millis(20));
        for (i, (z, _f, ud)) in crowd.iter_mut().enumerate() {
            let n = z.send(buf.to_vec(), Flags::NONE, *ud + 100_000);
            assert_eq!(n.unwrap(), len, "{ctx}: crowd {i}'s second send");
        }
        for (i, (z, _f, ud)) in crowd.iter_mut().enumerate() {
            let ctx = format!("{ctx}: crowd {i}");
            crowd_collect(z, *ud + 100_000, len, &ctx);
            assert_eq!(z.stats().unexpected_ids, 0, "{ctx}");
        }
    }

    /// The peer reads everything sent so far and checks it against the pattern.
    fn drain_peer(&mut self, ctx: &str) {
        self.read_peer(false, ctx);
    }

    /// The peer reads until its connection is reset: a prefix of the stream, then
    /// `ECONNRESET` (never an orderly end, never other bytes).
    fn peer_sees_reset(&mut self, ctx: &str) {
        self.read_peer(true, ctx);
    }

    /// The peer reads and checks the pattern: everything sent so far, or (`until_reset`) up to
    /// the reset of its connection.
    fn read_peer(&mut self, until_reset: bool, ctx: &str) {
        let f = self.fds.as_ref().unwrap();
        let peer = f.peer.as_ref().unwrap().as_fd();
        set_timeval(peer, libc::SO_RCVTIMEO, Duration::from_secs(3));
        let mut buf = vec![0u8; 1 << 20];
        while until_reset || self.received < self.stream_pos {
            // SAFETY: buf is writable for its length.
            let n = unsafe { libc::recv(peer.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let e = io::Error::last_os_error();
            // Closing an io_uring (an earlier run's sender) runs task work on this thread,
            // which interrupts its next sleeping syscall once: retry, as any daemon would.
            if n < 0 && e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if until_reset && n < 0 && e.raw_os_error() == Some(libc::ECONNRESET) {
                return;
            }
            assert!(
                n > 0,
                "{ctx}: peer got {} of {} bytes ({}){}",
                self.received,
                self.stream_pos,
                if n == 0 {
                    "end of stream".to_string()
                } else {
                    e.to_string()
                },
                if until_reset { ", not a reset" } else { "" }
            );
            let n = n as usize;
            assert!(
                buf[..n] == pattern(self.received, n)[..],
                "{ctx}: wrong bytes at {}",
                self.received
            );
            self.received += n;
        }
    }

    /// A request/response loop on one connection: a zerocopy send (the request), the peer
    /// reads it and answers after 50 ms, `recv_atleast` waits for the answer while the
    /// request's notification (or a timestamp report) sits on the error queue.
    fn request_response(&mut self, step: &Value, ctx: &str) {
        let n = |k: &str| {
            step[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{ctx}: `{k}` missing"))
        };
        let (len, reply, base) = (n("len") as usize, n("reply_len") as usize, n("base"));
        for i in 0..n("rounds") {
            let ctx = format!("{ctx} round {i}");
            let sent = self.send(&[len], base + i, 0, false);
            assert_eq!(sent.unwrap(), len, "{ctx}: request");
            if self.zc().backend() == ZcBackend::ErrQueue || self.timestamping {
                wait_pollerr(self.fd, &ctx); // the receive below starts with it pending
            }
            self.drain_peer(&ctx);
            let peer = self.fds.as_ref().unwrap().peer.as_ref().unwrap();
            let peer = peer.try_clone().unwrap();
            // The clock starts before the answering thread does: on a loaded machine the
            // caller can lose the CPU for longer than the answer's 50 ms between the two.
            let t0 = Instant::now();
            let answer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                write_all(peer.as_fd(), &vec![b'r'; reply]);
            });
            let mut buf = vec![0u8; reply];
            let cpu0 = thread_cpu();
            let r = lowcopy::recv_atleast(self.fd, &mut buf, reply, Some(Duration::from_secs(3)));
            let (t, cpu) = (t0.elapsed(), thread_cpu() - cpu0);
            answer.join().unwrap();
            assert_eq!(r.as_ref().ok(), Some(&reply), "{ctx}: reply: {r:?}");
            assert!(buf.iter().all(|&b| b == b'r'), "{ctx}: reply bytes");
            assert!(
                t >= Duration::from_millis(30),
                "{ctx}: answered after {t:?}"
            );
            cpu_bound(step, cpu, &ctx);
        }
    }

    fn completions(&mut self, step: &Value, ctx: &str) {
        if let Some(r) = self.reader.take() {
            self.received = r.join().unwrap();
        }
        self.reap();
        let want: Vec<u64> = match &step["user_data"] {
            Value::String(s) if s == "all" => {
                let mut v: Vec<u64> = self.sent.keys().copied().collect();
                v.sort();
                v
            }
            Value::Array(a) => a.iter().map(|v| v.as_u64().unwrap()).collect(),
            v => panic!("{ctx}: user_data {v}"),
        };
        let mut got: Vec<u64> = self.got.iter().map(|c| c.user_data).collect();
        got.sort();
        assert_eq!(
            got, want,
            "{ctx}: completions (each user_data exactly once)"
        );
        for c in &self.got {
            assert_eq!(
                c.result as usize, self.sent[&c.user_data],
                "{ctx}: result of {}",
                c.user_data
            );
            if let Some(copied) = step.get("copied").and_then(Value::as_bool) {
                assert_eq!(
                    c.flags & lowcopy::zc::COPIED != 0,
                    copied,
                    "{ctx}: COPIED on {}",
                    c.user_data
                );
            }
            if step.get("flag").and_then(Value::as_str) == Some("FALLBACK") {
                assert!(
                    c.flags & FALLBACK != 0,
                    "{ctx}: FALLBACK on {}",
                    c.user_data
                );
            }
        }
    }
}

/// A crowd sender's completions until nothing is in flight (3 s at most): exactly `ud` with
/// `len` bytes.
fn crowd_collect(z: &mut ZeroCopySender<OwnedFd>, ud: u64, len: usize, ctx: &str) {
    let mut out = [Completion::default(); 4];
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while z.inflight() > 0 || got.is_empty() {
        assert!(Instant::now() < deadline, "{ctx}: never completed");
        let _ = z.wait(Some(Duration::from_millis(50)));
        let k = z.reap(&mut out).unwrap();
        got.extend(out[..k].iter().map(|c| (c.user_data, c.result)));
    }
    let k = z.reap(&mut out).unwrap();
    got.extend(out[..k].iter().map(|c| (c.user_data, c.result)));
    assert_eq!(got, [(ud, len as i64)], "{ctx}: completions");
}

/// RLIMIT_MEMLOCK is unlimited (root has CAP_IPC_LOCK, which the limit does not bind).
fn memlock_unlimited() -> bool {
    // SAFETY: all-zero is a valid rlimit; getrlimit writes one.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a live rlimit.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    rc == 0 && r.rlim_cur == libc::RLIM_INFINITY
}

/// What this kernel offers decides what the zerocopy backends can do (lowcopy::probe, as the
/// C runner reads lowcopy_probe): an explicit backend the kernel lacks must be refused at
/// `new` (the run ends there: io_uring disabled or filtered, SO_ZEROCOPY unknown), and AUTO
/// must pick io_uring where SEND_ZC works, else the error queue where SO_ZEROCOPY does, else
/// plain copies. Facts of one kernel are never written into the table.
/// Returns false when the run does not apply here (skipped): a scenario that `needs`
/// zerocopy, in an auto run where AUTO can only pick copies.
fn kernel_rules(sc: &Value, steps: &mut Vec<Value>, transport: &str, backend: &str) -> bool {
    if !transport.starts_with("tcp") && !transport.starts_with("udp") {
        return true; // closed, file: no socket to send zerocopy on
    }
    let caps = lowcopy::probe().unwrap();
    let so_zerocopy = if transport.starts_with("udp") {
        caps.zerocopy_udp
    } else {
        caps.zerocopy_tcp
    };
    if backend == "auto" && sc["needs"] == "zerocopy" && !caps.uring_send_zc && !so_zerocopy {
        skip(
            &format!(
                "zc.json: [{} | {transport} | auto]",
                sc["name"].as_str().unwrap()
            ),
            "not applicable: AUTO has no zerocopy backend here (probe: no SEND_ZC, no SO_ZEROCOPY)",
        );
        return false;
    }
    let Some(i) = steps.iter().position(|s| s["op"] == "new") else {
        return true;
    };
    let refuse = match backend {
        "io_uring" if !caps.uring_send_zc => {
            Some(serde_json::json!(["EPERM", "EOPNOTSUPP", "ENOMEM"]))
        }
        "errqueue" if !so_zerocopy => Some(serde_json::json!(["ENOPROTOOPT", "EOPNOTSUPP"])),
        _ => None,
    };
    if let Some(err) = refuse {
        steps.truncate(i + 1);
        steps[i] = serde_json::json!({"op": "new", "expect_err": err});
    } else if backend == "auto" {
        let picks = if caps.uring_send_zc {
            "io_uring"
        } else if so_zerocopy {
            "errqueue"
        } else {
            "copy"
        };
        steps[i]["expect_backend"] = picks.into();
    }
    true
}

/// A sockaddr for `addr`, as bytes and length.
fn run_one(table: &Value, sc: &Value, transport: &str, backend: &str) {
    let ctx = format!(
        "[{} | {transport} | {backend}]",
        sc["name"].as_str().unwrap()
    );
    if sc["needs"] == "memlock" && !is_root() && !memlock_unlimited() {
        skip(
            &format!("zc.json: {ctx}"),
            "zerocopy pages in flight count against RLIMIT_MEMLOCK without CAP_IPC_LOCK; this scenario fills a socket with them",
        );
        return;
    }
    let mut steps = sc["steps"].as_array().unwrap().clone();
    let rule = &table["no_zerocopy"];
    let no_zerocopy = rule["transports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == transport);
    if !no_zerocopy && !kernel_rules(sc, &mut steps, transport, backend) {
        return;
    }
    if no_zerocopy {
        // No zerocopy on this socket: explicit zerocopy backends must be refused at `new`
        // (the run ends there); AUTO must pick the copy backend.
        if let Some(i) = steps.iter().position(|s| s["op"] == "new") {
            match backend {
                "errqueue" | "io_uring" => {
                    steps.truncate(i + 1);
                    steps[i] = serde_json::json!({"op": "new", "expect_err": rule["errno"]});
                }
                "auto" => steps[i]["expect_backend"] = rule["auto_backend"].clone(),
                _ => {}
            }
        }
    }
    let (keep, fds, raw) = match transport {
        "closed" | "file" | "listen_tcp4" | "listen_tcp6" => {
            let (k, raw) = odd_fd(transport);
            (k, None, raw)
        }
        t => {
            let f = fds(t);
            if let Some(sz) = sc.get("socket_rcvbuf").and_then(Value::as_i64) {
                if let Err(why) = force_buf(f.peer.as_ref().unwrap().as_fd(), true, sz as i32) {
                    skip(&format!("zc.json: {ctx}"), &why);
                    return;
                }
            }
            let raw = f.sock.as_raw_fd();
            (None, Some(f), raw)
        }
    };
    // SAFETY: `raw` stays open for the whole run (held by `fds` or `keep`), or is a number
    // no fd has ("closed"), where the kernel answers EBADF.
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    let mut run = Run {
        fd,
        transport: transport.to_string(),
        fds,
        backend: backend_of(backend),
        zc: None,
        sent: HashMap::new(),
        got: Vec::new(),
        bufs: Vec::new(),
        stream_pos: 0,
        received: 0,
        timestamping: false,
        reader: None,
    };
    for (i, step) in steps.iter().enumerate() {
        run.step(step, &format!("{ctx} step {i} {}", step["op"]));
    }
    // The sender goes before the buffers and the sockets.
    drop(run.zc.take());
    drop(keep);
}

#[test]
fn zc_scenarios() {
    run_table("zc.json", Some("backends"), 51, run_one);
}

/// The scale table (issue 13): sender options and many senders sharing a thread's ring.
#[test]
fn zc_scale_scenarios() {
    run_table("zc_scale.json", Some("backends"), 51, run_one);
}
