//! VOP-level behaviour of passthrough on a temp directory.

mod common;

use common::{env, env_with, ROOT};
use std::os::unix::fs::MetadataExt;
use uvfs_passthrough::PassthroughConfig;
use uvfs_vfs::{Ctx, Errno, FallocMode, FileSystem, RenameFlags, SetAttr, VType, XattrFlags};

#[test]
fn create_write_read_and_stat_match_the_backing_file() {
    let e = env("rw");
    let (f, fh) =
        e.fs.create(&ROOT, &e.root, b"f", 0o640, libc::O_RDWR)
            .unwrap();
    assert_eq!(e.fs.write(&f, fh, 0, b"hello world").unwrap(), 11);
    assert_eq!(e.fs.read(&f, fh, 6, 100).unwrap(), b"world");
    e.fs.fsync(&f, fh, false).unwrap();
    e.fs.release(&f, fh).unwrap();
    let md = std::fs::metadata(e.src.path().join("f")).unwrap();
    let a = e.fs.getattr(&f).unwrap();
    assert_eq!(
        (a.ino, a.size, a.perm, a.kind),
        (md.ino(), 11, 0o640, VType::Reg)
    );
    assert_eq!(
        std::fs::read(e.src.path().join("f")).unwrap(),
        b"hello world"
    );
    // The same file looked up again is the same vnode, same generation.
    let again = e.lookup(&e.root, "f").unwrap();
    assert!(uvfs_vfs::VnodeRef::ptr_eq(&f, &again));
    assert_ne!(e.fs.generation(&f), 0, "handles give generations");
}

#[test]
fn namespace_operations() {
    let e = env("ns");
    let d = e.fs.mkdir(&ROOT, &e.root, b"d", 0o755).unwrap();
    let s = e.fs.symlink(&ROOT, &d, b"s", b"../target").unwrap();
    assert_eq!(e.fs.readlink(&s).unwrap(), b"../target");
    // An OPEN of a symlink node can only come from a kernel inode of a file
    // that is gone (its inode number now the symlink's): no such file.
    assert_eq!(e.fs.open(&ROOT, &s, libc::O_RDONLY), Err(Errno::ENOENT));
    let n =
        e.fs.mknod(&ROOT, &d, b"fifo", libc::S_IFIFO | 0o600, 0)
            .unwrap();
    assert_eq!(e.fs.getattr(&n).unwrap().kind, VType::Fifo);
    let (f, fh) = e.fs.create(&ROOT, &d, b"f", 0o644, libc::O_WRONLY).unwrap();
    e.fs.release(&f, fh).unwrap();
    e.fs.link(&ROOT, &f, &e.root, b"hard").unwrap();
    assert_eq!(e.fs.getattr(&f).unwrap().nlink, 2);
    e.fs.rename(&ROOT, &d, b"f", &e.root, b"g", RenameFlags::default())
        .unwrap();
    assert_eq!(
        e.fs.rename(
            &ROOT,
            &e.root,
            b"g",
            &e.root,
            b"hard",
            RenameFlags(RenameFlags::NOREPLACE)
        ),
        Err(Errno::EEXIST)
    );
    e.fs.rename(
        &ROOT,
        &e.root,
        b"g",
        &d,
        b"s",
        RenameFlags(RenameFlags::EXCHANGE),
    )
    .unwrap();
    assert_eq!(e.lookup(&e.root, "g").unwrap().vtype(), VType::Lnk);
    assert_eq!(e.names(&e.root), [".", "..", "d", "g", "hard"]);
    assert_eq!(e.names(&d), [".", "..", "fifo", "s"]);
    e.fs.unlink(&ROOT, &e.root, b"hard").unwrap();
    e.fs.unlink(&ROOT, &d, b"s").unwrap();
    e.fs.unlink(&ROOT, &d, b"fifo").unwrap();
    assert_eq!(e.fs.rmdir(&ROOT, &e.root, b"nope"), Err(Errno::ENOENT));
    e.fs.rmdir(&ROOT, &e.root, b"d").unwrap();
    assert_eq!(e.lookup(&e.root, "d").err(), Some(Errno::ENOENT));
    // Bad names get an errno, never reach the backing file system.
    assert_eq!(e.lookup(&e.root, "a/b").err(), Some(Errno::EINVAL));
    assert_eq!(
        e.fs.lookup(&ROOT, &e.root, b"a\0b").err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        e.fs.mkdir(&ROOT, &e.root, b"..", 0o755).err(),
        Some(Errno::EEXIST)
    );
}

#[test]
fn setattr_xattr_fallocate_statfs() {
    let e = env("attr");
    let (f, fh) =
        e.fs.create(&ROOT, &e.root, b"f", 0o644, libc::O_RDWR)
            .unwrap();
    let a =
        e.fs.setattr(
            &ROOT,
            &f,
            &SetAttr {
                mode: Some(0o4711),
                uid: Some(1234),
                gid: Some(5678),
                size: Some(10_000),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.perm, a.uid, a.gid, a.size), (0o4711, 1234, 5678, 10_000));
    e.fs.setxattr(&ROOT, &f, b"user.k", b"v", XattrFlags::default())
        .unwrap();
    assert_eq!(e.fs.getxattr(&f, b"user.k").unwrap(), b"v");
    assert!(e.fs.listxattr(&f).unwrap().starts_with(b"user.k\0"));
    assert_eq!(
        e.fs.setxattr(&ROOT, &f, b"user.k", b"w", XattrFlags(XattrFlags::CREATE)),
        Err(Errno::EEXIST)
    );
    e.fs.removexattr(&ROOT, &f, b"user.k").unwrap();
    assert_eq!(e.fs.getxattr(&f, b"user.k"), Err(Errno::ENODATA));
    e.fs.fallocate(&f, fh, FallocMode(FallocMode::KEEP_SIZE), 0, 1 << 20)
        .unwrap();
    assert_eq!(e.fs.getattr(&f).unwrap().size, 10_000);
    let n =
        e.fs.copy_file_range(&f, fh, 0, &f, fh, 20_000, 100, 0)
            .unwrap();
    assert_eq!(n, 100);
    e.fs.release(&f, fh).unwrap();
    assert!(e.fs.statfs().unwrap().blocks > 0);
}

#[test]
fn an_id_of_minus_one_changes_nothing_and_is_no_caller() {
    let e = env("minus-one");
    let (f, fh) =
        e.fs.create(&ROOT, &e.root, b"f", 0o644, libc::O_RDWR)
            .unwrap();
    e.fs.release(&f, fh).unwrap();
    let set = |uid, gid| SetAttr {
        uid: Some(uid),
        gid: Some(gid),
        ..Default::default()
    };
    // chown(2)'s -1: that id stays as it is.
    let a = e.fs.setattr(&ROOT, &f, &set(1234, u32::MAX)).unwrap();
    assert_eq!((a.uid, a.gid), (1234, 0));
    let a = e.fs.setattr(&ROOT, &f, &set(u32::MAX, 5678)).unwrap();
    assert_eq!((a.uid, a.gid), (1234, 5678));
    let a = e.fs.setattr(&ROOT, &f, &set(u32::MAX, u32::MAX)).unwrap();
    assert_eq!((a.uid, a.gid), (1234, 5678));
    // A request claiming to come from uid or gid -1 is refused, not run
    // with the server's own credentials (setfsuid(-1) changes nothing).
    if rustix::process::geteuid().is_root() {
        for ctx in [Ctx::new(u32::MAX, 0), Ctx::new(1000, u32::MAX)] {
            assert_eq!(
                e.fs.mkdir(&ctx, &e.root, b"d", 0o755).err(),
                Some(Errno::EPERM)
            );
        }
        assert!(!e.src.path().join("d").exists());
    }
}

#[test]
fn a_change_of_ctime_alone_moves_it() {
    // chown(f, -1, -1): the kernel asks for a new ctime and nothing else;
    // ext4 and tmpfs move it.
    let e = env("ctime-alone");
    let (f, fh) =
        e.fs.create(&ROOT, &e.root, b"f", 0o644, libc::O_RDWR)
            .unwrap();
    e.fs.release(&f, fh).unwrap();
    let ctime = || {
        let m = std::fs::metadata(e.src.path().join("f")).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let before = ctime();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let set = SetAttr {
        ctime: Some(uvfs_vfs::Timespec { sec: 0, nsec: 0 }),
        kill_suidgid: true,
        ..Default::default()
    };
    e.fs.setattr(&ROOT, &f, &set).unwrap();
    assert!(ctime() > before, "{before:?} -> {:?}", ctime());
    let a = e.fs.getattr(&f).unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (0, 0, 0o644));
}

#[test]
fn creates_belong_to_the_caller() {
    let e = env("owner");
    let ctx = Ctx::new(4321, 8765);
    let d = e.fs.mkdir(&ROOT, &e.root, b"open", 0o777).unwrap();
    let (f, fh) = e.fs.create(&ctx, &d, b"f", 0o600, libc::O_WRONLY).unwrap();
    e.fs.release(&f, fh).unwrap();
    let sub = e.fs.mkdir(&ctx, &d, b"sub", 0o700).unwrap();
    for vp in [&f, &sub] {
        let a = e.fs.getattr(vp).unwrap();
        assert_eq!((a.uid, a.gid), (4321, 8765));
    }
    // The thread is back to the server's credentials afterwards.
    let mine = e.fs.mkdir(&ROOT, &e.root, b"mine", 0o755).unwrap();
    assert_eq!(e.fs.getattr(&mine).unwrap().uid, 0);
}

#[test]
fn inode_numbers_are_backing_numbers_and_stable_across_reclaim() {
    // A tiny vnode limit recycles vnodes all the time.
    let e = env_with("stable", 16, PassthroughConfig::default());
    for i in 0..64 {
        std::fs::write(e.src.path().join(format!("f{i}")), b"x").unwrap();
    }
    for round in 0..2 {
        for i in 0..64 {
            let name = format!("f{i}");
            let vp = e.lookup(&e.root, &name).unwrap();
            let ino = std::fs::metadata(e.src.path().join(&name)).unwrap().ino();
            assert_eq!(e.fs.getattr(&vp).unwrap().ino, ino, "round {round}");
        }
    }
}

#[test]
fn readdirplus_resumes_at_every_cookie() {
    let e = env("rdp");
    for i in 0..300 {
        std::fs::write(e.src.path().join(format!("n{i:03}")), b"").unwrap();
    }
    let fh = e.fs.opendir(&ROOT, &e.root, 0).unwrap();
    let mut seen = Vec::new();
    let mut off = 0;
    loop {
        let mut batch = Vec::new();
        e.fs.readdirplus(&ROOT, &e.root, fh, off, &mut |ent, found| {
            if batch.len() == 7 {
                return true;
            }
            if let Some((_, a)) = found {
                assert_eq!(a.ino, ent.ino);
            }
            batch.push((ent.name.clone(), ent.offset));
            false
        })
        .unwrap();
        if batch.is_empty() {
            break;
        }
        off = batch.last().unwrap().1;
        seen.extend(batch.into_iter().map(|b| b.0));
    }
    e.fs.releasedir(&e.root, fh).unwrap();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 302, "every entry once, . and .. included");
}

#[test]
fn stale_handles_are_errors_not_panics() {
    let e = env("stalefh");
    assert_eq!(
        e.fs.read(&e.root, uvfs_vfs::Fh(999), 0, 1),
        Err(Errno::EBADF)
    );
    assert_eq!(e.fs.release(&e.root, uvfs_vfs::Fh(999)), Err(Errno::EBADF));
    assert_eq!(
        e.fs.open(&ROOT, &e.root, libc::O_WRONLY),
        Err(Errno::EISDIR)
    );
}

/// Backing files, once deleted, that an fd of this process still pins.
#[test]
fn deleted_files_are_not_pinned_by_cached_fds() {
    for no_handles in [false, true] {
        let e = env_with(
            "unlinked",
            1000,
            PassthroughConfig {
                fd_budget: None,
                no_handles,
                no_dir_readahead: false,
                no_atime: false,
                watch: false,
                keep_timeouts: false,
                no_diratime: false,
            },
        );
        let mk = |name: &[u8]| {
            let (f, fh) =
                e.fs.create(&ROOT, &e.root, name, 0o644, libc::O_RDWR)
                    .unwrap();
            e.fs.write(&f, fh, 0, b"data").unwrap();
            (f, fh)
        };
        // What holds a deleted file once the removal's own last close,
        // left to the closing thread (closer.rs), is done: a statfs
        // answers only after it.
        let pinned = || {
            e.fs.statfs().unwrap();
            common::held_deleted(e.src.path())
        };
        // Closed, attributes read through the node's cached fd, unlinked.
        let (a, fh) = mk(b"a");
        e.fs.release(&a, fh).unwrap();
        e.fs.getattr(&a).unwrap();
        e.fs.unlink(&ROOT, &e.root, b"a").unwrap();
        assert_eq!(pinned(), Vec::<String>::new(), "unlink");
        // Open while unlinked: still readable, released at the last close.
        let (d, fh) = mk(b"d");
        e.fs.unlink(&ROOT, &e.root, b"d").unwrap();
        assert_eq!(e.fs.read(&d, fh, 0, 10).unwrap(), b"data");
        assert_eq!(e.fs.getattr(&d).unwrap().nlink, 0);
        e.fs.release(&d, fh).unwrap();
        assert_eq!(pinned(), Vec::<String>::new(), "close");
        // A file with another name keeps its fd (nothing was deleted).
        let (g, fh) = mk(b"g");
        e.fs.release(&g, fh).unwrap();
        e.fs.link(&ROOT, &g, &e.root, b"g2").unwrap();
        e.fs.unlink(&ROOT, &e.root, b"g").unwrap();
        assert_eq!(e.read_all(&g), b"data", "no_handles={no_handles}");
        // Replaced by a rename.
        let (b, fh) = mk(b"b");
        e.fs.release(&b, fh).unwrap();
        e.fs.getattr(&b).unwrap();
        let (c, fh) = mk(b"c");
        e.fs.release(&c, fh).unwrap();
        e.fs.rename(&ROOT, &e.root, b"c", &e.root, b"b", RenameFlags::default())
            .unwrap();
        // A small file renamed over keeps its cached fd while the kernel
        // holds its node (an OPEN racing the rename opens it, as on ext4)
        // and gives it back when the kernel forgets the node, which it
        // does as soon as nothing uses it (through a mount:
        // `a_file_saved_by_rename_in_a_loop_always_opens`).
        // (`g`'s fd shows its removed name too; its file lives on as g2.)
        let held = pinned();
        assert!(
            held.iter().any(|p| p.ends_with("/b (deleted)")),
            "renamed over, while held: {held:?}"
        );
    }
}

#[test]
fn removed_directories_and_fifos_keep_answering_while_the_kernel_holds_them() {
    for no_handles in [false, true] {
        let e = env_with(
            "orphans",
            1000,
            PassthroughConfig {
                fd_budget: None,
                no_handles,
                no_dir_readahead: false,
                no_atime: false,
                watch: false,
                keep_timeouts: false,
                no_diratime: false,
            },
        );
        let d = e.fs.mkdir(&ROOT, &e.root, b"d", 0o755).unwrap();
        let p =
            e.fs.mknod(&ROOT, &e.root, b"p", libc::S_IFIFO | 0o600, 0)
                .unwrap();
        let s = e.fs.symlink(&ROOT, &e.root, b"s", b"target").unwrap();
        let q =
            e.fs.mknod(&ROOT, &e.root, b"q", libc::S_IFIFO | 0o600, 0)
                .unwrap();
        // Looked up again as the kernel would before removing.
        e.lookup(&e.root, "d").unwrap();
        e.fs.rmdir(&ROOT, &e.root, b"d").unwrap();
        e.fs.unlink(&ROOT, &e.root, b"p").unwrap();
        e.fs.unlink(&ROOT, &e.root, b"s").unwrap();
        // A rename over the last name of a FIFO deletes it too.
        let (f, fh) =
            e.fs.create(&ROOT, &e.root, b"f", 0o644, libc::O_WRONLY)
                .unwrap();
        e.fs.release(&f, fh).unwrap();
        e.fs.rename(&ROOT, &e.root, b"f", &e.root, b"q", RenameFlags::default())
            .unwrap();
        for (vp, what) in [
            (&d, "dir"),
            (&p, "fifo"),
            (&s, "symlink"),
            (&q, "renamed-over fifo"),
        ] {
            let a = e.fs.getattr(vp);
            assert_eq!(a.map(|a| a.nlink), Ok(0), "{what}, no_handles={no_handles}");
        }
        let a =
            e.fs.setattr(
                &ROOT,
                &p,
                &SetAttr {
                    mode: Some(0o640),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(a.perm, 0o640);
        // Reading a removed directory is ENOENT, as on ext4 (`iterate_dir`
        // refuses dead directories), not ESTALE.
        let fh = e.fs.opendir(&ROOT, &d, 0).unwrap();
        let r = e.fs.readdir(&d, fh, 0, &mut |_| false);
        assert_eq!(r.err(), Some(Errno::ENOENT), "no_handles={no_handles}");
        e.fs.releasedir(&d, fh).unwrap();
    }
}

#[test]
fn removing_more_directories_than_the_fd_budget_pins_nothing() {
    let e = env_with(
        "orphan-budget",
        1000,
        PassthroughConfig {
            fd_budget: Some(16),
            no_handles: false,
            no_dir_readahead: false,
            no_atime: false,
            watch: false,
            keep_timeouts: false,
            no_diratime: false,
        },
    );
    for i in 0..200 {
        let name = format!("d{i}");
        let d = e.fs.mkdir(&ROOT, &e.root, name.as_bytes(), 0o755).unwrap();
        e.fs.getattr(&d).unwrap();
        e.fs.rmdir(&ROOT, &e.root, name.as_bytes()).unwrap();
        // While referenced (the kernel's hold, here ours) it still answers.
        assert_eq!(e.fs.getattr(&d).unwrap().nlink, 0);
    }
    let used =
        e.fs.stats()
            .into_iter()
            .find(|(n, _, _)| *n == "passthrough.fds.used")
            .unwrap()
            .1;
    assert!(used <= 2, "{used} fds still pinned after the removals");
}

#[test]
fn a_lone_listing_reads_ahead_a_window_of_subdirectories_and_no_further() {
    // prefetch.rs: after a listing, the readahead thread looks up the
    // entries of the first WINDOW (8) subdirectories, and moves on only as
    // the walker lists them; it never touches their access times.
    let e = env("readahead");
    let two_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 86400);
    let times = std::fs::FileTimes::new()
        .set_accessed(two_days_ago)
        .set_modified(two_days_ago);
    for i in 0..12 {
        let d = e.src.path().join(format!("s{i:02}"));
        std::fs::create_dir(&d).unwrap();
        for f in 0..5 {
            std::fs::write(d.join(format!("f{f}")), b"").unwrap();
        }
        std::fs::File::open(&d).unwrap().set_times(times).unwrap();
    }
    let counter = |name: &str| {
        e.fs.stats()
            .into_iter()
            .find(|s| s.0 == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .1
    };
    // Waits until `name` reaches `n`, then gives the thread time to go
    // further (it must not).
    let settles_at = |name: &str, n: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while counter(name) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} stuck at {}",
                counter(name)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(counter(name), n, "{name}");
    };
    let listing = |dir: &uvfs_vfs::VnodeRef| {
        let fh = e.fs.opendir(&ROOT, dir, 0).unwrap();
        let mut names = Vec::new();
        e.fs.readdirplus(&ROOT, dir, fh, 0, &mut |ent, _| {
            names.push(String::from_utf8(ent.name.clone()).unwrap());
            false
        })
        .unwrap();
        e.fs.releasedir(dir, fh).unwrap();
        names.retain(|n| n != "." && n != "..");
        names
    };
    let order = listing(&e.root);
    assert_eq!(order.len(), 12);
    settles_at("passthrough.readahead.dirs", 8);
    assert_eq!(counter("passthrough.readahead.entries"), 8 * 5);
    // The walker lists the first subdirectory: the window moves by one.
    let first = e.lookup(&e.root, &order[0]).unwrap();
    assert_eq!(listing(&first).len(), 5);
    settles_at("passthrough.readahead.dirs", 9);
    assert_eq!(counter("passthrough.readahead.entries"), 9 * 5);
    for name in &order[1..] {
        let md = std::fs::metadata(e.src.path().join(name)).unwrap();
        assert_eq!(
            md.accessed().unwrap(),
            two_days_ago,
            "{name}: read ahead, its access time moved"
        );
    }
}

#[test]
fn a_listing_continued_by_readdir_reads_ahead_the_subdirectories_it_names() {
    // The kernel asks READDIRPLUS only for a listing's first reply and
    // plain READDIR for the rest: the subdirectories named there are
    // read ahead too (prefetch.rs), or a directory of more subdirectories
    // than one reply holds would be read ahead no further than that reply.
    let e = env("readahead-readdir");
    for i in 0..20 {
        let d = e.src.path().join(format!("s{i:02}"));
        std::fs::create_dir(&d).unwrap();
        for f in 0..3 {
            std::fs::write(d.join(format!("f{f}")), b"").unwrap();
        }
    }
    let counter = |name: &str| {
        e.fs.stats()
            .into_iter()
            .find(|s| s.0 == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .1
    };
    let fh = e.fs.opendir(&ROOT, &e.root, 0).unwrap();
    // A first reply with room for four entries: four subdirectories at
    // most, fewer than the window.
    let (mut taken, mut first, mut offset) = (0, 0, 0);
    e.fs.readdirplus(&ROOT, &e.root, fh, 0, &mut |ent, _| {
        if taken == 4 {
            return true;
        }
        taken += 1;
        first += usize::from(!matches!(&ent.name[..], b"." | b".."));
        offset = ent.offset;
        false
    })
    .unwrap();
    // The first reply's subdirectories are read ahead before the rest of
    // the listing comes (the walker has not moved): the rest must not
    // start a window of its own.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while counter("passthrough.readahead.dirs") < first as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "first reply not read ahead"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut rest = 0;
    e.fs.readdir(&e.root, fh, offset, &mut |ent| {
        rest += usize::from(!matches!(&ent.name[..], b"." | b".."));
        false
    })
    .unwrap();
    e.fs.releasedir(&e.root, fh).unwrap();
    assert_eq!(
        first + rest,
        20,
        "{first} named by READDIRPLUS, {rest} by READDIR"
    );
    // The window (8 subdirectories) is filled from both replies.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while counter("passthrough.readahead.dirs") < 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "read ahead {} subdirectories of 8",
            counter("passthrough.readahead.dirs")
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        counter("passthrough.readahead.dirs"),
        8,
        "no further than the window"
    );
    assert_eq!(counter("passthrough.readahead.entries"), 8 * 3);
}
