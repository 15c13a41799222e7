//! # uvfs-vnode: a vnode layer for userspace file servers
//!
//! A cache of vnodes keyed by (mount, inode), each with a use count and a
//! hold count, under one global limit; allocation that never fails and
//! never sleeps; recycling of least-recently-used free vnodes by allocating
//! threads and a background reclaimer; a per-mount prune whose cost is the
//! number of vnodes it frees; a bounded name cache; distributed counters;
//! FreeBSD-style statistics. No I/O: file systems plug in via [`FsHooks`].
//!
//! # Where it differs from FreeBSD, and why
//!
//! * Free vnodes live on per-mount, sharded LRU lists that hold nothing
//!   else. FreeBSD's single global list under one mutex made ZFS's prune
//!   walk ~960 entries per vnode freed (seed 001) and serialised recycling
//!   (seed 000).
//! * The vnode count is a distributed counter with documented slop; the
//!   allocation fast path writes only its own thread's cell.
//! * Allocation over the limit recycles directly in O(1), or overcommits
//!   when nothing is free, instead of sleeping on the reclaimer.
//!
//! # Module map
//!
//! `refs` (the reference word) · `vnode` (vnode, `VnodeRef`, `HoldRef`) ·
//! `freelist` (per-mount LRU lists) · `aged` (shards that publish their
//! oldest entry's age) · `table` ((mount, ino) map) · `layer`
//! (get, limit, recycle, prune, unmount) · `reclaimer` (background thread) ·
//! `namecache` · `counter` · `stats` · `config` · `mount` · `sync` (std or
//! loom primitives).

#![warn(missing_docs)]

mod aged;
mod clock;
mod config;
mod counter;
mod error;
mod freelist;
mod ids;
mod layer;
mod mount;
mod namecache;
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
pub use ids::{Ino, MountId, VType};
pub use layer::{PruneResult, VnodeLayer};
pub use mount::{FsHooks, Mount};
pub use namecache::{NameCache, NcLookup, NC_NAME_MAX};
pub use stats::Stats;
pub use uvfs_rangelock as rangelock;
pub use vnode::{HoldRef, Vnode, VnodeData, VnodeRef};
