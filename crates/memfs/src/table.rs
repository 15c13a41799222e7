//! The inode table: every linked memfs inode by number.
//!
//! An inode is in the table while it has a name (nlink > 0); the table's
//! `Arc` is what keeps it alive when no vnode caches it. Unlinking the
//! last name removes it; any vnode that still caches it keeps its own
//! `Arc` until the vnode is recycled.
//!
//! The table is sharded by inode number so creates and lookups in
//! different directories do not meet on one lock. A shard lock is a leaf:
//! nothing else is locked while one is held.

use crate::inode::Inode;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use uvfs_vfs::Ino;

const SHARDS: usize = 32;

/// Inode number of the root directory (the FUSE root node id).
pub const ROOT_INO: Ino = 1;

/// ino -> inode, plus the inode number allocator.
#[derive(Debug)]
pub struct InodeTable {
    shards: Vec<RwLock<HashMap<Ino, Arc<Inode>>>>,
    next_ino: AtomicU64,
    len: AtomicUsize,
}

impl InodeTable {
    /// An empty table whose first allocated number follows the root's.
    pub fn new() -> InodeTable {
        InodeTable {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            next_ino: AtomicU64::new(ROOT_INO + 1),
            len: AtomicUsize::new(0),
        }
    }

    fn shard(&self, ino: Ino) -> &RwLock<HashMap<Ino, Arc<Inode>>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// A fresh inode number (never reused, so node ids need no generation).
    pub fn alloc_ino(&self) -> Ino {
        self.next_ino.fetch_add(1, Ordering::Relaxed)
    }

    /// The number `alloc_ino` gives next.
    pub fn next_ino(&self) -> Ino {
        self.next_ino.load(Ordering::Relaxed)
    }

    /// Makes `alloc_ino` continue from `next` (a restored table, whose
    /// numbers below `next` may be known to the kernel).
    pub fn set_next_ino(&self, next: Ino) {
        self.next_ino.store(next, Ordering::Relaxed);
    }

    /// Every linked inode, in no particular order.
    pub fn snapshot(&self) -> Vec<Arc<Inode>> {
        let mut out = Vec::with_capacity(self.len());
        for shard in &self.shards {
            out.extend(shard.read().values().cloned());
        }
        out
    }

    /// The inode numbered `ino`, if it is linked.
    pub fn get(&self, ino: Ino) -> Option<Arc<Inode>> {
        self.shard(ino).read().get(&ino).cloned()
    }

    /// Adds a new inode.
    pub fn insert(&self, inode: Arc<Inode>) {
        if self
            .shard(inode.ino)
            .write()
            .insert(inode.ino, inode)
            .is_none()
        {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes an inode whose last link is gone.
    pub fn remove(&self, ino: Ino) -> Option<Arc<Inode>> {
        let mut shard = self.shard(ino).write();
        let gone = shard.remove(&ino);
        // Emptied by a mass removal, a shard would keep its peak capacity
        // for ever: rehashed smaller once seven-eighths empty (O(what is
        // left), after at least three times as many removals).
        if shard.capacity() > 64 && shard.len() * 8 < shard.capacity() {
            let keep = shard.len() * 2;
            shard.shrink_to(keep);
        }
        drop(shard);
        if gone.is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        gone
    }

    /// Linked inodes.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::new()
    }
}
