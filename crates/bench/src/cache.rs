//! One interface over the vnode caches we compare, so each workload is
//! written once and run against uvfs and the FreeBSD replicas in one
//! process. Generic (monomorphised), not `dyn`: the adapter must cost
//! nothing, or the comparison would measure the adapter.

use std::any::Any;
use std::sync::Arc;

/// Called when a vnode of the mount is recycled (the ARC budget's hook).
pub type OnReclaim = Arc<dyn Fn(u64) + Send + Sync>;

/// What a name-cache lookup found.
pub enum Nc<R> {
    Hit(R),
    Negative,
    Miss,
}

pub trait Cache: Send + Sync + 'static {
    type Mount: Clone + Send + Sync;
    type Ref: Send;
    type Hold: Send;

    /// `uvfs`, `freebsd` or `freebsd-pre`.
    fn label(&self) -> &'static str;
    fn mount(&self, fs_type: &str, on_reclaim: Option<OnReclaim>) -> Self::Mount;
    /// The vnode for `ino`, built with `init` (the file system's inode load) on a miss.
    fn get<D: Any + Send + Sync>(
        &self,
        m: &Self::Mount,
        ino: u64,
        is_dir: bool,
        init: impl FnOnce() -> D,
    ) -> Self::Ref;
    fn ino(r: &Self::Ref) -> u64;
    fn hold(r: &Self::Ref) -> Self::Hold;
    fn nc_lookup(&self, dir: &Self::Ref, name: &str) -> Nc<Self::Ref>;
    fn nc_enter(&self, dir: &Self::Ref, name: &str, target: &Self::Ref);
    /// Per-mount prune of up to `n` vnodes; returns how many were recycled.
    fn prune(&self, m: &Self::Mount, n: usize) -> u64;
    /// Entries examined by per-mount prunes so far (the cache's own count).
    fn prune_attempts(&self) -> u64;
    fn numvnodes(&self) -> u64;
    /// The cache's own counters, by name.
    fn counters(&self) -> Vec<(String, u64)>;
}

/// uvfs's vnode layer.
pub struct Uvfs(pub Arc<uvfs_vnode::VnodeLayer>);

struct ReclaimHook(Option<OnReclaim>);

impl uvfs_vnode::FsHooks for ReclaimHook {
    fn reclaim(&self, vp: &uvfs_vnode::Vnode) {
        if let Some(f) = &self.0 {
            f(vp.ino());
        }
    }
}

impl Uvfs {
    pub fn new(limit: usize) -> Self {
        Uvfs(uvfs_vnode::VnodeLayer::new(uvfs_vnode::Config::with_limit(
            limit,
        )))
    }
}

impl Cache for Uvfs {
    type Mount = Arc<uvfs_vnode::Mount>;
    type Ref = uvfs_vnode::VnodeRef;
    type Hold = uvfs_vnode::HoldRef;

    fn label(&self) -> &'static str {
        "uvfs"
    }

    fn mount(&self, fs_type: &str, on_reclaim: Option<OnReclaim>) -> Self::Mount {
        self.0.mount(fs_type, Arc::new(ReclaimHook(on_reclaim)))
    }

    #[inline]
    fn get<D: Any + Send + Sync>(
        &self,
        m: &Self::Mount,
        ino: u64,
        is_dir: bool,
        init: impl FnOnce() -> D,
    ) -> Self::Ref {
        let t = if is_dir {
            uvfs_vnode::VType::Dir
        } else {
            uvfs_vnode::VType::Reg
        };
        self.0
            .get(m, ino, move || {
                let d = init();
                // As a file system without data of its own would: the
                // layer's shared empty data, no allocation.
                let data: uvfs_vnode::VnodeData = if std::mem::size_of::<D>() == 0 {
                    uvfs_vnode::no_data()
                } else {
                    Arc::new(d)
                };
                Ok((t, data))
            })
            .expect("synthetic constructor cannot fail")
    }

    #[inline]
    fn ino(r: &Self::Ref) -> u64 {
        r.ino()
    }

    fn hold(r: &Self::Ref) -> Self::Hold {
        r.hold()
    }

    #[inline]
    fn nc_lookup(&self, dir: &Self::Ref, name: &str) -> Nc<Self::Ref> {
        match self.0.namecache().lookup(dir, name.as_bytes()) {
            uvfs_vnode::NcLookup::Hit(v) => Nc::Hit(v),
            uvfs_vnode::NcLookup::Negative => Nc::Negative,
            uvfs_vnode::NcLookup::Miss => Nc::Miss,
        }
    }

    #[inline]
    fn nc_enter(&self, dir: &Self::Ref, name: &str, target: &Self::Ref) {
        self.0.namecache().enter(dir, name.as_bytes(), Some(target));
    }

    fn prune(&self, m: &Self::Mount, n: usize) -> u64 {
        self.0.prune(m, n).recycled
    }

    fn prune_attempts(&self) -> u64 {
        self.0.stats().prune_attempts
    }

    fn numvnodes(&self) -> u64 {
        self.0.stats().numvnodes
    }

    fn counters(&self) -> Vec<(String, u64)> {
        self.0
            .stats()
            .pairs()
            .into_iter()
            .map(|(k, v, _)| (k.to_string(), v))
            .collect()
    }
}
