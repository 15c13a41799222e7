//! What memfs answers through the mount as tmpfs does: names, links,
//! renames, xattrs, times, set-ids, O_TMPFILE, a full file system, and
//! memfs under overlayfs.

use crate::common::{self, scratch_dir, serve_memfs_as, Mnt};
use crate::{cstr, errno_of, until_counters};
use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

#[test]
fn files_dirs_links() {
    let Some(m) = Mnt::new(None) else { return };
    fs::write(m.p("a"), b"hello world").unwrap();
    assert_eq!(fs::read(m.p("a")).unwrap(), b"hello world");
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/x"), b"x").unwrap();
    let mut names: Vec<_> = fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec!["a", "d"]);
    assert_eq!(errno_of(fs::remove_dir(m.p("d"))), libc::ENOTEMPTY);
    fs::hard_link(m.p("a"), m.p("d/a2")).unwrap();
    assert_eq!(fs::metadata(m.p("a")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(m.p("a")).unwrap().ino(),
        fs::metadata(m.p("d/a2")).unwrap().ino()
    );
    std::os::unix::fs::symlink("d/x", m.p("l")).unwrap();
    assert_eq!(fs::read_link(m.p("l")).unwrap(), Path::new("d/x"));
    assert_eq!(fs::read(m.p("l")).unwrap(), b"x");
    fs::rename(m.p("d/x"), m.p("y")).unwrap();
    assert!(fs::metadata(m.p("d/x")).is_err());
    assert_eq!(fs::metadata(&m.dir).unwrap().nlink(), 3);
    let long = "n".repeat(256);
    assert_eq!(errno_of(fs::write(m.p(&long), b"")), libc::ENAMETOOLONG);
    fs::set_permissions(m.p("a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(m.p("a")).unwrap().mode() & 0o7777, 0o600);
}

#[test]
fn times_before_1970_keep_their_nanoseconds() {
    let Some(m) = Mnt::new(None) else { return };
    fs::write(m.p("old"), b"x").unwrap();
    let path = cstr(&m.p("old"));
    for (sec, nsec) in [(-2i64, 500_000_000i64), (-1, 1), (-5, 0), (7, 999_999_999)] {
        let ts = [
            libc::timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            },
            libc::timespec {
                tv_sec: sec - 10,
                tv_nsec: nsec,
            },
        ];
        // SAFETY: `path` is NUL-terminated and `ts` holds two timespecs.
        let r = unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), ts.as_ptr(), 0) };
        assert_eq!(r, 0, "utimensat {sec}.{nsec}");
        let md = fs::metadata(m.p("old")).unwrap();
        assert_eq!((md.atime(), md.atime_nsec()), (sec, nsec), "atime");
        assert_eq!((md.mtime(), md.mtime_nsec()), (sec - 10, nsec), "mtime");
    }
}

#[test]
fn open_unlinked_and_truncate() {
    let Some(m) = Mnt::new(None) else { return };
    let mut f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(m.p("f"))
        .unwrap();
    f.write_all(&vec![5u8; 100_000]).unwrap();
    fs::remove_file(m.p("f")).unwrap();
    assert!(fs::metadata(m.p("f")).is_err());
    f.seek(SeekFrom::Start(99_990)).unwrap();
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, vec![5u8; 10]);
    f.set_len(10).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 10);
    // Sparse: a write far out allocates one page.
    let g = fs::File::create(m.p("sparse")).unwrap();
    g.set_len(1 << 30).unwrap();
    let md = fs::metadata(m.p("sparse")).unwrap();
    assert_eq!((md.len(), md.blocks()), (1 << 30, 0));
}

#[test]
fn rename_flags_and_xattrs() {
    let Some(m) = Mnt::new(None) else { return };
    fs::write(m.p("a"), b"A").unwrap();
    fs::write(m.p("b"), b"B").unwrap();
    let (a, b) = (cstr(&m.p("a")), cstr(&m.p("b")));
    // SAFETY: valid NUL-terminated paths; AT_FDCWD with absolute paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    assert_eq!(
        (rc, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EEXIST))
    );
    // SAFETY: as above.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0);
    assert_eq!(fs::read(m.p("a")).unwrap(), b"B");
    assert_eq!(fs::read(m.p("b")).unwrap(), b"A");
    let (name, val) = (CString::new("user.k").unwrap(), b"v1");
    // SAFETY: valid path, name and value buffers with matching length.
    let rc =
        unsafe { libc::setxattr(a.as_ptr(), name.as_ptr(), val.as_ptr().cast(), val.len(), 0) };
    assert_eq!(rc, 0);
    let mut buf = [0u8; 16];
    // SAFETY: valid path and name; buf is writable for its length.
    let n = unsafe {
        libc::getxattr(
            a.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(&buf[..n as usize], b"v1");
}

#[test]
fn missing_names_are_negative_entries_not_errors() {
    // A LOOKUP that finds nothing is answered with an entry the kernel
    // caches (further stats of the name ask nothing) and is no error.
    let Some(m) = Mnt::new(None) else { return };
    let counter = |name: &str| m.report(false)["counters"][name].as_u64().unwrap();
    let (lookups, errors) = (
        counter("fuse.requests.op.lookup"),
        counter("fuse.requests.errors"),
    );
    for _ in 0..10 {
        let e = fs::symlink_metadata(m.p("missing")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
    assert_eq!(counter("fuse.requests.op.lookup"), lookups + 1);
    assert_eq!(counter("fuse.requests.errors"), errors);
}

#[test]
fn a_listing_ends_while_its_entries_are_renamed_away_and_back() {
    // fstests generic/736: a program renames each entry it reads to a
    // temporary name and back while it goes on reading the directory. The
    // listing must end (there: within 3 entries per file); here each file
    // is listed once. With the kernel opening directories itself (the
    // default) and with OPENDIR sent to the server.
    const N: usize = 5000;
    for opendir in [false, true] {
        let Some(dir) = scratch_dir("uvfs-readdir-renames") else {
            return;
        };
        let mount = serve_memfs_as(&dir, 16384, Default::default(), |c| {
            c.server_opendir = opendir;
        });
        // Unmounted and removed when dropped, a failure included.
        let m = Mnt {
            dir,
            mount: Some(mount),
        };
        let d = m.p("testdir");
        fs::create_dir(&d).unwrap();
        for i in 1..=N {
            fs::File::create(d.join(i.to_string())).unwrap();
        }
        let mut seen = Vec::new();
        for e in fs::read_dir(&d).unwrap() {
            let name = e.unwrap().file_name();
            seen.push(name.to_string_lossy().into_owned());
            assert!(
                seen.len() <= 3 * N,
                "opendir {opendir}: the listing never ends"
            );
            fs::rename(d.join(&name), d.join("TEMPFILE")).unwrap();
            fs::rename(d.join("TEMPFILE"), d.join(&name)).unwrap();
        }
        seen.sort_by_key(|n| n.parse::<usize>().unwrap_or(0));
        let want: Vec<String> = (1..=N).map(|i| i.to_string()).collect();
        assert_eq!(seen, want, "opendir {opendir}");
        fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn o_tmpfile_behaves_as_on_tmpfs() {
    let Some(m) = Mnt::new(None) else { return };
    let shm = Path::new("/dev/shm").join(format!("uvfs-tmpfile-{}", std::process::id()));
    let _ = fs::remove_dir_all(&shm);
    fs::create_dir(&shm).unwrap();
    let theirs = common::tmpfile_transcript(&shm);
    let _ = fs::remove_dir_all(&shm);
    let ours = common::tmpfile_transcript(&m.dir);
    assert_eq!(ours, theirs, "memfs (left) against tmpfs (right)");
    // A tmpfile never linked is freed with its last descriptor.
    let base = m.report(false)["counters"]["memfs.data.bytes"]
        .as_u64()
        .unwrap();
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(&m.dir)
            .unwrap()
    };
    (&f).write_all(&vec![1u8; 1 << 20]).unwrap();
    f.sync_all().unwrap();
    let grown = m.report(false)["counters"]["memfs.data.bytes"]
        .as_u64()
        .unwrap();
    assert!(grown >= base + (1 << 20), "{base} -> {grown}");
    drop(f);
    until_counters(&m, "tmpfile data freed", |c| c["memfs.data.bytes"] == base);
}

#[test]
fn set_ids_go_as_on_tmpfs_and_writes_ask_nothing_more() {
    // FUSE_HANDLE_KILLPRIV_V2: the server drops set-uid/set-gid on a write,
    // truncate or chown by a caller without CAP_FSETID, as the kernel does
    // on tmpfs, and the kernel stops asking GETXATTR security.capability
    // before each write.
    let Some(m) = Mnt::new(None) else { return };
    fs::set_permissions(&m.dir, fs::Permissions::from_mode(0o777)).unwrap();
    let shm = Path::new("/dev/shm").join(format!("uvfs-setid-{}", std::process::id()));
    let _ = fs::remove_dir_all(&shm);
    fs::create_dir(&shm).unwrap();
    fs::set_permissions(&shm, fs::Permissions::from_mode(0o777)).unwrap();
    let theirs = common::set_id_transcript(&shm);
    let _ = fs::remove_dir_all(&shm);
    let ours = common::set_id_transcript(&m.dir);
    assert_eq!(ours, theirs, "memfs (left) against tmpfs (right)");
    let getxattrs = || {
        m.report(false)["counters"]["fuse.requests.op.getxattr"]
            .as_u64()
            .unwrap()
    };
    let f = fs::File::create(m.p("many-writes")).unwrap();
    let before = getxattrs();
    for i in 0..200u64 {
        std::os::unix::fs::FileExt::write_all_at(&f, b"0123456789", i * 10).unwrap();
    }
    assert!(
        getxattrs() <= before + 1,
        "{} GETXATTRs for 200 writes",
        getxattrs() - before
    );
}

#[test]
fn enospc_keeps_data() {
    let Some(m) = Mnt::new(Some(256 * 1024)) else {
        return;
    };
    let mut f = fs::File::create(m.p("big")).unwrap();
    let chunk = vec![7u8; 64 * 1024];
    let mut written = 0;
    let err = loop {
        match f.write(&chunk) {
            Ok(n) => written += n,
            Err(e) => break e,
        }
        assert!(written <= 256 * 1024);
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    drop(f);
    let data = fs::read(m.p("big")).unwrap();
    assert_eq!(data.len(), written);
    assert!(data.iter().all(|&c| c == 7));
    // SAFETY: statvfs is a plain C struct; all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let p = cstr(&m.dir);
    // SAFETY: valid path and a writable statvfs.
    assert_eq!(unsafe { libc::statvfs(p.as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_bfree, 0);
    fs::remove_file(m.p("big")).unwrap();
    fs::write(m.p("small"), b"fits again").unwrap();
}

#[test]
fn overlayfs_upper_layer() {
    // memfs as overlayfs's upper and work directories: what overlayfs
    // needs (whiteouts by RENAME_WHITEOUT or mknod, trusted.* xattrs,
    // O_TMPFILE for copy-up) must be there for a container-style stack.
    let Some(m) = Mnt::new(None) else { return };
    let base = std::env::temp_dir().join(format!("uvfs-ovl-{}", std::process::id()));
    let (lower, merged) = (base.join("lower"), base.join("merged"));
    fs::create_dir_all(lower.join("d")).unwrap();
    fs::create_dir_all(&merged).unwrap();
    fs::write(lower.join("f"), b"lower").unwrap();
    fs::write(lower.join("d/g"), b"deep").unwrap();
    fs::create_dir(m.p("upper")).unwrap();
    fs::create_dir(m.p("work")).unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        m.p("upper").display(),
        m.p("work").display()
    );
    let ok = std::process::Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(&merged)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIP: overlayfs cannot be mounted here");
        let _ = fs::remove_dir_all(&base);
        return;
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fs::remove_file(merged.join("f")).unwrap();
        // A lower file renamed: copied up, its old name whited out.
        fs::rename(merged.join("d/g"), merged.join("d/h")).unwrap();
        fs::write(merged.join("new"), b"upper").unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(merged.join("d/h"))
            .unwrap()
            .write_all(b" copied up")
            .unwrap();
        let names = |p: &Path| {
            let mut v: Vec<_> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&merged), ["d", "new"]);
        assert_eq!(names(&merged.join("d")), ["h"]);
        assert_eq!(fs::read(merged.join("d/h")).unwrap(), b"deep copied up");
        // The removed file is a whiteout (0:0 character device) in memfs.
        use std::os::unix::fs::FileTypeExt;
        for gone in ["upper/f", "upper/d/g"] {
            let w = fs::symlink_metadata(m.p(gone)).unwrap();
            assert!(
                w.file_type().is_char_device() && w.rdev() == 0,
                "{gone}: {w:?}"
            );
        }
        assert_eq!(fs::read(lower.join("f")).unwrap(), b"lower");
    }));
    let _ = std::process::Command::new("umount").arg(&merged).status();
    let _ = fs::remove_dir_all(&base);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}
