//! Hold and use counts: `vhold`, `vdrop`, `vget`, `vrele` and friends, and
//! the handles that own them ([`VRef`], [`HoldRef`]).
//!
//! # FreeBSD
//!
//! `v_holdcnt` keeps vnode *memory* alive; `v_usecount` keeps the vnode
//! *active* and implies one hold (the first use reference carries a hold
//! that the last `vrele` drops in `vput_final`). A vnode with hold count 0
//! is "free": counted in `freevnodes` and a candidate for
//! `vnlru_free_impl`.
//!
//! * `vhold` / `vholdnz`: `atomic_fetchadd`; 0 -> 1 decrements `freevnodes`.
//! * `vdrop`: `refcount_release_if_not_last` without the interlock; the
//!   last hold is released under the interlock by `vdropl_impl`, which
//!   either frees a doomed vnode (`vdropl_final`) or counts it free and
//!   batches its requeue (`vdbatch_enqueue`). Recycling paths use
//!   `vdropl_recycle`, which does not requeue.
//! * `vget_prep` / `vget_finish` / `vget_finish_ref`: take a use count if
//!   one already exists, else a hold that `vget_finish_ref` converts.
//! * `vrele` -> `vput_final`: on the last use reference, run
//!   `VOP_INACTIVE` under the exclusive vnode lock if the file system wants
//!   it (`VOP_NEED_INACTIVE`), then drop the hold.
//!
//! # Race: `vdropl_final` against a concurrent `vhold`
//!
//! A doomed vnode reaches hold count 0 under its interlock and tries
//! `cmpset(0, VHOLD_NO_SMR)`. A lookup that found it (it holds the name
//! cache bucket lock, so the memory is not free yet) may `vhold` first. If
//! the lookup wins, the dropper counts the vnode free and leaves; the
//! lookup's own `vdrop` will reach `vdropl_final` later. If the dropper
//! wins, the vnode is gone from every lookup structure already (vgonel ran
//! `cache_purge` and the hash removal before), so nobody can find it.

use parking_lot::MutexGuard;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::kernel::Kernel;
use crate::vnode::{Interlocked, Mount, Vnode, VHOLD_NO_SMR, VI_DOINGINACT, VI_OWEINACT};
use crate::ENOENT;

/// `enum vgetstate`: what `vget_prep` took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VGetState {
    /// `VGET_USECOUNT`: a use reference (the vnode was already active).
    UseCount,
    /// `VGET_HOLDCNT`: a hold, to be converted by `vget_finish_ref`.
    HoldCnt,
}

/// `refcount_release_if_not_last`: decrement unless the count is 1.
fn release_if_not_last(c: &std::sync::atomic::AtomicU32) -> bool {
    let mut old = c.load(SeqCst);
    loop {
        if old <= 1 || old & VHOLD_NO_SMR != 0 {
            return false;
        }
        match c.compare_exchange_weak(old, old - 1, SeqCst, SeqCst) {
            Ok(_) => return true,
            Err(v) => old = v,
        }
    }
}

/// `refcount_acquire_if_not_zero`.
fn acquire_if_not_zero(c: &std::sync::atomic::AtomicU32) -> bool {
    let mut old = c.load(SeqCst);
    loop {
        if old == 0 {
            return false;
        }
        match c.compare_exchange_weak(old, old + 1, SeqCst, SeqCst) {
            Ok(_) => return true,
            Err(v) => old = v,
        }
    }
}

impl Kernel {
    /// `vhold`.
    pub(crate) fn vhold(&self, vp: &Vnode) {
        let old = vp.holdcnt.fetch_add(1, SeqCst);
        debug_assert_eq!(old & VHOLD_NO_SMR, 0, "vhold on freed vnode");
        if old == 0 {
            self.freevnodes.dec();
        }
    }

    /// `vholdnz`: the caller already has a hold (or a use reference).
    pub(crate) fn vholdnz(&self, vp: &Vnode) {
        vp.holdcnt.fetch_add(1, SeqCst);
    }

    /// `vhold_recycle_free`: with `vnode_list_mtx` held, take the first hold
    /// of a free vnode, failing if it is held or its memory is free.
    pub(crate) fn vhold_recycle_free(&self, vp: &Vnode) -> bool {
        let mut count = vp.holdcnt.load(SeqCst);
        loop {
            if count & VHOLD_NO_SMR != 0 || count > 0 {
                return false;
            }
            match vp
                .holdcnt
                .compare_exchange_weak(count, count + 1, SeqCst, SeqCst)
            {
                Ok(_) => {
                    self.freevnodes.dec();
                    return true;
                }
                Err(v) => count = v,
            }
        }
    }

    /// `vdrop`.
    pub(crate) fn vdrop(&self, vp: &Arc<Vnode>) {
        if release_if_not_last(&vp.holdcnt) {
            return;
        }
        let il = vp.interlock.lock();
        self.vdropl(vp, il);
    }

    /// `vdropl`: drop a hold with the interlock held (consumes it).
    pub(crate) fn vdropl(&self, vp: &Arc<Vnode>, il: MutexGuard<'_, Interlocked>) {
        self.vdropl_impl(vp, il, true);
    }

    /// `vdrop_recycle`: as `vdrop`, but never requeue (recycling paths).
    pub(crate) fn vdrop_recycle(&self, vp: &Arc<Vnode>) {
        let il = vp.interlock.lock();
        self.vdropl_recycle(vp, il);
    }

    /// `vdropl_recycle`.
    pub(crate) fn vdropl_recycle(&self, vp: &Arc<Vnode>, il: MutexGuard<'_, Interlocked>) {
        self.vdropl_impl(vp, il, false);
    }

    /// `vdropl_impl`.
    fn vdropl_impl(&self, vp: &Arc<Vnode>, il: MutexGuard<'_, Interlocked>, enqueue: bool) {
        let old = vp.holdcnt.fetch_sub(1, SeqCst);
        debug_assert!(old & !VHOLD_NO_SMR > 0, "vdrop: hold count underflow");
        if old != 1 {
            return;
        }
        if vp.is_doomed() {
            self.vdropl_final(vp, il);
            return;
        }
        self.freevnodes.inc();
        if !enqueue {
            return;
        }
        // Also unlocks the interlock.
        self.vdbatch_enqueue(vp, il);
    }

    /// `vdropl_final`: the last hold of a doomed vnode; free its memory
    /// unless a concurrent `vhold` revived the count (see module docs).
    #[cold]
    fn vdropl_final(&self, vp: &Arc<Vnode>, il: MutexGuard<'_, Interlocked>) {
        if vp
            .holdcnt
            .compare_exchange(0, VHOLD_NO_SMR, SeqCst, SeqCst)
            .is_err()
        {
            self.freevnodes.inc();
            return;
        }
        self.freevnode(vp, il);
    }

    /// `vget_prep`.
    pub(crate) fn vget_prep(&self, vp: &Vnode) -> VGetState {
        if acquire_if_not_zero(&vp.usecount) {
            VGetState::UseCount
        } else {
            self.vhold(vp);
            VGetState::HoldCnt
        }
    }

    /// `vget_abort`.
    fn vget_abort(&self, vp: &Arc<Vnode>, vs: VGetState) {
        match vs {
            VGetState::UseCount => self.vrele(vp),
            VGetState::HoldCnt => self.vdrop(vp),
        }
    }

    /// `vget_finish` with `LK_SHARED`, unlocking before return: waits for a
    /// constructor holding the vnode lock, fails with `ENOENT` if doomed.
    pub(crate) fn vget_finish(&self, vp: &Arc<Vnode>, vs: VGetState) -> Result<(), i32> {
        let doomed = {
            let _shared = vp.vlock.read();
            vp.is_doomed()
        };
        if doomed {
            self.vget_abort(vp, vs);
            return Err(ENOENT);
        }
        self.vget_finish_ref(vp, vs);
        Ok(())
    }

    /// `vget_finish_ref`: turn the hold from `vget_prep` into a use count.
    pub(crate) fn vget_finish_ref(&self, vp: &Vnode, vs: VGetState) {
        if vs == VGetState::UseCount {
            return;
        }
        // If the use count was 0 our hold becomes the one it implies;
        // otherwise someone else lent theirs and ours is surplus.
        let old = vp.usecount.fetch_add(1, SeqCst);
        if old != 0 {
            let h = vp.holdcnt.fetch_sub(1, SeqCst);
            debug_assert!(h > 1, "vget_finish_ref: wrong hold count");
        }
    }

    /// `vrele`.
    pub(crate) fn vrele(&self, vp: &Arc<Vnode>) {
        let old = vp.usecount.fetch_sub(1, SeqCst);
        debug_assert!(old > 0, "vrele: use count underflow");
        if old != 1 {
            return;
        }
        self.vput_final(vp);
    }

    /// `vput_final(vp, VRELE)`.
    fn vput_final(&self, vp: &Arc<Vnode>) {
        let mut il = vp.interlock.lock();
        // Someone may have revived the use count, the vnode may be doomed
        // (vgone did inactive processing), or inactive may be running.
        if vp.usecount.load(SeqCst) > 0 || vp.is_doomed() || il.iflag & VI_DOINGINACT != 0 {
            self.vdropl(vp, il);
            return;
        }
        let Some(mp) = il.mount.clone() else {
            self.vdropl(vp, il);
            return;
        };
        if !mp.hooks.need_inactive(vp.ino()) {
            self.vdropl(vp, il);
            return;
        }
        // Locking drops the interlock, opening a window in which the vnode
        // can be doomed with use count 0; VI_OWEINACT tells vgone to run
        // inactive itself.
        il.iflag |= VI_OWEINACT;
        drop(il);
        // vn_lock(vp, LK_EXCLUSIVE | LK_INTERLOCK).
        let excl = vp.vlock.write();
        let il = vp.interlock.lock();
        if vp.is_doomed() {
            // vn_lock failed with ENOENT: vdefer_inactive on a doomed vnode
            // is a plain vdropl.
            drop(excl);
            self.vdropl(vp, il);
            return;
        }
        let il = self.vinactive(vp, il, &mp);
        drop(excl);
        self.vdropl(vp, il);
    }

    /// `vinactive`: run `VOP_INACTIVE` if owed. Interlock and vnode lock
    /// (exclusive) held; returns with the interlock held.
    pub(crate) fn vinactive<'a>(
        &self,
        vp: &'a Vnode,
        mut il: MutexGuard<'a, Interlocked>,
        mp: &Mount,
    ) -> MutexGuard<'a, Interlocked> {
        if il.iflag & VI_OWEINACT == 0 || il.iflag & VI_DOINGINACT != 0 {
            return il;
        }
        if vp.usecount.load(SeqCst) > 0 {
            il.iflag &= !VI_OWEINACT;
            return il;
        }
        self.vinactivef(vp, il, mp)
    }

    /// `vinactivef`: call `VOP_INACTIVE` with the interlock dropped.
    pub(crate) fn vinactivef<'a>(
        &self,
        vp: &'a Vnode,
        mut il: MutexGuard<'a, Interlocked>,
        mp: &Mount,
    ) -> MutexGuard<'a, Interlocked> {
        il.iflag |= VI_DOINGINACT;
        il.iflag &= !VI_OWEINACT;
        drop(il);
        mp.hooks.inactive(vp.ino());
        let mut il = vp.interlock.lock();
        il.iflag &= !VI_DOINGINACT;
        il
    }
}

/// A use reference (`v_usecount`, which implies a hold). Dropping it is
/// `vrele`; cloning it is `vrefact`.
pub struct VRef {
    pub(crate) vp: Arc<Vnode>,
    pub(crate) k: Arc<Kernel>,
}

impl VRef {
    /// Wrap a vnode whose use count the caller already took.
    pub(crate) fn from_owned(k: &Arc<Kernel>, vp: Arc<Vnode>) -> Self {
        Self {
            vp,
            k: Arc::clone(k),
        }
    }

    /// `vhold`: a hold that keeps the vnode's memory from being freed but
    /// not the vnode from being recycled (`vgone`).
    pub fn hold(&self) -> HoldRef {
        self.k.vholdnz(&self.vp);
        HoldRef {
            vp: Arc::clone(&self.vp),
            k: Arc::clone(&self.k),
        }
    }

    pub(crate) fn vnode(&self) -> &Arc<Vnode> {
        &self.vp
    }
}

impl Clone for VRef {
    /// `vrefact`: another use reference on an active vnode.
    fn clone(&self) -> Self {
        self.vp.usecount.fetch_add(1, SeqCst);
        Self {
            vp: Arc::clone(&self.vp),
            k: Arc::clone(&self.k),
        }
    }
}

impl Deref for VRef {
    type Target = Vnode;
    fn deref(&self) -> &Vnode {
        &self.vp
    }
}

impl Drop for VRef {
    /// `vrele`.
    fn drop(&mut self) {
        self.k.vrele(&self.vp);
    }
}

impl fmt::Debug for VRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.vp.fmt(f)
    }
}

/// A hold reference (`v_holdcnt`). Dropping it is `vdrop`.
pub struct HoldRef {
    pub(crate) vp: Arc<Vnode>,
    pub(crate) k: Arc<Kernel>,
}

impl HoldRef {
    /// `vget` on a held vnode: a use reference, or `ENOENT` if the vnode
    /// was doomed meanwhile.
    pub fn vget(&self) -> Result<VRef, i32> {
        let vs = self.k.vget_prep(&self.vp);
        self.k.vget_finish(&self.vp, vs)?;
        Ok(VRef::from_owned(&self.k, Arc::clone(&self.vp)))
    }
}

impl Clone for HoldRef {
    fn clone(&self) -> Self {
        self.k.vholdnz(&self.vp);
        Self {
            vp: Arc::clone(&self.vp),
            k: Arc::clone(&self.k),
        }
    }
}

impl Deref for HoldRef {
    type Target = Vnode;
    fn deref(&self) -> &Vnode {
        &self.vp
    }
}

impl Drop for HoldRef {
    /// `vdrop`.
    fn drop(&mut self) {
        self.k.vdrop(&self.vp);
    }
}

impl fmt::Debug for HoldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.vp.fmt(f)
    }
}
