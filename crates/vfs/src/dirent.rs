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

/// Lists a directory known in full up front into `sink` (a
/// [`DirSink`](crate::DirSink)) from `readdir`'s `offset`: `.` (inode
/// `dots.0`), `..` (`dots.1`), then `entries`. The cookie of the `i`-th
/// of those is `i + 1`, so cookies hold only while the listing does not
/// change (a read-only file system's). Entries before `offset` are walked
/// over, so a large directory read in many calls is better served by
/// cookies that index it.
pub fn list_dir<N: AsRef<[u8]>>(
    sink: &mut dyn FnMut(&DirEntry) -> bool,
    offset: u64,
    (dir, parent): (Ino, Ino),
    entries: impl IntoIterator<Item = (Ino, VType, N)>,
) {
    let mut cookie = 0;
    let mut full = |ino, kind, name: &[u8]| {
        cookie += 1;
        cookie > offset && sink(&DirEntry::new(ino, kind, name, cookie))
    };
    if full(dir, VType::Dir, b".") || full(parent, VType::Dir, b"..") {
        return;
    }
    for (ino, kind, name) in entries {
        if full(ino, kind, name.as_ref()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(offset: u64, room: usize) -> Vec<(String, u64)> {
        let mut got = Vec::new();
        let entries = [(5, VType::Reg, "a"), (6, VType::Dir, "b")];
        list_dir(
            &mut |e| {
                got.push((String::from_utf8_lossy(&e.name).into_owned(), e.offset));
                got.len() == room
            },
            offset,
            (2, 1),
            entries,
        );
        got
    }

    #[test]
    fn a_listing_resumes_after_the_cookie_it_stopped_at() {
        let all = [(".", 1), ("..", 2), ("a", 3), ("b", 4)].map(|(n, c)| (n.to_string(), c));
        assert_eq!(listed(0, 9), all);
        assert_eq!(listed(0, 2), all[..2]);
        assert_eq!(listed(2, 1), all[2..3]);
        assert_eq!(listed(3, 9), all[3..]);
        assert_eq!(listed(4, 9), []);
    }
}
