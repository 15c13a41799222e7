//! Putting a vnode on its mount (`insmntque`) and flushing a mount
//! (`vflush`). The record (`struct mount`) is in `vnode.rs`, the mount
//! table in `kernel.rs`.
//!
//! # FreeBSD
//!
//! `struct mount` keeps every vnode of the mount on `mnt_nvnodelist`
//! (`insmntque` adds, `delmntque` removes, both under the mount interlock).
//! `vflush(mp, rootrefs, flags)` walks it: for each vnode take a hold,
//! lock it exclusively, and `vgonel` it if unused (or always with
//! `FORCECLOSE`); busy vnodes make it fail with `EBUSY`. `dounmount` with
//! `MNT_FORCE` flushes with `FORCECLOSE`.
//!
//! `mnt_op` (the file system's `vfsops`) is what `vnlru_free_vfsops`
//! filters on; here each distinct file system type name gets a small
//! integer id stored in the mount and copied into its vnodes.
//!
//! # Simplifications
//!
//! `vflush` iterates over a snapshot instead of `MNT_VNODE_FOREACH_ALL`'s
//! marker; there is no root vnode special case, no `SKIPSYSTEM` or
//! `WRITECLOSE`.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crate::kernel::Kernel;
use crate::vnode::{Mount, Vnode};
use crate::EBUSY;

impl Kernel {
    /// `insmntque1`: put a new vnode on its mount; `EBUSY` while unmounting.
    pub(crate) fn insmntque(&self, vp: &Arc<Vnode>, mp: &Arc<Mount>) -> Result<(), i32> {
        let mut list = mp.vnodes.lock();
        if mp.unmounting.load(SeqCst) {
            return Err(EBUSY);
        }
        let mut il = vp.interlock.lock();
        il.mount = Some(Arc::clone(mp));
        list.insert(vp.idx, Arc::clone(vp));
        Ok(())
    }

    /// `vflush`: recycle every vnode of the mount that is unused, or every
    /// vnode if `force` (`FORCECLOSE`). Returns how many were recycled, or
    /// `EBUSY` if some were in use and `force` was not given.
    pub(crate) fn vflush(&self, mp: &Arc<Mount>, force: bool) -> Result<usize, i32> {
        let snapshot: Vec<Arc<Vnode>> = mp.vnodes.lock().values().cloned().collect();
        let mut busy = 0;
        let mut reclaimed = 0;
        for vp in snapshot {
            {
                let il = vp.interlock.lock();
                let ours = il.mount.as_ref().is_some_and(|m| Arc::ptr_eq(m, mp));
                if !ours {
                    continue;
                }
                // vholdl: the interlock is held, so 0 -> 1 is safe.
                self.vhold(&vp);
            }
            // vn_lock(LK_INTERLOCK | LK_EXCLUSIVE).
            let excl = vp.vlock.write();
            let il = vp.interlock.lock();
            if vp.is_doomed() {
                drop(excl);
                self.vdropl(&vp, il);
                continue;
            }
            let il = if vp.usecount.load(SeqCst) == 0 || force {
                reclaimed += 1;
                self.vgonel(&vp, il)
            } else {
                busy += 1;
                il
            };
            drop(excl);
            self.vdropl(&vp, il);
        }
        if busy > 0 {
            return Err(EBUSY);
        }
        Ok(reclaimed)
    }
}
