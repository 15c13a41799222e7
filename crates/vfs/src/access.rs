//! The POSIX permission check, for `access(2)` and for file systems that
//! check permissions themselves.
//!
//! The FUSE server mounts with `default_permissions`, so the kernel checks
//! permissions with the caller's full credentials (supplementary groups
//! included) before a request reaches a VOP. This function is the fallback
//! for callers that are not the kernel; it knows only the caller's primary
//! group.

use crate::attr::Attr;
use crate::ctx::Ctx;
use crate::errno::{Errno, VfsResult};
use uvfs_vnode::VType;

/// Read permission (`R_OK`).
pub const R_OK: u32 = 4;
/// Write permission (`W_OK`).
pub const W_OK: u32 = 2;
/// Execute/search permission (`X_OK`).
pub const X_OK: u32 = 1;

/// Checks `mask` (`R_OK | W_OK | X_OK`, 0 = existence) against `attr` for
/// `ctx`: root may do anything except execute a file without any x bit.
pub fn check_access(attr: &Attr, ctx: &Ctx, mask: u32) -> VfsResult<()> {
    let mask = mask & 7;
    if mask == 0 {
        return Ok(());
    }
    let perm = u32::from(attr.perm);
    if ctx.uid == 0 {
        if mask & X_OK != 0 && attr.kind != VType::Dir && perm & 0o111 == 0 {
            return Err(Errno::EACCES);
        }
        return Ok(());
    }
    let granted = if ctx.uid == attr.uid {
        (perm >> 6) & 7
    } else if ctx.gid == attr.gid {
        (perm >> 3) & 7
    } else {
        perm & 7
    };
    if granted & mask == mask {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}
