//! Model check of a LOOKUP racing a host change (`src/entry_race.rs`):
//! on every interleaving, once the watcher has sent its invalidations
//! (and, when told the batch may have raced a reply, sent them again
//! after the reply reached the dcache), the dcache holds no name read
//! before the change.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p uvfs-fuse
//! --test loom_entry_race` (`.ci/run` does).
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use uvfs_fuse::entry_race::EntryRace;

/// What the name leads to on the source before and after the change.
const OLD: u64 = 1;
const NEW: u64 = 2;

/// One name's world: the source, the kernel's dcache entry for it, and
/// the server's race tracker.
struct World {
    source: AtomicU64,
    dcache: Mutex<Option<u64>>,
    race: EntryRace,
}

impl World {
    fn new() -> Arc<World> {
        Arc::new(World {
            source: AtomicU64::new(OLD),
            dcache: Mutex::new(None),
            race: EntryRace::default(),
        })
    }

    /// A LOOKUP (or one READDIRPLUS entry): the server reads the source
    /// under the guard and replies; the kernel fills its dcache after
    /// the reply, when the guard is gone.
    fn lookup(&self) {
        let guard = self.race.begin();
        // Relaxed: a system call's read is no atomic; the fences in
        // `EntryRace` must order it.
        let found = self.source.load(Ordering::Relaxed);
        drop(guard);
        *self.dcache.lock().unwrap() = Some(found);
    }

    /// `FUSE_NOTIFY_INVAL_ENTRY`: drops the name if the dcache has it.
    fn invalidate(&self) {
        *self.dcache.lock().unwrap() = None;
    }

    fn stale(&self) -> bool {
        *self.dcache.lock().unwrap() == Some(OLD)
    }
}

/// The host changes the name while a LOOKUP of it is served; the
/// watcher reads the event, invalidates, and asks whether to repeat.
fn host_change_racing(lookups: usize) {
    loom::model(move || {
        let w = World::new();
        let readers: Vec<_> = (0..lookups)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || w.lookup())
            })
            .collect();
        w.source.store(NEW, Ordering::Relaxed);
        w.invalidate();
        let repeat = w.race.may_have_raced();
        for r in readers {
            r.join().unwrap();
        }
        // The repeats go out later, by when a racing reply's name is in
        // the dcache (what the model's join stands for).
        if repeat {
            w.invalidate();
        }
        assert!(
            !w.stale(),
            "a name read before the change outlived its invalidation"
        );
    });
}

#[test]
fn one_lookup_racing_a_change_leaves_no_stale_name() {
    host_change_racing(1);
}

#[test]
fn two_lookups_racing_a_change_leave_no_stale_name() {
    host_change_racing(2);
}
