//! File attributes as VOPs return them (`Attr`) and change them (`SetAttr`).

use crate::time::Timespec;
use uvfs_vnode::{Ino, VType};

/// What `stat(2)` and `statx(2)` show of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number, unique within the mount for the mount's lifetime.
    pub ino: Ino,
    /// File type.
    pub kind: VType,
    /// Permission bits, including set-uid, set-gid and sticky (`0o7777`).
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes (for a symlink, the target's length).
    pub size: u64,
    /// Allocated space in 512-byte units (sparse files have fewer).
    pub blocks: u64,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Device number of a character or block device.
    pub rdev: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last data modification.
    pub mtime: Timespec,
    /// Last status change.
    pub ctime: Timespec,
    /// Creation ("birth"), if the file system knows it: `statx(2)`
    /// reports none (no `STATX_BTIME`) rather than a made-up one.
    pub btime: Option<Timespec>,
    /// `STATX_ATTR_*` properties the file has (immutable, append-only,
    /// ...); only bits in `attributes_mask` mean anything.
    pub attributes: u64,
    /// The `STATX_ATTR_*` properties the file system can tell, set or not.
    pub attributes_mask: u64,
}

impl Attr {
    /// The attributes of a file that only has these to say: owned by
    /// root, one link (two for a directory), blocks to hold `size`, every
    /// time at the epoch but no birth time, no `statx` attributes. Set the
    /// other fields after, as needed.
    pub fn new(ino: Ino, kind: VType, perm: u16, size: u64) -> Attr {
        let t = Timespec { sec: 0, nsec: 0 };
        Attr {
            ino,
            kind,
            perm,
            nlink: if kind == VType::Dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            size,
            blocks: size.div_ceil(512),
            blksize: 4096,
            rdev: 0,
            atime: t,
            mtime: t,
            ctime: t,
            btime: None,
            attributes: 0,
            attributes_mask: 0,
        }
    }

    /// `st_mode`: type bits and permission bits.
    pub fn mode(&self) -> u32 {
        vtype_to_mode(self.kind) | u32::from(self.perm)
    }
}

/// The `S_IFMT` bits of a file type (0 for `VType::Non`).
pub fn vtype_to_mode(t: VType) -> u32 {
    match t {
        VType::Reg => libc::S_IFREG,
        VType::Dir => libc::S_IFDIR,
        VType::Lnk => libc::S_IFLNK,
        VType::Chr => libc::S_IFCHR,
        VType::Blk => libc::S_IFBLK,
        VType::Fifo => libc::S_IFIFO,
        VType::Sock => libc::S_IFSOCK,
        VType::Non => 0,
    }
}

/// The file type in the `S_IFMT` bits of `mode`, if they name one.
pub fn mode_to_vtype(mode: u32) -> Option<VType> {
    Some(match mode & libc::S_IFMT {
        libc::S_IFREG => VType::Reg,
        libc::S_IFDIR => VType::Dir,
        libc::S_IFLNK => VType::Lnk,
        libc::S_IFCHR => VType::Chr,
        libc::S_IFBLK => VType::Blk,
        libc::S_IFIFO => VType::Fifo,
        libc::S_IFSOCK => VType::Sock,
        _ => return None,
    })
}

/// A time to set: a given instant, or the server's clock at the moment of
/// the change (`UTIME_NOW`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// The clock at the time of the change.
    Now,
    /// This instant.
    At(Timespec),
}

/// The changes of one `setattr`; `None` leaves a field alone.
///
/// Any change also sets ctime to now unless `ctime` is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files only).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
    /// New change time (otherwise: now, when anything changed).
    pub ctime: Option<Timespec>,
    /// Also drop set-uid, and set-gid where it makes the file group
    /// executable or the caller is outside the file's group (Linux's
    /// `should_remove_suid`): the kernel asks this of a file system that
    /// handles it (FUSE_HANDLE_KILLPRIV_V2) when a caller without
    /// `CAP_FSETID` writes or truncates, and on chown. Changes ctime only
    /// if a bit goes.
    pub kill_suidgid: bool,
}

impl SetAttr {
    /// True if no field would change (`kill_suidgid` aside, which may find
    /// nothing to drop).
    pub fn is_empty(&self) -> bool {
        SetAttr {
            kill_suidgid: false,
            ..self.clone()
        } == SetAttr::default()
    }

    /// Only `kill_suidgid`: what the kernel's write and `O_TRUNC` open ask.
    pub fn kill_suidgid() -> SetAttr {
        SetAttr {
            kill_suidgid: true,
            ..SetAttr::default()
        }
    }
}

/// The permission bits (`0o7777`) left after `SetAttr::kill_suidgid` as
/// Linux applies it: set-uid goes; set-gid goes if group-execute is set or
/// the caller may not keep it (`ctx.in_group_or_capable`).
pub fn killed_suidgid(perm: u32, gid: u32, ctx: &crate::Ctx) -> u32 {
    let mut perm = perm & !libc::S_ISUID;
    if perm & libc::S_ISGID != 0 && (perm & libc::S_IXGRP != 0 || !ctx.in_group_or_capable(gid)) {
        perm &= !libc::S_ISGID;
    }
    perm
}
