//! `uvfs bench seqio`: sequential write and read throughput of one large
//! file (1 GiB by default) through the uvfs passthrough mount, against the
//! native file system it serves and against the peers (libfuse's
//! `passthrough_ll`, fuse-backend-rs's passthrough) serving the same
//! directory; a uvfs memfs mount is run for reference, beside a private
//! tmpfs (the kernel's own in-memory file system).
//!
//! # Passes
//! Per repeat and file system, in turn (every file system in repeat 1,
//! then every one in repeat 2, ...: drift on this noisy 2-core machine then
//! hits them alike):
//! - **write**: create the file, `--block`-sized `write`s of a pattern
//!   (see `seqio/pattern.rs`), `fsync`, close. The time includes the fsync:
//!   the data has reached the backing store when the clock stops.
//! - **read** (cold): drop the kernel's caches (dentries and inodes as
//!   `fuse_mount::drop_kernel_caches` does, then the page cache, so neither
//!   the FUSE file's pages nor the backing file's are left), then read the
//!   file back in `--block`s, checking every byte against the pattern.
//! - **reread** (warm, unless `--no-warm`): the same read again at once.
//! - **copy**: `copy_file_range` of the file to a new one, in a loop over
//!   short counts as `cp` does, then `fsync` and close. The copy is then
//!   read back and checked (neither timed nor counted in the server's
//!   CPU) and removed. Where the file system
//!   serves the copy itself (memfs, and the passthrough through its
//!   backing file system), no data crosses the FUSE channel.
//!
//! The file is then removed, so a run needs the room of two files at a
//! time (checked before each write and copy: at least twice the size of
//! what is to be written free).
//! A pass that fails (an I/O error, a short file, a wrong byte) makes its
//! row fail (`ok: false`, with the error); nothing is dropped silently.
//!
//! Reported seconds exclude the time spent checking content
//! (`verify_secs`, the same few tens of microseconds per MiB on every file
//! system), so the ratios compare the I/O paths alone.
//!
//! # Servers
//! Every server gets the same entry and attribute timeouts (the peers'
//! default, 60 s) and, with `--server-threads`, the same request threads;
//! otherwise each its own default. For mounts served by a process (uvfs or
//! a peer), `procstat::Sampler` polls the server's `/proc/PID` during each
//! pass: fds open (`max_fds`), resident memory (`rss_bytes`, its `VmHWM`);
//! its CPU comes from `/proc/PID/stat` (10 ms ticks, the same for all).
//! uvfs servers also report requests per opcode, so the row tells how large
//! the kernel's WRITEs and READs were (`kib_per_request`).

mod passes;
mod pattern;
mod rows;

pub use passes::PassSample;
pub use pattern::{splitmix, Mismatch, Pattern, PAGE};
pub use rows::{add_ratios, build_row, chart, check, summary, COLUMNS, OPS};

use crate::fuse_mount::{self, ScratchDir, ServerMount, Tmpfs};
use crate::peers::{PeerKind, PeerMount, PeerOptions};
use crate::procstat::{self, Sampler, DEFAULT_PERIOD};
use crate::report::{Progress, Report};
use crate::CommonOpts;
use passes::{check_room, copy_file, drop_all_caches, mem_available, read_file, write_file, Timed};
use std::io;
use std::path::{Path, PathBuf};

pub const NATIVE: &str = "native";
pub const PASSTHROUGH: &str = "uvfs-passthrough";
/// The passthrough with reads and writes served by the server
/// (`--server-io`), as before the kernel did them on the source files.
pub const PASSTHROUGH_SERVER_IO: &str = "uvfs-passthrough-server-io";
/// The passthrough served through /dev/fuse (`--transport dev`), which
/// a crash supervisor keeps a journal for, and the same without one
/// (`--no-supervisor`): side by side, what the journal costs. Run only
/// when `--fs` names them.
pub const PASSTHROUGH_DEV: &str = "uvfs-passthrough-dev";
pub const PASSTHROUGH_DEV_NOSUP: &str = "uvfs-passthrough-dev-unsupervised";
pub const MEMFS: &str = "uvfs-memfs";
pub const LIBFUSE: &str = "libfuse-passthrough_ll";
pub const FBR: &str = "fuse-backend-rs";
pub const TMPFS: &str = "tmpfs";
/// Every file system, in setup and run order.
pub const ALL_FS: [&str; 7] = [
    NATIVE,
    PASSTHROUGH,
    PASSTHROUGH_SERVER_IO,
    LIBFUSE,
    FBR,
    MEMFS,
    TMPFS,
];
/// File systems `--fs` may name beside the default ones, run after them.
pub const OPTIONAL_FS: [&str; 2] = [PASSTHROUGH_DEV, PASSTHROUGH_DEV_NOSUP];
/// The peers the passthrough is held against.
pub const PEERS: [&str; 2] = [LIBFUSE, FBR];

const GIB: f64 = (1u64 << 30) as f64;

#[derive(clap::Args, Debug, Clone)]
pub struct SeqioOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// File size: bytes with an optional k/m/g suffix (default 1g; 64m
    /// with --quick).
    #[arg(long)]
    pub size: Option<String>,
    /// Bytes per read and write call (k/m suffix), a multiple of 4 KiB.
    #[arg(long, default_value = "1m")]
    pub block: String,
    /// File systems to run (default: all of native, uvfs-passthrough,
    /// uvfs-passthrough-server-io, libfuse-passthrough_ll, fuse-backend-rs,
    /// uvfs-memfs, tmpfs).
    #[arg(long, value_delimiter = ',')]
    pub fs: Option<Vec<String>>,
    /// Where the native directory is made; it is also the directory the
    /// passthrough and the peers serve (a local disk, not a tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    pub native_dir: PathBuf,
    /// Skip the warm re-read.
    #[arg(long)]
    pub no_warm: bool,
    /// Request threads of every server, uvfs's and the peers' (default:
    /// each server's own).
    #[arg(long, value_parser = crate::at_least_one())]
    pub server_threads: Option<usize>,
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Bytes with an optional k/m/g/t suffix (`64m`, `1g`, `4096`).
pub fn parse_size(s: &str) -> io::Result<u64> {
    let s = s.trim();
    let (num, shift) = match s.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&s[..s.len() - 1], 10),
        Some('m') => (&s[..s.len() - 1], 20),
        Some('g') => (&s[..s.len() - 1], 30),
        Some('t') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| bad(format!("bad size {s:?} (bytes, or with a k/m/g/t suffix)")))
}

/// The file systems to run, checked, in run order.
fn choose_fs(o: &SeqioOpts) -> io::Result<Vec<&'static str>> {
    let Some(wanted) = &o.fs else {
        return Ok(ALL_FS.to_vec());
    };
    let known = || ALL_FS.into_iter().chain(OPTIONAL_FS);
    for w in wanted {
        if !known().any(|k| k == w.as_str()) {
            let names: Vec<&str> = known().collect();
            return Err(bad(format!("unknown --fs {w:?} ({})", names.join(", "))));
        }
    }
    Ok(known().filter(|a| wanted.iter().any(|w| w == a)).collect())
}

// ---------------------------------------------------------------------
// File systems under test

/// Whoever serves a mounted file system.
enum Server {
    Uvfs(ServerMount),
    Peer(PeerMount),
}

impl Server {
    fn pid(&self) -> Option<u32> {
        match self {
            Server::Uvfs(m) => m.pid(),
            Server::Peer(p) => Some(p.pid()),
        }
    }
}

/// One file system under test.
struct Target {
    name: &'static str,
    /// The directory the file goes in.
    dir: PathBuf,
    server: Option<Server>,
    /// The private tmpfs of the `tmpfs` target.
    _tmpfs: Option<Tmpfs>,
    /// Why it could not be set up (its rows then fail with this).
    setup_error: Option<String>,
}

impl Target {
    fn file(&self) -> PathBuf {
        self.dir.join(format!("seqio-{}.dat", self.name))
    }

    /// Where its copy goes.
    fn copy(&self) -> PathBuf {
        self.dir.join(format!("seqio-{}.copy", self.name))
    }

    /// Whether its file lands on the native directory's disk.
    fn on_disk(&self) -> bool {
        self.name != MEMFS && self.name != TMPFS
    }
}

/// The peers' options: their default timeouts, `--server-threads`.
fn peer_options(o: &SeqioOpts) -> PeerOptions {
    PeerOptions {
        threads: o.server_threads,
        ..PeerOptions::default()
    }
}

/// `uvfs mount` arguments matching [`peer_options`].
fn uvfs_args(o: &SeqioOpts) -> Vec<String> {
    let t = peer_options(o)
        .timeout_secs
        .unwrap_or(crate::peers::DEFAULT_TIMEOUT_SECS)
        .to_string();
    let mut a = vec![
        "--entry-timeout".into(),
        t.clone(),
        "--attr-timeout".into(),
        t,
    ];
    if let Some(n) = o.server_threads {
        a.extend(["--threads".into(), n.to_string()]);
    }
    a
}

fn start_peer(name: &str, source: &Path, o: &SeqioOpts) -> io::Result<Server> {
    let kind = PeerKind::from_name(name).ok_or_else(|| bad(format!("{name} is not a peer")))?;
    let tag = format!("seqio-{}", kind.binary());
    PeerMount::start_with(kind, source, &tag, &peer_options(o)).map(Server::Peer)
}

/// Sets up `name` (the native directory `native` exists already).
fn setup(name: &'static str, o: &SeqioOpts, native: &Path, size: u64) -> Target {
    let mut t = Target {
        name,
        dir: native.to_path_buf(),
        server: None,
        _tmpfs: None,
        setup_error: None,
    };
    let server = match name {
        NATIVE => return t,
        TMPFS => {
            match Tmpfs::start("seqio-tmpfs") {
                Ok(m) => {
                    t.dir = m.root.clone();
                    t._tmpfs = Some(m);
                }
                Err(e) => t.setup_error = Some(format!("setup failed: {e}")),
            }
            return t;
        }
        PASSTHROUGH | PASSTHROUGH_SERVER_IO | PASSTHROUGH_DEV | PASSTHROUGH_DEV_NOSUP => {
            let mut a = uvfs_args(o);
            a.extend(["--source".into(), native.display().to_string()]);
            match name {
                PASSTHROUGH_SERVER_IO => a.push("--server-io".into()),
                PASSTHROUGH_DEV => a.extend(["--transport".into(), "dev".into()]),
                PASSTHROUGH_DEV_NOSUP => {
                    a.extend(["--transport", "dev", "--no-supervisor"].map(String::from))
                }
                _ => {}
            }
            ServerMount::start(&format!("seqio-{}", &name[5..]), &a).map(Server::Uvfs)
        }
        MEMFS => {
            // memfs holds the file and its copy in the server's memory:
            // bound it (--size) and make sure the machine has the room
            // (the kernel caches the file too).
            let mut a = uvfs_args(o);
            a.extend(["--size".into(), (size * 2).to_string()]);
            mem_available().and_then(|avail| {
                if avail < size * 3 {
                    Err(io::Error::other(format!(
                        "{:.2} GiB of memory available, memfs needs 3x the file ({:.2} GiB)",
                        avail as f64 / GIB,
                        3.0 * size as f64 / GIB
                    )))
                } else {
                    ServerMount::start("seqio-memfs", &a).map(Server::Uvfs)
                }
            })
        }
        _ => start_peer(name, native, o),
    };
    match server {
        Ok(s) => {
            t.dir = match &s {
                Server::Uvfs(m) => m.root().to_path_buf(),
                Server::Peer(p) => p.root().to_path_buf(),
            };
            t.server = Some(s);
        }
        Err(e) => t.setup_error = Some(format!("setup failed: {e}")),
    }
    t
}

/// Targets torn down in reverse order (mounts before the directory they
/// serve).
struct Targets(Vec<Target>);

impl Drop for Targets {
    fn drop(&mut self) {
        while let Some(t) = self.0.pop() {
            drop(t);
        }
    }
}

/// Runs `io` (one pass) on `t`, with the server watched: fds, memory, CPU,
/// and uvfs's request counters.
fn watched(t: &Target, op: &str, io: impl FnOnce() -> io::Result<Timed>) -> PassSample {
    let uvfs = match &t.server {
        Some(Server::Uvfs(m)) => Some(m),
        _ => None,
    };
    let pid = t.server.as_ref().and_then(Server::pid);
    let before = uvfs.and_then(|m| m.sample().ok());
    let cpu0 = pid.and_then(|p| procstat::process_cpu_secs(p).ok());
    let sampler = pid.map(|p| Sampler::start(p, DEFAULT_PERIOD));
    let r = io();
    let peaks = sampler.map(Sampler::stop).filter(|p| p.samples > 0);
    let cpu1 = pid.and_then(|p| procstat::process_cpu_secs(p).ok());
    let requests = match (uvfs, before) {
        (Some(m), Some(b)) => m.sample().ok().map(|a| {
            let d = b.delta(&a);
            let kernel_op = match op {
                "write" => "write",
                "copy" => "copy_file_range",
                _ => "read",
            };
            (d.requests, d.by_op.get(kernel_op).copied().unwrap_or(0))
        }),
        _ => None,
    };
    let mut s = match r {
        Ok(tm) => PassSample {
            secs: Some(tm.secs),
            verify_secs: tm.verify_secs,
            ..PassSample::default()
        },
        Err(e) => PassSample::failed(format!("{op} {}: {e}", t.file().display())),
    };
    s.peaks = peaks;
    s.server_cpu_secs = cpu0.zip(cpu1).map(|(a, b)| (b - a).max(0.0));
    s.requests = requests;
    s
}

/// The ops of a repeat, in order.
pub fn ops(warm: bool) -> Vec<&'static str> {
    OPS.into_iter()
        .filter(|&op| warm || op != "reread")
        .collect()
}

/// One repeat on one target: write, cold read, warm read, copy, remove.
fn repeat(
    t: &Target,
    o: &SeqioOpts,
    native: &Path,
    size: u64,
    block: usize,
    seed: u64,
) -> Vec<PassSample> {
    let warm = !o.no_warm;
    let n_ops = ops(warm).len();
    if let Some(e) = &t.setup_error {
        return vec![PassSample::failed(e.clone()); n_ops];
    }
    let pat = Pattern::new(seed);
    let path = t.file();
    let mut out = Vec::with_capacity(n_ops);
    let room = if t.on_disk() {
        check_room(native, size)
    } else {
        Ok(())
    };
    let w = match room {
        Ok(()) => watched(t, "write", || write_file(&path, size, block, &pat)),
        Err(e) => PassSample::failed(e.to_string()),
    };
    let written = w.error.is_none();
    out.push(w);
    let read = |op: &str| {
        if written {
            watched(t, op, || read_file(&path, size, block, &pat))
        } else {
            PassSample::failed("not run: the write failed".into())
        }
    };
    match drop_all_caches() {
        Ok(()) => out.push(read("read")),
        Err(e) => out.push(PassSample::failed(e.to_string())),
    }
    if warm {
        out.push(read("reread"));
    }
    let copy = t.copy();
    let room = if t.on_disk() {
        check_room(native, size)
    } else {
        Ok(())
    };
    out.push(match (written, room) {
        (false, _) => PassSample::failed("not run: the write failed".into()),
        (true, Err(e)) => PassSample::failed(e.to_string()),
        (true, Ok(())) => {
            let mut s = watched(t, "copy", || copy_file(&path, &copy, size));
            // Checked after the watched pass: neither its seconds nor the
            // server CPU it reports include reading the copy back.
            if s.error.is_none() {
                match read_file(&copy, size, block, &pat) {
                    Ok(c) => s.verify_secs = c.secs + c.verify_secs,
                    Err(e) => {
                        s.secs = None;
                        s.error = Some(format!("copy {}: {e}", copy.display()));
                    }
                }
            }
            s
        }
    });
    let _ = std::fs::remove_file(&copy);
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != io::ErrorKind::NotFound {
            for s in &mut out {
                s.error
                    .get_or_insert_with(|| format!("remove {}: {e}", path.display()));
                s.secs = None;
            }
        }
    }
    out
}

/// Runs the workload: one row per (file system, op).
pub fn run(o: &SeqioOpts) -> io::Result<Report> {
    let size = match &o.size {
        Some(s) => parse_size(s)?,
        None if o.common.quick => 64 << 20,
        None => 1 << 30,
    };
    let block =
        usize::try_from(parse_size(&o.block)?).map_err(|_| bad("--block too large".into()))?;
    if size == 0 || block == 0 || block % PAGE != 0 || block > 64 << 20 {
        return Err(bad(format!(
            "--size must be > 0 and --block a multiple of {PAGE} up to 64m (got {size}, {block})"
        )));
    }
    let repeats = o.common.repeats.max(1);
    let names = choose_fs(o)?;
    if names.iter().any(|n| *n != NATIVE) {
        fuse_mount::check_fuse()?;
    }
    // Fail early if cold reads are impossible or the disk is too full.
    drop_all_caches()?;
    std::fs::create_dir_all(&o.native_dir)?;
    check_room(&o.native_dir, size)?;

    // Declared before `targets`, so dropped after the mounts serving it.
    let native = ScratchDir::create(
        o.native_dir
            .join(format!("uvfs-bench-{}-seqio", std::process::id())),
        true,
    )?;
    let op_names = ops(!o.no_warm);
    let n_ops = op_names.len();
    let mut prog = Progress::new(names.len() + repeats * names.len());
    let mut targets = Targets(Vec::new());
    for &name in &names {
        prog.step(&format!("seqio: {name}: setting up"));
        targets.0.push(setup(name, o, &native.path, size));
    }
    // samples[target][op] over repeats.
    let mut samples = vec![vec![Vec::new(); n_ops]; targets.0.len()];
    for rep in 0..repeats {
        for (k, t) in targets.0.iter().enumerate() {
            prog.step(&format!(
                "seqio {} {} MiB (repeat {}/{repeats})",
                t.name,
                size >> 20,
                rep + 1
            ));
            // A seed per (target, repeat): content left by another pass
            // cannot pass for this one's.
            let seed = (std::process::id() as u64) << 32 | (k as u64) << 16 | rep as u64;
            for (op, s) in repeat(t, o, &native.path, size, block, seed)
                .into_iter()
                .enumerate()
            {
                samples[k][op].push(s);
            }
        }
    }
    prog.finish();

    let mut report = Report::new("seqio");
    for (k, t) in targets.0.iter().enumerate() {
        for (op, ss) in op_names.iter().zip(&samples[k]) {
            report.rows.push(build_row(t.name, op, size, block, ss));
        }
    }
    add_ratios(&mut report);
    // Tear the mounts down now, so a failure to unmount is reported with
    // the run.
    for mut t in targets.0.drain(..).rev() {
        match t.server.as_mut() {
            Some(Server::Uvfs(m)) => m.shutdown()?,
            Some(Server::Peer(m)) => m.shutdown()?,
            None => {}
        }
    }
    drop(native);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64m").unwrap(), 64 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999t").is_err());
    }

    #[test]
    fn fs_choice() {
        let mut o = SeqioOpts {
            common: CommonOpts::default(),
            size: None,
            block: "1m".into(),
            fs: None,
            native_dir: "/var/tmp".into(),
            no_warm: false,
            server_threads: None,
        };
        assert_eq!(choose_fs(&o).unwrap(), ALL_FS.to_vec());
        o.fs = Some(vec![MEMFS.into(), NATIVE.into()]);
        assert_eq!(choose_fs(&o).unwrap(), vec![NATIVE, MEMFS]);
        o.fs = Some(vec![
            PASSTHROUGH_DEV_NOSUP.into(),
            MEMFS.into(),
            PASSTHROUGH_DEV.into(),
        ]);
        assert_eq!(
            choose_fs(&o).unwrap(),
            vec![MEMFS, PASSTHROUGH_DEV, PASSTHROUGH_DEV_NOSUP]
        );
        o.fs = Some(vec!["ext9".into()]);
        assert!(choose_fs(&o).is_err());
    }
}
