//! `FileSystem::save`: the state of `handover/mod.rs`, changing nothing
//! (the predecessor may go on serving if the successor fails).

use super::state::{RootId, SavedHandle, SavedLock, SavedOpen, State};
use super::table::{self, Entry, REC};
use crate::fs::PassthroughFs;
use crate::node::{Node, Way};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
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

/// Records not yet finished: sorted by id, one per id, their outside
/// bytes apart (placed by `table::finish`).
struct Records {
    recs: Vec<[u8; REC]>,
    extras: Vec<(uvfs_vfs::Ino, Box<[u8]>)>,
    /// Whether a record is of a node found by its path, which a rename
    /// changes (a node's handle never does).
    paths: bool,
}

/// What `save_ahead` makes while requests are still served: the records
/// of the nodes the kernel held and of the vnodes it had forgotten (the
/// same whenever they are made: a node's identity changes only by
/// `set_ident`, which records the node in `idents_changed`).
pub(crate) struct SavedAhead {
    nodes: Records,
    unheld: Records,
}

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

/// `SavedOpen::fd` of an open file sent without an fd.
fn parked(flags: i32) -> u32 {
    super::state::PARKED | (flags as u32 & !super::state::PARKED)
}

fn fd_index(fds: &[OwnedFd]) -> VfsResult<u32> {
    u32::try_from(fds.len()).map_err(|_| Errno::EMFILE)
}

impl PassthroughFs {
    /// The records of `nodes` and `more`, sorted by id, one per id, not
    /// finished.
    fn records(&self, nodes: &[VnodeRef], more: &[Arc<Node>]) -> VfsResult<Records> {
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
        let paths = recs.par_iter().any(table::is_path);
        Ok(Records {
            recs,
            extras: extras.into_inner(),
            paths,
        })
    }

    /// The records of the vnodes cached that the kernel does not hold
    /// (file handles of the mount may name them), not finished.
    fn unheld_records(&self) -> Records {
        let extras = Extras::default();
        let mut recs = Vec::new();
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
                recs.push(table::record(&e, &mut |id, b| {
                    extras.lock().push((id, b.into()))
                }));
            }
        }
        Records {
            recs,
            extras: extras.into_inner(),
            paths: false,
        }
    }

    /// `FileSystem::save_ahead`: the records of `nodes` and of the
    /// vnodes the kernel forgot, made while requests are served; none if
    /// a node is found by its path (a rename would change its record).
    pub(crate) fn do_save_ahead(&self, nodes: &[VnodeRef]) -> VfsResult<Option<uvfs_vfs::Ahead>> {
        // Before any identity is read (`idents_changed`).
        *self.idents_changed.lock() = Some(Vec::new());
        let nodes = self.records(nodes, &[])?;
        if nodes.paths {
            *self.idents_changed.lock() = None;
            return Ok(None);
        }
        let unheld = self.unheld_records();
        Ok(Some(Box::new(SavedAhead { nodes, unheld })))
    }

    /// The handles of recycled nodes (`remembered.rs`), as records.
    fn recycled_records(&self) -> Records {
        let extras = Extras::default();
        let recs = self
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
        Records {
            recs,
            extras: extras.into_inner(),
            paths: false,
        }
    }

    pub(crate) fn do_save(&self, keep: &Keep<'_>) -> VfsResult<Saved> {
        let mut fds = Vec::new();
        let mut opens = Vec::with_capacity(keep.open.len());
        let mut open_nodes = Vec::new();
        let mut more = Vec::with_capacity(keep.open.len());
        // A description handles share (`open.rs`) is sent once, and
        // named by each of them: as many fds as the successor may hold.
        let mut sent: HashMap<*const crate::fdpool::Fd, u32> = HashMap::new();
        // Duplicates the budget has room for: the fds this process keeps
        // outside the budget are what the rest of the hand-over (ring
        // buffers, the state's memfd, the successor's socket) needs, and
        // duplicates of thousands of open files would spend them all.
        let mut room = self.pool.budget().saturating_sub(self.pool.used());
        for (vp, fh) in keep.open {
            let of = self.opens.get(*fh)?;
            if !Arc::ptr_eq(&of.node, &self.node_of(vp)?) {
                return Err(Errno::EBADF);
            }
            let node = &of.node;
            more.push(node.clone());
            let index = match of.handover() {
                Err(flags) => parked(flags),
                Ok(fd) => match sent.get(&Arc::as_ptr(&fd)) {
                    Some(i) => *i,
                    // Past the room: one the successor can open again
                    // itself goes parked (`park.rs`).
                    None if room == 0 && of.parkable() => {
                        parked(rustix::fs::fcntl_getfl(&*fd)?.bits() as i32)
                    }
                    None => {
                        let i = fd_index(&fds)?;
                        fds.push(dup(&*fd)?);
                        sent.insert(Arc::as_ptr(&fd), i);
                        room = room.saturating_sub(1);
                        i
                    }
                },
            };
            opens.push(SavedOpen {
                fh: fh.0,
                node: node.id,
                dev: node.dev(),
                ino: node.ino,
                fd: index,
                removed: node.nameless_by_mount(),
                orphan: node.is_orphan(),
            });
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
        let ahead = match keep.ahead {
            Some(a) => Some(a.downcast_ref::<SavedAhead>().ok_or(Errno::EINVAL)?),
            None => None,
        };
        // Recording stops; nodes made ahead whose identity changed since
        // are made again.
        let changed = self.idents_changed.lock().take().unwrap_or_default();
        let fresh = match ahead {
            Some(_) => {
                let mut vps = keep.nodes.to_vec();
                vps.extend(
                    changed
                        .iter()
                        .filter_map(|&id| self.layer.lookup_cached(&self.mnt, id)),
                );
                self.records(&vps, &more)?
            }
            None => self.records(keep.nodes, &more)?,
        };
        let t_nodes = t0.elapsed();
        let recycled = self.recycled_records();
        let unheld_now;
        let unheld = match ahead {
            Some(a) => &a.unheld,
            None => {
                unheld_now = self.unheld_records();
                &unheld_now
            }
        };
        let t_rem = t0.elapsed();
        let root_ident = self.root.ident();
        let state_parked = opens.iter().any(|o| o.fd & super::state::PARKED != 0);
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
        let base: &Records = match ahead {
            Some(a) => &a.nodes,
            None => &Records {
                recs: Vec::new(),
                extras: Vec::new(),
                paths: false,
            },
        };
        let bytes = encode(state, base, fresh, [&recycled, unheld]).map_err(|e| {
            log::error!("saving the passthrough's state: {e}");
            Errno::EIO
        })?;
        log::debug!(
            "save: node table {} ms, remembered {} ms ({} records), encoded {} ms{}",
            t_nodes.as_millis(),
            t_rem.as_millis(),
            recycled.recs.len() + unheld.recs.len(),
            t0.elapsed().as_millis(),
            if ahead.is_some() {
                " (records made ahead)"
            } else {
                ""
            }
        );
        Ok(Saved {
            format: if state_parked {
                super::FORMAT_PARKED
            } else {
                super::FORMAT
            }
            .to_string(),
            bytes: bytes.into(),
            fds,
        })
    }
}

/// The state's bytes, written once: the header's room kept (its length
/// does not depend on the runs'), then the kept nodes' records (`base`,
/// made ahead, and `fresh`, which replace any of the same id: both
/// sorted, merged as they are copied), their outside bytes, the
/// remembered handles' records and theirs, then the header over its
/// room. A million records are copied once, not built and copied again.
fn encode(
    state: State,
    base: &Records,
    fresh: Records,
    remembered: [&Records; 2],
) -> Result<Vec<u8>, String> {
    let hlen = state.header_len()?;
    let replaced = |id: uvfs_vfs::Ino| fresh.recs.binary_search_by_key(&id, table::id_of).is_ok();
    let dups = match base.recs.is_empty() {
        true => 0,
        false => fresh
            .recs
            .iter()
            .filter(|r| {
                base.recs
                    .binary_search_by_key(&table::id_of(r), table::id_of)
                    .is_ok()
            })
            .count(),
    };
    let nodes = base.recs.len() + fresh.recs.len() - dups;
    let remembered_len: usize = remembered.iter().map(|r| r.recs.len()).sum();
    let mut out = Vec::with_capacity(hlen + (nodes + remembered_len) * REC);
    out.resize(hlen, 0);
    let mut fresh_recs = fresh.recs.iter().peekable();
    for r in &base.recs {
        let id = table::id_of(r);
        while let Some(f) = fresh_recs.next_if(|f| table::id_of(f) < id) {
            out.extend_from_slice(f);
        }
        match fresh_recs.next_if(|f| table::id_of(f) == id) {
            Some(f) => out.extend_from_slice(f),
            None => out.extend_from_slice(r),
        }
    }
    for f in fresh_recs {
        out.extend_from_slice(f);
    }
    let mut extras = fresh.extras.clone();
    extras.extend(base.extras.iter().filter(|(id, _)| !replaced(*id)).cloned());
    let (recs, rest) = out[hlen..].as_chunks_mut::<REC>();
    if !rest.is_empty() || recs.len() != nodes {
        return Err(format!(
            "{} node records where {nodes} were counted",
            recs.len()
        ));
    }
    let nodes_extra = table::finish(recs, extras);
    out.extend_from_slice(&nodes_extra);
    let at = out.len();
    for r in remembered {
        out.extend_from_slice(r.recs.as_flattened());
    }
    let extras: Vec<_> = remembered
        .iter()
        .flat_map(|r| r.extras.iter().cloned())
        .collect();
    let (recs, _) = out[at..].as_chunks_mut::<REC>();
    let remembered_extra = table::finish(recs, extras);
    out.extend_from_slice(&remembered_extra);
    state.write_header(
        &mut out[..hlen],
        [
            nodes * REC,
            nodes_extra.len(),
            remembered_len * REC,
            remembered_extra.len(),
        ],
    )?;
    Ok(out)
}
