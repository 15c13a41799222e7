//! Distributed counters: hot-path updates touch a cell of their own thread's,
//! not one cache line shared by every core.
//!
//! # Slop
//!
//! A [`DistCounter`] keeps a signed delta per cell and folds it into the
//! global value only when the delta drifts past `slop` (FreeBSD folds its
//! per-CPU free-vnode deltas past 126, `VNLRU_FREEVNODES_SLOP`). So
//! [`DistCounter::approx`] — one load of a line that is written once per
//! `slop` updates of a cell — is within `cells * slop` of the truth, and
//! [`DistCounter::exact`] sums the cells when the caller needs the truth.
//!
//! [`StatCounter`] is the simpler kind for statistics nobody decides on:
//! cells only, summed when read.

use crate::sync::{AtomicIsize, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Cells per counter. More cells than cores keeps threads that share a core
/// apart too; the exact sum stays cheap. Shrunk under loom so models stay small.
#[cfg(not(loom))]
pub const CELLS: usize = 16;
#[cfg(loom)]
pub const CELLS: usize = 2;

#[cfg(not(loom))]
static NEXT_SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(not(loom))]
thread_local! {
    /// This thread's cell index, handed out round-robin on first use.
    static SLOT: usize = NEXT_SLOT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(loom)]
loom::lazy_static! {
    /// Per model iteration: threads get distinct slots, so models exercise
    /// cross-shard races (home shards, distinct counter cells).
    static ref NEXT_LOOM_SLOT: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
}

#[cfg(loom)]
loom::thread_local! {
    static LOOM_SLOT: usize = NEXT_LOOM_SLOT.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's cell index in `0..CELLS`.
#[inline]
pub(crate) fn thread_slot() -> usize {
    #[cfg(loom)]
    {
        LOOM_SLOT.with(|s| *s) % CELLS
    }
    #[cfg(not(loom))]
    {
        SLOT.with(|s| *s) % CELLS
    }
}

/// A counter with per-cell deltas folded into a global value past a slop.
pub struct DistCounter {
    global: CachePadded<AtomicIsize>,
    cells: Box<[CachePadded<AtomicIsize>]>,
    slop: isize,
}

impl DistCounter {
    /// A counter at zero whose cells each fold into the global value once
    /// their delta passes `slop` (at least 1): a larger slop makes updates
    /// cheaper and [`Self::approx`] coarser.
    pub fn new(slop: usize) -> Self {
        DistCounter {
            global: CachePadded::new(AtomicIsize::new(0)),
            cells: (0..CELLS)
                .map(|_| CachePadded::new(AtomicIsize::new(0)))
                .collect(),
            slop: slop.max(1) as isize,
        }
    }

    /// The largest distance between [`Self::approx`] and [`Self::exact`].
    pub fn error_bound(&self) -> usize {
        CELLS * self.slop as usize
    }

    /// Adds `delta` and returns the (approximate) global value afterwards.
    #[inline]
    pub fn add(&self, delta: isize) -> isize {
        let cell = &self.cells[thread_slot()];
        // Relaxed: the cells carry no data; only their sum matters, and
        // readers accept the documented slop.
        let local = cell.fetch_add(delta, Ordering::Relaxed) + delta;
        if local > self.slop || local < -self.slop {
            return self.fold(cell);
        }
        self.global.load(Ordering::Relaxed) + local
    }

    #[cold]
    fn fold(&self, cell: &AtomicIsize) -> isize {
        let moved = cell.swap(0, Ordering::Relaxed);
        self.global.fetch_add(moved, Ordering::Relaxed) + moved
    }

    /// The global value: off by at most [`Self::error_bound`].
    #[inline]
    pub fn approx(&self) -> isize {
        self.global.load(Ordering::Relaxed)
    }

    /// The global value plus every cell's delta. Exact when no update runs
    /// concurrently; otherwise some value the counter held during the call,
    /// give or take the updates in flight.
    pub fn exact(&self) -> isize {
        let cells: isize = self.cells.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        self.global.load(Ordering::Relaxed) + cells
    }
}

/// A statistics counter: cells only, summed on read.
pub struct StatCounter {
    cells: Box<[CachePadded<AtomicU64>]>,
}

impl Default for StatCounter {
    fn default() -> Self {
        StatCounter {
            cells: (0..CELLS)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }
}

impl StatCounter {
    /// Adds `n` to the calling thread's cell.
    #[inline]
    pub fn add(&self, n: u64) {
        self.cells[thread_slot()].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one event.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// The total over every cell; updates racing the read may or may not
    /// be included.
    pub fn get(&self) -> u64 {
        self.cells.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// A round-robin cursor private to each thread: spreading choices without
/// a shared counter that every chooser would write.
#[derive(Default)]
pub(crate) struct Rotor;

#[cfg(not(loom))]
thread_local! {
    static TICK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Rotor {
    /// The calling thread's next position modulo `n` (n > 0), starting
    /// from its counter cell so threads begin apart.
    #[inline]
    pub(crate) fn next(&self, n: usize) -> usize {
        #[cfg(not(loom))]
        {
            TICK.with(|t| {
                let v = t.get().wrapping_add(1);
                t.set(v);
                v.wrapping_add(thread_slot()) % n
            })
        }
        #[cfg(loom)]
        {
            let _ = n;
            0
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn approx_within_bound_and_exact_when_quiet() {
        let c = Arc::new(DistCounter::new(8));
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for k in 0..10_000 {
                        c.add(if (k + i) % 3 == 0 { -1 } else { 1 });
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let exact: isize = (0..4)
            .map(|i| {
                (0..10_000)
                    .map(|k| if (k + i) % 3 == 0 { -1 } else { 1 })
                    .sum::<isize>()
            })
            .sum();
        assert_eq!(c.exact(), exact);
        assert!((c.approx() - exact).unsigned_abs() <= c.error_bound());
    }

    #[test]
    fn stat_counter_sums_all_threads() {
        let c = Arc::new(StatCounter::default());
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| c.inc()))
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(c.get(), 3000);
    }
}
