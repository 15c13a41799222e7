//! The space budget behind `--size` (and, counted in bytes, the inode
//! budget behind `--inodes`, `ispace.rs`).
//!
//! # What is counted
//! For `--size`, data pages only: each allocated 4 KiB page of a regular
//! file costs one unit; holes cost nothing. Metadata (inodes, names,
//! xattrs) is bounded by the inode budget instead, as in tmpfs, whose
//! `size=` limit also counts pages and `nr_inodes` the rest.
//!
//! # Why reservations
//! A write reserves the pages it needs before touching any file data, so
//! running out of space fails the write (or shortens it) without changing
//! what was already written: nothing is allocated and then rolled back.

use std::sync::atomic::{AtomicU64, Ordering};

/// Units (pages, or bytes of inode space) in use against a limit;
/// shared by every file of one memfs.
#[derive(Debug)]
pub struct Budget {
    /// Maximum pages (`u64::MAX` = unlimited). Immutable.
    limit: u64,
    /// Pages reserved now. Only `try_reserve` (CAS loop, never past
    /// `limit`) increases it; `release` gives pages back.
    used: AtomicU64,
}

impl Budget {
    /// A budget of `limit` pages.
    pub fn new(limit: u64) -> Budget {
        Budget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// Reserves up to `want` pages and returns how many it got (fewer only
    /// when the limit is reached).
    pub fn try_reserve(&self, want: u64) -> u64 {
        // Relaxed: the count guards no other memory; each page's contents
        // are published by the page map's lock.
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let grant = want.min(self.limit.saturating_sub(cur));
            if grant == 0 {
                return 0;
            }
            match self.used.compare_exchange_weak(
                cur,
                cur + grant,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(now) => cur = now,
            }
        }
    }

    /// Reserves exactly `want` pages or none.
    pub fn reserve_exact(&self, want: u64) -> bool {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            if self.limit.saturating_sub(cur) < want {
                return false;
            }
            match self.used.compare_exchange_weak(
                cur,
                cur + want,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Gives `n` reserved pages back.
    pub fn release(&self, n: u64) {
        if n > 0 {
            let before = self.used.fetch_sub(n, Ordering::Relaxed);
            debug_assert!(before >= n, "budget released more than reserved");
        }
    }

    /// Units in use.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit in units (`u64::MAX` = unlimited).
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_up_to_the_limit() {
        let b = Budget::new(10);
        assert_eq!(b.try_reserve(4), 4);
        assert_eq!(b.try_reserve(10), 6);
        assert_eq!(b.try_reserve(1), 0);
        assert!(!b.reserve_exact(1));
        b.release(3);
        assert!(!b.reserve_exact(4));
        assert!(b.reserve_exact(3));
        assert_eq!(b.used(), 10);
    }
}
