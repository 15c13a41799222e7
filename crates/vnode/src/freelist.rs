//! Per-mount LRU lists of free vnodes (use and hold counts both zero).
//!
//! # Why per mount, why sharded, why eager
//!
//! FreeBSD keeps every vnode on one global list under one mutex; a prune
//! for one file system walks past other file systems' vnodes and past held
//! ones (seed 001: ~960 visits per vnode freed). Here each mount owns its
//! lists (Linux's per-superblock LRU), and a list holds *only* free vnodes:
//! a vnode leaves its list the moment it gains a reference, so a prune pops
//! exactly the vnodes it can free, in least-recently-freed order.
//!
//! Each mount's list is split into shards by inode number (runs of
//! neighbouring numbers per shard, as the vnode table does), each with its
//! own lock, so threads freeing and reusing different vnodes rarely meet. Within
//! a shard order is exact LRU (by the time the vnode became free); across
//! shards reclaim goes round-robin, which over uniformly hashed shards
//! approximates global LRU.
//!
//! # The race this protects against
//!
//! A thread that makes a vnode free (drops the last reference) and a thread
//! that makes it busy again (takes a reference) run concurrently; each
//! updates the reference word first and fixes list membership second, under
//! the shard lock, deciding from a fresh read of the word. Whoever locks
//! last sees the final word, so the list ends up agreeing with the counts:
//! a busy vnode is never left on a list, a free vnode never left off one.
//! The recycler claims a vnode by CAS 0 -> DOOMED under the same lock; a
//! reference taken after that CAS fails (the vnode is doomed) and the taker
//! builds a fresh vnode instead.
//!
//! The list is an index-linked arena (no unsafe): `Vnode::slot` holds the
//! node index, read and written only under this shard's lock.

use crate::refs::COUNTS;
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use crate::vnode::Vnode;
use crossbeam_utils::CachePadded;

/// `Vnode::slot` value of a vnode on no list.
pub(crate) const NO_SLOT: u32 = u32::MAX;

struct Node {
    prev: u32,
    next: u32,
    /// When the vnode became free ([`crate::clock::stamp`]).
    stamp: u64,
    vp: Option<Arc<Vnode>>,
}

/// `ShardCell::head_stamp` of an empty shard.
const EMPTY: u64 = u64::MAX;

#[derive(Default)]
struct Shard {
    nodes: Vec<Node>,
    spare: Vec<u32>,
    head: Option<u32>,
    tail: Option<u32>,
    len: usize,
}

impl Shard {
    fn head_stamp(&self) -> u64 {
        self.head.map_or(EMPTY, |h| self.nodes[h as usize].stamp)
    }

    fn push_tail(&mut self, vp: Arc<Vnode>) -> u32 {
        let node = Node {
            prev: self.tail.unwrap_or(NO_SLOT),
            next: NO_SLOT,
            stamp: crate::clock::stamp(),
            vp: Some(vp),
        };
        let idx = match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        match self.tail {
            Some(t) => self.nodes[t as usize].next = idx,
            None => self.head = Some(idx),
        }
        self.tail = Some(idx);
        self.len += 1;
        idx
    }

    fn unlink(&mut self, idx: u32) -> Arc<Vnode> {
        let (prev, next) = {
            let n = &self.nodes[idx as usize];
            (n.prev, n.next)
        };
        if prev == NO_SLOT {
            self.head = (next != NO_SLOT).then_some(next);
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NO_SLOT {
            self.tail = (prev != NO_SLOT).then_some(prev);
        } else {
            self.nodes[next as usize].prev = prev;
        }
        self.len -= 1;
        self.spare.push(idx);
        let vp = self.nodes[idx as usize]
            .vp
            .take()
            .expect("free-list node without a vnode");
        // Shrink the arena after a mass reclaim so an idle mount does not
        // keep the peak's memory.
        if self.len == 0 && self.nodes.len() > 64 {
            self.nodes = Vec::new();
            self.spare = Vec::new();
        }
        vp
    }
}

/// What a claim attempt on a list found.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct ClaimReport {
    /// Vnodes taken off the list and examined.
    pub attempts: u64,
    /// Of those, ones that had just gained a reference (lost the race).
    pub raced: u64,
}

/// One shard: its list, and the age of its head readable without the lock
/// (written only under it), so a reclaimer can find the oldest head among
/// the shards by reading one word of each.
struct ShardCell {
    head_stamp: AtomicU64,
    list: Mutex<Shard>,
}

impl ShardCell {
    fn lock(&self) -> ShardGuard<'_> {
        ShardGuard {
            g: self.list.lock(),
            head_stamp: &self.head_stamp,
        }
    }
}

/// The shard's lock; on unlock it republishes the head's stamp.
struct ShardGuard<'a> {
    g: crate::sync::MutexGuard<'a, Shard>,
    head_stamp: &'a AtomicU64,
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = Shard;
    fn deref(&self) -> &Shard {
        &self.g
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.g
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        let h = self.g.head_stamp();
        // Relaxed: a hint for choosing a shard; the choice is re-validated
        // under that shard's lock.
        if self.head_stamp.load(Ordering::Relaxed) != h {
            self.head_stamp.store(h, Ordering::Relaxed);
        }
    }
}

/// The free vnodes of one mount.
pub(crate) struct FreeList {
    shards: Box<[CachePadded<ShardCell>]>,
}

impl FreeList {
    pub(crate) fn new(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        FreeList {
            shards: (0..n)
                .map(|_| {
                    CachePadded::new(ShardCell {
                        head_stamp: AtomicU64::new(EMPTY),
                        list: Mutex::new(Shard::default()),
                    })
                })
                .collect(),
        }
    }

    #[inline]
    fn shard_of(&self, vp: &Vnode) -> &ShardCell {
        &self.shards[crate::table::shard_index(vp.mount_id(), vp.ino(), self.shards.len())]
    }

    /// After a free transition: put `vp` at the tail if it is (still) free.
    /// Returns whether it was added.
    pub(crate) fn on_free(&self, vp: &Arc<Vnode>) -> bool {
        let mut s = self.shard_of(vp).lock();
        // Relaxed is enough for `slot` (only touched under this lock); the
        // word is re-read here, after our lock, which is the whole point.
        if vp.refs.load() == 0 && vp.slot.load(Ordering::Relaxed) == NO_SLOT {
            let idx = s.push_tail(vp.clone());
            vp.slot.store(idx, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// After an unfree transition: take `vp` off if it is (still) busy.
    /// Returns whether it was removed. The removed `Arc` is dropped after
    /// the lock is released.
    pub(crate) fn on_unfree(&self, vp: &Vnode) -> bool {
        let removed = {
            let mut s = self.shard_of(vp).lock();
            let idx = vp.slot.load(Ordering::Relaxed);
            if idx != NO_SLOT && vp.refs.load() & COUNTS != 0 {
                vp.slot.store(NO_SLOT, Ordering::Relaxed);
                Some(s.unlink(idx))
            } else {
                None
            }
        };
        removed.is_some()
    }

    /// Claims up to `max` vnodes, oldest first across all shards (each
    /// shard is LRU; we merge their heads by age), dooming each. Claimed
    /// vnodes are unreachable for new references and ready to be torn down
    /// outside any lock.
    pub(crate) fn claim(&self, max: usize, out: &mut Vec<Arc<Vnode>>, rep: &mut ClaimReport) {
        let mut want = max;
        while want > 0 {
            // The oldest head, and the next oldest to merge against.
            let (mut best, mut best_t, mut second_t) = (usize::MAX, EMPTY, EMPTY);
            for (i, c) in self.shards.iter().enumerate() {
                let t = c.head_stamp.load(Ordering::Relaxed);
                if t < best_t {
                    second_t = best_t;
                    best_t = t;
                    best = i;
                } else if t < second_t {
                    second_t = t;
                }
            }
            if best == usize::MAX {
                return;
            }
            let mut s = self.shards[best].lock();
            let mut popped = 0;
            while want > 0 {
                let Some(head) = s.head else { break };
                // Past the first, only while older than every other head.
                if popped > 0 && s.nodes[head as usize].stamp > second_t {
                    break;
                }
                let vp = s.unlink(head);
                vp.slot.store(NO_SLOT, Ordering::Relaxed);
                popped += 1;
                rep.attempts += 1;
                if vp.refs.try_doom_free() {
                    out.push(vp);
                    want -= 1;
                } else {
                    // It gained a reference after its last free transition;
                    // the taker's `on_unfree` will find it already off.
                    rep.raced += 1;
                }
            }
        }
    }

    /// How many vnodes are on the lists (exact; locks every shard).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.list.lock().len).sum()
    }
}
