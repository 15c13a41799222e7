//! uvfs-freebsd: a faithful userspace replica of FreeBSD 14's vnode
//! allocation and recycling (`sys/kern/vfs_subr.c`, with the parts of
//! `vfs_hash.c` and `vfs_cache.c` it leans on), used only as a benchmark
//! baseline for uvfs's own vnode layer.
//!
//! # Why a replica
//!
//! The point is to reproduce FreeBSD's known bottlenecks under the same
//! workloads as our layer, not to be fast: one global `vnode_list` under
//! one `vnode_list_mtx` holding every vnode (markers and free zone memory
//! included), a single `vnlru` thread with fixed sleeps, allocators that
//! sleep up to a second when short, a scan that skips held vnodes and
//! other file systems' vnodes one by one, batched requeues that give up on
//! contention, a global `vfs_hash` lock: what the seed documents (the
//! vnode-limit commit and the `arc_prune` analysis) describe, and
//! `docs/design/vnode-layer.md` contrasts with uvfs.
//!
//! # Map
//!
//! Each module uses only modules listed below it, so no two import each
//! other. FreeBSD's shape (one kernel-wide state that every function
//! reaches) is kept by making the functions `Kernel` methods in modules
//! above the state, and the records and structures the state holds
//! modules below it.
//!
//! | file | FreeBSD |
//! |---|---|
//! | *operations* (`impl Kernel`) | |
//! | `vfs.rs` | the public face, [`FreeBsdVfs`] (`dounmount`, sysctls) |
//! | `daemon.rs` | `vnlru_proc` |
//! | `alloc.rs` | `vn_alloc`, `vn_alloc_hard` ([`Variant`]), `getnewvnode`, `freevnode` |
//! | `vnlru.rs` | `vnlru_free_impl`, `vnlru_free_vfsops`, `vlrureclaim` |
//! | `vgone.rs` | `vgonel`, `vtryrecycle` |
//! | `hash.rs` | `vfs_hash.c` |
//! | `namecache.rs` | `vfs_cache.c` (locked paths) |
//! | `mount.rs` | `insmntque`, `vflush` |
//! | `vdbatch.rs` | per-CPU requeue batches |
//! | `refs.rs` | `vhold`, `vdrop`, `vget`, `vrele`, `vput_final`; [`VRef`], [`HoldRef`] |
//! | *state* | |
//! | `kernel.rs` | the file-scope statics, gathered in one struct, with `vfs_hash_tbl`, the name cache's tables, `vdbatch`, the mount list |
//! | *records and self-contained structures* | |
//! | `list.rs` | `vnode_list`, markers |
//! | `zone.rs` | `vnode_zone` (UMA) |
//! | `freevnodes.rs` | `freevnodes` + per-CPU slop |
//! | `tunables.rs` | `desiredvnodes`, `vnlru_recalc` |
//! | `stats.rs` | the sysctl counters |
//! | `pcpu.rs` | `curcpu` |
//! | `vnode.rs` | `struct vnode`, `struct mount` ([`Hooks`]: its VOPs), `v_cache_src`/`v_cache_dst` |
//!
//! # Per-CPU state
//!
//! Per-CPU structures are arrays indexed by a thread's slot (see
//! `pcpu.rs`), one slot per available CPU.

mod alloc;
mod daemon;
mod freevnodes;
mod hash;
mod kernel;
mod list;
mod mount;
mod namecache;
mod pcpu;
mod refs;
mod stats;
mod tunables;
mod vdbatch;
mod vfs;
mod vgone;
mod vnlru;
mod vnode;
mod zone;

#[cfg(test)]
mod tests;

pub use namecache::CacheLookup;
pub use refs::{HoldRef, VRef};
pub use stats::FreeBsdStats;
pub use tunables::MAXVNODES_MAX;
pub use vfs::FreeBsdVfs;
pub use vnode::{Hooks, VData, VType, Vnode};

/// Which side of seed 000 (FreeBSD commit 054f45e026d8, "vfs: further speed
/// up continuous free vnode recycle") `vn_alloc` replicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Before: `numvnodes` adjusted with three atomics when over the
    /// limit; `vn_alloc_hard` reads `numvnodes` under `vnode_list_mtx` and
    /// writes `vn_alloc_cyclecount`.
    Pre,
    /// After: `VNLRU_COUNT_SLOP` (100) of slop, one atomic, the counter
    /// read under the mutex only when `vn_alloc_cyclecount != 0`.
    Post,
}

/// A mounted file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MountId(pub u32);

/// `ENOENT`.
pub const ENOENT: i32 = 2;
/// `ENXIO`.
pub const ENXIO: i32 = 6;
/// `EBUSY`.
pub const EBUSY: i32 = 16;
/// `EWOULDBLOCK` (`EAGAIN`).
pub const EWOULDBLOCK: i32 = 11;
