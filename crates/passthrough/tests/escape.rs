//! Escape attempts: nothing outside the source directory is reachable.

mod common;

use common::{env, env_with, ROOT};
use std::os::unix::fs::symlink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uvfs_passthrough::PassthroughConfig;
use uvfs_vfs::{Errno, FileSystem, RenameFlags, VType};

#[test]
fn symlinks_are_returned_never_followed() {
    let e = env("esc-sym");
    symlink(e.outside.path(), e.src.path().join("out")).unwrap();
    symlink(e.outside.path().join("secret"), e.src.path().join("sec")).unwrap();
    let out = e.lookup(&e.root, "out").unwrap();
    assert_eq!(e.fs.getattr(&out).unwrap().kind, VType::Lnk);
    assert_eq!(
        e.fs.readlink(&out).unwrap(),
        e.outside.path().as_os_str().as_encoded_bytes()
    );
    // Using the link as a directory does not reach the target.
    assert_eq!(e.lookup(&out, "secret").err(), Some(Errno::ENOTDIR));
    assert_eq!(e.fs.opendir(&ROOT, &out, 0).err(), Some(Errno::ENOTDIR));
    // Opening a link (the kernel never asks; when it seems to, its inode
    // is of a removed file whose number the link reused: ENOENT) does not
    // open its target.
    let sec = e.lookup(&e.root, "sec").unwrap();
    assert_eq!(
        e.fs.open(&ROOT, &sec, libc::O_RDONLY).err(),
        Some(Errno::ENOENT)
    );
    // create over a symlink does not write through it.
    assert_eq!(
        e.fs.create(&ROOT, &e.root, b"sec", 0o644, libc::O_WRONLY)
            .err(),
        Some(Errno::ELOOP)
    );
    assert_eq!(
        std::fs::read(e.outside.path().join("secret")).unwrap(),
        b"outside"
    );
}

#[test]
fn dotdot_stops_at_the_root() {
    let e = env("esc-dotdot");
    std::fs::create_dir(e.src.path().join("d")).unwrap();
    let up = e.lookup(&e.root, "..").unwrap();
    assert!(
        uvfs_vfs::VnodeRef::ptr_eq(&up, &e.root),
        ".. of the root is the root"
    );
    let d = e.lookup(&e.root, "d").unwrap();
    let dup = e.lookup(&d, "..").unwrap();
    assert!(uvfs_vfs::VnodeRef::ptr_eq(&dup, &e.root));
    let upup = e.lookup(&up, "..").unwrap();
    assert_eq!(
        e.fs.getattr(&upup).unwrap().ino,
        e.fs.getattr(&e.root).unwrap().ino
    );
    // Names carrying a path are refused outright.
    for bad in ["../secret", "d/../../x", "/etc"] {
        assert_eq!(e.lookup(&e.root, bad).err(), Some(Errno::EINVAL), "{bad}");
    }
}

#[test]
fn directory_moved_out_behind_our_back_cannot_lead_outside() {
    let e = env("esc-moved");
    std::fs::create_dir(e.src.path().join("d")).unwrap();
    let d = e.lookup(&e.root, "d").unwrap();
    std::fs::rename(e.src.path().join("d"), e.outside.path().join("d")).unwrap();
    // `..` of a directory now outside the tree is refused.
    assert_eq!(e.lookup(&d, "..").err(), Some(Errno::EACCES));
}

/// A rename racing with lookups swaps a directory with a symlink to the
/// outside; lookups through the name must never find the outside file.
#[test]
fn rename_racing_lookup_never_escapes() {
    let e = env("esc-race");
    std::fs::create_dir(e.src.path().join("d")).unwrap();
    symlink(e.outside.path(), e.src.path().join("l")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let fs = e.fs.clone();
    let root = e.fs.root().unwrap();
    let s2 = stop.clone();
    let swapper = std::thread::spawn(move || {
        let mut n = 0u32;
        while !s2.load(Ordering::Relaxed) {
            let _ = fs.rename(
                &ROOT,
                &root,
                b"d",
                &root,
                b"l",
                RenameFlags(RenameFlags::EXCHANGE),
            );
            n += 1;
        }
        n
    });
    let mut hits = 0;
    for _ in 0..20_000 {
        if let Ok(d) = e.lookup(&e.root, "d") {
            match e.lookup(&d, "secret") {
                Ok(_) => hits += 1,
                // ESTALE: `d` was looked up while being swapped (its
                // statx and its handle name different files), so its first
                // use refuses it.
                Err(err) => assert!(
                    err == Errno::ENOTDIR || err == Errno::ENOENT || err == Errno::ESTALE,
                    "unexpected {err:?}"
                ),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0);
    assert_eq!(hits, 0, "a lookup reached the outside directory");
}

/// Files on another file system mounted inside the source are reached
/// through their parent, never by interpreting their handles on the
/// source's file system.
#[test]
fn handles_of_another_file_system_are_not_used() {
    // A tiny budget: every node's fd is evicted and reopened constantly.
    let e = env_with(
        "esc-fh",
        4096,
        PassthroughConfig {
            fd_budget: Some(8),
            no_handles: false,
            no_dir_readahead: false,
            no_atime: false,
            watch: false,
            keep_timeouts: false,
            no_diratime: false,
        },
    );
    let m = e.src.path().join("m");
    std::fs::create_dir(&m).unwrap();
    let Some(_u) = common::Tmpfs::mount(&m) else {
        eprintln!("skipped: cannot mount tmpfs (not root?)");
        return;
    };
    std::fs::write(m.join("inner"), b"tmpfs data").unwrap();
    let mdir = e.lookup(&e.root, "m").unwrap();
    let inner = e.lookup(&mdir, "inner").unwrap();
    let ino = e.fs.getattr(&inner).unwrap().ino;
    assert!(ino >= uvfs_passthrough::inodes::FOREIGN_BASE, "foreign id");
    for _ in 0..20 {
        e.fs.drop_idle_fds();
        assert_eq!(e.read_all(&inner), b"tmpfs data");
        assert_eq!(e.fs.getattr(&inner).unwrap().ino, ino);
    }
    assert!(e
        .fs
        .stats()
        .iter()
        .any(|s| s.0 == "passthrough.reopen.fallback" && s.1 > 0));
}
