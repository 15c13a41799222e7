//! Request threads hand their allocator's freed memory back as they go.
//!
//! With a thread-caching allocator (the `uvfs` binary's mimalloc) a block
//! freed by a thread other than the one that allocated it goes back to
//! the owner's page only when the owner next looks, and a page goes back
//! to the system only once its owner finds it empty. The request threads
//! allocate a file's inode, vnode and names, and any of them may free
//! them: after `rm -r` of 200,000 memfs files, 62 MiB of the server's
//! 121 MiB were free blocks that no owner had collected (the live heap
//! was 59 MiB), and they stayed. So each request thread asks the
//! allocator to collect its own heap at most every [`EVERY`] while it
//! serves requests (75 MiB resident after the same removal). What a
//! thread frees in its last half second before going idle, and pages
//! whose purge the allocator delays, are the process's trimming thread's
//! to release (`uvfs` binary, memtrim.rs).
//!
//! The hook is process-wide because the allocator is: the binary names
//! its allocator's collection function once, before serving.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Least time between two collections by one thread.
const EVERY: Duration = Duration::from_millis(500);

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// Names the function that makes the allocator give the calling thread's
/// free memory back; request threads call it as they serve. Only the
/// first call counts.
pub fn set_memory_release(release: fn()) {
    let _ = RELEASE.set(release);
}

thread_local! {
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Called once per request: collects this thread's heap if it has not
/// for [`EVERY`]. Without a release function it only reads one atomic.
pub(crate) fn on_request() {
    let Some(release) = RELEASE.get() else {
        return;
    };
    LAST.with(|last| {
        let now = Instant::now();
        if last.get().is_none_or(|t| now.duration_since(t) >= EVERY) {
            last.set(Some(now));
            release();
        }
    });
}
