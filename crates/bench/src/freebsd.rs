//! The FreeBSD replica (crate `uvfs-freebsd`) behind the workloads' common
//! interface. `freebsd` is FreeBSD 14 after seed 000's commit, `freebsd-pre`
//! before it.

use crate::cache::{Cache, Nc, OnReclaim};
use std::any::Any;
use std::sync::Arc;
use uvfs_freebsd::{CacheLookup, FreeBsdVfs, HoldRef, MountId, VRef, VType, Variant};

pub struct Replica {
    vfs: Arc<FreeBsdVfs>,
    pre: bool,
}

impl Replica {
    pub fn new(limit: usize, pre: bool) -> Self {
        let v = if pre { Variant::Pre } else { Variant::Post };
        Replica {
            vfs: FreeBsdVfs::new(limit, v),
            pre,
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.vfs.shutdown();
    }
}

struct Hook(Option<OnReclaim>);

impl uvfs_freebsd::Hooks for Hook {
    fn reclaim(&self, ino: u64, _data: &(dyn Any + Send + Sync)) {
        if let Some(f) = &self.0 {
            f(ino);
        }
    }
}

#[derive(Clone)]
pub struct ReplicaMount {
    id: MountId,
    fs_type: String,
}

impl Cache for Replica {
    type Mount = ReplicaMount;
    type Ref = VRef;
    type Hold = HoldRef;

    fn label(&self) -> &'static str {
        if self.pre {
            "freebsd-pre"
        } else {
            "freebsd"
        }
    }

    fn mount(&self, fs_type: &str, on_reclaim: Option<OnReclaim>) -> Self::Mount {
        ReplicaMount {
            id: self.vfs.mount(fs_type, Arc::new(Hook(on_reclaim))),
            fs_type: fs_type.to_string(),
        }
    }

    #[inline]
    fn get<D: Any + Send + Sync>(
        &self,
        m: &Self::Mount,
        ino: u64,
        is_dir: bool,
        init: impl FnOnce() -> D,
    ) -> Self::Ref {
        let t = if is_dir { VType::Dir } else { VType::Reg };
        self.vfs
            .vget_or_alloc(m.id, ino, move || Ok((t, Box::new(init()))))
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
        match self.vfs.cache_lookup(dir, name) {
            CacheLookup::Hit(v) => Nc::Hit(v),
            CacheLookup::Negative => Nc::Negative,
            CacheLookup::Miss => Nc::Miss,
        }
    }

    #[inline]
    fn nc_enter(&self, dir: &Self::Ref, name: &str, target: &Self::Ref) {
        self.vfs.cache_enter(dir, name, Some(target));
    }

    fn prune(&self, m: &Self::Mount, n: usize) -> u64 {
        self.vfs.vnlru_free_vfsops(&m.fs_type, n) as u64
    }

    fn prune_attempts(&self) -> u64 {
        self.vfs.stats().free_attempt
    }

    fn numvnodes(&self) -> u64 {
        self.vfs.numvnodes() as u64
    }

    fn counters(&self) -> Vec<(String, u64)> {
        self.vfs
            .stats()
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}
