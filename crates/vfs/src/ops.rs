//! The file-system operations (VOPs): what memfs and passthrough implement.
//!
//! # Vnode references
//! Every operation names files by [`VnodeRef`]s obtained from the vnode
//! layer: the caller holds a use reference for the duration of the call,
//! so the vnode cannot be recycled underneath it, and an operation that
//! yields a file (`lookup`, `create`, ...) returns a fresh use reference.
//! The FUSE adapter turns the kernel's lookup counts into holds on these
//! vnodes; other front ends can do the same.
//!
//! # Name cache
//! A file system keeps the layer's name cache right itself: it enters
//! names on `lookup` (negative entries on `ENOENT`) and removes them on
//! `unlink`, `rmdir` and `rename`, while it holds the directory's lock so
//! that a lookup cannot re-enter a name that a concurrent removal took out.
//!
//! # Permissions
//! VOPs do not check permissions: like the Linux VFS, the caller does
//! (the FUSE server mounts with `default_permissions`). Ownership rules
//! that are part of an operation's result (set-gid inheritance, clearing
//! set-uid on chown) are the file system's.

use crate::access::check_access;
use crate::attr::{Attr, SetAttr};
use crate::ctx::Ctx;
use crate::dirent::DirEntry;
use crate::errno::{Errno, VfsResult};
use crate::fileattr::FsXattr;
use crate::flags::{FallocMode, RenameFlags, XattrFlags};
use crate::lock::FileLock;
use crate::statfs::StatFs;
use crate::trim::TrimRange;
use std::os::fd::AsFd;
use std::sync::Arc;
use uvfs_vnode::{Ino, Mount, VType, VnodeRef};

/// A file system's handle for an open file or directory; opaque to callers.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fh(pub u64);

/// Receives directory entries; returns `true` when it is full (the entry
/// it was given was not taken and the scan stops).
pub type DirSink<'a> = dyn FnMut(&DirEntry) -> bool + 'a;

/// Receives directory entries with the entry's vnode and attributes;
/// returns `true` when full, like [`DirSink`]. `None` for `.` and `..`,
/// and for an entry to be listed by name alone: the kernel is not handed
/// its node (no lookup count) and keeps what it holds of it, which suits
/// an entry whose node and attributes it was just given.
pub type DirPlusSink<'a> = dyn FnMut(&DirEntry, Option<(&VnodeRef, &Attr)>) -> bool + 'a;

/// The operations of one mounted file system.
///
/// A read-only file system implements seven methods: [`fs_type`],
/// [`mount`], [`root`], [`lookup`], [`getattr`], [`read`] and [`readdir`]
/// (and [`open`] and [`readlink`] where their defaults do not fit). Every
/// method that changes the file system defaults to `EROFS`, extended
/// attributes to "none" (`ENODATA` on get, `EOPNOTSUPP` on set), the rest
/// to what a simple file system wants (`examples/hello.rs` in the
/// `uvfs-fuse` crate serves one file in about sixty lines).
///
/// Methods are called on the server's request threads. Over FUSE over
/// io_uring (the default where the kernel offers it) each CPU has one
/// queue, served one request at a time: a method that blocks (a slow
/// device, a network, a lock held elsewhere) holds up every other
/// request of that CPU's callers until it returns. A file system whose
/// methods may wait for a device says so with [`waits_for_devices`]
/// (`fsync`, `fallocate` and `copy_file_range` then run off the queue,
/// and reads are tried without waiting first); other waits belong off
/// the request path, or the server serves through `/dev/fuse` (its
/// `ServeConfig::uring` off), whose threads wait side by side.
///
/// [`waits_for_devices`]: FileSystem::waits_for_devices
///
/// [`fs_type`]: FileSystem::fs_type
/// [`mount`]: FileSystem::mount
/// [`root`]: FileSystem::root
/// [`lookup`]: FileSystem::lookup
/// [`getattr`]: FileSystem::getattr
/// [`read`]: FileSystem::read
/// [`readdir`]: FileSystem::readdir
/// [`open`]: FileSystem::open
/// [`readlink`]: FileSystem::readlink
pub trait FileSystem: Send + Sync + 'static {
    /// The file-system type, e.g. `"memfs"`.
    fn fs_type(&self) -> &'static str;

    /// The vnode-layer mount this file system's vnodes belong to.
    fn mount(&self) -> &Arc<Mount>;

    /// The root directory.
    fn root(&self) -> VfsResult<VnodeRef>;

    /// Finds `name` in `dir` (`.` is `dir`, `..` its parent).
    fn lookup(&self, ctx: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef>;

    /// The file's attributes.
    fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr>;

    /// `lookup` and the found file's attributes. A file system whose
    /// lookup learns the attributes anyway (a passthrough's `statx` of the
    /// name) answers both from that one call: the kernel revalidates a
    /// cached name with a LOOKUP whose reply carries the attributes, so a
    /// separate `getattr` would make every revalidation pay for the file
    /// twice. The default looks up, then asks `getattr`.
    fn lookup_attr(&self, ctx: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<(VnodeRef, Attr)> {
        let vp = self.lookup(ctx, dir, name)?;
        let attr = self.getattr(&vp)?;
        Ok((vp, attr))
    }

    /// Changes attributes and returns the new ones. Default: `EROFS`.
    fn setattr(&self, _ctx: &Ctx, _vp: &VnodeRef, _set: &SetAttr) -> VfsResult<Attr> {
        Err(Errno::EROFS)
    }

    /// Checks `mask` (`R_OK|W_OK|X_OK`) for `ctx`; the default uses the
    /// owner and primary group only.
    fn access(&self, ctx: &Ctx, vp: &VnodeRef, mask: u32) -> VfsResult<()> {
        check_access(&self.getattr(vp)?, ctx, mask)
    }

    /// A symlink's target. Default: `EINVAL` (not a symlink), for file
    /// systems that have none.
    fn readlink(&self, _vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        Err(Errno::EINVAL)
    }

    /// Makes a file of the type in `mode`'s `S_IFMT` bits (regular, device,
    /// FIFO, socket); `rdev` is the device number. Default: `EROFS`.
    fn mknod(
        &self,
        _ctx: &Ctx,
        _dir: &VnodeRef,
        _name: &[u8],
        _mode: u32,
        _rdev: u64,
    ) -> VfsResult<VnodeRef> {
        Err(Errno::EROFS)
    }

    /// Makes a directory. Default: `EROFS`.
    fn mkdir(&self, _ctx: &Ctx, _dir: &VnodeRef, _name: &[u8], _mode: u32) -> VfsResult<VnodeRef> {
        Err(Errno::EROFS)
    }

    /// Makes a symbolic link to `target`. Default: `EROFS`.
    fn symlink(
        &self,
        _ctx: &Ctx,
        _dir: &VnodeRef,
        _name: &[u8],
        _target: &[u8],
    ) -> VfsResult<VnodeRef> {
        Err(Errno::EROFS)
    }

    /// Adds the name `name` in `dir` for `vp` (not a directory). Default:
    /// `EROFS`.
    fn link(&self, _ctx: &Ctx, _vp: &VnodeRef, _dir: &VnodeRef, _name: &[u8]) -> VfsResult<()> {
        Err(Errno::EROFS)
    }

    /// Removes a non-directory name; the file lives on while it is in use.
    /// Default: `EROFS`.
    fn unlink(&self, _ctx: &Ctx, _dir: &VnodeRef, _name: &[u8]) -> VfsResult<()> {
        Err(Errno::EROFS)
    }

    /// Removes an empty directory. Default: `EROFS`.
    fn rmdir(&self, _ctx: &Ctx, _dir: &VnodeRef, _name: &[u8]) -> VfsResult<()> {
        Err(Errno::EROFS)
    }

    /// Renames, honouring `RENAME_NOREPLACE` and `RENAME_EXCHANGE`.
    /// Default: `EROFS`.
    fn rename(
        &self,
        _ctx: &Ctx,
        _dir: &VnodeRef,
        _name: &[u8],
        _newdir: &VnodeRef,
        _newname: &[u8],
        _flags: RenameFlags,
    ) -> VfsResult<()> {
        Err(Errno::EROFS)
    }

    /// Creates (or, without `O_EXCL`, opens an existing) regular file and
    /// opens it with the `open(2)` flags `flags`. Default: `EROFS`.
    fn create(
        &self,
        _ctx: &Ctx,
        _dir: &VnodeRef,
        _name: &[u8],
        _mode: u32,
        _flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        Err(Errno::EROFS)
    }

    /// Creates an unnamed regular file in `dir` (`O_TMPFILE`) and opens it
    /// with the `open(2)` flags `flags`. Its link count is 0 until `link`
    /// names it, which must be refused (`ENOENT`) if `flags` had `O_EXCL`.
    /// The default, `ENOSYS`, makes the kernel answer `EOPNOTSUPP` to
    /// `O_TMPFILE` from then on.
    fn tmpfile(
        &self,
        _ctx: &Ctx,
        _dir: &VnodeRef,
        _mode: u32,
        _flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        Err(Errno::ENOSYS)
    }

    /// Opens a file with the `open(2)` flags `flags`. Default: handle 0
    /// for reading, `EROFS` for writing or truncating.
    fn open(&self, _ctx: &Ctx, _vp: &VnodeRef, flags: i32) -> VfsResult<Fh> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return Err(Errno::EROFS);
        }
        Ok(Fh(0))
    }

    /// Reads up to `size` bytes at `offset`; fewer at end of file.
    fn read(&self, vp: &VnodeRef, fh: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>>;

    /// Writes `data` at `offset`; returns how many bytes were written (short
    /// only when space runs out part way). Default: `EROFS`.
    fn write(&self, _vp: &VnodeRef, _fh: Fh, _offset: u64, _data: &[u8]) -> VfsResult<u32> {
        Err(Errno::EROFS)
    }

    /// Called on each `close(2)` of a descriptor.
    fn flush(&self, _vp: &VnodeRef, _fh: Fh) -> VfsResult<()> {
        Ok(())
    }

    /// Whether `flush` must hear of every close. `false` lets the server
    /// tell the kernel to skip FLUSH (FOPEN_NOFLUSH), which spares every
    /// `close(2)` a round trip: half of what opening and closing a cached
    /// file costs. The kernel still writes a shared mapping's dirty pages
    /// back when it is unmapped; what a close then does not report is an
    /// error of that write-back, which `fsync` reports (as on a native
    /// file system, whose close reports none). A file system that keeps
    /// locks (`forwards_locks`) gets every FLUSH whatever this says, as
    /// POSIX drops a process's record locks on any close of the file.
    fn needs_flush(&self) -> bool {
        true
    }

    /// The backing file of open file `fh`, for the kernel to read, write
    /// and map itself (FUSE passthrough): data then never crosses the
    /// server and is cached once, in the backing file system. The kernel
    /// opens its own file on the backing file's path with the caller's
    /// open flags, so this suits a file system whose files are files of
    /// another (a passthrough), and only while their reads may move the
    /// backing file's atime. None (the default): READ and WRITE requests.
    fn backing_file(&self, _vp: &VnodeRef, _fh: Fh) -> Option<Arc<dyn AsFd + Send + Sync>> {
        None
    }

    /// Makes data (and, unless `datasync`, metadata) durable.
    fn fsync(&self, _vp: &VnodeRef, _fh: Fh, _datasync: bool) -> VfsResult<()> {
        Ok(())
    }

    /// The last reference to an open file went away.
    fn release(&self, _vp: &VnodeRef, _fh: Fh) -> VfsResult<()> {
        Ok(())
    }

    /// Opens a directory for reading.
    fn opendir(&self, _ctx: &Ctx, vp: &VnodeRef, _flags: i32) -> VfsResult<Fh> {
        if vp.vtype() == VType::Dir {
            Ok(Fh(0))
        } else {
            Err(Errno::ENOTDIR)
        }
    }

    /// Lists entries after cookie `offset` (0 = from the start, `.` and
    /// `..` included) into `sink` until it is full or the directory ends.
    fn readdir(&self, dir: &VnodeRef, fh: Fh, offset: u64, sink: &mut DirSink<'_>)
        -> VfsResult<()>;

    /// Like `readdir`, with each entry's vnode and attributes. The default
    /// looks every name up; file systems that can do better override it.
    fn readdirplus(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        fh: Fh,
        offset: u64,
        sink: &mut DirPlusSink<'_>,
    ) -> VfsResult<()> {
        let mut entries = Vec::new();
        self.readdir(dir, fh, offset, &mut |e| {
            entries.push(e.clone());
            entries.len() >= 1024
        })?;
        for e in &entries {
            if crate::name::is_dot_or_dotdot(&e.name) {
                if sink(e, None) {
                    break;
                }
                continue;
            }
            // A name removed since the listing is skipped, as if the scan
            // had come after the removal; so is one whose lookup panics
            // (a bug of the file system's, which fails a LOOKUP of that
            // name, not the listing of every other).
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let vp = self.lookup(ctx, dir, &e.name).ok()?;
                let attr = self.getattr(&vp).ok()?;
                Some((vp, attr))
            }));
            let Ok(Some((vp, attr))) = found else {
                continue;
            };
            if sink(e, Some((&vp, &attr))) {
                break;
            }
        }
        Ok(())
    }

    /// The last reference to an open directory went away.
    fn releasedir(&self, _vp: &VnodeRef, _fh: Fh) -> VfsResult<()> {
        Ok(())
    }

    /// An extended attribute's value. Default: `ENODATA` (none).
    fn getxattr(&self, _vp: &VnodeRef, _name: &[u8]) -> VfsResult<Vec<u8>> {
        Err(Errno::ENODATA)
    }

    /// Sets an extended attribute. Default: `EOPNOTSUPP`.
    fn setxattr(
        &self,
        _ctx: &Ctx,
        _vp: &VnodeRef,
        _name: &[u8],
        _value: &[u8],
        _flags: XattrFlags,
    ) -> VfsResult<()> {
        Err(Errno::EOPNOTSUPP)
    }

    /// The names of all extended attributes, each followed by a NUL.
    /// Default: none.
    fn listxattr(&self, _vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        Ok(Vec::new())
    }

    /// Removes an extended attribute. Default: `EOPNOTSUPP`.
    fn removexattr(&self, _ctx: &Ctx, _vp: &VnodeRef, _name: &[u8]) -> VfsResult<()> {
        Err(Errno::EOPNOTSUPP)
    }

    /// The inode flags of `vp` (`FS_*_FL`, what `lsattr` shows), open as
    /// `fh` (a regular file or a directory). The default, `ENOTTY`, is
    /// what a file system without flags answers `FS_IOC_GETFLAGS`.
    fn get_flags(&self, _vp: &VnodeRef, _fh: Fh) -> VfsResult<u32> {
        Err(Errno::ENOTTY)
    }

    /// Sets the inode flags of `vp` to `flags` (`chattr`); `EOPNOTSUPP`
    /// for a flag the file system does not keep. The caller has checked
    /// that `ctx` may: owns the file, and may change `FS_NEED_CAP_FL`
    /// flags if they change (`CAP_LINUX_IMMUTABLE`). A file system that
    /// keeps `FS_IMMUTABLE_FL` or `FS_APPEND_FL` itself enforces them in
    /// every other operation, as Linux's VFS does for native file systems
    /// (FUSE's kernel side knows nothing of them).
    fn set_flags(&self, _ctx: &Ctx, _vp: &VnodeRef, _fh: Fh, _flags: u32) -> VfsResult<()> {
        Err(Errno::ENOTTY)
    }

    /// `FS_IOC_FSGETXATTR` of `vp`. The kernel asks it before every
    /// change of flags (either form). The default derives it from
    /// `get_flags`, as Linux does for file systems without it.
    fn get_fsxattr(&self, vp: &VnodeRef, fh: Fh) -> VfsResult<FsXattr> {
        self.get_flags(vp, fh).map(FsXattr::from_flags)
    }

    /// `FS_IOC_FSSETXATTR` of `vp`; permissions as `set_flags`. The
    /// default keeps the flags without an `FS_XFLAG_*` twin and sets the
    /// others through `set_flags`, refusing (`EOPNOTSUPP`) what only
    /// `fsxattr` can say (extent hints, project ids).
    fn set_fsxattr(&self, ctx: &Ctx, vp: &VnodeRef, fh: Fh, x: &FsXattr) -> VfsResult<()> {
        if x.has_fsx_only() {
            return Err(Errno::EOPNOTSUPP);
        }
        let old = self.get_flags(vp, fh)?;
        self.set_flags(ctx, vp, fh, (old & !crate::FS_COMMON_FL) | x.flags())
    }

    /// `FITRIM` through `vp` (open as `fh`): discards the free space in
    /// `range` of the file system that holds the files, and returns the
    /// bytes discarded. The caller has checked that `ctx` may
    /// (`CAP_SYS_ADMIN`, as Linux asks). The default, `ENOTTY`, suits a
    /// file system on no device.
    fn trim(&self, _ctx: &Ctx, _vp: &VnodeRef, _fh: Fh, _range: TrimRange) -> VfsResult<u64> {
        Err(Errno::ENOTTY)
    }

    /// File-system statistics. Default: no space, names up to 255 bytes.
    fn statfs(&self) -> VfsResult<StatFs> {
        Ok(StatFs {
            bsize: 4096,
            frsize: 4096,
            namelen: 255,
            ..StatFs::default()
        })
    }

    /// Allocates, zeroes or punches `[offset, offset+len)`. Default:
    /// `EOPNOTSUPP`.
    fn fallocate(
        &self,
        _vp: &VnodeRef,
        _fh: Fh,
        _mode: FallocMode,
        _offset: u64,
        _len: u64,
    ) -> VfsResult<()> {
        Err(Errno::EOPNOTSUPP)
    }

    /// Told once mounted: the device number of the mount serving this file
    /// system. A file system that reaches other file systems by path (a
    /// passthrough whose source holds a path to this very mount, say through
    /// a bind mount) must refuse to walk into it: its own request would wait
    /// on a request only it can answer. The default ignores it.
    fn mounted_as(&self, _dev: u64) {}

    /// The mount's flags as the kernel holds them now (mount(2)'s
    /// `MS_RDONLY`, `MS_NOATIME`, `MS_NODIRATIME`, `MS_RELATIME`,
    /// `MS_STRICTATIME`; `MS_RDONLY` also for a server serving
    /// read-only whatever the kernel's mount says): told once mounted and
    /// after every `mount -o remount`. The kernel moves no atime of a FUSE
    /// file itself (it leaves them to the server) and tells the server of
    /// no remount, so a file system that keeps atimes applies these. The
    /// default ignores them.
    fn remounted(&self, _flags: u64) {}

    /// Whether a read of `vp`'s contents now would move its atime. A read
    /// the kernel serves from its page cache never reaches the file
    /// system: an open of such a file has the kernel drop its cached
    /// pages (no `FOPEN_KEEP_CACHE`), so the first read reaches the file
    /// system and moves the atime. The default: never.
    fn read_moves_atime(&self, _vp: &VnodeRef) -> bool {
        false
    }

    /// Reserves `n` descriptors of the file system's fd budget for ones the
    /// server opens beside its requests (the directory refresher's clone of
    /// the mount and a path in it, for a moment): a file system that bounds
    /// its fds counts them as its own, so the process stays within the
    /// budget it promised. None if the budget cannot spare them now (the
    /// server then does without). The default bounds nothing.
    fn reserve_fds(&self, _n: usize) -> Option<crate::FdReservation> {
        Some(crate::FdReservation::default())
    }

    /// File-system specific statistics as (name, value, description).
    fn fs_stats(&self) -> Vec<(&'static str, u64, &'static str)> {
        Vec::new()
    }

    /// `lseek(SEEK_DATA)` (`hole` false) or `lseek(SEEK_HOLE)` (`hole`
    /// true) from `offset` in an open file: where the next data or hole
    /// starts (the end of file counts as a hole); `ENXIO` at or past the
    /// end. The default, `ENOSYS`, makes the kernel treat the whole file
    /// as data.
    fn seek_data(&self, _vp: &VnodeRef, _fh: Fh, _offset: u64, _hole: bool) -> VfsResult<u64> {
        Err(Errno::ENOSYS)
    }

    /// Whether files can change without the server knowing (a passthrough's
    /// source, written on the host): the kernel is then asked to drop a
    /// file's cached pages when it sees its mtime or size change
    /// (`FUSE_AUTO_INVAL_DATA`); otherwise it keeps them across opens.
    fn changes_outside(&self) -> bool {
        false
    }

    /// Whether operations may wait for a device (a backing file system's
    /// disk) rather than finish in memory. A server whose request loops
    /// serve one request at a time each (an io_uring queue per CPU) then
    /// runs `fsync`, `fallocate` and `copy_file_range` elsewhere, and
    /// tries reads with `read_nowait` first, so that none of them holds up
    /// the loop's other requests.
    fn waits_for_devices(&self) -> bool {
        false
    }

    /// Whether `what` may free so much of the backing store that the call
    /// blocks for long: ext4 frees a file's blocks in its last unlink or
    /// last close, which takes a large fraction of a second for a file of
    /// gigabytes. A server
    /// whose request loops serve one request at a time (an io_uring queue
    /// per CPU) asks before such requests and serves them elsewhere if so,
    /// so that `rm` of a large file does not hold up every other request
    /// from its CPU. Asked only there, and only of file systems that
    /// `waits_for_devices`; must be cheap and may guess: a wrong yes costs
    /// a hand-off to another thread, a wrong no the stall. The default:
    /// never.
    fn may_free_much(&self, _what: crate::Freeing<'_>) -> bool {
        false
    }

    /// Whether a request that makes a file, a name or an attribute may
    /// now have to wait for space that files being let go still hold (a
    /// nearly full inode budget while unlinked or nameless files await
    /// their RELEASE and FORGET). A server whose request loops serve one
    /// request at a time (io_uring queues) then serves such requests
    /// elsewhere, so that the RELEASE they wait for is not queued behind
    /// them. Checked per request: must be cheap. The default: never.
    fn short_of_space(&self) -> bool {
        false
    }

    /// Like `open`, but `EAGAIN` instead of waiting for another process
    /// to let the file go (the holder of a lease on a backing file has
    /// the host's `lease-break-time` to give it up before an open that
    /// conflicts goes on); the caller then opens with `open` where waiting
    /// holds up nothing. The default opens.
    fn open_nowait(&self, ctx: &Ctx, vp: &VnodeRef, flags: i32) -> VfsResult<Fh> {
        self.open(ctx, vp, flags)
    }

    /// Like `read`, but `EAGAIN` instead of waiting for a device (the
    /// data is not in memory yet); the caller then reads it where waiting
    /// holds up nothing. The default reads.
    fn read_nowait(&self, vp: &VnodeRef, fh: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        self.read(vp, fh, offset, size)
    }

    /// Starts reporting changes made behind the front end's back to
    /// `sink` (see `changes.rs`), if the file system watches for them.
    /// The default watches nothing.
    fn watch(&self, _sink: std::sync::Arc<dyn crate::ChangeSink>) {}

    /// The watcher's state; `None` for a file system with none.
    fn watch_status(&self) -> Option<crate::WatchStatus> {
        None
    }

    /// The longest the front end may cache what it learns of `vp` (its
    /// attributes, its name, and names in it when a directory), or `None`
    /// for the front end's own timeouts. A file system that lets the
    /// front end cache for long because a watcher reports every change
    /// caps what the watcher cannot see (files on another file system
    /// inside a passthrough's source, or everything once the watcher
    /// stopped). Asked per reply: must be cheap.
    fn cache_limit(&self, _vp: &VnodeRef) -> Option<std::time::Duration> {
        None
    }

    /// Whether file locks are this file system's to keep (passed on to a
    /// backing file system, where they meet its other users' locks) rather
    /// than the kernel's own, local to the mount (the default: then
    /// `getlk`, `setlk` and `unlock_owner` are never called).
    fn forwards_locks(&self) -> bool {
        false
    }

    /// The first lock that would conflict with `lock` asked by POSIX lock
    /// owner `owner`, or `lock` itself with `typ: F_UNLCK` if none would.
    fn getlk(&self, _vp: &VnodeRef, _fh: Fh, _owner: u64, _lock: &FileLock) -> VfsResult<FileLock> {
        Err(Errno::ENOSYS)
    }

    /// The POSIX lock owner (one of this mount's callers) holding the
    /// lock that keeps `owner` from taking `lock`, if the file system can
    /// tell. The server follows such holders' own waits and answers
    /// `EDEADLK` to a wait that would close a cycle, as the kernel does
    /// for local POSIX locks. None (the default): not known, no deadlock
    /// is detected (a file system whose `setlk` finds them itself needs
    /// none). Also None where `owner` or the holder may be an open file's
    /// (OFD) owner: the kernel searches processes' locks only, and a
    /// request does not say which kind its owner is.
    fn lock_holder(&self, _vp: &VnodeRef, _owner: u64, _lock: &FileLock) -> Option<u64> {
        None
    }

    /// Takes, changes or drops `lock` without waiting (`EAGAIN` while
    /// another holder's lock conflicts; the server does the waiting). With
    /// `flock` it is a `flock(2)` lock, held by the open file `fh`;
    /// otherwise a POSIX record lock held by `owner`.
    fn setlk(
        &self,
        _vp: &VnodeRef,
        _fh: Fh,
        _owner: u64,
        _lock: &FileLock,
        _flock: bool,
    ) -> VfsResult<()> {
        Err(Errno::ENOSYS)
    }

    /// `owner` closed a descriptor of `vp`: POSIX drops every record lock
    /// it holds on the file (the kernel says so with the FLUSH of each
    /// close).
    fn unlock_owner(&self, _vp: &VnodeRef, _owner: u64) -> VfsResult<()> {
        Ok(())
    }

    /// Whether the file system stores POSIX ACLs (the `system.posix_acl_*`
    /// extended attributes) for the kernel to enforce (`FUSE_POSIX_ACL`).
    /// Such a file system must answer `ENODATA`, not `EOPNOTSUPP`, for a
    /// file without them: the kernel fails permission checks on any other
    /// error.
    fn posix_acls(&self) -> bool {
        false
    }

    /// The vnode of inode `ino` if that file still exists, found without
    /// a name (FreeBSD's `VFS_VGET`): how a file handle is opened again
    /// after the kernel forgot the node (`open_by_handle_at`, NFS export).
    /// The default, `ESTALE`, suits file systems that cannot find a file by
    /// its number alone.
    fn vget(&self, _ino: Ino) -> VfsResult<VnodeRef> {
        Err(Errno::ESTALE)
    }

    /// The kernel let go of inode `ino`, which a predecessor handed over
    /// (live upgrade) and no request named since, so no vnode was made
    /// for it. A file system holding such a file for the kernel alone (a
    /// nameless file an `O_PATH` descriptor kept) lets it go now; else it
    /// would keep its data until the next hand-over, and hand it on.
    fn unclaimed_forgotten(&self, _ino: Ino) {}

    /// For a live upgrade: what a successor needs to go on serving `keep`
    /// (see [`crate::handover`]). The default, `EOPNOTSUPP`, keeps the
    /// mount with this process: `uvfs upgrade` then says so and changes
    /// nothing.
    fn save(&self, _keep: &crate::Keep<'_>) -> VfsResult<crate::Saved> {
        Err(Errno::EOPNOTSUPP)
    }

    /// For a live upgrade, while requests are still served: the part of
    /// `save`'s state for `nodes` that stays true while they stay known,
    /// handed back to `save` in [`Keep::ahead`](crate::Keep::ahead) (see
    /// [`crate::handover`], "Ahead of the pause"). The default, `None`:
    /// nothing ahead, `save` gets every node.
    fn save_ahead(&self, _nodes: &[VnodeRef]) -> VfsResult<Option<crate::Ahead>> {
        Ok(None)
    }

    /// For a live upgrade, in the predecessor: process `pid` (the
    /// successor, just started) may change the file system's backing
    /// store as this process does, from the hand-over on, while this one
    /// still reads what it was told of changes; `None` once the upgrade
    /// failed and that process is gone. A watcher of changes made behind
    /// the mount's back must take the successor's for the mount's own:
    /// told to the kernel as foreign, they would invalidate names the
    /// successor has just made (a working directory among them). The
    /// default does nothing.
    fn successor_running(&self, _pid: Option<u32>) {}

    /// For a live upgrade, in the predecessor: the successor has taken
    /// the mount over, and what `save` gave is its own (see
    /// [`crate::handover`], "After the hand-over"). Not called when the
    /// upgrade fails before that. The default does nothing.
    fn handed_over(&self) {}

    /// For a live upgrade, in the successor, once restored: the mount is
    /// this process's from here on (see [`crate::handover`], "After the
    /// hand-over"). The default does nothing.
    fn taken_over(&self) {}

    /// For crash recovery: the record from which a server started after
    /// a crash finds inode `ino` again (`vp` if the caller has it; without
    /// it, only a node this process was handed by a predecessor and has
    /// not found yet). `None`, the default, means it cannot: a crash then
    /// loses the node, and the kernel gets `ESTALE` for it.
    fn journal_record(&self, _ino: Ino, _vp: Option<&VnodeRef>) -> Option<crate::JournalRecord> {
        None
    }

    /// For crash recovery: from now on, give `keeper` every descriptor
    /// whose loss with this process would be seen (descriptions holding
    /// locks), those held now first; tell it when each closes.
    fn keep_fds_with(&self, _keeper: Arc<dyn crate::FdKeeper>) {}

    /// The generation of `vp`'s inode number: file systems that may give
    /// an inode number to a new file while the kernel remembers the old
    /// one (passthrough) return a number that differs between the two.
    /// The default, 0, suits numbers never reused within a mount.
    fn generation(&self, _vp: &VnodeRef) -> u64 {
        0
    }

    /// Copies `len` bytes from one open file to another; returns the bytes
    /// copied. The default is `ENOSYS`, which makes the kernel fall back to
    /// reading and writing.
    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        _vp_in: &VnodeRef,
        _fh_in: Fh,
        _off_in: u64,
        _vp_out: &VnodeRef,
        _fh_out: Fh,
        _off_out: u64,
        _len: u64,
        _flags: u32,
    ) -> VfsResult<u64> {
        Err(Errno::ENOSYS)
    }
}
