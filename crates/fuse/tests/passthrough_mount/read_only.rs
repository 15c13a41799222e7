//! A read-only mount: everything reads, every change is refused (by the
//! kernel and by the server), and the source stays exactly as it was.

use crate::{counter, Pt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Everything about the tree under `root` that a change could touch:
/// per path its type, mode, owner, size, link count, times (atime too,
/// except a symlink's: `readlink` moves it and has no O_NOATIME),
/// contents, symlink target and extended attributes. Read without moving
/// atimes itself (O_NOATIME).
fn tree_snapshot(root: &Path) -> String {
    let script = r#"
import os, sys, hashlib
def walk(fd, rel, out):
    for e in sorted(os.scandir(fd), key=lambda e: e.name):
        p = rel + "/" + e.name
        st = os.stat(e.name, dir_fd=fd, follow_symlinks=False)
        row = [p, oct(st.st_mode), st.st_uid, st.st_gid, st.st_size, st.st_nlink,
               st.st_mtime_ns, st.st_ctime_ns]
        full = "/proc/self/fd/%d/%s" % (fd, e.name)
        if e.is_symlink():
            row.append(os.readlink(e.name, dir_fd=fd))
        else:
            row.append(st.st_atime_ns)
            row.append(sorted((x, os.getxattr(full, x)) for x in os.listxattr(full)))
        if e.is_file(follow_symlinks=False):
            f = os.open(e.name, os.O_RDONLY | os.O_NOATIME, dir_fd=fd)
            row.append(hashlib.sha256(os.read(f, 1 << 20)).hexdigest())
            os.close(f)
        out.append(repr(row))
        if e.is_dir(follow_symlinks=False):
            d = os.open(e.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOATIME, dir_fd=fd)
            walk(d, p, out)
            os.close(d)
out = []
top = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOATIME)
st = os.fstat(top)
out.append(repr([".", st.st_mtime_ns, st.st_ctime_ns, st.st_atime_ns]))
walk(top, ".", out)
print("\n".join(out))
"#;
    let o = Command::new("python3")
        .args(["-c", script])
        .arg(root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Tries every kind of change under `m` and says what each got
/// (`create EROFS`, ...).
fn try_changes(m: &Path) -> Vec<String> {
    let script = r#"
import os, sys, errno
m = sys.argv[1]
def opened(p, flags, mode=0o644):
    os.close(os.open(p, flags, mode))
ops = [
    ("create", lambda: opened(m + "/new", os.O_CREAT | os.O_WRONLY)),
    ("open-rdwr", lambda: opened(m + "/d/f", os.O_RDWR)),
    ("open-trunc", lambda: opened(m + "/d/f", os.O_WRONLY | os.O_TRUNC)),
    ("tmpfile", lambda: opened(m + "/d", os.O_TMPFILE | os.O_WRONLY, 0o600)),
    ("truncate", lambda: os.truncate(m + "/d/f", 0)),
    ("mkdir", lambda: os.mkdir(m + "/nd")),
    ("rmdir", lambda: os.rmdir(m + "/e")),
    ("unlink", lambda: os.unlink(m + "/d/f")),
    ("rename", lambda: os.rename(m + "/d", m + "/d2")),
    ("symlink", lambda: os.symlink("x", m + "/s2")),
    ("link", lambda: os.link(m + "/d/f", m + "/h")),
    ("mknod", lambda: os.mkfifo(m + "/p")),
    ("chmod", lambda: os.chmod(m + "/d/f", 0o600)),
    ("chown", lambda: os.chown(m + "/d/f", 1000, 1000)),
    ("utimes", lambda: os.utime(m + "/d/f", (0, 0))),
    ("setxattr", lambda: os.setxattr(m + "/d/f", "user.k", b"2")),
    ("removexattr", lambda: os.removexattr(m + "/d/f", "user.k")),
]
for name, op in ops:
    try:
        op()
        print(name, "done")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
"#;
    let o = Command::new("python3")
        .args(["-c", script])
        .arg(m)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_read_only_mount_leaves_its_source_exactly_as_it_was() {
    // Old atimes, which a read would move (relatime moves any atime
    // older than the mtime or a day).
    let old = std::fs::FileTimes::new()
        .set_accessed(std::time::UNIX_EPOCH + Duration::from_secs(1 << 30));
    let Some(t) = Pt::read_only("ro", |src| {
        std::fs::create_dir_all(src.join("d")).unwrap();
        std::fs::create_dir_all(src.join("e")).unwrap();
        std::fs::write(src.join("d/f"), b"hello").unwrap();
        std::os::unix::fs::symlink("d/f", src.join("l")).unwrap();
        let f =
            std::ffi::CString::new(src.join("d/f").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: NUL-terminated path and name; the value is 1 byte.
        let r =
            unsafe { libc::setxattr(f.as_ptr(), c"user.k".as_ptr(), b"1".as_ptr().cast(), 1, 0) };
        assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
        for p in ["d/f", "d", "e", ""] {
            std::fs::File::open(src.join(p))
                .unwrap()
                .set_times(old)
                .unwrap();
        }
    }) else {
        return;
    };
    let before = tree_snapshot(&t.base.join("src"));

    // Everything reads.
    assert_eq!(std::fs::read(t.m("d/f")).unwrap(), b"hello");
    assert_eq!(std::fs::read(t.m("l")).unwrap(), b"hello");
    assert_eq!(std::fs::read_link(t.m("l")).unwrap(), Path::new("d/f"));
    let names = |p: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&t.m("")), ["d", "e", "l"]);
    assert_eq!(names(&t.m("d")), ["f"]);
    assert_eq!(
        tree_snapshot(&t.base.join("mnt")).lines().count(),
        before.lines().count()
    );

    // The kernel refuses changes on the read-only mount...
    let st = nix_statvfs(&t.m(""));
    assert_ne!(st.f_flag & libc::ST_RDONLY, 0, "statvfs says read-write");
    let all_erofs = |got: Vec<String>| {
        assert_eq!(got.len(), 17, "{got:?}");
        for g in &got {
            assert!(g.ends_with(" EROFS"), "{g} (all: {got:?})");
        }
    };
    all_erofs(try_changes(&t.m("")));

    // ...and the server refuses them too once the kernel sends them: the
    // promise is the server's, not only the mount flag's.
    let mnt = std::ffi::CString::new(t.m("").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated path; a remount reads no source, type or data.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            mnt.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT,
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "remount rw: {}", std::io::Error::last_os_error());
    assert_eq!(
        nix_statvfs(&t.m("")).f_flag & libc::ST_RDONLY,
        0,
        "still read-only"
    );
    all_erofs(try_changes(&t.m("")));
    let report = t.mount.as_ref().unwrap().report(false);
    for op in [
        "create",
        "open",
        "tmpfile",
        "setattr",
        "mkdir",
        "rmdir",
        "unlink",
        "rename",
        "symlink",
        "link",
        "mknod",
        "setxattr",
        "removexattr",
    ] {
        let n = report["counters"][format!("fuse.requests.op.{op}")]
            .as_u64()
            .unwrap();
        assert!(n > 0, "no {op} reached the server");
    }
    // Reads came to the server (which reads with O_NOATIME), not to the
    // kernel on the source files.
    assert!(counter(&t, "fuse.requests.op.read") > 0);
    assert_eq!(counter(&t, "fuse.kernel_io.opens"), 0);

    // Nothing changed in the source, atimes included.
    assert_eq!(tree_snapshot(&t.base.join("src")), before);
}

/// `statvfs(2)` of `p`.
fn nix_statvfs(p: &Path) -> libc::statvfs {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: all-zero bytes are a valid statvfs (plain integers).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated path; `st` is a valid out-pointer.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st
}
