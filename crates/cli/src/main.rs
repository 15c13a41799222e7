//! `uvfs`: mount a file system, read a running server's statistics, or run
//! the benchmarks that reproduce the seeds.
//!
//! # Module map
//! `mount_opts` (the options of `mount`, `stat`, `umount`) · `mount_cmd`
//! (the commands) · `mount_log` (what a mount logs as it starts) ·
//! `fstab` (fstab-style `-o` options) · `mount_helper` (`mount.uvfs`, as
//! mount(8) runs it) · `bench_all` (`uvfs bench all`).

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use uvfs_bench::report::Report;

mod bench_all;
mod fstab;
mod mount_cmd;
mod mount_helper;
mod mount_log;
mod mount_opts;

/// Counts heap bytes when the memory workload asks (off otherwise).
#[global_allocator]
static ALLOC: uvfs_process::alloc::Counting = uvfs_process::alloc::Counting;

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
    /// Mount memfs, or with --source a host directory, over FUSE (detaches
    /// unless --foreground).
    Mount(mount_opts::MountOpts),
    /// Print a running server's vnode-layer and FUSE statistics.
    Stat(mount_opts::StatOpts),
    /// Unmount a uvfs mount (as root like umount, otherwise through
    /// fusermount3 -u) and wait for its server to exit; if the file
    /// system stays mounted elsewhere (a bind mount, another mount
    /// namespace), say where: its server serves those until they go.
    Umount(mount_opts::UmountOpts),
    /// Replace a mount's server with a new process (a rebuilt binary)
    /// without unmounting: open files, working directories and locks
    /// stay valid.
    Upgrade(mount_opts::UpgradeOpts),
    /// (Internal) started by a server being upgraded: take its mount over
    /// from the state on descriptor FD.
    #[command(name = "__takeover", hide = true)]
    Takeover { fd: String },
    /// (Internal) started by a server: supervise it, starting a new one
    /// if it dies, from the link on descriptor FD.
    #[command(name = "__supervise", hide = true)]
    Supervise { fd: String },
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
    /// Seed 001: per-mount prune (ZFS arc_prune) in a cache shared with
    /// another file system and full of held vnodes.
    Prune(uvfs_bench::prune::PruneOpts),
    /// Heap bytes per cached vnode, measured with a counting allocator.
    Memory(uvfs_bench::memory::MemoryOpts),
    /// Seed 002: will-it-scale readseek3, disjoint page reads under a range
    /// lock (none, rwlock, mutex-list, uvfs); --writers, --truncate-every.
    Readseek(uvfs_bench::readseek::ReadseekOpts),
    /// find-like parallel readdir + lstat through a real FUSE mount of
    /// memfs, cold and warm, against tmpfs (and passthrough vs native).
    FuseStat(uvfs_bench::fusestat::FuseStatOpts),
    /// Sequential write and read of one large file through the passthrough
    /// mount, against native, the peers, and memfs.
    Seqio(uvfs_bench::seqio::SeqioOpts),
    /// Time until a change made on the host in a passthrough's source
    /// shows through the mount, per kind of change: uvfs with default
    /// options against each peer at its defaults.
    Coherence(uvfs_bench::coherence::CoherenceOpts),
    /// Everyday work on each file system with default mount options:
    /// untar, git add+commit, git status, git grep, SQLite, rm -rf.
    Devwork(uvfs_bench::devwork::DevworkOpts),
    /// Longest wait of a request while the mount's server is replaced by
    /// a live upgrade, under load: memfs and passthrough, idle and full.
    Restart(uvfs_bench::restart::RestartOpts),
    /// Every workload above, results (JSON + SVG) into one directory.
    All(bench_all::AllOpts),
}

/// Prints a report, its target ratios, and writes JSON/SVG where asked.
fn finish(
    r: std::io::Result<Report>,
    columns: &[&str],
    common: &uvfs_bench::CommonOpts,
    summary: fn(&Report) -> Vec<String>,
    chart: fn(&Report) -> (String, String, Vec<uvfs_bench::report::BarGroup>),
) -> std::io::Result<()> {
    let mut r = r?;
    r.summary = summary(&r);
    uvfs_bench::emit(&r, columns, common, chart)?;
    for line in &r.summary {
        println!("{line}");
    }
    Ok(())
}

fn main() -> ExitCode {
    // First: heap mapped from here on gets no transparent huge pages
    // (hugepages.rs says what they cost the vnode cache here).
    uvfs_process::hugepages::apply();
    uvfs_process::alloc::mark_installed();
    // Run by mount(8) as /sbin/mount.uvfs (a link to this binary).
    if std::env::args_os()
        .next()
        .is_some_and(|a| mount_helper::is_helper(&a))
    {
        return match mount_helper::helper(&mount_helper::HelperArgs::parse()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mount.uvfs: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse();
    // Before any thread starts: Ctrl-C during a benchmark then unmounts and
    // removes what it made (tmpfs, servers, trees) instead of leaving it.
    if matches!(cli.cmd, Cmd::Bench { .. }) {
        if let Err(e) = uvfs_bench::cleanup::install() {
            eprintln!("uvfs: {e}");
            return ExitCode::FAILURE;
        }
    }
    let result: std::io::Result<()> = match cli.cmd {
        Cmd::Mount(o) => mount_cmd::mount(&o),
        Cmd::Stat(o) => mount_cmd::stat(&o),
        Cmd::Umount(o) => mount_cmd::umount(&o),
        Cmd::Upgrade(o) => mount_cmd::upgrade(&o),
        Cmd::Takeover { fd } => mount_cmd::take_over(&fd),
        Cmd::Supervise { fd } => mount_cmd::supervise(&fd),
        Cmd::Bench { workload } => match workload {
            Workload::All(o) => bench_all::run(&o),
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
                    "cpu_ns_per_op",
                    "cores_busy",
                    "first_done_secs",
                ],
                &o.common,
                uvfs_bench::statstorm::summary,
                uvfs_bench::statstorm::chart,
            ),
            Workload::Prune(o) => finish(
                uvfs_bench::prune::run(&o),
                &[
                    "impl",
                    "vnodes",
                    "attempts",
                    "recycled",
                    "attempts_per_recycled",
                    "cpu_ns_per_recycled",
                    "secs",
                ],
                &o.common,
                uvfs_bench::prune::summary,
                uvfs_bench::prune::chart,
            ),
            Workload::Memory(o) => finish(
                uvfs_bench::memory::run(&o),
                &["impl", "vnodes", "bytes_per_vnode", "rss_per_vnode"],
                &o.common,
                uvfs_bench::memory::summary,
                uvfs_bench::memory::chart,
            ),
            Workload::Readseek(o) if o.mount => finish(
                uvfs_bench::readseek::run(&o),
                uvfs_bench::readseek_mount::COLUMNS,
                &o.common,
                uvfs_bench::readseek_mount::summary,
                uvfs_bench::readseek::chart,
            ),
            Workload::Readseek(o) => finish(
                uvfs_bench::readseek::run(&o),
                uvfs_bench::readseek::COLUMNS,
                &o.common,
                uvfs_bench::readseek::summary,
                uvfs_bench::readseek::chart,
            ),
            Workload::FuseStat(o) => finish(
                uvfs_bench::fusestat::run(&o),
                uvfs_bench::fusestat::COLUMNS,
                &o.common,
                uvfs_bench::fusestat::summary,
                uvfs_bench::fusestat::chart,
            ),
            Workload::Coherence(o) => finish(
                uvfs_bench::coherence::run(&o),
                uvfs_bench::coherence::COLUMNS,
                &o.common,
                uvfs_bench::coherence::summary,
                uvfs_bench::coherence::chart,
            ),
            // A failed pass (I/O error, wrong content) fails the command,
            // after the table shows it.
            Workload::Seqio(o) => uvfs_bench::seqio::run(&o).and_then(|r| {
                let failed = uvfs_bench::seqio::check(&r);
                finish(
                    Ok(r),
                    uvfs_bench::seqio::COLUMNS,
                    &o.common,
                    uvfs_bench::seqio::summary,
                    uvfs_bench::seqio::chart,
                )
                .and(failed)
            }),
            // A failed step or check (wrong tree, git or SQLite output)
            // fails the command, after the table shows it.
            Workload::Devwork(o) => uvfs_bench::devwork::run(&o).and_then(|r| {
                let failed = uvfs_bench::devwork::check(&r);
                finish(
                    Ok(r),
                    &uvfs_bench::devwork::COLUMNS,
                    &o.common(),
                    uvfs_bench::devwork::summary,
                    uvfs_bench::devwork::chart,
                )
                .and(failed)
            }),
            // A failed load operation or upgrade fails the command, after
            // the table shows it.
            Workload::Restart(o) => uvfs_bench::restart::run(&o).and_then(|r| {
                let failed = uvfs_bench::restart::check(&r);
                finish(
                    Ok(r),
                    uvfs_bench::restart::COLUMNS,
                    &o.common,
                    uvfs_bench::restart::summary,
                    uvfs_bench::restart::chart,
                )
                .and(failed)
            }),
        },
    };
    // A benchmark stopped by a signal fails on what the cleanup pulled
    // from under it; the signal thread reports and exits instead.
    uvfs_bench::cleanup::hold_if_signalled();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uvfs: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parses(args: &str) -> bool {
        Cli::try_parse_from(std::iter::once("uvfs").chain(args.split_whitespace())).is_ok()
    }

    #[test]
    fn benchmark_counts_must_be_at_least_one() {
        for bad in [
            "bench statstorm --threads 0",
            "bench statstorm --threads 1,0",
            "bench statstorm --files 0",
            "bench statstorm --limit 0",
            "bench statstorm --repeats 0",
            "bench prune --vnodes 0,10",
            "bench memory --vnodes 0",
            "bench readseek --threads 2,0",
            "bench readseek --secs 0",
            "bench readseek --truncate-every 0",
            "bench fuse-stat --files 0",
            "bench fuse-stat --per-dir 0",
            "bench fuse-stat --timeout nan",
            "bench seqio --server-threads 0",
            "bench coherence --trials 0",
            "bench coherence --wait 0",
            "bench coherence --poll-ms -1",
            "bench devwork --repeats 0",
            "bench devwork --files 0",
            "bench restart --upgrades 0",
            "bench restart --threads 0",
            "bench restart --nodes 0",
        ] {
            assert!(!parses(bad), "accepted: {bad}");
        }
        for good in [
            "bench statstorm --threads 1,2 --files 1000 --limit 10 --repeats 1",
            "bench readseek --threads 1 --secs 0.1 --truncate-every 5",
            "bench fuse-stat --files 10 --per-dir 1 --timeout 0",
            "bench coherence --trials 3 --wait 1.5 --poll-ms 0.5 --kinds chmod,rename",
            "bench devwork --quick --fs uvfs-memfs,native --repeats 2",
            "bench restart --quick --upgrades 2 --configs memfs-idle,passthrough-nodes",
        ] {
            assert!(parses(good), "rejected: {good}");
        }
    }
}
