//! A passthrough applies its mount's atime rule to the source, not the
//! source mount's, at mount and after `mount -o remount` (fstests'
//! generic/003 on a passthrough). The source here is a tmpfs mounted
//! `relatime`: reading through a `strictatime` uvfs mount must move an
//! atime that is after the file's last change (which relatime leaves), a
//! `noatime` one must move none, and a `relatime` one only one not after
//! the last change. The server's reads move the source's atimes by the
//! rule of the mount they were opened on, so these hold only if the
//! passthrough opens on a clone of the source's mount set to the uvfs
//! mount's rule. With kernel I/O (the kernel reads the backing files) and
//! without (`--server-io`: reads served from the page cache reach no
//! server). Skipped (with a message) where mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A tmpfs mounted `relatime` on `scratch/src`, unmounted (and `scratch`
/// removed) on drop.
struct RelatimeTmpfs(PathBuf);

impl RelatimeTmpfs {
    fn mount(scratch: &Path) -> RelatimeTmpfs {
        let dir = scratch.join("src");
        fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "relatime,size=4m", "uvfs-atime-src"])
            .arg(&dir)
            .output()
            .unwrap();
        let guard = RelatimeTmpfs(scratch.to_path_buf());
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        guard
    }
}

impl Drop for RelatimeTmpfs {
    fn drop(&mut self) {
        // The uvfs server holds the source until it has exited, a moment
        // after its mount is gone: wait for it, then detach regardless.
        let src = self.0.join("src");
        for _ in 0..100 {
            let out = Command::new("umount").arg(&src).output();
            if out.is_ok_and(|o| o.status.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("umount").arg("-l").arg(&src).output();
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Sets `p`'s atime to `t` and returns it as stat shows it.
fn set_atime(p: &Path, t: SystemTime) -> i64 {
    let f = fs::File::open(p).unwrap();
    f.set_times(fs::FileTimes::new().set_accessed(t)).unwrap();
    fs::metadata(p).unwrap().atime()
}

/// An atime an hour ahead: after the last change and not a day old, so
/// that relatime leaves it and only strictatime moves it.
fn future() -> SystemTime {
    SystemTime::now() + Duration::from_secs(3600)
}

/// An atime before the last change: relatime and strictatime move it.
fn past() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1 << 30)
}

/// Whether reading `mnt`'s `f` (a new open, as `cat` does) moves the
/// atime of `src`'s `f` from `t`.
fn read_moves(mnt: &Path, src: &Path, t: SystemTime) -> bool {
    let was = set_atime(&src.join("f"), t);
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"data");
    fs::metadata(src.join("f")).unwrap().atime() != was
}

/// Whether listing `mnt`'s `d` moves the atime of `src`'s `d` from `t`.
fn listing_moves(mnt: &Path, src: &Path, t: SystemTime) -> bool {
    let was = set_atime(&src.join("d"), t);
    assert_eq!(fs::read_dir(mnt.join("d")).unwrap().count(), 0);
    fs::metadata(src.join("d")).unwrap().atime() != was
}

fn check(tag: &str, extra: &[&str]) {
    let scratch = std::env::temp_dir().join(format!("uvfs-cli-mount-{tag}-{}", std::process::id()));
    let _src = RelatimeTmpfs::mount(&scratch);
    let mut args = vec!["--source", "src", "-o", "strictatime"];
    args.extend_from_slice(extra);
    let m = Mounted::new(tag, &args);
    let src = m.src();
    let helper = m.scratch.join("mount.fuse.uvfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_uvfs"), &helper).unwrap();
    let remount = |opts: &str| {
        let out = Command::new(&helper)
            .args([src.to_str().unwrap(), m.mnt.to_str().unwrap(), "-o"])
            .arg(format!("remount,{opts}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{opts}: {out:?}");
        assert!(out.stderr.is_empty(), "{opts}: {out:?}");
    };
    fs::write(m.mnt.join("f"), b"data").unwrap();
    fs::create_dir(m.mnt.join("d")).unwrap();
    // strictatime (mounted so) over a relatime source: every read moves
    // the atime, the file's pages cached or not (generic/003's third read).
    for i in 0..3 {
        assert!(
            read_moves(&m.mnt, &src, future()),
            "{tag}: strictatime: read {i} left the atime"
        );
    }
    assert!(
        listing_moves(&m.mnt, &src, future()),
        "{tag}: strictatime: a listing left the atime"
    );
    // noatime: nothing moves, not even what relatime would move.
    remount("noatime");
    assert!(
        !read_moves(&m.mnt, &src, past()),
        "{tag}: noatime: a read moved the atime"
    );
    assert!(
        !listing_moves(&m.mnt, &src, past()),
        "{tag}: noatime: a listing moved the atime"
    );
    // relatime, the source's own rule: a past atime moves, a future one
    // stays.
    remount("relatime");
    assert!(read_moves(&m.mnt, &src, past()), "{tag}: relatime: past");
    assert!(
        !read_moves(&m.mnt, &src, future()),
        "{tag}: relatime: a future atime moved"
    );
    // strictatime again, by a remount this time.
    remount("strictatime,nodiratime");
    assert!(
        read_moves(&m.mnt, &src, future()),
        "{tag}: strictatime after a remount: a read left the atime"
    );
    assert!(
        !listing_moves(&m.mnt, &src, past()),
        "{tag}: nodiratime: a listing moved the atime"
    );
}

#[test]
fn passthrough_atime_follows_its_mount_not_the_sources() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    check("remount-atime-pt", &[]);
    check("remount-atime-pt-server-io", &["--server-io"]);
}
