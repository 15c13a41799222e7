//! `PassthroughFs`: construction, the vnode binding, and getting a node's
//! fd (cached, or reopened through its handle or its parent).
//!
//! # Lookup
//! A lookup opens the name `O_PATH | O_NOFOLLOW` beneath the directory's
//! fd (`sys::open_beneath`), reads its (dev, ino) and handle, and asks the
//! vnode layer for node id `inodes.id_of(dev, ino, generation)`: single
//! flight, so racing lookups of one file build one node. The fresh fd
//! becomes the node's cached fd (or is offered to an existing node that
//! has none).
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

use crate::creds::AsCaller;
use crate::fdpool::{Fd, FdPool, Reservation};
use crate::handle::{Handle, HandleOpener};
use crate::inodes::InodeMap;
use crate::node::{Ident, Node, Way};
use crate::open::OpenTable;
use crate::sys;
use std::ffi::CStr;
use std::os::fd::OwnedFd;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use uvfs_vfs::{
    mode_to_vtype, Attr, Ctx, Errno, Ino, Mount, Timespec, VType, VfsResult, VnodeLayer, VnodeRef,
};
use uvfs_vnode::{FsHooks, Vnode};

/// Deepest chain of fallback reopens (parent of parent of ...).
const MAX_REOPEN_DEPTH: usize = 4096;

/// How to build a passthrough mount.
#[derive(Clone, Debug, Default)]
pub struct PassthroughConfig {
    /// Most fds open at once (cached, borrowed, open files); `None`: three
    /// quarters of `RLIMIT_NOFILE` (raised to its hard limit first). More
    /// than `FdPool::max_budget` allows is refused (`InvalidInput`).
    pub fd_budget: Option<usize>,
    /// Never use file handles (every node reopens through its parent).
    pub no_handles: bool,
    /// No directory readahead (`prefetch.rs`): a lone walker's listings
    /// wait for every backing lookup.
    pub no_dir_readahead: bool,
    /// Read files and list directories of the source with `O_NOATIME`, so
    /// reading through the mount leaves the source's access times alone:
    /// for a read-only mount, whose source must not change at all.
    /// (Reading a symlink still moves its atime: `readlinkat` has no such
    /// flag.) Also for a mount made `noatime`: the kernel leaves a FUSE
    /// file's atime to its server.
    pub no_atime: bool,
    /// Watch the source for changes made behind the mount's back and
    /// report them (`FileSystem::watch`), so the front end may cache for
    /// long (`watch/mod.rs`). Off where the kernel refuses; see
    /// `PassthroughFs::watch_status`.
    pub watch: bool,
    /// The front end's timeouts are the user's choice: never cap them,
    /// not even for what the watcher cannot see.
    pub keep_timeouts: bool,
    /// List directories of the source with `O_NOATIME` (`nodiratime`).
    pub no_diratime: bool,
}

/// `own_dev` before the mount is known (no device has this number).
const NO_DEV: u64 = u64::MAX;

/// Counters of a passthrough mount.
#[derive(Default, Debug)]
pub struct PtCounters {
    /// Node fds reopened through a file handle.
    pub reopen_handle: AtomicU64,
    /// Node fds reopened through the parent and name.
    pub reopen_fallback: AtomicU64,
    /// Reopens that found the file gone or replaced (`ESTALE`).
    pub stale: AtomicU64,
    /// Nodes rebound to a new file behind their inode number.
    pub rebinds: AtomicU64,
    /// New files given an alias id: their inode number's old file was
    /// still remembered by the kernel (`inodes.rs`).
    pub aliases: AtomicU64,
    /// Lookups that reached the backing file system.
    pub lookups: AtomicU64,
    /// Lookups of a cached node's file answered from their statx alone
    /// (no handle taken, nothing opened).
    pub revalidated: AtomicU64,
    /// Nodes found again by a remembered handle (`vget_id`).
    pub vget_reopened: AtomicU64,
    /// Attributes of nodes without a cached fd read through a handle
    /// opened for that call only.
    pub stat_by_handle: AtomicU64,
    /// Lookups refused with ELOOP: the name led into this mount itself.
    pub own_mount: AtomicU64,
    /// Cached fds dropped because their file lost its last name.
    pub unlinked: AtomicU64,
    /// Removed large files whose last close was left to the closing
    /// thread (`closer.rs`).
    pub closes_deferred: AtomicU64,
}

/// How the source root's device answers `RWF_NOWAIT` reads
/// (`PassthroughFs::nowait`): takes them (or not tried yet), refuses them
/// but keeps files in memory (read at once), refuses them (every read
/// may wait).
pub(crate) const NOWAIT_UNKNOWN: u8 = 0;
pub(crate) const NOWAIT_MEMORY: u8 = 1;
pub(crate) const NOWAIT_NONE: u8 = 2;

/// A directory of the host served through the vnode layer.
pub struct PassthroughFs {
    pub(crate) layer: Arc<VnodeLayer>,
    pub(crate) mnt: Arc<Mount>,
    pub(crate) pool: Arc<FdPool>,
    pub(crate) handles: HandleOpener,
    pub(crate) inodes: Arc<InodeMap>,
    /// How the root's device answers `RWF_NOWAIT` reads (`io.rs`).
    pub(crate) nowait: std::sync::atomic::AtomicU8,
    pub(crate) root: Arc<Node>,
    pub(crate) opens: OpenTable,
    /// POSIX record locks held through the mount (`locks.rs`).
    pub(crate) posix_locks: crate::lock_owners::PosixLocks,
    /// READDIRPLUS requests in progress and their overlaps (`dir.rs`
    /// probes in parallel only when one has been alone for a while).
    pub(crate) plus_load: crate::plus_load::PlusLoad,
    /// Directory readahead for a lone walker (`prefetch.rs`).
    pub(crate) prefetch: Option<crate::prefetch::Prefetcher>,
    /// `O_NOATIME` if reads must leave atimes alone (`no_atime`), else 0.
    pub(crate) read_flags: libc::c_int,
    /// The same for directories (`no_atime` or `no_diratime`).
    pub(crate) dir_read_flags: libc::c_int,
    /// The device of the mount serving this file system ([`NO_DEV`] until told,
    /// `FileSystem::mounted_as`): a backing entry on it is the mount
    /// itself, reached through the source (a bind mount of a directory
    /// above the mountpoint). Following it, the server's next request on
    /// it would wait on the server.
    pub(crate) own_dev: AtomicU64,
    /// The host-change watcher (`watch/mod.rs`).
    pub(crate) watch: crate::watch::Watch,
    /// `PassthroughConfig::keep_timeouts`.
    keep_timeouts: bool,
    /// Counters.
    pub counters: PtCounters,
    /// Handles of recycled nodes, for [`PassthroughFs::vget_id`].
    pub(crate) remembered: Arc<crate::remembered::Remembered>,
    /// Nodes a predecessor handed over (`handover`), set once by
    /// `restore` before the file system serves.
    /// Typed (`KeptNodes`) by `handover`, which owns its layout; erased
    /// here so that this module does not depend on that one.
    pub(crate) kept: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>,
    /// Node ids are resolved from the source with no memory (`by_ino.rs`).
    by_ino: bool,
    /// The budget slot of `handles`' mount fd (a backing fd like any
    /// other), held while handles are in use.
    _mount_fd_slot: Option<Reservation>,
}

impl std::fmt::Debug for PassthroughFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassthroughFs")
            .field("mnt", &self.mnt.id())
            .field("root", &self.root)
            .finish()
    }
}

/// The vnode layer's callbacks: a recycled vnode gives its fd back and
/// leaves its handle to [`Remembered`](crate::remembered::Remembered),
/// for a file handle of the mount that names it later.
struct Hooks {
    remembered: Arc<crate::remembered::Remembered>,
}

impl FsHooks for Hooks {
    fn reclaim(&self, vp: &Vnode) {
        if let Some(node) = vp.data::<Arc<Node>>() {
            node.drop_fd();
            if let Some(h) = node.ident().handle() {
                self.remembered.remember(node.id, h.clone());
            }
        }
    }
}

/// The `STATX_ATTR_*` properties of a source file that are the file's own
/// and so hold through the mount: compressed, immutable, append-only,
/// no-dump, encrypted, verity. Not those about where the source sits or
/// what its file system can do (mount root, automount, DAX, atomic
/// writes), which the mount does not share.
const SOURCE_STATX_ATTRS: u64 = (libc::STATX_ATTR_COMPRESSED
    | libc::STATX_ATTR_IMMUTABLE
    | libc::STATX_ATTR_APPEND
    | libc::STATX_ATTR_NODUMP
    | libc::STATX_ATTR_ENCRYPTED
    | libc::STATX_ATTR_VERITY) as u64;

impl PassthroughFs {
    /// Serves the directory `source` on `layer`.
    ///
    /// Sets the process umask to 0: the kernel has already applied the
    /// caller's umask to every mode it sends.
    pub fn new(
        layer: Arc<VnodeLayer>,
        source: &Path,
        cfg: PassthroughConfig,
    ) -> std::io::Result<Arc<PassthroughFs>> {
        // Start READDIRPLUS's probe pool (rayon's global one) here, before
        // any request thread runs: threads inherit their creator's CPU
        // affinity, and started from an io_uring queue thread (pinned to its
        // CPU) every worker would share that one CPU, and a cold walk
        // through io_uring would run slower than through /dev/fuse
        // (docs/design/passthrough.md).
        let _ = rayon::current_num_threads();
        let nofile = sys::raise_nofile_limit();
        let budget = cfg
            .fd_budget
            .unwrap_or_else(|| FdPool::default_budget(nofile));
        if budget > FdPool::max_budget(nofile) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "fd budget {budget} does not fit the fd limit: RLIMIT_NOFILE is {nofile} \
                     (hard), so at most {} (the rest is kept for FUSE channels and the like)",
                    FdPool::max_budget(nofile)
                ),
            ));
        }
        let pool = FdPool::new(budget);
        let path = sys::cstr(source.as_os_str().as_encoded_bytes())
            .map_err(|e| std::io::Error::from_raw_os_error(e.raw()))?;
        let io = |e: Errno| std::io::Error::from_raw_os_error(e.raw());
        // The root as a real directory fd (open_by_handle_at's mount fd)
        // and as the root node's pinned O_PATH fd.
        let dir =
            sys::openat(rustix::fs::CWD, &path, libc::O_RDONLY | libc::O_DIRECTORY).map_err(io)?;
        let root_fd =
            sys::openat(rustix::fs::CWD, &path, libc::O_PATH | libc::O_DIRECTORY).map_err(io)?;
        sys::note_source(dir.as_fd());
        let st = sys::statx_fd(root_fd.as_fd()).map_err(io)?;
        let mount_fd_slot = pool.reserve().map_err(io)?;
        let handles = if cfg.no_handles {
            HandleOpener::disabled()
        } else {
            HandleOpener::new(dir)
        };
        let mount_fd_slot = handles.enabled().then_some(mount_fd_slot);
        let by_ino = handles.enabled() && {
            let h = Handle::of_fd(root_fd.as_fd()).ok();
            crate::by_ino::resolvable(root_fd.as_fd(), &st, h.as_ref())
        };
        let dev = sys::stx_dev(&st);
        let inodes = Arc::new(InodeMap::new(dev));
        let handle = Handle::of_fd(root_fd.as_fd())
            .ok()
            .filter(|h| handles.accepts(h));
        let root = Arc::new(Node::new(
            inodes.node_id(dev, st.stx_ino),
            dev,
            st.stx_ino,
            Ident {
                kind: VType::Dir,
                way: handle.map_or(Way::FdOnly, Way::Handle),
            },
            true,
        ));
        let remembered = Arc::new(crate::remembered::Remembered::new(
            crate::remembered::CAPACITY,
        ));
        let mnt = layer.mount(
            "passthrough",
            Arc::new(Hooks {
                remembered: remembered.clone(),
            }),
        );
        let watch = if cfg.watch {
            crate::watch::Watch::new(
                root_fd.as_fd(),
                dev,
                st.stx_ino,
                layer.clone(),
                mnt.clone(),
                inodes.clone(),
            )
        } else {
            crate::watch::Watch::off("host changes are not watched (--no-watch)")
        };
        let fd = pool.reserve().map_err(io)?.into_fd(root_fd);
        root.install(Arc::new(fd));
        rustix::process::umask(rustix::fs::Mode::empty());
        // Started here, like the probe pool, so it inherits no request
        // thread's CPU pin.
        let prefetch = if cfg.no_dir_readahead {
            None
        } else {
            crate::prefetch::Prefetcher::start(pool.clone())
        };
        Ok(Arc::new(PassthroughFs {
            layer,
            mnt,
            pool,
            handles,
            inodes,
            nowait: std::sync::atomic::AtomicU8::new(NOWAIT_UNKNOWN),
            root,
            opens: OpenTable::default(),
            posix_locks: Default::default(),
            plus_load: Default::default(),
            prefetch,
            read_flags: if cfg.no_atime { libc::O_NOATIME } else { 0 },
            dir_read_flags: if cfg.no_atime || cfg.no_diratime {
                libc::O_NOATIME
            } else {
                0
            },
            own_dev: AtomicU64::new(NO_DEV),
            watch,
            keep_timeouts: cfg.keep_timeouts,
            counters: PtCounters::default(),
            remembered,
            kept: std::sync::OnceLock::new(),
            by_ino,
            _mount_fd_slot: mount_fd_slot,
        }))
    }

    /// The vnode layer this mount lives on.
    pub fn layer(&self) -> &Arc<VnodeLayer> {
        &self.layer
    }

    /// The fd pool (budget, use, counters).
    pub fn pool(&self) -> &Arc<FdPool> {
        &self.pool
    }

    /// Whether the host changes of `source` can be watched (as
    /// `PassthroughConfig::watch` would), or why not, without serving it:
    /// for choosing timeouts and saying why before a server starts.
    pub fn probe_watch(source: &Path) -> Result<(), String> {
        let path = sys::cstr(source.as_os_str().as_encoded_bytes())
            .map_err(|_| "the source path holds a NUL byte".to_string())?;
        let fd = sys::openat(rustix::fs::CWD, &path, libc::O_PATH | libc::O_DIRECTORY)
            .map_err(|e| format!("{}: {e:?}", source.display()))?;
        let st = sys::statx_fd(fd.as_fd()).map_err(|e| format!("{e:?}"))?;
        crate::watch::setup(fd.as_fd(), st.stx_ino).map(drop)
    }

    /// Whether the host-change watcher is set up (it reports once the
    /// front end starts it): the front end may then cache for long.
    pub fn watching(&self) -> bool {
        self.watch.enabled()
    }

    /// The watcher's state and counters, and why there is none.
    pub fn watch_status(&self) -> uvfs_vfs::WatchStatus {
        self.watch.status()
    }

    /// `FileSystem::cache_limit`: what the watcher cannot see (another
    /// file system inside the source, everything once it stopped) is
    /// cached at most as long as without a watcher.
    pub(crate) fn node_cache_limit(&self, vp: &Vnode) -> Option<std::time::Duration> {
        if self.keep_timeouts || !self.watch.enabled() {
            return None;
        }
        let dev = vp.data::<Arc<Node>>().map_or(u64::MAX, |n| n.dev());
        self.watch.cache_limit(dev)
    }

    /// Whether nodes are reopened through file handles.
    pub fn uses_handles(&self) -> bool {
        self.handles.enabled()
    }

    /// The node behind a vnode of this mount.
    pub(crate) fn node_of(&self, vp: &Vnode) -> VfsResult<Arc<Node>> {
        if vp.mount_id() != self.mnt.id() {
            return Err(Errno::EXDEV);
        }
        vp.data::<Arc<Node>>().cloned().ok_or(Errno::ESTALE)
    }

    /// The root's vnode.
    pub(crate) fn root_vnode(&self) -> VfsResult<VnodeRef> {
        let node = self.root.clone();
        Ok(self
            .layer
            .get(&self.mnt, node.id, move || Ok((VType::Dir, Box::new(node))))?)
    }

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
        let st = sys::statx_fd(fd.as_fd())?;
        if (sys::stx_dev(&st), st.stx_ino) != (node.dev(), node.ino)
            || mode_to_vtype(u32::from(st.stx_mode)) != Some(ident.kind)
        {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ESTALE);
        }
        Ok(self.cache_fd(node, Arc::new(fd)))
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
        if !self.by_ino {
            return Err(Errno::ESTALE);
        }
        let h = crate::by_ino::handle(id, self.handles.mount_id()).ok_or(Errno::ESTALE)?;
        self.vget_by(id, &h, true)
    }

    /// Whether node ids resolve from the source alone (`by_ino.rs`).
    pub fn resolves_ids_by_itself(&self) -> bool {
        self.by_ino
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
                Ok((kind, Box::new(node)))
            })?;
            if let Some(node) = fresh {
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

    /// Runs a creating operation as the caller in directory `dir`, then
    /// looks the new name up.
    pub(crate) fn make_at(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        op: impl FnOnce(BorrowedFd<'_>, &CStr) -> VfsResult<()>,
    ) -> VfsResult<VnodeRef> {
        uvfs_vfs::check_new_name(name)?;
        let dnode = self.node_of(dir)?;
        let cname = sys::cstr(name)?;
        let dfd = self.fd_of(&dnode)?;
        {
            let _as = AsCaller::switch(ctx)?;
            op(dfd.as_fd(), &cname)?;
        }
        drop(dfd);
        Ok(self.lookup_at(&dnode, name)?.0)
    }

    /// The mode to create a file with in the directory `dfd`, given the
    /// caller's `umask` (`Ctx::umask`): the umask applies unless the
    /// directory has a default ACL, which the backing file system applies
    /// instead (our own umask is 0). One getxattr, only when the umask
    /// would clear a bit.
    pub(crate) fn creation_mode(&self, dfd: BorrowedFd<'_>, mode: u32, umask: u32) -> u32 {
        if mode & umask & 0o777 == 0 {
            return mode;
        }
        let p = sys::proc_path(dfd);
        let n = rustix::fs::getxattr_query(p.as_c_str(), c"system.posix_acl_default");
        if n.is_ok_and(|n| n > 0) {
            mode
        } else {
            mode & !(umask & 0o777)
        }
    }

    /// Attributes from a statx of the node's file.
    pub(crate) fn attr_of(&self, node: &Node, st: &crate::sys::Statx) -> Attr {
        let ts = |t: &rustix::fs::StatxTimestamp| Timespec::new(t.tv_sec, t.tv_nsec);
        Attr {
            ino: node.id,
            kind: mode_to_vtype(u32::from(st.stx_mode)).unwrap_or(VType::Reg),
            perm: st.stx_mode & 0o7777,
            nlink: st.stx_nlink,
            uid: st.stx_uid,
            gid: st.stx_gid,
            size: st.stx_size,
            blocks: st.stx_blocks,
            blksize: st.stx_blksize,
            rdev: libc::makedev(st.stx_rdev_major, st.stx_rdev_minor),
            atime: ts(&st.stx_atime),
            mtime: ts(&st.stx_mtime),
            ctime: ts(&st.stx_ctime),
            btime: (st.stx_mask & libc::STATX_BTIME != 0).then(|| ts(&st.stx_btime)),
            attributes: st.stx_attributes.bits() & SOURCE_STATX_ATTRS,
            attributes_mask: st.stx_attributes_mask.bits() & SOURCE_STATX_ATTRS,
        }
    }

    /// The node's current attributes. A file removed behind the server's
    /// back (no links left, and not open through the mount) is `ESTALE`,
    /// not a stale answer: the kernel then looks the name up again. One
    /// removed through the mount while not a regular file may be open in
    /// the kernel without our knowing (`Node::set_orphan`): it answers.
    pub(crate) fn getattr_node(&self, node: &Arc<Node>) -> VfsResult<Attr> {
        let st = match node.cached_fd() {
            Some(fd) => sys::statx_fd(fd.as_fd())?,
            None => self.statx_uncached(node)?,
        };
        if st.stx_nlink == 0 && node.open_count() == 0 && !node.is_orphan() {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ESTALE);
        }
        Ok(self.attr_of(node, &st))
    }

    /// A statx of a node with no cached fd. Through its handle the fd is
    /// opened for this call only: a `stat` is no sign the file will be
    /// used, and caching the fd would make a walk of more files than the
    /// budget turn the pool over once per file. Fallback nodes reopen
    /// (and cache) through their parent as any operation would.
    fn statx_uncached(&self, node: &Arc<Node>) -> VfsResult<crate::sys::Statx> {
        let ident = node.ident();
        let Some(h) = ident.handle() else {
            return sys::statx_fd(self.fd_of(node)?.as_fd());
        };
        let res = self.pool.reserve()?;
        let fd = res.into_fd(
            self.handles
                .open(h, libc::O_PATH)
                .map_err(|e| self.stale(e))?,
        );
        self.counters.stat_by_handle.fetch_add(1, Ordering::Relaxed);
        let st = sys::statx_fd(fd.as_fd())?;
        if (sys::stx_dev(&st), st.stx_ino) != (node.dev(), node.ino) {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ESTALE);
        }
        Ok(st)
    }

    /// A handle that fails to open: the file is gone (`ESTALE`). ENOMEM
    /// too: when the kernel decodes the handle but finds no acceptable
    /// dentry for it (an inode unlinked and being evicted),
    /// `do_handle_to_path` turns the NULL dentry into -ENOMEM.
    fn stale(&self, e: Errno) -> Errno {
        if e == Errno::ESTALE || e == Errno::ENOENT || e == Errno::ENOMEM {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            Errno::ESTALE
        } else {
            e
        }
    }

    /// Gives up the cached fd of every idle node (tests, diagnostics).
    pub fn drop_idle_fds(&self) -> usize {
        self.pool.evict_all()
    }

    /// The node id a backing file would get (tests).
    pub fn node_id_of(&self, dev: u64, ino: u64) -> Ino {
        self.inodes.node_id(dev, ino)
    }

    /// Keeps a freshly created fd as the O_PATH fd of a new node: opens
    /// the inode behind `fd` again as `O_PATH`.
    pub(crate) fn path_fd_of(&self, fd: &OwnedFd) -> VfsResult<Fd> {
        let res = self.pool.reserve()?;
        Ok(res.into_fd(sys::reopen(fd.as_fd(), libc::O_PATH)?))
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
