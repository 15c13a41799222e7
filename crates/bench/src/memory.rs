//! `uvfs bench memory`: heap bytes per cached vnode, measured with the
//! counting allocator (not estimated): N vnodes created and released (so
//! they sit cached and free, on the free lists), file-system private data
//! empty, heap delta divided by N. Then the same with a name-cache entry
//! naming each (directories of 64, as a walk leaves them): what a name
//! costs on top of its vnode.

use crate::cache::{Cache, Uvfs};
use crate::report::{BarGroup, Report};

/// Heap bytes uvfs may spend per cached vnode.
const BYTES_PER_VNODE_TARGET: f64 = 256.0;
use crate::{row, CommonOpts};

#[derive(clap::Args, Debug, Clone)]
pub struct MemoryOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Vnodes to cache.
    #[arg(long, value_parser = crate::at_least_one())]
    pub vnodes: Option<usize>,
    /// Implementations to run.
    #[arg(long, value_delimiter = ',', default_values_t = vec!["uvfs".to_string(), "freebsd".to_string()])]
    pub impls: Vec<String>,
}

/// Resident set size of this process, from /proc/self/statm.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// (heap bytes per vnode as requested from the allocator, RSS growth per
/// vnode: includes the allocator's own overhead).
fn measure<C: Cache>(make: impl FnOnce() -> C, n: usize) -> Option<(f64, f64)> {
    let rss0 = rss_bytes().unwrap_or(0);
    let ((c, m), bytes) = crate::alloc::measure(|| {
        let c = make();
        let m = c.mount("mem", None);
        for ino in 0..n as u64 {
            drop(c.get(&m, ino, false, || ()));
        }
        (c, m)
    });
    let rss = rss_bytes().unwrap_or(0).saturating_sub(rss0);
    assert!(
        c.numvnodes() >= n as u64 * 9 / 10,
        "vnodes were recycled during the measurement"
    );
    drop(m);
    drop(c);
    bytes.map(|b| (b as f64 / n as f64, rss as f64 / n as f64))
}

/// Files per directory in the named measurement.
const PER_DIR: usize = 64;

/// Heap bytes per file when each of `n` files is cached with a name-cache
/// entry under directories of [`PER_DIR`] (the directories' vnodes count
/// too, which [`name_bytes`] takes out).
fn measure_named<C: Cache>(make: impl FnOnce() -> C, n: usize) -> Option<f64> {
    let ((c, m), bytes) = crate::alloc::measure(|| {
        let c = make();
        let m = c.mount("mem", None);
        let names: Vec<String> = (0..PER_DIR).map(|i| format!("f{i}")).collect();
        for d in 0..n.div_ceil(PER_DIR) {
            let dir = c.get(&m, (n + d) as u64, true, || ());
            for (i, name) in names.iter().enumerate().take(n - d * PER_DIR) {
                let v = c.get(&m, (d * PER_DIR + i) as u64, false, || ());
                c.nc_enter(&dir, name, &v);
            }
        }
        drop(names);
        (c, m)
    });
    assert!(
        c.numvnodes() >= n as u64 * 9 / 10,
        "vnodes were recycled during the measurement"
    );
    drop(m);
    drop(c);
    bytes.map(|b| b as f64 / n as f64)
}

/// What a name adds to its file's vnode: the named measurement less the
/// vnodes it holds (the file's and its share of a directory's).
fn name_bytes(per_named_file: f64, per_vnode: f64) -> f64 {
    per_named_file - per_vnode * (1.0 + 1.0 / PER_DIR as f64)
}

pub fn run(o: &MemoryOpts) -> std::io::Result<Report> {
    let n = o
        .vnodes
        .unwrap_or(if o.common.quick { 100_000 } else { 1_000_000 });
    let mut report = Report::new("memory");
    for name in &o.impls {
        let per = match name.as_str() {
            "uvfs" => measure(|| Uvfs::new(n * 2), n).zip(measure_named(|| Uvfs::new(n * 2), n)),
            "freebsd" => measure(|| crate::freebsd::Replica::new(n * 2, false), n).zip(
                measure_named(|| crate::freebsd::Replica::new(n * 2, false), n),
            ),
            other => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("unknown implementation {other:?}"),
                ))
            }
        };
        let Some(((per, rss), named)) = per else {
            return Err(std::io::Error::other(
                "the counting allocator is not installed (run through the uvfs binary)",
            ));
        };
        report.rows.push(row!(
            "impl" => name, "vnodes" => n, "bytes_per_vnode" => per, "rss_per_vnode" => rss,
            "bytes_per_name" => name_bytes(named, per),
        ));
    }
    Ok(report)
}

pub fn summary(r: &Report) -> Vec<String> {
    r.rows
        .iter()
        .map(|x| {
            format!(
                "{}: {:.0} heap bytes ({:.0} bytes of RSS) per cached vnode at {} vnodes{}; a name-cache entry naming each adds {:.0}",
                x["impl"].as_str().unwrap_or("?"),
                x["bytes_per_vnode"].as_f64().unwrap_or(0.0),
                x["rss_per_vnode"].as_f64().unwrap_or(0.0),
                x["vnodes"],
                if x["impl"] == "uvfs" {
                    let b = x["bytes_per_vnode"].as_f64().unwrap_or(f64::INFINITY);
                    format!(
                        " (target <= {BYTES_PER_VNODE_TARGET}: {})",
                        if b <= BYTES_PER_VNODE_TARGET { "met" } else { "NOT met" }
                    )
                } else {
                    String::new()
                },
                x["bytes_per_name"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

/// Heap bytes per vnode and per name; the 256-byte target on uvfs's
/// vnode bar.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let group = |label: &str, key: &str| BarGroup {
        label: label.into(),
        bars: r
            .rows
            .iter()
            .map(|x| {
                (
                    x["impl"].as_str().unwrap_or("?").to_string(),
                    x[key].as_f64().unwrap_or(0.0),
                )
            })
            .collect(),
        targets: Vec::new(),
    };
    let mut vnode = group("cached vnode", "bytes_per_vnode");
    vnode.target(Some("uvfs"), BYTES_PER_VNODE_TARGET);
    (
        "heap bytes per vnode and per name (lower is better)".into(),
        "bytes".into(),
        vec![vnode, group("name-cache entry", "bytes_per_name")],
    )
}
