//! Syscall wrappers for the zerocopy send path: `sendmsg`, the error queue (`recvmmsg` with
//! `MSG_ERRQUEUE`) and its control messages. Like crate::sys, every `unsafe` libc call of the
//! send path is here, each turning `-1/errno` into an `io::Error` that keeps the errno.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

use libc::{c_int, c_uint, msghdr};

/// `SO_EE_ORIGIN_ZEROCOPY` (include/uapi/linux/errqueue.h, 4.14).
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (include/uapi/linux/errqueue.h): the kernel copied the data.
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// `sendmsg(2)`.
///
/// # Safety
/// `msg` must describe valid memory: name, iovecs and control, for the duration of the call.
pub unsafe fn sendmsg(fd: BorrowedFd<'_>, msg: &msghdr, flags: c_int) -> io::Result<usize> {
    // SAFETY: forwarded caller guarantee on `msg`.
    let r = unsafe { libc::sendmsg(fd.as_raw_fd(), msg, flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `recvmmsg(2)` without a timeout; returns the number of messages received.
///
/// # Safety
/// Each `msgvec` entry must describe valid writable memory (iovecs, control) for the call.
pub unsafe fn recvmmsg(
    fd: BorrowedFd<'_>,
    msgvec: &mut [libc::mmsghdr],
    flags: c_int,
) -> io::Result<usize> {
    // SAFETY: forwarded caller guarantee on `msgvec`.
    let r = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgvec.as_mut_ptr(),
            msgvec.len() as c_uint,
            flags,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// A zerocopy notification found in an error-queue message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZcNotice {
    /// First id of the inclusive range (`ee_info`).
    pub lo: u32,
    /// Last id of the inclusive range (`ee_data`).
    pub hi: u32,
    /// `SO_EE_CODE_ZEROCOPY_COPIED`.
    pub copied: bool,
}

/// Scans the control messages of one received error-queue message.
///
/// Returns the zerocopy notification if the message carries one: a `sock_extended_err` in an
/// `IP_RECVERR` (SOL_IP) or `IPV6_RECVERR` (SOL_IPV6) cmsg with `ee_origin ==
/// SO_EE_ORIGIN_ZEROCOPY` and `ee_errno == 0`. Anything else (timestamps, ICMP errors,
/// local errors) is not a notification: `None`.
///
/// # Safety
/// `msg.msg_control`/`msg_controllen` must describe the control data the kernel wrote.
pub unsafe fn zerocopy_notice(msg: &msghdr) -> Option<ZcNotice> {
    // SAFETY: the CMSG_* walkers stay within msg_control/msg_controllen per the caller.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !c.is_null() {
        // SAFETY: `c` is a header inside the control buffer (CMSG_FIRSTHDR/NXTHDR checked).
        let h = unsafe { &*c };
        let recverr = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
            || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
        // SAFETY: CMSG_LEN is arithmetic on its argument.
        let need = unsafe { libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) };
        if recverr && h.cmsg_len as usize >= need as usize {
            // SAFETY: the cmsg holds at least a sock_extended_err (length checked); it may be
            // unaligned in the buffer, so read it unaligned.
            let ee = unsafe {
                std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::sock_extended_err>())
            };
            if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                return Some(ZcNotice {
                    lo: ee.ee_info,
                    hi: ee.ee_data,
                    copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                });
            }
        }
        // SAFETY: as above.
        c = unsafe { libc::CMSG_NXTHDR(msg, c) };
    }
    None
}
