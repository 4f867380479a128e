//! What an empty peek costs (issue 22.4): with MSG_DONTWAIT and nothing past the offset, one
//! syscall on every mechanism over TCP and MPTCP and with SO_PEEK_OFF on AF_UNIX; the discard
//! mechanism on AF_UNIX two (the recvmsg and one poll: the kernel's stream peek from the head
//! reports neither the peer's shutdown nor an out-of-band byte ahead). Counted by the peeker's
//! own PeekResult::syscalls, which counts every syscall it makes; a rewind writes SO_PEEK_OFF
//! once (PEEK_MOVED, two syscalls).

mod common;

use std::io::IoSliceMut;
use std::os::fd::AsFd;
use std::time::Duration;

use common::*;
use lowcopy::peek::PEEK_MOVED;
use lowcopy::{Flags, PeekMode, Peeker};

/// The syscalls of an empty non-blocking peek at offset 8 (8 bytes queued) and at 0 (an
/// empty queue), and that the peek says EAGAIN.
fn empty_cost(transport: &str, mode: PeekMode) -> Option<(u32, u32)> {
    let p = pair(transport);
    let mut pk = match Peeker::new(p.sock.as_fd(), mode) {
        Ok(pk) => pk,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return None,
        Err(e) => panic!("{transport} {mode:?}: {e}"),
    };
    let mut b = [0u8; 16];
    let at0 = pk
        .peek_at(0, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
        .unwrap_err();
    assert_eq!(
        at0.raw_os_error(),
        Some(libc::EAGAIN),
        "{transport} {mode:?}"
    );
    let s0 = pk.stats().syscalls;
    let _ = pk.peek_at(0, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT);
    let empty0 = (pk.stats().syscalls - s0) as u32;
    write_all(p.peer.as_fd(), b"01234567");
    wait_queued(p.sock.as_fd(), 8);
    let r = pk
        .peek_at(0, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
        .unwrap();
    assert_eq!(r.len, 8);
    // Twice: the first may settle what the peeker learns once (nothing here does).
    for _ in 0..2 {
        let s = pk.stats().syscalls;
        let e = pk
            .peek_at(8, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{transport} {mode:?}");
        let n = (pk.stats().syscalls - s) as u32;
        if n != 1 {
            return Some((empty0, n));
        }
    }
    Some((empty0, 1))
}

#[test]
fn an_empty_peek_is_one_syscall_on_every_mechanism() {
    let mut rows = Vec::new();
    for transport in ["tcp4", "tcp6", "unix", "mptcp4"] {
        for mode in [PeekMode::Offset, PeekMode::Discard] {
            let Some((at0, at8)) = empty_cost(transport, mode) else {
                skip(
                    &format!("empty_peek.rs [{transport} | {mode:?}]"),
                    "no SO_PEEK_OFF for this family here (probe), or no MPTCP",
                );
                continue;
            };
            eprintln!("empty peek {transport:6} {mode:?}: offset 0: {at0}, offset 8: {at8}");
            assert_eq!(at0, 1, "{transport} {mode:?}: an empty queue");
            let want = if transport == "unix" && mode == PeekMode::Discard {
                2
            } else {
                1
            };
            assert_eq!(at8, want, "{transport} {mode:?}: nothing past offset 8");
            rows.push((transport, mode));
        }
    }
    assert!(rows.len() >= 4, "only {} runs", rows.len());
}

/// The end of the stream is still told from an empty queue on AF_UNIX's discard path (the
/// poll that replaced FIONREAD's question sees the shutdown), and a blocking peek there still
/// waits for the next byte.
#[test]
fn unix_discard_tells_the_end_and_waits() {
    let p = pair("unix");
    set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(3));
    let mut pk = Peeker::new(p.sock.as_fd(), PeekMode::Discard).unwrap();
    let mut b = [0u8; 16];
    write_all(p.peer.as_fd(), b"0123");
    wait_queued(p.sock.as_fd(), 4);
    assert_eq!(
        pk.peek(&mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
            .unwrap(),
        4
    );
    let peer = p.peer.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        write_all(peer.as_fd(), b"z");
    });
    assert_eq!(
        pk.peek(&mut [IoSliceMut::new(&mut b)], Flags::NONE)
            .unwrap(),
        1
    );
    assert_eq!(b[0], b'z');
    t.join().unwrap();
    shutdown_write(p.peer.as_fd());
    assert_eq!(
        pk.peek(&mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
            .unwrap(),
        0,
        "end of stream after the cursor"
    );
}

/// A rewind writes SO_PEEK_OFF once: 2 syscalls, PEEK_MOVED (every mode that uses it).
#[test]
fn a_rewind_writes_so_peek_off_once() {
    for transport in ["tcp4", "tcp6", "unix"] {
        if !has_peek_off(transport) {
            skip(
                &format!("empty_peek.rs rewind [{transport}]"),
                "no SO_PEEK_OFF for this family here (probe)",
            );
            continue;
        }
        for mode in [PeekMode::Offset, PeekMode::OffsetOrDiscard, PeekMode::Auto] {
            let p = pair(transport);
            let mut pk = Peeker::new(p.sock.as_fd(), mode).unwrap();
            write_all(p.peer.as_fd(), &pattern(0, 10000));
            wait_queued(p.sock.as_fd(), 10000);
            let mut b = [0u8; 100];
            pk.peek_at(0, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
                .unwrap();
            pk.peek_at(9000, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
                .unwrap();
            let r = pk
                .peek_at(5000, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
                .unwrap();
            assert_eq!(&b[..], &pattern(5000, 100)[..], "{transport} {mode:?}");
            assert_eq!(r.syscalls, 2, "{transport} {mode:?}: setsockopt + recv");
            assert_eq!(r.flags & PEEK_MOVED, PEEK_MOVED, "{transport} {mode:?}");
        }
    }
}
