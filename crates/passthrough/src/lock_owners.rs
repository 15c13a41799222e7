//! Which open file description of a node's backing file holds each lock
//! owner's record locks (see `locks.rs`, "Who owns a lock"). A table of
//! its own because the file system holds one
//! (`PassthroughFs::posix_locks`) and `locks.rs` serves the requests on
//! it: kept apart, neither module needs the other's.

use crate::fdpool::Fd;
use crate::node::Node;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use uvfs_vfs::{Fh, Ino};

/// A lock owner's open file description of a node's backing file.
struct Held {
    ofd: Arc<Fd>,
    /// The handle it was made through (whose RELEASE ends an OFD owner).
    fh: Fh,
}

/// Node id -> lock owner -> the owner's open file description.
#[derive(Default)]
pub(crate) struct PosixLocks {
    map: Mutex<HashMap<Ino, HashMap<u64, Held>>>,
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
        if node.open_count() > 0 {
            owners.retain(|_, h| h.fh != fh);
        }
        if node.open_count() == 0 || owners.is_empty() {
            m.remove(&node.id);
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
        if let Some(owners) = m.get_mut(&node) {
            owners.remove(&owner);
            if owners.is_empty() {
                m.remove(&node);
            }
        }
    }

    /// The owner's description, `made` (through `fh`) if it has none yet.
    pub(crate) fn get_or_insert(&self, node: Ino, owner: u64, fh: Fh, made: Arc<Fd>) -> Arc<Fd> {
        let mut m = self.map.lock();
        let h = m
            .entry(node)
            .or_default()
            .entry(owner)
            .or_insert(Held { ofd: made, fh });
        h.ofd.clone()
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

    /// Descriptions held now (locks in use).
    pub(crate) fn len(&self) -> usize {
        self.map.lock().values().map(HashMap::len).sum()
    }
}
