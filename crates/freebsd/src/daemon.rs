//! The `vnlru` kernel process: `vnlru_proc` and its helpers.
//!
//! # FreeBSD
//!
//! One thread for the whole system. Each round it first tries the light
//! path (`vnlru_proc_light`, only recycling free vnodes to get back under
//! the limit); otherwise it frees excess vnodes if over `desiredvnodes +
//! 10`, goes back to sleep (`vnlru_proc_sleep`: wake allocators sleeping on
//! `&vnlruproc_sig`, then `msleep(vnlruproc, ..., hz)`) if there is at
//! least `vlowat` of room, and else runs `vlrureclaim` with a target of
//! about 10% of the gap, escalating `force` (0/1 -> 2 -> 3, where 3 also
//! reclaims name cache source directories) while nothing is reclaimed, and
//! sleeping 3 s (`tsleep(vnlruproc, ..., hz * 3)`) after a fruitless round
//! at force 3. After a drop of the count near the limit it calls
//! `uma_reclaim(UMA_RECLAIM_DRAIN)`.
//!
//! The comments in the original are explicit that this "needs a
//! fundamental redesign"; this replica keeps its fixed sleeps and single
//! thread.
//!
//! # Shutdown (not in FreeBSD)
//!
//! `Kernel::stop` is set under `vnode_list_mtx` and both sleep channels are
//! notified, so the thread notices at its next check or wakeup.

use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::alloc::HZ;
use crate::kernel::Kernel;
use crate::list::VnodeList;
use crate::stats;
use crate::tunables::VNLRU_COUNT_SLOP;
use crate::Variant;

impl Kernel {
    /// `VNLRU_COUNT_SLOP` where the variant has it (0 before seed 000).
    fn count_slop(&self) -> usize {
        match self.variant {
            Variant::Post => VNLRU_COUNT_SLOP,
            Variant::Pre => 0,
        }
    }

    /// `vnlru_proc_sleep`: consumes the guard (`PDROP`).
    fn vnlru_proc_sleep(&self, mut g: MutexGuard<'_, VnodeList>) {
        if self.vnlruproc_sig.load(SeqCst) {
            self.vnlruproc_sig.store(false, SeqCst);
            self.alloc_cv.notify_all();
        }
        if !self.stop.load(SeqCst) {
            self.vnlru_cv.wait_for(&mut g, HZ);
        }
    }

    /// `vnlru_proc_light_pick`: -1 fall back to the full loop, 0 sleep,
    /// n > 0 recycle n free vnodes.
    fn vnlru_proc_light_pick(&self) -> isize {
        if self.vstir.load(SeqCst) || self.vnlruproc_sig.load(SeqCst) {
            return -1;
        }
        let rnum = self.numvnodes.load(SeqCst);
        let rfree = self.freevnodes.read();
        let t = &self.tun;
        // The count can legitimately go a little over the limit for a
        // short time; don't bother in that case.
        if rnum > t.desiredvnodes + self.count_slop() + 10 {
            if rnum.saturating_sub(rfree) >= t.desiredvnodes || rfree <= t.wantfreevnodes {
                return -1;
            }
            return (rnum - t.desiredvnodes) as isize;
        }
        // Don't try to reach wantfreevnodes with too few vnodes overall.
        if rnum < t.wantfreevnodes {
            return 0;
        }
        if rfree < t.wantfreevnodes {
            return -1;
        }
        0
    }

    /// `vnlru_proc_light`.
    fn vnlru_proc_light(&self) -> bool {
        let n = self.vnlru_proc_light_pick();
        if n < 0 {
            return false;
        }
        if n > 0 {
            self.vnlru_free_vnlru(n as usize);
        }
        let g = self.vnode_list.lock();
        self.vnlru_proc_sleep(g);
        true
    }

    /// `vnlru_proc`: the thread body; returns when `stop` is set.
    pub(crate) fn vnlru_proc(self: Arc<Self>) {
        let mut force = 0u32;
        let mut want_reread = false;
        let t = self.tun;
        while !self.stop.load(SeqCst) {
            if force == 0 && self.vnlru_proc_light() {
                continue;
            }
            let mut g = self.vnode_list.lock();
            if self.stop.load(SeqCst) {
                break;
            }
            let mut rnum = self.numvnodes.load(SeqCst);
            if want_reread {
                force = u32::from(self.vnlru_under(rnum, t.vhiwat));
                want_reread = false;
            }
            // Too many vnodes (limit lowered, or emergency growth): first
            // discard free vnodes.
            if rnum > t.desiredvnodes + 10 {
                self.vnlru_free_locked_vnlru(g, rnum - t.desiredvnodes);
                g = self.vnode_list.lock();
                rnum = self.numvnodes.load(SeqCst);
            }
            if self.vstir.load(SeqCst) && force == 0 {
                force = 1;
                self.vstir.store(false, SeqCst);
            }
            if force == 0 && !self.vnlru_under(rnum, t.vlowat) {
                self.vnlru_proc_sleep(g);
                continue;
            }
            let onum = rnum;
            let reclaim_nc_src = force >= 3;
            let target = rnum * t.gapvnodes / t.desiredvnodes.max(1) / 10 + 1;
            let done = self.vlrureclaim(&mut g, reclaim_nc_src, target);
            drop(g);
            // The count transiently goes slightly above the limit (see
            // vn_alloc_hard); no need to drain UMA then.
            if onum + self.count_slop() + 1000 > t.desiredvnodes
                && self.numvnodes.load(SeqCst) <= t.desiredvnodes
            {
                self.uma_reclaim();
            }
            if done == 0 {
                if force < 2 {
                    force = 2;
                    continue;
                }
                if force == 2 {
                    force = 3;
                    continue;
                }
                want_reread = true;
                force = 0;
                stats::add(&self.stats.failed_runs, 1);
                let mut g = self.vnode_list.lock();
                if !self.stop.load(SeqCst) {
                    self.vnlru_cv.wait_for(&mut g, HZ * 3);
                }
            } else {
                want_reread = true;
                std::thread::yield_now();
            }
        }
        self.vnlru_exited.store(true, SeqCst);
    }

    /// Ask the vnlru thread to exit and wake every sleeper.
    pub(crate) fn request_stop(&self) {
        let _g = self.vnode_list.lock();
        self.stop.store(true, SeqCst);
        self.vnlru_cv.notify_all();
        self.alloc_cv.notify_all();
    }
}
