//! The rows of `uvfs bench seqio`: medians over repeats, ratios against
//! native and the best peer, the summary lines, the chart, and which
//! failures fail the run.

use super::passes::PassSample;
use super::{
    MEMFS, NATIVE, PASSTHROUGH, PASSTHROUGH_DEV, PASSTHROUGH_DEV_NOSUP, PASSTHROUGH_SERVER_IO,
    PEERS, TMPFS,
};
use crate::procstat::Peaks;
use crate::report::{median, push_bar, BarGroup, Report, Row};
use crate::row;
use serde_json::{json, Value};
use std::io;

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// Ops of a repeat, in order.
pub const OPS: [&str; 4] = ["write", "read", "reread", "copy"];

/// One row from the samples of all repeats of (fs, op): medians of the
/// passes that succeeded; `ok` only if every pass did.
pub fn build_row(fs: &str, op: &str, bytes: u64, block: usize, samples: &[PassSample]) -> Row {
    let secs: Vec<f64> = samples.iter().filter_map(|s| s.secs).collect();
    let ok = !samples.is_empty() && secs.len() == samples.len();
    let med = (!secs.is_empty()).then(|| median(&secs));
    let mut r = row!(
        "fs" => fs,
        "op" => op,
        "bytes" => bytes,
        "block" => block,
        "secs" => med,
        "mib_per_sec" => med.map(|s| bytes as f64 / MIB / s),
        "ok" => ok,
        "repeats" => samples.len(),
        "ok_repeats" => secs.len(),
    );
    let ok_samples: Vec<&PassSample> = samples.iter().filter(|s| s.secs.is_some()).collect();
    if op != "write" && !ok_samples.is_empty() {
        let v: Vec<f64> = ok_samples.iter().map(|s| s.verify_secs).collect();
        r.insert("verify_secs".into(), json!(median(&v)));
    }
    if let Some(e) = samples.iter().find_map(|s| s.error.as_ref()) {
        r.insert("error".into(), json!(e));
        if e.starts_with("setup failed") {
            r.insert("setup_failed".into(), json!(true));
        }
    }
    let peaks: Vec<Peaks> = samples.iter().filter_map(|s| s.peaks).collect();
    if !peaks.is_empty() {
        let max = |f: fn(&Peaks) -> u64| peaks.iter().map(f).max().unwrap_or(0);
        r.insert("rss_bytes".into(), json!(max(|p| p.hwm_bytes)));
        r.insert("pass_rss_bytes".into(), json!(max(|p| p.max_rss_bytes)));
        r.insert("max_fds".into(), json!(max(|p| p.max_fds)));
    }
    let cpu: Vec<f64> = ok_samples
        .iter()
        .filter_map(|s| s.server_cpu_secs)
        .collect();
    if !cpu.is_empty() {
        r.insert(
            "server_cpu_s_per_gib".into(),
            json!(median(&cpu) / (bytes as f64 / GIB)),
        );
    }
    let reqs: Vec<(u64, u64)> = ok_samples.iter().filter_map(|s| s.requests).collect();
    if !reqs.is_empty() {
        let all: Vec<f64> = reqs.iter().map(|r| r.0 as f64).collect();
        r.insert(
            "requests_per_mib".into(),
            json!(median(&all) / (bytes as f64 / MIB)),
        );
        let data: Vec<f64> = reqs.iter().map(|r| r.1 as f64).collect();
        let d = median(&data);
        r.insert(
            "kib_per_request".into(),
            json!((d > 0.0).then(|| bytes as f64 / 1024.0 / d)),
        );
    }
    r
}

/// A numeric cell of a row, if it is there.
pub(super) fn num(r: &Row, key: &str) -> Option<f64> {
    r.get(key).and_then(Value::as_f64)
}

/// A text cell of a row, `?` if it is not there.
fn text<'a>(r: &'a Row, key: &str) -> &'a str {
    r.get(key).and_then(Value::as_str).unwrap_or("?")
}

pub(super) fn is_ok(r: &Row) -> bool {
    r.get("ok") == Some(&Value::Bool(true))
}

/// `vs_native` on every FUSE row, `vs_best_peer` (with `best_peer`) on
/// the uvfs rows and `vs_tmpfs` on memfs's, same op, from rows that
/// succeeded.
pub fn add_ratios(report: &mut Report) {
    let rows = report.rows.clone();
    let rate = |fs: &str, op: &Value| {
        rows.iter()
            .find(|r| r["fs"] == fs && &r["op"] == op && is_ok(r))
            .and_then(|r| num(r, "mib_per_sec"))
    };
    for r in &mut report.rows {
        let (Some(v), true) = (num(r, "mib_per_sec"), is_ok(r)) else {
            continue;
        };
        let op = r["op"].clone();
        if r["fs"] == MEMFS {
            if let Some(b) = rate(TMPFS, &op) {
                r.insert("vs_tmpfs".into(), json!(v / b));
            }
        }
        if r["fs"] != NATIVE && r["fs"] != TMPFS {
            if let Some(b) = rate(NATIVE, &op) {
                r.insert("vs_native".into(), json!(v / b));
            }
        }
        if r["fs"] == PASSTHROUGH || r["fs"] == PASSTHROUGH_SERVER_IO || r["fs"] == MEMFS {
            let best = PEERS
                .iter()
                .filter_map(|p| Some((*p, rate(p, &op)?)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((p, b)) = best {
                r.insert("vs_best_peer".into(), json!(v / b));
                r.insert("best_peer".into(), json!(p));
            }
        }
    }
}

/// Rows that fail the run: every failed pass except a peer that could not
/// be set up (reported, but the uvfs side still ran).
pub fn check(r: &Report) -> io::Result<()> {
    let bad: Vec<String> = r
        .rows
        .iter()
        .filter(|x| !is_ok(x))
        .filter(|x| {
            !(x.get("setup_failed") == Some(&Value::Bool(true))
                && PEERS.iter().any(|p| x["fs"] == *p))
        })
        .map(|x| format!("{} {}", text(x, "fs"), text(x, "op")))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "seqio passes failed: {}",
            bad.join(", ")
        )))
    }
}

/// Table columns for `emit`.
pub const COLUMNS: &[&str] = &[
    "fs",
    "op",
    "bytes",
    "secs",
    "mib_per_sec",
    "vs_native",
    "vs_best_peer",
    "vs_tmpfs",
    "ok",
    "rss_bytes",
    "max_fds",
    "server_cpu_s_per_gib",
    "kib_per_request",
];

/// Target ratios and failures, as printable lines.
pub fn summary(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let row = |fs: &str, op: &str| r.rows.iter().find(|x| x["fs"] == fs && x["op"] == op);
    for op in OPS {
        // A failed uvfs row has no ratio; the FAILED lines below say why.
        let Some(x) = row(PASSTHROUGH, op).filter(|x| is_ok(x)) else {
            continue;
        };
        if op != "reread" {
            // The target is on sequential reads and writes.
            let target = |v: f64| match op {
                "write" | "read" => {
                    format!(
                        "target >= 0.9: {}; ",
                        if v >= 0.9 { "met" } else { "NOT met" }
                    )
                }
                _ => String::new(),
            };
            match num(x, "vs_best_peer") {
                Some(v) => out.push(format!(
                    "uvfs-passthrough {op} vs best peer: {v:.2}x ({}{:.0} vs {} {:.0} MiB/s)",
                    target(v),
                    num(x, "mib_per_sec").unwrap_or(f64::NAN),
                    text(x, "best_peer"),
                    num(x, "mib_per_sec").unwrap_or(f64::NAN) / v,
                )),
                None => {
                    let why: Vec<String> = PEERS
                        .iter()
                        .filter_map(|p| row(p, op))
                        .filter(|p| !is_ok(p))
                        .map(|p| format!("{}: {}", text(p, "fs"), text(p, "error")))
                        .collect();
                    out.push(format!(
                        "uvfs-passthrough {op} vs best peer: n/a (no peer measured{}{})",
                        if why.is_empty() { "" } else { ": " },
                        why.join("; ")
                    ));
                }
            }
        }
        if let Some(v) = num(x, "vs_native") {
            out.push(format!("uvfs-passthrough {op} vs native: {v:.2}x"));
        }
    }
    for op in OPS {
        let rate = |fs| {
            row(fs, op)
                .filter(|x| is_ok(x))
                .and_then(|x| num(x, "mib_per_sec"))
        };
        if let (Some(k), Some(s)) = (rate(PASSTHROUGH), rate(PASSTHROUGH_SERVER_IO)) {
            out.push(format!(
                "uvfs-passthrough {op}: kernel I/O / server I/O = {:.2}x ({k:.0} vs {s:.0} MiB/s)",
                k / s
            ));
        }
        if let (Some(j), Some(n)) = (rate(PASSTHROUGH_DEV), rate(PASSTHROUGH_DEV_NOSUP)) {
            out.push(format!(
                "uvfs-passthrough-dev {op}: supervised / unsupervised = {:.3}x ({j:.0} vs {n:.0} MiB/s)",
                j / n
            ));
        }
    }
    for op in OPS {
        if let Some(v) = row(MEMFS, op).and_then(|x| num(x, "vs_tmpfs")) {
            out.push(format!("uvfs-memfs {op} vs tmpfs: {v:.2}x"));
        }
    }
    let servers: Vec<String> = r
        .rows
        .iter()
        .filter(|x| x["op"] == "write")
        .filter_map(|x| {
            // rss_bytes is the lifetime peak: the largest on any row.
            let fs = x.get("fs")?.as_str()?;
            let all = r.rows.iter().filter(|y| y["fs"] == fs);
            let rss = all
                .clone()
                .filter_map(|y| y.get("rss_bytes")?.as_u64())
                .max()?;
            let fds = all.filter_map(|y| y.get("max_fds")?.as_u64()).max()?;
            Some(format!("{fs} {:.1} MiB, {fds} fds", rss as f64 / MIB))
        })
        .collect();
    if !servers.is_empty() {
        out.push(format!(
            "server peak RSS (VmHWM) and fds: {}",
            servers.join("; ")
        ));
    }
    for x in r.rows.iter().filter(|x| !is_ok(x)) {
        out.push(format!(
            "FAILED: {} {} ({} of {} passes ok): {}",
            text(x, "fs"),
            text(x, "op"),
            x.get("ok_repeats").unwrap_or(&Value::Null),
            x.get("repeats").unwrap_or(&Value::Null),
            text(x, "error")
        ));
    }
    if let Some(x) = r.rows.first() {
        out.push(format!(
            "note: {} MiB file in {} KiB blocks; write = create + writes + fsync + close; \
             read = after dropping dentries, inodes and page cache (tmpfs: nothing to drop); \
             reread = at once after; copy = copy_file_range to a new file + fsync + close; \
             secs exclude content checks",
            num(x, "bytes").unwrap_or(0.0) / MIB,
            num(x, "block").unwrap_or(0.0) / 1024.0,
        ));
    }
    out
}

/// Bar chart: MiB/s per op, one bar per file system; the target (0.9x
/// the best peer) on the passthrough's write and read bars.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    for x in r.rows.iter().filter(|x| is_ok(x)) {
        push_bar(
            &mut groups,
            text(x, "op").to_string(),
            text(x, "fs").to_string(),
            num(x, "mib_per_sec").unwrap_or(0.0),
        );
    }
    for g in groups
        .iter_mut()
        .filter(|g| g.label == "write" || g.label == "read")
    {
        if let Some(best) = PEERS.iter().filter_map(|p| g.value(p)).reduce(f64::max) {
            g.target(Some(PASSTHROUGH), 0.9 * best);
        }
    }
    (
        "seqio: sequential throughput of one large file (higher is better)".into(),
        "MiB/s".into(),
        groups,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seqio::{FBR, LIBFUSE, TMPFS};

    fn ok(secs: f64) -> PassSample {
        PassSample {
            secs: Some(secs),
            verify_secs: 0.01,
            peaks: Some(Peaks {
                max_fds: 10,
                max_rss_bytes: 5 << 20,
                hwm_bytes: 6 << 20,
                samples: 4,
            }),
            server_cpu_secs: Some(0.5),
            requests: Some((300, 256)),
            ..PassSample::default()
        }
    }

    #[test]
    fn row_is_median_of_repeats() {
        let bytes = 256 << 20;
        let r = build_row(
            PASSTHROUGH,
            "read",
            bytes,
            1 << 20,
            &[ok(2.0), ok(1.0), ok(4.0)],
        );
        assert_eq!(r["ok"], true);
        assert_eq!(r["secs"].as_f64(), Some(2.0));
        assert_eq!(r["mib_per_sec"].as_f64(), Some(128.0));
        assert_eq!(r["rss_bytes"].as_u64(), Some(6 << 20));
        assert_eq!(r["max_fds"].as_u64(), Some(10));
        assert_eq!(r["verify_secs"].as_f64(), Some(0.01));
        assert_eq!(r["server_cpu_s_per_gib"].as_f64(), Some(2.0));
        assert_eq!(r["kib_per_request"].as_f64(), Some(1024.0));
        assert_eq!(r["requests_per_mib"].as_f64(), Some(300.0 / 256.0));
        assert!(r.get("error").is_none());
        // Native: no server figures.
        let n = build_row(
            NATIVE,
            "write",
            bytes,
            1 << 20,
            &[PassSample {
                secs: Some(1.0),
                ..PassSample::default()
            }],
        );
        assert!(n.get("rss_bytes").is_none() && n.get("verify_secs").is_none());
    }

    #[test]
    fn a_failed_pass_fails_the_row() {
        let bad = PassSample::failed("read x: content mismatch at offset 4096".into());
        let r = build_row(
            PASSTHROUGH,
            "read",
            1 << 20,
            1 << 20,
            &[ok(1.0), bad, ok(3.0)],
        );
        assert_eq!(r["ok"], false);
        assert_eq!(r["ok_repeats"], 2);
        assert!(r["error"].as_str().unwrap().contains("mismatch"));
        // Figures of the passes that did run are kept, for the record.
        assert_eq!(r["secs"].as_f64(), Some(2.0));
        let none = build_row(
            LIBFUSE,
            "write",
            1 << 20,
            1 << 20,
            &[PassSample::failed(
                "setup failed: peer module not available".into(),
            )],
        );
        assert_eq!(none["ok"], false);
        assert!(none["mib_per_sec"].is_null());
        assert_eq!(none["setup_failed"], true);
        assert!(!is_ok(&build_row(NATIVE, "read", 1, 4096, &[])));
    }

    fn report(rates: &[(&str, &str, f64, bool)]) -> Report {
        let mut r = Report::new("seqio");
        for &(fs, op, v, good) in rates {
            let mut x = row!("fs" => fs, "op" => op, "bytes" => 1u64 << 30, "block" => 1 << 20,
                "mib_per_sec" => v, "ok" => good, "ok_repeats" => 3, "repeats" => 3);
            if !good {
                x.insert(
                    "error".into(),
                    json!("setup failed: peer module not available"),
                );
                x.insert("setup_failed".into(), json!(true));
            }
            r.rows.push(x);
        }
        add_ratios(&mut r);
        r
    }

    fn row_of<'a>(r: &'a Report, fs: &str, op: &str) -> &'a Row {
        r.rows
            .iter()
            .find(|x| x["fs"] == fs && x["op"] == op)
            .unwrap()
    }

    #[test]
    fn ratios_against_native_and_best_peer() {
        let r = report(&[
            (NATIVE, "write", 1000.0, true),
            (PASSTHROUGH, "write", 900.0, true),
            (LIBFUSE, "write", 800.0, true),
            (FBR, "write", 1200.0, false),
            (NATIVE, "read", 2000.0, true),
            (PASSTHROUGH, "read", 1000.0, true),
            (LIBFUSE, "read", 1500.0, true),
            (FBR, "read", 1250.0, true),
        ]);
        let get = |fs: &str, op: &str| row_of(&r, fs, op);
        let w = get(PASSTHROUGH, "write");
        // The failed peer row does not count as the best peer.
        assert_eq!(w["vs_best_peer"].as_f64(), Some(900.0 / 800.0));
        assert_eq!(w["best_peer"], LIBFUSE);
        assert_eq!(w["vs_native"].as_f64(), Some(0.9));
        let rd = get(PASSTHROUGH, "read");
        assert_eq!(rd["vs_best_peer"].as_f64(), Some(1000.0 / 1500.0));
        assert!(get(LIBFUSE, "read").get("vs_best_peer").is_none());
        let s = summary(&r).join("\n");
        assert!(
            s.contains("uvfs-passthrough write vs best peer: 1.12x (target >= 0.9: met"),
            "{s}"
        );
        assert!(
            s.contains("uvfs-passthrough read vs best peer: 0.67x (target >= 0.9: NOT met"),
            "{s}"
        );
        assert!(s.contains("uvfs-passthrough write vs native: 0.90x"), "{s}");
        assert!(s.contains("FAILED: fuse-backend-rs write"), "{s}");
        // A peer that could not start does not fail the run...
        assert!(check(&r).is_ok());
        let (_, _, g) = chart(&r);
        assert_eq!(g.len(), 2);
    }

    #[test]
    fn copy_rows_carry_no_target_and_memfs_is_held_against_tmpfs() {
        let r = report(&[
            (NATIVE, "copy", 1000.0, true),
            (PASSTHROUGH, "copy", 800.0, true),
            (LIBFUSE, "copy", 400.0, true),
            (MEMFS, "copy", 3000.0, true),
            (TMPFS, "copy", 1500.0, true),
            (MEMFS, "write", 500.0, true),
            (TMPFS, "write", 1000.0, true),
        ]);
        let get = |fs: &str, op: &str| row_of(&r, fs, op);
        assert_eq!(get(MEMFS, "copy")["vs_tmpfs"].as_f64(), Some(2.0));
        assert_eq!(get(MEMFS, "write")["vs_tmpfs"].as_f64(), Some(0.5));
        // tmpfs is not a FUSE mount of the native directory.
        assert!(get(TMPFS, "copy").get("vs_native").is_none());
        assert!(get(PASSTHROUGH, "copy").get("vs_tmpfs").is_none());
        let s = summary(&r).join("\n");
        assert!(
            s.contains("uvfs-passthrough copy vs best peer: 2.00x (800 vs libfuse"),
            "{s}"
        );
        assert!(s.contains("uvfs-memfs copy vs tmpfs: 2.00x"), "{s}");
        assert!(s.contains("uvfs-memfs write vs tmpfs: 0.50x"), "{s}");
    }

    #[test]
    fn server_memory_line_takes_the_peak_of_any_op() {
        let mut r = Report::new("seqio");
        for (op, rss) in [("write", 10u64 << 20), ("read", 12 << 20)] {
            let mut p = PassSample {
                secs: Some(1.0),
                ..ok(1.0)
            };
            p.peaks = p.peaks.map(|k| Peaks {
                hwm_bytes: rss,
                ..k
            });
            r.rows
                .push(build_row(PASSTHROUGH, op, 1 << 20, 1 << 20, &[p]));
        }
        r.rows.push(build_row(
            NATIVE,
            "write",
            1 << 20,
            1 << 20,
            &[PassSample {
                secs: Some(1.0),
                ..PassSample::default()
            }],
        ));
        let s = summary(&r).join("\n");
        assert!(
            s.contains("server peak RSS (VmHWM) and fds: uvfs-passthrough 12.0 MiB, 10 fds\n"),
            "{s}"
        );
    }

    #[test]
    fn no_peer_and_failed_uvfs() {
        let r = report(&[
            (PASSTHROUGH, "write", 900.0, true),
            (LIBFUSE, "write", 0.0, false),
            (PASSTHROUGH, "read", 900.0, false),
        ]);
        let s = summary(&r).join("\n");
        assert!(
            s.contains("write vs best peer: n/a (no peer measured: libfuse-passthrough_ll: setup failed: peer module not available)"),
            "{s}"
        );
        // No ratio for a failed uvfs row, only its FAILED line.
        assert!(!s.contains("read vs"), "{s}");
        assert!(s.contains("FAILED: uvfs-passthrough read"), "{s}");
        // ...and a failed uvfs pass fails the run.
        let e = check(&r).unwrap_err().to_string();
        assert!(e.contains("uvfs-passthrough read"), "{e}");
    }
}
