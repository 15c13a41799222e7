//! Output shared by every workload: a table for people, JSON rows for
//! scripts, an SVG bar chart for a glance, and a progress line on stderr.
//!
//! Every workload repeats each configuration several times and reports the
//! median, because a 2-core machine is noisy: one run is an anecdote.

use serde_json::{Map, Value};
use std::io::{self, Write};
use std::time::Instant;

pub use crate::chart::{bar_chart_svg, push_bar, BarGroup, Target};

/// One result row: a flat JSON object (`impl`, `threads`, `secs`, ...).
pub type Row = Map<String, Value>;

/// Builds a [`Row`] from `key => value` pairs.
#[macro_export]
macro_rules! row {
    ($($k:expr => $v:expr),* $(,)?) => {{
        let mut m = $crate::report::Row::new();
        $( m.insert(($k).to_string(), serde_json::json!($v)); )*
        m
    }};
}

/// Median of a non-empty sample (the mean of the middle two for even sizes).
pub fn median(xs: &[f64]) -> f64 {
    assert!(!xs.is_empty(), "median of an empty sample");
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The results of one workload.
pub struct Report {
    pub workload: String,
    pub rows: Vec<Row>,
    /// The lines printed under the table (ratios, targets and verdicts),
    /// kept in the JSON so `uvfs bench all` can gather the targets.
    pub summary: Vec<String>,
}

impl Report {
    pub fn new(workload: &str) -> Self {
        Report {
            workload: workload.to_string(),
            rows: Vec::new(),
            summary: Vec::new(),
        }
    }

    /// The JSON document `{"workload": ..., "rows": [...]}`.
    pub fn to_json(&self) -> Value {
        let rows = self.rows.iter().cloned().map(Value::Object).collect();
        let mut m = Map::new();
        m.insert("workload".into(), Value::String(self.workload.clone()));
        m.insert("rows".into(), Value::Array(rows));
        if !self.summary.is_empty() {
            let lines = self.summary.iter().cloned().map(Value::String).collect();
            m.insert("summary".into(), Value::Array(lines));
        }
        Value::Object(m)
    }

    /// The report [`Report::to_json`] wrote, or `None` if `v` is not one.
    pub fn from_json(v: &Value) -> Option<Report> {
        let mut r = Report::new(v["workload"].as_str()?);
        for row in v["rows"].as_array()? {
            r.rows.push(row.as_object()?.clone());
        }
        for line in v["summary"].as_array().into_iter().flatten() {
            r.summary.push(line.as_str()?.to_string());
        }
        Some(r)
    }

    pub fn write_json(&self, path: &str) -> io::Result<()> {
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(io::Error::other)?;
        std::fs::write(path, text + "\n")
    }

    /// A fixed-width table of the given columns (missing cells print `-`).
    pub fn table(&self, columns: &[&str]) -> String {
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| columns.iter().map(|c| fmt_cell(r.get(*c))).collect())
            .collect();
        let widths: Vec<usize> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| cells.iter().map(|r| r[i].len()).fold(c.len(), usize::max))
            .collect();
        let mut out = String::new();
        let line = |out: &mut String, vals: Vec<&str>| {
            let parts: Vec<String> = vals
                .iter()
                .zip(&widths)
                .map(|(v, w)| format!("{v:>w$}"))
                .collect();
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(&mut out, columns.to_vec());
        for r in &cells {
            line(&mut out, r.iter().map(String::as_str).collect());
        }
        out
    }

    /// Rows whose `key` fields all equal the given values.
    pub fn find(&self, keys: &[(&str, Value)]) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| keys.iter().all(|(k, v)| r.get(*k) == Some(v)))
    }
}

fn fmt_cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.abs() >= 1000.0 {
                    format!("{f:.0}")
                } else if f.abs() >= 10.0 {
                    format!("{f:.1}")
                } else {
                    format!("{f:.3}")
                }
            }
        }
        Some(other) => other.to_string(),
    }
}

/// A progress line on stderr for runs longer than a few seconds: which step
/// of how many, and the elapsed time. Silent when stderr is not a terminal
/// unless `UVFS_PROGRESS=1`, so CI logs stay readable.
pub struct Progress {
    total: usize,
    done: usize,
    start: Instant,
    live: bool,
}

impl Progress {
    pub fn new(total: usize) -> Self {
        let live = std::env::var_os("UVFS_PROGRESS").is_some() || is_tty(2);
        Progress {
            total,
            done: 0,
            start: Instant::now(),
            live,
        }
    }

    /// Announces the step about to run.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        if self.live {
            let mut e = io::stderr().lock();
            let _ = write!(
                e,
                "\r\x1b[K[{}/{} {:>5.1}s] {what}",
                self.done,
                self.total,
                self.start.elapsed().as_secs_f64()
            );
            let _ = e.flush();
        }
    }

    pub fn finish(&self) {
        if self.live {
            let _ = writeln!(
                io::stderr(),
                "\r\x1b[K[done in {:.1}s]",
                self.start.elapsed().as_secs_f64()
            );
        }
    }
}

fn is_tty(fd: i32) -> bool {
    use std::io::IsTerminal;
    match fd {
        1 => io::stdout().is_terminal(),
        _ => io::stderr().is_terminal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn json_has_workload_and_rows() {
        let mut r = Report::new("demo");
        r.rows
            .push(crate::row!("impl" => "uvfs", "threads" => 2, "ops_per_sec" => 1.5));
        let v = r.to_json();
        assert_eq!(v["workload"], "demo");
        assert_eq!(v["rows"][0]["impl"], "uvfs");
        assert_eq!(v["rows"][0]["threads"], 2);
        r.summary.push("a line".into());
        let back = Report::from_json(&r.to_json()).unwrap();
        assert_eq!(back.workload, "demo");
        assert_eq!(back.rows, r.rows);
        assert_eq!(back.summary, ["a line"]);
        assert!(Report::from_json(&serde_json::json!({"rows": []})).is_none());
    }

    #[test]
    fn table_aligns_and_marks_missing() {
        let mut r = Report::new("demo");
        r.rows.push(crate::row!("a" => "x", "b" => 12345.6));
        r.rows.push(crate::row!("a" => "longer"));
        let t = r.table(&["a", "b"]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].ends_with("12346"), "{t}");
        assert!(lines[2].ends_with('-'), "{t}");
    }
}
