//! How long a live upgrade's save and restore of a memfs take (issue 28's
//! target: 1 GiB of data in 100,000 files well under a second).
//!
//! `cargo run --release -p uvfs-memfs --example handover_speed [FILES [MIB]]`
//!
//! With the `uvfs` binary's allocator and huge-page policy, so that the
//! heap behaves as the server's.

use std::time::Instant;
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vfs::{Ctx, Fh, FileSystem, Keep};
use uvfs_vnode::{Config, VnodeLayer};

#[global_allocator]
static ALLOC: uvfs_process::alloc::Counting = uvfs_process::alloc::Counting;

fn main() {
    uvfs_process::hugepages::apply();
    uvfs_process::alloc::mark_installed();
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().map_or(100_000, |a| a.parse().expect("FILES"));
    println!("at start: {}", memory());
    let mib: usize = args.next().map_or(1024, |a| a.parse().expect("MIB"));
    let each = (mib << 20) / files;
    let c = Ctx::ROOT;
    let fs = MemFs::new(
        VnodeLayer::new(Config::with_limit(4096)),
        MemFsConfig::default(),
    );
    let root = fs.root().expect("root");
    let data: Vec<u8> = (0..each).map(|i| (i * 7) as u8).collect();
    let t = Instant::now();
    for d in 0..files.div_ceil(1000) {
        let dir = fs
            .mkdir(&c, &root, format!("d{d}").as_bytes(), 0o755)
            .expect("mkdir");
        for i in 0..1000.min(files - d * 1000) {
            let (f, _) = fs
                .create(&c, &dir, format!("f{i}").as_bytes(), 0o644, libc::O_RDWR)
                .expect("create");
            fs.write(&f, Fh(0), 0, &data).expect("write");
        }
    }
    println!(
        "built {files} files, {} MiB of pages in {:.2?}",
        fs.bytes_used() >> 20,
        t.elapsed()
    );
    println!("before the move: {}", memory());
    let t = Instant::now();
    assert!(fs.save_ahead(&[]).expect("save_ahead").is_none());
    println!(
        "pages moved to page files in {:.2?} (requests still served); {}",
        t.elapsed(),
        memory()
    );
    // As a request thread of the server does while it serves (the heap
    // pages were this thread's), past the allocator's purge delay.
    uvfs_process::alloc::return_freed_memory();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    uvfs_process::alloc::return_freed_memory();
    println!("the heap collected: {}", memory());
    let t = Instant::now();
    let saved = fs
        .save(&Keep {
            nodes: &[],
            open: &[],
            ahead: None,
        })
        .expect("save");
    let save = t.elapsed();
    let meta = saved.bytes.len();
    let t = Instant::now();
    let new = MemFs::restore(
        &VnodeLayer::new(Config::with_limit(4096)),
        MemFsConfig::default(),
        saved,
    )
    .expect("restore");
    let restore = t.elapsed();
    fs.handed_over();
    new.taken_over();
    assert_eq!(new.bytes_used(), fs.bytes_used());
    assert_eq!(new.inode_count(), fs.inode_count());
    println!(
        "save {save:.2?} (metadata {} KiB), restore {restore:.2?}, total {:.2?}",
        meta >> 10,
        save + restore
    );
    // Removing every file: the restored one's pages (the page files')
    // are given back to the system; the original's, handed over, are not.
    for (which, f) in [("original", &fs), ("restored", &new)] {
        let t = Instant::now();
        remove_all(f, files);
        println!("removed every {which} file in {:.2?}", t.elapsed());
        uvfs_process::alloc::return_freed_memory();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        uvfs_process::alloc::return_freed_memory();
        println!("  then: {}", memory());
    }
}

/// The process's anonymous (heap) and shared-memory (page file) resident
/// sizes.
fn memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb >> 10)
    };
    format!(
        "heap {} MiB, page files {} MiB resident",
        field("RssAnon:"),
        field("RssShmem:")
    )
}

fn remove_all(fs: &MemFs, files: usize) {
    let c = Ctx::ROOT;
    let root = fs.root().expect("root");
    for d in 0..files.div_ceil(1000) {
        let name = format!("d{d}");
        let dir = fs.lookup(&c, &root, name.as_bytes()).expect("lookup");
        for i in 0..1000.min(files - d * 1000) {
            fs.unlink(&c, &dir, format!("f{i}").as_bytes())
                .expect("unlink");
        }
    }
}
