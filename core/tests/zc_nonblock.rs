//! A socket's `O_NONBLOCK` ends a zerocopy send on a full socket with `EAGAIN`, as `send(2)`
//! does, on every backend. io_uring itself ignores the flag (only `MSG_DONTWAIT` in the
//! request counts), so the io_uring backend reads it where it would otherwise sleep: before
//! that, a send without `DONTWAIT` on a non-blocking socket (Python's `settimeout(0)`, any
//! event loop's socket) slept until the peer read.
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use lowcopy::{Flags, ZcBackend, ZcOptions, ZeroCopySender};

/// Sends 64 KiB without `DONTWAIT` on an `O_NONBLOCK` socket whose peer never reads, until a
/// send fails; returns the sends that went and the error, or None without the backend here.
fn fill(backend: ZcBackend) -> Option<(u64, i32)> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_peer, _) = l.accept().unwrap();
    c.set_nonblocking(true).unwrap();
    // The kernel may read a buffer until its completion, which a peer that never reads holds
    // back: the buffer lives as long as the process.
    let buf: &'static [u8] = Box::leak(vec![7u8; 65536].into_boxed_slice());
    let mut z = ZeroCopySender::with_options(&c, ZcOptions::new().backend(backend)).ok()?;
    let mut sends = 0u64;
    loop {
        match z.send(buf.to_vec(), Flags::NONE, sends) {
            Ok(_) => {
                sends += 1;
                assert!(sends < 100_000, "{backend:?}: the socket never filled");
            }
            Err(e) => return Some((sends, e.raw_os_error().unwrap())),
        }
    }
}

#[test]
fn o_nonblock_ends_a_send_on_a_full_socket_on_every_backend() {
    for backend in [ZcBackend::ErrQueue, ZcBackend::IoUring, ZcBackend::Copy] {
        let (tx, rx) = mpsc::channel();
        // Its own thread: a send that sleeps fails the test instead of hanging it.
        std::thread::spawn(move || {
            let _ = tx.send(fill(backend));
        });
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{backend:?}: a send on a full O_NONBLOCK socket slept"));
        let Some((sends, err)) = got else {
            eprintln!("{backend:?}: not available here");
            continue;
        };
        assert_eq!(err, libc::EAGAIN, "{backend:?}: after {sends} sends");
        assert!(sends > 0, "{backend:?}: the first send already failed");
    }
}
