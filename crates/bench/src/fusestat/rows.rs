//! Passes into report rows: medians over repeats, server figures per
//! stat and per request, failed rows for walks that did not complete,
//! and the ratios against tmpfs and the native tree. Kept from the
//! summary text so that the JSON a run writes has one source.

use super::pass::PassSample;
use super::summary::num;
use super::{NATIVE, PASSTHROUGHS, PEERS, TMPFS};
use crate::fuse_mount::ServerSample;
use crate::procstat::Peaks;
use crate::report::{median, Report, Row};
use crate::row;
use serde_json::{json, Value};

/// Per-stat and per-request server figures of a pass (medians over
/// repeats): requests/stat, CPU us/request, CPU us/stat, requests/stat by
/// opcode.
pub(super) fn server_fields(samples: &[PassSample]) -> Option<Row> {
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
pub(super) fn add_ratios(report: &mut Report) {
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
pub(super) struct RowKey<'a> {
    pub(super) fs: &'a str,
    pub(super) threads: usize,
    pub(super) cold: bool,
    pub(super) files: usize,
    /// Entries in the tree: what a complete walk stats.
    pub(super) entries: u64,
    pub(super) repeats: usize,
    pub(super) build_secs: f64,
    /// Served by a process, whose fds and RSS are measured (else null).
    pub(super) served: bool,
    pub(super) fd_limit: Option<u64>,
    pub(super) fd_budget: Option<u64>,
}

/// One row: medians over the repeats when every pass completed; else a
/// failed row (`ok: false`) with how far the failed passes got (`seen`,
/// their median), the first error, and no rate. `setup_error`: the target
/// never ran (a peer that could not be built or started).
pub(super) fn make_row(k: &RowKey, setup_error: Option<&str>, ss: &[PassSample]) -> Row {
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
