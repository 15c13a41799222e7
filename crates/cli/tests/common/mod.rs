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
            let here = format!(" {} ", self.mnt.display());
            let mounted =
                fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.contains(&here));
            let out = Command::new("umount").arg(&self.mnt).output();
            if !mounted || out.is_ok_and(|o| o.status.success()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = fs::remove_dir_all(&self.scratch);
    }
}
