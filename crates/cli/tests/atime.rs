//! The atime mount flags through the real binary: reading, executing and
//! listing leave access times alone under `-o noatime` (directories under
//! `-o nodiratime`), on a memfs and on a passthrough's source, while
//! without them relatime still moves an atime older than the last change.
//! The kernel leaves a FUSE file's atime to its server, so these hold only
//! if the server applies the flags. Skipped (with a message) where
//! mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

/// An atime relatime would move (before the last change), set on `p`.
fn age(p: &Path) {
    let old = fs::FileTimes::new().set_accessed(UNIX_EPOCH + Duration::from_secs(1 << 30));
    fs::File::open(p).unwrap().set_times(old).unwrap();
}

/// Makes a file `f`, a program `prog` and a directory `d` (with one
/// entry) in `dir`, each with an aged atime.
fn fill(dir: &Path) {
    fs::write(dir.join("f"), b"data").unwrap();
    fs::copy("/bin/true", dir.join("prog")).unwrap();
    fs::set_permissions(dir.join("prog"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("d/x"), b"x").unwrap();
    for n in ["f", "prog", "d"] {
        age(&dir.join(n));
    }
}

/// Drops the kernel's cached pages of `p`, so that reading it reaches the
/// server.
fn uncache(p: &Path) {
    let f = fs::File::open(p).unwrap();
    // SAFETY: plain integer arguments on an fd we hold.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise");
}

/// Reads `f`, runs `prog` and lists `d` under `mnt`.
fn use_them(mnt: &Path) {
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"data");
    let st = Command::new(mnt.join("prog")).status().unwrap();
    assert!(st.success(), "{st}");
    assert_eq!(fs::read_dir(mnt.join("d")).unwrap().count(), 1);
}

/// Which of `f`, `prog` and `d` under `dir` have an atime that moved.
fn moved(dir: &Path) -> [bool; 3] {
    ["f", "prog", "d"].map(|n| fs::metadata(dir.join(n)).unwrap().atime() != 1 << 30)
}

/// What a passthrough mounted with `opts` moves on its source.
fn passthrough(opts: &str) -> [bool; 3] {
    let m = Mounted::new(
        &format!("atime-pt-{opts}"),
        &["-o", opts, "--source", "src"],
    );
    fill(&m.src());
    use_them(&m.mnt);
    moved(&m.src())
}

/// What a memfs mounted with `opts` moves.
fn memfs(opts: &str) -> [bool; 3] {
    let m = Mounted::new(&format!("atime-memfs-{opts}"), &["-o", opts]);
    fill(&m.mnt);
    for n in ["f", "prog"] {
        uncache(&m.mnt.join(n));
    }
    use_them(&m.mnt);
    moved(&m.mnt)
}

#[test]
fn noatime_and_nodiratime_keep_atimes() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    for (name, serve) in [
        ("passthrough", passthrough as fn(&str) -> [bool; 3]),
        ("memfs", memfs),
    ] {
        // [file read, program run, directory listed]
        assert_eq!(serve("relatime"), [true, true, true], "{name}: relatime");
        assert_eq!(serve("noatime"), [false, false, false], "{name}: noatime");
        assert_eq!(
            serve("nodiratime"),
            [true, true, false],
            "{name}: nodiratime"
        );
    }
}
