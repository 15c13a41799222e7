//! When reading moves access times: the mount's atime flags, applied as
//! Linux applies them (`relatime` by default; `strictatime` wins over
//! `noatime`; `nodiratime` spares directories whatever the rest says).
//! The kernel leaves a FUSE file's atime to its server, so a memfs mounted
//! `noatime` keeps the atimes of what is read only if it knows.

use crate::inode::{Inode, Meta};
use uvfs_vfs::{Timespec, VType};

/// When a read moves an atime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atime {
    /// `relatime`: when it is not after the last change, or a day old.
    #[default]
    Relative,
    /// `strictatime`: at every read.
    Strict,
    /// `noatime`: never.
    Never,
}

/// The rule for files (and symlinks) and the rule for directories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtimeRule {
    /// Regular files, symlinks and the rest.
    pub files: Atime,
    /// Directories (their listings).
    pub dirs: Atime,
}

impl AtimeRule {
    /// The rule of a mount made with mount(2) `flags` (`MS_NOATIME`,
    /// `MS_NODIRATIME`, `MS_STRICTATIME`; `MS_RELATIME` is the default).
    pub fn from_mount_flags(flags: libc::c_ulong) -> AtimeRule {
        let has = |f: libc::c_ulong| flags & f != 0;
        let files = if has(libc::MS_STRICTATIME) {
            Atime::Strict
        } else if has(libc::MS_NOATIME) {
            Atime::Never
        } else {
            Atime::Relative
        };
        let dirs = if has(libc::MS_NODIRATIME) {
            Atime::Never
        } else {
            files
        };
        AtimeRule { files, dirs }
    }
}

impl Meta {
    /// The contents were read: moves atime as `rule` says.
    pub fn touch_accessed_by(&mut self, rule: Atime, now: Timespec) {
        match rule {
            Atime::Relative => self.touch_accessed(now),
            Atime::Strict => self.atime = now,
            Atime::Never => {}
        }
    }
}

impl AtimeRule {
    /// `inode`'s contents were read (a file's data, a directory's listing,
    /// a symlink's target): moves its atime as this rule says.
    pub(crate) fn touch(&self, inode: &Inode, now: Timespec) {
        let rule = if inode.kind == VType::Dir {
            self.dirs
        } else {
            self.files
        };
        if rule != Atime::Never {
            let mut m = inode.meta.lock();
            if m.flags & uvfs_vfs::FS_NOATIME_FL == 0 {
                m.touch_accessed_by(rule, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_flags_as_linux_reads_them() {
        let rule = |f: libc::c_ulong| {
            let r = AtimeRule::from_mount_flags(f);
            (r.files, r.dirs)
        };
        use Atime::*;
        assert_eq!(rule(0), (Relative, Relative));
        assert_eq!(rule(libc::MS_RELATIME), (Relative, Relative));
        assert_eq!(rule(libc::MS_NOATIME), (Never, Never));
        assert_eq!(rule(libc::MS_NODIRATIME), (Relative, Never));
        assert_eq!(rule(libc::MS_STRICTATIME), (Strict, Strict));
        assert_eq!(
            rule(libc::MS_STRICTATIME | libc::MS_NOATIME),
            (Strict, Strict)
        );
        assert_eq!(
            rule(libc::MS_STRICTATIME | libc::MS_NODIRATIME),
            (Strict, Never)
        );
    }
}
