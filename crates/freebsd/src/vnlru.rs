//! Scanning `vnode_list` for vnodes to recycle: `vnlru_free_impl` and
//! `vlrureclaim`.
//!
//! # `vnlru_free_impl(count, mnt_op, mvp)`
//!
//! With `vnode_list_mtx` held, walk forward from the marker `mvp`:
//!
//! 1. skip markers;
//! 2. skip held vnodes, `v_holdcnt > 0` ("phase 2" in seed 001) -- this
//!    includes vnodes whose memory is free in the zone (`VHOLD_NO_SMR`);
//! 3. if filtering by file system (`vnlru_free_vfsops`, ZFS's `arc_prune`),
//!    skip vnodes of other file systems ("phase 3");
//! 4. skip `VBAD` / `VNON`;
//! 5. take the first hold with a CAS (`vhold_recycle_free`), move the
//!    marker after the vnode, drop the mutex, `vtryrecycle` it, and retake
//!    the mutex to continue from the marker.
//!
//! At the end of the list, if no retry happened yet and there are free
//! vnodes, restart from the head (the marker can be past eligible vnodes
//! after failed requeues or recycles); otherwise park the marker at the
//! tail. At most `max_free_per_call` (10000) vnodes per call. The return
//! value counts `vtryrecycle` *attempts*, not successes (FreeBSD's FIXME,
//! kept on purpose).
//!
//! The check order is the stock one (hold count before file system), which
//! is why seed 001 saw 11.9 G phase 2 and 17.8 G phase 3 skips for 30.8 M
//! recycles.
//!
//! # `vlrureclaim(reclaim_nc_src, trigger, target)`
//!
//! vnlru's heavier pass over *held but unused* vnodes (`usecount == 0`,
//! `holdcnt > 0`), from its own marker: directories that are name cache
//! sources only when `reclaim_nc_src`, and only vnodes with a VM object
//! whose resident pages are under `trigger`. There are no VM objects here:
//! regular files and directories are treated as having an empty object,
//! other types as having none (so they are skipped, as on FreeBSD).

use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::kernel::Kernel;
use crate::list::{Entry, VnodeList};
use crate::stats::{self, FreeScanTally};
use crate::tunables::MAX_FREE_PER_CALL;
use crate::vnode::{VType, Vnode, FS_NONE, VIRF_DOOMED};

impl Kernel {
    /// `vnlru_free_impl`. Consumes the `vnode_list_mtx` guard (returns with
    /// the mutex unlocked, like the original).
    pub(crate) fn vnlru_free_impl<'a>(
        &'a self,
        mut g: MutexGuard<'a, VnodeList>,
        count: usize,
        mnt_op: Option<u32>,
        mvp: u32,
        isvnlru: bool,
    ) -> usize {
        let mut count = count.min(MAX_FREE_PER_CALL);
        if count == 0 {
            return 0;
        }
        let ocount = count;
        let mut retried = false;
        let mut t = FreeScanTally::default();
        let mut cur = mvp;
        loop {
            let Some(i) = g.next(cur) else {
                if !retried && self.freevnodes.read() > 0 {
                    g.insert_head(mvp);
                    cur = mvp;
                    retried = true;
                    continue;
                }
                // Give up.
                g.insert_tail(mvp);
                drop(g);
                break;
            };
            cur = i;
            t.attempt += 1;
            let Entry::Vnode(vp) = g.entry(i) else {
                continue;
            };
            let hold = vp.holdcnt.load(SeqCst);
            if hold > 0 {
                tally_phase2(&mut t, vp);
                continue;
            }
            // Don't recycle vnodes of a different type of mount point.
            if let Some(op) = mnt_op {
                let fs = vp.fs_type.load(SeqCst);
                if fs != FS_NONE && fs != op {
                    t.phase3 += 1;
                    continue;
                }
            }
            if matches!(vp.vtype(), VType::Bad | VType::Non) {
                continue;
            }
            if !self.vhold_recycle_free(vp) {
                continue;
            }
            let vp = Arc::clone(vp);
            g.insert_after(i, mvp);
            drop(g);
            if self.vtryrecycle(&vp, isvnlru).is_ok() {
                t.success += 1;
            }
            count -= 1;
            if count == 0 {
                break;
            }
            g = self.vnode_list.lock();
            cur = mvp;
        }
        self.stats.flush_scan(&t);
        ocount - count
    }

    /// `vnlru_free_locked_direct`: for `vn_alloc_hard` (counted as direct
    /// recycles).
    pub(crate) fn vnlru_free_locked_direct<'a>(
        &'a self,
        g: MutexGuard<'a, VnodeList>,
        count: usize,
    ) -> usize {
        let mvp = g.free_marker;
        self.vnlru_free_impl(g, count, None, mvp, false)
    }

    /// `vnlru_free_locked_vnlru`.
    pub(crate) fn vnlru_free_locked_vnlru<'a>(
        &'a self,
        g: MutexGuard<'a, VnodeList>,
        count: usize,
    ) -> usize {
        let mvp = g.free_marker;
        self.vnlru_free_impl(g, count, None, mvp, true)
    }

    /// `vnlru_free_vnlru`.
    pub(crate) fn vnlru_free_vnlru(&self, count: usize) -> usize {
        let g = self.vnode_list.lock();
        self.vnlru_free_locked_vnlru(g, count)
    }

    /// `vnlru_free_vfsops(count, mnt_op, mvp)`: the per file system prune
    /// entry point, scanning from the caller's own marker.
    pub(crate) fn vnlru_free_vfsops(&self, count: usize, fs_type: u32, mvp: u32) -> usize {
        let g = self.vnode_list.lock();
        self.vnlru_free_impl(g, count, Some(fs_type), mvp, true)
    }

    /// `vlrureclaim`: with `vnode_list_mtx` held (dropped and retaken
    /// around each recycle); returns the number of vnodes recycled.
    pub(crate) fn vlrureclaim(
        &self,
        g: &mut MutexGuard<'_, VnodeList>,
        reclaim_nc_src: bool,
        target: usize,
    ) -> usize {
        let mvp = g.reclaim_marker;
        let mut retried = false;
        let mut done = 0;
        'restart: loop {
            let mut cur = mvp;
            while done < target {
                let Some(i) = g.next(cur) else {
                    break;
                };
                cur = i;
                let Entry::Vnode(vp) = g.entry(i) else {
                    continue;
                };
                // Skip referenced, free (we are making room for more free
                // vnodes, not reducing them), and name cache sources.
                if vp.usecount.load(SeqCst) > 0
                    || vp.holdcnt.load(SeqCst) == 0
                    || (!reclaim_nc_src && vp.nc_src_count.load(SeqCst) > 0)
                {
                    continue;
                }
                if !has_vm_object(vp.vtype()) {
                    continue;
                }
                // Races against allocation: check type and mount under the
                // interlock.
                let Some(il) = vp.interlock.try_lock() else {
                    continue;
                };
                if !has_vm_object(vp.vtype()) || il.mount.is_none() {
                    continue;
                }
                // holdcnt > 0 and stable: the last hold needs the interlock.
                self.vholdnz(vp);
                drop(il);
                let vp = Arc::clone(vp);
                g.insert_after(i, mvp);
                done += MutexGuard::unlocked(g, || self.vlrureclaim_one(&vp, reclaim_nc_src));
                continue 'restart;
            }
            if done == 0 && !retried {
                g.insert_head(mvp);
                retried = true;
                continue 'restart;
            }
            return done;
        }
    }

    /// The unlocked part of one `vlrureclaim` iteration.
    fn vlrureclaim_one(&self, vp: &Arc<Vnode>, reclaim_nc_src: bool) -> usize {
        let Some(excl) = vp.vlock.try_write() else {
            self.vdrop_recycle(vp);
            std::thread::yield_now();
            return 0;
        };
        let il = vp.interlock.lock();
        if vp.usecount.load(SeqCst) > 0
            || (!reclaim_nc_src && vp.nc_src_count.load(SeqCst) > 0)
            || vp.is_doomed()
        {
            drop(excl);
            self.vdropl_recycle(vp, il);
            return 0;
        }
        stats::add(&self.stats.recycles, 1);
        let il = self.vgonel(vp, il);
        drop(excl);
        self.vdropl_recycle(vp, il);
        // maybe_yield().
        std::thread::yield_now();
        1
    }
}

/// Stand-in for "has a VM object with few resident pages".
fn has_vm_object(t: VType) -> bool {
    matches!(t, VType::Reg | VType::Dir)
}

/// Seed 001's breakdown of phase 2 skips.
fn tally_phase2(t: &mut FreeScanTally, vp: &Vnode) {
    t.phase2 += 1;
    match vp.vtype() {
        VType::Reg => t.phase2_reg += 1,
        VType::Dir => t.phase2_dir += 1,
        VType::Bad => t.phase2_bad += 1,
        VType::Non => t.phase2_non += 1,
        _ => {}
    }
    if vp.irflag.load(SeqCst) & VIRF_DOOMED != 0 {
        t.phase2_doomed += 1;
    }
}
