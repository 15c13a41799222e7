//! `uvfs mount` on a mountpoint a live uvfs server already serves: refused
//! at once with one clear message, and the first mount goes on serving.
//! Skipped (with a message) where mounting is not possible.

mod common;

use std::fs;
use std::process::Command;

fn uvfs(args: &[&str], mnt: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args(args)
        .arg(mnt)
        .output()
        .unwrap()
}

#[test]
fn a_second_mount_on_a_served_mountpoint_is_refused() {
    if let Err(why) = common::can_mount() {
        eprintln!("SKIP: {why}");
        return;
    }
    let mnt = std::env::temp_dir().join(format!("uvfs-mount-twice-{}", std::process::id()));
    fs::create_dir_all(&mnt).unwrap();
    let first = uvfs(&["mount"], &mnt);
    assert!(first.status.success(), "first mount: {first:?}");
    let r = std::panic::catch_unwind(|| {
        fs::write(mnt.join("kept"), b"first").unwrap();
        // The first server's log (named for the mountpoint, where no
        // syslog listens): the refusals are the caller's, not its.
        let log = uvfs_fuse::fallback_log_path(&mnt).unwrap();
        let logged = || fs::read_to_string(&log).unwrap_or_default();
        let before = logged().len();
        for args in [&["mount"][..], &["mount", "--foreground"][..]] {
            let second = uvfs(args, &mnt);
            let err = String::from_utf8_lossy(&second.stderr);
            assert!(!second.status.success(), "{args:?} mounted twice");
            assert_eq!(
                err.matches("already served by uvfs").count(),
                1,
                "{args:?}: {err}"
            );
        }
        let since = logged().get(before..).unwrap_or_default().to_string();
        assert!(!since.contains("ERROR"), "the first server's log: {since}");
        // Nothing was stacked on the first mount, which still serves.
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let here = uvfs_fuse::mountinfo_entries(&mounts).filter(|e| e.mountpoint == mnt);
        assert_eq!(here.count(), 1);
        assert_eq!(fs::read(mnt.join("kept")).unwrap(), b"first");
        assert!(uvfs(&["stat"], &mnt).status.success());
    });
    let _ = Command::new("umount").arg(&mnt).status();
    let _ = fs::remove_dir(&mnt);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// `uvfs umount` of a directory nothing is mounted on says so (the
/// kernel's answer, EINVAL, read "Invalid argument").
#[test]
fn unmounting_what_is_not_mounted_says_so() {
    if let Err(why) = common::can_mount() {
        eprintln!("SKIP: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uvfs-umount-nothing-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let out = uvfs(&["umount"], &dir);
    fs::remove_dir(&dir).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing is mounted there"), "{err}");
}
