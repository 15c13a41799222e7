//! Directory listings: OPENDIR, READDIR, READDIRPLUS (which hands the
//! kernel nodes, as LOOKUP does), RELEASEDIR, FSYNCDIR, and [`with_dir`]
//! for directories the kernel opened without us.

#![allow(clippy::too_many_arguments)] // handlers take a request's fields as `fuser::Filesystem` declares them

use super::counters::Op;
use super::{ctx, Inner, Server, LISTING_KEPT_FROM, NO_HANDLE};
use crate::convert::{dot_attr, errno, file_attr, file_type};
use crate::handles::OpenFile;
use fuser::{
    FileHandle, FopenFlags, Generation, INodeNo, OpenFlags, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyOpen, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use uvfs_vfs::{Ctx, Errno, VfsResult};

impl Server {
    pub(super) fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.inner.no_opendir.load(Ordering::Relaxed) {
            // The kernel stops sending OPENDIR/RELEASEDIR for good; each
            // READDIR opens and releases its directory itself (`with_dir`).
            self.inner.counters.by_op.bump(Op::Opendir);
            return reply.error(errno(Errno::ENOSYS));
        }
        let r = self.guard(Op::Opendir, ino.0, |i| {
            let vp = i.nodes.get(ino.0)?;
            let fh = i.fs.opendir(&ctx(req), &vp, flags.0)?;
            let keep = i.entry_ttl(&vp) >= LISTING_KEPT_FROM;
            Ok((i.handles.insert(vp, fh, flags.0), keep))
        });
        match r {
            // Let the kernel cache the listing across opens: every change
            // to a directory goes through the kernel (fuse_dir_changed drops
            // the cache), and changes behind a passthrough mount's back are
            // reported (changes.rs) or show once the directory's attributes
            // time out and its mtime moved. Offsets are stable, as a cached
            // listing requires.
            Ok((h, true)) => reply.opened(
                FileHandle(h),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            // Names that expire within seconds: a cached listing would
            // leave each of them to a LOOKUP of its own when next used,
            // where listing again (READDIRPLUS) refreshes a whole
            // directory's names and attributes in one request.
            Ok((h, false)) => reply.opened(FileHandle(h), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.guard(Op::Readdir, ino.0, |i| {
            let mut check = Checked::new(ino.0, offset);
            with_dir(i, &ctx(_req), ino.0, fh.0, |of| {
                i.fs.readdir(&of.vp, of.fh, offset, &mut |e| {
                    if let Some(stop) = check.entry(e) {
                        return stop;
                    }
                    let id = i.nodes.node_id(e.ino);
                    reply.add(
                        INodeNo(id),
                        e.offset,
                        file_type(e.kind),
                        OsStr::from_bytes(&e.name),
                    )
                })
            })?;
            check.result()
        });
        match r {
            Ok(()) => {
                reply.ok();
                self.inner.refresh.listed(ino.0);
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.inner.throttle_new_nodes();
        let _racing = self.inner.entry_race.begin(ino.0);
        let r = self.guard(Op::Readdirplus, ino.0, |i| {
            let mut check = Checked::new(ino.0, offset);
            with_dir(i, &ctx(req), ino.0, fh.0, |of| {
                i.fs.readdirplus(&ctx(req), &of.vp, of.fh, offset, &mut |e, found| {
                    if let Some(stop) = check.entry(e) {
                        return stop;
                    }
                    let nm = OsStr::from_bytes(&e.name);
                    match found {
                        // A name without its node (not `.` or `..`): the
                        // kernel lists it without linking it.
                        None if !uvfs_vfs::is_dot_or_dotdot(&e.name) => reply.add_name_only(
                            INodeNo(i.nodes.node_id(e.ino)),
                            e.offset,
                            nm,
                            file_type(e.kind),
                        ),
                        // `.` and `..`: the kernel does not link these, so no
                        // reference is counted.
                        None => {
                            let ttl = i.entry_ttl(&of.vp);
                            let id = i.nodes.node_id(e.ino);
                            reply.add(
                                INodeNo(id),
                                e.offset,
                                nm,
                                &ttl,
                                &dot_attr(id),
                                Generation(0),
                            )
                        }
                        Some((vp, attr)) => {
                            let ttl = i.entry_ttl(vp);
                            let id = i.nodes.node_id(attr.ino);
                            let full = reply.add(
                                INodeNo(id),
                                e.offset,
                                nm,
                                &ttl,
                                &file_attr(attr, id),
                                Generation(i.fs.generation(vp)),
                            );
                            if !full {
                                // Counted before the reply leaves (see nodes.rs).
                                let (nid, new) = i.nodes.remember_new(vp);
                                let parent = i.nodes.node_id(of.vp.ino());
                                let dir = attr.kind == uvfs_vfs::VType::Dir;
                                if new {
                                    i.note_new(nid, parent, &e.name, dir);
                                }
                                if dir {
                                    i.dir_handed_out(nid, parent, &e.name);
                                }
                            }
                            full
                        }
                    }
                })
            })?;
            check.result()
        });
        match r {
            Ok(()) => {
                reply.ok();
                self.inner.refresh.listed(ino.0);
            }
            // Entries remembered before a failure part way stay counted
            // (the node lives until unmount, never too short); memfs's
            // readdirplus fails only before its first entry.
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.guard(Op::Releasedir, ino.0, |i| {
            let of = i.handles.remove(fh.0)?;
            i.fs.releasedir(&of.vp, of.fh)
        });
        Self::reply_empty(reply, r);
    }

    pub(super) fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let cx = ctx(req);
        self.maybe_offload(move |s| {
            let r = s.guard(Op::Fsyncdir, ino.0, |i| {
                with_dir(i, &cx, ino.0, fh.0, |of| {
                    i.fs.fsync(&of.vp, of.fh, datasync)
                })
            });
            Self::reply_empty(reply, r);
        });
    }
}

/// Runs `f` on the open directory of a READDIR-like request: the one
/// behind its handle or, when the kernel opened the directory without us
/// (handle 0, FUSE_NO_OPENDIR_SUPPORT), one opened for this call alone and
/// released after it. Offsets are stable cookies, so a fresh open resumes
/// where the last call stopped.
pub(crate) fn with_dir<T>(
    i: &Inner,
    ctx: &Ctx,
    ino: u64,
    fh: u64,
    f: impl FnOnce(&OpenFile) -> VfsResult<T>,
) -> VfsResult<T> {
    if fh != NO_HANDLE {
        let of = i.handles.get(fh)?;
        return f(&of);
    }
    let vp = i.nodes.get(ino)?;
    let dh = i.fs.opendir(ctx, &vp, libc::O_RDONLY)?;
    let of = OpenFile::transient(vp, dh);
    let r = f(&of);
    let _ = i.fs.releasedir(&of.vp, of.fh);
    r
}

/// Entries of one listing checked for what the kernel cannot take from
/// a file system (a library's may give anything): a name it cannot link
/// (empty, or holding `/` or NUL) failed the whole listing with `EIO`,
/// and a cookie that leads nowhere (0, or the offset asked for, which
/// the kernel would ask for again) made `ls` list for ever. Such a name
/// is left out, such a cookie ends the listing with `EIO`; both are
/// logged, once per listing.
struct Checked {
    dir: u64,
    asked: u64,
    skipped: usize,
    stuck: Option<u64>,
}

impl Checked {
    fn new(dir: u64, asked: u64) -> Checked {
        Checked {
            dir,
            asked,
            skipped: 0,
            stuck: None,
        }
    }

    /// `None` for an entry to list; else what the sink answers (`true`:
    /// stop).
    fn entry(&mut self, e: &uvfs_vfs::DirEntry) -> Option<bool> {
        if e.offset == 0 || e.offset == self.asked {
            self.stuck = Some(e.offset);
            return Some(true);
        }
        if e.name.is_empty() || e.name.iter().any(|&b| b == b'/' || b == 0) {
            self.skipped += 1;
            return Some(false);
        }
        None
    }

    fn result(self) -> VfsResult<()> {
        if self.skipped > 0 {
            log::warn!(
                "listing of node {}: {} names that cannot be a file's (empty, or with '/' \
                 or NUL) left out",
                self.dir,
                self.skipped
            );
        }
        match self.stuck {
            Some(cookie) => {
                log::warn!(
                    "listing of node {} from offset {}: the file system gave an entry the \
                     offset {cookie}, which leads back to where it was asked from; answered EIO",
                    self.dir,
                    self.asked
                );
                Err(Errno::EIO)
            }
            None => Ok(()),
        }
    }
}
