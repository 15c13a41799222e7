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
}
