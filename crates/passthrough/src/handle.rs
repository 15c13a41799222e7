//! File handles: how a vnode gets its fd back after the pool took it.
//!
//! `name_to_handle_at` gives a file's persistent identity on its file
//! system (for ext4: inode number and generation); `open_by_handle_at`
//! turns it back into an fd without any path, so a node the kernel
//! remembers needs no fd while idle (virtiofsd's approach; it needs
//! `CAP_DAC_READ_SEARCH`, which root has).
//!
//! # Which file system a handle belongs to
//! A handle means something only to the file system that made it:
//! `open_by_handle_at` interprets the bytes on whatever file system
//! `mount_fd` is on, so a handle of another file system opened against the
//! source's would name an unrelated inode, possibly outside the source
//! directory. [`HandleOpener`] therefore records the mount id the source
//! root's handle came with and refuses (`EXDEV`) any handle made on
//! another mount; nodes there fall back to their parent's fd and their
//! name (`node.rs`). Every reopened fd is also checked against the node's
//! (dev, ino) by the caller, so even a reused handle cannot substitute
//! another file.
//!
//! # File systems whose handles do not last
//! Some file systems make handles that open only while the kernel still
//! caches the inode: FUSE without export support (most servers, and the
//! kernel cannot tell us which have it) answers `ESTALE` once the inode
//! was evicted, exactly what a deleted file answers on ext4. A node whose
//! fd the pool took back would then look deleted while its file exists.
//! Sources on such file systems use the parent-and-name fallback for
//! every node ([`HandleOpener::new`]).

use crate::sys;
use std::os::fd::AsFd;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use uvfs_vfs::{Errno, VfsResult};

/// Most bytes of a handle (`MAX_HANDLE_SZ`).
const MAX_HANDLE: usize = 128;

/// Handle bytes kept in place: ext4's handles are 8 bytes, xfs's 8 or 12,
/// tmpfs's 12. A node keeps its handle for its whole life, so a heap copy
/// would be an allocation (and its rounding) per cached node; only larger
/// handles (btrfs's 20, overlayfs's, some network file systems') pay for
/// one.
const INLINE: usize = 12;

/// A persistent file handle and the mount it was made on.
///
/// 16 bytes: the type, the mount and the bytes of a common handle are
/// kept in place (the type in a byte, as every file system's is; the
/// mount as its index in the process's table of mount ids, `MOUNT_IDS`);
/// any other handle is kept whole on the heap. Which form a handle takes
/// depends only on its contents, so equal handles compare equal.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Handle(Repr);

#[derive(Clone, PartialEq, Eq, Debug)]
enum Repr {
    Inline {
        htype: u8,
        mount: u8,
        len: u8,
        buf: [u8; INLINE],
    },
    Heap(Box<Whole>),
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct Whole {
    htype: i32,
    mount_id: i32,
    bytes: Box<[u8]>,
}

// A handle is part of every cached passthrough node (`node.rs`), whose
// size decides its allocation's size class.
const _: () = assert!(std::mem::size_of::<Handle>() <= 16);

/// The mount ids handles were made on, numbered in order of first sight,
/// so that a handle names its mount in one byte. A process sees few: the
/// source's mount and those inside the source. A number is never reused
/// or removed, so it names one mount for the process's life; past the
/// table's end, handles are kept whole.
struct MountIds {
    ids: [AtomicI32; 255],
    /// Entries `..len` are set; `len` is stored (Release) after its entry.
    len: AtomicUsize,
    /// Serialises additions.
    add: parking_lot::Mutex<()>,
}

static MOUNT_IDS: MountIds = MountIds {
    ids: [const { AtomicI32::new(0) }; 255],
    len: AtomicUsize::new(0),
    add: parking_lot::Mutex::new(()),
};

impl MountIds {
    fn find(&self, id: i32) -> Option<u8> {
        let n = self.len.load(Ordering::Acquire);
        (0..n)
            .find(|&i| self.ids[i].load(Ordering::Relaxed) == id)
            .map(|i| i as u8)
    }

    /// The number of mount `id`, given one now if it has none (`None`
    /// once the table is full).
    fn number(&self, id: i32) -> Option<u8> {
        if let Some(i) = self.find(id) {
            return Some(i);
        }
        let _g = self.add.lock();
        if let Some(i) = self.find(id) {
            return Some(i);
        }
        let n = self.len.load(Ordering::Relaxed);
        let slot = self.ids.get(n)?;
        slot.store(id, Ordering::Relaxed);
        self.len.store(n + 1, Ordering::Release);
        Some(n as u8)
    }

    /// The mount id numbered `i`. A handle holding `i` was made after the
    /// number was given, and reached this thread by whatever handed the
    /// handle over, which orders the entry's store before this load.
    fn id(&self, i: u8) -> i32 {
        self.ids[usize::from(i)].load(Ordering::Relaxed)
    }
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE],
}

impl Handle {
    /// The handle of the inode `fd` refers to (`O_PATH` fds included).
    /// `EOPNOTSUPP` where the file system has no handles.
    pub fn of_fd(fd: BorrowedFd<'_>) -> VfsResult<Handle> {
        Self::at(fd, sys::EMPTY, libc::AT_EMPTY_PATH)
    }

    /// The handle of `name` in the directory `dirfd` (a trailing symlink
    /// is not followed: the handle is the link's own).
    pub fn of_name(dirfd: BorrowedFd<'_>, name: &std::ffi::CStr) -> VfsResult<Handle> {
        Self::at(dirfd, name, 0)
    }

    fn at(fd: BorrowedFd<'_>, name: &std::ffi::CStr, flags: libc::c_int) -> VfsResult<Handle> {
        let mut raw = RawHandle {
            handle_bytes: MAX_HANDLE as u32,
            handle_type: 0,
            f_handle: [0; MAX_HANDLE],
        };
        let mut mount_id: libc::c_int = 0;
        // SAFETY: `raw` starts with a `file_handle` header whose
        // `handle_bytes` says how much room follows it (MAX_HANDLE bytes,
        // which `raw` has); `name` is a NUL-terminated C string; `mount_id`
        // is writable.
        sys::cvt(unsafe {
            libc::name_to_handle_at(
                fd.as_raw_fd(),
                name.as_ptr(),
                (&mut raw as *mut RawHandle).cast::<libc::file_handle>(),
                &mut mount_id,
                flags,
            )
        })?;
        let n = (raw.handle_bytes as usize).min(MAX_HANDLE);
        Ok(Handle::new(raw.handle_type, mount_id, &raw.f_handle[..n]))
    }

    fn new(htype: i32, mount_id: i32, bytes: &[u8]) -> Handle {
        if let (Ok(t), true) = (u8::try_from(htype), bytes.len() <= INLINE) {
            if let Some(mount) = MOUNT_IDS.number(mount_id) {
                let mut buf = [0; INLINE];
                buf[..bytes.len()].copy_from_slice(bytes);
                return Handle(Repr::Inline {
                    htype: t,
                    mount,
                    len: bytes.len() as u8,
                    buf,
                });
            }
        }
        Handle(Repr::Heap(Box::new(Whole {
            htype,
            mount_id,
            bytes: bytes.into(),
        })))
    }

    /// A handle made of given parts, for tests of what stores them.
    #[cfg(test)]
    pub(crate) fn for_test(htype: i32, bytes: &[u8]) -> Handle {
        Self::from_parts(htype, 0, bytes)
    }

    /// A handle made of its parts (a saved state's, `handover`).
    /// `bytes` longer than `MAX_HANDLE_SZ` are cut: no file system makes
    /// them, and `HandleOpener::open` copies at most that many.
    pub(crate) fn from_parts(htype: i32, mount_id: i32, bytes: &[u8]) -> Handle {
        Handle::new(htype, mount_id, &bytes[..bytes.len().min(MAX_HANDLE)])
    }

    /// The handle's type (`handle_type`).
    pub fn htype(&self) -> i32 {
        match &self.0 {
            Repr::Inline { htype, .. } => i32::from(*htype),
            Repr::Heap(w) => w.htype,
        }
    }

    /// The handle's bytes (`f_handle`).
    pub fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf, .. } => &buf[..usize::from(*len)],
            Repr::Heap(w) => &w.bytes,
        }
    }

    /// The mount the handle was made on.
    pub fn mount_id(&self) -> i32 {
        match &self.0 {
            Repr::Inline { mount, .. } => MOUNT_IDS.id(*mount),
            Repr::Heap(w) => w.mount_id,
        }
    }

    /// A generation number for FUSE: stable for the life of the file
    /// (handles are persistent) and different for a new file that reuses
    /// the inode number, because file systems put the inode's generation
    /// in its handle. FNV-1a over the type and bytes.
    pub fn generation(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.htype().to_ne_bytes().iter().chain(self.bytes()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    }

    /// Heap bytes held (memory reports): none unless the handle does
    /// not fit in place.
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(w) => std::mem::size_of::<Whole>() + w.bytes.len(),
        }
    }
}

/// Opens handles of the source's own mount, and only those.
pub struct HandleOpener {
    mount_fd: Option<OwnedFd>,
    mount_id: i32,
}

impl HandleOpener {
    /// An opener for the mount `root` is on: `root_dir` must be a real
    /// (not `O_PATH`) fd of the source root, kept as `open_by_handle_at`'s
    /// `mount_fd`. Handles are disabled (every node uses the fallback) if
    /// the file system has none, opening one fails (no privilege), or its
    /// handles do not outlive the kernel's inode cache (FUSE).
    pub fn new(root_dir: OwnedFd) -> HandleOpener {
        let fd = root_dir.as_fd();
        if !persistent_handles(fd) {
            return HandleOpener::disabled();
        }
        let Ok(h) = Handle::of_fd(fd) else {
            return HandleOpener::disabled();
        };
        let mut op = HandleOpener {
            mount_id: h.mount_id(),
            mount_fd: Some(root_dir),
        };
        match op.open(&h, libc::O_PATH) {
            Ok(_) => op,
            Err(_) => {
                op.mount_fd = None;
                op
            }
        }
    }

    /// An opener that refuses every handle (fallback everywhere).
    pub fn disabled() -> HandleOpener {
        HandleOpener {
            mount_fd: None,
            mount_id: -1,
        }
    }

    /// Whether handles work at all.
    pub fn enabled(&self) -> bool {
        self.mount_fd.is_some()
    }

    /// The mount whose handles are opened here (-1: none).
    pub fn mount_id(&self) -> i32 {
        self.mount_id
    }

    /// Whether `h` may be opened here: handles on, same mount.
    pub fn accepts(&self, h: &Handle) -> bool {
        self.enabled() && h.mount_id() == self.mount_id
    }

    /// Opens `h` with `flags` (`O_CLOEXEC` added). `EXDEV` for a handle of
    /// another mount, `ESTALE` (from the kernel) for a deleted file.
    pub fn open(&self, h: &Handle, flags: libc::c_int) -> VfsResult<OwnedFd> {
        let Some(mfd) = &self.mount_fd else {
            return Err(Errno::EOPNOTSUPP);
        };
        self.open_on(mfd.as_fd(), h, flags)
    }

    /// Opens `h` with `flags` on the mount `mfd` is on (a real, not
    /// `O_PATH`, fd): another mount of the source's file system, whose
    /// attributes the open file then has (`atime.rs`'s clone). Only
    /// handles this opener accepts: `mfd` must be of the same file system
    /// (the caller's to ensure), or the bytes would name another inode.
    pub(crate) fn open_on(
        &self,
        mfd: BorrowedFd<'_>,
        h: &Handle,
        flags: libc::c_int,
    ) -> VfsResult<OwnedFd> {
        if !self.enabled() {
            return Err(Errno::EOPNOTSUPP);
        }
        if h.mount_id() != self.mount_id {
            return Err(Errno::EXDEV);
        }
        let bytes = h.bytes();
        let mut raw = RawHandle {
            handle_bytes: bytes.len() as u32,
            handle_type: h.htype(),
            f_handle: [0; MAX_HANDLE],
        };
        raw.f_handle[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: `raw` is a `file_handle` header followed by
        // `handle_bytes` (<= MAX_HANDLE) bytes of handle; the kernel only
        // reads it. `mfd` is a valid fd we own.
        let fd = unsafe {
            libc::open_by_handle_at(
                mfd.as_raw_fd(),
                (&mut raw as *mut RawHandle).cast::<libc::file_handle>(),
                flags | libc::O_CLOEXEC,
            )
        };
        sys::owned(fd)
    }
}

/// `FUSE_SUPER_MAGIC` (fuse, fuseblk, virtiofs).
const FUSE_SUPER_MAGIC: libc::c_long = 0x6573_5546;

/// Whether handles of the file system `fd` is on name a file for as long
/// as it exists, cached or not. Unknown (fstatfs failed): assume not.
fn persistent_handles(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|s| s.f_type as libc::c_long != FUSE_SUPER_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn foreign_handles_are_refused() {
        let dir = std::env::temp_dir();
        let root: OwnedFd = std::fs::File::open(&dir).unwrap().into();
        let op = HandleOpener::new(root);
        if !op.enabled() {
            return; // no handles here (not root?): nothing to check
        }
        // /proc is another file system (and has no handles); /dev too.
        let other: OwnedFd = std::fs::File::open("/dev").unwrap().into();
        if let Ok(h) = Handle::of_fd(other.as_fd()) {
            assert!(!op.accepts(&h));
            assert_eq!(op.open(&h, libc::O_PATH).err(), Some(Errno::EXDEV));
        }
        let own: OwnedFd = std::fs::File::open(&dir).unwrap().into();
        let h = Handle::of_fd(own.as_fd()).unwrap();
        assert!(op.accepts(&h));
        assert_eq!(h.generation(), h.clone().generation());
        assert!(op.open(&h, libc::O_PATH).is_ok());
    }

    #[test]
    fn small_handles_stay_in_place_and_others_whole() {
        let small = Handle::from_parts(1, 77, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(matches!(small.0, Repr::Inline { len: 8, .. }));
        assert_eq!(small.bytes(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((small.htype(), small.mount_id()), (1, 77));
        assert_eq!(small.heap_bytes(), 0);
        let edge: Vec<u8> = (0..INLINE as u8).collect();
        let h = Handle::from_parts(0x81, -5, &edge);
        assert!(matches!(h.0, Repr::Inline { .. }));
        assert_eq!((h.htype(), h.mount_id(), h.bytes()), (0x81, -5, &edge[..]));
        let big: Vec<u8> = (0..MAX_HANDLE as u8).collect();
        let b = Handle::from_parts(0x4d, 77, &big);
        assert!(matches!(b.0, Repr::Heap(_)));
        assert_eq!((b.htype(), b.mount_id(), b.bytes()), (0x4d, 77, &big[..]));
        // A type wider than a byte is kept whole, with every bit.
        let wide = Handle::from_parts(0x1_0001, 77, &[1; 8]);
        assert!(matches!(wide.0, Repr::Heap(_)));
        assert_eq!(wide.htype(), 0x1_0001);
        // Equal contents compare equal whatever the buffer's tail holds;
        // the mount and the type count.
        assert_eq!(
            Handle::from_parts(1, 3, &[9; 3]),
            Handle::from_parts(1, 3, &[9; 3])
        );
        assert_ne!(
            Handle::from_parts(1, 3, &[9; 3]),
            Handle::from_parts(1, 3, &[9; 4])
        );
        assert_ne!(
            Handle::from_parts(1, 3, &[9; 3]),
            Handle::from_parts(1, 4, &[9; 3])
        );
        assert_ne!(
            Handle::from_parts(1, 3, &[9; 3]),
            Handle::from_parts(2, 3, &[9; 3])
        );
    }

    #[test]
    fn mount_numbers_are_stable_and_run_out_into_whole_handles() {
        let t = MountIds {
            ids: [const { AtomicI32::new(0) }; 255],
            len: AtomicUsize::new(0),
            add: parking_lot::Mutex::new(()),
        };
        assert_eq!(t.number(40), Some(0));
        assert_eq!(t.number(-1), Some(1));
        assert_eq!(t.number(40), Some(0));
        assert_eq!((t.id(0), t.id(1)), (40, -1));
        for id in 2..255 {
            assert_eq!(t.number(1000 + id), Some(id as u8));
        }
        assert_eq!(t.number(5), None, "full");
        assert_eq!(t.number(-1), Some(1), "known ids keep their numbers");
    }
}
