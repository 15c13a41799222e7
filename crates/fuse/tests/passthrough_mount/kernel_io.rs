//! Kernel I/O on backing files (FUSE passthrough): the kernel reads and
//! writes open files on their source files, and what that lets the
//! server leave cached.

use crate::{counter, Pt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn the_kernel_reads_and_writes_open_files_on_their_source_files() {
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::os::unix::fs::{FileExt, MetadataExt};
    let Some(t) = Pt::new("kio") else { return };
    if counter(&t, "fuse.kernel_io") == 0 {
        eprintln!("SKIP: no kernel I/O on backing files here (FUSE passthrough: Linux 6.9+, root)");
        return;
    }
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(t.m("f"), &data).unwrap();
    assert_eq!(std::fs::read(t.src("f")).unwrap(), data);

    // Three opens at once of one file: all on the same backing file.
    let w = OpenOptions::new().write(true).open(t.m("f")).unwrap();
    let r = File::open(t.m("f")).unwrap();
    let mut a = OpenOptions::new().append(true).open(t.m("f")).unwrap();
    // One page cache: a write on the host shows at once in a file open
    // on the mount, and the other way round, whatever the timeouts.
    let h = OpenOptions::new()
        .read(true)
        .write(true)
        .open(t.src("f"))
        .unwrap();
    let mut buf = [0u8; 4];
    h.write_all_at(b"HOST", 4096).unwrap();
    r.read_exact_at(&mut buf, 4096).unwrap();
    assert_eq!(&buf, b"HOST");
    w.write_all_at(b"MNT!", 8192).unwrap();
    h.read_exact_at(&mut buf, 8192).unwrap();
    assert_eq!(&buf, b"MNT!");
    // O_APPEND appends at the source file's end.
    a.write_all(b"tail").unwrap();
    let len = data.len() as u64 + 4;
    h.read_exact_at(&mut buf, len - 4).unwrap();
    assert_eq!(&buf, b"tail");
    // Size and mtime through the mount are the source's.
    let (m, s) = (
        std::fs::metadata(t.m("f")).unwrap(),
        std::fs::metadata(t.src("f")).unwrap(),
    );
    assert_eq!(
        (m.len(), m.mtime(), m.mtime_nsec()),
        (len, s.mtime(), s.mtime_nsec())
    );
    drop((w, r, a, h));

    let mut expect = data;
    expect[4096..4100].copy_from_slice(b"HOST");
    expect[8192..8196].copy_from_slice(b"MNT!");
    expect.extend_from_slice(b"tail");
    assert_eq!(std::fs::read(t.m("f")).unwrap(), expect);

    // No data crossed the server, and every open was the kernel's.
    assert_eq!(counter(&t, "fuse.requests.op.read"), 0);
    assert_eq!(counter(&t, "fuse.requests.op.write"), 0);
    assert_eq!(counter(&t, "fuse.kernel_io.opens"), 5);
    assert_eq!(counter(&t, "fuse.kernel_io.open_files_server"), 0);
    let reg = counter(&t, "fuse.kernel_io.registered");
    assert!(
        (1..=3).contains(&reg),
        "{reg} registrations for 3 rounds of opens"
    );
    // The backing files go with the last RELEASE (sent after close returns).
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter(&t, "fuse.kernel_io.open_files") != 0 {
        assert!(Instant::now() < deadline, "backing files still registered");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A file a CREATE made is empty: its attributes go to the kernel for the
/// full timeout although it is open for writing on its backing file, so
/// the permission check of the `open` itself asks no GETATTR (one round
/// trip per file `tar` unpacks). Its name too: the path looked up again
/// after the file is closed asks no LOOKUP.
#[test]
fn opening_the_file_a_create_made_asks_no_getattr() {
    let Some(t) = Pt::with_timeouts("create-attrs", Duration::from_secs(60)) else {
        return;
    };
    if counter(&t, "fuse.kernel_io") == 0 {
        eprintln!("SKIP: no kernel I/O on backing files here (FUSE passthrough: Linux 6.9+, root)");
        return;
    }
    std::fs::create_dir(t.m("d")).unwrap();
    // The root's attributes, stale after the MKDIR, fetched again here.
    std::fs::metadata(t.m("d")).unwrap();
    let (getattrs, lookups) = (
        counter(&t, "fuse.requests.op.getattr"),
        counter(&t, "fuse.requests.op.lookup"),
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(t.m("d/f"))
        .unwrap();
    assert_eq!(
        counter(&t, "fuse.requests.op.getattr"),
        getattrs,
        "a GETATTR for the file just created"
    );
    drop(f);
    std::fs::metadata(t.m("d/f")).unwrap();
    assert_eq!(
        counter(&t, "fuse.requests.op.lookup"),
        lookups + 1,
        "one LOOKUP (of the new name, before CREATE), not another of the created file"
    );
}

/// A child process that creates `path` open for reading and writing,
/// gives it a page by `how` (`truncate` or `write`), stats it, writes the
/// page through a shared mapping and stats it again, printing both
/// mtimes in nanoseconds. In another process because this one serves the
/// mount (see `map_and_write` in mount/pages.rs).
fn create_then_map_write(path: &Path, how: &str) -> (i128, i128) {
    let script = r#"
import mmap, os, sys, time
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
if how == "truncate":
    os.ftruncate(fd, 4096)
else:
    os.write(fd, b"\0" * 4096)
before = os.stat(path).st_mtime_ns
time.sleep(0.05)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[0:1] = b"x"
after = os.stat(path).st_mtime_ns
m.close()
os.close(fd)
print(before, after)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .arg(how)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let s = String::from_utf8(out.stdout).unwrap();
    let v: Vec<i128> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1])
}

/// What lets a CREATE's empty file keep its attributes cached does not
/// let a mapped write go unseen: once the file has a page (by truncate or
/// by write), `stat` through the mount shows the mtime a write through a
/// shared mapping gave the source file, even with day-long timeouts.
#[test]
fn a_mapped_write_to_a_file_created_empty_shows_at_once() {
    let Some(t) = Pt::with_timeouts("create-mapped", Duration::from_secs(86400)) else {
        return;
    };
    if counter(&t, "fuse.kernel_io") == 0 {
        eprintln!("SKIP: no kernel I/O on backing files here (FUSE passthrough: Linux 6.9+, root)");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    for how in ["truncate", "write"] {
        let (before, after) = create_then_map_write(&t.m(how), how);
        let native = std::fs::metadata(t.src(how)).unwrap();
        let native = i128::from(native.mtime()) * 1_000_000_000 + i128::from(native.mtime_nsec());
        assert!(
            native > before,
            "{how}: the source's mtime did not move: nothing to compare"
        );
        assert_eq!(
            after, native,
            "{how}: a mapped write's mtime is stale through the mount"
        );
    }
}

#[test]
fn a_file_open_for_writing_on_its_backing_file_keeps_its_holes() {
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    const P: i64 = 4096;
    let Some(t) = Pt::new("kiohole") else { return };
    if counter(&t, "fuse.kernel_io") == 0 {
        eprintln!("SKIP: no kernel I/O on backing files here (FUSE passthrough: Linux 6.9+, root)");
        return;
    }
    // SAFETY: plain integer arguments on an fd the caller holds.
    let seek = |f: &File, at: i64, whence: i32| unsafe { libc::lseek(f.as_raw_fd(), at, whence) };
    let w = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(t.m("sparse"))
        .unwrap();
    w.write_all_at(&[1u8; P as usize], 0).unwrap();
    w.write_all_at(b"ten bytes!", 3 * P as u64).unwrap();
    w.set_len(5 * P as u64).unwrap();
    // Asked while it is open for writing, on the writer and on a reader:
    // the source's answers (a sparse copy of a file in use keeps its
    // holes), not "all data".
    let r = File::open(t.m("sparse")).unwrap();
    let src = File::open(t.src("sparse")).unwrap();
    let asks = [
        (0, libc::SEEK_HOLE),
        (P, libc::SEEK_DATA),
        (3 * P, libc::SEEK_HOLE),
        (4 * P, libc::SEEK_DATA),
    ];
    for (name, f) in [("writer", &w), ("reader", &r)] {
        for (at, whence) in asks {
            assert_eq!(
                seek(f, at, whence),
                seek(&src, at, whence),
                "{name}: lseek({at}, {whence})"
            );
        }
    }
    assert_eq!(seek(&r, 0, libc::SEEK_HOLE), P);

    // A page stored through a shared mapping and not written back yet is
    // data at once: the mapping is the source file's.
    let mut c = Command::new("python3")
        .args([
            "-c",
            "import mmap, os, sys\n\
             fd = os.open(sys.argv[1], os.O_RDWR)\n\
             m = mmap.mmap(fd, 5 * 4096, mmap.MAP_SHARED)\n\
             m[4096:8192] = b'M' * 4096\n\
             print('mapped', flush=True)\n\
             sys.stdin.read()\n",
        ])
        .arg(t.m("sparse"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "mapped");
    assert_eq!(seek(&r, P, libc::SEEK_DATA), P, "the mapped page skipped");
    assert_eq!(seek(&r, 0, libc::SEEK_HOLE), 2 * P);
    c.stdin.take();
    assert!(c.wait().unwrap().success());
}
