//! What `uvfs mount` logs as it starts: what it serves, the options in
//! force, and each feature that is off with the reason, so that a
//! detached server's log says how it ran.

use crate::mount_opts::{MountOpts, Transport};
use std::path::Path;
use uvfs_fuse::{ServeConfig, UringOffer};

/// The io_uring switch: turned on here (said once), or off with the
/// command that turns it on.
pub fn uring_offer(offer: UringOffer) {
    match (offer, offer.message()) {
        (UringOffer::TurnedOn, Some(m)) => log::info!("{m}"),
        (UringOffer::Unsupported, _) => {
            log::info!("FUSE over io_uring off: this kernel does not offer it (Linux 6.14+)")
        }
        (_, Some(m)) => log::warn!("FUSE over io_uring off: {m}"),
        (_, None) => {}
    }
}

fn secs(d: std::time::Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// The mount(2) flags set, by their fstab names.
fn flags(bits: libc::c_ulong) -> String {
    let names: Vec<&str> = uvfs_fuse::MOUNT_FLAGS
        .iter()
        .filter(|&&(_, f)| bits & f != 0)
        .map(|&(n, _)| n)
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(",")
    }
}

/// Logs the start of a mount of `source` (a passthrough) or a memfs.
pub fn start(o: &MountOpts, cfg: &ServeConfig, source: Option<&Path>, watched: bool) {
    let what = match source {
        Some(s) => format!("passthrough of {}", s.display()),
        None => "memfs".into(),
    };
    log::info!(
        "uvfs {} (pid {}) serving {what} on {} as {:?}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        cfg.mountpoint.display(),
        cfg.fsname,
    );
    let mut opts = format!(
        "options: threads={} vnodes={} entry_timeout={} attr_timeout={} transport={} \
         read_only={} flags={} opendir={}",
        cfg.threads,
        o.vnodes,
        secs(cfg.timeouts.entry),
        secs(cfg.timeouts.attr),
        if cfg.uring { "io_uring" } else { "/dev/fuse" },
        cfg.read_only,
        flags(cfg.mount_flags),
        o.opendir,
    );
    if source.is_some() {
        opts += &format!(
            " watcher={watched} kernel_io={} dir_readahead={} fd_budget={}",
            cfg.kernel_io,
            !o.no_dir_readahead,
            o.fd_budget.map_or("default".into(), |n| n.to_string()),
        );
    } else {
        opts += &format!(
            " size={} inodes={}",
            o.size,
            o.inodes.as_deref().unwrap_or("default")
        );
    }
    opts += &format!(" dir_refresh={}", cfg.dir_refresh);
    log::info!("{opts}");
    for why in off(o, cfg, source.is_some()) {
        log::info!("{why}");
    }
}

/// The features the options turned off, each with its reason (those the
/// machine turns off are logged where that is found out).
fn off(o: &MountOpts, cfg: &ServeConfig, passthrough: bool) -> Vec<String> {
    let mut v = Vec::new();
    if o.transport == Transport::Dev {
        v.push("FUSE over io_uring off (--transport dev)".into());
    }
    if !passthrough {
        return v;
    }
    if o.no_watch {
        v.push(format!(
            "host-change watcher off (--no-watch): names and attributes are cached for {}",
            secs(cfg.timeouts.attr)
        ));
    }
    if !cfg.kernel_io {
        let noatime = uvfs_memfs::AtimeRule::from_mount_flags(o.mount_flags).files
            == uvfs_memfs::Atime::Never;
        let why = if o.server_io {
            Some("--server-io")
        } else if o.read_only {
            Some("read-only: the kernel would open source files without O_NOATIME")
        } else if noatime {
            Some(
                "noatime without CAP_SYS_ADMIN: the kernel would open source files without \
                 O_NOATIME",
            )
        } else {
            // No CAP_SYS_ADMIN: logged where that is found out.
            None
        };
        if let Some(why) = why {
            v.push(format!("kernel I/O on source files off ({why})"));
        }
    }
    if o.no_dir_readahead {
        v.push("directory readahead off (--no-dir-readahead)".into());
    }
    v
}
