//! passthrough as a `FileSystem`: each VOP forwards to the method that
//! does it (`namei.rs`, `io.rs`, `dir.rs`, `attrs.rs`).

use crate::fs::PassthroughFs;
use std::os::fd::AsFd;
use std::sync::Arc;
use uvfs_vfs::{
    Attr, Ctx, DirPlusSink, DirSink, FallocMode, Fh, FileLock, FileSystem, Freeing, Mount,
    RenameFlags, SetAttr, StatFs, VType, VfsResult, VnodeRef, XattrFlags,
};

impl FileSystem for PassthroughFs {
    fn fs_type(&self) -> &'static str {
        "passthrough"
    }

    /// The source is a real directory that others may write.
    fn changes_outside(&self) -> bool {
        true
    }

    /// ACLs in the source are enforced through the mount as natively.
    fn posix_acls(&self) -> bool {
        true
    }

    fn forwards_locks(&self) -> bool {
        true
    }

    fn watch(&self, sink: Arc<dyn uvfs_vfs::ChangeSink>) {
        self.watch.start(sink);
    }

    fn successor_running(&self, pid: Option<u32>) {
        self.watch.successor_running(pid);
    }

    fn watch_status(&self) -> Option<uvfs_vfs::WatchStatus> {
        Some(self.watch_status())
    }

    fn cache_limit(&self, vp: &VnodeRef) -> Option<std::time::Duration> {
        self.node_cache_limit(vp)
    }

    fn waits_for_devices(&self) -> bool {
        true
    }

    fn may_free_much(&self, what: Freeing<'_>) -> bool {
        self.frees_much(what)
    }

    fn getlk(&self, vp: &VnodeRef, _fh: Fh, owner: u64, lock: &FileLock) -> VfsResult<FileLock> {
        self.do_getlk(vp, owner, lock)
    }

    fn lock_holder(&self, vp: &VnodeRef, owner: u64, lock: &FileLock) -> Option<u64> {
        self.do_lock_holder(vp, owner, lock)
    }

    fn setlk(
        &self,
        vp: &VnodeRef,
        fh: Fh,
        owner: u64,
        lock: &FileLock,
        flock: bool,
    ) -> VfsResult<()> {
        self.do_setlk(vp, fh, owner, lock, flock)
    }

    fn unlock_owner(&self, vp: &VnodeRef, owner: u64) -> VfsResult<()> {
        self.do_unlock_owner(vp, owner)
    }

    fn mount(&self) -> &Arc<Mount> {
        &self.mnt
    }

    fn root(&self) -> VfsResult<VnodeRef> {
        self.root_vnode()
    }

    fn lookup(&self, _ctx: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        self.do_lookup(dir, name)
    }

    fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        self.do_getattr(vp)
    }

    fn lookup_attr(&self, _ctx: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<(VnodeRef, Attr)> {
        self.do_lookup_attr(dir, name)
    }

    fn setattr(&self, ctx: &Ctx, vp: &VnodeRef, set: &SetAttr) -> VfsResult<Attr> {
        self.do_setattr(ctx, vp, set)
    }

    fn readlink(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        self.do_readlink(vp)
    }

    fn mknod(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
        rdev: u64,
    ) -> VfsResult<VnodeRef> {
        self.do_mknod(ctx, dir, name, mode, rdev)
    }

    fn mkdir(&self, ctx: &Ctx, dir: &VnodeRef, name: &[u8], mode: u32) -> VfsResult<VnodeRef> {
        self.do_mkdir(ctx, dir, name, mode)
    }

    fn symlink(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        target: &[u8],
    ) -> VfsResult<VnodeRef> {
        self.do_symlink(ctx, dir, name, target)
    }

    fn link(&self, _ctx: &Ctx, vp: &VnodeRef, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        self.do_link(vp, dir, name)
    }

    fn unlink(&self, _ctx: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        self.do_unlink(dir, name)
    }

    fn rmdir(&self, _ctx: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        self.do_rmdir(dir, name)
    }

    fn rename(
        &self,
        _ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        newdir: &VnodeRef,
        newname: &[u8],
        flags: RenameFlags,
    ) -> VfsResult<()> {
        self.do_rename(dir, name, newdir, newname, flags)
    }

    fn create(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        self.do_create(ctx, dir, name, mode, flags)
    }

    fn tmpfile(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        mode: u32,
        flags: i32,
    ) -> VfsResult<(VnodeRef, Fh)> {
        self.do_tmpfile(ctx, dir, mode, flags)
    }

    fn open(&self, ctx: &Ctx, vp: &VnodeRef, flags: i32) -> VfsResult<Fh> {
        self.do_open(ctx, vp, flags, true)
    }

    fn open_nowait(&self, ctx: &Ctx, vp: &VnodeRef, flags: i32) -> VfsResult<Fh> {
        self.do_open(ctx, vp, flags, false)
    }

    /// A regular file's open fd. Not one opened with `O_NOATIME` (`-r`, or
    /// `noatime` without a clone of the source's mount: `atime.rs`): the
    /// kernel opens its backing file with the caller's flags on that fd's
    /// mount, and its reads would move the atime.
    fn backing_file(
        &self,
        _vp: &VnodeRef,
        fh: Fh,
    ) -> Option<Arc<dyn std::os::fd::AsFd + Send + Sync>> {
        let of = self.opens.get(fh).ok()?;
        if of.node.kind() != VType::Reg {
            return None;
        }
        let fd = self.file_fd(&of).ok()?;
        // Only a rule of "never" opens with O_NOATIME (`Atime`).
        if self.atime.noatime_flag(false) != 0
            && rustix::fs::fcntl_getfl(&fd)
                .ok()?
                .contains(rustix::fs::OFlags::NOATIME)
        {
            return None;
        }
        Some(fd as _)
    }

    fn read(&self, _vp: &VnodeRef, fh: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        self.do_read(fh, offset, size)
    }

    fn read_nowait(&self, _vp: &VnodeRef, fh: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        self.do_read_nowait(fh, offset, size)
    }

    fn write(&self, _vp: &VnodeRef, fh: Fh, offset: u64, data: &[u8]) -> VfsResult<u32> {
        self.do_write(fh, offset, data)
    }

    fn seek_data(&self, _vp: &VnodeRef, fh: Fh, offset: u64, hole: bool) -> VfsResult<u64> {
        self.do_seek_data(fh, offset, hole)
    }

    fn fsync(&self, _vp: &VnodeRef, fh: Fh, datasync: bool) -> VfsResult<()> {
        self.do_fsync(fh, datasync)
    }

    fn release(&self, _vp: &VnodeRef, fh: Fh) -> VfsResult<()> {
        self.do_release(fh)
    }

    fn opendir(&self, _ctx: &Ctx, vp: &VnodeRef, _flags: i32) -> VfsResult<Fh> {
        self.do_opendir(vp)
    }

    fn readdir(
        &self,
        dir: &VnodeRef,
        fh: Fh,
        offset: u64,
        sink: &mut DirSink<'_>,
    ) -> VfsResult<()> {
        self.do_readdir(dir, fh, offset, sink)
    }

    fn readdirplus(
        &self,
        _ctx: &Ctx,
        dir: &VnodeRef,
        fh: Fh,
        offset: u64,
        sink: &mut DirPlusSink<'_>,
    ) -> VfsResult<()> {
        self.do_readdirplus(dir, fh, offset, sink)
    }

    fn releasedir(&self, _vp: &VnodeRef, fh: Fh) -> VfsResult<()> {
        self.do_release(fh)
    }

    fn getxattr(&self, vp: &VnodeRef, name: &[u8]) -> VfsResult<Vec<u8>> {
        self.do_getxattr(vp, name)
    }

    fn setxattr(
        &self,
        ctx: &Ctx,
        vp: &VnodeRef,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> VfsResult<()> {
        self.do_setxattr(ctx, vp, name, value, flags)
    }

    fn listxattr(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        self.do_listxattr(vp)
    }

    fn removexattr(&self, _ctx: &Ctx, vp: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        self.do_removexattr(vp, name)
    }

    fn get_flags(&self, _vp: &VnodeRef, fh: Fh) -> VfsResult<u32> {
        self.do_get_flags(fh)
    }

    fn set_flags(&self, _ctx: &Ctx, _vp: &VnodeRef, fh: Fh, flags: u32) -> VfsResult<()> {
        self.do_set_flags(fh, flags)
    }

    fn get_fsxattr(&self, _vp: &VnodeRef, fh: Fh) -> VfsResult<uvfs_vfs::FsXattr> {
        self.do_get_fsxattr(fh)
    }

    fn set_fsxattr(
        &self,
        _ctx: &Ctx,
        _vp: &VnodeRef,
        fh: Fh,
        x: &uvfs_vfs::FsXattr,
    ) -> VfsResult<()> {
        self.do_set_fsxattr(fh, x)
    }

    fn trim(
        &self,
        _ctx: &Ctx,
        _vp: &VnodeRef,
        fh: Fh,
        range: uvfs_vfs::TrimRange,
    ) -> VfsResult<u64> {
        self.do_trim(fh, range)
    }

    fn statfs(&self) -> VfsResult<StatFs> {
        self.do_statfs()
    }

    fn fallocate(
        &self,
        _vp: &VnodeRef,
        fh: Fh,
        mode: FallocMode,
        offset: u64,
        len: u64,
    ) -> VfsResult<()> {
        self.do_fallocate(fh, mode, offset, len)
    }

    fn fs_stats(&self) -> Vec<(&'static str, u64, &'static str)> {
        self.stats()
    }

    /// The mount's atime rule, applied through a clone of the source's
    /// mount where it differs from the source's (`atime.rs`).
    fn remounted(&self, flags: u64) {
        if let Ok(root) = self.fd_of(&self.root) {
            self.atime.remounted(flags, root.as_fd(), &self.pool);
        }
    }

    /// By the rule the server's reads of the source follow (`atime.rs`):
    /// the uvfs mount's where a clone applies it, else the source's.
    fn read_moves_atime(&self, vp: &VnodeRef) -> bool {
        let Ok(node) = self.node_of(vp) else {
            return false;
        };
        if node.kind() != VType::Reg {
            return false;
        }
        self.fd_of(&node)
            .and_then(|fd| crate::sys::statx_fd(fd.as_fd()))
            .is_ok_and(|st| self.atime.read_moves(&st))
    }

    fn mounted_as(&self, dev: u64) {
        self.own_dev
            .store(dev, std::sync::atomic::Ordering::Relaxed);
    }

    fn reserve_fds(&self, n: usize) -> Option<uvfs_vfs::FdReservation> {
        // Slots like any backing fd's (idle cached fds are closed to make
        // room); all or none.
        let parts = (0..n)
            .map(|_| {
                self.pool
                    .reserve()
                    .ok()
                    .map(|r| Box::new(r) as Box<dyn Send>)
            })
            .collect::<Option<Vec<_>>>()?;
        Some(uvfs_vfs::FdReservation::of(parts))
    }

    fn vget(&self, ino: uvfs_vfs::Ino) -> VfsResult<VnodeRef> {
        self.vget_id(ino)
    }

    fn save(&self, keep: &uvfs_vfs::Keep<'_>) -> VfsResult<uvfs_vfs::Saved> {
        self.do_save(keep)
    }

    fn save_ahead(&self, nodes: &[VnodeRef]) -> VfsResult<Option<uvfs_vfs::Ahead>> {
        self.do_save_ahead(nodes)
    }

    fn journal_record(
        &self,
        ino: uvfs_vfs::Ino,
        vp: Option<&VnodeRef>,
    ) -> Option<uvfs_vfs::JournalRecord> {
        self.journal_record_of(ino, vp)
    }

    fn keep_fds_with(&self, keeper: std::sync::Arc<dyn uvfs_vfs::FdKeeper>) {
        self.do_keep_fds_with(keeper)
    }

    fn generation(&self, vp: &VnodeRef) -> u64 {
        self.node_of(vp).map_or(0, |n| n.generation())
    }

    fn copy_file_range(
        &self,
        _vp_in: &VnodeRef,
        fh_in: Fh,
        off_in: u64,
        _vp_out: &VnodeRef,
        fh_out: Fh,
        off_out: u64,
        len: u64,
        flags: u32,
    ) -> VfsResult<u64> {
        self.do_copy_file_range(fh_in, off_in, fh_out, off_out, len, flags)
    }
}
