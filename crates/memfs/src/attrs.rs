//! Attribute operations: getattr, setattr, extended attributes, statfs.

use crate::fs::MemFs;
use crate::inode::Body;
use crate::pages::PAGE_SIZE;
use crate::xattr;
use uvfs_vfs::{
    Attr, Ctx, Errno, SetAttr, SetTime, StatFs, Timespec, VType, VfsResult, VnodeRef, XattrFlags,
    NAME_MAX,
};

/// Inode count statfs reports as the total (memfs has no inode limit).
const FILES_TOTAL: u64 = 1 << 32;
/// Blocks statfs reports when there is no size limit (16 TiB).
const UNLIMITED_BLOCKS: u64 = 1 << 32;

impl MemFs {
    pub(crate) fn do_getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        Ok(self.inode_of(vp)?.attr())
    }

    pub(crate) fn do_setattr(&self, _ctx: &Ctx, vp: &VnodeRef, set: &SetAttr) -> VfsResult<Attr> {
        let inode = self.inode_of(vp)?;
        if let Some(size) = set.size {
            self.truncate(vp, size)?;
        }
        let now = Timespec::now();
        {
            let mut m = inode.meta.lock();
            if let Some(mode) = set.mode {
                m.perm = (mode & 0o7777) as u16;
            }
            if set.uid.is_some() || set.gid.is_some() {
                if let Some(uid) = set.uid {
                    m.uid = uid;
                }
                if let Some(gid) = set.gid {
                    m.gid = gid;
                }
                // As Linux: chown of a non-directory drops set-uid, and
                // set-gid when it means "group executable" (with g+x).
                if inode.kind != VType::Dir {
                    m.perm &= !(libc::S_ISUID as u16);
                    if m.perm & libc::S_IXGRP as u16 != 0 {
                        m.perm &= !(libc::S_ISGID as u16);
                    }
                }
            }
            let pick = |t: SetTime| match t {
                SetTime::Now => now,
                SetTime::At(t) => t,
            };
            if let Some(t) = set.atime {
                m.atime = pick(t);
            }
            if let Some(t) = set.mtime {
                m.mtime = pick(t);
            }
            if let Some(t) = set.ctime {
                m.ctime = t;
            } else if !set.is_empty() {
                m.ctime = now;
            }
        }
        Ok(inode.attr())
    }

    pub(crate) fn do_readlink(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        let inode = self.inode_of(vp)?;
        match &inode.body {
            Body::Symlink(t) => {
                inode.meta.lock().touch_accessed(Timespec::now());
                Ok(t.to_vec())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn do_getxattr(&self, vp: &VnodeRef, name: &[u8]) -> VfsResult<Vec<u8>> {
        let inode = self.inode_of(vp)?;
        match xattr::check_name(inode.kind, name) {
            // Reading a user attribute where none can exist: "no data".
            Err(e) if e == Errno::EPERM => return Err(Errno::ENODATA),
            r => r?,
        }
        inode.meta.lock().xattrs.get(name)
    }

    pub(crate) fn do_setxattr(
        &self,
        vp: &VnodeRef,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> VfsResult<()> {
        let inode = self.inode_of(vp)?;
        xattr::check_name(inode.kind, name)?;
        let mut m = inode.meta.lock();
        m.xattrs.set(name, value, flags)?;
        m.ctime = Timespec::now();
        Ok(())
    }

    pub(crate) fn do_listxattr(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        Ok(self.inode_of(vp)?.meta.lock().xattrs.list())
    }

    pub(crate) fn do_removexattr(&self, vp: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        let inode = self.inode_of(vp)?;
        xattr::check_name(inode.kind, name)?;
        let mut m = inode.meta.lock();
        m.xattrs.remove(name)?;
        m.ctime = Timespec::now();
        Ok(())
    }

    pub(crate) fn do_statfs(&self) -> VfsResult<StatFs> {
        let used = self.budget.used();
        let blocks = match self.budget.limit() {
            u64::MAX => used + UNLIMITED_BLOCKS,
            l => l,
        };
        let free = blocks.saturating_sub(used);
        let files = FILES_TOTAL;
        Ok(StatFs {
            blocks,
            bfree: free,
            bavail: free,
            files,
            ffree: files.saturating_sub(self.alive_count() as u64),
            bsize: PAGE_SIZE as u32,
            namelen: NAME_MAX as u32,
            frsize: PAGE_SIZE as u32,
        })
    }
}
