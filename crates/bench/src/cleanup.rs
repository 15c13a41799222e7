//! What an interrupted benchmark leaves behind, undone on SIGINT, SIGTERM
//! or SIGHUP.
//!
//! The benchmarks that go through the kernel make scratch state outside
//! the process: a private tmpfs mount, `uvfs mount` and peer servers with
//! their mountpoints and logs, native trees of up to 200,000 files under
//! `/tmp`. Their owners (`ScratchDir`, `Tmpfs`, `ServerMount`, `PeerMount`)
//! undo it on drop, but a signal's default action ends the process without
//! unwinding, and Ctrl-C left a tmpfs mounted and a tree on disk.
//!
//! So each owner also *registers* what it made here, and deregisters when
//! it has undone it itself. [`install`] blocks the three signals in the
//! calling thread before any other thread exists (threads inherit the
//! mask, and so do children: every command the benchmarks start goes
//! through [`unblock_in_child`], or a server would never hear SIGTERM) and
//! takes them on one thread with `sigwait`. On a
//! signal that thread undoes whatever is still registered, newest first
//! (a mount before its mountpoint directory), and exits with 128 + the
//! signal number, as a shell reports a process killed by it.
//!
//! The undo runs while the benchmark's own threads keep going; each step
//! tolerates that: unmounting falls back to a lazy detach when a walker is
//! inside the mount, removing a directory that is already gone is fine,
//! and the process exits right after. SIGKILL cannot be caught: a server
//! still goes with its benchmark (`PR_SET_PDEATHSIG`) and unmounts itself,
//! but scratch directories stay.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;
use uvfs_fuse::BlockedSignals;

/// One thing to undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// A mount: unmounted (lazily if busy).
    Mount(PathBuf),
    /// A child process: sent SIGTERM.
    Child(u32),
    /// An empty directory (a mountpoint): removed.
    Dir(PathBuf),
    /// A directory and everything under it: removed.
    Tree(PathBuf),
    /// A file: removed.
    File(PathBuf),
}

/// A list of leftovers, newest last. The process has one ([`GLOBAL`]),
/// which the signal thread undoes; tests make their own.
pub struct Registry {
    next: AtomicU64,
    items: Mutex<Vec<(u64, Leftover)>>,
}

/// The leftovers of this process's benchmarks.
pub static GLOBAL: Registry = Registry::new();

impl Registry {
    pub const fn new() -> Registry {
        Registry {
            next: AtomicU64::new(1),
            items: Mutex::new(Vec::new()),
        }
    }

    fn items(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Leftover)>> {
        // A panic while holding the lock leaves a plain Vec intact.
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `l` to be undone by [`Registry::undo_all`] unless the
    /// returned registration is dropped first.
    pub fn register(&'static self, l: Leftover) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.items().push((id, l));
        Registered { reg: self, id }
    }

    /// What is registered now, oldest first.
    pub fn pending(&self) -> Vec<Leftover> {
        self.items().iter().map(|(_, l)| l.clone()).collect()
    }

    /// Undoes everything registered, newest first, and empties the list.
    /// Returns what it did, one line each.
    pub fn undo_all(&self) -> Vec<String> {
        let todo: Vec<Leftover> = self.items().drain(..).map(|(_, l)| l).rev().collect();
        todo.iter().map(undo).collect()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

/// A registered leftover; dropping it deregisters (its owner undid it).
#[must_use = "dropping the registration at once deregisters the leftover"]
pub struct Registered {
    reg: &'static Registry,
    id: u64,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registered({})", self.id)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.reg.items().retain(|(id, _)| *id != self.id);
    }
}

/// Registers `l` in [`GLOBAL`].
pub fn register(l: Leftover) -> Registered {
    GLOBAL.register(l)
}

fn undo(l: &Leftover) -> String {
    let res = match l {
        Leftover::Mount(p) => unmount(p),
        Leftover::Child(pid) => stop_child(*pid),
        Leftover::Dir(p) => std::fs::remove_dir(p),
        Leftover::Tree(p) => remove_tree(p),
        Leftover::File(p) => std::fs::remove_file(p),
    };
    match res {
        Ok(()) => format!("undid {l:?}"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!("{l:?}: already gone"),
        Err(e) => format!("{l:?}: {e}"),
    }
}

/// Stops a server we spawned: SIGTERM (every server here unmounts and
/// exits on it), reaped within a few seconds, else SIGKILL. Waited for, so
/// the benchmark does not exit while its servers still run.
fn stop_child(pid: u32) -> std::io::Result<()> {
    let pid = pid as libc::pid_t;
    let gone = || std::io::Error::from(std::io::ErrorKind::NotFound);
    // SAFETY: kill(2) has no memory-safety preconditions. The pid is our
    // child; its owner deregisters it before reaping it, and a reaped one
    // that slipped through fails with ESRCH.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ESRCH) {
            gone()
        } else {
            e
        });
    }
    let reaped = |flags| {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; waitpid on our own
        // child. ECHILD (its owner reaped it meanwhile) counts as gone.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        r == pid || (r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if reaped(libc::WNOHANG) {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: as above; the child has not been reaped.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    reaped(0);
    Err(std::io::Error::other(
        "did not exit within 5 s of SIGTERM; killed",
    ))
}

/// Removes a tree that a benchmark thread may still be filling (a native
/// tree being built when the signal came): moved aside first, so the
/// builder's next path-based create fails, then removed, retried while a
/// create that resolved its path before the move still lands inside.
fn remove_tree(p: &Path) -> std::io::Result<()> {
    let aside = p.with_extension(format!("removing-{}", std::process::id()));
    let target = match std::fs::rename(p, &aside) {
        Ok(()) => aside,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => p.to_path_buf(),
    };
    let mut last = Ok(());
    for _ in 0..20 {
        match std::fs::remove_dir_all(&target) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Err(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    last
}

/// Unmounts `p`, lazily if it is busy; a path with nothing mounted on it
/// is not an error.
pub(crate) fn unmount(p: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path; umount2 only reads it.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINVAL) {
        // Not a mount point (any more).
        return Ok(());
    }
    // SAFETY: as above.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    Err(std::io::Error::last_os_error())
}

/// The signal being handled, 0 before one came.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

/// Blocks forever once a signal's cleanup has begun, so the benchmark's
/// main thread, failing on a tree or mount the cleanup removed, neither
/// reports that as the error nor ends the process before the cleanup
/// finishes; the signal thread exits the process when done. Returns at
/// once otherwise.
pub fn hold_if_signalled() {
    if SIGNALLED.load(Ordering::SeqCst) != 0 {
        loop {
            std::thread::park();
        }
    }
}

/// Unblocks the termination signals in the child `cmd` will start: a
/// blocked mask survives fork and exec, and a server started with SIGTERM
/// blocked never hears its stop signal (libfuse's `passthrough_ll` had to
/// be killed after the grace period).
pub fn unblock_in_child(cmd: &mut std::process::Command) -> &mut std::process::Command {
    BlockedSignals::unblock_in_child(cmd)
}

/// Makes the child `cmd` will start get SIGTERM when this process dies
/// (`PR_SET_PDEATHSIG`), so a server or peer still goes with its
/// benchmark when the benchmark is killed outright.
pub fn dies_with_parent(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and
    // calls only prctl, which is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        })
    }
}

/// Takes SIGINT, SIGTERM and SIGHUP on a thread of their own that undoes
/// the registered leftovers and exits. Call before starting any thread:
/// threads started earlier keep the default action and a signal delivered
/// to one of them ends the process at once.
pub fn install() -> std::io::Result<()> {
    BlockedSignals::block()?.wait_on_thread("uvfs-bench-signals", |sig| {
        SIGNALLED.store(sig, Ordering::SeqCst);
        use std::io::Write as _;
        let mut err = std::io::stderr();
        let _ = writeln!(err, "\nuvfs bench: signal {sig}: cleaning up");
        for line in GLOBAL.undo_all() {
            let _ = writeln!(err, "uvfs bench:   {line}");
        }
        std::process::exit(128 + sig);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_is_newest_first_and_skips_what_was_deregistered() {
        static R: Registry = Registry::new();
        let base = std::env::temp_dir().join(format!("uvfs-cleanup-test-{}", std::process::id()));
        let tree = base.join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), b"x").unwrap();
        let log = base.join("log");
        std::fs::write(&log, b"x").unwrap();
        let kept = base.join("kept");
        std::fs::create_dir_all(&kept).unwrap();

        // Oldest first: the base dir, then what goes inside it. Undone
        // newest first, the base dir is empty by the time its turn comes.
        let _base = R.register(Leftover::Dir(base.clone()));
        let _tree = R.register(Leftover::Tree(tree.clone()));
        let r_kept = R.register(Leftover::Tree(kept.clone()));
        let _log = R.register(Leftover::File(log.clone()));
        // Its owner undid it itself (here: moved it out of the way).
        let moved = std::env::temp_dir().join(format!("uvfs-cleanup-kept-{}", std::process::id()));
        std::fs::rename(&kept, &moved).unwrap();
        drop(r_kept);
        assert_eq!(
            R.pending(),
            vec![
                Leftover::Dir(base.clone()),
                Leftover::Tree(tree.clone()),
                Leftover::File(log.clone()),
            ]
        );
        let lines = R.undo_all();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines.iter().all(|l| l.starts_with("undid")), "{lines:?}");
        assert!(!base.exists());
        assert!(R.pending().is_empty());
        // Undoing again finds nothing to do; a vanished path is reported
        // as gone, not as an error.
        assert!(R.undo_all().is_empty());
        let _gone = R.register(Leftover::Tree(tree.clone()));
        assert_eq!(
            R.undo_all(),
            vec![format!("{:?}: already gone", Leftover::Tree(tree))]
        );
        std::fs::remove_dir(&moved).unwrap();
    }

    /// The blocked-signal mask of a child started from this thread, from
    /// its /proc status (`SigBlk`, hex).
    fn child_sigblk(unblock: bool) -> u64 {
        // grep itself, not through a shell: shells reset the mask.
        let mut cmd = std::process::Command::new("grep");
        cmd.args(["SigBlk", "/proc/self/status"]);
        if unblock {
            unblock_in_child(&mut cmd);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        u64::from_str_radix(text.trim().trim_start_matches("SigBlk:").trim(), 16).unwrap()
    }

    #[test]
    fn children_start_with_the_termination_signals_unblocked() {
        let bits = |s: libc::c_int| 1u64 << (s - 1);
        let ours = bits(libc::SIGINT) | bits(libc::SIGTERM) | bits(libc::SIGHUP);
        // SAFETY: sigset_t is a plain bit array; all-zero is a valid (empty)
        // set, which a null new mask leaves alone while the old one is read.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `old` is a valid sigset_t to write; this test's thread
        // alone changes its mask, and restores it below.
        assert_eq!(
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut old) },
            0
        );
        BlockedSignals::block().unwrap();
        let inherited = child_sigblk(false);
        let unblocked = child_sigblk(true);
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        assert_eq!(
            inherited & ours,
            ours,
            "a blocked mask is inherited: {inherited:#x}"
        );
        assert_eq!(
            unblocked & ours,
            0,
            "still blocked in the child: {unblocked:#x}"
        );
    }

    #[test]
    fn unmounting_a_plain_directory_is_not_an_error() {
        let d = std::env::temp_dir().join(format!("uvfs-cleanup-nomount-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        assert!(unmount(&d).is_ok());
        std::fs::remove_dir(&d).unwrap();
    }
}
