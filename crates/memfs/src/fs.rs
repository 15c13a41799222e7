//! `MemFs`: construction, the vnode binding, and the small helpers every
//! operation uses. The operations themselves live in `namei.rs`,
//! `rename.rs`, `io.rs` and `attrs.rs`; `vops.rs` wires them to the
//! `FileSystem` trait.

use crate::budget::Budget;
use crate::dir::Directory;
use crate::inode::{Body, Inode, Meta};
use crate::ispace::Ispace;
use crate::pages::PAGE_SIZE;
use crate::table::{InodeTable, ROOT_INO};
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use uvfs_vfs::{Errno, Ino, Mount, Timespec, VType, VfsResult, VnodeLayer, VnodeRef};
use uvfs_vnode::{FsHooks, Vnode};

/// How to build a memfs.
#[derive(Clone, Debug)]
pub struct MemFsConfig {
    /// Most bytes of file data (rounded down to pages); `None` = no limit.
    pub size_limit: Option<u64>,
    /// Permission bits of the root directory.
    pub root_mode: u32,
    /// Owner of the root directory.
    pub root_uid: u32,
    /// Group of the root directory.
    pub root_gid: u32,
    /// Most inodes (tmpfs's `nr_inodes`; links and extended attributes
    /// take from the same budget, `ispace.rs`); `None` = no limit.
    pub inode_limit: Option<u64>,
    /// When reads move access times (`AtimeRule::from_mount_flags`).
    pub atime: crate::atime::AtimeRule,
}

impl Default for MemFsConfig {
    fn default() -> Self {
        MemFsConfig {
            size_limit: None,
            root_mode: 0o755,
            root_uid: 0,
            root_gid: 0,
            inode_limit: None,
            atime: Default::default(),
        }
    }
}

/// Longest `take_ispace` waits for removed files' inodes to be freed.
const SPACE_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// An in-memory file system mounted on a vnode layer.
pub struct MemFs {
    pub(crate) layer: Arc<VnodeLayer>,
    pub(crate) mnt: Arc<Mount>,
    pub(crate) table: InodeTable,
    pub(crate) budget: Arc<Budget>,
    /// Serialises cross-directory renames (Linux's `s_vfs_rename_mutex`),
    /// which makes directory parents stable for the ancestry walk.
    pub(crate) rename_lock: Mutex<()>,
    /// Inodes in memory and the inode budget (`ispace.rs`).
    pub(crate) ispace: Arc<Ispace>,
    /// When reads move access times (`atime.rs`).
    pub(crate) atime: crate::atime::AtimeCell,
    /// Nameless inodes a predecessor handed over (`handover.rs`).
    pub(crate) kept: Mutex<crate::kept::KeptInodes>,
    /// Whether pages in page files are given back when dropped
    /// (`pagefile.rs`, "Who gives pages back").
    pub(crate) lease: Arc<crate::pagefile::Lease>,
    /// A restored memfs's page files, until it takes the mount over and
    /// gives back the pages none of its files took.
    pub(crate) restored_files: Mutex<Vec<Arc<crate::pagefile::SharedFile>>>,
    /// Removed files the kernel still holds, whose data stays until it
    /// lets them go or the space is wanted (`orphans.rs`).
    pub(crate) orphans: Arc<crate::orphans::Orphans>,
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFs")
            .field("mnt", &self.mnt.id())
            .field("inodes", &self.table.len())
            .finish()
    }
}

/// The vnode layer's callbacks into memfs.
struct Hooks {
    orphans: Arc<crate::orphans::Orphans>,
}

impl FsHooks for Hooks {
    /// The last user of an unlinked file is gone: the vnode (with the
    /// inode it keeps alive, data and all) is recycled as soon as the
    /// kernel forgets it too, instead of waiting in the LRU. Until then
    /// the kernel may open it again (an `O_PATH` descriptor, a fanotify
    /// event): its data stays, counted free and given up if the space is
    /// wanted first (`orphans.rs`).
    fn inactive(&self, vp: &Vnode) {
        let Some(inode) = vp.data_arc::<Inode>() else {
            return;
        };
        if inode.nlink() != 0 {
            return;
        }
        vp.recycle_when_free();
        if inode.file().is_some_and(|f| f.pages() > 0) && vp.hold_count() > 0 {
            self.orphans.add(inode.ino, Arc::downgrade(&inode));
        }
    }
}

impl MemFs {
    /// `inode`'s contents were read: its atime moves as the mount's rule
    /// says (`atime.rs`).
    pub(crate) fn accessed(&self, inode: &crate::inode::Inode, now: uvfs_vfs::Timespec) {
        self.atime.get().touch(inode, now);
    }

    /// A memfs mounted on `layer` with no inode yet, its inode budget
    /// holding the root's cost.
    pub(crate) fn without_inodes(layer: Arc<VnodeLayer>, cfg: &MemFsConfig) -> MemFs {
        let orphans = Arc::new(crate::orphans::Orphans::default());
        let mnt = layer.mount(
            "memfs",
            Arc::new(Hooks {
                orphans: orphans.clone(),
            }),
        );
        let limit = cfg.size_limit.map_or(u64::MAX, |b| b / PAGE_SIZE as u64);
        MemFs {
            layer,
            mnt,
            table: InodeTable::new(),
            budget: Arc::new(Budget::new(limit)),
            rename_lock: Mutex::new(()),
            ispace: Arc::new(Ispace::new(cfg.inode_limit)),
            atime: crate::atime::AtimeCell::new(cfg.atime),
            kept: Default::default(),
            lease: crate::pagefile::Lease::new(true),
            restored_files: Default::default(),
            orphans,
        }
    }

    /// Mounts a new, empty memfs on `layer`.
    pub fn new(layer: Arc<VnodeLayer>, cfg: MemFsConfig) -> Arc<MemFs> {
        let fs = MemFs::without_inodes(layer, &cfg);
        let now = Timespec::now();
        let root = Inode::new(
            ROOT_INO,
            VType::Dir,
            Meta {
                perm: (cfg.root_mode & 0o7777) as u16,
                uid: cfg.root_uid,
                gid: cfg.root_gid,
                nlink: 2,
                linkable: false,
                rdev: 0,
                atime: now,
                mtime: now,
                ctime: now,
                btime: now,
                xattrs: Default::default(),
                flags: 0,
            },
            Body::Dir(RwLock::new(Directory::new(ROOT_INO))),
            // (Its cost is taken: a new budget starts with the root's.)
            fs.ispace.clone(),
        );
        fs.table.insert(Arc::new(root));
        Arc::new(fs)
    }

    /// The vnode layer this memfs is mounted on.
    pub fn layer(&self) -> &Arc<VnodeLayer> {
        &self.layer
    }

    /// Linked inodes.
    pub fn inode_count(&self) -> usize {
        self.table.len()
    }

    /// Inodes in memory, linked or kept alive by a vnode after unlink.
    pub fn alive_count(&self) -> usize {
        self.ispace.alive()
    }

    /// Runs `op`, which may need `bytes` of new data space: first frees
    /// the data of removed files nobody has open (`orphans.rs`) if less
    /// is free (so a write is not cut short where tmpfs would not cut
    /// it), and runs it once more if it still ran out of space and such
    /// data was freed meanwhile.
    pub(crate) fn with_orphans_reclaimed<T>(
        &self,
        bytes: u64,
        op: impl Fn() -> VfsResult<T>,
    ) -> VfsResult<T> {
        let free = self.budget.limit().saturating_sub(self.budget.used());
        if free.saturating_mul(PAGE_SIZE as u64) < bytes {
            self.orphans.reclaim(&self.layer, &self.mnt);
        }
        match op() {
            Err(Errno::ENOSPC) if self.orphans.reclaim(&self.layer, &self.mnt) => op(),
            r => r,
        }
    }

    /// Takes `bytes` of inode space (`ispace.rs`), or fails with `ENOSPC`.
    ///
    /// A file removed through FUSE keeps its inode until the kernel's
    /// FORGET for it arrives: queued during the removal, but read by a
    /// /dev/fuse loop while the next request may already be served from
    /// an io_uring queue. So `rm f; mkdir d` on a full memfs could fail
    /// where tmpfs, which frees at once, succeeds. When the budget is
    /// spent while nameless inodes hold some of it, this waits (at most
    /// `SPACE_WAIT`, only on this error path) for them to go; an inode
    /// kept open by someone just costs the caller that wait.
    pub(crate) fn take_ispace(&self, bytes: u64) -> VfsResult<()> {
        let deadline = std::time::Instant::now() + SPACE_WAIT;
        loop {
            match self.ispace.take(bytes) {
                Err(Errno::ENOSPC)
                    if self.ispace.alive() > self.table.len()
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_micros(250));
                }
                r => return r,
            }
        }
    }

    /// Whether a request needing inode space may have to wait in
    /// `take_ispace`: less than the largest single charge (an attribute of
    /// 64 KiB with its name, or an inode) is free while nameless inodes
    /// hold some (`FileSystem::short_of_space`).
    pub(crate) fn short_of_ispace(&self) -> bool {
        const LARGEST: u64 = (64 << 10) + 255 + 40 + crate::ispace::INODE_COST;
        self.ispace.free() < LARGEST && self.ispace.alive() > self.table.len()
    }

    /// Bytes of file data allocated.
    pub fn bytes_used(&self) -> u64 {
        self.budget.used() * PAGE_SIZE as u64
    }

    /// The inode behind a vnode of this mount.
    pub(crate) fn inode_of<'a>(&self, vp: &'a Vnode) -> VfsResult<&'a Inode> {
        if vp.mount_id() != self.mnt.id() {
            return Err(Errno::EXDEV);
        }
        vp.data::<Inode>().ok_or(Errno::ESTALE)
    }

    /// The inode behind a vnode of this mount, as its own reference.
    pub(crate) fn inode_arc_of(&self, vp: &Vnode) -> VfsResult<Arc<Inode>> {
        if vp.mount_id() != self.mnt.id() {
            return Err(Errno::EXDEV);
        }
        vp.data_arc::<Inode>().ok_or(Errno::ESTALE)
    }

    /// The inode and entries of a directory vnode.
    pub(crate) fn dir_of<'a>(
        &self,
        vp: &'a Vnode,
    ) -> VfsResult<(&'a Inode, &'a RwLock<Directory>)> {
        let inode = self.inode_of(vp)?;
        let dir = inode.dir().ok_or(Errno::ENOTDIR)?;
        Ok((inode, dir))
    }

    /// The (possibly new) vnode for an inode.
    pub(crate) fn vnode(&self, inode: &Arc<Inode>) -> VfsResult<VnodeRef> {
        let data = inode.clone();
        let kind = inode.kind;
        Ok(self
            .layer
            .get(&self.mnt, inode.ino, move || Ok((kind, data)))?)
    }

    /// The vnode for a linked inode number.
    pub(crate) fn vnode_by_ino(&self, ino: Ino) -> VfsResult<VnodeRef> {
        let inode = self.table.get(ino).ok_or(Errno::ENOENT)?;
        self.vnode(&inode)
    }

    /// The last link of `inode` is gone: drop it from the table and let
    /// its data go as soon as no vnode user remains. If a vnode caches it,
    /// taking and dropping a use runs `inactive` when ours was the last;
    /// otherwise another user's release will.
    pub(crate) fn forget_unlinked(&self, inode: &Arc<Inode>) {
        self.table.remove(inode.ino);
        if let Some(vp) = self.layer.lookup_cached(&self.mnt, inode.ino) {
            if inode.kind == VType::Dir {
                self.layer.namecache().purge_dir(&vp);
            }
            drop(vp);
        }
    }
}
