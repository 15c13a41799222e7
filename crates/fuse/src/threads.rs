//! Undoing what a thread inherits from the thread that started it.
//!
//! A helper thread (`lockwait.rs`, `offload.rs`) may be started by its
//! first request, on an io_uring queue thread: pinned to one CPU and
//! perhaps serving at SCHED_IDLE (`uring.rs`'s placement). A new thread
//! inherits both, and would then wait behind every busy thread of that
//! one CPU. These reset them; both are no-ops for a thread that has
//! neither.

/// Gives the calling thread the normal time-sharing policy.
pub(crate) fn normal_policy() {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is this thread; `p` is a valid param for SCHED_OTHER.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) };
}

/// Lets the calling thread run on every CPU again.
pub(crate) fn unpin_current_thread() {
    // An all-ones set: the kernel keeps the CPUs that exist and are
    // allowed.
    let mut set = rustix::thread::CpuSet::new();
    for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
        set.set(cpu);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Both: the calling thread runs anywhere, at the normal policy.
pub(crate) fn detach_from_creator() {
    unpin_current_thread();
    normal_policy();
}

/// How much a thread that makes the kernel forget host changes is
/// preferred over the time-sharing threads it shares the cores with (a
/// nice value; the passthrough's watcher runs at the same): on busy
/// cores a thread of the default nice that wakes behind request threads
/// waits for one of them to use up its slice.
const PREFERRED_NICE: i32 = -10;

/// Prefers the calling thread ([`PREFERRED_NICE`]); nothing where the
/// process may not (a server that is not root).
pub(crate) fn prefer_current_thread() {
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), PREFERRED_NICE);
}
