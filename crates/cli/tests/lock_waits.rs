//! Blocking lock waits through a mount served over FUSE over io_uring:
//! each parked wait keeps its ring entry, and a CPU's queue has a bounded
//! number. Waits must leave the queue entries for other requests: with
//! every entry of a queue held by waits, every other caller on that CPU
//! (another user's `stat` through root's `--allow-other` mount) would
//! wait for as long as the lock is held. And the queue grows for them:
//! processes queued on one lock from one CPU may all wait, as on a local
//! file system (past 56 on one CPU they were refused with ENOLCK).

mod common;

use common::{on_cpu0, stat_on_cpu0, uring_passthrough};
use std::fs::{self, OpenOptions};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::Duration;

/// An OFD write lock on all of `f` (`F_OFD_SETLKW` if `wait`); the errno
/// if refused.
fn ofd_lock(f: &fs::File, wait: bool) -> Result<(), i32> {
    // SAFETY: all-zero is a valid flock (plain integers).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    // SAFETY: a valid descriptor and a flock that outlives the call.
    match unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// Threads on CPU 0, each waiting for a lock (`lock`) on a file of its
/// own, closing it once its wait ends (so a granted lock goes to the
/// next) and saying how the wait ended.
struct Waiters {
    rx: mpsc::Receiver<Result<(), i32>>,
    ended: Vec<Result<(), i32>>,
    count: usize,
}

impl Waiters {
    fn start(files: Vec<fs::File>, lock: fn(&fs::File) -> Result<(), i32>) -> Waiters {
        let (tx, rx) = mpsc::channel();
        let count = files.len();
        for f in files {
            let tx = tx.clone();
            std::thread::spawn(move || {
                on_cpu0();
                let r = lock(&f);
                drop(f);
                let _ = tx.send(r);
            });
        }
        Waiters {
            rx,
            ended: Vec::new(),
            count,
        }
    }

    /// Waits until each wait is parked in the server or has ended.
    fn parked(&mut self, m: &common::Mounted) {
        common::wait_for("the waits to park or end", || {
            self.ended.extend(self.rx.try_iter());
            m.counter("fuse.locks.waiting") + self.ended.len() as u64 >= self.count as u64
        });
    }

    /// How every wait ended (once their holder lets go).
    fn ended(mut self) -> Vec<Result<(), i32>> {
        while self.ended.len() < self.count {
            let r = self.rx.recv_timeout(Duration::from_secs(60));
            self.ended.push(r.expect("a wait never ended"));
        }
        self.ended
    }
}

#[test]
fn lock_waits_leave_an_io_uring_queue_to_other_requests() {
    let Some(m) = uring_passthrough("lock-waits") else {
        return;
    };
    let path = m.mnt.join("locked");
    fs::write(&path, b"x").unwrap();
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap()
    };
    let holder = open();
    ofd_lock(&holder, false).expect("the first lock");
    const WAITERS: usize = 200;
    // Opened first: an open on a queue stuck behind parked waits would
    // hang this thread, not fail the test.
    let files: Vec<_> = (0..WAITERS).map(|_| open()).collect();
    let mut waiters = Waiters::start(files, |f| ofd_lock(f, true));
    // The waits parked (or refused), a caller on the same CPU is still
    // answered.
    waiters.parked(&m);
    std::thread::sleep(Duration::from_millis(300));
    let answered = stat_on_cpu0(&m, Duration::from_secs(20));
    drop(holder);
    assert_eq!(
        answered,
        Ok(Err(std::io::ErrorKind::NotFound)),
        "a stat on the waiters' CPU was not answered while they waited"
    );
    // Every wait ends, granted in turn: none was refused for want of
    // ring entries.
    let refused: Vec<_> = waiters.ended().iter().filter_map(|r| r.err()).collect();
    assert!(
        refused.is_empty(),
        "{} of {WAITERS} waits refused: {refused:?}",
        refused.len()
    );
}

/// `flock(LOCK_EX)` on `f`, waiting; the errno if refused.
fn flock_wait(f: &fs::File) -> Result<(), i32> {
    // SAFETY: a valid descriptor.
    match unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// Sets the server's soft descriptor limit to `n` (at most its hard
/// limit, which no one here may raise again); its old soft limit.
fn limit_fds(pid: i32, n: u64) -> u64 {
    // SAFETY: all-zero is a valid rlimit (plain integers).
    let mut old: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: reads the limit into `old`, which outlives the call.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: n.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: a valid rlimit read by the call; no old value asked for.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    old.rlim_cur
}

#[test]
fn a_queue_that_cannot_grow_goes_on_serving_its_cpu() {
    let Some(m) = uring_passthrough("lock-waits-no-fds") else {
        return;
    };
    let path = m.mnt.join("locked");
    fs::write(&path, b"x").unwrap();
    let open = || OpenOptions::new().read(true).open(&path).unwrap();
    let holder = open();
    // SAFETY: a valid descriptor.
    assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
    const WAITERS: usize = 40;
    let files: Vec<_> = (0..WAITERS).map(|_| open()).collect();
    // From here the server can open no descriptor: a queue's new entry
    // (a memfd) cannot be made. Held locks need none (flocks are on the
    // opens' own descriptions).
    let pid = common::server_pid(&m);
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count() as u64;
    let was = limit_fds(pid, fds);
    let mut waiters = Waiters::start(files, flock_wait);
    waiters.parked(&m);
    let answered = stat_on_cpu0(&m, Duration::from_secs(20));
    drop(holder);
    let ended = waiters.ended();
    limit_fds(pid, was);
    assert_eq!(
        answered,
        Ok(Err(std::io::ErrorKind::NotFound)),
        "a stat on the waiters' CPU was not answered once its queue could not grow"
    );
    // Granted in turn, or refused for want of entries; nothing else.
    for r in ended {
        if let Err(e) = r {
            assert_eq!(e, libc::ENOLCK);
        }
    }
    assert!(path.exists(), "the mount still answers");
}
