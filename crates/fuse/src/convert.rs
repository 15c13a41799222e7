//! Conversions between uvfs-vfs types and fuser's wire-level types.

use fuser::{FileAttr, FileType, INodeNo, StatxAttr, TimeOrNow};
use std::time::SystemTime;
use uvfs_vfs::{Attr, Errno, SetTime, Timespec, VType};

/// The FUSE file type of a vnode type (`Non` never reaches the kernel;
/// it maps to a regular file rather than panicking).
pub fn file_type(t: VType) -> FileType {
    match t {
        VType::Dir => FileType::Directory,
        VType::Lnk => FileType::Symlink,
        VType::Chr => FileType::CharDevice,
        VType::Blk => FileType::BlockDevice,
        VType::Fifo => FileType::NamedPipe,
        VType::Sock => FileType::Socket,
        VType::Reg | VType::Non => FileType::RegularFile,
    }
}

/// The attributes the kernel sees for node `node_id`.
pub fn file_attr(a: &Attr, node_id: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(node_id),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.to_system_time(),
        mtime: a.mtime.to_system_time(),
        ctime: a.ctime.to_system_time(),
        // (Sent on macOS only; Linux learns the birth time from FUSE_STATX.)
        crtime: a.btime.unwrap_or(a.ctime).to_system_time(),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: a.blksize,
        flags: 0,
    }
}

/// What `statx(2)` sees of node `node_id`: its attributes, birth time
/// (none if the file system does not know it) and `STATX_ATTR_*` bits.
pub fn statx_attr(a: &Attr, node_id: u64) -> StatxAttr {
    StatxAttr {
        attr: file_attr(a, node_id),
        btime: a.btime.map(|t| t.to_system_time()),
        attributes: a.attributes,
        attributes_mask: a.attributes_mask,
    }
}

/// Minimal attributes for `.` and `..` in READDIRPLUS, whose entries the
/// kernel does not link (only their type and number reach userspace).
pub fn dot_attr(node_id: u64) -> FileAttr {
    let epoch = SystemTime::UNIX_EPOCH;
    FileAttr {
        ino: INodeNo(node_id),
        size: 0,
        blocks: 0,
        atime: epoch,
        mtime: epoch,
        ctime: epoch,
        crtime: epoch,
        kind: FileType::Directory,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// A time to set, from SETATTR.
pub fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(wire_time(t)),
    }
}

/// The kernel's (sec, nsec) back from the `SystemTime` fuser 0.18 made of
/// it. For a time before 1970 fuser computes `EPOCH - (|sec| + nsec)`
/// where the wire means `sec + nsec` (`system_time_from_time`, "TODO:
/// 1_000_000_000 - nsec"), so `touch -d '1969-12-31 23:59:58.5'` would
/// store 23:59:57.5. The encoding is one to one, so it can be undone: the
/// whole seconds before the epoch are `-sec`, the fraction is `nsec`.
/// (Replies are encoded correctly by fuser; the mount test
/// `times_before_1970_keep_their_nanoseconds` fails if either changes.)
fn wire_time(t: SystemTime) -> Timespec {
    match SystemTime::UNIX_EPOCH.duration_since(t) {
        Ok(before) if !before.is_zero() => Timespec {
            sec: -i64::try_from(before.as_secs()).unwrap_or(i64::MAX),
            nsec: before.subsec_nanos(),
        },
        _ => Timespec::from(t),
    }
}

/// The fuser errno for a VOP error.
pub fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use uvfs_vnode::VType;

    #[test]
    fn statx_attr_carries_birth_time_and_attributes() {
        let mut a = Attr::new(7, VType::Reg, 0o644, 10);
        a.ctime = Timespec::new(200, 0);
        a.btime = Some(Timespec::new(-2, 500_000_000));
        a.attributes = libc::STATX_ATTR_APPEND as u64;
        a.attributes_mask = 0x70;
        let sx = statx_attr(&a, 42);
        assert_eq!(sx.attr, file_attr(&a, 42));
        assert_eq!(sx.attr.ino, INodeNo(42));
        // (sec -2, nsec 5e8) is 1.5 s before the epoch.
        assert_eq!(
            sx.btime,
            Some(SystemTime::UNIX_EPOCH - Duration::from_millis(1500))
        );
        assert_eq!((sx.attributes, sx.attributes_mask), (0x20, 0x70));
    }

    #[test]
    fn unknown_birth_time_stays_unknown() {
        let a = Attr::new(7, VType::Dir, 0o755, 0);
        assert_eq!(statx_attr(&a, 1).btime, None);
    }
}
