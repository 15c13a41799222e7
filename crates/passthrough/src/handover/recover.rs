//! `PassthroughFs::recover`: a passthrough mount built by a server
//! started after its predecessor crashed, from the state the predecessor
//! saved at mount and its crash journal (`uvfs_fuse`'s `journal/`).

use super::restore::RestoreError;
use super::state::{tables, State};
use super::table::{from_journal, handle_in, REC};
use crate::fs::{PassthroughConfig, PassthroughFs};
use crate::kept::Kept;
use crate::open::Desc;
use crate::sys;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use uvfs_vfs::{Errno, Fh, Ino, RecoveredOpen, Recovery, Saved, VType, VnodeLayer};

impl PassthroughFs {
    /// Serves `source` as [`PassthroughFs::restore`] does, from `base`
    /// (what the crashed server saved at mount: the source's identity and
    /// its node numbering) and `rec` (its journal): each journaled node is
    /// found on first use by its handle, and each open file is opened
    /// again by its node's handle with its flags. An open whose file is
    /// gone is left out (logged): the kernel's next request on it gets
    /// `EBADF`.
    pub fn recover(
        layer: Arc<VnodeLayer>,
        source: &Path,
        cfg: PassthroughConfig,
        base: Saved,
        rec: Recovery,
    ) -> Result<Arc<PassthroughFs>, RestoreError> {
        let Saved { format, bytes, .. } = base;
        let (mut state, runs) = State::decode(&bytes)
            .map_err(|e| RestoreError::proto(format!("malformed state: {e}")))?;
        let mut recs: Vec<u8> = Vec::with_capacity(rec.nodes.len() * REC);
        let mut last = None;
        for (ino, r) in &rec.nodes {
            // Sorted by id, one record per id, as `KeptNodes` needs.
            if last.is_some_and(|l| l >= *ino) {
                continue;
            }
            if let Some(full) = from_journal(*ino, r) {
                recs.extend_from_slice(&full);
                last = Some(*ino);
            }
        }
        let remembered = tables(&bytes, &runs).1;
        state.opens.clear();
        state.locks.clear();
        let bytes = state
            .encode([&recs, &[], remembered.recs, remembered.extra])
            .map_err(RestoreError::proto)?;
        let fs = PassthroughFs::restore(
            layer,
            source,
            cfg,
            Saved {
                format,
                bytes: bytes.into(),
                fds: Vec::new(),
            },
        )?;
        // Ids numbered since the base state was saved (aliases of reused
        // inode numbers, other devices' files): the kernel holds them.
        for (ino, r) in &rec.nodes {
            fs.adopt_held(*ino, r);
        }
        // Descriptions the supervisor kept (their locks still held): an
        // open file's is used as it is, not reopened.
        let mut open_fds = std::collections::HashMap::new();
        for k in rec.kept {
            match Kept::parse(&k.meta) {
                Some(Kept::Open { fh, .. }) => {
                    open_fds.insert(fh.0, k.fd);
                }
                Some(Kept::Owner { node, owner, fh }) => {
                    if let Err(e) = fs.adopt_owner(node, owner, fh, k.fd) {
                        log::warn!("locks of owner {owner:#x} on node {node} not recovered: {e}");
                    }
                }
                None => log::warn!("a kept descriptor of unknown kind was dropped"),
            }
        }
        let mut lost = 0;
        for o in &rec.opens {
            if let Err(e) = fs.reopen_recovered(o, open_fds.remove(&o.fh.0)) {
                log::warn!(
                    "open file {} of inode {} not recovered: {}",
                    o.fh.0,
                    o.ino,
                    std::io::Error::from_raw_os_error(e.raw())
                );
                lost += 1;
            }
        }
        if lost > 0 {
            log::warn!("{lost} open files of the crashed server could not be opened again");
        }
        Ok(fs)
    }

    /// Node `id`, held by the kernel, is never numbered for another file;
    /// if its record is that of an alias the crashed server made (a file
    /// on the root's device whose inode number `id` is not), the alias is
    /// made again, so the file is found under `id` by its handle and by
    /// its name. Without it such a node answered `ESTALE` after the crash
    /// although its file was there (only the base state's aliases were
    /// known).
    fn adopt_held(&self, id: Ino, r: &uvfs_vfs::JournalRecord) {
        self.inodes.keep_held(id);
        if id < crate::inodes::FOREIGN_BASE {
            return;
        }
        let Some((htype, bytes)) = from_journal(id, r)
            .as_ref()
            .and_then(|f| handle_in(f).map(|(t, b)| (t, b.to_vec())))
        else {
            return;
        };
        let h = crate::handle::Handle::from_parts(htype, self.handles.mount_id(), &bytes);
        // A file gone since answers ESTALE on first use, as before.
        let Ok(fd) = self.handles.open(&h, libc::O_PATH) else {
            return;
        };
        if let Ok(st) = sys::statx_fd(fd.as_fd()) {
            self.inodes
                .adopt_alias(sys::stx_dev(&st), st.stx_ino, h.generation(), id);
        }
    }

    /// A lock owner's description the supervisor kept.
    fn adopt_owner(&self, node: Ino, owner: u64, fh: Fh, fd: OwnedFd) -> Result<(), Errno> {
        let res = self.pool.reserve_handed_over()?;
        self.posix_locks
            .get_or_insert(node, owner, fh, 0, Arc::new(res.into_fd(fd)));
        Ok(())
    }

    /// Opens `o` again under its handle number, or takes `kept` (its own
    /// description, kept by the supervisor for its locks) if it is the
    /// same file.
    fn reopen_recovered(&self, o: &RecoveredOpen, kept: Option<OwnedFd>) -> Result<(), Errno> {
        let vp = if o.ino == self.root.id {
            self.root_vnode()?
        } else {
            self.vget_id(o.ino)?
        };
        let node = self.node_of(&vp)?;
        if let Some(f) = kept {
            let st = sys::statx_fd(f.as_fd())?;
            if (sys::stx_dev(&st), st.stx_ino) == (node.dev(), node.ino) {
                let res = self.pool.reserve_handed_over()?;
                let fd = Desc::Held(Arc::new(res.into_fd(f)));
                if !self.opens.insert_as(o.fh, fd, node, Some(vp)) {
                    return Err(Errno::EEXIST);
                }
                if let Ok(of) = self.opens.get(o.fh) {
                    of.kept.store(true, std::sync::atomic::Ordering::Relaxed);
                    of.may_hold_locks();
                }
                return Ok(());
            }
        }
        // A regular file its handle leads back to (found just now) is
        // taken back parked (`park.rs`): opened again when a request
        // needs an fd for it, which where the kernel does its I/O is
        // seldom. So requests do not wait for thousands of files to be
        // reopened, and the open files leave the budget's reserve to
        // lookups.
        if !o.dir
            && node.kind() == VType::Reg
            && node.ident().handle().is_some()
            && !node.nameless_by_mount()
        {
            let flags = o.flags & !(libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL);
            if !self
                .opens
                .insert_as(o.fh, Desc::Parked(flags), node, Some(vp))
            {
                return Err(Errno::EEXIST);
            }
            return Ok(());
        }
        let fd = self.fd_of(&node)?;
        // Within the open files' share, as the crashed server's opens
        // were: the whole budget spent on them would leave no fd to
        // lookups, nor to a shared handle's first `flock`. Past it, as an
        // OPEN past it would (`io.rs`), another open's description is
        // shared; failing that, the open is taken back whatever the share
        // rather than lost.
        let res = match self.pool.reserve_open() {
            Ok(res) => res,
            Err(Errno::EMFILE) => {
                let shared = (!o.dir && node.kind() == VType::Reg)
                    .then(|| self.opens.share(&node, o.flags))
                    .flatten();
                if let Some(shared) = shared {
                    if !self
                        .opens
                        .insert_as(o.fh, Desc::Held(shared), node, Some(vp))
                    {
                        return Err(Errno::EEXIST);
                    }
                    return Ok(());
                }
                self.pool.reserve_handed_over()?
            }
            Err(e) => return Err(e),
        };
        let f = if o.dir || node.kind() == VType::Dir {
            sys::openat(fd.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)?
        } else {
            // Opened as the first OPEN was, but not truncated again.
            self.reopen_file(&node, fd.as_fd(), o.flags & !libc::O_TRUNC)?
        };
        drop(fd);
        let fd = Desc::Held(Arc::new(res.into_fd(f)));
        if !self.opens.insert_as(o.fh, fd, node, Some(vp)) {
            return Err(Errno::EEXIST);
        }
        Ok(())
    }
}
