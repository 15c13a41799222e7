//! `uvfs` as mount(8)'s helper for the types `uvfs` and `fuse.uvfs`
//! (`/sbin/mount.uvfs` or `/sbin/mount.fuse.uvfs`, a link to this
//! binary), so that a memfs or a passthrough can be a line of /etc/fstab
//! or a systemd mount unit:
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

//!
//! The options themselves are fstab's (`fstab.rs`).

use crate::fstab::{apply, invalid};
use crate::mount_opts::{FsKind, MountOpts};
use clap::Parser;
use std::io;
use std::path::PathBuf;

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
/// mount(2), as FUSE allows (a read-only passthrough made writable still
/// refuses every change), then tells the server, which the kernel does
/// not: the server applies the atime flags itself (the kernel moves no
/// FUSE file's atime). A server that cannot be told (one started by
/// another user, or gone) is warned about, not failed: the flags are set.
fn remount_flags(o: &MountOpts) -> io::Result<()> {
    use rustix::mount::{mount_remount, MountFlags};
    let flags = o.mount_flags | if o.read_only { libc::MS_RDONLY } else { 0 };
    mount_remount(&o.mountpoint, MountFlags::from_bits_retain(flags as _), c"").map_err(|e| {
        let e = io::Error::from(e);
        io::Error::new(e.kind(), format!("remount {}: {e}", o.mountpoint.display()))
    })?;
    if let Err(e) = uvfs_fuse::notify_remounted(&o.mountpoint) {
        eprintln!(
            "mount.uvfs: remounted {}, but its server was not told ({e}): it keeps \
             applying the atime flags it had",
            o.mountpoint.display()
        );
    }
    Ok(())
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
