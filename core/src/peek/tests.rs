//! Unit tests of the peek calls (the behaviour tables are in core/tests).

use super::*;
use std::cell::RefCell;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

thread_local! {
    /// Runs in `peek_discard` between a peek that found nothing past the cursor and the
    /// shutdown check: the window a peer's last bytes and FIN can fall into.
    static AFTER_DISCARD_PEEK: RefCell<Option<Box<dyn FnMut()>>> = RefCell::new(None);
}

pub(super) fn after_discard_peek() {
    AFTER_DISCARD_PEEK.with(|h| {
        if let Some(f) = h.borrow_mut().as_mut() {
            f();
        }
    });
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Peeks "head" at the cursor, then makes the peer write "tail" and `end` the connection
/// in the window between a discard peek that finds nothing past the cursor and the
/// peeker's check for the peer's end; returns the peeker's next peek.
fn race_the_end(
    server: &TcpStream,
    mut client: TcpStream,
    end: fn(TcpStream),
) -> (io::Result<usize>, [u8; 64], Peeker<&TcpStream>) {
    client.write_all(b"head").unwrap();
    let mut p = Peeker::new(server, PeekMode::Discard).unwrap();
    // The checks after a peek that TCP_INQ's hint does not settle (AF_UNIX, a kernel without
    // TCP_INQ, the hint above the bytes peeked): with the hint, an empty peek ends at its
    // recvmsg and there is no window to race.
    p.inq_hint = InqHint::Off;
    let mut buf = [0u8; 64];
    let dontwait = Flags::DONTWAIT;
    assert_eq!(
        p.peek(&mut [IoSliceMut::new(&mut buf)], dontwait).unwrap(),
        4
    );
    let mut peer = Some(client);
    AFTER_DISCARD_PEEK.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            if let Some(mut c) = peer.take() {
                c.write_all(b"tail").unwrap();
                end(c);
                // Loopback delivers both in these calls; leave them time anyway.
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }))
    });
    let r = p.peek(&mut [IoSliceMut::new(&mut buf)], dontwait);
    AFTER_DISCARD_PEEK.with(|h| *h.borrow_mut() = None);
    (r, buf, p)
}

/// The last bytes and the FIN land in that window: the bytes, then end of stream.
#[test]
fn bytes_arriving_with_the_fin_after_an_empty_discard_peek_are_not_lost() {
    let (client, server) = tcp_pair();
    let (r, buf, mut p) = race_the_end(&server, client, |c| {
        c.shutdown(std::net::Shutdown::Write).unwrap()
    });
    assert_eq!(r.unwrap(), 4, "the bytes that came with the FIN");
    assert_eq!(&buf[..4], b"tail");
    let mut more = [0u8; 8];
    assert_eq!(
        p.peek(&mut [IoSliceMut::new(&mut more)], Flags::NONE)
            .unwrap(),
        0
    );
    assert_eq!(p.offset(), 8);
}

/// The last bytes and a reset land in that window: the bytes, then ECONNRESET once (as
/// recv reports it), then end of stream.
#[test]
fn bytes_arriving_with_a_reset_after_an_empty_discard_peek_are_not_lost() {
    let (client, server) = tcp_pair();
    let (r, buf, mut p) = race_the_end(&server, client, |c| {
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a live socket and a linger struct of the size given.
        let rc = unsafe {
            libc::setsockopt(
                c.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&l as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        drop(c); // close with linger 0: RST
    });
    assert_eq!(r.unwrap(), 4, "the bytes that came before the RST");
    assert_eq!(&buf[..4], b"tail");
    let mut more = [0u8; 8];
    let e = p
        .peek(&mut [IoSliceMut::new(&mut more)], Flags::NONE)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
    assert_eq!(
        p.peek(&mut [IoSliceMut::new(&mut more)], Flags::NONE)
            .unwrap(),
        0
    );
    assert_eq!(p.offset(), 8);
}

fn get_int(fd: BorrowedFd<'_>, name: c_int) -> c_int {
    sys::getsockopt_int(fd, libc::SOL_SOCKET, name).unwrap()
}

/// A peeker owning its descriptor (a dup, as the bindings hold it) restores the socket's
/// options when dropped; `into_inner` restores them too and hands the descriptor back.
#[test]
fn owned_and_borrowed_peekers_restore_the_socket() {
    let (mut client, server) = tcp_pair();
    client.write_all(b"abcdef").unwrap();
    let lowat = get_int(server.as_fd(), libc::SO_RCVLOWAT);
    let dup = server.as_fd().try_clone_to_owned().unwrap();
    let mut p = Peeker::new(dup, PeekMode::Offset).unwrap();
    p.set_lowat_armed(true).unwrap();
    p.seek(3).unwrap();
    assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), 0);
    assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), 4);
    let mut buf = [0u8; 8];
    let n = p.peek(&mut [IoSliceMut::new(&mut buf)], Flags::DONTWAIT);
    assert_eq!(n.unwrap(), 3);
    assert_eq!(&buf[..3], b"def");
    assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), 6);
    drop(p);
    assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), -1);
    assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), lowat);

    let mut p = Peeker::new(&server, PeekMode::Offset).unwrap();
    p.set_lowat_armed(true).unwrap();
    p.seek(2).unwrap();
    assert_eq!(p.get_ref().as_raw_fd(), server.as_raw_fd());
    assert_eq!(p.as_fd().as_raw_fd(), server.as_raw_fd());
    let back: &TcpStream = p.into_inner();
    assert_eq!(back.as_raw_fd(), server.as_raw_fd());
    assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), -1);
    assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), lowat);
    // Nothing was consumed.
    assert_eq!(
        peek_at(&server, 0, &mut [IoSliceMut::new(&mut buf)], Flags::NONE).unwrap(),
        6
    );
}

/// A stated kind costs one check, no classification; peek_at costs one recv when the
/// kernel's offset is there, a setsockopt more when it is not; the result says where the
/// bytes came from, in the stream too after a consume.
#[test]
fn peek_at_on_a_handle_costs_what_a_hand_written_loop_does() {
    let (mut client, server) = tcp_pair();
    client.write_all(b"0123456789abcdef").unwrap();
    let mut p = Peeker::with_kind(&server, PeekMode::Offset, StreamKind::Tcp4).unwrap();
    assert_eq!(
        p.stats().syscalls,
        3,
        "only TCP_INFO (the kind's check), SO_PEEK_OFF = 0 and SO_OOBINLINE"
    );
    let mut buf = [0u8; 4];
    let dw = Flags::DONTWAIT;
    let r = p.peek_at(0, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
    assert_eq!(&buf, b"0123");
    assert_eq!(
        (r.len, r.offset, r.stream_pos, r.syscalls, r.flags),
        (4, 0, 0, 1, 0)
    );
    // Where the last peek ended: one syscall.
    let r = p.peek_at(4, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
    assert_eq!(&buf, b"4567");
    assert_eq!((r.offset, r.syscalls, r.flags), (4, 1, 0));
    // Back to 2 (a retransmission): the kernel's offset moves first.
    let r = p.peek_at(2, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
    assert_eq!(&buf, b"2345");
    assert_eq!((r.offset, r.syscalls, r.flags), (2, 2, PEEK_MOVED));
    assert_eq!(p.offset(), 6);
    // Consume 3: the kernel lowers its offset by 3 (to 3), the daemon's offset of the
    // same byte is 6 - 3 = 3: one syscall, and the stream position says byte 6.
    assert_eq!(p.consume(3).unwrap(), 3);
    let r = p.peek_at(3, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
    assert_eq!(&buf, b"6789");
    assert_eq!((r.offset, r.stream_pos, r.syscalls), (3, 6, 1));
    // A daemon that forgot the consume asks for offset 6: stream position 9, not 6.
    let r = p.peek_at(6, &mut [IoSliceMut::new(&mut buf)], dw).unwrap();
    assert_eq!((r.stream_pos, r.flags), (9, PEEK_MOVED));
    assert_eq!(&buf, b"9abc");
    // Nothing beyond: EAGAIN, the cursor at the offset asked.
    let e = p
        .peek_at(13, &mut [IoSliceMut::new(&mut buf)], dw)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    assert_eq!(p.offset(), 13);
    let e = p
        .peek_at(OFFSET_MAX + 1, &mut [IoSliceMut::new(&mut buf)], dw)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOVERFLOW));
    assert_eq!(p.offset(), 13);
    let e = p
        .peek_at(0, &mut [IoSliceMut::new(&mut [])], dw)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
}

/// The discard mechanism and AUTO's small offsets: a prefix, flagged; end of stream is 0.
#[test]
fn peek_at_through_a_discard_prefix() {
    let (mut client, server) = tcp_pair();
    client.write_all(b"hello world").unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut p = Peeker::with_kind(&server, PeekMode::Discard, StreamKind::Tcp4).unwrap();
    let mut buf = [0u8; 5];
    let r = p
        .peek_at(6, &mut [IoSliceMut::new(&mut buf)], Flags::NONE)
        .unwrap();
    assert_eq!(&buf, b"world");
    assert_eq!((r.len, r.syscalls, r.flags), (5, 1, PEEK_PREFIXED));
    let r = p
        .peek_at(11, &mut [IoSliceMut::new(&mut buf)], Flags::NONE)
        .unwrap();
    assert_eq!(r.len, 0, "end of stream after the offset");
    let mut a = Peeker::with_kind(&server, PeekMode::Auto, StreamKind::Tcp4).unwrap();
    let r = a
        .peek_at(6, &mut [IoSliceMut::new(&mut buf)], Flags::NONE)
        .unwrap();
    assert_eq!(&buf, b"world");
    assert_ne!(
        r.flags & PEEK_PREFIXED,
        0,
        "AUTO peeks 6 bytes in with a prefix"
    );
}

#[test]
fn stated_kinds_from_raw() {
    use libc::{AF_INET, AF_INET6, AF_UNIX, AF_UNSPEC, IPPROTO_MPTCP, IPPROTO_TCP};
    assert_eq!(StreamKind::from_raw(AF_UNSPEC, 0).unwrap(), None);
    assert_eq!(
        StreamKind::from_raw(AF_INET, 0).unwrap(),
        Some(StreamKind::Tcp4)
    );
    assert_eq!(
        StreamKind::from_raw(AF_INET6, IPPROTO_TCP).unwrap(),
        Some(StreamKind::Tcp6)
    );
    assert_eq!(
        StreamKind::from_raw(AF_INET, IPPROTO_MPTCP).unwrap(),
        Some(StreamKind::Mptcp4)
    );
    assert_eq!(
        StreamKind::from_raw(AF_UNIX, 0).unwrap(),
        Some(StreamKind::Unix)
    );
    for (d, p) in [
        (AF_INET, libc::IPPROTO_UDP),
        (AF_UNIX, IPPROTO_TCP),
        (99, 0),
        (0, 6),
    ] {
        let e = StreamKind::from_raw(d, p).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}

/// into_inner_unrestored leaves the options as they are: no syscall for a socket about
/// to be closed.
#[test]
fn unrestored_release_leaves_the_options() {
    let (mut client, server) = tcp_pair();
    client.write_all(b"abc").unwrap();
    let mut p = Peeker::with_kind(&server, PeekMode::Offset, StreamKind::Tcp4).unwrap();
    p.set_lowat_armed(true).unwrap();
    let mut buf = [0u8; 2];
    p.peek(&mut [IoSliceMut::new(&mut buf)], Flags::DONTWAIT)
        .unwrap();
    p.seek(2).unwrap();
    let _ = p.into_inner_unrestored();
    assert_eq!(get_int(server.as_fd(), SO_PEEK_OFF), 2);
    assert_eq!(get_int(server.as_fd(), libc::SO_RCVLOWAT), 3);
}

#[test]
fn peekers_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Peeker<std::os::fd::OwnedFd>>();
    check::<Peeker<BorrowedFd<'static>>>();
    check::<Peeker<TcpStream>>();
}

#[test]
fn more_is_refused_by_peeks_and_consume() {
    let (mut client, server) = tcp_pair();
    client.write_all(b"x").unwrap();
    let mut p = Peeker::new(&server, PeekMode::Auto).unwrap();
    let mut buf = [0u8; 4];
    let e = p
        .peek(&mut [IoSliceMut::new(&mut buf)], Flags::MORE)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    let e = consume(&server, 1, Flags::MORE | Flags::DONTWAIT).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(p.offset(), 0);
    assert_eq!(consume(&server, 1, Flags::DONTWAIT).unwrap(), 1);
}

#[test]
fn mode_from_u32() {
    assert_eq!(PeekMode::try_from(0).unwrap(), PeekMode::Auto);
    assert_eq!(PeekMode::try_from(1).unwrap(), PeekMode::Offset);
    assert_eq!(PeekMode::try_from(2).unwrap(), PeekMode::Discard);
    assert_eq!(PeekMode::try_from(3).unwrap(), PeekMode::OffsetOrDiscard);
    assert_eq!(
        PeekMode::try_from(4).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
}

#[test]
fn discard_prefix_covers_exactly_then_caller_iovecs() {
    let mut space = [MaybeUninit::<iovec>::uninit(); IOV_MAX];
    let user = [iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 7,
    }];
    assert_eq!(discard_iov(&mut space, 0, &user).unwrap().len(), 1);
    let v = discard_iov(&mut space, 1, &user).unwrap();
    assert_eq!((v.len(), v[0].iov_len, v[1].iov_len), (2, 1, 7));
    let v = discard_iov(&mut space, 2 * SCRATCH_LEN + 5, &user).unwrap();
    let lens: Vec<usize> = v.iter().map(|v| v.iov_len).collect();
    assert_eq!(lens, [SCRATCH_LEN, SCRATCH_LEN, 5, 7]);
    let v = discard_iov(&mut space, 3 * SCRATCH_LEN, &[]).unwrap();
    assert_eq!(v.iter().map(|v| v.iov_len).sum::<usize>(), 3 * SCRATCH_LEN);
    let reach = discard_max(1);
    assert_eq!(
        discard_iov(&mut space, reach, &user).unwrap().len(),
        IOV_MAX
    );
    let e = discard_iov(&mut space, reach + 1, &user).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOVERFLOW));
}

#[test]
fn discard_reach_leaves_room_for_caller_iovecs() {
    assert_eq!(discard_max(1), 1023 * SCRATCH_LEN);
    assert!(
        discard_max(1) >= 32 << 20,
        "must reach tcp_rmem max (32 MiB)"
    );
    assert_eq!(discard_max(IOV_MAX), 0);
}

/// With TCP_INQ's hint an empty non-blocking discard peek is one recvmsg; bytes, a FIN or a
/// reset that come after it are found by the next peek.
#[test]
fn an_empty_discard_peek_is_one_recvmsg_and_the_next_finds_what_came() {
    for reset in [false, true] {
        let (mut client, server) = tcp_pair();
        client.write_all(b"head").unwrap();
        let mut p = Peeker::new(&server, PeekMode::Discard).unwrap();
        assert_eq!(p.inq_hint, InqHint::On);
        let mut buf = [0u8; 64];
        let dw = Flags::DONTWAIT;
        assert_eq!(p.peek(&mut [IoSliceMut::new(&mut buf)], dw).unwrap(), 4);
        let before = p.stats().syscalls;
        let e = p.peek(&mut [IoSliceMut::new(&mut buf)], dw).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        assert_eq!(p.stats().syscalls, before + 1);
        client.write_all(b"tail").unwrap();
        if reset {
            let l = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: a live socket and a linger struct of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    client.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&l as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
        } else {
            client.shutdown(std::net::Shutdown::Write).unwrap();
        }
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(p.peek(&mut [IoSliceMut::new(&mut buf)], dw).unwrap(), 4);
        assert_eq!(&buf[..4], b"tail");
        if reset {
            // Blocking: the reset is reported (a non-blocking peek answers EAGAIN from the hint).
            let e = p
                .peek(&mut [IoSliceMut::new(&mut buf)], Flags::NONE)
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
        }
        assert_eq!(p.peek(&mut [IoSliceMut::new(&mut buf)], dw).unwrap(), 0);
    }
}
