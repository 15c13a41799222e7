//! `uvfs bench all`: every workload in turn, each in its own process (so
//! one workload's heap and threads do not disturb the next), with its JSON
//! and SVG written into one directory.

use std::path::PathBuf;
use std::process::Command;

#[derive(clap::Args, Debug, Clone)]
pub struct AllOpts {
    /// Where to write `<workload>.json` and `<workload>.svg`.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Shorter runs.
    #[arg(long)]
    pub quick: bool,
    /// Workloads to run, in order.
    #[arg(long, value_delimiter = ',', default_values_t = vec![
        "statstorm".to_string(), "prune".to_string(), "memory".to_string(), "readseek".to_string(),
        "fuse-stat".to_string(), "seqio".to_string(), "coherence".to_string(),
        "devwork".to_string(),
    ])]
    pub workloads: Vec<String>,
}

pub fn run(o: &AllOpts) -> std::io::Result<()> {
    std::fs::create_dir_all(&o.out)?;
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
    println!("results in {}", o.out.display());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "workloads failed: {}",
            failed.join(", ")
        )))
    }
}
