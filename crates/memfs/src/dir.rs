//! Directory contents: names to inodes, with stable readdir cookies.
//!
//! # Cookies
//! Each entry gets a cookie from a per-directory counter when it is added
//! and keeps it until it is removed; a rename into the directory is a new
//! entry with a new cookie. `readdir(offset)` lists the entries whose
//! cookie is greater than `offset`, so a scan that races with changes sees
//! every entry that was there throughout exactly once (POSIX asks no more).
//! Cookies 1 and 2 are `.` and `..`; entries start at 3.

use std::collections::{BTreeMap, HashMap};
use uvfs_vfs::{Ino, VType};

/// Cookie of `.`.
pub const DOT_COOKIE: u64 = 1;
/// Cookie of `..`.
pub const DOTDOT_COOKIE: u64 = 2;
const FIRST_COOKIE: u64 = 3;

/// What a name points at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Inode number.
    pub ino: Ino,
    /// Its type (for `d_type`).
    pub kind: VType,
}

/// The entries of one directory, under the directory's lock.
#[derive(Debug)]
pub struct Directory {
    /// The parent directory (itself for the root). Changed only by a
    /// cross-directory rename, which also holds the file system's rename
    /// lock, so walking parents under that lock is stable.
    pub parent: Ino,
    /// Set by rmdir: the directory takes no new entries.
    pub removed: bool,
    by_name: HashMap<Box<[u8]>, (Target, u64)>,
    by_cookie: BTreeMap<u64, Box<[u8]>>,
    next_cookie: u64,
    /// Subdirectories, for the parent's link count.
    subdirs: u32,
}

impl Directory {
    /// An empty directory under `parent`.
    pub fn new(parent: Ino) -> Directory {
        Directory {
            parent,
            removed: false,
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
            subdirs: 0,
        }
    }

    /// The target of `name`.
    pub fn get(&self, name: &[u8]) -> Option<Target> {
        self.by_name.get(name).map(|(t, _)| *t)
    }

    /// Adds `name`; the caller has checked that it is absent.
    pub fn insert(&mut self, name: &[u8], target: Target) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let key: Box<[u8]> = name.into();
        if target.kind == VType::Dir {
            self.subdirs += 1;
        }
        if let Some((old, c)) = self.by_name.insert(key.clone(), (target, cookie)) {
            // Not expected; keep the maps consistent anyway.
            self.by_cookie.remove(&c);
            if old.kind == VType::Dir {
                self.subdirs -= 1;
            }
        }
        self.by_cookie.insert(cookie, key);
    }

    /// Removes `name` and returns what it pointed at.
    pub fn remove(&mut self, name: &[u8]) -> Option<Target> {
        let (t, cookie) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        if t.kind == VType::Dir {
            self.subdirs -= 1;
        }
        Some(t)
    }

    /// Points an existing `name` at a new target in place, keeping its
    /// cookie (for `RENAME_EXCHANGE`).
    pub fn replace(&mut self, name: &[u8], target: Target) {
        if let Some((t, _)) = self.by_name.get_mut(name) {
            if t.kind == VType::Dir {
                self.subdirs -= 1;
            }
            if target.kind == VType::Dir {
                self.subdirs += 1;
            }
            *t = target;
        }
    }

    /// Number of entries (without `.` and `..`).
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True if the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Subdirectories (the link count is `2 + subdirs`).
    pub fn subdirs(&self) -> u32 {
        self.subdirs
    }

    /// Entries with a cookie greater than `after`, in cookie order.
    pub fn iter_after(&self, after: u64) -> impl Iterator<Item = (u64, &[u8], Target)> + '_ {
        let start = after.saturating_add(1).max(FIRST_COOKIE);
        self.by_cookie.range(start..).map(move |(c, name)| {
            let (t, _) = self.by_name[name];
            (*c, &name[..], t)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ino: Ino) -> Target {
        Target {
            ino,
            kind: VType::Reg,
        }
    }

    #[test]
    fn cookies_survive_changes() {
        let mut d = Directory::new(1);
        d.insert(b"a", t(10));
        d.insert(b"b", t(11));
        d.insert(b"c", t(12));
        let first: Vec<_> = d.iter_after(0).map(|(c, n, _)| (c, n.to_vec())).collect();
        assert_eq!(first.len(), 3);
        // Resume after "a" while "b" is removed and "d" added.
        let after_a = first[0].0;
        d.remove(b"b");
        d.insert(b"d", t(13));
        let rest: Vec<_> = d.iter_after(after_a).map(|(_, n, _)| n.to_vec()).collect();
        assert_eq!(rest, vec![b"c".to_vec(), b"d".to_vec()]);
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn subdir_count() {
        let mut d = Directory::new(1);
        d.insert(
            b"x",
            Target {
                ino: 5,
                kind: VType::Dir,
            },
        );
        d.insert(b"f", t(6));
        assert_eq!(d.subdirs(), 1);
        d.replace(
            b"f",
            Target {
                ino: 7,
                kind: VType::Dir,
            },
        );
        assert_eq!(d.subdirs(), 2);
        d.remove(b"x");
        assert_eq!(d.subdirs(), 1);
    }
}
