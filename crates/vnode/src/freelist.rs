//! Per-mount LRU lists of free vnodes (use and hold counts both zero).
//!
//! # Why per mount, why sharded, why eager
//!
//! FreeBSD keeps every vnode on one global list under one mutex; a prune
//! for one file system walks past other file systems' vnodes and past held
//! ones (seed 001; figures in docs/design/vnode-layer.md). Here each mount owns its
//! lists (Linux's per-superblock LRU), and a list holds *only* free vnodes:
//! a vnode leaves its list the moment it gains a reference, so a prune pops
//! exactly the vnodes it can free, in least-recently-freed order.
//!
//! Each mount's list is split into shards, each with its own lock. A
//! vnode goes onto the *home shard of the thread that frees it* (Linux
//! keeps per-node LRUs for the same reason): a thread's own releases and
//! its own direct recycling then stay on lines in its own core's cache,
//! and threads working apart never share a shard lock. Within a shard
//! order is exact LRU (by the time the vnode became free); prune and the
//! background reclaimer merge the shards' heads by age ([`FreeList::claim`]),
//! so they recycle in global LRU order.
//!
//! # The race this protects against
//!
//! A thread R that makes a vnode free (drops the last reference) and a
//! thread X that makes it busy again (takes a reference) run concurrently;
//! each updates the reference word first and fixes list membership second.
//! They may lock different shards (R its home shard, X the shard the vnode
//! is on), so neither lock orders them; instead each side writes, then
//! reads what the other wrote, all `SeqCst` (Dekker):
//!
//! * R: `refs` to 0; under its shard lock, if `refs` still reads 0, push
//!   and store `slot`; after unlocking, read `refs` again, and if a
//!   reference appeared, take the vnode back off (`on_unfree`).
//! * X: `refs` from 0 (`fetch_add`); read `slot`; if listed, lock that
//!   shard and take it off while `refs` is non-zero.
//!
//! Each side puts a `SeqCst` fence between its write and its read (a
//! locked RMW already is one on x86; the fences make the argument hold in
//! the language's model, and in loom's). In the single total order of
//! those fences either R's second
//! read of `refs` comes after X's increment (R takes it off) or X's read of
//! `slot` comes after R's store (X takes it off): a busy vnode is never
//! left on a list, and removal is idempotent under the shard lock. A free
//! vnode is never left off one: the last free transition's owner pushes.
//! The recycler claims a vnode by CAS 0 -> DOOMED under its shard's lock; a
//! reference taken after that CAS fails (the vnode is doomed) and the taker
//! builds a fresh vnode instead; a vnode that gained a reference first is
//! dropped from the list and counted as a race.
//!
//! A vnode marked `recycle_when_free` is doomed by the thread that drops
//! its last reference, outside the lists: D, the same CAS, then tears it
//! down. R may have checked the mark before it was set and be pushing the
//! vnode at that moment (its `refs == 0` check passed before D's CAS). The
//! same handshake covers it, with the doom in place of the reference: D
//! CASes, fences, reads `slot` and takes the vnode off if listed; R's
//! Dekker load counts DOOMED as well as references. A torn-down vnode never
//! stays listed (loom model `free_push_versus_recycle_when_free`).
//!
//! The list is an index-linked arena (no unsafe). `Vnode::slot` holds the
//! shard and node index in one word (so a reader never pairs one shard's
//! number with another's index), written only under that shard's lock.

use crate::aged::{Aged, AgedCell, EMPTY};
use crate::refs::{Refs, COUNTS, DOOMED};
use crate::sync::{fence, Arc, AtomicU32, Ordering};
use crossbeam_utils::CachePadded;

/// What a free list needs of what it lists: the reference word it
/// checks free transitions against, and the word naming the entry's place
/// (written only under the lock of the shard it names). A trait, so the
/// lists know nothing else of vnodes.
pub(crate) trait Listed {
    /// The reference word (`refs.rs`).
    fn refs(&self) -> &Refs;
    /// [`NO_SLOT`], or the shard and index the entry is listed at.
    fn slot(&self) -> &AtomicU32;
}

/// `Vnode::slot` value of a vnode on no list.
pub(crate) const NO_SLOT: u32 = u32::MAX;
/// `Vnode::slot` = shard << SHARD_SHIFT | node index.
const SHARD_SHIFT: u32 = 27;
const INDEX_MASK: u32 = (1 << SHARD_SHIFT) - 1;
/// Most shards per mount (the slot word's shard field).
pub(crate) const MAX_SHARDS: usize = 1 << (32 - SHARD_SHIFT - 1);

fn encode(shard: usize, idx: u32) -> u32 {
    debug_assert!(idx <= INDEX_MASK && shard < MAX_SHARDS);
    (shard as u32) << SHARD_SHIFT | idx
}

fn decode(w: u32) -> (usize, u32) {
    ((w >> SHARD_SHIFT) as usize, w & INDEX_MASK)
}

struct Node<T> {
    prev: u32,
    next: u32,
    /// When the vnode became free ([`crate::clock::stamp`]).
    stamp: u64,
    vp: Option<Arc<T>>,
}

struct Shard<T> {
    nodes: Vec<Node<T>>,
    spare: Vec<u32>,
    head: Option<u32>,
    tail: Option<u32>,
    len: usize,
}

impl<T> Default for Shard<T> {
    fn default() -> Self {
        Shard {
            nodes: Vec::new(),
            spare: Vec::new(),
            head: None,
            tail: None,
            len: 0,
        }
    }
}

impl<T> Aged for Shard<T> {
    fn head_stamp(&self) -> u64 {
        self.head.map_or(EMPTY, |h| self.nodes[h as usize].stamp)
    }
}

impl<T> Shard<T> {
    fn push_tail(&mut self, vp: Arc<T>) -> u32 {
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

    fn unlink(&mut self, idx: u32) -> Arc<T> {
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
pub(crate) struct FreeList<T> {
    shards: Box<[CachePadded<AgedCell<Shard<T>>>]>,
}

impl<T: Listed> FreeList<T> {
    pub(crate) fn new(shards: usize) -> Self {
        let n = shards.clamp(1, MAX_SHARDS).next_power_of_two();
        FreeList {
            shards: (0..n)
                .map(|_| CachePadded::new(AgedCell::new(Shard::default())))
                .collect(),
        }
    }

    /// The calling thread's home shard.
    #[inline]
    fn home(&self) -> usize {
        crate::counter::thread_slot() % self.shards.len()
    }

    /// After a free transition: put `vp` at the tail of this thread's home
    /// shard if it is (still) free and on no list. Returns the change in
    /// the number of listed vnodes this call caused (+1, or 0).
    pub(crate) fn on_free(&self, vp: &Arc<T>) -> isize {
        let home = self.home();
        let pushed = {
            let mut s = self.shards[home].lock();
            if vp.refs().load() == 0 && vp.slot().load(Ordering::SeqCst) == NO_SLOT {
                let idx = s.push_tail(vp.clone());
                if idx > INDEX_MASK {
                    // An arena of 2^27 free vnodes in one shard: leave this
                    // one unlisted (it is recycled when the mount goes)
                    // rather than corrupt the slot word.
                    let node = s.tail.expect("just pushed");
                    drop(s.unlink(node));
                    false
                } else {
                    // SeqCst: the Dekker store (module docs).
                    vp.slot().store(encode(home, idx), Ordering::SeqCst);
                    true
                }
            } else {
                false
            }
        };
        if !pushed {
            return 0;
        }
        // The Dekker load: a reference that appeared since our check, or
        // a doom by a thread recycling it at its own last release
        // (`recycle_when_free`), may have read `slot` before our store;
        // then it is ours to undo. The fence orders our `slot` store before
        // this load (pairs with the fence in `on_unfree`).
        fence(Ordering::SeqCst);
        if vp.refs().load() & (COUNTS | DOOMED) != 0 && self.on_unfree(vp) {
            return 0;
        }
        1
    }

    /// After an unfree transition (or a doom outside the lists): take `vp`
    /// off its list if it is (still) busy, or doomed. Returns whether this
    /// call removed it. The removed `Arc` is dropped after the lock is
    /// released.
    pub(crate) fn on_unfree(&self, vp: &T) -> bool {
        // Orders our increment of `refs` before the `slot` load (pairs with
        // the fence in `on_free`).
        fence(Ordering::SeqCst);
        loop {
            // SeqCst: the Dekker load after our increment of `refs`.
            let w = vp.slot().load(Ordering::SeqCst);
            if w == NO_SLOT {
                return false;
            }
            let (shard, _) = decode(w);
            let removed = {
                let mut s = self.shards[shard].lock();
                // Under this shard's lock `slot` is exact for this shard: it
                // is ours to unlink only if it still names this shard.
                let w2 = vp.slot().load(Ordering::SeqCst);
                if w2 == NO_SLOT {
                    return false;
                }
                let (shard2, idx) = decode(w2);
                if shard2 != shard {
                    None // moved meanwhile: look again
                } else if vp.refs().load() & (COUNTS | DOOMED) != 0 {
                    vp.slot().store(NO_SLOT, Ordering::SeqCst);
                    Some(Some(s.unlink(idx)))
                } else {
                    Some(None) // free again: it belongs on the list
                }
            };
            match removed {
                None => continue,
                Some(r) => return r.is_some(),
            }
        }
    }

    /// Claims up to `max` vnodes for an allocating thread: from its own
    /// home shard (the vnodes it freed itself, least recently first, still
    /// warm in its core's cache), falling back to the exact merge of all
    /// shards when that is empty. Exact global LRU on this path would send
    /// every allocating thread to the same oldest shard and pull another
    /// core's vnodes into this one.
    pub(crate) fn claim_near(&self, max: usize, out: &mut Vec<Arc<T>>, rep: &mut ClaimReport) {
        let got = self.claim_from(self.home(), max, u64::MAX, out, rep);
        if got < max {
            self.claim(max - got, out, rep);
        }
    }

    /// Claims up to `max` vnodes, oldest first across all shards (each
    /// shard is LRU; we merge their heads by age), dooming each. Claimed
    /// vnodes are unreachable for new references and ready to be torn down
    /// outside any lock.
    pub(crate) fn claim(&self, max: usize, out: &mut Vec<Arc<T>>, rep: &mut ClaimReport) {
        let mut want = max;
        while want > 0 {
            // The oldest head, and the next oldest to merge against.
            let (mut best, mut best_t, mut second_t) = (usize::MAX, EMPTY, EMPTY);
            for (i, c) in self.shards.iter().enumerate() {
                let t = c.head_stamp();
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
            want -= self.claim_from(best, want, second_t, out, rep);
        }
    }

    /// Pops up to `max` heads of shard `i` (past the first, only while not
    /// younger than `until`), dooming each; returns how many were claimed.
    fn claim_from(
        &self,
        i: usize,
        max: usize,
        until: u64,
        out: &mut Vec<Arc<T>>,
        rep: &mut ClaimReport,
    ) -> usize {
        let mut s = self.shards[i].lock();
        let (mut popped, mut got) = (0, 0);
        while got < max {
            let Some(head) = s.head else { break };
            if popped > 0 && s.nodes[head as usize].stamp > until {
                break;
            }
            let vp = s.unlink(head);
            vp.slot().store(NO_SLOT, Ordering::SeqCst);
            popped += 1;
            rep.attempts += 1;
            if vp.refs().try_doom_free() {
                out.push(vp);
                got += 1;
            } else {
                // It gained a reference after its last free transition;
                // the taker's `on_unfree` will find it already off.
                rep.raced += 1;
            }
        }
        got
    }

    /// How many vnodes are on the lists (exact; locks every shard).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len).sum()
    }
}
