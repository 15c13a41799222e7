//! A removed file that the kernel still holds without an open (an
//! `O_PATH` descriptor, a fanotify event not yet read) keeps its data, as
//! on tmpfs, until the kernel lets it go or the space is wanted.

use std::sync::Arc;
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vfs::{Ctx, FileSystem, VnodeRef};
use uvfs_vnode::{Config, HoldRef, VnodeLayer};

const C: Ctx = Ctx::ROOT;
const MIB: u64 = 1 << 20;

fn memfs(limit: u64) -> Arc<MemFs> {
    MemFs::new(
        VnodeLayer::new(Config::with_limit(4096)),
        MemFsConfig {
            size_limit: Some(limit),
            ..Default::default()
        },
    )
}

/// A file of `data` named `name`, closed, and a hold on it as the FUSE
/// server keeps for the kernel's lookup references (by which an OPEN of
/// the node finds it).
fn held_file(fs: &MemFs, name: &[u8], data: &[u8]) -> (VnodeRef, HoldRef) {
    let root = fs.root().unwrap();
    let (f, fh) = fs.create(&C, &root, name, 0o644, libc::O_RDWR).unwrap();
    assert_eq!(fs.write(&f, fh, 0, data).unwrap() as usize, data.len());
    fs.release(&f, fh).unwrap();
    let h = f.hold();
    (f, h)
}

fn read_all(fs: &MemFs, vp: &VnodeRef) -> Vec<u8> {
    let fh = fs.open(&C, vp, libc::O_RDONLY).unwrap();
    let size = fs.getattr(vp).unwrap().size;
    let data = fs.read(vp, fh, 0, size as u32).unwrap();
    fs.release(vp, fh).unwrap();
    data
}

#[test]
fn a_removed_file_the_kernel_holds_keeps_its_data() {
    let fs = memfs(64 * MIB);
    let root = fs.root().unwrap();
    let data: Vec<u8> = (0..3 * MIB).map(|i| (i % 251) as u8).collect();
    let (f, kernel) = held_file(&fs, b"kept", &data);
    fs.unlink(&C, &root, b"kept").unwrap();
    drop(f); // its last user
             // Opened again through the kernel's reference: all of it, twice.
    let again = kernel.get().unwrap();
    assert_eq!(read_all(&fs, &again), data);
    assert_eq!(read_all(&fs, &again), data);
    // Its space counts as free meanwhile (`rm f; df`).
    let st = fs.statfs().unwrap();
    assert_eq!(st.bfree, st.blocks);
    // The kernel lets it go: its vnode, inode and data go with it.
    let alive = fs.alive_count();
    drop((again, kernel));
    assert_eq!(fs.alive_count(), alive - 1);
}

#[test]
fn a_removed_files_data_goes_when_the_space_is_wanted() {
    let fs = memfs(4 * MIB);
    let root = fs.root().unwrap();
    let data = vec![7u8; 3 * MIB as usize];
    let (f, kernel) = held_file(&fs, b"kept", &data);
    fs.unlink(&C, &root, b"kept").unwrap();
    drop(f);
    // As much again, which only fits once the removed file's data is
    // given up: written whole, in one call, as on
    // tmpfs after `rm`, though the kernel has not let the first go.
    let (g, gh) = fs.create(&C, &root, b"next", 0o644, libc::O_RDWR).unwrap();
    assert_eq!(fs.write(&g, gh, 0, &data).unwrap() as usize, data.len());
    fs.release(&g, gh).unwrap();
    assert_eq!(read_all(&fs, &g), data);
    // The removed one paid for it.
    let again = kernel.get().unwrap();
    assert_eq!(fs.getattr(&again).unwrap().size, 0);
}

#[test]
fn a_removed_file_open_again_keeps_its_data_whatever_space_is_wanted() {
    let fs = memfs(4 * MIB);
    let root = fs.root().unwrap();
    let data = vec![9u8; 3 * MIB as usize];
    let (f, kernel) = held_file(&fs, b"kept", &data);
    fs.unlink(&C, &root, b"kept").unwrap();
    drop(f);
    // Opened again (through /proc/PID/fd of its O_PATH descriptor).
    let again = kernel.get().unwrap();
    let fh = fs.open(&C, &again, libc::O_RDONLY).unwrap();
    // No room for as much again: the open file is not given up.
    let (g, gh) = fs.create(&C, &root, b"next", 0o644, libc::O_RDWR).unwrap();
    let wrote = fs.write(&g, gh, 0, &data).unwrap() as usize;
    assert!(wrote <= MIB as usize, "{wrote}");
    assert_eq!(fs.read(&again, fh, 0, data.len() as u32).unwrap(), data);
    fs.release(&again, fh).unwrap();
    fs.release(&g, gh).unwrap();
}
