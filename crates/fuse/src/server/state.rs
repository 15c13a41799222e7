//! The state every request loop shares ([`Inner`]) and the questions a
//! request asks of it: how long the kernel may cache a name or attributes,
//! how an open file's I/O is served, which lock target a handle names.
//! Kept apart from the handlers so that the subsystems that read it
//! (`evict.rs`, `stats.rs`, `control.rs`) see state, not request code.

use super::{writes, ChangeCounters, RequestCounters, NO_HANDLE, ON_URING_QUEUE};
use crate::handles::{HandleTable, OpenFile};
use crate::nodes::NodeTable;
use fuser::{FopenFlags, INodeNo};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use uvfs_vfs::{Ctx, Errno, Fh, FileSystem, RenameFlags, VType, VfsResult, VnodeLayer, VnodeRef};

/// Cache lifetimes the kernel is told.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// How long a name -> node mapping (and a negative one) may be cached.
    pub entry: Duration,
    /// How long attributes may be cached.
    pub attr: Duration,
}

/// Everything the request loops and the control socket share.
pub struct Inner {
    /// The file system served.
    pub fs: Arc<dyn FileSystem>,
    /// Its vnode layer.
    pub layer: Arc<VnodeLayer>,
    /// Kernel lookup counts as holds.
    pub nodes: NodeTable,
    /// Open files and directories.
    pub handles: HandleTable,
    /// Cache lifetimes.
    pub timeouts: Timeouts,
    /// The session's notifier, once it runs: for the few changes the
    /// kernel makes through us without dropping what it cached
    /// (`fileattr.rs`, a file's first writable open with kernel I/O).
    pub(crate) notifier: std::sync::OnceLock<fuser::Notifier>,
    /// Where `forget_unwritten` sends its ranges (its thread, made on
    /// the first).
    pub(crate) unwritten: std::sync::OnceLock<std::sync::mpsc::Sender<(u64, i64, i64)>>,
    /// Tells the supervisor, if any, that this server leaves on purpose
    /// (it then ends instead of starting another).
    pub(crate) bye: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Counters.
    pub counters: RequestCounters,
    /// Kernel-forget of cold nodes over the vnode limit.
    pub evict: crate::evict::Evictor,
    /// Directories are to be opened through us (OPENDIR/RELEASEDIR per
    /// open) even where the kernel could open them alone.
    pub server_opendir: bool,
    /// The kernel agreed to open directories without asking us
    /// (FUSE_NO_OPENDIR_SUPPORT): OPENDIR is answered ENOSYS once, and
    /// READDIR then arrives with handle 0.
    pub no_opendir: std::sync::atomic::AtomicBool,
    /// Lock requests waiting for a conflicting lock to go (`lockwait.rs`).
    pub(crate) locks: crate::lockwait::LockWaiter,
    /// Threads for requests that may wait for a disk (`offload.rs`).
    pub(crate) offload: crate::offload::Offload,
    /// Whether WRITEs waited lately (`write_stall.rs`).
    pub(crate) write_stalls: crate::write_stall::WriteStalls,
    /// Ask the kernel for FUSE over io_uring (one request queue per CPU).
    pub uring: std::sync::atomic::AtomicBool,
    /// The kernel agreed to it.
    pub uring_on: std::sync::atomic::AtomicBool,
    /// Ask the kernel to allow idmapped mounts of this file system
    /// (`FUSE_ALLOW_IDMAP`; `init.rs` says what it changes).
    pub idmap: std::sync::atomic::AtomicBool,
    /// The kernel agreed to it: requests that make no inode carry
    /// `Ctx::UNKNOWN_ID` for the caller's ids.
    pub idmap_on: std::sync::atomic::AtomicBool,
    /// Served read-only: requests that would change the file system are
    /// answered EROFS (`Server::changing`).
    pub read_only: bool,
    /// Open files whose I/O the kernel does on their backing files.
    pub backings: crate::backing::Backings,
    /// Listed directories' attributes fetched again (`refresh.rs`).
    pub refresh: crate::refresh::Refresher,
    /// Host changes turned into notifications (`changes.rs`).
    pub changes: ChangeCounters,
    /// Entry replies under way, for the watcher's races (`changes.rs`).
    pub(crate) entry_race: crate::entry_race::EntryRace,
    /// Changes were lost and the kernel could not be made to drop every
    /// cached name: nothing is cached for long any more.
    pub(crate) trust_lost: std::sync::atomic::AtomicBool,
    /// Servers of this mount before this one, and what a successor
    /// needs (`upgrade/`).
    pub lineage: crate::lineage::Lineage,
    /// The crash journal, if a supervisor keeps one (`supervise/`).
    pub(crate) journal: std::sync::OnceLock<Arc<crate::journal::Journal>>,
}

/// What nothing is cached for longer than once a watcher lost changes the
/// kernel could not be made to forget: a mount's short default.
const LOST_TRUST_TTL: Duration = Duration::from_secs(1);

impl Inner {
    /// How the kernel is to treat an open file. Its page cache stays
    /// valid across opens: changes pass through it (those made behind a
    /// passthrough's back show through FUSE_AUTO_INVAL_DATA). FLUSH is
    /// skipped where the file system has no use for it (see
    /// `FileSystem::needs_flush`).
    pub(super) fn fopen_flags(&self) -> FopenFlags {
        let mut f = FopenFlags::FOPEN_KEEP_CACHE;
        if !self.fs.needs_flush() && !self.fs.forwards_locks() {
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        f
    }

    /// `fopen_flags` for an OPEN of `vp`: without `FOPEN_KEEP_CACHE` if a
    /// read now would move its atime (`FileSystem::read_moves_atime`),
    /// so that the kernel drops the cached pages and the first read
    /// reaches the file system, which moves the atime; a read served from
    /// the page cache would leave it where it was.
    pub(super) fn fopen_flags_for(&self, vp: &VnodeRef) -> FopenFlags {
        let f = self.fopen_flags();
        if self.fs.read_moves_atime(vp) {
            f - FopenFlags::FOPEN_KEEP_CACHE
        } else {
            f
        }
    }

    /// Makes the kernel drop node `node`'s cached attributes (not its
    /// pages): `FUSE_NOTIFY_INVAL_INODE` with a negative offset. Sent
    /// before the reply to the open that needs it; the kernel applies no
    /// attribute reply that began before it.
    pub(super) fn forget_attrs(&self, node: u64) {
        if let Some(n) = self.notifier.get() {
            // ENOENT: the kernel holds nothing of the node to drop.
            let _ = n.inval_inode(INodeNo(node), -1, 0);
        }
    }

    /// Makes the kernel drop the pages of `len` bytes at `offset` of
    /// node `node` that it wrote back from its cache and this server
    /// refused (a mapping's stores into a full memfs: `msync` says
    /// ENOSPC, and the pages, still cached, would show data that was
    /// never stored until evicted). Sent from a thread of
    /// its own after the reply: the kernel's invalidation waits for the
    /// writeback of those pages, which waits for the reply.
    pub(crate) fn forget_unwritten(&self, node: u64, offset: u64, len: u64) {
        let Some(n) = self.notifier.get() else { return };
        let tx = self.unwritten.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<(u64, i64, i64)>();
            let n = n.clone();
            let spawned = std::thread::Builder::new()
                .name("uvfs-unwritten".into())
                .spawn(move || {
                    for (node, offset, len) in rx {
                        // ENOENT: the kernel holds nothing of it now.
                        let _ = n.inval_inode(INodeNo(node), offset, len);
                    }
                });
            if let Err(e) = spawned {
                log::warn!("refused writes' pages stay cached: no thread for them: {e}");
            }
            tx
        });
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let _ = tx.send((node, clamp(offset), clamp(len.max(1))));
    }

    /// Registers an open file of node `node` and decides how its I/O is
    /// served (`backing.rs`): Some(backing id) if by the kernel on the
    /// backing file, which `register` registers on a node's first open.
    /// `kernel_holds`: whether the kernel may hold attributes of the node
    /// (false for a CREATE's new node: nothing there to invalidate).
    pub(super) fn open_file(
        &self,
        node: u64,
        vp: VnodeRef,
        fh: Fh,
        flags: i32,
        kernel_holds: bool,
        register: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> std::io::Result<fuser::BackingId>,
    ) -> (u64, Option<Arc<fuser::BackingId>>) {
        let mut f = OpenFile {
            vp,
            fh,
            writable: writes(flags),
            backing_node: None,
            kernel_writer: false,
            flags,
            backing_id: None,
        };
        let mut backing = None;
        if self.backings.enabled() && f.vp.vtype() == VType::Reg {
            let mode = self.backings.attach(node, || {
                let file = self.fs.backing_file(&f.vp, fh)?;
                Some(register(file.as_fd()))
            });
            f.backing_node = Some(node);
            if let crate::backing::Mode::Kernel(id) = mode {
                f.backing_id = Some(id.raw());
                backing = Some(id);
                if f.writable {
                    f.kernel_writer = true;
                    // The backing file's close is told where every change
                    // of the file is (a watcher runs).
                    let told = self.fs.cache_limit(&f.vp).is_none();
                    if self.backings.writers.opened(node, told) && kernel_holds {
                        self.forget_attrs(node);
                    }
                }
            }
        }
        (self.handles.insert_file(f), backing)
    }

    /// `fopen_flags` for a file the kernel reads and writes on its backing
    /// file: the kernel refuses (EIO to the caller) any flag about its own
    /// page cache, which such a file does not use.
    pub(super) fn kernel_io_flags(&self) -> FopenFlags {
        self.fopen_flags() & FopenFlags::FOPEN_NOFLUSH
    }

    /// The open file a GETLK or SETLK is about. `ENOSYS` where the kernel
    /// keeps locks itself (the file system does not). A request naming no
    /// handle (what a directory the kernel opened by itself would carry) is
    /// refused (`ENOLCK`): its close is never told to us, so the lock could
    /// never be dropped. Defensive: the kernel keeps directory locks itself
    /// (FUSE's directory operations have no lock methods), and every open
    /// file has a handle.
    pub(super) fn lock_target(&self, fh: u64) -> VfsResult<OpenFile> {
        if !self.fs.forwards_locks() {
            return Err(Errno::ENOSYS);
        }
        if fh == NO_HANDLE {
            return Err(Errno::ENOLCK);
        }
        self.handles.get(fh)
    }

    /// Before a request that may hand the kernel new nodes: wait (bounded)
    /// while the mount is past its vnode limit's throttle mark
    /// (`evict.rs`, "Keeping up"). Only on io_uring queue threads: the
    /// FORGETs the wait is for come through the /dev/fuse loops, so those
    /// must never wait (and their own round trips pace a walk enough).
    pub(super) fn throttle_new_nodes(&self) {
        if ON_URING_QUEUE.with(|u| *u) {
            self.evict
                .throttle(self.fs.mount(), self.layer.config().limit);
        }
    }

    /// After a rename through the mount: a directory the refresher knows
    /// by its old name goes by the new one (and, exchanged, the other way
    /// round). The kernel moves its dentries alike.
    pub(super) fn renamed(
        &self,
        c: &Ctx,
        (from_id, from, from_name): (u64, &VnodeRef, &[u8]),
        (to_id, to, to_name): (u64, &VnodeRef, &[u8]),
        flags: RenameFlags,
    ) {
        if !self.refresh.running() {
            return;
        }
        let moved = |dir: &VnodeRef, dir_id: u64, n: &[u8]| {
            if let Ok(vp) = self.fs.lookup(c, dir, n) {
                if vp.vtype() == VType::Dir {
                    let id = self.nodes.node_id(vp.ino());
                    self.refresh.names.moved(id, dir_id, n);
                }
            }
        };
        moved(to, to_id, to_name);
        if flags.exchange() {
            moved(from, from_id, from_name);
        }
    }

    /// Directory node `id` handed to the kernel as `name` in `parent`:
    /// the refresher's path to it (`refresh.rs`).
    pub(super) fn dir_handed_out(&self, id: u64, parent: u64, name: &[u8]) {
        if self.refresh.running() {
            self.refresh.names.handed_out(id, parent, name);
        }
    }

    pub(super) fn note_new(&self, id: u64, parent: u64, name: &[u8], dir: bool) {
        let count = self.fs.mount().vnode_count();
        self.evict
            .note(id, parent, name, dir, count, self.layer.config().limit);
    }

    /// How long the kernel may cache `vp`'s name (as an entry of its
    /// directory; for a negative entry, `vp` is the directory) where one
    /// timeout goes for the name and the attributes (READDIRPLUS): capped
    /// as the attributes are.
    pub(crate) fn entry_ttl(&self, vp: &VnodeRef) -> Duration {
        self.capped(vp, self.timeouts.entry)
    }

    /// How long the kernel may cache `vp`'s name where the attributes
    /// have their own timeout ([`Inner::attr_ttl`]): a write to the
    /// backing file moves attributes, never names, so only what the file
    /// system cannot report caps it.
    pub(crate) fn name_ttl(&self, vp: &VnodeRef) -> Duration {
        self.outside_cap(vp, self.timeouts.entry)
    }

    /// How long the kernel may cache `attr`, `vp`'s attributes as now
    /// answered. A node the kernel may be writing on its backing file (open
    /// for writing, or mapped past its last close) gets no time
    /// (`backing::Writers`), unless `attr` says it is empty: a mapped
    /// write cannot reach an empty file (there is no page to dirty), and
    /// whatever makes it longer goes through the kernel, which then drops
    /// or replaces these attributes (a WRITE, FALLOCATE or
    /// COPY_FILE_RANGE marks size and times stale, a SETATTR's reply
    /// replaces them) or is a change on the host the watcher reports. So
    /// the permission check of `open` right after a CREATE needs no
    /// GETATTR of the file it made.
    pub(crate) fn attr_ttl(&self, vp: &VnodeRef, attr: &uvfs_vfs::Attr) -> Duration {
        if attr.size == 0 {
            self.outside_cap(vp, self.timeouts.attr)
        } else {
            self.capped(vp, self.timeouts.attr)
        }
    }

    /// `ttl`, capped where the file system cannot report changes of `vp`
    /// (`FileSystem::cache_limit`), changes were lost, or the kernel
    /// writes `vp`'s backing file where neither it nor we see the
    /// attributes move (`backing::Writers`).
    pub(super) fn capped(&self, vp: &VnodeRef, ttl: Duration) -> Duration {
        if self.backings.writers.writing(self.nodes.node_id(vp.ino())) {
            return Duration::ZERO;
        }
        self.outside_cap(vp, ttl)
    }

    /// `ttl`, capped where the file system cannot report changes of `vp`
    /// or changes were lost.
    fn outside_cap(&self, vp: &VnodeRef, ttl: Duration) -> Duration {
        let cap = if self.trust_lost.load(Ordering::Relaxed) {
            Some(LOST_TRUST_TTL)
        } else {
            self.fs.cache_limit(vp)
        };
        cap.map_or(ttl, |c| ttl.min(c))
    }

    pub(super) fn with_attr(&self, vp: VnodeRef) -> VfsResult<(VnodeRef, uvfs_vfs::Attr)> {
        let a = self.fs.getattr(&vp)?;
        Ok((vp, a))
    }
}

impl crate::evict::Host for Inner {
    fn evictor(&self) -> &crate::evict::Evictor {
        &self.evict
    }

    fn mount(&self) -> &Arc<uvfs_vnode::Mount> {
        self.fs.mount()
    }

    fn limit(&self) -> usize {
        self.layer.config().limit
    }

    fn nodes(&self) -> &NodeTable {
        &self.nodes
    }
}
