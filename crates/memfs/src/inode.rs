//! The memfs inode: metadata, and the data or entries of the file.
//!
//! Memfs inodes are not vnodes: a vnode is a cache entry that the vnode
//! layer may recycle at any time when unused, while the file must go on
//! existing. The inode table owns every linked inode; a vnode's private
//! data is one more `Arc` to it, which is what keeps an unlinked but open
//! file alive until its last user goes.
//!
//! # Lock reference
//!
//! | field | protected by |
//! |---|---|
//! | `ino`, `kind` | immutable |
//! | `meta` | its mutex (innermost: taken after any directory or data lock) |
//! | `Body::Dir` | the directory's rwlock (see `rename.rs` for the order) |
//! | `Body::File` | the vnode's range lock for atomicity, `FileData`'s own locks for memory safety |
//! | `Body::Symlink` | immutable |

use crate::dir::Directory;
use crate::ispace::{Ispace, INODE_COST};
use crate::pages::FileData;
use crate::xattr::Xattrs;
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use uvfs_vfs::{statx_attributes, Attr, Ino, Timespec, VType};
use uvfs_vfs::{FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL};

/// The inode flags memfs keeps (tmpfs's `SHMEM_FL_USER_MODIFIABLE`, less
/// casefolding; `iflags.rs` sets them).
pub(crate) const KEPT: u32 = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL;

/// The contents of an inode, by type.
#[derive(Debug)]
pub enum Body {
    /// A regular file's pages.
    File(FileData),
    /// A directory's entries.
    Dir(RwLock<Directory>),
    /// A symlink's target.
    Symlink(Box<[u8]>),
    /// Devices, FIFOs and sockets: no contents here.
    Special,
}

/// Mutable metadata, under `Inode::meta`.
#[derive(Debug)]
pub struct Meta {
    /// Permission bits (`0o7777`).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links; for a directory, 2 plus its subdirectories (0 once removed).
    pub nlink: u32,
    /// An `O_TMPFILE` file (nlink 0) that `link` may still name (made
    /// without `O_EXCL`: Linux's `I_LINKABLE`).
    pub linkable: bool,
    /// Device number.
    pub rdev: u64,
    /// Access time.
    pub atime: Timespec,
    /// Modification time.
    pub mtime: Timespec,
    /// Change time.
    pub ctime: Timespec,
    /// Creation time.
    pub btime: Timespec,
    /// Extended attributes.
    pub xattrs: Xattrs,
    /// Inode flags (`FS_*_FL`, `iflags.rs`).
    pub flags: u32,
}

impl Meta {
    /// Sets mtime and ctime to `now` (the contents changed).
    pub fn touch_modified(&mut self, now: Timespec) {
        self.mtime = now;
        self.ctime = now;
    }

    /// The contents were read (a file's data, a directory's listing, a
    /// symlink's target): `relatime`, Linux's default and tmpfs's. atime
    /// moves only if it is not after mtime or ctime, or is a day old, so
    /// "read since it last changed?" (mail readers, `find -amin`, tmp
    /// cleaners) is answered while a file read over and over costs no
    /// metadata write per read.
    pub fn touch_accessed(&mut self, now: Timespec) {
        if self.relatime_moves(now) {
            self.atime = now;
        }
    }

    /// Whether `relatime` moves atime at a read `now`.
    pub(crate) fn relatime_moves(&self, now: Timespec) -> bool {
        self.atime <= self.mtime
            || self.atime <= self.ctime
            || now.sec.saturating_sub(self.atime.sec) >= RELATIME_SECS
    }
}

/// How old an atime `relatime` lets stand (24 hours, as Linux).
const RELATIME_SECS: i64 = 24 * 60 * 60;

/// One file of a memfs.
#[derive(Debug)]
pub struct Inode {
    /// Inode number; never reused within a memfs.
    pub ino: Ino,
    /// File type; never changes.
    pub kind: VType,
    /// Metadata.
    pub meta: Mutex<Meta>,
    /// Contents.
    pub body: Body,
    /// The file system's inode budget: this inode's cost was taken from
    /// it before it was built, and goes back with what its attributes
    /// hold when it is freed (`ispace.rs`).
    ispace: Arc<Ispace>,
}

impl Drop for Inode {
    fn drop(&mut self) {
        let attrs = self.meta.get_mut().xattrs.space();
        self.ispace.give(INODE_COST + attrs);
        self.ispace.died();
    }
}

impl Inode {
    /// A new inode with the given metadata and body, whose `INODE_COST`
    /// (and the cost of any attributes in `meta`) the caller has taken
    /// from `ispace`.
    pub fn new(ino: Ino, kind: VType, meta: Meta, body: Body, ispace: Arc<Ispace>) -> Inode {
        ispace.born();
        Inode {
            ispace,
            ino,
            kind,
            meta: Mutex::new(meta),
            body,
        }
    }

    /// The directory contents, if this is a directory.
    pub fn dir(&self) -> Option<&RwLock<Directory>> {
        match &self.body {
            Body::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// The file data, if this is a regular file.
    pub fn file(&self) -> Option<&FileData> {
        match &self.body {
            Body::File(f) => Some(f),
            _ => None,
        }
    }

    /// Current link count.
    pub fn nlink(&self) -> u32 {
        self.meta.lock().nlink
    }

    /// The attributes `stat(2)` shows.
    pub fn attr(&self) -> Attr {
        let mut subdirs = None;
        let (size, blocks) = match &self.body {
            Body::File(f) => (f.size(), f.pages() * 8),
            // tmpfs reports a directory's size from its entry count.
            Body::Dir(d) => {
                let d = d.read();
                subdirs = Some(d.subdirs());
                ((d.len() as u64 + 2) * 20, 0)
            }
            // As tmpfs: a target of up to 127 bytes is kept in the inode,
            // a longer one in a page of its own.
            Body::Symlink(t) => (t.len() as u64, if t.len() < 128 { 0 } else { 8 }),
            Body::Special => (0, 0),
        };
        let m = self.meta.lock();
        // A live directory has `.`, its name, and each subdirectory's `..`;
        // derived from the entries rather than counted separately.
        let nlink = match subdirs {
            Some(n) if m.nlink > 0 => 2 + n,
            _ => m.nlink,
        };
        // As tmpfs: immutable, append-only and no-dump, set or not.
        let (attributes, attributes_mask) = statx_attributes(m.flags, KEPT);
        Attr {
            ino: self.ino,
            kind: self.kind,
            perm: m.perm,
            nlink,
            uid: m.uid,
            gid: m.gid,
            size,
            blocks,
            blksize: 4096,
            rdev: m.rdev,
            atime: m.atime,
            mtime: m.mtime,
            ctime: m.ctime,
            btime: Some(m.btime),
            attributes,
            attributes_mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(atime: i64, mtime: i64, ctime: i64) -> Meta {
        let t = |s| Timespec::new(s, 0);
        Meta {
            perm: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            linkable: false,
            rdev: 0,
            atime: t(atime),
            mtime: t(mtime),
            ctime: t(ctime),
            btime: t(0),
            xattrs: Xattrs::default(),
            flags: 0,
        }
    }

    #[test]
    fn relatime_rule() {
        let now = Timespec::new(1_000_000, 0);
        let moved = |mut m: Meta| {
            let before = m.atime;
            m.touch_accessed(now);
            m.atime != before
        };
        // Not after the last change: moves.
        assert!(moved(meta(500, 500, 400)));
        assert!(moved(meta(500, 400, 600)));
        // After both changes and fresh: stays.
        assert!(!moved(meta(999_000, 500, 500)));
        // After both changes but a day old: moves.
        assert!(moved(meta(1_000_000 - RELATIME_SECS, 500, 500)));
        assert!(!moved(meta(1_000_001 - RELATIME_SECS, 500, 500)));
    }
}
