//! Name operations: lookup, the create family, link, unlink, rmdir,
//! rename. Each resolves exactly one component relative to a held
//! directory fd; none builds a path.
//!
//! # Why no server-side locking
//! The backing file system makes each of these atomic; the server keeps
//! no directory contents or name cache of its own (the kernel's dcache,
//! bounded by the entry timeout, is the only one), so there is nothing of
//! ours for a concurrent operation to see half-changed. The fallback
//! locations of handle-less nodes are updated after a rename, best effort:
//! a reopen that finds the wrong file answers `ESTALE`, never the wrong
//! file.

use crate::fs::PassthroughFs;
use crate::node::Node;
use crate::sys;
use rustix::fs::{AtFlags, FileType, Mode};
use std::os::fd::AsFd;
use std::sync::Arc;
use uvfs_vfs::{check_name, is_dot_or_dotdot, Ctx, Errno, RenameFlags, VType, VfsResult, VnodeRef};

impl PassthroughFs {
    pub(crate) fn do_lookup(&self, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        check_name(name)?;
        let dnode = self.node_of(dir)?;
        if name == b"." {
            return Ok(dir.clone());
        }
        if name == b".." {
            return Ok(self.lookup_dotdot(&dnode)?.0);
        }
        Ok(self.lookup_at(&dnode, name)?.0)
    }

    /// A lookup with the attributes its `statx` found: a revalidation of a
    /// name the server knows costs that one call and opens nothing.
    pub(crate) fn do_lookup_attr(
        &self,
        dir: &VnodeRef,
        name: &[u8],
    ) -> VfsResult<(VnodeRef, uvfs_vfs::Attr)> {
        check_name(name)?;
        let dnode = self.node_of(dir)?;
        if name == b"." {
            return Ok((dir.clone(), self.getattr_node(&dnode)?));
        }
        if name == b".." {
            return self.lookup_dotdot(&dnode);
        }
        self.lookup_at(&dnode, name)
    }

    pub(crate) fn do_mknod(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
        rdev: u64,
    ) -> VfsResult<VnodeRef> {
        self.make_at(ctx, dir, name, |dfd, n| {
            let mode = self.creation_mode(dfd, mode, ctx.umask);
            // A type of 0 makes a regular file, as mknod(2) does.
            let kind = match mode & libc::S_IFMT {
                0 => FileType::RegularFile,
                _ => FileType::from_raw_mode(mode),
            };
            let perm = Mode::from_raw_mode(mode & !libc::S_IFMT);
            Ok(rustix::fs::mknodat(dfd, n, kind, perm, rdev)?)
        })
    }

    pub(crate) fn do_mkdir(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
    ) -> VfsResult<VnodeRef> {
        self.make_at(ctx, dir, name, |dfd, n| {
            let mode = self.creation_mode(dfd, mode & 0o7777, ctx.umask);
            Ok(rustix::fs::mkdirat(dfd, n, Mode::from_raw_mode(mode))?)
        })
    }

    pub(crate) fn do_symlink(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        target: &[u8],
    ) -> VfsResult<VnodeRef> {
        uvfs_vfs::check_symlink_target(target)?;
        let t = sys::cstr(target)?;
        self.make_at(ctx, dir, name, |dfd, n| {
            // The target is stored, never resolved by the server.
            Ok(rustix::fs::symlinkat(t.as_c_str(), dfd, n)?)
        })
    }

    pub(crate) fn do_link(&self, vp: &VnodeRef, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        uvfs_vfs::check_new_name(name)?;
        let node = self.node_of(vp)?;
        let dnode = self.node_of(dir)?;
        let cname = sys::cstr(name)?;
        let fd = self.fd_of(&node)?;
        let dfd = self.fd_of(&dnode)?;
        // AT_EMPTY_PATH links the inode `fd` refers to (needs
        // CAP_DAC_READ_SEARCH, as root has).
        rustix::fs::linkat(&fd, sys::EMPTY, &dfd, &cname, AtFlags::EMPTY_PATH)?;
        // An O_TMPFILE file named now: its handle leads back to it from
        // here on, so its fd need not be kept any more.
        if node.kind() == VType::Reg && node.is_orphan() {
            node.set_orphan(false);
        }
        Ok(())
    }

    fn remove(&self, dir: &VnodeRef, name: &[u8], flags: libc::c_int) -> VfsResult<()> {
        check_name(name)?;
        if is_dot_or_dotdot(name) {
            return Err(if name == b"." {
                Errno::EINVAL
            } else {
                Errno::ENOTEMPTY
            });
        }
        let dnode = self.node_of(dir)?;
        let cname = sys::cstr(name)?;
        let dfd = self.fd_of(&dnode)?;
        let st = sys::statx_at(dfd.as_fd(), &cname, rustix::fs::AtFlags::empty()).ok();
        let doomed = st.as_ref().and_then(|st| self.doomed(st));
        let held = st.and_then(|st| self.hold_freed(dfd.as_fd(), &cname, &st));
        let flags = AtFlags::from_bits_retain(flags as u32);
        let res = rustix::fs::unlinkat(&dfd, &cname, flags).map_err(Errno::from);
        self.removed(doomed, res.is_ok(), false);
        if let Some(fd) = held {
            self.close_held(fd);
        }
        res.map(drop)
    }

    /// The node behind a name (`st`, its statx) if removing this name (an
    /// unlink, rmdir or rename over it) deletes its file, and the node is
    /// cached.
    /// Regular files lose their cached fd afterwards (`uncache_unlinked`);
    /// anything else gets an fd pinned now (`Node::set_orphan`), as the
    /// kernel may hold it open without our knowing. (A racing `link` can
    /// make the guess wrong; the cost is one fd reopened or kept a while.)
    fn doomed(&self, st: &crate::sys::Statx) -> Option<Doomed> {
        let fmt = u32::from(st.stx_mode) & libc::S_IFMT;
        if fmt != libc::S_IFDIR && st.stx_nlink != 1 {
            return None;
        }
        let id = self.inodes.known_id(sys::stx_dev(st), st.stx_ino)?;
        let vp = self.layer.lookup_cached(&self.mnt, id)?;
        let node = self.node_of(&vp).ok()?;
        if node.dev() != sys::stx_dev(st) || node.ino != st.stx_ino {
            return None;
        }
        let regular = fmt == libc::S_IFREG;
        let small = crate::freeing::allocated(st) < KEPT_WHEN_REPLACED;
        if !regular {
            // Cache an fd (a failure just leaves the old behaviour).
            if self.fd_of(&node).is_ok() {
                node.set_orphan(true);
            }
        } else {
            // Its open files must not need the name to get an fd back.
            self.keep_reachable(&node);
        }
        Some(Doomed {
            vp,
            node,
            regular,
            small,
        })
    }

    /// After the removal `doomed` was taken for: done (`ok`) or refused;
    /// `replaced`: a rename over the name, which still leads to a file.
    fn removed(&self, doomed: Option<Doomed>, ok: bool, replaced: bool) {
        let Some(Doomed {
            vp,
            node,
            regular,
            small,
        }) = doomed
        else {
            return;
        };
        if !ok {
            if !regular {
                node.set_orphan(false);
            }
            return;
        }
        // Gone: recycle the vnode once the kernel forgets it (its FORGET
        // drops the last hold) instead of caching it; for an orphan that is
        // what gives its pinned fd back. Without this, `rm -rf` of more
        // directories than the fd budget would pin the whole budget until
        // LRU pressure reached them.
        vp.recycle_when_free();
        if regular {
            // Before its fd goes: an OPEN already on its way by the name
            // the kernel still caches must see a removal of ours, not one
            // behind our back (`do_open`).
            node.mark_removed(replaced);
            // One parked since `doomed` (none is from now on).
            self.keep_reachable(&node);
        }
        // Renamed over (a save by rename): an OPEN on its way by the name
        // the kernel resolved before the rename opens it, as on ext4,
        // where the open that resolved the name first gets the old file
        // (ESTALE alone has the kernel look again, and a second rename in
        // between reaches the caller). So a small file keeps its
        // cached fd, if it has one, until the kernel forgets the node,
        // which it does as soon as no one uses it.
        if regular && replaced && small && node.cached_fd().is_some() {
            node.set_orphan(true);
            return;
        }
        // Counted only when a cached fd actually went.
        if regular && node.uncache_unlinked() {
            self.counters
                .unlinked
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub(crate) fn do_unlink(&self, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        self.remove(dir, name, 0)
    }

    pub(crate) fn do_rmdir(&self, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        self.remove(dir, name, libc::AT_REMOVEDIR)
    }

    pub(crate) fn do_rename(
        &self,
        dir: &VnodeRef,
        name: &[u8],
        newdir: &VnodeRef,
        newname: &[u8],
        flags: RenameFlags,
    ) -> VfsResult<()> {
        check_name(name)?;
        check_name(newname)?;
        if is_dot_or_dotdot(name) || is_dot_or_dotdot(newname) {
            return Err(Errno::EBUSY);
        }
        let known = RenameFlags::NOREPLACE | RenameFlags::EXCHANGE | RenameFlags::WHITEOUT;
        if flags.0 & !known != 0 {
            return Err(Errno::EINVAL);
        }
        let (dn, ndn) = (self.node_of(dir)?, self.node_of(newdir)?);
        let (c1, c2) = (sys::cstr(name)?, sys::cstr(newname)?);
        let (d1, d2) = (self.fd_of(&dn)?, self.fd_of(&ndn)?);
        // Fallback nodes follow their names; find them before the rename.
        let fallback = !self.handles.enabled() || dn.dev() != self.root.dev();
        let moved = |fd, n: &std::ffi::CStr| {
            sys::statx_at(fd, n, rustix::fs::AtFlags::empty())
                .ok()
                .map(|st| self.inodes.newest_id(sys::stx_dev(&st), st.stx_ino))
        };
        let (m1, m2) = if fallback {
            (moved(d1.as_fd(), &c1), moved(d2.as_fd(), &c2))
        } else {
            (None, None)
        };
        // (A target that is another name of the source has two links, so
        // it is not doomed: such a rename deletes nothing.)
        let target = if flags.exchange() || flags.0 & RenameFlags::NOREPLACE != 0 {
            None
        } else {
            sys::statx_at(d2.as_fd(), &c2, rustix::fs::AtFlags::empty()).ok()
        };
        let replaced = target.as_ref().and_then(|st| self.doomed(st));
        let held = target.and_then(|st| self.hold_freed(d2.as_fd(), &c2, &st));
        let raw_flags = rustix::fs::RenameFlags::from_bits_retain(flags.0);
        let res = rustix::fs::renameat_with(&d1, &c1, &d2, &c2, raw_flags).map_err(Errno::from);
        self.removed(replaced, res.is_ok(), true);
        if let Some(fd) = held {
            self.close_held(fd);
        }
        res?;
        let relocate = |id: Option<u64>, to: &Arc<crate::node::Node>, n: &[u8]| {
            if let Some(vp) = id.and_then(|id| self.layer.lookup_cached(&self.mnt, id)) {
                if let Ok(node) = self.node_of(&vp) {
                    node.set_location(to, n);
                }
            }
        };
        relocate(m1, &ndn, newname);
        if flags.exchange() {
            relocate(m2, &dn, name);
        }
        Ok(())
    }
}

/// A node whose file a removal is about to delete (see `doomed`).
struct Doomed {
    vp: VnodeRef,
    node: Arc<Node>,
    regular: bool,
    /// Holds less than [`KEPT_WHEN_REPLACED`] bytes of storage.
    small: bool,
}

/// Storage below which a regular file renamed over keeps its cached fd
/// until the kernel forgets it (`removed`): the last close, at the
/// FORGET, then frees it on a request thread, which must stay cheap.
const KEPT_WHEN_REPLACED: u64 = 1 << 20;
