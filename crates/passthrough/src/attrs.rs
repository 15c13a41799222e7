//! Attributes: getattr, setattr, readlink, extended attributes, statfs.
//!
//! Calls that accept `AT_EMPTY_PATH` (`fchownat`, `utimensat`,
//! `readlinkat`, `statx`) take the node's `O_PATH` fd directly. `chmod`,
//! `truncate` and the xattr calls do not accept `O_PATH` fds, so they go
//! through `/proc/self/fd/N`, which names exactly the fd's inode.

use crate::creds::AsCaller;
use crate::fs::PassthroughFs;
use crate::sys;
use uvfs_vfs::{
    killed_suidgid, Attr, Ctx, Errno, SetAttr, SetTime, StatFs, VType, VfsResult, VnodeRef,
    XattrFlags,
};

fn timespec(t: Option<SetTime>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(SetTime::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(SetTime::At(t)) => libc::timespec {
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
            let st = sys::statx_fd(fd.raw())?;
            let perm = u32::from(st.stx_mode) & 0o7777;
            let kept = killed_suidgid(perm, st.stx_gid, ctx);
            if kept != perm && set.mode.is_none() {
                let p = sys::proc_path(fd.raw());
                // SAFETY: `p` is NUL-terminated; chmod only reads it.
                sys::cvt(unsafe { libc::chmod(p.as_ptr(), kept) })?;
            }
        }
        // Ownership first: chown clears set-uid bits that a mode given in
        // the same request may set again.
        if set.uid.is_some() || set.gid.is_some() {
            let uid = set.uid.unwrap_or(u32::MAX);
            let gid = set.gid.unwrap_or(u32::MAX);
            // SAFETY: empty NUL-terminated path with AT_EMPTY_PATH: the
            // call acts on the fd's inode (a symlink itself included).
            sys::cvt(unsafe {
                libc::fchownat(
                    fd.raw(),
                    sys::EMPTY.as_ptr(),
                    uid,
                    gid,
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        if let Some(mode) = set.mode {
            if kind == VType::Lnk {
                return Err(Errno::EOPNOTSUPP);
            }
            let p = sys::proc_path(fd.raw());
            // SAFETY: `p` is NUL-terminated; chmod only reads it.
            sys::cvt(unsafe { libc::chmod(p.as_ptr(), mode & 0o7777) })?;
        }
        if let Some(size) = set.size {
            match kind {
                VType::Dir => return Err(Errno::EISDIR),
                VType::Reg => {}
                _ => return Err(Errno::EINVAL),
            }
            let size = i64::try_from(size).map_err(|_| Errno::EFBIG)?;
            let p = sys::proc_path(fd.raw());
            // SAFETY: `p` is NUL-terminated; truncate only reads it.
            sys::cvt(unsafe { libc::truncate64(p.as_ptr(), size) })?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let ts = [timespec(set.atime), timespec(set.mtime)];
            // SAFETY: `ts` is two valid timespecs; empty path with
            // AT_EMPTY_PATH acts on the fd's inode.
            sys::cvt(unsafe {
                libc::utimensat(
                    fd.raw(),
                    sys::EMPTY.as_ptr(),
                    ts.as_ptr(),
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
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
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: `buf` is writable for its length; the empty path reads
        // the link the fd refers to.
        let n = unsafe {
            libc::readlinkat(
                fd.raw(),
                sys::EMPTY.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = sys::cvt_long(n as i64)? as usize;
        buf.truncate(n);
        Ok(buf)
    }

    pub(crate) fn do_getxattr(&self, vp: &VnodeRef, name: &[u8]) -> VfsResult<Vec<u8>> {
        let n = sys::cstr(name)?;
        let fd = self.fd_of(&self.node_of(vp)?)?;
        let p = sys::proc_path(fd.raw());
        let r = self.xattr_read(|buf: &mut [u8]| {
            // SAFETY: strings are NUL-terminated; `buf` is writable for its
            // length (a null pointer with length 0 asks for the size).
            unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
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
        let p = sys::proc_path(fd.raw());
        self.xattr_read(|buf: &mut [u8]| {
            // SAFETY: as in getxattr.
            unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
        })
    }

    /// Size query, then read, retrying while the value grows (`ERANGE`).
    fn xattr_read(&self, mut call: impl FnMut(&mut [u8]) -> isize) -> VfsResult<Vec<u8>> {
        for _ in 0..8 {
            let size = sys::cvt_long(call(&mut []) as i64)? as usize;
            let mut buf = vec![0u8; size];
            match sys::cvt_long(call(&mut buf) as i64) {
                Ok(n) => {
                    buf.truncate(n as usize);
                    return Ok(buf);
                }
                Err(Errno::ERANGE) => continue,
                Err(e) => return Err(e),
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
        let p = sys::proc_path(fd.raw());
        // An access ACL set by an owner outside the file's group clears
        // its set-gid bit, as a chmod would; the backing file system does
        // that only without CAP_FSETID, so such a setxattr runs with the
        // caller's ids (the kernel already checked that it may).
        let _as = if name == b"system.posix_acl_access" {
            Some(AsCaller::switch(ctx)?)
        } else {
            None
        };
        // SAFETY: strings are NUL-terminated; `value` is readable for its
        // length.
        sys::cvt(unsafe {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags.0,
            )
        })
        .map(|_| ())
    }

    pub(crate) fn do_removexattr(&self, vp: &VnodeRef, name: &[u8]) -> VfsResult<()> {
        let n = sys::cstr(name)?;
        let fd = self.fd_of(&self.node_of(vp)?)?;
        let p = sys::proc_path(fd.raw());
        // SAFETY: strings are NUL-terminated.
        sys::cvt(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }).map(|_| ())
    }

    pub(crate) fn do_statfs(&self) -> VfsResult<StatFs> {
        let fd = self.fd_of(&self.root)?;
        // SAFETY: all-zero bytes are a valid statfs (plain integers).
        let mut s: libc::statfs64 = unsafe { std::mem::zeroed() };
        // SAFETY: `s` is writable; fstatfs accepts O_PATH fds.
        sys::cvt(unsafe { libc::fstatfs64(fd.raw(), &mut s) })?;
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
