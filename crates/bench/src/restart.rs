//! `uvfs bench restart`: how long programs using a mount wait while its
//! server is replaced by a live upgrade (`uvfs upgrade`, issue 28).
//!
//! # Configurations
//! - `memfs-idle`: memfs with nothing but the load's own files;
//! - `memfs-data`: memfs holding 1 GiB in 100,000 files (quick: 64 MiB in
//!   6,400), all of which the successor must take over;
//! - `passthrough-idle`: a passthrough of an empty source directory;
//! - `passthrough-nodes`: a passthrough whose kernel knows 1,000,000 files
//!   (quick: 20,000): empty files in 1,000 directories made on the
//!   source, then statted through the mount, so the successor must
//!   re-create a node for each.
//! - `crash-idle`, `crash-nodes`: the two passthrough configurations with
//!   the server killed (SIGKILL) instead of upgraded: its supervisor
//!   starts a new one from the crash journal. The window runs from the
//!   kill to the new server's first answer (`uvfs stat`).
//!
//! Mounts are `--transport dev` unless `--transport uring` (FUSE over
//! io_uring, whose queues the upgrade hands over too, and whose entries a
//! server started after a crash takes over). Sources and scratch trees are made at run
//! time under `--source-dir` (`/var/tmp`, a disk file system that has the
//! file handles a passthrough needs) and removed after.
//!
//! # Measure
//! While a few threads run a mix of operations in the mount
//! (`restart/load.rs`; `--keep-created` keeps the files it creates
//! instead of removing them), the server is upgraded `--upgrades` times, one
//! every `--interval-ms`. Each upgrade is a window from just before the
//! `upgrade` request to its answer; the longest load operation that
//! overlapped it is what a program waited. The row reports the max over
//! the upgrades (the p100) and the median, and the server's own
//! `server.last_pause_us` after each. Any failed load operation, or an
//! upgrade that did not happen, fails the workload; a configuration that
//! cannot be mounted is reported as not set up.

mod data;
mod load;
mod rows;

pub use rows::{chart, check, make_row, summary, Measured, RowKey, COLUMNS};

use crate::cleanup::{self, Leftover};
use crate::fuse_mount::{self, ScratchDir, ServerMount};
use crate::report::{Progress, Report};
use crate::CommonOpts;
use data::Tree;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct RestartOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Upgrades per configuration (default 20; 3 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub upgrades: Option<usize>,
    /// Load threads.
    #[arg(long, default_value_t = 2, value_parser = crate::at_least_one())]
    pub threads: usize,
    /// Time between two upgrades (the load runs throughout), milliseconds.
    #[arg(long, default_value_t = 200.0, value_parser = crate::non_negative_secs)]
    pub interval_ms: f64,
    /// Files the kernel knows in passthrough-nodes (default 1,000,000;
    /// 20,000 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub nodes: Option<usize>,
    /// Files of memfs-data (default 100,000; 6,400 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub memfs_files: Option<usize>,
    /// MiB of memfs-data in all (default 1024; 64 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub memfs_mib: Option<usize>,
    /// Configurations (default all: memfs-idle, memfs-data,
    /// passthrough-idle, passthrough-nodes).
    #[arg(long, value_delimiter = ',')]
    pub configs: Option<Vec<String>>,
    /// The load keeps the files it creates instead of removing them: a
    /// removed file whose node the kernel has not forgotten yet is in
    /// the state handed over, which a successor must cope with.
    #[arg(long)]
    pub keep_created: bool,
    /// Where passthrough sources are made (a disk file system).
    #[arg(long, default_value = "/var/tmp")]
    pub source_dir: PathBuf,
    /// How the mounts are served: `dev` (/dev/fuse reads) or `uring`
    /// (FUSE over io_uring).
    #[arg(long, default_value = "dev", value_parser = ["dev", "uring"])]
    pub transport: String,
}

/// The sizes the targets are stated for.
const FULL_NODES: usize = 1_000_000;
const FULL_MEMFS_FILES: usize = 100_000;
const FULL_MEMFS_MIB: usize = 1024;
/// Directories the data trees are spread over.
const NODE_DIRS: usize = 1000;
const MEMFS_DIRS: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    MemfsIdle,
    MemfsData,
    PassthroughIdle,
    PassthroughNodes,
    CrashIdle,
    CrashNodes,
}

impl Config {
    pub const ALL: [Config; 6] = [
        Config::MemfsIdle,
        Config::MemfsData,
        Config::PassthroughIdle,
        Config::PassthroughNodes,
        Config::CrashIdle,
        Config::CrashNodes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Config::MemfsIdle => "memfs-idle",
            Config::MemfsData => "memfs-data",
            Config::PassthroughIdle => "passthrough-idle",
            Config::PassthroughNodes => "passthrough-nodes",
            Config::CrashIdle => "crash-idle",
            Config::CrashNodes => "crash-nodes",
        }
    }

    fn passthrough(self) -> bool {
        !matches!(self, Config::MemfsIdle | Config::MemfsData)
    }

    /// The server is killed, not upgraded.
    fn crash(self) -> bool {
        matches!(self, Config::CrashIdle | Config::CrashNodes)
    }

    /// The bound on the longest wait, milliseconds (for a crash
    /// only stated with a million nodes: the idle one is held to it too).
    fn target_ms(self) -> f64 {
        match self {
            Config::MemfsIdle | Config::PassthroughIdle => 20.0,
            Config::MemfsData => 1000.0,
            Config::PassthroughNodes => 200.0,
            Config::CrashIdle | Config::CrashNodes => 500.0,
        }
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn choose(o: &RestartOpts) -> io::Result<Vec<Config>> {
    let Some(v) = &o.configs else {
        return Ok(Config::ALL.to_vec());
    };
    let names: Vec<&str> = Config::ALL.iter().map(|c| c.name()).collect();
    for w in v {
        if !names.contains(&w.as_str()) {
            return Err(bad(format!(
                "unknown --configs {w:?} ({})",
                names.join(", ")
            )));
        }
    }
    Ok(Config::ALL
        .into_iter()
        .filter(|c| v.iter().any(|w| w == c.name()))
        .collect())
}

/// Sizes and counts of one run.
#[derive(Clone, Copy, Debug)]
struct Plan {
    upgrades: usize,
    threads: usize,
    interval: Duration,
    keep_created: bool,
    nodes: usize,
    memfs: Tree,
    /// FUSE over io_uring, else /dev/fuse.
    uring: bool,
}

impl Plan {
    fn of(o: &RestartOpts) -> Plan {
        let q = o.common.quick;
        let files = o
            .memfs_files
            .unwrap_or(if q { 6400 } else { FULL_MEMFS_FILES });
        let mib = o.memfs_mib.unwrap_or(if q { 64 } else { FULL_MEMFS_MIB });
        Plan {
            upgrades: o.upgrades.unwrap_or(if q { 3 } else { 20 }),
            threads: o.threads,
            interval: Duration::from_secs_f64(o.interval_ms / 1e3),
            keep_created: o.keep_created,
            uring: o.transport == "uring",
            nodes: o.nodes.unwrap_or(if q { 20_000 } else { FULL_NODES }),
            memfs: Tree {
                files,
                dirs: MEMFS_DIRS.min(files),
                bytes: (mib << 20).div_ceil(files),
            },
        }
    }

    fn tree(&self, c: Config) -> Option<Tree> {
        match c {
            Config::MemfsData => Some(self.memfs),
            Config::PassthroughNodes | Config::CrashNodes => Some(Tree {
                files: self.nodes,
                dirs: NODE_DIRS.min(self.nodes),
                bytes: 0,
            }),
            _ => None,
        }
    }

    /// Whether `c`'s data is as large as its target assumes.
    fn full_size(&self, c: Config) -> bool {
        match c {
            Config::MemfsData => {
                self.memfs.files >= FULL_MEMFS_FILES
                    && self.memfs.files * self.memfs.bytes >= FULL_MEMFS_MIB << 20
            }
            Config::PassthroughNodes | Config::CrashNodes => self.nodes >= FULL_NODES,
            _ => true,
        }
    }
}

/// The server serving a mount after upgrades: no child of ours (the first
/// server started it), so [`ServerMount`] cannot stop it. Sent SIGTERM on
/// drop, on which it unmounts; registered for the signal cleanup too.
struct Successor {
    pid: u32,
    mountpoint: PathBuf,
    _leftover: cleanup::Registered,
}

impl Successor {
    fn new(pid: u32, mountpoint: &Path) -> Successor {
        Successor {
            pid,
            mountpoint: mountpoint.to_path_buf(),
            _leftover: cleanup::register(Leftover::Child(pid)),
        }
    }

    /// The server in place is now `pid`.
    fn handed_to(&mut self, pid: u32) {
        self.pid = pid;
        self._leftover = cleanup::register(Leftover::Child(pid));
    }

    /// Whether the process is still there (a zombie is gone).
    fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).is_ok_and(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next())
                .is_some_and(|st| st != "Z" && st != "X")
        })
    }

    /// Whether `pid` is still the uvfs server this mount was handed to.
    fn ours(&self) -> bool {
        std::fs::read(format!("/proc/{}/cmdline", self.pid))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a.ends_with(b"__takeover")))
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        if !self.alive() || !self.ours() {
            return;
        }
        // SAFETY: kill(2) with a pid just checked to be this mount's
        // server, and a valid signal number.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if fuse_mount::is_mounted(&self.mountpoint).unwrap_or(false) {
            let _ = cleanup::unmount(&self.mountpoint);
        }
    }
}

fn counter(v: &serde_json::Value, k: &str) -> Option<u64> {
    v.pointer(&format!("/counters/{}", k.replace('/', "~1")))
        .and_then(serde_json::Value::as_u64)
}

/// The last `n` lines of a server's log, on one line.
fn log_tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Mounts `c` (the source, for a passthrough, under `base`); `nodes`:
/// files the kernel is to know at once.
fn mount(c: Config, base: &Path, nodes: usize, transport: &str) -> io::Result<ServerMount> {
    let tag = format!("restart-{}", c.name());
    let mut args: Vec<String> = vec!["--transport".into(), transport.into()];
    if c.passthrough() {
        args.push("--source".into());
        args.push(base.join(c.name()).display().to_string());
        // Over its vnode limit the passthrough has the kernel forget cold
        // nodes, and would hand over no more than the limit.
        args.push("--vnodes".into());
        args.push((nodes + nodes / 4 + 65_536).max(262_144).to_string());
    } else {
        args.push("--fs".into());
        args.push("memfs".into());
    }
    ServerMount::start(&tag, &args)
}

/// Kills `m`'s server (SIGKILL) and waits for its supervisor's new one
/// to answer; the new server's report.
fn crash(m: &ServerMount, generation: u64) -> Result<serde_json::Value, String> {
    let r = m.report().map_err(|e| format!("uvfs stat: {e}"))?;
    let pid = r["pid"].as_i64().ok_or("uvfs stat names no pid")?;
    // SAFETY: kill(2) of the mount's server, named by its own report.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = m.report() {
            if r["pid"].as_i64().is_some_and(|p| p != pid)
                && counter(&r, "server.generation") > Some(generation)
            {
                return Ok(serde_json::json!({
                    "pid": r.get("pid").cloned(),
                    "nodes": counter(&r, "fuse.nodes"),
                }));
            }
        }
        if Instant::now() > deadline {
            return Err("no new server within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Upgrades (or, `crashes`, kills) `m`'s server `p.upgrades` times under
/// the load; the server serving at the end is left in `last`.
fn measure(
    m: &ServerMount,
    target: &load::Target,
    rewalk: Option<&Path>,
    p: &Plan,
    crashes: bool,
    last: &mut Option<Successor>,
) -> Measured {
    let stop = AtomicBool::new(false);
    let mut out = Measured::default();
    let mut windows: Vec<(Instant, Instant)> = Vec::new();
    let logs = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p.threads)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || load::run(target, t, stop))
            })
            .collect();
        std::thread::sleep(p.interval);
        let mut generation = 0;
        for i in 0..p.upgrades {
            if let (Some(tree), true) = (rewalk, i > 0) {
                // A successor drops what the kernel cached of a
                // passthrough (it cannot know what changed on the host
                // meanwhile): the kernel forgets the nodes, and each
                // upgrade would hand over fewer. A walk makes the kernel
                // know every file again.
                let t = Instant::now();
                if let Err(e) = crate::walk::walk(tree) {
                    out.upgrade_error = Some(format!("walk before upgrade {}: {e}", i + 1));
                    break;
                }
                out.rewalks.push(t.elapsed());
            }
            let t0 = Instant::now();
            if crashes {
                let r = crash(m, generation);
                let t1 = Instant::now();
                match r {
                    Ok(v) => {
                        windows.push((t0, t1));
                        out.commands.push(t1 - t0);
                        out.nodes.push(v["nodes"].as_u64().unwrap_or(0));
                        if let Some(pid) = v["pid"].as_u64() {
                            match last {
                                Some(s) => s.handed_to(pid as u32),
                                None => *last = Some(Successor::new(pid as u32, m.root())),
                            }
                        }
                        generation += 1;
                        // The new server answers before it notes its pause.
                        for _ in 0..100 {
                            let pause = m.report().ok().and_then(|r| {
                                counter(&r, "server.last_pause_us").filter(|&p| p > 0)
                            });
                            if let Some(p) = pause {
                                out.pauses_us.push(p);
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                    Err(e) => {
                        out.upgrade_error = Some(format!(
                            "crash {}: {e} (server log: {})",
                            windows.len() + 1,
                            log_tail(&m.log(), 4)
                        ));
                        break;
                    }
                }
                std::thread::sleep(p.interval);
                continue;
            }
            let answer = uvfs_fuse::request_upgrade(m.root(), None);
            let t1 = Instant::now();
            let why = match answer {
                Ok(v) if v.get("error").is_none() => Ok(v),
                Ok(v) => Err(v["error"].as_str().unwrap_or("refused").to_string()),
                Err(e) => Err(e.to_string()),
            };
            let v = match why {
                Ok(v) => v,
                // No answer at all: the upgrade may have happened anyway
                // (the server that handed over left before answering).
                // The new server's report says, and the row counts it.
                Err(e) if e.contains("EOF") || e.contains("reset") => match m.report() {
                    Ok(r) if counter(&r, "server.generation") > Some(generation) => {
                        out.answers_lost.push(e);
                        serde_json::json!({
                            "pid": r.get("pid").cloned(),
                            "nodes": counter(&r, "fuse.nodes"),
                        })
                    }
                    _ => {
                        out.upgrade_error = Some(format!(
                            "upgrade {}: {e} (server log: {})",
                            windows.len() + 1,
                            log_tail(&m.log(), 4)
                        ));
                        break;
                    }
                },
                Err(e) => {
                    out.upgrade_error = Some(format!(
                        "upgrade {}: {e} (server log: {})",
                        windows.len() + 1,
                        log_tail(&m.log(), 4)
                    ));
                    break;
                }
            };
            windows.push((t0, t1));
            out.commands.push(t1 - t0);
            out.nodes.push(v["nodes"].as_u64().unwrap_or(0));
            out.handles = v["handles"].as_u64().unwrap_or(0);
            if let Some(pid) = v["pid"].as_u64() {
                // The one before exits by itself once it handed over: a
                // SIGTERM now would unmount what its successor serves.
                match last {
                    Some(s) => s.handed_to(pid as u32),
                    None => *last = Some(Successor::new(pid as u32, m.root())),
                }
            }
            match m.report() {
                Ok(r) => {
                    out.pauses_us.extend(counter(&r, "server.last_pause_us"));
                    generation = counter(&r, "server.generation").unwrap_or(generation);
                }
                Err(e) => {
                    out.upgrade_error = Some(format!("uvfs stat after an upgrade: {e}"));
                    break;
                }
            }
            std::thread::sleep(p.interval);
        }
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().expect("a load thread panicked"))
            .collect::<Vec<_>>()
    });
    for (from, to) in windows {
        let mut worst = Duration::ZERO;
        for l in &logs {
            let (w, n) = load::worst_overlapping(&l.ops, from, to);
            worst = worst.max(w.unwrap_or_default());
            out.ops_in_windows += n;
        }
        out.waits.push(worst);
    }
    for l in logs {
        out.ops += l.ops.len();
        out.failed_ops += l.failed;
        out.errors.extend(l.errors);
    }
    if let Ok(r) = m.report() {
        out.generation = counter(&r, "server.generation");
        out.restarts = counter(&r, "server.restarts");
    }
    out
}

/// One configuration: its row, or the reason it could not be set up.
fn run_config(c: Config, p: &Plan, base: &Path) -> io::Result<Result<Measured, String>> {
    let tree = p.tree(c);
    let source = base.join(c.name());
    if c.passthrough() {
        std::fs::create_dir_all(&source)?;
        if let Some(t) = tree {
            t.make(&source, p.threads)?;
        }
    }
    let nodes = tree.map_or(0, |t| t.files + t.dirs_used());
    let transport = if p.uring { "uring" } else { "dev" };
    let mut m = match mount(c, base, nodes, transport) {
        Ok(m) => m,
        Err(e) => return Ok(Err(format!("cannot mount: {e}"))),
    };
    let mut last: Option<Successor> = None;
    let r = (|| -> io::Result<Measured> {
        let mut sample = Vec::new();
        if let Some(t) = tree {
            if c.passthrough() {
                // The kernel looks every file up, and keeps it.
                let seen = crate::walk::walk(&m.root().join("tree"))?;
                let want = (t.files + t.dirs_used()) as u64;
                if seen != want {
                    return Err(io::Error::other(format!(
                        "the walk through the mount saw {seen} entries of {want}"
                    )));
                }
            } else {
                t.make(m.root(), p.threads)?;
            }
            sample = t.sample(m.root(), 1000);
        }
        let target = load::prepare(m.root(), sample, p.keep_created)?;
        let rewalk = tree
            .filter(|_| c.passthrough())
            .map(|_| m.root().join("tree"));
        Ok(measure(
            &m,
            &target,
            rewalk.as_deref(),
            p,
            c.crash(),
            &mut last,
        ))
    })();
    // The server in place now unmounts on SIGTERM; then the first one,
    // long gone if it handed over, is reaped.
    drop(last);
    let stopped = m.shutdown();
    let _ = std::fs::remove_dir_all(&source);
    let measured = r?;
    if let Err(e) = stopped {
        eprintln!("uvfs bench restart: {}: {e}", c.name());
    }
    Ok(Ok(measured))
}

/// Runs the workload: a row per configuration.
pub fn run(o: &RestartOpts) -> io::Result<Report> {
    let configs = choose(o)?;
    let p = Plan::of(o);
    let mut report = Report::new("restart");
    let mut prog = Progress::new(configs.len());
    let fuse = fuse_mount::check_fuse().map_err(|e| e.to_string());
    let base = ScratchDir::create(
        o.source_dir
            .join(format!("uvfs-bench-{}-restart", std::process::id())),
        true,
    )?;
    for c in configs {
        let tree = p.tree(c);
        prog.step(&format!(
            "restart: {}: {} files, {} upgrades",
            c.name(),
            tree.map_or(0, |t| t.files),
            p.upgrades
        ));
        let key = RowKey {
            config: c.name(),
            fs: if c.passthrough() {
                "passthrough"
            } else {
                "memfs"
            },
            files: tree.map_or(0, |t| t.files),
            bytes: tree.map_or(0, |t| (t.files * t.bytes) as u64),
            upgrades: p.upgrades,
            threads: p.threads,
            removes: !p.keep_created,
            target_ms: c.target_ms(),
            full_size: p.full_size(c),
        };
        let outcome = match &fuse {
            Err(e) => Err(e.clone()),
            Ok(()) => run_config(c, &p, &base.path)?,
        };
        report.rows.push(match outcome {
            Ok(m) => make_row(&key, None, &m),
            Err(e) => make_row(&key, Some(&e), &Measured::default()),
        });
    }
    prog.finish();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> RestartOpts {
        RestartOpts {
            common: CommonOpts::default(),
            upgrades: None,
            threads: 2,
            interval_ms: 200.0,
            nodes: None,
            memfs_files: None,
            memfs_mib: None,
            configs: None,
            keep_created: false,
            source_dir: "/var/tmp".into(),
            transport: "dev".into(),
        }
    }

    #[test]
    fn sizes_and_choice() {
        let mut o = opts();
        let p = Plan::of(&o);
        assert_eq!((p.upgrades, p.nodes), (20, 1_000_000));
        let all = p.memfs.files * p.memfs.bytes;
        assert!(
            (1 << 30..(1 << 30) + p.memfs.files).contains(&all),
            "1 GiB in all: {all}"
        );
        assert!(Config::ALL.iter().all(|&c| p.full_size(c)));
        o.common.quick = true;
        let q = Plan::of(&o);
        assert_eq!((q.upgrades, q.nodes, q.memfs.files), (3, 20_000, 6400));
        let all = q.memfs.files * q.memfs.bytes;
        assert!(
            (64 << 20..(64 << 20) + q.memfs.files).contains(&all),
            "{all}"
        );
        assert!(!q.full_size(Config::PassthroughNodes));
        assert!(!q.full_size(Config::MemfsData));
        assert!(q.full_size(Config::MemfsIdle), "idle is idle at any size");
        assert!(Config::CrashNodes.passthrough() && Config::CrashNodes.crash());
        assert!(!Config::PassthroughNodes.crash());
        assert_eq!(choose(&o).unwrap(), Config::ALL.to_vec());
        o.configs = Some(vec!["passthrough-idle".into(), "memfs-idle".into()]);
        assert_eq!(
            choose(&o).unwrap(),
            vec![Config::MemfsIdle, Config::PassthroughIdle],
            "run order"
        );
        o.configs = Some(vec!["nfs".into()]);
        assert!(choose(&o).is_err());
    }
}
