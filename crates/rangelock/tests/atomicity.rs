//! Stress: reads, writes and truncates under the range lock are atomic.
//!
//! Writers fill an aligned block with one fresh byte value per write;
//! readers read a range inside an aligned block no larger than any write
//! block, so every write covers all of a read or none of it: a read that
//! sees two values saw a torn write. A truncator cuts the file at a block
//! boundary (zeroing the tail and shrinking the length) and re-extends it,
//! each under an exclusive `[cut, inf)` lock; a reader that sees a length
//! change inside its range, or a mix of zeroed and written bytes, saw a
//! half-truncated file. The buffer is made of atomics so that a broken lock
//! shows up as a failed assertion, never as undefined behaviour.
//!
//! `UVFS_STRESS_SECS` sets the duration of each phase (default 1).

use fastrand::Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use uvfs_rangelock::{ByteRange, RangeLock};

const FILE: u64 = 1 << 20; // 1 MiB
const MAX_BLOCK_SHIFT: u32 = 18; // 256 KiB: truncation points are multiples

struct File {
    lock: RangeLock,
    bytes: Vec<AtomicU8>,
    len: AtomicU64,
}

fn secs() -> f64 {
    std::env::var("UVFS_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

/// Runs readers whose ranges lie in aligned blocks of `1 << read_shift`
/// bytes against writers of blocks of `1 << read_shift ..= MAX_BLOCK_SHIFT`
/// and, if `truncate`, a truncator.
fn stress(read_shift: u32, max_read: u64, truncate: bool) {
    let f = Arc::new(File {
        lock: RangeLock::new(),
        bytes: (0..FILE).map(|_| AtomicU8::new(1)).collect(),
        len: AtomicU64::new(FILE),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for t in 0..3u64 {
        let (f, stop, reads) = (f.clone(), stop.clone(), reads.clone());
        hs.push(thread::spawn(move || {
            let mut rng = Rng::with_seed(0x9e37_79b9 + t);
            let mut buf = Vec::new();
            while !stop.load(Relaxed) {
                let block = 1u64 << read_shift;
                let base = rng.u64(..FILE / block) * block;
                let start = base + rng.u64(..block);
                let len = 1 + rng.u64(..max_read.min(base + block - start));
                let range = ByteRange::at(start, len);
                let _g = f.lock.read(range);
                let l1 = f.len.load(Relaxed);
                let end = range.end().min(l1);
                buf.clear();
                buf.extend((start..end.max(start)).map(|i| f.bytes[i as usize].load(Relaxed)));
                let l2 = f.len.load(Relaxed);
                assert_eq!(
                    range.end().min(l1),
                    range.end().min(l2),
                    "length changed inside a read-locked range"
                );
                if let Some(&first) = buf.first() {
                    assert!(
                        buf.iter().all(|&b| b == first),
                        "torn read of {range:?}: {first} and {:?}",
                        buf.iter().find(|&&b| b != first)
                    );
                }
                reads.fetch_add(1, Relaxed);
            }
        }));
    }
    for t in 0..2u64 {
        let (f, stop) = (f.clone(), stop.clone());
        hs.push(thread::spawn(move || {
            let mut rng = Rng::with_seed(0x1234_5678 + t);
            let mut value = 2u8 + t as u8;
            while !stop.load(Relaxed) {
                let shift =
                    read_shift + rng.u64(..(MAX_BLOCK_SHIFT - read_shift + 1) as u64) as u32;
                let block = 1u64 << shift;
                let start = rng.u64(..FILE / block) * block;
                let _g = f.lock.write(start..start + block);
                value = value.wrapping_add(2).max(2);
                let end = (start + block).min(f.len.load(Relaxed));
                for i in start..end.max(start) {
                    f.bytes[i as usize].store(value, Relaxed);
                }
            }
        }));
    }
    if truncate {
        let (f, stop) = (f.clone(), stop.clone());
        hs.push(thread::spawn(move || {
            let mut rng = Rng::with_seed(77);
            while !stop.load(Relaxed) {
                let step = 1u64 << MAX_BLOCK_SHIFT;
                let cut = rng.u64(..FILE / step) * step;
                {
                    let _g = f.lock.write(cut..);
                    f.len.store(cut, Relaxed);
                    for i in cut..FILE {
                        f.bytes[i as usize].store(0, Relaxed);
                    }
                }
                thread::yield_now();
                {
                    // Re-extend: the new tail reads as zeros, like a hole.
                    let _g = f.lock.write(cut..);
                    f.len.store(FILE, Relaxed);
                }
            }
        }));
    }
    thread::sleep(Duration::from_secs_f64(secs()));
    stop.store(true, Relaxed);
    let started = Instant::now();
    for h in hs {
        h.join().unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(3600));
    assert!(reads.load(Relaxed) > 0, "no read completed");
    assert!(f.lock.is_idle());
}

#[test]
fn page_reads_against_writes() {
    stress(12, 4096, false); // narrow slots, sub-page and whole-page reads
}

#[test]
fn wide_reads_against_writes_and_truncate() {
    stress(15, 1 << 15, true); // 8-page blocks: wide slots
}

#[test]
fn long_reads_against_writes_and_truncate() {
    stress(MAX_BLOCK_SHIFT, 1 << MAX_BLOCK_SHIFT, true); // the queue
}
