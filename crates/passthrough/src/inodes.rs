//! Node ids: backing (dev, ino) -> the inode number the mount shows.
//!
//! # Stable without memory
//! A file on the source root's own device keeps its backing inode number
//! as its node id (and `st_ino`), so ids are stable across FORGET and
//! re-lookup, across server restarts, and cost no table at all: `find`,
//! `tar`, `rsync` and `git` compare `st_ino` within and across runs, and a
//! table that forgot cold entries would renumber them. The FUSE layer
//! swaps the root's id with 1 (`FUSE_ROOT_ID`), so uniqueness holds.
//!
//! Files on other devices (mounts inside the source directory), and
//! inode numbers too large to leave room for those, get ids from
//! [`FOREIGN_BASE`] up, remembered for the server's life: a map that grows
//! only with the foreign files ever seen.
//!
//! # Generations
//! The generation comes from the file handle (`Handle::generation`): same
//! file, same number, on every lookup and after restarts; a new file that
//! reuses an inode number gets a different one.

use parking_lot::Mutex;
use std::collections::HashMap;
use uvfs_vfs::Ino;

/// First node id handed to foreign (other-device) files.
pub const FOREIGN_BASE: Ino = 1 << 62;

/// (dev, ino) -> node id.
pub struct InodeMap {
    root_dev: u64,
    foreign: Mutex<Foreign>,
}

struct Foreign {
    ids: HashMap<(u64, u64), Ino>,
    next: Ino,
}

impl InodeMap {
    /// A map for a source whose root is on device `root_dev`.
    pub fn new(root_dev: u64) -> InodeMap {
        InodeMap {
            root_dev,
            foreign: Mutex::new(Foreign {
                ids: HashMap::new(),
                next: FOREIGN_BASE,
            }),
        }
    }

    /// The node id of backing inode (dev, ino).
    pub fn node_id(&self, dev: u64, ino: u64) -> Ino {
        if dev == self.root_dev && ino != 0 && ino < FOREIGN_BASE {
            return ino;
        }
        let mut f = self.foreign.lock();
        if let Some(&id) = f.ids.get(&(dev, ino)) {
            return id;
        }
        let id = f.next;
        f.next += 1;
        f.ids.insert((dev, ino), id);
        id
    }

    /// The node id of (dev, ino) if it has one (numbers nothing new).
    pub fn known_id(&self, dev: u64, ino: u64) -> Option<Ino> {
        if dev == self.root_dev && ino != 0 && ino < FOREIGN_BASE {
            return Some(ino);
        }
        self.foreign.lock().ids.get(&(dev, ino)).copied()
    }

    /// Foreign files numbered so far.
    pub fn foreign_count(&self) -> usize {
        self.foreign.lock().ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_unique() {
        let m = InodeMap::new(7);
        assert_eq!(m.node_id(7, 12), 12);
        let a = m.node_id(8, 12);
        let b = m.node_id(8, 13);
        assert!(a >= FOREIGN_BASE && b >= FOREIGN_BASE && a != b);
        assert_eq!(m.node_id(8, 12), a);
        let big = m.node_id(7, u64::MAX);
        assert!(big >= FOREIGN_BASE && big != a && big != b);
        assert_eq!(m.foreign_count(), 3);
    }
}
