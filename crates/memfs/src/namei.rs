//! Name operations: lookup, the create family, link, unlink, rmdir and
//! directory listing.
//!
//! # Locking
//! Each operation write-locks the one directory it changes (reads take it
//! shared) and keeps it locked while it updates the name cache, so a
//! lookup that missed the cache cannot enter a name that a concurrent
//! removal has just taken out: the lookup enters under the shared lock,
//! the removal removes under the exclusive one. `rmdir` then locks the
//! victim directory (parent before child, as everywhere). Inode metadata
//! mutexes are taken last.

use crate::acl::{self, Acl};
use crate::dir::{Directory, Target, DOTDOT_COOKIE, DOT_COOKIE};
use crate::fs::MemFs;
use crate::inode::{Body, Inode, Meta};
use crate::ispace::INODE_COST;
use crate::pages::FileData;
use crate::xattr::Xattrs;
use parking_lot::RwLock;
use std::sync::Arc;
use uvfs_vfs::{
    check_name, check_new_name, mode_to_vtype, Ctx, DirEntry, DirPlusSink, DirSink, Errno, Fh,
    Timespec, VType, VfsResult, VnodeRef,
};
use uvfs_vnode::NcLookup;

/// What a new inode should be.
pub(crate) struct NewNode<'a> {
    pub kind: VType,
    pub perm: u32,
    pub rdev: u64,
    pub target: &'a [u8],
}

/// `create` found the name taken.
pub(crate) enum Made {
    New(VnodeRef),
    Exists(Target),
}

impl MemFs {
    pub(crate) fn do_lookup(&self, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        check_name(name)?;
        let (_, d) = self.dir_of(dir)?;
        if name == b"." {
            return Ok(dir.clone());
        }
        if name == b".." {
            let parent = d.read().parent;
            return self.vnode_by_ino(parent);
        }
        let nc = self.layer.namecache();
        match nc.lookup(dir, name) {
            NcLookup::Hit(vp) => return Ok(vp),
            NcLookup::Negative => return Err(Errno::ENOENT),
            NcLookup::Miss => {}
        }
        let g = d.read();
        if g.removed {
            return Err(Errno::ENOENT);
        }
        match g.get(name) {
            None => {
                nc.enter(dir, name, None);
                Err(Errno::ENOENT)
            }
            Some(t) => {
                // Linked while the entry exists: the unlink that would
                // drop it needs our directory lock.
                let inode = self.table.get(t.ino).ok_or(Errno::ENOENT)?;
                let vp = self.vnode(&inode)?;
                nc.enter(dir, name, Some(&vp));
                Ok(vp)
            }
        }
    }

    /// A new inode for `dir` to hold (not yet linked anywhere): owner,
    /// group and mode as Linux gives them, from the caller, the
    /// directory's set-gid bit and default ACL, and the umask. `ENOSPC`
    /// when the inode budget is spent (`ispace.rs`); nothing is changed
    /// until this succeeded.
    pub(crate) fn new_inode(
        &self,
        ctx: &Ctx,
        dinode: &Inode,
        new: NewNode<'_>,
        now: Timespec,
    ) -> VfsResult<Arc<Inode>> {
        self.take_ispace(INODE_COST)?;
        let mut perm = (new.perm & 0o7777) as u16;
        // Set-gid directories hand their group down, and their set-gid bit
        // to subdirectories (the kernel already stripped set-gid from a
        // file's mode when the caller may not have it).
        let (pgid, psgid, pdefault, pflags) = {
            let m = dinode.meta.lock();
            let dflt = m.xattrs.get(acl::DEFAULT).ok();
            (m.gid, m.perm & libc::S_ISGID as u16 != 0, dflt, m.flags)
        };
        let gid = if psgid { pgid } else { ctx.gid };
        if psgid && new.kind == VType::Dir {
            perm |= libc::S_ISGID as u16;
        }
        let mut xattrs = Xattrs::default();
        if new.kind != VType::Lnk {
            // `posix_acl_create`: the directory's default ACL takes the
            // umask's place (and a new directory inherits it); without
            // one the umask applies, when the kernel left it to us.
            match pdefault.and_then(|v| Acl::from_xattr(&v).ok()) {
                Some(dflt) => {
                    let mut access = dflt.clone();
                    let (bits, extended) = access.create_masq(perm);
                    perm = (perm & !0o777) | bits;
                    if extended {
                        xattrs.put(acl::ACCESS, &access.to_xattr());
                    }
                    if new.kind == VType::Dir {
                        xattrs.put(acl::DEFAULT, &dflt.to_xattr());
                    }
                }
                None => perm &= !(ctx.umask & 0o777) as u16,
            }
        }
        let ino = self.table.alloc_ino();
        let body = match new.kind {
            VType::Reg => Body::File(FileData::new(self.budget.clone())),
            VType::Dir => Body::Dir(RwLock::new(Directory::new(dinode.ino))),
            VType::Lnk => Body::Symlink(new.target.into()),
            _ => Body::Special,
        };
        let meta = Meta {
            perm,
            uid: ctx.uid,
            gid,
            nlink: if new.kind == VType::Dir { 2 } else { 1 },
            linkable: false,
            rdev: new.rdev,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            xattrs,
            flags: pflags & crate::iflags::INHERITED,
        };
        Ok(Arc::new(Inode::new(
            ino,
            new.kind,
            meta,
            body,
            self.ispace.clone(),
        )))
    }

    /// Makes a new inode named `name` in `dir`.
    pub(crate) fn make_node(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        new: NewNode<'_>,
    ) -> VfsResult<Made> {
        check_new_name(name)?;
        let (dinode, d) = self.dir_of(dir)?;
        let mut g = d.write();
        if g.removed {
            return Err(Errno::ENOENT);
        }
        if let Some(t) = g.get(name) {
            return Ok(Made::Exists(t));
        }
        dinode.check_may_add()?;
        let now = Timespec::now();
        let kind = new.kind;
        let inode = self.new_inode(ctx, dinode, new, now)?;
        self.table.insert(inode.clone());
        g.insert(
            name,
            Target {
                ino: inode.ino,
                kind,
            },
        );
        {
            let mut m = dinode.meta.lock();
            m.touch_modified(now);
            if kind == VType::Dir {
                m.nlink += 1;
            }
        }
        let vp = self.vnode(&inode)?;
        self.layer.namecache().enter(dir, name, Some(&vp));
        Ok(Made::New(vp))
    }

    /// `O_TMPFILE`: a new regular file with no name (nlink 0, in no
    /// directory and not in the inode table), opened with `flags`. It lives
    /// while something uses it, like a file unlinked while open; `link`
    /// can name it later unless it was made with `O_EXCL`.
    pub(crate) fn do_tmpfile(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        mode: u32,
        flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        // Even in a removed directory, as tmpfs: the file has no name
        // there to be refused.
        let (dinode, _) = self.dir_of(dir)?;
        dinode.check_may_add()?;
        let new = NewNode {
            kind: VType::Reg,
            perm: mode,
            rdev: 0,
            target: b"",
        };
        let inode = self.new_inode(ctx, dinode, new, Timespec::now())?;
        {
            let mut m = inode.meta.lock();
            m.nlink = 0;
            m.linkable = flags & libc::O_EXCL == 0;
        }
        let vp = self.vnode(&inode)?;
        let fh = self.do_open(ctx, &vp, flags)?;
        Ok((vp, fh))
    }

    fn make_new(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        new: NewNode<'_>,
    ) -> VfsResult<VnodeRef> {
        match self.make_node(ctx, dir, name, new)? {
            Made::New(vp) => Ok(vp),
            Made::Exists(_) => Err(Errno::EEXIST),
        }
    }

    pub(crate) fn do_mknod(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
        rdev: u64,
    ) -> VfsResult<VnodeRef> {
        let kind = match mode_to_vtype(mode) {
            // mknod(2) with type 0 makes a regular file.
            None if mode & libc::S_IFMT == 0 => VType::Reg,
            Some(k @ (VType::Reg | VType::Chr | VType::Blk | VType::Fifo | VType::Sock)) => k,
            _ => return Err(Errno::EINVAL),
        };
        let rdev = if matches!(kind, VType::Chr | VType::Blk) {
            rdev
        } else {
            0
        };
        self.make_new(
            ctx,
            dir,
            name,
            NewNode {
                kind,
                perm: mode,
                rdev,
                target: b"",
            },
        )
    }

    pub(crate) fn do_mkdir(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
    ) -> VfsResult<VnodeRef> {
        self.make_new(
            ctx,
            dir,
            name,
            NewNode {
                kind: VType::Dir,
                perm: mode,
                rdev: 0,
                target: b"",
            },
        )
    }

    pub(crate) fn do_symlink(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        target: &[u8],
    ) -> VfsResult<VnodeRef> {
        uvfs_vfs::check_symlink_target(target)?;
        self.make_new(
            ctx,
            dir,
            name,
            NewNode {
                kind: VType::Lnk,
                perm: 0o777,
                rdev: 0,
                target,
            },
        )
    }

    pub(crate) fn do_create(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        // An existing name is opened unless O_EXCL; if it vanishes between
        // the two steps, try again (a bounded number of times).
        for _ in 0..8 {
            let new = NewNode {
                kind: VType::Reg,
                perm: mode,
                rdev: 0,
                target: b"",
            };
            match self.make_node(ctx, dir, name, new)? {
                Made::New(vp) => return Ok((vp, Fh(0))),
                Made::Exists(_) if flags & libc::O_EXCL != 0 => return Err(Errno::EEXIST),
                Made::Exists(t) => {
                    let vp = match self.vnode_by_ino(t.ino) {
                        Ok(vp) => vp,
                        Err(e) if e == Errno::ENOENT => continue,
                        Err(e) => return Err(e),
                    };
                    let fh = self.do_open(ctx, &vp, flags)?;
                    return Ok((vp, fh));
                }
            }
        }
        Err(Errno::EAGAIN)
    }

    pub(crate) fn do_link(&self, vp: &VnodeRef, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        check_new_name(name)?;
        let inode = self.inode_arc_of(vp)?;
        let (dinode, d) = self.dir_of(dir)?;
        if inode.kind == VType::Dir {
            return Err(Errno::EPERM);
        }
        inode.check_fixed()?;
        dinode.check_may_add()?;
        let now = Timespec::now();
        let mut g = d.write();
        if g.removed {
            return Err(Errno::ENOENT);
        }
        if g.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        {
            let mut m = inode.meta.lock();
            if m.nlink == 0 {
                // An unlinked file cannot get a name back; an O_TMPFILE
                // file made without O_EXCL gets its first one (and goes
                // into the table, which holds every linked inode).
                if !m.linkable {
                    return Err(Errno::ENOENT);
                }
                m.linkable = false;
                self.table.insert(inode.clone());
            }
            if m.nlink == u32::MAX {
                return Err(Errno::EMLINK);
            }
            // A second name costs inode space; an O_TMPFILE file's first
            // is its inode's own (`ispace.rs`).
            if m.nlink > 0 {
                self.take_ispace(INODE_COST)?;
            }
            m.nlink += 1;
            m.ctime = now;
        }
        g.insert(
            name,
            Target {
                ino: inode.ino,
                kind: inode.kind,
            },
        );
        dinode.meta.lock().touch_modified(now);
        self.layer.namecache().enter(dir, name, Some(vp));
        Ok(())
    }

    pub(crate) fn do_unlink(&self, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        check_name(name)?;
        if uvfs_vfs::is_dot_or_dotdot(name) {
            return Err(Errno::EISDIR);
        }
        let (dinode, d) = self.dir_of(dir)?;
        let now = Timespec::now();
        let mut g = d.write();
        let t = g.get(name).ok_or(Errno::ENOENT)?;
        if t.kind == VType::Dir {
            return Err(Errno::EISDIR);
        }
        let inode = self.table.get(t.ino);
        dinode.check_may_remove()?;
        if let Some(i) = &inode {
            i.check_fixed()?;
        }
        g.remove(name);
        self.layer.namecache().remove(dir, name);
        dinode.meta.lock().touch_modified(now);
        let last = inode.as_ref().is_some_and(|i| {
            let mut m = i.meta.lock();
            // Names beyond the last give their inode space back; the last
            // one's goes with the inode.
            if m.nlink > 1 {
                self.ispace.give(INODE_COST);
            }
            m.nlink = m.nlink.saturating_sub(1);
            m.ctime = now;
            m.nlink == 0
        });
        drop(g);
        if let (true, Some(inode)) = (last, inode) {
            self.forget_unlinked(&inode);
        }
        Ok(())
    }

    pub(crate) fn do_rmdir(&self, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        check_name(name)?;
        if name == b"." {
            return Err(Errno::EINVAL);
        }
        if name == b".." {
            return Err(Errno::ENOTEMPTY);
        }
        let (dinode, d) = self.dir_of(dir)?;
        let now = Timespec::now();
        let mut g = d.write();
        let t = g.get(name).ok_or(Errno::ENOENT)?;
        if t.kind != VType::Dir {
            return Err(Errno::ENOTDIR);
        }
        let child = self.table.get(t.ino).ok_or(Errno::ENOENT)?;
        dinode.check_may_remove()?;
        child.check_fixed()?;
        let cd = child.dir().ok_or(Errno::ENOTDIR)?;
        {
            let mut cg = cd.write();
            if !cg.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            cg.removed = true;
        }
        g.remove(name);
        self.layer.namecache().remove(dir, name);
        {
            let mut m = dinode.meta.lock();
            m.touch_modified(now);
            m.nlink = m.nlink.saturating_sub(1);
        }
        {
            let mut m = child.meta.lock();
            m.nlink = 0;
            m.ctime = now;
        }
        drop(g);
        self.forget_unlinked(&child);
        Ok(())
    }

    /// Calls `f` for `.`, `..` and the entries after `offset` (`dir.rs`:
    /// the listing's cursor) until it reports full, with the directory
    /// locked shared.
    fn scan(
        &self,
        dir: &VnodeRef,
        offset: u64,
        mut f: impl FnMut(&Directory, DirEntry, Option<Target>) -> VfsResult<bool>,
    ) -> VfsResult<()> {
        let (dinode, d) = self.dir_of(dir)?;
        // Not nested in the directory lock: meta is never held while
        // waiting for another lock.
        self.accessed(dinode, Timespec::now());
        let g = d.read();
        if g.removed {
            return Ok(());
        }
        let at = g.cursor(offset);
        if at.after < DOT_COOKIE {
            let e = DirEntry {
                ino: dinode.ino,
                kind: VType::Dir,
                name: b".".to_vec(),
                offset: at.offset_of(DOT_COOKIE),
            };
            if f(&g, e, None)? {
                return Ok(());
            }
        }
        if at.after < DOTDOT_COOKIE {
            let e = DirEntry {
                ino: g.parent,
                kind: VType::Dir,
                name: b"..".to_vec(),
                offset: at.offset_of(DOTDOT_COOKIE),
            };
            if f(&g, e, None)? {
                return Ok(());
            }
        }
        for (cookie, name, t) in g.iter_from(at) {
            let e = DirEntry {
                ino: t.ino,
                kind: t.kind,
                name: name.to_vec(),
                offset: at.offset_of(cookie),
            };
            if f(&g, e, Some(t))? {
                break;
            }
        }
        Ok(())
    }

    pub(crate) fn do_readdir(
        &self,
        dir: &VnodeRef,
        offset: u64,
        sink: &mut DirSink<'_>,
    ) -> VfsResult<()> {
        self.scan(dir, offset, |_, e, _| Ok(sink(&e)))
    }

    /// `readdir` with vnodes: each entry's vnode is got while the
    /// directory is locked, so the entry cannot be unlinked in between.
    pub(crate) fn do_readdirplus(
        &self,
        dir: &VnodeRef,
        offset: u64,
        sink: &mut DirPlusSink<'_>,
    ) -> VfsResult<()> {
        self.scan(dir, offset, |_, e, t| {
            let Some(t) = t else {
                return Ok(sink(&e, None));
            };
            let Some(inode) = self.table.get(t.ino) else {
                return Ok(false);
            };
            let vp = self.vnode(&inode)?;
            let attr = inode.attr();
            Ok(sink(&e, Some((&vp, &attr))))
        })
    }
}
