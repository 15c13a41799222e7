//! The records: `struct vnode`, `struct mount`, and a vnode's name cache
//! lists.
//!
//! They point at each other (a vnode's `v_mount`, a mount's
//! `mnt_nvnodelist`), so they are defined together, below everything that
//! operates on them; the reference handles ([`VRef`](crate::VRef),
//! [`HoldRef`](crate::HoldRef)) are in `refs.rs` with `vhold`, `vrele` and
//! the rest.
//!
//! # FreeBSD
//!
//! `struct vnode` (`sys/sys/vnode.h`). Vnode memory is type stable: it comes
//! from the UMA zone `vnode_zone`, stays on `vnode_list` from `vnode_init`
//! until `vnode_fini`, and is reused for new identities by `getnewvnode`.
//! Here the memory is an `Arc<Vnode>` owned by the list (see
//! [`crate::list`]) and by the zone caches (see [`crate::zone`]); identity
//! fields are atomics because they change on reuse.
//!
//! # Lock reference (as in `vnode.h`)
//!
//! | field | protection |
//! |---|---|
//! | `idx` | immutable |
//! | `gen`, `mount_id`, `fs_type`, `ino` | written by `getnewvnode` while the vnode is exclusively owned; `fs_type` reset by `delmntque` under the interlock |
//! | `vtype` | written with the vnode lock held exclusively (construction, `vgonel`); read racily by scanners |
//! | `holdcnt`, `usecount` | atomics; 0 <-> 1 transitions of `holdcnt` under the interlock |
//! | `irflag` | set under the interlock, read racily (`VN_IS_DOOMED`) |
//! | `dbatchcpu` | written under the per-CPU `vdbatch` lock (and interlock on set) |
//! | `nc_src_count` | mirror of `v_cache_src` emptiness, written under `nc` |
//! | `interlock` | `v_interlock`: `iflag`, `v_mount`, `v_data` |
//! | `vlock` | `v_vnlock` (lockmgr): shared for lookups, exclusive for construction, inactive and recycling |
//! | `nc` | the vnode's name cache lists (`v_cache_src`, `v_cache_dst`) |
//!
//! # Orderings
//!
//! Reference counts and flags use `SeqCst` (FreeBSD's `atomic_fetchadd` and
//! `atomic_cmpset` are full barriers on amd64); statistics are `Relaxed`.

use parking_lot::{Mutex, RwLock};
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::SeqCst,
};
use std::sync::Arc;

use crate::MountId;

/// `enum vtype`, minus `VMARKER` (markers are list entries of their own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum VType {
    /// `VNON`: no type yet (being constructed, or fresh zone memory).
    Non = 0,
    /// `VREG`: regular file.
    Reg = 1,
    /// `VDIR`: directory.
    Dir = 2,
    /// `VBLK`: block device.
    Blk = 3,
    /// `VCHR`: character device.
    Chr = 4,
    /// `VLNK`: symbolic link.
    Lnk = 5,
    /// `VSOCK`: socket.
    Sock = 6,
    /// `VFIFO`: named pipe.
    Fifo = 7,
    /// `VBAD`: reclaimed (doomed) vnode.
    Bad = 8,
}

impl VType {
    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Reg,
            2 => Self::Dir,
            3 => Self::Blk,
            4 => Self::Chr,
            5 => Self::Lnk,
            6 => Self::Sock,
            7 => Self::Fifo,
            8 => Self::Bad,
            _ => Self::Non,
        }
    }
}

/// `VHOLD_NO_SMR`: set in `v_holdcnt` while the vnode memory is free
/// (between `freevnode` and the next `getnewvnode`). A free-memory vnode
/// therefore looks *held* to `vnlru_free_impl` and is counted as a phase 2
/// skip, as on FreeBSD.
pub(crate) const VHOLD_NO_SMR: u32 = 1 << 29;

/// `VIRF_DOOMED` in `v_irflag`: `vgonel` has started; never cleared until
/// the memory is reused.
pub(crate) const VIRF_DOOMED: u32 = 0x1;

/// `VI_OWEINACT` in `v_iflag`: `VOP_INACTIVE` is owed.
pub(crate) const VI_OWEINACT: u32 = 0x4;
/// `VI_DOINGINACT` in `v_iflag`: `VOP_INACTIVE` is running.
pub(crate) const VI_DOINGINACT: u32 = 0x8;

/// `v_dbatchcpu == NOCPU`: not in any `vdbatch`.
pub(crate) const NOCPU: usize = usize::MAX;

/// `fs_type` of a vnode that has no mount (`v_mount == NULL`).
pub(crate) const FS_NONE: u32 = u32::MAX;

/// File system private data (`v_data`).
pub type VData = Arc<dyn Any + Send + Sync>;

/// State protected by the vnode interlock (`v_interlock`).
pub(crate) struct Interlocked {
    /// `v_iflag` (`VI_OWEINACT`, `VI_DOINGINACT`).
    pub iflag: u32,
    /// `v_mount`.
    pub mount: Option<Arc<Mount>>,
    /// `v_data`.
    pub data: Option<VData>,
}

/// A vnode. Reach it through [`VRef`](crate::VRef) or [`HoldRef`](crate::HoldRef).
pub struct Vnode {
    pub(crate) idx: u32,
    pub(crate) gen: AtomicU64,
    pub(crate) mount_id: AtomicU32,
    pub(crate) fs_type: AtomicU32,
    pub(crate) ino: AtomicU64,
    pub(crate) vtype: AtomicU8,
    pub(crate) holdcnt: AtomicU32,
    pub(crate) usecount: AtomicU32,
    pub(crate) irflag: AtomicU32,
    pub(crate) dbatchcpu: AtomicUsize,
    pub(crate) nc_src_count: AtomicUsize,
    pub(crate) interlock: Mutex<Interlocked>,
    pub(crate) vlock: RwLock<()>,
    pub(crate) nc: Mutex<NcLinks>,
}

impl Vnode {
    /// `vnode_init`: fresh zone memory, free (`VHOLD_NO_SMR`) and typeless.
    pub(crate) fn new_free(idx: u32) -> Self {
        Self {
            idx,
            gen: AtomicU64::new(0),
            mount_id: AtomicU32::new(u32::MAX),
            fs_type: AtomicU32::new(FS_NONE),
            ino: AtomicU64::new(0),
            vtype: AtomicU8::new(VType::Non as u8),
            holdcnt: AtomicU32::new(VHOLD_NO_SMR),
            usecount: AtomicU32::new(0),
            irflag: AtomicU32::new(0),
            dbatchcpu: AtomicUsize::new(NOCPU),
            nc_src_count: AtomicUsize::new(0),
            interlock: Mutex::new(Interlocked {
                iflag: 0,
                mount: None,
                data: None,
            }),
            vlock: RwLock::new(()),
            nc: Mutex::new(NcLinks::default()),
        }
    }

    /// Inode number within its mount.
    pub fn ino(&self) -> u64 {
        self.ino.load(SeqCst)
    }

    /// The mount this vnode was created for.
    pub fn mount_id(&self) -> MountId {
        MountId(self.mount_id.load(SeqCst))
    }

    /// `v_type`: `VType::Bad` once reclaimed.
    pub fn vtype(&self) -> VType {
        VType::from_u8(self.vtype.load(SeqCst))
    }

    /// `v_data`: `None` before construction finished and after reclaim.
    pub fn data(&self) -> Option<VData> {
        self.interlock.lock().data.clone()
    }

    /// `v_data` downcast to `T`.
    pub fn data_as<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.data().and_then(|d| d.downcast::<T>().ok())
    }

    /// `VN_IS_DOOMED`: `vgone` has run or is running.
    pub fn is_doomed(&self) -> bool {
        self.irflag.load(SeqCst) & VIRF_DOOMED != 0
    }

    /// `v_usecount`.
    pub fn usecount(&self) -> u32 {
        self.usecount.load(SeqCst)
    }

    /// `v_holdcnt` without the `VHOLD_NO_SMR` flag.
    pub fn holdcnt(&self) -> u32 {
        self.holdcnt.load(SeqCst) & !VHOLD_NO_SMR
    }

    /// Identity generation: distinct for every `getnewvnode` of this memory.
    pub(crate) fn generation(&self) -> u64 {
        self.gen.load(SeqCst)
    }
}

impl fmt::Debug for Vnode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vnode")
            .field("mount", &self.mount_id.load(SeqCst))
            .field("ino", &self.ino())
            .field("type", &self.vtype())
            .field("usecount", &self.usecount())
            .field("holdcnt", &self.holdcnt.load(SeqCst))
            .field("doomed", &self.is_doomed())
            .finish()
    }
}

/// The file system side of a mount: the vnode operations this replica
/// calls back (`VOP_NEED_INACTIVE`, `VOP_INACTIVE`, `VOP_RECLAIM`).
pub trait Hooks: Send + Sync {
    /// `VOP_NEED_INACTIVE`: should the last `vrele` lock the vnode and call
    /// [`Hooks::inactive`]? FreeBSD's default (`vop_stdneed_inactive`)
    /// says yes.
    fn need_inactive(&self, _ino: u64) -> bool {
        true
    }
    /// `VOP_INACTIVE`: the last use reference went away.
    fn inactive(&self, _ino: u64) {}
    /// `VOP_RECLAIM`: the vnode is being recycled; `data` is what the
    /// constructor returned, dropped right after this call.
    fn reclaim(&self, _ino: u64, _data: &(dyn Any + Send + Sync)) {}
}

/// `struct mount`.
pub(crate) struct Mount {
    pub id: u32,
    /// Stand-in for `mnt_op`.
    pub fs_type: u32,
    pub hooks: Arc<dyn Hooks>,
    /// `mnt_nvnodelist`, keyed by the vnode's list index.
    pub vnodes: Mutex<HashMap<u32, Arc<Vnode>>>,
    /// `MNTK_UNMOUNT`: `insmntque` refuses new vnodes.
    pub unmounting: AtomicBool,
}

/// Key of an entry: the directory's identity generation and the name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NcKey {
    pub dgen: u64,
    pub name: Box<str>,
}

/// A vnode's `v_cache_src` / `v_cache_dst`, by entry id.
#[derive(Default)]
pub(crate) struct NcLinks {
    pub src: HashMap<u64, NcKey>,
    pub dst: HashMap<u64, NcKey>,
}
