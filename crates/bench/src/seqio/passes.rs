//! The passes of `uvfs bench seqio` over one file (write it, read it back
//! checking every byte, copy it), and the machine checks around them:
//! room on the disk, memory for memfs, cold caches.

use super::pattern::Pattern;
use crate::procstat::Peaks;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes free to an unprivileged writer on the file system of `dir`.
pub(super) fn free_bytes(dir: &Path) -> io::Result<u64> {
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
        .map_err(io::Error::other)?;
    // SAFETY: all-zero is a valid `statvfs` (plain integers).
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and outlives the call; `st` is a valid,
    // writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Fails unless `dir` has room for twice `size` (one file at a time is
/// on disk; the margin is for everyone else's use of the disk).
pub(super) fn check_room(dir: &Path, size: u64) -> io::Result<()> {
    let free = free_bytes(dir)?;
    if free < size.saturating_mul(2) {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{} has {:.2} GiB free; seqio needs 2x the file size ({:.2} GiB): \
                 use a smaller --size or another --native-dir",
                dir.display(),
                free as f64 / GIB,
                2.0 * size as f64 / GIB
            ),
        ));
    }
    Ok(())
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub(super) fn mem_available() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|k| k * 1024)
        .ok_or_else(|| io::Error::other("no MemAvailable in /proc/meminfo"))
}

/// Makes the next read cold: evicts dentries and inodes (FORGETs to FUSE
/// servers, see `fuse_mount.rs`), then every clean page-cache page, both
/// the FUSE files' and their backing files'. `drop_kernel_caches` alone
/// is not enough: after `echo 2`, a just-written, closed file on ext4 still
/// had all its pages cached (`fincore`); `echo 1` dropped them.
pub(super) fn drop_all_caches() -> io::Result<()> {
    crate::fuse_mount::drop_kernel_caches()?;
    std::fs::write("/proc/sys/vm/drop_caches", "1\n").map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot drop the page cache (/proc/sys/vm/drop_caches: {e})"),
        )
    })
}

/// What one pass of one file system measured.
#[derive(Clone, Debug, Default)]
pub struct PassSample {
    /// I/O seconds (wall time minus `verify_secs`); `None` if it failed.
    pub secs: Option<f64>,
    /// Seconds spent checking content (reads only).
    pub verify_secs: f64,
    /// Why the pass failed.
    pub error: Option<String>,
    /// The server's fds and memory over the pass.
    pub peaks: Option<Peaks>,
    /// Server CPU seconds over the pass.
    pub server_cpu_secs: Option<f64>,
    /// uvfs servers: (all requests, requests of the pass's opcode).
    pub requests: Option<(u64, u64)>,
}

impl PassSample {
    pub fn failed(error: String) -> PassSample {
        PassSample {
            error: Some(error),
            ..PassSample::default()
        }
    }
}

/// Seconds of a pass: I/O and content checks.
#[derive(Debug)]
pub(super) struct Timed {
    pub secs: f64,
    pub verify_secs: f64,
}

/// Writes `size` bytes of `pat` to a new `path` in `block`s, fsyncs and
/// closes it.
pub(super) fn write_file(path: &Path, size: u64, block: usize, pat: &Pattern) -> io::Result<Timed> {
    let mut buf = vec![0u8; block];
    pat.fill(&mut buf, 0);
    let start = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let mut off = 0u64;
    while off < size {
        let n = block.min((size - off) as usize);
        // Blocks are whole pages: only the page stamps change.
        pat.restamp(&mut buf[..n], off);
        f.write_all(&buf[..n])?;
        off += n as u64;
    }
    f.sync_all()?;
    drop(f);
    Ok(Timed {
        secs: start.elapsed().as_secs_f64(),
        verify_secs: 0.0,
    })
}

/// Reads `path` to its end in `block`s, checking each against `pat`; the
/// file must hold exactly `size` bytes.
pub(super) fn read_file(path: &Path, size: u64, block: usize, pat: &Pattern) -> io::Result<Timed> {
    let mut buf = vec![0u8; block];
    let mut verify = Duration::ZERO;
    let start = Instant::now();
    let mut f = File::open(path)?;
    let mut off = 0u64;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let v = Instant::now();
        if off + n as u64 > size {
            return Err(io::Error::other(format!(
                "file is longer than the {size} bytes written"
            )));
        }
        pat.check(&buf[..n], off)
            .map_err(|m| io::Error::new(io::ErrorKind::InvalidData, m.to_string()))?;
        verify += v.elapsed();
        off += n as u64;
    }
    drop(f);
    let wall = start.elapsed();
    if off != size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("read {off} bytes, {size} were written"),
        ));
    }
    Ok(Timed {
        secs: wall.saturating_sub(verify).as_secs_f64(),
        verify_secs: verify.as_secs_f64(),
    })
}

/// Copies `from` (`size` bytes) to a new `to` with `copy_file_range`,
/// looping over short counts as `cp` does, then fsyncs and closes it. The
/// caller checks the copy (`read_file`) outside the timed and watched pass.
pub(super) fn copy_file(from: &Path, to: &Path, size: u64) -> io::Result<Timed> {
    let start = Instant::now();
    let src = File::open(from)?;
    let dst = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(to)?;
    let (mut off_in, mut off_out) = (0i64, 0i64);
    while (off_in as u64) < size {
        let left = usize::try_from(size - off_in as u64).unwrap_or(usize::MAX);
        // SAFETY: both fds are open for the call; the offsets are valid,
        // writable i64s that the kernel advances.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        match n {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("copy_file_range: the source ended at {off_in} of {size} bytes"),
                ))
            }
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(io::Error::new(e.kind(), format!("copy_file_range: {e}")));
                }
            }
            _ => {}
        }
    }
    dst.sync_all()?;
    drop((src, dst));
    Ok(Timed {
        secs: start.elapsed().as_secs_f64(),
        verify_secs: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seqio::PAGE;

    #[test]
    fn write_and_read_back_a_file() {
        let dir = std::env::temp_dir().join(format!("uvfs-seqio-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let (size, block) = (3 * (64 << 10) + 5 * PAGE as u64 + 100, 64 << 10);
        let pat = Pattern::new(11);
        write_file(&path, size, block, &pat).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        let t = read_file(&path, size, block, &pat).unwrap();
        assert!(t.secs >= 0.0 && t.verify_secs > 0.0);
        // Another seed's pattern, a longer or shorter expectation: errors.
        let e = read_file(&path, size, block, &Pattern::new(12)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(read_file(&path, size + 1, block, &pat).is_err());
        assert!(read_file(&path, size - 1, block, &pat).is_err());
        // One byte changed on disk.
        let mut data = std::fs::read(&path).unwrap();
        data[200_000] ^= 1;
        std::fs::write(&path, &data).unwrap();
        let e = read_file(&path, size, block, &pat).unwrap_err().to_string();
        assert!(e.contains("offset 200000"), "{e}");
        // A copy of a good file checks out; a copy of the changed one not.
        write_file(&path, size, block, &pat).unwrap();
        let copy = dir.join("g");
        let t = copy_file(&path, &copy, size).unwrap();
        assert!(t.secs > 0.0);
        assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(&path).unwrap());
        read_file(&copy, size, block, &pat).unwrap();
        std::fs::write(&path, &data).unwrap();
        copy_file(&path, &copy, size).unwrap();
        let e = read_file(&copy, size, block, &pat).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // A source shorter than promised.
        let e = copy_file(&path, &copy, size + 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
