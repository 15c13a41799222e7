//! `uvfs bench fuse-stat`: parallel `find`-like walks through a real FUSE
//! mount of memfs, against the same walk over tmpfs, so we see what stands
//! between uvfs and the kernel.
//!
//! # Setup
//! A `uvfs mount` server runs in a child process (see `fuse_mount.rs`)
//! with long entry and attribute timeouts (60 s by default, `--timeout`),
//! so a warm walk may be answered from the kernel's caches as tmpfs's is.
//! A private tmpfs is mounted for the run. Both get the same tree (see
//! `walk.rs`: 200,000 files by default, `--files`, 20,000 with `--quick`),
//! one subtree per walker of the widest run. When this binary's `mount`
//! takes `--source DIR`, a passthrough mount of a native tree (under
//! `--native-dir`) and that native tree itself are compared too, and so are
//! the peers (`peers.rs`: libfuse's `passthrough_ll`, fuse-backend-rs's
//! passthrough with fds and with file handles, go-fuse's loopback) serving
//! that same native tree, with the same timeouts.
//!
//! The passthrough also runs as a user who types no option gets it
//! (`uvfs-passthrough-default`: `uvfs mount --source DIR` and nothing
//! else), and with only `--no-watch` (`uvfs-passthrough-nowatch`, where
//! this `uvfs mount` has that flag; without it the row is skipped with a
//! message); their rows come first, before the tuned configurations.
//!
//! # Passes
//! For each repeat and thread count, every file system in turn: a cold
//! pass right after dropping the kernel's dentries and inodes (memfs cannot
//! be remounted to go cold: its data lives in the server; see
//! `fuse_mount.rs`), then a warm pass. For uvfs mounts the server's
//! counters are read before and after each pass (`uvfs stat --json`):
//! requests per stat, by opcode, and server CPU per request. For every
//! server process (uvfs or peer) a thread polls `/proc/PID` during the walk
//! (`procstat.rs`): peak open fds and peak RSS.
//!
//! # Failures are results
//! The peers keep one fd per inode the kernel holds, so under this
//! machine's fd limit they run out (EMFILE) part way through a large tree.
//! A walk that fails, or sees fewer entries than the tree has, becomes a
//! row with `ok: false`, how many entries it got through (`seen`) and the
//! error; so does a peer that cannot be built or started. The benchmark
//! goes on. A pass that runs past [`PASS_LIMIT`] (a hung server) has its
//! server killed, which fails the walk.
//!
//! # Modules
//! `targets.rs` sets up what is compared, `pass.rs` walks and measures,
//! `rows.rs` turns passes into rows, `summary.rs` prints and draws them.

use crate::fuse_mount::{self, ServerMount};
use crate::peers::PeerKind;
use crate::report::{Progress, Report};
use crate::walk::TreeShape;
use crate::CommonOpts;
use pass::{pass, PassSample};
use rows::{add_ratios, make_row, server_fields, RowKey};
use serde_json::json;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::time::Duration;
use targets::{bad, build_target, choose_fs, MountFlags, Targets};

mod pass;
mod rows;
mod summary;
mod targets;
#[cfg(test)]
mod tests;

pub use pass::with_watchdog;
pub use summary::{chart, summary, COLUMNS};

const MEMFS: &str = "uvfs-memfs";
/// The same server with requests read from /dev/fuse (`--transport dev`),
/// beside the default (io_uring where the kernel offers it).
const MEMFS_DEV: &str = "uvfs-memfs-dev";
/// memfs without directory attribute refresh (`--no-dir-refresh`).
const MEMFS_NOREF: &str = "uvfs-memfs-norefresh";
const TMPFS: &str = "tmpfs";
const PASSTHROUGH: &str = "uvfs-passthrough";
/// The passthrough with default options: `--source` alone.
const PASSTHROUGH_DEFAULT: &str = "uvfs-passthrough-default";
/// Default options but `--no-watch` (no host-change watcher).
const PASSTHROUGH_NOWATCH: &str = "uvfs-passthrough-nowatch";
/// Default options but `--no-supervisor`: beside
/// `uvfs-passthrough-default`, what crash recovery costs a default mount.
const PASSTHROUGH_DEFAULT_NOSUP: &str = "uvfs-passthrough-default-unsupervised";
const PASSTHROUGH_DEV: &str = "uvfs-passthrough-dev";
/// `--transport dev` without its crash supervisor (`--no-supervisor`):
/// beside `uvfs-passthrough-dev`, what keeping the crash journal costs.
const PASSTHROUGH_DEV_NOSUP: &str = "uvfs-passthrough-dev-unsupervised";
/// The passthrough without directory readahead (`--no-dir-readahead`).
const PASSTHROUGH_NORA: &str = "uvfs-passthrough-noreadahead";
/// The passthrough without directory attribute refresh.
const PASSTHROUGH_NOREF: &str = "uvfs-passthrough-norefresh";
/// The passthrough servers, as `--fs` names them.
const PASSTHROUGHS: [&str; 8] = [
    PASSTHROUGH_DEFAULT,
    PASSTHROUGH_NOWATCH,
    PASSTHROUGH_DEFAULT_NOSUP,
    PASSTHROUGH,
    PASSTHROUGH_DEV,
    PASSTHROUGH_DEV_NOSUP,
    PASSTHROUGH_NORA,
    PASSTHROUGH_NOREF,
];
const NATIVE: &str = "native";
const LIBFUSE: &str = PeerKind::LibfusePassthroughLl.name();
const FBR: &str = PeerKind::FuseBackendRs.name();
const FBR_FH: &str = PeerKind::FuseBackendRsFh.name();
const GOFUSE: &str = PeerKind::GoFuseLoopback.name();
/// The peers, as `--fs` names them.
const PEERS: [&str; 4] = [LIBFUSE, FBR, FBR_FH, GOFUSE];

/// Longest a pass may take before its server is taken for hung and killed
/// (a 200,000-file cold walk takes seconds).
pub const PASS_LIMIT: Duration = Duration::from_secs(300);

#[derive(clap::Args, Debug, Clone)]
pub struct FuseStatOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Walker thread counts (each walker walks its own subtrees).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2], value_parser = crate::at_least_one())]
    pub threads: Vec<usize>,
    /// Files in the tree (default 200,000; 20,000 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub files: Option<usize>,
    /// Files per leaf directory.
    #[arg(long, default_value_t = 100, value_parser = crate::at_least_one())]
    pub per_dir: usize,
    /// File systems to walk (default: uvfs-memfs,uvfs-memfs-dev,tmpfs, plus
    /// native,uvfs-passthrough-default,uvfs-passthrough-nowatch,
    /// uvfs-passthrough and the peers libfuse-passthrough_ll,
    /// fuse-backend-rs,fuse-backend-rs-fh,go-fuse-loopback when `uvfs mount
    /// --source` exists; also uvfs-passthrough-dev and
    /// uvfs-passthrough-noreadahead; uvfs-memfs-norefresh and
    /// uvfs-passthrough-norefresh). uvfs-passthrough-default is mounted
    /// with no option but --source (the --timeout here does not apply),
    /// uvfs-passthrough-nowatch the same with --no-watch; every other uvfs
    /// mount and peer gets --timeout. The uvfs-*-dev servers read requests
    /// from /dev/fuse; the others take them through io_uring where the
    /// kernel can (the run turns the `fuse` module's enable_uring on while
    /// it mounts them, if it may). uvfs-passthrough-noreadahead is the
    /// passthrough with `--no-dir-readahead`, the *-norefresh servers run
    /// with `--no-dir-refresh`.
    #[arg(long, value_delimiter = ',')]
    pub fs: Option<Vec<String>>,
    /// Entry and attribute timeouts of the uvfs mounts and the peers, in
    /// seconds (not of uvfs-passthrough-default and -nowatch).
    #[arg(long, default_value_t = 60.0, value_parser = crate::non_negative_secs)]
    pub timeout: f64,
    /// Request loops of the uvfs servers and fuse-backend-rs, libfuse's
    /// max_threads (default: each server's own).
    #[arg(long, value_parser = crate::at_least_one())]
    pub server_threads: Option<usize>,
    /// Where the native tree (the passthrough source) is built.
    #[arg(long, default_value = "/tmp")]
    pub native_dir: PathBuf,
}

/// Runs the workload: one row per (file system, threads, pass).
pub fn run(o: &FuseStatOpts) -> io::Result<Report> {
    let files = o
        .files
        .unwrap_or(if o.common.quick { 20_000 } else { 200_000 });
    let threads: Vec<usize> = o.threads.iter().map(|&t| t.max(1)).collect();
    if threads.is_empty() {
        return Err(bad("--threads is empty".into()));
    }
    let shape = TreeShape {
        files,
        subtrees: threads.iter().copied().max().unwrap_or(1),
        per_dir: o.per_dir.max(1),
        fanout: 32,
    };
    let repeats = if o.common.quick {
        1
    } else {
        o.common.repeats.max(1)
    };
    let mount = MountFlags {
        source: fuse_mount::mount_supports("--source"),
        no_watch: fuse_mount::mount_supports("--no-watch"),
    };
    let (names, skipped) = choose_fs(o, mount)?;
    for m in &skipped {
        eprintln!("uvfs bench fuse-stat: {m}");
    }
    if names
        .iter()
        .any(|n| n.starts_with("uvfs") || PEERS.contains(n))
    {
        fuse_mount::check_fuse()?;
    }
    // Fail early (before building trees) if cold passes are impossible.
    fuse_mount::drop_kernel_caches()?;

    let mut prog = Progress::new(names.len() + repeats * threads.len() * names.len() * 2);
    let mut targets = Targets(Vec::new());
    for &name in &names {
        prog.step(&if PEERS.contains(&name) {
            format!("fuse-stat: {name}: building (if needed) and mounting")
        } else {
            format!("fuse-stat: {name}: building {files} files")
        });
        let native_root = targets
            .0
            .iter()
            .find(|t| t.name == NATIVE)
            .map(|t| t.root.clone());
        targets
            .0
            .push(build_target(name, o, &shape, native_root.as_deref())?);
    }
    let mut samples: BTreeMap<(usize, usize, bool), Vec<PassSample>> = BTreeMap::new();
    for rep in 0..repeats {
        for &t in &threads {
            // Alternate file systems within each repeat so drift in the
            // machine's load hits them alike.
            for (k, target) in targets.0.iter().enumerate() {
                for cold in [true, false] {
                    prog.step(&format!(
                        "fuse-stat {} T={t} {} (repeat {}/{repeats})",
                        target.name,
                        if cold { "cold" } else { "warm" },
                        rep + 1
                    ));
                    if target.setup_error.is_some() {
                        continue;
                    }
                    let s = pass(target, &shape, t, cold)?;
                    samples.entry((k, t, cold)).or_default().push(s);
                }
            }
        }
    }
    prog.finish();

    let mut report = Report::new("fuse-stat");
    for &t in &threads {
        for cold in [true, false] {
            for (k, target) in targets.0.iter().enumerate() {
                let ss = samples.get(&(k, t, cold)).map_or(&[][..], Vec::as_slice);
                if ss.is_empty() && target.setup_error.is_none() {
                    continue;
                }
                let key = RowKey {
                    fs: target.name,
                    threads: t,
                    cold,
                    files,
                    entries: shape.entries(),
                    repeats,
                    build_secs: target.build_secs,
                    served: target.served(),
                    fd_limit: target.fd_limit,
                    fd_budget: target.fd_budget,
                };
                let mut r = make_row(&key, target.setup_error.as_deref(), ss);
                if let Some(opts) = options_of(target.name) {
                    r.insert("options".into(), json!(opts));
                } else if target.served() {
                    r.insert("entry_timeout".into(), json!(o.timeout));
                    r.insert("attr_timeout".into(), json!(o.timeout));
                    r.insert("options".into(), json!(format!("timeout={}", o.timeout)));
                }
                if let Some(m) = &target.server {
                    r.insert("transport".into(), json!(transport_of(m)));
                }
                if target.server.is_some() {
                    let done: Vec<PassSample> =
                        ss.iter().filter(|s| s.error.is_none()).cloned().collect();
                    if let Some(f) = server_fields(&done) {
                        r.extend(f);
                    }
                }
                report.rows.push(r);
            }
        }
    }
    add_ratios(&mut report);
    // Tear down now, so a failure to unmount is reported with the run (a
    // uvfs server's fails the run; a peer's is printed).
    for mut t in targets.0.drain(..).rev() {
        if let Some(s) = t.server.as_mut() {
            s.shutdown()?;
        }
        if let Some(p) = t.peer.as_mut() {
            if let Err(e) = p.shutdown() {
                eprintln!("uvfs bench fuse-stat: {e}");
            }
        }
    }
    Ok(report)
}

/// The options of the rows mounted as a user would, with no timeouts.
fn options_of(name: &str) -> Option<&'static str> {
    match name {
        PASSTHROUGH_DEFAULT => Some("default"),
        PASSTHROUGH_NOWATCH => Some("no-watch"),
        PASSTHROUGH_DEFAULT_NOSUP => Some("no-supervisor"),
        _ => None,
    }
}

/// How a uvfs server took its requests: "uring" (FUSE over io_uring) or
/// "dev" (/dev/fuse), from its statistics.
fn transport_of(m: &ServerMount) -> &'static str {
    let on = m
        .report()
        .ok()
        .and_then(|v| v.pointer("/counters/fuse.uring")?.as_u64());
    if on == Some(1) {
        "uring"
    } else {
        "dev"
    }
}
