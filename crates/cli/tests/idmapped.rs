//! Idmapped mounts of memfs and of a passthrough (`mount_setattr` with
//! `MOUNT_ATTR_IDMAP`, as container runtimes make them), and the plain
//! mount beside them: with `FUSE_ALLOW_IDMAP` the kernel leaves the
//! caller's ids out of every request that makes no inode, on every mount
//! of the connection, so what the server did with them must still hold
//! (here: the set-gid bit an access ACL drops, by the caller's groups).
//! Skipped where mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command};

/// File-system ids FS_BASE.. show as MOUNT_BASE.. through the idmapped
/// mount, RANGE of them.
const FS_BASE: u32 = 1000;
const MOUNT_BASE: u32 = 21000;
const RANGE: u32 = 100;

/// `struct mount_attr` of `<linux/mount.h>`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn last_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// A user namespace whose ids FS_BASE.. are MOUNT_BASE.. outside it: a
/// `sleep` unshared into a new one, its maps written from here (root in
/// this namespace may), the namespace held by the fd once it is gone.
fn userns() -> OwnedFd {
    let mut child: Child = Command::new("unshare")
        .args(["--user", "sleep", "60"])
        .spawn()
        .expect("unshare");
    let ns = format!("/proc/{}/ns/user", child.id());
    let mine = fs::read_link("/proc/self/ns/user").unwrap();
    common::wait_for("the child's user namespace", || {
        fs::read_link(&ns).is_ok_and(|l| l != mine)
    });
    let map = format!("{FS_BASE} {MOUNT_BASE} {RANGE}\n");
    for f in ["uid_map", "gid_map"] {
        fs::write(format!("/proc/{}/{f}", child.id()), &map).unwrap();
    }
    let fd = OwnedFd::from(fs::File::open(&ns).unwrap());
    child.kill().unwrap();
    child.wait().unwrap();
    fd
}

/// Mounts an idmapped clone of `src` (a mount's root) on `dst`.
fn mount_idmapped(src: &Path, dst: &Path) -> Result<(), String> {
    let ns = userns();
    let s = cstr(src);
    // SAFETY: a NUL-terminated path; the fd returned is owned below.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            s.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(last_err("open_tree"));
    }
    // SAFETY: `tree` is a fresh descriptor nothing else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: ns.as_raw_fd() as u64,
    };
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH, and a
    // `mount_attr` of the size given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(last_err("mount_setattr(MOUNT_ATTR_IDMAP)"));
    }
    let d = cstr(dst);
    // SAFETY: NUL-terminated paths; `tree` is a detached mount.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            d.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(last_err("move_mount"));
    }
    Ok(())
}

/// Unmounts the idmapped mount on drop.
struct Idmapped<'a>(&'a Path);

impl Drop for Idmapped<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

/// Runs `sh -c script` as uid and gid `id` with supplementary `groups`.
fn as_id(id: u32, groups: &[u32], script: &str) -> std::process::Output {
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        format!(
            "--groups={}",
            groups
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    Command::new("setpriv")
        .args([
            &format!("--reuid={id}"),
            &format!("--regid={id}"),
            &groups,
            "sh",
            "-c",
            script,
        ])
        .output()
        .unwrap()
}

fn owner(p: &Path) -> (u32, u32) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

/// The minimal access ACL (`u::rwx,g::r-x,o::r-x`) as a Python literal.
const MINIMAL_ACL: &str =
    "bytes([2,0,0,0, 1,0,7,0,255,255,255,255, 4,0,5,0,255,255,255,255, 32,0,5,0,255,255,255,255])";

fn check(tag: &str, args: &[&str]) {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new(tag, args);
    let top = m.mnt.join("top");
    fs::create_dir(&top).unwrap();
    fs::set_permissions(&top, fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(&top, Some(FS_BASE), Some(FS_BASE)).unwrap();
    let idm = m.scratch.join("idmapped");
    fs::create_dir(&idm).unwrap();
    mount_idmapped(&m.mnt, &idm).unwrap_or_else(|e| panic!("{tag}: {e}"));
    let _umount = Idmapped(&idm);
    let itop = idm.join("top");
    let (fs_id, mnt_id) = (FS_BASE + 5, MOUNT_BASE + 5);
    assert_eq!(
        owner(&itop),
        (MOUNT_BASE, MOUNT_BASE),
        "{tag}: mapped owner"
    );

    // Inodes made through the idmapped mount belong to the mapped ids.
    let out = as_id(
        mnt_id,
        &[],
        &format!(
            "cd {} && echo data > f && mkdir d && ln -s f l && mkfifo p",
            itop.display()
        ),
    );
    assert!(out.status.success(), "{tag}: creating: {out:?}");
    for name in ["f", "d", "l", "p"] {
        assert_eq!(owner(&top.join(name)), (fs_id, fs_id), "{tag}: {name}");
        assert_eq!(owner(&itop.join(name)), (mnt_id, mnt_id), "{tag}: {name}");
    }
    // Requests that make no inode carry no caller ids: they still work,
    // through either mount, and the kernel still refuses what it must.
    let out = as_id(
        mnt_id,
        &[],
        &format!(
            "cd {} && echo more >> f && chmod 640 f && mv f d/g && ln d/g h && rm h",
            itop.display()
        ),
    );
    assert!(out.status.success(), "{tag}: changing: {out:?}");
    assert_eq!(fs::read(top.join("d/g")).unwrap(), b"data\nmore\n");
    assert_eq!(
        fs::metadata(top.join("d/g")).unwrap().mode() & 0o7777,
        0o640
    );
    let out = as_id(fs_id + 1, &[], &format!("chmod 666 {}/d/g", top.display()));
    assert!(!out.status.success(), "{tag}: a stranger's chmod succeeded");
    std::os::unix::fs::chown(
        idm.join("top/d/g"),
        Some(MOUNT_BASE + 7),
        Some(MOUNT_BASE + 8),
    )
    .unwrap();
    assert_eq!(
        owner(&top.join("d/g")),
        (FS_BASE + 7, FS_BASE + 8),
        "{tag}: chown"
    );

    // An access ACL set by the owner drops set-gid unless the owner is in
    // the file's group (Linux's posix_acl_update_mode), judged by the
    // caller's groups though the request does not name the caller.
    let g = top.join("sgid");
    fs::write(&g, b"").unwrap();
    std::os::unix::fs::chown(&g, Some(fs_id), Some(FS_BASE + 8)).unwrap();
    let set_acl = |groups: &[u32]| {
        fs::set_permissions(&g, fs::Permissions::from_mode(0o2775)).unwrap();
        let out = as_id(
            fs_id,
            groups,
            &format!(
                "python3 -c 'import os; os.setxattr(\"{}\", \"system.posix_acl_access\", {MINIMAL_ACL})'",
                g.display()
            ),
        );
        assert!(out.status.success(), "{tag}: setxattr: {out:?}");
        fs::metadata(&g).unwrap().mode() & 0o7777
    };
    assert_eq!(
        set_acl(&[]),
        0o0755,
        "{tag}: set-gid kept for an owner outside the group"
    );
    assert_eq!(
        set_acl(&[FS_BASE + 8]),
        0o2755,
        "{tag}: set-gid dropped for an owner in the group"
    );
}

#[test]
fn memfs_serves_idmapped_mounts() {
    check("idmapped-memfs", &[]);
}

#[test]
fn a_passthrough_serves_idmapped_mounts() {
    check("idmapped-pt", &["--source", "src"]);
}
