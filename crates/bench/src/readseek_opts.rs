//! The options of `uvfs bench readseek`, apart from the workload so that
//! its in-memory run (`readseek.rs`) and its run through a FUSE mount
//! (`readseek_mount.rs`) each take them without needing the other.

use crate::CommonOpts;

#[derive(clap::Args, Debug, Clone)]
pub struct ReadseekOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Reader thread counts (comma separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 10], value_parser = crate::at_least_one())]
    pub threads: Vec<usize>,
    /// Writers, each rewriting its own page under a write lock.
    #[arg(long, default_value_t = 0)]
    pub writers: usize,
    /// Truncate and re-extend the file under a whole-file lock every MS ms.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub truncate_every: Option<u64>,
    /// Seconds per measurement (default 0.8, or 0.2 with --quick).
    #[arg(long, value_parser = crate::positive_secs)]
    pub secs: Option<f64>,
    /// Read through a FUSE mount of memfs with O_DIRECT instead (see
    /// `readseek_mount.rs`).
    #[arg(long)]
    pub mount: bool,
}
