//! # uvfs-vnode: a vnode layer for userspace file servers
//!
//! A cache of vnodes keyed by (mount, inode), each with a use count and a
//! hold count, under one global limit; allocation that never fails and
//! never sleeps; recycling of least-recently-used free vnodes by allocating
//! threads and a background reclaimer; a per-mount prune whose cost is the
//! number of vnodes it frees; a bounded name cache; distributed counters;
//! FreeBSD-style statistics. No I/O: file systems plug in via [`FsHooks`].
//!
//! # Walkthrough
//!
//! One [`VnodeLayer`] serves a whole process: it owns the (mount, inode)
//! table, the limit, the name cache and the reclaimer thread. Each file
//! system registers with [`VnodeLayer::mount`], passing the [`FsHooks`] the
//! layer calls when a vnode stops being used (`inactive`) and when it is
//! torn down (`reclaim`), and gets back the [`Mount`] that every other call
//! names.
//!
//! [`VnodeLayer::get`] returns the vnode of an inode with a use reference, a
//! [`VnodeRef`]; on a miss it runs the caller's constructor, which says the
//! file's [`VType`] and attaches the file system's private data (read back
//! with [`Vnode::data`]). Concurrent `get`s of one inode share one
//! construction. A [`HoldRef`] (from [`VnodeRef::hold`]) pins a vnode
//! without counting as a user, as a FUSE server does for each node the
//! kernel remembers. Dropping the last reference of either kind puts the
//! vnode on its mount's free list: still cached, so the next `get` finds it,
//! but recyclable.
//!
//! The limit is [`Config::limit`]. An allocation that finds the layer full
//! recycles the least recently freed vnode on the spot (its `reclaim` hook
//! runs, its name-cache entries go); when nothing is free it goes over the
//! limit rather than fail or wait. [`VnodeLayer::prune`] frees vnodes of one
//! mount on demand, [`VnodeLayer::unmount`] ends a mount, and
//! [`VnodeLayer::stats`] reports every counter as a [`Stats`].
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use uvfs_vnode::{Config, FsHooks, VType, Vnode, VnodeLayer};
//!
//! /// Remembers which inodes the layer recycled.
//! #[derive(Default)]
//! struct Hooks(Mutex<Vec<u64>>);
//!
//! impl FsHooks for Hooks {
//!     fn reclaim(&self, vp: &Vnode) {
//!         self.0.lock().unwrap().push(vp.ino());
//!     }
//! }
//!
//! // A tiny limit, and no background thread so the example is deterministic.
//! let layer = VnodeLayer::new(Config { reclaimer: false, ..Config::with_limit(4) });
//! let hooks = Arc::new(Hooks::default());
//! let mnt = layer.mount("demo", hooks.clone());
//!
//! // The constructor runs once per cached inode; its data rides on the vnode.
//! let root = layer.get(&mnt, 1, || Ok((VType::Dir, Arc::new("root"))))?;
//! assert_eq!(root.data::<&str>(), Some(&"root"));
//! let again = layer.get(&mnt, 1, || unreachable!("inode 1 is cached"))?;
//! assert_eq!(again.use_count(), 2);
//! drop(again);
//!
//! // Touch many files, dropping each: the count stays under the limit
//! // because free vnodes are recycled, never the one still in use.
//! for ino in 100..200 {
//!     let vp = layer.get(&mnt, ino, move || Ok((VType::Reg, Arc::new(ino))))?;
//!     assert_eq!(vp.data::<u64>(), Some(&ino));
//! }
//! let stats = layer.stats();
//! assert!(stats.numvnodes <= 4);
//! assert!(stats.recycles >= 96);
//! assert!(!hooks.0.lock().unwrap().contains(&1));
//! assert!(!root.is_doomed());
//!
//! // Unmounting with a vnode still in use is refused unless forced.
//! assert!(layer.unmount(&mnt, false).is_err());
//! drop(root);
//! layer.unmount(&mnt, false)?;
//! # Ok::<(), uvfs_vnode::Error>(())
//! ```
//!
//! # Where it differs from FreeBSD, and why
//!
//! * Free vnodes live on per-mount, sharded LRU lists that hold nothing
//!   else. FreeBSD's single global list under one mutex makes ZFS's prune
//!   walk far more entries than it frees (seed 001) and serialises
//!   recycling (seed 000).
//! * The vnode count is a distributed counter with documented slop; the
//!   allocation fast path writes only its own thread's cell.
//! * Allocation over the limit recycles directly in O(1), or overcommits
//!   when nothing is free, instead of sleeping on the reclaimer.
//!
//! # Module map
//!
//! Each module uses only those listed before it (`scripts/check-module-cycles.py`
//! keeps it so):
//!
//! `sync` (std or loom primitives) · `ids` · `error` · `clock` · `hash`
//! (the integer hasher of every map) · `counter` (distributed counters) ·
//! `config` · `aged` (shards that publish their oldest entry's age) ·
//! `refs` (the reference word) · `shared` (counters, limit and doorbell
//! every vnode reaches) · `nclinks` (the name cache's links kept on a
//! vnode) · `freelist` (per-mount LRU lists of anything `Listed`) ·
//! `vnode` (the vnode and its mount, [`FsHooks`]) · `handle` ([`VnodeRef`],
//! [`HoldRef`]) · `table` ((mount, ino) map) · `namecache` · `stats` ·
//! `reclaimer` (background thread, over anything it can `Reclaim`) ·
//! `layer` (get, limit, recycle, prune, unmount).

#![warn(missing_docs)]

mod aged;
mod clock;
mod config;
mod counter;
mod error;
mod freelist;
mod handle;
mod hash;
mod ids;
mod layer;
mod namecache;
mod nclinks;
mod reclaimer;
mod refs;
mod shared;
mod stats;
mod sync;
mod table;
mod vnode;

pub use config::Config;
pub use counter::{DistCounter, StatCounter};
pub use error::Error;
pub use handle::{HoldRef, VnodeRef};
pub use ids::{Ino, MountId, VType};
pub use layer::{PruneResult, VnodeLayer};
pub use namecache::{NameCache, NcLookup, NC_NAME_MAX};
pub use stats::Stats;
pub use uvfs_rangelock as rangelock;
pub use vnode::{no_data, FsHooks, Mount, Vnode, VnodeData};
