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

/// How long a server whose mount is gone here waits for its connection
/// to end before it stops anyway (`BlockedSignals::on_signal`).
pub const LEAVE_AFTER: std::time::Duration = std::time::Duration::from_secs(3);

/// SIGINT, SIGTERM and SIGHUP as a signal set.
fn termination_signals() -> libc::sigset_t {
    // SAFETY: all-zero bytes are a valid (if unspecified) sigset_t, which
    // sigemptyset initialises; `set` is exclusively borrowed for each call
    // and the signal numbers are valid constants.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
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
        let set = termination_signals();
        // SAFETY: `set` is an initialised sigset_t; pthread_sigmask only
        // reads it and accepts a null old mask.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(BlockedSignals { set })
    }

    /// Takes the first termination signal on a new thread named `name`
    /// and calls `then` with its number there.
    pub fn wait_on_thread(
        self,
        name: &str,
        then: impl FnOnce(i32) + Send + 'static,
    ) -> std::io::Result<()> {
        let set = self.set;
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is an initialised sigset_t owned by this
                // closure and `sig` a valid out-pointer.
                if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                    then(sig);
                }
            })?;
        Ok(())
    }

    /// Unblocks the termination signals in the child `cmd` will start: a
    /// blocked mask survives fork and exec, and a server started with
    /// SIGTERM blocked never hears its stop signal.
    pub fn unblock_in_child(cmd: &mut std::process::Command) -> &mut std::process::Command {
        use std::os::unix::process::CommandExt;
        let set = termination_signals();
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only pthread_sigmask (sigprocmask in a single-threaded
        // child, async-signal-safe) on a sigset_t it owns; it allocates
        // nothing.
        unsafe {
            cmd.pre_exec(move || {
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                Ok(())
            })
        }
    }

    /// Waits for a termination signal on a new thread and then unmounts;
    /// if the mount is busy, detaches it lazily (and serves its last
    /// users).
    ///
    /// Unmounted here, the connection normally ends at once and the
    /// server with it. A copy of the mount in another mount namespace (an
    /// `unshare -m` made while it was mounted, with private propagation)
    /// keeps the connection up, and the server would serve it for ever:
    /// after `LEAVE_AFTER` (3 s) the server calls `leave` (which tells its
    /// supervisor) and exits, as libfuse's servers do on SIGTERM; the
    /// copies then answer ENOTCONN.
    pub fn on_signal(
        self,
        mountpoint: &Path,
        mut unmounter: Unmounter,
        leave: Box<dyn FnOnce() + Send>,
    ) -> std::io::Result<()> {
        let mp = mountpoint.display().to_string();
        self.wait_on_thread("uvfs-signals", move |sig| {
            TAKEN.store(sig, Ordering::Relaxed);
            log::info!("{}: unmounting {mp}", name(sig));
            if let Err(e) = unmounter.unmount() {
                log::warn!("unmount failed ({e}); detaching lazily");
                if let Err(e) = unmounter.detach() {
                    log::error!("lazy unmount failed: {e}");
                }
                return;
            }
            let deadline = std::time::Instant::now() + LEAVE_AFTER;
            while unmounter.connected() {
                if std::time::Instant::now() >= deadline {
                    log::warn!(
                        "{mp} is unmounted here, but the connection is still up {LEAVE_AFTER:?} \
                         later: a copy of the mount lives in another mount namespace. \
                         Stopping anyway ({}); the copies answer ENOTCONN",
                        name(sig)
                    );
                    leave();
                    log::logger().flush();
                    std::process::exit(0);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    }
}
