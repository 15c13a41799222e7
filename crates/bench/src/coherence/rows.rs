//! What `uvfs bench coherence` reports: per (server, kind of change), the
//! time until the change showed through the mount over the trials (p50,
//! p99, max, nearest rank), and how many trials never saw it within the
//! wait. A percentile that falls on such a trial is the string `"never"`
//! in the JSON and the table, not a number.

use crate::report::{push_bar, BarGroup, Report, Row};

/// How long a host-side change may take to show through a uvfs mount, p99.
const P99_TARGET_MS: f64 = 10.0;
use crate::row;
use serde_json::{json, Value};
use std::time::Duration;

/// How one trial ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The change showed after this long (from just before the change was
    /// made to the end of the first probe that saw all of it).
    Seen(Duration),
    /// Not within the wait; what the last probe saw.
    Never(String),
    /// The trial could not run (setup failed, or its starting state never
    /// showed through the mount, or the mount refused the probe).
    Failed(String),
}

/// The nearest-rank `p` percentile (0 < p <= 1) of the trials, a trial
/// that never saw the change counting as longer than any that did: `None`
/// when it falls on one of those.
pub fn percentile(seen_ms: &[f64], never: usize, p: f64) -> Option<f64> {
    let n = seen_ms.len() + never;
    if n == 0 {
        return None;
    }
    let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
    let mut v = seen_ms.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(rank - 1).copied()
}

/// What a row describes besides its trials.
pub struct RowKey<'a> {
    pub server: &'a str,
    /// "default", "no-watch", or the peer's own default.
    pub options: &'a str,
    /// The entry and attribute timeout the server runs with, where known.
    pub timeout_secs: Option<f64>,
    /// uvfs only: whether its host-change watcher ran
    /// (`passthrough.watch.active`), where it reports one.
    pub watch: Option<bool>,
    pub kind: &'a str,
    pub probe: &'a str,
    pub wait: Duration,
    pub poll: Duration,
    /// The kinds ran one after another (`one_at_a_time`), not all at once.
    pub alone: bool,
}

fn cell(ms: Option<f64>, any: bool) -> Value {
    match (ms, any) {
        (_, false) => Value::Null,
        (Some(v), true) => json!((v * 1000.0).round() / 1000.0),
        (None, true) => json!("never"),
    }
}

/// One row from a (server, kind)'s trials, `rounds` of them (one per
/// `--repeats`, each on a mount of its own); `setup_error`: the server
/// never ran (a peer that could not be built or mounted). Each percentile
/// is the median over the rounds of that round's percentile (a round's
/// "never" counting as longest), as every workload reports the median of
/// its repeats; the counts are over all trials.
pub fn make_row(k: &RowKey, setup_error: Option<&str>, rounds: &[Vec<Outcome>]) -> Row {
    let trials: Vec<&Outcome> = rounds.iter().flatten().collect();
    let seen_of = |ts: &mut dyn Iterator<Item = &Outcome>| -> Vec<f64> {
        ts.filter_map(|t| match t {
            Outcome::Seen(d) => Some(d.as_secs_f64() * 1e3),
            _ => None,
        })
        .collect()
    };
    let seen = seen_of(&mut trials.iter().copied());
    let never: Vec<&String> = trials
        .iter()
        .filter_map(|t| match t {
            Outcome::Never(s) => Some(s),
            _ => None,
        })
        .collect();
    let failed: Vec<&String> = trials
        .iter()
        .filter_map(|t| match t {
            Outcome::Failed(s) => Some(s),
            _ => None,
        })
        .collect();
    let any = !seen.is_empty() || !never.is_empty();
    // Per round: (seen, never); rounds where nothing ran have no say.
    let per_round: Vec<(Vec<f64>, usize)> = rounds
        .iter()
        .map(|r| {
            let never = r.iter().filter(|t| matches!(t, Outcome::Never(_))).count();
            (seen_of(&mut r.iter()), never)
        })
        .filter(|(s, n)| !s.is_empty() || *n > 0)
        .collect();
    let p = |q| {
        let mut v: Vec<f64> = per_round
            .iter()
            .map(|(s, n)| percentile(s, *n, q).unwrap_or(f64::INFINITY))
            .collect();
        v.sort_by(f64::total_cmp);
        let m = v.get(v.len().saturating_sub(1) / 2).copied();
        cell(m.filter(|m| m.is_finite()), any)
    };
    let error = setup_error
        .map(String::from)
        .or_else(|| failed.first().map(|s| s.to_string()));
    row!(
        "server" => k.server,
        "options" => k.options,
        "timeout_secs" => k.timeout_secs,
        "watch" => k.watch.map(|w| if w { "on" } else { "off" }),
        "kind" => k.kind,
        "probe" => k.probe,
        "kinds_run" => if k.alone { "one at a time" } else { "all at once" },
        "repeats" => rounds.len(),
        "trials" => trials.len(),
        "seen" => seen.len(),
        "never" => never.len(),
        "failed" => failed.len(),
        "p50_ms" => p(0.5),
        "p99_ms" => p(0.99),
        "max_ms" => p(1.0),
        "min_ms" => seen.iter().copied().reduce(f64::min).map(|v| (v * 1000.0).round() / 1000.0),
        "wait_ms" => k.wait.as_secs_f64() * 1e3,
        "poll_ms" => k.poll.as_secs_f64() * 1e3,
        "last_seen_before_wait" => never.first().map(|s| s.to_string()),
        "ok" => setup_error.is_none() && failed.is_empty() && any,
        "error" => error,
    )
}

/// Table columns.
pub const COLUMNS: &[&str] = &[
    "server",
    "options",
    "timeout_secs",
    "watch",
    "kind",
    "probe",
    "repeats",
    "trials",
    "seen",
    "never",
    "failed",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "error",
];

fn ms(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("{:.1} ms", n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => s.clone(),
        _ => "-".into(),
    }
}

/// Per server: its worst p99 over the kinds, and which kinds never
/// showed (the target for uvfs: p99 <= 10 ms for every kind).
pub fn summary(r: &Report) -> Vec<String> {
    let mut servers: Vec<&str> = Vec::new();
    for x in &r.rows {
        if let Some(s) = x["server"].as_str() {
            if !servers.contains(&s) {
                servers.push(s);
            }
        }
    }
    let mut out = Vec::new();
    for s in servers {
        let rows: Vec<&Row> = r.rows.iter().filter(|x| x["server"] == s).collect();
        if let Some(e) = rows
            .iter()
            .find(|x| x["seen"] == 0 && x["never"] == 0 && x["failed"] == 0)
            .and_then(|x| x["error"].as_str())
        {
            out.push(format!("{s}: not run: {e}"));
            continue;
        }
        let wait = rows
            .iter()
            .find_map(|x| x["wait_ms"].as_f64())
            .unwrap_or(0.0);
        let timeout = match rows.iter().find_map(|x| x["timeout_secs"].as_f64()) {
            Some(t) => format!("timeout {t} s"),
            None => format!("{} options", rows[0]["options"].as_str().unwrap_or("?")),
        };
        // Worst first: a "never" beats any number.
        let worst = rows
            .iter()
            .filter(|x| !x["p99_ms"].is_null())
            .max_by(|a, b| {
                let key = |x: &Row| x["p99_ms"].as_f64().unwrap_or(f64::INFINITY);
                key(a).total_cmp(&key(b))
            });
        let never: Vec<&str> = rows
            .iter()
            .filter(|x| x["never"].as_u64().unwrap_or(0) > 0)
            .filter_map(|x| x["kind"].as_str())
            .collect();
        let failed: Vec<String> = rows
            .iter()
            .filter(|x| x["failed"].as_u64().unwrap_or(0) > 0)
            .map(|x| {
                format!(
                    "{} ({})",
                    x["kind"].as_str().unwrap_or("?"),
                    x["error"].as_str().unwrap_or("?")
                )
            })
            .collect();
        let mut line = format!("{s} ({timeout}): ");
        match worst {
            Some(w) => {
                line += &format!(
                    "worst p99 {} ({}), p50 over kinds {}..{}",
                    ms(&w["p99_ms"]),
                    w["kind"].as_str().unwrap_or("?"),
                    ms(&min_by_key(&rows, "p50_ms")),
                    ms(&max_by_key(&rows, "p50_ms")),
                )
            }
            None => line += "no trial ran",
        }
        if s.starts_with("uvfs") && worst.is_some() {
            let met = rows
                .iter()
                .filter(|x| !x["p99_ms"].is_null())
                .all(|x| x["p99_ms"].as_f64().is_some_and(|v| v <= P99_TARGET_MS));
            line += &format!(
                "; target p99 <= 10 ms every kind: {}",
                if met { "met" } else { "NOT met" }
            );
        }
        if !never.is_empty() {
            line += &format!("; never within {:.0} s: {}", wait / 1e3, never.join(", "));
        }
        if !failed.is_empty() {
            line += &format!("; failed: {}", failed.join(", "));
        }
        out.push(line);
    }
    out
}

/// The row value of `key` with the least number ("never" is the most).
fn min_by_key(rows: &[&Row], key: &str) -> Value {
    pick(rows, key, false)
}

fn max_by_key(rows: &[&Row], key: &str) -> Value {
    pick(rows, key, true)
}

fn pick(rows: &[&Row], key: &str, max: bool) -> Value {
    let order = |v: &Value| v.as_f64().unwrap_or(f64::INFINITY);
    let vals = rows.iter().map(|x| &x[key]).filter(|v| !v.is_null());
    let best = if max {
        vals.max_by(|a, b| order(a).total_cmp(&order(b)))
    } else {
        vals.min_by(|a, b| order(a).total_cmp(&order(b)))
    };
    best.cloned().unwrap_or(Value::Null)
}

/// Bars: p99 per kind, one bar per server; a "never" is drawn at the
/// wait (its title says so in the table). The p99 target is marked on
/// uvfs's bars.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    for x in r.rows.iter().filter(|x| !x["p99_ms"].is_null()) {
        let v = x["p99_ms"]
            .as_f64()
            .unwrap_or_else(|| x["wait_ms"].as_f64().unwrap_or(0.0));
        push_bar(
            &mut groups,
            x["kind"].as_str().unwrap_or("?").to_string(),
            x["server"].as_str().unwrap_or("?").to_string(),
            v,
        );
    }
    for g in &mut groups {
        let uvfs: Vec<String> = g
            .bars
            .iter()
            .filter(|b| b.0.starts_with("uvfs"))
            .map(|b| b.0.clone())
            .collect();
        for s in uvfs {
            g.target(Some(&s), P99_TARGET_MS);
        }
    }
    (
        "coherence: p99 time until a host-side change shows through the mount (lower is better; never = the wait)".into(),
        "ms".into(),
        groups,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key<'a>(server: &'a str, kind: &'a str) -> RowKey<'a> {
        RowKey {
            server,
            options: "default",
            timeout_secs: Some(1.0),
            watch: None,
            kind,
            probe: "lstat",
            wait: Duration::from_secs(3),
            poll: Duration::from_micros(500),
            alone: false,
        }
    }

    #[test]
    fn nearest_rank_percentiles_count_never_as_longest() {
        let v = [3.0, 1.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 0, 0.5), Some(2.0));
        assert_eq!(percentile(&v, 0, 0.99), Some(4.0));
        assert_eq!(percentile(&v, 0, 1.0), Some(4.0));
        // 4 seen, 1 never: the median is seen, the max is never.
        assert_eq!(percentile(&v, 1, 0.5), Some(3.0));
        assert_eq!(percentile(&v, 1, 1.0), None);
        assert_eq!(percentile(&[], 3, 0.5), None);
        assert_eq!(percentile(&[], 0, 0.5), None);
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&hundred, 0, 0.99), Some(99.0));
    }

    #[test]
    fn rows_say_never_distinctly() {
        let ms = |v: u64| Outcome::Seen(Duration::from_millis(v));
        let t = [
            ms(1003),
            ms(1005),
            ms(1004),
            Outcome::Never("mode 644".into()),
        ];
        let r = make_row(&key("go-fuse-loopback", "chmod"), None, &[t.to_vec()]);
        assert_eq!(r["p50_ms"].as_f64(), Some(1004.0));
        assert_eq!(r["p99_ms"], "never");
        assert_eq!(r["max_ms"], "never");
        assert_eq!(r["min_ms"].as_f64(), Some(1003.0));
        assert_eq!(
            (r["seen"].as_u64(), r["never"].as_u64()),
            (Some(3), Some(1))
        );
        assert_eq!(r["ok"], true);
        assert_eq!(r["last_seen_before_wait"], "mode 644");
        let mut rep = Report::new("coherence");
        rep.rows.push(r);
        rep.rows.push(make_row(
            &key("go-fuse-loopback", "create"),
            None,
            &[vec![ms(2), ms(1)]],
        ));
        let s = summary(&rep).join("\n");
        assert!(
            s.contains("go-fuse-loopback (timeout 1 s): worst p99 never (chmod), p50 over kinds 1.0 ms..1004.0 ms; never within 3 s: chmod"),
            "{s}"
        );
        let (_, _, g) = chart(&rep);
        assert_eq!(g[0].bars[0].1, 3000.0, "a never is drawn at the wait");
    }

    #[test]
    fn uvfs_target_and_failures() {
        let ms = |v: u64| Outcome::Seen(Duration::from_millis(v));
        let mut rep = Report::new("coherence");
        rep.rows.push(make_row(
            &key("uvfs-passthrough-default", "create"),
            None,
            &[vec![ms(2), ms(4)]],
        ));
        rep.rows.push(make_row(
            &key("uvfs-passthrough-default", "setxattr"),
            None,
            &[vec![Outcome::Failed(
                "getxattr: Operation not supported".into(),
            )]],
        ));
        rep.rows.push(make_row(
            &key("fuse-backend-rs", "create"),
            Some("no cargo"),
            &[],
        ));
        let s = summary(&rep).join("\n");
        assert!(s.contains("target p99 <= 10 ms every kind: met"), "{s}");
        assert!(
            s.contains("failed: setxattr (getxattr: Operation not supported)"),
            "{s}"
        );
        assert!(s.contains("fuse-backend-rs: not run: no cargo"), "{s}");
        assert_eq!(rep.rows[1]["ok"], false);
        assert!(rep.rows[1]["p50_ms"].is_null());
        rep.rows.push(make_row(
            &key("uvfs-passthrough-default", "chmod"),
            None,
            &[vec![ms(1001)]],
        ));
        let s = summary(&rep).join("\n");
        assert!(s.contains("NOT met"), "{s}");
    }

    #[test]
    fn percentiles_are_medians_over_rounds_counts_over_trials() {
        let ms = |v: u64| Outcome::Seen(Duration::from_millis(v));
        let rounds = [
            vec![ms(1), ms(2), ms(3)],
            vec![ms(10), ms(20), ms(30)],
            vec![ms(4), ms(5), Outcome::Never("old".into())],
        ];
        let r = make_row(&key("uvfs-passthrough-default", "rename"), None, &rounds);
        // p50 per round 2, 20, 5; max 3, 30, never: medians 5 and 30.
        assert_eq!(r["p50_ms"].as_f64(), Some(5.0));
        assert_eq!(r["max_ms"].as_f64(), Some(30.0));
        assert_eq!(r["min_ms"].as_f64(), Some(1.0));
        assert_eq!(
            (
                r["repeats"].as_u64(),
                r["trials"].as_u64(),
                r["never"].as_u64()
            ),
            (Some(3), Some(9), Some(1))
        );
        // Two rounds of three that never saw it: the median is never.
        let nev = || Outcome::Never("x".into());
        let r = make_row(
            &key("uvfs-passthrough-default", "rename"),
            None,
            &[vec![ms(1)], vec![nev()], vec![nev()]],
        );
        assert_eq!(r["p50_ms"], "never");
    }
}
