//! `uvfs mount`'s default kernel cache timeouts, through the real binary:
//! memfs lets the kernel keep names and attributes (every change passes
//! through it), a passthrough lets the host's changes show within about a
//! second. Skipped (with a message) where mounting is not possible.

mod common;

use common::can_mount;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Longer than the one-second timeout memfs had, and than a passthrough's.
const PAST_A_SECOND: Duration = Duration::from_millis(1500);

/// A `uvfs mount` of its own, unmounted (and its directories removed) on
/// drop, so a failing assertion leaves nothing mounted.
struct Mounted {
    mnt: PathBuf,
    scratch: PathBuf,
}

impl Mounted {
    fn new(tag: &str, args: &[&str]) -> Mounted {
        let scratch =
            std::env::temp_dir().join(format!("uvfs-mount-defaults-{tag}-{}", std::process::id()));
        let mnt = scratch.join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        fs::create_dir_all(scratch.join("src")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
            .arg("mount")
            .args(args)
            .arg(&mnt)
            .current_dir(&scratch)
            .output()
            .unwrap();
        let m = Mounted { mnt, scratch };
        assert!(
            out.status.success(),
            "uvfs mount {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        m
    }

    fn src(&self) -> PathBuf {
        self.scratch.join("src")
    }

    /// The server's request counter for `op`.
    fn requests(&self, op: &str) -> u64 {
        let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
            .args(["stat", "--json"])
            .arg(&self.mnt)
            .output()
            .unwrap();
        assert!(out.status.success(), "uvfs stat: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let key = format!("fuse.requests.op.{op}");
        v["counters"][&key]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {key} in {v}"))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = fs::remove_dir_all(&self.scratch);
    }
}

fn stat_all(dir: &Path, n: usize) {
    for i in 0..n {
        fs::symlink_metadata(dir.join(format!("f{i}"))).unwrap();
    }
}

#[test]
fn memfs_keeps_the_kernels_caches_past_a_second() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("memfs", &[]);
    let dir = m.mnt.join("d");
    fs::create_dir(&dir).unwrap();
    for i in 0..50 {
        fs::write(dir.join(format!("f{i}")), b"x").unwrap();
    }
    stat_all(&dir, 50);
    let (lookups, getattrs) = (m.requests("lookup"), m.requests("getattr"));
    std::thread::sleep(PAST_A_SECOND);
    stat_all(&dir, 50);
    // The same 51 names and attributes, a second and a half later: with
    // the old one-second timeouts each was asked again (51 LOOKUPs).
    assert_eq!(m.requests("lookup"), lookups, "names asked again");
    assert_eq!(m.requests("getattr"), getattrs, "attributes asked again");
}

#[test]
fn passthrough_shows_the_hosts_changes_within_a_second_or_so() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("pt", &["--source", "src"]);
    let src = m.src();
    fs::write(src.join("a"), b"1").unwrap();
    fs::write(src.join("grows"), b"1").unwrap();
    assert_eq!(fs::symlink_metadata(m.mnt.join("grows")).unwrap().len(), 1);
    assert!(m.mnt.join("a").exists());
    // Behind the kernel's back: the mount's cached name and size go stale.
    fs::rename(src.join("a"), src.join("b")).unwrap();
    fs::write(src.join("grows"), b"12345").unwrap();
    std::thread::sleep(PAST_A_SECOND);
    assert_eq!(fs::symlink_metadata(m.mnt.join("grows")).unwrap().len(), 5);
    assert!(!m.mnt.join("a").exists(), "the host renamed a away");
    assert!(m.mnt.join("b").exists());
}
