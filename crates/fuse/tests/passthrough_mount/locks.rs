//! Locks taken through the mount meet the source's other users: flock,
//! POSIX and OFD locks, waits, and SQLite writers on both sides.

use crate::common::said;
use crate::Pt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// Two processes each holding a byte of one file through the mount and
/// then waiting for the other's: the second to wait is answered EDEADLK
/// (as natively, where the passthrough's locks on the source, OFD locks,
/// get no such check from the kernel), and the first gets its lock once
/// the second lets go.
#[test]
fn a_deadlock_between_two_lock_waits_is_refused() {
    use std::io::Write;
    let Some(t) = Pt::new("deadlock") else { return };
    std::fs::write(t.src("f"), b"0123456789").unwrap();
    let script = r#"
import fcntl, os, sys
mine, theirs = int(sys.argv[1]), int(sys.argv[2])
fd = os.open(sys.argv[3], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, mine)
print("held", flush=True)
sys.stdin.readline()
try:
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, theirs)
    print("got", flush=True)
except OSError as e:
    print("errno", e.errno, flush=True)
sys.stdin.read()
"#;
    let spawn = |mine: u32, theirs: u32| {
        Command::new("python3")
            .args(["-c", script, &mine.to_string(), &theirs.to_string()])
            .arg(t.m("f"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn(0, 1), spawn(1, 0));
    assert_eq!(said(&mut a), "held");
    assert_eq!(said(&mut b), "held");
    writeln!(a.stdin.as_mut().unwrap()).unwrap();
    wait_for_waits(&t, 1, "the first wait");
    // Read aside: a deadlock missed would leave both waiting for ever.
    let out = b.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut line = String::new();
        let _ = std::io::BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line.trim().to_string());
    });
    writeln!(b.stdin.as_mut().unwrap()).unwrap();
    let Ok(answer) = rx.recv_timeout(Duration::from_secs(30)) else {
        let _ = (a.kill(), b.kill());
        panic!("a deadlock left both waiters waiting");
    };
    assert_eq!(answer, format!("errno {}", libc::EDEADLK));
    assert!(release(b).success());
    assert_eq!(said(&mut a), "got", "the first waiter was not granted");
    assert!(release(a).success());
}

/// The number of SETLKW requests parked on `t`'s mount now.
fn waiting(t: &Pt) -> u64 {
    t.mount.as_ref().unwrap().report(false)["counters"]["fuse.locks.waiting"]
        .as_u64()
        .unwrap()
}

fn wait_for_waits(t: &Pt, n: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiting(t) != n {
        assert!(
            Instant::now() < deadline,
            "{what}: {} waits, not {n}",
            waiting(t)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A python process holding byte `argv[1]` of a file, which on each line
/// of its stdin waits for the next range of `argv[2..]` (start:len),
/// printing `got` or the errno, and holds its locks until stdin closes.
fn byte_locker(t: &Pt, mine: &str, waits: &[&str]) -> std::process::Child {
    let script = r#"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, int(sys.argv[2]))
print("held", flush=True)
for w in sys.argv[3:]:
    sys.stdin.readline()
    start, n = map(int, w.split(":"))
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, n, start)
        print("got", flush=True)
    except OSError as e:
        print("errno", e.errno, flush=True)
sys.stdin.read()
"#;
    Command::new("python3")
        .args(["-c", script])
        .arg(t.m("f"))
        .arg(mine)
        .args(waits)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A wait that first meets the lock of an owner waiting for nothing, and
/// once that lock goes meets the lock of an owner waiting for it, is then
/// answered EDEADLK: the check is made again each time a wait is tried,
/// as the kernel makes it on each wake-up (LTP's fcntl17).
#[test]
fn a_deadlock_met_once_another_lock_goes_is_refused() {
    use std::io::Write;
    let Some(t) = Pt::new("deadlock-later") else {
        return;
    };
    std::fs::write(t.src("f"), b"0123456789").unwrap();
    // One after the other: a file's locks are met in the order taken.
    let take = |byte: &str, waits: &[&str]| {
        let mut p = byte_locker(&t, byte, waits);
        assert_eq!(said(&mut p), "held");
        p
    };
    let a = take("0", &[]);
    let mut b = take("1", &["2:1"]);
    let mut c = take("2", &["0:2"]);
    writeln!(b.stdin.as_mut().unwrap()).unwrap();
    wait_for_waits(&t, 1, "b waiting for c");
    // c meets a's byte first (the first conflict in the file's list):
    // a waits for nothing, so c waits.
    writeln!(c.stdin.as_mut().unwrap()).unwrap();
    wait_for_waits(&t, 2, "c waiting for a");
    // With a gone, c meets b's byte, and b waits for c.
    assert!(release(a).success());
    assert_eq!(said(&mut c), format!("errno {}", libc::EDEADLK));
    assert!(release(c).success());
    assert_eq!(said(&mut b), "got", "b was not granted once c went");
    assert!(release(b).success());
}

/// One process's threads mixing POSIX and OFD locks on one file: a POSIX
/// wait for a byte an OFD lock holds, then an OFD wait, through that same
/// open file, for a byte the process's POSIX lock holds. Natively neither
/// is a deadlock (the kernel searches only processes' locks: another
/// thread may let the POSIX byte go, and does), and neither may be
/// answered EDEADLK here (LTP's fcntl36).
#[test]
fn posix_and_ofd_waits_of_one_process_are_no_deadlock() {
    use std::io::Write;
    let Some(t) = Pt::new("ofd-posix-threads") else {
        return;
    };
    std::fs::write(t.src("f"), b"0123456789").unwrap();
    let script = r#"
import fcntl, os, struct, sys, threading
path = sys.argv[1]
posix, ofd, other = (os.open(path, os.O_RDWR) for _ in range(3))
def ofd_lock(cmd, typ, start):
    fcntl.fcntl(ofd, cmd, struct.pack("hhqqi", typ, 0, start, 1, 0))
fcntl.lockf(posix, fcntl.LOCK_EX, 1, 0)
ofd_lock(fcntl.F_OFD_SETLK, fcntl.F_WRLCK, 5)
said = []
def posix_wait():
    try:
        fcntl.lockf(other, fcntl.LOCK_EX, 1, 5)
        said.append("posix got")
    except OSError as e:
        said.append(f"posix errno {e.errno}")
def ofd_wait():
    try:
        ofd_lock(fcntl.F_OFD_SETLKW, fcntl.F_WRLCK, 0)
        said.append("ofd got")
        ofd_lock(fcntl.F_OFD_SETLK, fcntl.F_UNLCK, 5)
    except OSError as e:
        said.append(f"ofd errno {e.errno}")
p = threading.Thread(target=posix_wait)
p.start()
print("posix waits", flush=True)
sys.stdin.readline()
o = threading.Thread(target=ofd_wait)
o.start()
print("ofd waits", flush=True)
sys.stdin.readline()
fcntl.lockf(posix, fcntl.LOCK_UN, 1, 0)
o.join()
p.join()
print(", ".join(said), flush=True)
"#;
    let mut c = Command::new("python3")
        .args(["-c", script])
        .arg(t.m("f"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(said(&mut c), "posix waits");
    wait_for_waits(&t, 1, "the POSIX wait");
    writeln!(c.stdin.as_mut().unwrap()).unwrap();
    assert_eq!(said(&mut c), "ofd waits");
    wait_for_waits(&t, 2, "the OFD wait (an EDEADLK answers it at once)");
    writeln!(c.stdin.as_mut().unwrap()).unwrap();
    assert_eq!(said(&mut c), "ofd got, posix got");
    assert!(release(c).success());
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

    // F_GETLK through the mount names the holder: one on the host, and
    // one that locked through the mount (held on the source as an OFD
    // lock, which the kernel names no process for).
    for at in [&host, &mnt] {
        let mut h = locker("posix", at);
        assert_eq!(said(&mut h), "held");
        let pid = h.id();
        let mut g = locker("getlk", &mnt);
        assert_eq!(said(&mut g), format!("getlk locked 0 10 pid {pid}"));
        g.wait().unwrap();
        assert!(release(h).success());
    }
    let mut h = locker("posix", &host);
    assert_eq!(said(&mut h), "held");
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
/// `path` opened for reading and writing.
fn open_rw(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

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
    let rw = || open_rw(&mnt);
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

fn flock_nb(f: &std::fs::File, op: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this process owns.
    if unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn a_flock_goes_with_its_open_file_though_the_file_stays_open() {
    // The first open of a file is the one whose source descriptor the
    // kernel reads and writes through (kernel I/O), and it keeps that
    // description while any open of the file remains: a flock taken
    // through that first open must still go when it closes (it stayed
    // held until the file's last close, and `flock FILE cmd` run by two
    // shells in turn hung for good).
    let Some(t) = Pt::new("flock-first") else {
        return;
    };
    std::fs::write(t.src("f"), b"x").unwrap();
    let mnt = t.m("f");
    let rw = || open_rw(&mnt);
    for round in 0..3 {
        let first = rw();
        flock_nb(&first, libc::LOCK_EX).unwrap();
        // Another open while it is held, kept past its close.
        let other = std::fs::File::open(&mnt).unwrap();
        drop(first);
        // The RELEASE that drops it is sent after the close returns.
        let next = rw();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = flock_nb(&next, libc::LOCK_EX) {
            assert_eq!(e.raw_os_error(), Some(libc::EWOULDBLOCK), "{e}");
            assert!(
                Instant::now() < deadline,
                "round {round}: a flock outlived its open file"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // And on the source, for its other users, once let go.
        flock_nb(&next, libc::LOCK_UN).unwrap();
        let host = std::fs::File::open(t.src("f")).unwrap();
        flock_nb(&host, libc::LOCK_EX).unwrap();
        drop((host, next, other));
    }
}
