//! Loom models of the vnode lifecycle races, run against the shipping code
//! (the crate's `sync` shim swaps in loom's atomics and mutexes):
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p uvfs-vnode --test loom_lifecycle`
#![cfg(loom)]

use loom::thread;
use std::sync::Arc;
use uvfs_vnode::{Config, FsHooks, NcLookup, VType, Vnode, VnodeLayer};

/// Fails the model if a vnode with references is ever reclaimed.
struct Check;

impl FsHooks for Check {
    fn reclaim(&self, vp: &Vnode) {
        assert_eq!(vp.use_count(), 0, "reclaimed a vnode in use");
        assert_eq!(vp.hold_count(), 0, "reclaimed a held vnode");
        assert!(vp.is_doomed());
    }
}

fn tiny() -> Config {
    Config {
        limit: 1000,
        namecache_limit: 16,
        reclaimer: false,
        freelist_shards: 1,
        table_shards: 1,
        namecache_shards: 1,
    }
}

fn init(ino: u64) -> impl FnOnce() -> Result<(VType, uvfs_vnode::VnodeData), i32> {
    move || Ok((VType::Reg, Arc::new(ino)))
}

/// Lookup of a free vnode racing its recycle: the lookup gets the live vnode
/// or a fresh one, never a doomed one, and the free list ends up agreeing
/// with the counts.
#[test]
fn lookup_versus_recycle() {
    loom::model(|| {
        let layer = VnodeLayer::new(tiny());
        let m = layer.mount("t", Arc::new(Check));
        drop(layer.get(&m, 1, init(1)).unwrap()); // free, on its list
        let (l2, m2) = (layer.clone(), m.clone());
        let t = thread::spawn(move || {
            let v = l2.get(&m2, 1, init(1)).unwrap();
            assert!(!v.is_doomed());
            assert_eq!(v.data::<u64>(), Some(&1));
        });
        let r = layer.prune(&m, 1);
        t.join().unwrap();
        assert!(r.recycled <= 1);
        // Quiesced: one vnode at most, and it is free and listed.
        let st = layer.stats();
        assert_eq!(st.numvnodes as usize, layer.table_len());
        assert_eq!(m.free_count(), layer.table_len());
        assert_eq!(st.freevnodes as usize, m.free_count());
    });
}

/// Use and hold transitions on one vnode racing a prune: a hold taken from
/// a use keeps the vnode alive after the use goes; the last drop lists it.
#[test]
fn hold_use_transitions_versus_prune() {
    loom::model(|| {
        let layer = VnodeLayer::new(tiny());
        let m = layer.mount("t", Arc::new(Check));
        drop(layer.get(&m, 1, init(1)).unwrap());
        let (l2, m2) = (layer.clone(), m.clone());
        let t = thread::spawn(move || {
            let v = l2.get(&m2, 1, init(1)).unwrap();
            let h = v.hold();
            drop(v);
            let again = h.get().expect("held vnode cannot be doomed by prune");
            assert!(!again.is_doomed());
            drop(again);
            drop(h);
        });
        layer.prune(&m, 1);
        t.join().unwrap();
        assert_eq!(m.free_count(), layer.table_len());
        assert_eq!(layer.stats().freevnodes as usize, m.free_count());
    });
}

/// Two lookups of an uncached inode: one construction, one vnode.
#[test]
fn single_flight_construction() {
    loom::model(|| {
        let layer = VnodeLayer::new(tiny());
        let m = layer.mount("t", Arc::new(Check));
        let (l2, m2) = (layer.clone(), m.clone());
        let t = thread::spawn(move || {
            let v = l2.get(&m2, 7, init(7)).unwrap();
            // Whichever thread constructed, the other reads the data the
            // constructor wrote: the vnode's state publishes it (loom's
            // cell checks that the read is ordered after the write).
            assert_eq!(v.data::<u64>(), Some(&7));
            Arc::as_ptr(v.arc()) as usize
        });
        let v = layer.get(&m, 7, init(7)).unwrap();
        assert_eq!(v.data::<u64>(), Some(&7));
        let p = Arc::as_ptr(v.arc()) as usize;
        assert_eq!(t.join().unwrap(), p);
        assert_eq!(layer.table_len(), 1);
    });
}

/// A name-cache hit racing the recycle of its target: the hit returns a
/// live vnode or the lookup misses; no entry survives naming a dead vnode.
#[test]
fn namecache_hit_versus_recycle() {
    loom::model(|| {
        let layer = VnodeLayer::new(tiny());
        let m = layer.mount("t", Arc::new(Check));
        let dir = layer.get(&m, 1, || Ok((VType::Dir, Arc::new(())))).unwrap();
        {
            let f = layer.get(&m, 2, init(2)).unwrap();
            layer.namecache().enter(&dir, b"f", Some(&f));
        }
        let (l2, d2) = (layer.clone(), dir.clone());
        let t = thread::spawn(move || match l2.namecache().lookup(&d2, b"f") {
            NcLookup::Hit(v) => assert!(!v.is_doomed()),
            NcLookup::Miss => {}
            NcLookup::Negative => panic!("no negative entry was made"),
        });
        let r = layer.prune(&m, 1);
        t.join().unwrap();
        if r.recycled == 1 {
            assert!(matches!(
                layer.namecache().lookup(&dir, b"f"),
                NcLookup::Miss
            ));
        }
    });
}

/// Two names entered at once for one file under one directory: both
/// threads may find the file's and the directory's name-cache links not
/// yet made and race to make them. One set of links must win and hold
/// both entries, so the file's recycle purges both names and the
/// directory's hold goes with the last.
#[test]
fn racing_enters_make_one_set_of_links() {
    loom::model(|| {
        let layer = VnodeLayer::new(tiny());
        let m = layer.mount("t", Arc::new(Check));
        let dir = layer
            .get(&m, 1, || Ok((VType::Dir, uvfs_vnode::no_data())))
            .unwrap();
        let f = layer.get(&m, 2, init(2)).unwrap();
        assert!(
            !f.has_extra() && !dir.has_extra(),
            "links are made on first use"
        );
        let (l2, d2, f2) = (layer.clone(), dir.clone(), f.clone());
        let t = thread::spawn(move || l2.namecache().enter(&d2, b"a", Some(&f2)));
        layer.namecache().enter(&dir, b"b", Some(&f));
        t.join().unwrap();
        assert_eq!(dir.hold_count(), 1, "one hold for the directory's entries");
        drop(f);
        let r = layer.prune(&m, 1);
        assert_eq!(r.recycled, 1, "the file was free");
        assert!(
            layer.namecache().is_empty(),
            "both names went with the file"
        );
        assert_eq!(dir.hold_count(), 0);
    });
}

/// A recycle purging the names of its vnode while another thread's removal
/// compacts the shard: the compaction moves the entry naming the vnode
/// after the purge took that entry's old handle. The purge must find it at
/// its new slot (the moved handle lands in the vnode's fresh list), or an
/// entry naming a recycled vnode, and the directory hold it carries, would
/// be left behind.
#[test]
fn purge_versus_compaction() {
    loom::model(|| {
        let layer = VnodeLayer::new(tiny());
        let m = layer.mount("t", Arc::new(Check));
        let dir = layer.get(&m, 1, || Ok((VType::Dir, Arc::new(())))).unwrap();
        let nc = layer.namecache();
        // Slots 0..8 other names, slot 8 the file's; then all but slot 7
        // removed: one more removal leaves the slab sparse (1 of 9 live).
        let names: Vec<Vec<u8>> = (0..8).map(|i| format!("n{i}").into_bytes()).collect();
        for n in &names {
            nc.enter(&dir, n, None);
        }
        {
            let f = layer.get(&m, 2, init(2)).unwrap();
            nc.enter(&dir, b"f", Some(&f));
        }
        for n in &names[..7] {
            nc.remove(&dir, n);
        }
        let (l2, d2) = (layer.clone(), dir.clone());
        let t = thread::spawn(move || l2.namecache().remove(&d2, b"n7"));
        let r = layer.prune(&m, 1);
        t.join().unwrap();
        assert_eq!(r.recycled, 1, "the file was free");
        // Before any lookup, which would drop an entry of a doomed vnode
        // itself and hide a purge that missed it.
        assert!(nc.is_empty(), "no entry outlives its vnode");
        assert_eq!(dir.hold_count(), 0, "the last entry's hold went with it");
        assert!(matches!(nc.lookup(&dir, b"f"), NcLookup::Miss));
    });
}

/// The last release (free transition, pushing onto the releaser's home
/// shard) racing a lookup's unfree transition from another thread with
/// another home shard: no lock orders them, the SeqCst handshake must. A
/// busy vnode is never left listed; a free one is never left unlisted.
#[test]
fn free_versus_unfree_across_home_shards() {
    loom::model(|| {
        let cfg = Config {
            freelist_shards: 2,
            ..tiny()
        };
        let layer = VnodeLayer::new(cfg);
        let m = layer.mount("t", Arc::new(Check));
        let v = layer.get(&m, 1, init(1)).unwrap();
        let (l2, m2) = (layer.clone(), m.clone());
        let t = thread::spawn(move || l2.lookup_cached(&m2, 1));
        drop(v);
        let got = t.join().unwrap();
        match got {
            Some(v2) => {
                assert_eq!(m.free_count(), 0, "a busy vnode was left on a free list");
                drop(v2);
                assert_eq!(m.free_count(), 1, "a free vnode was left off its list");
            }
            None => unreachable!("the vnode is cached and never doomed here"),
        }
        assert_eq!(layer.stats().freevnodes, 1);
    });
}

/// The external count (the FUSE kernel's lookup count) going 1 -> 0 on one
/// thread (a FORGET) while another takes it 0 -> 1 (a LOOKUP reply) and a
/// prune runs: whatever the order, the vnode is held exactly while the
/// count is nonzero, is never reclaimed while counted, and ends free and
/// listed once both are done and the count is zero again.
#[test]
fn ext_count_edges_versus_prune() {
    loom::model(|| {
        let layer = VnodeLayer::new(tiny());
        let m = layer.mount("t", Arc::new(Check));
        let v = layer.get(&m, 1, init(1)).unwrap();
        assert!(v.ext_acquire(1));
        drop(v); // held by the count alone
        let (l2, m2) = (layer.clone(), m.clone());
        let forget = thread::spawn(move || {
            let v = l2
                .lookup_cached(&m2, 1)
                .expect("a counted vnode stays cached");
            assert!(v.ext_release(1) >= 1, "the count was nonzero");
        });
        let (l3, m3) = (layer.clone(), m.clone());
        let lookup = thread::spawn(move || {
            let v = l3.get(&m3, 1, init(1)).unwrap();
            let new = v.ext_acquire(1);
            (new, v)
        });
        let _ = layer.prune(&m, 1);
        forget.join().unwrap();
        let (_, v) = lookup.join().unwrap();
        assert_eq!(v.ext_count(), 1);
        assert_eq!(v.hold_count(), 1, "one hold for a nonzero count");
        assert_eq!(v.ext_release(1), 1);
        assert_eq!(v.hold_count(), 0);
        drop(v);
        assert_eq!(m.free_count(), layer.table_len());
        assert_eq!(layer.stats().freevnodes as usize, m.free_count());
    });
}

/// Marks a vnode for recycling at its last use once `unlinked` is set, as
/// memfs does for a removed file.
struct RecycleWhenUnlinked {
    unlinked: std::sync::atomic::AtomicBool,
}

impl FsHooks for RecycleWhenUnlinked {
    fn inactive(&self, vp: &Vnode) {
        if self.unlinked.load(std::sync::atomic::Ordering::SeqCst) {
            vp.recycle_when_free();
        }
    }

    fn reclaim(&self, vp: &Vnode) {
        Check.reclaim(vp);
    }
}

/// One thread's last release putting a vnode on its free list (the file
/// still linked when its `inactive` ran) while another thread, which took
/// a reference meanwhile, removes the file and drops the vnode's last
/// reference again: that release recycles it at once (`recycle_when_free`).
/// The first thread checked "not to be recycled" before the second marked
/// it, and pushes it while the second dooms it: whatever the order, a
/// doomed vnode must not stay on the list, and the free counter must agree
/// with the lists.
#[test]
fn free_push_versus_recycle_when_free() {
    loom::model(|| {
        let cfg = Config {
            freelist_shards: 2,
            ..tiny()
        };
        let layer = VnodeLayer::new(cfg);
        let hooks = Arc::new(RecycleWhenUnlinked {
            unlinked: std::sync::atomic::AtomicBool::new(false),
        });
        let m = layer.mount("t", hooks.clone());
        let v = layer.get(&m, 1, init(1)).unwrap();
        let (l2, m2) = (layer.clone(), m.clone());
        let t = thread::spawn(move || {
            let w = l2.lookup_cached(&m2, 1);
            hooks
                .unlinked
                .store(true, std::sync::atomic::Ordering::SeqCst);
            drop(w);
        });
        drop(v);
        t.join().unwrap();
        let st = layer.stats();
        assert_eq!(st.numvnodes as usize, layer.table_len());
        assert_eq!(
            m.free_count(),
            layer.table_len(),
            "a free list holds a vnode the table no longer has (or misses one it has)"
        );
        assert_eq!(st.freevnodes as usize, m.free_count());
    });
}
