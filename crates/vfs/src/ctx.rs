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
}

impl Ctx {
    /// The superuser, for internal callers and tests.
    pub const ROOT: Ctx = Ctx {
        uid: 0,
        gid: 0,
        pid: 0,
    };

    /// A caller with these ids.
    pub fn new(uid: u32, gid: u32) -> Ctx {
        Ctx { uid, gid, pid: 0 }
    }
}
