//! [`RangeLock`]: the biased and slot fast paths for readers, the queue for
//! the rest.
//!
//! See the crate docs for the design, `bias.rs` for the biased path's
//! protocol; this file holds the acquisition paths, each with an
//! `#[inline]` fast part and a `#[cold]` twin. The lock's fields and the
//! release paths, which the guards call on drop, are in `state.rs`; the
//! diagnostic snapshot in `snapshot.rs`.

use crate::bias::{self, BIASED, DIRTY};
use crate::guard::{ReadGuard, ReadHold, WriteGuard};
use crate::parker::{notify_all, CancelToken, Parker, Wait};
use crate::queue::{Mode, Queue};
use crate::range::ByteRange;
use crate::record::{self, Entry};
use crate::slot::{Blocking, Revoke, Slot, Slots};
use crate::snapshot::Snapshot;
use crate::state::LockState;
use crate::sync::{lock, try_lock, MutexGuard, Ordering::*, Spin};
use std::time::Instant;

/// A byte-range reader/writer lock for one file.
///
/// Reads take shared ranges, writes and truncates exclusive ones; ranges are
/// half-open, so adjacent ranges never conflict (see [`ByteRange`]).
///
/// `RangeLock::new()` allocates nothing; the reader slot table (about
/// 2.5 KiB) is allocated the first time a reader comes, so a file that is
/// never read concurrently pays `size_of::<RangeLock>()` bytes only.
///
/// # Fairness
///
/// Conflicting requests are served first come, first served: a request
/// waits for every granted range it conflicts with and for every *earlier
/// waiting* request it conflicts with. A stream of new readers therefore
/// cannot starve a waiting writer on their range, nor writers a reader.
///
/// Fast-path readers (a range within one page, or within 32 pages; biased
/// or in a slot) do not queue; they may start while a writer *waits* for the queue, but the
/// writer never waits for them to get its turn: once granted, it revokes
/// the bias and closes the slots it covers to newcomers (who then queue
/// behind it) and waits only for the fast readers already inside. The only way to wait forever is a
/// real cycle, e.g. a thread that holds `[0,10)` for reading and then asks
/// for an overlapping write, or asks to read again an overlapping range
/// while a writer waits for the first (as with `std::sync::RwLock`).
pub struct RangeLock {
    /// The fields and the release paths, which the guards reach alone.
    state: LockState,
}

// A static check of the claim in the docs: the lock itself stays small.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<RangeLock>() <= 256);

impl Default for RangeLock {
    fn default() -> Self {
        Self::new()
    }
}

impl RangeLock {
    /// A new, unlocked lock. Allocates nothing.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RangeLock {
            state: LockState::new(),
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        RangeLock {
            state: LockState::new(),
        }
    }

    /// Locks `range` for reading, blocking while a conflicting range is held
    /// or an earlier conflicting request waits.
    #[inline]
    pub fn read(&self, range: impl Into<ByteRange>) -> ReadGuard<'_> {
        self.acquire_read(range.into(), Wait::Forever)
            .expect("an unbounded wait cannot give up")
    }

    /// Locks `range` for reading if that is possible without waiting.
    #[inline]
    pub fn try_read(&self, range: impl Into<ByteRange>) -> Option<ReadGuard<'_>> {
        self.acquire_read(range.into(), Wait::Never)
    }

    /// Like [`read`](Self::read), giving up (and leaving no trace) at
    /// `deadline`.
    pub fn read_until(
        &self,
        range: impl Into<ByteRange>,
        deadline: Instant,
    ) -> Option<ReadGuard<'_>> {
        self.acquire_read(range.into(), Wait::Until(deadline))
    }

    /// Like [`read`](Self::read), giving up (and leaving no trace) once
    /// `cancel` is cancelled.
    pub fn read_cancellable(
        &self,
        range: impl Into<ByteRange>,
        cancel: &CancelToken,
    ) -> Option<ReadGuard<'_>> {
        self.acquire_read(range.into(), Wait::Cancel(cancel))
    }

    /// Locks `range` for writing (or truncating), blocking while any
    /// overlapping range is held or an earlier overlapping request waits.
    #[inline]
    pub fn write(&self, range: impl Into<ByteRange>) -> WriteGuard<'_> {
        self.acquire_write(range.into(), Wait::Forever)
            .expect("an unbounded wait cannot give up")
    }

    /// Locks `range` for writing if that is possible without waiting.
    pub fn try_write(&self, range: impl Into<ByteRange>) -> Option<WriteGuard<'_>> {
        self.acquire_write(range.into(), Wait::Never)
    }

    /// Like [`write`](Self::write), giving up (and leaving no trace) at
    /// `deadline`.
    pub fn write_until(
        &self,
        range: impl Into<ByteRange>,
        deadline: Instant,
    ) -> Option<WriteGuard<'_>> {
        self.acquire_write(range.into(), Wait::Until(deadline))
    }

    /// Like [`write`](Self::write), giving up (and leaving no trace) once
    /// `cancel` is cancelled.
    pub fn write_cancellable(
        &self,
        range: impl Into<ByteRange>,
        cancel: &CancelToken,
    ) -> Option<WriteGuard<'_>> {
        self.acquire_write(range.into(), Wait::Cancel(cancel))
    }

    /// The slot table, if a reader has allocated it.
    #[inline]
    fn slots(&self) -> Option<&Slots> {
        self.state.slots()
    }

    // ---- readers --------------------------------------------------------

    /// The biased path inline, everything else out of line: a biased read
    /// is the common case of a file nobody writes, and keeping the other
    /// paths out of its way keeps it to straight-line code (with them
    /// inlined, the guard goes through the stack and its drop through a
    /// jump table, a cost visible in readseek).
    #[inline]
    fn acquire_read(&self, r: ByteRange, wait: Wait<'_>) -> Option<ReadGuard<'_>> {
        match self.try_biased_read(&r) {
            Some(e) => Some(ReadGuard::new(&self.state, ReadHold::Biased(e))),
            None => self.acquire_read_unbiased(r, wait),
        }
    }

    #[inline(never)]
    fn acquire_read_unbiased(&self, r: ByteRange, wait: Wait<'_>) -> Option<ReadGuard<'_>> {
        if r.is_empty() {
            return Some(ReadGuard::new(&self.state, ReadHold::Empty));
        }
        match self.try_slot_read(&r) {
            Some(g) => Some(g),
            None => self.acquire_read_slow(r, wait),
        }
    }

    /// The fast paths in `r`'s zone: biased if the zone is, else its slot
    /// (considering a re-bias now and then). None: take the queue.
    fn try_fast_read(&self, r: &ByteRange) -> Option<ReadGuard<'_>> {
        match self.try_biased_read(r) {
            Some(e) => Some(ReadGuard::new(&self.state, ReadHold::Biased(e))),
            None => self.try_slot_read(r),
        }
    }

    /// The biased path, if `r`'s zone is biased. None: the zone is not
    /// biased, was revoked meanwhile, or the range is empty or too wide.
    #[inline(always)]
    fn try_biased_read(&self, r: &ByteRange) -> Option<&'static Entry> {
        if r.is_empty() {
            return None;
        }
        let zone = self.slots()?.for_reader(r)?;
        if zone.zone() & BIASED == 0 {
            return None;
        }
        self.enter_biased(zone, r)
    }

    /// The slot path in `r`'s zone (non-empty), considering a re-bias now
    /// and then. None: take the queue.
    fn try_slot_read(&self, r: &ByteRange) -> Option<ReadGuard<'_>> {
        let zone = self.slots()?.for_reader(r)?;
        let z = zone.zone();
        if !zone.try_enter(r) {
            return None;
        }
        if z & BIASED == 0 && record::tick(bias::REBIAS_EVERY) {
            self.try_rebias(zone);
        }
        Some(ReadGuard::new(&self.state, ReadHold::Fast(zone)))
    }

    /// The biased path in `zone`, which was seen biased: publish, then
    /// re-check. None if the zone was revoked meanwhile (or the record is
    /// full).
    #[inline(always)]
    fn enter_biased(&self, zone: &Slot, r: &ByteRange) -> Option<&'static Entry> {
        // Relaxed: the id was stored before the zone's Release re-bias,
        // which our Acquire load of the zone saw.
        let e = record::publish(self.state.id.load(Relaxed), r)?;
        // `publish` ended with the light barrier: this load cannot miss a
        // revocation whose heavy barrier missed our entry.
        if zone.zone() & BIASED != 0 {
            return Some(e);
        }
        // Revoked meanwhile: back out (waking a writer that may have gone
        // to sleep on our entry); the caller takes the slot path.
        if e.leave() {
            self.state.wake_biased(e);
        }
        None
    }

    /// Slot-path reader, now and then: re-bias its zone if the inhibit
    /// time passed and no writer holds a range there. Never waits for the
    /// mutex.
    #[cold]
    fn try_rebias(&self, zone: &Slot) {
        // Relaxed: only a hint; `rebias` decides under the mutex.
        if bias::now_ns() < self.state.inhibit_until.load(Relaxed) {
            return;
        }
        if let Some(mut q) = try_lock(&self.state.queue) {
            self.rebias(&mut q, zone);
        }
    }

    /// Under the queue mutex: turn `zone`'s bias back on if allowed: not
    /// while a granted writer covers it (it revoked the zone and relies on
    /// it staying off for its whole tenure).
    fn rebias(&self, q: &mut MutexGuard<'_, Queue>, zone: &Slot) {
        let Some(slots) = self.slots() else { return };
        if zone.zone() & BIASED != 0
            || !bias::available()
            || bias::now_ns() < self.state.inhibit_until.load(Relaxed)
            || q.granted()
                .any(|(w, m)| m == Mode::Exclusive && slots.covers(&w, zone))
        {
            return;
        }
        q.biased_at = bias::now_ns();
        if self.state.id.load(Relaxed) == 0 {
            // Relaxed: published by the zone's Release store below.
            self.state.id.store(bias::new_id(), Relaxed);
        }
        zone.rebias_zone();
    }

    #[cold]
    fn acquire_read_slow(&self, r: ByteRange, wait: Wait<'_>) -> Option<ReadGuard<'_>> {
        let mut q = lock(&self.state.queue);
        if self.slots().is_none() && !q.has_granted_writer() {
            // First reader: create the table while no writer holds a range
            // (a granted writer decided under this mutex not to mark any
            // slot), bias every zone, then retry the fast path.
            self.state.alloc_slots();
            if let Some(slots) = self.slots() {
                slots.all().for_each(|zone| self.rebias(&mut q, zone));
            }
            drop(q);
            if let Some(g) = self.try_fast_read(&r) {
                return Some(g);
            }
            q = lock(&self.state.queue);
        }
        if let Some(zone) = self.slots().and_then(|s| s.for_reader(&r)) {
            self.rebias(&mut q, zone);
        }
        if let Some(id) = q.try_grant(r, Mode::Shared) {
            return Some(ReadGuard::new(&self.state, ReadHold::Slow(id)));
        }
        if let Wait::Never = wait {
            return None;
        }
        let parker = Parker::new();
        let id = q.enqueue(r, Mode::Shared, parker.clone());
        drop(q);
        self.wait_granted(id, &parker, wait)
            .then(|| ReadGuard::new(&self.state, ReadHold::Slow(id)))
    }

    // ---- writers --------------------------------------------------------

    fn acquire_write(&self, w: ByteRange, wait: Wait<'_>) -> Option<WriteGuard<'_>> {
        if w.is_empty() {
            return Some(WriteGuard::new(&self.state, w, None));
        }
        let mut q = lock(&self.state.queue);
        let (id, scan) = match q.try_grant(w, Mode::Exclusive) {
            Some(id) => {
                let scan = self.revoke(&mut q, &w);
                drop(q);
                (id, scan)
            }
            None => {
                if let Wait::Never = wait {
                    return None;
                }
                let parker = Parker::new();
                let id = q.enqueue(w, Mode::Exclusive, parker.clone());
                drop(q);
                if !self.wait_granted(id, &parker, wait) {
                    return None;
                }
                // Acquire (in `zone`): our grant (under the mutex) happened
                // before this; a clean zone seen here was cleaned after a
                // completed heavy barrier and cannot turn biased while we
                // are granted. Anything else is settled under the mutex,
                // where a concurrent revocation's heavy barrier is known to
                // be complete.
                let scan = self.zones_touched(&w) && self.revoke(&mut lock(&self.state.queue), &w);
                (id, scan)
            }
        };
        // We are granted: `slots` cannot appear until we release (see the
        // field doc), so what we see now holds for the whole tenure. Mark
        // first: a reader backing out of the biased path then meets the
        // mark and queues behind us.
        let slots = self.slots();
        if let Some(slots) = slots {
            slots.for_writer(&w, Slot::mark);
        }
        if scan && !self.drain_biased(&w, wait) {
            self.state.release_write(&w, id);
            return None;
        }
        if let Some(slots) = slots {
            if !self.drain(slots, &w, wait) {
                self.state.release_write(&w, id);
                return None;
            }
        }
        Some(WriteGuard::new(&self.state, w, Some(id)))
    }

    /// Whether any zone `w` covers is biased or dirty (a scan may be due).
    fn zones_touched(&self, w: &ByteRange) -> bool {
        let mut touched = false;
        if let Some(slots) = self.slots() {
            slots.for_writer(w, |zone| touched |= zone.zone() & (BIASED | DIRTY) != 0);
        }
        touched
    }

    /// Granted writer, under the queue mutex: revoke the bias of every zone
    /// `w` covers that has it on (stores, then one heavy barrier, both
    /// before the mutex is released; see `bias.rs`). Zones `w` cannot meet
    /// keep their bias: their readers never see this writer. True when
    /// biased readers may still be inside a covered zone, so the caller
    /// must scan the records.
    fn revoke(&self, q: &mut MutexGuard<'_, Queue>, w: &ByteRange) -> bool {
        let Some(slots) = self.slots() else {
            return false; // no zone, so no biased reader, exists yet
        };
        let t0 = bias::now_ns();
        let (mut revoked, mut dirty) = (false, false);
        slots.for_writer(w, |zone| match zone.revoke_zone() {
            Revoke::Revoked => revoked = true,
            Revoke::Dirty => dirty = true,
            Revoke::Clean => {}
        });
        if !revoked {
            return dirty;
        }
        bias::heavy_barrier();
        let now = bias::now_ns();
        let base = ((now - t0) * bias::INHIBIT_FACTOR).max(bias::INHIBIT_MIN_NS);
        // Revoked soon after the last re-bias: the file is being written
        // steadily, so back off (exponentially, up to a cap); a bias that
        // lived long resets the period to BRAVO's.
        q.inhibit_ns = if t0.saturating_sub(q.biased_at) < 4 * q.inhibit_ns.max(base) {
            (2 * q.inhibit_ns.max(base)).min(bias::INHIBIT_MAX_NS)
        } else {
            base
        };
        self.state.inhibit_until.store(now + q.inhibit_ns, Relaxed);
        true
    }

    /// Granted writer, after `revoke` said so: waits for every biased reader
    /// of an overlapping range (all were published before the heavy barrier
    /// or will back out). Then cleans each covered zone no entry is in, so
    /// the next writer there skips the scan. False if the wait was
    /// abandoned.
    fn drain_biased(&self, w: &ByteRange, wait: Wait<'_>) -> bool {
        let (Some(slots), id) = (self.slots(), self.state.id.load(Relaxed)) else {
            return true;
        };
        // Zones some entry of this lock is in. An entry's range is stable
        // if it was published before the barrier; a torn one belongs to a
        // reader that is backing out, so misfiling it is harmless.
        let mut occupied: Vec<usize> = Vec::new();
        for e in record::entries() {
            if !e.names(id) {
                continue;
            }
            let r = e.range();
            if let Some(zone) = (!r.is_empty()).then(|| slots.for_reader(&r)).flatten() {
                occupied.push(zone.key());
            }
            if e.holds(id, w) && !self.drain_entry(e, id, w, wait) {
                return false;
            }
        }
        slots.for_writer(w, |zone| {
            if !occupied.contains(&zone.key()) {
                zone.clean_zone();
            }
        });
        true
    }

    /// Waits until `e` no longer holds lock `id` over a range overlapping
    /// `w`: spins, then sleeps as a drainer of the entry (see "Waking a
    /// sleeping writer" in `bias.rs`).
    fn drain_entry(&self, e: &Entry, id: u64, w: &ByteRange, wait: Wait<'_>) -> bool {
        let spin = Spin::new();
        loop {
            if !e.holds(id, w) {
                return true;
            }
            if let Wait::Never = wait {
                return false;
            }
            if !spin.snooze() {
                continue;
            }
            let parker = Parker::new();
            {
                let mut q = lock(&self.state.queue);
                q.add_drainer(e.key(), parker.clone());
                e.add_sleeper();
            }
            bias::heavy_barrier();
            let woken = !e.holds(id, w) || wait.sleep(&parker);
            {
                let mut q = lock(&self.state.queue);
                q.remove_drainer(&parker, e.key());
                e.remove_sleeper();
            }
            if !woken && e.holds(id, w) {
                return false; // abandoned; we leave no trace
            }
        }
    }

    /// Waits for the fast readers overlapping `w` that were inside when we
    /// marked their slots. Returns false if the wait was abandoned.
    fn drain(&self, slots: &Slots, w: &ByteRange, wait: Wait<'_>) -> bool {
        let mut ok = true;
        slots.for_writer(w, |slot| {
            if ok {
                ok = self.drain_slot(slot, w, wait);
            }
        });
        ok
    }

    fn drain_slot(&self, slot: &Slot, w: &ByteRange, wait: Wait<'_>) -> bool {
        let spin = Spin::new();
        loop {
            match slot.blocking(w) {
                Blocking::Clear => return true,
                // A reader is between its claim and its count: it is about
                // to finish, so spin (yield) rather than sleep.
                Blocking::Busy => {
                    spin.snooze();
                    continue;
                }
                Blocking::Overlap => {}
            }
            if let Wait::Never = wait {
                return false;
            }
            if !spin.snooze() {
                continue;
            }
            // Sleep until the last reader leaves. Registering and setting
            // DRAIN under the mutex: the last reader's `leave` sees DRAIN
            // and wakes us in `wake_drainers`, under the same mutex.
            let parker = Parker::new();
            {
                let mut q = lock(&self.state.queue);
                if !slot.set_drain() {
                    continue; // they left meanwhile: look again
                }
                q.add_drainer(slot.key(), parker.clone());
            }
            if !wait.sleep(&parker) {
                let mut q = lock(&self.state.queue);
                if parker.is_notified() {
                    continue; // woken as we gave up: take the wakeup
                }
                if !q.remove_drainer(&parker, slot.key()) {
                    slot.clear_drain(); // leave no trace
                }
                return false;
            }
        }
    }

    /// Sleeps until request `id` is granted; on abandon, withdraws it (no
    /// trace left) unless it was granted meanwhile. True when granted.
    fn wait_granted(&self, id: u64, parker: &Parker, wait: Wait<'_>) -> bool {
        if wait.sleep(parker) {
            return true;
        }
        let mut wake = Vec::new();
        let withdrawn = lock(&self.state.queue).abandon(id, &mut wake);
        notify_all(wake);
        // Not withdrawn: the grant won the race, we hold the range.
        !withdrawn
    }

    /// Everything the lock holds and awaits, for diagnostics and tests.
    pub fn snapshot(&self) -> Snapshot {
        self.state.snapshot()
    }

    /// True when nothing is held, awaited or asleep.
    pub fn is_idle(&self) -> bool {
        let s = self.snapshot();
        s.granted.is_empty() && s.waiting.is_empty() && s.draining == 0
    }
}

impl std::fmt::Debug for RangeLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeLock").finish_non_exhaustive()
    }
}
