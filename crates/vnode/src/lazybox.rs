//! A box allocated on first use, in one word.
//!
//! For what only some vnodes need (name-cache links, a range lock): every
//! cached vnode pays for the slot, so it is a bare pointer rather than a
//! `OnceLock<Box<T>>` (whose state word pads it to two words).
//!
//! Initialisation races are settled by a compare-exchange: every racer
//! may build a value, one is installed, the others are dropped unseen. So
//! `init` must have no effect beyond building the value.

use crate::sync::{AtomicPtr, Ordering};
use std::marker::PhantomData;
use std::ptr;

pub(crate) struct LazyBox<T> {
    ptr: AtomicPtr<T>,
    /// Auto traits as a `OnceLock<T>`'s: a value built by one thread may
    /// be read by others and dropped by whichever owns the box last, so
    /// sharing needs `T: Send + Sync`.
    _owns: PhantomData<std::sync::OnceLock<T>>,
}

impl<T> LazyBox<T> {
    pub(crate) fn new() -> Self {
        LazyBox {
            ptr: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// The value, if one was installed.
    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        // Acquire: pairs with the installing compare-exchange, so the
        // value's contents are visible before its address is.
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from `Box::into_raw` in
        // `get_or_init` and was installed exactly once; it is freed only
        // by `Drop`, which has `&mut self`, so it outlives this borrow.
        unsafe { p.as_ref() }
    }

    /// The value, built by `init` and installed if there was none.
    #[inline]
    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        match self.get() {
            Some(v) => v,
            None => self.install(init()),
        }
    }

    #[cold]
    fn install(&self, v: T) -> &T {
        let new = Box::into_raw(Box::new(v));
        match self
            .ptr
            .compare_exchange(ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `new` is installed: freed only by `Drop` (see `get`).
            Ok(_) => unsafe { &*new },
            Err(cur) => {
                // SAFETY: `new` lost the race and was never published:
                // this thread still owns it alone.
                drop(unsafe { Box::from_raw(new) });
                // SAFETY: `cur` is the installed value (see `get`).
                unsafe { &*cur }
            }
        }
    }
}

impl<T> Drop for LazyBox<T> {
    fn drop(&mut self) {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `&mut self`: no borrow from `get` is alive, and the
            // pointer came from `Box::into_raw`; nothing frees it again.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::LazyBox;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn one_word() {
        assert_eq!(std::mem::size_of::<LazyBox<[u64; 8]>>(), 8);
    }

    #[test]
    fn racers_agree_on_one_value_and_losers_are_dropped() {
        struct Counted(Arc<AtomicUsize>, usize);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let lb = LazyBox::new();
        assert!(lb.get().is_none());
        let built = AtomicUsize::new(0);
        let seen: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let (lb, drops, built) = (&lb, &drops, &built);
                    s.spawn(move || {
                        let v = lb.get_or_init(|| {
                            built.fetch_add(1, Ordering::Relaxed);
                            Counted(drops.clone(), i)
                        });
                        v.1
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(seen.iter().all(|&v| v == seen[0]), "{seen:?}");
        let losers = built.load(Ordering::Relaxed) - 1;
        assert_eq!(drops.load(Ordering::Relaxed), losers);
        drop(lb);
        assert_eq!(drops.load(Ordering::Relaxed), losers + 1);
    }
}
