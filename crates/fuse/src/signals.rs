//! Clean unmount on SIGINT, SIGTERM and SIGHUP.
//!
//! The signals are blocked in the first thread before any other thread
//! exists (threads inherit the mask), and one dedicated thread takes them
//! with `sigwait`, so no handler ever runs in a request loop. On a signal
//! it unmounts: plainly, or lazily (`MNT_DETACH`) if the mount is busy, in
//! which case the kernel finishes the unmount when its last user leaves.
//! Either way the request loops then read `ENODEV` and the server exits.

use crate::kmount::Unmounter;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The termination signal taken, 0 before one: why the server stopped.
static TAKEN: AtomicI32 = AtomicI32::new(0);

/// The name of a termination signal.
pub fn name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// The termination signal this process took, if any.
pub fn taken() -> Option<i32> {
    match TAKEN.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// Proof that the termination signals are blocked in this thread: obtain
/// it before creating any thread.
pub struct BlockedSignals {
    set: libc::sigset_t,
}

impl BlockedSignals {
    /// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread.
    pub fn block() -> std::io::Result<BlockedSignals> {
        // SAFETY:
        // - all-zero bytes are a valid (if unspecified) sigset_t, which
        //   sigemptyset initialises;
        // - `set` is a valid, exclusively borrowed sigset_t for each call;
        // - the signal numbers are valid constants;
        // - pthread_sigmask only reads `set` and accepts a null old mask.
        let (set, rc) = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGHUP);
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            (set, rc)
        };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(BlockedSignals { set })
    }

    /// Waits for a termination signal on a new thread and then unmounts;
    /// if the mount is busy, detaches it lazily.
    pub fn on_signal(self, mountpoint: &Path, mut unmounter: Unmounter) -> std::io::Result<()> {
        let mp = mountpoint.display().to_string();
        let set = self.set;
        std::thread::Builder::new()
            .name("uvfs-signals".into())
            .spawn(move || {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is an initialised sigset_t owned by this
                // closure and `sig` a valid out-pointer.
                let rc = unsafe { libc::sigwait(&set, &mut sig) };
                if rc != 0 {
                    return;
                }
                TAKEN.store(sig, Ordering::Relaxed);
                log::info!("{}: unmounting {mp}", name(sig));
                if let Err(e) = unmounter.unmount() {
                    log::warn!("unmount failed ({e}); detaching lazily");
                    if let Err(e) = unmounter.detach() {
                        log::error!("lazy unmount failed: {e}");
                    }
                }
            })?;
        Ok(())
    }
}
