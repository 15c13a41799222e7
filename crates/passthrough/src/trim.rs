//! `FITRIM` through the mount: passed to the source's file system, which
//! discards its free space on its device. The whole source file system is
//! trimmed, not the source directory alone: free space belongs to no
//! directory, and discarding it changes no file. The front end has
//! checked the caller's `CAP_SYS_ADMIN`.

use crate::fs::PassthroughFs;
use crate::sys;
use uvfs_vfs::{Fh, TrimRange, VfsResult, FITRIM};

impl PassthroughFs {
    pub(crate) fn do_trim(&self, fh: Fh, range: TrimRange) -> VfsResult<u64> {
        let fd = self.fh_fd(fh)?;
        let mut buf = range.to_bytes();
        // SAFETY: FITRIM reads and writes one `struct fstrim_range` (24
        // bytes) at the pointer, which points at 24 writable bytes.
        sys::cvt(unsafe { libc::ioctl(fd.raw(), FITRIM as libc::Ioctl, buf.as_mut_ptr()) })?;
        Ok(TrimRange::from_bytes(&buf)?.len)
    }
}
