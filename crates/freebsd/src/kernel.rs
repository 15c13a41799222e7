//! The global state of `vfs_subr.c`, gathered in one struct.
//!
//! FreeBSD keeps these as file-scope statics; here each [`FreeBsdVfs`]
//! instance owns one `Kernel` so that tests and benchmarks can run several
//! side by side. Fields keep FreeBSD's names and, where FreeBSD marks them
//! `__exclusive_cache_line`, their own cache line.
//!
//! [`FreeBsdVfs`]: crate::FreeBsdVfs

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

use crate::freevnodes::FreeVnodes;
use crate::hash::VfsHash;
use crate::list::VnodeList;
use crate::mount::Mounts;
use crate::namecache::NameCache;
use crate::stats::Stats;
use crate::tunables::Tunables;
use crate::vdbatch::VdBatches;
use crate::zone::Zone;
use crate::{pcpu, Variant};

pub(crate) struct Kernel {
    /// Which side of seed 000's commit `vn_alloc` replicates.
    pub variant: Variant,
    /// `desiredvnodes`, `wantfreevnodes`, `gapvnodes`, `vhiwat`, `vlowat`.
    pub tun: Tunables,
    /// `numvnodes`: vnodes in existence (`__exclusive_cache_line`).
    pub numvnodes: CachePadded<AtomicUsize>,
    /// `freevnodes` and its per-CPU parts.
    pub freevnodes: FreeVnodes,
    /// `vnode_list` under `vnode_list_mtx` (`__exclusive_cache_line`).
    pub vnode_list: CachePadded<Mutex<VnodeList>>,
    /// Sleep channel `vnlruproc` (vnlru's `msleep`/`tsleep`).
    pub vnlru_cv: Condvar,
    /// Sleep channel `&vnlruproc_sig` (allocators in `vn_alloc_hard`).
    pub alloc_cv: Condvar,
    /// `vnlruproc_sig`: written under `vnode_list_mtx`, read racily.
    pub vnlruproc_sig: AtomicBool,
    /// `vn_alloc_cyclecount`: written under `vnode_list_mtx`, read racily.
    pub vn_alloc_cyclecount: CachePadded<AtomicUsize>,
    /// `vstir`: ask vnlru to stir non-free vnodes.
    pub vstir: AtomicBool,
    /// Asks the vnlru thread to exit (no FreeBSD equivalent).
    pub stop: AtomicBool,
    /// Set by the vnlru thread just before it returns.
    pub vnlru_exited: AtomicBool,
    /// Per-CPU `vdbatch`.
    pub vdbatch: VdBatches,
    /// `vnode_zone`.
    pub zone: Zone,
    /// `vfs_hash_tbl` under `vfs_hash_lock`.
    pub hash: VfsHash,
    /// The name cache (`vfs_cache.c`).
    pub cache: NameCache,
    /// Mounted file systems.
    pub mounts: Mounts,
    /// Counters.
    pub stats: Stats,
    /// Source of vnode identity generations.
    pub next_gen: AtomicU64,
}

impl Kernel {
    pub(crate) fn new(desiredvnodes: usize, variant: Variant) -> Self {
        let tun = Tunables::new(desiredvnodes);
        let ncpus = pcpu::ncpus();
        Self {
            variant,
            tun,
            numvnodes: CachePadded::new(AtomicUsize::new(0)),
            freevnodes: FreeVnodes::new(ncpus),
            vnode_list: CachePadded::new(Mutex::new(VnodeList::new())),
            vnlru_cv: Condvar::new(),
            alloc_cv: Condvar::new(),
            vnlruproc_sig: AtomicBool::new(false),
            vn_alloc_cyclecount: CachePadded::new(AtomicUsize::new(0)),
            vstir: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            vnlru_exited: AtomicBool::new(false),
            vdbatch: VdBatches::new(ncpus),
            zone: Zone::new(ncpus),
            hash: VfsHash::new(tun.desiredvnodes),
            cache: NameCache::new(tun.desiredvnodes, ncpus),
            mounts: Mounts::default(),
            stats: Stats::default(),
            next_gen: AtomicU64::new(1),
        }
    }
}

impl Drop for Kernel {
    /// A mount lists its vnodes and each vnode names its mount (`v_mount`).
    /// The kernel frees both explicitly; here they are reference counted,
    /// and the pair is a cycle that would keep every vnode of a layer
    /// dropped while mounted (and all they hold) alive for ever. Nothing
    /// can reach the layer once its kernel goes, so the lists are emptied
    /// here and the rest drops with the kernel's own lists.
    fn drop(&mut self) {
        for mp in self.mounts.take_all() {
            mp.vnodes.lock().clear();
        }
    }
}
