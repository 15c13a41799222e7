//! The slow path's bookkeeping: granted and waiting ranges under one mutex.
//!
//! Everything that is not a fast-path reader lives here: every writer
//! (granted or waiting), readers whose range did not fit a slot or whose
//! slot was marked or taken, and writers asleep until a slot drains.
//!
//! # Fairness
//!
//! Waiting requests form one FIFO queue. A request is granted when it is
//! compatible with every granted range *and* with every earlier request
//! still waiting that overlaps it. So a reader never overtakes a waiting
//! writer it overlaps (no writer starvation), a writer never overtakes a
//! reader waiting before it, and requests on disjoint ranges never wait for
//! each other. When a range is released, or a waiter gives up, the queue is
//! rescanned in order and exactly the requests that became grantable are
//! handed the lock and woken: nobody else is woken.

use crate::parker::Parker;
use crate::range::ByteRange;
use crate::sync::Arc;
use std::collections::VecDeque;

/// Shared (read) or exclusive (write, truncate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Readers: any number may hold overlapping shared ranges at once.
    Shared,
    /// Writers and truncates: no other holder may overlap the range.
    Exclusive,
}

/// Two requests conflict when they overlap and one is exclusive.
#[inline]
pub(crate) fn conflicts(a: &ByteRange, am: Mode, b: &ByteRange, bm: Mode) -> bool {
    a.overlaps(b) && (am == Mode::Exclusive || bm == Mode::Exclusive)
}

struct Granted {
    id: u64,
    range: ByteRange,
    mode: Mode,
}

struct Waiting {
    id: u64,
    range: ByteRange,
    mode: Mode,
    parker: Arc<Parker>,
}

/// A writer asleep until the readers in one slot (or one biased reader
/// entry) leave; `slot` is the slot's or entry's key.
struct Drainer {
    slot: usize,
    parker: Arc<Parker>,
}

pub(crate) struct Queue {
    granted: Vec<Granted>,
    waiting: VecDeque<Waiting>,
    drainers: Vec<Drainer>,
    next_id: u64,
    /// When the bias was last turned on (`bias::now_ns`).
    pub(crate) biased_at: u64,
    /// The current inhibit period (ns), doubled while revocations come soon
    /// after each re-bias (see "Inhibit" in `bias.rs`).
    pub(crate) inhibit_ns: u64,
}

impl Queue {
    pub(crate) const fn new() -> Self {
        Queue {
            granted: Vec::new(),
            waiting: VecDeque::new(),
            drainers: Vec::new(),
            next_id: 1,
            biased_at: 0,
            inhibit_ns: 0,
        }
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Grants `range` at once if fairness allows; otherwise `None`.
    pub(crate) fn try_grant(&mut self, range: ByteRange, mode: Mode) -> Option<u64> {
        let blocked = self
            .granted
            .iter()
            .any(|g| conflicts(&g.range, g.mode, &range, mode))
            || self
                .waiting
                .iter()
                .any(|w| conflicts(&w.range, w.mode, &range, mode));
        if blocked {
            return None;
        }
        let id = self.id();
        self.granted.push(Granted { id, range, mode });
        Some(id)
    }

    /// Queues a request that could not be granted; returns its id.
    pub(crate) fn enqueue(&mut self, range: ByteRange, mode: Mode, parker: Arc<Parker>) -> u64 {
        let id = self.id();
        self.waiting.push_back(Waiting {
            id,
            range,
            mode,
            parker,
        });
        id
    }

    /// Drops a granted range and hands the lock to whoever it unblocks.
    pub(crate) fn release(&mut self, id: u64, wake: &mut Vec<Arc<Parker>>) {
        let i = self
            .granted
            .iter()
            .position(|g| g.id == id)
            .expect("released a range that was not granted");
        let freed = self.granted.swap_remove(i).range;
        if self.waiting.iter().any(|w| w.range.overlaps(&freed)) {
            self.grant_waiters(wake);
        }
    }

    /// A waiter gives up. Returns false if it was granted meanwhile (it then
    /// holds the range and must release it or keep it).
    pub(crate) fn abandon(&mut self, id: u64, wake: &mut Vec<Arc<Parker>>) -> bool {
        match self.waiting.iter().position(|w| w.id == id) {
            Some(i) => {
                self.waiting.remove(i);
                // Later waiters it blocked may now be grantable.
                self.grant_waiters(wake);
                true
            }
            None => false,
        }
    }

    /// Rescans the queue in order, granting what fairness allows.
    fn grant_waiters(&mut self, wake: &mut Vec<Arc<Parker>>) {
        let mut still: VecDeque<Waiting> = VecDeque::with_capacity(self.waiting.len());
        while let Some(w) = self.waiting.pop_front() {
            let blocked = self
                .granted
                .iter()
                .any(|g| conflicts(&g.range, g.mode, &w.range, w.mode))
                || still
                    .iter()
                    .any(|e| conflicts(&e.range, e.mode, &w.range, w.mode));
            if blocked {
                still.push_back(w);
            } else {
                self.granted.push(Granted {
                    id: w.id,
                    range: w.range,
                    mode: w.mode,
                });
                wake.push(w.parker);
            }
        }
        self.waiting = still;
    }

    /// True while any writer holds a range (slots must not appear then).
    pub(crate) fn has_granted_writer(&self) -> bool {
        self.granted.iter().any(|g| g.mode == Mode::Exclusive)
    }

    pub(crate) fn add_drainer(&mut self, slot: usize, parker: Arc<Parker>) {
        self.drainers.push(Drainer { slot, parker });
    }

    /// Removes one sleeper (it gave up); true if others still sleep on `slot`.
    pub(crate) fn remove_drainer(&mut self, parker: &Arc<Parker>, slot: usize) -> bool {
        self.drainers.retain(|d| !Arc::ptr_eq(&d.parker, parker));
        self.drainers.iter().any(|d| d.slot == slot)
    }

    /// Takes every sleeper on `slot` for waking.
    pub(crate) fn take_drainers(&mut self, slot: usize, wake: &mut Vec<Arc<Parker>>) {
        let mut i = 0;
        while i < self.drainers.len() {
            if self.drainers[i].slot == slot {
                wake.push(self.drainers.swap_remove(i).parker);
            } else {
                i += 1;
            }
        }
    }

    pub(crate) fn granted(&self) -> impl Iterator<Item = (ByteRange, Mode)> + '_ {
        self.granted.iter().map(|g| (g.range, g.mode))
    }

    pub(crate) fn waiting(&self) -> impl Iterator<Item = (ByteRange, Mode)> + '_ {
        self.waiting.iter().map(|w| (w.range, w.mode))
    }

    pub(crate) fn drainers(&self) -> usize {
        self.drainers.len()
    }
}
