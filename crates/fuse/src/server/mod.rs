//! The fuser `Filesystem` implementation: decodes each request, resolves
//! node ids and handles to vnodes, calls the VOP, encodes the reply.
//!
//! # Failure discipline
//! Nothing a request carries can panic the server: unknown or forgotten
//! node ids answer `ESTALE`, unknown handles `EBADF`, bad names and
//! offsets the VOP's errno. As a last line, every handler runs under
//! `catch_unwind`; a panic (a bug) answers `EIO` and the request loop goes
//! on (locks here are `parking_lot`'s, which do not poison).
//!
//! # Pieces
//! Each module holds one concern, so that a change to, say, how lock
//! requests are served reads in one file:
//! - `state.rs`: [`Inner`], what the request loops and the control socket
//!   share, and the questions requests ask of it (cache lifetimes, how an
//!   open file's I/O is served).
//! - `counters.rs`: the request counters, bumped by `guard.rs`.
//! - `dispatch.rs`: the `fuser::Filesystem` trait, one line per request
//!   naming the area that serves it.
//! - `guard.rs`: how every handler runs (counted, read-only refused,
//!   panics answered EIO) and where (here, or on the offload pool).
//! - `reply.rs`: answers shared by several areas (new entries, created
//!   files, empty and xattr replies).
//! - `init.rs`: what is asked of the kernel at INIT.
//! - `entries.rs` (names: lookup, create, link, rename, remove),
//!   `attrs.rs` (attributes, statfs, access), `io.rs` (open files: read,
//!   write, sync, release), `dirs.rs` (listings), `xattrs.rs`,
//!   `locks.rs` (record and flock locks), `ioctl.rs` (the ioctls served,
//!   `fileattr.rs` for inode flags).
//! - `resent.rs`: changes the kernel sends again after a crash, which
//!   the dead server may have done.

use crate::handles::HandleTable;
use crate::nodes::NodeTable;
use fuser::Request;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;
use uvfs_vfs::{Ctx, FileSystem, VfsResult, VnodeLayer, O_KILL_SUIDGID};

mod attrs;
mod counters;
mod dirs;
mod dispatch;
mod entries;
mod fileattr;
mod guard;
mod init;
mod io;
mod ioctl;
mod locks;
mod reply;
mod resent;
mod state;
mod xattrs;

pub use counters::{ChangeCounters, RequestCounters};
pub use state::{Inner, Timeouts};

/// Largest WRITE the server accepts (and tells the kernel).
pub const MAX_WRITE: u32 = 1 << 20;

/// Largest READ answered in full. The kernel asks for at most `max_pages`
/// pages (fuser derives them from `MAX_WRITE`; 16 MiB is fuser's largest
/// max_write), so this only bounds what a request may make the server
/// allocate, and keeps the reply's 32-bit length from overflowing: fuser
/// panics encoding a longer reply, outside any handler, and the request
/// loop dies (a READ of 4 GiB of a sparse file would do that).
const MAX_READ: u32 = 16 << 20;

thread_local! {
    /// Whether this thread serves an io_uring queue (fuser names them).
    static ON_URING_QUEUE: bool = std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("fuser-uring-"));
}

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

pub(crate) use crate::handles::writes;

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
                unwritten: Default::default(),
                bye: Default::default(),
                counters: RequestCounters::default(),
                evict: Default::default(),
                server_opendir,
                no_opendir: Default::default(),
                locks: Default::default(),
                offload: Default::default(),
                write_stalls: Default::default(),
                uring: Default::default(),
                uring_on: Default::default(),
                idmap: Default::default(),
                idmap_on: Default::default(),
                read_only,
                backings: Default::default(),
                refresh: Default::default(),
                changes: Default::default(),
                entry_race: Default::default(),
                trust_lost: Default::default(),
                lineage: Default::default(),
                journal: Default::default(),
            }),
        })
    }

    /// The shared state (for the control socket).
    pub fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}
