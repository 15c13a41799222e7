//! A cached name, stored in its entry's slot.
//!
//! Most names are short (`Makefile`, `f1234`, `index.html`): those live
//! inline, so an entry is one slot with no allocation of its own, and a
//! lookup compares the name on the line it already loaded for the entry
//! instead of following a pointer to a separate allocation (one cache miss
//! fewer per probe). Longer names (up to `NAME_MAX`) get a boxed copy.

/// Longest name kept inline: with the tag and length byte the name takes
/// 24 bytes, which keeps a slot at 64 (one cache line).
pub(crate) const INLINE: usize = 22;

pub(crate) enum NcName {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl NcName {
    pub(crate) fn new(name: &[u8]) -> Self {
        if name.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..name.len()].copy_from_slice(name);
            NcName::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            NcName::Heap(name.into())
        }
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            NcName::Inline { len, bytes } => &bytes[..*len as usize],
            NcName::Heap(b) => b,
        }
    }
}

impl Default for NcName {
    fn default() -> Self {
        NcName::Inline {
            len: 0,
            bytes: [0; INLINE],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_inline_long_ones_boxed_and_both_read_back() {
        for n in [
            &b""[..],
            b"f",
            &[b'x'; INLINE],
            &[b'y'; INLINE + 1],
            &[b'z'; 255],
        ] {
            let name = NcName::new(n);
            assert_eq!(name.as_bytes(), n);
            assert_eq!(matches!(name, NcName::Inline { .. }), n.len() <= INLINE);
        }
    }

    #[test]
    fn a_name_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<NcName>(), 24);
    }
}
