//! Parking the io_uring queues for a live upgrade, and what a successor
//! needs of them.
//!
//! # What the kernel allows (fs/fuse/dev_uring.c)
//! - A request an entry holds (the entry is "in userspace") is answered by
//!   `COMMIT_AND_FETCH` with its commit id on the entry's queue, from any
//!   ring of any process on the connection: the kernel finds the entry by
//!   the id, copies the reply from the entry's registered addresses in the
//!   committing process, and arms the entry in the committing ring. So a
//!   successor that maps the entry's memfd at the same address
//!   (`Entry::adopt`) answers it and keeps the entry.
//! - An entry armed in a ring that is torn down is cancelled (left dead in
//!   the kernel, harmless), but one the kernel has just given a request to
//!   and whose completion has not run yet completes with the task gone:
//!   the request stays "sent" to an entry nobody holds, and its caller
//!   waits forever. So no entry may be armed when the predecessor's rings
//!   close: while parked, the predecessor arms nothing and makes requests
//!   of its own on each queue with armed entries (a forced `statx` of the
//!   mount's root from a thread pinned to the queue's CPU) until every
//!   entry holds a request (`fill`). Those requests, like every other one
//!   an entry holds, are answered by the successor.
//! - Requests that find no armed entry wait in their queue, and the kernel
//!   hands them to an entry only when an entry of that queue is committed,
//!   not when one is registered. So whenever a queue starts serving again
//!   (the successor's, or the predecessor's after a failed upgrade) one
//!   request is made on it (`nudge`): its commit pulls the waiting ones in.
//! - A request that arrived while parked is held undispatched; replies
//!   given while parked are written and kept uncommitted (the successor
//!   commits them); once sealed, a late reply (a lock granted meanwhile)
//!   is kept aside and never written: the successor serves that request
//!   again from the entry, or, if the upgrade fails, the reply is written
//!   and committed then.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use parking_lot::Condvar;
use parking_lot::Mutex;

/// An entry a predecessor's queue holds with a request in it, for its
/// successor (`Session::adopt_ring_entries`).
#[derive(Debug)]
pub struct RingEntry {
    /// Its queue.
    pub qid: u16,
    /// Where its buffers are mapped (the successor maps them there too).
    pub addr: u64,
    /// Its reply is written and only needs committing; otherwise the
    /// request is still in it, unanswered, to be served.
    pub replied: bool,
    /// Of a server that died (kept by a supervisor): what it holds is
    /// read from its buffers (`recover.rs`); `replied` is not used.
    pub recovered: bool,
    /// Its buffers.
    pub memfd: OwnedFd,
}

pub(super) const SERVE: u8 = 0;
pub(super) const PARK: u8 = 1;
pub(super) const SEAL: u8 = 2;
pub(super) const RELEASE: u8 = 3;

/// Where a queue is, as it reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Serving,
    /// Dispatching and committing nothing; `armed` entries in the kernel.
    Parked { armed: usize },
    Sealed,
}

#[derive(Debug)]
struct Slot {
    qid: u16,
    phase: Phase,
    wake: Arc<super::Shared>,
    exported: Vec<RingEntry>,
}

#[derive(Debug, Default)]
struct State {
    expected: usize,
    started: usize,
    slots: Vec<Slot>,
}

/// The session's queues as the `Pauser` sees them.
#[derive(Debug, Default)]
pub(crate) struct RingCtl {
    command: AtomicU8,
    state: Mutex<State>,
    changed: Condvar,
    /// The mount's root, for the requests `fill` and `nudge` make.
    root: Mutex<Option<PathBuf>>,
    /// Where queues keep their entries beyond this process.
    keeper: Mutex<Option<Keeper>>,
}

/// A [`super::RingKeeper`], shown by name only.
#[derive(Clone)]
struct Keeper(Arc<dyn super::RingKeeper>);

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RingKeeper")
    }
}

/// Fillers started per queue at most in one parking.
const MAX_FILLERS: usize = 4 * (super::growth::PER_QUEUE + super::growth::POOL);
const POLL: Duration = Duration::from_millis(2);
const REFILL_AFTER: Duration = Duration::from_millis(20);

impl RingCtl {
    pub(crate) fn start(&self, queues: usize) {
        self.state.lock().expected = queues;
    }

    pub(crate) fn set_root(&self, root: PathBuf) {
        *self.root.lock() = Some(root);
    }

    pub(crate) fn root(&self) -> Option<PathBuf> {
        self.root.lock().clone()
    }

    /// Queues started from now on keep their entries with `k`.
    pub(crate) fn set_keeper(&self, k: Arc<dyn super::RingKeeper>) {
        *self.keeper.lock() = Some(Keeper(k));
    }

    pub(super) fn keeper(&self) -> Option<Arc<dyn super::RingKeeper>> {
        self.keeper.lock().as_ref().map(|k| k.0.clone())
    }

    pub(super) fn command(&self) -> u8 {
        self.command.load(Ordering::SeqCst)
    }

    /// A queue thread is up (Some) or could not start (None).
    pub(super) fn started(&self, slot: Option<(u16, Arc<super::Shared>)>) {
        let mut s = self.state.lock();
        s.started += 1;
        if let Some((qid, wake)) = slot {
            s.slots.push(Slot {
                qid,
                phase: Phase::Serving,
                wake,
                exported: Vec::new(),
            });
        }
        self.changed.notify_all();
    }

    pub(super) fn gone(&self, qid: u16) {
        let mut s = self.state.lock();
        s.slots.retain(|sl| sl.qid != qid);
        self.changed.notify_all();
    }

    pub(super) fn report(&self, qid: u16, phase: Phase, exported: Vec<RingEntry>) {
        let mut s = self.state.lock();
        if let Some(sl) = s.slots.iter_mut().find(|sl| sl.qid == qid) {
            if sl.phase != phase || !exported.is_empty() {
                sl.phase = phase;
                sl.exported.extend(exported);
                self.changed.notify_all();
            }
        }
    }

    fn set(&self, command: u8) {
        self.command.store(command, Ordering::SeqCst);
        for sl in &self.state.lock().slots {
            sl.wake.wake();
        }
    }

    fn wait_all(
        &self,
        deadline: Instant,
        what: &str,
        mut done: impl FnMut(&State) -> bool,
        mut each_round: impl FnMut(&State),
    ) -> io::Result<()> {
        let mut s = self.state.lock();
        loop {
            if s.started >= s.expected && done(&s) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the io_uring queues did not {what} in time; serving again"),
                ));
            }
            each_round(&s);
            self.changed.wait_for(&mut s, POLL.min(deadline - now));
        }
    }

    /// Stops the queues dispatching and committing (`Pauser::park`).
    pub(crate) fn park(&self, deadline: Instant) -> io::Result<()> {
        self.set(PARK);
        self.wait_all(
            deadline,
            "park",
            |s| s.slots.iter().all(|sl| matches!(sl.phase, Phase::Parked { .. })),
            |_| {},
        )
    }

    /// Fills every armed entry, then seals the queues and returns what
    /// their entries hold (`Pauser::seal_rings`).
    pub(crate) fn seal(&self, deadline: Instant) -> io::Result<Vec<RingEntry>> {
        if self.state.lock().slots.is_empty() {
            return Ok(Vec::new());
        }
        let root = self.root().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "the io_uring queues cannot be handed over: the session was not told its \
                 mount's root (Session::set_ring_root)",
            )
        })?;
        let queues = self.state.lock().slots.iter().map(|s| s.qid as usize + 1).max();
        let mut started = vec![(0usize, None::<Instant>); queues.unwrap_or(0)];
        self.wait_all(
            deadline,
            "give every armed entry a request",
            |s| s.slots.iter().all(|sl| sl.phase == Phase::Parked { armed: 0 }),
            |s| {
                for sl in &s.slots {
                    if let Phase::Parked { armed } = sl.phase {
                        // Fillers land within microseconds: more are made
                        // only for entries still armed a while later (a
                        // filler that found another request in the entry
                        // waits in the queue instead).
                        let (n, last) = &mut started[sl.qid as usize];
                        if last.is_some_and(|t| t.elapsed() < REFILL_AFTER) {
                            continue;
                        }
                        *last = Some(Instant::now());
                        for _ in 0..armed.min(MAX_FILLERS.saturating_sub(*n)) {
                            *n += 1;
                            fill(sl.qid, &root);
                        }
                    }
                }
            },
        )?;
        self.set(SEAL);
        self.wait_all(
            deadline,
            "seal",
            |s| s.slots.iter().all(|sl| sl.phase == Phase::Sealed),
            |_| {},
        )?;
        let mut s = self.state.lock();
        Ok(s.slots
            .iter_mut()
            .flat_map(|sl| std::mem::take(&mut sl.exported))
            .collect())
    }

    pub(crate) fn unpark(&self) {
        let mut s = self.state.lock();
        for sl in &mut s.slots {
            sl.exported.clear();
        }
        drop(s);
        self.set(SERVE);
    }

    /// Whether the queues may be released (sealed, or none).
    pub(crate) fn sealed(&self) -> bool {
        self.command() == SEAL || self.state.lock().slots.is_empty()
    }

    pub(crate) fn release(&self) {
        self.set(RELEASE);
    }
}

fn fill(qid: u16, root: &Path) {
    super::nudge::request_on(qid, root, "fill");
}

/// Makes the kernel hand queue `qid`'s waiting requests to its entries.
pub(super) fn nudge(qid: u16, root: &Path) {
    super::nudge::request_on(qid, root, "nudge");
}
