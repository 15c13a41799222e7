//! A synthetic in-memory file system for the vnode-cache workloads: trees
//! of directories and files with their attributes in a table, looked up by
//! name the way a real file system's `VOP_LOOKUP` would (a hash per
//! directory). Immutable once built, shared by every implementation, so
//! they all do the same file-system work and differ only in the cache.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: directory lookups in a real file system hash a short name with
/// a cheap hash; SipHash (std's default) would make the file system's share
/// of each lookup several times what tmpfs or ZFS pay.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        self.0 = h;
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// The attributes a stat returns.
#[derive(Clone, Copy, Debug)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u32,
    pub mtime: i64,
}

pub struct Dir {
    pub ino: u64,
    /// Entries in readdir order.
    pub entries: Vec<(String, u64, bool)>,
    /// name -> index in `entries` (the directory's lookup structure).
    pub index: Map<String, usize>,
}

/// One tree: directories with up to `fanout` entries, files at the leaves.
pub struct Tree {
    pub root: u64,
    pub dirs: Map<u64, Dir>,
    pub attrs: Map<u64, Attr>,
    pub files: usize,
}

impl Tree {
    /// Builds a tree of about `files` files under directories of `fanout`
    /// entries, inode numbers starting at `base`.
    pub fn build(base: u64, files: usize, fanout: usize) -> Tree {
        let fanout = fanout.max(2);
        let mut t = Tree {
            root: base,
            dirs: Map::default(),
            attrs: Map::default(),
            files: 0,
        };
        let mut next = base + 1;
        t.fill(base, files, fanout, &mut next);
        t
    }

    fn fill(&mut self, ino: u64, files: usize, fanout: usize, next: &mut u64) {
        let mut entries = Vec::new();
        if files <= fanout {
            for i in 0..files {
                let f = *next;
                *next += 1;
                self.attrs.insert(f, attr(f, 0o100644, (f % 4096) * 13));
                entries.push((format!("f{i}"), f, false));
                self.files += 1;
            }
        } else {
            // As few subdirectories as keep each under `fanout` levels deep:
            // full leaf directories, not a spray of one-file ones.
            let subdirs = fanout.min(files.div_ceil(fanout));
            let per = files.div_ceil(subdirs);
            let mut left = files;
            let mut i = 0;
            while left > 0 {
                let n = per.min(left);
                let d = *next;
                *next += 1;
                entries.push((format!("d{i}"), d, true));
                self.fill(d, n, fanout, next);
                left -= n;
                i += 1;
            }
        }
        self.attrs.insert(ino, attr(ino, 0o40755, 4096));
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.0.clone(), i))
            .collect();
        self.dirs.insert(
            ino,
            Dir {
                ino,
                entries,
                index,
            },
        );
    }

    /// VOP_LOOKUP: name under a directory -> (ino, is_dir).
    #[inline]
    pub fn lookup(&self, dir: u64, name: &str) -> Option<(u64, bool)> {
        let d = self.dirs.get(&dir)?;
        let &i = d.index.get(name)?;
        let e = &d.entries[i];
        Some((e.1, e.2))
    }

    /// VOP_GETATTR.
    #[inline]
    pub fn getattr(&self, ino: u64) -> Option<Attr> {
        self.attrs.get(&ino).copied()
    }
}

fn attr(ino: u64, mode: u32, size: u64) -> Attr {
    Attr {
        ino,
        size,
        mode,
        nlink: 1,
        mtime: 1_700_000_000 + ino as i64,
    }
}

/// The per-vnode private data a synthetic file system attaches (a copy of
/// the inode, as ZFS attaches a znode): allocated at vnode construction.
pub struct SynthNode {
    pub attr: Attr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_has_the_requested_files_all_reachable() {
        let t = Tree::build(1000, 1234, 16);
        assert_eq!(t.files, 1234);
        let mut seen = 0;
        let mut stack = vec![t.root];
        while let Some(d) = stack.pop() {
            for (name, ino, is_dir) in &t.dirs[&d].entries {
                assert_eq!(t.lookup(d, name), Some((*ino, *is_dir)));
                if *is_dir {
                    stack.push(*ino);
                } else {
                    seen += 1;
                    assert_eq!(t.getattr(*ino).unwrap().mode, 0o100644);
                }
            }
        }
        assert_eq!(seen, 1234);
    }
}
