//! Live handover of a FUSE connection between two sessions, on real mounts:
//! `Pauser::park`/`release`/`unpark`, `Session::resume`, `Notifier::resend`.
//!
//! Each file system answers a read with its generation byte, so a read
//! tells which session served it. Needs root and /dev/fuse; skipped (with a
//! message) without them.

use std::ffi::CString;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;
use std::thread;
use std::time::Duration;
use std::time::UNIX_EPOCH;

use fuser::Config;
use fuser::Errno;
use fuser::FileAttr;
use fuser::FileHandle;
use fuser::FileType;
use fuser::Filesystem;
use fuser::FopenFlags;
use fuser::Generation;
use fuser::INodeNo;
use fuser::InitFlags;
use fuser::KernelConfig;
use fuser::LockOwner;
use fuser::Negotiated;
use fuser::OpenFlags;
use fuser::ReplyAttr;
use fuser::ReplyData;
use fuser::ReplyEntry;
use fuser::ReplyOpen;
use fuser::Request;
use fuser::Session;
use fuser::SessionACL;
use parking_lot::Condvar;
use parking_lot::Mutex;

const GEN: u64 = 2;
/// Reads of this file are held (never answered) by a file system with
/// `hold` set.
const HOLD: u64 = 3;
const PARK_TIMEOUT: Duration = Duration::from_secs(30);

/// What a test sees of one file system.
#[derive(Default)]
struct Probe {
    reads: AtomicU64,
    destroyed: AtomicBool,
    held: Mutex<Vec<ReplyData>>,
    held_cv: Condvar,
    /// Unique ids of the HOLD reads this file system answered.
    answered_holds: Mutex<Vec<u64>>,
}

struct GenFs {
    generation: u8,
    hold: bool,
    uring: bool,
    probe: Arc<Probe>,
}

fn attr(ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: if ino == 1 { 0 } else { 1 },
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if ino == 1 {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if ino == 1 { 0o755 } else { 0o644 },
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for GenFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if self.uring {
            let _ = config.add_capabilities(InitFlags::FUSE_OVER_IO_URING);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.probe.destroyed.store(true, SeqCst);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = match (parent.0, name.as_bytes()) {
            (1, b"gen") => GEN,
            (1, b"hold") => HOLD,
            _ => return reply.error(Errno::ENOENT),
        };
        reply.entry(&Duration::from_secs(60), &attr(ino), Generation(0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.attr(&Duration::from_secs(60), &attr(ino.0));
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _f: OpenFlags, _k: bool, reply: ReplyOpen) {
        // Direct I/O: every read reaches the server, none is served from
        // the page cache.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino.0 == HOLD {
            if self.hold {
                self.probe.held.lock().push(reply);
                self.probe.held_cv.notify_all();
                return;
            }
            self.probe.answered_holds.lock().push(req.unique().0);
        }
        self.probe.reads.fetch_add(1, SeqCst);
        reply.data(&[self.generation]);
    }
}

fn fs(generation: u8) -> (GenFs, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let fs = GenFs {
        generation,
        hold: false,
        uring: false,
        probe: probe.clone(),
    };
    (fs, probe)
}

fn config() -> Config {
    let mut c = Config::default();
    c.acl = SessionACL::All;
    c.n_threads = Some(2);
    c.clone_fd = true;
    c
}

/// A mount served through a /dev/fuse fd the test holds; unmounted (lazily)
/// on drop.
struct TestMount {
    dir: tempfile::TempDir,
}

impl TestMount {
    /// None (after saying why) where mounting cannot work.
    fn new() -> Option<(TestMount, OwnedFd)> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
            eprintln!("skipped: needs root and /dev/fuse");
            return None;
        }
        let dev = File::options()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("open /dev/fuse");
        let dir = tempfile::tempdir().expect("tempdir");
        let target = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
        let opts = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            std::os::fd::AsRawFd::as_raw_fd(&dev)
        ))
        .unwrap();
        // SAFETY: all pointers are valid NUL-terminated strings that
        // outlive the call.
        let rc = unsafe {
            libc::mount(
                c"fuser-takeover".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                opts.as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount: {}", io::Error::last_os_error());
        Some((TestMount { dir }, OwnedFd::from(dev)))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let target = CString::new(self.dir.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: `target` is a valid NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

fn read_byte(f: &File) -> io::Result<u8> {
    let mut b = [0u8; 1];
    let n = f.read_at(&mut b, 0)?;
    assert_eq!(n, 1, "short read");
    Ok(b[0])
}

/// Waits (without a time limit: the test harness has one) until `cond`.
fn wait_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        thread::sleep(Duration::from_millis(1));
    }
}

/// Resumes a session for `fs` on a dup of `fd` with `negotiated` shipped
/// through bytes, sends the resend, and starts it.
fn successor(fs: GenFs, fd: OwnedFd, negotiated: Negotiated) -> thread::JoinHandle<io::Result<()>> {
    let shipped = Negotiated::from_bytes(&negotiated.to_bytes()).expect("decode");
    assert_eq!(shipped, negotiated);
    let b = Session::resume(fs, fd, SessionACL::All, config(), shipped).expect("resume");
    // Before B reads anything: a resend also requeues what B's own fds hold.
    if negotiated.has_resend() {
        b.notifier().resend().expect("FUSE_NOTIFY_RESEND");
    } else {
        eprintln!("kernel does not announce FUSE_HAS_RESEND");
    }
    thread::spawn(move || b.run())
}

#[test]
fn handover_keeps_every_read_and_later_reads_go_to_the_successor() {
    let Some((mount, fd)) = TestMount::new() else {
        return;
    };
    let (fs_a, probe_a) = fs(1);
    let a = Session::from_fd(fs_a, fd, SessionACL::All, config()).expect("session A");
    let negotiated = a.negotiated();
    assert_eq!(negotiated.major, 7);
    assert!(
        !negotiated.io_uring(),
        "the test fs did not ask for io_uring"
    );
    let dup = a.as_fd().try_clone_to_owned().expect("dup");
    let pauser = a.pauser();
    let run_a = thread::spawn(move || a.run());

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = {
        let (stop, seen) = (stop.clone(), seen.clone());
        let f = File::open(mount.path("gen")).expect("open gen");
        thread::spawn(move || -> io::Result<()> {
            while !stop.load(SeqCst) {
                let b = read_byte(&f)?;
                seen.lock().push(b);
            }
            Ok(())
        })
    };
    wait_until(|| seen.lock().len() >= 50);

    pauser.park(PARK_TIMEOUT).expect("park A");
    // A answered its last read before park returned; the reader may not
    // have recorded it yet.
    let at_park = seen.lock().len() + 1;
    let (fs_b, probe_b) = fs(2);
    let run_b = successor(fs_b, dup, negotiated);
    pauser.release().expect("release A");
    run_a.join().unwrap().expect("A's run() after release");
    assert!(
        !probe_a.destroyed.load(SeqCst),
        "a released session must not call destroy"
    );

    let after_release = seen.lock().len();
    wait_until(|| seen.lock().len() >= after_release + 50);
    stop.store(true, SeqCst);
    reader.join().unwrap().expect("every read succeeds");

    let seen = seen.lock().clone();
    let first_b = seen.iter().position(|&b| b == 2).expect("B served reads");
    assert!(seen[..first_b].iter().all(|&b| b == 1), "{seen:?}");
    assert!(
        seen[first_b..].iter().all(|&b| b == 2),
        "A served after B: {seen:?}"
    );
    assert!(first_b <= at_park, "A served after park: {seen:?}");

    drop(mount);
    run_b.join().unwrap().expect("B's run()");
    assert!(probe_b.destroyed.load(SeqCst), "B ends the connection");
}

#[test]
fn a_request_held_by_the_predecessor_is_answered_by_the_successor() {
    let Some((mount, fd)) = TestMount::new() else {
        return;
    };
    let (mut fs_a, probe_a) = fs(1);
    fs_a.hold = true;
    let a = Session::from_fd(fs_a, fd, SessionACL::All, config()).expect("session A");
    let negotiated = a.negotiated();
    if !negotiated.has_resend() {
        eprintln!("skipped: the kernel has no FUSE_NOTIFY_RESEND");
        return;
    }
    let dup = a.as_fd().try_clone_to_owned().expect("dup");
    let pauser = a.pauser();
    let run_a = thread::spawn(move || a.run());

    let f = File::open(mount.path("hold")).expect("open hold");
    let blocked = thread::spawn(move || read_byte(&f));
    {
        let mut held = probe_a.held.lock();
        while held.is_empty() {
            probe_a.held_cv.wait(&mut held);
        }
    }

    pauser.park(PARK_TIMEOUT).expect("park A");
    let (fs_b, probe_b) = fs(2);
    let run_b = successor(fs_b, dup, negotiated);
    pauser.release().expect("release A");
    run_a.join().unwrap().expect("A's run() after release");

    assert_eq!(blocked.join().unwrap().expect("the held read"), 2);
    let uniques = probe_b.answered_holds.lock().clone();
    assert_eq!(uniques.len(), 1);
    assert_ne!(
        uniques[0] & (1 << 63),
        0,
        "a resent request has FUSE_UNIQUE_RESEND"
    );
    // A's stale reply, now that B answered: the kernel refuses it, harmlessly.
    probe_a.held.lock().clear();

    drop(mount);
    run_b.join().unwrap().expect("B's run()");
}

#[test]
fn park_then_unpark_serves_again() {
    let Some((mount, fd)) = TestMount::new() else {
        return;
    };
    let (fs_a, probe_a) = fs(1);
    let a = Session::from_fd(fs_a, fd, SessionACL::All, config()).expect("session A");
    let pauser = a.pauser();
    let run_a = thread::spawn(move || a.run());
    let f = Arc::new(File::open(mount.path("gen")).expect("open gen"));
    assert_eq!(read_byte(&f).unwrap(), 1);

    assert!(pauser.release().is_err(), "release without park is refused");
    pauser.park(PARK_TIMEOUT).expect("park");
    let before = probe_a.reads.load(SeqCst);
    let waiting = {
        let f = f.clone();
        thread::spawn(move || read_byte(&f))
    };
    // A parked session serves nothing: the read waits in the kernel.
    thread::sleep(Duration::from_millis(100));
    assert_eq!(probe_a.reads.load(SeqCst), before, "served while parked");
    pauser.unpark();
    assert_eq!(waiting.join().unwrap().unwrap(), 1);
    for _ in 0..20 {
        assert_eq!(read_byte(&f).unwrap(), 1);
    }
    // Parks again after an unpark.
    pauser.park(PARK_TIMEOUT).expect("park again");
    pauser.unpark();
    assert_eq!(read_byte(&f).unwrap(), 1);

    drop(f);
    drop(mount);
    run_a.join().unwrap().expect("run()");
    assert!(
        probe_a.destroyed.load(SeqCst),
        "an unreleased session destroys"
    );
}

#[test]
fn negotiated_bytes_round_trip_and_unknown_versions_are_refused() {
    let Some((mount, fd)) = TestMount::new() else {
        return;
    };
    let (fs_a, _) = fs(1);
    let a = Session::from_fd(fs_a, fd, SessionACL::All, config()).expect("session A");
    let n = a.negotiated();
    let bytes = n.to_bytes();
    assert_eq!(Negotiated::from_bytes(&bytes).unwrap(), n);
    let mut future = bytes.clone();
    future[8..12].copy_from_slice(&99u32.to_le_bytes());
    let e = Negotiated::from_bytes(&future).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(Negotiated::from_bytes(b"garbage").is_err());

    // A resume on something that is not /dev/fuse is refused.
    let not_fuse = OwnedFd::from(File::open("/dev/null").unwrap());
    let (fs_b, _) = fs(2);
    assert!(Session::resume(fs_b, not_fuse, SessionACL::All, config(), n).is_err());
    drop(a);
    drop(mount);
}

#[test]
fn park_and_unpark_an_io_uring_session() {
    if !fuser::uring_enabled_in_kernel() {
        eprintln!("skipped: FUSE over io_uring is not enabled (fuse module enable_uring)");
        return;
    }
    let Some((mount, fd)) = TestMount::new() else {
        return;
    };
    let (mut fs_a, _) = fs(1);
    fs_a.uring = true;
    let a = Session::from_fd(fs_a, fd, SessionACL::All, config()).expect("session A");
    if !a.negotiated().io_uring() {
        eprintln!("skipped: the kernel did not negotiate FUSE_OVER_IO_URING");
        return;
    }
    let pauser = a.pauser();
    let run_a = thread::spawn(move || a.run());
    let f = File::open(mount.path("gen")).expect("open gen");
    assert_eq!(read_byte(&f).unwrap(), 1);
    // Parked, the queues neither dispatch nor commit: a read made now
    // waits in the kernel (or in an entry) and is served after unpark.
    pauser.park(PARK_TIMEOUT).expect("park an io_uring session");
    let reader = {
        let f = f.try_clone().unwrap();
        thread::spawn(move || read_byte(&f))
    };
    pauser.unpark();
    assert_eq!(reader.join().unwrap().unwrap(), 1, "the read made while parked");
    assert_eq!(read_byte(&f).unwrap(), 1, "still serving");
    drop(f);
    drop(mount);
    run_a.join().unwrap().expect("run()");
}
