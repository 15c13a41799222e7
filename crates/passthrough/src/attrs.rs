//! Attributes: getattr, setattr, readlink, extended attributes, statfs.
//!
//! Calls that accept `AT_EMPTY_PATH` (`fchownat`, `utimensat`,
//! `readlinkat`, `statx`) take the node's `O_PATH` fd directly. `chmod`,
//! `truncate` and the xattr calls do not accept `O_PATH` fds, so they go
//! through `/proc/self/fd/N`, which names exactly the fd's inode.

use crate::creds::AsCaller;
use crate::fs::PassthroughFs;
use crate::sys;
use rustix::event::Timespec;
use rustix::fs::{AtFlags, Gid, Mode, Timestamps, Uid};
use std::os::fd::AsFd;
use uvfs_vfs::{
    killed_suidgid, Attr, Ctx, Errno, SetAttr, SetTime, StatFs, VType, VfsResult, VnodeRef,
    XattrFlags,
};

fn timespec(t: Option<SetTime>) -> Timespec {
    match t {
        None => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(SetTime::Now) => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(SetTime::At(t)) => Timespec {
            tv_sec: t.sec,
            tv_nsec: i64::from(t.nsec),
        },
    }
}

impl PassthroughFs {
    pub(crate) fn do_getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        self.getattr_node(&self.node_of(vp)?)
    }

    pub(crate) fn do_setattr(&self, ctx: &Ctx, vp: &VnodeRef, set: &SetAttr) -> VfsResult<Attr> {
        let node = self.node_of(vp)?;
        let fd = self.fd_of(&node)?;
        let kind = node.kind();
        // The server acts as root (CAP_FSETID), so the backing file system
        // keeps set-uid/set-gid where the caller's own write, truncate or
        // chown would lose them: drop them here, as Linux would for the
        // caller (first: a mode given in the same request wins).
        if set.kill_suidgid && kind != VType::Dir && kind != VType::Lnk {
            let st = sys::statx_fd(fd.as_fd())?;
            let perm = u32::from(st.stx_mode) & 0o7777;
            let kept = killed_suidgid(perm, st.stx_gid, ctx);
            if kept != perm && set.mode.is_none() {
                rustix::fs::chmod(
                    sys::proc_path(fd.as_fd()).as_c_str(),
                    Mode::from_raw_mode(kept),
                )?;
            }
        }
        // Ownership first: chown clears set-uid bits that a mode given in
        // the same request may set again. An id of -1 means "unchanged",
        // as chown(2) takes it.
        let uid = set.uid.filter(|&u| u != u32::MAX).map(Uid::from_raw);
        let gid = set.gid.filter(|&g| g != u32::MAX).map(Gid::from_raw);
        // A change of ctime alone (`chown(f, -1, -1)`, which moves it on
        // ext4 and tmpfs) is a chown to the same ids: the backing file
        // system moves ctime to now, the only value it takes.
        let touch_ctime = set.ctime.is_some()
            && set.mode.is_none()
            && set.size.is_none()
            && set.atime.is_none()
            && set.mtime.is_none();
        if uid.is_some() || gid.is_some() || touch_ctime {
            // The empty path with AT_EMPTY_PATH acts on the fd's inode (a
            // symlink itself included).
            rustix::fs::chownat(
                fd.as_fd(),
                sys::EMPTY,
                uid,
                gid,
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        if let Some(mode) = set.mode {
            if kind == VType::Lnk {
                return Err(Errno::EOPNOTSUPP);
            }
            let mode = Mode::from_raw_mode(mode & 0o7777);
            rustix::fs::chmod(sys::proc_path(fd.as_fd()).as_c_str(), mode)?;
        }
        if let Some(size) = set.size {
            match kind {
                VType::Dir => return Err(Errno::EISDIR),
                VType::Reg => {}
                _ => return Err(Errno::EINVAL),
            }
            i64::try_from(size).map_err(|_| Errno::EFBIG)?;
            // Opened for writing, as truncate(2) by path checks: the
            // same refusals (ETXTBSY of a running program, EPERM of an
            // append-only or immutable file), a lease broken alike.
            let res = self.pool.reserve()?;
            let f = res.into_fd(sys::reopen(fd.as_fd(), libc::O_WRONLY)?);
            rustix::fs::ftruncate(f.as_fd(), size)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let ts = Timestamps {
                last_access: timespec(set.atime),
                last_modification: timespec(set.mtime),
            };
            rustix::fs::utimensat(
                fd.as_fd(),
                sys::EMPTY,
                &ts,
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        drop(fd);
        self.getattr_node(&node)
    }

    pub(crate) fn do_readlink(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        let node = self.node_of(vp)?;
        if node.kind() != VType::Lnk {
            return Err(Errno::EINVAL);
        }
        let fd = self.fd_of(&node)?;
        // The empty path reads the link the fd refers to.
        let target = rustix::fs::readlinkat(fd.as_fd(), sys::EMPTY, Vec::new())?;
        Ok(target.into_bytes())
    }

    pub(crate) fn do_getxattr(&self, vp: &VnodeRef, name: &[u8]) -> VfsResult<Vec<u8>> {
        let n = sys::cstr(name)?;
        let fd = self.fd_of(&self.node_of(vp)?)?;
        let p = sys::proc_path(fd.as_fd());
        let r = self.xattr_read(|buf: &mut [u8]| match buf.is_empty() {
            true => rustix::fs::getxattr_query(p.as_c_str(), n.as_c_str()),
            false => rustix::fs::getxattr(p.as_c_str(), n.as_c_str(), buf),
        });
        match r {
            // A source without ACL support has no ACLs: the kernel, which
            // enforces them (`posix_acls`), takes only ENODATA as "none".
            Err(Errno::EOPNOTSUPP) if name.starts_with(b"system.posix_acl_") => Err(Errno::ENODATA),
            r => r,
        }
    }

    pub(crate) fn do_listxattr(&self, vp: &VnodeRef) -> VfsResult<Vec<u8>> {
        let fd = self.fd_of(&self.node_of(vp)?)?;
        let p = sys::proc_path(fd.as_fd());
        self.xattr_read(|buf: &mut [u8]| match buf.is_empty() {
            true => rustix::fs::listxattr_query(p.as_c_str()),
            false => rustix::fs::listxattr(p.as_c_str(), buf),
        })
    }

    /// Size query, then read, retrying while the value grows (`ERANGE`).
    fn xattr_read(
        &self,
        mut call: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
    ) -> VfsResult<Vec<u8>> {
        for _ in 0..8 {
            let size = call(&mut [])?;
            let mut buf = vec![0u8; size];
            match call(&mut buf) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(buf);
                }
                Err(rustix::io::Errno::RANGE) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Errno::ERANGE)
    }

    pub(crate) fn do_setxattr(
        &self,
        ctx: &Ctx,
        vp: &VnodeRef,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> VfsResult<()> {
        let n = sys::cstr(name)?;
        let fd = self.fd_of(&self.node_of(vp)?)?;
        let p = sys::proc_path(fd.as_fd());
        // An access ACL set by an owner outside the file's group clears
        // its set-gid bit, as a chmod would; the backing file system does
        // that only without CAP_FSETID, so such a setxattr runs with the
        // caller's ids (the kernel already checked that it may). A caller
        // whose ids the kernel left out (`Ctx::ids_unknown`) is not
        // switched to: the bit is dropped here, by the caller's own groups.
        let acl = name == b"system.posix_acl_access";
        let _as = if acl && !ctx.ids_unknown() {
            Some(AsCaller::switch(ctx)?)
        } else {
            None
        };
        let flags = rustix::fs::XattrFlags::from_bits_retain(flags.0 as u32);
        rustix::fs::setxattr(p.as_c_str(), n.as_c_str(), value, flags)?;
        if acl && ctx.ids_unknown() {
            let st = sys::statx_fd(fd.as_fd())?;
            let perm = u32::from(st.stx_mode) & 0o7777;
            if perm & libc::S_ISGID != 0 && !ctx.in_group_or_capable(st.stx_gid) {
                rustix::fs::chmod(p.as_c_str(), Mode::from_raw_mode(perm & !libc::S_ISGID))?;
            }
        }
        Ok(())
    }

    pub(crate) fn do_removexattr(&self, vp: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        let n = sys::cstr(name)?;
        let fd = self.fd_of(&self.node_of(vp)?)?;
        let p = sys::proc_path(fd.as_fd());
        Ok(rustix::fs::removexattr(p.as_c_str(), n.as_c_str())?)
    }

    pub(crate) fn do_statfs(&self) -> VfsResult<StatFs> {
        // The space of files removed through this server is given back
        // by last closes left to the closing thread (`closer.rs`): done
        // before the count, as a local `rm` then `df` would see it.
        crate::closer::CLOSER.flush();
        let fd = self.fd_of(&self.root)?;
        // fstatfs accepts O_PATH fds.
        let s = rustix::fs::fstatfs(fd.as_fd())?;
        Ok(StatFs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: s.f_namelen as u32,
            frsize: s.f_frsize as u32,
        })
    }
}
