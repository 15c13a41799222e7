//! Workloads behind `uvfs bench`: the seeds' experiments, each run side by
//! side across implementations in one process so the ratios we report come
//! from one run on one (noisy, 2-core) machine.
//!
//! # Module map
//! Workloads (`uvfs bench NAME`): `statstorm` (seed 000), `prune` (seed
//! 001), `readseek` with `readseek_opts` and `readseek_mount` (seed 002),
//! `memory`, `fusestat` (`fuse-stat`), `coherence`, `seqio`, `devwork`,
//! `restart`.
//! What they compare: `cache` (one interface over the vnode caches),
//! `freebsd` (the FreeBSD replica behind it), `nocache`, `baseline` (the
//! locks readseek holds uvfs's against), `peers` (other FUSE passthrough
//! servers), `synth` (a synthetic file system for the cache workloads).
//! Around them: `walk` (trees of files and a `find`-like walker),
//! `fuse_mount` (scratch mounts of real servers), `procstat` (what a
//! server process holds), `cputime`, `report` and `chart` (tables, JSON,
//! SVG), `setup` (what `uvfs bench all` installs and builds), `cleanup`
//! (what an interrupted run leaves behind).

pub mod baseline;
pub mod cache;
pub mod chart;
pub mod cleanup;
pub mod coherence;
pub mod cputime;
pub mod devwork;
pub mod freebsd;
pub mod fuse_mount;
pub mod fusestat;
pub mod memory;
pub mod nocache;
pub mod peers;
pub mod procstat;
pub mod prune;
pub mod readseek;
pub mod readseek_mount;
pub mod readseek_opts;
pub mod report;
pub mod restart;
pub mod seqio;
pub mod setup;
pub mod statstorm;
pub mod synth;
pub mod walk;

/// Flags every workload takes.
/// Parses a count that must be at least 1 (threads, files, repeats, a
/// limit): a zero used to run an empty benchmark, or be quietly raised.
pub fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

/// Parses a number of seconds, zero allowed (a timeout).
pub fn non_negative_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        Ok(_) => Err(format!("{s} is not a number of seconds >= 0")),
        Err(e) => Err(e.to_string()),
    }
}

/// Parses a positive number of seconds.
pub fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        Ok(_) => Err(format!("{s} is not a positive number of seconds")),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonOpts {
    /// Write the rows as JSON `{"workload": ..., "rows": [...]}` to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Write a bar chart of the comparison as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<String>,
    /// Repeats per configuration (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one())]
    pub repeats: usize,
    /// A much shorter run (seconds, for smoke tests and CI).
    #[arg(long)]
    pub quick: bool,
}

/// Prints a workload's table and writes the JSON and SVG the user asked for.
/// `chart` turns the rows into bar groups: `(title, y axis label, groups)`.
pub fn emit(
    report: &report::Report,
    columns: &[&str],
    common: &CommonOpts,
    chart: impl Fn(&report::Report) -> (String, String, Vec<report::BarGroup>),
) -> std::io::Result<()> {
    print!("{}", report.table(columns));
    if let Some(path) = &common.json {
        report.write_json(path)?;
    }
    if let Some(path) = &common.svg {
        let (title, y, groups) = chart(report);
        std::fs::write(path, report::bar_chart_svg(&title, &y, &groups))?;
    }
    Ok(())
}

pub use uvfs_process::{alloc, hugepages};
