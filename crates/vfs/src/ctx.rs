//! The caller of a VOP.

/// Who is asking: new files are owned by `uid`/`gid` (or the directory's
/// group under set-gid), and `access` checks are made against them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ctx {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Process id (0 if unknown).
    pub pid: u32,
    /// Mode bits a new file loses to the caller's umask, when the kernel
    /// left that to the file system: it does for file systems with POSIX
    /// ACLs (`FileSystem::posix_acls`), where a directory's default ACL
    /// takes the umask's place. 0 otherwise (the mode is already masked).
    pub umask: u32,
}

impl Ctx {
    /// The superuser, for internal callers and tests.
    pub const ROOT: Ctx = Ctx {
        uid: 0,
        gid: 0,
        pid: 0,
        umask: 0,
    };

    /// A caller with these ids.
    pub fn new(uid: u32, gid: u32) -> Ctx {
        Ctx {
            uid,
            gid,
            pid: 0,
            umask: 0,
        }
    }

    /// The caller's supplementary groups, from `/proc/PID/status` (as
    /// libfuse's `fuse_req_getgroups`; FUSE requests carry only the
    /// primary group). `None` when the pid is unknown or the process is
    /// gone.
    pub fn groups(&self) -> Option<Vec<u32>> {
        if self.pid == 0 {
            return None;
        }
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let line = s.lines().find(|l| l.starts_with("Groups:"))?;
        Some(
            line["Groups:".len()..]
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect(),
        )
    }

    /// Linux's `in_group_or_capable` for `CAP_FSETID`: whether a change
    /// the caller makes to a file of group `gid` may keep its set-gid
    /// bit. Root may; anyone else must be in the group, as primary or
    /// supplementary group (one read of the caller's status file, only
    /// when the primary group does not settle it).
    pub fn in_group_or_capable(&self, gid: u32) -> bool {
        self.uid == 0 || self.gid == gid || self.groups().is_some_and(|g| g.contains(&gid))
    }
}
