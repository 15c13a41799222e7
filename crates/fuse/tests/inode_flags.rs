//! Inode flags (`chattr`/`lsattr`) through a real mount: the kernel sends
//! them as FUSE_IOCTL, memfs keeps and enforces them as tmpfs does, a
//! passthrough sets them on its source, whose file system enforces them.
//! The same transcript must come out of both. Skipped where FUSE cannot be
//! mounted.

mod common;

use common::{fuse_usable, Mnt};
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

const FS_IOC_GETFLAGS: libc::Ioctl = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::Ioctl = 0x4008_6602;
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;
const FS_DAX_FL: u32 = 0x0200_0000;

fn get_flags(p: &Path) -> std::io::Result<u32> {
    let f = fs::File::open(p)?;
    let mut v: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int to the pointer, which points
    // at one; the fd is open.
    if unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS, &mut v as *mut libc::c_int) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v as u32)
}

fn set_flags(p: &Path, v: u32) -> std::io::Result<()> {
    let f = fs::File::open(p)?;
    let v = v as libc::c_int;
    // SAFETY: FS_IOC_SETFLAGS reads one int from the pointer, which points
    // at one; the fd is open.
    if unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &v as *const libc::c_int) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `lsattr`'s flag letters for `p` (its first word).
fn lsattr(p: &Path) -> String {
    let out = Command::new("lsattr")
        .arg(p)
        .output()
        .expect("lsattr (e2fsprogs)");
    assert!(out.status.success(), "lsattr {}: {:?}", p.display(), out);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// "ok" or the errno's name of an operation.
fn res<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => "EPERM".into(),
        Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
    }
}

fn setxattr(p: &Path) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated strings and a 1-byte value.
    let r = unsafe { libc::setxattr(c.as_ptr(), c"user.x".as_ptr(), c"1".as_ptr().cast(), 1, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `utimes(p, NULL)`: the times set to now, as `touch` does.
fn touch(p: &Path) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; a null times pointer means "now".
    if unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), std::ptr::null(), 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn append(p: &Path, data: &[u8]) -> std::io::Result<()> {
    OpenOptions::new().append(true).open(p)?.write_all(data)
}

/// What chattr +i, -i, +a and -a do to `dir/f` and the calls around it.
fn transcript(dir: &Path) -> Vec<String> {
    let f = dir.join("f");
    let mut t = Vec::new();
    fs::write(&f, b"hi\n").unwrap();
    let mut early = OpenOptions::new().write(true).open(&f).unwrap();
    let base = get_flags(&f).unwrap();
    t.push(format!(
        "+i: {}",
        res(set_flags(&f, base | FS_IMMUTABLE_FL))
    ));
    t.push(format!(
        "flags has i: {}",
        get_flags(&f).unwrap() & FS_IMMUTABLE_FL != 0
    ));
    t.push(format!("lsattr has i: {}", lsattr(&f).contains('i')));
    t.push(format!("append: {}", res(append(&f, b"no\n"))));
    t.push(format!(
        "write opened before: {}",
        res(early.write_all(b"no"))
    ));
    t.push(format!(
        "open O_TRUNC: {}",
        res(OpenOptions::new().write(true).truncate(true).open(&f))
    ));
    t.push(format!("truncate: {}", res(early.set_len(0))));
    t.push(format!(
        "chmod: {}",
        res(fs::set_permissions(&f, fs::Permissions::from_mode(0o600)))
    ));
    t.push(format!("touch: {}", res(touch(&f))));
    t.push(format!("setxattr: {}", res(setxattr(&f))));
    t.push(format!("link: {}", res(fs::hard_link(&f, dir.join("l")))));
    t.push(format!("rename: {}", res(fs::rename(&f, dir.join("g")))));
    t.push(format!("unlink: {}", res(fs::remove_file(&f))));
    t.push(format!("-i: {}", res(set_flags(&f, base))));
    t.push(format!("append after -i: {}", res(append(&f, b"more\n"))));
    drop(early);

    t.push(format!("+a: {}", res(set_flags(&f, base | FS_APPEND_FL))));
    t.push(format!("lsattr has a: {}", lsattr(&f).contains('a')));
    t.push(format!(
        "open O_WRONLY: {}",
        res(OpenOptions::new().write(true).open(&f))
    ));
    t.push(format!("append: {}", res(append(&f, b"end\n"))));
    let appender = OpenOptions::new().append(true).open(&f).unwrap();
    t.push(format!("ftruncate: {}", res(appender.set_len(0))));
    drop(appender);
    t.push(format!(
        "chmod: {}",
        res(fs::set_permissions(&f, fs::Permissions::from_mode(0o600)))
    ));
    t.push(format!("touch: {}", res(touch(&f))));
    t.push(format!("setxattr: {}", res(setxattr(&f))));
    t.push(format!("unlink: {}", res(fs::remove_file(&f))));
    t.push(format!("-a: {}", res(set_flags(&f, base))));
    t.push(format!("contents: {:?}", fs::read_to_string(&f).unwrap()));

    // A directory: immutable takes no new names, append-only keeps its
    // names but takes new ones.
    let d = dir.join("d");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("old"), b"").unwrap();
    let dbase = get_flags(&d).unwrap();
    t.push(format!(
        "dir +i: {}",
        res(set_flags(&d, dbase | FS_IMMUTABLE_FL))
    ));
    t.push(format!(
        "create in +i dir: {}",
        res(fs::write(d.join("new"), b""))
    ));
    t.push(format!(
        "dir +a: {}",
        res(set_flags(&d, dbase | FS_APPEND_FL))
    ));
    t.push(format!(
        "create in +a dir: {}",
        res(fs::write(d.join("new"), b""))
    ));
    t.push(format!(
        "unlink in +a dir: {}",
        res(fs::remove_file(d.join("old")))
    ));
    t.push(format!("dir -a: {}", res(set_flags(&d, dbase))));
    t.push(format!(
        "unlink after: {}",
        res(fs::remove_file(d.join("old")))
    ));
    t.push(format!("unlink f: {}", res(fs::remove_file(&f))));
    t
}

const EXPECTED: &[&str] = &[
    "+i: ok",
    "flags has i: true",
    "lsattr has i: true",
    "append: EPERM",
    "write opened before: EPERM",
    "open O_TRUNC: EPERM",
    "truncate: EPERM",
    "chmod: EPERM",
    "touch: EPERM",
    "setxattr: EPERM",
    "link: EPERM",
    "rename: EPERM",
    "unlink: EPERM",
    "-i: ok",
    "append after -i: ok",
    "+a: ok",
    "lsattr has a: true",
    "open O_WRONLY: EPERM",
    "append: ok",
    "ftruncate: EPERM",
    "chmod: EPERM",
    "touch: ok",
    "setxattr: EPERM",
    "unlink: EPERM",
    "-a: ok",
    "contents: \"hi\\nmore\\nend\\n\"",
    "dir +i: ok",
    "create in +i dir: EPERM",
    "dir +a: ok",
    "create in +a dir: ok",
    "unlink in +a dir: EPERM",
    "dir -a: ok",
    "unlink after: ok",
    "unlink f: ok",
];

#[test]
fn memfs_keeps_and_enforces_immutable_and_append_only() {
    let Some(m) = Mnt::new(None) else { return };
    assert_eq!(transcript(&m.dir), EXPECTED);
}

/// The reference: Linux on tmpfs, whose flags memfs copies. memfs is as
/// strict as ext4 (and so as a passthrough on it) where tmpfs is not: a
/// descriptor opened for writing before the file became immutable can
/// still write and truncate on tmpfs, whose only check is at open; ext4
/// refuses both (`ext4_write_checks`, `ext4_setattr`).
#[test]
fn tmpfs_differs_only_on_descriptors_opened_before() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: chattr +i needs root");
        return;
    }
    let d = PathBuf::from(format!("/dev/shm/uvfs-iflags-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    let t = transcript(&d);
    let _ = fs::remove_dir_all(&d);
    let differ: Vec<_> = t
        .iter()
        .zip(EXPECTED)
        .filter(|(a, b)| a != *b)
        .map(|(a, _)| a.as_str())
        .collect();
    assert_eq!(t.len(), EXPECTED.len());
    assert_eq!(
        differ,
        [
            "write opened before: ok",
            "truncate: ok",
            "contents: \"more\\nend\\n\"",
        ]
    );
}

#[test]
fn passthrough_sets_flags_on_its_source() {
    if let Err(why) = fuse_usable() {
        eprintln!("SKIP: {why}");
        return;
    }
    // Under /var/tmp: a disk file system with inode flags.
    let base = PathBuf::from(format!("/var/tmp/uvfs-iflags-{}", std::process::id()));
    let _ = fs::remove_dir_all(&base);
    let (src, mnt) = (base.join("src"), base.join("mnt"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    fs::write(src.join("probe"), b"").unwrap();
    if get_flags(&src.join("probe")).is_err() {
        eprintln!("SKIP: the source file system has no inode flags");
        let _ = fs::remove_dir_all(&base);
        return;
    }
    let layer = VnodeLayer::new(Config::with_limit(4096));
    let fs = PassthroughFs::new(layer.clone(), &src, PassthroughConfig::default()).unwrap();
    let ttl = Duration::from_millis(200);
    let cfg = ServeConfig {
        timeouts: Timeouts {
            entry: ttl,
            attr: ttl,
        },
        fsname: "uvfs-iflags".into(),
        uring: common::uring(),
        mount_flags: 0,
        kernel_io: true,
        dir_refresh: true,
        ..ServeConfig::new(mnt.clone())
    };
    let mount: BackgroundMount = BackgroundMount::start(fs, layer, &cfg).expect("mount");
    let t = transcript(&mnt);
    // The flag is the source's own: set through the mount, seen there.
    fs::write(mnt.join("s"), b"").unwrap();
    set_flags(
        &mnt.join("s"),
        get_flags(&mnt.join("s")).unwrap() | FS_IMMUTABLE_FL,
    )
    .unwrap();
    let on_source = get_flags(&src.join("s")).unwrap() & FS_IMMUTABLE_FL != 0;
    let _ = set_flags(&src.join("s"), 0);
    // DAX is not passed on: the mount could not honour it.
    let dax = res(set_flags(
        &mnt.join("s"),
        get_flags(&mnt.join("s")).unwrap() | FS_DAX_FL,
    ));
    // FITRIM reaches the server from anyone (the kernel leaves the check
    // to the file system); only an administrator's is passed on.
    let stranger_trim = Command::new("fstrim")
        .arg(&mnt)
        .uid(1000)
        .output()
        .expect("fstrim (util-linux)");
    mount.unmount().expect("unmount");
    let _ = fs::remove_dir_all(&base);
    assert_eq!(t, EXPECTED);
    assert!(on_source, "the source file is not immutable");
    assert_eq!(dax, format!("errno {}", libc::EOPNOTSUPP));
    assert!(
        !stranger_trim.status.success(),
        "fstrim by uid 1000 succeeded"
    );
    let why = String::from_utf8_lossy(&stranger_trim.stderr);
    assert!(why.contains("Operation not permitted"), "fstrim: {why}");
}
