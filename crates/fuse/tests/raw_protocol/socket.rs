//! The `SOCK_SEQPACKET` socket pair the server serves instead of
//! `/dev/fuse`: it keeps message boundaries as the device does, and its
//! buffers are widened to carry the largest request and reply.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub(crate) fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a writable array of two ints, as socketpair wants.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: socketpair succeeded: both are open descriptors that nothing
    // else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

pub(crate) fn set_int_opt(fd: &OwnedFd, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: `v` is a valid int for the duration of the call and its size
    // is passed; the fd is open.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// A datagram carries at most the sender's buffer: room for requests
/// and replies of a few MiB (beyond `wmem_max` needs privilege; else it
/// is capped there, see `sndbuf`).
pub(crate) fn widen(fd: &OwnedFd) {
    const BUF: libc::c_int = 8 << 20;
    if !set_int_opt(fd, libc::SO_SNDBUFFORCE, BUF) {
        set_int_opt(fd, libc::SO_SNDBUF, BUF);
    }
}

/// The largest datagram `fd` can send.
pub(crate) fn sndbuf(fd: &OwnedFd) -> usize {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes and `len` holds the size
    // of `v`; the fd is open.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "SO_SNDBUF: {}", std::io::Error::last_os_error());
    // The kernel keeps a little of it for the datagram's own overhead, and
    // a datagram's data must fit one kmalloc (4 MiB) and a few pages.
    (v as usize).saturating_sub(4096).min(4 << 20)
}

pub(crate) fn set_recv_timeout(fd: &OwnedFd, t: Duration) {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a valid timeval for the duration of the call and its
    // size is passed; the fd is open.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVTIMEO: {}", std::io::Error::last_os_error());
}
