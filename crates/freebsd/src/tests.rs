//! Behavioural tests of the replica.

use std::any::Any;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::tunables::VNLRU_COUNT_SLOP;
use crate::*;

/// Records the hook calls of one mount.
#[derive(Default)]
struct Recorder {
    inactive: AtomicUsize,
    reclaimed: Mutex<Vec<u64>>,
}

impl Hooks for Recorder {
    fn inactive(&self, _ino: u64) {
        self.inactive.fetch_add(1, SeqCst);
    }
    fn reclaim(&self, ino: u64, data: &(dyn Any + Send + Sync)) {
        // The data is what the constructor produced for this inode.
        assert_eq!(data.downcast_ref::<u64>(), Some(&ino));
        self.reclaimed.lock().unwrap().push(ino);
    }
}

fn get(vfs: &FreeBsdVfs, mnt: MountId, ino: u64, t: VType) -> VRef {
    vfs.vget_or_alloc(mnt, ino, || Ok((t, Box::new(ino))))
        .expect("vget_or_alloc")
}

fn reclaimed(r: &Recorder) -> HashSet<u64> {
    r.reclaimed.lock().unwrap().iter().copied().collect()
}

#[test]
fn count_settles_near_limit() {
    for variant in [Variant::Pre, Variant::Post] {
        let desired = 1000;
        let vfs = FreeBsdVfs::new(desired, variant);
        let rec = Arc::new(Recorder::default());
        let mnt = vfs.mount("tmpfs", rec.clone());
        let mut peak = 0;
        for ino in 0..10_000u64 {
            let vp = get(&vfs, mnt, ino, VType::Reg);
            assert_eq!(vp.ino(), ino);
            assert_eq!(vp.data_as::<u64>().as_deref(), Some(&ino));
            drop(vp);
            peak = peak.max(vfs.numvnodes());
        }
        let s = vfs.stats();
        assert!(
            peak <= desired + VNLRU_COUNT_SLOP,
            "{variant:?}: peak {peak} over limit"
        );
        assert!(peak + 200 >= desired, "{variant:?}: never filled: {peak}");
        // Recycling happened, from the allocators themselves.
        assert!(s.direct_recycles_free > 5000, "{variant:?}: {s:?}");
        assert_eq!(s.created, 10_000);
        assert_eq!(s.freed as usize + vfs.numvnodes(), 10_000);
        assert_eq!(reclaimed(&rec).len(), s.freed as usize);
        assert_eq!(rec.inactive.load(SeqCst), 10_000);
        // Recycled memory is reused: the list holds about the limit.
        assert!(s.vnode_list_len as usize <= desired + VNLRU_COUNT_SLOP + 300);
        // Free vnodes never sleep the allocator.
        assert!(s.alloc_sleeps <= 2, "{variant:?}: {s:?}");
    }
}

#[test]
fn held_vnodes_are_never_recycled() {
    let vfs = FreeBsdVfs::new(200, Variant::Post);
    let rec = Arc::new(Recorder::default());
    let mnt = vfs.mount("zfs", rec.clone());
    let holds: Vec<HoldRef> = (0..50u64)
        .map(|ino| get(&vfs, mnt, ino, VType::Reg).hold())
        .collect();
    for ino in 1000..4000u64 {
        drop(get(&vfs, mnt, ino, VType::Reg));
    }
    let gone = reclaimed(&rec);
    for h in &holds {
        assert!(!h.is_doomed());
        assert!(!gone.contains(&h.ino()));
        assert_eq!(h.data_as::<u64>().as_deref(), Some(&h.ino()));
        // Still findable, and the hold converts to a use reference.
        assert_eq!(h.vget().expect("vget").ino(), h.ino());
    }
    // Allocators found free vnodes right after the marker and never met
    // the held ones (they sit behind it). Restart the scan from the head,
    // as vnlru_free_impl does when it runs out, and it must walk over them.
    {
        let mut list = vfs.kernel().vnode_list.lock();
        let fm = list.free_marker;
        list.insert_head(fm);
    }
    let before = vfs.stats();
    vfs.vnlru_free(10_000);
    let s = vfs.stats();
    assert!(
        s.free_phase2_retry - before.free_phase2_retry >= 50,
        "{s:?}"
    );
    assert!(s.free_phase2_retry_reg - before.free_phase2_retry_reg >= 50);
    for h in &holds {
        assert!(!h.is_doomed());
    }
    let gone = reclaimed(&rec);
    assert!(gone.len() > 2500);
}

#[test]
fn vfsops_prune_skips_other_fs_and_held() {
    let vfs = FreeBsdVfs::new(10_000, Variant::Post);
    let zrec = Arc::new(Recorder::default());
    let trec = Arc::new(Recorder::default());
    let zfs = vfs.mount("zfs", zrec.clone());
    let tmp = vfs.mount("tmpfs", trec.clone());
    // Interleave so the prune has to walk over tmpfs vnodes.
    let mut held = Vec::new();
    for ino in 0..100u64 {
        drop(get(&vfs, tmp, ino, VType::Reg));
        let z = get(&vfs, zfs, ino, VType::Reg);
        if ino % 5 == 0 {
            held.push(z.hold());
        }
    }
    let dir = get(&vfs, zfs, 1000, VType::Dir);
    let child = get(&vfs, zfs, 1001, VType::Reg);
    vfs.cache_enter(&dir, "child", Some(&child));
    drop(child);
    drop(dir);
    let before = vfs.stats();
    vfs.vnlru_free_vfsops("zfs", 1000);
    let s = vfs.stats();
    // 80 free zfs files plus the child; the held ones and the
    // directory held by its name cache entry stay.
    assert_eq!(s.free_success - before.free_success, 81, "{s:?}");
    assert_eq!(zrec.reclaimed.lock().unwrap().len(), 81);
    assert!(trec.reclaimed.lock().unwrap().is_empty());
    assert!(
        s.free_phase3_retry - before.free_phase3_retry >= 100,
        "{s:?}"
    );
    assert!(
        s.free_phase2_retry - before.free_phase2_retry >= 20,
        "{s:?}"
    );
    assert!(s.free_phase2_retry_reg - before.free_phase2_retry_reg >= 20);
    for h in &held {
        assert!(!h.is_doomed());
    }
    for ino in 0..100u64 {
        assert!(vfs.vfs_hash_get(tmp, ino).is_some());
    }
    // The child's recycle purged its entry and so dropped the directory's
    // hold; a second prune can take the directory too.
    vfs.vnlru_free_vfsops("zfs", 1000);
    assert!(zrec.reclaimed.lock().unwrap().contains(&1000));
    assert_eq!(vfs.vnlru_free_vfsops("nfs", 10), 0);
}

#[test]
fn namecache_holds_directories_and_purges() {
    let vfs = FreeBsdVfs::new(1000, Variant::Post);
    let rec = Arc::new(Recorder::default());
    let mnt = vfs.mount("ufs", rec.clone());
    let dir = get(&vfs, mnt, 1, VType::Dir);
    let file = get(&vfs, mnt, 2, VType::Reg);
    assert_eq!(dir.holdcnt(), 1);
    vfs.cache_enter(&dir, "f", Some(&file));
    vfs.cache_enter(&dir, "missing", None);
    vfs.cache_enter(&dir, "f", None); // existing: ignored
    assert_eq!(dir.holdcnt(), 2, "first entry holds the directory once");
    match vfs.cache_lookup(&dir, "f") {
        CacheLookup::Hit(v) => assert_eq!(v.ino(), 2),
        other => panic!("expected hit, got {other:?}"),
    }
    assert!(matches!(
        vfs.cache_lookup(&dir, "missing"),
        CacheLookup::Negative
    ));
    assert!(matches!(vfs.cache_lookup(&dir, "nope"), CacheLookup::Miss));
    assert!(vfs.cache_remove(&dir, "missing"));
    assert!(!vfs.cache_remove(&dir, "missing"));
    // Recycling the file purges the entry and releases the directory.
    drop(file);
    vfs.vflush(mnt, false).expect_err("dir is busy");
    assert!(matches!(vfs.cache_lookup(&dir, "f"), CacheLookup::Miss));
    assert_eq!(dir.holdcnt(), 1);
    let s = vfs.stats();
    assert_eq!((s.cache_hits, s.cache_neg_hits, s.cache_misses), (1, 1, 2));
    assert_eq!(s.cache_entries, 0);
}

#[test]
fn negative_entries_are_bounded() {
    // ncsize = 2 * 50 = 100, negatives bounded at 20.
    let vfs = FreeBsdVfs::new(50, Variant::Post);
    let mnt = vfs.mount("ufs", Arc::new(Recorder::default()));
    let dir = get(&vfs, mnt, 1, VType::Dir);
    for i in 0..200 {
        vfs.cache_enter(&dir, &format!("n{i}"), None);
    }
    let s = vfs.stats();
    assert!(s.cache_entries <= 21, "{s:?}");
    assert!(s.cache_neg_evictions >= 170, "{s:?}");
    // Oldest evicted first.
    assert!(matches!(vfs.cache_lookup(&dir, "n0"), CacheLookup::Miss));
    assert!(matches!(
        vfs.cache_lookup(&dir, "n199"),
        CacheLookup::Negative
    ));
}

#[test]
fn unmount_frees_everything() {
    let vfs = FreeBsdVfs::new(1000, Variant::Post);
    let rec = Arc::new(Recorder::default());
    let mnt = vfs.mount("tmpfs", rec.clone());
    let other = vfs.mount("tmpfs", Arc::new(Recorder::default()));
    let keep_other = get(&vfs, other, 7, VType::Reg);
    let dir = get(&vfs, mnt, 0, VType::Dir);
    let mut kept = Vec::new();
    for ino in 1..300u64 {
        let v = get(&vfs, mnt, ino, VType::Reg);
        vfs.cache_enter(&dir, &format!("f{ino}"), Some(&v));
        if ino % 30 == 0 {
            kept.push(v);
        }
    }
    let held = kept[0].hold();
    assert_eq!(vfs.unmount(mnt), Ok(300));
    assert_eq!(reclaimed(&rec).len(), 300);
    assert_eq!(vfs.stats().cache_entries, 0);
    for v in &kept {
        assert_eq!(v.vtype(), VType::Bad);
        assert!(v.data().is_none());
    }
    assert!(matches!(
        vfs.vget_or_alloc(mnt, 1, || Ok((VType::Reg, Box::new(1u64)))),
        Err(ENXIO)
    ));
    drop(kept);
    drop(dir);
    drop(held);
    // Only the other mount's vnode is left.
    assert_eq!(vfs.numvnodes(), 1);
    assert_eq!(vfs.stats().freevnodes, 0);
    assert!(!keep_other.is_doomed());
    drop(keep_other);
    assert_eq!(vfs.unmount(other), Ok(1));
    assert_eq!(vfs.numvnodes(), 0);
    assert_eq!(vfs.kernel().vfs_hash_len(), 0);
}

#[test]
fn vnlru_thread_stops_on_drop() {
    let vfs = FreeBsdVfs::new(100, Variant::Pre);
    let k = Arc::clone(vfs.kernel());
    let mnt = vfs.mount("zfs", Arc::new(Recorder::default()));
    let v = get(&vfs, mnt, 1, VType::Reg);
    let t = Instant::now();
    drop(vfs);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(k.vnlru_exited.load(SeqCst));
    // References outlive the instance.
    assert_eq!(v.ino(), 1);
    drop(v);
}

#[test]
fn vnlru_thread_trims_excess() {
    // Use every vnode so allocators cannot recycle and must overshoot the
    // limit (each slow allocation sleeps one, shortened, `hz`), then let
    // go: vnlru's light path trims back to the limit on its own, but only
    // once the excess passes its threshold (desired + 10 before seed 000,
    // desired + VNLRU_COUNT_SLOP + 10 after).
    for (variant, extra, bound) in [
        (Variant::Pre, 40, 110),
        (Variant::Post, 150, 100 + VNLRU_COUNT_SLOP + 10),
    ] {
        let vfs = FreeBsdVfs::new(100, variant);
        let mnt = vfs.mount("zfs", Arc::new(Recorder::default()));
        let refs: Vec<VRef> = (0..100 + extra)
            .map(|i| get(&vfs, mnt, i, VType::Reg))
            .collect();
        assert_eq!(vfs.numvnodes(), 100 + extra as usize);
        let s = vfs.stats();
        assert!(s.alloc_sleeps >= extra, "{variant:?}: {s:?}");
        assert!(s.kicks >= 1);
        drop(refs);
        let deadline = Instant::now() + Duration::from_secs(10);
        while vfs.numvnodes() > bound && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let s = vfs.stats();
        assert!(vfs.numvnodes() <= bound, "{variant:?}: {s:?}");
        assert!(vfs.numvnodes() >= 100, "{variant:?}: trimmed below limit");
        assert!(s.recycles_free > 0, "{variant:?}: {s:?}");
    }
}

#[test]
fn single_flight_construction() {
    let vfs = FreeBsdVfs::new(1000, Variant::Post);
    let mnt = vfs.mount("ufs", Arc::new(Recorder::default()));
    let calls = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(8));
    let got: Vec<VRef> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (vfs, calls, barrier) = (&vfs, &calls, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    vfs.vget_or_alloc(mnt, 42, || {
                        calls.fetch_add(1, SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        Ok((VType::Reg, Box::new(42u64)))
                    })
                    .expect("vget_or_alloc")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(calls.load(SeqCst), 1);
    for v in &got {
        assert!(std::ptr::eq::<Vnode>(&**v, &*got[0]));
        assert_eq!(v.vtype(), VType::Reg);
    }
    assert_eq!(got[0].usecount(), 8);
    drop(got);
    // A failed constructor leaves nothing behind and the next try works.
    let e = vfs.vget_or_alloc(mnt, 43, || Err(5));
    assert_eq!(e.err(), Some(5));
    assert!(vfs.vfs_hash_get(mnt, 43).is_none());
    assert_eq!(get(&vfs, mnt, 43, VType::Dir).vtype(), VType::Dir);
}

#[test]
fn freevnodes_tracks_hold_transitions() {
    let vfs = FreeBsdVfs::new(10_000, Variant::Post);
    let mnt = vfs.mount("ufs", Arc::new(Recorder::default()));
    let refs: Vec<VRef> = (0..500).map(|i| get(&vfs, mnt, i, VType::Reg)).collect();
    assert_eq!(vfs.stats().freevnodes, 0);
    let holds: Vec<HoldRef> = refs[..100].iter().map(VRef::hold).collect();
    drop(refs);
    assert_eq!(vfs.stats().freevnodes, 400);
    // The cheap read is within the per-CPU slop of the truth.
    let cpus = crate::pcpu::ncpus();
    let slop = (crate::freevnodes::VNLRU_FREEVNODES_SLOP as usize) * cpus;
    assert!(vfs.freevnodes().abs_diff(400) <= slop);
    drop(holds);
    assert_eq!(vfs.stats().freevnodes, 500);
}

#[test]
fn stress_multithreaded() {
    for variant in [Variant::Pre, Variant::Post] {
        let desired = 300;
        let vfs = FreeBsdVfs::new(desired, variant);
        let recs: Vec<Arc<Recorder>> = (0..2).map(|_| Arc::new(Recorder::default())).collect();
        let mnts = [
            vfs.mount("zfs", recs[0].clone()),
            vfs.mount("tmpfs", recs[1].clone()),
        ];
        let peak = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (vfs, peak) = (&vfs, &peak);
                s.spawn(move || {
                    let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    let mut rnd = move || {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x
                    };
                    let mut keep: Vec<HoldRef> = Vec::new();
                    for _ in 0..4000 {
                        let r = rnd();
                        let mnt = mnts[(r & 1) as usize];
                        let ino = (r >> 8) % 2000;
                        let dir = get(vfs, mnt, ino / 50, VType::Dir);
                        let vp = match vfs.cache_lookup(&dir, &ino.to_string()) {
                            CacheLookup::Hit(v) => v,
                            _ => {
                                let v = get(vfs, mnt, 100 + ino, VType::Reg);
                                vfs.cache_enter(&dir, &ino.to_string(), Some(&v));
                                v
                            }
                        };
                        assert!(vp.ino() == 100 + ino || vp.is_doomed());
                        match r % 16 {
                            0 => keep.push(vp.hold()),
                            1 if !keep.is_empty() => drop(keep.swap_remove(0)),
                            2 => {
                                vfs.vnlru_free_vfsops("zfs", 20);
                            }
                            3 => vfs.cache_enter(&dir, "neg", None),
                            _ => {}
                        }
                        peak.fetch_max(vfs.numvnodes(), SeqCst);
                    }
                });
            }
        });
        let s = vfs.stats();
        assert!(s.recycles > 0, "{variant:?}: {s:?}");
        let held_max = 4 * 4000 / 16 + 4 * 2;
        assert!(
            peak.load(SeqCst) <= desired + VNLRU_COUNT_SLOP + held_max,
            "{variant:?}: peak {} {s:?}",
            peak.load(SeqCst)
        );
        for m in mnts {
            vfs.unmount(m).expect("unmount");
        }
        let s = vfs.stats();
        assert_eq!(vfs.numvnodes(), 0, "{variant:?}: {s:?}");
        assert_eq!(s.freevnodes, 0);
        assert_eq!(s.cache_entries, 0);
        assert_eq!(s.created, s.freed);
        assert_eq!(vfs.kernel().vfs_hash_len(), 0);
        // Every vnode still on the list is free zone memory.
        let list = vfs.kernel().vnode_list.lock();
        for vp in list.vnodes() {
            assert_eq!(vp.holdcnt.load(SeqCst), crate::vnode::VHOLD_NO_SMR);
            assert_eq!(vp.vtype(), VType::Bad);
        }
    }
}

/// File-system data that counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A layer dropped with its mounts still mounted and names cached frees
/// every vnode: mounts and vnodes point at each other (`v_mount`, the
/// mount's vnode list), which with reference counts is a cycle that kept
/// every vnode of every instance alive (the statstorm benchmark, which
/// builds a replica per configuration, grew by its whole cache each time).
#[test]
fn dropping_the_layer_frees_every_vnode() {
    for variant in [Variant::Pre, Variant::Post] {
        let dropped = Arc::new(AtomicUsize::new(0));
        let vfs = FreeBsdVfs::new(1000, variant);
        let mnt = vfs.mount("tmpfs", Arc::new(Recorder::default()));
        let dir = vfs
            .vget_or_alloc(mnt, 1, || {
                Ok((VType::Dir, Box::new(Counted(dropped.clone()))))
            })
            .unwrap();
        for ino in 2..200u64 {
            let vp = vfs
                .vget_or_alloc(mnt, ino, || {
                    Ok((VType::Reg, Box::new(Counted(dropped.clone()))))
                })
                .unwrap();
            vfs.cache_enter(&dir, &format!("f{ino}"), Some(&vp));
        }
        drop(dir);
        drop(vfs);
        assert_eq!(dropped.load(SeqCst), 199, "{variant:?}");
    }
}
