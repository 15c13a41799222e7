//! `PassthroughFs::restore`: a passthrough mount built from a
//! predecessor's saved state.

use super::state::{RootId, SavedHandle, SavedLock, SavedOpen, State, PARKED};
use super::table::{Entry, Way};
use super::KeptNodes;
use crate::fdpool::Fd;
use crate::fs::{PassthroughConfig, PassthroughFs};
use crate::handle::{Handle, HandleOpener};
use crate::open::{Desc, OpenFile};
use crate::sys;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Errno, Fh, Saved, VnodeLayer};

/// Why a saved state was not taken: `errno` for the caller to act on
/// (`EPROTO`: another format, or a state that does not hold together;
/// `EXDEV`: the source is not the predecessor's; others: the system
/// refused something), and what happened, for the log.
#[derive(Debug)]
pub struct RestoreError {
    /// The error number.
    pub errno: Errno,
    /// What was refused, and why.
    pub message: String,
}

impl RestoreError {
    pub(crate) fn proto(message: impl Into<String>) -> RestoreError {
        RestoreError {
            errno: Errno::EPROTO,
            message: message.into(),
        }
    }

    fn sys(what: impl std::fmt::Display, e: Errno) -> RestoreError {
        RestoreError {
            errno: e,
            message: format!("{what}: {}", std::io::Error::from_raw_os_error(e.raw())),
        }
    }
}

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot take the passthrough state: {}", self.message)
    }
}

impl std::error::Error for RestoreError {}

impl From<RestoreError> for std::io::Error {
    fn from(e: RestoreError) -> std::io::Error {
        std::io::Error::new(
            std::io::Error::from_raw_os_error(e.errno.raw()).kind(),
            e.to_string(),
        )
    }
}

/// Whether `source` is the directory `root` describes: same (dev, ino)
/// and, where both have one, the same handle.
fn check_root(source: &Path, root: &RootId) -> Result<(), RestoreError> {
    let path = sys::cstr(source.as_os_str().as_encoded_bytes())
        .map_err(|e| RestoreError::sys(source.display(), e))?;
    let fd = sys::openat(rustix::fs::CWD, &path, libc::O_PATH | libc::O_DIRECTORY)
        .map_err(|e| RestoreError::sys(source.display(), e))?;
    let st = sys::statx_fd(fd.as_fd()).map_err(|e| RestoreError::sys(source.display(), e))?;
    let (dev, ino) = (sys::stx_dev(&st), st.stx_ino);
    let same_handle = match (&root.handle, Handle::of_fd(fd.as_fd())) {
        (Some(saved), Ok(h)) => *saved == SavedHandle::of(&h),
        _ => true,
    };
    if (dev, ino) != (root.dev, root.ino) || !same_handle {
        return Err(RestoreError {
            errno: Errno::EXDEV,
            message: format!(
                "{} is not the directory the state was saved from (device {dev:#x} inode \
                 {ino}, saved: device {:#x} inode {})",
                source.display(),
                root.dev,
                root.ino
            ),
        });
    }
    Ok(())
}

/// Where the source root `root` describes is now, found by its handle
/// through a mount of its file system: the host renamed or moved the
/// source directory since the mount (the server follows such a move, its
/// root being a descriptor, but a successor is told the path the mount
/// was made with). `None` where handles are not to be had or the
/// directory is gone.
fn moved_root(root: &RootId) -> Option<PathBuf> {
    let saved = root.handle.as_ref()?;
    let table = uvfs_vfs::mountinfo::read_table()?;
    for m in uvfs_vfs::mountinfo::entries(&table).filter(|m| m.dev == root.dev) {
        let Ok(path) = sys::cstr(m.mountpoint.as_os_str().as_bytes()) else {
            continue;
        };
        let Ok(mount_dir) = sys::openat(rustix::fs::CWD, &path, libc::O_RDONLY | libc::O_DIRECTORY)
        else {
            continue;
        };
        let opener = HandleOpener::new(mount_dir);
        let Ok(fd) = opener.open(
            &saved.handle(opener.mount_id()),
            libc::O_PATH | libc::O_DIRECTORY,
        ) else {
            continue;
        };
        // The path as this namespace reaches it, checked like any other.
        let Ok(now) = std::fs::read_link(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            fd.as_raw_fd()
        })) else {
            continue;
        };
        if check_root(&now, root).is_ok() {
            return Some(now);
        }
    }
    None
}

/// A predecessor's open file's description: sent for it alone, or sent
/// once for several opens that shared it, and taken by an earlier one.
enum Adopt {
    Own(OwnedFd),
    Shared(Arc<Fd>),
}

impl AsFd for Adopt {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Adopt::Own(fd) => fd.as_fd(),
            Adopt::Shared(fd) => fd.as_fd(),
        }
    }
}

impl PassthroughFs {
    /// The path a successor is to serve, given the one the mount was made
    /// with (`source`) and the predecessor's state: `source` if it is
    /// still the directory the state was saved from, else where that
    /// directory is now (moved on the host; found by its handle, which
    /// needs CAP_DAC_READ_SEARCH). The error says why neither holds.
    pub fn source_now(saved: &Saved, source: &Path) -> Result<PathBuf, RestoreError> {
        if saved.format != super::FORMAT && saved.format != super::FORMAT_PARKED {
            // `restore` says why it refuses the state.
            return Ok(source.to_path_buf());
        }
        let root = State::root_of(&saved.bytes)
            .map_err(|e| RestoreError::proto(format!("malformed state: {e}")))?;
        match check_root(source, &root) {
            Ok(()) => Ok(source.to_path_buf()),
            Err(e) => moved_root(&root).ok_or(e),
        }
    }
}

impl PassthroughFs {
    /// Serves `source` on `layer` as [`PassthroughFs::new`] does, going
    /// on from the state a predecessor saved (`FileSystem::save`) while
    /// serving the same directory. `cfg` is this server's own.
    ///
    /// The saved nodes are not opened here: each is found again on first
    /// use (`FileSystem::vget`). Open files and lock descriptions are the
    /// descriptors in `saved.fds`, taken over as they are.
    pub fn restore(
        layer: Arc<VnodeLayer>,
        source: &Path,
        cfg: PassthroughConfig,
        saved: Saved,
    ) -> Result<Arc<PassthroughFs>, RestoreError> {
        let t0 = std::time::Instant::now();
        let Saved { format, bytes, fds } = saved;
        let parked = format == super::FORMAT_PARKED;
        if format != super::FORMAT && !parked {
            return Err(RestoreError::proto(format!(
                "the state's format is {format:?}, this server reads only {:?} and {:?}",
                super::FORMAT,
                super::FORMAT_PARKED
            )));
        }
        let malformed = |e| RestoreError::proto(format!("malformed state: {e}"));
        let (state, runs) = State::decode(&bytes).map_err(malformed)?;
        state
            .check(
                &bytes,
                &runs,
                fds.len(),
                super::counters(&Default::default()).len(),
                parked,
            )
            .map_err(malformed)?;
        let t_read = t0.elapsed();
        check_root(source, &state.root)?;
        let fs = PassthroughFs::new(layer, source, cfg).map_err(|e| RestoreError {
            // A refused setting (the fd budget) carries no errno.
            errno: Errno::new(e.raw_os_error().unwrap_or(libc::EINVAL)),
            message: e.to_string(),
        })?;
        let t_made = t0.elapsed();
        let mount_id = fs.handles.mount_id();
        let remembered = super::state::tables(&bytes, &runs).1;
        for i in 0..remembered.len() {
            if let Some(Entry {
                id,
                way: Way::Handle { htype, bytes },
                ..
            }) = remembered.get(i)
            {
                fs.remembered
                    .remember(id, Handle::from_parts(htype, mount_id, bytes));
            }
        }
        let State {
            foreign,
            opens,
            locks,
            next_fh,
            counters,
            ..
        } = state;
        fs.inodes
            .import(foreign)
            .ok_or_else(|| RestoreError::proto("inconsistent foreign ids"))?;
        for (c, v) in super::counters(&fs.counters).iter().zip(&counters) {
            c.store(*v, Ordering::Relaxed);
        }
        let _ = fs.kept.set(Box::new(KeptNodes {
            buf: bytes,
            runs,
            mount_id,
        }));
        let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
        let mut take = |i: u32| {
            fds.get_mut(i as usize)
                .and_then(Option::take)
                .ok_or_else(|| RestoreError::proto(format!("fd {i} is named twice")))
        };
        // An fd that several opens name is a description they shared
        // (`open.rs`), and share again; one named once may hold `flock`
        // locks, and is never shared.
        let mut named: HashMap<u32, usize> = HashMap::new();
        for o in &opens {
            *named.entry(o.fd).or_default() += 1;
        }
        let mut adopted: HashMap<u32, Arc<Fd>> = HashMap::new();
        for o in &opens {
            if o.fd & PARKED != 0 {
                // Its file gone from the source meanwhile: left out, as a
                // crash recovery leaves such an open (`recover.rs`); its
                // next request gets `EBADF`.
                if let Err(e) = fs.adopt_parked(o, (o.fd & !PARKED) as i32) {
                    log::warn!("{e}; left out");
                }
                continue;
            }
            let fd = match adopted.get(&o.fd) {
                Some(fd) => Adopt::Shared(fd.clone()),
                None => Adopt::Own(take(o.fd)?),
            };
            let of = fs.adopt_open(o, fd)?;
            if named[&o.fd] > 1 {
                of.set_shared();
            } else {
                of.may_hold_locks();
            }
            if let Some(fd) = of.held() {
                adopted.entry(o.fd).or_insert(fd);
            }
        }
        drop(adopted);
        for l in &locks {
            fs.adopt_lock(l, take(l.fd)?)?;
        }
        fs.opens.set_next_fh(next_fh);
        log::debug!(
            "restore: state read and checked in {} ms, file system made at {} ms, all at {} ms",
            t_read.as_millis(),
            t_made.as_millis(),
            t0.elapsed().as_millis()
        );
        Ok(fs)
    }

    /// Registers a predecessor's open file: its node is made now, from
    /// the fd itself (the file may have no name left to find it by).
    fn adopt_open(&self, o: &SavedOpen, fd: Adopt) -> Result<Arc<OpenFile>, RestoreError> {
        let what = format!("open file {} of node {}", o.fh, o.node);
        let err = |e: Errno| RestoreError::sys(&what, e);
        let st = sys::statx_fd(fd.as_fd()).map_err(err)?;
        if (sys::stx_dev(&st), st.stx_ino) != (o.dev, o.ino) {
            return Err(RestoreError::proto(format!(
                "{what}: its descriptor is another file"
            )));
        }
        let vp = if o.node == self.root.id {
            self.root_vnode().map_err(err)?
        } else if let Some(vp) = self.layer.lookup_cached(&self.mnt, o.node) {
            vp
        } else {
            let saved = super::kept_nodes(self).and_then(|k| match k.table().find(o.node)?.way {
                Way::Handle { htype, bytes } => Some(Handle::from_parts(htype, k.mount_id, bytes)),
                _ => None,
            });
            let handle = saved.ok_or(Errno::EOPNOTSUPP);
            let res = self.pool.reserve().map_err(err)?;
            let path = res.into_fd(sys::reopen(fd.as_fd(), libc::O_PATH).map_err(err)?);
            self.vnode_from(st, handle, None, Some(path))
                .map_err(err)?
                .0
        };
        if vp.ino() != o.node {
            return Err(RestoreError::proto(format!(
                "{what}: its file now has node id {}",
                vp.ino()
            )));
        }
        let node = self.node_of(&vp).map_err(err)?;
        if o.removed {
            node.mark_removed(false);
        }
        if o.orphan {
            node.set_orphan(true);
        }
        let fd = match fd {
            Adopt::Own(fd) => Arc::new(self.pool.reserve_handed_over().map_err(err)?.into_fd(fd)),
            Adopt::Shared(fd) => fd,
        };
        if !self
            .opens
            .insert_as(Fh(o.fh), Desc::Held(fd), node.clone(), Some(vp))
        {
            return Err(RestoreError::proto(format!("{what}: handle given twice")));
        }
        let of = self.opens.get(Fh(o.fh)).map_err(err)?;
        // A file with no name left: its cached fd (made just above, or
        // the node's own) goes at its last close, as it would have in the
        // predecessor, or it would keep the deleted file's blocks on the
        // source until evicted, which an idle mount may never do.
        if st.stx_nlink == 0 {
            let _ = node.uncache_unlinked();
        }
        Ok(of)
    }

    /// Registers a predecessor's open file sent parked (`park.rs`): its
    /// node found again by its handle, its fd opened when a request
    /// needs one.
    fn adopt_parked(&self, o: &SavedOpen, flags: i32) -> Result<(), RestoreError> {
        let what = format!("open file {} of node {}", o.fh, o.node);
        let err = |e: Errno| RestoreError::sys(&what, e);
        let vp = self.vget_id(o.node).map_err(err)?;
        let node = self.node_of(&vp).map_err(err)?;
        if (node.dev(), node.ino) != (o.dev, o.ino) {
            return Err(RestoreError::proto(format!(
                "{what}: its node is another file"
            )));
        }
        if !self
            .opens
            .insert_as(Fh(o.fh), Desc::Parked(flags), node, Some(vp))
        {
            return Err(RestoreError::proto(format!("{what}: handle given twice")));
        }
        Ok(())
    }

    /// Takes over a lock owner's description of an adopted open file's
    /// node.
    fn adopt_lock(&self, l: &SavedLock, fd: OwnedFd) -> Result<(), RestoreError> {
        let what = format!("locks of owner {:#x} on node {}", l.owner, l.node);
        let of = self
            .opens
            .get(Fh(l.fh))
            .ok()
            .filter(|of| of.node.id == l.node)
            .ok_or_else(|| RestoreError::proto(format!("{what}: no such open file")))?;
        let st = sys::statx_fd(fd.as_fd()).map_err(|e| RestoreError::sys(&what, e))?;
        if (sys::stx_dev(&st), st.stx_ino) != (of.node.dev(), of.node.ino) {
            return Err(RestoreError::proto(format!(
                "{what}: its descriptor is another file"
            )));
        }
        let res = self
            .pool
            .reserve_handed_over()
            .map_err(|e| RestoreError::sys(&what, e))?;
        self.posix_locks
            .get_or_insert(l.node, l.owner, Fh(l.fh), 0, Arc::new(res.into_fd(fd)));
        Ok(())
    }
}
