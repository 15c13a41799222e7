//! RAII guards: dropping one releases its range.
//!
//! A guard holds the lock's [`LockState`], which has the release paths, not
//! the [`RangeLock`](crate::RangeLock) that hands guards out.

use crate::range::ByteRange;
use crate::record::Entry;
use crate::slot::Slot;
use crate::state::LockState;

/// How a read guard holds its range.
pub(crate) enum ReadHold<'a> {
    /// An empty range: holds nothing.
    Empty,
    /// Published in this thread's record (the biased fast path).
    Biased(&'static Entry),
    /// Counted in a reader slot (the fast path when bias is off).
    Fast(&'a Slot),
    /// Granted on the queue, under this id.
    Slow(u64),
}

/// A shared lock on a byte range; released on drop.
#[must_use = "the range is unlocked as soon as the guard is dropped"]
pub struct ReadGuard<'a> {
    lock: &'a LockState,
    hold: ReadHold<'a>,
}

impl<'a> ReadGuard<'a> {
    #[inline]
    pub(crate) fn new(lock: &'a LockState, hold: ReadHold<'a>) -> Self {
        ReadGuard { lock, hold }
    }

    /// True when the range was taken on the fast path (diagnostics).
    pub fn is_fast(&self) -> bool {
        matches!(self.hold, ReadHold::Fast(_) | ReadHold::Biased(_))
    }

    /// True when the range was taken on the biased path (no atomic RMW).
    pub fn is_biased(&self) -> bool {
        matches!(self.hold, ReadHold::Biased(_))
    }
}

impl Drop for ReadGuard<'_> {
    /// The biased release inline, the others out of line, for the reason
    /// given at `RangeLock::acquire_read` (`lock.rs`).
    #[inline]
    fn drop(&mut self) {
        if let ReadHold::Biased(entry) = self.hold {
            if entry.leave() {
                self.lock.wake_biased(entry);
            }
        } else {
            self.release_unbiased();
        }
    }
}

impl ReadGuard<'_> {
    #[inline(never)]
    fn release_unbiased(&self) {
        match self.hold {
            ReadHold::Empty | ReadHold::Biased(_) => {}
            ReadHold::Fast(slot) => {
                if slot.leave() {
                    self.lock.wake_drainers(slot);
                }
            }
            ReadHold::Slow(id) => self.lock.release_slow(id),
        }
    }
}

/// An exclusive lock on a byte range; released on drop.
#[must_use = "the range is unlocked as soon as the guard is dropped"]
pub struct WriteGuard<'a> {
    lock: &'a LockState,
    range: ByteRange,
    /// The queue id; `None` for an empty range.
    id: Option<u64>,
}

impl<'a> WriteGuard<'a> {
    pub(crate) fn new(lock: &'a LockState, range: ByteRange, id: Option<u64>) -> Self {
        WriteGuard { lock, range, id }
    }

    /// The bytes this guard holds exclusively.
    pub fn range(&self) -> ByteRange {
        self.range
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.lock.release_write(&self.range, id);
        }
    }
}

impl std::fmt::Debug for ReadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadGuard")
            .field("fast", &self.is_fast())
            .finish()
    }
}

impl std::fmt::Debug for WriteGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteGuard")
            .field("range", &self.range)
            .finish()
    }
}
