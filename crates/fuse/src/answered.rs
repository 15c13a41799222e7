//! Which errors answered to the kernel are logged.
//!
//! Most error answers are the file system working as asked: a name that
//! is not there, a lock held by another, an attribute a file does not
//! have. Those are *ordinary* and not logged; every other error answered
//! is logged at `warn` with the request, the node it was about and the
//! errno, so that a source that refuses the server (EACCES, EPERM), a
//! failing disk (EIO), a full one (ENOSPC) or a bug (EINVAL, EBADF, ESTALE
//! on an open file) leaves a trace. The logger's rate limit (per request and errno)
//! keeps a client that repeats a failing request from flooding the log.
//!
//! Ordinary:
//! - names: ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR, ELOOP (a symlink
//!   opened with O_NOFOLLOW), ENAMETOOLONG;
//! - extended attributes: ENODATA (none of that name), ERANGE (the size
//!   probe of a buffer too small);
//! - locks: EAGAIN (held by another), EDEADLK, EINTR (a wait interrupted);
//! - what the kernel or the client falls back from: ENOSYS, EOPNOTSUPP
//!   (an operation or mode not served), EXDEV (a rename, link or copy
//!   across file systems);
//! - EROFS from a read-only server: its promise kept;
//! - EFBIG: a size or offset past what a file may have (the caller's
//!   request, checked before anything changed);
//! - ESTALE to a request naming a node by what the kernel remembers of it
//!   (not an open handle): a file the host removed or replaced behind a
//!   passthrough, which the kernel looks up again (its path walks retry a
//!   stale answer); a host replacing a file while programs open it
//!   through the mount logged a warning per race;
//! - per request: ENOTTY to an IOCTL (a command this file has not: every
//!   `isatty` probe of a file), ENXIO to an LSEEK (`SEEK_DATA` or
//!   `SEEK_HOLE` past the end).

use uvfs_vfs::Errno;

/// Whether answering `e` to request `op` is the file system working as
/// asked.
pub fn ordinary(op: &str, e: Errno, read_only: bool) -> bool {
    const ORDINARY: &[Errno] = &[
        Errno::ENOENT,
        Errno::EEXIST,
        Errno::ENOTEMPTY,
        Errno::ENOTDIR,
        Errno::EISDIR,
        Errno::ELOOP,
        Errno::ENAMETOOLONG,
        Errno::ENODATA,
        Errno::ERANGE,
        Errno::EAGAIN,
        Errno::EDEADLK,
        Errno::EINTR,
        Errno::ENOSYS,
        Errno::EOPNOTSUPP,
        Errno::ENOTSUP,
        Errno::EXDEV,
        Errno::EFBIG,
    ];
    /// Requests on an open handle: ESTALE there is no cue to look again.
    const ON_HANDLE: &[&str] = &[
        "read",
        "write",
        "readdir",
        "readdirplus",
        "fsync",
        "fsyncdir",
        "flush",
        "release",
        "releasedir",
        "fallocate",
        "copy_file_range",
        "lseek",
        "getlk",
        "setlk",
        "ioctl",
    ];
    ORDINARY.contains(&e)
        || (read_only && e == Errno::EROFS)
        || (e == Errno::ESTALE && !ON_HANDLE.contains(&op))
        || (op == "ioctl" && e == Errno::ENOTTY)
        || (op == "lseek" && e == Errno::ENXIO)
}

/// Logs request `op` about node `node` answered `e`, unless ordinary.
pub fn note(op: &str, node: u64, e: Errno, read_only: bool) {
    if ordinary(op, e, read_only) {
        return;
    }
    let name = e.name().unwrap_or("errno");
    log::warn!(
        "{op} on node {node} answered {name} ({})",
        std::io::Error::from_raw_os_error(e.raw())
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_by_the_source_are_not_ordinary() {
        for e in [
            Errno::EACCES,
            Errno::EPERM,
            Errno::EIO,
            Errno::ENOSPC,
            Errno::ESTALE,
        ] {
            assert!(!ordinary("write", e, false), "{e:?}");
        }
        for e in [
            Errno::ENOENT,
            Errno::EEXIST,
            Errno::ENODATA,
            Errno::EAGAIN,
            Errno::EFBIG,
        ] {
            assert!(ordinary("write", e, false), "{e:?}");
        }
        assert!(!ordinary("write", Errno::EROFS, false));
        assert!(ordinary("write", Errno::EROFS, true));
        // Ordinary only as the answer of the request that asks for it.
        assert!(ordinary("ioctl", Errno::ENOTTY, false));
        assert!(!ordinary("read", Errno::ENOTTY, false));
        assert!(ordinary("lseek", Errno::ENXIO, false));
        // A file replaced on the host: the kernel looks it up again.
        assert!(ordinary("open", Errno::ESTALE, false));
        assert!(ordinary("getattr", Errno::ESTALE, false));
        assert!(!ordinary("read", Errno::ESTALE, false));
        assert!(!ordinary("open", Errno::ENXIO, false));
    }
}
