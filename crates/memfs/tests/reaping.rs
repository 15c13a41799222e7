//! A large file's pages are freed on the reaper thread when the file
//! goes or is truncated, and its space comes back to `--size` at once.

use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vfs::{Ctx, FallocMode, FileSystem};
use uvfs_vnode::{Config, VnodeLayer};

const C: Ctx = Ctx::ROOT;
const MIB: u64 = 1 << 20;

fn stat(fs: &MemFs, name: &str) -> u64 {
    fs.fs_stats()
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .1
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_large_files_pages_are_reaped_and_its_space_comes_back_at_once() {
    let fs: Arc<MemFs> = MemFs::new(
        VnodeLayer::new(Config::with_limit(4096)),
        MemFsConfig {
            size_limit: Some(200 * MIB),
            ..Default::default()
        },
    );
    let root = fs.root().unwrap();
    let reaped0 = stat(&fs, "memfs.data.reaped_bytes");

    // Removed: the space is back before the pages are freed.
    let (f, fh) = fs.create(&C, &root, b"big", 0o644, libc::O_RDWR).unwrap();
    fs.fallocate(&f, fh, FallocMode(0), 0, 100 * MIB).unwrap();
    fs.release(&f, fh).unwrap();
    assert_eq!(stat(&fs, "memfs.data.bytes"), 100 * MIB);
    fs.unlink(&C, &root, b"big").unwrap();
    drop(f);
    assert_eq!(stat(&fs, "memfs.data.bytes"), 0, "space back at once");
    // ... so 150 MiB fit again in a 200 MiB memfs right away.
    let (g, fh) = fs.create(&C, &root, b"next", 0o644, libc::O_RDWR).unwrap();
    fs.fallocate(&g, fh, FallocMode(0), 0, 150 * MIB).unwrap();
    eventually("the removed file reaped", || {
        stat(&fs, "memfs.data.reaped_bytes") >= reaped0 + 100 * MIB
    });

    // Truncated: the tail goes the same way; a small tail in place.
    let reaped1 = stat(&fs, "memfs.data.reaped_bytes");
    let size = |n| uvfs_vfs::SetAttr {
        size: Some(n),
        ..Default::default()
    };
    fs.setattr(&C, &g, &size(10 * MIB)).unwrap();
    assert_eq!(stat(&fs, "memfs.data.bytes"), 10 * MIB);
    eventually("the truncated tail reaped", || {
        stat(&fs, "memfs.data.reaped_bytes") >= reaped1 + 140 * MIB
    });
    let reaped2 = stat(&fs, "memfs.data.reaped_bytes");
    fs.setattr(&C, &g, &size(0)).unwrap();
    assert_eq!(stat(&fs, "memfs.data.bytes"), 0);
    // 10 MiB: under the reaper's threshold, freed in place.
    assert_eq!(stat(&fs, "memfs.data.reaped_bytes"), reaped2);
    fs.release(&g, fh).unwrap();
    eventually("nothing left waiting", || {
        stat(&fs, "memfs.data.reaping_bytes") == 0
    });
}
