//! Output shared by every workload: a table for people, JSON rows for
//! scripts, an SVG bar chart for a glance, and a progress line on stderr.
//!
//! Every workload repeats each configuration several times and reports the
//! median, because a 2-core machine is noisy: one run is an anecdote.

use serde_json::{Map, Value};
use std::io::{self, Write};
use std::time::Instant;

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
}

impl Report {
    pub fn new(workload: &str) -> Self {
        Report {
            workload: workload.to_string(),
            rows: Vec::new(),
        }
    }

    /// The JSON document `{"workload": ..., "rows": [...]}`.
    pub fn to_json(&self) -> Value {
        let rows = self.rows.iter().cloned().map(Value::Object).collect();
        let mut m = Map::new();
        m.insert("workload".into(), Value::String(self.workload.clone()));
        m.insert("rows".into(), Value::Array(rows));
        Value::Object(m)
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

/// One group of bars in a chart: a label and `(series, value)` pairs.
pub struct BarGroup {
    pub label: String,
    pub bars: Vec<(String, f64)>,
}

/// A grouped bar chart as a standalone SVG document: one group per
/// configuration, one coloured bar per implementation, value printed on each
/// bar, so "who wins where" reads at a glance.
pub fn bar_chart_svg(title: &str, y_label: &str, groups: &[BarGroup]) -> String {
    const PALETTE: [&str; 6] = [
        "#2b6cb0", "#c53030", "#dd6b20", "#2f855a", "#6b46c1", "#718096",
    ];
    let mut series: Vec<String> = Vec::new();
    for g in groups {
        for (s, _) in &g.bars {
            if !series.contains(s) {
                series.push(s.clone());
            }
        }
    }
    let max = groups
        .iter()
        .flat_map(|g| g.bars.iter().map(|b| b.1))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let bar_w = 22.0;
    let group_w = bar_w * series.len().max(1) as f64 + 30.0;
    let (left, top, plot_h) = (80.0, 50.0, 300.0);
    let width = left + group_w * groups.len() as f64 + 160.0;
    let height = top + plot_h + 90.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>\n\
         <text x=\"14\" y=\"{:.0}\" transform=\"rotate(-90 14 {:.0})\">{}</text>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{:.0}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"black\"/>\n",
        esc(title),
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        esc(y_label),
        top + plot_h,
        top + plot_h,
        left + group_w * groups.len() as f64,
        top + plot_h,
    );
    for i in 0..=4 {
        let v = max * i as f64 / 4.0;
        let y = top + plot_h - plot_h * i as f64 / 4.0;
        s += &format!(
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{}</text>\n",
            left - 4.0,
            y + 4.0,
            human(v)
        );
    }
    for (gi, g) in groups.iter().enumerate() {
        let gx = left + 15.0 + group_w * gi as f64;
        for (name, v) in &g.bars {
            let si = series.iter().position(|x| x == name).unwrap_or(0);
            let h = plot_h * v / max;
            let x = gx + bar_w * si as f64;
            let y = top + plot_h - h;
            s += &format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{}: {}</title></rect>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"8\" text-anchor=\"middle\">{}</text>\n",
                bar_w - 2.0,
                PALETTE[si % PALETTE.len()],
                esc(name),
                human(*v),
                x + bar_w / 2.0 - 1.0,
                y - 2.0,
                human(*v)
            );
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text>\n",
            gx + bar_w * series.len() as f64 / 2.0,
            top + plot_h + 16.0,
            esc(&g.label)
        );
    }
    let lx = left + group_w * groups.len() as f64 + 20.0;
    for (i, name) in series.iter().enumerate() {
        let y = top + 16.0 * i as f64;
        s += &format!(
            "<rect x=\"{lx:.0}\" y=\"{y:.0}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{:.0}\" y=\"{:.0}\">{}</text>\n",
            PALETTE[i % PALETTE.len()],
            lx + 16.0,
            y + 10.0,
            esc(name)
        );
    }
    s += "</svg>\n";
    s
}

fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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

    #[test]
    fn svg_names_every_series_and_group() {
        let g = vec![BarGroup {
            label: "T=2".into(),
            bars: vec![("uvfs".into(), 10.0), ("freebsd".into(), 5.0)],
        }];
        let svg = bar_chart_svg("t", "ops/s", &g);
        assert!(svg.starts_with("<svg"));
        for needle in ["uvfs", "freebsd", "T=2", "</svg>"] {
            assert!(svg.contains(needle), "{needle} missing");
        }
    }
}
