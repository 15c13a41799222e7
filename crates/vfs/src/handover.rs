//! Live upgrade: what a file system hands to the process that takes its
//! mount over (`uvfs upgrade`), so that programs using the mount notice
//! nothing.
//!
//! # Contract
//! The FUSE server freezes (no request is being served), then asks the
//! file system to [`save`](crate::FileSystem::save) what its successor
//! needs to go on serving [`Keep`]: the nodes the kernel knows and the
//! files and directories the kernel holds open. The successor builds the
//! same kind of file system from the [`Saved`] state (a constructor of
//! the concrete type, e.g. `MemFs::restore`) in which:
//! - `root()` has the same inode number;
//! - `vget(ino)` finds every kept node, as the same file with the same
//!   inode number, type and contents (lazily is fine: the server asks
//!   for a node only when the kernel names it);
//! - every kept `(vnode, fh)` pair's `fh` names the same open file or
//!   directory (same access mode, same locks, same listing position).
//!
//! # Ahead of the pause
//! `save` runs with every request waiting, and a million nodes are a
//! million records to make. So the server may first call
//! [`save_ahead`](crate::FileSystem::save_ahead) with the nodes the
//! kernel knows while requests are still served, and then `save` with
//! [`Keep::ahead`] set and `nodes` holding only the nodes known since
//! that were not given to `save_ahead` (new ones, and ones known for a
//! moment since). `save` must then cover both: every node given to
//! `save_ahead` (known now or not) and `nodes`. What `save_ahead` makes
//! must stay true while the server serves on (a node's identity, not
//! its contents); a file system that cannot promise that for some node
//! returns `None`, and then gets every node in `save`.
//!
//! The predecessor may still serve afterwards (a successor that fails to
//! start leaves it in charge), so `save` changes nothing: it duplicates
//! what it passes (`fds` are new descriptions' duplicates, never the
//! originals).
//!
//! # After the hand-over
//! A state may share memory with the predecessor rather than copy it
//! (memfs passes its page files on as they are). Then two rules keep
//! either side from destroying what the other serves from: the
//! predecessor, told [`handed_over`](crate::FileSystem::handed_over)
//! once the successor has taken the mount, changes nothing shared any
//! more (its own drops on the way out included); and the successor
//! changes nothing shared beyond serving requests until told
//! [`taken_over`](crate::FileSystem::taken_over), since until then a
//! failure leaves the predecessor serving and the successor dropping
//! what it restored.
//!
//! # Versions
//! `format` names the encoding of `bytes` and its version. A successor
//! restores only a format it knows exactly and refuses any other with
//! `EPROTO`, so that a state written by another version is rejected,
//! never misread.

use crate::{Fh, Ino, VnodeRef};
use std::os::fd::OwnedFd;

pub use bytes::Bytes;

/// What the server asks a file system to keep for its successor.
#[derive(Default)]
pub struct Keep<'a> {
    /// Nodes the kernel knows (it may name any of them in a request).
    /// With `ahead`: only those not given to `save_ahead`.
    pub nodes: &'a [VnodeRef],
    /// Open files and directories: each vnode with the handle its open
    /// returned.
    pub open: &'a [(VnodeRef, Fh)],
    /// What [`save_ahead`](crate::FileSystem::save_ahead) made of the
    /// nodes the kernel knew a moment before, while requests were still
    /// served.
    pub ahead: Option<&'a Ahead>,
}

/// Part of a file system's state made ahead of
/// [`save`](crate::FileSystem::save) while requests are still served
/// ([`save_ahead`](crate::FileSystem::save_ahead)), handed back to `save`
/// in [`Keep::ahead`]; the file system's own type, opaque to the server.
pub type Ahead = Box<dyn std::any::Any + Send + Sync>;

/// A file system's state for its successor.
pub struct Saved {
    /// The encoding of `bytes` and its version, e.g. `"uvfs-memfs/1"`.
    pub format: String,
    /// The state itself. Shared and immutable: what a successor receives
    /// may be a mapping of the memfd the predecessor wrote it to, read in
    /// place (`From<Vec<u8>>` for a state built in memory).
    pub bytes: bytes::Bytes,
    /// Descriptors the state refers to (by index into this vector).
    pub fds: Vec<OwnedFd>,
}

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Saved")
            .field("format", &self.format)
            .field("bytes", &self.bytes.len())
            .field("fds", &self.fds.len())
            .finish()
    }
}

/// Bytes of a node's record in a crash journal.
pub const JOURNAL_RECORD: usize = 24;

/// A node's record in the crash journal the FUSE server keeps beside its
/// supervisor (`FileSystem::journal_record`): enough for a server started
/// after a crash to find the node again with nothing else kept (for a
/// passthrough, the source file's handle). The file system alone reads it.
pub type JournalRecord = [u8; JOURNAL_RECORD];

/// What a server started after its predecessor crashed knows of the file
/// system's nodes and open files: the journal's contents. The file
/// system's restore constructor takes it with the state `save` gave at
/// mount (its identity, nothing kept), and must then resolve every node
/// in `nodes` by `vget` and every open in `opens` by its handle, as for a
/// live upgrade ([`Keep`]); open files are opened again with their flags.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Nodes the kernel knows: inode number and record.
    pub nodes: Vec<(Ino, JournalRecord)>,
    /// Open files and directories the kernel holds.
    pub opens: Vec<RecoveredOpen>,
    /// The descriptors the file system gave its [`FdKeeper`], as it gave
    /// them (the same open file descriptions: the locks on them held).
    pub kept: Vec<KeptFd>,
}

/// A descriptor a file system gave its [`FdKeeper`].
#[derive(Debug)]
pub struct KeptFd {
    /// Its key.
    pub key: u64,
    /// What the file system said of it.
    pub meta: Vec<u8>,
    /// The descriptor.
    pub fd: OwnedFd,
}

/// Keeps descriptors outside the server's process (its crash supervisor),
/// so that what they hold outlives a crash: open file descriptions
/// holding locks, which would be released when the process dies. A server
/// started after the crash gets them back ([`Recovery::kept`]).
pub trait FdKeeper: Send + Sync {
    /// Keeps a duplicate of `fd` under `key` (replacing what `key` kept),
    /// with `meta` (at most 64 bytes) to say what it is.
    fn keep(&self, key: u64, meta: &[u8], fd: std::os::fd::BorrowedFd<'_>);
    /// Closes what `key` keeps, before returning: a lock on it must be
    /// gone when the file system's own descriptor of it closes.
    fn forget(&self, key: u64);
}

/// An open file or directory the crashed server had handed the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredOpen {
    /// Its inode number.
    pub ino: Ino,
    /// The handle the file system's open returned.
    pub fh: Fh,
    /// The flags it was opened with (`open(2)`'s).
    pub flags: i32,
    /// A directory (opened by `opendir`).
    pub dir: bool,
}
