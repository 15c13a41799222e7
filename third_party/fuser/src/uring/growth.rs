//! How many entries a queue may have: its first [`PER_QUEUE`] are its own;
//! past them it borrows from one pool shared by every queue of the process
//! ([`POOL`]).
//!
//! Why a pool: a reply held back (a parked lock wait) keeps its entry
//! until the lock goes, so a queue's entries bound how many waits its
//! CPU's callers can have at once, and a file system that holds replies
//! refuses waits past that (uvfs answers `ENOLCK`) rather than take the
//! entries every other request of that CPU needs. Processes queued on one
//! lock gather on whatever CPU they ran on, often one: with 64 entries a
//! queue, 120 processes waiting on a few ranges of one file from one CPU
//! had half their waits refused, where a local file system lets them all
//! wait. Each entry costs a memfd (in the server, and in its supervisor)
//! and an entry the kernel keeps until the connection ends (FUSE has no
//! command to take one back), so the growth is bounded for the whole
//! process, not per CPU: the fds kept outside a server's file budget stay
//! the same on a machine of 2 CPUs or 200.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

/// Entries a queue may have without borrowing.
pub(super) const PER_QUEUE: usize = 64;
/// Entries all queues together may borrow past [`PER_QUEUE`].
pub(super) const POOL: usize = 512;

/// Entries borrowed now, by every queue of the process.
static BORROWED: AtomicUsize = AtomicUsize::new(0);

/// Borrows an entry from the pool; false if none is left. `forced` takes
/// one regardless: an entry that already exists (a predecessor's, taken
/// over), which must be counted, not refused.
pub(super) fn borrow(forced: bool) -> bool {
    if forced {
        BORROWED.fetch_add(1, Relaxed);
        return true;
    }
    BORROWED
        .fetch_update(Relaxed, Relaxed, |b| (b < POOL).then_some(b + 1))
        .is_ok()
}

/// Gives `n` borrowed entries back (their queue ended).
pub(super) fn give_back(n: usize) {
    let _ = BORROWED.fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_sub(n)));
}

/// The most entries a queue that has `len` could have now.
pub(super) fn capacity(len: usize) -> usize {
    len.max(PER_QUEUE) + POOL.saturating_sub(BORROWED.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test only: the pool is the process's, and tests run in threads
    // of one process.
    #[test]
    fn the_pool_lends_up_to_its_size_and_takes_entries_back() {
        assert_eq!(capacity(0), PER_QUEUE + POOL);
        assert_eq!(capacity(PER_QUEUE + 10), PER_QUEUE + 10 + POOL);
        let lent = (0..POOL + 5).filter(|_| borrow(false)).count();
        assert_eq!(lent, POOL);
        assert_eq!(capacity(PER_QUEUE), PER_QUEUE);
        assert_eq!(capacity(PER_QUEUE + POOL), PER_QUEUE + POOL);
        // Entries taken over are counted past the pool's size.
        assert!(borrow(true));
        assert!(!borrow(false));
        give_back(1);
        assert!(!borrow(false));
        give_back(3);
        assert_eq!(capacity(PER_QUEUE), PER_QUEUE + 3);
        assert!(borrow(false));
        give_back(POOL + 10);
        assert_eq!(capacity(PER_QUEUE), PER_QUEUE + POOL);
    }
}
