//! [`LockState`]: a lock's fields and its release paths, the part of a
//! [`RangeLock`](crate::RangeLock) that its guards need.
//!
//! A guard's drop releases its range through here, not through
//! `RangeLock`, so the guards (`guard.rs`) depend on this module only and
//! the acquisition paths (`lock.rs`) sit above both. `RangeLock` is a
//! newtype of `LockState`: a guard's `&LockState` is the same pointer as
//! the `&RangeLock` it was taken from, and every release path is a direct,
//! inlinable call.

use crate::parker::notify_all;
use crate::queue::Queue;
use crate::range::ByteRange;
use crate::record::Entry;
use crate::slot::{Slot, Slots};
use crate::sync::{lock, AtomicPtr, AtomicU64, Mutex, Ordering::*};
use crossbeam_utils::CachePadded;

/// The state of one [`RangeLock`](crate::RangeLock).
pub(crate) struct LockState {
    /// Null until the first reader; then a `Box<Slots>` owned by the lock,
    /// freed in `Drop`, never replaced. It only appears while no writer is
    /// granted (checked under `queue`), so a granted writer sees the same
    /// value from its grant to its release.
    slots: AtomicPtr<Slots>,
    /// The lock's unique id, which biased readers' record entries name
    /// (`bias.rs`): 0 until a zone is first biased, then fixed. Read-only
    /// after that, so it shares the read-mostly line with `slots`. The
    /// bias flags themselves live in the slots, one per zone.
    pub(crate) id: AtomicU64,
    /// No re-bias before this time (`bias::now_ns`). Written under the
    /// queue mutex by revocations only; read without it by slot-path
    /// readers, so they touch the mutex only when a re-bias may succeed.
    pub(crate) inhibit_until: AtomicU64,
    /// On its own cache line: writers write the mutex and the queue on
    /// every lock and unlock, and readers load `slots` on every read. Sharing
    /// one line cost readers half their throughput next to one writer.
    pub(crate) queue: CachePadded<Mutex<Queue>>,
}

impl LockState {
    /// An unlocked lock with no slot table.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        LockState {
            slots: AtomicPtr::new(std::ptr::null_mut()),
            id: AtomicU64::new(0),
            inhibit_until: AtomicU64::new(0),
            queue: CachePadded::new(Mutex::new(Queue::new())),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        LockState {
            slots: AtomicPtr::new(std::ptr::null_mut()),
            id: AtomicU64::new(0),
            inhibit_until: AtomicU64::new(0),
            queue: CachePadded::new(Mutex::new(Queue::new())),
        }
    }

    /// The slot table, if a reader has allocated it.
    #[inline]
    pub(crate) fn slots(&self) -> Option<&Slots> {
        // Acquire: pairs with the Release in `alloc_slots`.
        let p = self.slots.load(Acquire);
        // SAFETY:
        // - `p` is null or came from `Box::into_raw` in `alloc_slots`;
        // - it is never replaced or freed before `Drop`, which has `&mut
        //   self`, so the table outlives this `&self` borrow;
        // - `Slots` is only used through shared references (atomics).
        unsafe { p.as_ref() }
    }

    /// Installs the slot table. Only called under the queue mutex with no
    /// table yet, so no other thread races to install one.
    pub(crate) fn alloc_slots(&self) {
        let table = Box::into_raw(Box::new(Slots::new()));
        // Release: pairs with the Acquire in `slots()`.
        self.slots.store(table, Release);
    }

    /// Biased reader release, slow part: wake writers asleep on `entry`.
    #[cold]
    pub(crate) fn wake_biased(&self, entry: &Entry) {
        let mut wake = Vec::new();
        lock(&self.queue).take_drainers(entry.key(), &mut wake);
        notify_all(wake);
    }

    /// Fast reader release, slow part: wake the writers sleeping on `slot`.
    #[cold]
    pub(crate) fn wake_drainers(&self, slot: &Slot) {
        let mut wake = Vec::new();
        {
            let mut q = lock(&self.queue);
            // DRAIN is set and cleared only under this mutex, with the
            // sleepers' registration: clearing it here and waking every
            // sleeper on the slot cannot strand one. A sleeper that
            // registered after the count rose again is woken early; it looks
            // again and sleeps again.
            slot.clear_drain();
            q.take_drainers(slot.key(), &mut wake);
        }
        notify_all(wake);
    }

    /// Queued (slow-path) release: leave the queue, waking whoever became
    /// grantable.
    #[cold]
    pub(crate) fn release_slow(&self, id: u64) {
        let mut wake = Vec::new();
        lock(&self.queue).release(id, &mut wake);
        notify_all(wake);
    }

    /// Writer release: reopen the slots, then leave the queue.
    pub(crate) fn release_write(&self, w: &ByteRange, id: u64) {
        if let Some(slots) = self.slots() {
            slots.for_writer(w, Slot::unmark);
        }
        self.release_slow(id);
    }
}

impl Drop for LockState {
    fn drop(&mut self) {
        let p = self.slots.load(Acquire);
        if !p.is_null() {
            // SAFETY:
            // - `p` came from `Box::into_raw` in `alloc_slots` and was
            //   installed once;
            // - `&mut self` proves no guard (they borrow the lock) and no
            //   other thread still uses the table.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
