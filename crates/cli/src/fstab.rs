//! fstab-style mount options (`uvfs mount -o`, and the options of an
//! /etc/fstab line or a systemd mount unit, which mount(8) hands the
//! helper, `mount_helper.rs`): each turned into the `uvfs mount` option it
//! stands for, mount(2) flags passed on, and the options that mean nothing
//! to a FUSE server accepted and ignored.

use crate::mount_opts::{parse_mode, FsKind, MountOpts, Transport};
use std::io;
use std::path::PathBuf;

/// Options of fstab and mount(8) that mean nothing to the file system
/// itself (when to mount, who may, what the mount table notes), those
/// that only restate uvfs's defaults, and those a FUSE mount has no use
/// for: `iversion` (the server keeps no change counter the kernel reads),
/// `silent`/`loud` (the kernel's messages while mounting), `nomand`
/// (Linux has no mandatory locks any more), `norecovery`/`noload` (ext4's
/// and XFS's: mount without replaying the journal; uvfs has none).
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "nofail",
    "_netdev",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "default_permissions",
    "iversion",
    "noiversion",
    "silent",
    "loud",
    "nomand",
    "norecovery",
    "noload",
];

/// The flags of `MOUNT_FLAGS` and the options that turn them off again.
const FLAG_NEGATIONS: &[(&str, &str)] = &[
    ("suid", "nosuid"),
    ("dev", "nodev"),
    ("exec", "noexec"),
    ("atime", "noatime"),
    ("diratime", "nodiratime"),
    ("async", "sync"),
    ("norelatime", "relatime"),
    ("nostrictatime", "strictatime"),
    ("nolazytime", "lazytime"),
    ("symfollow", "nosymfollow"),
];

pub(crate) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn flag(name: &str) -> Option<libc::c_ulong> {
    uvfs_fuse::MOUNT_FLAGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, f)| f)
}

/// The flag that option `name` (`suid`, `dev`, ...) turns off.
fn negated(name: &str) -> Option<libc::c_ulong> {
    FLAG_NEGATIONS
        .iter()
        .find(|(n, _)| *n == name)
        .and_then(|&(_, off)| flag(off))
}

/// Applies comma-separated fstab `options` to `o`; an option it does not
/// know is an error unless `sloppy` (mount(8)'s `-s`).
pub fn apply(o: &mut MountOpts, options: &str, sloppy: bool) -> io::Result<()> {
    for opt in options.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k.replace('-', "_"), Some(v)),
            None => (opt.replace('-', "_"), None),
        };
        let num = |what: &str| -> io::Result<u64> {
            value
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| invalid(format!("option {what} needs a number: {opt:?}")))
        };
        let text = |what: &str| -> io::Result<String> {
            value
                .map(str::to_string)
                .ok_or_else(|| invalid(format!("option {what} needs a value: {opt:?}")))
        };
        let id = |what: &str| -> io::Result<u32> {
            u32::try_from(num(what)?)
                .map_err(|_| invalid(format!("option {opt:?} is out of range")))
        };
        let secs = |what: &str| -> io::Result<f64> {
            value
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| invalid(format!("option {what} needs seconds: {opt:?}")))
        };
        match (key.as_str(), value) {
            ("ro", None) => o.read_only = true,
            ("rw", None) => o.read_only = false,
            ("opendir", None) => o.opendir = true,
            ("no_dir_readahead", None) => o.no_dir_readahead = true,
            ("no_dir_refresh", None) => o.no_dir_refresh = true,
            ("no_watch", None) => o.no_watch = true,
            ("no_supervisor", None) => o.no_supervisor = true,
            ("allow_other", None) => o.allow_other = true,
            ("server_io", None) => o.server_io = true,
            ("source", _) => o.source = Some(PathBuf::from(text("source")?)),
            ("log_file", _) => o.log_file = Some(PathBuf::from(text("log_file")?)),
            ("log_level", _) => o.log_level = Some(text("log_level")?),
            ("fs", _) => {
                o.fs = Some(match text("fs")?.as_str() {
                    "memfs" => FsKind::Memfs,
                    "passthrough" => FsKind::Passthrough,
                    f => return Err(invalid(format!("fs {f:?}: memfs or passthrough"))),
                })
            }
            ("size", _) => o.size = text("size")?,
            ("inodes" | "nr_inodes", _) => o.inodes = Some(text("inodes")?),
            ("mode", _) => o.mode = Some(parse_mode(&text("mode")?).map_err(invalid)?),
            ("uid", _) => o.uid = Some(id("uid")?),
            ("gid", _) => o.gid = Some(id("gid")?),
            ("threads", _) => o.threads = num("threads")? as usize,
            ("vnodes", _) => o.vnodes = num("vnodes")? as usize,
            ("fd_budget", _) => o.fd_budget = Some(num("fd_budget")? as usize),
            ("entry_timeout", _) => o.entry_timeout = Some(secs("entry_timeout")?),
            ("attr_timeout", _) => o.attr_timeout = Some(secs("attr_timeout")?),
            ("transport", _) => {
                o.transport = match text("transport")?.as_str() {
                    "auto" => Transport::Auto,
                    "uring" => Transport::Uring,
                    "dev" => Transport::Dev,
                    t => return Err(invalid(format!("transport {t:?}: auto, uring or dev"))),
                }
            }
            (k, None) if flag(k).is_some() => o.mount_flags |= flag(k).unwrap_or(0),
            (k, None) if negated(k).is_some() => {
                o.mount_flags &= !negated(k).unwrap_or(0);
            }
            (k, None) if IGNORED.contains(&k) => {}
            ("mand", None) => {
                return Err(invalid(
                    "option \"mand\": Linux has no mandatory locks (removed in 5.15)".into(),
                ))
            }
            (k, _) if k.starts_with("x_") || k == "comment" => {}
            _ if sloppy => {}
            _ => return Err(invalid(format!("unknown mount option {opt:?}"))),
        }
    }
    Ok(())
}
