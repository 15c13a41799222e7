//! Open files past the fd budget: idle handles give their fd back.
//!
//! Every open file on the mount is an fd of this server, out of one
//! budget no larger than what one caller may hold itself (the same hard
//! limit). So one process filling its own table with distinct files
//! (LTP's `creat05` creates files and holds them open until its own
//! table is full) would meet the server's limit first. Yet most of those
//! fds sit idle: where the kernel does a file's I/O itself (`uvfs_fuse`'s
//! backing files), it holds the backing file it registered, and the
//! server's fd serves only the rare request the kernel still sends
//! (FSYNC, FALLOCATE, LSEEK, locks, ioctls); elsewhere a handle nobody
//! reads is idle all the same.
//!
//! So when open files hold their whole share of the budget, an open
//! parks idle handles (`OpenFile::park`): closes their fds, keeping the
//! flags to open the file again with, which the first request that needs
//! one does ([`PassthroughFs::file_fd`]), through the node (its handle
//! leads back to the inode whatever its names do). Nothing a program can
//! see depends on which description a handle uses: all I/O is positioned,
//! the kernel keeps offsets and `O_APPEND`, and a handle holding `flock`
//! locks (on its description) is never parked. A sweep gives each
//! handle a second chance if it was used since the last (CLOCK, as the
//! cached fds' evictor does), and parks a batch, so its scan is paid once
//! per batch of opens.
//!
//! A handle must stay reopenable: a file whose last name the mount
//! removes has its parked handles opened again first (`keep_reachable`),
//! as an unnamed file may not be found by its handle any more; such a
//! file's handles are not parked after.

use crate::fdpool::{Fd, Relief, Reservation};
use crate::fs::PassthroughFs;
use crate::node::Node;
use crate::open::{OpenFile, OpenTable};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Errno, VfsResult};

/// Handles parked by one sweep: the scan of every open file is paid once
/// per this many opens past the share.
const BATCH: usize = 32;

/// Most sweeps one reservation makes: the fds a sweep frees may all be
/// taken by concurrent opens before it reserves one.
const MAX_SWEEPS: usize = 16;

impl OpenTable {
    /// Parks up to `n` idle handles, not `except`: those unused since the
    /// last sweep first, then any. How many fds went.
    pub(crate) fn park_idle(&self, n: usize, except: Option<&OpenFile>) -> usize {
        let mut parked = 0;
        for second_pass in [false, true] {
            self.each(|_, of| {
                if except.is_some_and(|e| std::ptr::eq(e, &**of)) {
                    return true;
                }
                if !second_pass && of.used.swap(false, Ordering::Relaxed) {
                    return true;
                }
                if of.park() {
                    parked += 1;
                }
                parked < n
            });
            if parked > 0 {
                break;
            }
        }
        parked
    }

    /// What the fd pool calls once it has nothing left to evict
    /// (`FdPool::set_relief`): parks a batch. Holds the table weakly:
    /// the table's fds hold the pool, and a strong hold back would keep
    /// both alive for ever.
    pub(crate) fn relief(self: &Arc<Self>) -> Relief {
        let weak = Arc::downgrade(self);
        Box::new(move || weak.upgrade().map_or(0, |o| o.park_idle(BATCH, None)))
    }

    /// The handles of `node` parked now.
    fn parked_of(&self, node: &Arc<Node>) -> Vec<Arc<OpenFile>> {
        let mut found = Vec::new();
        self.each(|_, of| {
            if Arc::ptr_eq(&of.node, node) && of.parked_flags().is_some() {
                found.push(of.clone());
            }
            true
        });
        found
    }
}

impl PassthroughFs {
    /// The fd `of` does its requests on: the one it holds, or (parked)
    /// its file opened again with its flags.
    pub(crate) fn file_fd(&self, of: &OpenFile) -> VfsResult<Arc<Fd>> {
        // Read before written: handles read by many threads at once keep
        // the line shared.
        if !of.used.load(Ordering::Relaxed) {
            of.used.store(true, Ordering::Relaxed);
        }
        if let Some(fd) = of.held() {
            return Ok(fd);
        }
        let Some(flags) = of.parked_flags() else {
            // Reopened by a concurrent request since.
            return of.held().ok_or(Errno::EBADF);
        };
        let path = self.fd_of(&of.node)?;
        // A request on an open file must not fail for want of the share:
        // past it, other idle handles make room, and failing that the
        // whole budget serves, as for a handed-over open.
        let res = match self.reserve_file(Some(of)) {
            Err(Errno::EMFILE) => self.pool.reserve_handed_over()?,
            r => r?,
        };
        let f = self.reopen_file(&of.node, path.as_fd(), flags)?;
        drop(path);
        self.pool.counters.unparked.fetch_add(1, Ordering::Relaxed);
        Ok(of.unpark(Arc::new(res.into_fd(f))))
    }

    /// The fd the open file `fh` does its requests on (`file_fd`).
    pub(crate) fn fh_fd(&self, fh: uvfs_vfs::Fh) -> VfsResult<Arc<Fd>> {
        let of = self.opens.get(fh)?;
        self.file_fd(&of)
    }

    /// A slot of the open files' share for a new open file (or a parked
    /// one's reopening, `except`): past the share, idle handles are
    /// parked to make room; `EMFILE` if none can be.
    pub(crate) fn reserve_file(&self, except: Option<&OpenFile>) -> VfsResult<Reservation> {
        for _ in 0..MAX_SWEEPS {
            match self.pool.reserve_open() {
                Err(Errno::EMFILE) => {}
                r => return r,
            }
            if self.park_batch(except) == 0 {
                break;
            }
        }
        Err(Errno::EMFILE)
    }

    /// Parks a batch of idle handles (not `except`); how many.
    fn park_batch(&self, except: Option<&OpenFile>) -> usize {
        let n = self.opens.park_idle(BATCH, except);
        self.pool
            .counters
            .parked
            .fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Opens again every parked handle of `node`, whose last name the
    /// mount is removing (and, after, has removed: a sweep may have
    /// parked one in between): once unnamed, its handle may lead nowhere.
    /// A handle that cannot be reopened stays parked, and its requests
    /// fail as its reopening does.
    pub(crate) fn keep_reachable(&self, node: &Arc<Node>) {
        if self.opens.parked() == 0 {
            return;
        }
        for of in self.opens.parked_of(node) {
            if let Err(e) = self.file_fd(&of) {
                log::warn!(
                    "an open file of node {} could not be reopened before its last name went: {e}",
                    node.id
                );
            }
        }
    }
}
