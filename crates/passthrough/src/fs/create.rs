//! Creating in the source as the caller: the operation under the
//! caller's credentials, the mode a new file gets, the new node's fd.

use super::PassthroughFs;
use crate::creds::AsCaller;
use crate::fdpool::Fd;
use crate::sys;
use std::ffi::CStr;
use std::os::fd::OwnedFd;
use std::os::fd::{AsFd, BorrowedFd};
use uvfs_vfs::{Ctx, VfsResult, VnodeRef};

impl PassthroughFs {
    /// Runs a creating operation as the caller in directory `dir`, then
    /// looks the new name up.
    pub(crate) fn make_at(
        &self,
        ctx: &Ctx,
        dir: &VnodeRef,
        name: &[u8],
        op: impl FnOnce(BorrowedFd<'_>, &CStr) -> VfsResult<()>,
    ) -> VfsResult<VnodeRef> {
        uvfs_vfs::check_new_name(name)?;
        let dnode = self.node_of(dir)?;
        let cname = sys::cstr(name)?;
        let dfd = self.fd_of(&dnode)?;
        {
            let _as = AsCaller::switch(ctx)?;
            op(dfd.as_fd(), &cname)?;
        }
        drop(dfd);
        Ok(self.lookup_at(&dnode, name)?.0)
    }

    /// The mode to create a file with in the directory `dfd`, given the
    /// caller's `umask` (`Ctx::umask`): the umask applies unless the
    /// directory has a default ACL, which the backing file system applies
    /// instead (our own umask is 0). One getxattr, only when the umask
    /// would clear a bit.
    pub(crate) fn creation_mode(&self, dfd: BorrowedFd<'_>, mode: u32, umask: u32) -> u32 {
        if mode & umask & 0o777 == 0 {
            return mode;
        }
        let p = sys::proc_path(dfd);
        let n = rustix::fs::getxattr_query(p.as_c_str(), c"system.posix_acl_default");
        if n.is_ok_and(|n| n > 0) {
            mode
        } else {
            mode & !(umask & 0o777)
        }
    }

    /// Keeps a freshly created fd as the O_PATH fd of a new node: opens
    /// the inode behind `fd` again as `O_PATH`.
    pub(crate) fn path_fd_of(&self, fd: &OwnedFd) -> VfsResult<Fd> {
        let res = self.pool.reserve()?;
        Ok(res.into_fd(sys::reopen(fd.as_fd(), libc::O_PATH)?))
    }
}
