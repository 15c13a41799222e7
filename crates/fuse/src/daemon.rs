//! Detaching from the terminal: `uvfs mount` without `--foreground`.
//!
//! The process forks before it creates any thread. The parent waits on a
//! pipe until the child reports that the mount is up (exit 0) or why it
//! failed (the message is printed, exit 1), so `uvfs mount X && ls X`
//! works and errors are not lost. The child starts a new session, moves
//! to `/`, and once mounted points its standard streams at `/dev/null`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};

/// The child's end of the readiness pipe.
pub struct Readiness {
    pipe: Option<File>,
}

impl Readiness {
    /// A readiness reporter for a process that did not fork.
    pub fn foreground() -> Readiness {
        Readiness { pipe: None }
    }

    /// Tells the waiting parent how the mount went; then the standard
    /// streams go to `/dev/null` (after a failure too: the parent prints
    /// the message, and the child's own report of it would repeat it).
    pub fn report(&mut self, r: &std::io::Result<()>) {
        let Some(mut p) = self.pipe.take() else {
            return;
        };
        let msg = match r {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        };
        let _ = p.write_all(msg.as_bytes());
        drop(p);
        redirect_stdio();
    }
}

fn redirect_stdio() {
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    for fd in 0..3 {
        // SAFETY: both descriptors are open; dup2 atomically replaces the
        // standard stream with /dev/null and touches no Rust-owned fd.
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
}

/// Forks. In the parent this never returns: it exits with the child's
/// verdict. In the child it returns the reporter to call once mounted.
/// Must be called while the process has a single thread.
pub fn daemonize() -> std::io::Result<Readiness> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns;
    // each File takes sole ownership of one.
    let (rd, wr) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: the caller guarantees the process is single-threaded, so the
    // child gets a consistent copy of every lock and allocator state.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        drop(wr);
        let mut msg = String::new();
        let mut rd = rd;
        let _ = rd.read_to_string(&mut msg);
        if msg == "ok" {
            std::process::exit(0);
        }
        // Not eprintln!: it panics when stderr is a closed pipe.
        let mut err = std::io::stderr();
        let _ = if msg.is_empty() {
            writeln!(err, "uvfs: the server exited before mounting")
        } else {
            writeln!(err, "uvfs: {}", msg.trim_start_matches("error: "))
        };
        std::process::exit(1);
    }
    drop(rd);
    // SAFETY: setsid has no memory-safety preconditions; failure (already
    // a group leader) is harmless.
    unsafe { libc::setsid() };
    let _ = std::env::set_current_dir("/");
    Ok(Readiness { pipe: Some(wr) })
}
