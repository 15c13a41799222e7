//! The server with the test as its kernel: FUSE requests written raw to a
//! socket that the server serves (`serve_fd`), most of them ones a kernel
//! never sends: unknown node ids and handles, bad names, extreme offsets
//! and sizes, excess FORGETs, truncated bodies, opcodes the server lacks.
//!
//! Every request must get exactly one reply, within 5 s, carrying its
//! `unique` and either an errno (-4095..=-1) or an answer of the right
//! shape (FORGET and BATCH_FORGET get none); no handler may panic
//! (`fuse.requests.panics`); and the server's node table must agree, after
//! every request, with the lookup counts a kernel would hold from the
//! replies it got (`fuse.nodes`, `fuse.nodes.lookups`), and its handle
//! table with the handles opened and not released. A seeded random phase
//! follows the targeted one (`UVFS_FUZZ_SEED`, `UVFS_FUZZ_OPS`).
//!
//! No mount and no privilege needed: the server end is one end of a
//! `SOCK_SEQPACKET` socket pair, which keeps message boundaries as
//! `/dev/fuse` does.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_fuse::{serve_fd, BackgroundMount, ServeConfig, Timeouts, MAX_WRITE};
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vfs::FileSystem;
use uvfs_vnode::{Config, VnodeLayer};

// Opcodes (include/uapi/linux/fuse.h).
const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const SETATTR: u32 = 4;
const READLINK: u32 = 5;
const SYMLINK: u32 = 6;
const MKNOD: u32 = 8;
const MKDIR: u32 = 9;
const UNLINK: u32 = 10;
const RMDIR: u32 = 11;
const RENAME: u32 = 12;
const LINK: u32 = 13;
const OPEN: u32 = 14;
const READ: u32 = 15;
const WRITE: u32 = 16;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const FSYNC: u32 = 20;
const SETXATTR: u32 = 21;
const GETXATTR: u32 = 22;
const LISTXATTR: u32 = 23;
const REMOVEXATTR: u32 = 24;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const OPENDIR: u32 = 27;
const READDIR: u32 = 28;
const RELEASEDIR: u32 = 29;
const FSYNCDIR: u32 = 30;
const GETLK: u32 = 31;
const SETLK: u32 = 32;
const SETLKW: u32 = 33;
const ACCESS: u32 = 34;
const CREATE: u32 = 35;
const INTERRUPT: u32 = 36;
const BMAP: u32 = 37;
const DESTROY: u32 = 38;
const IOCTL: u32 = 39;
const POLL: u32 = 40;
const BATCH_FORGET: u32 = 42;
const FALLOCATE: u32 = 43;
const READDIRPLUS: u32 = 44;
const RENAME2: u32 = 45;
const LSEEK: u32 = 46;
const COPY_FILE_RANGE: u32 = 47;
/// `O_TMPFILE` (the vendored fuser decodes it; upstream 0.18 does not).
const TMPFILE: u32 = 51;
/// Opcodes newer than fuser 0.18 knows (SETUPMAPPING, REMOVEMAPPING,
/// SYNCFS, STATX) and nonsense ones.
const UNKNOWN_OPS: [u32; 7] = [0, 48, 49, 50, 52, 9999, u32::MAX];

// fuse_setattr_in.valid bits.
const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_GID: u32 = 1 << 2;
const FATTR_SIZE: u32 = 1 << 3;
const FATTR_ATIME: u32 = 1 << 4;
const FATTR_MTIME: u32 = 1 << 5;
const FATTR_FH: u32 = 1 << 6;
const FATTR_ATIME_NOW: u32 = 1 << 7;
const FATTR_MTIME_NOW: u32 = 1 << 8;
const FATTR_CTIME: u32 = 1 << 10;

/// INIT flags a current kernel offers (the ones the server asks for
/// among them).
const INIT_FLAGS: u32 = (1 << 4) // EXPORT_SUPPORT
    | (1 << 5) // BIG_WRITES
    | (1 << 6) // DONT_MASK
    | (1 << 12) // AUTO_INVAL_DATA
    | (1 << 13) // DO_READDIRPLUS
    | (1 << 14) // READDIRPLUS_AUTO
    | (1 << 18) // PARALLEL_DIROPS
    | (1 << 20) // POSIX_ACL
    | (1 << 22) // MAX_PAGES
    | (1 << 23) // CACHE_SYMLINKS
    | (1 << 24); // NO_OPENDIR_SUPPORT

const HEADER: usize = 40;
const OUT_HEADER: usize = 16;
const ATTR_OUT: usize = 16 + 88;
const ENTRY_OUT: usize = 40 + 88;
const ROOT: u64 = 1;
/// Longest wait for a reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

const ENOENT: i32 = libc::ENOENT;
const ESTALE: i32 = libc::ESTALE;
const EBADF: i32 = libc::EBADF;
const EINVAL: i32 = libc::EINVAL;
const ENOSYS: i32 = libc::ENOSYS;

fn op_name(op: u32) -> String {
    let n = match op {
        LOOKUP => "LOOKUP",
        FORGET => "FORGET",
        GETATTR => "GETATTR",
        SETATTR => "SETATTR",
        READLINK => "READLINK",
        SYMLINK => "SYMLINK",
        MKNOD => "MKNOD",
        MKDIR => "MKDIR",
        UNLINK => "UNLINK",
        RMDIR => "RMDIR",
        RENAME => "RENAME",
        LINK => "LINK",
        OPEN => "OPEN",
        READ => "READ",
        WRITE => "WRITE",
        STATFS => "STATFS",
        RELEASE => "RELEASE",
        FSYNC => "FSYNC",
        SETXATTR => "SETXATTR",
        GETXATTR => "GETXATTR",
        LISTXATTR => "LISTXATTR",
        REMOVEXATTR => "REMOVEXATTR",
        FLUSH => "FLUSH",
        INIT => "INIT",
        OPENDIR => "OPENDIR",
        READDIR => "READDIR",
        RELEASEDIR => "RELEASEDIR",
        FSYNCDIR => "FSYNCDIR",
        GETLK => "GETLK",
        SETLK => "SETLK",
        ACCESS => "ACCESS",
        CREATE => "CREATE",
        TMPFILE => "TMPFILE",
        INTERRUPT => "INTERRUPT",
        BMAP => "BMAP",
        DESTROY => "DESTROY",
        IOCTL => "IOCTL",
        POLL => "POLL",
        BATCH_FORGET => "BATCH_FORGET",
        FALLOCATE => "FALLOCATE",
        READDIRPLUS => "READDIRPLUS",
        RENAME2 => "RENAME2",
        LSEEK => "LSEEK",
        COPY_FILE_RANGE => "COPY_FILE_RANGE",
        _ => return format!("opcode {op}"),
    };
    n.to_string()
}

// ---------------------------------------------------------------------------
// Request bodies, little-endian as the kernel writes them.

#[derive(Default)]
struct B(Vec<u8>);

impl B {
    fn u32(mut self, v: u32) -> B {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> B {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(self, v: i64) -> B {
        self.u64(v as u64)
    }
    fn bytes(mut self, b: &[u8]) -> B {
        self.0.extend_from_slice(b);
        self
    }
    /// A name and its terminating NUL.
    fn name(self, n: &[u8]) -> B {
        self.bytes(n).bytes(&[0])
    }
    fn done(self) -> Vec<u8> {
        self.0
    }
}

fn b() -> B {
    B::default()
}

fn read_in(fh: u64, offset: u64, size: u32) -> Vec<u8> {
    b().u64(fh)
        .u64(offset)
        .u32(size)
        .u32(0)
        .u64(0)
        .u32(libc::O_RDWR as u32)
        .u32(0)
        .done()
}

fn write_in(fh: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    b().u64(fh)
        .u64(offset)
        .u32(data.len() as u32)
        .u32(0)
        .u64(0)
        .u32(libc::O_RDWR as u32)
        .u32(0)
        .bytes(data)
        .done()
}

/// fuse_setattr_in, built field by field.
#[derive(Clone, Copy, Default)]
struct SetAttrIn {
    valid: u32,
    fh: u64,
    size: u64,
    atime: (i64, u32),
    mtime: (i64, u32),
    ctime: (i64, u32),
    mode: u32,
    uid: u32,
    gid: u32,
}

impl SetAttrIn {
    fn body(&self) -> Vec<u8> {
        b().u32(self.valid)
            .u32(0)
            .u64(self.fh)
            .u64(self.size)
            .u64(0)
            .i64(self.atime.0)
            .i64(self.mtime.0)
            .i64(self.ctime.0)
            .u32(self.atime.1)
            .u32(self.mtime.1)
            .u32(self.ctime.1)
            .u32(self.mode)
            .u32(0)
            .u32(self.uid)
            .u32(self.gid)
            .u32(0)
            .done()
    }
}

fn getattr_in(fh: Option<u64>) -> Vec<u8> {
    b().u32(u32::from(fh.is_some()))
        .u32(0)
        .u64(fh.unwrap_or(0))
        .done()
}

fn open_in(flags: i32) -> Vec<u8> {
    b().u32(flags as u32).u32(0).done()
}

fn create_in(flags: i32, mode: u32, name: &[u8]) -> Vec<u8> {
    b().u32(flags as u32)
        .u32(mode)
        .u32(0o022)
        .u32(0)
        .name(name)
        .done()
}

fn mkdir_in(mode: u32, name: &[u8]) -> Vec<u8> {
    b().u32(mode).u32(0o022).name(name).done()
}

fn mknod_in(mode: u32, rdev: u32, name: &[u8]) -> Vec<u8> {
    b().u32(mode).u32(rdev).u32(0o022).u32(0).name(name).done()
}

fn symlink_in(name: &[u8], target: &[u8]) -> Vec<u8> {
    b().name(name).name(target).done()
}

fn rename_in(newdir: u64, old: &[u8], new: &[u8]) -> Vec<u8> {
    b().u64(newdir).name(old).name(new).done()
}

fn rename2_in(newdir: u64, flags: u32, old: &[u8], new: &[u8]) -> Vec<u8> {
    b().u64(newdir).u32(flags).u32(0).name(old).name(new).done()
}

fn link_in(oldnodeid: u64, name: &[u8]) -> Vec<u8> {
    b().u64(oldnodeid).name(name).done()
}

fn release_in(fh: u64) -> Vec<u8> {
    b().u64(fh).u32(0).u32(0).u64(0).done()
}

fn flush_in(fh: u64) -> Vec<u8> {
    b().u64(fh).u32(0).u32(0).u64(0).done()
}

fn fsync_in(fh: u64, flags: u32) -> Vec<u8> {
    b().u64(fh).u32(flags).u32(0).done()
}

fn forget_in(n: u64) -> Vec<u8> {
    b().u64(n).done()
}

fn batch_forget_in(list: &[(u64, u64)]) -> Vec<u8> {
    let mut x = b().u32(list.len() as u32).u32(0);
    for &(id, n) in list {
        x = x.u64(id).u64(n);
    }
    x.done()
}

fn setxattr_in(flags: u32, name: &[u8], value: &[u8]) -> Vec<u8> {
    b().u32(value.len() as u32)
        .u32(flags)
        .name(name)
        .bytes(value)
        .done()
}

fn getxattr_in(size: u32, name: &[u8]) -> Vec<u8> {
    b().u32(size).u32(0).name(name).done()
}

fn listxattr_in(size: u32) -> Vec<u8> {
    b().u32(size).u32(0).done()
}

fn access_in(mask: u32) -> Vec<u8> {
    b().u32(mask).u32(0).done()
}

fn fallocate_in(fh: u64, offset: u64, len: u64, mode: u32) -> Vec<u8> {
    b().u64(fh).u64(offset).u64(len).u32(mode).u32(0).done()
}

fn lseek_in(fh: u64, offset: i64, whence: u32) -> Vec<u8> {
    b().u64(fh).i64(offset).u32(whence).u32(0).done()
}

/// fuse_copy_file_range_in (the input node is the header's).
#[derive(Clone, Copy)]
struct CopyIn {
    fh_in: u64,
    off_in: u64,
    nodeid_out: u64,
    fh_out: u64,
    off_out: u64,
    len: u64,
    flags: u64,
}

impl CopyIn {
    fn body(&self) -> Vec<u8> {
        b().u64(self.fh_in)
            .u64(self.off_in)
            .u64(self.nodeid_out)
            .u64(self.fh_out)
            .u64(self.off_out)
            .u64(self.len)
            .u64(self.flags)
            .done()
    }
}

/// `fuse_lk_in`: a lock on `start..=end` of type `typ` by `owner`
/// through handle `fh` (`flock`: FUSE_LK_FLOCK).
fn lock_in(fh: u64, owner: u64, start: u64, end: u64, typ: i32, flock: bool) -> Vec<u8> {
    b().u64(fh)
        .u64(owner)
        .u64(start)
        .u64(end)
        .u32(typ as u32)
        .u32(1)
        .u32(flock as u32)
        .u32(0)
        .done()
}

fn interrupt_in(unique: u64) -> Vec<u8> {
    b().u64(unique).done()
}

fn lk_in(fh: u64) -> Vec<u8> {
    b().u64(fh)
        .u64(1)
        .u64(0)
        .u64(u64::MAX)
        .u32(libc::F_WRLCK as u32)
        .u32(1)
        .u32(0)
        .u32(0)
        .done()
}

fn hex(b: &[u8]) -> String {
    let shown: String = b.iter().take(96).map(|x| format!("{x:02x}")).collect();
    if b.len() > 96 {
        format!("{shown}...({} bytes)", b.len())
    } else {
        shown
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

// ---------------------------------------------------------------------------
// The socket.

fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a writable array of two ints, as socketpair wants.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: socketpair succeeded: both are open descriptors that nothing
    // else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn set_int_opt(fd: &OwnedFd, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: `v` is a valid int for the duration of the call and its size
    // is passed; the fd is open.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// A datagram carries at most the sender's buffer: room for requests
/// and replies of a few MiB (beyond `wmem_max` needs privilege; else it
/// is capped there, see `sndbuf`).
fn widen(fd: &OwnedFd) {
    const BUF: libc::c_int = 8 << 20;
    if !set_int_opt(fd, libc::SO_SNDBUFFORCE, BUF) {
        set_int_opt(fd, libc::SO_SNDBUF, BUF);
    }
}

/// The largest datagram `fd` can send.
fn sndbuf(fd: &OwnedFd) -> usize {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes and `len` holds the size
    // of `v`; the fd is open.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "SO_SNDBUF: {}", std::io::Error::last_os_error());
    // The kernel keeps a little of it for the datagram's own overhead, and
    // a datagram's data must fit one kmalloc (4 MiB) and a few pages.
    (v as usize).saturating_sub(4096).min(4 << 20)
}

fn set_recv_timeout(fd: &OwnedFd, t: Duration) {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a valid timeval for the duration of the call and its
    // size is passed; the fd is open.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVTIMEO: {}", std::io::Error::last_os_error());
}

// ---------------------------------------------------------------------------
// The kernel.

/// One reply.
#[derive(Debug)]
struct Reply {
    error: i32,
    body: Vec<u8>,
}

impl Reply {
    fn errno(&self) -> i32 {
        -self.error
    }
    fn ok(&self) -> bool {
        self.error == 0
    }
    /// The node id of an entry reply (0: none, a negative entry).
    fn nodeid(&self) -> u64 {
        if self.ok() && self.body.len() >= 8 {
            u64_at(&self.body, 0)
        } else {
            0
        }
    }
}

/// What the kernel knows: the lookup counts the server's replies handed
/// it, and the handles it opened.
struct Kernel {
    fd: OwnedFd,
    mount: Option<BackgroundMount>,
    unique: u64,
    uid: u32,
    gid: u32,
    /// The caller's thread id the requests carry (0: one the server
    /// cannot see, judged by its uid alone).
    pid: u32,
    /// Node id -> lookup count, as the kernel would hold them.
    counts: BTreeMap<u64, u64>,
    /// Every node id a reply ever named (forgotten ones too), in the order
    /// first named: the random phase picks by position, so a seed replays
    /// the same requests on passthrough too, whose ids are inode numbers.
    seen: Vec<u64>,
    /// File handles opened and not released.
    open: BTreeSet<u64>,
    /// Handles released (stale from then on).
    released: Vec<u64>,
    /// The last requests, for failure messages.
    recent: VecDeque<String>,
    /// Prefix for failure messages (the random phase's seed and step).
    tag: String,
    /// Requests sent.
    sent: u64,
    /// A node the kernel holds may still answer ESTALE: the file system
    /// (passthrough) cannot reach an unlinked file it has no fd for.
    held_may_vanish: bool,
    /// Replies up to this size fit through the socket.
    max_message: usize,
    /// Receive buffer, larger than any datagram.
    buf: Vec<u8>,
}

impl Kernel {
    /// Serves `fs` on a socket and plays the kernel's part of INIT.
    fn start(fs: Arc<dyn FileSystem>, layer: Arc<VnodeLayer>, server_opendir: bool) -> Kernel {
        let (ours, theirs) = seqpacket_pair();
        widen(&ours);
        widen(&theirs);
        set_recv_timeout(&ours, REPLY_TIMEOUT);
        let max_message = sndbuf(&theirs).min(sndbuf(&ours));
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut k = Kernel {
            fd: ours,
            mount: None,
            unique: 0,
            uid,
            gid,
            pid: std::process::id(),
            counts: BTreeMap::from([(ROOT, 1)]),
            seen: vec![ROOT],
            open: BTreeSet::new(),
            released: Vec::new(),
            recent: VecDeque::new(),
            tag: String::new(),
            sent: 0,
            held_may_vanish: false,
            max_message,
            buf: vec![0; 8 << 20],
        };
        // INIT first: serve_fd answers it before returning.
        let init = b()
            .u32(7)
            .u32(31)
            .u32(128 << 10)
            .u32(INIT_FLAGS)
            .u32(0)
            .bytes(&[0; 44])
            .done();
        let unique = k.send(INIT, 0, &init);
        let cfg = ServeConfig {
            mountpoint: PathBuf::from("raw-protocol"),
            threads: 1,
            timeouts: Timeouts {
                entry: Duration::from_secs(1),
                attr: Duration::from_secs(1),
            },
            fsname: "uvfs-raw".into(),
            control: false,
            server_opendir,
            uring: false,
            read_only: false,
            mount_flags: 0,
            kernel_io: false,
            dir_refresh: false,
            allow_other: false,
        };
        k.mount = Some(serve_fd(fs, layer, theirs, &cfg).expect("serve_fd"));
        let r = k.recv_for(unique, "INIT");
        assert!(r.ok(), "INIT failed: {r:?}");
        assert!(r.body.len() >= 24, "short INIT reply {r:?}");
        assert_eq!(u32_at(&r.body, 0), 7, "major");
        assert_eq!(u32_at(&r.body, 20), MAX_WRITE, "max_write");
        k
    }

    fn mount(&self) -> &BackgroundMount {
        self.mount.as_ref().expect("serving")
    }

    fn next_unique(&mut self) -> u64 {
        // The kernel's request ids go up by two; odd ones are interrupts.
        self.unique += 2;
        self.unique
    }

    fn describe(op: u32, nodeid: u64, body: &[u8]) -> String {
        format!("{} nodeid={nodeid:#x} body={}", op_name(op), hex(body))
    }

    fn fail(&self, what: &str) -> ! {
        let recent: Vec<&str> = self.recent.iter().map(String::as_str).collect();
        panic!(
            "{}{what}\n  the last requests, oldest first:\n    {}",
            self.tag,
            recent.join("\n    ")
        );
    }

    fn note(&mut self, desc: String) {
        if self.recent.len() == 12 {
            self.recent.pop_front();
        }
        self.recent.push_back(desc);
        self.sent += 1;
    }

    /// Writes one message.
    fn send_raw(&mut self, msg: &[u8]) {
        // SAFETY: `msg` is valid for reads of its length; the fd is open.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n != msg.len() as isize {
            let e = std::io::Error::last_os_error();
            self.fail(&format!("sending {} bytes: {n} ({e})", msg.len()));
        }
    }

    /// A message with header length `len`, of which `body` follows the
    /// header (they disagree in the malformed cases).
    fn message(&self, op: u32, unique: u64, nodeid: u64, len: u32, body: &[u8]) -> Vec<u8> {
        b().u32(len)
            .u32(op)
            .u64(unique)
            .u64(nodeid)
            .u32(self.uid)
            .u32(self.gid)
            .u32(self.pid)
            .u32(0)
            .bytes(body)
            .done()
    }

    /// Sends a request; returns its unique.
    fn send(&mut self, op: u32, nodeid: u64, body: &[u8]) -> u64 {
        let unique = self.next_unique();
        let len = (HEADER + body.len()) as u32;
        let msg = self.message(op, unique, nodeid, len, body);
        self.note(Self::describe(op, nodeid, body));
        self.send_raw(&msg);
        unique
    }

    /// The next message: `None` on timeout; fails if the server closed
    /// the channel.
    fn recv_any(&mut self, desc: &str) -> Option<(u64, i32, Vec<u8>)> {
        // SAFETY: the buffer is valid for writes of its length; the fd is
        // open.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return None;
            }
            self.fail(&format!("recv after {desc}: {e}"));
        }
        let n = n as usize;
        if n == 0 {
            self.fail(&format!(
                "the server closed the channel after {desc} (its request loop died)"
            ));
        }
        if n > self.buf.len() || n < OUT_HEADER {
            self.fail(&format!("reply of {n} bytes to {desc}"));
        }
        let len = u32_at(&self.buf, 0) as usize;
        let error = u32_at(&self.buf, 4) as i32;
        let unique = u64_at(&self.buf, 8);
        if len != n {
            self.fail(&format!(
                "reply to {desc}: header says {len} bytes, message has {n}"
            ));
        }
        Some((unique, error, self.buf[OUT_HEADER..n].to_vec()))
    }

    /// The next message, or `None` on timeout or a closed channel.
    fn recv_any_quiet(&mut self) -> Option<(u64, i32, Vec<u8>)> {
        // SAFETY: the buffer is valid for writes of its length; the fd is
        // open.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                0,
            )
        };
        if n < OUT_HEADER as isize {
            return None;
        }
        let n = n as usize;
        let error = u32_at(&self.buf, 4) as i32;
        let unique = u64_at(&self.buf, 8);
        Some((unique, error, self.buf[OUT_HEADER..n].to_vec()))
    }

    /// The reply to request `unique`: notifications (unique 0) and
    /// interrupt answers (odd uniques) in between are checked and skipped.
    fn recv_for(&mut self, unique: u64, desc: &str) -> Reply {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let Some((u, error, body)) = self.recv_any(desc) else {
                self.fail(&format!("no reply within {REPLY_TIMEOUT:?} to {desc}"));
            };
            if Instant::now() > deadline {
                self.fail(&format!("no reply within {REPLY_TIMEOUT:?} to {desc}"));
            }
            if u == 0 {
                continue;
            }
            if !(-4095..=0).contains(&error) {
                self.fail(&format!("errno {error} out of range in reply to {desc}"));
            }
            if error != 0 && !body.is_empty() {
                self.fail(&format!("error {error} with a body in reply to {desc}"));
            }
            if u & 1 == 1 {
                continue;
            }
            if u != unique {
                self.fail(&format!(
                    "reply for unique {u} while waiting for {unique} ({desc}): \
                     a stray or lost reply"
                ));
            }
            return Reply { error, body };
        }
    }

    /// Sends a request and returns its checked reply.
    fn call(&mut self, op: u32, nodeid: u64, body: &[u8]) -> Reply {
        let unique = self.send(op, nodeid, body);
        let desc = Self::describe(op, nodeid, body);
        let r = self.recv_for(unique, &desc);
        if r.ok() {
            if let Err(why) = check_shape(op, nodeid, body, &r.body) {
                self.fail(&format!("bad answer to {desc}: {why}"));
            }
            self.account(op, nodeid, body, &r);
        }
        self.check_state(&desc);
        r
    }

    /// A request without a reply (FORGET, BATCH_FORGET): a STATFS after
    /// it must be the next thing answered.
    fn no_reply(&mut self, op: u32, nodeid: u64, body: &[u8]) {
        let desc = Self::describe(op, nodeid, body);
        let forget_unique = self.send(op, nodeid, body);
        match op {
            FORGET if body.len() >= 8 => self.forget(nodeid, u64_at(body, 0)),
            BATCH_FORGET if body.len() >= 8 => {
                let count = u32_at(body, 0) as usize;
                if body.len() >= 8 + 16 * count {
                    for i in 0..count {
                        let at = 8 + 16 * i;
                        self.forget(u64_at(body, at), u64_at(body, at + 8));
                    }
                }
            }
            _ => {}
        }
        let unique = self.send(STATFS, ROOT, &[]);
        let (u, _, _) = loop {
            match self.recv_any(&desc) {
                None => self.fail(&format!("no reply to the STATFS after {desc}")),
                Some((0, ..)) => continue,
                Some(m) => break m,
            }
        };
        if u == forget_unique {
            self.fail(&format!("a reply to {desc}, which takes none"));
        }
        if u != unique {
            self.fail(&format!("reply for unique {u} after {desc}"));
        }
        self.check_state(&desc);
    }

    /// Sends a request that may or may not be answered (INTERRUPT,
    /// malformed ones fuser may drop): drains up to the next STATFS.
    fn maybe_reply(&mut self, op: u32, nodeid: u64, body: &[u8]) -> Option<Reply> {
        let unique = self.send(op, nodeid, body);
        self.drain_until_statfs(unique, &Self::describe(op, nodeid, body))
    }

    /// A raw message with header length `len` (possibly a lie).
    fn maybe_reply_raw(&mut self, op: u32, nodeid: u64, len: u32, body: &[u8]) -> Option<Reply> {
        let unique = self.next_unique();
        let msg = self.message(op, unique, nodeid, len, body);
        let desc = format!("{} (header len {len})", Self::describe(op, nodeid, body));
        self.note(desc.clone());
        self.send_raw(&msg);
        self.drain_until_statfs(unique, &desc)
    }

    fn drain_until_statfs(&mut self, unique: u64, desc: &str) -> Option<Reply> {
        let probe = self.send(STATFS, ROOT, &[]);
        let mut got = None;
        loop {
            let Some((u, error, body)) = self.recv_any(desc) else {
                self.fail(&format!("no reply to the STATFS after {desc}"));
            };
            if !(-4095..=0).contains(&error) && u != 0 {
                self.fail(&format!("errno {error} out of range after {desc}"));
            }
            if u == probe {
                break;
            }
            if u == unique || u == unique | 1 {
                if got.is_some() {
                    self.fail(&format!("two replies to {desc}"));
                }
                got = Some(Reply { error, body });
            } else if u != 0 {
                self.fail(&format!("reply for unique {u} after {desc}"));
            }
        }
        self.check_state(desc);
        got
    }

    // -- The model ---------------------------------------------------------

    fn remember(&mut self, id: u64) {
        if id != 0 {
            *self.counts.entry(id).or_insert(0) += 1;
            if !self.seen.contains(&id) {
                self.seen.push(id);
            }
        }
    }

    /// FORGET as the server must apply it: clamped at zero, and the root
    /// never below one.
    fn forget(&mut self, id: u64, n: u64) {
        let Some(c) = self.counts.get_mut(&id) else {
            return;
        };
        *c = if id == ROOT {
            (*c).saturating_sub(n).max(1)
        } else {
            (*c).saturating_sub(n)
        };
        if *c == 0 {
            self.counts.remove(&id);
        }
    }

    /// Learns from a successful reply what a kernel would.
    fn account(&mut self, op: u32, _nodeid: u64, body: &[u8], r: &Reply) {
        match op {
            LOOKUP | MKNOD | MKDIR | SYMLINK | LINK => self.remember(r.nodeid()),
            CREATE | TMPFILE => {
                self.remember(r.nodeid());
                self.open.insert(u64_at(&r.body, ENTRY_OUT));
            }
            OPEN | OPENDIR => {
                self.open.insert(u64_at(&r.body, 0));
            }
            RELEASE | RELEASEDIR => {
                let fh = u64_at(body, 0);
                self.open.remove(&fh);
                self.released.push(fh);
            }
            READDIRPLUS => {
                for (id, name) in direntplus_ids(&r.body) {
                    if name != b"." && name != b".." {
                        self.remember(id);
                    }
                }
            }
            _ => {}
        }
    }

    fn counter(&self, report: &serde_json::Value, name: &str) -> u64 {
        report["counters"][name]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {name}"))
    }

    /// No panic so far, and the node and handle tables as the model says.
    fn check_state(&mut self, after: &str) {
        let rep = self.mount().report(false);
        let panics = self.counter(&rep, "fuse.requests.panics");
        if panics != 0 {
            self.fail(&format!("a handler panicked on {after}"));
        }
        let nodes = self.counter(&rep, "fuse.nodes");
        let lookups = self.counter(&rep, "fuse.nodes.lookups");
        let handles = self.counter(&rep, "fuse.handles.open");
        let remembered = self.counter(&rep, "fuse.nodes.remembered");
        let forgotten = self.counter(&rep, "fuse.nodes.forgotten");
        // The root's first count is the kernel's from the start.
        if remembered + 1 != forgotten + lookups {
            self.fail(&format!(
                "after {after}: {remembered} lookups remembered + 1 != {forgotten} \
                 forgotten + {lookups} held"
            ));
        }
        let want_lookups: u64 = self.counts.values().sum();
        let want_nodes = self.counts.len() as u64;
        if (nodes, lookups) != (want_nodes, want_lookups) {
            self.fail(&format!(
                "after {after}: the server counts {nodes} nodes / {lookups} lookups, \
                 the kernel holds {want_nodes} / {want_lookups} ({:?})",
                self.counts
            ));
        }
        if handles != self.open.len() as u64 {
            self.fail(&format!(
                "after {after}: {handles} open handles, the kernel opened {}",
                self.open.len()
            ));
        }
    }

    /// Every node the kernel holds answers GETATTR; every one it let go
    /// of is ESTALE.
    fn check_held(&mut self) {
        for id in self.seen.clone() {
            let held = self.counts.contains_key(&id);
            let r = self.call(GETATTR, id, &getattr_in(None));
            if held && !r.ok() && !(self.held_may_vanish && r.errno() == ESTALE) {
                self.fail(&format!(
                    "node {id:#x} is held ({} lookups) but GETATTR says errno {}",
                    self.counts[&id],
                    r.errno()
                ));
            }
            if !held && r.errno() != ESTALE {
                self.fail(&format!(
                    "node {id:#x} was forgotten but GETATTR answers {:?}",
                    r.error
                ));
            }
        }
    }

    /// Releases every open handle, then checks the accounting at rest:
    /// every active vnode explained by a kernel reference.
    fn settle(&mut self) {
        let open: Vec<u64> = self.open.iter().copied().collect();
        for fh in open {
            // The model does not know files from directories: RELEASE
            // and RELEASEDIR take the same handle table.
            let r = self.call(RELEASE, ROOT, &release_in(fh));
            if !r.ok() {
                self.fail(&format!(
                    "RELEASE of open handle {fh} failed: {}",
                    r.errno()
                ));
            }
        }
        let rep = self.mount().report(true);
        if rep["accounting"]["ok"] != serde_json::json!(true) {
            self.fail(&format!("vnode accounting at rest: {}", rep["accounting"]));
        }
        self.check_held();
    }

    /// Ends the session as the kernel does at unmount.
    fn finish(mut self) {
        self.settle();
        let unique = self.send(DESTROY, 0, &[]);
        let r = self.recv_for(unique, "DESTROY");
        assert!(r.ok(), "DESTROY: {r:?}");
        let m = self.mount.take().expect("serving");
        m.unmount().expect("the session ends cleanly after DESTROY");
    }

    // -- Shorthands ----------------------------------------------------------

    fn lookup(&mut self, dir: u64, name: &[u8]) -> Reply {
        self.call(LOOKUP, dir, &b().name(name).done())
    }

    fn mkdir(&mut self, dir: u64, name: &[u8]) -> Reply {
        self.call(MKDIR, dir, &mkdir_in(0o755, name))
    }

    /// Creates and opens a file; returns (node id, handle).
    fn create(&mut self, dir: u64, name: &[u8]) -> (u64, u64) {
        let r = self.call(CREATE, dir, &create_in(libc::O_RDWR, 0o644, name));
        if !r.ok() {
            self.fail(&format!(
                "CREATE {:?} failed: {}",
                String::from_utf8_lossy(name),
                r.errno()
            ));
        }
        (r.nodeid(), u64_at(&r.body, ENTRY_OUT))
    }

    fn size_of(&mut self, id: u64) -> u64 {
        let r = self.call(GETATTR, id, &getattr_in(None));
        assert!(r.ok(), "GETATTR {id}: {}", r.errno());
        u64_at(&r.body, 16 + 8)
    }

    /// Names in directory `dir` (READDIR without a handle).
    fn list(&mut self, dir: u64) -> BTreeSet<Vec<u8>> {
        let mut out = BTreeSet::new();
        let mut off = 0;
        loop {
            let r = self.call(READDIR, dir, &read_in(0, off, 4096));
            assert!(r.ok(), "READDIR {dir}: {}", r.errno());
            let ents = dirents(&r.body);
            let Some(last) = ents.last() else { break };
            off = last.1;
            for (_, _, name) in ents {
                out.insert(name);
            }
        }
        out
    }

    /// Expects an error from `errs`.
    fn expect_err(&mut self, op: u32, nodeid: u64, body: &[u8], errs: &[i32]) -> Reply {
        let r = self.call(op, nodeid, body);
        if !errs.contains(&r.errno()) || r.ok() {
            self.fail(&format!(
                "{} answered {} (body {} bytes); expected one of {errs:?}",
                Self::describe(op, nodeid, body),
                if r.ok() {
                    "success".to_string()
                } else {
                    format!("errno {}", r.errno())
                },
                r.body.len()
            ));
        }
        r
    }

    /// Expects an error (for LOOKUP, a negative entry will do).
    fn expect_no_node(&mut self, op: u32, nodeid: u64, body: &[u8]) -> Reply {
        let r = self.call(op, nodeid, body);
        if r.ok() && (op != LOOKUP || r.nodeid() != 0) {
            self.fail(&format!(
                "{} succeeded (answer {}); expected an error",
                Self::describe(op, nodeid, body),
                hex(&r.body)
            ));
        }
        r
    }
}

/// (ino, offset, name) of each READDIR entry.
fn dirents(b: &[u8]) -> Vec<(u64, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 24 <= b.len() {
        let namelen = u32_at(b, at + 16) as usize;
        let name = b[at + 24..at + 24 + namelen].to_vec();
        out.push((u64_at(b, at), u64_at(b, at + 8), name));
        at += (24 + namelen).next_multiple_of(8);
    }
    out
}

/// (node id, name) of each READDIRPLUS entry.
fn direntplus_ids(b: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + ENTRY_OUT + 24 <= b.len() {
        let d = at + ENTRY_OUT;
        let namelen = u32_at(b, d + 16) as usize;
        out.push((u64_at(b, at), b[d + 24..d + 24 + namelen].to_vec()));
        at += (ENTRY_OUT + 24 + namelen).next_multiple_of(8);
    }
    out
}

/// A fuse_attr at `at` is sane: nanoseconds below a second, a known file
/// type, the node id it was asked for.
fn check_attr(b: &[u8], at: usize, ino: u64) -> Result<(), String> {
    if u64_at(b, at) != ino {
        return Err(format!("attr.ino {:#x} for node {ino:#x}", u64_at(b, at)));
    }
    for (f, off) in [("atime", 48), ("mtime", 52), ("ctime", 56)] {
        let ns = u32_at(b, at + off);
        if ns >= 1_000_000_000 {
            return Err(format!("{f} nsec {ns}"));
        }
    }
    let mode = u32_at(b, at + 60);
    let known = [
        libc::S_IFREG,
        libc::S_IFDIR,
        libc::S_IFLNK,
        libc::S_IFCHR,
        libc::S_IFBLK,
        libc::S_IFIFO,
        libc::S_IFSOCK,
    ];
    if !known.contains(&(mode & libc::S_IFMT)) {
        return Err(format!("mode {mode:#o}"));
    }
    Ok(())
}

/// A successful answer has the shape its request calls for.
fn check_shape(op: u32, nodeid: u64, req: &[u8], body: &[u8]) -> Result<(), String> {
    let want = |n: usize| {
        if body.len() == n {
            Ok(())
        } else {
            Err(format!("{} bytes, expected {n}", body.len()))
        }
    };
    match op {
        GETATTR | SETATTR => {
            want(ATTR_OUT)?;
            check_attr(body, 16, nodeid)
        }
        LOOKUP | MKNOD | MKDIR | SYMLINK | LINK | CREATE | TMPFILE => {
            want(if op == CREATE || op == TMPFILE {
                ENTRY_OUT + 16
            } else {
                ENTRY_OUT
            })?;
            let id = u64_at(body, 0);
            if id == 0 {
                return if op == LOOKUP {
                    Ok(())
                } else {
                    Err("node id 0".into())
                };
            }
            check_attr(body, 40, id)
        }
        OPEN | OPENDIR => want(16),
        READ => {
            let size = u32_at(req, 16) as usize;
            if body.len() > size {
                return Err(format!("{} bytes for a read of {size}", body.len()));
            }
            Ok(())
        }
        WRITE => {
            want(8)?;
            let n = u32_at(body, 0) as usize;
            if n > req.len() - 40 {
                return Err(format!("wrote {n} of {}", req.len() - 40));
            }
            Ok(())
        }
        COPY_FILE_RANGE => want(8),
        // fuse_ioctl_out, then exactly the bytes asked for.
        IOCTL if req.len() >= 32 => want(16 + u32_at(req, 28) as usize),
        STATFS => want(80),
        LSEEK => {
            want(8)?;
            if (u64_at(body, 0) as i64) < 0 {
                return Err("negative offset".into());
            }
            Ok(())
        }
        READDIR | READDIRPLUS => {
            let size = u32_at(req, 16) as usize;
            if body.len() > size {
                return Err(format!("{} bytes for a listing of {size}", body.len()));
            }
            if op == READDIRPLUS {
                for (id, name) in direntplus_ids(body) {
                    if name.is_empty() || name.contains(&b'/') || (id == 0 && name != b"..") {
                        return Err(format!("entry {id:#x} {name:?}"));
                    }
                }
            } else {
                for (_, _, name) in dirents(body) {
                    if name.is_empty() || name.contains(&b'/') {
                        return Err(format!("entry {name:?}"));
                    }
                }
            }
            Ok(())
        }
        GETXATTR | LISTXATTR => {
            let size = u32_at(req, 0) as usize;
            if size == 0 {
                want(8)
            } else if body.len() > size {
                Err(format!("{} bytes for a buffer of {size}", body.len()))
            } else {
                Ok(())
            }
        }
        READLINK => {
            if body.is_empty() {
                Err("empty target".into())
            } else {
                Ok(())
            }
        }
        UNLINK | RMDIR | RENAME | RENAME2 | RELEASE | RELEASEDIR | FLUSH | FSYNC | FSYNCDIR
        | SETXATTR | REMOVEXATTR | ACCESS | FALLOCATE => want(0),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// File systems.

fn memfs() -> (Arc<dyn FileSystem>, Arc<VnodeLayer>) {
    let layer = VnodeLayer::new(Config::with_limit(1 << 16));
    let fs = MemFs::new(
        layer.clone(),
        MemFsConfig {
            // Bounded: a FALLOCATE of a terabyte must fail, not allocate.
            size_limit: Some(256 << 20),
            ..Default::default()
        },
    );
    (fs, layer)
}

/// A passthrough over a fresh directory, removed on drop.
struct TempSource(PathBuf);

impl Drop for TempSource {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn passthrough(tag: &str) -> (Arc<dyn FileSystem>, Arc<VnodeLayer>, TempSource) {
    let dir = std::env::temp_dir().join(format!("uvfs-raw-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let layer = VnodeLayer::new(Config::with_limit(1 << 16));
    let fs = PassthroughFs::new(layer.clone(), &dir, PassthroughConfig::default()).unwrap();
    (fs, layer, TempSource(dir))
}

// ---------------------------------------------------------------------------
// The targeted cases.

/// Node ids never handed out.
const UNKNOWN_IDS: [u64; 5] = [0, 7777, 1 << 40, u64::MAX - 1, u64::MAX];
/// File handles never handed out.
const UNKNOWN_FHS: [u64; 4] = [0, 4242, 1 << 50, u64::MAX];

fn unknown_nodes(k: &mut Kernel) {
    let (f, fh) = k.create(ROOT, b"known");
    let stale = [ESTALE, ENOENT];
    for id in UNKNOWN_IDS {
        k.expect_err(GETATTR, id, &getattr_in(None), &stale);
        k.expect_err(GETATTR, id, &getattr_in(Some(fh)), &stale);
        k.expect_no_node(LOOKUP, id, &b().name(b"known").done());
        k.expect_no_node(LOOKUP, id, &b().name(b"..").done());
        // "." of an unknown id is how the kernel resolves a file handle
        // (FUSE_EXPORT_SUPPORT): ESTALE for ids that never existed.
        k.expect_err(LOOKUP, id, &b().name(b".").done(), &stale);
        k.expect_err(OPEN, id, &open_in(libc::O_RDONLY), &stale);
        k.expect_err(
            SETATTR,
            id,
            &SetAttrIn {
                valid: FATTR_MODE,
                mode: 0o600,
                ..Default::default()
            }
            .body(),
            &stale,
        );
        k.expect_err(MKDIR, id, &mkdir_in(0o755, b"d"), &stale);
        k.expect_err(MKNOD, id, &mknod_in(libc::S_IFIFO | 0o644, 0, b"p"), &stale);
        k.expect_err(CREATE, id, &create_in(libc::O_RDWR, 0o644, b"c"), &stale);
        k.expect_err(TMPFILE, id, &create_in(libc::O_RDWR, 0o644, b"/"), &stale);
        k.expect_err(SYMLINK, id, &symlink_in(b"s", b"target"), &stale);
        k.expect_err(UNLINK, id, &b().name(b"known").done(), &stale);
        k.expect_err(RMDIR, id, &b().name(b"known").done(), &stale);
        k.expect_err(RENAME, id, &rename_in(ROOT, b"known", b"x"), &stale);
        k.expect_err(RENAME, ROOT, &rename_in(id, b"known", b"x"), &stale);
        k.expect_err(RENAME2, ROOT, &rename2_in(id, 0, b"known", b"x"), &stale);
        k.expect_err(RENAME2, id, &rename2_in(ROOT, 1, b"known", b"x"), &stale);
        k.expect_err(LINK, ROOT, &link_in(id, b"l"), &stale);
        k.expect_err(LINK, id, &link_in(f, b"l"), &stale);
        k.expect_err(READDIR, id, &read_in(0, 0, 4096), &stale);
        k.expect_err(READDIRPLUS, id, &read_in(0, 0, 4096), &stale);
        k.expect_err(FSYNCDIR, id, &fsync_in(0, 0), &stale);
        k.expect_err(READLINK, id, &[], &stale);
        k.expect_err(ACCESS, id, &access_in(libc::R_OK as u32), &stale);
        k.expect_err(GETXATTR, id, &getxattr_in(64, b"user.x"), &stale);
        k.expect_err(LISTXATTR, id, &listxattr_in(64), &stale);
        k.expect_err(SETXATTR, id, &setxattr_in(0, b"user.x", b"v"), &stale);
        k.expect_err(REMOVEXATTR, id, &b().name(b"user.x").done(), &stale);
        // OPENDIR: ENOSYS while the kernel opens directories itself.
        k.expect_err(
            OPENDIR,
            id,
            &open_in(libc::O_RDONLY),
            &[ESTALE, ENOENT, ENOSYS],
        );
    }
    // Unknown handles, on a known node and an unknown one.
    let known_fh = fh;
    for fh in UNKNOWN_FHS {
        for id in [f, 7777] {
            k.expect_err(READ, id, &read_in(fh, 0, 16), &[EBADF]);
            k.expect_err(WRITE, id, &write_in(fh, 0, b"x"), &[EBADF]);
            k.expect_err(FLUSH, id, &flush_in(fh), &[EBADF]);
            k.expect_err(FSYNC, id, &fsync_in(fh, 0), &[EBADF]);
            k.expect_err(FALLOCATE, id, &fallocate_in(fh, 0, 10, 0), &[EBADF]);
            k.expect_err(
                LSEEK,
                id,
                &lseek_in(fh, 0, libc::SEEK_DATA as u32),
                &[EBADF],
            );
            if fh != 0 {
                // Handle 0 is "opened by the kernel" for directories.
                k.expect_err(READDIR, ROOT, &read_in(fh, 0, 4096), &[EBADF]);
                k.expect_err(READDIRPLUS, ROOT, &read_in(fh, 0, 4096), &[EBADF]);
                k.expect_err(FSYNCDIR, ROOT, &fsync_in(fh, 0), &[EBADF]);
            }
            let c = CopyIn {
                fh_in: fh,
                off_in: 0,
                nodeid_out: f,
                fh_out: fh,
                off_out: 0,
                len: 10,
                flags: 0,
            };
            k.expect_err(COPY_FILE_RANGE, id, &c.body(), &[EBADF]);
            let c1 = CopyIn {
                fh_in: known_fh,
                ..c
            };
            k.expect_err(COPY_FILE_RANGE, f, &c1.body(), &[EBADF]);
            let c2 = CopyIn {
                fh_out: known_fh,
                ..c
            };
            k.expect_err(COPY_FILE_RANGE, id, &c2.body(), &[EBADF]);
            k.expect_err(RELEASE, id, &release_in(fh), &[EBADF]);
            k.expect_err(RELEASEDIR, id, &release_in(fh), &[EBADF]);
        }
    }
    // The real handle, released twice.
    let r = k.call(RELEASE, f, &release_in(fh));
    assert!(r.ok());
    k.expect_err(RELEASE, f, &release_in(fh), &[EBADF]);
    k.expect_err(READ, f, &read_in(fh, 0, 1), &[EBADF]);
    let r = k.call(UNLINK, ROOT, &b().name(b"known").done());
    assert!(r.ok(), "unlink: {}", r.errno());
    // Still held by the kernel: GETATTR of the unlinked node works (or,
    // where the file system cannot reach it any more, is ESTALE).
    let r = k.call(GETATTR, f, &getattr_in(None));
    assert!(
        r.ok() || (k.held_may_vanish && r.errno() == ESTALE),
        "getattr of an unlinked but held node: {}",
        r.errno()
    );
    k.no_reply(FORGET, f, &forget_in(1));
    k.expect_err(GETATTR, f, &getattr_in(None), &[ESTALE]);
}

fn forgets(k: &mut Kernel) {
    // Unknown ids, huge counts, zero counts: no reply, nothing changes.
    for id in UNKNOWN_IDS {
        k.no_reply(FORGET, id, &forget_in(1));
        k.no_reply(FORGET, id, &forget_in(u64::MAX));
    }
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[]));
    k.no_reply(
        BATCH_FORGET,
        0,
        &batch_forget_in(&[(7777, 3), (u64::MAX, u64::MAX), (0, 1)]),
    );
    // The root: forgetting it any number of times leaves it usable.
    k.no_reply(FORGET, ROOT, &forget_in(1));
    k.no_reply(FORGET, ROOT, &forget_in(u64::MAX));
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[(ROOT, 5), (ROOT, 1)]));
    k.call(GETATTR, ROOT, &getattr_in(None));
    assert!(k.lookup(ROOT, b".").ok());
    assert!(k.call(GETATTR, ROOT, &getattr_in(None)).ok());
    // A node looked up three times.
    let (f, fh) = k.create(ROOT, b"counted");
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
    assert_eq!(k.lookup(ROOT, b"counted").nodeid(), f);
    assert_eq!(k.lookup(ROOT, b"counted").nodeid(), f);
    assert_eq!(k.counts[&f], 3);
    k.no_reply(
        BATCH_FORGET,
        0,
        &batch_forget_in(&[(f, 1), (7777, 9), (f, 0)]),
    );
    k.check_held();
    k.no_reply(FORGET, f, &forget_in(1));
    k.check_held();
    k.no_reply(FORGET, f, &forget_in(0));
    k.check_held();
    // More than issued: clamped, the node goes.
    k.no_reply(FORGET, f, &forget_in(5));
    k.check_held();
    k.no_reply(FORGET, f, &forget_in(1));
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[(f, u64::MAX)]));
    // Looked up again: the same node, counted from one.
    assert_eq!(k.lookup(ROOT, b"counted").nodeid(), f);
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[(f, 1), (f, 1)]));
    k.check_held();
    // An open file whose node the kernel (wrongly) forgot: its handle
    // still works, and at release nothing is left over.
    let (g, gh) = k.create(ROOT, b"open-forgotten");
    k.no_reply(FORGET, g, &forget_in(1));
    let r = k.call(WRITE, g, &write_in(gh, 0, b"still open"));
    assert!(
        r.ok(),
        "write through a handle of a forgotten node: {}",
        r.errno()
    );
    assert!(k.call(RELEASE, g, &release_in(gh)).ok());
    k.settle();
}

fn names(k: &mut Kernel) {
    let d = k.mkdir(ROOT, b"names").nodeid();
    assert_ne!(d, 0);
    let long = vec![b'n'; 256];
    let max = vec![b'm'; 255];
    let bad: [&[u8]; 4] = [b"", b"a/b", b"/", &long];
    let before = k.list(d);
    for dir in [ROOT, d] {
        for name in bad {
            k.expect_no_node(LOOKUP, dir, &b().name(name).done());
            k.expect_no_node(MKDIR, dir, &mkdir_in(0o755, name));
            k.expect_no_node(MKNOD, dir, &mknod_in(libc::S_IFREG | 0o644, 0, name));
            k.expect_no_node(CREATE, dir, &create_in(libc::O_RDWR, 0o644, name));
            k.expect_no_node(SYMLINK, dir, &symlink_in(name, b"t"));
            k.expect_no_node(UNLINK, dir, &b().name(name).done());
            k.expect_no_node(RMDIR, dir, &b().name(name).done());
            k.expect_no_node(RENAME, dir, &rename_in(dir, name, b"x"));
            k.expect_no_node(RENAME, dir, &rename_in(dir, b"names", name));
            k.expect_no_node(RENAME2, dir, &rename2_in(dir, 0, b"names", name));
        }
        for name in [&b"."[..], b".."] {
            // LOOKUP of "." and ".." answers the directory and its parent.
            let r = k.lookup(dir, name);
            assert!(r.ok() && r.nodeid() != 0, "LOOKUP {name:?}: {}", r.errno());
            k.expect_no_node(MKDIR, dir, &mkdir_in(0o755, name));
            k.expect_no_node(MKNOD, dir, &mknod_in(libc::S_IFREG | 0o644, 0, name));
            k.expect_no_node(
                CREATE,
                dir,
                &create_in(libc::O_RDWR | libc::O_EXCL, 0o644, name),
            );
            k.expect_no_node(SYMLINK, dir, &symlink_in(name, b"t"));
            k.expect_no_node(UNLINK, dir, &b().name(name).done());
            k.expect_no_node(RMDIR, dir, &b().name(name).done());
            k.expect_no_node(RENAME, dir, &rename_in(dir, name, b"x"));
            k.expect_no_node(RENAME2, dir, &rename2_in(dir, 2, name, b"names"));
            k.expect_no_node(LINK, dir, &link_in(dir, name));
        }
    }
    // 255 bytes and non-UTF-8 are fine names.
    for name in [&max[..], b"\xff\xfe\x80", b"sp ace\t\n"] {
        let r = k.mkdir(d, name);
        assert!(r.ok(), "MKDIR {name:?}: {}", r.errno());
        assert_eq!(k.lookup(d, name).nodeid(), r.nodeid());
        assert!(k.call(RMDIR, d, &b().name(name).done()).ok());
    }
    // A name without its NUL (the length field ends before it): fuser
    // cannot parse it and answers ENOSYS; nothing is made.
    for op in [LOOKUP, MKDIR, UNLINK, RMDIR, CREATE, SYMLINK, RENAME] {
        let body = match op {
            MKDIR => b().u32(0o755).u32(0).bytes(b"nonul").done(),
            CREATE => b().u32(2).u32(0o644).u32(0).u32(0).bytes(b"nonul").done(),
            SYMLINK => b().name(b"nonul").bytes(b"target").done(),
            RENAME => b().u64(d).name(b"names").bytes(b"nonul").done(),
            _ => b"nonul".to_vec(),
        };
        k.expect_err(op, d, &body, &[ENOSYS, EINVAL]);
        // The header cuts the name off before its NUL, which follows.
        let mut full = body.clone();
        full.extend_from_slice(b"\0tail\0");
        let r = k.maybe_reply_raw(op, d, (HEADER + body.len()) as u32, &full);
        match r {
            Some(r) if !r.ok() => {}
            other => k.fail(&format!(
                "a cut-off name of {} answered {other:?}",
                op_name(op)
            )),
        }
    }
    // Bytes after the name's NUL are ignored.
    k.expect_no_node(LOOKUP, d, &b().name(b"absent").bytes(b"junk\0").done());
    assert_eq!(k.list(d), before, "bad names changed the directory");
    assert!(k
        .list(ROOT)
        .iter()
        .all(|n| !n.is_empty() && !n.contains(&b'/')));
    // Xattr names and values.
    let (f, fh) = k.create(d, b"x");
    let big = vec![7u8; 70_000];
    let long_attr = [b"user.".as_slice(), &[b'a'; 300]].concat();
    let huge_attr = [b"user.".as_slice(), &[b'a'; 70_000]].concat();
    for (name, value) in [
        (&b""[..], &b"v"[..]),
        (b"user.", b"v"),
        (&long_attr, b"v"),
        (&huge_attr, b""),
        (b"nonamespace", b"v"),
        (b"user.big", &big),
    ] {
        k.expect_no_node(SETXATTR, f, &setxattr_in(0, name, value));
        k.expect_no_node(GETXATTR, f, &getxattr_in(0, name));
        k.expect_no_node(REMOVEXATTR, f, &b().name(name).done());
    }
    // Unknown flags, an empty value, sizes too small.
    let r = k.call(SETXATTR, f, &setxattr_in(0, b"user.empty", b""));
    assert!(r.ok(), "empty xattr value: {}", r.errno());
    k.call(SETXATTR, f, &setxattr_in(0xffff_fff0, b"user.flags", b"v"));
    k.expect_no_node(SETXATTR, f, &setxattr_in(3, b"user.both", b"v"));
    assert!(k
        .call(SETXATTR, f, &setxattr_in(0, b"user.v", b"value"))
        .ok());
    k.expect_err(GETXATTR, f, &getxattr_in(2, b"user.v"), &[libc::ERANGE]);
    k.expect_err(LISTXATTR, f, &listxattr_in(1), &[libc::ERANGE]);
    let r = k.call(GETXATTR, f, &getxattr_in(u32::MAX, b"user.v"));
    assert_eq!(r.body, b"value");
    k.call(LISTXATTR, f, &listxattr_in(0));
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
}

fn io(k: &mut Kernel, memfs: bool) {
    let d = k.mkdir(ROOT, b"io").nodeid();
    let (f, fh) = k.create(d, b"f");
    assert!(k.call(WRITE, f, &write_in(fh, 0, b"hello")).ok());
    // Offsets past off_t: fuser refuses them (EINVAL).
    for off in [u64::MAX, 1 << 63] {
        k.expect_err(READ, f, &read_in(fh, off, 16), &[EINVAL]);
        k.expect_err(WRITE, f, &write_in(fh, off, b"x"), &[EINVAL]);
        k.expect_err(FALLOCATE, f, &fallocate_in(fh, off, 1, 0), &[EINVAL]);
        k.expect_err(FALLOCATE, f, &fallocate_in(fh, 0, off, 0), &[EINVAL]);
    }
    // The largest offsets a file can have.
    let r = k.call(READ, f, &read_in(fh, i64::MAX as u64, 16));
    assert!(!r.ok() || r.body.is_empty(), "read at i64::MAX: {r:?}");
    k.expect_no_node(WRITE, f, &write_in(fh, i64::MAX as u64, b"xy"));
    k.expect_no_node(WRITE, f, &write_in(fh, i64::MAX as u64 - 1, b"xy"));
    k.call(WRITE, f, &write_in(fh, i64::MAX as u64 - 1, b"z"));
    // Zero sizes.
    let r = k.call(READ, f, &read_in(fh, 0, 0));
    assert!(r.ok() && r.body.is_empty());
    let r = k.call(WRITE, f, &write_in(fh, 3, b""));
    assert!(r.ok() && u32_at(&r.body, 0) == 0, "empty write: {r:?}");
    // Sizes past max_write. The file is i64::MAX bytes now (all hole but
    // its last page) if the write above succeeded, and 4 GiB of it did not
    // fit a reply: fuser panicked encoding its length and the request
    // loop died. It is answered in part now, but what is left (16 MiB)
    // exceeds what a socket datagram carries, so the reply may be lost
    // on the way; the server must live on.
    if let Some(r) = k.maybe_reply(READ, f, &read_in(fh, 0, u32::MAX)) {
        assert!(r.ok(), "read of u32::MAX bytes: {}", r.errno());
    }
    if k.max_message > 2 * MAX_WRITE as usize + 64 {
        let r = k.call(READ, f, &read_in(fh, 0, 2 * MAX_WRITE));
        assert!(r.ok(), "read of 2 MiB: {}", r.errno());
    }
    if memfs && k.max_message > 2 * MAX_WRITE as usize + 64 {
        let data = vec![0xa5u8; 2 * MAX_WRITE as usize];
        let r = k.call(WRITE, f, &write_in(fh, 4096, &data));
        if r.ok() {
            assert_eq!(u32_at(&r.body, 0), 2 * MAX_WRITE);
        }
    }
    // SETATTR extremes.
    let sz = |size| SetAttrIn {
        valid: FATTR_SIZE,
        size,
        ..Default::default()
    };
    k.expect_no_node(SETATTR, f, &sz(u64::MAX).body());
    k.expect_no_node(SETATTR, f, &sz(1 << 63).body());
    k.call(SETATTR, f, &sz(i64::MAX as u64).body());
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_SIZE | FATTR_FH,
            fh: u64::MAX,
            size: 3,
            ..Default::default()
        }
        .body(),
    );
    assert!(k.call(SETATTR, f, &sz(5).body()).ok());
    assert_eq!(k.size_of(f), 5);
    // COPY_FILE_RANGE extremes, into a second file and within the first.
    let (g, gh) = k.create(d, b"g");
    let cp = |fh_out: u64, off_in: u64, off_out: u64, len: u64, flags: u64| {
        CopyIn {
            fh_in: fh,
            off_in,
            nodeid_out: if fh_out == fh { f } else { g },
            fh_out,
            off_out,
            len,
            flags,
        }
        .body()
    };
    let big = i64::MAX as u64;
    for (off_in, off_out, len, flags) in [
        (u64::MAX, 0, 1, 0),
        (1 << 63, 0, 1, 0),
        (0, u64::MAX, 1, 0),
        (0, big, 1, 0),
        (0, big - 1, u64::MAX, 0),
        (0, 0, u64::MAX, 0),
        (0, 0, 5, u64::MAX),
        (big, 0, u64::MAX, 0),
    ] {
        k.call(COPY_FILE_RANGE, f, &cp(gh, off_in, off_out, len, flags));
    }
    k.call(COPY_FILE_RANGE, f, &cp(fh, 0, 2, 5, 0));
    // The server lives on, and a plain copy copies.
    assert!(k.call(SETATTR, g, &sz(0).body()).ok());
    let r = k.call(COPY_FILE_RANGE, f, &cp(gh, 1, 0, 1 << 40, 0));
    assert!(r.ok(), "copy: {}", r.errno());
    assert_eq!(u32_at(&r.body, 0), 4);
    assert_eq!(k.size_of(g), 4);
    if memfs {
        // Overlapping ranges of one file: refused, as the kernel would.
        k.expect_err(COPY_FILE_RANGE, f, &cp(fh, 0, 2, 5, 0), &[EINVAL]);
        k.expect_err(COPY_FILE_RANGE, f, &cp(gh, 0, 0, 5, 1), &[EINVAL]);
        k.expect_err(COPY_FILE_RANGE, f, &cp(gh, 0, big, 5, 0), &[libc::EFBIG]);
    }
    assert_eq!(k.size_of(f), 5);
    // A mode with file-type bits (a directory's, a socket's): the type
    // of the node must not change.
    for mode in [libc::S_IFDIR | 0o755, libc::S_IFSOCK | 0o777, 0xffff_ffff] {
        k.call(
            SETATTR,
            f,
            &SetAttrIn {
                valid: FATTR_MODE,
                mode,
                ..Default::default()
            }
            .body(),
        );
        let r = k.call(GETATTR, f, &getattr_in(None));
        assert_eq!(
            u32_at(&r.body, 16 + 60) & libc::S_IFMT,
            libc::S_IFREG,
            "mode {mode:#o} changed the type"
        );
    }
    // Times: nanoseconds of a second or more, before 1970, far ends.
    for (sec, nsec) in [
        (0, 1_000_000_000),
        (1, u32::MAX),
        (-1, 999_999_999),
        (-5, 1_500_000_000),
        (i64::MAX, 0),
        (i64::MAX, 999_999_999),
        (i64::MIN + 1, 999_999_999),
        (1 << 40, u32::MAX),
    ] {
        let set = SetAttrIn {
            valid: FATTR_ATIME | FATTR_MTIME | FATTR_CTIME,
            atime: (sec, nsec),
            mtime: (sec, nsec),
            ctime: (sec, nsec),
            ..Default::default()
        };
        k.call(SETATTR, f, &set.body());
    }
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_ATIME_NOW | FATTR_MTIME_NOW | FATTR_ATIME | FATTR_MTIME,
            ..Default::default()
        }
        .body(),
    );
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: !FATTR_SIZE,
            mode: 0o644,
            uid: k.uid,
            gid: k.gid,
            ..Default::default()
        }
        .body(),
    );
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_UID | FATTR_GID,
            uid: u32::MAX,
            gid: u32::MAX,
            ..Default::default()
        }
        .body(),
    );
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_UID | FATTR_GID,
            uid: k.uid,
            gid: k.gid,
            ..Default::default()
        }
        .body(),
    );
    k.call(SETATTR, d, &sz(0).body());
    // LSEEK: bad whence, negative and huge offsets.
    for whence in [0u32, 1, 2, 3, 4, 5, u32::MAX] {
        for off in [0i64, 2, -1, i64::MIN, i64::MAX] {
            k.call(LSEEK, f, &lseek_in(fh, off, whence));
        }
    }
    // FALLOCATE: zero length, offset + len past the largest file, every
    // mode bit.
    k.expect_no_node(FALLOCATE, f, &fallocate_in(fh, 0, 0, 0));
    k.expect_no_node(
        FALLOCATE,
        f,
        &fallocate_in(fh, i64::MAX as u64, i64::MAX as u64, 0),
    );
    k.expect_no_node(FALLOCATE, f, &fallocate_in(fh, i64::MAX as u64 - 1, 2, 0));
    if memfs {
        // (A disk file system might allocate much of it before failing.)
        k.expect_no_node(FALLOCATE, f, &fallocate_in(fh, 0, 1 << 40, 0));
    }
    for mode in [1u32, 2, 3, 0x10, 0x20, 0x40, u32::MAX] {
        k.call(FALLOCATE, f, &fallocate_in(fh, 0, 4096, mode));
    }
    assert!(k.call(FALLOCATE, f, &fallocate_in(fh, 0, 8192, 0)).ok());
    // COPY_FILE_RANGE: overlapping within one file, huge lengths, flags.
    let (g, gh) = k.create(d, b"g");
    let copies = [
        (fh, 0, f, fh, 2, 10, 0),
        (fh, 0, f, fh, 0, 10, 0),
        (fh, 2, f, fh, 0, u64::MAX, 0),
        (fh, 0, g, gh, 0, u64::MAX, 0),
        (fh, 0, g, gh, i64::MAX as u64, 10, 0),
        (fh, i64::MAX as u64, g, gh, 0, 10, 0),
        (fh, u64::MAX, g, gh, 0, 10, 0),
        (fh, 0, g, gh, u64::MAX, 10, 0),
        (fh, 0, g, gh, 0, 10, 1),
        (fh, 0, g, gh, 0, 10, u64::MAX),
        (fh, 0, 7777, gh, 0, 10, 0),
        (gh, 0, g, gh, 1, 100, 0),
    ];
    for (fh_in, off_in, nodeid_out, fh_out, off_out, len, flags) in copies {
        let c = CopyIn {
            fh_in,
            off_in,
            nodeid_out,
            fh_out,
            off_out,
            len,
            flags,
        };
        k.call(COPY_FILE_RANGE, f, &c.body());
    }
    // Directory handles and file handles mixed up, I/O on a directory.
    k.call(READDIR, f, &read_in(fh, 0, 4096));
    k.call(READDIRPLUS, f, &read_in(fh, 0, 4096));
    k.expect_no_node(READDIR, f, &read_in(0, 0, 4096));
    k.expect_no_node(OPEN, d, &open_in(libc::O_RDWR));
    k.call(OPEN, d, &open_in(libc::O_RDONLY));
    k.call(OPEN, f, &open_in(-1));
    // READDIR offsets: garbage cookies, and sizes too small for one entry.
    for off in [0u64, 1, 2, 3, 1000, i64::MAX as u64, u64::MAX] {
        for size in [0u32, 1, 24, 4096, u32::MAX] {
            k.call(READDIR, d, &read_in(0, off, size));
            k.call(READDIRPLUS, d, &read_in(0, off, size));
        }
    }
    // Flush, fsync with garbage flags.
    k.call(FLUSH, f, &flush_in(fh));
    k.call(FSYNC, f, &fsync_in(fh, u32::MAX));
    k.call(FSYNCDIR, d, &fsync_in(0, u32::MAX));
    // RENAME2 flags: unknown bits, NOREPLACE | EXCHANGE together.
    for flags in [8u32, 3, 1 << 31, u32::MAX] {
        k.expect_no_node(RENAME2, d, &rename2_in(d, flags, b"f", b"h"));
    }
    // RENAME_WHITEOUT is the file system's to take or refuse.
    if k.call(RENAME2, d, &rename2_in(d, 4, b"f", b"h")).ok() {
        let r = k.call(RENAME2, d, &rename2_in(d, 0, b"h", b"f"));
        assert!(r.ok(), "renaming back after a whiteout: {}", r.errno());
    }
    let r = k.call(RENAME2, d, &rename2_in(d, 2, b"f", b"g"));
    assert!(r.ok(), "RENAME_EXCHANGE: {}", r.errno());
    assert!(k.call(RENAME2, d, &rename2_in(d, 2, b"f", b"g")).ok());
    k.expect_no_node(RENAME2, d, &rename2_in(d, 1, b"f", b"g"));
    // A directory into itself, into its child, over a non-empty one.
    let sub = k.mkdir(d, b"sub").nodeid();
    k.expect_no_node(RENAME, ROOT, &rename_in(sub, b"io", b"loop"));
    k.expect_no_node(RENAME, ROOT, &rename_in(d, b"io", b"loop"));
    k.expect_no_node(RENAME2, ROOT, &rename2_in(sub, 2, b"io", b"sub"));
    k.expect_no_node(RENAME, d, &rename_in(ROOT, b"sub", b"io"));
    k.expect_no_node(RMDIR, ROOT, &b().name(b"io").done());
    // LINK of a directory, onto an existing name.
    k.expect_no_node(LINK, ROOT, &link_in(d, b"dirlink"));
    k.expect_no_node(LINK, d, &link_in(f, b"g"));
    assert!(k.call(LINK, ROOT, &link_in(f, b"hard")).ok());
    assert!(k.call(UNLINK, ROOT, &b().name(b"hard").done()).ok());
    // Special files and odd modes. The kernel opens FIFOs, sockets and
    // devices itself, never through the server: an OPEN of one is
    // refused (a passthrough server blocked in open(2) of a FIFO).
    for mode in [
        libc::S_IFIFO | 0o644,
        libc::S_IFCHR | 0o644,
        libc::S_IFBLK | 0o644,
        libc::S_IFSOCK | 0o644,
        libc::S_IFREG | 0o644,
        0o644,
        libc::S_IFDIR | 0o755,
        libc::S_IFLNK | 0o777,
        0o170000 | 0o644,
        0xffff_ffff,
    ] {
        let r = k.call(MKNOD, d, &mknod_in(mode, u32::MAX, b"node"));
        if !r.ok() {
            continue;
        }
        let node = r.nodeid();
        let special = [libc::S_IFIFO, libc::S_IFCHR, libc::S_IFBLK, libc::S_IFSOCK]
            .contains(&(mode & libc::S_IFMT));
        for flags in [libc::O_RDONLY, libc::O_RDWR] {
            let r = if special {
                k.expect_no_node(OPEN, node, &open_in(flags))
            } else {
                k.call(OPEN, node, &open_in(flags))
            };
            if r.ok() {
                let h = u64_at(&r.body, 0);
                k.call(READ, ROOT, &read_in(h, 0, 10));
                k.call(WRITE, ROOT, &write_in(h, 0, b"x"));
                k.call(LSEEK, ROOT, &lseek_in(h, 0, libc::SEEK_HOLE as u32));
                k.call(RELEASE, ROOT, &release_in(h));
            }
        }
        assert!(k.call(UNLINK, d, &b().name(b"node").done()).ok());
    }
    // Symlink targets.
    let long_target = vec![b't'; 5000];
    for target in [&b""[..], &long_target, b"a\xffb", b"/abs/olute"] {
        let r = k.call(SYMLINK, d, &symlink_in(b"sl", target));
        if r.ok() {
            let r2 = k.call(READLINK, r.nodeid(), &[]);
            assert_eq!(r2.body, target);
            k.expect_no_node(OPEN, r.nodeid(), &open_in(libc::O_RDONLY));
            assert!(k.call(UNLINK, d, &b().name(b"sl").done()).ok());
        }
    }
    // ACCESS with every bit.
    k.call(ACCESS, f, &access_in(u32::MAX));
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
    assert!(k.call(RELEASE, g, &release_in(gh)).ok());
}

fn odd_requests(k: &mut Kernel) {
    // Opcodes the server does not implement: an errno, nothing else.
    for op in UNKNOWN_OPS {
        k.expect_err(op, ROOT, &[0; 64], &[ENOSYS]);
    }
    // Locks: memfs leaves them to the kernel (ENOSYS); passthrough keeps
    // them, and refuses one through no handle (ENOLCK) or one it never
    // gave out (EBADF).
    k.expect_err(GETLK, ROOT, &lk_in(0), &[ENOSYS, libc::ENOLCK]);
    k.expect_err(SETLK, ROOT, &lk_in(0), &[ENOSYS, libc::ENOLCK]);
    k.expect_err(SETLK, ROOT, &lk_in(u64::MAX), &[ENOSYS, EBADF]);
    k.expect_err(BMAP, ROOT, &b().u64(0).u32(4096).u32(0).done(), &[ENOSYS]);
    k.expect_err(
        IOCTL,
        ROOT,
        &b().u64(0).u32(0).u32(0x5401).u64(0).u32(0).u32(0).done(),
        &[libc::ENOTTY],
    );
    k.expect_err(
        POLL,
        ROOT,
        &b().u64(0).u64(0).u32(0).u32(0).done(),
        &[ENOSYS],
    );
    // A second INIT after the handshake.
    k.expect_err(
        INIT,
        0,
        &b().u32(7)
            .u32(31)
            .u32(0)
            .u32(0)
            .u32(0)
            .bytes(&[0; 44])
            .done(),
        &[libc::EIO, EINVAL, libc::EPROTO],
    );
    // INTERRUPT (of nothing in flight): any answer, or none.
    let target = k.unique + 2;
    let unique = k.next_unique() | 1;
    let msg = k.message(
        INTERRUPT,
        unique,
        0,
        (HEADER + 8) as u32,
        &interrupt_in(target),
    );
    k.note(format!("INTERRUPT of {target}"));
    k.send_raw(&msg);
    k.drain_until_statfs(unique, "INTERRUPT");
    k.maybe_reply(INTERRUPT, 0, &interrupt_in(u64::MAX));
    // Bodies shorter than the request's struct: an errno (fuser cannot
    // parse them), never a handler called with garbage.
    let fuller: [(u32, Vec<u8>); 22] = [
        (FORGET, forget_in(1)),
        (GETATTR, getattr_in(None)),
        (SETATTR, SetAttrIn::default().body()),
        (MKNOD, mknod_in(0o644, 0, b"x")),
        (MKDIR, mkdir_in(0o755, b"x")),
        (RENAME, rename_in(ROOT, b"a", b"b")),
        (LINK, link_in(ROOT, b"x")),
        (OPEN, open_in(0)),
        (READ, read_in(1, 0, 1)),
        (WRITE, write_in(1, 0, b"")),
        (RELEASE, release_in(1)),
        (FSYNC, fsync_in(1, 0)),
        (SETXATTR, setxattr_in(0, b"user.a", b"")),
        (GETXATTR, getxattr_in(0, b"user.a")),
        (FLUSH, flush_in(1)),
        (READDIR, read_in(0, 0, 100)),
        (ACCESS, access_in(0)),
        (CREATE, create_in(0, 0o644, b"x")),
        (BATCH_FORGET, batch_forget_in(&[(ROOT, 1)])),
        (FALLOCATE, fallocate_in(1, 0, 1, 0)),
        (LSEEK, lseek_in(1, 0, 3)),
        (
            COPY_FILE_RANGE,
            CopyIn {
                fh_in: 1,
                off_in: 0,
                nodeid_out: 1,
                fh_out: 1,
                off_out: 0,
                len: 1,
                flags: 0,
            }
            .body(),
        ),
    ];
    for (op, body) in fuller {
        for cut in [0, 1, 4, 7] {
            if cut >= body.len() {
                continue;
            }
            let short = &body[..cut];
            let r = k.maybe_reply(op, ROOT, short);
            if let Some(r) = r {
                if r.ok() {
                    k.fail(&format!("{} with {cut} body bytes succeeded", op_name(op)));
                }
            }
        }
    }
    // BATCH_FORGET claiming more entries than it carries.
    let mut lie = batch_forget_in(&[(ROOT, 1)]);
    lie[0..4].copy_from_slice(&1000u32.to_le_bytes());
    k.maybe_reply(BATCH_FORGET, 0, &lie);
    let mut lie = batch_forget_in(&[]);
    lie[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    k.maybe_reply(BATCH_FORGET, 0, &lie);
    // Trailing junk after a well-formed body is ignored.
    let mut junk = getattr_in(None);
    junk.extend_from_slice(&[0xff; 100]);
    assert!(k.call(GETATTR, ROOT, &junk).ok());
    // A header shorter than the message: only `len` bytes count.
    let body = getattr_in(None);
    let r = k.maybe_reply_raw(GETATTR, ROOT, (HEADER + 4) as u32, &body);
    assert!(
        matches!(r, Some(ref r) if !r.ok()),
        "GETATTR cut by its header: {r:?}"
    );
}

/// The sequence a kernel sends for mkdir, echo > file, cat, rm.
fn sane(k: &mut Kernel, tag: &[u8]) {
    let d = k.mkdir(ROOT, tag);
    assert!(d.ok(), "MKDIR after the storm: {}", d.errno());
    let d = d.nodeid();
    let (f, fh) = k.create(d, b"file");
    let data = b"hello, world\n".repeat(1000);
    let r = k.call(WRITE, f, &write_in(fh, 0, &data));
    assert!(
        r.ok() && u32_at(&r.body, 0) as usize == data.len(),
        "WRITE: {r:?}"
    );
    let r = k.call(READ, f, &read_in(fh, 0, 1 << 20));
    assert_eq!(r.body, data, "READ back");
    assert_eq!(k.size_of(f), data.len() as u64);
    assert!(k.call(FLUSH, f, &flush_in(fh)).ok());
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
    assert!(k.list(d).contains(&b"file"[..]));
    let r = k.call(UNLINK, d, &b().name(b"file").done());
    assert!(r.ok(), "UNLINK: {}", r.errno());
    assert!(!k.list(d).contains(&b"file"[..]));
    k.no_reply(FORGET, f, &forget_in(1));
    assert!(k.call(RMDIR, ROOT, &b().name(tag).done()).ok());
    k.no_reply(FORGET, d, &forget_in(1));
    k.settle();
}

/// Locks of a file system that keeps them (passthrough): a SETLKW that
/// meets a conflict is answered only when the lock is free, or with EINTR
/// once the kernel interrupts it, even if the INTERRUPT came first; a
/// FLUSH drops its owner's locks.
fn locks(k: &mut Kernel) {
    const EOF: u64 = i64::MAX as u64;
    let (f, h1) = k.create(ROOT, b"locked");
    let h2 = u64_at(&k.call(OPEN, f, &open_in(libc::O_RDWR)).body, 0);
    for flock in [false, true] {
        let held = k.call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_WRLCK, flock));
        assert!(held.ok(), "{}lock refused: {}", k.tag, held.error);
        let other = lock_in(h2, 2, 0, EOF, libc::F_WRLCK, flock);
        k.expect_err(SETLK, f, &other, &[libc::EAGAIN]);
        // Parked: nothing comes back for it before the next STATFS.
        let waiting = k.send(SETLKW, f, &other);
        if let Some(r) = k.drain_until_statfs(waiting, "a SETLKW on a held lock") {
            k.fail(&format!(
                "a SETLKW on a held lock was answered: {}",
                r.error
            ));
        }
        let intr = k.next_unique() | 1;
        let msg = k.message(
            INTERRUPT,
            intr,
            0,
            (HEADER + 8) as u32,
            &interrupt_in(waiting),
        );
        k.send_raw(&msg);
        let r = k.recv_for(waiting, "an interrupted SETLKW");
        assert_eq!(r.error, -libc::EINTR, "{}interrupted SETLKW", k.tag);
        // An INTERRUPT that overtakes its request.
        let intr = k.next_unique() | 1;
        let next = k.unique + 2;
        let msg = k.message(INTERRUPT, intr, 0, (HEADER + 8) as u32, &interrupt_in(next));
        k.send_raw(&msg);
        let early = k.send(SETLKW, f, &other);
        assert_eq!(early, next);
        let r = k.recv_for(early, "a SETLKW interrupted before it came");
        assert_eq!(r.error, -libc::EINTR, "{}early-interrupted SETLKW", k.tag);
        // Released, the wait ends with the lock.
        let waiting = k.send(SETLKW, f, &other);
        if k.drain_until_statfs(waiting, "a SETLKW on a held lock")
            .is_some()
        {
            k.fail("a SETLKW on a held lock was answered");
        }
        assert!(k
            .call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_UNLCK, flock))
            .ok());
        let r = k.recv_for(waiting, "a SETLKW once the lock was free");
        assert!(r.ok(), "{}SETLKW after the unlock: {}", k.tag, r.error);
        if flock {
            assert!(k
                .call(SETLK, f, &lock_in(h2, 2, 0, EOF, libc::F_UNLCK, true))
                .ok());
        } else {
            // A close (FLUSH) by the owner drops its POSIX locks.
            assert!(k
                .call(FLUSH, f, &b().u64(h2).u32(0).u32(0).u64(2).done())
                .ok());
        }
        let again = k.call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_WRLCK, flock));
        assert!(again.ok(), "{}lock left behind: {}", k.tag, again.error);
        assert!(k
            .call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_UNLCK, flock))
            .ok());
    }
    assert!(k.call(RELEASE, f, &release_in(h1)).ok());
    assert!(k.call(RELEASE, f, &release_in(h2)).ok());
}

// Inode-flag ioctls (include/uapi/linux/fs.h) and flags.
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_NODUMP_FL: u32 = 0x40;
const FS_XFLAG_IMMUTABLE: u32 = 0x8;
const FS_XFLAG_NODUMP: u32 = 0x80;

/// fuse_ioctl_in for `cmd` on handle `fh`, as `fuse_priv_ioctl` sends it:
/// `input` for a write-only command, `out_size` bytes asked back for a
/// read-only one.
fn ioctl_in(fh: u64, cmd: u32, input: &[u8], out_size: u32) -> Vec<u8> {
    b().u64(fh)
        .u32(0)
        .u32(cmd)
        .u64(0)
        .u32(input.len() as u32)
        .u32(out_size)
        .bytes(input)
        .done()
}

/// chattr's requests as the kernel sends them (`fuse_fileattr_get/set`),
/// from callers with and without the rights Linux asks: the file's owner
/// (or `CAP_FOWNER`) for any change, `CAP_LINUX_IMMUTABLE` to set or clear
/// immutable. The kernel checks both before it asks; a peer that is not a
/// kernel must meet the same refusals from the server. Then immutable is
/// enforced on a handle opened for writing before it was set.
fn inode_flags(k: &mut Kernel, memfs: bool) {
    let (f, fh) = k.create(ROOT, b"flags");
    let flags = |k: &mut Kernel| {
        let r = k.call(IOCTL, f, &ioctl_in(fh, FS_IOC_GETFLAGS, &[], 4));
        assert!(r.ok(), "GETFLAGS: errno {}", r.errno());
        u32_at(&r.body, 16)
    };
    let base = flags(k);
    if !memfs && base & FS_IMMUTABLE_FL != 0 {
        k.fail("a new source file is immutable");
    }
    let set = |k: &mut Kernel, v: u32| {
        k.call(
            IOCTL,
            f,
            &ioctl_in(fh, FS_IOC_SETFLAGS, &v.to_ne_bytes(), 0),
        )
    };
    let (root_uid, root_pid) = (k.uid, k.pid);
    let as_user = |k: &mut Kernel, uid: u32| {
        k.uid = uid;
        k.pid = 0;
    };
    // Not the owner (root owns it), no capabilities: no change at all.
    as_user(k, 1000);
    let r = set(k, base | FS_NODUMP_FL);
    assert_eq!(r.errno(), libc::EPERM, "SETFLAGS by a stranger");
    // Its owner now, still without CAP_LINUX_IMMUTABLE.
    (k.uid, k.pid) = (root_uid, root_pid);
    let chown = SetAttrIn {
        valid: FATTR_UID,
        uid: 1000,
        ..Default::default()
    };
    assert!(k.call(SETATTR, f, &chown.body()).ok(), "chown");
    as_user(k, 1000);
    let r = set(k, base | FS_IMMUTABLE_FL);
    assert_eq!(r.errno(), libc::EPERM, "SETFLAGS +i without the capability");
    let r = set(k, base | FS_NODUMP_FL);
    assert!(r.ok(), "SETFLAGS +d by the owner: errno {}", r.errno());
    (k.uid, k.pid) = (root_uid, root_pid);
    assert_eq!(flags(k), base | FS_NODUMP_FL);
    // Root (CAP_LINUX_IMMUTABLE, read from its status) sets immutable:
    // from then on even the handle opened for writing before fails.
    assert!(set(k, base | FS_NODUMP_FL | FS_IMMUTABLE_FL).ok(), "+i");
    let r = k.call(IOCTL, f, &ioctl_in(fh, FS_IOC_FSGETXATTR, &[], 28));
    assert!(r.ok(), "FSGETXATTR: errno {}", r.errno());
    let x = u32_at(&r.body, 16);
    assert_eq!(
        x & (FS_XFLAG_IMMUTABLE | FS_XFLAG_NODUMP),
        FS_XFLAG_IMMUTABLE | FS_XFLAG_NODUMP,
        "xflags {x:#x}"
    );
    k.expect_err(WRITE, f, &write_in(fh, 0, b"no"), &[libc::EPERM]);
    // Cleared through the other form; writes work again.
    let mut fsx = r.body[16..16 + 28].to_vec();
    fsx[..4].copy_from_slice(&(x & !FS_XFLAG_IMMUTABLE).to_ne_bytes());
    let r = k.call(IOCTL, f, &ioctl_in(fh, FS_IOC_FSSETXATTR, &fsx, 0));
    assert!(r.ok(), "FSSETXATTR -i: errno {}", r.errno());
    assert_eq!(flags(k) & FS_IMMUTABLE_FL, 0);
    assert!(
        k.call(WRITE, f, &write_in(fh, 0, b"yes")).ok(),
        "write after -i"
    );
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
}

fn targeted(k: &mut Kernel, memfs: bool) {
    k.tag = "targeted: ".into();
    unknown_nodes(k);
    k.settle();
    forgets(k);
    names(k);
    k.settle();
    io(k, memfs);
    k.settle();
    if !memfs {
        locks(k);
        k.settle();
    }
    odd_requests(k);
    k.settle();
    inode_flags(k, memfs);
    k.settle();
    sane(k, b"sane");
}

#[test]
fn memfs_survives_hostile_requests() {
    let (fs, layer) = memfs();
    let mut k = Kernel::start(fs, layer, false);
    let t = Instant::now();
    targeted(&mut k, true);
    eprintln!("{} requests in {:?}", k.sent, t.elapsed());
    k.finish();
}

#[test]
fn passthrough_survives_hostile_requests() {
    let (fs, layer, _src) = passthrough("targeted");
    let mut k = Kernel::start(fs, layer, true);
    k.held_may_vanish = true;
    targeted(&mut k, false);
    k.finish();
}

// ---------------------------------------------------------------------------
// The random phase.

/// xorshift64*: tiny, seedable, good enough to pick requests.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        }
        Err(_) => default,
    }
}

struct Gen<'a> {
    rng: Rng,
    k: &'a mut Kernel,
    /// Lengths that make a disk file system allocate or copy stay small.
    bounded: bool,
}

impl Gen<'_> {
    fn node(&mut self) -> u64 {
        let r = self.rng.below(100);
        if r < 65 {
            let held: Vec<u64> = (self.k.seen.iter())
                .filter(|id| self.k.counts.contains_key(id))
                .copied()
                .collect();
            self.rng.pick(&held)
        } else if r < 80 {
            let seen = self.k.seen.clone();
            self.rng.pick(&seen)
        } else if r < 90 {
            self.rng.below(64)
        } else {
            self.rng.pick(&[0, u64::MAX, 1 << 63, self.rng.0])
        }
    }

    fn fh(&mut self) -> u64 {
        let r = self.rng.below(100);
        if r < 70 && !self.k.open.is_empty() {
            let open: Vec<u64> = self.k.open.iter().copied().collect();
            self.rng.pick(&open)
        } else if r < 85 && !self.k.released.is_empty() {
            let i = self.rng.below(self.k.released.len() as u64) as usize;
            self.k.released[i]
        } else {
            self.rng.pick(&[0, 1, 2, 3, 100, u64::MAX, self.rng.0])
        }
    }

    fn name(&mut self) -> Vec<u8> {
        const PLAIN: [&[u8]; 8] = [b"a", b"b", b"c", b"d", b"e", b"dir", b"file", b"\xff\xfe"];
        if self.rng.chance(85) {
            return self.rng.pick(&PLAIN).to_vec();
        }
        match self.rng.below(7) {
            0 => b".".to_vec(),
            1 => b"..".to_vec(),
            2 => Vec::new(),
            3 => b"x/y".to_vec(),
            4 => vec![b'n'; 255],
            5 => vec![b'n'; 256],
            _ => (0..1 + self.rng.below(12))
                .map(|_| 1 + self.rng.below(255) as u8)
                .collect(),
        }
    }

    fn offset(&mut self) -> u64 {
        match self.rng.below(10) {
            0..=3 => self.rng.below(16 << 10),
            4 | 5 => self.rng.below(1 << 24),
            6 => self.rng.pick(&[0, 4095, 4096, 8191]),
            7 => self
                .rng
                .pick(&[i64::MAX as u64, i64::MAX as u64 - 1, 1 << 40]),
            8 => self.rng.pick(&[u64::MAX, 1 << 63]),
            _ => self.rng.next(),
        }
    }

    /// A READ size whose reply fits through the socket.
    fn size(&mut self) -> u32 {
        let s = match self.rng.below(8) {
            0 => 0,
            1..=4 => self.rng.below(20000) as u32,
            5 => 4096,
            6 => MAX_WRITE,
            _ => self.rng.pick(&[1, 24, 65536, 2 * MAX_WRITE]),
        };
        s.min(self.k.max_message as u32 - 64)
    }

    fn data(&mut self) -> Vec<u8> {
        let n = match self.rng.below(10) {
            0 => 0,
            1..=8 => self.rng.below(9000),
            _ => self.rng.below(300_000),
        };
        let n = n.min(self.k.max_message as u64 - 128);
        let byte = self.rng.next() as u8;
        vec![byte; n as usize]
    }

    /// A time fuser converts without panicking (it panics on some at the
    /// far ends: see `fuser_survives_malformed_requests`).
    fn time(&mut self) -> (i64, u32) {
        let nsec = if self.rng.chance(80) {
            self.rng.below(1_000_000_000) as u32
        } else {
            self.rng.next() as u32
        };
        let sec = match self.rng.below(4) {
            0 => self.rng.below(1 << 34) as i64,
            1 => -(self.rng.below(1 << 34) as i64),
            2 => 0,
            _ => {
                return (
                    self.rng.pick(&[i64::MAX, i64::MIN + 1, -1]),
                    nsec % 1_000_000_000,
                )
            }
        };
        (sec, nsec)
    }

    fn mode(&mut self) -> u32 {
        let kind = self.rng.pick(&[
            libc::S_IFREG,
            libc::S_IFREG,
            libc::S_IFIFO,
            libc::S_IFSOCK,
            libc::S_IFCHR,
            libc::S_IFDIR,
            0,
            0o170000,
        ]);
        kind | (self.rng.below(0o10000) as u32)
    }

    fn step(&mut self) {
        match self.rng.below(40) {
            0..=4 => {
                let (dir, name) = (self.node(), self.name());
                self.k.call(LOOKUP, dir, &b().name(&name).done());
            }
            5 | 6 => {
                let (id, fh) = (self.node(), self.fh());
                let body = getattr_in(self.rng.chance(20).then_some(fh));
                self.k.call(GETATTR, id, &body);
            }
            7 | 8 => {
                let id = self.node();
                let mut set = SetAttrIn {
                    valid: self.rng.next() as u32 & 0x7ff,
                    fh: self.fh(),
                    size: if self.rng.chance(70) {
                        self.rng.below(1 << 20)
                    } else {
                        self.offset()
                    },
                    atime: self.time(),
                    mtime: self.time(),
                    ctime: self.time(),
                    mode: self.mode(),
                    uid: self.k.uid,
                    gid: self.k.gid,
                };
                if self.rng.chance(10) {
                    set.uid = self.rng.next() as u32;
                }
                self.k.call(SETATTR, id, &set.body());
            }
            9 | 10 => {
                let (dir, name) = (self.node(), self.name());
                self.k
                    .call(MKDIR, dir, &mkdir_in(self.rng.below(0o10000) as u32, &name));
            }
            11 => {
                let (dir, name, mode) = (self.node(), self.name(), self.mode());
                self.k
                    .call(MKNOD, dir, &mknod_in(mode, self.rng.next() as u32, &name));
            }
            12..=14 => {
                let (dir, name) = (self.node(), self.name());
                let flags = libc::O_RDWR
                    | if self.rng.chance(30) { libc::O_EXCL } else { 0 }
                    | if self.rng.chance(20) {
                        libc::O_TRUNC
                    } else {
                        0
                    };
                let mode = self.mode();
                // Now and then an unnamed file instead (O_TMPFILE; the
                // name is ignored, as the kernel's "/" is).
                let op = if self.rng.chance(15) { TMPFILE } else { CREATE };
                self.k.call(op, dir, &create_in(flags, mode, &name));
            }
            15 => {
                let (dir, name, target) = (self.node(), self.name(), self.name());
                self.k.call(SYMLINK, dir, &symlink_in(&name, &target));
            }
            16 | 17 => {
                let (dir, name) = (self.node(), self.name());
                let op = if self.rng.chance(50) { UNLINK } else { RMDIR };
                self.k.call(op, dir, &b().name(&name).done());
            }
            18 | 19 => {
                let (a, b2) = (self.node(), self.node());
                let (n1, n2) = (self.name(), self.name());
                if self.rng.chance(50) {
                    self.k.call(RENAME, a, &rename_in(b2, &n1, &n2));
                } else {
                    let flags = self.rng.pick(&[0, 1, 2, 4, 3, u32::MAX]);
                    self.k.call(RENAME2, a, &rename2_in(b2, flags, &n1, &n2));
                }
            }
            20 => {
                let (id, dir, name) = (self.node(), self.node(), self.name());
                self.k.call(LINK, dir, &link_in(id, &name));
            }
            21 | 22 => {
                let id = self.node();
                let flags = self.rng.pick(&[
                    libc::O_RDONLY,
                    libc::O_WRONLY,
                    libc::O_RDWR,
                    libc::O_RDWR | libc::O_TRUNC,
                    -1,
                ]);
                let op = if self.rng.chance(80) { OPEN } else { OPENDIR };
                self.k.call(op, id, &open_in(flags));
            }
            23 | 24 => {
                let (id, fh, off, size) = (self.node(), self.fh(), self.offset(), self.size());
                self.k.call(READ, id, &read_in(fh, off, size));
            }
            25 | 26 => {
                let (id, fh, off, data) = (self.node(), self.fh(), self.offset(), self.data());
                self.k.call(WRITE, id, &write_in(fh, off, &data));
            }
            27 => {
                let (id, fh) = (self.node(), self.fh());
                let op = self
                    .rng
                    .pick(&[RELEASE, RELEASEDIR, FLUSH, FSYNC, FSYNCDIR, GETLK, SETLK]);
                let body = match op {
                    RELEASE | RELEASEDIR => release_in(fh),
                    FLUSH => flush_in(fh),
                    // Never SETLKW: a conflicting one waits (by design)
                    // and the storm wants every request answered.
                    GETLK | SETLK => {
                        let typ = self
                            .rng
                            .pick(&[libc::F_RDLCK, libc::F_WRLCK, libc::F_UNLCK, 7]);
                        let start = self.offset();
                        let end = if self.rng.chance(50) {
                            u64::MAX
                        } else {
                            self.offset()
                        };
                        b().u64(fh)
                            .u64(self.rng.below(4)) // lock owner
                            .u64(start)
                            .u64(end)
                            .u32(typ as u32)
                            .u32(1)
                            .u32(self.rng.below(2) as u32) // FUSE_LK_FLOCK
                            .u32(0)
                            .done()
                    }
                    _ => fsync_in(fh, self.rng.below(2) as u32),
                };
                self.k.call(op, id, &body);
            }
            28 | 29 => {
                let (id, off, size) = (self.node(), self.offset(), self.size());
                let fh = if self.rng.chance(70) { 0 } else { self.fh() };
                let off = if self.rng.chance(60) {
                    self.rng.below(40)
                } else {
                    off
                };
                let op = if self.rng.chance(50) {
                    READDIR
                } else {
                    READDIRPLUS
                };
                self.k.call(op, id, &read_in(fh, off, size.min(1 << 17)));
            }
            30 | 31 => {
                let id = self.node();
                let n = self.rng.pick(&[0, 1, 1, 1, 2, 100, u64::MAX]);
                self.k.no_reply(FORGET, id, &forget_in(n));
            }
            32 => {
                let list: Vec<(u64, u64)> = (0..self.rng.below(6))
                    .map(|_| (self.node(), self.rng.pick(&[0, 1, 1, 3, u64::MAX])))
                    .collect();
                self.k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&list));
            }
            33 => {
                let id = self.node();
                let name = if self.rng.chance(80) {
                    self.rng
                        .pick(&[&b"user.a"[..], b"user.b", b"trusted.t", b"security.s"])
                        .to_vec()
                } else {
                    self.name()
                };
                match self.rng.below(4) {
                    0 => {
                        let v = self.data();
                        let v = &v[..v.len().min(70_000)];
                        let flags = self.rng.pick(&[0, 1, 2, 3, u32::MAX]);
                        self.k.call(SETXATTR, id, &setxattr_in(flags, &name, v));
                    }
                    1 => {
                        let size = self.rng.pick(&[0, 1, 10, 65536, u32::MAX]);
                        self.k.call(GETXATTR, id, &getxattr_in(size, &name));
                    }
                    2 => {
                        let size = self.rng.pick(&[0, 1, 10, 65536, u32::MAX]);
                        self.k.call(LISTXATTR, id, &listxattr_in(size));
                    }
                    _ => {
                        self.k.call(REMOVEXATTR, id, &b().name(&name).done());
                    }
                }
            }
            34 => {
                let (id, fh, off) = (self.node(), self.fh(), self.offset());
                let mut len = if self.rng.chance(60) {
                    self.rng.below(1 << 16)
                } else {
                    self.offset()
                };
                // On a disk file system a large allocation fills the disk
                // (ext4 keeps what it allocated before ENOSPC).
                if self.bounded && len > 1 << 20 {
                    len = self.rng.below(1 << 20);
                }
                let mode = self.rng.pick(&[0, 0, 1, 2, 3, 0x10, 0x11, u32::MAX]);
                self.k
                    .call(FALLOCATE, id, &fallocate_in(fh, off, len, mode));
            }
            35 => {
                let (id, fh) = (self.node(), self.fh());
                let off = if self.rng.chance(70) {
                    self.rng.below(1 << 16) as i64
                } else {
                    self.rng.next() as i64
                };
                let whence = self.rng.pick(&[3, 4, 3, 4, 0, 1, 2, 5, u32::MAX]);
                self.k.call(LSEEK, id, &lseek_in(fh, off, whence));
            }
            36 => {
                let id = self.node();
                let c = CopyIn {
                    fh_in: self.fh(),
                    off_in: self.offset(),
                    nodeid_out: self.node(),
                    fh_out: self.fh(),
                    off_out: self.offset(),
                    len: if self.rng.chance(60) {
                        self.rng.below(1 << 16)
                    } else {
                        self.offset()
                    },
                    flags: if self.rng.chance(90) {
                        0
                    } else {
                        self.rng.next()
                    },
                };
                let c = if self.bounded {
                    CopyIn {
                        len: c.len.min(1 << 20),
                        ..c
                    }
                } else {
                    c
                };
                self.k.call(COPY_FILE_RANGE, id, &c.body());
            }
            37 => {
                let id = self.node();
                match self.rng.below(4) {
                    0 => {
                        self.k.call(READLINK, id, &[]);
                    }
                    1 => {
                        self.k
                            .call(ACCESS, id, &access_in(self.rng.below(8) as u32));
                    }
                    2 => {
                        self.k.call(STATFS, id, &[]);
                    }
                    _ => {
                        let op = self.rng.pick(&UNKNOWN_OPS);
                        self.k.call(op, id, &[0; 32]);
                    }
                }
            }
            _ => {
                // A known request cut short.
                let id = self.node();
                // (opcode, size of its fixed struct)
                let (op, min) = self.rng.pick(&[
                    (GETATTR, 16),
                    (SETATTR, 88),
                    (OPEN, 8),
                    (READ, 40),
                    (WRITE, 40),
                    (RELEASE, 24),
                    (MKDIR, 8),
                    (CREATE, 16),
                    (TMPFILE, 16),
                    (RENAME2, 16),
                    (LINK, 8),
                    (FALLOCATE, 32),
                    (LSEEK, 24),
                    (COPY_FILE_RANGE, 56),
                    (FORGET, 8),
                    (BATCH_FORGET, 8),
                ]);
                let len = self.rng.below(min) as usize;
                let body: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
                let r = self.k.maybe_reply(op, id, &body);
                if let Some(r) = r {
                    if r.ok() {
                        self.k
                            .fail(&format!("{} with a {len}-byte body succeeded", op_name(op)));
                    }
                }
            }
        }
    }
}

fn random_phase(k: &mut Kernel, seed: u64, ops: u64, bounded: bool) {
    let mut g = Gen {
        rng: Rng::new(seed),
        k,
        bounded,
    };
    // A few names to start from.
    for name in [&b"a"[..], b"dir"] {
        g.k.mkdir(ROOT, name);
    }
    g.k.create(ROOT, b"file");
    for i in 0..ops {
        g.k.tag = format!("UVFS_FUZZ_SEED={seed:#x} step {i}/{ops}: ");
        g.step();
        if i % 500 == 499 {
            g.k.check_held();
        }
    }
    g.k.tag = format!("UVFS_FUZZ_SEED={seed:#x} after {ops} steps: ");
    let rep = g.k.mount().report(false);
    let c = |n: &str| rep["counters"][n].as_u64().unwrap_or(0);
    eprintln!(
        "{} requests answered, {} with an errno; {} nodes held",
        c("fuse.requests"),
        c("fuse.requests.errors"),
        c("fuse.nodes")
    );
    if std::env::var_os("UVFS_FUZZ_VERBOSE").is_some() {
        eprintln!("{}", uvfs_fuse::format_stats(&rep));
    }
    g.k.settle();
    sane(g.k, b"sane-after-random");
}

#[test]
fn memfs_survives_random_requests() {
    let seed = env_u64("UVFS_FUZZ_SEED", 0x5eed_f00d);
    let ops = env_u64("UVFS_FUZZ_OPS", 3000);
    eprintln!("UVFS_FUZZ_SEED={seed:#x} UVFS_FUZZ_OPS={ops}");
    let (fs, layer) = memfs();
    let mut k = Kernel::start(fs, layer, false);
    let t = Instant::now();
    random_phase(&mut k, seed, ops, false);
    eprintln!("{} requests in {:?}", k.sent, t.elapsed());
    k.finish();
}

#[test]
fn passthrough_survives_random_requests() {
    let seed = env_u64("UVFS_FUZZ_SEED", 0x5eed_f00d) ^ 0x9e37_79b9;
    let ops = env_u64("UVFS_FUZZ_OPS", 3000) / 2;
    let (fs, layer, _src) = passthrough("random");
    let mut k = Kernel::start(fs, layer, true);
    k.held_may_vanish = true;
    random_phase(&mut k, seed, ops, true);
    k.finish();
}

// ---------------------------------------------------------------------------
// fuser's own parsing.

/// Requests the release of fuser 0.18 could not take: it panicked parsing
/// them (in its request loop, before any handler runs, so the server's
/// `catch_unwind` never saw it), and the file system was gone. Each case
/// runs on a fresh server; all must survive with the patched copy in
/// third_party/fuser (PATCHED.md).
///
/// A kernel sends none of them but the times: utimensat(2) takes any
/// `tv_sec` and FUSE passes it on, and the release's
/// `system_time_from_time` negated it unchecked (a panic for `i64::MIN` in
/// debug builds) and then subtracted a `Duration` that overflowed
/// (`(i64::MIN, 1)` panicked in release builds too), which stopped the
/// request loop. (Linux 6.18's VFS clamps a utimensat time to
/// -(2^63 - 1) s before FUSE sees it; the patch does not rely on that.)
///
/// A frame whose header cannot be read (a length below the header's or
/// beyond the message, an empty message) ends the session by fuser's
/// design: it has no request id to answer, and only a broken kernel sends
/// one. Those cases must end it without a panic.
static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn fuser_survives_malformed_requests() {
    // Panics anywhere in the process (fuser's request loops included).
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        prev(info);
    }));
    type Case = (&'static str, fn(&mut Kernel) -> (u32, u64, u32, Vec<u8>));
    fn times(sec: i64, nsec: u32) -> Vec<u8> {
        SetAttrIn {
            valid: FATTR_MTIME,
            mtime: (sec, nsec),
            ..Default::default()
        }
        .body()
    }
    let cases: [Case; 9] = [
        ("SETATTR mtime (i64::MAX, 1e9)", |_| {
            let b = times(i64::MAX, 1_000_000_000);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("SETATTR mtime (i64::MIN, 0)", |_| {
            let b = times(i64::MIN, 0);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("SETATTR mtime (i64::MIN, 1)", |_| {
            let b = times(i64::MIN, 1);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("SETATTR mtime (-i64::MAX, 1e9)", |_| {
            let b = times(-i64::MAX, 1_000_000_000);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("WRITE whose size field exceeds its data", |k| {
            let (f, fh) = k.create(ROOT, b"w");
            let mut b = write_in(fh, 0, b"abc");
            b[16..20].copy_from_slice(&100u32.to_le_bytes());
            (WRITE, f, (HEADER + b.len()) as u32, b)
        }),
        ("SETXATTR whose size field exceeds its value", |_| {
            let mut b = setxattr_in(0, b"user.a", b"abc");
            b[0..4].copy_from_slice(&100u32.to_le_bytes());
            (SETXATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("header len 8, shorter than the header", |_| {
            (GETATTR, ROOT, 8, getattr_in(None))
        }),
        ("header len larger than the message", |_| {
            let b = getattr_in(None);
            (GETATTR, ROOT, (HEADER + b.len() + 100) as u32, b)
        }),
        ("an empty message", |_| (0, 0, 0, Vec::new())),
    ];
    let mut dead = Vec::new();
    for (what, make) in cases {
        let (fs, layer) = memfs();
        let mut k = Kernel::start(fs, layer, false);
        // A dead loop leaves the socket open (the evictor's notifier holds
        // it), so death shows as silence.
        set_recv_timeout(&k.fd, Duration::from_secs(1));
        let (op, nodeid, len, body) = make(&mut k);
        let unique = k.next_unique();
        let msg = if len == 0 && body.is_empty() {
            Vec::new()
        } else {
            k.message(op, unique, nodeid, len, &body)
        };
        k.send_raw(&msg);
        // Alive if a GETATTR after it is answered (the reply to the bad
        // request, if any, comes first).
        let probe = k.send(GETATTR, ROOT, &getattr_in(None));
        let mut alive = false;
        while let Some((u, ..)) = k.recv_any_quiet() {
            if u == probe {
                alive = true;
                break;
            }
        }
        eprintln!("{}: {what}", if alive { "survived" } else { "ended" });
        let framing = what.starts_with("header len") || what == "an empty message";
        if !alive && !framing {
            dead.push(what);
        }
        assert_eq!(
            PANICS.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{what}: a thread panicked"
        );
    }
    assert!(dead.is_empty(), "fuser's request loop died on: {dead:#?}");
}

/// `open_by_handle_at` after the kernel dropped a file's inode, while its
/// FORGET has not reached the server: the kernel asks LOOKUP of `.` in the
/// file's node id. The answer is the file itself, not ENOTDIR (which the
/// kernel turned into ESTALE).
#[test]
fn lookup_of_dot_in_a_held_file_answers_the_file() {
    let (fs, layer) = memfs();
    let mut k = Kernel::start(fs, layer, false);
    let (id, fh) = k.create(ROOT, b"f");
    let r = k.call(RELEASE, id, &release_in(fh));
    assert!(r.ok(), "RELEASE: {}", r.errno());
    let r = k.lookup(id, b".");
    assert!(r.ok(), "LOOKUP . in a file: {}", r.errno());
    assert_eq!(r.nodeid(), id);
    k.finish();
}
