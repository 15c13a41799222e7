//! The backing tree changing behind the server's back, backing errors,
//! and the fd budget under thousands of files.

mod common;

use common::{budgeted, env, env_with, ROOT};
use uvfs_passthrough::PassthroughConfig;
use uvfs_vfs::{Ctx, Errno, FileLock, FileSystem, VType, VnodeRef, LOCK_TO_EOF};

#[test]
fn file_removed_behind_our_back() {
    let e = env("gone");
    std::fs::write(e.src.path().join("f"), b"x").unwrap();
    let f = e.lookup(&e.root, "f").unwrap();
    std::fs::remove_file(e.src.path().join("f")).unwrap();
    // With its fd cached: no links and not open through us -> ESTALE.
    assert_eq!(e.fs.getattr(&f).err(), Some(Errno::ESTALE));
    // Without it: the handle no longer opens -> ESTALE.
    e.fs.drop_idle_fds();
    assert_eq!(e.fs.getattr(&f).err(), Some(Errno::ESTALE));
    assert_eq!(
        e.fs.open(&ROOT, &f, libc::O_RDONLY).err(),
        Some(Errno::ESTALE)
    );
    assert_eq!(e.lookup(&e.root, "f").err(), Some(Errno::ENOENT));
}

#[test]
fn an_open_that_lost_the_race_with_our_own_unlink_finds_no_file() {
    // The kernel resolved the name, then the mount removed the file before
    // the OPEN arrived: the open comes after the removal and, as on ext4,
    // finds no file. (ESTALE would have the kernel look up and open once
    // more, and a second such race reached the caller as ESTALE.)
    let e = env("raced");
    // Both made first: neither can take the other's inode number.
    std::fs::write(e.src.path().join("f"), b"x").unwrap();
    std::fs::write(e.src.path().join("g"), b"y").unwrap();
    let f = e.lookup(&e.root, "f").unwrap();
    let g = e.lookup(&e.root, "g").unwrap();
    e.fs.unlink(&ROOT, &e.root, b"f").unwrap();
    assert_eq!(
        e.fs.open(&ROOT, &f, libc::O_RDONLY).err(),
        Some(Errno::ENOENT)
    );
    // Removed behind our back instead: ESTALE, so the kernel looks again.
    std::fs::remove_file(e.src.path().join("g")).unwrap();
    e.fs.drop_idle_fds();
    assert_eq!(
        e.fs.open(&ROOT, &g, libc::O_RDONLY).err(),
        Some(Errno::ESTALE)
    );
}

#[test]
fn an_open_that_lost_the_race_with_our_own_rename_over_the_name_looks_again() {
    // The kernel resolved the name, then the mount renamed another file
    // over it before the OPEN arrived (a save by rename, done in a loop):
    // the name still leads to a file, so the kernel is to look it up again
    // (ESTALE) and open that one; ENOENT would fail the caller's open of a
    // name that never stopped existing.
    let e = env("raced-rename");
    std::fs::write(e.src.path().join("f"), b"old").unwrap();
    std::fs::write(e.src.path().join("f.tmp"), b"new").unwrap();
    let f = e.lookup(&e.root, "f").unwrap();
    e.fs.rename(
        &ROOT,
        &e.root,
        b"f.tmp",
        &e.root,
        b"f",
        uvfs_vfs::RenameFlags::default(),
    )
    .unwrap();
    e.fs.drop_idle_fds();
    assert_eq!(
        e.fs.open(&ROOT, &f, libc::O_RDONLY).err(),
        Some(Errno::ESTALE)
    );
    // Looked up again: the new file, which opens.
    let again = e.lookup(&e.root, "f").unwrap();
    let fh = e.fs.open(&ROOT, &again, libc::O_RDONLY).unwrap();
    e.fs.release(&again, fh).unwrap();
    // A file the mount used just before (its fd still cached) is opened
    // as it was when the name was resolved, as on ext4: the old contents.
    std::fs::write(e.src.path().join("f.tmp"), b"newer").unwrap();
    e.fs.rename(
        &ROOT,
        &e.root,
        b"f.tmp",
        &e.root,
        b"f",
        uvfs_vfs::RenameFlags::default(),
    )
    .unwrap();
    let fh = e.fs.open(&ROOT, &again, libc::O_RDONLY).unwrap();
    assert_eq!(e.fs.read(&again, fh, 0, 16).unwrap(), b"new");
    e.fs.release(&again, fh).unwrap();
}

#[test]
fn open_unlinked_file_keeps_working() {
    let e = env("unlinked");
    let (f, fh) =
        e.fs.create(&ROOT, &e.root, b"f", 0o644, libc::O_RDWR)
            .unwrap();
    e.fs.unlink(&ROOT, &e.root, b"f").unwrap();
    e.fs.drop_idle_fds();
    assert_eq!(e.fs.write(&f, fh, 0, b"abc").unwrap(), 3);
    let a = e.fs.getattr(&f).unwrap();
    assert_eq!((a.nlink, a.size), (0, 3));
    e.fs.release(&f, fh).unwrap();
}

#[test]
fn directory_replaced_by_a_file() {
    let e = env("replaced");
    std::fs::create_dir(e.src.path().join("d")).unwrap();
    std::fs::write(e.src.path().join("d/x"), b"").unwrap();
    let d = e.lookup(&e.root, "d").unwrap();
    assert!(e.lookup(&d, "x").is_ok());
    std::fs::remove_dir_all(e.src.path().join("d")).unwrap();
    std::fs::write(e.src.path().join("d"), b"now a file").unwrap();
    // The old directory: gone (cached fd of a removed directory), then
    // stale once its fd was given back.
    assert_eq!(e.lookup(&d, "x").err(), Some(Errno::ENOENT));
    e.fs.drop_idle_fds();
    assert_eq!(e.lookup(&d, "x").err(), Some(Errno::ESTALE));
    // The new name is a file, whatever inode number it got.
    let f = e.lookup(&e.root, "d").unwrap();
    assert_eq!(e.fs.getattr(&f).unwrap().kind, VType::Reg);
    assert_eq!(e.lookup(&f, "x").err(), Some(Errno::ENOTDIR));
    assert_eq!(e.read_all(&f), b"now a file");
}

#[test]
fn backing_permission_errors_pass_through() {
    let e = env("eacces");
    let d = e.fs.mkdir(&ROOT, &e.root, b"ro", 0o755).unwrap();
    // A user without write permission on the backing directory (the
    // kernel's cached attributes may say otherwise) gets EACCES.
    let user = Ctx::new(4321, 4321);
    assert_eq!(
        e.fs.create(&user, &d, b"f", 0o644, libc::O_WRONLY).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(
        e.fs.mkdir(&user, &d, b"s", 0o755).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(e.lookup(&d, "f").err(), Some(Errno::ENOENT));
}

#[test]
fn fd_budget_is_never_exceeded_with_thousands_of_files() {
    const BUDGET: usize = 16;
    let e = env_with(
        "budget",
        1 << 16,
        PassthroughConfig {
            fd_budget: Some(BUDGET),
            no_handles: false,
            no_dir_readahead: false,
            no_atime: false,
            watch: false,
            keep_timeouts: false,
            no_diratime: false,
        },
    );
    for d in 0..10 {
        let dir = e.src.path().join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..300 {
            std::fs::write(dir.join(format!("f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    // Keep every vnode (as the kernel would, with lookup references).
    let mut held = Vec::new();
    for d in 0..10 {
        let dir = e.lookup(&e.root, &format!("d{d}")).unwrap();
        for f in 0..300 {
            let vp = e.lookup(&dir, &format!("f{f}")).unwrap();
            held.push(vp.hold());
        }
        held.push(dir.hold());
    }
    assert!(e.fs.pool().max_used() <= BUDGET);
    // Every node is still usable without an fd of its own.
    for (i, h) in held.iter().enumerate().step_by(97) {
        let vp = h.get().unwrap();
        let a = e.fs.getattr(&vp).unwrap();
        if a.kind == VType::Reg {
            assert_eq!(e.read_all(&vp).len() as u64, a.size, "node {i}");
        }
    }
    // Open files count against the budget; past their share, idle ones
    // give their fds back (`park.rs`), so every file opens, and each
    // handle still reads its own file.
    let files: Vec<VnodeRef> = held
        .iter()
        .map(|h| h.get().unwrap())
        .filter(|vp| e.fs.getattr(vp).unwrap().kind == VType::Reg)
        .collect();
    let fhs: Vec<(VnodeRef, uvfs_vfs::Fh)> = files
        .iter()
        .map(|vp| (vp.clone(), e.fs.open(&ROOT, vp, libc::O_RDONLY).unwrap()))
        .collect();
    assert_eq!(fhs.len(), 3000);
    assert!(e.fs.pool().open_files() <= BUDGET - e.fs.pool().name_reserve());
    for (vp, fh) in fhs.iter().step_by(97) {
        let size = e.fs.getattr(vp).unwrap().size;
        assert_eq!(e.fs.read(vp, *fh, 0, 64).unwrap().len() as u64, size);
    }
    assert!(e.fs.pool().max_used() <= BUDGET);
    // The process itself holds no more fds on the source than the budget
    // (handles' mount fd included), with the budget spent.
    let on_source = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.starts_with(e.src.path()))
        .count();
    assert!(
        on_source <= BUDGET,
        "{on_source} fds on the source, budget {BUDGET}"
    );
    for (vp, fh) in fhs {
        e.fs.release(&vp, fh).unwrap();
    }
    assert!(e.fs.getattr(&held[500].get().unwrap()).is_ok());
    assert!(e.fs.pool().max_used() <= BUDGET);
    assert_eq!(e.fs.pool().open_files(), 0);
}

#[test]
fn open_files_leave_lookups_their_share_of_the_budget() {
    const BUDGET: usize = 64;
    let e = env_with(
        "share",
        1 << 12,
        PassthroughConfig {
            fd_budget: Some(BUDGET),
            ..PassthroughConfig::default()
        },
    );
    for d in 0..8 {
        let dir = e.src.path().join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..8 {
            std::fs::write(dir.join(format!("f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    // Callers open files until the mount refuses: EMFILE, as a caller
    // filling its own table meets (fdpool.rs, "Open files' share"). Each
    // holds a `flock` lock, on its own description, so none can give its
    // fd back to make room (`park.rs`).
    let many = e.src.path().join("many");
    std::fs::create_dir(&many).unwrap();
    for f in 0..BUDGET {
        std::fs::write(many.join(format!("f{f}")), b"x").unwrap();
    }
    let many = e.lookup(&e.root, "many").unwrap();
    let mut fhs = Vec::new();
    let err = loop {
        let vp = e.lookup(&many, &format!("f{}", fhs.len())).unwrap();
        match e.fs.open(&ROOT, &vp, libc::O_RDONLY) {
            Ok(fh) => {
                let owner = fhs.len() as u64 + 1;
                e.fs.setlk(&vp, fh, owner, &flock_lock(libc::F_RDLCK), true)
                    .unwrap();
                fhs.push((vp, fh));
            }
            Err(err) => break err,
        }
    };
    assert_eq!(err, Errno::EMFILE);
    let reserve = e.fs.pool().name_reserve();
    assert_eq!(fhs.len(), BUDGET - reserve);
    // Everyone else still looks up, stats and lists: names never seen,
    // in directories whose fds are not cached.
    for d in 1..8 {
        let dir = e.lookup(&e.root, &format!("d{d}")).unwrap();
        assert_eq!(e.names(&dir).len(), 8 + 2);
        for f in 0..8 {
            let vp = e.lookup(&dir, &format!("f{f}")).unwrap();
            assert_eq!(e.fs.getattr(&vp).unwrap().size, 3);
        }
    }
    assert!(e.fs.pool().max_used() <= BUDGET);
    // A file none of these opened, and one of them with other flags.
    let other = e.lookup(&e.lookup(&e.root, "d0").unwrap(), "f0").unwrap();
    assert_eq!(
        e.fs.open(&ROOT, &other, libc::O_RDONLY).err(),
        Some(Errno::EMFILE)
    );
    let (vp, _) = &fhs[0];
    assert_eq!(
        e.fs.open(&ROOT, vp, libc::O_RDWR).err(),
        Some(Errno::EMFILE)
    );
    for (vp, fh) in fhs {
        e.fs.release(&vp, fh).unwrap();
    }
    // Room again.
    let fh = e.fs.open(&ROOT, &other, libc::O_RDONLY).unwrap();
    e.fs.release(&other, fh).unwrap();
}

#[test]
fn fds_the_server_reserves_come_out_of_the_budget() {
    const BUDGET: usize = 8;
    // Without handles: open files keep their fds (`park.rs`).
    let e = env_with(
        "reserve",
        4096,
        PassthroughConfig {
            fd_budget: Some(BUDGET),
            no_handles: true,
            no_dir_readahead: false,
            no_atime: false,
            watch: false,
            keep_timeouts: false,
            no_diratime: false,
        },
    );
    std::fs::write(e.src.path().join("f"), b"x").unwrap();
    for f in 0..BUDGET {
        std::fs::write(e.src.path().join(format!("o{f}")), b"x").unwrap();
    }
    // Its cached O_PATH fd is one the budget may take back.
    let _f = e.lookup(&e.root, "f").unwrap();
    let used = e.fs.pool().used();
    let r = e.fs.reserve_fds(2).expect("room for two");
    assert_eq!((r.len(), e.fs.pool().used()), (2, used + 2));
    drop(r);
    assert_eq!(e.fs.pool().used(), used);
    // Idle cached fds make room; open files and reservations do not: once
    // the budget is all of those, nothing more is reserved.
    let mut fhs = Vec::new();
    loop {
        let vp = e.lookup(&e.root, &format!("o{}", fhs.len())).unwrap();
        match e.fs.open(&ROOT, &vp, libc::O_RDONLY) {
            Ok(fh) => fhs.push((vp, fh)),
            Err(_) => break,
        }
    }
    let mut held = Vec::new();
    while let Some(r) = e.fs.reserve_fds(1) {
        held.push(r);
    }
    assert!(!held.is_empty(), "the cached O_PATH fds make room");
    assert_eq!(e.fs.pool().used(), BUDGET);
    // One slot free: two are refused, all or none.
    drop(held.pop());
    assert!(e.fs.reserve_fds(2).is_none());
    assert_eq!(e.fs.pool().used(), BUDGET - 1);
    assert_eq!(e.fs.reserve_fds(1).map(|r| r.len()), Some(1));
    drop(held);
    for (vp, fh) in fhs {
        e.fs.release(&vp, fh).unwrap();
    }
    assert_eq!(e.fs.pool().open_files(), 0);
    assert!(e.fs.pool().max_used() <= BUDGET);
}

#[test]
fn fallback_without_handles_follows_renames() {
    let e = env_with(
        "nohandles",
        4096,
        PassthroughConfig {
            fd_budget: Some(8),
            no_handles: true,
            no_dir_readahead: false,
            no_atime: false,
            watch: false,
            keep_timeouts: false,
            no_diratime: false,
        },
    );
    let a = e.fs.mkdir(&ROOT, &e.root, b"a", 0o755).unwrap();
    let b = e.fs.mkdir(&ROOT, &a, b"b", 0o755).unwrap();
    let (f, fh) = e.fs.create(&ROOT, &b, b"f", 0o644, libc::O_WRONLY).unwrap();
    e.fs.write(&f, fh, 0, b"deep").unwrap();
    e.fs.release(&f, fh).unwrap();
    e.fs.rename(&ROOT, &e.root, b"a", &e.root, b"z", Default::default())
        .unwrap();
    e.fs.drop_idle_fds();
    assert_eq!(e.read_all(&f), b"deep");
    assert_eq!(e.fs.generation(&f), 0);
    // Removed behind our back: the fallback finds nothing -> ESTALE.
    std::fs::remove_file(e.src.path().join("z/b/f")).unwrap();
    e.fs.drop_idle_fds();
    assert_eq!(e.fs.getattr(&f).err(), Some(Errno::ESTALE));
}

#[test]
fn a_budget_beyond_the_fd_limit_is_refused() {
    let src = common::TempDir::new("toobig");
    let with = |budget| {
        let layer = uvfs_vnode::VnodeLayer::new(uvfs_vnode::Config::with_limit(64));
        uvfs_passthrough::PassthroughFs::new(
            layer,
            src.path(),
            PassthroughConfig {
                fd_budget: Some(budget),
                no_handles: false,
                no_dir_readahead: false,
                no_atime: false,
                watch: false,
                keep_timeouts: false,
                no_diratime: false,
            },
        )
    };
    // The limit as a server leaves it (raised to fs.nr_open where this
    // process may).
    assert!(with(uvfs_passthrough::fdpool::MIN_BUDGET).is_ok());
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid rlimit to write to.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
    let hard = rl.rlim_max as usize;
    // The kernel would refuse fds the pool believes it has: refused up
    // front, with the limit named.
    let Err(err) = with(hard) else {
        panic!("a budget of the whole fd limit was accepted");
    };
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains(&hard.to_string()), "{err}");
    // What fits is served.
    let most = uvfs_passthrough::fdpool::FdPool::max_budget(hard as u64);
    assert!(most < hard);
    assert_eq!(with(most).unwrap().pool().budget(), most);
}

#[test]
fn a_nowait_read_answers_eagain_until_the_data_is_cached() {
    use std::os::unix::io::AsRawFd;
    let e = env("nowait");
    let data: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    let path = e.src.path().join("f");
    std::fs::write(&path, &data).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    f.sync_all().unwrap();
    let vp = e.lookup(&e.root, "f").unwrap();
    let fh = e.fs.open(&ROOT, &vp, libc::O_RDONLY).unwrap();
    // Clean pages of a file nobody maps are dropped from the page cache,
    // except one something holds for a moment (another CPU's LRU batch, a
    // writeback completion): a CI run under ThreadSanitizer once read
    // data here. So the pages are dropped again until the precondition
    // holds, a bounded number of times.
    let mut uncached = None;
    for _ in 0..20 {
        // SAFETY: plain integer arguments on an fd we hold.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
        if let Err(err) = e.fs.read_nowait(&vp, fh, 0, 128 * 1024) {
            uncached = Some(err);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        uncached,
        Some(Errno::EAGAIN),
        "uncached data read without waiting (is {:?} on a disk file system?)",
        e.src.path()
    );
    assert_eq!(
        e.fs.read(&vp, fh, 0, 128 * 1024).unwrap(),
        data[..128 * 1024]
    );
    // Cached now (the read above, and what readahead brought with it).
    let got = e.fs.read_nowait(&vp, fh, 4096, 8192).unwrap();
    assert_eq!(got, data[4096..4096 + 8192]);
    // End of file: short, as `read` would be.
    let tail = e.fs.read(&vp, fh, 250 * 1024, 64 * 1024).unwrap();
    assert_eq!(
        e.fs.read_nowait(&vp, fh, 250 * 1024, 64 * 1024).unwrap(),
        tail
    );
    assert_eq!(tail, data[250 * 1024..]);
    e.fs.release(&vp, fh).unwrap();
}

#[test]
fn a_nowait_read_of_a_memory_source_is_served_at_once() {
    // tmpfs refuses RWF_NOWAIT (EOPNOTSUPP) but never waits for a device:
    // its reads must not be sent elsewhere as if they might.
    let shm = std::path::Path::new("/dev/shm");
    assert!(shm.is_dir(), "no /dev/shm (a tmpfs) here");
    let src = common::TempDir::new_in(shm, "nowait-shm");
    let e = common::env_of(src, "nowait-shm", 4096, PassthroughConfig::default());
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 253) as u8).collect();
    std::fs::write(e.src.path().join("f"), &data).unwrap();
    let vp = e.lookup(&e.root, "f").unwrap();
    let fh = e.fs.open(&ROOT, &vp, libc::O_RDONLY).unwrap();
    for _ in 0..2 {
        // (The second time from what the first found out.)
        assert_eq!(
            e.fs.read_nowait(&vp, fh, 1000, 5000).unwrap(),
            data[1000..6000]
        );
    }
    e.fs.release(&vp, fh).unwrap();
}

/// A whole-file `flock` lock of type `typ`.
fn flock_lock(typ: i32) -> FileLock {
    FileLock {
        start: 0,
        end: LOCK_TO_EOF,
        typ,
        pid: 1,
    }
}

#[test]
fn past_the_budget_opens_of_an_open_file_share_its_description() {
    // Its sixteenth, left to lookups, has room for two flock locks'
    // descriptions.
    const BUDGET: usize = 128;
    // Without handles no open file gives its fd back (`park.rs`), so
    // sharing is what lets the opens past the share in.
    let e = env_with(
        "shared",
        4096,
        PassthroughConfig {
            no_handles: true,
            ..budgeted(BUDGET)
        },
    );
    std::fs::write(e.src.path().join("f"), b"0123456789").unwrap();
    std::fs::write(e.src.path().join("g"), b"g").unwrap();
    let f = e.lookup(&e.root, "f").unwrap();
    let g = e.lookup(&e.root, "g").unwrap();
    // Three times the budget: one process may hold one file open as many
    // times as its own table allows (LTP fcntl12).
    let mut fhs = Vec::new();
    for i in 0..BUDGET * 3 {
        let flags = if i % 2 == 0 {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        fhs.push(e.fs.open(&ROOT, &f, flags).unwrap());
    }
    assert!(e.fs.pool().max_used() <= BUDGET);
    assert!(e.fs.pool().open_files() < fhs.len());
    // Every handle reads and writes the file itself.
    let (rw, ro) = (fhs[fhs.len() - 2], fhs[fhs.len() - 1]);
    assert_eq!(e.fs.write(&f, rw, 2, b"ab").unwrap(), 2);
    assert_eq!(e.fs.read(&f, ro, 0, 64).unwrap(), b"01ab456789");
    assert_eq!(e.fs.read(&f, fhs[0], 0, 64).unwrap(), b"01ab456789");
    // Read-only handles do not write, shared or not.
    assert!(e.fs.write(&f, ro, 0, b"x").is_err());
    // Another file, or flags no open of this one has, still meet EMFILE.
    assert_eq!(
        e.fs.open(&ROOT, &g, libc::O_RDONLY).err(),
        Some(Errno::EMFILE)
    );
    let append = libc::O_WRONLY | libc::O_APPEND;
    assert_eq!(e.fs.open(&ROOT, &f, append).err(), Some(Errno::EMFILE));
    // Truncation needs a writable description (Linux truncates even
    // read-only opens).
    let trunc_ro = libc::O_RDONLY | libc::O_TRUNC;
    assert_eq!(e.fs.open(&ROOT, &f, trunc_ro).err(), Some(Errno::EMFILE));
    let t = e.fs.open(&ROOT, &f, libc::O_RDWR | libc::O_TRUNC).unwrap();
    assert_eq!(std::fs::read(e.src.path().join("f")).unwrap(), b"");
    assert_eq!(e.fs.write(&f, t, 0, b"new").unwrap(), 3);
    assert_eq!(e.fs.read(&f, ro, 0, 64).unwrap(), b"new");
    fhs.push(t);
    // flock locks stay each handle's own, though handles share
    // descriptions: a second handle's lock conflicts with the first's,
    // as on separate opens, until the first lets go.
    let (a, b) = (fhs[fhs.len() - 3], fhs[fhs.len() - 4]);
    let wr = flock_lock(libc::F_WRLCK);
    e.fs.setlk(&f, a, 1, &wr, true).unwrap();
    assert_eq!(e.fs.setlk(&f, b, 2, &wr, true).err(), Some(Errno::EAGAIN));
    let outside = std::fs::File::open(e.src.path().join("f")).unwrap();
    let try_outside =
        || rustix::fs::flock(&outside, rustix::fs::FlockOperation::NonBlockingLockShared);
    assert!(try_outside().is_err(), "the lock is on the backing file");
    e.fs.setlk(&f, a, 1, &flock_lock(libc::F_UNLCK), true)
        .unwrap();
    e.fs.setlk(&f, b, 2, &wr, true).unwrap();
    // Released with its handle; the handles sharing its fd go on.
    e.fs.release(&f, b).unwrap();
    fhs.retain(|h| *h != b);
    assert!(try_outside().is_ok(), "released with its handle");
    assert_eq!(e.fs.read(&f, fhs[0], 0, 64).unwrap(), b"new");
    for fh in fhs {
        e.fs.release(&f, fh).unwrap();
    }
    assert_eq!(e.fs.pool().open_files(), 0);
    let fh = e.fs.open(&ROOT, &g, libc::O_RDONLY).unwrap();
    e.fs.release(&g, fh).unwrap();
}

/// A named counter of `uvfs stat`.
fn counter(e: &common::Env, name: &str) -> u64 {
    e.fs.stats()
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, v, _)| v)
        .unwrap()
}

#[test]
fn opens_past_the_fd_cache_open_the_nodes_own_file_by_handle() {
    // More files than the pool caches fds for: once the cache is full, an
    // OPEN of a node without a cached fd opens the file straight by its
    // handle, with the open's own flags. Each must open its own file, with
    // those flags, and a file gone from the source must answer ESTALE.
    let e = env("open-by-handle");
    assert!(e.fs.uses_handles(), "the tests run as root, with handles");
    const FILES: usize = 3 * uvfs_passthrough::fdpool::CACHED_FDS;
    let dir = e.src.path();
    for i in 0..FILES {
        std::fs::write(dir.join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    let nodes: Vec<VnodeRef> = (0..FILES)
        .map(|i| e.lookup(&e.root, &format!("f{i}")).unwrap())
        .collect();
    // Read each, then append to each: every open after the cache filled
    // takes the handle's way.
    for (i, vp) in nodes.iter().enumerate() {
        assert_eq!(e.read_all(vp), format!("file {i}\n").as_bytes());
    }
    let direct = counter(&e, "passthrough.open_by_handle");
    assert!(
        direct >= (FILES - uvfs_passthrough::fdpool::CACHED_FDS) as u64,
        "{direct} opens by handle"
    );
    for vp in &nodes {
        let fh =
            e.fs.open(&ROOT, vp, libc::O_WRONLY | libc::O_APPEND)
                .unwrap();
        assert_eq!(e.fs.write(vp, fh, 0, b"more\n").unwrap(), 5);
        e.fs.release(vp, fh).unwrap();
    }
    for i in 0..FILES {
        let want = format!("file {i}\nmore\n");
        assert_eq!(
            std::fs::read(dir.join(format!("f{i}"))).unwrap(),
            want.as_bytes()
        );
    }
    assert!(counter(&e, "passthrough.open_by_handle") >= direct + FILES as u64 / 2);
    // O_TRUNC is the open's: the file is emptied.
    let last = nodes.last().unwrap();
    let fh =
        e.fs.open(&ROOT, last, libc::O_RDWR | libc::O_TRUNC)
            .unwrap();
    assert_eq!(e.fs.read(last, fh, 0, 64).unwrap(), b"");
    e.fs.release(last, fh).unwrap();
    // Looked up (no fd: a lookup opens none), then removed on the host
    // while the cache is full: the handle opens nothing.
    std::fs::write(dir.join("g"), b"g").unwrap();
    let g = e.lookup(&e.root, "g").unwrap();
    std::fs::remove_file(dir.join("g")).unwrap();
    let before = counter(&e, "passthrough.open_by_handle");
    assert_eq!(
        e.fs.open(&ROOT, &g, libc::O_RDONLY).err(),
        Some(Errno::ESTALE)
    );
    assert_eq!(counter(&e, "passthrough.open_by_handle"), before);
}
