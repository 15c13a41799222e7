//! The uvfs FUSE server: serves any `uvfs_vfs::FileSystem` through the
//! kernel's FUSE interface, using fuser 0.18.
//!
//! # Pieces
//! - `server.rs`: the fuser `Filesystem` implementation (request ->
//!   VOP -> reply).
//! - `nodes.rs`: node id -> (vnode hold, kernel lookup count): the one
//!   place where FUSE's LOOKUP/FORGET protocol becomes vnode holds.
//! - `answered.rs`: which error answers are logged.
//! - `handles.rs`: open files as vnode use references; `backing.rs`
//!   the backing files the kernel reads and writes itself.
//! - `mount.rs`: mounting with several request loops (`n_threads`,
//!   `clone_fd`) or serving a given channel (`serve_fd`), `kmount.rs` mount(2) and unmounting only our own mount (`fusermount.rs` for users without the privilege), `signals.rs` clean unmount on SIGINT/SIGTERM,
//!   `daemon.rs` detaching.
//! - `control.rs` and `stats.rs`: the control socket behind `uvfs stat`,
//!   in the runtime directory of `rundir.rs`; `rusage.rs` the process's
//!   and threads' resource usage they report.
//! - `refresh.rs`: listed directories' attributes fetched again in the
//!   background, so a `stat` after a listing needs no round trip.
//! - `changes.rs`: host changes a file system reports, turned into
//!   the notifications that make the kernel forget exactly those;
//!   `entry_race.rs` tells when a LOOKUP reply may have raced them
//!   (public only under `--cfg loom`, for its model test).
//! - `lockwait.rs` and `offload.rs`: requests answered off the request
//!   loops (lock waits; syncs that wait for a disk), `threads.rs` what
//!   their threads must not inherit.

mod answered;
mod backing;
mod caller_caps;
mod caps;
mod changes;
mod control;
mod convert;
mod daemon;
#[cfg(not(loom))]
mod entry_race;
#[cfg(loom)]
pub mod entry_race;
mod evict;
mod fileattr;
mod fusermount;
mod handles;
mod ioctl;
mod kmount;
mod lockwait;
mod mount;
mod mountinfo;
mod nodes;
mod offload;
mod prune;
mod refresh;
mod release;
mod rundir;
mod rusage;
mod server;
mod signals;
mod stats;
mod sync;
mod threads;
mod uring_offer;
mod write_stall;

pub use caps::has_cap_sys_admin;
pub use control::{answers, fallback_log_path, normalize_mountpoint, query, socket_paths};
pub use daemon::{daemonize, Readiness};
pub use fusermount::{allow_other_refused, user_allow_other};
pub use kmount::unmount_path;
pub use mount::{mount_and_serve, serve, serve_fd, BackgroundMount, ServeConfig, MOUNT_FLAGS};
pub use nodes::ROOT_ID;
pub use refresh::MIN_ATTR_TIMEOUT as MIN_REFRESH_ATTR_TIMEOUT;
pub use release::set_memory_release;
pub use server::{Server, Timeouts, MAX_WRITE};
pub use signals::BlockedSignals;
pub use stats::human as format_stats;
pub use uring_offer::{offer_uring, UringOffer, URING_PARAMETER};

/// Whether this kernel serves FUSE over io_uring (`ServeConfig::uring`):
/// Linux 6.14+ with the `fuse` module's `enable_uring` parameter on.
pub fn uring_available() -> bool {
    fuser::uring_enabled_in_kernel()
}
