//! A file system's mount in the vnode layer, with the layer it came from:
//! what every file system keeps to answer [`FileSystem::mount`] and to
//! turn inode numbers into vnodes.
//!
//! [`FileSystem::mount`]: crate::FileSystem::mount

use crate::VfsResult;
use std::sync::Arc;
use uvfs_vnode::{FsHooks, Ino, Mount, VType, VnodeData, VnodeLayer, VnodeRef};

/// A file system's mount in a [`VnodeLayer`].
pub struct FsMount {
    layer: Arc<VnodeLayer>,
    mount: Arc<Mount>,
}

impl FsMount {
    /// Mounts a file system of type `fs_type` in `layer`, which needs to
    /// hear of nothing its vnodes go through ([`FsHooks`]' defaults).
    pub fn new(layer: &Arc<VnodeLayer>, fs_type: &str) -> FsMount {
        FsMount::with_hooks(layer, fs_type, Arc::new(()))
    }

    /// Mounts a file system of type `fs_type` in `layer`, told through
    /// `hooks` when its vnodes are recycled or unlinked.
    pub fn with_hooks(layer: &Arc<VnodeLayer>, fs_type: &str, hooks: Arc<dyn FsHooks>) -> FsMount {
        FsMount {
            layer: layer.clone(),
            mount: layer.mount(fs_type, hooks),
        }
    }

    /// The mount, for [`FileSystem::mount`](crate::FileSystem::mount).
    pub fn mount(&self) -> &Arc<Mount> {
        &self.mount
    }

    /// The layer mounted in.
    pub fn layer(&self) -> &Arc<VnodeLayer> {
        &self.layer
    }

    /// The vnode of inode `ino`; one not cached yet is made a `kind` with
    /// no data of its own (a file system that finds everything by `ino`).
    pub fn vnode(&self, ino: Ino, kind: VType) -> VfsResult<VnodeRef> {
        self.vnode_with(ino, || Ok((kind, uvfs_vnode::no_data())))
    }

    /// The vnode of inode `ino`; one not cached yet gets its type and data
    /// from `init` (an errno where the inode cannot be had).
    pub fn vnode_with(
        &self,
        ino: Ino,
        init: impl FnOnce() -> Result<(VType, VnodeData), i32>,
    ) -> VfsResult<VnodeRef> {
        Ok(self.layer.get(&self.mount, ino, init)?)
    }
}
