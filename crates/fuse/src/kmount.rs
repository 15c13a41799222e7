//! Mounting with mount(2) ourselves, and unmounting only our own mount.
//!
//! # Why not fuser's mount
//! fuser 0.18 unmounts by path when its session ends, guarded by a poll of
//! `/dev/fuse` whose test is inverted (POLLERR, "connection dead", is
//! taken as "still mounted"; fixed upstream after 0.18.0, cberner/fuser
//! PR 703). So after `umount MNT`, a server slow to exit unmounted
//! whatever was mounted on MNT by then: `umount MNT; uvfs mount MNT`
//! could lose the new mount to the old server.
//!
//! Here, as root, uvfs mounts with mount(2) and hands fuser only the
//! device fd (`Session::from_fd`), so fuser never unmounts anything.
//! Unmounting happens only on request (signal, embedding API) and only
//! while our own connection is alive, as libfuse's `fuse_kern_unmount`
//! does. Without the privilege for mount(2), fusermount3 mounts and
//! unmounts instead (`fusermount.rs`), and the session gets the fd it
//! sends: the same guards hold.

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The mount(2) flags `ServeConfig::mount_flags` may hold, with their
/// fstab names: those that only change what the kernel allows or records
/// (the server needs to know none of them).
pub const MOUNT_FLAGS: &[(&str, libc::c_ulong)] = &[
    ("nosuid", libc::MS_NOSUID),
    ("nodev", libc::MS_NODEV),
    ("noexec", libc::MS_NOEXEC),
    ("noatime", libc::MS_NOATIME),
    ("nodiratime", libc::MS_NODIRATIME),
    ("sync", libc::MS_SYNCHRONOUS),
    ("dirsync", libc::MS_DIRSYNC),
    ("relatime", libc::MS_RELATIME),
    ("strictatime", libc::MS_STRICTATIME),
    ("lazytime", libc::MS_LAZYTIME),
    ("nosymfollow", libc::MS_NOSYMFOLLOW),
];

/// A FUSE mount this process made, identified by its connection.
pub struct KernelMount {
    /// A duplicate of the session's `/dev/fuse` descriptor: it shares the
    /// connection, so polling it tells whether the mount still exists.
    dev: OwnedFd,
    mountpoint: CString,
    /// The device the kernel gave the mount (from mountinfo, right after
    /// mounting), if it could be read.
    device: Option<u64>,
    /// Mounted by fusermount3 (no privilege for mount(2)): unmounted by it
    /// too.
    helper: bool,
}

fn cstring(b: &[u8]) -> std::io::Result<CString> {
    CString::new(b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

fn euid() -> libc::uid_t {
    rustix::process::geteuid().as_raw()
}

/// Why `/dev/fuse` could not be opened, and what to do about it.
fn dev_fuse_error(e: std::io::Error) -> std::io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => {
            "the fuse kernel module is not loaded: `modprobe fuse` as root".to_string()
        }
        Some(libc::EACCES | libc::EPERM) if euid() != 0 => {
            let mode = std::fs::metadata("/dev/fuse")
                .map(|m| format!("{:o}", m.permissions().mode() & 0o7777))
                .unwrap_or_else(|_| "?".into());
            format!(
                "FUSE servers run by users need it mode 0666, as distributions ship \
                 it (here it is {mode}); ask an admin to `chmod 0666 /dev/fuse` (a udev \
                 rule keeps it so), or mount as root"
            )
        }
        _ => return std::io::Error::new(e.kind(), format!("/dev/fuse: {e}")),
    };
    std::io::Error::new(e.kind(), format!("/dev/fuse: {e}; {hint}"))
}

/// fusermount3's options for a mount `mount` would make with mount(2).
fn helper_options(
    fsname: &str,
    allow_other: bool,
    read_only: bool,
    flags: libc::c_ulong,
) -> String {
    let mut o = vec![
        format!("fsname={}", crate::fusermount::escape(fsname)),
        "subtype=uvfs".to_string(),
        "default_permissions".to_string(),
    ];
    // fusermount3 mounts nosuid,nodev for users whatever they ask; root
    // (without CAP_SYS_ADMIN, in a container) gets what mount(2) would.
    if euid() == 0 {
        o.push("dev".into());
        o.push("suid".into());
    }
    if allow_other {
        o.push("allow_other".into());
    }
    o.push(if read_only { "ro" } else { "rw" }.into());
    // Applied in order: these override `dev` and `suid` above.
    for &(name, flag) in MOUNT_FLAGS {
        if flags & flag != 0 {
            o.push(name.into());
        }
    }
    o.join(",")
}

/// Mounts a FUSE file system on `mountpoint`: device and setuid files
/// honoured unless `flags` (MS_NOSUID, MS_NODEV, ...) say otherwise,
/// read-write unless `read_only`, permissions checked by the kernel, and
/// usable by every user when `allow_other`. With mount(2) where this
/// process may, else through fusermount3 (which mounts users' file
/// systems nosuid,nodev). Returns the fd for the session and the mount to
/// unmount later.
pub fn mount(
    mountpoint: &Path,
    fsname: &str,
    allow_other: bool,
    read_only: bool,
    flags: libc::c_ulong,
) -> std::io::Result<(OwnedFd, KernelMount)> {
    let mp = mountpoint_cstring(mountpoint)?;
    let source = cstring(fsname.as_bytes())?;
    let st = rustix::fs::stat(mp.as_c_str())?;
    let dev = rustix::fs::open(c"/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| dev_fuse_error(e.into()))?;
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let mut opts = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid},default_permissions",
        dev.as_raw_fd(),
        st.st_mode
    );
    if allow_other {
        opts.push_str(",allow_other");
    }
    let opts = cstring(opts.as_bytes())?;
    let mut mflags = MountFlags::from_bits_retain(flags as _);
    if read_only {
        mflags |= MountFlags::RDONLY;
    }
    // `fuse.uvfs`: findmnt and mount(8) show (and look for a
    // `mount.fuse.uvfs` helper for) uvfs, not any FUSE server.
    let rc = rustix::mount::mount(
        source.as_c_str(),
        mp.as_c_str(),
        c"fuse.uvfs",
        mflags,
        opts.as_c_str(),
    );
    let (dev, helper) = if let Err(e) = rc {
        let e = std::io::Error::from(e);
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(std::io::Error::new(
                e.kind(),
                format!("mount({}): {e}", mountpoint.display()),
            ));
        }
        drop(dev);
        let opts = helper_options(fsname, allow_other, read_only, flags);
        let fd = crate::fusermount::mount(mountpoint, &opts).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "mounting {} (mount(2) needs CAP_SYS_ADMIN, so through fusermount3): {e}",
                    mountpoint.display()
                ),
            )
        })?;
        (fd, true)
    } else {
        (dev, false)
    };
    let probe = dev.try_clone()?;
    Ok((
        dev,
        KernelMount {
            dev: probe,
            mountpoint: mp,
            device: crate::mountinfo::device_of(mountpoint),
            helper,
        },
    ))
}

impl KernelMount {
    /// The mount a server this one replaces made (a live upgrade): `dev`
    /// is a descriptor of its connection.
    pub(crate) fn adopt(
        dev: OwnedFd,
        mountpoint: &Path,
        device: Option<u64>,
        helper: bool,
    ) -> std::io::Result<KernelMount> {
        Ok(KernelMount {
            dev,
            mountpoint: mountpoint_cstring(mountpoint)?,
            device,
            helper,
        })
    }

    /// The device the kernel gave the mount, if known.
    pub(crate) fn device(&self) -> Option<u64> {
        self.device
    }

    /// Mounted through fusermount3.
    pub(crate) fn helper(&self) -> bool {
        self.helper
    }

    /// Another descriptor of the connection (for notifications fuser
    /// cannot send, `prune.rs`).
    pub fn dup_dev(&self) -> std::io::Result<OwnedFd> {
        self.dev.try_clone()
    }

    /// Whether our connection is still up: `/dev/fuse` polls POLLERR once
    /// the file system was unmounted or its connection aborted.
    pub fn alive(&self) -> bool {
        let mut p = [PollFd::new(&self.dev, PollFlags::empty())];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        loop {
            // A timeout of 0 never blocks.
            match rustix::event::poll(&mut p, Some(&now)) {
                Err(rustix::io::Errno::INTR) => continue,
                Ok(1) => return !p[0].revents().contains(PollFlags::ERR),
                _ => return true,
            }
        }
    }

    /// Whether the mount on the mountpoint is ours. The connection can
    /// outlive the mount for a moment: the directory refresher's private
    /// clone (`refresh.rs`) keeps the superblock, and so the connection,
    /// until its batch ends, and by then `umount MNT; uvfs mount MNT` may
    /// have put another file system there.
    fn on_top(&self) -> bool {
        let Some(ours) = self.device else {
            return true;
        };
        let path = Path::new(std::ffi::OsStr::from_bytes(self.mountpoint.as_bytes()));
        crate::mountinfo::device_of(path) == Some(ours)
    }

    /// Unmounts, unless the connection is already gone (someone else
    /// unmounted it, and MNT may now hold another file system). A mount
    /// still in use fails with EBUSY; see `detach`.
    pub fn unmount(&self) -> std::io::Result<()> {
        // EBUSY can be transient: a path walk crossing the mountpoint right
        // now holds a reference on the mount for a moment, and so does a
        // child that another thread of this process forked and has not yet
        // exec'd (it holds copies of every fd open at the fork; O_CLOEXEC
        // closes them only at the exec): a test's unmount right after its
        // last close while another test spawns programs, say.
        // A mount kept busy by open files or a working directory still
        // fails, after these retries.
        let mut tries = 0;
        loop {
            match self.umount2(0) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < UMOUNT_BUSY_RETRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r,
            }
        }
    }

    /// Detaches the mount lazily: the kernel finishes the unmount when its
    /// last user leaves.
    pub fn detach(&self) -> std::io::Result<()> {
        self.umount2(libc::MNT_DETACH)
    }

    fn umount2(&self, flags: libc::c_int) -> std::io::Result<()> {
        if !self.alive() || !self.on_top() {
            return Ok(());
        }
        if self.helper {
            let path = Path::new(std::ffi::OsStr::from_bytes(self.mountpoint.as_bytes()));
            return crate::fusermount::unmount(path, flags & libc::MNT_DETACH != 0);
        }
        let flags = UnmountFlags::from_bits_retain(flags as u32);
        Ok(rustix::mount::unmount(self.mountpoint.as_c_str(), flags)?)
    }
}

/// Retries of an unmount that found the mount busy (10 ms apart).
const UMOUNT_BUSY_RETRIES: u32 = 20;

/// Unmounts this server's file system (the signal thread's and the
/// embedding API's handle on it).
pub struct Unmounter(pub std::sync::Arc<KernelMount>);

impl Unmounter {
    /// Unmounts; fails with EBUSY while the mount is in use.
    pub fn unmount(&mut self) -> std::io::Result<()> {
        self.0.unmount()
    }

    /// Detaches lazily (after `unmount` failed because the mount is busy).
    pub fn detach(&mut self) -> std::io::Result<()> {
        self.0.detach()
    }

    /// Whether the connection is still up (a mount of it remains
    /// somewhere, if not here).
    pub fn connected(&self) -> bool {
        self.0.alive()
    }
}

/// Unmounts whatever is mounted on `mountpoint` (`uvfs umount`): with
/// umount2 where this process may, else with fusermount3 (which unmounts
/// only the caller's own FUSE mounts); `lazy` detaches a busy mount.
pub fn unmount_path(mountpoint: &Path, lazy: bool) -> std::io::Result<()> {
    let mp = mountpoint_cstring(mountpoint)?;
    let flags = if lazy {
        UnmountFlags::DETACH
    } else {
        UnmountFlags::empty()
    };
    match rustix::mount::unmount(mp.as_c_str(), flags) {
        Ok(()) => return Ok(()),
        Err(rustix::io::Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    crate::fusermount::unmount(mountpoint, lazy)
}

/// The mountpoint as a C string, for unmounting by path.
pub fn mountpoint_cstring(p: &Path) -> std::io::Result<CString> {
    cstring(p.as_os_str().as_bytes())
}
