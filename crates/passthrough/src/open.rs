//! Open files and directories: `Fh` -> a real fd of the backing file.
//!
//! An open file's fd is counted against the fd budget like any other
//! (`FdPool::reserve_open`) and lives until RELEASE, unless open files
//! spend their whole share of the budget: then idle handles of regular
//! files give theirs back and reopen it when next needed (`park.rs`).
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use uvfs_vfs::{Errno, Fh, VfsResult};

/// Open flags that give a description's I/O its meaning: two opens
/// that agree on them may share one (`OpenTable::share`).
const SHARE_FLAGS: i32 = libc::O_ACCMODE | libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC;

/// What an open file holds of its backing file.
pub(crate) enum Desc {
    /// This handle's own description, or one it shares with other
    /// handles of the file (`OpenTable::share`).
    Held(Arc<Fd>),
    /// Given back to the budget (`park.rs`): reopened with these flags
    /// (`F_GETFL`'s) when next needed.
    Parked(i32),
}

/// One open file or directory.
pub struct OpenFile {
    /// The backing fd, or how to open it again. Read on every request of
    /// the handle; written only when it is parked or reopened. Taken
    /// after `flock` where both are (`flock_fd_or`, `park`).
    pub(crate) desc: RwLock<Desc>,
    /// Used since the parker last looked (its second chance).
    pub(crate) used: AtomicBool,
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
    /// The table's count of parked handles, which this one is in while
    /// `desc` is `Parked` (`OpenTable::parked`).
    parked_count: Arc<AtomicUsize>,
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        if matches!(*self.desc.get_mut(), Desc::Parked(_)) {
            self.parked_count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl OpenFile {
    /// The fd it holds now: None if parked (`PassthroughFs::file_fd`
    /// reopens it).
    pub(crate) fn held(&self) -> Option<Arc<Fd>> {
        match &*self.desc.read() {
            Desc::Held(fd) => Some(fd.clone()),
            Desc::Parked(_) => None,
        }
    }

    /// The description holding this handle's `flock` locks, if it ever
    /// took one.
    pub fn flock_fd(&self) -> Option<Arc<Fd>> {
        self.flock.lock().clone()
    }

    /// The description this handle's `flock` locks go on: its fd if no
    /// other handle holds it, else (shared, or parked) a new one `private`
    /// opens, of the same file with the same flags, kept for the handle's
    /// life. Under the `flock` lock, which `park` takes first too: a
    /// handle is never parked with its fd about to hold a lock.
    pub fn flock_fd_or(&self, private: impl FnOnce() -> VfsResult<Fd>) -> VfsResult<Arc<Fd>> {
        let mut g = self.flock.lock();
        if let Some(f) = &*g {
            return Ok(f.clone());
        }
        let f = match self.held() {
            Some(fd) if !self.shared.load(Ordering::Relaxed) => fd,
            _ => Arc::new(private()?),
        };
        *g = Some(f.clone());
        Ok(f)
    }

    /// What stands for this handle in a successor (a live upgrade): the
    /// description holding its locks, else its fd, else (parked) the
    /// flags to open it again with.
    pub(crate) fn handover(&self) -> Result<Arc<Fd>, i32> {
        if let Some(fd) = self.flock_fd() {
            return Ok(fd);
        }
        match &*self.desc.read() {
            Desc::Held(fd) => Ok(fd.clone()),
            Desc::Parked(flags) => Err(*flags),
        }
    }

    /// Never to be shared: its description may hold `flock` locks taken
    /// before this server had it (handed over, or kept across a crash).
    pub(crate) fn may_hold_locks(&self) {
        let mut g = self.flock.lock();
        if g.is_none() {
            *g = self.held();
        }
    }

    /// Gives this handle's fd back to the budget if nothing needs it
    /// (`park.rs`): a regular file the node's handle reopens (named, not
    /// an orphan), its description its own (not shared, not kept by the
    /// crash supervisor, holding no `flock` lock) and no request using it
    /// now. Only tries locks: a busy handle is passed over, never waited
    /// for. Whether the fd went.
    pub(crate) fn park(&self) -> bool {
        if self.shared.load(Ordering::Relaxed) || !self.parkable() {
            return false;
        }
        // `flock` first, as `flock_fd_or` holds it while it reads `desc`:
        // a lock being taken now either finds the handle parked (and
        // locks a description of its own) or holds `flock`, and the
        // handle is passed over.
        let Some(fl) = self.flock.try_lock() else {
            return false;
        };
        if fl.is_some() {
            return false;
        }
        let Some(mut d) = self.desc.try_write() else {
            return false;
        };
        let Desc::Held(fd) = &*d else {
            return false;
        };
        // Ours alone: no request is using it, no other handle shares it.
        // Every clone of it is made under `desc`'s read lock (`held`,
        // `handover`) or under `flock` (`flock_fd_or`), both held here,
        // so none can appear between this count and the swap below; a
        // clone dropped meanwhile only makes the handle look busy.
        if Arc::strong_count(fd) > 1 {
            return false;
        }
        let Ok(flags) = rustix::fs::fcntl_getfl(&**fd) else {
            return false;
        };
        // Counted parked, then the node looked at again with `desc`
        // locked: a removal of the file's last name marks the node
        // (SeqCst) before it reads the count and looks for parked
        // handles (`keep_reachable`, on this lock's read side), so either
        // the mark is seen here or the count and this handle there.
        self.parked_count.fetch_add(1, Ordering::SeqCst);
        if self.node.nameless_by_mount() {
            self.parked_count.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let old = std::mem::replace(&mut *d, Desc::Parked(flags.bits() as i32));
        drop(d);
        drop(fl);
        // Closed here: its slot of the open files' share goes back.
        drop(old);
        true
    }

    /// Whether a description of its own opened again would do for this
    /// handle: a regular file its node's handle leads back to, holding
    /// no `flock` lock, not kept by the crash supervisor.
    pub(crate) fn parkable(&self) -> bool {
        !self.kept.load(Ordering::Relaxed)
            && self.node.kind() == uvfs_vfs::VType::Reg
            && !self.node.nameless_by_mount()
            && self.node.ident().handle().is_some()
            && self.flock.try_lock().is_some_and(|g| g.is_none())
    }

    /// The flags to reopen a parked handle with; None if it holds its fd.
    pub(crate) fn parked_flags(&self) -> Option<i32> {
        match &*self.desc.read() {
            Desc::Parked(flags) => Some(*flags),
            Desc::Held(_) => None,
        }
    }

    /// Installs `fd`, just reopened for this parked handle, and returns
    /// the fd it holds: `fd`, or the one a concurrent request reopened
    /// first (then `fd` is closed).
    pub(crate) fn unpark(&self, fd: Arc<Fd>) -> Arc<Fd> {
        let mut d = self.desc.write();
        match &*d {
            Desc::Held(held) => held.clone(),
            Desc::Parked(_) => {
                *d = Desc::Held(fd.clone());
                self.parked_count.fetch_sub(1, Ordering::SeqCst);
                fd
            }
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
    /// Handles parked now (`park.rs`), or taken over parked: while none
    /// is, a removal need not look for any. Each handle counts itself in
    /// and out as its `desc` changes (`OpenFile::park`, `unpark`, drop).
    parked: Arc<AtomicUsize>,
}

impl Default for OpenTable {
    fn default() -> Self {
        OpenTable {
            map: RwLock::new(HashMap::new()),
            next: AtomicU64::new(1),
            parked: Arc::default(),
        }
    }
}

impl OpenTable {
    /// Registers an open file; counts it on its node. `ENFILE` if the
    /// node's open count is full (see `Node::opened`).
    pub fn insert(&self, fd: impl Into<Arc<Fd>>, node: Arc<Node>) -> VfsResult<Fh> {
        let h = self.next.fetch_add(1, Ordering::Relaxed);
        if !self.insert_as(Fh(h), Desc::Held(fd.into()), node, None) {
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
        desc: Desc,
        node: Arc<Node>,
        pin: Option<uvfs_vfs::VnodeRef>,
    ) -> bool {
        let mut map = self.map.write();
        if map.contains_key(&fh.0) || !node.opened() {
            return false;
        }
        self.next
            .fetch_max(fh.0.saturating_add(1), Ordering::Relaxed);
        // An fd some other holder has too (`share` gave it, or a restore
        // found it named by several handles) is shared; a fresh one is
        // this handle's alone until `share` marks it.
        let shared = AtomicBool::new(matches!(&desc, Desc::Held(fd) if Arc::strong_count(fd) > 1));
        if matches!(desc, Desc::Parked(_)) {
            self.parked.fetch_add(1, Ordering::SeqCst);
        }
        let of = Arc::new(OpenFile {
            desc: RwLock::new(desc),
            used: AtomicBool::new(true),
            flock: Mutex::new(None),
            shared,
            node,
            dir_lock: Mutex::new(()),
            kept: Default::default(),
            _pin: pin,
            parked_count: self.parked.clone(),
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
            let Some(fd) = of.held() else {
                continue;
            };
            let Ok(has) = rustix::fs::fcntl_getfl(&*fd) else {
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
            return Some(fd);
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

    /// Runs `f` on every open file, under the table's read lock (no
    /// insert or remove meanwhile); stops when `f` says so.
    pub(crate) fn each(&self, mut f: impl FnMut(Fh, &Arc<OpenFile>) -> bool) {
        for (h, o) in self.map.read().iter() {
            if !f(Fh(*h), o) {
                return;
            }
        }
    }

    /// Handles parked now.
    pub(crate) fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Open files now.
    pub fn len(&self) -> usize {
        self.map.read().len()
    }
}
