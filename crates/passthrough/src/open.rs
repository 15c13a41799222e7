//! Open files and directories: `Fh` -> a real fd of the backing file.
//!
//! An open file's fd is counted against the fd budget like any other
//! (`FdPool::reserve_open`) but is never evicted: it lives until RELEASE.
//! Handle numbers are never reused, so a stale `Fh` is `EBADF`.
//!
//! Once open files hold their whole share of the budget, a further open
//! of a regular file already open with the same flags shares that open's
//! description ([`OpenTable::share`]) instead of failing: one process
//! may hold as many files open as its own table allows (one file opened
//! 20,000 times, LTP's `fcntl12`), and the server's table, no larger,
//! still has room for the names. All I/O is positioned, so a description
//! carries nothing one handle could see of another but its `flock`
//! locks, which therefore never go on a shared description
//! ([`OpenFile::flock_fd`]).

use crate::fdpool::Fd;
use crate::node::Node;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use uvfs_vfs::{Errno, Fh, VfsResult};

/// Open flags that give a description's I/O its meaning: two opens
/// that agree on them may share one (`OpenTable::share`).
const SHARE_FLAGS: i32 = libc::O_ACCMODE | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC;

/// One open file or directory.
pub struct OpenFile {
    /// The backing fd: this handle's own description, or one it shares
    /// with other handles of the file (`OpenTable::share`).
    pub fd: Arc<Fd>,
    /// The description this handle's `flock` locks are on, from its
    /// first lock on: `fd` if it is its own then, else one made for it.
    /// `share` gives out only a description whose handle has none set,
    /// looked at under this lock, so no lock ever goes on a description
    /// that two handles hold (it would be both handles' lock).
    flock: Mutex<Option<Arc<Fd>>>,
    /// `fd` is held by another handle too (or may be, after a share).
    shared: AtomicBool,
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

impl OpenFile {
    /// The description holding this handle's `flock` locks, if it ever
    /// took one.
    pub fn flock_fd(&self) -> Option<Arc<Fd>> {
        self.flock.lock().clone()
    }

    /// The description this handle's `flock` locks go on: `fd` if no
    /// other handle holds it, else a new one `private` opens, of the same
    /// file with the same flags, kept for the handle's life.
    pub fn flock_fd_or(&self, private: impl FnOnce() -> VfsResult<Fd>) -> VfsResult<Arc<Fd>> {
        let mut g = self.flock.lock();
        if let Some(f) = &*g {
            return Ok(f.clone());
        }
        let f = if self.shared.load(Ordering::Relaxed) {
            Arc::new(private()?)
        } else {
            self.fd.clone()
        };
        *g = Some(f.clone());
        Ok(f)
    }

    /// What stands for this handle in a successor (a live upgrade): the
    /// description holding its locks, else its `fd`.
    pub(crate) fn handover_fd(&self) -> Arc<Fd> {
        self.flock_fd().unwrap_or_else(|| self.fd.clone())
    }

    /// Never to be shared: its description may hold `flock` locks taken
    /// before this server had it (handed over, or kept across a crash).
    pub(crate) fn may_hold_locks(&self) {
        let mut g = self.flock.lock();
        if g.is_none() {
            *g = Some(self.fd.clone());
        }
    }

    /// Marks `fd` as held by other handles too.
    pub(crate) fn set_shared(&self) {
        self.shared.store(true, Ordering::Relaxed);
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
    pub fn insert(&self, fd: impl Into<Arc<Fd>>, node: Arc<Node>) -> VfsResult<Fh> {
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
        fd: impl Into<Arc<Fd>>,
        node: Arc<Node>,
        pin: Option<uvfs_vfs::VnodeRef>,
    ) -> bool {
        let mut map = self.map.write();
        if map.contains_key(&fh.0) || !node.opened() {
            return false;
        }
        self.next
            .fetch_max(fh.0.saturating_add(1), Ordering::Relaxed);
        let fd = fd.into();
        // An fd some other holder has too (`share` gave it, or a restore
        // found it named by several handles) is shared; a fresh one is
        // this handle's alone until `share` marks it.
        let shared = AtomicBool::new(Arc::strong_count(&fd) > 1);
        let of = Arc::new(OpenFile {
            fd,
            flock: Mutex::new(None),
            shared,
            node,
            dir_lock: Mutex::new(()),
            kept: Default::default(),
            _pin: pin,
        });
        map.insert(fh.0, of);
        true
    }

    /// A description of `node`'s file that an open with `flags` may share
    /// (one opened with the same `SHARE_FLAGS`, holding no `flock`
    /// lock), marked shared; None if no handle of `node` has one.
    /// A scan of every open file: it serves only opens that would
    /// otherwise be refused for want of fds.
    pub(crate) fn share(&self, node: &Arc<Node>, flags: i32) -> Option<Arc<Fd>> {
        let map = self.map.read();
        for of in map.values() {
            if !Arc::ptr_eq(&of.node, node) {
                continue;
            }
            let Ok(has) = rustix::fs::fcntl_getfl(&*of.fd) else {
                continue;
            };
            if has.bits() as i32 & SHARE_FLAGS != flags & SHARE_FLAGS {
                continue;
            }
            // Under the lock `flock_fd_or` takes: a handle locking now
            // either finds itself shared (and locks elsewhere) or has
            // set its lock's description, and is passed over.
            let g = of.flock.lock();
            if g.is_some() {
                continue;
            }
            of.shared.store(true, Ordering::Relaxed);
            return Some(of.fd.clone());
        }
        None
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
