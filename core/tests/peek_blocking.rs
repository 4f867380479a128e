//! Blocking peeks end the way a blocking recv would: on one byte beyond the cursor, at end of
//! stream, with EINTR on a signal and EAGAIN on SO_RCVTIMEO, in both mechanisms.

mod common;

use std::io::IoSliceMut;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::*;
use lowcopy::{Flags, PeekMode, Peeker};

fn peek_past_the_queue(
    transport: &str,
    mode: PeekMode,
    timeo: Option<Duration>,
) -> (std::io::Result<usize>, Duration) {
    let p = pair(transport);
    write_all(p.peer.as_fd(), b"abc");
    wait_queued(p.sock.as_fd(), 3);
    if let Some(t) = timeo {
        set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, t);
    }
    let mut peeker = Peeker::new(p.sock.as_fd(), mode).unwrap();
    peeker.seek(3).unwrap();
    let mut buf = [0u8; 16];
    let t0 = Instant::now();
    let k = timeo.is_none().then(|| signal_me_after(200));
    let r = peeker.peek(&mut [IoSliceMut::new(&mut buf)], Flags::NONE);
    let took = t0.elapsed();
    if let Some(k) = k {
        k.stop();
    }
    (r, took)
}

/// Transports and modes whose blocking wait differs: SO_PEEK_OFF (tcp4, both mechanisms: the
/// discard one waits with a one-byte peek at the cursor) and MSG_WAITALL (MPTCP).
const CASES: [(&str, PeekMode); 3] = [
    ("tcp4", PeekMode::Offset),
    ("tcp4", PeekMode::Discard),
    ("mptcp4", PeekMode::Discard),
];

#[test]
fn a_signal_ends_a_blocking_peek_with_eintr() {
    // MPTCP has no SO_PEEK_OFF: the discard mechanism's MSG_WAITALL wait.
    for (t, mode) in CASES {
        let (r, took) = peek_past_the_queue(t, mode, None);
        assert_eq!(
            r.unwrap_err().raw_os_error(),
            Some(libc::EINTR),
            "{t} {mode:?}"
        );
        assert!(took < Duration::from_secs(2), "{t} {mode:?}: {took:?}");
    }
}

#[test]
fn so_rcvtimeo_ends_a_blocking_peek_with_eagain() {
    for (t, mode) in CASES {
        let (r, took) = peek_past_the_queue(t, mode, Some(Duration::from_millis(300)));
        assert_eq!(
            r.unwrap_err().raw_os_error(),
            Some(libc::EAGAIN),
            "{t} {mode:?}"
        );
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(2),
            "{t} {mode:?}: {took:?}"
        );
    }
}
