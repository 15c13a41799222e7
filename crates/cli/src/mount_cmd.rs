//! `uvfs mount` and `uvfs stat`: serve memfs over FUSE, and read a running
//! server's statistics.
//!
//! # Detaching
//! `uvfs mount MNT` returns once the file system is mounted and keeps
//! serving in the background (a new session, standard streams on
//! /dev/null, its log in `--log-file` or the system log: uvfs-logger);
//! it exits 1 with the reason if mounting fails.
//! `--foreground` serves in the calling process instead. Either way
//! SIGINT, SIGTERM or SIGHUP unmount cleanly, and `umount MNT` (or
//! `fusermount3 -u MNT`) stops the server.

use clap::Args;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use uvfs_fuse::{daemonize, serve, BlockedSignals, Readiness, ServeConfig, Timeouts};
use uvfs_memfs::{Atime, AtimeRule, MemFs, MemFsConfig};
use uvfs_vnode::{Config, VnodeLayer};

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2)
}

/// What `uvfs mount` serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FsKind {
    Memfs,
    Passthrough,
}

/// How requests reach the server (`--transport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Auto,
    Uring,
    Dev,
}

/// Options of `uvfs mount`.
#[derive(Args, Clone, Debug)]
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
    /// whatever it is, only cached vnodes are recycled).
    #[arg(long, default_value_t = 262_144)]
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
    /// a percentage of physical memory (`50%`), or `unlimited`. Writes
    /// beyond it fail with ENOSPC; nothing already written is lost.
    #[arg(long, default_value = "50%")]
    pub size: String,
    /// Most inodes memfs holds (tmpfs's `nr_inodes`): a count with an
    /// optional k/m/g suffix, or `unlimited`. Extra hard links and
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
    /// files); default three quarters of RLIMIT_NOFILE's hard limit, at
    /// most that limit less 128 (kept for FUSE channels and the like).
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

fn parse_size(s: &str) -> io::Result<Option<u64>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("bad --size {s:?}"));
    let s = s.trim();
    if s == "unlimited" {
        return Ok(None);
    }
    if let Some(p) = s.strip_suffix('%') {
        let pct: f64 = p.parse().map_err(|_| bad())?;
        if !(pct > 0.0 && pct <= 100.0) {
            return Err(bad());
        }
        return Ok(Some((physical_memory() as f64 * pct / 100.0) as u64));
    }
    binary_suffixed(s, &['k', 'm', 'g', 't'])
        .map(Some)
        .ok_or_else(bad)
}

/// Bytes of physical memory (as tmpfs sizes its defaults).
fn physical_memory() -> u64 {
    let i = rustix::system::sysinfo();
    (i.totalram as u64).saturating_mul(u64::from(i.mem_unit))
}

/// A number with an optional binary suffix among `suffixes` (k, m, g, t:
/// 2^10 ... 2^40, either case); `None` if it is not one or overflows.
fn binary_suffixed(s: &str, suffixes: &[char]) -> Option<u64> {
    let last = s.chars().last()?.to_ascii_lowercase();
    let (num, shift) = match ['k', 'm', 'g', 't'].iter().position(|&c| c == last) {
        Some(i) if suffixes.contains(&last) => (&s[..s.len() - 1], 10 * (i as u32 + 1)),
        _ => (s, 0),
    };
    num.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// `--inodes`: a count with an optional binary k/m/g suffix (as tmpfs's
/// `nr_inodes`), `unlimited`, or, unset, tmpfs's default: half the pages
/// of physical memory.
fn parse_inodes(s: Option<&str>) -> io::Result<Option<u64>> {
    let Some(s) = s.map(str::trim) else {
        let pages = physical_memory() / rustix::param::page_size() as u64;
        return Ok(Some(pages.max(2) / 2));
    };
    if s == "unlimited" {
        return Ok(None);
    }
    match binary_suffixed(s, &['k', 'm', 'g']) {
        Some(n) if n > 0 => Ok(Some(n)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad --inodes {s:?}"),
        )),
    }
}

/// The entry and attribute timeout a file system gets unless told.
///
/// memfs: a day. Every change to a memfs passes through this kernel (no
/// one else can reach its data), and the kernel invalidates what each of
/// its own requests changes, so what it caches cannot go stale; a short
/// timeout only made every walk that came a second after the last one pay
/// a LOOKUP per name (a 101,000-file `du` took 4.8 s instead of 0.4).
/// Tested against tmpfs with these timeouts by difftest and pjdfstest.
///
/// passthrough: one second, as libfuse's: the source's files also change
/// on the host, behind the kernel's back, and a timeout is the only bound
/// on how long the mount shows the old name or attributes.
fn default_timeout(passthrough: bool) -> f64 {
    if passthrough {
        1.0
    } else {
        86_400.0
    }
}

fn timeout(secs: f64, what: &str) -> io::Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("bad {what} {secs}")))
}

/// `uvfs mount`.
pub fn mount(o: &MountOpts) -> io::Result<()> {
    let mut o = o.clone();
    if let Some(opts) = o.options.take() {
        crate::fstab::apply(&mut o, &opts, false)?;
    }
    let o = &o;
    uvfs_logger::init(&uvfs_logger::Config {
        level: o.log_level.clone(),
        file: o.log_file.clone(),
        foreground: o.foreground,
    })?;
    // Everything that can be refused is checked before detaching, so the
    // error reaches the terminal.
    let source = match (o.fs, &o.source) {
        (Some(FsKind::Memfs), Some(_)) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--source serves a host directory (passthrough); it cannot be combined \
                 with --fs memfs",
            ))
        }
        (Some(FsKind::Passthrough), None) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--fs passthrough needs --source DIR",
            ))
        }
        (_, Some(s)) => Some(std::path::absolute(s)?),
        (_, None) => None,
    };
    if source.is_some()
        && (o.inodes.is_some() || o.mode.is_some() || o.uid.is_some() || o.gid.is_some())
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--inodes, --mode, --uid and --gid shape a memfs; a passthrough's are its source's",
        ));
    }
    if o.read_only && source.is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--read-only serves a host directory as it is (--source DIR); a memfs \
             starts empty and would stay so",
        ));
    }
    if let Some(s) = &source {
        if !s.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("--source {} is not a directory", s.display()),
            ));
        }
    }
    if o.threads == 0 || o.vnodes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--threads and --vnodes must be at least 1",
        ));
    }
    let uring = match o.transport {
        Transport::Dev => false,
        Transport::Auto => {
            let offer = uvfs_fuse::offer_uring();
            crate::mount_log::uring_offer(offer);
            offer.usable()
        }
        Transport::Uring if uvfs_fuse::uring_available() => true,
        Transport::Uring => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "--transport uring: this kernel does not serve FUSE over io_uring now \
                     (Linux 6.14+ with `echo Y > {}`)",
                    uvfs_fuse::URING_PARAMETER
                ),
            ))
        }
    };
    let root = rustix::process::geteuid().is_root();
    if o.allow_other && !root && !uvfs_fuse::user_allow_other() {
        return Err(uvfs_fuse::allow_other_refused());
    }
    let size_limit = parse_size(&o.size)?;
    let inode_limit = parse_inodes(o.inodes.as_deref())?;
    // A passthrough whose source is watched may let the kernel cache as
    // long as memfs does; asked before detaching, so the reason it cannot
    // be watched reaches the user.
    let privileged = uvfs_fuse::has_cap_sys_admin();
    let watched = match &source {
        Some(_) if !o.no_watch && !privileged => {
            log::warn!(
                "host-change watcher off: fanotify needs CAP_SYS_ADMIN; names and \
                 attributes are cached for 1 s"
            );
            false
        }
        Some(src) if !o.no_watch => match uvfs_passthrough::PassthroughFs::probe_watch(src) {
            Ok(()) => true,
            Err(why) => {
                log::warn!(
                    "host-change watcher off: {why}; names and attributes are cached for 1 s"
                );
                false
            }
        },
        _ => false,
    };
    let fallback = default_timeout(source.is_some() && !watched);
    let explicit = o.entry_timeout.is_some() || o.attr_timeout.is_some();
    let timeouts = Timeouts {
        entry: timeout(o.entry_timeout.unwrap_or(fallback), "--entry-timeout")?,
        attr: timeout(
            o.attr_timeout.or(o.entry_timeout).unwrap_or(fallback),
            "--attr-timeout",
        )?,
    };
    // Features that need CAP_SYS_ADMIN, turned off here with one line
    // each (before detaching, so the line reaches the terminal) rather
    // than refused one request at a time once serving.
    // Not read-only or noatime: the kernel would open the source files
    // without O_NOATIME (`FileSystem::backing_file`).
    let kernel_io = source.is_some()
        && !o.server_io
        && !o.read_only
        && AtimeRule::from_mount_flags(o.mount_flags).files != Atime::Never;
    if kernel_io && !privileged {
        log::warn!(
            "kernel I/O on the source's files off: FUSE passthrough needs \
             CAP_SYS_ADMIN; reads and writes go through the server"
        );
    }
    let dir_refresh = !o.no_dir_refresh && timeouts.attr >= uvfs_fuse::MIN_REFRESH_ATTR_TIMEOUT;
    if dir_refresh && !privileged {
        log::warn!(
            "directory attribute refresh off: it clones the mount, which needs \
             CAP_SYS_ADMIN; a stat after a listing is a round trip"
        );
    }
    let kernel_io = kernel_io && privileged;
    let dir_refresh = dir_refresh && privileged;
    let mountpoint = std::path::absolute(&o.mountpoint)?;
    if !mountpoint.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not a directory", mountpoint.display()),
        ));
    }
    if let Some(s) = &source {
        if mountpoint_inside_source(
            &std::fs::canonicalize(s)?,
            &std::fs::canonicalize(&mountpoint)?,
        ) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} lies inside --source {}: the server would reach its own mount \
                     through the source and wait on itself; mount outside the source \
                     (or on the source directory itself)",
                    mountpoint.display(),
                    s.display()
                ),
            ));
        }
    }
    // Fork first: the vnode layer starts a thread, and a process must be
    // single-threaded when it forks.
    let mut ready = if o.foreground {
        Readiness::foreground()
    } else {
        let r = daemonize()?;
        let fallback = uvfs_fuse::fallback_log_path(&o.mountpoint).ok();
        if let Some(to) = uvfs_logger::detached(fallback.as_deref()) {
            log::debug!("logging to {}", to.display());
        }
        r
    };
    let signals = BlockedSignals::block()?;
    uvfs_fuse::set_memory_release(uvfs_process::alloc::return_freed_memory)?;
    let layer = VnodeLayer::new(Config::with_limit(o.vnodes));
    // The kernel leaves a FUSE file's atime to its server: the file
    // system applies the mount's atime flags itself.
    let atime = AtimeRule::from_mount_flags(o.mount_flags);
    if let Some(src) = source {
        let fs = uvfs_passthrough::PassthroughFs::new(
            layer.clone(),
            &src,
            uvfs_passthrough::PassthroughConfig {
                fd_budget: o.fd_budget,
                no_handles: false,
                no_dir_readahead: o.no_dir_readahead,
                no_atime: o.read_only || atime.files == Atime::Never,
                no_diratime: atime.dirs == Atime::Never,
                watch: watched,
                keep_timeouts: explicit,
            },
        )?;
        let cfg = ServeConfig {
            mountpoint,
            threads: o.threads,
            timeouts,
            fsname: o
                .fsname
                .clone()
                .unwrap_or_else(|| src.display().to_string()),
            control: true,
            server_opendir: o.opendir,
            uring,
            read_only: o.read_only,
            mount_flags: o.mount_flags,
            kernel_io,
            dir_refresh,
            allow_other: o.allow_other,
        };
        crate::mount_log::start(o, &cfg, Some(&src), watched);
        return serve(fs, layer, &cfg, signals, &mut ready);
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let fs = MemFs::new(
        layer.clone(),
        MemFsConfig {
            size_limit,
            root_mode: o.mode.unwrap_or(0o755),
            root_uid: o.uid.unwrap_or(uid),
            root_gid: o.gid.unwrap_or(gid),
            inode_limit,
            atime,
        },
    );
    let cfg = ServeConfig {
        mountpoint,
        threads: o.threads,
        timeouts,
        fsname: o.fsname.clone().unwrap_or_else(|| "uvfs-memfs".into()),
        control: true,
        server_opendir: o.opendir,
        uring,
        read_only: false,
        mount_flags: o.mount_flags,
        kernel_io: false,
        dir_refresh,
        allow_other: o.allow_other,
    };
    crate::mount_log::start(o, &cfg, None, false);
    serve(fs, layer, &cfg, signals, &mut ready)
}

/// `uvfs stat`.
pub fn stat(o: &StatOpts) -> io::Result<()> {
    let v = uvfs_fuse::query(&o.mountpoint, o.check)?;
    // Written, not println!: a reader that stops early (`| head`) is an
    // EPIPE to report, not a panic.
    let text = if o.json {
        format!("{v}\n")
    } else {
        uvfs_fuse::format_stats(&v)
    };
    {
        use std::io::Write;
        let mut out = io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            r => r?,
        }
    }
    let ok = v
        .pointer("/accounting/ok")
        .and_then(|b| b.as_bool())
        .unwrap_or(false);
    if o.check && !ok {
        return Err(io::Error::other(format!(
            "vnode accounting failed: {}",
            v["accounting"]
        )));
    }
    Ok(())
}

/// `uvfs umount`: as `umount` for root, as `fusermount3 -u` for other
/// users, then (unless lazy) waits for the server to exit, so that the
/// mountpoint can be mounted again at once.
pub fn umount(o: &UmountOpts) -> io::Result<()> {
    let mp = uvfs_fuse::normalize_mountpoint(&o.mountpoint)?;
    let served = uvfs_fuse::answers(&mp);
    uvfs_fuse::unmount_path(&mp, o.lazy).map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::EBUSY) {
            " (a process has a file open there, or its working directory; \
             `uvfs umount --lazy` detaches it now)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("{}: {e}{hint}", mp.display()))
    })?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while served && !o.lazy && uvfs_fuse::answers(&mp) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Whether `mountpoint` lies strictly inside `source` (both canonical).
/// Serving it would route the server's own lookups of the mountpoint's
/// name back into its mount: a request thread then waits on a request
/// that only the server can answer, and once the threads are used up that
/// way the mount hangs, unkillable short of aborting the connection
/// (seen: `uvfs mount --source /tmp /tmp/x`, then `ls /tmp/x/x/x`). The
/// source directory itself is fine: the server opened it before mounting
/// and resolves every name beneath that fd, under the mount.
fn mountpoint_inside_source(source: &Path, mountpoint: &Path) -> bool {
    mountpoint != source && mountpoint.starts_with(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mountpoint_inside_the_source_is_refused() {
        let p = Path::new;
        assert!(mountpoint_inside_source(p("/tmp"), p("/tmp/x")));
        assert!(mountpoint_inside_source(p("/"), p("/mnt/x")));
        assert!(mountpoint_inside_source(p("/srv/d"), p("/srv/d/a/b")));
        assert!(!mountpoint_inside_source(p("/srv/d"), p("/srv/d")));
        assert!(!mountpoint_inside_source(p("/srv/d"), p("/srv/dd")));
        assert!(!mountpoint_inside_source(p("/srv/d/a"), p("/srv/d")));
    }

    fn opts(fs: Option<FsKind>, source: Option<&str>) -> MountOpts {
        MountOpts {
            mountpoint: PathBuf::from("/nonexistent-mountpoint"),
            fs,
            threads: 2,
            vnodes: 100,
            entry_timeout: None,
            attr_timeout: None,
            size: "1m".into(),
            inodes: None,
            foreground: true,
            log_level: None,
            log_file: None,
            source: source.map(PathBuf::from),
            fd_budget: None,
            opendir: false,
            no_dir_readahead: false,
            no_dir_refresh: false,
            no_watch: false,
            server_io: false,
            transport: Transport::Auto,
            read_only: false,
            allow_other: false,
            mode: None,
            uid: None,
            gid: None,
            options: None,
            mount_flags: 0,
            fsname: None,
        }
    }

    #[test]
    fn fs_and_source_must_agree() {
        let refused = |o: MountOpts| match mount(&o) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("mounted {o:?}"),
        };
        let e = refused(opts(Some(FsKind::Memfs), Some("/tmp")));
        assert!(e.contains("cannot be combined with --fs memfs"), "{e}");
        let e = refused(opts(Some(FsKind::Passthrough), None));
        assert!(e.contains("needs --source"), "{e}");
        // Agreeing choices get as far as the mountpoint check.
        for o in [
            opts(None, None),
            opts(Some(FsKind::Memfs), None),
            opts(None, Some("/tmp")),
            opts(Some(FsKind::Passthrough), Some("/tmp")),
        ] {
            let e = refused(o);
            assert!(
                e.contains("/nonexistent-mountpoint is not a directory"),
                "{e}"
            );
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k").unwrap(), Some(4096));
        assert_eq!(parse_size("2G").unwrap(), Some(2 << 30));
        assert_eq!(parse_size("unlimited").unwrap(), None);
        assert!(parse_size("50%").unwrap().unwrap() > 0);
        assert!(parse_size("x").is_err());
        assert!(parse_size("0%").is_err());
    }

    #[test]
    fn inode_counts() {
        assert_eq!(parse_inodes(Some("100")).unwrap(), Some(100));
        assert_eq!(parse_inodes(Some("2k")).unwrap(), Some(2048));
        assert_eq!(parse_inodes(Some("1M")).unwrap(), Some(1 << 20));
        assert_eq!(parse_inodes(Some("unlimited")).unwrap(), None);
        assert!(parse_inodes(None).unwrap().unwrap() > 0);
        for bad in ["0", "x", "-1", "1t", "99999999999999999999"] {
            assert!(parse_inodes(Some(bad)).is_err(), "{bad}");
        }
    }
}
