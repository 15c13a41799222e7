//! File locks kept on the backing files, so that a lock taken through the
//! mount meets the locks of the source's other users (processes on the
//! host, other mounts) as it would natively. The kernel sends them to us
//! (FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS) instead of keeping its own.
//!
//! # Who owns a lock
//!
//! * A `flock(2)` lock belongs to the open file. Each FUSE handle is one
//!   kernel open file and has its own backing fd (`open.rs`), so the lock
//!   goes on that fd as it is: dup'd and inherited descriptors share the
//!   handle, and the lock goes when its last one closes (RELEASE unlocks
//!   and closes the fd: closing alone is not enough where the kernel does
//!   the file's I/O through that fd's description and holds it while
//!   other opens of the file remain).
//! * A POSIX record lock belongs to a process (the kernel's lock owner id),
//!   whatever descriptor it used, and every close of any descriptor of the
//!   file drops all of that owner's locks on it. Each (node, owner) gets an
//!   open file description of its own on the backing file, holding the
//!   owner's locks as OFD locks (`F_OFD_SETLK`): they conflict with classic
//!   POSIX and OFD locks of other users like POSIX locks of different
//!   processes, and merge and split among themselves like one process's.
//!   The description is closed, dropping its locks, when the owner closes a
//!   descriptor of the file (the kernel's FLUSH carries the owner,
//!   `unlock_owner`) or unlocks the whole file, and at the latest when the
//!   last open file of the node is released.
//! * An OFD lock (`F_OFD_SETLK` through the mount) belongs to the open file
//!   it was taken through: the kernel sends it as a record lock whose owner
//!   is that open file, so it gets a description of its own as above. No
//!   FLUSH names that owner (a close names the closing process), and the
//!   RELEASE of the open file carries no owner for it; so each description
//!   remembers the handle it was made through, and the RELEASE of that
//!   handle closes it. A process's (POSIX) description made through a
//!   handle is gone by then: the process had to close its descriptor of
//!   that handle first, and that close's FLUSH dropped it.
//!
//! Nothing here waits: a conflicting lock is `EAGAIN`, and the FUSE server
//! retries a waiting request (SETLKW) off its request loops, so a lock held
//! for an hour ties up no thread, and a signal can interrupt the wait.

use crate::fdpool::Fd;
use crate::fs::PassthroughFs;
use crate::kept::Kept;
use crate::node::Node;
use crate::open::OpenFile;
use crate::sys;
use rustix::fs::FlockOperation;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Errno, Fh, FileLock, VfsResult, VnodeRef, LOCK_TO_EOF};

/// `struct flock` for `lock` (`l_len` 0 runs to the end of the file).
fn to_flock(lock: &FileLock) -> VfsResult<libc::flock> {
    let start = i64::try_from(lock.start).map_err(|_| Errno::EINVAL)?;
    let len = if lock.end >= LOCK_TO_EOF {
        0
    } else if lock.end < lock.start {
        return Err(Errno::EINVAL);
    } else {
        i64::try_from(lock.end - lock.start + 1).map_err(|_| Errno::EINVAL)?
    };
    Ok(libc::flock {
        l_type: i16::try_from(lock.typ).map_err(|_| Errno::EINVAL)?,
        l_whence: libc::SEEK_SET as i16,
        l_start: start,
        l_len: len,
        l_pid: 0,
    })
}

fn fcntl_lock(fd: &Fd, cmd: libc::c_int, fl: &mut libc::flock) -> VfsResult<()> {
    // SAFETY: `fl` is a valid, writable `struct flock` for the call.
    sys::cvt(unsafe { libc::fcntl(fd.raw(), cmd, fl as *mut libc::flock) }).map(drop)
}

impl PassthroughFs {
    /// A new open file description of `node`'s backing file for lock
    /// owners: read-write when allowed (write locks need it), else
    /// read-only. Counted against the fd budget like an open file.
    fn lock_description(&self, node: &Arc<Node>) -> VfsResult<Arc<Fd>> {
        let fd = self.fd_of(node)?;
        let res = self.reserve_file(None).map_err(|_| Errno::ENOLCK)?;
        let f = sys::reopen(fd.as_fd(), libc::O_RDWR)
            .or_else(|_| sys::reopen(fd.as_fd(), libc::O_RDONLY))?;
        Ok(Arc::new(res.into_fd(f)))
    }

    /// A description of its own for the `flock` locks of `of`, whose fd
    /// other handles share (`open.rs`) or which gave its fd back
    /// (`park.rs`): the same file, opened with the same flags. Within the whole budget, as a handed-over open file:
    /// the share of open files is spent when descriptions are shared.
    fn flock_description(&self, of: &OpenFile) -> VfsResult<Fd> {
        let flags = match of.parked_flags() {
            Some(flags) => flags,
            None => rustix::fs::fcntl_getfl(&*self.file_fd(of)?)?.bits() as libc::c_int,
        };
        let fd = self.fd_of(&of.node)?;
        let res = self.pool.reserve_handed_over().map_err(|_| Errno::ENOLCK)?;
        let f = self.reopen_file(&of.node, fd.as_fd(), flags)?;
        Ok(res.into_fd(f))
    }

    pub(crate) fn do_setlk(
        &self,
        vp: &VnodeRef,
        fh: Fh,
        owner: u64,
        lock: &FileLock,
        flock: bool,
    ) -> VfsResult<()> {
        if flock {
            let of = self.opens.get(fh)?;
            let op = match lock.typ {
                libc::F_RDLCK => FlockOperation::NonBlockingLockShared,
                libc::F_WRLCK => FlockOperation::NonBlockingLockExclusive,
                libc::F_UNLCK => FlockOperation::NonBlockingUnlock,
                _ => return Err(Errno::EINVAL),
            };
            let fd = if lock.typ == libc::F_UNLCK {
                match of.flock_fd() {
                    Some(fd) => fd,
                    None => return Ok(()), // never locked: nothing to drop
                }
            } else {
                of.flock_fd_or(|| self.flock_description(&of))?
            };
            // Kept before the lock is taken: a crash then leaves it held.
            if lock.typ != libc::F_UNLCK && !of.kept.swap(true, Ordering::Relaxed) {
                self.posix_locks.keeper.keep(
                    Kept::Open {
                        node: of.node.id,
                        fh,
                    },
                    fd.as_fd(),
                );
            }
            // A conflict is EWOULDBLOCK, which is EAGAIN on Linux.
            return Ok(rustix::fs::flock(&*fd, op)?);
        }
        let node = self.node_of(vp)?;
        let mut fl = to_flock(lock)?;
        if lock.typ == libc::F_UNLCK {
            let Some(ofd) = self.posix_locks.get(node.id, owner) else {
                return Ok(()); // nothing held: nothing to drop
            };
            fcntl_lock(&ofd, libc::F_OFD_SETLK, &mut fl)?;
            if lock.whole_file() {
                self.posix_locks.remove(node.id, owner);
            }
            return Ok(());
        }
        // One description per owner: found or made under the map's lock
        // would hold it across an open; made outside and installed unless
        // another request of the owner got there first.
        let ofd = match self.posix_locks.get(node.id, owner) {
            Some(d) => d,
            None => {
                let d = self.lock_description(&node)?;
                self.posix_locks
                    .get_or_insert(node.id, owner, fh, lock.pid, d)
            }
        };
        fcntl_lock(&ofd, libc::F_OFD_SETLK, &mut fl).map_err(|e| {
            if e == Errno::EACCES {
                Errno::EAGAIN
            } else {
                e
            }
        })
    }

    pub(crate) fn do_getlk(
        &self,
        vp: &VnodeRef,
        owner: u64,
        lock: &FileLock,
    ) -> VfsResult<FileLock> {
        let node = self.node_of(vp)?;
        let mut fl = to_flock(lock)?;
        // The owner's own locks never conflict with it: ask through its
        // description if it has one, else through a fresh one.
        let ofd = match self.posix_locks.get(node.id, owner) {
            Some(d) => d,
            None => self.lock_description(&node)?,
        };
        fcntl_lock(&ofd, libc::F_OFD_GETLK, &mut fl)?;
        if i32::from(fl.l_type) == libc::F_UNLCK {
            return Ok(FileLock {
                typ: libc::F_UNLCK,
                ..*lock
            });
        }
        let start = u64::try_from(fl.l_start).unwrap_or(0);
        let end = match u64::try_from(fl.l_len) {
            Ok(0) | Err(_) => LOCK_TO_EOF,
            Ok(n) => start + n - 1,
        };
        // A classic lock's holder is named by the kernel; an OFD lock's
        // (-1) is not, and every lock taken through the mount is one of
        // ours: named by its owner's process.
        let pid = match u32::try_from(fl.l_pid) {
            Ok(pid) => pid,
            Err(_) => self
                .holder(node.id, owner, lock, &fl)
                .map_or(0, |(_, pid)| pid),
        };
        Ok(FileLock {
            start,
            end,
            typ: i32::from(fl.l_type),
            pid,
        })
    }

    /// The lock owner (other than `asking`) holding `found`, the conflict
    /// F_GETLK met for `lock`, and its process (0 if not known): asked
    /// again through each owner's description, which its own locks never
    /// conflict with, the holder's meets something else or nothing. None
    /// for a lock held outside the mount (an OFD lock on the host) or
    /// where two owners hold the same lock.
    fn holder(
        &self,
        node: uvfs_vfs::Ino,
        asking: u64,
        lock: &FileLock,
        found: &libc::flock,
    ) -> Option<(u64, u32)> {
        let same = |a: &libc::flock| {
            (a.l_type, a.l_start, a.l_len) == (found.l_type, found.l_start, found.l_len)
        };
        self.posix_locks
            .others(node, asking)
            .into_iter()
            .find(|(_, _, ofd)| {
                let Ok(mut probe) = to_flock(lock) else {
                    return false;
                };
                fcntl_lock(ofd, libc::F_OFD_GETLK, &mut probe).is_ok() && !same(&probe)
            })
            .map(|(owner, pid, _)| (owner, pid))
    }

    /// The owner through the mount holding the lock that keeps `owner`
    /// from `lock` (`FileSystem::lock_holder`); None if nothing conflicts,
    /// the holder is outside the mount, or either may be an open file's
    /// (OFD) owner rather than a process's.
    ///
    /// The last because the kernel looks for deadlocks among processes'
    /// locks only: an open file's locks may be taken and dropped by any of
    /// the threads sharing it, so its wait blocks nobody else. A process
    /// mixing both (threads with OFD locks and threads with POSIX locks on
    /// one file) would otherwise be told `EDEADLK` for a wait another of
    /// its threads is about to end: a request does not say which kind of
    /// owner it comes from, and a process with more than one owner here
    /// is left out of the search altogether (`alone_in_process`).
    pub(crate) fn do_lock_holder(&self, vp: &VnodeRef, owner: u64, lock: &FileLock) -> Option<u64> {
        if !self.posix_locks.alone_in_process(owner) {
            return None;
        }
        let node = self.node_of(vp).ok()?;
        let ofd = self.posix_locks.get(node.id, owner)?;
        let mut fl = to_flock(lock).ok()?;
        fcntl_lock(&ofd, libc::F_OFD_GETLK, &mut fl).ok()?;
        // Nothing in the way, or a classic lock of a process on the host.
        if i32::from(fl.l_type) == libc::F_UNLCK || fl.l_pid >= 0 {
            return None;
        }
        let (holder, _) = self.holder(node.id, owner, lock, &fl)?;
        self.posix_locks.alone_in_process(holder).then_some(holder)
    }

    /// Gives `keeper` every description holding locks now, and each one
    /// from now on (`kept.rs`).
    pub(crate) fn do_keep_fds_with(&self, keeper: Arc<dyn uvfs_vfs::FdKeeper>) {
        let k = &self.posix_locks.keeper;
        if !k.set(keeper) {
            return;
        }
        for (what, fd) in self.posix_locks.all() {
            k.keep(what, fd.as_fd());
        }
        for (fh, of) in self.opens.all() {
            if !of.kept.load(Ordering::Relaxed) {
                continue;
            }
            if let Some(fd) = of.flock_fd() {
                k.keep(
                    Kept::Open {
                        node: of.node.id,
                        fh,
                    },
                    fd.as_fd(),
                );
            }
        }
    }

    pub(crate) fn do_unlock_owner(&self, vp: &VnodeRef, owner: u64) -> VfsResult<()> {
        let node = self.node_of(vp)?;
        self.posix_locks.remove(node.id, owner);
        Ok(())
    }
}
