//! Live upgrade of a passthrough mount: `FileSystem::save` in one file
//! system, `PassthroughFs::restore` in a new one on a new vnode layer.

mod common;

use common::{budgeted, env, env_with, opened_times, Env, TempDir, ROOT};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vfs::{Errno, Fh, FileLock, FileSystem, Keep, Saved, VnodeRef, LOCK_TO_EOF};
use uvfs_vnode::{Config, VnodeLayer};

fn restore(src: &Path, saved: Saved) -> Result<Arc<PassthroughFs>, uvfs_passthrough::RestoreError> {
    restore_with(src, PassthroughConfig::default(), saved)
}

fn restore_with(
    src: &Path,
    cfg: PassthroughConfig,
    saved: Saved,
) -> Result<Arc<PassthroughFs>, uvfs_passthrough::RestoreError> {
    PassthroughFs::restore(VnodeLayer::new(Config::with_limit(4096)), src, cfg, saved)
}

/// A file system serving `src` after a crash, from `base` and `rec`.
fn recover_with(
    src: &Path,
    cfg: PassthroughConfig,
    base: Saved,
    rec: uvfs_vfs::Recovery,
) -> Arc<PassthroughFs> {
    PassthroughFs::recover(
        VnodeLayer::new(Config::with_limit(4096)),
        src,
        cfg,
        base,
        rec,
    )
    .unwrap()
}

/// What `fs` hands over keeping `nodes` and `open`.
fn save(fs: &PassthroughFs, nodes: &[VnodeRef], open: &[(VnodeRef, Fh)]) -> Saved {
    fs.save(&Keep {
        nodes,
        open,
        ahead: None,
    })
    .unwrap()
}

/// The type of the lock another description of `path` would meet on
/// bytes 0..10 (`F_OFD_GETLK` for a write lock).
fn lock_seen(path: &Path) -> i32 {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: `flock` is a plain C struct; all-zero bytes are a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_len = 10;
    // SAFETY: `fl` is a valid, writable `struct flock`; the fd is open.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    i32::from(fl.l_type)
}

fn wrlock(typ: i32) -> FileLock {
    FileLock {
        start: 0,
        end: LOCK_TO_EOF,
        typ,
        pid: 1,
    }
}

/// Lists `dir` through `fh` from `offset`, taking at most `max` entries:
/// (names, offset of the last one taken).
fn list(
    fs: &dyn FileSystem,
    dir: &VnodeRef,
    fh: Fh,
    offset: u64,
    max: usize,
) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    let mut off = offset;
    loop {
        let before = names.len();
        fs.readdir(dir, fh, off, &mut |e| {
            if names.len() == max {
                return true;
            }
            names.push(String::from_utf8_lossy(&e.name).into_owned());
            off = e.offset;
            false
        })
        .unwrap();
        if names.len() == before || names.len() == max {
            return (names, off);
        }
    }
}

#[test]
fn nodes_open_files_locks_and_listings_go_on_in_the_successor() {
    let e = env("ho-main");
    let p = &e.src.path().to_path_buf();
    std::fs::create_dir(p.join("d")).unwrap();
    std::fs::create_dir(p.join("list")).unwrap();
    for i in 0..60 {
        std::fs::write(p.join("list").join(format!("e{i:02}")), b"").unwrap();
    }
    std::fs::write(p.join("d/rw"), b"0123456789").unwrap();
    std::fs::write(p.join("d/log"), b"start\n").unwrap();
    std::fs::write(p.join("gone"), b"soon removed").unwrap();
    std::os::unix::fs::symlink("d/rw", p.join("ln")).unwrap();

    let d = e.lookup(&e.root, "d").unwrap();
    let rw = e.lookup(&d, "rw").unwrap();
    let log = e.lookup(&d, "log").unwrap();
    let ln = e.lookup(&e.root, "ln").unwrap();
    let gone = e.lookup(&e.root, "gone").unwrap();
    let ldir = e.lookup(&e.root, "list").unwrap();

    let rw_fh = e.fs.open(&ROOT, &rw, libc::O_RDWR).unwrap();
    e.fs.setlk(&rw, rw_fh, 0xabc, &wrlock(libc::F_WRLCK), false)
        .unwrap();
    assert_eq!(lock_seen(&p.join("d/rw")), libc::F_WRLCK);
    let log_fh =
        e.fs.open(&ROOT, &log, libc::O_WRONLY | libc::O_APPEND)
            .unwrap();
    let dir_fh = e.fs.opendir(&ROOT, &ldir, 0).unwrap();
    let (first, off) = list(&*e.fs, &ldir, dir_fh, 0, 25);
    assert_eq!(first.len(), 25);

    let nodes = vec![
        e.root.clone(),
        d.clone(),
        rw.clone(),
        log.clone(),
        ln.clone(),
        gone.clone(),
        ldir.clone(),
    ];
    let before: Vec<_> = nodes
        .iter()
        .map(|vp| (e.fs.getattr(vp).unwrap(), e.fs.generation(vp)))
        .collect();
    let open = vec![
        (rw.clone(), rw_fh),
        (log.clone(), log_fh),
        (ldir.clone(), dir_fh),
    ];
    let saved = save(&e.fs, &nodes, &open);
    assert_eq!(saved.format, "uvfs-passthrough/1");
    assert_eq!(saved.fds.len(), 4, "3 open files and 1 lock owner");
    let gone_ino = before[5].0.ino;

    // The predecessor goes away entirely: only the passed fds remain.
    let Env { fs, root, src, .. } = e;
    drop((nodes, open, d, rw, log, ln, gone, ldir, root));
    fs.drop_idle_fds();
    drop(fs);
    std::fs::remove_file(p.join("gone")).unwrap();
    assert_eq!(lock_seen(&p.join("d/rw")), libc::F_WRLCK, "held by the dup");

    let fs = restore(src.path(), saved).unwrap();
    for (a, g) in &before {
        if a.ino == gone_ino {
            assert_eq!(fs.vget(a.ino).err(), Some(Errno::ESTALE), "removed");
            continue;
        }
        let vp = fs.vget(a.ino).unwrap();
        let b = fs.getattr(&vp).unwrap();
        assert_eq!((b.ino, b.kind, b.size), (a.ino, a.kind, a.size));
        // The root's mtime moved with the removal of `gone`.
        if a.ino != before[0].0.ino {
            assert_eq!(b.mtime, a.mtime);
        }
        assert_eq!(fs.generation(&vp), *g);
    }
    let rw = fs.vget(before[2].0.ino).unwrap();
    let log = fs.vget(before[3].0.ino).unwrap();
    let ldir = fs.vget(before[6].0.ino).unwrap();

    // The O_RDWR file: same file, reads and writes at the kernel's offsets.
    assert_eq!(fs.read(&rw, rw_fh, 2, 3).unwrap(), b"234");
    assert_eq!(fs.write(&rw, rw_fh, 4, b"ab").unwrap(), 2);
    assert_eq!(std::fs::read(p.join("d/rw")).unwrap(), b"0123ab6789");
    // The lock: still held, released through the restored handle.
    assert_eq!(lock_seen(&p.join("d/rw")), libc::F_WRLCK);
    fs.setlk(&rw, rw_fh, 0xabc, &wrlock(libc::F_UNLCK), false)
        .unwrap();
    assert_eq!(lock_seen(&p.join("d/rw")), libc::F_UNLCK);
    // The O_APPEND file still appends, whatever the offset asked.
    fs.write(&log, log_fh, 0, b"more\n").unwrap();
    assert_eq!(std::fs::read(p.join("d/log")).unwrap(), b"start\nmore\n");
    // The listing goes on where it stopped: nothing twice, nothing lost.
    let (rest, _) = list(&*fs, &ldir, dir_fh, off, usize::MAX);
    let mut all: Vec<_> = first.into_iter().chain(rest).collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "an entry listed twice");
    let mut want: Vec<String> = (0..60).map(|i| format!("e{i:02}")).collect();
    want.extend([".".into(), "..".into()]);
    want.sort();
    assert_eq!(all, want);
    // New handles do not collide with the handed-over ones.
    let fh = fs.open(&ROOT, &rw, libc::O_RDONLY).unwrap();
    assert!(![rw_fh, log_fh, dir_fh].contains(&fh));
    for (vp, fh) in [(&rw, rw_fh), (&log, log_fh), (&rw, fh)] {
        fs.release(vp, fh).unwrap();
    }
    fs.releasedir(&ldir, dir_fh).unwrap();
    assert_eq!(fs.release(&rw, rw_fh).err(), Some(Errno::EBADF));
}

#[test]
fn an_open_file_removed_through_the_mount_stays_usable() {
    let e = env("ho-unlinked");
    std::fs::write(e.src.path().join("f"), b"data").unwrap();
    let f = e.lookup(&e.root, "f").unwrap();
    let fh = e.fs.open(&ROOT, &f, libc::O_RDWR).unwrap();
    e.fs.unlink(&ROOT, &e.root, b"f").unwrap();
    let ino = e.fs.getattr(&f).unwrap().ino;
    let saved = save(&e.fs, std::slice::from_ref(&f), &[(f.clone(), fh)]);
    let fs = restore(e.src.path(), saved).unwrap();
    let vp = fs.vget(ino).unwrap();
    assert_eq!(fs.read(&vp, fh, 0, 10).unwrap(), b"data");
    assert_eq!(fs.getattr(&vp).unwrap().ino, ino);
    fs.release(&vp, fh).unwrap();
}

#[test]
fn recycled_nodes_handles_still_resolve() {
    let e = env_with("ho-recycled", 64, PassthroughConfig::default());
    let mut ids = Vec::new();
    for i in 0..300 {
        let name = format!("f{i}");
        std::fs::write(e.src.path().join(&name), name.as_bytes()).unwrap();
        ids.push(
            e.fs.getattr(&e.lookup(&e.root, &name).unwrap())
                .unwrap()
                .ino,
        );
    }
    let saved = save(&e.fs, &[], &[]);
    let fs = restore(e.src.path(), saved).unwrap();
    let mut found = 0;
    for (i, id) in ids.iter().enumerate() {
        if let Ok(vp) = fs.vget(*id) {
            found += 1;
            let fh = fs.open(&ROOT, &vp, libc::O_RDONLY).unwrap();
            assert_eq!(
                fs.read(&vp, fh, 0, 100).unwrap(),
                format!("f{i}").as_bytes()
            );
            fs.release(&vp, fh).unwrap();
        }
    }
    // At most 64 vnodes were cached: the others were recycled and remembered.
    assert!(found >= 300 - 64, "{found} of 300 found again");
}

#[test]
fn another_format_a_garbled_state_or_another_source_is_refused() {
    let e = env("ho-refuse");
    let other = TempDir::new("ho-refuse-other");
    std::fs::write(e.src.path().join("f"), b"x").unwrap();
    let f = e.lookup(&e.root, "f").unwrap();
    let fh = e.fs.open(&ROOT, &f, libc::O_RDONLY).unwrap();
    let save = || save(&e.fs, std::slice::from_ref(&f), &[(f.clone(), fh)]);
    let mut s = save();
    s.format = "uvfs-passthrough/3".into();
    assert_eq!(restore(e.src.path(), s).unwrap_err().errno, Errno::EPROTO);
    let mut s = save();
    s.format = "uvfs-memfs/1".into();
    assert_eq!(restore(e.src.path(), s).unwrap_err().errno, Errno::EPROTO);
    let good = save().bytes;
    let garbles: Vec<Vec<u8>> = vec![
        Vec::new(),
        good[..good.len() / 2].to_vec(),
        good[..good.len() - 1].to_vec(),
        [&good[..], &[0]].concat(),
        vec![0xff; good.len()],
        good.iter().map(|b| b ^ 0x5a).collect(),
    ];
    for bytes in garbles {
        let mut s = save();
        s.bytes = bytes.into();
        let err = restore(e.src.path(), s).unwrap_err();
        assert_eq!(err.errno, Errno::EPROTO, "{err}");
    }
    // An fd index beyond the fds passed.
    let mut s = save();
    s.fds.clear();
    assert_eq!(restore(e.src.path(), s).unwrap_err().errno, Errno::EPROTO);
    let err = restore(other.path(), save()).unwrap_err();
    assert_eq!(err.errno, Errno::EXDEV, "{err}");
    assert!(err.to_string().contains("not the directory"), "{err}");
    // Every bit flipped in turn: refused or taken, never a panic.
    let good = save().bytes;
    for i in (0..good.len() * 8).step_by(7) {
        let mut s = save();
        let mut flipped = s.bytes.to_vec();
        flipped[i / 8] ^= 1 << (i % 8);
        s.bytes = flipped.into();
        let _ = restore(e.src.path(), s);
    }
    assert!(restore(e.src.path(), save()).is_ok());
}

#[test]
fn foreign_ids_keep_their_numbers() {
    let e = env("ho-foreign");
    let m = e.src.path().join("m");
    std::fs::create_dir(&m).unwrap();
    let Some(_u) = common::Tmpfs::mount(&m) else {
        eprintln!("skipped: cannot mount tmpfs (not root?)");
        return;
    };
    std::fs::write(m.join("a"), b"A").unwrap();
    std::fs::write(m.join("b"), b"B").unwrap();
    let mdir = e.lookup(&e.root, "m").unwrap();
    let a = e.lookup(&mdir, "a").unwrap();
    let b = e.lookup(&mdir, "b").unwrap();
    let ids: Vec<u64> = [&mdir, &a, &b]
        .iter()
        .map(|vp| e.fs.getattr(vp).unwrap().ino)
        .collect();
    assert!(ids
        .iter()
        .all(|&i| i >= uvfs_passthrough::inodes::FOREIGN_BASE));
    let saved =
        e.fs.save(&Keep {
            nodes: &[mdir.clone(), a.clone()],
            open: &[],
            ahead: None,
        })
        .unwrap();
    let fs = restore(e.src.path(), saved).unwrap();
    // Looked up first in the successor, `b` would take the first foreign
    // id if the numbering had not been handed over.
    let m2 = fs.lookup(&ROOT, &fs.root().unwrap(), b"m").unwrap();
    let b2 = fs.lookup(&ROOT, &m2, b"b").unwrap();
    assert_eq!(fs.getattr(&b2).unwrap().ino, ids[2]);
    drop((m2, b2));
    let a2 = fs.vget(ids[1]).unwrap();
    assert_eq!(fs.getattr(&a2).unwrap().ino, ids[1]);
    let fh = fs.open(&ROOT, &a2, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(&a2, fh, 0, 10).unwrap(), b"A");
    fs.release(&a2, fh).unwrap();
    assert_eq!(fs.getattr(&fs.vget(ids[0]).unwrap()).unwrap().ino, ids[0]);
}

#[test]
fn without_handles_kept_nodes_are_found_by_their_names() {
    let cfg = PassthroughConfig {
        no_handles: true,
        ..Default::default()
    };
    let e = env_with("ho-nohandles", 4096, cfg.clone());
    std::fs::create_dir_all(e.src.path().join("a/b")).unwrap();
    std::fs::write(e.src.path().join("a/b/c"), b"deep").unwrap();
    let a = e.lookup(&e.root, "a").unwrap();
    let b = e.lookup(&a, "b").unwrap();
    let c = e.lookup(&b, "c").unwrap();
    let ids: Vec<u64> = [&a, &b, &c]
        .iter()
        .map(|vp| e.fs.getattr(vp).unwrap().ino)
        .collect();
    let saved =
        e.fs.save(&Keep {
            nodes: &[c.clone(), b.clone(), a.clone()],
            open: &[],
            ahead: None,
        })
        .unwrap();
    let fs = restore_with(e.src.path(), cfg, saved).unwrap();
    // The deepest first: its parents are found on the way.
    let c2 = fs.vget(ids[2]).unwrap();
    let fh = fs.open(&ROOT, &c2, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(&c2, fh, 0, 10).unwrap(), b"deep");
    fs.release(&c2, fh).unwrap();
    assert_eq!(fs.getattr(&fs.vget(ids[0]).unwrap()).unwrap().ino, ids[0]);
    // Renamed on the source meanwhile: the name no longer leads to it.
    std::fs::rename(e.src.path().join("a/b"), e.src.path().join("a/x")).unwrap();
    let fs2 = PassthroughFs::restore(
        VnodeLayer::new(Config::with_limit(4096)),
        e.src.path(),
        PassthroughConfig {
            no_handles: true,
            ..Default::default()
        },
        e.fs.save(&Keep {
            nodes: &[c.clone(), b.clone()],
            open: &[],
            ahead: None,
        })
        .unwrap(),
    )
    .unwrap();
    assert_eq!(fs2.vget(ids[2]).err(), Some(Errno::ESTALE));
}

#[test]
fn a_flock_lock_stays_with_its_open_file() {
    let e = env("ho-flock");
    let path = e.src.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    let f = e.lookup(&e.root, "f").unwrap();
    let fh = e.fs.open(&ROOT, &f, libc::O_RDONLY).unwrap();
    e.fs.setlk(&f, fh, 1, &wrlock(libc::F_WRLCK), true).unwrap();
    let saved = save(&e.fs, std::slice::from_ref(&f), &[(f.clone(), fh)]);
    let ino = e.fs.getattr(&f).unwrap().ino;
    let Env { fs: old, src, .. } = e;
    drop((f, old));
    let other = std::fs::File::open(&path).unwrap();
    let try_lock =
        || rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    assert!(try_lock().is_err(), "held through the passed fd");
    let fs = restore(src.path(), saved).unwrap();
    let f = fs.vget(ino).unwrap();
    fs.setlk(&f, fh, 1, &wrlock(libc::F_UNLCK), true).unwrap();
    assert!(try_lock().is_ok(), "released through the restored handle");
}

#[test]
fn on_ext4_node_ids_resolve_with_no_memory_to_files_of_the_source() {
    let fresh = |src: &Path| {
        PassthroughFs::new(
            VnodeLayer::new(Config::with_limit(4096)),
            src,
            PassthroughConfig::default(),
        )
        .unwrap()
    };
    let fs = fresh(Path::new("/"));
    if !fs.resolves_ids_by_itself() {
        eprintln!("skipped: / is not the root of an ext2/3/4 file system with handles");
        return;
    }
    let dir = TempDir::new("ho-byino");
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata(dir.path()).unwrap().dev() != std::fs::metadata("/").unwrap().dev() {
        eprintln!("skipped: the temp dir is not on the file system of /");
        return;
    }
    let f = dir.path().join("f");
    std::fs::write(&f, b"by inode").unwrap();
    let ino = std::fs::metadata(&f).unwrap().ino();
    // A server that never saw the file finds it by its id alone.
    let vp = fs.vget(ino).unwrap();
    let a = fs.getattr(&vp).unwrap();
    assert_eq!((a.ino, a.size), (ino, 8));
    let fh = fs.open(&ROOT, &vp, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(&vp, fh, 0, 20).unwrap(), b"by inode");
    fs.release(&vp, fh).unwrap();
    // With the generation a lookup gives it (the kernel compares them).
    let walker = fresh(Path::new("/"));
    let mut cur = walker.root().unwrap();
    for c in f.strip_prefix("/").unwrap().components() {
        let name = c.as_os_str().as_encoded_bytes();
        cur = walker.lookup(&ROOT, &cur, name).unwrap();
    }
    assert_eq!(walker.getattr(&cur).unwrap().ino, ino);
    let gen = fs.generation(&vp);
    assert_eq!(walker.generation(&cur), gen);
    // Removed: no server finds it (the number may already be another
    // file's, made by another process: then with another generation,
    // which the kernel refuses).
    drop((vp, cur, fs, walker));
    std::fs::remove_file(&f).unwrap();
    let after = fresh(Path::new("/"));
    match after.vget(ino) {
        Err(e) => assert_eq!(e, Errno::ESTALE),
        Ok(vp) => assert_ne!(after.generation(&vp), gen),
    }
    // A source below its file system's root: ids resolve to files
    // beneath it, and only to those (any file of the file system has a
    // number a made-up handle opens).
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    let inside = src.join("d/e/f");
    std::fs::write(&inside, b"inside").unwrap();
    std::fs::write(&f, b"outside").unwrap();
    let outside_dir = dir.path().join("elsewhere");
    std::fs::create_dir(&outside_dir).unwrap();
    let sub = fresh(&src);
    assert!(sub.resolves_ids_by_itself());
    let vp = sub.vget(std::fs::metadata(&inside).unwrap().ino()).unwrap();
    let fh = sub.open(&ROOT, &vp, libc::O_RDONLY).unwrap();
    assert_eq!(sub.read(&vp, fh, 0, 20).unwrap(), b"inside");
    sub.release(&vp, fh).unwrap();
    let d = src.join("d/e");
    let dvp = sub.vget(std::fs::metadata(&d).unwrap().ino()).unwrap();
    assert_eq!(sub.getattr(&dvp).unwrap().kind, uvfs_vfs::VType::Dir);
    let outside = |p: &Path| sub.vget(std::fs::metadata(p).unwrap().ino()).err();
    assert_eq!(outside(&f), Some(Errno::ESTALE));
    assert_eq!(outside(&outside_dir), Some(Errno::ESTALE));
    // The source's parent, and a sibling whose name extends the source's.
    assert_eq!(outside(dir.path()), Some(Errno::ESTALE));
    let sibling = dir.path().join("src2");
    std::fs::write(&sibling, b"sibling").unwrap();
    assert_eq!(outside(&sibling), Some(Errno::ESTALE));
    let refused = sub
        .stats()
        .into_iter()
        .find(|(n, _, _)| *n == "passthrough.handles.outside_source")
        .map(|(_, v, _)| v);
    assert_eq!(refused, Some(4));
}

/// Records made ahead of the pause (`FileSystem::save_ahead`, requests
/// still served) and the nodes known since, given alone to `save`: the
/// successor finds every one of both, with the identity it has at the
/// pause (a node whose file changed behind its inode number in between
/// is made again).
#[test]
fn nodes_saved_ahead_and_those_known_since_are_all_found_by_the_successor() {
    let e = env("ho-ahead");
    let p = &e.src.path().to_path_buf();
    for i in 0..100 {
        std::fs::write(p.join(format!("a{i}")), vec![b'a'; i]).unwrap();
    }
    for i in 0..10 {
        std::fs::write(p.join(format!("b{i}")), vec![b'b'; 200 + i]).unwrap();
    }
    let mut ahead_nodes = vec![e.root.clone()];
    for i in 0..100 {
        ahead_nodes.push(e.lookup(&e.root, &format!("a{i}")).unwrap());
    }
    let ahead =
        e.fs.save_ahead(&ahead_nodes)
            .unwrap()
            .expect("records ahead");
    // Known since: new nodes, and maybe (where the source reuses inode
    // numbers at once) a node made ahead whose file changed behind its
    // number, which the server does not give again (it was given
    // ahead).
    let mut since = Vec::new();
    for i in 0..10 {
        since.push(e.lookup(&e.root, &format!("b{i}")).unwrap());
    }
    let old_a5 = e.fs.getattr(&ahead_nodes[6]).unwrap().ino;
    std::fs::remove_file(p.join("a5")).unwrap();
    std::fs::write(p.join("z"), vec![b'z'; 777]).unwrap();
    let z = e.lookup(&e.root, "z").unwrap();
    let z_ino = e.fs.getattr(&z).unwrap().ino;
    let a5_reused = z_ino == old_a5;
    if !a5_reused {
        since.push(z.clone());
    }
    let want: Vec<(u64, u64)> = ahead_nodes
        .iter()
        .chain(&since)
        .chain([&z])
        .filter_map(|vp| e.fs.getattr(vp).ok())
        .map(|a| (a.ino, a.size))
        .collect();
    // Something else than what `save_ahead` made is refused.
    let foreign: uvfs_vfs::Ahead = Box::new(5u32);
    let refused = e.fs.save(&Keep {
        nodes: &since,
        open: &[],
        ahead: Some(&foreign),
    });
    assert_eq!(refused.err(), Some(Errno::EINVAL));
    let saved =
        e.fs.save(&Keep {
            nodes: &since,
            open: &[],
            ahead: Some(&ahead),
        })
        .unwrap();
    let Env { fs, root, src, .. } = e;
    drop((ahead_nodes, since, z, root, ahead));
    fs.drop_idle_fds();
    drop(fs);
    let fs = restore(src.path(), saved).unwrap();
    for (ino, size) in &want {
        if *ino == old_a5 && !a5_reused {
            assert_eq!(fs.vget(*ino).err(), Some(Errno::ESTALE), "a5 removed");
            continue;
        }
        let vp = fs.vget(*ino).unwrap_or_else(|e| panic!("inode {ino}: {e}"));
        let got = fs.getattr(&vp).unwrap();
        if *ino == old_a5 {
            assert_eq!(got.size, 777, "z, not a5");
        } else {
            assert_eq!(got.size, *size, "inode {ino}");
        }
    }
    eprintln!("a5's inode number reused by z: {a5_reused}");
}

#[test]
fn handles_sharing_a_description_are_handed_over_sharing_it() {
    const BUDGET: usize = 64;
    let e = env_with("ho-shared", 4096, budgeted(BUDGET));
    let path = e.src.path().join("f");
    // Twice the budget: past the open files' share, opens share
    // descriptions (`open.rs`).
    let (f, fhs) = opened_times(&e, "f", b"shared", BUDGET * 2, libc::O_RDWR);
    e.fs.setlk(&f, fhs[0], 1, &wrlock(libc::F_WRLCK), true)
        .unwrap();
    let open: Vec<(VnodeRef, Fh)> = fhs.iter().map(|fh| (f.clone(), *fh)).collect();
    let saved = save(&e.fs, std::slice::from_ref(&f), &open);
    // A description is sent once, however many handles hold it: what the
    // successor takes fits its budget too.
    assert!(saved.fds.len() < BUDGET, "{} fds sent", saved.fds.len());
    let ino = e.fs.getattr(&f).unwrap().ino;
    let Env { fs: old, src, .. } = e;
    drop((f, old));
    let fs = restore_with(src.path(), budgeted(BUDGET), saved).unwrap();
    let f = fs.vget(ino).unwrap();
    assert!(fs.pool().max_used() <= BUDGET);
    for fh in &fhs {
        assert_eq!(fs.read(&f, *fh, 0, 64).unwrap(), b"shared");
    }
    let other = std::fs::File::open(&path).unwrap();
    let try_lock =
        || rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    assert!(try_lock().is_err(), "the lock was handed over");
    // Each handle's flock locks are its own still.
    let last = *fhs.last().unwrap();
    let wr = wrlock(libc::F_WRLCK);
    assert_eq!(fs.setlk(&f, last, 2, &wr, true).err(), Some(Errno::EAGAIN));
    fs.setlk(&f, fhs[0], 1, &wrlock(libc::F_UNLCK), true)
        .unwrap();
    fs.setlk(&f, last, 2, &wr, true).unwrap();
    fs.release(&f, last).unwrap();
    assert!(try_lock().is_ok(), "released with its handle");
    assert_eq!(fs.write(&f, fhs[1], 0, b"S").unwrap(), 1);
    assert_eq!(std::fs::read(&path).unwrap(), b"Shared");
    for fh in &fhs[..fhs.len() - 1] {
        fs.release(&f, *fh).unwrap();
    }
    assert_eq!(fs.pool().open_files(), 0);
}

#[test]
fn a_crash_recovery_past_the_budget_keeps_every_open_within_it() {
    const BUDGET: usize = 64;
    let e = env_with("ho-recover-shared", 4096, budgeted(BUDGET));
    let path = e.src.path().join("f");
    // What the supervisor holds: the state saved at mount, the journal.
    let base = save(&e.fs, &[], &[]);
    let (f, fhs) = opened_times(&e, "f", b"kept open", BUDGET * 2, libc::O_RDWR);
    let ino = e.fs.getattr(&f).unwrap().ino;
    let record = e.fs.journal_record(ino, Some(&f)).expect("a handle");
    let Env { fs: old, src, .. } = e;
    drop((f, old));
    let rec = uvfs_vfs::Recovery {
        nodes: vec![(ino, record)],
        opens: fhs
            .iter()
            .map(|fh| uvfs_vfs::RecoveredOpen {
                ino,
                fh: *fh,
                flags: libc::O_RDWR,
                dir: false,
            })
            .collect(),
        kept: Vec::new(),
    };
    let fs = recover_with(src.path(), budgeted(BUDGET), base, rec);
    let f = fs.vget(ino).unwrap();
    // Every open file came back, within the budget.
    for fh in &fhs {
        assert_eq!(fs.read(&f, *fh, 0, 64).unwrap(), b"kept open");
    }
    assert!(fs.pool().max_used() <= BUDGET);
    let last = fhs[BUDGET * 2 - 1];
    assert_eq!(fs.write(&f, last, 0, b"K").unwrap(), 1);
    assert_eq!(std::fs::read(&path).unwrap(), b"Kept open");
    // The open files took their share, not the whole budget: names are
    // still looked up, and a handle sharing a description locks on one
    // of its own.
    assert!(fs.pool().open_files() <= BUDGET - fs.pool().name_reserve());
    std::fs::write(src.path().join("new"), b"n").unwrap();
    let new = fs.lookup(&ROOT, &fs.root().unwrap(), b"new").unwrap();
    assert_eq!(fs.getattr(&new).unwrap().size, 1);
    fs.setlk(&f, last, 1, &wrlock(libc::F_WRLCK), true).unwrap();
    let other = std::fs::File::open(&path).unwrap();
    let try_lock = || rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockShared);
    assert!(try_lock().is_err(), "locked on the backing file");
    for fh in &fhs {
        fs.release(&f, *fh).unwrap();
    }
    assert!(try_lock().is_ok(), "released with its handle");
}

/// `n` files, each holding its own name, opened read-write on `e`:
/// past the open files' share, the first ones are parked (`park.rs`).
fn distinct_open(e: &Env, n: usize) -> Vec<(VnodeRef, Fh)> {
    (0..n)
        .map(|i| {
            let name = format!("d{i}");
            std::fs::write(e.src.path().join(&name), &name).unwrap();
            let vp = e.lookup(&e.root, &name).unwrap();
            (vp.clone(), e.fs.open(&ROOT, &vp, libc::O_RDWR).unwrap())
        })
        .collect()
}

#[test]
fn parked_open_files_are_handed_over_parked() {
    const BUDGET: usize = 64;
    let e = env_with("ho-parked", 4096, budgeted(BUDGET));
    let open = distinct_open(&e, BUDGET * 3);
    let nodes: Vec<VnodeRef> = open.iter().map(|(vp, _)| vp.clone()).collect();
    let saved = save(&e.fs, &nodes, &open);
    // Sent without an fd, in the format that says so (builds that know
    // only the first refuse it by its name).
    assert_eq!(saved.format, "uvfs-passthrough/2");
    assert!(saved.fds.len() < BUDGET, "{} fds sent", saved.fds.len());
    let inos: Vec<u64> = nodes.iter().map(|vp| vp.ino()).collect();
    let Env { fs: old, src, .. } = e;
    drop((nodes, old));
    let fs = restore_with(src.path(), budgeted(BUDGET), saved).unwrap();
    // Every handle goes on with its own file, within the budget.
    for (i, ((_, fh), ino)) in open.iter().zip(&inos).enumerate() {
        let vp = fs.vget(*ino).unwrap();
        assert_eq!(
            fs.read(&vp, *fh, 0, 64).unwrap(),
            format!("d{i}").as_bytes()
        );
    }
    let vp = fs.vget(inos[0]).unwrap();
    assert_eq!(fs.write(&vp, open[0].1, 0, b"D").unwrap(), 1);
    assert_eq!(std::fs::read(src.path().join("d0")).unwrap(), b"D0");
    assert!(fs.pool().max_used() <= BUDGET);
    for ((_, fh), ino) in open.iter().zip(&inos) {
        fs.release(&fs.vget(*ino).unwrap(), *fh).unwrap();
    }
    assert_eq!(fs.pool().open_files(), 0);
}

#[test]
fn a_crash_recovery_past_the_budget_parks_open_files() {
    const BUDGET: usize = 64;
    let e = env_with("ho-recover-parked", 4096, budgeted(BUDGET));
    let base = save(&e.fs, &[], &[]);
    let open = distinct_open(&e, BUDGET * 3);
    let mut nodes = Vec::new();
    let mut opens = Vec::new();
    for (vp, fh) in &open {
        let ino = e.fs.getattr(vp).unwrap().ino;
        nodes.push((ino, e.fs.journal_record(ino, Some(vp)).expect("a handle")));
        opens.push(uvfs_vfs::RecoveredOpen {
            ino,
            fh: *fh,
            flags: libc::O_RDWR,
            dir: false,
        });
    }
    nodes.sort_by_key(|(ino, _)| *ino);
    let Env { fs: old, src, .. } = e;
    drop((open, old));
    let rec = uvfs_vfs::Recovery {
        nodes,
        opens: opens.clone(),
        kept: Vec::new(),
    };
    let fs = recover_with(src.path(), budgeted(BUDGET), base, rec);
    // All came back, the open files within their share: names are still
    // looked up.
    assert!(fs.pool().open_files() <= BUDGET - fs.pool().name_reserve());
    std::fs::write(src.path().join("new"), b"n").unwrap();
    let new = fs.lookup(&ROOT, &fs.root().unwrap(), b"new").unwrap();
    assert_eq!(fs.getattr(&new).unwrap().size, 1);
    for (i, o) in opens.iter().enumerate() {
        let vp = fs.vget(o.ino).unwrap();
        assert_eq!(
            fs.read(&vp, o.fh, 0, 64).unwrap(),
            format!("d{i}").as_bytes()
        );
    }
    assert!(fs.pool().max_used() <= BUDGET);
    for o in &opens {
        fs.release(&fs.vget(o.ino).unwrap(), o.fh).unwrap();
    }
    assert_eq!(fs.pool().open_files(), 0);
}
