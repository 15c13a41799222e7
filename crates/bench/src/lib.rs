//! Workloads behind `uvfs bench`: the seeds' experiments, each run side by
//! side across implementations in one process so the ratios we report come
//! from one run on one (noisy, 2-core) machine.

pub mod alloc;
pub mod cache;
pub mod cleanup;
pub mod cputime;
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
pub mod report;
pub mod seqio;
pub mod statstorm;
pub mod synth;
pub mod walk;

/// Flags every workload takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonOpts {
    /// Write the rows as JSON `{"workload": ..., "rows": [...]}` to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Write a bar chart of the comparison as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<String>,
    /// Repeats per configuration (the median is reported).
    #[arg(long, default_value_t = 3)]
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
