//! Zero-copy receive over a real loopback TCP connection (core/src/zcrx.rs): the input picks
//! the sends (sizes, MSG_ZEROCOPY from page-aligned memory or plain, alignment offsets), the
//! MSS (default or one page per segment), the window, the low-water mark, and per receive
//! whether it blocks. The model is the byte stream: every byte once, in order; the receiver's
//! counters against what its chunks delivered.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use lowcopy::{Flags, ZeroCopyReceiver};

use crate::Input;

fn pattern(p: usize) -> u8 {
    ((p * 131 + 7) % 251) as u8
}

fn set_int(fd: i32, level: i32, name: i32, v: i32) {
    // SAFETY: a live int of the stated size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as _,
        )
    };
    assert_eq!(
        r,
        0,
        "setsockopt({level}, {name}): {}",
        std::io::Error::last_os_error()
    );
}

/// A loopback pair with TCP_MAXSEG set on both ends before connect when `mss` is given.
fn pair(mss: Option<i32>) -> (TcpStream, TcpStream) {
    // SAFETY: plain socket() calls; each fd is owned right away.
    let (l, c) = unsafe {
        use std::os::fd::FromRawFd;
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let c = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(l >= 0 && c >= 0);
        (TcpListener::from_raw_fd(l), TcpStream::from_raw_fd(c))
    };
    if let Some(m) = mss {
        set_int(l.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m);
        set_int(c.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, m);
    }
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as _;
    sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let p = (&mut sa as *mut libc::sockaddr_in).cast::<libc::sockaddr>();
    // SAFETY: `p` points at a live sockaddr_in of `len` bytes.
    unsafe {
        assert_eq!(libc::bind(l.as_raw_fd(), p, len), 0);
        assert_eq!(libc::listen(l.as_raw_fd(), 1), 0);
        assert_eq!(libc::getsockname(l.as_raw_fd(), p, &mut len), 0);
        assert_eq!(libc::connect(c.as_raw_fd(), p, len), 0);
    }
    let (s, _) = l.accept().unwrap();
    c.set_nodelay(true).unwrap();
    (s, c)
}

/// Writes the plan: (length, zerocopy, misalign) per send, from page-aligned memory.
fn send_all(mut c: TcpStream, total: usize, plan: Vec<(usize, bool, usize)>) {
    // A page-aligned private copy of the stream, with room to misalign by < 4096.
    let len = (total + 8192).next_multiple_of(4096);
    // SAFETY: a new private anonymous mapping, owned here, unmapped at the end.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    set_int(c.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1);
    // The whole stream, laid out once at the first send's misalignment: zerocopy sends pin
    // their pages until delivered, so no byte is rewritten while in flight.
    let mis = plan[0].2;
    // SAFETY: `mis + total <= 4096 + total < len`; the bytes are ours.
    let stream = unsafe { std::slice::from_raw_parts_mut(base.cast::<u8>().add(mis), total) };
    for (i, b) in stream.iter_mut().enumerate() {
        *b = pattern(i);
    }
    let mut pos = 0usize;
    let mut k = 0usize;
    while pos < total {
        let (n, zc, _) = plan[k % plan.len()];
        k += 1;
        let n = n.min(total - pos);
        let buf = &stream[pos..pos + n];
        let mut off = 0;
        while off < n {
            let flags = if zc { libc::MSG_ZEROCOPY } else { 0 };
            // SAFETY: `buf[off..]` is live and never rewritten (the kernel holds its own
            // page references for zerocopy data in flight).
            let r =
                unsafe { libc::send(c.as_raw_fd(), buf[off..].as_ptr().cast(), n - off, flags) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                        drain_errqueue(c.as_raw_fd());
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    _ => panic!("send: {e}"),
                }
            }
            off += r as usize;
        }
        pos += n;
        drain_errqueue(c.as_raw_fd());
    }
    c.flush().unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    // Keep the socket until the receiver has the FIN (no RST on close).
    let mut b = [0u8; 1];
    let _ = std::io::Read::read(&mut c, &mut b);
    // SAFETY: our own mapping.
    unsafe { libc::munmap(base, len) };
}

fn drain_errqueue(fd: i32) {
    let mut control = [0u64; 16];
    loop {
        // SAFETY: all-zero is a valid msghdr; it points at a live control buffer only.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the msghdr describes live memory.
        if unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) } < 0 {
            return;
        }
    }
}

/// See the crate docs.
pub fn zcrx(data: &[u8]) {
    let mut inp = Input::new(data);
    let mss = if inp.bool() { Some(4108) } else { None };
    let window = 4096 * (1 + inp.below(64));
    let lowat = [0usize, 1, 4096, 65536, 1 << 20][inp.below(5)];
    let total = inp.below(2 << 20);
    let nplan = 1 + inp.below(8);
    let plan: Vec<(usize, bool, usize)> = (0..nplan)
        .map(|_| {
            let n = 1 + inp.below(300_000);
            let zc = inp.bool();
            let mis = if inp.bool() { 0 } else { inp.below(4096) };
            (n, zc, mis)
        })
        .collect();
    let modes: Vec<bool> = (0..16).map(|_| inp.bool()).collect();

    let (s, c) = pair(mss);
    if lowat > 0 {
        lowcopy::set_rcvlowat(&s, lowat).unwrap();
    }
    // A blocking receive below the mark waits at most this long (then returns what came).
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut r = ZeroCopyReceiver::new(s.as_fd(), window).unwrap();
    let sender = std::thread::spawn(move || send_all(c, total, plan));
    // A stall is 15 s without a byte: a whole-run deadline failed inputs that are only slow
    // (a 4 KiB window below a 1 MiB mark takes ~20 s on a loaded machine, 20 ms per wait).
    let mut progress = (Instant::now(), 0usize);
    let (mut pos, mut bmap, mut bcopy, mut nmap, mut ncopy, mut k) =
        (0usize, 0u64, 0u64, 0u64, 0u64, 0);
    loop {
        if pos != progress.1 {
            progress = (Instant::now(), pos);
        }
        assert!(
            progress.0.elapsed() < Duration::from_secs(15),
            "stalled at byte {pos} of {total}"
        );
        let dontwait = modes[k % modes.len()];
        k += 1;
        let flags = if dontwait {
            Flags::DONTWAIT
        } else {
            Flags::NONE
        };
        let chunk = match r.recv(flags) {
            Ok(c) => c,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            Err(e) => panic!("recv at byte {pos} of {total}: {e}"),
        };
        if chunk.is_eof() {
            break;
        }
        let n = chunk.data.len();
        assert!(
            pos + n <= total,
            "more bytes than sent: {} > {total}",
            pos + n
        );
        for (i, &b) in chunk.data.iter().enumerate() {
            assert_eq!(
                b,
                pattern(pos + i),
                "stream byte {} (mapped {})",
                pos + i,
                chunk.mapped
            );
        }
        if chunk.mapped {
            assert_eq!(n % 4096, 0, "a mapped chunk is whole pages");
            assert_eq!(
                chunk.data.as_ptr() as usize % 4096,
                0,
                "mapped pages are aligned"
            );
            nmap += 1;
            bmap += n as u64;
        } else {
            ncopy += 1;
            bcopy += n as u64;
        }
        pos += n;
    }
    assert_eq!(pos, total, "every byte arrived");
    assert!(
        r.recv(Flags::DONTWAIT).unwrap().is_eof(),
        "end of stream stays"
    );
    let st = r.stats();
    assert_eq!(
        st.bytes_mapped + st.bytes_copied,
        total as u64,
        "mapped + copied == delivered: {st:?}"
    );
    assert_eq!(
        (st.bytes_mapped, st.bytes_copied),
        (bmap, bcopy),
        "bytes by kind: {st:?}"
    );
    assert_eq!(
        (st.chunks_mapped, st.chunks_copied),
        (nmap, ncopy),
        "chunks by kind: {st:?}"
    );
    assert!(st.bytes_copybuf <= st.bytes_copied, "{st:?}");
    assert!(st.zc_calls_unmapped <= st.zc_calls, "{st:?}");
    assert!(st.syscalls >= st.zc_calls, "{st:?}");
    drop(r);
    drop(s); // the sender waits for this end to close before it closes its own
    sender.join().unwrap();
}
