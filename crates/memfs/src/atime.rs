//! When reading moves access times: the mount's atime flags, applied as
//! Linux applies them (`relatime` by default; `strictatime` wins over
//! `noatime`; `nodiratime` spares directories whatever the rest says).
//! The kernel leaves a FUSE file's atime to its server, so a memfs mounted
//! `noatime` keeps the atimes of what is read only if it knows; and the
//! kernel tells its server nothing of a remount, so the server reads the
//! new flags from the kernel and hands them over (`FileSystem::remounted`,
//! kept in an `AtimeCell`). A read the kernel serves from its page cache
//! never reaches memfs: an open whose reads would move the atime lets the
//! kernel drop the file's pages (`FileSystem::read_moves_atime`).

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
    /// `MS_NODIRATIME`, `MS_STRICTATIME`; `MS_RELATIME` is the default;
    /// `MS_RDONLY`: never, whatever the rest says).
    pub fn from_mount_flags(flags: libc::c_ulong) -> AtimeRule {
        let has = |f: libc::c_ulong| flags & f != 0;
        let files = if has(libc::MS_RDONLY) {
            Atime::Never
        } else if has(libc::MS_STRICTATIME) {
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

impl Atime {
    fn code(self) -> u8 {
        match self {
            Atime::Relative => 0,
            Atime::Strict => 1,
            Atime::Never => 2,
        }
    }

    fn from_code(c: u8) -> Atime {
        match c {
            1 => Atime::Strict,
            2 => Atime::Never,
            _ => Atime::Relative,
        }
    }
}

/// The mount's `AtimeRule`, changed by a remount while requests read it.
#[derive(Debug, Default)]
pub(crate) struct AtimeCell(std::sync::atomic::AtomicU8);

impl AtimeCell {
    pub(crate) fn new(rule: AtimeRule) -> AtimeCell {
        let c = AtimeCell::default();
        c.set(rule);
        c
    }

    pub(crate) fn get(&self) -> AtimeRule {
        let v = self.0.load(std::sync::atomic::Ordering::Relaxed);
        AtimeRule {
            files: Atime::from_code(v & 3),
            dirs: Atime::from_code(v >> 2),
        }
    }

    pub(crate) fn set(&self, rule: AtimeRule) {
        let v = rule.files.code() | rule.dirs.code() << 2;
        self.0.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Meta {
    /// Whether a read now would move atime as `rule` says.
    pub(crate) fn read_moves(&self, rule: Atime, now: Timespec) -> bool {
        match rule {
            Atime::Relative => self.relatime_moves(now),
            Atime::Strict => true,
            Atime::Never => false,
        }
    }

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
    /// `inode`'s rule under this one (files' or directories'), `Never`
    /// for an inode marked `FS_NOATIME_FL`.
    fn rule_of(&self, inode: &Inode, m: &Meta) -> Atime {
        if m.flags & uvfs_vfs::FS_NOATIME_FL != 0 {
            Atime::Never
        } else if inode.kind == VType::Dir {
            self.dirs
        } else {
            self.files
        }
    }

    /// Whether reading `inode`'s contents now would move its atime.
    pub(crate) fn would_touch(&self, inode: &Inode, now: Timespec) -> bool {
        let m = inode.meta.lock();
        m.read_moves(self.rule_of(inode, &m), now)
    }

    /// `inode`'s contents were read (a file's data, a directory's listing,
    /// a symlink's target): moves its atime as this rule says.
    pub(crate) fn touch(&self, inode: &Inode, now: Timespec) {
        let mut m = inode.meta.lock();
        let rule = self.rule_of(inode, &m);
        m.touch_accessed_by(rule, now);
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
        assert_eq!(rule(libc::MS_STRICTATIME | libc::MS_RDONLY), (Never, Never));
    }
}
