//! `uvfs bench memory`: heap bytes per cached vnode, measured with the
//! counting allocator (not estimated): N vnodes created and released (so
//! they sit cached and free, on the free lists), file-system private data
//! empty, heap delta divided by N.

use crate::cache::{Cache, Uvfs};
use crate::report::{BarGroup, Report};
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
            drop(c.get(&m, ino, false, || Box::new(())));
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

pub fn run(o: &MemoryOpts) -> std::io::Result<Report> {
    let n = o
        .vnodes
        .unwrap_or(if o.common.quick { 100_000 } else { 1_000_000 });
    let mut report = Report::new("memory");
    for name in &o.impls {
        let per = match name.as_str() {
            "uvfs" => measure(|| Uvfs::new(n * 2), n),
            "freebsd" => measure(|| crate::freebsd::Replica::new(n * 2, false), n),
            other => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("unknown implementation {other:?}"),
                ))
            }
        };
        let Some((per, rss)) = per else {
            return Err(std::io::Error::other(
                "the counting allocator is not installed (run through the uvfs binary)",
            ));
        };
        report.rows.push(
            row!("impl" => name, "vnodes" => n, "bytes_per_vnode" => per, "rss_per_vnode" => rss),
        );
    }
    Ok(report)
}

pub fn summary(r: &Report) -> Vec<String> {
    r.rows
        .iter()
        .map(|x| {
            format!(
                "{}: {:.0} heap bytes ({:.0} bytes of RSS) per cached vnode at {} vnodes{}",
                x["impl"].as_str().unwrap_or("?"),
                x["bytes_per_vnode"].as_f64().unwrap_or(0.0),
                x["rss_per_vnode"].as_f64().unwrap_or(0.0),
                x["vnodes"],
                if x["impl"] == "uvfs" {
                    " (target <= 256)"
                } else {
                    ""
                }
            )
        })
        .collect()
}

pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let bars = r
        .rows
        .iter()
        .map(|x| {
            (
                x["impl"].as_str().unwrap_or("?").to_string(),
                x["bytes_per_vnode"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    (
        "heap bytes per cached vnode (lower is better)".into(),
        "bytes".into(),
        vec![BarGroup {
            label: "cached vnodes".into(),
            bars,
        }],
    )
}
