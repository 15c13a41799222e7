//! `uvfs bench devwork`: what a developer does all day on a file system,
//! timed step by step: unpack a source tarball (`tar -xzf`), `git init &&
//! git add -A && git commit`, `git status` after a pause, `git grep`, a
//! SQLite WAL workload (`sqlite3`), and `rm -rf` of it all.
//!
//! # File systems, as a user gets them
//! uvfs memfs (`uvfs mount MNT`), the uvfs passthrough of a directory under
//! `--native-dir` (`uvfs mount --source DIR MNT`), a private tmpfs, that
//! native directory itself, and every peer of `peers.rs` serving a
//! directory beside it. Every `uvfs mount` gets DEFAULT options, and the
//! kernel is left as it is: unlike the other workloads' mounts
//! (`ServerMount::start`), these do not turn the `fuse` module's
//! `enable_uring` on around their INIT, so a mount uses FUSE over io_uring
//! only where the machine (or the server itself) makes the kernel offer
//! it. Each uvfs row says which transport its requests came through
//! (`fuse.uring` and `fuse.requests.uring` of `uvfs stat --json`). The
//! peers get the uvfs passthrough's default entry and attribute timeout,
//! one second (go-fuse's and libfuse's `passthrough_ll`'s own default
//! too), so every passthrough caches names and attributes alike.
//!
//! # The tree
//! Generated from a seed (`devwork/tree.rs`): 4,650 files and symlinks
//! (`--files`; 500 with `--quick`) in about 390 directories up to 7
//! deep, sizes log-normal around 3 KiB, written once per run as a gzip'd
//! tar under `/tmp`.
//!
//! # Repeats
//! Every file system runs every step once per repeat, in an order that is
//! reversed on every other repeat, with memfs beside tmpfs and the
//! passthrough beside native (ext4 is slower for seconds after a mass
//! delete: neighbours are compared, see issue 29). Before a file system's
//! turn everything is `sync`ed, so one's write-back is not the next one's
//! cost. `git status` runs [`STATUS_PAUSE`] after the commit, so the
//! kernel's cached attributes of the tree have expired on every mount
//! that caches them for a second. Each step's median over the repeats is
//! reported, and ratios as medians of the repeats' own ratios (each from
//! neighbouring runs): uvfs memfs over tmpfs, the passthrough over native,
//! and go-fuse's loopback (when `peers.rs` has it) over every other mount.
//!
//! # Checks
//! After the unpack the tree is read back and compared, member by member
//! (path, type, mode, size, content or link target), with the tarball as
//! read from disk (`devwork/manifest.rs`); the commit must hold every
//! file, `git status` must be clean, `git grep` must find exactly the
//! files holding the needle, `sqlite3` must print what the script put in
//! (`devwork/sqlite.rs`), and `rm -rf` must leave nothing. A failed check
//! fails its row and the command. For uvfs mounts the server's counters
//! are read before and after every step (checks excluded): requests per
//! file unpacked, by opcode, and requests answered with an error.

mod manifest;
mod rows;
mod sqlite;
mod steps;
mod tree;

pub use manifest::{checksum, compare, of_tarball, of_tree, Manifest};
pub use rows::{chart, check, summary, COLUMNS};
pub use steps::Step;

use crate::fuse_mount::{self, ScratchDir, ServerMount, ServerSample, Tmpfs};
use crate::peers::{PeerKind, PeerMount, PeerOptions};
use crate::report::{Progress, Report};
use crate::CommonOpts;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const MEMFS: &str = "uvfs-memfs";
pub const PASSTHROUGH: &str = "uvfs-passthrough";
pub const TMPFS: &str = "tmpfs";
pub const NATIVE: &str = "native";

/// How long `git status` waits after the commit.
pub const STATUS_PAUSE: Duration = Duration::from_secs(2);
/// Longest a step may take before its server is taken for hung and
/// killed (which fails the step).
const STEP_LIMIT: Duration = Duration::from_secs(600);
/// The seed of the tree and the SQLite script.
const SEED: u64 = 29;
/// The `fuse` module's switch for FUSE over io_uring (read, never written).
const URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

#[derive(clap::Args, Debug, Clone)]
pub struct DevworkOpts {
    /// Write the rows as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Write a bar chart of the seconds per step as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<String>,
    /// Repeats per file system (default 5; 1 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub repeats: Option<usize>,
    /// A short run (a smaller tree, fewer inserts, one repeat).
    #[arg(long)]
    pub quick: bool,
    /// File systems to run (default: uvfs-memfs, tmpfs, uvfs-passthrough,
    /// native and every peer).
    #[arg(long, value_delimiter = ',')]
    pub fs: Option<Vec<String>>,
    /// Where the native tree and the passthrough's and peers' sources are
    /// made (a local disk, not a tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    pub native_dir: PathBuf,
    /// Files (and symlinks) in the tarball (default 4650; 500 with
    /// --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub files: Option<usize>,
    /// SQLite transactions of 100 inserts (default 40; 5 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub transactions: Option<usize>,
}

impl DevworkOpts {
    /// The options `emit` takes.
    pub fn common(&self) -> CommonOpts {
        CommonOpts {
            json: self.json.clone(),
            svg: self.svg.clone(),
            repeats: self.repeats(),
            quick: self.quick,
        }
    }

    pub fn repeats(&self) -> usize {
        self.repeats.unwrap_or(if self.quick { 1 } else { 5 })
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Every file system, in run order: memfs beside tmpfs, the passthrough
/// beside native, then the peers (any `peers.rs` knows).
pub fn all_fs() -> Vec<&'static str> {
    let mut v = vec![MEMFS, TMPFS, PASSTHROUGH, NATIVE];
    v.extend(PeerKind::ALL.iter().map(|k| k.name()));
    v
}

/// The file systems `--fs` asks for, checked, in run order.
fn choose_fs(wanted: Option<&[String]>) -> io::Result<Vec<&'static str>> {
    let all = all_fs();
    let Some(wanted) = wanted else {
        return Ok(all);
    };
    for w in wanted {
        if !all.contains(&w.as_str()) {
            return Err(bad(format!("unknown --fs {w:?} ({})", all.join(", "))));
        }
    }
    Ok(all
        .into_iter()
        .filter(|a| wanted.iter().any(|w| w == a))
        .collect())
}

/// The order of the file systems in repeat `rep`: as given, reversed on
/// every other repeat.
pub fn order(n: usize, rep: usize) -> Vec<usize> {
    if rep.is_multiple_of(2) {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// The kernel's `enable_uring` (`Y`/`N`), if it has one.
pub fn enable_uring() -> Option<String> {
    std::fs::read_to_string(URING_PARAMETER)
        .ok()
        .map(|s| s.trim().to_string())
}

// ---------------------------------------------------------------------
// File systems under test

enum Server {
    Uvfs(ServerMount),
    Peer(PeerMount),
}

struct Target {
    name: &'static str,
    /// The directory the tree is unpacked in.
    work: PathBuf,
    server: Option<Server>,
    _tmpfs: Option<Tmpfs>,
    setup_error: Option<String>,
}

impl Target {
    fn uvfs(&self) -> Option<&ServerMount> {
        match &self.server {
            Some(Server::Uvfs(m)) => Some(m),
            _ => None,
        }
    }

    fn pid(&self) -> Option<u32> {
        match &self.server {
            Some(Server::Uvfs(m)) => m.pid(),
            Some(Server::Peer(p)) => Some(p.pid()),
            None => None,
        }
    }
}

/// Torn down in reverse order (mounts before the directories they serve).
struct Targets(Vec<Target>);

impl Drop for Targets {
    fn drop(&mut self) {
        while let Some(t) = self.0.pop() {
            drop(t);
        }
    }
}

/// Sets up `name`; `disk` is the run's directory under `--native-dir`.
fn setup(name: &'static str, disk: &Path) -> Target {
    let mut t = Target {
        name,
        work: PathBuf::new(),
        server: None,
        _tmpfs: None,
        setup_error: None,
    };
    let r = (|| -> io::Result<()> {
        match name {
            NATIVE => {
                t.work = disk.join(NATIVE);
                std::fs::create_dir_all(&t.work)?;
            }
            TMPFS => {
                let m = Tmpfs::start("devwork-tmpfs")?;
                t.work = m.root.clone();
                t._tmpfs = Some(m);
            }
            MEMFS => {
                let m = ServerMount::start_as_is("devwork-memfs", &[])?;
                t.work = m.root().to_path_buf();
                t.server = Some(Server::Uvfs(m));
            }
            PASSTHROUGH => {
                let src = disk.join(PASSTHROUGH);
                std::fs::create_dir_all(&src)?;
                let args = ["--source".to_string(), src.display().to_string()];
                let m = ServerMount::start_as_is("devwork-passthrough", &args)?;
                t.work = m.root().to_path_buf();
                t.server = Some(Server::Uvfs(m));
            }
            peer => {
                let kind = PeerKind::from_name(peer)
                    .ok_or_else(|| bad(format!("{peer} is not a peer")))?;
                let src = disk.join(kind.binary());
                std::fs::create_dir_all(&src)?;
                // As a user who types no option runs it.
                let o = PeerOptions::peer_defaults();
                let p =
                    PeerMount::start_with(kind, &src, &format!("devwork-{}", kind.binary()), &o)?;
                t.work = p.root().to_path_buf();
                t.server = Some(Server::Peer(p));
            }
        }
        Ok(())
    })();
    if let Err(e) = r {
        t.setup_error = Some(format!("setup failed: {e}"));
    }
    t
}

// ---------------------------------------------------------------------
// Counters and samples

/// A uvfs server's counters a step is measured by.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub requests: u64,
    /// Requests answered with an errno.
    pub errors: u64,
    /// Requests that came through an io_uring queue.
    pub uring: u64,
    /// 1 if the kernel agreed to FUSE over io_uring (a gauge).
    pub uring_on: u64,
    pub by_op: BTreeMap<String, u64>,
}

impl Counters {
    /// From a `uvfs stat --json` report.
    pub fn from_report(v: &Value) -> Option<Counters> {
        let s = ServerSample::from_report(v)?;
        let get = |k: &str| v["counters"].get(k).and_then(Value::as_u64).unwrap_or(0);
        Some(Counters {
            requests: s.requests,
            errors: get("fuse.requests.errors"),
            uring: get("fuse.requests.uring"),
            uring_on: get("fuse.uring"),
            by_op: s.by_op,
        })
    }

    /// What happened from `self` to `after` (`uring_on` as `after` has it).
    pub fn delta(&self, after: &Counters) -> Counters {
        let d = ServerSample {
            requests: self.requests,
            by_op: self.by_op.clone(),
            ..ServerSample::default()
        }
        .delta(&ServerSample {
            requests: after.requests,
            by_op: after.by_op.clone(),
            ..ServerSample::default()
        });
        Counters {
            requests: d.requests,
            errors: after.errors.saturating_sub(self.errors),
            uring: after.uring.saturating_sub(self.uring),
            uring_on: after.uring_on,
            by_op: d.by_op,
        }
    }
}

/// One step of one repeat on one file system.
#[derive(Clone, Debug, Default)]
pub struct StepSample {
    pub secs: Option<f64>,
    pub error: Option<String>,
    /// uvfs servers only.
    pub counters: Option<Counters>,
}

impl StepSample {
    fn failed(e: String) -> StepSample {
        StepSample {
            error: Some(e),
            ..StepSample::default()
        }
    }
}

fn counters(m: Option<&ServerMount>) -> Option<Counters> {
    Counters::from_report(&m?.report().ok()?)
}

/// One repeat of every step on `t`.
fn repeat(t: &Target, job: &steps::Job) -> Vec<StepSample> {
    if let Some(e) = &t.setup_error {
        return vec![StepSample::failed(e.clone()); Step::ALL.len()];
    }
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    let mut out = Vec::with_capacity(Step::ALL.len());
    for step in Step::ALL {
        if out.iter().any(|s: &StepSample| s.error.is_some()) {
            out.push(StepSample::failed(format!(
                "not run: an earlier step failed on {}",
                t.name
            )));
            continue;
        }
        if step == Step::GitStatus {
            std::thread::sleep(STATUS_PAUSE);
        }
        let before = counters(t.uvfs());
        let (r, killed) =
            crate::fusestat::with_watchdog(t.pid(), STEP_LIMIT, || steps::run(step, job, &t.work));
        let after = counters(t.uvfs());
        let mut s = StepSample {
            counters: before.zip(after).map(|(b, a)| b.delta(&a)),
            ..StepSample::default()
        };
        match r {
            _ if killed => {
                s.error = Some(format!(
                    "{} took over {STEP_LIMIT:?}: server killed",
                    step.name()
                ))
            }
            Err(e) => s.error = Some(format!("{}: {e}", step.name())),
            Ok(ran) => match steps::check(step, job, &t.work, &ran) {
                Ok(()) => s.secs = Some(ran.secs),
                Err(e) => s.error = Some(format!("{} on {}: {e}", step.name(), t.name)),
            },
        }
        out.push(s);
    }
    // A failed repeat leaves its tree: the next one starts clean.
    if out.iter().any(|s| s.error.is_some()) {
        let _ = std::fs::remove_dir_all(steps::top(&t.work));
    }
    out
}

/// What the run unpacks, and its description for the rows.
pub struct Workload {
    /// Files, symlinks and directories.
    pub members: usize,
    pub regular_files: usize,
    pub symlinks: usize,
    pub dirs: usize,
    pub bytes: u64,
    pub tarball_bytes: u64,
    pub checksum: String,
    pub inserts: usize,
}

/// Runs the workload: one row per file system, then the ratio rows.
pub fn run(o: &DevworkOpts) -> io::Result<Report> {
    let files = o.files.unwrap_or(if o.quick { 500 } else { 4650 });
    let txns = o.transactions.unwrap_or(if o.quick { 5 } else { 40 });
    let repeats = o.repeats();
    let names = choose_fs(o.fs.as_deref())?;
    steps::check_tools()?;
    if names.iter().any(|n| *n != NATIVE && *n != TMPFS) {
        fuse_mount::check_fuse()?;
    }
    let uring_before = enable_uring();

    let mut prog = Progress::new(1 + names.len() + repeats * names.len());
    prog.step(&format!("devwork: generating a tarball of {files} files"));
    let job_dir = ScratchDir::create(fuse_mount::scratch_path("devwork-job"), true)?;
    let tree = tree::generate(files, SEED);
    let tarball = job_dir.path.join("devwork-src.tar.gz");
    tree::write_tarball(&tree, &tarball)?;
    let expected = manifest::of_tarball(&tarball)?;
    let script = sqlite::script(txns, SEED);
    let sql = job_dir.path.join("devwork.sql");
    std::fs::write(&sql, &script.sql)?;
    let count = |k: manifest::Kind| expected.values().filter(|m| m.kind == k).count();
    let workload = Workload {
        members: expected.len(),
        regular_files: count(manifest::Kind::File),
        symlinks: count(manifest::Kind::Symlink),
        dirs: count(manifest::Kind::Dir),
        bytes: tree.bytes(),
        tarball_bytes: std::fs::metadata(&tarball)?.len(),
        checksum: manifest::checksum(&expected),
        inserts: txns * sqlite::ROWS_PER_TXN,
    };
    let job = steps::Job {
        tarball,
        expected,
        needle_files: tree.needle_files,
        sql,
        sql_expected: script.expected,
    };
    drop(tree);

    std::fs::create_dir_all(&o.native_dir)?;
    // Declared before `targets`, so removed after the mounts serving it.
    let disk = ScratchDir::create(
        o.native_dir
            .join(format!("uvfs-bench-{}-devwork", std::process::id())),
        true,
    )?;
    let mut targets = Targets(Vec::new());
    for &name in &names {
        prog.step(&format!("devwork: {name}: setting up"));
        targets.0.push(setup(name, &disk.path));
    }
    // samples[target][repeat][step]
    let mut samples: Vec<Vec<Vec<StepSample>>> = vec![Vec::new(); targets.0.len()];
    for rep in 0..repeats {
        for k in order(targets.0.len(), rep) {
            let t = &targets.0[k];
            prog.step(&format!(
                "devwork {} (repeat {}/{repeats})",
                t.name,
                rep + 1
            ));
            samples[k].push(repeat(t, &job));
        }
    }
    prog.finish();
    let uring_after = enable_uring();

    let mut report = Report::new("devwork");
    for (k, t) in targets.0.iter().enumerate() {
        let peer_uring = match &t.server {
            Some(Server::Peer(p)) => crate::procstat::io_uring_fds(p.pid()).ok().map(|n| n > 0),
            _ => None,
        };
        report.rows.push(rows::fs_row(
            t.name,
            &samples[k],
            &workload,
            t.uvfs().is_some(),
            peer_uring,
        ));
    }
    rows::add_ratios(&mut report, &names, &samples);
    for r in report.rows.iter_mut() {
        r.insert("enable_uring".into(), serde_json::json!(uring_before));
        if uring_after != uring_before {
            r.insert("enable_uring_after".into(), serde_json::json!(uring_after));
        }
    }
    for mut t in targets.0.drain(..).rev() {
        match t.server.as_mut() {
            Some(Server::Uvfs(m)) => m.shutdown()?,
            Some(Server::Peer(m)) => m.shutdown()?,
            None => {}
        }
    }
    drop(disk);
    drop(job_dir);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fs_choice_and_order() {
        let all = choose_fs(None).unwrap();
        assert_eq!(&all[..4], &[MEMFS, TMPFS, PASSTHROUGH, NATIVE]);
        for k in PeerKind::ALL {
            assert!(all.contains(&k.name()));
        }
        let w = vec![NATIVE.to_string(), MEMFS.to_string()];
        assert_eq!(choose_fs(Some(&w)).unwrap(), vec![MEMFS, NATIVE]);
        assert!(choose_fs(Some(&["ext9".to_string()])).is_err());
        assert_eq!(order(3, 0), vec![0, 1, 2]);
        assert_eq!(order(3, 1), vec![2, 1, 0]);
        assert_eq!(order(3, 2), vec![0, 1, 2]);
    }

    #[test]
    fn counters_from_report_and_delta() {
        let a = Counters::from_report(&json!({"counters": {
            "fuse.requests": 10, "fuse.requests.errors": 1, "fuse.requests.uring": 0,
            "fuse.uring": 0, "fuse.requests.op.lookup": 10,
        }}))
        .unwrap();
        let b = Counters::from_report(&json!({"counters": {
            "fuse.requests": 40, "fuse.requests.errors": 5, "fuse.requests.uring": 30,
            "fuse.uring": 1, "fuse.requests.op.lookup": 20, "fuse.requests.op.create": 20,
        }}))
        .unwrap();
        let d = a.delta(&b);
        assert_eq!((d.requests, d.errors, d.uring, d.uring_on), (30, 4, 30, 1));
        assert_eq!(d.by_op["lookup"], 10);
        assert_eq!(d.by_op["create"], 20);
        assert!(Counters::from_report(&json!({"counters": {}})).is_none());
    }

    #[test]
    fn defaults_follow_quick() {
        let mut o = DevworkOpts {
            json: None,
            svg: None,
            repeats: None,
            quick: false,
            fs: None,
            native_dir: "/var/tmp".into(),
            files: None,
            transactions: None,
        };
        assert_eq!(o.repeats(), 5);
        o.quick = true;
        assert_eq!(o.repeats(), 1);
        o.repeats = Some(3);
        assert_eq!(o.common().repeats, 3);
    }
}
