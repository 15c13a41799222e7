//! Requests made on a queue's CPU, so that the kernel hands that queue's
//! waiting requests to its entries.
//!
//! The kernel gives a queued request to an entry only when some entry is
//! committed (`FUSE_IO_URING_CMD_COMMIT_AND_FETCH`) or a background
//! request arrives. An entry that is registered (`REGISTER`) is only put
//! on the queue's list of free entries (`fuse_uring_do_register`), where
//! it waits for the next request to *arrive*; requests already queued
//! stay queued. A queue whose replies are held back (parked lock waits
//! keep their entries) registers more entries so that its CPU's callers
//! are still answered; but requests that came while every entry was
//! taken wait behind them until something commits, and when what the
//! held replies wait for is itself among them (the lock holder's close),
//! nothing ever does. A request made on the queue's CPU takes a free
//! entry; its answer's commit fetches the first queued request, whose
//! answer's commit fetches the next, and so on.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

/// Pins this thread to `cpu`; whether that worked.
pub(super) fn pin(cpu: u16) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it
    // for cpu < CPU_SETSIZE (checked); sched_setaffinity reads the set.
    unsafe {
        if cpu as usize >= libc::CPU_SETSIZE as usize {
            return false;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// A `statx` of `path` that the kernel must ask the server for (forced
/// past the attribute cache).
fn ask(path: &std::ffi::CStr) {
    // SAFETY: statx reads a NUL-terminated path and writes a zeroed statx
    // struct of ours.
    unsafe {
        let mut st: libc::statx = std::mem::zeroed();
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_STATX_FORCE_SYNC,
            libc::STATX_BASIC_STATS,
            &mut st,
        );
    }
}

fn c_path(root: &Path) -> Option<std::ffi::CString> {
    std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).ok()
}

/// A request on queue `qid`'s CPU: a `statx` of `root` (the mount's
/// root). Made from a thread of its own, which waits for the answer (from
/// this process or its successor).
pub(super) fn request_on(qid: u16, root: &Path, what: &'static str) {
    let Some(path) = c_path(root) else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name(format!("fuser-{what}-{qid}"))
        .spawn(move || {
            if !pin(qid) {
                log::warn!("fuse io_uring queue {qid}: cannot run on its CPU to {what} it");
                return;
            }
            ask(&path);
        });
    if let Err(e) = spawned {
        log::warn!("fuse io_uring queue {qid}: cannot {what} it: {e}");
    }
}

/// A queue's nudges while it holds replies back. Each held reply may have
/// left requests queued, and a nudge's own request may be queued behind
/// them (every free entry taken meanwhile by other arrivals), where it
/// helps nothing until they move: so each nudge asked for after another
/// has made its request gets a request of its own. Nudges asked for
/// before that are served by the one not yet made (it comes after the
/// entries they were asked for are free).
#[derive(Default)]
pub(super) struct Nudger {
    /// A nudge is on its way and has not made its request yet.
    unasked: Arc<Mutex<bool>>,
}

impl Nudger {
    /// Makes a request on queue `qid`'s CPU, unless one not yet made
    /// will. To be called once the queue's free entries are in the
    /// kernel (submitted): a request that finds none is queued behind
    /// the others.
    pub(super) fn nudge(&self, qid: u16, root: Option<PathBuf>) {
        let Some(path) = root.as_deref().and_then(c_path) else {
            return;
        };
        {
            let mut unasked = self.unasked.lock();
            if *unasked {
                return;
            }
            *unasked = true;
        }
        let unasked = self.unasked.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("fuser-nudge-{qid}"))
            .spawn(move || {
                let pinned = pin(qid);
                *unasked.lock() = false;
                if pinned {
                    ask(&path);
                } else {
                    log::warn!("fuse io_uring queue {qid}: cannot run on its CPU to nudge it");
                }
            });
        if let Err(e) = spawned {
            *self.unasked.lock() = false;
            log::warn!("fuse io_uring queue {qid}: cannot nudge it: {e}");
        }
    }
}
