//! Timestamps for LRU order across free-list shards.
//!
//! Each shard is exact LRU by itself; to recycle in global LRU order across
//! a mount's shards we compare the ages of their heads. A stamp must be
//! cheap (it is taken on every release to the free list) and must not come
//! from a shared counter that every core would write. The CPU's invariant
//! time-stamp counter is both: one instruction, no shared state, in step
//! across cores on the machines Linux marks `constant_tsc`. Elsewhere a
//! monotonic clock serves.

/// A monotonically non-decreasing stamp (per core; across cores in step up
/// to a small skew, which only blurs LRU order between shards slightly).
#[inline]
pub(crate) fn stamp() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        // SAFETY: RDTSC has no preconditions and no side effects; every
        // x86_64 CPU implements it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(all(not(target_arch = "x86_64"), not(loom)))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
    #[cfg(loom)]
    {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}
