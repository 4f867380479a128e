//! Urgent data (TCP `MSG_OOB`, AF_UNIX out-of-band bytes) under a peeker: the policy of
//! core/src/peek/mod.rs "Urgent data". Urgent bytes stay in the stream where the peer sent them; a
//! peeker delivers, byte for byte and in order, what reads of the socket deliver; consume(n)
//! drops exactly n; no byte is peeked twice or skipped. Runs over tcp4, tcp6 and unix in every
//! mode; where the family has no SO_PEEK_OFF here (probe), a discard peek may stop at a mark
//! ahead of the head (EAGAIN) until the bytes before it are consumed, and nowhere else.

mod common;

use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use common::*;
use lowcopy::{Flags, PeekMode, Peeker};

/// Sends `data` with MSG_OOB: its last byte becomes the urgent byte (TCP) or the
/// out-of-band byte (AF_UNIX).
fn send_oob(fd: BorrowedFd<'_>, data: &[u8]) {
    let n = lowcopy::testing::send_oob(fd, data).expect("send(MSG_OOB)");
    assert_eq!(n, data.len(), "send(MSG_OOB)");
}

fn mode_of(m: &str) -> PeekMode {
    match m {
        "auto" => PeekMode::Auto,
        "offset" => PeekMode::Offset,
        "discard" => PeekMode::Discard,
        m => panic!("{m}"),
    }
}

/// What one run saw.
struct Outcome {
    /// Peeked bytes, in order.
    peeked: Vec<u8>,
    /// Bytes consumed through the peeker.
    consumed: usize,
    /// Peeks that stopped at an urgent mark ahead of the head (EAGAIN with bytes beyond).
    stuck: usize,
}

/// Rounds of: the peer writes a chunk and an urgent byte; the peeker peeks everything
/// queued in small pieces (so that peeks end at marks and discard prefixes grow), rewinds and
/// re-peeks a little, then consumes part of what it peeked. The stream is the pattern; the
/// urgent bytes are pattern bytes too, so a byte twice, skipped or out of place shows.
fn run(transport: &str, mode: &str) -> (Vec<u8>, Outcome, Pair) {
    let ctx = format!("[{transport} | {mode}]");
    let p = pair(transport);
    let mut peeker = Peeker::new(p.sock.as_fd(), mode_of(mode)).unwrap();
    assert_eq!(
        get_int(p.sock.as_fd(), libc::SOL_SOCKET, libc::SO_OOBINLINE).unwrap(),
        1,
        "{ctx}: the peeker keeps urgent bytes inline"
    );
    let mut sent = Vec::new();
    let mut out = Outcome {
        peeked: Vec::new(),
        consumed: 0,
        stuck: 0,
    };
    let sizes = [1000usize, 1, 4097, 3, 20000, 7];
    for (round, &size) in sizes.iter().enumerate() {
        let chunk = pattern(sent.len(), size);
        write_all(p.peer.as_fd(), &chunk);
        sent.extend_from_slice(&chunk);
        let urgent = pattern(sent.len(), 1);
        send_oob(p.peer.as_fd(), &urgent);
        sent.extend_from_slice(&urgent);
        peek_all(&mut peeker, p.sock.as_fd(), sent.len(), &mut out, &ctx);
        assert!(
            out.peeked[..] == sent[..out.peeked.len()],
            "{ctx} round {round}: peeked bytes differ from the stream sent"
        );
        // A rewind over the last urgent byte re-peeks the same bytes.
        let back = peeker.offset().min(3);
        let at = peeker.offset() - back;
        peeker.seek(at).unwrap();
        let mut b = [0u8; 3];
        let n = peek_once(&mut peeker, &mut b, &ctx);
        let total_at = out.consumed + at;
        assert_eq!(
            &b[..n],
            &sent[total_at..total_at + n],
            "{ctx}: re-peek after a rewind"
        );
        peeker.seek(at + back).unwrap();
        // Consume about half of what is peeked: exactly that many, marks or not.
        let c = peeker.offset() / 2;
        assert_eq!(
            peeker.consume(c).unwrap(),
            c,
            "{ctx} round {round}: consume({c})"
        );
        out.consumed += c;
    }
    shutdown_write(p.peer.as_fd());
    peek_all(&mut peeker, p.sock.as_fd(), sent.len(), &mut out, &ctx);
    let mut b = [0u8; 8];
    assert_eq!(
        peeker
            .peek(&mut [IoSliceMut::new(&mut b)], Flags::NONE)
            .unwrap(),
        0,
        "{ctx}: end of stream after the cursor"
    );
    drop(peeker);
    (sent, out, p)
}

/// One non-blocking peek into `b`, retried while EAGAIN (bytes in flight on loopback).
fn peek_once(p: &mut Peeker<BorrowedFd<'_>>, b: &mut [u8], ctx: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match p.peek(&mut [IoSliceMut::new(b)], Flags::DONTWAIT) {
            Ok(n) => return n,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                assert!(Instant::now() < deadline, "{ctx}: peek keeps saying EAGAIN");
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{ctx}: peek: {e}"),
        }
    }
}

/// Peeks in 7-byte pieces until the cursor covers `total` stream bytes (less what was
/// consumed). A peek that says EAGAIN while bytes lie beyond the cursor stopped at an urgent
/// mark it cannot pass: counted, then the bytes before it are consumed, as a relay would once
/// they are acknowledged.
fn peek_all(
    p: &mut Peeker<BorrowedFd<'_>>,
    fd: BorrowedFd<'_>,
    total: usize,
    out: &mut Outcome,
    ctx: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut b = [0u8; 7];
    while out.consumed + p.offset() < total {
        assert!(
            Instant::now() < deadline,
            "{ctx}: only {} of {total} bytes peeked",
            out.consumed + p.offset()
        );
        match p.peek(&mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT) {
            Ok(0) => panic!("{ctx}: end of stream at {}", out.consumed + p.offset()),
            Ok(n) => out.peeked.extend_from_slice(&b[..n]),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                if inq(fd) > p.offset() {
                    out.stuck += 1;
                    let c = p.offset();
                    assert_eq!(p.consume(c).unwrap(), c, "{ctx}: consume up to the mark");
                    out.consumed += c;
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Err(e) => panic!("{ctx}: peek: {e}"),
        }
    }
}

#[test]
fn a_peeker_delivers_urgent_bytes_in_the_stream_as_reads_do() {
    let mut runs = 0;
    for transport in ["tcp4", "tcp6", "unix"] {
        for mode in ["auto", "offset", "discard"] {
            let ctx = format!("[{transport} | {mode}]");
            if mode == "offset" && !has_peek_off(transport) {
                skip(
                    &format!("urgent.rs {ctx}"),
                    "no SO_PEEK_OFF on this family here (probe)",
                );
                continue;
            }
            let (sent, out, p) = run(transport, mode);
            assert_eq!(
                out.peeked.len(),
                sent.len(),
                "{ctx}: every byte peeked once"
            );
            assert!(
                out.peeked == sent,
                "{ctx}: peeked bytes differ from the stream sent"
            );
            // What is left is read with plain reads of the same socket: the rest of the
            // stream, urgent bytes in place.
            let mut rest = Vec::new();
            std::io::Read::read_to_end(
                &mut std::fs::File::from(p.sock.as_fd().try_clone_to_owned().unwrap()),
                &mut rest,
            )
            .unwrap();
            assert!(
                rest == sent[out.consumed..],
                "{ctx}: plain reads after the peeker"
            );
            // Only a discard peek (DISCARD, or AUTO falling back to it) on a socket without
            // SO_PEEK_OFF may stop at a mark.
            if has_peek_off(transport) {
                assert_eq!(out.stuck, 0, "{ctx}: peeks stopped at a mark");
            }
            runs += 1;
        }
    }
    assert!(runs >= 6, "only {runs} runs");
}

/// The stateless consume drops exactly n across a mark too, and plain reads then deliver
/// the urgent byte inline when the socket has SO_OOBINLINE (the policy's ground).
#[test]
fn consume_drops_exactly_n_across_an_urgent_mark() {
    for transport in ["tcp4", "tcp6", "unix"] {
        let p = pair(transport);
        set_int(p.sock.as_fd(), libc::SOL_SOCKET, libc::SO_OOBINLINE, 1);
        write_all(p.peer.as_fd(), b"abc");
        send_oob(p.peer.as_fd(), b"X");
        write_all(p.peer.as_fd(), b"def");
        wait_queued(p.sock.as_fd(), 7);
        assert_eq!(
            lowcopy::consume(p.sock.as_fd(), 5, Flags::DONTWAIT).unwrap(),
            5,
            "{transport}"
        );
        let mut rest = [0u8; 8];
        // SAFETY: a live buffer.
        let n = unsafe {
            libc::recv(
                p.sock.as_raw_fd(),
                rest.as_mut_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT,
            )
        };
        assert_eq!(&rest[..n as usize], b"ef", "{transport}");
    }
}

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().unwrap()
}

fn recv_raw(fd: BorrowedFd<'_>, buf: &mut [u8], flags: i32) -> isize {
    // SAFETY: a live buffer of the stated length.
    unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) }
}

/// Urgent::Caller (C: LOWCOPY_PEEK_URGENT_CALLER): no SO_OOBINLINE; peeks stop at the mark, a
/// peek at or past a mark ahead of the head is ENOMSG (blocking or not) until the bytes before
/// it are consumed; then peeks deliver what reads deliver (the urgent byte skipped), an empty
/// peek right after the skipped byte is EAGAIN, and a blocking one waits for the next byte.
#[test]
fn a_caller_owns_urgent_data_peeks_stop_at_the_mark() {
    use lowcopy::{PeekerOptions, StreamKind, Urgent};
    // Refused: OFFSET with it (before any syscall), and AF_UNIX.
    let u = pair("unix");
    let o = PeekerOptions::new(PeekMode::Offset).urgent(Urgent::Caller);
    assert_eq!(
        errno_of(Peeker::with_options(u.sock.as_fd(), o)),
        libc::EINVAL
    );
    let o = PeekerOptions::new(PeekMode::Auto).urgent(Urgent::Caller);
    assert_eq!(
        errno_of(Peeker::with_options(u.sock.as_fd(), o)),
        libc::EOPNOTSUPP
    );
    let o = o.kind(StreamKind::Unix);
    assert_eq!(
        errno_of(Peeker::with_options(u.sock.as_fd(), o)),
        libc::EOPNOTSUPP
    );
    let mut runs = 0;
    for transport in ["tcp4", "tcp6"] {
        for mode in [PeekMode::Auto, PeekMode::Discard, PeekMode::OffsetOrDiscard] {
            let ctx = format!("[{transport} | {mode:?}]");
            let p = pair(transport);
            set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(3));
            let o = PeekerOptions::new(mode).urgent(Urgent::Caller);
            let mut pk = Peeker::with_options(p.sock.as_fd(), o).unwrap();
            assert_eq!(pk.mode(), PeekMode::Discard, "{ctx}");
            assert_eq!(
                get_int(p.sock.as_fd(), libc::SOL_SOCKET, libc::SO_OOBINLINE).unwrap(),
                0,
                "{ctx}: SO_OOBINLINE left as it was"
            );
            write_all(p.peer.as_fd(), b"abcd");
            send_oob(p.peer.as_fd(), b"X"); // urgent byte X, the mark after "abcd"
            write_all(p.peer.as_fd(), b"efgh");
            // SIOCINQ counts only the bytes before a mark ahead (no SO_OOBINLINE).
            wait_queued(p.sock.as_fd(), 4);
            std::thread::sleep(Duration::from_millis(20));
            let mut b = [0u8; 16];
            // A peek that reaches the mark ends before it.
            let n = pk
                .peek(&mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
                .unwrap();
            assert_eq!(&b[..n], b"abcd", "{ctx}: the peek ends at the mark");
            // At the mark: ENOMSG, non-blocking and blocking; the cursor stays.
            for f in [Flags::DONTWAIT, Flags::NONE] {
                let e = pk.peek(&mut [IoSliceMut::new(&mut b)], f);
                assert_eq!(errno_of(e), libc::ENOMSG, "{ctx}: a peek at the mark");
                assert_eq!(pk.offset(), 4, "{ctx}");
            }
            // Past the mark too; before it, the bytes before the mark.
            let e = pk.peek_at(6, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT);
            assert_eq!(errno_of(e), libc::ENOMSG, "{ctx}: a peek past the mark");
            let r = pk
                .peek_at(1, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
                .unwrap();
            assert_eq!(&b[..r.len as usize], b"bcd", "{ctx}");
            // The caller takes the urgent byte itself: still ENOMSG until it consumes.
            let mut oob = [0u8; 1];
            assert_eq!(
                recv_raw(p.sock.as_fd(), &mut oob, libc::MSG_OOB),
                1,
                "{ctx}"
            );
            assert_eq!(&oob, b"X", "{ctx}");
            let e = pk.peek_at(4, &mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT);
            assert_eq!(errno_of(e), libc::ENOMSG, "{ctx}: the mark still ahead");
            assert_eq!(pk.consume(4).unwrap(), 4, "{ctx}");
            assert_eq!(pk.offset(), 0, "{ctx}");
            // Past the mark: what reads deliver (the urgent byte is not in it).
            let n = pk
                .peek(&mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT)
                .unwrap();
            assert_eq!(&b[..n], b"efgh", "{ctx}: peeks after the mark");
            // Nothing beyond the cursor (the skipped urgent byte still counted by SIOCINQ).
            let e = pk.peek(&mut [IoSliceMut::new(&mut b)], Flags::DONTWAIT);
            assert_eq!(errno_of(e), libc::EAGAIN, "{ctx}: empty after the mark");
            // A blocking peek waits for the next byte (no spin: the CPU time stays small).
            let peer = p.peer.try_clone().unwrap();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                write_all(peer.as_fd(), b"ij");
            });
            let (t0, c0) = (Instant::now(), thread_cpu());
            let n = pk
                .peek(&mut [IoSliceMut::new(&mut b)], Flags::NONE)
                .unwrap();
            t.join().unwrap();
            assert_eq!(&b[..n], b"ij", "{ctx}: a blocking peek after the mark");
            assert!(
                t0.elapsed() >= Duration::from_millis(90),
                "{ctx}: it waited"
            );
            assert!(
                thread_cpu() - c0 < Duration::from_millis(50),
                "{ctx}: it slept"
            );
            // Reads of the same socket deliver the same bytes.
            drop(pk);
            let mut rest = [0u8; 16];
            let n = recv_raw(p.sock.as_fd(), &mut rest, libc::MSG_DONTWAIT);
            assert_eq!(&rest[..n as usize], b"efghij", "{ctx}: plain reads");
            runs += 1;
        }
    }
    assert_eq!(runs, 6);
}
