//! Where a server keeps its runtime files (the control socket).
//!
//! Root's servers use `/run/uvfs`. Other users cannot write there, so
//! theirs use `$XDG_RUNTIME_DIR/uvfs` (the per-user directory a login
//! session has, as sshfs's and rclone's users expect) and, without one (a
//! `su`/`runuser` shell, cron), `/tmp/uvfs-UID`. A directory anyone else
//! controls is refused: a socket there could be swapped for another
//! process's, which would then answer `uvfs stat` in the server's name.

use std::ffi::OsStr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Root's runtime directory.
pub const SYSTEM_DIR: &str = "/run/uvfs";

/// The runtime directories of user `euid`, preferred first, given the
/// value of `XDG_RUNTIME_DIR` (used only if it is an absolute path, as the
/// XDG specification asks).
pub(crate) fn candidates(euid: u32, xdg: Option<&OsStr>) -> Vec<PathBuf> {
    if euid == 0 {
        return vec![PathBuf::from(SYSTEM_DIR)];
    }
    let mut v = Vec::with_capacity(2);
    if let Some(x) = xdg.map(Path::new).filter(|p| p.is_absolute()) {
        v.push(x.join("uvfs"));
    }
    v.push(PathBuf::from(format!("/tmp/uvfs-{euid}")));
    v
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// This process's runtime directories, preferred first.
fn dirs() -> Vec<PathBuf> {
    candidates(euid(), std::env::var_os("XDG_RUNTIME_DIR").as_deref())
}

/// Where `uvfs stat` and `uvfs umount` look for a server of this user:
/// its runtime directories and, where `XDG_RUNTIME_DIR` is unset here (a
/// `su` shell) but may have been set where the server started (a login
/// session), systemd's usual `/run/user/UID/uvfs`.
pub(crate) fn lookup_dirs() -> Vec<PathBuf> {
    let uid = euid();
    let mut v = dirs();
    let guess = PathBuf::from(format!("/run/user/{uid}/uvfs"));
    if uid != 0 && !v.contains(&guess) {
        v.insert(v.len() - 1, guess);
    }
    v
}

/// Where root looks for the server of a mount that user `uid` owns: the
/// directories that user's server may have used, from any kind of shell,
/// each to be trusted only if private to that user ([`trusted`]).
pub(crate) fn dirs_of(uid: u32) -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from(format!("/run/user/{uid}/uvfs"))];
    v.extend(candidates(uid, None));
    v
}

/// The first runtime directory of this process that can be made ready,
/// created if missing (for a server about to bind its socket).
pub(crate) fn create() -> std::io::Result<PathBuf> {
    let uid = euid();
    if uid == 0 {
        std::fs::create_dir_all(SYSTEM_DIR)?;
        return Ok(PathBuf::from(SYSTEM_DIR));
    }
    let mut last = None;
    for dir in dirs() {
        match prepare(&dir, uid) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no runtime directory")))
}

/// Makes `dir` (mode 0700) if missing, and checks that it is a directory,
/// not a symlink, owned by `uid` and closed to everyone else.
pub(crate) fn prepare(dir: &Path, uid: u32) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("runtime directory {}: {e}", dir.display()),
            ))
        }
        _ => {}
    }
    check_private(dir, uid)
}

/// Whether `dir` is a directory (not a symlink) owned by `uid`, with no
/// permissions for group or others; the error says which is not so.
pub(crate) fn check_private(dir: &Path, uid: u32) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    let refuse = |why: String| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "runtime directory {} {why}: refusing to use it (remove it, or set \
                 XDG_RUNTIME_DIR to a directory of your own)",
                dir.display()
            ),
        ))
    };
    if !m.is_dir() {
        return refuse("is not a directory".into());
    }
    if m.uid() != uid {
        return refuse(format!("belongs to uid {}, not {uid}", m.uid()));
    }
    if m.mode() & 0o077 != 0 {
        return refuse(format!("has mode {:o}, not 700", m.mode() & 0o7777));
    }
    Ok(())
}

/// Whether a client of user `uid` may trust what it finds in `dir`:
/// root's directory, or one private to `uid`.
pub(crate) fn trusted(dir: &Path, uid: u32) -> bool {
    dir == Path::new(SYSTEM_DIR) || check_private(dir, uid).is_ok()
}

/// `trusted` for this process's user.
pub(crate) fn trusted_here(dir: &Path) -> bool {
    trusted(dir, euid())
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    euid() == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn root_uses_run_and_users_their_runtime_dir_then_tmp() {
        let x = Some(OsStr::new("/run/user/1000"));
        assert_eq!(candidates(0, x), vec![PathBuf::from("/run/uvfs")]);
        assert_eq!(
            candidates(1000, x),
            vec![
                PathBuf::from("/run/user/1000/uvfs"),
                PathBuf::from("/tmp/uvfs-1000")
            ]
        );
        // Unset, empty or relative: ignored, as the XDG specification says.
        for x in [None, Some(OsStr::new("")), Some(OsStr::new("run/user"))] {
            assert_eq!(candidates(1000, x), vec![PathBuf::from("/tmp/uvfs-1000")]);
        }
    }

    #[test]
    fn root_looks_where_any_shell_of_the_owner_put_its_socket() {
        assert_eq!(
            dirs_of(1000),
            vec![
                PathBuf::from("/run/user/1000/uvfs"),
                PathBuf::from("/tmp/uvfs-1000")
            ]
        );
    }

    #[test]
    fn only_a_private_directory_of_ones_own_is_used() {
        let base = std::env::temp_dir().join(format!("uvfs-rundir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let uid = euid();
        // Missing: made, mode 0700.
        let fresh = base.join("fresh");
        prepare(&fresh, uid).unwrap();
        let m = std::fs::metadata(&fresh).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700);
        assert!(trusted(&fresh, uid));
        // Someone else's.
        let e = prepare(&fresh, uid + 1).unwrap_err().to_string();
        assert!(e.contains("belongs to uid"), "{e}");
        assert!(!trusted(&fresh, uid + 1));
        // Open to others.
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = prepare(&open, uid).unwrap_err().to_string();
        assert!(e.contains("has mode 755"), "{e}");
        // A symlink to a private directory.
        let link = base.join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        let e = prepare(&link, uid).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
        // A parent that does not exist: the error names the directory.
        let e = prepare(&base.join("no/such"), uid).unwrap_err().to_string();
        assert!(e.contains("no/such"), "{e}");
        let _ = std::fs::remove_dir_all(&base);
    }
}
