//! Asking the kernel to forget cold nodes, so the vnode count stays under
//! the layer's limit however many files the kernel has looked up.
//!
//! # Why the server must ask
//! A node the kernel remembers is held (`nodes.rs`): the vnode layer
//! cannot recycle it, so `find` over a tree larger than the vnode limit
//! drives the count past the limit (allocation overcommits rather than
//! fail), and the kernel forgets nodes only under its own memory pressure.
//! The server asks with `FUSE_NOTIFY_PRUNE` (`prune.rs`): the kernel drops
//! the node's unused dentries, and the inode with them if nothing else
//! uses it, and sends FORGET, which drops our hold. A node in use (an open
//! file, a cwd, a mount point) is left alone: asking must never change
//! what a process sees.
//!
//! Where prune is unavailable (a kernel before 6.18, or a mount made
//! through fusermount3, whose device fd we do not have) the fallback is
//! `FUSE_NOTIFY_INVAL_ENTRY`, which unhashes a dentry even in use; it is
//! sent for non-directories only, so no cwd and no mount on a directory is
//! ever cut off (an open file's /proc path may show "(deleted)").
//!
//! # Which nodes
//! Every node the kernel is handed for the first time is queued with the
//! (parent node id, name) it was handed out under, oldest first: a FIFO
//! approximation of coldness that costs one push per new node. Entries
//! whose node has since been forgotten are skipped (and compacted away).
//! An entry the kernel kept (in use, or a directory whose children were
//! still cached when it was asked) goes to the back for another try.
//!
//! # When
//! What counts is the number of *held* vnodes (the mount's vnodes less its
//! free ones): free vnodes the layer recycles by itself at the limit, and
//! only the held ones can push the count past it. A request that adds a
//! node while the mount's vnode count is above high water (7/8 of the
//! limit) rings the evictor thread, which asks the kernel to forget nodes
//! until the held count is back under low water (3/4), pausing between
//! batches for the FORGETs to arrive. A pass that finds the held count
//! under high water (a file system whose free vnodes fill the limit), or
//! that stops because what is left is in use (three batches in a row
//! freed nothing), is followed by a rest before the thread answers the
//! bell again, doubling (up to a second) while passes keep stalling:
//! bounded work however many new nodes ring it. Between passes the thread
//! waits for the bell with no timeout, unless the last pass stalled (nodes
//! in use may be let go with no new node to ring it): an idle server
//! costs it no wakeups.
//!
//! # Keeping up
//! Asking is not enough when the kernel looks names up faster than it
//! forgets them: served through io_uring, round trips are short enough
//! that a `find` takes the held count well past the limit (through
//! /dev/fuse they are slow enough for the FORGETs to keep up; the figures
//! are in docs/results.md, "FUSE over io_uring"). So a LOOKUP or
//! READDIRPLUS served by an io_uring queue thread that finds the held
//! count past 15/16 of the limit waits first, at most [`MAX_THROTTLE`],
//! for the evictor to bring it back (woken after each batch): the walk
//! slows to what eviction sustains. Nodes the kernel
//! keeps (in use) end the wait at its bound, and the request goes on: the
//! layer overcommits rather than fail. The /dev/fuse loops never wait:
//! they are the ones that read the FORGETs.
//!
//! The thread is not a request loop: sending an entry invalidation
//! waits for the parent directory's inode lock, which an in-flight request
//! may hold until a request loop answers it.

use crate::nodes::NodeTable;
use crate::prune::Pruner;
use crate::report::{Counted, Report};
use fuser::{INodeNo, Notifier};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What the evictor's thread reads of the server it works for. The
/// server's state implements it, so that this module needs nothing of the
/// server, which holds an [`Evictor`] and calls into it.
pub(crate) trait Host: Send + Sync + 'static {
    /// The evictor itself.
    fn evictor(&self) -> &Evictor;
    /// The mount whose vnodes are counted against the limit.
    fn mount(&self) -> &Arc<uvfs_vnode::Mount>;
    /// The vnode limit.
    fn limit(&self) -> usize;
    /// The nodes the kernel holds.
    fn nodes(&self) -> &NodeTable;
}

/// Most notifications per batch before pausing for FORGETs.
const BATCH: usize = 4096;

/// How long the thread rests after a pass with nothing to do, and the
/// first rest after a stalled one.
const REST: Duration = Duration::from_millis(20);
/// The longest rest after passes that keep stalling.
const MAX_REST: Duration = Duration::from_secs(1);

/// Queue length from which each doubling rings the thread to compact it.
const COMPACT_AT: usize = 4096;

/// Consecutive batches that freed nothing before a pass gives up.
const MAX_STALLS: usize = 3;

/// Longest a request waits for the evictor (see "Keeping up").
pub const MAX_THROTTLE: Duration = Duration::from_millis(200);

struct Entry {
    id: u64,
    /// Where the node was handed out, for the fallback only: prune needs
    /// no more than the node id, and the kernel keeps the names itself.
    named: Option<Box<Named>>,
}

/// The candidates, oldest first. The queue holds one id per node the
/// kernel remembers, so with prune a node costs it 8 bytes (and the
/// deque's slack): no copy of its name, no map entry.
#[derive(Default)]
struct Queue {
    ids: VecDeque<u64>,
    /// The (parent, name) of queued nodes, while the fallback needs them.
    named: HashMap<u64, Box<Named>>,
}

impl Queue {
    fn push(&mut self, e: Entry) {
        if let Some(n) = e.named {
            self.named.insert(e.id, n);
        }
        self.ids.push_back(e.id);
    }

    fn pop(&mut self) -> Option<Entry> {
        let id = self.ids.pop_front()?;
        let named = if self.named.is_empty() {
            None
        } else {
            self.named.remove(&id)
        };
        Some(Entry { id, named })
    }

    fn len(&self) -> usize {
        self.ids.len()
    }

    /// Keeps only the nodes `keep` says the kernel still holds, and gives
    /// back what a burst of nodes (a walk, a mass create) left the deque.
    fn compact(&mut self, keep: impl Fn(u64) -> bool) {
        self.ids.retain(|&id| keep(id));
        self.named.retain(|&id, _| keep(id));
        let room = 2 * self.ids.len();
        if self.ids.capacity() > 2 * room + 1024 {
            self.ids.shrink_to(room);
        }
    }
}

/// The (parent, name) an entry invalidation needs.
struct Named {
    /// The parent's node id, with [`DIR_BIT`] set for a directory (node
    /// ids are inode numbers, far below it).
    parent: u64,
    name: Box<[u8]>,
}

const DIR_BIT: u64 = 1 << 63;

/// How the kernel is asked to forget: prune while `pruner` is there and
/// the kernel takes it, else entry invalidation of non-directories.
pub struct Asker {
    pub pruner: Option<Pruner>,
    pub notifier: Notifier,
}

impl Named {
    fn parent(&self) -> u64 {
        self.parent & !DIR_BIT
    }

    fn is_dir(&self) -> bool {
        self.parent & DIR_BIT != 0
    }
}

/// Counters of the evictor.
#[derive(Default, Debug)]
pub struct EvictCounters {
    /// Nodes queued as candidates.
    pub queued: AtomicU64,
    /// Nodes the kernel was asked to forget (prunes and invalidations).
    pub sent: AtomicU64,
    /// Nodes asked for that the kernel kept (in use): requeued.
    pub kept: AtomicU64,
    /// 1 while prune notifications are used, 0 with the fallback.
    pub prune: AtomicU64,
    /// Times the evictor thread ran a pass.
    pub passes: AtomicU64,
    /// Highest vnode count of the mount seen when a node was handed to
    /// the kernel (the moments the held count grows).
    pub max_vnodes: AtomicU64,
    /// Requests that waited for the evictor (`throttle`).
    pub throttled: AtomicU64,
}

/// The candidate queue and the thread's bell.
#[derive(Default)]
pub struct Evictor {
    q: Mutex<Queue>,
    bell: Arc<Bell>,
    started: AtomicBool,
    /// Whether entries keep their (parent, name): only for the fallback.
    /// Nodes queued while prune worked have none, so if the kernel later
    /// refuses prune they cannot be asked about and are dropped from the
    /// queue; the vnode layer overcommits for them rather than fail.
    names: AtomicBool,
    /// Counters.
    pub counters: EvictCounters,
}

/// The thread's bell, apart from the server's state: the thread waits on
/// it without keeping that state alive, so it can wait without a timeout
/// while there is nothing to do (an idle server costs it no wakeups) and
/// still leave when the state goes (`closed`).
#[derive(Default)]
struct Bell {
    state: Mutex<BellState>,
    ring: Condvar,
    /// Rung after each batch, for requests waiting in `throttle`.
    progress: Condvar,
}

#[derive(Default)]
struct BellState {
    rung: bool,
    /// The evictor (the server's state) is gone: the thread leaves.
    closed: bool,
}

impl Bell {
    fn ring(&self) {
        let mut s = self.state.lock();
        if !s.rung {
            s.rung = true;
            self.ring.notify_one();
        }
    }

    /// Wakes requests waiting in `throttle`.
    fn progressed(&self) {
        let _s = self.state.lock();
        self.progress.notify_all();
    }

    /// Waits to be rung (or at most `timeout`); false once closed.
    fn wait(&self, timeout: Option<Duration>) -> bool {
        let mut s = self.state.lock();
        match timeout {
            Some(t) if !s.rung && !s.closed => {
                self.ring.wait_for(&mut s, t);
            }
            Some(_) => {}
            None => {
                while !s.rung && !s.closed {
                    self.ring.wait(&mut s);
                }
            }
        }
        s.rung = false;
        !s.closed
    }
}

impl Drop for Evictor {
    fn drop(&mut self) {
        let mut s = self.bell.state.lock();
        s.closed = true;
        self.bell.ring.notify_one();
    }
}

impl Evictor {
    /// Queues a node the kernel was just handed for the first time;
    /// rings the thread if the mount is over high water, or if the queue
    /// doubled to a size worth compacting (entries of forgotten nodes go
    /// only then: the thread does not wake up just to look).
    pub fn note(&self, id: u64, parent: u64, name: &[u8], dir: bool, vnodes: usize, limit: usize) {
        self.counters
            .max_vnodes
            .fetch_max(vnodes as u64, Ordering::Relaxed);
        if !self.started.load(Ordering::Relaxed) {
            return;
        }
        let len = {
            let mut q = self.q.lock();
            q.push(Entry {
                id,
                named: self.names.load(Ordering::Relaxed).then(|| {
                    Box::new(Named {
                        parent: if dir { parent | DIR_BIT } else { parent },
                        name: name.into(),
                    })
                }),
            });
            q.len()
        };
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        if vnodes > high_water(limit) || (len >= COMPACT_AT && len.is_power_of_two()) {
            self.bell.ring();
        }
    }

    /// Backpressure (see "Keeping up"): waits, bounded, while the mount
    /// holds more than 15/16 of `limit` vnodes. Returns whether it waited.
    pub fn throttle(&self, mnt: &uvfs_vnode::Mount, limit: usize) -> bool {
        // Held vnodes never outnumber vnodes, and the vnode count is a sum
        // of counter cells while the free count locks every free-list
        // shard: the count alone answers every request below the mark.
        let water = throttle_water(limit);
        let over = || mnt.vnode_count() > water && held(mnt) > water;
        if !self.started.load(Ordering::Relaxed) || !over() {
            return false;
        }
        self.counters.throttled.fetch_add(1, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + MAX_THROTTLE;
        self.bell.ring();
        let mut s = self.bell.state.lock();
        while over() && !self.bell.progress.wait_until(&mut s, deadline).timed_out() {}
        true
    }

    /// Starts the thread that sends the notifications.
    pub(crate) fn start<H: Host>(&self, asker: Asker, inner: Weak<H>) -> std::io::Result<()> {
        let prune = asker.pruner.is_some();
        self.names.store(!prune, Ordering::Relaxed);
        self.started.store(true, Ordering::Relaxed);
        self.counters
            .prune
            .store(u64::from(prune), Ordering::Relaxed);
        let bell = self.bell.clone();
        std::thread::Builder::new()
            .name("uvfs-evict".into())
            .spawn(move || run(asker, inner, bell))?;
        Ok(())
    }
}

fn throttle_water(limit: usize) -> usize {
    limit - limit / 16
}

fn high_water(limit: usize) -> usize {
    limit - limit / 8
}

fn low_water(limit: usize) -> usize {
    limit - limit / 4
}

fn run<H: Host>(mut asker: Asker, inner: Weak<H>, bell: Arc<Bell>) {
    // After a stalled pass the thread rests, twice as long each time the
    // next one stalls too: nodes in use past the limit cost a few batches
    // per rest, and the kernel is not asked about them thousands of times
    // a second while new nodes keep ringing.
    let mut rest = REST;
    // Ends once the server's state is gone (the session ended); the
    // state is held only during a pass.
    while let Some(i) = inner.upgrade() {
        let p = pass(&*i, &mut asker);
        drop(i);
        bell.progressed();
        let timeout = match p {
            // Only new nodes can bring work, and they ring.
            Pass::Done => {
                rest = REST;
                None
            }
            Pass::Idle => {
                std::thread::sleep(REST);
                None
            }
            // Nodes in use may be let go without a new one coming: look
            // again after a while even if nothing rings.
            Pass::Stalled => {
                std::thread::sleep(rest);
                rest = (rest * 2).min(MAX_REST);
                Some(MAX_REST)
            }
        };
        if !bell.wait(timeout) {
            return;
        }
    }
}

/// The mount's vnodes that cannot be recycled (held or in use).
fn held(mnt: &uvfs_vnode::Mount) -> usize {
    mnt.vnode_count().saturating_sub(mnt.free_count())
}

/// How a pass ended.
#[derive(PartialEq, Eq)]
enum Pass {
    /// The held count was under high water: nothing to do.
    Idle,
    /// Brought under low water.
    Done,
    /// Stopped short: what is left is in use (the batches freed nothing)
    /// or the queue ran out.
    Stalled,
}

/// One pass: ask the kernel to forget the oldest nodes until the held
/// count is under low water.
fn pass(i: &impl Host, asker: &mut Asker) -> Pass {
    let mnt = i.mount().clone();
    let limit = i.limit();
    let ev = i.evictor();
    {
        // Compact entries of nodes the kernel already forgot.
        let mut q = ev.q.lock();
        if q.len() > 2 * i.nodes().len() + 1024 {
            q.compact(|id| i.nodes().contains(id));
        }
    }
    if mnt.vnode_count() <= high_water(limit) || held(&mnt) <= high_water(limit) {
        return Pass::Idle;
    }
    ev.counters.passes.fetch_add(1, Ordering::Relaxed);
    let mut stalls = 0;
    loop {
        let count = held(&mnt);
        let low = low_water(limit);
        if count <= low {
            return Pass::Done;
        }
        let want = (count - low).min(BATCH);
        let mut batch = Vec::with_capacity(want);
        {
            let mut q = ev.q.lock();
            let mut skipped = Vec::new();
            while batch.len() < want {
                let Some(e) = q.pop() else { break };
                if e.id == crate::nodes::ROOT_ID || !i.nodes().contains(e.id) {
                    continue;
                }
                if asker.pruner.is_none() {
                    match &e.named {
                        // Queued while prune worked: no way to ask.
                        None => continue,
                        Some(n) if n.is_dir() => {
                            skipped.push(e);
                            continue;
                        }
                        Some(_) => {}
                    }
                }
                batch.push(e);
            }
            for e in skipped {
                q.push(e);
            }
        }
        if batch.is_empty() {
            return Pass::Stalled;
        }
        ask(asker, &batch, ev);
        ev.counters
            .sent
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        // Let the FORGETs arrive and the holds drop.
        std::thread::sleep(Duration::from_millis(5));
        let mut kept = 0;
        {
            let mut q = ev.q.lock();
            for e in batch {
                if i.nodes().contains(e.id) {
                    q.push(e);
                    kept += 1;
                }
            }
        }
        ev.counters.kept.fetch_add(kept, Ordering::Relaxed);
        ev.bell.progressed();
        if held(&mnt) >= count {
            stalls += 1;
            if stalls >= MAX_STALLS {
                return Pass::Stalled;
            }
        } else {
            stalls = 0;
        }
    }
}

/// Sends one batch; switches to the fallback for good if the kernel does
/// not know prune.
fn ask(asker: &mut Asker, batch: &[Entry], ev: &Evictor) {
    let counters = &ev.counters;
    if let Some(p) = &asker.pruner {
        let ids: Vec<u64> = batch.iter().map(|e| e.id).collect();
        match p.prune(&ids) {
            Ok(()) => return,
            // The connection is going away (unmount): nothing to ask.
            Err(e) if e.raw_os_error() != Some(libc::EINVAL) => return,
            Err(e) => {
                log::warn!(
                    "FUSE_NOTIFY_PRUNE refused ({e}); evicting by entry invalidation \
                     of non-directories instead"
                );
                asker.pruner = None;
                ev.names.store(true, Ordering::Relaxed);
                counters.prune.store(0, Ordering::Relaxed);
            }
        }
    }
    for n in batch.iter().filter_map(|e| e.named.as_deref()) {
        if n.is_dir() {
            continue;
        }
        // ENOENT: the kernel no longer has that entry; nothing to do.
        let _ = asker
            .notifier
            .inval_entry(INodeNo(n.parent()), OsStr::from_bytes(&n.name));
    }
}

impl Counted for Evictor {
    fn report(&self, out: &mut Report) {
        let c = &self.counters;
        for (name, v, d) in [
            ("fuse.evict.queued", &c.queued, "Nodes queued as candidates for kernel-forget"),
            ("fuse.evict.sent", &c.sent, "Nodes the kernel was asked to forget (prune or entry invalidation)"),
            ("fuse.evict.kept", &c.kept, "Nodes asked for that the kernel kept because they were in use (requeued)"),
            ("fuse.evict.prune", &c.prune, "1: nodes are forgotten by FUSE_NOTIFY_PRUNE; 0: by entry invalidation of non-directories"),
            ("fuse.evict.max_vnodes", &c.max_vnodes, "Highest vnode count of the mount seen when handing a node to the kernel"),
            ("fuse.evict.throttled", &c.throttled, "Requests that waited for the evictor: the mount held more than 15/16 of its vnode limit"),
            ("fuse.evict.passes", &c.passes, "Evictor passes over the vnode high water mark"),
        ] {
            out.put(name, v.load(Ordering::Relaxed), d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uvfs_memfs::{MemFs, MemFsConfig};
    use uvfs_vfs::{Ctx, FileSystem};
    use uvfs_vnode::{Config, VnodeLayer};

    #[test]
    fn the_queue_keeps_names_only_for_entries_that_came_with_one() {
        let mut q = Queue::default();
        let named = |parent: u64, name: &[u8]| {
            Some(Box::new(Named {
                parent,
                name: name.into(),
            }))
        };
        q.push(Entry { id: 5, named: None });
        q.push(Entry {
            id: 6,
            named: named(1 | DIR_BIT, b"d"),
        });
        q.push(Entry {
            id: 7,
            named: named(6, b"f"),
        });
        q.push(Entry { id: 8, named: None });
        // Node 7 was forgotten: compaction drops its id and its name.
        q.compact(|id| id != 7);
        assert_eq!((q.len(), q.named.len()), (3, 1));
        let e = q.pop().unwrap();
        assert!(e.id == 5 && e.named.is_none());
        let e = q.pop().unwrap();
        let n = e.named.as_deref().unwrap();
        assert!(e.id == 6 && n.is_dir() && n.parent() == 1 && &*n.name == b"d");
        // Requeued with its name, it comes back with it, after node 8.
        q.push(e);
        assert_eq!(q.pop().unwrap().id, 8);
        assert_eq!(q.pop().unwrap().named.unwrap().name.as_ref(), b"d");
        assert!(q.pop().is_none() && q.named.is_empty());
    }

    #[test]
    fn the_bell_wakes_the_thread_once_per_ring_and_when_closed() {
        let bell = Arc::new(Bell::default());
        // A ring before the wait is not lost, and is used up by it.
        bell.ring();
        assert!(bell.wait(None));
        assert!(bell.wait(Some(Duration::from_millis(1))), "timed out, open");
        // A waiter without a timeout stays until closed.
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let bell = bell.clone();
            std::thread::spawn(move || tx.send(bell.wait(None)).unwrap())
        };
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        let mut ev = Evictor::default();
        ev.bell = bell.clone();
        drop(ev);
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(false));
        waiter.join().unwrap();
    }

    #[test]
    fn requests_wait_only_while_held_vnodes_pass_the_mark() {
        // No background reclaimer: the free vnodes below must stay.
        let layer = VnodeLayer::new(Config {
            reclaimer: false,
            ..Config::with_limit(64)
        });
        let fs = MemFs::new(layer.clone(), MemFsConfig::default());
        let root = fs.root().unwrap();
        let ev = Evictor::default();
        let mut files: Vec<_> = (0..62)
            .map(|i| {
                let name = format!("f{i}");
                fs.create(&Ctx::ROOT, &root, name.as_bytes(), 0o644, 0)
                    .unwrap()
                    .0
            })
            .collect();
        // 63 vnodes in use, over 15/16 of 64. No evictor running (a server
        // whose kernel cannot be asked): nothing to wait for.
        assert!(fs.mount().vnode_count() > throttle_water(64));
        assert!(!ev.throttle(fs.mount(), 64));
        // Marked running, with no thread here to bring the count down: the
        // request waits its bound and says so.
        ev.started.store(true, Ordering::Relaxed);
        assert!(ev.throttle(fs.mount(), 64));
        assert_eq!(ev.counters.throttled.load(Ordering::Relaxed), 1);
        // The same vnodes free (the layer recycles those itself): no wait.
        files.clear();
        assert!(fs.mount().vnode_count() > throttle_water(64));
        assert!(!ev.throttle(fs.mount(), 64));
        assert_eq!(ev.counters.throttled.load(Ordering::Relaxed), 1);
    }
}
