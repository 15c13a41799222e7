//! FUSE_IOCTL: the ioctls a file system can serve without the kernel
//! moving memory for it (the restricted kind, whose argument size the
//! command's number gives): inode flags (`fileattr.rs`) and `FITRIM`.
//! Every other ioctl is answered `ENOTTY`, as by a file system without it.
//!
//! The reply's data must be exactly the size the kernel asked for
//! (`fuse_priv_ioctl` takes no shorter answer), so it is cut or padded to
//! it here.

use super::Inner;
use crate::caller_caps::{has_cap, CAP_SYS_ADMIN};
use crate::handles::OpenFile;
use uvfs_vfs::{Ctx, Errno, TrimRange, VType, VfsResult, FITRIM};

/// Whether ioctl `cmd` changes the file system (answered `EROFS` when
/// served read-only). `FITRIM` changes no file, but a read-only server
/// sends nothing to the source's device either (Linux's XFS refuses it on
/// a file system mounted without its log replayed, fstests generic/537).
pub(crate) fn changes(cmd: u32) -> bool {
    cmd == FITRIM || super::fileattr::changes(cmd)
}

/// Whether ioctl `cmd` may keep a request loop for long waiting for a
/// device (served off an io_uring queue's thread, `offload.rs`).
pub(crate) fn waits_for_device(cmd: u32) -> bool {
    cmd == FITRIM
}

/// Serves FUSE_IOCTL `cmd` on node `ino` open as handle `fh` (0: not
/// opened through the server); returns the reply's data, `out_size` bytes.
pub(crate) fn serve(
    i: &Inner,
    c: &Ctx,
    ino: u64,
    fh: u64,
    cmd: u32,
    input: &[u8],
    out_size: u32,
) -> VfsResult<Vec<u8>> {
    let mut out = if super::fileattr::handles(cmd) {
        with_open(i, c, ino, fh, |of| {
            super::fileattr::serve(i, c, ino, of, cmd, input)
        })?
    } else if cmd == FITRIM {
        // Discarding a device's free blocks is an administrator's
        // (`ext4_ioctl`, `xfs_ioc_trim`: CAP_SYS_ADMIN); the server would
        // do it with its own privilege.
        if !has_cap(c.pid, c.uid, CAP_SYS_ADMIN) {
            return Err(Errno::EPERM);
        }
        let mut range = TrimRange::from_bytes(input)?;
        range.len = with_open(i, c, ino, fh, |of| i.fs.trim(c, &of.vp, of.fh, range))?;
        range.to_bytes().to_vec()
    } else {
        return Err(Errno::ENOTTY);
    };
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
        return super::dirs::with_dir(i, c, ino, fh, f);
    }
    let h = i.fs.open(c, &vp, libc::O_RDONLY)?;
    let of = OpenFile::transient(vp, h);
    let r = f(&of);
    let _ = i.fs.release(&of.vp, of.fh);
    r
}
