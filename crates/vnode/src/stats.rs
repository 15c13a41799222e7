//! A statistics snapshot with stable, FreeBSD-style dotted names.

/// Every counter of a layer at one moment. Counts of vnodes are exact at
/// snapshot time (taken with the counters' cells summed); events are totals
/// since the layer was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Vnodes in existence (`vfs.numvnodes`), free or in use.
    pub numvnodes: u64,
    /// Vnodes on a free list, which an allocation over the limit may recycle (`vfs.freevnodes`).
    pub freevnodes: u64,
    /// The vnode limit that allocation and the reclaimer steer towards (`vfs.desiredvnodes`).
    pub limit: u64,
    /// How far the distributed vnode count may read above the limit before a fold makes it exact.
    pub count_slop: u64,
    /// Vnodes allocated: one per `get` that missed the cache and built a vnode.
    pub allocations: u64,
    /// Vnodes torn down by any path: direct, reclaimer, prune, unmount, or freed with `recycle_when_free`.
    pub recycles: u64,
    /// Vnodes recycled by an allocating thread that found the layer at its limit.
    pub direct_recycles: u64,
    /// Vnodes recycled by the background reclaimer (`vfs.vnode.vnlru.recycles`).
    pub reclaimer_recycles: u64,
    /// Allocations that slept waiting for the reclaimer: always 0, since allocation here never sleeps; kept so FreeBSD-minded readers find the counter they look for.
    pub alloc_waits: u64,
    /// Allocations that went over the limit because no vnode was free to recycle.
    pub alloc_overcommits: u64,
    /// Times the background reclaimer woke up to look for work.
    pub reclaimer_wakeups: u64,
    /// Times the reclaimer was rung because the count stood over the limit with nothing free to recycle.
    pub reclaimer_kicks: u64,
    /// Calls to [`VnodeLayer::prune`](crate::VnodeLayer::prune).
    pub prune_calls: u64,
    /// Vnodes a per-mount prune examined; close to `prune_recycled` because lists are per mount.
    pub prune_attempts: u64,
    /// Vnodes a per-mount prune recycled.
    pub prune_recycled: u64,
    /// Free-list entries any reclaim path examined.
    pub free_attempts: u64,
    /// Examined vnodes passed over because they had just gained a reference.
    pub skip_raced: u64,
    /// Examined vnodes passed over because held: always 0, since free lists hold no held vnode (FreeBSD's global list does).
    pub skip_held: u64,
    /// Examined vnodes of another mount: always 0, since free lists are per mount (FreeBSD's is global).
    pub skip_foreign: u64,
    /// Lookups that found a doomed vnode in the cache and built a fresh one in its place.
    pub lookup_doomed: u64,
    /// Lookups that waited for another thread to finish constructing the same vnode.
    pub construct_waits: u64,
    /// Constructions whose file-system hook failed, leaving no cache entry.
    pub construct_failed: u64,
    /// File systems mounted in the layer now.
    pub mounts: u64,
    /// Entries in the name cache now.
    pub nc_entries: u64,
    /// The name cache's entry limit, past which it evicts its least recently used entries.
    pub nc_limit: u64,
    /// Name-cache lookups that found a vnode.
    pub nc_hits: u64,
    /// Name-cache lookups that found nothing, so the file system was asked.
    pub nc_misses: u64,
    /// Name-cache lookups that found a cached "no such name".
    pub nc_neg_hits: u64,
    /// Name-cache entries added.
    pub nc_enters: u64,
    /// Name-cache entries evicted to stay under the limit.
    pub nc_evictions: u64,
    /// Name-cache entries dropped because a vnode they name or sit under was recycled.
    pub nc_purges: u64,
}

impl Stats {
    /// `(name, value, description)` for every counter, in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, u64, &'static str)> {
        vec![
            (
                "vfs.numvnodes",
                self.numvnodes,
                "Number of vnodes in existence",
            ),
            (
                "vfs.freevnodes",
                self.freevnodes,
                "Number of free (recyclable) vnodes",
            ),
            ("vfs.desiredvnodes", self.limit, "Vnode limit"),
            (
                "vfs.vnode.stats.count_slop",
                self.count_slop,
                "Most the vnode count may read over the limit (counter fold slop)",
            ),
            (
                "vfs.vnode.stats.allocations",
                self.allocations,
                "Vnodes allocated",
            ),
            (
                "vfs.vnode.stats.recycles",
                self.recycles,
                "Vnodes recycled (all paths)",
            ),
            (
                "vfs.vnode.stats.direct_recycles",
                self.direct_recycles,
                "Vnodes recycled by allocating threads",
            ),
            (
                "vfs.vnode.stats.alloc_waits",
                self.alloc_waits,
                "Allocations that waited for the reclaimer (uvfs never waits)",
            ),
            (
                "vfs.vnode.stats.alloc_overcommits",
                self.alloc_overcommits,
                "Allocations over the limit because no vnode was free",
            ),
            (
                "vfs.vnode.vnlru.recycles",
                self.reclaimer_recycles,
                "Vnodes recycled by the background reclaimer",
            ),
            (
                "vfs.vnode.vnlru.wakeups",
                self.reclaimer_wakeups,
                "Background reclaimer wakeups",
            ),
            (
                "vfs.vnode.vnlru.kicks",
                self.reclaimer_kicks,
                "Times the reclaimer was rung",
            ),
            (
                "vfs.vnode.prune.calls",
                self.prune_calls,
                "Per-mount prune calls",
            ),
            (
                "vfs.vnode.prune.attempts",
                self.prune_attempts,
                "Vnodes examined by per-mount prune",
            ),
            (
                "vfs.vnode.prune.recycled",
                self.prune_recycled,
                "Vnodes recycled by per-mount prune",
            ),
            (
                "vfs.vnode.free.free_attempt",
                self.free_attempts,
                "Free-list entries examined by any reclaim",
            ),
            (
                "vfs.vnode.free.skip_raced",
                self.skip_raced,
                "Examined vnodes that had just gained a reference",
            ),
            (
                "vfs.vnode.free.skip_held",
                self.skip_held,
                "Examined vnodes skipped because held (free lists hold none)",
            ),
            (
                "vfs.vnode.free.skip_foreign",
                self.skip_foreign,
                "Examined vnodes of other mounts (lists are per mount)",
            ),
            (
                "vfs.vnode.stats.lookup_doomed",
                self.lookup_doomed,
                "Lookups that found a doomed vnode and built a fresh one",
            ),
            (
                "vfs.vnode.stats.construct_waits",
                self.construct_waits,
                "Lookups that waited for another thread's construction",
            ),
            (
                "vfs.vnode.stats.construct_failed",
                self.construct_failed,
                "Constructions that failed",
            ),
            ("vfs.mounts", self.mounts, "Mounted file systems"),
            (
                "vfs.cache.numentries",
                self.nc_entries,
                "Name-cache entries",
            ),
            ("vfs.cache.limit", self.nc_limit, "Name-cache entry limit"),
            ("vfs.cache.hits", self.nc_hits, "Name-cache positive hits"),
            ("vfs.cache.misses", self.nc_misses, "Name-cache misses"),
            (
                "vfs.cache.neghits",
                self.nc_neg_hits,
                "Name-cache negative hits",
            ),
            (
                "vfs.cache.enters",
                self.nc_enters,
                "Name-cache entries added",
            ),
            (
                "vfs.cache.evictions",
                self.nc_evictions,
                "Name-cache entries evicted (LRU)",
            ),
            (
                "vfs.cache.purges",
                self.nc_purges,
                "Name-cache entries purged by recycling",
            ),
        ]
    }
}
