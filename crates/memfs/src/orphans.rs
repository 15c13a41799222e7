//! Removed files whose last open is gone while the kernel still holds
//! them: their data stays, as tmpfs's does, until the kernel lets them
//! go, unless the space is wanted first.
//!
//! # Why the data stays
//! A file reaches no name once removed, but the kernel can still reach
//! it without an open: an `O_PATH` descriptor, a fanotify event waiting
//! to be read (which opens the file when it is), `/proc/PID/fd` of such
//! a descriptor. Each holds the kernel's inode, so the server's node,
//! and opens it again later. Freed at the file's last close, the data
//! would be gone for those: an empty file, silently.
//!
//! # Why it is not counted as used
//! The kernel holds every removed file for a moment: the FORGET that
//! lets it go is queued during the removal and read by a /dev/fuse loop
//! while the caller's next request may already be served from an
//! io_uring queue. So `rm big; df` would show the space still used, and
//! `rm big; write` on a full memfs would fail where tmpfs, which frees
//! at once, succeeds. The data of such files (orphans) is counted free by
//! `statfs`, and a write, allocation or copy that runs out of space frees
//! the data of every orphan nobody has open and tries once more: what
//! waited for a descriptor that is never read again goes when the space
//! is wanted, never before.

use crate::inode::Inode;
use crate::io_lock;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use uvfs_vfs::{Ino, Mount, VnodeLayer};

/// Removed files whose data stays while the kernel holds them.
#[derive(Default)]
pub(crate) struct Orphans {
    list: Mutex<List>,
}

/// Every removed file (`rm` of any file with data) is listed until the
/// kernel's FORGET lets it go, which may lag a `rm -rf` by thousands:
/// dead entries are dropped once the map doubled since the last sweep,
/// so adding stays O(1) amortized.
#[derive(Default)]
struct List {
    by_ino: HashMap<Ino, Weak<Inode>>,
    swept_at: usize,
}

impl List {
    fn sweep(&mut self) {
        self.by_ino.retain(|_, w| w.strong_count() > 0);
        self.swept_at = self.by_ino.len();
    }

    /// The live ones (sweeping first).
    fn live(&mut self) -> Vec<(Ino, Arc<Inode>)> {
        self.sweep();
        self.by_ino
            .iter()
            .filter_map(|(ino, w)| Some((*ino, w.upgrade()?)))
            .collect()
    }
}

impl Orphans {
    /// `inode` lost its last name and its last user while something
    /// still holds its vnode (again, after `reclaim` looked at it).
    pub(crate) fn add(&self, ino: Ino, inode: Weak<Inode>) {
        let mut l = self.list.lock();
        if l.by_ino.len() >= 2 * l.swept_at.max(64) {
            l.sweep();
        }
        l.by_ino.insert(ino, inode);
    }

    /// Pages the orphans' data holds.
    pub(crate) fn pages(&self) -> u64 {
        let live = self.list.lock().live();
        live.iter()
            .filter(|(_, i)| i.nlink() == 0)
            .filter_map(|(_, i)| i.file().map(|f| f.pages()))
            .sum()
    }

    /// Frees the data of every orphan nobody has open; whether any page
    /// was freed. Called with no lock of any file held (a write that ran
    /// out of space has let its own go).
    pub(crate) fn reclaim(&self, layer: &VnodeLayer, mnt: &Mount) -> bool {
        let taken = self.list.lock().live();
        let mut freed = false;
        for (ino, inode) in taken {
            let Some(f) = inode.file() else { continue };
            if inode.nlink() != 0 || f.pages() == 0 {
                continue;
            }
            match layer.lookup_cached(mnt, ino) {
                // Opened again (a user besides this lookup's): its data
                // is in use, and comes back here when the last user goes.
                Some(vp) if vp.use_count() > 1 => continue,
                Some(vp) => {
                    // Under the file's I/O lock: an open that raced in
                    // reads all of it or none of it.
                    let _g = io_lock::lock_write(&vp, 0..u64::MAX);
                    freed |= f.truncate(0).is_ok();
                }
                None => freed |= f.truncate(0).is_ok(),
            }
        }
        freed
    }
}
