//! The content `uvfs bench seqio` writes and checks: a function of the file
//! offset alone, cheap enough that making and checking it costs little next
//! to the I/O it rides on.
//!
//! # Layout
//! The file is a run of 4 KiB pages. Each page starts with a 16-byte stamp
//! made of its page index and the run's seed; the rest of every page is
//! the same pseudo-random body (also drawn from the seed). So
//! - a page read from the wrong offset, or left from an earlier repeat or
//!   another target (different seed), has the wrong stamp;
//! - a hole, a zeroed or a torn page has the wrong body.
//!
//! The writer only rewrites 16 bytes per page between blocks: the body
//! stays in its buffer (block sizes are whole pages).

/// Pages the stamps are laid on.
pub const PAGE: usize = 4096;
/// Bytes of each page's stamp.
const STAMP: usize = 16;

/// The expected content of every file offset, for one seed.
pub struct Pattern {
    seed: u64,
    /// One page of body; its first `STAMP` bytes are unused (zero).
    body: Box<[u8; PAGE]>,
}

/// SplitMix64: a full-period, well-mixed sequence from any seed.
pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where content first differs from the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// File offset of the first wrong byte.
    pub offset: u64,
    pub expected: u8,
    pub found: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "content mismatch at offset {} (page {}): expected {:#04x}, found {:#04x}",
            self.offset,
            self.offset / PAGE as u64,
            self.expected,
            self.found
        )
    }
}

impl Pattern {
    pub fn new(seed: u64) -> Pattern {
        let mut body = Box::new([0u8; PAGE]);
        let mut st = seed ^ 0x5EED_0F5E_0100_0000;
        for chunk in body[STAMP..].chunks_mut(8) {
            let w = splitmix(&mut st).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        Pattern { seed, body }
    }

    /// The stamp of page `page`: its index and the seed, mixed so that
    /// neither a neighbouring page nor another seed shares it.
    fn stamp(&self, page: u64) -> [u8; STAMP] {
        let mut st = page ^ self.seed.rotate_left(17);
        let mut out = [0u8; STAMP];
        out[..8].copy_from_slice(&(page ^ self.seed).to_le_bytes());
        out[8..].copy_from_slice(&splitmix(&mut st).to_le_bytes());
        out
    }

    /// The expected byte at file offset `off` (slow; for reports and tests).
    pub fn byte_at(&self, off: u64) -> u8 {
        let r = (off % PAGE as u64) as usize;
        if r < STAMP {
            self.stamp(off / PAGE as u64)[r]
        } else {
            self.body[r]
        }
    }

    /// Calls `f(range in buf, page index, first byte of the page in buf)`
    /// for each piece of `buf` (holding the file from `off`) that lies in
    /// one page.
    fn pieces(len: usize, off: u64, mut f: impl FnMut(std::ops::Range<usize>, u64, usize)) {
        let mut i = 0;
        while i < len {
            let at = off + i as u64;
            let r = (at % PAGE as u64) as usize;
            let n = (PAGE - r).min(len - i);
            f(i..i + n, at / PAGE as u64, r);
            i += n;
        }
    }

    /// Fills `buf` with the content of the file from offset `off`.
    pub fn fill(&self, buf: &mut [u8], off: u64) {
        Self::pieces(buf.len(), off, |range, page, r| {
            let end = r + range.len();
            buf[range.clone()].copy_from_slice(&self.body[r..end]);
            if r < STAMP {
                let s = self.stamp(page);
                let k = STAMP.min(end) - r;
                buf[range.start..range.start + k].copy_from_slice(&s[r..r + k]);
            }
        });
    }

    /// Turns a buffer [`fill`](Self::fill)ed for an offset in the same
    /// position within a page (`off % PAGE` equal) into the content at
    /// `off`, rewriting only the stamps: the body is where it was.
    pub fn restamp(&self, buf: &mut [u8], off: u64) {
        Self::pieces(buf.len(), off, |range, page, r| {
            if r < STAMP {
                let s = self.stamp(page);
                let k = STAMP.min(r + range.len()) - r;
                buf[range.start..range.start + k].copy_from_slice(&s[r..r + k]);
            }
        });
    }

    /// Checks that `buf` holds the file's content from offset `off`.
    pub fn check(&self, buf: &[u8], off: u64) -> Result<(), Mismatch> {
        let mut bad = None;
        Self::pieces(buf.len(), off, |range, page, r| {
            if bad.is_some() {
                return;
            }
            let got = &buf[range.clone()];
            let end = r + got.len();
            // The body part first (one memcmp), then the stamp.
            let body_from = STAMP.max(r).min(end);
            let stamp_ok = r >= STAMP || {
                let s = self.stamp(page);
                got[..body_from - r] == s[r..body_from]
            };
            if !stamp_ok || got[body_from - r..] != self.body[body_from..end] {
                // Slow path: name the first wrong byte.
                let start = off + range.start as u64;
                bad = got
                    .iter()
                    .enumerate()
                    .map(|(k, &b)| (start + k as u64, b))
                    .find(|&(o, b)| b != self.byte_at(o))
                    .map(|(o, b)| Mismatch {
                        offset: o,
                        expected: self.byte_at(o),
                        found: b,
                    });
            }
        });
        bad.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_matches_byte_at_at_any_alignment() {
        let p = Pattern::new(7);
        for (off, len) in [
            (0u64, 3 * PAGE),
            (5, 100),
            (PAGE as u64 - 3, 40),
            (12345, 9000),
        ] {
            let mut b = vec![0u8; len];
            p.fill(&mut b, off);
            for (k, &x) in b.iter().enumerate() {
                assert_eq!(x, p.byte_at(off + k as u64), "off {off} + {k}");
            }
            assert_eq!(p.check(&b, off), Ok(()));
        }
    }

    #[test]
    fn restamp_equals_fresh_fill() {
        let p = Pattern::new(99);
        let mut a = vec![0u8; 1 << 20];
        p.fill(&mut a, 0);
        for off in [1u64 << 20, 5 << 20, 4096 * 1000] {
            p.restamp(&mut a, off);
            let mut b = vec![0u8; 1 << 20];
            p.fill(&mut b, off);
            assert!(a == b, "restamp at {off}");
        }
        // A short last block, restamped in place.
        p.restamp(&mut a[..5000], 7 << 20);
        assert_eq!(p.check(&a[..5000], 7 << 20), Ok(()));
    }

    #[test]
    fn every_kind_of_wrong_content_is_caught() {
        let p = Pattern::new(1);
        let mut good = vec![0u8; 8 * PAGE];
        p.fill(&mut good, 0);
        // Read at the wrong offset (a misplaced block).
        assert!(p.check(&good, PAGE as u64).is_err());
        // A page from another seed (an earlier repeat or another target).
        let mut other = vec![0u8; 8 * PAGE];
        Pattern::new(2).fill(&mut other, 0);
        assert!(p.check(&other, 0).is_err());
        // A zeroed page (a hole), reported at its first byte.
        let mut holed = good.clone();
        holed[3 * PAGE..4 * PAGE].fill(0);
        let m = p.check(&holed, 0).unwrap_err();
        assert_eq!(m.offset, 3 * PAGE as u64);
        assert_eq!(m.found, 0);
        // One flipped bit in a body, and in a stamp.
        for at in [5 * PAGE + 2000, 6 * PAGE + 9] {
            let mut flip = good.clone();
            flip[at] ^= 0x10;
            let m = p.check(&flip, 0).unwrap_err();
            assert_eq!(m.offset, at as u64);
            assert_eq!(m.expected ^ 0x10, m.found);
            assert!(m.to_string().contains(&format!("offset {at}")), "{m}");
        }
        // Two pages swapped.
        let mut swapped = good.clone();
        let (a, b) = swapped.split_at_mut(2 * PAGE);
        a[PAGE..].swap_with_slice(&mut b[..PAGE]);
        assert_eq!(p.check(&swapped, 0).unwrap_err().offset, PAGE as u64);
    }

    #[test]
    fn stamps_differ_between_pages_and_seeds() {
        let (p, q) = (Pattern::new(3), Pattern::new(4));
        assert_ne!(p.stamp(0), p.stamp(1));
        assert_ne!(p.stamp(5), q.stamp(5));
        // The body is not constant (a stuck or zero buffer would pass).
        assert!(p.body[STAMP..].iter().any(|&b| b != p.body[STAMP]));
    }
}
