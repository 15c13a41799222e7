//! How busy listing is (READDIRPLUS, and the READDIRs that go on with a
//! listing past its first reply), so that a listing probes its entries in
//! parallel, and feeds the readahead, only while the other core would be
//! idle (see `dir.rs`, "READDIRPLUS"). A type of its own because the file
//! system holds one (`PassthroughFs::plus_load`) and `dir.rs` uses it:
//! kept apart, neither module needs the other's.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How busy READDIRPLUS is: requests in flight, and when two last
/// overlapped. Probing a chunk in parallel pays only while the other core
/// would be idle, and "no other READDIRPLUS right now" does not say that:
/// with two walkers each spends part of its cycle in its own lstats, so
/// the count is often one while both cores are busy, and probing in
/// parallel then leaves the cores less busy and the walk slower than
/// probing serially (docs/design/passthrough.md). So a request probes in
/// parallel only if no two have overlapped for [`QUIET`].
pub(crate) struct PlusLoad {
    active: AtomicUsize,
    /// Milliseconds after `base` of the last overlap, plus one (0: never).
    last_overlap: AtomicU64,
    base: Instant,
}

/// How long after the last overlap of two READDIRPLUS requests they are
/// taken to be sharing the cores still. A walker's cycle (a READDIRPLUS and
/// the lstats of its entries) is well under a millisecond.
const QUIET: Duration = Duration::from_millis(50);

impl Default for PlusLoad {
    fn default() -> Self {
        PlusLoad {
            active: AtomicUsize::new(0),
            last_overlap: AtomicU64::new(0),
            base: Instant::now(),
        }
    }
}

impl PlusLoad {
    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64 + 1
    }

    pub(crate) fn enter(&self) -> Active<'_> {
        if self.active.fetch_add(1, Ordering::Relaxed) > 0 {
            // Relaxed: a hint for a scheduling choice, never for safety.
            self.last_overlap.store(self.now_ms(), Ordering::Relaxed);
        }
        Active(&self.active)
    }

    /// Whether this request is the only one, and has been for a while.
    pub(crate) fn alone(&self) -> bool {
        if self.active.load(Ordering::Relaxed) != 1 {
            return false;
        }
        let last = self.last_overlap.load(Ordering::Relaxed);
        last == 0 || self.now_ms().saturating_sub(last) > QUIET.as_millis() as u64
    }
}

/// Counts a listing request in progress for as long as it lives.
pub(crate) struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plus_load_is_alone_only_after_a_quiet_spell_without_overlaps() {
        let l = PlusLoad::default();
        {
            let _a = l.enter();
            assert!(l.alone(), "one request, never an overlap");
            let _b = l.enter();
            assert!(!l.alone(), "two in flight");
        }
        let _c = l.enter();
        assert!(!l.alone(), "overlapped just now: the cores are shared");
        std::thread::sleep(QUIET + Duration::from_millis(20));
        assert!(l.alone(), "no overlap for a quiet spell");
    }
}
