//! POSIX ACLs on memfs through the kernel, against tmpfs: the same
//! operations on a memfs mount and on a `/dev/shm` directory must give the
//! same results, modes and stored ACLs, and the kernel must enforce what
//! memfs stores. Skipped where FUSE cannot be mounted.
//!
//! One test only: it sets the process umask, which every thread shares.

mod common;

use common::{
    acl, as_user, set_acl, Mnt, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER,
    ACL_USER_OBJ, NO_ID,
};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errname(e: &std::io::Error) -> String {
    format!("errno {}", e.raw_os_error().unwrap_or(0))
}

/// `getxattr(p, name)` as hex, or the errno.
fn get(p: &Path, name: &str) -> String {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated strings and a buffer of the given length.
    let r = unsafe {
        libc::lgetxattr(
            c(p).as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return errname(&std::io::Error::last_os_error());
    }
    buf[..r as usize]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The attribute names of `p`, sorted.
fn list(p: &Path) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a NUL-terminated path and a buffer of the given length.
    let r = unsafe { libc::llistxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return errname(&std::io::Error::last_os_error());
    }
    let mut names: Vec<_> = buf[..r as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    names.sort();
    names.join(",")
}

fn remove(p: &Path, name: &str) -> String {
    let n = CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings.
    let r = unsafe { libc::lremovexattr(c(p).as_ptr(), n.as_ptr()) };
    if r < 0 {
        errname(&std::io::Error::last_os_error())
    } else {
        "ok".into()
    }
}

fn set(p: &Path, name: &str, v: &[u8]) -> String {
    match set_acl(p, name, v) {
        Ok(()) => "ok".into(),
        Err(e) => errname(&e),
    }
}

fn mode(p: &Path) -> String {
    match fs::symlink_metadata(p) {
        Ok(m) => format!("{:o}", m.mode()),
        Err(e) => errname(&e),
    }
}

/// Everything ACL-related about `p`.
fn state(p: &Path) -> String {
    format!(
        "mode {} access {} default {} names [{}]",
        mode(p),
        get(p, ACCESS),
        get(p, DEFAULT),
        list(p)
    )
}

fn umask(m: u32) {
    // SAFETY: umask takes a plain mode and cannot fail.
    unsafe { libc::umask(m) };
}

/// Runs the script under `root` and returns what each step saw.
fn transcript(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let p = |rel: &str| root.join(rel);
    let mut log = |step: &str, what: String| out.push(format!("{step}: {what}"));
    umask(0o022);

    // An extended access ACL: the mask becomes the group bits; chmod
    // moves the mask, not the group entry.
    fs::write(p("f"), b"x").unwrap();
    let ext = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_USER, 4, 1000),
        (ACL_USER, 7, 1001),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_MASK, 6, NO_ID),
        (ACL_OTHER, 0, NO_ID),
    ]);
    log("set ext", set(&p("f"), ACCESS, &ext));
    log("after set ext", state(&p("f")));
    fs::set_permissions(p("f"), fs::Permissions::from_mode(0o751)).unwrap();
    log("chmod 751", state(&p("f")));
    fs::hard_link(p("f"), p("f-link")).unwrap();
    log("hard link", state(&p("f-link")));
    // An ACL the mode bits can say is folded into them.
    let minimal = acl(&[
        (ACL_USER_OBJ, 7, NO_ID),
        (ACL_GROUP_OBJ, 5, NO_ID),
        (ACL_OTHER, 1, NO_ID),
    ]);
    log("set minimal", set(&p("f"), ACCESS, &minimal));
    log("after minimal", state(&p("f")));
    log("remove none", remove(&p("f"), ACCESS));
    log("set ext again", set(&p("f"), ACCESS, &ext));
    log("remove ext", remove(&p("f"), ACCESS));
    log("after remove", state(&p("f")));
    log("empty acl", set(&p("f"), ACCESS, &2u32.to_le_bytes()));
    log("after empty", state(&p("f")));
    // What the kernel refuses, and default ACLs on non-directories.
    let no_mask = acl(&[
        (ACL_USER_OBJ, 7, NO_ID),
        (ACL_USER, 7, 5),
        (ACL_GROUP_OBJ, 5, NO_ID),
        (ACL_OTHER, 5, NO_ID),
    ]);
    log("no mask", set(&p("f"), ACCESS, &no_mask));
    log(
        "bad version",
        set(&p("f"), ACCESS, &{
            let mut v = minimal.clone();
            v[0] = 1;
            v
        }),
    );
    log("default on file", set(&p("f"), DEFAULT, &minimal));
    log("remove default on file", remove(&p("f"), DEFAULT));
    std::os::unix::fs::symlink("f", p("l")).unwrap();
    log("symlink set", set(&p("l"), ACCESS, &minimal));
    log("symlink", state(&p("l")));
    log("other system name", remove(&p("f"), "system.other"));

    // A default ACL replaces the umask beneath and is inherited by
    // directories.
    fs::create_dir(p("d")).unwrap();
    fs::set_permissions(p("d"), fs::Permissions::from_mode(0o777)).unwrap();
    let dflt = acl(&[
        (ACL_USER_OBJ, 7, NO_ID),
        (ACL_GROUP_OBJ, 5, NO_ID),
        (ACL_GROUP, 7, 100),
        (ACL_MASK, 7, NO_ID),
        (ACL_OTHER, 0, NO_ID),
    ]);
    log("set default", set(&p("d"), DEFAULT, &dflt));
    log("dir", state(&p("d")));
    umask(0o077);
    fs::write(p("d/f"), b"").unwrap();
    fs::create_dir(p("d/sub")).unwrap();
    fs::write(p("d/sub/g"), b"").unwrap();
    std::os::unix::fs::symlink("f", p("d/l")).unwrap();
    let fifo = c(&p("d/fifo"));
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    umask(0o022);
    for n in ["d/f", "d/sub", "d/sub/g", "d/l", "d/fifo"] {
        log(n, state(&p(n)));
    }
    // A minimal default ACL: its bits cut the mode, nothing is stored on
    // the new file.
    let mdflt = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_OTHER, 0, NO_ID),
    ]);
    log("set minimal default", set(&p("d/sub"), DEFAULT, &mdflt));
    fs::create_dir(p("d/sub/s2")).unwrap();
    fs::write(p("d/sub/h"), b"").unwrap();
    log("d/sub/s2", state(&p("d/sub/s2")));
    log("d/sub/h", state(&p("d/sub/h")));
    log("remove default", remove(&p("d"), DEFAULT));
    fs::write(p("d/after"), b"").unwrap();
    log("d/after", state(&p("d/after")));

    // Set-gid goes when an owner outside the file's group changes the
    // access ACL, as with chmod.
    for n in ["sg-set", "sg-remove"] {
        fs::write(p(n), b"").unwrap();
        std::os::unix::fs::chown(p(n), Some(1000), Some(2000)).unwrap();
        fs::set_permissions(p(n), fs::Permissions::from_mode(0o2775)).unwrap();
    }
    let hex: String = ext.iter().map(|b| format!("{b:02x}")).collect();
    let py = |code: String| as_user(&format!("python3 -c '{code}'"));
    log(
        "sgid set as owner",
        py(format!(
            "import os; os.setxattr(\"{}\", \"{ACCESS}\", bytes.fromhex(\"{hex}\"))",
            p("sg-set").display()
        ))
        .to_string(),
    );
    log("sg-set", state(&p("sg-set")));
    log(
        "sgid remove as owner",
        py(format!(
            "import os; os.removexattr(\"{}\", \"{ACCESS}\")",
            p("sg-remove").display()
        ))
        .to_string(),
    );
    log("sg-remove", state(&p("sg-remove")));
    out
}

#[test]
fn acls_behave_as_on_tmpfs_and_are_enforced() {
    let Some(m) = Mnt::new(None) else { return };
    let shm = Path::new("/dev/shm").join(format!("uvfs-acl-{}", std::process::id()));
    let _ = fs::remove_dir_all(&shm);
    fs::create_dir(&shm).unwrap();
    fs::set_permissions(&shm, fs::Permissions::from_mode(0o755)).unwrap();
    let theirs = transcript(&shm);
    let _ = fs::remove_dir_all(&shm);
    if theirs.iter().any(|l| l.starts_with("set ext: errno")) {
        eprintln!("SKIP: tmpfs here has no POSIX ACLs to compare with");
        return;
    }
    let ours = transcript(&m.dir);
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a, b, "memfs (left) and tmpfs (right) differ");
    }
    assert_eq!(ours.len(), theirs.len());

    // The kernel enforces what memfs stores.
    let f = m.p("secret");
    common::acls_are_enforced(&f);
    // chmod g-w cuts the mask, so the grant goes with it.
    fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    assert!(!as_user(&format!("echo again >> {}", f.display())));
    // A default ACL grants uid 1000 a directory it could not write.
    fs::create_dir(m.p("shared")).unwrap();
    fs::set_permissions(m.p("shared"), fs::Permissions::from_mode(0o755)).unwrap();
    let mk = format!("touch {}/mine", m.p("shared/inner").display());
    let open_to_1000 = acl(&[
        (ACL_USER_OBJ, 7, NO_ID),
        (ACL_USER, 7, 1000),
        (ACL_GROUP_OBJ, 5, NO_ID),
        (ACL_MASK, 7, NO_ID),
        (ACL_OTHER, 5, NO_ID),
    ]);
    set_acl(&m.p("shared"), DEFAULT, &open_to_1000).unwrap();
    fs::create_dir(m.p("shared/inner")).unwrap();
    assert!(
        as_user(&mk),
        "the inherited ACL did not let uid 1000 create"
    );
    assert_eq!(fs::metadata(m.p("shared/inner/mine")).unwrap().uid(), 1000);
}
