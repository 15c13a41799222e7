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
//! `n` alone. Only when the source directory is its file system's root
//! (inode 2): otherwise a made-up handle could open a file outside the
//! source, which nothing else in this server can reach. (Files of that
//! file system hidden under a mount point inside the source are
//! reachable this way, as they are to `open_by_handle_at` on the source
//! itself: both need `CAP_DAC_READ_SEARCH`.)
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

/// Whether node ids of the source whose root is `root` (statx `st`,
/// handle `h`) can be resolved from the ids alone.
pub(crate) fn resolvable(root: BorrowedFd<'_>, st: &sys::Statx, h: Option<&Handle>) -> bool {
    let ext4 = rustix::fs::fstatfs(root).is_ok_and(|s| s.f_type as libc::c_long == EXT4_MAGIC);
    ext4 && st.stx_ino == EXT4_ROOT
        && h.is_some_and(|h| h.htype() == INO32_GEN && h.bytes().len() == 8)
}

/// The handle that opens inode `id` of the source's mount `mount_id`,
/// whatever its generation.
pub(crate) fn handle(id: Ino, mount_id: i32) -> Option<Handle> {
    let ino = u32::try_from(id).ok().filter(|&i| i != 0)?;
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&ino.to_ne_bytes());
    Some(Handle::from_parts(INO32_GEN, mount_id, &b))
}
