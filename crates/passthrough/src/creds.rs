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
//! (`rustix::thread::set_thread_groups`) change only the calling thread
//! (glibc's `setgroups` wrapper would change every thread, so it is not
//! used). Supplementary groups come from
//! `/proc/PID/status` of the caller (`Ctx::groups`);
//! when that is unreadable the caller gets its primary group only.

use rustix::process::Gid;
use rustix::thread::set_thread_groups;
use uvfs_vfs::{Ctx, Errno, VfsResult};

/// Restores the server's credentials on drop.
pub struct AsCaller {
    switched: bool,
    saved_groups: Vec<Gid>,
}

fn current_groups() -> Vec<Gid> {
    rustix::process::getgroups().unwrap_or_default()
}

/// Sets this thread's fsuid and fsgid (rustix has no call for them). The
/// gid changes while the fsuid is still root's when leaving root, and
/// after it is root's again when returning, so both calls run with the
/// capabilities that a root fsuid keeps. They cannot fail for root
/// (CAP_SETUID/CAP_SETGID).
fn set_fs_ids(uid: u32, gid: u32) {
    // SAFETY: setfsuid and setfsgid take plain integers and change only
    // the calling thread's file-system credentials.
    unsafe {
        if uid == 0 {
            libc::syscall(libc::SYS_setfsuid, uid);
            libc::syscall(libc::SYS_setfsgid, gid);
        } else {
            libc::syscall(libc::SYS_setfsgid, gid);
            libc::syscall(libc::SYS_setfsuid, uid);
        }
    }
}

impl AsCaller {
    /// Switches this thread to `ctx`'s credentials (nothing to do for
    /// root with group 0, or when the server is not root).
    pub fn switch(ctx: &Ctx) -> VfsResult<AsCaller> {
        let server_root = rustix::process::geteuid().is_root();
        if !server_root || (ctx.uid == 0 && ctx.gid == 0) {
            return Ok(AsCaller {
                switched: false,
                saved_groups: Vec::new(),
            });
        }
        // No request that makes an inode comes from -1: the kernel sends
        // it only where it left the caller out (`Ctx::ids_unknown`), which
        // it never does for those (an id the mount cannot map fails there
        // with EOVERFLOW). setfsuid(-1) changes nothing, so such a caller
        // would act as the server: refused. Callers of `switch` for other
        // requests check `ids_unknown` first.
        if ctx.uid == u32::MAX || ctx.gid == u32::MAX {
            return Err(Errno::EPERM);
        }
        let saved_groups = current_groups();
        let mut groups = ctx.groups().unwrap_or_default();
        groups.retain(|&g| g != u32::MAX);
        if !groups.contains(&ctx.gid) {
            groups.push(ctx.gid);
        }
        let groups: Vec<Gid> = groups.into_iter().map(Gid::from_raw).collect();
        set_thread_groups(&groups)?;
        let guard = AsCaller {
            switched: true,
            saved_groups,
        };
        set_fs_ids(ctx.uid, ctx.gid);
        Ok(guard)
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if !self.switched {
            return;
        }
        set_fs_ids(0, 0);
        let _ = set_thread_groups(&self.saved_groups);
    }
}
