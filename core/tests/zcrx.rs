//! Zero-copy receive over loopback, checked byte for byte: streams that mix mapped pages and
//! stragglers, streams where nothing maps, exact accounting, and a peek cursor on the same
//! socket. The simpler behaviour cases live in tests/scenarios/rx.json (rx_scenarios.rs).

mod common;

use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use common::*;
use lowcopy::{set_rcvlowat, Flags, PeekMode, Peeker, ZcrxStats, ZeroCopyReceiver};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// TCP_MAXSEG that gives one 4 KiB page of payload per segment (4096 + 12 bytes of the
/// timestamp option): what makes loopback pages mappable.
const MSS_PAGE: i32 = 4108;

/// What [`drain`] saw, counted from the chunks themselves (not from the receiver's stats).
struct Seen {
    bytes: usize,
    hash: u64,
    chunks_mapped: u64,
    chunks_copied: u64,
    bytes_mapped: u64,
    bytes_copied: u64,
}

/// Receives until end of stream, checking every byte against `want` and hashing the stream.
/// Returns what the chunks delivered, and the receiver's stats.
fn drain<F: AsFd>(r: &mut ZeroCopyReceiver<F>, want: &[u8]) -> (Seen, ZcrxStats) {
    let (mut pos, mut h, mut nmap, mut ncopy) = (0usize, FNV_INIT, 0u64, 0u64);
    let (mut bmap, mut bcopy) = (0u64, 0u64);
    loop {
        let c = r
            .recv(Flags::NONE)
            .unwrap_or_else(|e| panic!("recv at byte {pos}: {e}"));
        if c.is_eof() {
            break;
        }
        let n = c.data.len();
        assert!(
            pos + n <= want.len(),
            "more bytes than sent: {} > {}",
            pos + n,
            want.len()
        );
        assert!(
            c.data == &want[pos..pos + n],
            "wrong bytes at {pos}..{} (mapped {})",
            pos + n,
            c.mapped
        );
        if c.mapped {
            assert_eq!(n % 4096, 0, "a mapped chunk is whole pages");
            assert_eq!(
                c.data.as_ptr() as usize % 4096,
                0,
                "mapped pages are page-aligned"
            );
            nmap += 1;
            bmap += n as u64;
        } else {
            ncopy += 1;
            bcopy += n as u64;
        }
        h = fnv1a(h, c.data);
        pos += n;
    }
    // End of stream stays end of stream.
    assert!(r.recv(Flags::NONE).unwrap().is_eof());
    assert!(r.recv(Flags::DONTWAIT).unwrap().is_eof());
    let seen = Seen {
        bytes: pos,
        hash: h,
        chunks_mapped: nmap,
        chunks_copied: ncopy,
        bytes_mapped: bmap,
        bytes_copied: bcopy,
    };
    (seen, r.stats())
}

/// Sends `data` from another thread (MSG_ZEROCOPY from page-aligned memory when `zc`, plain
/// writes otherwise), then shuts down the peer's sending side.
fn sender(
    peer: std::os::fd::OwnedFd,
    data: Vec<u8>,
    sizes: Vec<usize>,
    zc: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if zc {
            send_zerocopy(peer.as_fd(), &data, &sizes);
        } else {
            for c in data.chunks(sizes[0]) {
                write_all(peer.as_fd(), c);
            }
        }
        shutdown_write(peer.as_fd());
        // Keep the socket open until the receiver has seen the FIN (no RST on close).
        std::thread::sleep(Duration::from_millis(500));
    })
}

/// The receiver's counters against what its chunks delivered, kind by kind.
fn check_accounting(s: &ZcrxStats, total: usize, seen: &Seen) {
    assert_eq!(
        s.bytes_mapped + s.bytes_copied,
        total as u64,
        "mapped + copied == delivered: {s:?}"
    );
    assert_eq!(
        s.bytes_mapped, seen.bytes_mapped,
        "bytes in mapped chunks: {s:?}"
    );
    assert_eq!(
        s.bytes_copied, seen.bytes_copied,
        "bytes in copied chunks: {s:?}"
    );
    assert!(s.bytes_copybuf <= s.bytes_copied, "{s:?}");
    assert_eq!(s.chunks_mapped, seen.chunks_mapped, "{s:?}");
    assert_eq!(s.chunks_copied, seen.chunks_copied, "{s:?}");
    assert!(s.zc_calls_unmapped <= s.zc_calls, "{s:?}");
    assert!(s.syscalls >= s.zc_calls, "{s:?}");
    assert_eq!(s.peek_off_fixups, 0, "no peeker here: {s:?}");
}

fn pct(s: &ZcrxStats) -> f64 {
    100.0 * s.bytes_mapped as f64 / (s.bytes_mapped + s.bytes_copied).max(1) as f64
}

fn run_stream(v6: bool, mss: Option<i32>, zc: bool, total: usize, sizes: &[usize]) -> ZcrxStats {
    let p = tcp_pair_opts(TcpOpts {
        v6,
        mss,
        ..Default::default()
    });
    set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(10));
    assert_eq!(set_rcvlowat(p.sock.as_fd(), 512 * KIB).unwrap(), 512 * KIB);
    let data = pattern(0, total);
    let want_hash = fnv1a(FNV_INIT, &data);
    let mut r = ZeroCopyReceiver::new(p.sock.as_fd(), 512 * KIB).unwrap();
    assert_eq!(r.window(), 512 * KIB);
    assert_eq!(
        r.struct_size() as u32,
        lowcopy::probe().unwrap().tcp_zerocopy_receive_size,
        "the struct size the kernel knows (64 bytes since 5.12, 16 on 4.18)"
    );
    let t = sender(p.peer, data.clone(), sizes.to_vec(), zc);
    let (seen, s) = drain(&mut r, &data);
    t.join().unwrap();
    assert_eq!(seen.bytes, total, "every byte arrived");
    assert_eq!(seen.hash, want_hash, "stream hash");
    check_accounting(&s, total, &seen);
    eprintln!(
        "v6={v6} mss={mss:?} zc={zc}: {:.1}% mapped, {} B copied ({} via copybuf), {} zc calls ({} unmapped), {} syscalls",
        pct(&s),
        s.bytes_copied,
        s.bytes_copybuf,
        s.zc_calls,
        s.zc_calls_unmapped,
        s.syscalls
    );
    s
}

/// Sends whose sizes are not page multiples leave unaligned fragments between aligned ones:
/// the receiver gets mapped pages and stragglers, interleaved, and every byte exactly once.
/// A receiver that owns its descriptor (a dup, as the bindings hold it) receives as well;
/// `into_inner` unmaps and hands the socket back with the rest of the stream still queued.
#[test]
fn a_receiver_owning_its_socket_hands_it_back() {
    let p = tcp_pair_opts(TcpOpts::default());
    set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(10));
    let data = pattern(0, 300 * KIB);
    let t = sender(p.peer, data.clone(), vec![10_000], false);
    let dup: OwnedFd = p.sock.as_fd().try_clone_to_owned().unwrap();
    let raw = dup.as_raw_fd();
    let mut r = ZeroCopyReceiver::new(dup, 64 * KIB).unwrap();
    assert_eq!((r.as_fd().as_raw_fd(), r.get_ref().as_raw_fd()), (raw, raw));
    let mut got = Vec::new();
    while got.len() < 100 * KIB {
        let c = r.recv(Flags::NONE).unwrap();
        assert!(
            !c.is_eof() && !c.mapped,
            "plain writes at the default MSS do not map"
        );
        got.extend_from_slice(c.data);
    }
    let fd: OwnedFd = r.into_inner();
    assert_eq!(fd.as_raw_fd(), raw);
    std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut got).unwrap();
    t.join().unwrap();
    assert!(
        got == data,
        "every byte once, in order ({} of {})",
        got.len(),
        data.len()
    );
}

#[test]
fn receivers_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ZeroCopyReceiver<OwnedFd>>();
    check::<ZeroCopyReceiver<BorrowedFd<'static>>>();
}

#[test]
fn mixed_mapped_and_straggler_stream_hashes_equal() {
    let sizes = [
        64 * KIB,
        5 * 4096 + 1234,
        300,
        128 * KIB,
        16 * 4096 + 2000,
        7,
    ];
    for v6 in [false, true] {
        let s = run_stream(v6, Some(MSS_PAGE), true, 24 * MIB + 333, &sizes);
        assert!(s.bytes_mapped > 0, "some pages mapped: {s:?}");
        assert!(s.bytes_copied > 0, "some stragglers copied: {s:?}");
        assert!(s.chunks_mapped > 0 && s.chunks_copied > 0, "{s:?}");
    }
}

/// Page-aligned MSG_ZEROCOPY sends with MSS 4108: nearly everything maps (KERNEL-FACTS 4.3:
/// 99.9% on 6.18).
#[test]
fn page_aligned_zerocopy_sender_maps_nearly_everything() {
    let s = run_stream(true, Some(MSS_PAGE), true, 32 * MIB, &[512 * KIB]);
    assert!(pct(&s) > 90.0, "{:.1}% mapped: {s:?}", pct(&s));
}

/// Plain writes (with or without MSS 4108): loopback delivers nothing mappable, and every
/// byte comes by copy.
#[test]
fn nothing_maps_without_page_sized_segments_yet_every_byte_arrives() {
    for (mss, zc) in [(None, false), (Some(MSS_PAGE), false)] {
        let s = run_stream(false, mss, zc, 8 * MIB + 17, &[100 * KIB]);
        assert_eq!(s.bytes_mapped, 0, "mss={mss:?} zc={zc}: {s:?}");
        assert_eq!(s.zc_calls_unmapped, s.zc_calls, "{s:?}");
    }
}

/// A page-aligned MSG_ZEROCOPY sender at the default MSS: how much the kernel maps is its
/// business (6.18 maps most of it: the deferred copy at delivery builds whole-page fragments,
/// skb boundaries leave stragglers; rx_bench reports the share), but whatever it maps,
/// lowcopy delivers every byte once in order, a mapped chunk is whole page-aligned pages, and
/// its counters match the chunks kind by kind: `run_stream` asserts all of that, on a stream
/// that interleaves the two kinds wherever this kernel maps some of it.
#[test]
fn page_aligned_zerocopy_sender_at_default_mss() {
    run_stream(false, None, true, 8 * MIB, &[512 * KIB]);
}

fn peek_off(fd: BorrowedFd<'_>) -> i32 {
    get_int(fd, libc::SOL_SOCKET, 42).unwrap()
}

/// MSG_PEEK at the kernel's SO_PEEK_OFF.
fn raw_peek(fd: BorrowedFd<'_>, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    // SAFETY: `b` is writable for `len` bytes.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            len,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    assert!(n >= 0, "peek: {}", std::io::Error::last_os_error());
    b.truncate(n as usize);
    b
}

/// The kernel does not lower SO_PEEK_OFF for bytes TCP_ZEROCOPY_RECEIVE maps or copies as
/// stragglers; the receiver does, so a peek cursor keeps pointing at the same stream byte.
#[test]
fn zero_copy_receive_keeps_a_peek_cursor_on_the_same_stream_byte() {
    // Mapped pages (MSS 4108 + page-aligned zerocopy sends), then stragglers (default MSS).
    for (mss, zc) in [(Some(MSS_PAGE), true), (None, false)] {
        let p = tcp_pair_opts(TcpOpts {
            mss,
            listener_rcvbuf: Some(MIB as i32),
            ..Default::default()
        });
        let data = pattern(0, 256 * KIB);
        if zc {
            send_zerocopy(p.peer.as_fd(), &data, &[256 * KIB]);
        } else {
            write_all(p.peer.as_fd(), &data);
        }
        wait_queued(p.sock.as_fd(), data.len());
        let fd = p.sock.as_fd();
        // A peeker has looked at the first 100000 bytes: SO_PEEK_OFF = 100000.
        set_int(fd, libc::SOL_SOCKET, 42, 0);
        let mut seen = 0;
        while seen < 100_000 {
            seen += raw_peek(fd, 100_000 - seen).len();
        }
        assert_eq!(peek_off(fd), 100_000);
        let mut r = ZeroCopyReceiver::new(fd, 32 * KIB).unwrap();
        let mut delivered = 0usize;
        while delivered < 64 * KIB {
            let c = r.recv(Flags::NONE).unwrap();
            assert!(c.data == &data[delivered..delivered + c.data.len()]);
            let (c_len, c_mapped) = (c.data.len(), c.mapped);
            delivered += c.data.len();
            // Whatever the kernel consumed, the cursor still names stream byte 100000.
            let off = peek_off(fd) as usize;
            let ctx = format!(
                "mss={mss:?}: chunk of {c_len} (mapped {c_mapped}), {delivered} B in, \
                 SO_PEEK_OFF {off}"
            );
            assert!(off < 100_000, "{ctx}");
            if off == 0 {
                // The kernel consumed the cursor's byte: with this chunk, or as stragglers
                // (at most a page) it copied for the next one.
                assert!(delivered + 4096 >= 100_000, "{ctx}");
                break;
            }
            assert_eq!(raw_peek(fd, 50), &data[100_000..100_050], "{ctx}");
            set_int(fd, libc::SOL_SOCKET, 42, off as i32); // undo the 50-byte peek
        }
        let s = r.stats();
        // Fixups are due exactly when the kernel consumed bytes without a read: pages it
        // mapped, stragglers it copied into the copy buffer (5.11+; the 16-byte struct of
        // 4.18-5.6 has none, and every copied byte is read with recv, which moves the offset).
        if s.bytes_mapped + s.bytes_copybuf > 0 {
            assert!(s.peek_off_fixups > 0, "mss={mss:?}: {s:?}");
        } else {
            assert_eq!(s.peek_off_fixups, 0, "mss={mss:?}: {s:?}");
        }
        if zc {
            assert!(s.bytes_mapped > 0, "{s:?}");
        }
        // Receive past the cursor: it ends at the head (0), like a read moves it.
        while delivered < 120_000 {
            let c = r.recv(Flags::NONE).unwrap();
            delivered += c.data.len();
        }
        assert_eq!(peek_off(fd), 0);
        assert_eq!(raw_peek(fd, 10).len(), 10);
    }
}

/// The same through a lowcopy Peeker in SO_PEEK_OFF mode: its next peek continues at the
/// stream byte after the ones it saw, though zero-copy receive consumed bytes before them.
#[test]
fn a_peeker_continues_at_the_right_bytes_after_zero_copy_receive() {
    let p = tcp_pair_opts(TcpOpts {
        mss: Some(MSS_PAGE),
        listener_rcvbuf: Some(MIB as i32),
        ..Default::default()
    });
    let data = pattern(0, 128 * KIB);
    send_zerocopy(p.peer.as_fd(), &data, &[128 * KIB]);
    wait_queued(p.sock.as_fd(), data.len());
    let fd = p.sock.as_fd();
    let mut peeker = Peeker::new(fd, PeekMode::Offset).unwrap();
    let mut buf = vec![0u8; 50_000];
    assert_eq!(
        peeker
            .peek(&mut [IoSliceMut::new(&mut buf)], Flags::NONE)
            .unwrap(),
        50_000
    );
    let mut r = ZeroCopyReceiver::new(fd, 16 * KIB).unwrap();
    let c = r.recv(Flags::NONE).unwrap();
    assert!(c.mapped, "page-aligned sends map");
    assert_eq!(c.data, &data[..16 * KIB]);
    peeker.note_consumed(c.data.len()).unwrap();
    assert_eq!(
        peeker.offset(),
        50_000 - 16 * KIB,
        "the cursor follows the bytes received"
    );
    let mut next = [0u8; 1000];
    assert_eq!(
        peeker
            .peek(&mut [IoSliceMut::new(&mut next)], Flags::NONE)
            .unwrap(),
        1000
    );
    assert_eq!(&next[..], &data[50_000..51_000]);
    assert_eq!(peeker.offset(), 51_000 - 16 * KIB);
}

/// A reset mid-stream: the bytes received before it are delivered, then ECONNRESET, never a
/// silent end of stream.
#[test]
fn reset_mid_stream_delivers_what_came_then_econnreset() {
    let p = tcp_pair_opts(TcpOpts {
        listener_rcvbuf: Some(MIB as i32),
        ..Default::default()
    });
    set_timeval(p.sock.as_fd(), libc::SO_RCVTIMEO, Duration::from_secs(5));
    let data = pattern(0, 300 * KIB);
    write_all(p.peer.as_fd(), &data);
    wait_queued(p.sock.as_fd(), data.len());
    let mut r = ZeroCopyReceiver::new(p.sock.as_fd(), 64 * KIB).unwrap();
    let c = r.recv(Flags::NONE).unwrap();
    let mut got = c.data.len();
    reset(p.peer);
    std::thread::sleep(Duration::from_millis(20));
    let err = loop {
        match r.recv(Flags::NONE) {
            Ok(c) => {
                assert!(!c.is_eof(), "a reset must not look like end of stream");
                assert!(c.data == &data[got..got + c.data.len()]);
                got += c.data.len();
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err.raw_os_error(), Some(libc::ECONNRESET), "{err}");
    assert!(got <= data.len());
}

/// Blocking receive waits for the low-water mark; MSG_DONTWAIT and SO_RCVTIMEO give EAGAIN.
#[test]
fn blocking_waits_for_the_mark_and_nonblocking_says_eagain() {
    let p = tcp_pair_opts(TcpOpts::default());
    let fd = p.sock.as_fd();
    let mut r = ZeroCopyReceiver::new(fd, 256 * KIB).unwrap();
    let e = r.recv(Flags::DONTWAIT).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    set_timeval(fd, libc::SO_RCVTIMEO, Duration::from_millis(100));
    let t0 = std::time::Instant::now();
    assert_eq!(
        r.recv(Flags::NONE).unwrap_err().raw_os_error(),
        Some(libc::EAGAIN)
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(90),
        "{:?}",
        t0.elapsed()
    );
    // With a 100 KiB mark a blocking receive sleeps through 60 KiB and wakes for 120 KiB.
    set_timeval(fd, libc::SO_RCVTIMEO, Duration::from_secs(5));
    set_rcvlowat(fd, 100 * KIB).unwrap();
    let peer = p.peer.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        write_all(peer.as_fd(), &pattern(0, 60 * KIB));
        std::thread::sleep(Duration::from_millis(200));
        write_all(peer.as_fd(), &pattern(60 * KIB, 60 * KIB));
    });
    let t0 = std::time::Instant::now();
    let c = r.recv(Flags::NONE).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(150),
        "woke below the mark after {:?}",
        t0.elapsed()
    );
    let mut got = c.data.len();
    t.join().unwrap();
    while got < 120 * KIB {
        got += r.recv(Flags::DONTWAIT).unwrap().data.len();
    }
    assert_eq!(got, 120 * KIB);
    assert!(r.stats().wakeups >= 1);
}

/// A datagram socket shut down for reading polls readable forever with nothing to read:
/// recv_atleast ends (0 bytes, end of stream) instead of spinning until its timeout.
#[test]
fn recv_atleast_on_a_datagram_socket_shut_down_for_reading_ends() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(udp.local_addr().unwrap()).unwrap(); // shutdown needs a connected socket
    let (ua, _ub) = std::os::unix::net::UnixDatagram::pair().unwrap();
    for fd in [udp.as_fd(), ua.as_fd()] {
        // SAFETY: no pointers.
        assert_eq!(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RD) }, 0);
        let mut buf = [0u8; 64];
        let t0 = std::time::Instant::now();
        let r = lowcopy::recv_atleast(fd, &mut buf, 8, Some(std::time::Duration::from_secs(5)));
        assert_eq!(r.unwrap(), 0);
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(1),
            "it waited {:?}",
            t0.elapsed()
        );
    }
}
