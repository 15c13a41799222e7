//! The one error type of every VOP: a positive POSIX errno.
//!
//! # Why a newtype
//! The FUSE adapter forwards the number to the kernel as it is and the
//! kernel hands it to the application, so the value must be a real errno
//! and never zero. Keeping it a plain `i32` inside a newtype lets file
//! systems write `Err(Errno::ENOENT)` while the type system keeps errnos
//! apart from sizes, offsets and inode numbers.

use std::fmt;

/// A positive POSIX error number.
#[derive(Copy, Clone, Eq, PartialEq, Hash)]
pub struct Errno(i32);

/// The result of every VOP.
pub type VfsResult<T> = Result<T, Errno>;

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Errno = Errno(libc::$name);
            )*

            /// The symbolic name (`"EACCES"`) of the errnos named here.
            pub fn name(self) -> Option<&'static str> {
                // ENOTSUP is EOPNOTSUPP on Linux: the first name wins.
                #[allow(unreachable_patterns)]
                match self.0 {
                    $(libc::$name => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errnos!(
    EPERM,
    ENOENT,
    EIO,
    ENXIO,
    E2BIG,
    EBADF,
    EAGAIN,
    ENOMEM,
    EACCES,
    EBUSY,
    EEXIST,
    EXDEV,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENFILE,
    EMFILE,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    ERANGE,
    ENAMETOOLONG,
    ENOSYS,
    ENOTEMPTY,
    ELOOP,
    ENODATA,
    EOVERFLOW,
    EOPNOTSUPP,
    ESTALE,
    ENOTSUP,
    ENOLCK,
    EINTR,
    EDEADLK,
    ENOTTY,
    EPROTO,
    EBADMSG,
    ENOTCONN,
    ECONNABORTED,
    ETIMEDOUT,
    EUCLEAN,
    EDQUOT,
    ENOMEDIUM,
    EREMOTEIO,
    ECANCELED,
    ETXTBSY,
);

/// The first number past the errnos a caller can be given (the kernel
/// checks a FUSE reply's error against it).
const MAX_ERRNO: i32 = 512;

impl Errno {
    /// Wraps a raw errno; numbers no caller can be given become `EIO`:
    /// zero or negative, and 512 or more (the kernel's own, such as
    /// `ERESTARTSYS`, or made up). FUSE refuses a reply carrying one, and
    /// the request it answers is then never answered: its caller waits
    /// for good, in an uninterruptible sleep over `/dev/fuse`.
    pub fn new(raw: i32) -> Errno {
        if raw > 0 && raw < MAX_ERRNO {
            Errno(raw)
        } else {
            Errno::EIO
        }
    }

    /// The positive errno value.
    pub fn raw(self) -> i32 {
        self.0
    }

    /// The errno of an I/O error (EIO if it carries none).
    pub fn from_io(e: &std::io::Error) -> Errno {
        Errno::new(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<rustix::io::Errno> for Errno {
    fn from(e: rustix::io::Errno) -> Errno {
        Errno::new(e.raw_os_error())
    }
}

impl From<uvfs_vnode::Error> for Errno {
    fn from(e: uvfs_vnode::Error) -> Errno {
        Errno::new(e.errno())
    }
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Errno {
        Errno::from_io(&e)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Errno({} {})",
            self.0,
            std::io::Error::from_raw_os_error(self.0)
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_zero() {
        assert_eq!(Errno::new(0), Errno::EIO);
        assert_eq!(Errno::new(-5), Errno::EIO);
        assert_eq!(Errno::new(libc::ENOENT).raw(), libc::ENOENT);
    }

    #[test]
    fn numbers_no_caller_can_be_given_become_eio() {
        for raw in [0, -5, 512, 600, 4000, i32::MAX] {
            assert_eq!(Errno::new(raw), Errno::EIO, "{raw}");
        }
        assert_eq!(Errno::new(511).raw(), 511);
        assert_eq!(Errno::new(libc::ENOSPC), Errno::ENOSPC);
    }

    #[test]
    fn names() {
        assert_eq!(Errno::EACCES.name(), Some("EACCES"));
        assert_eq!(Errno::ENOTSUP.name(), Some("EOPNOTSUPP"));
        assert_eq!(Errno::new(400).name(), None);
        // What a failing source answers (a corrupt directory, a dead
        // FUSE source) is named in the log too.
        assert_eq!(Errno::new(libc::EBADMSG).name(), Some("EBADMSG"));
        assert_eq!(Errno::new(libc::ENOTCONN).name(), Some("ENOTCONN"));
    }
}
