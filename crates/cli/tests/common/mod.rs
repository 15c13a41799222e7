//! Helpers shared by the CLI's integration tests (each test binary uses
//! some of them).
#![allow(dead_code)]

use serde_json::Value;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

/// `statvfs(2)` of `p`.
pub fn statvfs(p: &std::path::Path) -> libc::statvfs {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: all-zero bytes are a valid statvfs (plain integers).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated path; `st` is a valid out-pointer.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st
}

/// Ok when this process may mount FUSE file systems (root and a usable
/// /dev/fuse); otherwise why not, for the skip message.
pub fn can_mount() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("/dev/fuse: {e}"))
}

/// A `uvfs mount` of its own, unmounted (and its directories removed) on
/// drop, so a failing assertion leaves nothing mounted.
pub struct Mounted {
    pub mnt: PathBuf,
    pub scratch: PathBuf,
}

impl Mounted {
    pub fn new(tag: &str, args: &[&str]) -> Mounted {
        let scratch =
            std::env::temp_dir().join(format!("uvfs-cli-mount-{tag}-{}", std::process::id()));
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

    pub fn src(&self) -> PathBuf {
        self.scratch.join("src")
    }

    /// The server's request counter for `op`.
    pub fn requests(&self, op: &str) -> u64 {
        self.counter(&format!("fuse.requests.op.{op}"))
    }

    /// Requests for a node's attributes: GETATTR, and STATX, which the
    /// kernel sends instead when the caller wants the birth time too (as
    /// Rust's `fs::metadata` does).
    pub fn attr_requests(&self) -> u64 {
        self.requests("getattr") + self.requests("statx")
    }

    /// One of the server's counters (`uvfs stat --json`).
    pub fn counter(&self, key: &str) -> u64 {
        let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
            .args(["stat", "--json"])
            .arg(&self.mnt)
            .output()
            .unwrap();
        assert!(out.status.success(), "uvfs stat: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["counters"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {key} in {v}"))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // EBUSY can be transient: a child another test thread forked and
        // has not yet exec'd holds copies of this test's descriptors.
        for _ in 0..20 {
            let mounted = uvfs_fuse::mount_entry(&self.mnt).is_some();
            let out = Command::new("umount").arg(&self.mnt).output();
            if !mounted || out.is_ok_and(|o| o.status.success()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Still busy after a second (a thread or child of the test still
        // in it): detached, so that nothing stays mounted after the test
        // and the scratch removal below does not walk into the mount; the
        // server ends when the last user lets go.
        if uvfs_fuse::mount_entry(&self.mnt).is_some() {
            eprintln!("{}: still busy, unmounted lazily", self.mnt.display());
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
        }
        let _ = fs::remove_dir_all(&self.scratch);
    }
}

/// Waits (up to a minute) until `f` holds.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The pid of the server answering `uvfs stat` for `m`.
pub fn server_pid(m: &Mounted) -> i32 {
    server_pid_if_any(m).expect("uvfs stat names the server's pid")
}

/// The pid of the server answering `uvfs stat`, if one does.
pub fn server_pid_if_any(m: &Mounted) -> Option<i32> {
    let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args(["stat", "--json"])
        .arg(&m.mnt)
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["pid"].as_i64().map(|p| p as i32)
}

/// Requests the kernel sent the mount and has no answer for yet
/// (`/sys/fs/fuse/connections/N/waiting`), if that is readable.
pub fn waiting(m: &Mounted) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(&m.mnt).ok()?.dev();
    let minor = ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32;
    let p = format!("/sys/fs/fuse/connections/{minor}/waiting");
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// A file named `tag` can be written and read back through the mount.
pub fn still_serves(m: &Mounted, tag: &str) {
    let p = m.mnt.join(tag);
    fs::write(&p, tag.as_bytes()).unwrap();
    assert_eq!(fs::read(&p).unwrap(), tag.as_bytes());
}

/// Kills the server of `m` with SIGKILL and waits for its supervisor's
/// new one to answer.
pub fn kill_server(m: &Mounted) {
    let pid = server_pid(m);
    // SAFETY: a plain signal to a process of ours.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_for("a new server", || {
        server_pid_if_any(m).is_some_and(|p| p != pid)
    });
}

/// Pins the calling thread to CPU 0: over FUSE over io_uring its
/// requests go to that CPU's queue.
pub fn on_cpu0() {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU 0 lies within the set's bounds.
    unsafe { libc::CPU_SET(0, &mut set) };
    // SAFETY: pid 0 is this thread; `set` is a valid cpu_set_t of the size given.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    assert_eq!(r, 0, "sched_setaffinity");
}

/// A passthrough of `src` in its scratch directory, served over FUSE over
/// io_uring; `None`, said, where it cannot be (not root, or the kernel
/// does not offer io_uring).
pub fn uring_passthrough(tag: &str) -> Option<Mounted> {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return None;
    }
    let m = Mounted::new(tag, &["--source", "src"]);
    if m.counter("fuse.uring") != 1 {
        eprintln!("skipped: the mount is not served over io_uring here");
        return None;
    }
    Some(m)
}

/// A `stat` of a missing name in `m` from a thread on CPU 0: its answer
/// (`NotFound` expected), or `Timeout` if none came within `limit` (a
/// queue held up; the thread is left waiting).
pub fn stat_on_cpu0(
    m: &Mounted,
    limit: std::time::Duration,
) -> Result<Result<(), std::io::ErrorKind>, std::sync::mpsc::RecvTimeoutError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let missing = m.mnt.join("missing");
    std::thread::spawn(move || {
        on_cpu0();
        let _ = tx.send(fs::metadata(&missing).map(|_| ()).map_err(|e| e.kind()));
    });
    rx.recv_timeout(limit)
}
