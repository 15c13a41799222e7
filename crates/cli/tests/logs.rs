//! What a server logs: a detached mount's log file shows its start, the
//! options in force, a feature turned off and why, an error the source
//! answered (EACCES on a backing `open`) and its stop; and a server whose
//! stderr is a closed pipe serves and stops cleanly. Skipped (with a
//! message) where mounting is not possible.

mod common;

use common::wait_for;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("uvfs-cli-logs-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(d.join("mnt")).unwrap();
    fs::create_dir_all(d.join("src")).unwrap();
    d
}

fn mounted(mnt: &Path) -> bool {
    uvfs_fuse::mount_entry(mnt).is_some()
}

#[test]
fn a_detached_mount_logs_start_options_features_off_errors_and_stop() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let d = scratch("detached");
    let (mnt, log) = (d.join("mnt"), d.join("server.log"));
    // Root's server reads any file: one the source refuses it needs a
    // server without the capabilities that bypass permission bits. The
    // kernel checks the caller (this root process, which may) first, so
    // the OPEN reaches the server, and the source answers EACCES.
    fs::write(d.join("src/locked"), b"secret").unwrap();
    fs::set_permissions(
        d.join("src/locked"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uvfs"));
    cmd.arg("mount")
        .arg("--source")
        .arg(d.join("src"))
        .arg(&mnt)
        .arg("-o")
        .arg(format!("no_watch,log_file={}", log.display()));
    // SAFETY: the closure runs between fork and exec and only calls
    // prctl, which is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            // CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (linux/capability.h).
            for cap in [1, 2] {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "uvfs mount: {out:?}");
    let r = std::panic::catch_unwind(|| {
        // A client that keeps trying: logged up to the rate limit.
        for _ in 0..200 {
            let e = fs::read(mnt.join("locked")).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
        }
        fs::write(mnt.join("open"), b"x").unwrap();
        // epoll of a regular file (Go's runtime tries it): ready both ways.
        let f = fs::File::open(mnt.join("open")).unwrap();
        assert_eq!(ready(&f), libc::EPOLLIN as u32 | libc::EPOLLOUT as u32);
    });
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    wait_for("the server's last line", || {
        fs::read_to_string(&log).is_ok_and(|l| l.contains("stopped serving"))
    });
    let text = fs::read_to_string(&log).unwrap();
    let _ = fs::remove_dir_all(&d);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
    let has = |line_with: &[&str]| {
        text.lines()
            .any(|l| line_with.iter().all(|part| l.contains(part)))
    };
    assert!(
        has(&["INFO", "serving passthrough of", "uvfs 0."]),
        "{text}"
    );
    assert!(has(&["options:", "threads=", "watcher=false"]), "{text}");
    assert!(has(&["host-change watcher off (--no-watch)"]), "{text}");
    // Without CAP_DAC_READ_SEARCH a crash's new server cannot find the
    // kernel's nodes by handle: said at mount.
    assert!(
        has(&["WARN", "crash recovery partial", "CAP_DAC_READ_SEARCH"]),
        "{text}"
    );
    assert!(has(&["WARN", "open on node", "EACCES"]), "{text}");
    let refusals = text.lines().filter(|l| l.contains("EACCES")).count();
    assert!((1..=12).contains(&refusals), "{refusals} lines:\n{text}");
    assert!(has(&["EACCES", "suppressed"]), "{text}");
    assert!(has(&["mounted ", &mnt.display().to_string()]), "{text}");
    assert!(has(&["stopped serving", "unmounted"]), "{text}");
    // Ordinary answers are not logged: the create of "open" looked it up
    // first (ENOENT); the kernel's POLL is answered ENOSYS quietly.
    assert!(!text.contains("ENOENT"), "{text}");
    assert!(!text.contains("Not Implemented"), "{text}");
}

/// What `epoll` reports of `f` at once (read and write asked).
fn ready(f: &fs::File) -> u32 {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscalls on fds this function owns or borrows; `ev`
    // outlives both calls.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        assert!(ep >= 0);
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT) as u32,
            u64: 0,
        };
        assert_eq!(
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, f.as_raw_fd(), &mut ev),
            0,
            "{}",
            std::io::Error::last_os_error()
        );
        let n = libc::epoll_wait(ep, &mut ev, 1, 1000);
        libc::close(ep);
        assert_eq!(n, 1);
        ev.events
    }
}

#[test]
fn a_server_whose_stderr_is_closed_serves_and_stops_cleanly() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let d = scratch("closed-stderr");
    let (mnt, log) = (d.join("mnt"), d.join("server.log"));
    // Debug: fuser logs every request, so stderr is written all along.
    let mut child = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args([
            "mount",
            "--foreground",
            "--log-level",
            "debug",
            "--log-file",
        ])
        .arg(&log)
        .arg(&mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // No reader from the start: each write to stderr fails with EPIPE.
    drop(child.stderr.take());
    wait_for("the mount", || {
        mounted(&mnt) || child.try_wait().is_ok_and(|s| s.is_some())
    });
    let r = std::panic::catch_unwind(|| {
        for i in 0..100 {
            fs::write(mnt.join(format!("f{i}")), b"data").unwrap();
            assert_eq!(fs::read(mnt.join(format!("f{i}"))).unwrap(), b"data");
        }
        assert!(fs::read(mnt.join("absent")).is_err());
    });
    let _ = Command::new("umount").arg(&mnt).status();
    let status = child.wait().unwrap();
    let text = fs::read_to_string(&log).unwrap_or_default();
    let _ = fs::remove_dir_all(&d);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
    assert!(status.success(), "server: {status}");
    // fuser's own messages are in the log, and the server logged to the
    // end with nobody reading its stderr.
    assert!(text.contains(" DEBUG fuser::"), "{text}");
    assert!(text.contains("stopped serving"), "{text}");
}

#[test]
fn without_a_system_log_a_detached_server_logs_beside_its_control_socket() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    use std::os::unix::fs::FileTypeExt;
    if fs::metadata("/dev/log").is_ok_and(|m| m.file_type().is_socket()) {
        eprintln!("skipped: this machine has a system log");
        return;
    }
    let d = scratch("fallback");
    let mnt = d.join("mnt");
    let log = uvfs_fuse::fallback_log_path(&mnt).unwrap();
    let _ = fs::remove_file(&log);
    let st = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .arg("mount")
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(mounted(&mnt));
    fs::write(mnt.join("f"), b"x").unwrap();
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    let text = || fs::read_to_string(&log).unwrap_or_default();
    wait_for("the server's stop in its log", || {
        text().contains("stopped serving")
    });
    let t = text();
    assert!(t.contains(&format!("mounted {}", mnt.display())), "{t}");
    let _ = fs::remove_file(&log);
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn sigterm_stops_a_server_whose_mount_lives_on_in_another_namespace() {
    // A copy of the mount in a private mount namespace keeps the
    // connection up after the unmount here: the server (and its
    // supervisor) stop anyway, saying why, instead of serving the copy
    // for ever.
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let d = scratch("namespace");
    let (mnt, log) = (d.join("mnt"), d.join("server.log"));
    let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .arg("mount")
        .arg("--source")
        .arg(d.join("src"))
        .arg(&mnt)
        .arg("--log-file")
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success(), "uvfs mount: {out:?}");
    wait_for("the supervisor", || {
        fs::read_to_string(&log).is_ok_and(|l| l.contains("supervising the server"))
    });
    let pid = |what: &str| {
        let l = fs::read_to_string(&log).unwrap();
        let line = l
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {l}"))
            .to_string();
        line.split("(pid ")
            .nth(1)
            .unwrap()
            .split(')')
            .next()
            .unwrap()
            .parse::<i32>()
            .unwrap()
    };
    let server = pid("serving passthrough of");
    let mut copy = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sleep", "60"])
        .spawn()
        .unwrap();
    // The namespace exists once `sleep` runs in it.
    wait_for("the namespace's copy", || {
        fs::read_to_string(format!("/proc/{}/mountinfo", copy.id()))
            .is_ok_and(|m| m.contains(&mnt.display().to_string()))
            && fs::read_link(format!("/proc/{}/exe", copy.id())).is_ok_and(|e| e.ends_with("sleep"))
    });
    // SAFETY: kill(2) of the server this test started.
    assert_eq!(unsafe { libc::kill(server, libc::SIGTERM) }, 0);
    let gone = |p: i32| {
        !Path::new(&format!("/proc/{p}")).exists()
            || fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| s.contains(") Z "))
    };
    wait_for("the server to stop", || gone(server));
    wait_for("the supervisor to stop", || {
        fs::read_to_string(&log).is_ok_and(|l| l.contains("left on purpose"))
    });
    let _ = copy.kill();
    let _ = copy.wait();
    let text = fs::read_to_string(&log).unwrap();
    let _ = fs::remove_dir_all(&d);
    assert!(
        text.contains("a copy of the mount lives in another mount namespace"),
        "{text}"
    );
}
