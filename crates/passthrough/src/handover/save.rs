//! `FileSystem::save`: the state of `handover/mod.rs`, changing nothing
//! (the predecessor may go on serving if the successor fails).

use super::state::{RootId, SavedHandle, SavedLock, SavedNode, SavedOpen, SavedWay, State};
use crate::fs::PassthroughFs;
use crate::node::{Node, Way};
use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Errno, Keep, Saved, VfsResult};

fn saved_node(node: &Node) -> SavedNode {
    let ident = node.ident();
    let way = match &ident.way {
        Way::FdOnly => SavedWay::FdOnly,
        Way::Handle(h) => SavedWay::Handle(SavedHandle::of(h)),
        Way::Path(at) => SavedWay::Path {
            parent: at.0.id,
            name: at.1.to_vec(),
        },
    };
    SavedNode {
        id: node.id,
        kind: ident.kind as u8,
        way,
    }
}

/// A new descriptor of the same open file description.
fn dup(fd: impl AsFd) -> VfsResult<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 0)?)
}

impl PassthroughFs {
    pub(crate) fn do_save(&self, keep: &Keep<'_>) -> VfsResult<Saved> {
        let mut nodes = Vec::with_capacity(keep.nodes.len() + keep.open.len());
        for vp in keep.nodes {
            nodes.push(saved_node(&*self.node_of(vp)?));
        }
        let mut fds = Vec::new();
        let mut opens = Vec::with_capacity(keep.open.len());
        let mut open_nodes = Vec::new();
        for (vp, fh) in keep.open {
            let of = self.opens.get(*fh)?;
            if !Arc::ptr_eq(&of.node, &self.node_of(vp)?) {
                return Err(Errno::EBADF);
            }
            let node = &of.node;
            nodes.push(saved_node(node));
            opens.push(SavedOpen {
                fh: fh.0,
                node: node.id,
                dev: node.dev(),
                ino: node.ino,
                fd: fd_index(&fds)?,
                removed: node.nameless_by_mount(),
                orphan: node.is_orphan(),
            });
            fds.push(dup(&of.fd)?);
            open_nodes.push(node.id);
        }
        let kept_fhs: HashSet<u64> = keep.open.iter().map(|(_, fh)| fh.0).collect();
        open_nodes.sort_unstable();
        open_nodes.dedup();
        let mut locks = Vec::new();
        for id in open_nodes {
            for (owner, fh, ofd) in self.posix_locks.of_node(id) {
                // A description made through an open file the front end
                // does not keep would never be released by it.
                if !kept_fhs.contains(&fh.0) {
                    continue;
                }
                locks.push(SavedLock {
                    node: id,
                    owner,
                    fh: fh.0,
                    fd: fd_index(&fds)?,
                });
                fds.push(dup(&*ofd)?);
            }
        }
        nodes.sort_unstable_by_key(|n| n.id);
        nodes.dedup_by_key(|n| n.id);
        let root_ident = self.root.ident();
        let state = State {
            root: RootId {
                dev: self.root.dev(),
                ino: self.root.ino,
                handle: root_ident.handle().map(SavedHandle::of),
            },
            nodes,
            remembered: self
                .remembered
                .entries()
                .iter()
                .map(|(id, h)| (*id, SavedHandle::of(h)))
                .collect(),
            foreign: self.inodes.export(),
            opens,
            locks,
            next_fh: self.opens.next_fh(),
            counters: super::counters(&self.counters)
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        };
        let bytes = state.encode().map_err(|_| Errno::EIO)?;
        Ok(Saved {
            format: super::FORMAT.to_string(),
            bytes,
            fds,
        })
    }
}

fn fd_index(fds: &[OwnedFd]) -> VfsResult<u32> {
    u32::try_from(fds.len()).map_err(|_| Errno::EMFILE)
}
