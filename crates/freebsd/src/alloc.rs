//! Vnode allocation: `vn_alloc`, `vn_alloc_hard`, `getnewvnode`, and the
//! matching `freevnode` / `vn_free`.
//!
//! # FreeBSD
//!
//! `vn_alloc` bumps `numvnodes` with one `fetchadd` and allocates. When the
//! new count leaves less than `vlowat` of room (`vnlru_under`, which counts
//! free vnodes beyond `wantfreevnodes` as room), it goes to
//! `vn_alloc_hard`, which takes `vnode_list_mtx`, tries to recycle one free
//! vnode itself (`vnlru_free_locked_direct(1)`), and failing that kicks the
//! vnlru thread and sleeps up to one second (`msleep(..., hz)`) before
//! allocating anyway: allocation never fails.
//!
//! # Variants (seed 000, FreeBSD commit 054f45e026d8)
//!
//! * [`Variant::Pre`]: `vn_alloc` backs its bump out (`atomic_subtract`)
//!   before `vn_alloc_hard`, which re-reads `numvnodes` under the mutex,
//!   stores 0 to `vn_alloc_cyclecount` whenever the count fits, and bumps
//!   again at the end: three atomics on the shared counter per slow
//!   allocation, plus a contended read and write under the lock.
//! * [`Variant::Post`]: the bump is kept unless it put the count more than
//!   `VNLRU_COUNT_SLOP` (100) over the limit; `numvnodes` is only read
//!   under the lock when `vn_alloc_cyclecount != 0`.
//!
//! Both replicate a quirk of the real code: `vn_alloc_cyclecount` is only
//! ever incremented inside `if (vn_alloc_cyclecount != 0)`, so it stays 0
//! and the "stir" logic is dormant.

use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::Duration;

use crate::kernel::Kernel;
use crate::list::{Entry, VnodeList};
use crate::stats;
use crate::tunables::VNLRU_COUNT_SLOP;
use crate::vnode::{Interlocked, Mount, VType, Vnode, VHOLD_NO_SMR};
use crate::Variant;

/// `hz` ticks, i.e. one second: the sleep of `vn_alloc_hard` and
/// `vnlru_proc_sleep`. Shrunk in tests so that shortage paths run quickly.
pub(crate) const HZ: Duration = if cfg!(test) {
    Duration::from_millis(10)
} else {
    Duration::from_secs(1)
};

impl Kernel {
    /// `vnlru_under`: is there less than `limit` room for new vnodes,
    /// counting free vnodes beyond `wantfreevnodes` as room?
    pub(crate) fn vnlru_under(&self, rnumvnodes: usize, limit: usize) -> bool {
        let desired = self.tun.desiredvnodes;
        if rnumvnodes > desired {
            return true;
        }
        let mut space = desired - rnumvnodes;
        if space < limit {
            let rfree = self.freevnodes.read();
            if rfree > self.tun.wantfreevnodes {
                space += rfree - self.tun.wantfreevnodes;
            }
        }
        space < limit
    }

    /// `vnlru_kick_locked`: wake vnlru (`wakeup(vnlruproc)`) once per
    /// shortage. Called with `vnode_list_mtx` held, which the guard proves.
    pub(crate) fn vnlru_kick_locked(&self, _locked: &MutexGuard<'_, VnodeList>) {
        if !self.vnlruproc_sig.load(SeqCst) {
            self.vnlruproc_sig.store(true, SeqCst);
            stats::add(&self.stats.kicks, 1);
            self.vnlru_cv.notify_all();
        }
    }

    /// `vnlru_kick_cond`: kick vnlru when free vnodes run short.
    fn vnlru_kick_cond(&self) {
        if self.freevnodes.read() > self.tun.wantfreevnodes {
            return;
        }
        if self.vnlruproc_sig.load(SeqCst) {
            return;
        }
        let g = self.vnode_list.lock();
        self.vnlru_kick_locked(&g);
    }

    /// `vn_alloc`.
    #[inline]
    pub(crate) fn vn_alloc(&self) -> Arc<Vnode> {
        stats::add(&self.stats.allocations, 1);
        match self.variant {
            Variant::Post => {
                if self.vn_alloc_cyclecount.load(Relaxed) != 0 {
                    return self.vn_alloc_hard_post(0, false);
                }
                let rnum = self.numvnodes.fetch_add(1, SeqCst) + 1;
                if self.vnlru_under(rnum, self.tun.vlowat) {
                    return self.vn_alloc_hard_post(rnum, true);
                }
            }
            Variant::Pre => {
                if self.vn_alloc_cyclecount.load(Relaxed) != 0 {
                    return self.vn_alloc_hard_pre();
                }
                let rnum = self.numvnodes.fetch_add(1, SeqCst) + 1;
                if self.vnlru_under(rnum, self.tun.vlowat) {
                    self.numvnodes.fetch_sub(1, SeqCst);
                    return self.vn_alloc_hard_pre();
                }
            }
        }
        self.uma_zalloc()
    }

    /// The `vn_alloc_cyclecount != 0` block shared by both variants
    /// (minus the re-read of `numvnodes`, which differs).
    fn vn_alloc_cycle(&self) {
        let rfree = self.freevnodes.read();
        if rfree < self.tun.wantfreevnodes {
            let c = self.vn_alloc_cyclecount.load(Relaxed);
            self.vn_alloc_cyclecount.store(c + 1, Relaxed);
            if c >= rfree {
                self.vn_alloc_cyclecount.store(0, Relaxed);
                self.vstir.store(true, SeqCst);
            }
        } else {
            self.vn_alloc_cyclecount.store(0, Relaxed);
        }
    }

    /// The tail of `vn_alloc_hard` after a failed direct recycle: kick
    /// vnlru, sleep on `&vnlruproc_sig` for up to `hz`, try once more.
    fn vn_alloc_wait(&self) {
        let mut g = self.vnode_list.lock();
        self.vnlru_kick_locked(&g);
        stats::add(&self.stats.alloc_sleeps, 1);
        if !self.stop.load(SeqCst) {
            self.alloc_cv.wait_for(&mut g, HZ);
        }
        if self.numvnodes.load(SeqCst) + 1 > self.tun.desiredvnodes && self.freevnodes.read() > 1 {
            self.vnlru_free_locked_direct(g, 1);
        }
    }

    /// `vn_alloc_hard` after seed 000.
    #[cold]
    #[inline(never)]
    fn vn_alloc_hard_post(&self, rnumvnodes: usize, mut bumped: bool) -> Arc<Vnode> {
        if bumped && rnumvnodes > self.tun.desiredvnodes + VNLRU_COUNT_SLOP {
            self.numvnodes.fetch_sub(1, SeqCst);
            bumped = false;
        }
        let g = self.vnode_list.lock();
        if self.vn_alloc_cyclecount.load(Relaxed) != 0 {
            let rnum = self.numvnodes.load(SeqCst);
            if rnum + 1 < self.tun.desiredvnodes {
                self.vn_alloc_cyclecount.store(0, Relaxed);
                drop(g);
                return self.vn_alloc_finish(bumped);
            }
            self.vn_alloc_cycle();
        }
        // Try to reclaim one free vnode before growing the cache (possibly
        // above its target if reclamation failed or is delayed).
        if self.vnlru_free_locked_direct(g, 1) > 0 {
            return self.vn_alloc_finish(bumped);
        }
        if bumped {
            self.numvnodes.fetch_sub(1, SeqCst);
            bumped = false;
        }
        self.vn_alloc_wait();
        self.vn_alloc_finish(bumped)
    }

    /// `vn_alloc_hard` before seed 000.
    #[cold]
    #[inline(never)]
    fn vn_alloc_hard_pre(&self) -> Arc<Vnode> {
        let g = self.vnode_list.lock();
        // The contended read (and avoidable write) under the mutex that
        // seed 000 removed.
        let rnum = self.numvnodes.load(SeqCst);
        if rnum + 1 < self.tun.desiredvnodes {
            self.vn_alloc_cyclecount.store(0, Relaxed);
            drop(g);
            return self.vn_alloc_finish(false);
        }
        if self.vn_alloc_cyclecount.load(Relaxed) != 0 {
            self.vn_alloc_cycle();
        }
        if self.vnlru_free_locked_direct(g, 1) > 0 {
            return self.vn_alloc_finish(false);
        }
        self.vn_alloc_wait();
        self.vn_alloc_finish(false)
    }

    /// The `alloc:` label of `vn_alloc_hard`.
    fn vn_alloc_finish(&self, bumped: bool) -> Arc<Vnode> {
        if !bumped {
            self.numvnodes.fetch_add(1, SeqCst);
        }
        self.vnlru_kick_cond();
        self.uma_zalloc()
    }

    /// `uma_zalloc_smr(vnode_zone)`: cached memory, or new memory put on
    /// the list by `vnode_init` (before the free marker).
    fn uma_zalloc(&self) -> Arc<Vnode> {
        if let Some(vp) = self.zone.alloc() {
            return vp;
        }
        self.vnode_list
            .lock()
            .insert_new_vnode(|idx| Arc::new(Vnode::new_free(idx)))
    }

    /// `getnewvnode`: allocate and give the memory a new identity, with one
    /// use reference and one hold, typed `VNON`.
    pub(crate) fn getnewvnode(&self, mp: &Mount, ino: u64) -> Arc<Vnode> {
        let vp = self.vn_alloc();
        stats::add(&self.stats.created, 1);
        debug_assert_eq!(vp.holdcnt.load(SeqCst), VHOLD_NO_SMR);
        vp.gen.store(self.next_gen.fetch_add(1, Relaxed), SeqCst);
        vp.mount_id.store(mp.id, SeqCst);
        vp.fs_type.store(mp.fs_type, SeqCst);
        vp.ino.store(ino, SeqCst);
        vp.vtype.store(VType::Non as u8, SeqCst);
        vp.irflag.store(0, SeqCst);
        {
            let mut il = vp.interlock.lock();
            il.iflag = 0;
            il.data = None;
            il.mount = None;
        }
        // v_init_counters: replaces VHOLD_NO_SMR, publishing the vnode.
        vp.usecount.store(1, SeqCst);
        vp.holdcnt.store(1, SeqCst);
        vp
    }

    /// `freevnode` + `vn_free`: return doomed vnode memory to the zone.
    /// Called from `vdropl_final` with the interlock held.
    pub(crate) fn freevnode(&self, vp: &Arc<Vnode>, mut il: MutexGuard<'_, Interlocked>) {
        debug_assert!(il.data.is_none(), "cleaned vnode isn't");
        debug_assert_eq!(vp.usecount.load(SeqCst), 0);
        il.iflag = 0;
        drop(il);
        self.vdbatch_dequeue(vp);
        self.numvnodes.fetch_sub(1, SeqCst);
        stats::add(&self.stats.vnodes_freed, 1);
        self.zone.free(Arc::clone(vp));
    }

    /// `uma_reclaim(UMA_RECLAIM_DRAIN)` for the vnode zone: give the
    /// depot's memory back, taking it off the list (`vnode_fini`).
    pub(crate) fn uma_reclaim(&self) {
        stats::add(&self.stats.uma_reclaim_calls, 1);
        let items = self.zone.drain();
        if items.is_empty() {
            return;
        }
        let mut list = self.vnode_list.lock();
        for vp in &items {
            let _: Entry = list.release(vp.idx);
        }
    }
}
