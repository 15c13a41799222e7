//! Asking the kernel to forget cold nodes, so the vnode count stays under
//! the layer's limit however many files the kernel has looked up.
//!
//! # Why the server must ask
//! A node the kernel remembers is held (`nodes.rs`): the vnode layer
//! cannot recycle it, so `find` over a tree larger than the vnode limit
//! drives the count past the limit (allocation overcommits rather than
//! fail), and the kernel forgets nodes only under its own memory pressure.
//! FUSE lets the server invalidate a directory entry
//! (`FUSE_NOTIFY_INVAL_ENTRY`): the kernel drops the dentry, and the inode
//! with it if nothing else uses it, and sends FORGET, which drops our hold.
//!
//! # Which nodes
//! Every node the kernel is handed for the first time is queued with the
//! (parent node id, name) it was handed out under, oldest first: a FIFO
//! approximation of coldness that costs one push per new node. Entries
//! whose node has since been forgotten are skipped (and compacted away).
//! An invalidated entry that is in use (an open file, a cwd) is merely
//! unhashed; the kernel forgets it later.
//!
//! # When
//! A request that adds a node while the mount's vnode count is above
//! high water (7/8 of the limit) rings the evictor thread, which
//! invalidates entries until the count is back under low water (3/4),
//! pausing between batches for the FORGETs to arrive. The thread is not a
//! request loop: sending a notification waits for the parent directory's
//! inode lock, which an in-flight request may hold until a request loop
//! answers it.

use crate::server::Inner;
use fuser::{INodeNo, Notifier};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;
use std::time::Duration;

/// Most notifications per batch before pausing for FORGETs.
const BATCH: usize = 4096;

struct Entry {
    id: u64,
    parent: u64,
    name: Box<[u8]>,
}

/// Counters of the evictor.
#[derive(Default, Debug)]
pub struct EvictCounters {
    /// Nodes queued as candidates.
    pub queued: AtomicU64,
    /// Entry invalidations sent to the kernel.
    pub sent: AtomicU64,
    /// Times the evictor thread ran a pass.
    pub passes: AtomicU64,
    /// Highest vnode count of the mount seen when a node was handed to
    /// the kernel (the moments the held count grows).
    pub max_vnodes: AtomicU64,
}

/// The candidate queue and the thread's bell.
#[derive(Default)]
pub struct Evictor {
    q: Mutex<VecDeque<Entry>>,
    rung: Mutex<bool>,
    bell: Condvar,
    started: AtomicBool,
    /// Counters.
    pub counters: EvictCounters,
}

impl Evictor {
    /// Queues a node the kernel was just handed for the first time;
    /// rings the thread if the mount is over high water.
    pub fn note(&self, id: u64, parent: u64, name: &[u8], vnodes: usize, limit: usize) {
        self.counters
            .max_vnodes
            .fetch_max(vnodes as u64, Ordering::Relaxed);
        if !self.started.load(Ordering::Relaxed) {
            return;
        }
        self.q.lock().push_back(Entry {
            id,
            parent,
            name: name.into(),
        });
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        if vnodes > high_water(limit) {
            let mut r = self.rung.lock();
            if !*r {
                *r = true;
                self.bell.notify_one();
            }
        }
    }

    /// Starts the thread that sends the notifications.
    pub fn start(&self, notifier: Notifier, inner: Weak<Inner>) -> std::io::Result<()> {
        self.started.store(true, Ordering::Relaxed);
        std::thread::Builder::new()
            .name("uvfs-evict".into())
            .spawn(move || run(notifier, inner))?;
        Ok(())
    }

    fn wait(&self) {
        let mut r = self.rung.lock();
        if !*r {
            self.bell.wait_for(&mut r, Duration::from_secs(1));
        }
        *r = false;
    }
}

fn high_water(limit: usize) -> usize {
    limit - limit / 8
}

fn low_water(limit: usize) -> usize {
    limit - limit / 4
}

fn run(notifier: Notifier, inner: Weak<Inner>) {
    // Ends once the server's state is gone (the session ended). Parking
    // with the Arc keeps that state alive for at most one timeout.
    while let Some(i) = inner.upgrade() {
        pass(&i, &notifier);
        i.evict.wait();
    }
}

/// One pass: invalidate oldest entries until under low water.
fn pass(i: &Inner, notifier: &Notifier) {
    let mnt = i.fs.mount().clone();
    let limit = i.layer.config().limit;
    let ev = &i.evict;
    {
        // Compact entries of nodes the kernel already forgot.
        let mut q = ev.q.lock();
        if q.len() > 2 * i.nodes.len() + 1024 {
            q.retain(|e| i.nodes.contains(e.id));
        }
    }
    if mnt.vnode_count() <= high_water(limit) {
        return;
    }
    ev.counters.passes.fetch_add(1, Ordering::Relaxed);
    let mut idle_rounds = 0;
    loop {
        let count = mnt.vnode_count();
        let low = low_water(limit);
        if count <= low {
            return;
        }
        let want = (count - low).min(BATCH);
        let mut sent = 0;
        while sent < want {
            let Some(e) = ev.q.lock().pop_front() else {
                break;
            };
            if e.id == crate::nodes::ROOT_ID || !i.nodes.contains(e.id) {
                continue;
            }
            // ENOENT: the kernel no longer has that entry; nothing to do.
            let _ = notifier.inval_entry(INodeNo(e.parent), OsStr::from_bytes(&e.name));
            sent += 1;
        }
        ev.counters.sent.fetch_add(sent as u64, Ordering::Relaxed);
        // Let the FORGETs arrive and the holds drop.
        std::thread::sleep(Duration::from_millis(5));
        if sent == 0 {
            idle_rounds += 1;
            if idle_rounds > 20 {
                return;
            }
        } else {
            idle_rounds = 0;
        }
    }
}
