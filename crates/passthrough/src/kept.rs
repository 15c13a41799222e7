//! Descriptors given to the server's crash supervisor
//! (`uvfs_vfs::FdKeeper`): those whose close would drop a lock a program
//! holds. A `flock` lock lives on an open file's description, a record
//! lock on its owner's description (`locks.rs`); if this process dies,
//! its descriptors close and the locks go, unless another process holds
//! the same descriptions. The supervisor does, and gives them to the
//! server it starts (`handover/recover.rs`).
//!
//! Each is kept when it first holds a lock and forgotten (synchronously:
//! the supervisor's duplicate is closed before the lock's release is
//! answered) when the file system lets it go.

use std::os::fd::BorrowedFd;
use std::sync::{Arc, OnceLock};
use uvfs_vfs::{FdKeeper, Fh, Ino};

/// What a kept descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// Open file `fh` of `node` (its `flock` locks).
    Open { node: Ino, fh: Fh },
    /// Lock owner `owner`'s description of `node`, made through `fh`.
    Owner { node: Ino, owner: u64, fh: Fh },
}

const OPEN: u8 = 1;
const OWNER: u8 = 2;

impl Kept {
    /// Its key: unique among the kept of one mount.
    pub fn key(&self) -> u64 {
        match *self {
            Kept::Open { fh, .. } => (1 << 62) | (fh.0 & ((1 << 62) - 1)),
            Kept::Owner { node, owner, .. } => {
                let h = node.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ owner.rotate_left(29);
                (2 << 62) | (h & ((1 << 62) - 1))
            }
        }
    }

    /// What the supervisor keeps with it.
    pub fn meta(&self) -> [u8; 25] {
        let mut m = [0u8; 25];
        let (kind, node, owner, fh) = match *self {
            Kept::Open { node, fh } => (OPEN, node, 0, fh),
            Kept::Owner { node, owner, fh } => (OWNER, node, owner, fh),
        };
        m[0] = kind;
        m[1..9].copy_from_slice(&node.to_le_bytes());
        m[9..17].copy_from_slice(&owner.to_le_bytes());
        m[17..25].copy_from_slice(&fh.0.to_le_bytes());
        m
    }

    /// Read back from `meta`; None if it is not one.
    pub fn parse(m: &[u8]) -> Option<Kept> {
        if m.len() != 25 {
            return None;
        }
        let u = |r: std::ops::Range<usize>| u64::from_le_bytes(m[r].try_into().expect("8 bytes"));
        let (node, owner, fh) = (u(1..9), u(9..17), Fh(u(17..25)));
        match m[0] {
            OPEN => Some(Kept::Open { node, fh }),
            OWNER => Some(Kept::Owner { node, owner, fh }),
            _ => None,
        }
    }
}

/// The file system's keeper, once the server has one.
#[derive(Default)]
pub(crate) struct Keeper(OnceLock<Arc<dyn FdKeeper>>);

impl Keeper {
    pub fn set(&self, k: Arc<dyn FdKeeper>) -> bool {
        self.0.set(k).is_ok()
    }

    pub fn keep(&self, what: Kept, fd: BorrowedFd<'_>) {
        if let Some(k) = self.0.get() {
            k.keep(what.key(), &what.meta(), fd);
        }
    }

    pub fn forget(&self, what: Kept) {
        if let Some(k) = self.0.get() {
            k.forget(what.key());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_reads_back_and_keys_differ_by_kind() {
        let a = Kept::Open { node: 7, fh: Fh(9) };
        let b = Kept::Owner {
            node: 7,
            owner: 9,
            fh: Fh(9),
        };
        assert_eq!(Kept::parse(&a.meta()), Some(a));
        assert_eq!(Kept::parse(&b.meta()), Some(b));
        assert_ne!(a.key(), b.key());
        assert_eq!(Kept::parse(&[9; 25]), None);
        assert_eq!(Kept::parse(&[1; 3]), None);
    }
}
