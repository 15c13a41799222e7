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
//! Each entry is looked up as it is listed and handed to the sink with its
//! vnode, and the listing stops at the first entry the sink refuses, so no
//! lookup is wasted on entries that do not fit. A name that vanished
//! between listing and lookup is skipped, as if the scan had come after.

use crate::fs::PassthroughFs;
use crate::node::Node;
use crate::open::OpenFile;
use crate::sys;
use std::sync::Arc;
use uvfs_vfs::{DirEntry, DirPlusSink, DirSink, Errno, Fh, VType, VfsResult, VnodeRef};

const BUF: usize = 32 << 10;

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
    /// Calls `f` for each entry after cookie `offset` until it returns
    /// `true` (full) or the directory ends.
    fn scan(
        &self,
        of: &OpenFile,
        offset: u64,
        f: &mut dyn FnMut(DirEntry) -> VfsResult<bool>,
    ) -> VfsResult<()> {
        let _g = of.dir_lock.lock();
        let fd = of.fd.raw();
        sys::seek(fd, offset)?;
        let mut buf = vec![0u8; BUF];
        loop {
            let n = sys::getdents(fd, &mut buf)?;
            if n == 0 {
                return Ok(());
            }
            for d in sys::dirents(&buf[..n]) {
                let e = self.entry(&of.node, fd, &d);
                if f(e)? {
                    return Ok(());
                }
            }
        }
    }

    fn entry(&self, dir: &Arc<Node>, fd: i32, d: &sys::RawDirent<'_>) -> DirEntry {
        let ino = match d.name {
            b"." => dir.id,
            b".." if dir.id == self.root.id => self.root.id,
            _ => self.inodes.node_id(dir.dev, d.ino),
        };
        let kind = dtype(d.dtype)
            .or_else(|| {
                let n = sys::cstr(d.name).ok()?;
                let st = sys::statx_at(fd, &n, 0).ok()?;
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
        self.scan(&of, offset, &mut |e| Ok(sink(&e)))
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
        let mut given = 0usize;
        self.scan(&of, offset, &mut |e| {
            if uvfs_vfs::is_dot_or_dotdot(&e.name) {
                given += 1;
                return Ok(sink(&e, None));
            }
            match self.lookup_at(&dnode, &e.name) {
                Ok((vp, attr)) => {
                    given += 1;
                    Ok(sink(&e, Some((&vp, &attr))))
                }
                Err(Errno::ENOENT) => Ok(false),
                // Entries already handed over are counted by the caller:
                // end this batch short; the kernel asks again from there.
                Err(_) if given > 0 => Ok(true),
                Err(err) => Err(err),
            }
        })
    }
}
