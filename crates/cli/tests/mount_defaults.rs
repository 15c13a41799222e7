//! `uvfs mount`'s default kernel cache timeouts, through the real binary:
//! memfs lets the kernel keep names and attributes (every change passes
//! through it), an unwatched passthrough (`--no-watch`) lets the host's
//! changes show within about a second (`host_changes.rs` has the watched
//! default). Skipped (with a message) where mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::path::Path;
use std::time::Duration;

/// Longer than the one-second timeout memfs had, and than a passthrough's.
const PAST_A_SECOND: Duration = Duration::from_millis(1500);

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
    let (lookups, getattrs) = (m.requests("lookup"), m.attr_requests());
    std::thread::sleep(PAST_A_SECOND);
    stat_all(&dir, 50);
    // The same 51 names and attributes, a second and a half later: with
    // the old one-second timeouts each was asked again (51 LOOKUPs).
    assert_eq!(m.requests("lookup"), lookups, "names asked again");
    assert_eq!(m.attr_requests(), getattrs, "attributes asked again");
}

#[test]
fn passthrough_shows_the_hosts_changes_within_a_second_or_so() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    // Unwatched: the short timeout is what makes host changes show.
    let m = Mounted::new("pt", &["--source", "src", "--no-watch"]);
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

#[test]
fn a_default_mount_serves_through_io_uring_where_the_kernel_has_it() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    if !Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        eprintln!("skipped: this kernel has no FUSE over io_uring");
        return;
    }
    // Whatever the switch says now: a mount with no options turns it on
    // (as root) and asks for io_uring at its INIT.
    let m = Mounted::new("uring-default", &[]);
    fs::write(m.mnt.join("f"), b"x").unwrap();
    assert_eq!(m.counter("fuse.uring"), 1, "default mount not on io_uring");
    let on = fs::read_to_string("/sys/module/fuse/parameters/enable_uring").unwrap();
    assert_eq!(on.trim(), "Y");
    let d = Mounted::new("uring-dev", &["--transport", "dev"]);
    fs::write(d.mnt.join("f"), b"x").unwrap();
    assert_eq!(
        d.counter("fuse.uring"),
        0,
        "--transport dev asked for io_uring"
    );
    assert_eq!(d.counter("fuse.requests.uring"), 0);
}
