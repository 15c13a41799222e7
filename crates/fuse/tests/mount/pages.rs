//! What meets the kernel's page cache: shared mappings, SEEK_DATA and
//! SEEK_HOLE, copy_file_range, closes, and a running program's text.

use crate::common::{self, said, Mnt};
use crate::cstr;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn closes_cost_no_flush_and_mapped_writes_still_land() {
    // memfs has nothing to do on a close, so opens tell the kernel to skip
    // FLUSH (a round trip per close). The kernel writes what a shared
    // mapping dirtied back when it is unmapped, so the server still has
    // it by the time the file is released.
    let Some(m) = Mnt::new(Some(64 * 4096)) else {
        return;
    };
    let flushes = || {
        m.report(false)["counters"]["fuse.requests.op.flush"]
            .as_u64()
            .unwrap()
    };
    fs::write(m.p("f"), vec![0u8; 8192]).unwrap();
    let before = flushes();
    for _ in 0..50 {
        let mut buf = Vec::new();
        fs::File::open(m.p("f"))
            .unwrap()
            .read_to_end(&mut buf)
            .unwrap();
        assert_eq!(buf.len(), 8192);
        let mut w = fs::OpenOptions::new().append(true).open(m.p("f")).unwrap();
        w.write_all(b"").unwrap();
    }
    assert_eq!(flushes(), before, "FLUSHes for closes");

    // Written through a shared mapping, unmapped, closed: the page is the
    // server's (SEEK_DATA finds it) once the file is released.
    let mut child = map_and_write(&m.p("mapped"), 3 * 4096, 4096);
    child.stdin.take();
    assert_eq!(said(&mut child), "fsync ok");
    assert!(child.wait().unwrap().success());
    // RELEASE follows close asynchronously; until it lands the server
    // answers "all data" for a file open for writing.
    let deadline = Instant::now() + Duration::from_secs(10);
    let f = fs::File::open(m.p("mapped")).unwrap();
    loop {
        // SAFETY: lseek on an open descriptor.
        let data = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA) };
        if data == 4096 {
            break;
        }
        assert_eq!(data, 0, "SEEK_DATA skipped the mapped page");
        assert!(Instant::now() < deadline, "file still open for writing");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut page = vec![0u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut page, 4096).unwrap();
    assert!(page.iter().all(|&c| c == b'D'));

    // A mapped page that does not fit (--size) is reported by fsync, not
    // lost silently, and what was written before stays.
    let mut fill = fs::File::create(m.p("fill")).unwrap();
    let mut filled = 0;
    while fill.write_all(&[1u8; 4096]).is_ok() {
        filled += 4096;
    }
    drop(fill);
    let mut child = map_and_write(&m.p("too-big"), 4 * 4096, 3 * 4096);
    child.stdin.take();
    assert_eq!(said(&mut child), "fsync errno 28", "a page past --size");
    assert!(child.wait().unwrap().success());
    assert_eq!(fs::metadata(m.p("fill")).unwrap().len(), filled);
    assert!(fs::read(m.p("fill")).unwrap().iter().all(|&c| c == 1));
}

#[test]
fn seek_data_and_hole_answer_as_tmpfs() {
    let Some(m) = Mnt::new(None) else { return };
    let ours = common::sparse_seeks(&m.p("sparse"));
    let reference =
        std::path::Path::new("/dev/shm").join(format!("uvfs-seek-{}", std::process::id()));
    let theirs = common::sparse_seeks(&reference);
    let _ = fs::remove_file(&reference);
    assert_eq!(ours, theirs);
    // Not the whole file as data (what no LSEEK support would say).
    assert!(ours.contains(&(0, libc::SEEK_HOLE, 4096)), "{ours:?}");
}

/// A child process that maps `len` bytes of a new file at `path` shared,
/// fills the page at `at`, and once its stdin closes unmaps the file,
/// fsyncs it (saying "fsync ok" or "fsync errno N") and closes it.
/// Mapped in another process because this one serves the mount: a page
/// fault here holds this process's mmap lock while a request thread may
/// need it to grow its heap, and neither would move.
fn map_and_write(path: &Path, len: usize, at: usize) -> std::process::Child {
    let script = r#"
import mmap, os, sys
path, n, at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fd, n)
m = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[at:at + 4096] = b"D" * 4096
print("mapped", flush=True)
sys.stdin.read()
m.close()
try:
    os.fsync(fd)
    print("fsync ok", flush=True)
except OSError as e:
    print("fsync errno", e.errno, flush=True)
os.close(fd)
"#;
    let mut c = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .args([len.to_string(), at.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(said(&mut c), "mapped");
    c
}

#[test]
fn seek_data_sees_dirty_pages_of_a_shared_mapping() {
    // The kernel asks LSEEK without writing its dirty pages back: a hole
    // the file system has, written through a mapping, must not be skipped
    // by SEEK_DATA (a copy by SEEK_DATA would lose the data).
    let Some(m) = Mnt::new(None) else { return };
    const MB: usize = 1 << 20;
    let mut w = map_and_write(&m.p("mapped"), 4 * MB, MB);
    let r = fs::File::open(m.p("mapped")).unwrap();
    let seek = |f: &fs::File, whence| {
        // SAFETY: plain integer arguments on an fd we hold.
        unsafe { libc::lseek(f.as_raw_fd(), 0, whence) }
    };
    let data = seek(&r, libc::SEEK_DATA);
    assert!(
        (0..=MB as i64).contains(&data),
        "SEEK_DATA skipped the mapped page: {data}"
    );
    w.stdin.take();
    assert!(w.wait().unwrap().success());
    // munmap wrote the page back, but the kernel sends RELEASE
    // asynchronously: until the server has it, the file still counts as
    // open for writing and the answer stays "all data". It must never
    // skip the page, and must become exact once RELEASE arrives.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let data = seek(&r, libc::SEEK_DATA);
        assert!(
            (0..=MB as i64).contains(&data),
            "SEEK_DATA skipped the written-back page: {data}"
        );
        if data == MB as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no exact SEEK_DATA answer 30 s after the writer closed: {data}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(seek(&r, libc::SEEK_HOLE), 0);
}

/// `copy_file_range(2)` through the mount, to its end (calls return
/// short counts, as a caller's loop expects).
fn copy_all(from: &fs::File, to: &fs::File, len: i64) -> i64 {
    let (mut off_in, mut off_out) = (0i64, 0i64);
    while off_in < len {
        // SAFETY: open fds and valid offset pointers.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off_in,
                to.as_raw_fd(),
                &mut off_out,
                (len - off_in) as usize,
                0,
            )
        };
        assert!(n >= 0, "{}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
    }
    off_out
}

#[test]
fn copy_file_range_is_served_in_memory_and_sees_mapped_writes() {
    let Some(m) = Mnt::new(None) else { return };
    const MB: usize = 1 << 20;
    // 20 MiB with a hole in the middle and a page written through a
    // shared mapping that has not been written back yet: the kernel
    // writes it back before asking for the copy.
    let mut w = map_and_write(&m.p("src"), 20 * MB, 18 * MB);
    {
        let mut f = fs::OpenOptions::new().write(true).open(m.p("src")).unwrap();
        f.write_all(&vec![b'A'; 3 * MB]).unwrap();
        f.seek(SeekFrom::Start(10 * MB as u64 + 7)).unwrap();
        f.write_all(b"middle").unwrap();
    }
    let copies = || {
        m.report(false)["counters"]["fuse.requests.op.copy_file_range"]
            .as_u64()
            .unwrap()
    };
    let before = copies();
    let src = fs::File::open(m.p("src")).unwrap();
    let dst = fs::File::create(m.p("dst")).unwrap();
    assert_eq!(copy_all(&src, &dst, 20 * MB as i64), 20 * MB as i64);
    assert!(
        copies() >= before + 3,
        "copies served: {}",
        copies() - before
    );
    w.stdin.take();
    assert!(w.wait().unwrap().success());
    let got = fs::read(m.p("dst")).unwrap();
    assert_eq!(got.len(), 20 * MB);
    assert!(got[..3 * MB].iter().all(|&c| c == b'A'));
    assert_eq!(&got[10 * MB + 7..10 * MB + 13], b"middle");
    assert!(got[18 * MB..18 * MB + 4096].iter().all(|&c| c == b'D'));
    assert_eq!(got, fs::read(m.p("src")).unwrap());
    // Every page of the copy is allocated, holes too, as on tmpfs.
    let blocks = fs::metadata(m.p("dst")).unwrap().blocks();
    assert_eq!(blocks, 20 * MB as u64 / 512);
}

/// Runs `prog 10`, just written. Another test's child between its fork and
/// its exec holds copies of every fd this process had open at the fork,
/// the one `fs::copy` wrote `prog` through among them, and exec refuses a
/// file open for writing (ETXTBSY, the kernel's own rule, not the
/// server's): try again until that child has exec'd.
fn spawn_fresh(prog: &Path) -> std::process::Child {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::process::Command::new(prog).arg("10").spawn() {
            Ok(c) => return c,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("spawning {}: {e}", prog.display()),
        }
    }
}

/// A program being run keeps its text: write-opens and
/// `open(O_RDONLY | O_TRUNC)` fail with ETXTBSY and change nothing, even
/// in the instant after `spawn` returns, while the exec is still loading
/// pages. (With FUSE_ATOMIC_O_TRUNC the kernel dropped the page cache for
/// a truncating OPEN before checking ETXTBSY: the exec died with SIGSEGV
/// and, when it died first, the open succeeded.)
#[test]
fn running_program_is_text_busy() {
    let Some(m) = Mnt::new(None) else { return };
    let len = fs::metadata("/bin/sleep").unwrap().len();
    for round in 0..30 {
        // A fresh copy each round, as pjdfstest does: its last page is
        // not in the page cache, so the exec still reads from the server
        // after `spawn` returns, which is the window the bug needs.
        let prog = m.p(&format!("prog{round}"));
        fs::copy("/bin/sleep", &prog).unwrap();
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
        let path = cstr(&prog);
        let mut child = spawn_fresh(&prog);
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
            // SAFETY: `path` is a valid NUL-terminated string.
            let fd = unsafe { libc::open(path.as_ptr(), flags) };
            let err = std::io::Error::last_os_error().raw_os_error();
            if fd >= 0 {
                // SAFETY: `fd` was just opened by us.
                unsafe { libc::close(fd) };
            }
            assert!(
                fd < 0 && err == Some(libc::ETXTBSY),
                "round {round}: open({flags:#o}) of a running program: fd {fd}, errno {err:?}"
            );
        }
        let status = child.try_wait().unwrap();
        assert!(
            status.is_none(),
            "round {round}: the running program died: {status:?}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(fs::metadata(&prog).unwrap().len(), len, "round {round}");
        assert_eq!(fs::read(&prog).unwrap(), fs::read("/bin/sleep").unwrap());
    }
}

#[test]
fn mapped_stores_a_full_memfs_refused_are_not_shown_as_stored() {
    // tmpfs raises SIGBUS at such a store; through FUSE the kernel takes
    // it into its cache and writes it back later, and memfs refuses the
    // WRITE (ENOSPC, which `msync` reports). The refused pages must not
    // stay cached: reads would show data memfs never stored (until
    // evicted), and `O_DIRECT` readers another content.
    let Some(m) = Mnt::new(Some(256 * 1024)) else {
        return;
    };
    let mut big = fs::File::create(m.p("big")).unwrap();
    let chunk = vec![7u8; 16 * 1024];
    while big.write(&chunk).is_ok() {}
    drop(big);
    let said = msync_after(
        &m.p("mapped"),
        "os.ftruncate(fd, 0)\nos.ftruncate(fd, 65536)",
        65536,
        "m[:] = b\"\\xab\" * 65536",
    );
    assert_eq!(said, format!("msync errno {}", libc::ENOSPC));
    // What reads show is what memfs holds: nothing was stored.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let data = fs::read(m.p("mapped")).unwrap();
        assert_eq!(data.len(), 65536);
        if data.iter().all(|&b| b == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} bytes read as stored that memfs refused",
            data.iter().filter(|&&b| b != 0).count()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mapped_stores_into_a_full_memfs_keep_the_pages_it_had() {
    // A written-back range that memfs takes only in part: pages the file
    // had take their stores, holes it cannot fill are refused. The
    // kernel ignores a short count on a write back (msync and fsync
    // succeeded, and the stores into the file's own pages after the
    // first hole were dropped): the refusal must reach msync, and the
    // stores memfs could keep must be kept, holes first or last.
    for holes_first in [false, true] {
        let Some(m) = Mnt::new(Some(256 * 1024)) else {
            return;
        };
        const PAGE: usize = 4096;
        let had = if holes_first { 4 * PAGE } else { 0 };
        {
            let f = fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(m.p("mapped"))
                .unwrap();
            use std::os::unix::fs::FileExt;
            f.write_all_at(&[b'o'; 4 * PAGE], had as u64).unwrap();
            f.set_len(8 * PAGE as u64).unwrap();
        }
        let mut big = fs::File::create(m.p("big")).unwrap();
        while big.write(&[7u8; PAGE]).is_ok() {}
        drop(big);
        let said = msync_after(
            &m.p("mapped"),
            "",
            8 * PAGE,
            "for p in range(8):\n    m[p * 4096:p * 4096 + 4] = b\"mark\"",
        );
        assert_eq!(said, format!("msync errno {}", libc::ENOSPC));
        let mut want = vec![0u8; 8 * PAGE];
        want[had..had + 4 * PAGE].fill(b'o');
        for p in (had..had + 4 * PAGE).step_by(PAGE) {
            want[p..p + 4].copy_from_slice(b"mark");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let data = fs::read(m.p("mapped")).unwrap();
            if data == want {
                break;
            }
            let pages = |d: &[u8]| -> Vec<String> {
                d.chunks(PAGE)
                    .map(|c| String::from_utf8_lossy(&c[..4]).into_owned())
                    .collect()
            };
            assert!(
                Instant::now() < deadline,
                "holes first: {holes_first}: pages begin {:?}, want {:?}",
                pages(&data),
                pages(&want)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What `msync` answers (`msync ok`, or `msync errno N`) after stores
/// into `len` bytes of `file` mapped shared, in a process of its own
/// (Python): `setup` runs first with `fd` the file opened read-write
/// (made if missing), `store` then with `m` the mapping.
fn msync_after(file: &Path, setup: &str, len: usize, store: &str) -> String {
    let script = format!(
        "import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
{setup}
m = mmap.mmap(fd, {len}, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
{store}
try:
    m.flush()
    print('msync ok', flush=True)
except OSError as e:
    print('msync errno', e.errno, flush=True)
m.close()
os.close(fd)
"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
