//! Identities: which mount, which inode, what kind of file.

/// An inode number, unique within one mount.
pub type Ino = u64;

/// A mount's number in its layer. Never reused while the layer lives, so a
/// stale id names nothing instead of naming somebody else's mount.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug, PartialOrd, Ord)]
pub struct MountId(pub u32);

/// The kind of file a vnode stands for (FreeBSD's `enum vtype`). `Non` is the
/// type of a vnode whose construction has not finished.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug)]
#[repr(u8)]
pub enum VType {
    /// Not yet known: the vnode is still being constructed.
    Non = 0,
    /// A regular file.
    Reg = 1,
    /// A directory.
    Dir = 2,
    /// A symbolic link.
    Lnk = 3,
    /// A character device.
    Chr = 4,
    /// A block device.
    Blk = 5,
    /// A named pipe.
    Fifo = 6,
    /// A Unix-domain socket.
    Sock = 7,
}

impl VType {
    /// The type stored as `t as u8` (anything else: `Non`), for callers
    /// that keep it in an atomic.
    pub fn from_u8(v: u8) -> VType {
        match v {
            1 => VType::Reg,
            2 => VType::Dir,
            3 => VType::Lnk,
            4 => VType::Chr,
            5 => VType::Blk,
            6 => VType::Fifo,
            7 => VType::Sock,
            _ => VType::Non,
        }
    }
}
