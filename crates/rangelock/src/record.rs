//! Thread reader records: where *biased* readers announce themselves.
//!
//! Every thread that takes a biased read owns one [`Record`]: a cache-padded
//! array of [`ENTRIES`] entries `{lock id, start, end}`, written only by that
//! thread (and cleared by whoever drops the guard) and read by writers that
//! revoke a lock's bias (see `bias.rs` for the protocol). Records live on
//! one global, append-only list (the *registry*); they are never freed, so
//! a writer may walk the list and poll an entry with no lifetime games.
//!
//! # Thread exit
//!
//! A thread-local owner gives the record back to the registry when the
//! thread exits (its entries are all free then, unless a guard was leaked
//! or outlives the thread in another thread-local: then the record is kept
//! out of reuse forever, so the late guard drop clears its own entry and no
//! one else's). The next new thread reuses a free record instead of
//! allocating, so the registry holds at most as many records as threads
//! that were ever alive at once.
//!
//! # Lock identity
//!
//! An entry names a lock by its unique, never reused id (`bias.rs`), not by
//! address: a lock freed and another allocated at the same address cannot
//! be confused.

use crate::range::ByteRange;
use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering::*};
use crossbeam_utils::CachePadded;
use std::cell::Cell;

/// Entries per thread: how many biased reads one thread may hold at once
/// (further nested reads take the slot path).
#[cfg(not(loom))]
pub(crate) const ENTRIES: usize = 4;
#[cfg(loom)]
pub(crate) const ENTRIES: usize = 2;

/// One biased read (or a free entry when `lock == 0`).
///
/// Field discipline: `start`/`end`/`lock` are written only by the owning
/// thread while `lock == 0` (publish), `lock` is set back to 0 by the
/// guard's drop; writers only read them. `sleepers` is changed by writers,
/// under the named lock's queue mutex, and read by the releasing reader.
pub(crate) struct Entry {
    lock: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    /// Writers asleep until this entry stops naming their lock.
    sleepers: AtomicU64,
}

impl Entry {
    fn new() -> Self {
        Entry {
            lock: AtomicU64::new(0),
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            sleepers: AtomicU64::new(0),
        }
    }

    /// Reader, on its own free entry: names lock `id` for `r`. The caller
    /// must then issue the light barrier and re-check the bias.
    #[inline]
    fn publish(&self, id: u64, r: &ByteRange) {
        self.start.store(r.start(), Relaxed);
        self.end.store(r.end(), Relaxed);
        // Release: a writer whose Acquire load sees `id` also sees this
        // range (the protocol only relies on that for entries published
        // before its heavy barrier, see `bias.rs`).
        self.lock.store(id, Release);
    }

    /// Reader release. Returns true when writers sleep on this entry and
    /// must be woken (`#[cold]`, by the caller).
    #[inline]
    pub(crate) fn leave(&self) -> bool {
        // Release: our reads of the file happen before the writes of a
        // writer whose Acquire load (`holds`) sees the entry free.
        self.lock.store(0, Release);
        // Light side of the asymmetric fence (see `bias.rs`, "Waking a
        // sleeping writer"): our store above is ordered before this load
        // either by the writer's heavy barrier or not needed at all.
        crate::bias::light_barrier();
        self.sleepers.load(Relaxed) != 0
    }

    /// Writer: does this entry hold lock `id` over a range overlapping `w`?
    #[inline]
    pub(crate) fn holds(&self, id: u64, w: &ByteRange) -> bool {
        // Acquire: pairs with the Release in `leave` (when we see the entry
        // free, the reader's reads are done) and in `publish`.
        self.lock.load(Acquire) == id && self.range().overlaps(w)
    }

    /// Writer: does this entry name lock `id` at all?
    #[inline]
    pub(crate) fn names(&self, id: u64) -> bool {
        self.lock.load(Acquire) == id
    }

    /// The published range; meaningful only while `lock` names the caller's
    /// lock and the entry was published before the caller's heavy barrier.
    pub(crate) fn range(&self) -> ByteRange {
        ByteRange::new(self.start.load(Relaxed), self.end.load(Relaxed))
    }

    /// Writer, under the named lock's mutex: one more (or fewer) sleeper.
    pub(crate) fn add_sleeper(&self) {
        // SeqCst: this store precedes our heavy barrier; see `bias.rs`.
        self.sleepers.fetch_add(1, SeqCst);
    }

    pub(crate) fn remove_sleeper(&self) {
        self.sleepers.fetch_sub(1, Relaxed);
    }

    /// The key writers sleep under in the queue's drainer list (distinct
    /// from every slot's key: different memory).
    pub(crate) fn key(&self) -> usize {
        self as *const Entry as usize
    }
}

/// One thread's entries, on their own cache lines.
pub(crate) struct Record {
    entries: [Entry; ENTRIES],
    /// Owned by a live thread (or kept out of reuse, see the module docs).
    in_use: AtomicBool,
    /// The next record on the registry; immutable once published.
    next: *const CachePadded<Record>,
}

// SAFETY: `next` is written once before the record is published (Release
// CAS on the registry head) and only read afterwards; every other field is
// atomic.
unsafe impl Sync for Record {}
// SAFETY: as above; the raw pointer only ever points at a leaked, immortal
// record.
unsafe impl Send for Record {}

impl Record {
    fn all_free(&self) -> bool {
        self.entries.iter().all(|e| e.lock.load(Acquire) == 0)
    }
}

// ---- the registry -----------------------------------------------------

#[cfg(not(loom))]
fn head() -> &'static AtomicPtr<CachePadded<Record>> {
    static HEAD: AtomicPtr<CachePadded<Record>> = AtomicPtr::new(std::ptr::null_mut());
    &HEAD
}

#[cfg(loom)]
fn head() -> &'static AtomicPtr<CachePadded<Record>> {
    loom::lazy_static! {
        static ref HEAD: AtomicPtr<CachePadded<Record>> = AtomicPtr::new(std::ptr::null_mut());
    }
    &HEAD
}

/// Every record ever registered (live, free or kept), newest first.
pub(crate) fn records() -> impl Iterator<Item = &'static Record> {
    // Acquire: pairs with the Release CAS in `claim`, so the record's
    // initial fields and `next` are visible.
    let mut p: *const CachePadded<Record> = head().load(Acquire);
    std::iter::from_fn(move || {
        // SAFETY: `p` is null or points at a record leaked in `claim`
        // (never freed), fully initialised before it was published.
        let r: &'static CachePadded<Record> = unsafe { p.as_ref()? };
        p = r.next;
        Some(&**r)
    })
}

/// Every entry of every record.
pub(crate) fn entries() -> impl Iterator<Item = &'static Entry> {
    records().flat_map(|r| r.entries.iter())
}

/// A free record (reused, or leaked anew and pushed on the registry).
fn claim() -> &'static Record {
    for r in records() {
        // Acquire: pairs with the Release in `Owner::drop` (the previous
        // owner is done with it).
        if !r.in_use.load(Relaxed)
            && r.in_use
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
        {
            return r;
        }
    }
    let rec: &'static mut CachePadded<Record> = Box::leak(Box::new(CachePadded::new(Record {
        entries: std::array::from_fn(|_| Entry::new()),
        in_use: AtomicBool::new(true),
        next: std::ptr::null(),
    })));
    let mut h = head().load(Relaxed);
    loop {
        rec.next = h;
        // Release: publishes the record's fields and `next` to walkers.
        match head().compare_exchange_weak(h, rec as *mut _, Release, Relaxed) {
            Ok(_) => return rec,
            Err(now) => h = now,
        }
    }
}

// ---- this thread's record -------------------------------------------------

/// Gives the record back when the thread exits.
struct Owner(Cell<Option<&'static Record>>);

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| c.set(None));
        if let Some(r) = self.0.take() {
            if r.all_free() {
                // Release: pairs with the Acquire CAS in `claim`.
                r.in_use.store(false, Release);
            }
            // else: a guard still names an entry; keep the record out of
            // reuse so its drop clears only its own entry.
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    /// The fast path's view: no destructor, so access is one TLS load.
    static CURRENT: Cell<Option<&'static Record>> = const { Cell::new(None) };
    static OWNER: Owner = const { Owner(Cell::new(None)) };
    /// Slot-path reads since this thread last considered re-biasing.
    static TICKS: Cell<u32> = const { Cell::new(0) };
}

#[cfg(loom)]
loom::thread_local! {
    static CURRENT: Cell<Option<&'static Record>> = Cell::new(None);
    static OWNER: Owner = Owner(Cell::new(None));
    static TICKS: Cell<u32> = Cell::new(0);
}

/// This thread's record, registering one on first use; `None` while the
/// thread is exiting (then readers take the slot path).
#[inline]
fn current() -> Option<&'static Record> {
    match CURRENT.try_with(Cell::get) {
        Ok(Some(r)) => Some(r),
        _ => register(),
    }
}

#[cold]
fn register() -> Option<&'static Record> {
    // Touch the owner first: if its destructor already ran (or runs now),
    // the thread is exiting and must not claim a record it cannot return.
    let ok = OWNER.try_with(|o| o.0.get().is_none()).ok()?;
    if !ok {
        return None; // owner set but CURRENT cleared: exiting
    }
    let r = claim();
    OWNER.with(|o| o.0.set(Some(r)));
    let _ = CURRENT.try_with(|c| c.set(Some(r)));
    Some(r)
}

/// Reader: publishes `r` for lock `id` in a free entry of this thread's
/// record and issues the light barrier. `None` when all entries are busy or
/// the thread is exiting.
#[inline]
pub(crate) fn publish(id: u64, r: &ByteRange) -> Option<&'static Entry> {
    let rec = current()?;
    let e = rec.entries.iter().find(|e| e.lock.load(Relaxed) == 0)?;
    e.publish(id, r);
    crate::bias::light_barrier();
    Some(e)
}

/// Slot-path reader: true once every `every` calls on this thread.
#[inline]
pub(crate) fn tick(every: u32) -> bool {
    TICKS
        .try_with(|t| {
            let n = t.get() + 1;
            if n >= every {
                t.set(0);
                true
            } else {
                t.set(n);
                false
            }
        })
        .unwrap_or(false)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn in_use() -> usize {
        records().filter(|r| r.in_use.load(Acquire)).count()
    }

    #[test]
    fn exiting_threads_give_their_record_back() {
        // Threads one after another: each reuses a freed record, so the
        // registry does not grow with the number of threads ever started.
        for _ in 0..4 {
            std::thread::spawn(|| {
                assert!(publish(7, &ByteRange::new(0, 1)).is_some_and(|e| {
                    let _ = e.leave();
                    true
                }))
            })
            .join()
            .unwrap();
        }
        let before = records().count();
        for _ in 0..50 {
            std::thread::spawn(|| {
                let e = publish(9, &ByteRange::new(0, 1)).unwrap();
                assert!(!e.leave());
            })
            .join()
            .unwrap();
        }
        // Other tests run threads in parallel: allow for them.
        assert!(records().count() <= before + 16, "registry grew per thread");
        let _ = in_use();
    }

    #[test]
    fn a_record_with_a_held_entry_is_not_reused() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let e = publish(11, &ByteRange::new(5, 6)).unwrap();
            tx.send(e).unwrap(); // "leaked" past the thread's exit
        })
        .join()
        .unwrap();
        let e = rx.recv().unwrap();
        let rec = records()
            .find(|r| r.entries.iter().any(|x| std::ptr::eq(x, e)))
            .unwrap();
        assert!(rec.in_use.load(Acquire), "kept out of reuse");
        assert!(e.names(11));
        assert!(!e.leave());
        assert!(!e.names(11));
    }

    #[test]
    fn entries_fill_up_then_refuse() {
        std::thread::spawn(|| {
            let es: Vec<_> = (0..ENTRIES)
                .map(|i| publish(13, &ByteRange::new(i as u64, i as u64 + 1)).unwrap())
                .collect();
            assert!(publish(13, &ByteRange::new(99, 100)).is_none());
            for e in es {
                assert!(!e.leave());
            }
            assert!(publish(13, &ByteRange::new(99, 100)).is_some_and(|e| !e.leave()));
        })
        .join()
        .unwrap();
    }
}
