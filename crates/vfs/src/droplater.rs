//! Dropping what is slow to drop on a thread of its own, after the
//! request that let it go.
//!
//! A request thread that frees a large file's memory (memfs) or closes
//! the last fd of a removed large file (passthrough: the backing file
//! system frees its blocks in that close) holds up every request queued
//! behind it. A `DropLater` takes such values and drops them on a thread
//! started on first use. It bounds what may wait: each value comes with a
//! weight (pages, fds), and past `max_pending` of them the caller drops in
//! place, as it would without one. Meant to be a `static`: the thread
//! lives as long as the process once started, idle on its queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

type Item = (u64, Box<dyn Send>);

/// A background dropper for values whose drop is slow (large frees, last
/// closes), bounded by a total weight; see the module notes.
pub struct DropLater {
    name: &'static str,
    max_pending: u64,
    /// The thread's queue; `None` until first use (or after the thread
    /// could not be had).
    queue: Mutex<Option<Sender<Item>>>,
    /// Weight reserved or waiting for the thread.
    pending: AtomicU64,
    /// Weight the thread has dropped.
    done: AtomicU64,
}

impl DropLater {
    /// A dropper whose thread is named `name`, letting at most
    /// `max_pending` weight wait at once.
    pub const fn new(name: &'static str, max_pending: u64) -> DropLater {
        DropLater {
            name,
            max_pending,
            queue: Mutex::new(None),
            pending: AtomicU64::new(0),
            done: AtomicU64::new(0),
        }
    }

    /// Takes `weight` of the room, if there is that much.
    pub fn reserve(&self, weight: u64) -> bool {
        self.pending
            .try_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p + weight <= self.max_pending).then_some(p + weight)
            })
            .is_ok()
    }

    /// Gives back room [`reserve`](Self::reserve) took, unused.
    pub fn unreserve(&self, weight: u64) {
        self.pending.fetch_sub(weight, Ordering::AcqRel);
    }

    /// Drops `item`, for which `weight` was reserved, on the thread, or
    /// here if no thread can be had.
    pub fn drop_reserved<T: Send + 'static>(&'static self, item: T, weight: u64) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.is_none() {
            *q = self.start();
        }
        let sent = match q.as_ref() {
            Some(tx) => tx.send((weight, Box::new(item))).map_err(|e| e.0 .1),
            None => Err(Box::new(item) as Box<dyn Send>),
        };
        if let Err(item) = sent {
            *q = None;
            drop(q);
            drop(item);
            self.unreserve(weight);
        }
    }

    /// Drops `item` of `weight` on the thread if there is room, here
    /// otherwise.
    pub fn drop_later<T: Send + 'static>(&'static self, item: T, weight: u64) {
        if self.reserve(weight) {
            self.drop_reserved(item, weight);
        }
        // (Otherwise `item` drops here, at the end of this call.)
    }

    /// Returns once every value handed to the thread before this call is
    /// dropped (a wait bounded by `max_pending` weight). For an answer
    /// that must see their drops done, as a file system's free space
    /// must see the frees of the files removed before it was asked.
    pub fn flush(&'static self) {
        if self.pending() == 0 {
            return;
        }
        /// Dropped on the thread after everything queued before it.
        struct Mark(std::sync::mpsc::SyncSender<()>);
        impl Drop for Mark {
            fn drop(&mut self) {
                let _ = self.0.try_send(());
            }
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let sent = {
            let q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.as_ref()
                .is_some_and(|q| q.send((0, Box::new(Mark(tx)))).is_ok())
        };
        if sent {
            // An error means the thread is gone, and with it what it held.
            let _ = rx.recv();
        }
    }

    /// Weight dropped on the thread so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Weight reserved or waiting for the thread now.
    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::Acquire)
    }

    fn start(&'static self) -> Option<Sender<Item>> {
        let (tx, rx) = channel::<Item>();
        std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || {
                for (weight, item) in rx {
                    drop(item);
                    self.done.fetch_add(weight, Ordering::Relaxed);
                    self.unreserve(weight);
                }
            })
            .ok()?;
        Some(tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Records on which thread it was dropped.
    struct Probe(Arc<Mutex<Vec<String>>>);

    impl Drop for Probe {
        fn drop(&mut self) {
            let name = std::thread::current().name().unwrap_or("").to_string();
            self.0.lock().unwrap().push(name);
        }
    }

    /// Holds up its drop until told.
    struct Gate(std::sync::mpsc::Receiver<()>);

    impl Drop for Gate {
        fn drop(&mut self) {
            let _ = self.0.recv_timeout(Duration::from_secs(10));
        }
    }

    static D: DropLater = DropLater::new("droplater-test", 10);

    #[test]
    fn values_drop_on_the_thread_within_the_bound_and_in_place_past_it() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let here = std::thread::current().name().unwrap_or("").to_string();
        let deadline = Instant::now() + Duration::from_secs(10);

        D.drop_later(Probe(seen.clone()), 4);
        while seen.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "never dropped");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(seen.lock().unwrap()[0], "droplater-test");
        assert_eq!(D.done(), 4);
        while D.pending() > 0 {
            assert!(Instant::now() < deadline, "weight stays pending");
            std::thread::sleep(Duration::from_millis(1));
        }

        // The bound taken by a value whose drop waits: the next drops here.
        let (go, gate) = std::sync::mpsc::channel::<()>();
        D.drop_later(Gate(gate), 10);
        assert!(!D.reserve(1), "no room past the bound");
        D.drop_later(Probe(seen.clone()), 1);
        assert_eq!(seen.lock().unwrap()[1], here, "past the bound: in place");
        go.send(()).unwrap();
        while D.pending() > 0 {
            assert!(Instant::now() < deadline, "the gate stays pending");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(D.reserve(3), "room given back");
        D.unreserve(3);
    }

    static F: DropLater = DropLater::new("droplater-flush", 10);

    #[test]
    fn a_flush_returns_once_what_was_queued_before_it_is_dropped() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        // Nothing queued: at once.
        F.flush();
        let (go, gate) = std::sync::mpsc::channel::<()>();
        F.drop_later(Gate(gate), 1);
        F.drop_later(Probe(seen.clone()), 1);
        let flushed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let flushed = flushed.clone();
            std::thread::spawn(move || {
                F.flush();
                flushed.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !flushed.load(std::sync::atomic::Ordering::SeqCst),
            "returned while a value queued before it was still waiting"
        );
        go.send(()).unwrap();
        waiter.join().unwrap();
        assert_eq!(seen.lock().unwrap().len(), 1, "the later value dropped too");
    }
}
