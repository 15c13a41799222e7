//! Flag words of `rename`, `setxattr` and `fallocate`, with the Linux values.

/// Not an `open(2)` flag: the FUSE server adds it to `open` and `create`
/// flags when the kernel asks the file system to drop set-uid/set-gid of a
/// file it truncates (`O_TRUNC` by a caller without `CAP_FSETID`, under
/// FUSE_HANDLE_KILLPRIV_V2), as `SetAttr::kill_suidgid` does. A bit no
/// Linux open flag uses; file systems must not pass it on.
pub const O_KILL_SUIDGID: i32 = 1 << 30;

/// `renameat2(2)` flags.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags(pub u32);

impl RenameFlags {
    /// Fail with `EEXIST` if the new name exists.
    pub const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
    /// Swap the two names atomically; both must exist.
    pub const EXCHANGE: u32 = libc::RENAME_EXCHANGE;
    /// Leave a whiteout (overlay file systems only).
    pub const WHITEOUT: u32 = libc::RENAME_WHITEOUT;

    /// True if `RENAME_NOREPLACE` is set.
    pub fn noreplace(self) -> bool {
        self.0 & Self::NOREPLACE != 0
    }

    /// True if `RENAME_EXCHANGE` is set.
    pub fn exchange(self) -> bool {
        self.0 & Self::EXCHANGE != 0
    }

    /// `RENAME_WHITEOUT`: leave an overlayfs whiteout (a 0:0 character
    /// device) at the old name.
    pub fn whiteout(self) -> bool {
        self.0 & Self::WHITEOUT != 0
    }
}

/// `setxattr(2)` flags: `XATTR_CREATE` / `XATTR_REPLACE`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct XattrFlags(pub i32);

impl XattrFlags {
    /// Fail with `EEXIST` if the attribute exists.
    pub const CREATE: i32 = libc::XATTR_CREATE;
    /// Fail with `ENODATA` if the attribute does not exist.
    pub const REPLACE: i32 = libc::XATTR_REPLACE;
}

/// `fallocate(2)` mode bits.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FallocMode(pub i32);

impl FallocMode {
    /// Do not change the file size.
    pub const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
    /// Deallocate the range (requires `KEEP_SIZE`).
    pub const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
    /// Zero the range, allocating it.
    pub const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;
}
