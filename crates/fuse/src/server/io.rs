//! Requests on open files: OPEN, READ, WRITE, FLUSH, RELEASE, FSYNC,
//! FALLOCATE, COPY_FILE_RANGE, LSEEK and IOCTL. These are the ones that may
//! wait for a disk, so most choose between this thread and the offload
//! pool (`guard.rs`).

#![allow(clippy::too_many_arguments)] // handlers take a request's fields as `fuser::Filesystem` declares them

use super::counters::Op;
use super::{ctx, open_flags, writes, Inner, Server, MAX_READ};
use crate::convert::errno;
use fuser::{
    FileHandle, FopenFlags, INodeNo, LockOwner, OpenFlags, ReplyData, ReplyEmpty, ReplyOpen,
    ReplyWrite, Request, WriteFlags,
};
use uvfs_vfs::{Ctx, Errno, FallocMode, Freeing, SetAttr, VType, VfsResult};

impl Server {
    pub(super) fn open(
        &self,
        req: &Request,
        ino: INodeNo,
        flags: OpenFlags,
        kill_suidgid: bool,
        reply: ReplyOpen,
    ) {
        let slow = flags.0 & libc::O_TRUNC != 0
            && self.frees_much(|i| {
                let vp = i.nodes.get(ino.0).ok()?;
                Some(i.fs.may_free_much(Freeing::Truncate { vp: &vp, size: 0 }))
            });
        let c = ctx(req);
        self.offload_if(slow, move |s| {
            s.open_now(&c, ino, flags, kill_suidgid, reply, slow)
        });
    }

    pub(super) fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let size = size.min(MAX_READ);
        let read = move |i: &Inner| {
            let of = i.handles.get(fh.0)?;
            i.fs.read(&of.vp, of.fh, offset, size)
        };
        let answer = move |reply: ReplyData, r: VfsResult<Vec<u8>>| match r {
            Ok(d) => reply.data(within(&d, size)),
            Err(e) => reply.error(errno(e)),
        };
        if !self.offloading() {
            return answer(reply, self.guard(Op::Read, ino.0, read));
        }
        // Served here if it needs no disk; else on the pool, so that the
        // queue's other requests do not wait for the disk too.
        let r = self.guard(Op::Read, ino.0, |i| {
            let of = i.handles.get(fh.0)?;
            match i.fs.read_nowait(&of.vp, of.fh, offset, size) {
                Err(Errno::EAGAIN) => Ok(None),
                r => r.map(Some),
            }
        });
        match r {
            Ok(Some(d)) => reply.data(within(&d, size)),
            Ok(None) => self.offload(move |s| answer(reply, s.shielded(Op::Read, ino.0, read))),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let c = ctx(req);
        if self.offloading() && self.inner.write_stalls.open() {
            // The data lives in the queue's buffer, which goes back to the
            // kernel when this returns.
            let data = data.to_vec();
            let write =
                move |s: &Server| s.write_now(&c, (ino, fh), offset, &data, write_flags, reply);
            return self.offload_if(true, write);
        }
        self.write_now(&c, (ino, fh), offset, data, write_flags, reply);
    }

    pub(super) fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let r = self.guard(Op::Flush, ino.0, |i| {
            let of = i.handles.get(fh.0)?;
            // A close: POSIX drops every record lock its owner holds on
            // the file (the kernel leaves that to us with FUSE_POSIX_LOCKS).
            if i.fs.forwards_locks() {
                i.fs.unlock_owner(&of.vp, lock_owner.0)?;
            }
            i.fs.flush(&of.vp, of.fh)
        });
        Self::reply_empty(reply, r);
    }

    pub(super) fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let slow = self.frees_much(|i| {
            let of = i.handles.get(fh.0).ok()?;
            Some(i.fs.may_free_much(Freeing::Release {
                vp: &of.vp,
                fh: of.fh,
            }))
        });
        self.offload_if(slow, move |s| {
            let r = s.guard(Op::Release, ino.0, |i| {
                let of = i.handles.remove(fh.0)?;
                if let Some(node) = of.backing_node {
                    if of.kernel_writer {
                        i.backings.writers.closed(node);
                    }
                    i.backings.detach(node);
                }
                i.fs.release(&of.vp, of.fh)
            });
            Self::reply_empty(reply, r);
        });
    }

    pub(super) fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.maybe_offload(move |s| {
            let r = s.guard(Op::Fsync, ino.0, |i| {
                let of = i.handles.get(fh.0)?;
                i.fs.fsync(&of.vp, of.fh, datasync)
            });
            Self::reply_empty(reply, r);
        });
    }

    pub(super) fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.maybe_offload(move |s| {
            let r = s.changing(Op::Fallocate, ino.0, |i| {
                let of = i.handles.get(fh.0)?;
                i.fs.fallocate(&of.vp, of.fh, FallocMode(mode), offset, length)
            });
            Self::reply_empty(reply, r);
        });
    }

    pub(super) fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.maybe_offload(move |s| {
            let r = s.changing(Op::CopyFileRange, ino_in.0, |i| {
                let (a, b) = (i.handles.get(fh_in.0)?, i.handles.get(fh_out.0)?);
                let flags = u32::try_from(flags.bits()).map_err(|_| Errno::EINVAL)?;
                let n = i
                    .fs
                    .copy_file_range(&a.vp, a.fh, offset_in, &b.vp, b.fh, offset_out, len, flags)?;
                // A reply carries 32 bits; the kernel asks for no more anyway.
                Ok(u32::try_from(n).unwrap_or(u32::MAX))
            });
            match r {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    // The kernel asks only for SEEK_DATA and SEEK_HOLE (it answers the
    // other whences itself).
    pub(super) fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        let r = self.guard(Op::Lseek, ino.0, |i| {
            let hole = match whence {
                libc::SEEK_DATA => false,
                libc::SEEK_HOLE => true,
                _ => return Err(Errno::EINVAL),
            };
            let off = u64::try_from(offset).map_err(|_| Errno::ENXIO)?;
            let of = i.handles.get(fh.0)?;
            if i.handles.may_hold_unseen_writes(&of.vp) {
                // The kernel sends LSEEK without writing back first, so
                // dirty pages of a shared writable mapping are in neither
                // the file system nor its answer: a copy by SEEK_DATA
                // would skip them. While the file is open for writing
                // (a mapping keeps its handle open; unmapping writes the
                // pages back), all of it is data, as without LSEEK. Not
                // where the kernel writes on the backing file: its
                // mappings are the source file's, whose SEEK_DATA sees
                // their dirty pages, so the holes of a file open for
                // writing stay holes to a sparse copy, as natively.
                let size = i.fs.getattr(&of.vp)?.size;
                if off >= size {
                    return Err(Errno::ENXIO);
                }
                return i64::try_from(if hole { size } else { off }).map_err(|_| Errno::EOVERFLOW);
            }
            let at = i.fs.seek_data(&of.vp, of.fh, off, hole)?;
            i64::try_from(at).map_err(|_| Errno::EOVERFLOW)
        });
        match r {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        let (c, input) = (ctx(req), in_data.to_vec());
        // FITRIM walks the whole device's free space (seconds).
        let slow = super::ioctl::waits_for_device(cmd) && self.offloading();
        self.offload_if(slow, move |s| {
            let serve = |i: &Inner| super::ioctl::serve(i, &c, ino.0, fh.0, cmd, &input, out_size);
            let r = if super::ioctl::changes(cmd) {
                s.changing(Op::Ioctl, ino.0, serve)
            } else {
                s.guard(Op::Ioctl, ino.0, serve)
            };
            match r {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    /// Serves an OPEN (here, or on the pool when it truncates a large
    /// file).
    pub(super) fn open_now(
        &self,
        c: &Ctx,
        ino: INodeNo,
        flags: OpenFlags,
        kill_suidgid: bool,
        reply: ReplyOpen,
        wait: bool,
    ) {
        let r = self.guard(Op::Open, ino.0, |i| {
            let vp = i.nodes.get(ino.0)?;
            // The kernel opens FIFOs, sockets and devices itself (special
            // inodes to it) and sends OPEN for files and directories only.
            // Opened here, a FIFO would block the request loop until a
            // writer came, a device would open with the server's privilege.
            if matches!(
                vp.vtype(),
                VType::Fifo | VType::Sock | VType::Chr | VType::Blk
            ) {
                return Err(Errno::ENXIO);
            }
            // (A truncating open changes the file; the kernel sends
            // O_TRUNC only where it leaves truncation to us.)
            if i.read_only && (writes(flags.0) || flags.0 & libc::O_TRUNC != 0) {
                return Err(Errno::EROFS);
            }
            let oflags = open_flags(flags.0, kill_suidgid);
            let fh = if wait {
                i.fs.open(c, &vp, oflags)?
            } else {
                // A lease held on the file elsewhere would keep this
                // thread (and, over io_uring, every request of its CPU)
                // until its holder let it go: that open waits on the pool.
                match i.fs.open_nowait(c, &vp, oflags) {
                    Err(Errno::EAGAIN) => return Ok(None),
                    r => r?,
                }
            };
            let (h, id) = i.open_file(ino.0, vp.clone(), fh, flags.0, true, |fd| {
                reply.open_backing(fd)
            });
            // Asked only where the server does the file's I/O: with kernel
            // I/O no page cache of the FUSE file is kept across opens.
            let fopen = match id {
                Some(_) => FopenFlags::empty(),
                None => i.fopen_flags_for(&vp),
            };
            Ok(Some((h, id, fopen)))
        });
        match r {
            Ok(Some((h, Some(id), _))) => {
                reply.opened_passthrough(FileHandle(h), self.inner.kernel_io_flags(), &id)
            }
            Ok(Some((h, None, fopen))) => reply.opened(FileHandle(h), fopen),
            Ok(None) => {
                let c = *c;
                self.offload(move |s| s.open_now(&c, ino, flags, kill_suidgid, reply, true))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Serves a WRITE of file `ino`'s handle `fh`, timing it
    /// (`write_stall.rs`).
    pub(super) fn write_now(
        &self,
        c: &Ctx,
        (ino, fh): (INodeNo, FileHandle),
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        reply: ReplyWrite,
    ) {
        let r = self.changing(Op::Write, ino.0, |i| {
            let of = i.handles.get(fh.0)?;
            // FUSE_HANDLE_KILLPRIV_V2: a writer without CAP_FSETID drops
            // set-uid/set-gid, and it is ours to do.
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                i.fs.setattr(c, &of.vp, &SetAttr::kill_suidgid())?;
            }
            let write = || i.fs.write(&of.vp, of.fh, offset, data);
            let r = if i.fs.waits_for_devices() {
                i.write_stalls.timed(write)
            } else {
                write()
            };
            match r {
                Ok(n)
                    if (n as usize) < data.len()
                        && write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) =>
                {
                    store_what_fits(i, &of.vp, of.fh, offset, data, n as usize)
                }
                Err(e)
                    if write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) && data.len() > PAGE =>
                {
                    store_what_fits(i, &of.vp, of.fh, offset, data, 0).and(Err(e))
                }
                r => r,
            }
        });
        match r {
            Ok(n) => reply.written(n),
            Err(e) => {
                reply.error(errno(e));
                // Written back from the kernel's cache, which still shows
                // it: the cache must not outlive the refusal.
                if write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
                    self.inner
                        .forget_unwritten(ino.0, offset, data.len() as u64);
                }
            }
        }
    }
}

/// Pages of a write back from the kernel's cache.
const PAGE: usize = 4096;

/// The rest of a write back from the kernel's cache that the file system
/// took only in part (`done` bytes of `data`), stored page by page.
///
/// The kernel ignores the count a write back is answered with: a short
/// one (memfs or the source full) reads as all written, and `msync` and
/// `fsync` then succeed although the tail was never stored, and the
/// stores vanish once the pages leave the cache. And the cache's pages
/// are independent stores: one that cannot be stored (a hole in a full
/// file system) must not take the others of the same write with it, as
/// a tmpfs would have kept them. So each page is tried on its own, and
/// the first refusal is the answer (the caller drops the range from the
/// kernel's cache, so reads show what was stored).
fn store_what_fits(
    i: &Inner,
    vp: &uvfs_vfs::VnodeRef,
    fh: uvfs_vfs::Fh,
    offset: u64,
    data: &[u8],
    done: usize,
) -> VfsResult<u32> {
    let mut first_refusal = None;
    let mut at = done;
    while at < data.len() {
        // Up to the next page boundary of the file.
        let pos = offset + at as u64;
        let end = (at + PAGE - (pos % PAGE as u64) as usize).min(data.len());
        match i.fs.write(vp, fh, pos, &data[at..end]) {
            Ok(n) if n as usize == end - at => {}
            Ok(_) => {
                first_refusal.get_or_insert(Errno::ENOSPC);
            }
            Err(e) => {
                first_refusal.get_or_insert(e);
            }
        }
        at = end;
    }
    match first_refusal {
        Some(e) => Err(e),
        None => Ok(data.len() as u32),
    }
}

/// What a READ of `size` bytes answers with `data`: the kernel refuses a
/// reply longer than it asked for, failing the read with EIO and naming
/// no cause, so a file system that gives more (its mistake) has the rest
/// cut off, and the log says so, once.
fn within(data: &[u8], size: u32) -> &[u8] {
    if data.len() <= size as usize {
        return data;
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        log::warn!(
            "the file system answered a read of {size} bytes with {}: the rest is left out \
             (said once)",
            data.len()
        )
    });
    &data[..size as usize]
}
