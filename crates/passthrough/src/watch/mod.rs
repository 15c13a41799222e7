//! The host-change watcher: changes made to the source by anyone but this
//! server, reported to the front end (`uvfs_vfs::ChangeSink`) so that the
//! kernel forgets exactly what changed.
//!
//! # Why
//! The kernel caches a FUSE mount's names and attributes for as long as
//! the server allows. A passthrough's source changes on the host too, so
//! without a watcher a short timeout (a second) is the price of
//! coherence, and every name of a warm walk costs a LOOKUP. With every
//! host change reported, the timeouts can be long: a warm walk asks
//! nothing, and a change still shows within the watcher's latency.
//!
//! # What costs what
//! One fanotify group marks the source's whole file system
//! (`fanotify.rs`); events name files by handle, read as inode numbers
//! (`layout.rs`), which are node ids (`inodes.rs`). An event about a file
//! the kernel does not hold, in a directory it does not hold, costs a
//! table probe and nothing else: no syscall, no allocation (in a directory
//! it holds, a lookup there may be racing the change:
//! `ChangeSink::changed_through`). Events made by this process are the
//! mount's own changes, which the kernel already knows of.
//!
//! # What it cannot see
//! Files on other file systems mounted inside the source: their nodes get
//! the short timeout ([`Watch::cache_limit`]); the mounts themselves, as
//! they come and go, are read from the mount table (`mounts.rs`). Writes
//! through a shared mapping (no event): the front end answers the
//! attributes of a file the kernel writes on its source file with no
//! timeout while it may be mapped, which it learns from the
//! `FAN_CLOSE_WRITE` that the end of each of the kernel's own files of
//! the source makes, at the last `munmap` if a mapping outlived the
//! close (reported as `ChangeSink::closed_for_writing`). A lost event
//! (queue overflow, an error) reports everything changed and, if the
//! watcher stops, every node falls back to the short timeout.

mod fanotify;
mod layout;
mod mounts;

use crate::inodes::InodeMap;
use crate::sys;
use fanotify::{Event, Events, Fid, Group};
use layout::Layout;
use mounts::MountTable;
use parking_lot::Mutex;
use rustix::event::{PollFd, PollFlags, Timespec};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_vfs::{ChangeSink, Ino, Mount, VnodeLayer, WatchStatus};

/// How long a stopped watcher's or an unwatched file's attributes and
/// names may be cached: the timeout a passthrough has without a watcher.
pub const UNWATCHED_TIMEOUT: Duration = Duration::from_secs(1);

/// Bytes read from the group at once (many events per read).
const READ_BUF: usize = 64 << 10;

/// How often a waiting watcher looks whether it should stop.
const POLL_MS: i64 = 200;

/// How long events gather after a wake-up before the next read, while
/// they come as a stream ([`Pace`]); bounds the latency the watcher adds
/// to a change that follows others in a stream.
const GATHER: Duration = Duration::from_millis(1);

/// Events within [`STREAM_WINDOW`] that make a stream (20,000 a second):
/// an unpack or a copy on the host, where a wake-up per event would cost
/// more than the events. Below it each wake-up reads what is there and
/// the watcher waits for the next event at once.
const STREAM_EVENTS: usize = 200;
const STREAM_WINDOW: Duration = Duration::from_millis(10);

/// How much the watcher's thread is preferred over the time-sharing
/// threads it shares the cores with (a nice value): on busy cores a
/// thread of the default nice that wakes behind request threads waits
/// for one to use up its slice.
const WATCH_NICE: i32 = -10;

/// How often the cached fds of files on other file systems mounted inside
/// the source are given back if unused since the last time
/// (`FdPool::evict_idle_off`): an idle one kept the host from unmounting
/// such a file system.
const FOREIGN_IDLE: Duration = Duration::from_millis(250);

/// Entries of the source sampled to learn its handles' layout.
const SAMPLES: usize = 64;

/// No process (fanotify reports pid 0 for kernel threads, -1 never).
const NO_PID: i32 = -1;

/// A passthrough's watcher, or why it has none.
pub(crate) struct Watch {
    shared: Option<Arc<Shared>>,
    why_not: Option<String>,
}

struct Shared {
    group: Group,
    layout: Layout,
    /// The watched file system (the source root's device).
    dev: u64,
    /// The source root's inode number.
    root_ino: u64,
    layer: Arc<VnodeLayer>,
    mnt: Arc<Mount>,
    inodes: Arc<InodeMap>,
    pool: Arc<crate::fdpool::FdPool>,
    /// This process: its changes are the mount's own.
    pid: i32,
    /// A live upgrade's successor, from its start until the upgrade
    /// fails (`NO_PID` otherwise): its changes are the mount's own too.
    /// This watcher reads on past the hand-over, to pass on host changes
    /// made before the successor's watcher started (`WATCHER_DRAIN` in
    /// the FUSE server); taken for a host's, the successor's first
    /// `mkdir`s were invalidated in the kernel behind it, and a program
    /// whose working directory was one of them found `getcwd` failing.
    successor: AtomicI32,
    /// The mountpoints under the source, taken by the thread at its
    /// start (`None` where the table cannot be read).
    mounts: Mutex<Option<MountTable>>,
    /// Reading events now (cleared when the thread stops).
    running: AtomicBool,
    stop: AtomicBool,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    events: AtomicU64,
    ignored: AtomicU64,
    own: AtomicU64,
    invalidations: AtomicU64,
    overflows: AtomicU64,
}

impl Watch {
    /// No watcher, for `why`.
    pub(crate) fn off(why: impl Into<String>) -> Watch {
        Watch {
            shared: None,
            why_not: Some(why.into()),
        }
    }

    /// A watcher of the file system the source root `root_fd` (an
    /// `O_PATH` fd of root inode `root_ino` on `dev`) is on, ready to
    /// start reporting ([`Watch::start`]). Off, with the reason, where the
    /// kernel refuses the group or the mark (not root, a file system
    /// without fanotify file handles) or the handles cannot be read.
    pub(crate) fn new(
        root_fd: BorrowedFd<'_>,
        dev: u64,
        root_ino: u64,
        layer: Arc<VnodeLayer>,
        mnt: Arc<Mount>,
        inodes: Arc<InodeMap>,
        pool: Arc<crate::fdpool::FdPool>,
    ) -> Watch {
        let (group, layout) = match setup(root_fd, root_ino) {
            Ok(s) => s,
            Err(why) => return Watch::off(why),
        };
        let source = std::fs::read_link(std::ffi::OsStr::from_bytes(
            sys::proc_path(root_fd).as_bytes(),
        ));
        let mounts = source.ok().and_then(MountTable::new);
        if mounts.is_none() {
            log::warn!(
                "file systems mounted on the host inside the source show only when their \
                 names expire: the mount table cannot be read"
            );
        }
        Watch {
            shared: Some(Arc::new(Shared {
                group,
                layout,
                dev,
                root_ino,
                layer,
                mnt,
                inodes,
                pool,
                pid: rustix::process::getpid().as_raw_nonzero().get(),
                successor: AtomicI32::new(NO_PID),
                mounts: Mutex::new(mounts),
                running: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                counters: Counters::default(),
            })),
            why_not: None,
        }
    }

    /// Whether the watcher is set up (it reports once started).
    pub(crate) fn enabled(&self) -> bool {
        self.shared.is_some()
    }

    /// Starts reporting to `sink` on a thread of its own (once).
    pub(crate) fn start(&self, sink: Arc<dyn ChangeSink>) {
        let Some(sh) = &self.shared else { return };
        if sh.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let sh2 = sh.clone();
        let spawned = std::thread::Builder::new()
            .name("uvfs-watch".into())
            .spawn(move || run(&sh2, &*sink));
        if spawned.is_err() {
            sh.running.store(false, Ordering::SeqCst);
        }
    }

    /// A live upgrade's successor `pid` runs (`None`: no more).
    pub(crate) fn successor_running(&self, pid: Option<u32>) {
        if let Some(sh) = &self.shared {
            let pid = pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(NO_PID);
            sh.successor.store(pid, Ordering::SeqCst);
        }
    }

    /// The longest a node on `dev` may be cached: `None` (the front end's
    /// own timeouts) while every change of it is reported.
    pub(crate) fn cache_limit(&self, dev: u64) -> Option<Duration> {
        match &self.shared {
            Some(sh) if sh.dev == dev && sh.running.load(Ordering::Relaxed) => None,
            _ => Some(UNWATCHED_TIMEOUT),
        }
    }

    /// For statistics and the log.
    pub(crate) fn status(&self) -> WatchStatus {
        let Some(sh) = &self.shared else {
            return WatchStatus {
                why_not: self.why_not.clone(),
                ..WatchStatus::default()
            };
        };
        let c = &sh.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let running = sh.running.load(Ordering::Relaxed);
        WatchStatus {
            active: running,
            why_not: (!running).then(|| "the watcher is not running".to_string()),
            events: ld(&c.events),
            ignored: ld(&c.ignored),
            own: ld(&c.own),
            invalidations: ld(&c.invalidations),
            overflows: ld(&c.overflows),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(sh) = &self.shared {
            sh.stop.store(true, Ordering::SeqCst);
        }
    }
}

/// A group marked on the file system of the source root `root_fd` (inode
/// `root_ino`), and the layout of its handles; or why there is none.
pub(crate) fn setup(root_fd: BorrowedFd<'_>, root_ino: u64) -> Result<(Group, Layout), String> {
    let path = sys::proc_path(root_fd);
    let group = Group::new(&path).map_err(|e| {
        format!(
            "host changes are not watched: fanotify refused the source's file system ({e:?}; \
             it needs CAP_SYS_ADMIN and a file system that reports file handles, not NFS or FUSE)"
        )
    })?;
    let layout = learn_layout(root_fd, root_ino).ok_or_else(|| {
        "host changes are not watched: the source file system's file handles do not show \
         inode numbers where they could be read"
            .to_string()
    })?;
    Ok((group, layout))
}

/// The layout of the source file system's handles, from its root and up
/// to [`SAMPLES`] of the root's entries.
fn learn_layout(root_fd: BorrowedFd<'_>, root_ino: u64) -> Option<Layout> {
    let mut samples: Vec<(i32, Vec<u8>, u64)> = Vec::new();
    if let Ok(h) = crate::handle::Handle::of_fd(root_fd) {
        samples.push((h.htype(), h.bytes().to_vec(), root_ino));
    }
    let dir = sys::openat(root_fd, c".", libc::O_RDONLY | libc::O_DIRECTORY).ok();
    if let Some(dir) = dir {
        let mut buf = vec![0u8; 16 << 10];
        let n = sys::getdents(dir.as_fd(), &mut buf).unwrap_or(0);
        for e in sys::dirents(&buf[..n]).take(SAMPLES) {
            if uvfs_vfs::is_dot_or_dotdot(e.name) {
                continue;
            }
            let Ok(name) = sys::cstr(e.name) else {
                continue;
            };
            let Ok(st) = sys::statx_at(dir.as_fd(), &name, rustix::fs::AtFlags::empty()) else {
                continue;
            };
            if let Ok(h) = crate::handle::Handle::of_name(dir.as_fd(), &name) {
                samples.push((h.htype(), h.bytes().to_vec(), st.stx_ino));
            }
        }
    }
    Layout::learn(samples.iter().map(|(t, b, i)| (*t, &b[..], *i)))
}

/// Whether events come as a stream: counted over windows of
/// [`STREAM_WINDOW`]; a stream once a window holds [`STREAM_EVENTS`],
/// until a whole window holds fewer.
#[derive(Debug)]
struct Pace {
    since: Instant,
    events: usize,
    stream: bool,
}

impl Pace {
    fn new(now: Instant) -> Pace {
        Pace {
            since: now,
            events: 0,
            stream: false,
        }
    }

    /// Counts `n` events read at `now`; whether they are part of a
    /// stream.
    fn note(&mut self, n: usize, now: Instant) -> bool {
        self.events += n;
        if now.saturating_duration_since(self.since) >= STREAM_WINDOW {
            self.stream = self.events >= STREAM_EVENTS;
            self.since = now;
            self.events = 0;
        } else if self.events >= STREAM_EVENTS {
            self.stream = true;
        }
        self.stream
    }
}

/// Prefers the calling thread over time-sharing threads ([`WATCH_NICE`]);
/// nothing where the process may not (the watcher runs as root, which
/// may).
fn prefer_this_thread() {
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), WATCH_NICE);
}

fn run(sh: &Shared, sink: &dyn ChangeSink) {
    prefer_this_thread();
    let mut buf = vec![0u8; READ_BUF];
    let mut pace = Pace::new(Instant::now());
    let mut mounts = sh.mounts.lock().take();
    let mut swept = Instant::now();
    while !sh.stop.load(Ordering::SeqCst) {
        // (Nothing to do while no file of another file system was seen.)
        if swept.elapsed() >= FOREIGN_IDLE && sh.inodes.foreign_count() > 0 {
            sh.pool.evict_idle_off(sh.dev);
            swept = Instant::now();
        }
        let group = sh.group.fd();
        // The mount table second, where it can be read.
        let mut pfd = [
            PollFd::new(&group, PollFlags::IN),
            match &mounts {
                Some(t) => PollFd::new(t.file(), PollFlags::PRI),
                None => PollFd::new(&group, PollFlags::empty()),
            },
        ];
        let polled = if mounts.is_some() { 2 } else { 1 };
        let timeout = Timespec {
            tv_sec: POLL_MS / 1000,
            tv_nsec: (POLL_MS % 1000) * 1_000_000,
        };
        if let Err(e) = rustix::event::poll(&mut pfd[..polled], Some(&timeout)) {
            if e != rustix::io::Errno::INTR {
                break;
            }
        }
        let remounted = polled == 2 && pfd[1].revents().intersects(PollFlags::PRI | PollFlags::ERR);
        if remounted {
            if let Some(t) = &mut mounts {
                sh.mounts_changed(t, sink);
            }
        }
        // Each read's events are reported as they come: on a busy file
        // system the queue may never run dry.
        let mut events = 0;
        loop {
            match sh.group.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    events += sh.batch(&buf[..n], sink);
                    sink.batch_done();
                }
                Err(uvfs_vfs::Errno::EINTR) => continue,
                Err(_) => {
                    sh.running.store(false, Ordering::SeqCst);
                    sink.everything_changed();
                    return;
                }
            }
        }
        // In a stream of events (an unpack on the host) let them gather
        // for a moment, so that they are read in large reads instead of a
        // wake-up per event, which costs far more than the event itself.
        // The events read were reported at once; only those after them
        // wait, at most GATHER. Outside a stream nothing waits: a change
        // that follows another by less than GATHER (two programs, or a
        // build's writes beside a user's change) is reported as soon as
        // it is made.
        if events > 0 && pace.note(events, Instant::now()) {
            std::thread::sleep(GATHER);
        }
    }
    sh.running.store(false, Ordering::SeqCst);
}

impl Shared {
    /// The mount table changed (anywhere in this mount namespace): each
    /// mountpoint under the source that came or went is a changed name in
    /// its parent directory, if the kernel holds that directory.
    fn mounts_changed(&self, table: &mut MountTable, sink: &dyn ChangeSink) {
        if let Some(path) = self.source_path() {
            if !self.is_source_root(&path) {
                // The source's file system was detached (`umount -l`) or
                // the source removed: its descriptor reads back as a path
                // that leads elsewhere ("/" for a detached mount), and
                // every host mount under that would be taken for one in
                // the source. Nothing on the host lies inside it now.
                let _ = table.changed();
                if table.lose_source() {
                    log::warn!(
                        "the source is no longer reachable on the host (its file system \
                         unmounted or the directory removed): the mount serves what it holds"
                    );
                }
                return;
            }
            table.set_source(path);
        }
        let changed = table.changed();
        for (rel, came) in &changed {
            let (parent, name) = mounts::parent_and_name(rel);
            log::info!(
                "a file system was {} {} in the source on the host: its name is looked up again",
                if *came {
                    "mounted on"
                } else {
                    "unmounted from"
                },
                String::from_utf8_lossy(rel)
            );
            let Ok(st) = rustix::fs::statx(
                rustix::fs::CWD,
                table.source().join(parent),
                rustix::fs::AtFlags::empty(),
                rustix::fs::StatxFlags::INO,
            ) else {
                continue;
            };
            let Some(dir) = self.inodes.known_id(sys::stx_dev(&st), st.stx_ino) else {
                continue;
            };
            if self.layer.ext_count_of(&self.mnt, dir) > 0 {
                self.counters.invalidations.fetch_add(1, Ordering::Relaxed);
                sink.entry_changed(dir, name);
            }
        }
        if !changed.is_empty() {
            sink.batch_done();
        }
    }

    /// Whether `path` leads to the source root.
    fn is_source_root(&self, path: &std::path::Path) -> bool {
        rustix::fs::statx(
            rustix::fs::CWD,
            path,
            rustix::fs::AtFlags::empty(),
            rustix::fs::StatxFlags::INO,
        )
        .is_ok_and(|st| (sys::stx_dev(&st), st.stx_ino) == (self.dev, self.root_ino))
    }

    /// Where the source root is now (the host may have moved it since the
    /// mount), from the root node's descriptor.
    fn source_path(&self) -> Option<std::path::PathBuf> {
        let id = self.inodes.known_id(self.dev, self.root_ino)?;
        let root = self.layer.lookup_cached(&self.mnt, id)?;
        let node = root.data_arc::<crate::node::Node>()?;
        let fd = node.cached_fd()?;
        let proc = sys::proc_path(fd.as_fd());
        std::fs::read_link(std::ffi::OsStr::from_bytes(proc.as_bytes())).ok()
    }

    /// The events of one read; how many there were.
    fn batch(&self, buf: &[u8], sink: &dyn ChangeSink) -> usize {
        let mut events = Events::new(buf);
        let mut lost = false;
        let mut n = 0;
        for ev in events.by_ref() {
            n += 1;
            lost |= !self.event(&ev, sink);
        }
        if lost || events.malformed {
            let n = self.counters.overflows.fetch_add(1, Ordering::Relaxed) + 1;
            // Said, as a host's burst that outran the watcher costs the
            // mount every cached name: at the first time and then at
            // each power of two.
            if n.is_power_of_two() {
                log::warn!(
                    "host-change watcher: events lost ({n} times so far: the host changed \
                     files faster than they were read); the kernel forgets every cached name \
                     and attribute of the mount"
                );
            }
            sink.everything_changed();
        }
        n
    }

    /// Reports one event; false if it could not be read (the caller then
    /// reports everything changed).
    fn event(&self, ev: &Event<'_>, sink: &dyn ChangeSink) -> bool {
        let c = &self.counters;
        if ev.mask & libc::FAN_Q_OVERFLOW != 0 {
            return false;
        }
        c.events.fetch_add(1, Ordering::Relaxed);
        if ev.pid == self.pid || ev.pid == self.successor.load(Ordering::SeqCst) {
            c.own.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if ev.mask & fanotify::DIRENT != 0 {
            let Some((dir, name)) = ev.dir else {
                return false;
            };
            let dir_arrived = ev.mask & (libc::FAN_CREATE | libc::FAN_MOVED_TO) != 0
                && ev.mask & libc::FAN_ONDIR != 0;
            return self.each_held(dir, |id, _| {
                sink.entry_changed(id, name);
                if dir_arrived {
                    sink.dir_arrived(id, name);
                }
            });
        }
        let Some(obj) = ev.obj.or(ev.dir.map(|d| d.0)) else {
            return false;
        };
        if ev.mask & (libc::FAN_ATTRIB | libc::FAN_DELETE_SELF) != 0 {
            self.drop_deleted(obj);
        }
        let data = ev.mask & fanotify::DATA != 0;
        let closed = ev.mask & libc::FAN_CLOSE_WRITE != 0;
        let known = self.each_held(obj, |id, sure| {
            // Counted against backing files only where the handle names
            // one inode: a close told of the wrong file could end the
            // right one's uncached attributes early (`closed_for_writing`).
            if closed && sure {
                sink.closed_for_writing(id);
            }
            sink.inode_changed(id, data)
        });
        if let (Some(obj), Some((dir, _))) = (ev.obj, ev.dir) {
            self.through_held_dir(dir, obj, data, sink);
        }
        known
    }

    /// Reports `obj`, changed through a name in `dir`, if the kernel holds
    /// `dir` ([`ChangeSink::changed_through`]), whether or not it holds
    /// `obj`: a LOOKUP in `dir` may have read the file before the change
    /// and hand it to the kernel after `each_held` found it not held (or
    /// held by the server's count while the kernel had no inode for it
    /// yet). Reported so, a host writing a file just as a reader first
    /// looked it up left the reader its size from before the write for
    /// the whole attribute timeout.
    fn through_held_dir(&self, dir: Fid<'_>, obj: Fid<'_>, data: bool, sink: &dyn ChangeSink) {
        let objs = self.layout.inos(obj.htype, obj.bytes);
        for d in self.layout.inos(dir.htype, dir.bytes) {
            let Some(dir_id) = self.inodes.known_id(self.dev, d) else {
                continue;
            };
            if self.layer.ext_count_of(&self.mnt, dir_id) == 0 {
                continue;
            }
            for &ino in &objs {
                if let Some(id) = self.inodes.known_id(self.dev, ino) {
                    sink.changed_through(dir_id, id, data);
                }
            }
        }
    }

    /// A file removed on the host (its link count's change comes as
    /// `FAN_ATTRIB`) gives back the descriptor its cached node keeps,
    /// held by the kernel or not, unless it is open through the mount:
    /// an idle `O_PATH` descriptor pins the deleted file, its blocks and
    /// its inode (a host's `rm` of a file the mount had read freed no
    /// space while the mount was up).
    fn drop_deleted(&self, fid: Fid<'_>) {
        for ino in self.layout.inos(fid.htype, fid.bytes) {
            let Some(id) = self.inodes.known_id(self.dev, ino) else {
                continue;
            };
            let Some(vp) = self.layer.lookup_cached(&self.mnt, id) else {
                continue;
            };
            let Some(node) = vp.data_arc::<crate::node::Node>() else {
                continue;
            };
            let gone = node.ino == ino
                && node.dev() == self.dev
                && node.open_count() == 0
                && node
                    .cached_fd()
                    .is_some_and(|fd| sys::statx_fd(fd.as_fd()).is_ok_and(|st| st.stx_nlink == 0));
            if gone {
                node.uncache_unlinked();
            }
        }
    }

    /// Runs `f` for the node of `fid` if the kernel holds it (for each
    /// candidate number while the layout is ambiguous; `f`'s second
    /// argument says whether the handle named only this one). False if
    /// the handle's kind is unknown.
    fn each_held(&self, fid: Fid<'_>, mut f: impl FnMut(Ino, bool)) -> bool {
        let inos = self.layout.inos(fid.htype, fid.bytes);
        if inos.is_empty() {
            return false;
        }
        let sure = inos.len() == 1;
        let mut held = false;
        for ino in inos {
            let Some(id) = self.inodes.known_id(self.dev, ino) else {
                continue;
            };
            if self.layer.ext_count_of(&self.mnt, id) > 0 {
                held = true;
                self.counters.invalidations.fetch_add(1, Ordering::Relaxed);
                f(id, sure);
            }
        }
        if !held {
            self.counters.ignored.fetch_add(1, Ordering::Relaxed);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stream_of_events_gathers() {
        let t0 = Instant::now();
        let mut p = Pace::new(t0);
        // Changes now and then (two programs, a user beside a build):
        // each is read as it comes.
        for i in 0..50u32 {
            assert!(!p.note(3, t0 + Duration::from_micros(300) * i));
        }
        // A stream: once a window holds STREAM_EVENTS, reads gather.
        let t1 = t0 + STREAM_WINDOW * 3;
        assert!(!p.note(1, t1));
        assert!(!p.note(STREAM_EVENTS - 1, t1 + Duration::from_millis(1)));
        assert!(p.note(1, t1 + Duration::from_millis(2)));
        // It lasts while whole windows hold a stream's worth...
        let t2 = t1 + STREAM_WINDOW;
        assert!(p.note(1, t2));
        assert!(p.note(STREAM_EVENTS, t2 + Duration::from_millis(5)));
        // ...and ends after a window with fewer.
        let t3 = t2 + STREAM_WINDOW;
        assert!(p.note(1, t3));
        assert!(!p.note(1, t3 + STREAM_WINDOW));
    }
}
