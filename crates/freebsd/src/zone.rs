//! A UMA-like cache of freed vnode memory (`vnode_zone`).
//!
//! # FreeBSD
//!
//! Vnodes come from the UMA zone `vnode_zone`, with `vnode_init` /
//! `vnode_fini` as the zone's init/fini: memory is put on `vnode_list` when
//! UMA first creates it and taken off only when UMA gives it back to the
//! VM (`uma_reclaim(UMA_RECLAIM_DRAIN)`, which vnlru calls). Freed vnodes
//! sitting in UMA's per-CPU buckets and bucket cache therefore stay on the
//! list, typed `VBAD`, doomed and with `VHOLD_NO_SMR` in their hold count:
//! the scans in `vnlru_free_impl` walk over them (seed 001's
//! `free_phase2_retry_bad` and `_doomed`, nearly equal, count exactly these).
//!
//! # Simplification
//!
//! One bucket per emulated CPU, overflowing into a single depot (UMA's
//! bucket cache); `drain` empties the depot only, as `UMA_RECLAIM_DRAIN`
//! leaves the per-CPU buckets alone.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::Arc;

use crate::pcpu;
use crate::vnode::Vnode;

/// Items a per-CPU bucket holds before half of it goes to the depot.
const BUCKET_SIZE: usize = if cfg!(test) { 4 } else { 64 };

/// A per-CPU bucket of cached vnode memory.
type Bucket = CachePadded<Mutex<Vec<Arc<Vnode>>>>;

pub(crate) struct Zone {
    pcpu: Box<[Bucket]>,
    depot: Mutex<Vec<Arc<Vnode>>>,
}

impl Zone {
    pub(crate) fn new(ncpus: usize) -> Self {
        Self {
            pcpu: (0..ncpus.max(1))
                .map(|_| CachePadded::new(Mutex::new(Vec::new())))
                .collect(),
            depot: Mutex::new(Vec::new()),
        }
    }

    /// `uma_zalloc_smr` from the caches; `None` means "create new memory"
    /// (`keg_alloc_slab` + `vnode_init`).
    pub(crate) fn alloc(&self) -> Option<Arc<Vnode>> {
        let cpu = pcpu::curcpu(self.pcpu.len());
        if let Some(vp) = self.pcpu[cpu].lock().pop() {
            return Some(vp);
        }
        self.depot.lock().pop()
    }

    /// `uma_zfree_smr`.
    pub(crate) fn free(&self, vp: Arc<Vnode>) {
        let cpu = pcpu::curcpu(self.pcpu.len());
        let mut b = self.pcpu[cpu].lock();
        b.push(vp);
        if b.len() >= 2 * BUCKET_SIZE {
            let spill: Vec<_> = b.drain(..BUCKET_SIZE).collect();
            drop(b);
            self.depot.lock().extend(spill);
        }
    }

    /// `zone_reclaim(UMA_RECLAIM_DRAIN)`: hand back the depot for
    /// `vnode_fini`.
    pub(crate) fn drain(&self) -> Vec<Arc<Vnode>> {
        std::mem::take(&mut *self.depot.lock())
    }

    /// Items cached (tests, statistics).
    pub(crate) fn cached(&self) -> usize {
        self.depot.lock().len() + self.pcpu.iter().map(|b| b.lock().len()).sum::<usize>()
    }
}
