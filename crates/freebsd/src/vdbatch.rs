//! Per-CPU batching of LRU requeues on the last `vdrop`.
//!
//! # FreeBSD
//!
//! `struct vdbatch`, `vdbatch_enqueue`, `vdbatch_process` and
//! `vdbatch_dequeue` (D22998). When a vnode becomes free it should move to
//! the tail of `vnode_list` (quasi-LRU), but taking `vnode_list_mtx` on
//! every last `vdrop` made that mutex the bottleneck. So each CPU collects
//! `VDBATCH_SIZE` (8) vnodes and requeues them together -- and only if a
//! *trylock* of `vnode_list_mtx` succeeds. On failure the batch is simply
//! forgotten (`vfs.vnode.stats.skipped_requeues`): "Since it is quasi-LRU
//! (read: not that great even if fully honoured) just dodge the problem."
//!
//! `v_dbatchcpu` records which CPU's batch holds the vnode, so that
//! `freevnode` can pull it out again (`vdbatch_dequeue`). The batches
//! themselves ([`VdBatches`](crate::kernel::VdBatches)) are kernel-wide
//! state, in `kernel.rs`.

use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::kernel::{Kernel, VdBatch, VDBATCH_SIZE};
use crate::pcpu;
use crate::stats;
use crate::vnode::{Interlocked, Vnode, NOCPU};

impl Kernel {
    /// `vdbatch_enqueue`: queue a newly free vnode on this CPU's batch;
    /// consumes (unlocks) the interlock.
    pub(crate) fn vdbatch_enqueue(&self, vp: &Arc<Vnode>, il: MutexGuard<'_, Interlocked>) {
        debug_assert!(!vp.is_doomed());
        if vp.dbatchcpu.load(SeqCst) != NOCPU {
            return;
        }
        let cpu = pcpu::curcpu(self.vdbatch.cpus.len());
        let mut vd = self.vdbatch.cpus[cpu].lock();
        vp.dbatchcpu.store(cpu, SeqCst);
        let i = vd.index;
        vd.tab[i] = Some(Arc::clone(vp));
        vd.index += 1;
        drop(il);
        if vd.index == VDBATCH_SIZE {
            self.vdbatch_process(&mut vd);
        }
    }

    /// `vdbatch_process`: requeue a full batch to the list tail if the
    /// list mutex can be had without waiting, otherwise drop the batch.
    #[cold]
    fn vdbatch_process(&self, vd: &mut VdBatch) {
        if let Some(mut list) = self.vnode_list.try_lock() {
            for slot in vd.tab.iter_mut() {
                if let Some(vp) = slot.take() {
                    list.insert_tail(vp.idx);
                    vp.dbatchcpu.store(NOCPU, SeqCst);
                }
            }
        } else {
            stats::add(&self.stats.skipped_requeues, 1);
            for slot in vd.tab.iter_mut() {
                if let Some(vp) = slot.take() {
                    vp.dbatchcpu.store(NOCPU, SeqCst);
                }
            }
        }
        vd.index = 0;
    }

    /// `vdbatch_dequeue`: only for vnodes about to be freed.
    pub(crate) fn vdbatch_dequeue(&self, vp: &Arc<Vnode>) {
        let cpu = vp.dbatchcpu.load(SeqCst);
        if cpu == NOCPU {
            return;
        }
        let Some(cell) = self.vdbatch.cpus.get(cpu) else {
            return;
        };
        let mut vd = cell.lock();
        for i in 0..vd.index {
            if vd.tab[i].as_ref().is_some_and(|v| Arc::ptr_eq(v, vp)) {
                vp.dbatchcpu.store(NOCPU, SeqCst);
                vd.index -= 1;
                let last = vd.index;
                vd.tab.swap(i, last);
                vd.tab[last] = None;
                break;
            }
        }
        // Either we dequeued it or that CPU's vdbatch_process beat us.
    }
}
