//! Whether a reply that hands the kernel names (LOOKUP, READDIRPLUS) may
//! have raced a batch of name invalidations.
//!
//! # The race
//! A LOOKUP reads what a name leads to, replies, and only then does the
//! kernel put the name in its dcache, on the requester's thread. A host
//! change between the read and the dcache update is invalidated by a
//! `FUSE_NOTIFY_INVAL_ENTRY` that finds nothing to drop, and the stale
//! name would live for the entry timeout. The watcher asks
//! [`EntryRace::may_have_raced`] after sending a batch's invalidations and,
//! if yes, sends them again later (`changes.rs`).
//!
//! The answer must be yes whenever a reply read the source before the
//! change: the reply's [`EntryRace::begin`] precedes its read, the change
//! precedes the watcher's question, and all four are sequentially
//! consistent, so the question sees either the reply under way or its
//! end. `tests/loom_entry_race.rs` checks that claim on every
//! interleaving.

use crate::sync::{fence, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How recently an entry reply must have ended for a batch to count as
/// raced by it: the kernel fills its dcache after our reply, on the
/// requester's thread, which may run late.
const RACE_WINDOW: Duration = Duration::from_millis(100);

/// Entry replies under way and when the last one ended, for the
/// watcher to tell whether one may have raced a batch.
pub struct EntryRace {
    replying: AtomicUsize,
    /// Nanoseconds after `epoch` at which the last reply ended.
    last_end: AtomicU64,
    epoch: Instant,
}

impl Default for EntryRace {
    fn default() -> Self {
        EntryRace {
            replying: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl EntryRace {
    /// Marks an entry-handing request (LOOKUP, READDIRPLUS) under way
    /// until the returned guard drops, after its reply is sent.
    pub fn begin(&self) -> EntryReply<'_> {
        self.replying.fetch_add(1, Ordering::SeqCst);
        // The source is read by system calls, outside the memory model:
        // only a fence orders that read after the count (the watcher's
        // twin is in `may_have_raced`). Without the pair, the watcher
        // may see no reply under way while the reply reads the source
        // from before the change: a store-buffer race.
        fence(Ordering::SeqCst);
        EntryReply(self)
    }

    /// Whether a reply is under way, or ended within [`RACE_WINDOW`]:
    /// asked after a batch's invalidations were sent. A reply whose
    /// `begin` came before the question is seen (a SeqCst fence on both
    /// sides), so a name read before the change is either in the dcache
    /// by now (and was dropped) or from a reply this answers yes for.
    pub fn may_have_raced(&self) -> bool {
        fence(Ordering::SeqCst);
        if self.replying.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let end = self.last_end.load(Ordering::SeqCst);
        end != 0 && self.now() < end.saturating_add(RACE_WINDOW.as_nanos() as u64)
    }

    fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }
}

/// See [`EntryRace::begin`].
pub struct EntryReply<'a>(&'a EntryRace);

impl Drop for EntryReply<'_> {
    fn drop(&mut self) {
        let r = self.0;
        // The end time before the count: a watcher that sees the count
        // at zero sees this reply's end (both SeqCst).
        r.last_end.fetch_max(r.now(), Ordering::SeqCst);
        r.replying.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_reply_under_way_or_just_sent_counts_as_racing() {
        let r = EntryRace::default();
        assert!(!r.may_have_raced(), "nothing replied yet");
        let g = r.begin();
        assert!(r.may_have_raced(), "under way");
        drop(g);
        assert!(r.may_have_raced(), "just ended");
        // Long ago: a batch now cannot have raced it.
        r.last_end.store(1, Ordering::SeqCst);
        std::thread::sleep(RACE_WINDOW + Duration::from_millis(10));
        assert!(!r.may_have_raced());
    }
}
