//! Inode flags (`chattr`), the ones tmpfs keeps: immutable, append-only,
//! no-dump and no-atime, with tmpfs's rules.
//!
//! Linux's VFS enforces immutable and append-only for native file
//! systems (`IS_IMMUTABLE`, `IS_APPEND` in `may_open`, `notify_change`,
//! `may_delete`, ...); the FUSE kernel module never marks its inodes so,
//! and leaves all of it to the server. So every operation that changes a
//! file or a directory asks here first:
//!
//! | flag | refused with `EPERM` |
//! |---|---|
//! | immutable | opening for writing or truncating, writes through an fd opened before, truncation, chmod, chown, utimes (even to "now"), extended attributes and ACLs, fallocate, being the target of copy_file_range, link, unlink, rename of it or over it; in such a directory: making, removing or renaming any name |
//! | append-only | opening for writing without `O_APPEND`, writes below the end, truncation, chmod, chown, utimes to a given time, extended attributes and ACLs, fallocate other than plain allocation, link, unlink, rename of it or over it; in such a directory: removing or renaming a name (making one is allowed) |
//!
//! Changing these two flags needs `CAP_LINUX_IMMUTABLE`, which the front
//! end checks (`FileSystem::set_flags`). New files inherit no-dump and
//! no-atime from their directory, as on tmpfs.

use crate::fs::MemFs;
use crate::inode::{Inode, Meta};
use uvfs_vfs::{
    Ctx, Errno, Timespec, VfsResult, VnodeRef, FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL,
    FS_NODUMP_FL,
};

pub(crate) use crate::inode::KEPT;

/// The flags a new file takes from its directory (`SHMEM_FL_INHERITED`).
pub(crate) const INHERITED: u32 = FS_NODUMP_FL | FS_NOATIME_FL;

impl Meta {
    /// Immutable (`chattr +i`).
    pub fn immutable(&self) -> bool {
        self.flags & FS_IMMUTABLE_FL != 0
    }

    /// Append-only (`chattr +a`).
    pub fn append_only(&self) -> bool {
        self.flags & FS_APPEND_FL != 0
    }

    /// `EPERM` if the file may not change at all but by growing at its
    /// end (immutable or append-only): its attributes, its names.
    pub fn check_fixed(&self) -> VfsResult<()> {
        if self.flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0 {
            Err(Errno::EPERM)
        } else {
            Ok(())
        }
    }

    /// `EPERM` if the file is immutable.
    pub fn check_mutable(&self) -> VfsResult<()> {
        if self.immutable() {
            Err(Errno::EPERM)
        } else {
            Ok(())
        }
    }
}

impl Inode {
    /// `EPERM` if a name may not be made in this directory (immutable).
    pub fn check_may_add(&self) -> VfsResult<()> {
        self.meta.lock().check_mutable()
    }

    /// `EPERM` if a name may not be removed from this directory
    /// (immutable or append-only).
    pub fn check_may_remove(&self) -> VfsResult<()> {
        self.meta.lock().check_fixed()
    }

    /// `EPERM` if this file may not lose or gain a name, or have its
    /// attributes changed (immutable or append-only).
    pub fn check_fixed(&self) -> VfsResult<()> {
        self.meta.lock().check_fixed()
    }

    /// `EPERM` if an open with `open(2)` flags `flags` would write where
    /// the file's flags forbid it.
    pub fn check_open(&self, flags: i32) -> VfsResult<()> {
        let m = self.meta.lock();
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let trunc = flags & libc::O_TRUNC != 0;
        if m.immutable() && (writes || trunc) {
            return Err(Errno::EPERM);
        }
        if m.append_only() && (trunc || (writes && flags & libc::O_APPEND == 0)) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// `EPERM` if a write at `offset` of a file now `size` bytes long is
    /// forbidden: any write to an immutable file (through an fd opened
    /// before it became so), one below the end of an append-only file.
    pub fn check_write(&self, offset: u64, size: u64) -> VfsResult<()> {
        let m = self.meta.lock();
        if m.immutable() || (m.append_only() && offset < size) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }
}

impl MemFs {
    pub(crate) fn do_get_flags(&self, vp: &VnodeRef) -> VfsResult<u32> {
        Ok(self.inode_of(vp)?.meta.lock().flags)
    }

    pub(crate) fn do_set_flags(&self, _ctx: &Ctx, vp: &VnodeRef, flags: u32) -> VfsResult<()> {
        if flags & !KEPT != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let inode = self.inode_of(vp)?;
        let mut m = inode.meta.lock();
        m.flags = flags;
        m.ctime = Timespec::now();
        Ok(())
    }
}
