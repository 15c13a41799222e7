//! Changes that end a large file's storage: the passthrough says so
//! beforehand (`may_free_much`, which an io_uring server uses to serve
//! them off its queue), and a removal's last close of the file comes after
//! the removal returns (`closer.rs`).

mod common;

use common::{env, held_deleted, Env, ROOT};
use std::time::{Duration, Instant};
use uvfs_vfs::{FallocMode, FileSystem, Freeing, RenameFlags, VnodeRef};

const MIB: u64 = 1 << 20;
/// Above the passthrough's threshold (64 MiB of blocks).
const LARGE: u64 = 65 * MIB;

/// A file `name` with `len` bytes allocated (fallocate: no data written),
/// closed.
fn file(e: &Env, name: &str, len: u64) -> VnodeRef {
    let (vp, fh) =
        e.fs.create(&ROOT, &e.root, name.as_bytes(), 0o644, libc::O_RDWR)
            .unwrap();
    if len > 0 {
        e.fs.fallocate(&vp, fh, FallocMode(0), 0, len).unwrap();
    }
    e.fs.release(&vp, fh).unwrap();
    vp
}

fn removes_much(e: &Env, name: &str) -> bool {
    e.fs.may_free_much(Freeing::Remove {
        dir: &e.root,
        name: name.as_bytes(),
    })
}

fn cuts_much(e: &Env, vp: &VnodeRef, size: u64) -> bool {
    e.fs.may_free_much(Freeing::Truncate { vp, size })
}

fn counter(e: &Env, name: &str) -> u64 {
    e.fs.stats()
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

/// Waits until `f` holds (the closing thread is asynchronous).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn only_changes_that_end_a_large_files_storage_free_much() {
    let e = env("freeing-says");
    let small = file(&e, "small", MIB);
    let large = file(&e, "large", LARGE);
    file(&e, "linked", LARGE);
    std::fs::hard_link(e.src.path().join("linked"), e.src.path().join("linked2")).unwrap();
    std::fs::create_dir(e.src.path().join("dir")).unwrap();

    assert!(removes_much(&e, "large"));
    assert!(!removes_much(&e, "small"));
    assert!(!removes_much(&e, "linked"), "another name keeps the file");
    assert!(!removes_much(&e, "dir"));
    assert!(!removes_much(&e, "missing"));

    assert!(cuts_much(&e, &large, 0));
    assert!(cuts_much(&e, &large, MIB), "64 MiB go");
    assert!(!cuts_much(&e, &large, 2 * MIB), "63 MiB go");
    assert!(!cuts_much(&e, &large, LARGE), "nothing goes");
    assert!(!cuts_much(&e, &large, 2 * LARGE), "it grows");
    assert!(!cuts_much(&e, &small, 0));

    // A release frees only a file that lost its last name while open.
    let fh = e.fs.open(&ROOT, &large, libc::O_RDONLY).unwrap();
    let release = |vp: &VnodeRef| e.fs.may_free_much(Freeing::Release { vp, fh });
    assert!(!release(&large), "still named");
    e.fs.unlink(&ROOT, &e.root, b"large").unwrap();
    assert!(release(&large), "open but unlinked");
    e.fs.release(&large, fh).unwrap();
    let fh2 = e.fs.open(&ROOT, &small, libc::O_RDONLY).unwrap();
    e.fs.unlink(&ROOT, &e.root, b"small").unwrap();
    assert!(
        !e.fs.may_free_much(Freeing::Release {
            vp: &small,
            fh: fh2
        }),
        "small"
    );
    e.fs.release(&small, fh2).unwrap();
    // Unknown handles are a no, not an error.
    assert!(!e.fs.may_free_much(Freeing::Release {
        vp: &small,
        fh: uvfs_vfs::Fh(u64::MAX)
    }));
}

#[test]
fn a_removed_files_last_close_comes_after_the_removal() {
    let e = env("freeing-closes");
    // Unlink: the file is gone by name at once, its storage once the
    // closing thread has closed the fd held across the removal.
    let large = file(&e, "large", LARGE);
    e.fs.getattr(&large).unwrap(); // (its node caches an fd too)
    e.fs.unlink(&ROOT, &e.root, b"large").unwrap();
    assert!(!e.src.path().join("large").exists());
    eventually("the unlinked file's fd closed", || {
        counter(&e, "passthrough.closes.deferred") == 1 && held_deleted(e.src.path()).is_empty()
    });

    // Rename over a large file: the same for the file it replaced.
    file(&e, "target", LARGE);
    file(&e, "new", 0);
    e.fs.rename(
        &ROOT,
        &e.root,
        b"new",
        &e.root,
        b"target",
        RenameFlags::default(),
    )
    .unwrap();
    assert_eq!(
        std::fs::metadata(e.src.path().join("target"))
            .unwrap()
            .len(),
        0,
        "the new file has the name"
    );
    eventually("the replaced file's fd closed", || {
        counter(&e, "passthrough.closes.deferred") == 2 && held_deleted(e.src.path()).is_empty()
    });

    // A failed rename over a large file: its fd, held in case, is closed
    // too, and the file stays.
    file(&e, "kept", LARGE);
    let r = e.fs.rename(
        &ROOT,
        &e.root,
        b"missing",
        &e.root,
        b"kept",
        RenameFlags::default(),
    );
    assert!(r.is_err());
    assert!(e.src.path().join("kept").exists());
    eventually("the fd held in case closed", || {
        counter(&e, "passthrough.closes.deferred") == 3
    });

    // A small file's storage is freed after the removal too (where the
    // free waits for the device, small files add up: closer.rs).
    file(&e, "small", MIB);
    e.fs.unlink(&ROOT, &e.root, b"small").unwrap();
    assert!(!e.src.path().join("small").exists());
    assert_eq!(counter(&e, "passthrough.closes.deferred"), 4);
    // A statfs counts the space as free: the close is done first.
    e.fs.statfs().unwrap();
    assert!(held_deleted(e.src.path()).is_empty());
    // An empty file frees nothing: closed in place.
    file(&e, "empty", 0);
    e.fs.unlink(&ROOT, &e.root, b"empty").unwrap();
    assert!(held_deleted(e.src.path()).is_empty());
    assert_eq!(counter(&e, "passthrough.closes.deferred"), 4);
}
