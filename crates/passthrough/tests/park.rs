//! Open files past the fd budget's share: idle ones give their fds back
//! and reopen them when used (`park.rs`).

mod common;

use common::{budgeted, env_with, Env, ROOT};
use std::sync::atomic::Ordering;
use uvfs_vfs::{Errno, FallocMode, Fh, FileLock, FileSystem, VnodeRef, LOCK_TO_EOF};

const BUDGET: usize = 64;
const FILES: usize = 200;

fn flock(typ: i32) -> FileLock {
    FileLock {
        start: 0,
        end: LOCK_TO_EOF,
        typ,
        pid: 1,
    }
}

/// Open files holding no fd now, as `uvfs stat` shows them.
fn parked_now(e: &Env) -> u64 {
    let stats = e.fs.stats();
    let (_, n, _) = stats
        .iter()
        .find(|(k, _, _)| *k == "passthrough.fds.open_files_parked")
        .expect("the gauge");
    *n
}

/// `FILES` files, each holding its own name, each opened read-write.
fn open_all(e: &Env) -> Vec<(VnodeRef, Fh)> {
    (0..FILES)
        .map(|i| {
            let name = format!("f{i}");
            std::fs::write(e.src.path().join(&name), &name).unwrap();
            let vp = e.lookup(&e.root, &name).unwrap();
            let fh = e.fs.open(&ROOT, &vp, libc::O_RDWR).unwrap();
            (vp, fh)
        })
        .collect()
}

#[test]
fn past_the_share_every_file_opens_and_each_handle_keeps_its_file() {
    let e = env_with("park", 4096, budgeted(BUDGET));
    let pool = e.fs.pool();
    // More distinct files than the budget, all open at once (LTP's
    // creat05 fills its own table so).
    let fhs = open_all(&e);
    assert!(pool.counters.parked.load(Ordering::Relaxed) > 0);
    assert!(pool.open_files() <= BUDGET - pool.name_reserve());
    // Every handle holds its fd or is counted parked.
    assert_eq!(pool.open_files() as u64 + parked_now(&e), FILES as u64);
    // Every handle, oldest first (those parked), reads its own file,
    // twice round: each reopened handle parks another.
    for round in 0..2 {
        for (i, (vp, fh)) in fhs.iter().enumerate() {
            let got = e.fs.read(vp, *fh, 0, 64).unwrap();
            assert_eq!(got, format!("f{i}").as_bytes(), "round {round}");
        }
    }
    assert!(pool.counters.unparked.load(Ordering::Relaxed) >= FILES as u64);
    assert!(pool.max_used() <= BUDGET);
    // Names are still looked up: open files stayed within their share.
    std::fs::write(e.src.path().join("late"), b"l").unwrap();
    let late = e.lookup(&e.root, "late").unwrap();
    assert_eq!(e.fs.getattr(&late).unwrap().size, 1);
    // Writes, syncs, allocations and seeks of a parked handle reach its
    // file (the first is parked again by the time the loop ends).
    let (vp, fh) = &fhs[0];
    assert_eq!(e.fs.write(vp, *fh, 2, b"XY").unwrap(), 2);
    e.fs.fsync(vp, *fh, false).unwrap();
    e.fs.fallocate(vp, *fh, FallocMode(0), 0, 8192).unwrap();
    assert_eq!(e.fs.seek_data(vp, *fh, 0, false).unwrap(), 0);
    let on_source = std::fs::read(e.src.path().join("f0")).unwrap();
    assert_eq!(&on_source[..4], b"f0XY");
    assert_eq!(on_source.len(), 8192);
    for (vp, fh) in fhs {
        e.fs.release(&vp, fh).unwrap();
    }
    assert_eq!(pool.open_files(), 0);
    assert_eq!(parked_now(&e), 0);
}

#[test]
fn a_parked_handle_locks_and_outlives_its_last_name() {
    let e = env_with("park-lock", 4096, budgeted(BUDGET));
    let fhs = open_all(&e);
    // Handles opened first were parked to let the last ones in.
    let (vp, fh) = &fhs[1];
    // A flock lock of a parked handle is on the backing file, the
    // handle's own: another description meets it until it goes.
    e.fs.setlk(vp, *fh, 7, &flock(libc::F_WRLCK), true).unwrap();
    let outside = std::fs::File::open(e.src.path().join("f1")).unwrap();
    let try_outside =
        || rustix::fs::flock(&outside, rustix::fs::FlockOperation::NonBlockingLockShared);
    assert!(try_outside().is_err());
    // Held by a handle that cannot be parked now: the others make room.
    for (i, (vp, fh)) in fhs.iter().enumerate().skip(2) {
        assert_eq!(
            e.fs.read(vp, *fh, 0, 64).unwrap(),
            format!("f{i}").as_bytes()
        );
    }
    assert!(try_outside().is_err(), "still held");
    e.fs.setlk(vp, *fh, 7, &flock(libc::F_UNLCK), true).unwrap();
    assert!(try_outside().is_ok());
    // A parked handle whose file loses its last name through the mount
    // gets its fd back first: it reads and writes the nameless file for
    // as long as it stays open, whatever is parked meanwhile.
    let (gone, gone_fh) = &fhs[2];
    e.fs.unlink(&ROOT, &e.root, b"f2").unwrap();
    for (vp, fh) in fhs.iter().skip(3) {
        e.fs.read(vp, *fh, 0, 64).unwrap();
    }
    assert_eq!(e.fs.write(gone, *gone_fh, 0, b"F").unwrap(), 1);
    assert_eq!(e.fs.read(gone, *gone_fh, 0, 64).unwrap(), b"F2");
    for (vp, fh) in fhs {
        e.fs.release(&vp, fh).unwrap();
    }
}

#[test]
fn with_nothing_to_park_opens_past_the_share_are_refused() {
    let e = env_with("park-none", 4096, budgeted(BUDGET));
    let pool = e.fs.pool();
    // Every open holds a lock on its description: none can be parked.
    let mut fhs = Vec::new();
    let err = loop {
        let name = format!("f{}", fhs.len());
        std::fs::write(e.src.path().join(&name), &name).unwrap();
        let vp = e.lookup(&e.root, &name).unwrap();
        match e.fs.open(&ROOT, &vp, libc::O_RDONLY) {
            Ok(fh) => {
                let owner = fhs.len() as u64 + 1;
                e.fs.setlk(&vp, fh, owner, &flock(libc::F_RDLCK), true)
                    .unwrap();
                fhs.push((vp, fh));
            }
            Err(err) => break err,
        }
    };
    assert_eq!(err, Errno::EMFILE);
    assert_eq!(fhs.len(), BUDGET - pool.name_reserve());
    assert_eq!(pool.counters.parked.load(Ordering::Relaxed), 0);
    // One that never locked may be parked: the open passes.
    let (vp, fh) = fhs.pop().unwrap();
    e.fs.setlk(&vp, fh, fhs.len() as u64 + 1, &flock(libc::F_UNLCK), true)
        .unwrap();
    e.fs.release(&vp, fh).unwrap();
    let unlocked = e.fs.open(&ROOT, &vp, libc::O_RDONLY).unwrap();
    let next = e.lookup(&e.root, &format!("f{}", fhs.len() + 1)).unwrap();
    let fh = e.fs.open(&ROOT, &next, libc::O_RDONLY).unwrap();
    assert_eq!(pool.counters.parked.load(Ordering::Relaxed), 1);
    assert_eq!(
        e.fs.read(&vp, unlocked, 0, 64).unwrap(),
        format!("f{}", fhs.len()).as_bytes()
    );
    e.fs.release(&next, fh).unwrap();
    e.fs.release(&vp, unlocked).unwrap();
    for (vp, fh) in fhs {
        e.fs.release(&vp, fh).unwrap();
    }
}

#[test]
fn requests_racing_with_parking_always_find_their_file() {
    let e = env_with("park-race", 4096, budgeted(BUDGET));
    let fhs = open_all(&e);
    let extra: Vec<VnodeRef> = (0..BUDGET)
        .map(|i| {
            let name = format!("x{i}");
            std::fs::write(e.src.path().join(&name), &name).unwrap();
            e.lookup(&e.root, &name).unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        // Readers and syncers go over every handle, parked or not, while
        // an opener keeps the share full, so handles are parked and
        // reopened under their feet.
        for t in 0..2 {
            let (e, fhs) = (&e, &fhs);
            s.spawn(move || {
                for round in 0..5 {
                    for (i, (vp, fh)) in fhs.iter().enumerate().skip(t) {
                        let got = e.fs.read(vp, *fh, 0, 64).unwrap();
                        assert_eq!(got, format!("f{i}").as_bytes(), "round {round}");
                        if i % 7 == 0 {
                            e.fs.fsync(vp, *fh, true).unwrap();
                        }
                    }
                }
            });
        }
        let (e, extra) = (&e, &extra);
        s.spawn(move || {
            for round in 0..10 {
                let open: Vec<Fh> = extra
                    .iter()
                    .map(|vp| e.fs.open(&ROOT, vp, libc::O_RDONLY).unwrap())
                    .collect();
                for ((i, vp), fh) in extra.iter().enumerate().zip(open) {
                    let got = e.fs.read(vp, fh, 0, 64).unwrap();
                    assert_eq!(got, format!("x{i}").as_bytes(), "round {round}");
                    e.fs.release(vp, fh).unwrap();
                }
            }
        });
    });
    let pool = e.fs.pool();
    assert!(pool.max_used() <= BUDGET);
    assert!(pool.counters.unparked.load(Ordering::Relaxed) > 0);
    for (vp, fh) in fhs {
        e.fs.release(&vp, fh).unwrap();
    }
    assert_eq!(pool.open_files(), 0);
    assert_eq!(parked_now(&e), 0);
}
