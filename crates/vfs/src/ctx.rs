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

    /// The id a request carries in place of the caller's uid and gid when
    /// the kernel does not say who the caller is (`FUSE_INVALID_UIDGID`).
    /// A server that takes idmapped mounts (`FUSE_ALLOW_IDMAP`) gets it on
    /// every request but those that make an inode: the kernel has then
    /// checked the caller itself, through the mount's idmapping, which the
    /// server cannot know.
    pub const UNKNOWN_ID: u32 = u32::MAX;

    /// Whether the kernel left the caller's ids out (`UNKNOWN_ID`): what
    /// needed them was checked before the request was sent.
    pub fn ids_unknown(&self) -> bool {
        self.uid == Self::UNKNOWN_ID || self.gid == Self::UNKNOWN_ID
    }

    /// This caller with known ids: itself, or, when the kernel left them
    /// out, the file-system uid and gid of the calling thread from
    /// `/proc/PID/status`. Those are the ids the kernel would have sent
    /// through a mount that is not idmapped; through an idmapped one they
    /// are the caller's own, not mapped (nothing tells the server the
    /// mapping). `None` when the thread is gone or the pid unknown.
    pub fn resolved(&self) -> Option<Ctx> {
        if !self.ids_unknown() {
            return Some(*self);
        }
        let st = self.status()?;
        Some(Ctx {
            uid: st.fsuid,
            gid: st.fsgid,
            ..*self
        })
    }

    /// The caller's supplementary groups, from `/proc/PID/status` (as
    /// libfuse's `fuse_req_getgroups`; FUSE requests carry only the
    /// primary group). `None` when the pid is unknown or the process is
    /// gone, and when the ids the request carries are not the thread's own
    /// file-system ids: the kernel mapped them through an idmapped mount,
    /// and the groups, which it does not map, would belong to another id
    /// space.
    pub fn groups(&self) -> Option<Vec<u32>> {
        let st = self.status()?;
        if !self.ids_unknown() && (st.fsuid != self.uid || st.fsgid != self.gid) {
            return None;
        }
        Some(st.groups)
    }

    /// Linux's `in_group_or_capable` for `CAP_FSETID`: whether a change
    /// the caller makes to a file of group `gid` may keep its set-gid
    /// bit. Root may; anyone else must be in the group, as primary or
    /// supplementary group (one read of the caller's status file, only
    /// when the primary group does not settle it). A caller whose ids the
    /// kernel left out is judged by its own ids (`resolved`); one that is
    /// gone may (the kernel, which checked it, sent the request).
    pub fn in_group_or_capable(&self, gid: u32) -> bool {
        let Some(c) = self.resolved() else {
            return true;
        };
        c.uid == 0 || c.gid == gid || c.groups().is_some_and(|g| g.contains(&gid))
    }

    /// The ids and groups of the calling thread in `/proc/PID/status`.
    fn status(&self) -> Option<Status> {
        if self.pid == 0 {
            return None;
        }
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        Status::parse(&s)
    }
}

/// What `/proc/PID/status` says of a thread's credentials.
#[derive(Debug, PartialEq, Eq)]
struct Status {
    fsuid: u32,
    fsgid: u32,
    groups: Vec<u32>,
}

impl Status {
    /// Reads the `Uid:` and `Gid:` lines (real, effective, saved,
    /// file-system: the fourth is the one permission checks use) and
    /// `Groups:`.
    fn parse(s: &str) -> Option<Status> {
        let field = |key: &str| s.lines().find_map(|l| l.strip_prefix(key));
        let fs_id =
            |key: &str| -> Option<u32> { field(key)?.split_whitespace().nth(3)?.parse().ok() };
        Some(Status {
            fsuid: fs_id("Uid:")?,
            fsgid: fs_id("Gid:")?,
            groups: field("Groups:")?
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Ctx {
        Ctx {
            pid: std::process::id(),
            ..Ctx::new(Ctx::UNKNOWN_ID, Ctx::UNKNOWN_ID)
        }
    }

    #[test]
    fn status_lines_give_the_file_system_ids() {
        let s = "Name:\tx\nUid:\t1\t2\t3\t4\nGid:\t5\t6\t7\t8\nGroups:\t9 10 \n";
        assert_eq!(
            Status::parse(s),
            Some(Status {
                fsuid: 4,
                fsgid: 8,
                groups: vec![9, 10]
            })
        );
        assert_eq!(Status::parse("Uid:\t1\t2\t3\n"), None);
    }

    /// This process's file-system ids, as `ls -n` of a file it makes shows.
    fn own_ids() -> (u32, u32) {
        use std::os::unix::fs::MetadataExt;
        let path = std::env::temp_dir().join(format!("uvfs-ctx-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        (m.uid(), m.gid())
    }

    #[test]
    fn an_unknown_caller_resolves_to_its_own_ids() {
        let c = me().resolved().expect("this process's status");
        assert_eq!(c.uid, own_ids().0);
        assert_eq!(c.gid, own_ids().1);
        assert!(me().ids_unknown() && !c.ids_unknown());
        let gone = Ctx { pid: 0, ..me() };
        assert_eq!(gone.resolved(), None);
        assert!(gone.in_group_or_capable(12345));
    }

    #[test]
    fn mapped_ids_get_no_supplementary_groups() {
        let own = me().resolved().unwrap();
        assert!(own.groups().is_some());
        let mapped = Ctx {
            uid: own.uid.wrapping_add(1),
            ..own
        };
        assert_eq!(mapped.groups(), None);
    }
}
