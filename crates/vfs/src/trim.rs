//! `FITRIM` (`fstrim`): discard a file system's free space, within a
//! range of its byte offsets, on the device below it.

use crate::errno::{Errno, VfsResult};

/// `FITRIM` (`_IOWR('X', 121, struct fstrim_range)`).
pub const FITRIM: u32 = 0xc018_5879;

/// `struct fstrim_range`: the range asked for and, in the answer, `len`
/// is the bytes discarded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimRange {
    /// First byte offset of the file system to consider.
    pub start: u64,
    /// Bytes from `start`; in the answer, the bytes discarded.
    pub len: u64,
    /// Free extents shorter than this are left alone.
    pub minlen: u64,
}

impl TrimRange {
    /// Size of `struct fstrim_range`.
    pub const SIZE: usize = 24;

    /// Decodes the ioctl's argument; `EINVAL` if it is short.
    pub fn from_bytes(b: &[u8]) -> VfsResult<TrimRange> {
        let word = |i: usize| -> VfsResult<u64> {
            let w: [u8; 8] = b
                .get(i..i + 8)
                .and_then(|w| w.try_into().ok())
                .ok_or(Errno::EINVAL)?;
            Ok(u64::from_ne_bytes(w))
        };
        Ok(TrimRange {
            start: word(0)?,
            len: word(8)?,
            minlen: word(16)?,
        })
    }

    /// Encodes it as the ioctl's argument.
    pub fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..8].copy_from_slice(&self.start.to_ne_bytes());
        b[8..16].copy_from_slice(&self.len.to_ne_bytes());
        b[16..].copy_from_slice(&self.minlen.to_ne_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_round_trips_and_the_number_is_linuxs() {
        let r = TrimRange {
            start: 10 << 20,
            len: u64::MAX,
            minlen: 4096,
        };
        assert_eq!(TrimRange::from_bytes(&r.to_bytes()), Ok(r));
        assert_eq!(TrimRange::from_bytes(&[0; 23]), Err(Errno::EINVAL));
        assert_eq!(FITRIM, 3 << 30 | 24 << 16 | (b'X' as u32) << 8 | 121);
    }
}
