//! What the vnode layer's API can refuse, and why.

use std::fmt;

/// An error from the vnode layer. Each maps to the errno a file server
/// would answer with ([`Error::errno`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The mount was unmounted (or is being unmounted): its vnodes can no
    /// longer be created or looked up.
    MountGone,
    /// Unmount refused: this many vnodes of the mount are still in use or
    /// held. Nothing was torn down beyond the free vnodes.
    Busy {
        /// Vnodes of the mount with a use or hold reference left.
        busy: usize,
    },
    /// The file system's constructor failed with this errno; no cache entry
    /// was left behind and every waiter got the same errno.
    Errno(i32),
    /// The mount given is another layer's (`VnodeLayer::mount` of a
    /// different layer): refused, nothing done.
    ForeignMount,
}

impl Error {
    /// The errno a file server should answer with: always one a caller
    /// can be given (a constructor's 0, negative or out-of-range number
    /// reads as EIO).
    pub fn errno(&self) -> i32 {
        match self {
            Error::MountGone => libc_enodev(),
            Error::Busy { .. } => 16,  // EBUSY
            Error::ForeignMount => 22, // EINVAL
            Error::Errno(e) if (1..512).contains(e) => *e,
            Error::Errno(_) => 5, // EIO
        }
    }
}

/// ENODEV: what Linux answers for an operation on a mount that went away.
const fn libc_enodev() -> i32 {
    19
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::MountGone => write!(f, "the mount is gone (unmounted)"),
            Error::Busy { busy } => write!(
                f,
                "mount busy: {busy} vnode(s) still in use or held (unmount with force to doom them)"
            ),
            Error::Errno(e) => write!(f, "file system error: errno {e}"),
            Error::ForeignMount => write!(f, "the mount given belongs to another vnode layer"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn a_constructors_number_no_caller_can_be_given_reads_as_eio() {
        for e in [0, -5, 512, 600] {
            assert_eq!(Error::Errno(e).errno(), 5, "{e}");
        }
        assert_eq!(Error::Errno(28).errno(), 28);
    }
}
