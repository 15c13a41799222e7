//! The load that runs through a mount while its server is replaced: a few
//! threads, each doing a mix of what programs do (stat a known file, read
//! a small file, append to a file, create and remove a file, list a
//! directory), every operation timed and checked. What a program would
//! notice of an upgrade is the longest of its operations that overlapped
//! it ([`worst_overlapping`]) and any that failed.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Files the load stats, besides those of the configuration's data.
pub const STAT_FILES: usize = 64;
/// The small file every thread reads whole.
const SMALL: &str = "small";
const SMALL_LEN: usize = 4096;
/// Where files created are kept with `keep_created`.
const CREATED: &str = "created";

/// One operation: when it started and how long it took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Op {
    pub start: Instant,
    pub took: Duration,
}

/// What one load thread did.
#[derive(Debug, Default)]
pub struct Log {
    pub ops: Vec<Op>,
    /// Failed operations, and the first few failures in words.
    pub failed: usize,
    pub errors: Vec<String>,
}

/// What the load works on: its own directory in the mount, and the
/// files it stats.
#[derive(Clone, Debug)]
pub struct Target {
    /// `load/` in the mount (made by [`prepare`]).
    pub dir: PathBuf,
    /// Known files to stat, chosen at random.
    pub stat: Vec<PathBuf>,
    /// Files created are kept (in `load/created/`), not removed.
    pub keep_created: bool,
}

fn small_content() -> Vec<u8> {
    (0..SMALL_LEN).map(|i| (i * 31 + 7) as u8).collect()
}

/// Makes the load's directory in `mnt`: the small file and the files it
/// stats; `extra`: known files of the configuration's data to stat too.
pub fn prepare(mnt: &Path, extra: Vec<PathBuf>, keep_created: bool) -> std::io::Result<Target> {
    let dir = mnt.join("load");
    std::fs::create_dir_all(dir.join(CREATED))?;
    std::fs::write(dir.join(SMALL), small_content())?;
    let mut stat = extra;
    for i in 0..STAT_FILES {
        let p = dir.join(format!("k{i}"));
        std::fs::write(&p, b"k")?;
        stat.push(p);
    }
    Ok(Target {
        dir,
        stat,
        keep_created,
    })
}

/// A small xorshift generator: the choice of file needs no quality.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The mix, by weight: stats are what a `find` or a build does most.
const MIX: [Kind; 9] = [
    Kind::Stat,
    Kind::Stat,
    Kind::Stat,
    Kind::Read,
    Kind::Append,
    Kind::Stat,
    Kind::CreateRemove,
    Kind::Read,
    Kind::Readdir,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Stat,
    Read,
    Append,
    CreateRemove,
    Readdir,
}

fn one(kind: Kind, t: &Target, thread: usize, i: u64, rng: &mut Rng) -> Result<(), String> {
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    match kind {
        Kind::Stat => {
            let p = &t.stat[(rng.next() % t.stat.len() as u64) as usize];
            std::fs::symlink_metadata(p).map_err(|e| io("stat", p, e))?;
        }
        Kind::Read => {
            let p = t.dir.join(SMALL);
            let mut b = Vec::with_capacity(SMALL_LEN);
            std::fs::File::open(&p)
                .and_then(|mut f| f.read_to_end(&mut b))
                .map_err(|e| io("read", &p, e))?;
            if b != small_content() {
                return Err(format!(
                    "read {}: wrong content ({} bytes)",
                    p.display(),
                    b.len()
                ));
            }
        }
        Kind::Append => {
            let p = t.dir.join(format!("append-{thread}"));
            let before = std::fs::symlink_metadata(&p).map_or(0, |m| m.len());
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .and_then(|mut f| f.write_all(&[b'a'; 64]))
                .map_err(|e| io("append to", &p, e))?;
            let after = std::fs::symlink_metadata(&p).map_err(|e| io("stat", &p, e))?;
            if after.len() != before + 64 {
                return Err(format!(
                    "append to {}: size {} after appending 64 bytes to {before}",
                    p.display(),
                    after.len()
                ));
            }
            // Kept small: truncated now and then.
            if after.len() >= 64 * 1024 {
                std::fs::write(&p, b"").map_err(|e| io("truncate", &p, e))?;
            }
        }
        Kind::CreateRemove if t.keep_created => {
            let p = t.dir.join(CREATED).join(format!("tmp-{thread}-{i}"));
            std::fs::write(&p, b"x").map_err(|e| io("create", &p, e))?;
        }
        Kind::CreateRemove => {
            let p = t.dir.join(format!("tmp-{thread}-{i}"));
            std::fs::write(&p, b"x").map_err(|e| io("create", &p, e))?;
            std::fs::remove_file(&p).map_err(|e| io("remove", &p, e))?;
        }
        Kind::Readdir => {
            let n = std::fs::read_dir(&t.dir)
                .and_then(|d| d.map(|e| e.map(|_| ())).collect::<Result<Vec<()>, _>>())
                .map_err(|e| io("readdir", &t.dir, e))?
                .len();
            if n < STAT_FILES + 2 {
                return Err(format!("readdir {}: {n} entries", t.dir.display()));
            }
        }
    }
    Ok(())
}

/// Runs the mix on `t` until `stop`; thread number `thread` (names of
/// its own files, seed).
pub fn run(t: &Target, thread: usize, stop: &AtomicBool) -> Log {
    let mut log = Log::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (thread as u64 + 1));
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let kind = MIX[(i % MIX.len() as u64) as usize];
        let start = Instant::now();
        let r = one(kind, t, thread, i, &mut rng);
        log.ops.push(Op {
            start,
            took: start.elapsed(),
        });
        if let Err(e) = r {
            log.failed += 1;
            if log.errors.len() < 3 {
                log.errors.push(e);
            }
        }
        i += 1;
    }
    log
}

/// The longest of `ops` that overlapped `[from, to]` (started before its
/// end and ended after its start), and how many did.
pub fn worst_overlapping(ops: &[Op], from: Instant, to: Instant) -> (Option<Duration>, usize) {
    let mut worst = None;
    let mut n = 0;
    for o in ops
        .iter()
        .filter(|o| o.start <= to && o.start + o.took >= from)
    {
        n += 1;
        worst = worst.max(Some(o.took));
    }
    (worst, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_ops_across_the_window_edges() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let op = |at: u64, took: u64| Op {
            start: t0 + ms(at),
            took: ms(took),
        };
        // Before, across the start, inside, across the end, spanning, after.
        let ops = [
            op(0, 5),
            op(8, 4),
            op(12, 1),
            op(18, 7),
            op(9, 30),
            op(40, 2),
        ];
        let (worst, n) = worst_overlapping(&ops, t0 + ms(10), t0 + ms(20));
        assert_eq!(n, 4);
        assert_eq!(worst, Some(ms(30)));
        assert_eq!(worst_overlapping(&ops, t0 + ms(50), t0 + ms(60)), (None, 0));
    }

    /// The mix on a plain directory: every kind runs, none fails, and the
    /// directory holds only what the load keeps.
    #[test]
    fn the_mix_runs_clean_on_a_directory() {
        let d = std::env::temp_dir().join(format!("uvfs-restart-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let t = prepare(&d, Vec::new(), false).unwrap();
        let stop = AtomicBool::new(false);
        let log = std::thread::scope(|s| {
            let h = s.spawn(|| run(&t, 0, &stop));
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::Relaxed);
            h.join().unwrap()
        });
        assert!(log.ops.len() >= MIX.len(), "{} ops", log.ops.len());
        assert_eq!(log.failed, 0, "{:?}", log.errors);
        let left: Vec<String> = std::fs::read_dir(&t.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let kept = Target {
            keep_created: true,
            ..t.clone()
        };
        let mut rng = Rng(1);
        one(Kind::CreateRemove, &kept, 0, 7, &mut rng).unwrap();
        assert!(t.dir.join(CREATED).join("tmp-0-7").exists());
        // A failing operation is counted and said.
        std::fs::remove_file(t.dir.join(SMALL)).unwrap();
        let mut rng = Rng(1);
        let e = one(Kind::Read, &t, 0, 0, &mut rng).unwrap_err();
        assert!(e.starts_with("read "), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
