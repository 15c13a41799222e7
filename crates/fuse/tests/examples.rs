//! The examples mount and serve what they say: each is started as a
//! program on a scratch mountpoint, read through the kernel, and stopped
//! with SIGTERM, after which its mount must be gone. Skipped (with a
//! message) where FUSE cannot be mounted.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// An example's executable: `cargo test` builds examples beside the test
/// binaries (target/<profile>/examples).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    profile.join("examples").join(name)
}

fn mounted(mnt: &Path) -> bool {
    uvfs_fuse::mount_entry(mnt).is_some()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops an example the way Ctrl-C would and checks it unmounted itself.
fn stop(mut child: Child, mnt: &Path) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert!(st.success(), "example exited with {st}");
    assert!(!mounted(mnt), "the example left its mount behind");
}

#[test]
fn hello_serves_one_read_only_file() {
    if let Err(why) = common::fuse_usable() {
        eprintln!("skipped: {why}");
        return;
    }
    let Some(dir) = common::scratch_dir("example-hello") else {
        return;
    };
    let mnt = dir.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let child = Command::new(example("hello")).arg(&mnt).spawn().unwrap();
    wait_for("the hello mount", || mounted(&mnt));
    let names: Vec<_> = fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["hello"]);
    assert_eq!(fs::read(mnt.join("hello")).unwrap(), b"Hello from uvfs!\n");
    let md = fs::metadata(mnt.join("hello")).unwrap();
    assert_eq!(md.len(), 17);
    let e = fs::write(mnt.join("hello"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert!(fs::metadata(mnt.join("nope")).is_err());
    stop(child, &mnt);
    let _ = fs::remove_dir_all(&dir);
}

/// A header for an entry of `kind`, owned by root, dated `MTIME`.
fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(MTIME);
    h.set_size(size);
    h
}

/// Adds a file or directory to an archive being built.
fn add(b: &mut tar::Builder<fs::File>, kind: tar::EntryType, path: &str, mode: u32, data: &[u8]) {
    let mut h = header(kind, mode, data.len() as u64);
    b.append_data(&mut h, path, data).unwrap();
}

/// Adds a symlink or hard link named `path` to `target`.
fn add_link(b: &mut tar::Builder<fs::File>, kind: tar::EntryType, path: &str, target: &str) {
    let mut h = header(kind, 0o777, 0);
    b.append_link(&mut h, path, target).unwrap();
}

const MTIME: u64 = 1_700_000_000;

/// A running tar example. Dropped without `stop` (a failed assertion),
/// it kills the example and detaches its mount, so that a failing test
/// leaves nothing behind.
struct Served {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Served {
    /// Mounts the tar example on `dir/mnt` serving `archive`, with a
    /// vnode limit if given.
    fn start(dir: &Path, archive: &Path, vnodes: Option<usize>) -> Served {
        let mnt = dir.join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        let mut cmd = Command::new(example("tar"));
        cmd.arg(archive).arg(&mnt);
        if let Some(n) = vnodes {
            cmd.arg("--vnodes").arg(n.to_string());
        }
        let served = Served {
            child: Some(cmd.spawn().unwrap()),
            mnt,
        };
        wait_for("the tar mount", || mounted(&served.mnt));
        served
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    fn stop(mut self) {
        stop(self.child.take().unwrap(), &self.mnt);
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = uvfs_fuse::unmount_path(&self.mnt, true);
        }
    }
}

fn errno(r: std::io::Result<impl Sized>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

#[test]
fn tar_serves_an_archive_as_it_is() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    use tar::EntryType::{Directory, Link, Regular, Symlink};
    let Some(dir) = common::scratch_dir("example-tar") else {
        return;
    };
    // Bytes that differ at every offset, so a read from the wrong place
    // in the archive shows.
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 123u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let long = format!("long/{}", "n".repeat(150));
    let archive = dir.join("a.tar");
    let mut b = tar::Builder::new(fs::File::create(&archive).unwrap());
    add(&mut b, Regular, "a/b/c/deep.txt", 0o640, b"deep\n");
    let mut h = header(Regular, 0o755, 10);
    h.set_uid(1000);
    h.set_gid(1001);
    b.append_data(&mut h, "./a/run.sh", &b"#!/bin/sh\n"[..])
        .unwrap();
    add(&mut b, Regular, "big.bin", 0o644, &big);
    add(&mut b, Regular, "private/secret", 0o600, b"s");
    add(&mut b, Directory, "private/", 0o700, b"");
    add(&mut b, Regular, "empty", 0o444, b"");
    add(&mut b, Regular, &long, 0o644, b"long name\n");
    add_link(&mut b, Symlink, "link", "a/b/c/deep.txt");
    add_link(&mut b, Link, "hard", "a/run.sh");
    b.into_inner().unwrap();

    let served = Served::start(&dir, &archive, None);
    let p = |rel: &str| served.p(rel);
    let mut names: Vec<_> = fs::read_dir(&served.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["a", "big.bin", "empty", "hard", "link", "long", "private"]
    );
    assert_eq!(fs::read(p("a/b/c/deep.txt")).unwrap(), b"deep\n");
    assert_eq!(fs::read(p("a/run.sh")).unwrap(), b"#!/bin/sh\n");
    assert!(fs::read(p("big.bin")).unwrap() == big, "big.bin differs");
    let mut part = vec![0; 4096];
    let f = fs::File::open(p("big.bin")).unwrap();
    assert_eq!(f.read_at(&mut part, 1_000_001).unwrap(), 4096);
    assert!(part == big[1_000_001..1_000_001 + 4096]);
    // An open file would keep the unmounted file system (and so the
    // example) alive until closed.
    drop(f);
    assert_eq!(fs::read(p("empty")).unwrap(), b"");
    assert_eq!(fs::read(p(&long)).unwrap(), b"long name\n");

    let mode = |rel: &str| fs::symlink_metadata(p(rel)).unwrap().mode();
    let ifmt = |m: u32| m & libc::S_IFMT;
    assert_eq!(mode("a/b/c/deep.txt"), libc::S_IFREG | 0o640);
    assert_eq!(mode("a/run.sh"), libc::S_IFREG | 0o755);
    assert_eq!(mode("empty"), libc::S_IFREG | 0o444);
    assert_eq!(mode("private"), libc::S_IFDIR | 0o700);
    assert_eq!(mode("private/secret"), libc::S_IFREG | 0o600);
    // Parents the archive does not list are made up.
    assert_eq!(mode("a/b"), libc::S_IFDIR | 0o755);
    assert_eq!(ifmt(mode("link")), libc::S_IFLNK);
    let run = fs::metadata(p("a/run.sh")).unwrap();
    assert_eq!((run.uid(), run.gid()), (1000, 1001));
    assert_eq!(run.mtime(), MTIME as i64);
    assert_eq!(fs::metadata(p("big.bin")).unwrap().len(), big.len() as u64);
    assert_eq!(fs::metadata(p("a")).unwrap().nlink(), 3);

    assert_eq!(
        fs::read_link(p("link")).unwrap(),
        Path::new("a/b/c/deep.txt")
    );
    assert_eq!(fs::read(p("link")).unwrap(), b"deep\n");
    let hard = fs::metadata(p("hard")).unwrap();
    assert_eq!((hard.ino(), hard.nlink()), (run.ino(), 2));
    assert_eq!(fs::read(p("hard")).unwrap(), b"#!/bin/sh\n");

    assert_eq!(errno(fs::metadata(p("nope"))), Some(libc::ENOENT));
    assert_eq!(errno(fs::write(p("empty"), b"x")), Some(libc::EROFS));
    assert_eq!(errno(fs::File::create(p("new"))), Some(libc::EROFS));
    assert_eq!(errno(fs::create_dir(p("d"))), Some(libc::EROFS));
    assert_eq!(errno(fs::remove_file(p("empty"))), Some(libc::EROFS));
    assert_eq!(errno(fs::rename(p("empty"), p("e2"))), Some(libc::EROFS));
    served.stop();
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn tar_walks_many_entries_within_its_vnode_limit() {
    // 20 x 50 directories of 20 files: 21,020 entries for 500 vnodes.
    const TOP: usize = 20;
    const SUB: usize = 50;
    const FILES: usize = 20;
    const LIMIT: u64 = 500;
    let Some(dir) = common::scratch_dir("example-tar-many") else {
        return;
    };
    let archive = dir.join("many.tar");
    let mut b = tar::Builder::new(fs::File::create(&archive).unwrap());
    let file = |t: usize, s: usize, f: usize| format!("t{t}/s{s}/f{f}");
    for t in 0..TOP {
        for s in 0..SUB {
            for f in 0..FILES {
                let path = file(t, s, f);
                let data = format!("{path}\n");
                add(
                    &mut b,
                    tar::EntryType::Regular,
                    &path,
                    0o644,
                    data.as_bytes(),
                );
            }
        }
    }
    b.into_inner().unwrap();

    let served = Served::start(&dir, &archive, Some(LIMIT as usize));
    let mut files = 0;
    for t in 0..TOP {
        assert_eq!(
            fs::read_dir(served.p(&format!("t{t}"))).unwrap().count(),
            SUB
        );
        for s in 0..SUB {
            let listed = fs::read_dir(served.p(&format!("t{t}/s{s}")))
                .unwrap()
                .count();
            assert_eq!(listed, FILES, "t{t}/s{s}");
            for f in 0..FILES {
                let path = file(t, s, f);
                assert_eq!(
                    fs::read(served.p(&path)).unwrap(),
                    format!("{path}\n").as_bytes()
                );
                files += 1;
            }
        }
    }
    assert_eq!(files, TOP * SUB * FILES);
    let report = uvfs_fuse::query(&served.mnt, false).unwrap();
    let c = &report["counters"];
    let n = |name: &str| c[name].as_u64().unwrap_or_else(|| panic!("no {name}: {c}"));
    assert_eq!(n("vfs.desiredvnodes"), LIMIT);
    // Every file had a vnode, recycled to make room for the next ones.
    assert!(n("vfs.vnode.stats.allocations") > files as u64, "{c}");
    assert!(n("vfs.vnode.stats.recycles") > files as u64 - LIMIT, "{c}");
    // The kernel holds every node it was handed until the server has it
    // forget cold ones, so a directory listing in flight can take the
    // count past the limit for a moment; it stays near it, far below the
    // entries walked.
    assert!(n("fuse.evict.max_vnodes") <= LIMIT + LIMIT / 4, "{c}");
    wait_for("the vnode count back within the limit", || {
        let r = uvfs_fuse::query(&served.mnt, false).unwrap();
        r["counters"]["mount.vnodes"].as_u64().unwrap() <= LIMIT
    });
    served.stop();
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn tar_refuses_what_is_not_an_archive() {
    let Some(dir) = common::scratch_dir("example-tar-bad") else {
        return;
    };
    let junk = dir.join("junk.tar");
    fs::write(&junk, vec![b'x'; 2000]).unwrap();
    let dangling = dir.join("dangling.tar");
    let mut b = tar::Builder::new(fs::File::create(&dangling).unwrap());
    add_link(&mut b, tar::EntryType::Link, "a/hard", "nowhere");
    b.into_inner().unwrap();
    let mnt = dir.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let run = |args: &[&std::ffi::OsStr]| Command::new(example("tar")).args(args).output().unwrap();
    for (archive, says) in [
        (&junk, ""),
        (&dir.join("missing.tar"), "No such file"),
        (&dangling, "a/hard: hard link to nowhere"),
    ] {
        let out = run(&[archive.as_os_str(), mnt.as_os_str()]);
        assert_eq!(out.status.code(), Some(1), "{archive:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(&format!("tar: {}: ", archive.display())),
            "{err}"
        );
        assert!(err.contains(says), "{err}");
        assert!(!mounted(&mnt));
    }
    let out = run(&[
        junk.as_os_str(),
        mnt.as_os_str(),
        "--vnodes".as_ref(),
        "0".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let _ = fs::remove_dir_all(&dir);
}
