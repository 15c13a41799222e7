//! Data operations: open, read, write, truncate and fallocate.
//!
//! Each takes the vnode's range lock first (`io_lock.rs`): reads shared
//! over the bytes they read, writes exclusive over the bytes they write,
//! size changes exclusive from the lowest offset they touch to infinity.
//! So every read and write is atomic with respect to every other, and
//! disjoint ones proceed together.

use crate::fs::MemFs;
use crate::io_lock;
use crate::pages::MAX_FILE_SIZE;
use uvfs_vfs::{
    Ctx, Errno, FallocMode, Fh, SetAttr, Timespec, VType, VfsResult, VnodeRef, O_KILL_SUIDGID,
};

impl MemFs {
    pub(crate) fn do_open(&self, ctx: &Ctx, vp: &VnodeRef, flags: i32) -> VfsResult<Fh> {
        let inode = self.inode_of(vp)?;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        inode.check_open(flags)?;
        match inode.kind {
            VType::Dir if writes => return Err(Errno::EISDIR),
            VType::Lnk => return Err(Errno::ELOOP),
            VType::Reg if writes && flags & libc::O_TRUNC != 0 => {
                self.truncate(vp, 0)?;
                if flags & O_KILL_SUIDGID != 0 {
                    self.do_setattr(ctx, vp, &SetAttr::kill_suidgid())?;
                }
            }
            _ => {}
        }
        Ok(Fh(0))
    }

    pub(crate) fn do_read(&self, vp: &VnodeRef, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        let inode = self.inode_of(vp)?;
        let f = match inode.kind {
            VType::Reg => inode.file().ok_or(Errno::EIO)?,
            VType::Dir => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        };
        if offset > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        let end = offset.saturating_add(u64::from(size));
        let data = {
            let _g = io_lock::lock_read(vp, offset..end);
            f.read(offset, size as usize)
        };
        if size > 0 {
            self.accessed(inode, Timespec::now());
        }
        Ok(data)
    }

    pub(crate) fn do_seek_data(&self, vp: &VnodeRef, offset: u64, hole: bool) -> VfsResult<u64> {
        let inode = self.inode_of(vp)?;
        let f = match inode.kind {
            VType::Reg => inode.file().ok_or(Errno::EIO)?,
            _ => return Err(Errno::EINVAL),
        };
        // Shared over the rest of the file: a write or truncate in
        // progress there is seen whole or not at all.
        let _g = io_lock::lock_read(vp, offset..u64::MAX);
        f.seek(offset, hole)
    }

    pub(crate) fn do_write(&self, vp: &VnodeRef, offset: u64, data: &[u8]) -> VfsResult<u32> {
        let inode = self.inode_of(vp)?;
        let f = match inode.kind {
            VType::Reg => inode.file().ok_or(Errno::EIO)?,
            VType::Dir => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        };
        let len = u32::try_from(data.len()).map_err(|_| Errno::EINVAL)?;
        if offset > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        if len == 0 {
            return Ok(0);
        }
        let n = {
            let _g = io_lock::lock_write(vp, offset..offset.saturating_add(u64::from(len)));
            inode.check_write(offset, f.size())?;
            f.write(offset, data)?
        };
        inode.meta.lock().touch_modified(Timespec::now());
        Ok(n as u32)
    }

    /// Sets a regular file's size (the caller updates the times).
    pub(crate) fn truncate(&self, vp: &VnodeRef, size: u64) -> VfsResult<()> {
        let inode = self.inode_of(vp)?;
        let f = match inode.kind {
            VType::Reg => inode.file().ok_or(Errno::EIO)?,
            VType::Dir => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        };
        if size > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let from = size.min(f.size());
        let _g = io_lock::lock_write(vp, from..u64::MAX);
        f.truncate(size)?;
        drop(_g);
        inode.meta.lock().touch_modified(Timespec::now());
        Ok(())
    }

    pub(crate) fn do_fallocate(
        &self,
        vp: &VnodeRef,
        mode: FallocMode,
        offset: u64,
        len: u64,
    ) -> VfsResult<()> {
        let inode = self.inode_of(vp)?;
        let f = match inode.kind {
            VType::Reg => inode.file().ok_or(Errno::EIO)?,
            VType::Dir => return Err(Errno::EISDIR),
            VType::Fifo => return Err(Errno::ESPIPE),
            _ => return Err(Errno::ENODEV),
        };
        if len == 0 || offset > MAX_FILE_SIZE || len > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        if offset + len > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let keep = mode.0 & FallocMode::KEEP_SIZE != 0;
        let op = mode.0 & !FallocMode::KEEP_SIZE;
        // `vfs_fallocate`: nothing on an immutable file, only plain
        // allocation on an append-only one.
        {
            let m = inode.meta.lock();
            if m.immutable() || (m.append_only() && op != 0) {
                return Err(Errno::EPERM);
            }
        }
        {
            let _g = io_lock::lock_write(vp, offset..u64::MAX);
            match op {
                0 => f.allocate(offset, len, keep)?,
                FallocMode::PUNCH_HOLE if keep => f.punch_hole(offset, len),
                FallocMode::ZERO_RANGE => {
                    f.punch_hole(offset, len);
                    f.allocate(offset, len, keep)?;
                }
                _ => return Err(Errno::EOPNOTSUPP),
            }
        }
        // Every mode changes mtime and ctime, --keep-size preallocation
        // included (`file_modified` in tmpfs's and ext4's fallocate).
        inode.meta.lock().touch_modified(Timespec::now());
        Ok(())
    }
}
