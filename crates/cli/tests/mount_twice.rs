//! `uvfs mount` on a mountpoint a live uvfs server already serves: refused
//! at once with one clear message, and the first mount goes on serving.
//! Skipped (with a message) where mounting is not possible.

mod common;

use std::fs;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// Taken by every test here: a mount namespace made by one test copies
/// whatever the others have mounted at that moment, and such a copy keeps
/// their servers serving (and their sources busy) after `uvfs umount`;
/// exactly the behaviour one test asserts and the others must not meet.
fn alone() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn uvfs(args: &[&str], mnt: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args(args)
        .arg(mnt)
        .output()
        .unwrap()
}

#[test]
fn a_second_mount_on_a_served_mountpoint_is_refused() {
    let _alone = alone();
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
    let _alone = alone();
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

/// Once `uvfs umount` returns, its server has let the source go: the
/// source's own file system can be unmounted at once (`uvfs umount M &&
/// umount SOURCE`, as a script tearing down does). A server exits a
/// moment after its mount is gone, and until then holds the source open.
#[test]
fn after_uvfs_umount_the_source_can_be_unmounted() {
    let _alone = alone();
    if let Err(why) = common::can_mount() {
        eprintln!("SKIP: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uvfs-umount-source-{}", std::process::id()));
    let (src, mnt) = (dir.join("src"), dir.join("mnt"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Each round can race the server's exit: several make a miss show.
    let mut refused = Vec::new();
    for round in 0..5 {
        let (ok, err) = run(Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&src));
        assert!(ok, "mount tmpfs: {err}");
        for i in 0..50 {
            fs::write(src.join(format!("f{i}")), b"x").unwrap();
        }
        let served = uvfs(&["mount", "--source", src.to_str().unwrap()], &mnt);
        let walked = served.status.success().then(|| {
            fs::read_dir(&mnt)
                .unwrap()
                .map(|e| fs::read(e.unwrap().path()).unwrap().len())
                .sum::<usize>()
        });
        let unmounted = uvfs(&["umount"], &mnt);
        let (src_gone, serr) = run(Command::new("umount").arg(&src));
        if !src_gone {
            refused.push(format!("round {round}: {serr}"));
            // Let the server finish leaving, then clean up.
            std::thread::sleep(std::time::Duration::from_secs(1));
            let _ = Command::new("umount").arg(&src).status();
        }
        assert!(served.status.success(), "uvfs mount: {served:?}");
        assert_eq!(walked, Some(50));
        assert!(unmounted.status.success(), "uvfs umount: {unmounted:?}");
    }
    let _ = fs::remove_dir_all(&dir);
    assert!(
        refused.is_empty(),
        "umount of the source refused: {refused:?}"
    );
}

/// `uvfs umount` of a file system that stays mounted elsewhere (a copy in
/// a mount namespace made while it was mounted, as `unshare -m`, a
/// container or a systemd service with `PrivateTmp=` makes; a bind mount)
/// says where and which server serves on, instead of waiting for a server
/// that does not stop; the server stops once the last copy is gone.
#[test]
fn unmounting_a_file_system_mounted_elsewhere_says_where() {
    let _alone = alone();
    if let Err(why) = common::can_mount() {
        eprintln!("SKIP: {why}");
        return;
    }
    if Command::new("unshare").arg("--version").output().is_err() {
        eprintln!("SKIP: no unshare(1)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uvfs-umount-copies-{}", std::process::id()));
    let (mnt, bind) = (dir.join("m"), dir.join("b"));
    fs::create_dir_all(&mnt).unwrap();
    fs::create_dir_all(&bind).unwrap();
    let alive = |pid: i32| {
        fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    };
    let server_of = |mnt: &std::path::Path| {
        let out = uvfs(&["stat", "--json"], mnt);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["pid"].as_i64().expect("uvfs stat names the pid") as i32
    };
    // Another mount namespace holds a copy.
    assert!(uvfs(&["mount"], &mnt).status.success());
    fs::write(mnt.join("f"), b"kept").unwrap();
    let server = server_of(&mnt);
    let mut copy = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sleep", "60"])
        .spawn()
        .unwrap();
    common::wait_for("the namespace's copy", || {
        fs::read_to_string(format!("/proc/{}/mountinfo", copy.id()))
            .is_ok_and(|m| m.contains(&mnt.display().to_string()))
            && fs::read_link(format!("/proc/{}/exe", copy.id())).is_ok_and(|e| e.ends_with("sleep"))
    });
    let out = uvfs(&["umount"], &mnt);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let served_on = alive(server);
    // The copy still reads the file: the server serves it.
    let read = Command::new("nsenter")
        .args(["-t", &copy.id().to_string(), "-m", "cat"])
        .arg(mnt.join("f"))
        .output();
    // A new mount here meanwhile: its server takes the mountpoint's
    // control socket, and keeps it once the old one stops.
    let again = uvfs(&["mount"], &mnt);
    let new_server = again.status.success().then(|| server_of(&mnt));
    let _ = copy.kill();
    let _ = copy.wait();
    common::wait_for("the server to stop after its last copy", || !alive(server));
    let still = new_server.map(|_| server_of(&mnt));
    let unmounted = uvfs(&["umount"], &mnt);
    assert!(again.status.success(), "mount after the unmount: {again:?}");
    assert_ne!(new_server, Some(server));
    assert_eq!(still, new_server, "the new server lost its control socket");
    assert!(unmounted.status.success(), "{unmounted:?}");
    assert!(out.status.success(), "{out:?}");
    assert!(
        err.contains(&format!(
            "in the mount namespace of pid {} (sleep)",
            copy.id()
        )) && err.contains(&format!("kill {server}")),
        "{err}"
    );
    assert!(served_on, "the server stopped while a copy was mounted");
    if let Ok(r) = read {
        assert_eq!(r.stdout, b"kept", "{r:?}");
    }
    // A bind mount in this namespace.
    assert!(uvfs(&["mount"], &mnt).status.success());
    let server = server_of(&mnt);
    let bound = Command::new("mount")
        .arg("--bind")
        .arg(&mnt)
        .arg(&bind)
        .status()
        .unwrap();
    assert!(bound.success());
    let out = uvfs(&["umount"], &mnt);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let served_on = alive(server);
    let _ = Command::new("umount").arg(&bind).status();
    common::wait_for("the server to stop after the bind mount", || !alive(server));
    assert!(out.status.success(), "{out:?}");
    assert!(err.contains(&format!("at {}", bind.display())), "{err}");
    assert!(served_on);
    // Mounted nowhere else, it says nothing and the server is gone.
    assert!(uvfs(&["mount"], &mnt).status.success());
    let server = server_of(&mnt);
    let out = uvfs(&["umount"], &mnt);
    let gone = !alive(server);
    let _ = fs::remove_dir_all(&dir);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert!(gone, "the server outlived `uvfs umount`");
}
