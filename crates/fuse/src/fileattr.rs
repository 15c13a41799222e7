//! FUSE_IOCTL for inode flags: `lsattr`/`chattr` on the mount.
//!
//! The kernel turns `FS_IOC_GETFLAGS`/`SETFLAGS` and
//! `FS_IOC_FSGETXATTR`/`FSSETXATTR` on a FUSE file into a private open
//! (OPEN or OPENDIR with `O_RDONLY`; none for a directory when the kernel
//! opens directories alone, handle 0), one FUSE_IOCTL with that command and
//! RELEASE (`fuse_fileattr_get`/`set` in fs/fuse/ioctl.c). Before a change
//! it asks FSGETXATTR for the old flags. The reply's data must be exactly
//! the size asked: 4 bytes of flags (an `int`, though the ioctl's number
//! says `long`) or a 28-byte `struct fsxattr`.
//!
//! Every other ioctl is answered `ENOTTY`, as by a file system without it.
//!
//! The kernel keeps the attributes it cached across a change of flags, so
//! the server drops them (the ctime moved) with an inode invalidation.
//!
//! # Who may change flags
//! Linux's VFS allows a change to the file's owner or a caller with
//! `CAP_FOWNER`, and a change of the immutable or append-only flag only
//! with `CAP_LINUX_IMMUTABLE`. The kernel checks both before it sends the
//! request; the server checks them again (`caller_caps.rs`), as its file
//! systems act with the server's own privilege (a passthrough's source
//! would let root's server set anything).

use crate::caller_caps::{has_cap, CAP_FOWNER, CAP_LINUX_IMMUTABLE};
use crate::handles::OpenFile;
use crate::server::Inner;
use uvfs_vfs::{
    Ctx, Errno, FsXattr, VType, VfsResult, FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS,
    FS_IOC_SETFLAGS, FS_NEED_CAP_FL,
};

/// Whether ioctl `cmd` changes the file (answered `EROFS` when served
/// read-only).
pub(crate) fn changes(cmd: u32) -> bool {
    matches!(cmd, FS_IOC_SETFLAGS | FS_IOC_FSSETXATTR)
}

/// Serves FUSE_IOCTL `cmd` on node `ino` open as handle `fh` (0: not
/// opened through the server); returns the reply's data, `out_size` bytes.
pub(crate) fn ioctl(
    i: &Inner,
    c: &Ctx,
    ino: u64,
    fh: u64,
    cmd: u32,
    input: &[u8],
    out_size: u32,
) -> VfsResult<Vec<u8>> {
    if !matches!(
        cmd,
        FS_IOC_GETFLAGS | FS_IOC_SETFLAGS | FS_IOC_FSGETXATTR | FS_IOC_FSSETXATTR
    ) {
        return Err(Errno::ENOTTY);
    }
    let mut out = with_open(i, c, ino, fh, |of| match cmd {
        FS_IOC_GETFLAGS => Ok(i.fs.get_flags(&of.vp, of.fh)?.to_ne_bytes().to_vec()),
        FS_IOC_FSGETXATTR => Ok(i.fs.get_fsxattr(&of.vp, of.fh)?.to_bytes().to_vec()),
        FS_IOC_SETFLAGS => {
            let new = flags_arg(input)?;
            let old = i.fs.get_flags(&of.vp, of.fh)?;
            may_change(i, c, of, old, new)?;
            i.fs.set_flags(c, &of.vp, of.fh, new)?;
            Ok(Vec::new())
        }
        _ => {
            let new = FsXattr::from_bytes(input)?;
            let old = i.fs.get_fsxattr(&of.vp, of.fh)?;
            may_change(i, c, of, old.flags(), new.flags())?;
            i.fs.set_fsxattr(c, &of.vp, of.fh, &new)?;
            Ok(Vec::new())
        }
    })?;
    if changes(cmd) {
        // The new ctime (and a passthrough source's too): the kernel
        // keeps the attributes it cached across a change of flags.
        if let Some(n) = i.notifier.get() {
            let _ = n.inval_inode(fuser::INodeNo(ino), -1, 0);
        }
    }
    // The kernel takes exactly what it asked for.
    out.resize(out_size as usize, 0);
    Ok(out)
}

/// Runs `f` on node `ino` open as handle `fh`, or, for handle 0 (the
/// kernel opened it without us), opened read-only for this call alone.
fn with_open<T>(
    i: &Inner,
    c: &Ctx,
    ino: u64,
    fh: u64,
    f: impl FnOnce(&OpenFile) -> VfsResult<T>,
) -> VfsResult<T> {
    if fh != 0 {
        return f(&i.handles.get(fh)?);
    }
    let vp = i.nodes.get(ino)?;
    if vp.vtype() == VType::Dir {
        return crate::server::with_dir(i, c, ino, fh, f);
    }
    let h = i.fs.open(c, &vp, libc::O_RDONLY)?;
    let of = OpenFile {
        vp,
        fh: h,
        writable: false,
        backing_node: None,
    };
    let r = f(&of);
    let _ = i.fs.release(&of.vp, of.fh);
    r
}

/// The flags word of `FS_IOC_SETFLAGS`: an `int` from the kernel; a
/// longer argument (a `long` from another peer) is read by its low word.
fn flags_arg(input: &[u8]) -> VfsResult<u32> {
    let b: [u8; 4] = input
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(Errno::EINVAL)?;
    Ok(u32::from_ne_bytes(b))
}

/// Linux's rules for a change of flags from `old` to `new` by `c`.
fn may_change(i: &Inner, c: &Ctx, of: &OpenFile, old: u32, new: u32) -> VfsResult<()> {
    let owner = i.fs.getattr(&of.vp)?.uid;
    if owner != c.uid && !has_cap(c.pid, c.uid, CAP_FOWNER) {
        return Err(Errno::EPERM);
    }
    if (old ^ new) & FS_NEED_CAP_FL != 0 && !has_cap(c.pid, c.uid, CAP_LINUX_IMMUTABLE) {
        return Err(Errno::EPERM);
    }
    Ok(())
}
