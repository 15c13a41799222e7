//! A read-only file system of one file, `hello`, served with uvfs.
//!
//! `cargo run --release -p uvfs-fuse --example hello -- MOUNTPOINT`, then
//! `cat MOUNTPOINT/hello`; Ctrl-C or `umount MOUNTPOINT` ends it.

use std::sync::Arc;
use uvfs_fuse::{mount_and_serve, ServeConfig};
use uvfs_vfs::{Attr, Ctx, DirEntry, DirSink, Errno, Fh, FileSystem, VfsResult};
use uvfs_vfs::{Ino, Mount, VType, VnodeLayer, VnodeRef};

const TEXT: &[u8] = b"Hello from uvfs!\n";
const ROOT: Ino = 1;
const FILE: Ino = 2;

/// The vnode layer caches this file system's two vnodes like any other's.
struct Hello {
    layer: Arc<VnodeLayer>,
    mnt: Arc<Mount>,
}

impl Hello {
    fn vnode(&self, ino: Ino) -> VfsResult<VnodeRef> {
        let kind = if ino == ROOT { VType::Dir } else { VType::Reg };
        Ok(self
            .layer
            .get(&self.mnt, ino, || Ok((kind, Box::new(()))))?)
    }
}

impl FileSystem for Hello {
    fn fs_type(&self) -> &'static str {
        "hello"
    }
    fn mount(&self) -> &Arc<Mount> {
        &self.mnt
    }
    fn root(&self) -> VfsResult<VnodeRef> {
        self.vnode(ROOT)
    }
    fn lookup(&self, _: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        match name {
            b"." | b".." => self.vnode(dir.ino()),
            b"hello" => self.vnode(FILE),
            _ => Err(Errno::ENOENT),
        }
    }
    fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        Ok(match vp.ino() {
            ROOT => Attr::new(ROOT, VType::Dir, 0o555, 0),
            ino => Attr::new(ino, VType::Reg, 0o444, TEXT.len() as u64),
        })
    }
    fn read(&self, _: &VnodeRef, _: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        let start = (offset as usize).min(TEXT.len());
        Ok(TEXT[start..(start + size as usize).min(TEXT.len())].to_vec())
    }
    fn readdir(&self, _: &VnodeRef, _: Fh, offset: u64, sink: &mut DirSink<'_>) -> VfsResult<()> {
        let all = [
            (ROOT, VType::Dir, "."),
            (ROOT, VType::Dir, ".."),
            (FILE, VType::Reg, "hello"),
        ];
        for (i, (ino, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if sink(&DirEntry::new(ino, kind, name.as_bytes(), i as u64 + 1)) {
                break;
            }
        }
        Ok(())
    }
}

fn main() -> std::io::Result<()> {
    let Some(mountpoint) = std::env::args_os().nth(1) else {
        eprintln!("usage: hello MOUNTPOINT");
        std::process::exit(2);
    };
    let cfg = ServeConfig {
        read_only: true,
        ..ServeConfig::new(mountpoint)
    };
    mount_and_serve(&cfg, 1024, |layer| {
        let mnt = layer.mount("hello", Arc::new(()));
        Ok(Arc::new(Hello {
            layer: layer.clone(),
            mnt,
        }))
    })
}
