//! Model check of a LOOKUP racing a host change (`src/entry_race.rs`),
//! per directory: on every interleaving, once the watcher has sent its
//! invalidations (and, for each directory it was told may have raced a
//! reply, sent that directory's again after the reply reached the
//! dcache), the dcache holds no name read before the change; and a
//! directory no reply was about is never re-sent.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p uvfs-fuse
//! --test loom_entry_race` (`.ci/run` does).
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use uvfs_fuse::entry_race::{slot_of, EntryRace};

/// What a name leads to on the source before and after the change.
const OLD: u64 = 1;
const NEW: u64 = 2;

/// Two directories' node ids (in slots of their own), one name in each.
const DIRS: [u64; 2] = [1, 2];

/// One name of a directory: the source, and the kernel's dcache entry.
struct Name {
    source: AtomicU64,
    dcache: Mutex<Option<u64>>,
}

/// The names of [`DIRS`] and the server's race tracker.
struct World {
    names: [Name; 2],
    race: EntryRace,
}

impl World {
    fn new() -> Arc<World> {
        let name = || Name {
            source: AtomicU64::new(OLD),
            dcache: Mutex::new(None),
        };
        Arc::new(World {
            names: [name(), name()],
            race: EntryRace::default(),
        })
    }

    /// A LOOKUP (or one READDIRPLUS entry) in directory `d`: the server
    /// reads the source under the guard and replies; the kernel fills
    /// its dcache after the reply, when the guard is gone.
    fn lookup(&self, d: usize) {
        let guard = self.race.begin(DIRS[d]);
        // Relaxed: a system call's read is no atomic; the fences in
        // `EntryRace` must order it.
        let found = self.names[d].source.load(Ordering::Relaxed);
        drop(guard);
        *self.names[d].dcache.lock().unwrap() = Some(found);
    }

    /// `FUSE_NOTIFY_INVAL_ENTRY`: drops the name if the dcache has it.
    fn invalidate(&self, d: usize) {
        *self.names[d].dcache.lock().unwrap() = None;
    }

    fn stale(&self, d: usize) -> bool {
        *self.names[d].dcache.lock().unwrap() == Some(OLD)
    }
}

/// The host changes the names of the directories in `changed` while
/// LOOKUPs in the directories `lookups` lists are served; the watcher
/// reads the events, invalidates, and asks per directory whether to
/// repeat.
fn host_change_racing(lookups: &'static [usize], changed: &'static [usize]) {
    assert_ne!(slot_of(DIRS[0]), slot_of(DIRS[1]));
    loom::model(move || {
        let w = World::new();
        let readers: Vec<_> = lookups
            .iter()
            .map(|&d| {
                let w = w.clone();
                thread::spawn(move || w.lookup(d))
            })
            .collect();
        for &d in changed {
            w.names[d].source.store(NEW, Ordering::Relaxed);
        }
        for &d in changed {
            w.invalidate(d);
        }
        let repeat: Vec<usize> = changed
            .iter()
            .copied()
            .filter(|&d| w.race.may_have_raced(DIRS[d]))
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        // The repeats go out later, by when a racing reply's name is in
        // the dcache (what the model's join stands for).
        for &d in &repeat {
            w.invalidate(d);
        }
        for &d in changed {
            assert!(
                !w.stale(d),
                "a name read before the change outlived its invalidation"
            );
            if !lookups.contains(&d) {
                assert!(
                    !repeat.contains(&d),
                    "re-sent for a directory no reply was about"
                );
            }
        }
    });
}

#[test]
fn one_lookup_racing_a_change_leaves_no_stale_name() {
    host_change_racing(&[0], &[0]);
}

#[test]
fn two_lookups_racing_a_change_leave_no_stale_name() {
    host_change_racing(&[0, 0], &[0]);
}

#[test]
fn a_lookup_elsewhere_causes_no_resend() {
    host_change_racing(&[1], &[0]);
}

#[test]
fn lookups_in_two_directories_racing_changes_in_both() {
    host_change_racing(&[0, 1], &[0, 1]);
}
