//! A read-only view of a tar archive, served with uvfs: what the vnode
//! layer buys a file system with many files.
//!
//! `cargo run --release -p uvfs-fuse --example tar -- ARCHIVE MOUNTPOINT
//! [--vnodes N]`, then browse MOUNTPOINT; Ctrl-C or `umount MOUNTPOINT`
//! ends it, `uvfs stat MOUNTPOINT` shows its counters.
//!
//! At mount, one pass over the archive's headers builds a compact index
//! (`index.rs`): a few dozen bytes per entry, the contents left in the
//! archive and read from it with `pread` when asked. Everything per file
//! beyond that lives in vnodes: the layer builds one when a file is first
//! looked up (here, with its attributes decoded from the index), and the
//! server and the kernel hang their own state off it. The layer keeps at
//! most `--vnodes` of them, recycling the least recently used and asking
//! the kernel to forget what it no longer needs, so an archive of a
//! million entries mounts and walks in memory bounded by the index plus
//! the limit, not by the number of files anyone has looked at.
//!
//! Plain (uncompressed) archives only: serving a compressed one would need
//! random access into it. GNU sparse entries are refused.

mod index;

use index::{Index, Node, ROOT};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;
use uvfs_fuse::{mount_and_serve, ServeConfig, Timeouts};
use uvfs_vfs::{Attr, Ctx, DirEntry, DirSink, Errno, Fh, FileSystem, FsMount, VfsResult};
use uvfs_vfs::{Ino, Mount, Timespec, VType, VnodeRef};

/// How many vnodes the layer keeps unless told otherwise.
const DEFAULT_VNODES: usize = 16_384;

struct TarFs {
    mnt: FsMount,
    archive: File,
    index: Index,
}

impl TarFs {
    /// Inode numbers are index positions plus one, so the root is 1, as
    /// FUSE wants.
    fn node(&self, ino: Ino) -> VfsResult<&Node> {
        let i = usize::try_from(ino.wrapping_sub(1)).map_err(|_| Errno::ESTALE)?;
        self.index.nodes.get(i).ok_or(Errno::ESTALE)
    }

    /// The vnode of `ino`: the cached one, or one made now with the
    /// attributes the file's later `getattr`s answer from.
    fn vnode(&self, ino: Ino) -> VfsResult<VnodeRef> {
        let node = self.node(ino)?;
        let make = || Ok((node.kind, std::sync::Arc::new(attr(ino, node)) as _));
        self.mnt.vnode_with(ino, make)
    }

    fn dir_node(&self, vp: &VnodeRef) -> VfsResult<&Node> {
        match self.node(vp.ino())? {
            n if n.kind == VType::Dir => Ok(n),
            _ => Err(Errno::ENOTDIR),
        }
    }
}

fn attr(ino: Ino, node: &Node) -> Attr {
    let size = match node.kind {
        VType::Reg | VType::Lnk => node.len,
        _ => 0,
    };
    let mut a = Attr::new(ino, node.kind, node.perm, size);
    a.nlink = node.nlink;
    (a.uid, a.gid) = (node.uid, node.gid);
    if matches!(node.kind, VType::Chr | VType::Blk) {
        a.rdev = node.start;
    }
    let t = Timespec {
        sec: node.mtime,
        nsec: 0,
    };
    (a.atime, a.mtime, a.ctime) = (t, t, t);
    a
}

impl FileSystem for TarFs {
    fn fs_type(&self) -> &'static str {
        "tar"
    }
    fn mount(&self) -> &Arc<Mount> {
        self.mnt.mount()
    }
    fn root(&self) -> VfsResult<VnodeRef> {
        self.vnode(Ino::from(ROOT) + 1)
    }
    fn lookup(&self, _: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        let node = self.dir_node(dir)?;
        let found = match name {
            b"." => return Ok(dir.clone()),
            b".." => node.parent,
            _ => self.index.lookup(node, name).ok_or(Errno::ENOENT)?,
        };
        self.vnode(Ino::from(found) + 1)
    }
    fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        vp.data::<Attr>().cloned().ok_or(Errno::EIO)
    }
    fn readlink(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        match self.node(vp.ino())? {
            n if n.kind == VType::Lnk => Ok(self.index.target(n).to_vec()),
            _ => Err(Errno::EINVAL),
        }
    }
    fn read(&self, vp: &VnodeRef, _: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        let node = self.node(vp.ino())?;
        if node.kind != VType::Reg {
            return Err(Errno::EISDIR);
        }
        let n = node.len.saturating_sub(offset).min(u64::from(size));
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0; n as usize];
        self.archive.read_exact_at(&mut buf, node.start + offset)?;
        Ok(buf)
    }
    /// Cookies: 1 and 2 for `.` and `..`, then the name's position in the
    /// directory plus 3.
    fn readdir(&self, dir: &VnodeRef, _: Fh, offset: u64, sink: &mut DirSink<'_>) -> VfsResult<()> {
        let node = self.dir_node(dir)?;
        let dots = [(dir.ino(), &b"."[..]), (Ino::from(node.parent) + 1, b"..")];
        for (i, (ino, name)) in dots.into_iter().enumerate().skip(offset as usize) {
            if sink(&DirEntry::new(ino, VType::Dir, name, i as u64 + 1)) {
                return Ok(());
            }
        }
        let names = self.index.dir(node);
        for (i, n) in names
            .iter()
            .enumerate()
            .skip(offset.saturating_sub(2) as usize)
        {
            let kind = self.index.nodes[n.node as usize].kind;
            let e = DirEntry::new(
                Ino::from(n.node) + 1,
                kind,
                self.index.name(n),
                i as u64 + 3,
            );
            if sink(&e) {
                break;
            }
        }
        Ok(())
    }
    /// Any file can be found again by number: what opening a file handle
    /// needs once its vnode was recycled.
    fn vget(&self, ino: Ino) -> VfsResult<VnodeRef> {
        self.vnode(ino)
    }
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (Some(archive), Some(mountpoint)) = (args.next(), args.next()) else {
        eprintln!("usage: tar ARCHIVE MOUNTPOINT [--vnodes N]");
        std::process::exit(2);
    };
    let vnodes = match (args.next(), args.next(), args.next()) {
        (None, _, _) => Some(DEFAULT_VNODES),
        (Some(flag), Some(n), None) if flag == "--vnodes" => {
            n.to_str().and_then(|n| n.parse().ok()).filter(|&n| n > 0)
        }
        _ => None,
    };
    let Some(vnodes) = vnodes else {
        eprintln!("usage: tar ARCHIVE MOUNTPOINT [--vnodes N] (N > 0)");
        std::process::exit(2);
    };
    let fail = |what: &dyn std::fmt::Display| -> ! {
        eprintln!("tar: {}: {what}", archive.to_string_lossy());
        std::process::exit(1);
    };
    let file = File::open(&archive).unwrap_or_else(|e| fail(&e));
    let index = Index::build(&file).unwrap_or_else(|e| fail(&e));
    // The pass's scaffolding (a map of every path) is freed by now, in
    // pieces too small for the allocator to hand back by itself.
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    let cfg = ServeConfig {
        read_only: true,
        // `uvfs stat MOUNTPOINT` (and the example's test) read the counters.
        control: true,
        fsname: archive.to_string_lossy().into_owned(),
        // Nothing changes under the mount: the kernel may cache for long.
        timeouts: Timeouts {
            entry: Duration::from_secs(3600),
            attr: Duration::from_secs(3600),
        },
        ..ServeConfig::new(mountpoint)
    };
    let served = mount_and_serve(&cfg, vnodes, |layer| {
        Ok(Arc::new(TarFs {
            mnt: FsMount::new(layer, "tar"),
            archive: file,
            index,
        }))
    });
    if let Err(e) = served {
        fail(&e);
    }
}
