//! The vnode layer: lookup-or-create, the limit, recycling, prune, unmount.
//!
//! # Allocation under the limit
//!
//! Allocation bumps a distributed counter (one cell write, no shared line)
//! and compares the approximate total with the limit. Over it, the
//! allocating thread recycles one free vnode of its own mount directly
//! (O(1): the head of a per-mount LRU list), falling back to other mounts'.
//! If no vnode anywhere is free (all in use or held) it allocates anyway and
//! rings the reclaimer, which recycles as soon as releases make vnodes free:
//! allocation never fails and never sleeps. FreeBSD instead sleeps up to a
//! second in `vn_alloc_hard` and then allocates anyway.
//!
//! # Who recycles
//!
//! In the steady state at the limit the allocating thread recycles one
//! vnode for each it allocates, and the background reclaimer sleeps. The
//! alternative (the reclaimer woken at a high watermark and keeping the
//! count under a low one, so allocations rarely recycle) makes the
//! reclaimer do nearly all recycling at a higher CPU cost per vnode than a
//! direct recycle: the vnode, its name-cache entry and its memory come
//! back from another core's cache, and every free is a cross-thread free
//! in the allocator (figures in docs/design/vnode-layer.md). The direct
//! path takes the vnode this thread freed least recently, from its own
//! free-list shard, still warm in its own cache. The reclaimer works off
//! backlogs: allocations that found nothing free and overcommitted.
//!
//! # Lookup versus recycle
//!
//! A lookup takes its reference with one `fetch_add` under the table shard
//! lock. The recycler dooms with a CAS from exactly zero. If the recycler
//! wins, the lookup sees DOOMED, backs out, and builds a fresh vnode that
//! replaces the doomed one in the table (the recycler later removes the
//! entry only if it is still its own vnode). So a lookup racing a recycle
//! returns either the live vnode or a fresh one, never a doomed one.

use crate::config::Config;
use crate::error::Error;
use crate::freelist::ClaimReport;
use crate::handle::VnodeRef;
use crate::ids::{Ino, MountId, VType};
use crate::namecache::NameCache;
use crate::reclaimer::{Reclaim, Reclaimer};
use crate::refs::{Acquired, USE_ONE};
use crate::shared::Shared;
use crate::stats::Stats;
#[cfg(loom)]
use crate::sync::spin_yield;
use crate::sync::{Arc, Mutex, Ordering};
use crate::table::Table;
use crate::vnode::{FsHooks, Mount, Teardown, Vnode, VnodeData, CONSTRUCTING, FAILED, LIVE};

/// Most vnodes one allocation recycles on its own path.
const DIRECT_BATCH: usize = 8;

/// What a prune did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PruneResult {
    /// Free-list entries examined.
    pub attempts: u64,
    /// Vnodes recycled.
    pub recycled: u64,
}

/// A cache of vnodes shared by any number of mounts, under one limit.
pub struct VnodeLayer {
    /// Ourselves, for mounts: a vnode marked `recycle_when_free` is torn
    /// down by whoever drops its last reference, which needs the layer.
    me: std::sync::Weak<VnodeLayer>,
    shared: Arc<Shared>,
    table: Table,
    nc: NameCache,
    mounts: Mutex<Vec<Arc<Mount>>>,
    next_mount: crate::sync::AtomicU32,
    reclaimer: Mutex<Option<Reclaimer>>,
    global_rotor: crate::counter::Rotor,
}

impl VnodeLayer {
    /// A layer with its background reclaimer running (if `cfg.reclaimer`).
    pub fn new(cfg: Config) -> Arc<VnodeLayer> {
        let run_reclaimer = cfg.reclaimer;
        let shared = Arc::new(Shared::new(cfg));
        let layer = Arc::new_cyclic(|me| VnodeLayer {
            me: me.clone(),
            table: Table::new(shared.cfg.table_shards),
            nc: NameCache::new(shared.clone()),
            shared,
            mounts: Mutex::new(Vec::new()),
            next_mount: crate::sync::AtomicU32::new(1),
            reclaimer: Mutex::new(None),
            global_rotor: Default::default(),
        });
        if run_reclaimer {
            // A layer without its reclaimer still works (allocations recycle
            // directly), so a failed spawn is not fatal.
            if let Ok(r) = Reclaimer::spawn(Arc::downgrade(&layer)) {
                *layer.reclaimer.lock() = Some(r);
            }
        }
        layer
    }

    /// The configuration the layer was built with.
    pub fn config(&self) -> &Config {
        &self.shared.cfg
    }

    /// The layer's name cache, shared by every mount: (directory, name) ->
    /// vnode, purged when a vnode is recycled.
    pub fn namecache(&self) -> &NameCache {
        &self.nc
    }

    /// Registers a file system. The returned handle is what `get`, `prune`
    /// and `unmount` take.
    pub fn mount(&self, fs_type: &str, hooks: Arc<dyn FsHooks>) -> Arc<Mount> {
        let id = MountId(self.next_mount.fetch_add(1, Ordering::Relaxed));
        let teardown: std::sync::Weak<dyn Teardown> = self.me.clone();
        let m = Arc::new(Mount::new(
            id,
            fs_type,
            hooks,
            self.shared.clone(),
            teardown,
        ));
        self.mounts.lock().push(m.clone());
        m
    }

    /// Looks a mount up by id (None once unmounted).
    pub fn mount_by_id(&self, id: MountId) -> Option<Arc<Mount>> {
        self.mounts.lock().iter().find(|m| m.id() == id).cloned()
    }

    /// Returns the vnode for `(mnt, ino)` with a use reference, building it
    /// with `init` if it is not cached. Single flight: concurrent callers for
    /// the same inode wait for one `init` and share its vnode or its errno.
    /// `init` runs outside every lock of the layer.
    pub fn get<F>(&self, mnt: &Arc<Mount>, ino: Ino, init: F) -> Result<VnodeRef, Error>
    where
        F: FnOnce() -> Result<(VType, VnodeData), i32>,
    {
        if !self.owns(mnt) {
            return Err(Error::ForeignMount);
        }
        if mnt.is_unmounted() {
            return Err(Error::MountGone);
        }
        let key = (mnt.id(), ino);
        // Fast path: one table lock for both the lookup and, on a miss with
        // room under the limit, the insert of the new vnode.
        let fast = {
            let mut m = self.table.lock(key);
            if let Some(found) = self.take_existing(&mut m, key) {
                drop(m);
                return self.finish(found);
            }
            let s = &self.shared;
            if s.numvnodes.approx() < s.cfg.recycle_at() as isize {
                self.account_one(mnt);
                let fresh = Arc::new(Vnode::new_constructing(mnt.clone(), ino));
                m.insert(key, fresh.clone());
                Some(fresh)
            } else {
                None
            }
        };
        let fresh = match fast {
            Some(f) => f,
            None => match self.insert_near_limit(mnt, key) {
                Ok(f) => f,
                Err(found) => return self.finish(found),
            },
        };
        // Dekker with unmount: it sets `gone` then scans the table; we
        // inserted then check `gone`. One of us sees the other.
        if mnt.gone.load(Ordering::SeqCst) {
            self.fail_construction(&fresh, 19);
            return Err(Error::MountGone);
        }
        let guard = ConstructGuard {
            layer: self,
            vp: &fresh,
            armed: true,
        };
        let res = init();
        let mut guard = guard;
        guard.armed = false;
        drop(guard);
        match res {
            Ok((vtype, data)) => {
                if fresh.set_live(vtype, data) {
                    wake_waiters(&fresh);
                }
                Ok(VnodeRef::from_counted(fresh))
            }
            Err(errno) => {
                self.fail_construction(&fresh, errno);
                Err(Error::Errno(errno))
            }
        }
    }

    /// Whether `mnt` is one of this layer's. Mount ids are numbered per
    /// layer: another layer's mount would name one of ours, and its
    /// vnodes and free list would be accounted and torn down here. So a
    /// foreign mount is refused ([`Error::ForeignMount`]), and what only
    /// reads finds nothing of it.
    fn owns(&self, mnt: &Mount) -> bool {
        Arc::ptr_eq(&mnt.shared, &self.shared)
    }

    /// The cached vnode for `(mnt, ino)`, if any (never constructs).
    pub fn lookup_cached(&self, mnt: &Mount, ino: Ino) -> Option<VnodeRef> {
        if !self.owns(mnt) {
            return None;
        }
        let found = self.lookup_locked((mnt.id(), ino))?;
        self.finish(found).ok()
    }

    /// The external reference count of the cached vnode for `(mnt, ino)`
    /// (0 if none is cached). Takes no reference and moves nothing on the
    /// free lists: for asking, per event, whether the front end holds a
    /// file, where almost every answer is no.
    pub fn ext_count_of(&self, mnt: &Mount, ino: Ino) -> u64 {
        if !self.owns(mnt) {
            return 0;
        }
        let key = (mnt.id(), ino);
        let m = self.table.lock(key);
        m.get(&key).map_or(0, |vp| vp.ext.load(Ordering::Acquire))
    }

    /// Near the limit: account (possibly recycling, which takes table
    /// locks) before taking our shard's lock, then insert unless another
    /// thread's vnode got there first (`Err` with that vnode).
    #[cold]
    fn insert_near_limit(
        &self,
        mnt: &Arc<Mount>,
        key: (MountId, Ino),
    ) -> Result<Arc<Vnode>, (Arc<Vnode>, Acquired)> {
        self.alloc_account(mnt);
        let mut m = self.table.lock(key);
        if let Some(found) = self.take_existing(&mut m, key) {
            drop(m);
            self.unaccount(mnt);
            return Err(found);
        }
        let fresh = Arc::new(Vnode::new_constructing(mnt.clone(), key.1));
        m.insert(key, fresh.clone());
        Ok(fresh)
    }

    fn lookup_locked(&self, key: (MountId, Ino)) -> Option<(Arc<Vnode>, Acquired)> {
        let mut m = self.table.lock(key);
        self.take_existing(&mut m, key)
    }

    /// A use reference on the table's vnode for `key`, if it has a live
    /// one; a doomed one is dropped from the table.
    #[inline]
    fn take_existing(
        &self,
        m: &mut crate::table::Map,
        key: (MountId, Ino),
    ) -> Option<(Arc<Vnode>, Acquired)> {
        let vp = m.get(&key)?;
        match vp.refs.acquire(USE_ONE) {
            Acquired::Doomed => {
                // Being recycled (or a failed construction): drop the entry
                // so the caller builds afresh; the recycler's `remove_if`
                // will find a different vnode or none.
                self.shared.ev.lookup_doomed.inc();
                m.remove(&key);
                None
            }
            a => Some((vp.clone(), a)),
        }
    }

    /// Completes a reference taken under the table lock: list work on the
    /// free edge, then waiting out a construction in progress.
    fn finish(&self, (vp, a): (Arc<Vnode>, Acquired)) -> Result<VnodeRef, Error> {
        if a == Acquired::WasFree && vp.mount.free.on_unfree(&vp) {
            self.shared.freevnodes.add(-1);
        }
        let r = VnodeRef::from_counted(vp);
        match r.construction() {
            LIVE => Ok(r),
            _ => {
                self.shared.ev.construct_waits.inc();
                wait_constructed(&r);
                match r.construction() {
                    LIVE => Ok(r),
                    _ => Err(Error::Errno(i32::from(r.init_err.load(Ordering::Relaxed)))),
                }
            }
        }
    }

    fn fail_construction(&self, vp: &Arc<Vnode>, errno: i32) {
        // Errnos are small; anything else is reported as EIO.
        let e = i16::try_from(errno).unwrap_or(libc_eio());
        vp.init_err.store(e, Ordering::Relaxed);
        vp.refs.force_doom();
        self.table.remove_if(vp);
        if vp.publish(FAILED) {
            wake_waiters(vp);
        }
        self.unaccount(&vp.mount);
        self.shared.ev.construct_failed.inc();
    }

    /// Counts a new vnode when well under the limit (no recycling needed).
    #[inline]
    fn account_one(&self, mnt: &Mount) {
        mnt.live.add(1);
        self.shared.ev.allocations.inc();
        self.shared.numvnodes.add(1);
    }

    /// Counts a new vnode near or over the limit: over it, recycles one for
    /// one (or overcommits and rings the reclaimer). The reclaimer is not
    /// rung merely for nearing the limit: see the module docs.
    fn alloc_account(&self, mnt: &Arc<Mount>) {
        mnt.live.add(1);
        let s = &self.shared;
        s.ev.allocations.inc();
        let n = s.numvnodes.add(1);
        let at = s.cfg.recycle_at() as isize;
        if n > at {
            self.alloc_hard(mnt, (n - at) as usize);
        }
    }

    fn unaccount(&self, mnt: &Mount) {
        mnt.live.add(-1);
        self.shared.numvnodes.add(-1);
    }

    /// Over the limit by `over`: recycle on this thread, preferring the
    /// allocating mount's LRU (no other mount's lock is touched in the
    /// common case), else any mount's; else overcommit and ring the bell.
    /// Usually one vnode; a few more (at most [`DIRECT_BATCH`]) when an
    /// earlier overcommit left the count far over, so the count settles
    /// back under the limit even without the background reclaimer.
    #[cold]
    fn alloc_hard(&self, mnt: &Arc<Mount>, over: usize) {
        let s = &self.shared;
        let want = over.clamp(1, DIRECT_BATCH);
        let mut got = self.reclaim_mount_near(mnt, want);
        if got < want {
            got += self.reclaim_global(want - got);
        }
        if got > 0 {
            s.ev.direct_recycles.add(got as u64);
            return;
        }
        s.ev.alloc_overcommits.inc();
        // Before ringing: the reclaimer clears the flag when it wakes, so
        // a flag set after its pass started is seen by the next pass.
        s.backlog.store(true, Ordering::SeqCst);
        if s.cfg.reclaimer && s.bell.ring() {
            s.ev.reclaimer_kicks.inc();
        }
    }

    /// Recycles up to `n` free vnodes of one mount, LRU first. Returns how
    /// many were recycled; adds what was examined to `rep`.
    fn reclaim_mount(&self, mnt: &Mount, n: usize, rep: Option<&mut ClaimReport>) -> usize {
        let mut claimed = Vec::new();
        let mut local = ClaimReport::default();
        mnt.free.claim(n, &mut claimed, &mut local);
        let got = self.finish_claim(claimed, local);
        if let Some(r) = rep {
            r.attempts += local.attempts;
            r.raced += local.raced;
        }
        got
    }

    /// An allocating thread's direct recycle from its own mount: two-choice
    /// LRU (see `FreeList::claim_near`), so concurrent allocators spread
    /// over the shards instead of all taking the oldest one's lock.
    fn reclaim_mount_near(&self, mnt: &Mount, n: usize) -> usize {
        let mut claimed = Vec::new();
        let mut rep = ClaimReport::default();
        mnt.free.claim_near(n, &mut claimed, &mut rep);
        self.finish_claim(claimed, rep)
    }

    /// Books a claim's counters and tears the claimed vnodes down.
    fn finish_claim(&self, claimed: Vec<Arc<Vnode>>, rep: ClaimReport) -> usize {
        let s = &self.shared;
        if rep.attempts > 0 {
            s.freevnodes.add(-(rep.attempts as isize));
            s.ev.claim_attempts.add(rep.attempts);
            s.ev.skip_raced.add(rep.raced);
        }
        let got = claimed.len();
        for vp in claimed {
            self.teardown(vp);
        }
        got
    }

    /// Recycles up to `n` free vnodes across mounts, round-robin.
    pub(crate) fn reclaim_global(&self, n: usize) -> usize {
        let mounts: Vec<Arc<Mount>> = self.mounts.lock().clone();
        if mounts.is_empty() {
            return 0;
        }
        let start = self.global_rotor.next(mounts.len());
        let mut done = 0;
        for k in 0..mounts.len() {
            if done >= n {
                break;
            }
            done += self.reclaim_mount(&mounts[(start + k) % mounts.len()], n - done, None);
        }
        done
    }

    /// Tears down a claimed (doomed, unlisted, unreferenced) vnode: out of
    /// the table and the name cache, then the file system's reclaim hook,
    /// outside every lock.
    pub(crate) fn teardown(&self, vp: Arc<Vnode>) {
        self.table.remove_if(&vp);
        self.nc.purge_vnode(&vp);
        vp.mount.hooks.reclaim(&vp);
        self.unaccount(&vp.mount);
        self.shared.ev.recycles.inc();
    }

    /// Recycles up to `n` free vnodes of `mnt`, least recently used first,
    /// at a cost proportional to `n`: it never visits another mount's vnodes
    /// or a held one (free lists hold neither). ZFS's `arc_prune` entry.
    pub fn prune(&self, mnt: &Mount, n: usize) -> PruneResult {
        if !self.owns(mnt) {
            return PruneResult::default();
        }
        let mut rep = ClaimReport::default();
        let recycled = self.reclaim_mount(mnt, n, Some(&mut rep)) as u64;
        let ev = &self.shared.ev;
        ev.prune_calls.inc();
        ev.prune_attempts.add(rep.attempts);
        ev.prune_recycled.add(recycled);
        PruneResult {
            attempts: rep.attempts,
            recycled,
        }
    }

    /// Drops every external reference on the mount's vnodes (a FUSE
    /// session ended: no FORGET will come for them); returns how many
    /// vnodes had some. A concurrent `ext_release` loses its CAS to the
    /// swap, so each count's hold is dropped once.
    pub fn ext_release_mount(&self, mnt: &Mount) -> usize {
        if !self.owns(mnt) {
            return 0;
        }
        let mut n = 0;
        for vp in self.table.of_mount(mnt.id()) {
            if vp.ext.swap(0, Ordering::AcqRel) > 0 {
                vp.release(crate::refs::HOLD_ONE);
                n += 1;
            }
        }
        n
    }

    /// The inode numbers of the mount's vnodes with an external reference
    /// now (those a FUSE kernel holds). Walks the whole table: for rare
    /// events (a watcher that lost changes must invalidate all of them).
    pub fn ext_held(&self, mnt: &Mount) -> Vec<Ino> {
        if !self.owns(mnt) {
            return Vec::new();
        }
        self.table
            .of_mount(mnt.id())
            .into_iter()
            .filter(|vp| vp.ext.load(Ordering::Acquire) > 0)
            .map(|vp| vp.ino())
            .collect()
    }

    /// Use references to the vnodes of the mount that the front end holds
    /// (external count above 0), with their inode numbers and those
    /// counts, in one walk of the table: a live upgrade's snapshot of a
    /// million nodes, which `ext_held` and then a `lookup_cached` of each
    /// would look up twice (the inode number is read while the vnode is
    /// in the cache: reading it afterwards costs a million misses more).
    pub fn ext_held_refs(&self, mnt: &Mount) -> Vec<(Ino, VnodeRef, u64)> {
        self.refs_of_mount(mnt, |ext| ext > 0)
    }

    /// Use references to the vnodes of the mount in the table that the
    /// front end does not hold (external count 0), in one walk of the
    /// table (for rare events: a live upgrade saving what file handles of
    /// the mount may still name, beside the held ones it saves anyway).
    pub fn unheld_refs(&self, mnt: &Mount) -> Vec<VnodeRef> {
        self.refs_of_mount(mnt, |ext| ext == 0)
            .into_iter()
            .map(|(_, vp, _)| vp)
            .collect()
    }

    /// Use references to the vnodes of `mnt` whose external count passes
    /// `want` (checked again once referenced), with their inode numbers
    /// and those counts. The
    /// shards are split among threads: a million vnodes are a million
    /// cache misses, and a live upgrade's requests wait for them.
    fn refs_of_mount(
        &self,
        mnt: &Mount,
        want: impl Fn(u64) -> bool + Sync,
    ) -> Vec<(Ino, VnodeRef, u64)> {
        if !self.owns(mnt) {
            return Vec::new();
        }
        let n = self.table.shard_count();
        let threads = std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .clamp(1, 8)
            .min(n);
        let per = n.div_ceil(threads);
        let want = &want;
        let walk = move |shards: std::ops::Range<usize>| {
            let mut taken = Vec::new();
            self.table.each_of_mount(mnt.id(), shards, |vp| {
                if want(vp.ext.load(Ordering::Acquire)) {
                    match vp.refs.acquire(USE_ONE) {
                        Acquired::Doomed => {}
                        a => taken.push((vp.clone(), a)),
                    }
                }
            });
            let mut out = Vec::with_capacity(taken.len());
            let mut taken = taken.into_iter().peekable();
            while taken.peek().is_some() {
                // A batch's vnodes read first, their misses overlapping
                // (`each_of_mount`): this thread's half of a million
                // vnodes left the cache long ago.
                let batch: Vec<_> = taken.by_ref().take(32).collect();
                for (vp, _) in &batch {
                    std::hint::black_box(vp.ext.load(Ordering::Relaxed));
                }
                out.extend(batch.into_iter().filter_map(|t| {
                    let vp = self.finish(t).ok()?;
                    let count = vp.ext_count();
                    want(count).then(|| (vp.ino(), vp, count))
                }));
            }
            out
        };
        if threads == 1 {
            return walk(0..n);
        }
        std::thread::scope(|s| {
            let parts: Vec<_> = (1..threads)
                .map(|i| s.spawn(move || walk((i * per).min(n)..((i + 1) * per).min(n))))
                .collect();
            let mut all = walk(0..per.min(n));
            for p in parts {
                match p.join() {
                    Ok(v) => all.extend(v),
                    Err(e) => std::panic::resume_unwind(e),
                }
            }
            all
        })
    }

    /// Unmounts: recycles every vnode of the mount and forgets its names.
    /// With vnodes still in use or held, fails with [`Error::Busy`] naming
    /// how many (and leaves the mount usable), unless `force`, which dooms
    /// them: their holders keep memory-safe, stale references.
    pub fn unmount(&self, mnt: &Arc<Mount>, force: bool) -> Result<(), Error> {
        if !self.owns(mnt) {
            return Err(Error::ForeignMount);
        }
        if mnt.gone.swap(true, Ordering::SeqCst) {
            return Err(Error::MountGone);
        }
        // Names hold directories: forget them first so those become free.
        self.nc.purge_mount(mnt.id());
        while self.reclaim_mount(mnt, usize::MAX, None) > 0 {}
        let busy = mnt.vnode_count();
        if busy > 0 && !force {
            mnt.gone.store(false, Ordering::SeqCst);
            return Err(Error::Busy { busy });
        }
        if busy > 0 {
            for vp in self.table.of_mount(mnt.id()) {
                wait_constructed(&vp);
                if vp.construction() == FAILED {
                    continue; // its constructor accounts for it
                }
                if vp.refs.force_doom() & crate::refs::DOOMED != 0 {
                    continue; // already doomed: someone else tears it down
                }
                self.teardown(vp);
            }
        }
        self.mounts.lock().retain(|m| !Arc::ptr_eq(m, mnt));
        Ok(())
    }

    /// A snapshot of every counter.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let ev = &s.ev;
        Stats {
            numvnodes: s.numvnodes.exact().max(0) as u64,
            freevnodes: s.freevnodes.exact().max(0) as u64,
            limit: s.cfg.limit as u64,
            count_slop: s.cfg.count_slop() as u64,
            allocations: ev.allocations.get(),
            recycles: ev.recycles.get(),
            direct_recycles: ev.direct_recycles.get(),
            reclaimer_recycles: ev.reclaimer_recycles.get(),
            alloc_waits: 0,
            alloc_overcommits: ev.alloc_overcommits.get(),
            reclaimer_wakeups: ev.reclaimer_wakeups.get(),
            reclaimer_kicks: ev.reclaimer_kicks.get(),
            prune_calls: ev.prune_calls.get(),
            prune_attempts: ev.prune_attempts.get(),
            prune_recycled: ev.prune_recycled.get(),
            free_attempts: ev.claim_attempts.get(),
            skip_raced: ev.skip_raced.get(),
            skip_held: 0,
            skip_foreign: 0,
            lookup_doomed: ev.lookup_doomed.get(),
            construct_waits: ev.construct_waits.get(),
            construct_failed: ev.construct_failed.get(),
            mounts: self.mounts.lock().len() as u64,
            nc_entries: self.nc.len() as u64,
            nc_limit: s.cfg.namecache_limit as u64,
            nc_hits: ev.nc_hits.get(),
            nc_misses: ev.nc_misses.get(),
            nc_neg_hits: ev.nc_neg_hits.get(),
            nc_enters: ev.nc_enters.get(),
            nc_evictions: ev.nc_evictions.get(),
            nc_purges: ev.nc_purges.get(),
        }
    }

    /// Entries in the (mount, inode) table: for tests and memory reports.
    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    /// Heap bytes of the table's buckets (memory report).
    pub fn table_heap_bytes(&self) -> usize {
        self.table.heap_bytes()
    }
}

impl Drop for VnodeLayer {
    fn drop(&mut self) {
        if let Some(mut r) = self.reclaimer.lock().take() {
            r.stop(&self.shared.bell);
        }
        // Free lists hold `Arc`s of vnodes that hold their mount: break the
        // cycle by force-unmounting whatever is still mounted.
        let mounts: Vec<Arc<Mount>> = self.mounts.lock().clone();
        for m in mounts {
            let _ = self.unmount(&m, true);
        }
    }
}

/// Marks a construction failed if `init` panics, so waiters are not stuck.
struct ConstructGuard<'a> {
    layer: &'a VnodeLayer,
    vp: &'a Arc<Vnode>,
    armed: bool,
}

impl Reclaim for VnodeLayer {
    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn reclaim_global(&self, n: usize) -> usize {
        VnodeLayer::reclaim_global(self, n)
    }
}

impl Teardown for VnodeLayer {
    fn teardown(&self, vp: Arc<Vnode>) {
        VnodeLayer::teardown(self, vp)
    }
}

impl Drop for ConstructGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.layer.fail_construction(self.vp, 5 /* EIO */);
        }
    }
}

fn wake_waiters(vp: &Vnode) {
    #[cfg(not(loom))]
    // SAFETY: unpark_all only uses the address as a key in parking_lot's
    // global table; any address is acceptable, and this one is stable while
    // the waiters (who hold references) wait on it.
    unsafe {
        parking_lot_core::unpark_all(state_key(vp), parking_lot_core::DEFAULT_UNPARK_TOKEN);
    }
    #[cfg(loom)]
    let _ = vp;
}

fn wait_constructed(vp: &Vnode) {
    while vp.construction() == CONSTRUCTING && vp.announce_waiter() {
        #[cfg(not(loom))]
        // SAFETY: the key is this vnode's state address (stable: the caller
        // holds a reference). `validate` re-checks the state under the
        // parking-table lock, so a wake between our load and parking is not
        // lost; the callbacks neither panic nor call into parking_lot.
        unsafe {
            parking_lot_core::park(
                state_key(vp),
                || vp.construction() == CONSTRUCTING,
                || {},
                |_, _| {},
                parking_lot_core::DEFAULT_PARK_TOKEN,
                None,
            );
        }
        #[cfg(loom)]
        spin_yield();
    }
}

#[cfg(not(loom))]
fn state_key(vp: &Vnode) -> usize {
    &vp.state as *const _ as usize
}

/// EIO without a libc dependency (its value is 5 on every Unix).
const fn libc_eio() -> i16 {
    5
}
