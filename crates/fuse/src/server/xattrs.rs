//! Extended attributes: SETXATTR, GETXATTR, LISTXATTR, REMOVEXATTR.

#![allow(clippy::too_many_arguments)] // handlers take a request's fields as `fuser::Filesystem` declares them

use super::counters::Op;
use super::{ctx, name, Server};
use fuser::{INodeNo, ReplyEmpty, ReplyXattr, Request};
use std::ffi::OsStr;
use uvfs_vfs::{Errno, XattrFlags};

impl Server {
    pub(super) fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let (c, n, value) = (ctx(req), n.to_owned(), value.to_vec());
        self.making(move |s| {
            let r = s.changing(Op::Setxattr, ino.0, |i| {
                if position != 0 {
                    return Err(Errno::EINVAL);
                }
                refuse_acls(i, name(&n))?;
                i.fs.setxattr(
                    &c,
                    &i.nodes.get(ino.0)?,
                    name(&n),
                    &value,
                    XattrFlags(flags),
                )
            });
            Self::reply_empty(reply, r);
        });
    }

    pub(super) fn getxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        n: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        let r = self.guard(Op::Getxattr, ino.0, |i| {
            refuse_acls(i, name(n))?;
            i.fs.getxattr(&i.nodes.get(ino.0)?, name(n))
        });
        Self::reply_xattr(reply, size, r);
    }

    pub(super) fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let (pid, uid) = (req.pid(), req.uid());
        let r = self.guard(Op::Listxattr, ino.0, |i| {
            i.fs.listxattr(&i.nodes.get(ino.0)?)
        });
        let r = r.map(|list| {
            hide_trusted(list, || {
                crate::caller_caps::has_cap(pid, uid, crate::caller_caps::CAP_SYS_ADMIN)
            })
        });
        Self::reply_xattr(reply, size, r);
    }

    pub(super) fn removexattr(&self, req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let r = self.changing(Op::Removexattr, ino.0, |i| {
            refuse_acls(i, name(n))?;
            i.fs.removexattr(&ctx(req), &i.nodes.get(ino.0)?, name(n))
        });
        Self::reply_empty(reply, r);
    }
}

/// POSIX ACL attributes for a file system that does not keep ACLs
/// (`FileSystem::posix_acls`): refused with `EOPNOTSUPP`, as by a file
/// system mounted without ACLs. Without `FUSE_POSIX_ACL` the kernel
/// passes them on as plain attributes; one that stores attributes as
/// they come kept them, and `cp -a`, which sets a copy's mode through its
/// ACL when that succeeds (and calls no `chmod` then), left wrong modes.
fn refuse_acls(i: &super::Inner, name: &[u8]) -> uvfs_vfs::VfsResult<()> {
    if name.starts_with(b"system.posix_acl_") && !i.fs.posix_acls() {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(())
}

/// The names of `list` (NUL-terminated, one after another) a caller may
/// see: `trusted.*` names only if it holds `CAP_SYS_ADMIN` (`capable`,
/// asked only when the list has such a name), as ext4 and tmpfs list
/// them. The kernel refuses reading and writing those attributes without
/// it, but leaves listing to the file system, and the server, which runs
/// as root, finds every name: it must drop them for other callers.
fn hide_trusted(list: Vec<u8>, capable: impl FnOnce() -> bool) -> Vec<u8> {
    const TRUSTED: &[u8] = b"trusted.";
    let names = || list.split(|&b| b == 0).filter(|n| !n.is_empty());
    if !names().any(|n| n.starts_with(TRUSTED)) || capable() {
        return list;
    }
    let mut out = Vec::with_capacity(list.len());
    for n in names().filter(|n| !n.starts_with(TRUSTED)) {
        out.extend_from_slice(n);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::hide_trusted;

    #[test]
    fn trusted_names_are_listed_to_the_capable_only() {
        let list = b"user.a\0trusted.secret\0security.selinux\0trusted.x\0".to_vec();
        assert_eq!(
            hide_trusted(list.clone(), || false),
            b"user.a\0security.selinux\0"
        );
        assert_eq!(hide_trusted(list.clone(), || true), list);
        // Without such a name the caller is not even asked about.
        let plain = b"user.a\0".to_vec();
        assert_eq!(hide_trusted(plain.clone(), || unreachable!()), plain);
        assert!(hide_trusted(b"trusted.only\0".to_vec(), || false).is_empty());
    }
}
