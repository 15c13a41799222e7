//! Record and flock locks: GETLK, SETLK (a waiting SETLKW is parked in
//! `lockwait.rs`, never waited for on a request loop) and INTERRUPT, which
//! ends such a wait.

#![allow(clippy::too_many_arguments)] // handlers take a request's fields as `fuser::Filesystem` declares them

use super::counters::Op;
use super::Server;
use crate::convert::errno;
use fuser::{FileHandle, INodeNo, LockOwner, ReplyEmpty, Request};
use uvfs_vfs::{Errno, FileLock};

impl Server {
    pub(super) fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: fuser::ReplyLock,
    ) {
        let lock = FileLock {
            start,
            end,
            typ,
            pid,
        };
        let r = self.guard(Op::Getlk, ino.0, |i| {
            let of = i.lock_target(fh.0)?;
            i.fs.getlk(&of.vp, of.fh, lock_owner.0, &lock)
        });
        match r {
            Ok(l) => reply.locked(l.start, l.end, l.typ, l.pid),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        flock: bool,
        reply: ReplyEmpty,
    ) {
        let lock = FileLock {
            start,
            end,
            typ,
            pid,
        };
        // Never waits here: a SETLKW that meets a conflict is parked
        // (`lockwait.rs`) and this request loop moves on.
        let r = self.guard(Op::Setlk, ino.0, |i| {
            let of = i.lock_target(fh.0)?;
            match i.fs.setlk(&of.vp, of.fh, lock_owner.0, &lock, flock) {
                Err(e) if e == Errno::EAGAIN && sleep => Ok(Some(of)),
                r => r.map(|()| None),
            }
        });
        match r {
            // A lock taken is answered after the kernel's cached pages of
            // the file are dropped (lockwait.rs: fresh data under a lock).
            Ok(None) if typ != libc::F_UNLCK => {
                self.inner.locks.granted(&self.inner.fs, ino.0, reply)
            }
            Ok(None) => reply.ok(),
            Ok(Some(of)) => {
                let parked = crate::lockwait::Parked {
                    unique: req.unique().0,
                    tid: req.pid(),
                    nodeid: ino.0,
                    vp: of.vp,
                    fh: of.fh,
                    owner: lock_owner.0,
                    lock,
                    flock,
                    reply,
                    holder: None,
                };
                self.inner.locks.park(&self.inner.fs, parked);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn interrupt(&self, _req: &Request, unique: fuser::RequestId) {
        self.inner.locks.interrupt(unique.0);
    }
}
