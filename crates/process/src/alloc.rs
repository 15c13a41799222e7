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
use libmimalloc_sys as ffi;
#[cfg(uvfs_tsan)]
use std::alloc::System;
use std::alloc::{GlobalAlloc, Layout};
#[cfg(not(uvfs_tsan))]
use std::ffi::c_void;
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

/// `malloc`'s alignment guarantee on 64-bit targets (`max_align_t`).
#[cfg(not(uvfs_tsan))]
const MIN_ALIGN: usize = 16;

/// Whether mimalloc's plain `mi_malloc` of `size` bytes is aligned to
/// `align`, so that it need not be asked for alignment.
///
/// The `mimalloc` crate passes every allocation to `mi_malloc_aligned`,
/// whose fast path needs a free block already on the page of the size's
/// class; when there is none (a full or new page), a size that is not a
/// power of two is over-allocated by `align - 1` bytes, into the next
/// class: an `Arc` of 80 bytes (a cached vnode, a passthrough node) would
/// take a 96-byte block, one of 96 a 112-byte one. `mi_malloc` is aligned
/// for any type of its size up to 16 bytes of alignment (it is a
/// conforming `malloc`), which covers every type here but explicitly
/// over-aligned ones; Rust's own `System` decides the same way.
#[cfg(not(uvfs_tsan))]
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc (the system allocator under
// ThreadSanitizer) with at least the layout's size and alignment (`plain`
// only where `mi_malloc` guarantees it, `mi_*_aligned` otherwise), and
// every block mimalloc made, aligned or not, may be given to `mi_free`
// and `mi_realloc*`; counting adds only relaxed counter updates.
unsafe impl GlobalAlloc for Counting {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as isize);
        // SAFETY: mimalloc's allocation functions have no preconditions;
        // System's has the caller's (a non-zero-size layout).
        unsafe {
            #[cfg(not(uvfs_tsan))]
            let p = if plain(l.align(), l.size()) {
                ffi::mi_malloc(l.size()).cast()
            } else {
                ffi::mi_malloc_aligned(l.size(), l.align()).cast()
            };
            #[cfg(uvfs_tsan)]
            let p = System.alloc(l);
            p
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as isize));
        // SAFETY: `p` is a live block of this allocator's with layout `l`
        // (the caller's contract).
        unsafe {
            #[cfg(not(uvfs_tsan))]
            ffi::mi_free(p.cast::<c_void>());
            #[cfg(uvfs_tsan)]
            System.dealloc(p, l);
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size() as isize);
        // SAFETY: as `alloc`.
        unsafe {
            #[cfg(not(uvfs_tsan))]
            let p = if plain(l.align(), l.size()) {
                ffi::mi_zalloc(l.size()).cast()
            } else {
                ffi::mi_zalloc_aligned(l.size(), l.align()).cast()
            };
            #[cfg(uvfs_tsan)]
            let p = System.alloc_zeroed(l);
            p
        }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new as isize - l.size() as isize);
        // SAFETY: `p` is a live block of this allocator's with layout `l`
        // (the caller's contract); the new block keeps its alignment.
        unsafe {
            #[cfg(not(uvfs_tsan))]
            let q = if plain(l.align(), new) {
                ffi::mi_realloc(p.cast::<c_void>(), new).cast()
            } else {
                ffi::mi_realloc_aligned(p.cast::<c_void>(), new, l.align()).cast()
            };
            #[cfg(uvfs_tsan)]
            let q = System.realloc(p, l, new);
            q
        }
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
