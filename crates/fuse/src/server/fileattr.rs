//! FUSE_IOCTL for inode flags: `lsattr`/`chattr` on the mount.
//!
//! The kernel turns `FS_IOC_GETFLAGS`/`SETFLAGS` and
//! `FS_IOC_FSGETXATTR`/`FSSETXATTR` on a FUSE file into a private open
//! (OPEN or OPENDIR with `O_RDONLY`; none for a directory when the kernel
//! opens directories alone, handle 0), one FUSE_IOCTL with that command and
//! RELEASE (`fuse_fileattr_get`/`set` in fs/fuse/ioctl.c). Before a change
//! it asks FSGETXATTR for the old flags. The flags are 4 bytes (an `int`,
//! though the ioctl's number says `long`), `struct fsxattr` 28.
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
//! would let root's server set anything), the owner only when the request
//! says who the caller is (not on a mount that takes idmapped mounts).

use super::Inner;
use crate::caller_caps::{has_cap, CAP_FOWNER, CAP_LINUX_IMMUTABLE};
use crate::handles::OpenFile;
use uvfs_vfs::{
    Ctx, Errno, FsXattr, VfsResult, FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS,
    FS_IOC_SETFLAGS, FS_NEED_CAP_FL,
};

/// Whether ioctl `cmd` changes inode flags.
pub(crate) fn changes(cmd: u32) -> bool {
    matches!(cmd, FS_IOC_SETFLAGS | FS_IOC_FSSETXATTR)
}

/// Whether ioctl `cmd` is one of the inode-flag commands served here.
pub(crate) fn handles(cmd: u32) -> bool {
    matches!(
        cmd,
        FS_IOC_GETFLAGS | FS_IOC_SETFLAGS | FS_IOC_FSGETXATTR | FS_IOC_FSSETXATTR
    )
}

/// Serves inode-flag command `cmd` on node `ino`, open as `of`; returns
/// the answer's data.
pub(crate) fn serve(
    i: &Inner,
    c: &Ctx,
    ino: u64,
    of: &OpenFile,
    cmd: u32,
    input: &[u8],
) -> VfsResult<Vec<u8>> {
    match cmd {
        FS_IOC_GETFLAGS => return Ok(i.fs.get_flags(&of.vp, of.fh)?.to_ne_bytes().to_vec()),
        FS_IOC_FSGETXATTR => return Ok(i.fs.get_fsxattr(&of.vp, of.fh)?.to_bytes().to_vec()),
        FS_IOC_SETFLAGS => {
            let new = flags_arg(input)?;
            let old = i.fs.get_flags(&of.vp, of.fh)?;
            may_change(i, c, of, old, new)?;
            i.fs.set_flags(c, &of.vp, of.fh, new)?;
        }
        FS_IOC_FSSETXATTR => {
            let new = FsXattr::from_bytes(input)?;
            let old = i.fs.get_fsxattr(&of.vp, of.fh)?;
            may_change(i, c, of, old.flags(), new.flags())?;
            i.fs.set_fsxattr(c, &of.vp, of.fh, &new)?;
        }
        _ => return Err(Errno::ENOTTY),
    }
    // The new ctime (and a passthrough source's too): the kernel keeps
    // the attributes it cached across a change of flags.
    if let Some(n) = i.notifier.get() {
        let _ = n.inval_inode(fuser::INodeNo(ino), -1, 0);
    }
    Ok(Vec::new())
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
    // A caller whose ids the kernel left out (`Ctx::ids_unknown`) came
    // through a mount that may be idmapped: the kernel compared the owner
    // through its idmapping, which the server cannot.
    let owner = i.fs.getattr(&of.vp)?.uid;
    if !c.ids_unknown() && owner != c.uid && !has_cap(c.pid, c.uid, CAP_FOWNER) {
        return Err(Errno::EPERM);
    }
    if (old ^ new) & FS_NEED_CAP_FL != 0 && !has_cap(c.pid, c.uid, CAP_LINUX_IMMUTABLE) {
        return Err(Errno::EPERM);
    }
    Ok(())
}
