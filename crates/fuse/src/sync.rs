//! The one place that picks std or loom atomics for the server's
//! lock-free pieces, so they can be model-checked unchanged under
//! `--cfg loom` (`tests/loom_*.rs`).

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
