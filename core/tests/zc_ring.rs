//! Many zerocopy senders on one thread: one io_uring ring per thread shared by all of them, no
//! descriptor per sender, notifications routed to their own sender whichever sender drains the
//! ring, a sender that goes away with sends in flight, and the thread rules. Each test runs on
//! a thread of its own (the test harness's), so each starts without a ring; they take turns
//! (`serial`), so that counting the process's descriptors sees only one test's.

mod common;

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use common::*;
use lowcopy::zc::{self, Completion, ZcBackend, ZcOptions, ZeroCopySender};
use lowcopy::Flags;

/// One test at a time in this file.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn uring(fd: OwnedFd) -> ZeroCopySender<OwnedFd> {
    ZeroCopySender::with_options(fd, ZcOptions::new().backend(ZcBackend::IoUring)).unwrap()
}

/// Collects until nothing is in flight (5 s at most); returns (user_data, bytes) in order.
fn collect(z: &mut ZeroCopySender<impl AsFd>) -> Vec<(u64, i64)> {
    let mut out = [Completion::default(); 64];
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let k = z.reap(&mut out).unwrap();
        got.extend(out[..k].iter().map(|c| (c.user_data, c.result)));
        if k == 0 && z.inflight() == 0 {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} never completed",
            z.inflight()
        );
        if k == 0 {
            let _ = z.wait(Some(Duration::from_millis(50)));
        }
    }
}

/// 300 io_uring senders on one thread: one ring (the same completion fd for all, one
/// descriptor in all), and each sender gets exactly its own completions although the first
/// one's reap takes every notification in from the ring.
#[test]
fn senders_of_a_thread_share_one_ring_and_no_descriptor() {
    let _turn = serial();
    const N: usize = 300;
    let pairs: Vec<Pair> = (0..N).map(|_| pair("tcp4")).collect();
    let before = open_fds();
    let mut zs: Vec<_> = pairs
        .iter()
        .map(|p| uring(p.sock.try_clone().unwrap()))
        .collect();
    // The dups are N descriptors of ours; the senders add the thread's ring and, once a
    // completion fd was asked for, its eventfd.
    let ring = zs[0].completion_fd().as_raw_fd();
    assert!(open_fds() <= before + N + 2, "{} fds", open_fds() - before);
    for z in &zs {
        assert_eq!(z.completion_fd().as_raw_fd(), ring);
    }
    let buf = pattern(0, 5000);
    for (i, z) in zs.iter_mut().enumerate() {
        for k in 0..3u64 {
            let n = z.send(buf.to_vec(), Flags::NONE, (i as u64) << 8 | k);
            assert_eq!(n.unwrap(), 5000);
        }
    }
    // Sender 0 drains the ring: everyone else's notifications are kept for them.
    let mut got0 = collect(&mut zs[0]);
    got0.sort();
    assert_eq!(got0, [(0, 5000), (1, 5000), (2, 5000)]);
    for (i, z) in zs.iter_mut().enumerate().skip(1) {
        let mut got = collect(z);
        got.sort();
        let want: Vec<_> = (0..3u64).map(|k| ((i as u64) << 8 | k, 5000)).collect();
        assert_eq!(got, want, "sender {i}");
        assert_eq!(z.stats().unexpected_ids, 0);
    }
    drop(zs);
    assert!(
        zc::close_thread_ring().unwrap(),
        "every sender gone: the ring closes"
    );
    assert_eq!(open_fds(), before);
    assert!(!zc::close_thread_ring().unwrap(), "no ring left");
}

/// The thread's ring stays while a sender is joined to it and closes when asked once none is;
/// the next sender makes a new one.
#[test]
fn the_ring_outlives_its_senders_until_closed() {
    let _turn = serial();
    let (p, q) = (pair("tcp4"), pair("tcp4"));
    let mut a = uring(p.sock.try_clone().unwrap());
    let fd = a.completion_fd().as_raw_fd();
    let e = zc::close_thread_ring().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "a is joined");
    let b = uring(q.sock.try_clone().unwrap());
    assert_eq!(
        zc::close_thread_ring().unwrap_err().raw_os_error(),
        Some(libc::EBUSY)
    );
    drop(b); // never joined: does not hold the ring
    assert_eq!(a.send(b"x".to_vec(), Flags::NONE, 1).unwrap(), 1);
    assert_eq!(collect(&mut a), [(1, 1)]);
    drop(a);
    assert!(zc::close_thread_ring().unwrap());
    let mut c = uring(q.sock.try_clone().unwrap());
    assert!(c.completion_fd().as_raw_fd() >= 0);
    assert_eq!(c.send(b"y".to_vec(), Flags::NONE, 2).unwrap(), 1);
    assert_eq!(collect(&mut c), [(2, 1)]);
    let _ = fd;
}

/// A sender dropped with sends in flight: the ring counts its notifications off when they
/// come, and none reaches the senders made after it (whose slots have the same numbers).
#[test]
fn a_dropped_sender_s_notifications_reach_nobody() {
    let _turn = serial();
    let p = pair("tcp4");
    let mut a = uring(p.sock.try_clone().unwrap());
    let big = vec![3u8; 65536];
    let mut sent = 0usize;
    for i in 0..200u64 {
        match a.send(big.to_vec(), Flags::DONTWAIT, i) {
            Ok(n) => sent += n,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
            Err(e) => panic!("{e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(100)); // delayed ACKs for what went
    a.collect().unwrap();
    assert!(a.inflight() > 5, "sends in flight: {}", a.inflight());
    // Dropped on another thread, it cannot wait on this thread's ring: the close policy resets
    // the connection and abandons the sends in flight, whose notifications then come to this
    // thread's ring for nobody.
    let st = std::thread::scope(|s| s.spawn(move || a.close()).join().unwrap());
    assert!(st.close_abandoned > 5 && st.close_resets == 1, "{st:?}");
    // New senders, alive while the old one's notifications arrive.
    let pairs: Vec<Pair> = (0..8).map(|_| pair("tcp4")).collect();
    let mut zs: Vec<_> = pairs
        .iter()
        .map(|q| uring(q.sock.try_clone().unwrap()))
        .collect();
    for (i, z) in zs.iter_mut().enumerate() {
        assert_eq!(z.send(b"abc".to_vec(), Flags::NONE, i as u64).unwrap(), 3);
    }
    // The reset purged the old sends: they complete now; the peer reads up to the reset.
    let mut f = std::fs::File::from(p.peer);
    let mut got = Vec::new();
    let e = f.read_to_end(&mut got).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
    assert!(got.len() <= sent);
    std::thread::sleep(Duration::from_millis(20));
    for round in 0..2u64 {
        for (i, z) in zs.iter_mut().enumerate() {
            let ud = round * 100 + i as u64;
            if round == 1 {
                assert_eq!(z.send(b"d".to_vec(), Flags::NONE, ud).unwrap(), 1);
            }
            let want = [(ud, if round == 0 { 3 } else { 1 })];
            assert_eq!(collect(z), want, "sender {i} round {round}");
            assert_eq!(z.stats().unexpected_ids, 0, "sender {i} round {round}");
        }
    }
}

/// The thread rules: a sender belongs to the first thread that sends, waits or asks for its
/// completion fd; other threads get EEXIST; it may be dropped anywhere; a sender made on one
/// thread and first used on another joins the other's ring.
#[test]
fn a_sender_belongs_to_the_thread_that_first_uses_it() {
    let _turn = serial();
    let (p, q) = (pair("tcp4"), pair("tcp4"));
    let mut mine = uring(p.sock.try_clone().unwrap());
    let my_ring = mine.completion_fd().as_raw_fd();
    // Made here, first used on another thread: that thread's ring, not this one's.
    let theirs = uring(q.sock.try_clone().unwrap());
    let (mut theirs, their_ring) = std::thread::scope(|s| {
        s.spawn(move || {
            let mut t = theirs;
            let ring = t.completion_fd().as_raw_fd();
            assert_eq!(t.send(b"hi".to_vec(), Flags::NONE, 7).unwrap(), 2);
            (t, ring)
        })
        .join()
        .unwrap()
    });
    assert_ne!(their_ring, my_ring, "one ring per thread");
    let mut out = [Completion::default(); 4];
    let e = theirs.send(b"no".to_vec(), Flags::NONE, 8).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    assert_eq!(
        theirs.reap(&mut out).unwrap_err().raw_os_error(),
        Some(libc::EEXIST)
    );
    // Its thread is gone; the ring stays open as long as the sender holds it.
    assert_eq!(theirs.completion_fd().as_raw_fd(), their_ring);
    // SAFETY: F_GETFD on a descriptor number reads its flags, nothing else.
    let flags = unsafe { libc::fcntl(their_ring, libc::F_GETFD) };
    assert!(flags >= 0, "ring still open");
    // Our own sender on this thread is unaffected, and dropping theirs here is fine.
    drop(theirs);
    assert_eq!(mine.send(b"ok".to_vec(), Flags::NONE, 9).unwrap(), 2);
    assert_eq!(collect(&mut mine), [(9, 2)]);
    // A sender dropped on another thread with sends in flight: released through the ring's
    // queue, counted off here at the next use.
    let r = pair("tcp4");
    let mut other = uring(r.sock.try_clone().unwrap());
    let big = vec![1u8; 65536];
    while other.send(big.to_vec(), Flags::DONTWAIT, 1).is_ok() {}
    assert!(other.inflight() > 0);
    std::thread::spawn(move || drop(other)).join().unwrap();
    drop(r);
    assert_eq!(mine.send(b"ok".to_vec(), Flags::NONE, 10).unwrap(), 2);
    assert_eq!(collect(&mut mine), [(10, 2)]);
    assert_eq!(mine.stats().unexpected_ids, 0);
}

/// `max_pending` bounds the requests held on every backend, whatever the reserve (0: the
/// tables grow from nothing; equal to the limit: made at creation): EBUSY past it, and every
/// send completes once.
#[test]
fn every_backend_holds_requests_up_to_max_pending_from_any_reserve() {
    let _turn = serial();
    for backend in [ZcBackend::ErrQueue, ZcBackend::IoUring, ZcBackend::Copy] {
        for reserve in [0, 16, 200] {
            let p = pair("tcp4");
            let opts = ZcOptions::new()
                .backend(backend)
                .reserve(reserve)
                .max_pending(200);
            let mut z = ZeroCopySender::with_options(p.sock.as_fd(), opts).unwrap();
            for i in 0..200u64 {
                assert_eq!(z.send(b"z".to_vec(), Flags::NONE, i).unwrap(), 1);
            }
            let e = z.send(b"z".to_vec(), Flags::NONE, 999).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{backend:?} {reserve}");
            let mut got: Vec<u64> = collect(&mut z).iter().map(|c| c.0).collect();
            got.sort();
            assert_eq!(got, (0..200).collect::<Vec<_>>(), "{backend:?} {reserve}");
            assert_eq!(z.send(b"z".to_vec(), Flags::NONE, 1000).unwrap(), 1);
            assert_eq!(collect(&mut z), [(1000, 1)]);
        }
    }
}

fn readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLIN != 0 }
}

/// The completion fd (the thread's ring's eventfd) wakes an event loop when a notification of
/// any of the thread's senders is queued, long after the send; a reap resets it.
#[test]
fn the_completion_fd_wakes_an_event_loop() {
    let _turn = serial();
    let (p, q) = (pair("tcp4"), pair("tcp4"));
    let mut a = uring(p.sock.try_clone().unwrap());
    let mut b = uring(q.sock.try_clone().unwrap());
    let fd = a.completion_fd().as_raw_fd();
    assert_eq!(b.completion_fd().as_raw_fd(), fd, "one per thread");
    assert_ne!(fd, a.as_fd().as_raw_fd());
    // b fills its socket (the peer reads nothing), so its last sends wait for the peer.
    let big = vec![4u8; 65536];
    let mut sent = 0;
    while let Ok(n) = b.send(big.to_vec(), Flags::DONTWAIT, sent as u64) {
        sent += n;
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut out = [Completion::default(); 64];
    while b.reap(&mut out).unwrap() > 0 {}
    assert!(b.inflight() > 0);
    assert!(!readable(fd, 0), "reset by the reap, nothing queued since");
    // The peer reads from another thread later: the notifications come as task work.
    let peer = q.peer;
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let mut f = std::fs::File::from(peer);
        let mut got = vec![0u8; sent];
        f.read_exact(&mut got).unwrap();
        f
    });
    // (A poll of the ring's own descriptor would sleep to its timeout: its final look finds
    // the task work, but nothing wakes it before.)
    let t0 = Instant::now();
    assert!(readable(fd, 3000), "the eventfd wakes the loop");
    assert!(
        t0.elapsed() < Duration::from_millis(1500),
        "woken after {:?}",
        t0.elapsed()
    );
    // a's reap (nothing of its own) takes them in for b; b then has them.
    assert_eq!(a.reap(&mut out).unwrap(), 0);
    let _keep = reader.join().unwrap();
    let got = collect(&mut b);
    assert!(!got.is_empty() && b.inflight() == 0);
}
