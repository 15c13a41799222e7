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
//! Each mount's list is split into shards by inode hash, each with its own
//! lock, so threads freeing and reusing different vnodes rarely meet. Within
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

use crate::counter::Rotor;
use crate::refs::COUNTS;
use crate::sync::{Arc, Mutex, Ordering};
use crate::vnode::Vnode;
use crossbeam_utils::CachePadded;

/// `Vnode::slot` value of a vnode on no list.
pub(crate) const NO_SLOT: u32 = u32::MAX;

struct Node {
    prev: u32,
    next: u32,
    vp: Option<Arc<Vnode>>,
}

#[derive(Default)]
struct Shard {
    nodes: Vec<Node>,
    spare: Vec<u32>,
    head: Option<u32>,
    tail: Option<u32>,
    len: usize,
}

impl Shard {
    fn push_tail(&mut self, vp: Arc<Vnode>) -> u32 {
        let node = Node {
            prev: self.tail.unwrap_or(NO_SLOT),
            next: NO_SLOT,
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

/// The free vnodes of one mount.
pub(crate) struct FreeList {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    rotor: Rotor,
}

impl FreeList {
    pub(crate) fn new(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        FreeList {
            shards: (0..n)
                .map(|_| CachePadded::new(Mutex::new(Shard::default())))
                .collect(),
            rotor: Rotor::default(),
        }
    }

    #[inline]
    fn shard_of(&self, vp: &Vnode) -> &Mutex<Shard> {
        &self.shards[crate::table::mix(vp.ino()) as usize & (self.shards.len() - 1)]
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

    /// Claims up to `max` vnodes from the head of one shard (round-robin
    /// from `start`), dooming each. Claimed vnodes are unreachable for new
    /// references and ready to be torn down outside any lock.
    pub(crate) fn claim(&self, max: usize, out: &mut Vec<Arc<Vnode>>, rep: &mut ClaimReport) {
        let n = self.shards.len();
        let start = self.rotor.next(n);
        let mut want = max;
        for k in 0..n {
            if want == 0 {
                break;
            }
            let shard = &self.shards[(start + k) & (n - 1)];
            let mut s = shard.lock();
            while want > 0 {
                let Some(head) = s.head else { break };
                let vp = s.unlink(head);
                vp.slot.store(NO_SLOT, Ordering::Relaxed);
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
        self.shards.iter().map(|s| s.lock().len).sum()
    }
}
