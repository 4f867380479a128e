//! Zero-copy TCP receive: received pages mapped into a read-only window of the process
//! (`mmap` of the socket + `getsockopt(TCP_ZEROCOPY_RECEIVE)`, Linux 4.18, 05255b823a61),
//! with a copy path for every byte that cannot be mapped.
//!
//! The kernel maps only payload that sits in whole, page-aligned page fragments: on a NIC
//! that splits headers from a page-multiple payload, or over loopback when the sender uses
//! `MSG_ZEROCOPY` from page-aligned buffers and both ends set `TCP_MAXSEG` to 4096 + 12
//! (the TCP timestamp option). Anything else reaches the caller by copy: stragglers the kernel
//! copies into the receiver's copy buffer in the same call (5.11), and the `recv_skip_hint`
//! bytes it asks user space to read. Every byte arrives exactly once, mapped or copied, in
//! stream order.
//!
//! Kernel source: net/ipv4/tcp.c `tcp_zerocopy_receive`, `tcp_mmap`, and the getsockopt case
//! `TCP_ZEROCOPY_RECEIVE`; the selftest tools/testing/selftests/net/tcp_mmap.c.

use std::fmt;
use std::io;
use std::mem::ManuallyDrop;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::sys::{self, errno, TcpZerocopyReceive, SO_PEEK_OFF};
use crate::wait::Waiter;
use crate::Flags;

/// Largest window [`ZeroCopyReceiver::new`] accepts: 1 GiB, more than any receive queue holds
/// with the default `tcp_rmem` (32 MiB).
pub const WINDOW_MAX: usize = 1 << 30;

/// The copy buffer for `recv_skip_hint` reads: the window's size within these bounds.
const COPY_MIN: usize = 64 * 1024;
const COPY_MAX: usize = 1024 * 1024;

/// Struct sizes at which fields appear (`offsetofend` in include/uapi/linux/tcp.h).
const ZC_FULL: usize = size_of::<TcpZerocopyReceive>();
const ZC_MIN: usize = 16;
const END_ERR: usize = 24;
const END_COPYBUF: usize = 36;
const END_FLAGS: usize = 40;

/// `struct tcp_zerocopy_receive` bytes this kernel accepts; 0 until first probed.
static ZC_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Counters kept by a [`ZeroCopyReceiver`]. Byte counts are of bytes delivered to the caller:
/// `bytes_mapped + bytes_copied` is exactly the number of stream bytes it returned.
///
/// Shared with C as `lowcopy_zcrx_recv_stats` (`#[repr(C)]`); fields are only ever appended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZcrxStats {
    // doc-source: zcrx_stats.bytes_mapped
    /// Bytes delivered as pages mapped into the window.
    // doc-end
    pub bytes_mapped: u64,
    // doc-source: zcrx_stats.bytes_copied
    /// Bytes delivered by copy (both kinds below).
    // doc-end
    pub bytes_copied: u64,
    // doc-source: zcrx_stats.bytes_copybuf
    /// Of `bytes_copied`: bytes the kernel copied into the copy buffer within the zero-copy
    /// call (stragglers, and small queues). The rest were read with `recv`.
    // doc-end
    pub bytes_copybuf: u64,
    // doc-source: zcrx_stats.chunks_mapped
    /// Chunks returned that were mapped pages.
    // doc-end
    pub chunks_mapped: u64,
    // doc-source: zcrx_stats.chunks_copied
    /// Chunks returned that were copies.
    // doc-end
    pub chunks_copied: u64,
    // doc-source: zcrx_stats.syscalls
    /// Syscalls made (including failed ones).
    // doc-end
    pub syscalls: u64,
    // doc-source: zcrx_stats.zc_calls
    /// `TCP_ZEROCOPY_RECEIVE` calls.
    // doc-end
    pub zc_calls: u64,
    // doc-source: zcrx_stats.zc_calls_unmapped
    /// `TCP_ZEROCOPY_RECEIVE` calls that mapped nothing (queue empty or not mappable).
    // doc-end
    pub zc_calls_unmapped: u64,
    // doc-source: zcrx_stats.wakeups
    /// `poll` returns that reported the socket ready, when `recv` had to wait.
    // doc-end
    pub wakeups: u64,
    // doc-source: zcrx_stats.peek_off_fixups
    /// `SO_PEEK_OFF` corrections: the kernel does not lower it for bytes it maps or copies
    /// as stragglers, so the receiver does, as a read would have.
    // doc-end
    pub peek_off_fixups: u64,
}

/// One piece of the stream returned by [`ZeroCopyReceiver::recv`]. Empty at end of stream.
#[derive(Debug)]
pub struct Chunk<'a> {
    /// The bytes, in stream order right after the previous chunk's.
    pub data: &'a [u8],
    /// True when `data` are pages mapped from the socket (read-only), false when they were
    /// copied into the receiver's copy buffer.
    pub mapped: bool,
}

impl Chunk<'_> {
    /// End of stream: the peer shut down and every byte before was delivered.
    pub fn is_eof(&self) -> bool {
        self.data.is_empty()
    }
}

/// What one step of the receive found.
#[derive(Clone, Copy, Debug)]
enum Got {
    /// Bytes mapped at the start of the window.
    Mapped(usize),
    /// Bytes at the start of the copy buffer; `copybuf` when the kernel put them there in
    /// the zero-copy call, else read with `recv`.
    Copied {
        n: usize,
        copybuf: bool,
    },
    Eof,
}

/// A zero-copy receiver over one connected TCP socket.
///
/// Owns a read-only mapping of the socket (`window` bytes) and a copy buffer, both made in
/// [`ZeroCopyReceiver::new`]; the data path allocates nothing. The receiver holds the socket
/// as `F`: a [`BorrowedFd`], an [`OwnedFd`](std::os::fd::OwnedFd), a `&TcpStream`, a
/// `TcpStream`, anything that implements [`AsFd`]; lowcopy closes it only by dropping `F`
/// (after unmapping the window).
// doc-source: zcrx.exclusive
/// Nobody else may read from the socket meanwhile (a peeker may peek: the receiver keeps its
/// `SO_PEEK_OFF` right).
// doc-end
/// Not for concurrent use (`recv` takes `&mut self`, and its chunk borrows the receiver until
/// the next call).
///
/// ```
/// use std::io::Write;
/// use std::net::{TcpListener, TcpStream};
/// use lowcopy::{Flags, ZeroCopyReceiver};
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let mut client = TcpStream::connect(listener.local_addr()?)?;
/// let (server, _) = listener.accept()?;
/// let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
/// client.write_all(&data)?;
/// client.shutdown(std::net::Shutdown::Write)?;
///
/// let mut rx = ZeroCopyReceiver::new(&server, 64 * 1024)?;
/// let mut got = Vec::new();
/// loop {
///     let chunk = rx.recv(Flags::NONE)?;
///     if chunk.is_eof() {
///         break;
///     }
///     // Loopback rarely meets the page alignment mapping needs: most chunks are copies.
///     got.extend_from_slice(chunk.data);
/// }
/// assert_eq!(got, data);
/// let s = rx.stats();
/// assert_eq!(s.bytes_mapped + s.bytes_copied, data.len() as u64);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ZeroCopyReceiver<F: AsFd> {
    fd: F,
    map: NonNull<u8>,
    window: usize,
    /// The copy buffer. Never zero-filled (that would fault in every page up front, which
    /// tcp_mmap's untouched malloc does not): only the bytes the kernel wrote are ever read.
    buf: Box<[MaybeUninit<u8>]>,
    /// Bytes of `struct tcp_zerocopy_receive` passed to the kernel.
    zc_size: usize,
    /// Bytes of the copy buffer offered to the kernel for stragglers: one page. The kernel
    /// copies `min(this, recv_skip_hint)` bytes there after mapping, even when it stopped
    /// only because the window was full and the bytes were mappable; a page keeps the rest
    /// aligned and wastes at most a page per call. It also copies the whole queue there
    /// instead of mapping when the queue is no longer than this.
    straggler_len: usize,
    /// Pages mapped by the last call, released at the next.
    mapped: usize,
    /// No page is mapped in the window: the kernel need not zap it (TLB clean hint).
    clean: bool,
    /// Stragglers the kernel copied along with mapped pages, returned at the next call.
    pending_copy: usize,
    /// `recv_skip_hint` bytes still to read by copy.
    skip_left: usize,
    /// A socket error the kernel reported while bytes were still queued, returned once they
    /// have all been delivered.
    pending_err: Option<i32>,
    /// Bytes that were queued when the socket last woke us and are not consumed yet: a
    /// blocking receive delivers them before it waits for the low-water mark again. Taken
    /// from the kernel's `inq` once per wakeup, so new arrivals are not chased one by one.
    backlog: usize,
    /// The next zero-copy call follows a wakeup: it sets `backlog`.
    woken: bool,
    /// `SO_PEEK_OFF` is not supported on this socket (kernels before 6.9/6.12).
    no_peek_off: bool,
    /// `SO_PEEK_OFF` is read before each zero-copy call to keep a peeker's offset right
    /// ([`ZeroCopyReceiver::set_peek_off_tracking`]).
    track_peek_off: bool,
    /// The receiver's own timeout for blocking receives, in place of the socket's
    /// `O_NONBLOCK` and `SO_RCVTIMEO` ([`ZeroCopyReceiver::set_timeout`]); `None`: the socket's.
    timeout: Option<Option<Duration>>,
    /// Sleeps that a non-empty error queue does not end (crate::wait).
    waiter: Waiter,
    stats: ZcrxStats,
}

// SAFETY: the mapping and the buffer are owned by the receiver alone; moving it to another
// thread moves that ownership (the C ABI's "one thread at a time").
unsafe impl<F: AsFd + Send> Send for ZeroCopyReceiver<F> {}
// SAFETY: no `&self` method reads or writes through the mapping or the buffer: only `recv`,
// which takes `&mut self`, touches them, and its chunk borrows the receiver mutably.
unsafe impl<F: AsFd + Sync> Sync for ZeroCopyReceiver<F> {}

impl<F: AsFd> fmt::Debug for ZeroCopyReceiver<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZeroCopyReceiver")
            .field("fd", &self.fd.as_fd())
            .field("window", &self.window)
            .field("struct_size", &self.zc_size)
            .finish()
    }
}

impl<F: AsFd> AsFd for ZeroCopyReceiver<F> {
    /// The socket being received from.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<F: AsFd> ZeroCopyReceiver<F> {
    /// Maps a `window`-byte receive window of the TCP socket `fd` and allocates the copy
    /// buffer (the window's size, between 64 KiB and 1 MiB).
    ///
    // doc-source: zcrx_new.memory
    /// `window` is rounded up to a multiple of the page size (W); it must be 1 byte to 1 GiB.
    /// Memory, all of it made here: the copy buffer, one heap block of W bytes clamped to 64
    /// KiB ..= 1 MiB (256 KiB for a 256 KiB window), never written by lowcopy, so that only the
    /// pages the kernel copies into become resident; and W bytes of address space for the
    /// window (a read-only mapping of the socket: the pages it shows are the socket's receive
    /// buffer, not memory of its own). Nothing is allocated afterwards; the first wait that
    /// meets a busy error queue makes an epoll instance (a descriptor) kept until the receiver
    /// is released.
    // doc-end
    /// The receiver itself is a value of about 200 bytes wherever the caller keeps it.
    ///
    // doc-source: zcrx_new.rcvlowat
    /// Set the receive low-water mark ([`crate::set_rcvlowat`]) to about the window's size so
    /// that each wakeup finds a window's worth of bytes. Pages map only where the kernel holds
    /// whole, page-aligned payload pages (a header-splitting NIC; on loopback, a page-aligned
    /// `MSG_ZEROCOPY` sender); every other byte arrives by copy.
    // doc-end
    ///
    // doc-source: zcrx_new.probe
    /// The first receiver of the process probes which size of `struct tcp_zerocopy_receive`
    /// the kernel accepts (64 bytes since 5.12, 16 exactly on 4.18-5.6) with a zero-length
    /// request on the socket, which maps and consumes nothing; the answer is cached.
    // doc-end
    ///
    /// # Errors
    // doc-source: zcrx_new.errors
    /// The socket is checked before the window: `EINVAL` (`window` 0 or above 1 GiB), `EBADF`,
    /// `ENOTSOCK`, `EOPNOTSUPP` (not TCP over IPv4/IPv6, e.g. UDP, AF_UNIX, MPTCP; or a kernel
    /// without `TCP_ZEROCOPY_RECEIVE`), `ENOTCONN` (not connected: listening, never connected,
    /// still connecting, or reset), `ENOMEM`, and `mmap` errors.
    // doc-end
    /// `fd` is dropped on error.
    pub fn new(fd: F, window: usize) -> io::Result<Self> {
        let b = fd.as_fd();
        check_tcp(b)?;
        if window == 0 || window > WINDOW_MAX {
            return Err(errno(libc::EINVAL));
        }
        let page = sys::page_size();
        let window = window.next_multiple_of(page);
        let copy_len = window.clamp(COPY_MIN, COPY_MAX);
        let mut buf: Vec<MaybeUninit<u8>> = Vec::new();
        buf.try_reserve_exact(copy_len)
            .map_err(|_| errno(libc::ENOMEM))?;
        // SAFETY: the capacity is reserved and MaybeUninit needs no initialisation; the pages
        // stay untouched until the kernel writes into them.
        unsafe { buf.set_len(copy_len) };
        let map = sys::mmap_socket(b, window).map_err(|e| match e.raw_os_error() {
            // Only TCP has an mmap (tcp_mmap); anything else answers ENODEV.
            Some(libc::ENODEV) => errno(libc::EOPNOTSUPP),
            _ => e,
        })?;
        let mut r = ZeroCopyReceiver {
            fd,
            map,
            window,
            buf: buf.into_boxed_slice(),
            zc_size: 0,
            straggler_len: page.min(copy_len),
            mapped: 0,
            clean: true,
            pending_copy: 0,
            skip_left: 0,
            pending_err: None,
            backlog: 0,
            woken: false,
            no_peek_off: false,
            track_peek_off: true,
            timeout: None,
            waiter: Waiter::default(),
            stats: ZcrxStats::default(),
        };
        r.zc_size = r.probe_struct_size()?;
        Ok(r)
    }

    /// The socket, as given to [`ZeroCopyReceiver::new`].
    pub fn get_ref(&self) -> &F {
        &self.fd
    }

    /// Unmaps the window and frees the copy buffer, as dropping the receiver does, and returns
    /// the socket. Bytes still queued stay queued for whoever reads next, but stragglers the
    /// kernel copied along with the last mapped chunk (which the next
    /// [`ZeroCopyReceiver::recv`] would return) were taken from the socket and are lost with
    /// the receiver, and so is a socket error the kernel already handed over with earlier
    /// bytes (the receiver returns it after them). Hand the socket on after a copied chunk or
    /// at end of stream.
    pub fn into_inner(self) -> F {
        let mut me = ManuallyDrop::new(self);
        // Every field by name: a new one must be handled below.
        let ZeroCopyReceiver {
            fd: _,
            map: _,
            window: _,
            buf: _,
            zc_size: _,
            straggler_len: _,
            mapped: _,
            clean: _,
            pending_copy: _,
            skip_left: _,
            pending_err: _,
            backlog: _,
            woken: _,
            no_peek_off: _,
            track_peek_off: _,
            timeout: _,
            waiter: _,
            stats: _,
        } = &*me;
        me.unmap();
        // SAFETY: `me` is never used or dropped again: `fd` is moved out once, and each field
        // that owns memory is dropped in place once (the mapping is gone, the rest is `Copy`).
        unsafe {
            std::ptr::drop_in_place(&mut me.buf);
            std::ptr::drop_in_place(&mut me.waiter);
            std::ptr::read(&me.fd)
        }
    }

    fn unmap(&mut self) {
        // SAFETY: our own mapping, unmapped only here (drop or into_inner, each once); chunks
        // borrow `self`, so none outlives it.
        let _ = unsafe { sys::munmap(self.map, self.window) };
    }

    /// The window's size in bytes (the requested size rounded up to pages).
    pub fn window(&self) -> usize {
        self.window
    }

    /// Bytes of `struct tcp_zerocopy_receive` in use (64 on Linux 5.12 and later).
    pub fn struct_size(&self) -> usize {
        self.zc_size
    }

    /// The counters so far.
    pub fn stats(&self) -> ZcrxStats {
        self.stats
    }

    /// Returns the next piece of the stream: mapped pages or copied bytes, in stream order.
    // doc-source: zcrx_recv.release
    /// The chunk stays valid until the next call on the receiver (or its release): the pages
    /// of a mapped chunk are released (`madvise(MADV_DONTNEED)`) at the start of the next call,
    /// before the window is reused, and the copy buffer is reused.
    // doc-end
    ///
    /// An empty chunk means end of stream (the peer shut down and every byte came); later
    /// calls return it again. `flags`: [`Flags::NONE`] or [`Flags::DONTWAIT`].
    ///
    // doc-source: zcrx_recv.wait
    /// Blocking (no [`Flags::DONTWAIT`], fd without `O_NONBLOCK`), like a blocking `recv` with
    /// `SO_RCVLOWAT`: once the bytes queued at the last wakeup are all delivered, the receiver
    /// waits in `poll` until the socket's mark is met, then returns them chunk by chunk without
    /// waiting again (one wakeup per mark's worth, however many chunks it takes; the kernel may
    /// wake below the mark under memory pressure: those bytes are returned, not waited past).
    /// The socket's `SO_RCVTIMEO` (read when a wait starts) bounds the wait; when it runs out
    /// the bytes queued below the mark are returned, or `EAGAIN` when there are none, as `recv`
    /// does. Non-blocking ([`Flags::DONTWAIT`] or `O_NONBLOCK`): whatever is queued, mark or
    /// not (the caller's poll/epoll honoured the mark), or `EAGAIN`.
    // doc-end
    ///
    // doc-source: zcrx_recv.errqueue
    /// Entries on the socket's error queue (zerocopy notifications of a sender on the same
    /// socket, `IP_RECVERR` or `SO_TIMESTAMPING` reports) are never read and never end a wait:
    /// a blocking receive sleeps past them (as [`crate::recv_atleast`] does), a non-blocking
    /// one returns `EAGAIN` when nothing else is there.
    // doc-end
    ///
    // doc-source: zcrx_recv.peek_off
    /// `SO_PEEK_OFF`: reads lower a socket's peek offset by the bytes they consume; the kernel
    /// forgets to for bytes it maps or copies as stragglers (6.18), so the receiver lowers it
    /// itself when a peeker has it enabled: a peek cursor keeps pointing at the same stream
    /// byte (or at the head once that byte has been received).
    // doc-end
    ///
    /// # Errors
    /// `EINVAL` ([`Flags::MORE`]), and:
    // doc-source: zcrx_recv.errors
    /// `EAGAIN`, `EINTR`, `ECONNRESET` and the socket's other errors (reported after every byte
    /// received before them); an `EINVAL` from the kernel (a bug in lowcopy, or someone
    /// unmapped the window) is reported as such, never taken as end of stream.
    // doc-end
    pub fn recv(&mut self, flags: Flags) -> io::Result<Chunk<'_>> {
        let flags = flags.to_raw();
        if flags & !libc::MSG_DONTWAIT != 0 {
            return Err(errno(libc::EINVAL));
        }
        self.release();
        let got = self.next(flags)?;
        Ok(match got {
            Got::Mapped(n) => {
                self.stats.bytes_mapped += n as u64;
                self.stats.chunks_mapped += 1;
                // SAFETY: the kernel mapped `n <= window` bytes of read-only pages at the start
                // of the window; they stay mapped until the next `&mut self` call releases them.
                let data = unsafe { std::slice::from_raw_parts(self.map.as_ptr(), n) };
                Chunk { data, mapped: true }
            }
            Got::Copied { n, copybuf } => {
                self.stats.bytes_copied += n as u64;
                if copybuf {
                    self.stats.bytes_copybuf += n as u64;
                }
                self.stats.chunks_copied += 1;
                // SAFETY: the kernel just wrote the first `n <= buf.len()` bytes of the buffer
                // (recv or the zero-copy call's copy), so they are initialised; the slice
                // borrows `self` until the next call.
                let data = unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), n) };
                Chunk {
                    data,
                    mapped: false,
                }
            }
            Got::Eof => Chunk {
                data: &[],
                mapped: false,
            },
        })
    }

    /// Makes blocking receives wait at most `timeout` (`None`: without limit), in place of
    /// the socket's `SO_RCVTIMEO`.
    // doc-source: zcrx_timeout.kernel
    /// The fd's `O_NONBLOCK` then plays no part either (only [`Flags::DONTWAIT`] makes a
    /// receive non-blocking), as in [`crate::recv_atleast`]. When it runs out the result is
    /// what `SO_RCVTIMEO` gives: the bytes queued below the mark, or `EAGAIN`. Why: with the
    /// socket's settings, each wait first looks without sleeping (`poll` with 0), then reads
    /// `O_NONBLOCK` and `SO_RCVTIMEO`, then sleeps: 3 or 4 syscalls where tcp_mmap's loop makes
    /// 1. With its own timeout the receiver sleeps in one `poll`.
    // doc-end
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = Some(timeout);
    }

    /// Whether each zero-copy call keeps a peeker's `SO_PEEK_OFF` right (on by default; see
    /// [`ZeroCopyReceiver::recv`]).
    // doc-source: zcrx_peek_off_tracking.kernel
    /// Off saves the `getsockopt(SO_PEEK_OFF)` made before each zero-copy call (one syscall per
    /// chunk): turn it off only when no peeker uses `SO_PEEK_OFF` on this socket while the
    /// receiver lives, or its cursor will point past the bytes it meant after mapped chunks.
    // doc-end
    pub fn set_peek_off_tracking(&mut self, on: bool) {
        self.track_peek_off = on;
    }

    /// Drops the pages the previous chunk mapped.
    fn release(&mut self) {
        if self.mapped == 0 {
            return;
        }
        self.stats.syscalls += 1;
        // SAFETY: the previous chunk borrowed `self` mutably, so no reference into the window
        // outlives it; the range is the part of our own mapping the kernel filled.
        self.clean = unsafe { sys::madvise_dontneed(self.map, self.mapped) }.is_ok();
        self.mapped = 0;
    }

    fn next(&mut self, flags: c_int) -> io::Result<Got> {
        if self.pending_copy > 0 {
            let n = std::mem::take(&mut self.pending_copy);
            return Ok(Got::Copied { n, copybuf: true });
        }
        if self.skip_left > 0 {
            if let Some(got) = self.read_skip()? {
                return Ok(got);
            }
        }
        let dontwait = flags & libc::MSG_DONTWAIT != 0;
        // The receiver's own timeout: blocking unless DONTWAIT, and the deadline is known.
        let own = self.timeout.filter(|_| !dontwait);
        let mut nonblock = if dontwait {
            Some(true)
        } else {
            own.map(|_| false)
        };
        // Without MSG_DONTWAIT the receive looks at poll first, as a blocking recv honours
        // SO_RCVLOWAT: one wakeup per mark's worth, then what was queued at that wakeup is
        // delivered call after call without waiting, and then it waits for the mark again.
        // With MSG_DONTWAIT (the caller's epoll honoured the mark) it takes what is there.
        let mut skip_zc = !dontwait && self.backlog == 0;
        let mut deadline = own.map(|t| t.and_then(|t| Instant::now().checked_add(t)));
        loop {
            let mut said_nothing = false;
            if !skip_zc {
                match self.zerocopy()? {
                    Some(got) => return Ok(got),
                    None => said_nothing = true,
                }
                // The queue is drained: now the error reported along with earlier bytes.
                if let Some(e) = self.pending_err.take() {
                    return Err(errno(e));
                }
            }
            // A first look without sleeping: when the mark is met (the busy case) that is
            // the only syscall of the wait; O_NONBLOCK and SO_RCVTIMEO are read only before
            // sleeping.
            let events = libc::POLLIN | libc::POLLRDHUP;
            let mut ev = if own.is_some() {
                0 // the wait below looks and sleeps in one poll
            } else {
                self.waiter
                    .wait(self.fd.as_fd(), events, 0, &mut self.stats.syscalls)?
            };
            if ev == libc::POLLERR && said_nothing {
                // An error-queue entry, or a socket error: a plain read reports the error (as
                // recv would); otherwise there is nothing, and the sleep below waits past it.
                match self.read_copy(self.buf.len()) {
                    Ok(0) => return self.end(),
                    Ok(n) => return Ok(Got::Copied { n, copybuf: false }),
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => ev = 0,
                    Err(e) => return Err(e),
                }
            }
            if ev == 0 && skip_zc && self.nonblocking(&mut nonblock)? {
                // O_NONBLOCK without MSG_DONTWAIT: bytes below the mark are still returned,
                // as recv returns them.
                skip_zc = false;
                continue;
            }
            skip_zc = false;
            if ev == 0 && !self.nonblocking(&mut nonblock)? {
                let ms = self.wait_ms(&mut deadline)?;
                ev = self
                    .waiter
                    .wait(self.fd.as_fd(), events, ms, &mut self.stats.syscalls)?;
            }
            if ev == 0 {
                if !said_nothing {
                    // SO_RCVTIMEO ran out below the mark: take what is queued, as recv does.
                    continue;
                }
                // Nothing queued: non-blocking, or SO_RCVTIMEO ran out (recv's EAGAIN too).
                return Err(errno(libc::EAGAIN));
            }
            self.stats.wakeups += 1;
            self.woken = true;
            let broken = libc::POLLERR | libc::POLLHUP | libc::POLLRDHUP;
            if said_nothing && ev & broken != 0 {
                // Shut down or reset with nothing to map: a plain read says which (0 = end of
                // stream, or the error), as recv would.
                match self.read_copy(self.buf.len()) {
                    Ok(0) => return self.end(),
                    Ok(n) => return Ok(Got::Copied { n, copybuf: false }),
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// End of stream, unless an error reported along with the last bytes is still due.
    fn end(&mut self) -> io::Result<Got> {
        match self.pending_err.take() {
            Some(e) => Err(errno(e)),
            None => Ok(Got::Eof),
        }
    }

    fn nonblocking(&mut self, cached: &mut Option<bool>) -> io::Result<bool> {
        if let Some(b) = *cached {
            return Ok(b);
        }
        self.stats.syscalls += 1;
        let b = sys::is_nonblocking(self.fd.as_fd())?;
        *cached = Some(b);
        Ok(b)
    }

    /// Milliseconds the next `poll` may sleep: what is left of `SO_RCVTIMEO` (read once per
    /// call), or -1.
    fn wait_ms(&mut self, deadline: &mut Option<Option<Instant>>) -> io::Result<c_int> {
        let d = match *deadline {
            Some(d) => d,
            None => {
                self.stats.syscalls += 1;
                let t = sys::getsockopt_timeval(self.fd.as_fd(), libc::SO_RCVTIMEO)?;
                let d = t.and_then(|t| Instant::now().checked_add(t));
                *deadline = Some(d);
                d
            }
        };
        Ok(match d {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    0
                } else {
                    left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as c_int
                }
            }
        })
    }

    /// Reads up to `n` bytes into the copy buffer without blocking.
    fn read_copy(&mut self, n: usize) -> io::Result<usize> {
        self.stats.syscalls += 1;
        let n = n.min(self.buf.len());
        // SAFETY: `n` bytes of our own buffer, not borrowed (no chunk outlives `&mut self`).
        unsafe {
            sys::recv_raw(
                self.fd.as_fd(),
                self.buf.as_mut_ptr().cast(),
                n,
                libc::MSG_DONTWAIT,
            )
        }
    }

    /// Reads `recv_skip_hint` bytes left from the last zero-copy call. `None` when they are
    /// not there after all (then the zero-copy call decides).
    fn read_skip(&mut self) -> io::Result<Option<Got>> {
        let want = self.skip_left;
        match self.read_copy(want) {
            Ok(0) => {
                self.skip_left = 0;
                self.end().map(Some)
            }
            Ok(n) => {
                self.skip_left = want.saturating_sub(n);
                self.backlog = self.backlog.saturating_sub(n);
                Ok(Some(Got::Copied { n, copybuf: false }))
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                self.skip_left = 0;
                Ok(None)
            }
            Err(e) => {
                self.skip_left = 0;
                Err(e)
            }
        }
    }

    /// One `TCP_ZEROCOPY_RECEIVE` call and what follows from it; `None` when it found nothing.
    fn zerocopy(&mut self) -> io::Result<Option<Got>> {
        let peek_before = self.peek_off();
        let mut zc = TcpZerocopyReceive {
            address: self.map.as_ptr() as u64,
            length: self.window as u32,
            ..Default::default()
        };
        if self.zc_size >= END_COPYBUF {
            zc.copybuf_address = self.buf.as_mut_ptr() as u64;
            zc.copybuf_len = self.straggler_len as i32;
        }
        if self.zc_size >= END_FLAGS && self.clean {
            zc.flags = sys::TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT;
        }
        self.stats.syscalls += 1;
        self.stats.zc_calls += 1;
        // SAFETY: the copy buffer is ours and unborrowed, valid for `copybuf_len` bytes; no
        // reference into the window is live (chunks borrow `&mut self`).
        let (r, _) = unsafe { sys::tcp_zerocopy_receive(self.fd.as_fd(), &mut zc, self.zc_size) };
        if let Err(e) = r {
            self.stats.zc_calls_unmapped += 1;
            if e.raw_os_error() != Some(libc::EIO) {
                // EINVAL here means a bad window or struct: a bug, never end of stream.
                return Err(e);
            }
            // EIO: the peer's FIN came and nothing is left. Confirm with a read (0 = end).
            return match self.read_copy(self.buf.len()) {
                Ok(n) if n > 0 => Ok(Some(Got::Copied { n, copybuf: false })),
                Ok(_) => self.end().map(Some),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => self.end().map(Some),
                Err(e) => Err(e),
            };
        }
        let mapped = (zc.length as usize).min(self.window);
        let copied = if self.zc_size >= END_COPYBUF {
            (zc.copybuf_len.max(0) as usize).min(self.straggler_len)
        } else {
            0
        };
        if mapped == 0 {
            self.stats.zc_calls_unmapped += 1;
        } else {
            self.clean = false;
        }
        if let Some(before) = peek_before {
            if mapped + copied > 0 {
                self.fix_peek_off(before, mapped + copied);
            }
        }
        let err = if self.zc_size >= END_ERR { zc.err } else { 0 };
        if std::mem::take(&mut self.woken) {
            self.backlog = if self.zc_size >= END_ERR {
                zc.inq as usize
            } else {
                // The 16-byte struct of 4.18-5.6 has no `inq`: ask SIOCINQ, or every chunk
                // after the first would wait for the mark again (found under a fault that
                // makes this kernel answer as 4.18 does: tests/faults).
                self.stats.syscalls += 1;
                sys::inq(self.fd.as_fd()).unwrap_or(0)
            };
        } else {
            self.backlog = self.backlog.saturating_sub(mapped + copied);
        }
        let skip = zc.recv_skip_hint as usize;
        if err < 0 {
            // The kernel took the socket's error (sock_error) though bytes may still be
            // queued: they come first, the error once the queue is drained.
            self.pending_err.get_or_insert(-err);
        }
        if mapped > 0 {
            self.mapped = mapped;
            self.pending_copy = copied;
            self.skip_left = skip;
            return Ok(Some(Got::Mapped(mapped)));
        }
        if copied > 0 {
            self.skip_left = skip;
            return Ok(Some(Got::Copied {
                n: copied,
                copybuf: true,
            }));
        }
        if skip > 0 {
            self.skip_left = skip;
            return self.read_skip();
        }
        Ok(None)
    }

    /// The socket's `SO_PEEK_OFF` when a peeker has it enabled (>= 0).
    fn peek_off(&mut self) -> Option<c_int> {
        if self.no_peek_off || !self.track_peek_off {
            return None;
        }
        self.stats.syscalls += 1;
        match sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, SO_PEEK_OFF) {
            Ok(v) if v >= 0 => Some(v),
            Ok(_) => None,
            Err(_) => {
                self.no_peek_off = true;
                None
            }
        }
    }

    /// Lowers `SO_PEEK_OFF` by the bytes consumed, as a read does (`sk_peek_offset_bwd`),
    /// unless the kernel already did (its small-queue path copies with a normal read).
    fn fix_peek_off(&mut self, before: c_int, consumed: usize) {
        self.stats.syscalls += 1;
        let Ok(after) = sys::getsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, SO_PEEK_OFF) else {
            return;
        };
        if after != before {
            return;
        }
        let want = (before as usize).saturating_sub(consumed) as c_int;
        if want != after {
            self.stats.syscalls += 1;
            if sys::setsockopt_int(self.fd.as_fd(), libc::SOL_SOCKET, SO_PEEK_OFF, want).is_ok() {
                self.stats.peek_off_fixups += 1;
            }
        }
    }

    /// The struct size the kernel accepts, probed once per process with a zero-length
    /// request on this socket (maps nothing, consumes nothing).
    fn probe_struct_size(&mut self) -> io::Result<usize> {
        let cached = ZC_SIZE.load(Ordering::Relaxed);
        if cached != 0 {
            return Ok(cached);
        }
        for len in [ZC_FULL, ZC_MIN] {
            let mut zc = TcpZerocopyReceive {
                address: self.map.as_ptr() as u64,
                ..Default::default()
            };
            self.stats.syscalls += 1;
            // SAFETY: no copy buffer, zero length: the kernel writes only `zc`.
            let (r, optlen) = unsafe { sys::tcp_zerocopy_receive(self.fd.as_fd(), &mut zc, len) };
            match r.as_ref().map_err(|e| e.raw_os_error()) {
                // 4.18 to 5.6 want exactly 16 bytes.
                Err(Some(libc::EINVAL)) => continue,
                Err(Some(libc::ENOPROTOOPT | libc::EOPNOTSUPP)) => break,
                // Accepted: EIO (end of stream) and ENOTCONN come after the size check. A
                // kernel that knows fewer bytes lowers optlen when given more.
                _ => {
                    let size = optlen.clamp(ZC_MIN, ZC_FULL);
                    ZC_SIZE.store(size, Ordering::Relaxed);
                    return Ok(size);
                }
            }
        }
        Err(errno(libc::EOPNOTSUPP))
    }
}

impl<F: AsFd> Drop for ZeroCopyReceiver<F> {
    // doc-source: zcrx_drop.kernel
    /// Unmaps the window (releasing any mapped pages) and frees the copy buffer: a chunk from
    /// the receiver is invalid afterwards.
    // doc-end
    /// Then drops `F`.
    fn drop(&mut self) {
        self.unmap();
    }
}

/// TCP over IPv4/IPv6, not listening.
fn check_tcp(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SO_DOMAIN first: it turns a closed fd into EBADF and a file into ENOTSOCK.
    let domain = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    let ty = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)?;
    let proto = sys::getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)?;
    let inet = domain == libc::AF_INET || domain == libc::AF_INET6;
    if !inet || ty != libc::SOCK_STREAM || proto != libc::IPPROTO_TCP {
        return Err(errno(libc::EOPNOTSUPP));
    }
    // ENOTCONN for a listener (the kernel's own answer for TCP_ZEROCOPY_RECEIVE there) and
    // for a socket not connected yet, which TCP_ZEROCOPY_RECEIVE would let through.
    sys::check_connected(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// The amounts `ZeroCopyReceiver::new` (and `lowcopy_zcrx_new` in capi/src/rx.rs) state.
    #[test]
    fn allocations_are_the_documented_amounts() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let page = sys::page_size();
        for (window, copy) in [
            (1, 64 << 10),
            (256 << 10, 256 << 10),
            ((256 << 10) + 1, (256 << 10) + page),
            (4 << 20, 1 << 20),
        ] {
            let r = ZeroCopyReceiver::new(&s, window).unwrap();
            assert_eq!(r.window(), window.next_multiple_of(page));
            assert_eq!(r.buf.len(), copy, "copy buffer for a {window}-byte window");
        }
        assert!(std::mem::size_of::<ZeroCopyReceiver<BorrowedFd<'_>>>() <= 208);
    }
}
