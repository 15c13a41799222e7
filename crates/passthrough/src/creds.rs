//! Creating files as the caller: per-thread file-system credentials.
//!
//! The kernel checks permissions before a request reaches the server
//! (`default_permissions`), but who *owns* a new file, which group it gets
//! under a set-gid directory, and whether a set-gid bit survives are
//! decided by the backing file system from the creating credentials. So
//! operations that make an inode (`create`, `mknod`, `mkdir`, `symlink`)
//! run with the calling thread's fsuid, fsgid and supplementary groups
//! switched to the caller's, and everything else runs as the server.
//!
//! On Linux `setfsuid`, `setfsgid` and the raw `setgroups` system call
//! change only the calling thread (glibc's `setgroups` wrapper would
//! change every thread, so it is not used). Supplementary groups come from
//! `/proc/PID/status` of the caller (`Ctx::groups`);
//! when that is unreadable the caller gets its primary group only.

use crate::sys;
use uvfs_vfs::{Ctx, VfsResult};

/// Restores the server's credentials on drop.
pub struct AsCaller {
    switched: bool,
    saved_groups: Vec<libc::gid_t>,
}

fn set_groups(groups: &[libc::gid_t]) -> VfsResult<()> {
    // SAFETY: the pointer and length describe a valid gid array; the raw
    // system call (not glibc's all-threads wrapper) changes this thread.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    sys::cvt_long(r).map(|_| ())
}

fn current_groups() -> Vec<libc::gid_t> {
    // SAFETY: a zero-length query writes nothing.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut v = vec![0; n as usize];
    // SAFETY: `v` has room for `n` gids.
    let m = unsafe { libc::getgroups(n, v.as_mut_ptr()) };
    v.truncate(m.max(0) as usize);
    v
}

impl AsCaller {
    /// Switches this thread to `ctx`'s credentials (nothing to do for
    /// root with group 0, or when the server is not root).
    pub fn switch(ctx: &Ctx) -> VfsResult<AsCaller> {
        // SAFETY: geteuid has no preconditions.
        let server_root = unsafe { libc::geteuid() } == 0;
        if !server_root || (ctx.uid == 0 && ctx.gid == 0) {
            return Ok(AsCaller {
                switched: false,
                saved_groups: Vec::new(),
            });
        }
        let saved_groups = current_groups();
        let mut groups = ctx.groups().unwrap_or_default();
        if !groups.contains(&ctx.gid) {
            groups.push(ctx.gid);
        }
        set_groups(&groups)?;
        let guard = AsCaller {
            switched: true,
            saved_groups,
        };
        // SAFETY: setfsgid/setfsuid take plain ids and only affect this
        // thread; they cannot fail for root (CAP_SETUID/CAP_SETGID).
        unsafe {
            libc::syscall(libc::SYS_setfsgid, ctx.gid);
            libc::syscall(libc::SYS_setfsuid, ctx.uid);
        }
        Ok(guard)
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if !self.switched {
            return;
        }
        // SAFETY: as in `switch`; fsuid 0 first restores the capabilities
        // that setgroups needs.
        unsafe {
            libc::syscall(libc::SYS_setfsuid, 0);
            libc::syscall(libc::SYS_setfsgid, 0);
        }
        let _ = set_groups(&self.saved_groups);
    }
}
