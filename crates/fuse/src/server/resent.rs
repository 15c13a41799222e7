//! Requests the kernel sends again after the server that read them died
//! without answering (`FUSE_NOTIFY_RESEND` from the server started after
//! the crash; the kernel marks them with bit 63 of their unique id). The
//! dead server may have done such a change already, so a resent change
//! that now fails exactly as it would once done (a removal finding no
//! name, a making finding its name taken by what it would have made) is
//! answered as done: the caller's one call had its one effect. NFS
//! clients make the same guess of a retransmitted REMOVE; here the window
//! is one crash.

use fuser::Request;
use uvfs_vfs::{Errno, VType, VfsResult, VnodeRef};

/// The kernel's mark of a resent request's unique id.
const FUSE_UNIQUE_RESEND: u64 = 1 << 63;

/// Whether the kernel sends `req` again.
pub(super) fn resent(req: &Request) -> bool {
    req.unique().0 & FUSE_UNIQUE_RESEND != 0
}

/// A resent removal (UNLINK, RMDIR) whose name is gone: done already.
pub(super) fn removed(resent: bool, r: VfsResult<()>) -> VfsResult<()> {
    match r {
        Err(e) if resent && e == Errno::ENOENT => {
            log::info!("a resent removal found no name: taken as done by the server that died");
            Ok(())
        }
        r => r,
    }
}

/// A resent making (MKDIR, SYMLINK, LINK) whose name is taken: what is
/// there (`found`), if it is of the kind made (`kind`, or for a LINK the
/// very file linked).
pub(super) fn made(
    resent: bool,
    r: VfsResult<VnodeRef>,
    want: Want<'_>,
    found: impl FnOnce() -> VfsResult<VnodeRef>,
) -> VfsResult<VnodeRef> {
    match r {
        Err(e) if resent && e == Errno::EEXIST => {
            let vp = found().map_err(|_| Errno::EEXIST)?;
            let same = match want {
                Want::Kind(k) => vp.vtype() == k,
                Want::File(f) => vp.ino() == f.ino(),
            };
            if !same {
                return Err(Errno::EEXIST);
            }
            log::info!(
                "a resent making found its name made: taken as done by the server that died"
            );
            Ok(vp)
        }
        r => r,
    }
}

/// What a resent making would have made.
pub(super) enum Want<'a> {
    /// A new file of this kind (MKDIR, SYMLINK).
    Kind(VType),
    /// A name for this file (LINK).
    File(&'a VnodeRef),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_resent_request_takes_a_missing_name_as_removed() {
        assert_eq!(removed(true, Err(Errno::ENOENT)), Ok(()));
        assert_eq!(removed(false, Err(Errno::ENOENT)), Err(Errno::ENOENT));
        assert_eq!(removed(true, Err(Errno::ENOTEMPTY)), Err(Errno::ENOTEMPTY));
    }
}
