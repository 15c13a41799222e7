//! `none`: the walk with no vnode cache and no name cache at all, the
//! reference that shows what the workload itself costs and how far it
//! scales on this machine (like readseek's `none`). Every lookup misses;
//! every `get` runs the file system's inode load (the same allocation the
//! caches make on a miss) and keeps nothing, so nothing is shared between
//! walkers but the synthetic file system they read and the allocator.

use crate::cache::{Cache, Nc, OnReclaim};
use std::any::Any;

/// No cache: see the module docs.
pub struct NoCache;

/// A looked-up inode, owned by the walker alone.
pub struct Node {
    ino: u64,
    _data: Box<dyn Any + Send + Sync>,
}

impl Cache for NoCache {
    type Mount = ();
    type Ref = Node;
    type Hold = ();

    fn label(&self) -> &'static str {
        "none"
    }

    fn mount(&self, _fs_type: &str, _on_reclaim: Option<OnReclaim>) -> Self::Mount {}

    #[inline]
    fn get<D: Any + Send + Sync>(
        &self,
        _m: &Self::Mount,
        ino: u64,
        _is_dir: bool,
        init: impl FnOnce() -> D,
    ) -> Self::Ref {
        Node {
            ino,
            _data: Box::new(init()),
        }
    }

    #[inline]
    fn ino(r: &Self::Ref) -> u64 {
        r.ino
    }

    fn hold(_r: &Self::Ref) -> Self::Hold {}

    #[inline]
    fn nc_lookup(&self, _dir: &Self::Ref, _name: &str) -> Nc<Self::Ref> {
        Nc::Miss
    }

    #[inline]
    fn nc_enter(&self, _dir: &Self::Ref, _name: &str, _target: &Self::Ref) {}

    fn prune(&self, _m: &Self::Mount, _n: usize) -> u64 {
        0
    }

    fn prune_attempts(&self) -> u64 {
        0
    }

    fn numvnodes(&self) -> u64 {
        0
    }

    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}
