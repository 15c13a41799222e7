//! Mounts as `/proc/self/mountinfo` lists them: one parser for the FUSE
//! server (which device the kernel gave its mount, its owner, its
//! flags), the passthrough's watcher (file systems mounted on the host
//! inside the source) and every crate's tests.
//!
//! The table is read as bytes, not text: a mountpoint is a path, and the
//! kernel escapes only space, tab, newline and backslash in it, so a
//! name that is not UTF-8 comes through raw. Read as a `String`, one such
//! mount anywhere on the host would hide every other.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Where this mount namespace's table is read (and polled for changes:
/// it is readable with `POLLPRI` after each change).
pub const MOUNTINFO: &str = "/proc/self/mountinfo";

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
    /// One line of mountinfo (with or without its newline); `None` if it
    /// is not one.
    pub fn parse(line: impl AsRef<[u8]>) -> Option<MountEntry> {
        let line = line.as_ref();
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let sep = line.windows(3).position(|w| w == b" - ")?;
        let (head, tail) = (&line[..sep], &line[sep + 3..]);
        let mut h = head.split(|&b| b == b' ');
        let dev = std::str::from_utf8(h.nth(2)?).ok()?;
        let (maj, min) = dev.split_once(':')?;
        let dev = libc::makedev(maj.parse().ok()?, min.parse().ok()?);
        let mountpoint = PathBuf::from(OsString::from_vec(unescape(h.nth(1)?)));
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let options = text(h.next()?);
        let mut t = tail.split(|&b| b == b' ');
        Some(MountEntry {
            dev,
            mountpoint,
            options,
            fstype: text(t.next()?),
            source: text(t.next()?),
            super_options: t.next().map(text).unwrap_or_default(),
        })
    }

    /// Whether `o` is among the per-mount options.
    pub fn has_option(&self, o: &str) -> bool {
        self.options.split(',').any(|x| x == o)
    }
}

/// Every mount listed in mountinfo `text`, in its order.
pub fn entries<T: AsRef<[u8]> + ?Sized>(text: &T) -> impl Iterator<Item = MountEntry> + '_ {
    text.as_ref()
        .split(|&b| b == b'\n')
        .filter_map(MountEntry::parse)
}

/// The mount on `mountpoint` in mountinfo `text`: the last one listed
/// there (the one on top).
pub fn entry_in<T: AsRef<[u8]> + ?Sized>(text: &T, mountpoint: &Path) -> Option<MountEntry> {
    let want = mountpoint.as_os_str().as_bytes();
    text.as_ref()
        .rsplit(|&b| b == b'\n')
        .filter_map(MountEntry::parse)
        .find(|e| e.mountpoint.as_os_str().as_bytes() == want)
}

/// This mount namespace's table now; `None` where it cannot be read (no
/// `/proc`).
pub fn read_table() -> Option<Vec<u8>> {
    std::fs::read(MOUNTINFO).ok()
}

/// The mount on `mountpoint` now (the one on top), if one is.
pub fn mount_entry(mountpoint: &Path) -> Option<MountEntry> {
    entry_in(&read_table()?, mountpoint)
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`,
/// `\134`). A backslash that starts no escape of a byte (`\9`, `\777`)
/// stays as it is.
fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let octal = s.get(i + 1..i + 4).filter(|d| {
            s[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stacked mounts on `/srv`, a mountpoint with a space, optional
    /// fields of every count.
    const TEXT: &str = "\
1 0 253:1 / / rw,relatime shared:1 - xfs /dev/vda1 rw,attr2
30 1 0:40 / /srv rw - tmpfs tmpfs rw
31 30 0:41 / /srv rw,nodev shared:7 master:3 - fuse.uvfs uvfs-memfs rw,user_id=0
32 1 0:42 / /home/u/my\\040files rw,nosuid - fuse.uvfs /data rw,user_id=1000
";

    #[test]
    fn a_line_is_parsed_into_its_fields() {
        let e = entry_in(TEXT, Path::new("/home/u/my files")).unwrap();
        assert_eq!(
            e,
            MountEntry {
                dev: libc::makedev(0, 42),
                mountpoint: PathBuf::from("/home/u/my files"),
                options: "rw,nosuid".into(),
                fstype: "fuse.uvfs".into(),
                source: "/data".into(),
                super_options: "rw,user_id=1000".into(),
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
        assert_eq!(MountEntry::parse("36 35 98:0"), None);
    }

    #[test]
    fn the_mount_on_top_is_found() {
        let dev = |m: &str| entry_in(TEXT, Path::new(m)).map(|e| e.dev);
        assert_eq!(dev("/srv"), Some(libc::makedev(0, 41)));
        assert_eq!(dev("/"), Some(libc::makedev(253, 1)));
        assert_eq!(dev("/home/u"), None);
        assert_eq!(
            entry_in("garbage\n1 2 x:y / /tmp/x rw\n", Path::new("/tmp/x")),
            None
        );
    }

    #[test]
    fn mountpoints_are_read_unescaped_and_byte_for_byte() {
        let line = b"36 35 98:0 /mnt1 /mnt/a\\040b\\134c rw,noatime master:1 - ext3 /dev/root rw";
        let e = MountEntry::parse(line).unwrap();
        assert_eq!(e.mountpoint.as_os_str().as_bytes(), b"/mnt/a b\\c");
        // A backslash not starting an escape of a byte stays.
        assert_eq!(unescape(b"a\\9b\\"), b"a\\9b\\");
        assert_eq!(unescape(b"a\\777"), b"a\\777");
        // A name that is not UTF-8 neither hides its own line nor others.
        let mut text = b"50 22 0:60 / /tmp/\xff\xfe rw - tmpfs tmpfs rw\n".to_vec();
        text.extend_from_slice(TEXT.as_bytes());
        assert_eq!(entries(&text).count(), 5);
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xff\xfe"));
        assert_eq!(
            entry_in(&text, odd).map(|e| e.dev),
            Some(libc::makedev(0, 60))
        );
    }

    #[test]
    fn a_mount_has_the_device_stat_reports() {
        // `/proc`, not `/`: in a chroot the root need not be a mount.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            mount_entry(Path::new("/proc")).map(|e| e.dev),
            Some(std::fs::metadata("/proc").unwrap().dev())
        );
    }
}
