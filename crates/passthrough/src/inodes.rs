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
//!
//! # A reused inode number the kernel still remembers
//! A file removed behind the server's back frees its inode number once no
//! fd pins it (an idle node gives its fd back), and the backing file
//! system may hand the number to the next file created. If the kernel
//! still remembers the old file's node (a process's cwd, a dentry not yet
//! revalidated), the node id cannot move to the new file: a request the
//! kernel sends for its old inode carries only the node id, and would act
//! on the new file (a `mkdir` in a removed cwd landing in another
//! directory). The new file gets an *alias*: an id from the foreign range,
//! remembered with its generation, which lookups of that file keep
//! finding for the server's life; the old node keeps its own file's
//! handle and answers `ESTALE`. The alias is also the new file's
//! `st_ino` (fuser sends the node id as the inode number), so that file's
//! `st_ino` differs from the backing one; it stays the same while the
//! server runs. Reuse while the kernel holds the old node is rare, so the
//! map is usually empty, and then costs lookups one atomic load.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use uvfs_vfs::Ino;

/// First node id handed to foreign (other-device) files and aliases.
pub const FOREIGN_BASE: Ino = 1 << 62;

/// The numbering of foreign files and aliases, as a live upgrade hands it
/// over: ((dev, ino), id), ((dev, ino), (generation, id)), next id.
#[derive(serde::Serialize, serde::Deserialize, Default, Debug)]
pub(crate) struct ForeignIds {
    pub ids: Vec<((u64, u64), Ino)>,
    pub aliases: Vec<((u64, u64), (u64, Ino))>,
    pub next: Ino,
}

/// (dev, ino) -> node id.
pub struct InodeMap {
    root_dev: u64,
    /// Whether `Foreign::aliases` has an entry (changed under the lock):
    /// lookups skip the lock while it is false. One that reads `false`
    /// while another thread makes the first alias finds the old node
    /// behind the inode number, not its file, and asks `make_alias`, which
    /// hands it the alias just made.
    any_alias: AtomicBool,
    foreign: Mutex<Foreign>,
}

struct Foreign {
    ids: HashMap<(u64, u64), Ino>,
    /// (dev, ino) -> (generation of the file behind it, its alias id).
    aliases: HashMap<(u64, u64), (u64, Ino)>,
    next: Ino,
}

impl Foreign {
    fn number(&mut self) -> Ino {
        let id = self.next;
        self.next += 1;
        id
    }
}

impl InodeMap {
    /// A map for a source whose root is on device `root_dev`.
    pub fn new(root_dev: u64) -> InodeMap {
        InodeMap {
            root_dev,
            any_alias: AtomicBool::new(false),
            foreign: Mutex::new(Foreign {
                ids: HashMap::new(),
                aliases: HashMap::new(),
                next: FOREIGN_BASE,
            }),
        }
    }

    fn own(&self, dev: u64, ino: u64) -> bool {
        dev == self.root_dev && ino != 0 && ino < FOREIGN_BASE
    }

    /// The id of backing inode (dev, ino) when no alias applies: the
    /// inode number itself, or a foreign id.
    pub fn node_id(&self, dev: u64, ino: u64) -> Ino {
        if self.own(dev, ino) {
            return ino;
        }
        let mut f = self.foreign.lock();
        if let Some(&id) = f.ids.get(&(dev, ino)) {
            return id;
        }
        let id = f.number();
        f.ids.insert((dev, ino), id);
        id
    }

    /// The id of the file of generation `gen` at (dev, ino): its alias if
    /// it has one, else `node_id`.
    pub fn id_of(&self, dev: u64, ino: u64, gen: u64) -> Ino {
        if self.any_alias.load(Ordering::Acquire) {
            let f = self.foreign.lock();
            if let Some(&(g, id)) = f.aliases.get(&(dev, ino)) {
                if g == gen {
                    return id;
                }
            }
        }
        self.node_id(dev, ino)
    }

    /// The id the newest file seen at (dev, ino) has (an alias, if one
    /// was made), for callers that know no generation: renames finding
    /// the nodes they move.
    pub fn newest_id(&self, dev: u64, ino: u64) -> Ino {
        self.alias_of(dev, ino)
            .unwrap_or_else(|| self.node_id(dev, ino))
    }

    /// A directory entry's `d_ino`: `newest_id`, except that where (dev,
    /// ino) has an alias, `gen_now` (the entry's file's generation, if it
    /// can be had) says whether the alias is that file's: if not, the
    /// file there now is another, which takes the number (or an alias of
    /// its own when looked up, if the kernel still holds the number's
    /// first file). Costs listings nothing while no alias exists (one
    /// atomic load).
    pub fn listed_id(&self, dev: u64, ino: u64, gen_now: impl FnOnce() -> Option<u64>) -> Ino {
        if self.alias_of(dev, ino).is_none() {
            return self.node_id(dev, ino);
        }
        match gen_now() {
            Some(gen) => self.id_of(dev, ino, gen),
            None => self.newest_id(dev, ino),
        }
    }

    fn forget_alias(&self, f: &mut Foreign, dev: u64, ino: u64) {
        f.aliases.remove(&(dev, ino));
        if f.aliases.is_empty() {
            self.any_alias.store(false, Ordering::Release);
        }
    }

    fn alias_of(&self, dev: u64, ino: u64) -> Option<Ino> {
        if !self.any_alias.load(Ordering::Acquire) {
            return None;
        }
        self.foreign
            .lock()
            .aliases
            .get(&(dev, ino))
            .map(|&(_, id)| id)
    }

    /// A new alias for the file of generation `gen` at (dev, ino), whose
    /// `node_id` still names another file the kernel remembers. Replaces
    /// an older alias of (dev, ino) (its file is gone too).
    pub fn make_alias(&self, dev: u64, ino: u64, gen: u64) -> Ino {
        let mut f = self.foreign.lock();
        self.any_alias.store(true, Ordering::Release);
        if let Some(&(g, id)) = f.aliases.get(&(dev, ino)) {
            if g == gen {
                return id; // another lookup of the same file made it first
            }
        }
        let id = f.number();
        f.aliases.insert((dev, ino), (gen, id));
        id
    }

    /// For a server started after a crash: node id `id`, which the kernel
    /// holds, is never handed to another file. Ids made since the state
    /// the crashed server saved at mount are not in it; numbering from
    /// that state's next id would give a held id to a second file.
    pub fn keep_held(&self, id: Ino) {
        if id >= FOREIGN_BASE {
            let mut f = self.foreign.lock();
            f.next = f.next.max(id.saturating_add(1));
        }
    }

    /// For a server started after a crash: `id`, held by the kernel, is
    /// the alias the crashed server gave the file of generation `gen` at
    /// (dev, ino) (a journal record says so); false if `id` cannot be
    /// one (not in the foreign range, or (dev, ino) not on the source
    /// root's device). A newer alias of (dev, ino) that the state saved
    /// at mount held is replaced, as `make_alias` would have.
    pub fn adopt_alias(&self, dev: u64, ino: u64, gen: u64, id: Ino) -> bool {
        if id < FOREIGN_BASE || !self.own(dev, ino) {
            return false;
        }
        let mut f = self.foreign.lock();
        self.any_alias.store(true, Ordering::Release);
        f.aliases.insert((dev, ino), (gen, id));
        f.next = f.next.max(id.saturating_add(1));
        true
    }

    /// Forgets the alias of (dev, ino): `node_id` names its newest file
    /// again (the kernel no longer remembers the file that blocked it).
    pub fn drop_alias(&self, dev: u64, ino: u64) {
        if self.any_alias.load(Ordering::Acquire) {
            let mut f = self.foreign.lock();
            self.forget_alias(&mut f, dev, ino);
        }
    }

    /// Forgets the alias of (dev, ino) unless it is the alias of the file
    /// of generation `gen` (the one there now, which holds the number).
    pub fn drop_stale_alias(&self, dev: u64, ino: u64, gen: u64) {
        if self.any_alias.load(Ordering::Acquire) {
            let mut f = self.foreign.lock();
            if f.aliases.get(&(dev, ino)).is_some_and(|&(g, _)| g != gen) {
                self.forget_alias(&mut f, dev, ino);
            }
        }
    }

    /// Whether any inode number has an alias now (one atomic load).
    pub fn has_aliases(&self) -> bool {
        self.any_alias.load(Ordering::Acquire)
    }

    /// The node id of (dev, ino) if it has one (numbers nothing new).
    pub fn known_id(&self, dev: u64, ino: u64) -> Option<Ino> {
        if let Some(id) = self.alias_of(dev, ino) {
            return Some(id);
        }
        if self.own(dev, ino) {
            return Some(ino);
        }
        self.foreign.lock().ids.get(&(dev, ino)).copied()
    }

    /// Every foreign id and alias, and the next id to hand out (a live
    /// upgrade's state: the successor's ids must be the same).
    pub(crate) fn export(&self) -> ForeignIds {
        let f = self.foreign.lock();
        ForeignIds {
            ids: f.ids.iter().map(|(&k, &v)| (k, v)).collect(),
            aliases: f.aliases.iter().map(|(&k, &v)| (k, v)).collect(),
            next: f.next,
        }
    }

    /// Takes over a predecessor's foreign ids and aliases (before any
    /// lookup). `None` if they are not consistent: an id outside the
    /// foreign range or at or above `next`, or used twice.
    pub(crate) fn import(&self, saved: ForeignIds) -> Option<()> {
        let mut seen = std::collections::HashSet::new();
        let ok = |id: Ino| (FOREIGN_BASE..saved.next).contains(&id);
        let mut f = self.foreign.lock();
        for &(k, id) in &saved.ids {
            if !ok(id) || !seen.insert(id) || f.ids.insert(k, id).is_some() {
                return None;
            }
        }
        for &(k, (gen, id)) in &saved.aliases {
            if !ok(id) || !seen.insert(id) || f.aliases.insert(k, (gen, id)).is_some() {
                return None;
            }
        }
        f.next = saved.next;
        self.any_alias
            .store(!f.aliases.is_empty(), Ordering::Release);
        Some(())
    }

    /// Foreign files numbered so far.
    pub fn foreign_count(&self) -> usize {
        self.foreign.lock().ids.len()
    }

    /// Aliases in use (reused inode numbers whose old file the kernel
    /// remembered).
    pub fn alias_count(&self) -> usize {
        self.foreign.lock().aliases.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_held_after_a_crash_are_not_numbered_again() {
        let m = InodeMap::new(7);
        let first = m.node_id(8, 1);
        // Held by the kernel, numbered by the crashed server after its
        // saved state: an alias on the root's device, a foreign file.
        let alias = first + 5;
        m.keep_held(first + 9);
        assert!(m.adopt_alias(7, 40, 3, alias));
        assert_eq!(m.id_of(7, 40, 3), alias);
        assert_eq!(m.id_of(7, 40, 4), 40, "another file at the number");
        assert_eq!(m.node_id(8, 2), first + 10);
        // Not an alias: outside the foreign range, or another device.
        assert!(!m.adopt_alias(7, 41, 3, 41));
        assert!(!m.adopt_alias(8, 41, 3, first + 20));
        // Lower ids leave the numbering where it is.
        m.keep_held(first + 1);
        assert_eq!(m.node_id(8, 3), first + 11);
    }

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

    #[test]
    fn an_alias_names_one_generation_until_dropped() {
        let m = InodeMap::new(7);
        assert_eq!(m.id_of(7, 12, 100), 12);
        let a = m.make_alias(7, 12, 101);
        assert!(a >= FOREIGN_BASE);
        assert_eq!(m.make_alias(7, 12, 101), a, "same file, same alias");
        assert_eq!(m.id_of(7, 12, 101), a);
        // The old file (or an unknown third one) keeps the inode number.
        assert_eq!(m.id_of(7, 12, 100), 12);
        assert_eq!(m.id_of(7, 12, 102), 12);
        assert_eq!((m.newest_id(7, 12), m.known_id(7, 12)), (a, Some(a)));
        assert_eq!(m.newest_id(7, 13), 13);
        // A third file while the kernel still holds the first: new alias.
        let b = m.make_alias(7, 12, 102);
        assert!(b != a && b >= FOREIGN_BASE && b != m.node_id(8, 1));
        assert_eq!((m.id_of(7, 12, 101), m.id_of(7, 12, 102)), (12, b));
        assert_eq!(m.alias_count(), 1);
        m.drop_alias(7, 12);
        assert_eq!((m.id_of(7, 12, 102), m.newest_id(7, 12)), (12, 12));
        assert_eq!(m.alias_count(), 0);
    }
}
