//! Changes that may free a large file's blocks, which a backing file
//! system does inside the call (`FileSystem::may_free_much`).

use crate::ops::Fh;
use uvfs_vnode::VnodeRef;

/// A request that may end a file's storage.
#[derive(Clone, Copy)]
pub enum Freeing<'a> {
    /// Removing `name` from `dir`: an unlink, or a rename over it (the
    /// target's last link goes, and with it the file, if nothing holds
    /// it open).
    Remove {
        /// The directory the name is removed from.
        dir: &'a VnodeRef,
        /// The name removed.
        name: &'a [u8],
    },
    /// Cutting `vp` to `size` bytes: a truncate, or an open with
    /// `O_TRUNC` (size 0).
    Truncate {
        /// The file cut.
        vp: &'a VnodeRef,
        /// Its size afterwards, in bytes.
        size: u64,
    },
    /// Releasing open file `fh` of `vp`: the last close of a file already
    /// removed frees it.
    Release {
        /// The file closed.
        vp: &'a VnodeRef,
        /// The handle its open returned.
        fh: Fh,
    },
}
