//! Sizing: the limit, the watermarks derived from it, the shard counts.

/// How a [`crate::VnodeLayer`] is sized.
#[derive(Clone, Debug)]
pub struct Config {
    /// The vnode limit (FreeBSD's `desiredvnodes`). The count stays at or
    /// under it (recycling starts `count_slop()` below it, see
    /// `recycle_at`), and exceeds it only while every vnode is in use or
    /// held (allocation never fails).
    pub limit: usize,
    /// Name-cache entries at most (positive and negative).
    pub namecache_limit: usize,
    /// Run the background reclaimer thread.
    pub reclaimer: bool,
    /// Free-list shards per mount (rounded up to a power of two).
    pub freelist_shards: usize,
    /// Shards of the (mount, inode) table.
    pub table_shards: usize,
    /// Shards of the name cache.
    pub namecache_shards: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config::with_limit(262_144)
    }
}

impl Config {
    /// Defaults scaled to a limit. Shard counts shrink for tiny limits so
    /// tests force recycling races instead of spreading them thin.
    pub fn with_limit(limit: usize) -> Self {
        let limit = limit.max(1);
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let scale = |per_cpu: usize, cap: usize| {
            (cpus * per_cpu).clamp(1, cap).min(limit.div_ceil(8).max(1))
        };
        Config {
            limit,
            namecache_limit: limit.saturating_mul(2),
            reclaimer: true,
            freelist_shards: scale(4, 16),
            table_shards: scale(64, 1024),
            // Each directory's names live on 4 shards (see the name cache),
            // so two threads in different directories meet on a shard with
            // odds of about 8 * 8 / shards: with few shards they share one
            // most of the time, and two walkers pay more CPU per entry
            // than one (docs/design/vnode-layer.md).
            namecache_shards: scale(256, 2048),
        }
    }

    /// Per-cell slop of the vnode counter: 1/8 of the limit spread over the
    /// cells, at most 64 (FreeBSD allows 100 in one global counter).
    pub(crate) fn cell_slop(&self) -> usize {
        (self.limit / (8 * crate::counter::CELLS)).clamp(1, 64)
    }

    /// How far the vnode count's cheap reading can trail the truth: the
    /// counters' fold slop.
    pub fn count_slop(&self) -> usize {
        self.cell_slop() * crate::counter::CELLS
    }

    /// Where allocations start recycling, as the distributed count reads:
    /// the limit less the counters' slop. The reading trails the true count
    /// by less than the slop (other threads' unfolded deltas), so recycling
    /// from here keeps the true count at or under the limit. Below it, an
    /// allocation takes the fast path (no accounting against the limit).
    /// Half the limit at least, for tiny limits whose slop is most of them.
    pub(crate) fn recycle_at(&self) -> usize {
        self.limit - self.count_slop().min(self.limit / 2)
    }

    /// The reclaimer, working off a backlog, frees vnodes until the count is
    /// under this, leaving allocations some room before they recycle again.
    pub(crate) fn low_water(&self) -> usize {
        let r = self.recycle_at();
        r - r / 32
    }
}
