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
    /// Registers an open file; counts it on its node.
    pub fn insert(&self, fd: Fd, node: Arc<Node>) -> Fh {
        node.opened();
        let h = self.next.fetch_add(1, Ordering::Relaxed);
        let of = Arc::new(OpenFile {
            fd,
            node,
            dir_lock: Mutex::new(()),
        });
        self.map.write().insert(h, of);
        Fh(h)
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

    /// Open files now.
    pub fn len(&self) -> usize {
        self.map.read().len()
    }
}
