//! Shared by the mount tests.

#![allow(dead_code)]

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vnode::{Config, VnodeLayer};

/// Why FUSE cannot be mounted here, if it cannot (the tests then skip).
pub fn fuse_usable() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: mount(2) of FUSE needs root".into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("/dev/fuse unusable: {e}"))
}

/// Makes `path` a sparse file (data in pages 0 and 3 of 5) and returns
/// what `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)` answer from a set of
/// offsets: (offset, whence, result or -errno), to compare with a kernel
/// file system's answers.
pub fn sparse_seeks(path: &std::path::Path) -> Vec<(i64, i32, i64)> {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    const P: u64 = 4096;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all_at(&[1u8; P as usize], 0).unwrap();
    f.write_all_at(b"ten bytes!", 3 * P).unwrap();
    f.set_len(5 * P).unwrap();
    // Asked on a read-only descriptor with no writer left: while the file
    // is open for writing the server answers "all data" (a shared mapping
    // may hold dirty pages it has not seen). The kernel sends RELEASE
    // after close() returns, asynchronously, so wait (bounded) until the
    // hole at page 1 shows before asking.
    drop(f);
    let f = std::fs::File::open(path).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // SAFETY: plain integer arguments on an fd we hold.
    while unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_HOLE) } != P as i64 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}: no hole at page 1 30 s after the writer closed",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut out = Vec::new();
    for off in [
        0, 100, 4095, 4096, 5000, 12288, 12300, 16384, 20479, 20480, 30000,
    ] {
        for whence in [libc::SEEK_DATA, libc::SEEK_HOLE] {
            // SAFETY: plain integer arguments on an fd we hold.
            let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
            let r = if r < 0 {
                -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
            } else {
                r
            };
            out.push((off, whence, r));
        }
    }
    out
}

/// Serves a fresh memfs on `dir` (an existing directory).
pub fn serve_memfs(dir: &Path, size: Option<u64>, vnodes: usize) -> BackgroundMount {
    serve_memfs_with(dir, size, vnodes, Duration::from_secs(1), true)
}

/// [`serve_memfs`] with entry and attribute timeouts `ttl`, refreshing
/// listed directories (`ServeConfig::dir_refresh`) or not.
pub fn serve_memfs_with(
    dir: &Path,
    size: Option<u64>,
    vnodes: usize,
    ttl: Duration,
    dir_refresh: bool,
) -> BackgroundMount {
    let fs_cfg = MemFsConfig {
        size_limit: size,
        root_mode: 0o755,
        ..Default::default()
    };
    serve_memfs_as(dir, vnodes, fs_cfg, |c| {
        c.timeouts = Timeouts {
            entry: ttl,
            attr: ttl,
        };
        c.dir_refresh = dir_refresh;
    })
}

/// Serves a fresh memfs made as `fs_cfg` says on `dir`, served as the
/// tests' default configuration after `tweak`.
pub fn serve_memfs_as(
    dir: &Path,
    vnodes: usize,
    fs_cfg: MemFsConfig,
    tweak: impl FnOnce(&mut ServeConfig),
) -> BackgroundMount {
    let layer = VnodeLayer::new(Config::with_limit(vnodes));
    let fs = MemFs::new(layer.clone(), fs_cfg);
    let mut cfg = ServeConfig {
        mountpoint: dir.to_path_buf(),
        threads: 2,
        timeouts: Timeouts {
            entry: Duration::from_secs(1),
            attr: Duration::from_secs(1),
        },
        fsname: "uvfs-test".into(),
        control: false,
        server_opendir: false,
        uring: uring(),
        read_only: false,
        mount_flags: 0,
        kernel_io: false,
        dir_refresh: true,
        allow_other: false,
        successor: None,
        supervise: false,
    };
    tweak(&mut cfg);
    BackgroundMount::start(fs, layer, &cfg).expect("mount")
}

/// A fresh, empty directory to mount on (`TAG-PID-N` under the temp
/// directory), or None, having said why, where FUSE cannot be mounted.
pub fn scratch_dir(tag: &str) -> Option<PathBuf> {
    if let Err(why) = fuse_usable() {
        eprintln!("SKIP: FUSE tests not run: {why}");
        return None;
    }
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

pub struct Mnt {
    pub dir: PathBuf,
    pub mount: Option<BackgroundMount>,
}

impl Mnt {
    pub fn new(size: Option<u64>) -> Option<Mnt> {
        Mnt::with_limit(size, 4096)
    }

    pub fn with_limit(size: Option<u64>, vnodes: usize) -> Option<Mnt> {
        let dir = scratch_dir("uvfs-fuse-test")?;
        let mount = serve_memfs(&dir, size, vnodes);
        Some(Mnt {
            dir,
            mount: Some(mount),
        })
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    pub fn report(&self, check: bool) -> serde_json::Value {
        self.mount.as_ref().unwrap().report(check)
    }
}

impl Drop for Mnt {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            if uring() && !std::thread::panicking() {
                assert_uring_served(&m.report(false));
            }
            m.unmount().expect("unmount");
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

// <linux/posix_acl_xattr.h>
pub const ACL_USER_OBJ: u16 = 0x01;
pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP_OBJ: u16 = 0x04;
pub const ACL_GROUP: u16 = 0x08;
pub const ACL_MASK: u16 = 0x10;
pub const ACL_OTHER: u16 = 0x20;
pub const NO_ID: u32 = u32::MAX;

/// The `system.posix_acl_*` value of (tag, perm, id) entries.
pub fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

pub fn set_acl(p: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings and a buffer of the given length.
    let rc = unsafe {
        libc::setxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Runs `sh -c script` as uid/gid 1000; whether it succeeded.
pub fn as_user(script: &str) -> bool {
    Command::new("sh")
        .args(["-c", script])
        .uid(1000)
        .gid(1000)
        .status()
        .unwrap()
        .success()
}

/// What `O_TMPFILE` does under `dir`, step by step (results or errnos).
pub fn tmpfile_transcript(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    use std::os::unix::io::AsRawFd;
    let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
    let d = cstr(dir);
    let tmp = |at: libc::c_int, path: &CString, flags: libc::c_int| -> std::io::Result<fs::File> {
        // SAFETY: a NUL-terminated path; the fd returned is owned by the File.
        let fd = unsafe {
            libc::openat(
                at,
                path.as_ptr(),
                flags | libc::O_TMPFILE | libc::O_CLOEXEC,
                0o640,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(unsafe { <fs::File as std::os::unix::io::FromRawFd>::from_raw_fd(fd) })
    };
    let link = |f: &fs::File, name: &str| -> String {
        let to = cstr(&dir.join(name));
        // SAFETY: an fd we hold, an empty path and a NUL-terminated target.
        let r = unsafe {
            libc::linkat(
                f.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if r == 0 {
            "ok".into()
        } else {
            let e = std::io::Error::last_os_error();
            format!("errno {}", e.raw_os_error().unwrap_or(0))
        }
    };
    let st = |f: &fs::File| {
        let m = f.metadata().unwrap();
        format!("nlink {} mode {:o} size {}", m.nlink(), m.mode(), m.len())
    };
    let mut out = Vec::new();
    let f = tmp(libc::AT_FDCWD, &d, libc::O_RDWR).unwrap();
    out.push(format!("new: {}", st(&f)));
    f.write_all_at(b"tmpfile data", 0).unwrap();
    out.push(format!("written: {}", st(&f)));
    out.push(format!("link: {}", link(&f, "named")));
    out.push(format!("linked: {}", st(&f)));
    out.push(format!("again: {}", link(&f, "second")));
    out.push(format!("twice: {}", st(&f)));
    drop(f);
    out.push(format!(
        "read: {:?}",
        fs::read(dir.join("named")).map_err(|e| e.raw_os_error())
    ));
    let excl = tmp(libc::AT_FDCWD, &d, libc::O_WRONLY | libc::O_EXCL).unwrap();
    out.push(format!("excl: {} link {}", st(&excl), link(&excl, "never")));
    drop(excl);
    out.push(format!(
        "rdonly: {:?}",
        tmp(libc::AT_FDCWD, &d, libc::O_RDONLY)
            .map(drop)
            .map_err(|e| e.raw_os_error())
    ));
    out.push(format!(
        "on a file: {:?}",
        tmp(libc::AT_FDCWD, &cstr(&dir.join("named")), libc::O_RDWR)
            .map(drop)
            .map_err(|e| e.raw_os_error())
    ));
    fs::create_dir(dir.join("gone")).unwrap();
    let gone = fs::File::open(dir.join("gone")).unwrap();
    fs::remove_dir(dir.join("gone")).unwrap();
    out.push(format!(
        "in a removed dir: {:?}",
        tmp(gone.as_raw_fd(), &CString::new(".").unwrap(), libc::O_RDWR)
            .map(drop)
            .map_err(|e| e.raw_os_error())
    ));
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    out.push(format!("names: {names:?}"));
    out
}

/// Checks that the kernel enforces the access ACLs set on a new file at
/// `f` for uid 1000: one denying what the mode grants, then one granting
/// what the mode denies (left set). Returns the granting ACL's value.
pub fn acls_are_enforced(f: &Path) -> Vec<u8> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(f, b"secret").unwrap();
    fs::set_permissions(f, fs::Permissions::from_mode(0o644)).unwrap();
    let cat = format!("cat {} > /dev/null 2>&1", f.display());
    assert!(as_user(&cat), "the mode lets uid 1000 read");
    let deny = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_USER, 0, 1000),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_MASK, 4, NO_ID),
        (ACL_OTHER, 4, NO_ID),
    ]);
    set_acl(f, "system.posix_acl_access", &deny).unwrap();
    assert!(!as_user(&cat), "an ACL-denied user read the file");
    let grant = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_USER, 6, 1000),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_MASK, 6, NO_ID),
        (ACL_OTHER, 4, NO_ID),
    ]);
    set_acl(f, "system.posix_acl_access", &grant).unwrap();
    assert!(as_user(&format!("echo more >> {}", f.display())));
    assert_eq!(fs::read(f).unwrap(), b"secretmore\n");
    grant
}

/// What a write, a `copy_file_range`, a truncate, an `O_TRUNC` open and a
/// chgrp by uid 1000 (no `CAP_FSETID`) leave of set-uid/set-gid on files
/// of theirs under
/// `dir` (which uid 1000 must be able to reach), and what root's writes
/// leave: `name mode` lines to compare with a kernel file system.
pub fn set_id_transcript(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let cases: [(&str, u32, &str); 7] = [
        ("w-suid", 0o4755, "echo x >> {f}"),
        (
            "copy-range",
            0o6755,
            "python3 -c 'import os; fd = os.open(\"{f}\", os.O_RDWR); os.copy_file_range(fd, fd, 2, 0, 4)'",
        ),
        ("w-sgid-gx", 0o2775, "echo x >> {f}"),
        ("w-sgid", 0o2745, "echo x >> {f}"),
        ("truncate", 0o6777, "truncate -s 1 {f}"),
        ("o-trunc", 0o6777, ": > {f}"),
        ("chgrp", 0o6777, "chgrp 1000 {f}"),
    ];
    let mut out = Vec::new();
    for (name, mode, script) in cases {
        let f = dir.join(name);
        fs::write(&f, b"data").unwrap();
        std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
        let ok = as_user(&script.replace("{f}", &f.display().to_string()));
        let after = fs::metadata(&f).unwrap().mode() & 0o7777;
        // Root (CAP_FSETID) keeps them.
        fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&f)
            .and_then(|mut h| std::io::Write::write_all(&mut h, b"root"))
            .unwrap();
        let root = fs::metadata(&f).unwrap().mode() & 0o7777;
        // Any chown drops them, even root's that changes neither id.
        std::os::unix::fs::chown(&f, None, None).unwrap();
        let chown = fs::metadata(&f).unwrap().mode() & 0o7777;
        out.push(format!(
            "{name}: ran {ok}, then {after:o}; root's write {root:o}, chown -1 -1 {chown:o}"
        ));
    }
    out
}

/// Whether test mounts take requests through io_uring: with
/// `UVFS_TEST_URING=1` (CI runs the mount tests once each way). Asked for
/// where the kernel cannot, it fails rather than test /dev/fuse twice.
#[allow(dead_code)]
pub fn uring() -> bool {
    let asked = std::env::var_os("UVFS_TEST_URING").is_some_and(|v| v == "1");
    assert!(
        !asked || uvfs_fuse::uring_available(),
        "UVFS_TEST_URING=1, but this kernel does not serve FUSE over io_uring now \
         (echo Y > {})",
        uvfs_fuse::URING_PARAMETER
    );
    asked
}

/// With `UVFS_TEST_URING=1`: the mount's requests did come through the
/// io_uring queues (the first few may precede the queues' registration).
#[allow(dead_code)]
pub fn assert_uring_served(report: &serde_json::Value) {
    let c = &report["counters"];
    let (all, ring) = (
        c["fuse.requests"].as_u64().unwrap(),
        c["fuse.requests.uring"].as_u64().unwrap(),
    );
    assert_eq!(c["fuse.uring"], 1, "io_uring not negotiated: {c}");
    assert!(
        all < 20 || ring * 2 > all,
        "{ring} of {all} requests came through io_uring"
    );
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
pub struct Fh {
    pub bytes: u32,
    pub htype: i32,
    pub f: [u8; 128],
}

/// `name_to_handle_at` of `p`: (handle type, bytes).
pub fn handle_of(p: &Path) -> (i32, Vec<u8>) {
    let mut h = Fh {
        bytes: 128,
        htype: 0,
        f: [0; 128],
    };
    let mut mount_id = 0;
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `h` is a file_handle header with room for 128 bytes, as
    // its `bytes` says; `c` and `mount_id` are valid for the call.
    let rc = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut h as *mut Fh).cast(),
            &mut mount_id,
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "name_to_handle_at: {}",
        std::io::Error::last_os_error()
    );
    (h.htype, h.f[..h.bytes as usize].to_vec())
}

/// `open_by_handle_at` on the mount `dir`.
pub fn open_handle(dir: &Path, h: &(i32, Vec<u8>)) -> std::io::Result<std::fs::File> {
    let mut raw = Fh {
        bytes: h.1.len() as u32,
        htype: h.0,
        f: [0; 128],
    };
    raw.f[..h.1.len()].copy_from_slice(&h.1);
    let m = std::fs::File::open(dir)?;
    // SAFETY: `raw` is a file_handle with `bytes` bytes of handle; `m` is
    // an open fd of the mount.
    let fd = unsafe {
        libc::open_by_handle_at(
            std::os::fd::AsRawFd::as_raw_fd(&m),
            (&mut raw as *mut Fh).cast(),
            libc::O_RDONLY,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// The next line a child process printed (its stdout piped).
pub fn said(c: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}
