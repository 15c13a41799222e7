//! Directory contents: names to inodes, with stable readdir cookies.
//!
//! # Cookies
//! Each entry gets a cookie from a per-directory counter when it is added
//! and keeps it until it is removed, renamed within the directory
//! included; a rename into the directory from another is a new entry with
//! a new cookie. A listing returns entries in cookie order. Cookies 1 and
//! 2 are `.` and `..`; entries start at 3.
//!
//! # Offsets: every listing ends
//! A listing started at offset 0 returns only the entries whose cookie is
//! below the counter at its start (its end), as tmpfs stops at the offset
//! its directory had reached at opendir. Each offset it returns carries
//! that end (`(cookie << COOKIE_BITS) | end`), so the listing resumes,
//! after any change, from an offset alone: FUSE passes nothing else (the
//! kernel opens directories itself unless `--opendir`). So a listing
//! returns every entry there throughout exactly once, and any other at
//! most once: one renamed within the directory keeps its place (under
//! one name or the other), and one added meanwhile (moved back from
//! another directory, say) is left to the next listing. Without the end,
//! a program renaming each entry it reads away and back (fstests
//! generic/736) would meet it again at the end, forever.
//!
//! The cookie is the offset's high part, so offsets grow with cookies:
//! a position a program makes up between two of ours (`seekdir` to any
//! value below the last `telldir`, fstests generic/676) finds the entries
//! after it, as on tmpfs. An end that is no end of such a position (not
//! above its cookie) is taken as no end.
//!
//! The counter stays below [`COOKIE_LIMIT`] so that an offset fits 63
//! bits (the kernel's `loff_t`); a directory whose counter reaches it
//! numbers its entries again from 3, in order, and the listings in
//! progress then may see an entry twice or miss one, once.

use std::collections::{BTreeMap, HashMap};
use uvfs_vfs::{Ino, VType};

/// Cookie of `.`.
pub const DOT_COOKIE: u64 = 1;
/// Cookie of `..`.
pub const DOTDOT_COOKIE: u64 = 2;
const FIRST_COOKIE: u64 = 3;
/// Bits of an offset that hold the end; those above hold the cookie.
const COOKIE_BITS: u32 = 31;
/// Cookies (and ends) stay below this.
pub const COOKIE_LIMIT: u64 = 1 << COOKIE_BITS;

/// Where a listing stands: after cookie `after`, up to (not including)
/// cookie `end`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The last cookie returned (0 at the start).
    pub after: u64,
    /// The first cookie the listing does not return.
    pub end: u64,
}

impl Cursor {
    /// The offset to return with the entry of `cookie`.
    pub fn offset_of(&self, cookie: u64) -> u64 {
        (cookie << COOKIE_BITS) | self.end
    }
}

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
    /// Where numbering starts again ([`COOKIE_LIMIT`]; lower in tests).
    cookie_limit: u64,
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
            cookie_limit: COOKIE_LIMIT,
            subdirs: 0,
        }
    }

    /// The next cookie to give, numbering the entries again (in order,
    /// from the first) when the counter reaches the limit.
    fn take_cookie(&mut self) -> u64 {
        if self.next_cookie >= self.cookie_limit {
            let order = std::mem::take(&mut self.by_cookie);
            self.next_cookie = FIRST_COOKIE;
            for (_, name) in order {
                let c = self.next_cookie;
                self.next_cookie += 1;
                if let Some((_, cookie)) = self.by_name.get_mut(&name) {
                    *cookie = c;
                }
                self.by_cookie.insert(c, name);
            }
        }
        let c = self.next_cookie;
        self.next_cookie += 1;
        c
    }

    /// The target of `name`.
    pub fn get(&self, name: &[u8]) -> Option<Target> {
        self.by_name.get(name).map(|(t, _)| *t)
    }

    /// Adds `name`; the caller has checked that it is absent.
    pub fn insert(&mut self, name: &[u8], target: Target) {
        let cookie = self.take_cookie();
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

    /// Moves the entry `from` to the name `to` (absent: the caller removed
    /// what it held), keeping its cookie, so that a listing in progress
    /// returns it once, under one name or the other.
    pub fn rename(&mut self, from: &[u8], to: &[u8]) {
        let Some((target, cookie)) = self.by_name.remove(from) else {
            return;
        };
        let key: Box<[u8]> = to.into();
        self.by_cookie.insert(cookie, key.clone());
        if let Some((old, c)) = self.by_name.insert(key, (target, cookie)) {
            // Not expected; keep the maps consistent anyway.
            self.by_cookie.remove(&c);
            if old.kind == VType::Dir {
                self.subdirs -= 1;
            }
        }
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

    /// Where the listing at `offset` (0, or one this directory returned)
    /// stands. Offset 0 starts a listing, which ends at the entries there
    /// now; so does an offset that carries no end (not one of ours).
    pub fn cursor(&self, offset: u64) -> Cursor {
        let after = offset >> COOKIE_BITS;
        let end = offset & (COOKIE_LIMIT - 1);
        Cursor {
            after,
            end: if end <= after { self.next_cookie } else { end },
        }
    }

    /// The counter the next entry's cookie comes from.
    pub fn next_cookie(&self) -> u64 {
        self.next_cookie
    }

    /// Every entry with its cookie, in cookie order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &[u8], Target)> + '_ {
        self.by_cookie.range(..).map(move |(c, name)| {
            let (t, _) = self.by_name[name];
            (*c, &name[..], t)
        })
    }

    /// A directory as [`entries`](Self::entries) and
    /// [`next_cookie`](Self::next_cookie) described it, so that offsets
    /// it returned before mean the same entries again (a live upgrade).
    /// `None` if the entries cannot be one directory's: a name or cookie
    /// twice, or a cookie outside `[3, next_cookie)`.
    pub fn restored(
        parent: Ino,
        removed: bool,
        next_cookie: u64,
        entries: impl IntoIterator<Item = (u64, Box<[u8]>, Target)>,
    ) -> Option<Directory> {
        if !(FIRST_COOKIE..=COOKIE_LIMIT).contains(&next_cookie) {
            return None;
        }
        let mut d = Directory::new(parent);
        d.removed = removed;
        d.next_cookie = next_cookie;
        for (cookie, name, target) in entries {
            if !(FIRST_COOKIE..next_cookie).contains(&cookie)
                || d.by_cookie.contains_key(&cookie)
                || d.by_name.contains_key(&name)
            {
                return None;
            }
            if target.kind == VType::Dir {
                d.subdirs += 1;
            }
            d.by_cookie.insert(cookie, name.clone());
            d.by_name.insert(name, (target, cookie));
        }
        Some(d)
    }

    /// The entries `cursor` has still to return, in cookie order.
    pub fn iter_from(&self, cursor: Cursor) -> impl Iterator<Item = (u64, &[u8], Target)> + '_ {
        let start = cursor.after.saturating_add(1).max(FIRST_COOKIE);
        let end = cursor.end.max(start);
        self.by_cookie.range(start..end).map(move |(c, name)| {
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

    /// The names a listing resuming at `offset` returns, with their offsets.
    fn list(d: &Directory, offset: u64) -> Vec<(u64, Vec<u8>)> {
        let at = d.cursor(offset);
        d.iter_from(at)
            .map(|(c, n, _)| (at.offset_of(c), n.to_vec()))
            .collect()
    }

    fn names(l: &[(u64, Vec<u8>)]) -> Vec<&[u8]> {
        l.iter().map(|(_, n)| &n[..]).collect()
    }

    #[test]
    fn a_made_up_position_between_offsets_finds_the_entries_after_it() {
        // `seekdir` to any value below the last `telldir` (generic/676):
        // the next entries come, never an early end.
        let mut d = Directory::new(1);
        for i in 0..100u64 {
            d.insert(format!("f{i}").as_bytes(), t(10 + i));
        }
        let l = list(&d, 0);
        let last = l[l.len() - 2].0;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pos = x % last;
            assert!(!list(&d, pos).is_empty(), "EOF at {pos:#x} (< {last:#x})");
        }
    }

    #[test]
    fn cookies_survive_changes() {
        let mut d = Directory::new(1);
        d.insert(b"a", t(10));
        d.insert(b"b", t(11));
        d.insert(b"c", t(12));
        let first = list(&d, 0);
        assert_eq!(names(&first), [b"a", b"b", b"c"]);
        // Resume after "a" while "b" is removed, "c" renamed to "e" and "d"
        // added: "e" keeps the place of "c"; "d" waits for a new listing.
        let after_a = first[0].0;
        d.remove(b"b");
        d.rename(b"c", b"e");
        d.insert(b"d", t(13));
        assert_eq!(names(&list(&d, after_a)), [b"e"]);
        assert_eq!(names(&list(&d, 0)), [b"a", b"e", b"d"]);
        assert_eq!(d.get(b"e"), Some(t(12)));
        assert_eq!((d.get(b"c"), d.len()), (None, 3));
    }

    #[test]
    fn an_entry_renamed_away_and_back_is_listed_once() {
        let mut d = Directory::new(1);
        for i in 0..10u64 {
            d.insert(format!("{i}").as_bytes(), t(10 + i));
        }
        let (mut offset, mut seen) = (0, Vec::new());
        while let Some((off, name)) = list(&d, offset).into_iter().next() {
            offset = off;
            d.rename(&name, b"TEMP");
            d.rename(b"TEMP", &name);
            seen.push(name);
        }
        assert_eq!(seen.len(), 10);
        // Moved out and back in: a new entry, left to the next listing.
        let (mut offset, mut n) = (0, 0);
        while let Some((off, name)) = list(&d, offset).into_iter().next() {
            offset = off;
            let target = d.remove(&name).unwrap();
            d.insert(&name, target);
            n += 1;
        }
        assert_eq!(n, 10);
    }

    #[test]
    fn numbering_starts_again_at_the_limit() {
        let mut d = Directory::new(1);
        d.cookie_limit = 8;
        for i in 0..4u64 {
            d.insert(format!("{i}").as_bytes(), t(10 + i));
        }
        // Churn past the limit: the order stays, cookies stay below it.
        for _ in 0..20 {
            let target = d.remove(b"1").unwrap();
            d.insert(b"1", target);
        }
        let l = list(&d, 0);
        assert_eq!(names(&l), [b"0", b"2", b"3", b"1"]);
        assert!(l.iter().all(|(o, _)| o >> COOKIE_BITS < 8), "{l:?}");
        // A listing resumes from its offset.
        assert_eq!(names(&list(&d, l[1].0)), [b"3", b"1"]);
    }

    #[test]
    fn offsets_fit_a_loff_t() {
        let mut d = Directory::new(1);
        d.next_cookie = COOKIE_LIMIT - 1;
        d.insert(b"last", t(10));
        let l = list(&d, 0);
        assert_eq!(names(&l), [b"last"]);
        assert!(i64::try_from(l[0].0).is_ok());
        assert_eq!(d.cursor(l[0].0).after, COOKIE_LIMIT - 1);
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
