//! How each handler runs: counted, refused on a read-only server when it
//! changes anything, a panic answered `EIO` (see the failure discipline in
//! `mod.rs`), and where: on the request loop's thread, or on the offload
//! pool when an io_uring queue thread would otherwise wait for a disk or
//! for space that files being let go still hold (`offload.rs`).

use super::counters::Op;
use super::{Inner, Server, ON_URING_QUEUE};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use uvfs_vfs::{Errno, VfsResult};

impl Server {
    /// Counts a request about `node` and runs its handler `f` (see
    /// `shielded`).
    pub(super) fn guard<T>(
        &self,
        what: Op,
        node: u64,
        f: impl FnOnce(&Inner) -> VfsResult<T>,
    ) -> VfsResult<T> {
        let i = &*self.inner;
        i.counters.requests.fetch_add(1, Ordering::Relaxed);
        i.counters.by_op.bump(what);
        if ON_URING_QUEUE.with(|u| *u) {
            i.counters.uring.fetch_add(1, Ordering::Relaxed);
        }
        self.shielded(what, node, f)
    }

    /// Like `guard`, for a request that changes the file system: answered
    /// EROFS on a read-only server. The kernel refuses these itself on a
    /// read-only mount, so this is what keeps the promise when it does not
    /// (remounted read-write, or a peer that is not a kernel): every
    /// request that writes data, metadata or names goes through here, and
    /// OPEN checks its flags itself.
    pub(super) fn changing<T>(
        &self,
        what: Op,
        node: u64,
        f: impl FnOnce(&Inner) -> VfsResult<T>,
    ) -> VfsResult<T> {
        self.guard(what, node, |i| {
            if i.read_only {
                return Err(Errno::EROFS);
            }
            f(i)
        })
    }

    /// Runs `f`, turning a panic into `EIO`, counting errors and logging
    /// those that are not ordinary (`answered.rs`).
    pub(super) fn shielded<T>(
        &self,
        what: Op,
        node: u64,
        f: impl FnOnce(&Inner) -> VfsResult<T>,
    ) -> VfsResult<T> {
        crate::release::on_request();
        let i = &*self.inner;
        let r = match catch_unwind(AssertUnwindSafe(|| f(i))) {
            Ok(r) => r,
            Err(_) => {
                i.counters.panics.fetch_add(1, Ordering::Relaxed);
                log::error!(
                    "{} handler on node {node} panicked; answered EIO",
                    what.name()
                );
                Err(Errno::EIO)
            }
        };
        if let Err(e) = &r {
            i.counters.errors.fetch_add(1, Ordering::Relaxed);
            crate::answered::note(what.name(), node, *e, i.read_only);
        }
        r
    }

    /// Handles a request that may wait for a disk: on a pool thread if
    /// this is an io_uring queue thread and the file system may wait for
    /// a device (`offload.rs`), here otherwise. `f` answers the request.
    pub(super) fn maybe_offload(&self, f: impl FnOnce(&Server) + Send + 'static) {
        self.offload_if(self.offloading(), f);
    }

    /// Runs `f` (which answers the request) on the pool if `elsewhere`,
    /// here otherwise.
    pub(super) fn offload_if(&self, elsewhere: bool, f: impl FnOnce(&Server) + Send + 'static) {
        if !elsewhere {
            return f(self);
        }
        // Counted here: `guard` runs on the pool thread.
        self.inner.counters.uring.fetch_add(1, Ordering::Relaxed);
        self.offload(f);
    }

    /// Handles a request that needs new inode space (a new file, name or
    /// attribute): on a pool thread if this is an io_uring queue thread and
    /// the file system says such a request may wait for space that files
    /// being let go still hold (`FileSystem::short_of_space`), here
    /// otherwise. What it waits for is the RELEASE and FORGET of those
    /// files, and a RELEASE may be queued on this very thread, behind it:
    /// served here, it would wait for nothing and fail with ENOSPC (seen
    /// with O_TMPFILE on a full memfs: close, then make another).
    pub(super) fn making(&self, f: impl FnOnce(&Server) + Send + 'static) {
        self.offload_if(self.short_of_space_here(), f);
    }

    /// The test [`making`](Self::making) applies.
    pub(super) fn short_of_space_here(&self) -> bool {
        ON_URING_QUEUE.with(|u| *u) && self.inner.fs.short_of_space()
    }

    /// Whether a request that may end a file's storage goes to the pool:
    /// requests that may wait for a device do (`offloading`), and the file
    /// system says this one may free much (`FileSystem::may_free_much`),
    /// which `ask` puts to it. A failed or panicking question is a no: the
    /// request then meets the same failure where it is served and answers
    /// it.
    pub(super) fn frees_much(&self, ask: impl FnOnce(&Inner) -> Option<bool>) -> bool {
        let i = &*self.inner;
        self.offloading()
            && !i.read_only
            && catch_unwind(AssertUnwindSafe(|| ask(i)))
                .ok()
                .flatten()
                .unwrap_or(false)
    }

    /// Whether requests that may wait for a device go to the pool: this
    /// is an io_uring queue thread, and the file system's requests may.
    pub(super) fn offloading(&self) -> bool {
        ON_URING_QUEUE.with(|u| *u) && self.inner.fs.waits_for_devices()
    }

    /// Runs `f` on the pool (`offload.rs`).
    pub(super) fn offload(&self, f: impl FnOnce(&Server) + Send + 'static) {
        let i = &self.inner;
        i.counters.offloaded.fetch_add(1, Ordering::Relaxed);
        let me = Server { inner: i.clone() };
        i.offload.run(Box::new(move || f(&me)));
    }
}
