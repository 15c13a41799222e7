//! A passthrough with default options watches its source: names and
//! attributes are cached for a day, and a change made on the host still
//! shows through the mount at once. With `--no-watch`, a revalidation of
//! a known file costs one `statx` and opens nothing. Through the real
//! binary; skipped (with a message) where mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Far below the day a watched mount caches for: a change seen within it
/// was invalidated, not expired.
const DEADLINE: Duration = Duration::from_secs(5);

/// Polls `seen` until it holds or the deadline passes.
fn shows(what: &str, mut seen: impl FnMut() -> bool) {
    let start = Instant::now();
    while !seen() {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not visible through the mount"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn meta(p: &Path) -> Option<fs::Metadata> {
    fs::symlink_metadata(p).ok()
}

fn watched(m: &Mounted) -> bool {
    if m.counter("passthrough.watch.active") == 1 {
        return true;
    }
    eprintln!("skipped: the source's host changes cannot be watched here");
    false
}

/// Waits until the watcher has reported what the host did so far to the
/// kernel (its invalidations stop for longer than it repeats them; events
/// of other processes on the file system count for nothing here).
fn settled(m: &Mounted) {
    let count = || m.counter("fuse.changes.entries") + m.counter("fuse.changes.inodes");
    let mut last = count();
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(400));
        let now = count();
        if now == last {
            return;
        }
        last = now;
    }
}

#[test]
fn every_kind_of_host_change_shows_through_a_default_mount() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("host-changes", &["--source", "src"]);
    if !watched(&m) {
        return;
    }
    let (src, mnt) = (m.src(), m.mnt.clone());
    fs::create_dir(src.join("d")).unwrap();
    fs::write(src.join("d/f"), b"1").unwrap();
    fs::write(src.join("d/g"), b"22").unwrap();
    // The kernel caches all of it, then the host changes it.
    let f = mnt.join("d/f");
    assert_eq!(meta(&f).unwrap().len(), 1);
    assert!(meta(&mnt.join("d/new")).is_none(), "negative entry cached");

    fs::write(src.join("d/new"), b"x").unwrap();
    shows("create", || meta(&mnt.join("d/new")).is_some());
    fs::write(src.join("d/f"), b"12345").unwrap();
    shows("write", || meta(&f).is_some_and(|m| m.len() == 5));
    shows("contents", || fs::read(&f).is_ok_and(|c| c == b"12345"));
    fs::File::options()
        .write(true)
        .open(src.join("d/f"))
        .unwrap()
        .set_len(2)
        .unwrap();
    shows("truncate", || meta(&f).is_some_and(|m| m.len() == 2));
    fs::set_permissions(src.join("d/f"), fs::Permissions::from_mode(0o600)).unwrap();
    shows("chmod", || {
        meta(&f).is_some_and(|m| m.mode() & 0o777 == 0o600)
    });
    std::os::unix::fs::chown(src.join("d/f"), Some(1234), Some(4321)).unwrap();
    shows("chown", || {
        meta(&f).is_some_and(|m| (m.uid(), m.gid()) == (1234, 4321))
    });
    let t =
        fs::FileTimes::new().set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000));
    fs::File::options()
        .write(true)
        .open(src.join("d/f"))
        .unwrap()
        .set_times(t)
        .unwrap();
    shows("utimes", || {
        meta(&f).is_some_and(|m| m.mtime() == 1_000_000)
    });
    fs::hard_link(src.join("d/f"), src.join("d/f2")).unwrap();
    shows("link", || meta(&f).is_some_and(|m| m.nlink() == 2));
    shows("link's name", || meta(&mnt.join("d/f2")).is_some());
    fs::rename(src.join("d/g"), src.join("d/h")).unwrap();
    shows("rename: old name gone", || meta(&mnt.join("d/g")).is_none());
    shows("rename: new name there", || {
        meta(&mnt.join("d/h")).is_some()
    });
    fs::remove_file(src.join("d/h")).unwrap();
    shows("unlink", || meta(&mnt.join("d/h")).is_none());
    fs::create_dir(src.join("d/sub")).unwrap();
    shows("mkdir", || {
        meta(&mnt.join("d/sub")).is_some_and(|m| m.is_dir())
    });
    shows("listing", || {
        fs::read_dir(mnt.join("d"))
            .unwrap()
            .any(|e| e.unwrap().file_name() == "sub")
    });
    fs::remove_dir(src.join("d/sub")).unwrap();
    shows("rmdir", || meta(&mnt.join("d/sub")).is_none());
    let xattr = |p: &Path, set: bool| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: NUL-terminated strings; the value buffer is readable
        // (set) or writable (get) for its length.
        unsafe {
            if set {
                libc::lsetxattr(c.as_ptr(), c"user.k".as_ptr(), b"v".as_ptr().cast(), 1, 0) as isize
            } else {
                let mut b = [0u8; 8];
                libc::lgetxattr(c.as_ptr(), c"user.k".as_ptr(), b.as_mut_ptr().cast(), 8)
            }
        }
    };
    if xattr(&src.join("d/f"), true) == 0 {
        shows("setxattr", || xattr(&f, false) == 1);
    }
    assert!(m.counter("passthrough.watch.invalidations") > 0);
    assert_eq!(m.counter("fuse.changes.failed"), 0);
}

#[test]
fn a_warm_walk_of_a_default_passthrough_asks_nothing() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("warm-walk", &["--source", "src"]);
    if !watched(&m) {
        return;
    }
    for i in 0..50 {
        fs::write(m.src().join(format!("f{i}")), b"x").unwrap();
    }
    // The creations' own events (and their repeats) come after a lookup
    // may have cached the names: let them pass first.
    settled(&m);
    let walk = || {
        for i in 0..50 {
            fs::symlink_metadata(m.mnt.join(format!("f{i}"))).unwrap();
        }
    };
    walk();
    let (lookups, getattrs) = (m.requests("lookup"), m.attr_requests());
    // Past the second a passthrough cached for without a watcher.
    std::thread::sleep(Duration::from_millis(1500));
    walk();
    assert_eq!(m.requests("lookup"), lookups, "names asked again");
    assert_eq!(m.attr_requests(), getattrs, "attributes asked again");
}

#[test]
fn revalidating_known_files_opens_nothing() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("revalidate", &["--source", "src", "--no-watch"]);
    assert_eq!(m.counter("passthrough.watch.active"), 0);
    for i in 0..200 {
        fs::write(m.src().join(format!("f{i}")), b"x").unwrap();
    }
    let walk = || {
        for i in 0..200 {
            fs::symlink_metadata(m.mnt.join(format!("f{i}"))).unwrap();
        }
    };
    walk();
    let opened = m.counter("passthrough.reopen.handle") + m.counter("passthrough.stat_by_handle");
    let revalidated = m.counter("passthrough.lookups.revalidated");
    let lookups = m.requests("lookup");
    std::thread::sleep(Duration::from_millis(1500));
    walk();
    assert!(
        m.requests("lookup") >= lookups + 200,
        "entries did not expire"
    );
    assert!(m.counter("passthrough.lookups.revalidated") >= revalidated + 200);
    assert_eq!(
        m.counter("passthrough.reopen.handle") + m.counter("passthrough.stat_by_handle"),
        opened,
        "a revalidation opened a file"
    );
}

#[test]
fn a_source_renamed_or_removed_under_the_mount_stays_coherent() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("source-moved", &["--source", "src"]);
    if !watched(&m) {
        return;
    }
    let mnt = m.mnt.clone();
    fs::write(m.src().join("a"), b"1").unwrap();
    assert!(meta(&mnt.join("a")).is_some());
    // Changes beside the source, on the same file system: not the mount's.
    let outside = m.scratch.join("outside");
    fs::create_dir(&outside).unwrap();
    let ignored = m.counter("passthrough.watch.ignored");
    for i in 0..20 {
        fs::write(outside.join(format!("o{i}")), b"x").unwrap();
    }
    shows("events outside the source", || {
        m.counter("passthrough.watch.ignored") > ignored
    });
    assert!(meta(&mnt.join("o0")).is_none());
    // The source directory renamed on the host: the mount serves it still.
    let moved = m.scratch.join("moved");
    fs::rename(m.src(), &moved).unwrap();
    fs::write(moved.join("b"), b"2").unwrap();
    shows("a file made after the rename", || {
        meta(&mnt.join("b")).is_some()
    });
    fs::remove_file(moved.join("a")).unwrap();
    shows("a file removed after the rename", || {
        meta(&mnt.join("a")).is_none()
    });
    // Removed altogether: nothing stale is shown, nothing hangs. The
    // mount shows the removed directory as a bind mount of it would:
    // there, empty, and nothing can be made in it; the log says why.
    fs::remove_dir_all(&moved).unwrap();
    shows("the source's files gone", || meta(&mnt.join("b")).is_none());
    let listing: Vec<_> = fs::read_dir(&mnt)
        .expect("the mount's root listed")
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(listing.is_empty(), "{listing:?}");
    assert!(fs::metadata(&mnt).unwrap().is_dir());
    assert_eq!(
        fs::write(mnt.join("new"), b"x").map_err(|e| e.kind()),
        Err(std::io::ErrorKind::NotFound)
    );
    let log = fs::read_to_string(uvfs_fuse::fallback_log_path(&mnt).unwrap()).unwrap();
    assert!(
        log.contains("source directory was removed on the host"),
        "{log}"
    );
    fs::create_dir(m.src()).unwrap(); // for the drop's cleanup
}

#[test]
fn working_directories_follow_a_host_move_of_their_ancestor() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("cwd-moved", &["--source", "src"]);
    if !watched(&m) {
        return;
    }
    let (src, mnt) = (m.src(), m.mnt.clone());
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::create_dir_all(src.join("d")).unwrap();
    // Processes working in the mount, below the directory the host moves
    // and in the directory itself.
    let working = |dir: &Path| {
        std::process::Command::new("sleep")
            .arg("60")
            .current_dir(dir)
            .spawn()
            .unwrap()
    };
    let mut below = working(&mnt.join("a/b/c"));
    let mut itself = working(&mnt.join("d"));
    let cwd = |c: &std::process::Child| fs::read_link(format!("/proc/{}/cwd", c.id())).ok();
    shows("the working directories", || {
        cwd(&below) == Some(mnt.join("a/b/c")) && cwd(&itself) == Some(mnt.join("d"))
    });
    settled(&m);
    fs::rename(src.join("a"), src.join("moved")).unwrap();
    fs::rename(src.join("d"), src.join("e")).unwrap();
    // The paths `getcwd` answers (what /proc shows): the new ones, with
    // nothing looked up through the mount meanwhile.
    let right =
        || cwd(&below) == Some(mnt.join("moved/b/c")) && cwd(&itself) == Some(mnt.join("e"));
    let mut ok = (0..5000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        right()
    });
    // And they stay so once the watcher has sent the moves' invalidations
    // again (which unhash the entries the lookups moved).
    settled(&m);
    ok &= right();
    let seen = (cwd(&below), cwd(&itself));
    for c in [&mut below, &mut itself] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(ok, "working directories after the host's moves: {seen:?}");
    assert!(m.counter("fuse.refresh.followed") >= 1);
}

#[test]
fn working_directories_in_directories_the_host_just_made_stay_valid() {
    // The host makes a directory and a process enters it through the
    // mount at once: the watcher's invalidation of the name comes after
    // the process's lookup and unhashes its working directory, which
    // must be looked up again (or `getcwd` fails, "(deleted)" in /proc).
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("cwd-made", &["--source", "src"]);
    if !watched(&m) {
        return;
    }
    let (src, mnt) = (m.src(), m.mnt.clone());
    let mut working = Vec::new();
    for i in 0..40 {
        let name = format!("d{i}");
        fs::create_dir(src.join(&name)).unwrap();
        let child = std::process::Command::new("sleep")
            .arg("60")
            .current_dir(mnt.join(&name))
            .spawn()
            .unwrap();
        working.push((child, mnt.join(&name)));
    }
    settled(&m);
    let wrong: Vec<_> = working
        .iter()
        .filter_map(|(c, dir)| {
            let cwd = fs::read_link(format!("/proc/{}/cwd", c.id())).ok();
            (cwd.as_ref() != Some(dir)).then(|| (dir.clone(), cwd))
        })
        .collect();
    for (c, _) in &mut working {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(wrong.is_empty(), "working directories gone: {wrong:?}");
}

/// A file system mounted on the host (`mount`'s command), unmounted
/// (lazily: a failed test leaves nothing mounted) when dropped.
struct HostMount(PathBuf);

impl HostMount {
    fn tmpfs(at: &Path) -> Option<HostMount> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "uvfs-test"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| HostMount(at.to_path_buf()))
    }

    /// Unmounts it as the host would (not lazily): busy while anything
    /// holds a file of it.
    fn unmount(self) {
        shows("the host's umount", || {
            std::process::Command::new("umount")
                .arg(&self.0)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        std::mem::forget(self);
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn file_systems_mounted_on_the_host_inside_the_source_show_at_once() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("host-mounts", &["--source", "src"]);
    if !watched(&m) {
        return;
    }
    let (src, mnt) = (m.src(), m.mnt.clone());
    fs::create_dir_all(src.join("d/under")).unwrap();
    fs::write(src.join("d/under/covered"), b"").unwrap();
    let names = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(p)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    // The kernel caches the directory, its entry and its listing.
    assert!(meta(&mnt.join("d/under/covered")).is_some());
    assert_eq!(names(&mnt.join("d/under")), ["covered"]);
    // The host's making of them told to the kernel before the mount: no
    // late invalidation may refresh the mountpoint by chance.
    settled(&m);
    let Some(tmp) = HostMount::tmpfs(&src.join("d/under")) else {
        eprintln!("skipped: the host cannot mount a tmpfs here");
        return;
    };
    // Written on the tmpfs: no event of the source's file system.
    fs::write(src.join("d/under/on-tmpfs"), b"x").unwrap();
    let under = mnt.join("d/under");
    let mode = |p: &Path| meta(p).map(|m| m.mode() & 0o7777);
    // The mountpoint as the host sees it now: the tmpfs's root (its
    // attributes, its listing), with no lookup in it first.
    shows("a host mount", || {
        names(&under) == ["on-tmpfs"] && mode(&under) == Some(0o1777)
    });
    assert!(meta(&under.join("on-tmpfs")).is_some());
    assert!(meta(&under.join("covered")).is_none());
    // Nothing holds a file of it open: the server's idle descriptors of
    // its files do not keep it busy.
    tmp.unmount();
    let covered_mode = mode(&src.join("d/under"));
    assert_ne!(covered_mode, Some(0o1777));
    shows("a host unmount", || {
        names(&under) == ["covered"] && mode(&under) == covered_mode
    });
    assert!(meta(&under.join("covered")).is_some());
    assert!(meta(&under.join("on-tmpfs")).is_none());
    assert_eq!(m.counter("fuse.changes.failed"), 0);
}

/// A watched passthrough mount named `name` with a 4096-byte file
/// `mapped` that the kernel does the I/O of, open read-write and mapped
/// shared and writable (the caller unmaps it); None (said why) where this
/// machine cannot have that.
fn mapped_file(name: &str) -> Option<(Mounted, PathBuf, fs::File, *mut libc::c_void)> {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return None;
    }
    let m = Mounted::new(name, &["--source", "src"]);
    if !watched(&m) {
        return None;
    }
    let p = m.mnt.join("mapped");
    fs::write(&p, vec![0u8; 4096]).unwrap();
    settled(&m);
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    if m.counter("fuse.kernel_io.open_files") == 0 {
        eprintln!("skipped: the kernel does not do this mount's I/O here");
        return None;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh shared mapping of 4096 bytes of an open file of at
    // least that size; nothing else aliases it, and the caller unmaps it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    Some((m, p, f, map))
}

#[test]
fn a_write_through_a_shared_mapping_moves_mtime_at_once() {
    // `_f` keeps the file open (and its attributes uncached) throughout.
    let Some((m, p, _f, map)) = mapped_file("mapped-write") else {
        return;
    };
    // Cached now (after the mmap, which makes the kernel drop its atime),
    // as a day-long cache would keep it.
    let before = meta(&p).unwrap();
    let asked = m.attr_requests();
    // Past the file system's timestamp granularity.
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: `map` is a live, writable mapping of 4096 bytes.
    unsafe { (map as *mut u8).write_volatile(1) };
    let after = meta(&p).unwrap();
    // SAFETY: `map` came from the mmap above and is not used after this.
    unsafe { libc::munmap(map, 4096) };
    let native = fs::metadata(m.src().join("mapped")).unwrap();
    assert!(
        m.attr_requests() > asked,
        "the kernel asked nothing after the write"
    );
    assert!(
        (native.mtime(), native.mtime_nsec()) > (before.mtime(), before.mtime_nsec()),
        "the source's mtime did not move: nothing to compare"
    );
    assert_eq!(
        (after.mtime(), after.mtime_nsec()),
        (native.mtime(), native.mtime_nsec()),
        "a mapped write's mtime is stale through the mount"
    );
}

#[test]
fn a_mapping_that_outlives_its_file_still_moves_mtime_at_once() {
    let Some((m, p, f, map)) = mapped_file("mapped-after-close") else {
        return;
    };
    // Every open of the file is closed (RELEASE): only the mapping holds
    // the kernel's backing file now.
    drop(f);
    let released = || m.counter("fuse.kernel_io.open_files") == 0;
    shows("the file released", released);
    let native = || fs::metadata(m.src().join("mapped")).unwrap();
    let mtime = |a: &fs::Metadata| (a.mtime(), a.mtime_nsec());
    let before = meta(&p).unwrap();
    assert_eq!(mtime(&before), mtime(&native()));
    // Past the file system's timestamp granularity.
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: `map` is a live, writable mapping of 4096 bytes.
    unsafe { (map as *mut u8).write_volatile(1) };
    let after = meta(&p).unwrap();
    let moved = native();
    assert!(
        mtime(&moved) > mtime(&before),
        "the source's mtime did not move: nothing to compare"
    );
    assert_eq!(
        mtime(&after),
        mtime(&moved),
        "a write through a mapping that outlived its file is stale through the mount"
    );

    // The mapping's end is the backing file's close, which the watcher
    // reports: from then on the attributes are cached again.
    let reported = m.counter("fuse.changes.inodes");
    // SAFETY: `map` came from the mmap above and is not used after this.
    unsafe { libc::munmap(map, 4096) };
    shows("the mapping's end", || {
        m.counter("fuse.kernel_io.written_files") == 0
            && m.counter("fuse.changes.inodes") > reported
    });
    assert!(m.counter("fuse.kernel_io.closes_seen") >= 1);
    let last = meta(&p).unwrap();
    assert_eq!(mtime(&last), mtime(&native()));
    let asked = m.attr_requests();
    for _ in 0..3 {
        assert_eq!(mtime(&meta(&p).unwrap()), mtime(&last));
    }
    assert_eq!(
        m.attr_requests(),
        asked,
        "attributes not cached again after the mapping's end"
    );
}

/// Directories moved back and forth on the host while two threads list
/// their parents through a default mount (FUSE over io_uring where the
/// kernel has it): every listing ends. A READDIRPLUS entry the kernel
/// cannot link (a directory it knows moved) makes it force a FORGET,
/// sent as an ordinary request that then comes through a ring; left
/// uncommitted, the listing that sent it waited for good, holding its
/// directory (and the watcher, invalidating a name there, behind it).
#[test]
fn listings_racing_host_moves_of_directories_all_end() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("move-race", &["--source", "src"]);
    let src = m.src();
    for d in ["a", "b"] {
        fs::create_dir(src.join(d)).unwrap();
    }
    for i in 0..20 {
        fs::create_dir(src.join(format!("a/d{i}"))).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let listed = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let (mnt, stop, listed, done) =
            (m.mnt.clone(), stop.clone(), listed.clone(), done_tx.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for d in ["a", "b"] {
                    for e in fs::read_dir(mnt.join(d)).into_iter().flatten().flatten() {
                        let _ = e.metadata();
                    }
                }
                listed.fetch_add(1, Ordering::Relaxed);
            }
            let _ = done.send(());
        });
    }
    let started = Instant::now();
    let mut n = 0usize;
    while started.elapsed() < Duration::from_secs(4) {
        let (i, from, to) = (n % 20, ["a", "b"][(n / 20) % 2], ["b", "a"][(n / 20) % 2]);
        let _ = fs::rename(
            src.join(format!("{from}/d{i}")),
            src.join(format!("{to}/d{i}")),
        );
        n += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for _ in 0..2 {
        if done_rx.recv_timeout(Duration::from_secs(30)).is_err() {
            // Free the hung threads, so that this process can end.
            let minor = m
                .mnt
                .metadata()
                .map(|md| libc::minor(md.dev()))
                .unwrap_or(0);
            let abort = format!("/sys/fs/fuse/connections/{minor}/abort");
            if !Path::new(&abort).exists() {
                let _ = std::process::Command::new("mount")
                    .args(["-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"])
                    .status();
            }
            let _ = fs::write(&abort, b"1");
            panic!(
                "a listing never ended ({} listings, {n} host moves)",
                listed.load(Ordering::Relaxed)
            );
        }
    }
    assert!(listed.load(Ordering::Relaxed) > 0);
}

/// After the source's file system is detached on the host (`umount -l`),
/// the source root's descriptor reads back as `/`, under which every
/// mount the host makes anywhere lies. The watcher says once that the
/// source is out of reach, and takes no host mount for the source's.
#[test]
fn host_mounts_after_the_source_was_detached_are_not_taken_for_its_own() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let base = std::env::temp_dir().join(format!("uvfs-detached-{}", std::process::id()));
    let (fs_dir, elsewhere) = (base.join("fs"), base.join("elsewhere"));
    fs::create_dir_all(&fs_dir).unwrap();
    fs::create_dir_all(&elsewhere).unwrap();
    let Some(host_fs) = HostMount::tmpfs(&fs_dir) else {
        eprintln!("skipped: the host cannot mount a tmpfs here");
        return;
    };
    fs::create_dir(fs_dir.join("src")).unwrap();
    fs::write(fs_dir.join("src/f"), b"kept").unwrap();
    let m = Mounted::new(
        "detached-source",
        &["--source", fs_dir.join("src").to_str().unwrap()],
    );
    if watched(&m) {
        let st = std::process::Command::new("umount")
            .arg("-l")
            .arg(&fs_dir)
            .status()
            .unwrap();
        assert!(st.success());
        std::mem::forget(host_fs);
        let other = HostMount::tmpfs(&elsewhere).expect("a second tmpfs");
        let log_path = uvfs_fuse::fallback_log_path(&m.mnt).unwrap();
        let log = || fs::read_to_string(&log_path).unwrap_or_default();
        shows("the source said out of reach", || {
            log().contains("no longer reachable on the host")
        });
        drop(other);
        // The unmount of the second tmpfs is seen too; give it the time.
        std::thread::sleep(Duration::from_millis(300));
        let log = log();
        assert!(!log.contains("a file system was"), "{log}");
        // The mount serves what it holds.
        assert_eq!(fs::read(m.mnt.join("f")).unwrap(), b"kept");
    }
    drop(m);
    let _ = fs::remove_dir_all(&base);
}
