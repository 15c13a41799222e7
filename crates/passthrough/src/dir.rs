//! Directory listing straight from `getdents64`.
//!
//! # Cookies
//! An entry's cookie is the backing file system's `d_off` for it (ext4: a
//! hash position), which is what `lseek` on the directory takes back. So
//! each READDIR seeks the open directory to the kernel's offset and reads
//! on: entries neither added nor removed meanwhile are seen exactly once,
//! as the backing file system guarantees for its own readers. The seek and
//! the read happen under the open directory's lock.
//!
//! # READDIRPLUS
//! Entries are looked up in chunks of [`CHUNK`], then become vnodes and go
//! to the sink in order, and the listing stops at the first entry the sink
//! refuses. A `find` waits for each READDIRPLUS, so with one walker the
//! server's lookups would use one core of two; most of a cold walk's
//! server time is those syscalls. The other core is given to them in one
//! of two ways: by default the readahead thread (`prefetch.rs`) looks up
//! the walker's next directories there before the walker asks; without
//! readahead, a chunk's syscalls (statx and file handle by name,
//! `fs::probe`) run in parallel on the rayon pool. The probes of entries
//! after the one refused (at most a chunk's worth) are wasted, which
//! bounds the chunk.
//! A name that vanished between listing and lookup is skipped, as if the
//! scan had come after.

use crate::fs::{probe, PassthroughFs, Probe};
use crate::node::Node;
use crate::open::OpenFile;
use crate::sys;
use rayon::prelude::*;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use uvfs_vfs::{DirEntry, DirPlusSink, DirSink, Errno, Fh, Relist, VType, VfsResult, VnodeRef};

const BUF: usize = 32 << 10;
/// READDIRPLUS entries probed at once (see the module doc).
const CHUNK: usize = 64;
/// Fewer probes than this run on the calling thread alone: handing work
/// to the pool costs a wakeup, worth it only for a few lookups' time.
const PAR_MIN: usize = 8;

fn dtype(t: u8) -> Option<VType> {
    Some(match t {
        libc::DT_REG => VType::Reg,
        libc::DT_DIR => VType::Dir,
        libc::DT_LNK => VType::Lnk,
        libc::DT_CHR => VType::Chr,
        libc::DT_BLK => VType::Blk,
        libc::DT_FIFO => VType::Fifo,
        libc::DT_SOCK => VType::Sock,
        _ => return None,
    })
}

impl PassthroughFs {
    /// Calls `f` for each entry after cookie `offset`, with the entry's
    /// inode number on the source, until it returns `true` (full) or the
    /// directory ends.
    fn scan(
        &self,
        of: &OpenFile,
        offset: u64,
        f: &mut dyn FnMut(DirEntry, u64) -> VfsResult<bool>,
    ) -> VfsResult<()> {
        let _g = of.dir_lock.lock();
        let fd = self.file_fd(of)?;
        let fd = fd.as_fd();
        sys::seek(fd, offset)?;
        let mut buf = vec![0u8; BUF];
        loop {
            let n = sys::getdents(fd, &mut buf)?;
            if n == 0 {
                return Ok(());
            }
            for d in sys::dirents(&buf[..n]) {
                let e = self.entry(&of.node, fd, &d);
                if f(e, d.ino)? {
                    return Ok(());
                }
            }
        }
    }

    fn entry(&self, dir: &Arc<Node>, fd: BorrowedFd<'_>, d: &sys::RawDirent<'_>) -> DirEntry {
        let ino = match d.name {
            b"." => dir.id,
            b".." if dir.id == self.root.id => self.root.id,
            _ => self.inodes.listed_id(dir.dev(), d.ino, || {
                let n = sys::cstr(d.name).ok()?;
                Some(crate::handle::Handle::of_name(fd, &n).ok()?.generation())
            }),
        };
        let kind = dtype(d.dtype)
            .or_else(|| {
                let n = sys::cstr(d.name).ok()?;
                let st = sys::statx_at(fd, &n, rustix::fs::AtFlags::empty()).ok()?;
                uvfs_vfs::mode_to_vtype(u32::from(st.stx_mode))
            })
            .unwrap_or(VType::Reg);
        DirEntry {
            ino,
            kind,
            name: d.name.to_vec(),
            // d_off is never 0 for an entry (0 means "from the start").
            offset: (d.off as u64).max(1),
        }
    }

    pub(crate) fn do_readdir(
        &self,
        dir: &VnodeRef,
        fh: Fh,
        offset: u64,
        sink: &mut DirSink<'_>,
    ) -> VfsResult<()> {
        let of = self.opens.get(fh)?;
        if !Arc::ptr_eq(&of.node, &self.node_of(dir)?) {
            return Err(Errno::EBADF);
        }
        // A walker's listing goes on here past its first READDIRPLUS (the
        // kernel asks READDIRPLUS only at offset 0 unless a LOOKUP in the
        // directory advised it), so a directory of more subdirectories
        // than one reply holds hands the readahead the rest of them here;
        // without this it warmed only the first reply's.
        let _active = self.plus_load.enter();
        let ahead = self.prefetch.as_ref().filter(|_| self.plus_load.alone());
        let mut subdirs = Vec::new();
        let mut full = false;
        self.scan(&of, offset, &mut |e, source_ino| {
            full = sink(&e);
            if ahead.is_some()
                && !full
                && e.kind == VType::Dir
                && !uvfs_vfs::is_dot_or_dotdot(&e.name)
            {
                if let Ok(name) = CString::new(e.name) {
                    subdirs.push((name, source_ino));
                }
            }
            Ok(full)
        })?;
        if let Some(p) = ahead {
            p.listed(&of.node, of.node.dev(), of.node.ino, subdirs, !full);
        }
        Ok(())
    }

    pub(crate) fn do_readdirplus(
        &self,
        dir: &VnodeRef,
        fh: Fh,
        offset: u64,
        sink: &mut DirPlusSink<'_>,
    ) -> VfsResult<()> {
        let of = self.opens.get(fh)?;
        let dnode = self.node_of(dir)?;
        if !Arc::ptr_eq(&of.node, &dnode) {
            return Err(Errno::EBADF);
        }
        let _active = self.plus_load.enter();
        // Readahead (`prefetch.rs`): the walker is here now; while it walks
        // alone, its next directories are this one's subdirectories.
        let ahead = self.prefetch.as_ref().map(|p| {
            if offset == 0 {
                p.reading(dnode.dev(), dnode.ino);
            }
            (p, self.plus_load.alone())
        });
        let mut subdirs = Vec::new();
        let want_subdirs = ahead.is_some_and(|(_, alone)| alone);
        let mut given = 0usize;
        let mut chunk: Vec<DirEntry> = Vec::with_capacity(CHUNK);
        let mut full = false;
        // A listing again from the start right after one that gave the
        // kernel these entries' attributes (`uvfs_vfs::Relist`).
        let fresh = if offset == 0 {
            self.relist.fresh(dnode.id).unwrap_or(0)
        } else {
            0
        };
        let mut names_only = 0usize;
        let mut plus = |chunk: &mut Vec<DirEntry>, given: &mut usize| {
            let subdirs = want_subdirs.then_some(&mut subdirs);
            let fresh = fresh.saturating_sub(*given);
            self.plus_chunk(&dnode, chunk, sink, given, subdirs, fresh, &mut names_only)
        };
        self.scan(&of, offset, &mut |e, _| {
            chunk.push(e);
            if chunk.len() == CHUNK {
                full = plus(&mut chunk, &mut given)?;
            }
            Ok(full)
        })?;
        if !full && !chunk.is_empty() {
            full = plus(&mut chunk, &mut given)?;
        }
        // Only a listing that gave every entry's attributes vouches for
        // them (one that gave names alone would stretch an older one's).
        // (`given` counts the entry the sink refused, if it was full.)
        if offset == 0 && names_only == 0 {
            self.relist.given(dnode.id, given - usize::from(full));
        }
        if let Some((p, _)) = ahead {
            p.listed(&dnode, dnode.dev(), dnode.ino, subdirs, !full);
        }
        Ok(())
    }

    /// Looks up a chunk of listed entries (probes in parallel) and hands
    /// them to `sink` in order; empties `chunk`. Returns whether the sink
    /// is full. The subdirectories handed over (same device: no mount
    /// points) are added to `subdirs`, if given, for readahead. Of the
    /// chunk's first `fresh` entries, those whose node the kernel holds
    /// go by name alone (`uvfs_vfs::Relist`), counted in `names_only`.
    #[allow(clippy::too_many_arguments)]
    fn plus_chunk(
        &self,
        dnode: &Arc<Node>,
        chunk: &mut Vec<DirEntry>,
        sink: &mut DirPlusSink<'_>,
        given: &mut usize,
        mut subdirs: Option<&mut Vec<(CString, u64)>>,
        fresh: usize,
        names_only: &mut usize,
    ) -> VfsResult<bool> {
        let probes: Vec<Option<VfsResult<Probe>>> = {
            let dfd = self.fd_of(dnode)?;
            let raw = dfd.as_fd();
            let one = |(i, e): (usize, &DirEntry)| {
                let skip = uvfs_vfs::is_dot_or_dotdot(&e.name)
                    || (i < fresh && Relist::kernel_holds(&self.layer, &self.mnt, e.ino));
                (!skip).then(|| probe(self, raw, &e.name))
            };
            // Alone: the walker waits for us, a core is idle. Not alone:
            // the other requests' threads have the cores, and handing work
            // to the pool only adds wakeups (see `PlusLoad`).
            // With readahead the walker's next lookups find the backing
            // caches warm, and the other core is the readahead's: probing
            // there too slows a lone walker's cold walk
            // (docs/design/passthrough.md).
            if chunk.len() >= PAR_MIN && self.prefetch.is_none() && self.plus_load.alone() {
                chunk
                    .par_iter()
                    .enumerate()
                    .with_min_len(PAR_MIN / 2)
                    .map(one)
                    .collect()
            } else {
                chunk.iter().enumerate().map(one).collect()
            }
        };
        for (e, p) in chunk.drain(..).zip(probes) {
            let Some(p) = p else {
                if !uvfs_vfs::is_dot_or_dotdot(&e.name) {
                    *names_only += 1;
                }
                *given += 1;
                if sink(&e, None) {
                    return Ok(true);
                }
                continue;
            };
            let subdir = match &p {
                Ok((st, _))
                    if u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR
                        && sys::stx_dev(st) == dnode.dev() =>
                {
                    Some(st.stx_ino)
                }
                _ => None,
            };
            match self.lookup_probed(dnode, &e.name, p) {
                Ok((vp, attr)) => {
                    *given += 1;
                    if sink(&e, Some((&vp, &attr))) {
                        return Ok(true);
                    }
                    if let (Some(list), Some(ino)) = (subdirs.as_deref_mut(), subdir) {
                        if let Ok(name) = CString::new(e.name) {
                            list.push((name, ino));
                        }
                    }
                }
                Err(Errno::ENOENT) => {}
                // Entries already handed over are counted by the caller:
                // end this batch short; the kernel asks again from there.
                Err(_) if *given > 0 => return Ok(true),
                Err(err) => return Err(err),
            }
        }
        Ok(false)
    }
}
