//! Nameless inodes (unlinked but open, `O_TMPFILE`) a predecessor handed
//! over at a live upgrade (`handover.rs`): no directory holds them, so
//! this table does until the kernel names them.

use crate::inode::Inode;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use uvfs_vfs::Ino;

/// Nameless inodes handed over by a predecessor.
#[derive(Default)]
pub(crate) struct KeptInodes(pub(crate) HashMap<Ino, Kept>);

/// One of them.
pub(crate) enum Kept {
    /// Not asked for yet: held here.
    Held(Arc<Inode>),
    /// A vnode holds it; found as long as it lives.
    Lent(Weak<Inode>),
}
