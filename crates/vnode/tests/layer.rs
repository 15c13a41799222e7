//! Black-box tests of the vnode layer's invariants.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use uvfs_vnode::{Config, Error, FsHooks, NcLookup, VType, Vnode, VnodeLayer, VnodeRef};

/// Records reclaims and checks that no reclaimed vnode had references.
#[derive(Default)]
struct Recorder {
    reclaimed: Mutex<Vec<u64>>,
    inactive: AtomicUsize,
    bad: AtomicUsize,
}

impl FsHooks for Recorder {
    fn inactive(&self, _vp: &Vnode) {
        self.inactive.fetch_add(1, Ordering::Relaxed);
    }
    fn reclaim(&self, vp: &Vnode) {
        if vp.use_count() != 0 || vp.hold_count() != 0 || !vp.is_doomed() {
            self.bad.fetch_add(1, Ordering::Relaxed);
        }
        self.reclaimed.lock().unwrap().push(vp.ino());
    }
}

fn cfg(limit: usize) -> Config {
    Config {
        reclaimer: false,
        ..Config::with_limit(limit)
    }
}

fn file(ino: u64) -> impl FnOnce() -> Result<(VType, uvfs_vnode::VnodeData), i32> {
    move || Ok((VType::Reg, Arc::new(ino)))
}

#[test]
fn get_returns_the_same_vnode_and_its_data() {
    let layer = VnodeLayer::new(cfg(100));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let a = layer.get(&m, 7, file(7)).unwrap();
    let b = layer
        .get(&m, 7, || panic!("must not construct twice"))
        .unwrap();
    assert!(VnodeRef::ptr_eq(&a, &b));
    assert_eq!(a.data::<u64>(), Some(&7));
    assert_eq!(a.vtype(), VType::Reg);
    assert_eq!(a.use_count(), 2);
}

#[test]
fn concurrent_get_constructs_once() {
    let layer = VnodeLayer::new(cfg(100));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let inits = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(8));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            let (layer, m, inits, barrier) =
                (layer.clone(), m.clone(), inits.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let r = layer
                    .get(&m, 42, || {
                        inits.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        Ok((VType::Dir, Arc::new(())))
                    })
                    .unwrap();
                Arc::as_ptr(r.arc()) as usize
            })
        })
        .collect();
    let ptrs: HashSet<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(inits.load(Ordering::SeqCst), 1);
    assert_eq!(ptrs.len(), 1, "everyone got the same vnode");
}

#[test]
fn failed_construction_leaves_no_entry_and_reports_errno_to_waiters() {
    let layer = VnodeLayer::new(cfg(100));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let barrier = Arc::new(Barrier::new(4));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let (layer, m, barrier) = (layer.clone(), m.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                layer
                    .get(&m, 9, || {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        Err(2)
                    })
                    .map(|_| ())
            })
        })
        .collect();
    for h in hs {
        // Each thread either constructed and failed, or waited and got the
        // failure, or came after and failed its own construction.
        assert_eq!(h.join().unwrap(), Err(Error::Errno(2)));
    }
    assert_eq!(layer.table_len(), 0);
    assert_eq!(layer.stats().numvnodes, 0);
    assert_eq!(m.vnode_count(), 0);
    // A later successful construction works.
    assert!(layer.get(&m, 9, file(9)).is_ok());
}

#[test]
fn panicking_init_fails_waiters_instead_of_hanging() {
    let layer = VnodeLayer::new(cfg(100));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let (l2, m2) = (layer.clone(), m.clone());
    let r = std::thread::spawn(move || {
        l2.get(&m2, 5, || -> Result<(VType, uvfs_vnode::VnodeData), i32> {
            panic!("boom")
        })
        .map(|_| ())
    })
    .join();
    assert!(r.is_err(), "the panic propagates to its own caller");
    assert_eq!(layer.table_len(), 0);
    assert!(layer.get(&m, 5, file(5)).is_ok());
}

#[test]
fn count_stays_under_limit_and_recycles_lru_first() {
    let limit = 64;
    let c = cfg(limit);
    let layer = VnodeLayer::new(c);
    let rec = Arc::new(Recorder::default());
    let m = layer.mount("t", rec.clone());
    for ino in 0..1000u64 {
        drop(layer.get(&m, ino, file(ino)).unwrap());
        let n = layer.stats().numvnodes as usize;
        assert!(n <= limit, "count {n} over limit {limit}");
    }
    let reclaimed = rec.reclaimed.lock().unwrap().clone();
    assert!(reclaimed.len() >= 1000 - limit);
    // LRU: the first vnodes released are the first recycled (per shard
    // order, round-robin across shards: the first ones must be early).
    assert!(
        reclaimed[..8].iter().all(|&i| i < 64),
        "{:?}",
        &reclaimed[..8]
    );
    assert_eq!(rec.bad.load(Ordering::Relaxed), 0);
    assert_eq!(layer.stats().alloc_overcommits, 0);
}

#[test]
fn used_and_held_vnodes_are_never_recycled() {
    let layer = VnodeLayer::new(cfg(16));
    let rec = Arc::new(Recorder::default());
    let m = layer.mount("t", rec.clone());
    let used: Vec<VnodeRef> = (0..8).map(|i| layer.get(&m, i, file(i)).unwrap()).collect();
    let held: Vec<_> = (8..16)
        .map(|i| layer.get(&m, i, file(i)).unwrap().hold())
        .collect();
    for ino in 100..600 {
        drop(layer.get(&m, ino, file(ino)).unwrap());
    }
    let reclaimed: HashSet<u64> = rec.reclaimed.lock().unwrap().iter().copied().collect();
    for i in 0..16 {
        assert!(
            !reclaimed.contains(&i),
            "vnode {i} was recycled while referenced"
        );
    }
    for (i, v) in used.iter().enumerate() {
        assert!(!v.is_doomed());
        assert_eq!(v.ino(), i as u64);
    }
    for h in &held {
        let r = h.get().expect("held vnode is alive");
        assert!(!r.is_doomed());
    }
    // Everything referenced: nothing free, allocation overcommits rather
    // than failing or sleeping.
    drop(used);
    assert_eq!(rec.bad.load(Ordering::Relaxed), 0);
}

#[test]
fn overcommit_when_nothing_is_free_then_settle() {
    let limit = 16;
    let c = cfg(limit);
    let layer = VnodeLayer::new(c);
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let refs: Vec<_> = (0..100)
        .map(|i| layer.get(&m, i, file(i)).unwrap())
        .collect();
    assert_eq!(layer.stats().numvnodes, 100, "allocation never fails");
    assert!(layer.stats().alloc_overcommits > 0);
    drop(refs);
    // New allocations recycle the now-free vnodes back under the limit.
    for i in 1000..1100 {
        drop(layer.get(&m, i, file(i)).unwrap());
    }
    assert!(layer.stats().numvnodes as usize <= limit);
}

#[test]
fn background_reclaimer_brings_count_down_and_stops_on_drop() {
    let limit = 64;
    let layer = VnodeLayer::new(Config::with_limit(limit));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let refs: Vec<_> = (0..500)
        .map(|i| layer.get(&m, i, file(i)).unwrap())
        .collect();
    drop(refs); // releases ring the reclaimer while over the limit
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while layer.stats().numvnodes as usize > limit && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let st = layer.stats();
    assert!(
        st.numvnodes as usize <= limit,
        "reclaimer left {}",
        st.numvnodes
    );
    assert!(st.reclaimer_recycles > 0);
    let weak = Arc::downgrade(&layer);
    drop(m);
    drop(layer);
    // A pass in progress holds the layer until it ends; the layer is then
    // dropped (and the thread stopped) by the reclaimer itself. Counted
    // without upgrading, which would itself keep the layer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while weak.strong_count() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        weak.strong_count(),
        0,
        "layer freed; reclaimer thread stopped"
    );
}

#[test]
fn at_the_limit_allocations_recycle_one_for_one_and_the_reclaimer_sleeps() {
    // With free vnodes to take, the allocating thread recycles its own
    // (cheaper than the reclaimer doing it from another core); the
    // reclaimer is for backlogs only, and there is none here.
    let limit = 256;
    let layer = VnodeLayer::new(Config::with_limit(limit));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    for i in 0..20_000 {
        drop(layer.get(&m, i, file(i)).unwrap());
    }
    let st = layer.stats();
    assert!(st.numvnodes as usize <= limit, "{}", st.numvnodes);
    assert!(st.direct_recycles >= 20_000 - limit as u64);
    assert_eq!(st.alloc_overcommits, 0);
    assert_eq!(
        st.reclaimer_recycles, 0,
        "reclaimer worked without a backlog"
    );
    assert_eq!(st.reclaimer_kicks, 0);
}

#[test]
fn prune_frees_only_the_named_mount_at_cost_proportional_to_n() {
    let layer = VnodeLayer::new(cfg(100_000));
    let zrec = Arc::new(Recorder::default());
    let trec = Arc::new(Recorder::default());
    let zfs = layer.mount("zfs", zrec.clone());
    let tmp = layer.mount("tmpfs", trec.clone());
    let mut held = Vec::new();
    for i in 0..2000u64 {
        let z = layer.get(&zfs, i, file(i)).unwrap();
        if i % 2 == 0 {
            held.push(z.hold());
        }
        drop(layer.get(&tmp, i, file(i)).unwrap());
    }
    let r = layer.prune(&zfs, 300);
    assert_eq!(r.recycled, 300);
    assert_eq!(r.attempts, 300, "no held or foreign vnode visited");
    assert!(trec.reclaimed.lock().unwrap().is_empty());
    let z: Vec<u64> = zrec.reclaimed.lock().unwrap().clone();
    assert!(z.iter().all(|i| i % 2 == 1), "held zfs vnodes untouched");
    // Asking for more than is free frees exactly what is free.
    let r = layer.prune(&zfs, 10_000);
    assert_eq!(r.recycled, 700);
    assert_eq!(r.attempts, 700);
    assert_eq!(zfs.vnode_count(), 1000);
    assert_eq!(tmp.vnode_count(), 2000);
    let st = layer.stats();
    assert_eq!(st.prune_attempts, 1000);
    assert_eq!(st.prune_recycled, 1000);
}

#[test]
fn unmount_busy_then_clean_then_no_leak() {
    let layer = VnodeLayer::new(cfg(100));
    let rec = Arc::new(Recorder::default());
    let m = layer.mount("t", rec.clone());
    let keep = layer.get(&m, 1, file(1)).unwrap();
    let held = layer.get(&m, 2, file(2)).unwrap().hold();
    for i in 3..10 {
        drop(layer.get(&m, i, file(i)).unwrap());
    }
    match layer.unmount(&m, false) {
        Err(Error::Busy { busy }) => assert_eq!(busy, 2),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(
        !m.is_unmounted(),
        "a refused unmount leaves the mount usable"
    );
    assert!(layer.get(&m, 50, file(50)).is_ok());
    let weak = Arc::downgrade(keep.arc());
    drop(keep);
    drop(held);
    layer.unmount(&m, false).unwrap();
    assert_eq!(m.vnode_count(), 0);
    assert_eq!(layer.table_len(), 0);
    assert_eq!(layer.stats().numvnodes, 0);
    assert!(weak.upgrade().is_none(), "vnode memory freed");
    assert_eq!(layer.get(&m, 1, file(1)).err(), Some(Error::MountGone));
    assert_eq!(layer.unmount(&m, false), Err(Error::MountGone));
}

#[test]
fn forced_unmount_dooms_busy_vnodes_safely() {
    let layer = VnodeLayer::new(cfg(100));
    let rec = Arc::new(Recorder::default());
    let m = layer.mount("t", rec.clone());
    let keep = layer.get(&m, 1, file(1)).unwrap();
    let held = layer.get(&m, 2, file(2)).unwrap().hold();
    layer.unmount(&m, true).unwrap();
    assert!(keep.is_doomed());
    assert!(held.get().is_none(), "a doomed vnode cannot be used again");
    assert_eq!(
        keep.data::<u64>(),
        Some(&1),
        "stale references stay memory-safe"
    );
    let k2 = keep.clone();
    drop(keep);
    drop(k2);
    drop(held);
    assert_eq!(layer.stats().numvnodes, 0);
    assert_eq!(rec.reclaimed.lock().unwrap().len(), 2);
}

#[test]
fn inactive_runs_on_last_use_only() {
    let layer = VnodeLayer::new(cfg(100));
    let rec = Arc::new(Recorder::default());
    let m = layer.mount("t", rec.clone());
    let a = layer.get(&m, 1, file(1)).unwrap();
    let b = a.clone();
    let h = a.hold();
    drop(a);
    assert_eq!(rec.inactive.load(Ordering::Relaxed), 0);
    drop(b);
    assert_eq!(
        rec.inactive.load(Ordering::Relaxed),
        1,
        "last use gone, hold remains"
    );
    assert_eq!(m.free_count(), 0, "held: not free");
    drop(h);
    assert_eq!(m.free_count(), 1);
    assert_eq!(layer.stats().freevnodes, 1);
}

#[test]
fn namecache_hits_negatives_and_purges_on_recycle() {
    let layer = VnodeLayer::new(cfg(1000));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let nc = layer.namecache();
    let dir = layer.get(&m, 1, || Ok((VType::Dir, Arc::new(())))).unwrap();
    let f = layer.get(&m, 2, file(2)).unwrap();
    assert!(matches!(nc.lookup(&dir, b"f"), NcLookup::Miss));
    nc.enter(&dir, b"f", Some(&f));
    nc.enter(&dir, b"nope", None);
    assert_eq!(dir.hold_count(), 1, "entries under dir hold it once");
    match nc.lookup(&dir, b"f") {
        NcLookup::Hit(v) => assert!(VnodeRef::ptr_eq(&v, &f)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(nc.lookup(&dir, b"nope"), NcLookup::Negative));
    drop(f);
    // Recycling the target purges its entry; the dir stays held by "nope".
    assert_eq!(layer.prune(&m, 10).recycled, 1, "only the file is free");
    assert!(matches!(nc.lookup(&dir, b"f"), NcLookup::Miss));
    nc.remove(&dir, b"nope");
    assert_eq!(dir.hold_count(), 0, "last entry gone: hold dropped");
    assert!(nc.is_empty());
    let st = layer.stats();
    assert_eq!((st.nc_hits, st.nc_neg_hits), (1, 1));
}

#[test]
fn namecache_is_bounded_and_eviction_releases_dir_holds() {
    let mut c = cfg(1000);
    c.namecache_limit = 8;
    c.namecache_shards = 1;
    let layer = VnodeLayer::new(c);
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let nc = layer.namecache();
    let dirs: Vec<_> = (0..20)
        .map(|i| layer.get(&m, i, || Ok((VType::Dir, Arc::new(())))).unwrap())
        .collect();
    for d in &dirs {
        nc.enter(d, b"x", None);
    }
    assert_eq!(nc.len(), 8);
    let held = dirs.iter().filter(|d| d.hold_count() > 0).count();
    assert_eq!(held, 8, "evicted entries released their directory holds");
    assert!(layer.stats().nc_evictions >= 12);
    for d in &dirs {
        nc.purge_dir(d);
    }
    assert!(dirs.iter().all(|d| d.hold_count() == 0));
}

#[test]
fn rmdir_purge_and_recycled_dir_entries() {
    let layer = VnodeLayer::new(cfg(1000));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let nc = layer.namecache();
    let root = layer.get(&m, 1, || Ok((VType::Dir, Arc::new(())))).unwrap();
    let sub = layer.get(&m, 2, || Ok((VType::Dir, Arc::new(())))).unwrap();
    nc.enter(&root, b"sub", Some(&sub));
    nc.enter(&sub, b"ghost", None);
    drop(sub);
    assert_eq!(
        layer.prune(&m, 10).recycled,
        0,
        "sub is held by its entries"
    );
    let sub = match nc.lookup(&root, b"sub") {
        NcLookup::Hit(v) => v,
        other => panic!("{other:?}"),
    };
    nc.purge_dir(&sub);
    nc.remove(&root, b"sub");
    drop(sub);
    assert_eq!(layer.prune(&m, 10).recycled, 1);
    assert_eq!(root.hold_count(), 0);
}

/// Many threads looking up, releasing, holding and pruning with a tiny
/// limit; afterwards every vnode is accounted for.
#[test]
fn stress_tiny_limit_lookups_prunes_and_namecache() {
    let limit = 32;
    let c = Config::with_limit(limit);
    let layer = VnodeLayer::new(c);
    let rec = Arc::new(Recorder::default());
    let m = layer.mount("t", rec.clone());
    let other = layer.mount("o", Arc::new(Recorder::default()));
    let threads = 6;
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (layer, m, other) = (layer.clone(), m.clone(), other.clone());
            std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                let root = layer
                    .get(&m, 0, || Ok((VType::Dir, Arc::new(0u64))))
                    .unwrap();
                let mut holds = Vec::new();
                for _ in 0..20_000 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let ino = 1 + rng % 200;
                    match rng % 10 {
                        0 => {
                            layer.prune(&m, 4);
                        }
                        1 => {
                            let v = layer.get(&other, ino, file(ino)).unwrap();
                            assert_eq!(v.data::<u64>(), Some(&ino));
                        }
                        2 => {
                            let v = layer.get(&m, ino, file(ino)).unwrap();
                            holds.push(v.hold());
                            if holds.len() > 4 {
                                holds.remove(0);
                            }
                        }
                        3 | 4 => {
                            let name = ino.to_string();
                            match layer.namecache().lookup(&root, name.as_bytes()) {
                                NcLookup::Hit(v) => {
                                    assert_eq!(v.ino(), ino);
                                    assert!(!v.is_doomed());
                                }
                                _ => {
                                    let v = layer.get(&m, ino, file(ino)).unwrap();
                                    layer.namecache().enter(&root, name.as_bytes(), Some(&v));
                                }
                            }
                        }
                        _ => {
                            let v = layer.get(&m, ino, file(ino)).unwrap();
                            assert!(!v.is_doomed());
                            assert_eq!(v.data::<u64>(), Some(&ino));
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(
        rec.bad.load(Ordering::Relaxed),
        0,
        "recycled a referenced vnode"
    );
    let st = layer.stats();
    assert!(st.recycles > 0);
    // Every vnode accounted for: table entries == count == per-mount sums.
    assert_eq!(st.numvnodes as usize, layer.table_len());
    assert_eq!(st.numvnodes as usize, m.vnode_count() + other.vnode_count());
    assert_eq!(st.freevnodes as usize, m.free_count() + other.free_count());
    // Quiesced: the reclaimer brings the count to the limit once free.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while layer.stats().numvnodes as usize > limit && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(layer.stats().numvnodes as usize <= limit);
    layer.unmount(&other, false).unwrap();
    layer.namecache().purge_mount(m.id());
    layer.unmount(&m, false).unwrap();
    assert_eq!(layer.table_len(), 0);
    assert_eq!(layer.stats().numvnodes, 0);
    assert_eq!(layer.stats().freevnodes, 0);
}

#[test]
fn recycling_follows_release_order_across_shards() {
    let layer = VnodeLayer::new(cfg(10_000));
    let rec = Arc::new(Recorder::default());
    let m = layer.mount("t", rec.clone());
    let refs: Vec<_> = (0..300u64)
        .map(|i| layer.get(&m, i, file(i)).unwrap())
        .collect();
    // Release in a scrambled order spanning every shard.
    let mut order: Vec<u64> = (0..300).collect();
    let mut x = 12345u64;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    let mut refs: Vec<Option<VnodeRef>> = refs.into_iter().map(Some).collect();
    for &i in &order {
        refs[i as usize] = None;
    }
    assert_eq!(layer.prune(&m, 100).recycled, 100);
    assert_eq!(layer.prune(&m, 1000).recycled, 200);
    assert_eq!(
        *rec.reclaimed.lock().unwrap(),
        order,
        "least recently released first"
    );
}

/// An `inactive` hook that asks for immediate recycling (an unlinked file).
struct RecycleOnInactive(Recorder);

impl FsHooks for RecycleOnInactive {
    fn inactive(&self, vp: &Vnode) {
        if vp.ino().is_multiple_of(2) {
            vp.recycle_when_free();
        }
    }
    fn reclaim(&self, vp: &Vnode) {
        self.0.reclaim(vp);
    }
}

#[test]
fn recycle_when_free_tears_down_on_last_release() {
    let layer = VnodeLayer::new(cfg(1000));
    let hooks = Arc::new(RecycleOnInactive(Recorder::default()));
    let m = layer.mount("t", hooks.clone());
    let a = layer.get(&m, 2, file(2)).unwrap();
    let h = a.hold();
    drop(a); // inactive marks it; a hold remains, so it stays
    assert!(hooks.0.reclaimed.lock().unwrap().is_empty());
    drop(h); // last reference: recycled now, not cached
    assert_eq!(*hooks.0.reclaimed.lock().unwrap(), vec![2]);
    assert_eq!(layer.table_len(), 0);
    assert_eq!(m.free_count(), 0);
    drop(layer.get(&m, 3, file(3)).unwrap()); // odd: cached as usual
    assert_eq!(m.free_count(), 1);
    assert_eq!(layer.stats().numvnodes, 1);
    assert_eq!(hooks.0.bad.load(Ordering::Relaxed), 0);
}

#[test]
fn the_table_gives_back_what_a_mass_removal_emptied() {
    let layer = VnodeLayer::new(cfg(1_000_000));
    let fs = layer.mount("fs", Arc::new(Recorder::default()));
    let empty = layer.table_heap_bytes();
    for i in 0..200_000u64 {
        drop(layer.get(&fs, i, file(i)).unwrap());
    }
    let full = layer.table_heap_bytes();
    // At least a bucket (an 8-byte `Arc` and a control byte) per vnode.
    assert!(full >= empty + 200_000 * 9, "{empty} -> {full}");
    let r = layer.prune(&fs, usize::MAX);
    assert_eq!(r.recycled, 200_000);
    assert_eq!(layer.table_len(), 0);
    let after = layer.table_heap_bytes();
    assert!(
        after < full / 8,
        "the table kept its peak: {empty} bytes empty, {full} full, {after} emptied"
    );
}

#[test]
fn held_and_unheld_walks_split_a_mount_exactly_and_skip_other_mounts() {
    let layer = VnodeLayer::new(cfg(100_000));
    let (m, other) = (
        layer.mount("t", Arc::new(Recorder::default())),
        layer.mount("u", Arc::new(Recorder::default())),
    );
    // Enough vnodes to spread over every shard, so that each walking
    // thread has some; every third held by the front end, ino % 5 + 1
    // times.
    let mut kept = Vec::new();
    for ino in 1..=20_000u64 {
        let vp = layer.get(&m, ino, file(ino)).unwrap();
        if ino % 3 == 0 {
            assert!(vp.ext_acquire(ino % 5 + 1));
        }
        kept.push(vp);
        let o = layer.get(&other, ino, file(ino)).unwrap();
        assert!(o.ext_acquire(1));
        kept.push(o);
    }
    // The walks' references are their own: dropping ours first leaves
    // the vnodes cached and free.
    drop(kept);
    let mut held: Vec<(u64, u64)> = layer
        .ext_held_refs(&m)
        .iter()
        .map(|(ino, vp, n)| {
            assert_eq!(*ino, vp.ino());
            (*ino, *n)
        })
        .collect();
    held.sort_unstable();
    let want: Vec<(u64, u64)> = (1..=20_000u64)
        .filter(|i| i % 3 == 0)
        .map(|i| (i, i % 5 + 1))
        .collect();
    assert_eq!(held, want);
    let mut unheld: Vec<u64> = layer.unheld_refs(&m).iter().map(|vp| vp.ino()).collect();
    unheld.sort_unstable();
    let want: Vec<u64> = (1..=20_000u64).filter(|i| i % 3 != 0).collect();
    assert_eq!(unheld, want);
    assert!(layer.unheld_refs(&other).is_empty());
    assert_eq!(layer.ext_held_refs(&other).len(), 20_000);
}

#[test]
fn an_external_count_saturates_and_its_hold_goes_with_it() {
    let layer = VnodeLayer::new(cfg(100));
    let m = layer.mount("t", Arc::new(Recorder::default()));
    let vp = layer.get(&m, 1, file(1)).unwrap();
    let base = vp.hold_count();
    assert!(vp.ext_acquire(u64::MAX - 1));
    // Past the top: stays there, still counted, still one hold.
    assert!(!vp.ext_acquire(5));
    assert_eq!(vp.ext_count(), u64::MAX);
    assert_eq!(vp.hold_count(), base + 1);
    // Released in full: the hold goes once, with the count.
    assert_eq!(vp.ext_release(u64::MAX), u64::MAX);
    assert_eq!(vp.ext_count(), 0);
    assert_eq!(vp.hold_count(), base);
}

#[test]
fn another_layers_mount_is_refused_and_left_alone() {
    let (a, b) = (VnodeLayer::new(cfg(100)), VnodeLayer::new(cfg(100)));
    let ma = a.mount("a", Arc::new(Recorder::default()));
    let mb = b.mount("b", Arc::new(Recorder::default()));
    // Mount ids are per layer: `mb` has the id `ma` has.
    let va = a.get(&ma, 7, file(7)).unwrap();
    assert!(va.ext_acquire(1));
    drop(va);
    let vb = b.get(&mb, 9, file(9)).unwrap();
    drop(vb);
    assert_eq!(b.get(&ma, 8, file(8)).err(), Some(Error::ForeignMount));
    assert!(b.lookup_cached(&ma, 9).is_none());
    assert_eq!(b.ext_count_of(&ma, 7), 0);
    assert!(b.ext_held(&ma).is_empty());
    assert_eq!(b.ext_release_mount(&ma), 0);
    assert_eq!(b.prune(&ma, 10), Default::default());
    assert_eq!(b.unmount(&ma, true).err(), Some(Error::ForeignMount));
    // Both layers are as they were.
    assert_eq!(a.ext_count_of(&ma, 7), 1);
    assert!(a.lookup_cached(&ma, 7).is_some());
    assert!(b.lookup_cached(&mb, 9).is_some());
    assert!(a.lookup_cached(&ma, 8).is_none());
}
