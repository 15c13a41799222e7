//! The name cache: (directory vnode, name) -> vnode, or "no such name".
//!
//! # Holding directories
//!
//! As in FreeBSD, a directory with at least one entry under it is *held*
//! (one hold for all its entries, taken when its first entry appears and
//! dropped with its last), so its vnode is not recycled while the cache
//! knows names inside it: recycling it would strand those entries. Entries
//! do not hold their targets; recycling a target purges the entries naming
//! it (`purge_vnode`), which may drop the last entry under a directory and
//! so make that directory recyclable in turn.
//!
//! # Bounds
//!
//! At most `Config::namecache_limit` entries (plus the distributed
//! counter's slop). Each shard is an LRU list (hits move an entry to the
//! back and restamp it); over the bound, an insert evicts the older of two
//! heads, its own shard's and a rotating other's, which approximates a
//! global LRU without a global list.
//!
//! # Storage
//!
//! A shard keeps its entries in a slab of 64-byte slots with short names
//! inline (`shard.rs`, `name.rs`): entering a name costs no allocation of
//! its own, and a probe reads the index and one slot: a linked hash map
//! would cost three allocations per entry and a pointer to follow for
//! every name compared, and entering names is most of the CPU of a cold
//! walk.
//!
//! # Links
//!
//! Each vnode keeps the [`Handle`]s of the entries under it (`src`) and
//! naming it (`dst`) in `Vnode::nc` (`crate::nclinks`), so purges cost the
//! number of entries involved, never a scan. A handle is checked against
//! the slot it names, under that shard's lock, before it is acted on.
//! Lock order: a shard lock, then a vnode's `nc` lock. Holds are dropped
//! and `Arc`s released only after every lock is let go, because dropping a
//! hold can put a directory on its free list (another lock).

mod name;
mod shard;

use crate::aged::{Aged, AgedCell, AgedGuard};
use crate::counter::{DistCounter, Rotor};
use crate::handle::VnodeRef;
use crate::hash::MixBuild;
use crate::ids::MountId;
use crate::nclinks::Handle;
use crate::refs::{Acquired, HOLD_ONE, USE_ONE};
use crate::shared::Shared;
use crate::sync::Arc;
use crate::vnode::Vnode;
use crossbeam_utils::CachePadded;
use shard::{Shard, Slot};
use smallvec::SmallVec;
use std::hash::BuildHasher;

/// The longest name the cache stores (NAME_MAX); longer ones are not cached.
pub const NC_NAME_MAX: usize = 255;

/// A slab this small is never compacted: a sparse one costs too little to
/// be worth moving entries for. Small caches use less (their share per
/// shard, down to 4: see `NameCache::new`), and so does loom, so that a
/// model of a few entries compacts.
#[cfg(not(loom))]
const MIN_SLOTS: usize = 64;
#[cfg(loom)]
const MIN_SLOTS: usize = 4;

/// What a name-cache lookup found.
#[derive(Debug)]
pub enum NcLookup {
    /// The name maps to this vnode (a use reference is taken).
    Hit(VnodeRef),
    /// The name is known not to exist.
    Negative,
    /// The cache does not know.
    Miss,
}

/// Deferred work: what to release once no lock is held. Inline for the
/// few items every path but `purge_mount` defers: these run once per
/// recycled vnode, where a heap vector each would be a measurable share.
#[derive(Default)]
struct Deferred {
    unhold: SmallVec<[Arc<Vnode>; 2]>,
    drop: SmallVec<[Arc<Vnode>; 4]>,
}

impl Deferred {
    fn run(self) {
        for d in self.unhold {
            d.release(HOLD_ONE);
        }
        drop(self.drop);
    }
}

/// The name cache of one vnode layer.
pub struct NameCache {
    shards: Box<[CachePadded<AgedCell<Shard>>]>,
    limit: usize,
    /// Entries, distributed: enter and remove write only their own cell.
    entries: DistCounter,
    rotor: Rotor,
    build: MixBuild,
    shared: Arc<Shared>,
    /// Compactions so far, for the tests that must see them happen.
    #[cfg(test)]
    compactions: std::sync::atomic::AtomicUsize,
}

impl NameCache {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let n = shared.cfg.namecache_shards.max(1).next_power_of_two();
        let limit = shared.cfg.namecache_limit.max(1);
        // Small caches (tests) compact small shards too, so compaction
        // races with lookups and purges where the stress tests can see it.
        let min_slots = (limit / n).clamp(4, MIN_SLOTS);
        NameCache {
            shards: (0..n)
                .map(|_| CachePadded::new(AgedCell::new(Shard::new(min_slots))))
                .collect(),
            limit,
            entries: DistCounter::new((limit / (8 * crate::counter::CELLS)).clamp(1, 64)),
            rotor: Rotor,
            build: MixBuild::default(),
            shared,
            #[cfg(test)]
            compactions: Default::default(),
        }
    }

    /// The shard of a (directory, name). A directory's names spread over
    /// four shards only: a walk through one directory keeps returning to
    /// the same few locks and buckets (warm in this core's cache), while
    /// lookups in one busy directory still spread four ways.
    #[inline]
    fn shard_of(&self, d: usize, h: u64) -> usize {
        let i = crate::hash::mix(d as u64 >> 4) ^ (h & 3);
        i as usize & (self.shards.len() - 1)
    }

    #[inline]
    fn locate(&self, dir: &Vnode, name: &[u8]) -> (usize, u64, usize) {
        let d = dir as *const Vnode as usize;
        let h = self.build.hash_one((d, name));
        (d, h, self.shard_of(d, h))
    }

    #[inline]
    fn lock(&self, si: usize) -> AgedGuard<'_, Shard> {
        self.shards[si].lock()
    }

    /// Looks `name` up under `dir`. A hit returns a use reference; an entry
    /// whose target was doomed meanwhile is dropped and reported as a miss.
    pub fn lookup(&self, dir: &Vnode, name: &[u8]) -> NcLookup {
        let ev = &self.shared.ev;
        let (d, h, si) = self.locate(dir, name);
        let mut deferred = Deferred::default();
        let found = {
            let mut s = self.lock(si);
            match s.find(h, d, name) {
                None => None,
                Some(i) => {
                    s.touch(i);
                    let slot = s.get(i).expect("found a live slot");
                    match slot.target() {
                        None => Some(None),
                        Some(vp) => match vp.refs.acquire(USE_ONE) {
                            Acquired::Doomed => {
                                self.remove_slot(&mut s, si, i, &mut deferred);
                                self.maybe_compact(&mut s, si);
                                None
                            }
                            a => Some(Some((vp.clone(), a == Acquired::WasFree))),
                        },
                    }
                }
            }
        };
        deferred.run();
        match found {
            None => {
                ev.nc_misses.inc();
                NcLookup::Miss
            }
            Some(None) => {
                ev.nc_neg_hits.inc();
                NcLookup::Negative
            }
            Some(Some((vp, was_free))) => {
                if was_free && vp.mount.free.on_unfree(&vp) {
                    self.shared.freevnodes.add(-1);
                }
                ev.nc_hits.inc();
                NcLookup::Hit(VnodeRef::from_counted(vp))
            }
        }
    }

    /// Records that `name` under `dir` is `target` (or, with `None`, that it
    /// does not exist), replacing what was known. Names longer than
    /// [`NC_NAME_MAX`] or containing '/' or NUL are not cached.
    pub fn enter(&self, dir: &VnodeRef, name: &[u8], target: Option<&VnodeRef>) {
        if name.is_empty() || name.len() > NC_NAME_MAX || name.contains(&b'/') || name.contains(&0)
        {
            return;
        }
        if dir.is_doomed() || target.is_some_and(|t| t.is_doomed()) {
            return;
        }
        let dirv: &Arc<Vnode> = dir.arc();
        let target = target.map(|t| t.arc());
        let (d, h, si) = self.locate(dirv, name);
        let mut deferred = Deferred::default();
        let mut victim = None;
        {
            let mut s = self.lock(si);
            match s.find(h, d, name) {
                Some(i) => {
                    s.touch(i);
                    let hd = Handle::new(si, i);
                    let old = s.set_target(i, target.cloned());
                    if let Some(l) = old.as_ref().and_then(|t| t.nc_if_any()) {
                        l.lock().remove_dst(hd);
                    }
                    if let Some(t) = target {
                        t.nc().lock().add_dst(hd);
                    }
                    deferred.drop.extend(old);
                }
                None => {
                    let i = s.insert(h, dirv.clone(), target.cloned(), name);
                    let hd = Handle::new(si, i);
                    {
                        let mut l = dirv.nc().lock();
                        if l.src_len() == 0 {
                            // First entry under dir: the cache holds it. The
                            // caller's use means dir is not free: no list work.
                            dirv.refs.inc(HOLD_ONE);
                        }
                        l.add_src(hd);
                    }
                    if let Some(t) = target {
                        t.nc().lock().add_dst(hd);
                    }
                    self.shared.ev.nc_enters.inc();
                    if self.entries.add(1) > self.limit as isize {
                        // Over the bound: evict the least recently used of
                        // two shards' heads, this one or a rotating other.
                        let other = self.rotor.next(self.shards.len());
                        if self.shards[other].head_stamp() < s.head_stamp() {
                            victim = Some(other);
                        } else {
                            self.evict_front(&mut s, si, &mut deferred);
                        }
                    }
                }
            }
        }
        if let Some(vi) = victim {
            let mut vs = self.lock(vi);
            self.evict_front(&mut vs, vi, &mut deferred);
        }
        deferred.run();
    }

    /// Evicts the least recently used entry of a locked shard.
    fn evict_front(&self, s: &mut Shard, si: usize, deferred: &mut Deferred) {
        if let Some(i) = s.front() {
            self.remove_slot(s, si, i, deferred);
            self.shared.ev.nc_evictions.inc();
            self.maybe_compact(s, si);
        }
    }

    /// Forgets what is known about `name` under `dir` (unlink, rmdir,
    /// rename, create over a negative entry).
    pub fn remove(&self, dir: &Vnode, name: &[u8]) {
        let (d, h, si) = self.locate(dir, name);
        let mut deferred = Deferred::default();
        {
            let mut s = self.lock(si);
            if let Some(i) = s.find(h, d, name) {
                self.remove_slot(&mut s, si, i, &mut deferred);
                self.maybe_compact(&mut s, si);
            }
        }
        deferred.run();
    }

    /// Forgets every entry under `dir` (it was removed, or its contents
    /// changed behind the cache's back).
    pub fn purge_dir(&self, dir: &Vnode) {
        // Copies of the handles: each removal unlinks its own, and the last
        // one under `dir` drops the cache's hold on it. A handle that no
        // longer names an entry under `dir` was removed meanwhile, or moved
        // by a compaction, which left the entry's new handle in `dir`'s
        // set: go round again until a pass finds every handle current. The
        // same stale handles twice would mean the set itself is wrong (no
        // pass could change it): stop rather than spin.
        let mut stale_before = Vec::new();
        while let Some(links) = dir.nc_if_any() {
            let handles = links.lock().src_handles();
            let mut stale: Vec<Handle> = handles
                .into_iter()
                .filter(|&hd| !self.remove_handle(hd, |s| std::ptr::eq(&**s.dir(), dir)))
                .collect();
            stale.sort_unstable_by_key(|h| (h.shard(), h.slot()));
            if stale.is_empty() || stale == stale_before {
                debug_assert!(stale.is_empty(), "stale handles in a directory's set");
                break;
            }
            stale_before = stale;
        }
    }

    /// Forgets every entry naming `vp`, and every entry under it.
    pub fn purge_vnode(&self, vp: &Vnode) {
        // Taken, not copied: each removal below would otherwise rebuild the
        // list without its handle. An entry for `vp` entered meanwhile (it
        // checked that `vp` was not doomed just before a recycle doomed it),
        // or moved by a compaction while the list was taken, links itself
        // into the fresh list: go round until it stays empty.
        let mut n = 0;
        while let Some(links) = vp.nc_if_any() {
            let dst = links.lock().take_dst();
            if dst.is_empty() {
                break;
            }
            for hd in dst {
                if self.remove_handle(hd, |s| s.target().is_some_and(|t| std::ptr::eq(&**t, vp))) {
                    n += 1;
                }
            }
        }
        self.purge_dir(vp);
        self.shared.ev.nc_purges.add(n);
    }

    /// Forgets every entry under directories of one mount (unmount): a scan.
    pub fn purge_mount(&self, mnt: MountId) {
        for si in 0..self.shards.len() {
            let mut deferred = Deferred::default();
            {
                let mut s = self.lock(si);
                let doomed: Vec<u32> = s
                    .entries()
                    .filter(|(_, e)| e.dir().mount_id() == mnt)
                    .map(|(i, _)| i)
                    .collect();
                for i in doomed {
                    self.remove_slot(&mut s, si, i, &mut deferred);
                }
                self.maybe_compact(&mut s, si);
            }
            deferred.run();
        }
    }

    /// Removes the entry `hd` names if `pred` accepts it; false if the
    /// slot is free or holds another entry now.
    fn remove_handle(&self, hd: Handle, pred: impl Fn(&Slot) -> bool) -> bool {
        let si = hd.shard();
        let mut deferred = Deferred::default();
        let hit = {
            let mut s = self.lock(si);
            match s.get(hd.slot()) {
                Some(slot) if pred(slot) => {
                    self.remove_slot(&mut s, si, hd.slot(), &mut deferred);
                    self.maybe_compact(&mut s, si);
                    true
                }
                _ => false,
            }
        };
        deferred.run();
        hit
    }

    /// Removes slot `i`'s entry from its locked shard and from its vnodes'
    /// links; schedules the directory's unhold if this was its last entry
    /// and the release of both vnodes.
    fn remove_slot(&self, s: &mut Shard, si: usize, i: u32, deferred: &mut Deferred) {
        let hd = Handle::new(si, i);
        let (dir, target) = s.take(i);
        if let Some(links) = dir.nc_if_any() {
            let mut l = links.lock();
            if l.remove_src(hd) && l.src_len() == 0 {
                deferred.unhold.push(dir.clone());
            }
        }
        if let Some(l) = target.as_ref().and_then(|t| t.nc_if_any()) {
            l.lock().remove_dst(hd);
        }
        deferred.drop.push(dir);
        deferred.drop.extend(target);
        self.entries.add(-1);
    }

    /// Compacts a locked shard that became sparse, moving its entries'
    /// handles in their vnodes' links along with them.
    fn maybe_compact(&self, s: &mut Shard, si: usize) {
        if !s.sparse() {
            return;
        }
        #[cfg(test)]
        self.compactions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        s.compact(|from, to, slot| {
            let (from, to) = (Handle::new(si, from), Handle::new(si, to));
            slot.dir().nc().lock().move_src(from, to);
            if let Some(t) = slot.target() {
                t.nc().lock().move_dst(from, to);
            }
        });
    }

    /// Entries cached now (locks every shard).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no entry is cached (locks every shard).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks every shard's structure and every entry's links (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        for (si, cell) in self.shards.iter().enumerate() {
            let s = cell.lock();
            s.check();
            for (i, slot) in s.entries() {
                let hd = Handle::new(si, i);
                assert!(slot.dir().nc().lock().src_handles().contains(&hd));
                if let Some(t) = slot.target() {
                    assert!(t.nc().lock().has_dst(hd));
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
