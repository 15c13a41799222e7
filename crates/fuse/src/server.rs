//! The fuser `Filesystem` implementation: decodes each request, resolves
//! node ids and handles to vnodes, calls the VOP, encodes the reply.
//!
//! # Failure discipline
//! Nothing a request carries can panic the server: unknown or forgotten
//! node ids answer `ESTALE`, unknown handles `EBADF`, bad names and
//! offsets the VOP's errno. As a last line, every handler runs under
//! `catch_unwind`; a panic (a bug) answers `EIO` and the request loop goes
//! on (locks here are `parking_lot`'s, which do not poison).

use crate::convert::{dot_attr, errno, file_attr, file_type, set_time};
use crate::handles::{HandleTable, OpenFile};
use crate::nodes::NodeTable;
use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags as FuseRenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use uvfs_vfs::{
    Attr, Ctx, Errno, FallocMode, Fh, FileLock, FileSystem, Freeing, RenameFlags, SetAttr,
    Timespec, VType, VfsResult, VnodeLayer, VnodeRef, XattrFlags, O_KILL_SUIDGID,
};

/// Largest WRITE the server accepts (and tells the kernel).
pub const MAX_WRITE: u32 = 1 << 20;

/// Largest READ answered in full. The kernel asks for at most `max_pages`
/// pages (fuser derives them from `MAX_WRITE`; 16 MiB is fuser's largest
/// max_write), so this only bounds what a request may make the server
/// allocate, and keeps the reply's 32-bit length from overflowing: fuser
/// panics encoding a longer reply, outside any handler, and the request
/// loop dies (a READ of 4 GiB of a sparse file did that).
const MAX_READ: u32 = 16 << 20;

/// Cache lifetimes the kernel is told.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// How long a name -> node mapping (and a negative one) may be cached.
    pub entry: Duration,
    /// How long attributes may be cached.
    pub attr: Duration,
}

/// Request counters.
#[derive(Default, Debug)]
pub struct RequestCounters {
    /// Requests handled.
    pub requests: AtomicU64,
    /// Requests answered with an errno.
    pub errors: AtomicU64,
    /// Handlers that panicked (answered EIO).
    pub panics: AtomicU64,
    /// Requests that came through an io_uring queue (`--uring`).
    pub uring: AtomicU64,
    /// Of those, requests answered from the offload threads
    /// (`offload.rs`).
    pub offloaded: AtomicU64,
    /// Requests handled, per opcode.
    pub by_op: crate::stats::OpCounters,
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
    /// Served read-only: requests that would change the file system are
    /// answered EROFS (`Server::changing`).
    pub read_only: bool,
    /// Open files whose I/O the kernel does on their backing files.
    pub backings: crate::backing::Backings,
    /// Listed directories' attributes fetched again (`refresh.rs`).
    pub refresh: crate::refresh::Refresher,
    /// Host changes turned into notifications (`changes.rs`).
    pub changes: crate::changes::ChangeCounters,
    /// Entry replies under way, for the watcher's races (`changes.rs`).
    pub(crate) entry_race: crate::entry_race::EntryRace,
    /// Changes were lost and the kernel could not be made to drop every
    /// cached name: nothing is cached for long any more.
    pub(crate) trust_lost: std::sync::atomic::AtomicBool,
}

thread_local! {
    /// Whether this thread serves an io_uring queue (fuser names them).
    static ON_URING_QUEUE: bool = std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("fuser-uring-"));
}

/// What nothing is cached for longer than once a watcher lost changes the
/// kernel could not be made to forget: a mount's short default.
const LOST_TRUST_TTL: Duration = Duration::from_secs(1);

/// Entry timeouts from which the kernel is let keep a directory's listing
/// across opens (`opendir`); shorter ones are served by OPENDIR
/// (`ServeConfig::server_opendir` is set for them, see `mount.rs`).
pub const LISTING_KEPT_FROM: Duration = Duration::from_secs(10);

/// The handle READDIR carries when the kernel opened the directory itself.
const NO_HANDLE: u64 = 0;

/// The fuser file system: a thin shell around the shared state.
pub struct Server {
    inner: Arc<Inner>,
}

/// Runs `f` on the open directory of a READDIR-like request: the one
/// behind its handle or, when the kernel opened the directory without us
/// (handle 0, FUSE_NO_OPENDIR_SUPPORT), one opened for this call alone and
/// released after it. Offsets are stable cookies, so a fresh open resumes
/// where the last call stopped.
pub(crate) fn with_dir<T>(
    i: &Inner,
    ctx: &Ctx,
    ino: u64,
    fh: u64,
    f: impl FnOnce(&OpenFile) -> VfsResult<T>,
) -> VfsResult<T> {
    if fh != NO_HANDLE {
        let of = i.handles.get(fh)?;
        return f(&of);
    }
    let vp = i.nodes.get(ino)?;
    let dh = i.fs.opendir(ctx, &vp, libc::O_RDONLY)?;
    let of = OpenFile::transient(vp, dh);
    let r = f(&of);
    let _ = i.fs.releasedir(&of.vp, of.fh);
    r
}

fn ctx(req: &Request) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
        umask: 0,
    }
}

/// The caller of a request that makes a file, with its umask (see
/// `Ctx::umask`; without FUSE_DONT_MASK the mode arrives masked already,
/// and masking twice changes nothing).
fn ctx_making(req: &Request, umask: u32) -> Ctx {
    Ctx {
        umask: umask & 0o777,
        ..ctx(req)
    }
}

/// `open(2)` flags for the file system, with `O_KILL_SUIDGID` when the
/// kernel asked that a truncating open drop set-uid/set-gid.
fn open_flags(flags: i32, kill_suidgid: bool) -> i32 {
    if kill_suidgid {
        flags | O_KILL_SUIDGID
    } else {
        flags
    }
}

/// Whether `open(2)` flags ask for write access.
fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

fn name(n: &OsStr) -> &[u8] {
    n.as_bytes()
}

impl Server {
    /// Serves `fs`, whose vnodes live in `layer`. With `server_opendir`
    /// the kernel sends OPENDIR/RELEASEDIR for every directory open;
    /// otherwise it opens directories alone where it can. With
    /// `read_only` nothing that changes `fs` is served (EROFS).
    pub fn new(
        fs: Arc<dyn FileSystem>,
        layer: Arc<VnodeLayer>,
        timeouts: Timeouts,
        server_opendir: bool,
        read_only: bool,
    ) -> VfsResult<Server> {
        let root = fs.root()?;
        let nodes = NodeTable::new(layer.clone(), fs.mount().clone(), &root);
        Ok(Server {
            inner: Arc::new(Inner {
                fs,
                layer,
                nodes,
                handles: HandleTable::default(),
                timeouts,
                notifier: Default::default(),
                counters: RequestCounters::default(),
                evict: Default::default(),
                server_opendir,
                no_opendir: Default::default(),
                locks: Default::default(),
                offload: Default::default(),
                write_stalls: Default::default(),
                uring: Default::default(),
                uring_on: Default::default(),
                read_only,
                backings: Default::default(),
                refresh: Default::default(),
                changes: Default::default(),
                entry_race: Default::default(),
                trust_lost: Default::default(),
            }),
        })
    }

    /// The shared state (for the control socket).
    pub fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Says what the kernel agreed to at INIT, and why a feature asked for
    /// is off.
    fn log_init(&self, config: &KernelConfig) {
        let i = &self.inner;
        let on = |b: &std::sync::atomic::AtomicBool| {
            if b.load(Ordering::Relaxed) {
                "on"
            } else {
                "off"
            }
        };
        log::info!(
            "kernel FUSE protocol {}: io_uring {}, kernel I/O on source files {}, \
             directories opened by the kernel {}",
            config.kernel_abi(),
            on(&i.uring_on),
            on(&i.backings.on),
            on(&i.no_opendir),
        );
        if i.uring.load(Ordering::Relaxed) && !i.uring_on.load(Ordering::Relaxed) {
            log::warn!("FUSE over io_uring off: the kernel did not offer it at INIT");
        }
        if i.backings.wanted.load(Ordering::Relaxed) && !i.backings.on.load(Ordering::Relaxed) {
            log::warn!(
                "kernel I/O on source files off: the kernel does not offer FUSE passthrough \
                 (Linux 6.9+); reads and writes go through the server"
            );
        }
    }

    /// Counts a request about `node` and runs its handler `f` (see
    /// `shielded`).
    fn guard<T>(
        &self,
        what: &str,
        node: u64,
        f: impl FnOnce(&Inner) -> VfsResult<T>,
    ) -> VfsResult<T> {
        let i = &*self.inner;
        i.counters.requests.fetch_add(1, Ordering::Relaxed);
        i.counters.by_op.bump(what);
        if ON_URING_QUEUE.with(|u| *u) {
            i.counters.uring.fetch_add(1, Ordering::Relaxed);
        }
        self.shielded(what, node, f)
    }

    /// Like `guard`, for a request that changes the file system: answered
    /// EROFS on a read-only server. The kernel refuses these itself on a
    /// read-only mount, so this is what keeps the promise when it does not
    /// (remounted read-write, or a peer that is not a kernel): every
    /// request that writes data, metadata or names goes through here, and
    /// OPEN checks its flags itself.
    fn changing<T>(
        &self,
        what: &str,
        node: u64,
        f: impl FnOnce(&Inner) -> VfsResult<T>,
    ) -> VfsResult<T> {
        self.guard(what, node, |i| {
            if i.read_only {
                return Err(Errno::EROFS);
            }
            f(i)
        })
    }

    /// Runs `f`, turning a panic into `EIO`, counting errors and logging
    /// those that are not ordinary (`answered.rs`).
    fn shielded<T>(
        &self,
        what: &str,
        node: u64,
        f: impl FnOnce(&Inner) -> VfsResult<T>,
    ) -> VfsResult<T> {
        crate::release::on_request();
        let i = &*self.inner;
        let r = match catch_unwind(AssertUnwindSafe(|| f(i))) {
            Ok(r) => r,
            Err(_) => {
                i.counters.panics.fetch_add(1, Ordering::Relaxed);
                log::error!("{what} handler on node {node} panicked; answered EIO");
                Err(Errno::EIO)
            }
        };
        if let Err(e) = &r {
            i.counters.errors.fetch_add(1, Ordering::Relaxed);
            crate::answered::note(what, node, *e, i.read_only);
        }
        r
    }

    /// Serves an OPEN (here, or on the pool when it truncates a large
    /// file).
    fn open_now(
        &self,
        c: &Ctx,
        ino: INodeNo,
        flags: OpenFlags,
        kill_suidgid: bool,
        reply: ReplyOpen,
    ) {
        let r = self.guard("open", ino.0, |i| {
            let vp = i.nodes.get(ino.0)?;
            // The kernel opens FIFOs, sockets and devices itself (special
            // inodes to it) and sends OPEN for files and directories only.
            // Opened here, a FIFO would block the request loop until a
            // writer came, a device would open with the server's privilege.
            if matches!(
                vp.vtype(),
                VType::Fifo | VType::Sock | VType::Chr | VType::Blk
            ) {
                return Err(Errno::ENXIO);
            }
            // (A truncating open changes the file; the kernel sends
            // O_TRUNC only where it leaves truncation to us.)
            if i.read_only && (writes(flags.0) || flags.0 & libc::O_TRUNC != 0) {
                return Err(Errno::EROFS);
            }
            let fh = i.fs.open(c, &vp, open_flags(flags.0, kill_suidgid))?;
            Ok(i.open_file(ino.0, vp, fh, flags.0, |fd| reply.open_backing(fd)))
        });
        match r {
            Ok((h, Some(id))) => {
                reply.opened_passthrough(FileHandle(h), self.inner.kernel_io_flags(), &id)
            }
            Ok((h, None)) => reply.opened(FileHandle(h), self.inner.fopen_flags()),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Serves a WRITE of file `ino`'s handle `fh`, timing it
    /// (`write_stall.rs`).
    fn write_now(
        &self,
        c: &Ctx,
        (ino, fh): (INodeNo, FileHandle),
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        reply: ReplyWrite,
    ) {
        let r = self.changing("write", ino.0, |i| {
            let of = i.handles.get(fh.0)?;
            // FUSE_HANDLE_KILLPRIV_V2: a writer without CAP_FSETID drops
            // set-uid/set-gid, and it is ours to do.
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                i.fs.setattr(c, &of.vp, &SetAttr::kill_suidgid())?;
            }
            let write = || i.fs.write(&of.vp, of.fh, offset, data);
            if i.fs.waits_for_devices() {
                i.write_stalls.timed(write)
            } else {
                write()
            }
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Handles a request that may wait for a disk: on a pool thread if
    /// this is an io_uring queue thread and the file system may wait for
    /// a device (`offload.rs`), here otherwise. `f` answers the request.
    fn maybe_offload(&self, f: impl FnOnce(&Server) + Send + 'static) {
        self.offload_if(self.offloading(), f);
    }

    /// Runs `f` (which answers the request) on the pool if `elsewhere`,
    /// here otherwise.
    fn offload_if(&self, elsewhere: bool, f: impl FnOnce(&Server) + Send + 'static) {
        if !elsewhere {
            return f(self);
        }
        // Counted here: `guard` runs on the pool thread.
        self.inner.counters.uring.fetch_add(1, Ordering::Relaxed);
        self.offload(f);
    }

    /// Handles a request that needs new inode space (a new file, name or
    /// attribute): on a pool thread if this is an io_uring queue thread and
    /// the file system says such a request may wait for space that files
    /// being let go still hold (`FileSystem::short_of_space`), here
    /// otherwise. What it waits for is the RELEASE and FORGET of those
    /// files, and a RELEASE may be queued on this very thread, behind it:
    /// served here, it would wait for nothing and fail with ENOSPC (seen
    /// with O_TMPFILE on a full memfs: close, then make another).
    fn making(&self, f: impl FnOnce(&Server) + Send + 'static) {
        self.offload_if(self.short_of_space_here(), f);
    }

    /// The test [`making`](Self::making) applies.
    fn short_of_space_here(&self) -> bool {
        ON_URING_QUEUE.with(|u| *u) && self.inner.fs.short_of_space()
    }

    /// Whether a request that may end a file's storage goes to the pool:
    /// requests that may wait for a device do (`offloading`), and the file
    /// system says this one may free much (`FileSystem::may_free_much`),
    /// which `ask` puts to it. A failed or panicking question is a no: the
    /// request then meets the same failure where it is served and answers
    /// it.
    fn frees_much(&self, ask: impl FnOnce(&Inner) -> Option<bool>) -> bool {
        let i = &*self.inner;
        self.offloading()
            && !i.read_only
            && catch_unwind(AssertUnwindSafe(|| ask(i)))
                .ok()
                .flatten()
                .unwrap_or(false)
    }

    /// Whether requests that may wait for a device go to the pool: this
    /// is an io_uring queue thread, and the file system's requests may.
    fn offloading(&self) -> bool {
        ON_URING_QUEUE.with(|u| *u) && self.inner.fs.waits_for_devices()
    }

    /// Runs `f` on the pool (`offload.rs`).
    fn offload(&self, f: impl FnOnce(&Server) + Send + 'static) {
        let i = &self.inner;
        i.counters.offloaded.fetch_add(1, Ordering::Relaxed);
        let me = Server { inner: i.clone() };
        i.offload.run(Box::new(move || f(&me)));
    }

    /// Answers with a node handed out as `name` in directory node
    /// `parent`: counts the kernel's new reference first; a node new to
    /// the kernel becomes an eviction candidate (`evict.rs`).
    fn reply_entry_at(
        &self,
        reply: ReplyEntry,
        r: VfsResult<(VnodeRef, uvfs_vfs::Attr)>,
        parent: u64,
        name: &[u8],
    ) {
        match r {
            Ok((vp, attr)) => {
                let i = &self.inner;
                let (id, new) = i.nodes.remember_new(&vp);
                let dir = attr.kind == uvfs_vfs::VType::Dir;
                if new {
                    i.note_new(id, parent, name, dir);
                }
                if dir {
                    i.dir_handed_out(id, parent, name);
                }
                reply.entry(
                    &i.entry_ttl(&vp),
                    &file_attr(&attr, id),
                    Generation(i.fs.generation(&vp)),
                );
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Answers CREATE and TMPFILE: the new node is remembered by the
    /// kernel (one lookup) and open through a new handle. `named` is the
    /// (parent, name) the evictor may later ask the kernel to forget it by.
    fn reply_created(
        &self,
        reply: ReplyCreate,
        r: VfsResult<(VnodeRef, Fh, Attr)>,
        flags: i32,
        named: Option<(u64, &[u8])>,
    ) {
        match r {
            Ok((vp, fh, attr)) => {
                let i = &self.inner;
                let (id, new) = i.nodes.remember_new(&vp);
                if let (true, Some((parent, n))) = (new, named) {
                    i.note_new(id, parent, n, false);
                }
                let generation = Generation(i.fs.generation(&vp));
                let cached = vp.clone();
                let (h, backing) = i.open_file(id, vp, fh, flags, |fd| reply.open_backing(fd));
                // After the open: a file created open for writing on its
                // backing file has its attributes cached for no time.
                let ttl = &i.entry_ttl(&cached);
                let attr = &file_attr(&attr, id);
                let fh = FileHandle(h);
                match backing {
                    Some(b) => {
                        let f = i.kernel_io_flags();
                        reply.created_passthrough(ttl, attr, generation, fh, f, &b)
                    }
                    None => reply.created(ttl, attr, generation, fh, i.fopen_flags()),
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn reply_empty(reply: ReplyEmpty, r: VfsResult<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn reply_xattr(reply: ReplyXattr, size: u32, r: VfsResult<Vec<u8>>) {
        match r {
            Ok(v) if size == 0 => match u32::try_from(v.len()) {
                Ok(n) => reply.size(n),
                Err(_) => reply.error(fuser::Errno::E2BIG),
            },
            Ok(v) if v.len() > size as usize => reply.error(fuser::Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl Inner {
    /// How the kernel is to treat an open file. Its page cache stays
    /// valid across opens: changes pass through it (those made behind a
    /// passthrough's back show through FUSE_AUTO_INVAL_DATA). FLUSH is
    /// skipped where the file system has no use for it (see
    /// `FileSystem::needs_flush`).
    fn fopen_flags(&self) -> FopenFlags {
        let mut f = FopenFlags::FOPEN_KEEP_CACHE;
        if !self.fs.needs_flush() && !self.fs.forwards_locks() {
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        f
    }

    /// Makes the kernel drop node `node`'s cached attributes (not its
    /// pages): `FUSE_NOTIFY_INVAL_INODE` with a negative offset. Sent
    /// before the reply to the open that needs it; the kernel applies no
    /// attribute reply that began before it.
    fn forget_attrs(&self, node: u64) {
        if let Some(n) = self.notifier.get() {
            // ENOENT: the kernel holds nothing of the node to drop.
            let _ = n.inval_inode(INodeNo(node), -1, 0);
        }
    }

    /// Registers an open file of node `node` and decides how its I/O is
    /// served (`backing.rs`): Some(backing id) if by the kernel on the
    /// backing file, which `register` registers on a node's first open.
    fn open_file(
        &self,
        node: u64,
        vp: VnodeRef,
        fh: Fh,
        flags: i32,
        register: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> std::io::Result<fuser::BackingId>,
    ) -> (u64, Option<Arc<fuser::BackingId>>) {
        let mut f = OpenFile {
            vp,
            fh,
            writable: writes(flags),
            backing_node: None,
            kernel_writer: false,
        };
        let mut backing = None;
        if self.backings.enabled() && f.vp.vtype() == VType::Reg {
            let mode = self.backings.attach(node, || {
                let file = self.fs.backing_file(&f.vp, fh)?;
                Some(register(file.as_fd()))
            });
            f.backing_node = Some(node);
            if let crate::backing::Mode::Kernel(id) = mode {
                backing = Some(id);
                if f.writable {
                    f.kernel_writer = true;
                    if self.backings.writers.opened(node) {
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
    fn kernel_io_flags(&self) -> FopenFlags {
        self.fopen_flags() & FopenFlags::FOPEN_NOFLUSH
    }

    /// The open file a GETLK or SETLK is about. `ENOSYS` where the kernel
    /// keeps locks itself (the file system does not). A request naming no
    /// handle (what a directory the kernel opened by itself would carry) is
    /// refused (`ENOLCK`): its close is never told to us, so the lock could
    /// never be dropped. Defensive: the kernel keeps directory locks itself
    /// (FUSE's directory operations have no lock methods), and every open
    /// file has a handle.
    fn lock_target(&self, fh: u64) -> VfsResult<OpenFile> {
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
    fn throttle_new_nodes(&self) {
        if ON_URING_QUEUE.with(|u| *u) {
            self.evict
                .throttle(self.fs.mount(), self.layer.config().limit);
        }
    }

    /// After a rename through the mount: a directory the refresher knows
    /// by its old name goes by the new one (and, exchanged, the other way
    /// round). The kernel moves its dentries alike.
    fn renamed(
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
    fn dir_handed_out(&self, id: u64, parent: u64, name: &[u8]) {
        if self.refresh.running() {
            self.refresh.names.handed_out(id, parent, name);
        }
    }

    fn note_new(&self, id: u64, parent: u64, name: &[u8], dir: bool) {
        let count = self.fs.mount().vnode_count();
        self.evict
            .note(id, parent, name, dir, count, self.layer.config().limit);
    }

    /// How long the kernel may cache `vp`'s name (as an entry of its
    /// directory; for a negative entry, `vp` is the directory).
    pub(crate) fn entry_ttl(&self, vp: &VnodeRef) -> Duration {
        self.capped(vp, self.timeouts.entry)
    }

    /// How long the kernel may cache `vp`'s attributes.
    pub(crate) fn attr_ttl(&self, vp: &VnodeRef) -> Duration {
        self.capped(vp, self.timeouts.attr)
    }

    /// `ttl`, capped where the file system cannot report changes of `vp`
    /// (`FileSystem::cache_limit`), changes were lost, or the kernel
    /// writes `vp`'s backing file where neither it nor we see the
    /// attributes move (`backing::Writers`).
    fn capped(&self, vp: &VnodeRef, ttl: Duration) -> Duration {
        if self.backings.writers.writing(self.nodes.node_id(vp.ino())) {
            return Duration::ZERO;
        }
        let cap = if self.trust_lost.load(Ordering::Relaxed) {
            Some(LOST_TRUST_TTL)
        } else {
            self.fs.cache_limit(vp)
        };
        cap.map_or(ttl, |c| ttl.min(c))
    }

    fn with_attr(&self, vp: VnodeRef) -> VfsResult<(VnodeRef, uvfs_vfs::Attr)> {
        let a = self.fs.getattr(&vp)?;
        Ok((vp, a))
    }
}

impl Filesystem for Server {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each is optional: a kernel without one still works, just slower.
        //
        // Not FUSE_ATOMIC_O_TRUNC, although it saves a SETATTR per
        // `open(O_TRUNC)`: with it the kernel sends O_TRUNC inside OPEN and,
        // once OPEN succeeds, zeroes its i_size and drops the page cache,
        // all before `handle_truncate` checks for ETXTBSY. An
        // `open(O_RDONLY | O_TRUNC)` of a program being exec'd then pulls
        // the pages from under the exec (it dies with SIGSEGV), and if it
        // dies before that check the open succeeds: pjdfstest's
        // open::etxtbsy failed about one run in ten. Without the flag the
        // kernel checks write access first and truncates with SETATTR.
        // Files written outside the server: cached pages go when the
        // kernel sees mtime or size change (without it a file rewritten
        // on the host in place read stale until the cache was dropped).
        if self.inner.fs.changes_outside() {
            let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        }
        // ACLs enforced by the kernel (with default_permissions it
        // otherwise checks mode bits only, and a user an ACL denies could
        // read the file).
        // With ACLs, the umask is the file system's to apply: a default
        // ACL on the directory replaces it (FUSE_DONT_MASK; Ctx::umask).
        if self.inner.fs.posix_acls() {
            let _ = config.add_capabilities(InitFlags::FUSE_POSIX_ACL);
            let _ = config.add_capabilities(InitFlags::FUSE_DONT_MASK);
        }
        // Set-uid/set-gid are dropped here (SetAttr::kill_suidgid, asked by
        // flags on WRITE, SETATTR, OPEN and CREATE). Without it the kernel
        // asks GETXATTR security.capability before every write (the
        // superblock lacks SB_NOSEC), one round trip per write.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // FUSE over io_uring, if asked: requests then reach a queue thread
        // on the caller's CPU (third_party/fuser/src/uring.rs).
        if self.inner.uring.load(Ordering::Relaxed)
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok()
        {
            self.inner.uring_on.store(true, Ordering::Relaxed);
        }
        // File locks go to the file system when it keeps them (a
        // passthrough's land on the backing files); otherwise the kernel
        // keeps its own, local to this mount.
        if self.inner.fs.forwards_locks() {
            let _ = config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS);
            let _ = config.add_capabilities(InitFlags::FUSE_FLOCK_LOCKS);
        }
        for cap in [
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_EXPORT_SUPPORT,
            InitFlags::FUSE_CACHE_SYMLINKS,
        ] {
            let _ = config.add_capabilities(cap);
        }
        // Reads, writes and mappings of files with a backing file done by
        // the kernel on it (`backing.rs`). Depth 1: the backing files may
        // not be on a stacked file system themselves (overlayfs, another
        // such FUSE mount), and this mount may still be stacked on once
        // (an overlayfs lower layer).
        if self.inner.backings.wanted.load(Ordering::Relaxed)
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(1).is_ok()
        {
            self.inner.backings.on.store(true, Ordering::Relaxed);
        }
        // Directories opened by the kernel alone (FUSE_NO_OPENDIR_SUPPORT,
        // the default): a warm `find` then costs no OPENDIR + RELEASEDIR
        // round trip per directory (the kernel keeps the listing, with
        // FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE as its default for
        // no-opendir, the same flags `opendir` below answers): measured
        // 1.16x tmpfs's warm stat rate instead of 0.76x.
        if !self.inner.server_opendir
            && config
                .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
                .is_ok()
        {
            self.inner.no_opendir.store(true, Ordering::Relaxed);
        }
        let _ = config.set_max_write(MAX_WRITE);
        self.log_init(config);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        self.inner.throttle_new_nodes();
        let _racing = self.inner.entry_race.begin();
        let mut negative_ttl = self.inner.timeouts.entry;
        let r = self.guard("lookup", parent.0, |i| {
            let dir = match i.nodes.get(parent.0) {
                Ok(dir) => dir,
                // A file handle of a node the kernel forgot: with
                // FUSE_EXPORT_SUPPORT it asks for `.` of the handle's node
                // id (and checks the generation itself).
                Err(Errno::ESTALE) if name(n) == b"." => {
                    return i.with_attr(i.fs.vget(i.nodes.node_id(parent.0))?).map(Some);
                }
                Err(e) => return Err(e),
            };
            // `.` of a file handle's node the kernel dropped while its
            // FORGET has not reached us yet: the node itself, whatever its
            // type (a file system's own lookup of `.` wants a directory,
            // and any error here is ESTALE to `open_by_handle_at`).
            if name(n) == b"." {
                return i.with_attr(dir).map(Some);
            }
            negative_ttl = i.entry_ttl(&dir);
            match i.fs.lookup_attr(&ctx(req), &dir, name(n)) {
                // Answered with a negative entry, not an errno.
                Err(e) if e == Errno::ENOENT && !negative_ttl.is_zero() => Ok(None),
                r => r.map(Some),
            }
        });
        match r {
            // A negative entry the kernel may cache for the entry timeout
            // (node id 0 counts no reference).
            Ok(None) => {
                let mut a = dot_attr(0);
                a.kind = fuser::FileType::RegularFile;
                reply.entry(&negative_ttl, &a, Generation(0));
            }
            Ok(Some(e)) => self.reply_entry_at(reply, Ok(e), parent.0, name(n)),
            Err(e) => self.reply_entry_at(reply, Err(e), parent.0, name(n)),
        }
    }

    // BATCH_FORGET: fuser's default `batch_forget` calls this once per
    // entry (its `ForgetOne` type is private, so it cannot be overridden),
    // which is exactly the per-node accounting wanted.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let i = &self.inner;
        if i.nodes.forget(ino.0, nlookup) && i.refresh.running() {
            i.refresh.names.forgot(ino.0);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = self.guard("getattr", ino.0, |i| {
            let vp = i.nodes.get(ino.0)?;
            Ok((i.fs.getattr(&vp)?, i.attr_ttl(&vp)))
        });
        match r {
            Ok((a, ttl)) => reply.attr(&ttl, &file_attr(&a, ino.0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        kill_suidgid: bool,
        reply: ReplyAttr,
    ) {
        // A SETATTR that changes nothing (ctime at most) comes from a chown
        // that changes neither id: utimensat with both times omitted sends
        // nothing, and the kernel's own kill-privs SETATTR is not sent under
        // KILLPRIV_V2. Linux drops set-ids on any chown of a non-directory,
        // but the kernel flags (FATTR_KILL_SUIDGID) only chowns with an id.
        let chown_without_ids = (mode, uid, gid, size) == (None, None, None, None)
            && atime.is_none()
            && mtime.is_none();
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            // (And any chown moves ctime.)
            ctime: ctime
                .map(Timespec::from)
                .or_else(|| chown_without_ids.then(Timespec::now)),
            kill_suidgid: kill_suidgid || chown_without_ids,
        };
        let slow = size.is_some_and(|size| {
            self.frees_much(|i| {
                let vp = i.nodes.get(ino.0).ok()?;
                Some(i.fs.may_free_much(Freeing::Truncate { vp: &vp, size }))
            })
        });
        let c = ctx(req);
        self.offload_if(slow, move |s| {
            let r = s.changing("setattr", ino.0, |i| {
                let vp = i.nodes.get(ino.0)?;
                Ok((i.fs.setattr(&c, &vp, &set)?, i.attr_ttl(&vp)))
            });
            match r {
                Ok((a, ttl)) => reply.attr(&ttl, &file_attr(&a, ino.0)),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.guard("readlink", ino.0, |i| i.fs.readlink(&i.nodes.get(ino.0)?)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (c, n) = (ctx_making(req, umask), n.to_owned());
        self.making(move |s| {
            let r = s.changing("mknod", parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                i.with_attr(i.fs.mknod(&c, &dir, name(&n), mode, u64::from(rdev))?)
            });
            s.reply_entry_at(reply, r, parent.0, name(&n));
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let (c, n) = (ctx_making(req, umask), n.to_owned());
        self.making(move |s| {
            let r = s.changing("mkdir", parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                i.with_attr(i.fs.mkdir(&c, &dir, name(&n), mode)?)
            });
            s.reply_entry_at(reply, r, parent.0, name(&n));
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let slow = self.frees_much(|i| {
            let dir = i.nodes.get(parent.0).ok()?;
            Some(i.fs.may_free_much(Freeing::Remove {
                dir: &dir,
                name: name(n),
            }))
        });
        let (c, n) = (ctx(req), n.to_owned());
        self.offload_if(slow, move |s| {
            let r = s.changing("unlink", parent.0, |i| {
                i.fs.unlink(&c, &i.nodes.get(parent.0)?, name(&n))
            });
            Self::reply_empty(reply, r);
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let r = self.changing("rmdir", parent.0, |i| {
            i.fs.rmdir(&ctx(req), &i.nodes.get(parent.0)?, name(n))
        });
        Self::reply_empty(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (c, n, target) = (ctx(req), link_name.to_owned(), target.to_owned());
        self.making(move |s| {
            let r = s.changing("symlink", parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                i.with_attr(i.fs.symlink(&c, &dir, name(&n), target.as_os_str().as_bytes())?)
            });
            s.reply_entry_at(reply, r, parent.0, name(&n));
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRenameFlags,
        reply: ReplyEmpty,
    ) {
        // (RENAME_WHITEOUT makes an inode; a rename over a file may end
        // that file.)
        let slow = self.frees_much(|i| {
            let dir = i.nodes.get(newparent.0).ok()?;
            Some(i.fs.may_free_much(Freeing::Remove {
                dir: &dir,
                name: name(newname),
            }))
        });
        let (c, n, newname) = (ctx(req), n.to_owned(), newname.to_owned());
        self.offload_if(self.short_of_space_here() || slow, move |s| {
            let r = s.changing("rename", parent.0, |i| {
                let (d, nd) = (i.nodes.get(parent.0)?, i.nodes.get(newparent.0)?);
                let flags = RenameFlags(flags.bits());
                i.fs.rename(&c, &d, name(&n), &nd, name(&newname), flags)?;
                i.renamed(
                    &c,
                    (parent.0, &d, name(&n)),
                    (newparent.0, &nd, name(&newname)),
                    flags,
                );
                Ok(())
            });
            Self::reply_empty(reply, r);
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (c, newname) = (ctx(req), newname.to_owned());
        self.making(move |s| {
            let r = s.changing("link", ino.0, |i| {
                let (vp, dir) = (i.nodes.get(ino.0)?, i.nodes.get(newparent.0)?);
                i.fs.link(&c, &vp, &dir, name(&newname))?;
                i.with_attr(vp)
            });
            s.reply_entry_at(reply, r, newparent.0, name(&newname));
        });
    }

    fn open(
        &self,
        req: &Request,
        ino: INodeNo,
        flags: OpenFlags,
        kill_suidgid: bool,
        reply: ReplyOpen,
    ) {
        let slow = flags.0 & libc::O_TRUNC != 0
            && self.frees_much(|i| {
                let vp = i.nodes.get(ino.0).ok()?;
                Some(i.fs.may_free_much(Freeing::Truncate { vp: &vp, size: 0 }))
            });
        let c = ctx(req);
        self.offload_if(slow, move |s| {
            s.open_now(&c, ino, flags, kill_suidgid, reply)
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let size = size.min(MAX_READ);
        let read = move |i: &Inner| {
            let of = i.handles.get(fh.0)?;
            i.fs.read(&of.vp, of.fh, offset, size)
        };
        let answer = |reply: ReplyData, r: VfsResult<Vec<u8>>| match r {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(e)),
        };
        if !self.offloading() {
            return answer(reply, self.guard("read", ino.0, read));
        }
        // Served here if it needs no disk; else on the pool, so that the
        // queue's other requests do not wait for the disk too.
        let r = self.guard("read", ino.0, |i| {
            let of = i.handles.get(fh.0)?;
            match i.fs.read_nowait(&of.vp, of.fh, offset, size) {
                Err(Errno::EAGAIN) => Ok(None),
                r => r.map(Some),
            }
        });
        match r {
            Ok(Some(d)) => reply.data(&d),
            Ok(None) => self.offload(move |s| answer(reply, s.shielded("read", ino.0, read))),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let c = ctx(req);
        if self.offloading() && self.inner.write_stalls.open() {
            // The data lives in the queue's buffer, which goes back to the
            // kernel when this returns.
            let data = data.to_vec();
            let write =
                move |s: &Server| s.write_now(&c, (ino, fh), offset, &data, write_flags, reply);
            return self.offload_if(true, write);
        }
        self.write_now(&c, (ino, fh), offset, data, write_flags, reply);
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let r = self.guard("flush", ino.0, |i| {
            let of = i.handles.get(fh.0)?;
            // A close: POSIX drops every record lock its owner holds on
            // the file (the kernel leaves that to us with FUSE_POSIX_LOCKS).
            if i.fs.forwards_locks() {
                i.fs.unlock_owner(&of.vp, lock_owner.0)?;
            }
            i.fs.flush(&of.vp, of.fh)
        });
        Self::reply_empty(reply, r);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let slow = self.frees_much(|i| {
            let of = i.handles.get(fh.0).ok()?;
            Some(i.fs.may_free_much(Freeing::Release {
                vp: &of.vp,
                fh: of.fh,
            }))
        });
        self.offload_if(slow, move |s| {
            let r = s.guard("release", ino.0, |i| {
                let of = i.handles.remove(fh.0)?;
                if let Some(node) = of.backing_node {
                    if of.kernel_writer {
                        i.backings.writers.closed(node);
                    }
                    i.backings.detach(node);
                }
                i.fs.release(&of.vp, of.fh)
            });
            Self::reply_empty(reply, r);
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.maybe_offload(move |s| {
            let r = s.guard("fsync", ino.0, |i| {
                let of = i.handles.get(fh.0)?;
                i.fs.fsync(&of.vp, of.fh, datasync)
            });
            Self::reply_empty(reply, r);
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.inner.no_opendir.load(Ordering::Relaxed) {
            // The kernel stops sending OPENDIR/RELEASEDIR for good; each
            // READDIR opens and releases its directory itself (`with_dir`).
            self.inner.counters.by_op.bump("opendir");
            return reply.error(errno(Errno::ENOSYS));
        }
        let r = self.guard("opendir", ino.0, |i| {
            let vp = i.nodes.get(ino.0)?;
            let fh = i.fs.opendir(&ctx(req), &vp, flags.0)?;
            let keep = i.entry_ttl(&vp) >= LISTING_KEPT_FROM;
            Ok((i.handles.insert(vp, fh, false), keep))
        });
        match r {
            // Let the kernel cache the listing across opens: every change
            // to a directory goes through the kernel (fuse_dir_changed drops
            // the cache), and changes behind a passthrough mount's back are
            // reported (changes.rs) or show once the directory's attributes
            // time out and its mtime moved. Offsets are stable, as a cached
            // listing requires.
            Ok((h, true)) => reply.opened(
                FileHandle(h),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            // Names that expire within seconds: a cached listing would
            // leave each of them to a LOOKUP of its own when next used,
            // where listing again (READDIRPLUS) refreshes a whole
            // directory's names and attributes in one request.
            Ok((h, false)) => reply.opened(FileHandle(h), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.guard("readdir", ino.0, |i| {
            with_dir(i, &ctx(_req), ino.0, fh.0, |of| {
                i.fs.readdir(&of.vp, of.fh, offset, &mut |e| {
                    let id = i.nodes.node_id(e.ino);
                    reply.add(
                        INodeNo(id),
                        e.offset,
                        file_type(e.kind),
                        OsStr::from_bytes(&e.name),
                    )
                })
            })
        });
        match r {
            Ok(()) => {
                reply.ok();
                self.inner.refresh.listed(ino.0);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.inner.throttle_new_nodes();
        let _racing = self.inner.entry_race.begin();
        let r = self.guard("readdirplus", ino.0, |i| {
            with_dir(i, &ctx(req), ino.0, fh.0, |of| {
                i.fs.readdirplus(&ctx(req), &of.vp, of.fh, offset, &mut |e, found| {
                    let nm = OsStr::from_bytes(&e.name);
                    match found {
                        // `.` and `..`: the kernel does not link these, so no
                        // reference is counted.
                        None => {
                            let ttl = i.entry_ttl(&of.vp);
                            let id = i.nodes.node_id(e.ino);
                            reply.add(
                                INodeNo(id),
                                e.offset,
                                nm,
                                &ttl,
                                &dot_attr(id),
                                Generation(0),
                            )
                        }
                        Some((vp, attr)) => {
                            let ttl = i.entry_ttl(vp);
                            let id = i.nodes.node_id(attr.ino);
                            let full = reply.add(
                                INodeNo(id),
                                e.offset,
                                nm,
                                &ttl,
                                &file_attr(attr, id),
                                Generation(i.fs.generation(vp)),
                            );
                            if !full {
                                // Counted before the reply leaves (see nodes.rs).
                                let (nid, new) = i.nodes.remember_new(vp);
                                let parent = i.nodes.node_id(of.vp.ino());
                                let dir = attr.kind == uvfs_vfs::VType::Dir;
                                if new {
                                    i.note_new(nid, parent, &e.name, dir);
                                }
                                if dir {
                                    i.dir_handed_out(nid, parent, &e.name);
                                }
                            }
                            full
                        }
                    }
                })
            })
        });
        match r {
            Ok(()) => {
                reply.ok();
                self.inner.refresh.listed(ino.0);
            }
            // Entries remembered before a failure part way stay counted
            // (the node lives until unmount, never too short); memfs's
            // readdirplus fails only before its first entry.
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.guard("releasedir", ino.0, |i| {
            let of = i.handles.remove(fh.0)?;
            i.fs.releasedir(&of.vp, of.fh)
        });
        Self::reply_empty(reply, r);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let cx = ctx(req);
        self.maybe_offload(move |s| {
            let r = s.guard("fsyncdir", ino.0, |i| {
                with_dir(i, &cx, ino.0, fh.0, |of| {
                    i.fs.fsync(&of.vp, of.fh, datasync)
                })
            });
            Self::reply_empty(reply, r);
        });
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.guard("statfs", ino.0, |i| i.fs.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let (c, n, value) = (ctx(req), n.to_owned(), value.to_vec());
        self.making(move |s| {
            let r = s.changing("setxattr", ino.0, |i| {
                if position != 0 {
                    return Err(Errno::EINVAL);
                }
                i.fs.setxattr(
                    &c,
                    &i.nodes.get(ino.0)?,
                    name(&n),
                    &value,
                    XattrFlags(flags),
                )
            });
            Self::reply_empty(reply, r);
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        let r = self.guard("getxattr", ino.0, |i| {
            i.fs.getxattr(&i.nodes.get(ino.0)?, name(n))
        });
        Self::reply_xattr(reply, size, r);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.guard("listxattr", ino.0, |i| i.fs.listxattr(&i.nodes.get(ino.0)?));
        Self::reply_xattr(reply, size, r);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let r = self.changing("removexattr", ino.0, |i| {
            i.fs.removexattr(&ctx(req), &i.nodes.get(ino.0)?, name(n))
        });
        Self::reply_empty(reply, r);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let r = self.guard("access", ino.0, |i| {
            i.fs.access(&ctx(req), &i.nodes.get(ino.0)?, mask.bits() as u32)
        });
        Self::reply_empty(reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        kill_suidgid: bool,
        reply: ReplyCreate,
    ) {
        let (c, n) = (ctx_making(req, umask), n.to_owned());
        self.making(move |s| {
            let r = s.changing("create", parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                let (vp, fh) =
                    i.fs.create(&c, &dir, name(&n), mode, open_flags(flags, kill_suidgid))?;
                let attr = i.fs.getattr(&vp)?;
                Ok((vp, fh, attr))
            });
            s.reply_created(reply, r, flags, Some((parent.0, name(&n))));
        });
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let c = ctx_making(req, umask);
        self.making(move |s| {
            let r = s.changing("tmpfile", parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                let (vp, fh) = i.fs.tmpfile(&c, &dir, mode, flags)?;
                let attr = i.fs.getattr(&vp)?;
                Ok((vp, fh, attr))
            });
            // No name for the evictor to ask the kernel to forget it by: the
            // node goes when its last open file does (or once `link` named
            // it, as any other).
            s.reply_created(reply, r, flags, None);
        });
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: fuser::ReplyLock,
    ) {
        let lock = FileLock {
            start,
            end,
            typ,
            pid,
        };
        let r = self.guard("getlk", ino.0, |i| {
            let of = i.lock_target(fh.0)?;
            i.fs.getlk(&of.vp, of.fh, lock_owner.0, &lock)
        });
        match r {
            Ok(l) => reply.locked(l.start, l.end, l.typ, l.pid),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        flock: bool,
        reply: ReplyEmpty,
    ) {
        let lock = FileLock {
            start,
            end,
            typ,
            pid,
        };
        // Never waits here: a SETLKW that meets a conflict is parked
        // (`lockwait.rs`) and this request loop moves on.
        let r = self.guard("setlk", ino.0, |i| {
            let of = i.lock_target(fh.0)?;
            match i.fs.setlk(&of.vp, of.fh, lock_owner.0, &lock, flock) {
                Err(e) if e == Errno::EAGAIN && sleep => Ok(Some(of)),
                r => r.map(|()| None),
            }
        });
        match r {
            // A lock taken is answered after the kernel's cached pages of
            // the file are dropped (lockwait.rs: fresh data under a lock).
            Ok(None) if typ != libc::F_UNLCK => {
                self.inner.locks.granted(&self.inner.fs, ino.0, reply)
            }
            Ok(None) => reply.ok(),
            Ok(Some(of)) => {
                let parked = crate::lockwait::Parked {
                    unique: req.unique().0,
                    nodeid: ino.0,
                    vp: of.vp,
                    fh: of.fh,
                    owner: lock_owner.0,
                    lock,
                    flock,
                    reply,
                };
                self.inner.locks.park(&self.inner.fs, parked);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn interrupt(&self, _req: &Request, unique: fuser::RequestId) {
        self.inner.locks.interrupt(unique.0);
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        let (c, input) = (ctx(req), in_data.to_vec());
        // FITRIM walks the whole device's free space (seconds).
        let slow = crate::ioctl::waits_for_device(cmd) && self.offloading();
        self.offload_if(slow, move |s| {
            let serve = |i: &Inner| crate::ioctl::serve(i, &c, ino.0, fh.0, cmd, &input, out_size);
            let r = if crate::ioctl::changes(cmd) {
                s.changing("ioctl", ino.0, serve)
            } else {
                s.guard("ioctl", ino.0, serve)
            };
            match r {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.maybe_offload(move |s| {
            let r = s.changing("fallocate", ino.0, |i| {
                let of = i.handles.get(fh.0)?;
                i.fs.fallocate(&of.vp, of.fh, FallocMode(mode), offset, length)
            });
            Self::reply_empty(reply, r);
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.maybe_offload(move |s| {
            let r = s.changing("copy_file_range", ino_in.0, |i| {
                let (a, b) = (i.handles.get(fh_in.0)?, i.handles.get(fh_out.0)?);
                let flags = u32::try_from(flags.bits()).map_err(|_| Errno::EINVAL)?;
                let n = i
                    .fs
                    .copy_file_range(&a.vp, a.fh, offset_in, &b.vp, b.fh, offset_out, len, flags)?;
                // A reply carries 32 bits; the kernel asks for no more anyway.
                Ok(u32::try_from(n).unwrap_or(u32::MAX))
            });
            match r {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    // The kernel asks only for SEEK_DATA and SEEK_HOLE (it answers the
    // other whences itself).
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        let r = self.guard("lseek", ino.0, |i| {
            let hole = match whence {
                libc::SEEK_DATA => false,
                libc::SEEK_HOLE => true,
                _ => return Err(Errno::EINVAL),
            };
            let off = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
            let of = i.handles.get(fh.0)?;
            if i.handles.open_for_writing(&of.vp) {
                // The kernel sends LSEEK without writing back first, so
                // dirty pages of a shared writable mapping are in neither
                // the file system nor its answer: a copy by SEEK_DATA
                // would skip them. While the file is open for writing
                // (a mapping keeps its handle open; unmapping writes the
                // pages back), all of it is data, as without LSEEK.
                let size = i.fs.getattr(&of.vp)?.size;
                if off >= size {
                    return Err(Errno::ENXIO);
                }
                return i64::try_from(if hole { size } else { off }).map_err(|_| Errno::EOVERFLOW);
            }
            let at = i.fs.seek_data(&of.vp, of.fh, off, hole)?;
            i64::try_from(at).map_err(|_| Errno::EOVERFLOW)
        });
        match r {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn destroy(&mut self) {
        self.inner.handles.clear();
        self.inner.backings.clear();
        self.inner.nodes.clear();
    }
}
