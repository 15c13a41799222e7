//! The global vnode list (`vnode_list`), an index-based doubly linked list.
//!
//! # FreeBSD
//!
//! `static TAILQ_HEAD(freelst, vnode) vnode_list`, protected by the single
//! `vnode_list_mtx`. Since D22997 it holds *every* vnode, including vnodes
//! sitting freed in UMA's caches (they are inserted by the zone's
//! `vnode_init` and removed only by `vnode_fini`), plus marker vnodes
//! (`VMARKER`) that scanners use to remember their position while they drop
//! the mutex: `vnode_list_free_marker` for `vnlru_free_*`,
//! `vnode_list_reclaim_marker` for `vlrureclaim`, and one per
//! `vnlru_alloc_marker` caller (ZFS's prune).
//!
//! # Representation
//!
//! Nodes live in a `Vec` and link by `u32` index, so no `unsafe` is needed.
//! A vnode's index is fixed for the life of its memory (as a vnode's address
//! is in FreeBSD) and stored in [`Vnode::idx`](crate::vnode::Vnode). Vacant
//! slots are recycled through a free stack. The whole structure is only
//! ever touched with `vnode_list_mtx` held (it lives inside that mutex).

use std::sync::Arc;

use crate::vnode::Vnode;

/// "No node" link value (`NULL`).
pub(crate) const NIL: u32 = u32::MAX;

/// What a list slot holds.
pub(crate) enum Entry {
    /// A vnode, live or freed-but-cached.
    Vnode(Arc<Vnode>),
    /// A scan marker (`v_type == VMARKER`).
    Marker,
    /// An unused slot, not linked.
    Vacant,
}

struct Node {
    prev: u32,
    next: u32,
    linked: bool,
    entry: Entry,
}

/// `vnode_list` plus its permanent markers.
pub(crate) struct VnodeList {
    nodes: Vec<Node>,
    head: u32,
    tail: u32,
    vacant: Vec<u32>,
    len: usize,
    /// `vnode_list_free_marker`: where `vnlru_free_*` resumes.
    pub free_marker: u32,
    /// `vnode_list_reclaim_marker`: where `vlrureclaim` resumes.
    pub reclaim_marker: u32,
}

impl VnodeList {
    /// `vntblinit`: an empty list holding the two permanent markers.
    pub(crate) fn new() -> Self {
        let mut l = Self {
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            vacant: Vec::new(),
            len: 0,
            free_marker: NIL,
            reclaim_marker: NIL,
        };
        l.free_marker = l.reserve_slot(Entry::Marker);
        l.insert_tail(l.free_marker);
        l.reclaim_marker = l.reserve_slot(Entry::Marker);
        l.insert_tail(l.reclaim_marker);
        l
    }

    /// Take a vacant slot (or grow the arena); the slot is not linked.
    fn reserve_slot(&mut self, entry: Entry) -> u32 {
        if let Some(i) = self.vacant.pop() {
            self.nodes[i as usize].entry = entry;
            return i;
        }
        self.nodes.push(Node {
            prev: NIL,
            next: NIL,
            linked: false,
            entry,
        });
        (self.nodes.len() - 1) as u32
    }

    /// `vnode_init`: allocate a slot for fresh vnode memory and link it just
    /// before the free marker, so the next free scan reaches it last.
    pub(crate) fn insert_new_vnode(&mut self, make: impl FnOnce(u32) -> Arc<Vnode>) -> Arc<Vnode> {
        let i = self.reserve_slot(Entry::Vacant);
        let vp = make(i);
        self.nodes[i as usize].entry = Entry::Vnode(Arc::clone(&vp));
        let fm = self.free_marker;
        self.insert_before(fm, i);
        vp
    }

    /// `vnlru_alloc_marker`: a new marker placed before the free marker.
    pub(crate) fn alloc_marker(&mut self) -> u32 {
        let i = self.reserve_slot(Entry::Marker);
        let fm = self.free_marker;
        self.insert_before(fm, i);
        i
    }

    /// `vnode_fini` / `vnlru_free_marker`: unlink a slot and make it vacant,
    /// returning what it held.
    pub(crate) fn release(&mut self, i: u32) -> Entry {
        if (i as usize) >= self.nodes.len() {
            return Entry::Vacant;
        }
        self.remove(i);
        let e = std::mem::replace(&mut self.nodes[i as usize].entry, Entry::Vacant);
        if !matches!(e, Entry::Vacant) {
            self.vacant.push(i);
        }
        e
    }

    /// `TAILQ_NEXT` (`None` is `NULL`); from `NIL`, the head.
    #[inline]
    pub(crate) fn next(&self, i: u32) -> Option<u32> {
        let n = if i == NIL {
            self.head
        } else {
            self.nodes.get(i as usize).map_or(NIL, |n| n.next)
        };
        (n != NIL).then_some(n)
    }

    #[inline]
    pub(crate) fn entry(&self, i: u32) -> &Entry {
        match self.nodes.get(i as usize) {
            Some(n) => &n.entry,
            None => &Entry::Vacant,
        }
    }

    /// Number of linked nodes, markers included.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `TAILQ_REMOVE`; a no-op for unlinked slots.
    pub(crate) fn remove(&mut self, i: u32) {
        let Some(n) = self.nodes.get(i as usize) else {
            return;
        };
        if !n.linked {
            return;
        }
        let (p, nx) = (n.prev, n.next);
        if p == NIL {
            self.head = nx;
        } else {
            self.nodes[p as usize].next = nx;
        }
        if nx == NIL {
            self.tail = p;
        } else {
            self.nodes[nx as usize].prev = p;
        }
        let n = &mut self.nodes[i as usize];
        n.prev = NIL;
        n.next = NIL;
        n.linked = false;
        self.len -= 1;
    }

    fn link(&mut self, i: u32, prev: u32, next: u32) {
        {
            let n = &mut self.nodes[i as usize];
            n.prev = prev;
            n.next = next;
            n.linked = true;
        }
        if prev == NIL {
            self.head = i;
        } else {
            self.nodes[prev as usize].next = i;
        }
        if next == NIL {
            self.tail = i;
        } else {
            self.nodes[next as usize].prev = i;
        }
        self.len += 1;
    }

    /// `TAILQ_INSERT_TAIL` (unlinks `i` first if needed).
    pub(crate) fn insert_tail(&mut self, i: u32) {
        self.remove(i);
        let t = self.tail;
        self.link(i, t, NIL);
    }

    /// `TAILQ_INSERT_HEAD` (unlinks `i` first if needed).
    pub(crate) fn insert_head(&mut self, i: u32) {
        self.remove(i);
        let h = self.head;
        self.link(i, NIL, h);
    }

    /// `TAILQ_INSERT_AFTER(anchor, i)` (unlinks `i` first if needed).
    pub(crate) fn insert_after(&mut self, anchor: u32, i: u32) {
        if anchor == i {
            return;
        }
        self.remove(i);
        let next = self.nodes[anchor as usize].next;
        self.link(i, anchor, next);
    }

    /// `TAILQ_INSERT_BEFORE(anchor, i)` (unlinks `i` first if needed).
    pub(crate) fn insert_before(&mut self, anchor: u32, i: u32) {
        if anchor == i {
            return;
        }
        self.remove(i);
        let prev = self.nodes[anchor as usize].prev;
        self.link(i, prev, anchor);
    }

    /// All vnodes on the list (live and cached), for tests.
    #[cfg(test)]
    pub(crate) fn vnodes(&self) -> impl Iterator<Item = &Arc<Vnode>> {
        self.nodes.iter().filter_map(|n| match &n.entry {
            Entry::Vnode(vp) if n.linked => Some(vp),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(l: &VnodeList) -> Vec<u32> {
        let mut v = Vec::new();
        let mut i = NIL;
        while let Some(n) = l.next(i) {
            v.push(n);
            i = n;
        }
        v
    }

    #[test]
    fn markers_move_and_release() {
        let mut l = VnodeList::new();
        let (f, r) = (l.free_marker, l.reclaim_marker);
        assert_eq!(order(&l), vec![f, r]);
        let m = l.alloc_marker();
        assert_eq!(order(&l), vec![m, f, r]);
        l.insert_after(r, m);
        assert_eq!(order(&l), vec![f, r, m]);
        l.insert_head(r);
        assert_eq!(order(&l), vec![r, f, m]);
        assert!(matches!(l.release(m), Entry::Marker));
        assert_eq!(order(&l), vec![r, f]);
        assert_eq!(l.len(), 2);
        // The vacant slot is reused.
        assert_eq!(l.alloc_marker(), m);
    }
}
