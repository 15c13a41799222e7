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
//! # Links
//!
//! Each vnode keeps the keys of the entries under it (`src`) and naming it
//! (`dst`) in `Vnode::nc`, so purges cost the number of entries involved,
//! never a scan. Lock order: a shard lock, then a vnode's `nc` lock. Holds
//! are dropped and `Arc`s released only after every lock is let go, because
//! dropping a hold can put a directory on its free list (another lock).

use crate::counter::{DistCounter, Rotor};
use crate::ids::MountId;
use crate::refs::{Acquired, HOLD_ONE, USE_ONE};
use crate::shared::Shared;
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use crate::table::MixBuild;
use crate::vnode::{Vnode, VnodeRef};
use crossbeam_utils::CachePadded;
use hashlink::linked_hash_map::RawEntryMut;
use hashlink::LinkedHashMap;
use smallvec::SmallVec;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher};

/// The longest name the cache stores (NAME_MAX); longer ones are not cached.
pub const NC_NAME_MAX: usize = 255;

/// A directory's identity (its vnode's address, stable while an entry
/// under it keeps that vnode alive) plus a name. The name is shared (one
/// allocation) by the map key and the two vnodes' link sets.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct NcKey {
    dir: usize,
    name: Arc<[u8]>,
}

impl Hash for NcKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // Must hash exactly as `(usize, &[u8])` does: lookups hash that.
        (self.dir, &*self.name).hash(h)
    }
}

/// The cache's links kept on a vnode.
#[derive(Default)]
pub(crate) struct NcLinks {
    /// Entries whose target is this vnode: usually one (more with hard
    /// links). A boxed slice, not a Vec: 8 bytes less on every vnode,
    /// which keeps `Vnode` in a smaller allocation class; entries come
    /// and go rarely enough to pay a reallocation each.
    dst: Box<[NcKey]>,
    /// Entries whose directory is this vnode: a set, because a directory
    /// can have many and each removal must not scan them all. Only
    /// directories with entries pay for it: boxed, so every other vnode
    /// carries 8 bytes for it rather than an empty set's 48.
    #[allow(clippy::box_collection)]
    src: Option<Box<HashSet<NcKey, MixBuild>>>,
}

impl NcLinks {
    fn src_len(&self) -> usize {
        self.src.as_ref().map_or(0, |s| s.len())
    }

    fn add_src(&mut self, k: NcKey) {
        self.src.get_or_insert_with(Default::default).insert(k);
    }

    fn remove_src(&mut self, k: &NcKey) -> bool {
        let Some(s) = self.src.as_mut() else {
            return false;
        };
        let removed = s.remove(k);
        if s.is_empty() {
            self.src = None;
        }
        removed
    }

    fn add_dst(&mut self, k: NcKey) {
        let mut v = std::mem::take(&mut self.dst).into_vec();
        v.push(k);
        self.dst = v.into_boxed_slice();
    }

    fn remove_dst(&mut self, k: &NcKey) {
        if let Some(i) = self.dst.iter().position(|x| x == k) {
            let mut v = std::mem::take(&mut self.dst).into_vec();
            v.swap_remove(i);
            self.dst = v.into_boxed_slice();
        }
    }
}

struct NcEntry {
    dir: Arc<Vnode>,
    target: Option<Arc<Vnode>>,
    /// Last entered or hit ([`crate::clock::stamp`]): orders eviction
    /// across shards.
    stamp: u64,
}

type Shard = LinkedHashMap<NcKey, NcEntry, MixBuild>;

/// `ShardCell::head_stamp` of an empty shard.
const EMPTY: u64 = u64::MAX;

/// One shard, and the age of its least recently used entry readable
/// without its lock (written only under it) so eviction can pick the older
/// of two shards' heads.
struct ShardCell {
    head_stamp: AtomicU64,
    map: Mutex<Shard>,
}

impl ShardCell {
    fn lock(&self) -> ShardGuard<'_> {
        ShardGuard {
            g: self.map.lock(),
            head_stamp: &self.head_stamp,
        }
    }
}

/// The shard's lock; on unlock it republishes the head's age.
struct ShardGuard<'a> {
    g: crate::sync::MutexGuard<'a, Shard>,
    head_stamp: &'a AtomicU64,
}

impl ShardGuard<'_> {
    fn head(&self) -> u64 {
        self.g.front().map_or(EMPTY, |(_, e)| e.stamp)
    }
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
        let h = self.head();
        // Relaxed: a hint for picking an eviction victim, re-read under the
        // victim's lock.
        if self.head_stamp.load(Ordering::Relaxed) != h {
            self.head_stamp.store(h, Ordering::Relaxed);
        }
    }
}

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
/// one or two items every path but `purge_mount` defers: these run once per
/// recycled vnode, where a heap vector each was a measurable share.
#[derive(Default)]
struct Deferred {
    unhold: SmallVec<[Arc<Vnode>; 2]>,
    drop: SmallVec<[NcEntry; 2]>,
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
    shards: Box<[CachePadded<ShardCell>]>,
    limit: usize,
    /// Entries, distributed: enter and remove write only their own cell.
    entries: DistCounter,
    rotor: Rotor,
    build: MixBuild,
    shared: Arc<Shared>,
}

impl NameCache {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let n = shared.cfg.namecache_shards.max(1).next_power_of_two();
        let limit = shared.cfg.namecache_limit.max(1);
        NameCache {
            shards: (0..n)
                .map(|_| {
                    CachePadded::new(ShardCell {
                        head_stamp: AtomicU64::new(EMPTY),
                        map: Mutex::new(Shard::with_hasher(MixBuild::default())),
                    })
                })
                .collect(),
            limit,
            entries: DistCounter::new((limit / (8 * crate::counter::CELLS)).clamp(1, 64)),
            rotor: Rotor,
            build: MixBuild::default(),
            shared,
        }
    }

    /// The shard of a (directory, name). A directory's names spread over
    /// four shards only: a walk through one directory keeps returning to
    /// the same few locks and buckets (warm in this core's cache), while
    /// lookups in one busy directory still spread four ways.
    #[inline]
    fn shard_of(&self, d: usize, h: u64) -> &ShardCell {
        let i = crate::table::mix(d as u64 >> 4) ^ (h & 3);
        &self.shards[i as usize & (self.shards.len() - 1)]
    }

    #[inline]
    fn locate(&self, dir: &Vnode, name: &[u8]) -> (usize, u64, &ShardCell) {
        let d = dir as *const Vnode as usize;
        let h = self.build.hash_one((d, name));
        (d, h, self.shard_of(d, h))
    }

    /// Looks `name` up under `dir`. A hit returns a use reference; an entry
    /// whose target was doomed meanwhile is dropped and reported as a miss.
    pub fn lookup(&self, dir: &Vnode, name: &[u8]) -> NcLookup {
        let ev = &self.shared.ev;
        let (d, h, shard) = self.locate(dir, name);
        let mut deferred = Deferred::default();
        let found = {
            let mut s = shard.lock();
            match s
                .raw_entry_mut()
                .from_hash(h, |k| k.dir == d && *k.name == *name)
            {
                RawEntryMut::Vacant(_) => None,
                RawEntryMut::Occupied(mut e) => {
                    e.to_back();
                    e.get_mut().stamp = crate::clock::stamp();
                    match &e.get().target {
                        None => Some(None),
                        Some(vp) => match vp.refs.acquire(USE_ONE) {
                            Acquired::Doomed => {
                                let (k, ent) = e.remove_entry();
                                unlink(&k, &ent, &mut deferred);
                                deferred.drop.push(ent);
                                self.entries.add(-1);
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
        let (d, h, shard) = self.locate(dirv, name);
        let mut deferred = Deferred::default();
        let mut victim: Option<&ShardCell> = None;
        {
            let mut s = shard.lock();
            let key = NcKey {
                dir: d,
                name: Arc::from(name),
            };
            let new = NcEntry {
                dir: dirv.clone(),
                target: target.map(|t| t.arc().clone()),
                stamp: crate::clock::stamp(),
            };
            match s
                .raw_entry_mut()
                .from_hash(h, |k| k.dir == d && *k.name == *name)
            {
                RawEntryMut::Occupied(mut e) => {
                    e.to_back();
                    let old = std::mem::replace(e.get_mut(), new);
                    if let Some(t) = &old.target {
                        t.nc.lock().remove_dst(&key);
                    }
                    if let Some(t) = &e.get().target {
                        t.nc.lock().add_dst(key);
                    }
                    deferred.drop.push(old);
                }
                RawEntryMut::Vacant(v) => {
                    {
                        let mut l = dirv.nc.lock();
                        if l.src_len() == 0 {
                            // First entry under dir: the cache holds it. The
                            // caller's use means dir is not free: no list work.
                            dirv.refs.inc(HOLD_ONE);
                        }
                        l.add_src(key.clone());
                    }
                    if let Some(t) = &new.target {
                        t.nc.lock().add_dst(key.clone());
                    }
                    v.insert_hashed_nocheck(h, key, new);
                    self.shared.ev.nc_enters.inc();
                    if self.entries.add(1) > self.limit as isize {
                        // Over the bound: evict the least recently used of
                        // two shards' heads, this one or a rotating other.
                        let other = &self.shards[self.rotor.next(self.shards.len())];
                        if other.head_stamp.load(Ordering::Relaxed) < s.head() {
                            victim = Some(other);
                        } else {
                            self.evict_front(&mut s, &mut deferred);
                        }
                    }
                }
            }
        }
        if let Some(v) = victim {
            let mut vs = v.lock();
            self.evict_front(&mut vs, &mut deferred);
        }
        deferred.run();
    }

    /// Evicts the least recently used entry of a locked shard.
    fn evict_front(&self, s: &mut Shard, deferred: &mut Deferred) {
        if let Some((k, ent)) = s.pop_front() {
            unlink(&k, &ent, deferred);
            deferred.drop.push(ent);
            self.entries.add(-1);
            self.shared.ev.nc_evictions.inc();
        }
    }

    /// Forgets what is known about `name` under `dir` (unlink, rmdir,
    /// rename, create over a negative entry).
    pub fn remove(&self, dir: &Vnode, name: &[u8]) {
        let (d, h, shard) = self.locate(dir, name);
        let mut deferred = Deferred::default();
        {
            let mut s = shard.lock();
            if let RawEntryMut::Occupied(e) = s
                .raw_entry_mut()
                .from_hash(h, |k| k.dir == d && *k.name == *name)
            {
                let (k, ent) = e.remove_entry();
                unlink(&k, &ent, &mut deferred);
                deferred.drop.push(ent);
                self.entries.add(-1);
            }
        }
        deferred.run();
    }

    /// Forgets every entry under `dir` (it was removed, or its contents
    /// changed behind the cache's back).
    pub fn purge_dir(&self, dir: &Vnode) {
        // Copies of the keys: each removal unlinks its own key, and the last
        // one under `dir` drops the cache's hold on it.
        let keys: Vec<NcKey> = dir
            .nc
            .lock()
            .src
            .as_ref()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        self.remove_keys(keys, |e| std::ptr::eq(&*e.dir, dir));
    }

    /// Forgets every entry naming `vp`, and every entry under it.
    pub fn purge_vnode(&self, vp: &Vnode) {
        // Taken, not copied: each removal below would otherwise rebuild the
        // list without its key. An entry entered for `vp` meanwhile links
        // itself afresh and is left alone, as it would be after a copy.
        let dst = std::mem::take(&mut vp.nc.lock().dst).into_vec();
        let n = dst.len();
        self.remove_keys(dst, |e| {
            e.target.as_deref().is_some_and(|t| std::ptr::eq(t, vp))
        });
        self.purge_dir(vp);
        self.shared.ev.nc_purges.add(n as u64);
    }

    /// Forgets every entry under directories of one mount (unmount): a scan.
    pub fn purge_mount(&self, mnt: MountId) {
        for shard in self.shards.iter() {
            let mut deferred = Deferred::default();
            {
                let mut s = shard.lock();
                let doomed: Vec<NcKey> = s
                    .iter()
                    .filter(|(_, e)| e.dir.mount_id() == mnt)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    if let Some((k, ent)) = s.remove_entry(&k) {
                        unlink(&k, &ent, &mut deferred);
                        deferred.drop.push(ent);
                        self.entries.add(-1);
                    }
                }
            }
            deferred.run();
        }
    }

    fn remove_keys(&self, keys: Vec<NcKey>, pred: impl Fn(&NcEntry) -> bool) {
        for key in keys {
            let h = self.build.hash_one((key.dir, &*key.name));
            let shard = self.shard_of(key.dir, h);
            let mut deferred = Deferred::default();
            {
                let mut s = shard.lock();
                if let RawEntryMut::Occupied(e) = s.raw_entry_mut().from_hash(h, |k| *k == key) {
                    if pred(e.get()) {
                        let (k, ent) = e.remove_entry();
                        unlink(&k, &ent, &mut deferred);
                        deferred.drop.push(ent);
                        self.entries.add(-1);
                    }
                }
            }
            deferred.run();
        }
    }

    /// Entries cached now (locks every shard).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Detaches a removed entry from its vnodes' links; schedules the
/// directory's unhold if this was its last entry.
fn unlink(k: &NcKey, ent: &NcEntry, deferred: &mut Deferred) {
    {
        let mut l = ent.dir.nc.lock();
        if l.remove_src(k) && l.src_len() == 0 {
            deferred.unhold.push(ent.dir.clone());
        }
    }
    if let Some(t) = &ent.target {
        t.nc.lock().remove_dst(k);
    }
}
