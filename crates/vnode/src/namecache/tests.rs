//! The name cache against a model, and under concurrent churn with small
//! shards, so compaction moves entries while purges follow their handles.

use super::*;
use crate::config::Config;
use crate::layer::VnodeLayer;
use crate::{FsHooks, VType};
use fastrand::Rng;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

struct NoHooks;
impl FsHooks for NoHooks {}

fn layer(limit: usize, shards: usize) -> Arc<VnodeLayer> {
    VnodeLayer::new(Config {
        namecache_limit: limit,
        namecache_shards: shards,
        reclaimer: false,
        ..Config::with_limit(10_000)
    })
}

fn vnodes(layer: &Arc<VnodeLayer>, first: u64, n: u64, t: VType) -> Vec<VnodeRef> {
    let m = layer
        .mount_by_id(MountId(0))
        .unwrap_or_else(|| layer.mount("t", Arc::new(NoHooks)));
    (first..first + n)
        .map(|i| layer.get(&m, i, || Ok((t, Arc::new(())))).unwrap())
        .collect()
}

/// Short names (inline) and long ones (boxed).
fn name(k: u64) -> Vec<u8> {
    if k.is_multiple_of(3) {
        format!("a-rather-long-file-name-number-{k}").into_bytes()
    } else {
        format!("f{k}").into_bytes()
    }
}

#[test]
fn agrees_with_a_model_through_removals_purges_and_compactions() {
    for seed in 1..=8u64 {
        let l = layer(1 << 20, 2);
        let nc = l.namecache();
        let dirs = vnodes(&l, 1, 4, VType::Dir);
        let files = vnodes(&l, 100, 12, VType::Reg);
        let mut model: HashMap<(usize, Vec<u8>), Option<usize>> = HashMap::new();
        let mut rng = Rng::with_seed(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for step in 0..8_000 {
            let d = rng.u64(..dirs.len() as u64) as usize;
            let nm = name(rng.u64(..300));
            // Cycles of filling and draining, so shards grow and then turn
            // sparse enough to be compacted.
            let draining = step % 1000 >= 600;
            let op = rng.u64(..100);
            let (enter, remove, lookup, purge_dir) = if draining {
                (5, 50, 80, 92)
            } else {
                (60, 70, 98, 99)
            };
            match op {
                o if o < enter => {
                    let t = (rng.u64(..4) != 0).then(|| rng.u64(..files.len() as u64) as usize);
                    nc.enter(&dirs[d], &nm, t.map(|t| &files[t]));
                    model.insert((d, nm), t);
                }
                o if o < remove => {
                    nc.remove(&dirs[d], &nm);
                    model.remove(&(d, nm));
                }
                o if o < lookup => {
                    let got = match nc.lookup(&dirs[d], &nm) {
                        NcLookup::Hit(v) => Some(Some(v.ino())),
                        NcLookup::Negative => Some(None),
                        NcLookup::Miss => None,
                    };
                    let want = model.get(&(d, nm)).map(|t| t.map(|t| files[t].ino()));
                    assert_eq!(got, want, "seed {seed} step {step}");
                }
                o if o < purge_dir => {
                    nc.purge_dir(&dirs[d]);
                    model.retain(|(md, _), _| *md != d);
                }
                _ => {
                    let t = rng.u64(..files.len() as u64) as usize;
                    nc.purge_vnode(&files[t]);
                    model.retain(|_, mt| *mt != Some(t));
                }
            }
            if step % 97 == 0 {
                nc.check();
                assert_eq!(nc.len(), model.len(), "seed {seed} step {step}");
            }
            for (i, dir) in dirs.iter().enumerate() {
                let has = model.keys().any(|(md, _)| *md == i);
                assert_eq!(
                    dir.hold_count(),
                    has as u32,
                    "seed {seed} step {step}: dir {i}"
                );
            }
        }
        nc.check();
        assert!(
            nc.compactions.load(Ordering::Relaxed) > 0,
            "seed {seed}: no compaction"
        );
        assert_eq!(nc.len(), model.len());
        for d in &dirs {
            nc.purge_dir(d);
        }
        assert!(nc.is_empty());
        assert!(dirs.iter().all(|d| d.hold_count() == 0));
    }
}

#[test]
fn a_mass_removal_gives_the_slabs_back() {
    let l = layer(1 << 20, 4);
    let nc = l.namecache();
    let dir = &vnodes(&l, 1, 1, VType::Dir)[0];
    let files = vnodes(&l, 10, 8, VType::Reg);
    for k in 0..20_000u64 {
        nc.enter(dir, &name(k), Some(&files[k as usize % 8]));
    }
    let slab = |nc: &NameCache| -> usize { nc.shards.iter().map(|c| c.lock().slab_len()).sum() };
    assert!(slab(nc) >= 20_000);
    for k in 100..20_000u64 {
        nc.remove(dir, &name(k));
    }
    nc.check();
    assert!(nc.compactions.load(Ordering::Relaxed) > 0);
    assert_eq!(nc.len(), 100);
    assert!(
        slab(nc) <= 4 * 2 * MIN_SLOTS.max(100),
        "slabs shrank to a few times what is left: {} slots",
        slab(nc)
    );
    for k in 0..100u64 {
        match nc.lookup(dir, &name(k)) {
            NcLookup::Hit(v) => assert_eq!(v.ino(), files[k as usize % 8].ino()),
            other => panic!("{k}: {other:?}"),
        }
    }
    for f in &files {
        nc.purge_vnode(f);
    }
    assert!(nc.is_empty());
    assert_eq!(dir.hold_count(), 0);
}

#[test]
fn bounded_with_eviction_across_shards() {
    let l = layer(64, 4);
    let nc = l.namecache();
    let dirs = vnodes(&l, 1, 16, VType::Dir);
    for (i, d) in dirs.iter().enumerate() {
        for k in 0..40u64 {
            nc.enter(d, &name(k + 1000 * i as u64), None);
        }
    }
    nc.check();
    let slop = nc.entries.error_bound();
    assert!(nc.len() <= 64 + slop, "{} entries", nc.len());
    let held = dirs.iter().filter(|d| d.hold_count() > 0).count();
    let with_entries = dirs.iter().filter(|d| d.nc().lock().src_len() > 0).count();
    assert_eq!(held, with_entries);
}

/// Threads entering, replacing, removing, looking up and purging names in
/// shared directories, with a cache small enough that eviction and
/// compaction run all the time; afterwards the structure and every
/// directory's hold agree, and purging every directory empties the cache.
#[test]
fn concurrent_churn_keeps_links_and_holds_exact() {
    let l = layer(256, 2);
    let dirs = Arc::new(vnodes(&l, 1, 6, VType::Dir));
    let files = Arc::new(vnodes(&l, 100, 24, VType::Reg));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (l, dirs, files) = (l.clone(), dirs.clone(), files.clone());
            std::thread::spawn(move || {
                let nc = l.namecache();
                let mut rng = Rng::with_seed(0x2545_f491_4f6c_dd1d ^ (t + 1) << 17);
                for i in 0..40_000 {
                    let d = &dirs[rng.u64(..dirs.len() as u64) as usize];
                    let nm = name(rng.u64(..120));
                    // Fill, then drain: shards turn sparse and compact
                    // while other threads look up and purge.
                    let draining = i % 4_000 >= 2_000;
                    let (enter, remove, lookup, purge_dir) = if draining {
                        (5, 60, 85, 95)
                    } else {
                        (60, 70, 97, 98)
                    };
                    match rng.u64(..100) {
                        o if o < enter => {
                            let f = &files[rng.u64(..files.len() as u64) as usize];
                            nc.enter(d, &nm, (rng.u64(..5) != 0).then_some(f));
                        }
                        o if o < remove => nc.remove(d, &nm),
                        o if o < lookup => {
                            if let NcLookup::Hit(v) = nc.lookup(d, &nm) {
                                assert!(v.ino() >= 100 && !v.is_doomed());
                            }
                        }
                        o if o < purge_dir => nc.purge_dir(d),
                        _ => nc.purge_vnode(&files[rng.u64(..files.len() as u64) as usize]),
                    }
                }
            })
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
    let nc = l.namecache();
    nc.check();
    for d in dirs.iter() {
        let has = d.nc().lock().src_len() > 0;
        assert_eq!(d.hold_count(), has as u32);
    }
    assert!(l.stats().nc_evictions > 0, "the bound was reached");
    let compactions = nc.compactions.load(Ordering::Relaxed);
    assert!(compactions > 0, "shards were compacted under the churn");
    for d in dirs.iter() {
        nc.purge_dir(d);
    }
    assert!(nc.is_empty());
    assert!(dirs.iter().all(|d| d.hold_count() == 0));
    assert!(files.iter().all(|f| f.nc().lock().take_dst().is_empty()));
}

#[test]
fn a_hit_keeps_an_entry_from_eviction() {
    let l = layer(8, 1);
    let nc = l.namecache();
    let dir = &vnodes(&l, 1, 1, VType::Dir)[0];
    for k in 0..8u64 {
        nc.enter(dir, &name(k), None);
    }
    assert!(matches!(nc.lookup(dir, &name(0)), NcLookup::Negative));
    nc.enter(dir, &name(8), None);
    assert!(
        matches!(nc.lookup(dir, &name(0)), NcLookup::Negative),
        "the entry just hit is the most recently used"
    );
    assert!(
        matches!(nc.lookup(dir, &name(1)), NcLookup::Miss),
        "the least recently used went"
    );
}

/// `purge_vnode` works from the handles it took; its own removals can
/// turn the shard sparse, and the compaction that follows moves the
/// entries it has yet to remove. It must find them at their new places.
#[test]
fn purging_a_vnode_follows_its_entries_through_a_compaction() {
    let l = layer(1 << 20, 1);
    let nc = l.namecache();
    let dir = &vnodes(&l, 1, 1, VType::Dir)[0];
    let f = &vnodes(&l, 2, 1, VType::Reg)[0];
    // Slots 0..180 other names, 180..200 names of `f`.
    for k in 0..180u64 {
        nc.enter(dir, format!("o{k}").as_bytes(), None);
    }
    for k in 0..20u64 {
        nc.enter(dir, format!("f{k}").as_bytes(), Some(f));
    }
    // 25 left: one removal more makes the shard sparse.
    for k in 0..175u64 {
        nc.remove(dir, format!("o{k}").as_bytes());
    }
    let before = nc.compactions.load(Ordering::Relaxed);
    nc.purge_vnode(f);
    assert!(
        nc.compactions.load(Ordering::Relaxed) > before,
        "the purge compacted"
    );
    nc.check();
    for k in 0..20u64 {
        assert!(matches!(
            nc.lookup(dir, format!("f{k}").as_bytes()),
            NcLookup::Miss
        ));
    }
    assert_eq!(nc.len(), 5);
}
