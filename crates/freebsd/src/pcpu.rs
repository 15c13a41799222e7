//! Per-CPU emulation: a fixed array of slots indexed by a thread-local slot.
//!
//! # Why
//!
//! FreeBSD keeps several hot structures per CPU (`DPCPU_DEFINE(struct vdbatch,
//! vd)`, `PCPU(vfs_freevnodes)`, UMA's per-CPU buckets) and reaches them
//! inside `critical_enter()`/`sched_pin()`. Userspace cannot pin, so each
//! thread is given a slot the first time it touches the VFS, round-robin
//! over `ncpus` slots. Threads sharing a slot behave like threads sharing a
//! CPU: they serialise on that slot's lock or atomics, which is what the
//! kernel's critical sections give.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Next slot handed out; only ever incremented.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot number before reduction modulo the CPU count;
    /// `usize::MAX` until first use.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Number of emulated CPUs (`mp_ncpus`): the machine's parallelism.
pub(crate) fn ncpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The calling thread's emulated CPU (`curcpu`), in `0..ncpus`.
#[inline]
pub(crate) fn curcpu(ncpus: usize) -> usize {
    let raw = SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        // Relaxed: the value only has to be unique-ish, nothing is published.
        let v = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
        s.set(v);
        v
    });
    raw % ncpus.max(1)
}
