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
            i.fs.getxattr(&i.nodes.get(ino.0)?, name(n))
        });
        Self::reply_xattr(reply, size, r);
    }

    pub(super) fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.guard(Op::Listxattr, ino.0, |i| {
            i.fs.listxattr(&i.nodes.get(ino.0)?)
        });
        Self::reply_xattr(reply, size, r);
    }

    pub(super) fn removexattr(&self, req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let r = self.changing(Op::Removexattr, ino.0, |i| {
            i.fs.removexattr(&ctx(req), &i.nodes.get(ino.0)?, name(n))
        });
        Self::reply_empty(reply, r);
    }
}
