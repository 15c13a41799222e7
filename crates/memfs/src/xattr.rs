//! Extended attributes of one inode.
//!
//! Linux rules, as tmpfs applies them: names carry a namespace prefix;
//! `user.` attributes exist only on regular files and directories (the
//! kernel refuses them elsewhere too, since their permission bits mean
//! something else on devices and FIFOs); of `system.`, the two POSIX ACL
//! names only (on anything but symlinks), whose values `acl.rs` checks
//! and interprets before they are stored here. The kernel checks name
//! and value lengths and the privilege for `trusted.` before a request
//! arrives; the checks here repeat them for callers that are not the
//! kernel.

use std::collections::BTreeMap;
use uvfs_vfs::{Errno, VType, VfsResult, XattrFlags};

/// Longest attribute name (`XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest attribute value (`XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;

/// Name -> value.
#[derive(Debug, Default)]
pub struct Xattrs {
    map: BTreeMap<Box<[u8]>, Box<[u8]>>,
}

/// Checks that `name` may be used on a file of type `kind`.
pub fn check_name(kind: VType, name: &[u8]) -> VfsResult<()> {
    if name.is_empty() || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    if name.starts_with(b"user.") {
        if name.len() == 5 {
            return Err(Errno::EINVAL);
        }
        if kind != VType::Reg && kind != VType::Dir {
            return Err(Errno::EPERM);
        }
        Ok(())
    } else if name.starts_with(b"trusted.")
        || name.starts_with(b"security.")
        || (crate::acl::is_acl(name) && kind != VType::Lnk)
    {
        Ok(())
    } else {
        Err(Errno::EOPNOTSUPP)
    }
}

impl Xattrs {
    /// The value of `name`.
    pub fn get(&self, name: &[u8]) -> VfsResult<Vec<u8>> {
        self.map.get(name).map(|v| v.to_vec()).ok_or(Errno::ENODATA)
    }

    /// Sets `name` under `XATTR_CREATE` / `XATTR_REPLACE` rules.
    pub fn set(&mut self, name: &[u8], value: &[u8], flags: XattrFlags) -> VfsResult<()> {
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        let exists = self.map.contains_key(name);
        if flags.0 & XattrFlags::CREATE != 0 && exists {
            return Err(Errno::EEXIST);
        }
        if flags.0 & XattrFlags::REPLACE != 0 && !exists {
            return Err(Errno::ENODATA);
        }
        self.map.insert(name.into(), value.into());
        Ok(())
    }

    /// Sets `name` unconditionally (a value the file system made itself,
    /// within the size limit).
    pub fn put(&mut self, name: &[u8], value: &[u8]) {
        debug_assert!(value.len() <= XATTR_SIZE_MAX);
        self.map.insert(name.into(), value.into());
    }

    /// Removes `name` if it is there.
    pub fn discard(&mut self, name: &[u8]) {
        self.map.remove(name);
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: &[u8]) -> VfsResult<()> {
        self.map.remove(name).map(|_| ()).ok_or(Errno::ENODATA)
    }

    /// The inode space `name`'s value takes now (0 if there is none).
    pub fn cost_of(&self, name: &[u8]) -> u64 {
        self.map
            .get(name)
            .map_or(0, |v| crate::ispace::xattr_cost(name, v.len()))
    }

    /// The inode space all attributes take.
    pub fn space(&self) -> u64 {
        self.map
            .iter()
            .map(|(k, v)| crate::ispace::xattr_cost(k, v.len()))
            .sum()
    }

    /// Every attribute, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.map.iter().map(|(k, v)| (&k[..], &v[..]))
    }

    /// All names, each followed by a NUL.
    pub fn list(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for k in self.map.keys() {
            out.extend_from_slice(k);
            out.push(0);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_replace_remove() {
        let mut x = Xattrs::default();
        let c = XattrFlags(XattrFlags::CREATE);
        let r = XattrFlags(XattrFlags::REPLACE);
        assert_eq!(x.set(b"user.a", b"1", r), Err(Errno::ENODATA));
        x.set(b"user.a", b"1", c).unwrap();
        assert_eq!(x.set(b"user.a", b"2", c), Err(Errno::EEXIST));
        x.set(b"user.a", b"3", r).unwrap();
        x.set(b"user.b", b"", XattrFlags::default()).unwrap();
        assert_eq!(x.get(b"user.a").unwrap(), b"3");
        assert_eq!(x.list(), b"user.a\0user.b\0");
        x.remove(b"user.a").unwrap();
        assert_eq!(x.remove(b"user.a"), Err(Errno::ENODATA));
    }

    #[test]
    fn names() {
        assert_eq!(check_name(VType::Lnk, b"user.x"), Err(Errno::EPERM));
        assert!(check_name(VType::Reg, b"system.posix_acl_access").is_ok());
        assert_eq!(
            check_name(VType::Lnk, b"system.posix_acl_access"),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(
            check_name(VType::Reg, b"system.other"),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(check_name(VType::Reg, b"foo"), Err(Errno::EOPNOTSUPP));
        assert!(check_name(VType::Fifo, b"trusted.x").is_ok());
    }
}
