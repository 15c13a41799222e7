//! Putting one waiting thread to sleep, and the ways a wait can end early.
//!
//! A waiter owns an `Arc<Parker>`; whoever grants it (under the lock's
//! mutex) collects the parker and, after dropping the mutex, calls
//! [`Parker::notify`]. Thread park tokens make the order harmless: an unpark
//! that comes before the park makes the park return at once, so no wakeup is
//! lost, and every sleep is in a loop that re-checks `notified`.

use crate::sync::{current, lock, park, park_timeout, Arc, AtomicBool, Mutex, Ordering::*, Thread};
use std::time::Instant;

pub(crate) struct Parker {
    notified: AtomicBool,
    thread: Thread,
}

impl Parker {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Parker {
            notified: AtomicBool::new(false),
            thread: current(),
        })
    }

    /// Called by the granter, after it dropped the lock's mutex.
    pub(crate) fn notify(&self) {
        // Release: pairs with the Acquire in `is_notified`; the grant (and
        // the previous holder's release before it) happen before the
        // waiter's critical section.
        self.notified.store(true, Release);
        self.thread.unpark();
    }

    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Acquire)
    }
}

/// Wakes every parker in `wake` (call with no mutex held).
pub(crate) fn notify_all(wake: Vec<Arc<Parker>>) {
    for p in wake {
        p.notify();
    }
}

/// A token that abandons waits on a [`crate::RangeLock`] from another thread.
///
/// Pass it to [`crate::RangeLock::read_cancellable`] or
/// [`crate::RangeLock::write_cancellable`]; calling [`CancelToken::cancel`]
/// (typically from another thread, e.g. when a FUSE request is interrupted)
/// makes those waits return `None`, leaving no trace in the lock. Once
/// cancelled a token stays cancelled: later waits with it fail at once
/// unless the lock is free.
pub struct CancelToken {
    cancelled: AtomicBool,
    waiters: Mutex<Vec<Thread>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    /// A token not yet cancelled; pass it to `*_cancellable` waits that
    /// another thread may need to abandon.
    pub fn new() -> Self {
        CancelToken {
            cancelled: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// Abandons every wait using this token, now and later.
    pub fn cancel(&self) {
        // SeqCst store then lock: either a waiter registered before our lock
        // (we unpark it) or it registers after, and its flag check after
        // registering sees `true`.
        self.cancelled.store(true, SeqCst);
        for t in lock(&self.waiters).iter() {
            t.unpark();
        }
    }

    /// Whether [`Self::cancel`] was called; a cancelled token stays cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(SeqCst)
    }

    fn register(&self) {
        lock(&self.waiters).push(current());
    }

    fn deregister(&self) {
        let me = current().id();
        let mut w = lock(&self.waiters);
        if let Some(i) = w.iter().position(|t| t.id() == me) {
            w.swap_remove(i);
        }
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// How long an acquisition may wait.
#[derive(Clone, Copy)]
pub(crate) enum Wait<'a> {
    /// Do not wait at all (`try_*`).
    Never,
    Forever,
    Until(Instant),
    Cancel(&'a CancelToken),
}

impl Wait<'_> {
    /// Sleeps until `p` is notified or the wait must be abandoned; returns
    /// whether `p` was notified. A `false` is only a hint: the caller must
    /// settle the race with the granter under the lock's mutex.
    pub(crate) fn sleep(&self, p: &Parker) -> bool {
        if let Wait::Cancel(t) = self {
            t.register();
        }
        let notified = loop {
            if p.is_notified() {
                break true;
            }
            match self {
                Wait::Never => break false,
                Wait::Forever => park(),
                Wait::Until(deadline) => {
                    let now = Instant::now();
                    if now >= *deadline {
                        break false;
                    }
                    park_timeout(*deadline - now);
                }
                Wait::Cancel(t) => {
                    if t.is_cancelled() {
                        break false;
                    }
                    park();
                }
            }
        };
        if let Wait::Cancel(t) = self {
            t.deregister();
        }
        notified
    }
}
