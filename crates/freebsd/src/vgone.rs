//! Reclaiming a vnode: `vgonel` and `vtryrecycle`.
//!
//! # FreeBSD
//!
//! `vgonel` dooms a vnode (`VIRF_DOOMED`) with its vnode lock held
//! exclusively, purges its name cache entries, runs `VOP_INACTIVE` if the
//! vnode was active or inactive processing was owed, calls `VOP_RECLAIM`
//! (the file system drops `v_data` and calls `vfs_hash_remove`), takes it
//! off its mount (`delmntque`) and finally types it `VBAD`. The memory is
//! freed only when the last hold goes (`vdropl_final`).
//!
//! `vtryrecycle` is the non-blocking wrapper used on free vnodes picked by
//! `vnlru_free_impl`: `VOP_LOCK(LK_NOWAIT)`, then under the interlock bail
//! out if someone took a use reference meanwhile, else `vgonel`. Either way
//! the scanner's hold is dropped with `vdropl_recycle` (no requeue).
//!
//! # Simplifications
//!
//! No buffers, VM objects, advisory locks or write suspension
//! (`vn_start_write` always succeeds).

use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::kernel::Kernel;
use crate::stats;
use crate::vnode::{Interlocked, VType, Vnode, FS_NONE, VIRF_DOOMED, VI_DOINGINACT, VI_OWEINACT};
use crate::{EBUSY, EWOULDBLOCK};

impl Kernel {
    /// `vgonel`: vnode lock held exclusively by the caller, interlock held
    /// on entry and on return.
    pub(crate) fn vgonel<'a>(
        &self,
        vp: &'a Arc<Vnode>,
        il: MutexGuard<'a, Interlocked>,
    ) -> MutexGuard<'a, Interlocked> {
        if vp.is_doomed() {
            return il;
        }
        vp.irflag.fetch_or(VIRF_DOOMED, SeqCst);
        let active = vp.usecount.load(SeqCst) > 0;
        let mut oweinact = il.iflag & VI_OWEINACT != 0;
        let doinginact = il.iflag & VI_DOINGINACT != 0;
        let mp = il.mount.clone();
        drop(il);

        // cache_purge_vgone.
        self.cache_purge(vp);

        // If purging an active vnode, it must be deactivated first.
        if let Some(mp) = &mp {
            if !doinginact && (oweinact || active) {
                loop {
                    let il = vp.interlock.lock();
                    let il = self.vinactivef(vp, il, mp);
                    oweinact = il.iflag & VI_OWEINACT != 0;
                    drop(il);
                    if !oweinact {
                        break;
                    }
                }
            }
        }

        // VOP_RECLAIM: the file system drops v_data and unhashes the vnode.
        let data = vp.interlock.lock().data.take();
        if let (Some(mp), Some(d)) = (&mp, &data) {
            mp.hooks.reclaim(vp.ino(), d.as_ref());
        }
        drop(data);
        self.vfs_hash_remove(vp);

        // delmntque.
        if let Some(mp) = &mp {
            mp.vnodes.lock().remove(&vp.idx);
        }
        let mut il = vp.interlock.lock();
        il.mount = None;
        vp.fs_type.store(FS_NONE, SeqCst);
        vp.vtype.store(VType::Bad as u8, SeqCst);
        il
    }

    /// `vgone` for a vnode whose lock the caller holds exclusively.
    pub(crate) fn vgone(&self, vp: &Arc<Vnode>) {
        let il = vp.interlock.lock();
        let il = self.vgonel(vp, il);
        drop(il);
    }

    /// `vtryrecycle`: the caller holds a hold taken by
    /// `vhold_recycle_free`; it is consumed.
    pub(crate) fn vtryrecycle(&self, vp: &Arc<Vnode>, isvnlru: bool) -> Result<(), i32> {
        // This vnode may be found and locked via some other path; if so it
        // cannot be recycled now.
        let Some(excl) = vp.vlock.try_write() else {
            self.vdrop_recycle(vp);
            return Err(EWOULDBLOCK);
        };
        let il = vp.interlock.lock();
        if vp.usecount.load(SeqCst) > 0 {
            drop(excl);
            self.vdropl_recycle(vp, il);
            return Err(EBUSY);
        }
        let il = if !vp.is_doomed() {
            if isvnlru {
                stats::add(&self.stats.recycles_free, 1);
            } else {
                stats::add(&self.stats.direct_recycles_free, 1);
            }
            self.vgonel(vp, il)
        } else {
            il
        };
        drop(excl);
        self.vdropl_recycle(vp, il);
        Ok(())
    }
}
