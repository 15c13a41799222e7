//! `FaultFs`: a fuser file system of fixed files, each named for the
//! request it fails (EIO) or holds up, switched from the test.

use fuser::{
    Errno as FErrno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    ReplyXattr, Request, WriteFlags,
};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

const ROOT: u64 = 1;

/// The directory of `MANY` plain files (`f0`, `f1`, ...).
const MANY_DIR: u64 = 9;

pub(crate) const MANY: u64 = 300;

pub(crate) const FIRST_MANY: u64 = 100;

/// A directory of `HALF` entries (`h0`, ...) whose listing can fail
/// half way.
const HALF_DIR: u64 = 11;

pub(crate) const HALF: u64 = 1000;

const FIRST_HALF: u64 = 1000;

/// Root entries: (name, inode, kind). Each name says what fails.
pub(crate) const ENTRIES: &[(&str, u64, FileType)] = &[
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

pub(crate) fn ino_of(name: &str) -> u64 {
    ENTRIES.iter().find(|e| e.0 == name).unwrap().1
}

/// The content of every readable file: its own inode number, so a read
/// answered from the wrong file shows.
pub(crate) fn content(ino: u64) -> Vec<u8> {
    format!("file {ino}\n").into_bytes()
}

#[derive(Default)]
pub(crate) struct Switches {
    /// While set, every read of `flaky` fails with EIO.
    pub(crate) flaky_fails: AtomicBool,
    /// While set, listing `halfdir` fails with EIO past its first half.
    pub(crate) half_fails: AtomicBool,
    /// Requests answered with EIO (so the test knows they reached us).
    pub(crate) injected: AtomicUsize,
    /// While true, an FSYNC of `slowsync`, a READ of `slowread`, every
    /// WRITE of `slowwrite` but the first and an UNLINK of `slowunlink` (a
    /// 1 GiB file, freed in the call) wait (a disk that takes its time);
    /// `waiting` counts those waiting.
    pub(crate) hold: std::sync::Mutex<bool>,
    released: std::sync::Condvar,
    pub(crate) waiting: AtomicUsize,
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

    pub(crate) fn release(&self) {
        *self.hold.lock().unwrap() = false;
        self.released.notify_all();
    }
}

pub(crate) struct FaultFs {
    pub(crate) sw: Arc<Switches>,
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
