//! A passthrough vnode's private data: which backing file it is, how to
//! reach it again, and the fd it may be caching.
//!
//! # Identity without an fd
//! A node is the backing (dev, ino) it was created for, plus a way back
//! to it: a file handle when its file system has them ([`Ident::handle`]),
//! otherwise its parent node and its name in that parent (the fallback,
//! kept up to date by `rename`). The fd is a cache that the pool may take
//! whenever no operation is using it; the next operation reopens it
//! through the handle or the parent, and checks that what it opened is
//! still (dev, ino) (`ESTALE` otherwise: the file was removed or
//! replaced behind the server's back).
//!
//! # Lock reference
//!
//! | field | protected by |
//! |---|---|
//! | `id`, `dev`, `ino` | immutable |
//! | `state` (the way back and the cached fd) | its mutex (a leaf); the pool's evictor only `try_lock`s it, under the ring lock |
//! | `bits` | one atomic word of fields, each changed by its own read-modify-writes (below) |
//!
//! The fields in `bits`:
//!
//! | field | rule |
//! |---|---|
//! | kind | written with `state` locked |
//! | `PINNED` | immutable |
//! | `REFERENCED` | set on every use, cleared by the evictor |
//! | `ON_RING` | changed only under the `state` mutex (see `install`/`try_evict`) |
//! | open count | open files and directories on the node |
//! | `ORPHAN` | set before the mount removes a directory or special file's last name |
//! | `UNLINKED` | set when the file lost its last name while open, cleared by the last release |
//! | `REMOVED` | set once the mount removed the file's last name (open or not), cleared only when the node is rebound to another file |
//! | `REPLACED` | with `REMOVED`, when the removal was a rename of another file over the name (which still leads to a file) |

use crate::fdpool::{Evict, Fd, FdHolder};
use crate::handle::Handle;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use uvfs_vfs::{Ino, VType};

/// How to reach a node's file again, and what it is. Replaced as a whole
/// when a lookup finds a different file behind the same (dev, ino).
#[derive(Clone, Debug)]
pub struct Ident {
    /// File type.
    pub kind: VType,
    /// The way back to the file.
    pub way: Way,
}

/// How a node's file is reopened once the pool took its fd.
#[derive(Clone, Debug)]
pub enum Way {
    /// Only the cached fd leads to the file (the pinned root of a source
    /// without usable handles) until a lookup finds it under a name.
    FdOnly,
    /// A persistent handle of the source's mount.
    Handle(Handle),
    /// Fallback without a handle: the parent directory's node and the
    /// name in it. Boxed, so that nodes with handles do not carry its
    /// width.
    Path(Box<(Arc<Node>, Box<[u8]>)>),
}

// The way back is most of a node's identity (`Node`'s size check).
const _: () = assert!(std::mem::size_of::<Way>() <= 16);

impl Ident {
    /// The persistent handle, if the file is reached by one.
    pub fn handle(&self) -> Option<&Handle> {
        match &self.way {
            Way::Handle(h) => Some(h),
            _ => None,
        }
    }

    /// The FUSE generation: the handle's (0 without one). Computed, not
    /// kept: a few bytes hashed per lookup reply cost less than 8 bytes
    /// in every cached node.
    pub fn gen(&self) -> u64 {
        self.handle().map_or(0, Handle::generation)
    }
}

/// Per-vnode data of a passthrough mount.
///
/// One per cached file, so its size is most of what a cached file costs
/// the server beyond its vnode: the handle is kept in place, the
/// identity and the fd share one lock, the flags, the type and the open
/// count share one word, and nothing here allocates for a file reached
/// by a handle of up to 12 bytes.
pub struct Node {
    /// Node id (the vnode's inode number).
    pub id: Ino,
    /// Backing inode number.
    pub ino: u64,
    btime: AtomicU64,
    /// Backing device, as the kernel's 32-bit `dev_t` ([`Node::dev`]).
    dev: u32,
    /// The type, the flags and the open count (`KIND_MASK` and below).
    bits: AtomicU32,
    state: Mutex<State>,
}

/// The file type (`VType as u8`).
const KIND_MASK: u32 = 0xf;
/// Never give the fd back (the root: no handle or parent to reopen by).
const PINNED: u32 = 1 << 4;
const REFERENCED: u32 = 1 << 5;
const ON_RING: u32 = 1 << 6;
const UNLINKED: u32 = 1 << 7;
const ORPHAN: u32 = 1 << 8;
const REMOVED: u32 = 1 << 9;
const REPLACED: u32 = 1 << 10;
/// The open count, in the bits above the flags: up to 2,097,151 open
/// files on one node. Each holds an fd of the server's, so a server
/// reaches that only past 2 million open fds (the kernel's default
/// `nr_open` is 1,048,576); past it, opens are refused (`Node::opened`).
const OPENS_SHIFT: u32 = 11;
const OPEN_ONE: u32 = 1 << OPENS_SHIFT;
const OPENS_MAX: u32 = u32::MAX >> OPENS_SHIFT;

// Every type fits the kind bits (`VType::from_u8` reads them back).
const _: () = assert!(VType::Sock as u32 <= KIND_MASK);

fn opens_of(bits: u32) -> u32 {
    bits >> OPENS_SHIFT
}

/// What the node's lock protects: the way back and the cached fd.
struct State {
    way: Way,
    fd: Option<Arc<Fd>>,
}

// 64 bytes make an 80-byte `Arc` allocation, one of the allocator's size
// classes; a field that pushes the node past it costs every cached file
// the next class (96 bytes).
const _: () = assert!(std::mem::size_of::<Node>() <= 64);

/// A device number as the kernel keeps it (`dev_t`: 12 bits of major,
/// 20 of minor), so that it fits 32 bits.
fn dev_to_kernel(dev: u64) -> u32 {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    debug_assert!(major < 1 << 12 && minor < 1 << 20, "dev {dev:#x}");
    (major << 20) | (minor & 0xf_ffff)
}

impl Node {
    /// A node for backing (dev, ino).
    pub fn new(id: Ino, dev: u64, ino: u64, ident: Ident, pinned: bool) -> Node {
        let pinned = if pinned { PINNED } else { 0 };
        Node {
            id,
            dev: dev_to_kernel(dev),
            ino,
            btime: AtomicU64::new(0),
            bits: AtomicU32::new(ident.kind as u32 | pinned | REFERENCED),
            state: Mutex::new(State {
                way: ident.way,
                fd: None,
            }),
        }
    }

    /// Whether the node never gives its fd back (the root: no handle or
    /// parent to reopen by).
    pub fn pinned(&self) -> bool {
        self.bits.load(Ordering::Relaxed) & PINNED != 0
    }

    fn has(&self, flag: u32, order: Ordering) -> bool {
        self.bits.load(order) & flag != 0
    }

    /// Marks the node used (the evictor's second chance), writing only
    /// when the mark is not there already.
    fn mark_referenced(&self) {
        if !self.has(REFERENCED, Ordering::Relaxed) {
            self.bits.fetch_or(REFERENCED, Ordering::Relaxed);
        }
    }

    /// A snapshot of the identity.
    pub fn ident(&self) -> Ident {
        let st = self.state.lock();
        Ident {
            kind: self.kind(),
            way: st.way.clone(),
        }
    }

    /// The backing device.
    pub fn dev(&self) -> u64 {
        libc::makedev(self.dev >> 20, self.dev & 0xf_ffff)
    }

    /// The file type now.
    pub fn kind(&self) -> VType {
        VType::from_u8((self.bits.load(Ordering::Acquire) & KIND_MASK) as u8)
    }

    /// The FUSE generation now.
    pub fn generation(&self) -> u64 {
        match &self.state.lock().way {
            Way::Handle(h) => h.generation(),
            _ => 0,
        }
    }

    /// Whether a lookup that found `found` found this node's file: same
    /// type and, where both have one, same handle.
    pub fn same_file(&self, found: &Ident) -> bool {
        let st = self.state.lock();
        self.kind() == found.kind
            && match (&st.way, found.handle()) {
                (Way::Handle(a), Some(b)) => a == b,
                _ => true,
            }
    }

    /// The file's birth time as [`birth_key`] packs it (0: unknown).
    /// With (dev, ino) and the type it tells a lookup that the name still
    /// leads to this node's file without taking its handle: a file that
    /// reuses the inode number was born later.
    pub fn btime(&self) -> u64 {
        self.btime.load(Ordering::Relaxed)
    }

    /// Records the birth time a lookup of the node's file found.
    pub fn set_btime(&self, key: u64) {
        self.btime.store(key, Ordering::Relaxed);
    }

    /// Replaces the identity (a lookup found a different file behind this
    /// (dev, ino), or a rename moved a fallback node). Drops the cached fd
    /// if the file changed, since it refers to the old one.
    pub fn set_ident(&self, ident: Ident, file_changed: bool) {
        let old = {
            let mut st = self.state.lock();
            st.way = ident.way;
            let kind = ident.kind as u32;
            let _ = self
                .bits
                .fetch_update(Ordering::Release, Ordering::Relaxed, |b| {
                    Some(b & !KIND_MASK | kind)
                });
            if file_changed {
                st.fd.take()
            } else {
                None
            }
        };
        drop(old);
        if file_changed {
            // Another file now: the old one's removal says nothing of it.
            self.bits.fetch_and(!(REMOVED | REPLACED), Ordering::SeqCst);
        }
    }

    /// Updates the fallback location after a lookup or rename found the
    /// node at `parent`/`name` (no-op for nodes with handles).
    pub fn set_location(&self, parent: &Arc<Node>, name: &[u8]) {
        let mut st = self.state.lock();
        if std::ptr::eq(&**parent, self) {
            return;
        }
        match &mut st.way {
            Way::Handle(_) => {}
            Way::Path(at) if Arc::ptr_eq(&at.0, parent) && *at.1 == *name => {}
            way => *way = Way::Path(Box::new((parent.clone(), name.into()))),
        }
    }

    /// The cached fd, marking the node used.
    #[inline]
    pub fn cached_fd(&self) -> Option<Arc<Fd>> {
        let g = self.state.lock();
        let fd = g.fd.as_ref()?.clone();
        self.mark_referenced();
        Some(fd)
    }

    /// Caches `fd` unless another thread cached one first; returns the fd
    /// to use and whether the node must be entered on the pool's ring.
    pub(crate) fn install(&self, fd: Arc<Fd>) -> (Arc<Fd>, bool) {
        let mut g = self.state.lock();
        if let Some(cur) = g.fd.as_ref() {
            return (cur.clone(), false);
        }
        g.fd = Some(fd.clone());
        self.mark_referenced();
        let enter = !self.pinned() && self.bits.fetch_or(ON_RING, Ordering::Relaxed) & ON_RING == 0;
        (fd, enter)
    }

    /// Drops the cached fd (vnode reclaim). The pinned root keeps its.
    pub fn drop_fd(&self) {
        if self.pinned() {
            return;
        }
        let old = self.state.lock().fd.take();
        drop(old);
    }

    /// The file lost its last name through the mount: give its cached fd
    /// back now. An `O_PATH` fd pins the inode like any open file, so the
    /// backing file system would keep the deleted file's blocks for as long
    /// as the vnode stays cached (for ever, on a long-lived mount with room
    /// in its limits). Open files keep their own fds, which is what POSIX
    /// asks; requests on them (an `fstat`) may cache an fd again, so the
    /// last release drops it once more. A fallback node with open files
    /// keeps its fd until then: it has no other way back to a nameless file.
    /// Returns whether a cached fd was given back now.
    pub fn uncache_unlinked(&self) -> bool {
        if self.pinned() {
            return false;
        }
        if opens_of(self.bits.load(Ordering::SeqCst)) > 0 {
            // The count as of setting the flag: the flag and the count
            // are one word, so either the last release comes after this
            // and sees the flag (and gives the fd back), or it came before
            // and the count read here is 0 and the fd goes now.
            let before = self.bits.fetch_or(UNLINKED, Ordering::SeqCst);
            if opens_of(before) > 0 && !matches!(self.state.lock().way, Way::Handle(_)) {
                return false;
            }
        }
        let old = self.state.lock().fd.take();
        old.is_some()
    }

    /// Keeps (or stops keeping) the cached fd from the evictor until the
    /// vnode is reclaimed: set just before the mount removes the last name
    /// of a directory, FIFO, socket, device or symlink. The kernel opens
    /// those without telling a server that asked for no OPENDIR (FIFOs and
    /// devices always), so a process may hold one open; its `fstat`,
    /// `fchmod` or `getdents` still reach us, and with the name gone no
    /// handle or parent leads back to the inode: only an fd held across the
    /// removal does (ESTALE otherwise, where ext4 answers). The kernel's
    /// FORGET, once its last user is gone, recycles the vnode and closes it.
    pub fn set_orphan(&self, orphan: bool) {
        if orphan {
            self.bits.fetch_or(ORPHAN, Ordering::Relaxed);
        } else {
            self.bits.fetch_and(!ORPHAN, Ordering::Relaxed);
        }
    }

    /// Whether the mount removed this non-regular file's last name.
    pub fn is_orphan(&self) -> bool {
        self.has(ORPHAN, Ordering::Relaxed)
    }

    /// Whether the mount itself left the file nameless: removed its last
    /// name (while it was open or not), or made it with `O_TMPFILE` (a
    /// nameless file is then expected, not a sign of a removal behind our
    /// back).
    pub fn nameless_by_mount(&self) -> bool {
        self.has(ORPHAN | UNLINKED | REMOVED, Ordering::SeqCst)
    }

    /// The mount removed the file's last name: an unlink, or (`replaced`)
    /// a rename of another file over it.
    pub fn mark_removed(&self, replaced: bool) {
        let bits = if replaced {
            REMOVED | REPLACED
        } else {
            REMOVED
        };
        self.bits.fetch_or(bits, Ordering::SeqCst);
    }

    /// Whether the mount removed the file's last name by renaming another
    /// file over it: the name the kernel resolved still leads to a file.
    pub fn replaced_by_mount(&self) -> bool {
        self.has(REPLACED, Ordering::SeqCst)
    }

    /// Reads the node's lock word without taking it, to bring it into
    /// the cache: a save visits a million nodes, and taking each lock
    /// cold (a locked instruction waiting for its cache miss, with later
    /// loads waiting behind it) costs several times more than touching
    /// a batch first, whose misses overlap.
    pub(crate) fn touch(&self) -> bool {
        self.state.is_locked() | self.has(REFERENCED, Ordering::Relaxed)
    }

    /// Whether an fd is cached now.
    pub fn has_fd(&self) -> bool {
        self.state.lock().fd.is_some()
    }

    /// Counts an open file or directory on the node; `false` (nothing
    /// counted) if the node has as many as its count holds.
    #[must_use]
    pub fn opened(&self) -> bool {
        self.bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (opens_of(b) < OPENS_MAX).then(|| b + OPEN_ONE)
            })
            .is_ok()
    }

    /// An open file or directory of the node was released.
    pub fn closed(&self) {
        // Never below zero, even if release were called twice. The last
        // release takes the unlinked flag in the same step.
        let before =
            self.bits
                .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |b| match opens_of(b) {
                    0 => None,
                    1 => Some((b - OPEN_ONE) & !UNLINKED),
                    _ => Some(b - OPEN_ONE),
                });
        if let Ok(b) = before {
            if opens_of(b) == 1 && b & UNLINKED != 0 {
                let _ = self.uncache_unlinked();
            }
        }
    }

    /// Open files and directories on the node now.
    pub fn open_count(&self) -> usize {
        opens_of(self.bits.load(Ordering::Relaxed)) as usize
    }
}

/// A statx's birth time as one number (nanoseconds since the epoch), or 0
/// where the file system does not report it.
pub fn birth_key(st: &crate::sys::Statx) -> u64 {
    if st.stx_mask & libc::STATX_BTIME == 0 {
        return 0;
    }
    (st.stx_btime.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(u64::from(st.stx_btime.tv_nsec))
        .max(1)
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("dev", &self.dev())
            .field("ino", &self.ino)
            .field("kind", &self.kind())
            .field("has_fd", &self.has_fd())
            .finish()
    }
}

impl FdHolder for Node {
    fn dev(&self) -> u64 {
        Node::dev(self)
    }

    /// The evictor's step (called with the ring locked).
    fn try_evict(&self) -> Evict {
        let Some(mut g) = self.state.try_lock() else {
            return Evict::Busy;
        };
        let Some(fd) = g.fd.as_ref() else {
            self.bits.fetch_and(!ON_RING, Ordering::Relaxed);
            return Evict::NoFd;
        };
        if self.bits.fetch_and(!REFERENCED, Ordering::Relaxed) & REFERENCED != 0 {
            return Evict::Referenced;
        }
        // Only our Arc: no operation is using the fd. A fallback node with
        // open files keeps it: it may have no other way back to an
        // unlinked file.
        let bits = self.bits.load(Ordering::Relaxed);
        if Arc::strong_count(fd) > 1
            || bits & ORPHAN != 0
            || (opens_of(bits) > 0 && !matches!(g.way, Way::Handle(_)))
        {
            return Evict::Busy;
        }
        self.bits.fetch_and(!ON_RING, Ordering::Relaxed);
        match g.fd.take() {
            Some(fd) => Evict::Taken(fd),
            None => Evict::NoFd,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: VType, way: Way) -> Node {
        Node::new(5, 0, 5, Ident { kind, way }, false)
    }

    #[test]
    fn flags_kind_and_count_share_a_word_without_disturbing_each_other() {
        let n = node(VType::Reg, Way::FdOnly);
        assert_eq!(n.kind(), VType::Reg);
        assert!(!n.pinned() && !n.nameless_by_mount() && !n.is_orphan());
        assert!(n.opened() && n.opened());
        n.set_orphan(true);
        n.mark_removed(false);
        n.set_ident(
            Ident {
                kind: VType::Dir,
                way: Way::FdOnly,
            },
            false,
        );
        assert_eq!(n.kind(), VType::Dir);
        assert_eq!(n.open_count(), 2);
        assert!(n.is_orphan() && n.nameless_by_mount());
        n.set_orphan(false);
        assert!(n.nameless_by_mount(), "still removed");
        n.set_ident(
            Ident {
                kind: VType::Lnk,
                way: Way::FdOnly,
            },
            true,
        );
        assert!(!n.nameless_by_mount(), "another file: not removed");
        assert_eq!((n.kind(), n.open_count()), (VType::Lnk, 2));
        n.closed();
        n.closed();
        n.closed();
        assert_eq!(n.open_count(), 0, "never below zero");
        assert_eq!(n.kind(), VType::Lnk);
        assert!(Node::new(1, 0, 1, n.ident(), true).pinned());
    }

    #[test]
    fn the_last_release_of_an_unlinked_file_takes_the_flag() {
        let n = node(VType::Reg, Way::FdOnly);
        assert!(n.opened());
        assert!(
            !n.uncache_unlinked(),
            "a fallback node keeps its fd while open"
        );
        assert!(n.nameless_by_mount());
        n.closed();
        assert!(!n.nameless_by_mount(), "the last release took the flag");
        assert!(!n.uncache_unlinked(), "no fd was cached");
    }

    #[test]
    fn a_full_open_count_refuses_more() {
        let n = node(VType::Reg, Way::FdOnly);
        n.bits.fetch_or(OPENS_MAX << OPENS_SHIFT, Ordering::Relaxed);
        assert_eq!(n.open_count(), OPENS_MAX as usize);
        assert!(!n.opened());
        assert_eq!(
            n.kind(),
            VType::Reg,
            "the count did not spill into the flags"
        );
        n.closed();
        assert!(n.opened());
    }
}
