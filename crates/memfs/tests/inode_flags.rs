//! Inode flags at the VOP level: what the kernel cannot show through a
//! mount (writes below the end of an append-only file, which the kernel
//! turns into appends; the fsxattr form; inheritance).

use std::sync::Arc;
use uvfs_memfs::{AtimeRule, MemFs, MemFsConfig};
use uvfs_vfs::{
    Ctx, Errno, FallocMode, Fh, FileSystem, FsXattr, RenameFlags, SetAttr, SetTime, Timespec,
    VnodeRef, FS_APPEND_FL, FS_DAX_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL, FS_SYNC_FL,
};
use uvfs_vnode::{Config, VnodeLayer};

const C: Ctx = Ctx::ROOT;
const H: Fh = Fh(0);

fn memfs() -> Arc<MemFs> {
    let layer = VnodeLayer::new(Config::with_limit(1024));
    MemFs::new(
        layer,
        MemFsConfig {
            // Atimes move on every read, so a skipped update shows.
            atime: AtimeRule::from_mount_flags(libc::MS_STRICTATIME),
            ..Default::default()
        },
    )
}

fn file(fs: &MemFs, dir: &VnodeRef, name: &str, data: &[u8]) -> VnodeRef {
    let vp = fs
        .create(&C, dir, name.as_bytes(), 0o644, libc::O_RDWR)
        .unwrap()
        .0;
    fs.write(&vp, H, 0, data).unwrap();
    vp
}

#[test]
fn append_only_takes_writes_at_the_end_only() {
    let fs = memfs();
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "log", b"0123");
    fs.set_flags(&C, &f, H, FS_APPEND_FL).unwrap();
    assert_eq!(fs.write(&f, H, 0, b"x").unwrap_err(), Errno::EPERM);
    assert_eq!(fs.write(&f, H, 3, b"x").unwrap_err(), Errno::EPERM);
    assert_eq!(fs.write(&f, H, 4, b"45").unwrap(), 2);
    let keep = FallocMode(FallocMode::KEEP_SIZE);
    let punch = FallocMode(FallocMode::KEEP_SIZE | FallocMode::PUNCH_HOLE);
    assert!(fs.fallocate(&f, H, keep, 0, 8192).is_ok());
    assert_eq!(
        fs.fallocate(&f, H, punch, 0, 4096).unwrap_err(),
        Errno::EPERM
    );
    let touch = SetAttr {
        mtime: Some(SetTime::Now),
        ..Default::default()
    };
    assert!(fs.setattr(&C, &f, &touch).is_ok());
    let back = SetAttr {
        mtime: Some(SetTime::At(Timespec::new(1, 0))),
        ..Default::default()
    };
    assert_eq!(fs.setattr(&C, &f, &back).unwrap_err(), Errno::EPERM);
    assert_eq!(fs.read(&f, H, 0, 100).unwrap(), b"012345");
    // Renamed over, it would be removed.
    file(&fs, &root, "other", b"");
    assert_eq!(
        fs.rename(&C, &root, b"other", &root, b"log", RenameFlags::default())
            .unwrap_err(),
        Errno::EPERM
    );
}

#[test]
fn immutable_refuses_every_change_and_copy_into_it() {
    let fs = memfs();
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f", b"data");
    let src = file(&fs, &root, "src", b"more");
    fs.set_flags(&C, &f, H, FS_IMMUTABLE_FL).unwrap();
    assert_eq!(
        fs.copy_file_range(&src, H, 0, &f, H, 0, 4, 0).unwrap_err(),
        Errno::EPERM
    );
    let alloc = FallocMode(0);
    assert_eq!(
        fs.fallocate(&f, H, alloc, 0, 4096).unwrap_err(),
        Errno::EPERM
    );
    assert_eq!(
        fs.open(&C, &f, libc::O_RDONLY | libc::O_TRUNC).unwrap_err(),
        Errno::EPERM
    );
    assert!(fs.open(&C, &f, libc::O_RDONLY).is_ok());
    assert_eq!(
        fs.rename(
            &C,
            &root,
            b"src",
            &root,
            b"f",
            RenameFlags(libc::RENAME_EXCHANGE)
        )
        .unwrap_err(),
        Errno::EPERM
    );
    assert_eq!(
        fs.removexattr(&C, &f, b"user.none").unwrap_err(),
        Errno::EPERM
    );
    assert_eq!(fs.read(&f, H, 0, 100).unwrap(), b"data");
    // Clearing it is the one change it takes.
    fs.set_flags(&C, &f, H, 0).unwrap();
    assert_eq!(fs.copy_file_range(&src, H, 0, &f, H, 0, 4, 0).unwrap(), 4);
}

#[test]
fn flags_memfs_does_not_keep_are_refused_and_fsxattr_maps_onto_them() {
    let fs = memfs();
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f", b"");
    assert_eq!(
        fs.set_flags(&C, &f, H, FS_SYNC_FL).unwrap_err(),
        Errno::EOPNOTSUPP
    );
    assert_eq!(
        fs.set_flags(&C, &f, H, FS_DAX_FL).unwrap_err(),
        Errno::EOPNOTSUPP
    );
    let before = fs.getattr(&f).unwrap().ctime;
    std::thread::sleep(std::time::Duration::from_millis(5));
    let x = FsXattr::from_flags(FS_NODUMP_FL | FS_IMMUTABLE_FL);
    fs.set_fsxattr(&C, &f, H, &x).unwrap();
    assert_eq!(fs.get_flags(&f, H).unwrap(), FS_NODUMP_FL | FS_IMMUTABLE_FL);
    assert_eq!(fs.get_fsxattr(&f, H).unwrap(), x);
    assert!(fs.getattr(&f).unwrap().ctime > before, "chattr moves ctime");
    let hint = FsXattr { extsize: 4096, ..x };
    assert_eq!(
        fs.set_fsxattr(&C, &f, H, &hint).unwrap_err(),
        Errno::EOPNOTSUPP
    );
}

#[test]
fn noatime_and_nodump_are_inherited_and_noatime_keeps_atime() {
    let fs = memfs();
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    fs.set_flags(&C, &d, H, FS_NOATIME_FL | FS_NODUMP_FL | FS_APPEND_FL)
        .unwrap();
    let f = file(&fs, &d, "f", b"abc");
    assert_eq!(fs.get_flags(&f, H).unwrap(), FS_NOATIME_FL | FS_NODUMP_FL);
    let old = SetAttr {
        atime: Some(SetTime::At(Timespec::new(1000, 0))),
        ..Default::default()
    };
    fs.setattr(&C, &f, &old).unwrap();
    fs.read(&f, H, 0, 3).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().atime, Timespec::new(1000, 0));
    fs.set_flags(&C, &f, H, 0).unwrap();
    fs.read(&f, H, 0, 3).unwrap();
    assert!(fs.getattr(&f).unwrap().atime > Timespec::new(1000, 0));
}
