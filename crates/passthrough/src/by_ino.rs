//! Node ids that the source resolves by itself, with no memory of the
//! server: a file handle of the mount (`name_to_handle_at` through
//! FUSE, an NFS export) keeps opening after the kernel dropped the inode,
//! after a live upgrade and after a server crash.
//!
//! # When
//! A node id on the root's device is the backing inode number
//! (`inodes.rs`), and an ext2/3/4 handle is that number and the inode's
//! generation (type `FILEID_INO32_GEN`, 8 bytes), where ext4 takes
//! generation 0 as "any". So the handle of node id `n` can be made from
//! `n` alone. Where the source directory is its file system's root
//! (inode 2), every file the handle opens is the source's
//! ([`Scope::Whole`]). Below the root ([`Scope::Below`]: a user's
//! project directory, fstests' test directory) a made-up handle can open
//! any file of the file system, so a file found so is taken only if it
//! lies beneath the source ([`beneath`]); otherwise the id answers
//! `ESTALE`, as an id never made does. (Files of that file system hidden
//! under a mount point inside the source are reachable this way, as they
//! are to `open_by_handle_at` on the source itself: both need
//! `CAP_DAC_READ_SEARCH`.)
//!
//! # Which file
//! The handle opens whatever file has inode `n` now, perhaps a new one
//! that reused the number: the node takes the file's own handle (with
//! its real generation), so the FUSE generation differs from the one the
//! kernel's handle carries and the kernel answers `ESTALE`, as it does
//! for a removed file (which no longer opens, or has no name left).

use crate::handle::Handle;
use crate::sys;
use std::os::fd::BorrowedFd;
use uvfs_vfs::Ino;

/// `FILEID_INO32_GEN`.
const INO32_GEN: i32 = 1;
/// `EXT4_SUPER_MAGIC` (also ext2's and ext3's).
const EXT4_MAGIC: libc::c_long = 0xef53;
/// `EXT4_ROOT_INO`.
const EXT4_ROOT: u64 = 2;

/// How far node ids of a source resolve from the ids alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Not at all (not ext2/3/4, or no handles): ids the server forgot
    /// answer `ESTALE`.
    Off,
    /// The source is its file system's root: every file is the source's.
    Whole,
    /// The source is a directory below its file system's root: a file
    /// found by its number is the source's only if it lies [`beneath`] it.
    Below,
}

/// How node ids of the source whose root is `root` (statx `st`, handle
/// `h`) resolve.
pub(crate) fn scope(root: BorrowedFd<'_>, st: &sys::Statx, h: Option<&Handle>) -> Scope {
    let ext4 = rustix::fs::fstatfs(root).is_ok_and(|s| s.f_type as libc::c_long == EXT4_MAGIC);
    if !(ext4 && h.is_some_and(|h| h.htype() == INO32_GEN && h.bytes().len() == 8)) {
        Scope::Off
    } else if st.stx_ino == EXT4_ROOT {
        Scope::Whole
    } else {
        Scope::Below
    }
}

/// Whether the file `fd` (statx `st`), opened by a handle made from its
/// inode number, lies beneath the source directory `root` (statx
/// `root_st`).
///
/// The kernel names an fd's file by its dentry's path (`/proc/self/fd`).
/// A directory opened by handle is always connected to its file
/// system's root (exportfs reconnects it), and a file is whenever its
/// dentry is cached (a file just used: a handle of the mount given out
/// by a server that served it); a disconnected one is named by its
/// name alone, which is refused below. The two paths are only taken as
/// names once each, looked up again here, leads to the very file (a
/// dentry outside the source's mount, under a mount point or since
/// renamed, yields a path that does not); then a path that extends the
/// source's own lies beneath it. A rename racing this may make the
/// answer wrong for as long as the race, as for any check by path.
pub(crate) fn beneath(
    fd: BorrowedFd<'_>,
    st: &sys::Statx,
    root: BorrowedFd<'_>,
    root_st: &sys::Statx,
) -> bool {
    let (Some(path), Some(mut top)) = (named(fd, st), named(root, root_st)) else {
        return false;
    };
    if !top.ends_with(b"/") {
        top.push(b'/');
    }
    path.len() > top.len() && path.starts_with(&top)
}

/// The path the kernel gives `fd`'s file, if looking it up again
/// (without following a last symlink) leads to the file `st` describes.
fn named(fd: BorrowedFd<'_>, st: &sys::Statx) -> Option<Vec<u8>> {
    let path = rustix::fs::readlinkat(rustix::fs::CWD, sys::proc_path(fd).as_c_str(), Vec::new())
        .ok()?
        .into_bytes();
    if path.first() != Some(&b'/') {
        return None;
    }
    let name = sys::cstr(&path).ok()?;
    let again = sys::statx_at(
        rustix::fs::CWD,
        &name,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .ok()?;
    ((sys::stx_dev(&again), again.stx_ino) == (sys::stx_dev(st), st.stx_ino)).then_some(path)
}

/// The handle that opens inode `id` of the source's mount `mount_id`,
/// whatever its generation.
pub(crate) fn handle(id: Ino, mount_id: i32) -> Option<Handle> {
    let ino = u32::try_from(id).ok().filter(|&i| i != 0)?;
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&ino.to_ne_bytes());
    Some(Handle::from_parts(INO32_GEN, mount_id, &b))
}
