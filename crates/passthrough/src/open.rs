//! Open files and directories: `Fh` -> a real fd of the backing file.
//!
//! An open file's fd is counted against the fd budget like any other
//! (`FdPool::reserve_open`) but is never evicted: it lives until RELEASE.
//! Handle numbers are never reused, so a stale `Fh` is `EBADF`.

use crate::fdpool::Fd;
use crate::node::Node;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use uvfs_vfs::{Errno, Fh, VfsResult};

/// One open file or directory.
pub struct OpenFile {
    /// The backing fd.
    pub fd: Fd,
    /// The node it was opened on.
    pub node: Arc<Node>,
    /// Serialises `seek + getdents` of a directory stream.
    pub dir_lock: Mutex<()>,
    /// Given to the crash supervisor for its `flock` locks (`kept.rs`).
    pub kept: std::sync::atomic::AtomicBool,
    /// The node's vnode, held by an open file a predecessor handed over
    /// (`handover`): until the successor's front end names the node
    /// again, nothing else keeps the vnode from being recycled, and a
    /// recycled one would come back as another `Node` than `node`.
    _pin: Option<uvfs_vfs::VnodeRef>,
}

impl std::os::fd::AsFd for OpenFile {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `Fh` -> open file.
pub struct OpenTable {
    map: RwLock<HashMap<u64, Arc<OpenFile>>>,
    next: AtomicU64,
}

impl Default for OpenTable {
    fn default() -> Self {
        OpenTable {
            map: RwLock::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }
}

impl OpenTable {
    /// Registers an open file; counts it on its node. `ENFILE` if the
    /// node's open count is full (see `Node::opened`).
    pub fn insert(&self, fd: Fd, node: Arc<Node>) -> VfsResult<Fh> {
        let h = self.next.fetch_add(1, Ordering::Relaxed);
        if !self.insert_as(Fh(h), fd, node, None) {
            return Err(Errno::ENFILE);
        }
        Ok(Fh(h))
    }

    /// Registers an open file a predecessor handed over under its handle
    /// number; numbers handed out later start above it. `false` (nothing
    /// done) if `fh` is taken or the node's open count is full.
    pub(crate) fn insert_as(
        &self,
        fh: Fh,
        fd: Fd,
        node: Arc<Node>,
        pin: Option<uvfs_vfs::VnodeRef>,
    ) -> bool {
        let mut map = self.map.write();
        if map.contains_key(&fh.0) || !node.opened() {
            return false;
        }
        self.next
            .fetch_max(fh.0.saturating_add(1), Ordering::Relaxed);
        let of = Arc::new(OpenFile {
            fd,
            node,
            dir_lock: Mutex::new(()),
            kept: Default::default(),
            _pin: pin,
        });
        map.insert(fh.0, of);
        true
    }

    /// The next handle number (a live upgrade's state).
    pub(crate) fn next_fh(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Hands out numbers from `n` up (never below those in use).
    pub(crate) fn set_next_fh(&self, n: u64) {
        self.next.fetch_max(n, Ordering::Relaxed);
    }

    /// The open file behind `fh`.
    pub fn get(&self, fh: Fh) -> VfsResult<Arc<OpenFile>> {
        self.map.read().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    /// Unregisters `fh`; the fd closes when the last operation using it
    /// finishes.
    pub fn remove(&self, fh: Fh) -> VfsResult<()> {
        let of = self.map.write().remove(&fh.0).ok_or(Errno::EBADF)?;
        of.node.closed();
        Ok(())
    }

    /// Every open file now.
    pub(crate) fn all(&self) -> Vec<(Fh, Arc<OpenFile>)> {
        self.map
            .read()
            .iter()
            .map(|(h, o)| (Fh(*h), o.clone()))
            .collect()
    }

    /// Open files now.
    pub fn len(&self) -> usize {
        self.map.read().len()
    }
}
