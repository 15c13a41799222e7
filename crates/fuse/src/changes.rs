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
//! Attributes go stale so too where the kernel had no inode for the file
//! yet: the kernel drops attributes from a request that started before
//! an inode's invalidation only for an inode it has, and an invalidation
//! of one it has not is refused (`ENOENT`), so a LOOKUP's reply making
//! the inode after that keeps what the LOOKUP read. The watcher reports
//! each change made through a name in a directory the kernel holds
//! (`ChangeSink::changed_through`); those in a directory a reply may
//! have raced are invalidated again with its names, by when the reply
//! has made the inode.
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
#[derive(Debug, Default, PartialEq)]
struct Again {
    /// Inodes (node id, contents too), invalidated before the names.
    inodes: Vec<(u64, bool)>,
    names: Names,
    arrived: Names,
}

impl Again {
    /// What of a batch goes again: its names, its arrived directories'
    /// names and the inodes changed through names in the directories
    /// `raced` says a reply may have raced (asked once per directory).
    /// `None` if nothing.
    fn select(
        names: &[(u64, Box<[u8]>)],
        arrived: Names,
        through: &[(u64, u64, bool)],
        raced: impl FnMut(u64) -> bool,
    ) -> Option<Again> {
        let mut raced = Memo(HashMap::new(), raced);
        let mut again = Again {
            names: names
                .iter()
                .filter(|(d, _)| raced.ask(*d))
                .cloned()
                .collect(),
            ..Again::default()
        };
        let mut inodes: HashMap<u64, bool> = HashMap::new();
        for &(dir, ino, data) in through {
            if raced.ask(dir) {
                *inodes.entry(ino).or_insert(false) |= data;
            }
        }
        again.inodes = inodes.into_iter().collect();
        again.inodes.sort_unstable();
        if again.names.is_empty() && again.inodes.is_empty() {
            return None;
        }
        again.arrived = arrived.into_iter().filter(|(d, _)| raced.ask(*d)).collect();
        Some(again)
    }
}

/// `raced`'s answers, each directory asked once: a question reads a slot
/// of `EntryRace` with a fence.
struct Memo<F>(HashMap<u64, bool>, F);

impl<F: FnMut(u64) -> bool> Memo<F> {
    fn ask(&mut self, dir: u64) -> bool {
        *self.0.entry(dir).or_insert_with(|| (self.1)(dir))
    }
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
    /// (directory, node id, contents too) of `ChangeSink::changed_through`.
    through: Vec<(u64, u64, bool)>,
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

    fn send_inodes(&self, inodes: &[(u64, bool)]) {
        for (id, data) in inodes {
            let off = if *data { 0 } else { -1 };
            self.sent(self.notifier.inval_inode(INodeNo(*id), off, 0));
        }
        self.counters(|c| {
            c.inodes.fetch_add(inodes.len() as u64, Ordering::Relaxed);
        });
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
        let mut inodes: HashMap<u64, bool> = HashMap::new();
        for &(id, data) in due.iter().flat_map(|a| a.inodes.iter()) {
            *inodes.entry(id).or_insert(false) |= data;
        }
        c.send_inodes(&inodes.into_iter().collect::<Vec<_>>());
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

    fn changed_through(&self, dir: Ino, ino: Ino, data: bool) {
        let Some(i) = self.0.inner.upgrade() else {
            return;
        };
        let (dir, id) = (i.nodes.node_id(dir), i.nodes.node_id(ino));
        self.0.batch.lock().through.push((dir, id, data));
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
        c.send_inodes(&inodes.into_iter().collect::<Vec<_>>());
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
        // may carry a name this batch just invalidated there, or a file
        // changed through a name there, and reach the kernel after the
        // invalidation: that directory's names and those files go again.
        // Names elsewhere do not (a re-send drops the directory's listing
        // again and waits for its lock).
        let again = Again::select(&names, b.arrived, &b.through, |dir| {
            i.entry_race.may_have_raced(dir)
        });
        if let Some(again) = again {
            i.changes.repeated.fetch_add(1, Ordering::Relaxed);
            c.repeat_later(again);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn name(dir: u64, n: &str) -> (u64, Box<[u8]>) {
        (dir, n.as_bytes().into())
    }

    #[test]
    fn a_raced_directorys_names_and_files_changed_through_it_go_again() {
        let names = vec![name(1, "a"), name(2, "b")];
        let arrived = vec![name(1, "a"), name(2, "b")];
        // Files changed through names in directories 1 and 3; file 10
        // twice in the batch, once with its contents.
        let through = [(1, 10, false), (3, 30, true), (1, 10, true), (1, 11, false)];
        let mut asked = Vec::new();
        let again = Again::select(&names, arrived, &through, |d| {
            asked.push(d);
            d != 2
        })
        .expect("directories 1 and 3 raced");
        assert_eq!(again.names, vec![name(1, "a")]);
        assert_eq!(again.arrived, vec![name(1, "a")]);
        assert_eq!(again.inodes, vec![(10, true), (11, false), (30, true)]);
        asked.sort_unstable();
        assert_eq!(asked, vec![1, 2, 3], "each directory asked once");

        // No reply raced: nothing goes again.
        assert_eq!(Again::select(&names, Vec::new(), &through, |_| false), None);
        // A batch of only a file's change (a host's write of a file the
        // kernel was just looking up) still goes again.
        let again = Again::select(&[], Vec::new(), &[(3, 30, false)], |_| true);
        assert_eq!(
            again,
            Some(Again {
                inodes: vec![(30, false)],
                ..Again::default()
            })
        );
    }
}
