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
//! `--native-dir`) and that native tree itself are compared too.
//!
//! # Passes
//! For each repeat and thread count, every file system in turn: a cold
//! pass right after dropping the kernel's dentries and inodes (memfs cannot
//! be remounted to go cold: its data lives in the server; see
//! `fuse_mount.rs`), then a warm pass. For uvfs mounts the server's
//! counters are read before and after each pass (`uvfs stat --json`):
//! requests per stat, by opcode, and server CPU per request.

use crate::fuse_mount::{self, ScratchDir, ServerMount, ServerSample, Tmpfs};
use crate::report::{median, BarGroup, Progress, Report, Row};
use crate::walk::{self, TreeShape};
use crate::{row, CommonOpts};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

const MEMFS: &str = "uvfs-memfs";
const TMPFS: &str = "tmpfs";
const PASSTHROUGH: &str = "uvfs-passthrough";
const NATIVE: &str = "native";

#[derive(clap::Args, Debug, Clone)]
pub struct FuseStatOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Walker thread counts (each walker walks its own subtrees).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    pub threads: Vec<usize>,
    /// Files in the tree (default 200,000; 20,000 with --quick).
    #[arg(long)]
    pub files: Option<usize>,
    /// Files per leaf directory.
    #[arg(long, default_value_t = 100)]
    pub per_dir: usize,
    /// File systems to walk (default: uvfs-memfs,tmpfs, plus
    /// uvfs-passthrough,native when `uvfs mount --source` exists).
    #[arg(long, value_delimiter = ',')]
    pub fs: Option<Vec<String>>,
    /// Entry and attribute timeouts of the uvfs mounts, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Request loops of the uvfs servers (default: `uvfs mount`'s).
    #[arg(long)]
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
    _tmpfs: Option<Tmpfs>,
    _dir: Option<ScratchDir>,
    build_secs: f64,
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
#[derive(Clone, Debug)]
struct PassSample {
    secs: f64,
    entries: u64,
    server: Option<ServerSample>,
    /// Nodes the kernel held when the walk began (`fuse.nodes`: about 1,
    /// the root, when a cold pass is cold).
    nodes_at_start: Option<u64>,
}

fn server_args(o: &FuseStatOpts, shape: &TreeShape, source: Option<&Path>) -> Vec<String> {
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
    a
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The file systems to run, checked, in setup order.
fn choose_fs(o: &FuseStatOpts, passthrough: bool) -> io::Result<Vec<&'static str>> {
    let all = [MEMFS, TMPFS, NATIVE, PASSTHROUGH];
    let wanted: Vec<String> = match &o.fs {
        Some(v) => v.clone(),
        None if passthrough => all.iter().map(|s| s.to_string()).collect(),
        None => vec![MEMFS.into(), TMPFS.into()],
    };
    for w in &wanted {
        if !all.contains(&w.as_str()) {
            return Err(bad(format!("unknown --fs {w:?} ({})", all.join(", "))));
        }
    }
    if wanted.iter().any(|w| w == PASSTHROUGH) && !passthrough {
        return Err(bad(
            "uvfs-passthrough needs `uvfs mount --source DIR`, which this build lacks".into(),
        ));
    }
    // The passthrough mount serves the native tree, so it needs it built.
    let native = wanted.iter().any(|w| w == NATIVE || w == PASSTHROUGH);
    Ok(all
        .into_iter()
        .filter(|a| (*a == NATIVE && native) || wanted.iter().any(|w| w == a))
        .collect())
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
        _tmpfs: None,
        _dir: None,
        build_secs: 0.0,
    };
    match name {
        MEMFS => {
            let m = ServerMount::start("memfs", &server_args(o, shape, None))?;
            t.root = m.root().to_path_buf();
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
        PASSTHROUGH => {
            let src = native_root.ok_or_else(|| bad("passthrough without a native tree".into()))?;
            let m = ServerMount::start("passthrough", &server_args(o, shape, Some(src)))?;
            t.root = m.root().to_path_buf();
            t.server = Some(m);
            // The tree is the native one, already built.
            return Ok(t);
        }
        _ => unreachable!("checked by choose_fs"),
    }
    let start = Instant::now();
    walk::build(&t.root, shape)?;
    t.build_secs = start.elapsed().as_secs_f64();
    Ok(t)
}

/// One walk of every subtree by `threads` walkers; returns (secs, entries).
fn walk_all(root: &Path, shape: &TreeShape, threads: usize) -> io::Result<(f64, u64)> {
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|w| {
                let barrier = &barrier;
                sc.spawn(move || {
                    barrier.wait();
                    shape
                        .subtrees_of(w, threads)
                        .into_iter()
                        .map(|s| walk::walk(&root.join(format!("t{s}"))))
                        .sum::<io::Result<u64>>()
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut total = 0;
        let mut err = None;
        for h in hs {
            match h.join() {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => err = Some(e),
                Err(_) => err = Some(io::Error::other("walker panicked")),
            }
        }
        let secs = start.elapsed().as_secs_f64();
        match err {
            Some(e) => Err(e),
            None => Ok((secs, total)),
        }
    })
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
    let nodes_at_start = before.as_ref().map(|b| b.nodes);
    let (secs, entries) = walk_all(&t.root, shape, threads)?;
    if entries != shape.entries() {
        return Err(io::Error::other(format!(
            "{}: the walk saw {entries} entries, the tree has {}",
            t.name,
            shape.entries()
        )));
    }
    let server = match (&t.server, before) {
        (Some(s), Some(b)) => Some(b.delta(&s.sample()?)),
        _ => None,
    };
    Ok(PassSample {
        secs,
        entries,
        server,
        nodes_at_start,
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

/// `vs_tmpfs` on every row (same pass and threads) and `vs_native` on the
/// passthrough rows.
fn add_ratios(report: &mut Report) {
    let rows = report.rows.clone();
    let get = |fs: &str, pass: &Value, t: &Value| {
        rows.iter()
            .find(|r| r["fs"] == fs && &r["pass"] == pass && &r["threads"] == t)
            .and_then(|r| r["stats_per_sec"].as_f64())
    };
    for r in &mut report.rows {
        let v = r["stats_per_sec"].as_f64().unwrap_or(0.0);
        let (p, t) = (r["pass"].clone(), r["threads"].clone());
        if let Some(b) = get(TMPFS, &p, &t) {
            r.insert("vs_tmpfs".into(), json!(v / b));
        }
        if r["fs"] == PASSTHROUGH {
            if let Some(b) = get(NATIVE, &p, &t) {
                r.insert("vs_native".into(), json!(v / b));
            }
        }
    }
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
    let passthrough = fuse_mount::supports_source();
    let names = choose_fs(o, passthrough)?;
    if names.iter().any(|n| n.starts_with("uvfs")) {
        fuse_mount::check_fuse()?;
    }
    // Fail early (before building trees) if cold passes are impossible.
    fuse_mount::drop_kernel_caches()?;

    let mut prog = Progress::new(names.len() + repeats * threads.len() * names.len() * 2);
    let mut targets = Targets(Vec::new());
    for &name in &names {
        prog.step(&format!("fuse-stat: {name}: building {files} files"));
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
                let Some(ss) = samples.get(&(k, t, cold)) else {
                    continue;
                };
                let secs = median(&ss.iter().map(|s| s.secs).collect::<Vec<_>>());
                let entries = ss[0].entries;
                let mut r = row!(
                    "fs" => target.name,
                    "pass" => if cold { "cold" } else { "warm" },
                    "threads" => t,
                    "files" => files,
                    "entries" => entries,
                    "secs" => secs,
                    "stats_per_sec" => entries as f64 / secs,
                    "repeats" => repeats,
                    "build_secs" => target.build_secs,
                );
                if target.server.is_some() {
                    r.insert("entry_timeout".into(), json!(o.timeout));
                    r.insert("attr_timeout".into(), json!(o.timeout));
                    if let Some(f) = server_fields(ss) {
                        r.extend(f);
                    }
                }
                report.rows.push(r);
            }
        }
    }
    add_ratios(&mut report);
    // Tear down now, so a failure to unmount is reported with the run.
    for mut t in targets.0.drain(..).rev() {
        if let Some(s) = t.server.as_mut() {
            s.shutdown()?;
        }
    }
    Ok(report)
}

/// Table columns for `emit`.
pub const COLUMNS: &[&str] = &[
    "fs",
    "pass",
    "threads",
    "entries",
    "secs",
    "stats_per_sec",
    "vs_tmpfs",
    "vs_native",
    "requests_per_stat",
    "cpu_us_per_request",
    "cpu_us_per_stat",
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
        out.push(format!(
            "uvfs mounts: --entry-timeout {x} --attr-timeout {x} (kernel may cache names and attributes {x} s)"
        ));
    }
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
    for x in rows(PASSTHROUGH, "warm") {
        if let Some(v) = num(x, "vs_native") {
            out.push(format!(
                "warm T={}: uvfs-passthrough/native = {v:.2}x",
                x["threads"]
            ));
        }
    }
    if !rows(TMPFS, "cold").is_empty() {
        out.push(
            "note: cold = after `echo 2 > /proc/sys/vm/drop_caches` (memfs cannot be remounted \
             cold: its data lives in the server); tmpfs pins its dentries, so its cold pass is warm"
                .into(),
        );
    }
    out
}

/// Bar chart: stats/s per (threads, pass), one bar per file system.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    for x in &r.rows {
        let label = format!("T={} {}", x["threads"], x["pass"].as_str().unwrap_or(""));
        let bar = (
            x["fs"].as_str().unwrap_or("?").to_string(),
            x["stats_per_sec"].as_f64().unwrap_or(0.0),
        );
        match groups.iter_mut().find(|g| g.label == label) {
            Some(g) => g.bars.push(bar),
            None => groups.push(BarGroup {
                label,
                bars: vec![bar],
            }),
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
            nodes_at_start: None,
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
            server: None,
            nodes_at_start: None,
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
        assert_eq!(choose_fs(&o, false).unwrap(), vec![MEMFS, TMPFS]);
        assert_eq!(
            choose_fs(&o, true).unwrap(),
            vec![MEMFS, TMPFS, NATIVE, PASSTHROUGH]
        );
        o.fs = Some(vec![PASSTHROUGH.into()]);
        assert!(choose_fs(&o, false).is_err());
        assert_eq!(choose_fs(&o, true).unwrap(), vec![NATIVE, PASSTHROUGH]);
        o.fs = Some(vec!["ext9".into()]);
        assert!(choose_fs(&o, true).is_err());
    }
}
