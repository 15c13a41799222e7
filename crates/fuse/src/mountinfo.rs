//! What the server reads of its own mount in `/proc/self/mountinfo`:
//! which device the kernel gave it, its owner and its flags. The parser
//! is `uvfs_vfs::mountinfo`'s, shared with the passthrough's watcher.
//!
//! The server tells its file system (`FileSystem::mounted_as`) so that a
//! passthrough whose source reaches this very mount (a bind mount of a
//! directory above the mountpoint) refuses to walk into it instead of
//! waiting on itself. Read from mountinfo, not by `stat` of the
//! mountpoint: a stat there is a request to this server, which is not
//! answering yet.

use std::path::Path;

use uvfs_vfs::mountinfo::read_table;
pub use uvfs_vfs::mountinfo::{entries, entry_in, mount_entry, MountEntry};

/// The device (`makedev(major, minor)`) of the mount on `mountpoint` in
/// mountinfo `text`: the last one listed there (the one on top).
pub(crate) fn device_in<T: AsRef<[u8]> + ?Sized>(text: &T, mountpoint: &Path) -> Option<u64> {
    entry_in(text, mountpoint).map(|e| e.dev)
}

/// The `user_id=` of the FUSE mount on `mountpoint` in mountinfo `text`
/// (the one on top): the user whose server it is.
pub(crate) fn owner_in<T: AsRef<[u8]> + ?Sized>(text: &T, mountpoint: &Path) -> Option<u32> {
    entry_in(text, mountpoint)?
        .super_options
        .split(',')
        .find_map(|o| o.strip_prefix("user_id="))
        .and_then(|u| u.parse().ok())
}

/// The owner of the FUSE mount on `mountpoint` now, if it is listed.
pub(crate) fn owner_of(mountpoint: &Path) -> Option<u32> {
    owner_in(&read_table()?, mountpoint)
}

/// The flags of the mount on `mountpoint` in mountinfo `text` (the one on
/// top) that its server applies itself (`FileSystem::remounted`), from
/// its per-mount options: `MS_RDONLY`, `MS_NOATIME`, `MS_NODIRATIME`,
/// `MS_RELATIME`, and `MS_STRICTATIME` where it shows neither `noatime`
/// nor `relatime` (mountinfo names no `strictatime`; to mount(2), no
/// atime flag means `relatime`).
pub(crate) fn flags_in<T: AsRef<[u8]> + ?Sized>(text: &T, mountpoint: &Path) -> Option<u64> {
    let e = entry_in(text, mountpoint)?;
    let opts = e.options.as_str();
    let flags = opts.split(',').fold(0, |flags, o| {
        flags
            | match o {
                "ro" => libc::MS_RDONLY,
                "noatime" => libc::MS_NOATIME,
                "nodiratime" => libc::MS_NODIRATIME,
                "relatime" => libc::MS_RELATIME,
                _ => 0,
            }
    });
    Some(if flags & (libc::MS_NOATIME | libc::MS_RELATIME) == 0 {
        flags | libc::MS_STRICTATIME
    } else {
        flags
    })
}

/// The flags (`flags_in`) of the mount on `mountpoint` now, if listed.
pub(crate) fn flags_of(mountpoint: &Path) -> Option<u64> {
    flags_in(&read_table()?, mountpoint)
}

/// Whether any mount in mountinfo `text` is of device `dev`.
pub(crate) fn lists_device<T: AsRef<[u8]> + ?Sized>(text: &T, dev: u64) -> bool {
    entries(text).any(|e| e.dev == dev)
}

/// The device of the mount on `mountpoint` now, if it is listed.
pub(crate) fn device_of(mountpoint: &Path) -> Option<u64> {
    device_in(&read_table()?, mountpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:52 / /tmp/a\\040b rw,nosuid - fuse.memfs uvfs rw,user_id=0
41 22 0:53 / /tmp/x rw - tmpfs tmpfs rw
42 41 0:54 / /tmp/x rw - fuse.passthrough uvfs rw,user_id=0
";

    #[test]
    fn finds_the_mount_on_top_and_unescapes() {
        assert_eq!(
            device_in(TEXT, Path::new("/tmp/x")),
            Some(libc::makedev(0, 54))
        );
        assert_eq!(
            device_in(TEXT, Path::new("/tmp/a b")),
            Some(libc::makedev(0, 52))
        );
        assert_eq!(device_in(TEXT, Path::new("/")), Some(libc::makedev(8, 1)));
        assert_eq!(device_in(TEXT, Path::new("/tmp")), None);
        assert_eq!(
            device_in("garbage\n1 2 x:y / /tmp/x rw\n", Path::new("/tmp/x")),
            None
        );
    }

    #[test]
    fn per_mount_flags_of_the_mount_on_top() {
        let text = format!(
            "{TEXT}43 22 0:56 / /m ro,noatime,nodiratime - fuse.uvfs m rw,user_id=0\n\
             44 22 0:57 / /s rw,nosuid - fuse.uvfs s rw,user_id=0\n"
        );
        let f = |m: &str| flags_in(&text, Path::new(m));
        assert_eq!(f("/"), Some(libc::MS_RELATIME));
        assert_eq!(
            f("/m"),
            Some(libc::MS_RDONLY | libc::MS_NOATIME | libc::MS_NODIRATIME)
        );
        // strictatime: neither noatime nor relatime.
        assert_eq!(f("/s"), Some(libc::MS_STRICTATIME));
        assert_eq!(f("/tmp/x"), Some(libc::MS_STRICTATIME));
        assert_eq!(f("/nowhere"), None);
    }

    #[test]
    fn the_owner_is_the_user_id_of_the_mount_on_top() {
        let text = format!(
            "{TEXT}43 22 0:56 / /home/u/m rw - fuse.uvfs uvfs rw,user_id=1000,group_id=1000\n"
        );
        assert_eq!(owner_in(&text, Path::new("/home/u/m")), Some(1000));
        assert_eq!(owner_in(&text, Path::new("/tmp/x")), Some(0));
        assert_eq!(owner_in(&text, Path::new("/tmp/a b")), Some(0));
        // Not FUSE (no user_id), not mounted.
        assert_eq!(owner_in(&text, Path::new("/")), None);
        assert_eq!(owner_in(&text, Path::new("/home/u")), None);
    }

    #[test]
    fn a_device_is_listed_wherever_it_is_mounted() {
        assert!(lists_device(TEXT, libc::makedev(0, 54)));
        assert!(lists_device(TEXT, libc::makedev(8, 1)));
        assert!(!lists_device(TEXT, libc::makedev(0, 55)));
        assert!(!lists_device(
            "garbage\n1 2 x:y / /tmp/x rw\n",
            libc::makedev(0, 0)
        ));
    }

    #[test]
    fn a_mount_has_the_device_stat_reports() {
        // `/proc`, not `/`: in a chroot the root need not be a mount.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            device_of(Path::new("/proc")),
            Some(std::fs::metadata("/proc").unwrap().dev())
        );
    }
}
