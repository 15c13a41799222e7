//! Where a file system puts the inode number in its file handles.
//!
//! fanotify names files by handle; nodes are found by inode number
//! (`inodes.rs`). Handles are the file system's own bytes, but the common
//! ones carry the inode number at a fixed place: ext2/3/4 and xfs
//! (`FILEID_INO32_GEN`: number, generation), tmpfs (generation, number
//! low, number high), btrfs and 64-bit xfs (a 64-bit number first). The
//! place is learnt from files whose numbers are known (the source's root
//! and some of its entries): one that all of them agree on, for each
//! handle type and length seen. Reading a number out of an event's
//! handle is then a few loads, however many files the kernel holds.

use std::collections::HashMap;

/// Where the number sits in handles of one (type, length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// A 32-bit number at this byte offset.
    U32(usize),
    /// A 64-bit number at this byte offset.
    U64(usize),
    /// Low 32 bits at the offset, high 32 bits in the next word.
    Split(usize),
}

impl Place {
    fn read(self, b: &[u8]) -> Option<u64> {
        let w = |at: usize| -> Option<u64> {
            Some(u64::from(u32::from_ne_bytes(
                b.get(at..at + 4)?.try_into().ok()?,
            )))
        };
        match self {
            Place::U32(at) => w(at),
            Place::U64(at) => Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?)),
            Place::Split(at) => Some(w(at)? | (w(at + 4)? << 32)),
        }
    }

    /// Every place where `ino` could be read from `b`.
    fn candidates(b: &[u8], ino: u64) -> Vec<Place> {
        let mut out = Vec::new();
        for at in (0..b.len()).step_by(4) {
            for p in [Place::U64(at), Place::Split(at), Place::U32(at)] {
                if p.read(b) == Some(ino) {
                    out.push(p);
                }
            }
        }
        out
    }
}

/// What was learnt, per (handle type, handle length): the places every
/// sample agreed on. Usually one; more while the samples could not tell
/// them apart (a root whose generation equals its number), and then an
/// event's handle names each number those places read, all of which are
/// invalidated: more than needed costs a notification, never staleness.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    places: HashMap<(i32, usize), Vec<Place>>,
}

impl Layout {
    /// Learns from `samples` of (handle type, handle bytes, inode number).
    /// A kind of handle whose samples agree on no place is left out (its
    /// events cannot be read: `inos` answers nothing). `None` if nothing
    /// could be learnt at all.
    pub(crate) fn learn<'a>(
        samples: impl IntoIterator<Item = (i32, &'a [u8], u64)>,
    ) -> Option<Layout> {
        let mut places: HashMap<(i32, usize), Vec<Place>> = HashMap::new();
        for (htype, bytes, ino) in samples {
            let found = Place::candidates(bytes, ino);
            match places.entry((htype, bytes.len())) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(found);
                }
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    o.get_mut().retain(|p| found.contains(p));
                }
            }
        }
        places.retain(|_, v| !v.is_empty());
        (!places.is_empty()).then_some(Layout { places })
    }

    /// The inode numbers a handle of `htype` may hold (one, once its kind
    /// was learnt unambiguously; none for a kind never seen).
    pub(crate) fn inos(&self, htype: i32, bytes: &[u8]) -> smallvec::SmallVec<[u64; 2]> {
        let mut out = smallvec::SmallVec::new();
        for p in self.places.get(&(htype, bytes.len())).into_iter().flatten() {
            if let Some(ino) = p.read(bytes) {
                if !out.contains(&ino) {
                    out.push(ino);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext4(ino: u32, gen: u32) -> Vec<u8> {
        [ino.to_ne_bytes(), gen.to_ne_bytes()].concat()
    }

    fn tmpfs(ino: u64, gen: u32) -> Vec<u8> {
        [
            gen.to_ne_bytes(),
            (ino as u32).to_ne_bytes(),
            ((ino >> 32) as u32).to_ne_bytes(),
        ]
        .concat()
    }

    #[test]
    fn ext4_handles_are_read_after_a_few_samples() {
        // The root's generation equals its number: ambiguous alone.
        let samples = [(2u32, 2u32), (131074, 77), (131075, 9)];
        let hs: Vec<_> = samples.iter().map(|&(i, g)| ext4(i, g)).collect();
        let l = Layout::learn(
            hs.iter()
                .zip(samples)
                .map(|(h, (i, _))| (1, &h[..], u64::from(i))),
        )
        .unwrap();
        assert_eq!(&l.inos(1, &ext4(999, 5))[..], &[999]);
        assert!(l.inos(2, &ext4(999, 5)).is_empty(), "unknown type");
        assert!(l.inos(1, &[0; 12]).is_empty(), "unknown length");
        // From the root alone the generation's place is a candidate too:
        // both numbers are named.
        let root = ext4(2, 2);
        let l = Layout::learn([(1, &root[..], 2)]).unwrap();
        let mut both = l.inos(1, &ext4(999, 5)).to_vec();
        both.sort();
        assert_eq!(both, vec![5, 999]);
    }

    #[test]
    fn tmpfs_handles_with_64_bit_numbers() {
        let samples = [(1u64, 0u32), (5000, 3), (1 << 33 | 7, 4)];
        let hs: Vec<_> = samples.iter().map(|&(i, g)| tmpfs(i, g)).collect();
        let l = Layout::learn(hs.iter().zip(samples).map(|(h, (i, _))| (1, &h[..], i))).unwrap();
        assert_eq!(&l.inos(1, &tmpfs(1 << 40 | 3, 8))[..], &[1 << 40 | 3]);
    }

    #[test]
    fn disagreeing_samples_learn_nothing() {
        let a = ext4(10, 20);
        let b = ext4(30, 10); // number where a's generation was
        assert!(Layout::learn([(1, &a[..], 10), (1, &b[..], 10)]).is_none());
    }
}
