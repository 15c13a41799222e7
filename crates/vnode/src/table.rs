//! The (mount, inode) -> vnode table: many small locked shards, so lookups
//! of different files never share a lock (FreeBSD's `vfs_hash` uses one).

use crate::hash::{mix, MixBuild};
use crate::ids::{Ino, MountId};
use crate::sync::{Arc, Mutex, MutexGuard};
use crate::vnode::Vnode;
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use std::hash::BuildHasher;

/// Inode numbers per shard run: file systems hand out inode numbers in
/// creation order, so the files of one directory tend to be neighbours. A
/// run of neighbours shares a shard, and a thread working through one
/// directory keeps that shard's lock and buckets in its own cache instead
/// of pulling a different shard's lines from another core on every file.
pub(crate) const INO_RUN_SHIFT: u32 = 6;

/// The shard (of `n`, a power of two) for an inode of a mount.
#[inline]
pub(crate) fn shard_index(mnt: MountId, ino: Ino, n: usize) -> usize {
    mix((ino >> INO_RUN_SHIFT) ^ (mnt.0 as u64).rotate_left(48)) as usize & (n - 1)
}

pub(crate) type Key = (MountId, Ino);

/// One shard's vnodes by (mount, inode). The key is not stored: every
/// vnode carries its own inode number and mount, so an entry is just the
/// `Arc` (8 bytes and a control byte; a map keyed by a copy would take
/// 24 and one): a table entry per cached file is paid a million times
/// over by a server whose kernel remembers a million files.
#[derive(Default)]
pub(crate) struct Map {
    t: HashTable<Arc<Vnode>>,
}

#[inline]
fn hash(key: Key) -> u64 {
    MixBuild::default().hash_one(key)
}

#[inline]
fn key_of(vp: &Vnode) -> Key {
    (vp.mount_id(), vp.ino())
}

impl Map {
    #[inline]
    pub(crate) fn get(&self, key: &Key) -> Option<&Arc<Vnode>> {
        self.t.find(hash(*key), |v| key_of(v) == *key)
    }

    /// Enters `vp` under its own key (replacing any vnode there).
    pub(crate) fn insert(&mut self, key: Key, vp: Arc<Vnode>) {
        debug_assert!(key_of(&vp) == key);
        match self
            .t
            .entry(hash(key), |v| key_of(v) == key, |v| hash(key_of(v)))
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = vp,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(vp);
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &Key) -> Option<Arc<Vnode>> {
        self.t
            .find_entry(hash(*key), |v| key_of(v) == *key)
            .ok()
            .map(|e| e.remove().0)
    }

    pub(crate) fn len(&self) -> usize {
        self.t.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.t.capacity()
    }

    pub(crate) fn shrink_to(&mut self, n: usize) {
        self.t.shrink_to(n, |v| hash(key_of(v)));
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Arc<Vnode>> {
        self.t.iter()
    }
}

/// Capacity under which a shard is never shrunk (not worth a rehash).
const MIN_SHRINK: usize = 64;

pub(crate) struct Table {
    shards: Box<[CachePadded<Mutex<Map>>]>,
}

impl Table {
    pub(crate) fn new(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        Table {
            shards: (0..n)
                .map(|_| CachePadded::new(Mutex::new(Map::default())))
                .collect(),
        }
    }

    #[inline]
    pub(crate) fn lock(&self, key: Key) -> MutexGuard<'_, Map> {
        self.shards[shard_index(key.0, key.1, self.shards.len())].lock()
    }

    /// Removes the entry for `vp`'s key if it still is `vp` (a fresh vnode
    /// for the same inode may have replaced a doomed one already).
    pub(crate) fn remove_if(&self, vp: &Arc<Vnode>) -> Option<Arc<Vnode>> {
        let key = (vp.mount_id(), vp.ino());
        let mut m = self.lock(key);
        let gone = match m.get(&key) {
            Some(cur) if Arc::ptr_eq(cur, vp) => m.remove(&key),
            _ => None,
        };
        // A table emptied by a mass removal (`rm -r` of a large tree)
        // would keep its peak capacity for ever; rehashed smaller once it
        // is seven-eighths empty, which costs O(what is left) after at
        // least three times as many removals.
        if m.capacity() > MIN_SHRINK && m.len() * 8 < m.capacity() {
            let keep = m.len() * 2;
            m.shrink_to(keep);
        }
        gone
    }

    /// Every vnode of one mount (for unmount; walks the whole table).
    pub(crate) fn of_mount(&self, mnt: MountId) -> Vec<Arc<Vnode>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let m = s.lock();
            out.extend(m.values().filter(|v| v.mount_id() == mnt).cloned());
        }
        out
    }

    /// Shards in the table.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Calls `f` on every vnode of mount `mnt` in the shards `shards`,
    /// each shard locked while its vnodes are visited (so `f` must be
    /// short and take no lock).
    ///
    /// Vnodes are read a batch at a time before `f` sees them: each is a
    /// cache miss, and an `f` that takes a reference (a locked
    /// instruction) waits for its miss with every later load behind it,
    /// where a batch's plain reads overlap (a live upgrade walks a
    /// million vnodes while requests wait).
    pub(crate) fn each_of_mount(
        &self,
        mnt: MountId,
        shards: std::ops::Range<usize>,
        mut f: impl FnMut(&Arc<Vnode>),
    ) {
        const BATCH: usize = 32;
        for s in self.shards[shards].iter() {
            let m = s.lock();
            let mut it = m.values();
            loop {
                let mut batch: [Option<&Arc<Vnode>>; BATCH] = [None; BATCH];
                let mut n = 0;
                for (slot, v) in batch.iter_mut().zip(&mut it) {
                    *slot = Some(v);
                    n += 1;
                }
                // Which are the mount's: independent loads, in flight
                // together.
                let mut mine = 0u32;
                for (i, v) in batch[..n].iter().flatten().enumerate() {
                    mine |= u32::from(v.mount_id() == mnt) << i;
                }
                for (i, v) in batch[..n].iter().flatten().enumerate() {
                    if mine & (1 << i) != 0 {
                        f(v);
                    }
                }
                if n < BATCH {
                    break;
                }
            }
        }
    }

    /// Entries in the table (locks every shard).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Heap bytes the table's maps reserve (for the memory report).
    pub(crate) fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<Arc<Vnode>>() + 1;
        self.shards
            .iter()
            .map(|s| s.lock().capacity() * entry)
            .sum()
    }
}
