//! The inode budget behind `--inodes` (tmpfs's `nr_inodes`): what bounds
//! memfs's metadata, as `--size` bounds its data.
//!
//! # What is counted
//! As tmpfs counts it, in bytes of "inode space": the budget is the inode
//! limit times `INODE_COST` (1 KiB, tmpfs's `BOGO_INODE_SIZE`). Each inode
//! takes `INODE_COST`, and so does each hard link beyond a file's first
//! name (every name pins memory in its directory; tmpfs charges links the
//! same way). Each extended attribute other than an ACL takes
//! `xattr_cost` (tmpfs's `simple_xattr_space`). So an unprivileged user
//! cannot make the server's memory grow without bound through names,
//! links or attributes any more than through data; without a limit a
//! loop creating empty files grows the server's memory until the machine
//! runs out. What does not fit fails with `ENOSPC` and changes nothing.
//!
//! # Who takes and who gives back
//! - an inode's `INODE_COST`: taken by whoever builds it (`MemFs::new`
//!   for the root, which a new budget starts with; `new_inode` for the
//!   rest), given back when the `Inode` is dropped, with what its
//!   attributes still hold;
//! - a link's: taken by `link` for a file that already had a name, given
//!   back when a name goes while others remain (`unlink`, a rename over
//!   it); the last name's is the inode's own;
//! - an attribute's: taken whole by `setxattr` before it is stored (a
//!   replace needs room for the new value while the old one is still
//!   there, as in tmpfs), then the replaced value's given back; given
//!   back by `removexattr` or with the inode.

use crate::budget::Budget;
use std::sync::atomic::{AtomicUsize, Ordering};
use uvfs_vfs::{Errno, VfsResult};

/// Inode space one inode or one extra link takes.
pub const INODE_COST: u64 = 1024;

/// Inode space an extended attribute takes (`40 + name + value`, tmpfs's
/// figure for its own bookkeeping); POSIX ACLs take none, as in tmpfs:
/// at most two per inode, part of its permissions.
pub fn xattr_cost(name: &[u8], value_len: usize) -> u64 {
    if crate::acl::is_acl(name) {
        0
    } else {
        40 + name.len() as u64 + value_len as u64
    }
}

/// The inode count and the inode-space budget of one memfs.
#[derive(Debug)]
pub struct Ispace {
    /// Inodes in memory, linked or not (`Inode`'s drop counts them out).
    alive: AtomicUsize,
    /// Bytes of inode space in use against `inodes * INODE_COST`.
    space: Budget,
    /// The inode limit; `None` = unlimited.
    inodes: Option<u64>,
}

impl Ispace {
    /// A budget of `inodes` inodes (at least one, for the root), with the
    /// root's inode taken.
    pub fn new(inodes: Option<u64>) -> Ispace {
        let inodes = inodes.map(|n| n.max(1));
        let space = Budget::new(inodes.map_or(u64::MAX, |n| n.saturating_mul(INODE_COST)));
        let root = space.reserve_exact(INODE_COST);
        debug_assert!(root, "a fresh budget holds the root");
        Ispace {
            alive: AtomicUsize::new(0),
            space,
            inodes,
        }
    }

    /// Takes `bytes` of inode space, or fails with `ENOSPC` taking none.
    pub fn take(&self, bytes: u64) -> VfsResult<()> {
        if bytes == 0 || self.space.reserve_exact(bytes) {
            Ok(())
        } else {
            Err(Errno::ENOSPC)
        }
    }

    /// Gives back `bytes` taken before.
    pub fn give(&self, bytes: u64) {
        self.space.release(bytes);
    }

    /// An inode was built (its cost already taken).
    pub(crate) fn born(&self) {
        // Relaxed: a statistic; the budget is what guards memory.
        self.alive.fetch_add(1, Ordering::Relaxed);
    }

    /// An inode was dropped.
    pub(crate) fn died(&self) {
        self.alive.fetch_sub(1, Ordering::Relaxed);
    }

    /// Inodes in memory, linked or kept alive by a user after unlink.
    pub fn alive(&self) -> usize {
        self.alive.load(Ordering::Relaxed)
    }

    /// Bytes of inode space in use.
    pub fn used(&self) -> u64 {
        self.space.used()
    }

    /// Bytes of inode space free (`u64::MAX` if unlimited).
    pub fn free(&self) -> u64 {
        self.space.limit().saturating_sub(self.used())
    }

    /// The inode limit, `None` if unlimited.
    pub fn limit(&self) -> Option<u64> {
        self.inodes
    }

    /// `statfs`'s inode figures (total, free): the limit and what the free
    /// space would hold, as tmpfs reports them; unlimited, `unbounded`
    /// total less the inodes alive.
    pub fn statfs(&self, unbounded: u64) -> (u64, u64) {
        match self.inodes {
            Some(n) => (
                n,
                (n.saturating_mul(INODE_COST)).saturating_sub(self.used()) / INODE_COST,
            ),
            None => (unbounded, unbounded.saturating_sub(self.alive() as u64)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_taken_and_the_rest_fits_the_limit() {
        let s = Ispace::new(Some(3));
        assert_eq!(s.used(), INODE_COST);
        assert_eq!(s.statfs(0), (3, 2));
        s.take(INODE_COST).unwrap();
        s.take(INODE_COST - 100).unwrap();
        assert_eq!(s.statfs(0), (3, 0));
        assert_eq!(s.take(101), Err(Errno::ENOSPC));
        s.take(100).unwrap();
        assert_eq!(s.take(1), Err(Errno::ENOSPC));
        s.give(INODE_COST);
        assert_eq!(s.statfs(0), (3, 1));
        assert_eq!(s.free(), INODE_COST);
        assert_eq!(Ispace::new(None).free(), u64::MAX - INODE_COST);
        // A limit of 0 still holds the root.
        assert_eq!(Ispace::new(Some(0)).statfs(0), (1, 0));
        let u = Ispace::new(None);
        u.born();
        assert_eq!(u.statfs(100), (100, 99));
    }

    #[test]
    fn acls_cost_nothing() {
        assert_eq!(xattr_cost(b"system.posix_acl_access", 28), 0);
        assert_eq!(xattr_cost(b"user.k", 10), 56);
    }
}
