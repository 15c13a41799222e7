//! POSIX semantics of memfs at the VOP level, without FUSE.

mod common;

use common::names;

use std::sync::Arc;
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vfs::{
    Ctx, Errno, FallocMode, Fh, FileSystem, RenameFlags, SetAttr, SetTime, Timespec, VType,
    VnodeRef, XattrFlags,
};
use uvfs_vnode::{Config, VnodeLayer};

const C: Ctx = Ctx::ROOT;

fn memfs(limit: Option<u64>) -> Arc<MemFs> {
    memfs_with_layer(limit, Config::with_limit(1024))
}

fn memfs_with_layer(limit: Option<u64>, cfg: Config) -> Arc<MemFs> {
    let layer = VnodeLayer::new(cfg);
    MemFs::new(
        layer,
        MemFsConfig {
            size_limit: limit,
            ..Default::default()
        },
    )
}

fn file(fs: &MemFs, dir: &VnodeRef, name: &str) -> VnodeRef {
    fs.create(&C, dir, name.as_bytes(), 0o644, libc::O_RDWR)
        .unwrap()
        .0
}

#[test]
fn create_lookup_readdir() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "a");
    fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    let again = fs.lookup(&C, &root, b"a").unwrap();
    assert_eq!(f.ino(), again.ino());
    assert_eq!(fs.lookup(&C, &root, b"nope").unwrap_err(), Errno::ENOENT);
    // A negative entry must not hide a later create.
    file(&fs, &root, "nope");
    assert!(fs.lookup(&C, &root, b"nope").is_ok());
    assert_eq!(names(&fs, &root), vec![".", "..", "a", "d", "nope"]);
    assert_eq!(fs.getattr(&root).unwrap().nlink, 3);
    assert_eq!(fs.mkdir(&C, &root, b"d", 0o755).unwrap_err(), Errno::EEXIST);
    assert_eq!(
        fs.lookup(&C, &root, &[b'x'; 256]).unwrap_err(),
        Errno::ENAMETOOLONG
    );
    assert_eq!(fs.lookup(&C, &root, b"a/b").unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.lookup(&C, &f, b"x").unwrap_err(), Errno::ENOTDIR);
    let d = fs.lookup(&C, &root, b"d").unwrap();
    assert_eq!(fs.lookup(&C, &d, b"..").unwrap().ino(), root.ino());
}

#[test]
fn read_write_truncate_sparse() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    assert_eq!(fs.write(&f, Fh(0), 1 << 20, b"tail").unwrap(), 4);
    let a = fs.getattr(&f).unwrap();
    assert_eq!(a.size, (1 << 20) + 4);
    assert_eq!(a.blocks, 8, "one page allocated for a sparse file");
    assert_eq!(fs.read(&f, Fh(0), 0, 8).unwrap(), vec![0; 8]);
    assert_eq!(fs.read(&f, Fh(0), 1 << 20, 100).unwrap(), b"tail");
    let set = SetAttr {
        size: Some(2),
        ..Default::default()
    };
    fs.setattr(&C, &f, &set).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().blocks, 0);
    assert_eq!(fs.read(&f, Fh(0), 0, 100).unwrap(), vec![0, 0]);
    assert_eq!(fs.read(&root, Fh(0), 0, 1).unwrap_err(), Errno::EISDIR);
}

#[test]
fn open_unlinked_file_lives_until_last_user() {
    let fs = memfs(Some(64 * 4096));
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    fs.write(&f, Fh(0), 0, &[1u8; 10 * 4096]).unwrap();
    fs.unlink(&C, &root, b"f").unwrap();
    assert_eq!(fs.lookup(&C, &root, b"f").unwrap_err(), Errno::ENOENT);
    // Still readable and writable through the open reference.
    assert_eq!(fs.read(&f, Fh(0), 4096, 4).unwrap(), vec![1; 4]);
    fs.write(&f, Fh(0), 0, b"x").unwrap();
    assert_eq!(fs.getattr(&f).unwrap().nlink, 0);
    assert_eq!(fs.bytes_used(), 10 * 4096);
    assert_eq!(fs.alive_count(), 2);
    drop(f);
    // The last user went: the data is gone at once.
    assert_eq!(fs.bytes_used(), 0);
    // Cannot link an unlinked file back.
    let g = file(&fs, &root, "g");
    fs.unlink(&C, &root, b"g").unwrap();
    assert_eq!(fs.link(&C, &g, &root, b"g2").unwrap_err(), Errno::ENOENT);
}

#[test]
fn hard_links_and_symlinks() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    fs.link(&C, &f, &root, b"g").unwrap();
    assert_eq!(fs.getattr(&f).unwrap().nlink, 2);
    fs.unlink(&C, &root, b"f").unwrap();
    assert_eq!(fs.getattr(&f).unwrap().nlink, 1);
    assert_eq!(fs.lookup(&C, &root, b"g").unwrap().ino(), f.ino());
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    assert_eq!(fs.link(&C, &d, &root, b"d2").unwrap_err(), Errno::EPERM);
    let l = fs.symlink(&C, &root, b"l", b"some/where").unwrap();
    assert_eq!(fs.readlink(&l).unwrap(), b"some/where");
    let a = fs.getattr(&l).unwrap();
    assert_eq!((a.kind, a.size, a.perm), (VType::Lnk, 10, 0o777));
    assert_eq!(fs.symlink(&C, &root, b"e", b"").unwrap_err(), Errno::ENOENT);
    assert_eq!(fs.readlink(&f).unwrap_err(), Errno::EINVAL);
}

#[test]
fn mknod_types() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let c = fs
        .mknod(&C, &root, b"c", libc::S_IFCHR | 0o600, 0x0103)
        .unwrap();
    let a = fs.getattr(&c).unwrap();
    assert_eq!((a.kind, a.rdev, a.perm), (VType::Chr, 0x0103, 0o600));
    let p = fs.mknod(&C, &root, b"p", libc::S_IFIFO | 0o644, 0).unwrap();
    assert_eq!(fs.getattr(&p).unwrap().kind, VType::Fifo);
    let s = fs
        .mknod(&C, &root, b"s", libc::S_IFSOCK | 0o644, 0)
        .unwrap();
    assert_eq!(fs.getattr(&s).unwrap().kind, VType::Sock);
    assert_eq!(
        fs.mknod(&C, &root, b"d", libc::S_IFDIR | 0o755, 0)
            .unwrap_err(),
        Errno::EINVAL
    );
    // user xattrs are refused on devices, as Linux does.
    let x = fs.setxattr(&C, &c, b"user.a", b"1", XattrFlags::default());
    assert_eq!(x.unwrap_err(), Errno::EPERM);
}

#[test]
fn rmdir_rules() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    file(&fs, &d, "x");
    assert_eq!(fs.rmdir(&C, &root, b"d").unwrap_err(), Errno::ENOTEMPTY);
    assert_eq!(fs.unlink(&C, &root, b"d").unwrap_err(), Errno::EISDIR);
    fs.unlink(&C, &d, b"x").unwrap();
    fs.rmdir(&C, &root, b"d").unwrap();
    assert_eq!(fs.getattr(&root).unwrap().nlink, 2);
    // The removed directory takes no new entries and lists as empty.
    assert_eq!(
        fs.create(&C, &d, b"y", 0o644, 0).unwrap_err(),
        Errno::ENOENT
    );
    assert!(names(&fs, &d).is_empty());
    assert_eq!(fs.getattr(&d).unwrap().nlink, 0);
}

#[test]
fn rename_replace_noreplace_exchange() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let a = file(&fs, &root, "a");
    let b = file(&fs, &root, "b");
    fs.write(&b, Fh(0), 0, b"bbbb").unwrap();
    let nr = RenameFlags(RenameFlags::NOREPLACE);
    assert_eq!(
        fs.rename(&C, &root, b"a", &root, b"b", nr).unwrap_err(),
        Errno::EEXIST
    );
    let ex = RenameFlags(RenameFlags::EXCHANGE);
    fs.rename(&C, &root, b"a", &root, b"b", ex).unwrap();
    assert_eq!(fs.lookup(&C, &root, b"a").unwrap().ino(), b.ino());
    assert_eq!(fs.lookup(&C, &root, b"b").unwrap().ino(), a.ino());
    assert_eq!(
        fs.rename(&C, &root, b"a", &root, b"zz", ex).unwrap_err(),
        Errno::ENOENT
    );
    // Plain rename replaces; the replaced file dies with its last user.
    fs.rename(&C, &root, b"a", &root, b"b", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.lookup(&C, &root, b"b").unwrap().ino(), b.ino());
    assert_eq!(fs.getattr(&a).unwrap().nlink, 0);
    assert_eq!(fs.lookup(&C, &root, b"a").unwrap_err(), Errno::ENOENT);
    let both = RenameFlags(RenameFlags::EXCHANGE | RenameFlags::NOREPLACE);
    assert_eq!(
        fs.rename(&C, &root, b"b", &root, b"c", both).unwrap_err(),
        Errno::EINVAL
    );
}

#[test]
fn rename_directories_across_parents() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let p = fs.mkdir(&C, &root, b"p", 0o755).unwrap();
    let q = fs.mkdir(&C, &root, b"q", 0o755).unwrap();
    let d = fs.mkdir(&C, &p, b"d", 0o755).unwrap();
    let sub = fs.mkdir(&C, &d, b"sub", 0o755).unwrap();
    // Into its own subtree: EINVAL.
    let none = RenameFlags::default();
    assert_eq!(
        fs.rename(&C, &p, b"d", &sub, b"x", none).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        fs.rename(&C, &p, b"d", &d, b"x", none).unwrap_err(),
        Errno::EINVAL
    );
    // Over a non-empty ancestor: ENOTEMPTY.
    assert_eq!(
        fs.rename(&C, &d, b"sub", &root, b"p", none).unwrap_err(),
        Errno::ENOTEMPTY
    );
    // Directory over file and back.
    file(&fs, &q, "f");
    assert_eq!(
        fs.rename(&C, &p, b"d", &q, b"f", none).unwrap_err(),
        Errno::ENOTDIR
    );
    assert_eq!(
        fs.rename(&C, &q, b"f", &p, b"d", none).unwrap_err(),
        Errno::EISDIR
    );
    fs.rename(&C, &p, b"d", &q, b"d", none).unwrap();
    assert_eq!(fs.lookup(&C, &d, b"..").unwrap().ino(), q.ino());
    assert_eq!(fs.getattr(&p).unwrap().nlink, 2);
    assert_eq!(fs.getattr(&q).unwrap().nlink, 3);
    // Over an empty directory.
    fs.mkdir(&C, &p, b"e", 0o755).unwrap();
    fs.rename(&C, &q, b"d", &p, b"e", none).unwrap();
    assert_eq!(fs.lookup(&C, &p, b"e").unwrap().ino(), d.ino());
    assert_eq!(fs.getattr(&q).unwrap().nlink, 2);
    assert_eq!(fs.getattr(&p).unwrap().nlink, 3);
    // Exchange a directory with a file across parents.
    let ex = RenameFlags(RenameFlags::EXCHANGE);
    fs.rename(&C, &p, b"e", &q, b"f", ex).unwrap();
    assert_eq!(fs.lookup(&C, &q, b"f").unwrap().ino(), d.ino());
    assert_eq!(fs.lookup(&C, &d, b"..").unwrap().ino(), q.ino());
    assert_eq!(fs.getattr(&p).unwrap().nlink, 2);
    assert_eq!(fs.getattr(&q).unwrap().nlink, 3);
}

#[test]
fn enospc_keeps_data() {
    let fs = memfs(Some(4 * 4096));
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    assert_eq!(fs.write(&f, Fh(0), 0, &[7u8; 3 * 4096]).unwrap(), 3 * 4096);
    // One page left: a two-page write is short, the next one fails.
    assert_eq!(
        fs.write(&f, Fh(0), 3 * 4096, &[8u8; 2 * 4096]).unwrap(),
        4096
    );
    assert_eq!(
        fs.write(&f, Fh(0), 4 * 4096, b"z").unwrap_err(),
        Errno::ENOSPC
    );
    let g = file(&fs, &root, "g");
    assert_eq!(fs.write(&g, Fh(0), 0, b"z").unwrap_err(), Errno::ENOSPC);
    let all = fs.read(&f, Fh(0), 0, 5 * 4096).unwrap();
    assert_eq!(all.len(), 4 * 4096);
    assert!(all[..3 * 4096].iter().all(|&c| c == 7));
    assert!(all[3 * 4096..].iter().all(|&c| c == 8));
    let st = fs.statfs().unwrap();
    assert_eq!((st.blocks, st.bfree), (4, 0));
    // Freeing space makes room again.
    fs.unlink(&C, &root, b"f").unwrap();
    drop(f);
    assert_eq!(fs.write(&g, Fh(0), 0, b"z").unwrap(), 1);
    let falloc = fs.fallocate(&g, Fh(0), FallocMode(0), 0, 100 * 4096);
    assert_eq!(falloc.unwrap_err(), Errno::ENOSPC);
    assert_eq!(fs.getattr(&g).unwrap().size, 1);
}

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
fn data_outlives_vnode_recycling() {
    // A tiny vnode limit forces recycling; memfs inodes must survive it.
    let mut cfg = Config::with_limit(8);
    cfg.reclaimer = false;
    let fs = memfs_with_layer(None, cfg);
    let root = fs.root().unwrap();
    for i in 0..200 {
        let f = file(&fs, &root, &format!("f{i}"));
        fs.write(&f, Fh(0), 0, format!("data{i}").as_bytes())
            .unwrap();
    }
    for i in 0..200 {
        let f = fs.lookup(&C, &root, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(
            fs.read(&f, Fh(0), 0, 100).unwrap(),
            format!("data{i}").as_bytes()
        );
    }
    assert!(fs.layer().stats().numvnodes < 200);
}

#[test]
fn concurrent_renames_and_creates_keep_the_tree_consistent() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    for d in ["a", "b", "c"] {
        fs.mkdir(&C, &root, d.as_bytes(), 0o755).unwrap();
    }
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let root = fs.root().unwrap();
                let dirs: Vec<_> = ["a", "b", "c"]
                    .iter()
                    .map(|d| fs.lookup(&C, &root, d.as_bytes()).unwrap())
                    .collect();
                for i in 0..500usize {
                    let (x, y) = (&dirs[(i + t) % 3], &dirs[(i * 7 + t) % 3]);
                    let name = format!("n{}", i % 10);
                    match i % 4 {
                        0 => drop(fs.create(&C, x, name.as_bytes(), 0o644, 0)),
                        1 => drop(fs.rename(
                            &C,
                            x,
                            name.as_bytes(),
                            y,
                            name.as_bytes(),
                            RenameFlags::default(),
                        )),
                        2 => drop(fs.mkdir(&C, y, format!("d{}", i % 5).as_bytes(), 0o755)),
                        _ => {
                            let _ = fs.unlink(&C, x, name.as_bytes());
                            let _ = fs.rmdir(&C, y, format!("d{}", i % 5).as_bytes());
                            let _ = fs.rename(&C, &root, b"a", &root, b"a", RenameFlags::default());
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Every listed name resolves, and link counts add up.
    let mut subdirs = 0;
    for d in ["a", "b", "c"] {
        let dv = fs.lookup(&C, &root, d.as_bytes()).unwrap();
        let mut n = 0;
        for name in names(&fs, &dv).into_iter().skip(2) {
            let v = fs.lookup(&C, &dv, name.as_bytes()).unwrap();
            if v.vtype() == VType::Dir {
                n += 1;
                assert_eq!(fs.lookup(&C, &v, b"..").unwrap().ino(), dv.ino());
            }
        }
        assert_eq!(fs.getattr(&dv).unwrap().nlink, 2 + n);
        subdirs += n;
    }
    assert_eq!(fs.getattr(&root).unwrap().nlink, 5);
    assert!(subdirs <= 15);
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

#[test]
fn tmpfiles_are_nameless_until_linked() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let (t, fh) = fs.tmpfile(&C, &root, 0o600, libc::O_RDWR).unwrap();
    assert_eq!(fs.getattr(&t).unwrap().nlink, 0);
    assert_eq!(names(&fs, &root), vec![".", ".."]);
    fs.write(&t, fh, 0, b"kept").unwrap();
    fs.link(&C, &t, &root, b"named").unwrap();
    assert_eq!(fs.getattr(&t).unwrap().nlink, 1);
    let again = fs.lookup(&C, &root, b"named").unwrap();
    assert_eq!(again.ino(), t.ino());
    assert_eq!(fs.read(&again, Fh(0), 0, 10).unwrap(), b"kept");
    // Linked, it is an ordinary file: found by number, unlinked as usual.
    assert_eq!(fs.vget(t.ino()).unwrap().ino(), t.ino());
    // O_EXCL: never linkable; nor is a file whose last name was removed.
    let (x, _) = fs
        .tmpfile(&C, &root, 0o600, libc::O_RDWR | libc::O_EXCL)
        .unwrap();
    assert_eq!(fs.link(&C, &x, &root, b"x").unwrap_err(), Errno::ENOENT);
    assert_eq!(fs.vget(x.ino()).unwrap_err(), Errno::ESTALE);
    let f = file(&fs, &root, "f");
    fs.unlink(&C, &root, b"f").unwrap();
    assert_eq!(fs.link(&C, &f, &root, b"back").unwrap_err(), Errno::ENOENT);
    assert_eq!(
        fs.tmpfile(&C, &f, 0o600, libc::O_RDWR).unwrap_err(),
        Errno::ENOTDIR
    );
}

#[test]
fn rename_whiteout_leaves_a_whiteout_behind() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    let f = file(&fs, &root, "f");
    let w = RenameFlags(RenameFlags::WHITEOUT);
    fs.rename(&C, &root, b"f", &d, b"g", w).unwrap();
    assert_eq!(fs.lookup(&C, &d, b"g").unwrap().ino(), f.ino());
    let wo = fs.lookup(&C, &root, b"f").unwrap();
    let a = fs.getattr(&wo).unwrap();
    assert_eq!((a.kind, a.rdev, a.perm, a.nlink), (VType::Chr, 0, 0, 1));
    // Within one directory too; and never with EXCHANGE.
    fs.rename(&C, &d, b"g", &d, b"h", w).unwrap();
    let mut listed = names(&fs, &d);
    listed.sort();
    assert_eq!(listed, vec![".", "..", "g", "h"]);
    assert_eq!(
        fs.getattr(&fs.lookup(&C, &d, b"g").unwrap()).unwrap().kind,
        VType::Chr
    );
    let x = RenameFlags(RenameFlags::WHITEOUT | RenameFlags::EXCHANGE);
    assert_eq!(
        fs.rename(&C, &d, b"g", &d, b"h", x).unwrap_err(),
        Errno::EINVAL
    );
}

/// Lists `dir` as getdents does, a batch of `batch` entries per call
/// resumed at the last one's offset, calling `each` with every name once
/// its batch is read (between calls, as a program works through what
/// readdir(3) buffered). Panics past `bound` names: a listing that never
/// ends.
fn list_while(
    fs: &MemFs,
    dir: &VnodeRef,
    batch: usize,
    bound: usize,
    mut each: impl FnMut(&[u8]),
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut offset = 0;
    loop {
        let mut got: Vec<(Vec<u8>, u64)> = Vec::new();
        fs.readdir(dir, Fh(0), offset, &mut |e| {
            if got.len() == batch {
                return true;
            }
            got.push((e.name.clone(), e.offset));
            false
        })
        .unwrap();
        if got.is_empty() {
            return seen;
        }
        for (name, off) in got {
            offset = off;
            seen.push(String::from_utf8(name.clone()).unwrap());
            assert!(
                seen.len() <= bound,
                "the listing never ends: {} names so far",
                seen.len()
            );
            if name != b"." && name != b".." {
                each(&name);
            }
        }
    }
}

#[test]
fn a_listing_ends_while_its_entries_are_renamed_away_and_back() {
    // fstests generic/736: each entry read is renamed to a temporary name
    // and back while the listing goes on. It must end; renamed within the
    // directory, an entry keeps its place, so each is listed once.
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    const N: usize = 500;
    let mut want = vec![".".to_string(), "..".to_string()];
    for i in 1..=N {
        file(&fs, &d, &i.to_string());
        want.push(i.to_string());
    }
    let flags = RenameFlags(0);
    let mut seen = list_while(&fs, &d, 37, 3 * N, |name| {
        fs.rename(&C, &d, name, &d, b"TEMPFILE", flags).unwrap();
        fs.rename(&C, &d, b"TEMPFILE", &d, name, flags).unwrap();
    });
    seen.sort();
    want.sort();
    assert_eq!(seen, want);
}

#[test]
fn a_listing_returns_no_entry_made_after_it_started() {
    // Entries added while a listing runs (new files, and entries moved to
    // another directory and back) are left to the next listing, as tmpfs
    // does: a program adding one for each it reads still gets an end.
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    let away = fs.mkdir(&C, &root, b"away", 0o755).unwrap();
    const N: usize = 300;
    for i in 0..N {
        file(&fs, &d, &format!("f{i}"));
    }
    let flags = RenameFlags(0);
    let seen = list_while(&fs, &d, 50, 3 * N, |name| {
        fs.rename(&C, &d, name, &away, name, flags).unwrap();
        fs.rename(&C, &away, name, &d, name, flags).unwrap();
        let mut new = b"new-".to_vec();
        new.extend_from_slice(name);
        fs.create(&C, &d, &new, 0o644, libc::O_RDWR).unwrap();
    });
    assert_eq!(seen.len(), N + 2, "{seen:?}");
    assert!(seen.iter().all(|n| !n.starts_with("new-")), "{seen:?}");
    // A new listing has them all.
    assert_eq!(names(&fs, &d).len(), 2 * N + 2);
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
