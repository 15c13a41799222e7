//! What `uvfs bench restart` reports, per configuration: the longest any
//! load operation waited across an upgrade (p100 over the upgrades, and
//! the median of each upgrade's longest), the pause the server itself
//! reports (`server.last_pause_us`: median and max), what was handed
//! over, and every failed load operation or upgrade. Issue 28's targets
//! are on the p100 wait.

use crate::report::{median, push_bar, BarGroup, Report, Row};
use crate::row;
use serde_json::{json, Value};
use std::io;
use std::time::Duration;

/// What one configuration's upgrades measured.
#[derive(Debug, Default, Clone)]
pub struct Measured {
    /// Per upgrade that completed: the longest load operation that
    /// overlapped it (zero when none did).
    pub waits: Vec<Duration>,
    /// Per upgrade: `server.last_pause_us` of the new server.
    pub pauses_us: Vec<u64>,
    /// Per upgrade: how long `upgrade` took to answer, start to end.
    pub commands: Vec<Duration>,
    /// Per upgrade: nodes handed over.
    pub nodes: Vec<u64>,
    /// Open handles handed over at the last upgrade.
    pub handles: u64,
    /// Walks that made the kernel know a passthrough's tree again before
    /// an upgrade, how long each took.
    pub rewalks: Vec<Duration>,
    /// `server.generation` and `server.restarts` at the end.
    pub generation: Option<u64>,
    pub restarts: Option<u64>,
    /// Load operations, those that overlapped an upgrade, those that
    /// failed, and the first failures in words.
    pub ops: usize,
    pub ops_in_windows: usize,
    pub failed_ops: usize,
    pub errors: Vec<String>,
    /// Upgrades that happened but whose request got no answer (the
    /// connection closed): what the request said.
    pub answers_lost: Vec<String>,
    /// An upgrade that did not happen (the server serves on), and why.
    pub upgrade_error: Option<String>,
}

/// What a row describes besides its measurements.
pub struct RowKey<'a> {
    pub config: &'a str,
    pub fs: &'a str,
    /// Files of the configuration's data and their bytes in all.
    pub files: usize,
    pub bytes: u64,
    /// Upgrades asked for.
    pub upgrades: usize,
    pub threads: usize,
    /// The load removes the files it creates (or keeps them).
    pub removes: bool,
    /// The bound on the p100 wait for this configuration.
    pub target_ms: f64,
    /// Whether the data is at the size the target is for.
    pub full_size: bool,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// One row; `setup_error`: the configuration never ran (no mount).
pub fn make_row(k: &RowKey, setup_error: Option<&str>, m: &Measured) -> Row {
    let waits: Vec<f64> = m.waits.iter().copied().map(ms).collect();
    let pauses: Vec<f64> = m.pauses_us.iter().map(|&u| u as f64 / 1e3).collect();
    let cmds: Vec<f64> = m.commands.iter().copied().map(ms).collect();
    let max = |v: &[f64]| v.iter().copied().reduce(f64::max);
    let med = |v: &[f64]| (!v.is_empty()).then(|| median(v));
    let error = setup_error
        .map(String::from)
        .or_else(|| m.upgrade_error.clone())
        .or_else(|| m.errors.first().cloned())
        .or_else(|| {
            m.answers_lost.first().map(|e| {
                format!(
                    "{} upgrades happened but `upgrade` got no answer: {e}",
                    m.answers_lost.len()
                )
            })
        });
    let mut r = row!(
        "config" => k.config,
        "fs" => k.fs,
        "transport" => "/dev/fuse",
        "files" => k.files,
        "bytes" => k.bytes,
        "threads" => k.threads,
        "load" => if k.removes { "stat,read,append,create+remove,readdir" } else { "stat,read,append,create (kept),readdir" },
        "upgrades" => k.upgrades,
        "upgraded" => m.waits.len(),
        "nodes_handed" => m.nodes.iter().copied().min(),
        "nodes_handed_max" => m.nodes.iter().copied().max(),
        "rewalk_median_s" => (!m.rewalks.is_empty())
            .then(|| median(&m.rewalks.iter().map(Duration::as_secs_f64).collect::<Vec<_>>())),
        "handles_handed" => m.handles,
        "max_wait_ms" => max(&waits),
        "median_wait_ms" => med(&waits),
        "pause_median_ms" => med(&pauses),
        "pause_max_ms" => max(&pauses),
        "upgrade_cmd_max_ms" => max(&cmds),
        "waits_ms" => waits,
        "pauses_ms" => pauses,
        "generation" => m.generation,
        "restarts" => m.restarts,
        "ops" => m.ops,
        "ops_across_upgrades" => m.ops_in_windows,
        "failed_ops" => m.failed_ops,
        "answers_lost" => m.answers_lost.len(),
        "load_errors" => m.errors,
        "target_ms" => k.target_ms,
        "full_size" => k.full_size,
        "ok" => setup_error.is_none()
            && m.upgrade_error.is_none()
            && m.failed_ops == 0
            && m.answers_lost.is_empty()
            && m.waits.len() == k.upgrades,
        "error" => error,
    );
    if setup_error.is_some() {
        r.insert("setup_failed".into(), json!(true));
    }
    r
}

/// Table columns.
pub const COLUMNS: &[&str] = &[
    "config",
    "files",
    "upgraded",
    "nodes_handed",
    "max_wait_ms",
    "median_wait_ms",
    "pause_median_ms",
    "pause_max_ms",
    "ops_across_upgrades",
    "failed_ops",
    "error",
];

fn f(r: &Row, k: &str) -> Option<f64> {
    r.get(k).and_then(Value::as_f64)
}

fn text<'a>(r: &'a Row, k: &str) -> &'a str {
    r.get(k).and_then(Value::as_str).unwrap_or("?")
}

/// A line per configuration: its waits and pauses against its target.
pub fn summary(r: &Report) -> Vec<String> {
    let mut out = vec![
        "mounts use --transport dev, or FUSE over io_uring with --transport uring".to_string(),
    ];
    for x in &r.rows {
        let name = text(x, "config");
        if x.get("setup_failed") == Some(&Value::Bool(true)) {
            out.push(format!("{name}: not set up: {}", text(x, "error")));
            continue;
        }
        let target = f(x, "target_ms").unwrap_or(0.0);
        let n = |k: &str| x.get(k).and_then(Value::as_u64).unwrap_or(0);
        let mut line = format!(
            "{name} ({} files, {}..{} nodes handed over): ",
            n("files"),
            n("nodes_handed"),
            n("nodes_handed_max")
        );
        let Some(wait) = f(x, "max_wait_ms") else {
            out.push(format!(
                "{line}no upgrade done; target <= {target:.0} ms: NOT met ({})",
                text(x, "error")
            ));
            continue;
        };
        line += &format!(
            "max wait {wait:.1} ms over {} upgrades (median {:.1}), server pause median {:.1} / max {:.1} ms; ",
            x["upgraded"],
            f(x, "median_wait_ms").unwrap_or(0.0),
            f(x, "pause_median_ms").unwrap_or(0.0),
            f(x, "pause_max_ms").unwrap_or(0.0),
        );
        let failed = x.get("failed_ops").and_then(Value::as_u64).unwrap_or(0);
        let clean = failed == 0 && x.get("ok") == Some(&Value::Bool(true));
        if x.get("full_size") == Some(&Value::Bool(true)) {
            let verdict = if clean && wait <= target {
                "met"
            } else {
                "NOT met"
            };
            line += &format!("target <= {target:.0} ms: {verdict}");
        } else {
            line += &format!(
                "target <= {target:.0} ms is for the full size: not applicable at quick size"
            );
        }
        if failed > 0 {
            line += &format!("; {failed} load operations FAILED: {}", text(x, "error"));
        } else if !clean {
            line += &format!("; FAILED: {}", text(x, "error"));
        }
        out.push(line);
    }
    out
}

/// Bars: per configuration, the max wait and the server's max pause; the
/// target on the wait where it applies.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    for x in &r.rows {
        let (Some(w), Some(p)) = (f(x, "max_wait_ms"), f(x, "pause_max_ms")) else {
            continue;
        };
        let g = text(x, "config").to_string();
        push_bar(&mut groups, g.clone(), "max wait of a load op".into(), w);
        push_bar(&mut groups, g, "server pause (max)".into(), p);
        if x.get("full_size") == Some(&Value::Bool(true)) {
            if let (Some(last), Some(t)) = (groups.last_mut(), f(x, "target_ms")) {
                last.target(Some("max wait of a load op"), t);
            }
        }
    }
    (
        "restart: longest wait of a request across a live upgrade (lower is better)".into(),
        "ms".into(),
        groups,
    )
}

/// Fails the run on a failed load operation or an upgrade that did not
/// happen; a configuration that could not be mounted is reported, not
/// failed.
pub fn check(r: &Report) -> io::Result<()> {
    let bad: Vec<String> = r
        .rows
        .iter()
        .filter(|x| x.get("ok") != Some(&Value::Bool(true)))
        .filter(|x| x.get("setup_failed") != Some(&Value::Bool(true)))
        .map(|x| format!("{}: {}", text(x, "config"), text(x, "error")))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(io::Error::other(format!("restart: {}", bad.join("; "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(full_size: bool) -> RowKey<'static> {
        RowKey {
            config: "passthrough-nodes",
            fs: "passthrough",
            files: 1000,
            bytes: 0,
            upgrades: 3,
            threads: 2,
            removes: true,
            target_ms: 200.0,
            full_size,
        }
    }

    fn measured(waits_ms: &[u64]) -> Measured {
        Measured {
            waits: waits_ms.iter().map(|&v| Duration::from_millis(v)).collect(),
            pauses_us: vec![1000, 3000, 2000],
            commands: vec![Duration::from_millis(5); waits_ms.len()],
            ops: 100,
            ops_in_windows: 10,
            ..Measured::default()
        }
    }

    #[test]
    fn rows_and_verdicts() {
        let mut rep = Report::new("restart");
        rep.rows
            .push(make_row(&key(true), None, &measured(&[10, 250, 20])));
        let x = &rep.rows[0];
        assert_eq!(x["max_wait_ms"].as_f64(), Some(250.0));
        assert_eq!(x["median_wait_ms"].as_f64(), Some(20.0));
        assert_eq!(x["pause_median_ms"].as_f64(), Some(2.0));
        assert_eq!(x["pause_max_ms"].as_f64(), Some(3.0));
        assert_eq!(x["ok"], true);
        let s = summary(&rep);
        assert!(s[1].contains("max wait 250.0 ms over 3 upgrades"), "{s:?}");
        assert!(s[1].ends_with("target <= 200 ms: NOT met"), "{s:?}");
        assert!(check(&rep).is_ok());

        rep.rows[0] = make_row(&key(false), None, &measured(&[10, 250, 20]));
        let s = summary(&rep);
        assert!(s[1].contains("not applicable at quick size"), "{s:?}");
        assert!(!s[1].contains("met"), "no verdict at quick size: {s:?}");

        rep.rows[0] = make_row(&key(true), None, &measured(&[10, 150, 20]));
        assert!(summary(&rep)[1].ends_with("target <= 200 ms: met"));
    }

    #[test]
    fn failures_fail_the_run_but_a_missing_mount_does_not() {
        let mut m = measured(&[10, 20, 30]);
        m.failed_ops = 2;
        m.errors = vec!["stat /m/x: Transport endpoint is not connected".into()];
        let mut rep = Report::new("restart");
        rep.rows.push(make_row(&key(true), None, &m));
        assert_eq!(rep.rows[0]["ok"], false);
        let s = summary(&rep);
        assert!(
            s[1].contains("NOT met; 2 load operations FAILED: stat"),
            "{s:?}"
        );
        assert!(check(&rep).is_err());

        let mut m = measured(&[10]);
        m.upgrade_error = Some("the file system cannot hand its state over".into());
        rep.rows[0] = make_row(&key(true), None, &m);
        assert_eq!(rep.rows[0]["ok"], false, "fewer upgrades than asked");
        assert!(check(&rep).unwrap_err().to_string().contains("cannot hand"));

        rep.rows[0] = make_row(
            &key(true),
            Some("/dev/fuse is not usable"),
            &Measured::default(),
        );
        assert_eq!(rep.rows[0]["setup_failed"], true);
        assert!(check(&rep).is_ok());
        assert!(summary(&rep)[1].contains("not set up: /dev/fuse"));
        assert!(chart(&rep).2.is_empty());
    }
}
