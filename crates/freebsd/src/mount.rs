//! Mount points: registration, the per-mount vnode list, `vflush`.
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

use parking_lot::{Mutex, RwLock};
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::Arc;

use crate::kernel::Kernel;
use crate::vnode::Vnode;
use crate::{MountId, EBUSY};

/// The file system side of a mount: the vnode operations this replica
/// calls back (`VOP_NEED_INACTIVE`, `VOP_INACTIVE`, `VOP_RECLAIM`).
pub trait Hooks: Send + Sync {
    /// `VOP_NEED_INACTIVE`: should the last `vrele` lock the vnode and call
    /// [`Hooks::inactive`]? FreeBSD's default (`vop_stdneed_inactive`)
    /// says yes.
    fn need_inactive(&self, _ino: u64) -> bool {
        true
    }
    /// `VOP_INACTIVE`: the last use reference went away.
    fn inactive(&self, _ino: u64) {}
    /// `VOP_RECLAIM`: the vnode is being recycled; `data` is what the
    /// constructor returned, dropped right after this call.
    fn reclaim(&self, _ino: u64, _data: &(dyn Any + Send + Sync)) {}
}

/// `struct mount`.
pub(crate) struct Mount {
    pub id: u32,
    /// Stand-in for `mnt_op`.
    pub fs_type: u32,
    pub hooks: Arc<dyn Hooks>,
    /// `mnt_nvnodelist`, keyed by the vnode's list index.
    pub vnodes: Mutex<HashMap<u32, Arc<Vnode>>>,
    /// `MNTK_UNMOUNT`: `insmntque` refuses new vnodes.
    pub unmounting: AtomicBool,
}

/// The mount table and the file system type registry.
#[derive(Default)]
pub(crate) struct Mounts {
    table: RwLock<HashMap<u32, Arc<Mount>>>,
    fs_types: Mutex<Vec<String>>,
    /// Per file system type marker for `vnlru_free_vfsops`
    /// (`vnlru_alloc_marker`, as ZFS allocates one for `arc_prune`).
    pub markers: Mutex<HashMap<u32, u32>>,
    next_id: AtomicU32,
}

impl Mounts {
    /// The id of a file system type, registering it if `create`.
    pub(crate) fn fs_type_id(&self, name: &str, create: bool) -> Option<u32> {
        let mut t = self.fs_types.lock();
        if let Some(i) = t.iter().position(|n| n == name) {
            return Some(i as u32);
        }
        if !create {
            return None;
        }
        t.push(name.to_owned());
        Some((t.len() - 1) as u32)
    }

    pub(crate) fn get(&self, id: MountId) -> Option<Arc<Mount>> {
        self.table.read().get(&id.0).cloned()
    }

    pub(crate) fn add(&self, fs_type: &str, hooks: Arc<dyn Hooks>) -> MountId {
        let fs_type = self.fs_type_id(fs_type, true).unwrap_or(0);
        let id = self.next_id.fetch_add(1, SeqCst);
        let mp = Arc::new(Mount {
            id,
            fs_type,
            hooks,
            vnodes: Mutex::new(HashMap::new()),
            unmounting: AtomicBool::new(false),
        });
        self.table.write().insert(id, mp);
        MountId(id)
    }

    pub(crate) fn remove(&self, id: MountId) -> Option<Arc<Mount>> {
        self.table.write().remove(&id.0)
    }

    /// Every mount, taken out of the table.
    pub(crate) fn take_all(&self) -> Vec<Arc<Mount>> {
        self.table.write().drain().map(|(_, m)| m).collect()
    }
}

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
