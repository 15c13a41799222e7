//! How a supervisor files the io_uring entries a server keeps with it
//! (`supervise::Link` keeps them, a server started after a crash takes
//! them back with the file system's kept descriptors: `successor.rs`).

/// What a kept entry is filed under: the top two bits of its key are 3
/// (the file system's kinds use 1 and 2).
pub(crate) fn key(addr: u64) -> u64 {
    (3 << 62) | ((addr >> 12) & ((1 << 62) - 1))
}

/// The first bytes of a kept entry's description (then its queue and
/// address, little-endian).
const META: &[u8] = b"fuse-uring-entry";

/// A kept entry's description.
pub(crate) fn meta(qid: u16, addr: u64) -> Vec<u8> {
    let mut m = META.to_vec();
    m.extend_from_slice(&qid.to_le_bytes());
    m.extend_from_slice(&addr.to_le_bytes());
    m
}

/// The queue and address a kept description names, if it is an entry's.
pub(crate) fn parse(meta: &[u8]) -> Option<(u16, u64)> {
    let rest = meta.strip_prefix(META)?;
    if rest.len() != 10 {
        return None;
    }
    let qid = u16::from_le_bytes(rest[..2].try_into().ok()?);
    let addr = u64::from_le_bytes(rest[2..].try_into().ok()?);
    Some((qid, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_description_reads_back_and_no_other_does() {
        let m = meta(1, 0x7f00_1234_5000);
        assert_eq!(parse(&m), Some((1, 0x7f00_1234_5000)));
        assert_eq!(parse(&m[..m.len() - 1]), None);
        // The passthrough's kept descriptions: a kind byte, then 24 bytes.
        assert_eq!(parse(&[1u8; 25]), None);
        assert_eq!(key(0x7f00_1234_5000) >> 62, 3);
        assert_ne!(key(0x7f00_1234_5000), key(0x7f00_1234_6000));
    }
}
