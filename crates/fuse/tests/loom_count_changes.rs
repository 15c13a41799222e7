//! Model check of the changed-node list a live upgrade's copy ahead of
//! parking relies on (`src/count_changes.rs`): on every interleaving of
//! the copy reading a count after `start` and a request changing that
//! count, the copy read the new count or the change was recorded.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p uvfs-fuse
//! --test loom_count_changes` (`.ci/run` does).
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use uvfs_fuse::count_changes::CountChanges;

/// A node's kernel count as the vnode keeps it (`ext`, changed with
/// AcqRel read-modify-writes and read with Acquire loads; the model
/// uses Relaxed, weaker, so it holds for them too).
struct World {
    count: AtomicU64,
    changes: CountChanges,
}

const NODE: u64 = 7;

#[test]
fn a_change_racing_the_copy_is_read_or_recorded() {
    loom::model(|| {
        let w = Arc::new(World {
            count: AtomicU64::new(1),
            changes: CountChanges::default(),
        });
        let r = w.clone();
        let request = thread::spawn(move || {
            r.count.fetch_add(1, Ordering::Relaxed);
            r.changes.changed(NODE);
        });
        w.changes.start();
        let copied = w.count.load(Ordering::Relaxed);
        request.join().unwrap();
        let changed = w.changes.stop();
        assert!(
            copied == 2 || changed == [NODE],
            "the copy read {copied} and the change was not recorded"
        );
    });
}

#[test]
fn two_changes_racing_the_copy_are_each_read_or_recorded() {
    loom::model(|| {
        let w = Arc::new(World {
            count: AtomicU64::new(1),
            changes: CountChanges::default(),
        });
        let threads: Vec<_> = [NODE, NODE + 1]
            .into_iter()
            .map(|id| {
                let r = w.clone();
                thread::spawn(move || {
                    // Node NODE's count is `count`; the other's is not
                    // modeled, only its record.
                    if id == NODE {
                        r.count.fetch_sub(1, Ordering::Relaxed);
                    }
                    r.changes.changed(id);
                })
            })
            .collect();
        w.changes.start();
        let copied = w.count.load(Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let changed = w.changes.stop();
        assert!(copied == 0 || changed.contains(&NODE), "lost: {changed:?}");
        assert!(changed.windows(2).all(|p| p[0] < p[1]), "{changed:?}");
    });
}
