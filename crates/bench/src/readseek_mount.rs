//! `uvfs bench readseek --mount`: readseek3 through a real FUSE mount of
//! memfs, so every read is a request the server answers.
//!
//! A `uvfs mount` server runs in a child process (see `fuse_mount.rs`).
//! For each thread count T, a file of `4096 * T` bytes is written in it and
//! opened once with `O_DIRECT`, which makes the kernel send each `pread`
//! to the server as a READ instead of answering from its page cache;
//! worker `nr` then preads 4096 bytes at `4096 * nr` in a loop for a fixed
//! time (as `readseek.rs`, with the file system's range lock inside the
//! server). Rows carry `lock = "uvfs-fuse"`, plus requests per read and
//! the server's CPU per read, from its counters.

use crate::fuse_mount::{ServerMount, ServerSample};
use crate::readseek_opts::ReadseekOpts;
use crate::report::{median, Progress, Report};
use crate::row;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// A page-aligned read buffer, as O_DIRECT may require.
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// Writes a `4096 * pages` byte file (each page its own byte) and opens it
/// for direct reads.
fn prepare(path: &Path, pages: usize) -> io::Result<File> {
    let mut f = File::create(path)?;
    for p in 0..pages {
        f.write_all(&[p as u8; PAGE])?;
    }
    f.sync_all()?;
    drop(f);
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("open {} with O_DIRECT: {e}", path.display()),
            )
        })
}

/// One measurement: T workers preading their own page; returns reads/s.
fn measure(file: &File, threads: usize, secs: f64) -> io::Result<f64> {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|nr| {
                let (stop, start) = (&stop, &start);
                sc.spawn(move || -> io::Result<u64> {
                    let mut buf = Box::new(Page([0; PAGE]));
                    let off = (PAGE * nr) as u64;
                    let mut ops = 0u64;
                    start.wait();
                    while !stop.load(Relaxed) {
                        let n = file.read_at(&mut buf.0, off)?;
                        if n != PAGE || buf.0[0] != nr as u8 {
                            return Err(io::Error::other(format!(
                                "read {n} bytes of page {nr}, first byte {}",
                                buf.0[0]
                            )));
                        }
                        std::hint::black_box(&mut buf);
                        ops += 1;
                    }
                    Ok(ops)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Relaxed);
        let elapsed = t0.elapsed().as_secs_f64();
        let mut total = 0;
        for h in hs {
            total += h
                .join()
                .map_err(|_| io::Error::other("reader panicked"))??;
        }
        Ok(total as f64 / elapsed)
    })
}

/// Runs readseek through the mount: one row per thread count.
pub fn run(opts: &ReadseekOpts) -> io::Result<Report> {
    if opts.writers > 0 || opts.truncate_every.is_some() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--mount runs readers only (no --writers or --truncate-every)",
        ));
    }
    let secs = opts
        .secs
        .unwrap_or(if opts.common.quick { 0.2 } else { 1.0 });
    let repeats = opts.common.repeats.max(1);
    let server = ServerMount::start("readseek", &[])?;
    let mut progress = Progress::new(opts.threads.len() * repeats);
    let mut report = Report::new("readseek");
    for &threads in &opts.threads {
        let threads = threads.max(1);
        let path = server.root().join(format!("readseek-{threads}"));
        let file = prepare(&path, threads)?;
        let mut ops = Vec::new();
        let mut reqs = Vec::new();
        let mut cpu = Vec::new();
        for rep in 0..repeats {
            progress.step(&format!(
                "readseek --mount T={threads} (repeat {}/{repeats})",
                rep + 1
            ));
            let before = server.sample()?;
            let rate = measure(&file, threads, secs)?;
            let d: ServerSample = before.delta(&server.sample()?);
            let reads = (rate * secs).max(1.0);
            ops.push(rate);
            reqs.push(d.by_op.get("read").copied().unwrap_or(d.requests) as f64 / reads);
            cpu.push(d.cpu_secs * 1e6 / reads);
        }
        drop(file);
        std::fs::remove_file(&path)?;
        let ops = median(&ops);
        report.rows.push(row!(
            "lock" => "uvfs-fuse",
            "threads" => threads,
            "writers" => 0,
            "truncate_ms" => None::<u64>,
            "secs" => secs,
            "repeats" => repeats,
            "ops_per_sec" => ops,
            "per_thread" => ops / threads as f64,
            "requests_per_op" => median(&reqs),
            "server_cpu_us_per_op" => median(&cpu),
        ));
    }
    progress.finish();
    let mut server = server;
    server.shutdown()?;
    add_scaling(&mut report);
    Ok(report)
}

/// `vs_one_thread`: ops/s over the one-thread row's.
fn add_scaling(report: &mut Report) {
    let one = report
        .rows
        .iter()
        .find(|r| r["threads"] == 1)
        .and_then(|r| r["ops_per_sec"].as_f64());
    if let Some(one) = one {
        for r in &mut report.rows {
            let v = r["ops_per_sec"].as_f64().unwrap_or(0.0);
            r.insert("vs_one_thread".into(), (v / one).into());
        }
    }
}

/// Table columns for `emit`.
pub const COLUMNS: &[&str] = &[
    "lock",
    "threads",
    "ops_per_sec",
    "per_thread",
    "vs_one_thread",
    "requests_per_op",
    "server_cpu_us_per_op",
];

/// Scaling and what each read costs the server.
pub fn summary(report: &Report) -> Vec<String> {
    let mut out = vec![
        "through a uvfs FUSE mount of memfs, O_DIRECT: every pread is a READ request".to_string(),
    ];
    for r in &report.rows {
        out.push(format!(
            "uvfs-fuse T={}: {:.0} reads/s ({:.2}x one thread), {:.2} requests/read, server CPU {:.1} us/read",
            r["threads"],
            r["ops_per_sec"].as_f64().unwrap_or(f64::NAN),
            num(r, "vs_one_thread").unwrap_or(f64::NAN),
            num(r, "requests_per_op").unwrap_or(f64::NAN),
            num(r, "server_cpu_us_per_op").unwrap_or(f64::NAN),
        ));
    }
    out
}

/// A numeric cell of a row, if it is there.
fn num(r: &crate::report::Row, key: &str) -> Option<f64> {
    r.get(key).and_then(serde_json::Value::as_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_is_relative_to_one_thread() {
        let mut r = Report::new("readseek");
        r.rows
            .push(row!("lock" => "uvfs-fuse", "threads" => 1, "ops_per_sec" => 100.0));
        r.rows
            .push(row!("lock" => "uvfs-fuse", "threads" => 2, "ops_per_sec" => 150.0));
        add_scaling(&mut r);
        assert_eq!(r.rows[1]["vs_one_thread"].as_f64(), Some(1.5));
        let s = summary(&r);
        assert!(s[2].contains("1.50x one thread"), "{s:?}");
    }
}
