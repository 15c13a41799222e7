//! `uvfs bench statstorm`: seed 000 reproduced. T threads each walk their
//! own tree of a synthetic file system through the name cache and the vnode
//! cache, doing a lookup and a stat of every entry (a `find` per thread),
//! once with a limit large enough that nothing is recycled and once with a
//! limit of about 1/50 of the files, for uvfs and the FreeBSD replicas.

use crate::cache::{Cache, Nc, Uvfs};
use crate::cputime::{process_cpu, process_minor_faults};
use crate::report::{median, push_bar, BarGroup, Progress, Report};
use crate::synth::{SynthNode, Tree};
use crate::{row, CommonOpts};
use std::sync::{Arc, Barrier};
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct StatstormOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Thread counts to run (each thread walks its own tree).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2, 20], value_parser = crate::at_least_one())]
    pub threads: Vec<usize>,
    /// Files in all trees together (split evenly across the threads' trees).
    #[arg(long, value_parser = crate::at_least_one())]
    pub files: Option<usize>,
    /// The small vnode limit (default: files / 50).
    #[arg(long, value_parser = crate::at_least_one())]
    pub limit: Option<usize>,
    /// Implementations to run (`none`: no cache at all, the reference for
    /// what the walk itself costs and how far it scales here).
    #[arg(long, value_delimiter = ',', default_values_t = vec!["uvfs".to_string(), "freebsd".to_string(), "freebsd-pre".to_string(), "none".to_string()])]
    pub impls: Vec<String>,
    /// Entries per directory.
    #[arg(long, default_value_t = 64, value_parser = crate::at_least_one())]
    pub fanout: usize,
}

/// One walk of one tree: readdir, then per entry a name-cache lookup (on a
/// miss: the file system's lookup, a vnode get, a name-cache enter), a stat,
/// and recursion into directories.
fn walk<C: Cache>(c: &C, m: &C::Mount, tree: &Tree, dir: &C::Ref, dir_ino: u64) -> u64 {
    let mut n = 0;
    let Some(d) = tree.dirs.get(&dir_ino) else {
        return 0;
    };
    for (name, _, _) in &d.entries {
        let vp = match c.nc_lookup(dir, name) {
            Nc::Hit(v) => v,
            Nc::Negative | Nc::Miss => {
                let (ino, is_dir) = tree.lookup(dir_ino, name).expect("readdir name exists");
                let v = c.get(m, ino, is_dir, || SynthNode {
                    attr: tree.getattr(ino).expect("inode exists"),
                });
                c.nc_enter(dir, name, &v);
                v
            }
        };
        let ino = C::ino(&vp);
        let attr = tree.getattr(ino).expect("stat of a live inode");
        std::hint::black_box(attr);
        n += 1;
        if attr.mode & 0o40000 != 0 {
            n += walk(c, m, tree, &vp, ino);
        }
    }
    n
}

/// What one run of T walkers measured.
#[derive(Clone, Copy, Debug)]
struct Sample {
    secs: f64,
    stats: u64,
    recycles: u64,
    /// CPU time of the whole process during the walk (walkers and the
    /// background reclaimer): with T=1 the reclaimer runs on the other
    /// core, so wall time alone hides how much CPU a stat costs.
    cpu_secs: f64,
    /// When the first walker finished: with T walkers of equal trees, a
    /// first finish well before the last means the cores were not shared
    /// evenly (a core idles while the last walker finishes).
    first_done_secs: f64,
    /// Minor page faults of the process during the walk.
    faults: u64,
}

/// Runs T walkers over T trees on a fresh cache.
fn run_once<C: Cache>(c: Arc<C>, trees: &Arc<Vec<Tree>>, threads: usize) -> Sample {
    let m = c.mount("synth", None);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (c, m, trees, barrier) = (c.clone(), m.clone(), trees.clone(), barrier.clone());
            std::thread::spawn(move || {
                let tree = &trees[t];
                let root = c.get(&m, tree.root, true, || SynthNode {
                    attr: tree.getattr(tree.root).expect("root"),
                });
                barrier.wait();
                let n = walk(&*c, &m, tree, &root, tree.root);
                (n, Instant::now())
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let cpu0 = process_cpu();
    let faults0 = process_minor_faults();
    let done: Vec<(u64, Instant)> = hs.into_iter().map(|h| h.join().expect("walker")).collect();
    let secs = start.elapsed().as_secs_f64();
    let stats = done.iter().map(|d| d.0).sum();
    let first_done_secs = done
        .iter()
        .map(|d| d.1.duration_since(start).as_secs_f64())
        .fold(f64::INFINITY, f64::min);
    let cpu_secs = (process_cpu().saturating_sub(cpu0)).as_secs_f64();
    let faults = process_minor_faults().saturating_sub(faults0);
    let recycles = c
        .counters()
        .iter()
        .find(|(k, _)| k == "vfs.vnode.stats.recycles")
        .map_or(0, |(_, v)| *v);
    Sample {
        secs,
        stats,
        recycles,
        cpu_secs,
        first_done_secs,
        faults,
    }
}

/// Runs one configuration on (trees, threads).
type Runner = Box<dyn FnOnce(&Arc<Vec<Tree>>, usize) -> Sample>;

fn make(name: &str, limit: usize) -> Option<Runner> {
    match name {
        "uvfs" => Some(Box::new(move |t, n| {
            run_once(Arc::new(Uvfs::new(limit)), t, n)
        })),
        "freebsd" => Some(Box::new(move |t, n| {
            run_once(Arc::new(crate::freebsd::Replica::new(limit, false)), t, n)
        })),
        "freebsd-pre" => Some(Box::new(move |t, n| {
            run_once(Arc::new(crate::freebsd::Replica::new(limit, true)), t, n)
        })),
        "none" => Some(Box::new(move |t, n| {
            run_once(Arc::new(crate::nocache::NoCache), t, n)
        })),
        _ => None,
    }
}

pub fn run(o: &StatstormOpts) -> std::io::Result<Report> {
    let files = o
        .files
        .unwrap_or(if o.common.quick { 100_000 } else { 400_000 });
    let small = o.limit.unwrap_or((files / 50).max(64));
    let large = files * 2 + 1000;
    let repeats = if o.common.quick {
        1
    } else {
        o.common.repeats.max(1)
    };
    for i in &o.impls {
        if make(i, 1).is_none() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("unknown implementation {i:?} (uvfs, freebsd, freebsd-pre, none)"),
            ));
        }
    }
    let mut report = Report::new("statstorm");
    let mut prog = Progress::new(o.threads.len() * 2 * o.impls.len() * repeats);
    // Every configuration once per repeat, repeats outermost: slow drift
    // in a shared machine's speed then hits every configuration alike, and
    // the medians compare like with like (thread counts included).
    let forests: Vec<(usize, Arc<Vec<Tree>>)> = o
        .threads
        .iter()
        .map(|&t| {
            let t = t.max(1);
            let per = files / t;
            let trees = (0..t)
                .map(|i| Tree::build((i as u64 + 1) << 40, per, o.fanout))
                .collect();
            (t, Arc::new(trees))
        })
        .collect();
    let kinds = [("large", large), ("small", small)];
    // samples[(thread index, kind index, impl index)]
    let mut samples: Vec<Vec<Sample>> =
        vec![Vec::new(); forests.len() * kinds.len() * o.impls.len()];
    let at = |ti: usize, ki: usize, k: usize| (ti * kinds.len() + ki) * o.impls.len() + k;
    for _ in 0..repeats {
        for (ti, (t, trees)) in forests.iter().enumerate() {
            for (ki, (kind, limit)) in kinds.iter().enumerate() {
                for (k, name) in o.impls.iter().enumerate() {
                    prog.step(&format!("statstorm {name} T={t} limit={kind}"));
                    let f = make(name, *limit).expect("checked above");
                    samples[at(ti, ki, k)].push(f(trees, *t));
                }
            }
        }
    }
    for (ti, (t, _)) in forests.iter().enumerate() {
        for (ki, (kind, limit)) in kinds.iter().enumerate() {
            for (k, name) in o.impls.iter().enumerate() {
                let s = &samples[at(ti, ki, k)];
                let med = |f: fn(&Sample) -> f64| median(&s.iter().map(f).collect::<Vec<_>>());
                let secs = med(|x| x.secs);
                let stats = s[0].stats;
                let recycled = med(|x| x.recycles as f64);
                let cpu = med(|x| x.cpu_secs);
                let first = med(|x| x.first_done_secs);
                let faults = med(|x| x.faults as f64);
                report.rows.push(row!(
                    "impl" => name, "threads" => t, "limit" => limit, "limit_kind" => kind,
                    "files" => stats, "secs" => secs, "ops_per_sec" => stats as f64 / secs,
                    "recycled" => recycled, "cpu_ns_per_op" => (cpu * 1e9 / stats.max(1) as f64).round(),
                    "cores_busy" => (cpu / secs * 100.0).round() / 100.0,
                    "first_done_secs" => first, "repeats" => repeats,
                    "faults_per_op" => (faults / stats.max(1) as f64 * 1000.0).round() / 1000.0,
                    "heap_huge_pages" => !crate::hugepages::disabled(),
                ));
            }
        }
    }
    prog.finish();
    Ok(report)
}

/// Target ratios from a statstorm report, as printable lines.
fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

pub fn summary(r: &Report) -> Vec<String> {
    let field = |imp: &str, t: usize, kind: &str, key: &str| -> Option<f64> {
        r.rows
            .iter()
            .find(|x| x["impl"] == imp && x["threads"] == t && x["limit_kind"] == kind)
            .and_then(|x| x[key].as_f64())
    };
    let get = |imp: &str, t: usize, kind: &str| field(imp, t, kind, "ops_per_sec");
    let cpu = |t: usize, kind: &str| field("uvfs", t, kind, "cpu_ns_per_op");
    let faults = |t: usize, kind: &str| field("uvfs", t, kind, "faults_per_op");
    let tmax = r
        .rows
        .iter()
        .filter_map(|x| x["threads"].as_u64())
        .max()
        .unwrap_or(1) as usize;
    let mut out = Vec::new();
    if let (Some(l), Some(s)) = (get("uvfs", tmax, "large"), get("uvfs", tmax, "small")) {
        out.push(format!(
            "uvfs small-limit time / large-limit time at T={tmax}: {:.2} (target <= 1.2: {}; FreeBSD after seed 000: ~1.9)",
            l / s,
            verdict(l / s <= 1.2)
        ));
    }
    for imp in ["freebsd", "freebsd-pre"] {
        if let (Some(u), Some(f)) = (get("uvfs", tmax, "small"), get(imp, tmax, "small")) {
            out.push(format!(
                "uvfs / {imp} throughput, small limit, T={tmax}: {:.2}x (target >= 2: {})",
                u / f,
                verdict(u / f >= 2.0)
            ));
        }
        if let (Some(l), Some(s)) = (get(imp, tmax, "large"), get(imp, tmax, "small")) {
            out.push(format!(
                "{imp} small-limit time / large-limit time at T={tmax}: {:.2}",
                l / s
            ));
        }
    }
    for kind in ["large", "small"] {
        if let (Some(a), Some(b)) = (get("uvfs", 1, kind), get("uvfs", 2, kind)) {
            out.push(format!(
                "uvfs 2-thread / 1-thread throughput, {kind} limit: {:.2}x (target >= 1.8: {}){}{}{}",
                b / a,
                verdict(b / a >= 1.8),
                match (cpu(1, kind), cpu(2, kind)) {
                    (Some(x), Some(y)) => format!("; CPU per stat {x:.0} / {y:.0} ns"),
                    _ => String::new(),
                },
                match (faults(1, kind), faults(2, kind)) {
                    (Some(x), Some(y)) => format!("; page faults per stat {x:.3} / {y:.3}"),
                    _ => String::new(),
                },
                match (get("none", 1, kind), get("none", 2, kind)) {
                    (Some(x), Some(y)) => format!("; with no cache at all: {:.2}x", y / x),
                    _ => String::new(),
                }
            ));
        }
    }
    out
}

/// Stats per second per (threads, limit); targets on uvfs's bars: 2x the
/// faster FreeBSD replica at the small limit and most threads, 1.8x its
/// own 1-thread rate at 2 threads.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    let label = |t: u64, kind: &str| format!("T={t} {kind}");
    for x in &r.rows {
        push_bar(
            &mut groups,
            label(
                x["threads"].as_u64().unwrap_or(0),
                x["limit_kind"].as_str().unwrap_or(""),
            ),
            x["impl"].as_str().unwrap_or("?").to_string(),
            x["ops_per_sec"].as_f64().unwrap_or(0.0),
        );
    }
    let tmax = r
        .rows
        .iter()
        .filter_map(|x| x["threads"].as_u64())
        .max()
        .unwrap_or(1);
    let value = |groups: &[BarGroup], l: &str, s: &str| {
        groups
            .iter()
            .find(|g| g.label == l)
            .and_then(|g| g.value(s))
    };
    let small = label(tmax, "small");
    let freebsd = ["freebsd", "freebsd-pre"]
        .iter()
        .filter_map(|s| value(&groups, &small, s))
        .reduce(f64::max);
    let scaling: Vec<(String, Option<f64>)> = ["large", "small"]
        .iter()
        .map(|k| (label(2, k), value(&groups, &label(1, k), "uvfs")))
        .collect();
    for g in &mut groups {
        if g.label == small {
            if let Some(f) = freebsd {
                g.target(Some("uvfs"), 2.0 * f);
            }
        }
        if let Some((_, Some(one))) = scaling.iter().find(|(l, _)| *l == g.label) {
            g.target(Some("uvfs"), 1.8 * one);
        }
    }
    (
        "statstorm: lookup+stat per second (higher is better)".into(),
        "stats/s".into(),
        groups,
    )
}
