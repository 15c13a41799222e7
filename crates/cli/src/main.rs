//! `uvfs`: mount a file system, read a running server's statistics, or run
//! the benchmarks that reproduce the seeds.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use uvfs_bench::report::Report;

/// Counts heap bytes when the memory workload asks (off otherwise).
#[global_allocator]
static ALLOC: uvfs_bench::alloc::Counting = uvfs_bench::alloc::Counting;

#[derive(Parser)]
#[command(
    name = "uvfs",
    version,
    about = "A userspace VFS: vnode layer, range locks and FUSE server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a benchmark workload (side by side across implementations).
    Bench {
        #[command(subcommand)]
        workload: Workload,
    },
}

#[derive(Subcommand)]
enum Workload {
    /// Seed 000: parallel find+stat walks through the name and vnode caches,
    /// large vs small vnode limit, uvfs vs the FreeBSD replicas.
    Statstorm(uvfs_bench::statstorm::StatstormOpts),
}

/// Prints a report, its target ratios, and writes JSON/SVG where asked.
fn finish(
    r: std::io::Result<Report>,
    columns: &[&str],
    common: &uvfs_bench::CommonOpts,
    summary: fn(&Report) -> Vec<String>,
    chart: fn(&Report) -> (String, String, Vec<uvfs_bench::report::BarGroup>),
) -> std::io::Result<()> {
    let r = r?;
    uvfs_bench::emit(&r, columns, common, chart)?;
    for line in summary(&r) {
        println!("{line}");
    }
    Ok(())
}

fn main() -> ExitCode {
    uvfs_bench::alloc::mark_installed();
    let cli = Cli::parse();
    let result: std::io::Result<()> = match cli.cmd {
        Cmd::Bench { workload } => match workload {
            Workload::Statstorm(o) => finish(
                uvfs_bench::statstorm::run(&o),
                &[
                    "impl",
                    "threads",
                    "limit_kind",
                    "limit",
                    "files",
                    "secs",
                    "ops_per_sec",
                    "recycled",
                ],
                &o.common,
                uvfs_bench::statstorm::summary,
                uvfs_bench::statstorm::chart,
            ),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uvfs: {e}");
            ExitCode::FAILURE
        }
    }
}
