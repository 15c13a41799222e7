//! The inode budget (`--inodes`, tmpfs's `nr_inodes`): inodes, extra
//! hard links and extended attributes take from one budget; what does not
//! fit fails with ENOSPC and changes nothing; everything taken comes back.

use fastrand::Rng;
use std::sync::Arc;
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vfs::{Ctx, Errno, Fh, FileSystem, RenameFlags, VType, VnodeRef, XattrFlags};
use uvfs_vnode::{Config, VnodeLayer};

mod common;

const C: Ctx = Ctx::ROOT;
const ANY: XattrFlags = XattrFlags(0);

fn memfs(inodes: u64) -> Arc<MemFs> {
    MemFs::new(
        VnodeLayer::new(Config::with_limit(4096)),
        MemFsConfig {
            inode_limit: Some(inodes),
            ..Default::default()
        },
    )
}

/// (total, free) inodes as statfs says.
fn inodes(fs: &MemFs) -> (u64, u64) {
    let s = fs.statfs().unwrap();
    (s.files, s.ffree)
}

/// The names in `dir` without `.` and `..`.
fn names(fs: &MemFs, dir: &VnodeRef) -> Vec<String> {
    let mut out = common::names(fs, dir);
    out.retain(|n| n != "." && n != "..");
    out
}

#[test]
fn inodes_links_and_attributes_share_one_budget() {
    let fs = memfs(4);
    let root = fs.root().unwrap();
    assert_eq!(inodes(&fs), (4, 3), "the root takes one");
    let (a, _) = fs.create(&C, &root, b"a", 0o644, libc::O_RDWR).unwrap();
    fs.mkdir(&C, &root, b"d", 0o755).unwrap();
    fs.symlink(&C, &root, b"s", b"a").unwrap();
    assert_eq!(inodes(&fs), (4, 0));

    // Full: nothing that needs an inode, a name or attribute space is
    // made, and nothing changes.
    let full = Err(Errno::ENOSPC);
    assert_eq!(
        fs.create(&C, &root, b"n", 0o644, libc::O_RDWR).map(drop),
        full
    );
    assert_eq!(fs.mkdir(&C, &root, b"n", 0o755).map(drop), full);
    assert_eq!(
        fs.mknod(&C, &root, b"n", libc::S_IFIFO | 0o644, 0)
            .map(drop),
        full
    );
    assert_eq!(fs.symlink(&C, &root, b"n", b"a").map(drop), full);
    assert_eq!(fs.tmpfile(&C, &root, 0o600, libc::O_RDWR).map(drop), full);
    assert_eq!(fs.link(&C, &a, &root, b"n"), full);
    assert_eq!(fs.setxattr(&C, &a, b"user.k", b"v", ANY), full);
    let whiteout = RenameFlags(RenameFlags::WHITEOUT);
    assert_eq!(fs.rename(&C, &root, b"a", &root, b"n", whiteout), full);
    let sub = fs.lookup(&C, &root, b"d").unwrap();
    assert_eq!(fs.rename(&C, &root, b"a", &sub, b"n", whiteout), full);
    assert_eq!(names(&fs, &root), ["a", "d", "s"]);
    assert!(names(&fs, &sub).is_empty());
    // What exists is still usable: opened (O_CREAT of an existing name),
    // written (data has its own budget), renamed.
    let (again, _) = fs.create(&C, &root, b"a", 0o644, libc::O_RDWR).unwrap();
    assert_eq!(again.ino(), a.ino());
    assert_eq!(fs.write(&a, Fh(0), 0, b"data").unwrap(), 4);
    fs.rename(&C, &root, b"s", &root, b"s2", RenameFlags(0))
        .unwrap();
    assert_eq!(inodes(&fs), (4, 0));

    // An inode given back makes room for one more name...
    fs.unlink(&C, &root, b"s2").unwrap();
    assert_eq!(inodes(&fs), (4, 1));
    fs.link(&C, &a, &root, b"a2").unwrap();
    assert_eq!(inodes(&fs), (4, 0));
    assert_eq!(fs.getattr(&a).unwrap().nlink, 2);
    // ...which comes back when that name goes, though the file stays.
    fs.unlink(&C, &root, b"a2").unwrap();
    assert_eq!(inodes(&fs), (4, 1));
    // A rename over a file's second name gives that name's space back.
    fs.rmdir(&C, &root, b"d").unwrap();
    drop(sub);
    assert_eq!(inodes(&fs), (4, 2));
    fs.create(&C, &root, b"b", 0o644, libc::O_RDWR).unwrap();
    fs.link(&C, &a, &root, b"a2").unwrap();
    assert_eq!(inodes(&fs), (4, 0));
    fs.rename(&C, &root, b"b", &root, b"a2", RenameFlags(0))
        .unwrap();
    assert_eq!(fs.getattr(&a).unwrap().nlink, 1);
    assert_eq!(names(&fs, &root), ["a", "a2"]);
    assert_eq!(inodes(&fs), (4, 1));

    // Attributes take their size: 40 + name + value bytes of the 1 KiB
    // an inode would take.
    fs.setxattr(&C, &a, b"user.k", &[7u8; 900], ANY).unwrap();
    assert_eq!(inodes(&fs), (4, 0));
    assert_eq!(fs.mkdir(&C, &root, b"n", 0o755).map(drop), full);
    assert_eq!(
        fs.setxattr(&C, &a, b"user.more", &[1u8; 100], ANY),
        full,
        "78 bytes left"
    );
    // A replace needs room for the new value before the old one goes, as
    // in tmpfs (106 bytes > 78 left, though it would shrink)...
    assert_eq!(fs.setxattr(&C, &a, b"user.k", &[2u8; 60], ANY), full);
    // ...and then gives the old one's back; a failed replace takes
    // nothing.
    fs.setxattr(&C, &a, b"user.k", b"small", ANY).unwrap();
    assert_eq!(
        fs.setxattr(&C, &a, b"user.x", b"v", XattrFlags(XattrFlags::REPLACE)),
        Err(Errno::ENODATA)
    );
    fs.setxattr(&C, &a, b"user.more", &[1u8; 100], ANY).unwrap();
    assert_eq!(fs.mkdir(&C, &root, b"n", 0o755).map(drop), full);
    fs.removexattr(&C, &a, b"user.more").unwrap();
    fs.removexattr(&C, &a, b"user.k").unwrap();
    assert_eq!(inodes(&fs), (4, 1));
    fs.mkdir(&C, &root, b"n", 0o755).unwrap();
    assert_eq!(inodes(&fs), (4, 0));
    assert_eq!(fs.read(&a, Fh(0), 0, 10).unwrap(), b"data");
}

#[test]
fn everything_taken_comes_back() {
    for seed in 1..=20u64 {
        let fs = memfs(64);
        let root = fs.root().unwrap();
        let sub = fs.mkdir(&C, &root, b"sub", 0o755).unwrap();
        let dirs = [root.clone(), sub.clone()];
        let mut rng = Rng::with_seed(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut held: Vec<VnodeRef> = Vec::new();
        let name = |rng: &mut Rng| format!("n{}", rng.u64(..12)).into_bytes();
        for _ in 0..3000 {
            let d = &dirs[rng.u64(..2) as usize];
            let n = name(&mut rng);
            // Errors are expected (ENOSPC, EEXIST, ENOENT...): what is
            // checked is the accounting once it is all undone.
            match rng.u64(..11) {
                0 => drop(fs.create(&C, d, &n, 0o644, libc::O_RDWR)),
                1 => drop(fs.mkdir(&C, d, &n, 0o755)),
                2 => drop(fs.symlink(&C, d, &n, b"target")),
                3 => {
                    if let Ok(vp) = fs.lookup(&C, d, &n) {
                        let e = &dirs[rng.u64(..2) as usize];
                        let _ = fs.link(&C, &vp, e, &name(&mut rng));
                    }
                }
                4 => drop(fs.unlink(&C, d, &n)),
                5 => drop(fs.rmdir(&C, d, &n)),
                6 => {
                    let e = &dirs[rng.u64(..2) as usize];
                    let flags = [
                        0,
                        RenameFlags::NOREPLACE,
                        RenameFlags::EXCHANGE,
                        RenameFlags::WHITEOUT,
                    ][rng.u64(..4) as usize];
                    let _ = fs.rename(&C, d, &n, e, &name(&mut rng), RenameFlags(flags));
                }
                7 => {
                    if let Ok(vp) = fs.lookup(&C, d, &n) {
                        let len = rng.u64(..1500) as usize;
                        let key = format!("user.k{}", rng.u64(..3)).into_bytes();
                        let _ = fs.setxattr(&C, &vp, &key, &vec![1u8; len], ANY);
                    }
                }
                8 => {
                    if let Ok(vp) = fs.lookup(&C, d, &n) {
                        let key = format!("user.k{}", rng.u64(..3)).into_bytes();
                        let _ = fs.removexattr(&C, &vp, &key);
                    }
                }
                9 => {
                    // Made nameless and kept, maybe named later.
                    if let Ok((vp, _)) = fs.tmpfile(&C, d, 0o600, libc::O_RDWR) {
                        held.push(vp);
                    }
                }
                _ => {
                    if let Some(vp) = held.pop() {
                        let _ = fs.link(&C, &vp, d, &n);
                    }
                }
            }
            let (total, free) = inodes(&fs);
            assert!(free <= total, "seed {seed}: {free} free of {total}");
        }
        drop(held);
        // Undo it all: every name, deepest first.
        for d in [&sub, &root] {
            for n in names(&fs, d) {
                let vp = fs.lookup(&C, d, n.as_bytes()).unwrap();
                if vp.vtype() == VType::Dir {
                    for m in names(&fs, &vp) {
                        let w = fs.lookup(&C, &vp, m.as_bytes()).unwrap();
                        assert_ne!(w.vtype(), VType::Dir, "seed {seed}: nesting");
                        fs.unlink(&C, &vp, m.as_bytes()).unwrap();
                    }
                    drop(vp);
                    if n != "sub" {
                        fs.rmdir(&C, d, n.as_bytes()).unwrap();
                    }
                } else {
                    drop(vp);
                    fs.unlink(&C, d, n.as_bytes()).unwrap();
                }
            }
        }
        drop(dirs);
        fs.rmdir(&C, &root, b"sub").unwrap();
        drop(sub);
        assert_eq!(
            inodes(&fs),
            (64, 63),
            "seed {seed}: inode space leaked or given back twice"
        );
        assert_eq!(fs.alive_count(), 1, "seed {seed}");
    }
}
