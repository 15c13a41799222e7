//! A listed directory's attributes fetched again in the background, so the
//! next `stat` of it is answered from the kernel's cache.
//!
//! # Why
//! After every READDIR or READDIRPLUS it sends, the kernel marks the
//! directory's atime stale (`fuse_invalidate_atime`; only read-only
//! superblocks are spared), and `stat` asks for atime: the first `stat` of
//! a directory after its listing is a GETATTR round trip, whatever the
//! attribute timeout. No reply carries a directory's own attributes after
//! its listing (READDIRPLUS's `.` is skipped by the kernel), so a warm
//! `find` would pay one GETATTR per directory, which is most of what
//! separates a warm walk of memfs from one of tmpfs (docs/results.md,
//! "Directory attribute refresh").
//!
//! # How
//! Each directory listed is queued; a thread stats it through the mount
//! [`DELAY`] after its last listing request, which makes the kernel send
//! the GETATTR then and keep the answer. The round trip moves from the
//! next `stat` (a caller waiting) to the background, where nobody waits
//! for it.
//! - Through a private clone of the mount (`open_tree(OPEN_TREE_CLONE)`),
//!   never through the mount itself: any reference the thread held on the
//!   mount, even the instant a path walk to it takes, would make a racing
//!   `umount` fail with EBUSY. The clone shares the superblock and so the
//!   caches. It is made once, when the mount is made and before anyone
//!   can list or unmount it, so the thread never walks the mountpoint
//!   again. Being a mount of its own, it keeps the superblock (and so the
//!   server) alive after an unmount: a watcher ([`watch_mounts`]) closes
//!   it once no mount of this device is left in the server's mount table,
//!   and the superblock ends with the batch under way, if any. So that a
//!   batch is more than one directory, the thread gathers for [`GATHER`]
//!   after the first is due. (While the clone is open, "our connection is
//!   alive" does not mean "our mount is on the mountpoint": `kmount.rs`
//!   checks the device before unmounting by path.)
//! - Held as the thread's own working directory, not as a descriptor:
//!   the thread unshares its file system context (`unshare(CLONE_FS)`)
//!   and enters the clone. Tools that find a mount's users (`fuser -m`,
//!   `lsof`) read processes' descriptors and working directories, not
//!   threads', and the clone keeps nobody's mount busy; held as a
//!   descriptor it made the server one of its own mount's users, and
//!   `fuser -km` killed it with the programs (memfs's contents with it).
//!   The thread leaves once the mount is gone, and its end lets the clone
//!   go. (Where the thread cannot unshare, it keeps the descriptor.)
//! - By path, from the names the kernel was handed (`DirNames`), resolved
//!   with `RESOLVE_CACHED`: a component the kernel no longer caches (it
//!   forgot it, or the entry expired) fails with EAGAIN instead of being
//!   looked up, so the thread never brings back a node the kernel or the
//!   evictor (`evict.rs`) let go, and sends nothing but the GETATTR. Not by
//!   file handle: decoding one marks the dentry's entry stale
//!   (`fuse_get_dentry`), trading the GETATTR for a LOOKUP later.
//! - Checked: what the path leads to must be on this mount's device with
//!   the node's inode number, or it counts as stale (a name changed on the
//!   host, a mount moved or covered by another); the clone's device is
//!   checked before anything is resolved in it.
//!
//! A read-only mount needs none of this (the kernel keeps its atimes), nor
//! does one whose attribute timeout is short ([`MIN_ATTR_TIMEOUT`]: what is
//! fetched would expire before it is used), nor can a server that may not
//! clone mounts (no CAP_SYS_ADMIN): the thread is not started.

use crate::nodes::ROOT_ID;
use crate::report::{Counted, Report};
use parking_lot::{Condvar, Mutex};
use rustix::fs::AtFlags;
use std::collections::HashMap;
use std::ffi::CString;
use std::io::{PipeReader, PipeWriter};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use uvfs_vfs::{FdReservation, FileSystem};

/// Shortest attribute timeout for which refreshing pays: attributes fetched
/// now must live until the next `stat` to be of use, and with a short
/// timeout (a passthrough's default second) they expire first.
pub const MIN_ATTR_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after a directory's last listing request it may be stat'ed.
/// The kernel marks the atime stale after the reply has reached the
/// lister; a stat before that would find the old attributes still valid
/// and change nothing.
pub const DELAY: Duration = Duration::from_millis(2);

/// How long the thread waits, once a directory is due, for others to be
/// due too. A walk lists hundreds of directories a second, and each batch
/// costs a wake-up of this thread and, when the queue had run empty, a
/// wake-up call on the request path of the server thread that queued the
/// next directory: on a two-CPU machine a cold walk's lone walker waits
/// behind them. Gathering longer makes them fewer; attributes then come
/// later after a listing, which matters only to a `stat` of the directory
/// within the first moments, answered by a round trip as without this.
pub const GATHER: Duration = Duration::from_millis(20);

/// Descriptors a batch holds at most: one path in the clone. They come out
/// of the file system's fd budget (`FileSystem::reserve_fds`), as does the
/// clone's own for as long as it is kept.
const FDS: usize = 1;

/// Most directories per batch (each one stat): a superblock unmounted
/// during a batch outlives its mount by no more than a batch.
const MAX_BATCH: usize = 128;

/// Most directories waiting at once; more listed meanwhile are dropped
/// (counted), their next `stat` a round trip as without the refresh.
const MAX_PENDING: usize = 16_384;

/// Most directories whose names are kept. Past it new ones are not
/// tracked (counted) until forgotten ones make room.
const MAX_NAMES: usize = 1 << 20;

/// Deepest path followed from a directory to the root.
const MAX_DEPTH: usize = 2048;

/// (parent node id, name in it).
type Named = (u64, Box<[u8]>);

/// The name each directory node was last handed to the kernel under:
/// (parent node id, name). The kernel's dentry cache holds the same names,
/// so a path built from them is one `RESOLVE_CACHED` can resolve.
#[derive(Default)]
pub struct DirNames {
    map: Mutex<HashMap<u64, Named>>,
    /// Directories not tracked because the map was full.
    untracked: AtomicU64,
}

impl DirNames {
    /// Directory node `id` was handed to the kernel as `name` in `parent`.
    pub fn handed_out(&self, id: u64, parent: u64, name: &[u8]) {
        // `.` and `..` are looked up too (a file handle's node, an export's
        // parent), but they name no place of their own: kept, they would
        // make cycles of the parent links.
        if id == ROOT_ID || name == b"." || name == b".." {
            return;
        }
        let mut m = self.map.lock();
        if let Some(e) = m.get_mut(&id) {
            if e.0 != parent || *e.1 != *name {
                *e = (parent, name.into());
            }
        } else if m.len() < MAX_NAMES {
            m.insert(id, (parent, name.into()));
        } else {
            self.untracked.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Node `id` now goes by `name` in `parent` (a rename through the
    /// mount), if it is a directory tracked here.
    pub fn moved(&self, id: u64, parent: u64, name: &[u8]) {
        if let Some(e) = self.map.lock().get_mut(&id) {
            *e = (parent, name.into());
        }
    }

    /// The kernel forgot node `id`.
    pub fn forgot(&self, id: u64) {
        self.map.lock().remove(&id);
    }

    /// Directories not tracked because too many were.
    pub fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Directories tracked.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether none is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The path of `id` below the root (empty for the root), if every
    /// directory on the way is known.
    pub fn path(&self, id: u64) -> Option<Vec<u8>> {
        let m = self.map.lock();
        let mut names: Vec<&[u8]> = Vec::new();
        let mut at = id;
        while at != ROOT_ID {
            let (parent, name) = m.get(&at)?;
            names.push(name);
            if names.len() > MAX_DEPTH {
                return None;
            }
            at = *parent;
        }
        let mut p = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        for (k, n) in names.iter().rev().enumerate() {
            if k > 0 {
                p.push(b'/');
            }
            p.extend_from_slice(n);
        }
        Some(p)
    }
}

/// Counters of the refresher.
#[derive(Default, Debug)]
pub struct RefreshCounters {
    /// Listings that queued their directory.
    pub queued: AtomicU64,
    /// Directories stat'ed through the clone (found as expected).
    pub refreshed: AtomicU64,
    /// Directories a component of whose path the kernel no longer caches
    /// (nothing sent).
    pub uncached: AtomicU64,
    /// Directories whose path led elsewhere or nowhere.
    pub stale: AtomicU64,
    /// Directories with no known path (names untracked).
    pub unknown: AtomicU64,
    /// Listings not queued because the queue was full.
    pub dropped: AtomicU64,
    /// Clones of the mount opened (one per mount).
    pub clones: AtomicU64,
    /// Batches given up: no fd to spare, or the mount is gone.
    pub unavailable: AtomicU64,
    /// Directories queued and not yet dealt with (a gauge).
    pub waiting: AtomicU64,
    /// Names directories were made at or moved to on the host, looked up
    /// so that the kernel moved the directory's entry there.
    pub followed: AtomicU64,
}

/// The queue of listed directories and the thread that refreshes them.
#[derive(Default)]
pub struct Refresher {
    /// Names of the directory nodes the kernel holds.
    pub names: Arc<DirNames>,
    shared: Arc<Shared>,
    /// The thread runs (cleared again if it finds it cannot work).
    started: Arc<AtomicBool>,
    /// Counters.
    pub counters: Arc<RefreshCounters>,
}

#[derive(Default)]
struct Shared {
    q: Mutex<Queue>,
    bell: Condvar,
}

#[derive(Default)]
struct Queue {
    /// Directory node id -> when to stat it.
    due: HashMap<u64, Instant>,
    /// (directory node id, name) a directory was made at or moved to on
    /// the host: looked up at once ([`Refresher::arrived`]).
    moved: Vec<(u64, Box<[u8]>)>,
    /// The server's state is gone (or the thread found it cannot work):
    /// the thread leaves and nothing more is queued.
    closed: bool,
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.shared.q.lock().closed = true;
        self.shared.bell.notify_one();
    }
}

impl Refresher {
    /// Whether the thread runs (names are worth keeping).
    pub fn running(&self) -> bool {
        self.started.load(Ordering::Relaxed)
    }

    /// Directory node `id` was just listed (a READDIR or READDIRPLUS
    /// answered): stat it after [`DELAY`], unless it is listed again by
    /// then, which moves the time.
    pub fn listed(&self, id: u64) {
        if !self.running() {
            return;
        }
        let due = Instant::now() + DELAY;
        let mut q = self.shared.q.lock();
        if q.closed {
            return;
        }
        let was_empty = q.due.is_empty();
        if q.due.len() < MAX_PENDING || q.due.contains_key(&id) {
            if q.due.insert(id, due).is_none() {
                self.counters.waiting.fetch_add(1, Ordering::Relaxed);
            }
            self.counters.queued.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        if was_empty {
            self.shared.bell.notify_one();
        }
    }

    /// A directory was made at, or moved to, `name` in directory node
    /// `dir` on the host, and the kernel was just told to drop that name:
    /// looks it up through the clone. The kernel moves a directory's
    /// entry, or hashes it again, only when its name is looked up
    /// (`d_splice_alias` finds the old entry); until then `getcwd` of a
    /// process working below a moved directory answers the old path,
    /// which is gone, and one working in a directory whose name was
    /// invalidated (the host made it just before the process entered it
    /// through the mount, and the event came after) fails.
    pub fn arrived(&self, dir: u64, name: Box<[u8]>) {
        if !self.running() {
            return;
        }
        let mut q = self.shared.q.lock();
        if q.closed || q.moved.len() >= MAX_PENDING {
            return;
        }
        q.moved.push((dir, name));
        self.shared.bell.notify_one();
    }

    /// Starts the thread for the mount just made on `mountpoint`, whose
    /// device is `dev`, serving `fs`. Called before the mount is handed to
    /// anyone: the clone is made here.
    pub fn start(
        &self,
        mountpoint: &Path,
        dev: u64,
        fs: Weak<dyn FileSystem>,
    ) -> std::io::Result<()> {
        let mp = CString::new(mountpoint.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let reserved = fs
            .upgrade()
            .and_then(|fs| fs.reserve_fds(1))
            .ok_or_else(|| std::io::Error::other("no file descriptor to spare for it"))?;
        let clone = clone_mount(&mp, dev).map_err(|e| {
            if e.raw_os_error() == Some(libc::EPERM) {
                std::io::Error::other(
                    "the server may not clone its mount (EPERM); \
                     the first stat of a directory after a listing is a round trip",
                )
            } else {
                e
            }
        })?;
        self.counters.clones.fetch_add(1, Ordering::Relaxed);
        let kept = Arc::new(Kept {
            held: Mutex::new(Some(Held::Fd {
                fd: Arc::new(clone),
                _budget: reserved,
            })),
            shared: self.shared.clone(),
        });
        let (ending_rx, ending) = std::io::pipe()?;
        let watched = kept.clone();
        std::thread::Builder::new()
            .name("uvfs-mountwatch".into())
            .spawn(move || watch_mounts(dev, watched, ending_rx))?;
        // From here on, the thread's end (or its failure to start, which
        // drops it) closes `ending` and so the clone.
        let t = Thread {
            dev,
            fs,
            kept,
            _ending: ending,
            names: self.names.clone(),
            shared: self.shared.clone(),
            counters: self.counters.clone(),
        };
        self.started.store(true, Ordering::Relaxed);
        std::thread::Builder::new()
            .name("uvfs-refresh".into())
            .spawn(move || t.run())
            .inspect_err(|_| self.started.store(false, Ordering::Relaxed))?;
        Ok(())
    }
}

/// What one directory's refresh came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Refreshed,
    Uncached,
    Stale,
    Unknown,
}

/// The private clone of the mount every batch stats through (see "How").
/// Emptied once the mount is gone; a batch under way keeps its own
/// reference until it ends.
struct Kept {
    held: Mutex<Option<Held>>,
    /// The thread's queue: closed to make it leave the clone.
    shared: Arc<Shared>,
}

/// How the clone is held.
enum Held {
    /// A descriptor, with its share of the file system's fd budget.
    Fd {
        fd: Arc<OwnedFd>,
        _budget: FdReservation,
    },
    /// The refreshing thread's working directory.
    Cwd,
}

/// Where a batch resolves paths: the clone.
enum Dir {
    Fd(Arc<OwnedFd>),
    Cwd,
}

impl Dir {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Fd(fd) => fd.as_fd(),
            Dir::Cwd => rustix::fs::CWD,
        }
    }
}

impl Kept {
    fn get(&self) -> Option<Dir> {
        match self.held.lock().as_ref()? {
            Held::Fd { fd, .. } => Some(Dir::Fd(fd.clone())),
            Held::Cwd => Some(Dir::Cwd),
        }
    }

    /// On the refreshing thread: holds the clone as its own working
    /// directory from now on, if it can (see "How").
    fn enter(&self) {
        let mut held = self.held.lock();
        let Some(Held::Fd { fd, .. }) = held.as_ref() else {
            return;
        };
        // SAFETY: FS alone (root, working directory, umask) becomes this
        // thread's own; the descriptor table stays shared, so every fd
        // any thread holds stays valid everywhere.
        let own = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) };
        if own.is_ok() && rustix::process::fchdir(&**fd).is_ok() {
            let was = held.replace(Held::Cwd);
            drop(held);
            drop(was);
        }
    }

    /// Lets the clone go. Taken out under the lock, dropped outside it:
    /// closing the last reference may end an unmounted superblock, which
    /// waits for its connection's requests. A clone held as the thread's
    /// working directory goes when the thread, told to, leaves.
    fn close(&self) {
        let kept = self.held.lock().take();
        if matches!(kept, Some(Held::Cwd)) {
            self.shared.q.lock().closed = true;
            self.shared.bell.notify_all();
        }
        drop(kept);
    }
}

struct Thread {
    dev: u64,
    /// For its fd budget; the thread ends once it is gone.
    fs: Weak<dyn FileSystem>,
    kept: Arc<Kept>,
    /// Closed when the thread ends (this is dropped with it), which tells
    /// the watcher to let the clone go.
    _ending: PipeWriter,
    names: Arc<DirNames>,
    shared: Arc<Shared>,
    counters: Arc<RefreshCounters>,
}

impl Thread {
    fn run(self) {
        crate::threads::detach_from_creator();
        self.kept.enter();
        while let Some((batch, moved)) = self.next_batch() {
            let n = batch.len() as u64;
            let Some(fs) = self.fs.upgrade() else {
                return;
            };
            let fds = fs.reserve_fds(FDS);
            drop(fs);
            // No fds to spare now (the next batch asks again), or the
            // mount is gone.
            let Some(clone) = fds.as_ref().and_then(|_| self.kept.get()) else {
                self.counters.unavailable.fetch_add(1, Ordering::Relaxed);
                self.counters.waiting.fetch_sub(n, Ordering::Relaxed);
                continue;
            };
            for (dir, name) in moved {
                if follow(clone.fd(), self.dev, dir, &name, &self.names) {
                    self.counters.followed.fetch_add(1, Ordering::Relaxed);
                }
            }
            for id in batch {
                let c = &self.counters;
                let counter = match refresh(clone.fd(), self.dev, id, &self.names) {
                    Outcome::Refreshed => &c.refreshed,
                    Outcome::Uncached => &c.uncached,
                    Outcome::Stale => &c.stale,
                    Outcome::Unknown => &c.unknown,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                c.waiting.fetch_sub(1, Ordering::Relaxed);
            }
            // Closing may end an unmounted superblock, which waits for its
            // connection's requests: outside any lock (as here). Its fds'
            // share of the budget goes back after it is closed.
            drop(clone);
            drop(fds);
        }
    }

    /// Waits for directories to be due (with no timeout while none is
    /// queued: an idle server costs no wakeups), gathers, and takes those
    /// due, with the moved directories' names (taken at once). None once
    /// closed.
    fn next_batch(&self) -> Option<Batch> {
        let mut q = self.shared.q.lock();
        loop {
            if q.closed {
                return None;
            }
            if !q.moved.is_empty() {
                return Some((Vec::new(), std::mem::take(&mut q.moved)));
            }
            let Some(first) = q.due.values().min().copied() else {
                self.shared.bell.wait(&mut q);
                continue;
            };
            let until = first + GATHER;
            if Instant::now() < until {
                self.shared.bell.wait_until(&mut q, until);
                continue;
            }
            let now = Instant::now();
            let mut batch = Vec::new();
            q.due.retain(|&id, &mut t| {
                let take = t <= now && batch.len() < MAX_BATCH;
                if take {
                    batch.push(id);
                }
                !take
            });
            return Some((batch, Vec::new()));
        }
    }
}

/// Directories due for a refresh, and names directories were made at or
/// moved to.
type Batch = (Vec<u64>, Vec<(u64, Box<[u8]>)>);

/// Lets `kept` go once no mount of device `dev` is left in this process's
/// mount table (unmounted, detached: the clone alone would keep the
/// superblock and its server alive), or once `ending` is closed (the
/// refresher stopped). The kernel flags a change of the table to `poll`
/// on an open mountinfo; an idle server's watcher sleeps until then.
fn watch_mounts(dev: u64, kept: Arc<Kept>, ending: PipeReader) {
    crate::threads::detach_from_creator();
    let present = || {
        uvfs_vfs::mountinfo::read_table().is_some_and(|t| crate::mountinfo::lists_device(&t, dev))
    };
    // Opened before the first look, so that an unmount between the two is
    // flagged to the poll below.
    if let Ok(table) = std::fs::File::open(uvfs_vfs::mountinfo::MOUNTINFO) {
        while present() {
            use rustix::event::{poll, PollFd, PollFlags};
            let mut fds = [
                PollFd::new(&table, PollFlags::PRI),
                PollFd::new(&ending, PollFlags::IN),
            ];
            match poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
            if !fds[1].revents().is_empty() {
                break;
            }
        }
    }
    kept.close();
}

/// A private clone of the mount on `mountpoint`, checked to be on `dev`.
fn clone_mount(mountpoint: &CString, dev: u64) -> std::io::Result<OwnedFd> {
    use rustix::mount::{open_tree, OpenTreeFlags};
    let fd = open_tree(
        rustix::fs::CWD,
        mountpoint.as_c_str(),
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_NO_AUTOMOUNT
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    )?;
    // The device without a request: on another file system (ours
    // unmounted, the path covered) nothing is to be sent anywhere.
    match stat_at(&fd, c"", AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC) {
        Ok((d, _)) if d == dev => Ok(fd),
        Ok(_) => Err(std::io::Error::from_raw_os_error(libc::EXDEV)),
        Err(e) => Err(e),
    }
}

/// (device, inode number) of `path` at `dir` by statx with `flags`.
fn stat_at(dir: impl AsFd, path: &std::ffi::CStr, flags: AtFlags) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::statx(
        dir,
        path,
        flags | AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BASIC_STATS,
    )?;
    Ok((
        libc::makedev(st.stx_dev_major, st.stx_dev_minor),
        st.stx_ino,
    ))
}

/// Stats directory node `id` through `clone` (see "How").
fn refresh(clone: BorrowedFd<'_>, dev: u64, id: u64, names: &DirNames) -> Outcome {
    let Some(path) = names.path(id) else {
        return Outcome::Unknown;
    };
    let checked = |r: std::io::Result<(u64, u64)>| match r {
        Ok((d, ino)) if d == dev && ino == id => Outcome::Refreshed,
        Ok(_) => Outcome::Stale,
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Outcome::Uncached,
        Err(_) => Outcome::Stale,
    };
    if path.is_empty() {
        return checked(stat_at(clone, c"", AtFlags::EMPTY_PATH));
    }
    let Ok(path) = CString::new(path) else {
        return Outcome::Stale;
    };
    checked(open_cached(clone, &path).and_then(|fd| stat_at(&fd, c"", AtFlags::EMPTY_PATH)))
}

/// Looks `name` up in directory node `dir` through `clone` (see
/// [`Refresher::arrived`]): the directory's path from the dentry cache
/// alone, checked to be the node, then a real lookup of the name. Whether
/// the name was found.
fn follow(clone: BorrowedFd<'_>, dev: u64, dir: u64, name: &[u8], names: &DirNames) -> bool {
    let Some(path) = names.path(dir) else {
        return false;
    };
    let Ok(name) = CString::new(name) else {
        return false;
    };
    let opened;
    let parent = if path.is_empty() {
        clone
    } else {
        let Some(fd) = CString::new(path)
            .ok()
            .and_then(|p| open_cached(clone, &p).ok())
        else {
            return false;
        };
        opened = fd;
        opened.as_fd()
    };
    if !matches!(stat_at(parent, c"", AtFlags::EMPTY_PATH), Ok((d, ino)) if d == dev && ino == dir)
    {
        return false;
    }
    stat_at(parent, &name, AtFlags::STATX_DONT_SYNC).is_ok()
}

/// `path` below `dir` as an O_PATH fd, resolved from the dentry cache
/// alone: EAGAIN if any component would need a lookup or revalidation.
fn open_cached(dir: BorrowedFd<'_>, path: &std::ffi::CStr) -> std::io::Result<OwnedFd> {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
    Ok(openat2(
        dir,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::CACHED
            | ResolveFlags::BENEATH
            | ResolveFlags::NO_XDEV
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS,
    )?)
}

impl Counted for Refresher {
    fn report(&self, out: &mut Report) {
        let c = &self.counters;
        for (name, v, d) in [
            ("fuse.refresh.queued", &c.queued, "Directory listings after which the directory's attributes are to be fetched again"),
            ("fuse.refresh.refreshed", &c.refreshed, "Listed directories stat'ed again through a clone of the mount (their next stat needs no round trip)"),
            ("fuse.refresh.uncached", &c.uncached, "Listed directories left alone: the kernel no longer cached a name on the way"),
            ("fuse.refresh.stale", &c.stale, "Listed directories whose name led elsewhere or nowhere"),
            ("fuse.refresh.unknown", &c.unknown, "Listed directories with no known name"),
            ("fuse.refresh.dropped", &c.dropped, "Listings not queued: too many directories waiting"),
            ("fuse.refresh.clones", &c.clones, "Private clones of the mount opened for refreshing (one per mount)"),
            ("fuse.refresh.unavailable", &c.unavailable, "Batches dropped: no fd to spare, or the mount is gone"),
            ("fuse.refresh.waiting", &c.waiting, "Listed directories queued and not yet dealt with"),
            ("fuse.refresh.followed", &c.followed, "Names directories were made at or moved to on the host, looked up so that the paths of processes working in or below them follow"),
        ] {
            out.put(name, v.load(Ordering::Relaxed), d);
        }
        out.put(
            "fuse.refresh.untracked",
            self.names.untracked(),
            "Directories handed to the kernel whose names were not kept (too many kept already)",
        );
        out.put(
            "fuse.refresh.names",
            self.names.len() as u64,
            "Directories whose names the refresher keeps (those the kernel holds)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_parents_to_the_root() {
        let n = DirNames::default();
        n.handed_out(5, ROOT_ID, b"a");
        n.handed_out(9, 5, b"b");
        n.handed_out(12, 9, b"c");
        assert_eq!(n.path(ROOT_ID).as_deref(), Some(&b""[..]));
        assert_eq!(n.path(5).as_deref(), Some(&b"a"[..]));
        assert_eq!(n.path(12).as_deref(), Some(&b"a/b/c"[..]));
        // A rename through the mount moves the subtree's paths with it.
        n.moved(9, ROOT_ID, b"z");
        assert_eq!(n.path(12).as_deref(), Some(&b"z/c"[..]));
        // Handed out again under another name (renamed on the host).
        n.handed_out(12, 5, b"d");
        assert_eq!(n.path(12).as_deref(), Some(&b"a/d"[..]));
        // A forgotten ancestor: no path for what was below it.
        n.forgot(5);
        assert_eq!(n.path(12), None);
        assert_eq!(n.path(9).as_deref(), Some(&b"z"[..]));
        // Only tracked nodes move.
        n.moved(77, ROOT_ID, b"x");
        assert_eq!(n.path(77), None);
        assert_eq!(n.len(), 2);
    }

    #[test]
    fn a_parent_cycle_gives_no_path() {
        let n = DirNames::default();
        n.handed_out(5, 6, b"a");
        n.handed_out(6, 5, b"b");
        assert_eq!(n.path(5), None);
    }

    #[test]
    fn dot_names_are_not_places() {
        let n = DirNames::default();
        n.handed_out(5, ROOT_ID, b"a");
        n.handed_out(9, 5, b"b");
        // LOOKUP of `..` in 9 hands out 5; of `.` in 9 hands out 9.
        n.handed_out(5, 9, b"..");
        n.handed_out(9, 9, b".");
        assert_eq!(n.path(9).as_deref(), Some(&b"a/b"[..]));
    }

    #[test]
    fn listing_again_moves_the_due_time_and_queues_once() {
        let r = Refresher::default();
        // Not started: nothing queued.
        r.listed(7);
        assert!(r.shared.q.lock().due.is_empty());
        r.started.store(true, Ordering::Relaxed);
        r.listed(7);
        let first = r.shared.q.lock().due[&7];
        std::thread::sleep(Duration::from_millis(2));
        r.listed(7);
        let q = r.shared.q.lock();
        assert_eq!(q.due.len(), 1);
        assert!(q.due[&7] > first);
        assert_eq!(r.counters.queued.load(Ordering::Relaxed), 2);
    }
}
