//! Counters, named after FreeBSD's sysctl tree.
//!
//! # FreeBSD
//!
//! `vfs_subr.c` exports its counters under `vfs.vnode.stats.*`,
//! `vfs.vnode.vnlru.*` (and legacy `vfs.*` names); `vfs_cache.c` under
//! `vfs.cache.stats.*`. The `vfs.vnode.free.*` counters come from the
//! instrumented kernel of seed 001 (FreeBSD bug 275594), which split the
//! iterations of `vnlru_free_impl` by the reason a vnode was skipped.
//!
//! Hot FreeBSD counters are `counter(9)` (per CPU); others are plain
//! `u_long` bumped under a lock or racily. Here every counter is a relaxed
//! `AtomicU64`; the per-iteration ones of `vnlru_free_impl` are accumulated
//! in locals and added once per call, which costs about what a per-CPU
//! `counter_u64_add` costs.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters (one set per [`FreeBsdVfs`](crate::FreeBsdVfs)).
#[derive(Default)]
pub(crate) struct Stats {
    pub alloc_sleeps: AtomicU64,
    pub allocations: AtomicU64,
    pub created: AtomicU64,
    pub kicks: AtomicU64,
    pub direct_recycles_free: AtomicU64,
    pub recycles_free: AtomicU64,
    pub recycles: AtomicU64,
    pub skipped_requeues: AtomicU64,
    pub failed_runs: AtomicU64,
    pub uma_reclaim_calls: AtomicU64,
    pub vnodes_freed: AtomicU64,
    pub free_attempt: AtomicU64,
    pub free_success: AtomicU64,
    pub free_phase2_retry: AtomicU64,
    pub free_phase2_retry_reg: AtomicU64,
    pub free_phase2_retry_dir: AtomicU64,
    pub free_phase2_retry_bad: AtomicU64,
    pub free_phase2_retry_non: AtomicU64,
    pub free_phase2_retry_doomed: AtomicU64,
    pub free_phase3_retry: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_neg_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub cache_drops: AtomicU64,
    pub cache_neg_evictions: AtomicU64,
    pub hash_insert_races: AtomicU64,
}

/// Bump a counter by `n`. Relaxed: counters order nothing.
#[inline]
pub(crate) fn add(c: &AtomicU64, n: u64) {
    if n != 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Per-call tallies of `vnlru_free_impl`, flushed into [`Stats`] at the end.
#[derive(Default)]
pub(crate) struct FreeScanTally {
    pub attempt: u64,
    pub success: u64,
    pub phase2: u64,
    pub phase2_reg: u64,
    pub phase2_dir: u64,
    pub phase2_bad: u64,
    pub phase2_non: u64,
    pub phase2_doomed: u64,
    pub phase3: u64,
}

impl Stats {
    pub(crate) fn flush_scan(&self, t: &FreeScanTally) {
        add(&self.free_attempt, t.attempt);
        add(&self.free_success, t.success);
        add(&self.free_phase2_retry, t.phase2);
        add(&self.free_phase2_retry_reg, t.phase2_reg);
        add(&self.free_phase2_retry_dir, t.phase2_dir);
        add(&self.free_phase2_retry_bad, t.phase2_bad);
        add(&self.free_phase2_retry_non, t.phase2_non);
        add(&self.free_phase2_retry_doomed, t.phase2_doomed);
        add(&self.free_phase3_retry, t.phase3);
    }
}

/// A snapshot of every counter, fields named after the sysctl leaf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FreeBsdStats {
    /// `vfs.numvnodes`: vnodes in existence (allocated, not freed).
    pub numvnodes: u64,
    /// `vfs.freevnodes`: vnodes with hold count 0 (exact sum of the parts).
    pub freevnodes: u64,
    /// `vfs.desiredvnodes` (`kern.maxvnodes`).
    pub desiredvnodes: u64,
    /// `vfs.wantfreevnodes`.
    pub wantfreevnodes: u64,
    /// Entries on `vnode_list`, markers and UMA-cached vnodes included.
    pub vnode_list_len: u64,
    /// `vfs.vnode.stats.alloc_sleeps`: `vn_alloc_hard` slept on vnlru.
    pub alloc_sleeps: u64,
    /// `vfs.vnode.stats.allocations`: calls to `vn_alloc`.
    pub allocations: u64,
    /// `vfs.vnode.stats.created`: vnodes handed out by `getnewvnode`.
    pub created: u64,
    /// `vfs.vnode.stats.freed`: vnodes returned by `freevnode`.
    pub freed: u64,
    /// `vfs.vnode.stats.recycles`: all recycles (direct + vnlru + reclaim).
    pub recycles: u64,
    /// `vfs.vnode.stats.zone_cached`: freed vnodes cached by the zone (still
    /// on `vnode_list`).
    pub zone_cached: u64,
    /// `vfs.vnode.stats.skipped_requeues`: `vdbatch_process` trylock failures.
    pub skipped_requeues: u64,
    /// `vfs.vnode.vnlru.kicks`: vnlru woken up due to vnode shortage.
    pub kicks: u64,
    /// `vfs.vnode.vnlru.direct_recycles_free`: free vnodes recycled by
    /// `vn_alloc` callers.
    pub direct_recycles_free: u64,
    /// `vfs.vnode.vnlru.recycles_free`: free vnodes recycled by vnlru or
    /// `vnlru_free_vfsops`.
    pub recycles_free: u64,
    /// `vfs.vnode.vnlru.recycles`: held vnodes recycled by `vlrureclaim`.
    pub vlru_recycles: u64,
    /// `vfs.vnode.vnlru.failed_runs`: vnlru passes that freed nothing.
    pub failed_runs: u64,
    /// `vfs.vnode.vnlru.uma_reclaim_calls`.
    pub uma_reclaim_calls: u64,
    /// `vfs.vnode.free.free_attempt`: iterations of `vnlru_free_impl`.
    pub free_attempt: u64,
    /// `vfs.vnode.free.free_success`: vnodes it recycled.
    pub free_success: u64,
    /// `vfs.vnode.free.free_phase2_retry`: skips of held vnodes.
    pub free_phase2_retry: u64,
    /// `vfs.vnode.free.free_phase2_retry_reg`.
    pub free_phase2_retry_reg: u64,
    /// `vfs.vnode.free.free_phase2_retry_dir`.
    pub free_phase2_retry_dir: u64,
    /// `vfs.vnode.free.free_phase2_retry_bad`.
    pub free_phase2_retry_bad: u64,
    /// `vfs.vnode.free.free_phase2_retry_non`.
    pub free_phase2_retry_non: u64,
    /// `vfs.vnode.free.free_phase2_retry_doomed`.
    pub free_phase2_retry_doomed: u64,
    /// `vfs.vnode.free.free_phase3_retry`: skips of other file systems.
    pub free_phase3_retry: u64,
    /// `vfs.cache.hits`: positive name cache hits.
    pub cache_hits: u64,
    /// `vfs.cache.neg_hits`: negative name cache hits.
    pub cache_neg_hits: u64,
    /// `vfs.cache.misses`.
    pub cache_misses: u64,
    /// `vfs.cache.drops`: entries not added because the cache was full.
    pub cache_drops: u64,
    /// `vfs.cache.neg_evictions`: negative entries evicted over the bound.
    pub cache_neg_evictions: u64,
    /// `vfs.cache.numcache`: entries in the name cache.
    pub cache_entries: u64,
    /// `vfs.hash.insert_races`: `vfs_hash_insert` calls that lost a race.
    pub hash_insert_races: u64,
}

impl FreeBsdStats {
    /// Every counter with its dotted sysctl-style name.
    pub fn pairs(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("vfs.numvnodes", self.numvnodes),
            ("vfs.freevnodes", self.freevnodes),
            ("vfs.desiredvnodes", self.desiredvnodes),
            ("vfs.wantfreevnodes", self.wantfreevnodes),
            ("vfs.vnode.list_len", self.vnode_list_len),
            ("vfs.vnode.stats.alloc_sleeps", self.alloc_sleeps),
            ("vfs.vnode.stats.allocations", self.allocations),
            ("vfs.vnode.stats.created", self.created),
            ("vfs.vnode.stats.freed", self.freed),
            ("vfs.vnode.stats.recycles", self.recycles),
            ("vfs.vnode.stats.zone_cached", self.zone_cached),
            ("vfs.vnode.stats.skipped_requeues", self.skipped_requeues),
            ("vfs.vnode.vnlru.kicks", self.kicks),
            (
                "vfs.vnode.vnlru.direct_recycles_free",
                self.direct_recycles_free,
            ),
            ("vfs.vnode.vnlru.recycles_free", self.recycles_free),
            ("vfs.vnode.vnlru.recycles", self.vlru_recycles),
            ("vfs.vnode.vnlru.failed_runs", self.failed_runs),
            ("vfs.vnode.vnlru.uma_reclaim_calls", self.uma_reclaim_calls),
            ("vfs.vnode.free.free_attempt", self.free_attempt),
            ("vfs.vnode.free.free_success", self.free_success),
            ("vfs.vnode.free.free_phase2_retry", self.free_phase2_retry),
            (
                "vfs.vnode.free.free_phase2_retry_reg",
                self.free_phase2_retry_reg,
            ),
            (
                "vfs.vnode.free.free_phase2_retry_dir",
                self.free_phase2_retry_dir,
            ),
            (
                "vfs.vnode.free.free_phase2_retry_bad",
                self.free_phase2_retry_bad,
            ),
            (
                "vfs.vnode.free.free_phase2_retry_non",
                self.free_phase2_retry_non,
            ),
            (
                "vfs.vnode.free.free_phase2_retry_doomed",
                self.free_phase2_retry_doomed,
            ),
            ("vfs.vnode.free.free_phase3_retry", self.free_phase3_retry),
            ("vfs.cache.hits", self.cache_hits),
            ("vfs.cache.neg_hits", self.cache_neg_hits),
            ("vfs.cache.misses", self.cache_misses),
            ("vfs.cache.drops", self.cache_drops),
            ("vfs.cache.neg_evictions", self.cache_neg_evictions),
            ("vfs.cache.numcache", self.cache_entries),
            ("vfs.hash.insert_races", self.hash_insert_races),
        ]
    }
}

impl Stats {
    /// Copy the counters into a snapshot; gauges are filled by the caller.
    pub(crate) fn snapshot(&self) -> FreeBsdStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let direct = l(&self.direct_recycles_free);
        let free = l(&self.recycles_free);
        let vlru = l(&self.recycles);
        FreeBsdStats {
            alloc_sleeps: l(&self.alloc_sleeps),
            allocations: l(&self.allocations),
            created: l(&self.created),
            freed: l(&self.vnodes_freed),
            recycles: direct + free + vlru,
            skipped_requeues: l(&self.skipped_requeues),
            kicks: l(&self.kicks),
            direct_recycles_free: direct,
            recycles_free: free,
            vlru_recycles: vlru,
            failed_runs: l(&self.failed_runs),
            uma_reclaim_calls: l(&self.uma_reclaim_calls),
            free_attempt: l(&self.free_attempt),
            free_success: l(&self.free_success),
            free_phase2_retry: l(&self.free_phase2_retry),
            free_phase2_retry_reg: l(&self.free_phase2_retry_reg),
            free_phase2_retry_dir: l(&self.free_phase2_retry_dir),
            free_phase2_retry_bad: l(&self.free_phase2_retry_bad),
            free_phase2_retry_non: l(&self.free_phase2_retry_non),
            free_phase2_retry_doomed: l(&self.free_phase2_retry_doomed),
            free_phase3_retry: l(&self.free_phase3_retry),
            cache_hits: l(&self.cache_hits),
            cache_neg_hits: l(&self.cache_neg_hits),
            cache_misses: l(&self.cache_misses),
            cache_drops: l(&self.cache_drops),
            cache_neg_evictions: l(&self.cache_neg_evictions),
            hash_insert_races: l(&self.hash_insert_races),
            ..FreeBsdStats::default()
        }
    }
}
