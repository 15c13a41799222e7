//! Detaching from the terminal: `uvfs mount` without `--foreground`.
//!
//! The process forks before it creates any thread. The parent waits on a
//! pipe until the child reports that the mount is up (exit 0) or why it
//! failed (the message is printed, exit 1), so `uvfs mount X && ls X`
//! works and errors are not lost. The child starts a new session, moves
//! to `/`, and once mounted points its standard streams at `/dev/null`.

use std::fs::File;
use std::io::{Read, Write};

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
    // Each dup2 atomically replaces a standard stream with /dev/null.
    let _ = rustix::stdio::dup2_stdin(&null);
    let _ = rustix::stdio::dup2_stdout(&null);
    let _ = rustix::stdio::dup2_stderr(&null);
}

/// Forks. In the parent this never returns: it exits with the child's
/// verdict. In the child it returns the reporter to call once mounted.
/// Must be called while the process has a single thread.
pub fn daemonize() -> std::io::Result<Readiness> {
    let (rd, wr) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (rd, wr) = (File::from(rd), File::from(wr));
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
    // Failure (already a group leader) is harmless.
    let _ = rustix::process::setsid();
    let _ = std::env::set_current_dir("/");
    Ok(Readiness { pipe: Some(wr) })
}
