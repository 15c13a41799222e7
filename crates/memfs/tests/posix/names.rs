//! The namespace: names made, linked, renamed and removed.

use crate::common::names;
use crate::{file, memfs, C};
use uvfs_vfs::{Errno, Fh, FileSystem, RenameFlags, VType, XattrFlags};

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
