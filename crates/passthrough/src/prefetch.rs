//! Directory readahead: warming the backing file system's caches for the
//! directories a tree walker is about to list.
//!
//! # Why
//! A cold `find` through the mount is a chain: the walker asks for a
//! directory (READDIRPLUS), waits while the server looks up every entry on
//! the backing file system (ext4 reading inodes: most of a cold walk's
//! server time), then stats what it got and moves on to the next
//! directory. With one walker, one core does the walker's part and the
//! server's part in turn, and the other core has little to do. A walker
//! lists the subdirectories of the directory it just read, in order, one
//! after another: this thread looks them up on the backing file system
//! first, on that other core, so the server's lookups find the backing
//! inodes and dentries cached. It only warms the backing kernel's caches:
//! answers are still made from the file system at request time, so nothing
//! it does can be stale. It speeds up a lone walker's cold walk; two
//! walkers keep both cores busy already and gain little (docs/results.md,
//! "Directory readahead").
//!
//! # Bounds
//! It works only [`WINDOW`] directories ahead of where the walker is, at
//! SCHED_IDLE (it runs on a core nothing else wants), on at most
//! [`MAX_BATCHES`] directories' lists of subdirectories. A list holds its
//! directory's node and the fd the listing found cached for it (see
//! [`Parent`]; without one, the node's cached fd at the time, else the list
//! is skipped), and the one fd the thread opens takes a slot of the budget
//! like every backing fd. Lists are fed by READDIRPLUS and by the
//! READDIRs that go on with a listing past its first reply. A listing that no walker follows (`ls -l`)
//! costs at most [`WINDOW`] directories' lookups. It is fed only while one READDIRPLUS
//! runs at a time (`PlusLoad::alone`): with two walkers both cores are busy
//! and there is nothing to win.
//!
//! # Order
//! Batches form a stack: a directory's subdirectories are pushed when it is
//! listed, so the deepest batch is worked first, as a depth-first walker
//! descends. When a listing starts for a directory of some batch, the
//! batches above it are done (the walker left their subtrees), and the
//! thread moves past that directory (the server is looking it up now). If
//! it is warming that very directory, it stops.

use crate::fdpool::{Fd, FdPool};
use crate::node::Node;
use crate::sys;
use parking_lot::{Condvar, Mutex};
use std::ffi::CString;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Directories warmed ahead of the one the walker is listing.
pub(crate) const WINDOW: usize = 8;
/// Lists of subdirectories kept at once (the oldest is dropped first).
pub(crate) const MAX_BATCHES: usize = 16;
/// Subdirectories kept per list: beyond them the walker is on its own.
const MAX_SUBDIRS: usize = 4096;

/// A listed directory's subdirectories, in listing order. `D` is how the
/// directory is reached (its node; anything in the tests).
struct Batch<D> {
    dir: D,
    dev: u64,
    ino: u64,
    subdirs: Vec<(CString, u64)>,
    /// One past the subdirectory the walker lists now (0: none yet).
    walker: usize,
    /// The next subdirectory to warm.
    next: usize,
    /// Whether the listing reached the directory's end. Until then the
    /// batch stays, warmed or not, for the rest of the listing to extend:
    /// a batch dropped once warmed and made again from the rest would
    /// warm another window for a walker that has not moved.
    complete: bool,
}

/// The batches and what the thread is doing; everything here runs under
/// `Shared::state`'s lock.
struct State<D> {
    batches: Vec<Batch<D>>,
    /// The directory being warmed, as (dev, ino).
    busy: Option<(u64, u64)>,
    shutdown: bool,
}

impl<D> Default for State<D> {
    fn default() -> Self {
        State {
            batches: Vec::new(),
            busy: None,
            shutdown: false,
        }
    }
}

/// A directory to warm: its parent, its name, device and inode number.
type Job<D> = (D, CString, u64, u64);

impl<D: Clone> State<D> {
    /// The walker lists directory (dev, ino) now. Returns whether that is
    /// the directory being warmed (which should stop).
    fn reading(&mut self, dev: u64, ino: u64) -> bool {
        let found = self
            .batches
            .iter()
            .enumerate()
            .rev()
            .find_map(|(b, batch)| {
                if batch.dev != dev {
                    return None;
                }
                // The walker moves forward through a batch: look from where it is.
                let from = batch.walker.saturating_sub(1);
                let k = batch.subdirs[from..].iter().position(|&(_, i)| i == ino)?;
                Some((b, from + k))
            });
        if let Some((b, k)) = found {
            // The batches above are subtrees the walker has left.
            self.batches.truncate(b + 1);
            let batch = &mut self.batches[b];
            batch.walker = k + 1;
            batch.next = batch.next.max(k + 1);
        }
        self.busy == Some((dev, ino))
    }

    /// Directory (dev, ino), reached through `dir`, was listed (or part of
    /// it, up to its end if `complete`) and has these subdirectories.
    fn listed(
        &mut self,
        dir: &D,
        dev: u64,
        ino: u64,
        mut subdirs: Vec<(CString, u64)>,
        complete: bool,
    ) {
        match self.batches.last_mut() {
            // The rest of a listing the kernel asked for in pieces.
            Some(top) if top.dev == dev && top.ino == ino && !top.complete => {
                let room = MAX_SUBDIRS.saturating_sub(top.subdirs.len());
                top.subdirs.extend(subdirs.into_iter().take(room));
                top.complete = complete;
            }
            _ if subdirs.is_empty() => {}
            _ => {
                if self.batches.len() == MAX_BATCHES {
                    self.batches.remove(0);
                }
                subdirs.truncate(MAX_SUBDIRS);
                self.batches.push(Batch {
                    dir: dir.clone(),
                    dev,
                    ino,
                    subdirs,
                    walker: 0,
                    next: 0,
                    complete,
                });
            }
        }
    }

    /// The next directory to warm: the deepest batch's next subdirectory
    /// within the window; a batch below only once every subdirectory above
    /// it has been warmed.
    fn pick(&mut self) -> Option<Job<D>> {
        for batch in self.batches.iter_mut().rev() {
            if batch.next < batch.subdirs.len() {
                if batch.next >= batch.walker + WINDOW {
                    return None;
                }
                let (name, ino) = batch.subdirs[batch.next].clone();
                batch.next += 1;
                return Some((batch.dir.clone(), name, batch.dev, ino));
            }
        }
        None
    }

    /// Whether every batch has been warmed to its listing's end.
    fn exhausted(&self) -> bool {
        self.batches
            .iter()
            .all(|b| b.complete && b.next >= b.subdirs.len())
    }
}

/// What the thread has done, for `uvfs stat`.
#[derive(Default)]
pub struct PrefetchCounters {
    /// Directories read ahead of the walker.
    pub dirs: AtomicU64,
    /// Entries looked up in them.
    pub entries: AtomicU64,
    /// Warmings stopped because the walker reached the directory first.
    pub overtaken: AtomicU64,
}

/// A listed directory as its list reaches it: the node, and its fd as the
/// listing found it cached. A list lives as long as the walker is in the
/// directory, which for a directory of thousands of subdirectories is
/// longer than the pool keeps an fd nobody else uses: without its own
/// reference the list would be skipped from the moment the pool took the
/// fd back. The reference keeps the fd counted in the budget (it goes back
/// when the list ends), so at most [`MAX_BATCHES`] fds are kept this way.
#[derive(Clone)]
struct Parent {
    node: Arc<Node>,
    fd: Option<Arc<Fd>>,
}

struct Shared {
    state: Mutex<State<Parent>>,
    cv: Condvar,
    /// Set when the walker reaches the directory being warmed.
    stop: AtomicBool,
    /// Whether any batch is queued (spares the lock when none is).
    armed: AtomicBool,
    pool: Arc<FdPool>,
    counters: PrefetchCounters,
}

/// The readahead thread's handle; the thread ends when this is dropped.
pub(crate) struct Prefetcher {
    shared: Arc<Shared>,
}

impl Prefetcher {
    /// Starts the thread. Without it (it could not be started), listings
    /// are served without readahead.
    pub(crate) fn start(pool: Arc<FdPool>) -> Option<Prefetcher> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            pool,
            counters: PrefetchCounters::default(),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("uvfs-prefetch".into())
            .spawn(move || run(s))
            .ok()?;
        Some(Prefetcher { shared })
    }

    /// Counters.
    pub(crate) fn counters(&self) -> &PrefetchCounters {
        &self.shared.counters
    }

    /// A listing of directory (dev, ino) starts: the walker is there.
    pub(crate) fn reading(&self, dev: u64, ino: u64) {
        // Relaxed: a batch queued concurrently with this listing cannot
        // name the directory being listed before its own listing ends.
        if !self.shared.armed.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.shared.state.lock();
        if st.reading(dev, ino) {
            self.shared.stop.store(true, Ordering::Relaxed);
        }
        self.shared.cv.notify_one();
    }

    /// Directory (dev, ino), reachable through `dir`, was listed (part of
    /// it, or up to its end if `complete`) and has these subdirectories
    /// (name, inode number).
    pub(crate) fn listed(
        &self,
        dir: &Arc<Node>,
        dev: u64,
        ino: u64,
        subdirs: Vec<(CString, u64)>,
        complete: bool,
    ) {
        // Relaxed: as in `reading`; with nothing queued there is no batch
        // for the end of a listing to complete.
        if subdirs.is_empty() && !(complete && self.shared.armed.load(Ordering::Relaxed)) {
            return;
        }
        let parent = Parent {
            node: dir.clone(),
            fd: dir.cached_fd(),
        };
        let mut st = self.shared.state.lock();
        st.listed(&parent, dev, ino, subdirs, complete);
        self.shared.armed.store(true, Ordering::Relaxed);
        self.shared.cv.notify_one();
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        st.shutdown = true;
        st.batches.clear();
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.cv.notify_one();
    }
}

fn run(shared: Arc<Shared>) {
    idle_policy();
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let job = {
            let mut st = shared.state.lock();
            loop {
                if st.shutdown {
                    return;
                }
                if let Some(job) = st.pick() {
                    st.busy = Some((job.2, job.3));
                    shared.stop.store(false, Ordering::Relaxed);
                    break job;
                }
                st.busy = None;
                if st.exhausted() {
                    st.batches.clear();
                    shared.armed.store(false, Ordering::Relaxed);
                }
                shared.cv.wait(&mut st);
            }
        };
        let (dir, name, dev, _) = job;
        warm(&shared, &dir, &name, dev, &mut buf);
    }
}

/// Looks up every entry of `dir`/`name` (a directory on device `dev`),
/// unless the walker gets there first.
fn warm(shared: &Shared, dir: &Parent, name: &CString, dev: u64, buf: &mut [u8]) {
    // A slot of the budget, like any backing fd; none left: skip.
    let Ok(slot) = shared.pool.reserve() else {
        return;
    };
    // O_NOATIME: reading ahead must not touch what the user may never
    // list. Without the right to it, no readahead for that directory.
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NOATIME;
    // The parent's fd is borrowed only for the open.
    let parent = dir.fd.clone().or_else(|| dir.node.cached_fd());
    let Some(Ok(fd)) = parent.map(|d| sys::openat(d.as_fd(), name, flags)) else {
        return;
    };
    let fd = slot.into_fd(fd);
    // Something mounted there since it was listed: not ours to read.
    if !sys::statx_fd(fd.as_fd()).is_ok_and(|st| sys::stx_dev(&st) == dev) {
        return;
    }
    let mut looked = 0u64;
    'read: while let Ok(n @ 1..) = sys::getdents(fd.as_fd(), buf) {
        for d in sys::dirents(&buf[..n]) {
            if shared.stop.load(Ordering::Relaxed) {
                shared.counters.overtaken.fetch_add(1, Ordering::Relaxed);
                break 'read;
            }
            if matches!(d.name, b"." | b"..") {
                continue;
            }
            if let Ok(c) = sys::cstr(d.name) {
                // Only the lookup's side effect matters: the entry's
                // dentry and inode cached by the backing kernel. Never an
                // automount: nothing the walker asked for.
                let _ = sys::statx_at(fd.as_fd(), &c, rustix::fs::AtFlags::NO_AUTOMOUNT);
                looked += 1;
            }
        }
    }
    shared.counters.dirs.fetch_add(1, Ordering::Relaxed);
    shared.counters.entries.fetch_add(looked, Ordering::Relaxed);
}

/// Runs this thread at SCHED_IDLE: on a core nothing else wants.
fn idle_policy() {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is this thread; `p` is a valid param for SCHED_IDLE.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: u64, first_ino: u64) -> Vec<(CString, u64)> {
        (0..n)
            .map(|i| (CString::new(format!("d{i}")).unwrap(), first_ino + i))
            .collect()
    }

    /// Drains what the thread would warm now, as inode numbers.
    fn drain(st: &mut State<u32>) -> Vec<u64> {
        std::iter::from_fn(|| st.pick().map(|j| j.3)).collect()
    }

    #[test]
    fn warms_only_a_window_ahead_of_the_walker() {
        let mut st = State::default();
        st.listed(&0, 1, 100, names(20, 1000), true);
        // Nothing listed by the walker yet: the first WINDOW subdirectories.
        assert_eq!(
            drain(&mut st),
            (1000..1000 + WINDOW as u64).collect::<Vec<_>>()
        );
        // The walker in the third: the window moves to end after it.
        assert!(!st.reading(1, 1002));
        assert_eq!(
            drain(&mut st),
            (1000 + WINDOW as u64..1003 + WINDOW as u64).collect::<Vec<_>>()
        );
        // A listing that no walker follows costs no more than that.
        assert!(drain(&mut st).is_empty());
    }

    #[test]
    fn the_walker_overtakes_and_skips_ahead() {
        let mut st = State::default();
        st.listed(&0, 1, 100, names(30, 1000), true);
        st.busy = Some((1, 1000));
        // The walker lists the directory being warmed: stop it.
        assert!(st.reading(1, 1000));
        // Far ahead of anything warmed: nothing before it is warmed now.
        st.reading(1, 1020);
        assert_eq!(drain(&mut st).first(), Some(&1021));
        // Same inode number on another device: not ours.
        st.busy = Some((1, 1025));
        assert!(!st.reading(2, 1025));
    }

    #[test]
    fn depth_first_the_deepest_batch_goes_first_and_left_subtrees_are_dropped() {
        let mut st = State::default();
        // The root lists 3 subdirectories; the walker enters the first.
        st.listed(&0, 1, 1, names(3, 10), true);
        st.reading(1, 10);
        st.listed(&1, 1, 10, names(3, 100), true);
        // The deeper batch first, then the rest of the one below.
        assert_eq!(drain(&mut st), vec![100, 101, 102, 11, 12]);
        assert!(st.exhausted());
        // Back up in the root's second subdirectory: the first's batch is
        // dropped.
        st.listed(&1, 1, 10, names(2, 200), true);
        st.reading(1, 11);
        assert_eq!(st.batches.len(), 1);
        assert_eq!(st.batches[0].ino, 1);
    }

    #[test]
    fn a_batch_warmed_before_its_listing_ends_is_kept_for_the_rest() {
        let mut st = State::default();
        // A first reply of 3 subdirectories, all warmed at once.
        st.listed(&0, 1, 5, names(3, 10), false);
        assert_eq!(drain(&mut st), vec![10, 11, 12]);
        assert!(!st.exhausted(), "the listing goes on");
        // The rest: the window counts what was warmed already.
        st.listed(&0, 1, 5, names(20, 13), false);
        assert_eq!(drain(&mut st), (13..10 + WINDOW as u64).collect::<Vec<_>>());
        // The listing's end, naming no subdirectory, completes it.
        st.listed(&0, 1, 5, Vec::new(), true);
        assert_eq!(st.batches.len(), 1);
        assert!(st.batches[0].complete);
    }

    #[test]
    fn a_listing_in_pieces_extends_its_batch_and_batches_are_bounded() {
        let mut st = State::default();
        st.listed(&0, 1, 5, names(2, 10), false);
        st.listed(&0, 1, 5, names(2, 12), true);
        assert_eq!(st.batches.len(), 1);
        assert_eq!(st.batches[0].subdirs.len(), 4);
        // Listed again from the start: a batch of its own.
        st.listed(&0, 1, 5, names(2, 10), true);
        assert_eq!(st.batches.len(), 2);
        for d in 0..(MAX_BATCHES as u64 + 5) {
            st.listed(&0, 1, 1000 + d, names(1, 5000 + d), true);
        }
        assert_eq!(st.batches.len(), MAX_BATCHES);
        // The oldest went first.
        assert_eq!(st.batches[0].ino, 1000 + 5);
        st.listed(&0, 1, 7, names(MAX_SUBDIRS as u64 + 10, 1), true);
        assert_eq!(st.batches.last().unwrap().subdirs.len(), MAX_SUBDIRS);
    }
}
