//! A passthrough over a backing file system that fails: every backing
//! error reaches the caller as that errno, the server survives it, and
//! nothing is answered from a stale or wrong node.
//!
//! The backing file system is `FaultFs` (`faultfs.rs`), a small fuser
//! file system that answers EIO where told to (no block device, device
//! mapper or fault injection is needed). Being FUSE, it is also a backing
//! file system whose file handles are *not* persistent: `open_by_handle_at`
//! works only while its kernel inode is cached (no export support), which
//! the second test checks the passthrough copes with. Skipped where FUSE
//! cannot be mounted.
//!
//! # Modules
//! `faultfs.rs` is the failing file system, `stack.rs` mounts it with a
//! uvfs passthrough on top. The tests stay here, so their names are the
//! binary's top level.

#[path = "../common/mod.rs"]
mod common;

mod faultfs;
mod stack;

use faultfs::{content, ino_of, ENTRIES, FIRST_MANY, HALF, MANY};
use stack::Stack;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

#[test]
fn backing_eio_reaches_the_caller_and_the_server_survives() {
    let Some(s) = Stack::new("eio", 64) else {
        return;
    };
    let good = content(ino_of("good"));
    assert_eq!(std::fs::read(s.p("good")).unwrap(), good);

    assert_eq!(errno(std::fs::read(s.p("badread"))), Some(libc::EIO));
    assert_eq!(
        errno(std::fs::symlink_metadata(s.p("badattr"))),
        Some(libc::EIO)
    );
    assert_eq!(
        errno(std::fs::symlink_metadata(s.p("badlookup"))),
        Some(libc::EIO)
    );
    assert_eq!(errno(std::fs::File::open(s.p("badopen"))), Some(libc::EIO));
    let listing = std::fs::read_dir(s.p("baddir")).and_then(|d| d.collect::<Result<Vec<_>, _>>());
    assert_eq!(errno(listing), Some(libc::EIO));

    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(s.p("badwrite"))
        .unwrap();
    // SAFETY: a valid fd and a 3-byte buffer.
    let n = unsafe { libc::pwrite(f.as_raw_fd(), b"abc".as_ptr().cast(), 3, 0) };
    assert_eq!(n, -1, "a write the backing file refused");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EIO)
    );
    assert_eq!(errno(f.sync_all()), Some(libc::EIO));
    drop(f);

    let x = cpath(&s.p("badxattr"));
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings and a buffer of the given length.
    let r = unsafe { libc::lgetxattr(x.as_ptr(), c"user.k".as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EIO))
    );
    // SAFETY: as above.
    let r = unsafe { libc::llistxattr(x.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EIO))
    );

    // A transient error is not remembered: once the backing file reads
    // again, so does the mount.
    s.sw.flaky_fails.store(true, Ordering::SeqCst);
    assert_eq!(errno(std::fs::read(s.p("flaky"))), Some(libc::EIO));
    s.sw.flaky_fails.store(false, Ordering::SeqCst);
    assert_eq!(
        std::fs::read(s.p("flaky")).unwrap(),
        content(ino_of("flaky"))
    );

    // A listing that fails half way fails (it is not cut short and
    // cached as complete); once the backing directory lists again, the
    // whole listing comes back, each name once.
    let list = |s: &Stack| -> std::io::Result<Vec<String>> {
        let mut v = std::fs::read_dir(s.p("halfdir"))?
            .map(|e| e.map(|e| e.file_name().into_string().unwrap()))
            .collect::<Result<Vec<_>, _>>()?;
        v.sort();
        Ok(v)
    };
    s.sw.half_fails.store(true, Ordering::SeqCst);
    assert_eq!(errno(list(&s)), Some(libc::EIO));
    s.sw.half_fails.store(false, Ordering::SeqCst);
    let mut want: Vec<String> = (0..HALF).map(|n| format!("h{n}")).collect();
    want.sort();
    assert_eq!(list(&s).unwrap(), want);
    // And again while the backing fails: nothing cached hides the error
    // or the failure leaves half a listing behind.
    s.sw.half_fails.store(true, Ordering::SeqCst);
    let again = list(&s);
    s.sw.half_fails.store(false, Ordering::SeqCst);
    assert!(matches!(&again, Ok(v) if *v == want) || errno(again) == Some(libc::EIO));
    assert_eq!(list(&s).unwrap(), want);

    assert!(s.sw.injected.load(Ordering::Relaxed) >= 10);
    // The server is healthy: the good file and the whole tree still work.
    assert_eq!(std::fs::read(s.p("good")).unwrap(), good);
    let mut names: Vec<String> = std::fs::read_dir(s.p(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> = ENTRIES.iter().map(|e| e.0.to_string()).collect();
    want.sort();
    assert_eq!(names, want);
}

/// FUSE file handles (no export support) open only while the backing
/// kernel still caches the inode. Nodes the top kernel keeps (held here by
/// O_PATH fds) whose backing fds the passthrough gave back under its
/// budget must still be found after the backing kernel dropped its
/// inodes: a file that exists never answers ESTALE.
#[test]
fn nodes_outlive_backing_inodes_without_persistent_handles() {
    const BUDGET: usize = 24;
    let Some(s) = Stack::new("handles", BUDGET) else {
        return;
    };
    let mut held = Vec::new();
    for n in 0..MANY {
        let p = s.p(&format!("many/f{n}"));
        held.push(
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(&p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        );
    }
    // The passthrough keeps at most BUDGET backing fds, so most of these
    // nodes have none now; dropping the kernel's unused inodes makes the
    // faulty mount forget the files behind them.
    std::fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
    for (n, f) in held.iter().enumerate() {
        let n = n as u64;
        let md = f
            .metadata()
            .unwrap_or_else(|e| panic!("fstat of f{n}: {e}"));
        assert_eq!(md.len(), content(FIRST_MANY + n).len() as u64, "f{n}");
        let data = std::fs::read(format!("/proc/self/fd/{}", f.as_raw_fd()))
            .unwrap_or_else(|e| panic!("reopen of f{n}: {e}"));
        assert_eq!(data, content(FIRST_MANY + n), "f{n}");
    }
    // The checks went through fds given back and opened again, within
    // the budget.
    let r = s.top.as_ref().unwrap().report(false);
    let c = |k: &str| {
        r["counters"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {r}"))
    };
    assert!(
        c("passthrough.fds.evictions") >= MANY - BUDGET as u64,
        "{r}"
    );
    assert!(
        c("passthrough.reopen.fallback") >= MANY - BUDGET as u64,
        "{r}"
    );
    assert!(c("passthrough.fds.max_used") <= BUDGET as u64, "{r}");
    assert_eq!(c("passthrough.stale"), 0, "{r}");
}

/// Pins the calling thread to `cpu`: requests it makes go to that CPU's
/// io_uring queue.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one CPU set is a valid set;
    // sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// While `slow` (run on CPU 0) waits in `FaultFs`, a read of another file
/// from the same CPU must be answered: through io_uring both reach CPU
/// 0's queue, which serves one request at a time. `what` names the
/// request the server must have offloaded.
fn others_are_served_while(s: &Stack, what: &str, slow: impl FnOnce() + Send + 'static) {
    others_are_served_while_reading(s, "good", ino_of("good"), what, slow)
}

/// As `others_are_served_while`, the other file being `rel` (of inode
/// `ino`). A read in another directory than the slow request's: while an
/// UNLINK is in flight, the kernel keeps its directory locked, and a
/// lookup there waits whatever the server does.
fn others_are_served_while_reading(
    s: &Stack,
    rel: &str,
    ino: u64,
    what: &str,
    slow: impl FnOnce() + Send + 'static,
) {
    const WAIT: Duration = Duration::from_secs(30);
    // Read once first, so the kernel has dentries for the path: a name
    // it has never seen is looked up with its directory locked, which an
    // UNLINK in that directory holds, whatever the server does.
    assert_eq!(std::fs::read(s.p(rel)).unwrap(), content(ino));
    *s.sw.hold.lock().unwrap() = true;
    let slow = std::thread::spawn(move || {
        pin_to(0);
        slow()
    });
    let deadline = std::time::Instant::now() + WAIT;
    while s.sw.waiting.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "no {what} arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let other = s.p(rel);
    std::thread::spawn(move || {
        pin_to(0);
        let _ = tx.send(std::fs::read(other));
    });
    // Bounded, so that a server that does hold it up fails the test
    // instead of hanging it; the slow request is let go either way.
    let read = rx.recv_timeout(WAIT);
    s.sw.release();
    slow.join().unwrap();
    let read = read.unwrap_or_else(|_| panic!("a read waited for another file's {what}"));
    assert_eq!(read.unwrap(), content(ino));
    if common::uring() {
        let r = s.top.as_ref().unwrap().report(false);
        assert!(
            r["counters"]["fuse.requests.offloaded"].as_u64().unwrap() >= 1,
            "the {what} was not offloaded: {}",
            r["counters"]
        );
    }
}

#[test]
fn an_fsync_waiting_for_the_disk_holds_up_no_other_request() {
    let Some(s) = Stack::new("slowsync", 64) else {
        return;
    };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(s.p("slowsync"))
        .unwrap();
    others_are_served_while(&s, "FSYNC", move || {
        f.sync_all().expect("the fsync completes once released")
    });
}

#[test]
fn an_unlink_freeing_a_large_file_holds_up_no_other_request() {
    let Some(s) = Stack::new("slowunlink", 64) else {
        return;
    };
    let p = s.p("slowunlink");
    others_are_served_while_reading(&s, "many/f7", FIRST_MANY + 7, "UNLINK", move || {
        std::fs::remove_file(p).expect("the unlink completes once released")
    });
}

#[test]
fn a_read_waiting_for_the_disk_holds_up_no_other_request() {
    let Some(s) = Stack::new("slowread", 64) else {
        return;
    };
    let p = s.p("slowread");
    others_are_served_while(&s, "READ", move || {
        let got = std::fs::read(p).expect("the read completes once released");
        assert_eq!(got, content(ino_of("slowread")));
    });
}

#[test]
fn a_write_waiting_for_the_disk_holds_up_no_other_request_after_the_first() {
    // Nothing says beforehand that a write will wait (dirty-page
    // throttling), so the first one that does holds up its queue; once one
    // has, the next writes are served off it (`write_stall.rs`).
    let Some(s) = Stack::new("slowwrite", 64) else {
        return;
    };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(s.p("slowwrite"))
        .unwrap();
    others_are_served_while(&s, "WRITE", move || {
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"first", 0)
            .expect("the first write completes");
        f.write_all_at(b"second", 0)
            .expect("the second write completes once released");
    });
}
