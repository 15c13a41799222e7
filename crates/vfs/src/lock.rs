//! Byte-range and whole-file locks as FUSE carries them (GETLK/SETLK), for
//! file systems that keep locks themselves (`FileSystem::forwards_locks`).

/// The end of a lock that runs to the end of the file (`OFFSET_MAX`).
pub const LOCK_TO_EOF: u64 = i64::MAX as u64;

/// One lock: bytes `start..=end` (`end` is `LOCK_TO_EOF` for "to the end
/// of the file"), `typ` one of `F_RDLCK`, `F_WRLCK`, `F_UNLCK`, and the pid
/// of the process that holds or asks for it (0 where none can be named).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FileLock {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: i32,
    /// Holder's or requester's process id.
    pub pid: u32,
}

impl FileLock {
    /// Whether this covers the whole file (what `close` releases).
    pub fn whole_file(&self) -> bool {
        self.start == 0 && self.end >= LOCK_TO_EOF
    }
}
