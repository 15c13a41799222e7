//! `mutex-list`: FreeBSD's rangelock as it was until 2023 (benchmark
//! baseline only).
//!
//! One mutex (the vnode interlock there) over a queue of every request,
//! granted or waiting, in arrival order. A request is granted when no
//! earlier entry conflicts with it; every lock and every unlock takes the
//! mutex and rescans the queue. Waiters sleep on one condition variable.

use super::BenchLock;
use std::sync::{Condvar, Mutex, MutexGuard};
use uvfs_rangelock::ByteRange;

struct Entry {
    id: u64,
    range: ByteRange,
    write: bool,
    granted: bool,
}

#[derive(Default)]
struct List {
    entries: Vec<Entry>,
    next_id: u64,
}

impl List {
    fn blocked(&self, i: usize) -> bool {
        let e = &self.entries[i];
        self.entries[..i]
            .iter()
            .any(|p| p.range.overlaps(&e.range) && (p.write || e.write))
    }
}

#[derive(Default)]
pub struct MutexList {
    list: Mutex<List>,
    cv: Condvar,
}

/// Releases its entry on drop.
pub struct MutexListGuard<'a> {
    lock: &'a MutexList,
    id: u64,
}

impl MutexList {
    fn list(&self) -> MutexGuard<'_, List> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn acquire(&self, range: ByteRange, write: bool) -> MutexListGuard<'_> {
        let mut l = self.list();
        let id = l.next_id;
        l.next_id += 1;
        l.entries.push(Entry {
            id,
            range,
            write,
            granted: false,
        });
        loop {
            let i = l
                .entries
                .iter()
                .position(|e| e.id == id)
                .expect("own entry");
            if l.entries[i].granted || !l.blocked(i) {
                l.entries[i].granted = true;
                return MutexListGuard { lock: self, id };
            }
            l = self.cv.wait(l).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for MutexListGuard<'_> {
    fn drop(&mut self) {
        let mut l = self.lock.list();
        let i = l
            .entries
            .iter()
            .position(|e| e.id == self.id)
            .expect("own entry");
        l.entries.remove(i);
        // Rescan: grant every waiter no earlier entry blocks now.
        let mut woke = false;
        for j in 0..l.entries.len() {
            if !l.entries[j].granted && !l.blocked(j) {
                l.entries[j].granted = true;
                woke = true;
            }
        }
        drop(l);
        if woke {
            self.lock.cv.notify_all();
        }
    }
}

impl BenchLock for MutexList {
    const NAME: &'static str = "mutex-list";
    type Read<'a> = MutexListGuard<'a>;
    type Write<'a> = MutexListGuard<'a>;
    fn new() -> Self {
        Self::default()
    }
    fn read(&self, r: ByteRange) -> Self::Read<'_> {
        self.acquire(r, false)
    }
    fn write(&self, r: ByteRange) -> Self::Write<'_> {
        self.acquire(r, true)
    }
}
