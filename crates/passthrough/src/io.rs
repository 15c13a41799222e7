//! Open, create, read, write, sync, fallocate, copy_file_range.
//!
//! A file is opened by reopening its node's `O_PATH` fd through
//! `/proc/self/fd/N`, which names that exact inode: no path is resolved,
//! so a rename racing with the open cannot substitute another file. The
//! server opens as root (the kernel has checked the caller's access), with
//! the caller's flags minus those that only make sense to the kernel.

use crate::creds::AsCaller;
use crate::fdpool::Fd;
use crate::fs::{PassthroughFs, NOWAIT_MEMORY, NOWAIT_NONE};
use crate::sys;
use rustix::fs::SeekFrom;
use std::os::fd::AsFd;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Ctx, Errno, FallocMode, Fh, SetAttr, VType, VfsResult, VnodeRef, O_KILL_SUIDGID};

/// Flags the server never passes on: creation is `create`'s business,
/// `O_NOFOLLOW` would refuse the `/proc` magic link, `O_DIRECT` would make
/// the kernel's unaligned requests fail, a controlling tty is meaningless.
const STRIP: libc::c_int = libc::O_CREAT
    | libc::O_EXCL
    | libc::O_NOCTTY
    | libc::O_NOFOLLOW
    | libc::O_DIRECT
    | O_KILL_SUIDGID;

/// Largest single read served.
const MAX_READ: u32 = 16 << 20;

impl PassthroughFs {
    /// Opens `vp`'s file for an OPEN; unless `wait`, `EAGAIN` rather than
    /// wait for a lease held on it elsewhere to be given up.
    pub(crate) fn do_open(
        &self,
        ctx: &Ctx,
        vp: &VnodeRef,
        flags: i32,
        wait: bool,
    ) -> VfsResult<Fh> {
        let node = self.node_of(vp)?;
        match node.kind() {
            // The kernel never opens what it knows to be a symlink (it
            // follows it, or refuses O_NOFOLLOW itself), so an OPEN for one
            // comes from an inode the kernel holds for a file that is gone:
            // its inode number was freed and reused by this symlink, and the
            // node rebound to it (`vnode_from`), before the kernel learned
            // (a stress run met it: unlink, then a symlink at another name).
            // The file the caller meant no longer exists.
            VType::Lnk => return Err(Errno::ENOENT),
            VType::Dir if flags & libc::O_ACCMODE != libc::O_RDONLY => return Err(Errno::EISDIR),
            _ => {}
        }
        // An OPEN that raced with the mount's own removal of the file's
        // last name (the kernel had resolved the name before the unlink
        // reached us) and finds the file gone: it comes after the removal,
        // and sees what ext4 would show it then, no file. ESTALE would make
        // the kernel look again once, and a second race of the same kind
        // reached the caller as ESTALE (seen under TSan's stress). After a
        // rename over the name, though, the name still leads to a file,
        // which the caller must get (a file replaced in a loop, as editors
        // and package managers save): ESTALE, so the kernel looks the name
        // up again.
        let gone = |e: Errno| {
            if e == Errno::ESTALE
                && node.kind() == VType::Reg
                && node.nameless_by_mount()
                && !node.replaced_by_mount()
            {
                Errno::ENOENT
            } else {
                e
            }
        };
        // A node without a cached fd, while the pool's cache is full (a
        // `git grep` or a build reading more files than it holds), opens
        // straight by its handle with the open's flags: caching an
        // `O_PATH` fd first and reopening it through `/proc` would cost a
        // second open, a path walk and another node's fd, which the scan
        // would evict again before using it. With room in the cache the
        // fd is cached, as any use caches it: a file used again soon (a
        // save by rename racing an open: `namei.rs`, `removed`) keeps it.
        let fd = match node.cached_fd() {
            Some(fd) => Some(fd),
            None if node.ident().handle().is_some() && self.pool.cache_full() => None,
            None => Some(self.fd_of(&node).map_err(gone)?),
        };
        let res = match self.pool.reserve_open() {
            Ok(res) => res,
            // Past the open files' share of the budget: a description of
            // the file open with the same flags serves as well, else one
            // an idle open file gives back (`park.rs`).
            Err(Errno::EMFILE) if node.kind() == VType::Reg => {
                if let Some(shared) = self.share_open(&node, flags) {
                    drop(fd);
                    return self.opened(ctx, vp, node, shared, flags, true);
                }
                self.reserve_file(None)?
            }
            Err(e) => return Err(e),
        };
        // An open that conflicts with a lease another process holds on the
        // file starts the lease's break and waits for its holder to let it
        // go, for up to the host's `lease-break-time`; with O_NONBLOCK it
        // fails with EWOULDBLOCK (EAGAIN) at once instead, truncating
        // nothing. The flag is the server's, not the caller's: taken off
        // again.
        let nowait = !wait && node.kind() == VType::Reg && flags & libc::O_NONBLOCK == 0;
        let asked = if nowait {
            flags | libc::O_NONBLOCK
        } else {
            flags
        };
        let f = match &fd {
            Some(fd) => self.reopen_file(&node, fd.as_fd(), asked),
            None => self.open_by_handle(&node, asked),
        }
        .map_err(gone)?;
        drop(fd);
        if nowait {
            let fl = rustix::fs::fcntl_getfl(&f)?;
            rustix::fs::fcntl_setfl(&f, fl - rustix::fs::OFlags::NONBLOCK)?;
        }
        self.opened(ctx, vp, node, Arc::new(res.into_fd(f)), flags, false)
    }

    /// A description of `node`'s file for an open with `flags` past the
    /// open files' share of the budget, from another open of it
    /// (`OpenTable::share`); None if none is open so, or if `flags`
    /// truncates read-only (which needs a description of its own). No
    /// lease is broken: none can be held on a file this server has open
    /// with the same access (a read lease excludes writers, a write lease
    /// any other open).
    fn share_open(&self, node: &Arc<crate::node::Node>, flags: i32) -> Option<Arc<Fd>> {
        if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE == libc::O_RDONLY {
            return None;
        }
        let shared = self.opens.share(node, flags)?;
        self.pool
            .counters
            .opens_shared
            .fetch_add(1, Ordering::Relaxed);
        Some(shared)
    }

    /// Registers `f`, just opened on `node` for an OPEN with `flags` (or
    /// shared, and then truncated here if `flags` asks), unless the file
    /// it found is one the caller must not get.
    fn opened(
        &self,
        ctx: &Ctx,
        vp: &VnodeRef,
        node: Arc<crate::node::Node>,
        f: Arc<Fd>,
        flags: i32,
        shared: bool,
    ) -> VfsResult<Fh> {
        // The kernel opens by a name it caches until the entry times out;
        // a file removed behind the server's back meanwhile is still
        // reachable through our fd, and opening it would hand the caller
        // a file nobody else can see (SQLite, on the host and through the
        // mount, wrote its journal into one and failed at the unlink).
        // ESTALE makes the kernel look the name up again (LOOKUP_REVAL)
        // and open, or create, what the name holds now. A file the mount
        // itself removed is opened as it was when the name was resolved
        // (the open comes before the removal).
        if node.kind() == VType::Reg
            && !node.nameless_by_mount()
            && sys::statx_fd(f.as_fd())?.stx_nlink == 0
        {
            self.counters.stale.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::ESTALE);
        }
        // Removed by the mount and open through it nowhere: what the open
        // found is the closing thread's last hold on the file
        // (`closer.rs`), gone at any moment; the open comes after the
        // removal, as when that hold is gone already (`gone` above).
        // (A file renamed over that kept its fd for such opens is not
        // that hold: `namei.rs`, `removed`.)
        if node.kind() == VType::Reg
            && node.nameless_by_mount()
            && !node.is_orphan()
            && node.open_count() == 0
            && sys::statx_fd(f.as_fd())?.stx_nlink == 0
        {
            return Err(if node.replaced_by_mount() {
                Errno::ESTALE
            } else {
                Errno::ENOENT
            });
        }
        if shared && flags & libc::O_TRUNC != 0 {
            rustix::fs::ftruncate(&*f, 0)?;
        }
        let fh = self.opens.insert(f, node)?;
        // Truncated as root, who keeps set-uid: drop it as the caller's
        // own O_TRUNC would have (`create` truncates as the caller).
        if flags & O_KILL_SUIDGID != 0 && flags & libc::O_TRUNC != 0 {
            if let Err(e) = self.do_setattr(ctx, vp, &SetAttr::kill_suidgid()) {
                let _ = self.do_release(fh);
                return Err(e);
            }
        }
        Ok(fh)
    }

    pub(crate) fn do_opendir(&self, vp: &VnodeRef) -> VfsResult<Fh> {
        let node = self.node_of(vp)?;
        if node.kind() != VType::Dir {
            return Err(Errno::ENOTDIR);
        }
        let fd = self.fd_of(&node)?;
        // Within the whole budget; the pool's relief parks idle open
        // files if nothing else can be evicted (`park.rs`).
        let res = self.pool.reserve_opendir()?;
        let d = self.reading(libc::O_RDONLY | libc::O_DIRECTORY, |f| {
            self.open_to_read(&node, f, |f| sys::openat(fd.as_fd(), c".", f))
        })?;
        drop(fd);
        self.opens.insert(res.into_fd(d), node)
    }

    /// Opens with `open(flags)`, adding `O_NOATIME` where reads must leave
    /// atimes alone (`Atime::read_flags`). `O_NOATIME`
    /// needs the file's owner or CAP_FOWNER: a server without them for this
    /// file (in a user namespace, say) opens it as it can rather than
    /// failing the caller.
    /// `node`'s file (`fd`, its cached descriptor) opened anew as an OPEN
    /// with `flags` asks, less what only the caller's path walk or the
    /// creation meant (`STRIP`): `O_NOFOLLOW` on `/proc/self/fd/N` would
    /// refuse the magic link itself (ELOOP).
    pub(crate) fn reopen_file(
        &self,
        node: &crate::node::Node,
        fd: BorrowedFd<'_>,
        flags: libc::c_int,
    ) -> VfsResult<OwnedFd> {
        self.reading(flags & !STRIP, |f| {
            self.open_to_read(node, f, |f| sys::reopen(fd, f))
        })
    }

    /// `node`'s file opened by its handle with `flags` (less `STRIP`), as
    /// `reopen_file` would through a cached fd; `ESTALE` if the handle
    /// opens nothing or another file than the node's.
    fn open_by_handle(&self, node: &crate::node::Node, flags: libc::c_int) -> VfsResult<OwnedFd> {
        let ident = node.ident();
        let Some(h) = ident.handle() else {
            return Err(Errno::ESTALE);
        };
        let f = self.reading(flags & !STRIP, |f| {
            self.open_to_read(node, f, |f| {
                self.handles.open(h, f).map_err(|e| self.stale(e))
            })
        })?;
        // As `fd_of`'s reopen: the handle may lead to another inode now
        // (one removed and its number reused, where the handle was made
        // from the number alone: `by_ino.rs`).
        self.check_is_nodes(node, &sys::statx_fd(f.as_fd())?)?;
        self.counters.open_by_handle.fetch_add(1, Ordering::Relaxed);
        Ok(f)
    }

    fn reading(
        &self,
        flags: libc::c_int,
        open: impl Fn(libc::c_int) -> VfsResult<OwnedFd>,
    ) -> VfsResult<OwnedFd> {
        let extra = self.atime.read_flags(flags & libc::O_DIRECTORY != 0);
        if extra == 0 {
            return open(flags);
        }
        match open(flags | extra) {
            Err(Errno::EPERM) => open(flags),
            r => r,
        }
    }

    /// `node`'s file opened anew with `flags`: on the clone of the
    /// source's mount where one applies the mount's atime rule
    /// (`atime.rs`), by the node's handle, checked to be the node's file;
    /// else, or if that fails (no handle of the source's file system, a
    /// removed file), by `on_source` (on the source's mount, with
    /// `O_NOATIME` where the rule says so and no clone applies it).
    fn open_to_read(
        &self,
        node: &crate::node::Node,
        flags: libc::c_int,
        on_source: impl Fn(libc::c_int) -> VfsResult<OwnedFd>,
    ) -> VfsResult<OwnedFd> {
        if let Some(clone) = self.atime.clone_to_open() {
            if let Some(h) = node.ident().handle() {
                let on_clone = self
                    .handles
                    .open_on(clone.mount_fd(), h, flags)
                    .ok()
                    .filter(|f| {
                        sys::statx_fd(f.as_fd()).is_ok_and(|st| {
                            st.stx_ino == node.ino && sys::stx_dev(&st) == node.dev()
                        })
                    });
                if let Some(f) = on_clone {
                    return Ok(f);
                }
            }
            // `reading` added no O_NOATIME, the clone would have applied
            // the rule.
            let extra = self.atime.noatime_flag(flags & libc::O_DIRECTORY != 0);
            if extra != 0 {
                match on_source(flags | extra) {
                    Err(Errno::EPERM) => {}
                    r => return r,
                }
            }
        }
        on_source(flags)
    }

    pub(crate) fn do_create(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        uvfs_vfs::check_new_name(name)?;
        let dnode = self.node_of(dir)?;
        let cname = sys::cstr(name)?;
        let dfd = self.fd_of(&dnode)?;
        let res = self.reserve_file(None)?;
        let flags = (flags & !STRIP) | libc::O_CREAT | (flags & libc::O_EXCL);
        let f = {
            let _as = AsCaller::switch(ctx)?;
            // A symlink at the name is refused (ELOOP), never followed.
            let mode = self.creation_mode(dfd.as_fd(), mode & 0o7777, ctx.umask);
            sys::open_beneath(dfd.as_fd(), &cname, flags, mode)?
        };
        drop(dfd);
        let path_fd = self.path_fd_of(&f)?;
        let (vp, _) = self.vnode_from_fd(path_fd, Some((&dnode, name)))?;
        let node = self.node_of(&vp)?;
        Ok((vp, self.opens.insert(res.into_fd(f), node)?))
    }

    /// `O_TMPFILE` in the backing directory, as the caller. The node has no
    /// name to reopen it by, and its handle opens nothing while its link
    /// count is 0, so its fd is kept from the evictor (an orphan's) until
    /// `link` names it; never named, the vnode is recycled, and the backing
    /// inode freed, once the kernel forgets it after the last close. The
    /// backing file system enforces `O_EXCL` (no later link) itself.
    pub(crate) fn do_tmpfile(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        mode: u32,
        flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        let dnode = self.node_of(dir)?;
        if dnode.kind() != VType::Dir {
            return Err(Errno::ENOTDIR);
        }
        let dfd = self.fd_of(&dnode)?;
        let res = self.reserve_file(None)?;
        let flags = (flags & !STRIP) | libc::O_TMPFILE | (flags & libc::O_EXCL);
        let f = {
            let _as = AsCaller::switch(ctx)?;
            let mode = self.creation_mode(dfd.as_fd(), mode & 0o7777, ctx.umask);
            sys::openat_mode(dfd.as_fd(), c".", flags, mode)?
        };
        drop(dfd);
        let path_fd = self.path_fd_of(&f)?;
        let (vp, _) = self.vnode_from_fd(path_fd, None)?;
        let node = self.node_of(&vp)?;
        node.set_orphan(true);
        vp.recycle_when_free();
        Ok((vp, self.opens.insert(res.into_fd(f), node)?))
    }

    pub(crate) fn do_read(&self, fh: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        let fd = self.fh_fd(fh)?;
        read_with(&fd, offset, size, sys::pread)
    }

    /// `do_read`, or `EAGAIN` if any of it must come from the disk. Data
    /// read before that is dropped, not answered: a short READ reply is
    /// end of file to the kernel. Sources without `RWF_NOWAIT` (tmpfs, a
    /// FUSE source) are read here if they keep files in memory, else
    /// answered `EAGAIN`; for the source root's device, which holds
    /// nearly every file, that is found out once.
    pub(crate) fn do_read_nowait(&self, fh: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        let of = self.opens.get(fh)?;
        let own = of.node.dev() == self.root.dev();
        match own.then(|| self.nowait.load(Ordering::Relaxed)) {
            Some(NOWAIT_MEMORY) => {
                return read_with(&*self.file_fd(&of)?, offset, size, sys::pread)
            }
            Some(NOWAIT_NONE) => return Err(Errno::EAGAIN),
            _ => {}
        }
        // A parked handle's reopening may wait (a lease): not now.
        let fd = of.held().ok_or(Errno::EAGAIN)?;
        match read_with(&fd, offset, size, sys::pread_nowait) {
            Err(Errno::EOPNOTSUPP) => {
                let memory = sys::in_memory_fs(fd.as_fd());
                if own {
                    let how = if memory { NOWAIT_MEMORY } else { NOWAIT_NONE };
                    self.nowait.store(how, Ordering::Relaxed);
                }
                if memory {
                    read_with(&fd, offset, size, sys::pread)
                } else {
                    Err(Errno::EAGAIN)
                }
            }
            r => r,
        }
    }

    /// The backing file system's own answer (its extents, not pages).
    /// Moves the backing file's offset, which nothing uses (all I/O is
    /// positioned).
    pub(crate) fn do_seek_data(&self, fh: Fh, offset: u64, hole: bool) -> VfsResult<u64> {
        let fd = self.fh_fd(fh)?;
        i64::try_from(offset).map_err(|_| Errno::ENXIO)?;
        let whence = if hole {
            SeekFrom::Hole(offset)
        } else {
            SeekFrom::Data(offset)
        };
        Ok(rustix::fs::seek(&fd, whence)?)
    }

    pub(crate) fn do_write(&self, fh: Fh, offset: u64, data: &[u8]) -> VfsResult<u32> {
        let fd = self.fh_fd(fh)?;
        let mut done = 0;
        while done < data.len() {
            match sys::pwrite(fd.as_fd(), &data[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                // Part written: report that much, as write(2) would.
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            }
        }
        u32::try_from(done).map_err(|_| Errno::EINVAL)
    }

    pub(crate) fn do_fsync(&self, fh: Fh, datasync: bool) -> VfsResult<()> {
        let fd = self.fh_fd(fh)?;
        if datasync {
            Ok(rustix::fs::fdatasync(&fd)?)
        } else {
            Ok(rustix::fs::fsync(&fd)?)
        }
    }

    pub(crate) fn do_release(&self, fh: Fh) -> VfsResult<()> {
        let of = self.opens.get(fh)?;
        let node = of.node.clone();
        self.opens.remove(fh)?;
        // Its flock locks go with it, the supervisor's duplicate too.
        if of.kept.load(std::sync::atomic::Ordering::Relaxed) {
            // Unlocked, not only closed: the first open of a file is the
            // one the kernel does its I/O through (`backing_file`), and
            // the kernel holds that description while any open of the
            // file remains; closing ours would leave the lock held.
            if let Some(fd) = of.flock_fd() {
                let _ = rustix::fs::flock(&*fd, rustix::fs::FlockOperation::NonBlockingUnlock);
            }
            self.posix_locks
                .keeper
                .forget(crate::kept::Kept::Open { node: node.id, fh });
        }
        drop(of);
        self.posix_locks.release(&node, fh);
        Ok(())
    }

    pub(crate) fn do_fallocate(
        &self,
        fh: Fh,
        mode: FallocMode,
        offset: u64,
        len: u64,
    ) -> VfsResult<()> {
        let fd = self.fh_fd(fh)?;
        i64::try_from(offset).map_err(|_| Errno::EFBIG)?;
        i64::try_from(len).map_err(|_| Errno::EFBIG)?;
        let mode = rustix::fs::FallocateFlags::from_bits_retain(mode.0 as u32);
        Ok(rustix::fs::fallocate(&fd, mode, offset, len)?)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_copy_file_range(
        &self,
        fh_in: Fh,
        off_in: u64,
        fh_out: Fh,
        off_out: u64,
        len: u64,
        flags: u32,
    ) -> VfsResult<u64> {
        let a = self.fh_fd(fh_in)?;
        let b = self.fh_fd(fh_out)?;
        i64::try_from(off_in).map_err(|_| Errno::EINVAL)?;
        i64::try_from(off_out).map_err(|_| Errno::EINVAL)?;
        let (mut oi, mut oo) = (off_in, off_out);
        // The reply carries 32 bits of length.
        let len = usize::try_from(len.min(u64::from(u32::MAX) & !4095)).unwrap_or(0);
        // No flags are defined: the kernel refuses any.
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        let n = rustix::fs::copy_file_range(&a, Some(&mut oi), &b, Some(&mut oo), len)?;
        Ok(n as u64)
    }
}

/// Reads up to `size` bytes at `offset` of `fd` with `pread`, until full
/// or end of file.
fn read_with(
    fd: &Fd,
    offset: u64,
    size: u32,
    pread: fn(BorrowedFd<'_>, &mut [u8], u64) -> VfsResult<usize>,
) -> VfsResult<Vec<u8>> {
    let mut buf = vec![0u8; size.min(MAX_READ) as usize];
    let mut got = 0;
    while got < buf.len() {
        let n = pread(fd.as_fd(), &mut buf[got..], offset + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}
