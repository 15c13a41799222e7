//! Which open file description of a node's backing file holds each lock
//! owner's record locks (see `locks.rs`, "Who owns a lock"). A table of
//! its own because the file system holds one
//! (`PassthroughFs::posix_locks`) and `locks.rs` serves the requests on
//! it: kept apart, neither module needs the other's.

use crate::fdpool::Fd;
use crate::kept::{Keeper, Kept};
use crate::node::Node;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::Arc;
use uvfs_vfs::{Fh, Ino};

/// A lock owner's open file description of a node's backing file.
struct Held {
    ofd: Arc<Fd>,
    /// The handle it was made through (whose RELEASE ends an OFD owner).
    fh: Fh,
    /// The process that took the owner's first lock (0 if not known: an
    /// owner handed over), which F_GETLK names as the holder.
    pid: u32,
}

/// Node id -> lock owner -> the owner's open file description.
#[derive(Default)]
pub(crate) struct PosixLocks {
    map: Mutex<HashMap<Ino, HashMap<u64, Held>>>,
    /// Given each description, so its locks outlive a crash (`kept.rs`).
    pub(crate) keeper: Keeper,
}

impl PosixLocks {
    /// Open file `fh` of `node` was released: closes the descriptions made
    /// through it (the OFD locks it held), and every owner's description of
    /// `node` if no open file of it is left (then no lock through the mount
    /// can remain; the FLUSH of each close has normally dropped them
    /// already). Checked under the map's lock: a SETLK needs an open file,
    /// and installs under it.
    pub(crate) fn release(&self, node: &Node, fh: Fh) {
        let mut m = self.map.lock();
        let Some(owners) = m.get_mut(&node.id) else {
            return;
        };
        let mut gone = Vec::new();
        if node.open_count() > 0 {
            owners.retain(|&owner, h| {
                let keep = h.fh != fh;
                if !keep {
                    gone.push((owner, h.fh));
                }
                keep
            });
        }
        if node.open_count() == 0 || owners.is_empty() {
            if let Some(o) = m.remove(&node.id) {
                gone.extend(o.iter().map(|(&owner, h)| (owner, h.fh)));
            }
        }
        drop(m);
        for (owner, fh) in gone {
            self.keeper.forget(Kept::Owner {
                node: node.id,
                owner,
                fh,
            });
        }
    }

    pub(crate) fn get(&self, node: Ino, owner: u64) -> Option<Arc<Fd>> {
        let m = self.map.lock();
        m.get(&node)
            .and_then(|o| o.get(&owner))
            .map(|h| h.ofd.clone())
    }

    pub(crate) fn remove(&self, node: Ino, owner: u64) {
        let mut m = self.map.lock();
        let Some(owners) = m.get_mut(&node) else {
            return;
        };
        let gone = owners.remove(&owner);
        if owners.is_empty() {
            m.remove(&node);
        }
        drop(m);
        if let Some(h) = gone {
            self.keeper.forget(Kept::Owner {
                node,
                owner,
                fh: h.fh,
            });
        }
    }

    /// The owner's description, `made` (through `fh`, by process `pid`)
    /// if it has none yet.
    pub(crate) fn get_or_insert(
        &self,
        node: Ino,
        owner: u64,
        fh: Fh,
        pid: u32,
        made: Arc<Fd>,
    ) -> Arc<Fd> {
        let mut m = self.map.lock();
        let mut new = false;
        let h = m.entry(node).or_default().entry(owner).or_insert_with(|| {
            new = true;
            Held { ofd: made, fh, pid }
        });
        let ofd = h.ofd.clone();
        // Kept before a lock is taken on it (the caller locks after).
        if new {
            self.keeper
                .keep(Kept::Owner { node, owner, fh }, ofd.as_fd());
        }
        ofd
    }

    /// Every description held now (to keep them all).
    pub(crate) fn all(&self) -> Vec<(Kept, Arc<Fd>)> {
        let m = self.map.lock();
        m.iter()
            .flat_map(|(&node, o)| {
                o.iter().map(move |(&owner, h)| {
                    (
                        Kept::Owner {
                            node,
                            owner,
                            fh: h.fh,
                        },
                        h.ofd.clone(),
                    )
                })
            })
            .collect()
    }

    /// The descriptions of `node`'s lock owners: (owner, the handle it
    /// was made through, description).
    pub(crate) fn of_node(&self, node: Ino) -> Vec<(u64, Fh, Arc<Fd>)> {
        let m = self.map.lock();
        m.get(&node).map_or_else(Vec::new, |o| {
            o.iter()
                .map(|(&owner, h)| (owner, h.fh, h.ofd.clone()))
                .collect()
        })
    }

    /// Each of `node`'s lock owners but `except` (who may hold a lock
    /// another owner asks about): (owner, its process, its description).
    pub(crate) fn others(&self, node: Ino, except: u64) -> Vec<(u64, u32, Arc<Fd>)> {
        let m = self.map.lock();
        m.get(&node).map_or_else(Vec::new, |o| {
            o.iter()
                .filter(|(&owner, _)| owner != except)
                .map(|(&owner, h)| (owner, h.pid, h.ofd.clone()))
                .collect()
        })
    }

    /// Whether `owner` is known to be the only lock owner of its process:
    /// so most likely the process's own (POSIX) owner, not an open file's
    /// (OFD). A request does not say which kind its owner is; but one
    /// process has one POSIX owner, and every other owner it uses is one
    /// of its open files. False for an owner of unknown process (handed
    /// over) or none here.
    pub(crate) fn alone_in_process(&self, owner: u64) -> bool {
        let m = self.map.lock();
        let held = || m.values().flat_map(|o| o.iter());
        let Some(pid) = held().find(|(&o, _)| o == owner).map(|(_, h)| h.pid) else {
            return false;
        };
        pid != 0 && !held().any(|(&o, h)| o != owner && h.pid == pid)
    }

    /// Descriptions held now (locks in use).
    pub(crate) fn len(&self) -> usize {
        self.map.lock().values().map(HashMap::len).sum()
    }
}
