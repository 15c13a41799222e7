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
    // SAFETY: an all-ones cpu_set_t is a valid set (the kernel keeps the
    // CPUs that exist and are allowed); sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Both: the calling thread runs anywhere, at the normal policy.
pub(crate) fn detach_from_creator() {
    unpin_current_thread();
    normal_policy();
}
