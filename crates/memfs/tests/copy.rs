//! `copy_file_range` on memfs: what it copies, where it stops, what it
//! refuses, and that it is atomic and deadlock-free under concurrency.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_memfs::{MemFs, MemFsConfig, PAGE_SIZE};
use uvfs_vfs::{Ctx, Errno, Fh, FileSystem, SetAttr, VnodeRef};
use uvfs_vnode::{Config, VnodeLayer};

const C: Ctx = Ctx::ROOT;
const P: u64 = PAGE_SIZE as u64;

fn memfs(size_limit: Option<u64>) -> Arc<MemFs> {
    MemFs::new(
        VnodeLayer::new(Config::with_limit(1024)),
        MemFsConfig {
            size_limit,
            ..Default::default()
        },
    )
}

fn file(fs: &MemFs, name: &str) -> VnodeRef {
    let root = fs.root().unwrap();
    fs.create(&C, &root, name.as_bytes(), 0o644, libc::O_RDWR)
        .unwrap()
        .0
}

fn copy(fs: &MemFs, a: &VnodeRef, off_in: u64, b: &VnodeRef, off_out: u64, len: u64) -> u64 {
    fs.copy_file_range(a, Fh(0), off_in, b, Fh(0), off_out, len, 0)
        .unwrap()
}

fn size(n: u64) -> SetAttr {
    SetAttr {
        size: Some(n),
        ..SetAttr::default()
    }
}

fn read_all(fs: &MemFs, f: &VnodeRef) -> Vec<u8> {
    let size = fs.getattr(f).unwrap().size;
    fs.read(f, Fh(0), 0, size as u32).unwrap()
}

#[test]
fn copies_bytes_at_any_alignment() {
    let fs = memfs(None);
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    let src: Vec<u8> = (0..3 * P + 123).map(|i| (i * 7 % 251) as u8).collect();
    fs.write(&a, Fh(0), 0, &src).unwrap();
    fs.write(&b, Fh(0), 0, &[9u8; 100]).unwrap();
    // Into the middle of b, from the middle of a, across page boundaries.
    assert_eq!(copy(&fs, &a, 1000, &b, 50, 2 * P), 2 * P);
    let got = read_all(&fs, &b);
    assert_eq!(got.len() as u64, 50 + 2 * P);
    assert_eq!(&got[..50], &[9u8; 50][..]);
    assert_eq!(&got[50..], &src[1000..1000 + 2 * P as usize]);
    // The source is untouched.
    assert_eq!(read_all(&fs, &a), src);
}

#[test]
fn stops_at_the_end_of_the_source() {
    let fs = memfs(None);
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    fs.write(&a, Fh(0), 0, b"hello world").unwrap();
    assert_eq!(copy(&fs, &a, 6, &b, 0, 1 << 30), 5);
    assert_eq!(read_all(&fs, &b), b"world");
    // At or past the end: nothing, and the destination keeps its size.
    assert_eq!(copy(&fs, &a, 11, &b, 100, 10), 0);
    assert_eq!(copy(&fs, &a, 5000, &b, 100, 10), 0);
    assert_eq!(fs.getattr(&b).unwrap().size, 5);
}

#[test]
fn holes_are_copied_as_the_zeros_they_read_as_as_on_tmpfs() {
    let fs = memfs(None);
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    // a: data in pages 0 and 3, holes in 1-2 and 4-5 up to the size.
    fs.write(&a, Fh(0), 0, &[1u8; PAGE_SIZE]).unwrap();
    fs.write(&a, Fh(0), 3 * P, &[3u8; PAGE_SIZE]).unwrap();
    fs.setattr(&C, &a, &size(6 * P)).unwrap();
    // b had other data everywhere the copy lands.
    fs.write(&b, Fh(0), 0, &vec![0xeeu8; 6 * PAGE_SIZE])
        .unwrap();
    assert_eq!(copy(&fs, &a, 0, &b, 0, 6 * P), 6 * P);
    let mut want = vec![0u8; 6 * PAGE_SIZE];
    want[..PAGE_SIZE].fill(1);
    want[3 * PAGE_SIZE..4 * PAGE_SIZE].fill(3);
    assert_eq!(read_all(&fs, &b), want);
    // A copy ending in a hole sets the size; like tmpfs, every page of
    // the copy is allocated (scripts/difftest.py --blocks compares).
    let c = file(&fs, "c");
    assert_eq!(copy(&fs, &a, 3 * P, &c, 0, 3 * P), 3 * P);
    assert_eq!(fs.getattr(&c).unwrap().size, 3 * P);
    assert_eq!(fs.getattr(&c).unwrap().blocks, 3 * P / 512);
    assert_eq!(fs.getattr(&a).unwrap().blocks, 2 * P / 512);
}

#[test]
fn within_one_file_disjoint_ranges_copy_and_overlapping_ones_fail() {
    let fs = memfs(None);
    let a = file(&fs, "a");
    let src: Vec<u8> = (0..2 * P).map(|i| (i % 256) as u8).collect();
    fs.write(&a, Fh(0), 0, &src).unwrap();
    assert_eq!(copy(&fs, &a, 0, &a, 2 * P, 2 * P), 2 * P);
    let got = read_all(&fs, &a);
    assert_eq!(&got[..2 * PAGE_SIZE], &src[..]);
    assert_eq!(&got[2 * PAGE_SIZE..], &src[..]);
    let overlap = fs.copy_file_range(&a, Fh(0), 0, &a, Fh(0), 100, 2 * P, 0);
    assert_eq!(overlap.unwrap_err(), Errno::EINVAL);
    // Overlap is judged on what the source has: a request running past
    // its end may name an overlapping range that is never copied.
    assert_eq!(copy(&fs, &a, 3 * P, &a, 0, 4 * P), P);
    assert_eq!(read_all(&fs, &a)[..PAGE_SIZE], src[PAGE_SIZE..]);
}

#[test]
fn refuses_what_copy_file_range_refuses() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    fs.write(&a, Fh(0), 0, b"data").unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    let l = fs.symlink(&C, &root, b"l", b"a").unwrap();
    let cfr = |x: &VnodeRef, y: &VnodeRef, off_out: u64, flags: u32| {
        fs.copy_file_range(x, Fh(0), 0, y, Fh(0), off_out, 4, flags)
    };
    assert_eq!(cfr(&d, &b, 0, 0).unwrap_err(), Errno::EISDIR);
    assert_eq!(cfr(&a, &d, 0, 0).unwrap_err(), Errno::EISDIR);
    assert_eq!(cfr(&l, &b, 0, 0).unwrap_err(), Errno::EINVAL);
    assert_eq!(cfr(&a, &b, 0, 1).unwrap_err(), Errno::EINVAL);
    let max = uvfs_memfs::MAX_FILE_SIZE;
    assert_eq!(cfr(&a, &b, max, 0).unwrap_err(), Errno::EFBIG);
    assert_eq!(cfr(&a, &b, max + 1, 0).unwrap_err(), Errno::EINVAL);
    // Up to the largest size, no further.
    assert_eq!(cfr(&a, &b, max - 2, 0).unwrap(), 2);
    assert_eq!(fs.getattr(&b).unwrap().size, max);
}

#[test]
fn a_full_file_system_copies_what_fits_and_loses_nothing() {
    let fs = memfs(Some(6 * P));
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    fs.write(&a, Fh(0), 0, &[5u8; 4 * PAGE_SIZE]).unwrap();
    fs.write(&b, Fh(0), 0, &[6u8; 100]).unwrap();
    // b has one page; one more fits.
    assert_eq!(copy(&fs, &a, 0, &b, P, 4 * P), P);
    let got = read_all(&fs, &b);
    assert_eq!(got.len(), 2 * PAGE_SIZE);
    assert_eq!(&got[..100], &[6u8; 100][..]);
    assert!(got[100..PAGE_SIZE].iter().all(|&c| c == 0));
    assert!(got[PAGE_SIZE..].iter().all(|&c| c == 5));
    let full = fs.copy_file_range(&a, Fh(0), 0, &b, Fh(0), 2 * P, P, 0);
    assert_eq!(full.unwrap_err(), Errno::ENOSPC);
    assert_eq!(read_all(&fs, &a), vec![5u8; 4 * PAGE_SIZE]);
}

#[test]
fn one_request_copies_a_bounded_amount() {
    let fs = memfs(None);
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    let len = 20u64 << 20;
    fs.setattr(&C, &a, &size(len)).unwrap();
    fs.write(&a, Fh(0), len - 1, b"z").unwrap();
    let mut at = 0;
    let mut calls = 0;
    while at < len {
        let n = copy(&fs, &a, at, &b, at, len - at);
        assert!(n > 0 && n <= 8 << 20, "{n}");
        at += n;
        calls += 1;
    }
    assert_eq!(calls, 3);
    assert_eq!(fs.getattr(&b).unwrap().size, len);
    assert_eq!(fs.read(&b, Fh(0), len - 2, 2).unwrap(), b"\0z");
}

#[test]
fn copy_updates_the_times_as_a_write_and_a_read_would() {
    let fs = memfs(None);
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    fs.write(&a, Fh(0), 0, b"abc").unwrap();
    let before = fs.getattr(&b).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(copy(&fs, &a, 0, &b, 0, 3), 3);
    let after = fs.getattr(&b).unwrap();
    assert!(after.mtime > before.mtime && after.ctime > before.ctime);
    // Copying nothing changes nothing.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(copy(&fs, &a, 3, &b, 0, 3), 0);
    assert_eq!(fs.getattr(&b).unwrap().mtime, after.mtime);
}

/// Copies both ways between two files while a writer rewrites one of
/// them and readers check both: every read sees one value throughout the
/// range (each copy and write is atomic), and opposite copies, which take
/// each other's locks, never deadlock.
#[test]
fn concurrent_copies_are_atomic_and_never_deadlock() {
    const LEN: usize = 64 * 1024 + 100;
    let fs = memfs(None);
    let (a, b) = (file(&fs, "a"), file(&fs, "b"));
    fs.write(&a, Fh(0), 0, &[0u8; LEN]).unwrap();
    fs.write(&b, Fh(0), 0, &[0u8; LEN]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let copies = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    let spawn = |f: Box<dyn Fn(u64) + Send>| {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                f(i);
                i += 1;
            }
        })
    };
    {
        let (fs, a) = (Arc::clone(&fs), a.clone());
        threads.push(spawn(Box::new(move |i| {
            let v = (i % 250) as u8 + 1;
            fs.write(&a, Fh(0), 0, &[v; LEN]).unwrap();
        })));
    }
    for (x, y) in [(a.clone(), b.clone()), (b.clone(), a.clone())] {
        let (fs, copies) = (Arc::clone(&fs), Arc::clone(&copies));
        threads.push(spawn(Box::new(move |_| {
            assert_eq!(copy(&fs, &x, 0, &y, 0, LEN as u64), LEN as u64);
            copies.fetch_add(1, Ordering::Relaxed);
        })));
    }
    for f in [a.clone(), b.clone()] {
        let fs = Arc::clone(&fs);
        threads.push(spawn(Box::new(move |_| {
            let got = fs.read(&f, Fh(0), 0, LEN as u32).unwrap();
            assert_eq!(got.len(), LEN);
            assert!(got.iter().all(|&c| c == got[0]), "a torn copy or write");
        })));
    }
    // Progress is checked each second: a deadlock stops it for good, a
    // slow machine (ThreadSanitizer) only slows it.
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut seen = 0;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        let now = copies.load(Ordering::Relaxed);
        assert!(now > seen, "no copy finished in a second: deadlock?");
        seen = now;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn long_symlinks_take_a_page_as_on_tmpfs() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let blocks = |name: &[u8], len: usize| {
        let l = fs.symlink(&C, &root, name, &vec![b'x'; len]).unwrap();
        fs.getattr(&l).unwrap().blocks
    };
    assert_eq!(blocks(b"short", 127), 0);
    assert_eq!(blocks(b"long", 128), 8);
    assert_eq!(blocks(b"longest", 4095), 8);
}
