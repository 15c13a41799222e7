//! The reference word: a vnode's use count, hold count and doom flag in one
//! `AtomicU64`, so "is it free?" and "doom it if free" are single atomic
//! decisions.
//!
//! ```text
//!  63      62      61..32      31      30..0
//! +------+-------+-----------+-------+-----------+
//! |DOOMED| guard | use count | guard | hold count|
//! +------+-------+-----------+-------+-----------+
//! ```
//!
//! * `hold count` — references that pin the vnode's identity but not its
//!   activity (name-cache entries under a directory, the kernel's lookup
//!   count, cached pages). FreeBSD's `v_holdcnt`, minus the uses.
//! * `use count` — active users (open files, operations in progress).
//!   FreeBSD's `v_usecount`. Unlike FreeBSD a use does not also take a hold;
//!   "free" is simply "both counts zero", tested in one load.
//! * `guard` bits — stay zero; a count that overflows into them is caught
//!   (2^31 references to one vnode is a leak, not a workload).
//! * `DOOMED` — set exactly once, by the recycler's CAS from 0 (so never
//!   while any reference exists) or by a forced unmount. Never cleared: a
//!   doomed vnode is unreachable and dies with its last `Arc`.
//!
//! # The free transition
//!
//! Whoever moves the counts from 0 to non-zero ("unfree") or from non-zero
//! to 0 ("free") must afterwards fix the vnode's free-list membership,
//! re-reading this word; the two sides meet in a `SeqCst` Dekker handshake
//! on this word and `Vnode::slot`, so the list always ends up agreeing with
//! the word (see `freelist.rs`).

use crate::sync::{AtomicU64, Ordering};

pub(crate) const HOLD_ONE: u64 = 1;
pub(crate) const HOLD_MASK: u64 = (1 << 31) - 1;
pub(crate) const HOLD_GUARD: u64 = 1 << 31;
pub(crate) const USE_SHIFT: u32 = 32;
pub(crate) const USE_ONE: u64 = 1 << USE_SHIFT;
pub(crate) const USE_MASK: u64 = ((1 << 30) - 1) << USE_SHIFT;
pub(crate) const USE_GUARD: u64 = 1 << 62;
pub(crate) const DOOMED: u64 = 1 << 63;
/// Both counts (and their guards): zero means free.
pub(crate) const COUNTS: u64 = !DOOMED;

/// The outcome of taking a reference.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Acquired {
    /// Taken; the vnode already had references.
    Busy,
    /// Taken, and this was the 0 -> 1 transition: the caller must take the
    /// vnode off its free list.
    WasFree,
    /// Not taken: the vnode is doomed.
    Doomed,
}

/// The reference word of one vnode.
pub(crate) struct Refs(AtomicU64);

impl Refs {
    /// A new vnode starts with one use: its creator's.
    pub(crate) fn new_used() -> Self {
        Refs(AtomicU64::new(USE_ONE))
    }

    #[inline]
    pub(crate) fn load(&self) -> u64 {
        // SeqCst: one of the free-list Dekker loads (`freelist.rs`); it is
        // also Acquire: a caller that sees "free" or "doomed" sees what the
        // thread that made it so did before. (A plain load on x86.)
        self.0.load(Ordering::SeqCst)
    }

    /// Takes one reference of the given kind (`USE_ONE` or `HOLD_ONE`).
    ///
    /// One `fetch_add`, no CAS loop: if the vnode turns out doomed we take
    /// the increment back. That transient increment is harmless because a
    /// doomed word is never examined for zero again (the recycler's CAS
    /// succeeded before it, or a forced unmount has already torn it down).
    #[inline]
    pub(crate) fn acquire(&self, one: u64) -> Acquired {
        // SeqCst: the increment half of the free-list Dekker pair
        // (`freelist.rs`); it is also Acquire, pairing with the previous
        // owner's Release drop. (x86's `lock xadd` is already a full fence.)
        let prev = self.0.fetch_add(one, Ordering::SeqCst);
        if prev & DOOMED != 0 {
            self.0.fetch_sub(one, Ordering::Relaxed);
            return Acquired::Doomed;
        }
        check_overflow(prev + one);
        if prev & COUNTS == 0 {
            Acquired::WasFree
        } else {
            Acquired::Busy
        }
    }

    /// Takes another reference of a kind the caller already holds one of
    /// (or a use when it holds a hold and does not care about doom): the
    /// counts cannot be zero, so there is no free edge and no doom check.
    #[inline]
    pub(crate) fn inc(&self, one: u64) {
        // Relaxed: like `Arc::clone`, the caller's existing reference
        // already orders everything that matters.
        let prev = self.0.fetch_add(one, Ordering::Relaxed);
        check_overflow(prev + one);
    }

    /// Drops one reference of the given kind; returns the word *before*.
    ///
    /// # Panics
    /// If no reference of that kind was held: the API's guards make this
    /// impossible, so reaching it is a bug in this crate.
    #[inline]
    pub(crate) fn release(&self, one: u64) -> u64 {
        // Release: publishes this user's writes to whoever frees or reuses
        // the vnode next (their Acquire/AcqRel pairs with it). SeqCst so the
        // free transition takes part in the free-list total order too.
        let prev = self.0.fetch_sub(one, Ordering::SeqCst);
        let mask = if one == USE_ONE { USE_MASK } else { HOLD_MASK };
        assert!(
            prev & mask != 0,
            "uvfs-vnode: reference count underflow (released a reference never taken)"
        );
        prev
    }

    /// The recycler's claim: counts 0 -> DOOMED. Fails if anybody holds a
    /// reference (or the vnode is already doomed).
    #[inline]
    pub(crate) fn try_doom_free(&self) -> bool {
        // AcqRel: Acquire pairs with the last release (we are about to tear
        // the vnode down); Release orders the doom before our later writes.
        self.0
            .compare_exchange(0, DOOMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Forced unmount: doom regardless of references. Returns the word before.
    pub(crate) fn force_doom(&self) -> u64 {
        self.0.fetch_or(DOOMED, Ordering::AcqRel)
    }
}

#[inline]
fn check_overflow(word: u64) {
    if word & (HOLD_GUARD | USE_GUARD) != 0 {
        overflow();
    }
}

#[cold]
fn overflow() -> ! {
    panic!("uvfs-vnode: reference count overflow (2^30 references to one vnode: a leak)")
}

/// Use count in a word.
pub(crate) fn uses(word: u64) -> u32 {
    ((word & USE_MASK) >> USE_SHIFT) as u32
}

/// Hold count in a word.
pub(crate) fn holds(word: u64) -> u32 {
    (word & HOLD_MASK) as u32
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn transitions_report_free_edges() {
        let r = Refs::new_used();
        assert_eq!(r.acquire(HOLD_ONE), Acquired::Busy);
        let before = r.release(USE_ONE);
        assert_eq!((uses(before), holds(before)), (1, 1));
        let before = r.release(HOLD_ONE);
        assert_eq!(before & COUNTS, HOLD_ONE, "this drop made it free");
        assert_eq!(r.acquire(USE_ONE), Acquired::WasFree);
        assert!(!r.try_doom_free(), "in use: must not doom");
        r.release(USE_ONE);
        assert!(r.try_doom_free());
        assert_eq!(r.acquire(USE_ONE), Acquired::Doomed);
        assert_eq!(r.load(), DOOMED, "failed acquire left no trace");
    }

    #[test]
    #[should_panic(expected = "underflow")]
    fn release_without_reference_panics() {
        let r = Refs::new_used();
        r.release(HOLD_ONE);
    }
}
