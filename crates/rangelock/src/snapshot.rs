//! [`Snapshot`]: a diagnostic view of everything a lock holds and awaits.

use crate::bias::BIASED;
use crate::queue::Mode;
use crate::range::ByteRange;
use crate::record;
use crate::slot::Slot;
use crate::state::LockState;
use crate::sync::{lock, Ordering::*};

/// What a snapshot shows of one holder or waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The bytes held or waited for.
    pub range: ByteRange,
    /// Whether the holder reads or writes.
    pub mode: Mode,
    /// How many identical holders this stands for (fast readers share).
    pub count: usize,
}

/// A diagnostic view of a lock. Not atomic: fast readers are read from the
/// slots without the mutex, so take it while the lock is quiet (tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Holders that own their range now, fast readers included.
    pub granted: Vec<Holder>,
    /// Queued requests in the order they will be considered.
    pub waiting: Vec<Holder>,
    /// Writers asleep until a slot's readers leave.
    pub draining: usize,
    /// Whether the reader slot table has been allocated.
    pub slots_allocated: bool,
    /// Whether new readers may take the biased path in some zone.
    pub biased: bool,
}

impl LockState {
    /// The queue under its mutex, then the biased readers' records and the
    /// slots without it.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let q = lock(&self.queue);
        let mut snap = Snapshot {
            granted: q
                .granted()
                .map(|(range, mode)| Holder {
                    range,
                    mode,
                    count: 1,
                })
                .collect(),
            waiting: q
                .waiting()
                .map(|(range, mode)| Holder {
                    range,
                    mode,
                    count: 1,
                })
                .collect(),
            draining: q.drainers(),
            slots_allocated: false,
            biased: self
                .slots()
                .is_some_and(|s| s.all().any(|z| z.zone() & BIASED != 0)),
        };
        drop(q);
        let id = self.id.load(Acquire);
        if id != 0 {
            for e in record::entries().filter(|e| e.names(id)) {
                add_shared(&mut snap.granted, e.range(), 1);
            }
        }
        if let Some(slots) = self.slots() {
            snap.slots_allocated = true;
            for (range, count) in slots.all().filter_map(Slot::holders) {
                add_shared(&mut snap.granted, range, count);
            }
        }
        snap
    }
}

/// Adds `count` fast readers of `range` to a snapshot, merging with fast
/// readers of the same range already listed.
fn add_shared(granted: &mut Vec<Holder>, range: ByteRange, count: usize) {
    match granted
        .iter_mut()
        .find(|h| h.range == range && h.mode == Mode::Shared)
    {
        Some(h) => h.count += count,
        None => granted.push(Holder {
            range,
            mode: Mode::Shared,
            count,
        }),
    }
}
