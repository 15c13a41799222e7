//! The examples mount and serve what they say: each is started as a
//! program on a scratch mountpoint, read through the kernel, and stopped
//! with SIGTERM, after which its mount must be gone. Skipped (with a
//! message) where FUSE cannot be mounted.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// An example's executable: `cargo test` builds examples beside the test
/// binaries (target/<profile>/examples).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    profile.join("examples").join(name)
}

fn mounted(mnt: &Path) -> bool {
    let here = format!(" {} ", mnt.display());
    fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.contains(&here))
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops an example the way Ctrl-C would and checks it unmounted itself.
fn stop(mut child: Child, mnt: &Path) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert!(st.success(), "example exited with {st}");
    assert!(!mounted(mnt), "the example left its mount behind");
}

#[test]
fn hello_serves_one_read_only_file() {
    if let Err(why) = common::fuse_usable() {
        eprintln!("skipped: {why}");
        return;
    }
    let Some(dir) = common::scratch_dir("example-hello") else {
        return;
    };
    let mnt = dir.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let child = Command::new(example("hello")).arg(&mnt).spawn().unwrap();
    wait_for("the hello mount", || mounted(&mnt));
    let names: Vec<_> = fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["hello"]);
    assert_eq!(fs::read(mnt.join("hello")).unwrap(), b"Hello from uvfs!\n");
    let md = fs::metadata(mnt.join("hello")).unwrap();
    assert_eq!(md.len(), 17);
    let e = fs::write(mnt.join("hello"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert!(fs::metadata(mnt.join("nope")).is_err());
    stop(child, &mnt);
    let _ = fs::remove_dir_all(&dir);
}
