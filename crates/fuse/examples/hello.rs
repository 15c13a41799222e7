//! A read-only file system of one file, `hello`, served with uvfs.
//!
//! `cargo run --release -p uvfs-fuse --example hello -- MOUNTPOINT`, then
//! `cat MOUNTPOINT/hello`; Ctrl-C or `umount MOUNTPOINT` ends it.

use std::sync::Arc;
use uvfs_fuse::{mount_and_serve, ServeConfig};
use uvfs_vfs::{list_dir, read_bytes, Attr, Ctx, DirSink, Errno, Fh, FileSystem, FsMount};
use uvfs_vfs::{Ino, Mount, VType, VfsResult, VnodeRef};

const TEXT: &[u8] = b"Hello from uvfs!\n";
const ROOT: Ino = 1;
const FILE: Ino = 2;

/// The vnode layer caches this file system's two vnodes like any other's.
struct Hello(FsMount);

impl FileSystem for Hello {
    fn fs_type(&self) -> &'static str {
        "hello"
    }
    fn mount(&self) -> &Arc<Mount> {
        self.0.mount()
    }
    fn root(&self) -> VfsResult<VnodeRef> {
        self.0.vnode(ROOT, VType::Dir)
    }
    fn lookup(&self, _: &Ctx, _: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        match name {
            b"." | b".." => self.root(),
            b"hello" => self.0.vnode(FILE, VType::Reg),
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
        Ok(read_bytes(TEXT, offset, size))
    }
    fn readdir(&self, _: &VnodeRef, _: Fh, offset: u64, sink: &mut DirSink<'_>) -> VfsResult<()> {
        list_dir(sink, offset, (ROOT, ROOT), [(FILE, VType::Reg, "hello")]);
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
        Ok(Arc::new(Hello(FsMount::new(layer, "hello"))))
    })
}
