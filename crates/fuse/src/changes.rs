//! Changes the file system saw happen behind the kernel's back
//! (`uvfs_vfs::ChangeSink`), turned into the notifications that make the
//! kernel forget exactly those: `FUSE_NOTIFY_INVAL_ENTRY` for a name (and
//! the directory's cached listing with it), `FUSE_NOTIFY_INVAL_INODE` for
//! attributes (and contents), `FUSE_NOTIFY_INC_EPOCH` when changes were
//! lost.
//!
//! # A LOOKUP racing a change
//! A LOOKUP's reply may carry what the name led to just before a host
//! change, and reach the kernel's dcache only after the invalidation for
//! that change came and found nothing to drop: the stale name would then
//! live for the (long) entry timeout. Attributes cannot go stale so (the
//! kernel ignores attributes from a request that started before an
//! inode's invalidation), names can. So when entry replies about a
//! directory were under way or just sent as a batch is reported
//! ([`crate::entry_race::EntryRace`]), the batch's name invalidations in
//! that directory are sent again at each of [`REPEATS`] after it, by
//! when the racing reply's name is in the dcache. (A requester descheduled for
//! longer between our reply and its dcache update can still keep a stale
//! name; the kernel offers no per-name epoch to close that.)
//!
//! Everything is sent from the watcher's thread, after each batch: a
//! directory or inode named many times in a batch is notified once.
//! Inodes go first: a name's invalidation waits for the kernel's lock of
//! its directory, which a LOOKUP or READDIR in that directory holds
//! until the server answers it, and nothing else should wait behind
//! that (an attribute change of a file elsewhere, say).

use crate::prune::Pruner;
use crate::server::{ChangeCounters, Inner};
use fuser::{INodeNo, Notifier};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use uvfs_vfs::{ChangeSink, Ino};

/// When a batch's name invalidations are sent again if entry replies
/// may have raced it: soon after, and later for a reply whose thread was
/// descheduled between our reply and its filling the dcache.
const REPEATS: [Duration; 3] = [
    Duration::from_millis(2),
    Duration::from_millis(25),
    Duration::from_millis(200),
];

/// Names to invalidate: (directory node id, name).
type Names = Vec<(u64, Box<[u8]>)>;

/// A batch's names sent again ([`KernelCache::repeat_later`]), and those
/// of them that directories were made at or moved to, looked up again
/// after each sending: an invalidation of such a name unhashes the
/// directory's entry the last lookup put there, and a process working in
/// it would find `getcwd` failing.
struct Again {
    names: Names,
    arrived: Names,
}

/// The file system's [`ChangeSink`] on a FUSE connection.
pub(crate) struct KernelCache {
    notifier: Notifier,
    raw: Option<Pruner>,
    inner: Weak<Inner>,
    batch: Mutex<Batch>,
    repeat: Mutex<Option<mpsc::Sender<(Instant, Again)>>>,
}

#[derive(Default)]
struct Batch {
    names: HashSet<(u64, Box<[u8]>)>,
    /// Names directories were made at or moved to: looked up again after
    /// the names were invalidated (`Refresher::arrived`).
    arrived: Vec<(u64, Box<[u8]>)>,
    /// node id -> contents too.
    inodes: HashMap<u64, bool>,
}

impl KernelCache {
    pub(crate) fn new(notifier: Notifier, raw: Option<Pruner>, inner: &Arc<Inner>) -> KernelCache {
        KernelCache {
            notifier,
            raw,
            inner: Arc::downgrade(inner),
            batch: Mutex::default(),
            repeat: Mutex::new(None),
        }
    }

    fn counters(&self, f: impl FnOnce(&ChangeCounters)) {
        if let Some(i) = self.inner.upgrade() {
            f(&i.changes);
        }
    }

    fn sent(&self, r: std::io::Result<()>) {
        if let Err(e) = r {
            // ENOENT: the kernel holds no such name or inode (any more).
            if e.raw_os_error() != Some(libc::ENOENT) {
                self.counters(|c| {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                });
            }
        }
    }

    fn send_names(&self, names: &[(u64, Box<[u8]>)]) {
        for (dir, name) in names {
            self.sent(
                self.notifier
                    .inval_entry(INodeNo(*dir), OsStr::from_bytes(name)),
            );
        }
        self.counters(|c| {
            c.entries.fetch_add(names.len() as u64, Ordering::Relaxed);
        });
    }

    /// Sends `again`'s names again after each of [`REPEATS`], from a
    /// thread of its own (started on first use).
    fn repeat_later(self: &Arc<Self>, again: Again) {
        let mut tx = self.repeat.lock();
        if tx.is_none() {
            let (s, r) = mpsc::channel::<(Instant, Again)>();
            let me = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("uvfs-inval-again".into())
                .spawn(move || repeater(r, me));
            if started.is_err() {
                return;
            }
            *tx = Some(s);
        }
        if let Some(s) = tx.as_ref() {
            let _ = s.send((Instant::now(), again));
        }
    }
}

/// Sends each batch's names again at each of [`REPEATS`] after it was
/// first sent. Batches overlap (a new one comes while an older one waits
/// for its last repeat), so every batch has its own due times: one queue
/// per repeat, each in the order batches came, and the thread sleeps
/// until the earliest due time or the next batch. Names due at once are
/// sent once.
fn repeater(rx: mpsc::Receiver<(Instant, Again)>, cache: Weak<KernelCache>) {
    // As preferred as the watcher that sends the first time.
    crate::threads::prefer_current_thread();
    let mut stages: [VecDeque<(Instant, Arc<Again>)>; REPEATS.len()] = Default::default();
    loop {
        let next = stages
            .iter()
            .zip(REPEATS)
            .filter_map(|(q, d)| q.front().map(|(at, _)| *at + d))
            .min();
        let got = match next {
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(due) => rx.recv_timeout(due.saturating_duration_since(Instant::now())),
        };
        match got {
            Ok((at, names)) => {
                stages[0].push_back((at, Arc::new(names)));
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        let mut due: Vec<Arc<Again>> = Vec::new();
        for k in 0..REPEATS.len() {
            while let Some((at, _)) = stages[k].front() {
                if *at + REPEATS[k] > now {
                    break;
                }
                let Some((at, names)) = stages[k].pop_front() else {
                    break;
                };
                due.push(names.clone());
                if let Some(later) = stages.get_mut(k + 1) {
                    later.push_back((at, names));
                }
            }
        }
        let Some(c) = cache.upgrade() else { return };
        let mut seen = HashSet::new();
        let once: Names = due
            .iter()
            .flat_map(|a| a.names.iter())
            .filter(|n| seen.insert(*n))
            .cloned()
            .collect();
        c.send_names(&once);
        if let Some(i) = c.inner.upgrade() {
            for (dir, name) in due.iter().flat_map(|a| a.arrived.iter()) {
                i.refresh.arrived(*dir, name.clone());
            }
        }
    }
}

/// The sink handed to the file system; a wrapper so that the repeat
/// thread can hold the cache weakly.
pub(crate) struct Sink(pub(crate) Arc<KernelCache>);

impl ChangeSink for Sink {
    fn entry_changed(&self, dir: Ino, name: &[u8]) {
        let Some(i) = self.0.inner.upgrade() else {
            return;
        };
        let id = i.nodes.node_id(dir);
        self.0.batch.lock().names.insert((id, name.into()));
    }

    fn dir_arrived(&self, dir: Ino, name: &[u8]) {
        let Some(i) = self.0.inner.upgrade() else {
            return;
        };
        let id = i.nodes.node_id(dir);
        self.0.batch.lock().arrived.push((id, name.into()));
    }

    fn inode_changed(&self, ino: Ino, data: bool) {
        let Some(i) = self.0.inner.upgrade() else {
            return;
        };
        let id = i.nodes.node_id(ino);
        *self.0.batch.lock().inodes.entry(id).or_insert(false) |= data;
    }

    fn closed_for_writing(&self, ino: Ino) {
        let Some(i) = self.0.inner.upgrade() else {
            return;
        };
        i.backings.writers.backing_closed(i.nodes.node_id(ino));
    }

    fn everything_changed(&self) {
        let c = &self.0;
        let Some(i) = c.inner.upgrade() else { return };
        *c.batch.lock() = Batch::default();
        i.changes.everything.fetch_add(1, Ordering::Relaxed);
        // Names first: every cached name is looked up again before use.
        let epoch = c.raw.as_ref().map(|r| r.inc_epoch());
        if !matches!(epoch, Some(Ok(()))) {
            // Names cached for long cannot be dropped one by one without
            // knowing them: from now on nothing is cached for long.
            i.trust_lost.store(true, Ordering::SeqCst);
        }
        for id in i.nodes.held_ids() {
            c.sent(c.notifier.inval_inode(INodeNo(id), 0, 0));
        }
    }

    fn batch_done(&self) {
        let c = &self.0;
        let Some(i) = c.inner.upgrade() else { return };
        let b = std::mem::take(&mut *c.batch.lock());
        // Directories whose names changed: their attributes and cached
        // listings go too.
        let mut inodes = b.inodes;
        for (dir, _) in &b.names {
            inodes.insert(*dir, true);
        }
        for (id, data) in &inodes {
            let off = if *data { 0 } else { -1 };
            c.sent(c.notifier.inval_inode(INodeNo(*id), off, 0));
        }
        i.changes
            .inodes
            .fetch_add(inodes.len() as u64, Ordering::Relaxed);
        let names: Vec<_> = b.names.into_iter().collect();
        c.send_names(&names);
        // The kernel moves a directory's entry (and with it the paths of
        // the processes working in or below it), or hashes it again, only
        // when its name is looked up: done from the refresher's thread,
        // after the names were dropped above.
        for (dir, name) in &b.arrived {
            i.refresh.arrived(*dir, name.clone());
        }
        // A reply about a directory of the batch, under way or just sent,
        // may carry a name this batch just invalidated there, and reach
        // the dcache after the invalidation: that directory's names go
        // again. Names elsewhere do not (a re-send drops the directory's
        // listing again and waits for its lock).
        let mut raced: HashMap<u64, bool> = HashMap::new();
        let again: Names = names
            .into_iter()
            .filter(|(dir, _)| {
                *raced
                    .entry(*dir)
                    .or_insert_with(|| i.entry_race.may_have_raced(*dir))
            })
            .collect();
        if !again.is_empty() {
            i.changes.repeated.fetch_add(1, Ordering::Relaxed);
            let arrived = b
                .arrived
                .into_iter()
                .filter(|(dir, _)| raced.get(dir).copied().unwrap_or(false))
                .collect();
            c.repeat_later(Again {
                names: again,
                arrived,
            });
        }
    }
}
