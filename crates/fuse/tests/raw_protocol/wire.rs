//! The FUSE wire format as the kernel writes it: opcodes and flags
//! (include/uapi/linux/fuse.h), request bodies built little-endian, and
//! readers of reply fields. Shared by the targeted cases, the random
//! phase and the shape checks, so each request is encoded once.

use std::time::Duration;

// Opcodes (include/uapi/linux/fuse.h).
pub(crate) const LOOKUP: u32 = 1;
pub(crate) const FORGET: u32 = 2;
pub(crate) const GETATTR: u32 = 3;
pub(crate) const SETATTR: u32 = 4;
pub(crate) const READLINK: u32 = 5;
pub(crate) const SYMLINK: u32 = 6;
pub(crate) const MKNOD: u32 = 8;
pub(crate) const MKDIR: u32 = 9;
pub(crate) const UNLINK: u32 = 10;
pub(crate) const RMDIR: u32 = 11;
pub(crate) const RENAME: u32 = 12;
pub(crate) const LINK: u32 = 13;
pub(crate) const OPEN: u32 = 14;
pub(crate) const READ: u32 = 15;
pub(crate) const WRITE: u32 = 16;
pub(crate) const STATFS: u32 = 17;
pub(crate) const RELEASE: u32 = 18;
pub(crate) const FSYNC: u32 = 20;
pub(crate) const SETXATTR: u32 = 21;
pub(crate) const GETXATTR: u32 = 22;
pub(crate) const LISTXATTR: u32 = 23;
pub(crate) const REMOVEXATTR: u32 = 24;
pub(crate) const FLUSH: u32 = 25;
pub(crate) const INIT: u32 = 26;
pub(crate) const OPENDIR: u32 = 27;
pub(crate) const READDIR: u32 = 28;
pub(crate) const RELEASEDIR: u32 = 29;
pub(crate) const FSYNCDIR: u32 = 30;
pub(crate) const GETLK: u32 = 31;
pub(crate) const SETLK: u32 = 32;
pub(crate) const SETLKW: u32 = 33;
pub(crate) const ACCESS: u32 = 34;
pub(crate) const CREATE: u32 = 35;
pub(crate) const INTERRUPT: u32 = 36;
pub(crate) const BMAP: u32 = 37;
pub(crate) const DESTROY: u32 = 38;
pub(crate) const IOCTL: u32 = 39;
pub(crate) const POLL: u32 = 40;
pub(crate) const BATCH_FORGET: u32 = 42;
pub(crate) const FALLOCATE: u32 = 43;
pub(crate) const READDIRPLUS: u32 = 44;
pub(crate) const RENAME2: u32 = 45;
pub(crate) const LSEEK: u32 = 46;
pub(crate) const COPY_FILE_RANGE: u32 = 47;
/// `O_TMPFILE` (the vendored fuser decodes it; upstream 0.18 does not).
pub(crate) const TMPFILE: u32 = 51;
/// `statx(2)` wanting a birth time (the vendored fuser decodes it).
pub(crate) const STATX: u32 = 52;
/// Opcodes newer than fuser 0.18 knows (SETUPMAPPING, REMOVEMAPPING,
/// SYNCFS) and nonsense ones.
pub(crate) const UNKNOWN_OPS: [u32; 6] = [0, 48, 49, 50, 9999, u32::MAX];

// fuse_setattr_in.valid bits.
pub(crate) const FATTR_MODE: u32 = 1 << 0;
pub(crate) const FATTR_UID: u32 = 1 << 1;
pub(crate) const FATTR_GID: u32 = 1 << 2;
pub(crate) const FATTR_SIZE: u32 = 1 << 3;
pub(crate) const FATTR_ATIME: u32 = 1 << 4;
pub(crate) const FATTR_MTIME: u32 = 1 << 5;
pub(crate) const FATTR_FH: u32 = 1 << 6;
pub(crate) const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(crate) const FATTR_MTIME_NOW: u32 = 1 << 8;
pub(crate) const FATTR_CTIME: u32 = 1 << 10;

/// INIT flags a current kernel offers (the ones the server asks for
/// among them).
pub(crate) const INIT_FLAGS: u32 = (1 << 4) // EXPORT_SUPPORT
    | (1 << 5) // BIG_WRITES
    | (1 << 6) // DONT_MASK
    | (1 << 12) // AUTO_INVAL_DATA
    | (1 << 13) // DO_READDIRPLUS
    | (1 << 14) // READDIRPLUS_AUTO
    | (1 << 18) // PARALLEL_DIROPS
    | (1 << 20) // POSIX_ACL
    | (1 << 22) // MAX_PAGES
    | (1 << 23) // CACHE_SYMLINKS
    | (1 << 24); // NO_OPENDIR_SUPPORT

pub(crate) const HEADER: usize = 40;
pub(crate) const OUT_HEADER: usize = 16;
pub(crate) const ATTR_OUT: usize = 16 + 88;
pub(crate) const ENTRY_OUT: usize = 40 + 88;
pub(crate) const ROOT: u64 = 1;
/// Longest wait for a reply.
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) const ENOENT: i32 = libc::ENOENT;
pub(crate) const ESTALE: i32 = libc::ESTALE;
pub(crate) const EBADF: i32 = libc::EBADF;
pub(crate) const EINVAL: i32 = libc::EINVAL;
pub(crate) const ENOSYS: i32 = libc::ENOSYS;

pub(crate) fn op_name(op: u32) -> String {
    let n = match op {
        LOOKUP => "LOOKUP",
        FORGET => "FORGET",
        GETATTR => "GETATTR",
        SETATTR => "SETATTR",
        READLINK => "READLINK",
        SYMLINK => "SYMLINK",
        MKNOD => "MKNOD",
        MKDIR => "MKDIR",
        UNLINK => "UNLINK",
        RMDIR => "RMDIR",
        RENAME => "RENAME",
        LINK => "LINK",
        OPEN => "OPEN",
        READ => "READ",
        WRITE => "WRITE",
        STATFS => "STATFS",
        RELEASE => "RELEASE",
        FSYNC => "FSYNC",
        SETXATTR => "SETXATTR",
        GETXATTR => "GETXATTR",
        LISTXATTR => "LISTXATTR",
        REMOVEXATTR => "REMOVEXATTR",
        FLUSH => "FLUSH",
        INIT => "INIT",
        OPENDIR => "OPENDIR",
        READDIR => "READDIR",
        RELEASEDIR => "RELEASEDIR",
        FSYNCDIR => "FSYNCDIR",
        GETLK => "GETLK",
        SETLK => "SETLK",
        ACCESS => "ACCESS",
        CREATE => "CREATE",
        TMPFILE => "TMPFILE",
        STATX => "STATX",
        INTERRUPT => "INTERRUPT",
        BMAP => "BMAP",
        DESTROY => "DESTROY",
        IOCTL => "IOCTL",
        POLL => "POLL",
        BATCH_FORGET => "BATCH_FORGET",
        FALLOCATE => "FALLOCATE",
        READDIRPLUS => "READDIRPLUS",
        RENAME2 => "RENAME2",
        LSEEK => "LSEEK",
        COPY_FILE_RANGE => "COPY_FILE_RANGE",
        _ => return format!("opcode {op}"),
    };
    n.to_string()
}

#[derive(Default)]
pub(crate) struct B(pub(crate) Vec<u8>);

impl B {
    pub(crate) fn u32(mut self, v: u32) -> B {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u64(mut self, v: u64) -> B {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i64(self, v: i64) -> B {
        self.u64(v as u64)
    }
    pub(crate) fn bytes(mut self, b: &[u8]) -> B {
        self.0.extend_from_slice(b);
        self
    }
    /// A name and its terminating NUL.
    pub(crate) fn name(self, n: &[u8]) -> B {
        self.bytes(n).bytes(&[0])
    }
    pub(crate) fn done(self) -> Vec<u8> {
        self.0
    }
}

pub(crate) fn b() -> B {
    B::default()
}

pub(crate) fn read_in(fh: u64, offset: u64, size: u32) -> Vec<u8> {
    b().u64(fh)
        .u64(offset)
        .u32(size)
        .u32(0)
        .u64(0)
        .u32(libc::O_RDWR as u32)
        .u32(0)
        .done()
}

pub(crate) fn write_in(fh: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    b().u64(fh)
        .u64(offset)
        .u32(data.len() as u32)
        .u32(0)
        .u64(0)
        .u32(libc::O_RDWR as u32)
        .u32(0)
        .bytes(data)
        .done()
}

/// fuse_setattr_in, built field by field.
#[derive(Clone, Copy, Default)]
pub(crate) struct SetAttrIn {
    pub(crate) valid: u32,
    pub(crate) fh: u64,
    pub(crate) size: u64,
    pub(crate) atime: (i64, u32),
    pub(crate) mtime: (i64, u32),
    pub(crate) ctime: (i64, u32),
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl SetAttrIn {
    pub(crate) fn body(&self) -> Vec<u8> {
        b().u32(self.valid)
            .u32(0)
            .u64(self.fh)
            .u64(self.size)
            .u64(0)
            .i64(self.atime.0)
            .i64(self.mtime.0)
            .i64(self.ctime.0)
            .u32(self.atime.1)
            .u32(self.mtime.1)
            .u32(self.ctime.1)
            .u32(self.mode)
            .u32(0)
            .u32(self.uid)
            .u32(self.gid)
            .u32(0)
            .done()
    }
}

pub(crate) fn getattr_in(fh: Option<u64>) -> Vec<u8> {
    b().u32(u32::from(fh.is_some()))
        .u32(0)
        .u64(fh.unwrap_or(0))
        .done()
}

/// `fuse_statx_in`: GETATTR's fields, then the sync flags and the mask.
pub(crate) fn statx_in(fh: Option<u64>, mask: u32) -> Vec<u8> {
    b().u32(u32::from(fh.is_some()))
        .u32(0)
        .u64(fh.unwrap_or(0))
        .u32(0)
        .u32(mask)
        .done()
}

pub(crate) fn open_in(flags: i32) -> Vec<u8> {
    b().u32(flags as u32).u32(0).done()
}

pub(crate) fn create_in(flags: i32, mode: u32, name: &[u8]) -> Vec<u8> {
    b().u32(flags as u32)
        .u32(mode)
        .u32(0o022)
        .u32(0)
        .name(name)
        .done()
}

pub(crate) fn mkdir_in(mode: u32, name: &[u8]) -> Vec<u8> {
    b().u32(mode).u32(0o022).name(name).done()
}

pub(crate) fn mknod_in(mode: u32, rdev: u32, name: &[u8]) -> Vec<u8> {
    b().u32(mode).u32(rdev).u32(0o022).u32(0).name(name).done()
}

pub(crate) fn symlink_in(name: &[u8], target: &[u8]) -> Vec<u8> {
    b().name(name).name(target).done()
}

pub(crate) fn rename_in(newdir: u64, old: &[u8], new: &[u8]) -> Vec<u8> {
    b().u64(newdir).name(old).name(new).done()
}

pub(crate) fn rename2_in(newdir: u64, flags: u32, old: &[u8], new: &[u8]) -> Vec<u8> {
    b().u64(newdir).u32(flags).u32(0).name(old).name(new).done()
}

pub(crate) fn link_in(oldnodeid: u64, name: &[u8]) -> Vec<u8> {
    b().u64(oldnodeid).name(name).done()
}

pub(crate) fn release_in(fh: u64) -> Vec<u8> {
    b().u64(fh).u32(0).u32(0).u64(0).done()
}

pub(crate) fn flush_in(fh: u64) -> Vec<u8> {
    b().u64(fh).u32(0).u32(0).u64(0).done()
}

pub(crate) fn fsync_in(fh: u64, flags: u32) -> Vec<u8> {
    b().u64(fh).u32(flags).u32(0).done()
}

pub(crate) fn forget_in(n: u64) -> Vec<u8> {
    b().u64(n).done()
}

pub(crate) fn batch_forget_in(list: &[(u64, u64)]) -> Vec<u8> {
    let mut x = b().u32(list.len() as u32).u32(0);
    for &(id, n) in list {
        x = x.u64(id).u64(n);
    }
    x.done()
}

pub(crate) fn setxattr_in(flags: u32, name: &[u8], value: &[u8]) -> Vec<u8> {
    b().u32(value.len() as u32)
        .u32(flags)
        .name(name)
        .bytes(value)
        .done()
}

pub(crate) fn getxattr_in(size: u32, name: &[u8]) -> Vec<u8> {
    b().u32(size).u32(0).name(name).done()
}

pub(crate) fn listxattr_in(size: u32) -> Vec<u8> {
    b().u32(size).u32(0).done()
}

pub(crate) fn access_in(mask: u32) -> Vec<u8> {
    b().u32(mask).u32(0).done()
}

pub(crate) fn fallocate_in(fh: u64, offset: u64, len: u64, mode: u32) -> Vec<u8> {
    b().u64(fh).u64(offset).u64(len).u32(mode).u32(0).done()
}

pub(crate) fn lseek_in(fh: u64, offset: i64, whence: u32) -> Vec<u8> {
    b().u64(fh).i64(offset).u32(whence).u32(0).done()
}

/// fuse_copy_file_range_in (the input node is the header's).
#[derive(Clone, Copy)]
pub(crate) struct CopyIn {
    pub(crate) fh_in: u64,
    pub(crate) off_in: u64,
    pub(crate) nodeid_out: u64,
    pub(crate) fh_out: u64,
    pub(crate) off_out: u64,
    pub(crate) len: u64,
    pub(crate) flags: u64,
}

impl CopyIn {
    pub(crate) fn body(&self) -> Vec<u8> {
        b().u64(self.fh_in)
            .u64(self.off_in)
            .u64(self.nodeid_out)
            .u64(self.fh_out)
            .u64(self.off_out)
            .u64(self.len)
            .u64(self.flags)
            .done()
    }
}

/// `fuse_lk_in`: a lock on `start..=end` of type `typ` by `owner`
/// through handle `fh` (`flock`: FUSE_LK_FLOCK).
pub(crate) fn lock_in(fh: u64, owner: u64, start: u64, end: u64, typ: i32, flock: bool) -> Vec<u8> {
    b().u64(fh)
        .u64(owner)
        .u64(start)
        .u64(end)
        .u32(typ as u32)
        .u32(1)
        .u32(flock as u32)
        .u32(0)
        .done()
}

pub(crate) fn interrupt_in(unique: u64) -> Vec<u8> {
    b().u64(unique).done()
}

pub(crate) fn lk_in(fh: u64) -> Vec<u8> {
    b().u64(fh)
        .u64(1)
        .u64(0)
        .u64(u64::MAX)
        .u32(libc::F_WRLCK as u32)
        .u32(1)
        .u32(0)
        .u32(0)
        .done()
}

pub(crate) fn hex(b: &[u8]) -> String {
    let shown: String = b.iter().take(96).map(|x| format!("{x:02x}")).collect();
    if b.len() > 96 {
        format!("{shown}...({} bytes)", b.len())
    } else {
        shown
    }
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
