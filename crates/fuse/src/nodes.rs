//! The node table: the one place where the kernel's lookup counts become
//! vnode holds.
//!
//! # Protocol
//! Every reply that hands the kernel a node (LOOKUP, CREATE, MKNOD, MKDIR,
//! SYMLINK, LINK, each READDIRPLUS entry other than `.` and `..`) adds one
//! to that node's `nlookup`; FORGET and BATCH_FORGET subtract what the
//! kernel says it counted. While `nlookup > 0` the table keeps one hold on
//! the node's vnode, so the vnode layer cannot recycle it and the node id
//! stays valid; at zero the entry and its hold go, and the vnode becomes
//! free once nothing else holds or uses it.
//!
//! The count is raised *before* the reply is sent, so the kernel can never
//! forget more than the table has counted. (A reply the kernel refuses,
//! because the request was interrupted meanwhile, leaves one count too
//! many: the node then lives until unmount, never too short.)
//!
//! # Node ids
//! A node id is the vnode's inode number, except that the file system's
//! root is always node id 1 (`FUSE_ROOT_ID`) and whatever inode is
//! numbered 1 takes the root's number instead: a swap, so ids stay unique.
//! Inode numbers are unique per mount for the mount's life, so the
//! generation is always 0.
//!
//! # Where the counts live
//! In the vnodes themselves (`VnodeRef::ext_acquire`/`ext_release`: the
//! count's 0 <-> nonzero edges take and drop the hold), and a node id is
//! resolved through the vnode layer's own table. A separate map from node
//! id to hold cost ~50 bytes per remembered node (a hash table's entry
//! and its power-of-two slack), a tenth of a passthrough node's memory.
//! No lock of our own: the vnode layer's table shard lock is the only
//! one taken, and holds are dropped outside it.

//!
//! # Adopted nodes (live upgrade)
//! A server that takes a mount over (`upgrade/`) is handed every node
//! the kernel holds with its count. Finding each one's file at once would
//! make requests wait for a million `vget`s; so counts are kept in
//! [`NodeTable::adopted`] by node id, and a node is found (`vget`) the
//! first time the kernel names it, its count then moving onto its vnode.
//! Every path that finds or counts a node looks there while any adopted
//! count is left (one atomic load otherwise), under its lock, so a node is
//! resolved once and its count never split. The counts are one array
//! sorted by id, as the predecessor sends them, searched in place: taking
//! a million nodes over is then a copy, where a hash map would be a
//! million inserts while every request waits.

use crate::journal::Journal;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use uvfs_vfs::{Errno, HoldRef, Ino, VfsResult, VnodeRef};
use uvfs_vnode::{Mount, VnodeLayer};

/// FUSE's root node id.
pub const ROOT_ID: u64 = 1;

/// Counters of the node table.
#[derive(Default, Debug)]
pub struct NodeCounters {
    /// Lookup counts handed to the kernel.
    pub remembered: AtomicU64,
    /// Lookup counts the kernel gave back (no more than it held: so
    /// `remembered + 1 == forgotten + lookups`, the 1 being the root's
    /// first count).
    pub forgotten: AtomicU64,
    /// Nodes dropped after their count reached zero.
    pub released: AtomicU64,
    /// FORGETs for unknown node ids or beyond the count (kernel bugs or
    /// ours; logged and clamped).
    pub forget_excess: AtomicU64,
}

/// node id -> vnode, with the kernel's lookup counts kept on the vnodes.
pub struct NodeTable {
    layer: Arc<VnodeLayer>,
    mount: Arc<Mount>,
    /// The root, pinned for the table's life whatever the kernel counts.
    root: HoldRef,
    root_ino: Ino,
    /// Nodes whose count is nonzero (the root always among them).
    nodes: AtomicUsize,
    /// Sum of the counts.
    lookups: AtomicU64,
    /// Counters.
    pub counters: Arc<NodeCounters>,
    /// Nodes handed over by a replaced server and not named since, with
    /// the kernel's counts (see "Adopted nodes").
    adopted: Mutex<Adopted>,
    /// Whether `adopted` may have counts left.
    any_adopted: AtomicBool,
    /// Finds an adopted node's vnode by inode number (`FileSystem::vget`).
    resolver: OnceLock<Resolver>,
    /// Where counts are journaled for crash recovery, once a supervisor
    /// keeps one (`journal/`): raised before the reply, lowered after the
    /// FORGET, as here.
    journal: OnceLock<Arc<Journal>>,
    /// Nodes whose counts changed while a live upgrade copied the table
    /// ahead of parking (`upgrade/`): told after every count change.
    pub(crate) changes: crate::count_changes::CountChanges,
}

/// Adopted counts: (node id, count) sorted by id, one per id; a count of
/// 0 marks a node found or forgotten since: its count is the vnode's.
#[derive(Default)]
struct Adopted {
    nodes: Vec<(u64, u64)>,
    /// Entries whose count is not 0.
    live: usize,
}

impl Adopted {
    fn slot(&self, id: u64) -> Option<usize> {
        let i = self.nodes.binary_search_by_key(&id, |n| n.0).ok()?;
        (self.nodes[i].1 > 0).then_some(i)
    }

    /// The adopted count of node `id`, if it is adopted.
    fn get(&self, id: u64) -> Option<u64> {
        self.slot(id).map(|i| self.nodes[i].1)
    }

    /// Sets the count of adopted node `id` (which `get` found); 0 ends
    /// its adoption. Returns whether any adopted node is left.
    fn set(&mut self, id: u64, count: u64) -> bool {
        if let Some(i) = self.slot(id) {
            self.nodes[i].1 = count;
            if count == 0 {
                self.live -= 1;
            }
        }
        if self.live == 0 {
            self.nodes = Vec::new();
        }
        self.live > 0
    }

    /// Adopted nodes with their counts.
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.nodes.iter().copied().filter(|n| n.1 > 0)
    }
}

/// Finds a vnode by inode number.
pub type Resolver = Box<dyn Fn(Ino) -> VfsResult<VnodeRef> + Send + Sync>;

impl NodeTable {
    /// A table for the vnodes of `mount` whose root node is `root`.
    pub fn new(layer: Arc<VnodeLayer>, mount: Arc<Mount>, root: &VnodeRef) -> NodeTable {
        // The kernel starts with one reference to the root.
        root.ext_acquire(1);
        NodeTable {
            layer,
            mount,
            root: root.hold(),
            root_ino: root.ino(),
            nodes: AtomicUsize::new(1),
            lookups: AtomicU64::new(1),
            counters: Arc::new(NodeCounters::default()),
            adopted: Mutex::new(Adopted::default()),
            any_adopted: AtomicBool::new(false),
            resolver: OnceLock::new(),
            journal: OnceLock::new(),
            changes: Default::default(),
        }
    }

    /// Journals every count from now on, the ones held now first unless
    /// the journal has them (`fill` false); before requests are served.
    pub(crate) fn attach_journal(&self, j: Arc<Journal>, fill: bool) {
        if !fill {
            let _ = self.journal.set(j);
            return;
        }
        for (_, vp, count) in self.snapshot() {
            j.set_count(vp.ino(), count, Some(&vp));
        }
        let adopted: Vec<(u64, u64)> = self.adopted.lock().iter().collect();
        for (id, count) in adopted {
            j.set_count(self.node_id(id), count, None);
        }
        let _ = self.journal.set(j);
    }

    /// The node id of inode `ino` (and, the map being a swap, the inode
    /// of node id `ino`).
    pub fn node_id(&self, ino: Ino) -> u64 {
        if ino == self.root_ino {
            ROOT_ID
        } else if ino == ROOT_ID {
            self.root_ino
        } else {
            ino
        }
    }

    /// A use reference to the vnode of node `id`: `ESTALE` if the kernel
    /// names a node it was never given or has forgotten.
    pub fn get(&self, id: u64) -> VfsResult<VnodeRef> {
        if id == ROOT_ID {
            return self.root.get().ok_or(Errno::ESTALE);
        }
        match self.layer.lookup_cached(&self.mount, self.node_id(id)) {
            Some(vp) if vp.ext_count() > 0 => Ok(vp),
            _ if self.any_adopted.load(Ordering::Acquire) => self.get_adopted(id),
            _ => Err(Errno::ESTALE),
        }
    }

    /// `get` of a node not held here: an adopted one is found now.
    fn get_adopted(&self, id: u64) -> VfsResult<VnodeRef> {
        let mut map = self.adopted.lock();
        // Found meanwhile by another request.
        if let Some(vp) = self.layer.lookup_cached(&self.mount, self.node_id(id)) {
            if vp.ext_count() > 0 {
                return Ok(vp);
            }
        }
        let Some(count) = map.get(id) else {
            log::debug!("node {id}: not held, not adopted");
            return Err(Errno::ESTALE);
        };
        let resolve = self.resolver.get().ok_or(Errno::ESTALE)?;
        // Under the lock: a node is found once, and no FORGET or lookup
        // of it moves its count meanwhile.
        let vp = resolve(self.node_id(id))
            .inspect_err(|e| log::debug!("adopted node {id} not found: {e}"))?;
        if !map.set(id, 0) {
            self.any_adopted.store(false, Ordering::Release);
        }
        drop(map);
        vp.ext_acquire(count);
        self.changes.changed(id);
        Ok(vp)
    }

    /// Moves `vp`'s adopted count, if any, onto it; true if there was one.
    fn merge_adopted(&self, id: u64, vp: &VnodeRef) -> bool {
        let mut map = self.adopted.lock();
        let Some(count) = map.get(id) else {
            return false;
        };
        if !map.set(id, 0) {
            self.any_adopted.store(false, Ordering::Release);
        }
        vp.ext_acquire(count);
        self.changes.changed(id);
        true
    }

    /// Counts one more kernel reference to `vp`; returns its node id.
    pub fn remember(&self, vp: &VnodeRef) -> u64 {
        self.remember_new(vp).0
    }

    /// Whether the kernel holds node `id`.
    pub fn contains(&self, id: u64) -> bool {
        self.get(id).is_ok()
    }

    /// Like `remember`; also says whether the kernel had no reference
    /// to the node before (a new node for the evictor, `evict.rs`).
    pub fn remember_new(&self, vp: &VnodeRef) -> (u64, bool) {
        let id = self.node_id(vp.ino());
        if let Some(j) = self.journal.get() {
            j.remembered(vp.ino(), 1, Some(vp), vp.ext_count() == 0);
        }
        let mut new = vp.ext_acquire(1);
        self.changes.changed(id);
        // A node the kernel held before the upgrade and names again: not
        // new, and its adopted count joins this one.
        if new && self.any_adopted.load(Ordering::Acquire) && self.merge_adopted(id, vp) {
            new = false;
        }
        if new {
            self.nodes.fetch_add(1, Ordering::Relaxed);
        }
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.counters.remembered.fetch_add(1, Ordering::Relaxed);
        (id, new)
    }

    /// The kernel dropped `n` references to node `id`; true if that was
    /// the last (the node is gone from the kernel).
    pub fn forget(&self, id: u64, n: u64) -> bool {
        self.forget_node(id, n).0
    }

    /// [`Nodes::forget`], and whether the node was a predecessor's that
    /// no request named since (no vnode was made for it: its file system
    /// may hold it for the kernel, `FileSystem::unclaimed_forgotten`).
    pub fn forget_node(&self, id: u64, n: u64) -> (bool, bool) {
        if self.any_adopted.load(Ordering::Acquire) {
            if let Some(gone) = self.forget_adopted(id, n) {
                return (gone, gone);
            }
        }
        (self.forget_vnode(id, n), false)
    }

    fn forget_vnode(&self, id: u64, n: u64) -> bool {
        let vp = if id == ROOT_ID {
            self.root.get()
        } else {
            self.layer.lookup_cached(&self.mount, self.node_id(id))
        };
        let Some(vp) = vp else {
            self.counters.forget_excess.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let (before, taken) = if id == ROOT_ID {
            // The root is pinned: its count never drops below one (only
            // FORGETs lower it, and the kernel sends one at a time).
            let before = vp.ext_count();
            let take = n.min(before.saturating_sub(1));
            if take > 0 {
                vp.ext_release(take);
            }
            (before, take)
        } else {
            let before = vp.ext_release(n);
            if before > 0 && before <= n {
                self.nodes.fetch_sub(1, Ordering::Relaxed);
                self.counters.released.fetch_add(1, Ordering::Relaxed);
            }
            (before, n.min(before))
        };
        self.changes.changed(id);
        self.lookups.fetch_sub(taken, Ordering::Relaxed);
        if let Some(j) = self.journal.get() {
            j.forgot(vp.ino(), taken);
        }
        // What was counted, not what the kernel said: a FORGET of
        // u64::MAX wrapped the counter.
        self.counters.forgotten.fetch_add(taken, Ordering::Relaxed);
        if n > before {
            self.counters.forget_excess.fetch_add(1, Ordering::Relaxed);
        }
        id != ROOT_ID && before > 0 && before <= n
    }

    /// FORGET of an adopted node: counted down in the map if the node was
    /// not found yet (Some: whether that was its last count); its count
    /// moved onto its vnode first if it was (None: forget it there).
    fn forget_adopted(&self, id: u64, n: u64) -> Option<bool> {
        let mut map = self.adopted.lock();
        let count = map.get(id)?;
        if let Some(vp) = self.layer.lookup_cached(&self.mount, self.node_id(id)) {
            if vp.ext_count() > 0 {
                drop(map);
                self.merge_adopted(id, &vp);
                return None;
            }
        }
        let taken = n.min(count);
        self.lookups.fetch_sub(taken, Ordering::Relaxed);
        self.counters.forgotten.fetch_add(taken, Ordering::Relaxed);
        if let Some(j) = self.journal.get() {
            j.forgot(self.node_id(id), taken);
        }
        if n > count {
            self.counters.forget_excess.fetch_add(1, Ordering::Relaxed);
        }
        if taken < count {
            map.set(id, count - taken);
            return Some(false);
        }
        if !map.set(id, 0) {
            self.any_adopted.store(false, Ordering::Release);
        }
        self.nodes.fetch_sub(1, Ordering::Relaxed);
        self.counters.released.fetch_add(1, Ordering::Relaxed);
        Some(true)
    }

    /// Node `id`'s vnode if it is in the vnode cache, whether the kernel
    /// holds it or not.
    pub fn cached(&self, id: u64) -> Option<VnodeRef> {
        match id {
            ROOT_ID => self.root.get(),
            _ => self.layer.lookup_cached(&self.mount, self.node_id(id)),
        }
    }

    /// Takes over `count` kernel references to node `id` counted by the
    /// server this one replaces, to be found by `resolver` when the
    /// kernel names it (see "Adopted nodes").
    pub fn adopt_lazily(&self, id: u64, count: u64) {
        self.adopt_all_lazily(std::iter::once((id, count)));
    }

    /// [`adopt_lazily`](Self::adopt_lazily) for each (id, count), under
    /// one lock: a server taking a million nodes over does this while
    /// every request waits, so nodes given sorted by id (as a predecessor
    /// sends them) are taken as they are, with no sort. A node given
    /// twice, or already adopted, keeps the last count given.
    pub fn adopt_all_lazily(&self, nodes: impl ExactSizeIterator<Item = (u64, u64)>) {
        let mut map = self.adopted.lock();
        let (live_before, sum_before) = (map.live, map.iter().map(|n| n.1).sum::<u64>());
        let mut all = std::mem::take(&mut map.nodes);
        all.reserve(nodes.len());
        all.extend(nodes.filter(|&(id, count)| count > 0 && id != ROOT_ID));
        if !all.is_sorted_by(|a, b| a.0 < b.0) {
            // Stable, so that of two entries of one id the later stays.
            all.sort_by_key(|n| n.0);
            let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
            for n in all {
                match out.last_mut() {
                    Some(last) if last.0 == n.0 => *last = n,
                    _ => out.push(n),
                }
            }
            all = out;
        }
        self.install(&mut map, all, (live_before, sum_before));
    }

    /// Makes `all` (sorted by id, one per id) the adopted counts, the
    /// table's totals moved from what `before` (nodes, lookups) adopted.
    fn install(&self, map: &mut Adopted, all: Vec<(u64, u64)>, before: (usize, u64)) {
        let (mut live, mut sum) = (0usize, 0u64);
        for n in all.iter().filter(|n| n.1 > 0) {
            live += 1;
            sum += n.1;
        }
        map.live = live;
        map.nodes = all;
        self.nodes.fetch_add(live, Ordering::Relaxed);
        self.nodes.fetch_sub(before.0, Ordering::Relaxed);
        self.lookups.fetch_add(sum, Ordering::Relaxed);
        self.lookups.fetch_sub(before.1, Ordering::Relaxed);
        if live > 0 {
            self.any_adopted.store(true, Ordering::Release);
        }
    }

    /// [`adopt_all_lazily`](Self::adopt_all_lazily) of (id, count) pairs
    /// sorted by id, one per id, none the root's, taken as they are when
    /// nothing is adopted yet (no copy of a million pairs while requests
    /// wait); counts of 0 are allowed and adopt nothing.
    pub fn adopt_sorted(&self, nodes: Vec<(u64, u64)>) {
        let ok = nodes.windows(2).all(|p| p[0].0 < p[1].0)
            && nodes.binary_search_by_key(&ROOT_ID, |n| n.0).is_err();
        let mut map = self.adopted.lock();
        if !ok || !map.nodes.is_empty() {
            drop(map);
            return self.adopt_all_lazily(nodes.into_iter());
        }
        self.install(&mut map, nodes, (0, 0));
    }

    /// Sets how adopted nodes are found (once).
    pub fn set_resolver(&self, r: Resolver) {
        let _ = self.resolver.set(r);
    }

    /// Finds every adopted node not named since the upgrade (before this
    /// server hands the mount on in turn: the file system's state then
    /// covers them); a node whose file is gone stays counted, ESTALE.
    pub fn resolve_adopted(&self) {
        let ids: Vec<u64> = self.adopted.lock().iter().map(|n| n.0).collect();
        for id in ids {
            let _ = self.get_adopted(id);
        }
    }

    /// Node ids the kernel holds, adopted ones not found yet included.
    pub fn held_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .layer
            .ext_held(&self.mount)
            .into_iter()
            .map(|ino| self.node_id(ino))
            .collect();
        ids.extend(self.adopted.lock().iter().map(|n| n.0));
        ids
    }

    /// Nodes the kernel holds (including the root).
    pub fn len(&self) -> usize {
        self.nodes.load(Ordering::Relaxed)
    }

    /// Always false: the root is never forgotten.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sum of all lookup counts.
    pub fn total_lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// Every node the kernel holds, with its vnode and count (for a live
    /// upgrade, `upgrade/`: called with the request loops parked, so no
    /// count moves meanwhile).
    pub fn snapshot(&self) -> Vec<(u64, VnodeRef, u64)> {
        self.layer
            .ext_held_refs(&self.mount)
            .into_iter()
            .map(|(ino, vp, count)| (self.node_id(ino), vp, count))
            .collect()
    }

    /// Takes over `count` kernel references to `vp` counted by the server
    /// this one replaces (a live upgrade). The root's count replaces the
    /// one the table started with.
    pub fn adopt(&self, vp: &VnodeRef, count: u64) {
        if count == 0 {
            return;
        }
        if vp.ino() == self.root_ino {
            let have = vp.ext_count();
            if count > have {
                vp.ext_acquire(count - have);
            } else if count < have {
                vp.ext_release(have - count);
            }
            self.lookups.fetch_add(count, Ordering::Relaxed);
            self.lookups.fetch_sub(have, Ordering::Relaxed);
            return;
        }
        if vp.ext_acquire(count) {
            self.nodes.fetch_add(1, Ordering::Relaxed);
        }
        self.lookups.fetch_add(count, Ordering::Relaxed);
    }

    /// Drops every node's count and hold (after the session ended: no
    /// FORGET will come). The root stays pinned until the table goes.
    pub fn clear(&self) {
        self.layer.ext_release_mount(&self.mount);
        self.nodes.store(0, Ordering::Relaxed);
        self.lookups.store(0, Ordering::Relaxed);
    }
}

impl crate::report::Counted for NodeTable {
    fn report(&self, out: &mut crate::report::Report) {
        let c = &self.counters;
        out.put(
            "fuse.nodes",
            self.len() as u64,
            "Nodes the kernel holds lookup references on (root included)",
        );
        out.put(
            "fuse.nodes.lookups",
            self.total_lookups(),
            "Sum of the kernel's lookup counts",
        );
        for (name, v, d) in [
            ("fuse.nodes.remembered", &c.remembered, "Lookup references handed to the kernel"),
            ("fuse.nodes.forgotten", &c.forgotten, "Lookup references the kernel gave back (FORGET; more than it held counts in forget_excess)"),
            ("fuse.nodes.released", &c.released, "Nodes dropped when their count reached zero"),
            ("fuse.nodes.forget_excess", &c.forget_excess, "FORGETs for unknown nodes or beyond the count"),
        ] {
            out.put(name, v.load(Ordering::Relaxed), d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uvfs_memfs::{MemFs, MemFsConfig};
    use uvfs_vfs::{Ctx, FileSystem};
    use uvfs_vnode::{Config, VnodeLayer};

    #[test]
    fn lookup_counts_are_holds() {
        let layer = VnodeLayer::new(Config::with_limit(64));
        let fs = MemFs::new(layer.clone(), MemFsConfig::default());
        let root = fs.root().unwrap();
        let t = NodeTable::new(layer.clone(), fs.mount().clone(), &root);
        let f = fs.create(&Ctx::ROOT, &root, b"f", 0o644, 0).unwrap().0;
        let id = t.remember(&f);
        assert_eq!(t.remember(&f), id);
        assert_eq!(f.hold_count(), 1, "one hold however many lookups");
        drop(f);
        // Unknown ids are ESTALE, never a panic.
        assert_eq!(t.get(999_999).unwrap_err(), Errno::ESTALE);
        t.forget(id, 1);
        assert!(t.get(id).is_ok());
        t.forget(id, 1);
        assert_eq!(t.get(id).unwrap_err(), Errno::ESTALE);
        // Excess and unknown forgets are counted, not fatal.
        t.forget(id, 5);
        t.forget(ROOT_ID, 10);
        assert!(t.get(ROOT_ID).is_ok(), "the root stays pinned");
        assert_eq!(t.counters.forget_excess.load(Ordering::Relaxed), 2);
        assert_eq!(
            t.counters.forgotten.load(Ordering::Relaxed),
            2,
            "only what was held"
        );
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn adopted_counts_are_found_on_first_use_and_never_split() {
        let layer = VnodeLayer::new(Config::with_limit(64));
        let fs: Arc<dyn FileSystem> = MemFs::new(layer.clone(), MemFsConfig::default());
        let root = fs.root().unwrap();
        let mk = |n: &[u8]| fs.create(&Ctx::ROOT, &root, n, 0o644, 0).unwrap().0;
        let (a, b, c) = (mk(b"a"), mk(b"b"), mk(b"c"));
        let (ia, ib, ic) = (a.ino(), b.ino(), c.ino());
        drop((a, b, c));
        let t = NodeTable::new(layer.clone(), fs.mount().clone(), &root);
        // Named before a resolver exists: ESTALE, not a panic.
        t.adopt_lazily(t.node_id(ia), 3);
        assert_eq!(t.get(t.node_id(ia)).unwrap_err(), Errno::ESTALE);
        let weak = Arc::downgrade(&fs);
        t.set_resolver(Box::new(move |ino| weak.upgrade().unwrap().vget(ino)));
        t.adopt_lazily(t.node_id(ib), 2);
        t.adopt_lazily(t.node_id(ic), 1);
        assert_eq!((t.len(), t.total_lookups()), (4, 7));
        assert_eq!(t.held_ids().len(), 4);
        // Found on first use, with its whole count.
        let a = t.get(t.node_id(ia)).unwrap();
        assert_eq!(a.ext_count(), 3);
        // A lookup of an adopted node adds to its count, not a new node.
        let b = fs.lookup(&Ctx::ROOT, &root, b"b").unwrap();
        t.remember(&b);
        assert_eq!(b.ext_count(), 3);
        assert_eq!(t.len(), 4);
        // FORGET of one never found: counted down where it is.
        assert!(!t.forget(t.node_id(ic), 0));
        assert!(t.forget(t.node_id(ic), 1));
        assert_eq!(t.get(t.node_id(ic)).unwrap_err(), Errno::ESTALE);
        assert!(t.forget(t.node_id(ia), 3));
        assert!(t.forget(t.node_id(ib), 3));
        assert_eq!((t.len(), t.total_lookups()), (1, 1));
        assert_eq!(t.counters.forget_excess.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn adopted_counts_given_in_any_order_keep_the_last_count_of_each_node() {
        let layer = VnodeLayer::new(Config::with_limit(64));
        let fs: Arc<dyn FileSystem> = MemFs::new(layer.clone(), MemFsConfig::default());
        let root = fs.root().unwrap();
        let t = NodeTable::new(layer.clone(), fs.mount().clone(), &root);
        // Unsorted, one id twice, the root and a zero count left out.
        t.adopt_all_lazily([(50, 2), (10, 1), (50, 4), (ROOT_ID, 9), (30, 0), (20, 3)].into_iter());
        assert_eq!((t.len(), t.total_lookups()), (4, 1 + 1 + 4 + 3));
        let mut held = t.held_ids();
        held.sort_unstable();
        assert_eq!(held, [ROOT_ID, 10, 20, 50]);
        // Forgetting part of a count, then the rest: the node goes.
        assert!(!t.forget(50, 3));
        assert!(t.forget(50, 1));
        assert!(t.forget(10, 1));
        assert!(t.forget(20, 5));
        assert_eq!(t.counters.forget_excess.load(Ordering::Relaxed), 1);
        assert_eq!((t.len(), t.total_lookups()), (1, 1));
        assert_eq!(t.held_ids(), [ROOT_ID]);
        // Sorted input, taken as it is.
        t.adopt_all_lazily([(7, 1), (8, 2), (9, 3)].into_iter());
        assert_eq!((t.len(), t.total_lookups()), (4, 7));
    }
}
