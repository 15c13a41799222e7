//! `PassthroughFs`: its configuration, counters and construction; the
//! vnode binding. What it does with nodes is in the submodules:
//! `resolve` (a node's vnode by name, id or handle, and its fd),
//! `stat` (attributes from the source), `create` (creating as the caller).

mod create;
mod resolve;
mod stat;

pub(crate) use resolve::{probe, Probe};

use crate::fdpool::{FdPool, Reservation};
use crate::handle::{Handle, HandleOpener};
use crate::inodes::InodeMap;
use crate::node::{Ident, Node, Way};
use crate::open::OpenTable;
use crate::sys;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use uvfs_vfs::{Errno, Ino, Mount, VType, VfsResult, VnodeLayer, VnodeRef};
use uvfs_vnode::{FsHooks, Vnode};

/// Deepest chain of fallback reopens (parent of parent of ...).
const MAX_REOPEN_DEPTH: usize = 4096;

/// How to build a passthrough mount.
#[derive(Clone, Debug, Default)]
pub struct PassthroughConfig {
    /// Most fds open at once (cached, borrowed, open files); `None`:
    /// `FdPool::default_budget` of `RLIMIT_NOFILE` (raised to its hard
    /// limit first, and to `fs.nr_open` where allowed). More than
    /// `FdPool::max_budget` allows is refused (`InvalidInput`).
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
    /// file's atime to its server. Until `FileSystem::remounted` tells the
    /// mount's flags, which then decide (`atime.rs`).
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
    /// Files an OPEN opened straight by handle (the node had no cached
    /// fd to reopen).
    pub open_by_handle: AtomicU64,
    /// Node ids asked for that named, by inode number, a file outside
    /// the source (`by_ino.rs`): answered `ESTALE`.
    pub outside_source: AtomicU64,
    /// Lookups refused with ELOOP: the name led into this mount itself.
    pub own_mount: AtomicU64,
    /// Cached fds dropped because their file lost its last name.
    pub unlinked: AtomicU64,
    /// Requests that found the source directory itself removed on the
    /// host.
    pub source_removed: AtomicU64,
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
    pub(crate) opens: Arc<OpenTable>,
    /// POSIX record locks held through the mount (`locks.rs`).
    pub(crate) posix_locks: crate::lock_owners::PosixLocks,
    /// READDIRPLUS requests in progress and their overlaps (`dir.rs`
    /// probes in parallel only when one has been alone for a while).
    pub(crate) plus_load: crate::plus_load::PlusLoad,
    /// Directory readahead for a lone walker (`prefetch.rs`).
    pub(crate) prefetch: Option<crate::prefetch::Prefetcher>,
    /// Directories just listed with attributes (`uvfs_vfs::Relist`).
    pub(crate) relist: uvfs_vfs::Relist,
    /// The mount's atime rule and how it reaches the source: `O_NOATIME`,
    /// or opening on a clone of the source's mount (`atime.rs`).
    pub(crate) atime: crate::atime::Atime,
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
    /// Nodes whose identity changed since a live upgrade made their
    /// records ahead (`handover/save.rs`); `None` when none is under way.
    pub(crate) idents_changed: parking_lot::Mutex<Option<Vec<uvfs_vfs::Ino>>>,
    /// How node ids resolve from the source with no memory (`by_ino.rs`).
    by_ino: crate::by_ino::Scope,
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
        if let Some(node) = vp.data::<Node>() {
            node.drop_fd();
            if let Some(h) = node.ident().handle() {
                self.remembered.remember(node.id, h.clone());
            }
        }
    }
}

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
            .unwrap_or_else(|| FdPool::default_budget(nofile, sys::possible_cpus_bound()));
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
        if cfg.fd_budget.is_none() && budget < 1024 {
            log::warn!(
                "at most {budget} files can be open through the mount at once: the fd \
                 limit is {nofile} (raise the hard limit, ulimit -Hn or LimitNOFILE=)"
            );
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
        let by_ino = if handles.enabled() {
            let h = Handle::of_fd(root_fd.as_fd()).ok();
            crate::by_ino::scope(root_fd.as_fd(), &st, h.as_ref())
        } else {
            crate::by_ino::Scope::Off
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
                pool.clone(),
            )
        } else {
            crate::watch::Watch::off("host changes are not watched (--no-watch)")
        };
        let atime = crate::atime::Atime::new(root_fd.as_fd(), cfg.no_atime, cfg.no_diratime);
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
        // A reservation that finds every fd an open file's or in use has
        // idle open files give theirs back (`park.rs`) before it fails.
        let opens = Arc::new(OpenTable::default());
        pool.set_relief(opens.relief());
        Ok(Arc::new(PassthroughFs {
            layer,
            mnt,
            pool,
            handles,
            inodes,
            nowait: std::sync::atomic::AtomicU8::new(NOWAIT_UNKNOWN),
            root,
            opens,
            posix_locks: Default::default(),
            plus_load: Default::default(),
            relist: Default::default(),
            prefetch,
            atime,
            own_dev: AtomicU64::new(NO_DEV),
            watch,
            keep_timeouts: cfg.keep_timeouts,
            counters: PtCounters::default(),
            remembered,
            kept: std::sync::OnceLock::new(),
            idents_changed: Default::default(),
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
        let dev = vp.data::<Node>().map_or(u64::MAX, |n| n.dev());
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
        vp.data_arc::<Node>().ok_or(Errno::ESTALE)
    }

    /// The root's vnode.
    pub(crate) fn root_vnode(&self) -> VfsResult<VnodeRef> {
        let node = self.root.clone();
        Ok(self
            .layer
            .get(&self.mnt, node.id, move || Ok((VType::Dir, node)))?)
    }

    /// Gives up the cached fd of every idle node (tests, diagnostics).
    pub fn drop_idle_fds(&self) -> usize {
        self.pool.evict_all()
    }

    /// The node id a backing file would get (tests).
    pub fn node_id_of(&self, dev: u64, ino: u64) -> Ino {
        self.inodes.node_id(dev, ino)
    }
}
