//! The lock that makes each read, write and truncate atomic.
//!
//! Reads take their byte range shared, writes exclusive, truncate and
//! fallocate exclusive from the lowest offset they change to infinity
//! (`end == u64::MAX`). The intended lock is the vnode's range lock
//! (`vp.rangelock()`, from `uvfs-rangelock`), under which disjoint I/O
//! proceeds in parallel and adjacent ranges `[a, b)`, `[b, c)` do not
//! conflict.
//!
//! Disjoint reads never touch a cache line shared by all readers of the
//! file (see `uvfs-rangelock`), so parallel readers of one file scale.
//!
//! Memfs data outlives vnodes, but a per-vnode lock is still enough: every
//! operation holds a use reference on the vnode while it holds the lock,
//! and all users of one inode share its one cached vnode.

use std::ops::Range;
use uvfs_vnode::Vnode;

/// Held while reading; releases on drop.
pub(crate) type ReadGuard<'a> = uvfs_vnode::rangelock::ReadGuard<'a>;
/// Held while modifying; releases on drop.
pub(crate) type WriteGuard<'a> = uvfs_vnode::rangelock::WriteGuard<'a>;

/// Locks `range` of the file shared.
pub(crate) fn lock_read(vp: &Vnode, range: Range<u64>) -> ReadGuard<'_> {
    vp.rangelock().read(range)
}

/// Locks `range` of the file exclusively (`end == u64::MAX`: to infinity).
pub(crate) fn lock_write(vp: &Vnode, range: Range<u64>) -> WriteGuard<'_> {
    vp.rangelock().write(range)
}
