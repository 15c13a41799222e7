//! A node's attributes from its source file, and the `ESTALE` rules for a
//! file removed behind the server's back.

use super::PassthroughFs;
use crate::node::Node;
use crate::sys;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{mode_to_vtype, Attr, Errno, Timespec, VType, VfsResult};

/// The `STATX_ATTR_*` properties of a source file that are the file's own
/// and so hold through the mount: compressed, immutable, append-only,
/// no-dump, encrypted, verity. Not those about where the source sits or
/// what its file system can do (mount root, automount, DAX, atomic
/// writes), which the mount does not share.
const SOURCE_STATX_ATTRS: u64 = (libc::STATX_ATTR_COMPRESSED
    | libc::STATX_ATTR_IMMUTABLE
    | libc::STATX_ATTR_APPEND
    | libc::STATX_ATTR_NODUMP
    | libc::STATX_ATTR_ENCRYPTED
    | libc::STATX_ATTR_VERITY) as u64;

impl PassthroughFs {
    /// Attributes from a statx of the node's file.
    pub(crate) fn attr_of(&self, node: &Node, st: &crate::sys::Statx) -> Attr {
        let ts = |t: &rustix::fs::StatxTimestamp| Timespec::new(t.tv_sec, t.tv_nsec);
        Attr {
            ino: node.id,
            kind: mode_to_vtype(u32::from(st.stx_mode)).unwrap_or(VType::Reg),
            perm: st.stx_mode & 0o7777,
            nlink: st.stx_nlink,
            uid: st.stx_uid,
            gid: st.stx_gid,
            size: st.stx_size,
            blocks: st.stx_blocks,
            blksize: st.stx_blksize,
            rdev: libc::makedev(st.stx_rdev_major, st.stx_rdev_minor),
            atime: ts(&st.stx_atime),
            mtime: ts(&st.stx_mtime),
            ctime: ts(&st.stx_ctime),
            btime: (st.stx_mask & libc::STATX_BTIME != 0).then(|| ts(&st.stx_btime)),
            attributes: st.stx_attributes.bits() & SOURCE_STATX_ATTRS,
            attributes_mask: st.stx_attributes_mask.bits() & SOURCE_STATX_ATTRS,
        }
    }

    /// The node's current attributes. A file removed behind the server's
    /// back (no links left, and not open through the mount) is `ESTALE`,
    /// not a stale answer: the kernel then looks the name up again. One
    /// removed through the mount while not a regular file may be open in
    /// the kernel without our knowing (`Node::set_orphan`): it answers.
    pub(crate) fn getattr_node(&self, node: &Arc<Node>) -> VfsResult<Attr> {
        let st = match node.cached_fd() {
            Some(fd) => sys::statx_fd(fd.as_fd())?,
            None => self.statx_uncached(node)?,
        };
        if st.stx_nlink == 0 && node.open_count() == 0 && !node.is_orphan() {
            if Arc::ptr_eq(node, &self.root) {
                self.source_removed();
                return Ok(self.attr_of(node, &st));
            }
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ESTALE);
        }
        Ok(self.attr_of(node, &st))
    }

    /// The source directory was removed on the host. ESTALE would make
    /// the kernel look the name up again, and the mount's root has none:
    /// every path under the mount would fail for good with an error that
    /// names no cause. A bind mount of a removed directory shows it empty,
    /// and creating in it fails with ENOENT; so does this mount, and the
    /// log says why, once.
    fn source_removed(&self) {
        if self.counters.source_removed.fetch_add(1, Ordering::Relaxed) == 0 {
            log::warn!(
                "the source directory was removed on the host: the mount shows it empty \
                 and nothing can be created in it; unmount it, or mount the directory anew"
            );
        }
    }

    /// A statx of a node with no cached fd. Through its handle the fd is
    /// opened for this call only: a `stat` is no sign the file will be
    /// used, and caching the fd would make a walk of more files than the
    /// budget turn the pool over once per file. Fallback nodes reopen
    /// (and cache) through their parent as any operation would.
    fn statx_uncached(&self, node: &Arc<Node>) -> VfsResult<crate::sys::Statx> {
        let ident = node.ident();
        let Some(h) = ident.handle() else {
            return sys::statx_fd(self.fd_of(node)?.as_fd());
        };
        let res = self.pool.reserve()?;
        let fd = res.into_fd(
            self.handles
                .open(h, libc::O_PATH)
                .map_err(|e| self.stale(e))?,
        );
        self.counters.stat_by_handle.fetch_add(1, Ordering::Relaxed);
        let st = sys::statx_fd(fd.as_fd())?;
        if (sys::stx_dev(&st), st.stx_ino) != (node.dev(), node.ino) {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ESTALE);
        }
        Ok(st)
    }

    /// A handle that fails to open: the file is gone (`ESTALE`). ENOMEM
    /// too: when the kernel decodes the handle but finds no acceptable
    /// dentry for it (an inode unlinked and being evicted),
    /// `do_handle_to_path` turns the NULL dentry into -ENOMEM.
    pub(crate) fn stale(&self, e: Errno) -> Errno {
        if e == Errno::ESTALE || e == Errno::ENOENT || e == Errno::ENOMEM {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            Errno::ESTALE
        } else {
            e
        }
    }
}
