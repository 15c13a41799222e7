//! Nodes sent ahead: the node table copied to the successor while the
//! predecessor still serves, so that what requests wait for is only what
//! changed since.
//!
//! A million nodes are a million vnodes to find (a walk of the vnode
//! table), sort and encode, and a list for the successor to read: most
//! of an upgrade's pause when done with the request loops parked
//! (docs/results.md has the figures). Instead, when the successor's
//! hello says it takes them (`"nodes_ahead": true`):
//!
//! 1. The predecessor starts recording count changes
//!    (`count_changes.rs`), walks the table while serving, and sends the
//!    nodes it found in a frame of their own ([`encode`]); the successor
//!    reads it into the form it adopts nodes in ([`Ahead`]) and answers
//!    `{"ahead": N}`.
//! 2. The predecessor parks its loops, stops recording, and reads the
//!    count of each node recorded: the state's `nodes` are then those
//!    alone (a count of 0: forgotten since), which the successor applies
//!    to what it read ahead ([`Ahead::apply`]).
//!
//! A predecessor of an older build sends no such frame and the whole
//! list with the state; a successor that did not ask for it gets none.
//!
//! # Layout
//! [`MAGIC`], the node count (u64), then per node its id, inode number
//! and count (u64 each, little-endian), in inode order (which is id
//! order but for the root's swap, `nodes.rs`).

use super::state::NodeState;
use crate::nodes::ROOT_ID;

/// What the frame starts with (not a state's magic: a successor tells
/// the two apart by it).
const MAGIC: &[u8; 16] = b"uvfs-nodes-ahead";
/// Bytes per node.
const NODE: usize = 24;

/// The frame of nodes `(id, ino, count)`, given in inode order.
pub(crate) fn encode(nodes: impl ExactSizeIterator<Item = (u64, u64, u64)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + nodes.len() * NODE);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(nodes.len() as u64).to_le_bytes());
    for (id, ino, count) in nodes {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&ino.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }
    out
}

/// Whether frame `b` is one of nodes sent ahead.
pub(crate) fn is_ahead(b: &[u8]) -> bool {
    b.starts_with(MAGIC)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn eproto(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// Nodes read ahead, as the node table adopts them.
#[derive(Debug, PartialEq)]
pub(crate) struct Ahead {
    /// The root's inode number and count (the node of id 1).
    pub root: Option<(u64, u64)>,
    /// Every other node's (id, count), sorted by id, one per id; a count
    /// of 0 is a node forgotten since.
    pub nodes: Vec<(u64, u64)>,
}

impl Ahead {
    /// Reads a frame made by [`encode`]. Every node's id must be its
    /// inode number but for the root's swap (id 1 is the root's inode,
    /// inode 1 the root's id): anything else is refused.
    pub(crate) fn decode(b: &[u8]) -> std::io::Result<Ahead> {
        if !is_ahead(b) || b.len() < MAGIC.len() + 8 {
            return Err(eproto("not a frame of nodes"));
        }
        let count = u64_at(b, MAGIC.len());
        let body = &b[MAGIC.len() + 8..];
        if usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(NODE))
            != Some(body.len())
        {
            return Err(eproto("a frame of nodes of the wrong length"));
        }
        let mut root = None;
        let mut nodes = Vec::with_capacity(body.len() / NODE);
        for r in body.chunks_exact(NODE) {
            let (id, ino, count) = (u64_at(r, 0), u64_at(r, 8), u64_at(r, 16));
            if id == ROOT_ID {
                root = Some((ino, count));
            } else {
                nodes.push((id, ino, count));
            }
        }
        let root_ino = root.map_or(ROOT_ID, |r| r.0);
        if let Some(&(id, ino, _)) = nodes
            .iter()
            .find(|&&(id, ino, _)| id != ino && !(ino == ROOT_ID && id == root_ino))
        {
            return Err(eproto(format!(
                "node {id} is inode {ino}: not the one node ids are made from"
            )));
        }
        let mut nodes: Vec<(u64, u64)> = nodes.into_iter().map(|(id, _, c)| (id, c)).collect();
        if !nodes.is_sorted_by(|a, b| a.0 < b.0) {
            // The inode numbered 1, if the kernel holds it, comes first in
            // inode order but is node id `root_ino`.
            nodes.sort_by_key(|n| n.0);
            if nodes.windows(2).any(|p| p[0].0 == p[1].0) {
                return Err(eproto("a node sent twice"));
            }
        }
        Ok(Ahead { root, nodes })
    }

    /// Applies the counts of the nodes that changed since (sorted by id,
    /// each once; a count of 0 for a node the kernel forgot).
    pub(crate) fn apply(&mut self, changed: &[NodeState]) {
        let mut fresh = Vec::new();
        for n in changed {
            if n.id == ROOT_ID {
                self.root = Some((n.ino, n.count));
                continue;
            }
            match self.nodes.binary_search_by_key(&n.id, |m| m.0) {
                Ok(i) => self.nodes[i].1 = n.count,
                Err(_) if n.count > 0 => fresh.push((n.id, n.count)),
                Err(_) => {}
            }
        }
        if fresh.is_empty() {
            return;
        }
        fresh.sort_unstable_by_key(|n| n.0);
        // One pass over both: nodes new since are few, the others a
        // million.
        let old = std::mem::take(&mut self.nodes);
        let mut merged = Vec::with_capacity(old.len() + fresh.len());
        let mut fresh = fresh.into_iter().peekable();
        for n in old {
            while let Some(f) = fresh.next_if(|f| f.0 < n.0) {
                merged.push(f);
            }
            merged.push(n);
        }
        merged.extend(fresh);
        self.nodes = merged;
    }

    /// Nodes the kernel holds (the root included).
    pub(crate) fn held(&self) -> usize {
        self.nodes.iter().filter(|n| n.1 > 0).count() + usize::from(self.root.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(id: u64, count: u64) -> NodeState {
        NodeState { id, ino: id, count }
    }

    #[test]
    fn nodes_read_ahead_take_the_changes_made_since() {
        // Root inode 2 (node 1); inode 1 is node 2.
        let sent = [(2, 1, 1), (1, 2, 3), (5, 5, 1), (9, 9, 2)];
        let frame = encode(sent.iter().map(|&(id, ino, c)| (id, ino, c)));
        assert!(is_ahead(&frame));
        let mut a = Ahead::decode(&frame).unwrap();
        assert_eq!(a.root, Some((2, 3)));
        assert_eq!(a.nodes, vec![(2, 1), (5, 1), (9, 2)]);
        // Node 5 forgotten, 9 looked up again, 7 and 11 new, 13 new and
        // gone again, the root forgotten once.
        a.apply(&[
            NodeState {
                id: 1,
                ino: 2,
                count: 2,
            },
            n(5, 0),
            n(7, 1),
            n(9, 3),
            n(11, 4),
            n(13, 0),
        ]);
        assert_eq!(a.root, Some((2, 2)));
        assert_eq!(a.nodes, vec![(2, 1), (5, 0), (7, 1), (9, 3), (11, 4)]);
        assert_eq!(a.held(), 5);
    }

    #[test]
    fn frames_that_do_not_hold_together_are_refused() {
        let good = encode([(1, 2, 1), (7, 7, 1)].into_iter());
        assert!(Ahead::decode(&good).is_ok());
        assert!(Ahead::decode(&good[..good.len() - 1]).is_err());
        assert!(Ahead::decode(&good[..10]).is_err());
        let mut long = good.clone();
        long.extend_from_slice(&[0; 24]);
        assert!(Ahead::decode(&long).is_err());
        // A node whose id is not its inode number.
        assert!(Ahead::decode(&encode([(1, 2, 1), (7, 8, 1)].into_iter())).is_err());
        // The same node twice.
        assert!(Ahead::decode(&encode([(1, 2, 1), (2, 1, 1), (2, 1, 1)].into_iter())).is_err());
        assert!(!is_ahead(b"uvfs-handover\0 and more"));
    }
}
