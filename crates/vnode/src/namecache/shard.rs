//! One shard of the name cache: its entries in a slab, an index over them,
//! and their LRU order.
//!
//! # Layout
//!
//! Entries live in `slots`, one 64-byte slot each (hash, directory,
//! target, stamp, LRU links, the name inline): entering a name allocates
//! nothing of its own once the slab has room, and probing for one touches
//! the index and then the one line of its slot. The index is a hash table
//! of slot numbers; LRU order and the free slots are chains of slot
//! numbers through the slots themselves (`prev`/`next`), as the free-vnode
//! lists chain theirs. Everything here is plain data under the shard's
//! mutex; the vnodes' links to entries ([`crate::nclinks`]) are the caller's.
//!
//! # Compaction
//!
//! A shard that held many entries and lost most of them would keep its
//! slab at its peak size for ever (a mass `rm -r` through a file system
//! that names every file here). Once the shard is seven-eighths empty,
//! [`Shard::compact`] moves the entries at the top of the slab into free
//! slots below twice the live count and gives the rest back, telling the
//! caller each move so it can rewrite the moved entry's handles (O(live)
//! work, after at least three times as many removals).

use super::name::NcName;
use crate::aged::{Aged, EMPTY};
use crate::sync::Arc;
use crate::vnode::Vnode;
use hashbrown::HashTable;

/// "No slot" in a chain.
pub(crate) const NIL: u32 = u32::MAX;

/// One entry, or a free slot (`dir` is `None`; `next` chains free slots).
pub(crate) struct Slot {
    hash: u64,
    dir: Option<Arc<Vnode>>,
    target: Option<Arc<Vnode>>,
    /// Last entered or hit ([`crate::clock::stamp`]): orders eviction
    /// across shards.
    stamp: u64,
    prev: u32,
    next: u32,
    name: NcName,
}

impl Slot {
    /// The directory the entry is under (a live slot's).
    pub(crate) fn dir(&self) -> &Arc<Vnode> {
        self.dir.as_ref().expect("a live slot has a directory")
    }

    /// What the name resolves to; `None` for a negative entry.
    pub(crate) fn target(&self) -> Option<&Arc<Vnode>> {
        self.target.as_ref()
    }

    #[inline]
    fn dir_addr(&self) -> usize {
        self.dir.as_ref().map_or(0, |d| Arc::as_ptr(d) as usize)
    }
}

pub(crate) struct Shard {
    slots: Vec<Slot>,
    index: HashTable<u32>,
    head: u32,
    tail: u32,
    free: u32,
    len: usize,
    /// The head entry's stamp (EMPTY when none), kept by every change of
    /// the head so publishing it costs no look at the head's slot.
    head_stamp: u64,
    /// Slab size under which the shard is never compacted.
    min_slots: usize,
}

impl Aged for Shard {
    fn head_stamp(&self) -> u64 {
        self.head_stamp
    }
}

impl Shard {
    pub(crate) fn new(min_slots: usize) -> Self {
        Shard {
            slots: Vec::new(),
            index: HashTable::new(),
            head: NIL,
            tail: NIL,
            free: NIL,
            len: 0,
            head_stamp: EMPTY,
            min_slots: min_slots.max(1),
        }
    }

    /// Entries in the shard.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slots in the slab, live or free.
    #[cfg(test)]
    pub(crate) fn slab_len(&self) -> usize {
        self.slots.len()
    }

    /// The entry for (`dir`, `name`) whose hash is `hash`.
    #[inline]
    pub(crate) fn find(&self, hash: u64, dir: usize, name: &[u8]) -> Option<u32> {
        self.index
            .find(hash, |&i| {
                let s = &self.slots[i as usize];
                s.hash == hash && s.dir_addr() == dir && s.name.as_bytes() == name
            })
            .copied()
    }

    /// The entry in slot `i`, if the slot holds one.
    #[inline]
    pub(crate) fn get(&self, i: u32) -> Option<&Slot> {
        self.slots.get(i as usize).filter(|s| s.dir.is_some())
    }

    /// Enters a new entry (the caller checked there is none for its key)
    /// as the most recently used; returns its slot.
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        dir: Arc<Vnode>,
        target: Option<Arc<Vnode>>,
        name: &[u8],
    ) -> u32 {
        let stamp = crate::clock::stamp();
        let slot = Slot {
            hash,
            dir: Some(dir),
            target,
            stamp,
            prev: self.tail,
            next: NIL,
            name: NcName::new(name),
        };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.slots[i as usize].next;
            self.slots[i as usize] = slot;
            i
        } else {
            assert!(self.slots.len() < NIL as usize, "name-cache shard full");
            self.slots.push(slot);
            (self.slots.len() - 1) as u32
        };
        match self.tail {
            NIL => {
                self.head = i;
                self.head_stamp = stamp;
            }
            t => self.slots[t as usize].next = i,
        }
        self.tail = i;
        self.len += 1;
        let Shard { slots, index, .. } = self;
        index.insert_unique(hash, i, |&j| slots[j as usize].hash);
        i
    }

    /// Marks slot `i`'s entry the most recently used.
    pub(crate) fn touch(&mut self, i: u32) {
        let stamp = crate::clock::stamp();
        if i != self.tail {
            let (prev, next) = {
                let s = &self.slots[i as usize];
                (s.prev, s.next)
            };
            // Not the tail, so `next` is a slot.
            match prev {
                NIL => {
                    self.head = next;
                    self.head_stamp = self.slots[next as usize].stamp;
                }
                p => self.slots[p as usize].next = next,
            }
            self.slots[next as usize].prev = prev;
            self.slots[self.tail as usize].next = i;
            let s = &mut self.slots[i as usize];
            s.prev = self.tail;
            s.next = NIL;
            self.tail = i;
        }
        self.slots[i as usize].stamp = stamp;
        if self.head == i {
            self.head_stamp = stamp;
        }
    }

    /// Replaces slot `i`'s target; returns the old one.
    pub(crate) fn set_target(&mut self, i: u32, t: Option<Arc<Vnode>>) -> Option<Arc<Vnode>> {
        std::mem::replace(&mut self.slots[i as usize].target, t)
    }

    /// Removes slot `i`'s entry; returns its directory and target.
    pub(crate) fn take(&mut self, i: u32) -> (Arc<Vnode>, Option<Arc<Vnode>>) {
        let (hash, prev, next, dir, target) = {
            let s = &mut self.slots[i as usize];
            let dir = s.dir.take().expect("taking a live slot");
            s.name = NcName::default();
            (s.hash, s.prev, s.next, dir, s.target.take())
        };
        match prev {
            NIL => {
                self.head = next;
                self.head_stamp = match next {
                    NIL => EMPTY,
                    n => self.slots[n as usize].stamp,
                };
            }
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
        match self.index.find_entry(hash, |&x| x == i) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => unreachable!("a live slot is indexed"),
        }
        let s = &mut self.slots[i as usize];
        s.prev = NIL;
        s.next = self.free;
        self.free = i;
        self.len -= 1;
        (dir, target)
    }

    /// The least recently used entry's slot.
    pub(crate) fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Every entry, with its slot.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.dir.is_some())
            .map(|(i, s)| (i as u32, s))
    }

    /// Whether the shard is seven-eighths empty and worth compacting.
    #[inline]
    pub(crate) fn sparse(&self) -> bool {
        self.slots.len() > self.min_slots && self.len * 8 < self.slots.len()
    }

    /// Moves every entry into the bottom of the slab (below twice the live
    /// count) and frees the rest; `moved(from, to, slot)` is told of each
    /// move while the slot is at its new place.
    pub(crate) fn compact(&mut self, mut moved: impl FnMut(u32, u32, &Slot)) {
        let keep = (self.len * 2).max(self.min_slots);
        if keep >= self.slots.len() {
            return;
        }
        // The free slots below `keep`: at least as many as the entries
        // above it, since keep >= len.
        let mut low = Vec::new();
        let mut f = self.free;
        while f != NIL {
            if (f as usize) < keep {
                low.push(f);
            }
            f = self.slots[f as usize].next;
        }
        for i in keep..self.slots.len() {
            if self.slots[i].dir.is_none() {
                continue;
            }
            let from = i as u32;
            let to = low.pop().expect("a free slot below twice the live count");
            self.slots.swap(i, to as usize);
            let (prev, next, hash) = {
                let s = &self.slots[to as usize];
                (s.prev, s.next, s.hash)
            };
            match prev {
                NIL => self.head = to,
                p => self.slots[p as usize].next = to,
            }
            match next {
                NIL => self.tail = to,
                n => self.slots[n as usize].prev = to,
            }
            *self
                .index
                .find_mut(hash, |&x| x == from)
                .expect("a live slot is indexed") = to;
            moved(from, to, &self.slots[to as usize]);
        }
        // Everything from `keep` up is free now.
        self.slots.truncate(keep);
        self.slots.shrink_to_fit();
        self.free = NIL;
        for &f in low.iter().rev() {
            self.slots[f as usize].next = self.free;
            self.free = f;
        }
        let Shard { slots, index, .. } = self;
        index.shrink_to(self.len, |&j| slots[j as usize].hash);
    }

    /// Checks the shard's structure (tests): chains, index and count agree.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut n = 0;
        let mut prev = NIL;
        let mut i = self.head;
        while i != NIL {
            let s = &self.slots[i as usize];
            assert!(s.dir.is_some(), "LRU chain reaches a free slot");
            assert_eq!(s.prev, prev);
            assert_eq!(
                self.find(s.hash, s.dir_addr(), s.name.as_bytes()),
                Some(i),
                "entry found through the index"
            );
            prev = i;
            i = s.next;
            n += 1;
        }
        assert_eq!(self.tail, prev);
        assert_eq!(n, self.len);
        assert_eq!(self.index.len(), self.len);
        let mut free = 0;
        let mut f = self.free;
        while f != NIL {
            assert!(self.slots[f as usize].dir.is_none());
            f = self.slots[f as usize].next;
            free += 1;
        }
        assert_eq!(free + self.len, self.slots.len());
        let head_stamp = match self.head {
            NIL => EMPTY,
            h => self.slots[h as usize].stamp,
        };
        assert_eq!(self.head_stamp, head_stamp);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::layer::VnodeLayer;
    use crate::{Ino, VType, VnodeRef};

    struct NoHooks;
    impl crate::FsHooks for NoHooks {}

    fn vnodes(n: u64) -> (Arc<VnodeLayer>, Vec<VnodeRef>) {
        let layer = VnodeLayer::new(Config::with_limit(1000));
        let m = layer.mount("t", Arc::new(NoHooks));
        let v = (0..n)
            .map(|i: Ino| {
                layer
                    .get(&m, i + 1, || Ok((VType::Dir, Arc::new(()))))
                    .unwrap()
            })
            .collect();
        (layer, v)
    }

    fn addr(v: &VnodeRef) -> usize {
        Arc::as_ptr(v.arc()) as usize
    }

    #[test]
    fn slots_are_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }

    #[test]
    fn insert_find_touch_take_keep_lru_order_and_index() {
        let (_l, v) = vnodes(2);
        let mut s = Shard::new(4);
        let a = s.insert(1, v[0].arc().clone(), None, b"a");
        let b = s.insert(2, v[0].arc().clone(), Some(v[1].arc().clone()), b"b");
        let c = s.insert(1, v[1].arc().clone(), None, b"a");
        s.check();
        assert_eq!(s.find(1, addr(&v[0]), b"a"), Some(a));
        assert_eq!(
            s.find(1, addr(&v[1]), b"a"),
            Some(c),
            "same hash, other dir"
        );
        assert_eq!(s.find(2, addr(&v[0]), b"a"), None, "other hash");
        assert_eq!(s.front(), Some(a));
        s.touch(a);
        s.check();
        assert_eq!(s.front(), Some(b));
        let (d, t) = s.take(b);
        assert!(Arc::ptr_eq(&d, v[0].arc()) && t.is_some());
        s.check();
        assert_eq!(s.front(), Some(c));
        assert!(s.get(b).is_none());
        let again = s.insert(3, v[0].arc().clone(), None, b"c");
        assert_eq!(again, b, "a freed slot is reused");
        s.check();
        s.touch(again);
        s.check();
    }

    #[test]
    fn compaction_moves_entries_down_and_reports_every_move() {
        let (_l, v) = vnodes(1);
        let mut s = Shard::new(8);
        let names: Vec<String> = (0..200)
            .map(|i| format!("name-{i}-of-a-longer-kind"))
            .collect();
        let slots: Vec<u32> = names
            .iter()
            .enumerate()
            .map(|(i, n)| s.insert(i as u64, v[0].arc().clone(), None, n.as_bytes()))
            .collect();
        // Keep every 20th entry; touch some so LRU order differs from slots.
        for (i, &slot) in slots.iter().enumerate() {
            if i % 20 != 0 {
                drop(s.take(slot));
            }
        }
        s.touch(slots[40]);
        s.touch(slots[0]);
        assert!(s.sparse());
        let mut where_now: Vec<(u64, u32)> = Vec::new();
        let mut moves = Vec::new();
        s.compact(|from, to, slot| moves.push((from, to, slot.hash)));
        s.check();
        assert_eq!(s.len(), 10);
        assert_eq!(s.slab_len(), 20, "twice the live count is kept");
        for (i, n) in names.iter().enumerate().step_by(20) {
            let at = s
                .find(i as u64, addr(&v[0]), n.as_bytes())
                .expect("still found");
            assert!((at as usize) < 20);
            where_now.push((i as u64, at));
        }
        for (from, to, hash) in &moves {
            assert!(*from >= 20 && *to < 20);
            assert!(where_now.contains(&(*hash, *to)));
        }
        let order: Vec<u64> = {
            let mut o = Vec::new();
            let mut i = s.head;
            while i != NIL {
                o.push(s.slots[i as usize].hash);
                i = s.slots[i as usize].next;
            }
            o
        };
        assert_eq!(order, vec![20, 60, 80, 100, 120, 140, 160, 180, 40, 0]);
        // The freed slots are reused after the move.
        let n = s.insert(999, v[0].arc().clone(), None, b"new");
        assert!((n as usize) < 20);
        s.check();
    }
}
