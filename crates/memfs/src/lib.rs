//! memfs: a tmpfs-like file system on the uvfs vnode layer.
//!
//! Regular files (sparse, in 4 KiB pages), directories, symlinks, hard
//! links, device nodes, FIFOs and sockets; rename with `RENAME_NOREPLACE`
//! and `RENAME_EXCHANGE`; POSIX unlink semantics (an open file's data
//! lives until its last user goes); ownership, permissions, nanosecond
//! timestamps, extended attributes and POSIX ACLs (`acl.rs`); truncate,
//! fallocate and statfs; and a size limit beyond which writes fail with
//! `ENOSPC` without losing data.
//!
//! # Structure
//! - `fs.rs`: `MemFs`, its construction and the vnode binding.
//! - `table.rs`: ino -> inode; the owner of every linked inode.
//! - `inode.rs`: one file's metadata and body; `dir.rs` and `pages.rs`
//!   hold a directory's entries and a regular file's data.
//! - `budget.rs`: the `--size` accounting; `ispace.rs` the `--inodes`
//!   one; `reaper.rs` frees a large file's pages off the request path.
//! - `namei.rs`, `rename.rs`, `io.rs`, `attrs.rs`: the operations;
//!   `vops.rs` exposes them as `uvfs_vfs::FileSystem`.
//! - `copy.rs`: `copy_file_range` from page to page.
//! - `atime.rs`: when reads move access times (the mount's atime flags).
//! - `io_lock.rs`: the range locking that makes I/O atomic.
//! - `xattr.rs`: one inode's extended attributes; `acl.rs` the POSIX ACLs
//!   among them; `iflags.rs` inode flags (`chattr`).
//! - `handover.rs`: the whole file system saved for a live upgrade and
//!   restored (`MemFs::restore`), file pages moved to memfds ahead of
//!   it; `saved.rs` its encoding, `pagefile.rs` the memfds ("page
//!   files") file pages live in from then on and are passed on in, and
//!   which process may give them back; `page.rs` the page both kinds of
//!   storage hold, `kept.rs` the nameless inodes a predecessor handed
//!   over.
//!
//! A vnode's private data is an `Arc<Inode>`: memfs inodes outlive vnode
//! recycling, and an unlinked inode lives exactly as long as some vnode
//! still refers to it.

mod acl;
mod atime;
mod attrs;
mod budget;
mod copy;
mod dir;
mod fs;
mod handover;
mod iflags;
mod inode;
mod io;
mod io_lock;
mod ispace;
mod kept;
mod namei;
mod orphans;
mod page;
mod pagefile;
mod pages;
mod reaper;
mod rename;
mod saved;
mod table;
mod vops;
mod xattr;

pub use atime::{Atime, AtimeRule};
pub use fs::{MemFs, MemFsConfig};
pub use pages::{MAX_FILE_SIZE, PAGE_SIZE};
pub use saved::FORMAT as SAVED_FORMAT;
pub use table::ROOT_INO;
