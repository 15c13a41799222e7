//! The vnode and the mount it belongs to.
//!
//! One module for both because they are one ownership graph: a vnode
//! keeps its mount alive (its hooks, free lists and counters are what its
//! last release needs), and a mount's free lists keep its free vnodes.
//! Everything either needs from the layer above (tearing a vnode down) it
//! reaches through [`Teardown`], so neither depends on the layer.
//!
//! # Lock reference
//!
//! | field       | protected by                                              |
//! |-------------|-----------------------------------------------------------|
//! | `ino`, `mount` | immutable                                              |
//! | `refs`      | atomics; free transitions re-checked under the free-list shard lock (`refs.rs`) |
//! | `slot`      | written under the lock of the free-list shard it names; read `SeqCst` (see `freelist.rs`) |
//! | `state`, `vtype`, `init_err` | written once by the constructing thread, published by `state` (Release) |
//! | `data`      | written once by the constructing thread before `state` publishes LIVE (Release); read only after an Acquire load of `state` saw LIVE; then immutable |
//! | `extra`     | allocated on first use (a `OnceBox`: one word); its `nc` has its own mutex, taken after a name-cache shard lock, never before; its range lock is internally synchronised |
//! | `ext`       | atomic; its 0 <-> nonzero edges take and drop one hold (see `ext_acquire`) |

use crate::counter::DistCounter;
use crate::freelist::{FreeList, Listed, NO_SLOT};
use crate::ids::{Ino, MountId, VType};
use crate::nclinks::NcLinks;
use crate::refs::{self, Acquired, Refs, COUNTS, DOOMED, USE_ONE};
use crate::shared::Shared;
use crate::sync::{
    Arc, AtomicBool, AtomicI16, AtomicU32, AtomicU64, AtomicU8, Mutex, Ordering, UnsafeCell,
};
use once_cell::race::OnceBox;
use std::any::Any;
use std::fmt;
use uvfs_rangelock::RangeLock;

/// Construction states (`Vnode::state & STATE_MASK`).
pub(crate) const CONSTRUCTING: u8 = 0;
pub(crate) const LIVE: u8 = 1;
pub(crate) const FAILED: u8 = 2;
const STATE_MASK: u8 = 3;
/// Set by a thread about to park waiting for construction, so the
/// constructor only pays for a wakeup (a parking-table lock) when someone
/// actually waits.
const WAITERS: u8 = 4;
/// Set by `recycle_when_free`: tear down on the last release instead of
/// caching (FreeBSD's `vrecycle` from `VOP_INACTIVE`).
const RECYCLE: u8 = 8;

/// File-system private data attached at construction: the file system's
/// own `Arc`, kept as it is (no box around it), so a node costs the file
/// system one allocation and the vnode two words.
pub type VnodeData = Arc<dyn Any + Send + Sync>;

/// Data for a vnode that has none of its own (a file system that finds
/// everything by inode number): one shared `Arc`, so such vnodes allocate
/// nothing for it.
pub fn no_data() -> VnodeData {
    static NONE: std::sync::LazyLock<VnodeData> = std::sync::LazyLock::new(|| Arc::new(()));
    NONE.clone()
}

/// A cached file: identity, counts, state, file-system data.
pub struct Vnode {
    pub(crate) refs: Refs,
    ino: Ino,
    pub(crate) mount: Arc<Mount>,
    pub(crate) slot: AtomicU32,
    pub(crate) state: AtomicU8,
    vtype: AtomicU8,
    /// The errno of a failed construction (errnos fit in 16 bits; the
    /// two bytes saved keep `Vnode` at 64 bytes, an 80-byte `Arc`).
    pub(crate) init_err: AtomicI16,
    /// Published by `state` rather than by a lock or a `OnceLock` of its
    /// own, whose state word would pad it to three words (see [`DataSlot`]).
    data: DataSlot,
    /// What only some vnodes need: name-cache links (only file systems
    /// that use the layer's name cache make any) and a range lock.
    extra: OnceBox<Extra>,
    /// References counted for an outside party as one hold: the FUSE
    /// kernel's lookup count. Kept here rather than in a map of the
    /// server's so that a node the kernel remembers costs no table entry
    /// of its own (a map entry per node would cost tens of bytes each).
    pub(crate) ext: AtomicU64,
}

impl Vnode {
    /// A vnode under construction, with one use (its creator's).
    pub(crate) fn new_constructing(mount: Arc<Mount>, ino: Ino) -> Self {
        Vnode {
            refs: Refs::new_used(),
            ino,
            mount,
            slot: AtomicU32::new(NO_SLOT),
            state: AtomicU8::new(CONSTRUCTING),
            vtype: AtomicU8::new(VType::Non as u8),
            init_err: AtomicI16::new(0),
            data: DataSlot(UnsafeCell::new(None)),
            extra: OnceBox::new(),
            ext: AtomicU64::new(0),
        }
    }

    /// The inode number this vnode was looked up by in its mount.
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// The mount this vnode belongs to.
    pub fn mount_id(&self) -> MountId {
        self.mount.id()
    }

    /// The file system type of the vnode's mount (e.g. "memfs").
    pub fn fs_type(&self) -> &str {
        self.mount.fs_type()
    }

    /// The kind of file, as the constructor set it; [`VType::Non`] until
    /// construction finishes.
    pub fn vtype(&self) -> VType {
        VType::from_u8(self.vtype.load(Ordering::Acquire))
    }

    /// The file system's private data, if it is of type `T` (the type
    /// inside the `Arc` the constructor gave); `None` until construction
    /// finished.
    #[inline]
    pub fn data<T: Any>(&self) -> Option<&T> {
        self.data_any().and_then(|d| d.downcast_ref::<T>())
    }

    /// The file system's private data as its own `Arc`, if it is of type `T`.
    pub fn data_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.data_any().cloned()?.downcast::<T>().ok()
    }

    #[inline]
    fn data_any(&self) -> Option<&VnodeData> {
        if self.construction() != LIVE {
            return None;
        }
        // SAFETY: the Acquire load in `construction` saw LIVE, which
        // `set_live` stores (Release) after its one write to the slot;
        // nothing writes the slot again while `self` is borrowed.
        unsafe { self.data.get() }
    }

    /// This vnode's byte-range lock, created on first use so idle vnodes do
    /// not pay for it.
    pub fn rangelock(&self) -> &RangeLock {
        self.extra()
            .rangelock
            .get_or_init(|| Box::new(RangeLock::new()))
    }

    /// The rarely needed part, allocated on first use.
    fn extra(&self) -> &Extra {
        self.extra.get_or_init(|| {
            Box::new(Extra {
                nc: Mutex::new(NcLinks::default()),
                rangelock: OnceBox::new(),
            })
        })
    }

    /// The name-cache links, made on first use: for adding links.
    pub(crate) fn nc(&self) -> &Mutex<NcLinks> {
        &self.extra().nc
    }

    /// The name-cache links if any were ever made: for reading and
    /// removing them (a vnode without them is named by no entry and has
    /// none under it; an entry being added links itself after making them).
    pub(crate) fn nc_if_any(&self) -> Option<&Mutex<NcLinks>> {
        self.extra.get().map(|e| &e.nc)
    }

    /// Asks for this vnode to be recycled as soon as it is free, instead of
    /// being cached on its free list: for a file system whose `inactive`
    /// hook learns the file is gone (unlinked, last user), so its vnode and
    /// private data need not wait for LRU. The reclaim hook then runs in the
    /// thread that drops the last reference.
    pub fn recycle_when_free(&self) {
        self.state.fetch_or(RECYCLE, Ordering::AcqRel);
    }

    /// Whether a range lock was ever created (for memory accounting tests).
    pub fn has_rangelock(&self) -> bool {
        self.extra
            .get()
            .is_some_and(|e| e.rangelock.get().is_some())
    }

    /// Whether the rarely needed part (name-cache links, range lock) was
    /// ever allocated (for memory accounting tests).
    pub fn has_extra(&self) -> bool {
        self.extra.get().is_some()
    }

    /// Doomed: recycled or force-unmounted. A doomed vnode is unreachable
    /// through the cache; references to it stay memory-safe but stale.
    pub fn is_doomed(&self) -> bool {
        self.refs.load() & DOOMED != 0
    }

    /// Active users ([`VnodeRef`](crate::VnodeRef)s) now; a vnode with users is never free.
    pub fn use_count(&self) -> u32 {
        refs::uses(self.refs.load())
    }

    /// Holds now: [`HoldRef`](crate::HoldRef)s, the name cache's one on a directory with
    /// entries, one for all external references. A held vnode is never
    /// recycled.
    pub fn hold_count(&self) -> u32 {
        refs::holds(self.refs.load())
    }

    /// External references counted (the FUSE kernel's lookup count); all
    /// of them together are worth one hold.
    pub fn ext_count(&self) -> u64 {
        self.ext.load(Ordering::Acquire)
    }

    /// Fills in a constructed vnode and publishes it; returns whether
    /// anybody is parked waiting for it.
    pub(crate) fn set_live(&self, vtype: VType, data: VnodeData) -> bool {
        debug_assert_eq!(self.construction(), CONSTRUCTING);
        // SAFETY: only the constructing thread gets here, once (`get`'s
        // `init` path), before `publish(LIVE)`: no reader looks at the slot
        // until it has seen LIVE.
        unsafe { self.data.set(data) };
        self.vtype.store(vtype as u8, Ordering::Relaxed);
        self.publish(LIVE)
    }

    /// Ends construction with `state`; returns whether anybody waits.
    pub(crate) fn publish(&self, state: u8) -> bool {
        // Release: publishes data, vtype and init_err to waiters that
        // Acquire `state`.
        self.state.swap(state, Ordering::AcqRel) & WAITERS != 0
    }

    /// CONSTRUCTING, LIVE or FAILED.
    #[inline]
    pub(crate) fn construction(&self) -> u8 {
        self.state.load(Ordering::Acquire) & STATE_MASK
    }

    /// Announces a waiter; returns false if construction already ended.
    pub(crate) fn announce_waiter(&self) -> bool {
        self.state.fetch_or(WAITERS, Ordering::AcqRel) & STATE_MASK == CONSTRUCTING
    }

    /// Takes a reference of kind `one`; on the 0 -> 1 edge takes the vnode
    /// off its free list.
    #[inline]
    pub(crate) fn acquire(&self, one: u64) -> Acquired {
        let a = self.refs.acquire(one);
        if a == Acquired::WasFree && self.mount.free.on_unfree(self) {
            self.mount.shared.freevnodes.add(-1);
        }
        a
    }

    /// Drops a reference of kind `one`, running `inactive` on the last use
    /// and putting the vnode on its free list on the last reference.
    #[inline]
    pub(crate) fn release(self: &Arc<Self>, one: u64) {
        let before = self.refs.release(one);
        if before & DOOMED != 0 {
            return;
        }
        if one == USE_ONE && refs::uses(before) == 1 {
            self.mount.hooks.inactive(self);
        }
        if (before - one) & COUNTS == 0 {
            self.release_to_free();
        }
    }

    #[cold]
    fn release_to_free(self: &Arc<Self>) {
        if self.state.load(Ordering::Acquire) & RECYCLE != 0 {
            if let Some(layer) = self.mount.teardown.upgrade() {
                // Claim it as the recycler would; if a new reference beat
                // us, its owner's last release comes back here.
                if self.refs.try_doom_free() {
                    // Another thread's last release may have checked the
                    // flag before it was set and be putting it on a list
                    // right now: whichever of us sees the other takes it
                    // off (`FreeList::on_free`'s Dekker load sees the doom,
                    // or this sees its `slot`), so a torn-down vnode never
                    // stays listed.
                    if self.mount.free.on_unfree(self) {
                        self.mount.shared.freevnodes.add(-1);
                    }
                    layer.teardown(self.clone());
                }
                return;
            }
        }
        if self.mount.free.on_free(self) > 0 {
            let shared = &self.mount.shared;
            shared.freevnodes.add(1);
            shared.note_free();
        }
    }
}

impl fmt::Debug for Vnode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.refs.load();
        f.debug_struct("Vnode")
            .field("mount", &self.mount_id())
            .field("ino", &self.ino)
            .field("vtype", &self.vtype())
            .field("uses", &refs::uses(w))
            .field("holds", &refs::holds(w))
            .field("doomed", &(w & DOOMED != 0))
            .finish()
    }
}

/// The slot for a vnode's file-system data: written once, before the
/// vnode's `state` publishes LIVE, and only read after that publication
/// was seen. The vnode's state word is the slot's "initialised" flag, so
/// the slot is the data's two words and nothing more.
struct DataSlot(UnsafeCell<Option<VnodeData>>);

// SAFETY: the data is `Send + Sync`; the cell is written only through
// `set`, whose callers guarantee (see there) that no other thread reads it
// until a Release/Acquire pair orders the write before the read.
unsafe impl Sync for DataSlot {}

impl DataSlot {
    /// # Safety
    /// Called at most once, by one thread, before the store that
    /// publishes the vnode as LIVE; no `get` runs before that store.
    unsafe fn set(&self, d: VnodeData) {
        // SAFETY: the caller's contract: no concurrent access.
        self.0.with_mut(|p| unsafe { *p = Some(d) });
    }

    /// # Safety
    /// The caller saw (Acquire) the publication that followed `set`, or
    /// `set` never runs on this slot.
    unsafe fn get(&self) -> Option<&VnodeData> {
        // SAFETY: the caller's contract: the one write happened before, and
        // the data is never written again while `self` lives.
        self.0.with(|p| unsafe { (*p).as_ref() })
    }
}

/// The part of a vnode allocated on first use.
struct Extra {
    nc: Mutex<NcLinks>,
    rangelock: OnceBox<RangeLock>,
}

/// Tears a claimed vnode down: out of every index of the layer, then the
/// file system's reclaim hook. The layer implements it; a vnode marked
/// `recycle_when_free` calls it from its last release.
pub(crate) trait Teardown: Send + Sync {
    /// `vp` is doomed, on no free list and unreferenced but for `vp`.
    fn teardown(&self, vp: Arc<Vnode>);
}

impl Listed for Vnode {
    #[inline]
    fn refs(&self) -> &Refs {
        &self.refs
    }
    #[inline]
    fn slot(&self) -> &AtomicU32 {
        &self.slot
    }
}

/// What the vnode layer calls into a file system for. Both hooks default
/// to doing nothing.
pub trait FsHooks: Send + Sync + 'static {
    /// The use count fell to zero: the last open file or operation is gone
    /// (FreeBSD's `VOP_INACTIVE`). Holds may remain. Runs outside every lock
    /// of the layer and may race with a new user taking a reference.
    fn inactive(&self, _vp: &Vnode) {}

    /// The vnode is being recycled: no references remain and no lookup can
    /// reach it any more (FreeBSD's `VOP_RECLAIM`). Release whatever the
    /// vnode caches (fds, attributes). Runs outside every lock of the layer.
    /// A fresh vnode for the same inode may be constructed concurrently.
    fn reclaim(&self, _vp: &Vnode) {}
}

/// No hooks: for a file system whose vnodes cache nothing to release.
impl FsHooks for () {}

/// A mounted file system as the vnode layer sees it. Obtained from
/// [`crate::VnodeLayer::mount`]; pass it to `get`, `prune`, `unmount`.
pub struct Mount {
    id: MountId,
    fs_type: String,
    pub(crate) hooks: Arc<dyn FsHooks>,
    pub(crate) free: FreeList<Vnode>,
    /// Vnodes of this mount that exist (constructing, live, or doomed but
    /// not yet torn down). Distributed: every allocation and recycle
    /// updates it, so one shared word would bounce between cores.
    pub(crate) live: DistCounter,
    /// Set by unmount: no new vnodes may be created.
    pub(crate) gone: AtomicBool,
    pub(crate) shared: Arc<Shared>,
    /// Who tears down a vnode recycled on its last release: the layer
    /// (weak: the layer owns its mounts).
    pub(crate) teardown: std::sync::Weak<dyn Teardown>,
}

impl Mount {
    pub(crate) fn new(
        id: MountId,
        fs_type: &str,
        hooks: Arc<dyn FsHooks>,
        shared: Arc<Shared>,
        teardown: std::sync::Weak<dyn Teardown>,
    ) -> Self {
        Mount {
            id,
            fs_type: fs_type.to_string(),
            hooks,
            free: FreeList::new(shared.cfg.freelist_shards),
            // Only ever read exactly (summed), so cells need never fold.
            live: DistCounter::new(1 << 40),
            gone: AtomicBool::new(false),
            shared,
            teardown,
        }
    }

    /// The mount's number: unique in its layer for the layer's life, so it
    /// can name the mount where a reference would keep it alive.
    pub fn id(&self) -> MountId {
        self.id
    }

    /// The file system type given to [`VnodeLayer::mount`](crate::VnodeLayer::mount), for statistics and logs.
    pub fn fs_type(&self) -> &str {
        &self.fs_type
    }

    /// How many vnodes of this mount exist right now.
    pub fn vnode_count(&self) -> usize {
        self.live.exact().max(0) as usize
    }

    /// How many vnodes of this mount are free (recyclable) right now.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Whether unmount has begun: from then on `get` on this mount fails
    /// with [`Error::MountGone`](crate::Error::MountGone).
    pub fn is_unmounted(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("id", &self.id)
            .field("fs_type", &self.fs_type)
            .field("vnodes", &self.vnode_count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    /// Every cached file pays for one `Arc<Vnode>`; at 64 bytes the
    /// allocation is 80 (a size class of mimalloc's), at 65 it is 96.
    /// A field added here has to pay for itself.
    #[test]
    fn vnode_fits_an_80_byte_arc() {
        assert!(
            std::mem::size_of::<super::Vnode>() <= 64,
            "Vnode is {} bytes",
            std::mem::size_of::<super::Vnode>()
        );
    }
}
