//! The uvfs mount's atime rule, applied to the source's files.
//!
//! The kernel moves no FUSE file's atime itself: the server's reads of
//! the source move the source file's, by the rule of the mount the
//! reading fd was opened on (the kernel's `touch_atime` looks at the open
//! file's mount, for a kernel I/O backing file too). Opened beneath the
//! source's own mount, the source mount's rule decides, whatever the uvfs
//! mount says: under `strictatime` over an ext4 mounted `relatime`, a
//! second read moved nothing (fstests' generic/003).
//!
//! # A private clone of the source's mount, only where the rules differ
//! Where the uvfs mount's rule (`FileSystem::remounted`: told once
//! mounted and after every `mount -o remount`) differs from the source
//! mount's, files and directories opened to be read or written (OPEN,
//! OPENDIR) are opened on a private clone of the source's mount instead:
//! `open_tree(OPEN_TREE_CLONE)` of the source root (detached: in no
//! namespace, seen by no one else), its atime attributes set to the uvfs
//! mount's with `mount_setattr`, and set again at each remount. Opened by
//! the node's file handle with the clone's fd as `open_by_handle_at`'s
//! mount fd, whose mount the open file gets; checked to be the node's
//! (dev, ino).
//!
//! Only those opens. Node fds (`O_PATH`: lookups, attributes, creation,
//! handles, the watcher) stay beneath the source's own mount, so the
//! server still reaches what it reached before: a mount made later inside
//! the source is seen (a recursive clone would hold a copy of the
//! submounts of its time and miss later ones), and the source's mount
//! stays busy while served (a clone alone would let `umount` of the
//! source succeed while the server keeps its file system in use). The
//! clone is not recursive: only handles of the source root's file system
//! are opened on it, so it needs none of the submounts.
//!
//! Not always: where the rules agree (the default: a uvfs mount's
//! `relatime` over a `relatime` source) the source's own mount already
//! applies the right rule, and nothing changes from a plain passthrough:
//! no clone, no extra statx per open.
//!
//! # What stays on the source's mount
//! - A node without a handle of the source root's file system (handles
//!   off, a FUSE source, a file on another file system mounted inside the
//!   source), or whose handle no longer opens (a removed file still
//!   open): opened on the source, under its own mount's rule.
//! - A symlink's `readlink`, done through its node fd.
//! - Files open before a remount: an fd keeps the mount it was opened on.
//!   One opened on the clone follows every later remount at once (the
//!   clone's attributes change under it); one opened on the source while
//!   the rules agreed keeps the source's rule until closed. A file served
//!   by kernel I/O keeps the backing file of its first open while any
//!   open of it lasts (the kernel holds one per inode).
//!
//! # Not root
//! `open_tree` and `mount_setattr` need `CAP_SYS_ADMIN`; a mount made by
//! `fusermount3` reads the source through the source's own mount, logged
//! once. `noatime` is then applied by opening with `O_NOATIME`
//! ([`Atime::read_flags`]), and such a file gets no kernel I/O (the
//! kernel opens its backing file with the caller's flags, without
//! `O_NOATIME`: `FileSystem::backing_file` refuses it); with a clone set
//! `noatime`, no flag is needed and kernel I/O stays on. A remount
//! changes which files get the flag from then on.
//!
//! # Read-only
//! A read-only mount moves no atime (a read-only server is told
//! `MS_RDONLY` whatever its kernel mount says): its files are opened on
//! the source's mount with `O_NOATIME`, not on a clone, so
//! they get no kernel I/O (the server reads every byte it serves; a clone
//! set read-only as well as `noatime` could let the kernel read them).
//! A read-only source mount moves no atime: no clone is made for it.

use crate::fdpool::{Fd, FdPool};
use crate::sys;
use parking_lot::RwLock;
use rustix::fs::StatVfsMountFlags;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;

/// When a read moves a file's atime.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Files {
    /// When it is not after the last change, or a day old (`relatime`).
    Relatime,
    /// Always (`strictatime`).
    Strict,
    /// Never (`noatime`, or read-only).
    Never,
}

/// A mount's atime rule: for files, and whether directories are exempt.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Rule {
    pub files: Files,
    /// Listing a directory moves no atime (`nodiratime`, or `Never`).
    pub dirs_never: bool,
}

impl Rule {
    fn new(files: Files, nodiratime: bool) -> Rule {
        Rule {
            files,
            dirs_never: nodiratime || files == Files::Never,
        }
    }

    /// The rule of mount(2) flags as `FileSystem::remounted` gives them.
    pub(crate) fn of_mount_flags(flags: u64) -> Rule {
        let files = if flags & (libc::MS_RDONLY | libc::MS_NOATIME) != 0 {
            Files::Never
        } else if flags & libc::MS_STRICTATIME != 0 {
            Files::Strict
        } else {
            // No atime flag means relatime to mount(2).
            Files::Relatime
        };
        Rule::new(files, flags & libc::MS_NODIRATIME != 0)
    }

    /// The rule of a mount by its `statfs` flags (`ST_*`); a read-only
    /// mount moves no atime.
    fn of_statfs_flags(f: StatVfsMountFlags) -> Rule {
        let files = if f.intersects(StatVfsMountFlags::RDONLY | StatVfsMountFlags::NOATIME) {
            Files::Never
        } else if f.contains(StatVfsMountFlags::RELATIME) {
            Files::Relatime
        } else {
            Files::Strict
        };
        Rule::new(files, f.contains(StatVfsMountFlags::NODIRATIME))
    }

    /// `mount_setattr`'s (set, clear) for this rule: every atime
    /// attribute cleared, this rule's set (`relatime` is no bit).
    fn attrs(self) -> (u64, u64) {
        let files = match self.files {
            Files::Relatime => libc::MOUNT_ATTR_RELATIME,
            Files::Strict => libc::MOUNT_ATTR_STRICTATIME,
            Files::Never => libc::MOUNT_ATTR_NOATIME,
        };
        let dirs = if self.dirs_never {
            libc::MOUNT_ATTR_NODIRATIME
        } else {
            0
        };
        (
            files | dirs,
            libc::MOUNT_ATTR__ATIME | libc::MOUNT_ATTR_NODIRATIME,
        )
    }
}

/// The clone: the tree `open_tree` made (what `mount_setattr` changes;
/// closing it would dissolve the clone) and a directory opened on it
/// (`open_by_handle_at`'s mount fd, which takes no `O_PATH` fd).
pub(crate) struct Clone {
    tree: Fd,
    dir: Fd,
}

impl Clone {
    /// An fd on the clone's mount, for `open_by_handle_at`.
    pub(crate) fn mount_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }
}

/// What a remount changes.
struct State {
    /// The uvfs mount's rule now (`None`: not told yet: as configured).
    rule: Option<Rule>,
    /// The clone, once one was needed; kept to the end, so that fds
    /// opened on it follow later remounts.
    clone: Option<Arc<Clone>>,
    /// Opens go through `clone` (the rules differ now).
    active: bool,
    /// No clone can be made (logged once).
    refused: bool,
}

/// The uvfs mount's atime rule and the clone that applies it.
pub(crate) struct Atime {
    /// The source mount's rule (its root's mount, when served); `None`
    /// where the source's atimes cannot move (a read-only mount) or its
    /// rule is unknown: no clone then.
    source: Option<Rule>,
    /// `O_NOATIME` for files and directories before the first
    /// `remounted` (the configuration's `no_atime`, `no_diratime`).
    configured: (bool, bool),
    state: RwLock<State>,
}

impl Atime {
    /// The rule keeper for a source whose root is `root`.
    pub(crate) fn new(root: BorrowedFd<'_>, no_atime: bool, no_diratime: bool) -> Atime {
        let source = rustix::fs::fstatvfs(root)
            .ok()
            .filter(|s| !s.f_flag.contains(StatVfsMountFlags::RDONLY))
            .map(|s| Rule::of_statfs_flags(s.f_flag));
        Atime {
            source,
            configured: (no_atime, no_atime || no_diratime),
            state: RwLock::new(State {
                rule: None,
                clone: None,
                active: false,
                refused: false,
            }),
        }
    }

    /// `FileSystem::remounted`: the uvfs mount's `flags` now. Makes the
    /// clone of the mount of `root` if the rules now differ and there is
    /// none, and sets the clone's attributes to the rule.
    pub(crate) fn remounted(&self, flags: u64, root: BorrowedFd<'_>, pool: &Arc<FdPool>) {
        let rule = Rule::of_mount_flags(flags);
        // Read-only: O_NOATIME on the source's mount, never a clone (its
        // files get no kernel I/O: the module's docs).
        let differs = flags & libc::MS_RDONLY == 0 && self.source.is_some_and(|s| s != rule);
        let mut st = self.state.write();
        st.rule = Some(rule);
        if differs && st.clone.is_none() && !st.refused {
            match make_clone(root, pool) {
                Ok(c) => st.clone = Some(Arc::new(c)),
                Err(e) => {
                    st.refused = true;
                    log::warn!(
                        "atime: the source is read through its own mount ({e}: a private \
                         clone of it needs CAP_SYS_ADMIN), whose atime rule ({:?}) applies \
                         where this mount's ({rule:?}) differs{}",
                        self.source.map(|s| s.files),
                        if rule.files == Files::Never {
                            "; noatime by O_NOATIME, without kernel I/O"
                        } else {
                            ""
                        }
                    );
                }
            }
        }
        st.active = false;
        if let Some(c) = &st.clone {
            // Set even when the rules agree again: fds opened on the
            // clone follow the rule.
            match set_attrs(c.tree.as_fd(), rule) {
                Ok(()) => st.active = differs,
                Err(e) => log::warn!(
                    "atime: setting {rule:?} on the clone of the source's mount failed \
                     ({e}): files are opened on the source's own mount"
                ),
            }
        }
    }

    /// The clone to open files on, if the rules differ and it serves.
    pub(crate) fn clone_to_open(&self) -> Option<Arc<Clone>> {
        let st = self.state.read();
        st.active.then(|| st.clone.clone()).flatten()
    }

    /// `O_NOATIME` if opens of a file (or a directory: `dir`) on the
    /// source's mount must carry it: reads must move no atime and no clone
    /// applies the rule (an open on the clone needs none).
    pub(crate) fn read_flags(&self, dir: bool) -> libc::c_int {
        if self.state.read().active {
            0
        } else {
            self.noatime_flag(dir)
        }
    }

    /// `O_NOATIME` if reads must move no atime of a file (or directory),
    /// for an open on the source's mount, clone or not.
    pub(crate) fn noatime_flag(&self, dir: bool) -> libc::c_int {
        let never = match self.state.read().rule {
            None if dir => self.configured.1,
            None => self.configured.0,
            Some(r) if dir => r.dirs_never,
            Some(r) => r.files == Files::Never,
        };
        if never {
            libc::O_NOATIME
        } else {
            0
        }
    }

    /// Whether a read of a file with attributes `st` now moves its atime
    /// (`FileSystem::read_moves_atime`): by the uvfs mount's rule where
    /// the clone applies it, else by the source mount's (or never, under
    /// `O_NOATIME`), whose rule the server's reads then follow.
    pub(crate) fn read_moves(&self, st: &sys::Statx) -> bool {
        let rule = {
            let s = self.state.read();
            match s.rule {
                // Not told the mount's flags: as a plain passthrough.
                None => return false,
                Some(r) if s.active => Some(r),
                Some(_) => self.source,
            }
        };
        match rule.map(|r| r.files) {
            _ if self.read_flags(false) != 0 => false,
            Some(Files::Strict) => true,
            Some(Files::Relatime) => {
                let t = |ts: &rustix::fs::StatxTimestamp| (ts.tv_sec, ts.tv_nsec);
                let a = t(&st.stx_atime);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                a <= t(&st.stx_mtime) || a <= t(&st.stx_ctime) || now - a.0 >= 24 * 3600
            }
            _ => false,
        }
    }
}

/// A private clone of the mount `root` is on, rooted at `root`, with two
/// slots of the fd budget.
fn make_clone(root: BorrowedFd<'_>, pool: &Arc<FdPool>) -> std::io::Result<Clone> {
    use rustix::mount::{open_tree, OpenTreeFlags};
    let io = |e: uvfs_vfs::Errno| std::io::Error::from_raw_os_error(e.raw());
    let (r1, r2) = (pool.reserve().map_err(io)?, pool.reserve().map_err(io)?);
    let tree = open_tree(
        root,
        c"",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )?;
    let dir = sys::openat(tree.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY).map_err(io)?;
    Ok(Clone {
        tree: r1.into_fd(tree),
        dir: r2.into_fd(dir),
    })
}

/// `mount_setattr` of the mount `tree` is (a detached clone's root) to
/// `rule`'s atime attributes.
fn set_attrs(tree: BorrowedFd<'_>, rule: Rule) -> std::io::Result<()> {
    let (set, clr) = rule.attrs();
    let mut attr = libc::mount_attr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `attr` is a valid `struct mount_attr` of the size passed,
    // which the kernel only reads; the path is a NUL-terminated empty
    // string and `tree` a valid fd for the call's length.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &mut attr as *mut libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_of_mount_and_statfs_flags() {
        let m = Rule::of_mount_flags;
        assert_eq!(m(libc::MS_RELATIME), Rule::new(Files::Relatime, false));
        assert_eq!(m(0), Rule::new(Files::Relatime, false));
        assert_eq!(m(libc::MS_STRICTATIME), Rule::new(Files::Strict, false));
        assert_eq!(
            m(libc::MS_STRICTATIME | libc::MS_NODIRATIME),
            Rule::new(Files::Strict, true)
        );
        // Read-only or noatime: never, directories included.
        let never = Rule::new(Files::Never, false);
        assert!(never.dirs_never);
        assert_eq!(m(libc::MS_RDONLY | libc::MS_STRICTATIME), never);
        assert_eq!(m(libc::MS_NOATIME), never);
        let s = Rule::of_statfs_flags;
        assert_eq!(s(StatVfsMountFlags::RELATIME), m(libc::MS_RELATIME));
        assert_eq!(s(StatVfsMountFlags::empty()), m(libc::MS_STRICTATIME));
        assert_eq!(
            s(StatVfsMountFlags::RDONLY | StatVfsMountFlags::RELATIME),
            never
        );
    }

    #[test]
    fn attributes_clear_every_atime_bit_and_set_the_rule() {
        let (set, clr) = Rule::new(Files::Relatime, false).attrs();
        assert_eq!(set, 0);
        assert_eq!(clr & libc::MOUNT_ATTR__ATIME, libc::MOUNT_ATTR__ATIME);
        assert_ne!(clr & libc::MOUNT_ATTR_NODIRATIME, 0);
        let (set, _) = Rule::new(Files::Strict, true).attrs();
        assert_eq!(
            set,
            libc::MOUNT_ATTR_STRICTATIME | libc::MOUNT_ATTR_NODIRATIME
        );
        let (set, _) = Rule::new(Files::Never, false).attrs();
        assert_eq!(set, libc::MOUNT_ATTR_NOATIME | libc::MOUNT_ATTR_NODIRATIME);
    }
}
