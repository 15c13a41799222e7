//! A locked shard whose oldest entry's age can be read without its lock.
//!
//! The free lists and the name cache are both split into shards, each
//! exact LRU, and both need a *global* order: recycle (or evict) the
//! oldest entry of the mount (or cache), not just of one shard. Each shard
//! therefore publishes the stamp of its least recently used entry in an
//! atomic beside its lock, rewritten on unlock whenever it changed; a
//! caller compares the shards' published stamps without taking their
//! locks, and re-checks under the lock of the one it picked (the stamp is
//! a hint: it may be stale by one critical section, which only blurs the
//! order between shards slightly).

use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};

/// [`Aged::head_stamp`] of an empty shard: older than nothing.
pub(crate) const EMPTY: u64 = u64::MAX;

/// A shard's contents that know the stamp of their oldest entry.
pub(crate) trait Aged {
    /// The least recently used entry's stamp, or [`EMPTY`].
    fn head_stamp(&self) -> u64;
}

/// A shard: its lock and its published head stamp.
pub(crate) struct AgedCell<T> {
    head_stamp: AtomicU64,
    inner: Mutex<T>,
}

impl<T: Aged> AgedCell<T> {
    pub(crate) fn new(inner: T) -> Self {
        AgedCell {
            head_stamp: AtomicU64::new(inner.head_stamp()),
            inner: Mutex::new(inner),
        }
    }

    /// Locks the shard; the guard republishes the head stamp on unlock.
    #[inline]
    pub(crate) fn lock(&self) -> AgedGuard<'_, T> {
        AgedGuard {
            g: self.inner.lock(),
            head_stamp: &self.head_stamp,
        }
    }

    /// The published stamp of the shard's oldest entry (a hint).
    #[inline]
    pub(crate) fn head_stamp(&self) -> u64 {
        // Relaxed: a hint for choosing a shard; the choice is re-validated
        // under that shard's lock.
        self.head_stamp.load(Ordering::Relaxed)
    }
}

pub(crate) struct AgedGuard<'a, T: Aged> {
    g: MutexGuard<'a, T>,
    head_stamp: &'a AtomicU64,
}

impl<T: Aged> std::ops::Deref for AgedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.g
    }
}

impl<T: Aged> std::ops::DerefMut for AgedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.g
    }
}

impl<T: Aged> Drop for AgedGuard<'_, T> {
    fn drop(&mut self) {
        let h = self.g.head_stamp();
        // Relaxed: see `AgedCell::head_stamp`.
        if self.head_stamp.load(Ordering::Relaxed) != h {
            self.head_stamp.store(h, Ordering::Relaxed);
        }
    }
}
