//! The one place concurrent code gets its primitives from.
//!
//! Under `cfg(loom)` the atomics and the mutex come from loom, so the model
//! tests in `tests/loom_*.rs` check the very code that ships (tokio's habit).
//! Everything else in the crate imports from here, never from `std::sync`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicI16, AtomicIsize, AtomicU32, AtomicU64, AtomicU8,
};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicI16, AtomicIsize, AtomicU32, AtomicU64, AtomicU8,
};

/// A cell for data whose publication another atomic orders: loom's under
/// the model checker (which then checks that every access is ordered after
/// the write it reads), a plain `UnsafeCell` behind the same closure API
/// otherwise.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }

    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::sync::atomic::fence;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::fence;
pub(crate) use std::sync::atomic::Ordering;
pub(crate) use std::sync::Arc;

/// A mutex whose `lock` cannot fail: parking_lot normally, loom's under the
/// model checker (poisoning is impossible there because a panic ends the model).
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(v),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(v),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        {
            self.inner.lock()
        }
        #[cfg(loom)]
        {
            self.inner.lock().unwrap()
        }
    }

    /// `None` when another thread holds the lock.
    #[cfg(not(loom))]
    #[allow(dead_code)]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.inner.try_lock()
    }
}

/// Lets other threads run while we wait for a short-lived state change
/// (a vnode under construction): loom must be told; outside loom we park.
#[cfg(loom)]
pub(crate) fn spin_yield() {
    loom::thread::yield_now();
}
