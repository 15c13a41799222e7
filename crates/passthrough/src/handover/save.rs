//! `FileSystem::save`: the state of `handover/mod.rs`, changing nothing
//! (the predecessor may go on serving if the successor fails).

use super::state::{RootId, SavedHandle, SavedLock, SavedOpen, State};
use super::table::{self, Entry, REC};
use crate::fs::PassthroughFs;
use crate::node::{Node, Way};
use rayon::prelude::*;
use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Errno, Keep, Saved, VfsResult, VnodeRef};

/// Nodes per task when records are made in parallel: reading a node is
/// a few cache misses, and a million of them are most of a save.
const PAR_CHUNK: usize = 16 << 10;

/// Nodes whose cache lines are brought in together before their locks
/// are taken (`Node::touch`).
const BATCH: usize = 32;

fn entry_way(way: &Way) -> table::Way<'_> {
    match way {
        Way::FdOnly => table::Way::FdOnly,
        Way::Handle(h) => table::Way::Handle {
            htype: h.htype(),
            bytes: h.bytes(),
        },
        Way::Path(at) => table::Way::Path {
            parent: at.0.id,
            name: &at.1,
        },
    }
}

/// Outside bytes of records made on many threads (rare: long handles,
/// names).
type Extras = parking_lot::Mutex<Vec<(uvfs_vfs::Ino, Box<[u8]>)>>;

fn record(node: &Node, extras: &Extras) -> [u8; REC] {
    let ident = node.ident();
    let e = Entry {
        id: node.id,
        kind: ident.kind as u8,
        way: entry_way(&ident.way),
    };
    table::record(&e, &mut |id, b| extras.lock().push((id, b.into())))
}

/// A new descriptor of the same open file description.
fn dup(fd: impl AsFd) -> VfsResult<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 0)?)
}

fn fd_index(fds: &[OwnedFd]) -> VfsResult<u32> {
    u32::try_from(fds.len()).map_err(|_| Errno::EMFILE)
}

impl PassthroughFs {
    /// The records of `nodes` and `more`, sorted by id, one per id,
    /// and their outside bytes.
    fn node_table(&self, nodes: &[VnodeRef], more: &[Arc<Node>]) -> VfsResult<(Vec<u8>, Vec<u8>)> {
        let mnt = self.mnt.id();
        let extras = Extras::default();
        let mut recs = vec![[0u8; REC]; nodes.len()];
        recs.par_chunks_mut(PAR_CHUNK)
            .zip(nodes.par_chunks(PAR_CHUNK))
            .try_for_each(|(out, vps)| {
                for (out, vps) in out.chunks_mut(BATCH).zip(vps.chunks(BATCH)) {
                    let mut batch = [None; BATCH];
                    for (slot, vp) in batch.iter_mut().zip(vps) {
                        if vp.mount_id() != mnt {
                            return Err(Errno::EXDEV);
                        }
                        let node = vp.data::<Node>().ok_or(Errno::ESTALE)?;
                        std::hint::black_box(node.touch());
                        *slot = Some(node);
                    }
                    for (r, node) in out.iter_mut().zip(batch.iter().flatten()) {
                        *r = record(node, &extras);
                    }
                }
                Ok(())
            })?;
        // The front end gives its nodes sorted by id as a rule; the open
        // files' nodes are nearly always among them.
        if !recs.is_sorted_by(|a, b| table::id_of(a) < table::id_of(b)) {
            recs.par_sort_unstable_by_key(table::id_of);
            recs.dedup_by_key(|r| table::id_of(r));
        }
        let missing: Vec<[u8; REC]> = more
            .iter()
            .filter(|n| recs.binary_search_by_key(&n.id, table::id_of).is_err())
            .map(|n| record(n, &extras))
            .collect();
        if !missing.is_empty() {
            recs.extend(missing);
            recs.par_sort_unstable_by_key(table::id_of);
            recs.dedup_by_key(|r| table::id_of(r));
        }
        let extra = table::finish(&mut recs, extras.into_inner());
        Ok((recs.into_flattened(), extra))
    }

    pub(crate) fn do_save(&self, keep: &Keep<'_>) -> VfsResult<Saved> {
        let mut fds = Vec::new();
        let mut opens = Vec::with_capacity(keep.open.len());
        let mut open_nodes = Vec::new();
        let mut more = Vec::with_capacity(keep.open.len());
        for (vp, fh) in keep.open {
            let of = self.opens.get(*fh)?;
            if !Arc::ptr_eq(&of.node, &self.node_of(vp)?) {
                return Err(Errno::EBADF);
            }
            let node = &of.node;
            more.push(node.clone());
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
        let t0 = std::time::Instant::now();
        let (nodes, nodes_extra) = self.node_table(keep.nodes, &more)?;
        let t_nodes = t0.elapsed();
        let extras = Extras::default();
        let mut remembered: Vec<[u8; REC]> = self
            .remembered
            .entries()
            .iter()
            .map(|(id, h)| {
                // The type is not kept for a recycled node (unused).
                let e = Entry {
                    id: *id,
                    kind: uvfs_vfs::VType::Reg as u8,
                    way: table::Way::Handle {
                        htype: h.htype(),
                        bytes: h.bytes(),
                    },
                };
                table::record(&e, &mut |id, b| extras.lock().push((id, b.into())))
            })
            .collect();
        // Nodes the kernel forgot whose vnodes are still cached here (free,
        // not recycled, so not in `remembered` yet): file handles of the
        // mount may name them, so their handles go along too. (Those the
        // kernel holds are the kept nodes above.)
        for vp in self.layer.unheld_refs(&self.mnt) {
            let Some(node) = vp.data::<Node>() else {
                continue;
            };
            let ident = node.ident();
            if let Way::Handle(h) = &ident.way {
                let e = Entry {
                    id: node.id,
                    kind: ident.kind as u8,
                    way: table::Way::Handle {
                        htype: h.htype(),
                        bytes: h.bytes(),
                    },
                };
                remembered.push(table::record(&e, &mut |id, b| {
                    extras.lock().push((id, b.into()))
                }));
            }
        }
        let remembered_extra = table::finish(&mut remembered, extras.into_inner());
        let t_rem = t0.elapsed();
        let root_ident = self.root.ident();
        let state = State {
            root: RootId {
                dev: self.root.dev(),
                ino: self.root.ino,
                handle: root_ident.handle().map(SavedHandle::of),
            },
            foreign: self.inodes.export(),
            opens,
            locks,
            next_fh: self.opens.next_fh(),
            counters: super::counters(&self.counters)
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            runs: [0; 4],
        };
        let bytes = state
            .encode([
                &nodes,
                &nodes_extra,
                remembered.as_flattened(),
                &remembered_extra,
            ])
            .map_err(|_| Errno::EIO)?;
        log::debug!(
            "save: node table {} ms, remembered {} ms ({} records), encoded {} ms",
            t_nodes.as_millis(),
            t_rem.as_millis(),
            remembered.len(),
            t0.elapsed().as_millis()
        );
        Ok(Saved {
            format: super::FORMAT.to_string(),
            bytes: bytes.into(),
            fds,
        })
    }
}
