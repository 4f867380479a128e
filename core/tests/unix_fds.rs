//! AF_UNIX descriptors that come with consumed bytes, beyond what peek.json shows: the pidfd
//! that `SO_PASSPIDFD` makes the kernel attach to every read with a control buffer, and
//! `SO_PASSCRED`'s credentials, must neither leak nor stop a consume short.

use std::os::fd::AsFd;
use std::sync::Mutex;

use lowcopy::testing as t;
use lowcopy::{PeekMode, Peeker};

/// `SO_PASSPIDFD` (include/uapi/asm-generic/socket.h, Linux 6.5).
const SO_PASSPIDFD: libc::c_int = 76;

/// The tests count the process's descriptors: one at a time.
static FDS: Mutex<()> = Mutex::new(());

fn queue(p: &t::Pair) {
    let null = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(
        t::send_fds(p.peer.as_fd(), b"ab", null.as_fd(), 2).unwrap(),
        2
    );
    assert_eq!(t::send(p.peer.as_fd(), b"cd", 0).unwrap(), 2);
    t::wait_queued(p.sock.as_fd(), 4, std::time::Duration::from_secs(5)).unwrap();
}

#[test]
fn pidfds_and_credentials_on_consumed_bytes_are_closed_and_do_not_stop_a_consume() {
    let _one = FDS.lock().unwrap();
    for (opt, name) in [
        (SO_PASSPIDFD, "SO_PASSPIDFD"),
        (libc::SO_PASSCRED, "SO_PASSCRED"),
    ] {
        for mode in [PeekMode::Offset, PeekMode::Discard] {
            let p = t::pair("unix").unwrap();
            if t::set_int(p.sock.as_fd(), libc::SOL_SOCKET, opt, 1).is_err() {
                eprintln!("{name}: not on this kernel, skipped");
                continue;
            }
            let before = t::open_fd_count().unwrap();
            queue(&p);
            let mut pk = Peeker::new(p.sock.as_fd(), mode).unwrap();
            assert_eq!(pk.consume(4).unwrap(), 4, "{name} {mode:?}");
            // The two SCM_RIGHTS descriptors, and with SO_PASSPIDFD one pidfd per read.
            assert!(
                pk.stats().fds_closed >= 2,
                "{name} {mode:?}: {:?}",
                pk.stats()
            );
            drop(pk);
            assert_eq!(
                t::open_fd_count().unwrap(),
                before,
                "{name} {mode:?}: a leak"
            );
            let mut b = [0u8; 1];
            let e = t::recv(p.sock.as_fd(), &mut b, libc::MSG_DONTWAIT).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{name} {mode:?}");
        }
    }
}

/// The stateless consume closes them too.
#[test]
fn the_stateless_consume_closes_descriptors() {
    let _one = FDS.lock().unwrap();
    let p = t::pair("unix").unwrap();
    let before = t::open_fd_count().unwrap();
    queue(&p);
    let n = lowcopy::consume(p.sock.as_fd(), 3, lowcopy::Flags::DONTWAIT).unwrap();
    assert_eq!(n, 3);
    assert_eq!(t::open_fd_count().unwrap(), before);
    let mut b = [0u8; 4];
    assert_eq!(t::recv(p.sock.as_fd(), &mut b, 0).unwrap(), 1);
    assert_eq!(b[0], b'd');
}
