//! Loom models of the lock's state machine with 2-3 threads.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p
//! uvfs-rangelock --release --test loom_rangelock`. Under loom the slot
//! table shrinks to 2 narrow + 1 wide slot, so pages 0 and 2 share a slot,
//! each thread record has 2 entries, re-bias is never inhibited by time and
//! slot-path readers try it on every read.
//!
//! `warm` turns the bias on, so most models run the biased path against
//! revoking writers. Loom cannot model `membarrier(2)`: under `cfg(loom)`
//! both the reader's light barrier and the writer's heavy barrier are
//! `fence(SeqCst)` (see `bias.rs`), which checks the protocol's
//! store-buffering argument, not the kernel's IPI.
//!
//! Each model tracks holders in loom atomics and asserts, inside every
//! critical section, that no conflicting holder is inside too; loom also
//! reports any deadlock (a lost wakeup) and any leak.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use uvfs_rangelock::{CancelToken, RangeLock};

const P: u64 = 4096;

/// Counts readers and writers inside one critical range.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
}

impl Inside {
    fn read(&self) {
        self.readers.fetch_add(1, SeqCst);
        assert_eq!(self.writers.load(SeqCst), 0, "reader with a writer inside");
        self.readers.fetch_sub(1, SeqCst);
    }
    fn write(&self) {
        assert_eq!(self.writers.fetch_add(1, SeqCst), 0, "two writers inside");
        assert_eq!(self.readers.load(SeqCst), 0, "writer with a reader inside");
        self.writers.fetch_sub(1, SeqCst);
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

fn warm(l: &RangeLock) {
    // Allocate the slot table and turn the bias on, so the fast paths are
    // in play.
    let g = l.read(0..1);
    assert!(g.is_biased());
}

#[test]
fn shared_shared_same_and_colliding_pages() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let l2 = l.clone();
        let t = thread::spawn(move || {
            let g = l2.read(0..P);
            drop(g);
        });
        {
            // Page 2 collides with page 0's slot: one of us takes the queue.
            let _a = l.read(2 * P..3 * P);
            let _b = l.read(0..P);
        }
        t.join().unwrap();
        assert!(l.is_idle());
    });
}

#[test]
fn shared_exclusive_fast_reader_and_writer() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let inside = Arc::new(Inside::default());
        let (l2, i2) = (l.clone(), inside.clone());
        let t = thread::spawn(move || {
            let _g = l2.read(0..P);
            i2.read();
        });
        {
            let _g = l.write(100..200);
            inside.write();
        }
        t.join().unwrap();
        assert!(l.is_idle());
    });
}

#[test]
fn shared_exclusive_first_reader_allocates_table() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        let inside = Arc::new(Inside::default());
        let (l2, i2) = (l.clone(), inside.clone());
        let t = thread::spawn(move || {
            let _g = l2.read(0..P);
            i2.read();
        });
        {
            let _g = l.write(..);
            inside.write();
        }
        t.join().unwrap();
        assert!(l.is_idle());
    });
}

#[test]
fn exclusive_exclusive() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let inside = Arc::new(Inside::default());
        let (l2, i2) = (l.clone(), inside.clone());
        let t = thread::spawn(move || {
            let _g = l2.write(0..P);
            i2.write();
        });
        {
            let _g = l.write(P - 1..);
            inside.write();
        }
        t.join().unwrap();
        assert!(l.is_idle());
    });
}

#[test]
fn two_readers_one_writer() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let inside = Arc::new(Inside::default());
        let ts: Vec<_> = [0..P, 10..20]
            .into_iter()
            .map(|r| {
                let (l, i) = (l.clone(), inside.clone());
                thread::spawn(move || {
                    let _g = l.read(r);
                    i.read();
                })
            })
            .collect();
        {
            let _g = l.write(0..P);
            inside.write();
        }
        for t in ts {
            t.join().unwrap();
        }
        assert!(l.is_idle());
    });
}

#[test]
fn abandoned_wait_leaves_no_trace() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let token = Arc::new(CancelToken::new());
        let reader = l.read(0..P); // fast: the writer must drain it
        let (l2, t2) = (l.clone(), token.clone());
        let t = thread::spawn(move || {
            // Either granted (if the reader left first) or abandoned.
            let g = l2.write_cancellable(0..P, &t2);
            drop(g);
        });
        token.cancel();
        drop(reader);
        t.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
        // Nothing left marked: a fast reader and a writer both get in.
        assert!(l.try_read(0..P).is_some_and(|g| g.is_fast()));
        assert!(l.try_write(..).is_some());
    });
}

#[test]
fn abandoned_queue_wait_leaves_no_trace() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        let token = Arc::new(CancelToken::new());
        let w = l.write(0..10);
        let (l2, t2) = (l.clone(), token.clone());
        let t = thread::spawn(move || {
            let g = l2.read_cancellable(5..15, &t2);
            drop(g);
        });
        token.cancel();
        drop(w);
        t.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
        assert!(l.try_write(..).is_some());
    });
}

/// A biased reader against a revoking writer on the same range: either the
/// reader backs out (and meets the writer's slot mark) or the writer sees
/// its entry and waits (sleeping, so the wake protocol is checked too).
#[test]
fn biased_reader_against_revoking_writer() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let inside = Arc::new(Inside::default());
        let (l2, i2) = (l.clone(), inside.clone());
        let t = thread::spawn(move || {
            let _g = l2.read(0..P);
            i2.read();
        });
        {
            let _g = l.write(0..P);
            inside.write();
        }
        t.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
    });
}

/// Revocation then re-bias by a slot-path reader, racing a second writer:
/// the re-bias must not let a biased reader in while that writer holds.
#[test]
fn rebias_races_a_writer() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        drop(l.write(2 * P..3 * P)); // revokes zone 0 (pages 0 and 2)
        let inside = Arc::new(Inside::default());
        let (l2, i2) = (l.clone(), inside.clone());
        let t = thread::spawn(move || {
            // Slot path in zone 0 (bias off); re-biases it after it is in.
            drop(l2.read(2 * P..3 * P));
            // Biased or slot path, depending on the race.
            let _g = l2.read(0..P);
            i2.read();
        });
        {
            let _g = l.write(0..10);
            inside.write();
        }
        t.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
    });
}

/// A thread holds a biased read and takes a write on a disjoint sub-range
/// of the same page: its own entry must not block it.
#[test]
fn own_biased_read_then_disjoint_write() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let l2 = l.clone();
        let t = thread::spawn(move || {
            let r = l2.read(0..100);
            let w = l2.write(200..300);
            drop((r, w));
        });
        drop(l.read(50..60));
        t.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
    });
}

/// A reader thread exits while a writer scans the records.
#[test]
fn reader_thread_exits_during_revocation() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let l2 = l.clone();
        let t = thread::spawn(move || {
            drop(l2.read(0..P));
        });
        drop(l.write(0..P));
        t.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
        assert!(l.try_write(..).is_some());
    });
}

/// Bias is per zone: a writer of page 0 (zone 0) never revokes zone 1, so
/// a reader of page 1 stays on the biased path in every interleaving, and
/// neither waits for the other.
#[test]
fn disjoint_writer_leaves_other_zone_biased() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let l2 = l.clone();
        let t = thread::spawn(move || {
            let g = l2.read(P..2 * P);
            assert!(g.is_biased(), "zone 1 revoked by a writer of zone 0");
        });
        drop(l.write(0..P));
        t.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
    });
}

/// Two writers of disjoint pages of one zone (pages 0 and 2) and a reader
/// of page 0: the writer of page 2 may clean the zone while the writer of
/// page 0 holds; the reader must still never overlap the writer of page 0.
#[test]
fn zone_cleaned_by_one_writer_while_another_holds() {
    model(|| {
        let l = Arc::new(RangeLock::new());
        warm(&l);
        let inside = Arc::new(Inside::default());
        let l2 = l.clone();
        let a = thread::spawn(move || drop(l2.write(2 * P..3 * P)));
        let (l3, i3) = (l.clone(), inside.clone());
        let b = thread::spawn(move || {
            let _g = l3.read(0..P);
            i3.read();
        });
        {
            let _g = l.write(0..P);
            inside.write();
        }
        a.join().unwrap();
        b.join().unwrap();
        assert!(l.is_idle(), "{:?}", l.snapshot());
    });
}
