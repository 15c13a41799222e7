//! Freeing a large file's pages off the request path.
//!
//! tmpfs frees a removed file's pages in the kernel, preemptibly, after
//! `unlink(2)` has unlocked the directory, so a `stat` on the same CPU
//! hardly waits. Freeing them in the request that lets the file go (the
//! FORGET, UNLINK or RELEASE that drops its last reference, or the
//! truncate) takes a noticeable fraction of a second for gigabytes of
//! 4 KiB pages, during which the io_uring queue of that CPU serves nothing
//! else (`FS=memfs DROP=1 scripts/large-removal-latency.sh`, which first
//! drops the kernel's own cached copy, whose eviction in `rm`'s context no
//! server can move; figures in docs/results.md, "FUSE over io_uring"). So
//! the pages of a file (or of a truncated tail) of [`REAP_PAGES`] or more
//! go to a thread of their own to be freed; their budget is given back at
//! once, as tmpfs's `df` shows the space free when `rm` returns.
//!
//! The thread is the process's (`uvfs_vfs::DropLater`), started on first
//! use. At most [`MAX_PENDING_PAGES`] wait for it at once (memory already
//! given back to the budget but not yet to the system): past that, pages
//! are freed in place.

use uvfs_vfs::DropLater;

/// Pages (4 KiB) from which freeing goes to the reaper: 64 MiB, whose
/// freeing takes milliseconds, next to a hand-off's microseconds.
pub(crate) const REAP_PAGES: u64 = 16 * 1024;
/// Most pages waiting to be freed at once: 4 GiB.
pub(crate) const MAX_PENDING_PAGES: u64 = 1 << 20;

/// The reaper (all memfs instances of the process), weighed in pages.
pub(crate) static REAPER: DropLater = DropLater::new("memfs-reaper", MAX_PENDING_PAGES);

/// Frees `pages` (`n` of them, freed when the value drops) on the reaper
/// if they are many and there is room, here otherwise.
pub(crate) fn free<T: Send + 'static>(pages: T, n: u64) {
    if n >= REAP_PAGES {
        REAPER.drop_later(pages, n);
    }
    // (Otherwise they drop here, at the end of this call.)
}
