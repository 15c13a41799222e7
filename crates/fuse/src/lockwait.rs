//! Lock requests (SETLK, SETLKW) of a file system that keeps locks, answered
//! off the request loops: those that must wait, and the page-cache
//! invalidation every granted lock is answered after.
//!
//! # Waiting
//!
//! A file system that keeps locks (`FileSystem::forwards_locks`) takes them
//! without waiting (`setlk` answers `EAGAIN` while another holder's lock
//! conflicts). A SETLKW that meets a conflict is parked here, and one
//! thread tries the parked ones again, sooner after a request arrives and
//! less often the longer nothing changes (1 ms doubling to 50 ms), until
//! each is granted, fails, or is interrupted. So a lock held for an hour
//! ties up no request loop (a process holding one and asking the server
//! for anything else must still be answered), and one thread serves every
//! waiting lock.
//!
//! # Deadlocks
//!
//! The kernel answers `EDEADLK` to a local POSIX lock wait that would
//! close a cycle (A waits for B, who waits for A); a file system that
//! keeps its locks elsewhere (the passthrough's OFD locks on its source)
//! gets no such check. So a SETLKW about to be parked, and a parked one
//! whose way is barred by another owner than before, follows the chain:
//! the owner holding what it waits for (`FileSystem::lock_holder`), that
//! owner's own parked wait, its holder... and is answered `EDEADLK` if
//! the chain comes back to it. Again when the holder changes because a
//! wait that met a lock whose holder waits for nothing may, once that lock
//! goes, meet one whose holder waits for it; as the kernel checks a wait
//! again when the lock it met goes, and only then.
//!
//! # Interrupts
//!
//! A process waiting in `fcntl(F_SETLKW)` or `flock` that gets a signal
//! makes the kernel send INTERRUPT naming the request; the parked request
//! is then answered `EINTR`. Without that the caller could not even be
//! killed: once a request has reached the server, the kernel waits for its
//! answer uninterruptibly. An INTERRUPT may overtake the request it names
//! (they travel on different request loops), so the ids of INTERRUPTs that
//! found nothing parked are remembered (the last [`REMEMBERED`]), and a
//! request parked later under one of them is answered at once. Over FUSE
//! over io_uring the kernel can lose an INTERRUPT altogether; so every
//! [`SIGNAL_LOOK`] the waiting callers' pending signals are read, and a
//! wait whose caller has one is answered `EINTR` as its INTERRUPT would
//! have been (`caller_signal.rs`).
//!
//! # Fresh data under a lock
//!
//! Locks are how programs that share a file with other users (SQLite, say)
//! know when to read it again; but the kernel caches this mount's pages
//! and attributes of the file (kept across opens), and another user of the
//! source may have changed it while the lock was elsewhere. So a granted
//! lock is answered only after the kernel has dropped the file's cached
//! pages and attributes (FUSE_NOTIFY_INVAL_INODE), as NFS revalidates on
//! locking. Done here, not on a request loop: the invalidation waits for
//! pages under I/O, whose READ or WRITE needs a request loop to answer.

use crate::convert::errno;
use fuser::{INodeNo, Notifier, ReplyEmpty};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_vfs::{Errno, Fh, FileLock, FileSystem, VnodeRef};

/// INTERRUPTs remembered for requests not parked (yet).
const REMEMBERED: usize = 64;
/// First and longest pause between tries.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(50);
/// How often waiting callers' pending signals are read (each a read of
/// a /proc file, under the lock request loops park with): how late at
/// most a signal whose INTERRUPT was lost ends its wait.
const SIGNAL_LOOK: Duration = Duration::from_millis(250);

/// A SETLKW that met a conflict.
pub(crate) struct Parked {
    /// The request's id (what an INTERRUPT names).
    pub unique: u64,
    /// The caller's thread (whose pending signals end a wait whose
    /// INTERRUPT was lost: `caller_signal.rs`).
    pub tid: u32,
    /// The node the lock is on (what the invalidation names).
    pub nodeid: u64,
    pub vp: VnodeRef,
    pub fh: Fh,
    pub owner: u64,
    pub lock: FileLock,
    pub flock: bool,
    pub reply: ReplyEmpty,
    /// The lock owner (of this mount) found in its way when last looked
    /// at (None when parked: `park` sets it).
    pub holder: Option<u64>,
}

/// A granted lock whose answer waits for the invalidation.
struct Granted {
    nodeid: u64,
    reply: ReplyEmpty,
}

#[derive(Default)]
struct State {
    parked: Vec<Parked>,
    granted: Vec<Granted>,
    /// Ids of INTERRUPTs that found nothing parked, newest last.
    early: VecDeque<u64>,
    /// A request was parked since the thread last looked: try soon.
    arrived: bool,
    /// The server is gone: answer what is parked and stop.
    shutdown: bool,
    running: bool,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// The parked requests and the thread that retries them.
pub(crate) struct LockWaiter {
    shared: Arc<Shared>,
    /// Set once the session runs (`start`); without it (a channel with no
    /// kernel cache to invalidate) grants are answered at once.
    notifier: std::sync::OnceLock<Notifier>,
}

impl Default for LockWaiter {
    fn default() -> Self {
        LockWaiter {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                cv: Condvar::new(),
            }),
            notifier: std::sync::OnceLock::new(),
        }
    }
}

impl LockWaiter {
    /// Gives the waiter the session's notifier.
    pub(crate) fn set_notifier(&self, n: Notifier) {
        let _ = self.notifier.set(n);
    }

    /// Answers a lock granted on a request loop: after the invalidation,
    /// on the waiter's thread.
    pub(crate) fn granted(&self, fs: &Arc<dyn FileSystem>, nodeid: u64, reply: ReplyEmpty) {
        if self.notifier.get().is_none() {
            reply.ok();
            return;
        }
        let mut st = self.shared.state.lock();
        if st.shutdown || !self.ensure_thread(&mut st, fs) {
            drop(st);
            reply.ok();
            return;
        }
        st.granted.push(Granted { nodeid, reply });
        self.shared.cv.notify_one();
    }

    /// Parks `p` (answering at once if it was already interrupted),
    /// starting the waiter thread on first use.
    pub(crate) fn park(&self, fs: &Arc<dyn FileSystem>, p: Parked) {
        let mut st = self.shared.state.lock();
        if let Some(i) = st.early.iter().position(|&u| u == p.unique) {
            st.early.remove(i);
            drop(st);
            p.reply.error(errno(Errno::EINTR));
            return;
        }
        if st.shutdown {
            drop(st);
            p.reply.error(errno(Errno::EINTR));
            return;
        }
        if fuser::uring_queue_room().is_some_and(|room| room <= QUEUE_SPARE) {
            // Over FUSE over io_uring a parked wait keeps its ring entry,
            // and a queue grows only so far (64 entries, then what the
            // process's pool of 512 lends: fuser's `uring/growth.rs`):
            // with them all held by waits, no request of that CPU's
            // callers is taken until a lock goes: one user's waits
            // through root's mount would hold up every other user there.
            // Refused as the kernel refuses a lock past its limits.
            drop(st);
            note_refused();
            p.reply.error(errno(Errno::ENOLCK));
            return;
        }
        if !self.ensure_thread(&mut st, fs) {
            // No thread: nothing can wait. Answer as the kernel does when
            // it cannot take a lock.
            drop(st);
            p.reply.error(errno(Errno::ENOLCK));
            return;
        }
        // Decided under the state lock, so that two waits closing one
        // cycle together cannot both miss it (the second to park sees the
        // first).
        let mut p = p;
        if !p.flock {
            p.holder = fs.lock_holder(&p.vp, p.owner, &p.lock);
            if closes_a_cycle(&**fs, &st.parked, &p) {
                drop(st);
                p.reply.error(errno(Errno::EDEADLK));
                return;
            }
        }
        // Its ring entry (over io_uring) is held until the lock goes:
        // requests the kernel queued behind it must still get the queue's
        // other entries.
        fuser::uring_reply_held();
        st.parked.push(p);
        st.arrived = true;
        self.shared.cv.notify_one();
    }

    /// Starts the thread unless it runs; false if it cannot be started.
    fn ensure_thread(&self, st: &mut State, fs: &Arc<dyn FileSystem>) -> bool {
        if st.running {
            return true;
        }
        let (shared, fs) = (self.shared.clone(), fs.clone());
        let notifier = self.notifier.get().cloned();
        let spawned = std::thread::Builder::new()
            .name("uvfs-lockwait".into())
            .spawn(move || run(shared, fs, notifier));
        st.running = spawned.is_ok();
        st.running
    }

    /// The kernel gave up request `unique` (its caller got a signal).
    pub(crate) fn interrupt(&self, unique: u64) {
        let mut st = self.shared.state.lock();
        if let Some(i) = st.parked.iter().position(|p| p.unique == unique) {
            let p = st.parked.swap_remove(i);
            drop(st);
            p.reply.error(errno(Errno::EINTR));
            return;
        }
        if st.early.len() == REMEMBERED {
            st.early.pop_front();
        }
        st.early.push_back(unique);
    }

    /// Requests waiting now.
    pub(crate) fn parked(&self) -> usize {
        self.shared.state.lock().parked.len()
    }
}

impl Drop for LockWaiter {
    fn drop(&mut self) {
        self.shared.state.lock().shutdown = true;
        self.shared.cv.notify_all();
    }
}

/// Entries of an io_uring queue left to other requests: a wait that would
/// leave fewer is refused.
const QUEUE_SPARE: usize = 8;

/// Says that lock waits were refused for a queue's sake: the first time
/// and at each power of two.
fn note_refused() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static REFUSED: AtomicU64 = AtomicU64::new(0);
    let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        log::warn!(
            "lock waits refused with ENOLCK ({n} so far): the waits parked on one CPU's \
             io_uring queue held all but {QUEUE_SPARE} of the entries it can have, which \
             its other requests need (--transport dev has no such bound)"
        );
    }
}

/// Most waits followed from a new one (the kernel's bound for POSIX
/// locks, `MAX_DEADLK_ITERATIONS`).
const MAX_CHAIN: usize = 10;

/// Whether `p`'s wait would close a cycle of POSIX lock waits: the owner
/// holding what it waits for waits here for what an owner holds who ...
/// holds what `p`'s owner holds. The owner whose wait would close it is
/// answered `EDEADLK`, as the kernel answers for local locks. An owner
/// with several waits (threads of one process) is followed through the
/// first found, as the kernel does: a process is taken to wait in one
/// `fcntl` at a time.
fn closes_a_cycle(fs: &dyn FileSystem, parked: &[Parked], p: &Parked) -> bool {
    let mut holder = p.holder;
    for _ in 0..MAX_CHAIN {
        let Some(h) = holder else {
            return false;
        };
        if h == p.owner {
            return true;
        }
        let Some(w) = parked.iter().find(|q| q.owner == h && !q.flock) else {
            return false;
        };
        holder = fs.lock_holder(&w.vp, w.owner, &w.lock);
    }
    false
}

/// The waiter thread: answers grants, tries every parked request, pauses,
/// again. Invalidations and replies happen outside the state lock (an
/// invalidation may wait for a READ, and request loops take the lock to
/// park and interrupt).
fn run(shared: Arc<Shared>, fs: Arc<dyn FileSystem>, notifier: Option<Notifier>) {
    // Started by the first parked request, perhaps on an io_uring queue
    // thread (`threads.rs`).
    crate::threads::detach_from_creator();
    let answer = |g: Granted| {
        if let Some(n) = &notifier {
            // The node may be gone from the kernel's cache (ENOENT): then
            // there is nothing stale to drop.
            let _ = n.inval_inode(INodeNo(g.nodeid), 0, 0);
        }
        g.reply.ok();
    };
    let mut pause = FIRST_PAUSE;
    let mut next_look = Instant::now() + SIGNAL_LOOK;
    let mut st = shared.state.lock();
    loop {
        if st.shutdown {
            let (parked, granted) = (
                std::mem::take(&mut st.parked),
                std::mem::take(&mut st.granted),
            );
            st.running = false;
            drop(st);
            parked
                .into_iter()
                .for_each(|p| p.reply.error(errno(Errno::EINTR)));
            granted.into_iter().for_each(|g| g.reply.ok());
            return;
        }
        let mut done = std::mem::take(&mut st.granted);
        // Tried under the state lock (`setlk` never waits): an INTERRUPT
        // then finds its request still parked, or already answered.
        let mut failed = Vec::new();
        let look = Instant::now() >= next_look;
        if look {
            next_look = Instant::now() + SIGNAL_LOOK;
        }
        let mut i = 0;
        while i < st.parked.len() {
            let p = &st.parked[i];
            match fs.setlk(&p.vp, p.fh, p.owner, &p.lock, p.flock) {
                // Still in the way, perhaps now a lock of another owner,
                // who may wait for this one: checked again then, as the
                // kernel checks a wait woken when the lock it met went
                // (and only then: of two waits closing a cycle that way,
                // the one whose holder changed is refused).
                Err(e) if e == Errno::EAGAIN => {
                    let now = (!p.flock)
                        .then(|| fs.lock_holder(&p.vp, p.owner, &p.lock))
                        .flatten();
                    let moved = now != p.holder;
                    st.parked[i].holder = now;
                    let q = &st.parked[i];
                    let refused = if moved && closes_a_cycle(&*fs, &st.parked, q) {
                        Some(Errno::EDEADLK)
                    } else if look && crate::caller_signal::pending(q.tid) {
                        Some(Errno::EINTR)
                    } else {
                        None
                    };
                    match refused {
                        Some(e) => failed.push((st.parked.swap_remove(i), e)),
                        None => i += 1,
                    }
                }
                Ok(()) => {
                    let p = st.parked.swap_remove(i);
                    done.push(Granted {
                        nodeid: p.nodeid,
                        reply: p.reply,
                    });
                }
                Err(e) => failed.push((st.parked.swap_remove(i), e)),
            }
        }
        let idle = st.parked.is_empty();
        if std::mem::take(&mut st.arrived) {
            pause = FIRST_PAUSE;
        } else {
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
        if !done.is_empty() || !failed.is_empty() {
            drop(st);
            done.into_iter().for_each(answer);
            failed
                .into_iter()
                .for_each(|(p, e)| p.reply.error(errno(e)));
            st = shared.state.lock();
            continue;
        }
        if idle {
            shared.cv.wait(&mut st);
            pause = FIRST_PAUSE;
        } else {
            shared.cv.wait_for(&mut st, pause);
        }
    }
}

impl crate::report::Counted for LockWaiter {
    fn report(&self, out: &mut crate::report::Report) {
        out.put(
            "fuse.locks.waiting",
            self.parked() as u64,
            "Lock requests (SETLKW) waiting for a conflicting lock to go",
        );
    }
}
