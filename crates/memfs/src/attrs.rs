//! Attribute operations: getattr, setattr, extended attributes, statfs.

use crate::acl::{self, Acl};
use crate::fs::MemFs;
use crate::inode::{Body, Inode};
use crate::ispace::xattr_cost;
use crate::pages::PAGE_SIZE;
use crate::xattr;
use uvfs_vfs::{
    killed_suidgid, Attr, Ctx, Errno, SetAttr, SetTime, StatFs, Timespec, VType, VfsResult,
    VnodeRef, XattrFlags, NAME_MAX,
};

/// Inode count statfs reports as the total (memfs has no inode limit).
const FILES_TOTAL: u64 = 1 << 32;
/// Blocks statfs reports when there is no size limit (16 TiB).
const UNLIMITED_BLOCKS: u64 = 1 << 32;

impl MemFs {
    pub(crate) fn do_getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        Ok(self.inode_of(vp)?.attr())
    }

    pub(crate) fn do_setattr(&self, ctx: &Ctx, vp: &VnodeRef, set: &SetAttr) -> VfsResult<Attr> {
        let inode = self.inode_of(vp)?;
        check_setattr(&inode.meta.lock(), set)?;
        if let Some(size) = set.size {
            self.truncate(vp, size)?;
        }
        let now = Timespec::now();
        {
            let mut m = inode.meta.lock();
            if let Some(mode) = set.mode {
                m.perm = (mode & 0o7777) as u16;
                // An access ACL follows (`posix_acl_chmod`); the kernel
                // forgets the ACLs it cached on every SETATTR.
                let stored = m.xattrs.get(acl::ACCESS).ok();
                if let Some(mut a) = stored.and_then(|v| Acl::from_xattr(&v).ok()) {
                    a.chmod(m.perm);
                    m.xattrs.put(acl::ACCESS, &a.to_xattr());
                }
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
            let mut killed = false;
            if set.kill_suidgid && inode.kind != VType::Dir {
                let kept = killed_suidgid(m.perm.into(), m.gid, ctx) as u16;
                killed = kept != m.perm;
                m.perm = kept;
            }
            if let Some(t) = set.ctime {
                m.ctime = t;
            } else if !set.is_empty() || killed {
                m.ctime = now;
            }
        }
        Ok(inode.attr())
    }

    pub(crate) fn do_readlink(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        let inode = self.inode_of(vp)?;
        match &inode.body {
            Body::Symlink(t) => {
                self.accessed(inode, Timespec::now());
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
        ctx: &Ctx,
        vp: &VnodeRef,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> VfsResult<()> {
        let inode = self.inode_of(vp)?;
        xattr::check_name(inode.kind, name)?;
        inode.check_fixed()?;
        if acl::is_acl(name) {
            return set_acl(ctx, inode, name, Some(value));
        }
        let mut m = inode.meta.lock();
        // The new value's inode space is taken whole before it is stored,
        // and a replaced value's given back after, as tmpfs does (so a
        // replace needs room for both at once); a failed set gives it back
        // (`ispace.rs`).
        let (old, new) = (m.xattrs.cost_of(name), xattr_cost(name, value.len()));
        self.take_ispace(new)?;
        if let Err(e) = m.xattrs.set(name, value, flags) {
            self.ispace.give(new);
            return Err(e);
        }
        self.ispace.give(old);
        m.ctime = Timespec::now();
        Ok(())
    }

    pub(crate) fn do_listxattr(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        Ok(self.inode_of(vp)?.meta.lock().xattrs.list())
    }

    pub(crate) fn do_removexattr(&self, ctx: &Ctx, vp: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        let inode = self.inode_of(vp)?;
        xattr::check_name(inode.kind, name)?;
        inode.check_fixed()?;
        if acl::is_acl(name) {
            return set_acl(ctx, inode, name, None);
        }
        let mut m = inode.meta.lock();
        let cost = m.xattrs.cost_of(name);
        m.xattrs.remove(name)?;
        self.ispace.give(cost);
        m.ctime = Timespec::now();
        Ok(())
    }

    pub(crate) fn do_statfs(&self) -> VfsResult<StatFs> {
        // Removed files' data that only waits for the kernel to let
        // them go is free space (`orphans.rs`).
        let used = self.budget.used().saturating_sub(self.orphans.pages());
        let blocks = match self.budget.limit() {
            u64::MAX => used + UNLIMITED_BLOCKS,
            l => l,
        };
        let free = blocks.saturating_sub(used);
        let (files, ffree) = self.ispace.statfs(FILES_TOTAL);
        Ok(StatFs {
            blocks,
            bfree: free,
            bavail: free,
            files,
            ffree,
            bsize: PAGE_SIZE as u32,
            namelen: NAME_MAX as u32,
            frsize: PAGE_SIZE as u32,
        })
    }
}

/// Sets (`Some`) or removes (`None`) one of `inode`'s ACLs, as Linux's
/// `set_posix_acl` and `simple_set_acl` do for tmpfs. The kernel has
/// checked that the caller owns the file; XATTR_CREATE/REPLACE do not
/// apply to ACLs (the VFS never passes them on).
fn set_acl(ctx: &Ctx, inode: &Inode, name: &[u8], value: Option<&[u8]>) -> VfsResult<()> {
    let acl = value.map(Acl::from_xattr).transpose()?;
    if name == acl::DEFAULT && inode.kind != VType::Dir {
        // Only directories have one; removing none succeeds.
        return if acl.is_some() {
            Err(Errno::EACCES)
        } else {
            Ok(())
        };
    }
    let mut m = inode.meta.lock();
    let store = if name == acl::ACCESS {
        // `posix_acl_update_mode`: the ACL's owner, group class and
        // other entries are the mode bits; an ACL that says nothing more
        // is not kept. A caller outside the file's group loses set-gid,
        // as with chmod (removing the ACL too).
        let (bits, extended) = acl
            .as_ref()
            .map_or((m.perm & 0o777, false), Acl::equiv_mode);
        m.perm = (m.perm & !0o777) | bits;
        if !ctx.in_group_or_capable(m.gid) {
            m.perm &= !(libc::S_ISGID as u16);
        }
        acl.filter(|_| extended)
    } else {
        acl
    };
    match store {
        Some(a) => m.xattrs.put(name, &a.to_xattr()),
        None => m.xattrs.discard(name),
    }
    m.ctime = Timespec::now();
    Ok(())
}

/// The inode flags' rules for a SETATTR (`notify_change`): an immutable
/// file takes no change at all, an append-only one only times set to
/// "now" (`touch`), not truncation, mode, owner or given times.
fn check_setattr(m: &crate::inode::Meta, set: &SetAttr) -> VfsResult<()> {
    if m.immutable() && !set.is_empty() {
        return Err(Errno::EPERM);
    }
    let given = |t: Option<SetTime>| matches!(t, Some(SetTime::At(_)));
    if m.append_only()
        && (set.size.is_some()
            || set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || given(set.atime)
            || given(set.mtime))
    {
        return Err(Errno::EPERM);
    }
    Ok(())
}
