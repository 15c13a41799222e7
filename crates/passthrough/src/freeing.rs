//! Which changes free a large file's blocks (`FileSystem::may_free_much`),
//! and the removals whose last close is left to `closer.rs`.
//!
//! A backing file system frees a file's blocks when its last link goes
//! and nothing holds it open, inside that `unlinkat`, `renameat` or
//! `close` (ours: this server keeps fds of the files it serves), and in
//! `ftruncate` or an `O_TRUNC` open. For a large file ext4 can take most
//! of a second, mostly waiting for its journal; through an io_uring queue,
//! which serves one request at a time, every other request from that CPU
//! would wait as long (`scripts/large-removal-latency.sh`; figures in
//! docs/results.md, "FUSE over io_uring"). One `statx` tells
//! beforehand, from the blocks the file has: cheap next to the request,
//! and asked only on io_uring queues.

use crate::closer::CLOSER;
use crate::fs::PassthroughFs;
use crate::sys;
use rustix::fs::{Mode, OFlags};
use std::ffi::CStr;
use std::os::fd::AsFd;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use uvfs_vfs::Freeing;

/// Allocated bytes from which freeing is worth a hand-off to another
/// thread: milliseconds of the backing file system's work, next to a
/// hand-off's microseconds.
pub(crate) const LARGE_FREE: u64 = 64 << 20;

/// Bytes of storage a file holds (`st_blocks` counts 512-byte units
/// whatever the block size).
pub(crate) fn allocated(st: &crate::sys::Statx) -> u64 {
    st.stx_blocks.saturating_mul(512)
}

fn regular(st: &crate::sys::Statx) -> bool {
    u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG
}

/// Whether removing the name `st` describes ends a large file.
fn last_link_of_large(st: &crate::sys::Statx) -> bool {
    last_link_with_storage(st) && allocated(st) >= LARGE_FREE
}

/// Whether removing the name `st` describes ends a file that holds
/// storage, which its last close then frees.
fn last_link_with_storage(st: &crate::sys::Statx) -> bool {
    regular(st) && st.stx_nlink == 1 && allocated(st) > 0
}

impl PassthroughFs {
    /// For a removal of `name` in `dfd` (described by `st`) that ends a
    /// file holding storage: an `O_PATH` fd of it, to be held across the
    /// removal and given to [`close_held`](Self::close_held) after it
    /// (`closer.rs` says why). None for anything else, or when the closer
    /// has no room.
    pub(crate) fn hold_freed(
        &self,
        dfd: BorrowedFd<'_>,
        name: &CStr,
        st: &crate::sys::Statx,
    ) -> Option<OwnedFd> {
        if !last_link_with_storage(st) || !CLOSER.reserve(1) {
            return None;
        }
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(dfd, name, flags, Mode::empty()) {
            Ok(fd) => Some(fd),
            Err(_) => {
                CLOSER.unreserve(1);
                None
            }
        }
    }

    /// After the removal: closes what [`hold_freed`](Self::hold_freed)
    /// held, on the closing thread.
    pub(crate) fn close_held(&self, fd: OwnedFd) {
        self.counters
            .closes_deferred
            .fetch_add(1, Ordering::Relaxed);
        CLOSER.drop_reserved(fd, 1);
    }

    pub(crate) fn frees_much(&self, what: Freeing<'_>) -> bool {
        let st = match what {
            Freeing::Remove { dir, name } => {
                let Ok(dnode) = self.node_of(dir) else {
                    return false;
                };
                let (Ok(dfd), Ok(cname)) = (self.fd_of(&dnode), sys::cstr(name)) else {
                    return false;
                };
                // Its last link: nothing else names the file.
                return sys::statx_at(dfd.as_fd(), &cname, rustix::fs::AtFlags::empty())
                    .is_ok_and(|st| last_link_of_large(&st));
            }
            Freeing::Truncate { vp, size } => {
                let Ok(node) = self.node_of(vp) else {
                    return false;
                };
                let Ok(fd) = self.fd_of(&node) else {
                    return false;
                };
                match sys::statx_fd(fd.as_fd()) {
                    Ok(st) => {
                        return regular(&st) && allocated(&st).saturating_sub(size) >= LARGE_FREE
                    }
                    Err(_) => return false,
                }
            }
            Freeing::Release { fh, .. } => {
                let Ok(of) = self.opens.get(fh) else {
                    return false;
                };
                let Ok(fd) = of.held().map_or_else(|| self.fd_of(&of.node), Ok) else {
                    return false;
                };
                match sys::statx_fd(fd.as_fd()) {
                    // Removed already: this close may be its last.
                    Ok(st) if st.stx_nlink == 0 => st,
                    _ => return false,
                }
            }
        };
        regular(&st) && allocated(&st) >= LARGE_FREE
    }
}
