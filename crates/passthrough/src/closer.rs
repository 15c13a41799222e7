//! Last closes of removed large files, after the reply.
//!
//! A local file system frees a removed file's blocks in its last `iput`,
//! which `unlink(2)` does *after* unlocking the directory: other
//! processes may list and look up in that directory while ext4 frees
//! (0.2-0.7 s for 2 GiB here). Through FUSE the kernel holds the
//! directory locked until the server answers the UNLINK, so a server whose
//! own `unlinkat` (or the close of its cached fd that follows) frees the
//! blocks keeps the directory locked for as long: `ls` of it waited 388-399 ms
//! during `rm` of a 2 GiB file. So the removal of a large file keeps an
//! `O_PATH` fd of it across the `unlinkat` (`PassthroughFs::hold_large`),
//! which makes that call quick, and that fd's close, the last, happens
//! here, on a thread of its own, once the answer has gone.
//!
//! At most [`MAX_PENDING`] fds wait here at once (they are outside the fd
//! budget): past that, a removal closes in place, as before.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

/// Most fds waiting for their close at once.
pub(crate) const MAX_PENDING: usize = 32;

#[derive(Default)]
pub(crate) struct Closer {
    /// The closing thread's queue; started on first use.
    tx: parking_lot::Mutex<Option<Sender<OwnedFd>>>,
    pending: Arc<AtomicUsize>,
    /// Closes done here (a counter for `stats`).
    pub(crate) done: Arc<AtomicU64>,
}

impl Closer {
    /// Takes a place for one fd, if there is room.
    pub(crate) fn reserve(&self) -> bool {
        self.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PENDING).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a place [`reserve`](Self::reserve) took, unused.
    pub(crate) fn unreserve(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// Closes `fd` on the closing thread (taking the place [`reserve`]
    /// gave), or here if that thread cannot be had.
    ///
    /// [`reserve`]: Self::reserve
    pub(crate) fn close_later(&self, fd: OwnedFd) {
        let mut tx = self.tx.lock();
        if tx.is_none() {
            *tx = self.start();
        }
        match tx.as_ref().map(|t| t.send(fd)) {
            Some(Ok(())) => {}
            // No thread: close here (the returned fd drops now).
            Some(Err(_)) | None => {
                *tx = None;
                self.pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    fn start(&self) -> Option<Sender<OwnedFd>> {
        let (tx, rx) = channel::<OwnedFd>();
        let (pending, done) = (self.pending.clone(), self.done.clone());
        std::thread::Builder::new()
            .name("uvfs-closer".into())
            .spawn(move || {
                // Ends when the file system (the sender) is gone and the
                // queue is drained.
                for fd in rx {
                    drop(fd);
                    done.fetch_add(1, Ordering::Relaxed);
                    pending.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .ok()?;
        Some(tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn fds_are_closed_on_the_closing_thread_and_places_come_back() {
        let c = Closer::default();
        let fds: Vec<OwnedFd> = (0..MAX_PENDING).map(|_| open_fd()).collect();
        for _ in 0..MAX_PENDING {
            assert!(c.reserve());
        }
        assert!(!c.reserve(), "more than MAX_PENDING places");
        for fd in fds {
            c.close_later(fd);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while c.done.load(Ordering::Relaxed) < MAX_PENDING as u64 {
            assert!(
                std::time::Instant::now() < deadline,
                "closes did not happen"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(c.reserve(), "places were not given back");
    }
}
