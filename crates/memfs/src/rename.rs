//! `rename` with `RENAME_NOREPLACE`, `RENAME_EXCHANGE` and
//! `RENAME_WHITEOUT` (overlayfs's: the old name becomes a whiteout, a 0:0
//! character device, in the same step, under the same locks).
//!
//! # Lock order
//! 1. `rename_lock`, for renames between two directories only. It keeps
//!    every directory's parent fixed, so "is A an ancestor of B" can be
//!    answered by walking parents, and it makes the choice in step 2
//!    stable.
//! 2. The two parent directories: an ancestor before its descendant,
//!    unrelated ones by inode number. Every other operation locks at most
//!    one parent and then its children, so this order agrees with theirs.
//! 3. The child directories that change: a moved directory (its `..`), a
//!    replaced one (it must be empty and becomes removed), in inode order.
//!    None of them can be one of the parents: a source that is an
//!    ancestor of the target directory is `EINVAL`, a target that is an
//!    ancestor of the source directory is `ENOTEMPTY` (`EINVAL` for an
//!    exchange), both found before anything is locked.
//! 4. Inode metadata mutexes, innermost as always.
//!
//! # The race in step 2
//! The names are looked up under shared locks before the parents are
//! locked together (to decide the checks above). Another thread may
//! change either name in between; with both parents locked the lookups
//! are repeated, and if anything moved the whole attempt starts over.

use crate::dir::Target;
use crate::fs::MemFs;
use crate::inode::Inode;
use crate::ispace::INODE_COST;
use crate::namei::NewNode;
use crate::table::ROOT_INO;
use parking_lot::RwLockWriteGuard;
use std::sync::Arc;
use uvfs_vfs::{
    check_name, is_dot_or_dotdot, Ctx, Errno, Ino, RenameFlags, Timespec, VType, VfsResult,
    VnodeRef,
};

use crate::dir::Directory;

/// Attempts before giving up on a rename that keeps racing.
const MAX_ATTEMPTS: usize = 64;

impl MemFs {
    pub(crate) fn do_rename(
        &self,
        ctx: &Ctx,
        sdir: &VnodeRef,
        sname: &[u8],
        ddir: &VnodeRef,
        dname: &[u8],
        flags: RenameFlags,
    ) -> VfsResult<()> {
        let known = RenameFlags::NOREPLACE | RenameFlags::EXCHANGE | RenameFlags::WHITEOUT;
        if flags.0 & !known != 0 || (flags.exchange() && (flags.noreplace() || flags.whiteout())) {
            return Err(Errno::EINVAL);
        }
        check_name(sname)?;
        check_name(dname)?;
        if is_dot_or_dotdot(sname) || is_dot_or_dotdot(dname) {
            return Err(Errno::EBUSY);
        }
        let (si, _) = self.dir_of(sdir)?;
        let (di, _) = self.dir_of(ddir)?;
        if si.ino == di.ino {
            return self.rename_within(ctx, sdir, si, sname, dname, flags);
        }
        let _serial = self.rename_lock.lock();
        for _ in 0..MAX_ATTEMPTS {
            if let Some(r) = self.rename_across(ctx, sdir, si, sname, ddir, di, dname, flags) {
                return r;
            }
        }
        Err(Errno::EAGAIN)
    }

    /// True if `a` is `b` or one of its ancestors. Call with `rename_lock`.
    fn is_ancestor(&self, a: Ino, b: Ino) -> bool {
        let mut cur = b;
        loop {
            if cur == a {
                return true;
            }
            if cur == ROOT_INO {
                return false;
            }
            let Some(inode) = self.table.get(cur) else {
                return false;
            };
            let Some(d) = inode.dir() else { return false };
            let parent = d.read().parent;
            if parent == cur {
                return false;
            }
            cur = parent;
        }
    }

    /// The inode flags' rules (`iflags.rs`): the name leaves `sdir`, goes
    /// into `ddir` (replacing `target`'s there, if any); neither file may
    /// be immutable or append-only.
    fn check_inode_flags(
        sdir: &Inode,
        ddir: &Inode,
        moved: &Inode,
        target: Option<&Inode>,
    ) -> VfsResult<()> {
        sdir.check_may_remove()?;
        moved.check_fixed()?;
        match target {
            Some(t) => {
                ddir.check_may_remove()?;
                t.check_fixed()
            }
            None => ddir.check_may_add(),
        }
    }

    /// Type rules for replacing `dst` by `src` (not for exchange).
    fn check_replace(src: Target, dst: Option<Target>) -> VfsResult<()> {
        match dst {
            Some(d) if src.kind == VType::Dir && d.kind != VType::Dir => Err(Errno::ENOTDIR),
            Some(d) if src.kind != VType::Dir && d.kind == VType::Dir => Err(Errno::EISDIR),
            _ => Ok(()),
        }
    }

    /// Locks the child directories that change, in inode order, and checks
    /// that a replaced directory is empty (`mark_removed` marks it once
    /// nothing can fail any more).
    fn lock_victims<'a>(
        moved: &[&'a Arc<Inode>],
        replaced: Option<&'a Arc<Inode>>,
    ) -> VfsResult<Vec<(Ino, RwLockWriteGuard<'a, Directory>)>> {
        let mut all: Vec<&Arc<Inode>> = moved
            .iter()
            .copied()
            .filter(|i| i.kind == VType::Dir)
            .collect();
        if let Some(r) = replaced.filter(|r| r.kind == VType::Dir) {
            all.push(r);
        }
        all.sort_by_key(|i| i.ino);
        all.dedup_by_key(|i| i.ino);
        let mut guards = Vec::with_capacity(all.len());
        for i in all {
            if let Some(d) = i.dir() {
                guards.push((i.ino, d.write()));
            }
        }
        if let Some(r) = replaced.filter(|r| r.kind == VType::Dir) {
            if let Some((_, g)) = guards.iter().find(|(ino, _)| *ino == r.ino) {
                if !g.is_empty() {
                    return Err(Errno::ENOTEMPTY);
                }
            }
        }
        Ok(guards)
    }

    /// Marks the replaced directory (locked by `lock_victims`) removed.
    fn mark_removed(
        guards: &mut [(Ino, RwLockWriteGuard<'_, Directory>)],
        replaced: Option<&Arc<Inode>>,
    ) {
        if let Some(r) = replaced.filter(|r| r.kind == VType::Dir) {
            if let Some((_, g)) = guards.iter_mut().find(|(ino, _)| *ino == r.ino) {
                g.removed = true;
            }
        }
    }

    /// The link count and ctime of a replaced inode; true if it is gone.
    /// A name that was not the file's last gives its inode space back
    /// (`ispace.rs`).
    fn unlink_replaced(&self, r: &Inode, now: Timespec) -> bool {
        let mut m = r.meta.lock();
        m.nlink = if r.kind == VType::Dir {
            0
        } else {
            if m.nlink > 1 {
                self.ispace.give(INODE_COST);
            }
            m.nlink.saturating_sub(1)
        };
        m.ctime = now;
        m.nlink == 0
    }

    /// `RENAME_WHITEOUT`: the whiteout to put at the old name in `dir`
    /// (its entries write-locked by the caller), made as `mknod` would,
    /// before anything changes: it may fail (`ENOSPC`). RENAME carries
    /// no caller ids on a mount that takes idmapped mounts: the whiteout
    /// is then the caller's own (`Ctx::resolved`), root's if it is gone.
    fn whiteout(&self, ctx: &Ctx, dir: &Inode, now: Timespec) -> VfsResult<Arc<Inode>> {
        let ctx = &ctx.resolved().unwrap_or(Ctx {
            uid: 0,
            gid: 0,
            ..*ctx
        });
        let new = NewNode {
            kind: VType::Chr,
            perm: 0,
            rdev: 0,
            target: b"",
        };
        self.new_inode(ctx, dir, new, now)
    }

    /// Puts whiteout `w` at `name` in `g` (and in the inode table).
    fn place_whiteout(&self, g: &mut Directory, name: &[u8], w: Arc<Inode>) {
        g.insert(
            name,
            Target {
                ino: w.ino,
                kind: VType::Chr,
            },
        );
        self.table.insert(w);
    }

    fn rename_within(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        di: &Inode,
        sname: &[u8],
        dname: &[u8],
        flags: RenameFlags,
    ) -> VfsResult<()> {
        let d = di.dir().ok_or(Errno::ENOTDIR)?;
        let now = Timespec::now();
        let mut g = d.write();
        if g.removed {
            return Err(Errno::ENOENT);
        }
        let src = g.get(sname).ok_or(Errno::ENOENT)?;
        let dst = g.get(dname);
        if flags.exchange() && dst.is_none() {
            return Err(Errno::ENOENT);
        }
        if sname == dname || dst.is_some_and(|d| d.ino == src.ino) {
            return Ok(());
        }
        if flags.noreplace() && dst.is_some() {
            return Err(Errno::EEXIST);
        }
        let moved = self.table.get(src.ino).ok_or(Errno::ENOENT)?;
        let target = match dst {
            Some(t) => Some(self.table.get(t.ino).ok_or(Errno::ENOENT)?),
            None => None,
        };
        Self::check_inode_flags(di, di, &moved, target.as_deref())?;
        let nc = self.layer.namecache();
        if let (true, Some(dt)) = (flags.exchange(), dst) {
            let other = self.table.get(dt.ino).ok_or(Errno::ENOENT)?;
            g.replace(sname, dt);
            g.replace(dname, src);
            nc.remove(dir, sname);
            nc.remove(dir, dname);
            di.meta.lock().touch_modified(now);
            moved.meta.lock().ctime = now;
            other.meta.lock().ctime = now;
            return Ok(());
        }
        Self::check_replace(src, dst)?;
        let replaced = match dst {
            Some(t) => Some(self.table.get(t.ino).ok_or(Errno::ENOENT)?),
            None => None,
        };
        let mut victims = Self::lock_victims(&[], replaced.as_ref())?;
        // After the checks (tmpfs answers ENOTEMPTY before it makes the
        // whiteout), before any change.
        let wh = match flags.whiteout() {
            true => Some(self.whiteout(ctx, di, now)?),
            false => None,
        };
        Self::mark_removed(&mut victims, replaced.as_ref());
        if dst.is_some() {
            g.remove(dname);
        }
        g.rename(sname, dname);
        if let Some(w) = wh {
            self.place_whiteout(&mut g, sname, w);
        }
        nc.remove(dir, sname);
        nc.remove(dir, dname);
        drop(victims);
        {
            let mut m = di.meta.lock();
            m.touch_modified(now);
            if replaced.as_ref().is_some_and(|r| r.kind == VType::Dir) {
                m.nlink = m.nlink.saturating_sub(1);
            }
        }
        moved.meta.lock().ctime = now;
        let gone = replaced.filter(|r| self.unlink_replaced(r, now));
        drop(g);
        if let Some(r) = gone {
            self.forget_unlinked(&r);
        }
        Ok(())
    }

    /// One attempt at a rename between two directories; `None` means a
    /// name changed under us and the caller should try again.
    #[allow(clippy::too_many_arguments)]
    fn rename_across(
        &self,
        ctx: &Ctx,
        sdir: &VnodeRef,
        si: &Inode,
        sname: &[u8],
        ddir: &VnodeRef,
        di: &Inode,
        dname: &[u8],
        flags: RenameFlags,
    ) -> Option<VfsResult<()>> {
        let res = (|| -> VfsResult<Option<()>> {
            let (sd, dd) = (
                si.dir().ok_or(Errno::ENOTDIR)?,
                di.dir().ok_or(Errno::ENOTDIR)?,
            );
            // Phase 1: both names, one lock at a time.
            let src = {
                let g = sd.read();
                if g.removed {
                    return Err(Errno::ENOENT);
                }
                g.get(sname).ok_or(Errno::ENOENT)?
            };
            let dst = {
                let g = dd.read();
                if g.removed {
                    return Err(Errno::ENOENT);
                }
                g.get(dname)
            };
            if flags.exchange() && dst.is_none() {
                return Err(Errno::ENOENT);
            }
            if dst.is_some_and(|d| d.ino == src.ino) {
                return Ok(Some(()));
            }
            if flags.noreplace() && dst.is_some() {
                return Err(Errno::EEXIST);
            }
            if src.kind == VType::Dir && self.is_ancestor(src.ino, di.ino) {
                return Err(Errno::EINVAL);
            }
            if let Some(d) = dst.filter(|d| d.kind == VType::Dir) {
                if self.is_ancestor(d.ino, si.ino) {
                    return Err(if flags.exchange() {
                        Errno::EINVAL
                    } else {
                        Errno::ENOTEMPTY
                    });
                }
            }
            if !flags.exchange() {
                Self::check_replace(src, dst)?;
            }
            // Phase 2: both parents, in order; then the same names again.
            let src_first = self.is_ancestor(si.ino, di.ino)
                || (!self.is_ancestor(di.ino, si.ino) && si.ino < di.ino);
            let (mut gs, mut gd) = if src_first {
                let a = sd.write();
                (a, dd.write())
            } else {
                let b = dd.write();
                (sd.write(), b)
            };
            if gs.removed || gd.removed {
                return Err(Errno::ENOENT);
            }
            if gs.get(sname) != Some(src) || gd.get(dname) != dst {
                return Ok(None);
            }
            let moved = self.table.get(src.ino).ok_or(Errno::ENOENT)?;
            let other = match dst {
                Some(t) => Some(self.table.get(t.ino).ok_or(Errno::ENOENT)?),
                None => None,
            };
            Self::check_inode_flags(si, di, &moved, other.as_deref())?;
            let now = Timespec::now();
            let nc = self.layer.namecache();
            if flags.exchange() {
                let Some(other) = other else {
                    return Err(Errno::ENOENT);
                };
                let mut victims = Self::lock_victims(&[&moved, &other], None)?;
                for (ino, g) in victims.iter_mut() {
                    g.parent = if *ino == moved.ino { di.ino } else { si.ino };
                }
                let dt = dst.ok_or(Errno::ENOENT)?;
                gs.replace(sname, dt);
                gd.replace(dname, src);
                nc.remove(sdir, sname);
                nc.remove(ddir, dname);
                drop(victims);
                let (sdirs, odirs) = (
                    (src.kind == VType::Dir) as u32,
                    (dt.kind == VType::Dir) as u32,
                );
                {
                    let mut m = si.meta.lock();
                    m.touch_modified(now);
                    m.nlink = m.nlink + odirs - sdirs;
                }
                {
                    let mut m = di.meta.lock();
                    m.touch_modified(now);
                    m.nlink = m.nlink + sdirs - odirs;
                }
                moved.meta.lock().ctime = now;
                other.meta.lock().ctime = now;
                return Ok(Some(()));
            }
            let mut victims = Self::lock_victims(&[&moved], other.as_ref())?;
            let wh = match flags.whiteout() {
                true => Some(self.whiteout(ctx, si, now)?),
                false => None,
            };
            Self::mark_removed(&mut victims, other.as_ref());
            for (ino, g) in victims.iter_mut() {
                if *ino == moved.ino {
                    g.parent = di.ino;
                }
            }
            if dst.is_some() {
                gd.remove(dname);
            }
            gs.remove(sname);
            gd.insert(dname, src);
            if let Some(w) = wh {
                self.place_whiteout(&mut gs, sname, w);
            }
            nc.remove(sdir, sname);
            nc.remove(ddir, dname);
            drop(victims);
            let is_dir = (src.kind == VType::Dir) as u32;
            let replaced_dir = other.as_ref().is_some_and(|o| o.kind == VType::Dir) as u32;
            {
                let mut m = si.meta.lock();
                m.touch_modified(now);
                m.nlink = m.nlink.saturating_sub(is_dir);
            }
            {
                let mut m = di.meta.lock();
                m.touch_modified(now);
                m.nlink = (m.nlink + is_dir).saturating_sub(replaced_dir);
            }
            moved.meta.lock().ctime = now;
            let gone = other.filter(|r| self.unlink_replaced(r, now));
            drop(gs);
            drop(gd);
            if let Some(r) = gone {
                self.forget_unlinked(&r);
            }
            Ok(Some(()))
        })();
        match res {
            Ok(Some(())) => Some(Ok(())),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
