//! The `(mount, inode)` -> vnode hash (`sys/kern/vfs_hash.c`).
//!
//! # FreeBSD
//!
//! One table sized by `hashinit(desiredvnodes)` (largest power of two not
//! above it) under *one* global `vfs_hash_lock`. That lock is an rwlock in
//! FreeBSD 13/14 (`rw_rlock` for `vfs_hash_get`, `rw_wlock` for insert and
//! remove), so this replica uses a single `RwLock` around the whole table
//! rather than a plain mutex.
//!
//! * `vfs_hash_get`: find, `vget_prep` under the lock, unlock,
//!   `vget_finish` (sleeps on the vnode lock while a constructor holds
//!   it); a doomed result (`ENOENT`) restarts the lookup.
//! * `vfs_hash_insert`: under the write lock, if another thread inserted
//!   the same key first, `vget` its vnode and report it; the caller then
//!   `vgone`s and `vput`s its own vnode (the loser frees its vnode).
//!   Otherwise insert.
//! * `vfs_hash_remove`: called from `VOP_RECLAIM` (here from `vgonel`).
//!
//! The table itself ([`VfsHash`](crate::kernel::VfsHash)) is kernel-wide
//! state, in `kernel.rs`.

use std::sync::Arc;

use crate::kernel::{HashEntry, Kernel};
use crate::refs::{VGetState, VRef};
use crate::vnode::{Mount, Vnode};
use crate::ENOENT;

/// Outcome of [`Kernel::vfs_hash_insert`].
pub(crate) enum HashInsert {
    /// Our vnode is now in the table.
    Inserted,
    /// Someone else's vnode for the key, referenced for the caller.
    Lost(VRef),
}

impl Kernel {
    /// `vfs_hash_get`.
    pub(crate) fn vfs_hash_get(self: &Arc<Self>, mp: &Mount, ino: u64) -> Option<VRef> {
        let b = self.hash.bucket(mp.id, ino);
        loop {
            let (vp, vs) = {
                let tbl = self.hash.tbl.read();
                let e = tbl[b].iter().find(|e| e.ino == ino && e.mnt == mp.id)?;
                (Arc::clone(&e.vp), self.vget_prep(&e.vp))
            };
            match self.vget_finish(&vp, vs) {
                Ok(()) => return Some(VRef::from_owned(self, vp)),
                Err(_) => continue, // ENOENT: doomed, restart.
            }
        }
    }

    /// `vfs_hash_insert`.
    pub(crate) fn vfs_hash_insert(
        self: &Arc<Self>,
        vp: &Arc<Vnode>,
        mp: &Mount,
        ino: u64,
    ) -> HashInsert {
        let b = self.hash.bucket(mp.id, ino);
        loop {
            let (vp2, vs): (Arc<Vnode>, VGetState) = {
                let mut tbl = self.hash.tbl.write();
                match tbl[b].iter().find(|e| e.ino == ino && e.mnt == mp.id) {
                    Some(e) => (Arc::clone(&e.vp), self.vget_prep(&e.vp)),
                    None => {
                        tbl[b].push(HashEntry {
                            mnt: mp.id,
                            ino,
                            vp: Arc::clone(vp),
                        });
                        return HashInsert::Inserted;
                    }
                }
            };
            match self.vget_finish(&vp2, vs) {
                Ok(()) => return HashInsert::Lost(VRef::from_owned(self, vp2)),
                Err(e) => {
                    debug_assert_eq!(e, ENOENT);
                    continue;
                }
            }
        }
    }

    /// `vfs_hash_remove` (a no-op if the vnode is not hashed).
    pub(crate) fn vfs_hash_remove(&self, vp: &Arc<Vnode>) {
        let b = self.hash.bucket(
            vp.mount_id.load(std::sync::atomic::Ordering::SeqCst),
            vp.ino(),
        );
        let mut tbl = self.hash.tbl.write();
        if let Some(pos) = tbl[b].iter().position(|e| Arc::ptr_eq(&e.vp, vp)) {
            tbl[b].swap_remove(pos);
        }
    }

    /// Hashed vnodes (tests).
    #[cfg(test)]
    pub(crate) fn vfs_hash_len(&self) -> usize {
        self.hash.tbl.read().iter().map(Vec::len).sum()
    }
}
