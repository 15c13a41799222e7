//! The VFS operations layer of uvfs.
//!
//! A file system (memfs, passthrough) implements [`FileSystem`] over vnode
//! references from `uvfs-vnode`; front ends (the FUSE server, tests,
//! benchmarks) call it. This crate holds only the contract and the small
//! types it speaks in: [`Errno`], [`Attr`], [`SetAttr`], [`DirEntry`],
//! [`StatFs`], [`Ctx`] and the flag words, plus the name and permission
//! checks every file system shares.
//!
//! # Module map
//! `ops` (the [`FileSystem`] trait) · `errno` · `ctx` (the caller) ·
//! `attr` · `dirent` · `statfs` · `time` · `flags` (rename, setxattr,
//! fallocate) · `fileattr` (inode flags) · `lock` (file locks as FUSE
//! carries them) · `name` and `access` (the checks every file system
//! shares) · `bytes` (reads from memory) · `fsmount` (a file system's
//! mount in the vnode layer) · `changes` (changes behind the kernel's
//! back) · `handover` (live upgrade) · `fds` (descriptors counted against
//! the server's budget) · `freeing` and `droplater` (freeing large files
//! off the request) · `trim` (`FITRIM`) · `mountinfo` (the mount table,
//! read by the server and by the passthrough's watcher) · `relist`
//! (directories just listed with attributes).
//!
//! # Walkthrough
//!
//! A file system is a type that implements [`FileSystem`]. It names files by
//! [`VnodeRef`]s, use references into a [`VnodeLayer`] shared with every
//! other mount of the process: the file system registers once with
//! [`VnodeLayer::mount`] and answers [`FileSystem::mount`] with the
//! [`Mount`] it got, and whenever it yields a file (`root`, `lookup`,
//! `create`, ...) it calls [`VnodeLayer::get`] with the inode number and,
//! for a vnode not cached yet, a constructor that attaches its per-file
//! data. The layer keeps those vnodes under its limit, recycles cold ones,
//! and tells the file system through [`uvfs_vnode::FsHooks`] when one goes.
//! [`FsMount`] keeps the layer and the mount together and makes those calls.
//!
//! Seven methods are required, which is a read-only file system:
//! [`fs_type`](FileSystem::fs_type), [`mount`](FileSystem::mount),
//! [`root`](FileSystem::root), [`lookup`](FileSystem::lookup),
//! [`getattr`](FileSystem::getattr), [`read`](FileSystem::read) and
//! [`readdir`](FileSystem::readdir). Everything that changes the file
//! system answers [`Errno::EROFS`] until overridden; the rest has defaults
//! a simple file system wants. Every operation returns a [`VfsResult`], whose
//! error is an [`Errno`] the front end hands to the kernel as it is.
//!
//! Operations take the caller as a [`Ctx`] (ids a new file is owned by),
//! speak of attributes as [`Attr`] (and changes to them as [`SetAttr`]),
//! list directories into a [`DirSink`] one [`DirEntry`] at a time, and name
//! open files by the [`Fh`] that `open` returned. Permission checks are the
//! caller's: the FUSE server (`uvfs-fuse`) lets the kernel make them, and
//! [`check_access`] is there for front ends that cannot. A file system that
//! holds its data in memory answers reads with [`read_bytes`], and one whose
//! directories never change lists them with [`list_dir`].
//!
//! The file system below has one directory and one file, and is driven by
//! hand as a front end would drive it:
//!
//! ```
//! use std::sync::Arc;
//! use uvfs_vfs::{list_dir, read_bytes, Attr, Ctx, DirSink, Errno, Fh, FileSystem, FsMount};
//! use uvfs_vfs::{Mount, VType, VfsResult, VnodeLayer, VnodeRef};
//!
//! const TEXT: &[u8] = b"hi\n";
//!
//! struct OneFile(FsMount);
//!
//! impl FileSystem for OneFile {
//!     fn fs_type(&self) -> &'static str {
//!         "onefile"
//!     }
//!     fn mount(&self) -> &Arc<Mount> {
//!         self.0.mount()
//!     }
//!     fn root(&self) -> VfsResult<VnodeRef> {
//!         self.0.vnode(1, VType::Dir)
//!     }
//!     fn lookup(&self, _: &Ctx, _: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
//!         match name {
//!             b"." | b".." => self.root(),
//!             b"hi" => self.0.vnode(2, VType::Reg),
//!             _ => Err(Errno::ENOENT),
//!         }
//!     }
//!     fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
//!         Ok(match vp.ino() {
//!             1 => Attr::new(1, VType::Dir, 0o555, 0),
//!             ino => Attr::new(ino, VType::Reg, 0o444, TEXT.len() as u64),
//!         })
//!     }
//!     fn read(&self, _: &VnodeRef, _: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
//!         Ok(read_bytes(TEXT, offset, size))
//!     }
//!     fn readdir(&self, _: &VnodeRef, _: Fh, offset: u64, sink: &mut DirSink<'_>) -> VfsResult<()> {
//!         // `.` and `..` (both the root here), then the file.
//!         list_dir(sink, offset, (1, 1), [(2, VType::Reg, "hi")]);
//!         Ok(())
//!     }
//! }
//!
//! let layer = VnodeLayer::new(Default::default());
//! let fs = OneFile(FsMount::new(&layer, "onefile"));
//! let ctx = Ctx::new(1000, 1000);
//!
//! let root = fs.root()?;
//! let file = fs.lookup(&ctx, &root, b"hi")?;
//! assert_eq!(fs.getattr(&file)?.size, 3);
//! let fh = fs.open(&ctx, &file, libc::O_RDONLY)?;
//! assert_eq!(fs.read(&file, fh, 0, 4096)?, b"hi\n");
//! assert_eq!(fs.lookup(&ctx, &root, b"nope").unwrap_err(), Errno::ENOENT);
//!
//! let mut names = Vec::new();
//! fs.readdir(&root, Fh(0), 0, &mut |e| {
//!     names.push(String::from_utf8_lossy(&e.name).into_owned());
//!     false
//! })?;
//! assert_eq!(names, [".", "..", "hi"]);
//!
//! // Changes were not implemented, so they are refused as on a read-only mount.
//! assert_eq!(fs.mkdir(&ctx, &root, b"d", 0o755).unwrap_err(), Errno::EROFS);
//! # Ok::<(), Errno>(())
//! ```

#![warn(missing_docs)]

mod access;
mod attr;
mod bytes;
mod changes;
mod ctx;
mod dirent;
mod droplater;
mod errno;
mod fds;
mod fileattr;
mod flags;
mod freeing;
mod fsmount;
pub mod handover;
mod lock;
pub mod mountinfo;
mod name;
mod ops;
mod relist;
mod statfs;
mod time;
mod trim;

pub use access::{check_access, R_OK, W_OK, X_OK};
pub use attr::{killed_suidgid, mode_to_vtype, vtype_to_mode, Attr, SetAttr, SetTime};
pub use bytes::read_bytes;
pub use changes::{ChangeSink, WatchStatus};
pub use ctx::Ctx;
pub use dirent::{list_dir, DirEntry};
pub use droplater::DropLater;
pub use errno::{Errno, VfsResult};
pub use fds::FdReservation;
pub use fileattr::{
    statx_attributes, FsXattr, FS_APPEND_FL, FS_COMMON_FL, FS_DAX_FL, FS_IMMUTABLE_FL,
    FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_NEED_CAP_FL,
    FS_NOATIME_FL, FS_NODUMP_FL, FS_PROJINHERIT_FL, FS_SYNC_FL,
};
pub use flags::{FallocMode, RenameFlags, XattrFlags, O_KILL_SUIDGID};
pub use freeing::Freeing;
pub use fsmount::FsMount;
pub use handover::{
    Ahead, Bytes, FdKeeper, JournalRecord, Keep, KeptFd, RecoveredOpen, Recovery, Saved,
    JOURNAL_RECORD,
};
pub use lock::{FileLock, LOCK_TO_EOF};
pub use name::{
    check_name, check_new_name, check_symlink_target, is_dot_or_dotdot, NAME_MAX, SYMLINK_MAX,
};
pub use ops::{DirPlusSink, DirSink, Fh, FileSystem};
pub use relist::Relist;
pub use statfs::StatFs;
pub use time::Timespec;
pub use trim::{TrimRange, FITRIM};
pub use uvfs_vnode::{no_data, HoldRef, Ino, Mount, MountId, VType, VnodeLayer, VnodeRef};
