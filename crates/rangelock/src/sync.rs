//! The one place that picks std or loom primitives.
//!
//! Every concurrent type in this crate imports `Atomic*`, `Mutex`, `Arc`,
//! thread parking and spinning from here, never from `std`, so that the
//! whole lock can be model-checked unchanged under `--cfg loom`.
//!
//! Under loom the limits shrink too (see [`crate::slot`]): fewer slots make
//! slot collisions, and so the rare paths, happen in every model.

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
    pub(crate) use std::sync::Arc;
    pub(crate) use std::thread::{current, park, park_timeout, Thread};

    /// A mutex for the slow path: `parking_lot`'s one-byte mutex (no
    /// poisoning, so `lock` returns the guard directly).
    pub(crate) type Mutex<T> = parking_lot::Mutex<T>;
    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock()
    }

    pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
        m.try_lock()
    }

    /// Bounded spinning before a thread falls back to yielding.
    pub(crate) struct Spin(crossbeam_utils::Backoff);

    impl Spin {
        pub(crate) fn new() -> Self {
            Spin(crossbeam_utils::Backoff::new())
        }

        /// Spins (then yields) once; returns true once spinning has stopped
        /// paying off and the caller should park instead.
        pub(crate) fn snooze(&self) -> bool {
            self.0.snooze();
            self.0.is_completed()
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::thread::{current, park, Thread};

    pub(crate) type Mutex<T> = loom::sync::Mutex<T>;
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
        m.try_lock().ok()
    }

    /// Loom has no timed park: a timed park may always wake spuriously, so
    /// modelling it as a yield explores exactly the "timed out" branch.
    pub(crate) fn park_timeout(_: std::time::Duration) {
        loom::thread::yield_now();
    }

    /// Under loom every spin is a yield (loom must see the thread give way)
    /// and parking is preferred at once, to keep the models small.
    pub(crate) struct Spin;

    impl Spin {
        pub(crate) fn new() -> Self {
            Spin
        }

        pub(crate) fn snooze(&self) -> bool {
            loom::thread::yield_now();
            true
        }
    }
}

pub(crate) use imp::*;
