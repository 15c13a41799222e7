//! memfs as a `FileSystem`: each VOP forwards to the method that does it.

use crate::fs::MemFs;
use std::sync::Arc;
use uvfs_vfs::{
    Attr, Ctx, DirPlusSink, DirSink, Errno, FallocMode, Fh, FileSystem, Ino, Mount, RenameFlags,
    SetAttr, StatFs, VfsResult, VnodeRef, XattrFlags,
};

impl FileSystem for MemFs {
    fn fs_type(&self) -> &'static str {
        "memfs"
    }

    fn mount(&self) -> &Arc<Mount> {
        &self.mnt
    }

    fn root(&self) -> VfsResult<VnodeRef> {
        self.vnode_by_ino(crate::table::ROOT_INO)
    }

    /// A close changes nothing here: writes land at once (no write-back
    /// cache) and record locks are the kernel's.
    fn needs_flush(&self) -> bool {
        false
    }

    fn lookup(&self, _ctx: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        self.do_lookup(dir, name)
    }

    fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        self.do_getattr(vp)
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
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        newdir: &VnodeRef,
        newname: &[u8],
        flags: RenameFlags,
    ) -> VfsResult<()> {
        self.do_rename(ctx, dir, name, newdir, newname, flags)
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
        self.do_open(ctx, vp, flags)
    }

    fn read(&self, vp: &VnodeRef, _fh: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        self.do_read(vp, offset, size)
    }

    fn write(&self, vp: &VnodeRef, _fh: Fh, offset: u64, data: &[u8]) -> VfsResult<u32> {
        self.with_orphans_reclaimed(data.len() as u64, || self.do_write(vp, offset, data))
    }

    fn seek_data(&self, vp: &VnodeRef, _fh: Fh, offset: u64, hole: bool) -> VfsResult<u64> {
        self.do_seek_data(vp, offset, hole)
    }

    fn readdir(
        &self,
        dir: &VnodeRef,
        _fh: Fh,
        offset: u64,
        sink: &mut DirSink<'_>,
    ) -> VfsResult<()> {
        self.do_readdir(dir, offset, sink)
    }

    fn readdirplus(
        &self,
        _ctx: &Ctx,
        dir: &VnodeRef,
        _fh: Fh,
        offset: u64,
        sink: &mut DirPlusSink<'_>,
    ) -> VfsResult<()> {
        self.do_readdirplus(dir, offset, sink)
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

    fn removexattr(&self, ctx: &Ctx, vp: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        self.do_removexattr(ctx, vp, name)
    }

    fn get_flags(&self, vp: &VnodeRef, _fh: Fh) -> VfsResult<u32> {
        self.do_get_flags(vp)
    }

    fn set_flags(&self, ctx: &Ctx, vp: &VnodeRef, _fh: Fh, flags: u32) -> VfsResult<()> {
        self.do_set_flags(ctx, vp, flags)
    }

    fn remounted(&self, flags: u64) {
        self.atime.set(crate::atime::AtimeRule::from_mount_flags(
            flags as libc::c_ulong,
        ));
    }

    fn read_moves_atime(&self, vp: &VnodeRef) -> bool {
        self.inode_of(vp).is_ok_and(|inode| {
            self.atime
                .get()
                .would_touch(inode, uvfs_vfs::Timespec::now())
        })
    }

    fn posix_acls(&self) -> bool {
        true
    }

    fn statfs(&self) -> VfsResult<StatFs> {
        self.do_statfs()
    }

    /// Inode numbers are never reused, so a number found in the table is
    /// the file the handle was made for. A nameless file is found only if
    /// a predecessor handed it over as known to the kernel (`handover.rs`).
    fn vget(&self, ino: Ino) -> VfsResult<VnodeRef> {
        match self.vnode_by_ino(ino) {
            Ok(vp) => Ok(vp),
            Err(_) => self.vget_kept(ino).ok_or(Errno::ESTALE),
        }
    }

    fn unclaimed_forgotten(&self, ino: Ino) {
        self.let_kept_go(ino);
    }

    fn save(&self, keep: &uvfs_vfs::Keep<'_>) -> VfsResult<uvfs_vfs::Saved> {
        self.save_state(keep)
    }

    fn save_ahead(&self, _nodes: &[VnodeRef]) -> VfsResult<Option<uvfs_vfs::Ahead>> {
        // Nothing for `save` to take back: the pages it would copy are
        // where it passes them on from.
        self.move_pages_ahead()?;
        Ok(None)
    }

    fn handed_over(&self) {
        self.lease.set(false);
    }

    fn taken_over(&self) {
        self.take_lease();
    }

    fn fallocate(
        &self,
        vp: &VnodeRef,
        _fh: Fh,
        mode: FallocMode,
        offset: u64,
        len: u64,
    ) -> VfsResult<()> {
        self.with_orphans_reclaimed(len, || self.do_fallocate(vp, mode, offset, len))
    }

    fn copy_file_range(
        &self,
        vp_in: &VnodeRef,
        _fh_in: Fh,
        off_in: u64,
        vp_out: &VnodeRef,
        _fh_out: Fh,
        off_out: u64,
        len: u64,
        flags: u32,
    ) -> VfsResult<u64> {
        self.with_orphans_reclaimed(len, || {
            self.do_copy_file_range(vp_in, off_in, vp_out, off_out, len, flags)
        })
    }

    fn short_of_space(&self) -> bool {
        self.short_of_ispace()
    }

    fn fs_stats(&self) -> Vec<(&'static str, u64, &'static str)> {
        vec![
            (
                "memfs.inodes.linked",
                self.inode_count() as u64,
                "inodes with at least one name",
            ),
            (
                "memfs.inodes.alive",
                self.alive_count() as u64,
                "inodes in memory, including unlinked ones still in use",
            ),
            (
                "memfs.inodes.limit",
                self.ispace.limit().unwrap_or(0),
                "the --inodes limit (0: none)",
            ),
            (
                "memfs.inodes.space_bytes",
                self.ispace.used(),
                "inode space in use: 1 KiB per inode and per extra link, plus extended attributes",
            ),
            (
                "memfs.data.bytes",
                self.bytes_used(),
                "bytes of file data allocated (whole pages)",
            ),
            (
                "memfs.data.limit_bytes",
                self.budget
                    .limit()
                    .saturating_mul(crate::pages::PAGE_SIZE as u64),
                "the --size limit in bytes",
            ),
            (
                "memfs.data.reaped_bytes",
                crate::reaper::REAPER.done() * crate::pages::PAGE_SIZE as u64,
                "bytes of large files' pages freed on the reaper thread, after the request (this process)",
            ),
            (
                "memfs.data.reaping_bytes",
                crate::reaper::REAPER.pending() * crate::pages::PAGE_SIZE as u64,
                "bytes of pages given back to --size but waiting for the reaper thread to free them",
            ),
        ]
    }
}
