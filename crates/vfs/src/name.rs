//! Checks on a single path component, shared by every file system.
//!
//! The kernel normally sends only valid names, but a FUSE server must not
//! trust that: a name with `/` or NUL, an empty name or one longer than
//! `NAME_MAX` gets an errno here instead of reaching a directory.

use crate::errno::{Errno, VfsResult};

/// Longest name in bytes (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Longest symlink target in bytes (`PATH_MAX` less its NUL).
pub const SYMLINK_MAX: usize = 4095;

/// Accepts a name that may be created, looked up or removed: non-empty, at
/// most `NAME_MAX` bytes, without `/` or NUL. `.` and `..` pass; each
/// operation decides what they mean for it.
pub fn check_name(name: &[u8]) -> VfsResult<()> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// Accepts a symlink target: non-empty (`ENOENT`, as symlink(2) answers
/// for ""), at most `SYMLINK_MAX` bytes (`ENAMETOOLONG`), without NUL
/// (`EINVAL`).
pub fn check_symlink_target(target: &[u8]) -> VfsResult<()> {
    if target.is_empty() {
        return Err(Errno::ENOENT);
    }
    if target.len() > SYMLINK_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if target.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// True for `.` and `..`.
pub fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// Checks a name for an operation that makes a new entry: `.` and `..`
/// always exist, so making them is `EEXIST`.
pub fn check_new_name(name: &[u8]) -> VfsResult<()> {
    check_name(name)?;
    if is_dot_or_dotdot(name) {
        return Err(Errno::EEXIST);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_targets() {
        assert_eq!(check_symlink_target(b""), Err(Errno::ENOENT));
        assert_eq!(
            check_symlink_target(&[b'a'; SYMLINK_MAX + 1]),
            Err(Errno::ENAMETOOLONG)
        );
        assert_eq!(check_symlink_target(b"a\0b"), Err(Errno::EINVAL));
        assert_eq!(check_symlink_target(&[b'a'; SYMLINK_MAX]), Ok(()));
        assert_eq!(check_symlink_target(b"../x"), Ok(()));
    }

    #[test]
    fn names() {
        assert_eq!(check_name(b""), Err(Errno::EINVAL));
        assert_eq!(check_name(b"a/b"), Err(Errno::EINVAL));
        assert_eq!(check_name(b"a\0"), Err(Errno::EINVAL));
        assert_eq!(check_name(&[b'x'; 256]), Err(Errno::ENAMETOOLONG));
        assert_eq!(check_name(&[b'x'; 255]), Ok(()));
        assert_eq!(check_new_name(b".."), Err(Errno::EEXIST));
    }
}
