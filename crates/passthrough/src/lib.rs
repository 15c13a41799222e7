//! passthrough: a directory of the host served through the uvfs vnode
//! layer, with a bounded number of fds and bounded memory on any tree.
//!
//! # The problem
//! Userspace passthrough servers keep one fd per inode the kernel
//! remembers (libfuse's passthrough_ll, passthrough_hp, fuse-backend-rs
//! with O_PATH fds) and fail with `EMFILE` once the kernel remembers more
//! files than the fd limit allows, or raise the limit and grow without
//! bound. Here a node's fd is a cache:
//!
//! - every fd the server opens is counted against a budget
//!   (`fdpool.rs`); idle cached fds are given back (CLOCK) before a
//!   request would fail;
//! - a node keeps its identity without an fd: its file handle, or its
//!   parent and name where handles are unavailable (`node.rs`,
//!   `handle.rs`), and reopens on demand, checking it found the same
//!   (dev, ino);
//! - node ids are the backing inode numbers (`inodes.rs`), stable with no
//!   table, so forgetting a node costs nothing; a number reused while the
//!   kernel still remembers its old file gets a new id for the new file.
//!
//! # Safety of resolution
//! Nothing outside the source directory is reachable: every name is one
//! component resolved beneath a held directory fd with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`);
//! symlinks are returned, never followed; `..` of the root is the root
//! and any other `..` is checked to lead below the root; handles are
//! opened only against the mount they came from (`sys.rs`, `handle.rs`).
//!
//! # Module map
//! `sys` (system calls) · `atime` (the mount's atime rule applied to
//! the source: a clone of its mount) · `fdpool` (budget, CLOCK) · `handle` (file
//! handles) · `remembered` (handles of recycled nodes) · `by_ino` (ids the
//! source resolves by itself) · `inodes` (node
//! ids) · `node` (per-vnode data) · `creds` (creating as the caller) ·
//! `fs` (construction; `fs::resolve` lookup and reopen, `fs::stat`, `fs::create`) · `namei`, `io`, `dir`, `attrs`
//! (the operations) · `plus_load` (how busy READDIRPLUS is) · `prefetch`
//! (directory readahead) · `open` (open files) · `park` (idle open files
//! giving their fds back past the budget's share) · `locks` (file locks kept
//! on the backing files) and `lock_owners` (each owner's description) ·
//! `handover` (live upgrade) and `kept` (descriptors held by the crash
//! supervisor) · `iflags` (inode flags) · `trim` (`FITRIM`) · `freeing` and `closer`
//! (freeing large files off the request) · `vops` (the `FileSystem` impl)
//! · `watch` (host changes reported to the front end) · `stats`.

mod atime;
mod attrs;
mod by_ino;
mod closer;
mod creds;
mod dir;
pub mod fdpool;
mod freeing;
mod fs;
pub mod handle;
mod handover;
mod iflags;
pub mod inodes;
mod io;
mod kept;
mod lock_owners;
mod locks;
mod namei;
pub mod node;
mod open;
mod park;
mod plus_load;
mod prefetch;
mod remembered;
mod stats;
mod sys;
mod trim;
mod vops;
mod watch;

pub use fs::{PassthroughConfig, PassthroughFs, PtCounters};
pub use handover::RestoreError;
pub use sys::raise_nofile_limit;
pub use watch::UNWATCHED_TIMEOUT;
