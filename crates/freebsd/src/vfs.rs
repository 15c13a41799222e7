//! The public face: [`FreeBsdVfs`].

use parking_lot::Mutex;
use std::any::Any;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::hash::HashInsert;
use crate::kernel::Kernel;
use crate::namecache::CacheLookup;
use crate::refs::VRef;
use crate::stats::{self, FreeBsdStats};
use crate::vnode::{Hooks, VType};
use crate::{MountId, Variant, EBUSY, ENXIO};

/// One instance of FreeBSD's vnode layer: the global vnode list, counters,
/// `vfs_hash`, name cache, mounts, and the `vnlru` thread.
///
/// Dropping it (or calling [`FreeBsdVfs::shutdown`]) stops and joins the
/// vnlru thread; outstanding [`VRef`]s and [`HoldRef`](crate::HoldRef)s
/// stay valid and keep the shared state alive.
pub struct FreeBsdVfs {
    k: Arc<Kernel>,
    vnlru: Mutex<Option<JoinHandle<()>>>,
}

impl FreeBsdVfs {
    /// Create the layer with `desiredvnodes` (`kern.maxvnodes`, clamped to
    /// `1..=MAXVNODES_MAX`) and start the vnlru thread.
    pub fn new(desiredvnodes: usize, variant: Variant) -> Arc<Self> {
        let k = Arc::new(Kernel::new(desiredvnodes, variant));
        let kt = Arc::clone(&k);
        let handle = std::thread::Builder::new()
            .name("vnlru".into())
            .spawn(move || kt.vnlru_proc())
            .ok();
        if handle.is_none() {
            // No thread: behave like a kernel whose vnlru never runs
            // (allocators still make progress after their 1 s sleep).
            k.stop.store(true, SeqCst);
        }
        Arc::new(Self {
            k,
            vnlru: Mutex::new(handle),
        })
    }

    /// Which side of seed 000 this instance replicates.
    pub fn variant(&self) -> Variant {
        self.k.variant
    }

    /// Register a mount of file system type `fs_type`.
    pub fn mount(&self, fs_type: &str, hooks: Arc<dyn Hooks>) -> MountId {
        self.k.mounts.add(fs_type, hooks)
    }

    /// Forced unmount (`dounmount` with `MNT_FORCE`): refuse new vnodes,
    /// recycle all of the mount's vnodes (`vflush` with `FORCECLOSE`; used
    /// vnodes become `VBAD` and are freed on their last release) and
    /// forget the mount. Returns how many vnodes were recycled.
    pub fn unmount(&self, mnt: MountId) -> Result<usize, i32> {
        let mp = self.k.mounts.get(mnt).ok_or(ENXIO)?;
        mp.unmounting.store(true, SeqCst);
        let mut total = 0;
        // insmntque refuses new vnodes now; repeat until the list is empty
        // in case one was added just before the flag.
        for _ in 0..16 {
            total += self.k.vflush(&mp, true)?;
            if mp.vnodes.lock().is_empty() {
                break;
            }
        }
        self.k.mounts.remove(mnt);
        Ok(total)
    }

    /// `vflush` without unmounting: recycle the mount's unused vnodes (all
    /// of them if `force`). `EBUSY` if some were in use and not `force`.
    pub fn vflush(&self, mnt: MountId, force: bool) -> Result<usize, i32> {
        let mp = self.k.mounts.get(mnt).ok_or(ENXIO)?;
        self.k.vflush(&mp, force)
    }

    /// The file system `vget` pattern (`ffs_vgetf`): `vfs_hash_get`; on a
    /// miss `getnewvnode`, lock it exclusively, `insmntque`,
    /// `vfs_hash_insert` (a loser `vgone`s and `vput`s its vnode and
    /// returns the winner's), then run `ctor` with the vnode locked, so
    /// concurrent lookups of the same key wait for it (single flight). A
    /// constructor error dooms the vnode and is returned.
    ///
    /// Errors: `ENXIO` unknown mount, `EBUSY` mount being unmounted, or
    /// the constructor's error.
    pub fn vget_or_alloc<F>(&self, mnt: MountId, ino: u64, ctor: F) -> Result<VRef, i32>
    where
        F: FnOnce() -> Result<(VType, Box<dyn Any + Send + Sync>), i32>,
    {
        let k = &self.k;
        let mp = k.mounts.get(mnt).ok_or(ENXIO)?;
        if let Some(v) = k.vfs_hash_get(&mp, ino) {
            return Ok(v);
        }
        if mp.unmounting.load(SeqCst) {
            return Err(EBUSY);
        }
        let vp = k.getnewvnode(&mp, ino);
        let excl = vp.vlock.write();
        if let Err(e) = k.insmntque(&vp, &mp) {
            // insmntque's destructor: vgone + vput.
            k.vgone(&vp);
            drop(excl);
            k.vrele(&vp);
            return Err(e);
        }
        if let HashInsert::Lost(winner) = k.vfs_hash_insert(&vp, &mp, ino) {
            stats::add(&k.stats.hash_insert_races, 1);
            k.vgone(&vp);
            drop(excl);
            k.vrele(&vp);
            return Ok(winner);
        }
        match ctor() {
            Ok((vtype, data)) => {
                vp.interlock.lock().data = Some(Arc::from(data));
                let vtype = if vtype == VType::Bad {
                    VType::Non
                } else {
                    vtype
                };
                vp.vtype.store(vtype as u8, SeqCst);
                drop(excl);
                Ok(VRef::from_owned(k, vp))
            }
            Err(e) => {
                k.vgone(&vp);
                drop(excl);
                k.vrele(&vp);
                Err(e)
            }
        }
    }

    /// `vfs_hash_get` alone: the cached vnode for `(mnt, ino)`, if any.
    pub fn vfs_hash_get(&self, mnt: MountId, ino: u64) -> Option<VRef> {
        let mp = self.k.mounts.get(mnt)?;
        self.k.vfs_hash_get(&mp, ino)
    }

    /// `cache_lookup`: look `name` up under directory `dvp`.
    pub fn cache_lookup(&self, dvp: &VRef, name: &str) -> CacheLookup {
        self.k.cache_lookup(dvp.vnode(), name)
    }

    /// `cache_enter`: cache `name` under `dvp` as `vp`, or as a negative
    /// entry if `vp` is `None`. The first entry under `dvp` holds it.
    pub fn cache_enter(&self, dvp: &VRef, name: &str, vp: Option<&VRef>) {
        self.k.cache_enter(dvp.vnode(), name, vp.map(|v| v.vnode()));
    }

    /// Remove the entry for `name` under `dvp`; whether there was one.
    pub fn cache_remove(&self, dvp: &VRef, name: &str) -> bool {
        self.k.cache_remove(dvp.vnode(), name)
    }

    /// `cache_purge`: remove all entries from and to `vp`.
    pub fn cache_purge(&self, vp: &VRef) {
        self.k.cache_purge(vp.vnode());
    }

    /// `vnlru_free_vfsops`: ZFS's `arc_prune` entry point. Try to recycle
    /// up to `count` free vnodes of file system type `fs_type`, scanning
    /// from that type's own marker. Returns the number of recycle attempts
    /// (as FreeBSD does); 0 for an unknown type.
    pub fn vnlru_free_vfsops(&self, fs_type: &str, count: usize) -> usize {
        let k = &self.k;
        let Some(fs) = k.mounts.fs_type_id(fs_type, false) else {
            return 0;
        };
        let mvp = {
            let mut markers = k.mounts.markers.lock();
            *markers
                .entry(fs)
                .or_insert_with(|| k.vnode_list.lock().alloc_marker())
        };
        k.vnlru_free_vfsops(count, fs, mvp)
    }

    /// `vnlru_free`: try to recycle up to `count` free vnodes of any file
    /// system from the global free marker.
    pub fn vnlru_free(&self, count: usize) -> usize {
        self.k.vnlru_free_vnlru(count)
    }

    /// `vfs.numvnodes`.
    pub fn numvnodes(&self) -> usize {
        self.k.numvnodes.load(SeqCst)
    }

    /// `vfs.freevnodes` as `vnlru_read_freevnodes` sees it.
    pub fn freevnodes(&self) -> usize {
        self.k.freevnodes.read()
    }

    /// `kern.maxvnodes`.
    pub fn desiredvnodes(&self) -> usize {
        self.k.tun.desiredvnodes
    }

    /// Snapshot of all counters.
    pub fn stats(&self) -> FreeBsdStats {
        let k = &self.k;
        let mut s = k.stats.snapshot();
        s.numvnodes = k.numvnodes.load(SeqCst) as u64;
        s.freevnodes = k.freevnodes.read_exact().max(0) as u64;
        s.desiredvnodes = k.tun.desiredvnodes as u64;
        s.wantfreevnodes = k.tun.wantfreevnodes as u64;
        s.vnode_list_len = k.vnode_list.lock().len() as u64;
        s.cache_entries = k.cache.len() as u64;
        s.zone_cached = k.zone.cached() as u64;
        s
    }

    /// Stop and join the vnlru thread. Idempotent.
    pub fn shutdown(&self) {
        self.k.request_stop();
        let handle = self.vnlru.lock().take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn kernel(&self) -> &Arc<Kernel> {
        &self.k
    }
}

impl Drop for FreeBsdVfs {
    fn drop(&mut self) {
        self.shutdown();
    }
}
