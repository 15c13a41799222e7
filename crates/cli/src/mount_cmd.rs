//! `uvfs mount` and `uvfs stat`: serve memfs over FUSE, and read a running
//! server's statistics.
//!
//! # Detaching
//! `uvfs mount MNT` returns once the file system is mounted and keeps
//! serving in the background (a new session, standard streams on
//! /dev/null, its log in `--log-file` or the system log: uvfs-logger);
//! it exits 1 with the reason if mounting fails.
//! `--foreground` serves in the calling process instead. Either way
//! SIGINT, SIGTERM or SIGHUP unmount cleanly (and stop the server even
//! where a copy of the mount in another mount namespace keeps the
//! connection up), and `umount MNT` (or `fusermount3 -u MNT`) stops the
//! server.

use crate::mount_opts::{
    physical_memory, FsKind, MountOpts, StatOpts, Transport, UmountOpts, UpgradeOpts,
};
use std::io;
use std::path::Path;
use std::time::Duration;
use uvfs_fuse::{daemonize, serve, BlockedSignals, Readiness, ServeConfig, Timeouts};
use uvfs_memfs::{Atime, AtimeRule, MemFs, MemFsConfig};
use uvfs_vnode::{Config, VnodeLayer};

/// `--size`: bytes with an optional binary suffix, a percentage of
/// physical memory, or `unlimited`. 0 (or 0%) is unlimited too, as
/// tmpfs's `size=0`, so an fstab line written for tmpfs means the same.
fn parse_size(s: &str) -> io::Result<Option<u64>> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "bad --size {s:?}: bytes with an optional k, m, g or t suffix (powers of \
                 1024: 512m, 2g), a percentage of physical memory (50%), or unlimited"
            ),
        )
    };
    let s = s.trim();
    if s == "unlimited" {
        return Ok(None);
    }
    let bytes = if let Some(p) = s.strip_suffix('%') {
        let pct: f64 = p.parse().map_err(|_| bad())?;
        if !(0.0..=100.0).contains(&pct) {
            return Err(bad());
        }
        (physical_memory() as f64 * pct / 100.0) as u64
    } else {
        binary_suffixed(s, &['k', 'm', 'g', 't']).ok_or_else(bad)?
    };
    Ok((bytes > 0).then_some(bytes))
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
/// `nr_inodes`), `unlimited` (or 0, as tmpfs's `nr_inodes=0`), or, unset,
/// tmpfs's default: half the pages of physical memory.
fn parse_inodes(s: Option<&str>) -> io::Result<Option<u64>> {
    let Some(s) = s.map(str::trim) else {
        let pages = physical_memory() / rustix::param::page_size() as u64;
        return Ok(Some(pages.max(2) / 2));
    };
    if s == "unlimited" {
        return Ok(None);
    }
    match binary_suffixed(s, &['k', 'm', 'g']) {
        Some(0) => Ok(None),
        Some(n) => Ok(Some(n)),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "bad --inodes {s:?}: a count with an optional k, m or g suffix (powers \
                 of 1024: 100k), or unlimited"
            ),
        )),
    }
}

/// The entry and attribute timeout a file system gets unless told.
///
/// memfs: a day. Every change to a memfs passes through this kernel (no
/// one else can reach its data), and the kernel invalidates what each of
/// its own requests changes, so what it caches cannot go stale; a short
/// timeout only makes every walk that comes a second after the last one
/// pay a LOOKUP per name (docs/design/memfs.md).
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
    mount_with(o, None)
}

/// `uvfs __takeover FD`: a server being upgraded started this process
/// to take its mount over; its options and state come on FD.
pub fn take_over(fd: &str) -> io::Result<()> {
    let handoff = uvfs_fuse::upgrade::receive(fd)?;
    let o: MountOpts = match serde_json::from_slice(handoff.app()) {
        Ok(o) => o,
        Err(e) => {
            let why = format!("the server's mount options are not this build's: {e}");
            handoff.fail(&why);
            return Err(io::Error::new(io::ErrorKind::InvalidData, why));
        }
    };
    mount_with(&o, Some(handoff))
}

/// `uvfs __supervise FD`: a server started this process to start a new
/// server if it dies (`uvfs_fuse::supervise`).
pub fn supervise(fd: &str) -> io::Result<()> {
    uvfs_fuse::supervise::run(fd, |app| {
        // Logs where the server logs.
        let Ok(o) = serde_json::from_slice::<MountOpts>(app) else {
            return;
        };
        let _ = uvfs_logger::init(&uvfs_logger::Config {
            level: o.log_level.clone(),
            file: o.log_file.clone(),
            foreground: o.foreground,
        });
        if !o.foreground {
            let fallback = uvfs_fuse::fallback_log_path(&o.mountpoint).ok();
            uvfs_logger::detached(fallback.as_deref());
            // Started before the server let go of the terminal: its
            // messages go to the log, as the server's do.
            if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
                let _ = rustix::stdio::dup2_stderr(&null);
            }
        }
    })
}

/// `uvfs upgrade`.
pub fn upgrade(o: &UpgradeOpts) -> io::Result<()> {
    let v = uvfs_fuse::request_upgrade(&o.mountpoint, o.binary.as_deref())?;
    if let Some(why) = v.get("error").and_then(|e| e.as_str()) {
        return Err(io::Error::other(format!(
            "{}: not upgraded (the server serves on): {why}",
            o.mountpoint.display()
        )));
    }
    let n = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    println!(
        "{}: now served by pid {} (server generation {}); requests waited {:.1} ms; \
         {} nodes and {} open handles handed over",
        o.mountpoint.display(),
        n("pid"),
        n("generation"),
        n("pause_us") as f64 / 1000.0,
        n("nodes"),
        n("handles"),
    );
    Ok(())
}

/// The options as a successor receives them: paths absolute (it runs
/// elsewhere, from `/`).
fn for_successor(o: &MountOpts) -> io::Result<Vec<u8>> {
    let mut o = o.clone();
    o.mountpoint = std::path::absolute(&o.mountpoint)?;
    if let Some(s) = &o.source {
        o.source = Some(std::path::absolute(s)?);
    }
    if let Some(f) = &o.log_file {
        o.log_file = Some(std::path::absolute(f)?);
    }
    serde_json::to_vec(&o).map_err(io::Error::other)
}

fn mount_with(o: &MountOpts, mut handoff: Option<uvfs_fuse::upgrade::Handoff>) -> io::Result<()> {
    let taking_over = handoff.is_some();
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
    // A successor serves the directory its predecessor served, which the
    // host may have moved since the mount: the path the mount was made
    // with may be gone or another directory (`source_now`).
    let mut saved = None;
    let mut moved_from = None;
    let source = match source {
        Some(s) if taking_over => {
            saved = handoff.as_mut().and_then(|h| h.take_fs());
            match saved
                .as_ref()
                .map(|sv| uvfs_passthrough::PassthroughFs::source_now(sv, &s))
            {
                Some(Ok(now)) => {
                    if now != s {
                        moved_from = Some(s);
                    }
                    Some(now)
                }
                Some(Err(e)) => {
                    let e = io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("restoring the passthrough: {e}"),
                    );
                    return fail_takeover(handoff, e);
                }
                None => Some(s),
            }
        }
        Some(s) => {
            must_be_dir(&s, "--source ")?;
            Some(s)
        }
        None => None,
    };
    // Here, not only in the server after it detached: the refusal is the
    // caller's, and logged after detaching it went into the log of the
    // server that does serve the mountpoint (its log is named for it).
    if !taking_over {
        uvfs_fuse::refuse_if_served(&o.mountpoint)?;
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
    // Not read-only, nor noatime unless privileged: the kernel would open
    // the source files without O_NOATIME (`FileSystem::backing_file`);
    // as root the passthrough opens them on a clone of the source's mount
    // set noatime instead, whose backing files move no atime.
    let kernel_io = source.is_some()
        && !o.server_io
        && !o.read_only
        && (privileged || AtimeRule::from_mount_flags(o.mount_flags).files != Atime::Never);
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
    // A successor must not touch the mount: its server (the predecessor)
    // is parked until the successor serves.
    if !taking_over {
        must_be_dir(&mountpoint, "")?;
    }
    if let Some(s) = source.as_ref().filter(|_| !taking_over) {
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
    // Before detaching, which leaves the working directory for `/`:
    // relative paths are the caller's.
    let successor_app = for_successor(o)?;
    // Fork first: the vnode layer starts a thread, and a process must be
    // single-threaded when it forks.
    let mut ready = if o.foreground || taking_over {
        if taking_over && !o.foreground {
            let fallback = uvfs_fuse::fallback_log_path(&o.mountpoint).ok();
            uvfs_logger::detached(fallback.as_deref());
        }
        Readiness::foreground()
    } else {
        let r = daemonize()?;
        let fallback = uvfs_fuse::fallback_log_path(&o.mountpoint).ok();
        if let Some(to) = uvfs_logger::detached(fallback.as_deref()) {
            log::debug!("logging to {}", to.display());
        }
        r
    };
    // Anything that fails from here on is told to the waiting parent,
    // which prints it (the child's stderr goes on to the terminal only
    // until then, and the two printed over each other).
    let rest = || -> io::Result<()> {
        let signals = BlockedSignals::block()?;
        uvfs_fuse::set_memory_release(uvfs_process::alloc::return_freed_memory)?;
        let layer = VnodeLayer::new(Config::with_limit(o.vnodes));
        // The kernel leaves a FUSE file's atime to its server: the file
        // system applies the mount's atime flags itself.
        let atime = AtimeRule::from_mount_flags(o.mount_flags);
        let successor = Some(uvfs_fuse::upgrade::Successor {
            exe: installed_exe()?,
            app: successor_app,
        });
        let saved = saved.or_else(|| handoff.as_mut().and_then(|h| h.take_fs()));
        if let Some(src) = source {
            let pt_cfg = uvfs_passthrough::PassthroughConfig {
                fd_budget: o.fd_budget,
                no_handles: false,
                no_dir_readahead: o.no_dir_readahead,
                no_atime: o.read_only || atime.files == Atime::Never,
                no_diratime: atime.dirs == Atime::Never,
                watch: watched,
                keep_timeouts: explicit,
            };
            let recovery = handoff.as_mut().and_then(|h| h.take_recovery());
            let fs: std::sync::Arc<dyn uvfs_vfs::FileSystem> = match saved {
                Some(saved) => {
                    let r = match recovery {
                        Some(rec) => uvfs_passthrough::PassthroughFs::recover(
                            layer.clone(),
                            &src,
                            pt_cfg,
                            saved,
                            rec,
                        ),
                        None => uvfs_passthrough::PassthroughFs::restore(
                            layer.clone(),
                            &src,
                            pt_cfg,
                            saved,
                        ),
                    };
                    match r {
                        Ok(fs) => fs,
                        Err(e) => {
                            let e = io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("restoring the passthrough: {e}"),
                            );
                            return fail_takeover(handoff, e);
                        }
                    }
                }
                None => {
                    let fs = uvfs_passthrough::PassthroughFs::new(layer.clone(), &src, pt_cfg)
                        .map_err(|e| {
                            io::Error::new(e.kind(), format!("serving {}: {e}", src.display()))
                        })?;
                    if !o.no_supervisor && !fs.uses_handles() {
                        warn_recovery_without_handles();
                    }
                    fs
                }
            };
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
                successor,
                supervise: !o.no_supervisor,
            };
            crate::mount_log::start(o, &cfg, Some(&src), watched);
            if let Some(old) = moved_from {
                log::warn!(
                    "the source {} was moved on the host: serving it at {}",
                    old.display(),
                    src.display()
                );
            }
            return match handoff {
                Some(h) => uvfs_fuse::serve_successor(fs, layer, &cfg, h, signals),
                None => serve(fs, layer, &cfg, signals, &mut ready),
            };
        }
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let mem_cfg = MemFsConfig {
            size_limit,
            root_mode: o.mode.unwrap_or(0o755),
            root_uid: o.uid.unwrap_or(uid),
            root_gid: o.gid.unwrap_or(gid),
            inode_limit,
            atime,
        };
        let fs: std::sync::Arc<dyn uvfs_vfs::FileSystem> = match saved {
            Some(saved) => match restored("memfs", MemFs::restore(&layer, mem_cfg, saved)) {
                Ok(fs) => fs,
                Err(e) => return fail_takeover(handoff, e),
            },
            None => MemFs::new(layer.clone(), mem_cfg),
        };
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
            successor,
            supervise: false,
        };
        crate::mount_log::start(o, &cfg, None, false);
        match handoff {
            Some(h) => uvfs_fuse::serve_successor(fs, layer, &cfg, h, signals),
            None => serve(fs, layer, &cfg, signals, &mut ready),
        }
    };
    let r = rest();
    if let Err(e) = &r {
        // Once mounted the parent has its answer, and this does nothing.
        ready.report(&Err(io::Error::new(e.kind(), e.to_string())));
    }
    r
}

/// `Ok` if `p` is a directory; else says what it is instead (missing,
/// another kind of file, or out of reach: EACCES on a parent).
fn must_be_dir(p: &Path, what: &str) -> io::Result<()> {
    let why = match std::fs::metadata(p) {
        Ok(md) if md.is_dir() => return Ok(()),
        Ok(_) => "is not a directory".to_string(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => "does not exist".to_string(),
        Err(e) => format!("cannot be reached: {e}"),
    };
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{what}{} {why}", p.display()),
    ))
}

/// A file system restored from a predecessor's state, or why not.
fn restored<T>(what: &str, r: Result<T, uvfs_vfs::Errno>) -> io::Result<T> {
    r.map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("restoring the {what}: {e}"),
        )
    })
}

/// Tells the predecessor why this successor gives up (it serves on).
fn fail_takeover(handoff: Option<uvfs_fuse::upgrade::Handoff>, e: io::Error) -> io::Result<()> {
    if let Some(h) = handoff {
        h.fail(&e.to_string());
    }
    Err(e)
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
    // Waited for below: `uvfs umount M && umount SOURCE` must not meet
    // the server still holding the source.
    let server = if o.lazy {
        None
    } else {
        uvfs_fuse::server_process(&mp)
    };
    // Read before the unmount: afterwards nothing here names the device.
    let dev = uvfs_fuse::mount_entry(&mp).map(|e| e.dev);
    let served = server.is_some() || uvfs_fuse::answers(&mp);
    uvfs_fuse::unmount_path(&mp, o.lazy).map_err(|e| {
        if e.raw_os_error() == Some(libc::EINVAL) && uvfs_fuse::mount_entry(&mp).is_none() {
            return io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: nothing is mounted there", mp.display()),
            );
        }
        let hint = if e.raw_os_error() == Some(libc::EBUSY) {
            " (a process has a file open there, or its working directory; \
             `uvfs umount --lazy` detaches it now)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("{}: {e}{hint}", mp.display()))
    })?;
    const SERVER_EXIT: Duration = Duration::from_secs(10);
    if let Some((pid, pidfd)) = server {
        // A server exits a moment after its last mount is gone; one that
        // has not is likely serving another mount of the same file system.
        if uvfs_fuse::exited_within(&pidfd, Duration::from_millis(300)) {
            return Ok(());
        }
        if let Some(c) = dev.map(uvfs_fuse::copies_of).filter(|c| !c.is_empty()) {
            eprintln!("uvfs: {}", still_mounted(&mp, pid, &c));
            return Ok(());
        }
        if !uvfs_fuse::exited_within(&pidfd, SERVER_EXIT) {
            eprintln!(
                "uvfs: {}: unmounted, but its server (pid {pid}) still runs {SERVER_EXIT:?} \
                 later: another mount of the file system (in a mount namespace no process \
                 here is in, or one this user may not read) may keep it serving; `kill {pid}` \
                 stops it",
                mp.display()
            );
        }
        return Ok(());
    }
    let deadline = std::time::Instant::now() + SERVER_EXIT;
    while served && !o.lazy && uvfs_fuse::answers(&mp) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// What `uvfs umount` says when the file system stays mounted elsewhere
/// (`copies`) and its server `pid` serves on: where, and how to stop it.
fn still_mounted(mp: &Path, pid: i32, copies: &uvfs_fuse::Copies) -> String {
    let mut places: Vec<String> = copies
        .here
        .iter()
        .map(|p| format!("at {}", p.display()))
        .collect();
    places.extend(
        copies
            .elsewhere
            .iter()
            .map(|(p, comm)| format!("in the mount namespace of pid {p} ({comm})")),
    );
    format!(
        "{}: unmounted here, but the file system is still mounted {}, and its server \
         (pid {pid}) goes on serving it there; it stops once those are unmounted too, \
         or now with `kill {pid}` (they then fail with ENOTCONN)",
        mp.display(),
        places.join(", ")
    )
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

/// The path this server's binary was started from, where an upgrade (and
/// a crash's new server) looks for the binary: still that path when the
/// file there was replaced since (a package upgrade), which the kernel
/// shows as "PATH (deleted)".
fn installed_exe() -> std::io::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(p) => Ok(p.into()),
        None => Ok(exe),
    }
}

/// A server started after a crash finds the nodes the kernel holds by
/// their file handles (the journal's records): without open_by_handle_at,
/// which needs CAP_DAC_READ_SEARCH, the mount stays up but those nodes
/// answer ESTALE. Said once at mount, as each feature that is off.
fn warn_recovery_without_handles() {
    let why = if uvfs_fuse::has_cap_dac_read_search() {
        // Root, on a source whose handles do not outlive the kernel's
        // inode cache (FUSE, some network file systems) or that has none.
        "the source's file system gives no lasting file handles"
    } else {
        "opening files by handle needs CAP_DAC_READ_SEARCH"
    };
    log::warn!(
        "crash recovery partial: {why}, so if the server dies, files, directories \
         and working directories in use then answer ESTALE (the mount stays up; \
         paths walked anew work)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

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
            no_supervisor: false,
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
            assert!(e.contains("/nonexistent-mountpoint does not exist"), "{e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k").unwrap(), Some(4096));
        assert_eq!(parse_size("2G").unwrap(), Some(2 << 30));
        assert_eq!(parse_size("unlimited").unwrap(), None);
        assert!(parse_size("50%").unwrap().unwrap() > 0);
        assert!(parse_size("x").is_err());
        // A refusal says what is accepted.
        let e = parse_size("1GB").unwrap_err().to_string();
        assert!(
            e.contains("1GB") && e.contains("suffix") && e.contains("unlimited"),
            "{e}"
        );
        assert!(parse_size("101%").is_err());
        assert!(parse_size("-1%").is_err());
        // tmpfs's size=0: no limit.
        assert_eq!(parse_size("0").unwrap(), None);
        assert_eq!(parse_size("0%").unwrap(), None);
    }

    #[test]
    fn inode_counts() {
        assert_eq!(parse_inodes(Some("100")).unwrap(), Some(100));
        assert_eq!(parse_inodes(Some("2k")).unwrap(), Some(2048));
        assert_eq!(parse_inodes(Some("1M")).unwrap(), Some(1 << 20));
        assert_eq!(parse_inodes(Some("unlimited")).unwrap(), None);
        assert!(parse_inodes(None).unwrap().unwrap() > 0);
        // tmpfs's nr_inodes=0: no limit.
        assert_eq!(parse_inodes(Some("0")).unwrap(), None);
        for bad in ["x", "-1", "1t", "99999999999999999999"] {
            assert!(parse_inodes(Some(bad)).is_err(), "{bad}");
        }
    }
}
