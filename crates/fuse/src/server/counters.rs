//! What the server counts of the requests it serves: totals, errors,
//! panics, io_uring and offloaded requests, requests per opcode, and the
//! notifications host changes turned into (`changes.rs`). The
//! control socket reports them (`stats.rs`); they live with the server,
//! which bumps them on every request, so that the server needs nothing of
//! the statistics report.

use crate::report::{Counted, Report};
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

/// Declares [`Op`] from `Variant => "name"` pairs, most frequent first.
macro_rules! ops {
    ($($v:ident => $n:literal,)*) => {
        /// A request as the server counts it: the opcode of each handler
        /// (`Server::guard` and the like), `Other` for the rest. An index
        /// into [`OpCounters`], so counting a request is one add.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Op {
            $(
                #[doc = concat!("`", $n, "`")]
                $v,
            )*
        }

        impl Op {
            /// Every opcode, in counter order.
            pub const ALL: &'static [Op] = &[$(Op::$v,)*];

            /// The name in `fuse.requests.op.<name>` and in the log.
            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$v => $n,)*
                }
            }
        }
    };
}

ops! {
    Lookup => "lookup",
    Getattr => "getattr",
    Statx => "statx",
    Readdirplus => "readdirplus",
    Readdir => "readdir",
    Read => "read",
    Write => "write",
    Opendir => "opendir",
    Releasedir => "releasedir",
    Open => "open",
    Release => "release",
    Flush => "flush",
    Create => "create",
    Tmpfile => "tmpfile",
    Mknod => "mknod",
    Mkdir => "mkdir",
    Unlink => "unlink",
    Rmdir => "rmdir",
    Setattr => "setattr",
    Rename => "rename",
    Link => "link",
    Symlink => "symlink",
    Readlink => "readlink",
    Access => "access",
    Statfs => "statfs",
    Fsync => "fsync",
    Fsyncdir => "fsyncdir",
    Fallocate => "fallocate",
    Getxattr => "getxattr",
    Setxattr => "setxattr",
    Listxattr => "listxattr",
    Removexattr => "removexattr",
    CopyFileRange => "copy_file_range",
    Lseek => "lseek",
    Getlk => "getlk",
    Setlk => "setlk",
    Ioctl => "ioctl",
    Other => "other",
}

/// Requests handled per opcode (`fuse.requests.op.<name>`), so a
/// benchmark can tell which requests stand between a workload and the
/// kernel. FORGET is not counted here (see `fuse.nodes.forgotten`).
#[derive(Debug)]
pub struct OpCounters(Box<[AtomicU64]>);

impl Default for OpCounters {
    fn default() -> Self {
        OpCounters(Op::ALL.iter().map(|_| AtomicU64::new(0)).collect())
    }
}

impl OpCounters {
    /// Counts one request of opcode `op`.
    #[inline]
    pub fn bump(&self, op: Op) {
        self.0[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to the opcode named `name` (counts a replaced server
    /// handed over, `upgrade/`); false for a name this build does not
    /// count.
    pub fn add_named(&self, name: &str, n: u64) -> bool {
        match Op::ALL.iter().position(|o| o.name() == name) {
            Some(k) => {
                self.0[k].fetch_add(n, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// `(opcode, requests)` for every opcode.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Op::ALL
            .iter()
            .zip(self.0.iter())
            .map(|(o, c)| (o.name(), c.load(Ordering::Relaxed)))
    }
}

impl Counted for RequestCounters {
    fn report(&self, out: &mut Report) {
        for (name, v, d) in [
            ("fuse.requests", &self.requests, "Requests handled (FORGET excluded)"),
            ("fuse.requests.errors", &self.errors, "Requests answered with an errno"),
            ("fuse.requests.uring", &self.uring, "Requests that came through an io_uring queue (--uring)"),
            ("fuse.requests.offloaded", &self.offloaded, "Requests from an io_uring queue answered from a pool thread: syncs, uncached reads and writes after a stalled one, which may wait for a disk, removals, truncations and last releases of large files, which may wait while the disk frees them, and requests that may wait for inode space"),
            ("fuse.requests.panics", &self.panics, "Handlers that panicked (answered EIO)"),
        ] {
            out.put(name, v.load(Ordering::Relaxed), d);
        }
        for (op, v) in self.by_op.pairs() {
            out.put(
                format!("fuse.requests.op.{op}"),
                v,
                "Requests handled with this opcode",
            );
        }
    }
}

impl Counted for ChangeCounters {
    fn report(&self, out: &mut Report) {
        for (name, v, d) in [
            ("fuse.changes.entries", &self.entries, "Name invalidations sent for changes made behind the kernel's back (repeats included)"),
            ("fuse.changes.inodes", &self.inodes, "Inode invalidations (attributes, contents, directory listings) sent for such changes"),
            ("fuse.changes.repeated", &self.repeated, "Batches of name and inode invalidations sent again because an entry reply may have raced them"),
            ("fuse.changes.everything", &self.everything, "Times every cached name and attribute was invalidated (changes were lost)"),
            ("fuse.changes.failed", &self.failed, "Invalidations the kernel refused (other than for names and inodes it no longer holds)"),
        ] {
            out.put(name, v.load(Ordering::Relaxed), d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_counters_count_by_opcode() {
        let c = OpCounters::default();
        c.bump(Op::Lookup);
        c.bump(Op::Lookup);
        c.bump(Op::Readdirplus);
        c.bump(Op::Other);
        let m: std::collections::HashMap<_, _> = c.pairs().collect();
        assert_eq!(m["lookup"], 2);
        assert_eq!(m["readdirplus"], 1);
        assert_eq!(m["other"], 1);
        assert_eq!(m["getattr"], 0);
        assert_eq!(m.len(), Op::ALL.len());
    }

    #[test]
    fn each_opcode_sits_at_its_own_index() {
        for (k, op) in Op::ALL.iter().enumerate() {
            assert_eq!(*op as usize, k, "{}", op.name());
        }
    }
}
