//! Serving a read from bytes held in memory.

/// What a read of `size` bytes at `offset` returns of `data`: up to `size`
/// bytes from `offset` on, none past the end.
pub fn read_bytes(data: &[u8], offset: u64, size: u32) -> Vec<u8> {
    let start = usize::try_from(offset).map_or(data.len(), |o| o.min(data.len()));
    let end = start.saturating_add(size as usize).min(data.len());
    data[start..end].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end() {
        let d = b"hello";
        assert_eq!(read_bytes(d, 0, 4096), b"hello");
        assert_eq!(read_bytes(d, 1, 3), b"ell");
        assert_eq!(read_bytes(d, 3, 10), b"lo");
        assert_eq!(read_bytes(d, 5, 1), b"");
        assert_eq!(read_bytes(d, u64::MAX, u32::MAX), b"");
    }
}
