//! What a successful answer must look like for its request: attribute
//! sanity, directory entries, and the size and fields each opcode's
//! reply calls for. Apart from `kernel.rs` so that the checks read as a
//! table of opcodes.

use crate::wire::{
    u32_at, u64_at, ACCESS, ATTR_OUT, COPY_FILE_RANGE, CREATE, ENTRY_OUT, FALLOCATE, FLUSH, FSYNC,
    FSYNCDIR, GETATTR, GETXATTR, IOCTL, LINK, LISTXATTR, LOOKUP, LSEEK, MKDIR, MKNOD, OPEN,
    OPENDIR, READ, READDIR, READDIRPLUS, READLINK, RELEASE, RELEASEDIR, REMOVEXATTR, RENAME,
    RENAME2, RMDIR, SETATTR, SETXATTR, STATFS, STATX, SYMLINK, TMPFILE, UNLINK, WRITE,
};

/// (ino, offset, name) of each READDIR entry.
pub(crate) fn dirents(b: &[u8]) -> Vec<(u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 24 <= b.len() {
        let namelen = u32_at(b, at + 16) as usize;
        let name = b[at + 24..at + 24 + namelen].to_vec();
        out.push((u64_at(b, at), u64_at(b, at + 8), name));
        at += (24 + namelen).next_multiple_of(8);
    }
    out
}

/// (node id, the dirent's inode number, name) of each READDIRPLUS entry.
pub(crate) fn direntplus_ids(b: &[u8]) -> Vec<(u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + ENTRY_OUT + 24 <= b.len() {
        let d = at + ENTRY_OUT;
        let namelen = u32_at(b, d + 16) as usize;
        out.push((
            u64_at(b, at),
            u64_at(b, d),
            b[d + 24..d + 24 + namelen].to_vec(),
        ));
        at += (ENTRY_OUT + 24 + namelen).next_multiple_of(8);
    }
    out
}

/// A fuse_attr at `at` is sane: nanoseconds below a second, a known file
/// type, the node id it was asked for.
pub(crate) fn check_attr(b: &[u8], at: usize, ino: u64) -> Result<(), String> {
    if u64_at(b, at) != ino {
        return Err(format!("attr.ino {:#x} for node {ino:#x}", u64_at(b, at)));
    }
    for (f, off) in [("atime", 48), ("mtime", 52), ("ctime", 56)] {
        let ns = u32_at(b, at + off);
        if ns >= 1_000_000_000 {
            return Err(format!("{f} nsec {ns}"));
        }
    }
    let mode = u32_at(b, at + 60);
    let known = [
        libc::S_IFREG,
        libc::S_IFDIR,
        libc::S_IFLNK,
        libc::S_IFCHR,
        libc::S_IFBLK,
        libc::S_IFIFO,
        libc::S_IFSOCK,
    ];
    if !known.contains(&(mode & libc::S_IFMT)) {
        return Err(format!("mode {mode:#o}"));
    }
    Ok(())
}

/// A successful answer has the shape its request calls for.
pub(crate) fn check_shape(op: u32, nodeid: u64, req: &[u8], body: &[u8]) -> Result<(), String> {
    let want = |n: usize| {
        if body.len() == n {
            Ok(())
        } else {
            Err(format!("{} bytes, expected {n}", body.len()))
        }
    };
    match op {
        GETATTR | SETATTR => {
            want(ATTR_OUT)?;
            check_attr(body, 16, nodeid)
        }
        STATX => {
            // fuse_statx_out: 32 bytes, then fuse_statx (256).
            want(32 + 256)?;
            let mask = u32_at(body, 32);
            if mask & 0x7ff != 0x7ff {
                return Err(format!("statx mask {mask:#x} lacks basic stats"));
            }
            if u64_at(body, 64) != nodeid {
                return Err(format!("statx ino {:#x}", u64_at(body, 64)));
            }
            for (f, off) in [
                ("atime", 96),
                ("btime", 112),
                ("ctime", 128),
                ("mtime", 144),
            ] {
                let ns = u32_at(body, off + 8);
                if ns >= 1_000_000_000 {
                    return Err(format!("{f} nsec {ns}"));
                }
            }
            Ok(())
        }
        LOOKUP | MKNOD | MKDIR | SYMLINK | LINK | CREATE | TMPFILE => {
            want(if op == CREATE || op == TMPFILE {
                ENTRY_OUT + 16
            } else {
                ENTRY_OUT
            })?;
            let id = u64_at(body, 0);
            if id == 0 {
                return if op == LOOKUP {
                    Ok(())
                } else {
                    Err("node id 0".into())
                };
            }
            check_attr(body, 40, id)
        }
        OPEN | OPENDIR => want(16),
        READ => {
            let size = u32_at(req, 16) as usize;
            if body.len() > size {
                return Err(format!("{} bytes for a read of {size}", body.len()));
            }
            Ok(())
        }
        WRITE => {
            want(8)?;
            let n = u32_at(body, 0) as usize;
            if n > req.len() - 40 {
                return Err(format!("wrote {n} of {}", req.len() - 40));
            }
            Ok(())
        }
        COPY_FILE_RANGE => want(8),
        // fuse_ioctl_out, then exactly the bytes asked for.
        IOCTL if req.len() >= 32 => want(16 + u32_at(req, 28) as usize),
        STATFS => want(80),
        LSEEK => {
            want(8)?;
            if (u64_at(body, 0) as i64) < 0 {
                return Err("negative offset".into());
            }
            Ok(())
        }
        READDIR | READDIRPLUS => {
            let size = u32_at(req, 16) as usize;
            if body.len() > size {
                return Err(format!("{} bytes for a listing of {size}", body.len()));
            }
            if op == READDIRPLUS {
                for (id, ino, name) in direntplus_ids(body) {
                    // Node id 0: listed and not linked, as the kernel
                    // takes it (`fuse_direntplus_link`); the dirent still
                    // names an inode.
                    if name.is_empty()
                        || name.contains(&b'/')
                        || (id == 0 && ino == 0 && name != b"..")
                    {
                        return Err(format!("entry {id:#x} (ino {ino:#x}) {name:?}"));
                    }
                }
            } else {
                for (_, _, name) in dirents(body) {
                    if name.is_empty() || name.contains(&b'/') {
                        return Err(format!("entry {name:?}"));
                    }
                }
            }
            Ok(())
        }
        GETXATTR | LISTXATTR => {
            let size = u32_at(req, 0) as usize;
            if size == 0 {
                want(8)
            } else if body.len() > size {
                Err(format!("{} bytes for a buffer of {size}", body.len()))
            } else {
                Ok(())
            }
        }
        READLINK => {
            if body.is_empty() {
                Err("empty target".into())
            } else {
                Ok(())
            }
        }
        UNLINK | RMDIR | RENAME | RENAME2 | RELEASE | RELEASEDIR | FLUSH | FSYNC | FSYNCDIR
        | SETXATTR | REMOVEXATTR | ACCESS | FALLOCATE => want(0),
        _ => Ok(()),
    }
}
