//! Requests about names in a directory: LOOKUP and FORGET (where
//! kernel references become vnode holds, `nodes.rs`), and those that make,
//! link, rename or remove names (MKNOD, MKDIR, SYMLINK, LINK, CREATE,
//! TMPFILE, RENAME, UNLINK, RMDIR).

#![allow(clippy::too_many_arguments)] // handlers take a request's fields as `fuser::Filesystem` declares them

use super::counters::Op;
use super::resent::{self, Want};
use super::{ctx, ctx_making, name, open_flags, Server};
use crate::convert::dot_attr;
use fuser::{
    Generation, INodeNo, RenameFlags as FuseRenameFlags, ReplyCreate, ReplyEmpty, ReplyEntry,
    Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use uvfs_vfs::{Errno, Freeing, RenameFlags, VType};

/// What a file handle leads to (`.` of its node): a file with no name
/// left answers ESTALE, as ext4 refuses a handle of a deleted file
/// (open or not). The node is still there between the kernel dropping
/// the inode and its FORGET reaching us, right after an unlink.
fn by_handle(
    found: uvfs_vfs::VfsResult<(uvfs_vfs::VnodeRef, uvfs_vfs::Attr)>,
) -> uvfs_vfs::VfsResult<Option<(uvfs_vfs::VnodeRef, uvfs_vfs::Attr)>> {
    match found {
        Ok((_, a)) if a.nlink == 0 => Err(Errno::ESTALE),
        r => r.map(Some),
    }
}

impl Server {
    pub(super) fn lookup(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        self.inner.throttle_new_nodes();
        let _racing = self.inner.entry_race.begin(parent.0);
        let mut negative_ttl = self.inner.timeouts.entry;
        let r = self.guard(Op::Lookup, parent.0, |i| {
            let dir = match i.nodes.get(parent.0) {
                Ok(dir) => dir,
                // A file handle of a node the kernel forgot: with
                // FUSE_EXPORT_SUPPORT it asks for `.` of the handle's node
                // id (and checks the generation itself).
                Err(Errno::ESTALE) if name(n) == b"." => {
                    return by_handle(i.with_attr(i.fs.vget(i.nodes.node_id(parent.0))?));
                }
                Err(e) => return Err(e),
            };
            // `.` of a file handle's node the kernel dropped while its
            // FORGET has not reached us yet: the node itself, whatever its
            // type (a file system's own lookup of `.` wants a directory,
            // and any error here is ESTALE to `open_by_handle_at`).
            if name(n) == b"." {
                return by_handle(i.with_attr(dir));
            }
            negative_ttl = i.entry_ttl(&dir);
            match i.fs.lookup_attr(&ctx(req), &dir, name(n)) {
                // Answered with a negative entry, not an errno.
                Err(e) if e == Errno::ENOENT && !negative_ttl.is_zero() => Ok(None),
                r => r.map(Some),
            }
        });
        match r {
            // A negative entry the kernel may cache for the entry timeout
            // (node id 0 counts no reference).
            Ok(None) => {
                let mut a = dot_attr(0);
                a.kind = fuser::FileType::RegularFile;
                reply.entry(&negative_ttl, &a, Generation(0));
            }
            Ok(Some(e)) => self.reply_entry_at(reply, Ok(e), parent.0, name(n)),
            Err(e) => self.reply_entry_at(reply, Err(e), parent.0, name(n)),
        }
    }

    // BATCH_FORGET: fuser's default `batch_forget` calls this once per
    // entry (its `ForgetOne` type is private, so it cannot be overridden),
    // which is exactly the per-node accounting wanted.
    pub(super) fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let i = &self.inner;
        let (gone, unclaimed) = i.nodes.forget_node(ino.0, nlookup);
        if unclaimed {
            i.fs.unclaimed_forgotten(i.nodes.node_id(ino.0));
        }
        if gone {
            // No backing file of it is left: each holds the node.
            i.backings.writers.forgotten(ino.0);
            if i.refresh.running() {
                i.refresh.names.forgot(ino.0);
            }
        }
    }

    pub(super) fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (c, n) = (ctx_making(req, umask), n.to_owned());
        self.making(move |s| {
            let r = s.changing(Op::Mknod, parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                i.with_attr(i.fs.mknod(&c, &dir, name(&n), mode, u64::from(rdev))?)
            });
            s.reply_entry_at(reply, r, parent.0, name(&n));
        });
    }

    pub(super) fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let (c, n, again) = (ctx_making(req, umask), n.to_owned(), resent::resent(req));
        self.making(move |s| {
            let r = s.changing(Op::Mkdir, parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                let made = i.fs.mkdir(&c, &dir, name(&n), mode);
                i.with_attr(resent::made(again, made, Want::Kind(VType::Dir), || {
                    i.fs.lookup(&c, &dir, name(&n))
                })?)
            });
            s.reply_entry_at(reply, r, parent.0, name(&n));
        });
    }

    pub(super) fn unlink(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let slow = self.frees_much(|i| {
            let dir = i.nodes.get(parent.0).ok()?;
            Some(i.fs.may_free_much(Freeing::Remove {
                dir: &dir,
                name: name(n),
            }))
        });
        let (c, n, again) = (ctx(req), n.to_owned(), resent::resent(req));
        self.offload_if(slow, move |s| {
            let r = s.changing(Op::Unlink, parent.0, |i| {
                resent::removed(again, i.fs.unlink(&c, &i.nodes.get(parent.0)?, name(&n)))
            });
            Self::reply_empty(reply, r);
        });
    }

    pub(super) fn rmdir(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let r = self.changing(Op::Rmdir, parent.0, |i| {
            let done = i.fs.rmdir(&ctx(req), &i.nodes.get(parent.0)?, name(n));
            resent::removed(resent::resent(req), done)
        });
        Self::reply_empty(reply, r);
    }

    pub(super) fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (c, n, target) = (ctx(req), link_name.to_owned(), target.to_owned());
        let again = resent::resent(req);
        self.making(move |s| {
            let r = s.changing(Op::Symlink, parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                let made =
                    i.fs.symlink(&c, &dir, name(&n), target.as_os_str().as_bytes());
                i.with_attr(resent::made(again, made, Want::Kind(VType::Lnk), || {
                    i.fs.lookup(&c, &dir, name(&n))
                })?)
            });
            s.reply_entry_at(reply, r, parent.0, name(&n));
        });
    }

    pub(super) fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRenameFlags,
        reply: ReplyEmpty,
    ) {
        // (RENAME_WHITEOUT makes an inode; a rename over a file may end
        // that file.)
        let slow = self.frees_much(|i| {
            let dir = i.nodes.get(newparent.0).ok()?;
            Some(i.fs.may_free_much(Freeing::Remove {
                dir: &dir,
                name: name(newname),
            }))
        });
        let (c, n, newname) = (ctx(req), n.to_owned(), newname.to_owned());
        let again = resent::resent(req);
        self.offload_if(self.short_of_space_here() || slow, move |s| {
            let r = s.changing(Op::Rename, parent.0, |i| {
                let (d, nd) = (i.nodes.get(parent.0)?, i.nodes.get(newparent.0)?);
                let flags = RenameFlags(flags.bits());
                match i.fs.rename(&c, &d, name(&n), &nd, name(&newname), flags) {
                    // Resent, its source gone and its target there: the
                    // dead server renamed it.
                    Err(e) if again && e == Errno::ENOENT => {
                        i.fs.lookup(&c, &nd, name(&newname)).map_err(|_| e)?;
                        log::info!(
                            "a resent rename found its source gone and its target there: \
                             taken as done by the server that died"
                        );
                        return Ok(());
                    }
                    r => r?,
                }
                i.renamed(
                    &c,
                    (parent.0, &d, name(&n)),
                    (newparent.0, &nd, name(&newname)),
                    flags,
                );
                Ok(())
            });
            Self::reply_empty(reply, r);
        });
    }

    pub(super) fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (c, newname, again) = (ctx(req), newname.to_owned(), resent::resent(req));
        self.making(move |s| {
            let r = s.changing(Op::Link, ino.0, |i| {
                let (vp, dir) = (i.nodes.get(ino.0)?, i.nodes.get(newparent.0)?);
                let linked =
                    i.fs.link(&c, &vp, &dir, name(&newname))
                        .map(|()| vp.clone());
                resent::made(again, linked, Want::File(&vp), || {
                    i.fs.lookup(&c, &dir, name(&newname))
                })?;
                i.with_attr(vp)
            });
            s.reply_entry_at(reply, r, newparent.0, name(&newname));
        });
    }

    pub(super) fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        kill_suidgid: bool,
        reply: ReplyCreate,
    ) {
        let (c, n, again) = (ctx_making(req, umask), n.to_owned(), resent::resent(req));
        self.making(move |s| {
            let r = s.changing(Op::Create, parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                let create = |flags| {
                    i.fs.create(&c, &dir, name(&n), mode, open_flags(flags, kill_suidgid))
                };
                let (vp, fh) = match create(flags) {
                    // Resent, exclusive, and the file there: the dead
                    // server made it; open it.
                    Err(e) if again && e == Errno::EEXIST && flags & libc::O_EXCL != 0 => {
                        log::info!(
                            "a resent exclusive create found its file: taken as made by the \
                             server that died"
                        );
                        create(flags & !libc::O_EXCL)?
                    }
                    r => r?,
                };
                let attr = i.fs.getattr(&vp)?;
                Ok((vp, fh, attr))
            });
            s.reply_created(reply, r, flags, Some((parent.0, name(&n))));
        });
    }

    pub(super) fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let c = ctx_making(req, umask);
        self.making(move |s| {
            let r = s.changing(Op::Tmpfile, parent.0, |i| {
                let dir = i.nodes.get(parent.0)?;
                let (vp, fh) = i.fs.tmpfile(&c, &dir, mode, flags)?;
                let attr = i.fs.getattr(&vp)?;
                Ok((vp, fh, attr))
            });
            // No name for the evictor to ask the kernel to forget it by: the
            // node goes when its last open file does (or once `link` named
            // it, as any other).
            s.reply_created(reply, r, flags, None);
        });
    }
}
