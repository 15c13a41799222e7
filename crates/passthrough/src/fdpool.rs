//! The fd budget: every descriptor the server opens on the backing tree is
//! counted here, and idle cached `O_PATH` fds are given back before any
//! request fails for want of one.
//!
//! # Accounting
//! An fd exists only as an [`Fd`], made from a [`Reservation`] taken
//! *before* the system call that opens it. So `used` (fds open now:
//! cached `O_PATH` fds, fds borrowed by operations in progress, open files
//! and directories, transient fds of a lookup) never exceeds `budget`, by
//! construction rather than by after-the-fact checks: the kernel can never
//! answer `EMFILE` to the server as long as the budget is under
//! `RLIMIT_NOFILE` minus the few fds the process keeps outside the pool
//! (FUSE channels, the control socket, stdio).
//!
//! # Eviction (CLOCK)
//! Nodes that cache an fd sit on one ring (`clock`), entered when their fd
//! is installed. Every use of a cached fd sets the node's `referenced`
//! bit; a lookup never touches the ring. When a reservation finds the
//! budget spent, it pops nodes off the ring: a referenced node has its bit
//! cleared and goes to the back (second chance); a node whose fd is
//! borrowed by an operation in progress goes to the back; an idle,
//! unreferenced node gives its fd up (closed at once) and leaves the ring.
//! When a whole sweep finds nothing to take, idle open files give their
//! fds back (the relief, [`FdPool::set_relief`]: `park.rs`); only when
//! that frees none either does the reservation fail (`EMFILE`): then
//! every fd is in active use, or an open file that must keep it.
//!
//! # Open files' share
//! Every process's open files on the mount are this server's fds, out of
//! one budget, where natively each process has a limit of its own. So
//! that the processes holding the most files open cannot starve the
//! others of `ls` and `stat` (a lookup needs a directory's fd and the new
//! node's), new opens of files leave [`FdPool::name_reserve`] fds to
//! everything else (lookups, attributes, directory listings): past that
//! share an OPEN of a file already open with the same flags shares that
//! open's description (`open.rs`), any other has idle open files give
//! their fds back (`park.rs`), and only failing that is refused with
//! `EMFILE` ("too many open files"). The
//! limit is the mount's rather than the caller's own, which `ENFILE`
//! would say; but the caller's own opens on the mount are what spend it,
//! and `EMFILE` is what programs (and test suites: LTP's `open04`) meet
//! filling their table and know to answer by closing files, and what
//! every other FUSE server answers when its own table is full. Opens
//! handed over by a predecessor are taken back whatever the share
//! ([`FdPool::reserve_handed_over`]): refusing them would fail an upgrade.
//!
//! The ring holds `Weak`s, so a node freed with its vnode leaves a dead
//! entry behind; dead entries are dropped when met and the ring is
//! compacted whenever it has grown to twice its live size.
//!
//! # Lock order
//! `clock` before a node's `fd` mutex, which the evictor only *tries*
//! (a node busy installing its fd is skipped, never waited for). Nothing
//! else is locked under `clock`, and an [`Fd`]'s drop takes no lock, so
//! closing fds (even a node's last `Arc` dropped under `clock`) is safe.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use uvfs_vfs::{Errno, VfsResult};

/// Most evictions one reservation tries before giving up (each frees one
/// fd, which a concurrent reservation may take first).
const MAX_EVICT_ROUNDS: usize = 1024;

/// Cached and borrowed fds (those not open files) beyond which caching
/// one more gives an idle one back. A reopen through a handle costs a
/// few microseconds, so keeping every directory's fd saves little, while
/// holding thousands of them makes a long-running server look like it
/// leaks (and pins their inodes in the backing file system's cache).
pub const CACHED_FDS: usize = 64;

/// Smallest budget accepted: a lookup needs the directory's fd and the
/// new one, a fallback reopen one more per ancestor it must reopen.
pub const MIN_BUDGET: usize = 8;

/// Fds a process keeps outside the pool: stdio, a `/dev/fuse` clone per
/// request loop, the control socket and its connections, files read in
/// /proc. A budget may use all the others.
pub const RESERVED_FDS: usize = 128;

/// Counters of the pool (see [`PassthroughFs::stats`](crate::PassthroughFs::stats)).
#[derive(Default, Debug)]
pub struct PoolCounters {
    /// Fds opened through the pool.
    pub opened: AtomicU64,
    /// Cached fds given back by CLOCK eviction.
    pub evictions: AtomicU64,
    /// Nodes given a second chance by the sweep.
    pub second_chances: AtomicU64,
    /// Reservations refused because nothing could be evicted.
    pub exhausted: AtomicU64,
    /// Opens past the open files' share of the budget: each shared
    /// another open's description (`opens_shared`) or was refused
    /// (`EMFILE`).
    pub opens_refused: AtomicU64,
    /// Opens past the share that took another open's description.
    pub opens_shared: AtomicU64,
    /// Idle open files' fds given back to make room (`park.rs`).
    pub parked: AtomicU64,
    /// Parked open files' fds opened again for a request.
    pub unparked: AtomicU64,
    /// Idle cached fds given back because more than [`CACHED_FDS`] were
    /// cached (of `evictions`).
    pub trimmed: AtomicU64,
}

/// Gives fds back that no cached fd's eviction could: how many.
pub type Relief = Box<dyn Fn() -> usize + Send + Sync>;

/// The budget and the ring of cached fds.
pub struct FdPool {
    /// Called when a reservation finds nothing to evict (idle open files
    /// giving their fds back, `park.rs`).
    relief: std::sync::OnceLock<Relief>,
    budget: usize,
    used: AtomicUsize,
    max_used: AtomicUsize,
    open_files: AtomicUsize,
    clock: Mutex<Ring>,
    /// Counters.
    pub counters: PoolCounters,
}

/// What the evictor found on a node.
pub(crate) enum Evict {
    /// No cached fd (taken already, or reclaimed): drop the ring entry.
    NoFd,
    /// Used since the last sweep: second chance.
    Referenced,
    /// Its fd is borrowed by an operation in progress, or the node is
    /// busy: try later.
    Busy,
    /// Here is its fd, to close.
    Taken(Arc<Fd>),
}

/// What sits on the CLOCK ring: a holder of one cached fd of the pool (a
/// node, `node.rs`). A trait so that the pool needs nothing of nodes,
/// which hold its [`Fd`]s.
pub(crate) trait FdHolder: Send + Sync {
    /// The evictor's step (called with the ring locked).
    fn try_evict(&self) -> Evict;

    /// The device of the file the fd is of.
    fn dev(&self) -> u64;
}

#[derive(Default)]
struct Ring {
    q: VecDeque<Weak<dyn FdHolder>>,
    /// Length after the last compaction (compact again at twice this).
    compacted_len: usize,
}

/// The right to open one fd; dropping it unused gives the slot back.
pub struct Reservation {
    pool: Arc<FdPool>,
    open_file: bool,
    /// Cleared once the slot belongs to an `Fd`.
    armed: bool,
}

/// An open descriptor counted against the budget; closed on drop.
pub struct Fd {
    /// Closed in `drop` before the slot is given back.
    fd: ManuallyDrop<OwnedFd>,
    pool: Arc<FdPool>,
    open_file: bool,
}

impl FdPool {
    /// A pool allowing `budget` fds at once (at least [`MIN_BUDGET`]).
    pub fn new(budget: usize) -> Arc<FdPool> {
        Arc::new(FdPool {
            relief: std::sync::OnceLock::new(),
            budget: budget.max(MIN_BUDGET),
            used: AtomicUsize::new(0),
            max_used: AtomicUsize::new(0),
            open_files: AtomicUsize::new(0),
            clock: Mutex::new(Ring::default()),
            counters: PoolCounters::default(),
        })
    }

    /// The default budget for a process allowed `nofile` descriptors on
    /// a machine of `cpus` possible CPUs: all but what the process keeps
    /// outside the pool (FUSE channels, the control socket, an io_uring
    /// queue's 64 entry buffers per CPU and the 512 more its queues may
    /// borrow for parked lock waits, the closing thread's 32), at most a
    /// quarter. The budget caps how many files all callers
    /// together hold open, so every fd kept out of it for nothing is one
    /// open refused.
    pub fn default_budget(nofile: u64, cpus: usize) -> usize {
        let n = usize::try_from(nofile).unwrap_or(usize::MAX / 4);
        let outside = (1024 + 80 * cpus).min(n / 4).max(Self::kept_outside(n));
        n.saturating_sub(outside).max(MIN_BUDGET)
    }

    /// Fds that new opens leave to lookups, attributes and listings: a
    /// sixteenth of the budget, between 2 (a lookup's two) and 256.
    pub fn name_reserve(&self) -> usize {
        (self.budget / 16).clamp(2, 256)
    }

    /// The largest budget that keeps the pool's promise (the kernel never
    /// answers `EMFILE`) for a process allowed `nofile` descriptors: all
    /// but [`RESERVED_FDS`]. A larger budget would let the pool believe in
    /// fds the kernel refuses, and a request would fail where eviction
    /// should have made room.
    pub fn max_budget(nofile: u64) -> usize {
        let n = usize::try_from(nofile).unwrap_or(usize::MAX / 4);
        n.saturating_sub(Self::kept_outside(n)).max(MIN_BUDGET)
    }

    /// The fewest fds kept outside the pool for a process allowed `n`:
    /// [`RESERVED_FDS`], or half of a smaller limit: under a small limit
    /// the server needs fewer outside the pool, and keeping the whole
    /// reserve left it the least budget, where other callers' lookups
    /// failed with `EMFILE` beside a few readers.
    fn kept_outside(n: usize) -> usize {
        RESERVED_FDS.min(n / 2)
    }

    /// Sets what a reservation calls once nothing is left to evict,
    /// before it fails (once; later calls are ignored).
    pub fn set_relief(&self, relief: Relief) {
        let _ = self.relief.set(relief);
    }

    /// The budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Fds open now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Most fds ever open at once.
    pub fn max_used(&self) -> usize {
        self.max_used.load(Ordering::Relaxed)
    }

    /// Open files and directories now (a part of `used`).
    pub fn open_files(&self) -> usize {
        self.open_files.load(Ordering::Relaxed)
    }

    /// Whether caching one more node fd would give another back
    /// (`enter`): the cache holds [`CACHED_FDS`] already.
    pub fn cache_full(&self) -> bool {
        self.not_open() >= CACHED_FDS
    }

    /// Fds open now that are not open files: cached, borrowed or
    /// transient.
    fn not_open(&self) -> usize {
        self.used
            .load(Ordering::Relaxed)
            .saturating_sub(self.open_files.load(Ordering::Relaxed))
    }

    /// Nodes on the CLOCK ring (live or not yet swept).
    pub fn ring_len(&self) -> usize {
        self.clock.lock().q.len()
    }

    /// Reserves one fd, evicting idle cached fds if the budget is spent;
    /// `EMFILE` if every fd is an open file or in use.
    pub fn reserve(self: &Arc<Self>) -> VfsResult<Reservation> {
        self.reserve_kind(false)
    }

    /// Like [`FdPool::reserve`], for a new open file or directory:
    /// `EMFILE` if open files already hold all but
    /// [`name_reserve`](Self::name_reserve) of the budget.
    pub fn reserve_open(self: &Arc<Self>) -> VfsResult<Reservation> {
        // A count, not a claim: concurrent opens may pass together and
        // take a few of the reserve, never more than one per thread.
        if self.open_files.load(Ordering::Relaxed) + self.name_reserve() >= self.budget {
            self.counters.opens_refused.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::EMFILE);
        }
        self.reserve_kind(true)
    }

    /// Like [`FdPool::reserve_open`], for a directory being listed: within
    /// the whole budget, as `ls` is what the reserve keeps working.
    pub fn reserve_opendir(self: &Arc<Self>) -> VfsResult<Reservation> {
        self.reserve_kind(true)
    }

    /// Like [`FdPool::reserve_open`], for an open file a predecessor
    /// handed over (or a crashed server's journal listed): within the
    /// budget, whatever the share.
    pub fn reserve_handed_over(self: &Arc<Self>) -> VfsResult<Reservation> {
        self.reserve_kind(true)
    }

    fn reserve_kind(self: &Arc<Self>, open_file: bool) -> VfsResult<Reservation> {
        let mut rounds = 0;
        loop {
            let cur = self.used.load(Ordering::Relaxed);
            if cur < self.budget {
                // Relaxed: the count is the only shared state; the fd
                // itself is published by whoever installs it.
                if self
                    .used
                    .compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    self.max_used.fetch_max(cur + 1, Ordering::Relaxed);
                    if open_file {
                        self.open_files.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(Reservation {
                        pool: self.clone(),
                        open_file,
                        armed: true,
                    });
                }
                continue;
            }
            rounds += 1;
            if rounds > MAX_EVICT_ROUNDS || !(self.evict_one() || self.relieve()) {
                self.counters.exhausted.fetch_add(1, Ordering::Relaxed);
                return Err(Errno::EMFILE);
            }
        }
    }

    /// Runs the relief (`set_relief`): whether it gave any fd back.
    fn relieve(&self) -> bool {
        let n = self.relief.get().map_or(0, |r| r());
        self.counters.parked.fetch_add(n as u64, Ordering::Relaxed);
        n > 0
    }

    fn release(&self, open_file: bool) {
        if open_file {
            self.open_files.fetch_sub(1, Ordering::Relaxed);
        }
        self.used.fetch_sub(1, Ordering::Relaxed);
    }

    /// Puts a node that just cached an fd on the ring; past
    /// [`CACHED_FDS`] fds that are not open files, gives one idle cached
    /// fd back (CLOCK), so that a walk holds about as many fds as it
    /// lists directories at once, not one per directory it ever saw.
    pub(crate) fn enter<H: FdHolder + 'static>(&self, node: &Arc<H>) {
        {
            let mut r = self.clock.lock();
            r.q.push_back(Arc::downgrade(node) as Weak<dyn FdHolder>);
            if r.q.len() > 2 * r.compacted_len.max(512) {
                r.q.retain(|w| w.strong_count() > 0);
                r.compacted_len = r.q.len();
            }
        }
        if self.not_open() > CACHED_FDS && self.evict_one() {
            self.counters.trimmed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One CLOCK sweep step: closes one idle cached fd. False if a whole
    /// turn of the ring found none.
    pub fn evict_one(&self) -> bool {
        let mut r = self.clock.lock();
        let mut budget = r.q.len() * 2 + 1;
        while budget > 0 {
            budget -= 1;
            let Some(w) = r.q.pop_front() else {
                return false;
            };
            let Some(node) = w.upgrade() else {
                continue;
            };
            match node.try_evict() {
                Evict::NoFd => {}
                Evict::Referenced => {
                    self.counters.second_chances.fetch_add(1, Ordering::Relaxed);
                    r.q.push_back(w);
                }
                Evict::Busy => r.q.push_back(w),
                Evict::Taken(fd) => {
                    drop(r);
                    drop(fd);
                    self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
            }
        }
        false
    }

    /// Gives back the cached fds of files not on device `dev` that were
    /// not used since the last call (the first call clears their
    /// referenced bits): called now and then, it keeps such an fd for
    /// about as long as its file is in use. An idle fd of a file on
    /// another file system mounted inside the source would otherwise keep
    /// that file system busy, and the host's `umount` of it failing, for
    /// as long as the node is cached.
    pub(crate) fn evict_idle_off(&self, dev: u64) -> usize {
        let mut taken = Vec::new();
        {
            let mut r = self.clock.lock();
            for _ in 0..r.q.len() {
                let Some(w) = r.q.pop_front() else { break };
                let Some(node) = w.upgrade() else { continue };
                if node.dev() == dev {
                    r.q.push_back(w);
                    continue;
                }
                match node.try_evict() {
                    Evict::NoFd => {}
                    Evict::Referenced | Evict::Busy => r.q.push_back(w),
                    Evict::Taken(fd) => taken.push(fd),
                }
            }
        }
        let n = taken.len();
        drop(taken);
        self.counters
            .evictions
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Closes every idle cached fd (tests, and `uvfs` diagnostics).
    pub fn evict_all(&self) -> usize {
        let mut n = 0;
        while self.evict_one() {
            n += 1;
        }
        n
    }
}

impl Reservation {
    /// Binds the reserved slot to a freshly opened fd.
    pub fn into_fd(mut self, fd: OwnedFd) -> Fd {
        self.armed = false;
        self.pool.counters.opened.fetch_add(1, Ordering::Relaxed);
        Fd {
            fd: ManuallyDrop::new(fd),
            pool: self.pool.clone(),
            open_file: self.open_file,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            self.pool.release(self.open_file);
        }
    }
}

impl Fd {
    /// The raw descriptor (valid while `self` lives).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl std::os::fd::AsFd for Fd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // Closed before its slot is given back: a slot freed first could
        // be reserved and opened by another thread while this fd is still
        // open, one fd over the budget per thread.
        // SAFETY: `fd` is dropped exactly once, here, and never used after.
        unsafe { ManuallyDrop::drop(&mut self.fd) };
        self.pool.release(self.open_file);
    }
}

impl std::fmt::Debug for Fd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fd({})", self.raw())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devnull() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn budget_is_never_exceeded() {
        let pool = FdPool::new(MIN_BUDGET);
        let fds: Vec<Fd> = (0..MIN_BUDGET)
            .map(|_| pool.reserve().unwrap().into_fd(devnull()))
            .collect();
        assert_eq!(pool.used(), MIN_BUDGET);
        // Nothing cached, so nothing to evict: refused, not exceeded.
        assert_eq!(pool.reserve().err(), Some(Errno::EMFILE));
        assert_eq!(pool.counters.exhausted.load(Ordering::Relaxed), 1);
        assert_eq!(pool.reserve_handed_over().err(), Some(Errno::EMFILE));
        drop(fds);
        assert_eq!(pool.used(), 0);
        let r = pool.reserve_open().unwrap();
        assert_eq!(pool.open_files(), 1);
        drop(r);
        assert_eq!((pool.used(), pool.open_files()), (0, 0));
        assert_eq!(pool.max_used(), MIN_BUDGET);
    }

    #[test]
    fn open_files_leave_the_name_reserve_to_lookups() {
        let pool = FdPool::new(64);
        let reserve = pool.name_reserve();
        assert!(reserve >= 2);
        let opens: Vec<Fd> = std::iter::from_fn(|| pool.reserve_open().ok())
            .map(|r| r.into_fd(devnull()))
            .collect();
        assert_eq!(opens.len(), 64 - reserve);
        assert_eq!(pool.reserve_open().err(), Some(Errno::EMFILE));
        assert!(pool.counters.opens_refused.load(Ordering::Relaxed) >= 1);
        // What the opens left, lookups get, all of it.
        let names: Vec<Fd> = (0..reserve)
            .map(|_| pool.reserve().unwrap().into_fd(devnull()))
            .collect();
        assert_eq!(pool.used(), 64);
        drop(names);
        // A handed-over open is taken within the budget, past the share.
        let handed = pool.reserve_handed_over().unwrap().into_fd(devnull());
        assert_eq!(pool.open_files(), 64 - reserve + 1);
        drop((handed, opens));
        assert_eq!((pool.used(), pool.open_files()), (0, 0));
    }

    #[test]
    fn the_default_budget_keeps_room_outside_the_pool() {
        // This machine's limit: a few hundred fds short of it, not a
        // quarter.
        assert_eq!(FdPool::default_budget(20_000, 2), 20_000 - 1184);
        // Small limits keep a quarter; many CPUs keep room for their
        // queues' buffers.
        assert_eq!(FdPool::default_budget(1024, 2), 768);
        assert_eq!(FdPool::default_budget(20_000, 64), 15_000);
        assert!(FdPool::default_budget(20_000, 2) <= FdPool::max_budget(20_000));
        assert_eq!(FdPool::default_budget(0, 1), MIN_BUDGET);
        // Limits under 256 keep half.
        assert_eq!(FdPool::default_budget(64, 2), 32);
        assert_eq!(FdPool::default_budget(128, 2), 64);
        assert_eq!(FdPool::default_budget(256, 2), 128);
        for n in [16, 64, 100, 128, 255, 256, 1024] {
            assert!(FdPool::default_budget(n, 2) <= FdPool::max_budget(n), "{n}");
        }
    }
}
