//! Half-open byte ranges, with "to infinity" for truncate and append.

use std::fmt;
use std::ops::{Range, RangeFrom, RangeFull};

/// The log2 of the page size the reader slots are indexed by (4 KiB).
pub const PAGE_SHIFT: u32 = 12;

/// A half-open byte range `[start, end)`. `end == u64::MAX` means "up to
/// infinity" (the form truncate, append and writes without an offset take);
/// it is spelt `start..` when converting.
///
/// Adjacent ranges never conflict: `[a, b)` and `[b, c)` are disjoint. An
/// empty range (`start == end`) conflicts with nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteRange {
    start: u64,
    end: u64,
}

impl ByteRange {
    /// The exclusive end standing for "infinity".
    pub const INFINITY: u64 = u64::MAX;

    /// `[start, end)`; an `end` below `start` is clamped to an empty range.
    #[inline]
    pub const fn new(start: u64, end: u64) -> Self {
        let end = if end < start { start } else { end };
        ByteRange { start, end }
    }

    /// `[start, infinity)`.
    #[inline]
    pub const fn from_start(start: u64) -> Self {
        ByteRange {
            start,
            end: Self::INFINITY,
        }
    }

    /// `[0, infinity)`: the whole file, whatever its size becomes.
    pub const ALL: ByteRange = ByteRange::from_start(0);

    /// `len` bytes from `start`, saturating to infinity.
    #[inline]
    pub const fn at(start: u64, len: u64) -> Self {
        ByteRange::new(start, start.saturating_add(len))
    }

    /// The first byte of the range.
    #[inline]
    pub const fn start(&self) -> u64 {
        self.start
    }

    /// The exclusive end (`INFINITY` for an unbounded range).
    #[inline]
    pub const fn end(&self) -> u64 {
        self.end
    }

    /// Whether the range covers no byte; an empty range conflicts with nothing.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Whether the range runs to the end of the file, whatever size the
    /// file grows to (truncate, append).
    #[inline]
    pub const fn is_unbounded(&self) -> bool {
        self.end == Self::INFINITY
    }

    /// True when the two ranges share at least one byte (so never for an
    /// empty range).
    #[inline]
    pub const fn overlaps(&self, other: &ByteRange) -> bool {
        self.start < other.end && other.start < self.end && !self.is_empty() && !other.is_empty()
    }

    /// First and last page touched (only for a non-empty range).
    #[inline]
    pub(crate) const fn pages(&self) -> (u64, u64) {
        (self.start >> PAGE_SHIFT, (self.end - 1) >> PAGE_SHIFT)
    }
}

impl From<Range<u64>> for ByteRange {
    fn from(r: Range<u64>) -> Self {
        ByteRange::new(r.start, r.end)
    }
}

impl From<RangeFrom<u64>> for ByteRange {
    fn from(r: RangeFrom<u64>) -> Self {
        ByteRange::from_start(r.start)
    }
}

impl From<RangeFull> for ByteRange {
    fn from(_: RangeFull) -> Self {
        ByteRange::ALL
    }
}

impl fmt::Debug for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unbounded() {
            write!(f, "[{}, inf)", self.start)
        } else {
            write!(f, "[{}, {})", self.start, self.end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_ranges_do_not_overlap() {
        let a = ByteRange::from(0..4096);
        let b = ByteRange::from(4096..8192);
        assert!(!a.overlaps(&b) && !b.overlaps(&a));
        assert!(a.overlaps(&ByteRange::from(4095..4096)));
    }

    #[test]
    fn empty_overlaps_nothing_and_infinity_everything_after() {
        let e = ByteRange::new(10, 10);
        assert!(!e.overlaps(&ByteRange::ALL));
        assert!(ByteRange::from(100..).overlaps(&ByteRange::from(u64::MAX - 2..u64::MAX - 1)));
        assert!(!ByteRange::from(100..).overlaps(&ByteRange::from(0..100)));
    }

    #[test]
    fn pages_of_aligned_and_unaligned_ranges() {
        assert_eq!(ByteRange::from(4096..8192).pages(), (1, 1));
        assert_eq!(ByteRange::from(4000..4200).pages(), (0, 1));
        assert_eq!(ByteRange::ALL.pages(), (0, u64::MAX >> PAGE_SHIFT));
    }
}
