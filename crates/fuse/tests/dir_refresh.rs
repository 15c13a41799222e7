//! The directory refresher (`refresh.rs`): a directory listed through the
//! mount is stat'ed again in the background, so the next `stat` of it is
//! answered by the kernel alone; and the refresher never makes an unmount
//! fail or lets a server unmount what is no longer its mount.

mod common;

use common::{scratch_dir, serve_memfs_with};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use uvfs_fuse::BackgroundMount;

fn scratch() -> Option<PathBuf> {
    scratch_dir("uvfs-refresh-test")
}

/// memfs on `dir` with long cache lifetimes (so nothing expires during a
/// test), refreshing listed directories or not.
fn serve(dir: &Path, refresh: bool) -> BackgroundMount {
    serve_for(dir, refresh, Duration::from_secs(600))
}

fn serve_for(dir: &Path, refresh: bool, ttl: Duration) -> BackgroundMount {
    serve_memfs_with(dir, None, 4096, ttl, refresh)
}

fn counter(m: &BackgroundMount, name: &str) -> u64 {
    m.report(false)["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// lstat as `find` does it (not Rust's statx, which asks for more than
/// the kernel caches here).
fn lstat(p: &Path) {
    // SAFETY: an all-zero stat64 is a valid value of this C struct.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable stat buffer.
    let rc = unsafe { libc::lstat64(cstr(p).as_ptr(), &mut st) };
    assert_eq!(
        rc,
        0,
        "lstat {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// Makes `n` directories with a file each under `root` and lists each.
fn make_and_list(root: &Path, n: usize) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = (0..n).map(|k| root.join(format!("d{k}"))).collect();
    for d in &dirs {
        fs::create_dir(d).unwrap();
        fs::write(d.join("f"), b"x").unwrap();
    }
    for d in &dirs {
        assert_eq!(fs::read_dir(d).unwrap().count(), 1);
    }
    dirs
}

/// Waits (bounded) until the refresher has refreshed `n` directories and
/// has none left to deal with.
fn wait_refreshed(m: &BackgroundMount, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while counter(m, "fuse.refresh.refreshed") < n || counter(m, "fuse.refresh.waiting") > 0 {
        assert!(
            Instant::now() < deadline,
            "refreshed {} of {n} listed directories in 20 s: {}",
            counter(m, "fuse.refresh.refreshed"),
            m.report(false)["counters"]
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_listed_directory_is_then_stat_ed_from_the_kernel_cache() {
    const N: usize = 6;
    for refresh in [false, true] {
        let Some(dir) = scratch() else { return };
        let m = serve(&dir, refresh);
        let dirs = make_and_list(&dir, N);
        let lookups = counter(&m, "fuse.requests.op.lookup");
        if refresh {
            wait_refreshed(&m, N as u64);
            // Through the dentry cache only: no name looked up again.
            assert_eq!(counter(&m, "fuse.requests.op.lookup"), lookups);
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
        let before = counter(&m, "fuse.requests.op.getattr");
        for d in &dirs {
            lstat(d);
        }
        let asked = counter(&m, "fuse.requests.op.getattr") - before;
        // Without the refresher each listing left its directory's atime
        // stale in the kernel: one GETATTR per directory. With it, none.
        let want = if refresh { 0 } else { N as u64 };
        assert_eq!(asked, want, "GETATTRs for {N} stats, refresh {refresh}");
        m.unmount().unwrap();
        fs::remove_dir(&dir).unwrap();
    }
}

/// Devices of what `/proc/self/<what>` links lead to (`fd/*`, `cwd`,
/// `task/*/cwd`).
fn devices_of(links: &[PathBuf]) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt;
    links
        .iter()
        .filter_map(|l| fs::metadata(l).ok())
        .map(|m| m.dev())
        .collect()
}

fn entries(dir: &str, then: &str) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().join(then))
        .collect()
}

/// The refresher's clone of the mount is no descriptor and no process
/// working directory: `fuser -m` and `lsof`, which look there for a
/// mount's users, counted the server itself, and `fuser -km` killed it
/// with the programs. (The server runs in this test's process, which
/// holds nothing in the mount when it looks.)
#[test]
fn the_server_is_not_one_of_its_mounts_users() {
    use std::os::unix::fs::MetadataExt;
    let Some(dir) = scratch() else { return };
    let m = serve(&dir, true);
    make_and_list(&dir, 2);
    wait_refreshed(&m, 2);
    let dev = fs::metadata(&dir).unwrap().dev();
    let users = devices_of(&entries("/proc/self/fd", ""));
    assert!(!users.contains(&dev), "a descriptor on the mount");
    assert_ne!(devices_of(&[PathBuf::from("/proc/self/cwd")]), vec![dev]);
    // Held by the refreshing thread as its own working directory.
    assert!(devices_of(&entries("/proc/self/task", "cwd")).contains(&dev));
    drop(m);
    fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_directory_renamed_through_the_mount_is_refreshed_by_its_new_name() {
    let Some(dir) = scratch() else { return };
    let m = serve(&dir, true);
    let dirs = make_and_list(&dir, 1);
    wait_refreshed(&m, 1);
    let refreshed = counter(&m, "fuse.refresh.refreshed");
    fs::create_dir(dir.join("sub")).unwrap();
    let moved = dir.join("sub/moved");
    fs::rename(&dirs[0], &moved).unwrap();
    fs::write(moved.join("g"), b"y").unwrap();
    assert_eq!(fs::read_dir(&moved).unwrap().count(), 2);
    // Found by its old name it would count as stale, and this would wait
    // in vain.
    wait_refreshed(&m, refreshed + 1);
    assert_eq!(counter(&m, "fuse.refresh.stale"), 0);
    let before = counter(&m, "fuse.requests.op.getattr");
    lstat(&moved);
    assert_eq!(counter(&m, "fuse.requests.op.getattr"), before);
    m.unmount().unwrap();
    fs::remove_dir(&dir).unwrap();
}

#[test]
fn unmounting_right_after_a_listing_is_never_busy() {
    for round in 0..20 {
        let Some(dir) = scratch() else { return };
        let m = serve(&dir, true);
        make_and_list(&dir, 3);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 3);
        // As `umount` does it: no retries. The refresher works through its
        // own clone of the mount, so it never holds this one.
        // SAFETY: a NUL-terminated path.
        let rc = unsafe { libc::umount2(cstr(&dir).as_ptr(), 0) };
        assert_eq!(
            rc,
            0,
            "round {round}: umount right after a listing: {}",
            std::io::Error::last_os_error()
        );
        // The server ends once the superblock goes (at the latest when the
        // refresher's batch closes its clone).
        m.unmount().unwrap();
        fs::remove_dir(&dir).unwrap();
    }
}

#[test]
fn a_server_whose_superblock_outlives_its_mount_leaves_the_next_mount_alone() {
    let Some(dir) = scratch() else { return };
    let old = serve(&dir, true);
    // A file kept open keeps the old superblock and its connection alive
    // after the mount is gone, as the refresher's clone does for a batch.
    let held = fs::File::create(dir.join("old")).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(
        unsafe { libc::umount2(cstr(&dir).as_ptr(), libc::MNT_DETACH) },
        0
    );
    let new = serve(&dir, true);
    fs::write(dir.join("new"), b"new").unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
    });
    // Its connection is alive, but the mount on the path is not its own:
    // it must not unmount it (it used to, by path).
    old.unmount().expect("unmount of a detached server");
    closer.join().unwrap();
    assert_eq!(fs::read(dir.join("new")).unwrap(), b"new");
    assert!(!dir.join("old").exists());
    new.unmount().unwrap();
    fs::remove_dir(&dir).unwrap();
}

#[test]
fn with_a_short_attribute_timeout_nothing_is_refreshed() {
    // Attributes fetched now would expire before the next stat could use
    // them: the refresher does not run.
    let Some(dir) = scratch() else { return };
    let m = serve_for(&dir, true, Duration::from_secs(1));
    make_and_list(&dir, 2);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(counter(&m, "fuse.refresh.queued"), 0);
    assert_eq!(counter(&m, "fuse.refresh.names"), 0);
    m.unmount().unwrap();
    fs::remove_dir(&dir).unwrap();
}
