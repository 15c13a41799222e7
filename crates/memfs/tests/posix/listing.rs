//! Listings that go on while their directory changes under them.

use crate::common::names;
use crate::{file, memfs, C};
use uvfs_memfs::MemFs;
use uvfs_vfs::{Fh, FileSystem, RenameFlags, VnodeRef};

/// Lists `dir` as getdents does, a batch of `batch` entries per call
/// resumed at the last one's offset, calling `each` with every name once
/// its batch is read (between calls, as a program works through what
/// readdir(3) buffered). Panics past `bound` names: a listing that never
/// ends.
fn list_while(
    fs: &MemFs,
    dir: &VnodeRef,
    batch: usize,
    bound: usize,
    mut each: impl FnMut(&[u8]),
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut offset = 0;
    loop {
        let mut got: Vec<(Vec<u8>, u64)> = Vec::new();
        fs.readdir(dir, Fh(0), offset, &mut |e| {
            if got.len() == batch {
                return true;
            }
            got.push((e.name.clone(), e.offset));
            false
        })
        .unwrap();
        if got.is_empty() {
            return seen;
        }
        for (name, off) in got {
            offset = off;
            seen.push(String::from_utf8(name.clone()).unwrap());
            assert!(
                seen.len() <= bound,
                "the listing never ends: {} names so far",
                seen.len()
            );
            if name != b"." && name != b".." {
                each(&name);
            }
        }
    }
}

#[test]
fn a_listing_ends_while_its_entries_are_renamed_away_and_back() {
    // fstests generic/736: each entry read is renamed to a temporary name
    // and back while the listing goes on. It must end; renamed within the
    // directory, an entry keeps its place, so each is listed once.
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    const N: usize = 500;
    let mut want = vec![".".to_string(), "..".to_string()];
    for i in 1..=N {
        file(&fs, &d, &i.to_string());
        want.push(i.to_string());
    }
    let flags = RenameFlags(0);
    let mut seen = list_while(&fs, &d, 37, 3 * N, |name| {
        fs.rename(&C, &d, name, &d, b"TEMPFILE", flags).unwrap();
        fs.rename(&C, &d, b"TEMPFILE", &d, name, flags).unwrap();
    });
    seen.sort();
    want.sort();
    assert_eq!(seen, want);
}

#[test]
fn a_listing_returns_no_entry_made_after_it_started() {
    // Entries added while a listing runs (new files, and entries moved to
    // another directory and back) are left to the next listing, as tmpfs
    // does: a program adding one for each it reads still gets an end.
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    let away = fs.mkdir(&C, &root, b"away", 0o755).unwrap();
    const N: usize = 300;
    for i in 0..N {
        file(&fs, &d, &format!("f{i}"));
    }
    let flags = RenameFlags(0);
    let seen = list_while(&fs, &d, 50, 3 * N, |name| {
        fs.rename(&C, &d, name, &away, name, flags).unwrap();
        fs.rename(&C, &away, name, &d, name, flags).unwrap();
        let mut new = b"new-".to_vec();
        new.extend_from_slice(name);
        fs.create(&C, &d, &new, 0o644, libc::O_RDWR).unwrap();
    });
    assert_eq!(seen.len(), N + 2, "{seen:?}");
    assert!(seen.iter().all(|n| !n.starts_with("new-")), "{seen:?}");
    // A new listing has them all.
    assert_eq!(names(&fs, &d).len(), 2 * N + 2);
}
