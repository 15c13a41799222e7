//! The capabilities of a request's caller, for the few checks the kernel
//! leaves to a FUSE server because they involve state only the server
//! keeps (inode flags: who may set `FS_IMMUTABLE_FL`), or that the server
//! would otherwise pass with its own privilege (`FITRIM` on a source).
//!
//! A FUSE request carries the caller's uid, gid and thread id, not its
//! capabilities. The thread's effective set is asked of the kernel
//! (`capget`, which needs no privilege and answers per thread); the id is
//! the one in the server's pid namespace. Where that cannot be read
//! (id 0: a caller in a pid namespace the server cannot see, or a thread
//! that has already exited) a caller counts as capable if it is root, the
//! rule of a kernel without capabilities. The kernel checks the same
//! capabilities before it sends the request (`vfs_fileattr_set`), so for
//! kernel callers this only repeats its answer; it is what holds when the
//! peer is not a kernel, or the thread id was reused in between (a race
//! that could only grant what the kernel already granted).

/// `CAP_FOWNER`: act as the owner of any file.
pub const CAP_FOWNER: u32 = 3;
/// `CAP_LINUX_IMMUTABLE`: set or clear the immutable and append-only flags.
pub const CAP_LINUX_IMMUTABLE: u32 = 9;
/// `CAP_SYS_ADMIN`: among much else, discard a device's free blocks.
pub const CAP_SYS_ADMIN: u32 = 21;

/// Whether thread `tid` (uid `uid`) has capability `cap` in effect.
pub fn has_cap(tid: u32, uid: u32, cap: u32) -> bool {
    let pid = i32::try_from(tid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    match pid.and_then(|p| effective(Some(p))) {
        Some(eff) => eff & (1u64 << cap) != 0,
        None => uid == 0,
    }
}

/// The effective capability set of thread `tid`, or of the calling
/// thread for `None`; `None` if the thread is gone.
pub(crate) fn effective(tid: Option<rustix::process::Pid>) -> Option<u64> {
    rustix::thread::capabilities(tid)
        .ok()
        .map(|sets| sets.effective.bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_threads_own_capabilities_are_read() {
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let hex = own.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap();
        let eff = u64::from_str_radix(hex.trim(), 16).unwrap();
        assert_eq!(effective(None), Some(eff));
        let want = eff & (1 << CAP_LINUX_IMMUTABLE) != 0;
        // The uid given is the opposite of what the fallback would say,
        // so the answer must come from the status file.
        let uid = if want { 1000 } else { 0 };
        assert_eq!(has_cap(tid, uid, CAP_LINUX_IMMUTABLE), want);
    }

    #[test]
    fn an_unknown_caller_is_judged_by_its_uid() {
        assert!(has_cap(0, 0, CAP_LINUX_IMMUTABLE));
        assert!(!has_cap(0, 1000, CAP_LINUX_IMMUTABLE));
    }
}
