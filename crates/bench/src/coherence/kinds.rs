//! The kinds of host-side change `uvfs bench coherence` makes, each with
//! what it sets up in the source before a trial, the change itself (made
//! directly in the source, as another program on the host would), and the
//! probe that reads the state through the mount.
//!
//! Every trial uses names of its own (`f3`, `a3`/`b3`, ...), so nothing the
//! kernel cached in an earlier trial (a negative entry, a listing) can make
//! a later one look current or stale.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// What a probe read through the mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// As it was before the change.
    Old,
    /// The change, all of it (a rename: old name gone and new name there).
    New,
    /// Neither (part of a change, or something else): what was seen.
    Other(String),
}

/// A kind of host-side change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Create,
    Unlink,
    Rename,
    Write,
    Overwrite,
    Truncate,
    Chmod,
    Chown,
    Utimes,
    Setxattr,
    Removexattr,
    Link,
    Mkdir,
    Rmdir,
}

/// Contents before and after the write kinds.
const OLD_LEN: usize = 100;
const WRITE_LEN: usize = 200;
const TRUNC_LEN: u64 = 10;
const OLD_MODE: u32 = 0o644;
const NEW_MODE: u32 = 0o600;
/// The owner a `chown` gives (a uid/gid no account uses).
pub const NEW_OWNER: u32 = 4242;
const OLD_MTIME: u64 = 1_000_000_000;
const NEW_MTIME: u64 = 1_500_000_000;
const XATTR: &str = "user.uvfs-coherence";

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Create,
        Kind::Unlink,
        Kind::Rename,
        Kind::Write,
        Kind::Overwrite,
        Kind::Truncate,
        Kind::Chmod,
        Kind::Chown,
        Kind::Utimes,
        Kind::Setxattr,
        Kind::Removexattr,
        Kind::Link,
        Kind::Mkdir,
        Kind::Rmdir,
    ];

    pub const fn name(&self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Unlink => "unlink",
            Kind::Rename => "rename",
            Kind::Write => "write",
            Kind::Overwrite => "overwrite",
            Kind::Truncate => "truncate",
            Kind::Chmod => "chmod",
            Kind::Chown => "chown",
            Kind::Utimes => "utimes",
            Kind::Setxattr => "setxattr",
            Kind::Removexattr => "removexattr",
            Kind::Link => "link",
            Kind::Mkdir => "mkdir",
            Kind::Rmdir => "rmdir",
        }
    }

    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// What the probe reads, for the table.
    pub const fn probe(&self) -> &'static str {
        match self {
            Kind::Create | Kind::Unlink | Kind::Mkdir | Kind::Rmdir => "lstat + readdir",
            Kind::Rename => "lstat both names + readdir",
            Kind::Write => "lstat size + read",
            Kind::Overwrite => "read",
            Kind::Truncate => "lstat size",
            Kind::Chmod => "lstat mode",
            Kind::Chown => "lstat uid/gid",
            Kind::Utimes => "lstat mtime",
            Kind::Setxattr | Kind::Removexattr => "getxattr",
            Kind::Link => "lstat nlink",
        }
    }

    /// The name trial `i` works on (the first name, for a rename).
    fn file(&self, i: usize) -> String {
        match self {
            Kind::Rename => format!("a{i}"),
            Kind::Mkdir | Kind::Rmdir => format!("d{i}"),
            _ => format!("f{i}"),
        }
    }

    /// Makes trial `i`'s starting state in `dir` (the kind's directory in
    /// the source).
    pub fn setup(&self, dir: &Path, i: usize) -> io::Result<()> {
        let p = dir.join(self.file(i));
        match self {
            Kind::Create | Kind::Mkdir => Ok(()),
            Kind::Rmdir => fs::create_dir(&p),
            _ => {
                let mut f = File::create(&p)?;
                f.write_all(&[b'a'; OLD_LEN])?;
                f.set_permissions(fs::Permissions::from_mode(OLD_MODE))?;
                match self {
                    Kind::Utimes => f.set_modified(at(OLD_MTIME))?,
                    Kind::Removexattr => setxattr(&p, b"v")?,
                    _ => {}
                }
                Ok(())
            }
        }
    }

    /// The change, made in the source.
    pub fn change(&self, dir: &Path, i: usize) -> io::Result<()> {
        let p = dir.join(self.file(i));
        match self {
            Kind::Create => File::create(&p).map(drop),
            Kind::Unlink => fs::remove_file(&p),
            Kind::Rename => fs::rename(&p, dir.join(format!("b{i}"))),
            Kind::Write => OpenOptions::new()
                .write(true)
                .open(&p)?
                .write_all(&[b'b'; WRITE_LEN]),
            Kind::Overwrite => OpenOptions::new()
                .write(true)
                .open(&p)?
                .write_all(&[b'b'; OLD_LEN]),
            Kind::Truncate => OpenOptions::new().write(true).open(&p)?.set_len(TRUNC_LEN),
            Kind::Chmod => fs::set_permissions(&p, fs::Permissions::from_mode(NEW_MODE)),
            Kind::Chown => std::os::unix::fs::chown(&p, Some(NEW_OWNER), Some(NEW_OWNER)),
            Kind::Utimes => File::open(&p)?.set_modified(at(NEW_MTIME)),
            Kind::Setxattr => setxattr(&p, format!("v{i}").as_bytes()),
            Kind::Removexattr => removexattr(&p),
            Kind::Link => fs::hard_link(&p, dir.join(format!("l{i}"))),
            Kind::Mkdir => fs::create_dir(&p),
            Kind::Rmdir => fs::remove_dir(&p),
        }
    }

    /// Reads trial `i`'s state through the mount (`dir`: the kind's
    /// directory there). An error the kind cannot explain (EIO, ENOTSUP)
    /// is returned as such.
    pub fn probe_state(&self, dir: &Path, i: usize) -> io::Result<State> {
        let p = dir.join(self.file(i));
        Ok(match self {
            Kind::Create | Kind::Unlink | Kind::Mkdir | Kind::Rmdir => {
                let want_dir = matches!(self, Kind::Mkdir | Kind::Rmdir);
                let there = exists(&p, want_dir)?;
                let listed = listing(dir)?.contains(&self.file(i));
                let present_is_new = matches!(self, Kind::Create | Kind::Mkdir);
                match (there, listed) {
                    (true, true) if present_is_new => State::New,
                    (false, false) if !present_is_new => State::New,
                    (true, true) | (false, false) => State::Old,
                    (t, l) => State::Other(format!("lstat finds it: {t}, readdir lists it: {l}")),
                }
            }
            Kind::Rename => {
                let (a, b) = (self.file(i), format!("b{i}"));
                let (ea, eb) = (exists(&p, false)?, exists(&dir.join(&b), false)?);
                let names = listing(dir)?;
                let (la, lb) = (names.contains(&a), names.contains(&b));
                match (ea, eb, la, lb) {
                    (false, true, false, true) => State::New,
                    (true, false, true, false) => State::Old,
                    _ => State::Other(format!(
                        "lstat old {ea} new {eb}, readdir old {la} new {lb}"
                    )),
                }
            }
            Kind::Write | Kind::Overwrite => {
                let size = fs::symlink_metadata(&p)?.len() as usize;
                let mut data = Vec::new();
                File::open(&p)?.read_to_end(&mut data)?;
                let new_len = if *self == Kind::Write {
                    WRITE_LEN
                } else {
                    OLD_LEN
                };
                let all = |b: u8, n: usize| data.len() == n && data.iter().all(|&x| x == b);
                if (*self == Kind::Overwrite || size == new_len) && all(b'b', new_len) {
                    State::New
                } else if (*self == Kind::Overwrite || size == OLD_LEN) && all(b'a', OLD_LEN) {
                    State::Old
                } else {
                    State::Other(format!("size {size}, read {} bytes", data.len()))
                }
            }
            Kind::Truncate => match fs::symlink_metadata(&p)?.len() {
                TRUNC_LEN => State::New,
                n if n == OLD_LEN as u64 => State::Old,
                n => State::Other(format!("size {n}")),
            },
            Kind::Chmod => match fs::symlink_metadata(&p)?.mode() & 0o7777 {
                NEW_MODE => State::New,
                OLD_MODE => State::Old,
                m => State::Other(format!("mode {m:o}")),
            },
            Kind::Chown => {
                let m = fs::symlink_metadata(&p)?;
                match (m.uid(), m.gid()) {
                    (NEW_OWNER, NEW_OWNER) => State::New,
                    (u, g) if u != NEW_OWNER && g != NEW_OWNER => State::Old,
                    (u, g) => State::Other(format!("uid {u} gid {g}")),
                }
            }
            Kind::Utimes => match fs::symlink_metadata(&p)?.mtime() as u64 {
                NEW_MTIME => State::New,
                OLD_MTIME => State::Old,
                t => State::Other(format!("mtime {t}")),
            },
            Kind::Setxattr | Kind::Removexattr => {
                let new = match self {
                    Kind::Setxattr => Some(format!("v{i}").into_bytes()),
                    _ => None,
                };
                let old = match self {
                    Kind::Setxattr => None,
                    _ => Some(b"v".to_vec()),
                };
                let v = getxattr(&p)?;
                if v == new {
                    State::New
                } else if v == old {
                    State::Old
                } else {
                    State::Other(format!(
                        "xattr {:?}",
                        v.as_deref().map(String::from_utf8_lossy)
                    ))
                }
            }
            Kind::Link => match fs::symlink_metadata(&p)?.nlink() {
                2 => State::New,
                1 => State::Old,
                n => State::Other(format!("nlink {n}")),
            },
        })
    }
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// Whether `p` is there (a directory, if `dir`); ENOENT is "no".
fn exists(p: &Path, dir: bool) -> io::Result<bool> {
    match fs::symlink_metadata(p) {
        Ok(m) => Ok(!dir || m.is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn listing(dir: &Path) -> io::Result<BTreeSet<String>> {
    fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

fn xattr_name() -> CString {
    CString::new(XATTR).expect("no NUL in the attribute's name")
}

fn setxattr(p: &Path, value: &[u8]) -> io::Result<()> {
    let (path, name) = (cpath(p)?, xattr_name());
    // SAFETY: both strings are NUL-terminated and outlive the call; value
    // points at value.len() readable bytes.
    let r = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn removexattr(p: &Path) -> io::Result<()> {
    let (path, name) = (cpath(p)?, xattr_name());
    // SAFETY: both strings are NUL-terminated and outlive the call.
    if unsafe { libc::lremovexattr(path.as_ptr(), name.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The attribute's value; `None` when the file has none (ENODATA).
fn getxattr(p: &Path) -> io::Result<Option<Vec<u8>>> {
    let (path, name) = (cpath(p)?, xattr_name());
    let mut buf = [0u8; 256];
    // SAFETY: both strings are NUL-terminated and outlive the call; buf is
    // writable for buf.len() bytes.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n >= 0 {
        return Ok(Some(buf[..n as usize].to_vec()));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENODATA) {
        Ok(None)
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind, on a plain directory (no mount): setup reads as Old,
    /// the change as New, and a second trial's names are its own.
    #[test]
    fn setup_is_old_and_change_is_new() {
        let root =
            std::env::temp_dir().join(format!("uvfs-coherence-kinds-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let is_root = unsafe_is_root();
        for k in Kind::ALL {
            if k == Kind::Chown && !is_root {
                eprintln!("skipping chown: not root");
                continue;
            }
            let dir = root.join(k.name());
            fs::create_dir_all(&dir).unwrap();
            for i in 0..2 {
                k.setup(&dir, i).unwrap();
                match k.probe_state(&dir, i) {
                    Ok(s) => assert_eq!(s, State::Old, "{} trial {i} before", k.name()),
                    // tmpfs without user xattrs: nothing to check here.
                    Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => break,
                    Err(e) => panic!("{}: {e}", k.name()),
                }
                k.change(&dir, i).unwrap();
                assert_eq!(
                    k.probe_state(&dir, i).unwrap(),
                    State::New,
                    "{} trial {i} after",
                    k.name()
                );
            }
        }
        fs::remove_dir_all(&root).unwrap();
    }

    fn unsafe_is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_half_done_rename_is_neither() {
        let dir =
            std::env::temp_dir().join(format!("uvfs-coherence-rename-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Kind::Rename.setup(&dir, 0).unwrap();
        // Both names there: the new one shows, the old one is not gone.
        fs::hard_link(dir.join("a0"), dir.join("b0")).unwrap();
        assert!(matches!(
            Kind::Rename.probe_state(&dir, 0).unwrap(),
            State::Other(_)
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        assert_eq!(Kind::from_name("teleport"), None);
    }
}
