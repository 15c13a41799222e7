//! The command-line options of `uvfs mount`, `uvfs stat` and `uvfs
//! umount`. Apart from the commands so that what parses options (fstab's
//! `-o`, the mount(8) helper, the log of the options in force) and what
//! mounts with them each depend on these types and not on each other.

use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2)
}

/// Fewest vnodes a mount gets by default.
const MIN_DEFAULT_VNODES: usize = 262_144;

/// What a cached node costs the server, rounded up (docs/results.md,
/// "Memory": 190 bytes of RSS per passthrough node, 122 per vnode).
const BYTES_PER_VNODE: u64 = 200;

/// The default vnode limit: as many vnodes as 1% of physical memory holds,
/// never fewer than [`MIN_DEFAULT_VNODES`]. A walk of a tree larger than
/// the limit recycles every node before the next walk reaches it again
/// (LRU), so that walk never gets warm: every walk of it costs a LOOKUP
/// per name (docs/STATUS.md has the figures). The kernel holds the same
/// nodes in its caches (each several times the server's node, given back
/// under memory pressure, which its FORGETs pass on to the server).
fn default_vnodes() -> usize {
    vnodes_for(physical_memory())
}

/// Bytes of physical memory (as tmpfs sizes its defaults).
pub(crate) fn physical_memory() -> u64 {
    let i = rustix::system::sysinfo();
    (i.totalram as u64).saturating_mul(u64::from(i.mem_unit))
}

/// The default vnode limit on a machine with `memory` bytes.
fn vnodes_for(memory: u64) -> usize {
    usize::try_from(memory / 100 / BYTES_PER_VNODE)
        .unwrap_or(usize::MAX)
        .max(MIN_DEFAULT_VNODES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_vnode_limit_follows_memory() {
        const GIB: u64 = 1 << 30;
        // Small machines keep the floor.
        assert_eq!(vnodes_for(GIB), MIN_DEFAULT_VNODES);
        assert_eq!(vnodes_for(4 * GIB), MIN_DEFAULT_VNODES);
        // A machine of 24 gibibytes: 1% of it at 200 bytes a vnode.
        assert_eq!(vnodes_for(24 * GIB), 1_288_490);
        assert_eq!(vnodes_for(u64::MAX), (u64::MAX / 100 / 200) as usize);
    }
}

/// What `uvfs mount` serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum FsKind {
    Memfs,
    Passthrough,
}

/// How requests reach the server (`--transport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Transport {
    Auto,
    Uring,
    Dev,
}

/// Options of `uvfs mount` (also what a server hands its successor,
/// `uvfs upgrade`: the options in force, paths absolute).
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct MountOpts {
    /// Directory to mount on.
    pub mountpoint: PathBuf,
    /// File system to serve: `memfs` (in memory, the default) or
    /// `passthrough` (the `--source` directory; implied by `--source`).
    #[arg(long, value_enum)]
    pub fs: Option<FsKind>,
    /// Request loops, each a thread with its own /dev/fuse clone.
    #[arg(long, default_value_t = default_threads())]
    pub threads: usize,
    /// Vnode limit of the vnode layer (a soft limit; memfs data is kept
    /// whatever it is, only cached vnodes are recycled) [default: what 1%
    /// of physical memory holds, at least 262,144].
    #[arg(long, default_value_t = default_vnodes(), hide_default_value = true)]
    pub vnodes: usize,
    /// Seconds the kernel may cache a name lookup (and a failed one)
    /// [default: 86400 for memfs and for a watched --source, 1 for a
    /// --source whose host changes cannot be watched].
    #[arg(long)]
    pub entry_timeout: Option<f64>,
    /// Seconds the kernel may cache attributes [default: as
    /// --entry-timeout's].
    #[arg(long)]
    pub attr_timeout: Option<f64>,
    /// Most file data memfs holds: bytes with an optional k/m/g/t suffix,
    /// a percentage of physical memory (`50%`), or `unlimited` (also 0, as
    /// tmpfs). Writes beyond it fail with ENOSPC; nothing already written
    /// is lost.
    #[arg(long, default_value = "50%")]
    pub size: String,
    /// Most inodes memfs holds (tmpfs's `nr_inodes`): a count with an
    /// optional k/m/g suffix, or `unlimited` (also 0, as tmpfs). Extra hard links and
    /// extended attributes take from the same budget (1 KiB per inode or
    /// link, an attribute its size); past it, creating fails with ENOSPC
    /// [default: half the physical memory's pages, as tmpfs].
    #[arg(long)]
    pub inodes: Option<String>,
    /// How requests reach the server: `uring` (FUSE over io_uring: one
    /// queue per CPU, each served by a thread on that CPU, so a round trip
    /// stays on the caller's CPU; Linux 6.14+ with `echo Y >
    /// /sys/module/fuse/parameters/enable_uring`), `dev` (reads of
    /// /dev/fuse), or `auto`: io_uring where the kernel offers it.
    #[arg(long, value_enum, default_value_t = Transport::Auto)]
    pub transport: Transport,
    /// Serve in the foreground instead of detaching.
    #[arg(short, long)]
    pub foreground: bool,
    /// What to log: `error`, `warn`, `info`, `debug`, `trace` or `off`,
    /// or directives as RUST_LOG takes them (`info,fuser=debug`)
    /// [default: $RUST_LOG, else info].
    #[arg(long)]
    pub log_level: Option<String>,
    /// Append the log to this file (in the foreground as well as on
    /// stderr). Detached without it, the server logs to the system log
    /// (/dev/log: the journal or syslog).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Serve this host directory (passthrough) instead of memfs.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// Passthrough: most backing fds open at once (cached, in use, open
    /// files of every caller); default RLIMIT_NOFILE's hard limit (raised
    /// to fs.nr_open where allowed) less 1024 + 80 per CPU (at most a
    /// quarter of it), at most that limit less 128 (kept for FUSE channels
    /// and the like).
    #[arg(long)]
    pub fd_budget: Option<usize>,
    /// Have the kernel send OPENDIR/RELEASEDIR for every directory open
    /// (by default it opens directories alone and keeps their listings,
    /// saving two round trips per directory walked).
    #[arg(long)]
    pub opendir: bool,
    /// Passthrough: no directory readahead. By default, while one walker
    /// lists directories, a thread at idle priority looks up the entries of
    /// the next few subdirectories on the source first, so the walker's
    /// listings find them cached.
    #[arg(long)]
    pub no_dir_readahead: bool,
    /// No directory attribute refresh. By default, a few milliseconds after
    /// a directory is listed, a server thread stats it through a private
    /// clone of the mount, so the next `stat` of it needs no round trip
    /// (after each listing the kernel takes a directory's atime for stale).
    /// Only with an attribute timeout of 10 s or more (memfs's default; a
    /// passthrough's is 1 s): shorter, what it fetches expires unused.
    #[arg(long)]
    pub no_dir_refresh: bool,
    /// Passthrough: do not watch the source for changes made on the host.
    /// By default the server watches the source's file system (fanotify,
    /// as root) and tells the kernel to forget exactly what changed, so
    /// names and attributes may be cached for a day and a host change
    /// still shows at once; without the watcher they are cached for a
    /// second, and a host change shows within that second.
    #[arg(long)]
    pub no_watch: bool,
    /// Passthrough: serve every read and write of a file here. By default
    /// the kernel reads, writes and maps open files on their source files
    /// itself (FUSE passthrough, Linux 6.9+, as root), as fast as the
    /// source and with its page cache only; the server still opens, locks,
    /// syncs, truncates, allocates and copies.
    #[arg(long)]
    pub server_io: bool,
    /// Passthrough: no supervisor. By default a small supervisor process
    /// holds the mount's connection and the server's journal of what the
    /// kernel knows, and starts a new server if this one dies (a bug, the
    /// OOM killer, `kill -9`): programs see a pause, not a dead mount.
    /// Over FUSE over io_uring (the default where the kernel has it) a
    /// call the kernel was handing the server as it died fails with
    /// ECANCELED (a few per crash under load); `--transport dev` loses
    /// none.
    #[arg(long)]
    #[serde(default)]
    pub no_supervisor: bool,
    /// Serve read-only (passthrough): the mount is read-only, the server
    /// refuses every change even after a `mount -o remount,rw`, and files
    /// and directories are read with O_NOATIME, so the source is left
    /// exactly as it was.
    #[arg(short, long)]
    pub read_only: bool,
    /// Let other users into the mount (FUSE's `allow_other`). Root's
    /// mounts always let them in (permissions still apply); a user's
    /// mount only with `user_allow_other` in /etc/fuse.conf.
    #[arg(long)]
    pub allow_other: bool,
    /// memfs: permission bits of the root directory, in octal (tmpfs's
    /// `mode`; 1777 for a /tmp) [default: 755].
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
    /// memfs: owner of the root directory [default: the caller].
    #[arg(long)]
    pub uid: Option<u32>,
    /// memfs: group of the root directory [default: the caller's].
    #[arg(long)]
    pub gid: Option<u32>,
    /// Mount options as in /etc/fstab, comma-separated: `ro`, the mount
    /// flags `nosuid`, `nodev`, `noexec`, `noatime`, `nodiratime`,
    /// `relatime`, `strictatime`, `lazytime`, `sync`, `dirsync`,
    /// `nosymfollow` (and their negations: `suid`, `atime`, `async`, ...),
    /// and any option above as `name=value` (`size=1g`, `inodes=10k`,
    /// `mode=1777`, `threads=4`, `fd_budget=1000`, ...); fstab's own
    /// (`defaults`, `noauto`, `nofail`, `user`, `x-*`, `comment=`, ...)
    /// are ignored.
    #[arg(short = 'o', long = "options")]
    pub options: Option<String>,
    /// mount(2) flags from `-o` (`MOUNT_FLAGS`).
    #[arg(skip)]
    pub mount_flags: libc::c_ulong,
    /// What the mount table shows as the mount's source (findmnt's
    /// SOURCE, what `umount NAME` finds): the helper's SOURCE argument
    /// [default: the source directory, or `uvfs-memfs`].
    #[arg(skip)]
    pub fsname: Option<String>,
}

/// `--mode`: octal permission bits.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s, 8) {
        Ok(m) if m <= 0o7777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal mode (at most 7777)")),
    }
}

/// Options of `uvfs stat`.
#[derive(Args, Debug)]
pub struct StatOpts {
    /// Mountpoint of a running `uvfs mount`.
    pub mountpoint: PathBuf,
    /// Print the raw JSON report (for scripts).
    #[arg(long)]
    pub json: bool,
    /// First purge the mount's name cache, then verify that every active
    /// vnode is a node the kernel holds (exit 1 if not). Use at rest.
    #[arg(long)]
    pub check: bool,
}

/// Options of `uvfs umount`.
#[derive(Args, Debug)]
pub struct UmountOpts {
    /// Mountpoint of a uvfs mount.
    pub mountpoint: PathBuf,
    /// Detach the mount now even if it is busy; the kernel finishes the
    /// unmount when its last user leaves.
    #[arg(short, long)]
    pub lazy: bool,
}

/// Options of `uvfs upgrade`.
#[derive(Args, Debug)]
pub struct UpgradeOpts {
    /// The mount whose server is replaced.
    pub mountpoint: PathBuf,
    /// The binary to start as the new server [default: the one the
    /// running server was started from, as it is now on disk].
    #[arg(long)]
    pub binary: Option<PathBuf>,
}
