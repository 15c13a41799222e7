//! A passthrough over a backing file system that fails: every backing
//! error reaches the caller as that errno, the server survives it, and
//! nothing is answered from a stale or wrong node.
//!
//! The backing file system is `FaultFs` below, a small fuser file system
//! that answers EIO where told to (no block device, device mapper or
//! fault injection is needed). Being FUSE, it is also a backing file
//! system whose file handles are *not* persistent: `open_by_handle_at`
//! works only while its kernel inode is cached (no export support), which
//! the second test checks the passthrough copes with. Skipped where FUSE
//! cannot be mounted.

mod common;

use common::fuse_usable;
use fuser::{
    Errno as FErrno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    ReplyXattr, Request, WriteFlags,
};
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

const ROOT: u64 = 1;
/// The directory of `MANY` plain files (`f0`, `f1`, ...).
const MANY_DIR: u64 = 9;
const MANY: u64 = 300;
const FIRST_MANY: u64 = 100;
/// A directory of `HALF` entries (`h0`, ...) whose listing can fail
/// half way.
const HALF_DIR: u64 = 11;
const HALF: u64 = 1000;
const FIRST_HALF: u64 = 1000;

/// Root entries: (name, inode, kind). Each name says what fails.
const ENTRIES: &[(&str, u64, FileType)] = &[
    ("good", 2, FileType::RegularFile),
    ("badread", 3, FileType::RegularFile),
    ("badattr", 4, FileType::RegularFile),
    ("baddir", 5, FileType::Directory),
    ("badwrite", 6, FileType::RegularFile),
    ("badxattr", 7, FileType::RegularFile),
    ("badopen", 8, FileType::RegularFile),
    ("many", MANY_DIR, FileType::Directory),
    ("flaky", 10, FileType::RegularFile),
    ("halfdir", HALF_DIR, FileType::Directory),
    ("slowsync", 12, FileType::RegularFile),
    ("slowread", 13, FileType::RegularFile),
    ("slowwrite", 14, FileType::RegularFile),
    ("slowunlink", 15, FileType::RegularFile),
];

fn ino_of(name: &str) -> u64 {
    ENTRIES.iter().find(|e| e.0 == name).unwrap().1
}

/// The content of every readable file: its own inode number, so a read
/// answered from the wrong file shows.
fn content(ino: u64) -> Vec<u8> {
    format!("file {ino}\n").into_bytes()
}

#[derive(Default)]
struct Switches {
    /// While set, every read of `flaky` fails with EIO.
    flaky_fails: AtomicBool,
    /// While set, listing `halfdir` fails with EIO past its first half.
    half_fails: AtomicBool,
    /// Requests answered with EIO (so the test knows they reached us).
    injected: AtomicUsize,
    /// While true, an FSYNC of `slowsync`, a READ of `slowread`, every
    /// WRITE of `slowwrite` but the first and an UNLINK of `slowunlink` (a
    /// 1 GiB file, freed in the call) wait (a disk that takes its time);
    /// `waiting` counts those waiting.
    hold: std::sync::Mutex<bool>,
    released: std::sync::Condvar,
    waiting: AtomicUsize,
    /// WRITEs of `slowwrite` so far.
    slow_writes: AtomicUsize,
}

impl Switches {
    /// Waits while `hold` is set.
    fn wait_if_held(&self) {
        let mut held = self.hold.lock().unwrap();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while *held {
            held = self.released.wait(held).unwrap();
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    fn release(&self) {
        *self.hold.lock().unwrap() = false;
        self.released.notify_all();
    }
}

struct FaultFs {
    sw: Arc<Switches>,
}

impl FaultFs {
    fn kind(ino: u64) -> Option<FileType> {
        match ino {
            ROOT => Some(FileType::Directory),
            i if (FIRST_MANY..FIRST_MANY + MANY).contains(&i) => Some(FileType::RegularFile),
            i if (FIRST_HALF..FIRST_HALF + HALF).contains(&i) => Some(FileType::RegularFile),
            i => ENTRIES.iter().find(|e| e.1 == i).map(|e| e.2),
        }
    }

    fn attr(ino: u64, kind: FileType) -> FileAttr {
        let dir = kind == FileType::Directory;
        FileAttr {
            ino: INodeNo(ino),
            size: if dir { 0 } else { content(ino).len() as u64 },
            // (`slowunlink` holds 1 GiB of storage, in 512-byte units.)
            blocks: if ino == ino_of("slowunlink") {
                1 << 21
            } else {
                0
            },
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm: if dir { 0o755 } else { 0o644 },
            nlink: if dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn eio(&self) -> FErrno {
        self.sw.injected.fetch_add(1, Ordering::Relaxed);
        FErrno::EIO
    }
}

/// Nothing is cached by the kernel of the faulty mount: every request the
/// passthrough makes reaches `FaultFs`.
const TTL: Duration = Duration::ZERO;

impl fuser::Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name.to_str().unwrap_or("");
        let found = match parent.0 {
            ROOT if name == "badlookup" => return reply.error(self.eio()),
            ROOT => ENTRIES.iter().find(|e| e.0 == name).map(|e| e.1),
            MANY_DIR => name
                .strip_prefix('f')
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| *n < MANY && name == format!("f{n}"))
                .map(|n| FIRST_MANY + n),
            HALF_DIR => name
                .strip_prefix('h')
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|n| *n < HALF && name == format!("h{n}"))
                .map(|n| FIRST_HALF + n),
            _ => None,
        };
        match found.and_then(|i| Some((i, Self::kind(i)?))) {
            Some((i, k)) => reply.entry(&TTL, &Self::attr(i, k), Generation(0)),
            None => reply.error(FErrno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == ino_of("badattr") {
            return reply.error(self.eio());
        }
        match Self::kind(ino.0) {
            Some(k) => reply.attr(&TTL, &Self::attr(ino.0, k)),
            None => reply.error(FErrno::ENOENT),
        }
    }

    fn open(
        &self,
        _req: &Request,
        ino: INodeNo,
        _flags: OpenFlags,
        _kill_suidgid: bool,
        reply: ReplyOpen,
    ) {
        if ino.0 == ino_of("badopen") {
            return reply.error(self.eio());
        }
        // Direct I/O: every read reaches us, none is served from the
        // faulty mount's page cache.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let flaky = ino.0 == ino_of("flaky") && self.sw.flaky_fails.load(Ordering::SeqCst);
        if ino.0 == ino_of("badread") || flaky {
            return reply.error(self.eio());
        }
        if ino.0 == ino_of("slowread") {
            self.sw.wait_if_held();
        }
        let data = content(ino.0);
        let start = (offset as usize).min(data.len());
        let end = (start + size as usize).min(data.len());
        reply.data(&data[start..end]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino.0 == ino_of("badwrite") {
            return reply.error(self.eio());
        }
        if ino.0 == ino_of("slowwrite") {
            // The first takes a while (a writer the kernel throttles for
            // a moment), the next ones until released.
            if self.sw.slow_writes.fetch_add(1, Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(50));
            } else {
                self.sw.wait_if_held();
            }
        }
        reply.written(data.len() as u32);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if ino.0 == ino_of("badwrite") {
            return reply.error(self.eio());
        }
        if ino.0 == ino_of("slowsync") {
            self.sw.wait_if_held();
        }
        reply.ok();
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        // (Only the waiting matters: the name stays.)
        if parent.0 == ROOT && name == "slowunlink" {
            self.sw.wait_if_held();
            return reply.ok();
        }
        reply.error(FErrno::EPERM);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut list: Vec<(u64, FileType, String)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ROOT, FileType::Directory, "..".into()),
        ];
        match ino.0 {
            ROOT => list.extend(ENTRIES.iter().map(|e| (e.1, e.2, e.0.to_string()))),
            MANY_DIR => list.extend(
                (0..MANY).map(|n| (FIRST_MANY + n, FileType::RegularFile, format!("f{n}"))),
            ),
            HALF_DIR => {
                if offset > HALF / 2 && self.sw.half_fails.load(Ordering::SeqCst) {
                    return reply.error(self.eio());
                }
                list.extend(
                    (0..HALF).map(|n| (FIRST_HALF + n, FileType::RegularFile, format!("h{n}"))),
                )
            }
            i if i == ino_of("baddir") => return reply.error(self.eio()),
            _ => return reply.error(FErrno::ENOTDIR),
        }
        for (i, (ino, kind, name)) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        if ino.0 == ino_of("badxattr") {
            return reply.error(self.eio());
        }
        reply.error(FErrno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if ino.0 == ino_of("badxattr") {
            return reply.error(self.eio());
        }
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }
}

/// A faulty backing mount and a uvfs passthrough of it; unmounted in
/// that order (top first) on drop.
struct Stack {
    top: Option<BackgroundMount>,
    faulty: Option<fuser::BackgroundSession>,
    sw: Arc<Switches>,
    base: PathBuf,
}

impl Stack {
    fn new(tag: &str, fd_budget: usize) -> Option<Stack> {
        if let Err(why) = fuse_usable() {
            eprintln!("SKIP: {why}");
            return None;
        }
        let base = std::env::temp_dir().join(format!("uvfs-faults-{tag}-{}", std::process::id()));
        let (src, mnt) = (base.join("faulty"), base.join("mnt"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();

        let sw = Arc::new(Switches::default());
        let mut fcfg = fuser::Config::default();
        fcfg.mount_options = vec![fuser::MountOption::FSName("uvfs-faultfs".into())];
        // Two loops: one may wait in a held FSYNC while the other serves.
        fcfg.n_threads = Some(2);
        let faulty = fuser::Session::new(FaultFs { sw: sw.clone() }, &src, &fcfg)
            .expect("mount the faulty file system")
            .spawn()
            .expect("serve it");

        let layer = VnodeLayer::new(Config::with_limit(4096));
        let cfg = PassthroughConfig {
            fd_budget: Some(fd_budget),
            no_handles: false,
            no_dir_readahead: false,
            no_atime: false,
            watch: false,
            keep_timeouts: false,
            no_diratime: false,
        };
        let fs = PassthroughFs::new(layer.clone(), &src, cfg).expect("passthrough of FaultFs");
        let scfg = ServeConfig {
            mountpoint: mnt.clone(),
            threads: 2,
            // Nothing cached in the top mount either: every check below is
            // a request to the server.
            timeouts: Timeouts {
                entry: Duration::ZERO,
                attr: Duration::ZERO,
            },
            fsname: format!("uvfs-faults-{tag}"),
            control: false,
            server_opendir: false,
            uring: common::uring(),
            read_only: false,
            mount_flags: 0,
            // Reads and writes through the server: its failure paths
            // and offloading are what is tested here.
            kernel_io: false,
            dir_refresh: true,
            allow_other: false,
            successor: None,
            supervise: false,
        };
        let top = BackgroundMount::start(fs, layer, &scfg).expect("mount the passthrough");
        Some(Stack {
            top: Some(top),
            faulty: Some(faulty),
            sw,
            base,
        })
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.base.join("mnt").join(rel)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(top) = self.top.take() {
            let r = top.unmount();
            if !std::thread::panicking() {
                r.expect("unmount the passthrough");
            }
        }
        // Unmounted here: fuser 0.18's own unmount on drop is guarded by
        // an inverted liveness test (crates/fuse/src/kmount.rs says more)
        // and left the mount behind. Detached, the kernel ends the session
        // and fuser's request loop with it.
        let faulty = cpath(&self.base.join("faulty"));
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount2(faulty.as_ptr(), libc::MNT_DETACH) };
        drop(self.faulty.take());
        let _ = std::fs::remove_dir(self.base.join("mnt"));
        let _ = std::fs::remove_dir(self.base.join("faulty"));
        let _ = std::fs::remove_dir(&self.base);
    }
}

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
