//! Open files and directories: FUSE file handle -> (vnode, fs handle).
//!
//! Each open keeps a use reference on its vnode until RELEASE, so the
//! vnode layer sees open files as users (and memfs keeps an unlinked
//! file's data exactly as long as one is open). Handle numbers are never
//! reused, so a stale handle is `EBADF`, not someone else's file.

use crate::journal::Journal;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use uvfs_vfs::{Errno, Fh, VfsResult, VnodeRef};

const SHARDS: usize = 32;

/// Whether `open(2)` flags ask for write access.
pub(crate) fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

/// One open file or directory.
#[derive(Clone)]
pub struct OpenFile {
    /// The file (a use reference).
    pub vp: VnodeRef,
    /// The file system's own handle.
    pub fh: Fh,
    /// Opened for writing: the kernel may hold dirty pages of it (a
    /// shared writable mapping) that the file system has not seen yet.
    pub writable: bool,
    /// The node whose I/O mode this open counts in (`backing.rs`), if it
    /// does: RELEASE then undoes that.
    pub backing_node: Option<u64>,
    /// Open for writing on its backing file (`backing::Writers`).
    pub kernel_writer: bool,
    /// The flags it was opened with (a server started after a crash
    /// opens it again with them, `journal/`).
    pub flags: i32,
    /// Its node's backing id, if the kernel does its I/O.
    pub backing_id: Option<u32>,
}

impl OpenFile {
    /// As the crash journal keeps it.
    pub(crate) fn journal_rec(&self) -> crate::journal::OpenRec {
        crate::journal::OpenRec {
            ino: self.vp.ino(),
            fs_fh: self.fh.0,
            flags: self.flags,
            writable: self.writable,
            kernel_writer: self.kernel_writer,
            dir: self.vp.vtype() == uvfs_vfs::VType::Dir,
            backing: self.backing_node.map(|_| self.backing_id),
        }
    }
}

impl OpenFile {
    /// A file system handle opened for one request and released after
    /// it (a request naming no open file): read-only, no backing file.
    pub fn transient(vp: VnodeRef, fh: Fh) -> OpenFile {
        OpenFile {
            vp,
            fh,
            writable: false,
            backing_node: None,
            kernel_writer: false,
            flags: 0,
            backing_id: None,
        }
    }
}

/// FUSE handle -> open file.
pub struct HandleTable {
    shards: Box<[Mutex<HashMap<u64, OpenFile>>]>,
    next: AtomicU64,
    /// Where opens and releases are journaled for crash recovery, once
    /// a supervisor keeps one (`journal/`).
    journal: OnceLock<Arc<Journal>>,
    /// Handles a crashed server's journal listed whose files are gone
    /// (`upgrade::import`): struck from the journal once it is attached.
    unrecovered: Mutex<Vec<u64>>,
}

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            next: AtomicU64::new(1),
            journal: OnceLock::new(),
            unrecovered: Mutex::new(Vec::new()),
        }
    }
}

impl HandleTable {
    fn shard(&self, h: u64) -> &Mutex<HashMap<u64, OpenFile>> {
        &self.shards[(h as usize) % SHARDS]
    }

    /// Registers an open file opened with `flags`; returns its FUSE
    /// handle.
    pub fn insert(&self, vp: VnodeRef, fh: Fh, flags: i32) -> u64 {
        self.insert_file(OpenFile {
            vp,
            fh,
            writable: writes(flags),
            backing_node: None,
            kernel_writer: false,
            flags,
            backing_id: None,
        })
    }

    /// Registers `f`; returns its FUSE handle. Journaled before the
    /// caller replies (`journal/`).
    pub fn insert_file(&self, f: OpenFile) -> u64 {
        let h = self.next.fetch_add(1, Ordering::Relaxed);
        if let Some(j) = self.journal.get() {
            j.opened(h, &f.journal_rec());
        }
        self.shard(h).lock().insert(h, f);
        h
    }

    /// Journals every open from now on, the ones open now first unless
    /// the journal has them (`fill` false); before requests are served.
    pub(crate) fn attach_journal(&self, j: Arc<Journal>, fill: bool) {
        if fill {
            for (h, f) in self.snapshot().0 {
                j.opened(h, &f.journal_rec());
            }
        }
        for h in std::mem::take(&mut *self.unrecovered.lock()) {
            j.closed(h);
        }
        let _ = self.journal.set(j);
    }

    /// Handle `h` of a crashed server could not be recovered (its file is
    /// gone): not in the table, and struck from the journal it is
    /// attached to next, so a later crash does not look for it again.
    pub(crate) fn unrecovered(&self, h: u64) {
        self.unrecovered.lock().push(h);
    }

    /// Whether the kernel may hold pages of `vp` written through a shared
    /// mapping that the file system has not seen: some handle is open for
    /// writing with the server doing its I/O. (A kernel writer's pages are
    /// its backing file's own, which the source sees as they are written.)
    /// A scan of every open handle: for rare requests only (`lseek`).
    pub fn may_hold_unseen_writes(&self, vp: &VnodeRef) -> bool {
        self.shards.iter().any(|s| {
            s.lock()
                .values()
                .any(|f| f.writable && !f.kernel_writer && f.vp.ino() == vp.ino())
        })
    }

    /// The open file behind handle `h`.
    pub fn get(&self, h: u64) -> VfsResult<OpenFile> {
        self.shard(h).lock().get(&h).cloned().ok_or(Errno::EBADF)
    }

    /// Unregisters handle `h` (RELEASE).
    pub fn remove(&self, h: u64) -> VfsResult<OpenFile> {
        let f = self.shard(h).lock().remove(&h).ok_or(Errno::EBADF)?;
        if let Some(j) = self.journal.get() {
            j.closed(h);
        }
        Ok(f)
    }

    /// Open handles.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True if nothing is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every open handle (for a live upgrade, `upgrade/`), and the next
    /// number this table would hand out.
    pub fn snapshot(&self) -> (Vec<(u64, OpenFile)>, u64) {
        let mut all = Vec::new();
        for s in self.shards.iter() {
            all.extend(s.lock().iter().map(|(h, f)| (*h, f.clone())));
        }
        (all, self.next.load(Ordering::Relaxed))
    }

    /// Registers `f` under the number `h` a replaced server gave it, and
    /// hands out no number below `next` from now on (numbers are never
    /// reused, across an upgrade too).
    pub fn insert_at(&self, h: u64, f: OpenFile, next: u64) {
        self.shard(h).lock().insert(h, f);
        self.next.fetch_max(next.max(h + 1), Ordering::Relaxed);
    }

    /// Drops every handle (after the session ended).
    pub fn clear(&self) {
        for s in self.shards.iter() {
            let all: Vec<OpenFile> = s.lock().drain().map(|(_, f)| f).collect();
            drop(all);
        }
    }
}

impl crate::report::Counted for HandleTable {
    fn report(&self, out: &mut crate::report::Report) {
        out.put(
            "fuse.handles.open",
            self.len() as u64,
            "Open file and directory handles",
        );
    }
}
