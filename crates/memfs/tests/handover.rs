//! Live upgrade: a memfs saved (`FileSystem::save`) and restored
//! (`MemFs::restore`) on a new vnode layer is the same file system, seen
//! through the `FileSystem` API, and goes on behaving as the original
//! would; a state of another format, or not a state, is refused.

use fastrand::Rng;
use std::fmt::Write as _;
use std::sync::Arc;
use uvfs_memfs::{Atime, AtimeRule, MemFs, MemFsConfig, PAGE_SIZE, SAVED_FORMAT};
use uvfs_vfs::{
    Ctx, Errno, FallocMode, Fh, FileSystem, Ino, Keep, RenameFlags, Saved, SetAttr, SetTime,
    Timespec, VType, VnodeRef, XattrFlags, FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NODUMP_FL,
};
use uvfs_vnode::{Config, VnodeLayer};

const C: Ctx = Ctx::ROOT;
const ANY: XattrFlags = XattrFlags(0);
const PAGE: u64 = PAGE_SIZE as u64;

/// Reads leave atimes alone, so that looking at a file system to compare
/// it changes nothing.
fn cfg(size: Option<u64>, inodes: Option<u64>) -> MemFsConfig {
    MemFsConfig {
        size_limit: size,
        inode_limit: inodes,
        atime: AtimeRule {
            files: Atime::Never,
            dirs: Atime::Never,
        },
        ..Default::default()
    }
}

fn layer() -> Arc<VnodeLayer> {
    VnodeLayer::new(Config::with_limit(4096))
}

fn save(fs: &MemFs, nodes: &[VnodeRef]) -> Saved {
    let open: Vec<(VnodeRef, Fh)> = nodes.iter().map(|v| (v.clone(), Fh(0))).collect();
    fs.save(&Keep {
        nodes,
        open: &open,
        ahead: None,
    })
    .unwrap()
}

fn restore(saved: Saved, cfg: MemFsConfig) -> Arc<MemFs> {
    MemFs::restore(&layer(), cfg, saved).unwrap()
}

/// Where data and holes lie in `vp`, as `SEEK_DATA`/`SEEK_HOLE` say.
fn extents(fs: &MemFs, vp: &VnodeRef) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Ok(data) = fs.seek_data(vp, Fh(0), at, false) {
        let hole = fs.seek_data(vp, Fh(0), data, true).unwrap();
        out.push((data, hole));
        at = hole;
    }
    out
}

/// One node as the API shows it; times only `with_times`.
fn describe(fs: &MemFs, vp: &VnodeRef, with_times: bool, out: &mut String) {
    let mut a = fs.getattr(vp).unwrap();
    if !with_times {
        let zero = Timespec::new(0, 0);
        (a.atime, a.mtime, a.ctime, a.btime) = (zero, zero, zero, Some(zero));
    }
    writeln!(out, "  {a:?} flags={:?}", fs.get_flags(vp, Fh(0))).unwrap();
    let names = fs.listxattr(vp).unwrap();
    for name in names.split(|&c| c == 0).filter(|n| !n.is_empty()) {
        let v = fs.getxattr(vp, name).unwrap();
        writeln!(out, "  xattr {:?}={v:?}", String::from_utf8_lossy(name)).unwrap();
    }
    match a.kind {
        VType::Reg => {
            let data = fs.read(vp, Fh(0), 0, a.size as u32 + 10).unwrap();
            writeln!(out, "  data {:x} {:?}", hash(&data), extents(fs, vp)).unwrap();
        }
        VType::Lnk => writeln!(out, "  -> {:?}", fs.readlink(vp).unwrap()).unwrap(),
        _ => {}
    }
}

fn hash(data: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

/// The whole tree under the root: every listing (with its offsets) and
/// every node, and statfs.
fn dump(fs: &MemFs, with_times: bool) -> String {
    let mut out = String::new();
    let mut todo = vec![(b"/".to_vec(), fs.root().unwrap())];
    while let Some((path, dir)) = todo.pop() {
        writeln!(out, "{}", String::from_utf8_lossy(&path)).unwrap();
        describe(fs, &dir, with_times, &mut out);
        let mut entries = Vec::new();
        fs.readdir(&dir, Fh(0), 0, &mut |e| {
            entries.push(e.clone());
            false
        })
        .unwrap();
        for e in entries {
            writeln!(out, " {e:?}").unwrap();
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let vp = fs.lookup(&C, &dir, &e.name).unwrap();
            let mut p = path.clone();
            p.extend_from_slice(&e.name);
            if vp.vtype() == VType::Dir {
                p.push(b'/');
                todo.push((p, vp));
            } else {
                writeln!(out, "{}", String::from_utf8_lossy(&p)).unwrap();
                describe(fs, &vp, with_times, &mut out);
            }
        }
    }
    writeln!(out, "{:?}", fs.statfs().unwrap()).unwrap();
    out
}

/// The names a listing resuming at `offset` returns, with their offsets.
fn list_from(fs: &MemFs, dir: &VnodeRef, offset: u64) -> Vec<(Vec<u8>, u64)> {
    let mut out = Vec::new();
    fs.readdir(dir, Fh(0), offset, &mut |e| {
        out.push((e.name.clone(), e.offset));
        false
    })
    .unwrap();
    out
}

fn set_times(fs: &MemFs, vp: &VnodeRef, sec: i64, nsec: u32) {
    let t = Timespec::new(sec, nsec);
    let set = SetAttr {
        atime: Some(SetTime::At(t)),
        mtime: Some(SetTime::At(Timespec::new(sec + 1, nsec + 1))),
        ..Default::default()
    };
    fs.setattr(&C, vp, &set).unwrap();
}

/// `system.posix_acl_*` values from (tag, perm, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// A memfs with one of everything; returns it with the unlinked open
/// file, the O_TMPFILE file and the directory listed half-way (with the
/// offset reached).
fn varied() -> (Arc<MemFs>, VnodeRef, VnodeRef, VnodeRef, u64) {
    let fs = MemFs::new(layer(), cfg(Some(4 << 20), Some(200)));
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"dir", 0o2751).unwrap();
    let sub = fs.mkdir(&C, &d, b"sub", 0o700).unwrap();
    let (f, _) = fs.create(&C, &d, b"sparse", 0o4755, libc::O_RDWR).unwrap();
    fs.write(&f, Fh(0), 3, b"head").unwrap();
    fs.write(&f, Fh(0), 10 * PAGE + 7, &[0xa5; 5000]).unwrap();
    fs.fallocate(
        &f,
        Fh(0),
        FallocMode(FallocMode::KEEP_SIZE),
        40 * PAGE,
        2 * PAGE,
    )
    .unwrap();
    fs.link(&C, &f, &root, b"hardlink").unwrap();
    fs.link(&C, &f, &sub, b"hardlink2").unwrap();
    fs.setxattr(&C, &f, b"user.color", b"blue", ANY).unwrap();
    fs.setxattr(&C, &f, b"trusted.x", &[0, 1, 2], ANY).unwrap();
    set_times(&fs, &f, 1_234_567_890, 123_456_789);
    let ext = acl(&[
        (1, 7, u32::MAX),
        (2, 6, 1000),
        (4, 5, u32::MAX),
        (0x10, 7, u32::MAX),
        (0x20, 4, u32::MAX),
    ]);
    let (g, _) = fs.create(&C, &sub, b"acl", 0o640, libc::O_RDWR).unwrap();
    fs.setxattr(&C, &g, b"system.posix_acl_access", &ext, ANY)
        .unwrap();
    let dflt = acl(&[(1, 7, u32::MAX), (4, 5, u32::MAX), (0x20, 0, u32::MAX)]);
    fs.setxattr(&C, &sub, b"system.posix_acl_default", &dflt, ANY)
        .unwrap();
    fs.symlink(&C, &d, b"link", b"../hardlink").unwrap();
    fs.mknod(&C, &d, b"fifo", libc::S_IFIFO | 0o620, 0).unwrap();
    fs.mknod(&C, &d, b"null", libc::S_IFCHR | 0o666, libc::makedev(1, 3))
        .unwrap();
    fs.mknod(&C, &d, b"sock", libc::S_IFSOCK | 0o600, 0)
        .unwrap();
    let chown = SetAttr {
        uid: Some(1000),
        gid: Some(2000),
        ..Default::default()
    };
    fs.setattr(&C, &sub, &chown).unwrap();
    let (frozen, _) = fs
        .create(&C, &root, b"frozen", 0o444, libc::O_RDWR)
        .unwrap();
    fs.write(&frozen, Fh(0), 0, b"ice").unwrap();
    fs.set_flags(&C, &frozen, Fh(0), FS_IMMUTABLE_FL | FS_NODUMP_FL)
        .unwrap();
    let (log, _) = fs.create(&C, &root, b"log", 0o644, libc::O_RDWR).unwrap();
    fs.set_flags(&C, &log, Fh(0), FS_APPEND_FL).unwrap();
    // Unlinked while open, with data.
    let (gone, _) = fs.create(&C, &root, b"gone", 0o600, libc::O_RDWR).unwrap();
    fs.write(&gone, Fh(0), 5 * PAGE, b"still here").unwrap();
    fs.unlink(&C, &root, b"gone").unwrap();
    // A nameless file that may be named later.
    let (tmp, _) = fs.tmpfile(&C, &d, 0o600, libc::O_RDWR).unwrap();
    fs.write(&tmp, Fh(0), 0, b"tmp").unwrap();
    // A directory with entries added, renamed and removed, listed half-way.
    let big = fs.mkdir(&C, &root, b"big", 0o755).unwrap();
    for i in 0..40 {
        fs.create(&C, &big, format!("e{i}").as_bytes(), 0o644, libc::O_RDWR)
            .unwrap();
    }
    for i in (0..40).step_by(3) {
        fs.unlink(&C, &big, format!("e{i}").as_bytes()).unwrap();
    }
    fs.rename(&C, &big, b"e1", &big, b"renamed", RenameFlags(0))
        .unwrap();
    let first = list_from(&fs, &big, 0);
    let half = first[first.len() / 2].1;
    set_times(&fs, &big, -5, 999_999_999);
    (fs, gone, tmp, big, half)
}

#[test]
fn everything_is_restored_and_behaves_the_same() {
    let (fs, gone, tmp, big, half) = varied();
    let before = dump(&fs, true);
    let saved = save(&fs, &[gone.clone(), tmp.clone(), big.clone()]);
    assert_eq!(saved.format, SAVED_FORMAT);
    assert_eq!(dump(&fs, true), before, "save changed the file system");
    let new = restore(saved, cfg(Some(4 << 20), Some(200)));
    assert_eq!(dump(&new, true), before);
    assert_eq!(new.root().unwrap().ino(), fs.root().unwrap().ino());
    assert_eq!(new.inode_count(), fs.inode_count());
    assert_eq!(new.alive_count(), fs.alive_count());
    assert_eq!(new.bytes_used(), fs.bytes_used());
    assert_eq!(new.fs_stats(), fs.fs_stats());

    // The nameless files, by number.
    let gone2 = new.vget(gone.ino()).unwrap();
    let tmp2 = new.vget(tmp.ino()).unwrap();
    for (a, b) in [(&gone, &gone2), (&tmp, &tmp2)] {
        let (mut x, mut y) = (String::new(), String::new());
        describe(&fs, a, true, &mut x);
        describe(&new, b, true, &mut y);
        assert_eq!(x, y);
    }
    assert_eq!(
        new.read(&gone2, Fh(0), 5 * PAGE, 100).unwrap(),
        b"still here"
    );
    // The listing resumes where it stood, from the offset alone.
    let big2 = new.vget(big.ino()).unwrap();
    assert_eq!(list_from(&new, &big2, half), list_from(&fs, &big, half));

    // The same changes on both: the same results, the same numbers.
    for (f, nameless) in [(&fs, &tmp), (&new, &tmp2)] {
        let root = f.root().unwrap();
        f.link(&C, nameless, &root, b"named").unwrap();
        let (n, _) = f.create(&C, &root, b"new", 0o644, libc::O_RDWR).unwrap();
        assert!(n.ino() > big.ino());
        f.rename(&C, &root, b"hardlink", &root, b"moved", RenameFlags(0))
            .unwrap();
        let d = f.lookup(&C, &root, b"dir").unwrap();
        f.rmdir(&C, &d, b"sub").unwrap_err();
        assert_eq!(
            f.unlink(&C, &root, b"frozen"),
            Err(Errno::EPERM),
            "still immutable"
        );
    }
    assert_eq!(dump(&new, false), dump(&fs, false));
    // The data budget runs out at the same byte on both.
    let fill = |f: &MemFs| {
        let root = f.root().unwrap();
        let (v, _) = f.create(&C, &root, b"fill", 0o644, libc::O_RDWR).unwrap();
        let mut at = 0;
        loop {
            match f.write(&v, Fh(0), at, &[7; 3 * PAGE_SIZE]) {
                Ok(n) => at += n as u64,
                Err(e) => return (at, e, v.ino()),
            }
        }
    };
    assert_eq!(fill(&new), fill(&fs));
    // And the inode budget at the same inode.
    let make = |f: &MemFs| {
        let root = f.root().unwrap();
        (0..1000)
            .map(|i| f.mknod(&C, &root, format!("n{i}").as_bytes(), libc::S_IFIFO, 0))
            .position(|r| r.is_err())
    };
    assert_eq!(make(&new), make(&fs));
    assert!(make(&fs).is_some());
    assert_eq!(dump(&new, false), dump(&fs, false));

    // The unlinked file is freed at its last release, on both.
    let alive = fs.alive_count();
    assert_eq!(new.alive_count(), alive);
    let gone_ino = gone.ino();
    assert!(new.vget(gone_ino).is_ok(), "found while in use");
    drop((gone, gone2));
    assert_eq!(fs.alive_count(), alive - 1);
    assert_eq!(new.alive_count(), alive - 1);
    assert_eq!(new.vget(gone_ino).err(), Some(Errno::ESTALE), "freed");
}

#[test]
fn a_nameless_file_nobody_kept_is_not_saved() {
    let fs = MemFs::new(layer(), cfg(None, None));
    let root = fs.root().unwrap();
    let (f, _) = fs.create(&C, &root, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.write(&f, Fh(0), 0, &[1; 3 * PAGE_SIZE]).unwrap();
    fs.unlink(&C, &root, b"f").unwrap();
    let new = restore(save(&fs, &[]), cfg(None, None));
    assert_eq!(new.vget(f.ino()).err(), Some(Errno::ESTALE));
    assert_eq!((new.alive_count(), new.bytes_used()), (1, 0));
    assert_eq!(fs.bytes_used(), 3 * PAGE);
}

#[test]
fn an_empty_file_system_needs_no_page_file() {
    let fs = MemFs::new(layer(), cfg(None, None));
    let saved = save(&fs, &[]);
    assert!(saved.fds.is_empty());
    let new = restore(saved, cfg(None, None));
    assert_eq!(dump(&new, true), dump(&fs, true));
}

#[test]
fn a_limit_below_the_usage_is_refused() {
    let (fs, ..) = varied();
    let err = MemFs::restore(&layer(), cfg(Some(PAGE), None), save(&fs, &[])).err();
    assert_eq!(err, Some(Errno::ENOSPC));
    let err = MemFs::restore(&layer(), cfg(None, Some(3)), save(&fs, &[])).err();
    assert_eq!(err, Some(Errno::ENOSPC));
}

#[test]
fn another_format_or_a_broken_state_is_refused() {
    let (fs, gone, ..) = varied();
    let restore = |s: Saved| MemFs::restore(&layer(), cfg(None, None), s).map(drop);
    let mut other = save(&fs, std::slice::from_ref(&gone));
    other.format = "uvfs-memfs/4".into();
    assert_eq!(restore(other), Err(Errno::EPROTO));
    let mut nofd = save(&fs, &[]);
    nofd.fds.clear();
    assert_eq!(restore(nofd), Err(Errno::EPROTO));
    let mut unsealed = save(&fs, &[]);
    unsealed.fds = vec![rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::empty()).unwrap()];
    assert_eq!(restore(unsealed), Err(Errno::EPROTO));

    let good = save(&fs, std::slice::from_ref(&gone));
    let bytes = good.bytes.to_vec();
    let fd = || good.fds[0].try_clone().unwrap();
    let with = |bytes: Vec<u8>| Saved {
        format: SAVED_FORMAT.into(),
        bytes: bytes.into(),
        fds: vec![fd()],
    };
    // Every truncation.
    for len in 0..bytes.len() {
        assert_eq!(
            restore(with(bytes[..len].to_vec())),
            Err(Errno::EPROTO),
            "cut at {len}"
        );
    }
    // Bytes changed at random: refused or, if it still reads as a file
    // system, restored; never a panic.
    let mut rng = Rng::with_seed(28);
    let mut refused = 0;
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..rng.usize(1..4) {
            let i = rng.usize(..b.len());
            b[i] = rng.u8(..);
        }
        match restore(with(b)) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e, Errno::EPROTO);
                refused += 1;
            }
        }
    }
    assert!(refused > 1000, "{refused}");
    assert!(restore(with(bytes)).is_ok());
}

/// Random operations on two file systems, one saved and restored at
/// random points: the two answer alike throughout.
#[test]
fn random_operations_across_restarts() {
    for seed in 1..=12u64 {
        twins(seed, 1500);
    }
}

/// One random operation's parameters.
struct Op {
    op: u64,
    dirs: (usize, usize),
    names: (Vec<u8>, Vec<u8>),
    off: u64,
    len: usize,
    byte: u8,
    pick: usize,
}

/// Applies `o` to `f`, whose held files are `held`; the result as text,
/// and a file to hold from now on.
fn apply(f: &MemFs, o: &Op, held: &[VnodeRef]) -> (Result<String, Errno>, Option<VnodeRef>) {
    let root = f.root().unwrap();
    let dir = |i: usize| match i {
        0 => root.clone(),
        _ => f.lookup(&C, &root, b"d").unwrap(),
    };
    let (x, y) = (dir(o.dirs.0), dir(o.dirs.1));
    let (n1, n2) = (&o.names.0[..], &o.names.1[..]);
    let node = || f.lookup(&C, &x, n1);
    let ino = |v: VnodeRef| format!("{}", v.ino());
    let none = |_| String::new();
    let mut hold = None;
    let xattr = format!("user.k{}", o.pick % 3).into_bytes();
    let r = match o.op {
        0 => f
            .create(&C, &x, n1, 0o644, libc::O_RDWR)
            .map(|(v, _)| ino(v)),
        1 => f.mkdir(&C, &x, n1, 0o755).map(ino),
        2 => f.symlink(&C, &x, n1, n2).map(ino),
        3 => node().and_then(|v| f.link(&C, &v, &y, n2)).map(none),
        4 => f.unlink(&C, &x, n1).map(none),
        5 => f.rmdir(&C, &x, n1).map(none),
        6 => {
            let flags = RenameFlags([0, RenameFlags::EXCHANGE][o.pick % 2]);
            f.rename(&C, &x, n1, &y, n2, flags).map(none)
        }
        7 | 8 => node()
            .and_then(|v| f.write(&v, Fh(0), o.off, &vec![o.byte; o.len]))
            .map(|n| format!("{n}")),
        9 => node()
            .and_then(|v| {
                let set = SetAttr {
                    size: Some(o.off),
                    ..Default::default()
                };
                f.setattr(&C, &v, &set)
            })
            .map(|a| format!("{}", a.size)),
        10 => node()
            .and_then(|v| {
                let keep = FallocMode::KEEP_SIZE;
                let mode = [keep, FallocMode::PUNCH_HOLE | keep, 0][o.pick % 3];
                f.fallocate(&v, Fh(0), FallocMode(mode), o.off, o.len as u64 + 1)
            })
            .map(none),
        11 => node()
            .and_then(|v| f.setxattr(&C, &v, &xattr, &vec![o.byte; o.len % 700], ANY))
            .map(none),
        12 => node().and_then(|v| f.removexattr(&C, &v, &xattr)).map(none),
        13 => f.tmpfile(&C, &x, 0o600, libc::O_RDWR).map(|(v, _)| {
            hold = Some(v.clone());
            ino(v)
        }),
        // Kept open, maybe unlinked later.
        14 => node().map(|v| {
            if v.vtype() == VType::Reg {
                hold = Some(v.clone());
            }
            ino(v)
        }),
        15 if !held.is_empty() => {
            let v = &held[o.pick % held.len()];
            let w = f.write(v, Fh(0), o.off, &vec![o.byte; o.len]);
            let l = f.link(&C, v, &y, n2);
            Ok(format!(
                "{w:?} {l:?} {:?}",
                f.getattr(v).map(|a| (a.nlink, a.size))
            ))
        }
        _ => Ok(String::new()),
    };
    (r, hold)
}

fn twins(seed: u64, steps: usize) {
    let mut rng = Rng::with_seed(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let conf = || cfg(Some(96 * PAGE), Some(48));
    let a = MemFs::new(layer(), conf());
    let mut b = MemFs::new(layer(), conf());
    for f in [&a, &b] {
        f.mkdir(&C, &f.root().unwrap(), b"d", 0o755).unwrap();
    }
    // Files held open, by number: a's vnode and b's.
    let mut held: Vec<(Ino, VnodeRef, VnodeRef)> = Vec::new();
    let name = |rng: &mut Rng| format!("n{}", rng.u64(..10)).into_bytes();
    let mut restarts = 0;
    for step in 0..steps {
        let o = Op {
            op: rng.u64(..17),
            dirs: (rng.usize(..2), rng.usize(..2)),
            names: (name(&mut rng), name(&mut rng)),
            off: rng.u64(..40 * PAGE),
            len: rng.usize(..3 * PAGE_SIZE),
            byte: rng.u8(..),
            pick: rng.usize(..),
        };
        let ha: Vec<VnodeRef> = held.iter().map(|h| h.1.clone()).collect();
        let hb: Vec<VnodeRef> = held.iter().map(|h| h.2.clone()).collect();
        let (ra, va) = apply(&a, &o, &ha);
        let (rb, vb) = apply(&b, &o, &hb);
        drop((ha, hb));
        assert_eq!(ra, rb, "seed {seed} step {step} op {}", o.op);
        if let (Some(va), Some(vb)) = (va, vb) {
            assert_eq!(va.ino(), vb.ino());
            held.push((va.ino(), va, vb));
        }
        if o.op == 16 && !held.is_empty() {
            // A release.
            held.swap_remove(o.pick % held.len());
        }
        if rng.u64(..60) == 0 {
            assert_eq!(dump(&a, false), dump(&b, false), "seed {seed} step {step}");
            assert_eq!(a.alive_count(), b.alive_count(), "seed {seed} step {step}");
            let nodes: Vec<VnodeRef> = held.iter().map(|h| h.2.clone()).collect();
            let saved = save(&b, &nodes);
            drop(nodes);
            let old = std::mem::replace(&mut b, restore(saved, conf()));
            old.handed_over();
            b.taken_over();
            for h in &mut held {
                h.2 = b.vget(h.0).unwrap();
            }
            drop(old);
            restarts += 1;
        } else if rng.u64(..40) == 0 {
            // Pages moved to page files ahead of a later upgrade, while
            // the operations go on.
            assert_eq!(b.save_ahead(&[]).unwrap().map(drop), None);
        }
    }
    assert_eq!(dump(&a, false), dump(&b, false), "seed {seed} at the end");
    drop(held);
    assert_eq!(a.alive_count(), b.alive_count(), "seed {seed}");
    assert_eq!(a.statfs().unwrap(), b.statfs().unwrap(), "seed {seed}");
    assert!(restarts > 5, "seed {seed}: {restarts} restarts");
}

/// Allocated bytes of a memfd.
fn allocated(fd: &std::os::fd::OwnedFd) -> u64 {
    rustix::fs::fstat(fd).unwrap().st_blocks as u64 * 512
}

#[test]
fn pages_moved_ahead_are_passed_on_and_only_the_serving_side_gives_them_back() {
    let fs = MemFs::new(layer(), cfg(None, None));
    let root = fs.root().unwrap();
    let mut files = Vec::new();
    for i in 0..8u8 {
        let name = format!("f{i}");
        let (f, _) = fs
            .create(&C, &root, name.as_bytes(), 0o644, libc::O_RDWR)
            .unwrap();
        fs.write(&f, Fh(0), 0, &vec![i + 1; 3 * PAGE_SIZE]).unwrap();
        files.push(f);
    }
    // A hole, and pages preallocated past the end.
    fs.write(&files[1], Fh(0), 6 * PAGE, b"after a hole")
        .unwrap();
    let keep = FallocMode(FallocMode::KEEP_SIZE);
    fs.fallocate(&files[2], Fh(0), keep, 8 * PAGE, 2 * PAGE)
        .unwrap();
    assert_eq!(fs.save_ahead(&[]).unwrap().map(drop), None);
    // After the move: one file rewritten in place, one grown (a page in
    // the heap again), one cut in the middle.
    fs.write(&files[3], Fh(0), 10, b"in place").unwrap();
    fs.write(&files[4], Fh(0), 3 * PAGE, b"grown").unwrap();
    let punch = FallocMode(FallocMode::KEEP_SIZE | FallocMode::PUNCH_HOLE);
    fs.fallocate(&files[5], Fh(0), punch, PAGE, PAGE).unwrap();
    let before = dump(&fs, true);

    // One page file passed on as it is, one with the copies of the two
    // files changed since.
    let saved = save(&fs, &[]);
    assert_eq!(
        saved.format, "uvfs-memfs/3",
        "older builds would free shared pages"
    );
    assert_eq!(saved.fds.len(), 2);
    let memfds: Vec<_> = saved.fds.iter().map(|f| f.try_clone().unwrap()).collect();
    // 8 files of 3 pages, one more after a hole, 2 preallocated; less
    // the page punched out.
    let moved = allocated(&memfds[0]);
    assert_eq!(moved, 26 * PAGE);
    assert_eq!(allocated(&memfds[1]), 4 * PAGE + 2 * PAGE);

    // A successor that fails before taking the mount over gives nothing
    // back: the predecessor serves on from the same pages.
    let failed = restore(saved, cfg(None, None));
    for f in &files {
        let v = failed.vget(f.ino()).unwrap();
        let cut = SetAttr {
            size: Some(0),
            ..Default::default()
        };
        failed.setattr(&C, &v, &cut).unwrap();
    }
    drop(failed);
    assert_eq!(dump(&fs, true), before);
    assert_eq!(allocated(&memfds[0]), moved);

    // Then one that does take it.
    let second = restore(save(&fs, &[]), cfg(None, None));
    fs.handed_over();
    second.taken_over();
    drop(files);
    drop(fs);
    assert_eq!(dump(&second, true), before);
    // The old pages of the files copied at the pause (the grown one's 3,
    // the 2 left in the cut one), which no file of the successor took,
    // given back by it; nothing else.
    let left = moved - 5 * PAGE;
    assert_eq!(allocated(&memfds[0]), left);
    let root = second.root().unwrap();
    second.unlink(&C, &root, b"f0").unwrap();
    assert_eq!(
        allocated(&memfds[0]),
        left - 3 * PAGE,
        "the server gives back"
    );

    // And on to a third: the files now all in place, nothing copied.
    let saved = save(&second, &[]);
    let pages: u64 = saved.fds.iter().map(allocated).sum();
    assert_eq!(saved.fds.len(), 2, "both page files passed on");
    assert_eq!(pages, left - 3 * PAGE + 6 * PAGE);
    let after = dump(&second, true);
    let third = restore(saved, cfg(None, None));
    second.handed_over();
    third.taken_over();
    drop(second);
    assert_eq!(dump(&third, true), after);
}

#[test]
fn a_removed_directory_still_in_use_is_kept() {
    let fs = MemFs::new(layer(), cfg(None, None));
    let root = fs.root().unwrap();
    let d = fs.mkdir(&C, &root, b"cwd", 0o755).unwrap();
    fs.rmdir(&C, &root, b"cwd").unwrap();
    let new = restore(save(&fs, std::slice::from_ref(&d)), cfg(None, None));
    let d2 = new.vget(d.ino()).unwrap();
    let (mut x, mut y) = (String::new(), String::new());
    describe(&fs, &d, true, &mut x);
    describe(&new, &d2, true, &mut y);
    assert_eq!(x, y);
    assert_eq!(list_from(&new, &d2, 0), list_from(&fs, &d, 0));
    for f in [&fs, &new] {
        let d = f
            .vget(d.ino())
            .or_else(|_| Ok::<_, Errno>(d.clone()))
            .unwrap();
        assert_eq!(
            f.create(&C, &d, b"x", 0o644, libc::O_RDWR).map(drop),
            Err(Errno::ENOENT)
        );
    }
    let ino = d.ino();
    drop((d, d2));
    assert_eq!(new.vget(ino).err(), Some(Errno::ESTALE));
    assert_eq!(new.alive_count(), 1);
}

#[test]
fn a_nameless_file_not_asked_for_yet_goes_on_to_the_next_successor() {
    let fs = MemFs::new(layer(), cfg(None, None));
    let root = fs.root().unwrap();
    let (f, _) = fs.create(&C, &root, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.write(&f, Fh(0), 0, b"kept").unwrap();
    fs.unlink(&C, &root, b"f").unwrap();
    let second = restore(save(&fs, std::slice::from_ref(&f)), cfg(None, None));
    // Upgraded again before the server asked for it.
    let third = restore(save(&second, &[]), cfg(None, None));
    let v = third.vget(f.ino()).unwrap();
    assert_eq!(third.read(&v, Fh(0), 0, 10).unwrap(), b"kept");
}

/// Pages moved ahead while other threads write, cut, punch and grow the
/// same files: every byte stays what the writes made it, before and
/// after an upgrade.
#[test]
fn pages_move_ahead_while_the_files_are_written() {
    let fs = MemFs::new(layer(), cfg(None, None));
    let root = fs.root().unwrap();
    let files: Vec<VnodeRef> = (0..4)
        .map(|i| {
            let name = format!("f{i}");
            let (f, _) = fs
                .create(&C, &root, name.as_bytes(), 0o644, libc::O_RDWR)
                .unwrap();
            f
        })
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let moves = std::sync::atomic::AtomicU64::new(0);
    // What each file holds: its writer's model.
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                fs.save_ahead(&[]).unwrap();
                moves.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        // Stops the mover however the writers end (a writer's failed
        // check included), so that the scope can end.
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        let writers: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let (fs, moves) = (&fs, &moves);
                s.spawn(move || {
                    let mut rng = Rng::with_seed(i as u64 + 1);
                    let mut model: Vec<u8> = Vec::new();
                    // Until the mover has moved the files many times
                    // (bounded, for a machine where it barely runs).
                    let mut step = 0u32;
                    while step < 2000
                        || (moves.load(std::sync::atomic::Ordering::Relaxed) < 3000
                            && step < 400_000)
                    {
                        step += 1;
                        // The file as this thread last left it: a move
                        // that lost a write shows here, before the next
                        // write can cover it.
                        let now = fs.read(f, Fh(0), 0, (19 * PAGE) as u32).unwrap();
                        assert!(now == model, "file {} changed under its writer", f.ino());
                        let off = rng.u64(..16 * PAGE);
                        let len = rng.u64(1..3 * PAGE);
                        match rng.u8(..10) {
                            0 => {
                                let cut = SetAttr {
                                    size: Some(off),
                                    ..Default::default()
                                };
                                fs.setattr(&C, f, &cut).unwrap();
                                model.resize(off as usize, 0);
                            }
                            1 => {
                                let punch =
                                    FallocMode(FallocMode::KEEP_SIZE | FallocMode::PUNCH_HOLE);
                                fs.fallocate(f, Fh(0), punch, off, len).unwrap();
                                let end = ((off + len) as usize).min(model.len());
                                if (off as usize) < end {
                                    model[off as usize..end].fill(0);
                                }
                            }
                            _ => {
                                let byte = (step % 251) as u8 + 1;
                                let data = vec![byte; len as usize];
                                assert_eq!(
                                    fs.write(f, Fh(0), off, &data).unwrap() as usize,
                                    data.len()
                                );
                                let end = (off + len) as usize;
                                if model.len() < end {
                                    model.resize(end, 0);
                                }
                                model[off as usize..end].copy_from_slice(&data);
                            }
                        }
                    }
                    model
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert!(moves.load(std::sync::atomic::Ordering::Relaxed) > 0);
    let contents = |f: &MemFs, vp: &VnodeRef| f.read(vp, Fh(0), 0, (19 * PAGE) as u32).unwrap();
    for (vp, model) in files.iter().zip(&models) {
        assert_eq!(contents(&fs, vp), *model, "file {}", vp.ino());
    }
    let new = restore(save(&fs, &[]), cfg(None, None));
    fs.handed_over();
    new.taken_over();
    let inos: Vec<Ino> = files.iter().map(|f| f.ino()).collect();
    drop(files);
    drop(fs);
    for (ino, model) in inos.into_iter().zip(&models) {
        let v = new.vget(ino).unwrap();
        assert_eq!(contents(&new, &v), *model, "file {ino} restored");
    }
}
