//! `uvfs bench all`: every workload in turn, each in its own process (so
//! one workload's heap and threads do not disturb the next), with its JSON
//! and SVG written into one directory. It first sets up what the workloads
//! compare against (`uvfs_bench::setup`) and ends with one table of every
//! target against its result.

use std::path::PathBuf;
use std::process::Command;
use uvfs_bench::report::Report;

#[derive(clap::Args, Debug, Clone)]
pub struct AllOpts {
    /// Where to write `<workload>.json` and `<workload>.svg`.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Shorter runs.
    #[arg(long)]
    pub quick: bool,
    /// Neither install Debian packages nor build the peers first.
    #[arg(long)]
    pub no_setup: bool,
    /// Fail if anything could not be set up (CI: a peer that stops
    /// building must not pass unnoticed).
    #[arg(long, conflicts_with = "no_setup")]
    pub strict_setup: bool,
    /// Run nothing: draw `<workload>.svg` again from each
    /// `<workload>.json` in the output directory.
    #[arg(long, conflicts_with_all = ["no_setup", "strict_setup"])]
    pub redraw: bool,
    /// Workloads to run, in order.
    #[arg(long, value_delimiter = ',', default_values_t = vec![
        "statstorm".to_string(), "prune".to_string(), "memory".to_string(), "readseek".to_string(),
        "fuse-stat".to_string(), "seqio".to_string(), "coherence".to_string(),
        "devwork".to_string(), "restart".to_string(),
    ])]
    pub workloads: Vec<String>,
}

pub fn run(o: &AllOpts) -> std::io::Result<()> {
    if o.redraw {
        return redraw(o);
    }
    std::fs::create_dir_all(&o.out)?;
    let setup_problems = if o.no_setup {
        Vec::new()
    } else {
        println!("== setup ==");
        let p = uvfs_bench::setup::prepare();
        for line in &p {
            println!("setup: NOT SET UP: {line}");
        }
        println!();
        p
    };
    let exe = std::env::current_exe()?;
    let mut failed = Vec::new();
    for w in &o.workloads {
        println!("== uvfs bench {w} ==");
        let mut cmd = Command::new(&exe);
        uvfs_bench::cleanup::unblock_in_child(&mut cmd);
        cmd.arg("bench")
            .arg(w)
            .arg("--json")
            .arg(o.out.join(format!("{w}.json")))
            .arg("--svg")
            .arg(o.out.join(format!("{w}.svg")));
        if o.quick {
            cmd.arg("--quick");
        }
        // The figures need the loaded variant too (its reader-only
        // rows come with it).
        if w == "readseek" {
            cmd.args(["--writers", "1"]);
        }
        let status = cmd.status()?;
        if !status.success() {
            failed.push(w.clone());
        }
        println!();
    }
    print!(
        "{}",
        targets_table(&o.out, &o.workloads, &failed, &setup_problems)
    );
    println!("results in {}", o.out.display());
    let mut errors = Vec::new();
    if !failed.is_empty() {
        errors.push(format!("workloads failed: {}", failed.join(", ")));
    }
    if o.strict_setup && !setup_problems.is_empty() {
        errors.push(format!(
            "{} thing(s) not set up (--strict-setup): {}",
            setup_problems.len(),
            setup_problems.join("; ")
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(std::io::Error::other(errors.join("; ")))
    }
}

type ChartFn = fn(&Report) -> (String, String, Vec<uvfs_bench::report::BarGroup>);

/// The chart `uvfs bench <workload>` draws.
fn chart_of(workload: &str) -> Option<ChartFn> {
    use uvfs_bench::*;
    Some(match workload {
        "statstorm" => statstorm::chart,
        "prune" => prune::chart,
        "memory" => memory::chart,
        "readseek" => readseek::chart,
        "fuse-stat" => fusestat::chart,
        "seqio" => seqio::chart,
        "coherence" => coherence::chart,
        "devwork" => devwork::chart,
        "restart" => restart::chart,
        _ => return None,
    })
}

/// `--redraw`: each workload's SVG drawn again from its JSON.
fn redraw(o: &AllOpts) -> std::io::Result<()> {
    for w in &o.workloads {
        let json = o.out.join(format!("{w}.json"));
        let chart = chart_of(w).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{w}: no such workload"),
            )
        })?;
        let text = std::fs::read(&json)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", json.display())))?;
        let report = serde_json::from_slice(&text)
            .ok()
            .and_then(|v| Report::from_json(&v))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: not a uvfs bench report", json.display()),
                )
            })?;
        let (title, y, groups) = chart(&report);
        let svg = o.out.join(format!("{w}.svg"));
        std::fs::write(&svg, uvfs_bench::report::bar_chart_svg(&title, &y, &groups))?;
        println!("{}", svg.display());
    }
    Ok(())
}

/// One row of the closing table.
struct TargetRow {
    workload: String,
    verdict: &'static str,
    line: String,
}

/// A summary line's verdict: the workloads end every target line with
/// `met`, `NOT met` or `MISSED`.
fn verdict(line: &str) -> &'static str {
    let l = line.to_ascii_lowercase();
    if l.contains("not met") || l.contains("missed") {
        "MISSED"
    } else if l.contains("met") {
        "met"
    } else {
        "-"
    }
}

/// The target lines of each workload's JSON, a row for a workload that
/// failed or wrote none, and a row per peer or file system that could not
/// be set up.
fn target_rows(json: &serde_json::Value, workload: &str, failed: bool) -> Vec<TargetRow> {
    let mut rows: Vec<TargetRow> = json["summary"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str())
        .filter(|l| l.contains("target"))
        .map(|l| TargetRow {
            workload: workload.to_string(),
            verdict: verdict(l),
            line: l.trim_start_matches("target: ").to_string(),
        })
        .collect();
    for r in json["rows"].as_array().into_iter().flatten() {
        if r["setup_failed"] == true {
            let name = ["fs", "server", "impl"]
                .iter()
                .find_map(|k| r[*k].as_str())
                .unwrap_or("?");
            rows.push(TargetRow {
                workload: workload.to_string(),
                verdict: "SETUP",
                line: format!("{name} not set up: {}", r["error"].as_str().unwrap_or("?")),
            });
        }
    }
    if failed {
        rows.push(TargetRow {
            workload: workload.to_string(),
            verdict: "FAILED",
            line: "the workload failed (its output above says why)".into(),
        });
    } else if rows.is_empty() {
        rows.push(TargetRow {
            workload: workload.to_string(),
            verdict: "-",
            line: "no target line".into(),
        });
    }
    rows
}

/// Every workload's targets against its results, one line each.
fn targets_table(
    out: &std::path::Path,
    workloads: &[String],
    failed: &[String],
    setup_problems: &[String],
) -> String {
    let mut rows: Vec<TargetRow> = setup_problems
        .iter()
        .map(|p| TargetRow {
            workload: "setup".into(),
            verdict: "SETUP",
            line: p.clone(),
        })
        .collect();
    for w in workloads {
        let json = std::fs::read(out.join(format!("{w}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null);
        rows.extend(target_rows(&json, w, failed.contains(w)));
    }
    let ww = rows.iter().map(|r| r.workload.len()).fold(8, usize::max);
    let mut s = format!(
        "== targets ==\n{:<ww$}  verdict  target and result\n",
        "workload"
    );
    for r in &rows {
        s += &format!("{:<ww$}  {:<7}  {}\n", r.workload, r.verdict, r.line);
    }
    let missed = rows.iter().filter(|r| r.verdict == "MISSED").count();
    let met = rows.iter().filter(|r| r.verdict == "met").count();
    let setup = rows.iter().filter(|r| r.verdict == "SETUP").count();
    s += &format!(
        "{met} met, {missed} missed, {setup} not set up, {} workloads failed\n",
        failed.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        all: AllOpts,
    }

    impl AllOpts {
        fn parse_from(args: [&str; 1]) -> AllOpts {
            Cli::parse_from(args).all
        }
    }

    #[test]
    fn every_default_workload_has_a_chart() {
        let o = AllOpts::parse_from(["all"]);
        for w in &o.workloads {
            assert!(chart_of(w).is_some(), "{w}");
        }
        assert!(chart_of("nope").is_none());
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict("x 2.1x (target >= 2: met)"), "met");
        assert_eq!(verdict("x (target >= 0.9: NOT met; ...)"), "MISSED");
        assert_eq!(verdict("target: a / b 2.6 <= 2: MISSED"), "MISSED");
        assert_eq!(
            verdict("target: go-fuse >= 2 on every step: missed (untar 1.2)"),
            "MISSED"
        );
        assert_eq!(verdict("a plain ratio 1.2x"), "-");
    }

    #[test]
    fn rows_from_summary_setup_failures_and_failed_workloads() {
        let j = json!({
            "workload": "seqio",
            "rows": [
                {"fs": "uvfs-passthrough", "ok": true},
                {"fs": "libfuse-passthrough_ll", "setup_failed": true, "error": "no libfuse"},
            ],
            "summary": [
                "uvfs-passthrough write vs best peer: 1.12x (target >= 0.9: met; ...)",
                "a line with no goal",
            ],
        });
        let rows = target_rows(&j, "seqio", false);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].verdict, "met");
        assert_eq!(rows[1].verdict, "SETUP");
        assert!(rows[1]
            .line
            .contains("libfuse-passthrough_ll not set up: no libfuse"));
        let none = target_rows(&serde_json::Value::Null, "prune", true);
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].verdict, "FAILED");
    }
}
