//! The saved state's encoding (format [`FORMAT`]): serde types written
//! with bincode. Read back only by a successor that knows this exact
//! format; anything that does not decode completely, or does not hold
//! together ([`State::check`]), is refused, never half-read.

use crate::handle::Handle;
use crate::inodes::ForeignIds;
use serde::{Deserialize, Serialize};
use uvfs_vfs::{Ino, VType};

/// The name and version of this encoding. A change to any type below is
/// a new version.
pub(crate) const FORMAT: &str = "uvfs-passthrough/1";

/// Handle bytes kept without a heap allocation: most file systems'
/// handles (ext4 8, xfs 8 or 12, tmpfs 12), so that a million saved
/// nodes decode without a million allocations.
const SMALL: usize = 16;

/// Everything a successor needs (see `handover/mod.rs`).
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct State {
    /// What the source root was: the successor must serve the same.
    pub root: RootId,
    /// Kept nodes, by id, strictly increasing.
    pub nodes: Vec<SavedNode>,
    /// The handles of recycled nodes (`remembered.rs`), oldest first.
    pub remembered: Vec<(Ino, SavedHandle)>,
    /// Foreign ids and aliases (`inodes.rs`).
    pub foreign: ForeignIds,
    /// Kept open files and directories.
    pub opens: Vec<SavedOpen>,
    /// Lock owners' descriptions of kept open files' nodes (`locks.rs`).
    pub locks: Vec<SavedLock>,
    /// The next open-file handle number.
    pub next_fh: u64,
    /// `PtCounters`, in declaration order.
    pub counters: Vec<u64>,
}

/// The source root's identity.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub(crate) struct RootId {
    pub dev: u64,
    pub ino: u64,
    pub handle: Option<SavedHandle>,
}

/// A file handle without its mount id: the successor's own opener
/// names the mount (the same one, since the root is the same file).
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq, Clone)]
pub(crate) struct SavedHandle {
    pub htype: i32,
    len: u8,
    small: [u8; SMALL],
    big: Vec<u8>,
}

impl SavedHandle {
    pub fn of(h: &Handle) -> SavedHandle {
        let b = h.bytes();
        let mut small = [0; SMALL];
        let (len, big) = if b.len() <= SMALL {
            small[..b.len()].copy_from_slice(b);
            (b.len() as u8, Vec::new())
        } else {
            (u8::MAX, b.to_vec())
        };
        SavedHandle {
            htype: h.htype(),
            len,
            small,
            big,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match usize::from(self.len) {
            n if n <= SMALL => &self.small[..n],
            _ => &self.big,
        }
    }

    /// The handle, made on the mount `mount_id`.
    pub fn handle(&self, mount_id: i32) -> Handle {
        Handle::from_parts(self.htype, mount_id, self.bytes())
    }

    fn well_formed(&self) -> bool {
        let n = usize::from(self.len);
        (n <= SMALL && self.big.is_empty()) || (n == usize::from(u8::MAX) && self.big.len() > SMALL)
    }
}

/// A kept node: what `vget` needs to find it again.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SavedNode {
    pub id: Ino,
    /// `VType as u8`.
    pub kind: u8,
    pub way: SavedWay,
}

/// How a kept node is found again (`node::Way`).
#[derive(Serialize, Deserialize, Debug)]
pub(crate) enum SavedWay {
    /// Only by an fd: an open file's (else lost: `ESTALE`).
    FdOnly,
    Handle(SavedHandle),
    /// By its parent node and its name there.
    Path {
        parent: Ino,
        name: Vec<u8>,
    },
}

/// A kept open file or directory.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SavedOpen {
    pub fh: u64,
    pub node: Ino,
    /// The node's backing file, which `fd` must be.
    pub dev: u64,
    pub ino: u64,
    /// Index into `Saved::fds`: a duplicate of the open's fd (the same
    /// open file description).
    pub fd: u32,
    /// The mount removed the file's last name (`Node::mark_removed`).
    pub removed: bool,
    /// `Node::set_orphan`.
    pub orphan: bool,
}

/// A lock owner's description (`lock_owners.rs`).
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SavedLock {
    pub node: Ino,
    pub owner: u64,
    /// The open file it was made through.
    pub fh: u64,
    /// Index into `Saved::fds`.
    pub fd: u32,
}

fn options() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
}

impl State {
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        use bincode::Options;
        options().serialize(self).map_err(|e| e.to_string())
    }

    /// Decodes `bytes` entirely (trailing bytes are an error), never
    /// allocating more than `bytes` could describe.
    pub fn decode(bytes: &[u8]) -> Result<State, String> {
        use bincode::Options;
        options()
            .with_limit(bytes.len() as u64)
            .reject_trailing_bytes()
            .deserialize(bytes)
            .map_err(|e| e.to_string())
    }

    /// Whether the state holds together: nodes sorted and unique, known
    /// types, well-formed handles and names, fd indexes below `fds`.
    pub fn check(&self, fds: usize, counters: usize) -> Result<(), String> {
        if !self.nodes.windows(2).all(|w| w[0].id < w[1].id) {
            return Err("kept nodes are not sorted by id".into());
        }
        for n in &self.nodes {
            if VType::from_u8(n.kind) == VType::Non {
                return Err(format!("node {}: unknown type {}", n.id, n.kind));
            }
            match &n.way {
                SavedWay::Handle(h) if !h.well_formed() => {
                    return Err(format!("node {}: malformed handle", n.id))
                }
                SavedWay::Path { name, .. }
                    if uvfs_vfs::check_name(name).is_err() || uvfs_vfs::is_dot_or_dotdot(name) =>
                {
                    return Err(format!("node {}: invalid name", n.id))
                }
                _ => {}
            }
        }
        if let Some(h) = &self.root.handle {
            if !h.well_formed() {
                return Err("malformed root handle".into());
            }
        }
        if self.remembered.iter().any(|(_, h)| !h.well_formed()) {
            return Err("malformed remembered handle".into());
        }
        let fd_ok = |i: u32| (i as usize) < fds;
        if !self.opens.iter().all(|o| fd_ok(o.fd)) || !self.locks.iter().all(|l| fd_ok(l.fd)) {
            return Err(format!("an fd index is beyond the {fds} fds passed"));
        }
        if self.counters.len() != counters {
            return Err(format!(
                "{} counters, this version has {counters}",
                self.counters.len()
            ));
        }
        Ok(())
    }

    /// The kept node `id`.
    pub fn node(nodes: &[SavedNode], id: Ino) -> Option<&SavedNode> {
        nodes
            .binary_search_by_key(&id, |n| n.id)
            .ok()
            .map(|i| &nodes[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_keep_their_bytes_small_or_large() {
        for len in [0, 8, 12, SMALL, SMALL + 1, 40, 128] {
            let bytes: Vec<u8> = (0..len as u8).collect();
            let h = Handle::from_parts(7, 3, &bytes);
            let s = SavedHandle::of(&h);
            assert!(s.well_formed());
            assert_eq!(s.bytes(), &bytes[..]);
            assert_eq!(s.handle(3), h);
        }
    }
}
