//! Runs the behaviour tables in tests/scenarios/*.json against the Rust core.
//! The C, Python and Node runners execute the very same tables against their bindings.

mod common;

use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use common::*;
use lowcopy::peek::{PEEK_MOVED, PEEK_PREFIXED};
use lowcopy::{testing, Flags, PeekMode, PeekResult, Peeker, StreamKind};
use serde_json::Value;

/// common's errno names and those only this table uses.
fn ename(code: i32) -> &'static str {
    match code {
        libc::ENOTCONN => "ENOTCONN",
        libc::EINTR => "EINTR",
        libc::EPROTOTYPE => "EPROTOTYPE",
        libc::ENOMSG => "ENOMSG",
        c => errno_name(c),
    }
}

/// A step's `urgent: "caller"` (Urgent::Caller; C LOWCOPY_PEEK_URGENT_CALLER) with `mode`.
fn options(step: &Value, mode: PeekMode) -> lowcopy::PeekerOptions {
    let u = match step["urgent"].as_str() {
        Some("caller") => lowcopy::Urgent::Caller,
        Some("inline") => lowcopy::Urgent::Inline,
        u => panic!("urgent {u:?}"),
    };
    lowcopy::PeekerOptions::new(mode).urgent(u)
}

fn mode_of(s: &str) -> PeekMode {
    match s {
        "auto" => PeekMode::Auto,
        "offset" => PeekMode::Offset,
        "discard" => PeekMode::Discard,
        "offset_or_discard" => PeekMode::OffsetOrDiscard,
        m => panic!("unknown mode {m}"),
    }
}

/// `init`'s stated kind: the step's `kind`, else the transport's own.
fn kind_of(step: &Value, transport: &str) -> StreamKind {
    match step
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or(transport)
    {
        "tcp4" => StreamKind::Tcp4,
        "tcp6" => StreamKind::Tcp6,
        "mptcp4" => StreamKind::Mptcp4,
        "unix" => StreamKind::Unix,
        k => panic!("no kind for {k}: the step must state one"),
    }
}

/// The `result` a step names: each of its fields must match the call's.
fn expect_peek_result(step: &Value, r: &PeekResult, ctx: &str) {
    let Some(want) = step.get("result") else {
        return;
    };
    for (k, v) in want.as_object().expect("result is an object") {
        let got = match k.as_str() {
            "len" => Value::from(r.len),
            "offset" => Value::from(r.offset),
            "stream_pos" => Value::from(r.stream_pos),
            "syscalls" => Value::from(r.syscalls),
            "moved" => Value::from(r.flags & PEEK_MOVED != 0),
            "prefixed" => Value::from(r.flags & PEEK_PREFIXED != 0),
            f => panic!("{ctx}: unknown result field {f}"),
        };
        assert_eq!(&got, v, "{ctx}: result.{k} of {r:?}");
    }
}

fn mode_name(m: PeekMode) -> &'static str {
    match m {
        PeekMode::Auto => "auto",
        PeekMode::Offset => "offset",
        PeekMode::Discard => "discard",
        PeekMode::OffsetOrDiscard => "offset_or_discard",
    }
}

/// One scenario run: the fds and the live peeker.
struct Run<'a> {
    fd: BorrowedFd<'a>,
    transport: &'a str,
    peer: Option<OwnedFd>,
    mode: PeekMode,
    peeker: Option<Peeker<BorrowedFd<'a>>>,
    sent: usize,
    writers: Vec<std::thread::JoinHandle<()>>,
    /// Open descriptors counted by `fds_mark`.
    fds_marked: Option<usize>,
}

fn expect_result(step: &Value, r: io::Result<usize>, data: &[u8], ctx: &str) {
    if let Some(e) = step.get("expect_err") {
        let got = r.as_ref().err().and_then(|e| e.raw_os_error()).map(ename);
        assert_eq!(got, e.as_str(), "{ctx}: want error {e}, got {r:?}");
        return;
    }
    let n = r.unwrap_or_else(|e| panic!("{ctx}: unexpected error {e}"));
    if let Some(want) = step.get("expect_ret") {
        assert_eq!(n as u64, want.as_u64().unwrap(), "{ctx}: return value");
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
    if let Some(pos) = step.get("expect_pattern") {
        let pos = pos.as_u64().unwrap() as usize;
        assert!(n > 0, "{ctx}: no data");
        assert!(
            data[..n] == pattern(pos, n)[..],
            "{ctx}: wrong bytes at {pos}"
        );
    }
}

impl<'a> Run<'a> {
    fn peeker(&mut self) -> &mut Peeker<BorrowedFd<'a>> {
        self.peeker
            .as_mut()
            .expect("scenario uses a peeker before `new`")
    }

    fn peer(&self) -> BorrowedFd<'_> {
        self.peer.as_ref().expect("no peer").as_fd()
    }

    fn step(&mut self, step: &Value, ctx: &str) {
        let op = step["op"].as_str().unwrap();
        let u = |k: &str| {
            step[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{ctx}: `{k}` missing")) as usize
        };
        // The table's flags are the C values; an unknown one must come back as EINVAL.
        let flags = || {
            if step.get("dontwait").and_then(Value::as_bool) == Some(true) {
                Ok(Flags::DONTWAIT)
            } else {
                Flags::from_raw(step.get("flags").and_then(Value::as_i64).unwrap_or(0) as i32)
            }
        };
        match op {
            "new" => {
                self.peeker = None;
                let mode = step
                    .get("mode")
                    .and_then(Value::as_str)
                    .map_or(self.mode, mode_of);
                let r = if step.get("urgent").is_some() {
                    Peeker::with_options(self.fd, options(step, mode))
                } else {
                    Peeker::new(self.fd, mode)
                };
                if step.get("expect_err").is_some() {
                    expect_result(step, r.map(|_| 0), &[], ctx);
                    return;
                }
                let p = r.unwrap_or_else(|e| panic!("{ctx}: new: {e}"));
                if let Some(m) = step.get("expect_mode") {
                    assert_eq!(mode_name(p.mode()), m.as_str().unwrap(), "{ctx}: mode");
                }
                self.peeker = Some(p);
            }
            "init" => {
                // The peeker is a value in the runner's own memory (Rust has no other kind).
                self.peeker = None;
                let mode = step
                    .get("mode")
                    .and_then(Value::as_str)
                    .map_or(self.mode, mode_of);
                let kind = kind_of(step, self.transport);
                let r = if step.get("urgent").is_some() {
                    Peeker::with_options(self.fd, options(step, mode).kind(kind))
                } else {
                    Peeker::with_kind(self.fd, mode, kind)
                };
                if step.get("expect_err").is_some() {
                    expect_result(step, r.map(|_| 0), &[], ctx);
                    return;
                }
                let p = r.unwrap_or_else(|e| panic!("{ctx}: init: {e}"));
                if let Some(m) = step.get("expect_mode") {
                    assert_eq!(mode_name(p.mode()), m.as_str().unwrap(), "{ctx}: mode");
                }
                self.peeker = Some(p);
            }
            "free" => self.peeker = None,
            "release" => {
                let p = self
                    .peeker
                    .take()
                    .expect("scenario uses a peeker before `new`");
                if step.get("closing").and_then(Value::as_bool) == Some(true) {
                    p.into_inner_unrestored();
                } else {
                    p.into_inner();
                }
            }
            "send_oob" => {
                let d = step["data"].as_str().unwrap().as_bytes();
                let n = testing::send_oob(self.peer().as_fd(), d).expect("send(MSG_OOB)");
                assert_eq!(n, d.len(), "{ctx}: send(MSG_OOB)");
                self.sent += d.len();
            }
            "wait_urgent" => {
                let got = testing::wait_urgent(self.fd.as_fd(), 3000).expect("poll");
                assert!(got, "{ctx}: no urgent byte within 3 s");
            }
            "recv_oob" => {
                let r = testing::recv_oob(self.fd.as_fd());
                let b = [*r.as_ref().unwrap_or(&0)];
                expect_result(step, r.map(|_| 1), &b, ctx);
            }
            "send" => {
                let d = step["data"].as_str().unwrap().as_bytes();
                write_all(self.peer(), d);
                self.sent += d.len();
            }
            "send_pattern" => {
                let data = pattern(self.sent, u("len"));
                self.sent += data.len();
                let peer = self.peer().try_clone_to_owned().unwrap();
                self.writers
                    .push(std::thread::spawn(move || write_all(peer.as_fd(), &data)));
            }
            "send_later" => {
                let data = step["data"].as_str().unwrap().as_bytes().to_vec();
                self.sent += data.len();
                let ms = u("ms") as u64;
                let peer = self.peer().try_clone_to_owned().unwrap();
                self.writers.push(std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    write_all(peer.as_fd(), &data);
                }));
            }
            "wait_queued" => wait_queued(self.fd, u("bytes")),
            "peek" => {
                let mut buf = vec![0u8; u("len")];
                let (t0, cpu0) = (Instant::now(), thread_cpu());
                let r =
                    flags().and_then(|f| self.peeker().peek(&mut [IoSliceMut::new(&mut buf)], f));
                let (t, cpu) = (t0.elapsed(), thread_cpu() - cpu0);
                expect_result(step, r, &buf, ctx);
                let ms = |k: &str| {
                    step.get(k)
                        .and_then(Value::as_u64)
                        .map(Duration::from_millis)
                };
                if let Some(min) = ms("min_ms") {
                    assert!(t >= min, "{ctx}: returned after {t:?}, want >= {min:?}");
                }
                if let Some(max) = ms("max_ms") {
                    assert!(t <= max, "{ctx}: returned after {t:?}, want <= {max:?}");
                }
                if let Some(max) = ms("cpu_max_ms") {
                    assert!(cpu <= max, "{ctx}: used {cpu:?} of CPU, want <= {max:?}");
                }
            }
            "errqueue" => errqueue_entry(self.fd, step["kind"].as_str().unwrap(), ctx),
            "set_rcvtimeo_ms" => set_timeval(
                self.fd,
                libc::SO_RCVTIMEO,
                Duration::from_millis(u("ms") as u64),
            ),
            "peekv" => {
                // `len` iovecs of one byte each (1024 = IOV_MAX: no room for a prefix iovec).
                let mut buf = vec![0u8; u("len")];
                let mut iov: Vec<IoSliceMut> = buf.chunks_mut(1).map(IoSliceMut::new).collect();
                let r = flags().and_then(|f| self.peeker().peek(&mut iov, f));
                drop(iov);
                expect_result(step, r, &buf, ctx);
            }
            "peek_at" => {
                let mut buf = vec![0u8; u("len")];
                let r = flags().and_then(|f| {
                    lowcopy::peek_at(self.fd, u("offset"), &mut [IoSliceMut::new(&mut buf)], f)
                });
                expect_result(step, r, &buf, ctx);
            }
            "peeker_peek_at" | "peeker_peekv_at" => {
                // peekv: `len` iovecs of one byte each.
                let mut buf = vec![0u8; u("len")];
                let chunk = if op == "peeker_peekv_at" {
                    1
                } else {
                    buf.len().max(1)
                };
                let mut iov: Vec<IoSliceMut> = buf.chunks_mut(chunk).map(IoSliceMut::new).collect();
                if iov.is_empty() {
                    iov.push(IoSliceMut::new(&mut []));
                }
                let off = u("offset");
                let r = flags().and_then(|f| self.peeker().peek_at(off, &mut iov, f));
                drop(iov);
                if let Ok(ref res) = r {
                    expect_peek_result(step, res, ctx);
                }
                expect_result(step, r.map(|res| res.len as usize), &buf, ctx);
            }
            "consume" => {
                let r = self.peeker().consume(u("n"));
                expect_result(step, r, &[], ctx);
            }
            "consume_fd" => {
                let r = flags().and_then(|f| lowcopy::consume(self.fd, u("n"), f));
                expect_result(step, r, &[], ctx);
            }
            "seek" => {
                let r = self.peeker().seek(u("offset")).map(|()| 0);
                expect_result(step, r, &[], ctx);
            }
            "send_fds" => {
                // The peer sends `data` with `fds` copies of one descriptor (SCM_RIGHTS), then
                // closes its own: the queue holds the only references.
                let d = step["data"].as_str().unwrap().as_bytes();
                let pass: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
                let sent = lowcopy::testing::send_fds(self.peer(), d, pass.as_fd(), u("fds"))
                    .unwrap_or_else(|e| panic!("{ctx}: sendmsg: {e}"));
                assert_eq!(sent, d.len(), "{ctx}: sent");
                self.sent += d.len();
            }
            "fds_mark" => self.fds_marked = Some(lowcopy::testing::open_fd_count().unwrap()),
            "expect_fds_marked" => {
                let want = self.fds_marked.expect("expect_fds_marked before fds_mark");
                let got = lowcopy::testing::open_fd_count().unwrap();
                assert_eq!(
                    got, want,
                    "{ctx}: open descriptors, want as many as at fds_mark"
                );
            }
            "expect_offset" => assert_eq!(self.peeker().offset(), u("value"), "{ctx}: cursor"),
            "shutdown_peer" => shutdown_write(self.peer()),
            "reset_peer" => {
                reset(self.peer.take().unwrap());
                std::thread::sleep(Duration::from_millis(20));
            }
            "read" => {
                let mut buf = vec![0u8; u("len")];
                let fd = self.fd.try_clone_to_owned().unwrap();
                let r = io::Read::read(&mut std::fs::File::from(fd), &mut buf);
                expect_result(step, r, &buf, ctx);
            }
            "arm" => {
                let on = step.get("on").and_then(Value::as_bool).unwrap_or(true);
                let r = self.peeker().set_lowat_armed(on).map(|()| 0);
                expect_result(step, r, &[], ctx);
            }
            "expect_rcvlowat" => {
                let v = get_int(self.fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap();
                assert_eq!(
                    v as i64,
                    step["value"].as_i64().unwrap(),
                    "{ctx}: SO_RCVLOWAT"
                );
            }
            "expect_peek_off" => {
                // Sockets without SO_PEEK_OFF (MPTCP) have it disabled by definition.
                let v = match get_int(self.fd, libc::SOL_SOCKET, 42) {
                    Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => -1,
                    r => r.unwrap(),
                };
                assert_eq!(
                    v as i64,
                    step["value"].as_i64().unwrap(),
                    "{ctx}: SO_PEEK_OFF"
                );
            }
            "expect_stat" => {
                let p = self.peeker();
                let s = p.stats();
                let want = step[mode_name(p.mode())].as_u64().unwrap();
                let got = match step["field"].as_str().unwrap() {
                    "bytes_skipped_copied" => s.bytes_skipped_copied,
                    "bytes_peeked" => s.bytes_peeked,
                    "bytes_consumed" => s.bytes_consumed,
                    "peeks" => s.peeks,
                    "syscalls" => s.syscalls,
                    "fds_closed" => s.fds_closed,
                    f => panic!("unknown stat {f}"),
                };
                assert_eq!(got, want, "{ctx}: stat {}", step["field"]);
            }
            "peek_supported" => {
                let r = lowcopy::peek_supported(self.fd).map(usize::from);
                expect_result(step, r, &[], ctx);
            }
            "wakeups" => self.wakeups(step, ctx),
            o => panic!("{ctx}: unknown op {o}"),
        }
    }

    /// A level-triggered epoll loop: wait for EPOLLIN, peek with MSG_DONTWAIT, count wakeups.
    fn wakeups(&mut self, step: &Value, ctx: &str) {
        let ms = step["ms"].as_u64().unwrap();
        if let Some(after) = step.get("send_after_ms") {
            let data = step["data"].as_str().unwrap().as_bytes().to_vec();
            self.sent += data.len();
            let after = after.as_u64().unwrap();
            let peer = self.peer().try_clone_to_owned().unwrap();
            self.writers.push(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(after));
                write_all(peer.as_fd(), &data);
            }));
        }
        let ep = Epoll::new(self.fd);
        let deadline = Instant::now() + Duration::from_millis(ms);
        let (mut wakeups, mut got) = (0u64, Vec::new());
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if !ep.wait(left.as_millis().max(1) as i32) {
                continue;
            }
            wakeups += 1;
            let mut buf = [0u8; 4096];
            match self
                .peeker()
                .peek(&mut [IoSliceMut::new(&mut buf)], Flags::DONTWAIT)
            {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) => panic!("{ctx}: peek in loop: {e}"),
            }
        }
        if let Some(max) = step.get("max") {
            assert!(
                wakeups <= max.as_u64().unwrap(),
                "{ctx}: {wakeups} wakeups, want <= {max}"
            );
        }
        if let Some(min) = step.get("min") {
            assert!(
                wakeups >= min.as_u64().unwrap(),
                "{ctx}: {wakeups} wakeups, want >= {min}"
            );
        }
        if let Some(d) = step.get("data") {
            assert!(
                got.ends_with(d.as_str().unwrap().as_bytes()),
                "{ctx}: the loop did not wake for the new byte (got {:?})",
                String::from_utf8_lossy(&got)
            );
        }
    }
}

/// A one-fd epoll instance, level-triggered on EPOLLIN.
struct Epoll(OwnedFd);

impl Epoll {
    fn new(fd: BorrowedFd<'_>) -> Self {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: no pointers; the fd is owned right away.
        let ep = unsafe {
            OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC)).unwrap())
        };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: `ev` is a live epoll_event.
        check(unsafe {
            libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev)
        })
        .unwrap();
        Epoll(ep)
    }

    fn wait(&self, ms: i32) -> bool {
        use std::os::fd::AsRawFd;
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), &mut ev, 1, ms) };
        n > 0
    }
}

/// Whether this kernel has SO_PEEK_OFF for the transport's family (lowcopy::probe); true for
/// the fds that are not peekable streams (the question does not arise).
fn probe_has_peek_off(transport: &str) -> bool {
    match transport {
        "tcp4" | "tcp6" | "unix" | "mptcp4" => has_peek_off(transport),
        _ => true,
    }
}

/// peek.json's kernel rules for an auto run on a family without SO_PEEK_OFF: AUTO uses the
/// discard mechanism, and peek_supported answers 0.
fn auto_without_peek_off(steps: &mut [Value]) {
    for s in steps.iter_mut() {
        if (s["op"] == "new" || s["op"] == "init") && s["expect_mode"] == "offset" {
            s["expect_mode"] = "discard".into();
        }
        if s["op"] == "peek_supported" && s["expect_ret"] == 1 {
            s["expect_ret"] = 0.into();
        }
    }
}

fn run_one(table: &Value, sc: &Value, transport: &str, mode: &str) {
    let ctx = format!("[{} | {transport} | {mode}]", sc["name"].as_str().unwrap());
    let mut steps = sc["steps"].as_array().unwrap().clone();
    let rule = &table["no_peek_off"];
    let listed = rule["transports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == transport);
    // The kernel's answer (probe), never the table's: TCP before 6.9/6.12 has none.
    let no_peek_off = listed || !probe_has_peek_off(transport);
    if no_peek_off && !listed {
        if sc["needs"] == "peek_off" {
            skip(
                &format!("peek.json: {ctx}"),
                "not applicable: no SO_PEEK_OFF for this family here (probe)",
            );
            return;
        }
        if mode == "auto" {
            auto_without_peek_off(&mut steps);
        }
    }
    if no_peek_off && mode == "offset" {
        // The peeker cannot exist: its `new` (or `init`) must fail, and the run ends there.
        if let Some(i) = steps
            .iter()
            .position(|s| s["op"] == "new" || s["op"] == "init")
        {
            steps.truncate(i + 1);
            let mut refused =
                serde_json::json!({"op": steps[i]["op"], "expect_err": rule["errno"]});
            if let Some(k) = steps[i].get("kind") {
                refused["kind"] = k.clone();
            }
            steps[i] = refused;
        }
    }
    let odd = matches!(transport, "closed" | "file") || transport.starts_with("listen_");
    let (_keep, pair, raw) = if odd {
        let (keep, raw) = odd_fd(transport);
        (keep, None, raw)
    } else {
        let p = pair(transport);
        if let Some(sz) = sc.get("socket_rcvbuf").and_then(Value::as_i64) {
            let set = force_buf(p.sock.as_fd(), true, sz as i32)
                .and_then(|()| force_buf(p.peer.as_fd(), false, sz as i32));
            if let Err(why) = set {
                skip(&format!("peek.json: {ctx}"), &why);
                return;
            }
        }
        // A blocking step that waits wrongly fails with EAGAIN instead of hanging the suite.
        set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(3));
        let raw = std::os::fd::AsRawFd::as_raw_fd(&p.sock);
        (None, Some(p), raw)
    };
    // SAFETY: `raw` is open for this whole function (kept by `_keep` or `pair`), or for the
    // "closed" case a number no fd has, where the kernel answers EBADF.
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    let (peer, _sock_keep) = match pair {
        Some(p) => (Some(p.peer), Some(p.sock)),
        None => (None, None),
    };
    let mut run = Run {
        fd,
        transport,
        peer,
        mode: mode_of(mode),
        peeker: None,
        sent: 0,
        writers: Vec::new(),
        fds_marked: None,
    };
    for (i, step) in steps.iter().enumerate() {
        run.step(step, &format!("{ctx} step {i} {}", step["op"]));
    }
    run.peeker = None;
    for w in run.writers.drain(..) {
        w.join().unwrap();
    }
}

#[test]
fn peek_scenarios() {
    run_table("peek.json", Some("modes"), 51, run_one);
}
