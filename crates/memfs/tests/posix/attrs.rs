//! Attributes: times, owners, extended attributes and POSIX ACLs.

use crate::common::names;
use crate::{file, memfs, C};
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vfs::{
    Ctx, Errno, FallocMode, Fh, FileSystem, SetAttr, SetTime, Timespec, VnodeRef, XattrFlags,
};
use uvfs_vnode::{Config, VnodeLayer};

#[test]
fn times_and_ownership() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    let t = Timespec::new(-12345, 678_901_234);
    let set = SetAttr {
        atime: Some(SetTime::At(t)),
        mtime: Some(SetTime::At(Timespec::new(1, 2))),
        ..Default::default()
    };
    let a = fs.setattr(&C, &f, &set).unwrap();
    assert_eq!(a.atime, t);
    assert_eq!(a.mtime, Timespec::new(1, 2));
    let before = a.ctime;
    let a = fs
        .setattr(
            &C,
            &f,
            &SetAttr {
                mode: Some(0o6755),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.perm, 0o6755);
    assert!(a.ctime >= before);
    // chown clears set-uid and (with g+x) set-gid.
    let a = fs
        .setattr(
            &C,
            &f,
            &SetAttr {
                uid: Some(1000),
                gid: Some(1000),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (1000, 1000, 0o755));
    // Set-gid directories pass their group down.
    let d = fs.mkdir(&Ctx::new(5, 5), &root, b"d", 0o2775).unwrap();
    let sub = fs.mkdir(&Ctx::new(7, 7), &d, b"s", 0o755).unwrap();
    let a = fs.getattr(&sub).unwrap();
    assert_eq!((a.uid, a.gid, a.perm & 0o2000), (7, 5, 0o2000));
    // Writing updates mtime.
    let m0 = fs.getattr(&f).unwrap().mtime;
    fs.write(&f, Fh(0), 0, b"x").unwrap();
    assert!(fs.getattr(&f).unwrap().mtime > m0);
    // So does every fallocate, preallocation past the end included.
    for mode in [
        FallocMode::KEEP_SIZE,
        0,
        FallocMode::PUNCH_HOLE | FallocMode::KEEP_SIZE,
    ] {
        let old = SetAttr {
            mtime: Some(SetTime::At(Timespec::new(0, 0))),
            ..Default::default()
        };
        fs.setattr(&C, &f, &old).unwrap();
        fs.fallocate(&f, Fh(0), FallocMode(mode), 8192, 4096)
            .unwrap();
        let m = fs.getattr(&f).unwrap().mtime;
        assert!(m > Timespec::new(0, 0), "fallocate mode {mode:#x}");
    }
}

#[test]
fn xattrs() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    fs.setxattr(&C, &f, b"user.k", b"v", XattrFlags::default())
        .unwrap();
    assert_eq!(fs.getxattr(&f, b"user.k").unwrap(), b"v");
    assert_eq!(fs.listxattr(&f).unwrap(), b"user.k\0");
    assert_eq!(fs.getxattr(&f, b"user.none").unwrap_err(), Errno::ENODATA);
    fs.removexattr(&C, &f, b"user.k").unwrap();
    assert_eq!(
        fs.removexattr(&C, &f, b"user.k").unwrap_err(),
        Errno::ENODATA
    );
}

#[test]
fn reads_move_atime_as_relatime_does() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    let fh = fs.open(&C, &f, libc::O_RDWR).unwrap();
    fs.write(&f, fh, 0, b"data").unwrap();
    let old = Timespec::new(946_684_800, 5); // 2000-01-01
    let set_atime = |vp: &VnodeRef, t: Timespec| {
        fs.setattr(
            &C,
            vp,
            &SetAttr {
                atime: Some(SetTime::At(t)),
                ..Default::default()
            },
        )
        .unwrap()
    };
    // atime before mtime: a read moves it to now.
    set_atime(&f, old);
    assert_eq!(fs.read(&f, fh, 0, 4).unwrap(), b"data");
    let a1 = fs.getattr(&f).unwrap().atime;
    assert!(a1 >= fs.getattr(&f).unwrap().mtime, "{a1:?}");
    // Read again, unchanged since: atime stays (no write per read).
    fs.read(&f, fh, 0, 4).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().atime, a1);
    // A zero-byte read is no access.
    set_atime(&f, old);
    fs.read(&f, fh, 0, 0).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().atime, old);
    fs.release(&f, fh).unwrap();
    // Listing a directory and reading a symlink are accesses too.
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    set_atime(&d, old);
    names(&fs, &d);
    assert!(fs.getattr(&d).unwrap().atime > old);
    let l = fs.symlink(&C, &root, b"l", b"target").unwrap();
    set_atime(&l, old);
    assert_eq!(fs.readlink(&l).unwrap(), b"target");
    assert!(fs.getattr(&l).unwrap().atime > old);
}

#[test]
fn reads_move_atimes_as_the_mount_flags_say() {
    // Files read and directories listed on a memfs mounted with each
    // atime flag: relatime (the default) moves an atime older than the
    // last change, noatime never does, nodiratime spares directories.
    let old = Timespec::new(1 << 30, 0);
    for (flags, file_moves, dir_moves) in [
        (0, true, true),
        (libc::MS_NOATIME, false, false),
        (libc::MS_NODIRATIME, true, false),
        (libc::MS_STRICTATIME, true, true),
    ] {
        let fs = MemFs::new(
            VnodeLayer::new(Config::with_limit(64)),
            MemFsConfig {
                atime: uvfs_memfs::AtimeRule::from_mount_flags(flags),
                ..Default::default()
            },
        );
        let root = fs.root().unwrap();
        let f = file(&fs, &root, "f");
        fs.write(&f, Fh(0), 0, b"data").unwrap();
        let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
        let aged = SetAttr {
            atime: Some(SetTime::At(old)),
            ..Default::default()
        };
        fs.setattr(&C, &f, &aged).unwrap();
        fs.setattr(&C, &d, &aged).unwrap();
        assert_eq!(fs.read(&f, Fh(0), 0, 4).unwrap(), b"data");
        names(&fs, &d);
        let moved = |vp: &VnodeRef| fs.getattr(vp).unwrap().atime != old;
        assert_eq!(moved(&f), file_moves, "a file read, flags {flags:#x}");
        assert_eq!(moved(&d), dir_moves, "a directory listed, flags {flags:#x}");
    }
}

/// `system.posix_acl_*` values from (tag, perm, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn acls_set_the_mode_and_replace_the_umask() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let none = XattrFlags::default();
    let mode = |v: &VnodeRef| fs.getattr(v).unwrap().perm;
    // The kernel hands memfs the umask (FUSE_DONT_MASK): it applies
    // where no default ACL says otherwise.
    let user = Ctx {
        umask: 0o027,
        ..Ctx::new(1000, 1000)
    };
    let d = fs.mkdir(&user, &root, b"d", 0o777).unwrap();
    assert_eq!(mode(&d), 0o750);
    let dflt = acl(&[(1, 7, u32::MAX), (4, 7, u32::MAX), (0x20, 5, u32::MAX)]);
    fs.setxattr(&user, &d, b"system.posix_acl_default", &dflt, none)
        .unwrap();
    let (f, _) = fs.create(&user, &d, b"f", 0o666, libc::O_RDWR).unwrap();
    assert_eq!(mode(&f), 0o664, "the default ACL, not the umask");
    assert_eq!(
        fs.getxattr(&f, b"system.posix_acl_access").unwrap_err(),
        Errno::ENODATA,
        "a minimal ACL is the mode: nothing stored"
    );
    let sub = fs.mkdir(&user, &d, b"sub", 0o777).unwrap();
    assert_eq!(
        fs.getxattr(&sub, b"system.posix_acl_default").unwrap(),
        dflt
    );
    // Invalid values are refused whoever sends them.
    assert_eq!(
        fs.setxattr(&user, &f, b"system.posix_acl_access", b"\x02\0\0\0", none)
            .unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        fs.setxattr(&user, &f, b"system.posix_acl_default", &dflt, none)
            .unwrap_err(),
        Errno::EACCES,
        "default ACLs are for directories"
    );
    // Set-gid survives an ACL change by a member of the file's group only.
    let ext = acl(&[
        (1, 6, u32::MAX),
        (2, 6, 7),
        (4, 4, u32::MAX),
        (0x10, 6, u32::MAX),
        (0x20, 4, u32::MAX),
    ]);
    for (who, kept) in [(Ctx::new(1000, 1000), true), (Ctx::new(1000, 1001), false)] {
        let set = SetAttr {
            mode: Some(0o2775),
            ..Default::default()
        };
        fs.setattr(&Ctx::ROOT, &f, &set).unwrap();
        fs.setxattr(&who, &f, b"system.posix_acl_access", &ext, none)
            .unwrap();
        let sgid = if kept { 0o2000 } else { 0 };
        assert_eq!(mode(&f), sgid | 0o664, "caller gid {}", who.gid);
    }
    // chmod moves the mask, and with it what named entries get.
    let set = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    fs.setattr(&Ctx::ROOT, &f, &set).unwrap();
    let now = fs.getxattr(&f, b"system.posix_acl_access").unwrap();
    assert_eq!(
        now,
        acl(&[
            (1, 6, u32::MAX),
            (2, 6, 7),
            (4, 4, u32::MAX),
            (0x10, 0, u32::MAX),
            (0x20, 0, u32::MAX),
        ])
    );
}
