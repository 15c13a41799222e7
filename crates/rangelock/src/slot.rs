//! Reader slots: where fast-path readers announce themselves.
//!
//! A lock owns (once any reader has come) a small table of cache-padded
//! slots. A reader whose range fits in one page registers in the *narrow*
//! slot of that page (`page % NARROW`); one that spans 2..=`WIDE_PAGES`
//! pages registers in the *wide* slot of its first page's block
//! (`(first_page / WIDE_PAGES) % WIDE`). Longer or unbounded reads never use
//! a slot. A slot holds readers of **one exact range** at a time (with a
//! count), so a writer can tell precisely whether the readers in a slot
//! overlap it: no false conflicts, hence no deadlock for a thread that reads
//! `[0,100)` and then writes `[200,300)` of the same page.
//!
//! Disjoint readers on different pages touch different cache lines, and a
//! reader that repeats its range (readseek) rewrites nothing but the count
//! in its own slot: its fast path is one load and one CAS to take the lock,
//! one `fetch_sub` to drop it, all on a line no other page's reader writes.
//!
//! # Readers against writers
//!
//! A granted writer *marks* every slot an overlapping fast reader could be
//! in (`WRITERS += 1`). A reader only enters a slot with a CAS that expects
//! `WRITERS == 0`, so on each slot's single modification order either the
//! reader's CAS comes first (the writer's mark then sees the reader count
//! and waits for it to drain) or the mark comes first (the reader's CAS
//! fails and it takes the slow path, where the writer is on the list). No
//! fence and no second location is involved, unlike a Dekker handshake.
//! While a slot is marked its count can only fall, so a writer waits at
//! most for the readers that were already inside: new readers cannot
//! starve it.
//!
//! # Bias zones
//!
//! Each slot also carries the *bias* of its zone (`bias.rs`): the readers
//! that would use this slot take the biased path while it is on. Bias is
//! per zone, not per lock, so that a writer revokes only the zones its
//! range can meet (`Slots::for_writer`, the same set it marks): readers of
//! other pages stay biased and never see a line the writer writes. The
//! zone word shares the slot's line, which only this zone's readers and
//! writers touch.

use crate::bias::{BIASED, DIRTY};
use crate::range::ByteRange;
use crate::sync::{AtomicU64, Ordering::*};
use crossbeam_utils::CachePadded;

/// Narrow slots (one-page readers). Sequential pages never collide within
/// this many pages, so up to this many disjoint page readers scale.
#[cfg(not(loom))]
pub(crate) const NARROW: usize = 16;
#[cfg(loom)]
pub(crate) const NARROW: usize = 2;

/// Wide slots (readers spanning 2..=WIDE_PAGES pages).
#[cfg(not(loom))]
pub(crate) const WIDE: usize = 4;
#[cfg(loom)]
pub(crate) const WIDE: usize = 1;

/// log2 of the most pages a wide fast-path reader may span (32 pages:
/// 128 KiB).
#[cfg(not(loom))]
pub(crate) const WIDE_SHIFT: u32 = 5;
#[cfg(loom)]
pub(crate) const WIDE_SHIFT: u32 = 1;
pub(crate) const WIDE_PAGES: u64 = 1 << WIDE_SHIFT;

// The slot state word, bit by bit (low to high):
//
// | bits   | name    | meaning                                               |
// |--------|---------|-------------------------------------------------------|
// | 0..20  | READERS | fast readers holding `range` through this slot        |
// | 20..36 | WRITERS | granted writers that marked this slot                 |
// | 36     | BUSY    | a reader owns the slot and is rewriting `range`       |
// | 37     | DRAIN   | a writer sleeps until READERS reaches 0 (wake it)     |
// | 38..64 | GEN     | bumped on every claim: validates a racy `range` read  |
//
// Invariants:
// - `range` changes only while BUSY is set, and BUSY is set only by a CAS
//   from READERS == 0 && WRITERS == 0 && !BUSY. So while READERS > 0 or
//   WRITERS > 0 the range is stable, and READERS counts readers of exactly
//   that range.
// - READERS only grows while WRITERS == 0 (the entering CAS expects it).
// - DRAIN is set and cleared only under the lock's mutex, together with the
//   registration of the sleeping writers (see `lock.rs`).
const READERS_MASK: u64 = (1 << 20) - 1;
const ONE_READER: u64 = 1;
const WRITERS_SHIFT: u32 = 20;
const WRITERS_MASK: u64 = ((1 << 16) - 1) << WRITERS_SHIFT;
const ONE_WRITER: u64 = 1 << WRITERS_SHIFT;
const BUSY: u64 = 1 << 36;
const DRAIN: u64 = 1 << 37;
const ONE_GEN: u64 = 1 << 38;

/// One reader slot: its state word and the range its readers hold, and
/// the bias of its zone.
pub(crate) struct Slot {
    state: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    /// The zone's bias flags (`bias::BIASED`, `bias::DIRTY`; see
    /// `bias.rs`). Loaded by every biased read of the zone; written only
    /// under the lock's mutex (re-bias, revoke) and by the DIRTY -> clean
    /// CAS of a granted writer covering the zone.
    bias: AtomicU64,
}

/// What a revoking writer did to one zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Revoke {
    /// The zone was biased; now DIRTY (the caller owes a heavy barrier).
    Revoked,
    /// Already revoked, but biased readers may still be inside: scan.
    Dirty,
    /// No biased reader of the zone can exist.
    Clean,
}

/// What a writer finds in a slot it has marked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Blocking {
    /// No reader it must wait for.
    Clear,
    /// A reader is rewriting the range; look again in a moment.
    Busy,
    /// Readers of an overlapping range are inside: wait for them to leave.
    Overlap,
}

impl Slot {
    fn new() -> Self {
        Slot {
            state: AtomicU64::new(0),
            // An empty range: matches no real request until first claimed.
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            bias: AtomicU64::new(0),
        }
    }

    /// The zone's bias flags.
    #[inline]
    pub(crate) fn zone(&self) -> u64 {
        // Acquire: pairs with the Release of the re-bias, which the queue
        // mutex orders after every earlier writer of the zone released.
        self.bias.load(Acquire)
    }

    /// Under the lock's mutex, with no granted writer covering the zone:
    /// biased readers may enter.
    pub(crate) fn rebias_zone(&self) {
        // Release: pairs with readers' Acquire in `zone`; publishes the
        // lock id stored before it.
        self.bias.store(BIASED, Release);
    }

    /// Under the lock's mutex, by a granted writer covering the zone.
    pub(crate) fn revoke_zone(&self) -> Revoke {
        let z = self.bias.load(Acquire);
        if z & BIASED != 0 {
            // SeqCst (with the heavy barrier after it): the writer's half
            // of the store-buffering pattern in `bias.rs`.
            self.bias.store(DIRTY, SeqCst);
            Revoke::Revoked
        } else if z & DIRTY != 0 {
            Revoke::Dirty
        } else {
            Revoke::Clean
        }
    }

    /// A granted writer covering the zone found no biased reader of it
    /// after a completed heavy barrier: later writers need not scan. The
    /// zone cannot be re-biased while that writer is granted.
    pub(crate) fn clean_zone(&self) {
        let _ = self.bias.compare_exchange(DIRTY, 0, Relaxed, Relaxed);
    }

    /// Reader fast path: enters the slot holding `r` for reading, or says
    /// the caller must take the slow path (a writer marked the slot, or
    /// readers of another range are inside).
    #[inline]
    pub(crate) fn try_enter(&self, r: &ByteRange) -> bool {
        // Acquire: pairs with the Release of the last claim (so `start` and
        // `end` below are at least that claim's) and of writers' unmarks.
        let mut s = self.state.load(Acquire);
        loop {
            if s & (WRITERS_MASK | BUSY) != 0 || s & READERS_MASK == READERS_MASK {
                return false;
            }
            // Racy reads, validated by the CAS: if the slot was reclaimed in
            // between, GEN moved and the CAS fails.
            let same = self.start.load(Relaxed) == r.start() && self.end.load(Relaxed) == r.end();
            if same {
                // Acquire on success: pairs with writers' Release unmark, so
                // their data writes are visible to our read.
                match self
                    .state
                    .compare_exchange_weak(s, s + ONE_READER, Acquire, Acquire)
                {
                    Ok(_) => return true,
                    Err(now) => s = now,
                }
            } else if s & READERS_MASK != 0 {
                return false;
            } else {
                let claimed = s.wrapping_add(ONE_GEN) | BUSY;
                match self
                    .state
                    .compare_exchange_weak(s, claimed, Acquire, Acquire)
                {
                    Ok(_) => {
                        self.start.store(r.start(), Relaxed);
                        self.end.store(r.end(), Relaxed);
                        // Clear BUSY and count ourselves in one step. READERS
                        // is 0 and only we may change it while BUSY, so the
                        // xor sets bit 0 without carry; writers may have
                        // marked meanwhile: they wait for BUSY to clear and
                        // then see us. Release publishes `start`/`end`.
                        self.state.fetch_xor(BUSY | ONE_READER, Release);
                        return true;
                    }
                    Err(now) => s = now,
                }
            }
        }
    }

    /// Reader release. Returns true when this was the last reader and a
    /// writer sleeps on the slot (the caller must wake it, `#[cold]`).
    #[inline]
    pub(crate) fn leave(&self) -> bool {
        // Release: our reads happen before a writer that sees the count at 0
        // (its Acquire load in `blocking`) writes.
        let prev = self.state.fetch_sub(ONE_READER, Release);
        debug_assert!(prev & READERS_MASK != 0, "slot reader underflow");
        prev & DRAIN != 0 && prev & READERS_MASK == ONE_READER
    }

    /// Writer: stop new readers entering this slot.
    pub(crate) fn mark(&self) {
        // AcqRel: orders against readers' entering CAS on this word; the
        // verdict itself is taken later by `blocking`.
        let prev = self.state.fetch_add(ONE_WRITER, AcqRel);
        assert!(
            prev & WRITERS_MASK != WRITERS_MASK,
            "slot writer count overflow"
        );
    }

    /// Writer release: let readers in again (if no other writer marks it).
    pub(crate) fn unmark(&self) {
        // Release: our data writes happen before any reader whose Acquire
        // CAS sees WRITERS == 0 again.
        let prev = self.state.fetch_sub(ONE_WRITER, Release);
        debug_assert!(prev & WRITERS_MASK != 0, "slot writer underflow");
    }

    /// Writer, after `mark`: must it wait for this slot's readers?
    pub(crate) fn blocking(&self, w: &ByteRange) -> Blocking {
        // Acquire: pairs with readers' Release in `leave` (their reads are
        // done) and with the claim's Release (the range is published).
        let s = self.state.load(Acquire);
        if s & BUSY != 0 {
            return Blocking::Busy;
        }
        if s & READERS_MASK == 0 {
            return Blocking::Clear;
        }
        // Stable while READERS > 0 (invariant above).
        let r = ByteRange::new(self.start.load(Relaxed), self.end.load(Relaxed));
        if r.overlaps(w) {
            Blocking::Overlap
        } else {
            Blocking::Clear
        }
    }

    /// Writer, under the lock's mutex, about to sleep: sets DRAIN if readers
    /// are still inside. False means "they left (or the slot is busy): look
    /// again instead of sleeping".
    pub(crate) fn set_drain(&self) -> bool {
        let mut s = self.state.load(Relaxed);
        loop {
            if s & READERS_MASK == 0 || s & BUSY != 0 {
                return false;
            }
            match self
                .state
                .compare_exchange_weak(s, s | DRAIN, AcqRel, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Under the lock's mutex: the sleepers on this slot are being woken.
    pub(crate) fn clear_drain(&self) {
        self.state.fetch_and(!DRAIN, Relaxed);
    }

    /// The fast readers inside, for diagnostics: `(range, count)`.
    pub(crate) fn holders(&self) -> Option<(ByteRange, usize)> {
        let s = self.state.load(Acquire);
        let n = (s & READERS_MASK) as usize;
        if n == 0 || s & BUSY != 0 {
            return None;
        }
        let r = ByteRange::new(self.start.load(Relaxed), self.end.load(Relaxed));
        Some((r, n))
    }

    pub(crate) fn key(&self) -> usize {
        self as *const Slot as usize
    }
}

/// The slot table, allocated the first time a reader comes.
pub(crate) struct Slots {
    narrow: [CachePadded<Slot>; NARROW],
    wide: [CachePadded<Slot>; WIDE],
}

impl Slots {
    pub(crate) fn new() -> Self {
        Slots {
            narrow: std::array::from_fn(|_| CachePadded::new(Slot::new())),
            wide: std::array::from_fn(|_| CachePadded::new(Slot::new())),
        }
    }

    /// The one slot a fast reader of `r` (non-empty) would use, if any.
    #[inline]
    pub(crate) fn for_reader(&self, r: &ByteRange) -> Option<&Slot> {
        let (first, last) = r.pages();
        let span = last - first;
        if span == 0 {
            Some(&self.narrow[(first % NARROW as u64) as usize])
        } else if span < WIDE_PAGES {
            Some(&self.wide[((first >> WIDE_SHIFT) % WIDE as u64) as usize])
        } else {
            None
        }
    }

    /// Every slot where a fast reader overlapping `w` (non-empty) could be,
    /// each once.
    pub(crate) fn for_writer(&self, w: &ByteRange, mut f: impl FnMut(&Slot)) {
        let (first, last) = w.pages();
        if last - first + 1 >= NARROW as u64 {
            self.narrow.iter().for_each(|s| f(s));
        } else {
            // Fewer than NARROW consecutive pages: distinct slots.
            (first..=last).for_each(|p| f(&self.narrow[(p % NARROW as u64) as usize]));
        }
        // A wide reader starting at page `a` covers at most `a..a+WIDE_PAGES`,
        // so one overlapping `w` starts in `first-(WIDE_PAGES-1)..=last`.
        let lo = first.saturating_sub(WIDE_PAGES - 1) >> WIDE_SHIFT;
        let hi = last >> WIDE_SHIFT;
        if hi - lo + 1 >= WIDE as u64 {
            self.wide.iter().for_each(|s| f(s));
        } else {
            (lo..=hi).for_each(|b| f(&self.wide[(b % WIDE as u64) as usize]));
        }
    }

    /// Whether `zone` is among the slots `for_writer(w)` visits.
    pub(crate) fn covers(&self, w: &ByteRange, zone: &Slot) -> bool {
        let mut hit = false;
        self.for_writer(w, |s| hit |= s.key() == zone.key());
        hit
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = &Slot> {
        self.narrow.iter().chain(self.wide.iter()).map(|s| &**s)
    }
}
