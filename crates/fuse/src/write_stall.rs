//! Whether WRITEs have lately waited, so io_uring queue threads hand the
//! next ones to the offload pool.
//!
//! A buffered write to a passthrough's backing file system returns once
//! its data is in the page cache, unless the kernel throttles the writer
//! because too much of the cache is dirty (`balance_dirty_pages`): then it
//! sleeps, up to 200 ms at a time, for as long as the disk is behind.
//! Served on an io_uring queue thread, which serves its CPU's requests one
//! at a time, such a write holds up every request from programs on that
//! CPU: a shell's `ls` waits behind a `dd`. Nothing says beforehand that
//! a write will wait (ext4 refuses buffered `RWF_NOWAIT` writes), and
//! sending every write to the pool would cost each a copy of its data and
//! a thread hand-off. So a write that took [`STALL`] or more opens a
//! window of [`WINDOW`] in which writes go to the pool, and a write that
//! waits there renews it: under sustained throttling only the first write
//! of a burst holds up its queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A write that took this long and slept waited for something (a disk, a
/// throttle) rather than for memory copies: a 1 MiB write to a page cache
/// is a memory copy, well under a millisecond. It must also have slept (a
/// voluntary context switch): on two busy cores a write preempted for a
/// time slice takes as long without having waited for anything.
pub(crate) const STALL: Duration = Duration::from_millis(5);
/// How long after a stalled write the next writes go to the pool.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);

/// The window (one per server).
pub(crate) struct WriteStalls {
    epoch: Instant,
    /// End of the window, in microseconds since `epoch`; 0: never opened.
    until_us: AtomicU64,
    /// Writes that took [`STALL`] or more.
    pub(crate) stalls: AtomicU64,
}

impl Default for WriteStalls {
    fn default() -> WriteStalls {
        WriteStalls {
            epoch: Instant::now(),
            until_us: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
        }
    }
}

impl WriteStalls {
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Whether writes are to go to the pool now. A server whose writes
    /// never waited reads one atomic and no clock.
    pub(crate) fn open(&self) -> bool {
        let until = self.until_us.load(Ordering::Relaxed);
        until != 0 && self.now_us() < until
    }

    /// Runs a write, opening the window if it waited.
    pub(crate) fn timed<T>(&self, write: impl FnOnce() -> T) -> T {
        let slept = voluntary_switches();
        let start = Instant::now();
        let r = write();
        if start.elapsed() >= STALL && voluntary_switches() != slept {
            self.stalls.fetch_add(1, Ordering::Relaxed);
            let until = self.now_us() + WINDOW.as_micros() as u64;
            self.until_us.fetch_max(until, Ordering::Relaxed);
        }
        r
    }
}

/// Times the calling thread gave up the CPU to wait (sleeps, locks, I/O),
/// as opposed to being preempted.
fn voluntary_switches() -> i64 {
    crate::rusage::rusage(libc::RUSAGE_THREAD).map_or(0, |ru| ru.ru_nvcsw)
}

impl crate::report::Counted for WriteStalls {
    fn report(&self, out: &mut crate::report::Report) {
        out.put(
            "fuse.writes.stalled",
            self.stalls.load(Ordering::Relaxed),
            "WRITEs that took 5 ms or more and slept meanwhile (dirty-page throttling, a slow disk; not preemption); for a second after one, WRITEs from io_uring queues are answered from pool threads",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_write_opens_the_window_and_a_fast_one_does_not() {
        let w = WriteStalls::default();
        assert!(!w.open());
        assert_eq!(w.timed(|| 7), 7);
        assert!(!w.open(), "a fast write opened it");
        w.timed(|| std::thread::sleep(STALL + Duration::from_millis(1)));
        assert!(w.open());
        assert_eq!(w.stalls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_slow_write_that_never_slept_does_not_open_it() {
        // As if preempted: as long as a stall, all of it on the CPU.
        let w = WriteStalls::default();
        w.timed(|| {
            let start = Instant::now();
            while start.elapsed() < STALL * 2 {
                std::hint::spin_loop();
            }
        });
        assert!(!w.open());
        assert_eq!(w.stalls.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_window_closes() {
        let w = WriteStalls::default();
        w.timed(|| std::thread::sleep(STALL + Duration::from_millis(1)));
        // Moved back in time rather than waited for.
        let now = w.now_us();
        w.until_us
            .store(now.saturating_sub(1).max(1), Ordering::Relaxed);
        assert!(!w.open());
    }
}
