//! Inode flags (`chattr`/`lsattr`): asked of and set on the source file
//! through the open file's fd, in both forms (`FS_IOC_GETFLAGS` and
//! `FS_IOC_FSGETXATTR`), so the source's file system keeps them and
//! enforces them itself: an immutable source file refuses the server's
//! writes, renames and removals as it refuses anyone's. The server sets
//! them with its own privilege; the front end has checked the caller's
//! (`FileSystem::set_flags`).
//!
//! DAX is the one flag not passed on: it asks that the file's I/O bypass
//! the page cache, which the mount cannot do (the kernel's FUSE inode is
//! never a DAX inode outside virtiofs), so setting it answers
//! `EOPNOTSUPP`, as on a file system without DAX. A source file that has
//! it shows it.

use crate::fs::PassthroughFs;
use crate::sys;
use uvfs_vfs::{Errno, Fh, FsXattr, VfsResult, FS_DAX_FL, FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR};

impl PassthroughFs {
    pub(crate) fn do_get_flags(&self, fh: Fh) -> VfsResult<u32> {
        let fd = self.fh_fd(fh)?;
        Ok(rustix::fs::ioctl_getflags(&fd)?.bits())
    }

    pub(crate) fn do_set_flags(&self, fh: Fh, flags: u32) -> VfsResult<()> {
        if flags & FS_DAX_FL != 0 && self.do_get_flags(fh)? & FS_DAX_FL == 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let fd = self.fh_fd(fh)?;
        let flags = rustix::fs::IFlags::from_bits_retain(flags);
        Ok(rustix::fs::ioctl_setflags(&fd, flags)?)
    }

    pub(crate) fn do_get_fsxattr(&self, fh: Fh) -> VfsResult<FsXattr> {
        let fd = self.fh_fd(fh)?;
        let mut buf = [0u8; FsXattr::SIZE];
        // SAFETY: FS_IOC_FSGETXATTR writes one `struct fsxattr` (28 bytes)
        // to the pointer, which points at 28 writable bytes.
        sys::cvt(unsafe {
            libc::ioctl(fd.raw(), FS_IOC_FSGETXATTR as libc::Ioctl, buf.as_mut_ptr())
        })?;
        FsXattr::from_bytes(&buf)
    }

    pub(crate) fn do_set_fsxattr(&self, fh: Fh, x: &FsXattr) -> VfsResult<()> {
        let dax = |x: &FsXattr| x.flags() & FS_DAX_FL != 0;
        if dax(x) && !dax(&self.do_get_fsxattr(fh)?) {
            return Err(Errno::EOPNOTSUPP);
        }
        let fd = self.fh_fd(fh)?;
        let buf = x.to_bytes();
        // SAFETY: FS_IOC_FSSETXATTR reads one `struct fsxattr` (28 bytes)
        // from the pointer, which points at 28 bytes.
        sys::cvt(unsafe { libc::ioctl(fd.raw(), FS_IOC_FSSETXATTR as libc::Ioctl, buf.as_ptr()) })?;
        Ok(())
    }
}
