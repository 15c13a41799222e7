//! Inode numbers reused on the backing file system while the kernel still
//! remembers the file that had them: the new file gets an alias id.
//!
//! These tests wait for ext4 to hand a freed inode number to the next
//! directory made in the same place. Any other test making files meanwhile
//! may take that number first, so they live in their own test binary (cargo
//! runs binaries one at a time) and take turns within it.

mod common;

use common::{env_with, Env, ROOT};
use std::sync::Mutex;
use uvfs_passthrough::PassthroughConfig;
use uvfs_vfs::{Errno, FileSystem, VType};

/// Held for a whole test: between a number's freeing and its reuse no other
/// test of this binary makes a file.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Creates directories `name0`, `name1`, ... in `dir` until one gets inode
/// number `ino` (ext4 hands a freed number to the next file at once).
fn mkdir_reusing(dir: &std::path::Path, name: &str, ino: u64) -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    for i in 0..64 {
        let p = dir.join(format!("{name}{i}"));
        std::fs::create_dir(&p).unwrap();
        if std::fs::metadata(&p).unwrap().ino() == ino {
            return p;
        }
    }
    panic!("the backing file system (of {dir:?}) reused no inode number: run on ext4");
}

/// An environment without directory readahead (after a listing it may
/// hold a listed subdirectory open for a moment, and a removed
/// directory's inode number is free for reuse only once it is closed),
/// and a directory "old" the kernel remembers (a process's cwd, say),
/// removed on the source: its inode number is free for the next file.
fn removed_but_remembered(tag: &str) -> (Env, uvfs_vfs::VnodeRef, u64) {
    use std::os::unix::fs::MetadataExt;
    let e = env_with(
        tag,
        4096,
        PassthroughConfig {
            no_dir_readahead: true,
            ..Default::default()
        },
    );
    std::fs::create_dir(e.src.path().join("old")).unwrap();
    let ino = std::fs::metadata(e.src.path().join("old")).unwrap().ino();
    let old = e.lookup(&e.root, "old").unwrap();
    assert!(old.ext_acquire(1));
    std::fs::remove_dir(e.src.path().join("old")).unwrap();
    e.fs.drop_idle_fds();
    (e, old, ino)
}

#[test]
fn a_reused_inode_number_the_kernel_still_remembers_gets_an_alias() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (e, old, ino) = removed_but_remembered("alias");
    let old_gen = e.fs.generation(&old);
    let new_path = mkdir_reusing(e.src.path(), "new", ino);
    let new_name = new_path.file_name().unwrap().to_str().unwrap().to_owned();
    let new = e.lookup(&e.root, &new_name).unwrap();
    // The new directory has its own node id; the old one keeps its file.
    assert_ne!(new.ino(), old.ino());
    assert_eq!(old.ino(), ino);
    assert_eq!(e.fs.generation(&old), old_gen);
    assert_ne!(e.fs.generation(&new), old_gen);
    // Requests for the old inode fail; none reaches the new directory.
    assert_eq!(e.fs.getattr(&old).err(), Some(Errno::ESTALE));
    assert_eq!(
        e.fs.mkdir(&ROOT, &old, b"x", 0o755).err(),
        Some(Errno::ESTALE)
    );
    assert!(!new_path.join("x").exists());
    // The new one works, keeps its id, and its listing entry agrees.
    assert_eq!(e.fs.getattr(&new).unwrap().kind, VType::Dir);
    e.fs.mkdir(&ROOT, &new, b"y", 0o755).unwrap();
    assert!(new_path.join("y").is_dir());
    let entry = e.entries(&e.root).into_iter().find(|(n, _)| *n == new_name);
    assert_eq!(entry.map(|(_, i)| i), Some(new.ino()));
    old.ext_release(1);
    drop(old);
    let again = e.lookup(&e.root, &new_name).unwrap();
    assert_eq!(again.ino(), new.ino(), "stable while the server runs");
    // Without a kernel reference the number moves to the newest file.
    drop((new, again));
    std::fs::remove_dir_all(&new_path).unwrap();
    e.fs.drop_idle_fds();
    let third = mkdir_reusing(e.src.path(), "third", ino);
    let third_name = third.file_name().unwrap().to_str().unwrap().to_owned();
    // Listed before any lookup of it: the alias of the file gone from
    // that number is not the new file's.
    let entry = e
        .entries(&e.root)
        .into_iter()
        .find(|(n, _)| *n == third_name);
    assert_eq!(entry.map(|(_, i)| i), Some(ino));
    let t = e.lookup(&e.root, &third_name);
    assert_eq!(t.unwrap().ino(), ino);
}

#[test]
fn a_file_at_an_aliased_inode_number_is_listed_as_it_stats() {
    use std::os::unix::fs::MetadataExt;
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (e, old, ino) = removed_but_remembered("alias-listed");
    // The second file at the number gets an alias (the kernel holds the
    // first), and is removed in turn.
    let second = mkdir_reusing(e.src.path(), "second", ino);
    let s = e
        .lookup(&e.root, second.file_name().unwrap().to_str().unwrap())
        .unwrap();
    assert_ne!(s.ino(), ino);
    drop(s);
    std::fs::remove_dir(&second).unwrap();
    e.fs.drop_idle_fds();
    // The third is looked up (another alias: the kernel still holds the
    // first), then listed: the listing names the id it stats with.
    let third = mkdir_reusing(e.src.path(), "third", ino);
    let name = third.file_name().unwrap().to_str().unwrap().to_owned();
    let t = e.lookup(&e.root, &name).unwrap();
    assert_ne!(t.ino(), ino);
    let entry = e.entries(&e.root).into_iter().find(|(n, _)| *n == name);
    assert_eq!(entry.map(|(_, i)| i), Some(t.ino()));
    // Listed again once the kernel let the first go and the number's
    // newest file was looked up anew: its own number, everywhere.
    old.ext_release(1);
    drop((old, t));
    std::fs::remove_dir(&third).unwrap();
    e.fs.drop_idle_fds();
    let fourth = mkdir_reusing(e.src.path(), "fourth", ino);
    let name = fourth.file_name().unwrap().to_str().unwrap().to_owned();
    let entry = e.entries(&e.root).into_iter().find(|(n, _)| *n == name);
    assert_eq!(entry.map(|(_, i)| i), Some(ino));
    assert_eq!(e.lookup(&e.root, &name).unwrap().ino(), ino);
    assert_eq!(std::fs::metadata(&fourth).unwrap().ino(), ino);
}
