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

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxFlags};
use rustix::io::ReadWriteFlags;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
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

/// An `open(2)` flag word as rustix flags (bits the kernel knows pass
/// through unchanged).
fn oflags(flags: libc::c_int) -> OFlags {
    OFlags::from_bits_retain(flags as u32)
}

/// Opens the single component `name` beneath `dirfd` without following
/// symlinks (see the module docs). `O_CLOEXEC` is always added.
pub(crate) fn open_beneath(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> VfsResult<OwnedFd> {
    let flags = oflags(flags) | OFlags::CLOEXEC;
    let mode = if flags.intersects(OFlags::CREATE | OFlags::TMPFILE) {
        Mode::from_raw_mode(mode)
    } else {
        Mode::empty()
    };
    if HAVE_OPENAT2.load(Ordering::Relaxed) {
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        loop {
            match rustix::fs::openat2(dirfd, name, flags, mode, resolve) {
                Ok(fd) => return Ok(fd),
                // RESOLVE_* lookups may fail spuriously under concurrent
                // renames; the kernel asks us to retry.
                Err(rustix::io::Errno::AGAIN) => continue,
                Err(rustix::io::Errno::NOSYS) => {
                    HAVE_OPENAT2.store(false, Ordering::Relaxed);
                    break;
                }
                // RESOLVE_NO_SYMLINKS refuses a trailing symlink for a real
                // open as ELOOP, which is what O_NOFOLLOW answers too.
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(rustix::fs::openat(
        dirfd,
        name,
        flags | OFlags::NOFOLLOW,
        mode,
    )?)
}

/// Plain `openat` (for `.` and `..`, which `open_beneath` refuses or
/// treats as an escape).
pub(crate) fn openat(dirfd: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> VfsResult<OwnedFd> {
    openat_mode(dirfd, name, flags, 0)
}

/// `openat` of `.` or `..` with a creation mode (`O_TMPFILE`).
pub(crate) fn openat_mode(
    dirfd: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> VfsResult<OwnedFd> {
    let flags = oflags(flags) | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dirfd,
        name,
        flags,
        Mode::from_raw_mode(mode),
    )?)
}

/// `/proc/self/fd/N`: names exactly the inode `fd` refers to.
pub(crate) fn proc_path(fd: BorrowedFd<'_>) -> CString {
    // A decimal number never contains a NUL.
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

/// Opens the inode behind `fd` (typically `O_PATH`) anew with `flags`.
pub(crate) fn reopen(fd: BorrowedFd<'_>, flags: libc::c_int) -> VfsResult<OwnedFd> {
    let flags = oflags(flags) | OFlags::CLOEXEC;
    Ok(rustix::fs::open(
        proc_path(fd).as_c_str(),
        flags,
        Mode::empty(),
    )?)
}

/// A `statx` result.
pub(crate) type Statx = rustix::fs::Statx;

/// `statx` of the inode `fd` refers to (works on `O_PATH` fds, symlinks
/// included).
pub(crate) fn statx_fd(fd: BorrowedFd<'_>) -> VfsResult<Statx> {
    statx_at(fd, EMPTY, AtFlags::EMPTY_PATH)
}

/// A source whose attributes live elsewhere (a FUSE file system, a
/// network one) was opened in this process: statx asks it as stat(2)
/// would, so what it answers (an error included) reaches the caller.
static REMOTE_SOURCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Notes the file system of the source `fd` (`statx_at`'s sync mode).
pub(crate) fn note_source(fd: BorrowedFd<'_>) {
    const LOCAL: [i128; 6] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0x2FC1_2FC1, // zfs
        0xF2F5_2010, // f2fs
    ];
    let local = rustix::fs::fstatfs(fd).is_ok_and(|s| LOCAL.contains(&(s.f_type as i128)));
    if !local {
        REMOTE_SOURCE.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `statx` of `name` in `dirfd`, not following a trailing symlink.
///
/// `AT_STATX_DONT_SYNC` while every source is a local file system (which
/// answers current attributes whatever the flag): a name in the source
/// may be this very mount's mountpoint (a source holding it), and asking
/// its FUSE root for a birth time the kernel has not cached would be a
/// request to this server from one of its own threads, which served
/// through FUSE over io_uring waits forever on the queue that thread
/// itself serves.
pub(crate) fn statx_at(fd: BorrowedFd<'_>, name: &CStr, flags: AtFlags) -> VfsResult<Statx> {
    let sync = if REMOTE_SOURCE.load(std::sync::atomic::Ordering::Relaxed) {
        AtFlags::STATX_SYNC_AS_STAT
    } else {
        AtFlags::STATX_DONT_SYNC
    };
    Ok(rustix::fs::statx(
        fd,
        name,
        flags | AtFlags::SYMLINK_NOFOLLOW | sync,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )?)
}

/// The device number in a statx.
pub(crate) fn stx_dev(st: &Statx) -> u64 {
    libc::makedev(st.stx_dev_major, st.stx_dev_minor)
}

/// Reads into `buf` at `offset`; returns the bytes read (0 at EOF).
pub(crate) fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> VfsResult<usize> {
    i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    Ok(rustix::io::pread(fd, buf, offset)?)
}

/// Like `pread`, but `EAGAIN` where the data is not in the page cache
/// (`RWF_NOWAIT`; a file system without it answers `EOPNOTSUPP`).
pub(crate) fn pread_nowait(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> VfsResult<usize> {
    i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    let mut iov = [std::io::IoSliceMut::new(buf)];
    Ok(rustix::io::preadv2(
        fd,
        &mut iov,
        offset,
        ReadWriteFlags::NOWAIT,
    )?)
}

/// Whether the file system of `fd` keeps its files in memory (tmpfs,
/// ramfs, hugetlbfs): its reads never wait for a device. Unknown
/// (fstatfs failed): assume not.
pub(crate) fn in_memory_fs(fd: BorrowedFd<'_>) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    rustix::fs::fstatfs(fd)
        .is_ok_and(|s| matches!(s.f_type, TMPFS_MAGIC | RAMFS_MAGIC | HUGETLBFS_MAGIC))
}

/// Writes `buf` at `offset`; returns the bytes written.
pub(crate) fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> VfsResult<usize> {
    i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    Ok(rustix::io::pwrite(fd, buf, offset)?)
}

/// `getdents64` into `buf`; returns the bytes filled (0 at the end).
pub(crate) fn getdents(fd: BorrowedFd<'_>, buf: &mut [u8]) -> VfsResult<usize> {
    // rustix offers getdents64 only behind its own iterator (`RawDir`),
    // which cannot hand the filled buffer back to be kept.
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the kernel
    // writes at most that many.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
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
pub(crate) fn seek(fd: BorrowedFd<'_>, offset: u64) -> VfsResult<()> {
    i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
    rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(offset))?;
    Ok(())
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and both to the
/// kernel's ceiling (`fs.nr_open`) where the server may
/// (CAP_SYS_RESOURCE): every caller's open files on the mount are this
/// process's fds. Returns the soft limit now in force.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    if let (Some(ceiling), Some(max)) = (ceiling, getrlimit(Resource::Nofile).maximum) {
        if max < ceiling {
            // Refused without the capability: the limits stay as they were.
            let _ = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(ceiling),
                    maximum: Some(ceiling),
                },
            );
        }
    }
    let rl = getrlimit(Resource::Nofile);
    let Some(current) = rl.current else {
        return u64::MAX;
    };
    if rl.maximum.is_none_or(|max| current < max) {
        let want = Rlimit {
            current: rl.maximum,
            maximum: rl.maximum,
        };
        // Raising the soft limit up to the hard one needs no privilege.
        if setrlimit(Resource::Nofile, want).is_ok() {
            return rl.maximum.unwrap_or(u64::MAX);
        }
    }
    current
}

/// CPUs the kernel may bring up (one past the highest in
/// /sys/devices/system/cpu/possible, "0-3" or "0-3,8-11"): an io_uring
/// connection has a queue for each; 1 if unreadable.
pub fn possible_cpus_bound() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            let last = s.trim().rsplit([',', '-']).next()?;
            last.parse::<usize>().ok()
        })
        .map_or(1, |highest| highest + 1)
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
