//! `FUSE_NOTIFY_PRUNE`: asking the kernel to drop the *unused* dentries of
//! some nodes, so it forgets the nodes nothing uses.
//!
//! # Why not entry invalidation
//! `FUSE_NOTIFY_INVAL_ENTRY` runs `d_invalidate`, which unhashes the
//! dentry even while it is in use and detaches every mount beneath it: a
//! process whose cwd is there gets ENOENT from `getcwd` (git, rsync and
//! shells fail), open files show as "(deleted)" in /proc, and a file
//! system mounted on a directory of ours silently disappears. Prune (Linux
//! 6.18, protocol 7.45) only drops dentries whose count is zero, the way
//! the kernel's own memory pressure does; a node in use is left alone.
//!
//! fuser 0.18 does not know the notification, so it is written here, on a
//! duplicate of the session's `/dev/fuse` descriptor: the kernel takes
//! each write(2) on a FUSE device as one whole message, whichever
//! descriptor of the connection it comes through.

use std::os::fd::OwnedFd;

/// `enum fuse_notify_code`: `FUSE_NOTIFY_PRUNE`.
const FUSE_NOTIFY_PRUNE: i32 = 9;
/// Node ids per message (the kernel copies them in batches of 512).
const IDS_PER_MESSAGE: usize = 512;

/// `enum fuse_notify_code`: `FUSE_NOTIFY_INC_EPOCH` (Linux 6.16, 7.44).
const FUSE_NOTIFY_INC_EPOCH: i32 = 8;

/// Writes the notifications fuser 0.18 does not know (prune, epoch) to a
/// FUSE connection.
pub struct Pruner {
    dev: OwnedFd,
}

impl Pruner {
    /// A pruner writing to `dev`, a descriptor of the connection.
    pub fn new(dev: OwnedFd) -> Pruner {
        Pruner { dev }
    }

    /// Asks the kernel to drop the unused dentries of `ids` (and with
    /// them the inodes nothing else uses, which it then FORGETs). Node ids
    /// the kernel does not have are ignored by it. `EINVAL` from a kernel
    /// that does not know the notification.
    pub fn prune(&self, ids: &[u64]) -> std::io::Result<()> {
        for chunk in ids.chunks(IDS_PER_MESSAGE) {
            self.send(&message(chunk))?;
        }
        Ok(())
    }

    /// Makes every name the kernel caches for this connection stale: each
    /// is looked up again before its next use, including names whose
    /// LOOKUP was under way (the kernel stamps a name with the epoch its
    /// lookup started in). `EINVAL` from a kernel that does not know it.
    pub fn inc_epoch(&self) -> std::io::Result<()> {
        let mut m = Vec::with_capacity(16);
        m.extend_from_slice(&16u32.to_ne_bytes());
        m.extend_from_slice(&FUSE_NOTIFY_INC_EPOCH.to_ne_bytes());
        m.extend_from_slice(&0u64.to_ne_bytes());
        self.send(&m)
    }

    fn send(&self, msg: &[u8]) -> std::io::Result<()> {
        let n = rustix::io::write(&self.dev, msg)?;
        if n != msg.len() {
            return Err(std::io::Error::other("short write of a FUSE notification"));
        }
        Ok(())
    }
}

/// One notification: `fuse_out_header` (len, error = the notify code,
/// unique = 0), `fuse_notify_prune_out` (count, padding, spare), then the
/// node ids, all in native byte order.
fn message(ids: &[u64]) -> Vec<u8> {
    let len = 16 + 16 + 8 * ids.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&FUSE_NOTIFY_PRUNE.to_ne_bytes());
    m.extend_from_slice(&0u64.to_ne_bytes());
    m.extend_from_slice(&(ids.len() as u32).to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&0u64.to_ne_bytes());
    for id in ids {
        m.extend_from_slice(&id.to_ne_bytes());
    }
    debug_assert_eq!(m.len(), len);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_layout_matches_the_kernel_structs() {
        let m = message(&[7, 0x0102_0304_0506_0708]);
        assert_eq!(m.len(), 48);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 48);
        assert_eq!(i32::from_ne_bytes(m[4..8].try_into().unwrap()), 9);
        assert_eq!(u64::from_ne_bytes(m[8..16].try_into().unwrap()), 0);
        assert_eq!(u32::from_ne_bytes(m[16..20].try_into().unwrap()), 2);
        assert_eq!(&m[20..32], &[0u8; 12]);
        assert_eq!(u64::from_ne_bytes(m[32..40].try_into().unwrap()), 7);
        assert_eq!(
            u64::from_ne_bytes(m[40..48].try_into().unwrap()),
            0x0102_0304_0506_0708
        );
    }
}
