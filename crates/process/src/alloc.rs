//! The `uvfs` binary's global allocator: mimalloc (per-thread free lists
//! and no arena-wide consolidation, which glibc's malloc did on the vnode
//! cache's steady alloc/free churn), counting live bytes on demand so the
//! memory workload measures real heap bytes per vnode rather than
//! estimating them from `size_of`. Counting is off unless a measurement
//! turns it on: a shared counter bumped on every allocation would bounce a
//! cache line between cores and distort every other benchmark.
//!
//! ThreadSanitizer builds (`--cfg uvfs_tsan`, scripts/tsan.sh) use the
//! system allocator instead: TSan intercepts malloc and free to learn that
//! a freed block's next owner is not racing with its last one, and cannot
//! see inside mimalloc, so every reused block would be reported as a race.

#[cfg(not(uvfs_tsan))]
use mimalloc::MiMalloc as System;
#[cfg(uvfs_tsan)]
use std::alloc::System;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ON: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting live bytes while [`measure`] runs.
pub struct Counting;

#[inline]
fn count(delta: isize) {
    if ON.load(Ordering::Relaxed) {
        LIVE.fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the same arguments and
// only adds relaxed counter updates, so System's guarantees carry over.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as isize);
        // SAFETY: forwarded contract (non-zero-size layout from the caller).
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as isize));
        // SAFETY: `p` was allocated by `System` with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size() as isize);
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new as isize - l.size() as isize);
        // SAFETY: `p` came from `System` with layout `l`; forwarded contract.
        unsafe { System.realloc(p, l, new) }
    }
}

/// Marks the counting allocator as installed (the binary calls this).
pub fn mark_installed() {
    INSTALLED.store(true, Ordering::Relaxed);
}

/// Net heap bytes allocated by `f` (single-threaded use: other threads'
/// allocations during `f` count too). `None` if the counting allocator is
/// not the global allocator.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Option<isize>) {
    if !INSTALLED.load(Ordering::Relaxed) {
        return (f(), None);
    }
    LIVE.store(0, Ordering::Relaxed);
    ON.store(true, Ordering::SeqCst);
    let out = f();
    ON.store(false, Ordering::SeqCst);
    (out, Some(LIVE.load(Ordering::Relaxed)))
}

/// Asks the allocator to collect the calling thread's heap (blocks other
/// threads freed into it) and give the system back what was freed more
/// than its purge delay ago; the server calls it from its request threads
/// and a trimming thread (crates/fuse/src/release.rs says why). It works
/// through the calling thread's own heap, which mimalloc creates at the
/// thread's first allocation: call it from a thread that has allocated.
pub fn return_freed_memory() {
    #[cfg(not(uvfs_tsan))]
    // SAFETY: mi_collect has no preconditions; any thread may call it at
    // any time, and without `force` it only releases what is free.
    unsafe {
        libmimalloc_sys::mi_collect(false)
    };
    #[cfg(uvfs_tsan)]
    // SAFETY: malloc_trim has no preconditions; it only releases free
    // memory of the system allocator's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
