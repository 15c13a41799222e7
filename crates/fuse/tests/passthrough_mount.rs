//! A passthrough mount used as a real file system: what its source holds
//! (POSIX ACLs, contents rewritten on the host) must show through the
//! mount as it does natively. Skipped where FUSE cannot be mounted.

mod common;

use common::{
    acl, as_user, fuse_usable, set_acl, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER,
    ACL_USER_OBJ, NO_ID,
};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

/// How long the kernel may trust attributes here.
const ATTR: Duration = Duration::from_millis(200);

struct Pt {
    base: PathBuf,
    mount: Option<BackgroundMount>,
    /// The file system served (for what only the server can do).
    fs: std::sync::Arc<PassthroughFs>,
}

impl Pt {
    fn new(tag: &str) -> Option<Pt> {
        Pt::with_timeouts(tag, ATTR)
    }

    /// With the kernel trusting entries and attributes for `attr`.
    fn with_timeouts(tag: &str, attr: Duration) -> Option<Pt> {
        Pt::build(tag, attr, false, |_| {})
    }

    /// Served read-only, as `uvfs mount --read-only` does, over a source
    /// that `fill` made first.
    fn read_only(tag: &str, fill: impl FnOnce(&Path)) -> Option<Pt> {
        Pt::build(tag, ATTR, true, fill)
    }

    fn build(tag: &str, attr: Duration, read_only: bool, fill: impl FnOnce(&Path)) -> Option<Pt> {
        if let Err(why) = fuse_usable() {
            eprintln!("SKIP: {why}");
            return None;
        }
        // Under /var/tmp: a disk file system with ACLs (the default
        // temp dir may be a tmpfs without them).
        let base = PathBuf::from(format!(
            "/var/tmp/uvfs-pt-mount-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("src")).unwrap();
        std::fs::create_dir_all(base.join("mnt")).unwrap();
        // Others must reach the tree (tests run commands as uid 1000).
        for p in [&base, &base.join("src"), &base.join("mnt")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        fill(&base.join("src"));
        let layer = VnodeLayer::new(Config::with_limit(4096));
        let fs = PassthroughFs::new(
            layer.clone(),
            &base.join("src"),
            PassthroughConfig {
                no_atime: read_only,
                ..PassthroughConfig::default()
            },
        )
        .unwrap();
        let cfg = ServeConfig {
            mountpoint: base.join("mnt"),
            threads: 2,
            timeouts: Timeouts { entry: attr, attr },
            fsname: format!("uvfs-pt-{tag}"),
            control: false,
            server_opendir: false,
            uring: common::uring(),
            read_only,
            mount_flags: 0,
            // As `uvfs mount --source` serves. (It does not ask when
            // read-only; here the file system's refusal to offer backing
            // files is then what keeps the source's atimes.)
            kernel_io: true,
            dir_refresh: true,
            allow_other: false,
            successor: None,
            supervise: false,
        };
        let mount = BackgroundMount::start(fs.clone(), layer, &cfg).expect("mount");
        Some(Pt {
            base,
            mount: Some(mount),
            fs,
        })
    }

    fn m(&self, rel: &str) -> PathBuf {
        self.base.join("mnt").join(rel)
    }

    fn src(&self, rel: &str) -> PathBuf {
        self.base.join("src").join(rel)
    }
}

impl Drop for Pt {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            if common::uring() && !std::thread::panicking() {
                common::assert_uring_served(&m.report(false));
            }
            let r = m.unmount();
            if !std::thread::panicking() {
                r.expect("unmount");
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn acls_are_enforced_and_default_acls_replace_the_umask() {
    let Some(t) = Pt::new("acl") else { return };
    // Where the source cannot hold ACLs there is nothing to check.
    std::fs::write(t.src("probe"), b"").unwrap();
    let base = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_OTHER, 4, NO_ID),
    ]);
    if set_acl(&t.src("probe"), "system.posix_acl_access", &base).is_err() {
        eprintln!("SKIP: the source file system has no POSIX ACLs");
        return;
    }

    // The kernel enforces what the source stores.
    let grant = common::acls_are_enforced(&t.m("f"));

    // An owner outside the file's group who sets an ACL loses set-gid,
    // as natively (the server must not set it with its own privilege).
    let g = t.m("sgid");
    std::fs::write(&g, b"").unwrap();
    std::os::unix::fs::chown(&g, Some(1000), Some(2000)).unwrap();
    std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let hex: String = grant.iter().map(|b| format!("{b:02x}")).collect();
    assert!(as_user(&format!(
        "python3 -c 'import os; os.setxattr(\"{}\", \"system.posix_acl_access\", bytes.fromhex(\"{hex}\"))'",
        g.display()
    )));
    let m = std::fs::metadata(&g).unwrap().permissions().mode();
    // (The ACL's entries become the mode bits: rw, mask rw, other r.)
    assert_eq!(m & 0o7777, 0o0664, "set-gid kept: {m:o}");

    // A default ACL replaces the umask for what is created beneath, as
    // natively; without one the umask applies.
    for d in ["dd", "plain"] {
        std::fs::create_dir(t.m(d)).unwrap();
        std::fs::set_permissions(t.m(d), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let dflt = acl(&[
        (ACL_USER_OBJ, 7, NO_ID),
        (ACL_GROUP_OBJ, 7, NO_ID),
        (ACL_GROUP, 5, 100),
        (ACL_MASK, 7, NO_ID),
        (ACL_OTHER, 7, NO_ID),
    ]);
    set_acl(&t.m("dd"), "system.posix_acl_default", &dflt).unwrap();
    let mk = |d: &str| format!("umask 022 && touch {0}/f && mkdir {0}/d", t.m(d).display());
    assert!(as_user(&mk("dd")) && as_user(&mk("plain")));
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(t.m("dd/f")), 0o666);
    assert_eq!(mode(t.m("dd/d")), 0o777);
    assert_eq!(mode(t.m("plain/f")), 0o644);
    assert_eq!(mode(t.m("plain/d")), 0o755);
    // The source holds exactly what the mount shows.
    assert_eq!(mode(t.src("dd/f")), 0o666);
    assert_eq!(mode(t.src("plain/d")), 0o755);
}

#[test]
fn contents_rewritten_on_the_host_show_through() {
    let Some(t) = Pt::new("inval") else { return };
    std::fs::write(t.src("g"), b"aaaa 1111").unwrap();
    assert_eq!(std::fs::read(t.m("g")).unwrap(), b"aaaa 1111");
    // Same size, new contents and mtime, written behind the server.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(t.src("g"), b"bbbb 2222").unwrap();
    // Once the attributes expire, the kernel sees the new mtime and
    // drops the pages it cached.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(ATTR);
        let now = std::fs::read(t.m("g")).unwrap();
        if now == b"bbbb 2222" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {:?}",
            String::from_utf8_lossy(&now)
        );
    }
}

#[test]
fn seek_data_and_hole_answer_as_the_source() {
    let Some(t) = Pt::new("seek") else { return };
    let ours = common::sparse_seeks(&t.m("sparse"));
    let theirs = common::sparse_seeks(&t.src("direct"));
    assert_eq!(ours, theirs);
    assert!(ours.contains(&(0, libc::SEEK_HOLE, 4096)), "{ours:?}");
}

#[test]
fn o_tmpfile_behaves_as_on_the_source() {
    let Some(t) = Pt::new("tmpfile") else { return };
    let native = t.base.join("native");
    std::fs::create_dir(&native).unwrap();
    let theirs = common::tmpfile_transcript(&native);
    let ours = common::tmpfile_transcript(&t.m(""));
    assert_eq!(
        ours, theirs,
        "passthrough (left) against its source's file system (right)"
    );
    // Linked through the mount, the file is in the source.
    assert_eq!(std::fs::read(t.src("named")).unwrap(), b"tmpfile data");
}

#[test]
fn an_unlinked_tmpfile_goes_with_its_last_close() {
    let Some(t) = Pt::new("tmpfile-gone") else {
        return;
    };
    // One never linked holds its fd (there is no other way back to it)
    // until the kernel forgets it after the last close; then the vnode
    // and the backing inode go.
    let counter = |name: &str| {
        t.mount.as_ref().unwrap().report(false)["counters"][name]
            .as_u64()
            .unwrap()
    };
    let before = counter("mount.vnodes");
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(t.m(""))
            .unwrap()
    };
    std::io::Write::write_all(&mut &f, &[3u8; 1 << 16]).unwrap();
    assert_eq!(counter("mount.vnodes"), before + 1);
    drop(f);
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter("mount.vnodes") != before {
        assert!(Instant::now() < deadline, "the tmpfile's vnode stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn set_ids_go_as_natively() {
    // The server writes and truncates as root, who keeps set-uid: under
    // FUSE_HANDLE_KILLPRIV_V2 it must drop them for a caller who would not.
    let Some(t) = Pt::new("setid") else { return };
    let native = t.base.join("native");
    std::fs::create_dir(&native).unwrap();
    for d in [&native, &t.src("")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let theirs = common::set_id_transcript(&native);
    let ours = common::set_id_transcript(&t.m(""));
    assert_eq!(
        ours, theirs,
        "passthrough (left) against its source's file system (right)"
    );
}

/// A python helper process taking a lock on `path`: `how` is `flock`,
/// `flock-nb`, `posix`, `posix-nb` (bytes 0..10), `getlk`, or `ofd-wait`
/// (an OFD lock on bytes 0..10, waited for, then let go at once by
/// exiting). It prints what it got, then holds the lock until its stdin
/// closes.
fn locker(how: &str, path: &Path) -> std::process::Child {
    let script = r#"
import fcntl, os, struct, sys
how, path = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
try:
    if how == "flock": fcntl.flock(fd, fcntl.LOCK_EX)
    elif how == "flock-nb": fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    elif how == "posix": fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
    elif how == "posix-nb": fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
    elif how == "getlk":
        fl = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 10, 0)
        t, _, s, l, pid = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, fl))
        print("getlk", "unlocked" if t == fcntl.F_UNLCK else f"locked {s} {l} pid {pid}", flush=True)
        sys.exit(0)
    elif how == "two-fds":
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        fd2 = os.open(path, os.O_RDWR)
        fcntl.lockf(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB, 5, 5)
        os.close(fd2)
    elif how == "ofd-wait":
        fl = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 10, 0)
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, fl)
        print("held", flush=True)
        sys.exit(0)
    elif how == "read-only-close":
        fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
        os.close(os.open(path, os.O_RDONLY))
    print("held", flush=True)
except OSError as e:
    print("errno", e.errno, flush=True)
    sys.exit(1)
sys.stdin.read()
"#;
    Command::new("python3")
        .args(["-c", script, how])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The server's lock-wait thread (this process serves the mount) may run
/// on every CPU at the normal policy, though the first parked request may
/// have started it from an io_uring queue thread pinned to one CPU and
/// serving at SCHED_IDLE, both of which a new thread inherits.
fn lock_waiter_runs_anywhere() {
    let tid = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.trim() == "uvfs-lockwait")
        })
        .and_then(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .expect("a parked lock request but no uvfs-lockwait thread");
    // SAFETY: `tid` is a thread of this process (it may have exited, in
    // which case these fail); the set is a valid, writable cpu_set_t.
    let (policy, cpus, online) = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let r = libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        assert_eq!(
            r,
            0,
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        );
        (
            libc::sched_getscheduler(tid),
            libc::CPU_COUNT(&set),
            libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
        )
    };
    assert_eq!(policy, libc::SCHED_OTHER, "the lock-wait thread's policy");
    assert_eq!(i64::from(cpus), online, "the lock-wait thread's CPUs");
}

/// The first line a locker printed.
fn said(c: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

/// Lets a locker go (closes its stdin) and waits for it.
fn release(mut c: std::process::Child) -> std::process::ExitStatus {
    drop(c.stdin.take());
    c.wait().unwrap()
}

#[test]
fn locks_meet_the_sources_other_users() {
    // flock and POSIX locks taken through the mount land on the backing
    // file: they conflict with the source's other users both ways, waits
    // end when the holder goes, a waiter can be interrupted, and a close
    // drops its process's POSIX locks.
    let Some(t) = Pt::new("locks") else { return };
    std::fs::write(t.src("f"), b"0123456789").unwrap();
    let (host, mnt) = (t.src("f"), t.m("f"));
    let counter = |name: &str| {
        t.mount.as_ref().unwrap().report(false)["counters"][name]
            .as_u64()
            .unwrap()
    };
    // Until `n` lock requests are parked on the server (the locker may
    // take a while to start).
    let until_waiting = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while counter("fuse.locks.waiting") != n {
            assert!(Instant::now() < deadline, "no lock request parked");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    for (lock, nb) in [("flock", "flock-nb"), ("posix", "posix-nb")] {
        // Held on the host: the mount is refused, then waits its turn.
        let mut h = locker(lock, &host);
        assert_eq!(said(&mut h), "held");
        let mut r = locker(nb, &mnt);
        assert_eq!(
            said(&mut r),
            "errno 11",
            "{lock}: the host's lock was not seen"
        );
        r.wait().unwrap();
        let mut w = locker(lock, &mnt);
        until_waiting(1);
        lock_waiter_runs_anywhere();
        assert!(w.try_wait().unwrap().is_none(), "{lock}: got a held lock");
        assert!(release(h).success());
        assert_eq!(said(&mut w), "held", "{lock}: the wait did not end");
        // Held through the mount: the host is refused until it goes.
        let mut r = locker(nb, &host);
        assert_eq!(
            said(&mut r),
            "errno 11",
            "{lock}: the host got a mount-held lock"
        );
        r.wait().unwrap();
        assert!(release(w).success());
        let mut r = locker(nb, &host);
        assert_eq!(said(&mut r), "held", "{lock}: the lock outlived its holder");
        assert!(release(r).success());
    }

    // F_GETLK through the mount names the host's holder.
    let mut h = locker("posix", &host);
    assert_eq!(said(&mut h), "held");
    let pid = h.id();
    let mut g = locker("getlk", &mnt);
    assert_eq!(said(&mut g), format!("getlk locked 0 10 pid {pid}"));
    g.wait().unwrap();
    // A waiter given a signal is answered at once (EINTR), not left
    // waiting on the server.
    let w = locker("posix", &mnt);
    until_waiting(1);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(w.id() as i32, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut w = w;
    while w.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "a killed lock waiter is stuck");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(counter("fuse.locks.waiting"), 0);
    assert!(release(h).success());

    // One process's POSIX locks never conflict among themselves, and its
    // close of any descriptor of the file drops them all.
    let mut p = locker("two-fds", &mnt);
    assert_eq!(said(&mut p), "held");
    let mut r = locker("posix-nb", &host);
    assert_eq!(
        said(&mut r),
        "held",
        "closing the second fd dropped nothing"
    );
    assert!(release(r).success());
    assert!(release(p).success());
    // So does closing a read-only descriptor (the kernel must send its
    // FLUSH even though the file system writes nothing back on it).
    let mut p = locker("read-only-close", &mnt);
    assert_eq!(said(&mut p), "held");
    let mut r = locker("posix-nb", &host);
    assert_eq!(
        said(&mut r),
        "held",
        "closing a read-only fd dropped nothing"
    );
    assert!(release(r).success());
    assert!(release(p).success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter("passthrough.locks.owners") != 0 {
        assert!(Instant::now() < deadline, "lock descriptions left behind");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `fcntl(fd, cmd)` with an OFD lock of type `typ` on bytes 0..10; the
/// type it answers (`F_UNLCK` from F_OFD_GETLK where nothing conflicts).
fn ofd_lock(f: &std::fs::File, cmd: libc::c_int, typ: libc::c_int) -> std::io::Result<i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is a plain C struct; all-zero bytes are a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_len = 10;
    // SAFETY: `fl` is a valid, writable `struct flock` for the call.
    if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl as *mut libc::flock) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(i32::from(fl.l_type))
}

#[test]
fn an_ofd_lock_goes_with_its_open_file() {
    // An OFD lock belongs to the open file it was taken through: closing
    // it drops the lock at once, though other opens of the file remain,
    // for those asking (F_OFD_GETLK) and those waiting (F_OFD_SETLKW).
    let Some(t) = Pt::new("ofd") else { return };
    std::fs::write(t.src("f"), b"0123456789").unwrap();
    let mnt = t.m("f");
    let counter = |name: &str| {
        t.mount.as_ref().unwrap().report(false)["counters"][name]
            .as_u64()
            .unwrap()
    };
    let rw = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&mnt)
            .unwrap()
    };
    // Kept open throughout: the file is never closed by all its users.
    let other = rw();

    // A waiter gets the lock once its holder closes.
    let holder = rw();
    ofd_lock(&holder, libc::F_OFD_SETLK, libc::F_WRLCK).unwrap();
    assert_eq!(
        ofd_lock(&other, libc::F_OFD_GETLK, libc::F_WRLCK).unwrap(),
        libc::F_WRLCK,
        "another open file does not see the lock"
    );
    let mut w = locker("ofd-wait", &mnt);
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter("fuse.locks.waiting") != 1 {
        assert!(Instant::now() < deadline, "no lock request parked");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(20);
    let got = loop {
        if let Some(s) = w.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = w.kill();
            let _ = w.wait();
            panic!("an OFD lock outlived its open file: the waiter never got it");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(got.success(), "the waiter failed: {got}");

    // One asking sees it gone once its holder closes.
    let holder = rw();
    ofd_lock(&holder, libc::F_OFD_SETLK, libc::F_WRLCK).unwrap();
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(10);
    while ofd_lock(&other, libc::F_OFD_GETLK, libc::F_WRLCK).unwrap() != libc::F_UNLCK {
        assert!(
            Instant::now() < deadline,
            "an OFD lock outlived its open file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // And the server keeps no description for it.
    assert_eq!(counter("passthrough.locks.owners"), 0);
    // The lock is free to take through the file that stayed open.
    ofd_lock(&other, libc::F_OFD_SETLK, libc::F_WRLCK).unwrap();
}

#[test]
fn a_file_removed_on_the_host_is_not_opened_by_its_cached_name() {
    // The kernel keeps the name for the entry timeout; the server still
    // reaches the removed file through its cached fd. An open by that
    // name must meet what the source holds now: a new file for O_CREAT
    // (seen by the host), ENOENT without. (It opened the removed file:
    // writes went nowhere, and SQLite on both sides failed at random.)
    let Some(t) = Pt::with_timeouts("removed-host", Duration::from_secs(60)) else {
        return;
    };
    std::fs::write(t.src("j"), b"old").unwrap();
    assert_eq!(std::fs::read(t.m("j")).unwrap(), b"old");
    std::fs::remove_file(t.src("j")).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(t.m("j"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"new").unwrap();
    drop(f);
    assert_eq!(
        std::fs::read(t.src("j")).unwrap(),
        b"new",
        "written nowhere"
    );

    assert_eq!(std::fs::read(t.m("j")).unwrap(), b"new");
    std::fs::remove_file(t.src("j")).unwrap();
    let e = std::fs::File::open(t.m("j")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));

    // A file removed through the mount while open is still open to its
    // holders, and to /proc's links to it.
    std::fs::write(t.m("held"), b"held").unwrap();
    let held = std::fs::File::open(t.m("held")).unwrap();
    std::fs::remove_file(t.m("held")).unwrap();
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&held);
    let again = std::fs::read(format!("/proc/self/fd/{fd}")).unwrap();
    assert_eq!(again, b"held");
}

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

#[test]
fn sqlite_writers_on_the_mount_and_the_host_lose_nothing() {
    // SQLite locks the database (POSIX locks) and then reads it again: the
    // locks must meet the host's, and a granted lock must not leave this
    // mount reading pages the host has changed since (they are dropped
    // before the lock is answered). Writers on both sides, each inserting
    // rows in transactions that read the row count first.
    // `uvfs mount`'s default timeouts (1 s): the kernel's cache of the
    // file outlives a transaction of another user.
    let Some(t) = Pt::with_timeouts("sqlite", Duration::from_secs(1)) else {
        return;
    };
    let script = r#"
import sqlite3, sys
db, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = sqlite3.connect(db, timeout=60)
if tag == "init":
    c.execute("create table t(x)")
    c.commit()
    sys.exit(0)
if tag == "check":
    print(c.execute("select count(*) from t").fetchone()[0],
          c.execute("pragma integrity_check").fetchone()[0])
    sys.exit(0)
for i in range(n):
    with c:
        seen = c.execute("select count(*) from t").fetchone()[0]
        c.execute("insert into t values (?)", (f"{tag}-{i}-{seen}",))
"#;
    let py = |db: &Path, tag: &str| {
        Command::new("python3")
            .args(["-c", script])
            .arg(db)
            .args([tag, "300"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    if !py(&t.src("db"), "init").wait().unwrap().success() {
        eprintln!("SKIP: python3 has no sqlite3 module");
        return;
    }
    let writers = [
        py(&t.m("db"), "mount-a"),
        py(&t.src("db"), "host"),
        py(&t.m("db"), "mount-b"),
    ];
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "a writer failed: {out:?}");
    }
    let out = py(&t.src("db"), "check").wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "900 ok");
}

#[test]
fn a_removed_directory_the_kernel_holds_keeps_its_node_when_its_number_is_reused() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let Some(t) = Pt::with_timeouts("reuse", Duration::ZERO) else {
        return;
    };
    std::fs::create_dir(t.src("old")).unwrap();
    // Held through the mount as a shell's cwd would be: by the kernel
    // alone (an O_PATH open sends no OPENDIR, so no fd of the server's
    // pins the inode, as a directory open through the server would).
    let old = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(t.m("old"))
            .unwrap()
    };
    let ino = std::fs::metadata(t.src("old")).unwrap().ino();
    std::fs::remove_dir(t.src("old")).unwrap();
    // No fd of the server's may pin the removed inode.
    t.fs.drop_idle_fds();
    // ext4 hands the freed number to the next directory made.
    let name = (0..64)
        .map(|i| format!("new{i}"))
        .find(|n| {
            std::fs::create_dir(t.src(n)).unwrap();
            std::fs::metadata(t.src(n)).unwrap().ino() == ino
        })
        .expect("the source file system (/var/tmp) reused no inode number");
    // The kernel meets the new directory while it still holds the old one.
    let st = std::fs::metadata(t.m(&name)).unwrap();
    assert!(st.is_dir());
    assert_ne!(st.ino(), ino, "the new directory took the old one's node");
    // A request for the old one answers ESTALE and touches nothing else.
    let x = std::ffi::CString::new("x").unwrap();
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let r = unsafe { libc::mkdirat(old.as_raw_fd(), x.as_ptr(), 0o755) };
    let err = std::io::Error::last_os_error().raw_os_error();
    assert_eq!((r, err), (-1, Some(libc::ESTALE)));
    assert!(!t.src(&name).join("x").exists());
    // The new one works through the mount, under its own number.
    std::fs::create_dir(t.m(&name).join("y")).unwrap();
    assert!(t.src(&name).join("y").is_dir());
    assert_eq!(std::fs::metadata(t.m(&name)).unwrap().ino(), st.ino());
    let listed = std::fs::read_dir(t.m(""))
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name().as_bytes() == name.as_bytes())
        .unwrap();
    assert_eq!(std::os::unix::fs::DirEntryExt::ino(&listed), st.ino());
}

/// A counter of the running server's statistics.
fn counter(t: &Pt, name: &str) -> u64 {
    let r = t.mount.as_ref().expect("mounted").report(false);
    r["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}: {r}"))
}

#[test]
fn the_kernel_reads_and_writes_open_files_on_their_source_files() {
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::os::unix::fs::{FileExt, MetadataExt};
    let Some(t) = Pt::new("kio") else { return };
    if counter(&t, "fuse.kernel_io") == 0 {
        eprintln!("SKIP: no kernel I/O on backing files here (FUSE passthrough: Linux 6.9+, root)");
        return;
    }
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(t.m("f"), &data).unwrap();
    assert_eq!(std::fs::read(t.src("f")).unwrap(), data);

    // Three opens at once of one file: all on the same backing file.
    let w = OpenOptions::new().write(true).open(t.m("f")).unwrap();
    let r = File::open(t.m("f")).unwrap();
    let mut a = OpenOptions::new().append(true).open(t.m("f")).unwrap();
    // One page cache: a write on the host shows at once in a file open
    // on the mount, and the other way round, whatever the timeouts.
    let h = OpenOptions::new()
        .read(true)
        .write(true)
        .open(t.src("f"))
        .unwrap();
    let mut buf = [0u8; 4];
    h.write_all_at(b"HOST", 4096).unwrap();
    r.read_exact_at(&mut buf, 4096).unwrap();
    assert_eq!(&buf, b"HOST");
    w.write_all_at(b"MNT!", 8192).unwrap();
    h.read_exact_at(&mut buf, 8192).unwrap();
    assert_eq!(&buf, b"MNT!");
    // O_APPEND appends at the source file's end.
    a.write_all(b"tail").unwrap();
    let len = data.len() as u64 + 4;
    h.read_exact_at(&mut buf, len - 4).unwrap();
    assert_eq!(&buf, b"tail");
    // Size and mtime through the mount are the source's.
    let (m, s) = (
        std::fs::metadata(t.m("f")).unwrap(),
        std::fs::metadata(t.src("f")).unwrap(),
    );
    assert_eq!(
        (m.len(), m.mtime(), m.mtime_nsec()),
        (len, s.mtime(), s.mtime_nsec())
    );
    drop((w, r, a, h));

    let mut expect = data;
    expect[4096..4100].copy_from_slice(b"HOST");
    expect[8192..8196].copy_from_slice(b"MNT!");
    expect.extend_from_slice(b"tail");
    assert_eq!(std::fs::read(t.m("f")).unwrap(), expect);

    // No data crossed the server, and every open was the kernel's.
    assert_eq!(counter(&t, "fuse.requests.op.read"), 0);
    assert_eq!(counter(&t, "fuse.requests.op.write"), 0);
    assert_eq!(counter(&t, "fuse.kernel_io.opens"), 5);
    assert_eq!(counter(&t, "fuse.kernel_io.open_files_server"), 0);
    let reg = counter(&t, "fuse.kernel_io.registered");
    assert!(
        (1..=3).contains(&reg),
        "{reg} registrations for 3 rounds of opens"
    );
    // The backing files go with the last RELEASE (sent after close returns).
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter(&t, "fuse.kernel_io.open_files") != 0 {
        assert!(Instant::now() < deadline, "backing files still registered");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn file_handles_outlive_the_kernel_and_the_server_forgetting_the_node() {
    let Some(t) = Pt::new("handles") else { return };
    std::fs::create_dir(t.m("d")).unwrap();
    std::fs::write(t.m("d/f"), b"by handle").unwrap();
    std::fs::write(t.m("d/gone"), b"x").unwrap();
    let hf = common::handle_of(&t.m("d/f"));
    let hd = common::handle_of(&t.m("d"));
    let hg = common::handle_of(&t.m("d/gone"));
    std::fs::remove_file(t.m("d/gone")).unwrap();
    // The kernel forgets every node but the root's, then the vnode layer
    // recycles every free vnode: nothing of the files is left in memory
    // but what the server keeps for file handles.
    let fs: &dyn uvfs_vfs::FileSystem = &*t.fs;
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs.mount().vnode_count() > 1 {
        assert!(Instant::now() < deadline, "the kernel kept its nodes");
        let _ = std::fs::write("/proc/sys/vm/drop_caches", b"2");
        t.fs.layer().prune(fs.mount(), usize::MAX);
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut common::open_handle(&t.m(""), &hf).unwrap(), &mut data)
        .unwrap();
    assert_eq!(data, b"by handle");
    let d = common::open_handle(&t.m(""), &hd).unwrap();
    assert!(d.metadata().unwrap().is_dir());
    // A removed file's handle is stale, not another file.
    let e = common::open_handle(&t.m(""), &hg).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
}

/// A file a CREATE made is empty: its attributes go to the kernel for the
/// full timeout although it is open for writing on its backing file, so
/// the permission check of the `open` itself asks no GETATTR (one round
/// trip per file `tar` unpacks). Its name too: the path looked up again
/// after the file is closed asks no LOOKUP.
#[test]
fn opening_the_file_a_create_made_asks_no_getattr() {
    let Some(t) = Pt::with_timeouts("create-attrs", Duration::from_secs(60)) else {
        return;
    };
    if counter(&t, "fuse.kernel_io") == 0 {
        eprintln!("SKIP: no kernel I/O on backing files here (FUSE passthrough: Linux 6.9+, root)");
        return;
    }
    std::fs::create_dir(t.m("d")).unwrap();
    // The root's attributes, stale after the MKDIR, fetched again here.
    std::fs::metadata(t.m("d")).unwrap();
    let (getattrs, lookups) = (
        counter(&t, "fuse.requests.op.getattr"),
        counter(&t, "fuse.requests.op.lookup"),
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(t.m("d/f"))
        .unwrap();
    assert_eq!(
        counter(&t, "fuse.requests.op.getattr"),
        getattrs,
        "a GETATTR for the file just created"
    );
    drop(f);
    std::fs::metadata(t.m("d/f")).unwrap();
    assert_eq!(
        counter(&t, "fuse.requests.op.lookup"),
        lookups + 1,
        "one LOOKUP (of the new name, before CREATE), not another of the created file"
    );
}

/// A child process that creates `path` open for reading and writing,
/// gives it a page by `how` (`truncate` or `write`), stats it, writes the
/// page through a shared mapping and stats it again, printing both
/// mtimes in nanoseconds. In another process because this one serves the
/// mount (see `map_and_write` in mount.rs).
fn create_then_map_write(path: &Path, how: &str) -> (i128, i128) {
    let script = r#"
import mmap, os, sys, time
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
if how == "truncate":
    os.ftruncate(fd, 4096)
else:
    os.write(fd, b"\0" * 4096)
before = os.stat(path).st_mtime_ns
time.sleep(0.05)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[0:1] = b"x"
after = os.stat(path).st_mtime_ns
m.close()
os.close(fd)
print(before, after)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .arg(how)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let s = String::from_utf8(out.stdout).unwrap();
    let v: Vec<i128> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1])
}

/// What lets a CREATE's empty file keep its attributes cached does not
/// let a mapped write go unseen: once the file has a page (by truncate or
/// by write), `stat` through the mount shows the mtime a write through a
/// shared mapping gave the source file, even with day-long timeouts.
#[test]
fn a_mapped_write_to_a_file_created_empty_shows_at_once() {
    let Some(t) = Pt::with_timeouts("create-mapped", Duration::from_secs(86400)) else {
        return;
    };
    if counter(&t, "fuse.kernel_io") == 0 {
        eprintln!("SKIP: no kernel I/O on backing files here (FUSE passthrough: Linux 6.9+, root)");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    for how in ["truncate", "write"] {
        let (before, after) = create_then_map_write(&t.m(how), how);
        let native = std::fs::metadata(t.src(how)).unwrap();
        let native = i128::from(native.mtime()) * 1_000_000_000 + i128::from(native.mtime_nsec());
        assert!(
            native > before,
            "{how}: the source's mtime did not move: nothing to compare"
        );
        assert_eq!(
            after, native,
            "{how}: a mapped write's mtime is stale through the mount"
        );
    }
}
