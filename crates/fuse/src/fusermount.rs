//! Mounting and unmounting through `fusermount3`, for users without the
//! privilege for mount(2), as libfuse does.
//!
//! `fusermount3` is setuid root: it checks that the caller may mount there
//! (owns or may write the mountpoint, `allow_other` only with
//! `user_allow_other` in /etc/fuse.conf), opens `/dev/fuse` with the
//! caller's own permissions, mounts, and passes the device fd back over
//! the socket named by `_FUSE_COMMFD`. The server then holds its own
//! `/dev/fuse` connection exactly as after mount(2) (`kmount.rs`), and
//! unmounts with `fusermount3 -u`.

use std::ffi::OsString;
use std::io::{IoSliceMut, Read as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The helper: `$FUSERMOUNT_PATH` if set (as fuser and libfuse allow),
/// else `fusermount3` from `PATH`.
fn program() -> OsString {
    std::env::var_os("FUSERMOUNT_PATH").unwrap_or_else(|| "fusermount3".into())
}

/// What to tell the user when the helper cannot be run at all.
fn not_runnable(e: std::io::Error) -> std::io::Error {
    let prog = program();
    let why = if e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "{} is not installed: mounting without root needs it (Debian/Ubuntu: \
             `apt install fuse3`; Fedora: `dnf install fuse3`)",
            prog.to_string_lossy()
        )
    } else {
        format!("cannot run {}: {e}", prog.to_string_lossy())
    };
    std::io::Error::new(e.kind(), why)
}

/// Escapes `,` and `\` in an option's value, as libfuse does for
/// fusermount3 (which splits options at unescaped commas).
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        if c == ',' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s
}

/// Mounts on `mountpoint` with fusermount3 and `options` (comma-separated,
/// values escaped) and returns the connection's `/dev/fuse` fd.
pub fn mount(mountpoint: &Path, options: &str) -> std::io::Result<OwnedFd> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(program());
    cmd.arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls fcntl, which is async-signal-safe; it touches no memory of the
    // parent's other threads.
    unsafe {
        cmd.pre_exec(move || {
            // The socket was made close-on-exec; this end must reach the
            // helper.
            if libc::fcntl(theirs_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(not_runnable)?;
    drop(theirs);
    let received = receive_fd(&ours);
    drop(ours);
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait()?;
    match received {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let err = err.trim();
            let msg = if err.is_empty() {
                format!(
                    "{} failed ({status}) and sent no fd: {e}",
                    program().to_string_lossy()
                )
            } else {
                err.to_string()
            };
            Err(std::io::Error::new(kind_of(err), msg))
        }
    }
}

/// An error kind for fusermount3's message (it exits 1 for everything).
fn kind_of(msg: &str) -> std::io::ErrorKind {
    if msg.contains("Permission denied") || msg.contains("Operation not permitted") {
        std::io::ErrorKind::PermissionDenied
    } else if msg.contains("busy") {
        std::io::ErrorKind::ResourceBusy
    } else {
        std::io::ErrorKind::Other
    }
}

/// The fd fusermount3 sends (SCM_RIGHTS), or why none came.
fn receive_fd(sock: &UnixStream) -> std::io::Result<OwnedFd> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    loop {
        match recvmsg(sock, &mut iov, &mut cmsg, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            r => {
                r?;
                break;
            }
        }
    }
    // Extra fds (none are sent) are owned, and so closed, as they come.
    let mut fd = None;
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for owned in fds {
                fd.get_or_insert(owned);
            }
        }
    }
    fd.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the helper exited without sending the connection",
        )
    })
}

/// Whether /etc/fuse.conf lets users mount with `allow_other`.
pub fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|t| allows_other(&t))
}

/// Whether fuse.conf text has `user_allow_other` on a line of its own
/// (comments, from `#`, and surrounding blanks aside), as fusermount3
/// reads it.
fn allows_other(conf: &str) -> bool {
    conf.lines()
        .any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other")
}

/// The error for `allow_other` asked by a user where fuse.conf forbids it.
pub fn allow_other_refused() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "allow_other: only root may let other users into a FUSE mount unless \
         /etc/fuse.conf has a line `user_allow_other` (an admin adds it); mount without \
         allow_other, or as root",
    )
}

/// Unmounts `mountpoint` with `fusermount3 -u` (`-z`: lazily).
pub fn unmount(mountpoint: &Path, lazy: bool) -> std::io::Result<()> {
    let mut cmd = Command::new(program());
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg("--")
        .arg(mountpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(not_runnable)?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let kind = kind_of(&msg);
    if kind == std::io::ErrorKind::ResourceBusy {
        return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(std::io::Error::new(kind, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_conf_user_allow_other() {
        assert!(allows_other("# comment\nuser_allow_other\n"));
        assert!(allows_other("mount_max = 10\n  user_allow_other  # yes\n"));
        assert!(!allows_other("#user_allow_other\n"));
        assert!(!allows_other("user_allow_other_not\n"));
        assert!(!allows_other(""));
    }

    #[test]
    fn commas_and_backslashes_are_escaped() {
        assert_eq!(escape("/srv/a,b\\c"), "/srv/a\\,b\\\\c");
        assert_eq!(escape("plain"), "plain");
    }
}
