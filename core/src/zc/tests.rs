//! Unit tests of the sender (the integration tests are in core/tests).

use super::ring_send::advance;
use super::*;
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

const BACKENDS: [ZcBackend; 3] = [ZcBackend::Copy, ZcBackend::ErrQueue, ZcBackend::IoUring];

fn drain(zc: &mut ZeroCopySender<impl AsFd>) -> Vec<Completion> {
    let mut out = [Completion::default(); 16];
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while zc.inflight() > 0 && Instant::now() < deadline {
        let _ = zc.wait(Some(Duration::from_millis(100)));
        let n = zc.reap(&mut out).unwrap();
        got.extend_from_slice(&out[..n]);
    }
    let n = zc.reap(&mut out).unwrap();
    got.extend_from_slice(&out[..n]);
    got
}

/// The safe `send_msg`: an IPv4 and an IPv6 destination, and a control message
/// (`UDP_SEGMENT`: one 3000-byte send leaves as three 1000-byte datagrams), on every
/// backend; an address of the other family is the kernel's `EAFNOSUPPORT`.
#[test]
fn send_msg_with_an_address_and_control_data() {
    const SOL_UDP: c_int = 17;
    const UDP_SEGMENT: c_int = 103;
    let mut cmsg = vec![0u8; 24];
    let hdr = libc::cmsghdr {
        cmsg_len: 18,
        cmsg_level: SOL_UDP,
        cmsg_type: UDP_SEGMENT,
    };
    // SAFETY: cmsghdr is plain data; its 16 bytes are viewed as bytes to copy them.
    let hdr_bytes =
        unsafe { std::slice::from_raw_parts((&hdr as *const libc::cmsghdr).cast::<u8>(), 16) };
    cmsg[..16].copy_from_slice(hdr_bytes);
    cmsg[16..18].copy_from_slice(&1000u16.to_ne_bytes());
    let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    for backend in BACKENDS {
        for v6 in [false, true] {
            let ip = |v6| -> std::net::IpAddr {
                if v6 {
                    Ipv6Addr::LOCALHOST.into()
                } else {
                    Ipv4Addr::LOCALHOST.into()
                }
            };
            let rx = UdpSocket::bind((ip(v6), 0)).unwrap();
            rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let tx = UdpSocket::bind((ip(v6), 0)).unwrap();
            let opts = ZcOptions::new().backend(backend);
            let mut zc = ZeroCopySender::with_options(&tx, opts).unwrap();
            let to = rx.local_addr().unwrap();
            let n = zc
                .send_msg(payload.clone(), Some(&to), &cmsg, Flags::NONE, 7)
                .unwrap();
            assert_eq!(n, 3000, "{backend:?} v6={v6}");
            let mut got = Vec::new();
            let mut d = [0u8; 4000];
            for _ in 0..3 {
                let (k, from) = rx.recv_from(&mut d).unwrap();
                assert_eq!((k, from), (1000, tx.local_addr().unwrap()), "{backend:?}");
                got.extend_from_slice(&d[..k]);
            }
            assert_eq!(got, payload, "{backend:?} v6={v6}");
            let c = drain(&mut zc);
            assert_eq!(c.len(), 1, "{backend:?}");
            assert_eq!((c[0].user_data, c[0].result), (7, 3000));
            // Without control data: one datagram.
            let n = zc
                .send_msg(payload.clone(), Some(&to), &[], Flags::NONE, 8)
                .unwrap();
            assert_eq!(n, 3000);
            assert_eq!(rx.recv(&mut d).unwrap(), 3000);
            let other: SocketAddr = if v6 {
                (Ipv4Addr::LOCALHOST, to.port()).into()
            } else {
                (Ipv6Addr::LOCALHOST, to.port()).into()
            };
            if !v6 {
                let e = zc.send_msg(payload.clone(), Some(&other), &[], Flags::NONE, 9);
                let e = e.unwrap_err().raw_os_error();
                assert_eq!(e, Some(libc::EAFNOSUPPORT), "{backend:?}");
            }
            assert_eq!(drain(&mut zc).len(), 1);
            assert_eq!(zc.inflight(), 0);
        }
    }
}

/// `send_msg_raw`: null pointers with lengths are `EFAULT` before anything is sent.
#[test]
fn send_msg_raw_refuses_null_parts() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let mut zc =
        ZeroCopySender::with_options(&tx, ZcOptions::new().backend(ZcBackend::Copy)).unwrap();
    let buf = [1u8; 4];
    let iov = [iovec {
        iov_base: buf.as_ptr() as *mut _,
        iov_len: 4,
    }];
    for which in 0..3 {
        // SAFETY: all-zero is a valid msghdr.
        let mut m: msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.as_ptr() as *mut _;
        m.msg_iovlen = 1;
        match which {
            0 => m.msg_namelen = 16,
            1 => m.msg_controllen = 24,
            _ => m.msg_iov = std::ptr::null_mut(),
        }
        // SAFETY: the non-null parts point at live memory of their lengths.
        let r = unsafe { zc.send_msg_raw(&m, Flags::NONE, 1) };
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EFAULT), "{which}");
    }
    assert_eq!(zc.stats().syscalls_send, 0);
}

/// The sender holds any `AsFd`: an owned descriptor (the bindings' dup) or a borrowed
/// stream; `into_inner` hands it back; `completion_fd` is the ring only for io_uring.
#[test]
fn senders_hold_owned_or_borrowed_sockets() {
    for backend in BACKENDS {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let dup: OwnedFd = c.as_fd().try_clone_to_owned().unwrap();
        let raw = dup.as_raw_fd();
        let opts = ZcOptions::new().backend(backend);
        let mut zc = ZeroCopySender::with_options(dup, opts).unwrap();
        assert_eq!(zc.as_fd().as_raw_fd(), raw);
        assert_eq!(zc.get_ref().as_raw_fd(), raw);
        let ring = zc.completion_fd().as_raw_fd();
        assert_eq!(ring != raw, backend == ZcBackend::IoUring, "{backend:?}");
        let data = [5u8; 1000];
        assert_eq!(zc.send(data.to_vec(), Flags::MORE, 1).unwrap(), 1000);
        assert_eq!(zc.send(data.to_vec(), Flags::NONE, 2).unwrap(), 1000);
        let mut got = [0u8; 2000];
        std::io::Read::read_exact(&mut s, &mut got).unwrap();
        assert_eq!(drain(&mut zc).len(), 2, "{backend:?}");
        let back: OwnedFd = zc.into_inner();
        assert_eq!(back.as_raw_fd(), raw);
        // Still the same connection.
        let mut f = std::fs::File::from(back);
        std::io::Write::write_all(&mut f, b"x").unwrap();
        let mut one = [0u8; 1];
        std::io::Read::read_exact(&mut s, &mut one).unwrap();
        assert_eq!(&one, b"x");

        // A borrowed stream, on a new connection: the kernel's zerocopy id counter of the
        // first one has moved on, and a new sender cannot read it back.
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut zc = ZeroCopySender::with_options(&c, opts).unwrap();
        assert_eq!(zc.send(data.to_vec(), Flags::DONTWAIT, 3).unwrap(), 1000);
        std::io::Read::read_exact(&mut s, &mut got[..1000]).unwrap();
        assert_eq!(drain(&mut zc)[0].user_data, 3);
    }
}

#[test]
fn senders_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ZeroCopySender<OwnedFd>>();
    check::<ZeroCopySender<BorrowedFd<'static>>>();
}

/// The environment variable that makes `uring_enomem_falls_back_to_copies` run its body
/// (in a child process of its own).
const MEMLOCK_CHILD: &str = "LOWCOPY_TEST_MEMLOCK_CHILD";

/// io_uring under the locked-pages limit: a ring made by a thread without `CAP_IPC_LOCK`
/// charges each SEND_ZC's pages to `RLIMIT_MEMLOCK` and answers `ENOMEM` past it
/// (io_uring/notif.h). As with `ENOBUFS` on the error queue, the send is retried once and
/// then made by copy: the caller never sees the error, every send gets exactly one
/// completion with its user data (`COPIED | FALLBACK` for the copies), and the stats
/// count each `ENOMEM` and each copy. How: the test runs itself again as a child process
/// (this test binary, this test only), which drops `CAP_IPC_LOCK` from its capability
/// sets (capset(2); root has it, and with it no limit applies) and lowers
/// `RLIMIT_MEMLOCK` before its first ring is made; the parent only checks the child's
/// verdict, so this process keeps its capabilities and limits.
#[test]
fn uring_enomem_falls_back_to_copies() {
    if std::env::var_os(MEMLOCK_CHILD).is_some() {
        memlock_child();
        return;
    }
    if uring::thread_ring().is_err() {
        return; // no io_uring SEND_ZC here
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "zc::tests::uring_enomem_falls_back_to_copies",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MEMLOCK_CHILD, "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(
        text.contains("memlock child: ok") || text.contains("memlock child: skipped"),
        "the child ran no test:\n{text}"
    );
}

/// Drops `CAP_IPC_LOCK` from the effective and permitted sets of the calling process.
fn drop_ipc_lock() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522; // _LINUX_CAPABILITY_VERSION_3
    const CAP_IPC_LOCK: u32 = 14;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two Data for version 3 into `d`.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    assert_eq!(r, 0, "capget: {}", io::Error::last_os_error());
    d[0].effective &= !(1 << CAP_IPC_LOCK);
    d[0].permitted &= !(1 << CAP_IPC_LOCK);
    // SAFETY: capset reads the header and two Data.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", io::Error::last_os_error());
}

/// Sets the soft `RLIMIT_MEMLOCK` (the one the kernel checks), below the hard one.
fn set_memlock(bytes: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut l) }, 0);
    l.rlim_cur = bytes.min(l.rlim_max);
    // SAFETY: a valid rlimit; a soft limit up to the hard one needs no privilege.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &l) };
    assert_eq!(r, 0, "setrlimit: {}", io::Error::last_os_error());
}

/// The body of `uring_enomem_falls_back_to_copies`, in the child process.
fn memlock_child() {
    drop_ipc_lock();
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let opts = ZcOptions::new().backend(ZcBackend::IoUring);
    // The thread's ring, made now: without CAP_IPC_LOCK its own pages are charged too.
    let mut zc = match ZeroCopySender::with_options(&tx, opts) {
        Ok(z) => z,
        Err(e) => {
            println!("memlock child: skipped (no io_uring: {e})");
            return;
        }
    };
    // What the user has locked already (the ring's own pages, at least) is not shown
    // anywhere: find the smallest limit under which a 4 KiB send (1 + 2 pages charged,
    // io_notif_account_mem) goes zerocopy.
    let mut got = [0u8; 40000];
    let mut zerocopy_under = |zc: &mut ZeroCopySender<&UdpSocket>, limit: u64| {
        set_memlock(limit);
        let before = zc.stats().enobufs;
        assert_eq!(
            zc.send([1; 4096].to_vec(), Flags::NONE, 1000).unwrap(),
            4096
        );
        assert_eq!(rx.recv(&mut got).unwrap(), 4096);
        assert_eq!(drain(zc).len(), 1);
        zc.stats().enobufs == before
    };
    let (mut lo, mut hi) = (0u64, 64 << 20);
    assert!(
        zerocopy_under(&mut zc, hi),
        "64 MiB of locked memory is not enough"
    );
    while hi - lo > 4096 {
        let mid = (lo + hi) / 2 / 4096 * 4096;
        if zerocopy_under(&mut zc, mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let used = hi - 3 * 4096;
    // Room for 6 pages: a 16 KiB datagram (4 + 2) goes zerocopy, a 32 KiB one (8 + 2)
    // is refused twice and copied. Loopback notifies before the send returns, so each
    // send finds the room free again.
    set_memlock(used + 6 * 4096);
    let st = zc.stats();
    let (probe_sends, probe_copies, probe_enobufs) = (st.sends, st.copy_sends, st.enobufs);
    let size = |i: u64| if i % 2 == 0 { 16384 } else { 32768 };
    let mut seen = vec![0u32; 200];
    let take = |zc: &mut ZeroCopySender<&UdpSocket>, seen: &mut Vec<u32>| {
        let mut fallbacks = vec![];
        let mut all = drain(zc);
        let mut out = [Completion::default(); 16];
        while let Ok(n @ 1..) = zc.reap(&mut out) {
            all.extend_from_slice(&out[..n]);
        }
        for c in all {
            assert_eq!(c.result, size(c.user_data), "{c:?}");
            seen[c.user_data as usize] += 1;
            if c.flags & FALLBACK != 0 {
                assert_ne!(c.flags & COPIED, 0, "{c:?}");
                fallbacks.push(c.user_data);
            }
        }
        fallbacks
    };
    let mut send = |zc: &mut ZeroCopySender<&UdpSocket>, i: u64| {
        let data = vec![i as u8; size(i) as usize];
        assert_eq!(zc.send(data.to_vec(), Flags::NONE, i).unwrap(), data.len());
        assert_eq!(rx.recv(&mut got).unwrap(), data.len());
        assert!(
            got[..data.len()].iter().all(|&b| b == i as u8),
            "datagram {i}"
        );
    };
    for i in 0..100u64 {
        send(&mut zc, i);
    }
    // Other processes of this user that lock memory meanwhile (another run of this test)
    // move the limit's room: the pattern is exact only on a quiet machine, so only
    // a mix of both is asserted, and the counts that follow from it.
    let fallbacks = take(&mut zc, &mut seen);
    let st = zc.stats();
    assert!(
        !fallbacks.is_empty() && fallbacks.len() < 100,
        "{fallbacks:?}"
    );
    let copies = fallbacks.len() as u64;
    if fallbacks != (1..100).step_by(2).collect::<Vec<_>>() {
        println!("memlock child: other lockers meanwhile; copied {fallbacks:?}");
    }
    assert_eq!(st.copy_sends - probe_copies, copies, "{st:?}");
    assert_eq!(st.enobufs - probe_enobufs, 2 * copies, "{st:?}");
    // No room at all: every send is refused twice, then copied.
    set_memlock(0);
    for i in 100..200u64 {
        send(&mut zc, i);
    }
    assert_eq!(take(&mut zc, &mut seen), (100..200).collect::<Vec<_>>());
    let st = zc.stats();
    assert!(
        seen.iter().all(|&n| n == 1),
        "one completion per send: {seen:?}"
    );
    assert_eq!(st.enobufs - probe_enobufs, 2 * copies + 200, "{st:?}");
    assert_eq!(st.copy_sends - probe_copies, copies + 100, "{st:?}");
    assert_eq!(st.sends - probe_sends, 200, "{st:?}");
    assert_eq!(st.completions, st.sends, "{st:?}");
    assert_eq!(zc.inflight(), 0);

    // A blocking TCP send of 1 MiB: refused, then sent whole by one copy.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut s, _) = l.accept().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = vec![0u8; 1 << 20];
        std::io::Read::read_exact(&mut s, &mut all).unwrap();
        all
    });
    let mut zc = ZeroCopySender::with_options(&c, opts).unwrap();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(zc.send(data.to_vec(), Flags::NONE, 7).unwrap(), 1 << 20);
    assert_eq!(reader.join().unwrap(), data);
    let c = drain(&mut zc);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].user_data, c[0].result), (7, 1 << 20));
    assert_eq!(c[0].flags, COPIED | FALLBACK);
    let st = zc.stats();
    assert_eq!((st.enobufs, st.copy_sends), (2, 1), "{st:?}");
    println!(
        "memlock child: ok ({} KiB locked before the sends)",
        used / 1024
    );
}

/// An event loop that watches the thread's eventfd reaps every sender with sends in flight
/// after a wakeup: the first reap resets the eventfd and takes in every notification (the
/// others' go to their inboxes); the others find nothing new and make no syscall (they
/// made one `read` each: 64 or more here).
#[test]
fn reaping_many_senders_after_a_wakeup_resets_the_eventfd_once() {
    if uring::thread_ring().is_err() {
        return; // no io_uring SEND_ZC here
    }
    // 64 MiB of zerocopy pages in flight: without CAP_IPC_LOCK they count against a
    // finite RLIMIT_MEMLOCK, io_uring says ENOMEM and the sends fall back to copies,
    // which complete at once (as zc.json's "needs": "memlock").
    // SAFETY: all-zero is a valid rlimit; getrlimit writes one.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a live rlimit; geteuid has no preconditions.
    let bound = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } == 0
        && r.rlim_cur != libc::RLIM_INFINITY
        && unsafe { libc::geteuid() } != 0;
    if bound {
        let why = "zerocopy pages in flight count against RLIMIT_MEMLOCK without CAP_IPC_LOCK; this test keeps 64 MiB of them";
        eprintln!("SKIP {why}");
        if let Some(path) = std::env::var_os("LOWCOPY_SKIP_LOG") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(
                    f,
                    "zc::tests::reaping_many_senders_after_a_wakeup_resets_the_eventfd_once: {why}"
                );
            }
        }
        return;
    }
    const N: usize = 64;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut clients, mut peers) = (Vec::new(), Vec::new());
    for _ in 0..N {
        clients.push(TcpStream::connect(l.local_addr().unwrap()).unwrap());
        peers.push(l.accept().unwrap().0);
    }
    let opts = ZcOptions::new().backend(ZcBackend::IoUring);
    let mut zcs: Vec<_> = clients
        .iter()
        .map(|c| ZeroCopySender::with_options(c, opts).unwrap())
        .collect();
    let efd = zcs[0].completion_fd().as_raw_fd(); // registers the ring's eventfd
                                                  // More than the connection holds: each send's notification waits until the peer has
                                                  // read and acknowledged all of it.
    let data = vec![3u8; 1 << 20];
    let mut sent = Vec::new();
    for (i, zc) in zcs.iter_mut().enumerate() {
        let n = zc.send(data.to_vec(), Flags::DONTWAIT, i as u64).unwrap();
        assert!(n > 0);
        sent.push(n);
    }
    assert!(
        zcs.iter().all(|z| z.inflight() == 1),
        "notified before the peer read"
    );
    let mut got = vec![0u8; 1 << 20];
    for (s, &n) in peers.iter_mut().zip(&sent) {
        std::io::Read::read_exact(s, &mut got[..n]).unwrap();
    }
    // The acks came and the notifications wait (deferred): the eventfd says so.
    let mut p = libc::pollfd {
        fd: efd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut p, 1, 5000) };
    assert_eq!(ready, 1, "the eventfd was not signalled");
    std::thread::sleep(Duration::from_millis(50)); // the other acks
    let before: u64 = zcs.iter().map(|z| z.stats().syscalls_reap).sum();
    let mut out = [Completion::default(); 4];
    let mut got = 0;
    for zc in zcs.iter_mut().filter(|z| z.inflight() > 0) {
        got += zc.reap(&mut out).unwrap();
    }
    let reap_syscalls = zcs.iter().map(|z| z.stats().syscalls_reap).sum::<u64>() - before;
    // About 3 (a reset, an io_uring_enter for the deferred notifications, a reset after
    // it); more when acks still arrive meanwhile, each wave of them one enter and resets.
    assert!(
        reap_syscalls <= N as u64 / 4,
        "{reap_syscalls} syscalls to reap {N} senders"
    );
    for zc in &mut zcs {
        got += drain(zc).len();
    }
    assert_eq!(got, N);
}

/// An idle sender is small on every backend: the struct and its reserve's tables. A burst
/// of 1000 requests held grows the tables; reaping them brings them back to the reserve.
#[test]
fn idle_senders_are_small_and_shrink_back_after_a_burst() {
    let base = std::mem::size_of::<ZeroCopySender<OwnedFd>>();
    assert!(base <= 512, "the sender itself: {base} bytes");
    for backend in BACKENDS {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let opts = ZcOptions::new().backend(backend);
        let mut zc =
            ZeroCopySender::with_options(c.as_fd().try_clone_to_owned().unwrap(), opts).unwrap();
        let idle = zc.tracker.heap_bytes();
        // 20 slots of 32 bytes, and for the error queue 32 ids of 4.
        let want = if backend == ZcBackend::ErrQueue {
            768
        } else {
            640
        };
        assert_eq!(idle, want, "{backend:?}: the default reserve's tables");
        assert!(
            base + idle <= 1536,
            "{backend:?}: {} bytes idle",
            base + idle
        );
        let data = [9u8; 10];
        for i in 0..1000 {
            assert_eq!(zc.send(data.to_vec(), Flags::NONE, i).unwrap(), 10);
        }
        assert!(zc.tracker.heap_bytes() >= 1000 * 32, "{backend:?}: grown");
        let mut got = vec![0u8; 10_000];
        std::io::Read::read_exact(&mut s, &mut got).unwrap();
        let mut n = drain(&mut zc).len();
        let mut out = [Completion::default(); 64];
        loop {
            let k = zc.reap(&mut out).unwrap();
            if k == 0 {
                break;
            }
            n += k;
        }
        assert_eq!(n, 1000, "{backend:?}");
        // The error queue keeps room for REAP_EVERY requests once it grew (what send_reap
        // holds between two reads): 40 slots and 64 ids.
        let back = if backend == ZcBackend::ErrQueue {
            40 * 32 + 64 * 4
        } else {
            idle
        };
        assert_eq!(
            zc.tracker.heap_bytes(),
            back,
            "{backend:?}: back to the reserve"
        );
        assert!(base + back <= 2048, "{backend:?}: {} bytes", base + back);
    }
}

/// An error-queue sender that keeps sending through send_reap holds up to REAP_EVERY
/// requests between two reads, more than the default reserve: its tables grow once and
/// then stay, rather than being reallocated (and copied) at every batch.
#[test]
fn send_reap_batches_do_not_reallocate_the_tables() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let opts = ZcOptions::new().backend(ZcBackend::ErrQueue);
    let mut zc = ZeroCopySender::with_options(&tx, opts).unwrap();
    let mut out = [Completion::default(); 64];
    let mut got = 0;
    let mut d = [0u8; 100];
    for i in 0..10 * REAP_EVERY as u64 {
        let (n, k) = zc
            .send_reap([1; 100].to_vec(), Flags::NONE, i, &mut out)
            .unwrap();
        assert_eq!(n, 100);
        assert_eq!(rx.recv(&mut d).unwrap(), 100);
        got += k;
    }
    assert!(got >= 9 * REAP_EVERY as usize, "{got}");
    // The slots grew once (20 to 40; the reserve's 32 ids hold a batch), then stayed:
    // shrinking back to the reserve after each read made 20 tables here.
    assert!(zc.tracker.resizes <= 2, "{} tables", zc.tracker.resizes);
}

#[test]
fn options_are_checked() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let bad = [
        ZcOptions::new().max_pending(0),
        ZcOptions::new().reserve(0).max_pending(PENDING_LIMIT + 1),
        ZcOptions::new().reserve(17).max_pending(16),
    ];
    for o in bad {
        let e = ZeroCopySender::with_options(&c, o).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{o:?}");
    }
    let o = ZcOptions::new()
        .reserve(PENDING_LIMIT)
        .max_pending(PENDING_LIMIT);
    let z = ZeroCopySender::with_options(&c, o.backend(ZcBackend::Copy)).unwrap();
    // 1,310,720 slots of 32 bytes (2^20 and a quarter); the copy backend makes no ids.
    assert_eq!(z.tracker.heap_bytes(), 1310720 * 32);
    let d = ZcOptions::default();
    assert_eq!((d.reserve, d.max_pending), (DEFAULT_RESERVE, MAX_PENDING));
}

#[test]
fn options_from_raw() {
    let o = ZcOptions::from_raw(2, 0).unwrap();
    assert_eq!(o, ZcOptions::new().backend(ZcBackend::IoUring));
    assert!(ZcOptions::from_raw(0, ADAPTIVE).unwrap().adaptive);
    for (b, f) in [(4, 0), (0, 2), (0, u32::MAX)] {
        let e = ZcOptions::from_raw(b, f).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
    assert_eq!(ZcOptions::default(), ZcOptions::new());
}

#[test]
fn backend_from_u32() {
    assert_eq!(ZcBackend::try_from(2).unwrap(), ZcBackend::IoUring);
    assert_eq!(
        ZcBackend::try_from(4).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
}

#[test]
fn advance_walks_iovecs() {
    let (a, b) = ([0u8; 4], [0u8; 6]);
    let mut iov = [
        iovec {
            iov_base: a.as_ptr() as *mut _,
            iov_len: 4,
        },
        iovec {
            iov_base: b.as_ptr() as *mut _,
            iov_len: 6,
        },
    ];
    let mut first = 0;
    advance(&mut iov, &mut first, 5);
    assert_eq!((first, iov[1].iov_len), (1, 5));
    advance(&mut iov, &mut first, 5);
    assert_eq!(first, 2);
}

/// The adaptive option on a path that copies every zerocopy send (UDP over loopback), driven
/// through `send_reap_raw` (the C ABI's call, and its copy fast path): zerocopy is turned
/// off, asked for again after ADAPTIVE_PROBE_EVERY plain copies, and turned off again; every
/// send gets exactly one completion, in send order, with the bytes it accepted.
#[test]
fn adaptive_probes_again_and_loses_no_completion() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let opts = ZcOptions::new().backend(ZcBackend::ErrQueue).adaptive(true);
    let mut zc = ZeroCopySender::with_options(&tx, opts).unwrap();
    let payload = [7u8; 64];
    let iov = [iovec {
        iov_base: payload.as_ptr() as *mut _,
        iov_len: payload.len(),
    }];
    let mut out = [Completion::default(); 64];
    let mut got = Vec::new();
    let mut d = [0u8; 64];
    let (mut zc_at_off, mut turned_off, mut back_on) = (None, 0, 0);
    let total = ADAPTIVE_PROBE_EVERY as u64 + 400;
    let mut was_off = false;
    for i in 0..total {
        // SAFETY: `payload` outlives the sender's use of it (reaped below before it drops).
        let (n, k) = unsafe { zc.send_reap_raw(&iov, Flags::NONE, i, &mut out) }.unwrap();
        assert_eq!(n, 64);
        assert_eq!(rx.recv(&mut d).unwrap(), 64);
        got.extend_from_slice(&out[..k]);
        let st = zc.stats();
        let off = st.zerocopy_off == 1;
        if off && !was_off {
            turned_off += 1;
            zc_at_off.get_or_insert(st.zerocopy_sends);
        }
        if !off && was_off {
            back_on += 1;
        }
        was_off = off;
    }
    got.extend(drain(&mut zc));
    assert_eq!(turned_off, 2, "off, probed, off again");
    assert_eq!(back_on, 1);
    assert!(
        zc.stats().zerocopy_sends > zc_at_off.unwrap(),
        "the probe sent zerocopy again"
    );
    assert_eq!(got.len() as u64, total);
    for (i, c) in got.iter().enumerate() {
        assert_eq!((c.user_data, c.result), (i as u64, 64));
        assert_ne!(c.flags & COPIED, 0);
    }
    assert_eq!(zc.stats().completions, total);
}
