//! Blocking peeks end the way a blocking recv would: on one byte beyond the cursor, at end of
//! stream, with EINTR on a signal and EAGAIN on SO_RCVTIMEO, in both mechanisms.

mod common;

use std::io::IoSliceMut;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::*;
use lowcopy::{PeekMode, Peeker};

fn peek_past_the_queue(
    mode: PeekMode,
    timeo: Option<Duration>,
) -> (std::io::Result<usize>, Duration) {
    let p = pair("tcp4");
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
    let r = peeker.peek(&mut [IoSliceMut::new(&mut buf)], 0);
    let took = t0.elapsed();
    if let Some(k) = k {
        k.stop();
    }
    (r, took)
}

#[test]
fn a_signal_ends_a_blocking_peek_with_eintr() {
    for mode in [PeekMode::Offset, PeekMode::Discard] {
        let (r, took) = peek_past_the_queue(mode, None);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EINTR), "{mode:?}");
        assert!(took < Duration::from_secs(2), "{mode:?}: {took:?}");
    }
}

#[test]
fn so_rcvtimeo_ends_a_blocking_peek_with_eagain() {
    for mode in [PeekMode::Offset, PeekMode::Discard] {
        let (r, took) = peek_past_the_queue(mode, Some(Duration::from_millis(300)));
        assert_eq!(
            r.unwrap_err().raw_os_error(),
            Some(libc::EAGAIN),
            "{mode:?}"
        );
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(2),
            "{mode:?}: {took:?}"
        );
    }
}
