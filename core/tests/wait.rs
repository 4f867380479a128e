//! The public waits (`lowcopy::wait`): abortable from another thread, bounded by their
//! timeout, restarted after signals, and never spinning on a busy error queue.

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lowcopy::{wait_beyond, AbortHandle, Interest, Waiter, Wakeup};

const MS: Duration = Duration::from_millis(1);

/// Aborts `h` after `ms` from another thread.
fn abort_after(h: &Arc<AbortHandle>, ms: u64) -> std::thread::JoinHandle<()> {
    let h = h.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        h.abort();
    })
}

#[test]
fn ready_timeout_and_abort() {
    let p = pair("tcp4");
    let mut w = Waiter::new();
    // Nothing queued: the time limit ends the wait, not before it.
    let t0 = Instant::now();
    let r = w.wait_ready(&p.sock, Interest::Readable, None, Some(50 * MS));
    assert_eq!(r.unwrap(), Wakeup::TimedOut);
    assert!(t0.elapsed() >= 50 * MS);
    assert_eq!(
        w.wait_ready(&p.sock, Interest::Readable, None, Some(Duration::ZERO))
            .unwrap(),
        Wakeup::TimedOut
    );
    // Writable at once.
    assert_eq!(
        w.wait_ready(&p.sock, Interest::Writable, None, None)
            .unwrap(),
        Wakeup::Ready
    );
    // Aborted from another thread while sleeping without a limit.
    let h = Arc::new(AbortHandle::new().unwrap());
    assert!(!h.is_aborted());
    let j = abort_after(&h, 50);
    let t0 = Instant::now();
    let r = w.wait_ready(&p.sock, Interest::Readable, Some(&h), None);
    assert_eq!(r.unwrap(), Wakeup::Aborted);
    assert!(t0.elapsed() >= 40 * MS);
    j.join().unwrap();
    assert!(h.is_aborted());
    // It stays aborted, and an abort wins over readiness.
    write_all(p.peer.as_fd(), b"x");
    wait_queued(p.sock.as_fd(), 1);
    let r = w.wait_ready(&p.sock, Interest::Readable, Some(&h), None);
    assert_eq!(r.unwrap(), Wakeup::Aborted);
    // Bytes queued, not aborted: ready.
    let h2 = AbortHandle::new().unwrap();
    let r = w.wait_ready(&p.sock, Interest::Readable, Some(&h2), Some(Duration::ZERO));
    assert_eq!(r.unwrap(), Wakeup::Ready);
}

#[test]
fn closed_descriptor_is_ebadf() {
    let p = pair("tcp4");
    let dup = p.sock.try_clone().unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&dup);
    drop(dup);
    // SAFETY: the number is closed on purpose: poll answers POLLNVAL, nothing is reached.
    let gone = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
    let e = Waiter::new()
        .wait_ready(gone, Interest::Readable, None, Some(Duration::ZERO))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF));
}

/// A socket whose error queue holds an entry nobody reads: POLLERR stays up. The waiter says
/// "look" once, then sleeps until its timeout or an abort, using almost no CPU.
#[test]
fn busy_error_queue_does_not_spin() {
    for kind in ["zerocopy", "timestamp"] {
        let p = pair("tcp4");
        errqueue_entry(p.sock.as_fd(), kind, kind);
        wait_queued(p.peer.as_fd(), 1);
        let mut w = Waiter::new();
        let r = w.wait_ready(
            &p.sock,
            Interest::Readable,
            None,
            Some(Duration::from_secs(5)),
        );
        assert_eq!(
            r.unwrap(),
            Wakeup::Ready,
            "{kind}: the first POLLERR is for the caller"
        );
        let c0 = thread_cpu();
        let t0 = Instant::now();
        let r = w.wait_ready(&p.sock, Interest::Readable, None, Some(300 * MS));
        assert_eq!(r.unwrap(), Wakeup::TimedOut, "{kind}");
        assert!(t0.elapsed() >= 300 * MS);
        let cpu = thread_cpu() - c0;
        assert!(cpu < 100 * MS, "{kind}: {cpu:?} of CPU in a 300 ms wait");
        // After a timeout the waiter hands POLLERR back once more (the caller may have left
        // its loop), then sleeps again; the epoll path is abortable too.
        let r = w.wait_ready(&p.sock, Interest::Readable, None, Some(Duration::ZERO));
        assert_eq!(r.unwrap(), Wakeup::Ready, "{kind}");
        let h = Arc::new(AbortHandle::new().unwrap());
        let j = abort_after(&h, 50);
        let r = w.wait_ready(&p.sock, Interest::Readable, Some(&h), None);
        assert_eq!(r.unwrap(), Wakeup::Aborted, "{kind}");
        j.join().unwrap();
        // New bytes still wake it.
        let peer = p.peer.try_clone().unwrap();
        let j = std::thread::spawn(move || {
            std::thread::sleep(50 * MS);
            write_all(peer.as_fd(), b"data");
        });
        let r = w.wait_ready(
            &p.sock,
            Interest::Readable,
            None,
            Some(Duration::from_secs(5)),
        );
        assert_eq!(r.unwrap(), Wakeup::Ready, "{kind}");
        j.join().unwrap();
        assert!(inq(p.sock.as_fd()) >= 4);
    }
}

/// `Interest::Errors`: what a zerocopy sender waits for.
#[test]
fn errors_interest_wakes_for_a_notification() {
    let p = pair("tcp4");
    let mut w = Waiter::new();
    let r = w.wait_ready(&p.sock, Interest::Errors, None, Some(20 * MS));
    assert_eq!(r.unwrap(), Wakeup::TimedOut);
    errqueue_entry(p.sock.as_fd(), "zerocopy", "zerocopy");
    let r = w.wait_ready(
        &p.sock,
        Interest::Errors,
        None,
        Some(Duration::from_secs(5)),
    );
    assert_eq!(r.unwrap(), Wakeup::Ready);
}

/// Signals do not end a wait: it is restarted with the time left.
#[test]
fn signals_restart_the_wait() {
    let p = pair("tcp4");
    let sig = signal_me_after(20);
    let t0 = Instant::now();
    let r = Waiter::new().wait_ready(&p.sock, Interest::Readable, None, Some(250 * MS));
    sig.stop();
    assert_eq!(r.unwrap(), Wakeup::TimedOut);
    assert!(t0.elapsed() >= 250 * MS);
    let sig = signal_me_after(20);
    let r = wait_beyond(&p.sock, 0, None, Some(250 * MS));
    sig.stop();
    assert_eq!(r.unwrap(), Wakeup::TimedOut);
}

#[test]
fn wait_beyond_offset() {
    for t in ["tcp4", "tcp6", "unix"] {
        let p = pair(t);
        write_all(p.peer.as_fd(), &pattern(0, 10));
        wait_queued(p.sock.as_fd(), 10);
        // Ten bytes queued: a byte beyond 9 is there, none beyond 10.
        assert_eq!(wait_beyond(&p.sock, 9, None, None).unwrap(), Wakeup::Ready);
        let c0 = thread_cpu();
        let r = wait_beyond(&p.sock, 10, None, Some(200 * MS));
        assert_eq!(r.unwrap(), Wakeup::TimedOut, "{t}");
        assert!(
            thread_cpu() - c0 < 100 * MS,
            "{t}: spun on the bytes before the offset"
        );
        // Bytes that stay before the offset wake it once each, never end it.
        let peer = p.peer.try_clone().unwrap();
        let j = std::thread::spawn(move || {
            for i in 0..5 {
                std::thread::sleep(20 * MS);
                write_all(peer.as_fd(), &pattern(10 + i, 1));
            }
        });
        let r = wait_beyond(&p.sock, 100, None, Some(300 * MS));
        assert_eq!(r.unwrap(), Wakeup::TimedOut, "{t}");
        j.join().unwrap();
        // The byte past the offset ends it.
        let peer = p.peer.try_clone().unwrap();
        let j = std::thread::spawn(move || {
            std::thread::sleep(50 * MS);
            write_all(peer.as_fd(), &pattern(15, 1));
        });
        let r = wait_beyond(&p.sock, 15, None, Some(Duration::from_secs(5)));
        assert_eq!(r.unwrap(), Wakeup::Ready, "{t}");
        j.join().unwrap();
        // Abort.
        let h = Arc::new(AbortHandle::new().unwrap());
        let j = abort_after(&h, 50);
        let r = wait_beyond(&p.sock, 100, Some(&h), None);
        assert_eq!(r.unwrap(), Wakeup::Aborted, "{t}");
        j.join().unwrap();
        // The peer's end of stream ends it.
        shutdown_write(p.peer.as_fd());
        let r = wait_beyond(&p.sock, 100, None, Some(Duration::from_secs(5)));
        assert_eq!(r.unwrap(), Wakeup::Ready, "{t}");
    }
}

#[test]
fn wait_beyond_busy_error_queue_and_reset() {
    let p = pair("tcp4");
    errqueue_entry(p.sock.as_fd(), "timestamp", "timestamp");
    let c0 = thread_cpu();
    let r = wait_beyond(&p.sock, 0, None, Some(200 * MS));
    assert_eq!(r.unwrap(), Wakeup::TimedOut);
    assert!(thread_cpu() - c0 < 100 * MS);
    reset(p.peer);
    let r = wait_beyond(&p.sock, 0, None, Some(Duration::from_secs(5)));
    assert_eq!(r.unwrap(), Wakeup::Ready);
}

#[test]
fn wait_beyond_refuses_what_it_cannot_count() {
    let f = std::fs::File::open("/proc/self/stat").unwrap();
    assert!(wait_beyond(&f, 0, None, Some(Duration::ZERO)).is_err());
}

/// recv_atleast_abortable (the one-call and the Receiver form): an abort from another thread
/// ends the sleep; the bytes the call took come back, else ECANCELED with whatever is queued
/// left in the socket (nothing received is lost).
#[test]
fn recv_atleast_is_abortable() {
    for tr in ["tcp4", "unix"] {
        let p = pair(tr);
        let mut st = lowcopy::RecvStats::default();
        let h = Arc::new(AbortHandle::new().unwrap());
        let t = abort_after(&h, 50);
        let t0 = Instant::now();
        let mut buf = [0u8; 64];
        let r = lowcopy::recv_atleast_abortable(&p.sock, &mut buf, 10, None, &h, &mut st);
        t.join().unwrap();
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ECANCELED), "{tr}");
        assert!(t0.elapsed() >= 40 * MS, "{tr}: ended early");
        // Some bytes, fewer than the minimum: the abort hands them back.
        write_all(p.peer.as_fd(), b"abc");
        let mut rx = lowcopy::Receiver::new(&p.sock).unwrap();
        let h = Arc::new(AbortHandle::new().unwrap());
        let t = abort_after(&h, 50);
        let r = rx.recv_atleast_abortable(&mut buf, 10, None, &h);
        t.join().unwrap();
        // AF_UNIX wakes on any byte and took them: they come back. TCP's mark kept it asleep
        // with the bytes still queued: ECANCELED, and a read gets them.
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                assert_eq!((tr, e.raw_os_error()), ("tcp4", Some(libc::ECANCELED)));
                // (MSG_DONTWAIT: the receiver left its SO_RCVLOWAT of 10 armed.)
                lowcopy::testing::recv(p.sock.as_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap()
            }
        };
        assert_eq!(&buf[..n], b"abc", "{tr}");
    }
}

/// The async peeks' core calls: a peeker's and the stateless one wait for a byte beyond the
/// offset (and return it), end with ETIMEDOUT when none comes, and with ECANCELED when another
/// thread aborts, or at once when the handle was aborted before.
#[test]
fn abortable_peeks() {
    use lowcopy::{peek_at_abortable, PeekMode, Peeker};
    use std::io::IoSliceMut;
    let p = pair("tcp4");
    write_all(p.peer.as_fd(), b"ab");
    let mut pk = Peeker::new(p.sock.as_fd(), PeekMode::Auto).unwrap();
    let mut b = [0u8; 8];
    let h = Arc::new(AbortHandle::new().unwrap());
    // Bytes there: no wait.
    let n = pk
        .peek_abortable(&mut [IoSliceMut::new(&mut b)], &h, Some(MS))
        .unwrap();
    assert_eq!(&b[..n], b"ab");
    // Nothing beyond the cursor: the limit ends it.
    let t0 = Instant::now();
    let e = pk.peek_abortable(&mut [IoSliceMut::new(&mut b)], &h, Some(50 * MS));
    assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::ETIMEDOUT));
    assert!(t0.elapsed() >= 50 * MS);
    // A byte that comes while it sleeps.
    let peer = p.peer.try_clone().unwrap();
    let w = std::thread::spawn(move || {
        std::thread::sleep(30 * MS);
        write_all(peer.as_fd(), b"c");
    });
    let n = pk
        .peek_abortable(&mut [IoSliceMut::new(&mut b)], &h, None)
        .unwrap();
    assert_eq!(&b[..n], b"c");
    w.join().unwrap();
    // The stateless one, beyond offset 3: aborted from another thread.
    let a = abort_after(&h, 30);
    let e = peek_at_abortable(p.sock.as_fd(), 3, &mut [IoSliceMut::new(&mut b)], &h, None);
    assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::ECANCELED));
    a.join().unwrap();
    // Aborted before: no peek at all, even with bytes there.
    let e = pk.peek_abortable(&mut [IoSliceMut::new(&mut b)], &h, None);
    assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::ECANCELED));
    let n = peek_at_abortable(
        p.sock.as_fd(),
        1,
        &mut [IoSliceMut::new(&mut b)],
        &Arc::new(AbortHandle::new().unwrap()),
        None,
    )
    .unwrap();
    assert_eq!(&b[..n], b"bc");
}
