//! Whether a reply that hands the kernel names (LOOKUP, READDIRPLUS) may
//! have raced a batch of name invalidations in the same directory.
//!
//! # The race
//! A LOOKUP reads what a name leads to, replies, and only then does the
//! kernel put the name in its dcache, on the requester's thread. A host
//! change between the read and the dcache update is invalidated by a
//! `FUSE_NOTIFY_INVAL_ENTRY` that finds nothing to drop, and the stale
//! name would live for the entry timeout. The watcher asks
//! [`EntryRace::may_have_raced`] about each directory of a batch after
//! sending its invalidations and, for a yes, sends that directory's
//! invalidations again later (`changes.rs`).
//!
//! The answer must be yes whenever a reply about that directory read the
//! source before the change: the reply's [`EntryRace::begin`] precedes
//! its read, the change precedes the watcher's question, and all four
//! are sequentially consistent, so the question sees either the reply
//! under way or its end. `tests/loom_entry_race.rs` checks that claim on
//! every interleaving.
//!
//! # Per directory
//! A reply can only carry names of the directory it is about (a LOOKUP's
//! parent, a READDIRPLUS's directory), so only replies about a batch's
//! directory can have raced its names there. Replies are counted in
//! [`SLOTS`] slots chosen by the directory's node id: directories that
//! share a slot answer for each other, which costs a needless re-send,
//! never a missed one. A re-send is not free: it drops the directory's
//! cached listing again and waits for the directory's lock, so replies
//! elsewhere on the mount (another directory being walked) should not
//! cause one.

use crate::sync::{fence, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How recently an entry reply must have ended for a batch to count as
/// raced by it: the kernel fills its dcache after our reply, on the
/// requester's thread, which may run late.
const RACE_WINDOW: Duration = Duration::from_millis(100);

/// Slots replies are counted in, by directory (a power of two).
pub const SLOTS: usize = 64;

/// Entry replies about the directories of one slot.
#[derive(Default)]
struct Slot {
    replying: AtomicUsize,
    /// Nanoseconds after `epoch` at which the last reply ended.
    last_end: AtomicU64,
}

/// Entry replies under way and when the last one ended, per directory
/// slot, for the watcher to tell whether one may have raced a batch.
pub struct EntryRace {
    slots: Box<[Slot]>,
    epoch: Instant,
}

impl Default for EntryRace {
    fn default() -> Self {
        EntryRace {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            epoch: Instant::now(),
        }
    }
}

/// The slot of directory node id `dir` (Fibonacci hashing: consecutive
/// node ids, the common case, spread over every slot).
pub fn slot_of(dir: u64) -> usize {
    (dir.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

impl EntryRace {
    /// Marks an entry-handing request (LOOKUP, READDIRPLUS) about
    /// directory node id `dir` under way until the returned guard drops,
    /// after its reply is sent.
    pub fn begin(&self, dir: u64) -> EntryReply<'_> {
        let slot = &self.slots[slot_of(dir)];
        slot.replying.fetch_add(1, Ordering::SeqCst);
        // The source is read by system calls, outside the memory model:
        // only a fence orders that read after the count (the watcher's
        // twin is in `may_have_raced`). Without the pair, the watcher
        // may see no reply under way while the reply reads the source
        // from before the change: a store-buffer race.
        fence(Ordering::SeqCst);
        EntryReply { race: self, slot }
    }

    /// Whether a reply about directory node id `dir` (or one sharing its
    /// slot) is under way, or ended within [`RACE_WINDOW`]: asked after
    /// a batch's invalidations were sent. A reply whose `begin` came
    /// before the question is seen (a SeqCst fence on both sides), so a
    /// name read before the change is either in the dcache by now (and
    /// was dropped) or from a reply this answers yes for.
    pub fn may_have_raced(&self, dir: u64) -> bool {
        fence(Ordering::SeqCst);
        let slot = &self.slots[slot_of(dir)];
        if slot.replying.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let end = slot.last_end.load(Ordering::SeqCst);
        end != 0 && self.now() < end.saturating_add(RACE_WINDOW.as_nanos() as u64)
    }

    fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).max(1)
    }
}

/// See [`EntryRace::begin`].
pub struct EntryReply<'a> {
    race: &'a EntryRace,
    slot: &'a Slot,
}

impl Drop for EntryReply<'_> {
    fn drop(&mut self) {
        // The end time before the count: a watcher that sees the count
        // at zero sees this reply's end (both SeqCst).
        self.slot
            .last_end
            .fetch_max(self.race.now(), Ordering::SeqCst);
        self.slot.replying.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_reply_under_way_or_just_sent_counts_as_racing() {
        let r = EntryRace::default();
        assert!(!r.may_have_raced(7), "nothing replied yet");
        let g = r.begin(7);
        assert!(r.may_have_raced(7), "under way");
        drop(g);
        assert!(r.may_have_raced(7), "just ended");
        // Long ago: a batch now cannot have raced it.
        r.slots[slot_of(7)].last_end.store(1, Ordering::SeqCst);
        std::thread::sleep(RACE_WINDOW + Duration::from_millis(10));
        assert!(!r.may_have_raced(7));
    }

    #[test]
    fn only_replies_about_the_same_directory_count() {
        let r = EntryRace::default();
        // Consecutive node ids (a tree's directories) fall in slots of
        // their own.
        let slots: std::collections::HashSet<_> = (1..=SLOTS as u64).map(slot_of).collect();
        assert!(slots.len() > SLOTS / 2, "{} slots used", slots.len());
        assert_ne!(slot_of(1), slot_of(2));
        let g = r.begin(1);
        assert!(r.may_have_raced(1));
        assert!(!r.may_have_raced(2), "a reply about another directory");
        drop(g);
        assert!(r.may_have_raced(1), "just ended");
        assert!(!r.may_have_raced(2));
        // Directories sharing a slot answer for each other.
        let twin = (3..)
            .find(|&d| slot_of(d) == slot_of(1))
            .expect("some id shares a slot");
        assert!(r.may_have_raced(twin));
    }
}
