//! Mounts as `/proc/self/mountinfo` lists them: which device the kernel
//! gave a mount, its owner and its flags. One parser ([`MountEntry`]),
//! also used by the tests of every crate.
//!
//! The server tells its file system (`FileSystem::mounted_as`) so that a
//! passthrough whose source reaches this very mount (a bind mount of a
//! directory above the mountpoint) refuses to walk into it instead of
//! waiting on itself. Read from mountinfo, not by `stat` of the
//! mountpoint: a stat there is a request to this server, which is not
//! answering yet.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// One mount as mountinfo lists it (the fields uvfs reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The device the kernel gave it (`makedev(major, minor)`).
    pub dev: u64,
    /// Where it is mounted (mountinfo's escapes undone).
    pub mountpoint: PathBuf,
    /// Per-mount options (`rw,nosuid,relatime`).
    pub options: String,
    /// The file system type (`fuse.uvfs`).
    pub fstype: String,
    /// The source (`uvfs-memfs`, a directory).
    pub source: String,
    /// The super block's options (`rw,user_id=0,group_id=0,...`).
    pub super_options: String,
}

impl MountEntry {
    /// One line of mountinfo; `None` if it is not one.
    pub fn parse(line: &str) -> Option<MountEntry> {
        let (head, tail) = line.split_once(" - ")?;
        let mut h = head.split(' ');
        let dev = h.nth(2)?;
        let (maj, min) = dev.split_once(':')?;
        let dev = libc::makedev(maj.parse().ok()?, min.parse().ok()?);
        let mountpoint = PathBuf::from(OsString::from_vec(unescape(h.nth(1)?)));
        let options = h.next()?.to_string();
        let mut t = tail.split(' ');
        Some(MountEntry {
            dev,
            mountpoint,
            options,
            fstype: t.next()?.to_string(),
            source: t.next()?.to_string(),
            super_options: t.next().unwrap_or("").to_string(),
        })
    }

    /// Whether `o` is among the per-mount options.
    pub fn has_option(&self, o: &str) -> bool {
        self.options.split(',').any(|x| x == o)
    }
}

/// Every mount listed in mountinfo `text`, in its order.
pub fn entries(text: &str) -> impl Iterator<Item = MountEntry> + '_ {
    text.lines().filter_map(MountEntry::parse)
}

/// The mount on `mountpoint` in mountinfo `text`: the last one listed
/// there (the one on top).
pub fn entry_in(text: &str, mountpoint: &Path) -> Option<MountEntry> {
    let want = mountpoint.as_os_str().as_bytes();
    text.lines()
        .rev()
        .filter_map(MountEntry::parse)
        .find(|e| e.mountpoint.as_os_str().as_bytes() == want)
}

/// The mount on `mountpoint` now (the one on top), if one is.
pub fn mount_entry(mountpoint: &Path) -> Option<MountEntry> {
    entry_in(
        &std::fs::read_to_string("/proc/self/mountinfo").ok()?,
        mountpoint,
    )
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`,
/// `\134`).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The device (`makedev(major, minor)`) of the mount on `mountpoint` in
/// mountinfo `text`: the last one listed there (the one on top).
pub(crate) fn device_in(text: &str, mountpoint: &Path) -> Option<u64> {
    entry_in(text, mountpoint).map(|e| e.dev)
}

/// The `user_id=` of the FUSE mount on `mountpoint` in mountinfo `text`
/// (the one on top): the user whose server it is.
pub(crate) fn owner_in(text: &str, mountpoint: &Path) -> Option<u32> {
    entry_in(text, mountpoint)?
        .super_options
        .split(',')
        .find_map(|o| o.strip_prefix("user_id="))
        .and_then(|u| u.parse().ok())
}

/// The owner of the FUSE mount on `mountpoint` now, if it is listed.
pub(crate) fn owner_of(mountpoint: &Path) -> Option<u32> {
    owner_in(
        &std::fs::read_to_string("/proc/self/mountinfo").ok()?,
        mountpoint,
    )
}

/// The flags of the mount on `mountpoint` in mountinfo `text` (the one on
/// top) that its server applies itself (`FileSystem::remounted`), from
/// its per-mount options: `MS_RDONLY`, `MS_NOATIME`, `MS_NODIRATIME`,
/// `MS_RELATIME`, and `MS_STRICTATIME` where it shows neither `noatime`
/// nor `relatime` (mountinfo names no `strictatime`; to mount(2), no
/// atime flag means `relatime`).
pub(crate) fn flags_in(text: &str, mountpoint: &Path) -> Option<u64> {
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
    flags_in(
        &std::fs::read_to_string("/proc/self/mountinfo").ok()?,
        mountpoint,
    )
}

/// Whether any mount in mountinfo `text` is of device `dev`.
pub(crate) fn lists_device(text: &str, dev: u64) -> bool {
    entries(text).any(|e| e.dev == dev)
}

/// The device of the mount on `mountpoint` now, if it is listed.
pub(crate) fn device_of(mountpoint: &Path) -> Option<u64> {
    device_in(
        &std::fs::read_to_string("/proc/self/mountinfo").ok()?,
        mountpoint,
    )
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
    fn a_line_is_parsed_into_its_fields() {
        let e = entry_in(TEXT, Path::new("/tmp/a b")).unwrap();
        assert_eq!(
            e,
            MountEntry {
                dev: libc::makedev(0, 52),
                mountpoint: PathBuf::from("/tmp/a b"),
                options: "rw,nosuid".into(),
                fstype: "fuse.memfs".into(),
                source: "uvfs".into(),
                super_options: "rw,user_id=0".into(),
            }
        );
        assert!(e.has_option("nosuid") && !e.has_option("nosu"));
        // Optional fields before the separator are skipped.
        assert_eq!(
            MountEntry::parse("22 1 8:1 / / rw,relatime shared:1 master:2 - ext4 /dev/sda1 rw")
                .map(|e| (e.fstype, e.super_options)),
            Some(("ext4".into(), "rw".into()))
        );
        assert_eq!(entries(TEXT).count(), 4);
        assert_eq!(MountEntry::parse("1 2 x:y / /tmp/x rw - t s o"), None);
        assert_eq!(MountEntry::parse("no separator"), None);
    }

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
