//! The encoding of a memfs's state for its successor (`handover.rs`):
//! `FORMAT`'s types, in bincode.
//!
//! Anything whose meaning changes (a field added, removed or read
//! differently) needs a new `FORMAT`, so that another version refuses
//! the state instead of misreading it.

use bincode::Options;
use serde::{Deserialize, Serialize};
use uvfs_vfs::{Errno, Timespec, VType, VfsResult};

/// The format this module writes when some file has preallocated pages
/// that were never written (`SavedBody::FileReserved`): format 1 plus that
/// variant, which a reader of format 1 cannot take.
pub const FORMAT: &str = "uvfs-memfs/2";

/// The format of a state with no such file: the same bytes as format 2
/// without the variant, so that an older build can still take over from
/// this one in the common case. Both are read.
pub const FORMAT_V1: &str = "uvfs-memfs/1";

/// Format 2's bytes, in a state that passes on page files the sender's
/// own files are still using (`pagefile.rs`, "Passed on, not copied
/// again"): only a reader that gives no page back before it takes the
/// mount over may take it (an older build's would free pages of a
/// predecessor that serves on after a failed upgrade), so older builds
/// must refuse it. Written only when some page file is passed on so.
pub const FORMAT_SHARED: &str = "uvfs-memfs/3";

/// A whole memfs.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct State {
    /// The inode number allocator's next number.
    pub next_ino: u64,
    /// Every inode with a name, the root first.
    pub linked: Vec<SavedInode>,
    /// Nameless inodes the kernel still knows (unlinked while open,
    /// `O_TMPFILE`).
    pub kept: Vec<SavedInode>,
    /// The page files (`pagefile.rs`), one per `Saved::fds` entry, by
    /// their length in pages.
    pub pages: Vec<u64>,
}

/// One inode.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SavedInode {
    pub ino: u64,
    /// `VType as u8`.
    pub kind: u8,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub linkable: bool,
    pub rdev: u64,
    /// atime, mtime, ctime, btime.
    pub times: [SavedTime; 4],
    /// Inode flags (`iflags.rs`).
    pub flags: u32,
    /// Extended attributes (ACLs among them), by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: SavedBody,
}

/// A time: seconds and nanoseconds.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
pub(crate) struct SavedTime(pub i64, pub u32);

impl From<Timespec> for SavedTime {
    fn from(t: Timespec) -> SavedTime {
        SavedTime(t.sec, t.nsec)
    }
}

impl SavedTime {
    /// The time, `EPROTO` if its nanoseconds are not below a second.
    pub fn timespec(self) -> VfsResult<Timespec> {
        if self.1 >= 1_000_000_000 {
            return Err(Errno::EPROTO);
        }
        Ok(Timespec::new(self.0, self.1))
    }
}

/// An inode's contents.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) enum SavedBody {
    /// A regular file: its size and its allocated pages, as runs of
    /// consecutive indices `(first index, count)` in ascending order,
    /// whose contents follow one another in page file `file` from page
    /// `at`.
    File {
        size: u64,
        runs: Vec<(u64, u64)>,
        file: u32,
        at: u64,
    },
    /// A directory (`dir.rs`): entries with their cookies, so offsets
    /// given out before stay valid.
    Dir {
        parent: u64,
        removed: bool,
        next_cookie: u64,
        entries: Vec<SavedEntry>,
    },
    /// A symlink's target.
    Symlink(Vec<u8>),
    /// Devices, FIFOs, sockets.
    Special,
    /// A regular file some of whose pages `fallocate` added and nothing
    /// wrote (holes to `SEEK_DATA`, as tmpfs's): as `File`, plus those
    /// pages as runs `(first index, count)`, each among `runs`. Last, so
    /// the other variants encode as in format 1.
    FileReserved {
        size: u64,
        runs: Vec<(u64, u64)>,
        file: u32,
        at: u64,
        reserved: Vec<(u64, u64)>,
    },
}

/// One directory entry.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SavedEntry {
    pub cookie: u64,
    pub name: Vec<u8>,
    pub ino: u64,
}

/// `VType` from its number; `EPROTO` for `Non` or no type.
pub(crate) fn vtype(v: u8) -> VfsResult<VType> {
    match VType::from_u8(v) {
        VType::Non => Err(Errno::EPROTO),
        t => Ok(t),
    }
}

/// The encoder: bincode's compact integers, every length checked against
/// what is left of the input when decoding, no bytes left over.
fn options(limit: u64) -> impl Options {
    bincode::DefaultOptions::new().with_limit(limit)
}

/// `state` encoded.
pub(crate) fn encode(state: &State) -> VfsResult<Vec<u8>> {
    options(u64::MAX)
        .serialize(state)
        .map_err(|_| Errno::EOVERFLOW)
}

/// The state in `bytes`; `EPROTO` if they are not one.
pub(crate) fn decode(bytes: &[u8]) -> VfsResult<State> {
    options(bytes.len() as u64)
        .deserialize(bytes)
        .map_err(|_| Errno::EPROTO)
}
