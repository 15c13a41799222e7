//! One directory entry as `readdir` yields it.

use uvfs_vnode::{Ino, VType};

/// A directory entry.
///
/// `offset` is the cookie of this entry: passing it back to `readdir`
/// resumes right after it. Cookies are stable while the directory changes,
/// so an entry neither added nor removed during a scan is seen exactly once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number of the target.
    pub ino: Ino,
    /// File type of the target.
    pub kind: VType,
    /// Name within the directory (no `/`, no NUL).
    pub name: Vec<u8>,
    /// Resume cookie (never 0: offset 0 means "from the start").
    pub offset: u64,
}

impl DirEntry {
    /// Entry `name` for inode `ino` of type `kind`, resumed after with
    /// cookie `offset` (not 0).
    pub fn new(ino: Ino, kind: VType, name: &[u8], offset: u64) -> DirEntry {
        DirEntry {
            ino,
            kind,
            name: name.to_vec(),
            offset,
        }
    }
}
