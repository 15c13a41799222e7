//! The rows of `uvfs bench devwork`: one per file system (median seconds
//! per step, the transport, requests per file unpacked), then one per
//! ratio (medians of the repeats' own ratios), the summary lines with the
//! per-opcode breakdown and issue 29's targets, the chart, and which
//! failures fail the run.

use super::steps::Step;
use super::{StepSample, Workload, MEMFS, NATIVE, PASSTHROUGH, TMPFS};
use crate::peers::PeerKind;
use crate::report::{median, BarGroup, Report, Row};
use crate::row;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io;

/// The table's columns.
pub const COLUMNS: [&str; 10] = [
    "fs",
    "transport",
    "untar",
    "git_commit",
    "git_status",
    "git_grep",
    "sqlite",
    "rm_rf",
    "req_per_file",
    "untar_errors",
];

/// Ratios issue 29 bounds: `(numerator, denominator, step, at most)`.
const TARGETS: [(&str, &str, Step, f64); 7] = [
    (MEMFS, TMPFS, Step::Untar, 2.0),
    (MEMFS, TMPFS, Step::GitCommit, 1.5),
    (MEMFS, TMPFS, Step::Rm, 2.0),
    (PASSTHROUGH, NATIVE, Step::Untar, 1.3),
    (PASSTHROUGH, NATIVE, Step::GitCommit, 1.5),
    (PASSTHROUGH, NATIVE, Step::GitStatus, 2.0),
    (PASSTHROUGH, NATIVE, Step::Rm, 1.5),
];

/// How many times faster than go-fuse's loopback issue 29 wants every
/// mount on every step.
const GO_FUSE_FACTOR: f64 = 2.0;

/// Requests per file unpacked issue 29 allows.
pub const MAX_REQUESTS_PER_FILE: f64 = 7.0;

/// Whether `name` is go-fuse's loopback (whatever `peers.rs` calls it).
pub fn is_go_fuse(name: &str) -> bool {
    name.contains("go-fuse")
}

fn median_u64(xs: impl Iterator<Item = u64>) -> Option<f64> {
    let v: Vec<f64> = xs.map(|x| x as f64).collect();
    (!v.is_empty()).then(|| median(&v))
}

/// A median count as JSON: an integer when it is one (odd repeats).
fn count(x: f64) -> Value {
    if x.fract() == 0.0 && x >= 0.0 && x < u64::MAX as f64 {
        json!(x as u64)
    } else {
        json!(x)
    }
}

/// Medians per opcode over `samples` (an opcode missing from one counts
/// 0 there).
fn median_ops(samples: &[&super::Counters]) -> BTreeMap<String, f64> {
    let ops: BTreeSet<&String> = samples.iter().flat_map(|c| c.by_op.keys()).collect();
    ops.into_iter()
        .filter_map(|op| {
            let m = median_u64(
                samples
                    .iter()
                    .map(|c| c.by_op.get(op).copied().unwrap_or(0)),
            )?;
            Some((op.clone(), m))
        })
        .collect()
}

/// The row of one file system from its repeats (`samples[repeat][step]`).
pub fn fs_row(
    name: &str,
    samples: &[Vec<StepSample>],
    w: &Workload,
    uvfs: bool,
    peer_uring: Option<bool>,
) -> Row {
    let all_ok = !samples.is_empty()
        && samples
            .iter()
            .all(|rep| rep.iter().all(|s| s.error.is_none()));
    let mut r = row!(
        "kind" => "fs",
        "fs" => name,
        "ok" => all_ok,
        "repeats" => samples.len(),
        "files" => w.members,
        "regular_files" => w.regular_files,
        "symlinks" => w.symlinks,
        "dirs" => w.dirs,
        "bytes" => w.bytes,
        "tarball_bytes" => w.tarball_bytes,
        "sqlite_inserts" => w.inserts,
    );
    for (i, step) in Step::ALL.iter().enumerate() {
        let secs: Vec<f64> = samples.iter().filter_map(|rep| rep[i].secs).collect();
        r.insert(
            step.name().into(),
            json!((!secs.is_empty()).then(|| median(&secs))),
        );
        r.insert(format!("{}_all", step.name()), json!(secs));
    }
    if let Some(e) = samples
        .iter()
        .flat_map(|rep| rep.iter().filter_map(|s| s.error.as_ref()))
        .find(|e| !e.starts_with("not run"))
    {
        r.insert("error".into(), json!(e));
        if e.starts_with("setup failed") {
            r.insert("setup_failed".into(), json!(true));
        }
    }
    // Every repeat whose unpack passed its check unpacked this tree.
    if samples.iter().any(|rep| rep[0].secs.is_some()) {
        r.insert("tree_checksum".into(), json!(w.checksum));
    }
    if let Some(ring) = peer_uring {
        // A peer that holds no io_uring instance reads /dev/fuse.
        let t = if ring { "io_uring" } else { "/dev/fuse" };
        r.insert("transport".into(), json!(t));
    }
    if !uvfs {
        return r;
    }
    let untar: Vec<&super::Counters> = samples
        .iter()
        .filter_map(|rep| rep[0].counters.as_ref())
        .collect();
    if let Some(last) = untar.last() {
        let (req, ring) = untar
            .iter()
            .fold((0, 0), |(a, b), c| (a + c.requests, b + c.uring));
        let share = if req == 0 {
            0.0
        } else {
            ring as f64 / req as f64
        };
        let transport = match (last.uring_on, share) {
            (0, _) => "/dev/fuse",
            (_, s) if s >= 0.99 => "io_uring",
            _ => "io_uring+/dev/fuse",
        };
        r.insert("transport".into(), json!(transport));
        r.insert("uring_negotiated".into(), json!(last.uring_on == 1));
        r.insert("uring_share".into(), json!(share));
        let files = w.members.max(1) as f64;
        let req = median_u64(untar.iter().map(|c| c.requests)).unwrap_or(0.0);
        r.insert("untar_requests".into(), count(req));
        r.insert("req_per_file".into(), json!(req / files));
        let errs = median_u64(untar.iter().map(|c| c.errors)).unwrap_or(0.0);
        r.insert("untar_errors".into(), count(errs));
        let ops = median_ops(&untar);
        let per_file: Map<String, Value> = ops
            .iter()
            .map(|(k, v)| (k.clone(), json!(v / files)))
            .collect();
        let counts: Map<String, Value> = ops.iter().map(|(k, v)| (k.clone(), count(*v))).collect();
        r.insert("untar_ops".into(), Value::Object(counts));
        r.insert("untar_ops_per_file".into(), Value::Object(per_file));
    }
    let mut step_requests = Map::new();
    let mut step_errors = Map::new();
    let mut step_ops = Map::new();
    for (i, step) in Step::ALL.iter().enumerate() {
        let cs: Vec<&super::Counters> = samples
            .iter()
            .filter_map(|rep| rep[i].counters.as_ref())
            .collect();
        if cs.is_empty() {
            continue;
        }
        let name = step.name().to_string();
        let m = |f: fn(&super::Counters) -> u64| {
            median_u64(cs.iter().map(|c| f(c))).map_or(Value::Null, count)
        };
        step_requests.insert(name.clone(), m(|c| c.requests));
        step_errors.insert(name.clone(), m(|c| c.errors));
        let ops: Map<String, Value> = median_ops(&cs)
            .into_iter()
            .map(|(k, v)| (k, count(v)))
            .collect();
        step_ops.insert(name, Value::Object(ops));
    }
    r.insert("step_requests".into(), Value::Object(step_requests));
    r.insert("step_errors".into(), Value::Object(step_errors));
    r.insert("step_ops".into(), Value::Object(step_ops));
    r
}

/// The pairs compared: memfs over tmpfs, the passthrough over native, and
/// go-fuse's loopback over every other file system, where both ran.
pub fn pairs(names: &[&'static str]) -> Vec<(&'static str, &'static str)> {
    let mut v = Vec::new();
    for (a, b) in [(MEMFS, TMPFS), (PASSTHROUGH, NATIVE)] {
        if names.contains(&a) && names.contains(&b) {
            v.push((a, b));
        }
    }
    for &g in names.iter().filter(|n| is_go_fuse(n)) {
        for &n in names.iter().filter(|&&n| n != g) {
            v.push((g, n));
        }
    }
    v
}

/// Median over the repeats of `a`'s seconds over `b`'s, repeat by repeat
/// (each repeat ran them one after the other), for each step.
pub fn paired_ratios(a: &[Vec<StepSample>], b: &[Vec<StepSample>]) -> Vec<Option<f64>> {
    (0..Step::ALL.len())
        .map(|i| {
            let rs: Vec<f64> = a
                .iter()
                .zip(b)
                .filter_map(|(x, y)| Some(x[i].secs? / y[i].secs?))
                .collect();
            (!rs.is_empty()).then(|| median(&rs))
        })
        .collect()
}

/// Appends a row per pair of [`pairs`]: `fs` is `"A / B"`, each step's
/// cell A's seconds over B's.
pub fn add_ratios(report: &mut Report, names: &[&'static str], samples: &[Vec<Vec<StepSample>>]) {
    let at = |n: &str| names.iter().position(|x| *x == n);
    for (a, b) in pairs(names) {
        let (Some(i), Some(j)) = (at(a), at(b)) else {
            continue;
        };
        let mut r = row!(
            "kind" => "ratio",
            "fs" => format!("{a} / {b}"),
            "of" => a,
            "over" => b,
        );
        for (step, v) in Step::ALL
            .iter()
            .zip(paired_ratios(&samples[i], &samples[j]))
        {
            r.insert(step.name().into(), json!(v));
        }
        report.rows.push(r);
    }
}

fn text<'a>(r: &'a Row, key: &str) -> &'a str {
    r.get(key).and_then(Value::as_str).unwrap_or("?")
}

fn num(r: &Row, key: &str) -> Option<f64> {
    r.get(key).and_then(Value::as_f64)
}

/// The lines printed under the table: what each uvfs mount's unpack sent
/// per file, by opcode, and issue 29's targets met or missed.
pub fn summary(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let Some(first) = report.rows.first() else {
        return out;
    };
    let n = |k: &str| num(first, k).unwrap_or(0.0);
    out.push(format!(
        "tree: {} files, {} symlinks, {} directories, {:.1} MB ({:.1} MB gzip'd), checksum {}; \
         seconds: medians of {} repeats; ratio rows: seconds over seconds, median of the repeats' ratios",
        n("regular_files"),
        n("symlinks"),
        n("dirs"),
        n("bytes") / 1e6,
        n("tarball_bytes") / 1e6,
        first.get("tree_checksum").and_then(Value::as_str).unwrap_or("-"),
        n("repeats"),
    ));
    out.push(format!(
        "kernel: fuse enable_uring = {} (this workload does not change it{})",
        first
            .get("enable_uring")
            .and_then(Value::as_str)
            .unwrap_or("absent"),
        match first.get("enable_uring_after").and_then(Value::as_str) {
            Some(a) => format!("; it was {a} at the end: something else changed it"),
            None => String::new(),
        }
    ));
    for r in report.rows.iter().filter(|r| r.contains_key("untar_ops")) {
        let files = num(r, "files").unwrap_or(1.0).max(1.0);
        let mut ops: Vec<(&String, f64)> = r["untar_ops"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k, v.as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        ops.sort_by(|a, b| b.1.total_cmp(&a.1));
        let list: Vec<String> = ops
            .iter()
            .map(|(k, v)| format!("{k} {:.2}", v / files))
            .collect();
        let errors = num(r, "untar_errors").unwrap_or(0.0);
        out.push(format!(
            "{} untar: {:.2} requests per file ({}), {} failing ({:.2} per file); transport {} ({:.0}% of requests through io_uring)",
            text(r, "fs"),
            num(r, "req_per_file").unwrap_or(0.0),
            list.join(", "),
            errors,
            errors / files,
            text(r, "transport"),
            100.0 * num(r, "uring_share").unwrap_or(0.0),
        ));
    }
    for r in report.rows.iter().filter(|r| r.contains_key("untar_ops")) {
        let req = num(r, "req_per_file").unwrap_or(f64::INFINITY);
        let errors = num(r, "untar_errors").unwrap_or(0.0);
        out.push(format!(
            "target: {} requests per file unpacked {req:.2} <= {MAX_REQUESTS_PER_FILE}, failing {errors} = 0: {}",
            text(r, "fs"),
            met(req <= MAX_REQUESTS_PER_FILE && errors == 0.0)
        ));
    }
    let ratio = |a: &str, b: &str| {
        report
            .rows
            .iter()
            .find(|r| r["kind"] == "ratio" && r["of"] == a && r["over"] == b)
    };
    for (a, b, step, bound) in TARGETS {
        if let Some(v) = ratio(a, b).and_then(|r| num(r, step.name())) {
            out.push(format!(
                "target: {a} / {b} {} {v:.2} <= {bound}: {}",
                step.name(),
                met(v <= bound)
            ));
        }
    }
    for r in report
        .rows
        .iter()
        .filter(|r| r["kind"] == "ratio" && r["of"].as_str().is_some_and(is_go_fuse))
    {
        let slow: Vec<String> = Step::ALL
            .iter()
            .filter_map(|s| Some((s.name(), num(r, s.name())?)))
            .filter(|(_, v)| *v < GO_FUSE_FACTOR)
            .map(|(s, v)| format!("{s} {v:.2}"))
            .collect();
        out.push(format!(
            "target: {} >= {GO_FUSE_FACTOR} on every step: {}",
            text(r, "fs"),
            if slow.is_empty() {
                "met".to_string()
            } else {
                format!("missed ({})", slow.join(", "))
            }
        ));
    }
    out
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// Seconds per step, a bar per file system; targets on the bars they
/// bound (memfs against tmpfs, passthrough against native, uvfs's mounts
/// at least twice as fast as go-fuse).
pub fn chart(report: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Step::ALL
        .iter()
        .map(|s| BarGroup {
            label: s.name().to_string(),
            bars: report
                .rows
                .iter()
                .filter(|r| r["kind"] == "fs")
                .filter_map(|r| Some((text(r, "fs").to_string(), num(r, s.name())?)))
                .collect(),
            targets: Vec::new(),
        })
        .collect();
    let go_fuse: Vec<(String, String)> = report
        .rows
        .iter()
        .filter(|r| r["kind"] == "ratio" && r["of"].as_str().is_some_and(is_go_fuse))
        .map(|r| (text(r, "of").to_string(), text(r, "over").to_string()))
        .filter(|(_, over)| over.starts_with("uvfs"))
        .collect();
    for g in &mut groups {
        for (a, b, step, bound) in TARGETS {
            if g.label == step.name() {
                if let Some(v) = g.value(b) {
                    g.target(Some(a), bound * v);
                }
            }
        }
        for (of, over) in &go_fuse {
            if let Some(v) = g.value(of) {
                g.target(Some(over), v / GO_FUSE_FACTOR);
            }
        }
    }
    (
        "devwork: unpack, git, SQLite, rm -rf (median seconds, lower is better)".into(),
        "seconds".into(),
        groups,
    )
}

/// Fails the run on any failed row, except a peer that could not be set
/// up (reported; the uvfs side still ran).
pub fn check(report: &Report) -> io::Result<()> {
    let bad: Vec<String> = report
        .rows
        .iter()
        .filter(|r| r["kind"] == "fs" && r.get("ok") != Some(&Value::Bool(true)))
        .filter(|r| {
            !(r.get("setup_failed") == Some(&Value::Bool(true))
                && PeerKind::from_name(text(r, "fs")).is_some())
        })
        .map(|r| {
            format!(
                "{}: {}",
                text(r, "fs"),
                r.get("error").and_then(Value::as_str).unwrap_or("failed")
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "devwork failed: {}",
            bad.join(" | ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Counters;
    use super::*;

    fn ok(secs: f64) -> StepSample {
        StepSample {
            secs: Some(secs),
            ..StepSample::default()
        }
    }

    fn rep(secs: f64) -> Vec<StepSample> {
        Step::ALL.iter().map(|_| ok(secs)).collect()
    }

    #[test]
    fn pairs_include_go_fuse_against_every_other() {
        assert_eq!(
            pairs(&[MEMFS, TMPFS, PASSTHROUGH, NATIVE]),
            vec![(MEMFS, TMPFS), (PASSTHROUGH, NATIVE)]
        );
        assert_eq!(pairs(&[MEMFS, NATIVE]), vec![]);
        let p = pairs(&[MEMFS, NATIVE, "go-fuse-loopback"]);
        assert_eq!(
            p,
            vec![("go-fuse-loopback", MEMFS), ("go-fuse-loopback", NATIVE)]
        );
    }

    #[test]
    fn ratios_pair_repeats() {
        // Repeat by repeat: 2/1 and 9/3, median of (2, 3) = 2.5, where the
        // ratio of medians would be 5.5/2.
        let a = vec![rep(2.0), rep(9.0)];
        let b = vec![rep(1.0), rep(3.0)];
        let r = paired_ratios(&a, &b);
        assert_eq!(r[0], Some(2.5));
        // A failed step in one repeat leaves that repeat out.
        let mut a2 = a.clone();
        a2[1][0] = StepSample::failed("x".into());
        assert_eq!(paired_ratios(&a2, &b)[0], Some(2.0));
    }

    fn workload() -> Workload {
        Workload {
            members: 10,
            regular_files: 7,
            symlinks: 1,
            dirs: 2,
            bytes: 100,
            tarball_bytes: 50,
            checksum: "abc".into(),
            inserts: 100,
        }
    }

    #[test]
    fn uvfs_row_counts_requests_per_file_and_fails_on_error() {
        let c = |n: u64| Counters {
            requests: n,
            errors: n / 10,
            uring: 0,
            uring_on: 0,
            by_op: [("create".to_string(), n / 2), ("lookup".to_string(), n / 2)].into(),
        };
        let mut reps = vec![rep(1.0), rep(1.0), rep(1.0)];
        for (r, n) in reps.iter_mut().zip([60, 80, 100]) {
            r[0].counters = Some(c(n));
        }
        let row = fs_row(MEMFS, &reps, &workload(), true, None);
        assert_eq!(row["ok"], true);
        assert_eq!(row["req_per_file"], 8.0);
        assert_eq!(row["untar_errors"], 8);
        assert_eq!(row["untar_ops"]["create"], 40);
        assert_eq!(row["untar_ops_per_file"]["lookup"], 4.0);
        assert_eq!(row["transport"], "/dev/fuse");
        assert_eq!(row["tree_checksum"], "abc");
        let mut report = Report::new("devwork");
        report.rows.push(row);
        assert!(check(&report).is_ok());
        assert!(summary(&report)
            .iter()
            .any(|l| l.contains("8.00 requests per file (create 4.00, lookup 4.00), 8 failing")));

        reps[1][0] = StepSample::failed("untar on uvfs-memfs: the unpacked tree differs".into());
        let row = fs_row(MEMFS, &reps, &workload(), true, None);
        assert_eq!(row["ok"], false);
        let mut report = Report::new("devwork");
        report.rows.push(row);
        let e = check(&report).unwrap_err().to_string();
        assert!(e.contains("the unpacked tree differs"), "{e}");
    }

    #[test]
    fn a_peer_that_cannot_start_does_not_fail_the_run() {
        let name = PeerKind::ALL[0].name();
        let reps = vec![vec![
            StepSample::failed("setup failed: no binary".into());
            6
        ]];
        let mut report = Report::new("devwork");
        report
            .rows
            .push(fs_row(name, &reps, &workload(), false, Some(false)));
        assert!(check(&report).is_ok());
        report
            .rows
            .push(fs_row(NATIVE, &reps, &workload(), false, None));
        assert!(check(&report).is_err());
    }
}
