//! Ctrl-C on a benchmark that mounts things leaves nothing behind: no
//! tmpfs, no `uvfs mount` server or its mount, no scratch directory.
//! Skipped (with a message) where mounting is not possible: not root, or
//! no usable /dev/fuse.

mod common;

use common::can_mount;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Mount points whose path contains `tag`.
fn mounts_with(tag: &str) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    uvfs_fuse::mountinfo_entries(&text)
        .map(|e| e.mountpoint.display().to_string())
        .filter(|mp| mp.contains(tag))
        .collect()
}

/// Command lines (arguments joined by spaces) of the processes whose
/// command line contains `needle`. Read from /proc, not with `pgrep`, which
/// a minimal system may lack (the check would then pass unseen).
fn processes_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

/// Entries of `dir` whose name starts with `prefix`.
fn entries_with(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn sigint_during_fuse_stat_unmounts_and_removes_everything() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args([
            "bench",
            "fuse-stat",
            "--files",
            "400000",
            "--fs",
            "uvfs-memfs,tmpfs",
            "--repeats",
            "1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tag = format!("uvfs-bench-{}-", child.id());

    // Wait until both mounts are up: tmpfs is mounted once memfs's tree
    // is built (about 40 s for 400,000 files here, minutes on a loaded
    // machine: 60 s was too short with a CI run beside it), and its own
    // tree is then being built when the signal comes.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let m = mounts_with(&tag);
        if m.iter().any(|p| p.ends_with("-memfs")) && m.iter().any(|p| p.ends_with("-tmpfs")) {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the benchmark ended ({st}) before mounting both file systems");
        }
        assert!(Instant::now() < deadline, "no mounts after 300 s: {m:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));

    // SAFETY: kill(2) on our own unreaped child with a valid signal.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the benchmark did not exit within 60 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    use std::io::Read as _;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();

    assert_eq!(status.code(), Some(130), "{status}; stderr:\n{err}");
    assert!(err.contains("signal 2: cleaning up"), "{err}");
    assert!(
        mounts_with(&tag).is_empty(),
        "still mounted: {:?}",
        mounts_with(&tag)
    );
    let left = entries_with(&std::env::temp_dir(), &tag);
    assert!(left.is_empty(), "left in the temp dir: {left:?}\n{err}");
    let left = entries_with(Path::new("/dev/shm"), &tag);
    assert!(left.is_empty(), "left in /dev/shm: {left:?}\n{err}");
    // The memfs server went with its mount.
    let servers = processes_with(&format!(
        "uvfs mount {}",
        std::env::temp_dir().join(&tag).display()
    ));
    assert!(servers.is_empty(), "servers still running: {servers:?}");
}
