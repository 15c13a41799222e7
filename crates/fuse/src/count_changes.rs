//! Which nodes' kernel counts changed since a moment: what a live
//! upgrade that copied the node table while still serving (`upgrade/`,
//! "Nodes sent ahead") must send again once the request loops are parked,
//! instead of walking a million vnodes while every request waits.
//!
//! # The race it closes
//! The copy walks the vnode table reading each node's count while
//! requests go on changing counts. A change must end up either in what
//! the walk read or in the list of changed nodes, never in neither:
//!
//! - the walk: `start` (the flag set), then each count read;
//! - a change: its count written, then [`changed`](CountChanges::changed)
//!   reads the flag and, if set, records the node.
//!
//! That is a store-then-load on each side (Dekker's pattern): with plain
//! orderings both loads may read the old values (the walk the count
//! before the change, the change the flag before `start`), and the
//! change would be lost. A `SeqCst` fence on each side between its store
//! and its load forbids that: of the two fences, the one first in their
//! single total order makes its side's store visible to the other side's
//! load (model: `tests/loom_count_changes.rs`). The change's fence is
//! paid on every count change (a few cycles beside the locked increment
//! before it); the list's lock only while a copy is under way.

use crate::sync::{fence, AtomicUsize, Ordering};
#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// The nodes whose counts changed since [`start`](Self::start).
#[derive(Default)]
pub struct CountChanges {
    /// 1 while changes are recorded.
    on: AtomicUsize,
    /// Node ids recorded, in the order changed, with repeats.
    ids: Mutex<Vec<u64>>,
}

impl CountChanges {
    /// Records every count change from now on; a read of a count made
    /// after this returns sees each change not recorded.
    pub fn start(&self) {
        self.list().clear();
        self.on.store(1, Ordering::Relaxed);
        // Orders the flag before the caller's reads of counts (module
        // doc).
        fence(Ordering::SeqCst);
    }

    /// After the count of node `id` changed (the change already made).
    pub fn changed(&self, id: u64) {
        // Orders the change before the flag's read (module doc).
        fence(Ordering::SeqCst);
        if self.on.load(Ordering::Relaxed) != 0 {
            self.list().push(id);
        }
    }

    /// Stops recording; the nodes recorded, sorted, each once. Called
    /// with the request loops parked, no change is missed; called while
    /// they run (a copy given up), a change racing it may be recorded
    /// after, which the next `start` clears.
    pub fn stop(&self) -> Vec<u64> {
        self.on.store(0, Ordering::Relaxed);
        let mut ids = std::mem::take(&mut *self.list());
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn list(&self) -> impl std::ops::DerefMut<Target = Vec<u64>> + '_ {
        // A panic while pushing an id leaves a list of ids: still good.
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_changes_between_start_and_stop_are_recorded_each_once() {
        let c = CountChanges::default();
        c.changed(1);
        c.start();
        for id in [9, 4, 9, 7, 4] {
            c.changed(id);
        }
        assert_eq!(c.stop(), vec![4, 7, 9]);
        c.changed(5);
        assert!(c.stop().is_empty());
        // A change recorded after a stop that raced it goes at the next
        // start.
        c.start();
        c.changed(3);
        c.stop();
        c.on.store(1, Ordering::Relaxed);
        c.changed(8);
        c.on.store(0, Ordering::Relaxed);
        c.start();
        c.changed(2);
        assert_eq!(c.stop(), vec![2]);
    }
}
