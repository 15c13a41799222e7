//! A FreeBSD-like name cache (`sys/kern/vfs_cache.c`, locked paths only).
//!
//! # FreeBSD
//!
//! Entries map `(directory vnode, name)` to a vnode, or to nothing
//! (negative entry). They sit in a hash table whose chains are protected by
//! an array of bucket locks (`bucketlocks`, `mp_ncpus * 64` of them); each
//! vnode also lists the entries leaving it (`v_cache_src`) and pointing at
//! it (`v_cache_dst`) under per-vnode locks (`vnodelocks`). Entering the
//! first entry under a directory `vhold`s the directory and removing the
//! last one `vdrop`s it: this is why directories with cached children are
//! "held" and skipped by `vnlru_free_impl` (seed 001's
//! `free_phase2_retry_dir`). Recycling a vnode purges its entries
//! (`cache_purge`). The total is capped at `ncsize = desiredvnodes *
//! ncsizefactor (2)`: over it, `cache_enter` just drops the new entry
//! (`numdrops`). Negative entries are bounded separately and the oldest is
//! evicted first (`cache_negative_zap_one`).
//!
//! # Locking here
//!
//! Order: vnode `nc` locks (by list index, as FreeBSD orders vnode locks by
//! address) -> bucket lock -> negative list lock. The vnode side lists and
//! the bucket are always changed together with all three held, so they
//! agree. A positive lookup does `vget_prep` while still holding the bucket
//! lock: the target cannot be freed then, because `vgonel` purges its
//! entries (which needs that bucket lock) before the memory can go.
//!
//! # Simplifications
//!
//! No lockless (SMR) fast path, no `..` entries or timestamps, one
//! negative FIFO instead of FreeBSD's per-CPU negative lists with hot and
//! cold promotion, bound `ncsize / ncnegfactor (5)` for negatives.
//!
//! The tables and counters ([`NameCache`](crate::kernel::NameCache)) are
//! kernel-wide state, in `kernel.rs`; a vnode's own lists
//! ([`NcLinks`]) are part of the vnode record.

use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::kernel::{Kernel, NcEntry};
use crate::refs::VRef;
use crate::stats;
use crate::vnode::{NcKey, NcLinks, Vnode};

/// Result of [`FreeBsdVfs::cache_lookup`](crate::FreeBsdVfs::cache_lookup).
#[derive(Debug)]
pub enum CacheLookup {
    /// A positive entry; the vnode is referenced.
    Hit(VRef),
    /// A negative entry: the name is known not to exist.
    Negative,
    /// No entry (or the entry's vnode was being recycled).
    Miss,
}

/// Lock the `nc` lists of `a` and (if any) `b` in list index order.
fn lock_pair<'a>(
    a: &'a Vnode,
    b: Option<&'a Vnode>,
) -> (MutexGuard<'a, NcLinks>, Option<MutexGuard<'a, NcLinks>>) {
    match b {
        None => (a.nc.lock(), None),
        Some(b) if a.idx < b.idx => {
            let ga = a.nc.lock();
            (ga, Some(b.nc.lock()))
        }
        Some(b) => {
            let gb = b.nc.lock();
            (a.nc.lock(), Some(gb))
        }
    }
}

impl Kernel {
    /// `cache_lookup` (locked variant).
    pub(crate) fn cache_lookup(self: &Arc<Self>, dvp: &Vnode, name: &str) -> CacheLookup {
        let key = NcKey {
            dgen: dvp.generation(),
            name: name.into(),
        };
        let b = self.cache.bucket(&key).lock();
        let Some(e) = b.get(&key) else {
            drop(b);
            stats::add(&self.stats.cache_misses, 1);
            return CacheLookup::Miss;
        };
        let Some(vp) = e.vp.clone() else {
            drop(b);
            stats::add(&self.stats.cache_neg_hits, 1);
            return CacheLookup::Negative;
        };
        let vs = self.vget_prep(&vp);
        drop(b);
        match self.vget_finish(&vp, vs) {
            Ok(()) => {
                stats::add(&self.stats.cache_hits, 1);
                CacheLookup::Hit(VRef::from_owned(self, vp))
            }
            Err(_) => {
                stats::add(&self.stats.cache_misses, 1);
                CacheLookup::Miss
            }
        }
    }

    /// `cache_enter`: add `(dvp, name) -> vp` (negative if `vp` is
    /// `None`). Silently does nothing for `.`, for `vp == dvp`, for doomed
    /// vnodes, for an existing entry, or when the cache is full.
    pub(crate) fn cache_enter(&self, dvp: &Arc<Vnode>, name: &str, vp: Option<&Arc<Vnode>>) {
        if name.is_empty() || name == "." || vp.is_some_and(|v| Arc::ptr_eq(v, dvp)) {
            return;
        }
        let c = &self.cache;
        if c.numcache.fetch_add(1, SeqCst) + 1 >= c.ncsize {
            c.numcache.fetch_sub(1, SeqCst);
            stats::add(&self.stats.cache_drops, 1);
            return;
        }
        let key = NcKey {
            dgen: dvp.generation(),
            name: name.into(),
        };
        let (mut dl, mut vl) = lock_pair(dvp, vp.map(|v| &**v));
        if dvp.is_doomed() || vp.is_some_and(|v| v.is_doomed()) {
            c.numcache.fetch_sub(1, SeqCst);
            return;
        }
        let mut b = c.bucket(&key).lock();
        if b.contains_key(&key) {
            c.numcache.fetch_sub(1, SeqCst);
            return;
        }
        let id = c.next_id.fetch_add(1, SeqCst);
        b.insert(
            key.clone(),
            NcEntry {
                id,
                dvp: Arc::clone(dvp),
                vp: vp.cloned(),
            },
        );
        let first = dl.src.is_empty();
        dl.src.insert(id, key.clone());
        dvp.nc_src_count.store(dl.src.len(), SeqCst);
        if first {
            // The directory's hold for its cached children.
            self.vhold(dvp);
        }
        let negative = match vl.as_mut() {
            Some(vl) => {
                vl.dst.insert(id, key.clone());
                false
            }
            None => true,
        };
        if negative {
            c.numneg.fetch_add(1, SeqCst);
            c.neglist.lock().push_back((id, key));
        }
        drop(b);
        drop(vl);
        drop(dl);
        if negative && c.numneg.load(SeqCst) > c.neg_limit {
            self.cache_negative_zap_one();
        }
    }

    /// `cache_negative_zap_one`: evict the oldest negative entry.
    fn cache_negative_zap_one(&self) {
        loop {
            let Some((id, key)) = self.cache.neglist.lock().pop_front() else {
                return;
            };
            if self.cache_zap(&key, Some(id)) {
                stats::add(&self.stats.cache_neg_evictions, 1);
                return;
            }
            // Stale id: that entry is gone already; try the next one.
        }
    }

    /// `cache_zap_locked` and its lock dance: remove the entry for `key`
    /// (only if its id is `expect`, when given). Returns whether it did.
    pub(crate) fn cache_zap(&self, key: &NcKey, expect: Option<u64>) -> bool {
        let c = &self.cache;
        loop {
            let (id, dvp, vp) = {
                let b = c.bucket(key).lock();
                let Some(e) = b.get(key) else {
                    return false;
                };
                if expect.is_some_and(|x| x != e.id) {
                    return false;
                }
                (e.id, Arc::clone(&e.dvp), e.vp.clone())
            };
            let (mut dl, mut vl) = lock_pair(&dvp, vp.as_deref());
            let mut b = c.bucket(key).lock();
            if b.get(key).map(|e| e.id) != Some(id) {
                // Lost a race with another zap or a replacement; retry.
                continue;
            }
            b.remove(key);
            drop(b);
            dl.src.remove(&id);
            dvp.nc_src_count.store(dl.src.len(), SeqCst);
            let last = dl.src.is_empty();
            if let Some(vl) = vl.as_mut() {
                vl.dst.remove(&id);
            } else {
                c.numneg.fetch_sub(1, SeqCst);
            }
            drop(vl);
            drop(dl);
            c.numcache.fetch_sub(1, SeqCst);
            if last {
                self.vdrop(&dvp);
            }
            return true;
        }
    }

    /// `cache_remove` for a name under `dvp`.
    pub(crate) fn cache_remove(&self, dvp: &Vnode, name: &str) -> bool {
        let key = NcKey {
            dgen: dvp.generation(),
            name: name.into(),
        };
        self.cache_zap(&key, None)
    }

    /// `cache_purge`: remove every entry from and to `vp`.
    pub(crate) fn cache_purge(&self, vp: &Vnode) {
        loop {
            let next = {
                let l = vp.nc.lock();
                l.src
                    .iter()
                    .chain(l.dst.iter())
                    .next()
                    .map(|(id, k)| (*id, k.clone()))
            };
            let Some((id, key)) = next else {
                return;
            };
            if !self.cache_zap(&key, Some(id)) {
                // Cannot happen while lists and buckets agree; never spin.
                let mut l = vp.nc.lock();
                l.src.remove(&id);
                l.dst.remove(&id);
                vp.nc_src_count.store(l.src.len(), SeqCst);
            }
        }
    }
}
