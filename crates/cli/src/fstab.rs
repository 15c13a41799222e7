//! fstab-style mount options (`uvfs mount -o`), and `uvfs` as mount(8)'s
//! helper for the types `uvfs` and `fuse.uvfs` (`/sbin/mount.uvfs` or
//! `/sbin/mount.fuse.uvfs`, a link to this binary), so that a memfs or a
//! passthrough can be a line of /etc/fstab or a systemd mount unit:
//!
//! ```text
//! memfs   /scratch  uvfs  size=2g,inodes=100k,mode=1777,nosuid,nodev  0 0
//! /srv/d  /mnt/d    uvfs  ro,nofail                                   0 0
//! ```
//!
//! mount(8) runs the helper as `mount.uvfs SOURCE TARGET [-sfnv] [-o
//! OPTIONS]`; SOURCE `memfs` serves a memfs, anything else is the
//! directory to serve. With `-o source=DIR` (a passthrough of DIR, the
//! option libfuse's passthrough examples take) or `-o fs=memfs`, SOURCE is
//! only the mount's name instead, so that two mounts of one kind can have
//! names of their own that `findmnt SOURCE` and `umount SOURCE` find, as a
//! tmpfs's (`umount` cannot find a mount by a source that is a directory:
//! it takes a directory for a mountpoint).
//!
//! ```text
//! scratch  /mnt/scratch  uvfs  source=/srv/scratch  0 0
//! memfs-a  /mnt/a        uvfs  fs=memfs,size=1g     0 0
//! ```

use crate::mount_cmd::{parse_mode, FsKind, MountOpts, Transport};
use clap::Parser;
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

fn invalid(msg: String) -> io::Error {
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

/// mount(8)'s call of a helper.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "mount.uvfs",
    about = "mount(8) helper for uvfs: `mount -t uvfs memfs|DIR TARGET -o OPTIONS`"
)]
pub struct HelperArgs {
    /// `memfs`, or the directory to serve.
    source: String,
    /// Where to mount.
    target: PathBuf,
    /// Mount options (see `uvfs mount --help`, option `-o`).
    #[arg(short = 'o')]
    options: Option<String>,
    /// Sloppy: ignore options this helper does not know.
    #[arg(short = 's')]
    sloppy: bool,
    /// Fake: check everything, mount nothing.
    #[arg(short = 'f')]
    fake: bool,
    /// Do not write /etc/mtab (there is none to write).
    #[arg(short = 'n')]
    no_mtab: bool,
    /// Verbose (nothing more to say).
    #[arg(short = 'v')]
    verbose: bool,
    /// The file-system type mount(8) was given.
    #[arg(short = 't')]
    fstype: Option<String>,
    /// A mount namespace to mount in (not supported).
    #[arg(short = 'N')]
    namespace: Option<String>,
}

/// Whether this program was run under a helper's name.
pub fn is_helper(argv0: &std::ffi::OsStr) -> bool {
    let name = std::path::Path::new(argv0).file_name();
    matches!(
        name.and_then(|n| n.to_str()),
        Some("mount.uvfs" | "mount.fuse.uvfs")
    )
}

/// `uvfs mount` options for a helper call.
pub fn mount_opts(a: &HelperArgs) -> io::Result<MountOpts> {
    if a.namespace.is_some() {
        return Err(invalid("mount namespaces (-N) are not supported".into()));
    }
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        o: MountOpts,
    }
    let mut o = Defaults::try_parse_from([std::ffi::OsStr::new("mount"), a.target.as_os_str()])
        .map_err(|e| invalid(e.to_string()))?
        .o;
    if let Some(opts) = &a.options {
        apply(&mut o, opts, a.sloppy)?;
    }
    if o.source.is_some() || o.fs == Some(FsKind::Memfs) || a.source == "memfs" {
        o.fsname = Some(a.source.clone());
    } else {
        o.source = Some(PathBuf::from(&a.source));
    }
    Ok(o)
}

/// The helper: mounts (or, with `-f`, only checks) what mount(8) asked,
/// or changes a mount's flags (`-o remount,...`).
pub fn helper(a: &HelperArgs) -> io::Result<()> {
    let remount = a
        .options
        .as_deref()
        .is_some_and(|o| o.split(',').any(|x| x.trim() == "remount"));
    let stripped = HelperArgs {
        options: a.options.as_deref().map(|o| {
            o.split(',')
                .filter(|x| x.trim() != "remount")
                .collect::<Vec<_>>()
                .join(",")
        }),
        // A remount repeats the mount's current options, the kernel's
        // FUSE ones (user_id=...) among them.
        sloppy: a.sloppy || remount,
        ..a.clone()
    };
    let o = mount_opts(&stripped)?;
    if a.fake {
        return Ok(());
    }
    if remount {
        return remount_flags(&o);
    }
    crate::mount_cmd::mount(&o)
}

/// `-o remount,...`: sets the mount's read-only and other flags with
/// mount(2), as FUSE allows (its server is not involved: a read-only
/// passthrough made writable still refuses every change).
fn remount_flags(o: &MountOpts) -> io::Result<()> {
    use rustix::mount::{mount_remount, MountFlags};
    let flags = o.mount_flags | if o.read_only { libc::MS_RDONLY } else { 0 };
    mount_remount(&o.mountpoint, MountFlags::from_bits_retain(flags as _), c"").map_err(|e| {
        let e = io::Error::from(e);
        io::Error::new(e.kind(), format!("remount {}: {e}", o.mountpoint.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper_args(args: &[&str]) -> HelperArgs {
        HelperArgs::try_parse_from(std::iter::once("mount.uvfs").chain(args.iter().copied()))
            .unwrap()
    }

    #[test]
    fn options_map_to_mount_options() {
        let a = helper_args(&[
            "memfs",
            "/mnt/x",
            "-o",
            "rw,size=1g,nr_inodes=10k,mode=1777,uid=5,gid=6,nosuid,nodev,noexec,exec,noauto,x-systemd.automount,threads=3,entry-timeout=2.5",
        ]);
        let o = mount_opts(&a).unwrap();
        assert_eq!(o.source, None);
        assert_eq!(o.mountpoint, PathBuf::from("/mnt/x"));
        assert_eq!(o.size, "1g");
        assert_eq!(o.inodes.as_deref(), Some("10k"));
        assert_eq!((o.mode, o.uid, o.gid), (Some(0o1777), Some(5), Some(6)));
        assert_eq!(o.mount_flags, libc::MS_NOSUID | libc::MS_NODEV);
        assert_eq!(o.threads, 3);
        assert_eq!(o.entry_timeout, Some(2.5));
        assert!(!o.read_only);

        let o = mount_opts(&helper_args(&["/srv/d", "/mnt/y", "-o", "ro,defaults"])).unwrap();
        assert_eq!(o.source, Some(PathBuf::from("/srv/d")));
        assert!(o.read_only);
        assert!(!o.server_io);

        let o = mount_opts(&helper_args(&["/srv/d", "/mnt/y", "-o", "server_io"])).unwrap();
        assert!(o.server_io && !o.read_only && !o.no_dir_refresh);

        let o = mount_opts(&helper_args(&["memfs", "/mnt/x", "-o", "no_dir_refresh"])).unwrap();
        assert!(o.no_dir_refresh);

        let o = mount_opts(&helper_args(&[
            "memfs",
            "/mnt/x",
            "-o",
            "log_file=/var/log/uvfs-x.log,log-level=warn",
        ]))
        .unwrap();
        assert_eq!(o.log_file, Some(PathBuf::from("/var/log/uvfs-x.log")));
        assert_eq!(o.log_level.as_deref(), Some("warn"));
    }

    #[test]
    fn source_is_a_name_when_the_options_say_what_to_serve() {
        let o = mount_opts(&helper_args(&["/srv/d", "/m"])).unwrap();
        assert_eq!((o.source, o.fsname), (Some(PathBuf::from("/srv/d")), None));
        let o = mount_opts(&helper_args(&["memfs", "/m"])).unwrap();
        assert_eq!((o.source, o.fsname.as_deref()), (None, Some("memfs")));
        let o = mount_opts(&helper_args(&["scratch", "/m", "-o", "source=/srv/s"])).unwrap();
        assert_eq!(o.source, Some(PathBuf::from("/srv/s")));
        assert_eq!(o.fsname.as_deref(), Some("scratch"));
        let o = mount_opts(&helper_args(&["memfs-a", "/m", "-o", "fs=memfs,size=1m"])).unwrap();
        assert_eq!((o.source, o.fs), (None, Some(FsKind::Memfs)));
        assert_eq!(o.fsname.as_deref(), Some("memfs-a"));
        // Naming the kind the source implies changes nothing.
        let o = mount_opts(&helper_args(&["/srv/d", "/m", "-o", "fs=passthrough"])).unwrap();
        assert_eq!((o.source, o.fsname), (Some(PathBuf::from("/srv/d")), None));
        for bad in ["fs=ext4", "fs", "source"] {
            let e = mount_opts(&helper_args(&["x", "/m", "-o", bad])).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_and_malformed_options_are_refused_unless_sloppy() {
        for bad in [
            "bogus",
            "size",
            "mode=999",
            "uid=x",
            "threads=-1",
            "transport=tcp",
            "ro=1",
        ] {
            let e = mount_opts(&helper_args(&["memfs", "/m", "-o", bad])).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}: {e}");
        }
        assert!(mount_opts(&helper_args(&["memfs", "/m", "-s", "-o", "bogus,size=1m"])).is_ok());
        assert!(mount_opts(&helper_args(&["memfs", "/m", "-N", "x"])).is_err());
    }

    #[test]
    fn every_standard_mount_option_is_accepted() {
        // What mount(8) and fstab pass, remounts included (a tool that
        // repeats `strictatime` or `lazytime` must not fail).
        let all = "defaults,auto,noauto,user,nouser,users,owner,group,_netdev,nofail,\
                   x-systemd.automount,x-mount.mkdir=0755,comment=systemd.x,rw,suid,dev,exec,\
                   async,atime,diratime,relatime,norelatime,strictatime,nostrictatime,lazytime,\
                   nolazytime,iversion,noiversion,silent,loud,nomand,norecovery,noload,symfollow";
        let o = mount_opts(&helper_args(&["memfs", "/m", "-o", all])).unwrap();
        assert_eq!(o.mount_flags, 0, "every flag set was cleared again");
        assert!(!o.read_only);
        let flags = |opts: &str| {
            mount_opts(&helper_args(&["memfs", "/m", "-o", opts]))
                .unwrap()
                .mount_flags
        };
        assert_eq!(flags("strictatime"), libc::MS_STRICTATIME);
        assert_eq!(
            flags("lazytime,relatime"),
            libc::MS_LAZYTIME | libc::MS_RELATIME
        );
        assert_eq!(
            flags("sync,dirsync"),
            libc::MS_SYNCHRONOUS | libc::MS_DIRSYNC
        );
        assert_eq!(flags("sync,async"), 0);
        assert_eq!(flags("noatime,atime,nodiratime"), libc::MS_NODIRATIME);
        assert_eq!(
            flags("nosuid,nodev,noexec,nosymfollow"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_NOSYMFOLLOW
        );
        // Mandatory locks are gone from Linux: said so, even when sloppy.
        for sloppy in [false, true] {
            let mut o = mount_opts(&helper_args(&["memfs", "/m"])).unwrap();
            let e = apply(&mut o, "mand", sloppy).unwrap_err();
            assert!(e.to_string().contains("mandatory"), "{e}");
        }
    }

    #[test]
    fn helper_names() {
        assert!(is_helper("/sbin/mount.uvfs".as_ref()));
        assert!(is_helper("mount.fuse.uvfs".as_ref()));
        assert!(!is_helper("/usr/bin/uvfs".as_ref()));
    }
}
