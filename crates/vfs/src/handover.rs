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
//! The predecessor may still serve afterwards (a successor that fails to
//! start leaves it in charge), so `save` changes nothing: it duplicates
//! what it passes (`fds` are new descriptions' duplicates, never the
//! originals).
//!
//! # Versions
//! `format` names the encoding of `bytes` and its version. A successor
//! restores only a format it knows exactly and refuses any other with
//! `EPROTO`, so that a state written by another version is rejected,
//! never misread.

use crate::{Fh, VnodeRef};
use std::os::fd::OwnedFd;

/// What the server asks a file system to keep for its successor.
pub struct Keep<'a> {
    /// Nodes the kernel knows (it may name any of them in a request).
    pub nodes: &'a [VnodeRef],
    /// Open files and directories: each vnode with the handle its open
    /// returned.
    pub open: &'a [(VnodeRef, Fh)],
}

/// A file system's state for its successor.
pub struct Saved {
    /// The encoding of `bytes` and its version, e.g. `"uvfs-memfs/1"`.
    pub format: String,
    /// The state itself.
    pub bytes: Vec<u8>,
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
