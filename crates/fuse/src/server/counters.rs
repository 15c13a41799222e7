//! What the server counts of the requests it serves: totals, errors,
//! panics, io_uring and offloaded requests, requests per opcode, and the
//! notifications host changes turned into (`changes.rs`). The
//! control socket reports them (`stats.rs`); they live with the server,
//! which bumps them on every request, so that the server needs nothing of
//! the statistics report.

use std::sync::atomic::{AtomicU64, Ordering};

/// Request counters.
#[derive(Default, Debug)]
pub struct RequestCounters {
    /// Requests handled.
    pub requests: AtomicU64,
    /// Requests answered with an errno.
    pub errors: AtomicU64,
    /// Handlers that panicked (answered EIO).
    pub panics: AtomicU64,
    /// Requests that came through an io_uring queue (`--uring`).
    pub uring: AtomicU64,
    /// Of those, requests answered from the offload threads
    /// (`offload.rs`).
    pub offloaded: AtomicU64,
    /// Requests handled, per opcode.
    pub by_op: OpCounters,
}

/// Counters of what was sent.
#[derive(Default, Debug)]
pub struct ChangeCounters {
    /// Name invalidations sent (repeats included).
    pub entries: AtomicU64,
    /// Inode invalidations sent.
    pub inodes: AtomicU64,
    /// Batches whose names were sent again (a reply overlapped them).
    pub repeated: AtomicU64,
    /// Times everything was invalidated (changes lost).
    pub everything: AtomicU64,
    /// Notifications the kernel refused with other than ENOENT.
    pub failed: AtomicU64,
}

/// Opcodes counted one by one, most frequent first (the names
/// `Server::guard` is given); anything else counts as `other`.
const OPS: [&str; 37] = [
    "lookup",
    "getattr",
    "readdirplus",
    "readdir",
    "read",
    "write",
    "opendir",
    "releasedir",
    "open",
    "release",
    "flush",
    "create",
    "tmpfile",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "setattr",
    "rename",
    "link",
    "symlink",
    "readlink",
    "access",
    "statfs",
    "fsync",
    "fsyncdir",
    "fallocate",
    "getxattr",
    "setxattr",
    "listxattr",
    "removexattr",
    "copy_file_range",
    "lseek",
    "getlk",
    "setlk",
    "ioctl",
    "other",
];

/// Requests handled per opcode (`fuse.requests.op.<name>`), so a
/// benchmark can tell which requests stand between a workload and the
/// kernel. FORGET is not counted here (see `fuse.nodes.forgotten`).
#[derive(Debug)]
pub struct OpCounters([AtomicU64; OPS.len()]);

impl Default for OpCounters {
    fn default() -> Self {
        OpCounters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl OpCounters {
    /// Counts one request of opcode `what`.
    #[inline]
    pub fn bump(&self, what: &str) {
        let i = OPS.iter().position(|o| *o == what).unwrap_or(OPS.len() - 1);
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// `(opcode, requests)` for every opcode.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        OPS.iter()
            .zip(&self.0)
            .map(|(o, c)| (*o, c.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_counters_count_by_name_and_other() {
        let c = OpCounters::default();
        c.bump("lookup");
        c.bump("lookup");
        c.bump("readdirplus");
        c.bump("no-such-op");
        let m: std::collections::HashMap<_, _> = c.pairs().collect();
        assert_eq!(m["lookup"], 2);
        assert_eq!(m["readdirplus"], 1);
        assert_eq!(m["other"], 1);
        assert_eq!(m["getattr"], 0);
    }

    #[test]
    fn every_handler_has_its_own_counter() {
        let src = [
            include_str!("attrs.rs"),
            include_str!("dirs.rs"),
            include_str!("entries.rs"),
            include_str!("io.rs"),
            include_str!("locks.rs"),
            include_str!("xattrs.rs"),
        ]
        .concat();
        for op in src.split("guard(\"").skip(1) {
            let op = op.split('"').next().unwrap_or("");
            assert!(OPS.contains(&op), "add {op:?} to OPS");
        }
    }
}
