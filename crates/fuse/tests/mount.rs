//! Black-box tests: mount memfs through FUSE into a temp dir, use it with
//! std::fs and libc, unmount. Skipped (with a message) only where FUSE
//! cannot be mounted: no usable /dev/fuse or not root.

mod common;

use common::{scratch_dir, serve_memfs, serve_memfs_as, Mnt};
use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

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
fn closes_cost_no_flush_and_mapped_writes_still_land() {
    // memfs has nothing to do on a close, so opens tell the kernel to skip
    // FLUSH (a round trip per close). The kernel writes what a shared
    // mapping dirtied back when it is unmapped, so the server still has
    // it by the time the file is released.
    let Some(m) = Mnt::new(Some(64 * 4096)) else {
        return;
    };
    let flushes = || {
        m.report(false)["counters"]["fuse.requests.op.flush"]
            .as_u64()
            .unwrap()
    };
    fs::write(m.p("f"), vec![0u8; 8192]).unwrap();
    let before = flushes();
    for _ in 0..50 {
        let mut buf = Vec::new();
        fs::File::open(m.p("f"))
            .unwrap()
            .read_to_end(&mut buf)
            .unwrap();
        assert_eq!(buf.len(), 8192);
        let mut w = fs::OpenOptions::new().append(true).open(m.p("f")).unwrap();
        w.write_all(b"").unwrap();
    }
    assert_eq!(flushes(), before, "FLUSHes for closes");

    // Written through a shared mapping, unmapped, closed: the page is the
    // server's (SEEK_DATA finds it) once the file is released.
    let mut child = map_and_write(&m.p("mapped"), 3 * 4096, 4096);
    child.stdin.take();
    assert_eq!(said(&mut child), "fsync ok");
    assert!(child.wait().unwrap().success());
    // RELEASE follows close asynchronously; until it lands the server
    // answers "all data" for a file open for writing.
    let deadline = Instant::now() + Duration::from_secs(10);
    let f = fs::File::open(m.p("mapped")).unwrap();
    loop {
        // SAFETY: lseek on an open descriptor.
        let data = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA) };
        if data == 4096 {
            break;
        }
        assert_eq!(data, 0, "SEEK_DATA skipped the mapped page");
        assert!(Instant::now() < deadline, "file still open for writing");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut page = vec![0u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut page, 4096).unwrap();
    assert!(page.iter().all(|&c| c == b'D'));

    // A mapped page that does not fit (--size) is reported by fsync, not
    // lost silently, and what was written before stays.
    let mut fill = fs::File::create(m.p("fill")).unwrap();
    let mut filled = 0;
    while fill.write_all(&[1u8; 4096]).is_ok() {
        filled += 4096;
    }
    drop(fill);
    let mut child = map_and_write(&m.p("too-big"), 4 * 4096, 3 * 4096);
    child.stdin.take();
    assert_eq!(said(&mut child), "fsync errno 28", "a page past --size");
    assert!(child.wait().unwrap().success());
    assert_eq!(fs::metadata(m.p("fill")).unwrap().len(), filled);
    assert!(fs::read(m.p("fill")).unwrap().iter().all(|&c| c == 1));
}

#[test]
fn a_mount_dropped_while_busy_leaves_the_tree() {
    // Dropping a BackgroundMount that a process still uses (a failing
    // test's unwinding, say) used to leave the mount in place, dead once
    // this process exits. It is detached instead; its user keeps its file.
    if let Err(why) = common::fuse_usable() {
        eprintln!("SKIP: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uvfs-fuse-busy-drop-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let m = serve_memfs(&dir, None, 1024);
    fs::write(dir.join("f"), b"still here").unwrap();
    let mut held = fs::File::open(dir.join("f")).unwrap();
    drop(m);
    let listed = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()));
    let mut data = String::new();
    let read = held.read_to_string(&mut data);
    drop(held);
    if listed {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&dir)
            .status();
    }
    let _ = fs::remove_dir(&dir);
    assert!(!listed, "the busy mount stayed in the tree");
    read.unwrap();
    assert_eq!(data, "still here");
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
fn forgets_release_every_vnode() {
    let Some(m) = Mnt::new(None) else { return };
    fs::create_dir(m.p("d")).unwrap();
    for i in 0..300 {
        fs::write(m.p(&format!("d/f{i}")), b"x").unwrap();
    }
    for e in fs::read_dir(m.p("d")).unwrap() {
        fs::metadata(e.unwrap().path()).unwrap();
    }
    // Counted cumulatively: other tests of this binary drop the kernel's
    // caches too, so the nodes may already be going.
    let remembered = &m.report(false)["counters"]["fuse.nodes.remembered"];
    assert!(remembered.as_u64().unwrap() > 300, "{remembered}");
    // Ask the kernel to drop its caches; it then FORGETs every node but
    // the root. Wait (bounded) for the FORGETs to arrive.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
        let r = m.report(true);
        if r["accounting"]["kernel_nodes"] == 1 && r["accounting"]["ok"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nodes not forgotten: {}",
            r["accounting"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Everything still there after the vnodes went.
    assert_eq!(fs::read_dir(m.p("d")).unwrap().count(), 300);
    assert_eq!(fs::read(m.p("d/f7")).unwrap(), b"x");
}

/// Waits (bounded) until `f` holds for the mount's counters.
fn until_counters(m: &Mnt, what: &str, f: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = m.report(false);
        if f(&r["counters"]) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {}", r["counters"]);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn eviction_leaves_what_is_in_use_alone() {
    // 300 new nodes against a limit of 100: the server asks the kernel to
    // forget cold ones. A directory in use (a cwd, here an open fd) and a
    // file system mounted on a directory of ours must survive that; entry
    // invalidation unhashed both (getcwd ENOENT, the mount detached).
    let Some(m) = Mnt::with_limit(None, 100) else {
        return;
    };
    fs::create_dir_all(m.p("a/b")).unwrap();
    fs::create_dir(m.p("mp")).unwrap();
    let cwd = fs::File::open(m.p("a/b")).unwrap();
    let mp = cstr(&m.p("mp"));
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"none".as_ptr(),
            mp.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
    struct Umount(CString);
    impl Drop for Umount {
        fn drop(&mut self) {
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let _tmpfs = Umount(mp);
    fs::write(m.p("mp/inside"), b"tmpfs data").unwrap();

    for i in 0..300 {
        fs::write(m.p(&format!("f{i}")), b"x").unwrap();
    }
    until_counters(&m, "the kernel forgot cold nodes", |c| {
        c["fuse.evict.sent"].as_u64().unwrap() > 0 && c["fuse.nodes"].as_u64().unwrap() <= 100
    });
    let fd_path = fs::read_link(format!("/proc/self/fd/{}", cwd.as_raw_fd())).unwrap();
    assert_eq!(fd_path, m.p("a/b"), "a directory in use was cut off");
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        mounts.contains(&format!(" {} tmpfs ", m.p("mp").display())),
        "the tmpfs mounted inside was detached"
    );
    assert_eq!(fs::read(m.p("mp/inside")).unwrap(), b"tmpfs data");
    assert_eq!(fs::read_dir(&m.dir).unwrap().count(), 302);
}

#[test]
fn free_vnodes_do_not_make_the_server_evict() {
    // Linked files the kernel has forgotten keep free vnodes, which the
    // layer recycles by itself at the limit. Enough of them to pass high
    // water must not make the server ask the kernel to forget the few
    // nodes it does hold (which used to cost every new node its dentry).
    let Some(m) = Mnt::with_limit(None, 400) else {
        return;
    };
    fs::create_dir(m.p("d")).unwrap();
    for i in 0..380 {
        fs::write(m.p(&format!("d/f{i}")), b"x").unwrap();
    }
    until_counters(&m, "the kernel forgets the files", |c| {
        let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
        c["fuse.nodes"].as_u64().unwrap() <= 2
    });
    let before = m.report(false)["counters"]["fuse.evict.sent"]
        .as_u64()
        .unwrap();
    let held: Vec<fs::File> = (0..20)
        .map(|i| fs::File::create(m.p(&format!("new{i}"))).unwrap())
        .collect();
    // Give the evictor time to act, were it to.
    std::thread::sleep(Duration::from_millis(200));
    let c = m.report(false)["counters"].clone();
    assert!(c["mount.vnodes"].as_u64().unwrap() > 350, "{c}");
    assert_eq!(c["fuse.evict.sent"].as_u64().unwrap(), before, "{c}");
    assert!(c["fuse.nodes"].as_u64().unwrap() >= 21, "{c}");
    drop(held);
}

#[test]
fn file_handles_outlive_the_kernel_forgetting_the_node() {
    let Some(m) = Mnt::new(None) else { return };
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/f"), b"by handle").unwrap();
    fs::write(m.p("d/gone"), b"x").unwrap();
    let hf = common::handle_of(&m.p("d/f"));
    let hd = common::handle_of(&m.p("d"));
    let hg = common::handle_of(&m.p("d/gone"));
    fs::remove_file(m.p("d/gone")).unwrap();
    // The kernel forgets every node but the root.
    until_counters(&m, "the kernel forgets its nodes", |c| {
        let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
        c["fuse.nodes"].as_u64().unwrap() == 1
    });
    let mut data = Vec::new();
    common::open_handle(&m.dir, &hf)
        .unwrap()
        .read_to_end(&mut data)
        .unwrap();
    assert_eq!(data, b"by handle");
    let d = common::open_handle(&m.dir, &hd).unwrap();
    assert!(d.metadata().unwrap().is_dir());
    // A deleted file's handle is stale, not another file.
    assert_eq!(errno_of(common::open_handle(&m.dir, &hg)), libc::ESTALE);
}

#[test]
fn seek_data_and_hole_answer_as_tmpfs() {
    let Some(m) = Mnt::new(None) else { return };
    let ours = common::sparse_seeks(&m.p("sparse"));
    let reference =
        std::path::Path::new("/dev/shm").join(format!("uvfs-seek-{}", std::process::id()));
    let theirs = common::sparse_seeks(&reference);
    let _ = fs::remove_file(&reference);
    assert_eq!(ours, theirs);
    // Not the whole file as data (what no LSEEK support would say).
    assert!(ours.contains(&(0, libc::SEEK_HOLE, 4096)), "{ours:?}");
}

#[test]
fn extreme_times_do_not_stop_the_server() {
    // Any file's owner may ask for any tv_sec (the VFS clamps it to
    // -(2^63 - 1) s here); fuser 0.18's release panicked decoding the far
    // ends in its request loop (third_party/fuser/PATCHED.md).
    let Some(m) = Mnt::new(None) else { return };
    fs::write(m.p("f"), b"x").unwrap();
    let path = m.p("f");
    // Off the test thread: a dead request loop leaves the call waiting for
    // good, which must fail the test, not hang it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let c = cstr(&path);
        for (sec, nsec) in [(i64::MIN, 1), (i64::MIN, 0), (i64::MAX, 999_999_999)] {
            let ts = [
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                libc::timespec {
                    tv_sec: sec,
                    tv_nsec: nsec,
                },
            ];
            // SAFETY: a NUL-terminated path and two timespecs. Whatever the
            // answer, the server must go on answering.
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) };
            let _ = fs::metadata(&path);
        }
        let _ = tx.send(fs::read(&path).ok());
    });
    let got = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the server stopped answering");
    assert_eq!(got.as_deref(), Some(&b"x"[..]));
    assert_eq!(m.report(false)["counters"]["fuse.requests.panics"], 0);
}

/// A child process that maps `len` bytes of a new file at `path` shared,
/// fills the page at `at`, and once its stdin closes unmaps the file,
/// fsyncs it (saying "fsync ok" or "fsync errno N") and closes it.
/// Mapped in another process because this one serves the mount: a page
/// fault here holds this process's mmap lock while a request thread may
/// need it to grow its heap, and neither would move.
fn map_and_write(path: &Path, len: usize, at: usize) -> std::process::Child {
    let script = r#"
import mmap, os, sys
path, n, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fd, n)
m = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[at:at + 4096] = b"D" * 4096
print("mapped", flush=True)
sys.stdin.read()
m.close()
try:
    os.fsync(fd)
    print("fsync ok", flush=True)
except OSError as e:
    print("fsync errno", e.errno, flush=True)
os.close(fd)
"#;
    let mut c = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .args([len.to_string(), at.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(said(&mut c), "mapped");
    c
}

/// The next line a child printed.
fn said(c: &mut std::process::Child) -> String {
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    line.trim().to_string()
}

#[test]
fn seek_data_sees_dirty_pages_of_a_shared_mapping() {
    // The kernel asks LSEEK without writing its dirty pages back: a hole
    // the file system has, written through a mapping, must not be skipped
    // by SEEK_DATA (a copy by SEEK_DATA would lose the data).
    let Some(m) = Mnt::new(None) else { return };
    const MB: usize = 1 << 20;
    let mut w = map_and_write(&m.p("mapped"), 4 * MB, MB);
    let r = fs::File::open(m.p("mapped")).unwrap();
    let seek = |f: &fs::File, whence| {
        // SAFETY: plain integer arguments on an fd we hold.
        unsafe { libc::lseek(f.as_raw_fd(), 0, whence) }
    };
    let data = seek(&r, libc::SEEK_DATA);
    assert!(
        (0..=MB as i64).contains(&data),
        "SEEK_DATA skipped the mapped page: {data}"
    );
    w.stdin.take();
    assert!(w.wait().unwrap().success());
    // munmap wrote the page back, but the kernel sends RELEASE
    // asynchronously: until the server has it, the file still counts as
    // open for writing and the answer stays "all data". It must never
    // skip the page, and must become exact once RELEASE arrives.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let data = seek(&r, libc::SEEK_DATA);
        assert!(
            (0..=MB as i64).contains(&data),
            "SEEK_DATA skipped the written-back page: {data}"
        );
        if data == MB as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no exact SEEK_DATA answer 30 s after the writer closed: {data}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(seek(&r, libc::SEEK_HOLE), 0);
}

/// `copy_file_range(2)` through the mount, to its end (calls return
/// short counts, as a caller's loop expects).
fn copy_all(from: &fs::File, to: &fs::File, len: i64) -> i64 {
    let (mut off_in, mut off_out) = (0i64, 0i64);
    while off_in < len {
        // SAFETY: open fds and valid offset pointers.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off_in,
                to.as_raw_fd(),
                &mut off_out,
                (len - off_in) as usize,
                0,
            )
        };
        assert!(n >= 0, "{}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
    }
    off_out
}

#[test]
fn copy_file_range_is_served_in_memory_and_sees_mapped_writes() {
    let Some(m) = Mnt::new(None) else { return };
    const MB: usize = 1 << 20;
    // 20 MiB with a hole in the middle and a page written through a
    // shared mapping that has not been written back yet: the kernel
    // writes it back before asking for the copy.
    let mut w = map_and_write(&m.p("src"), 20 * MB, 18 * MB);
    {
        let mut f = fs::OpenOptions::new().write(true).open(m.p("src")).unwrap();
        f.write_all(&vec![b'A'; 3 * MB]).unwrap();
        f.seek(SeekFrom::Start(10 * MB as u64 + 7)).unwrap();
        f.write_all(b"middle").unwrap();
    }
    let copies = || {
        m.report(false)["counters"]["fuse.requests.op.copy_file_range"]
            .as_u64()
            .unwrap()
    };
    let before = copies();
    let src = fs::File::open(m.p("src")).unwrap();
    let dst = fs::File::create(m.p("dst")).unwrap();
    assert_eq!(copy_all(&src, &dst, 20 * MB as i64), 20 * MB as i64);
    assert!(
        copies() >= before + 3,
        "copies served: {}",
        copies() - before
    );
    w.stdin.take();
    assert!(w.wait().unwrap().success());
    let got = fs::read(m.p("dst")).unwrap();
    assert_eq!(got.len(), 20 * MB);
    assert!(got[..3 * MB].iter().all(|&c| c == b'A'));
    assert_eq!(&got[10 * MB + 7..10 * MB + 13], b"middle");
    assert!(got[18 * MB..18 * MB + 4096].iter().all(|&c| c == b'D'));
    assert_eq!(got, fs::read(m.p("src")).unwrap());
    // Every page of the copy is allocated, holes too, as on tmpfs.
    let blocks = fs::metadata(m.p("dst")).unwrap().blocks();
    assert_eq!(blocks, 20 * MB as u64 / 512);
}

#[test]
fn concurrent_clients() {
    let Some(m) = Mnt::new(None) else { return };
    let m = Arc::new(m);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let p = m.p(&format!("t{t}-{}", i % 20));
                    fs::write(&p, format!("{t}:{i}")).unwrap();
                    let q = m.p(&format!("moved-{}", i % 7));
                    let _ = fs::rename(&p, &q);
                    let _ = fs::remove_file(m.p(&format!("moved-{}", (i + 3) % 7)));
                    let _ = fs::read_dir(&m.dir).unwrap().count();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let r = m.report(false);
    assert_eq!(r["counters"]["fuse.requests.panics"], 0);
    // The kernel sends RELEASE asynchronously after close() returns: wait
    // for the last ones to arrive (a bound on waiting, not on speed).
    let mut open = r["counters"]["fuse.handles.open"].clone();
    for _ in 0..500 {
        if open == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        open = m.report(false)["counters"]["fuse.handles.open"].clone();
    }
    assert_eq!(open, 0, "every open handle released");
    fs::write(m.p("after"), b"ok").unwrap();
}

/// Runs `prog 10`, just written. Another test's child between its fork and
/// its exec holds copies of every fd this process had open at the fork,
/// the one `fs::copy` wrote `prog` through among them, and exec refuses a
/// file open for writing (ETXTBSY, the kernel's own rule, not the
/// server's): try again until that child has exec'd.
fn spawn_fresh(prog: &Path) -> std::process::Child {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::process::Command::new(prog).arg("10").spawn() {
            Ok(c) => return c,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("spawning {}: {e}", prog.display()),
        }
    }
}

/// A program being run keeps its text: write-opens and
/// `open(O_RDONLY | O_TRUNC)` fail with ETXTBSY and change nothing, even
/// in the instant after `spawn` returns, while the exec is still loading
/// pages. (With FUSE_ATOMIC_O_TRUNC the kernel dropped the page cache for
/// a truncating OPEN before checking ETXTBSY: the exec died with SIGSEGV
/// and, when it died first, the open succeeded.)
#[test]
fn running_program_is_text_busy() {
    let Some(m) = Mnt::new(None) else { return };
    let len = fs::metadata("/bin/sleep").unwrap().len();
    for round in 0..30 {
        // A fresh copy each round, as pjdfstest does: its last page is
        // not in the page cache, so the exec still reads from the server
        // after `spawn` returns, which is the window the bug needs.
        let prog = m.p(&format!("prog{round}"));
        fs::copy("/bin/sleep", &prog).unwrap();
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
        let path = cstr(&prog);
        let mut child = spawn_fresh(&prog);
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
            // SAFETY: `path` is a valid NUL-terminated string.
            let fd = unsafe { libc::open(path.as_ptr(), flags) };
            let err = std::io::Error::last_os_error().raw_os_error();
            if fd >= 0 {
                // SAFETY: `fd` was just opened by us.
                unsafe { libc::close(fd) };
            }
            assert!(
                fd < 0 && err == Some(libc::ETXTBSY),
                "round {round}: open({flags:#o}) of a running program: fd {fd}, errno {err:?}"
            );
        }
        let status = child.try_wait().unwrap();
        assert!(
            status.is_none(),
            "round {round}: the running program died: {status:?}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(fs::metadata(&prog).unwrap().len(), len, "round {round}");
        assert_eq!(fs::read(&prog).unwrap(), fs::read("/bin/sleep").unwrap());
    }
}

/// `umount MNT; uvfs mount MNT` while the first server is still on its
/// way out: the old server must not unmount the new mount when its
/// session ends or when asked to unmount (fuser 0.18 did both, by path;
/// seen in CI as a remount whose server vanished). The old mount is
/// detached while a file is open, so it ends only when the test closes
/// that file, after the new mount is up.
#[test]
fn ended_server_leaves_a_new_mount_alone() {
    let Some(mut m) = Mnt::new(None) else { return };
    let old = m.mount.take().unwrap();
    let held = fs::File::create(m.p("old")).unwrap();
    // SAFETY: the path is a valid NUL-terminated string.
    assert_eq!(
        unsafe { libc::umount2(cstr(&m.dir).as_ptr(), libc::MNT_DETACH) },
        0
    );
    let new = serve_memfs(&m.dir, None, 4096);
    fs::write(m.p("new"), b"new").unwrap();
    // Closing the last file of the detached mount destroys it: the old
    // server's request loops end, then it is asked to unmount.
    drop(held);
    old.unmount()
        .expect("unmount of an already unmounted server");
    assert_eq!(fs::read(m.p("new")).unwrap(), b"new");
    assert!(!m.p("old").exists());
    m.mount = Some(new);
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

/// Every counter of the server's subsystems is in the report, with a
/// description: `uvfs stat` readers (scripts, the benchmarks, the tests
/// here and in uvfs-cli) look them up by name.
#[test]
fn the_report_names_every_subsystem_counter() {
    let Some(m) = Mnt::new(None) else { return };
    let r = m.report(false);
    let mut want: Vec<String> = [
        "fuse.changes.entries fuse.changes.everything fuse.changes.failed fuse.changes.inodes",
        "fuse.changes.repeated fuse.evict.kept fuse.evict.max_vnodes fuse.evict.passes",
        "fuse.evict.prune fuse.evict.queued fuse.evict.sent fuse.evict.throttled",
        "fuse.handles.open fuse.kernel_io fuse.kernel_io.open_files",
        "fuse.kernel_io.open_files_server fuse.kernel_io.opens fuse.kernel_io.refused",
        "fuse.kernel_io.registered fuse.locks.waiting fuse.nodes fuse.nodes.forget_excess",
        "fuse.nodes.forgotten fuse.nodes.lookups fuse.nodes.released fuse.nodes.remembered",
        "fuse.offload.threads fuse.refresh.clones fuse.refresh.dropped fuse.refresh.names",
        "fuse.refresh.queued fuse.refresh.refreshed fuse.refresh.stale fuse.refresh.unavailable",
        "fuse.refresh.uncached fuse.refresh.unknown fuse.refresh.untracked fuse.refresh.waiting",
        "fuse.requests fuse.requests.errors fuse.requests.offloaded fuse.requests.panics",
        "fuse.requests.uring fuse.uring fuse.writes.stalled mount.vnodes mount.vnodes.active",
        "mount.vnodes.free process.cpu_us process.rss_bytes server.generation",
        "server.journal.bytes server.journal.entries server.journal.grown",
        "server.journal.unrecorded server.last_pause_us server.restarts server.supervised",
    ]
    .join(" ")
    .split(' ')
    .map(String::from)
    .collect();
    let ops = "lookup getattr readdirplus readdir read write opendir releasedir open release \
               flush create tmpfile mknod mkdir unlink rmdir setattr rename link symlink \
               readlink access statfs fsync fsyncdir fallocate getxattr setxattr listxattr \
               removexattr copy_file_range lseek getlk setlk ioctl statx other";
    want.extend(
        ops.split_whitespace()
            .map(|op| format!("fuse.requests.op.{op}")),
    );
    want.sort();
    let counters = r["counters"].as_object().unwrap();
    let mut got: Vec<String> = counters
        .keys()
        .filter(|k| {
            ["fuse.", "mount.", "server.", "process."]
                .iter()
                .any(|p| k.starts_with(p))
        })
        // Only where this process offered io_uring (`uvfs mount` does).
        .filter(|k| !k.starts_with("fuse.uring.switch"))
        .cloned()
        .collect();
    got.sort();
    assert_eq!(got, want);
    for k in counters.keys() {
        assert!(counters[k].is_u64(), "{k}: {}", counters[k]);
        let d = r["descriptions"][k].as_str().unwrap_or("");
        assert!(!d.is_empty(), "{k} has no description");
    }
    // The memfs and vnode layer's own counters come along.
    assert!(counters.contains_key("memfs.data.bytes"), "{counters:?}");
    assert!(counters.contains_key("vfs.numvnodes"), "{counters:?}");
}
