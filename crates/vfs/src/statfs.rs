//! File-system statistics for `statfs(2)`.

/// What `statfs(2)` reports, in `bsize` units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    /// Total data blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
    /// Fragment size.
    pub frsize: u32,
}
