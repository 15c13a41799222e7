//! Inode flags: what `chattr`/`lsattr` show and change (`FS_IOC_GETFLAGS`
//! and `FS_IOC_SETFLAGS`, with the `FS_*_FL` bits) and the XFS-born form of
//! the same (`FS_IOC_FSGETXATTR`/`FS_IOC_FSSETXATTR`, `struct fsxattr` with
//! the `FS_XFLAG_*` bits). Linux's VFS turns each form into the other for
//! the flags both have (`fileattr_fill_flags`, `fileattr_fill_xflags`);
//! [`FsXattr::from_flags`] and [`FsXattr::flags`] do the same, so a file
//! system that keeps `FS_*_FL` flags serves both.

use crate::errno::{Errno, VfsResult};

/// `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`).
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`).
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// `FS_IOC_FSGETXATTR` (`_IOR('X', 31, struct fsxattr)`).
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `FS_IOC_FSSETXATTR` (`_IOW('X', 32, struct fsxattr)`).
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

/// Synchronous updates (`chattr +S`).
pub const FS_SYNC_FL: u32 = 0x0000_0008;
/// Immutable (`chattr +i`): no change to data, metadata or names.
pub const FS_IMMUTABLE_FL: u32 = 0x0000_0010;
/// Append-only (`chattr +a`): data grows only at the end; no removal.
pub const FS_APPEND_FL: u32 = 0x0000_0020;
/// Not for dump(8) (`chattr +d`).
pub const FS_NODUMP_FL: u32 = 0x0000_0040;
/// No atime updates (`chattr +A`).
pub const FS_NOATIME_FL: u32 = 0x0000_0080;
/// DAX (`chattr +x`).
pub const FS_DAX_FL: u32 = 0x0200_0000;
/// New files inherit the project id (`chattr +P`).
pub const FS_PROJINHERIT_FL: u32 = 0x2000_0000;

/// Setting or clearing these needs `CAP_LINUX_IMMUTABLE`.
pub const FS_NEED_CAP_FL: u32 = FS_IMMUTABLE_FL | FS_APPEND_FL;

/// `FS_XFLAG_*` bits and the `FS_*_FL` bit each stands for
/// (`FS_XFLAG_COMMON`, the flags both forms have).
const XFLAG_FL: [(u32, u32); 7] = [
    (0x0000_0008, FS_IMMUTABLE_FL),   // FS_XFLAG_IMMUTABLE
    (0x0000_0010, FS_APPEND_FL),      // FS_XFLAG_APPEND
    (0x0000_0020, FS_SYNC_FL),        // FS_XFLAG_SYNC
    (0x0000_0040, FS_NOATIME_FL),     // FS_XFLAG_NOATIME
    (0x0000_0080, FS_NODUMP_FL),      // FS_XFLAG_NODUMP
    (0x0000_8000, FS_DAX_FL),         // FS_XFLAG_DAX
    (0x0000_0200, FS_PROJINHERIT_FL), // FS_XFLAG_PROJINHERIT
];

/// `FS_*_FL` bits that have an `FS_XFLAG_*` twin (`FS_COMMON_FL`).
pub const FS_COMMON_FL: u32 = FS_SYNC_FL
    | FS_IMMUTABLE_FL
    | FS_APPEND_FL
    | FS_NODUMP_FL
    | FS_NOATIME_FL
    | FS_DAX_FL
    | FS_PROJINHERIT_FL;

/// `FS_*_FL` bits and the `STATX_ATTR_*` bit `statx(2)` shows each as
/// (Linux's `generic_fill_statx_attr` and the file systems' getattr).
const STATX_ATTR_FL: [(u64, u32); 4] = [
    (0x0000_0004, 0x0000_0004),     // STATX_ATTR_COMPRESSED, FS_COMPR_FL
    (0x0000_0010, FS_IMMUTABLE_FL), // STATX_ATTR_IMMUTABLE
    (0x0000_0020, FS_APPEND_FL),    // STATX_ATTR_APPEND
    (0x0000_0040, FS_NODUMP_FL),    // STATX_ATTR_NODUMP
];

/// The `STATX_ATTR_*` bits for the inode flags `flags`, restricted to
/// flags in `kept` (those a file system keeps): `(attributes,
/// attributes_mask)` as `statx(2)` reports them.
pub fn statx_attributes(flags: u32, kept: u32) -> (u64, u64) {
    STATX_ATTR_FL
        .iter()
        .filter(|(_, fl)| kept & fl != 0)
        .fold((0, 0), |(set, mask), &(sx, fl)| {
            let set = if flags & fl != 0 { set | sx } else { set };
            (set, mask | sx)
        })
}

/// `struct fsxattr`, as `FS_IOC_FSGETXATTR` and `FS_IOC_FSSETXATTR` carry
/// it (28 bytes, native byte order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsXattr {
    /// `FS_XFLAG_*` bits.
    pub xflags: u32,
    /// Extent size hint.
    pub extsize: u32,
    /// Extents in use (read only).
    pub nextents: u32,
    /// Project id.
    pub projid: u32,
    /// Copy-on-write extent size hint.
    pub cowextsize: u32,
}

impl FsXattr {
    /// Size of `struct fsxattr` (with its 8 bytes of padding).
    pub const SIZE: usize = 28;

    /// The `fsxattr` Linux shows for a file with `FS_*_FL` flags `flags`
    /// and nothing else.
    pub fn from_flags(flags: u32) -> FsXattr {
        let xflags = XFLAG_FL
            .iter()
            .filter(|(_, fl)| flags & fl != 0)
            .fold(0, |x, (xf, _)| x | xf);
        FsXattr {
            xflags,
            ..FsXattr::default()
        }
    }

    /// The `FS_*_FL` flags `xflags` stands for.
    pub fn flags(&self) -> u32 {
        XFLAG_FL
            .iter()
            .filter(|(xf, _)| self.xflags & xf != 0)
            .fold(0, |f, (_, fl)| f | fl)
    }

    /// Whether this asks for anything beyond the flags both forms share
    /// (Linux's `fileattr_has_fsx`): a file system that keeps only
    /// `FS_*_FL` flags refuses it.
    pub fn has_fsx_only(&self) -> bool {
        let common = XFLAG_FL.iter().fold(0, |x, (xf, _)| x | xf);
        self.xflags & !common != 0 || self.extsize != 0 || self.projid != 0 || self.cowextsize != 0
    }

    /// Decodes the ioctl's argument; `EINVAL` if it is short.
    pub fn from_bytes(b: &[u8]) -> VfsResult<FsXattr> {
        if b.len() < Self::SIZE {
            return Err(Errno::EINVAL);
        }
        let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok(FsXattr {
            xflags: word(0),
            extsize: word(4),
            nextents: word(8),
            projid: word(12),
            cowextsize: word(16),
        })
    }

    /// Encodes it as the ioctl's argument (padding zeroed).
    pub fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        for (i, w) in [
            self.xflags,
            self.extsize,
            self.nextents,
            self.projid,
            self.cowextsize,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_xflags_translate_both_ways() {
        let flags = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL;
        let x = FsXattr::from_flags(flags);
        // XFS's numbering differs from ext2's for every one of these.
        assert_eq!(x.xflags, 0x8 | 0x10 | 0x80 | 0x40);
        assert_eq!(x.flags(), flags);
        assert!(!x.has_fsx_only());
        // Flags without a twin (ext4's extents flag) do not cross over.
        assert_eq!(FsXattr::from_flags(0x0008_0000).xflags, 0);
    }

    #[test]
    fn statx_attributes_follow_the_kept_flags() {
        let kept = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL;
        // tmpfs's answer: immutable, append and nodump are known.
        assert_eq!(statx_attributes(0, kept), (0, 0x70));
        assert_eq!(
            statx_attributes(FS_IMMUTABLE_FL | FS_NOATIME_FL, kept),
            (libc::STATX_ATTR_IMMUTABLE as u64, 0x70)
        );
        assert_eq!(
            statx_attributes(FS_APPEND_FL | FS_NODUMP_FL, kept),
            (
                (libc::STATX_ATTR_APPEND | libc::STATX_ATTR_NODUMP) as u64,
                0x70
            )
        );
        // A flag the file system does not keep is neither set nor known.
        assert_eq!(statx_attributes(FS_IMMUTABLE_FL, FS_APPEND_FL), (0, 0x20));
    }

    #[test]
    fn fsxattr_round_trips_and_short_input_is_refused() {
        let x = FsXattr {
            xflags: 0x8,
            extsize: 4096,
            nextents: 3,
            projid: 7,
            cowextsize: 0,
        };
        assert_eq!(FsXattr::from_bytes(&x.to_bytes()), Ok(x));
        assert!(x.has_fsx_only());
        assert_eq!(FsXattr::from_bytes(&[0; 27]), Err(Errno::EINVAL));
    }

    #[test]
    fn ioctl_numbers_are_linuxs() {
        // _IOC(dir, type, nr, size) = dir << 30 | size << 16 | type << 8 | nr
        let ioc =
            |dir: u32, ty: u8, nr: u32, size: u32| dir << 30 | size << 16 | (ty as u32) << 8 | nr;
        assert_eq!(FS_IOC_GETFLAGS, ioc(2, b'f', 1, 8));
        assert_eq!(FS_IOC_SETFLAGS, ioc(1, b'f', 2, 8));
        assert_eq!(FS_IOC_FSGETXATTR, ioc(2, b'X', 31, FsXattr::SIZE as u32));
        assert_eq!(FS_IOC_FSSETXATTR, ioc(1, b'X', 32, FsXattr::SIZE as u32));
    }
}
