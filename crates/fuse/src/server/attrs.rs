//! Requests about a node's attributes: GETATTR, SETATTR, READLINK,
//! ACCESS, and STATFS for the file system as a whole.

#![allow(clippy::too_many_arguments)] // handlers take a request's fields as `fuser::Filesystem` declares them

use super::counters::Op;
use super::{ctx, Server};
use crate::convert::{errno, file_attr, set_time, statx_attr};
use fuser::{
    AccessFlags, FileHandle, INodeNo, ReplyAttr, ReplyData, ReplyEmpty, ReplyStatfs, ReplyStatx,
    Request, TimeOrNow,
};
use std::time::SystemTime;
use uvfs_vfs::{Freeing, SetAttr, Timespec};

impl Server {
    pub(super) fn getattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        let r = self.guard(Op::Getattr, ino.0, |i| {
            let vp = i.nodes.get(ino.0)?;
            let a = i.fs.getattr(&vp)?;
            let ttl = i.attr_ttl(&vp, &a);
            Ok((a, ttl))
        });
        match r {
            Ok((a, ttl)) => reply.attr(&ttl, &file_attr(&a, ino.0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// GETATTR with what only `statx(2)` has: the birth time. The kernel
    /// asks it when a caller wants `STATX_BTIME` and caches the answer
    /// like a GETATTR's. The file system's attributes already carry
    /// everything; `mask` and the sync flags change nothing (every field
    /// comes from one getattr, which is always current).
    pub(super) fn statx(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        _flags: u32,
        _mask: u32,
        reply: ReplyStatx,
    ) {
        let r = self.guard(Op::Statx, ino.0, |i| {
            let vp = i.nodes.get(ino.0)?;
            let a = i.fs.getattr(&vp)?;
            let ttl = i.attr_ttl(&vp, &a);
            Ok((a, ttl))
        });
        match r {
            Ok((a, ttl)) => reply.statx(&ttl, &statx_attr(&a, ino.0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        kill_suidgid: bool,
        reply: ReplyAttr,
    ) {
        // A SETATTR that changes nothing (ctime at most) comes from a chown
        // that changes neither id: utimensat with both times omitted sends
        // nothing, and the kernel's own kill-privs SETATTR is not sent under
        // KILLPRIV_V2. Linux drops set-ids on any chown of a non-directory,
        // but the kernel flags (FATTR_KILL_SUIDGID) only chowns with an id.
        let chown_without_ids = (mode, uid, gid, size) == (None, None, None, None)
            && atime.is_none()
            && mtime.is_none();
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            // (And any chown moves ctime.)
            ctime: ctime
                .map(Timespec::from)
                .or_else(|| chown_without_ids.then(Timespec::now)),
            kill_suidgid: kill_suidgid || chown_without_ids,
        };
        let slow = size.is_some_and(|size| {
            self.frees_much(|i| {
                let vp = i.nodes.get(ino.0).ok()?;
                Some(i.fs.may_free_much(Freeing::Truncate { vp: &vp, size }))
            })
        });
        let c = ctx(req);
        self.offload_if(slow, move |s| {
            let r = s.changing(Op::Setattr, ino.0, |i| {
                let vp = i.nodes.get(ino.0)?;
                let a = i.fs.setattr(&c, &vp, &set)?;
                let ttl = i.attr_ttl(&vp, &a);
                Ok((a, ttl))
            });
            match r {
                Ok((a, ttl)) => reply.attr(&ttl, &file_attr(&a, ino.0)),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    pub(super) fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.guard(Op::Readlink, ino.0, |i| i.fs.readlink(&i.nodes.get(ino.0)?)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.guard(Op::Statfs, ino.0, |i| i.fs.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let r = self.guard(Op::Access, ino.0, |i| {
            i.fs.access(&ctx(req), &i.nodes.get(ino.0)?, mask.bits() as u32)
        });
        Self::reply_empty(reply, r);
    }
}
