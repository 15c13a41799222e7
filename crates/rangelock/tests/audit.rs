//! Property tests: granted ranges are pairwise compatible at all times.
//!
//! * A sequential model: random `try_read`/`try_write`/drop sequences must
//!   succeed exactly when the request is compatible with what is held, and
//!   the lock's own snapshot must always list a pairwise-compatible set
//!   equal to the model's.
//! * A concurrent audit: threads take random ranges (blocking, try, with a
//!   deadline) and record every grant in a table checked under a mutex; a
//!   conflicting pair in the table at any moment fails the test.

use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use uvfs_rangelock::{ByteRange, Mode, RangeLock};

const P: u64 = 4096;

fn conflicts(a: &(ByteRange, Mode), b: &(ByteRange, Mode)) -> bool {
    a.0.overlaps(&b.0) && (a.1 == Mode::Exclusive || b.1 == Mode::Exclusive)
}

fn range_strategy() -> impl Strategy<Value = ByteRange> {
    // Sub-page, page, wide and long ranges over 40 pages, some unbounded.
    (
        0u64..40 * 8,
        prop_oneof![1u64..8, Just(8u64), 9u64..64, 64u64..400, Just(u64::MAX)],
    )
        .prop_map(|(s, len)| {
            let start = s * 512;
            if len == u64::MAX {
                ByteRange::from_start(start)
            } else {
                ByteRange::at(start, len * 512)
            }
        })
}

#[derive(Debug, Clone)]
enum Op {
    Read(ByteRange),
    Write(ByteRange),
    Drop(usize),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => range_strategy().prop_map(Op::Read),
        2 => range_strategy().prop_map(Op::Write),
        3 => any::<usize>().prop_map(Op::Drop),
    ]
}

enum Guard<'a> {
    R(#[allow(dead_code)] uvfs_rangelock::ReadGuard<'a>),
    W(#[allow(dead_code)] uvfs_rangelock::WriteGuard<'a>),
}

fn sorted(mut v: Vec<(u64, u64, bool)>) -> Vec<(u64, u64, bool)> {
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn try_matches_model_and_granted_set_is_compatible(
        warm in any::<bool>(),
        ops in proptest::collection::vec(op_strategy(), 1..60),
    ) {
        let l = RangeLock::new();
        if warm {
            drop(l.read(0..1)); // with the reader table
        }
        let mut held: Vec<((ByteRange, Mode), Guard<'_>)> = Vec::new();
        for op in ops {
            match op {
                Op::Read(r) | Op::Write(r) => {
                    let mode = if matches!(op, Op::Read(_)) { Mode::Shared } else { Mode::Exclusive };
                    let expect = held.iter().all(|(h, _)| !conflicts(h, &(r, mode)));
                    let got = match mode {
                        Mode::Shared => l.try_read(r).map(Guard::R),
                        Mode::Exclusive => l.try_write(r).map(Guard::W),
                    };
                    prop_assert_eq!(got.is_some(), expect, "{:?} {:?} with {:?}", mode, r,
                        held.iter().map(|h| h.0).collect::<Vec<_>>());
                    if let Some(g) = got {
                        if !r.is_empty() {
                            held.push(((r, mode), g));
                        }
                    }
                }
                Op::Drop(i) => {
                    if !held.is_empty() {
                        let i = i % held.len();
                        held.swap_remove(i);
                    }
                }
            }
            let snap = l.snapshot();
            prop_assert!(snap.waiting.is_empty());
            let mut granted = Vec::new();
            for h in &snap.granted {
                for _ in 0..h.count {
                    granted.push((h.range, h.mode));
                }
            }
            for (i, a) in granted.iter().enumerate() {
                for b in &granted[i + 1..] {
                    prop_assert!(!conflicts(a, b), "granted {:?} and {:?}", a, b);
                }
            }
            let key = |(r, m): &(ByteRange, Mode)| (r.start(), r.end(), *m == Mode::Exclusive);
            prop_assert_eq!(
                sorted(granted.iter().map(key).collect()),
                sorted(held.iter().map(|(h, _)| key(h)).collect())
            );
        }
        drop(held);
        prop_assert!(l.is_idle());
    }
}

#[test]
fn concurrent_grants_are_pairwise_compatible() {
    let l = Arc::new(RangeLock::new());
    let table: Arc<Mutex<Vec<(u64, ByteRange, Mode)>>> = Arc::default();
    let stop_at = Instant::now() + Duration::from_millis(1500);
    let hs: Vec<_> = (0..4u64)
        .map(|t| {
            let (l, table) = (l.clone(), table.clone());
            thread::spawn(move || {
                let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ t;
                let mut id = t << 48;
                while Instant::now() < stop_at {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let start = (x % 24) * P / 2;
                    let range = match (x >> 8) % 5 {
                        0 => ByteRange::at(start, 100),
                        1 => ByteRange::at(start, P),
                        2 => ByteRange::at(start, 6 * P),
                        3 => ByteRange::at(start, 60 * P),
                        _ => ByteRange::from_start(start),
                    };
                    let write = (x >> 16).is_multiple_of(3);
                    let mode = if write { Mode::Exclusive } else { Mode::Shared };
                    let deadline = Instant::now() + Duration::from_micros(50);
                    let check_in = |id: u64| {
                        let mut tb = table.lock().unwrap();
                        for (_, r, m) in tb.iter() {
                            assert!(
                                !conflicts(&(*r, *m), &(range, mode)),
                                "{range:?} {mode:?} granted while {r:?} {m:?} held"
                            );
                        }
                        tb.push((id, range, mode));
                    };
                    let check_out = |id: u64| table.lock().unwrap().retain(|e| e.0 != id);
                    id += 1;
                    match ((x >> 24) % 3, write) {
                        (0, false) => {
                            let _g = l.read(range);
                            check_in(id);
                            check_out(id);
                        }
                        (0, true) => {
                            let _g = l.write(range);
                            check_in(id);
                            check_out(id);
                        }
                        (1, false) => {
                            if let Some(_g) = l.try_read(range) {
                                check_in(id);
                                check_out(id);
                            }
                        }
                        (1, true) => {
                            if let Some(_g) = l.try_write(range) {
                                check_in(id);
                                check_out(id);
                            }
                        }
                        (_, false) => {
                            if let Some(_g) = l.read_until(range, deadline) {
                                check_in(id);
                                check_out(id);
                            }
                        }
                        (_, true) => {
                            if let Some(_g) = l.write_until(range, deadline) {
                                check_in(id);
                                check_out(id);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(l.is_idle(), "{:?}", l.snapshot());
}
