//! `mount -o remount` with new atime flags reaches a memfs server, and a
//! read the flags say moves the atime reaches memfs even when the kernel
//! holds the file's pages (fstests' generic/003). The kernel moves no
//! FUSE file's atime itself and tells the server of no remount, so both
//! hold only if the helper tells the server and the server has the
//! kernel drop the pages at open. Skipped (with a message) where mounting
//! is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

/// An atime an hour ahead: after mtime and ctime and not a day old, so
/// `relatime` leaves it and only `strictatime` moves it.
fn set_future_atime(p: &Path) -> i64 {
    let t = SystemTime::now() + Duration::from_secs(3600);
    let f = fs::File::open(p).unwrap();
    f.set_times(fs::FileTimes::new().set_accessed(t)).unwrap();
    fs::metadata(p).unwrap().atime()
}

/// Reads `p` and says whether its atime is no longer `was`.
fn read_moves(p: &Path, was: i64) -> bool {
    assert_eq!(fs::read(p).unwrap(), b"data");
    fs::metadata(p).unwrap().atime() != was
}

#[test]
fn remounted_atime_flags_reach_memfs_and_cached_reads() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("remount-atime", &[]);
    let helper = m.scratch.join("mount.fuse.uvfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_uvfs"), &helper).unwrap();
    let remount = |opts: &str| {
        let out = Command::new(&helper)
            .args(["memfs", m.mnt.to_str().unwrap(), "-o"])
            .arg(format!("remount,{opts}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{opts}: {out:?}");
        assert!(out.stderr.is_empty(), "{opts}: {out:?}");
    };
    let f = m.mnt.join("f");
    fs::write(&f, b"data").unwrap();
    // relatime (the default): a future atime stays; the read leaves the
    // file's pages in the kernel's cache.
    let t = set_future_atime(&f);
    assert!(!read_moves(&f, t), "relatime moved a future atime");
    assert!(!read_moves(&f, t), "relatime moved a future atime");
    // strictatime: every read moves it, the pages cached or not.
    remount("strictatime");
    let t = set_future_atime(&f);
    assert!(read_moves(&f, t), "strictatime: a read left the atime");
    let t = set_future_atime(&f);
    assert!(
        read_moves(&f, t),
        "strictatime: a second read left the atime"
    );
    // noatime: none does.
    remount("noatime");
    let t = set_future_atime(&f);
    assert!(!read_moves(&f, t), "noatime: a read moved the atime");
    // Read-only, even with strictatime: none does.
    remount("ro,strictatime");
    assert!(!read_moves(&f, fs::metadata(&f).unwrap().atime()));
    remount("rw,relatime");
    let t = set_future_atime(&f);
    assert!(!read_moves(&f, t), "relatime again moved a future atime");
}
