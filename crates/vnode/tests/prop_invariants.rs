//! Property tests: random sequences of operations on a small layer, with
//! the invariants checked after every step against a simple model of who
//! holds what.

use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uvfs_vnode::{Config, FsHooks, HoldRef, NcLookup, VType, Vnode, VnodeLayer, VnodeRef};

#[derive(Default)]
struct Log {
    reclaimed: Mutex<Vec<(u32, u64, u32, u32)>>,
}

impl FsHooks for Log {
    fn reclaim(&self, vp: &Vnode) {
        self.reclaimed.lock().unwrap().push((
            vp.mount_id().0,
            vp.ino(),
            vp.use_count(),
            vp.hold_count(),
        ));
    }
}

#[derive(Debug, Clone)]
enum Op {
    Get { m: usize, ino: u64 },
    Hold { m: usize, ino: u64 },
    DropUse(usize),
    DropHold(usize),
    Prune { m: usize, n: usize },
    Enter { ino: u64 },
    Lookup { ino: u64 },
    Remove { ino: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..40u64).prop_map(|(m, ino)| Op::Get { m, ino }),
        2 => (0..2usize, 0..40u64).prop_map(|(m, ino)| Op::Hold { m, ino }),
        3 => (0..8usize).prop_map(Op::DropUse),
        2 => (0..8usize).prop_map(Op::DropHold),
        1 => (0..2usize, 0..10usize).prop_map(|(m, n)| Op::Prune { m, n }),
        2 => (0..40u64).prop_map(|ino| Op::Enter { ino }),
        2 => (0..40u64).prop_map(|ino| Op::Lookup { ino }),
        1 => (0..40u64).prop_map(|ino| Op::Remove { ino }),
    ]
}

fn init(ino: u64) -> impl FnOnce() -> Result<(VType, uvfs_vnode::VnodeData), i32> {
    move || Ok((VType::Reg, Arc::new(ino)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn invariants_hold_under_random_operations(ops in prop::collection::vec(op(), 1..120)) {
        let limit = 8;
        let cfg = Config { reclaimer: false, namecache_limit: 6, ..Config::with_limit(limit) };
        let layer = VnodeLayer::new(cfg);
        let logs = [Arc::new(Log::default()), Arc::new(Log::default())];
        let mounts = [layer.mount("a", logs[0].clone()), layer.mount("b", logs[1].clone())];
        let dir = layer.get(&mounts[0], 1_000, || Ok((VType::Dir, Arc::new(0u64)))).unwrap();
        let mut uses: Vec<VnodeRef> = Vec::new();
        let mut holds: Vec<HoldRef> = Vec::new();
        // An allocation may take the count past the limit only when it
        // found nothing free to recycle (an overcommit): checked right
        // after each allocation, before its vnode can be released.
        let check_alloc = |before: u64| -> Result<(), TestCaseError> {
            let st = layer.stats();
            if st.numvnodes > before && st.numvnodes as usize > limit {
                prop_assert_eq!(st.freevnodes, 0,
                    "allocated past the limit ({}) with free vnodes to recycle", st.numvnodes);
            }
            Ok(())
        };
        for op in ops {
            let before = layer.stats().numvnodes;
            let allocates = matches!(op, Op::Get { .. } | Op::Hold { .. } | Op::Enter { .. });
            match op {
                Op::Get { m, ino } => {
                    let v = layer.get(&mounts[m], ino, init(ino)).unwrap();
                    prop_assert!(!v.is_doomed());
                    prop_assert_eq!(v.data::<u64>(), Some(&ino));
                    uses.push(v);
                    check_alloc(before)?;
                }
                Op::Hold { m, ino } => {
                    holds.push(layer.get(&mounts[m], ino, init(ino)).unwrap().hold());
                    check_alloc(before)?;
                }
                Op::DropUse(i) => { if i < uses.len() { uses.swap_remove(i); } }
                Op::DropHold(i) => { if i < holds.len() { holds.swap_remove(i); } }
                Op::Prune { m, n } => {
                    let before = logs[1 - m].reclaimed.lock().unwrap().len();
                    let r = layer.prune(&mounts[m], n);
                    prop_assert!(r.recycled as usize <= n);
                    prop_assert_eq!(r.attempts, r.recycled, "single-threaded: nothing races");
                    prop_assert_eq!(logs[1 - m].reclaimed.lock().unwrap().len(), before,
                        "prune touched another mount");
                }
                Op::Enter { ino } => {
                    let v = layer.get(&mounts[0], ino, init(ino)).unwrap();
                    check_alloc(before)?;
                    layer.namecache().enter(&dir, ino.to_string().as_bytes(), Some(&v));
                }
                Op::Lookup { ino } => {
                    if let NcLookup::Hit(v) = layer.namecache().lookup(&dir, ino.to_string().as_bytes()) {
                        prop_assert_eq!(v.ino(), ino);
                        prop_assert!(!v.is_doomed());
                    }
                }
                Op::Remove { ino } => layer.namecache().remove(&dir, ino.to_string().as_bytes()),
            }
            // Nothing with a reference was ever reclaimed.
            for l in &logs {
                for &(_, ino, u, h) in l.reclaimed.lock().unwrap().iter() {
                    prop_assert_eq!((u, h), (0, 0), "reclaimed ino {} with references", ino);
                }
            }
            // Every live reference still names a live vnode.
            for v in &uses { prop_assert!(!v.is_doomed()); }
            for h in &holds { prop_assert!(!h.vnode().is_doomed()); }
            // Counts agree with the table and the per-mount sums.
            let st = layer.stats();
            prop_assert_eq!(st.numvnodes as usize, layer.table_len());
            prop_assert_eq!(st.numvnodes as usize, mounts[0].vnode_count() + mounts[1].vnode_count());
            prop_assert_eq!(st.freevnodes as usize, mounts[0].free_count() + mounts[1].free_count());
            // Only allocations add vnodes. Releases do not recycle: with the
            // reclaimer off, what an overcommit left over the limit goes at
            // later allocations (checked below).
            if !allocates {
                prop_assert!(st.numvnodes <= before, "{} -> {} without an allocation", before, st.numvnodes);
            }
        }
        // The count settles: with every reference but the directory's
        // gone, a few allocations recycle it back under the limit (up to
        // DIRECT_BATCH each), without the reclaimer.
        uses.clear();
        holds.clear();
        let over = layer.stats().numvnodes as usize;
        for k in 0..over {
            drop(layer.get(&mounts[k % 2], 10_000 + k as u64, init(10_000 + k as u64)).unwrap());
        }
        prop_assert!(layer.stats().numvnodes as usize <= limit,
            "{} vnodes after {} allocations with nothing referenced (limit {})",
            layer.stats().numvnodes, over, limit);
        // Unmount frees everything once references are gone.
        drop(uses);
        drop(holds);
        drop(dir);
        let mut freed: HashMap<usize, usize> = HashMap::new();
        for (i, m) in mounts.iter().enumerate() {
            layer.unmount(m, false).unwrap();
            freed.insert(i, m.vnode_count());
        }
        prop_assert_eq!(layer.table_len(), 0);
        prop_assert_eq!(layer.stats().numvnodes, 0);
        prop_assert!(layer.namecache().is_empty());
        prop_assert!(freed.values().all(|&n| n == 0));
    }
}
