//! Resolving nodes: a name in a directory, a node id, a file handle or
//! an fd to the node's vnode, and a node to an fd of its file.
//!
//! # Lookup
//! A lookup takes the name's statx and file handle beneath the
//! directory's fd, without opening it (`lookup_at`), and asks the vnode
//! layer for node id `inodes.id_of(dev, ino, generation)`: single flight,
//! so racing lookups of one file build one node. An fd is opened only
//! when an operation needs one (`fd_of`: by handle, or by the parent and
//! name where the file system has no handles) and cached on the node.
//!
//! # A different file behind a known inode number
//! If the vnode already exists but the lookup found a different file (the
//! old one was removed behind the server's back and its inode number
//! reused, perhaps for a file of another type), what happens depends on
//! whether the kernel still remembers the old node. If not, the node is
//! rebound to the new file: new handle, type and generation, old fd
//! dropped. If it does, its requests for the old inode would reach the
//! new file, so the new file gets an alias id instead (`inodes.rs`) and
//! the old node, keeping its handle, answers `ESTALE`.

use super::{PassthroughFs, MAX_REOPEN_DEPTH};
use crate::by_ino::Scope;
use crate::fdpool::Fd;
use crate::handle::Handle;
use crate::node::{Ident, Node, Way};
use crate::sys;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{mode_to_vtype, Attr, Errno, Ino, VfsResult, VnodeRef};

impl PassthroughFs {
    /// The node's fd: cached, or reopened (and cached).
    pub(crate) fn fd_of(&self, node: &Arc<Node>) -> VfsResult<Arc<Fd>> {
        match node.cached_fd() {
            Some(fd) => Ok(fd),
            None => self.reopen(node, 0),
        }
    }

    #[cold]
    fn reopen(&self, node: &Arc<Node>, depth: usize) -> VfsResult<Arc<Fd>> {
        if depth > MAX_REOPEN_DEPTH {
            return Err(Errno::ELOOP);
        }
        let ident = node.ident();
        let fd = if let Some(h) = ident.handle() {
            let res = self.pool.reserve()?;
            let fd = self
                .handles
                .open(h, libc::O_PATH)
                .map_err(|e| self.stale(e))?;
            self.counters.reopen_handle.fetch_add(1, Ordering::Relaxed);
            res.into_fd(fd)
        } else if let Way::Path(at) = &ident.way {
            let (parent, name) = &**at;
            let pfd = match parent.cached_fd() {
                Some(fd) => fd,
                None => self.reopen(parent, depth + 1)?,
            };
            let name = sys::cstr(name)?;
            let res = self.pool.reserve()?;
            let fd = sys::open_beneath(pfd.as_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0)
                .map_err(|e| {
                    if e == Errno::ENOENT {
                        self.counters.stale.fetch_add(1, Ordering::Relaxed);
                        Errno::ESTALE
                    } else {
                        e
                    }
                })?;
            self.counters
                .reopen_fallback
                .fetch_add(1, Ordering::Relaxed);
            res.into_fd(fd)
        } else {
            return Err(Errno::ESTALE);
        };
        // The file must still be the node's: a handle or a name may now
        // lead to another inode (removed and replaced behind our back).
        self.check_is_nodes(node, &sys::statx_fd(fd.as_fd())?)?;
        Ok(self.cache_fd(node, Arc::new(fd)))
    }

    /// `ESTALE` unless `st` (a statx of a file just opened for `node`)
    /// is the node's file: same device, inode number and type.
    pub(crate) fn check_is_nodes(&self, node: &Node, st: &sys::Statx) -> VfsResult<()> {
        if (sys::stx_dev(st), st.stx_ino) != (node.dev(), node.ino)
            || mode_to_vtype(u32::from(st.stx_mode)) != Some(node.ident().kind)
        {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ESTALE);
        }
        Ok(())
    }

    /// Caches `fd` on `node` (unless it has one); returns the fd to use.
    fn cache_fd(&self, node: &Arc<Node>, fd: Arc<Fd>) -> Arc<Fd> {
        let (fd, enter) = node.install(fd);
        if enter {
            self.pool.enter(node);
        }
        fd
    }

    /// Looks `name` up in the directory `dir`: the vnode and its
    /// attributes. `name` must have passed `check_name` and not be `.` or
    /// `..`.
    ///
    /// No fd is opened for the entry: its identity is a statx and a file
    /// handle taken by name in the directory (two syscalls), and an fd is
    /// opened only when an operation needs one (`fd_of`). A `find` over a
    /// tree of any size then costs no fd per entry, and half the syscalls
    /// of open + handle + statx + (later) close. The name is one checked
    /// component resolved in `dir` without following a trailing symlink, so
    /// it cannot leave `dir`. If the entry is swapped between the two
    /// calls, the handle names another file than the statx: the first
    /// reopen through it fails its (dev, ino) check (`fd_of`) and answers
    /// ESTALE, never the other file.
    pub(crate) fn lookup_at(&self, dir: &Arc<Node>, name: &[u8]) -> VfsResult<(VnodeRef, Attr)> {
        let dfd = self.fd_of(dir)?;
        let probe = probe(self, dfd.as_fd(), name);
        drop(dfd);
        self.lookup_probed(dir, name, probe)
    }

    /// The second half of `lookup_at`: the vnode for what `probe` found
    /// at `dir`/`name` (the probe may have run on another thread, ahead
    /// of time: `dir.rs`'s READDIRPLUS).
    pub(crate) fn lookup_probed(
        &self,
        dir: &Arc<Node>,
        name: &[u8],
        probe: VfsResult<Probe>,
    ) -> VfsResult<(VnodeRef, Attr)> {
        let (st, handle) = probe?;
        self.counters.lookups.fetch_add(1, Ordering::Relaxed);
        let handle = match handle {
            Probed::Handle(h) => h,
            Probed::Known => {
                if let Some((vp, node)) = self.known_unchanged(&st) {
                    self.counters.revalidated.fetch_add(1, Ordering::Relaxed);
                    node.set_location(dir, name);
                    let attr = self.attr_of(&node, &st);
                    return Ok((vp, attr));
                }
                // Recycled since the probe: take the handle after all.
                let dfd = self.fd_of(dir)?;
                Handle::of_name(dfd.as_fd(), &sys::cstr(name)?)
            }
        };
        self.vnode_from(st, handle, Some((dir, name)), None)
    }

    /// The vnode of node id `id` without a name: cached, or reopened by
    /// the handle it had when it was recycled (`remembered.rs`), or a
    /// node a predecessor handed over (`handover`). ESTALE if none, if
    /// the file was removed, or if the file now has another id (an alias
    /// of a reused number).
    pub(crate) fn vget_id(&self, id: Ino) -> VfsResult<VnodeRef> {
        self.vget_at(id, 0)
    }

    /// `vget_id`, `depth` parents deep in a kept node's resolution.
    pub(crate) fn vget_at(&self, id: Ino, depth: usize) -> VfsResult<VnodeRef> {
        if id == self.root.id {
            return self.root_vnode();
        }
        if let Some(vp) = self.layer.lookup_cached(&self.mnt, id) {
            return Ok(vp);
        }
        // A node the predecessor's kernel held first: `remembered` may
        // also name its id, with the handle of an older file whose inode
        // number the kept one reuses.
        if self.is_kept(id) {
            return self.vget_kept(id, depth);
        }
        if let Some(h) = self.remembered.get(id) {
            return self.vget_handle(id, h);
        }
        if self.by_ino == Scope::Off {
            return Err(Errno::ESTALE);
        }
        let h = crate::by_ino::handle(id, self.handles.mount_id()).ok_or(Errno::ESTALE)?;
        self.vget_by(id, &h, true)
    }

    /// Whether node ids resolve from the source alone (`by_ino.rs`).
    pub fn resolves_ids_by_itself(&self) -> bool {
        self.by_ino != Scope::Off
    }

    /// The vnode of node id `id`, whose file `h` opens.
    pub(crate) fn vget_handle(&self, id: Ino, h: Handle) -> VfsResult<VnodeRef> {
        self.vget_by(id, &h, false)
    }

    /// The vnode of node id `id`, whose file `h` opens; the node keeps
    /// `h`, or with `retake` the file's own handle (`h` being one made up
    /// without a generation, `by_ino.rs`).
    fn vget_by(&self, id: Ino, h: &Handle, retake: bool) -> VfsResult<VnodeRef> {
        let res = self.pool.reserve()?;
        let fd = res.into_fd(
            self.handles
                .open(h, libc::O_PATH)
                .map_err(|_| Errno::ESTALE)?,
        );
        let st = sys::statx_fd(fd.as_fd())?;
        // Removed, but its inode still held (by an fd of another user):
        // the mount never hands out a node for a nameless file.
        if st.stx_nlink == 0 {
            return Err(Errno::ESTALE);
        }
        // Found by a number alone below the file system's root: any file
        // of the file system could have that number.
        if retake && self.by_ino == Scope::Below {
            let root = self.fd_of(&self.root)?;
            let root_st = sys::statx_fd(root.as_fd())?;
            if !crate::by_ino::beneath(fd.as_fd(), &st, root.as_fd(), &root_st) {
                self.counters.outside_source.fetch_add(1, Ordering::Relaxed);
                return Err(Errno::ESTALE);
            }
        }
        let h = if retake {
            Handle::of_fd(fd.as_fd())
        } else {
            Ok(h.clone())
        };
        let (vp, _) = self.vnode_from(st, h, None, Some(fd))?;
        if vp.ino() != id {
            return Err(Errno::ESTALE);
        }
        self.counters.vget_reopened.fetch_add(1, Ordering::Relaxed);
        Ok(vp)
    }

    /// The cached node of the file `st` describes, if it is the file the
    /// node was made for: same (dev, ino), type and birth time. Its
    /// handle need not be taken then: a new file behind a reused inode
    /// number is born later. `None` where the file system reports no
    /// birth time, or while any inode number has an alias (`inodes.rs`).
    pub(crate) fn known_unchanged(&self, st: &crate::sys::Statx) -> Option<(VnodeRef, Arc<Node>)> {
        let born = crate::node::birth_key(st);
        if born == 0 || self.inodes.has_aliases() {
            return None;
        }
        let (dev, ino) = (sys::stx_dev(st), st.stx_ino);
        let id = self.inodes.known_id(dev, ino)?;
        let vp = self.layer.lookup_cached(&self.mnt, id)?;
        let node = self.node_of(&vp).ok()?;
        let same = (node.dev(), node.ino) == (dev, ino)
            && node.btime() == born
            && Some(node.kind()) == mode_to_vtype(u32::from(st.stx_mode));
        same.then_some((vp, node))
    }

    /// The vnode for the file an fd refers to (found at `parent`/`name`).
    pub(crate) fn vnode_from_fd(
        &self,
        fd: Fd,
        at: Option<(&Arc<Node>, &[u8])>,
    ) -> VfsResult<(VnodeRef, Attr)> {
        let st = sys::statx_fd(fd.as_fd())?;
        let handle = Handle::of_fd(fd.as_fd());
        self.vnode_from(st, handle, at, Some(fd))
    }

    /// The vnode for the file `st` describes, known by `handle` (if the
    /// file system has handles) or by `at`, with `fd` cached if given.
    pub(crate) fn vnode_from(
        &self,
        st: crate::sys::Statx,
        handle: VfsResult<Handle>,
        at: Option<(&Arc<Node>, &[u8])>,
        fd: Option<Fd>,
    ) -> VfsResult<(VnodeRef, Attr)> {
        let kind = mode_to_vtype(u32::from(st.stx_mode)).ok_or(Errno::EIO)?;
        let (dev, ino) = (sys::stx_dev(&st), st.stx_ino);
        if dev == self.own_dev.load(Ordering::Relaxed) {
            self.counters.own_mount.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ELOOP);
        }
        let handle = handle.ok().filter(|h| self.handles.accepts(h));
        let way = match (handle, at) {
            (Some(h), _) => Way::Handle(h),
            (None, Some((p, n))) => Way::Path(Box::new((p.clone(), n.into()))),
            (None, None) => Way::FdOnly,
        };
        let ident = Ident { kind, way };
        let gen = ident.gen();
        let born = crate::node::birth_key(&st);
        let mut id = self.inodes.id_of(dev, ino, gen);
        let (vp, node) = loop {
            let mut fresh = None;
            let vp = self.layer.get(&self.mnt, id, || {
                let node = Arc::new(Node::new(id, dev, ino, ident.clone(), false));
                fresh = Some(node.clone());
                Ok((kind, node))
            })?;
            if let Some(node) = fresh {
                // The number's own node was gone (the kernel let its file
                // go): an alias made for an older file behind the number
                // is obsolete, and listings would go on naming it.
                if id == self.inodes.node_id(dev, ino) {
                    self.inodes.drop_stale_alias(dev, ino, gen);
                }
                break (vp, node);
            }
            let node = self.node_of(&vp)?;
            if node.same_file(&ident) {
                if let Some((p, n)) = at {
                    node.set_location(p, n);
                }
                break (vp, node);
            }
            let alias = id != self.inodes.node_id(dev, ino);
            if vp.ext_count() == 0 || alias {
                // No kernel inode names the old file (or, without handles,
                // an alias changed type: aliasing it again would find it
                // again): the id moves to the new file, and an alias of an
                // older file behind this number is forgotten.
                self.counters.rebinds.fetch_add(1, Ordering::Relaxed);
                if !alias {
                    self.inodes.drop_alias(dev, ino);
                }
                node.set_ident(ident, true);
                // Under the lock `save_ahead` takes before it reads any
                // identity: a change it did not read is recorded.
                if let Some(ids) = self.idents_changed.lock().as_mut() {
                    ids.push(node.id);
                }
                break (vp, node);
            }
            // The kernel may still send requests for the old file under
            // this id (`inodes.rs`): the new file gets an alias.
            self.counters.aliases.fetch_add(1, Ordering::Relaxed);
            id = self.inodes.make_alias(dev, ino, gen);
        };
        node.set_btime(born);
        if let Some(fd) = fd {
            drop(self.cache_fd(&node, Arc::new(fd)));
        }
        Ok((vp, self.attr_of(&node, &st)))
    }

    /// `..` of `dir`: the root's is the root; any other's must lead to a
    /// directory beneath the root, or the walk is refused (`EACCES`: the
    /// directory was moved out of the tree behind the server's back).
    pub(crate) fn lookup_dotdot(&self, dir: &Arc<Node>) -> VfsResult<(VnodeRef, Attr)> {
        if (dir.dev(), dir.ino) == (self.root.dev(), self.root.ino) {
            let vp = self.root_vnode()?;
            let st = sys::statx_fd(self.fd_of(&self.root)?.as_fd())?;
            return Ok((vp, self.attr_of(&self.root, &st)));
        }
        let dfd = self.fd_of(dir)?;
        let res = self.pool.reserve()?;
        let fd = res.into_fd(sys::openat(
            dfd.as_fd(),
            c"..",
            libc::O_PATH | libc::O_DIRECTORY,
        )?);
        drop(dfd);
        if !self.is_beneath_root(&fd)? {
            return Err(Errno::EACCES);
        }
        self.vnode_from_fd(fd, None)
    }

    /// Whether the directory `fd` is the root or below it: walks `..` up
    /// to the root or to the host's `/`.
    fn is_beneath_root(&self, fd: &Fd) -> VfsResult<bool> {
        let mut cur: Option<Fd> = None;
        for _ in 0..MAX_REOPEN_DEPTH {
            let raw = cur.as_ref().map_or(fd.as_fd(), |f| f.as_fd());
            let st = sys::statx_fd(raw)?;
            let here = (sys::stx_dev(&st), st.stx_ino);
            if here == (self.root.dev(), self.root.ino) {
                return Ok(true);
            }
            let res = self.pool.reserve()?;
            let up = res.into_fd(sys::openat(raw, c"..", libc::O_PATH | libc::O_DIRECTORY)?);
            let ust = sys::statx_fd(up.as_fd())?;
            if (sys::stx_dev(&ust), ust.stx_ino) == here {
                return Ok(false); // the host's root: `..` of `/` is `/`
            }
            cur = Some(up);
        }
        Err(Errno::ELOOP)
    }
}

/// What a lookup learns from the backing file system: the entry's statx
/// and its file handle (or why it has none), unless the statx showed the
/// file to be a cached node's.
pub(crate) type Probe = (crate::sys::Statx, Probed);

/// The handle half of a [`Probe`].
pub(crate) enum Probed {
    /// Taken by name (or why it could not be).
    Handle(VfsResult<Handle>),
    /// Not taken: the statx matched a cached node's file
    /// (`PassthroughFs::known_unchanged`).
    Known,
}

/// The syscalls of a lookup of `name` in the directory `dfd`: a statx by
/// name and, for a file that is not a cached node's, its file handle by
/// name, neither following a trailing symlink. Reads shared state only:
/// safe to run for many names at once.
pub(crate) fn probe(fs: &PassthroughFs, dfd: BorrowedFd<'_>, name: &[u8]) -> VfsResult<Probe> {
    let cname = sys::cstr(name)?;
    let st = sys::statx_at(dfd, &cname, rustix::fs::AtFlags::empty())?;
    if fs.known_unchanged(&st).is_some() {
        return Ok((st, Probed::Known));
    }
    Ok((st, Probed::Handle(Handle::of_name(dfd, &cname))))
}
