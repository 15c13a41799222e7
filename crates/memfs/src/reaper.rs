//! Freeing a large file's pages off the request path.
//!
//! tmpfs frees a removed file's pages in the kernel, preemptibly, after
//! `unlink(2)` has unlocked the directory: a `stat` on the same CPU
//! during `rm` of a 2 GiB tmpfs file waited at most 2.5 ms. memfs freed
//! them in the request that let the file go (the FORGET, UNLINK or
//! RELEASE that dropped its last reference, or the truncate), ~0.1 s for
//! 2 GiB of 4 KiB pages, while the io_uring queue of that CPU served
//! nothing else: a `stat` from the same CPU waited 70-126 ms (1.4-60 ms
//! with this; `FS=memfs DROP=1 scripts/large-removal-latency.sh`, which
//! first drops the kernel's own cached copy, whose eviction in `rm`'s
//! context no server can move). So the pages of a file (or
//! of a truncated tail) of [`REAP_PAGES`] or more go to a thread of their
//! own to be freed; their budget is given back at once, as tmpfs's
//! `df` shows the space free when `rm` returns.
//!
//! The thread is the process's, started on first use. At most
//! [`MAX_PENDING_PAGES`] wait for it at once (memory already given back
//! to the budget but not yet to the system): past that, pages are freed
//! in place, as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

/// Pages (4 KiB) from which freeing goes to the reaper: 64 MiB, about
/// 5 ms of freeing, next to a hand-off's microseconds.
pub(crate) const REAP_PAGES: u64 = 16 * 1024;
/// Most pages waiting to be freed at once: 4 GiB.
pub(crate) const MAX_PENDING_PAGES: u64 = 1 << 20;

type Job = Box<dyn FnOnce() + Send>;

static PENDING: AtomicU64 = AtomicU64::new(0);
/// Pages freed by the reaper so far (all file systems of the process).
pub(crate) static REAPED: AtomicU64 = AtomicU64::new(0);
static QUEUE: Mutex<Option<Sender<(u64, Job)>>> = Mutex::new(None);

/// Frees `pages` (a map of `n` pages, anything that frees them on drop)
/// on the reaper thread if it is large and there is room, here otherwise.
pub(crate) fn free<T: Send + 'static>(pages: T, n: u64) {
    if n < REAP_PAGES || !reserve(n) {
        drop(pages);
        return;
    }
    let job: Job = Box::new(move || drop(pages));
    let mut q = QUEUE.lock().unwrap_or_else(|p| p.into_inner());
    if q.is_none() {
        *q = start();
    }
    let sent = match q.as_ref() {
        Some(tx) => tx.send((n, job)).map_err(|e| e.0 .1),
        None => Err(job),
    };
    if let Err(job) = sent {
        // No reaper: free here (the job drops the pages).
        *q = None;
        drop(q);
        PENDING.fetch_sub(n, Ordering::AcqRel);
        job();
    }
}

fn reserve(n: u64) -> bool {
    PENDING
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
            (p + n <= MAX_PENDING_PAGES).then_some(p + n)
        })
        .is_ok()
}

fn start() -> Option<Sender<(u64, Job)>> {
    let (tx, rx) = channel::<(u64, Job)>();
    std::thread::Builder::new()
        .name("memfs-reaper".into())
        .spawn(move || {
            for (n, job) in rx {
                job();
                REAPED.fetch_add(n, Ordering::Relaxed);
                PENDING.fetch_sub(n, Ordering::AcqRel);
            }
        })
        .ok()?;
    Some(tx)
}

/// Pages waiting for the reaper now.
pub(crate) fn pending() -> u64 {
    PENDING.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Counts its own drops, and on which thread they happened.
    struct Probe(Arc<Mutex<Vec<String>>>);

    impl Drop for Probe {
        fn drop(&mut self) {
            let name = std::thread::current().name().unwrap_or("").to_string();
            self.0.lock().unwrap().push(name);
        }
    }

    // One test: the pending bound is the process's, so parts run in
    // parallel would see each other's pages.
    #[test]
    fn large_frees_go_to_the_reaper_small_ones_and_those_past_the_bound_in_place() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let here = std::thread::current().name().unwrap_or("").to_string();
        free(Probe(seen.clone()), REAP_PAGES - 1);
        assert_eq!(seen.lock().unwrap().len(), 1, "small: at once");
        assert_eq!(seen.lock().unwrap()[0], here, "small: in place");

        let before = REAPED.load(Ordering::Relaxed);
        free(Probe(seen.clone()), REAP_PAGES);
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.lock().unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "the reaper never freed it");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(seen.lock().unwrap()[1], "memfs-reaper");
        assert!(REAPED.load(Ordering::Relaxed) >= before + REAP_PAGES);
        while pending() > 0 {
            assert!(Instant::now() < deadline, "pages stay pending");
            std::thread::sleep(Duration::from_millis(1));
        }

        // Fill the bound with a free that waits, then one more large one.
        struct Gate(std::sync::mpsc::Receiver<()>);
        impl Drop for Gate {
            fn drop(&mut self) {
                let _ = self.0.recv_timeout(Duration::from_secs(10));
            }
        }
        let (go, gate) = std::sync::mpsc::channel::<()>();
        free(Gate(gate), MAX_PENDING_PAGES);
        free(Probe(seen.clone()), REAP_PAGES);
        assert_eq!(seen.lock().unwrap()[2], here, "past the bound: in place");
        go.send(()).unwrap();
    }
}
