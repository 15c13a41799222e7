//! Where a queue thread runs, and at which priority it waits.
//!
//! Each queue's thread is pinned to its CPU (`pin_to_cpu`), the CPU whose
//! callers the kernel queues there.
//!
//! The reply wakes the caller from the queue thread, on the caller's own
//! CPU, while that thread still runs there; the scheduler then moves the
//! caller to an idle CPU if there is one, after nearly every request, and
//! every request after that starts on a CPU whose queue thread must be
//! woken across CPUs. A thread of policy SCHED_IDLE does not make its CPU
//! busy for that choice, so while the other queues are quiet (one caller)
//! the queue thread waits, and commits, at idle priority: the caller stays
//! and preempts it at once. While other queues are busy there is no idle
//! CPU to move to and the two policy switches would only cost time (with
//! two callers, idle priority always on is slower than none).
//! docs/results.md ("FUSE over io_uring") has the migrations and walk
//! times either way.
//!
//! The policy changes only when the other queues go quiet or busy, not
//! around every wait: each `sched_setscheduler` call takes the run queue's
//! lock with interrupts off, and two per request are a large share of a
//! round trip that is itself only a few context switches. Serving at idle
//! priority too risks nothing the idle wait did not: the request is only
//! seen once the thread has been woken and run at that priority anyway.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use log::warn;

/// Pins this thread to `cpu`; if that fails (logged), the queue is served
/// from wherever the thread runs.
pub(super) fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it
    // for cpu < CPU_SETSIZE (checked); sched_setaffinity reads the set.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            warn!(
                "fuse uring queue {cpu}: not pinned: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// Requests served per queue, so a queue can tell whether others are busy.
pub(crate) struct Activity(Box<[Padded]>);

#[repr(align(128))]
struct Padded(std::sync::atomic::AtomicU64);

impl Activity {
    pub(crate) fn new(queues: usize) -> Arc<Activity> {
        Arc::new(Activity(
            (0..queues)
                .map(|_| Padded(std::sync::atomic::AtomicU64::new(0)))
                .collect(),
        ))
    }

    pub(super) fn add(&self, qid: usize, n: u64) {
        // Relaxed: a hint for the other queues' policy, nothing else.
        self.0[qid].0.fetch_add(n, Ordering::Relaxed);
    }

    fn others(&self, qid: usize) -> u64 {
        self.0
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != qid)
            .map(|(_, c)| c.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

/// Consecutive waits with no request served by any other queue before
/// this one waits at idle priority.
const QUIET_WAITS: u32 = 4;

pub(super) struct Placement {
    usable: bool,
    others_seen: u64,
    quiet: u32,
    /// Whether this thread is SCHED_IDLE now.
    idle: bool,
}

impl Placement {
    /// Usable if this thread runs under SCHED_OTHER as root: an
    /// unprivileged thread may enter SCHED_IDLE but, with the usual
    /// RLIMIT_NICE of 0, never leave it. Tried once here;
    /// `UVFS_URING_IDLE_WAIT=0` turns it off for comparisons.
    pub(super) fn new() -> Placement {
        let off = std::env::var_os("UVFS_URING_IDLE_WAIT").is_some_and(|v| v == "0");
        // SAFETY: geteuid and sched_getscheduler(0) only read this
        // thread's credentials and policy.
        let (root, other) = unsafe {
            (
                libc::geteuid() == 0,
                libc::sched_getscheduler(0) == libc::SCHED_OTHER,
            )
        };
        let usable =
            !off && root && other && set_policy(libc::SCHED_IDLE) && set_policy(libc::SCHED_OTHER);
        Placement {
            usable,
            others_seen: 0,
            quiet: 0,
            idle: false,
        }
    }

    /// Before a wait: whether to wait (and commit) at idle priority.
    fn idle_wait(&mut self, act: &Activity, qid: usize) -> bool {
        if !self.usable {
            return false;
        }
        let others = act.others(qid);
        if others == self.others_seen {
            self.quiet = self.quiet.saturating_add(1);
        } else {
            self.others_seen = others;
            self.quiet = 0;
        }
        self.quiet >= QUIET_WAITS
    }

    /// Before a wait: moves this thread to the policy `idle_wait` asks
    /// for, if it is not there already.
    pub(super) fn settle(&mut self, act: &Activity, qid: usize) {
        let want = self.idle_wait(act, qid);
        if want == self.idle {
            return;
        }
        let policy = if want { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
        if set_policy(policy) {
            self.idle = want;
        } else if !want {
            // Cannot happen once the probe passed; if it does, stop trying
            // rather than keep switching.
            self.usable = false;
        }
    }
}

fn set_policy(policy: libc::c_int) -> bool {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is this thread; the param is a valid struct.
    unsafe { libc::sched_setscheduler(0, policy, &p) == 0 }
}
