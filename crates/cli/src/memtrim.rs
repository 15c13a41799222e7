//! Gives freed memory back to the system while the server runs.
//!
//! mimalloc returns freed pages to the OS after a purge delay (1 s), and
//! only when some thread allocates or frees again once the delay has
//! passed. A server that goes idle right after `rm` of 10 GiB of memfs
//! files kept all 10 GiB resident until its next burst of work, for ever
//! if none came (measured: 500 MiB written and removed, RSS stayed at
//! 560 MiB); tmpfs gives its pages back at once. Purging with no delay
//! fixes that too but makes the vnode cache's steady alloc/free churn
//! re-fault what it frees (statstorm's two-thread rows ran slower with
//! it). So this thread asks the allocator for what has passed the delay,
//! once a second while the process is busy and for a few seconds after;
//! idle, it only reads the process's CPU clock once a second. (Blocks a
//! request thread freed for another are that thread's to collect: the
//! FUSE layer has each request thread do so as it serves,
//! `uvfs_fuse::set_memory_release`.)

use std::io;
use std::time::Duration;

/// How often the thread looks.
const TICK: Duration = Duration::from_secs(1);

/// Ticks it keeps trimming after the process last used CPU: longer than
/// the purge delay, so the last frees of a burst are released too.
const TICKS_AFTER_BUSY: u32 = 3;

/// Starts the trimming thread. Call it after the signal mask is set: the
/// thread inherits it and must leave termination signals to the server.
pub fn start() -> io::Result<()> {
    std::thread::Builder::new()
        .name("uvfs-memtrim".into())
        .spawn(run)?;
    Ok(())
}

fn run() {
    // The allocator collects through the calling thread's heap, which
    // exists once the thread has allocated.
    let _heap = std::hint::black_box(Box::new(0u64));
    let mut last = process_cpu();
    let mut left = 0;
    loop {
        std::thread::sleep(TICK);
        if process_cpu() != last {
            left = TICKS_AFTER_BUSY;
        }
        if left > 0 {
            left -= 1;
            uvfs_bench::alloc::return_freed_memory();
        }
        // Read after trimming, so the trim's own CPU does not count as
        // the process being busy and keep the thread going for ever.
        last = process_cpu();
    }
}

/// CPU time of the whole process, in nanoseconds.
fn process_cpu() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a
    // constant the kernel always knows.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
