//! Reader bias: read locks with no atomic read-modify-write at all.
//!
//! A zone of a lock whose readers are not disturbed by writers is
//! *biased*: a reader then publishes its range in its own thread's record
//! (`record.rs`) with plain stores and re-checks its zone's bias word, a
//! line that only writers that can meet its range ever write. A zone is
//! the set of reads that would use one reader slot (`slot.rs`); a writer
//! covers exactly the zones it would mark, so bias is revoked where a
//! writer is and kept everywhere else. No shared line is written and no RMW or
//! store-load fence is executed; dropping the guard is one store and one
//! load on the reader's own line. This is the BRAVO idea (Dice & Kogan,
//! 2019) applied to ranges; it is not the lock-free list of Kogan, Dice and
//! Issa (there is no list of ranges at all).
//!
//! # The zone bias word
//!
//! | bits   | name   | meaning                                                |
//! |--------|--------|--------------------------------------------------------|
//! | 0      | BIASED | the zone's readers may take the biased path            |
//! | 1      | DIRTY  | revoked, but biased readers may still be inside        |
//!
//! Entries name the lock by its unique id (`RangeLock::id`, set once when
//! a zone is first biased). Neither flag ("clean"): no biased reader of the
//! zone exists and none can enter; writers covering it skip the scan.
//! Transitions:
//!
//! * clean/DIRTY -> BIASED (*re-bias*): under the queue mutex, only while no
//!   granted writer covers the zone and the inhibit time has passed.
//! * BIASED -> DIRTY (*revoke*): under the queue mutex, by a granted writer
//!   covering the zone, followed by the heavy barrier *before* the mutex is
//!   released: whoever later sees DIRTY under the mutex (or after being
//!   granted, which the mutex orders) knows the barrier is complete.
//! * DIRTY -> clean: CAS by a granted writer covering the zone whose
//!   post-barrier scan found no entry of the lock in the zone.
//!
//! A granted writer holds its range from its grant to its release, and no
//! zone it covers is re-biased meanwhile, so bias stays off there for its
//! whole tenure.
//!
//! # Why a reader and a revoking writer cannot miss each other
//!
//! Reader: `St(entry = {id, range})`, light barrier, `Ld(bias)`.
//! Writer: `St(bias = DIRTY)`, heavy barrier, `Ld(entry)` for every entry.
//!
//! The light barrier is only a compiler fence; the heavy barrier is
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which returns only after
//! every other running thread of the process has executed a full memory
//! barrier (an IPI), and threads not running pass one when scheduled. The
//! race, told from the reader's CPU: its full barrier falls either
//!
//! 1. *before* the reader's store: then the writer's `St(bias)`, globally
//!    visible before the syscall sent the IPI, is seen by the reader's later
//!    `Ld(bias)`: the reader backs out (clears its entry) and takes the
//!    slot path, where the writer's marks stop it;
//! 2. *after* the reader's load: then the store had left the store buffer
//!    before the barrier, so the writer's scan (after the syscall returned)
//!    sees the entry and waits for it, or
//! 3. *between* them: the store is drained by the barrier: case 2.
//!
//! So either the reader backs out or the writer sees it: a reader that
//! proceeds is always waited for. Its entry is stable while held, so the
//! writer reads a consistent range; a torn read can only come from an entry
//! being rewritten after the barrier, i.e. by a reader that will back out.
//!
//! Under loom, which cannot model membarrier, both barriers are
//! `fence(SeqCst)`: the same store-buffering shape, forbidden by the SC
//! fence rules. (That is stronger than the real light barrier, so the
//! models check the protocol, not the kernel's promise.)
//!
//! # Waking a sleeping writer
//!
//! A writer that spun long enough on an entry sleeps: under the queue mutex
//! it registers as a drainer of the entry and bumps the entry's `sleepers`,
//! then issues the heavy barrier and re-checks the entry. The reader's
//! release is `St(entry free)`, light barrier, `Ld(sleepers)`. The same
//! argument shows that either the writer's re-check sees the entry free (it
//! does not sleep) or the reader sees `sleepers != 0` and wakes the
//! drainers under the same mutex (no lost wakeup). One heavy barrier per
//! sleep is cheap next to a sleep.
//!
//! # Inhibit
//!
//! Revoking costs a syscall and an IPI per CPU. After a revocation that
//! took `t`, re-bias is inhibited for `INHIBIT_FACTOR * t` (BRAVO's rule),
//! so a file that keeps being written pays at most about 1 / (1 +
//! INHIBIT_FACTOR) of its time in revocations, not one per write. When
//! revocations keep coming soon after each re-bias (a steady writer), the
//! period doubles, up to `INHIBIT_MAX_NS`, so such a file settles on the
//! slot path with a revocation (and an IPI to the readers' CPUs) only every
//! few tens of milliseconds; a bias that lasts resets it. Readers on the
//! slot path look at the clock once every `REBIAS_EVERY` reads, and take
//! the mutex (`try_lock`) only once the period is over.

use crate::sync::Ordering::*;

pub(crate) const BIASED: u64 = 1;
pub(crate) const DIRTY: u64 = 2;

/// Re-bias is inhibited for this many times the cost of a revocation.
pub(crate) const INHIBIT_FACTOR: u64 = 9;
/// ... and for at least this long (nanoseconds).
pub(crate) const INHIBIT_MIN_NS: u64 = 20_000;
/// The longest inhibit period of a steadily written file (nanoseconds).
#[cfg(not(loom))]
pub(crate) const INHIBIT_MAX_NS: u64 = 50_000_000;
#[cfg(loom)]
pub(crate) const INHIBIT_MAX_NS: u64 = 0;

/// A slot-path reader considers re-biasing once per this many reads.
#[cfg(not(loom))]
pub(crate) const REBIAS_EVERY: u32 = 256;
#[cfg(loom)]
pub(crate) const REBIAS_EVERY: u32 = 1;

/// A fresh, never reused, non-zero lock id.
pub(crate) fn new_id() -> u64 {
    // A plain std atomic even under loom: only uniqueness matters, no
    // ordering is derived from it.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    assert!(id != u64::MAX, "lock ids exhausted");
    id
}

/// Nanoseconds on a process-wide monotonic clock (0 under loom: never
/// inhibited, so the models explore re-bias races).
#[cfg(not(loom))]
pub(crate) fn now_ns() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(loom)]
pub(crate) fn now_ns() -> u64 {
    0
}

/// The reader's side of the asymmetric fence: orders its entry store
/// before its next load, given the writer's heavy barrier.
#[inline(always)]
pub(crate) fn light_barrier() {
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(SeqCst);
    #[cfg(loom)]
    loom::sync::atomic::fence(SeqCst);
}

/// The writer's side: a full barrier on every running thread of the
/// process. Only called when [`available`] said yes.
pub(crate) fn heavy_barrier() {
    #[cfg(not(loom))]
    membarrier::expedited();
    #[cfg(loom)]
    loom::sync::atomic::fence(SeqCst);
}

/// Whether biased mode may be used at all (membarrier registered).
pub(crate) fn available() -> bool {
    #[cfg(not(loom))]
    return membarrier::registered();
    #[cfg(loom)]
    return true;
}

#[cfg(not(loom))]
mod membarrier {
    use std::sync::OnceLock;

    /// Diagnostic switch: `UVFS_RANGELOCK_NO_BIAS=1` keeps every lock on
    /// the slot scheme (no membarrier is registered).
    const DISABLE_ENV: &str = "UVFS_RANGELOCK_NO_BIAS";

    #[cfg(target_os = "linux")]
    mod sys {
        // From <linux/membarrier.h>.
        pub(super) const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        pub(super) const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

        pub(super) fn membarrier(cmd: libc::c_int) -> bool {
            // SAFETY: membarrier takes (cmd, flags, cpu_id) integers and
            // touches no memory of ours; a failure is reported as -1.
            unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    cmd,
                    0 as libc::c_uint,
                    0 as libc::c_int,
                ) == 0
            }
        }
    }

    pub(super) fn registered() -> bool {
        static REGISTERED: OnceLock<bool> = OnceLock::new();
        *REGISTERED.get_or_init(|| {
            if std::env::var_os(DISABLE_ENV).is_some_and(|v| v != "0") {
                return false;
            }
            #[cfg(target_os = "linux")]
            return sys::membarrier(sys::CMD_REGISTER_PRIVATE_EXPEDITED);
            #[cfg(not(target_os = "linux"))]
            return false;
        })
    }

    pub(super) fn expedited() {
        #[cfg(target_os = "linux")]
        {
            // Registered (callers checked `registered()`), so the kernel
            // cannot refuse; if it ever did we could not stay correct.
            assert!(
                sys::membarrier(sys::CMD_PRIVATE_EXPEDITED),
                "membarrier(PRIVATE_EXPEDITED) failed after registration"
            );
        }
        #[cfg(not(target_os = "linux"))]
        unreachable!("bias is never enabled without membarrier");
    }
}
