//! Mounts: a file system's hooks, its free lists, its vnode count.

use crate::counter::DistCounter;
use crate::freelist::FreeList;
use crate::ids::MountId;
use crate::shared::Shared;
use crate::sync::{Arc, AtomicBool, Ordering};
use crate::vnode::Vnode;

/// What the vnode layer calls into a file system for. Both hooks default
/// to doing nothing.
pub trait FsHooks: Send + Sync + 'static {
    /// The use count fell to zero: the last open file or operation is gone
    /// (FreeBSD's `VOP_INACTIVE`). Holds may remain. Runs outside every lock
    /// of the layer and may race with a new user taking a reference.
    fn inactive(&self, _vp: &Vnode) {}

    /// The vnode is being recycled: no references remain and no lookup can
    /// reach it any more (FreeBSD's `VOP_RECLAIM`). Release whatever the
    /// vnode caches (fds, attributes). Runs outside every lock of the layer.
    /// A fresh vnode for the same inode may be constructed concurrently.
    fn reclaim(&self, _vp: &Vnode) {}
}

/// No hooks: for a file system whose vnodes cache nothing to release.
impl FsHooks for () {}

/// A mounted file system as the vnode layer sees it. Obtained from
/// [`crate::VnodeLayer::mount`]; pass it to `get`, `prune`, `unmount`.
pub struct Mount {
    id: MountId,
    fs_type: String,
    pub(crate) hooks: Arc<dyn FsHooks>,
    pub(crate) free: FreeList,
    /// Vnodes of this mount that exist (constructing, live, or doomed but
    /// not yet torn down). Distributed: every allocation and recycle
    /// updates it, so one shared word would bounce between cores.
    pub(crate) live: DistCounter,
    /// Set by unmount: no new vnodes may be created.
    pub(crate) gone: AtomicBool,
    pub(crate) shared: Arc<Shared>,
    /// The layer (weak: the layer owns its mounts).
    pub(crate) layer: std::sync::Weak<crate::layer::VnodeLayer>,
}

impl Mount {
    pub(crate) fn new(
        id: MountId,
        fs_type: &str,
        hooks: Arc<dyn FsHooks>,
        shared: Arc<Shared>,
        layer: std::sync::Weak<crate::layer::VnodeLayer>,
    ) -> Self {
        Mount {
            id,
            fs_type: fs_type.to_string(),
            hooks,
            free: FreeList::new(shared.cfg.freelist_shards),
            // Only ever read exactly (summed), so cells need never fold.
            live: DistCounter::new(1 << 40),
            gone: AtomicBool::new(false),
            shared,
            layer,
        }
    }

    /// The mount's number: unique in its layer for the layer's life, so it
    /// can name the mount where a reference would keep it alive.
    pub fn id(&self) -> MountId {
        self.id
    }

    /// The file system type given to [`VnodeLayer::mount`](crate::VnodeLayer::mount), for statistics and logs.
    pub fn fs_type(&self) -> &str {
        &self.fs_type
    }

    /// How many vnodes of this mount exist right now.
    pub fn vnode_count(&self) -> usize {
        self.live.exact().max(0) as usize
    }

    /// How many vnodes of this mount are free (recyclable) right now.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Whether unmount has begun: from then on `get` on this mount fails
    /// with [`Error::MountGone`](crate::Error::MountGone).
    pub fn is_unmounted(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("id", &self.id)
            .field("fs_type", &self.fs_type)
            .field("vnodes", &self.vnode_count())
            .finish()
    }
}
