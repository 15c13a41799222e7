//! State every vnode can reach through its mount: counters, statistics,
//! the limit, and the reclaimer's doorbell.

use crate::config::Config;
use crate::counter::{DistCounter, StatCounter};
use crate::sync::{AtomicBool, Ordering};

/// Event counters, named after FreeBSD's sysctls where one exists.
#[derive(Default)]
pub(crate) struct Events {
    pub allocations: StatCounter,
    pub recycles: StatCounter,
    pub direct_recycles: StatCounter,
    pub reclaimer_recycles: StatCounter,
    pub alloc_overcommits: StatCounter,
    pub reclaimer_wakeups: StatCounter,
    pub reclaimer_kicks: StatCounter,
    pub prune_calls: StatCounter,
    pub prune_attempts: StatCounter,
    pub prune_recycled: StatCounter,
    pub claim_attempts: StatCounter,
    pub skip_raced: StatCounter,
    pub lookup_doomed: StatCounter,
    pub construct_failed: StatCounter,
    pub construct_waits: StatCounter,
    pub nc_hits: StatCounter,
    pub nc_misses: StatCounter,
    pub nc_neg_hits: StatCounter,
    pub nc_enters: StatCounter,
    pub nc_evictions: StatCounter,
    pub nc_purges: StatCounter,
}

/// The doorbell of the background reclaimer: a flag so that ringing it
/// costs one load while it is already rung, and a condvar to sleep on.
#[derive(Default)]
pub(crate) struct Doorbell {
    rung: AtomicBool,
    lock: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Doorbell {
    /// Wakes the reclaimer unless it is already awake with work pending.
    pub(crate) fn ring(&self) -> bool {
        if self.rung.load(Ordering::Relaxed) || self.rung.swap(true, Ordering::AcqRel) {
            return false;
        }
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        *g = true;
        self.cv.notify_one();
        true
    }

    /// Wakes the sleeper for good (it re-checks its stop flag).
    pub(crate) fn shutdown(&self) {
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        *g = true;
        self.cv.notify_all();
    }

    /// Sleeps until rung (or `stop` says so); clears the bell.
    pub(crate) fn wait(&self, stop: &dyn Fn() -> bool) {
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while !*g && !stop() {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        *g = false;
        self.rung.store(false, Ordering::Release);
    }
}

pub(crate) struct Shared {
    pub cfg: Config,
    pub numvnodes: DistCounter,
    pub freevnodes: DistCounter,
    pub ev: Events,
    pub bell: Doorbell,
    /// Set when an allocation found nothing to recycle and went over the
    /// limit; cleared by the reclaimer when it starts a pass (and set again
    /// if that pass runs out of free vnodes while still over). Releases
    /// ring the bell only while it is set: a count over the limit by the
    /// counters' slop alone is the allocators' to recycle, one for one.
    pub backlog: AtomicBool,
}

impl Shared {
    pub(crate) fn new(cfg: Config) -> Self {
        let slop = cfg.cell_slop();
        Shared {
            cfg,
            numvnodes: DistCounter::new(slop),
            freevnodes: DistCounter::new(slop),
            ev: Events::default(),
            bell: Doorbell::default(),
            backlog: AtomicBool::new(false),
        }
    }

    /// Called when a vnode became free: if earlier allocations found
    /// nothing to recycle and left the count over the limit, that vnode is
    /// what the reclaimer has been waiting for.
    #[inline]
    pub(crate) fn note_free(&self) {
        if self.backlog.load(Ordering::Relaxed)
            && self.numvnodes.approx() > self.cfg.recycle_at() as isize
            && self.cfg.reclaimer
            && self.bell.ring()
        {
            self.ev.reclaimer_kicks.inc();
        }
    }
}
