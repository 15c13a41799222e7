//! Giving the allocator's freed memory back to the system while the
//! server runs, as tmpfs gives back a removed file's pages at once.
//!
//! Two things kept it with a thread-caching allocator (the `uvfs`
//! binary's mimalloc):
//!
//! - A block freed by a thread other than the one that allocated it goes
//!   back to the owner's page only when the owner next looks, and a page
//!   goes back to the allocator only once its owner finds it empty. The
//!   request threads allocate a file's inode, vnode and names, and any of
//!   them may free them: after an `rm -r` of many memfs files, about half
//!   of the server's resident heap can be free blocks no owner collected,
//!   and they stay. So each request thread has the allocator collect its
//!   own heap at most every [`EVERY`] while it serves.
//! - mimalloc returns empty pages to the system after a purge delay (1 s),
//!   and only when some thread allocates or frees again once it passed: a
//!   server that goes idle right after an `rm` of many memfs files keeps
//!   their pages resident for good. Purging with no delay makes the vnode
//!   cache's steady alloc/free churn re-fault what it frees, which slows
//!   a walk (docs/design/fuse-server.md), so a trimming thread asks for
//!   what has passed the delay instead: once a [`TICK`] while requests
//!   come and for [`QUIET_TICKS`] after the last, then it sleeps until
//!   the next request; an idle server costs it no wakeups.
//!
//! The hook is process-wide because the allocator is: the binary names
//! its allocator's collection function once, before serving.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Least time between two collections by one request thread.
const EVERY: Duration = Duration::from_millis(500);
/// How often the trimming thread asks while the server is busy.
const TICK: Duration = Duration::from_secs(1);
/// Ticks without requests after which the trimming thread sleeps: longer
/// than the purge delay, so the last frees of a burst go back too.
const QUIET_TICKS: u32 = 3;

static RELEASE: OnceLock<(fn(), Trimmer)> = OnceLock::new();

/// Names the function that makes the allocator give the calling thread's
/// free memory back, and starts the trimming thread. Request threads call
/// the function as they serve. Only the first call counts. Call it after
/// blocking the termination signals: the thread inherits the mask and
/// must leave those signals to the server.
pub fn set_memory_release(release: fn()) -> std::io::Result<()> {
    if RELEASE.set((release, Trimmer::default())).is_err() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("uvfs-memtrim".into())
        .spawn(move || trim(release))?;
    Ok(())
}

thread_local! {
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Called once per request: collects this thread's heap if it has not
/// for [`EVERY`], and then tells the trimming thread the server is busy.
/// Without a release function it only reads one atomic.
pub(crate) fn on_request() {
    let Some((release, trimmer)) = RELEASE.get() else {
        return;
    };
    LAST.with(|last| {
        let now = Instant::now();
        if last.get().is_none_or(|t| now.duration_since(t) >= EVERY) {
            last.set(Some(now));
            release();
            trimmer.busy();
        }
    });
}

/// The trimming thread's bell.
#[derive(Default)]
struct Trimmer {
    state: Mutex<TrimState>,
    bell: Condvar,
}

#[derive(Default)]
struct TrimState {
    /// A request thread collected since the trimming thread last looked.
    busy: bool,
    /// The trimming thread waits for `busy`.
    asleep: bool,
}

impl Trimmer {
    /// At most twice a second per request thread, so a lock is cheap.
    fn busy(&self) {
        let mut s = self.state.lock();
        s.busy = true;
        if s.asleep {
            s.asleep = false;
            self.bell.notify_one();
        }
    }

    /// Waits until a request thread says the server is busy.
    fn wait_busy(&self) {
        let mut s = self.state.lock();
        while !s.busy {
            s.asleep = true;
            self.bell.wait(&mut s);
        }
        s.asleep = false;
    }

    /// Whether a request thread said so since the last look.
    fn take_busy(&self) -> bool {
        std::mem::take(&mut self.state.lock().busy)
    }
}

fn trim(release: fn()) {
    // The allocator collects through the calling thread's heap, which
    // exists once the thread has allocated.
    let _heap = std::hint::black_box(Box::new(0u64));
    let trimmer = &RELEASE.get().expect("set before the thread starts").1;
    loop {
        trimmer.wait_busy();
        let mut quiet = 0;
        while quiet < QUIET_TICKS {
            std::thread::sleep(TICK);
            release();
            if trimmer.take_busy() {
                quiet = 0;
            } else {
                quiet += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_trimmer_sleeps_until_a_request_thread_is_busy() {
        let t = Arc::new(Trimmer::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let t = t.clone();
            std::thread::spawn(move || {
                t.wait_busy();
                tx.send(()).unwrap();
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        t.busy();
        rx.recv_timeout(Duration::from_secs(30))
            .expect("woken by busy");
        waiter.join().unwrap();
        // The busy that woke it is still there for its first look, and
        // gone after.
        assert!(t.take_busy());
        assert!(!t.take_busy());
    }

    #[test]
    fn busy_before_the_wait_is_not_lost() {
        let t = Trimmer::default();
        t.busy();
        t.wait_busy(); // returns at once
        assert!(t.take_busy());
    }
}
