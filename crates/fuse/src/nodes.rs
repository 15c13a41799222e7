//! The node table: the one place where the kernel's lookup counts become
//! vnode holds.
//!
//! # Protocol
//! Every reply that hands the kernel a node (LOOKUP, CREATE, MKNOD, MKDIR,
//! SYMLINK, LINK, each READDIRPLUS entry other than `.` and `..`) adds one
//! to that node's `nlookup`; FORGET and BATCH_FORGET subtract what the
//! kernel says it counted. While `nlookup > 0` the table keeps one hold on
//! the node's vnode, so the vnode layer cannot recycle it and the node id
//! stays valid; at zero the entry and its hold go, and the vnode becomes
//! free once nothing else holds or uses it.
//!
//! The count is raised *before* the reply is sent, so the kernel can never
//! forget more than the table has counted. (A reply the kernel refuses,
//! because the request was interrupted meanwhile, leaves one count too
//! many: the node then lives until unmount, never too short.)
//!
//! # Node ids
//! A node id is the vnode's inode number, except that the file system's
//! root is always node id 1 (`FUSE_ROOT_ID`) and whatever inode is
//! numbered 1 takes the root's number instead: a swap, so ids stay unique.
//! Inode numbers are unique per mount for the mount's life, so the
//! generation is always 0.
//!
//! # Locking
//! Sharded by node id; a shard lock is a leaf, and holds are dropped after
//! it is released (dropping a hold may free a vnode).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use uvfs_vfs::{Errno, HoldRef, Ino, VfsResult, VnodeRef};

/// FUSE's root node id.
pub const ROOT_ID: u64 = 1;
const SHARDS: usize = 64;

struct Node {
    hold: HoldRef,
    nlookup: u64,
}

/// Counters of the node table.
#[derive(Default, Debug)]
pub struct NodeCounters {
    /// Lookup counts handed to the kernel.
    pub remembered: AtomicU64,
    /// Lookup counts the kernel gave back.
    pub forgotten: AtomicU64,
    /// Nodes dropped after their count reached zero.
    pub released: AtomicU64,
    /// FORGETs for unknown node ids or beyond the count (kernel bugs or
    /// ours; logged and clamped).
    pub forget_excess: AtomicU64,
}

/// node id -> (hold, nlookup).
pub struct NodeTable {
    shards: Box<[Mutex<HashMap<u64, Node>>]>,
    root_ino: Ino,
    /// Counters.
    pub counters: Arc<NodeCounters>,
}

impl NodeTable {
    /// A table whose root node is `root`, pinned for the table's life.
    pub fn new(root: &VnodeRef) -> NodeTable {
        let t = NodeTable {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            root_ino: root.ino(),
            counters: Arc::new(NodeCounters::default()),
        };
        t.shard(ROOT_ID).lock().insert(
            ROOT_ID,
            Node {
                hold: root.hold(),
                nlookup: 1,
            },
        );
        t
    }

    fn shard(&self, id: u64) -> &Mutex<HashMap<u64, Node>> {
        &self.shards[(id as usize) % SHARDS]
    }

    /// The node id of inode `ino`.
    pub fn node_id(&self, ino: Ino) -> u64 {
        if ino == self.root_ino {
            ROOT_ID
        } else if ino == ROOT_ID {
            self.root_ino
        } else {
            ino
        }
    }

    /// A use reference to the vnode of node `id`: `ESTALE` if the kernel
    /// names a node it was never given or has forgotten.
    pub fn get(&self, id: u64) -> VfsResult<VnodeRef> {
        let g = self.shard(id).lock();
        let node = g.get(&id).ok_or(Errno::ESTALE)?;
        node.hold.get().ok_or(Errno::ESTALE)
    }

    /// Counts one more kernel reference to `vp`; returns its node id.
    pub fn remember(&self, vp: &VnodeRef) -> u64 {
        self.remember_new(vp).0
    }

    /// Whether the kernel holds node `id`.
    pub fn contains(&self, id: u64) -> bool {
        self.shard(id).lock().contains_key(&id)
    }

    /// Like `remember`; also says whether the kernel had no reference
    /// to the node before (a new node for the evictor, `evict.rs`).
    pub fn remember_new(&self, vp: &VnodeRef) -> (u64, bool) {
        let id = self.node_id(vp.ino());
        let new;
        let stale = {
            let mut g = self.shard(id).lock();
            let node = g.entry(id).or_insert_with(|| Node {
                hold: vp.hold(),
                nlookup: 0,
            });
            new = node.nlookup == 0;
            node.nlookup += 1;
            // A forced unmount may have doomed the held vnode and the file
            // system since built a new one for the inode: hold the new one.
            if !std::ptr::eq(node.hold.vnode(), &**vp) {
                Some(std::mem::replace(&mut node.hold, vp.hold()))
            } else {
                None
            }
        };
        drop(stale);
        self.counters.remembered.fetch_add(1, Ordering::Relaxed);
        (id, new)
    }

    /// The kernel dropped `n` references to node `id`.
    pub fn forget(&self, id: u64, n: u64) {
        let gone = {
            let mut g = self.shard(id).lock();
            let Some(node) = g.get_mut(&id) else {
                self.counters.forget_excess.fetch_add(1, Ordering::Relaxed);
                return;
            };
            if n > node.nlookup {
                self.counters.forget_excess.fetch_add(1, Ordering::Relaxed);
            }
            node.nlookup = node.nlookup.saturating_sub(n);
            self.counters.forgotten.fetch_add(n, Ordering::Relaxed);
            if id == ROOT_ID {
                // The root is pinned; the kernel's count on it is not ours.
                node.nlookup = node.nlookup.max(1);
                None
            } else if node.nlookup == 0 {
                g.remove(&id)
            } else {
                None
            }
        };
        if let Some(node) = gone {
            drop(node.hold);
            self.counters.released.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Nodes the kernel holds (including the root).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Always false: the root is never forgotten.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sum of all lookup counts.
    pub fn total_lookups(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().values().map(|n| n.nlookup).sum::<u64>())
            .sum()
    }

    /// Drops every node (after the session ended).
    pub fn clear(&self) {
        for s in self.shards.iter() {
            let nodes: Vec<Node> = s.lock().drain().map(|(_, n)| n).collect();
            drop(nodes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uvfs_memfs::{MemFs, MemFsConfig};
    use uvfs_vfs::{Ctx, FileSystem};
    use uvfs_vnode::{Config, VnodeLayer};

    #[test]
    fn lookup_counts_are_holds() {
        let layer = VnodeLayer::new(Config::with_limit(64));
        let fs = MemFs::new(layer.clone(), MemFsConfig::default());
        let root = fs.root().unwrap();
        let t = NodeTable::new(&root);
        let f = fs.create(&Ctx::ROOT, &root, b"f", 0o644, 0).unwrap().0;
        let id = t.remember(&f);
        assert_eq!(t.remember(&f), id);
        assert_eq!(f.hold_count(), 1, "one hold however many lookups");
        drop(f);
        // Unknown ids are ESTALE, never a panic.
        assert_eq!(t.get(999_999).unwrap_err(), Errno::ESTALE);
        t.forget(id, 1);
        assert!(t.get(id).is_ok());
        t.forget(id, 1);
        assert_eq!(t.get(id).unwrap_err(), Errno::ESTALE);
        // Excess and unknown forgets are counted, not fatal.
        t.forget(id, 5);
        t.forget(ROOT_ID, 10);
        assert!(t.get(ROOT_ID).is_ok(), "the root stays pinned");
        assert_eq!(t.counters.forget_excess.load(Ordering::Relaxed), 2);
        assert_eq!(t.len(), 1);
    }
}
