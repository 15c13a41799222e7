//! `uvfs`: mount a file system, read a running server's statistics, or run
//! the benchmarks that reproduce the seeds.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use uvfs_bench::report::Report;

#[derive(Parser)]
#[command(name = "uvfs", version, about = "A userspace VFS: vnode layer, range locks and FUSE server")]
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
enum Workload {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: std::io::Result<()> = match cli.cmd {
        Cmd::Bench { workload } => match workload {},
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uvfs: {e}");
            ExitCode::FAILURE
        }
    }
}

