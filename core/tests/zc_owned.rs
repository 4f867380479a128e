//! Owned buffers and the close policy: no byte on the wire ever differs from what the caller
//! handed over, however the program lets go of its buffers (issue 17).
//!
//! The buffers here poison themselves when dropped (they fill their bytes with `b'X'`
//! before freeing), as memory freed and reused by the allocator would: if lowcopy let one go
//! before the kernel was done with it, the receiver would see `X`.
//!
//! The peer's receive buffer is small and it does not read at first, so the sender's last
//! sends wait in its own write queue, where the kernel still reads the caller's pages when it
//! transmits them (over loopback too: the copy the receiver gets is made as the data is
//! delivered, later).

mod common;

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lowcopy::zc::{Owned, Slice, ZcBackend, ZcBuf, ZcOptions, ZeroCopySender};
use lowcopy::Flags;

const CHUNK: usize = 64 * 1024;

/// A buffer that poisons its bytes when dropped, and counts its drops.
struct Poisoned {
    bytes: Box<[u8]>,
    drops: Arc<AtomicUsize>,
}

impl Poisoned {
    fn new(byte: u8, drops: &Arc<AtomicUsize>) -> Self {
        Poisoned {
            bytes: vec![byte; CHUNK].into_boxed_slice(),
            drops: drops.clone(),
        }
    }
}

// SAFETY: a boxed slice that stays in place; changed only by Drop.
unsafe impl ZcBuf for Poisoned {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Poisoned {
    fn drop(&mut self) {
        self.bytes.fill(b'X');
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A TCP pair whose peer holds little (256 KiB, above the MSS: a window below it stalls the
/// sender on the persist timer), so that sends wait in the sender's write queue.
fn tight_pair() -> Pair {
    let p = pair("tcp4");
    set_int(
        p.peer.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUF,
        256 * 1024,
    );
    set_int(p.sock.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 1 << 20);
    p
}

/// Sends poisoned buffers of `a` without waiting until the socket is full; returns the bytes
/// sent and the sends that took bytes.
fn fill(zc: &mut ZeroCopySender<impl AsFd, Poisoned>, drops: &Arc<AtomicUsize>) -> (usize, usize) {
    let (mut bytes, mut sends) = (0, 0);
    for i in 0..64u64 {
        match zc.send(Poisoned::new(b'a', drops), Flags::DONTWAIT, i) {
            Ok(n) => {
                bytes += n;
                sends += (n > 0) as usize;
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                // The failed send's buffer is ours again: forget it, so that the drop count
                // is the sends'.
                std::mem::forget(e.into_buf());
                break;
            }
            Err(e) => panic!("send: {e}"),
        }
    }
    assert!(sends > 1, "the socket took too little to test anything");
    (bytes, sends)
}

/// Reads the peer to its end (or its reset); every byte must be `a`. Returns the count and
/// whether the stream ended with a reset.
fn read_all_a(peer: OwnedFd) -> (usize, bool) {
    let mut f = std::fs::File::from(peer);
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0;
    loop {
        match f.read(&mut buf) {
            Ok(0) => return (got, false),
            Ok(n) => {
                if let Some(p) = buf[..n].iter().position(|&b| b != b'a') {
                    panic!("byte {} on the wire is {:#x}, not 'a'", got + p, buf[p]);
                }
                got += n;
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => return (got, true),
            Err(e) => panic!("read: {e}"),
        }
    }
}

const BACKENDS: [ZcBackend; 3] = [ZcBackend::ErrQueue, ZcBackend::IoUring, ZcBackend::Copy];

fn sender(sock: &OwnedFd, backend: ZcBackend) -> ZeroCopySender<&OwnedFd, Poisoned> {
    let opts = ZcOptions::new().backend(backend);
    ZeroCopySender::for_buffers(sock, opts).unwrap()
}

/// The case with owned buffers: the program keeps nothing, yet each buffer lives
/// until its completion; the receiver reads late and sees only what was sent.
#[test]
fn owned_buffers_live_until_their_completion() {
    for backend in BACKENDS {
        let p = tight_pair();
        let drops = Arc::new(AtomicUsize::new(0));
        let mut zc = sender(&p.sock, backend);
        let (bytes, sends) = fill(&mut zc, &drops);
        // The peer has not read: the tail cannot have completed on a zerocopy backend.
        if backend != ZcBackend::Copy {
            assert!(zc.inflight() > 0, "{backend:?}: sends in flight");
            assert!(drops.load(Ordering::SeqCst) < sends, "{backend:?}");
        }
        let reader = std::thread::spawn(move || read_all_a(p.peer));
        let mut back = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while back < sends {
            assert!(
                Instant::now() < deadline,
                "{backend:?}: completions missing: {back} of {sends}, inflight {}, {:?}",
                zc.inflight(),
                zc.stats()
            );
            let _ = zc.wait(Some(Duration::from_millis(200)));
            zc.reap_with(usize::MAX, |c, owned| {
                assert!(c.result > 0 && c.result <= CHUNK as i64);
                match owned {
                    Some(Owned::One(b)) => assert_eq!(b.bytes[0], b'a'),
                    other => panic!("no buffer back: {}", other.is_some()),
                }
                back += 1;
            })
            .unwrap();
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            sends,
            "{backend:?}: each dropped once"
        );
        drop(zc);
        nix_close(p.sock);
        let (got, reset) = reader.join().unwrap();
        assert_eq!((got, reset), (bytes, false), "{backend:?}");
    }
}

fn nix_close(fd: OwnedFd) {
    drop(fd);
}

/// Closing with sends that cannot complete (the peer never reads): the close policy waits its
/// timeout, resets the connection, and every buffer is dropped only after its completion.
#[test]
fn close_resets_a_stuck_connection_and_keeps_buffers_until_done() {
    for backend in [ZcBackend::ErrQueue, ZcBackend::IoUring] {
        let p = tight_pair();
        let drops = Arc::new(AtomicUsize::new(0));
        let opts = ZcOptions::new()
            .backend(backend)
            .close_timeout(Duration::from_millis(300));
        let mut zc: ZeroCopySender<_, Poisoned> =
            ZeroCopySender::for_buffers(&p.sock, opts).unwrap();
        let (_, sends) = fill(&mut zc, &drops);
        let inflight = zc.inflight();
        assert!(inflight > 0, "{backend:?}");
        let t0 = Instant::now();
        let mut handed = 0;
        let st = zc.close_with(Duration::from_millis(300), |_, owned| {
            // The buffer comes back with its completion, before it is dropped.
            assert!(owned.is_some());
            handed += 1;
        });
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(250),
            "{backend:?}: waited {took:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "{backend:?}: close took {took:?}"
        );
        assert_eq!(st.close_resets, 1, "{backend:?}: {st:?}");
        assert_eq!(st.close_abandoned, 0, "{backend:?}: {st:?}");
        assert_eq!(st.close_completed as usize, handed, "{backend:?}");
        assert_eq!(handed, sends, "{backend:?}: every send handed back once");
        assert_eq!(drops.load(Ordering::SeqCst), sends, "{backend:?}");
        // The peer sees what was sent, then the reset; never a poisoned byte.
        let (_, reset) = read_all_a(p.peer);
        assert!(reset, "{backend:?}: the peer sees the reset");
    }
}

/// Dropping does what close does (default timeout 1 s).
#[test]
fn drop_applies_the_close_policy() {
    let p = tight_pair();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut zc = sender(&p.sock, ZcBackend::ErrQueue);
    let (_, sends) = fill(&mut zc, &drops);
    assert!(zc.inflight() > 0);
    assert!(
        drops.load(Ordering::SeqCst) < sends,
        "buffers in flight are held"
    );
    let t0 = Instant::now();
    drop(zc);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(drops.load(Ordering::SeqCst), sends);
    let (_, reset) = read_all_a(p.peer);
    assert!(reset);
}

/// A sender whose sends all completed closes at once, and does not reset.
#[test]
fn close_of_an_idle_sender_is_immediate() {
    let p = pair("tcp4");
    let mut zc = ZeroCopySender::new(&p.sock).unwrap();
    zc.send(vec![b'a'; 1000], Flags::NONE, 1).unwrap();
    let mut got = vec![0u8; 1000];
    std::fs::File::from(p.peer.try_clone().unwrap())
        .read_exact(&mut got)
        .unwrap();
    let t0 = Instant::now();
    while zc.inflight() > 0 {
        zc.wait(Some(Duration::from_secs(5))).unwrap();
    }
    let st = zc.close();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(
        (st.close_resets, st.close_abandoned, st.close_completed),
        (0, 0, 1)
    );
    // The connection is intact.
    lowcopy::testing::send(p.sock.as_fd(), b"z", 0).unwrap();
}

/// An io_uring sender closed on another thread than its ring's cannot wait: it resets the
/// connection and abandons what is in flight, leaking those buffers (never dropping one the
/// kernel may read).
#[test]
fn close_off_its_thread_abandons_and_leaks() {
    let p = tight_pair();
    let drops = Arc::new(AtomicUsize::new(0));
    let mut zc = sender(&p.sock, ZcBackend::IoUring);
    let (_, sends) = fill(&mut zc, &drops);
    let inflight = zc.inflight();
    let st = std::thread::scope(|s| s.spawn(move || zc.close()).join().unwrap());
    assert_eq!(st.close_resets, 1, "{st:?}");
    assert_eq!(st.close_abandoned as usize, inflight, "{st:?}");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        sends - inflight,
        "abandoned buffers leaked"
    );
    let (_, reset) = read_all_a(p.peer);
    assert!(reset);
}

/// into_inner waits like close but leaves the connection to its owner.
#[test]
fn into_inner_never_resets() {
    let p = tight_pair();
    let drops = Arc::new(AtomicUsize::new(0));
    let opts = ZcOptions::new()
        .backend(ZcBackend::ErrQueue)
        .close_timeout(Duration::from_millis(200));
    let mut zc: ZeroCopySender<_, Poisoned> = ZeroCopySender::for_buffers(&p.sock, opts).unwrap();
    let (bytes, _) = fill(&mut zc, &drops);
    let sock = zc.into_inner();
    lowcopy::testing::shutdown_write(sock.as_fd()).unwrap();
    let (got, reset) = read_all_a(p.peer);
    assert_eq!((got, reset), (bytes, false));
}

/// Vectored owned sends come back whole and in order; a failed send gives its buffer back.
#[test]
fn vectored_sends_and_failed_sends_give_buffers_back() -> io::Result<()> {
    let p = pair("tcp4");
    let mut zc = ZeroCopySender::new(&p.sock)?;
    let n = zc.send_vectored(vec![b"ab".to_vec(), b"cd".to_vec()], Flags::NONE, 5)?;
    assert_eq!(n, 4);
    let mut got = [0u8; 4];
    std::fs::File::from(p.peer.try_clone()?).read_exact(&mut got)?;
    assert_eq!(&got, b"abcd");
    let mut back = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while back.is_none() {
        assert!(Instant::now() < deadline, "no completion");
        zc.wait(Some(Duration::from_secs(5)))?;
        zc.reap_with(1, |_, o| back = o)?;
    }
    assert_eq!(
        back.unwrap().into_vec(),
        vec![b"ab".to_vec(), b"cd".to_vec()]
    );
    // A send on a shut-down socket fails; the buffer is the caller's again.
    lowcopy::testing::shutdown_write(p.sock.as_fd())?;
    let e = zc.send(b"lost?".to_vec(), Flags::NONE, 6).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPIPE));
    assert_eq!(e.into_buf(), b"lost?");
    Ok(())
}

/// The rest of a partly sent buffer goes out as a Slice of a shared one.
#[test]
fn slices_of_a_shared_buffer() -> io::Result<()> {
    let p = pair("tcp4");
    let block: Arc<[u8]> = Arc::from(&b"header:payload"[..]);
    let mut zc: ZeroCopySender<_, Slice<Arc<[u8]>>> =
        ZeroCopySender::for_buffers(&p.sock, ZcOptions::new())?;
    zc.send(Slice::new(block.clone(), ..7), Flags::NONE, 1)?;
    zc.send(Slice::new(block.clone(), 7..), Flags::NONE, 2)?;
    let mut got = [0u8; 14];
    std::fs::File::from(p.peer.try_clone()?).read_exact(&mut got)?;
    assert_eq!(&got, b"header:payload");
    drop(zc);
    assert_eq!(
        Arc::strong_count(&block),
        1,
        "the sender gave both slices up"
    );
    Ok(())
}

/// A listening socket carries no data: refused at creation, on every backend.
#[test]
fn a_listening_socket_is_refused() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for backend in [
        ZcBackend::Auto,
        ZcBackend::ErrQueue,
        ZcBackend::IoUring,
        ZcBackend::Copy,
    ] {
        let e = ZeroCopySender::with_options(&l, ZcOptions::new().backend(backend)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{backend:?}");
    }
}

/// send_batch: one send and one completion per buffer, sendmmsg's partial progress on a full
/// socket (the items not sent come back in order), and the first send's error with every item.
#[test]
fn send_batch_partial_progress_and_errors() {
    for backend in BACKENDS {
        let p = tight_pair();
        let drops = Arc::new(AtomicUsize::new(0));
        let mut zc = sender(&p.sock, backend);
        let items: Vec<_> = (0..64u64)
            .map(|i| (Poisoned::new(b'a', &drops), i))
            .collect();
        let mut out = [lowcopy::Completion::default(); 64];
        let (done, rest) = zc
            .send_batch(items, Flags::DONTWAIT, &mut out)
            .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        assert!(done.sends > 1 && done.sends < 64, "{backend:?}: {done:?}");
        // The last send may have been short; the rest are the items after it, in order.
        assert_eq!(rest.len(), 64 - done.sends, "{backend:?}");
        assert_eq!(rest[0].1, done.sends as u64, "{backend:?}");
        assert!(rest.windows(2).all(|w| w[1].1 == w[0].1 + 1));
        for c in &out[..done.completions] {
            assert!((c.user_data as usize) < done.sends);
        }
        // The socket is full: a batch now fails on its first send, giving every item back.
        let again: Vec<_> = rest.into_iter().take(3).collect();
        let Err(e) = zc.send_batch(again, Flags::DONTWAIT, &mut out) else {
            panic!("{backend:?}: a full socket took a send");
        };
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{backend:?}");
        let back = e.into_buf();
        assert_eq!(back.iter().map(|x| x.1).collect::<Vec<_>>().len(), 3);
        std::mem::forget(back); // not counted below
                                // Every send completes once the peer reads; each buffer comes back once.
        let reader = std::thread::spawn(move || read_all_a(p.peer));
        let mut seen = done.completions;
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen < done.sends {
            assert!(
                Instant::now() < deadline,
                "{backend:?}: {seen} of {}",
                done.sends
            );
            let _ = zc.wait(Some(Duration::from_millis(200)));
            seen += zc
                .reap_with(usize::MAX, |_, o| assert!(o.is_some()))
                .unwrap();
        }
        drop(zc);
        drop(p.sock);
        let (got, reset) = reader.join().unwrap();
        assert_eq!((got, reset), (done.bytes, false), "{backend:?}");
    }
}

/// A process that exits with owned sends in flight (`std::process::exit`: no destructor runs,
/// so no close policy): the pages stay pinned, nothing can write them any more, and the kernel
/// sends them as they were. The child is this test binary run again with
/// `LOWCOPY_EXIT_CHILD` naming the address to connect to.
#[test]
fn exit_with_sends_in_flight_leaves_an_intact_stream() {
    if let Ok(addr) = std::env::var("LOWCOPY_EXIT_CHILD") {
        let s = std::net::TcpStream::connect(addr).unwrap();
        let mut zc =
            ZeroCopySender::with_options(&s, ZcOptions::new().backend(ZcBackend::ErrQueue))
                .unwrap();
        let mut sent = 0;
        for i in 0..32u64 {
            match zc.send(pattern(sent, CHUNK), Flags::DONTWAIT, i) {
                Ok(n) => sent += n,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(zc.inflight() > 0);
        println!("SENT {sent}");
        std::process::exit(0);
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exit_with_sends_in_flight_leaves_an_intact_stream",
            "--nocapture",
        ])
        .env("LOWCOPY_EXIT_CHILD", l.local_addr().unwrap().to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let sent: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("SENT "))
        .expect("the child says what it sent")
        .parse()
        .unwrap();
    // The child is gone; its connection waited in the accept queue with the data.
    let (mut peer, _) = l.accept().unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), sent, "every byte sent arrives");
    assert!(got == pattern(0, sent), "and only those bytes");
}

/// A close callback that panics: the buffers of sends still in flight are leaked, never freed
/// (the kernel may still read them), and the panic reaches the caller.
#[test]
fn a_panicking_close_callback_frees_no_buffer_in_flight() {
    for backend in [ZcBackend::ErrQueue, ZcBackend::IoUring] {
        for in_place in [false, true] {
            let p = pair("tcp4");
            let drops = Arc::new(AtomicUsize::new(0));
            let mut zc = sender(&p.sock, backend);
            zc.send(Poisoned::new(b'A', &drops), Flags::NONE, 1)
                .unwrap();
            zc.wait(Some(Duration::from_secs(2))).unwrap(); // A completed: the callback gets it
            zc.send(Poisoned::new(b'B', &drops), Flags::MORE, 2)
                .unwrap(); // corked: in flight
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let t = Duration::from_millis(200);
                if in_place {
                    zc.close_in_place(t, |c, _| panic!("the callback panics at {c:?}"));
                    drop(zc);
                } else {
                    zc.close_with(t, |c, _| panic!("the callback panics at {c:?}"));
                }
            }));
            assert!(r.is_err(), "{backend:?}: the panic reached the caller");
            // A's buffer went with the panic (the callback had it); B's was leaked.
            assert_eq!(
                drops.load(Ordering::SeqCst),
                1,
                "{backend:?} in_place={in_place}"
            );
        }
    }
}
