//! The VFS operations layer of uvfs.
//!
//! A file system (memfs, passthrough) implements [`FileSystem`] over vnode
//! references from `uvfs-vnode`; front ends (the FUSE server, tests,
//! benchmarks) call it. This crate holds only the contract and the small
//! types it speaks in: [`Errno`], [`Attr`], [`SetAttr`], [`DirEntry`],
//! [`StatFs`], [`Ctx`] and the flag words, plus the name and permission
//! checks every file system shares.

#![warn(missing_docs)]

mod access;
mod attr;
mod changes;
mod ctx;
mod dirent;
mod droplater;
mod errno;
mod fds;
mod fileattr;
mod flags;
mod freeing;
mod lock;
mod name;
mod ops;
mod statfs;
mod time;
mod trim;

pub use access::{check_access, R_OK, W_OK, X_OK};
pub use attr::{killed_suidgid, mode_to_vtype, vtype_to_mode, Attr, SetAttr, SetTime};
pub use changes::{ChangeSink, WatchStatus};
pub use ctx::Ctx;
pub use dirent::DirEntry;
pub use droplater::DropLater;
pub use errno::{Errno, VfsResult};
pub use fds::FdReservation;
pub use fileattr::{
    FsXattr, FS_APPEND_FL, FS_COMMON_FL, FS_DAX_FL, FS_IMMUTABLE_FL, FS_IOC_FSGETXATTR,
    FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_NEED_CAP_FL, FS_NOATIME_FL,
    FS_NODUMP_FL, FS_PROJINHERIT_FL, FS_SYNC_FL,
};
pub use flags::{FallocMode, RenameFlags, XattrFlags, O_KILL_SUIDGID};
pub use freeing::Freeing;
pub use lock::{FileLock, LOCK_TO_EOF};
pub use name::{
    check_name, check_new_name, check_symlink_target, is_dot_or_dotdot, NAME_MAX, SYMLINK_MAX,
};
pub use ops::{DirPlusSink, DirSink, Fh, FileSystem};
pub use statfs::StatFs;
pub use time::Timespec;
pub use trim::{TrimRange, FITRIM};
pub use uvfs_vnode::{HoldRef, Ino, Mount, MountId, VType, VnodeLayer, VnodeRef};
