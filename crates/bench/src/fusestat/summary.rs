//! What a run prints and draws: the table columns, the summary lines
//! (default options first, uvfs against the best peer, failures, server
//! peaks) and the chart. Reads rows only, so `--redraw` can render a
//! report from its JSON without running anything.

use super::{
    options_of, MEMFS, MEMFS_DEV, MEMFS_NOREF, NATIVE, PASSTHROUGH, PASSTHROUGH_DEFAULT,
    PASSTHROUGH_DEFAULT_NOSUP, PASSTHROUGH_DEV, PASSTHROUGH_DEV_NOSUP, PASSTHROUGH_NORA,
    PASSTHROUGH_NOREF, PASSTHROUGH_NOWATCH, PEERS, TMPFS,
};
use crate::report::{push_bar, BarGroup, Report, Row};
use serde_json::Value;

/// Table columns for `emit`.
pub const COLUMNS: &[&str] = &[
    "fs",
    "options",
    "transport",
    "pass",
    "threads",
    "entries",
    "ok",
    "seen",
    "secs",
    "stats_per_sec",
    "vs_tmpfs",
    "vs_native",
    "max_fds",
    "rss_bytes",
    "requests_per_stat",
    "cpu_us_per_request",
    "cpu_us_per_stat",
    "server_cpu_us_per_stat",
    "walker_cpu_us_per_stat",
    "nodes_at_start",
];

pub(super) fn fmt_ops(r: &Row) -> String {
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
        let peers = if r.rows.iter().any(is_peer) {
            " (peers: the same timeouts)"
        } else {
            ""
        };
        out.push(format!(
            "uvfs mounts: --entry-timeout {x} --attr-timeout {x}{peers} (kernel may cache names and attributes {x} s){}",
            if r.rows.iter().any(|x| options_of(x["fs"].as_str().unwrap_or("")).is_some()) {
                "; uvfs-passthrough-default/-nowatch: no timeout given"
            } else {
                ""
            }
        ));
    }
    out.extend(default_lines(r));
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
    // The same server, requests through io_uring against /dev/fuse, the
    // passthrough with directory readahead against without, and without
    // its crash supervisor (no journal to keep) against with.
    for (a, b) in [
        (MEMFS, MEMFS_DEV),
        (MEMFS, MEMFS_NOREF),
        (PASSTHROUGH, PASSTHROUGH_DEV),
        (PASSTHROUGH_DEV_NOSUP, PASSTHROUGH_DEV),
        (PASSTHROUGH_DEFAULT_NOSUP, PASSTHROUGH_DEFAULT),
        (PASSTHROUGH, PASSTHROUGH_NORA),
        (PASSTHROUGH, PASSTHROUGH_NOREF),
    ] {
        for pass in ["cold", "warm"] {
            for x in rows(a, pass) {
                let Some(y) = rows(b, pass)
                    .into_iter()
                    .find(|y| y["threads"] == x["threads"])
                else {
                    continue;
                };
                if let (Some(u), Some(d)) = (num(x, "stats_per_sec"), num(y, "stats_per_sec")) {
                    out.push(format!(
                        "{pass} T={}: {a} ({}) / {b} = {:.2}x",
                        x["threads"],
                        x["transport"].as_str().unwrap_or("?"),
                        u / d
                    ));
                }
            }
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
    for x in rows(PASSTHROUGH, "cold") {
        out.push(vs_best_peer(r, x, 1.2));
    }
    for x in rows(PASSTHROUGH_NOWATCH, "warm") {
        out.push(vs_best_peer(r, x, 1.5));
    }
    for x in rows(PASSTHROUGH, "warm") {
        if let Some(v) = num(x, "vs_native") {
            out.push(format!(
                "uvfs-passthrough warm vs native: {v:.2}x (target >= 0.9: {}) [T={}]",
                verdict(v, 0.9),
                x["threads"]
            ));
        }
    }
    out.extend(failures(r));
    out.extend(server_peaks(r));
    if !rows(TMPFS, "cold").is_empty() {
        out.push(
            "note: cold = after `echo 2 > /proc/sys/vm/drop_caches` (memfs cannot be remounted \
             cold: its data lives in the server); tmpfs pins its dentries, so its cold pass is warm"
                .into(),
        );
    }
    out
}

pub(super) fn is_peer(x: &Row) -> bool {
    x["fs"].as_str().is_some_and(|f| PEERS.contains(&f))
}

/// `1234567` as `1,234,567`.
pub(super) fn thousands(n: u64) -> String {
    let d = n.to_string();
    let groups: Vec<&str> = d
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| std::str::from_utf8(g).unwrap_or("?"))
        .collect();
    groups.join(",")
}

/// The passthrough as a user mounts it, first: rate, against native,
/// requests per stat (by opcode); the warm default walk against its
/// target (>= 0.9x native and no request at all).
pub(super) fn default_lines(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for fs in [PASSTHROUGH_DEFAULT, PASSTHROUGH_NOWATCH] {
        for x in r.rows.iter().filter(|x| x["fs"] == fs) {
            let Some(rate) = num(x, "stats_per_sec") else {
                continue;
            };
            let pass = x["pass"].as_str().unwrap_or("?");
            let vs = num(x, "vs_native").map_or(String::new(), |v| format!(" = {v:.2}x native"));
            let rps = num(x, "requests_per_stat");
            let target = match (fs, pass, num(x, "vs_native"), rps) {
                (PASSTHROUGH_DEFAULT, "warm", Some(v), Some(q)) => format!(
                    " (target >= 0.9x native, 0 requests/stat: {})",
                    if v >= 0.9 && q == 0.0 {
                        "met"
                    } else {
                        "NOT met"
                    }
                ),
                _ => String::new(),
            };
            out.push(format!(
                "{fs} {pass} T={}: {rate:.0} stats/s{vs}; {} requests/stat{target}{}",
                x["threads"],
                rps.map_or("-".into(), |q| format!("{q:.3}")),
                fmt_ops(x),
            ));
        }
    }
    out
}

/// The headlines: a passthrough row's rate against the fastest
/// peer that walked the whole tree in the same pass at the same thread
/// count (a peer that ran out of fds part way has no rate to compare).
pub(super) fn vs_best_peer(r: &Report, ours: &Row, target: f64) -> String {
    let pass = ours["pass"].as_str().unwrap_or("?");
    let head = format!(
        "{} {pass} vs best completing peer:",
        ours["fs"].as_str().unwrap_or("?")
    );
    let t = &ours["threads"];
    let best = r
        .rows
        .iter()
        .filter(|x| is_peer(x) && x["pass"] == pass && &x["threads"] == t)
        .filter_map(|x| Some((x["fs"].as_str()?, num(x, "stats_per_sec")?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let peers_ran = r.rows.iter().any(is_peer);
    // Peers' timeouts, when they differ from this row's (the no-watch
    // row has the default's, the peers `--timeout`).
    let peer_timeouts = match (
        num(ours, "entry_timeout"),
        r.rows
            .iter()
            .filter(|x| is_peer(x))
            .find_map(|x| num(x, "entry_timeout")),
    ) {
        (None, Some(p)) => format!(", peers at timeout {p} s"),
        _ => String::new(),
    };
    match (num(ours, "stats_per_sec"), best) {
        (None, _) => format!("{head} - (it did not complete the walk) [T={t}]"),
        (Some(_), None) if !peers_ran => format!("{head} - (no peer run; --fs) [T={t}]"),
        (Some(_), None) => format!("{head} - (no peer completed the walk) [T={t}]"),
        (Some(v), Some((name, b))) => format!(
            "{head} {:.2}x (target >= {target}: {}) [T={t}: {:.0} vs {name} {:.0} stats/s{peer_timeouts}]",
            v / b,
            if v / b >= target { "met" } else { "NOT met" },
            v,
            b
        ),
    }
}

/// A line per failed row: how far the walk got and why; a peer that never
/// ran is one line, not one per pass.
pub(super) fn failures(r: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let get = |x: &'_ Row, k: &str| x.get(k).cloned().unwrap_or(Value::Null);
    for x in r
        .rows
        .iter()
        .filter(|x| x.get("ok") == Some(&Value::Bool(false)))
    {
        let fs = x["fs"].as_str().unwrap_or("?");
        let error = get(x, "error");
        let error = error.as_str().unwrap_or("?");
        if x.get("failed_repeats").is_none() {
            let line = format!("{fs}: not run: {error}");
            if !out.contains(&line) {
                out.push(line);
            }
            continue;
        }
        let fds = match (num(x, "max_fds"), num(x, "fd_limit")) {
            (Some(m), Some(l)) => format!(", server peak {} fds (limit {})", m, l),
            (Some(m), None) => format!(", server peak {m} fds"),
            _ => String::new(),
        };
        out.push(format!(
            "{fs} {} T={}: FAILED after {} of {} entries{fds}: {error}",
            x["pass"].as_str().unwrap_or("?"),
            x["threads"],
            thousands(get(x, "seen").as_u64().unwrap_or(0)),
            thousands(get(x, "entries").as_u64().unwrap_or(0)),
        ));
    }
    out
}

/// Per server: the most fds it held and its peak RSS over every pass.
pub(super) fn server_peaks(r: &Report) -> Vec<String> {
    let mut names: Vec<&str> = Vec::new();
    for x in &r.rows {
        if let Some(f) = x["fs"]
            .as_str()
            .filter(|_| x.get("max_fds").is_some_and(|v| !v.is_null()))
        {
            if !names.contains(&f) {
                names.push(f);
            }
        }
    }
    names
        .into_iter()
        .map(|fs| {
            let rows: Vec<&Row> = r.rows.iter().filter(|x| x["fs"] == fs).collect();
            let max = |k: &str| {
                rows.iter()
                    .filter_map(|x| x.get(k).and_then(Value::as_u64))
                    .max()
            };
            let limit = match (max("fd_limit"), max("fd_budget")) {
                (Some(l), Some(b)) => format!(" (limit {l}; fd pool budget {b})"),
                (Some(l), None) => format!(" (limit {l})"),
                (None, Some(b)) => format!(" (fd pool budget {b})"),
                (None, None) => String::new(),
            };
            format!(
                "{fs}: server peak {} fds{limit}, peak RSS {:.1} MiB",
                max("max_fds").unwrap_or(0),
                max("rss_bytes").unwrap_or(0) as f64 / (1024.0 * 1024.0)
            )
        })
        .collect()
}

/// Bar chart: stats/s per (threads, pass), one bar per file system (rows
/// that failed have no rate and no bar; the table and summary show them).
/// Targets: memfs warm 0.8x tmpfs, the default passthrough warm 0.9x
/// native, the passthrough 1.2x (cold) and no-watch 1.5x (warm) the best
/// peer.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    for x in r.rows.iter().filter(|x| num(x, "stats_per_sec").is_some()) {
        push_bar(
            &mut groups,
            format!("T={} {}", x["threads"], x["pass"].as_str().unwrap_or("")),
            x["fs"].as_str().unwrap_or("?").to_string(),
            x["stats_per_sec"].as_f64().unwrap_or(0.0),
        );
    }
    for g in &mut groups {
        let best_peer = PEERS.iter().filter_map(|p| g.value(p)).reduce(f64::max);
        if g.label.ends_with(" warm") {
            if let Some(t) = g.value(TMPFS) {
                g.target(Some(MEMFS), 0.8 * t);
            }
            if let Some(n) = g.value(NATIVE) {
                g.target(Some(PASSTHROUGH_DEFAULT), 0.9 * n);
            }
            if let Some(p) = best_peer {
                g.target(Some(PASSTHROUGH_NOWATCH), 1.5 * p);
            }
        } else if let Some(p) = best_peer {
            g.target(Some(PASSTHROUGH), 1.2 * p);
        }
    }
    (
        "fuse-stat: find-like readdir + lstat through a mount (higher is better)".into(),
        "stats/s".into(),
        groups,
    )
}

/// A numeric cell of a row, if it is there.
pub(super) fn num(r: &Row, key: &str) -> Option<f64> {
    r.get(key).and_then(Value::as_f64)
}
