//! Kernel I/O on backing files (FUSE passthrough, Linux 6.9+): the kernel
//! reads, writes and maps an open file's backing file itself, so data
//! never crosses /dev/fuse and is cached once (in the backing file
//! system's page cache, not in this mount's as well).
//!
//! The kernel sets the rules this module keeps, per FUSE inode (node id):
//! every open of a node that has a backing file must name the *same*
//! backing id, and a node may not be open both ways (through the kernel's
//! own page cache and on a backing file) at once; an open that breaks
//! either fails with EIO in the caller's `open(2)`. So each node open at
//! least once has a [`Mode`], fixed by its first open and kept until its
//! last RELEASE, and every further open follows it. The backing id is
//! registered (FUSE_DEV_IOC_BACKING_OPEN) at the first open and closed when
//! the last RELEASE drops it: the kernel looks the id up while it finishes
//! each open, after our reply, so an id closed at reply time could fail the
//! open it was made for.
//!
//! Our count of a node's opens never falls below the kernel's: the kernel
//! leaves the node's I/O mode before it sends RELEASE, and counts an open
//! only after our reply, which follows our count. So a node whose count
//! reaches 0 here is closed in the kernel too, and may change modes.

use crate::report::{Counted, Report};
use fuser::BackingId;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How a node's open files are served while it is open. `Id` is the
/// registration (its drop closes it); generic so tests can count them.
pub enum Mode<Id = BackingId> {
    /// The kernel does reads, writes and mappings on the backing file.
    Kernel(Arc<Id>),
    /// Through the server (READ and WRITE requests): the file system has
    /// no backing file for it, or the kernel would not take it.
    Server,
}

impl<Id> Clone for Mode<Id> {
    fn clone(&self) -> Self {
        match self {
            Mode::Kernel(id) => Mode::Kernel(id.clone()),
            Mode::Server => Mode::Server,
        }
    }
}

struct Entry<Id> {
    mode: Mode<Id>,
    opens: u64,
}

/// Per-node I/O modes and backing ids of open files.
pub struct Backings<Id = BackingId> {
    /// Kernel I/O asked for (`ServeConfig::kernel_io`).
    pub wanted: AtomicBool,
    /// The kernel agreed (FUSE_PASSTHROUGH in INIT) and nothing since
    /// showed that this server may not register backing files.
    pub on: AtomicBool,
    nodes: Mutex<HashMap<u64, Entry<Id>>>,
    /// Backing files registered (first opens served by the kernel).
    pub registered: AtomicU64,
    /// Opens answered with a backing id.
    pub kernel_opens: AtomicU64,
    /// Registrations the kernel refused (the node is then served by the
    /// server until its last RELEASE).
    pub refused: AtomicU64,
    /// Nodes open for writing on their backing file, see [`Writers`].
    pub writers: Writers,
}

impl<Id> Default for Backings<Id> {
    fn default() -> Self {
        Backings {
            wanted: AtomicBool::new(false),
            on: AtomicBool::new(false),
            nodes: Mutex::new(HashMap::new()),
            registered: AtomicU64::new(0),
            kernel_opens: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            writers: Writers::default(),
        }
    }
}

impl<Id> Backings<Id> {
    /// Counts an open of `node` and returns how it is to be served.
    /// `register` is called only for a node not open now, to register its
    /// backing file (None: the file system has none for it); it runs under
    /// this table's lock, so two first opens of one node cannot register
    /// two different ids.
    pub fn attach(
        &self,
        node: u64,
        register: impl FnOnce() -> Option<std::io::Result<Id>>,
    ) -> Mode<Id> {
        let mut nodes = self.nodes.lock();
        if let Some(e) = nodes.get_mut(&node) {
            e.opens += 1;
            if matches!(e.mode, Mode::Kernel(_)) {
                self.kernel_opens.fetch_add(1, Ordering::Relaxed);
            }
            return e.mode.clone();
        }
        let mode = match register() {
            Some(Ok(id)) => {
                self.registered.fetch_add(1, Ordering::Relaxed);
                self.kernel_opens.fetch_add(1, Ordering::Relaxed);
                Mode::Kernel(Arc::new(id))
            }
            Some(Err(e)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                // Without CAP_SYS_ADMIN no registration can succeed: stop
                // asking (one ioctl per first open saved).
                if e.raw_os_error() == Some(libc::EPERM) && self.on.swap(false, Ordering::Relaxed) {
                    log::warn!(
                        "kernel I/O on source files off: the kernel refused backing files \
                         (EPERM: the server lacks CAP_SYS_ADMIN); reads and writes go \
                         through the server"
                    );
                }
                Mode::Server
            }
            None => Mode::Server,
        };
        nodes.insert(
            node,
            Entry {
                mode: mode.clone(),
                opens: 1,
            },
        );
        mode
    }

    /// Undoes one `attach` of `node` (its RELEASE). The last one forgets
    /// the node's mode and drops its backing id, which closes it once the
    /// reply holding a clone is sent.
    pub fn detach(&self, node: u64) {
        let mut nodes = self.nodes.lock();
        let last = match nodes.get_mut(&node) {
            Some(e) => {
                e.opens -= 1;
                e.opens == 0
            }
            None => false,
        };
        if last {
            let e = nodes.remove(&node);
            drop(nodes);
            drop(e);
        }
    }

    /// Whether an open may be served by the kernel at all now.
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Nodes open now, and of those served by the kernel.
    pub fn open_nodes(&self) -> (u64, u64) {
        let nodes = self.nodes.lock();
        let kernel = nodes
            .values()
            .filter(|e| matches!(e.mode, Mode::Kernel(_)))
            .count();
        (nodes.len() as u64, kernel as u64)
    }

    /// Forgets every node (the session ended; ids die with the channel).
    pub fn clear(&self) {
        let all: Vec<Entry<Id>> = self.nodes.lock().drain().map(|(_, e)| e).collect();
        drop(all);
        self.writers.clear();
    }
}

impl<Id> Backings<Id> {
    /// Takes over a node's mode and opens from the server this one
    /// replaces (a live upgrade, `upgrade/`).
    pub(crate) fn import(&self, node: u64, mode: Mode<Id>, opens: u64) {
        if opens > 0 {
            self.nodes.lock().insert(node, Entry { mode, opens });
        }
    }
}

impl Backings<BackingId> {
    /// Every open node's mode (its backing id, if the kernel does its
    /// I/O) and opens, for a successor (`upgrade/`).
    pub(crate) fn export(&self) -> Vec<(u64, Option<u32>, u64)> {
        self.nodes
            .lock()
            .iter()
            .map(|(n, e)| {
                let id = match &e.mode {
                    Mode::Kernel(id) => Some(id.raw()),
                    Mode::Server => None,
                };
                (*n, id, e.opens)
            })
            .collect()
    }

    /// Leaves every backing id registered when this server goes: its
    /// successor answers opens with them and closes them at the last
    /// RELEASE (a live upgrade). Dropped ids would unregister them.
    pub(crate) fn keep_ids_open(&self) {
        for e in self.nodes.lock().values() {
            if let Mode::Kernel(id) = &e.mode {
                std::mem::forget(id.clone());
            }
        }
    }
}

/// Nodes the kernel may be writing on their backing files, whose
/// attributes it must not cache.
///
/// A write through a shared mapping of such a file dirties the backing
/// file's pages directly: the backing file system moves its mtime and
/// ctime, and neither this server nor the FUSE inode hears of it
/// (fanotify reports no event for a mapped write; `write(2)` through the
/// mount does update the FUSE inode). So while a node may be written so,
/// its attributes are answered with a zero timeout and each `stat` asks
/// the backing file; the first writable open drops what the kernel cached
/// before.
///
/// A mapping outlives the open it was made from: the kernel opens a
/// backing file of its own for each open of the node (holding the FUSE
/// file's path, so the node is not forgotten while it lives), and a
/// mapping holds that file past the RELEASE. Its end (the last `munmap`,
/// or the close if nothing mapped it) reports `FAN_CLOSE_WRITE` on the
/// source file, with the pid of whoever ended it, never this server's.
/// So a node is written from its first writable open until both its
/// writable opens are all released and as many closes for writing have
/// been reported as it had such opens ([`Writers::backing_closed`]),
/// whichever order the RELEASE and the report come in; or until the
/// kernel forgets the node, which no backing file of it outlives.
///
/// The count errs towards no caching, but for one case: fanotify merges
/// two events of one process about one file while the first is unread
/// (two closes counted as one), and a lost event is never counted; such
/// a node stays uncached until the kernel forgets it. A close by a host
/// program that opened the source file itself, told while a mapping made
/// through the mount is live, is counted as the mapping's: the mapping's
/// later writes then show at the watcher's next report of the file, or
/// when its attributes expire.
#[derive(Default)]
pub struct Writers {
    /// Nodes in `map`, read without the lock: zero on the hot path of
    /// every attribute reply of a mount where nothing is written.
    nodes: AtomicU64,
    map: Mutex<HashMap<u64, Written>>,
    /// Closes of backing files counted ([`Writers::backing_closed`]).
    pub closes_seen: AtomicU64,
}

#[derive(Default, Clone, Copy)]
struct Written {
    /// Writable opens not yet released.
    opens: u64,
    /// Backing files opened for writing whose close was not yet told.
    files: u64,
}

impl Writers {
    /// Counts a writable open of `node`; true if the node was not written
    /// until now. `told`: the file system reports the backing file's
    /// close (its watcher runs); else only the open is counted, and the
    /// attributes of a mapping that outlives it may be stale for their
    /// (short) timeout, as any host change.
    pub fn opened(&self, node: u64, told: bool) -> bool {
        let mut m = self.map.lock();
        let w = m.entry(node).or_default();
        let first = w.opens == 0 && w.files == 0;
        w.opens += 1;
        w.files += u64::from(told);
        if first {
            self.nodes.fetch_add(1, Ordering::SeqCst);
        }
        first
    }

    /// Undoes the open part of one [`Writers::opened`] of `node` (its
    /// RELEASE).
    pub fn closed(&self, node: u64) {
        self.update(node, |w| w.opens = w.opens.saturating_sub(1));
    }

    /// The source file of `node` was closed for writing by a process
    /// other than this server; counted against `node`'s backing files.
    pub fn backing_closed(&self, node: u64) {
        if self.nodes.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.update(node, |w| {
            if w.files > 0 {
                w.files -= 1;
                self.closes_seen.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// The kernel forgot `node`: no backing file of it is left.
    pub fn forgotten(&self, node: u64) {
        if self.nodes.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.update(node, |w| *w = Written::default());
    }

    /// Applies `f` to `node`'s entry, if any, and drops the entry once
    /// nothing is left to wait for.
    fn update(&self, node: u64, f: impl FnOnce(&mut Written)) {
        let mut m = self.map.lock();
        if let Some(w) = m.get_mut(&node) {
            f(w);
            if w.opens == 0 && w.files == 0 {
                m.remove(&node);
                self.nodes.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Whether the kernel may be writing `node`'s backing file.
    pub fn writing(&self, node: u64) -> bool {
        self.nodes.load(Ordering::SeqCst) != 0 && self.map.lock().contains_key(&node)
    }

    /// Nodes written now.
    pub fn count(&self) -> u64 {
        self.nodes.load(Ordering::SeqCst)
    }

    /// Every written node's backing files whose close was not yet told,
    /// for a successor (`upgrade/`), which counts the opens itself from
    /// the open files it takes over.
    pub(crate) fn export(&self) -> Vec<(u64, u64)> {
        self.map
            .lock()
            .iter()
            .filter(|(_, w)| w.files > 0)
            .map(|(n, w)| (*n, w.files))
            .collect()
    }

    /// Takes over `files` backing files of `node` whose close was not yet
    /// told (see [`Writers::export`]).
    pub(crate) fn import(&self, node: u64, files: u64) {
        if files == 0 {
            return;
        }
        let mut m = self.map.lock();
        let w = m.entry(node).or_default();
        if w.opens == 0 && w.files == 0 {
            self.nodes.fetch_add(1, Ordering::SeqCst);
        }
        w.files += files;
    }

    /// Forgets every node (the session ended).
    pub fn clear(&self) {
        self.map.lock().clear();
        self.nodes.store(0, Ordering::SeqCst);
    }
}

impl<Id> Counted for Backings<Id> {
    fn report(&self, out: &mut Report) {
        let (open_nodes, kernel_nodes) = self.open_nodes();
        out.put(
            "fuse.kernel_io",
            u64::from(self.enabled()),
            "1: the kernel reads, writes and maps open files on their backing files itself (FUSE passthrough)",
        );
        for (name, v, d) in [
            ("fuse.kernel_io.registered", &self.registered, "Backing files registered with the kernel (a file's first open)"),
            ("fuse.kernel_io.opens", &self.kernel_opens, "Opens whose reads and writes the kernel does on the backing file"),
            ("fuse.kernel_io.refused", &self.refused, "Backing files the kernel would not take (the file is served by the server until its last close)"),
        ] {
            out.put(name, v.load(Ordering::Relaxed), d);
        }
        out.put(
            "fuse.kernel_io.open_files",
            kernel_nodes,
            "Files open now with a registered backing file",
        );
        out.put(
            "fuse.kernel_io.written_files",
            self.writers.count(),
            "Files whose attributes are not cached now: open for writing with kernel I/O, or a backing file of them (a mapping) not yet closed",
        );
        out.put(
            "fuse.kernel_io.closes_seen",
            self.writers.closes_seen.load(Ordering::Relaxed),
            "Closes of backing files opened for writing, as the watcher reported them (the last munmap of a mapping that outlived its file)",
        );
        out.put(
            "fuse.kernel_io.open_files_server",
            open_nodes - kernel_nodes,
            "Files open now whose I/O comes to the server although kernel I/O is on",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(errno: i32) -> Option<std::io::Result<Fake>> {
        Some(Err(std::io::Error::from_raw_os_error(errno)))
    }

    /// A registration, numbered; counts itself live while it exists.
    struct Fake {
        serial: u64,
        live: Arc<AtomicU64>,
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn racing_opens_and_releases_share_one_registration_per_node() {
        const OPENS: u64 = 200_000;
        let b: Arc<Backings<Fake>> = Arc::default();
        b.on.store(true, Ordering::Relaxed);
        let live = Arc::new(AtomicU64::new(0));
        let serials = Arc::new(AtomicU64::new(0));
        // node -> (serial, opens) as the test's threads see their opens:
        // each one inside its attach..detach, so two that overlap here
        // overlap there too and must have been given the same backing
        // file (the kernel fails the second open otherwise).
        let open: Arc<Mutex<HashMap<u64, (u64, u32)>>> = Arc::default();
        let start = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (b, live, serials, open, start) = (
                    b.clone(),
                    live.clone(),
                    serials.clone(),
                    open.clone(),
                    start.clone(),
                );
                std::thread::spawn(move || {
                    let release = |node: u64| {
                        open.lock().get_mut(&node).unwrap().1 -= 1;
                        b.detach(node);
                    };
                    // Each thread keeps up to two files open, so opens of
                    // one node overlap across threads and within one.
                    let mut held = std::collections::VecDeque::new();
                    start.wait();
                    for i in 0..OPENS {
                        let node = (i * 7 + t) % 3;
                        let m = b.attach(node, || {
                            live.fetch_add(1, Ordering::Relaxed);
                            let serial = serials.fetch_add(1, Ordering::Relaxed);
                            Some(Ok(Fake {
                                serial,
                                live: live.clone(),
                            }))
                        });
                        let Mode::Kernel(id) = m else {
                            panic!("node {node} served by the server")
                        };
                        {
                            let mut o = open.lock();
                            let e = o.entry(node).or_insert((id.serial, 0));
                            if e.1 == 0 {
                                e.0 = id.serial;
                            }
                            assert_eq!(e.0, id.serial, "two backing files for node {node}");
                            e.1 += 1;
                        }
                        // The reply is sent and its id dropped; the RELEASE
                        // comes later, maybe to another thread.
                        drop(id);
                        held.push_back(node);
                        if held.len() > 2 {
                            release(held.pop_front().unwrap());
                        }
                    }
                    for node in held {
                        release(node);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(b.open_nodes(), (0, 0));
        assert_eq!(live.load(Ordering::Relaxed), 0, "registrations left open");
        let reg = b.registered.load(Ordering::Relaxed);
        assert!((3..=4 * OPENS).contains(&reg), "{reg}");
        assert_eq!(b.kernel_opens.load(Ordering::Relaxed), 4 * OPENS);
    }

    #[test]
    fn a_node_keeps_its_mode_until_its_last_release() {
        let b: Backings<Fake> = Backings::default();
        b.on.store(true, Ordering::Relaxed);
        assert!(matches!(b.attach(7, || refused(libc::ELOOP)), Mode::Server));
        // A second open must not try to register (it would mix modes).
        let m = b.attach(7, || panic!("registered while open"));
        assert!(matches!(m, Mode::Server));
        assert_eq!(b.open_nodes(), (1, 0));
        b.detach(7);
        assert_eq!(b.open_nodes(), (1, 0));
        b.detach(7);
        assert_eq!(b.open_nodes(), (0, 0));
        // Closed everywhere: the next open decides afresh.
        let mut asked = false;
        b.attach(7, || {
            asked = true;
            None
        });
        assert!(asked);
        assert_eq!(b.refused.load(Ordering::Relaxed), 1);
        assert!(b.enabled(), "ELOOP concerns one file, not the server");
    }

    #[test]
    fn eperm_turns_kernel_io_off() {
        let b: Backings<Fake> = Backings::default();
        b.on.store(true, Ordering::Relaxed);
        b.attach(1, || refused(libc::EPERM));
        assert!(!b.enabled());
    }

    #[test]
    fn a_node_is_written_from_its_first_writable_open_to_its_last_close() {
        let w = Writers::default();
        assert!(!w.writing(3));
        assert!(w.opened(3, false), "first");
        assert!(!w.opened(3, false), "second");
        assert!(w.writing(3) && !w.writing(4));
        w.closed(3);
        assert!(w.writing(3), "one writer left");
        w.closed(3);
        assert!(!w.writing(3));
        w.closed(3); // an unmatched close changes nothing
        assert!(w.opened(3, false), "first again");
    }

    #[test]
    fn a_node_is_written_until_every_backing_file_is_told_closed() {
        let w = Writers::default();
        // Two opens; a mapping outlives the second's RELEASE.
        assert!(w.opened(5, true));
        assert!(!w.opened(5, true));
        // The first's close is told before its RELEASE...
        w.backing_closed(5);
        assert!(w.writing(5));
        w.closed(5);
        // ...the second's RELEASE comes, its file lives on (mapped).
        w.closed(5);
        assert!(w.writing(5), "a backing file is left");
        assert_eq!(w.export(), vec![(5, 1)]);
        w.backing_closed(5); // the munmap
        assert!(!w.writing(5));
        assert_eq!(w.count(), 0);
        assert_eq!(w.closes_seen.load(Ordering::Relaxed), 2);
        // Closes of files no backing file is waited for count nothing.
        w.backing_closed(5);
        w.backing_closed(6);
        assert!(w.opened(5, true), "first again");
        w.backing_closed(5);
        w.backing_closed(5); // a host program's close: nothing below zero
        assert!(w.writing(5), "still open");
        w.closed(5);
        assert!(!w.writing(5));
    }

    #[test]
    fn a_forgotten_node_is_written_no_more() {
        let w = Writers::default();
        w.opened(8, true);
        w.closed(8);
        assert!(w.writing(8), "its close was never told (merged, lost)");
        w.forgotten(8);
        assert!(!w.writing(8));
        assert_eq!(w.count(), 0);
        // A successor: an open file taken over, and two backing files.
        w.opened(8, false);
        w.import(8, 2);
        w.closed(8);
        assert!(w.writing(8));
        w.backing_closed(8);
        w.backing_closed(8);
        assert!(!w.writing(8));
    }

    #[test]
    fn detach_of_an_unknown_node_is_harmless() {
        let b: Backings<Fake> = Backings::default();
        b.detach(42);
        assert_eq!(b.open_nodes(), (0, 0));
    }
}
