//! Live upgrade of a passthrough mount (`uvfs_vfs::handover`): what a
//! server hands to its successor, and how the successor takes it.
//!
//! # What goes over
//! - Every kept node's way back to its file (`node::Way`): its source
//!   handle (type and bytes; the generation is computed from them), or
//!   its parent's id and its name, as fixed-size records sorted by id
//!   (`table.rs`). The successor searches them in the saved bytes
//!   themselves ([`KeptNodes`]) and opens nothing: `vget` resolves a node
//!   on first use, by handle (`open_by_handle_at`) or by looking the name
//!   up in its (resolved) parent, and answers `ESTALE` if the file is gone
//!   or is another file now. A million nodes restore in a few ms: one
//!   pass checking the records.
//! - The node-id numbering (`inodes.rs`: foreign ids, aliases, the next
//!   id) whole, so every id the kernel knows names the same file.
//! - The handles of recycled nodes (`remembered.rs`), so file handles of
//!   the mount given out before the upgrade keep opening.
//! - Each kept open file or directory: a duplicate of its fd, the same
//!   open file description, so its offset, its `O_APPEND`/`O_DIRECT`
//!   flags and the `flock` locks on it carry over. A listing goes on at
//!   the kernel's offset (`dir.rs` seeks to it on every READDIR).
//! - The descriptions holding lock owners' record locks (`locks.rs`),
//!   duplicated too: an OFD lock belongs to the description, so it stays
//!   held with nothing released or taken again.
//! - The counters.
//!
//! Not handed over: the fd pool's cached `O_PATH` fds (a node reopens by
//! handle when used; passing them would cost more than reopening the few
//! used soon), the settings (the successor's own configuration), and the
//! host-change watcher: the successor starts its own, and changes to the
//! source between the predecessor's last event and the successor's
//! watcher start are lost, so the front end must treat every cached
//! entry and attribute as suspect after a takeover (invalidate them).

mod recover;
mod restore;
mod save;
mod state;
mod table;

use crate::fs::{PassthroughFs, PtCounters};
use crate::handle::Handle;
use std::sync::atomic::AtomicU64;
use uvfs_vfs::{Errno, Ino, VType, VfsResult, VnodeRef};

pub use restore::RestoreError;
pub(crate) use state::{FORMAT, FORMAT_PARKED};

/// Deepest chain of parents resolved to find a kept node by name.
const MAX_DEPTH: usize = 4096;

/// Nodes a predecessor kept, found again on first use
/// (`PassthroughFs::vget_id`).
pub(crate) struct KeptNodes {
    /// The saved state, whose node records (`table.rs`) are searched in
    /// place.
    buf: uvfs_vfs::Bytes,
    runs: state::Runs,
    /// The mount the saved handles belong to, as this process's opener
    /// names it.
    mount_id: i32,
}

impl KeptNodes {
    fn table(&self) -> table::Table<'_> {
        state::tables(&self.buf, &self.runs).0
    }

    /// Kept nodes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }
}

/// The nodes a predecessor handed `fs` over, if any (`PassthroughFs::kept`
/// holds them type-erased).
pub(crate) fn kept_nodes(fs: &PassthroughFs) -> Option<&KeptNodes> {
    fs.kept.get()?.downcast_ref::<KeptNodes>()
}

/// `PtCounters`' fields in a fixed order (the saved state's).
fn counters(c: &PtCounters) -> [&AtomicU64; 12] {
    [
        &c.reopen_handle,
        &c.reopen_fallback,
        &c.stale,
        &c.rebinds,
        &c.aliases,
        &c.lookups,
        &c.revalidated,
        &c.vget_reopened,
        &c.stat_by_handle,
        &c.own_mount,
        &c.unlinked,
        &c.closes_deferred,
    ]
}

impl PassthroughFs {
    /// The crash journal's record of node `id` (`vp` if the caller has
    /// it, else a node handed over and not found yet): its source handle,
    /// where the handle fits a record.
    pub(crate) fn journal_record_of(
        &self,
        id: Ino,
        vp: Option<&VnodeRef>,
    ) -> Option<uvfs_vfs::JournalRecord> {
        let vp = match vp {
            Some(vp) => vp.clone(),
            None => {
                let kept = kept_nodes(self)?;
                return table::journal_record(&kept.table().find(id)?);
            }
        };
        let node = self.node_of(&vp).ok()?;
        let ident = node.ident();
        let crate::node::Way::Handle(h) = &ident.way else {
            return None;
        };
        table::journal_record(&table::Entry {
            id,
            kind: ident.kind as u8,
            way: table::Way::Handle {
                htype: h.htype(),
                bytes: h.bytes(),
            },
        })
    }

    /// Whether `id` is a node a predecessor's kernel held (`vget_kept`
    /// finds it, or says it is gone).
    pub(crate) fn is_kept(&self, id: Ino) -> bool {
        kept_nodes(self).is_some_and(|k| k.table().find(id).is_some())
    }

    /// The kept node `id` of a predecessor, found again: by its handle,
    /// or by its name in its parent (itself found the same way, at most
    /// `MAX_DEPTH` deep). `ESTALE` if it is not a kept node, if its file
    /// is gone, or if the handle or name now leads to another file.
    pub(crate) fn vget_kept(&self, id: Ino, depth: usize) -> VfsResult<VnodeRef> {
        let kept = kept_nodes(self).ok_or(Errno::ESTALE)?;
        let n = kept.table().find(id).ok_or(Errno::ESTALE)?;
        let vp = match n.way {
            table::Way::FdOnly => return Err(Errno::ESTALE),
            table::Way::Handle { htype, bytes } => {
                self.vget_handle(id, Handle::from_parts(htype, kept.mount_id, bytes))?
            }
            table::Way::Path { parent, name } => {
                if depth >= MAX_DEPTH {
                    return Err(Errno::ELOOP);
                }
                let pvp = self.vget_at(parent, depth + 1)?;
                let pnode = self.node_of(&pvp)?;
                if pnode.kind() != VType::Dir {
                    return Err(Errno::ESTALE);
                }
                let (vp, _) = self.lookup_at(&pnode, name).map_err(|e| {
                    if e == Errno::ENOENT {
                        Errno::ESTALE
                    } else {
                        e
                    }
                })?;
                if vp.ino() != id {
                    return Err(Errno::ESTALE);
                }
                vp
            }
        };
        if self.node_of(&vp)?.kind() as u8 != n.kind {
            return Err(Errno::ESTALE);
        }
        Ok(vp)
    }
}

#[cfg(test)]
mod tests;
