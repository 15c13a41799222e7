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

use crate::fuse_mount::{self, ScratchDir, ServerMount, ServerSample, Tmpfs};
use crate::peers::{PeerKind, PeerMount, PeerOptions};
use crate::procstat::{self, Peaks, Sampler};
use crate::report::{median, push_bar, BarGroup, Progress, Report, Row};
use crate::walk::{self, TreeShape};
use crate::{row, CommonOpts};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
const PASSTHROUGH_DEV: &str = "uvfs-passthrough-dev";
/// The passthrough without directory readahead (`--no-dir-readahead`).
const PASSTHROUGH_NORA: &str = "uvfs-passthrough-noreadahead";
/// The passthrough without directory attribute refresh.
const PASSTHROUGH_NOREF: &str = "uvfs-passthrough-norefresh";
/// The passthrough servers, as `--fs` names them.
const PASSTHROUGHS: [&str; 6] = [
    PASSTHROUGH_DEFAULT,
    PASSTHROUGH_NOWATCH,
    PASSTHROUGH,
    PASSTHROUGH_DEV,
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

/// One file system under test: where its tree is, and its server if any.
struct Target {
    name: &'static str,
    root: PathBuf,
    server: Option<ServerMount>,
    peer: Option<PeerMount>,
    /// Why it could not be set up (a peer that failed to build or start):
    /// its rows say so instead of measuring.
    setup_error: Option<String>,
    /// The server's soft fd limit.
    fd_limit: Option<u64>,
    /// uvfs passthrough's fd pool budget (`passthrough.fds.budget`): the
    /// process holds a few more (stdio, /dev/fuse clones, its socket).
    fd_budget: Option<u64>,
    _tmpfs: Option<Tmpfs>,
    _dir: Option<ScratchDir>,
    build_secs: f64,
}

impl Target {
    /// The pid of the process serving it, if one does.
    fn pid(&self) -> Option<u32> {
        match (&self.server, &self.peer) {
            (Some(s), _) => s.pid(),
            (_, Some(p)) => Some(p.pid()),
            _ => None,
        }
    }

    /// Whether a server process stands behind it (or was meant to).
    fn served(&self) -> bool {
        self.name.starts_with("uvfs") || PEERS.contains(&self.name)
    }
}

/// Targets torn down in reverse order (a passthrough mount before the
/// native tree it serves).
struct Targets(Vec<Target>);

impl Drop for Targets {
    fn drop(&mut self) {
        while let Some(t) = self.0.pop() {
            drop(t);
        }
    }
}

/// What one pass measured.
#[derive(Clone, Debug, Default)]
struct PassSample {
    /// Until every walker stopped (finished or failed).
    secs: f64,
    /// Entries the walkers statted.
    entries: u64,
    /// Why the walk failed (an error, or fewer entries than the tree has).
    error: Option<String>,
    server: Option<ServerSample>,
    /// Nodes the kernel held when the walk began (`fuse.nodes`: about 1,
    /// the root, when a cold pass is cold).
    nodes_at_start: Option<u64>,
    /// The server process's peaks during the walk.
    peaks: Option<Peaks>,
    /// CPU time of the server process during the walk (from /proc, so the
    /// same for uvfs and the peers).
    server_cpu_secs: Option<f64>,
    /// CPU time of the walkers (this process: their system calls include
    /// the kernel's side of FUSE, or the native file system's work).
    walker_cpu_secs: f64,
}

fn server_args(
    o: &FuseStatOpts,
    shape: &TreeShape,
    source: Option<&Path>,
    name: &str,
) -> Vec<String> {
    // What a user types: the source, and the flag that names the row.
    if name == PASSTHROUGH_DEFAULT || name == PASSTHROUGH_NOWATCH {
        let mut a: Vec<String> = source
            .map(|s| vec!["--source".into(), s.display().to_string()])
            .unwrap_or_default();
        if name == PASSTHROUGH_NOWATCH {
            a.push("--no-watch".into());
        }
        return a;
    }
    let t = o.timeout.to_string();
    let mut a = vec![
        "--entry-timeout".into(),
        t.clone(),
        "--attr-timeout".into(),
        t,
        // Every node stays held by the kernel: keep the (soft) vnode limit
        // above the tree so the server never recycles during a walk.
        "--vnodes".into(),
        (shape.entries() * 2 + 1024).max(262_144).to_string(),
    ];
    if let Some(n) = o.server_threads {
        a.extend(["--threads".into(), n.to_string()]);
    }
    if let Some(s) = source {
        a.extend(["--source".into(), s.display().to_string()]);
    }
    if name == MEMFS_DEV || name == PASSTHROUGH_DEV {
        a.extend(["--transport".into(), "dev".into()]);
    }
    if name == PASSTHROUGH_NORA {
        a.push("--no-dir-readahead".into());
    }
    if name == MEMFS_NOREF || name == PASSTHROUGH_NOREF {
        a.push("--no-dir-refresh".into());
    }
    a
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// What this build's `uvfs mount` takes (from its `--help`).
#[derive(Clone, Copy, Debug)]
struct MountFlags {
    /// `--source DIR`: the passthrough.
    source: bool,
    /// `--no-watch`: the passthrough without its host-change watcher.
    no_watch: bool,
}

/// The file systems to run, checked, in setup order, and messages about
/// those skipped.
fn choose_fs(o: &FuseStatOpts, mount: MountFlags) -> io::Result<(Vec<&'static str>, Vec<String>)> {
    let passthrough = mount.source;
    let all = [
        MEMFS,
        MEMFS_DEV,
        MEMFS_NOREF,
        TMPFS,
        NATIVE,
        PASSTHROUGH_DEFAULT,
        PASSTHROUGH_NOWATCH,
        PASSTHROUGH,
        PASSTHROUGH_DEV,
        PASSTHROUGH_NORA,
        PASSTHROUGH_NOREF,
        LIBFUSE,
        FBR,
        FBR_FH,
        GOFUSE,
    ];
    let wanted: Vec<String> = match &o.fs {
        Some(v) => v.clone(),
        None if passthrough => all
            .iter()
            .filter(|&&a| {
                ![
                    PASSTHROUGH_DEV,
                    PASSTHROUGH_NORA,
                    PASSTHROUGH_NOREF,
                    MEMFS_NOREF,
                ]
                .contains(&a)
            })
            .map(|s| s.to_string())
            .collect(),
        None => vec![MEMFS.into(), MEMFS_DEV.into(), TMPFS.into()],
    };
    for w in &wanted {
        if !all.contains(&w.as_str()) {
            return Err(bad(format!("unknown --fs {w:?} ({})", all.join(", "))));
        }
    }
    if wanted.iter().any(|w| PASSTHROUGHS.contains(&w.as_str())) && !passthrough {
        return Err(bad(
            "uvfs-passthrough needs `uvfs mount --source DIR`, which this build lacks".into(),
        ));
    }
    let mut skipped = Vec::new();
    let mut wanted = wanted;
    if !mount.no_watch && wanted.iter().any(|w| w == PASSTHROUGH_NOWATCH) {
        wanted.retain(|w| w != PASSTHROUGH_NOWATCH);
        skipped.push(format!(
            "{PASSTHROUGH_NOWATCH}: skipped: this `uvfs mount` has no --no-watch"
        ));
    }
    // The passthrough mount and the peers serve the native tree, so they
    // need it built.
    let native = wanted
        .iter()
        .any(|w| w == NATIVE || PASSTHROUGHS.contains(&w.as_str()) || PEERS.contains(&w.as_str()));
    let names = all
        .into_iter()
        .filter(|a| (*a == NATIVE && native) || wanted.iter().any(|w| w == a))
        .collect();
    Ok((names, skipped))
}

fn build_target(
    name: &'static str,
    o: &FuseStatOpts,
    shape: &TreeShape,
    native_root: Option<&Path>,
) -> io::Result<Target> {
    let mut t = Target {
        name,
        root: PathBuf::new(),
        server: None,
        peer: None,
        setup_error: None,
        fd_limit: None,
        fd_budget: None,
        _tmpfs: None,
        _dir: None,
        build_secs: 0.0,
    };
    match name {
        MEMFS | MEMFS_DEV | MEMFS_NOREF => {
            let tag = name.trim_start_matches("uvfs-");
            let m = ServerMount::start(tag, &server_args(o, shape, None, name))?;
            t.root = m.root().to_path_buf();
            t.fd_limit = m.pid().and_then(|p| procstat::fd_limit(p).ok().flatten());
            t.server = Some(m);
        }
        TMPFS => {
            let m = Tmpfs::start("tmpfs")?;
            t.root = m.root.clone();
            t._tmpfs = Some(m);
        }
        NATIVE => {
            let dir = o
                .native_dir
                .join(format!("uvfs-bench-{}-native", std::process::id()));
            let d = ScratchDir::create(dir, true)?;
            t.root = d.path.clone();
            t._dir = Some(d);
        }
        PASSTHROUGH_DEFAULT | PASSTHROUGH_NOWATCH | PASSTHROUGH | PASSTHROUGH_DEV
        | PASSTHROUGH_NORA | PASSTHROUGH_NOREF => {
            let src = native_root.ok_or_else(|| bad("passthrough without a native tree".into()))?;
            let tag = name.trim_start_matches("uvfs-");
            let m = ServerMount::start(tag, &server_args(o, shape, Some(src), name))?;
            t.root = m.root().to_path_buf();
            t.fd_limit = m.pid().and_then(|p| procstat::fd_limit(p).ok().flatten());
            t.fd_budget = m
                .report()
                .ok()
                .and_then(|v| v.pointer("/counters/passthrough.fds.budget")?.as_u64());
            t.server = Some(m);
            // The tree is the native one, already built.
            return Ok(t);
        }
        LIBFUSE | FBR | FBR_FH | GOFUSE => {
            let src = native_root.ok_or_else(|| bad(format!("{name} without a native tree")))?;
            let kind = PeerKind::from_name(name).expect("a peer's name");
            let opts = PeerOptions {
                timeout_secs: Some(o.timeout),
                threads: o.server_threads,
            };
            // A peer that cannot be had is a result (rows with the reason),
            // not the end of the run.
            match PeerMount::start_with(kind, src, kind.binary(), &opts) {
                Ok(p) => {
                    t.root = p.root().to_path_buf();
                    t.fd_limit = procstat::fd_limit(p.pid()).ok().flatten();
                    t.peer = Some(p);
                }
                Err(e) => t.setup_error = Some(e.to_string()),
            }
            return Ok(t);
        }
        _ => unreachable!("checked by choose_fs"),
    }
    let start = Instant::now();
    walk::build(&t.root, shape)?;
    t.build_secs = start.elapsed().as_secs_f64();
    Ok(t)
}

/// What a walk of every subtree by `threads` walkers came to.
#[derive(Debug)]
struct WalkOutcome {
    /// Until the last walker stopped.
    secs: f64,
    /// Entries statted, by all walkers together.
    seen: u64,
    /// The first error a walker met (each stops at its first).
    error: Option<io::Error>,
}

/// One walk of every subtree by `threads` walkers.
fn walk_all(root: &Path, shape: &TreeShape, threads: usize) -> WalkOutcome {
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|w| {
                let barrier = &barrier;
                sc.spawn(move || {
                    barrier.wait();
                    let mut n = 0;
                    for s in shape.subtrees_of(w, threads) {
                        if let Err(e) = walk::walk_counting(&root.join(format!("t{s}")), &mut n) {
                            return (n, Some(e));
                        }
                    }
                    (n, None)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut out = WalkOutcome {
            secs: 0.0,
            seen: 0,
            error: None,
        };
        for h in hs {
            let (n, e) = h
                .join()
                .unwrap_or_else(|_| (0, Some(io::Error::other("walker panicked"))));
            out.seen += n;
            if out.error.is_none() {
                out.error = e;
            }
        }
        out.secs = start.elapsed().as_secs_f64();
        out
    })
}

/// Runs `f`; if it has not returned within `limit`, kills `pid` (so a walk
/// blocked on a hung server fails instead of hanging the benchmark).
/// Returns `f`'s result and whether the server was killed.
pub fn with_watchdog<R>(pid: Option<u32>, limit: Duration, f: impl FnOnce() -> R) -> (R, bool) {
    let Some(pid) = pid else {
        return (f(), false);
    };
    let (done, wait) = mpsc::channel::<()>();
    std::thread::scope(|sc| {
        let dog = sc.spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                // SAFETY: kill(2) with a valid signal and the pid of a child
                // of ours that is not reaped before the pass ends (its
                // ServerMount or PeerMount is borrowed by the pass), so the
                // pid cannot have been reused.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return true;
            }
            false
        });
        let r = f();
        drop(done);
        (r, dog.join().unwrap_or(false))
    })
}

/// After a cache drop the kernel FORGETs the nodes a peer held and the peer
/// closes their fds, asynchronously: waits until its fd count has not
/// changed for 100 ms (at most 10 s), so a cold pass starts with those fds
/// given back (what `ServerMount::settle` does for uvfs with its counters).
fn settle_fds(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut prev = procstat::fd_count(pid).ok();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = procstat::fd_count(pid).ok();
        if now == prev {
            return;
        }
        prev = now;
    }
}

/// One pass over one target: (cold: drop caches first), walk, counters.
fn pass(t: &Target, shape: &TreeShape, threads: usize, cold: bool) -> io::Result<PassSample> {
    if cold {
        fuse_mount::drop_kernel_caches()?;
    }
    let before = match &t.server {
        Some(s) if cold => Some(s.settle()?),
        Some(s) => Some(s.sample()?),
        None => None,
    };
    if let (Some(p), true) = (&t.peer, cold) {
        settle_fds(p.pid());
    }
    let nodes_at_start = before.as_ref().map(|b| b.nodes);
    let sampler = t
        .pid()
        .map(|pid| Sampler::start(pid, procstat::DEFAULT_PERIOD));
    let server_cpu = || {
        t.pid()
            .and_then(|p| fuse_mount::process_cpu_secs_fine(p).ok())
    };
    let (scpu0, wcpu0) = (server_cpu(), crate::cputime::process_cpu());
    let (w, killed) = with_watchdog(t.pid(), PASS_LIMIT, || walk_all(&t.root, shape, threads));
    let walker_cpu_secs = crate::cputime::process_cpu()
        .saturating_sub(wcpu0)
        .as_secs_f64();
    let server_cpu_secs = scpu0.zip(server_cpu()).map(|(a, b)| (b - a).max(0.0));
    let peaks = sampler.map(Sampler::stop);
    let mut error = w.error.map(|e| e.to_string());
    if killed {
        error = Some(format!(
            "the pass took over {PASS_LIMIT:?}: server killed ({})",
            error.as_deref().unwrap_or("the walk then ended")
        ));
    }
    if error.is_none() && w.seen != shape.entries() {
        error = Some(format!(
            "the walk saw {} entries, the tree has {}",
            w.seen,
            shape.entries()
        ));
    }
    // A failed pass may have left the server dead: its counters are then
    // optional, not a reason to stop.
    let server = match (&t.server, before) {
        (Some(s), Some(b)) if error.is_none() => Some(b.delta(&s.sample()?)),
        (Some(s), Some(b)) => s.sample().ok().map(|a| b.delta(&a)),
        _ => None,
    };
    Ok(PassSample {
        secs: w.secs,
        entries: w.seen,
        error,
        server,
        nodes_at_start,
        peaks,
        server_cpu_secs,
        walker_cpu_secs,
    })
}

/// Per-stat and per-request server figures of a pass (medians over
/// repeats): requests/stat, CPU us/request, CPU us/stat, requests/stat by
/// opcode.
fn server_fields(samples: &[PassSample]) -> Option<Row> {
    // The median of `f` over the passes that have server counters.
    let col = |f: &dyn Fn(&ServerSample, f64) -> Option<f64>| {
        let v: Vec<f64> = samples
            .iter()
            .filter_map(|p| f(p.server.as_ref()?, p.entries.max(1) as f64))
            .collect();
        (!v.is_empty()).then(|| median(&v))
    };
    let requests_per_stat = col(&|s, stats| Some(s.requests as f64 / stats))?;
    let ops: std::collections::BTreeSet<&String> = samples
        .iter()
        .filter_map(|p| p.server.as_ref())
        .flat_map(|s| s.by_op.keys())
        .collect();
    let by_op: serde_json::Map<String, Value> = ops
        .into_iter()
        .map(|k| {
            let v = col(&|s, stats| Some(*s.by_op.get(k).unwrap_or(&0) as f64 / stats));
            (k.clone(), json!(v))
        })
        .collect();
    let nodes: Vec<f64> = samples
        .iter()
        .filter_map(|p| p.nodes_at_start.map(|f| f as f64))
        .collect();
    Some(row!(
        "nodes_at_start" => (!nodes.is_empty()).then(|| median(&nodes)),
        "requests_per_stat" => requests_per_stat,
        "cpu_us_per_request" => col(&|s, _| {
            (s.requests > 0).then(|| s.cpu_secs * 1e6 / s.requests as f64)
        }),
        "cpu_us_per_stat" => col(&|s, stats| Some(s.cpu_secs * 1e6 / stats)),
        "requests_per_stat_by_op" => by_op,
    ))
}

/// `vs_tmpfs` on every completed row (same pass and threads) and
/// `vs_native` on the rows of servers of the native tree (passthrough and
/// peers).
fn add_ratios(report: &mut Report) {
    let rows = report.rows.clone();
    let get = |fs: &str, pass: &Value, t: &Value| {
        rows.iter()
            .find(|r| r["fs"] == fs && &r["pass"] == pass && &r["threads"] == t)
            .and_then(|r| num(r, "stats_per_sec"))
    };
    for r in &mut report.rows {
        // A failed row has no rate to compare.
        let Some(v) = num(r, "stats_per_sec") else {
            continue;
        };
        let (p, t) = (r["pass"].clone(), r["threads"].clone());
        if let Some(b) = get(TMPFS, &p, &t) {
            r.insert("vs_tmpfs".into(), json!(v / b));
        }
        let fs = r["fs"].as_str().unwrap_or("");
        if PASSTHROUGHS.contains(&fs) || PEERS.contains(&fs) {
            if let Some(b) = get(NATIVE, &p, &t) {
                r.insert("vs_native".into(), json!(v / b));
            }
        }
    }
}

/// What a row describes, besides its passes.
struct RowKey<'a> {
    fs: &'a str,
    threads: usize,
    cold: bool,
    files: usize,
    /// Entries in the tree: what a complete walk stats.
    entries: u64,
    repeats: usize,
    build_secs: f64,
    /// Served by a process, whose fds and RSS are measured (else null).
    served: bool,
    fd_limit: Option<u64>,
    fd_budget: Option<u64>,
}

/// One row: medians over the repeats when every pass completed; else a
/// failed row (`ok: false`) with how far the failed passes got (`seen`,
/// their median), the first error, and no rate. `setup_error`: the target
/// never ran (a peer that could not be built or started).
fn make_row(k: &RowKey, setup_error: Option<&str>, ss: &[PassSample]) -> Row {
    let mut r = row!(
        "fs" => k.fs,
        "pass" => if k.cold { "cold" } else { "warm" },
        "threads" => k.threads,
        "files" => k.files,
        "entries" => k.entries,
        "repeats" => k.repeats,
        "build_secs" => k.build_secs,
    );
    let failed: Vec<&PassSample> = ss.iter().filter(|s| s.error.is_some()).collect();
    let ok = setup_error.is_none() && !ss.is_empty() && failed.is_empty();
    let secs_of = |v: &[&PassSample]| {
        (!v.is_empty()).then(|| median(&v.iter().map(|s| s.secs).collect::<Vec<_>>()))
    };
    let (seen, secs, error) = if let Some(e) = setup_error {
        (0, None, Some(e.to_string()))
    } else if ok {
        (k.entries, secs_of(&ss.iter().collect::<Vec<_>>()), None)
    } else {
        let seen = median(&failed.iter().map(|s| s.entries as f64).collect::<Vec<_>>());
        let error = failed.iter().find_map(|s| s.error.clone());
        (seen.round() as u64, secs_of(&failed), error)
    };
    let peaks = ss
        .iter()
        .filter_map(|s| s.peaks)
        .filter(|p| p.samples > 0)
        .reduce(|mut a, b| {
            a.merge(b);
            a
        });
    let served = |f: fn(&Peaks) -> u64| k.served.then(|| peaks.as_ref().map(f)).flatten();
    // Per stat, medians over the passes that completed.
    let per_stat = |f: fn(&PassSample) -> Option<f64>| {
        let v: Vec<f64> = ss
            .iter()
            .filter(|s| s.error.is_none() && s.entries > 0)
            .filter_map(|s| Some(f(s)? * 1e6 / s.entries as f64))
            .collect();
        (!v.is_empty()).then(|| (median(&v) * 100.0).round() / 100.0)
    };
    r.extend(row!(
        "ok" => ok,
        "seen" => seen,
        "secs" => secs,
        "stats_per_sec" => if ok { secs.map(|s| k.entries as f64 / s) } else { None },
        "max_fds" => served(|p| p.max_fds),
        "rss_bytes" => served(|p| p.max_rss_bytes),
        "rss_hwm_bytes" => served(|p| p.hwm_bytes),
        "fd_limit" => if k.served { k.fd_limit } else { None },
        "fd_budget" => k.fd_budget,
        "server_cpu_us_per_stat" => per_stat(|s| s.server_cpu_secs),
        "walker_cpu_us_per_stat" => per_stat(|s| Some(s.walker_cpu_secs)),
        "error" => error,
    ));
    if !ok && setup_error.is_none() {
        r.insert("failed_repeats".into(), json!(failed.len()));
    }
    r
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

/// Table columns for `emit`.
pub const COLUMNS: &[&str] = &[
    "fs",
    "options",
    "transport",
    "pass",
    "threads",
    "entries",
    "ok",
    "seen",
    "secs",
    "stats_per_sec",
    "vs_tmpfs",
    "vs_native",
    "max_fds",
    "rss_bytes",
    "requests_per_stat",
    "cpu_us_per_request",
    "cpu_us_per_stat",
    "server_cpu_us_per_stat",
    "walker_cpu_us_per_stat",
    "nodes_at_start",
];

fn fmt_ops(r: &Row) -> String {
    let Some(m) = r.get("requests_per_stat_by_op").and_then(Value::as_object) else {
        return String::new();
    };
    let mut v: Vec<(&String, f64)> = m
        .iter()
        .map(|(k, x)| (k, x.as_f64().unwrap_or(0.0)))
        .filter(|x| x.1 > 0.0)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    let parts: Vec<String> = v.iter().map(|(k, x)| format!("{k} {x:.3}")).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" [per stat: {}]", parts.join(", "))
    }
}

/// Target ratios and what the server did, as printable lines.
pub fn summary(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let verdict = |x: f64, min: f64| if x >= min { "met" } else { "NOT met" };
    if let Some(x) = r.rows.iter().find_map(|x| num(x, "entry_timeout")) {
        let peers = if r.rows.iter().any(is_peer) {
            " (peers: the same timeouts)"
        } else {
            ""
        };
        out.push(format!(
            "uvfs mounts: --entry-timeout {x} --attr-timeout {x}{peers} (kernel may cache names and attributes {x} s){}",
            if r.rows.iter().any(|x| options_of(x["fs"].as_str().unwrap_or("")).is_some()) {
                "; uvfs-passthrough-default/-nowatch: no timeout given"
            } else {
                ""
            }
        ));
    }
    out.extend(default_lines(r));
    let rows = |fs: &str, pass: &str| -> Vec<&Row> {
        r.rows
            .iter()
            .filter(|x| x["fs"] == fs && x["pass"] == pass)
            .collect()
    };
    for x in rows(MEMFS, "warm") {
        if let Some(v) = num(x, "vs_tmpfs") {
            out.push(format!(
                "warm T={}: uvfs-memfs/tmpfs = {v:.2}x (target >= 0.8: {}); {:.2} requests/stat",
                x["threads"],
                verdict(v, 0.8),
                num(x, "requests_per_stat").unwrap_or(f64::NAN),
            ));
        }
    }
    // The same server, requests through io_uring against /dev/fuse, and
    // the passthrough with directory readahead against without.
    for (a, b) in [
        (MEMFS, MEMFS_DEV),
        (MEMFS, MEMFS_NOREF),
        (PASSTHROUGH, PASSTHROUGH_DEV),
        (PASSTHROUGH, PASSTHROUGH_NORA),
        (PASSTHROUGH, PASSTHROUGH_NOREF),
    ] {
        for pass in ["cold", "warm"] {
            for x in rows(a, pass) {
                let Some(y) = rows(b, pass)
                    .into_iter()
                    .find(|y| y["threads"] == x["threads"])
                else {
                    continue;
                };
                if let (Some(u), Some(d)) = (num(x, "stats_per_sec"), num(y, "stats_per_sec")) {
                    out.push(format!(
                        "{pass} T={}: {a} ({}) / {b} = {:.2}x",
                        x["threads"],
                        x["transport"].as_str().unwrap_or("?"),
                        u / d
                    ));
                }
            }
        }
    }
    for fs in [MEMFS, PASSTHROUGH] {
        for x in rows(fs, "cold") {
            let vs = if fs == PASSTHROUGH {
                num(x, "vs_native").map(|v| format!("{fs}/native = {v:.2}x"))
            } else {
                num(x, "vs_tmpfs").map(|v| format!("{fs}/tmpfs = {v:.2}x"))
            };
            let Some(vs) = vs else { continue };
            out.push(format!(
                "cold T={}: {vs}; {:.3} requests/stat, server CPU {:.1} us/request, {:.2} us/stat{}",
                x["threads"],
                num(x, "requests_per_stat").unwrap_or(f64::NAN),
                num(x, "cpu_us_per_request").unwrap_or(f64::NAN),
                num(x, "cpu_us_per_stat").unwrap_or(f64::NAN),
                fmt_ops(x),
            ));
        }
    }
    for x in rows(PASSTHROUGH, "cold") {
        out.push(vs_best_peer(r, x, 1.2));
    }
    for x in rows(PASSTHROUGH_NOWATCH, "warm") {
        out.push(vs_best_peer(r, x, 1.5));
    }
    for x in rows(PASSTHROUGH, "warm") {
        if let Some(v) = num(x, "vs_native") {
            out.push(format!(
                "uvfs-passthrough warm vs native: {v:.2}x (target >= 0.9: {}) [T={}]",
                verdict(v, 0.9),
                x["threads"]
            ));
        }
    }
    out.extend(failures(r));
    out.extend(server_peaks(r));
    if !rows(TMPFS, "cold").is_empty() {
        out.push(
            "note: cold = after `echo 2 > /proc/sys/vm/drop_caches` (memfs cannot be remounted \
             cold: its data lives in the server); tmpfs pins its dentries, so its cold pass is warm"
                .into(),
        );
    }
    out
}

fn is_peer(x: &Row) -> bool {
    x["fs"].as_str().is_some_and(|f| PEERS.contains(&f))
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let groups: Vec<&str> = d
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| std::str::from_utf8(g).unwrap_or("?"))
        .collect();
    groups.join(",")
}

/// The passthrough as a user mounts it, first: rate, against native,
/// requests per stat (by opcode); the warm default walk against its
/// target (>= 0.9x native and no request at all).
fn default_lines(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for fs in [PASSTHROUGH_DEFAULT, PASSTHROUGH_NOWATCH] {
        for x in r.rows.iter().filter(|x| x["fs"] == fs) {
            let Some(rate) = num(x, "stats_per_sec") else {
                continue;
            };
            let pass = x["pass"].as_str().unwrap_or("?");
            let vs = num(x, "vs_native").map_or(String::new(), |v| format!(" = {v:.2}x native"));
            let rps = num(x, "requests_per_stat");
            let target = match (fs, pass, num(x, "vs_native"), rps) {
                (PASSTHROUGH_DEFAULT, "warm", Some(v), Some(q)) => format!(
                    " (target >= 0.9x native, 0 requests/stat: {})",
                    if v >= 0.9 && q == 0.0 {
                        "met"
                    } else {
                        "NOT met"
                    }
                ),
                _ => String::new(),
            };
            out.push(format!(
                "{fs} {pass} T={}: {rate:.0} stats/s{vs}; {} requests/stat{target}{}",
                x["threads"],
                rps.map_or("-".into(), |q| format!("{q:.3}")),
                fmt_ops(x),
            ));
        }
    }
    out
}

/// The headlines: a passthrough row's rate against the fastest
/// peer that walked the whole tree in the same pass at the same thread
/// count (a peer that ran out of fds part way has no rate to compare).
fn vs_best_peer(r: &Report, ours: &Row, target: f64) -> String {
    let pass = ours["pass"].as_str().unwrap_or("?");
    let head = format!(
        "{} {pass} vs best completing peer:",
        ours["fs"].as_str().unwrap_or("?")
    );
    let t = &ours["threads"];
    let best = r
        .rows
        .iter()
        .filter(|x| is_peer(x) && x["pass"] == pass && &x["threads"] == t)
        .filter_map(|x| Some((x["fs"].as_str()?, num(x, "stats_per_sec")?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let peers_ran = r.rows.iter().any(is_peer);
    // Peers' timeouts, when they differ from this row's (the no-watch
    // row has the default's, the peers `--timeout`).
    let peer_timeouts = match (
        num(ours, "entry_timeout"),
        r.rows
            .iter()
            .filter(|x| is_peer(x))
            .find_map(|x| num(x, "entry_timeout")),
    ) {
        (None, Some(p)) => format!(", peers at timeout {p} s"),
        _ => String::new(),
    };
    match (num(ours, "stats_per_sec"), best) {
        (None, _) => format!("{head} - (it did not complete the walk) [T={t}]"),
        (Some(_), None) if !peers_ran => format!("{head} - (no peer run; --fs) [T={t}]"),
        (Some(_), None) => format!("{head} - (no peer completed the walk) [T={t}]"),
        (Some(v), Some((name, b))) => format!(
            "{head} {:.2}x (target >= {target}: {}) [T={t}: {:.0} vs {name} {:.0} stats/s{peer_timeouts}]",
            v / b,
            if v / b >= target { "met" } else { "NOT met" },
            v,
            b
        ),
    }
}

/// A line per failed row: how far the walk got and why; a peer that never
/// ran is one line, not one per pass.
fn failures(r: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let get = |x: &'_ Row, k: &str| x.get(k).cloned().unwrap_or(Value::Null);
    for x in r
        .rows
        .iter()
        .filter(|x| x.get("ok") == Some(&Value::Bool(false)))
    {
        let fs = x["fs"].as_str().unwrap_or("?");
        let error = get(x, "error");
        let error = error.as_str().unwrap_or("?");
        if x.get("failed_repeats").is_none() {
            let line = format!("{fs}: not run: {error}");
            if !out.contains(&line) {
                out.push(line);
            }
            continue;
        }
        let fds = match (num(x, "max_fds"), num(x, "fd_limit")) {
            (Some(m), Some(l)) => format!(", server peak {} fds (limit {})", m, l),
            (Some(m), None) => format!(", server peak {m} fds"),
            _ => String::new(),
        };
        out.push(format!(
            "{fs} {} T={}: FAILED after {} of {} entries{fds}: {error}",
            x["pass"].as_str().unwrap_or("?"),
            x["threads"],
            thousands(get(x, "seen").as_u64().unwrap_or(0)),
            thousands(get(x, "entries").as_u64().unwrap_or(0)),
        ));
    }
    out
}

/// Per server: the most fds it held and its peak RSS over every pass.
fn server_peaks(r: &Report) -> Vec<String> {
    let mut names: Vec<&str> = Vec::new();
    for x in &r.rows {
        if let Some(f) = x["fs"]
            .as_str()
            .filter(|_| x.get("max_fds").is_some_and(|v| !v.is_null()))
        {
            if !names.contains(&f) {
                names.push(f);
            }
        }
    }
    names
        .into_iter()
        .map(|fs| {
            let rows: Vec<&Row> = r.rows.iter().filter(|x| x["fs"] == fs).collect();
            let max = |k: &str| {
                rows.iter()
                    .filter_map(|x| x.get(k).and_then(Value::as_u64))
                    .max()
            };
            let limit = match (max("fd_limit"), max("fd_budget")) {
                (Some(l), Some(b)) => format!(" (limit {l}; fd pool budget {b})"),
                (Some(l), None) => format!(" (limit {l})"),
                (None, Some(b)) => format!(" (fd pool budget {b})"),
                (None, None) => String::new(),
            };
            format!(
                "{fs}: server peak {} fds{limit}, peak RSS {:.1} MiB",
                max("max_fds").unwrap_or(0),
                max("rss_bytes").unwrap_or(0) as f64 / (1024.0 * 1024.0)
            )
        })
        .collect()
}

/// Bar chart: stats/s per (threads, pass), one bar per file system (rows
/// that failed have no rate and no bar; the table and summary show them).
/// Targets: memfs warm 0.8x tmpfs, the default passthrough warm 0.9x
/// native, the passthrough 1.2x (cold) and no-watch 1.5x (warm) the best
/// peer.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    for x in r.rows.iter().filter(|x| num(x, "stats_per_sec").is_some()) {
        push_bar(
            &mut groups,
            format!("T={} {}", x["threads"], x["pass"].as_str().unwrap_or("")),
            x["fs"].as_str().unwrap_or("?").to_string(),
            x["stats_per_sec"].as_f64().unwrap_or(0.0),
        );
    }
    for g in &mut groups {
        let best_peer = PEERS.iter().filter_map(|p| g.value(p)).reduce(f64::max);
        if g.label.ends_with(" warm") {
            if let Some(t) = g.value(TMPFS) {
                g.target(Some(MEMFS), 0.8 * t);
            }
            if let Some(n) = g.value(NATIVE) {
                g.target(Some(PASSTHROUGH_DEFAULT), 0.9 * n);
            }
            if let Some(p) = best_peer {
                g.target(Some(PASSTHROUGH_NOWATCH), 1.5 * p);
            }
        } else if let Some(p) = best_peer {
            g.target(Some(PASSTHROUGH), 1.2 * p);
        }
    }
    (
        "fuse-stat: find-like readdir + lstat through a mount (higher is better)".into(),
        "stats/s".into(),
        groups,
    )
}

/// A numeric cell of a row, if it is there.
fn num(r: &Row, key: &str) -> Option<f64> {
    r.get(key).and_then(Value::as_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(secs: f64, entries: u64, req: u64, cpu: f64, lookups: u64) -> PassSample {
        PassSample {
            secs,
            entries,
            server: Some(ServerSample {
                requests: req,
                by_op: [("lookup".to_string(), lookups)].into_iter().collect(),
                cpu_secs: cpu,
                forgotten: 0,
                nodes: 0,
            }),
            ..PassSample::default()
        }
    }

    #[test]
    fn server_math_is_per_stat_and_per_request() {
        let ss = [
            sample(1.0, 1000, 500, 0.010, 400),
            sample(1.0, 1000, 700, 0.014, 600),
            sample(1.0, 1000, 600, 0.012, 500),
        ];
        let f = server_fields(&ss).unwrap();
        assert!((f["requests_per_stat"].as_f64().unwrap() - 0.6).abs() < 1e-9);
        assert!((f["cpu_us_per_request"].as_f64().unwrap() - 20.0).abs() < 1e-9);
        assert!((f["cpu_us_per_stat"].as_f64().unwrap() - 12.0).abs() < 1e-9);
        assert!((f["requests_per_stat_by_op"]["lookup"].as_f64().unwrap() - 0.5).abs() < 1e-9);
        // A warm pass with no requests has no CPU per request.
        let warm = server_fields(&[sample(1.0, 1000, 0, 0.0, 0)]).unwrap();
        assert!(warm["cpu_us_per_request"].is_null());
        assert_eq!(warm["requests_per_stat"].as_f64(), Some(0.0));
        assert!(server_fields(&[PassSample {
            secs: 1.0,
            entries: 1,
            ..PassSample::default()
        }])
        .is_none());
    }

    #[test]
    fn ratios_and_summary() {
        let mut r = Report::new("fuse-stat");
        for (fs, pass, v) in [
            (MEMFS, "warm", 90.0),
            (TMPFS, "warm", 100.0),
            (MEMFS, "cold", 10.0),
            (TMPFS, "cold", 100.0),
        ] {
            let mut x = row!("fs" => fs, "pass" => pass, "threads" => 1, "stats_per_sec" => v);
            if fs == MEMFS {
                x.insert("entry_timeout".into(), json!(60.0));
                x.insert("requests_per_stat".into(), json!(0.25));
                x.insert("cpu_us_per_request".into(), json!(8.0));
                x.insert("cpu_us_per_stat".into(), json!(2.0));
                x.insert(
                    "requests_per_stat_by_op".into(),
                    json!({"lookup": 0.2, "readdirplus": 0.05}),
                );
            }
            r.rows.push(x);
        }
        add_ratios(&mut r);
        assert_eq!(r.rows[0]["vs_tmpfs"].as_f64(), Some(0.9));
        assert_eq!(r.rows[2]["vs_tmpfs"].as_f64(), Some(0.1));
        let s = summary(&r).join("\n");
        assert!(
            s.contains("warm T=1: uvfs-memfs/tmpfs = 0.90x (target >= 0.8: met)"),
            "{s}"
        );
        assert!(s.contains("cold T=1: uvfs-memfs/tmpfs = 0.10x"), "{s}");
        assert!(
            s.contains("[per stat: lookup 0.200, readdirplus 0.050]"),
            "{s}"
        );
        assert!(s.contains("--entry-timeout 60"), "{s}");
        let (_, _, g) = chart(&r);
        assert_eq!(g.len(), 2);
    }

    #[test]
    fn transports_compared_per_pass_and_thread_count() {
        let mut r = Report::new("fuse-stat");
        for (fs, t, v, transport) in [
            (MEMFS, 1, 150.0, "uring"),
            (MEMFS_DEV, 1, 100.0, "dev"),
            (MEMFS, 2, 300.0, "uring"),
            (MEMFS_DEV, 2, 250.0, "dev"),
        ] {
            r.rows.push(row!(
                "fs" => fs, "pass" => "warm", "threads" => t,
                "stats_per_sec" => v, "transport" => transport
            ));
        }
        let s = summary(&r).join("\n");
        assert!(
            s.contains("warm T=1: uvfs-memfs (uring) / uvfs-memfs-dev = 1.50x"),
            "{s}"
        );
        assert!(
            s.contains("warm T=2: uvfs-memfs (uring) / uvfs-memfs-dev = 1.20x"),
            "{s}"
        );
        assert!(!s.contains("cold T="), "{s}");
    }

    #[test]
    fn fs_choice() {
        let mut o = FuseStatOpts {
            common: CommonOpts::default(),
            threads: vec![1],
            files: None,
            per_dir: 100,
            fs: None,
            timeout: 60.0,
            server_threads: None,
            native_dir: "/tmp".into(),
        };
        let none = MountFlags {
            source: false,
            no_watch: false,
        };
        let source = MountFlags {
            source: true,
            no_watch: false,
        };
        let all = MountFlags {
            source: true,
            no_watch: true,
        };
        let names = |o: &FuseStatOpts, m| choose_fs(o, m).map(|(n, _)| n);
        assert_eq!(names(&o, none).unwrap(), vec![MEMFS, MEMFS_DEV, TMPFS]);
        // The default-options passthroughs lead; the no-watch one only
        // where `uvfs mount` has the flag, else skipped with a message.
        let (n, skipped) = choose_fs(&o, source).unwrap();
        assert_eq!(
            n,
            vec![
                MEMFS,
                MEMFS_DEV,
                TMPFS,
                NATIVE,
                PASSTHROUGH_DEFAULT,
                PASSTHROUGH,
                LIBFUSE,
                FBR,
                FBR_FH,
                GOFUSE
            ]
        );
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].contains("--no-watch"), "{skipped:?}");
        let (n, skipped) = choose_fs(&o, all).unwrap();
        assert_eq!(
            &n[4..7],
            &[PASSTHROUGH_DEFAULT, PASSTHROUGH_NOWATCH, PASSTHROUGH]
        );
        assert!(skipped.is_empty());
        o.fs = Some(vec![PASSTHROUGH.into()]);
        assert!(choose_fs(&o, none).is_err());
        assert_eq!(names(&o, source).unwrap(), vec![NATIVE, PASSTHROUGH]);
        // The /dev/fuse and readahead-less passthroughs only when asked,
        // with their source tree.
        o.fs = Some(vec![PASSTHROUGH_NORA.into()]);
        assert_eq!(names(&o, source).unwrap(), vec![NATIVE, PASSTHROUGH_NORA]);
        o.fs = Some(vec![PASSTHROUGH_DEV.into()]);
        assert!(choose_fs(&o, none).is_err());
        assert_eq!(names(&o, source).unwrap(), vec![NATIVE, PASSTHROUGH_DEV]);
        // Asked for by name without the flag: skipped, not an error.
        o.fs = Some(vec![PASSTHROUGH_NOWATCH.into()]);
        let (n, skipped) = choose_fs(&o, source).unwrap();
        assert_eq!((n.len(), skipped.len()), (0, 1));
        // A peer alone brings the native tree it serves, and needs no
        // `uvfs mount --source`.
        o.fs = Some(vec![FBR.into()]);
        assert_eq!(names(&o, none).unwrap(), vec![NATIVE, FBR]);
        o.fs = Some(vec![GOFUSE.into(), FBR_FH.into()]);
        assert_eq!(names(&o, none).unwrap(), vec![NATIVE, FBR_FH, GOFUSE]);
        o.fs = Some(vec![LIBFUSE.into(), PASSTHROUGH.into()]);
        assert_eq!(
            names(&o, source).unwrap(),
            vec![NATIVE, PASSTHROUGH, LIBFUSE]
        );
        o.fs = Some(vec!["ext9".into()]);
        assert!(choose_fs(&o, source).is_err());
    }

    fn key(fs: &str, served: bool) -> RowKey<'_> {
        RowKey {
            fs,
            threads: 2,
            cold: true,
            files: 20_000,
            entries: 20_210,
            repeats: 3,
            build_secs: 0.5,
            served,
            fd_limit: served.then_some(20_000),
            fd_budget: (fs == PASSTHROUGH).then_some(15_000),
        }
    }

    fn walked(secs: f64, entries: u64, error: Option<&str>, fds: u64) -> PassSample {
        let mut peaks = Peaks::default();
        peaks.add(procstat::ProcUsage {
            fds,
            rss_bytes: fds * 1000,
            hwm_bytes: fds * 2000,
        });
        PassSample {
            secs,
            entries,
            error: error.map(String::from),
            peaks: Some(peaks),
            ..PassSample::default()
        }
    }

    #[test]
    fn completed_row_has_rate_and_peaks() {
        let ss = [
            walked(2.0, 20_210, None, 100),
            walked(1.0, 20_210, None, 300),
            walked(3.0, 20_210, None, 200),
        ];
        let r = make_row(&key(PASSTHROUGH, true), None, &ss);
        assert_eq!(r["ok"], true);
        assert_eq!(r["seen"], 20_210);
        assert_eq!(r["secs"].as_f64(), Some(2.0));
        assert_eq!(r["stats_per_sec"].as_f64(), Some(10_105.0));
        assert_eq!(r["max_fds"], 300, "the peak over every repeat");
        assert_eq!(r["rss_bytes"], 300_000);
        assert_eq!(r["rss_hwm_bytes"], 600_000);
        assert_eq!(r["fd_limit"], 20_000);
        assert!(r["error"].is_null());
        assert!(r.get("failed_repeats").is_none());
        // Not served by a process: no fds, no RSS (null, not absent).
        let native = make_row(&key(NATIVE, false), None, &[walked(1.0, 20_210, None, 9)]);
        assert!(native["max_fds"].is_null() && native["rss_bytes"].is_null());
        assert!(native["fd_limit"].is_null());
        assert_eq!(native["ok"], true);
    }

    #[test]
    fn failed_walks_make_a_failed_row() {
        let emfile = "walk /tmp/x/t0: Too many open files (os error 24)";
        let ss = [
            walked(0.5, 19_800, Some(emfile), 19_990),
            walked(1.0, 20_210, None, 10),
            walked(0.7, 19_850, Some(emfile), 20_000),
        ];
        let r = make_row(&key(LIBFUSE, true), None, &ss);
        assert_eq!(r["ok"], false);
        assert_eq!(r["seen"], 19_825, "median of the failed repeats");
        assert_eq!(r["secs"].as_f64(), Some(0.6));
        assert!(r["stats_per_sec"].is_null(), "a failed walk has no rate");
        assert_eq!(r["error"], emfile);
        assert_eq!(r["failed_repeats"], 2);
        assert_eq!(r["max_fds"], 20_000);
        // Fewer entries without an error is a failure too (see `pass`), and
        // a peer that never started is a row with the reason.
        let r = make_row(&key(FBR, true), Some("build failed: no cargo"), &[]);
        assert_eq!(r["ok"], false);
        assert_eq!(r["seen"], 0);
        assert!(r["secs"].is_null() && r["stats_per_sec"].is_null());
        assert!(r["max_fds"].is_null());
        assert_eq!(r["error"], "build failed: no cargo");
        assert!(r.get("failed_repeats").is_none());
    }

    #[test]
    fn peers_in_ratios_and_summary() {
        let mut r = Report::new("fuse-stat");
        let emfile = "Too many open files (os error 24)";
        let rows = [
            make_row(&key(NATIVE, false), None, &[walked(1.0, 20_210, None, 0)]),
            make_row(
                &key(PASSTHROUGH, true),
                None,
                &[walked(2.0, 20_210, None, 15_000)],
            ),
            make_row(
                &key(LIBFUSE, true),
                None,
                &[walked(0.5, 19_800, Some(emfile), 20_000)],
            ),
            make_row(&key(FBR, true), None, &[walked(3.0, 20_210, None, 20_100)]),
        ];
        r.rows.extend(rows);
        let mut warm = |fs: &'static str, secs: f64| {
            let mut k = key(fs, fs != NATIVE);
            k.cold = false;
            r.rows
                .push(make_row(&k, None, &[walked(secs, 20_210, None, 7)]));
        };
        warm(NATIVE, 1.0);
        warm(PASSTHROUGH, 1.25);
        add_ratios(&mut r);
        assert_eq!(r.rows[1]["vs_native"].as_f64(), Some(0.5));
        assert!(
            r.rows[2].get("vs_native").is_none(),
            "failed rows get no ratio"
        );
        assert!((r.rows[3]["vs_native"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
        let s = summary(&r).join("\n");
        assert!(
            s.contains("uvfs-passthrough cold vs best completing peer: 1.50x (target >= 1.2: met) [T=2: 10105 vs fuse-backend-rs 6737 stats/s]"),
            "{s}"
        );
        assert!(
            s.contains("uvfs-passthrough warm vs native: 0.80x (target >= 0.9: NOT met) [T=2]"),
            "{s}"
        );
        assert!(
            s.contains("libfuse-passthrough_ll cold T=2: FAILED after 19,800 of 20,210 entries, server peak 20000 fds (limit 20000): Too many open files"),
            "{s}"
        );
        assert!(
            s.contains(
                "uvfs-passthrough: server peak 15000 fds (limit 20000; fd pool budget 15000)"
            ),
            "{s}"
        );
        // When no peer completes there is nothing to hold uvfs against.
        r.rows.retain(|x| x["fs"] != FBR);
        let s = summary(&r).join("\n");
        assert!(
            s.contains("uvfs-passthrough cold vs best completing peer: - (no peer completed the walk) [T=2]"),
            "{s}"
        );
        // A peer that never ran is one line, however many rows it has.
        r.rows
            .push(make_row(&key(FBR, true), Some("no cargo"), &[]));
        r.rows
            .push(make_row(&key(FBR, true), Some("no cargo"), &[]));
        let s = summary(&r);
        assert_eq!(
            s.iter()
                .filter(|l| *l == "fuse-backend-rs: not run: no cargo")
                .count(),
            1
        );
        // Failed rows have no bar.
        let (_, _, g) = chart(&r);
        assert!(g
            .iter()
            .all(|g| g.bars.iter().all(|b| b.0 != LIBFUSE && b.0 != FBR)));
    }

    #[test]
    fn default_rows_pass_no_timeouts_and_lead_the_summary() {
        let o = FuseStatOpts {
            common: CommonOpts::default(),
            threads: vec![1],
            files: None,
            per_dir: 100,
            fs: None,
            timeout: 60.0,
            server_threads: Some(3),
            native_dir: "/tmp".into(),
        };
        let shape = TreeShape {
            files: 10,
            subtrees: 1,
            per_dir: 10,
            fanout: 32,
        };
        let src = Some(Path::new("/src"));
        assert_eq!(
            server_args(&o, &shape, src, PASSTHROUGH_DEFAULT).join(" "),
            "--source /src"
        );
        assert_eq!(
            server_args(&o, &shape, src, PASSTHROUGH_NOWATCH).join(" "),
            "--source /src --no-watch"
        );
        let tuned = server_args(&o, &shape, src, PASSTHROUGH).join(" ");
        assert!(
            tuned.starts_with("--entry-timeout 60 --attr-timeout 60 --vnodes"),
            "{tuned}"
        );
        assert!(tuned.ends_with("--threads 3 --source /src"), "{tuned}");

        let mut r = Report::new("fuse-stat");
        let mut push = |fs: &str, pass: &str, rate: f64, rps: f64| {
            let mut x = row!("fs" => fs, "pass" => pass, "threads" => 1,
                "stats_per_sec" => rate, "requests_per_stat" => rps);
            match options_of(fs) {
                Some(opt) => x.insert("options".into(), json!(opt)),
                None => x.insert("entry_timeout".into(), json!(1.0)),
            };
            r.rows.push(x);
        };
        push(NATIVE, "warm", 1000.0, 0.0);
        push(PASSTHROUGH_DEFAULT, "warm", 950.0, 0.0);
        push(PASSTHROUGH_NOWATCH, "warm", 300.0, 1.02);
        push(GOFUSE, "warm", 150.0, 0.0);
        push(FBR_FH, "warm", 100.0, 0.0);
        add_ratios(&mut r);
        let s = summary(&r);
        let first = s
            .iter()
            .position(|l| l.starts_with(PASSTHROUGH_DEFAULT))
            .expect("a default line");
        assert_eq!(first, 1, "right after the timeouts line: {s:?}");
        let all = s.join("\n");
        assert!(
            all.contains("uvfs-passthrough-default warm T=1: 950 stats/s = 0.95x native; 0.000 requests/stat (target >= 0.9x native, 0 requests/stat: met)"),
            "{all}"
        );
        assert!(all.contains("uvfs-passthrough-nowatch warm T=1: 300 stats/s = 0.30x native; 1.020 requests/stat"), "{all}");
        assert!(
            all.contains("uvfs-passthrough-nowatch warm vs best completing peer: 2.00x (target >= 1.5: met) [T=1: 300 vs go-fuse-loopback 150 stats/s, peers at timeout 1 s]"),
            "{all}"
        );
        assert!(all.contains("no timeout given"), "{all}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(19_800), "19,800");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn watchdog_kills_only_past_the_limit() {
        // No server: nothing to watch.
        assert_eq!(with_watchdog(None, Duration::ZERO, || 7), (7, false));
        // A child that outlives the limit is killed; one in time is not.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let (r, killed) = with_watchdog(Some(child.id()), Duration::from_millis(50), || {
            child.wait().unwrap()
        });
        assert!(killed);
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&r),
            Some(libc::SIGKILL)
        );
        let ((), killed) = with_watchdog(Some(std::process::id()), Duration::from_secs(60), || ());
        assert!(!killed);
    }
}
