//! The integer hashing every map of the layer uses: keys are inode
//! numbers and addresses, already spread enough that a mixer beats a
//! keyed hash (no DoS concern: no key comes from outside the process).

use std::hash::{BuildHasherDefault, Hasher};

/// A 64-bit mixer (the finalizer of SplitMix64): spreads sequential inode
/// numbers over shards and buckets.
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A hasher for keys that are already integers: fold with a mixer.
#[derive(Default)]
pub(crate) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = mix(self.0 ^ u64::from_le_bytes(b)).wrapping_add(chunk.len() as u64);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = mix(self.0 ^ i);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64 | 1 << 40);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// Builds [`MixHasher`]s, for `HashTable`s and `HashSet`s.
pub(crate) type MixBuild = BuildHasherDefault<MixHasher>;
