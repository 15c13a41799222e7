//! Live upgrade (`uvfs upgrade`) and crash recovery (the supervisor of a
//! passthrough mount): a program using the mount notices nothing while
//! its server is replaced or killed with SIGKILL (an open file keeps its
//! offset, a directory fd stands for a working directory, a shared
//! mapping keeps its dirty pages, a record lock stays held, a blocked
//! `flock` waiter is granted later), on memfs (upgrade) and on a
//! passthrough (both); a mapping past its file's close keeps the file's
//! attributes uncached across an upgrade; a successor that is missing, dies, speaks another
//! state version or dies half-way leaves the old server serving; a
//! supervisor whose binary is gone starts the one it runs; one that cannot
//! start a server says so in the log and lets the mount go; a crash with
//! many locks held, or after an upgrade of many nodes, recovers; mounts
//! served through FUSE over io_uring upgrade with the same guarantees,
//! and threads busy on one across upgrades all get their answers.
//! Skipped (with a message) where mounting is not possible.

mod common;

use common::{server_pid, still_serves, wait_for, Mounted};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn uvfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_uvfs"))
}

/// `uvfs upgrade MNT [--binary B]`: Ok(stdout) or Err(stderr).
fn upgrade(mnt: &Path, binary: Option<&Path>) -> Result<String, String> {
    let mut c = uvfs();
    c.arg("upgrade").arg(mnt);
    if let Some(b) = binary {
        c.arg("--binary").arg(b);
    }
    let out = c.output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

/// Whether another process sees a write lock on bytes 0..10 of `p`
/// (`F_GETLK` from a process of its own, as a lock held by this one is
/// invisible to it).
fn locked_elsewhere(p: &Path) -> bool {
    let script = "import fcntl,struct,os,sys\n\
                  fd=os.open(sys.argv[1],os.O_RDWR)\n\
                  s=struct.pack('hhqqi4x',fcntl.F_WRLCK,0,0,10,0)\n\
                  r=fcntl.fcntl(fd,fcntl.F_GETLK,s)\n\
                  print(struct.unpack('hhqqi4x',r)[0])\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(p)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim() != libc::F_UNLCK.to_string()
}

fn set_lock(f: &File, kind: i32) {
    // SAFETY: all-zero bytes are a valid flock (plain integers).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l.l_len = 10;
    // SAFETY: a valid fd and a valid flock out-pointer.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &l) };
    assert_eq!(r, 0, "F_SETLK: {}", std::io::Error::last_os_error());
}

fn flock(f: &File, op: i32) {
    // SAFETY: a valid fd.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), op) }, 0);
}

/// A shared writable mapping of `len` bytes of `f`.
struct Map(*mut u8, usize);

impl Map {
    fn new(f: &File, len: usize) -> Map {
        // SAFETY: a new shared mapping of an open file; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Map(p.cast(), len)
    }

    fn write(&self, at: usize, b: &[u8]) {
        assert!(at + b.len() <= self.1);
        // SAFETY: in bounds of a live writable mapping.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.0.add(at), b.len()) };
    }

    fn sync(&self) {
        // SAFETY: the whole live mapping.
        assert_eq!(
            unsafe { libc::msync(self.0.cast(), self.1, libc::MS_SYNC) },
            0
        );
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.0.cast(), self.1) };
    }
}

/// How the server of a mount is replaced in a test.
#[derive(Clone, Copy, PartialEq)]
enum Replace {
    /// `uvfs upgrade`.
    Upgrade,
    /// SIGKILL: the supervisor starts another.
    Kill,
}

/// Replaces the server of `m` `how`; it is then generation `g`.
fn replace(m: &Mounted, how: Replace, g: u64) {
    match how {
        Replace::Upgrade => {
            let out = upgrade(&m.mnt, None).expect("upgrade");
            assert!(out.contains(&format!("generation {g}")), "{out}");
        }
        Replace::Kill => {
            common::kill_server(m);
            assert_eq!(m.counter("server.generation"), g);
        }
    }
}

fn programs_notice_nothing(m: &Mounted, how: Replace) {
    let dir = m.mnt.join("dir");
    fs::create_dir(&dir).unwrap();
    let data = pattern(8192);
    fs::write(dir.join("data"), &data).unwrap();
    fs::write(dir.join("mapped"), vec![0u8; 8192]).unwrap();
    fs::write(dir.join("lockfile"), b"").unwrap();

    // An open file at an offset, a directory standing for a cwd, a dirty
    // shared mapping, a record lock, a flock held and one waited for.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("data"))
        .unwrap();
    f.seek(SeekFrom::Start(100)).unwrap();
    let mut b = [0u8; 10];
    f.read_exact(&mut b).unwrap();
    assert_eq!(b, data[100..110]);
    let cwd = File::open(&dir).unwrap();
    let mf = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("mapped"))
        .unwrap();
    let map = Map::new(&mf, 8192);
    map.write(0, b"dirty before");
    set_lock(&f, libc::F_WRLCK);
    assert!(locked_elsewhere(&dir.join("data")));
    let holder = File::open(dir.join("lockfile")).unwrap();
    flock(&holder, libc::LOCK_EX);
    let granted = dir.join("granted");
    let mut waiter = Command::new("flock")
        .arg("-x")
        .arg(dir.join("lockfile"))
        .arg("-c")
        .arg(format!("echo yes > {}", granted.display()))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Let the waiter reach its blocking FLOCK request.
    std::thread::sleep(Duration::from_millis(300));

    replace(m, how, 1);

    // The waiter still waits, and is granted once the holder lets go.
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "the flock waiter gave up"
    );
    assert!(!granted.exists());
    flock(&holder, libc::LOCK_UN);
    let st = waiter.wait().unwrap();
    assert!(st.success(), "flock waiter: {st}");
    assert_eq!(fs::read_to_string(&granted).unwrap(), "yes\n");

    // The open file goes on at its offset, reading and writing.
    f.read_exact(&mut b).unwrap();
    assert_eq!(b, data[110..120]);
    f.write_all(b"written after").unwrap();
    // The lock is still held.
    assert!(locked_elsewhere(&dir.join("data")));
    // The directory still resolves names, old and new.
    // SAFETY: a valid directory fd and NUL-terminated names.
    let fd = unsafe { libc::openat(cwd.as_raw_fd(), c"data".as_ptr(), libc::O_RDONLY) };
    assert!(fd >= 0, "openat after the upgrade");
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    // SAFETY: as above.
    let fd = unsafe {
        libc::openat(
            cwd.as_raw_fd(),
            c"new".as_ptr(),
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        )
    };
    assert!(fd >= 0, "create through the directory after the upgrade");
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    // The mapping's pages, dirtied before, reach the file.
    map.write(20, b"dirty after");
    map.sync();
    let got = fs::read(dir.join("mapped")).unwrap();
    assert_eq!(&got[..12], b"dirty before");
    assert_eq!(&got[20..31], b"dirty after");

    // Twice more; an upgrade's counters go on (a crash's restart from
    // the mount's).
    let before = m.requests("lookup");
    for g in 2..=3 {
        replace(m, how, g);
    }
    if how == Replace::Upgrade {
        assert!(m.requests("lookup") >= before, "request counters restarted");
    }
    assert_eq!(m.counter("server.generation"), 3);
    assert_eq!(m.counter("server.restarts"), 3);
    let mut whole = fs::read(dir.join("data")).unwrap();
    assert_eq!(&whole[120..133], b"written after");
    whole.truncate(100);
    assert_eq!(whole, data[..100]);
    set_lock(&f, libc::F_UNLCK);
    assert!(!locked_elsewhere(&dir.join("data")));
    drop(map);
}

#[test]
fn programs_notice_nothing_across_upgrades_of_memfs() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("upgrade-memfs", &["--transport", "dev"]);
    programs_notice_nothing(&m, Replace::Upgrade);
}

#[test]
fn programs_notice_nothing_across_upgrades_of_a_passthrough() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("upgrade-pt", &["--transport", "dev", "--source", "src"]);
    programs_notice_nothing(&m, Replace::Upgrade);
}

/// A mapping that outlived its file's last close keeps the file's
/// attributes uncached across an upgrade (the successor takes the count
/// of backing files not yet closed), and cached again after its end.
#[test]
fn a_mapping_past_its_close_stays_coherent_across_an_upgrade() {
    use std::os::unix::fs::MetadataExt;
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("upgrade-mapped", &["--transport", "dev", "--source", "src"]);
    if m.counter("passthrough.watch.active") != 1 {
        eprintln!("skipped: the source's host changes cannot be watched here");
        return;
    }
    let p = m.mnt.join("mapped");
    fs::write(&p, vec![0u8; 4096]).unwrap();
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    if m.counter("fuse.kernel_io.open_files") == 0 {
        eprintln!("skipped: the kernel does not do this mount's I/O here");
        return;
    }
    let map = Map::new(&f, 4096);
    drop(f);
    wait_for("the file released", || {
        m.counter("fuse.kernel_io.open_files") == 0
    });
    replace(&m, Replace::Upgrade, 1);
    let mtime = |p: &Path| {
        let a = fs::metadata(p).unwrap();
        (a.mtime(), a.mtime_nsec())
    };
    let before = mtime(&p);
    // Past the file system's timestamp granularity.
    std::thread::sleep(Duration::from_millis(50));
    map.write(0, b"x");
    let native = mtime(&m.src().join("mapped"));
    assert!(native > before, "the source's mtime did not move");
    assert_eq!(
        mtime(&p),
        native,
        "a mapped write is stale after the upgrade"
    );
    drop(map);
    wait_for("the mapping's end told to the successor", || {
        m.counter("fuse.kernel_io.written_files") == 0
    });
}

#[test]
fn programs_notice_nothing_across_crashes_of_a_passthrough() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("crash-pt", &["--transport", "dev", "--source", "src"]);
    assert_eq!(m.counter("server.supervised"), 1);
    programs_notice_nothing(&m, Replace::Kill);
}

/// A server the supervisor started after a crash, replaced by a live
/// upgrade, is waited for: no zombie stays behind until unmount.
#[test]
fn a_server_started_after_a_crash_and_upgraded_away_leaves_no_zombie() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("crash-reap", &["--source", "src"]);
    common::kill_server(&m);
    let restarted = server_pid(&m);
    upgrade(&m.mnt, None).unwrap();
    assert_ne!(server_pid(&m), restarted);
    // A zombie keeps its /proc entry; a process waited for loses it.
    let proc = std::path::PathBuf::from(format!("/proc/{restarted}"));
    common::wait_for("the replaced server to be waited for", || !proc.exists());
    common::still_serves(&m, "after-reap");
}

/// A file opened with `O_NOFOLLOW` (as SQLite opens its databases) is
/// reopened by the server started after a crash like any other: its
/// flags once refused the reopening through `/proc/self/fd` (ELOOP), and
/// every later FSYNC (and with `--server-io` every read and write) of the
/// open file answered EBADF.
#[test]
fn a_file_opened_without_following_links_survives_a_crash() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    for (tag, extra) in [
        ("crash-nofollow", None),
        ("crash-nofollow-io", Some("--server-io")),
    ] {
        let mut args = vec!["--transport", "dev", "--source", "src"];
        args.extend(extra);
        let m = Mounted::new(tag, &args);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(m.mnt.join("db"))
            .unwrap();
        f.write_all_at(b"before", 0).unwrap();
        common::kill_server(&m);
        f.write_all_at(b"after", 6).unwrap();
        f.sync_all()
            .expect("fsync of the open file after the crash");
        let mut back = [0u8; 11];
        f.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"beforeafter", "{tag}");
        assert_eq!(fs::read(m.src().join("db")).unwrap(), b"beforeafter");
    }
}

/// memfs: files removed while the kernel held them (an `O_PATH`
/// descriptor) are handed over at an upgrade; once the kernel lets them
/// go their data goes too: not held for good, handed on at every
/// upgrade and counted by `df`.
#[test]
fn nameless_memfs_files_handed_over_go_when_the_kernel_lets_them_go() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    use std::os::unix::fs::OpenOptionsExt;
    let m = Mounted::new("kept-go", &[]);
    let held: Vec<File> = (0..20)
        .map(|i| {
            let p = m.mnt.join(format!("f{i}"));
            fs::write(&p, vec![1u8; 5000]).unwrap();
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(&p)
                .unwrap();
            fs::remove_file(&p).unwrap();
            f
        })
        .collect();
    let out = upgrade(&m.mnt, None).expect("upgrade");
    assert!(out.contains("generation 1"), "{out}");
    drop(held);
    wait_for("the nameless files to go", || {
        m.counter("memfs.inodes.alive") == 1
    });
    assert_eq!(
        common::statvfs(&m.mnt).f_bfree,
        common::statvfs(&m.mnt).f_blocks
    );
}

/// A file removed while open, then handed over by an upgrade: at its last
/// close the new server gives back every descriptor of it, as the old
/// one would have: none may stay (the node's cached descriptor, made for
/// the adopted open file), or the deleted file's blocks on the source
/// stay until it is evicted.
#[test]
fn a_file_removed_while_open_is_let_go_at_its_close_after_an_upgrade() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("removed-open-upgrade", &["--source", "src"]);
    fs::write(m.mnt.join("big"), vec![7u8; 1 << 20]).unwrap();
    let held = File::open(m.mnt.join("big")).unwrap();
    fs::remove_file(m.mnt.join("big")).unwrap();
    let out = upgrade(&m.mnt, None).expect("upgrade");
    assert!(out.contains("generation 1"), "{out}");
    drop(held);
    let pid = server_pid(&m);
    let holds_it = || {
        fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(|e| fs::read_link(e.ok()?.path()).ok())
                    .any(|t| t.to_string_lossy().ends_with("/big (deleted)"))
            })
            .unwrap_or(false)
    };
    // The RELEASE reaches the server after close returns.
    wait_for("the server to let the removed file go", || !holds_it());
}

/// A source directory the host moved while mounted: the server follows
/// it (its root is a descriptor), and so must the servers after it,
/// though told the path the mount was made with; where nothing is found
/// there the supervisor gives the mount up (ENOTCONN for every program
/// in it).
#[test]
fn a_source_moved_on_the_host_is_served_across_crashes_and_upgrades() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("moved-source", &["--source", "src"]);
    fs::write(m.src().join("a"), b"hello").unwrap();
    let mut held = fs::File::open(m.mnt.join("a")).unwrap();
    let moved = m.scratch.join("moved");
    fs::rename(m.src(), &moved).unwrap();
    common::kill_server(&m);
    assert_eq!(fs::read(m.mnt.join("a")).unwrap(), b"hello");
    let mut back = String::new();
    held.read_to_string(&mut back).unwrap();
    assert_eq!(back, "hello");
    fs::write(m.mnt.join("b"), b"made after the crash").unwrap();
    assert_eq!(fs::read(moved.join("b")).unwrap(), b"made after the crash");
    let out = upgrade(&m.mnt, None).expect("upgrade of a moved source");
    assert!(out.contains("generation 2"), "{out}");
    assert_eq!(fs::read(m.mnt.join("b")).unwrap(), b"made after the crash");
    let log = fs::read_to_string(uvfs_fuse::fallback_log_path(&m.mnt).unwrap()).unwrap();
    assert!(log.contains("was moved on the host"), "{log}");
}

/// Files given an alias (their inode number reused on the host while the
/// kernel still remembered the old file: `inodes.rs`) stay reachable
/// across a crash under the ids the kernel holds: the new server knew
/// only the aliases of the state saved at mount, and answered `ESTALE`
/// for every one made since although its file was there.
#[test]
fn files_with_aliases_made_since_the_mount_survive_a_crash() {
    use std::os::unix::fs::MetadataExt;
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    // Without the watcher the kernel keeps the old names for a second,
    // so that it still remembers the removed directories.
    let m = Mounted::new(
        "crash-alias",
        &["--transport", "dev", "--no-watch", "--source", "src"],
    );
    let n = 200;
    for i in 0..n {
        fs::create_dir(m.src().join(format!("d{i}"))).unwrap();
    }
    for i in 0..n {
        fs::metadata(m.mnt.join(format!("d{i}"))).unwrap();
    }
    // Removed and made again on the host: most take a freed number back.
    for i in 0..n {
        fs::remove_dir(m.src().join(format!("d{i}"))).unwrap();
    }
    for i in 0..n {
        fs::create_dir(m.src().join(format!("e{i}"))).unwrap();
    }
    let dirs: Vec<File> = (0..n)
        .map(|i| File::open(m.mnt.join(format!("e{i}"))).unwrap())
        .collect();
    let aliases = m.counter("passthrough.aliases");
    if aliases == 0 {
        eprintln!("skipped: the source's file system reused no inode number");
        return;
    }
    let inos: Vec<u64> = dirs.iter().map(|d| d.metadata().unwrap().ino()).collect();
    common::kill_server(&m);
    // Past the second the kernel caches names and attributes for here:
    // every call below asks the new server.
    std::thread::sleep(Duration::from_millis(1100));
    for (i, d) in dirs.iter().enumerate() {
        let md = d
            .metadata()
            .unwrap_or_else(|e| panic!("e{i} after the crash ({aliases} aliases): {e}"));
        assert_eq!(md.ino(), inos[i], "e{i}");
        let by_name = fs::metadata(m.mnt.join(format!("e{i}"))).unwrap();
        assert_eq!(by_name.ino(), inos[i], "e{i} by its name");
        File::create(m.mnt.join(format!("e{i}/in"))).unwrap();
    }
}

/// Kills the server of `m` with SIGKILL, then writes a new file through
/// the mount (a request the new server must answer whatever the kernel
/// caches) on another thread, so that a recovery that never ends fails
/// the test rather than hanging it.
fn kill_and_probe(m: &Mounted) {
    let pid = server_pid(m);
    // SAFETY: a plain signal to a process of ours.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let probe = m.mnt.join("after-crash");
    std::thread::spawn(move || {
        let _ = tx.send(fs::write(&probe, b"back").map_err(|e| e.to_string()));
    });
    rx.recv_timeout(Duration::from_secs(90))
        .expect("the mount answers after the crash")
        .expect("a write after the crash");
}

/// `files` empty files in 20 directories `dN` of `m`'s source.
fn make_tree(m: &Mounted, files: usize) {
    for d in 0..20 {
        let dir = m.src().join(format!("d{d}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..files / 20 {
            File::create(dir.join(format!("f{f}"))).unwrap();
        }
    }
}

/// Stats every file of `make_tree` through the mount.
fn stat_tree(m: &Mounted, files: usize) {
    for d in 0..20 {
        for f in 0..files / 20 {
            fs::metadata(m.mnt.join(format!("d{d}/f{f}"))).unwrap();
        }
    }
}

/// Nodes whose counts change while the node table is sent ahead of an
/// upgrade (a program looking files up, creating and removing others
/// meanwhile) are handed over with their counts of the moment the
/// request loops parked: every node the kernel holds still answers
/// (attributes are not cached, so each `stat` names its node), and no
/// FORGET names a node the successor does not know.
#[test]
fn nodes_that_change_while_sent_ahead_are_handed_over_as_they_are_at_the_pause() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let log = std::env::temp_dir().join(format!("uvfs-cli-ahead-{}.log", std::process::id()));
    let log_arg = log.display().to_string();
    let m = Mounted::new(
        "ahead",
        &[
            "--transport",
            "dev",
            "--source",
            "src",
            "--entry-timeout",
            "3600",
            "--attr-timeout",
            "0",
            "--log-level",
            "info,uvfs_fuse::upgrade=debug",
            "--log-file",
            &log_arg,
        ],
    );
    const FILES: usize = 20_000;
    const NEW: usize = 20_000;
    make_tree(&m, FILES);
    fs::create_dir(m.src().join("new")).unwrap();
    for f in 0..NEW {
        File::create(m.src().join(format!("new/n{f}"))).unwrap();
    }
    fs::create_dir(m.mnt.join("churn")).unwrap();
    stat_tree(&m, FILES);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mnt = m.mnt.clone();
    let stopped = stop.clone();
    // Looks files up for the first time (new nodes), and creates and
    // removes others (nodes remembered, then forgotten), until stopped.
    let program = std::thread::spawn(move || {
        let mut looked_up = 0;
        let mut i = 0;
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            if looked_up < NEW {
                fs::metadata(mnt.join(format!("new/n{looked_up}"))).unwrap();
                looked_up += 1;
            }
            let p = mnt.join(format!("churn/x{i}"));
            File::create(&p).unwrap();
            fs::remove_file(&p).unwrap();
            i += 1;
        }
        looked_up
    });
    for g in 1..=5 {
        replace(&m, Replace::Upgrade, g);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let looked_up = program.join().expect("the program failed");
    // A node the successor lost would answer ESTALE (which the kernel
    // hides from `stat` by looking the name up again).
    let errors = m.counter("fuse.requests.errors");
    stat_tree(&m, FILES);
    for f in 0..looked_up {
        fs::metadata(m.mnt.join(format!("new/n{f}"))).unwrap();
    }
    assert_eq!(
        m.counter("fuse.requests.errors"),
        errors,
        "nodes the kernel holds answered errors"
    );
    assert_eq!(m.counter("fuse.nodes.forget_excess"), 0);
    assert!(m.counter("fuse.nodes") > (FILES + looked_up) as u64);
    // The upgrades did send nodes ahead, and some changed meanwhile.
    let text = fs::read_to_string(&log).unwrap();
    let _ = fs::remove_file(&log);
    let again: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split(", ").find_map(|p| p.strip_suffix(" sent again)")))
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(again.len(), 5, "{text}");
    assert!(again.iter().sum::<u64>() > 0, "{again:?}");
}

/// A crash right after a live upgrade of a mount whose kernel holds many
/// nodes: the upgraded server goes on writing its predecessor's crash
/// journal (it is not journaled anew), and the server started after the
/// crash finds every node in it.
#[test]
fn a_crash_after_an_upgrade_with_many_nodes_recovers() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new(
        "crash-big",
        &[
            "--transport",
            "dev",
            "--source",
            "src",
            "--entry-timeout",
            "3600",
            "--attr-timeout",
            "3600",
        ],
    );
    const FILES: usize = 20_000;
    make_tree(&m, FILES);
    // The kernel looks every file up and keeps it.
    stat_tree(&m, FILES);
    replace(&m, Replace::Upgrade, 1);
    kill_and_probe(&m);
    assert_eq!(m.counter("server.generation"), 2);
    assert!(m.counter("fuse.nodes") > FILES as u64, "nodes kept");
    assert_eq!(fs::read(m.mnt.join("d7/f9")).unwrap(), b"");
}

/// A server started after a crash links to its supervisor before it says
/// it took the mount over, with a frame and a descriptor for each open
/// file description that holds a lock; with many of them those frames
/// outgrow the link's socket buffer, so the supervisor must read them
/// while it waits, or the two wait for each other (and every request of
/// the mount with them).
#[test]
fn a_crash_with_many_locks_held_recovers_and_keeps_them() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    const N: usize = 1500;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer, then the same struct back.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max.min(4 * N as u64).max(lim.rlim_cur);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    if lim.rlim_cur < (2 * N) as u64 {
        eprintln!("skipped: {} descriptors allowed", lim.rlim_cur);
        return;
    }
    let m = Mounted::new("crash-locks", &["--transport", "dev", "--source", "src"]);
    let files: Vec<File> = (0..N)
        .map(|i| File::create(m.mnt.join(format!("l{i}"))).unwrap())
        .collect();
    for f in &files {
        flock(f, libc::LOCK_EX);
    }
    kill_and_probe(&m);
    assert_eq!(m.counter("server.generation"), 1);
    // Every lock is still held: another description of the file (flock
    // locks belong to descriptions) cannot take it.
    let other = |i: usize| File::open(m.mnt.join(format!("l{i}"))).unwrap();
    for i in [0, N / 2, N - 1] {
        let g = other(i);
        // SAFETY: a valid fd.
        let r = unsafe { libc::flock(g.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(r, -1, "file {i} unlocked by the crash");
    }
    drop(files);
    for i in [0, N - 1] {
        flock(&other(i), libc::LOCK_EX | libc::LOCK_NB);
    }
}

/// A scratch directory with a copy of the uvfs binary (`bin`), a
/// passthrough of it mounted `--transport dev` logging to `log`, and a
/// file `x` in it; None (said) where mounting is not possible.
struct CopyMount {
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    log: std::path::PathBuf,
    m: Mounted,
}

fn mount_copy(tag: &str) -> Option<CopyMount> {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("uvfs-crash-{tag}-{}", std::process::id()));
    let (bin, log, scratch) = (dir.join("uvfs-copy"), dir.join("log"), dir.join("m"));
    let mnt = scratch.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    fs::create_dir_all(scratch.join("src")).unwrap();
    fs::copy(env!("CARGO_BIN_EXE_uvfs"), &bin).unwrap();
    let out = Command::new(&bin)
        .args(["mount", "--transport", "dev", "--source"])
        .arg(scratch.join("src"))
        .arg("-o")
        .arg(format!("log_file={}", log.display()))
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let m = Mounted { mnt, scratch };
    fs::write(m.mnt.join("x"), b"x").unwrap();
    Some(CopyMount { dir, bin, log, m })
}

/// The binary a mount was started from removed (uninstalled, or replaced
/// by one of another state version) and then its server killed: the
/// supervisor starts the binary it runs itself, which speaks the mount's
/// state, and says so.
#[test]
fn a_supervisor_whose_binary_is_gone_starts_its_own() {
    let Some(CopyMount { dir, bin, log, m }) = mount_copy("own") else {
        return;
    };
    fs::remove_file(&bin).unwrap();
    common::kill_server(&m);
    still_serves(&m, "after");
    assert_eq!(fs::read(m.mnt.join("x")).unwrap(), b"x");
    assert_eq!(m.counter("server.generation"), 1);
    let l = fs::read_to_string(&log).unwrap();
    assert!(l.contains("no such file"), "{l}");
    assert!(
        l.contains("starting the binary the mount's supervisor runs"),
        "{l}"
    );
    drop(m);
    let _ = fs::remove_dir_all(&dir);
}

/// A supervisor that cannot start a server (the binary at its path exits
/// at once) tries a few times, says why in the log, and lets the mount
/// go: requests then fail (ENOTCONN), none waits forever.
#[test]
fn a_supervisor_that_cannot_start_a_server_gives_the_mount_up_and_says_so() {
    let Some(CopyMount { dir, bin, log, m }) = mount_copy("bin") else {
        return;
    };
    let pid = server_pid(&m);
    // A new file at the path (the running one cannot be written).
    fs::remove_file(&bin).unwrap();
    fs::write(&bin, "#!/bin/sh\nexit 3\n").unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: a plain signal to a process of ours.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_for("the supervisor to give up", || {
        fs::read_to_string(&log).is_ok_and(|l| l.contains("giving"))
    });
    let l = fs::read_to_string(&log).unwrap();
    assert!(l.contains("exit status: 3"), "{l}");
    assert!(l.contains("try 5 of 5"), "{l}");
    let e = fs::read(m.mnt.join("x")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    drop(m);
    let _ = fs::remove_dir_all(&dir);
}

/// A successor script at `path` (python3) from `body`, given the socket's
/// descriptor number as `fd`.
fn script(path: &Path, body: &str) {
    let text = format!(
        "#!/usr/bin/env python3\n\
         import os, sys, struct, json, socket\n\
         fd = int(sys.argv[2])\n\
         s = socket.socket(fileno=fd)\n\
         def send(obj):\n    b = json.dumps(obj).encode()\n    s.sendall(struct.pack('<QI', len(b), 0) + b)\n\
         def recv():\n    h = b''\n    while len(h) < 12:\n        c = s.recv(12 - len(h))\n        if not c: sys.exit(3)\n        h += c\n    n = struct.unpack('<Q', h[:8])[0]\n    got = 0\n    while got < n:\n        c = s.recv(min(1 << 20, n - got))\n        if not c: sys.exit(3)\n        got += len(c)\n\
         {body}\n"
    );
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_successor_that_fails_leaves_the_server_serving() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("skipped: no python3 (scripts/install-deps.sh installs it)");
        return;
    }
    let m = Mounted::new("upgrade-faults", &["--transport", "dev"]);
    still_serves(&m, "before");
    let bins = m.scratch.join("bins");
    fs::create_dir_all(&bins).unwrap();

    let e = upgrade(&m.mnt, Some(&bins.join("missing"))).unwrap_err();
    assert!(e.contains("no such file"), "{e}");
    still_serves(&m, "missing");

    let dies = bins.join("dies");
    script(&dies, "sys.exit(1)");
    let e = upgrade(&m.mnt, Some(&dies)).unwrap_err();
    assert!(e.contains("exited"), "{e}");
    still_serves(&m, "dies");

    let other = bins.join("other-version");
    script(&other, "send({'state_version': 999})\nrecv()");
    let e = upgrade(&m.mnt, Some(&other)).unwrap_err();
    assert!(e.contains("version"), "{e}");
    still_serves(&m, "other");
    // The state version this build writes, as that refusal says.
    let version: u32 = e
        .split("writes version ")
        .nth(1)
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no version in {e:?}"));

    // Takes the state, then dies before taking the connection: the
    // server was parked meanwhile and serves on.
    let half = bins.join("half-way");
    script(
        &half,
        &format!("send({{'state_version': {version}}})\nrecv()\nos._exit(9)"),
    );
    let e = upgrade(&m.mnt, Some(&half)).unwrap_err();
    assert!(e.contains("successor"), "{e}");
    still_serves(&m, "half");

    // Refuses the state: said, and nothing changes.
    let refuses = bins.join("refuses");
    script(
        &refuses,
        &format!("send({{'state_version': {version}}})\nrecv()\nsend({{'error': 'no thanks'}})"),
    );
    let e = upgrade(&m.mnt, Some(&refuses)).unwrap_err();
    assert!(e.contains("no thanks"), "{e}");
    still_serves(&m, "refused");
    assert_eq!(m.counter("server.generation"), 0);

    // And a real one still works.
    upgrade(&m.mnt, None).expect("upgrade after the failures");
    still_serves(&m, "after");
    assert_eq!(m.counter("server.generation"), 1);
    wait_for("the mount to answer", || m.mnt.join("after").exists());
}

/// Whether the kernel offers FUSE over io_uring (else the tests that need
/// it say so and pass).
fn uring_offered() -> bool {
    fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|v| v.trim() == "Y")
}

/// A mount served through FUSE over io_uring, or None (said why).
fn uring_mount(tag: &str, args: &[&str]) -> Option<Mounted> {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return None;
    }
    if !uring_offered() {
        eprintln!("skipped: the kernel does not offer FUSE over io_uring here");
        return None;
    }
    let mut all = vec!["--transport", "uring"];
    all.extend_from_slice(args);
    let m = Mounted::new(tag, &all);
    still_serves(&m, "before");
    assert!(m.counter("fuse.uring") > 0, "not served through io_uring");
    Some(m)
}

#[test]
fn programs_notice_nothing_across_upgrades_of_an_io_uring_memfs() {
    if let Some(m) = uring_mount("upgrade-uring-memfs", &[]) {
        programs_notice_nothing(&m, Replace::Upgrade);
        assert_eq!(m.counter("fuse.uring"), 1);
    }
}

#[test]
fn programs_notice_nothing_across_upgrades_of_an_io_uring_passthrough() {
    if let Some(m) = uring_mount("upgrade-uring-pt", &["--source", "src"]) {
        programs_notice_nothing(&m, Replace::Upgrade);
        assert_eq!(m.counter("fuse.uring"), 1);
        // The successors link to the first server's supervisor.
        assert_eq!(m.counter("server.supervised"), 1);
    }
}

#[test]
fn programs_notice_nothing_across_crashes_of_an_io_uring_passthrough() {
    if let Some(m) = uring_mount("crash-uring-pt", &["--source", "src"]) {
        assert_eq!(m.counter("server.supervised"), 1);
        programs_notice_nothing(&m, Replace::Kill);
        // Still served through the rings, by the server started last.
        assert_eq!(m.counter("fuse.uring"), 1);
        assert_eq!(m.counter("server.supervised"), 1);
    }
}

/// Whether `e` is how the kernel ends a request it had just given an
/// armed ring entry of a server that died (`ECANCELED`, Linux 6.18): the
/// copy into the entry was to run in the dead thread, so no server ever
/// saw it (fuser's `uring/recover.rs`).
fn cancelled_by_the_crash(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ECANCELED)
}

/// `op` again while it fails as [`cancelled_by_the_crash`]; counts those
/// in `lost`.
fn again<T>(lost: &std::sync::atomic::AtomicU64, mut op: impl FnMut() -> std::io::Result<T>) -> T {
    loop {
        match op() {
            Err(e) if cancelled_by_the_crash(&e) => {
                lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            r => return r.unwrap(),
        }
    }
}

/// Load on an io_uring mount while its server is replaced: threads
/// (two per CPU) write, read back, stat and look up files in a loop, each
/// counting its rounds; calls the kernel cancelled with a dead ring are
/// tried again and counted (`cancelled`). Every read must give back what
/// was written, and any other failure panics the thread.
struct Stress {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    progress: std::sync::Arc<Vec<std::sync::atomic::AtomicU64>>,
    cancelled: std::sync::Arc<std::sync::atomic::AtomicU64>,
    done: std::sync::mpsc::Receiver<usize>,
    threads: usize,
}

impl Stress {
    fn start(m: &Mounted) -> Stress {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let cancelled = Arc::new(AtomicU64::new(0));
        let threads = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
        let progress: Arc<Vec<AtomicU64>> =
            Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
        let (done_tx, done) = std::sync::mpsc::channel();
        for t in 0..threads {
            let (stop, progress, done_tx, lost) = (
                stop.clone(),
                progress.clone(),
                done_tx.clone(),
                cancelled.clone(),
            );
            let p = m.mnt.join(format!("stress{t}"));
            std::thread::spawn(move || {
                let mut f = again(&lost, || {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .open(&p)
                });
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let rec = n.to_le_bytes();
                    let at = n % 64 * 8;
                    again(&lost, || f.seek(SeekFrom::Start(at)));
                    again(&lost, || f.write_all(&rec));
                    let mut back = [0u8; 8];
                    again(&lost, || f.seek(SeekFrom::Start(at)));
                    again(&lost, || f.read_exact(&mut back));
                    assert_eq!(back, rec, "thread {t}, record {n}");
                    again(&lost, || fs::metadata(&p));
                    // A lookup the kernel must ask for.
                    let none = p.with_extension(format!("none{n}"));
                    loop {
                        match fs::metadata(&none) {
                            Err(e) if cancelled_by_the_crash(&e) => {
                                lost.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
                                break;
                            }
                            Ok(_) => panic!("{} exists", none.display()),
                        }
                    }
                    n += 1;
                    progress[t].store(n, Ordering::Relaxed);
                }
                done_tx.send(t).unwrap();
            });
        }
        let s = Stress {
            stop,
            progress,
            cancelled,
            done,
            threads,
        };
        s.moving("every thread to make progress");
        s
    }

    /// Waits until every thread's count moved on.
    fn moving(&self, what: &str) {
        use std::sync::atomic::Ordering;
        let before: Vec<u64> = self
            .progress
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .collect();
        wait_for(what, || {
            self.progress
                .iter()
                .zip(&before)
                .all(|(p, b)| p.load(Ordering::Relaxed) > *b)
        });
    }

    /// Stops the threads; every one must come back (a thread waiting on
    /// a lost request never does). Returns the calls cancelled.
    fn stop(self, across: &str) -> u64 {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        for _ in 0..self.threads {
            // A generous bound.
            self.done
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("a thread hung on a request across the {across}"));
        }
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// Load on an io_uring passthrough while its server is killed with
/// SIGKILL several times: every thread goes on (none is left waiting for
/// a request the dead server's ring held), every read gives back what was
/// written, and no call fails but those the kernel cancelled with the
/// dead ring (at most one per entry a queue keeps armed, per crash).
#[test]
fn requests_in_flight_across_io_uring_crashes_all_get_answers() {
    let Some(m) = uring_mount("crash-uring-stress", &["--source", "src"]) else {
        return;
    };
    assert_eq!(m.counter("server.supervised"), 1);
    let load = Stress::start(&m);
    for g in 1..=5 {
        common::kill_server(&m);
        assert_eq!(m.counter("server.generation"), g);
        load.moving("every thread to go on after the crash");
    }
    let lost = load.stop("crashes");
    eprintln!("{lost} calls cancelled by the kernel across 5 crashes");
    // Queues keep a few entries armed (fuser's uring.rs); far more
    // cancelled calls would mean requests lost some other way.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    assert!(lost <= 5 * cpus * 8, "{lost} calls cancelled");
    assert_eq!(m.counter("fuse.uring"), 1);
    still_serves(&m, "after");
}

/// The same load on io_uring mounts while their server is upgraded
/// several times: every thread goes on (none is left waiting on a
/// request that no server holds), the files hold what was written, and
/// no call fails at all (an upgrade's predecessor is alive: nothing is
/// cancelled).
#[test]
fn requests_in_flight_across_io_uring_upgrades_all_get_answers() {
    for (tag, args) in [
        ("upgrade-uring-stress-memfs", &[][..]),
        ("upgrade-uring-stress-pt", &["--source", "src"][..]),
    ] {
        let Some(m) = uring_mount(tag, args) else {
            return;
        };
        let load = Stress::start(&m);
        for g in 1..=5 {
            let out = upgrade(&m.mnt, None).expect("upgrade under load");
            assert!(out.contains(&format!("generation {g}")), "{out}");
            load.moving("every thread to go on after the upgrade");
        }
        assert_eq!(load.stop("upgrades"), 0, "calls cancelled across upgrades");
        assert_eq!(m.counter("server.generation"), 5);
        still_serves(&m, "after");
    }
}
