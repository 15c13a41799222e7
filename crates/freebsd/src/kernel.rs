//! The global state of `vfs_subr.c`, gathered in one struct.
//!
//! FreeBSD keeps these as file-scope statics; here each [`FreeBsdVfs`]
//! instance owns one `Kernel` so that tests and benchmarks can run several
//! side by side. Fields keep FreeBSD's names and, where FreeBSD marks them
//! `__exclusive_cache_line`, their own cache line.
//!
//! The structures it holds are defined here too when their operations need
//! the rest of the kernel (`vfs_hash_tbl`, the name cache's tables, the
//! per-CPU `vdbatch`, the mount table): those operations are `Kernel`
//! methods in the module named for them (`hash.rs`, `namecache.rs`,
//! `vdbatch.rs`, `mount.rs`, all above this one). Structures with
//! operations of their own (`vnode_list`, the zone, `freevnodes`, the
//! tunables, the counters) have their own modules below this one.
//!
//! [`FreeBsdVfs`]: crate::FreeBsdVfs

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use crate::freevnodes::FreeVnodes;
use crate::list::VnodeList;
use crate::stats::Stats;
use crate::tunables::Tunables;
use crate::vnode::{Hooks, Mount, NcKey, Vnode};
use crate::zone::Zone;
use crate::{pcpu, MountId, Variant};

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

// ---- vfs_hash.c ---------------------------------------------------------

/// An entry of `vfs_hash_tbl`.
pub(crate) struct HashEntry {
    pub mnt: u32,
    pub ino: u64,
    pub vp: Arc<Vnode>,
}

/// `vfs_hash_tbl` under `vfs_hash_lock` (operations in `hash.rs`).
pub(crate) struct VfsHash {
    pub tbl: CachePadded<RwLock<Vec<Vec<HashEntry>>>>,
    mask: usize,
}

/// `hashinit`: the largest power of two not above `elements`.
fn hashinit_size(elements: usize) -> usize {
    let mut size = 1usize;
    while size <= elements {
        size <<= 1;
    }
    (size >> 1).max(1)
}

/// `mnt_hashseed` stand-in: a fixed scramble of the mount id.
fn hashseed(mnt: u32) -> usize {
    (mnt as usize).wrapping_mul(0x9E37_79B9)
}

impl VfsHash {
    pub(crate) fn new(desiredvnodes: usize) -> Self {
        let size = hashinit_size(desiredvnodes);
        Self {
            tbl: CachePadded::new(RwLock::new((0..size).map(|_| Vec::new()).collect())),
            mask: size - 1,
        }
    }

    /// `vfs_hash_bucket`: file systems pass the inode number as the hash.
    pub(crate) fn bucket(&self, mnt: u32, ino: u64) -> usize {
        (ino as usize).wrapping_add(hashseed(mnt)) & self.mask
    }
}

// ---- vfs_cache.c --------------------------------------------------------

/// `ncsizefactor`.
const NCSIZEFACTOR: usize = 2;
/// `ncnegfactor`.
const NCNEGFACTOR: usize = 5;

/// A name cache entry: `struct namecache`.
pub(crate) struct NcEntry {
    pub id: u64,
    pub dvp: Arc<Vnode>,
    pub vp: Option<Arc<Vnode>>,
}

pub(crate) type NcBucket = HashMap<NcKey, NcEntry>;

/// The name cache's tables and counters (operations in `namecache.rs`).
pub(crate) struct NameCache {
    buckets: Box<[CachePadded<Mutex<NcBucket>>]>,
    mask: usize,
    /// `numcache`.
    pub numcache: CachePadded<AtomicUsize>,
    /// `numneg`.
    pub numneg: AtomicUsize,
    /// `ncsize`: at most this many entries.
    pub ncsize: usize,
    /// At most this many negative entries.
    pub neg_limit: usize,
    /// Negative entries, oldest first (lazily pruned: ids may be stale).
    pub neglist: Mutex<VecDeque<(u64, NcKey)>>,
    /// Source of entry ids.
    pub next_id: AtomicU64,
}

/// FNV-1a, as `cache_get_hash` uses FNV over the name then the vnode.
fn fnv1a(mut h: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    h
}

impl NameCache {
    pub(crate) fn new(desiredvnodes: usize, ncpus: usize) -> Self {
        let nbuckets = (ncpus.max(1) * 64).next_power_of_two();
        let ncsize = desiredvnodes.saturating_mul(NCSIZEFACTOR).max(1);
        Self {
            buckets: (0..nbuckets)
                .map(|_| CachePadded::new(Mutex::new(HashMap::new())))
                .collect(),
            mask: nbuckets - 1,
            numcache: CachePadded::new(AtomicUsize::new(0)),
            numneg: AtomicUsize::new(0),
            ncsize,
            neg_limit: (ncsize / NCNEGFACTOR).max(1),
            neglist: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(1),
        }
    }

    pub(crate) fn bucket(&self, key: &NcKey) -> &Mutex<NcBucket> {
        let h = fnv1a(
            fnv1a(2_166_136_261, key.name.as_bytes()),
            &key.dgen.to_le_bytes(),
        );
        &self.buckets[h as usize & self.mask]
    }

    /// Entries currently cached.
    pub(crate) fn len(&self) -> usize {
        self.numcache.load(SeqCst)
    }
}

// ---- vdbatch -------------------------------------------------------------

/// `VDBATCH_SIZE`.
pub(crate) const VDBATCH_SIZE: usize = 8;

/// `struct vdbatch` (its `lock` is the surrounding mutex).
#[derive(Default)]
pub(crate) struct VdBatch {
    pub index: usize,
    pub tab: [Option<Arc<Vnode>>; VDBATCH_SIZE],
}

/// `DPCPU_DEFINE_STATIC(struct vdbatch, vd)` (operations in `vdbatch.rs`).
pub(crate) struct VdBatches {
    pub cpus: Box<[CachePadded<Mutex<VdBatch>>]>,
}

impl VdBatches {
    pub(crate) fn new(ncpus: usize) -> Self {
        Self {
            cpus: (0..ncpus.max(1))
                .map(|_| CachePadded::new(Mutex::new(VdBatch::default())))
                .collect(),
        }
    }
}

// ---- mounts --------------------------------------------------------------

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
