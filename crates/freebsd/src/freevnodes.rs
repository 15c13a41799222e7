//! The `freevnodes` counter: a global plus per-CPU signed deltas.
//!
//! # FreeBSD
//!
//! Replicates `vfs_freevnodes_inc`, `vfs_freevnodes_dec`,
//! `vfs_freevnodes_rollup` and `vnlru_read_freevnodes` from
//! `sys/kern/vfs_subr.c`. A vnode is "free" when its hold count is 0. The
//! transitions 0 -> 1 and 1 -> 0 happen on every `vhold`/`vdrop` of an
//! otherwise unused vnode, far too often for one shared counter, so each CPU
//! keeps an `int8_t` delta that is folded into the global `freevnodes` only
//! when it reaches `±VNLRU_FREEVNODES_SLOP`.
//!
//! Readers (`vnlru_read_freevnodes`) return the global when it has moved
//! less than the slop since the last precise read (`freevnodes_old`);
//! otherwise they walk every CPU's delta and store the precise sum.
//!
//! # Differences
//!
//! Slots may be shared by several threads (see [`crate::pcpu`]), so deltas
//! are atomics and the fold uses `swap(0)` rather than a plain store; the
//! sum stays exact. Comparisons are `>=`/`<=` instead of `==` because a
//! shared slot can step past the threshold.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::pcpu;

/// Per-CPU drift allowed before folding into the global counter
/// (`VNLRU_FREEVNODES_SLOP`).
pub(crate) const VNLRU_FREEVNODES_SLOP: i64 = 126;

/// The free vnode count, distributed per CPU.
pub(crate) struct FreeVnodes {
    /// `freevnodes`: sum of all folded deltas.
    global: CachePadded<AtomicI64>,
    /// `freevnodes_old`: value stored by the last precise read.
    old: CachePadded<AtomicI64>,
    /// `pc_vfs_freevnodes`: one delta per emulated CPU.
    pcpu: Box<[CachePadded<AtomicI64>]>,
}

impl FreeVnodes {
    pub(crate) fn new(ncpus: usize) -> Self {
        Self {
            global: CachePadded::new(AtomicI64::new(0)),
            old: CachePadded::new(AtomicI64::new(0)),
            pcpu: (0..ncpus.max(1))
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
        }
    }

    fn cell(&self) -> &AtomicI64 {
        &self.pcpu[pcpu::curcpu(self.pcpu.len())]
    }

    /// `vfs_freevnodes_rollup`: move this CPU's delta into the global.
    #[cold]
    fn rollup(&self, cell: &AtomicI64) {
        // Relaxed: the counter is advisory (FreeBSD reads it racily too);
        // swap keeps the sum exact when the slot is shared.
        let d = cell.swap(0, Ordering::Relaxed);
        self.global.fetch_add(d, Ordering::Relaxed);
    }

    /// `vfs_freevnodes_inc`: a vnode's hold count dropped to 0.
    #[inline]
    pub(crate) fn inc(&self) {
        let cell = self.cell();
        if cell.fetch_add(1, Ordering::Relaxed) + 1 >= VNLRU_FREEVNODES_SLOP {
            self.rollup(cell);
        }
    }

    /// `vfs_freevnodes_dec`: a free vnode gained its first hold.
    #[inline]
    pub(crate) fn dec(&self) {
        let cell = self.cell();
        if cell.fetch_sub(1, Ordering::Relaxed) - 1 <= -VNLRU_FREEVNODES_SLOP {
            self.rollup(cell);
        }
    }

    /// `vnlru_read_freevnodes`: cheap when the global has not drifted by
    /// the slop since the last precise read, a walk over all CPUs otherwise.
    pub(crate) fn read(&self) -> usize {
        let rfree = self.global.load(Ordering::Relaxed);
        let rold = self.old.load(Ordering::Relaxed);
        let slop = (rfree - rold).abs();
        if slop < VNLRU_FREEVNODES_SLOP {
            return rfree.max(0) as usize;
        }
        let sum = rfree
            + self
                .pcpu
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<i64>();
        self.old.store(sum, Ordering::Relaxed);
        sum.max(0) as usize
    }

    /// Exact sum, for statistics and tests (not a FreeBSD operation).
    pub(crate) fn read_exact(&self) -> i64 {
        self.global.load(Ordering::Relaxed)
            + self
                .pcpu
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<i64>()
    }
}
