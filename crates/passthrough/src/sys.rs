//! Thin, safe wrappers over the `*at()` system calls passthrough makes.
//!
//! # Resolution discipline
//! Every name the server resolves is one component (no `/`, checked by the
//! callers with `uvfs_vfs::check_name`) relative to a held directory fd.
//! [`open_beneath`] resolves it with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so a symlink is returned
//! (with `O_PATH | O_NOFOLLOW`) or refused (`ELOOP`), never followed, and
//! `..` cannot climb out of the directory. Kernels without `openat2` get
//! `openat(O_NOFOLLOW)`, equivalent for a single component that is not
//! `..` (the callers handle `..` themselves).
//!
//! Whole-file operations on an `O_PATH` fd go through `AT_EMPTY_PATH` where
//! the call supports it, and through `/proc/self/fd/N` (which names the
//! exact inode the fd refers to, not a path that can be swapped) where it
//! does not (reopening for I/O, `chmod`, `truncate`, xattrs).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use uvfs_vfs::{Errno, VfsResult};

/// Cleared the first time `openat2` answers `ENOSYS`.
static HAVE_OPENAT2: AtomicBool = AtomicBool::new(true);

/// The empty path, for `AT_EMPTY_PATH` calls.
pub(crate) const EMPTY: &CStr = c"";

/// A name as a C string: `EINVAL` if it holds a NUL.
pub(crate) fn cstr(name: &[u8]) -> VfsResult<CString> {
    CString::new(name).map_err(|_| Errno::EINVAL)
}

/// The errno of the last failed call.
pub(crate) fn last_errno() -> Errno {
    Errno::from_io(&io::Error::last_os_error())
}

/// `-1` means failure (errno set); anything else is the result.
pub(crate) fn cvt(r: libc::c_int) -> VfsResult<libc::c_int> {
    if r == -1 {
        Err(last_errno())
    } else {
        Ok(r)
    }
}

/// Like [`cvt`] for calls returning `ssize_t`/`long`.
pub(crate) fn cvt_long(r: i64) -> VfsResult<i64> {
    if r == -1 {
        Err(last_errno())
    } else {
        Ok(r)
    }
}

/// Takes ownership of a raw fd returned by a successful call.
pub(crate) fn owned(fd: libc::c_int) -> VfsResult<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by a successful open-like call, so it
    // is a valid descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the single component `name` beneath `dirfd` without following
/// symlinks (see the module docs). `O_CLOEXEC` is always added.
pub(crate) fn open_beneath(
    dirfd: RawFd,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> VfsResult<OwnedFd> {
    let flags = flags | libc::O_CLOEXEC;
    if HAVE_OPENAT2.load(Ordering::Relaxed) {
        // SAFETY: all-zero bytes are a valid `open_how` (plain integers).
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags as u64;
        if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            how.mode = u64::from(mode);
        }
        how.resolve =
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        loop {
            // SAFETY: `name` is NUL-terminated and `how` a valid `open_how`
            // whose size we pass; the kernel only reads both.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    dirfd,
                    name.as_ptr(),
                    &how as *const libc::open_how,
                    std::mem::size_of::<libc::open_how>(),
                )
            };
            if r >= 0 {
                return owned(r as libc::c_int);
            }
            let e = last_errno();
            match e {
                // RESOLVE_* lookups may fail spuriously under concurrent
                // renames; the kernel asks us to retry.
                Errno::EAGAIN => continue,
                Errno::ENOSYS => {
                    HAVE_OPENAT2.store(false, Ordering::Relaxed);
                    break;
                }
                // RESOLVE_NO_SYMLINKS refuses a trailing symlink for a real
                // open as ELOOP, which is what O_NOFOLLOW answers too.
                e => return Err(e),
            }
        }
    }
    // SAFETY: `name` is NUL-terminated; openat only reads it.
    owned(unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_NOFOLLOW, mode) })
}

/// Plain `openat` (for `.` and `..`, which `open_beneath` refuses or
/// treats as an escape).
pub(crate) fn openat(dirfd: RawFd, name: &CStr, flags: libc::c_int) -> VfsResult<OwnedFd> {
    openat_mode(dirfd, name, flags, 0)
}

/// `openat` of `.` or `..` with a creation mode (`O_TMPFILE`).
pub(crate) fn openat_mode(
    dirfd: RawFd,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> VfsResult<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; openat only reads it.
    owned(unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC, mode) })
}

/// `/proc/self/fd/N`: names exactly the inode `fd` refers to.
pub(crate) fn proc_path(fd: RawFd) -> CString {
    // A decimal number never contains a NUL.
    CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default()
}

/// Opens the inode behind `fd` (typically `O_PATH`) anew with `flags`.
pub(crate) fn reopen(fd: RawFd, flags: libc::c_int) -> VfsResult<OwnedFd> {
    let p = proc_path(fd);
    // SAFETY: `p` is NUL-terminated; open only reads it.
    owned(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC) })
}

/// `statx` of the inode `fd` refers to (works on `O_PATH` fds, symlinks
/// included).
pub(crate) fn statx_fd(fd: RawFd) -> VfsResult<libc::statx> {
    statx_at(fd, EMPTY, libc::AT_EMPTY_PATH)
}

/// `statx` of `name` in `dirfd`, not following a trailing symlink.
pub(crate) fn statx_at(fd: RawFd, name: &CStr, flags: libc::c_int) -> VfsResult<libc::statx> {
    // SAFETY: all-zero bytes are a valid `statx` (plain integers).
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `st` a writable statx buffer.
    cvt(unsafe {
        libc::statx(
            fd,
            name.as_ptr(),
            flags | libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_SYNC_AS_STAT,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            &mut st,
        )
    })?;
    Ok(st)
}

/// The device number in a statx.
pub(crate) fn stx_dev(st: &libc::statx) -> u64 {
    libc::makedev(st.stx_dev_major, st.stx_dev_minor)
}

/// Reads into `buf` at `offset`; returns the bytes read (0 at EOF).
pub(crate) fn pread(fd: RawFd, buf: &mut [u8], offset: u64) -> VfsResult<usize> {
    let off = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
    let n = unsafe { libc::pread64(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
    Ok(cvt_long(n as i64)? as usize)
}

/// Like `pread`, but `EAGAIN` where the data is not in the page cache
/// (`RWF_NOWAIT`; a file system without it answers `EOPNOTSUPP`).
pub(crate) fn pread_nowait(fd: RawFd, buf: &mut [u8], offset: u64) -> VfsResult<usize> {
    let off = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec describing `buf`, valid for writes of its length.
    let n = unsafe { libc::preadv2(fd, &iov, 1, off, libc::RWF_NOWAIT) };
    Ok(cvt_long(n as i64)? as usize)
}

/// Whether the file system of `fd` keeps its files in memory (tmpfs,
/// ramfs, hugetlbfs): its reads never wait for a device. Unknown
/// (fstatfs failed): assume not.
pub(crate) fn in_memory_fs(fd: RawFd) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    // SAFETY: all-zero bytes are a valid statfs64 (plain integers).
    let mut s: libc::statfs64 = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is writable; `fd` is a valid fd of the caller's.
    if unsafe { libc::fstatfs64(fd, &mut s) } != 0 {
        return false;
    }
    matches!(s.f_type as i64, TMPFS_MAGIC | RAMFS_MAGIC | HUGETLBFS_MAGIC)
}

/// Writes `buf` at `offset`; returns the bytes written.
pub(crate) fn pwrite(fd: RawFd, buf: &[u8], offset: u64) -> VfsResult<usize> {
    let off = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
    let n = unsafe { libc::pwrite64(fd, buf.as_ptr().cast(), buf.len(), off) };
    Ok(cvt_long(n as i64)? as usize)
}

/// `getdents64` into `buf`; returns the bytes filled (0 at the end).
pub(crate) fn getdents(fd: RawFd, buf: &mut [u8]) -> VfsResult<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the kernel
    // writes at most that many.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
    Ok(cvt_long(n)? as usize)
}

/// One record of a `getdents64` buffer.
pub(crate) struct RawDirent<'a> {
    pub ino: u64,
    pub off: i64,
    pub dtype: u8,
    pub name: &'a [u8],
}

/// Parses the records of a `getdents64` buffer (stops at a malformed one).
pub(crate) fn dirents(buf: &[u8]) -> impl Iterator<Item = RawDirent<'_>> {
    // linux_dirent64: u64 d_ino, i64 d_off, u16 d_reclen, u8 d_type, name.
    const HDR: usize = 19;
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let rec = buf.get(pos..)?;
        if rec.len() < HDR {
            return None;
        }
        let ino = u64::from_ne_bytes(rec[0..8].try_into().ok()?);
        let off = i64::from_ne_bytes(rec[8..16].try_into().ok()?);
        let reclen = usize::from(u16::from_ne_bytes(rec[16..18].try_into().ok()?));
        let dtype = rec[18];
        if reclen < HDR || reclen > rec.len() {
            return None;
        }
        let raw = &rec[HDR..reclen];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        pos += reclen;
        Some(RawDirent {
            ino,
            off,
            dtype,
            name: &raw[..len],
        })
    })
}

/// `lseek(SEEK_SET)`.
pub(crate) fn seek(fd: RawFd, offset: u64) -> VfsResult<()> {
    let off = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    // SAFETY: lseek takes plain integers.
    cvt_long(unsafe { libc::lseek64(fd, off, libc::SEEK_SET) })?;
    Ok(())
}

/// A raw fd of an owned one (shorthand).
pub(crate) fn raw(fd: &OwnedFd) -> RawFd {
    fd.as_raw_fd()
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft
/// limit now in force.
pub fn raise_nofile_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid rlimit to write to.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 1024;
    }
    if rl.rlim_cur < rl.rlim_max {
        let want = libc::rlimit {
            rlim_cur: rl.rlim_max,
            rlim_max: rl.rlim_max,
        };
        // SAFETY: `want` is a valid rlimit; raising the soft limit up to
        // the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            rl.rlim_cur = rl.rlim_max;
        }
    }
    rl.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dirents() {
        let mut buf = Vec::new();
        for (ino, name) in [(7u64, &b"ab"[..]), (9, b"xyz")] {
            let reclen = (19 + name.len() + 1).next_multiple_of(8);
            buf.extend_from_slice(&ino.to_ne_bytes());
            buf.extend_from_slice(&(ino as i64 * 10).to_ne_bytes());
            buf.extend_from_slice(&(reclen as u16).to_ne_bytes());
            buf.push(libc::DT_REG);
            buf.extend_from_slice(name);
            buf.resize(buf.len() + reclen - 19 - name.len(), 0);
        }
        let v: Vec<_> = dirents(&buf)
            .map(|d| (d.ino, d.off, d.name.to_vec()))
            .collect();
        assert_eq!(v, vec![(7, 70, b"ab".to_vec()), (9, 90, b"xyz".to_vec())]);
        // Truncated or malformed buffers end the iteration, never panic.
        assert_eq!(dirents(&buf[..10]).count(), 0);
        let mut bad = buf.clone();
        bad[16] = 3;
        assert_eq!(dirents(&bad).count(), 0);
    }
}
